//! The delivery pool: turns due tasks into HTTP calls to their endpoints, at least once.
//!
//! One dispatcher thread owns the database side. Each round it commits, in one transaction (on
//! PostgreSQL, a round of successes: one statement each, `Store::write_redoable_statements`),
//! the results the workers reported since the last round (attempt rows and task state changes)
//! and claims the next due tasks fairly, endpoint by endpoint within each endpoint's limits and
//! each app's share (see [`fair`]), loading each claimed endpoint once per batch. Sender threads
//! send the claimed tasks with one shared keep-alive HTTP agent and hand the results back.
//!
//! Senders are cheap and made on demand: every send under way has a thread of its own with a
//! small stack ([`SENDER_STACK`]), started when a claimed task can be sent and no sender is
//! idle, up to `--max-in-flight`; `--workers` of them stay when idle, the others exit after
//! [`SENDER_IDLE`]. A receiver that never answers therefore holds one socket and one mostly
//! untouched stack until its `timeout_ms`, never a share of a fixed pool that others need.
//! Claimed tasks wait in one lane per endpoint, sent while the endpoint has fewer sends under
//! way than its cap, lanes taking turns. The dispatcher sleeps on [`App::delivery_wake`] until
//! the earliest skipped endpoint may start again (at most `max_idle`); the API, the scheduler
//! and the senders wake it.
//!
//! Durability: a claimed task is `running` in the database until its result is committed. A
//! crash leaves it `running`; the next start hands it back to `pending` before claiming, so its
//! attempt is made again (at least once, never lost). The rounds' commits do not wait for the
//! disk (`Store::write_redoable`): a crash of the machine may undo the last claims and results,
//! which leaves their tasks `pending` to be sent again, never a task lost (what put the task
//! there, a publish or a firing, was itself on disk before it was answered). A round whose
//! results may publish an operator event waits for the disk ([`Done::may_publish`]). Shutdown stops
//! claiming, hands unsent claims back, and gives in-flight sends `shutdown_grace_secs` to
//! finish.

pub mod fair;
pub mod health;
mod held;
mod interrupted;
pub mod probe;
mod retention;
pub mod send;
pub mod target;

use crate::app::App;
use crate::metrics::DeliveryOutcome;
use crate::operator::{self, OperatorEvent};
use crate::store::endpoints::{DisabledReason, HealthDelta};
use crate::store::tasks::{Claimed, IfBusy};
use crate::store::{self, IdleCap, KeepingUp, Peers, StoreError, Tx, Watcher};
use send::{Sent, Target, Verdict};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Most tasks claimed in one statement.
const MAX_BATCH: usize = 256;
/// Shortest time between two dispatcher rounds: results arriving meanwhile are committed
/// together instead of one transaction each. On a database other nodes share, times one plus
/// the nodes heard from lately ([`round_gap`]).
const MIN_ROUND: Duration = Duration::from_millis(2);
/// Most other nodes [`round_gap`] counts: rounds are never spaced more than this many times
/// [`MIN_ROUND`] apart, whatever the nodes.
const MOST_PEERS_PACED: u32 = 4;
/// A round is behind when a task it claimed had been due longer than this (or it had no room
/// for all that is due): then the other nodes sharing the database are woken for the work this
/// node makes due ([`KeepingUp`]); while its rounds claim sooner, its own pool delivers it
/// alone. Several round gaps (a task waits up to one for its round), well under the 50 ms the
/// half-rate tail may take.
const BEHIND_AFTER_MS: i64 = 25;
/// Pause after a database error before the dispatcher tries again.
const ERROR_PAUSE: Duration = Duration::from_millis(500);

/// Stack reserved for one sender thread. A send (ureq, rustls) touches a few tens of KiB;
/// only touched pages cost memory, the rest is address space.
const SENDER_STACK: usize = 512 * 1024;
/// A sender beyond the `--workers` kept ready exits after this long without a task.
const SENDER_IDLE: Duration = Duration::from_secs(10);

/// A claimed task that waited longer than this for a sender has its lease renewed before it is
/// sent (`Tx::renew_leases`). A lease is the endpoint's timeout plus 30 s, so a task sent within
/// this long of its claim still holds 20 s more than its send can take.
const RENEW_AFTER_MS: i64 = 10_000;

/// A claimed task and where it goes.
struct Job {
    task: Claimed,
    /// Epoch ms of the claim (the lease started then).
    claimed_at: i64,
    target: Arc<Target>,
    /// Most sends to this endpoint at once: its lane waits while that many are under way.
    cap: usize,
    /// A test delivery (`POST /endpoints/{id}/test`): its result goes back to the waiting
    /// request, which records it, instead of into the batch.
    reply: Option<std::sync::mpsc::Sender<Done>>,
}

/// A finished attempt waiting to be committed.
pub(crate) struct Done {
    pub task: Claimed,
    /// The trace the attempt was sent in (its `traceparent`), for the log lines about it.
    pub trace_id: [u8; 16],
    pub endpoint_id: i64,
    pub sent: Sent,
    pub verdict: Verdict,
    /// Epoch ms when the verdict was reached.
    pub at: i64,
    /// No operator event may come of this attempt: it delivered an operator event itself (no
    /// storm), or it is a test delivery whose caller sees the result.
    pub quiet: bool,
}

impl Done {
    /// Recording it may publish an operator event (`webhookd.task.failed`,
    /// `webhookd.endpoint.disabled`): only a failed attempt that is not quiet can.
    fn may_publish(&self) -> bool {
        self.verdict.after != store::tasks::AfterAttempt::Success && !self.quiet
    }

    /// A success: recording it changes its task, its attempt row and its endpoint's health,
    /// nothing else (no endpoint disabled, no streak to look at).
    fn is_success(&self) -> bool {
        self.verdict.after == store::tasks::AfterAttempt::Success && self.sent.is_success()
    }
}

/// The claimed tasks of one endpoint, and its sends under way.
#[derive(Default)]
struct Lane {
    jobs: VecDeque<Job>,
    sending: usize,
    cap: usize,
    /// It is in `JobQueue::ready`.
    ready: bool,
}

