//! Storage behind two object-safe traits: [`Store`], a handle on one database (SQLite file or
//! PostgreSQL), and [`Tx`], the record operations run inside [`Store::read`] / [`Store::write`].
//! The record types live here, one module per table (`endpoints::Endpoint`, `tasks::Task`, …);
//! each backend's SQL lives under its own module (`sqlite`, `postgres`). Callers hold an
//! `Arc<dyn Store>` and never name a database driver (`docs/dev/storage.md`).

pub mod attempts;
pub mod endpoints;
pub mod events;
pub mod keys;
pub mod policies;
pub mod postgres;
pub mod schedules;
pub mod sqlite;
pub mod tasks;

pub use sqlite::SCHEMA_VERSION;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Why a store operation failed, as the layers above it need to know it: the two causes of
/// "the database cannot be written" that `/healthz` and writes answer with their own 503 codes,
/// a caller's own error that rolled a write back, and anything else (an internal error).
#[derive(Debug)]
pub enum StoreError {
    /// The disk holding the database is full (50301). The message says what to free.
    DiskFull(String),
    /// The database cannot be written for another reason (50302): read-only file or mount,
    /// file deleted or replaced, I/O errors, no connection. The message says what to fix.
    Unwritable(String),
    /// The closure given to [`Store::write`] returned its own error: the transaction was rolled
    /// back and `write` hands that error back to its caller (this value never reaches it).
    Aborted,
    /// Anything else: a bug, a constraint, a corrupt file. Answered as an internal error.
    Other(anyhow::Error),
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreError::DiskFull(m) | StoreError::Unwritable(m) => f.write_str(m),
            StoreError::Aborted => f.write_str("the transaction was rolled back by its caller"),
            StoreError::Other(e) => write!(f, "database: {e:#}"),
        }
    }
}

impl std::error::Error for StoreError {}

impl StoreError {
    /// A copy for a cached health result (`Other` keeps its message only).
    pub fn duplicate(&self) -> StoreError {
        match self {
            StoreError::DiskFull(m) => StoreError::DiskFull(m.clone()),
            StoreError::Unwritable(m) => StoreError::Unwritable(m.clone()),
            StoreError::Aborted => StoreError::Aborted,
            StoreError::Other(e) => StoreError::Other(anyhow::anyhow!("{e:#}")),
        }
    }
}

/// One database. `read` runs its closure on a connection without a transaction (each
/// statement sees committed data); `write` runs it in one transaction, committed when the
/// closure succeeds and rolled back when it fails. Use the generic [`Store::read`] /
/// [`Store::write`] on `dyn Store`; the `_dyn` forms exist to keep the trait object-safe.
pub trait Store: Send + Sync + 'static {
    /// Runs `f` with a [`Tx`] over a connection of the pool, outside any transaction.
    fn read_dyn(
        &self,
        f: &mut dyn FnMut(&mut dyn Tx) -> Result<(), StoreError>,
    ) -> Result<(), StoreError>;

    /// Runs `f` in one write transaction (SQLite: the in-process writer lock, then
    /// `BEGIN IMMEDIATE`), committing it when `f` returns `Ok`.
    fn write_dyn(
        &self,
        f: &mut dyn FnMut(&mut dyn Tx) -> Result<(), StoreError>,
    ) -> Result<(), StoreError>;

    /// [`Store::write_dyn`] for a write whose durability the request's own later write
    /// provides: SQLite with `--sqlite-sync full` returns without waiting for an fsync (the
    /// next durable commit's fsync covers this one too). Used for the replay record of a
    /// signed request; elsewhere `write_dyn`.
    fn write_unsynced_dyn(
        &self,
        f: &mut dyn FnMut(&mut dyn Tx) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        self.write_dyn(f)
    }

    /// The cheap check run before every API write (SQLite: one `stat` — is the file at `--db`
    /// still the one opened?). Err: writes would be lost, answer 503.
    fn quick_check(&self) -> Result<(), StoreError>;

    /// The full check behind `GET /healthz` (contract §10): [`Store::quick_check`], a read,
    /// a committed write of the probe row, and room left on the disk. At most one probe per
    /// `crate::health::PROBE_INTERVAL_MS`; in between the last result is answered.
    fn health(&self, now_ms: i64) -> Result<(), StoreError>;

    /// The start-up check of `serve`: refuses a database it could open but cannot write, with
    /// a message naming what to fix.
    fn require_writable(&self, now_ms: i64) -> anyhow::Result<()>;

    /// Background upkeep, called by the server's maintenance thread every `tick`
    /// (SQLite: WAL checkpoints, PASSIVE when `passive`, and rewinding the WAL before the `-wal`
    /// file reaches `wal_limit_bytes`).
    fn maintain(&self, passive: bool, wal_limit_bytes: u64) -> anyhow::Result<()>;

    /// A consistent copy of the whole database into `out` (SQLite: `VACUUM INTO`, then checked).
    fn backup(&self, out: &Path) -> anyhow::Result<()>;

    /// What the store is, for log lines: e.g. `sqlite /var/lib/webhookd.db`, never a password.
    fn describe(&self) -> String;

    /// `"sqlite"` or `"postgres"`.
    fn backend(&self) -> &'static str;

    /// Starts watching for changes other processes make to the database (PostgreSQL: the other
    /// nodes' notices, `--pg-poll-ms` / `--pg-poll-only`), calling `wakers` for each. The
    /// scheduler and the delivery pool cap their idle sleeps with the returned
    /// [`Watcher::idle_cap`]. SQLite: nothing to watch, one process owns the file.
    fn watch(&self, wakers: Wakers, poll: Duration, poll_only: bool) -> anyhow::Result<Watcher>;
}

