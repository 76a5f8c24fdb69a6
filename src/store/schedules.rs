//! The `schedules` table (cron-driven triggers) and `schedule_firings`, the record of every
//! (schedule, scheduled instant) that has fired, which makes firing idempotent.
//! The record types live here; the SQLite SQL is in `store::sqlite::schedules`.

use crate::clock::{ser_ms, ser_opt_ms};
use serde::Serialize;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// A schedule record, serialized exactly as the API returns it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Schedule {
    pub id: i64,
    pub app_id: String,
    pub name: String,
    pub cron_expr: String,
    pub timezone: String,
    pub payload: Map<String, Value>,
    /// `active`, `paused` or `deleted`.
    pub status: String,
    /// The next fire instant; `None` while paused or deleted.
    #[serde(serialize_with = "ser_opt_ms")]
    pub next_run_at: Option<i64>,
    /// The scheduled instant of the latest firing (manual triggers do not count).
    #[serde(serialize_with = "ser_opt_ms")]
    pub last_run_at: Option<i64>,
    #[serde(serialize_with = "ser_ms")]
    pub created_at: i64,
    #[serde(serialize_with = "ser_ms")]
    pub updated_at: i64,
    /// Target endpoints; empty means every enabled endpoint of the app at fire time.
    pub endpoint_ids: Vec<i64>,
    /// Why webhookd itself paused the schedule (its last target endpoint was deleted); null
    /// when a client paused it. While set with an empty `endpoint_ids`, resume and trigger are
    /// refused, because an empty list would mean "every endpoint".
    pub paused_reason: Option<String>,
    /// Runs missed while the server was down: `latest`, `none` or `all` (CONTRACT §13).
    pub catchup: String,
    /// `allow`, or `skip`: no new task for an endpoint while this schedule's earlier task for
    /// it is still `pending` or `running`.
    pub overlap: String,
    /// Runs not fired: missed instants that `catchup` did not fire, and instants at which
    /// `overlap: skip` held back the task of at least one endpoint.
    pub skipped_runs: i64,
    /// Endpoint id → name for `endpoint_ids`; not stored, filled by [`Tx::fill_schedule_names`](super::Tx::fill_schedule_names).
    pub endpoint_names: BTreeMap<String, String>,
    /// `next_run_at` on the schedule's wall clock, RFC 3339 with offset; not stored, filled
    /// by [`Tx::fill_schedule_names`](super::Tx::fill_schedule_names).
    pub next_run_at_local: Option<String>,
}

impl Schedule {
    /// What firing this schedule needs.
    pub fn firing(&self) -> Firing {
        Firing {
            id: self.id,
            app_id: self.app_id.clone(),
            cron_expr: self.cron_expr.clone(),
            timezone: self.timezone.clone(),
            payload: Value::Object(self.payload.clone()).to_string(),
            endpoint_ids: self.endpoint_ids.clone(),
            next_run_at: self.next_run_at,
            catchup: self.catchup.clone(),
            overlap: self.overlap.clone(),
        }
    }
}

/// The columns of a schedule the scheduler reads to fire it.
#[derive(Debug, Clone, PartialEq)]
pub struct Firing {
    pub id: i64,
    pub app_id: String,
    pub cron_expr: String,
    pub timezone: String,
    /// Compact JSON text, copied into each task as is.
    pub payload: String,
    pub endpoint_ids: Vec<i64>,
    pub next_run_at: Option<i64>,
    /// See [`Schedule::catchup`].
    pub catchup: String,
    /// See [`Schedule::overlap`].
    pub overlap: String,
}

/// Every `catchup` value; the first is the default.
pub const CATCHUP: [&str; 3] = ["latest", "none", "all"];

/// Every `overlap` value; the first is the default.
pub const OVERLAP: [&str; 2] = ["allow", "skip"];