impl Lane {
    /// How many of its jobs may be sent now.
    fn sendable(&self) -> usize {
        self.jobs.len().min(self.cap.saturating_sub(self.sending))
    }
}

/// Claimed tasks waiting for a sender, and the senders.
#[derive(Default)]
struct JobQueue {
    lanes: HashMap<i64, Lane>,
    /// Endpoints with a job that may be sent now, each once, taking turns.
    ready: VecDeque<i64>,
    /// Jobs that may be sent now, over all lanes.
    sendable: usize,
    /// Senders alive, and those waiting for a job.
    senders: usize,
    idle: usize,
    /// Senders woken or started for a job that have not looked at the queue yet.
    coming: usize,
    /// Claimed tasks not yet given to a sender.
    queued: usize,
    /// Set at shutdown: senders exit once the queue is empty.
    closed: bool,
}

impl JobQueue {
    /// Changes one lane and keeps `sendable`, `ready` and `queued` true to it.
    fn with_lane(&mut self, endpoint_id: i64, change: impl FnOnce(&mut Lane)) {
        let lane = self.lanes.entry(endpoint_id).or_default();
        let (before, jobs_before) = (lane.sendable(), lane.jobs.len());
        change(lane);
        let (after, jobs_after) = (lane.sendable(), lane.jobs.len());
        let enqueue = after > 0 && !lane.ready;
        if enqueue {
            lane.ready = true;
        }
        let unused = lane.jobs.is_empty() && lane.sending == 0 && !lane.ready;
        self.queued = self.queued + jobs_after - jobs_before;
        self.sendable = self.sendable + after - before;
        if enqueue {
            self.ready.push_back(endpoint_id);
        }
        if unused {
            self.lanes.remove(&endpoint_id);
        }
    }

    /// Wakes idle senders, or starts new ones (up to `max`), for the jobs that may be sent
    /// now and that no sender is on its way to yet. Returns how many to start.
    fn senders_wanted(&mut self, max: usize, cond: &Condvar) -> usize {
        let mut wanted = self.sendable.saturating_sub(self.coming);
        let wake = wanted.min(self.idle.saturating_sub(self.coming));
        for _ in 0..wake {
            cond.notify_one();
        }
        self.coming += wake;
        wanted -= wake;
        let start = wanted.min(max.saturating_sub(self.senders));
        self.senders += start;
        self.coming += start;
        start
    }

    fn push(&mut self, job: Job) {
        let (endpoint_id, cap) = (job.target.endpoint_id, job.cap);
        let test = job.reply.is_some();
        self.with_lane(endpoint_id, |lane| {
            lane.cap = cap;
            // A test delivery goes first in its lane: its caller waits for it.
            if test {
                lane.jobs.push_front(job);
            } else {
                lane.jobs.push_back(job);
            }
        });
    }

    /// The next job that may be sent, lanes taking turns; counted as a send under way.
    fn take(&mut self) -> Option<Job> {
        while let Some(endpoint_id) = self.ready.pop_front() {
            let mut taken = None;
            self.with_lane(endpoint_id, |lane| {
                lane.ready = false;
                if lane.sendable() > 0 {
                    taken = lane.jobs.pop_front();
                    lane.sending += 1;
                }
            });
            if taken.is_some() {
                return taken;
            }
        }
        None
    }

    /// A send to `endpoint_id` ended.
    fn sent(&mut self, endpoint_id: i64) {
        if self.lanes.contains_key(&endpoint_id) {
            self.with_lane(endpoint_id, |lane| {
                lane.sending = lane.sending.saturating_sub(1)
            });
        }
    }

    /// Every job not yet sent, taken out (shutdown).
    fn drain(&mut self) -> Vec<Job> {
        let mut jobs = Vec::new();
        for lane in self.lanes.values_mut() {
            jobs.extend(lane.jobs.drain(..));
            lane.ready = false;
        }
        self.lanes.retain(|_, lane| lane.sending > 0);
        self.ready.clear();
        self.sendable = 0;
        self.queued = 0;
        jobs
    }
}

