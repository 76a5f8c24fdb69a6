//! The `replay_guard` table on PostgreSQL: accepted (key id, signature) pairs, shared by every
//! node on the database, so a request replayed to another node is refused too (docs/design.md §2).

use crate::store::postgres::PgTx;
use crate::store::replay::KEY_GENERATION_UNLESS_RECORDED;
use crate::store::{ReplayQueries, StoreError};
use postgres::GenericClient;

/// Records a (key, signature) pair ($1, $2) signed at $3 until $4, or takes over one that
/// expired before $5; a replay changes no row. A macro, so that the statements below build on it as literals.
macro_rules! record_pair {
    () => {
        "INSERT INTO replay_guard (key_id, signature, sent_at, expires_at) VALUES ($1, $2, $3, $4)
         ON CONFLICT (sent_at, key_id, signature) DO UPDATE SET expires_at = excluded.expires_at
         WHERE replay_guard.expires_at < $5"
    };
}

/// [`record_pair!`] returning the key generation for the row it changed.
macro_rules! record_pair_at_generation {
    () => {
        concat!(
            record_pair!(),
            " RETURNING coalesce((SELECT generation FROM key_generation WHERE id = 1), 0)"
        )
    };
}

impl<C: GenericClient> ReplayQueries for PgTx<'_, C> {
    fn first_use_of_signature(
        &mut self,
        key_id: &str,
        signature: &str,
        sent_ms: i64,
        expires_ms: i64,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let c = &mut *self.c;
        let changed = c.execute(
            record_pair!(),
            &[&key_id, &signature, &sent_ms, &expires_ms, &now_ms],
        )?;
        Ok(changed == 1)
    }

    /// One statement, so one round trip: the generation comes back with the inserted (or taken
    /// over) row, and no row comes back for a replay. Under `write_unsynced` (no transaction
    /// block: the statement is its own transaction) the same statement turns
    /// `synchronous_commit` off for that transaction (`set_config(…, true)`), so its commit
    /// does not wait for a WAL flush and costs no extra round trip.
    fn first_use_at_key_generation(
        &mut self,
        key_id: &str,
        signature: &str,
        sent_ms: i64,
        expires_ms: i64,
        now_ms: i64,
    ) -> Result<Option<i64>, StoreError> {
        const SYNCED: &str = record_pair_at_generation!();
        const UNSYNCED: &str = concat!(
            record_pair_at_generation!(),
            ", set_config('synchronous_commit', 'off', true)"
        );
        let sql = if self.unsynced { UNSYNCED } else { SYNCED };
        let c = &mut *self.c;
        let row = c.query_opt(sql, &[&key_id, &signature, &sent_ms, &expires_ms, &now_ms])?;
        Ok(row.map(|r| r.try_get(0)).transpose()?)
    }

    fn key_generation_unless_recorded(
        &mut self,
        key_id: &str,
        signature: &str,
        sent_ms: i64,
        now_ms: i64,
    ) -> Result<Option<i64>, StoreError> {
        let c = &mut *self.c;
        let row = c.query_one(
            KEY_GENERATION_UNLESS_RECORDED,
            &[&sent_ms, &key_id, &signature, &now_ms],
        )?;
        let recorded: bool = row.try_get(0)?;
        Ok((!recorded).then(|| row.try_get(1)).transpose()?)
    }

    /// Deletes up to `limit` rows that expired before `now_ms` from the oldest end of the
    /// primary key (signed before `sent_before_ms`); returns how many went. Nodes pruning at
    /// once skip each other's rows instead of waiting on them.
    fn prune_replay(
        &mut self,
        now_ms: i64,
        sent_before_ms: i64,
        limit: usize,
    ) -> Result<usize, StoreError> {
        let c = &mut *self.c;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let n = c.execute(
            "DELETE FROM replay_guard WHERE (sent_at, key_id, signature) IN (
                SELECT sent_at, key_id, signature FROM replay_guard
                 WHERE sent_at < $2 AND expires_at < $1
                 ORDER BY sent_at LIMIT $3 FOR UPDATE SKIP LOCKED)",
            &[&now_ms, &sent_before_ms, &limit],
        )?;
        Ok(usize::try_from(n).unwrap_or(usize::MAX))
    }
}
