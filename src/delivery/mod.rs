//! The delivery pool: turns due tasks into HTTP calls to their endpoints, at least once.
//!
//! One dispatcher thread owns the database side. Each round it commits, in one transaction, the
//! results the workers reported since the last round (attempt rows and task state changes) and
//! claims the next due tasks with one `UPDATE … RETURNING`, loading each claimed endpoint once
//! per batch. A fixed set of worker threads (`--workers`) sends the claimed tasks with one shared
//! keep-alive HTTP agent and hands the results back. The dispatcher sleeps on
//! [`App::delivery_wake`] until the earliest pending task is due (at most `max_idle`); the API,
//! the scheduler and the workers wake it.
//!
//! Durability: a claimed task is `running` in the database until its result is committed. A
//! crash leaves it `running`; the next start hands it back to `pending` before claiming, so its
//! attempt is made again (at least once, never lost). Shutdown stops claiming, hands unsent
//! claims back, and gives in-flight sends `shutdown_grace_secs` to finish.

mod retention;
pub mod send;
pub mod target;

use crate::app::App;
use crate::metrics::DeliveryOutcome;
use crate::store::{self, tasks::Claimed};
use send::{Sent, Target, Verdict};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Most tasks claimed in one statement.
const MAX_BATCH: usize = 256;
/// Shortest time between two dispatcher rounds: results arriving meanwhile are committed
/// together instead of one transaction each.
const MIN_ROUND: Duration = Duration::from_millis(2);
/// Pause after a database error before the dispatcher tries again.
const ERROR_PAUSE: Duration = Duration::from_millis(500);

/// A claimed task and where it goes.
struct Job {
    task: Claimed,
    target: Arc<Target>,
}

/// A finished attempt waiting to be committed.
struct Done {
    task: Claimed,
    endpoint_id: i64,
    sent: Sent,
    verdict: Verdict,
    /// Epoch ms when the verdict was reached.
    at: i64,
}

#[derive(Default)]
struct JobQueue {
    jobs: VecDeque<Job>,
    /// Set at shutdown: workers exit once the queue is empty.
    closed: bool,
}

/// What the dispatcher and the workers share.
struct Shared {
    app: Arc<App>,
    agent: ureq::Agent,
    queue: Mutex<JobQueue>,
    queue_ready: Condvar,
    results: Mutex<Vec<Done>>,
    /// Claimed tasks whose result is not committed yet: queued, being sent, or reported.
    in_flight: AtomicUsize,
    stopping: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The running delivery pool.
pub struct DeliveryPool {
    shared: Arc<Shared>,
    dispatcher: Option<JoinHandle<()>>,
    workers: Vec<JoinHandle<()>>,
    retention: retention::Retention,
}

impl DeliveryPool {
    pub fn start(app: Arc<App>) -> Self {
        let shared = Arc::new(Shared {
            agent: send::agent(&app.config),
            app: app.clone(),
            queue: Mutex::default(),
            queue_ready: Condvar::new(),
            results: Mutex::default(),
            in_flight: AtomicUsize::new(0),
            stopping: AtomicBool::new(false),
        });
        let workers = (0..app.config.workers)
            .map(|i| {
                let shared = shared.clone();
                std::thread::Builder::new()
                    .name(format!("delivery-{i}"))
                    .spawn(move || work(&shared))
                    .expect("spawn a delivery worker")
            })
            .collect();
        let dispatcher = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("delivery-dispatch".into())
                .spawn(move || dispatch(&shared))
                .expect("spawn the delivery dispatcher")
        };
        DeliveryPool {
            shared,
            dispatcher: Some(dispatcher),
            workers,
            retention: retention::Retention::start(app),
        }
    }

    /// Stops claiming, hands claimed-but-unsent tasks back to `pending`, waits up to
    /// `shutdown_grace_secs` for in-flight sends and commits their results; whatever is still
    /// in flight then is handed back too. Blocking.
    pub fn stop(mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        self.shared.app.delivery_wake.notify();
        if let Some(dispatcher) = self.dispatcher.take() {
            let _ = dispatcher.join();
        }
        self.retention.stop();
        // Workers still blocked in a send past the grace are left to finish on their own; their
        // results are no longer recorded (the task is pending again).
        if self.shared.in_flight.load(Ordering::SeqCst) == 0 {
            for worker in self.workers.drain(..) {
                let _ = worker.join();
            }
        }
    }
}

/// A worker: takes claimed tasks off the queue, sends them, reports the results.
fn work(shared: &Shared) {
    let app = &shared.app;
    while let Some(job) = next_job(shared) {
        let started_at = app.clock.now_ms();
        let sent = send::send(&shared.agent, &job.target, &job.task, started_at);
        let outcome = match sent.status {
            _ if sent.is_success() => DeliveryOutcome::Success,
            Some(_) => DeliveryOutcome::HttpError,
            None => DeliveryOutcome::NetworkError,
        };
        app.metrics.record_delivery(
            job.target.endpoint_id,
            outcome,
            u64::try_from(sent.duration_ms).unwrap_or(0),
        );
        let now = app.clock.now();
        let verdict = send::judge(&job.task, &job.target.policy, &sent, now);
        lock(&shared.results).push(Done {
            endpoint_id: job.target.endpoint_id,
            task: job.task,
            sent,
            verdict,
            at: now.timestamp_millis(),
        });
        app.delivery_wake.notify();
    }
}

