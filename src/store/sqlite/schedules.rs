//! SQLite SQL of the `schedules` table (records in `store::schedules`).

use crate::store::Page;
#[allow(unused_imports)]
use crate::store::schedules::*;
use crate::store::sqlite::Filters;
use rusqlite::{Connection, OptionalExtension, Row, params};
use serde_json::Value;
use std::collections::BTreeMap;

const COLUMNS: &str = "id, app_id, name, cron_expr, timezone, payload, status, next_run_at, last_run_at, created_at, updated_at, endpoint_ids, paused_reason, catchup, overlap, skipped_runs";

const FIRING_COLUMNS: &str =
    "id, app_id, cron_expr, timezone, payload, endpoint_ids, next_run_at, catchup, overlap";

fn ids_from_json(text: &str) -> Vec<i64> {
    serde_json::from_str(text).unwrap_or_default()
}

fn ids_json(ids: &[i64]) -> String {
    serde_json::to_string(ids).unwrap_or_else(|_| "[]".into())
}

fn from_row(r: &Row<'_>) -> rusqlite::Result<Schedule> {
    let payload: String = r.get(5)?;
    let endpoint_ids: String = r.get(11)?;
    Ok(Schedule {
        id: r.get(0)?,
        app_id: r.get(1)?,
        name: r.get(2)?,
        cron_expr: r.get(3)?,
        timezone: r.get(4)?,
        payload: serde_json::from_str(&payload).unwrap_or_default(),
        status: r.get(6)?,
        next_run_at: r.get(7)?,
        last_run_at: r.get(8)?,
        created_at: r.get(9)?,
        updated_at: r.get(10)?,
        endpoint_ids: ids_from_json(&endpoint_ids),
        paused_reason: r.get(12)?,
        catchup: r.get(13)?,
        overlap: r.get(14)?,
        skipped_runs: r.get(15)?,
        endpoint_names: BTreeMap::new(),
        next_run_at_local: None,
    })
}

fn firing_from_row(r: &Row<'_>) -> rusqlite::Result<Firing> {
    let endpoint_ids: String = r.get(5)?;
    Ok(Firing {
        id: r.get(0)?,
        app_id: r.get(1)?,
        cron_expr: r.get(2)?,
        timezone: r.get(3)?,
        payload: r.get(4)?,
        endpoint_ids: ids_from_json(&endpoint_ids),
        next_run_at: r.get(6)?,
        catchup: r.get(7)?,
        overlap: r.get(8)?,
    })
}

fn payload_json(s: &Schedule) -> String {
    Value::Object(s.payload.clone()).to_string()
}

/// Inserts `s` (its `id` is ignored) and returns the stored record.
pub fn insert(conn: &Connection, s: &Schedule) -> rusqlite::Result<Schedule> {
    conn.prepare_cached(
        "INSERT INTO schedules (app_id, name, cron_expr, timezone, payload, endpoint_ids, status, next_run_at, last_run_at, created_at, updated_at, paused_reason, catchup, overlap, skipped_runs)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
    )?
    .execute(params![
        s.app_id,
        s.name,
        s.cron_expr,
        s.timezone,
        payload_json(s),
        ids_json(&s.endpoint_ids),
        s.status,
        s.next_run_at,
        s.last_run_at,
        s.created_at,
        s.updated_at,
        s.paused_reason,
        s.catchup,
        s.overlap,
        s.skipped_runs
    ])?;
    Ok(Schedule {
        id: conn.last_insert_rowid(),
        ..s.clone()
    })
}

/// Writes every field an API call may change back (`last_run_at` belongs to the scheduler).
pub fn update(conn: &Connection, s: &Schedule) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "UPDATE schedules SET name = ?3, cron_expr = ?4, timezone = ?5, payload = ?6, endpoint_ids = ?7,
         status = ?8, next_run_at = ?9, updated_at = ?10, paused_reason = ?11, catchup = ?12, overlap = ?13
         WHERE app_id = ?1 AND id = ?2",
    )?
    .execute(params![
        s.app_id,
        s.id,
        s.name,
        s.cron_expr,
        s.timezone,
        payload_json(s),
        ids_json(&s.endpoint_ids),
        s.status,
        s.next_run_at,
        s.updated_at,
        s.paused_reason,
        s.catchup,
        s.overlap
    ])?;
    Ok(())
}

