//! Content filters and retry limits (docs/design.md §18): `filter_payload` decides which
//! endpoints a published event reaches, `POST /endpoints/{id}/filter-test` explains it without
//! publishing, and retry policies stop by age (`max_age_sec`) and spread retries (`jitter`).

use crate::support::*;
use serde_json::{Value, json};
use webhookd::client::Client;

/// Creates an endpoint nothing listens on, with the given extra fields; returns its id.
fn endpoint(client: &Client, name: &str, extra: Value) -> i64 {
    let mut body = json!({"name": name, "url": "http://127.0.0.1:9/hook"});
    for (k, v) in extra.as_object().expect("an object") {
        body[k] = v.clone();
    }
    ok(client, "POST", "/endpoints", Some(body))["id"]
        .as_i64()
        .unwrap()
}

/// Publishes an event; returns the endpoint ids that got a task, sorted.
fn publish(client: &Client, event_name: &str, payload: Value) -> Vec<i64> {
    let event = ok(
        client,
        "POST",
        "/events",
        Some(json!({"event_name": event_name, "payload": payload})),
    );
    let id = event["id"].as_i64().unwrap();
    let page = ok(
        client,
        "GET",
        &format!("/tasks?event_id={id}&page_size=100"),
        None,
    );
    let mut targets: Vec<i64> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["endpoint_id"].as_i64().unwrap())
        .collect();
    targets.sort();
    assert_eq!(event["task_count"], json!(targets.len()));
    targets
}

#[test]
fn only_matching_endpoints_get_a_task_and_an_unfiltered_one_gets_all() {
    let server = TestServer::start();
    let client = server.client();
    let pro = endpoint(
        &client,
        "pro",
        json!({"filter_payload": {"customer.tier": "pro"}}),
    );
    let big = endpoint(
        &client,
        "big",
        json!({"filter_payload": {"total": {"$gte": 100}, "items.0.sku": {"$exists": true}}}),
    );
    let orders_only = endpoint(
        &client,
        "orders",
        json!({"filter_events": "order.*", "filter_payload": {"customer.tier": {"$ne": "free"}}}),
    );
    let all = endpoint(&client, "all", json!({}));

    let rich = json!({"customer": {"tier": "pro"}, "total": 250, "items": [{"sku": "A"}]});
    assert_eq!(
        publish(&client, "order.created", rich.clone()),
        vec![pro, big, orders_only, all]
    );
    // filter_events still applies on top of filter_payload.
    assert_eq!(publish(&client, "invoice.paid", rich), vec![pro, big, all]);
    let free = json!({"customer": {"tier": "free"}, "total": 5});
    assert_eq!(publish(&client, "order.created", free), vec![all]);
    // A payload that lacks the paths: $ne holds, equality and $exists do not.
    assert_eq!(
        publish(&client, "order.created", json!({})),
        vec![orders_only, all]
    );
}

#[test]
fn every_operator_end_to_end() {
    let server = TestServer::start();
    let client = server.client();
    let payload = json!({
        "customer": {"tier": "pro", "since": "2024-03-01"},
        "items": [{"sku": "A-1", "qty": 2}],
        "total": 99.5
    });
    // (filter, whether `payload` passes it)
    let cases = [
        (json!({"customer.tier": "pro"}), true),
        (json!({"customer.tier": {"$eq": "free"}}), false),
        (json!({"customer.tier": {"$ne": "free"}}), true),
        (
            json!({"customer.tier": {"$in": ["pro", "enterprise"]}}),
            true,
        ),
        (json!({"customer.tier": {"$nin": ["pro"]}}), false),
        (json!({"customer.deleted": {"$exists": false}}), true),
        (json!({"items.0.sku": {"$exists": true}}), true),
        (json!({"total": {"$gt": 99.5}}), false),
        (json!({"total": {"$gte": 99.5}}), true),
        (json!({"items.0.qty": {"$lt": 2}}), false),
        (json!({"customer.since": {"$lte": "2024-12-31"}}), true),
    ];
    let mut want = Vec::new();
    for (i, (filter, passes)) in cases.iter().enumerate() {
        let id = endpoint(
            &client,
            &format!("case{i}"),
            json!({"filter_payload": filter}),
        );
        if *passes {
            want.push(id);
        }
    }
    assert_eq!(publish(&client, "order.created", payload), want);
}

