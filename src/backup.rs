//! Scheduled backups of a SQLite database in `serve` (`--backup-dir`, `--backup-every`,
//! `--backup-keep`): every period a consistent copy is written to `webhookd-<UTC time>.sqlite`
//! beside the earlier ones, and the oldest beyond the kept number are removed.
//!
//! Each copy is made by the store (`Store::backup`: `VACUUM INTO` one read snapshot, then
//! `PRAGMA integrity_check` on the copy) into a hidden temporary file created with mode 0600,
//! fsynced, renamed to its final name, and the folder fsynced: a crash or a full disk leaves
//! either a complete, checked backup or no new file, never a torn one under a backup's name.
//! A failure is logged and counted (`/metrics`); serving goes on and the next period tries
//! again. PostgreSQL databases are refused at start: they are backed up with `pg_dump` or
//! point-in-time recovery.

use crate::app::App;
use anyhow::Context;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

/// The shortest `--backup-every`: a copy is a full read of the database.
pub const MIN_EVERY: Duration = Duration::from_secs(10);
/// `--backup-keep`'s default.
pub const DEFAULT_KEEP: usize = 7;

/// Backup files are `webhookd-<stamp>.sqlite`; the stamp sorts as time does.
const PREFIX: &str = "webhookd-";
const SUFFIX: &str = ".sqlite";
/// A copy being written; left over only by a crash, and removed at the next start.
const TEMP_PREFIX: &str = ".webhookd-";
const TEMP_SUFFIX: &str = ".sqlite.tmp";

/// Where, how often and how many backups `serve` makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupConfig {
    pub dir: PathBuf,
    /// Time between two backups (tests set less than [`MIN_EVERY`]; the CLI cannot).
    pub every: Duration,
    /// Backups kept; older ones are removed after each new one.
    pub keep: usize,
}

/// `--backup-every`: a whole number and a unit, `s`, `m`, `h` or `d` (`30m`, `6h`, `1d`).
pub fn parse_every(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let unit_at = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(unit_at);
    let secs_per = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => {
            return Err(format!(
                "'{text}' is not a duration: write a number and a unit s, m, h or d (30m, 6h, 1d)"
            ));
        }
    };
    let n: u64 = number
        .parse()
        .map_err(|_| format!("'{text}' is not a duration: the number is missing or too large"))?;
    let every = Duration::from_secs(n.saturating_mul(secs_per));
    if every < MIN_EVERY {
        return Err(format!("'{text}' is too short: at least 10s"));
    }
    Ok(every)
}

/// The name of a backup made at `at`: `webhookd-20261125T171300.123Z.sqlite`.
fn file_name(at: chrono::DateTime<chrono::Utc>) -> String {
    format!("{PREFIX}{}{SUFFIX}", at.format("%Y%m%dT%H%M%S%.3fZ"))
}

/// Whether `name` is one of our backups (not a temporary file, not someone else's file).
fn is_backup(name: &str) -> bool {
    name.strip_prefix(PREFIX)
        .and_then(|rest| rest.strip_suffix(SUFFIX))
        .is_some_and(|stamp| {
            !stamp.is_empty()
                && stamp
                    .chars()
                    .all(|c| c.is_ascii_digit() || matches!(c, 'T' | 'Z' | '.'))
        })
}

/// The backups in `dir`, oldest first (their names sort as their times do).
pub fn list(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_str().is_some_and(is_backup))
        .map(|e| e.path())
        .collect();
    found.sort();
    Ok(found)
}

/// The scheduled backup thread of a running server.
pub struct Backups {
    stop: Arc<AtomicBool>,
    wake: Arc<crate::app::Signal>,
    thread: JoinHandle<()>,
}

