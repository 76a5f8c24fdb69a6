//! The SQLite store: one file in WAL mode behind an r2d2 pool. Every SQLite statement of
//! webhookd lives under this module, one file per table, as plain functions over a
//! `&Connection`; [`SqliteStore`] and [`SqliteTx`] put them behind `store::Store` / `store::Tx`.

pub mod attempts;
pub mod endpoints;
pub mod events;
mod health;
pub mod keys;
mod migrate;
pub mod policies;
pub mod replay;
pub mod retention;
pub mod schedules;
pub mod tasks;
mod tx;

pub use health::DbHealth;
pub use migrate::{SCHEMA_VERSION, check_is_ours};
pub use tx::SqliteTx;

use crate::config::SqliteSync;
use crate::store::{Page, StoreError};

use anyhow::{Context, bail};
use r2d2_sqlite::SqliteConnectionManager;
use rusqlite::{Connection, OpenFlags};
use std::collections::HashMap;
use std::path::Path;
use std::path::PathBuf;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// The shared connection pool.
pub type Pool = r2d2::Pool<SqliteConnectionManager>;
/// One pooled connection.
pub type Conn = r2d2::PooledConnection<SqliteConnectionManager>;

/// Opens (creating with mode 0600 if absent) a webhookd database, refuses foreign or newer
/// files untouched, applies pending schema upgrades, and returns a pool of `size` connections.
pub fn open(path: &Path, size: u32) -> anyhow::Result<Pool> {
    open_limited(
        path,
        size,
        crate::config::DEFAULT_WAL_LIMIT_BYTES,
        SqliteSync::default(),
    )
}

/// [`open`] with `--wal-limit-mb` in bytes (what a rewound `-wal` file is cut back to) and
/// `--sqlite-sync`.
pub fn open_limited(
    path: &Path,
    size: u32,
    wal_limit_bytes: u64,
    sync: SqliteSync,
) -> anyhow::Result<Pool> {
    create_private_file(path)?;
    {
        let mut conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_WRITE)
            .with_context(|| format!("cannot open database {}", path.display()))?;
        migrate::check_is_ours(&conn, path)?;
        conn.busy_timeout(Duration::from_secs(10))?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .with_context(|| format!("cannot switch {} to WAL mode", path.display()))?;
        migrate::upgrade(&mut conn)?;
        file_state(&conn)
            .durable_commits
            .store(sync == SqliteSync::Full, SeqCst);
    }
    let manager = SqliteConnectionManager::file(path)
        .with_flags(OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX)
        .with_init(move |conn| configure_connection(conn, wal_limit_bytes));
    r2d2::Pool::builder()
        .max_size(size)
        .min_idle(Some(1))
        // r2d2 would run `SELECT 1` (r2d2_sqlite's default `is-valid` check: prepared, stepped
        // and finalized every time) on each checkout, ~6,500 instructions; a request checks
        // out a connection per `Store::read`/`write` call, so up to 3 times. A connection to a
        // local file does not go stale the way a socket does, and a file replaced under us is
        // caught by `Store::quick_check` / the health probe, not by `SELECT 1` (BENCHMARKS.md,
        // "Store interface refactor, SQLite mode: A/B").
        .test_on_check_out(false)
        .connection_timeout(Duration::from_secs(30))
        .build(manager)
        .context("cannot build the database connection pool")
}

/// How long a statement waits for another process's lock before failing with "busy".
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Per-connection settings. `synchronous=NORMAL` in WAL mode: a commit is written to the
/// `-wal` file without an fsync (a crash of the process loses nothing), checkpoints fsync
/// the WAL and the database file. With `--sqlite-sync full` (the default) [`write_tx`] then
/// fsyncs the `-wal` file before a write returns, one fsync for all the commits queued
/// meanwhile ([`group_sync`]), so an acknowledged write survives a power loss or a file system
/// error; with `normal` the last commits before such a loss may be lost (README, "Storage and
/// durability").
fn configure_connection(conn: &mut Connection, wal_limit_bytes: u64) -> rusqlite::Result<()> {
    conn.busy_timeout(BUSY_TIMEOUT)?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.pragma_update(None, "temp_store", "MEMORY")?;
    conn.pragma_update(None, "cache_size", -16_000)?;
    // Checkpoints run on the server's checkpointer thread (see `checkpoint`), not inside
    // whichever request happens to commit; a short-lived `keys` command checkpoints on close.
    conn.pragma_update(None, "wal_autocheckpoint", 0)?;
    // The first commit after the WAL is rewound (`checkpoint_restart`) cuts the `-wal` file back
    // to the limit, so a file that outgrew it (a reader held checkpoints back) shrinks again.
    let limit = i64::try_from(wal_limit_bytes).unwrap_or(i64::MAX);
    conn.pragma_update(None, "journal_size_limit", limit)?;
    conn.set_prepared_statement_cache_capacity(64);
    Ok(())
}