pub use postgres::listen::{IdleCap, Wakers};

/// What [`Store::watch`] started: the cap on idle sleeps, how often leases of other processes
/// must be looked at, and the watching to stop at shutdown.
pub struct Watcher {
    pub idle_cap: IdleCap,
    /// How often the delivery pool takes back tasks whose lease ran out
    /// ([`Tx::rescue_expired_leases`]), idle or not: a node dying with claimed tasks sends no
    /// notice. `None`: no other process can hold a lease (SQLite).
    pub rescue_every: Option<Duration>,
    stop: Option<Box<dyn FnOnce() + Send>>,
}

impl Watcher {
    /// Nothing watched, no cap, no leases: the process's own wakes cover every change.
    pub fn none() -> Watcher {
        Watcher {
            idle_cap: IdleCap::new(Duration::MAX),
            rescue_every: None,
            stop: None,
        }
    }

    /// Several processes on one database: sleeps capped by `idle_cap`, leases looked at every
    /// `rescue_every`, and `stop` run at shutdown.
    pub fn shared(
        idle_cap: IdleCap,
        rescue_every: Duration,
        stop: Option<Box<dyn FnOnce() + Send>>,
    ) -> Watcher {
        Watcher {
            idle_cap,
            rescue_every: Some(rescue_every),
            stop,
        }
    }

    /// Stops watching (blocking, about a second at most).
    pub fn stop(self) {
        if let Some(stop) = self.stop {
            stop();
        }
    }
}

impl dyn Store {
    /// Runs `f` on a connection outside any transaction and returns what it returns. `f` may
    /// fail with its caller's own error type, which converts from [`StoreError`].
    pub fn read<T, E: From<StoreError>>(
        &self,
        f: impl FnOnce(&mut dyn Tx) -> Result<T, E>,
    ) -> Result<T, E> {
        run(f, |g| self.read_dyn(g))
    }

    /// Runs `f` in one write transaction: committed when `f` returns `Ok`, rolled back when it
    /// returns `Err` (that error is returned as is) or a statement fails.
    pub fn write<T, E: From<StoreError>>(
        &self,
        f: impl FnOnce(&mut dyn Tx) -> Result<T, E>,
    ) -> Result<T, E> {
        run(f, |g| self.write_dyn(g))
    }

    /// [`Store::write`] without waiting for the commit to reach the disk
    /// ([`Store::write_unsynced_dyn`]).
    pub fn write_unsynced<T, E: From<StoreError>>(
        &self,
        f: impl FnOnce(&mut dyn Tx) -> Result<T, E>,
    ) -> Result<T, E> {
        run(f, |g| self.write_unsynced_dyn(g))
    }
}

