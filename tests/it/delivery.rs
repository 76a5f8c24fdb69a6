//! Deliveries through a real server to the loopback receiver: the request, headers and both
//! signatures, retries on the policy's schedule, timeouts, 410, Retry-After, endpoint state,
//! target rules, metrics and retention.

use crate::support::{Answer, Receiver, TestServer, err, get_text, ok, wait_for};
use base64::Engine as _;
use chrono::{DateTime, SubsecRound, Utc};
use serde_json::{Value, json};
use std::time::Duration;
use webhookd::client::Client;
use webhookd::signing;

const WAIT: Duration = Duration::from_secs(10);

/// `base` with the fields of `extra` added (both JSON objects).
fn merged(mut base: Value, extra: Value) -> Value {
    if let (Some(base), Value::Object(extra)) = (base.as_object_mut(), extra) {
        base.extend(extra);
    }
    base
}

/// Creates an endpoint at `url` (body fields in `extra` added) and returns its id.
pub fn endpoint(c: &Client, url: &str, extra: Value) -> i64 {
    let body = merged(json!({ "name": "receiver", "url": url }), extra);
    ok(c, "POST", "/endpoints", Some(body))["id"]
        .as_i64()
        .unwrap()
}

/// Creates a retry policy and returns its id.
pub fn policy(c: &Client, max_attempts: i64, backoff: &str, initial: i64, max: i64) -> i64 {
    let body = json!({ "name": "p", "max_attempts": max_attempts, "backoff_type": backoff,
        "initial_delay_sec": initial, "max_delay_sec": max });
    ok(c, "POST", "/retries/policies", Some(body))["id"]
        .as_i64()
        .unwrap()
}

/// Creates a manual task and returns its record.
pub fn task(c: &Client, endpoint_id: i64, extra: Value) -> Value {
    let body = merged(json!({ "endpoint_id": endpoint_id }), extra);
    ok(c, "POST", "/tasks", Some(body))
}

/// Creates a manual task with the defaults and returns its id.
pub fn task_id(c: &Client, endpoint_id: i64) -> i64 {
    task(c, endpoint_id, json!({}))["id"].as_i64().unwrap()
}

/// A task to a new endpoint at `url` (fields in `extra`) whose policy allows one attempt.
fn single_try_task(c: &Client, url: &str, extra: Value) -> i64 {
    let p = policy(c, 1, "fixed", 0, 0);
    task_id(
        c,
        endpoint(c, url, merged(json!({ "retry_policy_id": p }), extra)),
    )
}

/// Polls a task until it has `status`; panics with its last state otherwise.
pub fn wait_status(c: &Client, id: i64, status: &str) -> Value {
    let mut last = Value::Null;
    wait_for(WAIT, || {
        last = ok(c, "GET", &format!("/tasks/{id}"), None);
        (last["status"] == status).then(|| last.clone())
    })
    .unwrap_or_else(|| panic!("task {id} never became {status}: {last}"))
}

/// Polls a task until `n` attempts are recorded; returns its record then.
pub fn wait_attempts(c: &Client, id: i64, n: i64) -> Value {
    wait_for(WAIT, || {
        let t = ok(c, "GET", &format!("/tasks/{id}"), None);
        (t["attempts"] == n).then_some(t)
    })
    .unwrap_or_else(|| panic!("task {id} never had {n} attempts"))
}

pub fn attempts(c: &Client, id: i64) -> Vec<Value> {
    ok(c, "GET", &format!("/tasks/{id}/attempts"), None)["items"]
        .as_array()
        .unwrap()
        .clone()
}

fn now_secs() -> DateTime<Utc> {
    Utc::now().trunc_subsecs(0)
}

/// `secs` after `t0`, as replies show instants.
fn instant(t0: DateTime<Utc>, secs: i64) -> Value {
    json!(webhookd::clock::rfc3339(
        (t0 + chrono::Duration::seconds(secs)).timestamp_millis()
    ))
}

