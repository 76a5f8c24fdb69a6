//! The delivery pool: turns due tasks into HTTP calls to their endpoints, at least once.
//!
//! One dispatcher thread owns the database side. Each round it commits, in one transaction, the
//! results the workers reported since the last round (attempt rows and task state changes) and
//! claims the next due tasks fairly, endpoint by endpoint within each endpoint's limits (see
//! [`fair`]), loading each claimed endpoint once per batch. A fixed set of worker threads (`--workers`) sends the claimed tasks with one shared
//! keep-alive HTTP agent and hands the results back. The dispatcher sleeps on
//! [`App::delivery_wake`] until the earliest skipped endpoint may start again (at most
//! `max_idle`); the API, the scheduler and the workers wake it.
//!
//! Durability: a claimed task is `running` in the database until its result is committed. A
//! crash leaves it `running`; the next start hands it back to `pending` before claiming, so its
//! attempt is made again (at least once, never lost). Shutdown stops claiming, hands unsent
//! claims back, and gives in-flight sends `shutdown_grace_secs` to finish.

pub mod fair;
pub mod health;
pub mod probe;
mod retention;
pub mod send;
pub mod target;

use crate::app::App;
use crate::metrics::DeliveryOutcome;
use crate::operator::{self, OperatorEvent};
use crate::store::endpoints::DisabledReason;
use crate::store::{self, IdleCap, StoreError, Tx, Watcher, tasks::Claimed};
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

/// A claimed task that waited longer than this for a worker has its lease renewed before it is
/// sent (`Tx::renew_leases`). A lease is the endpoint's timeout plus 30 s, so a task sent within
/// this long of its claim still holds 20 s more than its send can take.
const RENEW_AFTER_MS: i64 = 10_000;

/// A claimed task and where it goes.
struct Job {
    task: Claimed,
    /// Epoch ms of the claim (the lease started then).
    claimed_at: i64,
    target: Arc<Target>,
    /// Most sends to this endpoint at once: a worker skips the job while that many are under
    /// way, so a slow endpoint never holds more workers than its share.
    cap: usize,
}

/// A finished attempt waiting to be committed.
pub(crate) struct Done {
    pub task: Claimed,
    pub endpoint_id: i64,
    pub sent: Sent,
    pub verdict: Verdict,
    /// Epoch ms when the verdict was reached.
    pub at: i64,
    /// No operator event may come of this attempt: it delivered an operator event itself (no
    /// storm), or it is a test delivery whose caller sees the result.
    pub quiet: bool,
}

