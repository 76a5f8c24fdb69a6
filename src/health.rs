//! Database health (docs/design.md §10): the limits and messages shared by the stores' checks behind
//! `GET /healthz` (`Store::health`), the 503 answered to writes while the database cannot be
//! written, and the start-up refusal (`Store::require_writable`).

use std::path::Path;

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
