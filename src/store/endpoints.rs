//! The `endpoints` table: webhook targets of an app.
//! The record types and [`EndpointQueries`] live here; each backend implements the queries
//! in its own `endpoints.rs` (`store::sqlite::endpoints`, `store::postgres::endpoints`).

use crate::clock::{ser_ms, ser_opt_ms};
use crate::store::tasks::IfBusy;
use crate::store::{Page, StoreError};
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
    /// Conditions on an event's payload (`payload_filter`), all of which must hold for an event
    /// to reach the endpoint; stored as JSON text. `None`: no condition.
    pub filter_payload: Option<serde_json::Map<String, serde_json::Value>>,
    pub status: EndpointStatus,
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
    /// ([`Tx::write_endpoint_health`](super::Tx::write_endpoint_health)) and by
    /// enable/disable, never by PATCH.
    #[serde(serialize_with = "ser_opt_ms")]
    pub last_success_at: Option<i64>,
    #[serde(serialize_with = "ser_opt_ms")]
    pub last_failure_at: Option<i64>,
    /// Attempts failed since the last success.
    pub consecutive_failures: i64,
}

crate::store::word::words! {
    /// Whether an endpoint gets tasks (its `status` field).
    EndpointStatus, "endpoint status" {
        /// Events and schedules make tasks for it, and the delivery pool sends them.
        Enabled = "enabled",
        /// By hand, a `410 Gone` reply or auto-disable ([`DisabledReason`]): no new tasks, and
        /// its pending tasks wait.
        Disabled = "disabled",
    }
}

/// Why an endpoint is disabled (docs/design.md §11 `disabled_reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DisabledReason {
    /// `POST /endpoints/{id}/disable`.
    Manual,
    /// It answered `410 Gone`.
    Gone,
    /// Auto-disable: failing for `--disable-failing-after-hours`.
    Failing,
}

/// `filter_payload` as the column stores it: JSON text, or NULL.
pub fn filter_payload_text(ep: &Endpoint) -> Option<String> {
    ep.filter_payload
        .as_ref()
        .map(|f| serde_json::Value::Object(f.clone()).to_string())
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
    /// `filter_payload` as stored (JSON text); fan-out parses it once per publish.
    pub filter_payload: Option<String>,
    /// From the endpoint's retry policy, or the default policy.
    pub max_attempts: i64,
}

/// What [`EndpointQueries::enabled_targets_since`] found: the app's target generation is still
/// the one the caller holds, or it moved and here are the enabled endpoints as stored now.
#[derive(Debug)]
pub enum TargetsRead {
    /// The generation is the one given: the targets read at it are still current.
    Unchanged,
    /// The generation now, and every enabled endpoint of the app read at it (by id).
    Changed {
        generation: i64,
        targets: Vec<Target>,
    },
}

/// A new value for a generation: an app's target generation (`target_generation`, written by
/// every change to the app's targets) or the key generation (`KeyQueries::key_generation`).
/// Random rather than the old value plus one: a value written by a transaction that then rolled
/// back (say a SQLite group commit that failed after a request in it read the value) is never
/// written again, so what was read at it can never pass for current. Odd, so never 0 (no row
/// yet).
pub fn fresh_generation() -> i64 {
    rand::random::<i64>() | 1
}

