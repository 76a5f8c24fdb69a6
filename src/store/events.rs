//! The `events` table: named occurrences published by clients, each fanned out into tasks.
//! The record types and [`EventQueries`] live here; each backend implements the queries
//! in its own `events.rs` (`store::sqlite::events`, `store::postgres::events`).

use crate::clock::ser_ms;
use crate::store::endpoints::{EndpointQueries, TargetsRead};
use crate::store::tasks::{NewTask, TaskQueries};
use crate::store::{Page, StoreError};
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
    pub status: EventStatus,
    /// How many tasks (matching enabled endpoints) it created.
    pub task_count: i64,
    #[serde(serialize_with = "ser_ms")]
    pub created_at: i64,
}

crate::store::word::words! {
    /// The state of an event (its `status` field).
    EventStatus, "event status" {
        /// Its tasks were created with it (the only state an event has).
        Dispatched = "dispatched",
    }
}

/// An event as a client publishes it (or the server, for operator events): what
/// [`EventQueries::insert_event_with_tasks`] writes, with the time it is written at.
#[derive(Clone, Copy, Debug)]
pub struct NewEvent<'a> {
    pub app_id: &'a str,
    pub event_name: &'a str,
    /// The client's idempotency key (`event_key`), if it gave one.
    pub event_key: Option<&'a str>,
    /// Compact JSON text of an object, stored as is.
    pub payload: &'a str,
    pub now_ms: i64,
}

/// The queries on events, one body per backend (`store::sqlite::events`,
/// `store::postgres::events`); part of [`crate::store::Tx`]. An event is written with its tasks
/// ([`EventQueries::insert_event_with_tasks`]), hence the tasks' queries.
pub trait EventQueries: TaskQueries + EndpointQueries {
    /// Inserts an event that made `task_count` tasks; returns its id.
    fn insert_event(&mut self, event: &NewEvent<'_>, task_count: i64) -> Result<i64, StoreError>;
    /// [`EventQueries::insert_event_with_tasks`] if the app's target generation is still
    /// `generation`, the one the targets `tasks` were chosen from were read at
    /// ([`crate::targets::TargetCache`]); else writes nothing and returns `None`, and the caller
    /// reads the targets again. The generation is read in this call, as a publish reading it
    /// first would. PostgreSQL tests it and writes in one statement, one round trip.
    fn insert_event_with_tasks_at(
        &mut self,
        event: &NewEvent<'_>,
        generation: i64,
        tasks: &mut [NewTask<'_>],
    ) -> Result<Option<Event>, StoreError> {
        match self.enabled_targets_since(event.app_id, Some(generation))? {
            TargetsRead::Unchanged => self.insert_event_with_tasks(event, tasks).map(Some),
            TargetsRead::Changed { .. } => Ok(None),
        }
    }
    /// The first event published with this name and key since `since_ms`.
    fn find_event_by_key(
        &mut self,
        app_id: &str,
        event_name: &str,
        event_key: &str,
        since_ms: i64,
    ) -> Result<Option<Event>, StoreError>;
    /// A published event with its tasks: inserts the event, then `tasks` (their `event_id` set
    /// to the event's), and returns the event as stored. PostgreSQL writes both and reads the
    /// event back in one statement.
    fn insert_event_with_tasks(
        &mut self,
        event: &NewEvent<'_>,
        tasks: &mut [NewTask<'_>],
    ) -> Result<Event, StoreError> {
        let task_count = i64::try_from(tasks.len()).unwrap_or(i64::MAX);
        let id = self.insert_event(event, task_count)?;
        for task in tasks.iter_mut() {
            task.event_id = Some(id);
        }
        self.insert_tasks(tasks)?;
        self.get_event(event.app_id, id)?.ok_or_else(|| {
            StoreError::Other(anyhow::anyhow!(
                "event {id} vanished inside its transaction"
            ))
        })
    }
    /// An event of an app.
    fn get_event(&mut self, app_id: &str, id: i64) -> Result<Option<Event>, StoreError>;
    /// One page, newest first, and the total count of matches.
    fn list_events(
        &mut self,
        app_id: &str,
        event_name: Option<&str>,
        page: Page,
    ) -> Result<(i64, Vec<Event>), StoreError>;
}