#[test]
fn bad_filters_are_40001_naming_the_path() {
    let server = TestServer::start();
    let client = server.client();
    let cases = [
        (
            json!({"customer.tier": {"$in": "pro"}}),
            "filter_payload[\"customer.tier\"]: $in takes an array of values",
        ),
        (
            json!({"a": {"$equal": 1}}),
            "filter_payload[\"a\"]: unknown operator \"$equal\"; did you mean \"$eq\"?",
        ),
        (
            json!({"a..b": 1}),
            "filter_payload[\"a..b\"]: a path is names joined by dots",
        ),
        (
            json!({"a.b.c.d.e.f.g.h.i": 1}),
            "filter_payload[\"a.b.c.d.e.f.g.h.i\"]: the path has 9 steps; at most 8 are allowed",
        ),
        (
            json!({"n": {"$gt": true}}),
            "filter_payload[\"n\"]: $gt takes a number or a string",
        ),
    ];
    let id = endpoint(&client, "target", json!({}));
    for (filter, message) in cases {
        for (method, path, body) in [
            (
                "POST",
                "/endpoints".to_string(),
                json!({"name": "x", "url": "http://127.0.0.1:9/", "filter_payload": filter}),
            ),
            (
                "PATCH",
                format!("/endpoints/{id}"),
                json!({"filter_payload": filter}),
            ),
        ] {
            let reply = err(&client, method, &path, Some(body), 400, 40001);
            let got = reply.body["message"].as_str().unwrap();
            assert!(got.starts_with(message), "{method} {filter} → {got}");
        }
    }
    let many: serde_json::Map<String, Value> =
        (0..33).map(|i| (format!("k{i}"), json!(i))).collect();
    let reply = err(
        &client,
        "POST",
        "/endpoints",
        Some(json!({"name": "x", "url": "http://127.0.0.1:9/", "filter_payload": many})),
        400,
        40001,
    );
    assert_eq!(
        reply.body["message"],
        "filter_payload: has 33 conditions; at most 32 are allowed"
    );
    expect_field_errors(
        &client,
        "POST",
        "/endpoints",
        [(
            json!({"name": "x", "url": "http://127.0.0.1:9/", "filter_payload": "tier=pro"}),
            "filter_payload",
        )],
    );
    // Nothing was stored by the refused PATCHes.
    let got = ok(&client, "GET", &format!("/endpoints/{id}"), None);
    assert_eq!(got["filter_payload"], Value::Null);
}

#[test]
fn patch_sets_and_null_clears() {
    let server = TestServer::start();
    let client = server.client();
    let id = endpoint(&client, "ep", json!({}));
    let path = format!("/endpoints/{id}");
    let filter = json!({"customer.tier": {"$in": ["pro", "enterprise"]}});
    let got = ok(
        &client,
        "PATCH",
        &path,
        Some(json!({"filter_payload": filter})),
    );
    assert_eq!(got["filter_payload"], filter);
    assert_eq!(ok(&client, "GET", &path, None)["filter_payload"], filter);
    assert_eq!(
        publish(&client, "e", json!({"customer": {"tier": "free"}})),
        Vec::<i64>::new()
    );
    // A PATCH that does not name it leaves it alone.
    let got = ok(&client, "PATCH", &path, Some(json!({"name": "renamed"})));
    assert_eq!(got["filter_payload"], filter);
    let got = ok(
        &client,
        "PATCH",
        &path,
        Some(json!({"filter_payload": null})),
    );
    assert_eq!(got["filter_payload"], Value::Null);
    assert_eq!(
        ok(&client, "GET", &path, None)["filter_payload"],
        Value::Null
    );
    assert_eq!(
        publish(&client, "e", json!({"customer": {"tier": "free"}})),
        vec![id]
    );
}

#[test]
fn filter_test_answers_without_publishing() {
    let server = TestServer::start();
    let client = server.client();
    let id = endpoint(
        &client,
        "ep",
        json!({"filter_events": "order.*",
               "filter_payload": {"customer.tier": "pro", "total": {"$gte": 100}}}),
    );
    let test = |event_name: &str, payload: Value| {
        ok(
            &client,
            "POST",
            &format!("/endpoints/{id}/filter-test"),
            Some(json!({"event_name": event_name, "payload": payload})),
        )
    };
    let pass = json!({"customer": {"tier": "pro"}, "total": 120});
    assert_eq!(
        test("order.created", pass.clone()),
        json!({"matches": true,
               "reason": "matches filter_events and all 2 conditions of filter_payload"})
    );
    assert_eq!(
        test("invoice.paid", pass),
        json!({"matches": false,
               "reason": "filter_events \"order.*\" does not take the event name \"invoice.paid\""})
    );
    assert_eq!(
        test(
            "order.created",
            json!({"customer": {"tier": "pro"}, "total": 20})
        ),
        json!({"matches": false,
               "reason": "matches filter_events, but filter_payload fails: total is 20, not at least 100"})
    );
    // Nothing was published.
    let events = ok(&client, "GET", "/events", None);
    assert_eq!(events["total"], 0);
    let tasks = ok(&client, "GET", "/tasks", None);
    assert_eq!(tasks["total"], 0);

    // An endpoint without filters takes everything, and says so.
    let open = endpoint(&client, "open", json!({}));
    let got = ok(
        &client,
        "POST",
        &format!("/endpoints/{open}/filter-test"),
        Some(json!({"event_name": "anything"})),
    );
    assert_eq!(got["matches"], true);
    assert_eq!(
        got["reason"],
        "no filter_events (every event name); no filter_payload"
    );

    // Bad input names the field; an unknown endpoint is 404.
    expect_field_errors(
        &client,
        "POST",
        &format!("/endpoints/{id}/filter-test"),
        [
            (json!({"payload": {}}), "event_name"),
            (json!({"event_name": "e", "payload": 3}), "payload"),
        ],
    );
    err(
        &client,
        "POST",
        "/endpoints/999999/filter-test",
        Some(json!({"event_name": "e"})),
        404,
        40401,
    );
}

