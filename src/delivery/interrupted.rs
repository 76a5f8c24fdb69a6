//! Attempts cut short by shutdown. A send still under way when the shutdown grace ends may
//! well have reached its receiver, so it is recorded like any other attempt — error
//! "interrupted by shutdown", no status code, counted in the task's attempts — and its task
//! goes back to `pending`, due after the policy's retry delay (or at once when that attempt
//! was the last the policy allows: the shutdown cut it short, not the receiver, so the task
//! gets one more try after the restart). No task is left `running` by a clean stop.

use crate::app::App;
use crate::store::tasks::{AfterAttempt, Claimed};
use crate::store::{StoreError, attempts::Attempt};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::send::Target;

/// The error recorded for an interrupted attempt.
pub const ERROR: &str = "interrupted by shutdown";

/// A send under way.
struct Sending {
    task: Claimed,
    target: Arc<Target>,
    /// Epoch ms when the worker took it.
    started_at: i64,
}

/// The sends under way, by task id: a worker registers each before sending and removes it
/// once its result is handed to the dispatcher.
#[derive(Default)]
pub(crate) struct InFlight(Mutex<HashMap<i64, Sending>>);

impl InFlight {
    pub(crate) fn begin(&self, task: &Claimed, target: &Arc<Target>, started_at: i64) {
        let sending = Sending {
            task: task.clone(),
            target: target.clone(),
            started_at,
        };
        self.lock().insert(task.id, sending);
    }

    pub(crate) fn end(&self, task_id: i64) {
        self.lock().remove(&task_id);
    }

    /// The tasks being sent now.
    pub(crate) fn task_ids(&self) -> Vec<i64> {
        self.lock().keys().copied().collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<i64, Sending>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// After the grace: records every send still under way as an interrupted attempt and
    /// hands its task back to `pending` (see the module doc). Results committed meanwhile win:
    /// a task no longer `running` is left as it is. Returns how many were recorded.
    pub(crate) fn record_at_shutdown(&self, app: &App) -> Result<usize, StoreError> {
        let cut: Vec<Sending> = self.lock().drain().map(|(_, s)| s).collect();
        if cut.is_empty() {
            return Ok(0);
        }
        let now = app.clock.now_ms();
        app.store.write(|tx| {
            let mut recorded = 0;
            for s in &cut {
                let task = &s.task;
                let after = AfterAttempt::RetryAt(if task.attempt < task.max_attempts {
                    let failed = u32::try_from(task.attempt).unwrap_or(u32::MAX);
                    let delay_ms = s
                        .target
                        .policy
                        .next_delay_secs(failed, None)
                        .saturating_mul(1000);
                    now.saturating_add(i64::try_from(delay_ms).unwrap_or(i64::MAX))
                } else {
                    now
                });
                if !tx.finish_attempt(task.id, task.attempt, after, None, Some(ERROR), now)? {
                    continue;
                }
                tx.insert_attempt(&Attempt {
                    id: 0,
                    task_id: task.id,
                    attempt: task.attempt,
                    started_at: s.started_at,
                    duration_ms: (now - s.started_at).max(0),
                    status_code: None,
                    error: Some(ERROR.to_string()),
                    response_body: None,
                    // The headers are built by the send still under way, which this list
                    // does not see (docs/API.md, "Attempt").
                    request_headers: None,
                })?;
                tracing::warn!(
                    task_id = task.id,
                    trace_id = %task.trace_id_hex(),
                    endpoint_id = s.target.endpoint_id,
                    attempt = task.attempt,
                    "delivery attempt interrupted by shutdown; the task is pending again"
                );
                recorded += 1;
            }
            Ok(recorded)
        })
    }
}
