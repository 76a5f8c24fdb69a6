//! The OpenAPI document (`openapi.json`, docs/design.md §14): it describes exactly the routes the
//! server has, it is well-formed 3.1 with every `$ref` resolving, its signing example is right,
//! the server serves it unsigned, real replies match its schemas, and (when schemathesis is
//! installed) a property-based fuzzer finds nothing (`.ci/openapi.sh`).

use crate::support::{Receiver, TestServer, err, get_text, ok, raw, require_component};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;
use webhookd::api::{OPENAPI_DOCUMENT, OPENAPI_PATH, UNSIGNED_ROUTES, route_table};

const HTTP_METHODS: &[&str] = &[
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

fn document() -> Value {
    serde_json::from_str(OPENAPI_DOCUMENT).expect("openapi.json is valid JSON")
}

/// Follows a local `$ref` (`#/components/schemas/Endpoint`).
fn resolve<'a>(doc: &'a Value, reference: &str) -> Option<&'a Value> {
    let pointer = reference.strip_prefix('#')?;
    doc.pointer(pointer)
}

#[test]
fn document_describes_exactly_the_routes_of_the_router() {
    let doc = document();
    let described: BTreeSet<(String, String)> = doc["paths"]
        .as_object()
        .expect("paths")
        .iter()
        .flat_map(|(path, item)| {
            item.as_object()
                .expect("path item")
                .keys()
                .filter(|k| HTTP_METHODS.contains(&k.as_str()))
                .map(move |m| (m.to_ascii_uppercase(), path.clone()))
        })
        .collect();
    let served: BTreeSet<(String, String)> = route_table()
        .map(|(m, p)| (m.to_string(), p))
        .chain(
            UNSIGNED_ROUTES
                .iter()
                .map(|(m, p)| (m.to_string(), p.to_string())),
        )
        .collect();
    let undocumented: Vec<_> = served.difference(&described).collect();
    let unserved: Vec<_> = described.difference(&served).collect();
    assert!(
        undocumented.is_empty() && unserved.is_empty(),
        "routes the document does not describe: {undocumented:?}; described routes the server \
         does not have: {unserved:?}"
    );
    // Exactly the unsigned routes opt out of the signature.
    for (method, path) in &described {
        let op = &doc["paths"][path][method.to_ascii_lowercase()];
        let unsigned = UNSIGNED_ROUTES
            .iter()
            .any(|(m, p)| m == method && p == path);
        assert_eq!(
            op.get("security") == Some(&json!([])),
            unsigned,
            "{method} {path}: `security: []` must mark exactly the unsigned routes"
        );
        if !unsigned {
            for (status, code) in [("401", 40101), ("400", 40001), ("500", 50001)] {
                assert!(
                    error_codes(&doc, op, status).contains(&code),
                    "{method} {path}: no {status} / {code} reply described"
                );
            }
        }
        if path.contains("{id}") && !unsigned {
            assert!(
                error_codes(&doc, op, "404").contains(&40401),
                "{method} {path} has an id but no 404 described"
            );
        }
    }
}

/// The envelope codes a described error reply allows.
fn error_codes(doc: &Value, op: &Value, status: &str) -> Vec<i64> {
    let mut reply = &op["responses"][status];
    if let Some(r) = reply["$ref"].as_str() {
        reply = resolve(doc, r).expect("response ref");
    }
    reply["content"]["application/json"]["schema"]["allOf"][1]["properties"]["code"]["enum"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_i64).collect())
        .unwrap_or_default()
}

#[test]
fn document_is_openapi_3_1_and_every_ref_resolves() {
    let doc = document();
    assert_eq!(doc["openapi"], "3.1.0");
    assert_eq!(doc["info"]["version"], env!("CARGO_PKG_VERSION"));
    let mut refs = Vec::new();
    collect_refs(&doc, &mut refs);
    assert!(refs.len() > 100, "only {} $refs found", refs.len());
    for r in &refs {
        assert!(resolve(&doc, r).is_some(), "$ref {r} does not resolve");
    }
    // Every operation: an id, a 200 with the envelope, and only schemas that exist.
    let mut ids = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let id = op["operationId"].as_str().expect("operationId");
            assert!(ids.insert(id.to_string()), "operationId {id} twice");
            assert!(
                op["responses"]["200"].is_object(),
                "{method} {path}: no 200 reply"
            );
        }
    }
    // The schemas the validator below knows: a typo'd keyword fails here, not silently.
    for (name, schema) in doc["components"]["schemas"].as_object().unwrap() {
        check_keywords(name, schema);
    }
    let mut inline = Vec::new();
    collect_inline_schemas(&doc, "", &mut inline);
    assert!(inline.len() > 30, "only {} inline schemas", inline.len());
    for (at, schema) in inline {
        check_keywords(&at, schema);
    }
}

