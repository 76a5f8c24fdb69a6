//! docs/design.md §3 (changed 2026-11-23): a body field or query parameter a route does not take is
//! 40001 naming it (with the nearest taken name suggested); read-only fields of the route's own
//! record are ignored so a record read back can be sent back.

use crate::support::{TestServer, err, ok};
use serde_json::{Value, json};

/// Creates a record and returns its id.
fn created(client: &webhookd::client::Client, path: &str, body: Value) -> i64 {
    ok(client, "POST", path, Some(body))["id"].as_i64().unwrap()
}

/// Sends `body` and expects 40001 whose message names `field` and, when given, suggests `nearest`.
fn refused(
    client: &webhookd::client::Client,
    method: &str,
    path: &str,
    body: Value,
    field: &str,
    nearest: Option<&str>,
) {
    let reply = err(client, method, path, Some(body), 400, 40001);
    let message = reply.body["message"].as_str().unwrap().to_string();
    assert!(
        message.contains(&format!("unknown field \"{field}\"")),
        "{method} {path}: {message}"
    );
    if let Some(nearest) = nearest {
        assert!(
            message.contains(&format!("did you mean \"{nearest}\"")),
            "{method} {path}: {message}"
        );
    }
}

#[test]
fn unknown_body_fields_are_refused_on_every_create_patch_and_action_route() {
    let server = TestServer::start();
    let c = server.client();
    let policy = created(
        &c,
        "/v1/retries/policies",
        json!({"name": "p", "max_attempts": 3, "backoff_type": "fixed"}),
    );
    let endpoint = created(
        &c,
        "/v1/endpoints",
        json!({"name": "e", "url": "http://127.0.0.1:9/x"}),
    );
    let schedule = created(
        &c,
        "/v1/schedules",
        json!({"name": "s", "cron_expr": "0 0 1 1 *", "endpoint_ids": [endpoint]}),
    );
    let task = created(
        &c,
        "/v1/tasks",
        json!({"endpoint_id": endpoint, "run_at": 4_000_000_000i64}),
    );

    // The issue's case: a typo that would have made the endpoint receive every event.
    refused(
        &c,
        "POST",
        "/v1/endpoints",
        json!({"name": "e2", "url": "http://127.0.0.1:9/x", "filter_event": "order.*"}),
        "filter_event",
        Some("filter_events"),
    );
    let cases: Vec<(&str, String, Value, &str, Option<&str>)> = vec![
        (
            "PATCH",
            format!("/v1/endpoints/{endpoint}"),
            json!({"filter_event": "a"}),
            "filter_event",
            Some("filter_events"),
        ),
        (
            "PATCH",
            format!("/v1/endpoints/{endpoint}"),
            json!({"name": "ok", "timeout": 5}),
            "timeout",
            Some("timeout_ms"),
        ),
        (
            "POST",
            "/v1/retries/policies".into(),
            json!({"name": "p", "max_attempts": 3, "backoff_type": "fixed", "initial_delay": 1}),
            "initial_delay",
            Some("initial_delay_sec"),
        ),
        (
            "PATCH",
            format!("/v1/retries/policies/{policy}"),
            json!({"max_atempts": 4}),
            "max_atempts",
            Some("max_attempts"),
        ),
        (
            "POST",
            "/v1/schedules".into(),
            json!({"name": "s", "cron_expr": "* * * * *", "timezon": "UTC"}),
            "timezon",
            Some("timezone"),
        ),
        (
            "PATCH",
            format!("/v1/schedules/{schedule}"),
            json!({"endpoints": [endpoint]}),
            "endpoints",
            None,
        ),
        (
            "POST",
            "/v1/cron/preview".into(),
            json!({"cron_expr": "* * * * *", "counts": 2}),
            "counts",
            Some("count"),
        ),
        (
            "POST",
            "/v1/events".into(),
            json!({"event_name": "a.b", "paylod": {}}),
            "paylod",
            Some("payload"),
        ),
        (
            "POST",
            "/v1/tasks".into(),
            json!({"endpoint_id": endpoint, "run_time": 1}),
            "run_time",
            None,
        ),
    ];
    for (method, path, body, field, nearest) in cases {
        refused(&c, method, &path, body, field, nearest);
    }
    // Routes that take no body refuse any field, before they change anything.
    let bodyless = [
        ("POST", format!("/v1/endpoints/{endpoint}/disable")),
        ("POST", format!("/v1/endpoints/{endpoint}/enable")),
        ("DELETE", format!("/v1/endpoints/{endpoint}")),
        ("DELETE", format!("/v1/retries/policies/{policy}")),
        ("POST", format!("/v1/schedules/{schedule}/pause")),
        ("POST", format!("/v1/schedules/{schedule}/resume")),
        ("POST", format!("/v1/schedules/{schedule}/trigger")),
        ("DELETE", format!("/v1/schedules/{schedule}")),
        ("POST", format!("/v1/tasks/{task}/cancel")),
        ("POST", format!("/v1/tasks/{task}/retry")),
        ("GET", format!("/v1/endpoints/{endpoint}")),
    ];
    for (method, path) in bodyless {
        refused(&c, method, &path, json!({"payload": {}}), "payload", None);
    }
    // Nothing was changed by the refused requests.
    assert_eq!(
        ok(&c, "GET", &format!("/v1/endpoints/{endpoint}"), None)["status"],
        "enabled"
    );
    assert_eq!(
        ok(&c, "GET", &format!("/v1/schedules/{schedule}"), None)["status"],
        "active"
    );
    assert_eq!(
        ok(&c, "GET", &format!("/v1/tasks/{task}"), None)["status"],
        "pending"
    );
    let listed = ok(&c, "GET", "/v1/endpoints", None);
    assert_eq!(listed["total"], 1, "the refused create made nothing");
    // A route that takes no query parameter refuses one.
    let reply = err(
        &c,
        "POST",
        &format!("/v1/endpoints/{endpoint}/disable?force=1"),
        None,
        400,
        40001,
    );
    assert!(
        reply.body["message"]
            .as_str()
            .unwrap()
            .contains("\"force\"")
    );
}

