//! Traces (docs/API.md, "Traces"): every delivery carries a W3C `traceparent` in its task's
//! trace, continuing the caller's when the request that made the task carried a valid one;
//! retries keep the trace; `--otlp-endpoint` exports the request, queue-wait and attempt spans
//! with the right parents to a collector (a stand-in on loopback here); JSON log lines about a
//! task carry its `trace_id`.

use crate::support::{Answer, Receiver, TestServer, ok, raw, wait_for};
use serde_json::{Value, json};
use std::collections::HashSet;
use std::time::Duration;
use webhookd::client::Client;
use webhookd::trace::SpanContext;

const WAIT: Duration = Duration::from_secs(60);
/// The W3C recommendation's example, with the sampled flag.
const CALLER: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const CALLER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

/// A signed request with a `traceparent` (when given); the envelope's `data`.
fn traced(
    server: &TestServer,
    method: &str,
    path: &str,
    body: &Value,
    traceparent: Option<&str>,
) -> Value {
    let client = server.client();
    let body = body.to_string();
    let mut headers: Vec<(&str, String)> = client
        .auth_headers(method, path, body.as_bytes())
        .into_iter()
        .collect();
    headers.push(("Content-Type", "application/json".into()));
    if let Some(value) = traceparent {
        headers.push(("traceparent", value.to_string()));
    }
    let (status, reply) = raw(&server.url, method, path, &headers, body.as_bytes());
    assert_eq!(status, 200, "{method} {path}: {reply}");
    reply["data"].clone()
}

/// An endpoint to `rx` retrying at once, up to 3 attempts.
fn endpoint(c: &Client, rx: &Receiver, name: &str) -> i64 {
    let policy = ok(
        c,
        "POST",
        "/v1/retries/policies",
        Some(
            json!({"name": format!("now-{name}"), "max_attempts": 3, "backoff_type": "fixed",
                    "initial_delay_sec": 0, "max_delay_sec": 0}),
        ),
    );
    ok(
        c,
        "POST",
        "/v1/endpoints",
        Some(json!({"name": name, "url": format!("{}/{name}", rx.url),
                    "retry_policy_id": policy["id"]})),
    )["id"]
        .as_i64()
        .expect("endpoint id")
}

/// The `traceparent` a delivery carried, parsed (it must be valid).
fn delivered_context(r: &crate::support::Received) -> SpanContext {
    let header = r
        .header("traceparent")
        .expect("a delivery carries traceparent");
    assert!(header.starts_with("00-"), "version 00: {header}");
    SpanContext::parse(header).unwrap_or_else(|| panic!("a valid traceparent: {header}"))
}

/// The record of the task a delivery was of (`X-Service-Task-Id`).
fn task_of(c: &Client, r: &crate::support::Received) -> Value {
    let id = r.header("x-service-task-id").expect("task id header");
    ok(c, "GET", &format!("/v1/tasks/{id}"), None)
}

#[test]
fn a_publish_task_or_trigger_with_a_traceparent_continues_the_callers_trace() {
    let server = TestServer::start();
    let c = server.client();
    let rx = Receiver::start();
    let endpoint_id = endpoint(&c, &rx, "continued");
    let schedule = ok(
        &c,
        "POST",
        "/v1/schedules",
        Some(json!({"name": "s", "cron_expr": "0 0 1 1 *", "endpoint_ids": [endpoint_id]})),
    );
    // Flags are kept as sent: 01 on the publish, 00 on the task, 03 on the trigger.
    let sends = [
        (
            "/v1/events".to_string(),
            json!({"event_name": "order.created", "payload": {"n": 1}}),
            "01",
        ),
        (
            "/v1/tasks".to_string(),
            json!({"endpoint_id": endpoint_id, "payload": {"n": 2}}),
            "00",
        ),
        (
            format!("/v1/schedules/{}/trigger", schedule["id"]),
            json!({}),
            "03",
        ),
    ];
    for (i, (path, body, flags)) in sends.iter().enumerate() {
        let header = format!("00-{CALLER_TRACE}-{CALLER_SPAN}-{flags}");
        traced(&server, "POST", path, body, Some(&header));
        let received = rx.wait_for(i + 1, WAIT);
        assert_eq!(received.len(), i + 1, "delivery after {path}");
        let delivered = delivered_context(&received[i]);
        assert_eq!(hex::encode(delivered.trace_id), CALLER_TRACE, "{path}");
        assert_ne!(
            hex::encode(delivered.span_id),
            CALLER_SPAN,
            "{path}: a new span id"
        );
        assert_eq!(
            format!("{:02x}", delivered.flags),
            *flags,
            "{path}: flags kept"
        );
        assert_eq!(
            task_of(&c, &received[i])["trace_id"],
            CALLER_TRACE,
            "{path}"
        );
    }
    // Spaces and tabs around a valid header are allowed by the W3C rules.
    traced(
        &server,
        "POST",
        "/v1/events",
        &json!({"event_name": "padded"}),
        Some(&format!(" \t{CALLER}")),
    );
    let received = rx.wait_for(4, WAIT);
    assert_eq!(
        hex::encode(delivered_context(&received[3]).trace_id),
        CALLER_TRACE
    );
}