/// Creates the file with mode 0600 (it holds secrets) when it does not exist yet.
fn create_private_file(path: &Path) -> anyhow::Result<()> {
    if path.exists() {
        if !path.is_file() {
            bail!("--db {} is not a regular file", path.display());
        }
        // A read-only file or mount would otherwise surface as a puzzling SQLite error (or, in
        // WAL mode, "unable to open database file"): say what is wrong and what to fix.
        if let Err(e) = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
        {
            bail!(crate::health::unwritable_message(path, &e));
        }
        return Ok(());
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    match options.open(path) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e).with_context(|| {
            format!(
                "cannot create database {} (does its folder exist and is it writable?)",
                path.display()
            )
        }),
    }
}

/// What a checkpoint reports: frames written to the WAL since it was last rewound, how many of
/// them are copied back into the database file, and whether it had to stop short (a reader).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WalState {
    pub busy: bool,
    pub written: u64,
    pub copied: u64,
}

fn wal_checkpoint(conn: &Connection, mode: &str) -> rusqlite::Result<WalState> {
    conn.query_row(&format!("PRAGMA wal_checkpoint({mode})"), [], |r| {
        let frames = |i| r.get::<_, i64>(i).map(|n| u64::try_from(n).unwrap_or(0));
        Ok(WalState {
            busy: r.get::<_, i64>(0)? != 0,
            written: frames(1)?,
            copied: frames(2)?,
        })
    })
}

/// Copies committed WAL pages back into the database file (PASSIVE: never waits for readers
/// or writers). The server calls it a few times a second from one background thread.
pub fn checkpoint(conn: &Connection) -> rusqlite::Result<WalState> {
    wal_checkpoint(conn, "PASSIVE")
}

/// The `-wal` file beside a database file.
pub fn wal_path(db: &Path) -> std::path::PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push("-wal");
    name.into()
}

/// Copies the last WAL pages back and waits until no reader uses the WAL any more, holding
/// the in-process writer lock meanwhile (writers wait, readers go on), so that the next writer
/// rewinds the WAL to its start (`RESTART`). PASSIVE checkpoints alone cannot bound the WAL
/// under sustained load: SQLite only rewinds it when a writer starts while every frame is
/// copied back and no reader still uses it, which never happens while requests keep coming
/// (BENCHMARKS.md). `TRUNCATE`, which also cuts the file to zero, held the writers three to
/// four times longer (the file is then grown again page by page); `journal_size_limit` cuts
/// it back to the limit instead. Waits at most `wait` for readers on older snapshots, looking
/// every 100 µs: SQLite's own busy handler sleeps 1, 2, 5 … 100 ms, with every writer queued.
/// `busy` in the result: a reader held on and the WAL will not be rewound.
pub fn checkpoint_restart(conn: &Connection, wait: Duration) -> rusqlite::Result<WalState> {
    checkpoint_rewind(conn, wait, "RESTART")
}

/// [`checkpoint_restart`] in `mode`: `RESTART`, or `TRUNCATE`, which also cuts the `-wal` file
/// to zero bytes and so gives its space back to the file system (on a small disk).
fn checkpoint_rewind(conn: &Connection, wait: Duration, mode: &str) -> rusqlite::Result<WalState> {
    let state = file_state(conn);
    let _queued = state.writer.lock().unwrap_or_else(|e| e.into_inner());
    READERS_DEADLINE.set(Some(std::time::Instant::now() + wait));
    conn.busy_handler(Some(wait_for_readers))?;
    let state = wal_checkpoint(conn, mode);
    READERS_DEADLINE.set(None);
    conn.busy_timeout(BUSY_TIMEOUT)?;
    state
}

thread_local! {
    /// Until when [`wait_for_readers`] keeps waiting (it is a plain `fn`: no captured state).
    static READERS_DEADLINE: std::cell::Cell<Option<std::time::Instant>> =
        const { std::cell::Cell::new(None) };
}

/// The busy handler of [`checkpoint_restart`]: webhookd's readers hold their snapshot for
/// well under a millisecond, so look again soon rather than sleep with the writers queued.
fn wait_for_readers(_tries: i32) -> bool {
    match READERS_DEADLINE.get() {
        Some(deadline) if std::time::Instant::now() < deadline => {
            std::thread::sleep(Duration::from_micros(100));
            true
        }
        _ => false,
    }
}

