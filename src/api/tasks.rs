//! `/v1/tasks`: list and read tasks and their attempts, create manual tasks, cancel and retry.

use super::input::page_object;
use super::{Ctx, Request, missing, to_data};
use crate::clock::parse_instant;
use crate::error::{ApiError, ApiResult};
use crate::store::{self, tasks::NewTask, tasks::Task, tasks::TaskFilter};
use serde_json::Value;

fn load(ctx: &Ctx<'_>, id: i64) -> ApiResult<Task> {
    store::tasks::get(ctx.conn, ctx.app_id, id)?.ok_or_else(|| missing("task", id))
}

pub fn list(ctx: &mut Ctx<'_>, req: &Request) -> ApiResult<Value> {
    let q = &req.query;
    let page = q.page()?;
    let filter = TaskFilter {
        status: q.one_of("status", &store::tasks::STATUSES)?,
        schedule_id: q.int("schedule_id")?,
        event_id: q.int("event_id")?,
        endpoint_id: q.int("endpoint_id")?,
        task_type: q.one_of("task_type", &store::tasks::TASK_TYPES)?,
    };
    let (total, items) = store::tasks::list(ctx.conn, ctx.app_id, &filter, page)?;
    page_object(page, total, items)
}

pub fn get(ctx: &mut Ctx<'_>, req: &Request) -> ApiResult<Value> {
    to_data(&load(ctx, req.id())?)
}

pub fn attempts(ctx: &mut Ctx<'_>, req: &Request) -> ApiResult<Value> {
    let page = req.query.page()?;
    let task = load(ctx, req.id())?;
    let (total, items) = store::attempts::list(ctx.conn, task.id, page)?;
    page_object(page, total, items)
}

/// Fields of a task record that the server sets: ignored in a create body (contract §3). A
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
pub fn create(ctx: &mut Ctx<'_>, req: &Request) -> ApiResult<Value> {
    let body = req.json()?;
    let endpoint_id = body.required_int("endpoint_id")?;
    let payload = Value::Object(body.object("payload")?.unwrap_or_default()).to_string();
    let run_at = match body.get("run_at") {
        None | Some(Value::Null) => ctx.now_ms,
        Some(value) => parse_instant(value)
            .ok_or_else(|| {
                ApiError::validation(
                    "run_at: must be an RFC 3339 time (2026-11-21T21:00:00Z) or epoch seconds, in years 0001 to 9999",
                )
            })?
            .timestamp_millis(),
    };
    let endpoint = store::endpoints::get(ctx.conn, ctx.app_id, endpoint_id)?.ok_or_else(|| {
        ApiError::validation(format!(
            "endpoint_id: no endpoint {endpoint_id} in this app"
        ))
    })?;
    let policy = store::policies::effective(ctx.conn, endpoint.retry_policy_id)?;
    body.finish_ignoring(READ_ONLY)?;
    let id = store::tasks::insert(
        ctx.conn,
        &NewTask {
            app_id: ctx.app_id,
            schedule_id: None,
            event_id: None,
            endpoint_id,
            task_type: "manual",
            payload: &payload,
            run_at,
            max_attempts: i64::from(policy.max_attempts),
            now_ms: ctx.now_ms,
        },
    )?;
    ctx.app.delivery_wake.notify();
    to_data(&load(ctx, id)?)
}

pub fn cancel(ctx: &mut Ctx<'_>, req: &Request) -> ApiResult<Value> {
    req.no_body()?;
    let id = req.id();
    if !store::tasks::cancel(ctx.conn, ctx.app_id, id, ctx.now_ms)? {
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
pub fn retry(ctx: &mut Ctx<'_>, req: &Request) -> ApiResult<Value> {
    req.no_body()?;
    let id = req.id();
    let task = load(ctx, id)?;
    if task.status != "failed" && task.status != "canceled" {
        return Err(ApiError::conflict(format!(
            "task {id} is {}; only a failed or canceled task can be retried",
            task.status
        )));
    }
    let endpoint =
        store::endpoints::get(ctx.conn, ctx.app_id, task.endpoint_id)?.ok_or_else(|| {
            ApiError::conflict(format!(
                "task {id} cannot be retried: its endpoint {} was deleted",
                task.endpoint_id
            ))
        })?;
    let policy = store::policies::effective(ctx.conn, endpoint.retry_policy_id)?;
    let max_attempts = i64::from(policy.max_attempts);
    if !store::tasks::retry(ctx.conn, ctx.app_id, id, max_attempts, ctx.now_ms)? {
        return Err(ApiError::conflict(format!(
            "task {id} changed state meanwhile; read it and try again"
        )));
    }
    ctx.app.delivery_wake.notify();
    to_data(&load(ctx, id)?)
}
