//! SQLite SQL of the `keys` table (records in `store::keys`).

#[allow(unused_imports)]
use crate::store::keys::*;
use rusqlite::{Connection, OptionalExtension, params};

pub fn create(
    conn: &Connection,
    app_id: &str,
    name: &str,
    now_ms: i64,
) -> rusqlite::Result<NewKey> {
    let key = NewKey::generate(app_id);
    conn.execute(
        "INSERT INTO api_keys (key_id, secret, app_id, name, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![key.key_id, key.secret, key.app_id, name, now_ms],
    )?;
    Ok(key)
}

pub fn count(conn: &Connection) -> rusqlite::Result<i64> {
    conn.query_row("SELECT count(*) FROM api_keys", [], |r| r.get(0))
}

pub fn list(conn: &Connection) -> rusqlite::Result<Vec<KeyInfo>> {
    let mut stmt = conn.prepare_cached(
        "SELECT key_id, app_id, name, created_at, revoked_at IS NOT NULL FROM api_keys ORDER BY created_at, key_id",
    )?;
    stmt.query_map([], |r| {
        Ok(KeyInfo {
            key_id: r.get(0)?,
            app_id: r.get(1)?,
            name: r.get(2)?,
            created_at: crate::clock::rfc3339(r.get(3)?),
            revoked: r.get(4)?,
        })
    })?
    .collect()
}

/// Marks a key revoked; false when no live key has that id.
pub fn revoke(conn: &Connection, key_id: &str, now_ms: i64) -> rusqlite::Result<bool> {
    let changed = conn.execute(
        "UPDATE api_keys SET revoked_at = ?2 WHERE key_id = ?1 AND revoked_at IS NULL",
        params![key_id, now_ms],
    )?;
    Ok(changed == 1)
}

/// The secret and app of a live (not revoked) key.
pub fn lookup(conn: &Connection, key_id: &str) -> rusqlite::Result<Option<(String, String)>> {
    conn.prepare_cached(
        "SELECT secret, app_id FROM api_keys WHERE key_id = ?1 AND revoked_at IS NULL",
    )?
    .query_row([key_id], |r| Ok((r.get(0)?, r.get(1)?)))
    .optional()
}
