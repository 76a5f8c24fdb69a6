//! Logs (docs/design.md §10): `--log-format json` writes one JSON object a line; every failed
//! delivery attempt, an endpoint disabled and a schedule paused by webhookd are WARN lines with
//! their ids and reasons; no secret, signature, header value or payload ever reaches the log.

use crate::support::{Answer, Receiver, free_local_addr, ok, raw, signed_headers, wait_for};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use webhookd::client::Client;

const BIN: &str = env!("CARGO_BIN_EXE_webhookd");

/// A server for app1 on a fresh SQLite file, its stderr in `log_path` ([`serve_logging`]).
struct LoggingApp {
    /// Holds the folder of the file and the log while the test runs.
    _dir: tempfile::TempDir,
    log_path: PathBuf,
    child: Child,
    url: String,
    key_id: String,
    api_secret: String,
    client: Client,
}

impl LoggingApp {
    fn start(args: &[&str], env: &[(&str, &str)]) -> LoggingApp {
        let dir = tempfile::tempdir().unwrap();
        let db = crate::support::test_db(dir.path());
        let (key_id, api_secret) = crate::support::create_key(&db, "app1");
        let log_path = dir.path().join("stderr.log");
        let (child, url) = serve_logging(&db, &log_path, args, env);
        let client = Client::new(&url, &key_id, &api_secret);
        LoggingApp {
            _dir: dir,
            log_path,
            child,
            url,
            key_id,
            api_secret,
            client,
        }
    }
}