#[test]
fn delivers_a_manual_task_signed_with_every_header() {
    let server = TestServer::start();
    let c = server.client();
    let rx = Receiver::start();
    let key = base64::engine::general_purpose::STANDARD.encode(b"a 32-byte key for standard hooks");
    let secret = format!("whsec_{key}");
    let ep = endpoint(
        &c,
        &format!("{}/hook?x=1", rx.url),
        json!({ "secret": secret, "headers": { "X-Tenant": "t1" } }),
    );
    let created = task(&c, ep, json!({ "payload": { "b": [1, 2], "a": "x y" } }));
    assert_eq!(created["task_type"], "manual");
    assert_eq!(created["max_attempts"], 5);
    let id = created["id"].as_i64().unwrap();
    let got = rx.wait_for(1, WAIT);
    assert_eq!(got.len(), 1);
    let r = &got[0];
    assert_eq!((r.method.as_str(), r.path.as_str()), ("POST", "/hook?x=1"));
    assert_eq!(r.json(), json!({ "b": [1, 2], "a": "x y" }));
    assert!(
        !String::from_utf8_lossy(&r.body).contains(": "),
        "compact JSON"
    );
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(
        r.header("user-agent"),
        Some(concat!("webhookd/", env!("CARGO_PKG_VERSION")))
    );
    assert_eq!(r.header("x-tenant"), Some("t1"));
    assert_eq!(r.header("x-service-task-id"), Some(id.to_string().as_str()));
    assert_eq!(r.header("x-service-attempt"), Some("1"));
    assert_eq!(r.header("webhook-id"), Some(format!("task_{id}").as_str()));
    let ts = r.header("x-service-timestamp").unwrap();
    assert_eq!(r.header("webhook-timestamp"), Some(ts));
    assert!((ts.parse::<i64>().unwrap() - Utc::now().timestamp()).abs() < 30);
    assert_eq!(
        r.header("x-service-signature"),
        Some(signing::hmac_hex(secret.as_bytes(), ts, &r.body).as_str())
    );
    assert_eq!(
        r.header("webhook-signature"),
        Some(
            signing::standard_webhooks_signature(
                &secret,
                &format!("task_{id}"),
                ts.parse().unwrap(),
                &r.body
            )
            .as_str()
        )
    );
    assert_eq!(r.header("x-service-event"), None);
    let done = wait_status(&c, id, "success");
    assert_eq!(done["attempts"], 1);
    assert_eq!(done["last_status_code"], 200);
    assert!(done["finished_at"].is_string());
    let tries = attempts(&c, id);
    assert_eq!(tries.len(), 1);
    assert_eq!(tries[0]["attempt"], 1);
    assert_eq!(tries[0]["status_code"], 200);
    assert!(tries[0]["error"].is_null());
}

#[test]
fn cleared_secret_sends_no_signatures_and_get_sends_no_body() {
    let server = TestServer::start();
    let c = server.client();
    let rx = Receiver::start();
    let ep = endpoint(&c, &rx.url, json!({ "secret": "s1", "method": "GET" }));
    ok(
        &c,
        "PATCH",
        &format!("/endpoints/{ep}"),
        Some(json!({ "clear_secret": true })),
    );
    let id = task(&c, ep, json!({ "payload": { "a": 1 } }))["id"]
        .as_i64()
        .unwrap();
    wait_status(&c, id, "success");
    let r = &rx.received()[0];
    assert_eq!(r.method, "GET");
    assert!(r.body.is_empty());
    assert_eq!(r.header("content-type"), None);
    assert_eq!(r.header("x-service-signature"), None);
    assert_eq!(r.header("webhook-signature"), None);
    assert!(r.header("webhook-id").is_some());

    // A secret on a bodyless method signs the empty body.
    ok(
        &c,
        "PATCH",
        &format!("/endpoints/{ep}"),
        Some(json!({ "secret": "s2", "method": "DELETE" })),
    );
    let id = task_id(&c, ep);
    wait_status(&c, id, "success");
    let r = &rx.received()[1];
    assert_eq!(r.method, "DELETE");
    let ts = r.header("x-service-timestamp").unwrap();
    assert_eq!(
        r.header("x-service-signature"),
        Some(signing::hmac_hex(b"s2", ts, b"").as_str())
    );
}

