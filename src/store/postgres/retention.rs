//! Retention (docs/design.md §9) on PostgreSQL: finished tasks with their attempts, and old events,
//! in small chunks. Several nodes may run it at once: the deletes are idempotent and a chunk
//! skips rows another node holds.

use crate::store::postgres::PgTx;
use crate::store::{RetentionQueries, StoreError};
use postgres::GenericClient;

impl<C: GenericClient> RetentionQueries for PgTx<'_, C> {
    fn delete_finished_tasks(&mut self, cutoff_ms: i64, limit: usize) -> Result<usize, StoreError> {
        let c = &mut *self.c;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let gone: i64 = c
            .query_one(
                "WITH oldest AS (
                    SELECT id FROM tasks WHERE finished_at < $1 ORDER BY finished_at, id LIMIT $2
                    FOR UPDATE SKIP LOCKED),
                 gone AS (
                    DELETE FROM tasks WHERE finished_at < $1 AND id IN (SELECT id FROM oldest)
                    RETURNING id),
                 attempts_gone AS (
                    DELETE FROM attempts WHERE task_id IN (SELECT id FROM gone))
                 SELECT count(*) FROM gone",
                &[&cutoff_ms, &limit],
            )?
            .try_get(0)?;
        Ok(usize::try_from(gone).unwrap_or(0))
    }

    fn delete_old_events(&mut self, cutoff_ms: i64, limit: usize) -> Result<usize, StoreError> {
        let c = &mut *self.c;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let n = c.execute(
            "DELETE FROM events WHERE id IN (
                SELECT id FROM events WHERE created_at < $1
                AND NOT EXISTS (SELECT 1 FROM tasks WHERE tasks.event_id = events.id)
                ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED)",
            &[&cutoff_ms, &limit],
        )?;
        Ok(usize::try_from(n).unwrap_or(usize::MAX))
    }
}
