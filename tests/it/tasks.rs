//! The task routes: creating manual tasks, listing with filters, reading, cancel, retry and
//! resend, their validation errors, 409s and app isolation.

use crate::delivery::{endpoint, policy, task, task_id, wait_status};
use crate::support::{Answer, Receiver, TestServer, err, ok};
use serde_json::json;
use std::time::Duration;

/// An endpoint nobody listens on, for tasks that are never meant to be sent.
const NOWHERE: &str = "http://127.0.0.1:9/hook";

/// How long to wait for deliveries the tasks' `success` already confirmed (so: no wait).
const ARRIVED: Duration = Duration::from_secs(60);

#[test]
fn create_validates_its_fields() {
    let server = TestServer::start();
    let c = server.client();
    let ep = endpoint(&c, NOWHERE, json!({}));
    let bad = [
        json!({}),
        json!({ "endpoint_id": "1" }),
        json!({ "endpoint_id": ep + 1000 }),
        json!({ "endpoint_id": ep, "payload": [1] }),
        json!({ "endpoint_id": ep, "payload": 3 }),
        json!({ "endpoint_id": ep, "run_at": "next tuesday" }),
        json!({ "endpoint_id": ep, "run_at": true }),
    ];
    for body in bad {
        let reply = err(&c, "POST", "/tasks", Some(body.clone()), 400, 40001);
        let message = reply.body["message"].as_str().unwrap();
        assert!(
            message.starts_with("endpoint_id")
                || message.starts_with("payload")
                || message.starts_with("run_at"),
            "{body}: {message}"
        );
    }
    let reply = c.send_raw("POST", "/tasks", b"{not json").unwrap();
    assert_eq!((reply.status, reply.code()), (400, 40002));

    let other = server.client_for_app("app2");
    let reply = err(
        &other,
        "POST",
        "/tasks",
        Some(json!({ "endpoint_id": ep })),
        400,
        40001,
    );
    assert!(
        reply.body["message"]
            .as_str()
            .unwrap()
            .contains("endpoint_id")
    );
}

#[test]
fn create_takes_run_at_payload_and_max_attempts_from_the_policy() {
    let server = TestServer::start();
    let c = server.client();
    let p = policy(&c, 7, "linear", 5, 50);
    let ep = endpoint(&c, NOWHERE, json!({ "retry_policy_id": p }));
    ok(&c, "POST", &format!("/endpoints/{ep}/disable"), None);
    let at = "2030-01-02T03:04:05Z";
    let t = task(&c, ep, json!({ "run_at": at, "payload": { "k": "v" } }));
    assert_eq!(
        t["status"], "pending",
        "a disabled endpoint's task is accepted"
    );
    assert_eq!(t["run_at"], at);
    assert_eq!(t["next_attempt_at"], at);
    assert_eq!(t["payload"], json!({ "k": "v" }));
    assert_eq!(t["max_attempts"], 7);
    assert_eq!(t["attempts"], 0);
    assert_eq!(t["app_id"], "app1");
    assert_eq!(t["endpoint_id"], ep);
    assert!(t["schedule_id"].is_null() && t["event_id"].is_null());
    assert!(t["last_status_code"].is_null() && t["finished_at"].is_null());
    let epoch = task(&c, ep, json!({ "run_at": 1_893_456_000 }));
    assert_eq!(epoch["run_at"], "2030-01-01T00:00:00Z");
    let default = task(&c, ep, json!({}));
    assert_eq!(default["payload"], json!({}));
    assert_eq!(default["run_at"], default["created_at"]);
}

