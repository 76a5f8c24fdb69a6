//! Storage behind two object-safe traits: [`Store`], a handle on one database (SQLite file or
//! PostgreSQL), and [`Tx`], the record operations run inside [`Store::read`] / [`Store::write`].
//! The record types live here, one module per table (`endpoints::Endpoint`, `tasks::Task`, …);
//! each backend's SQL lives under its own module (`sqlite`, `postgres`). Callers hold an
//! `Arc<dyn Store>` and never name a database driver (`docs/dev/storage.md`).

pub mod attempts;
pub mod endpoints;
pub mod events;
pub mod json;
pub mod keys;
pub mod list;
pub mod policies;
pub mod postgres;
pub mod replay;
pub mod retention;
pub mod schedules;
pub mod sqlite;
pub mod tasks;
pub mod watch;
pub mod word;

pub use attempts::AttemptQueries;
pub use endpoints::EndpointQueries;
pub use events::EventQueries;
pub use keys::KeyQueries;
pub use policies::PolicyQueries;
pub use replay::ReplayQueries;
pub use retention::RetentionQueries;
pub use schedules::ScheduleQueries;
pub use tasks::TaskQueries;
pub use watch::{IdleCap, KeepingUp, Peers, Wakers, Watcher};
pub use word::Word;

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

/// A stored value that does not read as its type: a word outside its set (`store::word`) or
/// JSON text that does not parse (`store::json`). Both backends' conversions fail with it, so
/// that [`StoreError::is_unreadable_value`] tells a damaged row from a failing database.
#[derive(Debug)]
pub struct Unreadable(pub String);

impl std::fmt::Display for Unreadable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Unreadable {}

impl StoreError {
    /// Whether a read failed on a stored value that does not read as its type ([`Unreadable`]):
    /// the row is damaged (docs/operations.md, "A stored value webhookd cannot read"), the
    /// database itself works.
    pub fn is_unreadable_value(&self) -> bool {
        matches!(self, StoreError::Other(e) if e.chain().any(|cause| cause.is::<Unreadable>()))
    }

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

/// One database. `read` runs its closure on a connection without a write transaction (it
/// sees committed data: on SQLite one snapshot for the whole read, on PostgreSQL one per
/// statement); `write` runs it in one transaction, committed when the
/// closure succeeds and rolled back when it fails. Use the generic [`Store::read`] /
/// [`Store::write`] on `dyn Store`; the `_dyn` forms exist to keep the trait object-safe.
pub trait Store: Send + Sync + 'static {
    /// Runs `f` with a [`Tx`] over a connection of the pool, outside any write transaction
    /// (SQLite runs it in one read transaction: one snapshot for all its statements).
    fn read_dyn(
        &self,
        f: &mut dyn FnMut(&mut dyn Tx) -> Result<(), StoreError>,
    ) -> Result<(), StoreError>;

    /// [`Store::read_dyn`] only if it can start without waiting for a connection: `None`, and
    /// `f` not run, when none is free at once. For a read on the runtime's own thread, which
    /// must not wait; a store that cannot tell returns `None`.
    fn read_now_dyn(
        &self,
        f: &mut dyn FnMut(&mut dyn Tx) -> Result<(), StoreError>,
    ) -> Option<Result<(), StoreError>> {
        let _ = f;
        None
    }

    /// Runs `f` in one write transaction, committing it when `f` returns `Ok`.
    fn write_dyn(
        &self,
        f: &mut dyn FnMut(&mut dyn Tx) -> Result<(), StoreError>,
    ) -> Result<(), StoreError>;

    /// [`Store::write_dyn`] for a write whose durability the request's own later write
    /// provides: SQLite with `--sqlite-sync full` returns without waiting for an fsync (the
    /// next durable commit's fsync covers this one too). Used for the replay record of a
    /// signed request; elsewhere `write_dyn`. Its statements need not commit together
    /// (PostgreSQL commits each on its own, docs/dev/storage.md): one write, and reads.
    fn write_unsynced_dyn(
        &self,
        f: &mut dyn FnMut(&mut dyn Tx) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        self.write_dyn(f)
    }

    /// Runs `f` outside any transaction where the store can: each statement of `f` commits on
    /// its own, as durably as [`Store::write_dyn`]'s commit (an answer after it means
    /// committed), and no round trips begin and end a transaction. For a request whose write
    /// is one statement (a publish with its targets held, whose statement also carries the
    /// request's replay record: docs/dev/storage.md, "A publish in one statement on
    /// PostgreSQL"); `f` must not write twice. `None`, `f` not run, where the store writes in
    /// transactions only (the default): the caller uses [`Store::write_dyn`].
    fn write_statement_dyn(
        &self,
        f: &mut dyn FnMut(&mut dyn Tx) -> Result<(), StoreError>,
    ) -> Option<Result<(), StoreError>> {
        let _ = f;
        None
    }

