//! SQLite SQL of the `tasks` table (records in `store::tasks`).

use crate::store::Page;
use crate::store::sqlite::Filters;
#[allow(unused_imports)]
use crate::store::tasks::*;
use rusqlite::{Connection, OptionalExtension, Row, params};

pub const COLUMNS: &str = "id, app_id, schedule_id, event_id, endpoint_id, task_type, payload, status, run_at, attempts, max_attempts, next_attempt_at, last_status_code, last_error, finished_at, created_at, updated_at";

pub fn from_row(r: &Row<'_>) -> rusqlite::Result<Task> {
    let payload: String = r.get(6)?;
    Ok(Task {
        id: r.get(0)?,
        app_id: r.get(1)?,
        schedule_id: r.get(2)?,
        event_id: r.get(3)?,
        endpoint_id: r.get(4)?,
        task_type: r.get(5)?,
        payload: serde_json::from_str(&payload).unwrap_or_default(),
        status: r.get(7)?,
        run_at: r.get(8)?,
        attempts: r.get(9)?,
        max_attempts: r.get(10)?,
        next_attempt_at: r.get(11)?,
        last_status_code: r.get(12)?,
        last_error: r.get(13)?,
        finished_at: r.get(14)?,
        created_at: r.get(15)?,
        updated_at: r.get(16)?,
    })
}

/// Inserts a pending task and returns its id. Use inside the caller's transaction when
/// creating several (fan-out), so they commit together.
pub fn insert(conn: &Connection, t: &NewTask<'_>) -> rusqlite::Result<i64> {
    conn.prepare_cached(
        "INSERT INTO tasks (app_id, schedule_id, event_id, endpoint_id, task_type, payload, status, run_at,
                            attempts, max_attempts, next_attempt_at, created_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'pending', ?7, 0, ?8, ?7, ?9, ?9)",
    )?
    .execute(params![
        t.app_id,
        t.schedule_id,
        t.event_id,
        t.endpoint_id,
        t.task_type,
        t.payload,
        t.run_at,
        t.max_attempts,
        t.now_ms
    ])?;
    Ok(conn.last_insert_rowid())
}

pub fn get(conn: &Connection, app_id: &str, id: i64) -> rusqlite::Result<Option<Task>> {
    conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM tasks WHERE app_id = ?1 AND id = ?2"
    ))?
    .query_row(params![app_id, id], from_row)
    .optional()
}

/// One page, newest first, and the total count of matches.
pub fn list(
    conn: &Connection,
    app_id: &str,
    f: &TaskFilter,
    page: Page,
) -> rusqlite::Result<(i64, Vec<Task>)> {
    // `retrying` is written as the exact condition of the partial index `tasks_retrying`, so
    // SQLite reads that index instead of every pending task of the app.
    let (status, retrying) = match f.status.as_deref() {
        Some("retrying") => (None, true),
        other => (other, false),
    };
    let mut filters = Filters::app(app_id);
    if retrying {
        filters = filters.always("status = 'pending' AND attempts > 0");
    }
    let filters = filters
        .eq_known("status", status, &STATUSES)
        .eq("schedule_id", f.schedule_id)
        .eq("event_id", f.event_id)
        .eq("endpoint_id", f.endpoint_id)
        .eq_known("task_type", f.task_type.as_deref(), &TASK_TYPES);
    super::list_page(conn, "tasks", COLUMNS, &filters, page, from_row)
}

/// What a claim returns of each task; `claimed_from` reads it in this order.
const CLAIM_RETURNING: &str = "RETURNING id, endpoint_id, schedule_id, event_id,
    (SELECT event_name FROM events WHERE events.id = tasks.event_id),
    payload, attempts + 1, max_attempts, next_attempt_at, run_at";

fn claimed_from(r: &Row<'_>) -> rusqlite::Result<((i64, i64), Claimed)> {
    Ok((
        (r.get(8)?, r.get(9)?),
        Claimed {
            id: r.get(0)?,
            endpoint_id: r.get(1)?,
            schedule_id: r.get(2)?,
            event_id: r.get(3)?,
            event_name: r.get(4)?,
            payload: r.get(5)?,
            attempt: r.get(6)?,
            max_attempts: r.get(7)?,
        },
    ))
}