/// Every `schema` of a parameter, header or media type, wherever it is.
fn collect_inline_schemas<'a>(value: &'a Value, at: &str, out: &mut Vec<(String, &'a Value)>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                let here = format!("{at}/{k}");
                if k == "schema" {
                    out.push((here, v));
                } else if k != "schemas" {
                    collect_inline_schemas(v, &here, out);
                }
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                collect_inline_schemas(v, &format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

fn collect_refs(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                if k == "$ref" {
                    out.push(v.as_str().expect("$ref is a string").to_string());
                } else {
                    collect_refs(v, out);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| collect_refs(v, out)),
        _ => {}
    }
}

#[test]
fn signing_example_is_computed_not_invented() {
    let doc = document();
    let example = &doc["x-signing-example"];
    let secret = example["secret"].as_str().unwrap();
    let timestamp = example["timestamp"].as_str().unwrap();
    let description = doc["components"]["securitySchemes"]["signature"]["description"]
        .as_str()
        .unwrap();
    let requests = example["requests"].as_array().unwrap();
    assert_eq!(requests.len(), 2, "one example with a body, one without");
    for request in requests {
        let body = request["body"].as_str().unwrap();
        let payload = webhookd::auth::signed_payload(
            request["method"].as_str().unwrap(),
            request["path_and_query"].as_str().unwrap(),
            body.as_bytes(),
        );
        let expected = webhookd::signing::hmac_hex(secret.as_bytes(), timestamp, &payload);
        assert_eq!(request["signature"], expected.as_str(), "{request}");
        assert!(
            description.contains(&expected),
            "the security scheme's description lacks {expected}"
        );
    }
    assert!(description.contains(example["key_id"].as_str().unwrap()));
    assert!(description.contains(secret));
}

#[test]
fn the_signing_example_is_accepted_by_a_server_holding_that_key() {
    let server = TestServer::start();
    let doc = document();
    let example = &doc["x-signing-example"];
    let (key_id, secret) = (
        example["key_id"].as_str().unwrap(),
        example["secret"].as_str().unwrap(),
    );
    crate::support::Db::open(&server.db).execute(
        "INSERT INTO api_keys (key_id, secret, app_id, name, created_at) VALUES (?1, ?2, 'doc', 'doc', 0)",
        &[&key_id, &secret],
    );
    // The example's timestamp is long past, so it must be signed anew with a fresh one; the
    // document's recipe (the same payload rule) must then be accepted.
    let request = &example["requests"][0];
    let body = request["body"].as_str().unwrap();
    let now = chrono::Utc::now().timestamp().to_string();
    let payload = webhookd::auth::signed_payload("POST", "/v1/endpoints", body.as_bytes());
    let signature = webhookd::signing::hmac_hex(secret.as_bytes(), &now, &payload);
    let (status, reply) = raw(
        &server.url,
        "POST",
        "/v1/endpoints",
        &[
            ("X-Key-ID", key_id.to_string()),
            ("X-Timestamp", now),
            ("X-Signature", signature),
        ],
        body.as_bytes(),
    );
    assert_eq!((status, reply["code"].as_i64()), (200, Some(0)), "{reply}");
    // The example's own (stale) timestamp: 40104, as the document says.
    let (status, reply) = raw(
        &server.url,
        "POST",
        "/v1/endpoints",
        &[
            ("X-Key-ID", key_id.to_string()),
            (
                "X-Timestamp",
                example["timestamp"].as_str().unwrap().to_string(),
            ),
            (
                "X-Signature",
                request["signature"].as_str().unwrap().to_string(),
            ),
        ],
        body.as_bytes(),
    );
    assert_eq!((status, reply["code"].as_i64()), (401, Some(40104)));
}

#[test]
fn document_is_served_unsigned_with_the_same_bytes() {
    let server = TestServer::start();
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut reply = agent
        .get(format!("{}{OPENAPI_PATH}", server.url))
        .call()
        .unwrap();
    assert_eq!(reply.status().as_u16(), 200);
    assert_eq!(
        reply
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok()),
        Some("application/json")
    );
    let served = reply.body_mut().read_to_string().unwrap();
    let on_disk =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("openapi.json"))
            .unwrap();
    assert!(
        served == on_disk,
        "served document differs from openapi.json"
    );
    // Another method on it: 405, in the envelope, without a signature.
    let (status, body) = raw(&server.url, "POST", OPENAPI_PATH, &[], b"{}");
    assert_eq!((status, body["code"].as_i64()), (405, Some(40501)));
}