/// A schedule of an app, deleted ones included.
pub fn get(conn: &Connection, app_id: &str, id: i64) -> rusqlite::Result<Option<Schedule>> {
    conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM schedules WHERE app_id = ?1 AND id = ?2"
    ))?
    .query_row(params![app_id, id], from_row)
    .optional()
}

/// One page of an app's schedules that are not deleted, newest first, and the total count.
pub fn list(
    conn: &Connection,
    app_id: &str,
    status: Option<&str>,
    page: Page,
) -> rusqlite::Result<(i64, Vec<Schedule>)> {
    let filters = Filters::app(app_id).always("status != 'deleted'").eq_known(
        "status",
        status,
        &["active", "paused"],
    );
    super::list_page(conn, "schedules", COLUMNS, &filters, page, from_row)
}

/// Active schedules due at `now_ms`, earliest first, at most `limit`.
pub fn due(conn: &Connection, now_ms: i64, limit: usize) -> rusqlite::Result<Vec<Firing>> {
    conn.prepare_cached(&format!(
        "SELECT {FIRING_COLUMNS} FROM schedules
         WHERE status = 'active' AND next_run_at <= ?1 ORDER BY next_run_at LIMIT ?2"
    ))?
    .query_map(
        params![now_ms, i64::try_from(limit).unwrap_or(i64::MAX)],
        firing_from_row,
    )?
    .collect()
}

/// An active schedule by id, whatever its app.
pub fn get_active(conn: &Connection, id: i64) -> rusqlite::Result<Option<Firing>> {
    conn.prepare_cached(&format!(
        "SELECT {FIRING_COLUMNS} FROM schedules WHERE id = ?1 AND status = 'active'"
    ))?
    .query_row(params![id], firing_from_row)
    .optional()
}

/// The earliest `next_run_at` of all active schedules: when the scheduler has work next.
pub fn earliest_next_run(conn: &Connection) -> rusqlite::Result<Option<i64>> {
    conn.prepare_cached("SELECT min(next_run_at) FROM schedules WHERE status = 'active'")?
        .query_row([], |r| r.get(0))
}

/// Records that `schedule_id` fired for `scheduled_at`; false when it already had.
pub fn record_firing(
    conn: &Connection,
    schedule_id: i64,
    scheduled_at: i64,
) -> rusqlite::Result<bool> {
    let n = conn
        .prepare_cached(
            "INSERT OR IGNORE INTO schedule_firings (schedule_id, scheduled_at) VALUES (?1, ?2)",
        )?
        .execute(params![schedule_id, scheduled_at])?;
    Ok(n == 1)
}

/// Moves an active schedule on after the scheduler looked at it: `next_run_at` always,
/// `last_run_at` when it fired, `skipped_runs` up by `skipped`. `updated_at` is left alone
/// (it tracks changes by the API).
pub fn advance(
    conn: &Connection,
    id: i64,
    fired_at: Option<i64>,
    next_run_at: Option<i64>,
    skipped: i64,
) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "UPDATE schedules SET last_run_at = coalesce(?2, last_run_at), next_run_at = ?3,
         skipped_runs = skipped_runs + ?4
         WHERE id = ?1 AND status = 'active'",
    )?
    .execute(params![id, fired_at, next_run_at, skipped])?;
    Ok(())
}

/// Forgets a schedule's firings scheduled before `cutoff_ms` (they can no longer recur).
pub fn forget_firings(conn: &Connection, schedule_id: i64, cutoff_ms: i64) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "DELETE FROM schedule_firings WHERE schedule_id = ?1 AND scheduled_at < ?2",
    )?
    .execute(params![schedule_id, cutoff_ms])?;
    Ok(())
}
