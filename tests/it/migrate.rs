//! `webhookd migrate --from SQLITE --to postgres://…` (docs/design.md §16) through the real binary: a
//! database filled by a real server (every table, tasks in every status) arrives row for row
//! with the same ids, running tasks as pending; identities continue after the copied ids; a
//! second run is refused as the target is not empty and changes nothing; a wrong password is an
//! error that does not show it. And `backup` refuses a PostgreSQL URL, pointing to `pg_dump`.

use crate::delivery::{endpoint, policy, task, task_id, wait_attempts, wait_status};
use crate::pg::PgServer;
use crate::schedules::wide_skew;
use crate::support::{Receiver, TestServer, create_key, get_text, ok, wait_for};
use chrono::{SubsecRound, TimeDelta, Utc};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

/// Nothing listens here: every attempt fails at once (connection refused).
const NOWHERE: &str = "http://127.0.0.1:9/hook";

fn webhookd(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_webhookd"))
        .args(args)
        .env("WEBHOOKD_LOG", "warn")
        .output()
        .expect("the binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Every webhookd table with its rows as JSON objects (numbers as f64, so SQLite's REAL `2.0`
/// equals PostgreSQL's `2`), sorted.
type Dump = BTreeMap<String, Vec<String>>;

fn normalise(value: Value) -> Value {
    match value {
        Value::Number(n) => json!(n.as_f64().unwrap()),
        Value::Object(map) => {
            Value::Object(map.into_iter().map(|(k, v)| (k, normalise(v))).collect())
        }
        other => other,
    }
}

fn sorted(rows: impl Iterator<Item = String>) -> Vec<String> {
    let mut rows: Vec<String> = rows
        .map(|r| normalise(serde_json::from_str(&r).unwrap()).to_string())
        .collect();
    rows.sort();
    rows
}

/// The first column of every row `sql` selects, as text.
pub(crate) fn sqlite_strings(
    conn: &rusqlite::Connection,
    sql: &str,
    params: impl rusqlite::Params,
) -> Vec<String> {
    conn.prepare(sql)
        .unwrap()
        .query_map(params, |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// webhookd's tables in a SQLite database (not SQLite's own).
pub(crate) const SQLITE_TABLES: &str =
    "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'";

fn sqlite_dump(db: &Path) -> Dump {
    let conn = rusqlite::Connection::open(db).unwrap();
    let mut dump = Dump::new();
    for table in sqlite_strings(&conn, SQLITE_TABLES, []) {
        let columns = sqlite_strings(&conn, "SELECT name FROM pragma_table_info(?1)", [&table]);
        let pairs: Vec<String> = columns.iter().map(|c| format!("'{c}', \"{c}\"")).collect();
        let sql = format!("SELECT json_object({}) FROM \"{table}\"", pairs.join(", "));
        let rows = sqlite_strings(&conn, &sql, []);
        dump.insert(table, sorted(rows.into_iter()));
    }
    dump
}

fn postgres_dump(client: &mut postgres::Client) -> Dump {
    let tables: Vec<String> = client
        .query(
            "SELECT tablename::text FROM pg_tables
              WHERE schemaname = current_schema() AND tablename <> 'webhookd_schema'",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let mut dump = Dump::new();
    for table in tables {
        let rows = client
            .query(&format!("SELECT row_to_json(t)::text FROM {table} t"), &[])
            .unwrap();
        dump.insert(table, sorted(rows.iter().map(|r| r.get::<_, String>(0))));
    }
    dump
}

/// A SQLite database written by a real server: keys (one revoked, two apps), policies,
/// endpoints (one disabled), a schedule that fired, an event, tasks in every status with their
/// attempts, replay records and the health probe. One task is left `running`, as a crash
/// would leave it; returns the database (in the kept folder), that task's id, the first key
/// (id, secret) and the revoked key's id.
fn filled_database() -> (
    tempfile::TempDir,
    std::path::PathBuf,
    i64,
    (String, String),
    String,
) {
    let start = Utc::now().trunc_subsecs(0);
    // The source is a SQLite file whatever WEBHOOKD_TEST_DB says: migrate copies from one.
    let source = tempfile::tempdir().unwrap();
    let file = source.path().join("webhookd.sqlite");
    let server = TestServer::start_manual(start, |config| {
        wide_skew(config);
        config.db = file.to_str().unwrap().to_string();
    });
    let c = server.client();
    let other = server.client_for_app("app2");
    let (revoked, _) = create_key(&server.db, "app3");
    let db_text = server.db.clone();
    let out = webhookd(&["keys", "revoke", "--db", &db_text, &revoked]);
    assert!(out.status.success(), "{}", text(&out.stderr));

    let receiver = Receiver::start();
    let good = endpoint(&c, &receiver.url, json!({ "headers": {"x-test": "1"} }));
    let once = policy(&c, 1, "fixed", 0, 0);
    let failing = endpoint(&c, NOWHERE, json!({ "retry_policy_id": once }));
    let slow = policy(&c, 3, "fixed", 3600, 3600);
    let retrying = endpoint(
        &c,
        NOWHERE,
        json!({ "retry_policy_id": slow, "max_in_flight": 2 }),
    );
    endpoint(&other, &receiver.url, json!({}));

    let succeeded = task_id(&c, good);
    wait_status(&c, succeeded, "success");
    let failed = task_id(&c, failing);
    wait_status(&c, failed, "failed");
    let retried = task_id(&c, retrying);
    wait_attempts(&c, retried, 1);
    let later = (start + TimeDelta::hours(1)).to_rfc3339();
    let pending = task(&c, good, json!({ "run_at": later }))["id"]
        .as_i64()
        .unwrap();
    let canceled = task(&c, good, json!({ "run_at": later }))["id"]
        .as_i64()
        .unwrap();
    ok(&c, "POST", &format!("/tasks/{canceled}/cancel"), None);
    let running = task(&c, good, json!({ "run_at": later, "payload": {"n": 1} }))["id"]
        .as_i64()
        .unwrap();
    ok(
        &c,
        "POST",
        "/events",
        Some(json!({"event_name": "order.created", "event_key": "o-1", "payload": {"n": 2}})),
    );
    let schedule = ok(
        &c,
        "POST",
        "/schedules",
        Some(json!({"name": "m", "cron_expr": "* * * * *", "endpoint_ids": [good]})),
    )["id"]
        .as_i64()
        .unwrap();
    server.advance(TimeDelta::seconds(61));
    wait_for(Duration::from_secs(10), || {
        let s = ok(&c, "GET", &format!("/schedules/{schedule}"), None);
        (!s["last_run_at"].is_null()).then_some(())
    })
    .expect("the schedule fired");
    let (status, body) = get_text(&format!("{}/healthz", server.url));
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        ok(&c, "GET", &format!("/tasks/{pending}"), None)["status"],
        "pending"
    );
    // A consistent copy outlives the server's temp folder.
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("copy.sqlite");
    let out = webhookd(&["backup", "--db", &db_text, "--out", db.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let key = (server.key_id.clone(), server.secret.clone());
    server.stop();

    // What a crash mid-delivery leaves: the task `running`, claimed when it was due.
    let conn = rusqlite::Connection::open(&db).unwrap();
    let claimed = start.timestamp_millis() - 5_000;
    conn.execute(
        "UPDATE tasks SET status = 'running', next_attempt_at = ?2, updated_at = ?2 WHERE id = ?1",
        rusqlite::params![running, claimed],
    )
    .unwrap();
    conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
        .unwrap();
    (dir, db, running, key, revoked)
}

/// A child `webhookd serve`, killed when the test ends (also when it fails).
struct Node(std::process::Child);

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn migrate_copies_every_row_with_its_id_and_refuses_a_non_empty_target() {
    let Some(pg) = PgServer::start() else {
        return;
    };
    let (_dir, db, running, (key_id, secret), revoked) = filled_database();
    let mut before = sqlite_dump(&db);
    // SQLite's task counters are kept by its triggers; PostgreSQL has none to copy into.
    assert!(before.remove("task_counts").is_some());
    for (table, rows) in &before {
        assert!(!rows.is_empty(), "the test left {table} empty: fill it");
    }
    let statuses: BTreeSet<String> = before["tasks"]
        .iter()
        .map(|r| {
            serde_json::from_str::<Value>(r).unwrap()["status"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    let every: BTreeSet<String> = ["pending", "running", "success", "failed", "canceled"]
        .map(String::from)
        .into();
    assert_eq!(statuses, every);

    let url = pg.create_database("migrated");
    let db_text = db.to_str().unwrap();
    let started = Utc::now().timestamp_millis();
    let out = webhookd(&["migrate", "--from", db_text, "--to", &url]);
    let finished = Utc::now().timestamp_millis();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(!stdout.contains(pg.password()) && !stderr.contains(pg.password()));
    assert!(
        stderr.contains("1 tasks that were being delivered are pending again"),
        "{stderr}"
    );

    // The printed counts are the tables' row counts.
    let printed: BTreeMap<String, usize> = stdout
        .lines()
        .map(|line| {
            let (table, rows) = line.split_once('\t').expect("TABLE\\tROWS");
            (table.to_string(), rows.parse().unwrap())
        })
        .collect();
    let counts: BTreeMap<String, usize> = before
        .iter()
        .map(|(t, rows)| (t.clone(), rows.len()))
        .collect();
    assert_eq!(printed, counts);

    // Every row arrived as it was, but the running task, which is pending again.
    let mut client = pg.client(&url);
    let after = postgres_dump(&mut client);
    let mut expected = before.clone();
    let requeued = |rows: &mut Vec<String>, pick: &dyn Fn(&Value) -> bool| -> Value {
        let at = rows
            .iter()
            .position(|r| pick(&serde_json::from_str(r).unwrap()))
            .expect("the task is there");
        serde_json::from_str(&rows.remove(at)).unwrap()
    };
    let is_running = |t: &Value| t["id"] == json!(running as f64);
    let mut want = requeued(expected.get_mut("tasks").unwrap(), &is_running);
    let mut got_tasks = after["tasks"].clone();
    let got = requeued(&mut got_tasks, &is_running);
    assert_eq!(want["status"], "running");
    let updated = got["updated_at"].as_f64().unwrap() as i64;
    assert!((started..=finished).contains(&updated), "{got}");
    want["status"] = json!("pending");
    want["updated_at"] = got["updated_at"].clone();
    assert_eq!(got, want, "the requeued task keeps everything else");
    let mut after_but_running = after.clone();
    after_but_running.insert("tasks".into(), got_tasks);
    assert_eq!(after_but_running, expected);

    // New rows get ids after the copied ones.
    let max_id = |table: &str| -> i64 {
        before[table]
            .iter()
            .map(|r| {
                serde_json::from_str::<Value>(r).unwrap()["id"]
                    .as_f64()
                    .unwrap() as i64
            })
            .max()
            .unwrap()
    };
    let next: i64 = client
        .query_one(
            "INSERT INTO events (app_id, event_name, status, created_at)
             VALUES ('app1', 'x', 'published', 0) RETURNING id",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(next, max_id("events") + 1);
    let task_next: i64 = client
        .query_one(
            "INSERT INTO tasks (app_id, endpoint_id, task_type, status, run_at, max_attempts,
                                created_at, updated_at)
             VALUES ('app1', 1, 'manual', 'canceled', 0, 1, 0, 0) RETURNING id",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(task_next, max_id("tasks") + 1);
    client
        .batch_execute(
            "DELETE FROM events WHERE event_name = 'x'; DELETE FROM tasks WHERE run_at = 0",
        )
        .unwrap();

    // Again: refused (exit 2), naming the filled tables; nothing changed.
    let out = webhookd(&["migrate", "--from", db_text, "--to", &url]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("not empty") && stderr.contains("tasks:"),
        "{stderr}"
    );
    assert!(!stderr.contains(pg.password()), "{stderr}");
    assert!(out.stdout.is_empty());
    assert_eq!(postgres_dump(&mut client), after);

    // A wrong password: an error, the password it was given nowhere in it.
    let wrong = pg.url_with_password("migrated", "not-the-Pa55word");
    let (code, stderr) = migrate(&db, &wrong);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(!stderr.contains("not-the-Pa55word"), "{stderr}");
    assert!(stderr.contains("webhookd:***@127.0.0.1"), "{stderr}");
    assert_eq!(postgres_dump(&mut client), after);

    // A node on the migrated database: the SQLite keys work (the revoked one does not) and the
    // records are there under their ids.
    let listen = crate::support::free_local_addr();
    let _node = Node(
        Command::new(env!("CARGO_BIN_EXE_webhookd"))
            .args([
                "serve",
                "--db",
                &url,
                "--listen",
                &listen,
                "--max-skew-secs",
                "31536000",
            ])
            .env("WEBHOOKD_LOG", "warn")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("serve starts"),
    );
    let base = format!("http://{listen}");
    let up = wait_for(Duration::from_secs(30), || {
        std::net::TcpStream::connect(&listen).ok()?;
        (get_text(&format!("{base}/healthz")).0 == 200).then_some(())
    });
    let c = webhookd::client::Client::new(&base, &key_id, &secret);
    let read = up.and_then(|()| c.send("GET", &format!("/tasks/{running}"), None).ok());
    let denied = webhookd::client::Client::new(&base, &revoked, &secret)
        .send("GET", "/endpoints", None)
        .map(|r| r.status);
    let read = read.expect("the node on the migrated database answers");
    assert_eq!(read.status, 200, "{}", read.body);
    // (Its status may move on: the node delivers it at once.)
    assert_eq!(
        read.body["data"]["payload"],
        json!({"n": 1}),
        "{}",
        read.body
    );
    assert_eq!(denied.unwrap(), 401);
}

/// `webhookd migrate --from FROM --to TO`: its exit code and stderr.
fn migrate(from: &Path, to: &str) -> (Option<i32>, String) {
    let out = webhookd(&["migrate", "--from", from.to_str().unwrap(), "--to", to]);
    (out.status.code(), text(&out.stderr))
}

#[test]
fn migrate_refuses_a_missing_source_a_foreign_file_and_a_non_url_target() {
    // No server listens on port 1: these are refused before any connection.
    const UNUSED: &str = "postgres://u:secret-pw@127.0.0.1:1/x";
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("none.sqlite");
    let (code, stderr) = migrate(&missing, UNUSED);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--from") && !missing.exists(), "{stderr}");

    // Another program's SQLite file: refused as `serve` refuses it, and left unchanged.
    let foreign = dir.path().join("foreign.sqlite");
    rusqlite::Connection::open(&foreign)
        .unwrap()
        .execute_batch("CREATE TABLE notes (body TEXT)")
        .unwrap();
    let untouched = std::fs::read(&foreign).unwrap();
    let (code, stderr) = migrate(&foreign, UNUSED);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("another program"), "{stderr}");
    assert_eq!(std::fs::read(&foreign).unwrap(), untouched);

    let db = dir.path().join("db.sqlite");
    create_key(db.to_str().unwrap(), "app1");
    let (code, stderr) = migrate(&db, "other.sqlite");
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("--to") && stderr.contains("postgres://"),
        "{stderr}"
    );
}

#[test]
fn backup_refuses_a_postgres_url_and_points_to_pg_dump() {
    let dir = tempfile::tempdir().unwrap();
    let out_file = dir.path().join("b.sqlite");
    let out = webhookd(&[
        "backup",
        "--db",
        "postgres://webhookd:hunter2@db.example/hooks",
        "--out",
        out_file.to_str().unwrap(),
    ]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("pg_dump"), "{stderr}");
    assert!(
        !stderr.contains("hunter2") && stderr.contains("webhookd:***@"),
        "{stderr}"
    );
    assert!(!out_file.exists());
}
