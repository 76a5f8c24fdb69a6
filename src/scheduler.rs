//! The scheduler: fires due schedules into tasks (CONTRACT.md §5 "Schedules").
//!
//! One thread sleeps until the earliest `next_run_at` of the active schedules (at most
//! `max_idle`), and is woken at once when the API creates, changes, pauses, resumes or deletes a
//! schedule. Firing a schedule for its instant T is one transaction: the (schedule, T) row in
//! `schedule_firings` (already there → nothing is created: firing is idempotent), one task per
//! target endpoint with `run_at` = T, and `next_run_at` moved to the first instant after now.
//! Due schedules are taken in batches, one transaction each, so thousands due on the same
//! minute fire together. A schedule found late (the server was down) fires once, for its latest
//! missed instant, when that is within `--misfire-grace-secs`; older misses are skipped.

use crate::app::App;
use crate::clock::{from_ms, rfc3339};
use crate::cron::CronSchedule;
use crate::store::{self, endpoints::Target, schedules::Firing, tasks::NewTask};
use chrono::{DateTime, TimeDelta, Utc};
use rusqlite::Connection;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// Schedules fired per transaction: 10,000 due on one minute commit in 20 transactions, and an
/// API write waiting for the lock waits for one batch at most.
const BATCH: usize = 500;
/// A run less late than this is on time whatever `--misfire-grace-secs` says: under load the
/// scheduler may look a moment after the instant, which is not a missed run.
const ON_TIME_SLACK: TimeDelta = TimeDelta::seconds(10);
/// Firings are remembered this long beyond the grace window, so that a wall clock stepped back
/// by up to this much cannot fire an instant a second time.
const FIRINGS_KEPT: TimeDelta = TimeDelta::days(1);
/// Longest grace honoured (100 years), so instant arithmetic cannot overflow.
const MAX_GRACE_SECS: u64 = 100 * 365 * 86_400;
/// Pause after a database error before looking again.
const ERROR_PAUSE: Duration = Duration::from_secs(1);
/// Parsed expressions kept at most; the cache is cleared when it grows past this.
const CRON_CACHE_MAX: usize = 10_000;

/// The running scheduler thread.
pub struct Scheduler {
    app: Arc<App>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Scheduler {
    pub fn start(app: Arc<App>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (app, stop) = (app.clone(), stop.clone());
            std::thread::Builder::new()
                .name("webhookd-scheduler".into())
                .spawn(move || run(&app, &stop))
                .expect("cannot start the scheduler thread")
        };
        Scheduler {
            app,
            stop,
            thread: Some(thread),
        }
    }

    /// Stops the loop after its current batch (which commits or rolls back whole). Blocking.
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.app.scheduler_wake.notify();
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::error!("the scheduler thread panicked");
        }
    }
}

fn run(app: &App, stop: &AtomicBool) {
    let mut crons = CronCache::default();
    while !stop.load(Ordering::SeqCst) {
        let pause = match tick(app, &mut crons) {
            Ok(Some(pause)) => pause,
            Ok(None) => continue,
            Err(e) => {
                tracing::warn!(error = %e, "scheduler: cannot fire due schedules; retrying");
                ERROR_PAUSE.min(app.config.max_idle)
            }
        };
        app.scheduler_wake.wait(pause);
    }
}

/// Fires one batch of due schedules. Returns how long to sleep before the next is due, or
/// `None` when the batch was full and more may be due already.
fn tick(app: &App, crons: &mut CronCache) -> anyhow::Result<Option<Duration>> {
    let now = app.clock.now();
    let mut conn = app.pool.get()?;
    let (tasks, lag_ms, full) = store::write_tx(&mut conn, |tx| {
        let mut batch = Batch::new(tx, app, now);
        let due = store::schedules::due(tx, now.timestamp_millis(), BATCH)?;
        for firing in &due {
            batch.fire_due(crons, firing)?;
        }
        Ok::<_, rusqlite::Error>((batch.tasks, batch.lag_ms, due.len() == BATCH))
    })?;
    if tasks > 0 {
        app.delivery_wake.notify();
    }
    if let Some(lag_ms) = lag_ms {
        app.metrics
            .scheduler_lag_ms
            .store(lag_ms, Ordering::Relaxed);
    }
    if full {
        return Ok(None);
    }
    let idle = app.config.max_idle;
    Ok(Some(match store::schedules::earliest_next_run(&conn)? {
        Some(at) => {
            let wait = u64::try_from(at - now.timestamp_millis()).unwrap_or(0);
            Duration::from_millis(wait).min(idle)
        }
        None => idle,
    }))
}

