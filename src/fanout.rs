//! Fan-out, the one home of the rule "who gets a task": for a published event, an operator
//! event (`webhookd.*`), and a schedule's firing or trigger, which endpoints of the app get
//! one and the pending tasks made for them, in the caller's transaction so they commit
//! together. Called by `POST /events` (`api::events`), `operator::publish` and the scheduler.

use crate::payload_filter::{PayloadFilter, Verdict};
use crate::store::endpoints::Target;
use crate::store::events::{Event, NewEvent};
use crate::store::schedules::{Firing, Overlap};
use crate::store::tasks::{NewTask, TaskKind};
use crate::store::{StoreError, Tx};
use crate::targets::{TargetCache, TargetSet};
use crate::trace::TaskTraces;
use serde_json::Value;
use std::collections::{HashMap, HashSet};

/// An event published by a client: every enabled endpoint of its app whose `filter_events`
/// takes its name and whose `filter_payload` holds for its payload gets an `event` task.
/// Each task is in the trace `traces` hands out (the request's, or one of its own). Returns
/// the event as stored and how many tasks it made.
///
/// The app's endpoints come from `targets` (held in memory, checked against the store in
/// `tx` by the insert itself when held: [`held_event`]): their `filter_payload`s are parsed
/// when read, not per publish, and the payload is parsed only when an endpoint the name
/// reaches has one.
pub fn event(
    tx: &mut dyn Tx,
    targets: &TargetCache,
    event: &NewEvent<'_>,
    traces: &mut TaskTraces,
) -> Result<(Event, usize), StoreError> {
    if let Some(done) = held_event(tx, targets, event, traces)? {
        return Ok(done);
    }
    read_targets_event(tx, targets, event, traces)
}

/// [`event`] with the targets held, when `targets` holds the app's: the insert tests their
/// generation itself (`insert_event_with_tasks_at`: one statement on PostgreSQL, which may
/// carry the request's replay record too, `Store::write_statement`). `None`, nothing written
/// and `traces` as they were, when none are held or their generation moved (or the statement
/// found the request a replay): then [`read_targets_event`], in a transaction.
pub fn held_event(
    tx: &mut dyn Tx,
    targets: &TargetCache,
    event: &NewEvent<'_>,
    traces: &mut TaskTraces,
) -> Result<Option<(Event, usize)>, StoreError> {
    let Some(set) = targets.held(event.app_id) else {
        return Ok(None);
    };
    let mark = traces.mark();
    let chosen = chosen_targets(&set, event.event_name, event.payload);
    let mut tasks = new_tasks(event, traces, chosen.into_iter());
    let written = tx.insert_event_with_tasks_at(event, set.generation(), &mut tasks)?;
    if written.is_none() {
        traces.rewind(mark);
    }
    Ok(written.map(|event| (event, tasks.len())))
}

/// [`event`] with the app's targets read in `tx` (and held for the next publishes): after
/// [`held_event`] wrote nothing.
pub fn read_targets_event(
    tx: &mut dyn Tx,
    targets: &TargetCache,
    event: &NewEvent<'_>,
    traces: &mut TaskTraces,
) -> Result<(Event, usize), StoreError> {
    let set = targets.current(tx, event.app_id)?;
    let chosen = chosen_targets(&set, event.event_name, event.payload);
    publish(tx, event, traces, chosen.into_iter())
}

/// The targets of `set` an event reaches, as (endpoint id, `max_attempts`): those whose
/// `filter_events` takes `event_name` and whose `filter_payload` holds for `payload` (parsed
/// only when one has a filter).
fn chosen_targets(set: &TargetSet, event_name: &str, payload: &str) -> Vec<(i64, i64)> {
    let mut parsed: Option<Value> = None;
    set.subscribed(event_name)
        .into_iter()
        .filter(|target| target.takes_payload(payload, &mut parsed))
        .map(|target| (target.id, target.max_attempts))
        .collect()
}

