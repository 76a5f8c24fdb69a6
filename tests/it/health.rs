//! Database health (docs/design.md §10): `/healthz` says whether the database can
//! be read and written, writes answer 503 with a reason while it cannot, and `serve` refuses a
//! database it cannot write. Read-only and full disks are made for real: a read-only bind mount
//! and a small tmpfs, mounted by the test (root only; root ignores file modes, so `chmod` alone
//! proves nothing there).

use crate::support::{Db, TestServer, get_text, ok, raw, require_component, sqlite_only};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

pub(crate) fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// A mount the test made, undone when dropped.
pub(crate) struct Mounted(PathBuf);

impl Mounted {
    fn run(args: &[&str]) {
        let out = Command::new("mount")
            .args(args)
            .output()
            .expect("run mount");
        assert!(
            out.status.success(),
            "mount {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    pub(crate) fn tmpfs(at: &Path, size: &str) -> Mounted {
        Self::run(&[
            "-t",
            "tmpfs",
            "-o",
            &format!("size={size}"),
            "tmpfs",
            at.to_str().unwrap(),
        ]);
        Mounted(at.to_path_buf())
    }

    /// `from` seen read-only at `at`.
    fn read_only_bind(from: &Path, at: &Path) -> Mounted {
        Self::run(&["--bind", from.to_str().unwrap(), at.to_str().unwrap()]);
        let mounted = Mounted(at.to_path_buf());
        Self::run(&["-o", "remount,ro,bind", at.to_str().unwrap()]);
        mounted
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

fn health(url: &str) -> (u16, Value) {
    let (status, text) = get_text(&format!("{url}/healthz"));
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// Polls `/healthz` until it answers `status` (the probe runs at most once a second).
pub(crate) fn wait_health(url: &str, status: u16) -> Value {
    let mut last = (0, Value::Null);
    crate::support::wait_for(Duration::from_secs(5), || {
        last = health(url);
        (last.0 == status).then(|| last.1.clone())
    })
    .unwrap_or_else(|| panic!("/healthz never answered {status}; last {last:?}"))
}

fn integrity_ok(db: &Path) {
    let conn = rusqlite::Connection::open(db).unwrap();
    let result: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(result, "ok");
}

#[test]
fn healthz_get_and_head_answer_ok_with_the_version() {
    let server = TestServer::start();
    let (status, body) = health(&server.url);
    assert_eq!(status, 200);
    assert_eq!(
        body,
        json!({"status": "ok", "version": env!("CARGO_PKG_VERSION")})
    );
    let (status, body) = raw(&server.url, "HEAD", "/healthz", &[], b"");
    assert_eq!((status, body), (200, Value::Null), "HEAD has no body");
    // The probe really wrote its row.
    let probes = Db::open(&server.db).int("SELECT count(*) FROM health_probe", &[]);
    assert_eq!(probes, 1);
}

#[test]
fn a_database_file_deleted_or_replaced_while_running_is_503_for_health_and_writes_on_sqlite() {
    if sqlite_only("deletes and replaces the server's open SQLite file") {
        return;
    }
    let server = TestServer::start();
    let c = server.client();
    ok(&c, "POST", "/v1/events", Some(json!({"event_name": "a.b"})));
    let kept = server.dir.path().join("kept.sqlite");
    std::fs::copy(&server.db, &kept).unwrap();
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", server.db));
    }
    let body = wait_health(&server.url, 503);
    assert_eq!(body["status"], "unavailable");
    let reason = body["reason"].as_str().unwrap();
    assert!(
        reason.contains("deleted") && reason.contains("webhookd.sqlite"),
        "{reason}"
    );
    let reply = c
        .send("POST", "/v1/events", Some(&json!({"event_name": "a.b"})))
        .unwrap();
    assert_eq!((reply.status, reply.code()), (503, 50302), "{}", reply.body);
    assert!(reply.body["message"].as_str().unwrap().contains("deleted"));
    // Reads still answer from the open file.
    ok(&c, "GET", "/v1/events", None);

    // Another file at the path is not the one the server has open.
    std::fs::copy(&kept, &server.db).unwrap();
    let body = wait_health(&server.url, 503);
    assert!(
        body["reason"].as_str().unwrap().contains("replaced"),
        "{body}"
    );
    let reply = c
        .send("POST", "/v1/events", Some(&json!({"event_name": "a.b"})))
        .unwrap();
    assert_eq!((reply.status, reply.code()), (503, 50302));
}

#[test]
fn serve_refuses_a_database_it_cannot_write_naming_the_file_and_the_permission_on_sqlite() {
    if sqlite_only("a read-only bind mount of the SQLite file's folder") {
        return;
    }
    if !require_component(
        "root (to mount a read-only bind mount; root ignores file modes)",
        is_root(),
        "run `cargo test` as root, as CI does",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (data, view) = (dir.path().join("data"), dir.path().join("view"));
    std::fs::create_dir_all(&data).unwrap();
    std::fs::create_dir_all(&view).unwrap();
    crate::support::create_key(data.join("webhookd.sqlite").to_str().unwrap(), "app1");
    let _mounted = Mounted::read_only_bind(&data, &view);
    let db = view.join("webhookd.sqlite");
    let output = Command::new(env!("CARGO_BIN_EXE_webhookd"))
        .args(["serve", "--db", db.to_str().unwrap(), "--listen"])
        .arg(crate::support::free_local_addr())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success(),
        "serve started on a read-only file"
    );
    assert!(
        stderr.contains(db.to_str().unwrap())
            && stderr.contains("write permission")
            && !stderr.contains("secret"),
        "{stderr}"
    );
}

#[test]
fn a_full_disk_is_503_50301_until_space_is_freed_and_the_file_stays_sound_on_sqlite() {
    if sqlite_only("the full disk is a small tmpfs under the SQLite file") {
        return;
    }
    if !require_component(
        "root (to mount a small tmpfs as a disk that fills up)",
        is_root(),
        "run `cargo test` as root, as CI does",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let disk = dir.path().join("disk");
    std::fs::create_dir_all(&disk).unwrap();
    let _mounted = Mounted::tmpfs(&disk, "6m");
    let db = disk.join("webhookd.sqlite");
    let server = TestServer::start_with(|config| config.db = db.to_str().unwrap().into());
    let c = server.client();
    ok(
        &c,
        "POST",
        "/v1/events",
        Some(json!({"event_name": "before"})),
    );
    assert_eq!(health(&server.url).0, 200);

    // Fill the disk.
    let filler = disk.join("filler");
    {
        use std::io::Write;
        let mut file = std::fs::File::create(&filler).unwrap();
        let chunk = vec![0u8; 64 * 1024];
        while file.write_all(&chunk).is_ok() {}
        let _ = file.sync_all();
    }
    let payload = json!({"event_name": "while.full", "payload": {"pad": "x".repeat(200_000)}});
    let mut refused = None;
    for _ in 0..200 {
        let reply = c.send("POST", "/v1/events", Some(&payload)).unwrap();
        if reply.status != 200 {
            refused = Some(reply);
            break;
        }
    }
    let reply = refused.expect("writes kept succeeding on a full disk");
    assert_eq!((reply.status, reply.code()), (503, 50301), "{}", reply.body);
    assert!(
        reply.body["message"]
            .as_str()
            .unwrap()
            .contains("the disk holding the database is full")
    );
    let body = wait_health(&server.url, 503);
    assert!(body["reason"].as_str().unwrap().contains("full"), "{body}");

    // Free the space: healthy again, writes work, nothing broken.
    std::fs::remove_file(&filler).unwrap();
    let body = wait_health(&server.url, 200);
    assert_eq!(body["status"], "ok");
    ok(
        &c,
        "POST",
        "/v1/events",
        Some(json!({"event_name": "after"})),
    );
    server.stop();
    integrity_ok(&db);
}
