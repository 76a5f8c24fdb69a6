//! The SQLite store: one file in WAL mode behind an r2d2 pool, laid out like the PostgreSQL
//! store. Every SQLite statement of webhookd lives under this module: one file per table, each
//! implementing that table's query trait (`store::endpoints::EndpointQueries`, …) on
//! [`SqliteTx`]; [`SqliteStore`] (`store.rs`) is the `store::Store`; `wal.rs` is its upkeep;
//! `list.rs` the list requests' filters. This file opens the pool.

pub mod attempts;
pub mod endpoints;
pub mod events;
mod health;
mod ids;
pub mod keys;
pub mod list;
mod migrate;
pub mod policies;
pub mod replay;
pub mod retention;
mod rows;
pub mod schedules;
mod store;
pub mod tasks;
mod wal;

pub use health::DbHealth;
pub use migrate::{SCHEMA_VERSION, check_is_ours};
pub use store::{SqliteStore, SqliteTx, write_tx};
pub use wal::wal_path;

use crate::config::SqliteSync;
use crate::store::Word;
use crate::store::json::{JsonColumn, Stored};
use anyhow::{Context, bail};
use r2d2_sqlite::SqliteConnectionManager;
use rusqlite::{Connection, OpenFlags};
use std::path::Path;
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
/// `--sqlite-sync`. The pool holds at most [`connections_cap`] connections, `size` or fewer.
pub fn open_limited(
    path: &Path,
    size: u32,
    wal_limit_bytes: u64,
    sync: SqliteSync,
) -> anyhow::Result<Pool> {
    let size = size.min(connections_cap());
    create_private_file(path)?;
    {
        let mut conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_WRITE)
            .with_context(|| format!("cannot open database {}", path.display()))?;
        migrate::check_is_ours(&conn, path)?;
        conn.busy_timeout(Duration::from_secs(10))?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .with_context(|| format!("cannot switch {} to WAL mode", path.display()))?;
        migrate::upgrade(&mut conn)?;
        let state = store::file_state(&conn);
        state.durable_commits.store(
            sync == SqliteSync::Full,
            std::sync::atomic::Ordering::SeqCst,
        );
        // The file may not be the one an earlier store of this path reserved ids in.
        state
            .ids
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clear();
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

/// The most connections a SQLite pool holds: two per core, and six for the threads that each
/// keep one for a moment (dispatcher, scheduler, checkpoints, health probe). A SQLite statement
/// runs on the caller's thread against a file in memory, so more connections than the cores
/// can run add no throughput, while each one keeps its last transaction's pages, its prepared
/// statements and its copy of the schema (about 400 KiB under a publish load): `--workers` + 8
/// of them (24) held 36 MiB at the peak of a publish run where 10 hold 30 with the same rate
/// (BENCHMARKS.md, "Peak RSS"; docs/operations.md, "Memory").
pub fn connections_cap() -> u32 {
    connections_for(std::thread::available_parallelism().map_or(2, std::num::NonZero::get))
}

/// [`connections_cap`] on `cores` cores.
fn connections_for(cores: usize) -> u32 {
    u32::try_from(cores.saturating_mul(2).saturating_add(6)).unwrap_or(u32::MAX)
}

/// How long a statement waits for another process's lock before failing with "busy".
pub(super) const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Per-connection settings. `synchronous=NORMAL` in WAL mode: a commit is written to the
/// `-wal` file without an fsync (a crash of the process loses nothing), checkpoints fsync
/// the WAL and the database file. With `--sqlite-sync full` (the default) [`write_tx`] then
/// fsyncs the `-wal` file before a write returns, one fsync for all the commits queued
/// meanwhile (`store::group_sync`), so an acknowledged write survives a power loss or a file
/// system error; with `normal` the last commits before such a loss may be lost
/// (docs/operations.md).
fn configure_connection(conn: &mut Connection, wal_limit_bytes: u64) -> rusqlite::Result<()> {
    conn.busy_timeout(BUSY_TIMEOUT)?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.pragma_update(None, "temp_store", "MEMORY")?;
    conn.pragma_update(None, "cache_size", -16_000)?;
    // Checkpoints run on the store's `wal-checkpoint` thread (`wal.rs`), not inside
    // whichever request happens to commit; a short-lived `keys` command checkpoints on close.
    conn.pragma_update(None, "wal_autocheckpoint", 0)?;
    // The first commit after the WAL is rewound (`wal::checkpoint_rewind`) cuts the `-wal` file back
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

/// Stored words (`store::word`) as SQLite text: a word outside the set is a conversion error
/// of the row (a `StoreError`), never a default.
macro_rules! stored_words {
    ($($word:ty),+) => {$(
        impl rusqlite::types::FromSql for $word {
            fn column_result(
                value: rusqlite::types::ValueRef<'_>,
            ) -> rusqlite::types::FromSqlResult<Self> {
                <$word as Word>::from_stored(value.as_str()?)
                    .map_err(|e| rusqlite::types::FromSqlError::Other(e.into()))
            }
        }

        impl rusqlite::ToSql for $word {
            fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
                Ok(Word::word(self).into())
            }
        }
    )+};
}

crate::store::word::stored_word_types!(stored_words);

/// Stored JSON (`store::json`) from SQLite text: text that does not parse is a conversion error
/// of the row (a `StoreError`), never a default.
impl<C: JsonColumn> rusqlite::types::FromSql for Stored<C> {
    fn column_result(value: rusqlite::types::ValueRef<'_>) -> rusqlite::types::FromSqlResult<Self> {
        Stored::parse(value.as_str()?).map_err(|e| rusqlite::types::FromSqlError::Other(e.into()))
    }
}

/// A fresh database for a unit test holding tasks `1..=n` of app `a`'s endpoint 1, whose
/// `status`, `run_at` and `next_attempt_at` are SQL expressions of their id `i`.
#[cfg(test)]
pub(crate) fn test_file_with_tasks(
    n: i64,
    status: &str,
    run_at: &str,
    due: &str,
) -> (tempfile::TempDir, Pool) {
    let dir = tempfile::tempdir().unwrap();
    let pool = open(&dir.path().join("t.db"), 1).unwrap();
    pool.get()
        .unwrap()
        .execute(
            &format!(
                "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1)
                 INSERT INTO tasks (id, app_id, endpoint_id, task_type, status, run_at,
                                    next_attempt_at, max_attempts, created_at, updated_at)
                 SELECT i, 'a', 1, 'event', {status}, {run_at}, {due}, 1, 0, 0 FROM n"
            ),
            [n],
        )
        .unwrap();
    (dir, pool)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pool_holds_two_connections_per_core_and_six_at_most() {
        assert_eq!(connections_for(1), 8);
        assert_eq!(connections_for(2), 10);
        assert_eq!(connections_for(16), 38);
        assert_eq!(connections_for(usize::MAX), u32::MAX);
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("cap.sqlite");
        // Asked for more than the cap: the cap; asked for fewer: what was asked.
        assert_eq!(open(&db, 10_000).unwrap().max_size(), connections_cap());
        assert_eq!(open(&db, 3).unwrap().max_size(), 3);
    }
}
