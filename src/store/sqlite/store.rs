//! [`SqliteStore`]: the `store::Store` of a `--db` file path, and [`SqliteTx`], its
//! `store::Tx` (each table's query trait is implemented on it in that table's file).

use super::wal::Checkpointer;
use super::{Conn, DbHealth, Pool, health, migrate, open_limited, wal_path};
use crate::store::StoreError;
use anyhow::{Context, bail};
use r2d2_sqlite::SqliteConnectionManager;
use rusqlite::{Connection, OpenFlags};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::SeqCst;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// `store::Tx` over one SQLite connection: a pooled one for reads, the open transaction for
/// writes (a `rusqlite::Transaction` derefs to its connection).
pub struct SqliteTx<'c>(pub &'c Connection);

/// What the in-process writers of one database file share.
#[derive(Default)]
pub(super) struct FileState {
    /// The lock writers queue on before `BEGIN IMMEDIATE`, and the group transaction it
    /// guards ([`write_grouped`]). Without the lock, writers meet SQLite's busy handler, which
    /// sleeps 1, 2, 5 … 100 ms between tries and turned contention between API threads and
    /// the delivery dispatcher into 50–900 ms stalls (BENCHMARKS.md). Other processes (the
    /// `keys` commands) still meet the busy handler. Whoever takes it for anything but joining
    /// the open group commits that group first ([`lock_writer`]).
    pub(super) writer: Mutex<Writer>,
    /// Writers waiting for [`FileState::writer`]: while there are some, a group is left open
    /// for them to join.
    queued: AtomicUsize,
    /// How groups ended, for their members waiting on [`FileState::ended`].
    outcomes: Mutex<Outcomes>,
    ended: Condvar,
    /// `--sqlite-sync full`: a write returns only once its commit is fsynced ([`group_sync`]).
    pub(super) durable_commits: AtomicBool,
    /// Commits made (numbered under `writer`, so in commit order).
    committed: AtomicU64,
    /// How many of them an fsync of the `-wal` file has made durable. Held during the fsync:
    /// the writers that commit meanwhile queue here and the next fsync covers them all.
    synced: Mutex<u64>,
    /// An fsync of the `-wal` file is under way ([`write_grouped`]).
    syncing: AtomicBool,
    /// fsyncs of the `-wal` file (tests count them).
    fsyncs: AtomicU64,
    /// An fsync failed: the kernel may have dropped the unwritten pages and a later fsync could
    /// succeed without them, so no later commit is called durable until a restart.
    sync_failed: AtomicBool,
    /// The ids of `events`, `tasks` and `attempts` reserved and not yet used ([`super::ids`]).
    pub(super) ids: Mutex<super::ids::IdBlocks>,
}

/// The writer side of a database file, behind [`FileState::writer`].
#[derive(Default)]
pub(super) struct Writer {
    /// The group transaction open for more writers to join, if any.
    open: Option<Group>,
    /// Groups opened so far (their numbers).
    groups: u64,
}

/// Writes of several threads in one transaction ([`write_grouped`]).
struct Group {
    /// The connection it is open on: its first writer's, given back to the pool at the end.
    conn: Conn,
    number: u64,
    /// Writes in it that succeeded.
    members: usize,
    /// When it began.
    begun: Instant,
    /// Members waiting for it to end.
    waiting: usize,
    /// A member's closure is running (set around the call): found set by the next holder of
    /// the lock, the closure panicked midway and the group is rolled back, not committed.
    busy: bool,
}

/// How the groups that members wait for ended: the commit's number ([`group_sync`]) or why it
/// failed, kept until each waiting member has read it.
#[derive(Default)]
struct Outcomes(HashMap<u64, (Result<u64, Failure>, usize)>);

/// A failed group commit as each of its members gets it back.
#[derive(Clone)]
struct Failure {
    code: rusqlite::ffi::Error,
    message: String,
}

