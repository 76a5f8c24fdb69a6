//! The `attempts` table: one row per delivery attempt of a task, in the order they were made.
//! The record types and [`AttemptQueries`] live here; each backend implements the queries
//! in its own `attempts.rs` (`store::sqlite::attempts`, `store::postgres::attempts`).

use crate::clock::ser_ms;
use crate::store::{Page, StoreError};
use serde::{Serialize, Serializer};

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
    /// The headers the request was sent with; `None` for an attempt made before webhookd
    /// recorded them, one cut short by shutdown, and one whose request could not be built.
    pub request_headers: Option<RequestHeaders>,
}

/// The headers of an attempt's request as webhookd sent them (names lower-case, in the order
/// sent, credentials redacted: docs/API.md, "Attempt"), kept as the compact JSON text of an
/// array of `[name, value]` pairs. That text is what the `attempts.request_headers` column
/// holds, so recording an attempt encodes once and stores the text as it is; the API shows
/// the array it holds.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestHeaders(String);

impl RequestHeaders {
    /// Encodes the pairs as sent.
    pub fn encode<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> RequestHeaders {
        let pairs: Vec<(&str, &str)> = pairs.into_iter().collect();
        // Serializing pairs of strings cannot fail.
        RequestHeaders(serde_json::to_string(&pairs).unwrap_or_else(|_| "[]".to_string()))
    }

    /// The text a store read from its column.
    pub fn from_stored(text: String) -> RequestHeaders {
        RequestHeaders(text)
    }

    /// The JSON text, as stored.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The `[name, value]` pairs; `None` if the stored text is not such an array.
    pub fn pairs(&self) -> Option<Vec<(String, String)>> {
        serde_json::from_str(&self.0).ok()
    }
}

impl Serialize for RequestHeaders {
    /// The array of pairs. Text that is not one (a column edited by hand) shows as `null`
    /// rather than failing the whole list of attempts.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.pairs().serialize(serializer)
    }
}

/// The queries on delivery attempts, one body per backend (`store::sqlite::attempts`,
/// `store::postgres::attempts`); part of [`crate::store::Tx`].
pub trait AttemptQueries {
    /// Appends an attempt row (its `id` is ignored). Called in the delivery pool's result
    /// transaction, together with the task's state change.
    fn insert_attempt(&mut self, a: &Attempt) -> Result<(), StoreError>;
    /// [`AttemptQueries::insert_attempt`] for the attempts of one delivery round, in order.
    /// PostgreSQL inserts them with one statement (one round trip).
    fn insert_attempts(&mut self, attempts: &[Attempt]) -> Result<(), StoreError> {
        attempts.iter().try_for_each(|a| self.insert_attempt(a))
    }
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