/// Adapts a generic `FnOnce` with its own error type to the object-safe `FnMut` form: the
/// caller's error is kept aside while [`StoreError::Aborted`] rolls the transaction back.
fn run<T, E: From<StoreError>>(
    f: impl FnOnce(&mut dyn Tx) -> Result<T, E>,
    call: impl FnOnce(&mut dyn FnMut(&mut dyn Tx) -> Result<(), StoreError>) -> Result<(), StoreError>,
) -> Result<T, E> {
    let mut f = Some(f);
    let mut out: Option<T> = None;
    let mut failed: Option<E> = None;
    let result = call(&mut |tx| {
        let f = f
            .take()
            .ok_or_else(|| StoreError::Other(anyhow::anyhow!("store closure called twice")))?;
        match f(tx) {
            Ok(v) => {
                out = Some(v);
                Ok(())
            }
            Err(e) => {
                failed = Some(e);
                Err(StoreError::Aborted)
            }
        }
    });
    if let Some(e) = failed {
        return Err(e);
    }
    result?;
    out.ok_or_else(|| {
        E::from(StoreError::Other(anyhow::anyhow!(
            "store closure did not run"
        )))
    })
}

/// Options of [`open`] beyond the database itself.
#[derive(Debug, Clone, Copy)]
pub struct OpenOptions {
    /// Most connections at once.
    pub pool_size: u32,
    /// Longest a rewinding WAL checkpoint waits for readers of an older snapshot (SQLite).
    pub checkpoint_wait: Duration,
    /// `--wal-limit-mb` in bytes (SQLite: the `-wal` file is kept under it).
    pub wal_limit_bytes: u64,
    /// `--sqlite-sync` (SQLite: `PRAGMA synchronous` of every connection).
    pub sqlite_sync: crate::config::SqliteSync,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            pool_size: 1,
            checkpoint_wait: Duration::from_secs(1),
            wal_limit_bytes: crate::config::DEFAULT_WAL_LIMIT_BYTES,
            sqlite_sync: crate::config::SqliteSync::Full,
        }
    }
}

/// Opens the database `--db` names: a `postgres://` / `postgresql://` URL, else a SQLite file
/// path (created with mode 0600 when absent). Refuses foreign or newer databases untouched and
/// applies pending schema upgrades.
pub fn open(db: &str, pool_size: u32) -> anyhow::Result<Arc<dyn Store>> {
    open_with(
        db,
        OpenOptions {
            pool_size,
            ..OpenOptions::default()
        },
    )
}

/// [`open`] with every option.
pub fn open_with(db: &str, options: OpenOptions) -> anyhow::Result<Arc<dyn Store>> {
    if postgres::is_url(db) {
        return Ok(Arc::new(postgres::PgStore::open(db, options.pool_size)?));
    }
    Ok(Arc::new(sqlite::SqliteStore::open(Path::new(db), options)?))
}

/// Opens an existing database for `webhookd backup`: refuses a missing or foreign one, creates
/// nothing and upgrades nothing.
pub fn open_existing(db: &str) -> anyhow::Result<Arc<dyn Store>> {
    if postgres::is_url(db) {
        return Ok(Arc::new(postgres::PgStore::open(db, 1)?));
    }
    Ok(Arc::new(sqlite::SqliteStore::open_existing(Path::new(db))?))
}

/// `LIMIT`/`OFFSET` for a 1-based page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Page {
    pub page: u32,
    pub page_size: u32,
}

impl Page {
    pub fn limit(&self) -> i64 {
        i64::from(self.page_size)
    }

    pub fn offset(&self) -> i64 {
        i64::from(self.page.saturating_sub(1)) * i64::from(self.page_size)
    }
}

/// The record operations of webhookd, one per SQL primitive of a backend; run inside
/// [`Store::read`] (no transaction) or [`Store::write`] (one transaction). Methods that only
/// combine others are provided here, so a backend implements the primitives only.
pub trait Tx {
    /// Reads the schema and writes the health probe row (`/healthz`, the start-up check).
    fn write_health_probe(&mut self, now_ms: i64) -> Result<(), StoreError>;

    /// Hands tasks whose lease expired (their node died mid-delivery) back to `pending`;
    /// returns how many. SQLite: always 0 — one process owns the file, and start-up requeues
    /// every `running` task. The delivery pool calls it every `Watcher::rescue_every`.
    fn rescue_expired_leases(&mut self, now_ms: i64) -> Result<usize, StoreError>;

