//! `/v1/endpoints`: every route, its defaults, validation errors, PATCH semantics and paging.

use crate::support::*;
use serde_json::json;

fn create(client: &webhookd::client::Client, name: &str) -> serde_json::Value {
    ok(
        client,
        "POST",
        "/endpoints",
        Some(json!({"name": name, "url": "https://example.com/hook"})),
    )
}

#[test]
fn create_applies_defaults_and_get_reads_it_back() {
    let server = TestServer::start();
    let client = server.client();
    let ep = create(&client, "orders");
    assert_eq!(ep["method"], "POST");
    assert_eq!(ep["timeout_ms"], 30000);
    assert_eq!(ep["status"], "enabled");
    assert_eq!(ep["headers"], json!({}));
    // Signed by default: a new random Standard Webhooks secret, returned in the record.
    let secret = ep["secret"].as_str().unwrap();
    assert!(webhookd::signing::check_whsec(secret).is_ok(), "{secret}");
    assert!(secret.starts_with("whsec_"), "{secret}");
    assert_eq!(ep["retry_policy_id"], serde_json::Value::Null);
    assert!(ep["created_at"].as_str().unwrap().ends_with('Z'));
    let id = ep["id"].as_i64().unwrap();
    assert_eq!(ok(&client, "GET", &format!("/endpoints/{id}"), None), ep);
}

/// Signed by default: `POST /endpoints` without `secret` makes a `whsec_` secret of 32 random
/// bytes (a new one each time); `"secret": null` (or "") makes an unsigned endpoint; a given
/// secret is kept; `clear_secret` makes a signed one unsigned later.
#[test]
fn endpoints_are_signed_by_default_and_unsigned_on_request() {
    use base64::Engine as _;
    let server = TestServer::start();
    let c = server.client();
    let url = "https://example.com/hook";
    let made = |body: serde_json::Value| ok(&c, "POST", "/endpoints", Some(body));
    let (a, b) = (
        made(json!({"name": "a", "url": url})),
        made(json!({"name": "b", "url": url})),
    );
    for ep in [&a, &b] {
        let key = ep["secret"]
            .as_str()
            .and_then(|s| s.strip_prefix("whsec_"))
            .and_then(|k| base64::engine::general_purpose::STANDARD.decode(k).ok())
            .unwrap_or_else(|| panic!("not a whsec_ secret: {ep}"));
        assert_eq!(key.len(), 32);
    }
    assert_ne!(a["secret"], b["secret"]);
    for body in [
        json!({"name": "n", "url": url, "secret": null}),
        json!({"name": "e", "url": url, "secret": ""}),
    ] {
        assert_eq!(made(body)["secret"], serde_json::Value::Null);
    }
    assert_eq!(
        made(json!({"name": "g", "url": url, "secret": "mine"}))["secret"],
        "mine"
    );
    let id = a["id"].as_i64().unwrap();
    let cleared = ok(
        &c,
        "PATCH",
        &format!("/endpoints/{id}"),
        Some(json!({"clear_secret": true})),
    );
    assert_eq!(cleared["secret"], serde_json::Value::Null);
}

#[test]
fn create_accepts_every_field() {
    let server = TestServer::start();
    let client = server.client();
    let policy = ok(
        &client,
        "POST",
        "/retries/policies",
        Some(json!({"name": "p", "max_attempts": 3, "backoff_type": "fixed"})),
    );
    let ep = ok(
        &client,
        "POST",
        "/endpoints",
        Some(json!({
            "name": "full", "url": "http://127.0.0.1:9000/in", "method": "put",
            "headers": {"Authorization": "Bearer x"}, "secret": "whsec_c2VjcmV0",
            "timeout_ms": 5000, "retry_policy_id": policy["id"], "filter_events": "order.*,invoice.paid"
        })),
    );
    assert_eq!(ep["method"], "PUT");
    assert_eq!(ep["headers"]["Authorization"], "Bearer x");
    assert_eq!(ep["secret"], "whsec_c2VjcmV0");
    assert_eq!(ep["timeout_ms"], 5000);
    assert_eq!(ep["retry_policy_id"], policy["id"]);
    assert_eq!(ep["filter_events"], "order.*,invoice.paid");
    // On create, headers is an object (only PATCH also takes a string holding one).
    err(
        &client,
        "POST",
        "/endpoints",
        Some(json!({"name": "s", "url": "https://e.com", "headers": "{\"X-A\":\"1\"}"})),
        400,
        40001,
    );
}

