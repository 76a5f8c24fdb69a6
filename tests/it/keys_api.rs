//! Keys with scopes (docs/design.md §17, docs/API.md "Keys"): what each scope may do over the
//! router's whole table, the `/v1/keys` routes, revoked and expired keys, `last_used_at` and its
//! throttle, and `keys create --scope/--expires-in`. On both stores (`WEBHOOKD_TEST_DB`).

use crate::cli::{text, webhookd};
use crate::support::*;
use serde_json::{Value, json};
use webhookd::client::Client;

/// Makes a key of the admin client's app through the API; returns its record (with `secret`).
fn make_key(server: &TestServer, admin: &Client, name: &str, scope: &str) -> (Value, Client) {
    let key = ok(
        admin,
        "POST",
        "/v1/keys",
        Some(json!({"name": name, "scope": scope})),
    );
    let client = Client::new(
        &server.url,
        key["id"].as_str().unwrap(),
        key["secret"].as_str().unwrap(),
    );
    (key, client)
}

/// The scope a route needs, as docs/API.md states it: the keys routes are admin's, `GET`
/// routes and the cron preview are read's, everything else is write's.
fn needed(method: &str, pattern: &str) -> &'static str {
    if pattern.starts_with("/v1/keys") {
        "admin"
    } else if method == "GET" || pattern == "/v1/cron/preview" {
        "read"
    } else {
        "write"
    }
}

fn rank(scope: &str) -> u8 {
    match scope {
        "read" => 0,
        "write" => 1,
        _ => 2,
    }
}

/// Every route of the router, under every scope: a route outside the key's scope is 403
/// `40301` naming the scope and the route, before its handler runs (nothing is written); a
/// route inside it reaches its handler (the ids do not exist: a 404 or 400 from the handler,
/// never 403).
#[test]
fn each_scope_allows_its_routes_and_refuses_the_others() {
    let server = TestServer::start();
    let admin = server.client();
    let clients: Vec<(&str, Client)> = ["admin", "write", "read"]
        .into_iter()
        .map(|scope| (scope, make_key(&server, &admin, scope, scope).1))
        .collect();
    let routes: Vec<(&str, String)> = webhookd::api::route_table().collect();
    assert!(
        routes
            .iter()
            .any(|(m, p)| *m == "DELETE" && p == "/v1/keys/{key_id}")
    );
    for (scope, client) in &clients {
        for (method, pattern) in &routes {
            let path = pattern
                .replace("{id}", "987654")
                .replace("{key_id}", "whk_0000000000000000");
            let body = matches!(*method, "POST" | "PATCH").then(|| json!({}));
            let reply = client.send(method, &path, body.as_ref()).unwrap();
            let allowed = rank(scope) >= rank(needed(method, pattern));
            if allowed {
                assert!(
                    reply.status != 403 && reply.status < 500,
                    "{scope} {method} {path}: {} {}",
                    reply.status,
                    reply.body
                );
            } else {
                assert_eq!(
                    (reply.status, reply.code()),
                    (403, 40301),
                    "{scope} {method} {path}: {}",
                    reply.body
                );
                assert_eq!(
                    reply.body["message"],
                    format!("key scope \"{scope}\" does not allow {method} {path}")
                );
            }
        }
    }
    // Nothing refused was written: the read and write keys made no key, the read key no event.
    let keys = ok(&admin, "GET", "/v1/keys", None);
    assert_eq!(keys["total"], 4, "{keys}");
    // The exact message of docs/design.md §17's example.
    let read = &clients[2].1;
    let refused = err(
        read,
        "POST",
        "/v1/endpoints",
        Some(json!({"name": "x", "url": "http://127.0.0.1:9/"})),
        403,
        40301,
    );
    assert_eq!(
        refused.body["message"],
        r#"key scope "read" does not allow POST /v1/endpoints"#
    );
    // A write key does everything but keys: it publishes.
    ok(
        &clients[1].1,
        "POST",
        "/v1/events",
        Some(json!({"event_name": "order.paid"})),
    );
}