/// The queries on endpoints, one body per backend (`store::sqlite::endpoints`,
/// `store::postgres::endpoints`); part of [`crate::store::Tx`].
pub trait EndpointQueries {
    /// Inserts `ep` (its `id` is ignored) and returns the stored record.
    fn insert_endpoint(&mut self, ep: &Endpoint) -> Result<Endpoint, StoreError>;
    /// Writes every field a PATCH may change back. Status and health are left alone: they have
    /// their own statements ([`EndpointQueries::set_endpoint_status`],
    /// [`EndpointQueries::write_endpoint_health`]), so a PATCH racing the delivery pool cannot
    /// undo a disabling.
    fn update_endpoint(&mut self, ep: &Endpoint) -> Result<(), StoreError>;
    /// An endpoint of an app.
    fn get_endpoint(&mut self, app_id: &str, id: i64) -> Result<Option<Endpoint>, StoreError>;
    /// Any endpoint by id, whatever its app (for the delivery pool).
    fn get_endpoint_any(&mut self, id: i64) -> Result<Option<Endpoint>, StoreError>;
    /// The endpoints of `ids` that exist, whatever their app, in no particular order: a
    /// dispatcher round's claimed tasks' endpoints. One [`EndpointQueries::get_endpoint_any`]
    /// each unless a backend reads them together (PostgreSQL: one statement, one round trip).
    fn get_endpoints_any(&mut self, ids: &[i64]) -> Result<Vec<Endpoint>, StoreError> {
        let mut found = Vec::with_capacity(ids.len());
        for &id in ids {
            found.extend(self.get_endpoint_any(id)?);
        }
        Ok(found)
    }
    /// `POST /endpoints/{id}/enable` and `/disable`: enabling clears `disabled_reason` and resets
    /// the failure streak (so auto-disable starts counting afresh); disabling records `reason`.
    /// Returns false when the endpoint already had that status (nothing changes then).
    fn set_endpoint_status(
        &mut self,
        app_id: &str,
        id: i64,
        enabled: bool,
        reason: DisabledReason,
        now_ms: i64,
    ) -> Result<bool, StoreError>;
    /// Disables any endpoint, whatever its app (the delivery pool: a `410 Gone` reply, or
    /// auto-disable). Returns the endpoint's app when it was enabled until now, `None` when it was
    /// already disabled (or is gone), so the caller tells the operator only once.
    fn disable_endpoint_any(
        &mut self,
        id: i64,
        reason: DisabledReason,
        now_ms: i64,
    ) -> Result<Option<String>, StoreError>;
    /// Applies a round's [`HealthDelta`] to an endpoint in the result commit: a success in the
    /// round restarts the streak from the failures after it, and without one the round's
    /// failures extend it. `last_success_at` and `last_failure_at` never move back: a change
    /// written late (a node's carried change, `delivery::health::Carried`) keeps a newer time
    /// already stored. One statement, however many of its attempts the round holds; the
    /// disabling test is [`EndpointQueries::disable_failing_endpoint`]'s.
    fn write_endpoint_health(&mut self, id: i64, delta: &HealthDelta) -> Result<(), StoreError>;
    /// The health deltas of a round's endpoints (id, delta; in id order, each id once), as
    /// [`EndpointQueries::write_endpoint_health`] writes each (the caller asks
    /// [`EndpointQueries::disable_failing_endpoint`] for the endpoints whose round failed).
    /// One call each unless a backend writes them together (PostgreSQL: one statement for the
    /// round). With [`IfBusy::Defer`] an endpoint another writer is writing at that moment is
    /// passed over: returns those endpoints (ascending), their changes not written. A store
    /// with one writer (SQLite) never passes one over.
    fn record_endpoints_health(
        &mut self,
        deltas: &[(i64, HealthDelta)],
        if_busy: IfBusy,
    ) -> Result<Vec<i64>, StoreError> {
        let _ = if_busy;
        for (id, delta) in deltas {
            self.write_endpoint_health(*id, delta)?;
        }
        Ok(Vec::new())
    }
    /// Disables endpoint `id` with reason `failing` when its streak reached `min_failures`
    /// attempts over at least `failing_after_ms` by `now_ms`; returns its app and streak
    /// length when this call did (the disabling test after
    /// [`EndpointQueries::write_endpoint_health`]; the delivery pool's `record` asks it for the
    /// endpoints whose round failed).
    fn disable_failing_endpoint(
        &mut self,
        id: i64,
        min_failures: i64,
        failing_after_ms: i64,
        now_ms: i64,
    ) -> Result<Option<(String, i64)>, StoreError>;
    /// One page, newest first, and the total count of matches.
    fn list_endpoints(
        &mut self,
        app_id: &str,
        status: Option<EndpointStatus>,
        page: Page,
    ) -> Result<(i64, Vec<Endpoint>), StoreError>;
    /// Names of the given endpoints of an app, for `endpoint_names`; unknown ids are left out.
    fn endpoint_names(
        &mut self,
        app_id: &str,
        ids: &[i64],
    ) -> Result<Vec<(i64, String)>, StoreError>;
    /// How many endpoints use a retry policy.
    fn count_endpoints_using_policy(&mut self, policy_id: i64) -> Result<i64, StoreError>;
    /// Deletes an endpoint in the caller's transaction: its pending tasks become `canceled`, and
    /// schedules that name it drop it from `endpoint_ids`. A schedule whose only target it was is
    /// paused rather than left with an empty list (which would mean "every endpoint").
    /// Returns `None` when there was no such endpoint, else the ids of the schedules it paused.
    fn delete_endpoint_cascade(
        &mut self,
        app_id: &str,
        id: i64,
        now_ms: i64,
    ) -> Result<Option<Vec<i64>>, StoreError>;
    /// Every enabled endpoint of an app with its task `max_attempts`, in one query.
    fn list_enabled_targets(&mut self, app_id: &str) -> Result<Vec<Target>, StoreError>;
    /// The app's target generation and, unless it is `held` (the generation of the targets the
    /// caller holds), its enabled endpoints as [`EndpointQueries::list_enabled_targets`] reads
    /// them, both as of one moment. Every write above that changes which endpoints get tasks,
    /// their filters or their attempts gives the app a new generation in its own transaction
    /// (as does `PolicyQueries::update_policy` for the apps of the endpoints using the policy), so
    /// targets read at one generation are current while it stays (`targets::TargetCache`).
    fn enabled_targets_since(
        &mut self,
        app_id: &str,
        held: Option<i64>,
    ) -> Result<TargetsRead, StoreError>;
}
