//! The `attempts` table: one row per delivery attempt of a task, in the order they were made.
//! The record types and [`AttemptQueries`] live here; each backend implements the queries
//! in its own `attempts.rs` (`store::sqlite::attempts`, `store::postgres::attempts`).

use crate::clock::ser_ms;
use crate::store::{Page, StoreError};
use serde::Serialize;

/// An attempt record, serialized exactly as `GET /tasks/{id}/attempts` returns it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Attempt {
    pub id: i64,
    pub task_id: i64,
    /// 1-based; starts again at 1 after `POST /tasks/{id}/retry`.
    pub attempt: i64,
    #[serde(serialize_with = "ser_ms")]
    pub started_at: i64,
    pub duration_ms: i64,
    /// `None` when no HTTP reply came (network error, timeout, refused target).
    pub status_code: Option<i64>,
    pub error: Option<String>,
    /// The first 4 KiB of the reply body.
    pub response_body: Option<String>,
}

/// The queries on delivery attempts, one body per backend (`store::sqlite::attempts`,
/// `store::postgres::attempts`); part of [`crate::store::Tx`].
pub trait AttemptQueries {
    /// Appends an attempt row (its `id` is ignored). Called in the delivery pool's result
    /// transaction, together with the task's state change.
    fn insert_attempt(&mut self, a: &Attempt) -> Result<(), StoreError>;
    /// One page of a task's attempts in the order they were made, and their total count.
    fn list_attempts(
        &mut self,
        task_id: i64,
        page: Page,
    ) -> Result<(i64, Vec<Attempt>), StoreError>;
    /// When a task's first attempt began (of its latest round: attempts count from 1 again
    /// after a retry by hand), for a retry policy's `max_age_sec`; `None` when no attempt row
    /// is left. One read on the `attempts_task` index.
    fn first_attempt_started_at(&mut self, task_id: i64) -> Result<Option<i64>, StoreError>;
}
