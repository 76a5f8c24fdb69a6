//! `/v1/tasks`: list and read tasks and their attempts, create manual tasks, cancel, retry
//! and resend.

use super::input::{Body, check_range, page_object};
use super::{Ctx, Data, Request, missing, to_data};
use crate::clock::parse_instant;
use crate::error::{ApiError, ApiResult};
use crate::store::endpoints::Endpoint;
use crate::store::tasks::{
    NewTask, RetryFilter, StatusFilter, Task, TaskFilter, TaskKind, TaskStatus,
};
use crate::store::{self, Word};
use serde_json::{Value, json};

fn load(ctx: &Ctx<'_>, id: i64) -> ApiResult<Task> {
    ctx.store
        .read(|tx| tx.get_task(ctx.app_id, id))?
        .ok_or_else(|| missing("task", id))
}

pub fn list(ctx: &mut Ctx<'_>, req: &Request) -> ApiResult<Data> {
    let q = &req.query;
    let page = q.page()?;
    let filter = TaskFilter {
        status: q.one_of("status", StatusFilter::ALL)?,
        schedule_id: q.int("schedule_id")?,
        event_id: q.int("event_id")?,
        endpoint_id: q.int("endpoint_id")?,
        task_type: q.one_of("task_type", TaskKind::ALL)?,
    };
    let (total, items) = ctx
        .store
        .read(|tx| tx.list_tasks(ctx.app_id, &filter, page))?;
    page_object(page, total, items)
}

pub fn get(ctx: &mut Ctx<'_>, req: &Request) -> ApiResult<Data> {
    to_data(&load(ctx, req.id())?)
}

pub fn attempts(ctx: &mut Ctx<'_>, req: &Request) -> ApiResult<Data> {
    let page = req.query.page()?;
    let task = load(ctx, req.id())?;
    let (total, items) = ctx.store.read(|tx| tx.list_attempts(task.id, page))?;
    page_object(page, total, items)
}

/// Fields of a task record that the server sets: ignored in a create body (docs/design.md §3). A
/// manual task has no schedule or event, so `schedule_id`, `event_id` and `task_type` are
/// read-only here too.
const READ_ONLY: &[&str] = &[
    "id",
    "app_id",
    "schedule_id",
    "event_id",
    "task_type",
    "status",
    "attempts",
    "max_attempts",
    "next_attempt_at",
    "last_status_code",
    "last_error",
    "finished_at",
    "created_at",
    "updated_at",
];

/// A manual task: to one endpoint of the caller's app (a disabled one is accepted; the task
/// waits), with `payload` (default `{}`), due at `run_at` (default now).
pub fn create(ctx: &mut Ctx<'_>, req: &Request) -> ApiResult<Data> {
    let body = req.json()?;
    let endpoint_id = body.required_int("endpoint_id")?;
    let payload = Value::Object(body.object("payload")?.unwrap_or_default()).to_string();
    let run_at = body_instant(&body, "run_at")?.unwrap_or(ctx.now_ms);
    let endpoint = ctx
        .store
        .read(|tx| tx.get_endpoint(ctx.app_id, endpoint_id))?
        .ok_or_else(|| {
            ApiError::validation(format!(
                "endpoint_id: no endpoint {endpoint_id} in this app"
            ))
        })?;
    body.finish_ignoring(READ_ONLY)?;
    insert_manual(ctx, &endpoint, None, None, &payload, run_at)
}

/// Inserts a `manual` task to `endpoint` (its `max_attempts` from the endpoint's retry policy
/// now), wakes the delivery pool, and returns the new record. The task continues the request's
/// `traceparent` when it carried one, else starts a trace of its own (docs/API.md, "Traces"):
/// a resent task is a new delivery, not a retry of the original's trace.
fn insert_manual(
    ctx: &mut Ctx<'_>,
    endpoint: &Endpoint,
    schedule_id: Option<i64>,
    event_id: Option<i64>,
    payload: &str,
    run_at: i64,
) -> ApiResult<Data> {
    let policy = ctx
        .store
        .read(|tx| tx.effective_policy(endpoint.retry_policy_id))?;
    let traces = &mut *ctx.traces;
    // The reply is the task as created, read in its own transaction: read after the commit it
    // could already show a delivery the pool made meanwhile.
    let task = ctx.store.write(|tx| {
        traces.restart();
        let id = tx.insert_task(&NewTask {
            app_id: ctx.app_id,
            schedule_id,
            event_id,
            endpoint_id: endpoint.id,
            task_type: TaskKind::Manual,
            payload,
            run_at,
            max_attempts: i64::from(policy.max_attempts),
            now_ms: ctx.now_ms,
            trace: traces.for_task(),
        })?;
        tx.get_task(ctx.app_id, id)?
            .ok_or_else(|| missing("task", id))
    })?;
    ctx.app.delivery_wake.notify();
    to_data(&task)
}

/// `POST /tasks/{id}/resend`: a new `manual` task, due now, to the same endpoint with the same
/// payload, whatever the original's status; the original is left as it is. The copy keeps
/// the original's `schedule_id` and `event_id`, so it is listed with them and is sent with the
/// same `X-Service-Event` / `X-Service-Schedule-Id` header (docs/API.md, "Resending a task").
/// 409 when the endpoint has been deleted since.
pub fn resend(ctx: &mut Ctx<'_>, req: &Request) -> ApiResult<Data> {
    req.no_body()?;
    let id = req.id();
    let task = load(ctx, id)?;
    let endpoint = ctx
        .store
        .read(|tx| tx.get_endpoint(ctx.app_id, task.endpoint_id))?
        .ok_or_else(|| {
            ApiError::conflict(format!(
                "task {id} cannot be resent: its endpoint {} was deleted",
                task.endpoint_id
            ))
        })?;
    let payload = task.payload.to_string();
    let now_ms = ctx.now_ms;
    insert_manual(
        ctx,
        &endpoint,
        task.schedule_id,
        task.event_id,
        &payload,
        now_ms,
    )
}

