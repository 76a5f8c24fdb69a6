//! `POST /endpoints/{id}/test` (docs/design.md §11): one real delivery to an endpoint, now, with
//! every header and signature of a pool delivery, recorded as a `manual` task with a single
//! attempt. It is sent by the pool's senders, admitted by the dispatcher through the same fair
//! accounting as claimed tasks (the endpoint's cap, its app's share), and judged and recorded
//! by the pool's own code; only the claim differs (the task is created `running`, so the pool
//! never picks it up meanwhile). Each app may have [`TESTS_PER_APP`] test deliveries in flight;
//! beyond that the request is refused at once (429).

use super::{Done, health, record, send};
use crate::app::App;
use crate::clock::rfc3339;
use crate::retry::RetryPolicy;
use crate::store::tasks::{Claimed, IfBusy};
use crate::store::{self, StoreError, attempts::Attempt, endpoints::Endpoint};
use std::collections::HashMap;
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// Most test deliveries of one app in flight at once (waiting for room or being sent).
pub const TESTS_PER_APP: usize = 8;

/// What a test delivery made: its task and its one attempt.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Probe {
    pub task_id: i64,
    pub attempt: Attempt,
}

/// Why a test delivery was not made.
#[derive(Debug)]
pub enum ProbeError {
    /// The app has [`TESTS_PER_APP`] test deliveries in flight already.
    Busy,
    /// The delivery pool is not running (stopping).
    Stopped,
    /// The delivery pool has not finished starting (it waits for the database to answer).
    Starting,
    Other(anyhow::Error),
}

impl From<StoreError> for ProbeError {
    fn from(e: StoreError) -> Self {
        ProbeError::Other(e.into())
    }
}

impl From<anyhow::Error> for ProbeError {
    fn from(e: anyhow::Error) -> Self {
        ProbeError::Other(e)
    }
}

/// A test delivery waiting for the dispatcher to admit it.
pub(crate) struct Waiting {
    pub app_id: String,
    pub max_in_flight: Option<i64>,
    pub task: Claimed,
    pub target: Arc<send::Target>,
    pub reply: mpsc::Sender<Done>,
}

/// The test deliveries handed to the pool, and how many each app has in flight.
#[derive(Default)]
pub struct Probes {
    state: Mutex<ProbeState>,
    /// Signalled when the pool opens or closes.
    phase_changed: Condvar,
}

#[derive(Default)]
struct ProbeState {
    phase: Phase,
    waiting: Vec<Waiting>,
    per_app: HashMap<String, usize>,
}

/// Where the delivery pool is, as test deliveries see it.
#[derive(Default, Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    /// Not yet admitting: the pool's start-up recovery, which hands every task left `running`
    /// back to `pending`, has not run yet, and would hand back a test delivery's task too.
    #[default]
    Starting,
    /// Admitting test deliveries.
    Open,
    /// Stopped for good.
    Closed,
}

/// How long a test delivery waits for the pool to finish starting (it waits for the database
/// to answer first) before it is refused.
const START_WAIT: Duration = Duration::from_secs(5);

impl Probes {
    fn lock(&self) -> MutexGuard<'_, ProbeState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The pool started and recovered the tasks of the last stop: test deliveries may start.
    pub(crate) fn open(&self) {
        let mut state = self.lock();
        if state.phase == Phase::Starting {
            state.phase = Phase::Open;
        }
        self.phase_changed.notify_all();
    }

    /// The pool stops: waiting test deliveries are dropped (their callers are told).
    pub(crate) fn close(&self) {
        let mut state = self.lock();
        state.phase = Phase::Closed;
        state.waiting.clear();
        self.phase_changed.notify_all();
    }

    /// Waits (at most `limit`) until the pool admits test deliveries.
    fn wait_open(&self, limit: Duration) -> Result<(), ProbeError> {
        let state = self.lock();
        let (state, _) = self
            .phase_changed
            .wait_timeout_while(state, limit, |s| s.phase == Phase::Starting)
            .unwrap_or_else(|e| e.into_inner());
        match state.phase {
            Phase::Open => Ok(()),
            Phase::Starting => Err(ProbeError::Starting),
            Phase::Closed => Err(ProbeError::Stopped),
        }
    }

    /// The test deliveries waiting to be admitted, oldest first.
    pub(crate) fn take_waiting(&self) -> Vec<Waiting> {
        std::mem::take(&mut self.lock().waiting)
    }

    /// Test deliveries that found no room this round wait for the next, ahead of newer ones.
    pub(crate) fn put_back(&self, mut waiting: Vec<Waiting>) {
        let mut state = self.lock();
        if state.phase == Phase::Open && !waiting.is_empty() {
            waiting.append(&mut state.waiting);
            state.waiting = waiting;
        }
    }