/// Fires one active schedule for the instant `at` in its own transaction, as the loop does:
/// tasks with `run_at` = `at`, `next_run_at` moved past `at` and now. Returns the new task ids,
/// or `None` when (schedule, `at`) had fired already — or the schedule is not active.
pub fn fire_at(app: &App, schedule_id: i64, at: DateTime<Utc>) -> anyhow::Result<Option<Vec<i64>>> {
    let now = app.clock.now();
    let mut conn = app.pool.get()?;
    let created = store::write_tx(&mut conn, |tx| {
        let Some(firing) = store::schedules::get_active(tx, schedule_id)? else {
            return Ok(None);
        };
        let cron = CronSchedule::parse(&firing.cron_expr, &firing.timezone)
            .map_err(|e| anyhow::anyhow!("schedule {schedule_id}: {e}"))?;
        let next_run_at = cron.next_after(at.max(now));
        Ok::<_, anyhow::Error>(Batch::new(tx, app, now).fire(&firing, at, next_run_at)?)
    })?;
    if created.as_ref().is_some_and(|ids| !ids.is_empty()) {
        app.delivery_wake.notify();
    }
    Ok(created)
}

/// `POST /schedules/{id}/trigger`: one `manual` task per target endpoint of the schedule, due
/// now, with `schedule_id` set, in the caller's transaction. Neither `last_run_at` nor
/// `next_run_at` moves. Returns the new task ids.
pub fn trigger(conn: &Connection, firing: &Firing, now_ms: i64) -> rusqlite::Result<Vec<i64>> {
    fan_out(
        conn,
        &mut Targets::default(),
        firing,
        "manual",
        now_ms,
        now_ms,
    )
}

/// What the scheduler does with a schedule whose `next_run_at` (`due`) has come.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    /// The instant to fire for: the latest of the schedule's instants in `[due, now]`, when it
    /// is at most `grace` old; `None` when every one of them is older (they are skipped).
    pub fire_at: Option<DateTime<Utc>>,
    /// The schedule's first instant after `now`.
    pub next_run_at: Option<DateTime<Utc>>,
}

/// Decides a due schedule's firing; `next_after` is its cron's "first instant strictly after".
/// On time, this fires `due`. After downtime it fires once, for the latest missed instant
/// within the grace, walking forward from the start of the grace window rather than from
/// `due`, so a long downtime costs no more than the window holds.
pub fn plan(
    due: DateTime<Utc>,
    now: DateTime<Utc>,
    grace: TimeDelta,
    next_after: impl Fn(DateTime<Utc>) -> Option<DateTime<Utc>>,
) -> Plan {
    if due > now {
        return Plan {
            fire_at: None,
            next_run_at: Some(due),
        };
    }
    let oldest = now - grace;
    let (mut latest, mut next) = if due >= oldest {
        (Some(due), next_after(due))
    } else {
        (None, next_after(oldest - TimeDelta::milliseconds(1)))
    };
    while let Some(t) = next
        && t <= now
    {
        latest = Some(t);
        next = next_after(t);
    }
    Plan {
        fire_at: latest,
        next_run_at: next,
    }
}

/// The work of one transaction of the scheduler.
struct Batch<'a> {
    tx: &'a Connection,
    now: DateTime<Utc>,
    grace: TimeDelta,
    targets: Targets,
    /// Tasks created so far.
    tasks: usize,
    /// How late the latest firing of the batch was (ms), for `GET /metrics`.
    lag_ms: Option<i64>,
}

impl<'a> Batch<'a> {
    fn new(tx: &'a Connection, app: &App, now: DateTime<Utc>) -> Self {
        let secs = app.config.misfire_grace_secs.min(MAX_GRACE_SECS);
        let grace = TimeDelta::seconds(i64::try_from(secs).unwrap_or(0)).max(ON_TIME_SLACK);
        Batch {
            tx,
            now,
            grace,
            targets: Targets::default(),
            tasks: 0,
            lag_ms: None,
        }
    }