#[test]
fn failing_twice_then_succeeding_follows_the_policy_delays() {
    let t0 = now_secs();
    let server = TestServer::start_manual(t0, |config| config.max_skew_secs = 3600);
    let c = server.client();
    let rx = Receiver::start();
    rx.script([Answer::status(500), Answer::status(502).body("bad gateway")]);
    let p = policy(&c, 5, "exponential", 10, 3600);
    let ep = endpoint(&c, &rx.url, json!({ "retry_policy_id": p }));
    let id = task_id(&c, ep);
    let after_first = wait_attempts(&c, id, 1);
    assert_eq!(after_first["status"], "pending");
    assert_eq!(after_first["last_status_code"], 500);
    assert_eq!(after_first["next_attempt_at"], instant(t0, 10));
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(rx.received().len(), 1, "not retried before its time");
    server.advance(chrono::Duration::seconds(10));
    wait_attempts(&c, id, 2);
    server.advance(chrono::Duration::seconds(19));
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(rx.received().len(), 2, "the second delay is 20 s");
    server.advance(chrono::Duration::seconds(1));
    let done = wait_status(&c, id, "success");
    assert_eq!(done["attempts"], 3);
    let tries = attempts(&c, id);
    let codes: Vec<_> = tries.iter().map(|a| a["status_code"].clone()).collect();
    assert_eq!(codes, vec![json!(500), json!(502), json!(200)]);
    assert_eq!(tries[1]["response_body"], "bad gateway");
    assert_eq!(tries[1]["error"], "HTTP 502 Bad Gateway");
    let started: Vec<_> = tries.iter().map(|a| a["started_at"].clone()).collect();
    let at = |secs| instant(t0, secs);
    assert_eq!(started, vec![at(0), at(10), at(30)]);
    let headers: Vec<_> = rx
        .received()
        .iter()
        .map(|r| r.header("x-service-attempt").unwrap().to_string())
        .collect();
    assert_eq!(headers, ["1", "2", "3"]);
    let ids: Vec<_> = rx
        .received()
        .iter()
        .map(|r| r.header("webhook-id").unwrap().to_string())
        .collect();
    assert!(ids.iter().all(|i| *i == format!("task_{id}")));
}

#[test]
fn exhausting_max_attempts_fails_the_task() {
    let server = TestServer::start();
    let c = server.client();
    let rx = Receiver::start();
    rx.set_default(Answer::status(500).body("nope"));
    let p = policy(&c, 3, "fixed", 0, 0);
    let ep = endpoint(&c, &rx.url, json!({ "retry_policy_id": p }));
    let created = task(&c, ep, json!({}));
    assert_eq!(created["max_attempts"], 3);
    let id = created["id"].as_i64().unwrap();
    let failed = wait_status(&c, id, "failed");
    assert_eq!(failed["attempts"], 3);
    assert_eq!(failed["last_status_code"], 500);
    assert_eq!(failed["last_error"], "HTTP 500 Internal Server Error");
    assert!(failed["next_attempt_at"].is_null());
    assert_eq!(attempts(&c, id).len(), 3);
    assert_eq!(rx.received().len(), 3);
}

#[test]
fn a_slow_receiver_times_out() {
    let server = TestServer::start();
    let c = server.client();
    let rx = Receiver::start();
    rx.set_default(Answer::status(200).delayed(Duration::from_millis(1500)));
    let id = single_try_task(&c, &rx.url, json!({ "timeout_ms": 200 }));
    let failed = wait_status(&c, id, "failed");
    assert!(failed["last_status_code"].is_null());
    let tries = attempts(&c, id);
    assert!(tries[0]["status_code"].is_null());
    let error = tries[0]["error"].as_str().unwrap();
    assert!(
        error.contains("timeout") && error.contains("200 ms"),
        "{error}"
    );
    assert!(tries[0]["duration_ms"].as_i64().unwrap() < 1400);
}

#[test]
fn a_clock_jump_during_a_send_does_not_send_it_again() {
    // On a shared database a claim is leased for the endpoint's timeout + 30 s on the server's
    // clock, and other nodes take back tasks whose lease ran out. A clock that steps forward
    // (a VM resumed, NTP) while this node is still sending must not make it take back its own
    // task and send it a second time.
    let server = TestServer::start_manual(now_secs(), |config| config.max_skew_secs = 3600);
    let c = server.client();
    let rx = Receiver::start();
    rx.script([Answer::status(200).delayed(Duration::from_secs(3))]);
    let ep = endpoint(&c, &rx.url, json!({ "timeout_ms": 10_000 }));
    let id = task_id(&c, ep);
    assert_eq!(rx.wait_for(1, WAIT).len(), 1, "the first send arrived");
    server.advance(chrono::Duration::minutes(5));
    let done = wait_status(&c, id, "success");
    assert_eq!(done["attempts"], 1, "{done}");
    assert_eq!(attempts(&c, id).len(), 1);
    assert_eq!(rx.received().len(), 1, "sent once");
}

