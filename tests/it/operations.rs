//! Running webhookd as an operator does (docs/design.md §10): `--version`, `healthcheck`, `backup`
//! of a live server, the first-start key rules, `--listen` forms, boolean environment values
//! and the messages of bad values.

use crate::cli::{spawn_on, spawn_with, text, webhookd};
use crate::support::{
    Answer, Backend, Db, Receiver, TestServer, backend, free_local_addr, ok, sqlite_only, test_db,
};
use serde_json::json;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn webhookd_env(args: &[&str], envs: &[(&str, &str)]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_webhookd"))
        .args(args)
        .env_remove("WEBHOOKD_DB")
        .env_remove("WEBHOOKD_URL")
        .envs(envs.iter().copied())
        .output()
        .expect("binary runs")
}

fn key_count(db: &str) -> i64 {
    Db::open(db).int("SELECT count(*) FROM api_keys", &[])
}

#[test]
fn version_names_semver_commit_and_target() {
    let out = webhookd(&["--version"]);
    assert_eq!(out.status.code(), Some(0));
    let line = text(&out.stdout);
    let line = line.trim();
    // webhookd <semver> (<commit>, <target>)
    let rest = line.strip_prefix("webhookd ").expect(line);
    let (semver, rest) = rest.split_once(" (").expect(line);
    assert_eq!(semver, env!("CARGO_PKG_VERSION"));
    assert_eq!(semver.split('.').count(), 3, "{line}");
    let (commit, target) = rest
        .strip_suffix(')')
        .expect(line)
        .split_once(", ")
        .expect(line);
    let head = Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| text(&o.stdout).trim().to_string());
    match head {
        // A build in a git checkout names the commit it was built from.
        Some(head) => {
            assert!(commit.len() >= 7, "{line}");
            assert!(commit.chars().all(|c| c.is_ascii_hexdigit()), "{line}");
            assert!(head.starts_with(commit), "{commit} is not HEAD {head}");
        }
        None => assert_eq!(commit, "unknown", "{line}"),
    }
    assert_eq!(target, webhookd::build_info::TARGET);
    assert!(target.split('-').count() >= 3, "{line}");
    assert!(target.starts_with(std::env::consts::ARCH), "{line}");
}

