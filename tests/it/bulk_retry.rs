//! `POST /tasks/retry` (docs/design.md §12): bulk retry by endpoint, schedule, event, status and
//! `finished_at` range; the filter that must be given; tasks of deleted endpoints left alone;
//! at most `bulk_retry_max` per call with `"more": true`.

use crate::delivery::{endpoint, policy, task_id, wait_status};
use crate::support::{Receiver, TestServer, err, expect_field_errors, ok};
use chrono::{DateTime, SubsecRound, TimeDelta, Utc};
use serde_json::{Value, json};
use webhookd::client::Client;

/// Nothing listens here: every attempt fails at once (connection refused).
const NOWHERE: &str = "http://127.0.0.1:9/hook";

/// An endpoint at `url` whose policy allows one attempt, so a task fails on its first.
fn one_try_endpoint(c: &Client, url: &str) -> i64 {
    let p = policy(c, 1, "fixed", 0, 0);
    endpoint(c, url, json!({ "retry_policy_id": p }))
}

/// `n` manual tasks to `ep`, each waited for until it has failed; their ids.
fn failed_tasks(c: &Client, ep: i64, n: usize) -> Vec<i64> {
    let ids: Vec<i64> = (0..n).map(|_| task_id(c, ep)).collect();
    for id in &ids {
        wait_status(c, *id, "failed");
    }
    ids
}

fn bulk(c: &Client, body: Value) -> Value {
    ok(c, "POST", "/tasks/retry", Some(body))
}

fn get_task(c: &Client, id: i64) -> Value {
    ok(c, "GET", &format!("/tasks/{id}"), None)
}

fn disable(c: &Client, ep: i64) {
    ok(c, "POST", &format!("/endpoints/{ep}/disable"), None);
}

/// A retried task as `POST /tasks/{id}/retry` leaves it: pending, due, attempts from zero.
fn assert_retried(c: &Client, id: i64, max_attempts: i64) {
    let t = get_task(c, id);
    assert_eq!(t["status"], "pending", "{t}");
    assert_eq!(t["attempts"], 0, "{t}");
    assert_eq!(t["max_attempts"], max_attempts, "{t}");
    assert!(
        t["finished_at"].is_null() && !t["next_attempt_at"].is_null(),
        "{t}"
    );
}