#[test]
fn list_filters_pages_and_validates() {
    let server = TestServer::start();
    let c = server.client();
    let a = endpoint(&c, NOWHERE, json!({}));
    let b = endpoint(&c, NOWHERE, json!({}));
    ok(&c, "POST", &format!("/endpoints/{a}/disable"), None);
    ok(&c, "POST", &format!("/endpoints/{b}/disable"), None);
    let ids: Vec<i64> = [a, a, b]
        .iter()
        .map(|ep| task(&c, *ep, json!({}))["id"].as_i64().unwrap())
        .collect();
    ok(&c, "POST", &format!("/tasks/{}/cancel", ids[0]), None);

    let page = ok(&c, "GET", "/tasks?page_size=2", None);
    assert_eq!(
        (page["total"].as_i64(), page["page_size"].as_i64()),
        (Some(3), Some(2))
    );
    assert_eq!(page["items"][0]["id"], ids[2], "newest first");
    let by_endpoint = ok(&c, "GET", &format!("/tasks?endpoint_id={a}"), None);
    assert_eq!(by_endpoint["total"], 2);
    let pending_a = ok(
        &c,
        "GET",
        &format!("/tasks?endpoint_id={a}&status=pending"),
        None,
    );
    assert_eq!(pending_a["total"], 1);
    assert_eq!(pending_a["items"][0]["id"], ids[1]);
    assert_eq!(ok(&c, "GET", "/tasks?task_type=manual", None)["total"], 3);
    assert_eq!(ok(&c, "GET", "/tasks?task_type=event", None)["total"], 0);
    assert_eq!(ok(&c, "GET", "/tasks?schedule_id=5", None)["total"], 0);
    assert_eq!(ok(&c, "GET", "/tasks?event_id=5", None)["total"], 0);
    for query in [
        "status=done",
        "task_type=cron",
        "schedule_id=abc",
        "event_id=1.5",
        "endpoint_id=x",
        "page=0",
    ] {
        err(&c, "GET", &format!("/tasks?{query}"), None, 400, 40001);
    }
    let other = server.client_for_app("app2");
    assert_eq!(ok(&other, "GET", "/tasks", None)["total"], 0);
}

#[test]
fn other_apps_tasks_are_not_found() {
    let server = TestServer::start();
    let c = server.client();
    let ep = endpoint(&c, NOWHERE, json!({}));
    ok(&c, "POST", &format!("/endpoints/{ep}/disable"), None);
    let id = task_id(&c, ep);
    let other = server.client_for_app("app2");
    for (method, path) in [
        ("GET", format!("/tasks/{id}")),
        ("GET", format!("/tasks/{id}/attempts")),
        ("POST", format!("/tasks/{id}/cancel")),
        ("POST", format!("/tasks/{id}/retry")),
        ("POST", format!("/tasks/{id}/resend")),
        ("GET", format!("/tasks/{}", id + 100)),
        ("POST", format!("/tasks/{}/resend", id + 100)),
    ] {
        err(&other, method, &path, None, 404, 40401);
    }
    assert_eq!(
        ok(&c, "GET", &format!("/tasks/{id}"), None)["status"],
        "pending"
    );
    err(&c, "GET", "/tasks/abc", None, 400, 40001);
}

#[test]
fn cancel_and_retry_follow_the_state_rules() {
    let server = TestServer::start();
    let c = server.client();
    let rx = Receiver::start();
    rx.script([Answer::status(500)]);
    let p = policy(&c, 1, "fixed", 0, 0);
    let ep = endpoint(&c, &rx.url, json!({ "retry_policy_id": p }));

    // pending → canceled; cancel again and retry of pending are 409.
    let later = task(&c, ep, json!({ "run_at": "2099-01-01T00:00:00Z" }))["id"]
        .as_i64()
        .unwrap();
    err(
        &c,
        "POST",
        &format!("/tasks/{later}/retry"),
        None,
        409,
        40901,
    );
    let canceled = ok(&c, "POST", &format!("/tasks/{later}/cancel"), None);
    assert_eq!(canceled["status"], "canceled");
    assert!(canceled["finished_at"].is_string() && canceled["next_attempt_at"].is_null());
    err(
        &c,
        "POST",
        &format!("/tasks/{later}/cancel"),
        None,
        409,
        40901,
    );

    // failed → retry → pending, attempts start again, then success; success is 409 for both.
    let id = task_id(&c, ep);
    let failed = wait_status(&c, id, "failed");
    assert_eq!(failed["attempts"], 1);
    err(&c, "POST", &format!("/tasks/{id}/cancel"), None, 409, 40901);
    let retried = ok(&c, "POST", &format!("/tasks/{id}/retry"), None);
    // The pool may claim it before the reply is read back.
    assert!(["pending", "running"].contains(&retried["status"].as_str().unwrap()));
    assert_eq!(retried["attempts"], 0);
    assert!(retried["finished_at"].is_null());
    let done = wait_status(&c, id, "success");
    assert_eq!(done["attempts"], 1);
    let tries = ok(&c, "GET", &format!("/tasks/{id}/attempts"), None);
    assert_eq!(tries["total"], 2);
    assert_eq!(tries["items"][0]["status_code"], 500);
    assert_eq!(tries["items"][1]["status_code"], 200);
    assert_eq!(rx.received()[1].header("x-service-attempt"), Some("1"));
    err(&c, "POST", &format!("/tasks/{id}/retry"), None, 409, 40901);
    err(&c, "POST", &format!("/tasks/{id}/cancel"), None, 409, 40901);

    // A canceled task can be retried too.
    ok(&c, "POST", &format!("/tasks/{later}/retry"), None);
    wait_status(&c, later, "success");
}

