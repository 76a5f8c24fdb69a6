//! The `api_keys` table: one key per client, bound to one app; secrets never leave `create`.

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;

/// A key as `keys list` shows it (no secret).
#[derive(Debug, Clone, Serialize)]
pub struct KeyInfo {
    pub key_id: String,
    pub app_id: String,
    pub name: String,
    pub created_at: String,
    pub revoked: bool,
}

/// A newly created key, the only time its secret is shown.
#[derive(Debug, Clone, Serialize)]
pub struct NewKey {
    pub key_id: String,
    pub secret: String,
    pub app_id: String,
}

impl NewKey {
    /// A fresh key id and secret for `app_id` (the same on both stores; not yet stored).
    pub fn generate(app_id: &str) -> Self {
        NewKey {
            key_id: format!("whk_{}", random_hex(8)),
            secret: format!("whs_{}", random_hex(24)),
            app_id: app_id.to_string(),
        }
    }
}

fn random_hex(bytes: usize) -> String {
    (0..bytes)
        .map(|_| format!("{:02x}", rand::random::<u8>()))
        .collect()
}

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
