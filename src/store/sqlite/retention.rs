//! Retention (contract §9): deleting finished tasks, their attempts, and events older than
//! `--retention-days`. In small chunks, so that a large clean-up never holds the write lock for
//! long while deliveries are committing.

use rusqlite::{Connection, params};

/// Deletes up to `limit` tasks that finished before `cutoff_ms`, with their attempts. Returns
/// how many tasks went; call again until it returns less than `limit`.
pub fn delete_finished_tasks(
    conn: &Connection,
    cutoff_ms: i64,
    limit: usize,
) -> rusqlite::Result<usize> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    // Both statements pick the same tasks: the same query over an unchanged table, in one
    // transaction (the caller's).
    const OLDEST: &str =
        "SELECT id FROM tasks WHERE finished_at < ?1 ORDER BY finished_at, id LIMIT ?2 + 0";
    conn.prepare_cached(&format!("DELETE FROM attempts WHERE task_id IN ({OLDEST})"))?
        .execute(params![cutoff_ms, limit])?;
    conn.prepare_cached(&format!("DELETE FROM tasks WHERE id IN ({OLDEST})"))?
        .execute(params![cutoff_ms, limit])
}

/// Deletes up to `limit` events created before `cutoff_ms` that no task refers to any more.
pub fn delete_old_events(
    conn: &Connection,
    cutoff_ms: i64,
    limit: usize,
) -> rusqlite::Result<usize> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    conn.prepare_cached(
        "DELETE FROM events WHERE id IN (
            SELECT id FROM events WHERE created_at < ?1
            AND NOT EXISTS (SELECT 1 FROM tasks WHERE tasks.event_id = events.id)
            ORDER BY id LIMIT ?2 + 0)",
    )?
    .execute(params![cutoff_ms, limit])
}