/// Validates a real reply of `method path` against the document's schema for its status.
fn check_reply(doc: &Value, method: &str, path: &str, status: u16, body: &Value) {
    let op = &doc["paths"][path][method.to_ascii_lowercase()];
    assert!(op.is_object(), "{method} {path} is not in the document");
    let mut reply = &op["responses"][status.to_string()];
    if let Some(r) = reply["$ref"].as_str() {
        reply = resolve(doc, r).unwrap();
    }
    let schema = &reply["content"]["application/json"]["schema"];
    assert!(
        schema.is_object(),
        "{method} {path}: no {status} reply described"
    );
    let mut errors = Vec::new();
    validate(doc, schema, body, "$", &mut errors);
    assert!(
        errors.is_empty(),
        "{method} {path} → {status} does not match the document:\n  {}\nbody: {body}",
        errors.join("\n  ")
    );
}

/// Sends a signed request and checks its reply against the document; returns `data`.
fn call(
    doc: &Value,
    server: &TestServer,
    method: &str,
    template: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let reply = server
        .client()
        .send(method, path, body.as_ref())
        .expect("request sent");
    check_reply(doc, method, template, reply.status, &reply.body);
    (reply.status, reply.data().clone())
}

#[test]
fn real_replies_match_the_document() {
    let doc = document();
    let server = TestServer::start();
    let receiver = Receiver::start();
    let c = |m: &str, t: &str, p: &str, b: Option<Value>| call(&doc, &server, m, t, p, b);

    let (_, policy) = c(
        "POST",
        "/v1/retries/policies",
        "/retries/policies",
        Some(
            json!({"name": "p", "max_attempts": 2, "backoff_type": "fixed", "initial_delay_sec": 0,
                   "max_age_sec": 3600, "jitter": "full"}),
        ),
    );
    let (_, ep) = c(
        "POST",
        "/v1/endpoints",
        "/endpoints",
        Some(json!({"name": "e", "url": receiver.url, "secret": "s3cret",
                    "headers": {"X-Team": "a"}, "retry_policy_id": policy["id"],
                    "filter_events": "order.*", "filter_payload": {"tier": {"$in": ["pro"]}}})),
    );
    let ep_id = ep["id"].as_i64().unwrap();
    c(
        "POST",
        "/v1/endpoints/{id}/filter-test",
        &format!("/endpoints/{ep_id}/filter-test"),
        Some(json!({"event_name": "order.created", "payload": {"tier": "free"}})),
    );
    c(
        "PATCH",
        "/v1/endpoints/{id}",
        &format!("/endpoints/{ep_id}"),
        Some(json!({"timeout_ms": 5000, "filter_events": null, "filter_payload": null})),
    );
    c("GET", "/v1/endpoints", "/endpoints?page_size=500", None);
    c(
        "POST",
        "/v1/endpoints/{id}/disable",
        &format!("/endpoints/{ep_id}/disable"),
        None,
    );
    c(
        "POST",
        "/v1/endpoints/{id}/enable",
        &format!("/endpoints/{ep_id}/enable"),
        None,
    );
    let (_, schedule) = c(
        "POST",
        "/v1/schedules",
        "/schedules",
        Some(
            json!({"name": "s", "cron_expr": "*/5 * * * *", "timezone": "Europe/Berlin",
                    "endpoint_ids": [ep_id], "payload": {"k": 1}}),
        ),
    );
    let sid = schedule["id"].as_i64().unwrap();
    c(
        "POST",
        "/v1/schedules/{id}/pause",
        &format!("/schedules/{sid}/pause"),
        None,
    );
    let (_, fired) = c(
        "POST",
        "/v1/schedules/{id}/trigger",
        &format!("/schedules/{sid}/trigger"),
        None,
    );
    assert_eq!(fired["task_ids"].as_array().unwrap().len(), 1);
    let now_secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let yesterday_hour = (now_secs - 86_400) / 3600 * 3600;
    let (_, backfilled) = c(
        "POST",
        "/v1/schedules/{id}/backfill",
        &format!("/schedules/{sid}/backfill"),
        // An hour of yesterday (a backfill reaches back --retention-days at most), in Unix
        // seconds: 3 instants of */5.
        Some(json!({"from": yesterday_hour, "to": yesterday_hour + 600})),
    );
    assert_eq!(backfilled["fired"], 3);
    c(
        "PATCH",
        "/v1/schedules/{id}",
        &format!("/schedules/{sid}"),
        Some(json!({"starts_at": "2026-01-01T00:00:00Z", "ends_at": 1893456000, "jitter_sec": 5})),
    );
    c("GET", "/v1/schedules", "/schedules", None);
    c(
        "POST",
        "/v1/cron/preview",
        "/cron/preview",
        Some(
            json!({"cron_expr": "30 2 * * *", "timezone": "Europe/Berlin", "count": 3, "from": 0}),
        ),
    );
    let (_, event) = c(
        "POST",
        "/v1/events",
        "/events",
        Some(json!({"event_name": "order.created", "event_key": "k1", "payload": {"n": 1}})),
    );
    assert_eq!(event["task_count"], 1);
    c(
        "GET",
        "/v1/events/{id}",
        &format!("/events/{}", event["id"]),
        None,
    );
    c(
        "GET",
        "/v1/events",
        "/events?event_name=order.created",
        None,
    );
    let (_, task) = c(
        "POST",
        "/v1/tasks",
        "/tasks",
        Some(json!({"endpoint_id": ep_id, "run_at": "2030-01-01T00:00:00Z"})),
    );
    let tid = task["id"].as_i64().unwrap();
    c(
        "POST",
        "/v1/tasks/{id}/cancel",
        &format!("/tasks/{tid}/cancel"),
        None,
    );
    c(
        "POST",
        "/v1/tasks/{id}/retry",
        &format!("/tasks/{tid}/retry"),
        None,
    );
    c(
        "POST",
        "/v1/tasks/{id}/resend",
        &format!("/tasks/{tid}/resend"),
        None,
    );
    // A delivered task has attempts to list: the event's task, to the receiver.
    receiver.wait_for(1, Duration::from_secs(10));
    let delivered = crate::support::wait_for(Duration::from_secs(10), || {
        let page = ok(
            &server.client(),
            "GET",
            &format!("/tasks?event_id={}", event["id"]),
            None,
        );
        let task = page["items"][0].clone();
        (task["status"] == "success").then_some(task)
    })
    .expect("the event's task is delivered");
    let (_, attempts) = c(
        "GET",
        "/v1/tasks/{id}/attempts",
        &format!("/tasks/{}/attempts", delivered["id"]),
        None,
    );
    assert_eq!(attempts["items"][0]["status_code"], 200);
    c("GET", "/v1/tasks", "/tasks?status=success", None);

    // Error replies, each as described.
    c("GET", "/v1/endpoints/{id}", "/endpoints/999999", None);
    c("GET", "/v1/endpoints/{id}", "/endpoints/abc", None);
    c("GET", "/v1/tasks", "/tasks?page=0", None);
    c(
        "POST",
        "/v1/events",
        "/events",
        Some(json!({"event_name": "a b"})),
    );
    c(
        "POST",
        "/v1/schedules/{id}/resume",
        &format!("/schedules/{sid}/resume"),
        None,
    );
    c(
        "DELETE",
        "/v1/schedules/{id}",
        &format!("/schedules/{sid}"),
        None,
    );
    let (status, _) = c(
        "POST",
        "/v1/schedules/{id}/resume",
        &format!("/schedules/{sid}/resume"),
        None,
    );
    assert_eq!(status, 409);
    let (status, _) = c(
        "DELETE",
        "/v1/retries/policies/{id}",
        &format!("/retries/policies/{}", policy["id"]),
        None,
    );
    assert_eq!(status, 409);
    c(
        "DELETE",
        "/v1/endpoints/{id}",
        &format!("/endpoints/{ep_id}"),
        None,
    );
    // Keys: created (with its secret), listed, read, revoked; a request outside a scope (403).
    let (_, key) = c(
        "POST",
        "/v1/keys",
        "/keys",
        Some(json!({"name": "reader", "scope": "read", "expires_at": 4102444800i64})),
    );
    let key_id = key["id"].as_str().unwrap();
    c("GET", "/v1/keys", "/keys", None);
    c("GET", "/v1/keys/{key_id}", &format!("/keys/{key_id}"), None);
    let reader =
        webhookd::client::Client::new(&server.url, key_id, key["secret"].as_str().unwrap());
    let refused = reader
        .send("POST", "/v1/events", Some(&json!({"event_name": "x"})))
        .expect("sent");
    assert_eq!(refused.status, 403);
    check_reply(&doc, "POST", "/v1/events", refused.status, &refused.body);
    c(
        "DELETE",
        "/v1/keys/{key_id}",
        &format!("/keys/{key_id}"),
        None,
    );
    let (status, _) = c(
        "DELETE",
        "/v1/keys/{key_id}",
        &format!("/keys/{}", server.key_id),
        None,
    );
    assert_eq!(status, 409);
    let bad_json = server
        .client()
        .send_raw("POST", "/v1/tasks", b"{not json")
        .expect("sent");
    assert_eq!(bad_json.code(), 40002);
    check_reply(&doc, "POST", "/v1/tasks", bad_json.status, &bad_json.body);
    let (status, body) = raw(&server.url, "GET", "/v1/endpoints", &[], b"");
    assert_eq!(status, 401);
    check_reply(&doc, "GET", "/v1/endpoints", status, &body);

    // The unsigned routes.
    let (status, text) = get_text(&format!("{}/healthz", server.url));
    check_reply(
        &doc,
        "GET",
        "/healthz",
        status,
        &serde_json::from_str(&text).unwrap(),
    );
    let _ = err(
        &server.client(),
        "PUT",
        "/v1/endpoints",
        Some(json!({})),
        405,
        40501,
    );
}

