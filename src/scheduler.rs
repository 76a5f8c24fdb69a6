//! The scheduler: fires due schedules into tasks (docs/design.md §5 "Schedules").
//!
//! One thread sleeps until the earliest `next_run_at` of the active schedules (at most
//! `max_idle`), and is woken at once when the API creates, changes, pauses, resumes or deletes a
//! schedule. Firing a schedule for its instant T is one transaction: the (schedule, T) row in
//! `schedule_firings` (already there → nothing is created: firing is idempotent), one task per
//! target endpoint with `run_at` = T, and `next_run_at` moved to the first instant after now.
//! Due schedules are taken in batches, one transaction each, so thousands due on the same
//! minute fire together; a batch is planned in memory and written with one statement each for
//! its firing rows, its tasks and moving its schedules on.
//!
//! A schedule found late (the server was down) follows its `catchup` (docs/design.md §13): `latest`
//! fires once, for its latest missed instant, when that is within `--misfire-grace-secs`;
//! `all` fires every missed instant within the grace, oldest first, the latest
//! [`MAX_CATCHUP_RUNS`] at most; `none` fires none. With `overlap: skip`, a firing makes no
//! task for an endpoint that still has an open (`pending` or `running`) task of this schedule.
//! What was not fired is counted in `skipped_runs`.
//!
//! A schedule with a window (`starts_at`, `ends_at`) fires only at instants inside it, catch-up
//! included; past its end `next_run_at` is null and it stays `active`. `jitter_sec` moves each
//! firing's tasks' `run_at` to a random moment in [instant, instant + jitter]; the firing row is
//! still the instant's. [`backfill`] fires the instants of a past interval that have no firing
//! row yet. Every way of firing goes through that row, so firing rows are kept as long as a
//! backfill may reach (`--retention-days`, plus a day: docs/operations.md, "Retention").