fn rfc(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

#[test]
fn bulk_retry_by_endpoint_retries_only_that_endpoints_failed_tasks() {
    let server = TestServer::start();
    let c = server.client();
    let rx = Receiver::start();
    let a = one_try_endpoint(&c, NOWHERE);
    let b = one_try_endpoint(&c, NOWHERE);
    let of_a = failed_tasks(&c, a, 3);
    let of_b = failed_tasks(&c, b, 2);
    // Disabled, so that retried tasks wait where the test can see them.
    disable(&c, a);
    // max_attempts comes from the endpoint's policy at retry time.
    let four = policy(&c, 4, "fixed", 0, 0);
    ok(
        &c,
        "PATCH",
        &format!("/endpoints/{a}"),
        Some(json!({ "retry_policy_id": four, "url": format!("{}/hook", rx.url) })),
    );

    assert_eq!(bulk(&c, json!({ "endpoint_id": a })), json!({ "count": 3 }));
    for id in &of_a {
        assert_retried(&c, *id, 4);
    }
    for id in &of_b {
        assert_eq!(get_task(&c, *id)["status"], "failed");
    }
    // Nothing of `a` is failed any more; another app sees nothing of this one.
    assert_eq!(bulk(&c, json!({ "endpoint_id": a })), json!({ "count": 0 }));
    let other = server.client_for_app("app2");
    assert_eq!(
        bulk(&other, json!({ "endpoint_id": b })),
        json!({ "count": 0 })
    );
    assert_eq!(get_task(&c, of_b[0])["status"], "failed");

    // Enabled again, the retried tasks are delivered (to the receiver now answering 200).
    ok(&c, "POST", &format!("/endpoints/{a}/enable"), None);
    for id in &of_a {
        let t = wait_status(&c, *id, "success");
        assert_eq!(t["attempts"], 1);
    }
    assert_eq!(rx.received().len(), 3);
}

#[test]
fn bulk_retry_by_finished_at_range_in_rfc3339_or_epoch_seconds() {
    let t0 = Utc::now().trunc_subsecs(0);
    let server = TestServer::start_manual(t0, |config| {
        config.max_skew_secs = 365 * 86_400;
    });
    let c = server.client();
    let ep = one_try_endpoint(&c, NOWHERE);
    let early = failed_tasks(&c, ep, 2);
    server.advance(TimeDelta::hours(1));
    let late = failed_tasks(&c, ep, 2);
    assert_eq!(
        get_task(&c, late[0])["finished_at"],
        rfc(t0 + TimeDelta::hours(1))
    );
    server.advance(TimeDelta::hours(1));
    disable(&c, ep);

    // `since` alone: the later two. `since` is inclusive.
    let since = rfc(t0 + TimeDelta::hours(1));
    assert_eq!(bulk(&c, json!({ "since": since })), json!({ "count": 2 }));
    for id in &late {
        assert_retried(&c, *id, 1);
    }
    for id in &early {
        assert_eq!(get_task(&c, *id)["status"], "failed");
    }
    // A range that ends before the early ones finished matches nothing; `until` is exclusive.
    let before = (t0 - TimeDelta::minutes(5)).timestamp();
    let body = json!({ "since": before, "until": t0.timestamp() });
    assert_eq!(bulk(&c, body), json!({ "count": 0 }));
    let body = json!({ "since": before, "until": t0.timestamp() + 1, "endpoint_id": ep });
    assert_eq!(bulk(&c, body), json!({ "count": 2 }));
    for id in &early {
        assert_retried(&c, *id, 1);
    }
}

#[test]
fn bulk_retry_by_schedule_or_event() {
    let server = TestServer::start();
    let c = server.client();
    let ep = one_try_endpoint(&c, NOWHERE);
    let event = ok(
        &c,
        "POST",
        "/events",
        Some(json!({ "event_name": "order.paid" })),
    );
    let schedule = ok(
        &c,
        "POST",
        "/schedules",
        Some(json!({ "name": "s", "cron_expr": "0 0 1 1 *", "endpoint_ids": [ep] })),
    );
    let sid = schedule["id"].as_i64().unwrap();
    let triggered = ok(&c, "POST", &format!("/schedules/{sid}/trigger"), None);
    let from_schedule = triggered["task_ids"][0].as_i64().unwrap();
    let event_id = event["id"].as_i64().unwrap();
    let page = ok(&c, "GET", &format!("/tasks?event_id={event_id}"), None);
    let from_event = page["items"][0]["id"].as_i64().unwrap();
    let manual = task_id(&c, ep);
    for id in [from_schedule, from_event, manual] {
        wait_status(&c, id, "failed");
    }
    disable(&c, ep);

    assert_eq!(
        bulk(&c, json!({ "event_id": event_id })),
        json!({ "count": 1 })
    );
    assert_retried(&c, from_event, 1);
    assert_eq!(get_task(&c, from_schedule)["status"], "failed");
    assert_eq!(
        bulk(&c, json!({ "schedule_id": sid })),
        json!({ "count": 1 })
    );
    assert_retried(&c, from_schedule, 1);
    assert_eq!(get_task(&c, manual)["status"], "failed");
}

#[test]
fn bulk_retry_needs_a_filter_and_validates_its_fields() {
    let server = TestServer::start();
    let c = server.client();
    let ep = one_try_endpoint(&c, NOWHERE);
    let failed = failed_tasks(&c, ep, 1)[0];
    let reply = err(&c, "POST", "/tasks/retry", Some(json!({})), 400, 40001);
    let message = reply.body["message"].as_str().unwrap();
    for field in ["endpoint_id", "schedule_id", "event_id", "since"] {
        assert!(message.contains(field), "{message}");
    }
    // Neither `status` nor `until` alone is a filter; an empty body is `{}`.
    for body in [
        json!({ "status": "failed" }),
        json!({ "until": 2_000_000_000 }),
    ] {
        err(&c, "POST", "/tasks/retry", Some(body), 400, 40001);
    }
    let reply = c.send_raw("POST", "/tasks/retry", b"").unwrap();
    assert_eq!((reply.status, reply.code()), (400, 40001));
    expect_field_errors(
        &c,
        "POST",
        "/tasks/retry",
        [
            (json!({ "endpoint_id": "1" }), "endpoint_id"),
            (json!({ "endpoint_id": 0 }), "endpoint_id"),
            (json!({ "schedule_id": 1.5 }), "schedule_id"),
            (json!({ "event_id": -3 }), "event_id"),
            (json!({ "endpoint_id": ep, "status": "pending" }), "status"),
            (json!({ "endpoint_id": ep, "status": 1 }), "status"),
            (json!({ "since": "yesterday" }), "since"),
            (json!({ "endpoint_id": ep, "until": "soon" }), "until"),
            (json!({ "since": 2_000, "until": 1_000 }), "until"),
            (json!({ "endpoint": ep }), "unknown field \"endpoint\""),
        ],
    );
    let reply = c.send_raw("POST", "/tasks/retry", b"[1]").unwrap();
    assert_eq!((reply.status, reply.code()), (400, 40002));
    // Not a task id: the route takes POST only.
    let reply = c.send("GET", "/tasks/retry", None).unwrap();
    assert_eq!((reply.status, reply.code()), (405, 40501));
    // None of the refused calls retried anything.
    assert_eq!(get_task(&c, failed)["status"], "failed");
}

#[test]
fn bulk_retry_leaves_tasks_of_deleted_endpoints_alone_and_retries_canceled_on_request() {
    let server = TestServer::start();
    let c = server.client();
    let kept = one_try_endpoint(&c, NOWHERE);
    let deleted = one_try_endpoint(&c, NOWHERE);
    let of_kept = failed_tasks(&c, kept, 1)[0];
    let of_deleted = failed_tasks(&c, deleted, 2);
    ok(&c, "DELETE", &format!("/endpoints/{deleted}"), None);
    disable(&c, kept);

    let since = json!({ "since": rfc(Utc::now() - TimeDelta::hours(1)) });
    assert_eq!(bulk(&c, since.clone()), json!({ "count": 1 }));
    assert_retried(&c, of_kept, 1);
    let by_endpoint = json!({ "endpoint_id": deleted });
    assert_eq!(bulk(&c, by_endpoint), json!({ "count": 0 }));
    for id in &of_deleted {
        assert_eq!(get_task(&c, *id)["status"], "failed");
    }
    // The single retry refuses them too, naming the deleted endpoint.
    let reply = err(
        &c,
        "POST",
        &format!("/tasks/{}/retry", of_deleted[0]),
        None,
        409,
        40901,
    );
    assert!(reply.body["message"].as_str().unwrap().contains("deleted"));

    // Canceled tasks: only with `status: canceled`.
    let waiting = one_try_endpoint(&c, NOWHERE);
    disable(&c, waiting);
    let canceled = task_id(&c, waiting);
    let still_pending = task_id(&c, waiting);
    ok(&c, "POST", &format!("/tasks/{canceled}/cancel"), None);
    assert_eq!(
        bulk(&c, json!({ "endpoint_id": waiting })),
        json!({ "count": 0 })
    );
    assert_eq!(get_task(&c, canceled)["status"], "canceled");
    let body = json!({ "endpoint_id": waiting, "status": "canceled" });
    assert_eq!(bulk(&c, body), json!({ "count": 1 }));
    assert_retried(&c, canceled, 1);
    assert_eq!(get_task(&c, still_pending)["status"], "pending");
}

#[test]
fn bulk_retry_stops_at_its_cap_and_says_more() {
    let server = TestServer::start_with(|config| config.bulk_retry_max = 3);
    let c = server.client();
    let ep = one_try_endpoint(&c, NOWHERE);
    let ids = failed_tasks(&c, ep, 5);
    disable(&c, ep);
    let filter = json!({ "endpoint_id": ep });
    assert_eq!(
        bulk(&c, filter.clone()),
        json!({ "count": 3, "more": true })
    );
    // The lowest ids went first.
    for id in &ids[..3] {
        assert_retried(&c, *id, 1);
    }
    assert_eq!(get_task(&c, ids[4])["status"], "failed");
    assert_eq!(bulk(&c, filter.clone()), json!({ "count": 2 }));
    assert_eq!(bulk(&c, filter), json!({ "count": 0 }));
    for id in &ids {
        assert_retried(&c, *id, 1);
    }
}