#[test]
fn schedules_and_manual_tasks_ignore_the_filter() {
    let server = TestServer::start();
    let client = server.client();
    let id = endpoint(
        &client,
        "strict",
        json!({"filter_payload": {"never": {"$exists": true}}}),
    );
    let task = ok(
        &client,
        "POST",
        "/tasks",
        Some(json!({"endpoint_id": id, "payload": {"other": 1}})),
    );
    assert_eq!(task["endpoint_id"], id);
    let schedule = ok(
        &client,
        "POST",
        "/schedules",
        Some(
            json!({"name": "s", "cron_expr": "0 0 1 1 *", "endpoint_ids": [id],
                    "payload": {"other": 1}}),
        ),
    );
    let sid = schedule["id"].as_i64().unwrap();
    ok(&client, "POST", &format!("/schedules/{sid}/trigger"), None);
    let page = ok(&client, "GET", &format!("/tasks?schedule_id={sid}"), None);
    assert_eq!(page["total"], 1);
    assert_eq!(page["items"][0]["endpoint_id"], id);
    // An event is still filtered out.
    assert_eq!(
        publish(&client, "e", json!({"other": 1})),
        Vec::<i64>::new()
    );
}

// --- retry limits: max_age_sec and jitter ---

use crate::delivery::{attempts, endpoint as endpoint_at, task_id, wait_attempts, wait_status};
use chrono::{DateTime, SubsecRound, Utc};

/// A retry policy with these extra fields; returns its id.
fn policy(client: &Client, body: Value) -> i64 {
    let mut base = json!({"name": "p", "max_attempts": 10, "backoff_type": "fixed",
                          "initial_delay_sec": 600, "max_delay_sec": 3600});
    for (k, v) in body.as_object().expect("an object") {
        base[k] = v.clone();
    }
    ok(client, "POST", "/retries/policies", Some(base))["id"]
        .as_i64()
        .unwrap()
}

fn ms(instant: &Value) -> i64 {
    DateTime::parse_from_rfc3339(instant.as_str().expect("an instant"))
        .expect("RFC 3339")
        .timestamp_millis()
}

#[test]
fn policy_fields_default_validate_and_clear() {
    let server = TestServer::start();
    let client = server.client();
    let id = policy(&client, json!({}));
    let path = format!("/retries/policies/{id}");
    let got = ok(&client, "GET", &path, None);
    assert_eq!(
        (got["max_age_sec"].clone(), got["jitter"].clone()),
        (Value::Null, json!("none"))
    );
    let got = ok(
        &client,
        "PATCH",
        &path,
        Some(json!({"max_age_sec": 3600, "jitter": "full"})),
    );
    assert_eq!(
        (got["max_age_sec"].clone(), got["jitter"].clone()),
        (json!(3600), json!("full"))
    );
    let got = ok(&client, "PATCH", &path, Some(json!({"max_age_sec": null})));
    assert_eq!(got["max_age_sec"], Value::Null);
    assert_eq!(ok(&client, "GET", &path, None)["jitter"], "full");
    let base = json!({"name": "p", "max_attempts": 3, "backoff_type": "fixed"});
    let with = |k: &str, v: Value| {
        let mut b = base.clone();
        b[k] = v;
        b
    };
    expect_field_errors(
        &client,
        "POST",
        "/retries/policies",
        [
            (with("max_age_sec", json!(0)), "max_age_sec"),
            (with("max_age_sec", json!("1h")), "max_age_sec"),
            (with("jitter", json!("half")), "jitter"),
        ],
    );
    expect_field_errors(
        &client,
        "PATCH",
        &path,
        [
            (json!({"max_age_sec": -5}), "max_age_sec"),
            (json!({"jitter": null}), "jitter"),
        ],
    );
}