#[test]
fn gone_disables_the_endpoint_and_fails_the_task() {
    let server = TestServer::start();
    let c = server.client();
    let rx = Receiver::start();
    rx.script([Answer::status(410)]);
    let ep = endpoint(&c, &rx.url, json!({}));
    let id = task_id(&c, ep);
    let failed = wait_status(&c, id, "failed");
    assert_eq!(failed["attempts"], 1);
    assert_eq!(failed["last_status_code"], 410);
    assert_eq!(
        ok(&c, "GET", &format!("/endpoints/{ep}"), None)["status"],
        "disabled"
    );
}

#[test]
fn retry_after_is_honoured_on_429_within_the_cap() {
    let t0 = now_secs();
    let server = TestServer::start_manual(t0, |config| config.max_skew_secs = 3600);
    let c = server.client();
    let rx = Receiver::start();
    rx.script([
        Answer::status(429).header("Retry-After", "120"),
        Answer::status(503).header("Retry-After", "100000"),
    ]);
    let p = policy(&c, 5, "fixed", 10, 200);
    let ep = endpoint(&c, &rx.url, json!({ "retry_policy_id": p }));
    let id = task_id(&c, ep);
    let next = |n: i64| wait_attempts(&c, id, n)["next_attempt_at"].clone();
    let at = |secs| instant(t0, secs);
    assert_eq!(next(1), at(120));
    server.advance(chrono::Duration::seconds(120));
    assert_eq!(next(2), at(320), "Retry-After capped at max_delay_sec");
    server.advance(chrono::Duration::seconds(200));
    wait_status(&c, id, "success");
}

#[test]
fn disabled_endpoints_hold_tasks_and_deleted_ones_cancel_them() {
    let server = TestServer::start();
    let c = server.client();
    let rx = Receiver::start();
    let ep = endpoint(&c, &rx.url, json!({}));
    ok(&c, "POST", &format!("/endpoints/{ep}/disable"), None);
    let id = task_id(&c, ep);
    std::thread::sleep(Duration::from_millis(300));
    assert!(rx.received().is_empty());
    let held = ok(&c, "GET", &format!("/tasks/{id}"), None);
    assert_eq!(
        (held["status"].as_str(), held["attempts"].as_i64()),
        (Some("pending"), Some(0))
    );
    ok(&c, "POST", &format!("/endpoints/{ep}/enable"), None);
    wait_status(&c, id, "success");
    assert_eq!(rx.received().len(), 1);

    ok(&c, "POST", &format!("/endpoints/{ep}/disable"), None);
    let id = task_id(&c, ep);
    ok(&c, "DELETE", &format!("/endpoints/{ep}"), None);
    let canceled = ok(&c, "GET", &format!("/tasks/{id}"), None);
    assert_eq!(canceled["status"], "canceled");
    assert!(canceled["finished_at"].is_string());
    err(&c, "POST", &format!("/tasks/{id}/retry"), None, 409, 40901);
}

#[test]
fn link_local_targets_are_refused_with_the_reason() {
    let server = TestServer::start();
    let c = server.client();
    let id = single_try_task(&c, "http://169.254.169.254/latest/meta-data", json!({}));
    let failed = wait_status(&c, id, "failed");
    let error = failed["last_error"].as_str().unwrap();
    assert!(
        error.contains("link-local") && error.contains("--allow-targets"),
        "{error}"
    );
    assert!(attempts(&c, id)[0]["status_code"].is_null());
}

#[test]
fn deny_private_targets_refuses_loopback_unless_allowed() {
    let rx = Receiver::start();
    let server = TestServer::start_with(|config| config.deny_private_targets = true);
    let c = server.client();
    let id = single_try_task(&c, &rx.url, json!({}));
    let failed = wait_status(&c, id, "failed");
    let error = failed["last_error"].as_str().unwrap();
    assert!(
        error.contains("127.0.0.1") && error.contains("--deny-private-targets"),
        "{error}"
    );
    assert!(rx.received().is_empty());
    drop(server);

    let allowed = TestServer::start_with(|config| {
        config.deny_private_targets = true;
        config.allow_targets = vec!["127.0.0.0/8".parse().unwrap()];
    });
    let c = allowed.client();
    let ep = endpoint(&c, &rx.url, json!({}));
    let id = task_id(&c, ep);
    wait_status(&c, id, "success");
}