/// Schema keywords: the ones [`validate`] checks, and the annotations it may skip.
const CHECKED: &[&str] = &[
    "$ref",
    "allOf",
    "anyOf",
    "oneOf",
    "type",
    "enum",
    "const",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "minItems",
    "maxItems",
    "uniqueItems",
    "maxProperties",
    "propertyNames",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "pattern",
    "format",
];
const ANNOTATIONS: &[&str] = &[
    "description",
    "default",
    "readOnly",
    "writeOnly",
    "title",
    "example",
    "examples",
    "deprecated",
    "$comment",
    // Annotations in JSON Schema 2020-12: a string holding JSON (PATCH `payload`, `headers`).
    "contentMediaType",
    "contentSchema",
];

fn check_keywords(at: &str, schema: &Value) {
    let Some(map) = schema.as_object() else {
        return;
    };
    for (k, v) in map {
        assert!(
            CHECKED.contains(&k.as_str()) || ANNOTATIONS.contains(&k.as_str()),
            "{at}: schema keyword {k} is not one the test validator checks"
        );
        match k.as_str() {
            "properties" => {
                for (name, sub) in v.as_object().unwrap() {
                    check_keywords(&format!("{at}.{name}"), sub);
                }
            }
            "allOf" | "anyOf" | "oneOf" => {
                for sub in v.as_array().unwrap() {
                    check_keywords(at, sub);
                }
            }
            "items" | "additionalProperties" | "propertyNames" | "contentSchema" => {
                check_keywords(at, v)
            }
            _ => {}
        }
    }
}