    // --- keys ---
    /// Creates a key for `app_id` (a fresh id and secret, `keys::NewKey::generate`).
    fn create_key(
        &mut self,
        app_id: &str,
        name: &str,
        now_ms: i64,
    ) -> Result<keys::NewKey, StoreError>;
    /// How many keys exist, revoked ones included (first start makes one when none).
    fn count_keys(&mut self) -> Result<i64, StoreError>;
    /// Every key, oldest first, without secrets.
    fn list_keys(&mut self) -> Result<Vec<keys::KeyInfo>, StoreError>;
    /// Marks a key revoked; false when no live key has that id.
    fn revoke_key(&mut self, key_id: &str, now_ms: i64) -> Result<bool, StoreError>;
    /// The secret and app of a live (not revoked) key.
    fn lookup_key(&mut self, key_id: &str) -> Result<Option<(String, String)>, StoreError>;

    // --- replay ---
    /// Records the pair as used until `expires_ms`. False when it is already recorded and has not
    /// expired: a replay. An expired row is taken over, so no separate clean-up has to run first.
    /// Must run inside a write transaction (`Store::write`): it is the durable half of the
    /// check, committed before the request is acted on.
    fn first_use_of_signature(
        &mut self,
        key_id: &str,
        signature: &str,
        expires_ms: i64,
        now_ms: i64,
    ) -> Result<bool, StoreError>;
    /// Deletes up to `limit` rows that expired before `now_ms`; returns how many went.
    fn prune_replay(&mut self, now_ms: i64, limit: usize) -> Result<usize, StoreError>;
    /// How many pairs are remembered (tests, diagnostics).
    fn count_replay(&mut self) -> Result<i64, StoreError>;

    // --- policies ---
    /// Inserts `p` (its `id` is ignored) and returns the stored record.
    fn insert_policy(&mut self, p: &policies::Policy) -> Result<policies::Policy, StoreError>;
    /// Writes every field a PATCH may change back.
    fn update_policy(&mut self, p: &policies::Policy) -> Result<(), StoreError>;
    /// A policy of an app.
    fn get_policy(&mut self, app_id: &str, id: i64)
    -> Result<Option<policies::Policy>, StoreError>;
    /// Any policy by id, whatever its app (for the delivery pool).
    fn get_policy_any(&mut self, id: i64) -> Result<Option<policies::Policy>, StoreError>;
    /// One page of an app's policies, newest first, and the total count.
    fn list_policies(
        &mut self,
        app_id: &str,
        page: Page,
    ) -> Result<(i64, Vec<policies::Policy>), StoreError>;
    /// Deletes a policy of an app; false when there was none.
    fn delete_policy(&mut self, app_id: &str, id: i64) -> Result<bool, StoreError>;