/// What the dispatcher and the workers share.
struct Shared {
    app: Arc<App>,
    agent: ureq::Agent,
    queue: Mutex<JobQueue>,
    queue_ready: Condvar,
    /// Signalled when the last sender exits.
    senders_gone: Condvar,
    results: Mutex<Vec<Done>>,
    /// Endpoints of jobs that ended without a result for the batch (dropped unsent because
    /// their lease was lost, see `still_ours`, or test deliveries answered to their caller):
    /// the dispatcher releases their place in the fair gate as it does for results.
    dropped: Mutex<Vec<i64>>,
    /// Claimed tasks whose result is not committed yet: queued, being sent, or reported.
    in_flight: AtomicUsize,
    /// The sends under way, recorded as interrupted if the shutdown grace ends first.
    sending: interrupted::InFlight,
    stopping: AtomicBool,
    /// Caps the dispatcher's idle sleep while other nodes' new tasks might go unnoticed
    /// (`Store::watch`).
    idle_cap: IdleCap,
    /// How often to take back tasks whose lease expired (`Watcher::rescue_every`); `None`:
    /// no other process holds leases.
    rescue_every: Option<Duration>,
    /// The other nodes on the database heard from lately (`Watcher::peers`): [`round_gap`].
    peers: Peers,
    /// Told whether the rounds keep up (`Watcher::keeping_up`): [`keeps_up`].
    keeping_up: KeepingUp,
    /// Senders kept when idle (`--workers`) and most senders at once (`--max-in-flight`).
    keep_senders: usize,
    max_senders: usize,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The running delivery pool.
pub struct DeliveryPool {
    shared: Arc<Shared>,
    dispatcher: Option<JoinHandle<()>>,
    retention: retention::Retention,
}

impl DeliveryPool {
    /// `watcher` says how other processes sharing the database are noticed (`Store::watch`).
    pub fn start(app: Arc<App>, watcher: &Watcher) -> Self {
        let shared = Arc::new(Shared {
            idle_cap: watcher.idle_cap.clone(),
            rescue_every: watcher.rescue_every,
            peers: watcher.peers.clone(),
            keeping_up: watcher.keeping_up.clone(),
            agent: send::agent(&app.config),
            app: app.clone(),
            queue: Mutex::default(),
            queue_ready: Condvar::new(),
            senders_gone: Condvar::new(),
            keep_senders: app.config.workers,
            max_senders: app.config.max_in_flight,
            results: Mutex::default(),
            dropped: Mutex::default(),
            in_flight: AtomicUsize::new(0),
            sending: interrupted::InFlight::default(),
            stopping: AtomicBool::new(false),
        });
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
        // Senders still blocked in a send past the grace are left to finish on their own; their
        // results are no longer recorded (the attempt was recorded as interrupted and the task
        // is pending again). Idle ones exit now.
        if self.shared.in_flight.load(Ordering::SeqCst) == 0 {
            let queue = lock(&self.shared.queue);
            let _ =
                self.shared
                    .senders_gone
                    .wait_timeout_while(queue, Duration::from_secs(5), |q| q.senders > 0);
        }
    }
}

/// A sender: takes claimed tasks off the queue, sends them, reports the results; exits when
/// idle for [`SENDER_IDLE`] while more than `--workers` senders are alive, or at shutdown.
fn work(shared: &Arc<Shared>) {
    let app = &shared.app;
    // Started for a job: on its way to the queue until it first looks.
    let mut arriving = true;
    while let Some(job) = next_job(shared, std::mem::take(&mut arriving)) {
        let endpoint_id = job.target.endpoint_id;
        if job.reply.is_none() && !still_ours(app, &job) {
            sent_one(shared, endpoint_id);
            lock(&shared.dropped).push(endpoint_id);
            shared.in_flight.fetch_sub(1, Ordering::SeqCst);
            app.delivery_wake.notify();
            continue;
        }
        let quiet = job.reply.is_some()
            || job
                .task
                .event_name
                .as_deref()
                .is_some_and(operator::is_operator_event);
        // Test deliveries too: their tasks are `running` like any claimed task.
        let task_id = job.task.id;
        shared
            .sending
            .begin(&job.task, &job.target, app.clock.now_ms());
        let done = attempt(app, &shared.agent, &job.target, job.task, quiet);
        sent_one(shared, endpoint_id);
        match job.reply {
            Some(reply) => match reply.send(done) {
                // The caller records a test delivery itself.
                Ok(()) => {
                    lock(&shared.dropped).push(endpoint_id);
                    shared.in_flight.fetch_sub(1, Ordering::SeqCst);
                }
                // Its caller is gone: recorded with the batch.
                Err(unanswered) => lock(&shared.results).push(unanswered.0),
            },
            None => lock(&shared.results).push(done),
        }
        shared.sending.end(task_id);
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
    match app
        .store
        .write_redoable(|tx| tx.renew_leases(&[job.task.id], now))
    {
        Ok(held) => held.contains(&job.task.id),
        Err(e) => {
            tracing::warn!(
                error = %e,
                task_id = job.task.id,
                trace_id = %job.task.trace_id_hex(),
                "cannot renew a task's lease; not sending it"
            );
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
    // Each attempt is a new span of the task's trace; a task made before traces starts one.
    let span = task
        .trace
        .map_or_else(crate::trace::SpanContext::new_root, |t| t.attempt());
    let started_at = app.clock.now_ms();
    if task.attempt == 1 {
        app.spans.queue_wait(&task, started_at);
        app.metrics.record_queue_wait(started_at - task.due_at);
    }
    let clock = std::time::Instant::now();
    let sent = send::send(agent, target, &task, started_at, &span.header());
    app.spans.attempt(crate::spans::AttemptSpan {
        task: &task,
        span,
        start_ms: started_at,
        took: clock.elapsed(),
        status: sent.status,
        error: sent.error.as_deref(),
    });
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
    app.metrics.record_verdict(&sent, &verdict);
    Done {
        quiet,
        trace_id: span.trace_id,
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
            tracing::warn!(error = %e, task_id = task.id, trace_id = %task.trace_id_hex(), "cannot read when the task's first attempt began; max_age_sec not applied to this attempt");
            started_at
        }
    }
}

/// The next job a sender may send (lanes taking turns), waiting for one; `None` when the
/// sender is to exit (idle too long beyond `--workers`, or shutdown).
fn next_job(shared: &Shared, mut arriving: bool) -> Option<Job> {
    let mut queue = lock(&shared.queue);
    loop {
        if arriving {
            // Woken or just started for a job: no longer on its way.
            queue.coming = queue.coming.saturating_sub(1);
            arriving = false;
        }
        if let Some(job) = queue.take() {
            return Some(job);
        }
        let exit = queue.closed && queue.queued == 0;
        if !exit {
            queue.idle += 1;
            let (woken, waited) = shared
                .queue_ready
                .wait_timeout(queue, SENDER_IDLE)
                .unwrap_or_else(|e| e.into_inner());
            queue = woken;
            queue.idle -= 1;
            arriving = true;
            let spare = queue.senders > shared.keep_senders;
            if !(waited.timed_out() && spare && queue.sendable == 0) {
                continue;
            }
        }
        queue.coming = queue.coming.saturating_sub(usize::from(arriving));
        queue.senders -= 1;
        if queue.senders == 0 {
            shared.senders_gone.notify_all();
        }
        return None;
    }
}

/// Starts sender threads for jobs no sender is on its way to. Called with the queue locked.
fn start_senders(shared: &Arc<Shared>, queue: &mut JobQueue) {
    let start = queue.senders_wanted(shared.max_senders, &shared.queue_ready);
    for _ in 0..start {
        let sender = shared.clone();
        let spawned = std::thread::Builder::new()
            .name("delivery-send".into())
            .stack_size(SENDER_STACK)
            .spawn(move || work(&sender));
        if let Err(e) = spawned {
            // Out of threads: the senders already running take the jobs in turn.
            tracing::error!(error = %e, "delivery pool: cannot start a sender thread");
            queue.senders -= 1;
            queue.coming = queue.coming.saturating_sub(1);
        }
    }
}

/// A send to `endpoint_id` ended: a job of that endpoint held back for its cap may go now. An
/// idle sender is woken for it although the one reporting this goes back to the queue next:
/// the woken one sends while this one records the result. (Leaving the job to this one saves
/// the wake but measured the same at fan-out 1: BENCHMARKS.md, issue 19.)
fn sent_one(shared: &Arc<Shared>, endpoint_id: i64) {
    let mut queue = lock(&shared.queue);
    queue.sent(endpoint_id);
    start_senders(shared, &mut queue);
}

/// The dispatcher thread: recovery at start, then rounds of commit-and-claim until shutdown.
fn dispatch(shared: &Arc<Shared>) {
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
    // Only now: a test delivery's task started before the recovery would be handed back by it.
    app.probes.open();
    let capacity = app.config.max_in_flight.max(2);
    let rules = health::Rules::from_hours(app.config.disable_failing_after_hours);
    let new_gate = || {
        fair::Gate::new(
            app.clock.clone(),
            app.config.default_endpoint_cap(),
            app.config.app_share(),
        )
    };
    let mut gate = new_gate();
    let mut held = held::Held::default();
    let mut last_round: Option<Instant> = None;
    let mut next_rescue_ms = i64::MIN;
    // Health the last round could not write (another node was writing the endpoint).
    let mut carried = health::Carried::default();
    // What the store was last told of the pace (`None`: nothing yet, it wakes the other nodes).
    let mut told_keeping_up: Option<bool> = None;
    let mut tell = |keeping_up: bool| {
        if told_keeping_up != Some(keeping_up) {
            told_keeping_up = Some(keeping_up);
            shared.keeping_up.set(keeping_up);
        }
    };
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
        let gap = round_gap(shared.peers.count());
        if let Some(since) = last_round.map(|t| t.elapsed())
            && since < gap
        {
            std::thread::sleep(gap - since);
        }
        last_round = Some(Instant::now());
        let done = std::mem::take(&mut *lock(&shared.results));
        let unsettled = shared
            .in_flight
            .load(Ordering::SeqCst)
            .saturating_sub(done.len());
        let mut free = capacity.saturating_sub(unsettled).min(MAX_BATCH);
        let now = app.clock.now_ms();
        // The gate's accounting is changed inside the transaction; a failed round rebuilds it
        // from the results put back, so release before and re-count after a failure.
        for d in &done {
            gate.release(d.endpoint_id, now);
        }
        for endpoint_id in std::mem::take(&mut *lock(&shared.dropped)) {
            gate.release(endpoint_id, now);
        }
        let tests = admit_tests(app, &mut gate, now, &mut free);
        hand_out(shared, tests);
        let rescue = rescue_every_ms.is_some() && now >= next_rescue_ms;
        // This node's sends under way, then the results they handed over since `done` was
        // taken (a send is in one or the other): the rescue must not take them back.
        let sending = if rescue {
            let mut ids = shared.sending.task_ids();
            ids.extend(lock(&shared.results).iter().map(|d| d.task.id));
            ids
        } else {
            Vec::new()
        };
        let carrying = std::mem::take(&mut carried);
        let round = |tx: &mut dyn Tx| {
            let deferred = record(tx, &done, &carrying, &rules, IfBusy::Defer)?;
            if rescue {
                // A send under way keeps its lease: it ran out only if the clock stepped forward
                // (a VM resumed, an NTP correction), and taking it back would send it twice. A
                // claimed task still waiting here for a sender is left to lose its lease, so
                // that another node delivers it while this one's senders are busy.
                if !sending.is_empty() {
                    tx.renew_leases(&sending, now)?;
                }
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
            let jobs = targets(tx, &mut held, walk.claimed, &walk.caps, now)?;
            Ok::<_, StoreError>((jobs, walk.out_of_room, walk.wake_at, deferred))
        };
        // Redoable: a claim or result a crash loses only sends its task again. Not a round
        // that may publish an operator event: the event's id and its tasks' ids go out to
        // receivers (the payload, `webhook-id`), and a crash must not hand them out again.
        // A round of successes (the usual one) needs no transaction either: its results are
        // one statement (a second, for the health of the others, when some were not
        // recorded), which records each result at most once however often it is retried, and
        // its rescue, walk and claim are each atomic alone, so where the store can (PostgreSQL)
        // each statement commits on its own. A failure may then come after the results
        // committed: they are put back as after any failure, and their retry records none of
        // them again (their tasks are no longer running under this node's claim of that
        // attempt). A claim that committed before a failure (its answer lost, or a later read)
        // leaves its tasks running here, unsent: their lease runs out and the rescue hands
        // them back, as a dead node's. Health carried from the last round counts as this
        // round's: a carried failure may disable its endpoint (and publish), and a round
        // without a transaction writes only changes that hold no failure (below).
        let statements = done.iter().all(Done::is_success) && !carrying.has_failures();
        let round = if done.iter().any(Done::may_publish) || carrying.may_publish() {
            app.store.write(round)
        } else if statements {
            app.store.write_redoable_statements(round)
        } else {
            app.store.write_redoable(round)
        };
        let (claimed, out_of_room, wake_at) = match round {
            Ok((claimed, out_of_room, wake_at, deferred)) => {
                if let (true, Some(every)) = (rescue, rescue_every_ms) {
                    next_rescue_ms = now.saturating_add(every);
                }
                carried = deferred;
                (claimed, out_of_room, wake_at)
            }
            Err(e) => {
                tracing::error!(error = %e, "delivery pool: database round failed; retrying");
                // The results wait for the next round (in a transaction nothing was recorded;
                // without one, those recorded already are not recorded again, see above), and
                // the gate starts over from what is really in flight.
                // The health: a round in a transaction wrote none of it, so what was carried
                // stays carried. A round without one may have written its changes, or some of
                // them, before it failed; each holds no failure (a success, or nothing but
                // times), and writing such a change twice leaves what writing it once does,
                // so they are all carried, and written (again) with the next round.
                carried = if statements {
                    carrying.then_round(&fold(&done))
                } else {
                    carrying
                };
                tell(false);
                gate = new_gate();
                lock(&shared.results).extend(done);
                app.delivery_wake.wait(ERROR_PAUSE);
                continue;
            }
        };
        shared.in_flight.fetch_sub(done.len(), Ordering::SeqCst);
        tell(keeps_up(&claimed, out_of_room, now));
        hand_out(shared, claimed);
        if out_of_room && free > 0 {
            continue; // more may be claimable now
        }
        let idle = shared.idle_cap.cap(longest_idle);
        let wait = match wake_at {
            _ if free == 0 => idle, // a sender's result wakes us
            Some(at) => {
                let ms = at.saturating_sub(app.clock.now_ms()).max(0);
                Duration::from_millis(u64::try_from(ms).unwrap_or(0)).min(idle)
            }
            None => idle,
        };
        // Carried health is written by the next round, which comes within a round gap.
        let wait = match carried.is_empty() {
            true => wait,
            false => wait.min(gap),
        };
        app.delivery_wake.wait(wait);
    }
    // Stopping: what is made due from now on (tasks handed back) is for the other nodes.
    tell(false);
    drain_at_shutdown(shared, carried);
}

/// Whether a round kept up with the work due: it had room for all of it, and claimed each task
/// within [`BEHIND_AFTER_MS`] of its becoming due.
fn keeps_up(claimed: &[Job], out_of_room: bool, now_ms: i64) -> bool {
    !out_of_room
        && claimed
            .iter()
            .all(|job| now_ms.saturating_sub(job.task.due_at) <= BEHIND_AFTER_MS)
}

/// The shortest time between two of this node's rounds when `peers` other nodes share its
/// database: [`MIN_ROUND`] times the nodes (up to [`MOST_PEERS_PACED`] others), so that the
/// nodes together claim about as often as one alone. Each node's rounds then gather as many
/// results and due tasks as one node's would (three nodes pacing at `MIN_ROUND` each made
/// 2.2 times the rounds per delivery of one: smaller claims, more results statements taking
/// turns on the same endpoint rows, BENCHMARKS.md "Three nodes on one PostgreSQL"). A round
/// waits for the gap only when the last one was that recent: at low rates it is woken at once.
fn round_gap(peers: usize) -> Duration {
    let peers = u32::try_from(peers)
        .unwrap_or(u32::MAX)
        .min(MOST_PEERS_PACED);
    MIN_ROUND * (1 + peers)
}

/// Test deliveries the gate has room for now become jobs (sent first in their endpoint's
/// lane); the others wait for a later round, which a result or a new test wakes.
fn admit_tests(app: &App, gate: &mut fair::Gate, now_ms: i64, free: &mut usize) -> Vec<Job> {
    let mut jobs = Vec::new();
    let mut later = Vec::new();
    for waiting in app.probes.take_waiting() {
        let endpoint_id = waiting.task.endpoint_id;
        let admitted = match *free {
            0 => None,
            _ => gate.admit(endpoint_id, &waiting.app_id, waiting.max_in_flight, now_ms),
        };
        match admitted {
            Some(cap) => {
                *free -= 1;
                jobs.push(Job {
                    task: waiting.task,
                    claimed_at: now_ms,
                    target: waiting.target,
                    cap,
                    reply: Some(waiting.reply),
                });
            }
            None => later.push(waiting),
        }
    }
    app.probes.put_back(later);
    jobs
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

/// Commits finished attempts: the task's new state, the attempt row and the endpoints' health
/// (one call for the round, `record_attempts`; when a result is not recorded, the health of
/// the recorded ones alone in a call of its own, see [`health`]), a `410 Gone` or auto-disable
/// disabling the endpoint, and the operator events these cause. An attempt whose task is no
/// longer `running` is not recorded.
///
/// `carried`: health an earlier round of this dispatcher left unwritten ([`health::Carried`]),
/// folded before this round's change for each endpoint this round has results for, and written
/// on its own first (waiting for the endpoints) for the others. With [`IfBusy::Defer`] (the
/// dispatcher's rounds) the round's change for an endpoint another writer is writing at that
/// moment is passed over and returned, to be carried to the next round; its auto-disable test
/// waits until it is written. With [`IfBusy::Wait`] nothing is returned.
pub(crate) fn record(
    tx: &mut dyn Tx,
    done: &[Done],
    carried: &health::Carried,
    rules: &health::Rules,
    if_busy: IfBusy,
) -> Result<health::Carried, StoreError> {
    let mut seen = health::Fold::default();
    let results: Vec<_> = done
        .iter()
        .map(|d| store::tasks::Finish {
            task_id: d.task.id,
            attempt: d.task.attempt,
            after: d.verdict.after,
            last_status_code: d.sent.status.map(i64::from),
            last_error: d.verdict.error.as_deref(),
            now_ms: d.at,
        })
        .collect();
    let attempts: Vec<_> = done
        .iter()
        .map(|d| store::attempts::Attempt {
            id: 0,
            task_id: d.task.id,
            attempt: d.task.attempt,
            started_at: d.sent.started_at,
            duration_ms: d.sent.duration_ms,
            status_code: d.sent.status.map(i64::from),
            error: d.verdict.error.clone(),
            response_body: d.sent.body.clone(),
            request_headers: d.sent.request_headers.clone(),
        })
        .collect();
    // The health of every result, after what was carried for its endpoint, written with them
    // when every one is recorded (the usual round); else the health of those recorded, below.
    let all: BTreeMap<i64, health::Seen> = fold(done).into_endpoints().collect();
    // What was carried for endpoints without a result now is written first, on its own,
    // before any row the round locks; an endpoint another writer still holds is passed over
    // again (with `IfBusy::Defer`) and stays carried, so the dispatcher never waits for it.
    let mut deferred = health::Carried::default();
    let mut written: Vec<(i64, health::Seen)> = carried
        .iter()
        .filter(|(id, _)| !all.contains_key(id))
        .collect();
    write_health(tx, &mut written, if_busy, &mut deferred)?;
    let mut round: Vec<(i64, health::Seen)> = all
        .iter()
        .map(|(&id, &seen)| (id, carried.before(id, seen)))
        .collect();
    let outcome = tx.record_attempts(&results, &attempts, &deltas_of(&round), if_busy)?;
    for (d, recorded) in done.iter().zip(outcome.recorded) {
        let status_code = d.sent.status.map(i64::from);
        if !recorded {
            continue;
        }
        log_outcome(d);
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
    if outcome.health_written {
        set_aside(&mut round, &outcome.deferred, &mut deferred);
        written.extend(round);
    } else {
        // The recorded ones' health, after what was carried for their endpoints (and what was
        // carried for an endpoint none of whose results was recorded, alone).
        let seen: BTreeMap<i64, health::Seen> = seen.into_endpoints().collect();
        let mut late: Vec<(i64, health::Seen)> = all
            .keys()
            .filter(|&&id| carried.get(id).is_some() || seen.contains_key(&id))
            .map(|&id| {
                let now = seen.get(&id).copied().unwrap_or_default();
                (id, carried.before(id, now))
            })
            .collect();
        write_health(tx, &mut late, if_busy, &mut deferred)?;
        written.extend(late);
    }
    written.sort_by_key(|(id, _)| *id);
    disable_failing(tx, &written, rules)?;
    Ok(deferred)
}

/// One change per endpoint for the results of `done`, in order.
fn fold(done: &[Done]) -> health::Fold {
    let mut fold = health::Fold::default();
    for d in done {
        fold.add(d.endpoint_id, d.sent.is_success(), d.at, d.quiet);
    }
    fold
}

/// Writes these endpoints' changes (in id order). An endpoint another writer holds is waited
/// for ([`IfBusy::Wait`]) or passed over ([`IfBusy::Defer`]): its change moves from `changes`
/// to `deferred`, to be carried to the next round.
fn write_health(
    tx: &mut dyn Tx,
    changes: &mut Vec<(i64, health::Seen)>,
    if_busy: IfBusy,
    deferred: &mut health::Carried,
) -> Result<(), StoreError> {
    if changes.is_empty() {
        return Ok(());
    }
    let passed_over = tx.record_endpoints_health(&deltas_of(changes), if_busy)?;
    set_aside(changes, &passed_over, deferred);
    Ok(())
}

/// Moves the changes of the endpoints a write passed over (`passed_over`, ascending) from
/// `changes` to `deferred`, to be carried to the next round.
fn set_aside(
    changes: &mut Vec<(i64, health::Seen)>,
    passed_over: &[i64],
    deferred: &mut health::Carried,
) {
    changes.retain(|&(id, seen)| {
        let busy = passed_over.binary_search(&id).is_ok();
        if busy {
            deferred.keep(id, seen);
        }
        !busy
    });
}

/// The stored part of each endpoint's change (what the store writes), in the same order.
fn deltas_of(changes: &[(i64, health::Seen)]) -> Vec<(i64, HealthDelta)> {
    changes.iter().map(|(id, s)| (*id, s.delta)).collect()
}

/// The auto-disable test of each endpoint whose written change holds a failure (by id), and
/// the operator event of each it disables (unless its last failure was quiet).
fn disable_failing(
    tx: &mut dyn Tx,
    written: &[(i64, health::Seen)],
    rules: &health::Rules,
) -> Result<(), StoreError> {
    let Some(after_ms) = rules.failing_after_ms else {
        return Ok(());
    };
    for (endpoint_id, endpoint) in written.iter().filter(|(_, e)| e.delta.failures > 0) {
        let endpoint_id = *endpoint_id;
        let at = endpoint.delta.last_failure_at.unwrap_or_default();
        let Some((app_id, streak)) =
            tx.disable_failing_endpoint(endpoint_id, health::MIN_FAILURES, after_ms, at)?
        else {
            continue;
        };
        tracing::warn!(
            endpoint_id,
            consecutive_failures = streak,
            reason = "failing: its deliveries kept failing for --disable-failing-after-hours",
            "endpoint disabled by webhookd"
        );
        if !endpoint.last_failure_quiet {
            let event = OperatorEvent::EndpointDisabled {
                endpoint_id,
                reason: DisabledReason::Failing.as_str(),
                task_id: None,
                consecutive_failures: Some(streak),
            };
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

/// One WARN line per failed attempt (docs/design.md §10), and one when a `410 Gone` disables the
/// endpoint; a DEBUG line per successful one. Ids (the trace's too), the attempt number, the
/// status code or error and what happens next: never the payload, a header, a secret or a
/// signature.
fn log_outcome(d: &Done) {
    use crate::store::tasks::AfterAttempt;
    if d.verdict.after == AfterAttempt::Success {
        tracing::debug!(task_id = d.task.id, trace_id = %hex::encode(d.trace_id), endpoint_id = d.endpoint_id, attempt = d.task.attempt, status_code = d.sent.status, "delivery attempt succeeded");
        return;
    }
    // A time field holds a time or is left out; what happens next is said in `outcome`.
    let (next, outcome) = match d.verdict.after {
        AfterAttempt::RetryAt(at) => (Some(crate::clock::rfc3339(at)), "will retry"),
        _ => (None, "failed for good"),
    };
    let next = next.as_deref();
    let error = d.verdict.error.as_deref().unwrap_or("");
    let trace_id = hex::encode(d.trace_id);
    match d.sent.status {
        Some(status_code) => tracing::warn!(
            task_id = d.task.id,
            trace_id = %trace_id,
            endpoint_id = d.endpoint_id,
            attempt = d.task.attempt,
            status_code,
            error,
            next_attempt_at = next,
            outcome,
            "delivery attempt failed"
        ),
        None => tracing::warn!(
            task_id = d.task.id,
            trace_id = %trace_id,
            endpoint_id = d.endpoint_id,
            attempt = d.task.attempt,
            error,
            next_attempt_at = next,
            outcome,
            "delivery attempt failed"
        ),
    }
    if d.verdict.disable_endpoint {
        tracing::warn!(
            endpoint_id = d.endpoint_id,
            task_id = d.task.id,
            trace_id = %trace_id,
            reason = "gone: the endpoint answered HTTP 410 Gone",
            "endpoint disabled by webhookd"
        );
    }
}

/// `get_endpoints_any(ids)`, less the endpoints whose row cannot be read (a damaged stored
/// value): those are read one by one, logged and left out, so that one damaged row stops its own
/// deliveries, not the round's. Their claimed tasks stay `running` until their lease runs out
/// (PostgreSQL) or the next start, like a task whose endpoint went between claim and read.
fn readable_endpoints(
    tx: &mut dyn Tx,
    ids: &[i64],
) -> Result<Vec<crate::store::endpoints::Endpoint>, StoreError> {
    match tx.get_endpoints_any(ids) {
        Err(e) if e.is_unreadable_value() => {
            let mut found = Vec::with_capacity(ids.len());
            for &id in ids {
                match tx.get_endpoint_any(id) {
                    Ok(endpoint) => found.extend(endpoint),
                    Err(e) if e.is_unreadable_value() => fair::unreadable_endpoint(id, &e),
                    Err(e) => return Err(e),
                }
            }
            Ok(found)
        }
        read => read,
    }
}

/// The endpoints and retry policies of claimed tasks: those held at the generation their claim
/// saw ([`held`]), the others loaded (together: `get_endpoints_any`) once each and held.
fn targets(
    tx: &mut dyn Tx,
    held: &mut held::Held,
    claimed: Vec<Claimed>,
    caps: &HashMap<i64, usize>,
    now_ms: i64,
) -> Result<Vec<Job>, StoreError> {
    let mut targets: HashMap<i64, Arc<Target>> = HashMap::new();
    let mut generations: HashMap<i64, Option<i64>> = HashMap::new();
    for task in &claimed {
        if targets.contains_key(&task.endpoint_id) {
            continue;
        }
        match held.get(task, now_ms) {
            Some(target) => {
                targets.insert(task.endpoint_id, target);
            }
            None => {
                generations.insert(task.endpoint_id, task.target_generation);
            }
        }
    }
    let mut ids: Vec<i64> = generations.keys().copied().collect();
    ids.sort_unstable();
    if !ids.is_empty() {
        for ep in readable_endpoints(tx, &ids)? {
            let policy = tx.effective_policy(ep.retry_policy_id)?;
            let target = Arc::new(Target::new(&ep, policy));
            held.keep(generations.get(&ep.id).copied().flatten(), &target, now_ms);
            targets.insert(ep.id, target);
        }
    }
    let mut jobs = Vec::with_capacity(claimed.len());
    for task in claimed {
        match targets.get(&task.endpoint_id).cloned() {
            Some(target) => {
                let cap = caps.get(&task.endpoint_id).copied().unwrap_or(1);
                jobs.push(Job {
                    task,
                    claimed_at: now_ms,
                    target,
                    cap,
                    reply: None,
                });
            }
            // Cannot happen but for an endpoint deleted between the claim and this read (the
            // walk read it just before). Left `running`, the task is handed back when its
            // lease runs out (PostgreSQL) or at the next start.
            None => tracing::error!(
                task_id = task.id,
                trace_id = %task.trace_id_hex(),
                "claimed a task without an endpoint"
            ),
        }
    }
    Ok(jobs)
}

fn hand_out(shared: &Arc<Shared>, jobs: Vec<Job>) {
    if jobs.is_empty() {
        return;
    }
    shared.in_flight.fetch_add(jobs.len(), Ordering::SeqCst);
    let mut queue = lock(&shared.queue);
    for job in jobs {
        queue.push(job);
    }
    start_senders(shared, &mut queue);
}

/// Shutdown: claimed tasks not yet sent go back to `pending` at once; sends in flight get the
/// grace to finish and their results are committed; what is still in flight after the grace is
/// recorded as an attempt interrupted by shutdown and handed back to `pending` as well
/// ([`interrupted`]). Health the dispatcher still carries is written with the first of these
/// writes, waiting for its endpoints.
fn drain_at_shutdown(shared: &Shared, mut carried: health::Carried) {
    let app = &shared.app;
    app.probes.close();
    let unsent = {
        let mut queue = lock(&shared.queue);
        queue.closed = true;
        queue.drain()
    };
    shared.queue_ready.notify_all();
    shared.in_flight.fetch_sub(unsent.len(), Ordering::SeqCst);
    let deadline = Instant::now() + Duration::from_secs(app.config.shutdown_grace_secs);
    let rules = health::Rules::from_hours(app.config.disable_failing_after_hours);
    loop {
        let done = std::mem::take(&mut *lock(&shared.results));
        if !done.is_empty() || !carried.is_empty() {
            match app
                .store
                .write(|tx| record(tx, &done, &carried, &rules, IfBusy::Wait))
            {
                Ok(_) => {
                    shared.in_flight.fetch_sub(done.len(), Ordering::SeqCst);
                    carried = health::Carried::default();
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
        // Results that came in since the last look first, then the sends still under way.
        let done = std::mem::take(&mut *lock(&shared.results));
        if let Err(e) = app
            .store
            .write(|tx| record(tx, &done, &carried, &rules, IfBusy::Wait))
        {
            tracing::error!(error = %e, "delivery pool: cannot record results");
        }
        if let Err(e) = shared.sending.record_at_shutdown(app) {
            tracing::error!(error = %e, "delivery pool: cannot record interrupted attempts");
        }
    }
    if let Err(e) = app
        .store
        .write(|tx| tx.requeue_running_tasks(app.clock.now_ms()))
    {
        tracing::error!(error = %e, "delivery pool: cannot hand running tasks back; the next start will");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(endpoint_id: i64, task_id: i64, cap: usize) -> Job {
        Job {
            task: Claimed {
                id: task_id,
                ..held::tests::claimed(endpoint_id, None)
            },
            target: held::tests::target(endpoint_id, "http://127.0.0.1:9/"),
            claimed_at: 0,
            cap,
            reply: None,
        }
    }

    /// Carried health is written by the next round that has no result for its endpoint, and a
    /// carried streak gets the auto-disable test when written, as a round's own would.
    #[test]
    fn carried_failures_are_written_by_the_next_round_and_may_disable_their_endpoint() {
        let (_dir, store, ids) = fair::tests::store_with_endpoints(2, 0);
        let hour = 3_600_000;
        let rules = health::Rules {
            failing_after_ms: Some(hour),
        };
        let mut carried = health::Carried::default();
        for at in [0, hour / 2, hour, 3 * hour / 2, 2 * hour] {
            carried.keep(ids[0], health::Seen::one(false, at, false));
        }
        carried.keep(ids[1], health::Seen::one(true, 100, false));
        let left = store
            .write(|tx| record(tx, &[], &carried, &rules, IfBusy::Defer))
            .unwrap();
        assert!(left.is_empty(), "nothing held the rows");
        let read = |id: i64| {
            store
                .read(|tx| tx.get_endpoint_any(id))
                .unwrap()
                .expect("the endpoint")
        };
        let failing = read(ids[0]);
        assert_eq!(
            (
                failing.status.as_str(),
                failing.disabled_reason.as_deref(),
                failing.consecutive_failures,
                failing.last_failure_at,
            ),
            ("disabled", Some("failing"), 5, Some(2 * hour))
        );
        let fine = read(ids[1]);
        assert_eq!(
            (fine.status.as_str(), fine.last_success_at),
            ("enabled", Some(100))
        );
    }

    /// A change written after a newer one (carried a round late) keeps the newer times: the
    /// health times never move back (PostgreSQL's twin: `pg_tables`).
    #[test]
    fn an_endpoints_health_times_never_move_back() {
        let (_dir, store, ids) = fair::tests::store_with_endpoints(1, 0);
        let write = |seen: health::Seen| {
            store
                .write(|tx| tx.record_endpoints_health(&[(ids[0], seen.delta)], IfBusy::Wait))
                .unwrap();
            let e = store
                .read(|tx| tx.get_endpoint_any(ids[0]))
                .unwrap()
                .expect("the endpoint");
            (e.last_success_at, e.last_failure_at)
        };
        let newer =
            health::Seen::one(true, 9_000, false).then(health::Seen::one(false, 9_500, false));
        assert_eq!(write(newer), (Some(9_000), Some(9_500)));
        let older =
            health::Seen::one(true, 8_000, false).then(health::Seen::one(false, 8_500, false));
        assert_eq!(write(older), (Some(9_000), Some(9_500)));
        assert_eq!(
            write(health::Seen::one(true, 10_000, false)),
            (Some(10_000), Some(9_500))
        );
    }

    #[test]
    fn rounds_are_spaced_by_the_nodes_sharing_the_database_up_to_a_bound() {
        assert_eq!(round_gap(0), MIN_ROUND);
        assert_eq!(round_gap(2), MIN_ROUND * 3);
        assert_eq!(round_gap(100), MIN_ROUND * (1 + MOST_PEERS_PACED));
    }

    /// Only a failed attempt that is not quiet can publish an operator event, so only its
    /// round waits for the disk.
    #[test]
    fn only_a_failure_that_is_not_quiet_may_publish() {
        use crate::store::tasks::AfterAttempt;
        let done = |after: AfterAttempt, quiet: bool| Done {
            task: job(1, 1, 1).task,
            trace_id: [0; 16],
            endpoint_id: 1,
            sent: Sent::default(),
            verdict: Verdict {
                after,
                disable_endpoint: false,
                error: None,
            },
            at: 0,
            quiet,
        };
        let cases = [
            (AfterAttempt::Success, false, false),
            (AfterAttempt::Success, true, false),
            (AfterAttempt::RetryAt(5), false, true),
            (AfterAttempt::RetryAt(5), true, false),
            (AfterAttempt::Failed, false, true),
            (AfterAttempt::Failed, true, false),
        ];
        for (after, quiet, expected) in cases {
            assert_eq!(
                done(after, quiet).may_publish(),
                expected,
                "{after:?} {quiet}"
            );
        }
    }

    fn take(queue: &mut JobQueue) -> Option<(i64, i64)> {
        queue.take().map(|j| (j.target.endpoint_id, j.task.id))
    }

    #[test]
    fn lanes_take_turns_within_their_caps() {
        let mut queue = JobQueue::default();
        for (endpoint, task) in [(1, 10), (1, 11), (1, 12), (2, 20), (2, 21)] {
            queue.push(job(endpoint, task, 2));
        }
        assert_eq!((queue.sendable, queue.queued), (4, 5));
        assert_eq!(take(&mut queue), Some((1, 10)));
        assert_eq!(take(&mut queue), Some((2, 20)));
        assert_eq!(take(&mut queue), Some((1, 11)));
        assert_eq!(take(&mut queue), Some((2, 21)));
        assert_eq!(
            take(&mut queue),
            None,
            "endpoint 1 has its 2 sends under way"
        );
        assert_eq!((queue.sendable, queue.queued), (0, 1));
        queue.sent(2);
        assert_eq!(take(&mut queue), None, "endpoint 2 has nothing left");
        queue.sent(1);
        assert_eq!(queue.sendable, 1);
        assert_eq!(take(&mut queue), Some((1, 12)));
        let mut test = job(1, 13, 2);
        test.reply = Some(std::sync::mpsc::channel().0);
        queue.push(job(1, 14, 2));
        queue.push(test);
        queue.sent(1);
        assert_eq!(
            take(&mut queue),
            Some((1, 13)),
            "a test delivery goes first in its lane"
        );
    }

    #[test]
    fn senders_are_woken_before_new_ones_start_and_never_beyond_the_bound() {
        let cond = Condvar::new();
        let mut queue = JobQueue::default();
        for task in 0..6 {
            queue.push(job(task, task, 1));
        }
        queue.idle = 2;
        assert_eq!(queue.senders_wanted(5, &cond), 4, "2 woken, 4 started");
        assert_eq!(queue.coming, 6);
        assert_eq!(queue.senders_wanted(5, &cond), 0, "all on their way");
        queue.coming = 0;
        queue.idle = 0;
        assert_eq!(queue.senders_wanted(5, &cond), 1, "the bound of 5 senders");
    }
}
