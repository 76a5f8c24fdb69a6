//! The `tasks` table: one row per delivery unit, created by a schedule, an event or by hand.
//! The record types and [`TaskQueries`] live here; each backend implements the queries
//! in its own `tasks.rs` (`store::sqlite::tasks`, `store::postgres::tasks`).

use crate::clock::{ser_ms, ser_opt_ms};
use crate::store::list::{Bind, Filters};
use crate::store::{Page, StoreError, Word};
use serde::Serialize;

/// A task record, serialized exactly as the API returns it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Task {
    pub id: i64,
    pub app_id: String,
    pub schedule_id: Option<i64>,
    pub event_id: Option<i64>,
    pub endpoint_id: i64,
    pub task_type: TaskKind,
    pub payload: serde_json::Value,
    pub status: TaskStatus,
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
    /// The W3C trace id its deliveries carry (32 hex); `None` for tasks made before traces
    /// (docs/API.md, "Traces").
    pub trace_id: Option<String>,
}

/// What creating a task needs; it starts `pending`, due at `run_at`.
#[derive(Debug, Clone)]
pub struct NewTask<'a> {
    pub app_id: &'a str,
    pub schedule_id: Option<i64>,
    pub event_id: Option<i64>,
    pub endpoint_id: i64,
    pub task_type: TaskKind,
    /// Compact JSON text of an object, stored and sent as is.
    pub payload: &'a str,
    pub run_at: i64,
    pub max_attempts: i64,
    pub now_ms: i64,
    /// The trace its deliveries continue (`trace::TaskTraces` hands it out).
    pub trace: crate::trace::TaskTrace,
}

crate::store::word::words! {
    /// The state of a task.
    TaskStatus, "task status" {
        Pending = "pending",
        Running = "running",
        Success = "success",
        Failed = "failed",
        Canceled = "canceled",
    }
}

crate::store::word::words! {
    /// How a task came about: a schedule's firing, a published event, or by hand (`POST /tasks`,
    /// a schedule's trigger, an endpoint test).
    TaskKind, "task type" {
        Schedule = "schedule",
        Event = "event",
        Manual = "manual",
    }
}

/// What `GET /tasks?status=` asks for: the tasks in one state, or `retrying` (pending tasks
/// that have failed at least one attempt; their records still say `pending`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusFilter {
    /// The tasks in this state.
    Is(TaskStatus),
    /// Pending tasks with at least one failed attempt.
    Retrying,
}

impl Word for StatusFilter {
    const WHAT: &'static str = "task status filter";
    const ALL: &'static [Self] = &[
        StatusFilter::Is(TaskStatus::Pending),
        StatusFilter::Is(TaskStatus::Running),
        StatusFilter::Is(TaskStatus::Success),
        StatusFilter::Is(TaskStatus::Failed),
        StatusFilter::Is(TaskStatus::Canceled),
        StatusFilter::Retrying,
    ];

    fn word(&self) -> &'static str {
        match self {
            StatusFilter::Is(status) => status.word(),
            StatusFilter::Retrying => "retrying",
        }
    }
}

/// Filters of `GET /tasks`; `None` means "any".
#[derive(Debug, Default, Clone)]
pub struct TaskFilter {
    pub status: Option<StatusFilter>,
    pub schedule_id: Option<i64>,
    pub event_id: Option<i64>,
    pub endpoint_id: Option<i64>,
    pub task_type: Option<TaskKind>,
}

impl TaskFilter {
    /// Whether the page is read status by status, merged (`Filters::merged_over`): with no
    /// status and no filter that has an index of its own (schedule, event, endpoint), i.e. by
    /// app alone or by type. `tasks_app_status (app_id, status, id)` gives each status its
    /// tasks newest first; no index holds the app's tasks in id order across statuses
    /// (docs/dev/storage.md, "The list by app alone without tasks_app").
    pub fn pages_by_status(&self) -> bool {
        self.status.is_none()
            && self.schedule_id.is_none()
            && self.event_id.is_none()
            && self.endpoint_id.is_none()
    }