pub fn cancel(ctx: &mut Ctx<'_>, req: &Request) -> ApiResult<Data> {
    req.no_body()?;
    let id = req.id();
    if !ctx
        .store
        .write(|tx| tx.cancel_task(ctx.app_id, id, ctx.now_ms))?
    {
        let task = load(ctx, id)?;
        return Err(ApiError::conflict(format!(
            "task {id} is {}; only a pending task can be canceled",
            task.status
        )));
    }
    to_data(&load(ctx, id)?)
}

/// A failed or canceled task goes back to `pending`, due now, with a fresh count of attempts
/// (`max_attempts` from the endpoint's current retry policy).
pub fn retry(ctx: &mut Ctx<'_>, req: &Request) -> ApiResult<Data> {
    req.no_body()?;
    let id = req.id();
    let task = load(ctx, id)?;
    // The reply is the task as retried, read in the retry's transaction (see `insert_manual`).
    let retried = ctx.store.write(|tx| {
        if tx.retry_tasks(ctx.app_id, &[id], ctx.now_ms)?.is_empty() {
            return Ok::<_, store::StoreError>(None);
        }
        tx.get_task(ctx.app_id, id)
    })?;
    let Some(retried) = retried else {
        return Err(ApiError::conflict(
            if !matches!(task.status, TaskStatus::Failed | TaskStatus::Canceled) {
                format!(
                    "task {id} is {}; only a failed or canceled task can be retried",
                    task.status
                )
            } else if ctx
                .store
                .read(|tx| tx.get_endpoint(ctx.app_id, task.endpoint_id))?
                .is_none()
            {
                format!(
                    "task {id} cannot be retried: its endpoint {} was deleted",
                    task.endpoint_id
                )
            } else {
                format!("task {id} changed state meanwhile; read it and try again")
            },
        ));
    };
    ctx.app.delivery_wake.notify();
    to_data(&retried)
}

/// Tasks one write transaction of a bulk retry moves: 1,000 primary-key updates hold the
/// writer lock for 20–50 ms even on a loaded machine (BENCHMARKS.md, "Bulk retry"), so the
/// dispatcher and the API's writers get it between batches.
const BULK_RETRY_BATCH: usize = 1000;

/// `POST /tasks/retry`: every task matching the filter goes back to `pending` as
/// `POST /tasks/{id}/retry` does (the same store function), at most `--bulk-retry-max`
/// (100,000) per call, `"more": true` when more matched.
///
/// The ids are read first (a read takes no lock), then retried in batches of
/// [`BULK_RETRY_BATCH`], one write transaction each, waking the delivery pool after each, so
/// deliveries interleave with the call instead of waiting for all of it. Each batch re-checks
/// the state, so a task that changed meanwhile is skipped, never retried twice.
pub fn retry_bulk(ctx: &mut Ctx<'_>, req: &Request) -> ApiResult<Data> {
    let body = req.json()?;
    let id_field = |name: &str| -> ApiResult<Option<i64>> {
        let id = body.int(name)?;
        if let Some(id) = id {
            check_range(name, id, 1..=i64::MAX)?;
        }
        Ok(id)
    };
    let endpoint_id = id_field("endpoint_id")?;
    let schedule_id = id_field("schedule_id")?;
    let event_id = id_field("event_id")?;
    let status = match body.str("status")?.as_deref() {
        None | Some("failed") => TaskStatus::Failed,
        Some("canceled") => TaskStatus::Canceled,
        Some(other) => {
            return Err(ApiError::validation(format!(
                "status: must be failed or canceled, not \"{other}\""
            )));
        }
    };
    let since = body_instant(&body, "since")?;
    let until = body_instant(&body, "until")?;
    body.finish()?;
    if let (Some(since), Some(until)) = (since, until)
        && until <= since
    {
        return Err(ApiError::validation("until: must be later than since"));
    }
    if endpoint_id.is_none() && schedule_id.is_none() && event_id.is_none() && since.is_none() {
        return Err(ApiError::validation(
            "endpoint_id, schedule_id, event_id, since: at least one of them is required (a filter, so that one call cannot retry every task by accident)",
        ));
    }
    let filter = RetryFilter {
        status,
        endpoint_id,
        schedule_id,
        event_id,
        since,
        until,
    };
    let max = ctx.app.config.bulk_retry_max;
    let mut ids = ctx
        .store
        .read(|tx| tx.retryable_task_ids(ctx.app_id, &filter, max + 1))?;
    let more = ids.len() > max;
    ids.truncate(max);
    let mut count = 0;
    for batch in ids.chunks(BULK_RETRY_BATCH) {
        let now_ms = ctx.app.clock.now().timestamp_millis();
        let retried = ctx
            .store
            .write(|tx| tx.retry_tasks(ctx.app_id, batch, now_ms))?;
        count += retried.len();
        if !retried.is_empty() {
            ctx.app.delivery_wake.notify();
        }
    }
    let mut data = json!({ "count": count });
    if more {
        data["more"] = json!(true);
    }
    Ok(data.into())
}

/// An optional instant field: an RFC 3339 string or epoch seconds, in store milliseconds.
pub(super) fn body_instant(body: &Body, field: &str) -> ApiResult<Option<i64>> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => parse_instant(value)
            .map(|t| Some(t.timestamp_millis()))
            .ok_or_else(|| {
                ApiError::validation(format!(
                    "{field}: must be an RFC 3339 time (2026-11-21T21:00:00Z) or epoch seconds, in the years 0001 to 9999"
                ))
            }),
    }
}
