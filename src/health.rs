//! Database health (contract §10): is the file the server opened still the file at `--db`, and
//! can it still be written? Behind `GET /healthz`, the 503 answered to writes while it cannot,
//! and the start-up refusal of a database that cannot be written.

use crate::error::ApiError;
use rusqlite::Connection;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The health check writes its probe row at most this often; in between, `/healthz` answers
/// the last result, so a scraper polling it cannot turn it into a write load.
pub const PROBE_INTERVAL_MS: i64 = 1000;

/// Below this much free space on the database's file system, `/healthz` reports the disk full:
/// SQLite reuses its WAL file, so small writes can still succeed on a disk where every larger
/// one fails with SQLITE_FULL.
pub const MIN_FREE_BYTES: u64 = 1024 * 1024;

/// Bytes an unprivileged process may still write on the file system holding `path`.
#[cfg(unix)]
pub fn free_bytes(path: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: `c_path` is a valid NUL-terminated string and `stat` a properly sized,
    // zero-initialised out-parameter that statvfs fills in.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::statvfs(c_path.as_ptr(), &mut stat) };
    if rc != 0 {
        return None;
    }
    #[allow(clippy::unnecessary_cast)] // the field types differ between targets
    Some((stat.f_bavail as u64).saturating_mul(stat.f_frsize as u64))
}

#[cfg(not(unix))]
pub fn free_bytes(_path: &Path) -> Option<u64> {
    None
}

/// What the server knows about its database file.
#[derive(Debug)]
pub struct DbHealth {
    path: PathBuf,
    /// Device and inode of the file when the server opened it: if the path later names another
    /// file (or none), the server is writing into a file nobody will see again.
    identity: Option<(u64, u64)>,
    /// When the last probe ran, and what it found.
    last: Mutex<Option<(i64, Result<(), ApiError>)>>,
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
    pub fn file_problem(&self) -> Result<(), ApiError> {
        let shown = self.path.display();
        match identity(&self.path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Err(ApiError::unwritable(format!(
                    "the database file {shown} was deleted while webhookd runs; stop webhookd and restore the file from a backup (writes now would be lost)"
                )))
            }
            Err(e) => Err(ApiError::unwritable(format!(
                "the database file {shown} cannot be checked ({e}); check the disk and the mount"
            ))),
            Ok(now) if self.identity.is_some_and(|then| then != now) => {
                Err(ApiError::unwritable(format!(
                    "the database file {shown} was replaced by another file while webhookd runs; restart webhookd to open the new file"
                )))
            }
            Ok(_) => Ok(()),
        }
    }

    /// The full check behind `/healthz`: the file is still ours, it can be read, and a write
    /// of the probe row commits. Runs the probe at most once per [`PROBE_INTERVAL_MS`].
    pub fn check(&self, conn: &mut Connection, now_ms: i64) -> Result<(), ApiError> {
        self.file_problem()?;
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((at, result)) = &*last
            && now_ms >= *at
            && now_ms - *at < PROBE_INTERVAL_MS
        {
            return result.clone();
        }
        let result = probe(conn, now_ms).map_err(ApiError::from).and_then(|()| {
            match free_bytes(&self.path) {
                Some(free) if free < MIN_FREE_BYTES => Err(ApiError::new(
                    hyper::StatusCode::SERVICE_UNAVAILABLE,
                    50301,
                    format!(
                        "the disk holding the database is full ({free} bytes free on the disk of {}); free space on it (writes resume without a restart)",
                        self.path.display()
                    ),
                )),
                _ => Ok(()),
            }
        });
        *last = Some((now_ms, result.clone()));
        result
    }
}

/// Reads the schema and writes the probe row in one IMMEDIATE transaction.
pub fn probe(conn: &mut Connection, now_ms: i64) -> rusqlite::Result<()> {
    crate::store::write_tx(conn, |tx| {
        tx.query_row("SELECT count(*) FROM sqlite_master", [], |_| Ok(()))?;
        tx.execute(
            "INSERT INTO health_probe (id, checked_at) VALUES (1, ?1)
             ON CONFLICT (id) DO UPDATE SET checked_at = excluded.checked_at",
            [now_ms],
        )?;
        Ok(())
    })
}

/// What `serve` and the store say when the database cannot be written.
pub fn unwritable_message(path: &Path, why: &dyn std::fmt::Display) -> String {
    let folder = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .display()
        .to_string();
    format!(
        "cannot write the database {} ({why}): webhookd needs read and write permission on the file and on its folder {folder} (for the -wal and -shm files), on a file system mounted read-write; fix the owner or mode (chown/chmod) or the mount, then start again",
        path.display()
    )
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
