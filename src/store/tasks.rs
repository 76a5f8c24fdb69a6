//! The `tasks` table: one row per delivery unit, created by a schedule, an event or by hand.
//! The record types live here; the SQLite SQL is in `store::sqlite::tasks`.

use crate::clock::{ser_ms, ser_opt_ms};
use serde::Serialize;

/// A task record, serialized exactly as the API returns it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Task {
    pub id: i64,
    pub app_id: String,
    pub schedule_id: Option<i64>,
    pub event_id: Option<i64>,
    pub endpoint_id: i64,
    pub task_type: String,
    pub payload: serde_json::Value,
    pub status: String,
    /// When the task was planned to run (the scheduled instant for schedule tasks).
    #[serde(serialize_with = "ser_ms")]
    pub run_at: i64,
    pub attempts: i64,
    pub max_attempts: i64,
    #[serde(serialize_with = "ser_opt_ms")]
    pub next_attempt_at: Option<i64>,
    pub last_status_code: Option<i64>,
    pub last_error: Option<String>,
    #[serde(serialize_with = "ser_opt_ms")]
    pub finished_at: Option<i64>,
    #[serde(serialize_with = "ser_ms")]
    pub created_at: i64,
    #[serde(serialize_with = "ser_ms")]
    pub updated_at: i64,
}

/// What creating a task needs; it starts `pending`, due at `run_at`.
#[derive(Debug, Clone)]
pub struct NewTask<'a> {
    pub app_id: &'a str,
    pub schedule_id: Option<i64>,
    pub event_id: Option<i64>,
    pub endpoint_id: i64,
    /// `schedule`, `event` or `manual`.
    pub task_type: &'a str,
    /// Compact JSON text of an object, stored and sent as is.
    pub payload: &'a str,
    pub run_at: i64,
    pub max_attempts: i64,
    pub now_ms: i64,
}

/// Every state a task can be in.
pub const STATUSES: [&str; 5] = ["pending", "running", "success", "failed", "canceled"];

/// What `GET /tasks?status=` accepts: every state, and `retrying` (pending tasks that have
/// failed at least one attempt; their records still say `pending`).
pub const STATUS_FILTERS: [&str; 6] = [
    "pending", "running", "success", "failed", "canceled", "retrying",
];

/// Every way a task can come about.
pub const TASK_TYPES: [&str; 3] = ["schedule", "event", "manual"];

/// Filters of `GET /tasks`; `None` means "any".
#[derive(Debug, Default, Clone)]
pub struct TaskFilter {
    pub status: Option<String>,
    pub schedule_id: Option<i64>,
    pub event_id: Option<i64>,
    pub endpoint_id: Option<i64>,
    pub task_type: Option<String>,
}

/// A task the delivery pool claimed, with what sending it needs.
#[derive(Debug, Clone, PartialEq)]
pub struct Claimed {
    pub id: i64,
    pub endpoint_id: i64,
    pub schedule_id: Option<i64>,
    pub event_id: Option<i64>,
    /// The event's name, for `X-Service-Event` (event tasks).
    pub event_name: Option<String>,
    /// Compact JSON text, sent as is.
    pub payload: String,
    /// The number of the attempt about to be made (1-based).
    pub attempt: i64,
    pub max_attempts: i64,
}

/// The state an attempt leaves its task in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterAttempt {
    Success,
    /// Back to `pending`, due again at this instant (ms).
    RetryAt(i64),
    Failed,
}

/// The filter of `POST /tasks/retry`: tasks of one app in one finished state (`failed` or
/// `canceled`), narrowed by whichever of the other fields are given.
#[derive(Debug, Clone)]
pub struct RetryFilter {
    /// `failed` or `canceled`.
    pub status: &'static str,
    pub endpoint_id: Option<i64>,
    pub schedule_id: Option<i64>,
    pub event_id: Option<i64>,
    /// `finished_at >= since` (ms).
    pub since: Option<i64>,
    /// `finished_at < until` (ms).
    pub until: Option<i64>,
}