#[derive(Default)]
struct JobQueue {
    jobs: VecDeque<Job>,
    /// Sends under way, by endpoint.
    sending: HashMap<i64, usize>,
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
    /// Endpoints of jobs dropped unsent because their lease was lost (`still_ours`): the
    /// dispatcher releases their place in the fair gate as it does for results.
    dropped: Mutex<Vec<i64>>,
    /// Claimed tasks whose result is not committed yet: queued, being sent, or reported.
    in_flight: AtomicUsize,
    stopping: AtomicBool,
    /// Caps the dispatcher's idle sleep while other nodes' new tasks might go unnoticed
    /// (`Store::watch`).
    idle_cap: IdleCap,
    /// How often to take back tasks whose lease expired (`Watcher::rescue_every`); `None`:
    /// no other process holds leases.
    rescue_every: Option<Duration>,
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
    /// `watcher` says how other processes sharing the database are noticed (`Store::watch`).
    pub fn start(app: Arc<App>, watcher: &Watcher) -> Self {
        let shared = Arc::new(Shared {
            idle_cap: watcher.idle_cap.clone(),
            rescue_every: watcher.rescue_every,
            agent: send::agent(&app.config),
            app: app.clone(),
            queue: Mutex::default(),
            queue_ready: Condvar::new(),
            results: Mutex::default(),
            dropped: Mutex::default(),
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
        if !still_ours(app, &job) {
            sent_one(shared, job.target.endpoint_id);
            lock(&shared.dropped).push(job.target.endpoint_id);
            shared.in_flight.fetch_sub(1, Ordering::SeqCst);
            app.delivery_wake.notify();
            continue;
        }
        let quiet = job
            .task
            .event_name
            .as_deref()
            .is_some_and(operator::is_operator_event);
        let done = attempt(app, &shared.agent, &job.target, job.task, quiet);
        sent_one(shared, done.endpoint_id);
        lock(&shared.results).push(done);
        app.delivery_wake.notify();
    }
}

/// Whether a job that waited in the queue may still be sent: its lease is renewed when it waited
/// more than [`RENEW_AFTER_MS`]. Not ours any more (another node took it back after the lease
/// ran out, or the database cannot be reached to say): the job is dropped unsent; the task's
/// current holder, or the next rescue, delivers it.
fn still_ours(app: &App, job: &Job) -> bool {
    let now = app.clock.now_ms();
    if now - job.claimed_at < RENEW_AFTER_MS {
        return true;
    }
    match app.store.write(|tx| tx.renew_leases(&[job.task.id], now)) {
        Ok(held) => held.contains(&job.task.id),
        Err(e) => {
            tracing::warn!(error = %e, task_id = job.task.id, "cannot renew a task's lease; not sending it");
            false
        }
    }
}

/// Makes one attempt of a claimed task: sends it, counts it in the metrics and judges the
/// reply. The pool's workers and `POST /endpoints/{id}/test` both deliver through this.
pub(crate) fn attempt(
    app: &App,
    agent: &ureq::Agent,
    target: &Target,
    task: Claimed,
    quiet: bool,
) -> Done {
    let started_at = app.clock.now_ms();
    let sent = send::send(agent, target, &task, started_at);
    let outcome = match sent.status {
        _ if sent.is_success() => DeliveryOutcome::Success,
        Some(_) => DeliveryOutcome::HttpError,
        None => DeliveryOutcome::NetworkError,
    };
    app.metrics.record_delivery(
        target.endpoint_id,
        outcome,
        u64::try_from(sent.duration_ms).unwrap_or(0),
    );
    let now = app.clock.now();
    let inputs = send::RetryInputs {
        first_attempt_at: first_attempt_at(app, &task, &target.policy, &sent, started_at),
        draw: rand::random::<f64>(),
    };
    let verdict = send::judge(&task, &target.policy, &sent, now, inputs);
    Done {
        quiet,
        endpoint_id: target.endpoint_id,
        task,
        sent,
        verdict,
        at: now.timestamp_millis(),
    }
}

/// When the task's first attempt began, for `max_age_sec`: this attempt's start for a first
/// attempt; else the stored one, read only when the attempt failed and the policy has a limit
/// (a failed read is logged and counts as this attempt, so the task is retried rather than
/// dropped).
fn first_attempt_at(
    app: &App,
    task: &Claimed,
    policy: &crate::retry::RetryPolicy,
    sent: &send::Sent,
    started_at: i64,
) -> i64 {
    if task.attempt <= 1 || policy.max_age_sec.is_none() || sent.is_success() {
        return started_at;
    }
    match app.store.read(|tx| tx.first_attempt_started_at(task.id)) {
        Ok(first) => first.unwrap_or(started_at),
        Err(e) => {
            tracing::warn!(error = %e, task_id = task.id, "cannot read when the task's first attempt began; max_age_sec not applied to this attempt");
            started_at
        }
    }
}

/// The first queued job whose endpoint has fewer sends under way than its cap.
fn next_job(shared: &Shared) -> Option<Job> {
    let mut queue = lock(&shared.queue);
    loop {
        let queue_ref = &mut *queue;
        let ready = queue_ref.jobs.iter().position(|job| {
            queue_ref
                .sending
                .get(&job.target.endpoint_id)
                .is_none_or(|n| *n < job.cap)
        });
        if let Some(job) = ready.and_then(|i| queue_ref.jobs.remove(i)) {
            *queue_ref.sending.entry(job.target.endpoint_id).or_default() += 1;
            return Some(job);
        }
        if queue.closed && queue.jobs.is_empty() {
            return None;
        }
        queue = shared
            .queue_ready
            .wait(queue)
            .unwrap_or_else(|e| e.into_inner());
    }
}

/// A send to `endpoint_id` ended: a job of that endpoint held back for its cap may go now.
fn sent_one(shared: &Shared, endpoint_id: i64) {
    let mut queue = lock(&shared.queue);
    if let Some(n) = queue.sending.get_mut(&endpoint_id) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            queue.sending.remove(&endpoint_id);
        }
    }
    drop(queue);
    shared.queue_ready.notify_all();
}