#[test]
fn a_task_past_max_age_fails_for_good_saying_why() {
    let t0 = Utc::now().trunc_subsecs(0);
    let server = TestServer::start_manual(t0, |config| config.max_skew_secs = 3600);
    let client = server.client();
    let rx = Receiver::start();
    rx.set_default(Answer::status(500));
    let p = policy(&client, json!({"max_age_sec": 1000}));
    let ep = endpoint_at(&client, &rx.url, json!({"retry_policy_id": p}));
    let id = task_id(&client, ep);
    let first = wait_attempts(&client, id, 1);
    assert_eq!(first["status"], "pending");
    // 600 s after the first attempt: within the age, retried.
    server.advance(chrono::Duration::seconds(600));
    let second = wait_attempts(&client, id, 2);
    assert_eq!(second["status"], "pending");
    assert_eq!(
        ms(&second["next_attempt_at"]),
        t0.timestamp_millis() + 1_200_000
    );
    // 1200 s after it: past the age, failed for good though attempts remain.
    server.advance(chrono::Duration::seconds(600));
    let failed = wait_status(&client, id, "failed");
    assert_eq!(failed["attempts"], 3);
    let why = "HTTP 500 Internal Server Error; not retried: first attempt was 1200 s ago, max_age_sec is 1000";
    assert_eq!(failed["last_error"], why);
    let tries = attempts(&client, id);
    assert_eq!(tries.len(), 3);
    assert_eq!(tries[2]["error"], why);
    assert_eq!(tries[1]["error"], "HTTP 500 Internal Server Error");
}

#[test]
fn full_jitter_keeps_each_delay_within_half_to_whole() {
    let t0 = Utc::now().trunc_subsecs(0);
    let server = TestServer::start_manual(t0, |config| config.max_skew_secs = 3600);
    let client = server.client();
    let rx = Receiver::start();
    rx.set_default(Answer::status(500));
    let p = policy(
        &client,
        json!({"initial_delay_sec": 100, "jitter": "full", "max_attempts": 2}),
    );
    let ep = endpoint_at(&client, &rx.url, json!({"retry_policy_id": p}));
    let ids: Vec<i64> = (0..8).map(|_| task_id(&client, ep)).collect();
    let delays: Vec<i64> = ids
        .iter()
        .map(|id| ms(&wait_attempts(&client, *id, 1)["next_attempt_at"]) - t0.timestamp_millis())
        .collect();
    for d in &delays {
        assert!(
            (50_000..=100_000).contains(d),
            "delay {d} ms outside [50 s, 100 s]: {delays:?}"
        );
    }
    // Drawn, not fixed: eight draws are not all the same (without jitter each is 100 s).
    assert!(
        delays.iter().any(|d| *d != delays[0]),
        "no spread: {delays:?}"
    );
}

/// An endpoint's stored `filter_payload` that is not an object, and headers that do not parse,
/// are errors of the read naming the column, never "no filter" (which would show the endpoint
/// taking every event while the fan-out sends it none) or no headers; on either store.
#[test]
fn a_corrupt_stored_filter_or_headers_is_an_error() {
    use webhookd::store::StoreError;
    let dir = tempfile::tempdir().unwrap();
    let db = crate::support::test_db(dir.path());
    let store = webhookd::store::open(&db, 1).unwrap();
    let mut raw = crate::support::Db::open(&db);
    raw.execute(
        "INSERT INTO endpoints (id, app_id, name, url, method, timeout_ms, status, created_at,
                                updated_at, filter_payload)
         VALUES (1, 'app1', 'e', 'http://127.0.0.1:9/', 'POST', 1000, 'enabled', 0, 0,
                 '{\"kind\":\"a\"}')",
        &[],
    );
    let read = || store.read::<_, StoreError>(|tx| tx.get_endpoint("app1", 1));
    let endpoint = read().unwrap().unwrap();
    assert_eq!(
        endpoint.filter_payload,
        Some(json!({"kind": "a"}).as_object().unwrap().clone())
    );
    for (corrupt, message) in [
        (
            "filter_payload = '[1]'",
            "not valid JSON for endpoints.filter_payload: ",
        ),
        (
            "filter_payload = '{\"a\":'",
            "not valid JSON for endpoints.filter_payload: ",
        ),
        ("headers = 'x'", "not valid JSON for endpoints.headers: "),
    ] {
        raw.execute(
            "UPDATE endpoints SET filter_payload = NULL, headers = '{}' WHERE id = 1",
            &[],
        );
        assert_eq!(read().unwrap().unwrap().filter_payload, None);
        raw.execute(&format!("UPDATE endpoints SET {corrupt} WHERE id = 1"), &[]);
        let err = read().unwrap_err();
        assert!(
            matches!(&err, StoreError::Other(_)) && err.to_string().contains(message),
            "{corrupt}: {err}"
        );
    }
}