    /// [`Store::write_dyn`] for a write that is redone when a crash loses it: one transaction,
    /// committed and seen by every reader when it returns, but its return does not wait for
    /// the commit to reach the disk. A crash of the machine (or of the database server) can
    /// lose it, and only with the commits after it: the log is written in order, and the next
    /// durable write's sync covers this one too. Used for the delivery dispatcher's round (its
    /// claims and results): losing one means a task is sent again, which at-least-once
    /// delivery allows (docs/dev/storage.md, "Writes a crash may undo").
    fn write_redoable_dyn(
        &self,
        f: &mut dyn FnMut(&mut dyn Tx) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        self.write_dyn(f)
    }

    /// [`Store::write_redoable_dyn`] for a write whose statements each stand on their own, run
    /// outside a transaction where the store can: each statement commits by itself as it runs,
    /// none waiting for the disk, so a failure leaves the statements before it committed (and
    /// a statement may have committed though its answer was lost). SQLite runs `f` in one
    /// transaction, as `write_redoable_dyn`. For the delivery dispatcher's round of
    /// successes, whose results statement records a result at most once, whoever retries it
    /// (docs/dev/storage.md, "The delivery round without a transaction on PostgreSQL").
    fn write_redoable_statements_dyn(
        &self,
        f: &mut dyn FnMut(&mut dyn Tx) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        self.write_redoable_dyn(f)
    }

    /// The cheap check run before every API write: is the database the store opened still
    /// there to write to? Err: writes would be lost, answer 503.
    fn quick_check(&self) -> Result<(), StoreError>;

    /// The full check behind `GET /healthz` (docs/design.md §10): [`Store::quick_check`], a read,
    /// a committed write of the probe row, and room left on the disk. At most one probe per
    /// `crate::health::PROBE_INTERVAL_MS`; in between the last result is answered.
    fn health(&self, now_ms: i64) -> Result<(), StoreError>;

    /// The start-up check of `serve`: refuses a database it could open but cannot write, with
    /// a message naming what to fix.
    fn require_writable(&self, now_ms: i64) -> anyhow::Result<()>;

    /// A consistent copy of the whole database into `out`, checked; refused with a message
    /// naming the right tool where the database has its own.
    fn backup(&self, out: &Path) -> anyhow::Result<()>;

    /// What the store is, for log lines: e.g. `sqlite /var/lib/webhookd.db`, never a password.
    fn describe(&self) -> String;

    /// `"sqlite"` or `"postgres"`.
    fn backend(&self) -> &'static str;

    /// Whether one process owns the database while it serves (no other server answers requests
    /// from it), so that what that process holds in memory is seen by every request that could
    /// meet it: then a read's replay record may be written after its answer
    /// (`replay_behind::ReadReplays`). False where several nodes share the database.
    fn owned_by_one_process(&self) -> bool {
        false
    }

    /// Starts watching for changes other processes make to the database, calling `wakers` for
    /// each (`poll`: the longest a change may go unseen when notices may be missed; `poll_only`:
    /// poll, never listen). The scheduler and the delivery pool cap their idle sleeps with the
    /// returned [`Watcher::idle_cap`]. A store one process owns returns [`Watcher::none`].
    fn watch(&self, wakers: Wakers, poll: Duration, poll_only: bool) -> anyhow::Result<Watcher>;
}

impl dyn Store {
    /// Runs `f` on a connection outside any write transaction and returns what it returns. `f` may
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

    /// [`Store::write_statement_dyn`] with `f`'s own result type: `None`, `f` not run, where
    /// the store writes in transactions only.
    pub fn write_statement<T, E: From<StoreError>>(
        &self,
        f: impl FnOnce(&mut dyn Tx) -> Result<T, E>,
    ) -> Option<Result<T, E>> {
        run_if(f, |g| self.write_statement_dyn(g))
    }

    /// [`Store::write`] for a write that a crash may undo and that is then done again
    /// ([`Store::write_redoable_dyn`]).
    pub fn write_redoable<T, E: From<StoreError>>(
        &self,
        f: impl FnOnce(&mut dyn Tx) -> Result<T, E>,
    ) -> Result<T, E> {
        run(f, |g| self.write_redoable_dyn(g))
    }

    /// [`Store::write_redoable`] whose statements may commit apart
    /// ([`Store::write_redoable_statements_dyn`]): an error may come after some committed.
    pub fn write_redoable_statements<T, E: From<StoreError>>(
        &self,
        f: impl FnOnce(&mut dyn Tx) -> Result<T, E>,
    ) -> Result<T, E> {
        run(f, |g| self.write_redoable_statements_dyn(g))
    }
}

/// Adapts a generic `FnOnce` with its own error type to the object-safe `FnMut` form: the
/// caller's error is kept aside while [`StoreError::Aborted`] rolls the transaction back.
fn run<T, E: From<StoreError>>(
    f: impl FnOnce(&mut dyn Tx) -> Result<T, E>,
    call: impl FnOnce(&mut dyn FnMut(&mut dyn Tx) -> Result<(), StoreError>) -> Result<(), StoreError>,
) -> Result<T, E> {
    run_if(f, |g| Some(call(g))).unwrap_or_else(|| Err(not_run()))
}