/// `webhookd serve` on `db` with stderr into `log`, once it answers `/healthz`: the child and
/// its base URL.
pub(crate) fn serve_logging(
    db: &str,
    log: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> (Child, String) {
    let listen = free_local_addr();
    let child = Command::new(BIN)
        .args(["serve", "--db"])
        .arg(db)
        .args(["--listen", &listen])
        .args(args)
        .env_remove("WEBHOOKD_LOG")
        .env_remove("WEBHOOKD_LOG_LEVEL")
        .envs(env.iter().copied())
        .env_remove("NO_COLOR")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    let url = format!("http://{listen}");
    wait_for(Duration::from_secs(10), || {
        ureq::get(&format!("{url}/healthz")).call().ok()
    })
    .expect("server up");
    (child, url)
}

/// SIGTERM, then the exit status.
pub(crate) fn stop(mut child: Child) -> std::process::ExitStatus {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    child.wait().unwrap()
}

#[test]
fn json_logs_parse_line_by_line_carry_the_warnings_and_no_secret() {
    let LoggingApp {
        _dir,
        log_path,
        child,
        url,
        key_id,
        api_secret,
        client: c,
    } = LoggingApp::start(
        &["--log-format", "json"],
        &[("WEBHOOKD_LOG", "info,webhookd=debug")],
    );

    let rx = Receiver::start();
    // Attempt 1 fails with 500 (retried at once by the policy), attempt 2 gets 410 Gone.
    rx.script([Answer::status(500), Answer::status(410)]);
    let endpoint_secret = "ENDPOINT-SECRET-7f3a9c";
    let header_marker = "HEADER-MARKER-51bd";
    let payload_marker = "PAYLOAD-MARKER-c0ffee";
    let policy = ok(
        &c,
        "POST",
        "/v1/retries/policies",
        Some(
            json!({"name": "fast", "max_attempts": 3, "backoff_type": "fixed", "initial_delay_sec": 0, "max_delay_sec": 0}),
        ),
    );
    let endpoint = ok(
        &c,
        "POST",
        "/v1/endpoints",
        Some(json!({
            "name": "logged", "url": format!("{}/hook", rx.url), "secret": endpoint_secret,
            "headers": {"X-Custom": header_marker}, "retry_policy_id": policy["id"],
        })),
    );
    // A signed publish whose signature we know.
    let body =
        json!({"event_name": "order.created", "payload": {"marker": payload_marker}}).to_string();
    let timestamp = chrono::Utc::now().timestamp().to_string();
    let headers = signed_headers(
        &key_id,
        &api_secret,
        &timestamp,
        "POST",
        "/v1/events",
        body.as_bytes(),
    );
    let inbound_signature = headers[2].1.clone();
    let (status, _) = raw(&url, "POST", "/v1/events", &headers, body.as_bytes());
    assert_eq!(status, 200);
    // The same signature again: a replay, refused (and possibly logged).
    let (status, _) = raw(&url, "POST", "/v1/events", &headers, body.as_bytes());
    assert_eq!(status, 401);
    let received = rx.wait_for(2, Duration::from_secs(15));
    assert_eq!(received.len(), 2, "two attempts delivered");
    let mut outbound_signatures: Vec<String> = Vec::new();
    for r in &received {
        for name in ["x-service-signature", "webhook-signature"] {
            let value = r.header(name).expect("signed delivery").to_string();
            outbound_signatures.push(value.trim_start_matches("v1,").to_string());
        }
    }
    let endpoint_id = endpoint["id"].as_i64().unwrap();
    wait_for(Duration::from_secs(10), || {
        let ep = ok(&c, "GET", &format!("/v1/endpoints/{endpoint_id}"), None);
        (ep["status"] == "disabled").then_some(())
    })
    .expect("410 disabled the endpoint");

    // A schedule whose only endpoint is deleted is paused by webhookd.
    let other = ok(
        &c,
        "POST",
        "/v1/endpoints",
        Some(json!({"name": "other", "url": format!("{}/other", rx.url)})),
    );
    let schedule = ok(
        &c,
        "POST",
        "/v1/schedules",
        Some(json!({"name": "s", "cron_expr": "0 0 1 1 *", "endpoint_ids": [other["id"]]})),
    );
    ok(
        &c,
        "DELETE",
        &format!("/v1/endpoints/{}", other["id"]),
        None,
    );
    // A bad signature and an unknown field, for good measure.
    let (status, _) = raw(
        &url,
        "GET",
        "/v1/endpoints",
        &[
            ("X-Key-ID", key_id.clone()),
            ("X-Timestamp", chrono::Utc::now().timestamp().to_string()),
            ("X-Signature", "deadbeef".repeat(8)),
        ],
        b"",
    );
    assert_eq!(status, 401);

    let exit = stop(child);
    assert!(exit.success(), "clean shutdown: {exit:?}");
    let log = std::fs::read_to_string(&log_path).unwrap();

    let mut lines = Vec::new();
    for line in log.lines().filter(|l| !l.trim().is_empty()) {
        let value: Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"));
        assert!(
            value["level"].is_string() && value["message"].is_string(),
            "{line}"
        );
        assert!(!line.contains('\u{1b}'), "colour codes in {line}");
        lines.push(value);
    }
    let mut forbidden = vec![
        api_secret.clone(),
        endpoint_secret.to_string(),
        header_marker.to_string(),
        payload_marker.to_string(),
        inbound_signature,
    ];
    forbidden.extend(outbound_signatures);
    for needle in &forbidden {
        assert!(
            !log.contains(needle.as_str()),
            "the log holds {needle:?}:\n{log}"
        );
    }

    let warn = |message: &str| -> Vec<&Value> {
        lines
            .iter()
            .filter(|l| l["level"] == "WARN" && l["message"] == message)
            .collect()
    };
    let failed = warn("delivery attempt failed");
    assert_eq!(failed.len(), 2, "{log}");
    assert_eq!(failed[0]["endpoint_id"], endpoint_id);
    assert!(failed[0]["task_id"].as_i64().is_some());
    assert_eq!(failed[0]["attempt"], 1);
    assert_eq!(failed[0]["status_code"], 500);
    let next = failed[0]["next_attempt_at"].as_str().unwrap();
    assert!(chrono::DateTime::parse_from_rfc3339(next).is_ok(), "{next}");
    assert_eq!(failed[0]["outcome"], "will retry");
    assert_eq!(failed[1]["attempt"], 2);
    assert_eq!(failed[1]["status_code"], 410);
    // A time field holds only a time: none is left out, and `outcome` says why.
    assert_eq!(failed[1].get("next_attempt_at"), None, "{}", failed[1]);
    assert_eq!(failed[1]["outcome"], "failed for good");
    let disabled = warn("endpoint disabled by webhookd");
    assert_eq!(disabled.len(), 1, "{log}");
    assert_eq!(disabled[0]["endpoint_id"], endpoint_id);
    assert!(disabled[0]["reason"].as_str().unwrap().contains("410"));
    let paused = warn("schedule paused by webhookd");
    assert_eq!(paused.len(), 1, "{log}");
    assert_eq!(paused[0]["schedule_id"], schedule["id"]);
    assert!(paused[0]["reason"].as_str().unwrap().contains("deleted"));
}

#[test]
fn text_logs_have_no_colour_codes_when_stderr_is_not_a_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::support::test_db(dir.path());
    let log_path = dir.path().join("stderr.log");
    let (child, _) = serve_logging(&db, &log_path, &[], &[("WEBHOOKD_LOG_FORMAT", "text")]);
    stop(child);
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(
        log.contains("INFO") && log.contains("webhookd listening"),
        "{log}"
    );
    assert!(
        !log.contains('\u{1b}'),
        "colour codes in a non-terminal log:\n{log}"
    );
    // A bad --log-format value is a usage error naming the flag.
    let out = Command::new(BIN)
        .args(["serve", "--db"])
        .arg(&db)
        .args(["--log-format", "xml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--log-format"));
}

