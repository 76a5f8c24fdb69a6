//! The real binary as a subprocess: killed with SIGKILL while tasks are pending and in flight,
//! it delivers every task after a restart on the same database (on PostgreSQL once the killed
//! node's leases run out); SIGTERM shuts it down cleanly.

use crate::delivery::endpoint;
use crate::support::{Answer, Backend, Db, Receiver, backend, free_local_addr, ok, wait_for};
use serde_json::{Value, json};
use std::collections::BTreeSet;
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
    fn start(db: &str, extra: &[&str]) -> Served {
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

    fn client(&self, db: &str) -> Client {
        let (key_id, secret) = Self::key(db);
        Client::new(&self.url, &key_id, &secret)
    }

    /// A new key of `app1`, made by `webhookd keys create`: (key id, secret).
    fn key(db: &str) -> (String, String) {
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

fn db_in(dir: &tempfile::TempDir) -> String {
    crate::support::test_db(dir.path())
}

/// `(status, count)` of every task in the database.
fn statuses(db: &str) -> Vec<(String, i64)> {
    Db::open(db)
        .rows(
            "SELECT status, count(*) FROM tasks GROUP BY status ORDER BY status",
            &[],
        )
        .iter()
        .map(|r| (r[0].text().to_string(), r[1].int()))
        .collect()
}

/// The endpoints' delivery timeout here: short, so that on PostgreSQL the lease of a task a
/// killed node had claimed (the timeout plus a 30 s margin, docs/design.md §16) runs out soon.
const TIMEOUT_MS: u64 = 2_000;

/// How long a restarted server may take to deliver what a SIGKILL interrupted. SQLite: one
/// process owns the file and requeues every `running` task at start. PostgreSQL: other nodes'
/// `running` tasks are alive as far as a node knows, so the killed node's claims wait for their
/// lease to run out.
fn redelivery_within(base: Duration) -> Duration {
    match backend() {
        Backend::Sqlite => base,
        Backend::Postgres => base + Duration::from_millis(TIMEOUT_MS) + Duration::from_secs(30),
    }
}

/// The task ids (`X-Service-Task-Id`) the receiver has seen.
fn delivered_task_ids(rx: &Receiver) -> BTreeSet<String> {
    rx.received()
        .iter()
        .filter_map(|r| r.header("x-service-task-id").map(str::to_string))
        .collect()
}

#[test]
fn sigkill_while_delivering_loses_no_task() {
    let dir = tempfile::tempdir().unwrap();
    let db = db_in(&dir);
    let rx = Receiver::start();
    rx.set_default(Answer::status(200).delayed(Duration::from_millis(300)));
    let server = Served::start(&db, &[]);
    let c = server.client(&db);
    let ep = endpoint(&c, &rx.url, json!({ "timeout_ms": TIMEOUT_MS }));
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
    let all_done = wait_for(redelivery_within(Duration::from_secs(15)), || {
        let s = statuses(&db);
        (s == vec![("success".to_string(), 40)]).then_some(())
    });
    assert!(
        all_done.is_some(),
        "not all tasks succeeded: {:?}",
        statuses(&db)
    );
    let delivered = delivered_task_ids(&rx);
    assert_eq!(
        delivered, ids,
        "every task reached the receiver at least once"
    );
}

const ID_TABLES: [&str; 3] = ["events", "tasks", "attempts"];

/// Every id each of [`ID_TABLES`] holds.
fn all_ids(db: &str) -> [BTreeSet<i64>; 3] {
    let mut db = Db::open(db);
    ID_TABLES.map(|table| {
        db.ints(&format!("SELECT id FROM {table}"), &[])
            .into_iter()
            .collect()
    })
}

/// SQLite hands the ids of events, tasks and attempts out of blocks reserved in memory (the
/// high-water mark on disk is raised once per block, docs/dev/storage.md, "Ids from reserved
/// blocks"): a SIGKILL loses the rest of the blocks, and the ids after the restart are still
/// above every id handed out before, even once the newest rows are deleted (as retention
/// deletes whole rows). PostgreSQL's sequences give the same answer.
#[test]
fn ids_after_a_sigkill_and_a_restart_are_never_handed_out_again() {
    let dir = tempfile::tempdir().unwrap();
    let db = db_in(&dir);
    let rx = Receiver::start();
    let far = (chrono::Utc::now() + chrono::Duration::days(30)).to_rfc3339();
    // An event (its endpoint's task is sent now), three tasks due in a month and one sent now:
    // 1 event, 5 tasks and 2 attempts.
    let written = [1, 5, 2];
    let write = |c: &Client, ep: i64, sent: usize, attempts: i64| {
        for _ in 0..3 {
            ok(
                c,
                "POST",
                "/tasks",
                Some(json!({"endpoint_id": ep, "run_at": far})),
            );
        }
        ok(
            c,
            "POST",
            "/events",
            Some(json!({"event_name": "nobody.listens", "payload": {}})),
        );
        ok(c, "POST", "/tasks", Some(json!({"endpoint_id": ep})));
        rx.wait_for(sent, Duration::from_secs(10));
        let attempted = wait_for(Duration::from_secs(10), || {
            let n = Db::open(&db).int("SELECT count(*) FROM attempts", &[]);
            (n >= attempts).then_some(())
        });
        assert!(attempted.is_some(), "the sent task's attempt is recorded");
    };
    let mut server = Served::start(&db, &[]);
    let c = server.client(&db);
    let ep = endpoint(&c, &rx.url, json!({ "timeout_ms": TIMEOUT_MS }));
    write(&c, ep, 2, 2);
    server.child.kill().unwrap(); // SIGKILL
    server.child.wait().unwrap();
    let before = all_ids(&db);
    {
        let mut conn = Db::open(&db);
        for (table, ids) in ID_TABLES.iter().zip(&before).rev() {
            let newest = *ids.last().expect("rows were written");
            if backend() == Backend::Sqlite {
                // The mark on disk covers every id handed out, whatever was left in memory.
                let mark = conn.int(
                    "SELECT seq FROM sqlite_sequence WHERE name = ?1",
                    &[&table.to_string()],
                );
                assert!(mark >= newest, "{table}: mark {mark} below id {newest}");
            }
            conn.execute(&format!("DELETE FROM {table} WHERE id = ?1"), &[&newest]);
        }
    }

    let restarted = Served::start(&db, &[]);
    let c = restarted.client(&db);
    // One attempt was deleted: 1 + 2.
    write(&c, ep, 4, 3);
    let after = all_ids(&db);
    for (((table, old), now), n) in ID_TABLES.iter().zip(&before).zip(&after).zip(written) {
        let newest = old.last().copied().unwrap_or(0);
        let new: Vec<i64> = now.difference(old).copied().collect();
        assert!(
            new.len() == n && new.iter().all(|id| *id > newest),
            "{table}: before the kill {old:?}, after the restart {now:?}"
        );
    }
}

#[test]
fn sigterm_finishes_in_flight_deliveries_and_exits_zero() {
    let dir = tempfile::tempdir().unwrap();
    let db = db_in(&dir);
    let rx = Receiver::start();
    rx.set_default(Answer::status(200).delayed(Duration::from_millis(800)));
    let mut server = Served::start(&db, &["--shutdown-grace-secs", "5"]);
    let c = server.client(&db);
    let ep = endpoint(&c, &rx.url, json!({ "timeout_ms": TIMEOUT_MS }));
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
    let status = Db::open(&db).rows("SELECT status FROM tasks WHERE id = ?1", &[&id]);
    assert_eq!(
        status[0][0].text(),
        "success",
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

/// Fault injection: publishes and minute schedules run against a subprocess server that is
/// SIGKILLed at random moments, at least ten times, and restarted on the same file each time.
/// Afterwards every acknowledged publish's task has reached the receiver, no (schedule,
/// instant) was fired twice, and the file passes `PRAGMA integrity_check`. The kills go on until
/// a minute boundary has passed with the schedules in place, so firings are among what is cut.
#[test]
fn random_sigkills_under_load_lose_nothing_and_fire_nothing_twice() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Instant;

    let dir = tempfile::tempdir().unwrap();
    let db = db_in(&dir);
    let rx = Receiver::start();
    let server = Served::start(&db, &["--misfire-grace-secs", "300"]);
    let (key_id, secret) = Served::key(&db);
    let c = Client::new(&server.url, &key_id, &secret);
    let ep = endpoint(&c, &rx.url, json!({ "timeout_ms": TIMEOUT_MS }));
    for i in 0..20 {
        ok(
            &c,
            "POST",
            "/schedules",
            Some(json!({"name": format!("s{i}"), "cron_expr": "* * * * *", "endpoint_ids": [ep]})),
        );
    }
    let schedules_from = chrono::Utc::now();
    let url = Arc::new(Mutex::new(server.url.clone()));
    let stop = Arc::new(AtomicBool::new(false));
    let acknowledged = Arc::new(Mutex::new(Vec::<i64>::new()));
    let publishers: Vec<_> = (0..2)
        .map(|p| {
            let (url, stop, acknowledged) = (url.clone(), stop.clone(), acknowledged.clone());
            let (key_id, secret) = (key_id.clone(), secret.clone());
            std::thread::spawn(move || {
                let mut n = 0;
                while !stop.load(Ordering::SeqCst) {
                    let base = url.lock().unwrap().clone();
                    let client = Client::new(&base, &key_id, &secret);
                    let body = json!({"event_name": "load.tick", "payload": {"p": p, "n": n}});
                    n += 1;
                    // A publish cut by a kill is not acknowledged, and may or may not exist.
                    if let Ok(reply) = client.send("POST", "/events", Some(&body))
                        && reply.status == 200
                    {
                        let id = reply.data()["id"].as_i64().unwrap();
                        acknowledged.lock().unwrap().push(id);
                    }
                }
            })
        })
        .collect();

    let started = Instant::now();
    let mut server = server;
    let mut kills = 0;
    let boundary_passed = || {
        let now = chrono::Utc::now();
        // The first minute after the schedules were made, and a few seconds to fire it.
        now.timestamp() / 60 > schedules_from.timestamp() / 60 && now.timestamp() % 60 >= 3
            || now.timestamp() / 60 > schedules_from.timestamp() / 60 + 1
    };
    while kills < 10 || !boundary_passed() {
        assert!(
            started.elapsed() < crate::support::patient(Duration::from_secs(90)),
            "the kill loop ran too long"
        );
        let pause = 300 + rand::random::<u64>() % 2200;
        std::thread::sleep(Duration::from_millis(pause));
        server.child.kill().unwrap();
        server.child.wait().unwrap();
        kills += 1;
        server = Served::start(&db, &["--misfire-grace-secs", "300"]);
        *url.lock().unwrap() = server.url.clone();
    }
    stop.store(true, Ordering::SeqCst);
    for p in publishers {
        p.join().unwrap();
    }
    let acknowledged = acknowledged.lock().unwrap().clone();
    assert!(
        acknowledged.len() > 50,
        "only {} publishes acknowledged",
        acknowledged.len()
    );

    let mut conn = Db::open(&db);
    if backend() == Backend::Sqlite {
        let integrity = conn.rows("PRAGMA integrity_check", &[]);
        assert_eq!(integrity[0][0].text(), "ok");
    }
    let twice = conn.rows(
        "SELECT schedule_id, run_at, count(*) FROM tasks WHERE schedule_id IS NOT NULL
         GROUP BY schedule_id, run_at HAVING count(*) > 1",
        &[],
    );
    assert!(twice.is_empty(), "fired twice: {twice:?}");
    let firings = conn.int(
        "SELECT count(*) FROM tasks WHERE schedule_id IS NOT NULL",
        &[],
    );
    assert!(firings >= 20, "only {firings} scheduled tasks");

    // Every acknowledged publish has its one task, and each reaches the receiver.
    let mut expected = BTreeSet::new();
    for event in &acknowledged {
        let tasks = conn.ints("SELECT id FROM tasks WHERE event_id = ?1", &[event]);
        assert_eq!(tasks.len(), 1, "event {event} has tasks {tasks:?}");
        expected.insert(tasks[0].to_string());
    }
    drop(conn);
    let delivered = wait_for(redelivery_within(Duration::from_secs(30)), || {
        expected.is_subset(&delivered_task_ids(&rx)).then_some(())
    });
    let got = delivered_task_ids(&rx);
    assert!(
        delivered.is_some(),
        "{} of {} acknowledged publishes not delivered after {kills} kills",
        expected.difference(&got).count(),
        expected.len()
    );
    eprintln!(
        "{kills} kills in {:?}: {} acknowledged publishes delivered, {firings} scheduled tasks",
        started.elapsed(),
        expected.len()
    );
    drop(server);
}

/// The delivery rounds' `Store::write_redoable` is one transaction on both stores: a write that
/// fails midway leaves none of its changes, one that succeeds is seen by the next read (on
/// PostgreSQL it commits with `synchronous_commit` off, still as one transaction).
#[test]
fn a_redoable_write_commits_all_of_it_or_nothing() {
    use webhookd::store::StoreError;
    let dir = tempfile::tempdir().unwrap();
    let store = webhookd::store::open(&crate::support::test_db(dir.path()), 2).unwrap();
    let failed = store.write_redoable(|tx| {
        tx.create_key("app1", "first", 1)?;
        tx.create_key("app1", "second", 1)?;
        Err::<(), _>(StoreError::Other(anyhow::anyhow!("refused midway")))
    });
    assert!(failed.is_err());
    assert_eq!(store.read(|tx| tx.count_keys()).unwrap(), 0, "nothing kept");
    store
        .write_redoable(|tx| {
            tx.create_key("app1", "first", 1)?;
            tx.create_key("app1", "second", 1)
        })
        .unwrap();
    assert_eq!(store.read(|tx| tx.count_keys()).unwrap(), 2);
}
