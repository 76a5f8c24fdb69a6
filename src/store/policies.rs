//! The `retry_policies` table: attempt counts and back-off settings attached to endpoints.
//! The record types live here; the SQLite SQL is in `store::sqlite::policies`.

use crate::clock::ser_ms;
use serde::Serialize;

/// A retry policy record, serialized exactly as the API returns it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Policy {
    pub id: i64,
    pub app_id: String,
    pub name: String,
    pub max_attempts: i64,
    pub backoff_type: String,
    pub initial_delay_sec: i64,
    pub max_delay_sec: i64,
    pub status: String,
    #[serde(serialize_with = "ser_ms")]
    pub created_at: i64,
    #[serde(serialize_with = "ser_ms")]
    pub updated_at: i64,
}

impl Policy {
    /// The policy as the pure retry logic sees it.
    pub fn to_retry(&self) -> crate::retry::RetryPolicy {
        crate::retry::RetryPolicy {
            max_attempts: u32::try_from(self.max_attempts).unwrap_or(1),
            backoff: crate::retry::Backoff::parse(&self.backoff_type)
                .unwrap_or(crate::retry::Backoff::Exponential),
            initial_delay_sec: u64::try_from(self.initial_delay_sec).unwrap_or(0),
            max_delay_sec: u64::try_from(self.max_delay_sec).unwrap_or(0),
        }
    }
}