#[test]
fn an_invalid_traceparent_is_ignored_and_a_new_trace_started() {
    let server = TestServer::start();
    let c = server.client();
    let rx = Receiver::start();
    endpoint(&c, &rx, "fresh");
    let invalid = [
        // all-zero trace id
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        // upper case
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01",
        // version ff
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    ];
    let mut traces = HashSet::new();
    for (i, header) in invalid.iter().enumerate() {
        let event = traced(
            &server,
            "POST",
            "/v1/events",
            &json!({"event_name": "order.created"}),
            Some(header),
        );
        assert_eq!(
            event["task_count"], 1,
            "{header}: the request is not refused"
        );
        let received = rx.wait_for(i + 1, WAIT);
        let delivered = delivered_context(&received[i]);
        let trace_id = hex::encode(delivered.trace_id);
        assert_ne!(trace_id, CALLER_TRACE, "{header} was not continued");
        assert_ne!(delivered.trace_id, [0; 16]);
        assert_eq!(delivered.flags, 0x01, "a trace webhookd starts is sampled");
        assert_eq!(task_of(&c, &received[i])["trace_id"], trace_id.as_str());
        traces.insert(trace_id);
    }
    assert_eq!(traces.len(), invalid.len(), "a new trace each time");
}

#[test]
fn without_a_traceparent_each_task_has_a_trace_of_its_own() {
    let server = TestServer::start();
    let c = server.client();
    let rx = Receiver::start();
    endpoint(&c, &rx, "one");
    endpoint(&c, &rx, "two");
    // Two publishes of two tasks each, and a manual task: five traces.
    for _ in 0..2 {
        let event = ok(
            &c,
            "POST",
            "/v1/events",
            Some(json!({"event_name": "order.created"})),
        );
        assert_eq!(event["task_count"], 2);
    }
    let received = rx.wait_for(4, WAIT);
    assert_eq!(received.len(), 4);
    let mut traces = HashSet::new();
    for r in &received {
        let delivered = delivered_context(r);
        let trace_id = hex::encode(delivered.trace_id);
        let task = task_of(&c, r);
        assert_eq!(
            task["trace_id"],
            trace_id.as_str(),
            "the record names the trace sent"
        );
        traces.insert(trace_id);
    }
    assert_eq!(traces.len(), 4, "each task has its own trace: {traces:?}");
}

/// A resent task is a new delivery (docs/API.md, "Resending a task"): without a `traceparent`
/// it starts a trace of its own, never the original's; with one it continues the caller's.
#[test]
fn a_resent_task_starts_its_own_trace_or_continues_the_resend_requests() {
    let server = TestServer::start();
    let c = server.client();
    let rx = Receiver::start();
    endpoint(&c, &rx, "resent");
    ok(
        &c,
        "POST",
        "/v1/events",
        Some(json!({"event_name": "order.created"})),
    );
    let received = rx.wait_for(1, WAIT);
    let original = task_of(&c, &received[0]);
    let original_trace = hex::encode(delivered_context(&received[0]).trace_id);
    assert_eq!(original["trace_id"], original_trace.as_str());
    let resend = format!("/v1/tasks/{}/resend", original["id"]);

    let own = ok(&c, "POST", &resend, None);
    let received = rx.wait_for(2, WAIT);
    assert_eq!(received.len(), 2);
    let delivered = hex::encode(delivered_context(&received[1]).trace_id);
    assert_ne!(delivered, original_trace, "not the original's trace");
    assert_eq!(own["trace_id"], delivered.as_str(), "the record names it");

    let continued = traced(&server, "POST", &resend, &json!({}), Some(CALLER));
    let received = rx.wait_for(3, WAIT);
    assert_eq!(received.len(), 3);
    let delivered = delivered_context(&received[2]);
    assert_eq!(hex::encode(delivered.trace_id), CALLER_TRACE);
    assert_ne!(hex::encode(delivered.span_id), CALLER_SPAN);
    assert_eq!(continued["trace_id"], CALLER_TRACE);
}

