//! Inbound authentication (docs/design.md §2): every 401 code, bodyless signing, replay, revocation,
//! and per-app isolation.

use crate::support::*;
use serde_json::json;

fn now_secs() -> String {
    chrono::Utc::now().timestamp().to_string()
}

#[test]
fn each_401_code_names_its_cause() {
    let server = TestServer::start();
    let path = "/v1/endpoints";
    let (status, body) = raw(&server.url, "GET", path, &[], b"");
    assert_eq!((status, body["code"].as_i64()), (401, Some(40101)));
    assert!(body["message"].as_str().unwrap().contains("X-Key-ID"));

    let mut headers = signed_headers(
        &server.key_id,
        &server.secret,
        &now_secs(),
        "GET",
        path,
        b"",
    );
    headers.retain(|(k, _)| *k != "X-Signature");
    let (status, body) = raw(&server.url, "GET", path, &headers, b"");
    assert_eq!((status, body["code"].as_i64()), (401, Some(40101)));
    assert!(body["message"].as_str().unwrap().contains("X-Signature"));

    let headers = signed_headers("whk_nope", &server.secret, &now_secs(), "GET", path, b"");
    let (status, body) = raw(&server.url, "GET", path, &headers, b"");
    assert_eq!((status, body["code"].as_i64()), (401, Some(40102)));

    let headers = signed_headers(
        &server.key_id,
        "wrong-secret",
        &now_secs(),
        "GET",
        path,
        b"",
    );
    let (status, body) = raw(&server.url, "GET", path, &headers, b"");
    assert_eq!((status, body["code"].as_i64()), (401, Some(40103)));

    let old = (chrono::Utc::now().timestamp() - 301).to_string();
    let headers = signed_headers(&server.key_id, &server.secret, &old, "GET", path, b"");
    let (status, body) = raw(&server.url, "GET", path, &headers, b"");
    assert_eq!((status, body["code"].as_i64()), (401, Some(40104)));
    let headers = signed_headers(&server.key_id, &server.secret, "soon", "GET", path, b"");
    let (status, body) = raw(&server.url, "GET", path, &headers, b"");
    assert_eq!((status, body["code"].as_i64()), (401, Some(40104)));

    let headers = signed_headers(
        &server.key_id,
        &server.secret,
        &now_secs(),
        "GET",
        path,
        b"",
    );
    let (status, _) = raw(&server.url, "GET", path, &headers, b"");
    assert_eq!(status, 200);
    let (status, body) = raw(&server.url, "GET", path, &headers, b"");
    assert_eq!((status, body["code"].as_i64()), (401, Some(40105)));
}

#[test]
fn signatures_cover_body_or_method_and_path() {
    let server = TestServer::start();
    let body = br#"{"name":"a","url":"http://127.0.0.1:1/x"}"#;
    let ts = chrono::Utc::now().timestamp_millis().to_string();
    let mut headers = signed_headers(
        &server.key_id,
        &server.secret,
        &ts,
        "POST",
        "/v1/endpoints",
        body,
    );
    headers.push(("Content-Type", "application/json".into()));
    let (status, reply) = raw(&server.url, "POST", "/v1/endpoints", &headers, body);
    assert_eq!(status, 200, "{reply}");
    let id = reply["data"]["id"].as_i64().unwrap();

    // Upper-case hex is accepted.
    let path = format!("/v1/endpoints/{id}");
    let mut headers = signed_headers(
        &server.key_id,
        &server.secret,
        &now_secs(),
        "GET",
        &path,
        b"",
    );
    headers[2].1 = headers[2].1.to_uppercase();
    assert_eq!(raw(&server.url, "GET", &path, &headers, b"").0, 200);

    // A bodyless signature is bound to its method and path: reusing it elsewhere fails.
    let ts = now_secs();
    let get_headers = signed_headers(&server.key_id, &server.secret, &ts, "GET", &path, b"");
    let (status, reply) = raw(&server.url, "DELETE", &path, &get_headers, b"");
    assert_eq!((status, reply["code"].as_i64()), (401, Some(40103)));
    let paged = "/v1/endpoints?page=2";
    let headers = signed_headers(
        &server.key_id,
        &server.secret,
        &ts,
        "GET",
        "/v1/endpoints",
        b"",
    );
    assert_eq!(
        raw(&server.url, "GET", paged, &headers, b"").1["code"],
        40103
    );

    let headers = signed_headers(
        &server.key_id,
        &server.secret,
        &now_secs(),
        "DELETE",
        &path,
        b"",
    );
    let (status, reply) = raw(&server.url, "DELETE", &path, &headers, b"");
    assert_eq!(status, 200);
    assert_eq!(reply["data"], json!({"id": id, "deleted": true}));
}

#[test]
fn another_apps_records_are_404() {
    let server = TestServer::start();
    let mine = server.client();
    let theirs = server.client_for_app("app2");
    let endpoint = ok(
        &mine,
        "POST",
        "/endpoints",
        Some(json!({"name": "a", "url": "https://example.com/h"})),
    );
    let id = endpoint["id"].as_i64().unwrap();
    assert_eq!(endpoint["app_id"], "app1");
    for (method, path) in [
        ("GET", format!("/endpoints/{id}")),
        ("PATCH", format!("/endpoints/{id}")),
        ("DELETE", format!("/endpoints/{id}")),
        ("POST", format!("/endpoints/{id}/disable")),
    ] {
        let body = (method == "PATCH").then(|| json!({"name": "stolen"}));
        err(&theirs, method, &path, body, 404, 40401);
    }
    assert_eq!(ok(&theirs, "GET", "/endpoints", None)["total"], 0);
    assert_eq!(
        ok(&mine, "GET", &format!("/endpoints/{id}"), None)["name"],
        "a"
    );
}

