//! The `replay_guard` table: accepted (key id, signature) pairs until their timestamp leaves
//! the skew window, so that the replay check (docs/design.md §2) survives a restart or a crash.

use crate::store::replay::KEY_GENERATION_UNLESS_RECORDED;
use crate::store::sqlite::SqliteTx;
use crate::store::{KeyQueries, ReplayQueries, StoreError};
use rusqlite::params;

impl ReplayQueries for SqliteTx<'_> {
    fn first_use_of_signature(
        &mut self,
        key_id: &str,
        signature: &str,
        sent_ms: i64,
        expires_ms: i64,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let conn = self.0;
        let changed = conn
            .prepare_cached(
                "INSERT INTO replay_guard (sent_at, key_id, signature, expires_at)
                 VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (sent_at, key_id, signature)
                 DO UPDATE SET expires_at = excluded.expires_at
                 WHERE replay_guard.expires_at < ?5",
            )?
            .execute(params![sent_ms, key_id, signature, expires_ms, now_ms])?;
        Ok(changed == 1)
    }

    /// Two statements: on SQLite each is a call into the library, no round trip.
    fn first_use_at_key_generation(
        &mut self,
        key_id: &str,
        signature: &str,
        sent_ms: i64,
        expires_ms: i64,
        now_ms: i64,
    ) -> Result<Option<i64>, StoreError> {
        if !self.first_use_of_signature(key_id, signature, sent_ms, expires_ms, now_ms)? {
            return Ok(None);
        }
        Ok(Some(self.key_generation()?))
    }

    fn key_generation_unless_recorded(
        &mut self,
        key_id: &str,
        signature: &str,
        sent_ms: i64,
        now_ms: i64,
    ) -> Result<Option<i64>, StoreError> {
        let conn = self.0;
        let (recorded, generation): (bool, i64) = conn
            .prepare_cached(KEY_GENERATION_UNLESS_RECORDED)?
            .query_row(params![sent_ms, key_id, signature, now_ms], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })?;
        Ok((!recorded).then_some(generation))
    }

    /// Walks the primary key from its oldest end: the rows deleted share their leaf pages.
    fn prune_replay(
        &mut self,
        now_ms: i64,
        sent_before_ms: i64,
        limit: usize,
    ) -> Result<usize, StoreError> {
        let conn = self.0;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        Ok(conn
            .prepare_cached(
                "DELETE FROM replay_guard WHERE (sent_at, key_id, signature) IN (
                SELECT sent_at, key_id, signature FROM replay_guard
                 WHERE sent_at < ?2 AND expires_at < ?1 ORDER BY sent_at LIMIT ?3 + 0)",
            )?
            .execute(params![now_ms, sent_before_ms, limit])?)
    }
}