#[test]
fn a_retry_keeps_the_trace_with_a_new_span() {
    let server = TestServer::start();
    let c = server.client();
    let rx = Receiver::start();
    rx.script([Answer::status(500), Answer::status(503)]);
    endpoint(&c, &rx, "flaky");
    ok(
        &c,
        "POST",
        "/v1/events",
        Some(json!({"event_name": "order.created"})),
    );
    let received = rx.wait_for(3, WAIT);
    assert_eq!(received.len(), 3, "two failures, then the success");
    let contexts: Vec<SpanContext> = received.iter().map(delivered_context).collect();
    assert!(contexts.iter().all(|c| c.trace_id == contexts[0].trace_id));
    let spans: HashSet<[u8; 8]> = contexts.iter().map(|c| c.span_id).collect();
    assert_eq!(spans.len(), 3, "each attempt is a span of its own");
    // The third attempt's result is committed after the receiver answered it.
    let task = wait_for(WAIT, || {
        let task = task_of(&c, &received[2]);
        (task["status"] == "success").then_some(task)
    })
    .expect("the task succeeds");
    assert_eq!(task["trace_id"], hex::encode(contexts[0].trace_id).as_str());
    assert_eq!(task["attempts"], 3);
}

#[test]
fn a_task_made_before_traces_has_none_and_still_sends_a_fresh_traceparent() {
    let server = TestServer::start();
    let c = server.client();
    let rx = Receiver::start();
    let endpoint_id = endpoint(&c, &rx, "old");
    // A task due in an hour, then its trace columns emptied as a task of an older schema has
    // them, then made due now.
    let task = ok(
        &c,
        "POST",
        "/v1/tasks",
        Some(json!({"endpoint_id": endpoint_id, "run_at": chrono::Utc::now().timestamp() + 3600})),
    );
    let id = task["id"].as_i64().expect("id");
    let mut db = crate::support::Db::open(&server.db);
    db.execute(
        "UPDATE tasks SET trace_id = NULL, trace_parent = NULL, trace_flags = NULL, next_attempt_at = 0 WHERE id = ?1",
        &[&id],
    );
    server.app().poke();
    let received = rx.wait_for(1, WAIT);
    assert_eq!(received.len(), 1);
    delivered_context(&received[0]);
    assert_eq!(task_of(&c, &received[0])["trace_id"], Value::Null);
}

/// The spans a collector stand-in (a [`Receiver`]) got, from every OTLP/HTTP JSON body.
fn collected_spans(collector: &Receiver) -> Vec<Value> {
    let mut spans = Vec::new();
    for request in collector.received() {
        assert_eq!(request.path, "/v1/traces");
        assert_eq!(request.header("content-type"), Some("application/json"));
        let body = request.json();
        for resource in body["resourceSpans"].as_array().expect("resourceSpans") {
            for scope in resource["scopeSpans"].as_array().expect("scopeSpans") {
                spans.extend(scope["spans"].as_array().expect("spans").iter().cloned());
            }
        }
    }
    spans
}

/// Waits until at least `count` spans of `trace_id` reached the collector, and returns them.
fn spans_of_trace(collector: &Receiver, trace_id: &str, count: usize, what: &str) -> Vec<Value> {
    wait_for(WAIT, || {
        let spans: Vec<Value> = collected_spans(collector)
            .into_iter()
            .filter(|s| s["traceId"] == trace_id)
            .collect();
        (spans.len() >= count).then_some(spans)
    })
    .unwrap_or_else(|| panic!("{what}"))
}

/// An attribute of an OTLP JSON span, as text (`intValue`s are strings in OTLP JSON).
fn attribute(span: &Value, key: &str) -> Option<String> {
    let attr = span["attributes"]
        .as_array()?
        .iter()
        .find(|a| a["key"] == key)?;
    let value = &attr["value"];
    value["stringValue"]
        .as_str()
        .or_else(|| value["intValue"].as_str())
        .map(str::to_string)
}

