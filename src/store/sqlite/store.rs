//! [`SqliteStore`]: the `store::Store` of a `--db` file path, and [`SqliteTx`], its
//! `store::Tx` (each table's query trait is implemented on it in that table's file).

use super::wal::Checkpointer;
use super::{Conn, DbHealth, Pool, health, migrate, open_limited};
use crate::store::StoreError;
use anyhow::{Context, bail};
use r2d2_sqlite::SqliteConnectionManager;
use rusqlite::{Connection, OpenFlags};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// `store::Tx` over one SQLite connection: a pooled one for reads, the open transaction for
/// writes (a `rusqlite::Transaction` derefs to its connection).
pub struct SqliteTx<'c>(pub &'c Connection);

/// The lock in-process writers of one database file queue on before `BEGIN IMMEDIATE`.
/// Without it they meet SQLite's busy handler, which sleeps 1, 2, 5 … 100 ms between tries and
/// turned contention between API threads and the delivery dispatcher into 50–900 ms stalls
/// (BENCHMARKS.md). Other processes (the `keys` commands) still meet the busy handler.
pub(super) fn writer_lock(conn: &Connection) -> Arc<Mutex<()>> {
    static LOCKS: OnceLock<Mutex<HashMap<String, Arc<Mutex<()>>>>> = OnceLock::new();
    let path = conn.path().unwrap_or_default().to_string();
    LOCKS
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry(path)
        .or_default()
        .clone()
}

/// Runs `f` in an IMMEDIATE transaction (the write lock is taken up front, so two writers
/// never deadlock upgrading a read lock) and commits it when `f` succeeds. Must not be nested.
pub fn write_tx<T, E>(
    conn: &mut Connection,
    f: impl FnOnce(&rusqlite::Transaction<'_>) -> Result<T, E>,
) -> Result<T, E>
where
    E: From<rusqlite::Error>,
{
    let lock = writer_lock(conn);
    let _queued = lock.lock().unwrap_or_else(|e| e.into_inner());
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let out = f(&tx)?;
    tx.commit()?;
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
        let pool = open_limited(path, options.pool_size, options.wal_limit_bytes)?;
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
        f(&mut SqliteTx(&conn))
    }

    fn write_dyn(
        &self,
        f: &mut dyn FnMut(&mut dyn crate::store::Tx) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let mut conn = self.pool.get()?;
        write_tx(&mut conn, |tx| f(&mut SqliteTx(tx)))
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
    /// blocked and every commit made before it started is in the copy; then checks the copy.
    /// `out` must exist (empty): the caller creates it exclusively with mode 0600.
    fn backup(&self, out: &Path) -> anyhow::Result<()> {
        let source = self.pool.get()?;
        let target = out.to_str().context("--out: the path is not valid UTF-8")?;
        source
            .execute("VACUUM INTO ?1", [target])
            .context("the copy failed")?;
        let copy = Connection::open(out)?;
        let check: String = copy.query_row("PRAGMA quick_check", [], |r| r.get(0))?;
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
