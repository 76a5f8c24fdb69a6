//! The `replay_guard` table: accepted (key id, signature) pairs until their timestamp leaves
//! the skew window, so that the replay check (contract §2) survives a restart or a crash.

use rusqlite::{Connection, params};

/// Records the pair as used until `expires_ms`. False when it is already recorded and has not
/// expired: a replay. An expired row is taken over, so no separate clean-up has to run first.
/// Must run inside a write transaction (`Store::write`): it is the durable half of the
/// check, committed before the request is acted on.
pub fn first_use(
    conn: &Connection,
    key_id: &str,
    signature: &str,
    expires_ms: i64,
    now_ms: i64,
) -> rusqlite::Result<bool> {
    let changed = conn
        .prepare_cached(
            "INSERT INTO replay_guard (key_id, signature, expires_at) VALUES (?1, ?2, ?3)
             ON CONFLICT (key_id, signature) DO UPDATE SET expires_at = excluded.expires_at
             WHERE replay_guard.expires_at < ?4",
        )?
        .execute(params![key_id, signature, expires_ms, now_ms])?;
    Ok(changed == 1)
}

/// Deletes up to `limit` rows that expired before `now_ms`; returns how many went.
pub fn prune(conn: &Connection, now_ms: i64, limit: usize) -> rusqlite::Result<usize> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    conn.prepare_cached(
        "DELETE FROM replay_guard WHERE (key_id, signature) IN (
            SELECT key_id, signature FROM replay_guard WHERE expires_at < ?1 LIMIT ?2 + 0)",
    )?
    .execute(params![now_ms, limit])
}

/// How many pairs are remembered (tests, diagnostics).
pub fn count(conn: &Connection) -> rusqlite::Result<i64> {
    conn.query_row("SELECT count(*) FROM replay_guard", [], |r| r.get(0))
}
