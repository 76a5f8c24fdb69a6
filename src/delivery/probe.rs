//! `POST /endpoints/{id}/test` (contract §11): one real delivery to an endpoint, now, with
//! every header and signature of a pool delivery, recorded as a `manual` task with a single
//! attempt. It goes through the pool's own send, judge and record code; only the claim differs
//! (the task is created `running`, so the pool never picks it up meanwhile).

use super::{Done, attempt, health, record, send};
use crate::app::App;
use crate::clock::rfc3339;
use crate::retry::RetryPolicy;
use crate::store::{self, StoreError, attempts::Attempt, endpoints::Endpoint, tasks::Claimed};

/// What a test delivery made: its task and its one attempt.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Probe {
    pub task_id: i64,
    pub attempt: Attempt,
}

/// Sends the test payload to `endpoint` (enabled or not) and waits for the reply, at most the
/// endpoint's `timeout_ms`. Blocking: call it off the async threads (API handlers run on
/// blocking threads). A failed test is recorded like any failed attempt (a `410 Gone` disables
/// the endpoint too) but produces no operator event: its caller sees the result.
pub fn run(
    app: &App,
    endpoint: &Endpoint,
    traces: &mut crate::trace::TaskTraces,
) -> anyhow::Result<Probe> {
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
    let target = send::Target::new(endpoint, policy);
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
    };
    let agent = send::agent(&app.config);
    let done: Done = attempt(app, &agent, &target, task, true);
    let rules = health::Rules::from_hours(app.config.disable_failing_after_hours);
    app.store
        .write(|tx| record(tx, std::slice::from_ref(&done), &rules))?;
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
