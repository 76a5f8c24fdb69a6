//! The `endpoints` table: webhook targets of an app.

use super::{Filters, Page};
use crate::clock::ser_ms;
use rusqlite::{Connection, OptionalExtension, Row, params};
use serde::Serialize;

/// An endpoint record, serialized exactly as the API returns it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Endpoint {
    pub id: i64,
    pub app_id: String,
    pub name: String,
    pub url: String,
    pub method: String,
    /// Header name → value, sent on every delivery.
    pub headers: serde_json::Map<String, serde_json::Value>,
    pub secret: Option<String>,
    pub timeout_ms: i64,
    pub retry_policy_id: Option<i64>,
    pub filter_events: Option<String>,
    pub status: String,
    #[serde(serialize_with = "ser_ms")]
    pub created_at: i64,
    #[serde(serialize_with = "ser_ms")]
    pub updated_at: i64,
}

const COLUMNS: &str = "id, app_id, name, url, method, headers, secret, timeout_ms, retry_policy_id, filter_events, status, created_at, updated_at";

fn from_row(r: &Row<'_>) -> rusqlite::Result<Endpoint> {
    let headers: String = r.get(5)?;
    Ok(Endpoint {
        id: r.get(0)?,
        app_id: r.get(1)?,
        name: r.get(2)?,
        url: r.get(3)?,
        method: r.get(4)?,
        headers: serde_json::from_str(&headers).unwrap_or_default(),
        secret: r.get(6)?,
        timeout_ms: r.get(7)?,
        retry_policy_id: r.get(8)?,
        filter_events: r.get(9)?,
        status: r.get(10)?,
        created_at: r.get(11)?,
        updated_at: r.get(12)?,
    })
}

fn headers_json(ep: &Endpoint) -> String {
    serde_json::Value::Object(ep.headers.clone()).to_string()
}

/// Inserts `ep` (its `id` is ignored) and returns the stored record.
pub fn insert(conn: &Connection, ep: &Endpoint) -> rusqlite::Result<Endpoint> {
    conn.prepare_cached(
        "INSERT INTO endpoints (app_id, name, url, method, headers, secret, timeout_ms, retry_policy_id, filter_events, status, created_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
    )?
    .execute(params![
        ep.app_id,
        ep.name,
        ep.url,
        ep.method,
        headers_json(ep),
        ep.secret,
        ep.timeout_ms,
        ep.retry_policy_id,
        ep.filter_events,
        ep.status,
        ep.created_at,
        ep.updated_at
    ])?;
    Ok(Endpoint {
        id: conn.last_insert_rowid(),
        ..ep.clone()
    })
}

/// Writes every mutable field of `ep` back.
pub fn update(conn: &Connection, ep: &Endpoint) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "UPDATE endpoints SET name = ?3, url = ?4, method = ?5, headers = ?6, secret = ?7, timeout_ms = ?8,
         retry_policy_id = ?9, filter_events = ?10, status = ?11, updated_at = ?12
         WHERE app_id = ?1 AND id = ?2",
    )?
    .execute(params![
        ep.app_id,
        ep.id,
        ep.name,
        ep.url,
        ep.method,
        headers_json(ep),
        ep.secret,
        ep.timeout_ms,
        ep.retry_policy_id,
        ep.filter_events,
        ep.status,
        ep.updated_at
    ])?;
    Ok(())
}

pub fn get(conn: &Connection, app_id: &str, id: i64) -> rusqlite::Result<Option<Endpoint>> {
    conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM endpoints WHERE app_id = ?1 AND id = ?2"
    ))?
    .query_row(params![app_id, id], from_row)
    .optional()
}

/// Any endpoint by id, whatever its app (for the delivery pool).
pub fn get_any(conn: &Connection, id: i64) -> rusqlite::Result<Option<Endpoint>> {
    conn.prepare_cached(&format!("SELECT {COLUMNS} FROM endpoints WHERE id = ?1"))?
        .query_row(params![id], from_row)
        .optional()
}

/// Sets any endpoint's status, whatever its app (the delivery pool disables an endpoint that
/// answered `410 Gone`).
pub fn set_status_any(
    conn: &Connection,
    id: i64,
    status: &str,
    now_ms: i64,
) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "UPDATE endpoints SET status = ?2, updated_at = ?3 WHERE id = ?1 AND status != ?2",
    )?
    .execute(params![id, status, now_ms])?;
    Ok(())
}

/// One page, newest first, and the total count of matches.
pub fn list(
    conn: &Connection,
    app_id: &str,
    status: Option<&str>,
    page: Page,
) -> rusqlite::Result<(i64, Vec<Endpoint>)> {
    let filters = Filters::app(app_id).eq("status", status.map(str::to_string));
    super::list_page(conn, "endpoints", COLUMNS, &filters, page, from_row)
}

/// Every enabled endpoint of an app, oldest first (fan-out targets).
pub fn list_enabled(conn: &Connection, app_id: &str) -> rusqlite::Result<Vec<Endpoint>> {
    conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM endpoints WHERE app_id = ?1 AND status = 'enabled' ORDER BY id"
    ))?
    .query_map(params![app_id], from_row)?
    .collect()
}