use crate::app::App;
use crate::clock::{from_ms, rfc3339};
use crate::cron::CronSchedule;
use crate::fanout;
use crate::store::schedules::{Advance, Catchup, Firing, Overlap, Window};
use crate::store::tasks::TaskKind;
use crate::store::{IdleCap, StoreError, Tx};
use crate::trace::TaskTraces;
use chrono::{DateTime, TimeDelta, Utc};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Schedules fired per transaction: 100,000 due on one minute commit in 100 transactions (each
/// commit waits for its fsync with `--sqlite-sync full`), and an API write waiting for the
/// SQLite lock waits for one batch at most (about 10 ms on two cores: BENCHMARKS.md, "Firing
/// schedules: multi-row statements on SQLite").
const BATCH: usize = 1_000;
/// A run less late than this is on time whatever `--misfire-grace-secs` says: under load the
/// scheduler may look a moment after the instant, which is not a missed run.
const ON_TIME_SLACK: TimeDelta = TimeDelta::seconds(10);
/// Longest grace honoured (100 years), so instant arithmetic cannot overflow.
const MAX_GRACE_SECS: u64 = 100 * 365 * 86_400;
/// Pause after a database error before looking again.
const ERROR_PAUSE: Duration = Duration::from_secs(1);
/// Parsed expressions kept at most; the cache is cleared when it grows past this.
const CRON_CACHE_MAX: usize = 10_000;
/// Most missed instants `catchup: all` fires for one schedule after one outage.
pub const MAX_CATCHUP_RUNS: usize = 100;
/// Missed instants older than the window counted one by one into `skipped_runs`, at most, per
/// look at a schedule: counting walks the cron expression instant by instant, and this bounds
/// the walk (and the write transaction it runs in) after a long outage of a frequent schedule.
/// Beyond it the walk jumps to the window and the count stops there (README).
const MAX_COUNTED_MISSES: u64 = 10_000;

/// The running scheduler thread.
pub struct Scheduler {
    app: Arc<App>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Scheduler {
    /// `idle_cap` caps its sleep while changes by other nodes might go unnoticed
    /// (`Store::watch`).
    pub fn start(app: Arc<App>, idle_cap: IdleCap) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (app, stop) = (app.clone(), stop.clone());
            std::thread::Builder::new()
                .name("webhookd-scheduler".into())
                .spawn(move || run(&app, &stop, &idle_cap))
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

fn run(app: &App, stop: &AtomicBool, idle_cap: &IdleCap) {
    let mut crons = CronCache::default();
    while !stop.load(Ordering::SeqCst) {
        let pause = match tick(app, &mut crons, idle_cap.cap(app.config.max_idle)) {
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

/// How long the scheduler waits before looking again when schedules are due but another node
/// is firing them.
const BUSY_ELSEWHERE_PAUSE: Duration = Duration::from_millis(20);

/// Fires one batch of due schedules. Returns how long to sleep before the next is due, or
/// `None` when the batch was full and more may be due already.
fn tick(app: &App, crons: &mut CronCache, idle: Duration) -> anyhow::Result<Option<Duration>> {
    let now = app.clock.now();
    let (tasks, lag_ms, full, none_due, firings, counts) = app.store.write(|tx| {
        let due = tx.due_schedules(now.timestamp_millis(), BATCH)?;
        let mut batch = Batch::new(tx, app, now);
        let mut instants = Vec::new();
        for firing in &due {
            batch.plan_due(crons, firing, &mut instants);
        }
        batch.fire_all(&instants)?;
        batch.advance()?;
        Ok::<_, StoreError>((
            batch.tasks,
            batch.lag_ms,
            due.len() == BATCH,
            due.is_empty(),
            batch.firings,
            batch.counts,
        ))
    })?;
    firings.into_iter().for_each(|f| f.export(app));
    app.metrics.record_firings(&counts);
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
    Ok(Some(match app.store.read(|tx| tx.earliest_next_run())? {
        Some(at) => {
            let wait = u64::try_from(at - now.timestamp_millis()).unwrap_or(0);
            // Due but not ours to fire: another node holds those schedules in its open batch
            // (PostgreSQL skips locked rows). Look again shortly instead of spinning.
            let floor = if none_due {
                BUSY_ELSEWHERE_PAUSE
            } else {
                Duration::ZERO
            };
            Duration::from_millis(wait).max(floor).min(idle)
        }
        None => idle,
    }))
}

/// Fires one active schedule for the instant `at` in its own transaction, as the loop does:
/// tasks with `run_at` = `at`, `next_run_at` moved past `at` and now. Returns the new task ids,
/// or `None` when (schedule, `at`) had fired already — or the schedule is not active.
pub fn fire_at(app: &App, schedule_id: i64, at: DateTime<Utc>) -> anyhow::Result<Option<Vec<i64>>> {
    let now = app.clock.now();
    let created = app.store.write(|tx| {
        let Some(firing) = tx.get_active_schedule(schedule_id)? else {
            return Ok((None, Vec::new()));
        };
        let cron = CronSchedule::parse(&firing.cron_expr, &firing.timezone)
            .map_err(|e| anyhow::anyhow!("schedule {schedule_id}: {e}"))?;
        let next_run_at = next_in_window(&cron, firing.window, at.max(now));
        let mut batch = Batch::new(tx, app, now);
        let mut created = batch.fire_all(&[ToFire {
            firing: &firing,
            at,
            next_run_at,
            skipped: 0,
        }])?;
        batch.advance()?;
        Ok::<_, anyhow::Error>((created.pop().flatten(), batch.firings))
    })?;
    let (created, firings) = created;
    firings.into_iter().for_each(|f| f.export(app));
    if created.as_ref().is_some_and(|ids| !ids.is_empty()) {
        app.delivery_wake.notify();
    }
    Ok(created)
}

/// `POST /schedules/{id}/trigger`: one `manual` task per target endpoint of the schedule, due
/// now, with `schedule_id` set, in the caller's transaction. Neither `last_run_at` nor
/// `next_run_at` moves. Returns the new task ids.
/// The tasks continue the trigger request's trace (`traces`).
pub fn trigger(
    tx: &mut dyn Tx,
    firing: &Firing,
    now_ms: i64,
    traces: &mut TaskTraces,
) -> Result<Vec<i64>, StoreError> {
    traces.restart();
    Ok(fanout::firing(
        tx,
        &mut fanout::Targets::default(),
        firing,
        TaskKind::Manual,
        now_ms,
        now_ms,
        traces,
    )?
    .ids)
}

/// What the scheduler does with a schedule whose `next_run_at` (`due`) has come.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The instants to fire for, oldest first: among the schedule's instants in `[due, now]`,
    /// those its `catchup` fires (see [`plan`]).
    pub fire: Vec<DateTime<Utc>>,
    /// The instants in `[due, now]` not fired (older ones counted up to
    /// [`MAX_COUNTED_MISSES`]).
    pub skipped: u64,
    /// The schedule's first instant after `now`.
    pub next_run_at: Option<DateTime<Utc>>,
}

/// Decides a due schedule's firing; `next_after` is its cron's "first instant strictly after".
/// On time, this fires `due`. After downtime, of the instants in `[due, now]` it fires, by
/// `catchup`: `Latest`, the latest one when it is at most `grace` old; `All`, every one at
/// most `grace` old, the latest [`MAX_CATCHUP_RUNS`] at most (the most recent runs are the
/// ones worth making; oldest first); `None`, only one at most [`ON_TIME_SLACK`] old (found on
/// time, not missed). The rest are counted as skipped: the walk over instants older than the
/// window counts at most [`MAX_COUNTED_MISSES`] and then jumps to the window, so a long
/// downtime costs no more than the window holds.
pub fn plan(
    due: DateTime<Utc>,
    now: DateTime<Utc>,
    grace: TimeDelta,
    catchup: Catchup,
    next_after: impl Fn(DateTime<Utc>) -> Option<DateTime<Utc>>,
) -> Plan {
    if due > now {
        return Plan {
            fire: Vec::new(),
            skipped: 0,
            next_run_at: Some(due),
        };
    }
    let (window, keep) = match catchup {
        Catchup::Latest => (grace, 1),
        Catchup::All => (grace, MAX_CATCHUP_RUNS),
        Catchup::None => (ON_TIME_SLACK.min(grace), 1),
    };
    let oldest = now - window;
    let mut skipped = 0;
    let mut next = Some(due);
    while let Some(t) = next
        && t < oldest
    {
        if skipped == MAX_COUNTED_MISSES {
            next = next_after(oldest - TimeDelta::milliseconds(1));
            break;
        }
        skipped += 1;
        next = next_after(t);
    }
    let mut fire = std::collections::VecDeque::with_capacity(keep + 1);
    while let Some(t) = next
        && t <= now
    {
        fire.push_back(t);
        if fire.len() > keep {
            fire.pop_front();
            skipped += 1;
        }
        next = next_after(t);
    }
    Plan {
        fire: fire.into(),
        skipped,
        next_run_at: next,
    }
}

/// The work of one transaction of the scheduler: the due schedules are planned one by one
/// ([`Batch::plan_due`]), then written together ([`Batch::fire_all`], [`Batch::advance`]): one
/// statement for the firing records, one for the tasks, one moving the schedules on, however
/// many schedules the batch holds (on PostgreSQL, three round trips instead of three per
/// schedule).
struct Batch<'a> {
    tx: &'a mut dyn Tx,
    now: DateTime<Utc>,
    grace: TimeDelta,
    jitter: &'a Jitter,
    targets: fanout::Targets,
    /// Tasks created so far.
    tasks: usize,
    /// How late the latest firing of the batch was (ms), for `GET /metrics`.
    lag_ms: Option<i64>,
    /// Whether spans are exported (`--otlp-endpoint`).
    export: bool,
    /// The firings' spans, exported once the batch commits (only when `export`).
    firings: Vec<FiringSpan>,
    /// What the batch skipped, caught up and how late it fired, for `GET /metrics` once it
    /// commits (the loop's batches only: a backfill's lag is not the scheduler's).
    counts: crate::metrics::FiringCounts,
    /// How each schedule looked at moves on, one entry per schedule, written by
    /// [`Batch::advance`].
    advances: Vec<Advance>,
}

/// One instant a schedule is to fire for.
struct ToFire<'f> {
    firing: &'f Firing,
    at: DateTime<Utc>,
    /// The schedule's `next_run_at` once this instant fired.
    next_run_at: Option<DateTime<Utc>>,
    /// Runs to add to `skipped_runs` (the misses `plan` counted, on the first instant).
    skipped: i64,
}

/// What the span of one firing tells (`spans::Spans::firing`).
struct FiringSpan {
    schedule_id: i64,
    app_id: String,
    scheduled_at_ms: i64,
    start_ms: i64,
    took: Duration,
    /// The root span of each task's trace, with the task's id.
    tasks: Vec<(crate::trace::SpanContext, i64)>,
}

impl FiringSpan {
    fn export(self, app: &App) {
        app.spans.firing(
            self.schedule_id,
            &self.app_id,
            self.scheduled_at_ms,
            self.start_ms,
            self.took,
            &self.tasks,
        );
    }
}

/// A firing recorded in [`Batch::fire_all`] whose tasks are planned but not inserted yet.
struct Recorded {
    /// Its tasks' range in the batch's task list.
    tasks: std::ops::Range<usize>,
    overlapped: usize,
    traces: TaskTraces,
    started: std::time::Instant,
}

impl<'a> Batch<'a> {
    fn new(tx: &'a mut dyn Tx, app: &'a App, now: DateTime<Utc>) -> Self {
        let secs = app.config.misfire_grace_secs.min(MAX_GRACE_SECS);
        let grace = TimeDelta::seconds(i64::try_from(secs).unwrap_or(0)).max(ON_TIME_SLACK);
        Batch {
            tx,
            now,
            grace,
            jitter: &app.jitter,
            targets: fanout::Targets::default(),
            tasks: 0,
            lag_ms: None,
            export: app.spans.on(),
            firings: Vec::new(),
            counts: crate::metrics::FiringCounts::default(),
            advances: Vec::new(),
        }
    }

    /// Plans a schedule the due query returned: the instants it fires for go to `out` (oldest
    /// first); a schedule that fires none (its instants missed beyond the grace, its window
    /// over, its expression no longer parsing) only moves on.
    fn plan_due<'f>(
        &mut self,
        crons: &mut CronCache,
        firing: &'f Firing,
        out: &mut Vec<ToFire<'f>>,
    ) {
        let park = Advance {
            id: firing.id,
            fired_at: None,
            next_run_at: None,
            skipped: 0,
        };
        let Some(cron) = crons.get(firing) else {
            // Not parseable any more (it was when saved): park it rather than spin on it.
            return self.advances.push(park);
        };
        let due = firing.next_run_at.map_or(self.now, from_ms);
        // A `next_run_at` outside the window (set before the window was) moves into it.
        let due = if firing.window.contains(due.timestamp_millis()) {
            Some(due)
        } else {
            next_in_window(cron, firing.window, due - TimeDelta::milliseconds(1))
        };
        let Some(due) = due else {
            return self.advances.push(park);
        };
        let plan = plan(due, self.now, self.grace, firing.catchup, |t| {
            next_in_window(cron, firing.window, t)
        });
        let skipped = i64::try_from(plan.skipped).unwrap_or(i64::MAX);
        self.counts.missed_skipped += plan.skipped;
        let Some(latest) = plan.fire.last() else {
            tracing::warn!(
                schedule_id = firing.id,
                missed_since = %rfc3339(due.timestamp_millis()),
                skipped = plan.skipped,
                catchup = %firing.catchup,
                "schedule missed runs; skipped them (catchup none, or older than --misfire-grace-secs)"
            );
            return self.advances.push(Advance {
                next_run_at: plan.next_run_at.map(|t| t.timestamp_millis()),
                skipped,
                ..park
            });
        };
        if plan.skipped > 0 || plan.fire.len() > 1 || *latest > due {
            tracing::info!(
                schedule_id = firing.id,
                missed_since = %rfc3339(due.timestamp_millis()),
                fired = plan.fire.len(),
                fired_up_to = %rfc3339(latest.timestamp_millis()),
                skipped = plan.skipped,
                catchup = %firing.catchup,
                "schedule missed runs; caught up"
            );
        }
        out.extend(plan.fire.iter().enumerate().map(|(i, at)| ToFire {
            firing,
            at: *at,
            next_run_at: plan.next_run_at,
            skipped: if i == 0 { skipped } else { 0 },
        }));
    }

    /// Fires each of `instants` unless (schedule, instant) fired already, and plans moving
    /// each schedule on either way ([`Batch::advance`] writes it): `next_run_at`, `last_run_at`
    /// to its latest instant that fired, `skipped_runs` up by the misses (and by each instant
    /// at which `overlap: skip` held back a target). The instants of one schedule come
    /// together, oldest first. Returns, per instant, the new task ids, or `None` when it had
    /// fired.
    fn fire_all(&mut self, instants: &[ToFire<'_>]) -> Result<Vec<Option<Vec<i64>>>, StoreError> {
        if instants.is_empty() {
            // A tick with nothing due (woken by a change) costs no statement here.
            return Ok(Vec::new());
        }
        // The firing records, in (schedule, instant) order (see `record_firings`).
        let mut order: Vec<usize> = (0..instants.len()).collect();
        order.sort_by_key(|&i| (instants[i].firing.id, instants[i].at));
        let keys: Vec<(i64, i64)> = order
            .iter()
            .map(|&i| (instants[i].firing.id, instants[i].at.timestamp_millis()))
            .collect();
        let mut recorded = vec![false; instants.len()];
        for (&i, new) in order.iter().zip(self.tx.record_firings(&keys)?) {
            recorded[i] = new;
        }

        // Every recorded instant's tasks, then one insert for all of them.
        let now_ms = self.now.timestamp_millis();
        let mut tasks = Vec::new();
        let mut unsaved = HashSet::new();
        let mut planned = Vec::with_capacity(instants.len());
        for (f, recorded) in instants.iter().zip(recorded) {
            if !recorded {
                planned.push(None);
                continue;
            }
            let started = std::time::Instant::now();
            // A firing has no caller: each of its tasks starts a trace of its own.
            let mut traces = TaskTraces::new(None, self.export);
            let run_at =
                f.at.timestamp_millis()
                    .saturating_add(self.jitter.draw(f.firing.jitter_sec));
            let out = fanout::firing_tasks(
                self.tx,
                &mut self.targets,
                &unsaved,
                f.firing,
                TaskKind::Schedule,
                run_at,
                now_ms,
                &mut traces,
            )?;
            if f.firing.overlap == Overlap::Skip {
                unsaved.extend(out.tasks.iter().map(|t| (f.firing.id, t.endpoint_id)));
            }
            let start = tasks.len();
            tasks.extend(out.tasks);
            planned.push(Some(Recorded {
                tasks: start..tasks.len(),
                overlapped: out.overlapped,
                traces,
                started,
            }));
        }
        let ids = self.tx.insert_tasks(&tasks)?;

        let mut created = Vec::with_capacity(instants.len());
        for (f, planned) in instants.iter().zip(planned) {
            let at_ms = f.at.timestamp_millis();
            let mut skipped = f.skipped;
            let mut fired_at = None;
            match planned {
                Some(r) => {
                    let ids = ids[r.tasks].to_vec();
                    if self.export {
                        self.firings.push(FiringSpan {
                            schedule_id: f.firing.id,
                            app_id: f.firing.app_id.clone(),
                            scheduled_at_ms: at_ms,
                            start_ms: now_ms,
                            took: r.started.elapsed(),
                            tasks: r
                                .traces
                                .roots()
                                .iter()
                                .copied()
                                .zip(ids.iter().copied())
                                .collect(),
                        });
                    }
                    if r.overlapped > 0 {
                        tracing::info!(
                            schedule_id = f.firing.id,
                            scheduled_at = %rfc3339(at_ms),
                            endpoints = r.overlapped,
                            "overlap skip: an earlier task of this schedule is still open; no new task for those endpoints"
                        );
                        skipped += 1;
                        self.counts.overlap_skipped += 1;
                    }
                    // A run that overlap held back entirely did not run.
                    if r.overlapped == 0 || !ids.is_empty() {
                        fired_at = Some(at_ms);
                    }
                    self.tasks += ids.len();
                    self.lag_ms = Some((self.now - f.at).num_milliseconds().max(0));
                    self.counts
                        .fired(self.now - f.at, fired_at.is_some(), ON_TIME_SLACK);
                    created.push(Some(ids));
                }
                None => {
                    tracing::warn!(
                        schedule_id = f.firing.id,
                        scheduled_at = %rfc3339(at_ms),
                        "schedule already fired for this instant (was the clock set back?); not firing again"
                    );
                    created.push(None);
                }
            }
            let next_run_at = f.next_run_at.map(|t| t.timestamp_millis());
            match self.advances.last_mut() {
                Some(last) if last.id == f.firing.id => {
                    last.fired_at = fired_at.or(last.fired_at);
                    last.next_run_at = next_run_at;
                    last.skipped = last.skipped.saturating_add(skipped);
                }
                _ => self.advances.push(Advance {
                    id: f.firing.id,
                    fired_at,
                    next_run_at,
                    skipped,
                }),
            }
        }
        Ok(created)
    }

    /// Moves every schedule the batch looked at on, in one statement.
    fn advance(&mut self) -> Result<(), StoreError> {
        self.tx.advance_schedules(&self.advances)
    }
}

/// The first instant of `cron` strictly after `after` that lies in `window`, if any.
pub fn next_in_window(
    cron: &CronSchedule,
    window: Window,
    after: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    let before_start = window
        .starts_at
        .map(|s| from_ms(s) - TimeDelta::milliseconds(1));
    let after = before_start.map_or(after, |b| after.max(b));
    cron.next_after(after)
        .filter(|t| window.ends_at.is_none_or(|e| t.timestamp_millis() <= e))
}

/// The instants of `cron` in [`from`, `to`] and in `window`, oldest first; `None` when there
/// are more than `max`.
pub fn instants_between(
    cron: &CronSchedule,
    window: Window,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    max: usize,
) -> Option<Vec<DateTime<Utc>>> {
    let mut out = Vec::new();
    let mut next = next_in_window(cron, window, from - TimeDelta::milliseconds(1));
    while let Some(t) = next
        && t <= to
    {
        if out.len() == max {
            return None;
        }
        out.push(t);
        next = next_in_window(cron, window, t);
    }
    Some(out)
}

/// Instants a backfill fires per transaction: a long backfill never holds the write lock for
/// more than this many firings.
const BACKFILL_BATCH: usize = 100;

/// What a backfill did: instants it fired, and instants that had fired before (by the
/// scheduler, a catch-up or an earlier backfill).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Backfilled {
    pub fired: usize,
    pub already_fired: usize,
}

/// Fires `firing` for each of `instants` (oldest first) that has no firing row yet, in
/// transactions of [`BACKFILL_BATCH`] instants: the row and that instant's tasks (kind
/// `schedule`, due now, no jitter) commit together, so a backfill racing the scheduler, a
/// catch-up or another backfill, on any node, fires each instant once. `overlap` does not hold
/// a backfill back (it was asked for), and `last_run_at` and `next_run_at` do not move. Its
/// tasks continue the request's trace, as a trigger's do (`traces`).
pub fn backfill(
    app: &App,
    firing: &Firing,
    instants: &[DateTime<Utc>],
    traces: &mut TaskTraces,
) -> Result<Backfilled, StoreError> {
    let firing = Firing {
        overlap: Overlap::Allow,
        ..firing.clone()
    };
    let mut done = Backfilled::default();
    for chunk in instants.chunks(BACKFILL_BATCH) {
        let now_ms = app.clock.now().timestamp_millis();
        let (fired, tasks) = app.store.write(|tx| {
            let keys: Vec<(i64, i64)> = chunk
                .iter()
                .map(|at| (firing.id, at.timestamp_millis()))
                .collect();
            let recorded = tx.record_firings(&keys)?;
            let fired = recorded.iter().filter(|&&new| new).count();
            // Every recorded instant's tasks are alike (due now, same targets): one firing
            // per instant, inserted together.
            let mut targets = fanout::Targets::default();
            let mut tasks = Vec::new();
            for _ in 0..fired {
                let out = fanout::firing_tasks(
                    tx,
                    &mut targets,
                    &HashSet::new(),
                    &firing,
                    TaskKind::Schedule,
                    now_ms,
                    now_ms,
                    traces,
                )?;
                tasks.extend(out.tasks);
            }
            let tasks = tx.insert_tasks(&tasks)?.len();
            Ok::<_, StoreError>((fired, tasks))
        })?;
        if tasks > 0 {
            app.delivery_wake.notify();
        }
        done.fired += fired;
        done.already_fired += chunk.len() - fired;
    }
    Ok(done)
}

/// The random part of a firing's jitter: a delay in [0, jitter] ms. Tests pin it with
/// [`Jitter::pin`]; the scheduler's timing does not depend on it.
pub struct Jitter(Mutex<Box<dyn FnMut(i64) -> i64 + Send>>);

impl Default for Jitter {
    fn default() -> Self {
        Jitter(Mutex::new(Box::new(|max_ms| {
            rand::random_range(0..=max_ms)
        })))
    }
}

impl Jitter {
    /// The delay (ms) for a schedule with `jitter_sec`: 0 when it has none, else a draw in
    /// [0, jitter_sec × 1000].
    pub fn draw(&self, jitter_sec: i64) -> i64 {
        let max_ms = jitter_sec.clamp(0, 3600) * 1000;
        if max_ms == 0 {
            return 0;
        }
        let mut f = self.0.lock().unwrap_or_else(|e| e.into_inner());
        f(max_ms).clamp(0, max_ms)
    }

    /// Replaces the draw: `f` gets the largest delay (ms) and returns one (clamped to it).
    pub fn pin(&self, f: impl FnMut(i64) -> i64 + Send + 'static) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Box::new(f);
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

    fn latest(
        due: DateTime<Utc>,
        now: DateTime<Utc>,
        grace: TimeDelta,
        next: impl Fn(DateTime<Utc>) -> Option<DateTime<Utc>>,
    ) -> Plan {
        plan(due, now, grace, Catchup::Latest, next)
    }

    #[test]
    fn on_time_fires_the_due_instant() {
        for catchup in [Catchup::Latest, Catchup::None, Catchup::All] {
            let on_time = plan(t(12, 1, 0), t(12, 1, 0), HOUR, catchup, every_minute);
            assert_eq!(on_time.fire, vec![t(12, 1, 0)]);
            assert_eq!(on_time.skipped, 0);
            assert_eq!(on_time.next_run_at, Some(t(12, 2, 0)));
            // Woken a moment late: still that instant.
            let late = t(12, 1, 0) + TimeDelta::milliseconds(3);
            assert_eq!(
                plan(t(12, 1, 0), late, HOUR, catchup, every_minute),
                on_time
            );
        }
        // A zero grace is raised to the on-time slack by the scheduler, not here.
        let late = t(12, 1, 0) + TimeDelta::milliseconds(3);
        let late = latest(t(12, 1, 0), late, TimeDelta::zero(), every_minute);
        assert!(late.fire.is_empty() && late.skipped == 1);
    }

    #[test]
    fn not_yet_due_fires_nothing() {
        let p = latest(t(12, 1, 0), t(12, 0, 59), HOUR, every_minute);
        assert!(p.fire.is_empty());
        assert_eq!(p.skipped, 0);
        assert_eq!(p.next_run_at, Some(t(12, 1, 0)));
    }

    #[test]
    fn downtime_fires_once_for_the_latest_missed_instant() {
        let p = latest(t(12, 1, 0), t(12, 10, 30), HOUR, every_minute);
        assert_eq!(p.fire, vec![t(12, 10, 0)]);
        // 12:01 … 12:09 were not fired.
        assert_eq!(p.skipped, 9);
        assert_eq!(p.next_run_at, Some(t(12, 11, 0)));
    }

    #[test]
    fn catchup_none_fires_no_missed_instant() {
        let p = plan(
            t(12, 1, 0),
            t(12, 10, 30),
            HOUR,
            Catchup::None,
            every_minute,
        );
        assert!(p.fire.is_empty());
        assert_eq!(p.skipped, 10);
        assert_eq!(p.next_run_at, Some(t(12, 11, 0)));
        // Found within the on-time slack, the latest instant is not a missed one.
        let p = plan(t(12, 1, 0), t(12, 10, 5), HOUR, Catchup::None, every_minute);
        assert_eq!((p.fire, p.skipped), (vec![t(12, 10, 0)], 9));
    }

    #[test]
    fn catchup_all_fires_every_instant_in_the_grace_oldest_first() {
        let p = plan(t(12, 1, 0), t(12, 3, 30), HOUR, Catchup::All, every_minute);
        assert_eq!(p.fire, vec![t(12, 1, 0), t(12, 2, 0), t(12, 3, 0)]);
        assert_eq!(p.skipped, 0);
        assert_eq!(p.next_run_at, Some(t(12, 4, 0)));
        // Only those within the grace: 12:05 and later with a 5½-minute grace.
        let grace = TimeDelta::seconds(330);
        let p = plan(
            t(12, 1, 0),
            t(12, 10, 30),
            grace,
            Catchup::All,
            every_minute,
        );
        assert_eq!(p.fire.first(), Some(&t(12, 5, 0)));
        assert_eq!((p.fire.len(), p.skipped), (6, 4));
        // At most 100: the latest 100 of the 3 hours' 180 instants in a day's grace.
        let day = TimeDelta::days(1);
        let p = plan(t(9, 1, 0), t(12, 0, 30), day, Catchup::All, every_minute);
        assert_eq!(p.fire.len(), MAX_CATCHUP_RUNS);
        assert_eq!(p.fire.first(), Some(&t(10, 21, 0)));
        assert_eq!(p.fire.last(), Some(&t(12, 0, 0)));
        assert!(p.fire.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(p.skipped, 80);
    }

    #[test]
    fn counting_long_misses_is_bounded() {
        // A year of minutes missed: 10,000 counted one by one, then the walk jumps to the
        // hour's window (11:01 … 12:00), of which 12:00 fires and 59 are skipped.
        let due = t(12, 0, 0) - TimeDelta::days(365);
        let p = latest(due, t(12, 0, 30), HOUR, every_minute);
        assert_eq!(p.fire, vec![t(12, 0, 0)]);
        assert_eq!(p.skipped, MAX_COUNTED_MISSES + 59);
        assert_eq!(p.next_run_at, Some(t(12, 1, 0)));
    }

    #[test]
    fn misses_older_than_the_grace_are_skipped() {
        // Latest missed instant 12:10 is 30 s old; a 10 s grace skips it.
        let p = latest(
            t(12, 1, 0),
            t(12, 10, 30),
            TimeDelta::seconds(10),
            every_minute,
        );
        assert!(p.fire.is_empty());
        assert_eq!(p.skipped, 10);
        assert_eq!(p.next_run_at, Some(t(12, 11, 0)));
        // Down for two days: fires 12:00 today; the 47 hourly instants before are skipped.
        let down_since = t(12, 0, 0) - TimeDelta::days(2);
        let p = latest(down_since, t(12, 30, 0), HOUR, hourly);
        assert_eq!(p.fire, vec![t(12, 0, 0)]);
        assert_eq!(p.skipped, 48);
        assert_eq!(p.next_run_at, Some(t(13, 0, 0)));
        // The only instant in the window is the start of the window itself.
        let p = latest(down_since, t(13, 0, 0), HOUR, hourly);
        assert_eq!(p.fire, vec![t(13, 0, 0)]);
        assert_eq!(p.next_run_at, Some(t(14, 0, 0)));
    }

    fn cron(expr: &str) -> CronSchedule {
        CronSchedule::parse(expr, "UTC").unwrap()
    }

    fn window(starts_at: Option<DateTime<Utc>>, ends_at: Option<DateTime<Utc>>) -> Window {
        Window {
            starts_at: starts_at.map(|t| t.timestamp_millis()),
            ends_at: ends_at.map(|t| t.timestamp_millis()),
        }
    }

    #[test]
    fn the_next_run_stays_inside_the_window() {
        let hourly = cron("0 * * * *");
        let open = Window::default();
        assert_eq!(
            next_in_window(&hourly, open, t(12, 0, 0)),
            Some(t(13, 0, 0))
        );
        // A start on an instant includes it; one between instants gives the next.
        let w = window(Some(t(15, 0, 0)), None);
        assert_eq!(next_in_window(&hourly, w, t(12, 0, 0)), Some(t(15, 0, 0)));
        let w = window(Some(t(15, 0, 1)), None);
        assert_eq!(next_in_window(&hourly, w, t(12, 0, 0)), Some(t(16, 0, 0)));
        // The end is included; past it there is none.
        let w = window(None, Some(t(14, 0, 0)));
        assert_eq!(next_in_window(&hourly, w, t(13, 0, 0)), Some(t(14, 0, 0)));
        assert_eq!(next_in_window(&hourly, w, t(14, 0, 0)), None);
        // A window between two instants holds none.
        let w = window(Some(t(14, 10, 0)), Some(t(14, 50, 0)));
        assert_eq!(next_in_window(&hourly, w, t(12, 0, 0)), None);
    }

    #[test]
    fn instants_between_are_bounded_and_windowed() {
        let minutely = cron("* * * * *");
        let open = Window::default();
        let got = instants_between(&minutely, open, t(12, 0, 0), t(12, 3, 0), 10).unwrap();
        assert_eq!(
            got,
            vec![t(12, 0, 0), t(12, 1, 0), t(12, 2, 0), t(12, 3, 0)]
        );
        assert_eq!(
            instants_between(&minutely, open, t(12, 0, 0), t(12, 3, 0), 4).map(|v| v.len()),
            Some(4)
        );
        assert_eq!(
            instants_between(&minutely, open, t(12, 0, 0), t(12, 3, 0), 3),
            None
        );
        let w = window(Some(t(12, 1, 30)), Some(t(12, 2, 0)));
        let got = instants_between(&minutely, w, t(12, 0, 0), t(12, 3, 0), 10).unwrap();
        assert_eq!(got, vec![t(12, 2, 0)]);
        assert_eq!(
            instants_between(&minutely, open, t(12, 0, 10), t(12, 0, 50), 10),
            Some(vec![])
        );
    }

    #[test]
    fn jitter_draws_within_its_bound_and_can_be_pinned() {
        let jitter = Jitter::default();
        assert_eq!(jitter.draw(0), 0);
        for _ in 0..100 {
            assert!((0..=5_000).contains(&jitter.draw(5)));
        }
        jitter.pin(|max_ms| max_ms / 2);
        assert_eq!(jitter.draw(60), 30_000);
        // A draw out of range is clamped into it.
        jitter.pin(|max_ms| max_ms * 2);
        assert_eq!(jitter.draw(1), 1_000);
        jitter.pin(|_| -5);
        assert_eq!(jitter.draw(1), 0);
    }

    #[test]
    fn a_schedule_that_ends_has_no_next_run() {
        let once = |after: DateTime<Utc>| (after < t(12, 0, 0)).then_some(t(12, 0, 0));
        let p = latest(t(12, 0, 0), t(12, 5, 0), HOUR, once);
        assert_eq!(p.fire, vec![t(12, 0, 0)]);
        assert_eq!(p.next_run_at, None);
    }
}