fn next_job(shared: &Shared) -> Option<Job> {
    let mut queue = lock(&shared.queue);
    loop {
        if let Some(job) = queue.jobs.pop_front() {
            return Some(job);
        }
        if queue.closed {
            return None;
        }
        queue = shared
            .queue_ready
            .wait(queue)
            .unwrap_or_else(|e| e.into_inner());
    }
}

/// The dispatcher thread: recovery at start, then rounds of commit-and-claim until shutdown.
fn dispatch(shared: &Shared) {
    let app = &shared.app;
    let mut conn = loop {
        match app.pool.get() {
            Ok(conn) => break conn,
            Err(e) => {
                tracing::error!(error = %e, "delivery pool: no database connection; retrying");
                if shared.stopping.load(Ordering::SeqCst) {
                    return;
                }
                std::thread::sleep(ERROR_PAUSE);
            }
        }
    };
    recover(&mut conn, app.clock.now_ms());
    let capacity = app.config.workers.saturating_mul(4).max(2);
    let mut last_round: Option<Instant> = None;
    while !shared.stopping.load(Ordering::SeqCst) {
        if let Some(since) = last_round.map(|t| t.elapsed())
            && since < MIN_ROUND
        {
            std::thread::sleep(MIN_ROUND - since);
        }
        last_round = Some(Instant::now());
        let done = std::mem::take(&mut *lock(&shared.results));
        let unsettled = shared
            .in_flight
            .load(Ordering::SeqCst)
            .saturating_sub(done.len());
        let free = capacity.saturating_sub(unsettled).min(MAX_BATCH);
        let now = app.clock.now_ms();
        let claimed = match store::write_tx(&mut conn, |tx| {
            record(tx, &done)?;
            claim(tx, now, free)
        }) {
            Ok(claimed) => claimed,
            Err(e) => {
                tracing::error!(error = %e, "delivery pool: database round failed; retrying");
                lock(&shared.results).extend(done);
                app.delivery_wake.wait(ERROR_PAUSE);
                continue;
            }
        };
        let full = free > 0 && claimed.len() == free;
        shared.in_flight.fetch_sub(done.len(), Ordering::SeqCst);
        hand_out(shared, claimed);
        if full {
            continue; // more may be due
        }
        let wait = if free == 0 {
            app.config.max_idle // a worker's result wakes us
        } else {
            until_next_due(&conn, app)
        };
        app.delivery_wake.wait(wait);
    }
    drain_at_shutdown(shared, &mut conn);
}

/// Start-up: tasks left `running` by a crash are handed back, and pending tasks whose endpoint
/// no longer exists are canceled.
fn recover(conn: &mut store::Conn, now_ms: i64) {
    let recovered = store::write_tx(conn, |tx| {
        Ok::<_, rusqlite::Error>((
            store::tasks::requeue_running(tx, now_ms)?,
            store::tasks::cancel_orphans(tx, now_ms)?,
        ))
    });
    match recovered {
        Ok((0, 0)) => {}
        Ok((requeued, canceled)) => tracing::info!(
            requeued,
            canceled,
            "delivery pool: recovered tasks interrupted by the last stop"
        ),
        Err(e) => tracing::error!(error = %e, "delivery pool: start-up recovery failed"),
    }
}

/// Commits finished attempts: the attempt row, the task's new state, and for a `410 Gone` the
/// endpoint's disabling. An attempt whose task is no longer `running` is not recorded.
fn record(tx: &rusqlite::Connection, done: &[Done]) -> rusqlite::Result<()> {
    for d in done {
        let status_code = d.sent.status.map(i64::from);
        let recorded = store::tasks::finish_attempt(
            tx,
            d.task.id,
            d.task.attempt,
            d.verdict.after,
            status_code,
            d.verdict.error.as_deref(),
            d.at,
        )?;
        if !recorded {
            continue;
        }
        log_outcome(d);
        store::attempts::insert(
            tx,
            &store::attempts::Attempt {
                id: 0,
                task_id: d.task.id,
                attempt: d.task.attempt,
                started_at: d.sent.started_at,
                duration_ms: d.sent.duration_ms,
                status_code,
                error: d.verdict.error.clone(),
                response_body: d.sent.body.clone(),
            },
        )?;
        if d.verdict.disable_endpoint {
            store::endpoints::set_status_any(tx, d.endpoint_id, "disabled", d.at)?;
        }
    }
    Ok(())
}

