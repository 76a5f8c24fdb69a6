//! SQLite SQL of the `policies` table (records in `store::policies`).

use crate::store::Page;
#[allow(unused_imports)]
use crate::store::policies::*;
use crate::store::sqlite::Filters;
use rusqlite::{Connection, OptionalExtension, Row, params};

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