/// A new database logs one schema line (not one per upgrade step); with `--log-format json`
/// the first start's API key is one JSON line of the stream, shown whatever the log level; a
/// second start on the same database logs neither.
#[test]
fn a_first_start_logs_one_schema_line_and_the_key_as_one_json_line() {
    let dir = tempfile::tempdir().unwrap();
    // A new SQLite file on either pass: the schema is created by this start.
    let db = dir.path().join("new.sqlite");
    let db = db.to_str().unwrap();
    let log_path = dir.path().join("stderr.log");
    let (child, _) = serve_logging(db, &log_path, &["--log-format", "json"], &[]);
    stop(child);
    let log = std::fs::read_to_string(&log_path).unwrap();
    let lines: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}\n{log}")))
        .collect();
    let schema: Vec<&str> = lines
        .iter()
        .filter_map(|l| l["message"].as_str())
        .filter(|m| m.contains("schema"))
        .collect();
    assert_eq!(schema.len(), 1, "{log}");
    assert!(schema[0].starts_with("SQLite: created schema v"), "{log}");
    let keys: Vec<&Value> = lines.iter().filter(|l| l["secret"].is_string()).collect();
    assert_eq!(keys.len(), 1, "{log}");
    assert!(
        keys[0]["key_id"]
            .as_str()
            .is_some_and(|k| k.starts_with("whk_"))
    );
    assert_eq!(keys[0]["app_id"], "default");
    assert!(
        keys[0]["message"]
            .as_str()
            .unwrap()
            .contains("only this once")
    );

    // Again, at --log-level warn: no schema line, no key, and no INFO line.
    let (child, _) = serve_logging(
        db,
        &log_path,
        &["--log-format", "json", "--log-level", "warn"],
        &[],
    );
    stop(child);
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(!log.contains("schema") && !log.contains("secret"), "{log}");
    assert!(!log.contains("\"INFO\""), "{log}");
}

/// `--log-level` filters; `WEBHOOKD_LOG` (a RUST_LOG-style filter) wins over it; in text mode
/// the first-start key stays readable and is shown at any level.
#[test]
fn log_level_flag_and_the_webhookd_log_filter() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("new.sqlite");
    let db = db.to_str().unwrap();
    let log_path = dir.path().join("stderr.log");
    let (child, _) = serve_logging(db, &log_path, &["--log-level", "error"], &[]);
    stop(child);
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(!log.contains("INFO"), "{log}");
    assert!(
        log.contains("first start") && log.contains("  secret: "),
        "{log}"
    );
    let (child, _) = serve_logging(
        db,
        &log_path,
        &[],
        &[("WEBHOOKD_LOG_LEVEL", "error"), ("WEBHOOKD_LOG", "info")],
    );
    stop(child);
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(
        log.contains("INFO") && log.contains("webhookd listening"),
        "{log}"
    );
}

