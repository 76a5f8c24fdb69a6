//! The `retry_policies` table: attempt counts and back-off settings attached to endpoints.
//! The record types and [`PolicyQueries`] live here; each backend implements the queries
//! in its own `policies.rs` (`store::sqlite::policies`, `store::postgres::policies`).

use crate::clock::ser_ms;
use crate::store::{Page, StoreError};
use serde::Serialize;

crate::store::word::words! {
    /// The state of a retry policy (its `status` field).
    PolicyStatus, "policy status" {
        /// In use (the only state a policy has: deleting one removes it).
        Active = "active",
    }
}

/// A retry policy record, serialized exactly as the API returns it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Policy {
    pub id: i64,
    pub app_id: String,
    pub name: String,
    pub max_attempts: i64,
    pub backoff_type: crate::retry::Backoff,
    pub initial_delay_sec: i64,
    pub max_delay_sec: i64,
    /// A task whose first attempt began longer ago than this fails for good instead of being
    /// retried; `None`: no limit.
    pub max_age_sec: Option<i64>,
    pub jitter: crate::retry::Jitter,
    pub status: PolicyStatus,
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
            backoff: self.backoff_type,
            initial_delay_sec: u64::try_from(self.initial_delay_sec).unwrap_or(0),
            max_delay_sec: u64::try_from(self.max_delay_sec).unwrap_or(0),
            max_age_sec: self.max_age_sec.and_then(|s| u64::try_from(s).ok()),
            jitter: self.jitter,
        }
    }
}

/// The queries on retry policies, one body per backend (`store::sqlite::policies`,
/// `store::postgres::policies`); part of [`crate::store::Tx`].
pub trait PolicyQueries {
    /// Inserts `p` (its `id` is ignored) and returns the stored record.
    fn insert_policy(&mut self, p: &Policy) -> Result<Policy, StoreError>;
    /// Writes every field a PATCH may change back, and gives every app with an endpoint using
    /// the policy a new target generation (its tasks' `max_attempts` come from the policy,
    /// `EndpointQueries::enabled_targets_since`). Deleting a policy needs none: one in use
    /// cannot be deleted.
    fn update_policy(&mut self, p: &Policy) -> Result<(), StoreError>;
    /// A policy of an app.
    fn get_policy(&mut self, app_id: &str, id: i64) -> Result<Option<Policy>, StoreError>;
    /// Any policy by id, whatever its app (for the delivery pool).
    fn get_policy_any(&mut self, id: i64) -> Result<Option<Policy>, StoreError>;
    /// One page of an app's policies, newest first, and the total count.
    fn list_policies(&mut self, app_id: &str, page: Page)
    -> Result<(i64, Vec<Policy>), StoreError>;
    /// Deletes a policy of an app; false when there was none.
    fn delete_policy(&mut self, app_id: &str, id: i64) -> Result<bool, StoreError>;

    // --- provided ---

    /// The retry policy an endpoint's deliveries follow: its own, or the default.
    fn effective_policy(
        &mut self,
        retry_policy_id: Option<i64>,
    ) -> Result<crate::retry::RetryPolicy, StoreError> {
        Ok(match retry_policy_id {
            Some(id) => self
                .get_policy_any(id)?
                .map(|p| p.to_retry())
                .unwrap_or(crate::retry::RetryPolicy::DEFAULT),
            None => crate::retry::RetryPolicy::DEFAULT,
        })
    }
}
