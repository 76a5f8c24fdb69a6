//! SQLite database health (docs/design.md §10): is the file the server opened still the file at
//! `--db`, and can it still be written? Behind `Store::health` (`GET /healthz`), `quick_check`
//! (the 503 answered to writes while it cannot) and `require_writable` (the start-up refusal).

use crate::health::{MIN_FREE_BYTES, PROBE_INTERVAL_MS, free_bytes, unwritable_message};
use crate::store::StoreError;
use rusqlite::Connection;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// What the server knows about its database file.
#[derive(Debug)]
pub struct DbHealth {
    path: PathBuf,
    /// Device and inode of the file when the server opened it: if the path later names another
    /// file (or none), the server is writing into a file nobody will see again.
    identity: Option<(u64, u64)>,
    /// When the last probe ran, and what it found.
    last: Mutex<Option<(i64, Result<(), StoreError>)>>,
}

fn identity(path: &Path) -> std::io::Result<(u64, u64)> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(path)?;
        Ok((meta.dev(), meta.ino()))
    }
    #[cfg(not(unix))]
    {
        std::fs::metadata(path).map(|_| (0, 0))
    }
}

impl DbHealth {
    /// Remembers which file `path` names now (call right after opening it).
    pub fn new(path: &Path) -> Self {
        DbHealth {
            path: path.to_path_buf(),
            identity: identity(path).ok(),
            last: Mutex::new(None),
        }
    }

    /// A cheap check (one `stat`), run before every API write: 503 when the path no longer
    /// names the file the server has open.
    pub fn file_problem(&self) -> Result<(), StoreError> {
        let shown = self.path.display();
        match identity(&self.path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Err(StoreError::Unwritable(format!(
                    "the database file {shown} was deleted while webhookd runs; stop webhookd and restore the file from a backup (writes now would be lost)"
                )))
            }
            Err(e) => Err(StoreError::Unwritable(format!(
                "the database file {shown} cannot be checked ({e}); check the disk and the mount"
            ))),
            Ok(now) if self.identity.is_some_and(|then| then != now) => {
                Err(StoreError::Unwritable(format!(
                    "the database file {shown} was replaced by another file while webhookd runs; restart webhookd to open the new file"
                )))
            }
            Ok(_) => Ok(()),
        }
    }

    /// The full check behind `/healthz`: the file is still ours, it can be read, and a write
    /// of the probe row commits. Runs the probe at most once per [`PROBE_INTERVAL_MS`].
    pub fn check(&self, pool: &super::Pool, now_ms: i64) -> Result<(), StoreError> {
        self.file_problem()?;
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((at, result)) = &*last
            && now_ms >= *at
            && now_ms - *at < PROBE_INTERVAL_MS
        {
            return result.as_ref().map_err(StoreError::duplicate).copied();
        }
        let result = pool
            .get()
            .map_err(StoreError::from)
            .and_then(|mut conn| probe(&mut conn, now_ms).map_err(StoreError::from))
            .and_then(|()| match free_bytes(&self.path) {
                Some(free) if free < MIN_FREE_BYTES => Err(StoreError::DiskFull(format!(
                        "the disk holding the database is full ({free} bytes free on the disk of {}); free space on it (writes resume without a restart)",
                    self.path.display()
                ))),
                _ => Ok(()),
            });
        *last = Some((
            now_ms,
            result.as_ref().map_err(StoreError::duplicate).copied(),
        ));
        result
    }
}

/// Reads the schema and writes the probe row in one IMMEDIATE transaction.
pub fn probe(conn: &mut Connection, now_ms: i64) -> rusqlite::Result<()> {
    super::write_tx(conn, |tx| write_probe(tx, now_ms))
}

/// Reads the schema and writes the probe row, in the caller's transaction.
pub fn write_probe(conn: &Connection, now_ms: i64) -> rusqlite::Result<()> {
    conn.query_row("SELECT count(*) FROM sqlite_master", [], |_| Ok(()))?;
    conn.execute(
        "INSERT INTO health_probe (id, checked_at) VALUES (1, ?1)
         ON CONFLICT (id) DO UPDATE SET checked_at = excluded.checked_at",
        [now_ms],
    )?;
    Ok(())
}

/// The start-up check of `serve`: refuses a database it could open but cannot write, with a
/// message naming the file and the permission it needs.
pub fn require_writable(conn: &mut Connection, path: &Path, now_ms: i64) -> anyhow::Result<()> {
    let shown = path.display();
    let readonly = conn.is_readonly(rusqlite::MAIN_DB).unwrap_or(false);
    let result = if readonly {
        Err(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_READONLY),
            None,
        ))
    } else {
        probe(conn, now_ms)
    };
    match result {
        Ok(()) => Ok(()),
        Err(e) if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DiskFull) => {
            anyhow::bail!(
                "cannot write the database {shown}: the disk holding it is full; free space on it and start again"
            )
        }
        Err(e) => anyhow::bail!(unwritable_message(path, &e)),
    }
}