#[test]
fn redirects_are_not_followed() {
    let server = TestServer::start();
    let c = server.client();
    let rx = Receiver::start();
    rx.set_default(Answer::status(302).header("Location", &format!("{}/elsewhere", rx.url)));
    let id = single_try_task(&c, &rx.url, json!({}));
    let failed = wait_status(&c, id, "failed");
    assert_eq!(failed["last_status_code"], 302);
    assert_eq!(rx.received().len(), 1);
}

#[test]
fn a_task_due_later_waits_for_its_time() {
    let t0 = now_secs();
    let server = TestServer::start_manual(t0, |config| config.max_skew_secs = 3600);
    let c = server.client();
    let rx = Receiver::start();
    let ep = endpoint(&c, &rx.url, json!({}));
    let later = (t0 + chrono::Duration::seconds(90)).to_rfc3339();
    let id = task(&c, ep, json!({ "run_at": later }))["id"]
        .as_i64()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert!(rx.received().is_empty());
    server.advance(chrono::Duration::seconds(90));
    wait_status(&c, id, "success");
}

#[test]
fn metrics_count_tasks_and_deliveries() {
    let server = TestServer::start();
    let c = server.client();
    let rx = Receiver::start();
    let ep = endpoint(&c, &rx.url, json!({}));
    let id = task_id(&c, ep);
    wait_status(&c, id, "success");
    let (status, text) = get_text(&format!("{}/metrics", server.url));
    assert_eq!(status, 200);
    assert!(
        text.contains("webhookd_tasks{status=\"success\"} 1\n"),
        "{text}"
    );
    assert!(
        text.contains("webhookd_deliveries_total{outcome=\"success\"} 1\n"),
        "{text}"
    );
    assert!(
        text.contains("webhookd_delivery_duration_seconds_count 1\n"),
        "{text}"
    );
    // docs/design.md §10 additions: per-endpoint counters, build info, process memory and files.
    assert!(
        text.contains(&format!(
            "webhookd_endpoint_deliveries_total{{endpoint_id=\"{ep}\",outcome=\"success\"}} 1\n"
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "webhookd_build_info{{version=\"{}\",commit=\"{}\",target=\"{}\"}} 1\n",
            env!("CARGO_PKG_VERSION"),
            webhookd::metrics::GIT_COMMIT,
            webhookd::metrics::TARGET
        )),
        "{text}"
    );
    let gauge = |name: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .unwrap_or_else(|| panic!("{name} missing:\n{text}"))
            .parse()
            .unwrap()
    };
    assert!(gauge("process_resident_memory_bytes") > 1_000_000.0);
    assert!(gauge("process_open_fds") >= 3.0);
    // Every sample line is `name{labels} value` with a number.
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let value = line.rsplit(' ').next().unwrap();
        assert!(value.parse::<f64>().is_ok(), "{line}");
    }
    assert!(text.ends_with("# EOF\n"));

    let off = TestServer::start_with(|config| config.metrics = false);
    assert_eq!(get_text(&format!("{}/metrics", off.url)).0, 404);
}

#[test]
fn retention_deletes_old_finished_tasks_and_their_attempts() {
    let t0 = now_secs();
    let server = TestServer::start_manual(t0, |config| {
        config.retention_days = 30;
        config.max_idle = Duration::from_millis(100);
    });
    let c = server.client();
    let rx = Receiver::start();
    let ep = endpoint(&c, &rx.url, json!({}));
    let done = task_id(&c, ep);
    wait_status(&c, done, "success");
    ok(&c, "POST", &format!("/endpoints/{ep}/disable"), None);
    let waiting = task_id(&c, ep);
    server.advance(chrono::Duration::days(31));
    let mut db = crate::support::Db::open(&server.db);
    let mut count = |sql: &str| db.int(sql, &[&done]);
    wait_for(WAIT, || {
        (count("SELECT count(*) FROM tasks WHERE id = ?1") == 0).then_some(())
    })
    .expect("the old finished task is deleted");
    assert_eq!(count("SELECT count(*) FROM attempts WHERE task_id = ?1"), 0);
    let kept = db.rows("SELECT status FROM tasks WHERE id = ?1", &[&waiting]);
    assert_eq!(kept[0][0].text(), "pending", "unfinished tasks are kept");
}

