//! The `replay_guard` table on PostgreSQL: accepted (key id, signature) pairs, shared by every
//! node on the database, so a request replayed to another node is refused too (contract §2).

use postgres::{Error, GenericClient};

/// Records the pair as used until `expires_ms`. False when it is already recorded and has not
/// expired: a replay. One statement: a new pair inserts a row, an expired one is taken over by
/// the `DO UPDATE … WHERE`, a live one changes nothing; one affected row is a first use. Two
/// nodes racing on the same new pair meet on the primary key: the second waits for the first
/// to commit, then finds a live row and counts zero. Must run inside the request's write
/// transaction, like SQLite's twin. Runs on every signed request: a prepared-statement cache
/// would save its parse round trip later.
pub fn first_use(
    c: &mut impl GenericClient,
    key_id: &str,
    signature: &str,
    expires_ms: i64,
    now_ms: i64,
) -> Result<bool, Error> {
    let changed = c.execute(
        "INSERT INTO replay_guard (key_id, signature, expires_at) VALUES ($1, $2, $3)
         ON CONFLICT (key_id, signature) DO UPDATE SET expires_at = excluded.expires_at
         WHERE replay_guard.expires_at < $4",
        &[&key_id, &signature, &expires_ms, &now_ms],
    )?;
    Ok(changed == 1)
}

/// Deletes up to `limit` rows that expired before `now_ms`; returns how many went. Nodes
/// pruning at once skip each other's rows instead of waiting on them.
pub fn prune(c: &mut impl GenericClient, now_ms: i64, limit: usize) -> Result<usize, Error> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let n = c.execute(
        "DELETE FROM replay_guard WHERE (key_id, signature) IN (
            SELECT key_id, signature FROM replay_guard WHERE expires_at < $1
            LIMIT $2 FOR UPDATE SKIP LOCKED)",
        &[&now_ms, &limit],
    )?;
    Ok(usize::try_from(n).unwrap_or(usize::MAX))
}

/// How many pairs are remembered (tests, diagnostics).
pub fn count(c: &mut impl GenericClient) -> Result<i64, Error> {
    c.query_one("SELECT count(*) FROM replay_guard", &[])?
        .try_get(0)
}