/// Names of the given endpoints of an app, for `endpoint_names`; unknown ids are left out.
pub fn names(conn: &Connection, app_id: &str, ids: &[i64]) -> rusqlite::Result<Vec<(i64, String)>> {
    let mut stmt =
        conn.prepare_cached("SELECT id, name FROM endpoints WHERE app_id = ?1 AND id = ?2")?;
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        if let Some(row) = stmt
            .query_row(params![app_id, id], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?
        {
            out.push(row);
        }
    }
    Ok(out)
}

pub fn delete(conn: &Connection, app_id: &str, id: i64) -> rusqlite::Result<bool> {
    let n = conn.execute(
        "DELETE FROM endpoints WHERE app_id = ?1 AND id = ?2",
        params![app_id, id],
    )?;
    Ok(n == 1)
}

/// How many endpoints use a retry policy.
pub fn count_using_policy(conn: &Connection, policy_id: i64) -> rusqlite::Result<i64> {
    conn.query_row(
        "SELECT count(*) FROM endpoints WHERE retry_policy_id = ?1",
        params![policy_id],
        |r| r.get(0),
    )
}

/// Deletes an endpoint in the caller's transaction: its pending tasks become `canceled`, and
/// schedules that name it drop it from `endpoint_ids`. A schedule whose only target it was is
/// paused rather than left with an empty list (which would mean "every endpoint").
pub fn delete_cascade(
    conn: &Connection,
    app_id: &str,
    id: i64,
    now_ms: i64,
) -> rusqlite::Result<bool> {
    if !delete(conn, app_id, id)? {
        return Ok(false);
    }
    conn.execute(
        "UPDATE tasks SET status = 'canceled', finished_at = ?2, updated_at = ?2, next_attempt_at = NULL,
         last_error = coalesce(last_error, 'endpoint deleted')
         WHERE endpoint_id = ?1 AND status = 'pending'",
        params![id, now_ms],
    )?;
    // The schedules this deletion leaves with no target: webhookd pauses them (logged at WARN,
    // contract §10).
    let paused: Vec<i64> = conn
        .prepare(
            "SELECT id FROM schedules WHERE app_id = ?2 AND status = 'active'
             AND EXISTS (SELECT 1 FROM json_each(schedules.endpoint_ids) WHERE value = ?1)
             AND NOT EXISTS (SELECT 1 FROM json_each(schedules.endpoint_ids) WHERE value != ?1)",
        )?
        .query_map(params![id, app_id], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    for schedule_id in paused {
        tracing::warn!(
            schedule_id,
            endpoint_id = id,
            reason = "every target endpoint was deleted",
            "schedule paused by webhookd"
        );
    }
    // SET expressions all read the row as it was, so `emptied` looks at the old list.
    conn.execute(
        "UPDATE schedules SET
            status = CASE WHEN status = 'active' AND NOT EXISTS
                (SELECT 1 FROM json_each(schedules.endpoint_ids) WHERE value != ?1) THEN 'paused' ELSE status END,
            next_run_at = CASE WHEN status = 'active' AND NOT EXISTS
                (SELECT 1 FROM json_each(schedules.endpoint_ids) WHERE value != ?1) THEN NULL ELSE next_run_at END,
            paused_reason = CASE WHEN status = 'active' AND NOT EXISTS
                (SELECT 1 FROM json_each(schedules.endpoint_ids) WHERE value != ?1)
                THEN 'every target endpoint was deleted' ELSE paused_reason END,
            endpoint_ids = (SELECT json_group_array(value) FROM json_each(schedules.endpoint_ids) WHERE value != ?1),
            updated_at = ?3
         WHERE app_id = ?2 AND EXISTS (SELECT 1 FROM json_each(schedules.endpoint_ids) WHERE value = ?1)",
        params![id, app_id, now_ms],
    )?;
    Ok(true)
}

/// An enabled endpoint as fan-out sees it: where its tasks go and how many attempts they get.
#[derive(Debug, Clone)]
pub struct Target {
    pub id: i64,
    pub filter_events: Option<String>,
    /// From the endpoint's retry policy, or the default policy.
    pub max_attempts: i64,
}

/// Every enabled endpoint of an app with its task `max_attempts`, in one query.
pub fn enabled_targets(conn: &Connection, app_id: &str) -> rusqlite::Result<Vec<Target>> {
    let default_attempts = i64::from(crate::retry::RetryPolicy::DEFAULT.max_attempts);
    conn.prepare_cached(
        "SELECT e.id, e.filter_events, coalesce(p.max_attempts, ?2)
         FROM endpoints e LEFT JOIN retry_policies p ON p.id = e.retry_policy_id
         WHERE e.app_id = ?1 AND e.status = 'enabled' ORDER BY e.id",
    )?
    .query_map(params![app_id, default_attempts], |r| {
        Ok(Target {
            id: r.get(0)?,
            filter_events: r.get(1)?,
            max_attempts: r.get(2)?,
        })
    })?
    .collect()
}