/// What the in-process writers of one database file share.
#[derive(Default)]
struct FileState {
    /// The lock writers queue on before `BEGIN IMMEDIATE`. Without it they meet SQLite's busy
    /// handler, which sleeps 1, 2, 5 … 100 ms between tries and turned contention between API
    /// threads and the delivery dispatcher into 50–900 ms stalls (BENCHMARKS.md). Other
    /// processes (the `keys` commands) still meet the busy handler.
    writer: Mutex<()>,
    /// `--sqlite-sync full`: a write returns only once its commit is fsynced ([`group_sync`]).
    durable_commits: AtomicBool,
    /// Commits made (numbered under `writer`, so in commit order).
    committed: AtomicU64,
    /// How many of them an fsync of the `-wal` file has made durable. Held during the fsync:
    /// the writers that commit meanwhile queue here and the next fsync covers them all.
    synced: Mutex<u64>,
    /// fsyncs of the `-wal` file (tests count them).
    fsyncs: AtomicU64,
    /// An fsync failed: the kernel may have dropped the unwritten pages and a later fsync could
    /// succeed without them, so no later commit is called durable until a restart.
    sync_failed: AtomicBool,
}

/// The [`FileState`] of the database file `conn` is open on.
fn file_state(conn: &Connection) -> Arc<FileState> {
    static FILES: OnceLock<Mutex<HashMap<String, Arc<FileState>>>> = OnceLock::new();
    let path = conn.path().unwrap_or_default().to_string();
    FILES
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry(path)
        .or_default()
        .clone()
}

/// Group commit (`--sqlite-sync full`): makes commit number `seq` durable before its write
/// returns. Connections run `synchronous=NORMAL`, which writes a commit to the `-wal` file
/// without an fsync (checkpoints still fsync the WAL and the database as they copy back); one
/// fsync of the `-wal` file here then covers every commit made before it, so the writers that
/// committed while another fsync ran share the next one, instead of taking one each inside
/// the writer lock as `synchronous=FULL` does. An acknowledged write is on disk either way.
fn group_sync(conn: &Connection, state: &FileState, seq: u64) -> rusqlite::Result<()> {
    let io_error = |why: String| {
        rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_IOERR),
            Some(why),
        )
    };
    let mut synced = state.synced.lock().unwrap_or_else(|e| e.into_inner());
    if state.sync_failed.load(SeqCst) {
        return Err(io_error(
            "an earlier fsync of the database's -wal file failed; check the disk, then restart"
                .into(),
        ));
    }
    if *synced >= seq {
        return Ok(());
    }
    let upto = state.committed.load(SeqCst);
    let wal = wal_path(Path::new(conn.path().unwrap_or_default()));
    state.fsyncs.fetch_add(1, SeqCst);
    match std::fs::File::open(&wal).and_then(|f| f.sync_data()) {
        Ok(()) => {}
        // Checkpointed and removed as the last other connection closed: the commit is in the
        // database file, which that checkpoint fsynced.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            state.sync_failed.store(true, SeqCst);
            return Err(io_error(format!("fsync of {} failed: {e}", wal.display())));
        }
    }
    *synced = upto;
    Ok(())
}