/// Create, list, get, revoke; the secret appears once, in the create reply.
#[test]
fn keys_are_created_listed_read_and_revoked_and_the_secret_is_shown_once() {
    let server = TestServer::start();
    let admin = server.client();
    let expires = chrono::Utc::now() + chrono::Duration::days(30);
    let created = ok(
        &admin,
        "POST",
        "/v1/keys",
        Some(json!({
            "name": "status page",
            "scope": "read",
            "expires_at": expires.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
        })),
    );
    let id = created["id"].as_str().unwrap().to_string();
    let secret = created["secret"].as_str().unwrap().to_string();
    assert!(
        id.starts_with("whk_") && secret.starts_with("whs_"),
        "{created}"
    );
    assert_eq!(created["app_id"], "app1");
    assert_eq!(created["name"], "status page");
    assert_eq!(created["scope"], "read");
    assert_eq!(
        created["expires_at"],
        expires.format("%Y-%m-%dT%H:%M:%SZ").to_string()
    );
    assert_eq!(created["revoked_at"], Value::Null);
    assert_eq!(created["last_used_at"], Value::Null);
    assert!(created["created_at"].as_str().unwrap().ends_with('Z'));
    // The default scope is admin; epoch seconds are a time too.
    let second = ok(
        &admin,
        "POST",
        "/v1/keys",
        Some(json!({"name": "ci", "expires_at": chrono::Utc::now().timestamp() + 3600})),
    );
    assert_eq!(second["scope"], "admin");

    let got = ok(&admin, "GET", &format!("/v1/keys/{id}"), None);
    let mut expected = created.clone();
    expected.as_object_mut().unwrap().remove("secret");
    assert_eq!(got, expected);
    let list = ok(&admin, "GET", "/v1/keys?page_size=2", None);
    assert_eq!(
        (list["total"].as_i64(), list["page_size"].as_i64()),
        (Some(3), Some(2))
    );
    let listed: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["id"].as_str().unwrap())
        .collect();
    // Newest first.
    assert_eq!(listed, [second["id"].as_str().unwrap(), id.as_str()]);
    let page2 = ok(&admin, "GET", "/v1/keys?page=2&page_size=2", None);
    assert_eq!(
        page2["items"][0]["id"].as_str(),
        Some(server.key_id.as_str())
    );
    for reply in [&list, &page2, &got] {
        assert!(
            !reply.to_string().contains("whs_"),
            "a secret shown again: {reply}"
        );
    }

    // The new key works, until it is revoked.
    let status_page = Client::new(&server.url, &id, &secret);
    ok(&status_page, "GET", "/v1/endpoints", None);
    let revoked = ok(&admin, "DELETE", &format!("/v1/keys/{id}"), None);
    assert_eq!(revoked, json!({"id": id, "deleted": true}));
    err(&status_page, "GET", "/v1/endpoints", None, 401, 40102);
    let after = ok(&admin, "GET", &format!("/v1/keys/{id}"), None);
    assert!(
        after["revoked_at"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z'))
    );
    err(
        &admin,
        "DELETE",
        &format!("/v1/keys/{id}"),
        None,
        409,
        40901,
    );
    err(&admin, "GET", "/v1/keys/whk_nothere", None, 404, 40401);
    err(&admin, "DELETE", "/v1/keys/whk_nothere", None, 404, 40401);
}

