//! Retention (docs/design.md §9): deleting finished tasks, their attempts, and events older than
//! `--retention-days`, and schedule firing records past it. In small chunks, so that a large clean-up never holds the write lock for
//! long while deliveries are committing.

use crate::store::sqlite::SqliteTx;
use crate::store::{RetentionQueries, StoreError};
use rusqlite::params;

impl RetentionQueries for SqliteTx<'_> {
    fn delete_finished_tasks(&mut self, cutoff_ms: i64, limit: usize) -> Result<usize, StoreError> {
        let conn = self.0;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        // Both statements pick the same tasks: the same query over an unchanged table, in one
        // transaction (the caller's).
        const OLDEST: &str =
            "SELECT id FROM tasks WHERE finished_at < ?1 ORDER BY finished_at, id LIMIT ?2 + 0";
        conn.prepare_cached(&format!("DELETE FROM attempts WHERE task_id IN ({OLDEST})"))?
            .execute(params![cutoff_ms, limit])?;
        Ok(conn
            .prepare_cached(&format!("DELETE FROM tasks WHERE id IN ({OLDEST})"))?
            .execute(params![cutoff_ms, limit])?)
    }

    fn delete_old_events(&mut self, cutoff_ms: i64, limit: usize) -> Result<usize, StoreError> {
        let conn = self.0;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        Ok(conn
            .prepare_cached(
                "DELETE FROM events WHERE id IN (
                SELECT id FROM events WHERE created_at < ?1
                AND NOT EXISTS (SELECT 1 FROM tasks WHERE tasks.id BETWEEN events.first_task_id
                                AND events.last_task_id AND tasks.event_id = events.id)
                AND NOT EXISTS (SELECT 1 FROM tasks WHERE tasks.event_id = events.id
                                AND tasks.task_type <> 'event')
                ORDER BY id LIMIT ?2 + 0)",
            )?
            .execute(params![cutoff_ms, limit])?)
    }

    fn delete_old_firings(
        &mut self,
        cutoff_ms: i64,
        after_id: i64,
        limit: usize,
    ) -> Result<(usize, Option<i64>), StoreError> {
        let conn = self.0;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let last: Option<i64> = conn
            .prepare_cached(
                "SELECT max(id) FROM (SELECT id FROM schedules WHERE id > ?1 ORDER BY id LIMIT ?2)",
            )?
            .query_row(params![after_id, limit], |r| r.get(0))?;
        let Some(last) = last else {
            return Ok((0, None));
        };
        let gone = conn
            .prepare_cached(
                "DELETE FROM schedule_firings
                 WHERE schedule_id > ?1 AND schedule_id <= ?2 AND scheduled_at < ?3
                 AND scheduled_at >= coalesce(
                     (SELECT created_at FROM schedules WHERE schedules.id = schedule_id), 0)",
            )?
            .execute(params![after_id, last, cutoff_ms])?;
        Ok((gone, Some(last)))
    }
}