#[test]
fn resend_makes_a_new_manual_task_and_leaves_the_original_alone() {
    let server = TestServer::start();
    let c = server.client();
    let rx = Receiver::start();
    let ep = endpoint(&c, &rx.url, json!({ "filter_events": "order.*" }));

    // A delivered task: resend is not refused (retry is) and sends the same payload again.
    let id = task(
        &c,
        ep,
        json!({ "payload": { "order": 42, "lines": [1, 2] } }),
    )["id"]
        .as_i64()
        .unwrap();
    let original = wait_status(&c, id, "success");
    err(&c, "POST", &format!("/tasks/{id}/retry"), None, 409, 40901);
    let copy = ok(&c, "POST", &format!("/tasks/{id}/resend"), None);
    let copy_id = copy["id"].as_i64().unwrap();
    assert_ne!(copy_id, id);
    assert_eq!(copy["task_type"], "manual");
    assert_eq!(copy["endpoint_id"], ep);
    assert_eq!(copy["payload"], original["payload"]);
    assert_eq!(copy["attempts"], 0);
    assert!(["pending", "running"].contains(&copy["status"].as_str().unwrap()));
    assert_eq!(copy["run_at"], copy["created_at"], "due now");
    wait_status(&c, copy_id, "success");
    assert_eq!(
        ok(&c, "GET", &format!("/tasks/{id}"), None),
        original,
        "the original is unchanged"
    );
    let sent = rx.wait_for(2, ARRIVED);
    assert_eq!(sent.len(), 2);
    assert_eq!(
        sent[0].body, sent[1].body,
        "the same payload, byte for byte"
    );
    assert_eq!(
        sent[1].header("webhook-id"),
        Some(&*format!("task_{copy_id}"))
    );

    // An event's task: the copy keeps its event (listed with it, sent with its name).
    let event = ok(
        &c,
        "POST",
        "/events",
        Some(json!({ "event_name": "order.paid", "payload": { "n": 1 } })),
    );
    let event_id = event["id"].as_i64().unwrap();
    let by_event = format!("/tasks?event_id={event_id}");
    let event_task = ok(&c, "GET", &by_event, None)["items"][0]["id"]
        .as_i64()
        .unwrap();
    wait_status(&c, event_task, "success");
    let copy = ok(&c, "POST", &format!("/tasks/{event_task}/resend"), None);
    assert_eq!(
        (copy["event_id"].as_i64(), copy["task_type"].as_str()),
        (Some(event_id), Some("manual"))
    );
    assert_eq!(copy["payload"], json!({ "n": 1 }));
    wait_status(&c, copy["id"].as_i64().unwrap(), "success");
    assert_eq!(ok(&c, "GET", &by_event, None)["total"], 2);
    let sent = rx.wait_for(4, ARRIVED);
    assert_eq!(sent[3].header("x-service-event"), Some("order.paid"));

    // A pending task (due later) and a canceled one: each stays as it was.
    let later = task(&c, ep, json!({ "run_at": "2099-01-01T00:00:00Z" }));
    let later_id = later["id"].as_i64().unwrap();
    let copy = ok(&c, "POST", &format!("/tasks/{later_id}/resend"), None);
    wait_status(&c, copy["id"].as_i64().unwrap(), "success");
    assert_eq!(ok(&c, "GET", &format!("/tasks/{later_id}"), None), later);
    let canceled = ok(&c, "POST", &format!("/tasks/{later_id}/cancel"), None);
    ok(&c, "POST", &format!("/tasks/{later_id}/resend"), None);
    assert_eq!(ok(&c, "GET", &format!("/tasks/{later_id}"), None), canceled);

    // No body; a deleted endpoint is a 409 that says so.
    err(
        &c,
        "POST",
        &format!("/tasks/{id}/resend"),
        Some(json!({ "payload": {} })),
        400,
        40001,
    );
    ok(&c, "DELETE", &format!("/endpoints/{ep}"), None);
    let refused = err(&c, "POST", &format!("/tasks/{id}/resend"), None, 409, 40901);
    let message = refused.body["message"].as_str().unwrap();
    assert!(
        message.contains("endpoint") && message.contains("deleted"),
        "{message}"
    );
    // Seven tasks in all: three originals, four copies.
    assert_eq!(ok(&c, "GET", "/tasks", None)["total"], 7);
}