/// The dispatcher thread: recovery at start, then rounds of commit-and-claim until shutdown.
fn dispatch(shared: &Shared) {
    let app = &shared.app;
    // Waits for the database to answer before recovering (a connection may be refused at first).
    loop {
        match app.store.read(|_| Ok::<_, StoreError>(())) {
            Ok(()) => break,
            Err(e) => {
                tracing::error!(error = %e, "delivery pool: no database connection; retrying");
                if shared.stopping.load(Ordering::SeqCst) {
                    return;
                }
                std::thread::sleep(ERROR_PAUSE);
            }
        }
    }
    recover(app, app.clock.now_ms());
    let capacity = app.config.workers.saturating_mul(4).max(2);
    let rules = health::Rules::from_hours(app.config.disable_failing_after_hours);
    let mut gate = fair::Gate::new(app.clock.clone(), app.config.default_endpoint_cap());
    let mut last_round: Option<Instant> = None;
    let mut next_rescue_ms = i64::MIN;
    // On a database other nodes share, one may die holding leases, and nothing wakes this one
    // when they run out: look at least once per rescue period, or its tasks would wait up to
    // `max_idle` more after their lease ended.
    let longest_idle = match shared.rescue_every {
        Some(every) => app.config.max_idle.min(every),
        None => app.config.max_idle,
    };
    let rescue_every_ms = shared
        .rescue_every
        .map(|every| i64::try_from(every.as_millis()).unwrap_or(i64::MAX));
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
        // The gate's accounting is changed inside the transaction; a failed round rebuilds it
        // from the results put back, so release before and re-count after a failure.
        for d in &done {
            gate.release(d.endpoint_id);
        }
        for endpoint_id in std::mem::take(&mut *lock(&shared.dropped)) {
            gate.release(endpoint_id);
        }
        let rescue = rescue_every_ms.is_some() && now >= next_rescue_ms;
        let round = app.store.write(|tx| {
            record(tx, &done, &rules)?;
            if rescue {
                // Tasks of another node that died mid-delivery.
                let rescued = tx.rescue_expired_leases(now)?;
                if rescued > 0 {
                    tracing::warn!(
                        tasks = rescued,
                        "delivery pool: took back tasks whose lease expired"
                    );
                }
            }
            let walk = gate.walk(tx, now, free)?;
            let jobs = targets(tx, walk.claimed, &walk.caps, now)?;
            Ok::<_, StoreError>((jobs, walk.out_of_room, walk.wake_at))
        });
        let (claimed, out_of_room, wake_at) = match round {
            Ok(round) => {
                if let (true, Some(every)) = (rescue, rescue_every_ms) {
                    next_rescue_ms = now.saturating_add(every);
                }
                round
            }
            Err(e) => {
                tracing::error!(error = %e, "delivery pool: database round failed; retrying");
                // Nothing was claimed or recorded: the results wait for the next round, and
                // the gate starts over from what is really in flight.
                gate = fair::Gate::new(app.clock.clone(), app.config.default_endpoint_cap());
                lock(&shared.results).extend(done);
                app.delivery_wake.wait(ERROR_PAUSE);
                continue;
            }
        };
        shared.in_flight.fetch_sub(done.len(), Ordering::SeqCst);
        hand_out(shared, claimed);
        if out_of_room && free > 0 {
            continue; // more may be claimable now
        }
        let idle = shared.idle_cap.cap(longest_idle);
        let wait = match wake_at {
            _ if free == 0 => idle, // a worker's result wakes us
            Some(at) => {
                let ms = at.saturating_sub(app.clock.now_ms()).max(0);
                Duration::from_millis(u64::try_from(ms).unwrap_or(0)).min(idle)
            }
            None => idle,
        };
        app.delivery_wake.wait(wait);
    }
    drain_at_shutdown(shared);
}