#[test]
fn validation_errors_name_the_field() {
    let server = TestServer::start();
    let client = server.client();
    let other = server.client_for_app("app2");
    let foreign_policy = ok(
        &other,
        "POST",
        "/retries/policies",
        Some(json!({"name": "p", "max_attempts": 3, "backoff_type": "fixed"})),
    );
    let base = json!({"name": "n", "url": "https://example.com"});
    let cases = [
        (json!({"url": "https://e.com"}), "name"),
        (json!({"name": "", "url": "https://e.com"}), "name"),
        (
            json!({"name": "x".repeat(201), "url": "https://e.com"}),
            "name",
        ),
        (json!({"name": 5, "url": "https://e.com"}), "name"),
        (json!({"name": "n"}), "url"),
        (json!({"name": "n", "url": "ftp://e.com/x"}), "url"),
        (json!({"name": "n", "url": "/relative"}), "url"),
        (json!({"name": "n", "url": "not a url"}), "url"),
        (
            json!({"name": "n", "url": "https://e.com", "method": "TRACE"}),
            "method",
        ),
        (
            json!({"name": "n", "url": "https://e.com", "timeout_ms": 0}),
            "timeout_ms",
        ),
        (
            json!({"name": "n", "url": "https://e.com", "timeout_ms": 300001}),
            "timeout_ms",
        ),
        (
            json!({"name": "n", "url": "https://e.com", "timeout_ms": "fast"}),
            "timeout_ms",
        ),
        (
            json!({"name": "n", "url": "https://e.com", "headers": {"X-Service-Id": "x"}}),
            "headers",
        ),
        (
            json!({"name": "n", "url": "https://e.com", "headers": {"webhook-id": "x"}}),
            "headers",
        ),
        (
            json!({"name": "n", "url": "https://e.com", "headers": {"Content-Type": "x"}}),
            "headers",
        ),
        (
            json!({"name": "n", "url": "https://e.com", "headers": {"Host": "x"}}),
            "headers",
        ),
        (
            json!({"name": "n", "url": "https://e.com", "headers": {"X-A": 1}}),
            "headers",
        ),
        (
            json!({"name": "n", "url": "https://e.com", "headers": [1]}),
            "headers",
        ),
        (
            json!({"name": "n", "url": "https://e.com", "retry_policy_id": 999}),
            "retry_policy_id",
        ),
        (
            json!({"name": "n", "url": "https://e.com", "retry_policy_id": foreign_policy["id"]}),
            "retry_policy_id",
        ),
        (
            json!({"name": "n", "url": "https://e.com", "filter_events": "order created"}),
            "filter_events",
        ),
    ];
    expect_field_errors(&client, "POST", "/endpoints", cases);
    ok(&client, "POST", "/endpoints", Some(base));
    assert_eq!(ok(&client, "GET", "/endpoints", None)["total"], 1);
}

#[test]
fn bad_bodies_get_40002_and_oversized_ones_413() {
    let server = TestServer::start();
    let client = server.client();
    for body in [&b"{not json"[..], b"[1,2]", b"\"text\"", b"null"] {
        let reply = client.send_raw("POST", "/endpoints", body).unwrap();
        assert_eq!((reply.status, reply.code()), (400, 40002), "{:?}", body);
    }
    let huge = format!(
        r#"{{"name":"n","url":"https://e.com","secret":"{}"}}"#,
        "x".repeat(2 * 1024 * 1024)
    );
    let reply = client
        .send_raw("POST", "/endpoints", huge.as_bytes())
        .unwrap();
    assert_eq!((reply.status, reply.code()), (413, 41301));
    // the server survives all of it
    create(&client, "after");
    let (status, _) = raw(&server.url, "GET", "/healthz", &[], b"");
    assert_eq!(status, 200);
}

#[test]
fn patch_changes_only_what_it_sends_and_null_clears() {
    let server = TestServer::start();
    let client = server.client();
    let policy = ok(
        &client,
        "POST",
        "/retries/policies",
        Some(json!({"name": "p", "max_attempts": 2, "backoff_type": "linear"})),
    );
    let ep = ok(
        &client,
        "POST",
        "/endpoints",
        Some(
            json!({"name": "a", "url": "https://e.com", "secret": "s3cret",
                    "retry_policy_id": policy["id"], "filter_events": "a.*"}),
        ),
    );
    let path = format!("/endpoints/{}", ep["id"]);
    let same = ok(&client, "PATCH", &path, Some(json!({})));
    assert_eq!(same, ep);
    let patched = ok(
        &client,
        "PATCH",
        &path,
        Some(
            json!({"name": "b", "method": "DELETE", "headers": "{\"X-K\":\"v\"}", "timeout_ms": 10}),
        ),
    );
    assert_eq!(patched["name"], "b");
    assert_eq!(patched["method"], "DELETE");
    assert_eq!(patched["headers"], json!({"X-K": "v"}));
    assert_eq!(patched["url"], "https://e.com");
    assert_eq!(patched["secret"], "s3cret");
    assert_eq!(patched["retry_policy_id"], policy["id"]);
    let cleared = ok(
        &client,
        "PATCH",
        &path,
        Some(json!({"retry_policy_id": null, "filter_events": null, "clear_secret": true})),
    );
    assert_eq!(cleared["retry_policy_id"], serde_json::Value::Null);
    assert_eq!(cleared["filter_events"], serde_json::Value::Null);
    assert_eq!(cleared["secret"], serde_json::Value::Null);
    assert_eq!(cleared["name"], "b");
    err(
        &client,
        "PATCH",
        &path,
        Some(json!({"url": "gopher://x"})),
        400,
        40001,
    );
    err(
        &client,
        "PATCH",
        &path,
        Some(json!({"timeout_ms": -1})),
        400,
        40001,
    );
    err(
        &client,
        "PATCH",
        "/endpoints/999",
        Some(json!({})),
        404,
        40401,
    );
    assert_eq!(ok(&client, "GET", &path, None), cleared);
}