    /// Counts one more test delivery of `app_id`, unless it has [`TESTS_PER_APP`] already.
    fn enter<'a>(&'a self, app_id: &str) -> Option<Ticket<'a>> {
        let mut state = self.lock();
        let n = state.per_app.entry(app_id.to_string()).or_default();
        if *n >= TESTS_PER_APP {
            return None;
        }
        *n += 1;
        Some(Ticket {
            probes: self,
            app_id: app_id.to_string(),
        })
    }

    fn submit(&self, waiting: Waiting) -> Result<(), ProbeError> {
        let mut state = self.lock();
        if state.phase != Phase::Open {
            return Err(ProbeError::Stopped);
        }
        state.waiting.push(waiting);
        Ok(())
    }
}

/// One test delivery counted against its app's bound until dropped.
struct Ticket<'a> {
    probes: &'a Probes,
    app_id: String,
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        let mut state = self.probes.lock();
        if let Some(n) = state.per_app.get_mut(&self.app_id) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                state.per_app.remove(&self.app_id);
            }
        }
    }
}

/// Sends the test payload to `endpoint` (enabled or not) through the delivery pool and waits
/// for the reply, at most the endpoint's `timeout_ms` once a sender has it (longer while its
/// endpoint or app has no room). Blocking: call it off the async threads (API handlers run
/// on blocking threads). A failed test is recorded like any failed attempt (a `410 Gone`
/// disables the endpoint too) but produces no operator event: its caller sees the result.
pub fn run(
    app: &App,
    endpoint: &Endpoint,
    traces: &mut crate::trace::TaskTraces,
) -> Result<Probe, ProbeError> {
    let _ticket = app.probes.enter(&endpoint.app_id).ok_or(ProbeError::Busy)?;
    app.probes.wait_open(START_WAIT)?;
    let now_ms = app.clock.now_ms();
    let payload = serde_json::json!({
        "type": "webhookd.test",
        "endpoint_id": endpoint.id,
        "sent_at": rfc3339(now_ms),
    })
    .to_string();
    let trace = traces.for_task();
    let task_id = app.store.write(|tx| {
        let id = tx.insert_task(&store::tasks::NewTask {
            app_id: &endpoint.app_id,
            schedule_id: None,
            event_id: None,
            endpoint_id: endpoint.id,
            task_type: crate::store::tasks::TaskKind::Manual,
            payload: &payload,
            run_at: now_ms,
            max_attempts: 1,
            now_ms,
            trace,
        })?;
        tx.start_task_now(id, now_ms)?;
        Ok::<_, StoreError>(id)
    })?;
    let policy = RetryPolicy {
        max_attempts: 1,
        ..RetryPolicy::DEFAULT
    };
    let task = Claimed {
        id: task_id,
        endpoint_id: endpoint.id,
        schedule_id: None,
        event_id: None,
        event_name: None,
        payload,
        attempt: 1,
        max_attempts: 1,
        app_id: endpoint.app_id.clone(),
        due_at: now_ms,
        trace: Some(trace),
        target_generation: None,
    };
    let (reply, done) = mpsc::channel();
    app.probes.submit(Waiting {
        app_id: endpoint.app_id.clone(),
        max_in_flight: endpoint.max_in_flight,
        task,
        target: Arc::new(send::Target::new(endpoint, policy)),
        reply,
    })?;
    app.delivery_wake.notify();
    // The pool drops a test delivery it will not send (shutdown); the task is `running` and
    // goes back to `pending` with the others.
    let done: Done = done.recv().map_err(|_| ProbeError::Stopped)?;
    let rules = health::Rules::from_hours(app.config.disable_failing_after_hours);
    app.store.write(|tx| {
        let none = health::Carried::default();
        record(tx, std::slice::from_ref(&done), &none, &rules, IfBusy::Wait)
    })?;
    let page = store::Page {
        page: 1,
        page_size: 1,
    };
    let (_, attempts) = app.store.read(|tx| tx.list_attempts(task_id, page))?;
    let attempt = attempts
        .into_iter()
        .next()
        .ok_or_else(|| anyhow::anyhow!("test delivery of task {task_id} was not recorded"))?;
    Ok(Probe { task_id, attempt })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A test delivery waits for the pool's start-up recovery (which would hand its task back)
    /// and is refused once the pool has stopped; a pool stopped while starting stays stopped.
    #[test]
    fn test_deliveries_wait_for_the_pool_to_open() {
        let probes = Arc::new(Probes::default());
        assert!(matches!(
            probes.wait_open(Duration::from_millis(1)),
            Err(ProbeError::Starting)
        ));
        let waiter = {
            let probes = probes.clone();
            std::thread::spawn(move || probes.wait_open(Duration::from_secs(600)))
        };
        probes.open();
        assert!(waiter.join().unwrap().is_ok());
        probes.close();
        assert!(matches!(
            probes.wait_open(Duration::ZERO),
            Err(ProbeError::Stopped)
        ));

        let stopped_while_starting = Probes::default();
        stopped_while_starting.close();
        stopped_while_starting.open();
        assert!(matches!(
            stopped_while_starting.wait_open(Duration::ZERO),
            Err(ProbeError::Stopped)
        ));
    }
}
