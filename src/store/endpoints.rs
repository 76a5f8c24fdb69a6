//! The `endpoints` table: webhook targets of an app.
//! The record types live here; the SQLite SQL is in `store::sqlite::endpoints`.

use crate::clock::{ser_ms, ser_opt_ms};
use serde::Serialize;

/// An endpoint record, serialized exactly as the API returns it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Endpoint {
    pub id: i64,
    pub app_id: String,
    pub name: String,
    pub url: String,
    pub method: String,
    /// Header name → value, sent on every delivery.
    pub headers: serde_json::Map<String, serde_json::Value>,
    pub secret: Option<String>,
    pub timeout_ms: i64,
    pub retry_policy_id: Option<i64>,
    pub filter_events: Option<String>,
    pub status: String,
    /// Deliveries start at most this often a second, on average (burst 1); `None`: no limit.
    pub rate_limit_per_sec: Option<f64>,
    /// Most deliveries at once; 1 also means in order. `None`: the server's default cap.
    pub max_in_flight: Option<i64>,
    /// The secret before the last rotation; it signs too until `previous_secret_expires_at`.
    #[serde(skip)]
    pub previous_secret: Option<String>,
    #[serde(serialize_with = "ser_opt_ms")]
    pub previous_secret_expires_at: Option<i64>,
    #[serde(serialize_with = "ser_ms")]
    pub created_at: i64,
    #[serde(serialize_with = "ser_ms")]
    pub updated_at: i64,
    /// Why the endpoint is disabled ([`DisabledReason`]); `None` while enabled.
    pub disabled_reason: Option<String>,
    /// The health fields below are written only by the delivery pool's result commit
    /// ([`Tx::record_endpoint_health`](super::Tx::record_endpoint_health)) and by enable/disable, never by PATCH.
    #[serde(serialize_with = "ser_opt_ms")]
    pub last_success_at: Option<i64>,
    #[serde(serialize_with = "ser_opt_ms")]
    pub last_failure_at: Option<i64>,
    /// Attempts failed since the last success.
    pub consecutive_failures: i64,
}

/// Why an endpoint is disabled (contract §11 `disabled_reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DisabledReason {
    /// `POST /endpoints/{id}/disable`.
    Manual,
    /// It answered `410 Gone`.
    Gone,
    /// Auto-disable: failing for `--disable-failing-after-hours`.
    Failing,
}

impl DisabledReason {
    pub fn as_str(self) -> &'static str {
        match self {
            DisabledReason::Manual => "manual",
            DisabledReason::Gone => "gone",
            DisabledReason::Failing => "failing",
        }
    }
}

/// What the delivery pool's claim needs to know of an endpoint before taking its tasks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    pub enabled: bool,
    pub rate_limit_per_sec: Option<f64>,
    pub max_in_flight: Option<i64>,
}

/// What one dispatcher round saw of one endpoint's attempts, folded in order (see
/// `delivery::health`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HealthDelta {
    /// The latest success of the round, if any.
    pub last_success_at: Option<i64>,
    /// The latest failure of the round, if any.
    pub last_failure_at: Option<i64>,
    /// Failures after the round's last success (all of the round's failures when none
    /// succeeded).
    pub failures: i64,
    /// The first of those failures.
    pub first_failure_at: Option<i64>,
}

/// An enabled endpoint as fan-out sees it: where its tasks go and how many attempts they get.
#[derive(Debug, Clone)]
pub struct Target {
    pub id: i64,
    pub filter_events: Option<String>,
    /// From the endpoint's retry policy, or the default policy.
    pub max_attempts: i64,
}
