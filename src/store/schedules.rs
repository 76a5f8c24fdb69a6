//! The `schedules` table (cron-driven triggers) and `schedule_firings`, the record of every
//! (schedule, scheduled instant) that has fired, which makes firing idempotent.
//! The record types and [`ScheduleQueries`] live here; each backend implements the queries
//! in its own `schedules.rs` (`store::sqlite::schedules`, `store::postgres::schedules`).

use crate::clock::{ser_ms, ser_opt_ms};
use crate::store::{Page, StoreError};
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
    pub status: ScheduleStatus,
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
    /// Runs missed while the server was down: `latest`, `none` or `all` (docs/design.md §13).
    pub catchup: Catchup,
    /// `allow`, or `skip`: no new task for an endpoint while this schedule's earlier task for
    /// it is still `pending` or `running`.
    pub overlap: Overlap,
    /// Runs not fired: missed instants that `catchup` did not fire, and instants at which
    /// `overlap: skip` held back the task of at least one endpoint.
    pub skipped_runs: i64,
    /// The schedule fires only at instants at or after this (ms); null: no start.
    #[serde(serialize_with = "ser_opt_ms")]
    pub starts_at: Option<i64>,
    /// The schedule fires only at instants at or before this (ms); null: no end. Past it the
    /// schedule stays `active` with `next_run_at` null.
    #[serde(serialize_with = "ser_opt_ms")]
    pub ends_at: Option<i64>,
    /// Each firing's tasks are due at a random moment up to this many seconds after the
    /// instant (0..=3600).
    pub jitter_sec: i64,
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
            payload: self.payload_text(),
            endpoint_ids: self.endpoint_ids.clone(),
            next_run_at: self.next_run_at,
            catchup: self.catchup,
            overlap: self.overlap,
            window: self.window(),
            jitter_sec: self.jitter_sec,
        }
    }

    /// `payload` as its column stores it: compact JSON text.
    pub fn payload_text(&self) -> String {
        Value::Object(self.payload.clone()).to_string()
    }

    /// `endpoint_ids` as its column stores it: a JSON array, read back as
    /// [`Stored<ScheduleTargets>`](crate::store::json::ScheduleTargets).
    pub fn endpoint_ids_text(&self) -> String {
        serde_json::to_string(&self.endpoint_ids).unwrap_or_else(|_| "[]".into())
    }

    /// The instants this schedule may fire at.
    pub fn window(&self) -> Window {
        Window {
            starts_at: self.starts_at,
            ends_at: self.ends_at,
        }
    }
}

/// The closed interval of instants a schedule may fire at (`starts_at`, `ends_at`, ms; `None`
/// is open on that side).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Window {
    pub starts_at: Option<i64>,
    pub ends_at: Option<i64>,
}