#[test]
fn unknown_query_parameters_are_refused_on_every_list_route() {
    let server = TestServer::start();
    let c = server.client();
    let endpoint = created(
        &c,
        "/v1/endpoints",
        json!({"name": "e", "url": "http://127.0.0.1:9/x"}),
    );
    let task = created(
        &c,
        "/v1/tasks",
        json!({"endpoint_id": endpoint, "run_at": 4_000_000_000i64}),
    );
    let lists = [
        ("/v1/endpoints", "status=enabled"),
        ("/v1/retries/policies", ""),
        ("/v1/schedules", "status=active"),
        ("/v1/events", "event_name=a.b"),
        (
            "/v1/tasks",
            "status=pending&schedule_id=1&event_id=1&endpoint_id=1&task_type=manual",
        ),
    ];
    let attempts = format!("/v1/tasks/{task}/attempts");
    for (path, filters) in lists.iter().copied().chain([(attempts.as_str(), "")]) {
        let known = format!("{path}?page=1&page_size=5&{filters}");
        ok(&c, "GET", known.trim_end_matches('&'), None);
        let reply = err(
            &c,
            "GET",
            &format!("{path}?page=1&pagesize=5"),
            None,
            400,
            40001,
        );
        assert_eq!(
            reply.body["message"],
            "unknown query parameter \"pagesize\"; did you mean \"page_size\"?",
            "{path}"
        );
    }
    let reply = err(&c, "GET", "/v1/tasks?state=failed", None, 400, 40001);
    assert!(
        reply.body["message"]
            .as_str()
            .unwrap()
            .contains("\"state\"")
    );
    // A single record's route takes no parameter either.
    err(
        &c,
        "GET",
        &format!("/v1/tasks/{task}?verbose=1"),
        None,
        400,
        40001,
    );
}

