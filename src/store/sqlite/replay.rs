//! The `replay_guard` table: accepted (key id, signature) pairs until their timestamp leaves
//! the skew window, so that the replay check (docs/design.md §2) survives a restart or a crash.

use crate::store::sqlite::SqliteTx;
use crate::store::{KeyQueries, ReplayQueries, StoreError};
use rusqlite::params;

impl ReplayQueries for SqliteTx<'_> {
    fn first_use_of_signature(
        &mut self,
        key_id: &str,
        signature: &str,
        expires_ms: i64,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let conn = self.0;
        let changed = conn
            .prepare_cached(
                "INSERT INTO replay_guard (key_id, signature, expires_at) VALUES (?1, ?2, ?3)
                 ON CONFLICT (key_id, signature) DO UPDATE SET expires_at = excluded.expires_at
                 WHERE replay_guard.expires_at < ?4",
            )?
            .execute(params![key_id, signature, expires_ms, now_ms])?;
        Ok(changed == 1)
    }

    /// Two statements: on SQLite each is a call into the library, no round trip.
    fn first_use_at_key_generation(
        &mut self,
        key_id: &str,
        signature: &str,
        expires_ms: i64,
        now_ms: i64,
    ) -> Result<Option<i64>, StoreError> {
        if !self.first_use_of_signature(key_id, signature, expires_ms, now_ms)? {
            return Ok(None);
        }
        Ok(Some(self.key_generation()?))
    }

    fn prune_replay(&mut self, now_ms: i64, limit: usize) -> Result<usize, StoreError> {
        let conn = self.0;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        Ok(conn
            .prepare_cached(
                "DELETE FROM replay_guard WHERE (key_id, signature) IN (
                SELECT key_id, signature FROM replay_guard WHERE expires_at < ?1 LIMIT ?2 + 0)",
            )?
            .execute(params![now_ms, limit])?)
    }
}