#[test]
fn otlp_export_shows_one_trace_from_the_publish_to_the_last_attempt() {
    let collector = Receiver::start();
    let server = TestServer::start_with(|config| {
        config.otlp_endpoint = Some(collector.url.clone());
    });
    let c = server.client();
    let rx = Receiver::start();
    rx.script([Answer::status(500)]);
    let endpoint_id = endpoint(&c, &rx, "traced");
    let event = traced(
        &server,
        "POST",
        "/v1/events",
        &json!({"event_name": "order.created"}),
        Some(CALLER),
    );
    assert_eq!(event["task_count"], 1);
    let received = rx.wait_for(2, WAIT);
    assert_eq!(received.len(), 2, "a failure, then the success");
    let sent: Vec<String> = received
        .iter()
        .map(|r| hex::encode(delivered_context(r).span_id))
        .collect();
    let task_id = received[0]
        .header("x-service-task-id")
        .expect("task id")
        .to_string();

    // The request span, the queue wait and both attempts, all in the caller's trace.
    let spans = spans_of_trace(
        &collector,
        CALLER_TRACE,
        4,
        "four spans of the caller's trace reach the collector",
    );
    let named =
        |name: &str| -> Vec<&Value> { spans.iter().filter(|s| s["name"] == name).collect() };
    let request = named("POST /v1/events");
    assert_eq!(request.len(), 1, "{spans:#?}");
    let request = request[0];
    assert_eq!(request["kind"], 2, "server span");
    assert_eq!(
        request["parentSpanId"], CALLER_SPAN,
        "the caller's span is its parent"
    );
    assert_eq!(
        attribute(request, "http.response.status_code").as_deref(),
        Some("200")
    );
    let request_span = request["spanId"].as_str().expect("span id");

    let queue = named("queue wait");
    assert_eq!(queue.len(), 1, "{spans:#?}");
    assert_eq!(queue[0]["parentSpanId"], request_span);

    let mut attempts = named("delivery attempt");
    attempts.sort_by_key(|s| attribute(s, "webhookd.attempt"));
    assert_eq!(attempts.len(), 2, "{spans:#?}");
    for (i, attempt) in attempts.iter().enumerate() {
        assert_eq!(attempt["kind"], 3, "client span");
        assert_eq!(attempt["parentSpanId"], request_span, "under the request");
        assert_eq!(
            attempt["spanId"],
            sent[i].as_str(),
            "the span the receiver was told of"
        );
        assert_eq!(attribute(attempt, "webhookd.app").as_deref(), Some("app1"));
        assert_eq!(
            attribute(attempt, "webhookd.endpoint_id"),
            Some(endpoint_id.to_string())
        );
        assert_eq!(
            attribute(attempt, "webhookd.task_id"),
            Some(task_id.clone())
        );
        assert_eq!(
            attribute(attempt, "webhookd.attempt"),
            Some((i + 1).to_string())
        );
    }
    assert_eq!(
        attribute(attempts[0], "http.response.status_code").as_deref(),
        Some("500")
    );
    assert_eq!(
        attempts[0]["status"]["code"], 2,
        "a failed attempt is an error"
    );
    assert_eq!(
        attribute(attempts[1], "http.response.status_code").as_deref(),
        Some("200")
    );
    assert_eq!(attempts[1]["status"]["code"], 0);

    // /metrics counts what the collector accepted.
    let (status, metrics) = crate::support::get_text(&format!("{}/metrics", server.url));
    assert_eq!(status, 200);
    assert!(
        metrics.contains("webhookd_otlp_spans_exported_total "),
        "{metrics}"
    );
    assert!(
        metrics.contains("webhookd_otlp_spans_dropped_total{reason=\"queue_full\"} 0"),
        "{metrics}"
    );
}