/// Runs `f` in an IMMEDIATE transaction (the write lock is taken up front, so two writers
/// never deadlock upgrading a read lock) and commits it when `f` succeeds; with
/// `--sqlite-sync full` (the default) it returns once the commit is on disk ([`group_sync`]).
/// Must not be nested.
pub fn write_tx<T, E>(
    conn: &mut Connection,
    f: impl FnOnce(&rusqlite::Transaction<'_>) -> Result<T, E>,
) -> Result<T, E>
where
    E: From<rusqlite::Error>,
{
    write_tx_synced(conn, true, f)
}

/// [`write_tx`]; `wait_for_disk: false` returns right after the commit, whose frames the next
/// group fsync covers (`Store::write_unsynced_dyn`).
fn write_tx_synced<T, E>(
    conn: &mut Connection,
    wait_for_disk: bool,
    f: impl FnOnce(&rusqlite::Transaction<'_>) -> Result<T, E>,
) -> Result<T, E>
where
    E: From<rusqlite::Error>,
{
    let state = file_state(conn);
    let (seq, out) = {
        let _queued = state.writer.lock().unwrap_or_else(|e| e.into_inner());
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let out = f(&tx)?;
        tx.commit()?;
        (state.committed.fetch_add(1, SeqCst) + 1, out)
    };
    if wait_for_disk && state.durable_commits.load(SeqCst) {
        group_sync(conn, &state, seq)?;
    }
    Ok(out)
}

/// The `WHERE` clause of a list request, built only from the filters it actually gives:
/// `status = ?` lets SQLite search an index, where `(? IS NULL OR status = ?)` makes it scan
/// every row of the app. Each combination of filters is its own cached statement.
#[derive(Debug, Clone)]
pub struct Filters {
    clauses: Vec<String>,
    values: Vec<rusqlite::types::Value>,
}

impl Filters {
    /// Rows of one app.
    pub fn app(app_id: &str) -> Self {
        Filters {
            clauses: vec!["app_id = ?1".into()],
            values: vec![app_id.to_string().into()],
        }
    }

    /// Adds `column = value` when a value is given.
    pub fn eq<V: Into<rusqlite::types::Value>>(mut self, column: &str, value: Option<V>) -> Self {
        if let Some(value) = value {
            self.values.push(value.into());
            self.clauses
                .push(format!("{column} = ?{}", self.values.len()));
        }
        self
    }

    /// Adds `column = 'value'` with the value written into the SQL when it is one of `known`
    /// (a closed set such as task states), else bound like [`Filters::eq`]. A bound value on a
    /// column that partial indexes test (`WHERE status = 'pending'`) makes SQLite re-plan the
    /// statement on every call, which halved `GET /tasks?status=` (BENCHMARKS.md); each known
    /// value is instead its own cached statement.
    pub fn eq_known(mut self, column: &str, value: Option<&str>, known: &[&str]) -> Self {
        match value {
            Some(v) if known.contains(&v) => {
                self.clauses.push(format!("{column} = '{v}'"));
                self
            }
            other => self.eq(column, other.map(str::to_string)),
        }
    }

    /// Adds `column <op> value`, e.g. `finished_at >= ?`. `op` is the caller's constant.
    pub fn cmp<V: Into<rusqlite::types::Value>>(
        mut self,
        column: &str,
        op: &str,
        value: V,
    ) -> Self {
        self.values.push(value.into());
        self.clauses
            .push(format!("{column} {op} ?{}", self.values.len()));
        self
    }

    /// The conditions joined with `AND`, their parameters numbered from `?1`.
    pub fn condition(&self) -> String {
        self.clauses.join(" AND ")
    }

    /// The parameters of [`Filters::condition`], in order.
    pub fn values(&self) -> &[rusqlite::types::Value] {
        &self.values
    }

    /// Adds a fixed condition with no parameter, e.g. `status != 'deleted'`.
    pub fn always(mut self, condition: &str) -> Self {
        self.clauses.push(condition.to_string());
        self
    }
}

/// One page of `table` (newest first) matching `filters`, and the total count of matches.
pub fn list_page<T>(
    conn: &Connection,
    table: &str,
    columns: &str,
    filters: &Filters,
    page: Page,
    from_row: impl FnMut(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
) -> rusqlite::Result<(i64, Vec<T>)> {
    let condition = filters.condition();
    let total = conn
        .prepare_cached(&format!("SELECT count(*) FROM {table} WHERE {condition}"))?
        .query_row(rusqlite::params_from_iter(&filters.values), |r| r.get(0))?;
    let n = filters.values.len();
    // `LIMIT ? + 0`: with a bare `LIMIT ?` SQLite plans with the bound value, so every new
    // value would recompile the statement.
    let sql = format!(
        "SELECT {columns} FROM {table} WHERE {condition} ORDER BY id DESC LIMIT ?{} + 0 OFFSET ?{} + 0",
        n + 1,
        n + 2
    );
    let mut values = filters.values.clone();
    values.push(page.limit().into());
    values.push(page.offset().into());
    let items = conn
        .prepare_cached(&sql)?
        .query_map(rusqlite::params_from_iter(&values), from_row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok((total, items))
}

/// Longest a rewinding checkpoint waits for readers of an older snapshot (writers wait too).
const CHECKPOINT_WAIT: Duration = Duration::from_secs(1);
/// The WAL is rewound once this share of `--wal-limit-mb` is written to it (1/2): the file
/// then stays under the limit with room for what is written while the checkpoint runs.
const REWIND_AT_DIVISOR: u64 = 2;
/// PASSIVE passes run before the writers are held, each copying back what was written during
/// the one before, until fewer than [`SMALL_REST`] frames came in meanwhile.
const COPY_AHEAD_PASSES: u32 = 3;
const SMALL_REST: u64 = 256;
/// How far ahead the checkpointer looks: the WAL is watched at every tick (not only at the
/// PASSIVE ones) while it could reach its rewind point within this time at its current pace.
const LOOK_AHEAD: Duration = Duration::from_millis(500);

/// Where the WAL stood at the last PASSIVE checkpoint, and whether it is near its rewind point.
#[derive(Debug)]
struct WalSeen {
    written: u64,
    at: std::time::Instant,
    near: bool,
}

impl Default for WalSeen {
    fn default() -> Self {
        WalSeen {
            written: 0,
            at: std::time::Instant::now(),
            near: false,
        }
    }
}

impl WalSeen {
    /// Records `written` frames now. Near: at the pace since the last look, the WAL reaches
    /// `rewind_at` bytes within [`LOOK_AHEAD`]; after a rewind the pace is unknown, so near.
    fn update(&mut self, written: u64, bytes: impl Fn(u64) -> u64, rewind_at: u64) {
        let now = std::time::Instant::now();
        let elapsed = now.duration_since(self.at).as_secs_f64().max(1e-3);
        let ahead = match written.checked_sub(self.written) {
            Some(grew) => bytes(grew) as f64 * LOOK_AHEAD.as_secs_f64() / elapsed,
            None => rewind_at as f64,
        };
        self.near = bytes(written) as f64 + ahead >= rewind_at as f64;
        self.written = written;
        self.at = now;
    }
}

/// The smallest rewind point on a small or nearly full disk.
const MIN_REWIND_BYTES: u64 = 1024 * 1024;

/// Where the WAL is rewound (bytes written to it), and whether each rewind also cuts the file
/// to zero (`TRUNCATE`), given `--wal-limit-mb`, the free space of the disk and the WAL's
/// size. With room to spare, half the limit and a `RESTART` that keeps the file for reuse. On
/// a small or nearly full disk — less than four rewind points of room, counting the WAL's own
/// space — a quarter of that room (at least [`MIN_REWIND_BYTES`]) and `TRUNCATE`: space the
/// WAL holds is space the database file cannot grow into, and with a fixed rewind point writes
/// were refused on a small disk with 12.5 MB of WAL beside a 1.8 MB database (README,
/// "Storage and durability").
fn rewind_point(wal_limit_bytes: u64, free_bytes: Option<u64>, wal_bytes: u64) -> (u64, bool) {
    let roomy = wal_limit_bytes / REWIND_AT_DIVISOR;
    let Some(free) = free_bytes else {
        return (roomy, false);
    };
    let quarter = free.saturating_add(wal_bytes) / 4;
    if quarter >= roomy {
        (roomy, false)
    } else {
        (quarter.max(MIN_REWIND_BYTES).min(roomy), true)
    }
}

/// What one WAL frame takes beyond its page: its header.
const FRAME_HEADER_BYTES: u64 = 24;

/// A SQLite database file behind a pool: the `store::Store` of a `--db` path.
pub struct SqliteStore {
    pool: Pool,
    path: PathBuf,
    health: DbHealth,
    checkpoint_wait: Duration,
    /// The last PASSIVE checkpoint's look at the WAL ([`SqliteStore::maintain`]).
    wal_seen: Mutex<WalSeen>,
    /// `written` of the last rewinding checkpoint.
    rewound_at: std::sync::atomic::AtomicU64,
    /// Whether the last attempt to rewind the WAL found a reader in the way (one warning each time).
    held_back: std::sync::atomic::AtomicBool,
    /// When writes last came, for [`SqliteStore::release_memory_when_idle`].
    quiet: Mutex<Quiet>,
}

/// How long writes may only trickle ([`QUIET_FRAMES`] WAL frames at most) before the
/// connections' caches are given back.
const QUIET_FRAMES: u64 = 100;
/// The quiet time itself.
const QUIET_BEFORE_RELEASE: Duration = Duration::from_secs(10);

/// The WAL as last seen by [`SqliteStore::release_memory_when_idle`].
#[derive(Debug)]
struct Quiet {
    written: u64,
    since: std::time::Instant,
    released: bool,
}

impl Default for Quiet {
    fn default() -> Self {
        Quiet {
            written: 0,
            since: std::time::Instant::now(),
            released: false,
        }
    }
}

impl SqliteStore {
    /// Opens (creating with mode 0600 if absent) a webhookd database, refuses foreign or newer
    /// files untouched and applies pending schema upgrades ([`open`]).
    pub fn open(path: &Path, options: crate::store::OpenOptions) -> anyhow::Result<SqliteStore> {
        let pool = open_limited(
            path,
            options.pool_size,
            options.wal_limit_bytes,
            options.sqlite_sync,
        )?;
        Ok(SqliteStore {
            pool,
            path: path.to_path_buf(),
            health: DbHealth::new(path),
            checkpoint_wait: options.checkpoint_wait,
            wal_seen: Mutex::new(WalSeen::default()),
            rewound_at: Default::default(),
            held_back: Default::default(),
            quiet: Mutex::default(),
        })
    }

    /// Opens an existing database for `webhookd backup`: refuses a missing or foreign file,
    /// creates nothing and upgrades nothing. Errors are the caller's usage errors.
    pub fn open_existing(path: &Path) -> anyhow::Result<SqliteStore> {
        if !path.is_file() {
            bail!("{} does not exist or is not a file", path.display());
        }
        {
            let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_WRITE)
                .with_context(|| format!("cannot open database {}", path.display()))?;
            migrate::check_is_ours(&conn, path)?;
        }
        let manager = SqliteConnectionManager::file(path)
            .with_flags(OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX)
            .with_init(|conn| conn.busy_timeout(Duration::from_secs(30)));
        let pool = r2d2::Pool::builder()
            .max_size(1)
            .connection_timeout(Duration::from_secs(30))
            .build(manager)
            .context("cannot open the database")?;
        Ok(SqliteStore {
            pool,
            path: path.to_path_buf(),
            health: DbHealth::new(path),
            checkpoint_wait: CHECKPOINT_WAIT,
            wal_seen: Mutex::new(WalSeen::default()),
            rewound_at: Default::default(),
            held_back: Default::default(),
            quiet: Mutex::default(),
        })
    }

    /// One pooled connection (tests, tools).
    pub fn conn(&self) -> Result<Conn, StoreError> {
        Ok(self.pool.get()?)
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// After a load, gives memory back once writes have only trickled for
    /// [`QUIET_BEFORE_RELEASE`] (`written`: the WAL's frame count at this PASSIVE checkpoint): each idle connection
    /// drops its page cache (`PRAGMA shrink_memory`, up to `cache_size` each, the pool holds
    /// `--workers` + 8) and its cached statements, then glibc's allocator returns the freed
    /// pages to the system (`malloc_trim`; its per-thread arenas keep them otherwise). Without
    /// it, RSS stayed at 32 MiB after a publish run (13 MiB at start); README, "Memory".
    fn release_memory_when_idle(&self, written: u64) {
        {
            let mut quiet = self.quiet.lock().unwrap_or_else(|e| e.into_inner());
            // A health probe or a trickle of writes is quiet; a rewound WAL is not.
            let came = written.checked_sub(quiet.written).unwrap_or(u64::MAX);
            if came > QUIET_FRAMES {
                *quiet = Quiet {
                    written,
                    ..Quiet::default()
                };
                return;
            }
            if quiet.released || quiet.since.elapsed() < QUIET_BEFORE_RELEASE {
                return;
            }
            quiet.released = true;
        }
        // Every idle connection at once (the pool hands the last returned one out first).
        let idle: Vec<Conn> = std::iter::from_fn(|| self.pool.try_get()).collect();
        for conn in &idle {
            conn.flush_prepared_statement_cache();
            if let Err(e) = conn.execute_batch("PRAGMA shrink_memory") {
                tracing::debug!(error = %e, "shrink_memory failed");
            }
        }
        let connections = idle.len();
        drop(idle);
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        // SAFETY: malloc_trim only walks and trims glibc's own heaps; it takes no pointer.
        unsafe {
            libc::malloc_trim(0);
        }
        tracing::debug!(connections, "idle: database caches released");
    }
}

impl crate::store::Store for SqliteStore {
    fn read_dyn(
        &self,
        f: &mut dyn FnMut(&mut dyn crate::store::Tx) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let conn = self.pool.get()?;
        f(&mut SqliteTx(&conn))
    }

    fn write_dyn(
        &self,
        f: &mut dyn FnMut(&mut dyn crate::store::Tx) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let mut conn = self.pool.get()?;
        write_tx(&mut conn, |tx| f(&mut SqliteTx(tx)))
    }

    fn write_unsynced_dyn(
        &self,
        f: &mut dyn FnMut(&mut dyn crate::store::Tx) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let mut conn = self.pool.get()?;
        write_tx_synced(&mut conn, false, |tx| f(&mut SqliteTx(tx)))
    }

    fn quick_check(&self) -> Result<(), StoreError> {
        self.health.file_problem()
    }

    fn health(&self, now_ms: i64) -> Result<(), StoreError> {
        self.health.check(&self.pool, now_ms)
    }

    fn require_writable(&self, now_ms: i64) -> anyhow::Result<()> {
        let mut conn = self.pool.get()?;
        health::require_writable(&mut conn, &self.path, now_ms)
    }

    /// A PASSIVE checkpoint when `passive`, and on the ticks between while the WAL nears the
    /// point where it is rewound (`WalSeen`); past that point (half of `wal_limit_bytes` written since the
    /// last rewind), PASSIVE passes copy back what they can while writers go on, then
    /// [`checkpoint_restart`] holds the writers for the last frames and the rewind. The file
    /// thus stays under the limit plus what is written during one check and checkpoint, and
    /// each stop of the writers is short (BENCHMARKS.md).
    fn maintain(&self, passive: bool, wal_limit_bytes: u64) -> anyhow::Result<()> {
        use std::sync::atomic::Ordering::Relaxed;
        let near = self.wal_seen.lock().unwrap_or_else(|e| e.into_inner()).near;
        // What is written since the last rewind is never more than the file holds.
        let size = std::fs::metadata(wal_path(&self.path)).map_or(0, |m| m.len());
        let free = crate::health::free_bytes(&self.path);
        let (rewind_at, truncate) = rewind_point(wal_limit_bytes, free, size);
        if !passive && (!near || size <= rewind_at) {
            return Ok(());
        }
        let conn = self.pool.get()?;
        let page: u32 = conn.query_row("PRAGMA page_size", [], |r| r.get(0))?;
        let frame = u64::from(page) + FRAME_HEADER_BYTES;
        let bytes = |frames: u64| frames.saturating_mul(frame);
        let mut state = checkpoint(&conn)?;
        drop(conn);
        self.release_memory_when_idle(state.written);
        let conn = self.pool.get()?;
        self.wal_seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .update(state.written, bytes, rewind_at);
        if bytes(state.written) <= rewind_at
            || (state.copied == state.written && self.rewound_at.load(Relaxed) == state.written)
        {
            // Below the mark, or rewound already and no writer has come since.
            return Ok(());
        }
        for _ in 0..COPY_AHEAD_PASSES {
            let next = checkpoint(&conn)?;
            let came = next.written.saturating_sub(state.written);
            state = next;
            if came < SMALL_REST {
                break;
            }
        }
        // A reader on a snapshot this old would keep the writers waiting for it: leave them be
        // and look again at the next tick.
        let behind = bytes(state.written.saturating_sub(state.copied));
        let done = if behind > rewind_at / 4 {
            None
        } else {
            let mode = if truncate { "TRUNCATE" } else { "RESTART" };
            Some(checkpoint_rewind(&conn, self.checkpoint_wait, mode)?).filter(|done| !done.busy)
        };
        match done {
            Some(done) => {
                self.rewound_at.store(done.written, Relaxed);
                self.held_back.store(false, Relaxed);
                tracing::debug!(
                    bytes = bytes(done.written),
                    truncated = truncate,
                    "WAL copied back; the next writer rewinds it"
                );
            }
            None if !self.held_back.swap(true, Relaxed) => tracing::warn!(
                bytes = bytes(state.written),
                "the WAL is past its rewind point and a reader holds an old snapshot; it is \
                 rewound once the reader ends"
            ),
            None => {}
        }
        Ok(())
    }

    /// `VACUUM INTO`, which reads one snapshot in a single read transaction, so writers are not
    /// blocked and every commit made before it started is in the copy; then checks the copy
    /// with `PRAGMA integrity_check` (every page, index and constraint; the copy is not in
    /// use, so its cost falls on no request). `out` must exist (empty): the caller creates it
    /// exclusively with mode 0600.
    fn backup(&self, out: &Path) -> anyhow::Result<()> {
        let source = self.pool.get()?;
        let target = out.to_str().context("the backup path is not valid UTF-8")?;
        source
            .execute("VACUUM INTO ?1", [target])
            .context("the copy failed")?;
        drop(source);
        let copy = Connection::open_with_flags(out, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
        let check: String = copy.query_row("PRAGMA integrity_check", [], |r| r.get(0))?;
        anyhow::ensure!(check == "ok", "the copy does not check out: {check}");
        Ok(())
    }

    fn describe(&self) -> String {
        format!("sqlite {}", self.path.display())
    }

    fn backend(&self) -> &'static str {
        "sqlite"
    }

    fn watch(
        &self,
        _wakers: crate::store::Wakers,
        _poll: Duration,
        _poll_only: bool,
    ) -> anyhow::Result<crate::store::Watcher> {
        Ok(crate::store::Watcher::none())
    }
}

/// SQLite's "cannot write" errors become the unavailable causes that say what to fix
/// (contract §10); anything else is `Other`.
impl From<rusqlite::Error> for StoreError {
    fn from(err: rusqlite::Error) -> Self {
        use rusqlite::ErrorCode;
        match err.sqlite_error_code() {
            Some(ErrorCode::DiskFull) => {
                tracing::warn!(error = %err, "database write failed: disk full");
                StoreError::DiskFull(
                    "the disk holding the database is full; free space on it (writes resume without a restart)".into(),
                )
            }
            Some(ErrorCode::ReadOnly) => {
                tracing::warn!(error = %err, "database write failed: read-only");
                StoreError::Unwritable(
                    "the database is read-only: webhookd needs write permission on the database file and its folder, on a file system mounted read-write".into(),
                )
            }
            Some(ErrorCode::SystemIoFailure | ErrorCode::CannotOpen) => {
                tracing::warn!(error = %err, "database I/O failed");
                StoreError::Unwritable(
                    "the database cannot be read or written (I/O error); check the disk holding it and the server log".into(),
                )
            }
            _ => StoreError::Other(err.into()),
        }
    }
}

impl From<r2d2::Error> for StoreError {
    fn from(err: r2d2::Error) -> Self {
        tracing::warn!(error = %err, "no database connection");
        StoreError::Unwritable(
            "no connection to the database could be opened; check the database file, its disk and the server log".into(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sqlite(code: i32) -> rusqlite::Error {
        rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), None)
    }

    /// `Store::write` commits when its closure succeeds, rolls back and returns the caller's
    /// own error when it fails; `read` sees only what was committed.
    #[test]
    fn write_commits_on_ok_and_rolls_back_on_the_callers_error() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("t.sqlite");
        let store = crate::store::open(db.to_str().unwrap(), 2).unwrap();
        #[derive(Debug, PartialEq)]
        enum Mine {
            Refused,
            Store(String),
        }
        impl From<StoreError> for Mine {
            fn from(e: StoreError) -> Self {
                Mine::Store(e.to_string())
            }
        }
        let refused = store.write(|tx| {
            tx.create_key("app1", "k", 1)?;
            Err::<(), _>(Mine::Refused)
        });
        assert_eq!(refused, Err(Mine::Refused));
        assert_eq!(store.read(|tx| tx.count_keys()).unwrap(), 0);
        let key = store.write(|tx| tx.create_key("app1", "k", 1)).unwrap();
        assert_eq!(store.read(|tx| tx.count_keys()).unwrap(), 1);
        let found = store.read(|tx| tx.lookup_key(&key.key_id)).unwrap();
        assert_eq!(found, Some((key.secret, "app1".to_string())));
        assert_eq!(store.read(|tx| tx.rescue_expired_leases(0)).unwrap(), 0);
        assert_eq!(store.backend(), "sqlite");
    }

    /// A 200 means "on disk": with `--sqlite-sync full` (the default) a write returns after an
    /// fsync of the `-wal` file covering its commit; writers that commit while an fsync runs
    /// share the next one. `normal` never fsyncs at commit.
    #[test]
    fn writes_return_after_a_shared_fsync_by_default_and_none_on_request() {
        use std::sync::atomic::Ordering::SeqCst;
        let dir = tempfile::tempdir().unwrap();
        for (sync, durable) in [(SqliteSync::default(), true), (SqliteSync::Normal, false)] {
            let db = dir.path().join(format!("{durable}.sqlite"));
            let pool = open_limited(&db, 8, crate::config::DEFAULT_WAL_LIMIT_BYTES, sync).unwrap();
            let found: i64 = pool
                .get()
                .unwrap()
                .query_row("PRAGMA synchronous", [], |r| r.get(0))
                .unwrap();
            assert_eq!(found, 1, "NORMAL; the fsync is write_tx's");
            let state = file_state(&pool.get().unwrap());
            let before = state.fsyncs.load(SeqCst);
            std::thread::scope(|s| {
                for t in 0..8 {
                    let pool = &pool;
                    s.spawn(move || {
                        let mut conn = pool.get().unwrap();
                        for i in 0..25 {
                            write_tx(&mut conn, |tx| {
                                tx.execute(
                                    "INSERT INTO health_probe (id, checked_at) VALUES (1, ?1)
                                     ON CONFLICT (id) DO UPDATE SET checked_at = ?1",
                                    [t * 100 + i],
                                )
                            })
                            .unwrap();
                        }
                    });
                }
            });
            let fsyncs = state.fsyncs.load(SeqCst) - before;
            if durable {
                assert!(
                    (1..=200).contains(&fsyncs),
                    "{fsyncs} fsyncs for 200 commits"
                );
                assert_eq!(*state.synced.lock().unwrap(), state.committed.load(SeqCst));
            } else {
                assert_eq!(fsyncs, 0);
            }
        }
        assert_eq!(
            crate::config::Config::new("x").sqlite_sync,
            SqliteSync::Full
        );
    }

    #[test]
    fn the_wal_rewinds_sooner_and_gives_its_space_back_on_a_small_disk() {
        const MB: u64 = 1024 * 1024;
        let limit = 64 * MB;
        // Room to spare, or free space unknown: half the limit, the file kept for reuse.
        assert_eq!(rewind_point(limit, Some(10_000 * MB), 0), (32 * MB, false));
        assert_eq!(rewind_point(limit, Some(128 * MB), 0), (32 * MB, false));
        assert_eq!(rewind_point(limit, None, 0), (32 * MB, false));
        // A 16 MB disk: a quarter of the room the WAL and the free space make, truncated.
        assert_eq!(rewind_point(limit, Some(12 * MB), 4 * MB), (4 * MB, true));
        assert_eq!(rewind_point(limit, Some(100 * MB), 0), (25 * MB, true));
        // Nearly full: never below 1 MiB; a small --wal-limit-mb still bounds it.
        assert_eq!(rewind_point(limit, Some(MB / 2), 0), (MB, true));
        assert_eq!(rewind_point(2 * MB, Some(MB), 0), (MB, true));
    }

    #[test]
    fn unwritable_database_errors_map_to_their_causes() {
        let full = StoreError::from(sqlite(rusqlite::ffi::SQLITE_FULL));
        assert!(
            matches!(&full, StoreError::DiskFull(m) if m.contains("disk holding the database is full"))
        );
        let ro = StoreError::from(sqlite(rusqlite::ffi::SQLITE_READONLY));
        assert!(matches!(&ro, StoreError::Unwritable(m) if m.contains("read-only")));
        let io = StoreError::from(sqlite(rusqlite::ffi::SQLITE_IOERR));
        assert!(matches!(io, StoreError::Unwritable(_)));
        let other = StoreError::from(sqlite(rusqlite::ffi::SQLITE_CONSTRAINT));
        assert!(matches!(other, StoreError::Other(_)));
    }
}