/// The first endpoint after `after` (by id) that has pending tasks, and when its earliest one
/// is due: one seek in `tasks_endpoint_due`, so walking every endpoint with pending work costs
/// one seek per endpoint, however many tasks each holds.
pub fn next_endpoint_with_pending(
    conn: &Connection,
    after: i64,
) -> rusqlite::Result<Option<(i64, i64)>> {
    conn.prepare_cached(
        "SELECT endpoint_id, next_attempt_at FROM tasks INDEXED BY tasks_endpoint_due
         WHERE status = 'pending' AND endpoint_id > ?1 AND next_attempt_at IS NOT NULL
         ORDER BY endpoint_id, next_attempt_at LIMIT 1",
    )?
    .query_row(params![after], |r| Ok((r.get(0)?, r.get(1)?)))
    .optional()
}

/// The head of an in-order endpoint: its pending task that became due first (ties by id), and
/// when it is due now (later than the others when it waits to retry).
pub fn in_order_head(conn: &Connection, endpoint_id: i64) -> rusqlite::Result<Option<(i64, i64)>> {
    conn.prepare_cached(
        "SELECT id, next_attempt_at FROM tasks INDEXED BY tasks_endpoint_order
         WHERE status = 'pending' AND endpoint_id = ?1 ORDER BY run_at, id LIMIT 1",
    )?
    .query_row(params![endpoint_id], |r| {
        Ok((r.get(0)?, r.get::<_, Option<i64>>(1)?.unwrap_or(i64::MAX)))
    })
    .optional()
}

/// Marks up to `limit` due tasks of one endpoint `running` and returns them, earliest due first
/// (ties by id). `attempts` is only counted when the attempt's result is recorded, so a claim
/// lost to a crash costs no attempt. The caller has checked the endpoint is enabled.
///
/// `LIMIT ?3 + 0`, not `LIMIT ?3`: SQLite plans with the value bound to a bare `LIMIT`
/// parameter, so rebinding it re-prepares the statement on every run.
pub fn claim_endpoint(
    conn: &Connection,
    endpoint_id: i64,
    now_ms: i64,
    limit: usize,
) -> rusqlite::Result<Vec<Claimed>> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let mut claimed = conn
        .prepare_cached(&format!(
            "UPDATE tasks SET status = 'running', updated_at = ?2
             WHERE id IN (SELECT id FROM tasks INDEXED BY tasks_endpoint_due
                          WHERE status = 'pending' AND endpoint_id = ?1 AND next_attempt_at <= ?2
                          ORDER BY next_attempt_at, id LIMIT ?3 + 0)
             {CLAIM_RETURNING}"
        ))?
        .query_map(params![endpoint_id, now_ms, limit], claimed_from)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    claimed.sort_by_key(|((due, _), c)| (*due, c.id));
    Ok(claimed.into_iter().map(|(_, c)| c).collect())
}

/// Claims one task by id if it is still pending and due (an in-order endpoint's head).
pub fn claim_one(conn: &Connection, id: i64, now_ms: i64) -> rusqlite::Result<Option<Claimed>> {
    conn.prepare_cached(&format!(
        "UPDATE tasks SET status = 'running', updated_at = ?2
         WHERE id = ?1 AND status = 'pending' AND next_attempt_at <= ?2
         {CLAIM_RETURNING}"
    ))?
    .query_row(params![id, now_ms], claimed_from)
    .optional()
    .map(|c| c.map(|(_, c)| c))
}

