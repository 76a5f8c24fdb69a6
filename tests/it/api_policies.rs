//! `/v1/retries/policies`: create with defaults, list, get, patch, delete (409 while attached).

use crate::support::*;
use serde_json::json;

#[test]
fn create_with_defaults_and_read_back() {
    let server = TestServer::start();
    let client = server.client();
    let p = ok(
        &client,
        "POST",
        "/retries/policies",
        Some(json!({"name": "quick", "max_attempts": 4, "backoff_type": "exponential"})),
    );
    assert_eq!(p["initial_delay_sec"], 60);
    assert_eq!(p["max_delay_sec"], 3600);
    assert_eq!(p["status"], "active");
    assert_eq!(p["app_id"], "app1");
    let id = p["id"].as_i64().unwrap();
    assert_eq!(
        ok(&client, "GET", &format!("/retries/policies/{id}"), None),
        p
    );
    let list = ok(&client, "GET", "/retries/policies", None);
    assert_eq!(list["total"], 1);
    assert_eq!(list["items"][0], p);
}

#[test]
fn validation_errors_name_the_field() {
    let server = TestServer::start();
    let client = server.client();
    let cases = [
        (json!({"max_attempts": 3, "backoff_type": "fixed"}), "name"),
        (
            json!({"name": "p", "backoff_type": "fixed"}),
            "max_attempts",
        ),
        (
            json!({"name": "p", "max_attempts": 0, "backoff_type": "fixed"}),
            "max_attempts",
        ),
        (
            json!({"name": "p", "max_attempts": 101, "backoff_type": "fixed"}),
            "max_attempts",
        ),
        (json!({"name": "p", "max_attempts": 3}), "backoff_type"),
        (
            json!({"name": "p", "max_attempts": 3, "backoff_type": "random"}),
            "backoff_type",
        ),
        (
            json!({"name": "p", "max_attempts": 3, "backoff_type": "fixed", "initial_delay_sec": -1}),
            "initial_delay_sec",
        ),
        (
            json!({"name": "p", "max_attempts": 3, "backoff_type": "fixed", "initial_delay_sec": 86401}),
            "initial_delay_sec",
        ),
        (
            // the default cap (3600) would be below the initial delay
            json!({"name": "p", "max_attempts": 3, "backoff_type": "fixed", "initial_delay_sec": 7200}),
            "max_delay_sec",
        ),
        (
            json!({"name": "p", "max_attempts": 3, "backoff_type": "fixed", "initial_delay_sec": 7200, "max_delay_sec": null}),
            "max_delay_sec",
        ),
        (
            json!({"name": "p", "max_attempts": 3, "backoff_type": "fixed", "initial_delay_sec": 100, "max_delay_sec": 50}),
            "max_delay_sec",
        ),
        (
            json!({"name": "p", "max_attempts": 3, "backoff_type": "fixed", "max_delay_sec": 604801}),
            "max_delay_sec",
        ),
    ];
    expect_field_errors(&client, "POST", "/retries/policies", cases);
    assert_eq!(ok(&client, "GET", "/retries/policies", None)["total"], 0);
}

#[test]
fn patch_and_delete_unless_attached() {
    let server = TestServer::start();
    let client = server.client();
    let p = ok(
        &client,
        "POST",
        "/retries/policies",
        Some(
            json!({"name": "p", "max_attempts": 3, "backoff_type": "fixed", "initial_delay_sec": 5, "max_delay_sec": 10}),
        ),
    );
    let path = format!("/retries/policies/{}", p["id"]);
    let patched = ok(
        &client,
        "PATCH",
        &path,
        Some(json!({"backoff_type": "linear", "max_attempts": 7})),
    );
    assert_eq!(patched["backoff_type"], "linear");
    assert_eq!(patched["max_attempts"], 7);
    assert_eq!(patched["initial_delay_sec"], 5);
    err(
        &client,
        "PATCH",
        &path,
        Some(json!({"initial_delay_sec": 11})),
        400,
        40001,
    );

    let ep = ok(
        &client,
        "POST",
        "/endpoints",
        Some(json!({"name": "e", "url": "https://e.com", "retry_policy_id": p["id"]})),
    );
    err(&client, "DELETE", &path, None, 409, 40901);
    ok(
        &client,
        "PATCH",
        &format!("/endpoints/{}", ep["id"]),
        Some(json!({"retry_policy_id": null})),
    );
    assert_eq!(
        ok(&client, "DELETE", &path, None),
        json!({"id": p["id"], "deleted": true})
    );
    err(&client, "GET", &path, None, 404, 40401);
    err(&client, "DELETE", &path, None, 404, 40401);
    let other = server.client_for_app("app2");
    let theirs = ok(
        &other,
        "POST",
        "/retries/policies",
        Some(json!({"name": "p", "max_attempts": 3, "backoff_type": "fixed"})),
    );
    err(
        &client,
        "GET",
        &format!("/retries/policies/{}", theirs["id"]),
        None,
        404,
        40401,
    );
}