    /// Fires a schedule the due query returned, or skips its instants missed beyond the grace.
    fn fire_due(&mut self, crons: &mut CronCache, firing: &Firing) -> rusqlite::Result<()> {
        let Some(cron) = crons.get(firing) else {
            // Not parseable any more (it was when saved): park it rather than spin on it.
            return store::schedules::advance(self.tx, firing.id, None, None);
        };
        let due = firing.next_run_at.map_or(self.now, from_ms);
        let plan = plan(due, self.now, self.grace, |t| cron.next_after(t));
        match plan.fire_at {
            Some(at) => {
                if at > due {
                    tracing::info!(
                        schedule_id = firing.id,
                        missed_since = %rfc3339(due.timestamp_millis()),
                        fired_for = %rfc3339(at.timestamp_millis()),
                        "schedule missed runs; firing once for the latest"
                    );
                }
                self.fire(firing, at, plan.next_run_at)?;
                Ok(())
            }
            None => {
                tracing::warn!(
                    schedule_id = firing.id,
                    missed_since = %rfc3339(due.timestamp_millis()),
                    "schedule missed runs older than --misfire-grace-secs; skipped them"
                );
                let next = plan.next_run_at.map(|t| t.timestamp_millis());
                store::schedules::advance(self.tx, firing.id, None, next)
            }
        }
    }

    /// Fires `firing` for `at` unless (schedule, `at`) fired already, and moves `next_run_at`
    /// on either way. Returns the new task ids, or `None` when it had fired.
    fn fire(
        &mut self,
        firing: &Firing,
        at: DateTime<Utc>,
        next_run_at: Option<DateTime<Utc>>,
    ) -> rusqlite::Result<Option<Vec<i64>>> {
        let at_ms = at.timestamp_millis();
        let created = if store::schedules::record_firing(self.tx, firing.id, at_ms)? {
            let cutoff = at - self.grace - FIRINGS_KEPT;
            store::schedules::forget_firings(self.tx, firing.id, cutoff.timestamp_millis())?;
            let ids = fan_out(
                self.tx,
                &mut self.targets,
                firing,
                "schedule",
                at_ms,
                self.now.timestamp_millis(),
            )?;
            self.tasks += ids.len();
            self.lag_ms = Some((self.now - at).num_milliseconds().max(0));
            Some(ids)
        } else {
            tracing::warn!(
                schedule_id = firing.id,
                scheduled_at = %rfc3339(at_ms),
                "schedule already fired for this instant (was the clock set back?); not firing again"
            );
            None
        };
        let fired_at = created.as_ref().map(|_| at_ms);
        let next = next_run_at.map(|t| t.timestamp_millis());
        store::schedules::advance(self.tx, firing.id, fired_at, next)?;
        Ok(created)
    }
}

/// Creates one pending task per target endpoint of a schedule; returns their ids.
fn fan_out(
    conn: &Connection,
    targets: &mut Targets,
    firing: &Firing,
    task_type: &str,
    run_at: i64,
    now_ms: i64,
) -> rusqlite::Result<Vec<i64>> {
    targets
        .resolve(conn, &firing.app_id, &firing.endpoint_ids)?
        .iter()
        .map(|target| {
            store::tasks::insert(
                conn,
                &NewTask {
                    app_id: &firing.app_id,
                    schedule_id: Some(firing.id),
                    event_id: None,
                    endpoint_id: target.id,
                    task_type,
                    payload: &firing.payload,
                    run_at,
                    max_attempts: target.max_attempts,
                    now_ms,
                },
            )
        })
        .collect()
}