impl Failure {
    fn of(e: &rusqlite::Error) -> Failure {
        let code = match e {
            rusqlite::Error::SqliteFailure(code, _) => *code,
            _ => rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ERROR),
        };
        Failure {
            code,
            message: format!("the group commit failed: {e}"),
        }
    }

    fn error(&self) -> rusqlite::Error {
        rusqlite::Error::SqliteFailure(self.code, Some(self.message.clone()))
    }
}

/// Most writes in one group transaction, and the longest a group stays open for more: each
/// member waits for the group's commit, so these bound how long the first one (the delivery
/// dispatcher's round among them) waits for the others.
const MAX_GROUP: usize = 64;
/// (Unbounded under test: the unit test of grouping queues its writers first and must not
/// depend on how fast a loaded machine runs them.)
const MAX_GROUP_OPEN: Duration = if cfg!(test) {
    Duration::from_secs(600)
} else {
    Duration::from_millis(1)
};

/// How long a member waits for its group to end before it looks whether the group is left
/// open with nobody to end it (its last writer panicked) and ends it itself.
const GROUP_WAIT: Duration = Duration::from_millis(20);

/// Takes the writer lock for a write of its own (not joining a group): the open group is
/// committed first, so that its members are answered and the caller starts from a closed
/// transaction.
pub(super) fn lock_writer(state: &FileState) -> MutexGuard<'_, Writer> {
    let mut w = state.writer.lock().unwrap_or_else(|e| e.into_inner());
    end_group(state, &mut w);
    w
}

/// Ends the open group, if any: committed, or rolled back when a member panicked inside it;
/// its waiting members are told how it ended and its connection goes back to the pool.
/// Returns the commit's number.
fn end_group(state: &FileState, w: &mut Writer) -> Option<Result<u64, Failure>> {
    let group = w.open.take()?;
    let outcome = if group.busy {
        Err(Failure {
            code: rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ABORT),
            message: "a write of the group transaction stopped midway; the group was rolled back"
                .into(),
        })
    } else {
        group
            .conn
            .prepare_cached("COMMIT")
            .and_then(|mut s| s.execute([]))
            .map(|_| state.committed.fetch_add(1, SeqCst) + 1)
            .map_err(|e| Failure::of(&e))
    };
    if outcome.is_err() && !group.conn.is_autocommit() {
        let _ = group.conn.execute_batch("ROLLBACK");
    }
    if group.waiting > 0 {
        lock(&state.outcomes)
            .0
            .insert(group.number, (outcome.clone(), group.waiting));
        state.ended.notify_all();
    }
    Some(outcome)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs one cached statement without parameters (`BEGIN IMMEDIATE`, `SAVEPOINT …`).
fn run_cached(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(|_| ())
}