impl Backups {
    /// Prepares `--backup-dir` (created with mode 0700 when absent; temporary files a crash
    /// left are removed), reads when the newest backup there was made, and starts the thread.
    /// `None` when no backups are configured. The first backup is made at once when the newest
    /// one is older than `every` (or there is none), else when it is `every` old.
    pub fn start(app: Arc<App>) -> anyhow::Result<Option<Backups>> {
        let Some(config) = app.config.backup.clone() else {
            return Ok(None);
        };
        anyhow::ensure!(
            app.store.backend() == "sqlite",
            "--backup-dir copies SQLite databases only; back up PostgreSQL with pg_dump or point-in-time recovery"
        );
        prepare_dir(&config.dir)?;
        let newest = list(&config.dir)
            .ok()
            .and_then(|found| found.last().cloned())
            .and_then(|path| std::fs::metadata(path).ok()?.modified().ok());
        app.metrics.backups_enabled();
        if let Some(at) = newest {
            app.metrics.backup_succeeded(unix_secs(at));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let wake = Arc::new(crate::app::Signal::default());
        let thread = {
            let (stop, wake) = (stop.clone(), wake.clone());
            std::thread::Builder::new()
                .name("backup".into())
                .spawn(move || run(&app, &config, newest, &stop, &wake))
                .context("cannot start the backup thread")?
        };
        Ok(Some(Backups { stop, wake, thread }))
    }

    /// Stops the thread; a backup under way is finished first. Blocking.
    pub fn stop(self) {
        self.stop.store(true, Ordering::SeqCst);
        self.wake.notify();
        if self.thread.join().is_err() {
            tracing::error!("the backup thread panicked");
        }
    }
}

/// `/healthz`'s `backup` member while backups are on: when the newest good backup was made
/// and how old it is (both `null` before the first one).
pub fn health_detail(metrics: &crate::metrics::Metrics) -> Option<serde_json::Value> {
    let last = metrics.last_backup()?;
    let at = last.and_then(|secs| chrono::DateTime::from_timestamp(secs, 0));
    let age = last.map(|secs| (unix_secs(SystemTime::now()) - secs).max(0));
    Some(serde_json::json!({
        "last_success_at": at.map(|at| at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
        "age_secs": age,
    }))
}

fn prepare_dir(dir: &Path) -> anyhow::Result<()> {
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .with_context(|| {
                format!(
                    "--backup-dir (env WEBHOOKD_BACKUP_DIR): cannot create {}",
                    dir.display()
                )
            })?;
    }
    let entries = std::fs::read_dir(dir).with_context(|| {
        format!(
            "--backup-dir (env WEBHOOKD_BACKUP_DIR): cannot read {}",
            dir.display()
        )
    })?;
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with(TEMP_PREFIX) && name.ends_with(TEMP_SUFFIX) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    Ok(())
}

fn unix_secs(at: SystemTime) -> i64 {
    at.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// The loop: sleep until the next backup is due (or stop), make it, prune.
fn run(
    app: &App,
    config: &BackupConfig,
    newest: Option<SystemTime>,
    stop: &AtomicBool,
    wake: &crate::app::Signal,
) {
    let mut due = match newest {
        Some(at) => at + config.every,
        None => SystemTime::now(),
    };
    loop {
        let wait = due
            .duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO);
        if !wait.is_zero() {
            wake.wait(wait);
        }
        if stop.load(Ordering::SeqCst) {
            return;
        }
        if SystemTime::now() < due {
            continue;
        }
        let started = std::time::Instant::now();
        match make(app, &config.dir) {
            Ok((path, at)) => {
                app.metrics.backup_succeeded(unix_secs(at));
                tracing::info!(
                    file = %path.display(),
                    ms = started.elapsed().as_millis() as u64,
                    "backup written"
                );
                if let Err(e) = prune(&config.dir, config.keep) {
                    tracing::warn!(error = %format!("{e:#}"), "removing old backups failed");
                }
            }
            Err(e) => {
                app.metrics.backup_failed();
                tracing::error!(
                    error = %format!("{e:#}"),
                    dir = %config.dir.display(),
                    "backup failed; serving goes on, the next one is tried in --backup-every"
                );
            }
        }
        due = SystemTime::now() + config.every;
    }
}

/// Writes one checked backup and returns its path and time.
fn make(app: &App, dir: &Path) -> anyhow::Result<(PathBuf, SystemTime)> {
    let at = SystemTime::now();
    let name = file_name(at.into());
    let temp = dir.join(format!(
        "{TEMP_PREFIX}{}{TEMP_SUFFIX}",
        &name[PREFIX.len()..name.len() - SUFFIX.len()]
    ));
    let target = dir.join(&name);
    let written = write_checked(app, &temp, &target, dir);
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    written.map(|()| (target, at))
}

fn write_checked(app: &App, temp: &Path, target: &Path, dir: &Path) -> anyhow::Result<()> {
    {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(temp)
            .with_context(|| format!("cannot create {}", temp.display()))?;
    }
    // The copy and its integrity check (the store's own SQL; nothing here names a driver).
    app.store.backup(temp)?;
    std::fs::File::open(temp)
        .and_then(|f| f.sync_all())
        .with_context(|| format!("cannot fsync {}", temp.display()))?;
    std::fs::rename(temp, target)
        .with_context(|| format!("cannot rename {} to {}", temp.display(), target.display()))?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("cannot fsync the folder {}", dir.display()))?;
    Ok(())
}

/// Removes the oldest backups beyond `keep`.
fn prune(dir: &Path, keep: usize) -> anyhow::Result<()> {
    let found = list(dir).with_context(|| format!("cannot read {}", dir.display()))?;
    let extra = found.len().saturating_sub(keep);
    for old in &found[..extra] {
        std::fs::remove_file(old).with_context(|| format!("cannot remove {}", old.display()))?;
        tracing::info!(file = %old.display(), "old backup removed");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_takes_a_number_and_a_unit_and_at_least_ten_seconds() {
        for (text, secs) in [
            ("10s", 10),
            ("30m", 1800),
            ("6h", 21_600),
            ("1d", 86_400),
            (" 90s ", 90),
        ] {
            assert_eq!(parse_every(text), Ok(Duration::from_secs(secs)), "{text}");
        }
        for bad in [
            "9s",
            "0m",
            "",
            "m",
            "10",
            "1w",
            "1.5h",
            "-1h",
            "h1",
            "99999999999999999999d",
        ] {
            assert!(parse_every(bad).is_err(), "{bad} was accepted");
        }
        assert!(parse_every("5s").unwrap_err().contains("at least 10s"));
    }

    #[test]
    fn names_sort_as_time_and_only_ours_are_listed() {
        use chrono::TimeZone;
        let early = chrono::Utc.with_ymd_and_hms(2026, 11, 25, 9, 5, 0).unwrap();
        let late = early + chrono::Duration::milliseconds(1500);
        assert_eq!(file_name(early), "webhookd-20261125T090500.000Z.sqlite");
        assert!(file_name(early) < file_name(late));
        assert!(is_backup(&file_name(late)));
        for other in [
            "webhookd-.sqlite",
            ".webhookd-20261125T090500.000Z.sqlite.tmp",
            "webhookd-20261125T090500.000Z.sqlite-wal",
            "webhookd.sqlite",
            "webhookd-x.sqlite",
        ] {
            assert!(!is_backup(other), "{other}");
        }
    }
}
