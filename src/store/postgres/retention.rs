//! Retention (contract §9) on PostgreSQL: finished tasks with their attempts, and old events,
//! in small chunks. Several nodes may run it at once: the deletes are idempotent and a chunk
//! skips rows another node holds.

use postgres::{Error, GenericClient};

/// Deletes up to `limit` tasks that finished before `cutoff_ms`, with their attempts. Returns
/// how many tasks went; call again until it returns less than `limit`.
///
/// One statement rather than SQLite's two: in `READ COMMITTED` two statements could pick
/// different tasks (a task retried in between would keep its row and lose its attempts). The
/// chosen rows are locked (`FOR UPDATE SKIP LOCKED`), so a concurrent retry either waits for
/// the delete or is skipped by it, and `finished_at` is checked again on the row deleted.
pub fn delete_finished_tasks(
    c: &mut impl GenericClient,
    cutoff_ms: i64,
    limit: usize,
) -> Result<usize, Error> {
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

/// Deletes up to `limit` events created before `cutoff_ms` that no task refers to any more.
pub fn delete_old_events(
    c: &mut impl GenericClient,
    cutoff_ms: i64,
    limit: usize,
) -> Result<usize, Error> {
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