fn type_matches(name: &str, value: &Value) -> bool {
    match name {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        "null" => value.is_null(),
        other => panic!("unknown type {other}"),
    }
}

/// A JSON Schema (2020-12) validator for the subset of keywords the document uses
/// ([`CHECKED`]); `format` checks `date-time` as the server writes it (UTC, `Z`, seconds),
/// `uri` as an absolute URL, and `int64` as a 64-bit integer.
fn validate(doc: &Value, schema: &Value, value: &Value, at: &str, errors: &mut Vec<String>) {
    let Some(s) = schema.as_object() else {
        if schema == &Value::Bool(false) {
            errors.push(format!("{at}: no value is allowed here"));
        }
        return;
    };
    let mut fail = |why: String| errors.push(format!("{at}: {why}"));
    if let Some(r) = s.get("$ref").and_then(Value::as_str) {
        let target = resolve(doc, r).unwrap_or_else(|| panic!("$ref {r} does not resolve"));
        validate(doc, target, value, at, errors);
        return;
    }
    match s.get("type") {
        Some(Value::String(t)) if !type_matches(t, value) => {
            return fail(format!("{value} is not of type {t}"));
        }
        Some(Value::Array(ts)) if !ts.iter().any(|t| type_matches(t.as_str().unwrap(), value)) => {
            return fail(format!("{value} is not of any type {ts:?}"));
        }
        _ => {}
    }
    if let Some(allowed) = s.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        fail(format!("{value} is not one of {allowed:?}"));
    }
    if let Some(c) = s.get("const")
        && c != value
    {
        fail(format!("{value} is not {c}"));
    }
    if let Some(n) = value.as_f64() {
        if let Some(min) = s.get("minimum").and_then(Value::as_f64)
            && n < min
        {
            fail(format!("{n} is below the minimum {min}"));
        }
        if let Some(max) = s.get("maximum").and_then(Value::as_f64)
            && n > max
        {
            fail(format!("{n} is above the maximum {max}"));
        }
        if let Some(min) = s.get("exclusiveMinimum").and_then(Value::as_f64)
            && n <= min
        {
            fail(format!("{n} is not above {min}"));
        }
        if let Some(max) = s.get("exclusiveMaximum").and_then(Value::as_f64)
            && n >= max
        {
            fail(format!("{n} is not below {max}"));
        }
    }
    if let Some(text) = value.as_str() {
        let len = text.chars().count() as u64;
        if let Some(min) = s.get("minLength").and_then(Value::as_u64)
            && len < min
        {
            fail(format!("{text:?} is shorter than {min}"));
        }
        if let Some(max) = s.get("maxLength").and_then(Value::as_u64)
            && len > max
        {
            fail(format!("{text:?} is longer than {max}"));
        }
        if let Some(pattern) = s.get("pattern").and_then(Value::as_str)
            && !regex::Regex::new(pattern).unwrap().is_match(text)
        {
            fail(format!("{text:?} does not match {pattern}"));
        }
        match s.get("format").and_then(Value::as_str) {
            Some("date-time") => {
                let utc_seconds = text.len() == 20 && text.ends_with('Z');
                if !utc_seconds || chrono::DateTime::parse_from_rfc3339(text).is_err() {
                    fail(format!(
                        "{text:?} is not an RFC 3339 UTC time with seconds precision"
                    ));
                }
            }
            Some("uri") if !text.contains("://") || text.parse::<ureq::http::Uri>().is_err() => {
                fail(format!("{text:?} is not an absolute URI"));
            }
            _ => {}
        }
    }
    if s.get("format") == Some(&json!("int64")) && value.is_number() && !value.is_i64() {
        fail(format!("{value} is not a 64-bit integer"));
    }
    if let Some(items) = value.as_array() {
        if let Some(max) = s.get("maxItems").and_then(Value::as_u64)
            && items.len() as u64 > max
        {
            fail(format!("{} items, more than {max}", items.len()));
        }
        if let Some(min) = s.get("minItems").and_then(Value::as_u64)
            && (items.len() as u64) < min
        {
            fail(format!("{} items, fewer than {min}", items.len()));
        }
        if s.get("uniqueItems") == Some(&Value::Bool(true))
            && (1..items.len()).any(|i| items[..i].contains(&items[i]))
        {
            fail("items are not unique".to_string());
        }
        if let Some(item_schema) = s.get("items") {
            for (i, item) in items.iter().enumerate() {
                validate(doc, item_schema, item, &format!("{at}[{i}]"), errors);
            }
        }
    }
    if let Some(map) = value.as_object() {
        let props = s.get("properties").and_then(Value::as_object);
        for name in s
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let name = name.as_str().unwrap();
            if !map.contains_key(name) {
                errors.push(format!("{at}: required field {name} is missing"));
            }
        }
        if let Some(max) = s.get("maxProperties").and_then(Value::as_u64)
            && map.len() as u64 > max
        {
            errors.push(format!("{at}: more than {max} fields"));
        }
        if let Some(names) = s.get("propertyNames") {
            for name in map.keys() {
                validate(
                    doc,
                    names,
                    &json!(name),
                    &format!("{at} (name {name:?})"),
                    errors,
                );
            }
        }
        for (name, field) in map {
            let path = format!("{at}.{name}");
            match props.and_then(|p| p.get(name)) {
                Some(sub) => validate(doc, sub, field, &path, errors),
                None => match s.get("additionalProperties") {
                    Some(Value::Bool(false)) => {
                        errors.push(format!("{path}: field not in the schema"));
                    }
                    Some(sub) => validate(doc, sub, field, &path, errors),
                    None => {}
                },
            }
        }
    }
    if let Some(all) = s.get("allOf").and_then(Value::as_array) {
        for sub in all {
            validate(doc, sub, value, at, errors);
        }
    }
    if let Some(any) = s.get("anyOf").and_then(Value::as_array) {
        let matched = any.iter().any(|sub| {
            let mut sub_errors = Vec::new();
            validate(doc, sub, value, at, &mut sub_errors);
            sub_errors.is_empty()
        });
        if !matched {
            errors.push(format!("{at}: {value} matches none of anyOf"));
        }
    }
    if let Some(one) = s.get("oneOf").and_then(Value::as_array) {
        let matched = one
            .iter()
            .filter(|sub| {
                let mut sub_errors = Vec::new();
                validate(doc, sub, value, at, &mut sub_errors);
                sub_errors.is_empty()
            })
            .count();
        if matched != 1 {
            errors.push(format!(
                "{at}: {value} matches {matched} of oneOf, not exactly one"
            ));
        }
    }
}

