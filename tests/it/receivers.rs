//! The receivers a user starts from — `webhookd receive` and the standard-library examples in
//! Python, Node and Go (`examples/receivers/`) — each run as a program against a live server:
//! a real delivery verifies and is printed, a delivery signed with another secret is refused
//! with 401 (recorded on the attempt), a tampered body or a stale timestamp is refused. And the
//! signing clients (`examples/clients/`) each get a 200 for a POST and for a GET with a query.
//!
//! A missing interpreter (python3, node, go) is a loud skip, a failure under `CI=true`
//! (`.ci/receivers.sh` installs Go).

use crate::support::{TestServer, ok, program_runs, raw, require_component, wait_for};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The secret every receiver is started with: a Standard Webhooks one, so that a receiver that
/// keys `X-Service-Signature` with the decoded bytes (instead of the text as written) fails.
const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
/// Another endpoint's secret: its deliveries must be refused by a receiver holding `SECRET`.
const OTHER_SECRET: &str = "whsec_c2VjcmV0LWtleS1mb3ItdGVzdHM=";
/// Long enough for a program to start (or a Go build to finish) on a loaded machine.
const PATIENCE: Duration = Duration::from_secs(120);

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A receiver program, its output lines (stdout and stderr together) collected as they come.
struct Program {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    port: u16,
}

impl Program {
    /// Starts `command` and waits for its `listening on http://127.0.0.1:PORT/` line.
    fn start(mut command: Command) -> Program {
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {command:?}: {e}"));
        let lines = Arc::new(Mutex::new(Vec::new()));
        let stdout = child.stdout.take().unwrap();
        let stderr = child.stderr.take().unwrap();
        collect_lines(stdout, Arc::clone(&lines));
        collect_lines(stderr, Arc::clone(&lines));
        let mut program = Program {
            child,
            lines,
            port: 0,
        };
        let line = program.wait_line(|l| l.contains("listening on http://"));
        program.port = line
            .split_once("http://")
            .and_then(|(_, rest)| rest.split('/').next())
            .and_then(|address| address.rsplit(':').next())
            .and_then(|port| port.parse().ok())
            .unwrap_or_else(|| panic!("no port in {line:?}"));
        program
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn output(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }

    /// The first output line that `matches`, waiting for it; fails with the whole output.
    fn wait_line(&mut self, matches: impl Fn(&str) -> bool) -> String {
        let found = wait_for(PATIENCE, || {
            let lines = self.lines.lock().unwrap();
            lines.iter().find(|l| matches(l)).cloned()
        });
        found.unwrap_or_else(|| {
            let status = self.child.try_wait().ok().flatten();
            panic!(
                "the expected line never came (exit status: {status:?}); output:\n{}",
                self.output()
            )
        })
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn collect_lines(stream: impl Read + Send + 'static, into: Arc<Mutex<Vec<String>>>) {
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { break };
            into.lock().unwrap().push(line);
        }
    });
}

/// Whether a receiver's delivery line names task `id` (`webhook-id=task_7` or `task=7`).
fn names_task(line: &str, id: i64) -> bool {
    line.contains(&format!("task_{id}:"))
        || line.contains(&format!("task_{id} "))
        || line.contains(&format!("task={id} "))
}

/// The one task of event `event_id`, once it has finished.
fn finished_task(client: &webhookd::client::Client, event_id: i64) -> Value {
    let task = wait_for(PATIENCE, || {
        let page = ok(
            client,
            "GET",
            &format!("/v1/tasks?event_id={event_id}"),
            None,
        );
        let task = page["items"].get(0)?.clone();
        matches!(task["status"].as_str(), Some("success" | "failed")).then_some(task)
    });
    task.unwrap_or_else(|| panic!("the task of event {event_id} never finished"))
}