/// Records the result of attempt `attempt` on a `running` task. A task whose endpoint was
/// deleted while it was in flight is `canceled` instead of going back to `pending`. Returns
/// false (and changes nothing) when the task is no longer `running` — e.g. it was handed back
/// at shutdown — so the caller leaves the attempt unrecorded, and it will be made again.
pub fn finish_attempt(
    conn: &Connection,
    task_id: i64,
    attempt: i64,
    after: AfterAttempt,
    last_status_code: Option<i64>,
    last_error: Option<&str>,
    now_ms: i64,
) -> rusqlite::Result<bool> {
    let (status, next_attempt_at) = match after {
        AfterAttempt::Success => ("success", None),
        AfterAttempt::RetryAt(at) => ("pending", Some(at)),
        AfterAttempt::Failed => ("failed", None),
    };
    let n = conn
        .prepare_cached(
            "UPDATE tasks SET
                status = CASE WHEN ?2 = 'pending' AND NOT EXISTS
                    (SELECT 1 FROM endpoints e WHERE e.id = tasks.endpoint_id) THEN 'canceled' ELSE ?2 END,
                finished_at = CASE WHEN ?2 != 'pending' OR NOT EXISTS
                    (SELECT 1 FROM endpoints e WHERE e.id = tasks.endpoint_id) THEN ?7 END,
                next_attempt_at = CASE WHEN EXISTS
                    (SELECT 1 FROM endpoints e WHERE e.id = tasks.endpoint_id) THEN ?4 END,
                attempts = ?3, last_status_code = ?5, last_error = ?6, updated_at = ?7
             WHERE id = ?1 AND status = 'running'",
        )?
        .execute(params![
            task_id,
            status,
            attempt,
            next_attempt_at,
            last_status_code,
            last_error,
            now_ms
        ])?;
    Ok(n == 1)
}

/// Marks a task just inserted in the caller's transaction as `running`, so the delivery pool
/// never claims it (`POST /endpoints/{id}/test` sends it itself).
pub fn start_now(conn: &Connection, id: i64, now_ms: i64) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "UPDATE tasks SET status = 'running', updated_at = ?2 WHERE id = ?1 AND status = 'pending'",
    )?
    .execute(params![id, now_ms])?;
    Ok(())
}

/// The app a task belongs to (the delivery pool knows tasks by id only).
pub fn app_of(conn: &Connection, id: i64) -> rusqlite::Result<Option<String>> {
    conn.prepare_cached("SELECT app_id FROM tasks WHERE id = ?1")?
        .query_row(params![id], |r| r.get(0))
        .optional()
}

/// Hands every `running` task back to `pending` (start-up after a crash, or shutdown after the
/// grace): the attempt it was in is made again. Returns how many.
pub fn requeue_running(conn: &Connection, now_ms: i64) -> rusqlite::Result<usize> {
    conn.prepare_cached(
        "UPDATE tasks SET status = 'pending', next_attempt_at = min(coalesce(next_attempt_at, ?1), ?1),
         updated_at = ?1 WHERE status = 'running'",
    )?
    .execute(params![now_ms])
}

/// Cancels pending tasks whose endpoint no longer exists (they could never be delivered).
pub fn cancel_orphans(conn: &Connection, now_ms: i64) -> rusqlite::Result<usize> {
    conn.prepare_cached(
        "UPDATE tasks SET status = 'canceled', finished_at = ?1, updated_at = ?1, next_attempt_at = NULL,
         last_error = coalesce(last_error, 'endpoint deleted')
         WHERE status = 'pending' AND NOT EXISTS (SELECT 1 FROM endpoints e WHERE e.id = tasks.endpoint_id)",
    )?
    .execute(params![now_ms])
}

/// `POST /tasks/{id}/cancel`: a pending task becomes `canceled`. Returns false when the task
/// is not pending (or not there).
pub fn cancel(conn: &Connection, app_id: &str, id: i64, now_ms: i64) -> rusqlite::Result<bool> {
    let n = conn
        .prepare_cached(
            "UPDATE tasks SET status = 'canceled', finished_at = ?3, updated_at = ?3, next_attempt_at = NULL
             WHERE app_id = ?1 AND id = ?2 AND status = 'pending'",
        )?
        .execute(params![app_id, id, now_ms])?;
    Ok(n == 1)
}