#[test]
fn a_revoked_key_stops_working_at_once() {
    let server = TestServer::start();
    let client = server.client();
    ok(&client, "GET", "/endpoints", None);
    let store = webhookd::store::open(&server.db, 1).unwrap();
    let revoked =
        store.write::<_, webhookd::store::StoreError>(|tx| tx.revoke_key(&server.key_id, 0));
    assert!(revoked.unwrap());
    err(&client, "GET", "/endpoints", None, 401, 40102);
}

/// Keys are held in memory once used: a revocation by another process (`webhookd keys revoke`
/// on the same file or database) or through the API still refuses the key's very next request,
/// bodiless or not, while the other keys held keep working and a key made meanwhile works at
/// once.
#[test]
fn held_keys_are_refused_at_once_when_revoked_by_the_cli_or_the_api() {
    let server = TestServer::start();
    let kept = server.client();
    let (gone_id, gone_secret) = create_key(&server.db, "app1");
    let gone = webhookd::client::Client::new(&server.url, &gone_id, &gone_secret);
    let endpoint = json!({"name": "a", "url": "https://example.com/h"});
    let id = ok(&kept, "POST", "/endpoints", Some(endpoint.clone()))["id"]
        .as_i64()
        .unwrap();
    // One resource's read runs on the runtime's thread (docs/dev/storage.md, "Reads on the
    // runtime's thread"), a list in `block_in_place`: both are checked.
    let one = format!("/endpoints/{id}");
    // Used, so held: both the bodiless path and the path that checks headers before the body.
    for client in [&kept, &gone] {
        for _ in 0..3 {
            ok(client, "GET", "/endpoints", None);
            ok(client, "GET", &one, None);
        }
        ok(client, "POST", "/endpoints", Some(endpoint.clone()));
    }

    let revoke = crate::cli::webhookd(&["keys", "revoke", "--db", &server.db, &gone_id]);
    assert!(
        revoke.status.success(),
        "{}",
        crate::cli::text(&revoke.stderr)
    );
    err(&gone, "GET", "/endpoints", None, 401, 40102);
    err(
        &gone,
        "POST",
        "/endpoints",
        Some(endpoint.clone()),
        401,
        40102,
    );
    err(&gone, "GET", "/endpoints", None, 401, 40102);
    err(&gone, "GET", &one, None, 401, 40102);
    ok(&kept, "GET", "/endpoints", None);
    ok(&kept, "GET", &one, None);
    ok(&kept, "POST", "/endpoints", Some(endpoint.clone()));

    // Made by the CLI while the server runs: works on its first request.
    let made = crate::cli::webhookd(&[
        "keys", "create", "--db", &server.db, "--app", "app1", "--name", "late", "--json",
    ]);
    assert!(made.status.success(), "{}", crate::cli::text(&made.stderr));
    let made: serde_json::Value = serde_json::from_slice(&made.stdout).unwrap();
    let late_id = made["key_id"].as_str().unwrap();
    let late =
        webhookd::client::Client::new(&server.url, late_id, made["secret"].as_str().unwrap());
    ok(&late, "GET", &one, None);
    ok(&late, "POST", "/endpoints", Some(endpoint.clone()));
    ok(&late, "GET", "/endpoints", None);

    // Revoked through the API by another key: refused at once as well.
    ok(&kept, "DELETE", &format!("/keys/{late_id}"), None);
    err(&late, "GET", &one, None, 401, 40102);
    err(&late, "POST", "/endpoints", Some(endpoint), 401, 40102);
    err(&late, "GET", "/endpoints", None, 401, 40102);
    ok(&kept, "GET", "/endpoints", None);
}

#[test]
fn health_needs_no_signature_and_replies_carry_request_ids() {
    let server = TestServer::start();
    let (status, body) = raw(&server.url, "GET", "/healthz", &[], b"");
    assert_eq!(
        (status, body),
        (
            200,
            json!({"status": "ok", "version": env!("CARGO_PKG_VERSION")})
        )
    );
    let reply = server.client().send("GET", "/nope", None).unwrap();
    assert_eq!((reply.status, reply.code()), (404, 40401));
    assert!(
        reply.body["request_id"]
            .as_str()
            .unwrap()
            .starts_with("req_")
    );
}

#[test]
fn a_configured_rate_limit_answers_429_per_key() {
    // The limiter runs on the server's clock: a manual one that does not move, so no request
    // is allowed again by time passing however slowly the machine sends them.
    let server = TestServer::start_manual(chrono::Utc::now(), |c| c.rate_limit_per_sec = 3);
    let client = server.client();
    for _ in 0..3 {
        ok(&client, "GET", "/endpoints", None);
    }
    let reply = err(&client, "GET", "/endpoints", None, 429, 42901);
    assert!(reply.body["message"].as_str().unwrap().contains("retry in"));
    // another key has its own budget
    ok(&server.client_for_app("app2"), "GET", "/endpoints", None);
}
