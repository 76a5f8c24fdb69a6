//! The `webhookd` binary: key management, refusal of foreign or newer databases, exit codes,
//! the first-start key, and the `api` client against a running server.

use std::process::{Command, Output};

pub fn webhookd(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_webhookd"))
        .args(args)
        .env_remove("WEBHOOKD_DB")
        .output()
        .expect("binary runs")
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn keys_create_json_prints_one_object_and_list_hides_secrets() {
    let dir = tempfile::tempdir().unwrap();
    // keys on a file that does not exist yet: a clear usage error.
    let missing = dir.path().join("k.sqlite");
    let missing = webhookd(&["keys", "list", "--db", missing.to_str().unwrap()]);
    assert_eq!(missing.status.code(), Some(2));
    let db = crate::support::test_db(dir.path());
    let db = db.as_str();
    webhookd::store::open(db, 1).unwrap();

    let out = webhookd(&[
        "keys", "create", "--db", db, "--app", "shop", "--name", "ci", "--json",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert_eq!(stdout.trim().lines().count(), 1);
    let key: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(key["app_id"], "shop");
    let key_id = key["key_id"].as_str().unwrap();
    let secret = key["secret"].as_str().unwrap();
    assert!(!secret.is_empty());

    let list = webhookd(&["keys", "list", "--db", db, "--json"]);
    let listed = text(&list.stdout);
    assert!(listed.contains(key_id));
    assert!(!listed.contains(secret));

    let revoke = webhookd(&["keys", "revoke", "--db", db, key_id]);
    assert!(revoke.status.success());
    let again = webhookd(&["keys", "revoke", "--db", db, key_id]);
    assert_eq!(again.status.code(), Some(1));
    let list: serde_json::Value =
        serde_json::from_slice(&webhookd(&["keys", "list", "--db", db, "--json"]).stdout).unwrap();
    assert_eq!(list[0]["revoked"], true);
}

#[test]
fn foreign_and_newer_databases_are_refused_unchanged_on_sqlite() {
    if crate::support::sqlite_only("SQLite files; pg_store checks PostgreSQL's refusals") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();

    let foreign = dir.path().join("foreign.sqlite");
    {
        let conn = rusqlite::Connection::open(&foreign).unwrap();
        conn.execute_batch("CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES ('keep me');")
            .unwrap();
    }
    let before = std::fs::read(&foreign).unwrap();
    let out = webhookd(&[
        "serve",
        "--db",
        foreign.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("another program"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(std::fs::read(&foreign).unwrap(), before);

    let not_sqlite = dir.path().join("notes.txt");
    std::fs::write(&not_sqlite, "just some text, not a database at all........").unwrap();
    let out = webhookd(&["keys", "list", "--db", not_sqlite.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("not a SQLite database"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(&not_sqlite).unwrap(),
        "just some text, not a database at all........"
    );

    let newer = dir.path().join("newer.sqlite");
    {
        // Set the newer version through the pool's one connection and checkpoint it into the
        // file, so nothing is left in the WAL for a later close to write back after `before`.
        let pool = webhookd::store::sqlite::open(&newer, 1).unwrap();
        let conn = pool.get().unwrap();
        conn.pragma_update(
            None,
            "user_version",
            webhookd::store::sqlite::SCHEMA_VERSION + 1,
        )
        .unwrap();
        conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .unwrap();
    }
    let before = std::fs::read(&newer).unwrap();
    let out = webhookd(&[
        "serve",
        "--db",
        newer.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("newer webhookd"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(std::fs::read(&newer).unwrap(), before);
}

#[test]
fn bad_usage_exits_2_naming_the_flag() {
    let out = webhookd(&[
        "serve",
        "--db",
        "/tmp/x.sqlite",
        "--listen",
        "not-an-address",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--listen"));
    let out = webhookd(&["serve", "--db", "/tmp/x.sqlite", "--workers", "0"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--workers"));
    let out = webhookd(&[
        "serve",
        "--db",
        "/tmp/x.sqlite",
        "--allow-targets",
        "10.0.0.0/99",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--allow-targets"));
    for hours in ["-1", "abc", "inf"] {
        let flag = format!("--disable-failing-after-hours={hours}");
        let out = webhookd(&["serve", "--db", "/tmp/x.sqlite", &flag]);
        assert_eq!(out.status.code(), Some(2), "{hours}");
        let stderr = text(&out.stderr);
        assert!(
            stderr.contains("--disable-failing-after-hours")
                && stderr.contains("WEBHOOKD_DISABLE_FAILING_AFTER_HOURS"),
            "{hours}: {stderr}"
        );
    }
    let out = webhookd(&["frobnicate"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn database_file_is_private_on_sqlite() {
    if crate::support::sqlite_only("the SQLite file's mode") {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("p.sqlite");
    webhookd::store::sqlite::open(&db, 1).unwrap();
    let mode = std::fs::metadata(&db).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
}

/// A `webhookd serve` subprocess, read until it says it listens (or exits).
pub struct Spawned {
    pub child: std::process::Child,
    pub url: String,
    /// The first-start key, empty when none was printed.
    pub key_id: String,
    pub secret: String,
    /// What it wrote on stderr up to the "listening" line.
    pub stderr: String,
}

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `webhookd serve --db DB --listen <free port> ARGS` with extra environment variables.
pub fn spawn_with(db: &str, args: &[&str], envs: &[(&str, &str)]) -> Spawned {
    spawn_on(db, &crate::support::free_local_addr(), args, envs)
}

/// Starts `webhookd serve --db DB --listen LISTEN ARGS`; its URL reaches `:PORT` on 127.0.0.1.
pub fn spawn_on(db: &str, listen: &str, args: &[&str], envs: &[(&str, &str)]) -> Spawned {
    use std::io::{BufRead, BufReader};
    let mut child = Command::new(env!("CARGO_BIN_EXE_webhookd"))
        .args(["serve", "--db", db, "--listen", listen])
        .args(args)
        .envs(envs.iter().copied())
        .env_remove("WEBHOOKD_DB")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let (mut key_id, mut secret, mut seen) = (String::new(), String::new(), String::new());
    for line in stderr.lines() {
        let line = line.unwrap();
        seen.push_str(&line);
        seen.push('\n');
        if let Some(v) = line.trim().strip_prefix("key id: ") {
            key_id = v.to_string();
        }
        if let Some(v) = line.trim().strip_prefix("secret: ") {
            secret = v.to_string();
        }
        if line.contains("listening") {
            break;
        }
    }
    Spawned {
        child,
        url: match listen.strip_prefix(':') {
            Some(port) => format!("http://127.0.0.1:{port}"),
            None => format!("http://{listen}"),
        },
        key_id,
        secret,
        stderr: seen,
    }
}

#[test]
fn first_start_prints_a_key_and_api_uses_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::support::test_db(dir.path());
    let server = spawn_with(&db, &[], &[]);
    let (url, key_id, secret) = (&server.url, &server.key_id, &server.secret);
    assert!(key_id.starts_with("whk_") && !secret.is_empty());
    let api = |args: &[&str]| {
        let mut full = vec!["api", "--url", url, "--key-id", key_id, "--secret", secret];
        full.extend_from_slice(args);
        webhookd(&full)
    };
    let out = api(&[
        "POST",
        "/v1/endpoints",
        r#"{"name":"quick","url":"https://example.com/in"}"#,
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let reply: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(reply["data"]["name"], "quick");
    assert_eq!(reply["data"]["app_id"], "default");
    let out = api(&["GET", "/endpoints/999"]);
    assert_eq!(out.status.code(), Some(1));
    let reply: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(reply["code"], 40401);
}

/// `webhookd api … | head`: the reader goes away before the reply (the OpenAPI document,
/// larger than a pipe's buffer) is written out; the command ends without a panic.
#[test]
fn api_output_into_a_closed_pipe_does_not_panic() {
    let server = crate::support::TestServer::start();
    let mut child = Command::new(env!("CARGO_BIN_EXE_webhookd"))
        .args([
            "api",
            "--url",
            &server.url,
            "--key-id",
            &server.key_id,
            "--secret",
            &server.secret,
            "GET",
            "/v1/openapi.json",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run webhookd api");
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("wait for webhookd api");
    let stderr = text(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_ne!(out.status.code(), Some(101), "{stderr}");
}

/// Help that says what each thing is: `--db` takes a file or a postgres:// URL, `keys list
/// --json` and `keys revoke KEY_ID` are explained, `--log-level` and `WEBHOOKD_LOG` are named;
/// `keys list` prints a header row.
#[test]
fn help_texts_and_the_keys_list_header() {
    let help = |args: &[&str]| -> String {
        let out = webhookd(args);
        assert!(out.status.success(), "{args:?}");
        text(&out.stdout)
    };
    let serve = help(&["serve", "--help"]);
    assert!(serve.contains("postgres:// URL"), "{serve}");
    assert!(!serve.contains("SQLite database file"), "{serve}");
    assert!(
        serve.contains("--log-level") && serve.contains("WEBHOOKD_LOG"),
        "{serve}"
    );
    let list = help(&["keys", "list", "--help"]);
    let json_line = list
        .lines()
        .skip_while(|l| !l.contains("--json"))
        .take(2)
        .collect::<String>();
    assert!(json_line.contains("JSON"), "{list}");
    let revoke = help(&["keys", "revoke", "--help"]);
    let key_line = revoke
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("<KEY_ID>"))
        .take(2)
        .collect::<String>();
    assert!(key_line.contains("keys list"), "{revoke}");

    let dir = tempfile::tempdir().unwrap();
    let db = crate::support::test_db(dir.path());
    let db = db.as_str();
    webhookd::store::open(db, 1).unwrap();
    let out = webhookd(&[
        "keys", "create", "--db", db, "--app", "shop", "--name", "ci",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let list = text(&webhookd(&["keys", "list", "--db", db]).stdout);
    let mut lines = list.lines();
    assert_eq!(
        lines.next(),
        Some("KEY ID\tAPP\tNAME\tSCOPE\tCREATED\tEXPIRES\tSTATE"),
        "{list}"
    );
    let row: Vec<&str> = lines.next().unwrap().split('\t').collect();
    assert_eq!(
        (row[1], row[2], row[3], row[5], row[6]),
        ("shop", "ci", "admin", "never", "active"),
        "{list}"
    );
}