#[test]
fn a_record_read_back_is_accepted_unchanged_read_only_fields_ignored() {
    let server = TestServer::start();
    let c = server.client();
    let policy = ok(
        &c,
        "POST",
        "/v1/retries/policies",
        Some(json!({"name": "p", "max_attempts": 3, "backoff_type": "fixed"})),
    );
    let endpoint = ok(
        &c,
        "POST",
        "/v1/endpoints",
        Some(
            json!({"name": "e", "url": "http://127.0.0.1:9/x", "secret": "s3", "retry_policy_id": policy["id"]}),
        ),
    );
    let schedule = ok(
        &c,
        "POST",
        "/v1/schedules",
        Some(json!({"name": "s", "cron_expr": "0 0 1 1 *", "endpoint_ids": [endpoint["id"]]})),
    );
    for path in [
        format!("/v1/endpoints/{}", endpoint["id"]),
        format!("/v1/retries/policies/{}", policy["id"]),
        format!("/v1/schedules/{}", schedule["id"]),
    ] {
        let read = ok(&c, "GET", &path, None);
        let back = ok(&c, "PATCH", &path, Some(read.clone()));
        assert_eq!(
            back, read,
            "{path}: a record sent back unchanged changes nothing"
        );
    }
    // Read-only fields sent with other values are ignored, not applied.
    let path = format!("/v1/schedules/{}", schedule["id"]);
    let back = ok(
        &c,
        "PATCH",
        &path,
        Some(
            json!({"id": 999, "status": "paused", "next_run_at": null, "endpoint_names": {}, "name": "renamed"}),
        ),
    );
    assert_eq!(back["id"], schedule["id"]);
    assert_eq!(back["status"], "active");
    assert_eq!(back["name"], "renamed");
    assert!(back["next_run_at"].is_string());
    // A create may carry the read-only fields of the record it makes.
    let mut copy = endpoint.clone();
    copy["name"] = json!("copy");
    let made = ok(&c, "POST", "/v1/endpoints", Some(copy));
    assert_ne!(made["id"], endpoint["id"]);
    let event = ok(
        &c,
        "POST",
        "/v1/events",
        Some(json!({"event_name": "a.b", "task_count": 9, "status": "x"})),
    );
    assert_eq!(event["status"], "dispatched");
    // Fields of another record are not read-only here: `event_name` is not a task field.
    err(
        &c,
        "POST",
        "/v1/tasks",
        Some(json!({"endpoint_id": endpoint["id"], "event_name": "a"})),
        400,
        40001,
    );
}

/// A typo in a required field is named with the field it most likely meant, and a mistyped
/// time zone gets the IANA name it most likely means.
#[test]
fn typos_in_required_fields_and_time_zones_get_a_suggestion() {
    let server = TestServer::start();
    let c = server.client();
    let message = |path: &str, body: Value| -> String {
        let reply = err(&c, "POST", path, Some(body), 400, 40001);
        reply.body["message"].as_str().unwrap().to_string()
    };
    assert_eq!(
        message(
            "/endpoints",
            json!({"nmae": "orders", "url": "http://127.0.0.1:9/"})
        ),
        r#"name: is required (the body has "nmae"; did you mean "name"?)"#
    );
    assert_eq!(
        message("/endpoints", json!({"url": "http://127.0.0.1:9/"})),
        "name: is required"
    );
    assert_eq!(
        message("/events", json!({"event_nam": "order.created"})),
        r#"event_name: is required (the body has "event_nam"; did you mean "event_name"?)"#
    );
    for (typed, meant) in [
        ("Berlin", "Europe/Berlin"),
        ("europe/berlin", "Europe/Berlin"),
        ("Europe/Berln", "Europe/Berlin"),
    ] {
        let got = message(
            "/schedules",
            json!({"name": "s", "cron_expr": "0 9 * * *", "timezone": typed}),
        );
        assert_eq!(
            got,
            format!("timezone: unknown time zone '{typed}'; did you mean '{meant}'?")
        );
    }
}
