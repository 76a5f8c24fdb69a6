//! The `events` table: named occurrences published by clients, each fanned out into tasks.

use super::{Filters, Page};
use crate::clock::ser_ms;
use rusqlite::{Connection, OptionalExtension, Row, params};
use serde::Serialize;

/// How long an `event_key` makes a republish return the first event.
pub const IDEMPOTENCY_WINDOW_MS: i64 = 24 * 3600 * 1000;

/// An event record, serialized exactly as the API returns it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Event {
    pub id: i64,
    pub app_id: String,
    pub event_name: String,
    pub event_key: Option<String>,
    pub payload: serde_json::Value,
    /// `dispatched`: its tasks were created with it.
    pub status: String,
    /// How many tasks (matching enabled endpoints) it created.
    pub task_count: i64,
    #[serde(serialize_with = "ser_ms")]
    pub created_at: i64,
}

const COLUMNS: &str = "id, app_id, event_name, event_key, payload, status, task_count, created_at";

fn from_row(r: &Row<'_>) -> rusqlite::Result<Event> {
    let payload: String = r.get(4)?;
    Ok(Event {
        id: r.get(0)?,
        app_id: r.get(1)?,
        event_name: r.get(2)?,
        event_key: r.get(3)?,
        payload: serde_json::from_str(&payload).unwrap_or_default(),
        status: r.get(5)?,
        task_count: r.get(6)?,
        created_at: r.get(7)?,
    })
}

/// Inserts an event; `payload` is compact JSON text.
#[allow(clippy::too_many_arguments)]
pub fn insert(
    conn: &Connection,
    app_id: &str,
    event_name: &str,
    event_key: Option<&str>,
    payload: &str,
    task_count: i64,
    now_ms: i64,
) -> rusqlite::Result<i64> {
    conn.prepare_cached(
        "INSERT INTO events (app_id, event_name, event_key, payload, status, task_count, created_at)
         VALUES (?1, ?2, ?3, ?4, 'dispatched', ?5, ?6)",
    )?
    .execute(params![app_id, event_name, event_key, payload, task_count, now_ms])?;
    Ok(conn.last_insert_rowid())
}

/// Publishes an event in the caller's transaction: the event row and one `event` task per
/// target, so they commit together. Returns the event's id.
#[allow(clippy::too_many_arguments)]
pub fn insert_with_tasks(
    conn: &Connection,
    app_id: &str,
    event_name: &str,
    event_key: Option<&str>,
    payload: &str,
    targets: &[super::endpoints::Target],
    now_ms: i64,
) -> rusqlite::Result<i64> {
    let task_count = i64::try_from(targets.len()).unwrap_or(i64::MAX);
    let id = insert(
        conn, app_id, event_name, event_key, payload, task_count, now_ms,
    )?;
    for target in targets {
        super::tasks::insert(
            conn,
            &super::tasks::NewTask {
                app_id,
                schedule_id: None,
                event_id: Some(id),
                endpoint_id: target.id,
                task_type: "event",
                payload,
                run_at: now_ms,
                max_attempts: target.max_attempts,
                now_ms,
            },
        )?;
    }
    Ok(id)
}

/// The first event published with this name and key since `since_ms`.
pub fn find_by_key(
    conn: &Connection,
    app_id: &str,
    event_name: &str,
    event_key: &str,
    since_ms: i64,
) -> rusqlite::Result<Option<Event>> {
    conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM events
         WHERE app_id = ?1 AND event_name = ?2 AND event_key = ?3 AND created_at >= ?4
         ORDER BY id LIMIT 1"
    ))?
    .query_row(params![app_id, event_name, event_key, since_ms], from_row)
    .optional()
}

pub fn get(conn: &Connection, app_id: &str, id: i64) -> rusqlite::Result<Option<Event>> {
    conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM events WHERE app_id = ?1 AND id = ?2"
    ))?
    .query_row(params![app_id, id], from_row)
    .optional()
}

/// The name of an event, whatever its app (for the `X-Service-Event` delivery header).
pub fn name_of(conn: &Connection, id: i64) -> rusqlite::Result<Option<String>> {
    conn.prepare_cached("SELECT event_name FROM events WHERE id = ?1")?
        .query_row(params![id], |r| r.get(0))
        .optional()
}

/// One page, newest first, and the total count of matches.
pub fn list(
    conn: &Connection,
    app_id: &str,
    event_name: Option<&str>,
    page: Page,
) -> rusqlite::Result<(i64, Vec<Event>)> {
    let filters = Filters::app(app_id).eq("event_name", event_name.map(str::to_string));
    super::list_page(conn, "events", COLUMNS, &filters, page, from_row)
}
