//! Retention (docs/design.md §9) on PostgreSQL: finished tasks with their attempts, old events,
//! and schedule firing records past the retention, in small chunks. Several nodes may run it at once: the deletes are idempotent and a chunk
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

    /// Two nodes sweeping at once delete the same rows: the second finds them gone.
    fn delete_old_firings(
        &mut self,
        cutoff_ms: i64,
        after_id: i64,
        limit: usize,
    ) -> Result<(usize, Option<i64>), StoreError> {
        let c = &mut *self.c;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let last: Option<i64> = c
            .query_one(
                "SELECT max(id) FROM (SELECT id FROM schedules WHERE id > $1 ORDER BY id LIMIT $2) s",
                &[&after_id, &limit],
            )?
            .try_get(0)?;
        let Some(last) = last else {
            return Ok((0, None));
        };
        let gone = c.execute(
            "DELETE FROM schedule_firings f
             WHERE schedule_id > $1 AND schedule_id <= $2 AND scheduled_at < $3
             AND scheduled_at >= coalesce(
                 (SELECT created_at FROM schedules s WHERE s.id = f.schedule_id), 0)",
            &[&after_id, &last, &cutoff_ms],
        )?;
        Ok((usize::try_from(gone).unwrap_or(usize::MAX), Some(last)))
    }
}