    /// The conditions of a task list of `app_id` in either backend's values. `retrying` is
    /// written as the exact condition of the partial index `tasks_retrying`, so the store reads
    /// that index instead of every pending task of the app. `by_event` writes the event's
    /// condition (SQLite reads an event's tasks by their id range: `Filters::event`).
    pub fn conditions<V: Bind>(
        &self,
        app_id: &str,
        by_event: impl FnOnce(Filters<V>, i64) -> Filters<V>,
    ) -> Filters<V> {
        let filters = Filters::app(app_id);
        let (filters, status) = match self.status {
            Some(StatusFilter::Retrying) => {
                (filters.always("status = 'pending' AND attempts > 0"), None)
            }
            Some(StatusFilter::Is(status)) => (filters, Some(status)),
            None => (filters, None),
        };
        let filters = filters
            .eq_word("status", status)
            .eq_int("schedule_id", self.schedule_id);
        let filters = match self.event_id {
            Some(event_id) => by_event(filters, event_id),
            None => filters,
        };
        filters
            .eq_int("endpoint_id", self.endpoint_id)
            .eq_word("task_type", self.task_type)
    }
}

/// An endpoint with pending tasks, as the dispatcher's walk reads it
/// ([`TaskQueries::endpoints_with_pending`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PendingEndpoint {
    pub endpoint_id: i64,
    /// Epoch ms when its earliest pending task is due.
    pub earliest_due: i64,
    /// `None`: the endpoint is gone (its tasks are canceled in the delete's transaction).
    pub limits: Option<crate::store::endpoints::Limits>,
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
    /// The app it belongs to (for span attributes).
    pub app_id: String,
    /// When this attempt became due (ms): the start of its queue wait.
    pub due_at: i64,
    /// Its trace; `None` for tasks made before traces (each attempt then starts one).
    pub trace: Option<crate::trace::TaskTrace>,
    /// Its app's target generation as the claim saw it (the one
    /// [`EndpointQueries::enabled_targets_since`](crate::store::EndpointQueries::enabled_targets_since)
    /// reads), when the store reads it with the claim; `None` where it does not. Every write to
    /// an endpoint or retry policy of the app gives it a new one in the same transaction, so
    /// the dispatcher may send with the endpoint it loaded at this generation instead of
    /// reading it again (`delivery::held`).
    pub target_generation: Option<i64>,
}

impl Claimed {
    /// Its trace id in hex for log lines; empty for a task made before traces.
    pub fn trace_id_hex(&self) -> String {
        self.trace
            .map(|t| hex::encode(t.trace_id))
            .unwrap_or_default()
    }
}

/// The state an attempt leaves its task in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterAttempt {
    Success,
    /// Back to `pending`, due again at this instant (ms).
    RetryAt(i64),
    Failed,
}

/// One result for [`TaskQueries::finish_attempts`]: the arguments of
/// [`TaskQueries::finish_attempt`].
#[derive(Debug, Clone, Copy)]
pub struct Finish<'a> {
    pub task_id: i64,
    pub attempt: i64,
    pub after: AfterAttempt,
    pub last_status_code: Option<i64>,
    pub last_error: Option<&'a str>,
    pub now_ms: i64,
}

impl Finish<'_> {
    /// This result recorded with its own [`TaskQueries::finish_attempt`].
    pub fn record_alone<Q: TaskQueries + ?Sized>(&self, tx: &mut Q) -> Result<bool, StoreError> {
        tx.finish_attempt(
            self.task_id,
            self.attempt,
            self.after,
            self.last_status_code,
            self.last_error,
            self.now_ms,
        )
    }
}