/// Group commit: runs `f` in the write transaction of a group, committed once for all its
/// writes. The first writer to find no group open begins one on its own connection; a writer
/// that takes the lock while a group is open runs inside it, behind a savepoint, so that its
/// failure rolls back its own changes only. The writer that finds nobody queued behind it (or
/// the group full, [`MAX_GROUP`]) commits; the others wait for that commit, and every write
/// returns only after the commit that holds it (with `--sqlite-sync full`, after an fsync
/// covering it: [`group_sync`]). Each transaction writes every page it touches in full, and
/// the writes of one moment touch the same pages (the tail of `tasks`, of each index, the
/// counters): one commit for all of them writes those pages once (BENCHMARKS.md, "The SQLite
/// write path"). Must not be nested.
fn write_grouped<T, E>(
    conn: Conn,
    wait_for_disk: bool,
    f: impl FnOnce(&Connection) -> Result<T, E>,
) -> Result<T, E>
where
    E: From<rusqlite::Error>,
{
    let state = file_state(&conn);
    let wal = wal_path(Path::new(conn.path().unwrap_or_default()));
    state.queued.fetch_add(1, SeqCst);
    let mut w = state.writer.lock().unwrap_or_else(|e| e.into_inner());
    state.queued.fetch_sub(1, SeqCst);
    if w.open.as_ref().is_some_and(|g| g.busy) {
        end_group(&state, &mut w);
    }
    let out = match w.open.as_mut() {
        None => {
            run_cached(&conn, "BEGIN IMMEDIATE")?;
            // Rolls back if `f` panics: the connection goes back to the pool either way, and
            // must not take an open transaction (the file's write lock) with it.
            let begun = RollbackOnDrop(&conn);
            let out = f(&conn);
            std::mem::forget(begun);
            match out {
                Ok(out) => {
                    w.groups += 1;
                    w.open = Some(Group {
                        conn,
                        number: w.groups,
                        members: 1,
                        begun: Instant::now(),
                        waiting: 0,
                        busy: false,
                    });
                    Ok(out)
                }
                Err(e) => {
                    if !conn.is_autocommit() {
                        run_cached(&conn, "ROLLBACK")?;
                    }
                    return Err(e);
                }
            }
        }
        Some(group) => {
            drop(conn);
            run_cached(&group.conn, "SAVEPOINT member")?;
            group.busy = true;
            let out = f(&group.conn);
            group.busy = false;
            let undone = match &out {
                Ok(_) => {
                    group.members += 1;
                    Ok(())
                }
                Err(_) => run_cached(&group.conn, "ROLLBACK TO member"),
            };
            if let Err(e) = undone.and_then(|()| run_cached(&group.conn, "RELEASE member")) {
                // The group's transaction is in an unknown state: roll it all back.
                group.busy = true;
                end_group(&state, &mut w);
                return Err(e.into());
            }
            out
        }
    };
    // Someone queued behind this write joins the group or ends it; while the `-wal` file is
    // fsynced for earlier commits, a durable write would wait for that fsync to end and then
    // for its own: it waits in the group instead, which the fsync's writer commits when done
    // ([`group_sync`]), so one commit and one fsync cover every write that came meanwhile.
    let durable = wait_for_disk && state.durable_commits.load(SeqCst);
    let queued = state.queued.load(SeqCst) > 0 || (durable && state.syncing.load(SeqCst));
    let seq = match w.open.as_mut() {
        // A failed first write opened no group.
        None => return out,
        Some(group)
            if queued && group.members < MAX_GROUP && group.begun.elapsed() < MAX_GROUP_OPEN =>
        {
            if let Err(e) = out {
                // Its own changes are undone: nothing of it waits for the commit.
                return Err(e);
            }
            group.waiting += 1;
            let number = group.number;
            drop(w);
            wait_for_group(&state, number)
        }
        Some(_) => {
            let ended = end_group(&state, &mut w);
            drop(w);
            match ended {
                Some(ended) => ended,
                None => return out,
            }
        }
    };
    let out = out?;
    let seq = seq.map_err(|f| E::from(f.error()))?;
    if durable {
        group_sync(&wal, &state, seq)?;
    }
    Ok(out)
}

/// Runs a read in one deferred transaction: SQLite takes the WAL read lock (two `fcntl` on the
/// `-shm` file, and its in-process mutex) at the first statement and keeps it to the `COMMIT`,
/// instead of taking and dropping it around every statement, and the read's statements all
/// see one snapshot (docs/dev/storage.md, "Reads on the runtime's thread"). A read that
/// fails or panics is rolled back, so the connection goes back to the pool with no
/// transaction open.
fn read_tx<T>(
    conn: &Connection,
    f: impl FnOnce(&Connection) -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    run_cached(conn, "BEGIN")?;
    let begun = RollbackOnDrop(conn);
    let out = f(conn)?;
    run_cached(conn, "COMMIT")?;
    drop(begun);
    Ok(out)
}

/// Rolls back the transaction open on its connection when dropped (see [`write_grouped`]).
struct RollbackOnDrop<'c>(&'c Connection);

impl Drop for RollbackOnDrop<'_> {
    fn drop(&mut self) {
        if !self.0.is_autocommit() {
            let _ = self.0.execute_batch("ROLLBACK");
        }
    }
}

