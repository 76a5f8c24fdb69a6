//! docs/design.md §11 "Seeing what happens", through a real server and loopback receivers: endpoint
//! health, `status=retrying`, local schedule times around DST changes, auto-disable, operator
//! events (and no storm), and `POST /endpoints/{id}/test`.

use crate::delivery::{endpoint, policy, task_id, wait_attempts, wait_status};
use crate::support::{Answer, Receiver, TestServer, err, ok, wait_for};
use chrono::{DateTime, SubsecRound, TimeZone, Utc};
use serde_json::{Value, json};
use std::time::Duration;
use webhookd::client::Client;

const WAIT: Duration = Duration::from_secs(10);

fn get_endpoint(c: &Client, id: i64) -> Value {
    ok(c, "GET", &format!("/endpoints/{id}"), None)
}

/// Ids of the tasks `GET /tasks?{query}` lists.
fn task_ids(c: &Client, query: &str) -> Vec<i64> {
    ok(c, "GET", &format!("/tasks?{query}"), None)["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_i64().unwrap())
        .collect()
}

/// Every event of the app whose name starts with `webhookd.`, oldest first.
fn operator_events(c: &Client) -> Vec<Value> {
    let mut events: Vec<Value> = ok(c, "GET", "/events?page_size=100", None)["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["event_name"].as_str().unwrap().starts_with("webhookd."))
        .cloned()
        .collect();
    events.reverse();
    events
}

#[test]
fn health_fields_follow_failures_a_success_and_a_410() {
    let server = TestServer::start();
    let c = server.client();
    let rx = Receiver::start();
    let p = policy(&c, 2, "fixed", 0, 0);
    let ep = endpoint(&c, &rx.url, json!({ "retry_policy_id": p }));
    let fresh = get_endpoint(&c, ep);
    assert_eq!(
        (
            &fresh["disabled_reason"],
            &fresh["last_success_at"],
            &fresh["last_failure_at"],
            &fresh["consecutive_failures"]
        ),
        (&Value::Null, &Value::Null, &Value::Null, &json!(0))
    );

    rx.script([Answer::status(500), Answer::status(503)]);
    let failing = task_id(&c, ep);
    wait_status(&c, failing, "failed");
    let after_failures = get_endpoint(&c, ep);
    assert_eq!(after_failures["consecutive_failures"], 2);
    assert_eq!(after_failures["last_success_at"], Value::Null);
    assert!(after_failures["last_failure_at"].is_string());
    assert_eq!(after_failures["status"], "enabled");

    let succeeding = task_id(&c, ep);
    wait_status(&c, succeeding, "success");
    let after_success = get_endpoint(&c, ep);
    assert_eq!(after_success["consecutive_failures"], 0);
    assert!(after_success["last_success_at"].is_string());
    assert_eq!(
        after_success["last_failure_at"],
        after_failures["last_failure_at"]
    );

    rx.script([Answer::status(410)]);
    let gone = task_id(&c, ep);
    wait_status(&c, gone, "failed");
    let disabled = get_endpoint(&c, ep);
    assert_eq!(disabled["status"], "disabled");
    assert_eq!(disabled["disabled_reason"], "gone");
    assert_eq!(disabled["consecutive_failures"], 1);
    assert_eq!(
        disabled["last_success_at"],
        after_success["last_success_at"]
    );
}

/// Endpoints with delivery controls (in order at `max_in_flight: 1`, a rate limit) are claimed
/// through the fair gate's own paths; their results still land in the health fields.
#[test]
fn health_fields_follow_deliveries_of_limited_endpoints() {
    let server = TestServer::start();
    let c = server.client();
    let rx = Receiver::start();
    rx.set_default(Answer::status(500));
    let p = policy(&c, 1, "fixed", 0, 0);
    for limits in [
        json!({ "max_in_flight": 1 }),
        json!({ "rate_limit_per_sec": 50 }),
    ] {
        let mut fields = limits.clone();
        fields["retry_policy_id"] = json!(p);
        let ep = endpoint(&c, &rx.url, fields);
        let tasks: Vec<i64> = (0..3).map(|_| task_id(&c, ep)).collect();
        for t in &tasks {
            wait_status(&c, *t, "failed");
        }
        let e = get_endpoint(&c, ep);
        assert_eq!(e["consecutive_failures"], 3, "{limits}: {e}");
        assert!(e["last_failure_at"].is_string(), "{limits}: {e}");
        assert_eq!(e["last_success_at"], Value::Null);
    }
}

#[test]
fn manual_disable_and_enable_set_the_reason_and_reset_the_streak() {
    let server = TestServer::start();
    let c = server.client();
    let rx = Receiver::start();
    rx.set_default(Answer::status(500));
    let p = policy(&c, 3, "fixed", 0, 0);
    let ep = endpoint(&c, &rx.url, json!({ "retry_policy_id": p }));
    wait_status(&c, task_id(&c, ep), "failed");
    assert_eq!(get_endpoint(&c, ep)["consecutive_failures"], 3);

    let disabled = ok(&c, "POST", &format!("/endpoints/{ep}/disable"), None);
    assert_eq!(
        (&disabled["status"], &disabled["disabled_reason"]),
        (&json!("disabled"), &json!("manual"))
    );
    let again = ok(&c, "POST", &format!("/endpoints/{ep}/disable"), None);
    assert_eq!(again["disabled_reason"], "manual");
    assert_eq!(again["updated_at"], disabled["updated_at"]);
    // A PATCH does not touch status or health.
    let patched = ok(
        &c,
        "PATCH",
        &format!("/endpoints/{ep}"),
        Some(json!({ "name": "renamed" })),
    );
    assert_eq!(
        (&patched["status"], &patched["disabled_reason"]),
        (&json!("disabled"), &json!("manual"))
    );

    let enabled = ok(&c, "POST", &format!("/endpoints/{ep}/enable"), None);
    assert_eq!(enabled["status"], "enabled");
    assert_eq!(enabled["disabled_reason"], Value::Null);
    assert_eq!(enabled["consecutive_failures"], 0);
    assert!(enabled["last_failure_at"].is_string(), "history is kept");
    let listed = ok(&c, "GET", "/endpoints?status=enabled", None);
    assert_eq!(listed["items"][0]["disabled_reason"], Value::Null);
}

#[test]
fn status_retrying_lists_pending_tasks_with_a_failed_attempt() {
    let server = TestServer::start();
    let c = server.client();
    let rx = Receiver::start();
    rx.set_default(Answer::status(500));
    let slow = policy(&c, 3, "fixed", 3600, 3600);
    let once = policy(&c, 1, "fixed", 0, 0);
    let retried_ep = endpoint(&c, &rx.url, json!({ "retry_policy_id": slow }));
    let failing_ep = endpoint(&c, &rx.url, json!({ "retry_policy_id": once }));
    let held_ep = endpoint(&c, &rx.url, json!({}));
    ok(&c, "POST", &format!("/endpoints/{held_ep}/disable"), None);

    let retrying = task_id(&c, retried_ep);
    let failed = task_id(&c, failing_ep);
    let waiting = task_id(&c, held_ep);
    let first = wait_attempts(&c, retrying, 1);
    assert_eq!(first["status"], "pending", "the record still says pending");
    wait_status(&c, failed, "failed");

    assert_eq!(task_ids(&c, "status=retrying"), vec![retrying]);
    assert_eq!(task_ids(&c, "status=pending"), vec![waiting, retrying]);
    assert_eq!(task_ids(&c, "status=failed"), vec![failed]);
    assert_eq!(
        task_ids(&c, &format!("status=retrying&endpoint_id={held_ep}")),
        Vec::<i64>::new()
    );
    let page = ok(&c, "GET", "/tasks?status=retrying", None);
    assert_eq!(page["total"], 1);
    err(&c, "GET", "/tasks?status=retried", None, 400, 40001);

    // Another app sees none of them.
    let other = server.client_for_app("app2");
    assert_eq!(task_ids(&other, "status=retrying"), Vec::<i64>::new());
}

fn wide_skew(config: &mut webhookd::config::Config) {
    config.max_skew_secs = 20 * 365 * 86_400;
}

fn at(y: i32, mo: u32, d: u32, h: u32, mi: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(y, mo, d, h, mi, 0).unwrap()
}

/// Creates a schedule and returns its (`next_run_at`, `next_run_at_local`).
fn schedule_times(c: &Client, cron: &str, tz: &str) -> (i64, Value, Value) {
    let s = ok(
        c,
        "POST",
        "/schedules",
        Some(json!({ "name": tz, "cron_expr": cron, "timezone": tz })),
    );
    (
        s["id"].as_i64().unwrap(),
        s["next_run_at"].clone(),
        s["next_run_at_local"].clone(),
    )
}

#[test]
fn local_times_in_four_zones_around_dst_changes() {
    // The day before Europe's spring-forward (2027-03-28, 02:00 → 03:00 in Berlin).
    let server = TestServer::start_manual(at(2027, 3, 27, 12, 0), wide_skew);
    let c = server.client();
    let (berlin, utc, local) = schedule_times(&c, "30 2 * * *", "Europe/Berlin");
    assert_eq!(
        (utc, local),
        (
            json!("2027-03-28T01:00:00Z"),
            json!("2027-03-28T03:00:00+02:00")
        ),
        "02:30 does not exist that night: the first instant after the gap"
    );
    let (_, utc, local) = schedule_times(&c, "0 9 * * *", "Asia/Kathmandu");
    assert_eq!(
        (utc, local),
        (
            json!("2027-03-28T03:15:00Z"),
            json!("2027-03-28T09:00:00+05:45")
        )
    );
    let (_, utc, local) = schedule_times(&c, "45 1 * * *", "Australia/Lord_Howe");
    assert_eq!(
        (utc, local),
        (
            json!("2027-03-27T14:45:00Z"),
            json!("2027-03-28T01:45:00+11:00")
        )
    );
    let (_, utc, local) = schedule_times(&c, "0 12 * * *", "America/New_York");
    assert_eq!(
        (utc, local),
        (
            json!("2027-03-27T16:00:00Z"),
            json!("2027-03-27T12:00:00-04:00")
        )
    );

    // Past the change, the Berlin schedule's next run shows the summer offset.
    server.advance(chrono::Duration::hours(24));
    let next = wait_for(WAIT, || {
        let s = ok(&c, "GET", &format!("/schedules/{berlin}"), None);
        (s["next_run_at"] == "2027-03-29T00:30:00Z").then_some(s)
    })
    .expect("the Berlin schedule moved on");
    assert_eq!(next["next_run_at_local"], "2027-03-29T02:30:00+02:00");
    let paused = ok(&c, "POST", &format!("/schedules/{berlin}/pause"), None);
    assert_eq!(
        (&paused["next_run_at"], &paused["next_run_at_local"]),
        (&Value::Null, &Value::Null)
    );
    let listed = ok(&c, "GET", "/schedules?status=active", None);
    assert!(
        listed["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["next_run_at_local"].is_string())
    );

    let preview = |cron: &str, tz: &str, from: &str, count: i64| {
        ok(
            &c,
            "POST",
            "/cron/preview",
            Some(json!({ "cron_expr": cron, "timezone": tz, "from": from, "count": count })),
        )
    };
    // New York springs forward on 2027-03-14: 02:30 does not exist.
    let ny = preview("30 2 * * *", "America/New_York", "2027-03-13T12:00:00Z", 2);
    assert_eq!(
        ny["next_runs"],
        json!(["2027-03-14T07:00:00Z", "2027-03-15T06:30:00Z"])
    );
    assert_eq!(
        ny["next_runs_local"],
        json!(["2027-03-14T03:00:00-04:00", "2027-03-15T02:30:00-04:00"])
    );
    // Lord Howe falls back half an hour on 2027-04-04 (02:00 +11:00 → 01:30 +10:30): 01:45
    // happens twice and a fixed-time schedule fires at the first.
    let lh = preview(
        "45 1 * * *",
        "Australia/Lord_Howe",
        "2027-04-02T12:00:00Z",
        3,
    );
    assert_eq!(
        lh["next_runs"],
        json!([
            "2027-04-02T14:45:00Z",
            "2027-04-03T14:45:00Z",
            "2027-04-04T15:15:00Z"
        ])
    );
    assert_eq!(
        lh["next_runs_local"],
        json!([
            "2027-04-03T01:45:00+11:00",
            "2027-04-04T01:45:00+11:00",
            "2027-04-05T01:45:00+10:30"
        ])
    );
    let ktm = preview("0 0 * * *", "Asia/Kathmandu", "2027-03-28T00:00:00Z", 1);
    assert_eq!(ktm["next_runs_local"], json!(["2027-03-29T00:00:00+05:45"]));
    let utc = preview("0 0 * * *", "UTC", "2027-03-28T00:00:00Z", 1);
    assert_eq!(utc["next_runs_local"], json!(["2027-03-29T00:00:00+00:00"]));
    // 9999-12-31T10:00Z is 10000-01-01 at +14:00, which RFC 3339 cannot write: both lists end
    // before it, in step.
    let kiritimati = preview("0 0 * * *", "Pacific/Kiritimati", "9999-12-29T00:00:00Z", 5);
    assert_eq!(
        (&kiritimati["next_runs"], &kiritimati["next_runs_local"]),
        (
            &json!(["9999-12-29T10:00:00Z", "9999-12-30T10:00:00Z"]),
            &json!(["9999-12-30T00:00:00+14:00", "9999-12-31T00:00:00+14:00"])
        )
    );
}

#[test]
fn auto_disable_after_a_fractional_number_of_hours() {
    // 0.003 h = 10.8 s. Attempts come 2 s apart on the manual clock: the fifth failure (8 s
    // into the streak) is not yet long enough, the seventh (12 s) is.
    let t0 = Utc::now().trunc_subsecs(0);
    let server = TestServer::start_manual(t0, |config| {
        config.max_skew_secs = 3600;
        config.disable_failing_after_hours = 0.003;
    });
    let c = server.client();
    let rx = Receiver::start();
    rx.set_default(Answer::status(500));
    let watcher_rx = Receiver::start();
    let watcher = endpoint(
        &c,
        &watcher_rx.url,
        json!({ "filter_events": "webhookd.endpoint.*" }),
    );
    let p = policy(&c, 20, "fixed", 2, 2);
    let ep = endpoint(&c, &rx.url, json!({ "retry_policy_id": p }));
    let id = task_id(&c, ep);
    for n in 1..=6 {
        wait_attempts(&c, id, n);
        let e = get_endpoint(&c, ep);
        assert_eq!(e["consecutive_failures"], n);
        assert_eq!(
            e["status"],
            "enabled",
            "after {n} failures over {} s",
            2 * (n - 1)
        );
        server.advance(chrono::Duration::seconds(2));
    }
    wait_attempts(&c, id, 7);
    let disabled = get_endpoint(&c, ep);
    assert_eq!(
        (&disabled["status"], &disabled["disabled_reason"]),
        (&json!("disabled"), &json!("failing"))
    );
    let got = watcher_rx.wait_for(1, WAIT);
    assert_eq!(got.len(), 1);
    assert_eq!(
        got[0].header("x-service-event"),
        Some("webhookd.endpoint.disabled")
    );
    assert_eq!(
        got[0].json(),
        json!({ "endpoint_id": ep, "reason": "failing", "task_id": null, "consecutive_failures": 7 })
    );
    // The watcher's task recorded first: on PostgreSQL a claim is leased on the server's
    // clock, and a jump past its lease before its result is in hands it back to be sent again
    // (seen once under load in CI: a second "disabled" at the watcher).
    let watched = ok(&c, "GET", &format!("/tasks?endpoint_id={watcher}"), None);
    assert_eq!(
        watched["items"].as_array().map(Vec::len),
        Some(1),
        "{watched}"
    );
    wait_status(&c, watched["items"][0]["id"].as_i64().unwrap(), "success");
    // Disabled: the task waits, unattempted, however far the clock moves.
    server.advance(chrono::Duration::seconds(60));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(ok(&c, "GET", &format!("/tasks/{id}"), None)["attempts"], 7);

    // Enabling resets the streak: five more failures 2 s apart stay under the window.
    let enabled = ok(&c, "POST", &format!("/endpoints/{ep}/enable"), None);
    assert_eq!(enabled["consecutive_failures"], 0);
    for n in 8..=12 {
        wait_attempts(&c, id, n);
        // Not after the last: the 13th would be due at once and could be made before the
        // endpoint is read (it was, on a loaded machine).
        if n < 12 {
            server.advance(chrono::Duration::seconds(2));
        }
    }
    let e = get_endpoint(&c, ep);
    assert_eq!(
        (&e["status"], &e["consecutive_failures"]),
        (&json!("enabled"), &json!(5))
    );
    assert_eq!(get_endpoint(&c, watcher)["status"], "enabled");
    assert_eq!(
        watcher_rx.received().len(),
        1,
        "no second disabling was reported"
    );
}

/// 0 means never, not "at once": eight failures over seven hours leave the endpoint enabled.
#[test]
fn zero_hours_never_auto_disables() {
    let t0 = Utc::now().trunc_subsecs(0);
    let server = TestServer::start_manual(t0, |config| {
        wide_skew(config);
        config.disable_failing_after_hours = 0.0;
    });
    let c = server.client();
    let rx = Receiver::start();
    rx.set_default(Answer::status(500));
    let p = policy(&c, 10, "fixed", 3600, 3600);
    let ep = endpoint(&c, &rx.url, json!({ "retry_policy_id": p }));
    let id = task_id(&c, ep);
    // Seven hours of failing. The clock is not moved after the eighth attempt: the ninth would
    // then be due at once and could land before the endpoint is read (it did on PostgreSQL).
    for n in 1..=8 {
        wait_attempts(&c, id, n);
        if n < 8 {
            server.advance(chrono::Duration::hours(1));
        }
    }
    let e = get_endpoint(&c, ep);
    assert_eq!(
        (&e["status"], &e["consecutive_failures"]),
        (&json!("enabled"), &json!(8))
    );
}

#[test]
fn operator_events_reach_webhookd_subscribers_and_not_catch_all_endpoints() {
    let server = TestServer::start();
    let c = server.client();
    let subscriber_rx = Receiver::start();
    let catch_all_rx = Receiver::start();
    let gone_rx = Receiver::start();
    gone_rx.set_default(Answer::status(410));
    let subscriber = endpoint(
        &c,
        &subscriber_rx.url,
        json!({ "filter_events": "order.*, webhookd.*" }),
    );
    let catch_all = endpoint(&c, &catch_all_rx.url, json!({}));
    let gone = endpoint(&c, &gone_rx.url, json!({ "filter_events": "invoice.*" }));

    // A 410: the task fails for good and the endpoint is disabled.
    let t = task_id(&c, gone);
    wait_status(&c, t, "failed");
    // Deleting a schedule's last endpoint pauses it.
    let only = endpoint(&c, &gone_rx.url, json!({ "filter_events": "invoice.*" }));
    let schedule = ok(
        &c,
        "POST",
        "/schedules",
        Some(json!({ "name": "s", "cron_expr": "0 0 1 1 *", "endpoint_ids": [only] })),
    )["id"]
        .as_i64()
        .unwrap();
    ok(&c, "DELETE", &format!("/endpoints/{only}"), None);

    let got = subscriber_rx.wait_for(3, WAIT);
    let mut by_name: Vec<(String, Value)> = got
        .iter()
        .map(|r| (r.header("x-service-event").unwrap().to_string(), r.json()))
        .collect();
    by_name.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(by_name.len(), 3, "{by_name:?}");
    assert_eq!(by_name[0].0, "webhookd.endpoint.disabled");
    assert_eq!(
        by_name[0].1,
        json!({ "endpoint_id": gone, "reason": "gone", "task_id": t, "consecutive_failures": null })
    );
    assert_eq!(by_name[1].0, "webhookd.schedule.paused");
    assert_eq!(
        by_name[1].1,
        json!({ "schedule_id": schedule, "endpoint_id": only, "reason": "endpoint_deleted" })
    );
    assert_eq!(by_name[2].0, "webhookd.task.failed");
    let failed = &by_name[2].1;
    assert_eq!(
        (
            &failed["task_id"],
            &failed["endpoint_id"],
            &failed["reason"]
        ),
        (&json!(t), &json!(gone), &json!("gone"))
    );
    assert_eq!(failed["last_status_code"], 410);
    assert_eq!(failed["attempts"], 1);

    // Every one is an event of the app, made with its tasks.
    let events = operator_events(&c);
    assert_eq!(events.len(), 3);
    assert!(events.iter().all(|e| e["task_count"] == 1));
    // The catch-all endpoint got none of them, but still gets client events.
    ok(
        &c,
        "POST",
        "/events",
        Some(json!({ "event_name": "order.created" })),
    );
    let both = subscriber_rx.wait_for(4, WAIT);
    assert_eq!(both.len(), 4);
    let catch_all_got = catch_all_rx.wait_for(1, WAIT);
    std::thread::sleep(Duration::from_millis(300));
    let names: Vec<_> = catch_all_rx
        .received()
        .iter()
        .map(|r| r.header("x-service-event").map(str::to_string))
        .collect();
    assert_eq!(
        names,
        vec![Some("order.created".to_string())],
        "{catch_all_got:?}"
    );
    assert_eq!(get_endpoint(&c, catch_all)["status"], "enabled");
    assert_eq!(get_endpoint(&c, subscriber)["consecutive_failures"], 0);

    // Clients cannot publish in webhookd's name.
    err(
        &c,
        "POST",
        "/events",
        Some(json!({ "event_name": "webhookd.task.failed" })),
        400,
        40001,
    );
}

#[test]
fn a_failing_subscriber_causes_no_event_storm() {
    let server = TestServer::start();
    let c = server.client();
    let subscriber_rx = Receiver::start();
    subscriber_rx.set_default(Answer::status(500));
    let target_rx = Receiver::start();
    target_rx.set_default(Answer::status(500));
    let once = policy(&c, 1, "fixed", 0, 0);
    let twice = policy(&c, 2, "fixed", 0, 0);
    let subscriber = endpoint(
        &c,
        &subscriber_rx.url,
        json!({ "filter_events": "webhookd.*", "retry_policy_id": twice }),
    );
    let target = endpoint(&c, &target_rx.url, json!({ "retry_policy_id": once }));
    let t = task_id(&c, target);
    wait_status(&c, t, "failed");

    // The task.failed event is tried twice at the subscriber, fails for good, and nothing
    // more comes of it.
    let got = subscriber_rx.wait_for(2, WAIT);
    assert_eq!(got.len(), 2);
    let event_task = wait_for(WAIT, || {
        let failed = ok(
            &c,
            "GET",
            &format!("/tasks?status=failed&endpoint_id={subscriber}"),
            None,
        );
        (failed["total"] == 1).then(|| failed["items"][0].clone())
    })
    .expect("the operator event's task failed for good");
    assert_eq!(event_task["task_type"], "event");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(subscriber_rx.received().len(), 2);
    let events = operator_events(&c);
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["event_name"], "webhookd.task.failed");
    assert_eq!(events[0]["payload"]["task_id"], t);

    // A subscriber that answers 410 to an operator event is disabled, silently.
    subscriber_rx.set_default(Answer::status(410));
    let t2 = task_id(&c, target);
    wait_status(&c, t2, "failed");
    let disabled = wait_for(WAIT, || {
        let e = get_endpoint(&c, subscriber);
        (e["status"] == "disabled").then_some(e)
    })
    .expect("the subscriber answered 410");
    assert_eq!(disabled["disabled_reason"], "gone");
    std::thread::sleep(Duration::from_millis(300));
    let names: Vec<_> = operator_events(&c)
        .iter()
        .map(|e| e["event_name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, vec!["webhookd.task.failed", "webhookd.task.failed"]);
}

#[test]
fn test_delivers_now_to_enabled_disabled_and_unreachable_endpoints() {
    let server = TestServer::start();
    let c = server.client();
    let rx = Receiver::start();
    let watcher_rx = Receiver::start();
    endpoint(
        &c,
        &watcher_rx.url,
        json!({ "filter_events": "webhookd.*" }),
    );
    let ep = endpoint(
        &c,
        &format!("{}/hook", rx.url),
        json!({ "secret": "s3cret" }),
    );

    let reply = ok(&c, "POST", &format!("/endpoints/{ep}/test"), None);
    let task_id = reply["task_id"].as_i64().unwrap();
    let attempt = &reply["attempt"];
    assert_eq!(
        (
            &attempt["task_id"],
            &attempt["attempt"],
            &attempt["status_code"]
        ),
        (&json!(task_id), &json!(1), &json!(200))
    );
    assert_eq!(attempt["error"], Value::Null);
    // Delivered before the reply came.
    let got = rx.received();
    assert_eq!(got.len(), 1);
    let r = &got[0];
    let body = r.json();
    assert_eq!(body["type"], "webhookd.test");
    assert_eq!(body["endpoint_id"], ep);
    assert!(DateTime::parse_from_rfc3339(body["sent_at"].as_str().unwrap()).is_ok());
    assert_eq!(
        r.header("x-service-task-id"),
        Some(task_id.to_string().as_str())
    );
    assert_eq!(r.header("x-service-attempt"), Some("1"));
    assert_eq!(
        r.header("webhook-id"),
        Some(format!("task_{task_id}").as_str())
    );
    let ts = r.header("x-service-timestamp").unwrap();
    assert_eq!(r.header("webhook-timestamp"), Some(ts));
    assert_eq!(
        r.header("x-service-signature"),
        Some(webhookd::signing::hmac_hex(b"s3cret", ts, &r.body).as_str())
    );
    assert_eq!(
        r.header("webhook-signature"),
        Some(
            webhookd::signing::standard_webhooks_signature(
                "s3cret",
                &format!("task_{task_id}"),
                ts.parse().unwrap(),
                &r.body
            )
            .as_str()
        )
    );
    let task = ok(&c, "GET", &format!("/tasks/{task_id}"), None);
    assert_eq!(
        (
            &task["task_type"],
            &task["status"],
            &task["attempts"],
            &task["max_attempts"]
        ),
        (&json!("manual"), &json!("success"), &json!(1), &json!(1))
    );
    assert!(get_endpoint(&c, ep)["last_success_at"].is_string());

    // A disabled endpoint is tested too, and stays disabled.
    ok(&c, "POST", &format!("/endpoints/{ep}/disable"), None);
    let reply = ok(&c, "POST", &format!("/endpoints/{ep}/test"), None);
    assert_eq!(reply["attempt"]["status_code"], 200);
    assert_eq!(rx.received().len(), 2);
    assert_eq!(get_endpoint(&c, ep)["status"], "disabled");

    // Unreachable: the reply is the failed attempt; the task failed with no retry.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let dead = endpoint(&c, &dead_url, json!({ "timeout_ms": 2000 }));
    let reply = ok(&c, "POST", &format!("/endpoints/{dead}/test"), None);
    assert_eq!(reply["attempt"]["status_code"], Value::Null);
    assert!(
        reply["attempt"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("connection")),
        "{reply}"
    );
    let dead_task = reply["task_id"].as_i64().unwrap();
    let task = ok(&c, "GET", &format!("/tasks/{dead_task}"), None);
    assert_eq!(
        (&task["status"], &task["attempts"], &task["next_attempt_at"]),
        (&json!("failed"), &json!(1), &Value::Null)
    );
    let e = get_endpoint(&c, dead);
    assert_eq!(
        (&e["consecutive_failures"], &e["status"]),
        (&json!(1), &json!("enabled"))
    );
    // The caller saw the failure: no operator event about it.
    std::thread::sleep(Duration::from_millis(300));
    assert!(operator_events(&c).is_empty());
    assert!(watcher_rx.received().is_empty());

    err(&c, "POST", "/endpoints/999999/test", None, 404, 40401);
}

/// A test delivery signs like a pool delivery during a secret rotation's overlap: with the new
/// and the old secret.
#[test]
fn test_delivery_carries_both_signatures_during_a_rotation() {
    let server = TestServer::start();
    let c = server.client();
    let rx = Receiver::start();
    let old = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let ep = endpoint(&c, &rx.url, json!({ "secret": old }));
    let rotated = ok(
        &c,
        "POST",
        &format!("/endpoints/{ep}/rotate-secret"),
        Some(json!({ "overlap_secs": 3600 })),
    );
    let new = rotated["secret"].as_str().unwrap().to_string();
    assert_ne!(new, old);

    let reply = ok(&c, "POST", &format!("/endpoints/{ep}/test"), None);
    assert_eq!(reply["attempt"]["status_code"], 200);
    let task_id = reply["task_id"].as_i64().unwrap();
    let got = rx.received();
    assert_eq!(got.len(), 1);
    let r = &got[0];
    let ts = r.header("x-service-timestamp").unwrap();
    let hex: Vec<&str> = r
        .header("x-service-signature")
        .unwrap()
        .split(',')
        .collect();
    assert_eq!(hex.len(), 2, "new and old during the overlap");
    assert!(webhookd::signing::verify_hex(
        new.as_bytes(),
        ts,
        &r.body,
        hex[0]
    ));
    assert!(webhookd::signing::verify_hex(
        old.as_bytes(),
        ts,
        &r.body,
        hex[1]
    ));
    let standard = |secret: &str| {
        webhookd::signing::standard_webhooks_signature(
            secret,
            &format!("task_{task_id}"),
            ts.parse().unwrap(),
            &r.body,
        )
    };
    assert_eq!(
        r.header("webhook-signature"),
        Some(format!("{} {}", standard(&new), standard(old)).as_str())
    );
}

#[test]
fn test_answers_within_the_endpoint_timeout() {
    let server = TestServer::start();
    let c = server.client();
    let rx = Receiver::start();
    // The receiver would answer after 30 s: a reply before that did not wait for it (the
    // endpoint's 300 ms timeout cut the attempt), however slow a loaded machine is.
    const ANSWER_AFTER: Duration = Duration::from_secs(30);
    rx.set_default(Answer::status(200).delayed(ANSWER_AFTER));
    let ep = endpoint(&c, &rx.url, json!({ "timeout_ms": 300 }));
    let started = std::time::Instant::now();
    let reply = ok(&c, "POST", &format!("/endpoints/{ep}/test"), None);
    assert!(
        started.elapsed() < ANSWER_AFTER,
        "{:?}: the test waited for the receiver",
        started.elapsed()
    );
    assert_eq!(reply["attempt"]["status_code"], Value::Null);
    assert!(
        reply["attempt"]["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("timeout")),
        "{reply}"
    );
}
