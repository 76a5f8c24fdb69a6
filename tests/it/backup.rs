//! Scheduled backups in `serve` (`--backup-dir`, `--backup-every`, `--backup-keep`): a real
//! server with a test-only short period writes checked, private copies holding its data, keeps
//! the newest N, shows the newest one's time in `/metrics` and `/healthz`, and goes on serving
//! when a backup fails; the binary refuses the flags with a PostgreSQL `--db` (exit 2).

use crate::metrics::metric;
use crate::support::{TestServer, get_text, ok, sqlite_only, wait_for};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;
use webhookd::backup::BackupConfig;

/// Generous: the condition, not this budget, is what the tests wait for.
const WAIT: Duration = Duration::from_secs(60);

fn backed_up(dir: &Path, every: Duration, keep: usize) -> TestServer {
    let dir = dir.to_path_buf();
    TestServer::start_with(move |c| {
        c.backup = Some(BackupConfig { dir, every, keep });
    })
}

fn names(dir: &Path) -> Vec<PathBuf> {
    webhookd::backup::list(dir).unwrap_or_default()
}

fn healthz(server: &TestServer) -> Value {
    let (status, text) = get_text(&format!("{}/healthz", server.url));
    assert_eq!(status, 200, "{text}");
    serde_json::from_str(&text).unwrap()
}