/// `POST /endpoints/{id}/filter-test`: whether an event would reach an endpoint with these
/// filters, by the same rules as [`event`], and why (which filter failed, or that both hold).
pub fn explain(
    filter_events: Option<&str>,
    filter_payload: Option<&PayloadFilter>,
    event_name: &str,
    payload: &Value,
) -> (bool, String) {
    let events = match filter_events {
        Some(filter) if !crate::filter::matches(Some(filter), event_name) => {
            return (
                false,
                format!("filter_events \"{filter}\" does not take the event name \"{event_name}\""),
            );
        }
        Some(_) => "matches filter_events",
        None => "no filter_events (every event name)",
    };
    match filter_payload {
        None => (true, format!("{events}; no filter_payload")),
        Some(filter) => match filter.check(payload) {
            Verdict::Fails(why) => (false, format!("{events}, but filter_payload fails: {why}")),
            Verdict::Matches => {
                let n = filter.len();
                let conditions = if n == 1 {
                    "the 1 condition".to_string()
                } else {
                    format!("all {n} conditions")
                };
                (true, format!("{events} and {conditions} of filter_payload"))
            }
        },
    }
}

/// An operator event (`webhookd.…`, see `operator`): only endpoints that subscribed to it with
/// a pattern starting with `prefix` get a task, never a catch-all one. No request or firing
/// span is their root: each task starts a trace of its own.
pub fn operator_event(
    tx: &mut dyn Tx,
    app_id: &str,
    prefix: &str,
    event_name: &str,
    payload: &str,
    now_ms: i64,
) -> Result<(i64, usize), StoreError> {
    let mut traces = TaskTraces::new(None, false);
    let enabled = tx.list_enabled_targets(app_id)?;
    let chosen = enabled
        .iter()
        .filter(|t| crate::filter::matches_prefixed(t.filter_events.as_deref(), prefix, event_name))
        .map(|t| (t.id, t.max_attempts));
    let event = NewEvent {
        app_id,
        event_name,
        event_key: None,
        payload,
        now_ms,
    };
    publish(tx, &event, &mut traces, chosen).map(|(event, tasks)| (event.id, tasks))
}

/// The event row and one `event` task per endpoint of `chosen` (endpoint id, `max_attempts`;
/// in id order), written together (`insert_event_with_tasks`); returns the event as stored and
/// how many tasks it made. Operator events ignore `filter_payload` (their subscription is by
/// name only).
fn publish(
    tx: &mut dyn Tx,
    event: &NewEvent<'_>,
    traces: &mut TaskTraces,
    chosen: impl Iterator<Item = (i64, i64)>,
) -> Result<(Event, usize), StoreError> {
    let mut tasks = new_tasks(event, traces, chosen);
    let stored = tx.insert_event_with_tasks(event, &mut tasks)?;
    Ok((stored, tasks.len()))
}

/// One pending `event` task per endpoint of `chosen` (endpoint id, `max_attempts`), due now,
/// each in the next trace of `traces`.
fn new_tasks<'a>(
    event: &NewEvent<'a>,
    traces: &mut TaskTraces,
    chosen: impl Iterator<Item = (i64, i64)>,
) -> Vec<NewTask<'a>> {
    chosen
        .map(|(endpoint_id, max_attempts)| NewTask {
            app_id: event.app_id,
            schedule_id: None,
            event_id: None,
            endpoint_id,
            task_type: TaskKind::Event,
            payload: event.payload,
            run_at: event.now_ms,
            max_attempts,
            now_ms: event.now_ms,
            trace: traces.for_task(),
        })
        .collect()
}

/// The tasks one firing made.
pub struct Fired {
    pub ids: Vec<i64>,
    /// Target endpoints that got no task because of `overlap: skip`.
    pub overlapped: usize,
}