/// Waits until group `number` has ended and returns how; ends it itself if it is left open
/// with nobody to end it.
fn wait_for_group(state: &FileState, number: u64) -> Result<u64, Failure> {
    let mut outcomes = lock(&state.outcomes);
    loop {
        if let Some((outcome, readers)) = outcomes.0.get_mut(&number) {
            let outcome = outcome.clone();
            *readers -= 1;
            if *readers == 0 {
                outcomes.0.remove(&number);
            }
            return outcome;
        }
        let (held, timeout) = state
            .ended
            .wait_timeout(outcomes, GROUP_WAIT)
            .unwrap_or_else(|e| e.into_inner());
        outcomes = held;
        // A writer queued for the lock joins or ends the group when it gets there (on a
        // loaded machine that can take longer than `GROUP_WAIT`): only with nobody queued is
        // the group left open with nobody to end it.
        if timeout.timed_out() && state.queued.load(SeqCst) == 0 {
            drop(outcomes);
            let w = match state.writer.try_lock() {
                Ok(w) => Some(w),
                Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
                Err(std::sync::TryLockError::WouldBlock) => None,
            };
            if let Some(mut w) = w
                && w.open.as_ref().is_some_and(|g| g.number == number)
            {
                end_group(state, &mut w);
            }
            outcomes = lock(&state.outcomes);
        }
    }
}