/// Logs join traces: with `--log-format json`, every line naming a task (`task_id`) carries the
/// trace id its record shows — a failed attempt, a successful one (DEBUG), a 410 disabling the
/// endpoint, and an attempt cut by shutdown.
#[test]
fn every_json_line_about_a_task_carries_its_trace_id() {
    let LoggingApp {
        _dir,
        log_path,
        child,
        client: c,
        ..
    } = LoggingApp::start(
        &[
            "--log-format",
            "json",
            "--log-level",
            "debug",
            "--shutdown-grace-secs",
            "1",
        ],
        &[],
    );
    let policy = ok(
        &c,
        "POST",
        "/v1/retries/policies",
        Some(
            json!({"name": "fast", "max_attempts": 3, "backoff_type": "fixed", "initial_delay_sec": 0, "max_delay_sec": 0}),
        ),
    );
    let endpoint = |rx: &Receiver| -> i64 {
        ok(
            &c,
            "POST",
            "/v1/endpoints",
            Some(json!({"name": "e", "url": rx.url, "retry_policy_id": policy["id"]})),
        )["id"]
            .as_i64()
            .unwrap()
    };
    let task = |endpoint_id: i64| -> i64 {
        ok(
            &c,
            "POST",
            "/v1/tasks",
            Some(json!({"endpoint_id": endpoint_id})),
        )["id"]
            .as_i64()
            .unwrap()
    };
    // A 500 then a 200; a 410; a receiver that answers only after the shutdown grace.
    let flaky = Receiver::start();
    flaky.script([Answer::status(500)]);
    let gone = Receiver::start();
    gone.set_default(Answer::status(410));
    let slow = Receiver::start();
    slow.set_default(Answer::status(200).delayed(Duration::from_secs(20)));
    let mut tasks = vec![task(endpoint(&flaky)), task(endpoint(&gone))];
    assert_eq!(flaky.wait_for(2, Duration::from_secs(30)).len(), 2);
    gone.wait_for(1, Duration::from_secs(30));
    let settled = |id: i64| {
        wait_for(Duration::from_secs(30), || {
            let t = ok(&c, "GET", &format!("/v1/tasks/{id}"), None);
            (t["status"] == "success" || t["status"] == "failed").then_some(())
        })
        .expect("the task settled");
    };
    tasks.iter().for_each(|id| settled(*id));
    tasks.push(task(endpoint(&slow)));
    assert_eq!(slow.wait_for(1, Duration::from_secs(30)).len(), 1);
    let trace_ids: Vec<(i64, String)> = tasks
        .iter()
        .map(|id| {
            let t = ok(&c, "GET", &format!("/v1/tasks/{id}"), None);
            (*id, t["trace_id"].as_str().expect("a trace id").to_string())
        })
        .collect();
    let exit = stop(child);
    assert!(exit.success(), "clean shutdown: {exit:?}");
    let log = std::fs::read_to_string(&log_path).unwrap();

    let mut messages = Vec::new();
    for line in log.lines().filter(|l| !l.trim().is_empty()) {
        let value: Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"));
        let Some(task_id) = value["task_id"].as_i64() else {
            continue;
        };
        let want = trace_ids
            .iter()
            .find(|(id, _)| *id == task_id)
            .map(|(_, trace)| trace.as_str());
        assert_eq!(
            value["trace_id"].as_str(),
            want,
            "a line about task {task_id} without its trace id: {line}"
        );
        messages.push(value["message"].as_str().unwrap_or_default().to_string());
    }
    for message in [
        "delivery attempt failed",
        "delivery attempt succeeded",
        "endpoint disabled by webhookd",
        "delivery attempt interrupted by shutdown; the task is pending again",
    ] {
        assert!(
            messages.iter().any(|m| m == message),
            "no {message:?} line about a task:\n{log}"
        );
    }
}