#[test]
fn the_validator_catches_what_it_checks() {
    let doc = document();
    let schema = json!({"$ref": "#/components/schemas/EndpointReply"});
    let good = json!({"code": 0, "message": "success", "request_id": "r", "data": {
        "id": 1, "app_id": "a", "name": "n", "url": "https://x.example/h", "method": "POST",
        "headers": {}, "secret": null, "timeout_ms": 30000, "retry_policy_id": null,
        "filter_events": null, "filter_payload": null, "status": "enabled", "rate_limit_per_sec": null,
        "max_in_flight": null, "previous_secret_expires_at": null,
        "created_at": "2026-11-21T21:00:00Z", "updated_at": "2026-11-21T21:00:00Z",
        "disabled_reason": null, "last_success_at": null, "last_failure_at": null,
        "consecutive_failures": 0}});
    let mut errors = Vec::new();
    validate(&doc, &schema, &good, "$", &mut errors);
    assert!(errors.is_empty(), "{errors:?}");
    let breakages = [
        ("/data/status", json!("gone-ish")),
        ("/data/timeout_ms", json!(0)),
        ("/data/created_at", json!("2026-11-21T21:00:00.123+01:00")),
        ("/data/secret", json!(5)),
        ("/data/max_in_flight", json!(0)),
        ("/data/rate_limit_per_sec", json!(0.001)),
        ("/data/url", json!("not a url")),
        ("/data/headers", json!({"X": 1})),
        ("/data/headers", json!({"X Y": "1"})),
        ("/data/headers", json!({"X": "line\nbreak"})),
        ("/data/headers", json!({"X": "del\u{7f}"})),
        ("/code", json!(1)),
        ("/data/extra", json!(1)),
    ];
    for (pointer, value) in breakages {
        let mut bad = good.clone();
        let (parent, field) = pointer.rsplit_once('/').unwrap();
        bad.pointer_mut(if parent.is_empty() { "" } else { parent })
            .unwrap()
            .as_object_mut()
            .unwrap()
            .insert(field.to_string(), value.clone());
        let mut errors = Vec::new();
        validate(&doc, &schema, &bad, "$", &mut errors);
        assert!(!errors.is_empty(), "{pointer} = {value} passed");
    }
    let mut missing = good.clone();
    missing["data"].as_object_mut().unwrap().remove("name");
    let mut errors = Vec::new();
    validate(&doc, &schema, &missing, "$", &mut errors);
    assert!(!errors.is_empty());
}