#[test]
fn otlp_export_roots_a_task_of_its_own_trace_in_a_copy_of_its_request_span() {
    let collector = Receiver::start();
    let server = TestServer::start_with(|config| {
        config.otlp_endpoint = Some(collector.url.clone());
    });
    let c = server.client();
    let rx = Receiver::start();
    endpoint(&c, &rx, "own");
    ok(
        &c,
        "POST",
        "/v1/events",
        Some(json!({"event_name": "order.created"})),
    );
    let received = rx.wait_for(1, WAIT);
    let delivered = delivered_context(&received[0]);
    let trace_id = hex::encode(delivered.trace_id);
    let spans = spans_of_trace(
        &collector,
        &trace_id,
        3,
        "the request, queue-wait and attempt spans of the task's trace",
    );
    let root = spans
        .iter()
        .find(|s| s["name"] == "POST /v1/events")
        .expect("the request span roots the task's trace");
    assert!(root.get("parentSpanId").is_none(), "{root}");
    for span in spans.iter().filter(|s| s["name"] != "POST /v1/events") {
        assert_eq!(span["parentSpanId"], root["spanId"], "{span}");
    }
}

#[test]
fn a_json_log_line_about_a_task_carries_its_trace_id() {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::support::test_db(dir.path());
    let (key_id, secret) = crate::support::create_key(&db, "app1");
    let log_path = dir.path().join("stderr.log");
    let (child, url) = crate::logs::serve_logging(&db, &log_path, &["--log-format", "json"], &[]);
    let c = Client::new(&url, &key_id, &secret);
    let rx = Receiver::start();
    rx.script([Answer::status(500)]);
    endpoint(&c, &rx, "logged");
    let body = json!({"event_name": "order.created"}).to_string();
    let mut headers: Vec<(&str, String)> = c
        .auth_headers("POST", "/v1/events", body.as_bytes())
        .into_iter()
        .collect();
    headers.push(("traceparent", CALLER.to_string()));
    let (status, _) = raw(&url, "POST", "/v1/events", &headers, body.as_bytes());
    assert_eq!(status, 200);
    assert_eq!(rx.wait_for(2, WAIT).len(), 2, "the failure and the retry");
    let line = wait_for(WAIT, || {
        std::fs::read_to_string(&log_path)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|l| l["message"] == "delivery attempt failed")
    })
    .expect("a log line about the failed attempt");
    crate::logs::stop(child);
    assert!(line["task_id"].is_i64(), "{line}");
    assert_eq!(line["trace_id"], CALLER_TRACE, "{line}");
}

#[test]
fn otlp_export_roots_a_scheduled_firings_tasks_in_firing_spans() {
    let collector = Receiver::start();
    let server = TestServer::start_with(|config| {
        config.otlp_endpoint = Some(collector.url.clone());
    });
    let c = server.client();
    let rx = Receiver::start();
    let (one, two) = (endpoint(&c, &rx, "one"), endpoint(&c, &rx, "two"));
    let schedule = ok(
        &c,
        "POST",
        "/v1/schedules",
        Some(json!({"name": "yearly", "cron_expr": "0 0 1 1 *", "endpoint_ids": [one, two]})),
    );
    let schedule_id = schedule["id"].as_i64().expect("id");
    let fired = webhookd::scheduler::fire_at(&server.app(), schedule_id, chrono::Utc::now())
        .expect("fired")
        .expect("not fired before");
    assert_eq!(fired.len(), 2);
    let received = rx.wait_for(2, WAIT);
    assert_eq!(received.len(), 2);
    let traces: HashSet<String> = received
        .iter()
        .map(|r| hex::encode(delivered_context(r).trace_id))
        .collect();
    assert_eq!(
        traces.len(),
        2,
        "each task of a firing has a trace of its own"
    );
    for trace_id in &traces {
        let spans = spans_of_trace(
            &collector,
            trace_id,
            3,
            "the firing, queue-wait and attempt spans of the task's trace",
        );
        let firing = spans
            .iter()
            .find(|s| s["name"] == "schedule firing")
            .expect("a firing span roots the trace");
        assert!(firing.get("parentSpanId").is_none(), "{firing}");
        assert_eq!(
            attribute(firing, "webhookd.schedule_id"),
            Some(schedule_id.to_string())
        );
        let attempt = spans
            .iter()
            .find(|s| s["name"] == "delivery attempt")
            .expect("the attempt");
        assert_eq!(attempt["parentSpanId"], firing["spanId"]);
        assert_eq!(
            attribute(firing, "webhookd.task_id"),
            attribute(attempt, "webhookd.task_id")
        );
    }
}