#[test]
fn enable_disable_are_idempotent_and_delete_removes() {
    let server = TestServer::start();
    let client = server.client();
    let ep = create(&client, "a");
    let id = ep["id"].as_i64().unwrap();
    for _ in 0..2 {
        let d = ok(&client, "POST", &format!("/endpoints/{id}/disable"), None);
        assert_eq!(d["status"], "disabled");
    }
    assert_eq!(
        ok(&client, "GET", "/endpoints?status=disabled", None)["total"],
        1
    );
    assert_eq!(
        ok(&client, "GET", "/endpoints?status=enabled", None)["total"],
        0
    );
    err(&client, "GET", "/endpoints?status=gone", None, 400, 40001);
    for _ in 0..2 {
        let e = ok(&client, "POST", &format!("/endpoints/{id}/enable"), None);
        assert_eq!(e["status"], "enabled");
    }
    let deleted = ok(&client, "DELETE", &format!("/endpoints/{id}"), None);
    assert_eq!(deleted, json!({"id": id, "deleted": true}));
    err(
        &client,
        "GET",
        &format!("/endpoints/{id}"),
        None,
        404,
        40401,
    );
    err(
        &client,
        "DELETE",
        &format!("/endpoints/{id}"),
        None,
        404,
        40401,
    );
    err(
        &client,
        "POST",
        &format!("/endpoints/{id}/enable"),
        None,
        404,
        40401,
    );
    err(
        &client,
        "PUT",
        &format!("/endpoints/{id}"),
        None,
        405,
        40501,
    );
}

#[test]
fn lists_page_newest_first_and_clamp_page_size() {
    let server = TestServer::start();
    let client = server.client();
    for i in 0..25 {
        create(&client, &format!("e{i}"));
    }
    let first = ok(&client, "GET", "/endpoints", None);
    assert_eq!(first["total"], 25);
    assert_eq!(first["page"], 1);
    assert_eq!(first["page_size"], 20);
    let items = first["items"].as_array().unwrap();
    assert_eq!(items.len(), 20);
    assert_eq!(items[0]["name"], "e24");
    let second = ok(&client, "GET", "/endpoints?page=2&page_size=20", None);
    assert_eq!(second["items"].as_array().unwrap().len(), 5);
    assert_eq!(second["items"][4]["name"], "e0");
    let big = ok(&client, "GET", "/endpoints?page_size=1000", None);
    assert_eq!(big["page_size"], 100);
    assert_eq!(big["items"].as_array().unwrap().len(), 25);
    let small = ok(&client, "GET", "/endpoints?page_size=0", None);
    assert_eq!(small["page_size"], 1);
    err(&client, "GET", "/endpoints?page=abc", None, 400, 40001);
    err(&client, "GET", "/endpoints?page=0", None, 400, 40001);
    let beyond = ok(&client, "GET", "/endpoints?page=9", None);
    assert_eq!(beyond["items"], json!([]));
    assert_eq!(beyond["total"], 25);
}

/// PostgreSQL text cannot hold U+0000, and a SQLite database must stay movable to PostgreSQL:
/// refused in every text field and query value, on both stores, and nothing is stored.
#[test]
fn the_nul_character_is_refused_in_text_and_query_values() {
    let server = TestServer::start();
    let client = server.client();
    let reply = err(
        &client,
        "POST",
        "/endpoints",
        Some(json!({"name": "a\u{0}b", "url": "https://example.com/hook"})),
        400,
        40001,
    );
    assert!(reply.body["message"].as_str().unwrap().starts_with("name:"));
    err(
        &client,
        "POST",
        "/events",
        Some(json!({"event_name": "a.b", "event_key": "k\u{0}", "payload": {}})),
        400,
        40001,
    );
    err(&client, "GET", "/events?event_name=a%00b", None, 400, 40001);
    let listed = ok(&client, "GET", "/endpoints", None);
    assert_eq!(listed["total"], 0);
    // A NUL inside a payload is JSON text (escaped) and is kept.
    let event = ok(
        &client,
        "POST",
        "/events",
        Some(json!({"event_name": "a.b", "payload": {"note": "x\u{0}y"}})),
    );
    assert_eq!(event["payload"]["note"], "x\u{0}y");
}