/// Start-up: tasks left `running` by a crash are handed back, and pending tasks whose endpoint
/// no longer exists are canceled.
fn recover(app: &App, now_ms: i64) {
    let recovered = app.store.write(|tx| {
        Ok::<_, StoreError>((
            tx.requeue_running_tasks(now_ms)?,
            tx.cancel_orphan_tasks(now_ms)?,
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

/// Commits finished attempts: the attempt row, the task's new state, the endpoint's health
/// (one statement per endpoint, see [`health`]), a `410 Gone` or auto-disable disabling the
/// endpoint, and the operator events these cause. An attempt whose task is no longer `running`
/// is not recorded.
pub(crate) fn record(
    tx: &mut dyn Tx,
    done: &[Done],
    rules: &health::Rules,
) -> Result<(), StoreError> {
    let mut seen = health::Fold::default();
    for d in done {
        let status_code = d.sent.status.map(i64::from);
        let recorded = tx.finish_attempt(
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
        tx.insert_attempt(&store::attempts::Attempt {
            id: 0,
            task_id: d.task.id,
            attempt: d.task.attempt,
            started_at: d.sent.started_at,
            duration_ms: d.sent.duration_ms,
            status_code,
            error: d.verdict.error.clone(),
            response_body: d.sent.body.clone(),
        })?;
        seen.add(d.endpoint_id, d.sent.is_success(), d.at, d.quiet);
        if d.verdict.disable_endpoint
            && let Some(app_id) =
                tx.disable_endpoint_any(d.endpoint_id, DisabledReason::Gone, d.at)?
            && !d.quiet
        {
            let event = OperatorEvent::EndpointDisabled {
                endpoint_id: d.endpoint_id,
                reason: DisabledReason::Gone.as_str(),
                task_id: Some(d.task.id),
                consecutive_failures: None,
            };
            operator::publish(tx, &app_id, &event, d.at)?;
        }
        if d.verdict.after == store::tasks::AfterAttempt::Failed && !d.quiet {
            report_failed_task(tx, d, status_code)?;
        }
    }
    for (endpoint_id, endpoint) in seen.into_endpoints() {
        let disabled = tx.record_endpoint_health(
            endpoint_id,
            &endpoint.delta,
            health::MIN_FAILURES,
            rules.failing_after_ms,
            endpoint.delta.last_failure_at.unwrap_or_default(),
        )?;
        if let Some((_, streak)) = &disabled {
            tracing::warn!(
                endpoint_id,
                consecutive_failures = streak,
                reason = "failing: its deliveries kept failing for --disable-failing-after-hours",
                "endpoint disabled by webhookd"
            );
        }
        if let Some((app_id, streak)) = disabled
            && !endpoint.last_failure_quiet
        {
            let event = OperatorEvent::EndpointDisabled {
                endpoint_id,
                reason: DisabledReason::Failing.as_str(),
                task_id: None,
                consecutive_failures: Some(streak),
            };
            let at = endpoint.delta.last_failure_at.unwrap_or_default();
            operator::publish(tx, &app_id, &event, at)?;
        }
    }
    Ok(())
}

/// `webhookd.task.failed` for a task that just failed for good.
fn report_failed_task(
    tx: &mut dyn Tx,
    d: &Done,
    last_status_code: Option<i64>,
) -> Result<(), StoreError> {
    let Some(app_id) = tx.task_app(d.task.id)? else {
        return Ok(());
    };
    let event = OperatorEvent::TaskFailed {
        task_id: d.task.id,
        endpoint_id: d.endpoint_id,
        schedule_id: d.task.schedule_id,
        event_id: d.task.event_id,
        reason: if d.verdict.disable_endpoint {
            "gone"
        } else {
            "attempts_exhausted"
        },
        attempts: d.task.attempt,
        last_status_code,
        last_error: d.verdict.error.clone(),
    };
    operator::publish(tx, &app_id, &event, d.at)?;
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

/// Loads the endpoints and retry policies of claimed tasks, once each.
fn targets(
    tx: &mut dyn Tx,
    claimed: Vec<Claimed>,
    caps: &HashMap<i64, usize>,
    now_ms: i64,
) -> Result<Vec<Job>, StoreError> {
    let mut targets: HashMap<i64, Option<Arc<Target>>> = HashMap::new();
    let mut jobs = Vec::with_capacity(claimed.len());
    for task in claimed {
        let target = match targets.get(&task.endpoint_id) {
            Some(target) => target.clone(),
            None => {
                let target = match tx.get_endpoint_any(task.endpoint_id)? {
                    Some(ep) => {
                        let policy = tx.effective_policy(ep.retry_policy_id)?;
                        Some(Arc::new(Target::new(&ep, policy)))
                    }
                    None => None,
                };
                targets.insert(task.endpoint_id, target.clone());
                target
            }
        };
        match target {
            Some(target) => {
                let cap = caps.get(&task.endpoint_id).copied().unwrap_or(1);
                jobs.push(Job {
                    task,
                    claimed_at: now_ms,
                    target,
                    cap,
                });
            }
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

/// Shutdown: claimed tasks not yet sent go back to `pending` at once; sends in flight get the
/// grace to finish and their results are committed; what is still in flight after the grace is
/// handed back to `pending` as well.
fn drain_at_shutdown(shared: &Shared) {
    let app = &shared.app;
    let unsent = {
        let mut queue = lock(&shared.queue);
        queue.closed = true;
        std::mem::take(&mut queue.jobs)
    };
    shared.queue_ready.notify_all();
    shared.in_flight.fetch_sub(unsent.len(), Ordering::SeqCst);
    let deadline = Instant::now() + Duration::from_secs(app.config.shutdown_grace_secs);
    let rules = health::Rules::from_hours(app.config.disable_failing_after_hours);
    loop {
        let done = std::mem::take(&mut *lock(&shared.results));
        if !done.is_empty() {
            match app.store.write(|tx| record(tx, &done, &rules)) {
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
    if let Err(e) = app
        .store
        .write(|tx| tx.requeue_running_tasks(app.clock.now_ms()))
    {
        tracing::error!(error = %e, "delivery pool: cannot hand running tasks back; the next start will");
    }
}