/// Everything a receiver must do, checked through a real server.
fn check_receiver(command: Command) {
    let mut receiver = Program::start(command);
    let server = TestServer::start();
    let client = server.client();
    let once = ok(
        &client,
        "POST",
        "/v1/retries/policies",
        Some(json!({"name": "once", "max_attempts": 1, "backoff_type": "fixed"})),
    );
    ok(
        &client,
        "POST",
        "/v1/endpoints",
        Some(
            json!({"name": "good", "url": receiver.url("/hooks/good"), "secret": SECRET,
                    "filter_events": "good.*"}),
        ),
    );
    ok(
        &client,
        "POST",
        "/v1/endpoints",
        Some(
            json!({"name": "other secret", "url": receiver.url("/hooks/bad"),
                    "secret": OTHER_SECRET, "filter_events": "bad.*",
                    "retry_policy_id": once["id"]}),
        ),
    );

    // A real delivery verifies, is printed with its payload, and is answered 2xx.
    let event = ok(
        &client,
        "POST",
        "/v1/events",
        Some(json!({"event_name": "good.created", "payload": {"order": 4242}})),
    );
    let task = finished_task(&client, event["id"].as_i64().unwrap());
    assert_eq!(task["status"], "success", "{task}\n{}", receiver.output());
    let id = task["id"].as_i64().unwrap();
    let line = receiver.wait_line(|l| names_task(l, id));
    assert!(line.contains(": verified"), "{line}\n{}", receiver.output());
    receiver.wait_line(|l| l.contains(r#"{"order":4242}"#));

    // One signed with another secret is refused, and the attempt records the 401.
    let event = ok(
        &client,
        "POST",
        "/v1/events",
        Some(json!({"event_name": "bad.created", "payload": {"order": 1}})),
    );
    let task = finished_task(&client, event["id"].as_i64().unwrap());
    assert_eq!(task["status"], "failed", "{task}");
    let attempts = ok(
        &client,
        "GET",
        &format!("/v1/tasks/{}/attempts", task["id"]),
        None,
    );
    assert_eq!(attempts["items"][0]["status_code"], 401, "{attempts}");
    let id = task["id"].as_i64().unwrap();
    let line = receiver.wait_line(|l| names_task(l, id));
    assert!(line.contains("REFUSED"), "{line}");

    // Signatures made here the way webhookd makes them: the untampered request passes, a
    // changed body or a stale timestamp does not.
    let now = chrono::Utc::now().timestamp();
    let send = |timestamp: i64, signed_body: &[u8], sent_body: &[u8]| {
        let ts = timestamp.to_string();
        let headers = vec![
            ("Content-Type", "application/json".to_string()),
            ("X-Service-Timestamp", ts.clone()),
            ("webhook-timestamp", ts.clone()),
            ("webhook-id", "task_999".to_string()),
            (
                "X-Service-Signature",
                webhookd::signing::hmac_hex(SECRET.as_bytes(), &ts, signed_body),
            ),
            (
                "webhook-signature",
                webhookd::signing::standard_webhooks_signature(
                    SECRET,
                    "task_999",
                    timestamp,
                    signed_body,
                ),
            ),
        ];
        raw(
            &format!("http://127.0.0.1:{}", receiver.port),
            "POST",
            "/hooks/forged",
            &headers,
            sent_body,
        )
        .0
    };
    let body = br#"{"amount":10}"#;
    assert_eq!(send(now, body, body), 204, "{}", receiver.output());
    assert_eq!(send(now, body, br#"{"amount":1000}"#), 401);
    assert_eq!(send(now - 3600, body, body), 401);
    server.stop();
}

/// Builds a Go example into `target/examples-go/NAME` (with the installed toolchain only).
fn go_build(dir: &str, name: &str) -> PathBuf {
    let out = root().join("target/examples-go").join(name);
    let status = Command::new("go")
        .args(["build", "-o"])
        .arg(&out)
        .arg(".")
        .current_dir(root().join(dir))
        .env("GOTOOLCHAIN", "local")
        .env("GOFLAGS", "-mod=mod")
        .status()
        .expect("run go build");
    assert!(status.success(), "go build of {dir} failed");
    out
}

/// Whether `program` runs; if not, a loud skip (a failure under `CI=true`). The skip is also
/// written straight to stderr, past the test harness's capture, so that it shows beside the
/// test's `ok` in a plain `cargo test` run instead of only under `--nocapture`.
fn have(program: &str, version_arg: &str, install: &str) -> bool {
    let found = require_component(program, program_runs(program, &[version_arg]), install);
    if !found {
        use std::io::Write;
        let test = std::thread::current()
            .name()
            .unwrap_or("a test")
            .to_string();
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED {test}: {program} is not installed ({install})"
        );
    }
    found
}

#[test]
fn webhookd_receive_verifies_deliveries_and_refuses_forged_ones() {
    let mut command = Command::new(env!("CARGO_BIN_EXE_webhookd"));
    command.args(["receive", "--port", "0", "--secret", SECRET]);
    check_receiver(command);
}

#[test]
fn python_receiver_verifies_deliveries_and_refuses_forged_ones() {
    if !have("python3", "--version", "apt-get install -y python3") {
        return;
    }
    let mut command = Command::new("python3");
    command
        .arg(root().join("examples/receivers/python/receiver.py"))
        .args(["--port", "0", "--secret", SECRET]);
    check_receiver(command);
}

#[test]
fn node_receiver_verifies_deliveries_and_refuses_forged_ones() {
    if !have("node", "--version", "apt-get install -y nodejs") {
        return;
    }
    let mut command = Command::new("node");
    command
        .arg(root().join("examples/receivers/node/receiver.mjs"))
        .args(["--port", "0", "--secret", SECRET]);
    check_receiver(command);
}

#[test]
fn go_receiver_verifies_deliveries_and_refuses_forged_ones() {
    if !have(
        "go",
        "version",
        "apt-get install -y golang-go (or run .ci/receivers.sh)",
    ) {
        return;
    }
    let mut command = Command::new(go_build("examples/receivers/go", "receiver"));
    command.args(["--port", "0", "--secret", SECRET]);
    check_receiver(command);
}

/// Runs a client program with the server's key: a POST with a body, then a GET with a query
/// (the bodyless signature covers `METHOD path?query`); both must answer 200.
fn check_client(program: &Path, first_args: &[&str]) {
    let server = TestServer::start();
    let run = |args: &[&str]| {
        let out = Command::new(program)
            .args(first_args)
            .args(args)
            .env("WEBHOOKD_URL", &server.url)
            .env("WEBHOOKD_KEY_ID", &server.key_id)
            .env("WEBHOOKD_SECRET", &server.secret)
            .output()
            .expect("run the client");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && text.starts_with("HTTP 200"),
            "{args:?}: {}\n{text}\n{err}",
            out.status
        );
        text
    };
    let created = run(&[
        "POST",
        "/v1/endpoints",
        r#"{"name":"made by a client","url":"http://127.0.0.1:9/hook"}"#,
    ]);
    assert!(created.contains("made by a client"), "{created}");
    let listed = run(&["GET", "/v1/endpoints?page=1&page_size=5"]);
    assert!(listed.contains("made by a client"), "{listed}");
    server.stop();
}

#[test]
fn python_client_signs_api_requests() {
    if !have("python3", "--version", "apt-get install -y python3") {
        return;
    }
    let script = root().join("examples/clients/python/client.py");
    check_client(Path::new("python3"), &[script.to_str().unwrap()]);
}

#[test]
fn node_client_signs_api_requests() {
    if !have("node", "--version", "apt-get install -y nodejs") {
        return;
    }
    let script = root().join("examples/clients/node/client.mjs");
    check_client(Path::new("node"), &[script.to_str().unwrap()]);
}

#[test]
fn go_client_signs_api_requests() {
    if !have(
        "go",
        "version",
        "apt-get install -y golang-go (or run .ci/receivers.sh)",
    ) {
        return;
    }
    let program = go_build("examples/clients/go", "client");
    check_client(&program, &[]);
}