/// Runs `.ci/openapi.sh` (10 examples per operation unless `OPENAPI_MAX_EXAMPLES` says
/// otherwise): schemathesis fuzzes a live server from the document, signing each
/// request with its hook. Needs schemathesis (in `.venv-ci/`, where the script installs it, or
/// on PATH); under CI=true a missing one fails instead of skipping.
#[test]
fn schemathesis_finds_nothing() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let venv = root.join(".venv-ci/bin/schemathesis");
    let found = venv.exists() || crate::support::program_runs("schemathesis", &["--version"]);
    if !require_component(
        "schemathesis",
        found,
        "python3 -m venv .venv-ci && .venv-ci/bin/pip install schemathesis (or run .ci/openapi.sh once)",
    ) {
        return;
    }
    let out = std::process::Command::new("bash")
        .arg(root.join(".ci/openapi.sh"))
        .env("WEBHOOKD_BIN", env!("CARGO_BIN_EXE_webhookd"))
        .env("OPENAPI_NO_INSTALL", "1")
        // `.ci/run` runs the script with its full budget; here a smaller one keeps `cargo test`
        // quick while still failing on anything the fuzzer finds in that many cases.
        .env(
            "OPENAPI_MAX_EXAMPLES",
            std::env::var("OPENAPI_MAX_EXAMPLES").unwrap_or_else(|_| "10".into()),
        )
        .output()
        .expect("run .ci/openapi.sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        ".ci/openapi.sh failed ({})\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}",
        out.status
    );
    eprintln!(
        "{}",
        stdout
            .lines()
            .filter(|l| l.starts_with("openapi:"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// Found by schemathesis: a 405 must say in `Allow` which methods the path takes (RFC 9110).
#[test]
fn method_not_allowed_names_the_allowed_methods() {
    let server = TestServer::start();
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let cases = [
        ("PUT", "/v1/endpoints/7", "GET, PATCH, DELETE"),
        ("TRACE", "/v1/tasks/1/retry", "POST"),
        ("DELETE", "/v1/endpoints", "POST, GET"),
        ("POST", "/healthz", "GET, HEAD"),
        ("DELETE", OPENAPI_PATH, "GET"),
        // The dashboard's files set their own.
        ("POST", "/ui/", "GET, HEAD"),
    ];
    for (method, path, allow) in cases {
        let timestamp = chrono::Utc::now().timestamp_millis().to_string();
        let mut request = ureq::http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", server.url));
        for (name, value) in crate::support::signed_headers(
            &server.key_id,
            &server.secret,
            &timestamp,
            method,
            path,
            b"",
        ) {
            request = request.header(name, value);
        }
        let reply = agent.run(request.body(Vec::new()).unwrap()).unwrap();
        assert_eq!(reply.status().as_u16(), 405, "{method} {path}");
        assert_eq!(
            reply.headers().get("allow").and_then(|v| v.to_str().ok()),
            Some(allow),
            "{method} {path}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Found while checking replies against the document at the boundaries a fuzzer tries: a
/// `run_at` or `from` past the year 9999 (or before 0001) came back as
/// `+10000-01-01T00:00:00Z`, which is not RFC 3339 and broke the reply's schema. Such instants
/// are now 40001, and a preview stops at the end of 9999.
#[test]
fn instants_outside_rfc3339_years_are_refused() {
    let doc = document();
    let server = TestServer::start();
    let receiver = Receiver::start();
    let ep = ok(
        &server.client(),
        "POST",
        "/endpoints",
        Some(json!({"name": "e", "url": receiver.url})),
    );
    let c = |m: &str, t: &str, p: &str, b: Option<Value>| call(&doc, &server, m, t, p, b);
    for run_at in [
        json!(253_402_300_800_i64),
        json!(-100_000_000_000_i64),
        json!("253402300800"),
        json!("+10000-01-01T00:00:00Z"),
    ] {
        let (status, _) = c(
            "POST",
            "/v1/tasks",
            "/tasks",
            Some(json!({"endpoint_id": ep["id"], "run_at": run_at})),
        );
        assert_eq!(status, 400, "run_at {run_at}");
    }
    let (status, task) = c(
        "POST",
        "/v1/tasks",
        "/tasks",
        Some(json!({"endpoint_id": ep["id"], "run_at": 253_402_300_799_i64})),
    );
    assert_eq!(
        (status, &task["run_at"]),
        (200, &json!("9999-12-31T23:59:59Z"))
    );
    let (status, preview) = c(
        "POST",
        "/v1/cron/preview",
        "/cron/preview",
        Some(json!({"cron_expr": "* * * * *", "from": "9999-12-31T23:58:00Z", "count": 5})),
    );
    assert_eq!(status, 200);
    assert_eq!(preview["next_runs"], json!(["9999-12-31T23:59:00Z"]));
    let (status, _) = c(
        "POST",
        "/v1/cron/preview",
        "/cron/preview",
        Some(json!({"cron_expr": "* * * * *", "from": -62_135_596_801_i64})),
    );
    assert_eq!(status, 400);
}

/// Found by schemathesis (`positive_data_acceptance`): JSON Schema's `integer` includes `3.0`,
/// which some JSON encoders write for whole numbers, but the server refused it. Whole numbers
/// written with a fraction part are integers now; `3.5` is still 40001.
#[test]
fn whole_numbers_with_a_fraction_part_are_integers() {
    let doc = document();
    let server = TestServer::start();
    let c = |m: &str, t: &str, p: &str, b: Option<Value>| call(&doc, &server, m, t, p, b);
    let (status, policy) = c(
        "POST",
        "/v1/retries/policies",
        "/retries/policies",
        Some(
            json!({"name": "p", "max_attempts": 3.0, "backoff_type": "linear",
                    "initial_delay_sec": 10.0, "max_delay_sec": 1e3}),
        ),
    );
    assert_eq!(status, 200);
    assert_eq!(
        (
            &policy["max_attempts"],
            &policy["initial_delay_sec"],
            &policy["max_delay_sec"]
        ),
        (&json!(3), &json!(10), &json!(1000))
    );
    let (status, _) = c(
        "POST",
        "/v1/retries/policies",
        "/retries/policies",
        Some(json!({"name": "p", "max_attempts": 3.5, "backoff_type": "linear"})),
    );
    assert_eq!(status, 400);
    let (status, preview) = c(
        "POST",
        "/v1/cron/preview",
        "/cron/preview",
        Some(json!({"cron_expr": "0 0 * * *", "from": 1_751_328_000.0, "count": 1.0})),
    );
    assert_eq!(status, 200);
    assert_eq!(preview["next_runs"], json!(["2025-07-02T00:00:00Z"]));
}