    // --- endpoints ---
    /// Inserts `ep` (its `id` is ignored) and returns the stored record.
    fn insert_endpoint(
        &mut self,
        ep: &endpoints::Endpoint,
    ) -> Result<endpoints::Endpoint, StoreError>;
    /// Writes every field a PATCH may change back. Status and health are left alone: they have
    /// their own statements ([`Tx::set_endpoint_status`], [`Tx::record_endpoint_health`]), so a PATCH racing the delivery
    /// pool cannot undo a disabling.
    fn update_endpoint(&mut self, ep: &endpoints::Endpoint) -> Result<(), StoreError>;
    /// An endpoint of an app.
    fn get_endpoint(
        &mut self,
        app_id: &str,
        id: i64,
    ) -> Result<Option<endpoints::Endpoint>, StoreError>;
    /// Any endpoint by id, whatever its app (for the delivery pool).
    fn get_endpoint_any(&mut self, id: i64) -> Result<Option<endpoints::Endpoint>, StoreError>;
    /// The limits of any endpoint by id, whatever its app; `None` when it is gone.
    fn endpoint_limits_any(&mut self, id: i64) -> Result<Option<endpoints::Limits>, StoreError>;
    /// `POST /endpoints/{id}/enable` and `/disable`: enabling clears `disabled_reason` and resets
    /// the failure streak (so auto-disable starts counting afresh); disabling records `reason`.
    /// Returns false when the endpoint already had that status (nothing changes then).
    fn set_endpoint_status(
        &mut self,
        app_id: &str,
        id: i64,
        enabled: bool,
        reason: endpoints::DisabledReason,
        now_ms: i64,
    ) -> Result<bool, StoreError>;
    /// Disables any endpoint, whatever its app (the delivery pool: a `410 Gone` reply, or
    /// auto-disable). Returns the endpoint's app when it was enabled until now, `None` when it was
    /// already disabled (or is gone), so the caller tells the operator only once.
    fn disable_endpoint_any(
        &mut self,
        id: i64,
        reason: endpoints::DisabledReason,
        now_ms: i64,
    ) -> Result<Option<String>, StoreError>;
    /// Applies a round's [`HealthDelta`] to an endpoint in the result commit, and disables it
    /// with reason `failing` when its streak reached `min_failures` attempts over at least
    /// `failing_after_ms` (`None`: never). Returns the app and streak length of an endpoint
    /// disabled by this call.
    /// One statement per endpoint per round, however many of its attempts the round holds.
    fn record_endpoint_health(
        &mut self,
        id: i64,
        delta: &endpoints::HealthDelta,
        min_failures: i64,
        failing_after_ms: Option<i64>,
        now_ms: i64,
    ) -> Result<Option<(String, i64)>, StoreError>;
    /// One page, newest first, and the total count of matches.
    fn list_endpoints(
        &mut self,
        app_id: &str,
        status: Option<&str>,
        page: Page,
    ) -> Result<(i64, Vec<endpoints::Endpoint>), StoreError>;
    /// Every enabled endpoint of an app, oldest first (fan-out targets).
    fn list_enabled_endpoints(
        &mut self,
        app_id: &str,
    ) -> Result<Vec<endpoints::Endpoint>, StoreError>;
    /// Names of the given endpoints of an app, for `endpoint_names`; unknown ids are left out.
    fn endpoint_names(
        &mut self,
        app_id: &str,
        ids: &[i64],
    ) -> Result<Vec<(i64, String)>, StoreError>;
    /// Deletes the endpoint row only (see `delete_endpoint_cascade`); false when there was none.
    fn delete_endpoint(&mut self, app_id: &str, id: i64) -> Result<bool, StoreError>;
    /// How many endpoints use a retry policy.
    fn count_endpoints_using_policy(&mut self, policy_id: i64) -> Result<i64, StoreError>;
    /// Deletes an endpoint in the caller's transaction: its pending tasks become `canceled`, and
    /// schedules that name it drop it from `endpoint_ids`. A schedule whose only target it was is
    /// paused rather than left with an empty list (which would mean "every endpoint").
    /// Returns `None` when there was no such endpoint, else the ids of the schedules it paused.
    fn delete_endpoint_cascade(
        &mut self,
        app_id: &str,
        id: i64,
        now_ms: i64,
    ) -> Result<Option<Vec<i64>>, StoreError>;
    /// Every enabled endpoint of an app with its task `max_attempts`, in one query.
    fn list_enabled_targets(&mut self, app_id: &str) -> Result<Vec<endpoints::Target>, StoreError>;

    // --- events ---
    /// Inserts an event; `payload` is compact JSON text.
    fn insert_event(
        &mut self,
        app_id: &str,
        event_name: &str,
        event_key: Option<&str>,
        payload: &str,
        task_count: i64,
        now_ms: i64,
    ) -> Result<i64, StoreError>;
    /// The first event published with this name and key since `since_ms`.
    fn find_event_by_key(
        &mut self,
        app_id: &str,
        event_name: &str,
        event_key: &str,
        since_ms: i64,
    ) -> Result<Option<events::Event>, StoreError>;
    /// An event of an app.
    fn get_event(&mut self, app_id: &str, id: i64) -> Result<Option<events::Event>, StoreError>;
    /// The name of an event, whatever its app (for the `X-Service-Event` delivery header).
    fn event_name_of(&mut self, id: i64) -> Result<Option<String>, StoreError>;
    /// One page, newest first, and the total count of matches.
    fn list_events(
        &mut self,
        app_id: &str,
        event_name: Option<&str>,
        page: Page,
    ) -> Result<(i64, Vec<events::Event>), StoreError>;