/// [`run`] for a `call` that may decline to run `f` (`None`): then no result, and no error
/// made (an error converted to the caller's type may be logged as it is made).
fn run_if<T, E: From<StoreError>>(
    f: impl FnOnce(&mut dyn Tx) -> Result<T, E>,
    call: impl FnOnce(
        &mut dyn FnMut(&mut dyn Tx) -> Result<(), StoreError>,
    ) -> Option<Result<(), StoreError>>,
) -> Option<Result<T, E>> {
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
    })?;
    Some(match (failed, result, out) {
        (Some(e), _, _) => Err(e),
        (None, Err(e), _) => Err(E::from(e)),
        (None, Ok(()), Some(v)) => Ok(v),
        (None, Ok(()), None) => Err(not_run()),
    })
}

/// A store that answered without running the closure it was handed.
fn not_run<E: From<StoreError>>() -> E {
    E::from(StoreError::Other(anyhow::anyhow!(
        "store closure did not run"
    )))
}

/// Options of [`open`] beyond the database itself.
#[derive(Debug, Clone, Copy)]
pub struct OpenOptions {
    /// Most connections at once.
    pub pool_size: u32,
    /// Upkeep of a store opened for serving ([`open_with`]) whose database keeps a write-ahead
    /// log beside it: the longest its upkeep holds writers to wait for older readers ...
    pub checkpoint_wait: Duration,
    /// ... and the size (`--wal-limit-mb`, in bytes) it keeps that log under. A database server
    /// keeps its own log: PostgreSQL ignores both.
    pub wal_limit_bytes: u64,
    /// `--sqlite-sync` (SQLite: `PRAGMA synchronous` of every connection).
    pub sqlite_sync: crate::config::SqliteSync,
    /// PostgreSQL's connection settings (`--pg-pool-size`, `--pg-statement-timeout-ms`).
    pub pg: postgres::PgSettings,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            pool_size: 1,
            checkpoint_wait: Duration::from_secs(1),
            wal_limit_bytes: crate::config::DEFAULT_WAL_LIMIT_BYTES,
            sqlite_sync: crate::config::SqliteSync::Full,
            pg: postgres::PgSettings::default(),
        }
    }
}

/// Opens the database `--db` names: a `postgres://` / `postgresql://` URL, else a SQLite file
/// path (created with mode 0600 when absent). Refuses foreign or newer databases untouched and
/// applies pending schema upgrades.
pub fn open(db: &str, pool_size: u32) -> anyhow::Result<Arc<dyn Store>> {
    let options = OpenOptions {
        pool_size,
        ..OpenOptions::default()
    };
    open_store(db, options, false)
}

/// [`open`] for `serve`, with every option: the store also starts the upkeep its backend
/// needs, on its own thread named for it, until it drops (SQLite: `wal-checkpoint`;
/// PostgreSQL: none, the server keeps its own files).
pub fn open_with(db: &str, options: OpenOptions) -> anyhow::Result<Arc<dyn Store>> {
    open_store(db, options, true)
}

fn open_store(db: &str, options: OpenOptions, serving: bool) -> anyhow::Result<Arc<dyn Store>> {
    if postgres::is_url(db) {
        return Ok(Arc::new(postgres::PgStore::open_with(
            db,
            options.pool_size,
            &options.pg,
        )?));
    }
    Ok(Arc::new(sqlite::SqliteStore::open(
        Path::new(db),
        options,
        serving,
    )?))
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

/// The record operations of webhookd, run inside [`Store::read`] (no transaction) or
/// [`Store::write`] (one transaction): every query trait of a table, declared beside its record
/// types (`endpoints::EndpointQueries`, …) and implemented once per backend in that backend's
/// file of the table (`sqlite/endpoints.rs`, `postgres/endpoints.rs`). Any type implementing
/// them all is a `Tx`; the methods here only combine the queries, so no backend writes them.
pub trait Tx:
    KeyQueries
    + ReplayQueries
    + PolicyQueries
    + EndpointQueries
    + EventQueries
    + AttemptQueries
    + RetentionQueries
    + ScheduleQueries
    + TaskQueries
{
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

impl<T> Tx for T where
    T: KeyQueries
        + ReplayQueries
        + PolicyQueries
        + EndpointQueries
        + EventQueries
        + AttemptQueries
        + RetentionQueries
        + ScheduleQueries
        + TaskQueries
        + ?Sized
{
}

/// The one log line of a schema change at start-up: `created schema vN` for a new database,
/// `upgraded schema from vA to vB` for an older one, nothing when it was current (`from` is
/// the version before the first step applied, `None` when none was).
pub fn log_schema_upgrade(backend: &str, from: Option<i64>, to: i64) {
    match from {
        None => {}
        Some(0) => tracing::info!(version = to, "{backend}: created schema v{to}"),
        Some(from) => tracing::info!(
            from,
            version = to,
            "{backend}: upgraded schema from v{from} to v{to}"
        ),
    }
}
