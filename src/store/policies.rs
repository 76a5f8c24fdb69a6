//! The `retry_policies` table: attempt counts and back-off settings attached to endpoints.

use super::{Filters, Page};
use crate::clock::ser_ms;
use rusqlite::{Connection, OptionalExtension, Row, params};
use serde::Serialize;

/// A retry policy record, serialized exactly as the API returns it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Policy {
    pub id: i64,
    pub app_id: String,
    pub name: String,
    pub max_attempts: i64,
    pub backoff_type: String,
    pub initial_delay_sec: i64,
    pub max_delay_sec: i64,
    pub status: String,
    #[serde(serialize_with = "ser_ms")]
    pub created_at: i64,
    #[serde(serialize_with = "ser_ms")]
    pub updated_at: i64,
}

const COLUMNS: &str = "id, app_id, name, max_attempts, backoff_type, initial_delay_sec, max_delay_sec, status, created_at, updated_at";

fn from_row(r: &Row<'_>) -> rusqlite::Result<Policy> {
    Ok(Policy {
        id: r.get(0)?,
        app_id: r.get(1)?,
        name: r.get(2)?,
        max_attempts: r.get(3)?,
        backoff_type: r.get(4)?,
        initial_delay_sec: r.get(5)?,
        max_delay_sec: r.get(6)?,
        status: r.get(7)?,
        created_at: r.get(8)?,
        updated_at: r.get(9)?,
    })
}

impl Policy {
    /// The policy as the pure retry logic sees it.
    pub fn to_retry(&self) -> crate::retry::RetryPolicy {
        crate::retry::RetryPolicy {
            max_attempts: u32::try_from(self.max_attempts).unwrap_or(1),
            backoff: crate::retry::Backoff::parse(&self.backoff_type)
                .unwrap_or(crate::retry::Backoff::Exponential),
            initial_delay_sec: u64::try_from(self.initial_delay_sec).unwrap_or(0),
            max_delay_sec: u64::try_from(self.max_delay_sec).unwrap_or(0),
        }
    }
}

pub fn insert(conn: &Connection, p: &Policy) -> rusqlite::Result<Policy> {
    conn.prepare_cached(
        "INSERT INTO retry_policies (app_id, name, max_attempts, backoff_type, initial_delay_sec, max_delay_sec, status, created_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
    )?
    .execute(params![
        p.app_id,
        p.name,
        p.max_attempts,
        p.backoff_type,
        p.initial_delay_sec,
        p.max_delay_sec,
        p.status,
        p.created_at,
        p.updated_at
    ])?;
    Ok(Policy {
        id: conn.last_insert_rowid(),
        ..p.clone()
    })
}

pub fn update(conn: &Connection, p: &Policy) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "UPDATE retry_policies SET name = ?3, max_attempts = ?4, backoff_type = ?5, initial_delay_sec = ?6,
         max_delay_sec = ?7, status = ?8, updated_at = ?9 WHERE app_id = ?1 AND id = ?2",
    )?
    .execute(params![
        p.app_id,
        p.id,
        p.name,
        p.max_attempts,
        p.backoff_type,
        p.initial_delay_sec,
        p.max_delay_sec,
        p.status,
        p.updated_at
    ])?;
    Ok(())
}

pub fn get(conn: &Connection, app_id: &str, id: i64) -> rusqlite::Result<Option<Policy>> {
    conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM retry_policies WHERE app_id = ?1 AND id = ?2"
    ))?
    .query_row(params![app_id, id], from_row)
    .optional()
}

/// Any policy by id, whatever its app (for the delivery pool).
pub fn get_any(conn: &Connection, id: i64) -> rusqlite::Result<Option<Policy>> {
    conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM retry_policies WHERE id = ?1"
    ))?
    .query_row(params![id], from_row)
    .optional()
}

pub fn list(conn: &Connection, app_id: &str, page: Page) -> rusqlite::Result<(i64, Vec<Policy>)> {
    super::list_page(
        conn,
        "retry_policies",
        COLUMNS,
        &Filters::app(app_id),
        page,
        from_row,
    )
}

pub fn delete(conn: &Connection, app_id: &str, id: i64) -> rusqlite::Result<bool> {
    let n = conn.execute(
        "DELETE FROM retry_policies WHERE app_id = ?1 AND id = ?2",
        params![app_id, id],
    )?;
    Ok(n == 1)
}

/// The retry policy an endpoint's deliveries follow: its own, or the default.
pub fn effective(
    conn: &Connection,
    retry_policy_id: Option<i64>,
) -> rusqlite::Result<crate::retry::RetryPolicy> {
    Ok(match retry_policy_id {
        Some(id) => get_any(conn, id)?
            .map(|p| p.to_retry())
            .unwrap_or(crate::retry::RetryPolicy::DEFAULT),
        None => crate::retry::RetryPolicy::DEFAULT,
    })
}
