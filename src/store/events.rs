//! The `events` table: named occurrences published by clients, each fanned out into tasks.
//! The record types live here; the SQLite SQL is in `store::sqlite::events`.

use crate::clock::ser_ms;
use serde::Serialize;

/// How long an `event_key` makes a republish return the first event.
pub const IDEMPOTENCY_WINDOW_MS: i64 = 24 * 3600 * 1000;

/// An event record, serialized exactly as the API returns it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Event {
    pub id: i64,
    pub app_id: String,
    pub event_name: String,
    pub event_key: Option<String>,
    pub payload: serde_json::Value,
    /// `dispatched`: its tasks were created with it.
    pub status: String,
    /// How many tasks (matching enabled endpoints) it created.
    pub task_count: i64,
    #[serde(serialize_with = "ser_ms")]
    pub created_at: i64,
}
