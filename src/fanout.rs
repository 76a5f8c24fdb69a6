//! Fan-out, the one home of the rule "who gets a task": for a published event, an operator
//! event (`webhookd.*`), and a schedule's firing or trigger, which endpoints of the app get
//! one and the pending tasks made for them, in the caller's transaction so they commit
//! together. Called by `POST /events` (`api::events`), `operator::publish` and the scheduler.

use crate::store::endpoints::Target;
use crate::store::schedules::{Firing, Overlap};
use crate::store::tasks::{NewTask, TaskKind};
use crate::store::{StoreError, Tx};
use std::collections::HashMap;

/// An event published by a client: every enabled endpoint of `app_id` whose `filter_events`
/// takes `event_name` gets an `event` task. Returns the event's id and how many tasks it made.
pub fn event(
    tx: &mut dyn Tx,
    app_id: &str,
    event_name: &str,
    event_key: Option<&str>,
    payload: &str,
    now_ms: i64,
) -> Result<(i64, usize), StoreError> {
    publish(
        tx,
        app_id,
        event_name,
        event_key,
        payload,
        now_ms,
        |filter| crate::filter::matches(filter, event_name),
    )
}

/// An operator event (`webhookd.…`, see `operator`): only endpoints that subscribed to it with
/// a pattern starting with `prefix` get a task, never a catch-all one.
pub fn operator_event(
    tx: &mut dyn Tx,
    app_id: &str,
    prefix: &str,
    event_name: &str,
    payload: &str,
    now_ms: i64,
) -> Result<(i64, usize), StoreError> {
    publish(tx, app_id, event_name, None, payload, now_ms, |filter| {
        crate::filter::matches_prefixed(filter, prefix, event_name)
    })
}

/// The event row and one `event` task per enabled endpoint `subscribed` accepts.
fn publish(
    tx: &mut dyn Tx,
    app_id: &str,
    event_name: &str,
    event_key: Option<&str>,
    payload: &str,
    now_ms: i64,
    subscribed: impl Fn(Option<&str>) -> bool,
) -> Result<(i64, usize), StoreError> {
    let targets: Vec<_> = tx
        .list_enabled_targets(app_id)?
        .into_iter()
        .filter(|t| subscribed(t.filter_events.as_deref()))
        .collect();
    let task_count = i64::try_from(targets.len()).unwrap_or(i64::MAX);
    let id = tx.insert_event(app_id, event_name, event_key, payload, task_count, now_ms)?;
    for target in &targets {
        tx.insert_task(&NewTask {
            app_id,
            schedule_id: None,
            event_id: Some(id),
            endpoint_id: target.id,
            task_type: TaskKind::Event,
            payload,
            run_at: now_ms,
            max_attempts: target.max_attempts,
            now_ms,
        })?;
    }
    Ok((id, targets.len()))
}

/// The tasks one firing made.
pub struct Fired {
    pub ids: Vec<i64>,
    /// Target endpoints that got no task because of `overlap: skip`.
    pub overlapped: usize,
}

/// A schedule's firing (`task_type` `schedule`, due at `run_at`) or trigger (`manual`): one
/// pending task per target endpoint of the schedule ([`Targets::resolve`]). A scheduled firing
/// of a schedule with `overlap: skip` passes over an endpoint that still has an open task of
/// this schedule (from a firing or a trigger); a trigger always creates its tasks.
pub fn firing(
    tx: &mut dyn Tx,
    targets: &mut Targets,
    firing: &Firing,
    task_type: TaskKind,
    run_at: i64,
    now_ms: i64,
) -> Result<Fired, StoreError> {
    let skip_open = task_type == TaskKind::Schedule && firing.overlap == Overlap::Skip;
    let mut out = Fired {
        ids: Vec::new(),
        overlapped: 0,
    };
    for target in targets.resolve(tx, &firing.app_id, &firing.endpoint_ids)? {
        if skip_open && tx.schedule_task_open(firing.id, target.id)? {
            out.overlapped += 1;
            continue;
        }
        out.ids.push(tx.insert_task(&NewTask {
            app_id: &firing.app_id,
            schedule_id: Some(firing.id),
            event_id: None,
            endpoint_id: target.id,
            task_type,
            payload: &firing.payload,
            run_at,
            max_attempts: target.max_attempts,
            now_ms,
        })?);
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