#[test]
fn scheduled_backups_are_checked_private_copies_pruned_to_keep_on_sqlite() {
    if sqlite_only("scheduled backups copy SQLite files; PostgreSQL refuses them") {
        return;
    }
    let backups = tempfile::tempdir().unwrap();
    let dir = backups.path().join("nested/backups");
    let server = backed_up(&dir, Duration::from_millis(200), 2);
    let c = server.client();
    let endpoint = ok(
        &c,
        "POST",
        "/endpoints",
        Some(json!({"name": "kept", "url": "http://127.0.0.1:9/hook"})),
    );
    let endpoint_id = endpoint["id"].as_i64().unwrap();
    // Backups made after the endpoint hold it; at least 4 of them, so 2 were pruned.
    let mut seen = BTreeSet::new();
    let newest = wait_for(WAIT, || {
        seen.extend(names(&dir));
        let newest = names(&dir).pop()?;
        // Read-only: a file pruned meanwhile must not be created again, empty.
        let holds = rusqlite::Connection::open_with_flags(
            &newest,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
        )
        .and_then(|db| {
            db.query_row(
                "SELECT count(*) FROM endpoints WHERE id = ?1",
                [endpoint_id],
                |r| r.get::<_, i64>(0),
            )
        })
        .is_ok_and(|n| n == 1);
        (holds && seen.len() >= 4).then_some(newest)
    })
    .expect("backups holding the new endpoint");
    let last_success = metric(&server, "webhookd_backup_last_success_timestamp_seconds")
        .expect("the metric is served");
    let now = chrono::Utc::now().timestamp() as f64;
    assert!(
        (now - 120.0..=now + 1.0).contains(&last_success),
        "{last_success} vs now {now}"
    );
    assert_eq!(metric(&server, "webhookd_backup_failures_total"), Some(0.0));
    let health = healthz(&server);
    assert!(
        health["backup"]["age_secs"].as_i64().unwrap() >= 0,
        "{health}"
    );
    assert!(
        health["backup"]["last_success_at"]
            .as_str()
            .unwrap()
            .ends_with('Z')
    );
    server.stop();

    let kept = names(&dir);
    assert_eq!(kept.len(), 2, "pruned to --backup-keep: {kept:?}");
    assert!(kept.contains(&newest) || kept.iter().all(|k| k > &newest));
    for file in &kept {
        let name = file.file_name().unwrap().to_str().unwrap();
        assert!(
            name.starts_with("webhookd-20") && name.ends_with("Z.sqlite"),
            "{name}"
        );
        let mode = std::fs::metadata(file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{name}");
        let db = rusqlite::Connection::open(file).unwrap();
        let check: String = db
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .unwrap();
        assert_eq!(check, "ok");
        let version: i64 = db
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(version, webhookd::store::sqlite::SCHEMA_VERSION);
        let name_kept: String = db
            .query_row(
                "SELECT name FROM endpoints WHERE id = ?1",
                [endpoint_id],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(name_kept, "kept");
    }
    // No temporary file is left behind, and nothing but backups is in the folder.
    let all: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert_eq!(all.len(), 2, "{all:?}");
    // A backup restores: a server started on a copy of one serves its data.
    let restored_db = backups.path().join("restored.sqlite");
    std::fs::copy(&kept[1], &restored_db).unwrap();
    let restored_db = restored_db.to_str().unwrap().to_string();
    let restored = TestServer::start_with(move |c| c.db = restored_db);
    let found = ok(
        &restored.client(),
        "GET",
        &format!("/endpoints/{endpoint_id}"),
        None,
    );
    assert_eq!(found["name"], "kept");
}

#[test]
fn a_failed_backup_is_counted_and_serving_goes_on_on_sqlite() {
    if sqlite_only("scheduled backups copy SQLite files; PostgreSQL refuses them") {
        return;
    }
    let backups = tempfile::tempdir().unwrap();
    let dir = backups.path().join("b");
    let server = backed_up(&dir, Duration::from_millis(200), 3);
    wait_for(WAIT, || (!names(&dir).is_empty()).then_some(())).expect("a first backup");
    // The folder is replaced by a file: every later backup fails (also when run as root).
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::write(&dir, b"not a folder").unwrap();
    wait_for(WAIT, || {
        metric(&server, "webhookd_backup_failures_total").filter(|n| *n >= 2.0)
    })
    .expect("failures are counted");
    let health = healthz(&server);
    assert_eq!(health["status"], "ok");
    assert!(health["backup"]["last_success_at"].is_string(), "{health}");
    let c = server.client();
    ok(
        &c,
        "POST",
        "/endpoints",
        Some(json!({"name": "still", "url": "http://127.0.0.1:9/hook"})),
    );
}

#[test]
fn backups_are_off_by_default_and_absent_from_metrics_and_healthz() {
    let server = TestServer::start();
    assert_eq!(
        metric(&server, "webhookd_backup_last_success_timestamp_seconds"),
        None
    );
    assert!(healthz(&server).get("backup").is_none());
}

fn serve(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_webhookd"))
        .arg("serve")
        .args(args)
        .env("WEBHOOKD_LOG", "warn")
        .output()
        .expect("the binary runs")
}

#[test]
fn backup_flags_are_refused_with_postgres_and_checked() {
    let dir = tempfile::tempdir().unwrap();
    let backups = dir.path().join("b");
    let backups = backups.to_str().unwrap();
    // No server listens there: the refusal comes before any connection.
    let refused = serve(&[
        "--db",
        "postgres://u:secret@127.0.0.1:9/webhookd",
        "--backup-dir",
        backups,
    ]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--backup-dir") && stderr.contains("pg_dump"),
        "{stderr}"
    );
    assert!(stderr.contains("point-in-time recovery"), "{stderr}");
    assert!(!stderr.contains("secret"), "{stderr}");
    let db = dir.path().join("w.sqlite");
    let db = db.to_str().unwrap();
    for (flag, value, says) in [
        ("--backup-every", "5s", "at least 10s"),
        ("--backup-every", "1w", "not a duration"),
        ("--backup-keep", "0", "at least 1"),
    ] {
        let refused = serve(&["--db", db, "--backup-dir", backups, flag, value]);
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert_eq!(refused.status.code(), Some(2), "{flag} {value}: {stderr}");
        assert!(stderr.contains(says), "{flag} {value}: {stderr}");
        assert!(stderr.contains(flag), "{flag} {value}: {stderr}");
    }
    let alone = serve(&["--db", db, "--backup-keep", "3"]);
    let stderr = String::from_utf8_lossy(&alone.stderr);
    assert_eq!(alone.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--backup-dir"), "{stderr}");
    assert!(
        !Path::new(db).exists(),
        "refused before the database is made"
    );
}
