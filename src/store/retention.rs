//! Retention: deleting finished tasks and events older than `--retention-days`, in batches.
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
}
