//! The real binary as a subprocess: killed with SIGKILL while tasks are pending and in flight,
//! it delivers every task after a restart on the same file; SIGTERM shuts it down cleanly.

use crate::delivery::endpoint;
use crate::support::{Answer, Receiver, free_local_addr, ok, wait_for};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use webhookd::client::Client;

const BIN: &str = env!("CARGO_BIN_EXE_webhookd");

/// A `webhookd serve` child process on a free port.
struct Served {
    child: Child,
    url: String,
}

impl Served {
    fn start(db: &Path, extra: &[&str]) -> Served {
        let listen = free_local_addr();
        let child = Command::new(BIN)
            .arg("serve")
            .arg("--db")
            .arg(db)
            .args(["--listen", &listen, "--workers", "4"])
            .args(extra)
            .env("WEBHOOKD_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("webhookd starts");
        let url = format!("http://{listen}");
        let health = format!("{url}/healthz");
        wait_for(Duration::from_secs(10), || {
            ureq::get(&health).call().ok().map(|_| ())
        })
        .expect("webhookd answers /healthz");
        Served { child, url }
    }

    fn client(&self, db: &Path) -> Client {
        let (key_id, secret) = Self::key(db);
        Client::new(&self.url, &key_id, &secret)
    }

    /// A new key of `app1`, made by `webhookd keys create`: (key id, secret).
    fn key(db: &Path) -> (String, String) {
        let out = Command::new(BIN)
            .args(["keys", "create", "--db"])
            .arg(db)
            .args(["--app", "app1", "--name", "test", "--json"])
            .output()
            .expect("keys create runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let key: Value = serde_json::from_slice(&out.stdout).unwrap();
        (
            key["key_id"].as_str().unwrap().to_string(),
            key["secret"].as_str().unwrap().to_string(),
        )
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn db_in(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("webhookd.sqlite")
}

fn read_only(db: &Path) -> rusqlite::Connection {
    rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap()
}

/// `(status, count)` of every task in the file.
fn statuses(db: &Path) -> Vec<(String, i64)> {
    webhookd::store::tasks::count_by_status(&read_only(db)).unwrap()
}

#[test]
fn sigkill_while_delivering_loses_no_task() {
    let dir = tempfile::tempdir().unwrap();
    let db = db_in(&dir);
    let rx = Receiver::start();
    rx.set_default(Answer::status(200).delayed(Duration::from_millis(300)));
    let server = Served::start(&db, &[]);
    let c = server.client(&db);
    let ep = endpoint(&c, &rx.url, json!({}));
    let ids: BTreeSet<String> = (0..40)
        .map(|i| {
            ok(
                &c,
                "POST",
                "/tasks",
                Some(json!({ "endpoint_id": ep, "payload": { "i": i } })),
            )["id"]
                .to_string()
        })
        .collect();
    rx.wait_for(3, Duration::from_secs(10));
    let mut server = server;
    server.child.kill().unwrap(); // SIGKILL, mid-delivery
    server.child.wait().unwrap();
    let before = statuses(&db);
    let count = |status: &str| {
        before
            .iter()
            .find(|(s, _)| s == status)
            .map_or(0, |(_, n)| *n)
    };
    assert!(
        count("running") > 0 && count("pending") > 0,
        "tasks were both in flight and pending at the kill: {before:?}"
    );

    rx.set_default(Answer::status(200));
    let _restarted = Served::start(&db, &[]);
    let all_done = wait_for(Duration::from_secs(15), || {
        let s = statuses(&db);
        (s == vec![("success".to_string(), 40)]).then_some(())
    });
    assert!(
        all_done.is_some(),
        "not all tasks succeeded: {:?}",
        statuses(&db)
    );
    let delivered: BTreeSet<String> = rx
        .received()
        .iter()
        .filter_map(|r| r.header("x-service-task-id").map(str::to_string))
        .collect();
    assert_eq!(
        delivered, ids,
        "every task reached the receiver at least once"
    );
}

#[test]
fn sigterm_finishes_in_flight_deliveries_and_exits_zero() {
    let dir = tempfile::tempdir().unwrap();
    let db = db_in(&dir);
    let rx = Receiver::start();
    rx.set_default(Answer::status(200).delayed(Duration::from_millis(800)));
    let mut server = Served::start(&db, &["--shutdown-grace-secs", "5"]);
    let c = server.client(&db);
    let ep = endpoint(&c, &rx.url, json!({}));
    let id = ok(&c, "POST", "/tasks", Some(json!({ "endpoint_id": ep })))["id"]
        .as_i64()
        .unwrap();
    assert_eq!(rx.wait_for(1, Duration::from_secs(10)).len(), 1);
    let pid = server.child.id().to_string();
    let killed = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(killed.success());
    let exited = wait_for(Duration::from_secs(10), || server.child.try_wait().unwrap());
    let status = exited.expect("webhookd exits after SIGTERM");
    assert_eq!(status.code(), Some(0));
    let task = webhookd::store::tasks::get(&read_only(&db), "app1", id)
        .unwrap()
        .unwrap();
    assert_eq!(
        task.status, "success",
        "the in-flight delivery finished within the grace"
    );
}

#[test]
fn a_replayed_publish_is_refused_after_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let db = db_in(&dir);
    let mut server = Served::start(&db, &[]);
    let (key_id, secret) = Served::key(&db);
    let (headers, body) = crate::reliability::captured_publish(&key_id, &secret);
    let (status, first) = crate::support::raw(&server.url, "POST", "/v1/events", &headers, &body);
    assert_eq!((status, first["code"].as_i64()), (200, Some(0)), "{first}");
    server.child.kill().unwrap(); // SIGKILL right after the acknowledgement
    server.child.wait().unwrap();

    let restarted = Served::start(&db, &[]);
    let (status, replayed) =
        crate::support::raw(&restarted.url, "POST", "/v1/events", &headers, &body);
    assert_eq!(
        (status, replayed["code"].as_i64()),
        (401, Some(40105)),
        "{replayed}"
    );
    assert_eq!(
        crate::reliability::event_count(&restarted.url, &key_id, &secret),
        1
    );
}