#[test]
fn event_tasks_name_their_event() {
    let server = TestServer::start();
    let c = server.client();
    let rx = Receiver::start();
    endpoint(&c, &rx.url, json!({ "filter_events": "order.*" }));
    let event = ok(
        &c,
        "POST",
        "/events",
        Some(json!({ "event_name": "order.created", "payload": { "n": 1 } })),
    );
    let got = rx.wait_for(1, WAIT);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].header("x-service-event"), Some("order.created"));
    assert_eq!(got[0].header("x-service-schedule-id"), None);
    assert_eq!(got[0].json(), json!({ "n": 1 }));
    let tasks = ok(&c, "GET", &format!("/tasks?event_id={}", event["id"]), None);
    assert_eq!(tasks["total"], 1);
    assert_eq!(tasks["items"][0]["task_type"], "event");
}

#[test]
fn a_task_in_flight_when_its_endpoint_is_deleted_ends_canceled() {
    let server = TestServer::start();
    let c = server.client();
    let rx = Receiver::start();
    rx.set_default(Answer::status(500).delayed(Duration::from_millis(400)));
    let ep = endpoint(&c, &rx.url, json!({}));
    let id = task_id(&c, ep);
    assert_eq!(rx.wait_for(1, WAIT).len(), 1);
    ok(&c, "DELETE", &format!("/endpoints/{ep}"), None);
    let canceled = wait_status(&c, id, "canceled");
    assert_eq!(canceled["attempts"], 1);
    assert!(canceled["next_attempt_at"].is_null() && canceled["finished_at"].is_string());
    assert_eq!(attempts(&c, id)[0]["status_code"], 500);
}

/// A receiver that answers 401 or 403 refused the delivery: the attempt's error says so and
/// names the signature headers sent (or that none were: the endpoint has no secret).
#[test]
fn a_refusal_by_the_receiver_names_the_signatures_sent() {
    let server = TestServer::start();
    let c = server.client();
    for (status, secret, says) in [
        (
            401,
            json!("s3cret"),
            "signed (X-Service-Signature, webhook-signature)",
        ),
        (403, Value::Null, "not signed (the endpoint has no secret)"),
    ] {
        let rx = Receiver::start();
        rx.set_default(Answer::status(status));
        let id = single_try_task(&c, &rx.url, json!({ "secret": secret }));
        let failed = wait_status(&c, id, "failed");
        let error = failed["last_error"].as_str().unwrap_or_default();
        assert!(
            error.contains("the receiver refused the delivery") && error.contains(says),
            "{failed}"
        );
        let got = &rx.received()[0];
        assert_eq!(
            got.header("x-service-signature").is_some(),
            secret.is_string()
        );
        assert_eq!(attempts(&c, id)[0]["error"], error);
    }
}

/// A delivery uses its endpoint as it is when the task is claimed: after a `PATCH` of the URL
/// and headers, the next task goes to the new URL with the new headers, although the
/// dispatcher held the endpoint it sent the first one with (on PostgreSQL, by its app's
/// target generation).
#[test]
fn a_patched_endpoint_is_used_from_the_next_delivery() {
    let server = TestServer::start();
    let c = server.client();
    let (first, second) = (Receiver::start(), Receiver::start());
    let id = endpoint(&c, &first.url, json!({ "headers": { "X-Team": "a" } }));
    task_id(&c, id);
    let got = first.wait_for(1, WAIT);
    assert_eq!(got[0].header("x-team"), Some("a"));
    ok(
        &c,
        "PATCH",
        &format!("/endpoints/{id}"),
        Some(json!({ "url": second.url, "headers": { "X-Team": "b" } })),
    );
    let task = task_id(&c, id);
    let got = second.wait_for(1, WAIT);
    assert_eq!(got[0].header("x-team"), Some("b"));
    wait_status(&c, task, "success");
    assert_eq!(first.received().len(), 1, "nothing more to the old URL");
}