impl Window {
    /// Whether the instant `ms` is inside the window.
    pub fn contains(&self, ms: i64) -> bool {
        self.starts_at.is_none_or(|s| ms >= s) && self.ends_at.is_none_or(|e| ms <= e)
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
    pub catchup: Catchup,
    /// See [`Schedule::overlap`].
    pub overlap: Overlap,
    /// See [`Schedule::window`].
    pub window: Window,
    /// See [`Schedule::jitter_sec`].
    pub jitter_sec: i64,
}

crate::store::word::words! {
    /// The state of a schedule (its `status` field).
    ScheduleStatus, "schedule status" {
        /// Fires at its instants.
        Active = "active",
        /// Fires only when triggered by hand; resuming plans its next run from then.
        Paused = "paused",
        /// Soft-deleted: still readable, never fires again, and cannot be changed.
        Deleted = "deleted",
    }
}

crate::store::word::words! {
    /// What a schedule does with runs missed while the server was down (its `catchup` field).
    Catchup, "catchup mode" {
        /// Fire once, for the latest missed instant within the grace.
        Latest = "latest",
        /// Fire none of them; only a run found on time fires.
        None = "none",
        /// Fire each missed instant within the grace, oldest first, the latest
        /// `scheduler::MAX_CATCHUP_RUNS` at most.
        All = "all",
    }
}

crate::store::word::words! {
    /// Whether a firing makes a task for an endpoint that still has an open task of the
    /// schedule (its `overlap` field).
    Overlap, "overlap mode" {
        /// Always.
        Allow = "allow",
        /// Not while an earlier task of the schedule for that endpoint is pending or running.
        Skip = "skip",
    }
}

/// The queries on schedules and their firings, one body per backend (`store::sqlite::schedules`,
/// `store::postgres::schedules`); part of [`crate::store::Tx`].
pub trait ScheduleQueries {
    /// Inserts `s` (its `id` is ignored) and returns the stored record.
    fn insert_schedule(&mut self, s: &Schedule) -> Result<Schedule, StoreError>;
    /// Writes every field an API call may change back (`last_run_at` belongs to the scheduler).
    fn update_schedule(&mut self, s: &Schedule) -> Result<(), StoreError>;
    /// A schedule of an app, deleted ones included.
    fn get_schedule(&mut self, app_id: &str, id: i64) -> Result<Option<Schedule>, StoreError>;
    /// One page of an app's schedules that are not deleted, newest first, and the total count.
    fn list_schedules(
        &mut self,
        app_id: &str,
        status: Option<ScheduleStatus>,
        page: Page,
    ) -> Result<(i64, Vec<Schedule>), StoreError>;
    /// Active schedules due at `now_ms`, earliest first, at most `limit`.
    fn due_schedules(&mut self, now_ms: i64, limit: usize) -> Result<Vec<Firing>, StoreError>;
    /// An active schedule by id, whatever its app.
    fn get_active_schedule(&mut self, id: i64) -> Result<Option<Firing>, StoreError>;
    /// The earliest `next_run_at` of all active schedules: when the scheduler has work next.
    fn earliest_next_run(&mut self) -> Result<Option<i64>, StoreError>;
    /// Records that each `(schedule_id, scheduled_at)` of `firings` fired, in one statement
    /// where the backend gains from it; returns, for each, whether it was recorded now: false
    /// when it had fired already (on any node), or appears earlier in `firings`. Callers pass
    /// them in ascending order, so two transactions recording overlapping sets on PostgreSQL
    /// wait for each other in one order and cannot deadlock.
    fn record_firings(&mut self, firings: &[(i64, i64)]) -> Result<Vec<bool>, StoreError>;
    /// Records that `schedule_id` fired for `scheduled_at`; false when it already had.
    fn record_firing(&mut self, schedule_id: i64, scheduled_at: i64) -> Result<bool, StoreError> {
        Ok(self.record_firings(&[(schedule_id, scheduled_at)])? == [true])
    }
    /// Moves active schedules on after the scheduler looked at them (see [`Advance`]), in
    /// one statement where the backend gains from it, at most one move per schedule.
    /// `updated_at` is left alone (it tracks changes by the API); a schedule no longer active
    /// is left alone.
    fn advance_schedules(&mut self, moves: &[Advance]) -> Result<(), StoreError>;
    /// Moves an active schedule on after the scheduler looked at it: `next_run_at` always,
    /// `last_run_at` when it fired, `skipped_runs` up by `skipped`. `updated_at` is left alone
    /// (it tracks changes by the API).
    fn advance_schedule(
        &mut self,
        id: i64,
        fired_at: Option<i64>,
        next_run_at: Option<i64>,
        skipped: i64,
    ) -> Result<(), StoreError> {
        self.advance_schedules(&[Advance {
            id,
            fired_at,
            next_run_at,
            skipped,
        }])
    }
}

/// How the scheduler moves one schedule on ([`ScheduleQueries::advance_schedules`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Advance {
    pub id: i64,
    /// The instant it fired for, set as `last_run_at`; `None` leaves `last_run_at` alone.
    pub fired_at: Option<i64>,
    /// The new `next_run_at` (`None`: no instant left in its window).
    pub next_run_at: Option<i64>,
    /// Added to `skipped_runs`.
    pub skipped: i64,
}