/// A schedule's firing (`task_type` `schedule`, due at `run_at`) or trigger (`manual`): one
/// pending task per target endpoint of the schedule ([`firing_tasks`]), inserted at once.
pub fn firing(
    tx: &mut dyn Tx,
    targets: &mut Targets,
    firing: &Firing,
    task_type: TaskKind,
    run_at: i64,
    now_ms: i64,
    traces: &mut TaskTraces,
) -> Result<Fired, StoreError> {
    let planned = firing_tasks(
        tx,
        targets,
        &HashSet::new(),
        firing,
        task_type,
        run_at,
        now_ms,
        traces,
    )?;
    Ok(Fired {
        ids: tx.insert_tasks(&planned.tasks)?,
        overlapped: planned.overlapped,
    })
}

/// The tasks one firing is to make, not inserted yet (the scheduler inserts those of a whole
/// batch of firings at once).
pub struct Planned<'a> {
    pub tasks: Vec<NewTask<'a>>,
    /// Target endpoints that get no task because of `overlap: skip`.
    pub overlapped: usize,
}

/// The tasks of a schedule's firing or trigger: one pending task per target endpoint of the
/// schedule ([`Targets::resolve`]). A scheduled firing of a schedule with `overlap: skip`
/// passes over an endpoint that still has an open task of this schedule (from a firing or a
/// trigger), in the database or among `unsaved`, the (schedule, endpoint) pairs of tasks
/// planned in this transaction and not inserted yet; a trigger always creates its tasks. Each
/// task takes the next trace of `traces` (skipped endpoints take none, so `traces.roots()`
/// line up with the tasks).
// The firing, the time and the traces: one each, nothing to group.
#[allow(clippy::too_many_arguments)]
pub fn firing_tasks<'a>(
    tx: &mut dyn Tx,
    targets: &mut Targets,
    unsaved: &HashSet<(i64, i64)>,
    firing: &'a Firing,
    task_type: TaskKind,
    run_at: i64,
    now_ms: i64,
    traces: &mut TaskTraces,
) -> Result<Planned<'a>, StoreError> {
    let skip_open = task_type == TaskKind::Schedule && firing.overlap == Overlap::Skip;
    let mut out = Planned {
        tasks: Vec::new(),
        overlapped: 0,
    };
    for target in targets.resolve(tx, &firing.app_id, &firing.endpoint_ids)? {
        if skip_open
            && (unsaved.contains(&(firing.id, target.id))
                || tx.schedule_task_open(firing.id, target.id)?)
        {
            out.overlapped += 1;
            continue;
        }
        out.tasks.push(NewTask {
            app_id: &firing.app_id,
            schedule_id: Some(firing.id),
            event_id: None,
            endpoint_id: target.id,
            task_type,
            payload: &firing.payload,
            run_at,
            max_attempts: target.max_attempts,
            now_ms,
            trace: traces.for_task(),
        });
    }
    Ok(out)
}

/// The enabled endpoints of each app, looked up once per transaction: the schedules of a
/// batch share them.
#[derive(Default)]
pub struct Targets(HashMap<String, AppTargets>);

struct AppTargets {
    enabled: Vec<Target>,
    /// Endpoint id → index in `enabled`.
    by_id: HashMap<i64, usize>,
}

impl Targets {
    /// The enabled endpoints among `endpoint_ids` (in that order), or every enabled endpoint of
    /// the app when the list is empty. Missing and disabled endpoints are skipped.
    fn resolve(
        &mut self,
        tx: &mut dyn Tx,
        app_id: &str,
        endpoint_ids: &[i64],
    ) -> Result<Vec<Target>, StoreError> {
        let app = match self.0.get(app_id) {
            Some(app) => app,
            None => {
                let enabled = tx.list_enabled_targets(app_id)?;
                let by_id = enabled.iter().enumerate().map(|(i, t)| (t.id, i)).collect();
                self.0
                    .entry(app_id.to_string())
                    .or_insert(AppTargets { enabled, by_id })
            }
        };
        if endpoint_ids.is_empty() {
            return Ok(app.enabled.clone());
        }
        Ok(endpoint_ids
            .iter()
            .filter_map(|id| app.by_id.get(id).map(|&i| app.enabled[i].clone()))
            .collect())
    }
}