/// One WARN line per failed attempt (contract §10), and one when a `410 Gone` disables the
/// endpoint. Ids, the attempt number, the status code or error and what happens next: never the
/// payload, a header, a secret or a signature.
fn log_outcome(d: &Done) {
    use crate::store::tasks::AfterAttempt;
    if d.verdict.after == AfterAttempt::Success {
        return;
    }
    let next = match d.verdict.after {
        AfterAttempt::RetryAt(at) => crate::clock::rfc3339(at),
        _ => "failed for good".to_string(),
    };
    let error = d.verdict.error.as_deref().unwrap_or("");
    match d.sent.status {
        Some(status_code) => tracing::warn!(
            task_id = d.task.id,
            endpoint_id = d.endpoint_id,
            attempt = d.task.attempt,
            status_code,
            error,
            next_attempt_at = %next,
            "delivery attempt failed"
        ),
        None => tracing::warn!(
            task_id = d.task.id,
            endpoint_id = d.endpoint_id,
            attempt = d.task.attempt,
            error,
            next_attempt_at = %next,
            "delivery attempt failed"
        ),
    }
    if d.verdict.disable_endpoint {
        tracing::warn!(
            endpoint_id = d.endpoint_id,
            task_id = d.task.id,
            reason = "gone: the endpoint answered HTTP 410 Gone",
            "endpoint disabled by webhookd"
        );
    }
}

/// Claims up to `free` due tasks and loads their endpoints and retry policies, once each.
fn claim(tx: &rusqlite::Connection, now_ms: i64, free: usize) -> rusqlite::Result<Vec<Job>> {
    if free == 0 {
        return Ok(Vec::new());
    }
    let claimed = store::tasks::claim_due(tx, now_ms, free)?;
    let mut targets: HashMap<i64, Option<Arc<Target>>> = HashMap::new();
    let mut jobs = Vec::with_capacity(claimed.len());
    for task in claimed {
        let target = match targets.get(&task.endpoint_id) {
            Some(target) => target.clone(),
            None => {
                let target = match store::endpoints::get_any(tx, task.endpoint_id)? {
                    Some(ep) => {
                        let policy = store::policies::effective(tx, ep.retry_policy_id)?;
                        Some(Arc::new(Target::new(&ep, policy)))
                    }
                    None => None,
                };
                targets.insert(task.endpoint_id, target.clone());
                target
            }
        };
        match target {
            Some(target) => jobs.push(Job { task, target }),
            // Cannot happen: the claim joins on the endpoint in this same transaction. Left
            // `running`, the task is handed back at the next start.
            None => tracing::error!(task_id = task.id, "claimed a task without an endpoint"),
        }
    }
    Ok(jobs)
}

fn hand_out(shared: &Shared, jobs: Vec<Job>) {
    if jobs.is_empty() {
        return;
    }
    shared.in_flight.fetch_add(jobs.len(), Ordering::SeqCst);
    lock(&shared.queue).jobs.extend(jobs);
    shared.queue_ready.notify_all();
}

/// How long the dispatcher may sleep: until the earliest pending task is due, at most
/// `max_idle`.
fn until_next_due(conn: &rusqlite::Connection, app: &App) -> Duration {
    let max_idle = app.config.max_idle;
    match store::tasks::next_due(conn) {
        Ok(Some(due)) => {
            let ms = due.saturating_sub(app.clock.now_ms()).max(0);
            Duration::from_millis(u64::try_from(ms).unwrap_or(0)).min(max_idle)
        }
        Ok(None) => max_idle,
        Err(e) => {
            tracing::error!(error = %e, "delivery pool: cannot read the next due time");
            ERROR_PAUSE
        }
    }
}

/// Shutdown: claimed tasks not yet sent go back to `pending` at once; sends in flight get the
/// grace to finish and their results are committed; what is still in flight after the grace is
/// handed back to `pending` as well.
fn drain_at_shutdown(shared: &Shared, conn: &mut store::Conn) {
    let app = &shared.app;
    let unsent = {
        let mut queue = lock(&shared.queue);
        queue.closed = true;
        std::mem::take(&mut queue.jobs)
    };
    shared.queue_ready.notify_all();
    shared.in_flight.fetch_sub(unsent.len(), Ordering::SeqCst);
    let deadline = Instant::now() + Duration::from_secs(app.config.shutdown_grace_secs);
    loop {
        let done = std::mem::take(&mut *lock(&shared.results));
        if !done.is_empty() {
            match store::write_tx(conn, |tx| record(tx, &done)) {
                Ok(()) => {
                    shared.in_flight.fetch_sub(done.len(), Ordering::SeqCst);
                }
                Err(e) => tracing::error!(error = %e, "delivery pool: cannot record results"),
            }
        }
        let now = Instant::now();
        if shared.in_flight.load(Ordering::SeqCst) == 0 || now >= deadline {
            break;
        }
        app.delivery_wake
            .wait((deadline - now).min(Duration::from_millis(100)));
    }
    let still = shared.in_flight.load(Ordering::SeqCst);
    if still > 0 {
        tracing::warn!(
            in_flight = still,
            "shutdown grace over: unfinished deliveries go back to pending"
        );
    }
    if let Err(e) = store::tasks::requeue_running(conn, app.clock.now_ms()) {
        tracing::error!(error = %e, "delivery pool: cannot hand running tasks back; the next start will");
    }
}