    // --- attempts ---
    /// Appends an attempt row (its `id` is ignored). Called in the delivery pool's result
    /// transaction, together with the task's state change.
    fn insert_attempt(&mut self, a: &attempts::Attempt) -> Result<(), StoreError>;
    /// One page of a task's attempts in the order they were made, and their total count.
    fn list_attempts(
        &mut self,
        task_id: i64,
        page: Page,
    ) -> Result<(i64, Vec<attempts::Attempt>), StoreError>;

    // --- retention ---
    /// Deletes up to `limit` tasks that finished before `cutoff_ms`, with their attempts. Returns
    /// how many tasks went; call again until it returns less than `limit`.
    fn delete_finished_tasks(&mut self, cutoff_ms: i64, limit: usize) -> Result<usize, StoreError>;
    /// Deletes up to `limit` events created before `cutoff_ms` that no task refers to any more.
    fn delete_old_events(&mut self, cutoff_ms: i64, limit: usize) -> Result<usize, StoreError>;

    // --- schedules ---
    /// Inserts `s` (its `id` is ignored) and returns the stored record.
    fn insert_schedule(
        &mut self,
        s: &schedules::Schedule,
    ) -> Result<schedules::Schedule, StoreError>;
    /// Writes every field an API call may change back (`last_run_at` belongs to the scheduler).
    fn update_schedule(&mut self, s: &schedules::Schedule) -> Result<(), StoreError>;
    /// A schedule of an app, deleted ones included.
    fn get_schedule(
        &mut self,
        app_id: &str,
        id: i64,
    ) -> Result<Option<schedules::Schedule>, StoreError>;
    /// One page of an app's schedules that are not deleted, newest first, and the total count.
    fn list_schedules(
        &mut self,
        app_id: &str,
        status: Option<&str>,
        page: Page,
    ) -> Result<(i64, Vec<schedules::Schedule>), StoreError>;
    /// Active schedules due at `now_ms`, earliest first, at most `limit`.
    fn due_schedules(
        &mut self,
        now_ms: i64,
        limit: usize,
    ) -> Result<Vec<schedules::Firing>, StoreError>;
    /// An active schedule by id, whatever its app.
    fn get_active_schedule(&mut self, id: i64) -> Result<Option<schedules::Firing>, StoreError>;
    /// The earliest `next_run_at` of all active schedules: when the scheduler has work next.
    fn earliest_next_run(&mut self) -> Result<Option<i64>, StoreError>;
    /// Records that `schedule_id` fired for `scheduled_at`; false when it already had.
    fn record_firing(&mut self, schedule_id: i64, scheduled_at: i64) -> Result<bool, StoreError>;
    /// Moves an active schedule on after the scheduler looked at it: `next_run_at` always,
    /// `last_run_at` when it fired, `skipped_runs` up by `skipped`. `updated_at` is left alone
    /// (it tracks changes by the API).
    fn advance_schedule(
        &mut self,
        id: i64,
        fired_at: Option<i64>,
        next_run_at: Option<i64>,
        skipped: i64,
    ) -> Result<(), StoreError>;
    /// Forgets a schedule's firings scheduled before `cutoff_ms` (they can no longer recur).
    fn forget_firings(&mut self, schedule_id: i64, cutoff_ms: i64) -> Result<(), StoreError>;