/// The [`FileState`] of the database file `conn` is open on.
pub(super) fn file_state(conn: &Connection) -> Arc<FileState> {
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
fn group_sync(wal: &Path, state: &FileState, seq: u64) -> rusqlite::Result<()> {
    let synced = fsync_upto(wal, state, seq);
    // The durable writes that came during the fsync wait in the open group ([`write_grouped`]):
    // commit it, so that its members go on to the next fsync.
    if state.syncing.swap(false, SeqCst) {
        drop(lock_writer(state));
    }
    synced
}

/// [`group_sync`]'s fsync, unless an earlier one covered commit `seq`.
fn fsync_upto(wal: &Path, state: &FileState, seq: u64) -> rusqlite::Result<()> {
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
    state.fsyncs.fetch_add(1, SeqCst);
    state.syncing.store(true, SeqCst);
    let file = match std::fs::File::open(wal) {
        Ok(file) => Some(file),
        // Checkpointed and removed as the last other connection closed: the commit is in the
        // database file, which that checkpoint fsynced.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        // No descriptor to fsync with (the process is out of them): this write fails, but
        // nothing was dropped, so the next fsync that can run covers its commit; no latch.
        Err(e) => {
            return Err(io_error(format!(
                "cannot open {} to fsync it: {e}",
                wal.display()
            )));
        }
    };
    if let Some(Err(e)) = file.map(|f| f.sync_data()) {
        state.sync_failed.store(true, SeqCst);
        return Err(io_error(format!("fsync of {} failed: {e}", wal.display())));
    }
    *synced = upto;
    Ok(())
}

/// Runs `f` in an IMMEDIATE transaction of its own on `conn`, outside any group (the open
/// group is committed first), and commits it when `f` succeeds; with `--sqlite-sync full`
/// (the default) it returns once the commit is on disk ([`group_sync`]). The store's writes
/// go through [`write_grouped`]; this is the health probe's. Must not be nested.
pub fn write_tx<T, E>(
    conn: &mut Connection,
    f: impl FnOnce(&rusqlite::Transaction<'_>) -> Result<T, E>,
) -> Result<T, E>
where
    E: From<rusqlite::Error>,
{
    let state = file_state(conn);
    let wal = wal_path(Path::new(conn.path().unwrap_or_default()));
    let (seq, out) = {
        let _queued = lock_writer(&state);
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let out = f(&tx)?;
        tx.commit()?;
        (state.committed.fetch_add(1, SeqCst) + 1, out)
    };
    if state.durable_commits.load(SeqCst) {
        group_sync(&wal, &state, seq)?;
    }
    Ok(out)
}

/// A SQLite database file behind a pool: the `store::Store` of a `--db` path.
pub struct SqliteStore {
    /// The `wal-checkpoint` thread of a store opened for serving, held for its `Drop`: it
    /// stops first when the store drops.
    _checkpointer: Option<Checkpointer>,
    pool: Pool,
    path: PathBuf,
    health: DbHealth,
}

impl SqliteStore {
    /// Opens (creating with mode 0600 if absent) a webhookd database, refuses foreign or newer
    /// files untouched and applies pending schema upgrades ([`super::open`]). `serving`: the
    /// store also starts its `wal-checkpoint` thread, which keeps the `-wal` file under
    /// `options.wal_limit_bytes` until the store drops.
    pub fn open(
        path: &Path,
        options: crate::store::OpenOptions,
        serving: bool,
    ) -> anyhow::Result<SqliteStore> {
        let pool = open_limited(
            path,
            options.pool_size,
            options.wal_limit_bytes,
            options.sqlite_sync,
        )?;
        let checkpointer = if serving {
            Some(Checkpointer::start(
                pool.clone(),
                path,
                options.wal_limit_bytes,
                options.checkpoint_wait,
            )?)
        } else {
            None
        };
        Ok(SqliteStore {
            _checkpointer: checkpointer,
            pool,
            path: path.to_path_buf(),
            health: DbHealth::new(path),
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
            _checkpointer: None,
            pool,
            path: path.to_path_buf(),
            health: DbHealth::new(path),
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
}

impl crate::store::Store for SqliteStore {
    fn read_dyn(
        &self,
        f: &mut dyn FnMut(&mut dyn crate::store::Tx) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let conn = self.pool.get()?;
        read_tx(&conn, |conn| f(&mut SqliteTx(conn)))
    }

    fn read_now_dyn(
        &self,
        f: &mut dyn FnMut(&mut dyn crate::store::Tx) -> Result<(), StoreError>,
    ) -> Option<Result<(), StoreError>> {
        let conn = self.pool.try_get()?;
        Some(read_tx(&conn, |conn| f(&mut SqliteTx(conn))))
    }

    fn write_dyn(
        &self,
        f: &mut dyn FnMut(&mut dyn crate::store::Tx) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        write_grouped(self.pool.get()?, true, |tx| f(&mut SqliteTx(tx)))
    }

    fn write_unsynced_dyn(
        &self,
        f: &mut dyn FnMut(&mut dyn crate::store::Tx) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        write_grouped(self.pool.get()?, false, |tx| f(&mut SqliteTx(tx)))
    }

    /// On SQLite the same write as [`Store::write_unsynced_dyn`]: the group commit of
    /// [`Store::write_dyn`] without the wait for an fsync. The commit is in the `-wal` file (the
    /// OS holds it, so a kill of the process keeps it), and the next durable write's fsync
    /// covers it, since the file is written in commit order.
    fn write_redoable_dyn(
        &self,
        f: &mut dyn FnMut(&mut dyn crate::store::Tx) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        self.write_unsynced_dyn(f)
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

    /// One server serves a database file (the `-shm` index and the WAL are this machine's).
    fn owned_by_one_process(&self) -> bool {
        true
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
/// (docs/design.md §10); anything else is `Other`.
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

    /// A caller's own error type, as `Store::write` closures return them.
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

    /// `Store::write` commits when its closure succeeds, rolls back and returns the caller's
    /// own error when it fails; `read` sees only what was committed.
    #[test]
    fn write_commits_on_ok_and_rolls_back_on_the_callers_error() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("t.sqlite");
        let store = crate::store::open(db.to_str().unwrap(), 2).unwrap();
        let refused = store.write(|tx| {
            tx.create_key("app1", "k", 1)?;
            Err::<(), _>(Mine::Refused)
        });
        assert_eq!(refused, Err(Mine::Refused));
        assert_eq!(store.read(|tx| tx.count_keys()).unwrap(), 0);
        let key = store.write(|tx| tx.create_key("app1", "k", 1)).unwrap();
        assert_eq!(store.read(|tx| tx.count_keys()).unwrap(), 1);
        let found = store.read(|tx| tx.lookup_key(&key.key_id)).unwrap();
        let found = found.map(|k| (k.secret, k.app_id, k.scope));
        assert_eq!(
            found,
            Some((
                key.secret,
                "app1".to_string(),
                crate::store::keys::Scope::Admin
            ))
        );
        assert_eq!(store.read(|tx| tx.rescue_expired_leases(0)).unwrap(), 0);
        assert_eq!(store.backend(), "sqlite");
    }

    /// A read runs in one transaction: its statements see one snapshot however the file
    /// changes meanwhile, and a read that fails or panics leaves its connection with no
    /// transaction open (the next write on it begins its own).
    #[test]
    fn a_read_sees_one_snapshot_and_leaves_no_transaction_open() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("t.sqlite");
        let store = crate::store::open(db.to_str().unwrap(), 2).unwrap();
        let (before, during) = store
            .read(|tx| {
                let before = tx.count_keys()?;
                std::thread::scope(|s| {
                    s.spawn(|| store.write(|tx| tx.create_key("app1", "k", 1)).unwrap());
                });
                Ok::<_, StoreError>((before, tx.count_keys()?))
            })
            .unwrap();
        assert_eq!((before, during), (0, 0), "one snapshot for the whole read");
        assert_eq!(store.read(|tx| tx.count_keys()).unwrap(), 1);
        // One connection: the write after the failed reads gets the connection they used.
        let store = crate::store::open(db.to_str().unwrap(), 1).unwrap();
        let refused = store.read(|tx| {
            tx.count_keys()?;
            Err::<(), _>(Mine::Refused)
        });
        assert_eq!(refused, Err(Mine::Refused));
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            store.read(|tx| -> Result<(), StoreError> {
                tx.count_keys()?;
                panic!("a handler's bug");
            })
        }));
        assert!(panicked.is_err());
        for name in ["k2", "k3"] {
            store.write(|tx| tx.create_key("app1", name, 1)).unwrap();
        }
        assert_eq!(store.read(|tx| tx.count_keys()).unwrap(), 3);
    }

    /// Writers queued on the lock while another writes are committed as one group: one
    /// commit for all of them, each answered after it; one that fails inside the group has
    /// its own changes rolled back and leaves the others' in.
    #[test]
    fn queued_writes_commit_as_one_group_and_a_failed_one_only_undoes_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("t.sqlite");
        let store = crate::store::open(db.to_str().unwrap(), 10).unwrap();
        let state = file_state(&Connection::open(&db).unwrap());
        let writers = 8;
        let held = lock_writer(&state);
        let before = state.committed.load(SeqCst);
        let results = std::thread::scope(|s| {
            let handles: Vec<_> = (0..writers)
                .map(|i| {
                    let store = &store;
                    s.spawn(move || {
                        store.write(|tx| {
                            tx.create_key(&format!("app{i}"), "k", 1)?;
                            if i == 3 { Err(Mine::Refused) } else { Ok(i) }
                        })
                    })
                })
                .collect();
            while state.queued.load(SeqCst) < writers {
                std::thread::sleep(Duration::from_millis(1));
            }
            drop(held);
            handles
                .into_iter()
                .map(|h| h.join().unwrap())
                .collect::<Vec<_>>()
        });
        for (i, result) in results.into_iter().enumerate() {
            let expected = if i == 3 { Err(Mine::Refused) } else { Ok(i) };
            assert_eq!(result, expected);
        }
        assert_eq!(state.committed.load(SeqCst) - before, 1, "one commit");
        assert_eq!(
            store.read(|tx| tx.count_keys()).unwrap(),
            writers as i64 - 1
        );
        assert!(lock(&state.outcomes).0.is_empty(), "every outcome was read");
        // The group's connection went back to the pool: a write of its own still works.
        assert_eq!(
            store.write(|tx| tx.count_keys()).unwrap(),
            writers as i64 - 1
        );
    }

    /// A write whose closure panics leaves neither its changes nor an open transaction
    /// behind: the next write takes the file's write lock and commits.
    #[test]
    fn a_panicking_write_is_rolled_back_and_the_next_one_commits() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("t.sqlite");
        let store = crate::store::open(db.to_str().unwrap(), 1).unwrap();
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            store.write(|tx| {
                tx.create_key("app1", "k", 1)?;
                if tx.count_keys()? == 1 {
                    panic!("midway");
                }
                Ok::<_, StoreError>(())
            })
        }));
        assert!(panicked.is_err());
        assert_eq!(store.read(|tx| tx.count_keys()).unwrap(), 0);
        store.write(|tx| tx.create_key("app1", "k", 1)).unwrap();
        assert_eq!(store.read(|tx| tx.count_keys()).unwrap(), 1);
    }

    /// A stored word outside its set (a task status here) is an error of the read, never a
    /// default; the words of a sound row read back as their enums.
    #[test]
    fn a_corrupt_stored_word_is_an_error() {
        use crate::store::tasks::{NewTask, TaskKind, TaskStatus};
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("t.sqlite");
        let store = crate::store::open(db.to_str().unwrap(), 1).unwrap();
        let id = store
            .write(|tx| {
                tx.insert_task(&NewTask {
                    app_id: "app1",
                    schedule_id: None,
                    event_id: None,
                    endpoint_id: 1,
                    task_type: TaskKind::Manual,
                    payload: "{}",
                    run_at: 1,
                    max_attempts: 1,
                    now_ms: 1,
                    trace: crate::trace::TaskTraces::new(None, false).for_task(),
                })
            })
            .unwrap();
        let task = store.read(|tx| tx.get_task("app1", id)).unwrap().unwrap();
        assert_eq!(
            (task.status, task.task_type),
            (TaskStatus::Pending, TaskKind::Manual)
        );
        let conn = Connection::open(&db).unwrap();
        conn.execute("UPDATE tasks SET status = 'bogus' WHERE id = ?1", [id])
            .unwrap();
        let err = store.read(|tx| tx.get_task("app1", id)).unwrap_err();
        assert!(
            matches!(&err, StoreError::Other(e) if format!("{e:#}").contains("not a task status: \"bogus\"")),
            "{err}"
        );
    }

    /// A 200 means "on disk": with `--sqlite-sync full` (the default) a write returns after an
    /// fsync of the `-wal` file covering its commit; writers that commit while an fsync runs
    /// share the next one. `normal` never fsyncs at commit.
    #[test]
    fn writes_return_after_a_shared_fsync_by_default_and_none_on_request() {
        use crate::config::SqliteSync;
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

    /// A redoable write (the delivery rounds) commits without an fsync of its own, even with
    /// `--sqlite-sync full`; the next durable write's fsync covers its commit too.
    #[test]
    fn a_redoable_write_waits_for_no_fsync_and_the_next_durable_one_covers_it() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("t.sqlite");
        let store = crate::store::open(db.to_str().unwrap(), 2).unwrap();
        let state = file_state(&Connection::open(&db).unwrap());
        assert!(state.durable_commits.load(SeqCst));
        let fsyncs = state.fsyncs.load(SeqCst);
        store
            .write_redoable(|tx| tx.create_key("app1", "k", 1))
            .unwrap();
        assert_eq!(state.fsyncs.load(SeqCst), fsyncs, "no fsync waited for");
        assert!(*lock(&state.synced) < state.committed.load(SeqCst));
        assert_eq!(store.read(|tx| tx.count_keys()).unwrap(), 1, "committed");
        store.write(|tx| tx.create_key("app1", "k2", 1)).unwrap();
        assert_eq!(*lock(&state.synced), state.committed.load(SeqCst));
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
