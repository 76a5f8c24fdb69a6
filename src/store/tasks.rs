//! The `tasks` table: one row per delivery unit, created by a schedule, an event or by hand.

use super::Page;
use crate::clock::{ser_ms, ser_opt_ms};
use rusqlite::{Connection, OptionalExtension, Row, params};
use serde::Serialize;

/// A task record, serialized exactly as the API returns it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Task {
    pub id: i64,
    pub app_id: String,
    pub schedule_id: Option<i64>,
    pub event_id: Option<i64>,
    pub endpoint_id: i64,
    pub task_type: String,
    pub payload: serde_json::Value,
    pub status: String,
    /// When the task was planned to run (the scheduled instant for schedule tasks).
    #[serde(serialize_with = "ser_ms")]
    pub run_at: i64,
    pub attempts: i64,
    pub max_attempts: i64,
    #[serde(serialize_with = "ser_opt_ms")]
    pub next_attempt_at: Option<i64>,
    pub last_status_code: Option<i64>,
    pub last_error: Option<String>,
    #[serde(serialize_with = "ser_opt_ms")]
    pub finished_at: Option<i64>,
    #[serde(serialize_with = "ser_ms")]
    pub created_at: i64,
    #[serde(serialize_with = "ser_ms")]
    pub updated_at: i64,
}

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

/// What creating a task needs; it starts `pending`, due at `run_at`.
#[derive(Debug, Clone)]
pub struct NewTask<'a> {
    pub app_id: &'a str,
    pub schedule_id: Option<i64>,
    pub event_id: Option<i64>,
    pub endpoint_id: i64,
    /// `schedule`, `event` or `manual`.
    pub task_type: &'a str,
    /// Compact JSON text of an object, stored and sent as is.
    pub payload: &'a str,
    pub run_at: i64,
    pub max_attempts: i64,
    pub now_ms: i64,
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

/// Filters of `GET /tasks`; `None` means "any".
#[derive(Debug, Default, Clone)]
pub struct TaskFilter {
    pub status: Option<String>,
    pub schedule_id: Option<i64>,
    pub event_id: Option<i64>,
    pub endpoint_id: Option<i64>,
    pub task_type: Option<String>,
}

const FILTER_SQL: &str = "app_id = ?1 AND (?2 IS NULL OR status = ?2) AND (?3 IS NULL OR schedule_id = ?3)
     AND (?4 IS NULL OR event_id = ?4) AND (?5 IS NULL OR endpoint_id = ?5) AND (?6 IS NULL OR task_type = ?6)";

/// One page, newest first, and the total count of matches.
pub fn list(
    conn: &Connection,
    app_id: &str,
    f: &TaskFilter,
    page: Page,
) -> rusqlite::Result<(i64, Vec<Task>)> {
    let total = conn
        .prepare_cached(&format!("SELECT count(*) FROM tasks WHERE {FILTER_SQL}"))?
        .query_row(
            params![
                app_id,
                f.status,
                f.schedule_id,
                f.event_id,
                f.endpoint_id,
                f.task_type
            ],
            |r| r.get(0),
        )?;
    let items = conn
        .prepare_cached(&format!(
            "SELECT {COLUMNS} FROM tasks WHERE {FILTER_SQL} ORDER BY id DESC LIMIT ?7 OFFSET ?8"
        ))?
        .query_map(
            params![
                app_id,
                f.status,
                f.schedule_id,
                f.event_id,
                f.endpoint_id,
                f.task_type,
                page.limit(),
                page.offset()
            ],
            from_row,
        )?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok((total, items))
}
