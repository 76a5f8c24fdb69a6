//! Retention: deleting finished tasks and events older than `--retention-days`, and schedule
//! firing records older than that plus a day, in batches.
//! No record type: only [`RetentionQueries`].

use crate::store::StoreError;
/// The retention queries, one body per backend (`store::sqlite::retention`,
/// `store::postgres::retention`); part of [`crate::store::Tx`].
pub trait RetentionQueries {
    /// Deletes up to `limit` tasks that finished before `cutoff_ms`, with their attempts. Returns
    /// how many tasks went; call again until it returns less than `limit`.
    fn delete_finished_tasks(&mut self, cutoff_ms: i64, limit: usize) -> Result<usize, StoreError>;
    /// Deletes up to `limit` events created before `cutoff_ms` that no task refers to any more.
    fn delete_old_events(&mut self, cutoff_ms: i64, limit: usize) -> Result<usize, StoreError>;
    /// Deletes the firing records (`schedule_firings`) with `scheduled_at` before `cutoff_ms`
    /// of the next `limit` schedules (any status) with an id above `after_id`, in id order: a
    /// chunk walks the records' primary key (schedule_id, scheduled_at) one schedule at a time,
    /// so no index on `scheduled_at` is needed. Returns the rows deleted and the last schedule
    /// id of the chunk, `None` when no schedule is left after `after_id`.
    fn delete_old_firings(
        &mut self,
        cutoff_ms: i64,
        after_id: i64,
        limit: usize,
    ) -> Result<(usize, Option<i64>), StoreError>;
}
