//! The `events` table on PostgreSQL (twin of the SQLite `events` functions).
//! `insert_with_tasks` only combines `insert` with the tasks' insert, so it becomes a provided
//! method of the store interface and has no twin here.

use super::list::{Filters, list_page};
use crate::store::Page;
use crate::store::events::Event;
use postgres::{Error, GenericClient, Row};

const COLUMNS: &str = "id, app_id, event_name, event_key, payload, status, task_count, created_at";

fn from_row(r: &Row) -> Result<Event, Error> {
    let payload: String = r.try_get(4)?;
    Ok(Event {
        id: r.try_get(0)?,
        app_id: r.try_get(1)?,
        event_name: r.try_get(2)?,
        event_key: r.try_get(3)?,
        payload: serde_json::from_str(&payload).unwrap_or_default(),
        status: r.try_get(5)?,
        task_count: r.try_get(6)?,
        created_at: r.try_get(7)?,
    })
}

/// Inserts an event; `payload` is compact JSON text. Returns its id.
#[allow(clippy::too_many_arguments)]
pub fn insert(
    c: &mut impl GenericClient,
    app_id: &str,
    event_name: &str,
    event_key: Option<&str>,
    payload: &str,
    task_count: i64,
    now_ms: i64,
) -> Result<i64, Error> {
    c.query_one(
        "INSERT INTO events (app_id, event_name, event_key, payload, status, task_count, created_at)
         VALUES ($1, $2, $3, $4, 'dispatched', $5, $6) RETURNING id",
        &[&app_id, &event_name, &event_key, &payload, &task_count, &now_ms],
    )?
    .try_get(0)
}

/// The first event published with this name and key since `since_ms`.
///
/// Publish idempotency across nodes: the key window is time based, so no unique constraint
/// can hold it. This first takes a transaction-scoped advisory lock on (app, name, key), so
/// two nodes publishing the same key at once run lookup-then-insert one after the other and
/// create one event (SQLite's single write lock does that today). Hence it must run inside
/// the publish transaction (outside one the lock ends with this statement), in `READ
/// COMMITTED` (PostgreSQL's default: the lookup after the wait then sees the other node's
/// committed event; a `REPEATABLE READ` snapshot taken before the wait would not). The lock
/// key hashes the three values as a JSON array, an unambiguous encoding (PostgreSQL text
/// cannot hold the NUL separator `docs/dev/storage.md` suggests); a hash collision only makes
/// two unrelated publishes wait for each other.
pub fn find_by_key(
    c: &mut impl GenericClient,
    app_id: &str,
    event_name: &str,
    event_key: &str,
    since_ms: i64,
) -> Result<Option<Event>, Error> {
    c.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended(
            jsonb_build_array($1::text, $2::text, $3::text)::text, 0))",
        &[&app_id, &event_name, &event_key],
    )?;
    c.query_opt(
        &format!(
            "SELECT {COLUMNS} FROM events
             WHERE app_id = $1 AND event_name = $2 AND event_key = $3 AND created_at >= $4
             ORDER BY id LIMIT 1"
        ),
        &[&app_id, &event_name, &event_key, &since_ms],
    )?
    .as_ref()
    .map(from_row)
    .transpose()
}

pub fn get(c: &mut impl GenericClient, app_id: &str, id: i64) -> Result<Option<Event>, Error> {
    c.query_opt(
        &format!("SELECT {COLUMNS} FROM events WHERE app_id = $1 AND id = $2"),
        &[&app_id, &id],
    )?
    .as_ref()
    .map(from_row)
    .transpose()
}

/// The name of an event, whatever its app (for the `X-Service-Event` delivery header).
pub fn name_of(c: &mut impl GenericClient, id: i64) -> Result<Option<String>, Error> {
    c.query_opt("SELECT event_name FROM events WHERE id = $1", &[&id])?
        .map(|r| r.try_get(0))
        .transpose()
}

/// One page, newest first, and the total count of matches.
pub fn list(
    c: &mut impl GenericClient,
    app_id: &str,
    event_name: Option<&str>,
    page: Page,
) -> Result<(i64, Vec<Event>), Error> {
    let filters = Filters::app(app_id).eq("event_name", event_name.map(str::to_string));
    list_page(c, "events", COLUMNS, &filters, page, from_row)
}