#[test]
fn bad_key_input_names_the_field() {
    let server = TestServer::start();
    let admin = server.client();
    expect_field_errors(
        &admin,
        "POST",
        "/v1/keys",
        [
            (json!({}), "name"),
            (json!({"name": ""}), "name"),
            (json!({"name": "x".repeat(201)}), "name"),
            (json!({"name": 5}), "name"),
            (json!({"name": "k", "scope": "reed"}), "scope"),
            (json!({"name": "k", "scope": 1}), "scope"),
            (
                json!({"name": "k", "expires_at": "2020-01-01T00:00:00Z"}),
                "expires_at",
            ),
            (
                json!({"name": "k", "expires_at": "next week"}),
                "expires_at",
            ),
            (
                json!({"name": "k", "scopes": "read"}),
                "unknown field \"scopes\"",
            ),
        ],
    );
    let reply = err(
        &admin,
        "POST",
        "/v1/keys",
        Some(json!({"name": "k", "scope": "reed"})),
        400,
        40001,
    );
    assert_eq!(
        reply.body["message"],
        r#"scope: unknown scope "reed"; did you mean "read"? (one of admin, write, read)"#
    );
    let reply = err(
        &admin,
        "POST",
        "/v1/keys",
        Some(json!({"name": "k", "scopes": "read"})),
        400,
        40001,
    );
    assert!(
        reply.body["message"]
            .as_str()
            .unwrap()
            .contains(r#"did you mean "scope"?"#),
        "{}",
        reply.body
    );
    // Nothing was made.
    assert_eq!(ok(&admin, "GET", "/v1/keys", None)["total"], 1);
}

/// A key cannot revoke itself; another app's key is a 404, as a missing one is; a read or
/// write key reads its own record (how a client learns its scope) and nothing else of keys.
#[test]
fn self_revoke_is_409_and_other_apps_keys_are_404() {
    let server = TestServer::start();
    let admin = server.client();
    let reply = err(
        &admin,
        "DELETE",
        &format!("/v1/keys/{}", server.key_id),
        None,
        409,
        40901,
    );
    assert!(reply.body["message"].as_str().unwrap().contains("itself"));
    ok(&admin, "GET", "/v1/endpoints", None);

    let other = server.client_for_app("app2");
    let (theirs, _) = make_key(&server, &other, "theirs", "read");
    let their_id = theirs["id"].as_str().unwrap();
    err(
        &admin,
        "GET",
        &format!("/v1/keys/{their_id}"),
        None,
        404,
        40401,
    );
    err(
        &admin,
        "DELETE",
        &format!("/v1/keys/{their_id}"),
        None,
        404,
        40401,
    );
    let mine = ok(&admin, "GET", "/v1/keys", None);
    assert!(!mine.to_string().contains(their_id));

    let (read_key, read) = make_key(&server, &admin, "reader", "read");
    let read_id = read_key["id"].as_str().unwrap();
    let own = ok(&read, "GET", &format!("/v1/keys/{read_id}"), None);
    assert_eq!(
        (own["id"].as_str(), own["scope"].as_str()),
        (Some(read_id), Some("read"))
    );
    assert!(own.get("secret").is_none());
    err(
        &read,
        "GET",
        &format!("/v1/keys/{}", server.key_id),
        None,
        403,
        40301,
    );
    err(&read, "GET", "/v1/keys", None, 403, 40301);
    err(
        &read,
        "DELETE",
        &format!("/v1/keys/{read_id}"),
        None,
        403,
        40301,
    );
}

/// `expires_at` passed: 401 `40102`, saying so; `last_used_at` is set by a request and written
/// again only once a minute has passed.
#[test]
fn expired_keys_are_refused_and_last_used_is_throttled() {
    let start = chrono::Utc::now();
    let server = TestServer::start_manual(start, |_| {});
    let admin = server.client();
    let soon = (start + chrono::Duration::seconds(100)).timestamp();
    let created = ok(
        &admin,
        "POST",
        "/v1/keys",
        Some(json!({"name": "brief", "scope": "write", "expires_at": soon})),
    );
    let id = created["id"].as_str().unwrap();
    let brief = Client::new(&server.url, id, created["secret"].as_str().unwrap());
    let last_used = || ok(&admin, "GET", &format!("/v1/keys/{id}"), None)["last_used_at"].clone();
    assert_eq!(last_used(), Value::Null);

    ok(&brief, "GET", "/v1/endpoints", None);
    let first = last_used();
    assert_eq!(first, start.format("%Y-%m-%dT%H:%M:%SZ").to_string());
    server.advance(chrono::Duration::seconds(40));
    ok(&brief, "GET", "/v1/endpoints", None);
    assert_eq!(last_used(), first, "written again within a minute");
    server.advance(chrono::Duration::seconds(25));
    ok(&brief, "GET", "/v1/endpoints", None);
    let later = (start + chrono::Duration::seconds(65))
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    assert_eq!(last_used(), later);

    server.advance(chrono::Duration::seconds(40));
    let reply = err(&brief, "GET", "/v1/endpoints", None, 401, 40102);
    assert!(
        reply.body["message"].as_str().unwrap().contains("expired"),
        "{}",
        reply.body
    );
    // The record says when it expired and that it was not revoked.
    let record = ok(&admin, "GET", &format!("/v1/keys/{id}"), None);
    assert_eq!(record["revoked_at"], Value::Null);
    assert_eq!(record["last_used_at"], later);
}

/// `keys create --scope --expires-in`, and `keys list` shows both (and in --json).
#[test]
fn cli_creates_scoped_and_expiring_keys() {
    let server = TestServer::start();
    let db = server.db.as_str();
    let out = webhookd(&[
        "keys",
        "create",
        "--db",
        db,
        "--app",
        "app1",
        "--name",
        "support",
        "--scope",
        "read",
        "--expires-in",
        "12h",
        "--json",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let key: Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = key["key_id"].as_str().unwrap();
    let reader = Client::new(&server.url, id, key["secret"].as_str().unwrap());
    ok(&reader, "GET", "/v1/endpoints", None);
    err(
        &reader,
        "POST",
        "/v1/events",
        Some(json!({"event_name": "x"})),
        403,
        40301,
    );

    let list: Value =
        serde_json::from_slice(&webhookd(&["keys", "list", "--db", db, "--json"]).stdout).unwrap();
    let listed = list
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["id"] == id)
        .expect("listed");
    assert_eq!(listed["scope"], "read");
    assert_eq!(listed["key_id"], id);
    let expires =
        chrono::DateTime::parse_from_rfc3339(listed["expires_at"].as_str().unwrap()).unwrap();
    let minutes = (expires.with_timezone(&chrono::Utc) - chrono::Utc::now()).num_minutes();
    assert!((11 * 60..=12 * 60).contains(&minutes), "{listed}");
    let first = list
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["id"] == server.key_id.as_str());
    assert_eq!(first.unwrap()["scope"], "admin");
    assert_eq!(first.unwrap()["expires_at"], Value::Null);
    let plain = text(&webhookd(&["keys", "list", "--db", db]).stdout);
    let line = plain.lines().find(|l| l.starts_with(id)).expect("listed");
    assert!(line.contains("\tread\t") && line.contains("\t20"), "{line}");

    for (flag, value) in [
        ("--scope", "reed"),
        ("--expires-in", "90"),
        ("--expires-in", "0d"),
    ] {
        let out = webhookd(&[
            "keys", "create", "--db", db, "--app", "app1", "--name", "n", flag, value,
        ]);
        assert_eq!(out.status.code(), Some(2), "{flag} {value}");
        assert!(text(&out.stderr).contains(flag), "{}", text(&out.stderr));
    }

    // A key made to expire in a second is refused once that second has passed.
    let out = webhookd(&[
        "keys",
        "create",
        "--db",
        db,
        "--app",
        "app1",
        "--name",
        "brief",
        "--expires-in",
        "1s",
        "--json",
    ]);
    let key: Value = serde_json::from_slice(&out.stdout).unwrap();
    let brief = Client::new(
        &server.url,
        key["key_id"].as_str().unwrap(),
        key["secret"].as_str().unwrap(),
    );
    let refused = wait_for(std::time::Duration::from_secs(60), || {
        let reply = brief.send("GET", "/v1/endpoints", None).unwrap();
        (reply.status == 401).then_some(reply.code())
    });
    assert_eq!(refused, Some(40102));
}

/// Keys made before scopes existed are `admin` and never expire: a version-1 database with a
/// key, upgraded by opening it.
#[test]
fn keys_made_before_scopes_are_admin() {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::catchup::version_1_database(dir.path(), "v1_keys");
    Db::open(&db).execute(
        "INSERT INTO api_keys (key_id, secret, app_id, name, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
        &[&"whk_old", &"whs_old", &"app1", &"before scopes", &1_000i64],
    );
    let store = webhookd::store::open(&db, 1).unwrap();
    let key = store
        .read::<_, webhookd::store::StoreError>(|tx| tx.lookup_key("whk_old"))
        .unwrap()
        .expect("the old key is live");
    assert_eq!(key.scope, webhookd::store::keys::Scope::Admin);
    assert_eq!((key.expires_at, key.last_used_at), (None, None));
}