#[test]
fn a_bad_otlp_endpoint_is_refused_at_start_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("w.db");
    for url in [
        "grpc://127.0.0.1:4317",
        "127.0.0.1:4318",
        "http://host/?q=1",
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_webhookd"))
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--otlp-endpoint",
                url,
                "--db",
            ])
            .arg(&db)
            .output()
            .expect("run webhookd");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{url}: {stderr}");
        assert!(stderr.contains("--otlp-endpoint"), "{url}: {stderr}");
        assert!(stderr.contains("http(s) URL"), "{url}: {stderr}");
    }
    assert!(!db.exists(), "nothing was created");
}

/// The real collector `.ci/otel-collector.sh` installs (Rotel's `rotel-agent`), or
/// `$WEBHOOKD_OTEL_COLLECTOR`.
fn real_collector() -> Option<std::path::PathBuf> {
    if let Some(path) = std::env::var_os("WEBHOOKD_OTEL_COLLECTOR") {
        return Some(path.into());
    }
    let lib = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/venvs/rotel/lib");
    std::fs::read_dir(lib)
        .ok()?
        .flatten()
        .map(|python| python.path().join("site-packages/rotel/rotel-agent"))
        .find(|agent| agent.exists())
}

/// Ends the collector when the test ends, passed or not.
struct Collector(std::process::Child);

impl Drop for Collector {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_real_collector_shows_one_trace_from_publish_to_last_attempt() {
    let agent = real_collector();
    if !crate::support::require_component(
        "an OpenTelemetry collector (Rotel, from PyPI)",
        agent.is_some(),
        "bash .ci/otel-collector.sh",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let debug = dir.path().join("collector.out");
    let (http, grpc) = (
        crate::support::free_local_addr(),
        crate::support::free_local_addr(),
    );
    let _collector = Collector(
        std::process::Command::new(agent.expect("found"))
            .args(["start", "--exporter", "blackhole", "--debug-log", "traces"])
            .args(["--debug-log-verbosity", "detailed"])
            .args(["--otlp-http-endpoint", &http, "--otlp-grpc-endpoint", &grpc])
            .stdout(std::fs::File::create(&debug).unwrap())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start the collector"),
    );
    let up = wait_for(WAIT, || {
        std::net::TcpStream::connect(&http).ok().map(|_| ())
    });
    assert!(up.is_some(), "the collector listens on {http}");

    let server = TestServer::start_with(|config| {
        config.otlp_endpoint = Some(format!("http://{http}"));
    });
    let c = server.client();
    let rx = Receiver::start();
    rx.script([Answer::status(500)]);
    endpoint(&c, &rx, "traced");
    traced(
        &server,
        "POST",
        "/v1/events",
        &json!({"event_name": "order.created", "payload": {"order": 42}}),
        Some(CALLER),
    );
    assert_eq!(rx.wait_for(2, WAIT).len(), 2, "a failure, then the success");
    let app = server.app();
    // Shutdown sends what is still queued.
    server.stop();
    let counts = app.spans.counts().expect("export on");
    let exported = counts.exported.load(std::sync::atomic::Ordering::Relaxed);
    assert!(exported >= 4, "the collector accepted {exported} spans");
    let dropped = counts
        .dropped_export_failed
        .load(std::sync::atomic::Ordering::Relaxed)
        + counts
            .dropped_queue_full
            .load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(dropped, 0);

    // The collector's debug output: the four spans in the caller's trace.
    let output = wait_for(WAIT, || {
        let text = std::fs::read_to_string(&debug).unwrap_or_default();
        let ours = text
            .lines()
            .filter(|l| l.trim() == format!("Trace ID       : {CALLER_TRACE}"))
            .count();
        (ours >= 4).then_some(text)
    })
    .expect("the collector printed the four spans of the trace");
    for name in ["POST /v1/events", "queue wait", "delivery attempt"] {
        assert!(
            output.contains(&format!("Name           : {name}")),
            "{name} missing from:\n{output}"
        );
    }
    assert!(output.contains(&format!("Parent ID      : {CALLER_SPAN}")));
    assert!(output.contains("-> webhookd.attempt: Int(2)"), "{output}");
    assert!(
        output.contains("-> http.response.status_code: Int(500)"),
        "{output}"
    );
    let kept =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/otel-collector-trace.txt");
    let _ = std::fs::write(kept, &output);
}