/// The enabled endpoints of each app, looked up once per transaction: the schedules of a
/// batch share them.
#[derive(Default)]
struct Targets(HashMap<String, AppTargets>);

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
        conn: &Connection,
        app_id: &str,
        endpoint_ids: &[i64],
    ) -> rusqlite::Result<Vec<Target>> {
        let app = match self.0.get(app_id) {
            Some(app) => app,
            None => {
                let enabled = store::endpoints::enabled_targets(conn, app_id)?;
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

/// Parsed expressions by (cron_expr, timezone): many schedules share one, and parsing is the
/// costliest step of a firing.
#[derive(Default)]
struct CronCache(HashMap<(String, String), Option<CronSchedule>>);

impl CronCache {
    fn get(&mut self, firing: &Firing) -> Option<&CronSchedule> {
        if self.0.len() >= CRON_CACHE_MAX {
            self.0.clear();
        }
        self.0
            .entry((firing.cron_expr.clone(), firing.timezone.clone()))
            .or_insert_with(|| {
                CronSchedule::parse(&firing.cron_expr, &firing.timezone)
                    .inspect_err(|e| {
                        tracing::error!(
                            schedule_id = firing.id,
                            error = %e,
                            "stored schedule no longer parses; it will not fire until patched"
                        );
                    })
                    .ok()
            })
            .as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{DurationRound, TimeZone};

    fn t(h: u32, m: u32, s: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2025, 6, 2, h, m, s).unwrap()
    }

    /// `* * * * *`: every minute.
    fn every_minute(after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        Some(after.duration_trunc(TimeDelta::minutes(1)).unwrap() + TimeDelta::minutes(1))
    }

    /// `0 * * * *`: every hour.
    fn hourly(after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        Some(after.duration_trunc(TimeDelta::hours(1)).unwrap() + TimeDelta::hours(1))
    }

    const HOUR: TimeDelta = TimeDelta::hours(1);

    #[test]
    fn on_time_fires_the_due_instant() {
        let on_time = plan(t(12, 1, 0), t(12, 1, 0), HOUR, every_minute);
        assert_eq!(on_time.fire_at, Some(t(12, 1, 0)));
        assert_eq!(on_time.next_run_at, Some(t(12, 2, 0)));
        // Woken a moment late: still that instant.
        let late = t(12, 1, 0) + TimeDelta::milliseconds(3);
        assert_eq!(plan(t(12, 1, 0), late, HOUR, every_minute), on_time);
        // A zero grace is raised to the on-time slack by the scheduler, not here.
        let late = plan(t(12, 1, 0), late, TimeDelta::zero(), every_minute);
        assert_eq!(late.fire_at, None);
    }

    #[test]
    fn not_yet_due_fires_nothing() {
        let p = plan(t(12, 1, 0), t(12, 0, 59), HOUR, every_minute);
        assert_eq!(p.fire_at, None);
        assert_eq!(p.next_run_at, Some(t(12, 1, 0)));
    }

    #[test]
    fn downtime_fires_once_for_the_latest_missed_instant() {
        let p = plan(t(12, 1, 0), t(12, 10, 30), HOUR, every_minute);
        assert_eq!(p.fire_at, Some(t(12, 10, 0)));
        assert_eq!(p.next_run_at, Some(t(12, 11, 0)));
    }

    #[test]
    fn misses_older_than_the_grace_are_skipped() {
        // Latest missed instant 12:10 is 30 s old; a 10 s grace skips it.
        let p = plan(
            t(12, 1, 0),
            t(12, 10, 30),
            TimeDelta::seconds(10),
            every_minute,
        );
        assert_eq!(p.fire_at, None);
        assert_eq!(p.next_run_at, Some(t(12, 11, 0)));
        // Down for two days: the walk starts at the grace window, and fires 12:00 today.
        let down_since = t(12, 0, 0) - TimeDelta::days(2);
        let p = plan(down_since, t(12, 30, 0), HOUR, hourly);
        assert_eq!(p.fire_at, Some(t(12, 0, 0)));
        assert_eq!(p.next_run_at, Some(t(13, 0, 0)));
        // The only instant in the window is the start of the window itself.
        let p = plan(down_since, t(13, 0, 0), HOUR, hourly);
        assert_eq!(p.fire_at, Some(t(13, 0, 0)));
        assert_eq!(p.next_run_at, Some(t(14, 0, 0)));
    }

    #[test]
    fn a_schedule_that_ends_has_no_next_run() {
        let once = |after: DateTime<Utc>| (after < t(12, 0, 0)).then_some(t(12, 0, 0));
        let p = plan(t(12, 0, 0), t(12, 5, 0), HOUR, once);
        assert_eq!(p.fire_at, Some(t(12, 0, 0)));
        assert_eq!(p.next_run_at, None);
    }
}