/// `POST /tasks/{id}/retry` and `POST /tasks/retry`: the tasks among `ids` (of `app_id`) that
/// are `failed` or `canceled` and whose endpoint still exists go back to `pending`, due now,
/// with their attempt count reset and `max_attempts` taken from their endpoint's current
/// retry policy (the default policy's when it has none). Returns the ids it changed; a task in
/// another state, of another app, or of a deleted endpoint is left alone.
///
/// The ids travel as one JSON array (`json_each`), so one cached statement serves a batch of
/// any size.
pub fn retry(
    conn: &Connection,
    app_id: &str,
    ids: &[i64],
    now_ms: i64,
) -> rusqlite::Result<Vec<i64>> {
    let default_attempts = i64::from(crate::retry::RetryPolicy::DEFAULT.max_attempts);
    let ids = serde_json::to_string(ids).unwrap_or_else(|_| "[]".into());
    conn.prepare_cached(
        "UPDATE tasks SET status = 'pending', attempts = 0, next_attempt_at = ?3, finished_at = NULL,
             updated_at = ?3,
             max_attempts = (SELECT coalesce(p.max_attempts, ?4)
                             FROM endpoints e LEFT JOIN retry_policies p ON p.id = e.retry_policy_id
                             WHERE e.id = tasks.endpoint_id)
         WHERE id IN (SELECT value FROM json_each(?2)) AND app_id = ?1
           AND status IN ('failed', 'canceled')
           AND EXISTS (SELECT 1 FROM endpoints e WHERE e.id = tasks.endpoint_id)
         RETURNING id",
    )?
    .query_map(params![app_id, ids, now_ms, default_attempts], |r| r.get(0))?
    .collect()
}

/// The ids of the tasks `f` matches whose endpoint still exists, lowest first, at most
/// `limit`. A read: it takes no write lock, so the bulk retry selects before it writes.
pub fn retryable_ids(
    conn: &Connection,
    app_id: &str,
    f: &RetryFilter,
    limit: usize,
) -> rusqlite::Result<Vec<i64>> {
    let mut filters = Filters::app(app_id)
        .eq_known("status", Some(f.status), &["failed", "canceled"])
        .eq("endpoint_id", f.endpoint_id)
        .eq("schedule_id", f.schedule_id)
        .eq("event_id", f.event_id)
        .always("EXISTS (SELECT 1 FROM endpoints e WHERE e.id = tasks.endpoint_id)");
    if let Some(since) = f.since {
        filters = filters.cmp("finished_at", ">=", since);
    }
    if let Some(until) = f.until {
        filters = filters.cmp("finished_at", "<", until);
    }
    let mut values = filters.values().to_vec();
    values.push(i64::try_from(limit).unwrap_or(i64::MAX).into());
    // `LIMIT ? + 0`: see `claim_due`.
    let sql = format!(
        "SELECT id FROM tasks WHERE {} ORDER BY id LIMIT ?{} + 0",
        filters.condition(),
        values.len()
    );
    conn.prepare_cached(&sql)?
        .query_map(rusqlite::params_from_iter(&values), |r| r.get(0))?
        .collect()
}

/// Whether a task of `schedule_id` for `endpoint_id` is still `pending` or `running`: the
/// overlap check of a schedule with `overlap: skip` (index `tasks_schedule_open`).
pub fn schedule_task_open(
    conn: &Connection,
    schedule_id: i64,
    endpoint_id: i64,
) -> rusqlite::Result<bool> {
    conn.prepare_cached(
        "SELECT EXISTS (SELECT 1 FROM tasks WHERE schedule_id = ?1 AND endpoint_id = ?2
                        AND status IN ('pending', 'running'))",
    )?
    .query_row(params![schedule_id, endpoint_id], |r| r.get(0))
}

/// How many tasks are in each status, over every app (for `/metrics`).
pub fn count_by_status(conn: &Connection) -> rusqlite::Result<Vec<(String, i64)>> {
    conn.prepare_cached("SELECT status, count(*) FROM tasks GROUP BY status")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect()
}