#[test]
fn healthcheck_exit_codes_and_reasons() {
    let server = TestServer::start();
    let out = webhookd(&["healthcheck", "--url", &server.url]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // The URL also comes from WEBHOOKD_URL.
    let out = webhookd_env(&["healthcheck"], &[("WEBHOOKD_URL", &server.url)]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    // Nothing listening: 1, one line naming the URL.
    let nobody = format!("http://{}", free_local_addr());
    let out = webhookd(&["healthcheck", "--url", &nobody]);
    assert_eq!(out.status.code(), Some(1));
    let why = text(&out.stderr);
    assert_eq!(why.trim().lines().count(), 1, "{why}");
    assert!(
        why.contains("cannot reach") && why.contains(&nobody),
        "{why}"
    );

    // A 503 with a reason: 1, and the line carries the reason.
    let sick = Receiver::start();
    sick.set_default(
        Answer::status(503)
            .header("Content-Type", "application/json")
            .body(r#"{"status":"unavailable","reason":"the disk is full"}"#),
    );
    let out = webhookd(&["healthcheck", "--url", &sick.url]);
    assert_eq!(out.status.code(), Some(1));
    let why = text(&out.stderr);
    assert_eq!(why.trim().lines().count(), 1, "{why}");
    assert!(
        why.contains("503") && why.contains("the disk is full"),
        "{why}"
    );
    assert_eq!(sick.received()[0].path, "/healthz");
}

#[test]
fn backup_refuses_to_overwrite_and_bad_input_is_usage_on_sqlite() {
    if sqlite_only("backup copies a SQLite file (a URL is refused, pointing to pg_dump)") {
        return;
    }
    let server = TestServer::start();
    let dir = tempfile::tempdir().unwrap();
    let out_file = dir.path().join("taken.sqlite");
    std::fs::write(&out_file, "precious").unwrap();
    let db = server.db.as_str();
    let out = webhookd(&["backup", "--db", db, "--out", out_file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let why = text(&out.stderr);
    assert!(why.contains("--out") && why.contains("overwrite"), "{why}");
    assert_eq!(std::fs::read_to_string(&out_file).unwrap(), "precious");

    let fresh = dir.path().join("fresh.sqlite");
    let missing = dir.path().join("missing.sqlite");
    let out = webhookd(&[
        "backup",
        "--db",
        missing.to_str().unwrap(),
        "--out",
        fresh.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--db"), "{}", text(&out.stderr));
    assert!(!fresh.exists() && !missing.exists());

    // Not a webhookd database: refused, and no backup file is left behind.
    let foreign = dir.path().join("foreign.sqlite");
    rusqlite::Connection::open(&foreign)
        .unwrap()
        .execute_batch("CREATE TABLE notes (body TEXT);")
        .unwrap();
    let out = webhookd(&[
        "backup",
        "--db",
        foreign.to_str().unwrap(),
        "--out",
        fresh.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(!fresh.exists());
}

/// A backup taken while clients keep writing holds every record acknowledged before it
/// started, opens as a webhookd database (mode 0600), and passes `integrity_check`.
#[test]
fn backup_of_a_live_server_under_write_load_holds_every_acknowledged_record_on_sqlite() {
    if sqlite_only("backup copies a SQLite file (a URL is refused, pointing to pg_dump)") {
        return;
    }
    let server = TestServer::start();
    let acked: Arc<Mutex<Vec<i64>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let (client, acked, stop) = (server.client(), acked.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    let body =
                        json!({"name": format!("w{w}-{n}"), "url": "https://example.com/in"});
                    let data = ok(&client, "POST", "/v1/endpoints", Some(body));
                    acked.lock().unwrap().push(data["id"].as_i64().unwrap());
                    n += 1;
                }
            })
        })
        .collect();
    // Let the load build up, then note what was acknowledged before the backup starts.
    assert!(
        crate::support::wait_for(Duration::from_secs(20), || {
            (acked.lock().unwrap().len() >= 200).then_some(())
        })
        .is_some(),
        "the writers made too little progress"
    );
    let before: Vec<i64> = acked.lock().unwrap().clone();
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("backup.sqlite");
    let out = webhookd(&[
        "backup",
        "--db",
        &server.db,
        "--out",
        copy.to_str().unwrap(),
    ]);
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    let mode = std::fs::metadata(&copy).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let conn = rusqlite::Connection::open(&copy).unwrap();
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
    let mut in_copy = std::collections::HashSet::new();
    let mut stmt = conn.prepare("SELECT id FROM endpoints").unwrap();
    for id in stmt.query_map([], |r| r.get::<_, i64>(0)).unwrap() {
        in_copy.insert(id.unwrap());
    }
    let lost: Vec<_> = before.iter().filter(|id| !in_copy.contains(id)).collect();
    assert!(
        lost.is_empty(),
        "acknowledged before the backup, missing from it: {lost:?}"
    );
    drop(stmt);
    drop(conn);

    // Restored (copied back while stopped), it serves the same records with the same keys.
    let (key_id, secret) = (server.key_id.clone(), server.secret.clone());
    drop(server);
    let restored = dir.path().join("restored.sqlite");
    std::fs::copy(&copy, &restored).unwrap();
    let s = spawn_with(restored.to_str().unwrap(), &[], &[]);
    assert!(
        s.key_id.is_empty(),
        "a restored database has keys: {}",
        s.stderr
    );
    let client = webhookd::client::Client::new(&s.url, &key_id, &secret);
    let page = ok(&client, "GET", "/v1/endpoints?page_size=1", None);
    assert!(page["total"].as_u64().unwrap() >= before.len() as u64);
}

#[test]
fn a_start_that_cannot_listen_creates_and_prints_no_key() {
    let dir = tempfile::tempdir().unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();

    // A new file: not even created.
    let db = dir.path().join("new.sqlite");
    let out = webhookd(&["serve", "--db", db.to_str().unwrap(), "--listen", &addr]);
    assert_eq!(out.status.code(), Some(2));
    let why = text(&out.stderr);
    assert!(
        why.contains("--listen") && why.contains("WEBHOOKD_LISTEN"),
        "{why}"
    );
    assert!(!why.contains("key id") && !why.contains("secret"), "{why}");
    assert!(!db.exists());

    // An existing database without keys (the schema, no rows): still no key.
    let empty = test_db(dir.path());
    webhookd::store::open(&empty, 1).unwrap();
    let out = webhookd(&["serve", "--db", &empty, "--listen", &addr]);
    assert_eq!(out.status.code(), Some(2));
    assert!(!text(&out.stderr).contains("key id"));
    assert_eq!(key_count(&empty), 0);

    // Once the port is free, the first start makes and prints the one key.
    drop(taken);
    let s = spawn_on(&empty, &addr, &[], &[]);
    assert!(s.key_id.starts_with("whk_"), "{}", s.stderr);
    assert_eq!(key_count(&empty), 1);
}

#[test]
fn keys_create_before_the_first_start_creates_the_database_and_serve_prints_no_key() {
    let dir = tempfile::tempdir().unwrap();
    let create = |db: &str| {
        webhookd(&[
            "keys", "create", "--db", db, "--app", "shop", "--name", "ops", "--json",
        ])
    };
    // A missing folder is an error naming the flag, not a crash.
    let out = create(
        dir.path()
            .join("sub")
            .join("later.sqlite")
            .to_str()
            .unwrap(),
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("--db"));

    // The file is created private; a PostgreSQL database is made by its administrator, so
    // there the run starts from a fresh one.
    let db = match backend() {
        Backend::Sqlite => dir
            .path()
            .join("later.sqlite")
            .to_str()
            .unwrap()
            .to_string(),
        Backend::Postgres => test_db(dir.path()),
    };
    let out = create(&db);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let key: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    if backend() == Backend::Sqlite {
        let mode = std::fs::metadata(&db).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    let s = spawn_with(&db, &[], &[]);
    assert!(
        s.key_id.is_empty() && !s.stderr.contains("first start"),
        "{}",
        s.stderr
    );
    assert_eq!(key_count(&db), 1);
    let client = webhookd::client::Client::new(
        &s.url,
        key["key_id"].as_str().unwrap(),
        key["secret"].as_str().unwrap(),
    );
    let page = ok(&client, "GET", "/v1/endpoints", None);
    assert_eq!(page["total"], 0);
}

#[test]
fn listen_accepts_host_port_and_port_only() {
    let dir = tempfile::tempdir().unwrap();
    let db = test_db(dir.path());
    let db = db.as_str();
    let port = free_local_addr().rsplit_once(':').unwrap().1.to_string();
    for listen in [format!("localhost:{port}"), format!(":{port}")] {
        let s = spawn_on(db, &listen, &[], &[]);
        let out = webhookd(&["healthcheck", "--url", &s.url]);
        assert_eq!(out.status.code(), Some(0), "{listen}: {}", s.stderr);
    }
    for (bad, env) in [
        ("8080", None),
        ("nowhere.invalid:80", None),
        ("1.2.3.4:x", Some(())),
    ] {
        let out = match env {
            None => webhookd(&["serve", "--db", db, "--listen", bad]),
            Some(()) => webhookd_env(&["serve", "--db", db], &[("WEBHOOKD_LISTEN", bad)]),
        };
        assert_eq!(out.status.code(), Some(2), "{bad}");
        let why = text(&out.stderr);
        assert!(
            why.contains("--listen") && why.contains("WEBHOOKD_LISTEN"),
            "{why}"
        );
    }
}

#[test]
fn boolean_env_values_and_bad_values_name_flag_and_env() {
    let dir = tempfile::tempdir().unwrap();
    let db = test_db(dir.path());
    let db = db.as_str();
    let metrics_status = |value: &str| {
        let s = spawn_with(db, &[], &[("WEBHOOKD_NO_METRICS", value)]);
        crate::support::get_text(&format!("{}/metrics", s.url)).0
    };
    for on in ["1", "true", "yes", "on", "YES"] {
        assert_eq!(metrics_status(on), 404, "WEBHOOKD_NO_METRICS={on}");
    }
    for off in ["0", "false", "no", "off"] {
        assert_eq!(metrics_status(off), 200, "WEBHOOKD_NO_METRICS={off}");
    }
    let out = webhookd_env(&["serve", "--db", db], &[("WEBHOOKD_NO_METRICS", "maybe")]);
    assert_eq!(out.status.code(), Some(2));
    let why = text(&out.stderr);
    assert!(
        why.contains("--no-metrics") && why.contains("WEBHOOKD_NO_METRICS"),
        "{why}"
    );

    let out = webhookd_env(&["serve", "--db", db], &[("WEBHOOKD_WORKERS", "many")]);
    assert_eq!(out.status.code(), Some(2));
    let why = text(&out.stderr);
    assert!(
        why.contains("--workers") && why.contains("WEBHOOKD_WORKERS"),
        "{why}"
    );
    let out = webhookd(&["serve", "--db", db, "--workers", "0"]);
    assert_eq!(out.status.code(), Some(2));
    let why = text(&out.stderr);
    assert!(
        why.contains("--workers") && why.contains("WEBHOOKD_WORKERS"),
        "{why}"
    );
}