    // --- tasks ---
    /// Inserts a pending task and returns its id. Use inside the caller's transaction when
    /// creating several (fan-out), so they commit together.
    fn insert_task(&mut self, t: &tasks::NewTask<'_>) -> Result<i64, StoreError>;
    /// A task of an app.
    fn get_task(&mut self, app_id: &str, id: i64) -> Result<Option<tasks::Task>, StoreError>;
    /// One page, newest first, and the total count of matches.
    fn list_tasks(
        &mut self,
        app_id: &str,
        f: &tasks::TaskFilter,
        page: Page,
    ) -> Result<(i64, Vec<tasks::Task>), StoreError>;
    /// The first endpoint after `after` (by id) that has pending tasks, and when its earliest one
    /// is due: one seek in `tasks_endpoint_due`, so walking every endpoint with pending work costs
    /// one seek per endpoint, however many tasks each holds.
    fn next_endpoint_with_pending(&mut self, after: i64) -> Result<Option<(i64, i64)>, StoreError>;
    /// The head of an in-order endpoint: its pending task that became due first (ties by id), and
    /// when it is due now (later than the others when it waits to retry).
    fn in_order_head(&mut self, endpoint_id: i64) -> Result<Option<(i64, i64)>, StoreError>;
    /// Marks up to `limit` due tasks of one endpoint `running` and returns them, earliest due first
    /// (ties by id). `attempts` is only counted when the attempt's result is recorded, so a claim
    /// lost to a crash costs no attempt. The caller has checked the endpoint is enabled.
    ///
    /// `LIMIT ?3 + 0`, not `LIMIT ?3`: SQLite plans with the value bound to a bare `LIMIT`
    /// parameter, so rebinding it re-prepares the statement on every run.
    fn claim_endpoint_tasks(
        &mut self,
        endpoint_id: i64,
        now_ms: i64,
        limit: usize,
    ) -> Result<Vec<tasks::Claimed>, StoreError>;
    /// Claims one task by id if it is still pending and due (an in-order endpoint's head).
    fn claim_task(&mut self, id: i64, now_ms: i64) -> Result<Option<tasks::Claimed>, StoreError>;
    /// Records the result of attempt `attempt` on a `running` task. A task whose endpoint was
    /// deleted while it was in flight is `canceled` instead of going back to `pending`. Returns
    /// false (and changes nothing) when the task is no longer `running` — e.g. it was handed back
    /// at shutdown — so the caller leaves the attempt unrecorded, and it will be made again.
    fn finish_attempt(
        &mut self,
        task_id: i64,
        attempt: i64,
        after: tasks::AfterAttempt,
        last_status_code: Option<i64>,
        last_error: Option<&str>,
        now_ms: i64,
    ) -> Result<bool, StoreError>;
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
    /// taken back after its lease ran out and must not be sent (PostgreSQL). SQLite: every id
    /// (one process owns the file; there are no leases to lose).
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
    ///
    /// The ids travel as one JSON array (`json_each`), so one cached statement serves a batch of
    /// any size.
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
        f: &tasks::RetryFilter,
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
    fn count_tasks_by_status(&mut self) -> Result<Vec<(String, i64)>, StoreError>;

    // --- provided: combinations of the primitives above ---

    /// Publishes an event in the caller's transaction: the event row and one `event` task per
    /// target, so they commit together. Returns the event's id.
    fn insert_event_with_tasks(
        &mut self,
        app_id: &str,
        event_name: &str,
        event_key: Option<&str>,
        payload: &str,
        targets: &[endpoints::Target],
        now_ms: i64,
    ) -> Result<i64, StoreError> {
        let task_count = i64::try_from(targets.len()).unwrap_or(i64::MAX);
        let id = self.insert_event(app_id, event_name, event_key, payload, task_count, now_ms)?;
        for target in targets {
            self.insert_task(&tasks::NewTask {
                app_id,
                schedule_id: None,
                event_id: Some(id),
                endpoint_id: target.id,
                task_type: "event",
                payload,
                run_at: now_ms,
                max_attempts: target.max_attempts,
                now_ms,
            })?;
        }
        Ok(id)
    }

    /// The retry policy an endpoint's deliveries follow: its own, or the default.
    fn effective_policy(
        &mut self,
        retry_policy_id: Option<i64>,
    ) -> Result<crate::retry::RetryPolicy, StoreError> {
        Ok(match retry_policy_id {
            Some(id) => self
                .get_policy_any(id)?
                .map(|p| p.to_retry())
                .unwrap_or(crate::retry::RetryPolicy::DEFAULT),
            None => crate::retry::RetryPolicy::DEFAULT,
        })
    }

    /// Fills the fields a reply adds to the stored ones: `endpoint_names` from the endpoints
    /// table (ids no longer found are left out) and `next_run_at_local`.
    fn fill_schedule_names(&mut self, s: &mut schedules::Schedule) -> Result<(), StoreError> {
        s.next_run_at_local = s
            .next_run_at
            .and_then(|ms| crate::cron::local_rfc3339_ms(ms, &s.timezone));
        s.endpoint_names = self
            .endpoint_names(&s.app_id, &s.endpoint_ids)?
            .into_iter()
            .map(|(id, name)| (id.to_string(), name))
            .collect();
        Ok(())
    }
}