/// What [`TaskQueries::record_attempts`] does with an endpoint whose health another writer
/// (another node's round) is writing at that moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IfBusy {
    /// Waits until the other writer is done, then writes (every write but a dispatcher's round).
    Wait,
    /// Leaves that endpoint's change unwritten and says so ([`Recorded::deferred`]): the caller
    /// carries it and writes it later. Where no other writer can be under way (one process owns
    /// the database) nothing is ever deferred.
    Defer,
}

/// What [`TaskQueries::record_attempts`] wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    /// Whether each result was recorded, in order.
    pub recorded: Vec<bool>,
    /// The health was written: every result was recorded (the endpoints in `deferred` aside).
    /// Otherwise none was, and the caller writes the health of the recorded ones.
    pub health_written: bool,
    /// Endpoints whose change was not written because another writer was writing the endpoint
    /// at that moment ([`IfBusy::Defer`] only), ascending.
    pub deferred: Vec<i64>,
}

/// [`TaskQueries::record_attempts`] as three calls in turn (a backend's one-statement form
/// falls back to it); it waits for a busy endpoint ([`IfBusy::Wait`]), deferring nothing.
pub fn record_attempts_in_turn<Q>(
    tx: &mut Q,
    results: &[Finish<'_>],
    attempts: &[crate::store::attempts::Attempt],
    health: &[(i64, crate::store::endpoints::HealthDelta)],
) -> Result<Recorded, StoreError>
where
    Q: TaskQueries + crate::store::AttemptQueries + crate::store::EndpointQueries + ?Sized,
{
    let recorded = tx.finish_attempts(results)?;
    let kept: Vec<_> = attempts
        .iter()
        .zip(&recorded)
        .filter(|(_, r)| **r)
        .map(|(a, _)| a.clone())
        .collect();
    tx.insert_attempts(&kept)?;
    let health_written = recorded.iter().all(|r| *r);
    if health_written {
        tx.record_endpoints_health(health, IfBusy::Wait)?;
    }
    Ok(Recorded {
        recorded,
        health_written,
        deferred: Vec::new(),
    })
}

/// The filter of `POST /tasks/retry`: tasks of one app in one finished state (`failed` or
/// `canceled`), narrowed by whichever of the other fields are given.
#[derive(Debug, Clone)]
pub struct RetryFilter {
    /// `failed` or `canceled`.
    pub status: TaskStatus,
    pub endpoint_id: Option<i64>,
    pub schedule_id: Option<i64>,
    pub event_id: Option<i64>,
    /// `finished_at >= since` (ms).
    pub since: Option<i64>,
    /// `finished_at < until` (ms).
    pub until: Option<i64>,
}

/// The queries on tasks, one body per backend (`store::sqlite::tasks`,
/// `store::postgres::tasks`); part of [`crate::store::Tx`].
pub trait TaskQueries {
    /// Hands tasks whose lease expired (their node died mid-delivery) back to `pending`;
    /// returns how many: always 0 where one process owns the database. The delivery pool calls
    /// it every `Watcher::rescue_every`.
    fn rescue_expired_leases(&mut self, now_ms: i64) -> Result<usize, StoreError>;
    /// Inserts a pending task and returns its id. Use inside the caller's transaction when
    /// creating several (fan-out), so they commit together.
    fn insert_task(&mut self, t: &NewTask<'_>) -> Result<i64, StoreError>;
    /// Inserts pending tasks, in one statement where the backend gains from it (PostgreSQL:
    /// one round trip for the fan-out of a whole batch of firings), and returns their ids in
    /// the order of `tasks`.
    fn insert_tasks(&mut self, tasks: &[NewTask<'_>]) -> Result<Vec<i64>, StoreError>;
    /// A task of an app.
    fn get_task(&mut self, app_id: &str, id: i64) -> Result<Option<Task>, StoreError>;
    /// One page, newest first, and the total count of matches.
    fn list_tasks(
        &mut self,
        app_id: &str,
        f: &TaskFilter,
        page: Page,
    ) -> Result<(i64, Vec<Task>), StoreError>;
    /// Up to `limit` endpoints with ids between `after` and `before` (both excluded) that have
    /// pending tasks, in id order, each with when its earliest pending task is due and its
    /// limits. One statement: a seek in `tasks_endpoint_due` and a look-up of the endpoint per
    /// endpoint, however many tasks each holds; fewer than `limit` means there are no more. The
    /// dispatcher's walk reads the gaps between the endpoints it knows to be full a page at a
    /// time (`delivery::fair`).
    fn endpoints_with_pending(
        &mut self,
        after: i64,
        before: i64,
        limit: usize,
    ) -> Result<Vec<PendingEndpoint>, StoreError>;
    /// The head of an in-order endpoint: its pending task that became due first (ties by id), and
    /// when it is due now (later than the others when it waits to retry).
    fn in_order_head(&mut self, endpoint_id: i64) -> Result<Option<(i64, i64)>, StoreError>;
    /// Marks up to `limit` due tasks of one endpoint `running` and returns them, earliest due first
    /// (ties by id). `attempts` is only counted when the attempt's result is recorded, so a claim
    /// lost to a crash costs no attempt. The caller has checked the endpoint is enabled.
    fn claim_endpoint_tasks(
        &mut self,
        endpoint_id: i64,
        now_ms: i64,
        limit: usize,
    ) -> Result<Vec<Claimed>, StoreError>;
    /// [`TaskQueries::claim_endpoint_tasks`] for several endpoints (the dispatcher's round:
    /// endpoint id and limit each, distinct endpoints); returns each endpoint's claimed tasks
    /// in the order of `wanted`. PostgreSQL claims them all with one statement (one round trip
    /// per round instead of one per endpoint); SQLite runs the endpoints' claims in turn.
    fn claim_endpoints_tasks(
        &mut self,
        wanted: &[(i64, usize)],
        now_ms: i64,
    ) -> Result<Vec<Vec<Claimed>>, StoreError> {
        wanted
            .iter()
            .map(|&(endpoint_id, limit)| self.claim_endpoint_tasks(endpoint_id, now_ms, limit))
            .collect()
    }
    /// Claims one task by id if it is still pending and due (an in-order endpoint's head).
    fn claim_task(&mut self, id: i64, now_ms: i64) -> Result<Option<Claimed>, StoreError>;
    /// Records the result of attempt `attempt` on a `running` task. A task whose endpoint was
    /// deleted while it was in flight is `canceled` instead of going back to `pending`. Returns
    /// false (and changes nothing) when the task is no longer `running` — e.g. it was handed back
    /// at shutdown — so the caller leaves the attempt unrecorded, and it will be made again.
    fn finish_attempt(
        &mut self,
        task_id: i64,
        attempt: i64,
        after: AfterAttempt,
        last_status_code: Option<i64>,
        last_error: Option<&str>,
        now_ms: i64,
    ) -> Result<bool, StoreError>;
    /// [`TaskQueries::finish_attempt`] for several tasks (the delivery pool's results of one
    /// round, in the round's transaction); returns, in order, whether each was recorded.
    /// PostgreSQL records distinct tasks with one statement (one round trip).
    fn finish_attempts(&mut self, results: &[Finish<'_>]) -> Result<Vec<bool>, StoreError> {
        results.iter().map(|f| f.record_alone(self)).collect()
    }
    /// [`TaskQueries::finish_attempts`], the attempt row of each result it recorded
    /// (`attempts[i]` is the attempt of `results[i]`; the others are not written), and, when
    /// every result was recorded, the round's endpoint health as
    /// [`EndpointQueries::record_endpoints_health`](crate::store::EndpointQueries::record_endpoints_health)
    /// writes it (`health`: the deltas of all the results): the delivery pool's results of one
    /// round. PostgreSQL writes the three with one statement when the tasks are distinct, and
    /// with [`IfBusy::Defer`] passes over an endpoint another writer is writing at that moment
    /// ([`Recorded::deferred`]) instead of waiting for it.
    fn record_attempts(
        &mut self,
        results: &[Finish<'_>],
        attempts: &[crate::store::attempts::Attempt],
        health: &[(i64, crate::store::endpoints::HealthDelta)],
        if_busy: IfBusy,
    ) -> Result<Recorded, StoreError>;
    /// Marks a task just inserted in the caller's transaction as `running`, so the delivery pool
    /// never claims it (`POST /endpoints/{id}/test` sends it itself).
    fn start_task_now(&mut self, id: i64, now_ms: i64) -> Result<(), StoreError>;
    /// The app a task belongs to (the delivery pool knows tasks by id only).
    fn task_app(&mut self, id: i64) -> Result<Option<String>, StoreError>;
    /// Hands every `running` task back to `pending` (start-up after a crash, or shutdown after the
    /// grace): the attempt it was in is made again. Returns how many.
    fn requeue_running_tasks(&mut self, now_ms: i64) -> Result<usize, StoreError>;
    /// Extends this node's leases on claimed tasks that waited in memory for a worker, just
    /// before they are sent; returns the ids still held. A task missing from the answer was
    /// taken back after its lease ran out and must not be sent. Where one process owns the
    /// database, every id (there are no leases to lose).
    fn renew_leases(&mut self, ids: &[i64], now_ms: i64) -> Result<Vec<i64>, StoreError>;
    /// Cancels pending tasks whose endpoint no longer exists (they could never be delivered).
    fn cancel_orphan_tasks(&mut self, now_ms: i64) -> Result<usize, StoreError>;
    /// `POST /tasks/{id}/cancel`: a pending task becomes `canceled`. Returns false when the task
    /// is not pending (or not there).
    fn cancel_task(&mut self, app_id: &str, id: i64, now_ms: i64) -> Result<bool, StoreError>;
    /// `POST /tasks/{id}/retry` and `POST /tasks/retry`: the tasks among `ids` (of `app_id`) that
    /// are `failed` or `canceled` and whose endpoint still exists go back to `pending`, due now,
    /// with their attempt count reset and `max_attempts` taken from their endpoint's current
    /// retry policy (the default policy's when it has none). Returns the ids it changed; a task in
    /// another state, of another app, or of a deleted endpoint is left alone.
    fn retry_tasks(
        &mut self,
        app_id: &str,
        ids: &[i64],
        now_ms: i64,
    ) -> Result<Vec<i64>, StoreError>;
    /// The ids of the tasks `f` matches whose endpoint still exists, lowest first, at most
    /// `limit`. A read: it takes no write lock, so the bulk retry selects before it writes.
    fn retryable_task_ids(
        &mut self,
        app_id: &str,
        f: &RetryFilter,
        limit: usize,
    ) -> Result<Vec<i64>, StoreError>;
    /// Whether a task of `schedule_id` for `endpoint_id` is still `pending` or `running`: the
    /// overlap check of a schedule with `overlap: skip` (index `tasks_schedule_open`).
    fn schedule_task_open(
        &mut self,
        schedule_id: i64,
        endpoint_id: i64,
    ) -> Result<bool, StoreError>;
    /// How many tasks are in each status, over every app (for `/metrics`).
    fn count_tasks_by_status(&mut self) -> Result<Vec<(TaskStatus, i64)>, StoreError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `GET /tasks?status=` takes every task status, in the order the API lists them, then
    /// `retrying`.
    #[test]
    fn the_status_filter_takes_every_status_then_retrying() {
        let words: Vec<_> = StatusFilter::ALL.iter().map(Word::word).collect();
        let mut expected: Vec<_> = TaskStatus::ALL.iter().map(Word::word).collect();
        expected.push("retrying");
        assert_eq!(words, expected);
    }
}
