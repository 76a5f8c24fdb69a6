//! Schedules through the server: the API with its validation and 409s, `/cron/preview`, the
//! scheduler firing due schedules on a manual clock, restarts after downtime, and idempotent
//! firing.

use crate::support::{Receiver, TestServer, err, expect_field_errors, get_text, ok, wait_for};
use chrono::{DateTime, TimeDelta, TimeZone, Utc};
use serde_json::{Value, json};
use std::time::Duration;
use webhookd::client::Client;
use webhookd::store::schedules::ScheduleStatus;
use webhookd::store::{Page, StoreError, tasks::Task, tasks::TaskFilter};

/// 2025-06-02 (no daylight-saving change near it) at the given UTC time.
pub(crate) fn at(h: u32, m: u32, s: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2025, 6, 2, h, m, s).unwrap()
}

pub(crate) fn rfc(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// A server whose clock stands at `start` until the test moves it. Requests are signed with
/// the real clock, so the skew window is opened wide.
pub(crate) fn server_at(start: DateTime<Utc>) -> TestServer {
    TestServer::start_manual(start, wide_skew)
}

pub(crate) fn wide_skew(config: &mut webhookd::config::Config) {
    config.max_skew_secs = 20 * 365 * 86_400;
}

/// Creates an enabled endpoint that nothing listens on; returns its id.
pub(crate) fn endpoint(client: &Client, name: &str) -> i64 {
    let body = json!({"name": name, "url": "http://127.0.0.1:9/hook"});
    ok(client, "POST", "/endpoints", Some(body))["id"]
        .as_i64()
        .unwrap()
}

pub(crate) fn schedule(client: &Client, body: Value) -> Value {
    ok(client, "POST", "/schedules", Some(body))
}

pub(crate) fn id(record: &Value) -> i64 {
    record["id"].as_i64().unwrap()
}

/// The first instant `/cron/preview` gives for an expression after `from`.
fn first_preview(client: &Client, cron_expr: &str, timezone: &str, from: DateTime<Utc>) -> Value {
    let body = json!({"cron_expr": cron_expr, "timezone": timezone, "count": 1, "from": rfc(from)});
    ok(client, "POST", "/cron/preview", Some(body))["next_runs"][0].clone()
}

/// The tasks of a schedule, read from the database, oldest first.
pub(crate) fn tasks_of(server: &TestServer, schedule_id: i64) -> Vec<Task> {
    let store = webhookd::store::open(&server.db, 1).unwrap();
    let filter = TaskFilter {
        schedule_id: Some(schedule_id),
        ..TaskFilter::default()
    };
    let page = Page {
        page: 1,
        page_size: 1000,
    };
    let (_, mut tasks) = store
        .read::<_, webhookd::store::StoreError>(|tx| tx.list_tasks("app1", &filter, page))
        .unwrap();
    tasks.reverse();
    tasks
}

/// Waits until the schedule's tasks number `n` (failing after a few seconds), then returns them.
pub(crate) fn wait_tasks(server: &TestServer, schedule_id: i64, n: usize) -> Vec<Task> {
    wait_for(Duration::from_secs(5), || {
        let tasks = tasks_of(server, schedule_id);
        (tasks.len() >= n).then_some(tasks)
    })
    .unwrap_or_else(|| {
        panic!(
            "schedule {schedule_id} has {} tasks, expected {n}",
            tasks_of(server, schedule_id).len()
        )
    })
}

/// Waits until the scheduler has moved the schedule's `next_run_at` to `want`.
pub(crate) fn wait_next_run(client: &Client, schedule_id: i64, want: DateTime<Utc>) {
    let path = format!("/schedules/{schedule_id}");
    let moved = wait_for(Duration::from_secs(5), || {
        (ok(client, "GET", &path, None)["next_run_at"] == rfc(want)).then_some(())
    });
    assert!(moved.is_some(), "next_run_at never became {}", rfc(want));
}

#[test]
fn schedule_create_validates_and_returns_every_field() {
    let server = server_at(at(11, 59, 30));
    let client = server.client();
    let e1 = endpoint(&client, "first");
    let bad = [
        (json!({"cron_expr": "* * * * *"}), "name"),
        (json!({"name": "s"}), "cron_expr"),
        (json!({"name": "", "cron_expr": "* * * * *"}), "name"),
        (
            json!({"name": "s", "cron_expr": "0 * * * * *"}),
            "cron_expr",
        ),
        (json!({"name": "s", "cron_expr": "@reboot"}), "cron_expr"),
        (json!({"name": "s", "cron_expr": 5}), "cron_expr"),
        (
            json!({"name": "s", "cron_expr": "* * * * *", "timezone": "Mars/Olympus"}),
            "timezone",
        ),
        (
            json!({"name": "s", "cron_expr": "* * * * *", "payload": [1]}),
            "payload",
        ),
        (
            json!({"name": "s", "cron_expr": "* * * * *", "payload": "not json"}),
            "payload",
        ),
        (
            json!({"name": "s", "cron_expr": "* * * * *", "endpoint_ids": [e1, 999_999]}),
            "endpoint_ids",
        ),
        (
            json!({"name": "s", "cron_expr": "* * * * *", "endpoint_ids": "1"}),
            "endpoint_ids",
        ),
    ];
    expect_field_errors(&client, "POST", "/schedules", bad);
    // Another app's endpoint is as unknown as a missing one.
    let other = server.client_for_app("app2");
    let foreign = endpoint(&other, "theirs");
    let body = json!({"name": "s", "cron_expr": "* * * * *", "endpoint_ids": [foreign]});
    err(&client, "POST", "/schedules", Some(body), 400, 40001);

    let created = schedule(
        &client,
        json!({"name": "nightly", "cron_expr": "30 2 * * *", "timezone": "Europe/Berlin",
               "payload": {"job": "report"}, "endpoint_ids": [e1, e1]}),
    );
    assert!(id(&created) > 0);
    assert_eq!(created["app_id"], "app1");
    assert_eq!(created["name"], "nightly");
    assert_eq!(created["cron_expr"], "30 2 * * *");
    assert_eq!(created["timezone"], "Europe/Berlin");
    assert_eq!(created["payload"], json!({"job": "report"}));
    assert_eq!(created["status"], "active");
    assert_eq!(created["endpoint_ids"], json!([e1]));
    assert_eq!(
        created["endpoint_names"],
        json!({ e1.to_string(): "first" })
    );
    assert_eq!(created["created_at"], rfc(at(11, 59, 30)));
    assert_eq!(created["updated_at"], rfc(at(11, 59, 30)));
    assert_eq!(created["last_run_at"], Value::Null);
    // 02:30 CEST is 00:30Z, tomorrow.
    assert_eq!(created["next_run_at"], "2025-06-03T00:30:00Z");
    assert_eq!(
        created["next_run_at"],
        first_preview(&client, "30 2 * * *", "Europe/Berlin", at(11, 59, 30))
    );

    let defaults = schedule(&client, json!({"name": "d", "cron_expr": "@hourly"}));
    assert_eq!(defaults["timezone"], "UTC");
    assert_eq!(defaults["payload"], json!({}));
    assert_eq!(defaults["endpoint_ids"], json!([]));
    assert_eq!(defaults["endpoint_names"], json!({}));
    assert_eq!(defaults["cron_expr"], "@hourly");
    assert_eq!(defaults["next_run_at"], rfc(at(12, 0, 0)));
    // On create a payload is an object; only PATCH also takes a string holding one.
    let texty = json!({"name": "t", "cron_expr": "* * * * *", "payload": "{\"a\":1}"});
    err(&client, "POST", "/schedules", Some(texty), 400, 40001);
}

#[test]
fn schedule_list_get_patch_pause_resume_delete() {
    let server = server_at(at(11, 59, 30));
    let client = server.client();
    let (e1, e2) = (endpoint(&client, "first"), endpoint(&client, "second"));
    let s1 = id(&schedule(
        &client,
        json!({"name": "one", "cron_expr": "*/5 * * * *", "endpoint_ids": [e1]}),
    ));
    let s2 = id(&schedule(
        &client,
        json!({"name": "two", "cron_expr": "0 9 * * 1-5"}),
    ));
    let path = format!("/schedules/{s1}");

    // List: newest first, status filter, paging.
    let page = ok(&client, "GET", "/schedules", None);
    assert_eq!(page["total"], 2);
    assert_eq!(page["items"][0]["id"], s2);
    assert_eq!(page["items"][1]["endpoint_names"][e1.to_string()], "first");
    let page = ok(&client, "GET", "/schedules?page_size=1&page=2", None);
    assert_eq!(
        (page["total"].as_i64(), page["page_size"].as_i64()),
        (Some(2), Some(1))
    );
    assert_eq!(page["items"][0]["id"], s1);
    assert_eq!(
        ok(&client, "GET", "/schedules?status=paused", None)["total"],
        0
    );
    err(
        &client,
        "GET",
        "/schedules?status=deleted",
        None,
        400,
        40001,
    );
    err(&client, "GET", "/schedules?status=bogus", None, 400, 40001);

    // Read; missing and another app's ids are 404.
    assert_eq!(ok(&client, "GET", &path, None)["name"], "one");
    err(&client, "GET", "/schedules/999999", None, 404, 40401);
    let other = server.client_for_app("app2");
    err(&other, "GET", &path, None, 404, 40401);
    err(
        &other,
        "PATCH",
        &path,
        Some(json!({"name": "x"})),
        404,
        40401,
    );
    err(&other, "POST", &format!("{path}/pause"), None, 404, 40401);
    err(&other, "POST", &format!("{path}/trigger"), None, 404, 40401);
    err(&other, "DELETE", &path, None, 404, 40401);
    assert_eq!(ok(&other, "GET", "/schedules", None)["total"], 0);

    // PATCH: omitted fields stay, each sent field is validated, updated_at moves.
    server.advance(TimeDelta::seconds(1));
    let patched = ok(
        &client,
        "PATCH",
        &path,
        Some(json!({"name": "renamed", "payload": "{\"k\":\"v\"}", "endpoint_ids": [e2, e1]})),
    );
    assert_eq!(patched["name"], "renamed");
    assert_eq!(patched["cron_expr"], "*/5 * * * *");
    assert_eq!(patched["payload"], json!({"k": "v"}));
    assert_eq!(patched["endpoint_ids"], json!([e2, e1]));
    assert_eq!(
        patched["endpoint_names"],
        json!({ e1.to_string(): "first", e2.to_string(): "second" })
    );
    assert_eq!(patched["updated_at"], rfc(at(11, 59, 31)));
    assert_eq!(patched["next_run_at"], rfc(at(12, 0, 0)));
    for body in [
        json!({"cron_expr": "61 * * * *"}),
        json!({"timezone": "Nowhere/Special"}),
        json!({"payload": 3}),
        json!({"endpoint_ids": [999_999]}),
        json!({"name": ""}),
    ] {
        err(&client, "PATCH", &path, Some(body), 400, 40001);
    }
    err(&client, "PATCH", &path, Some(json!([1])), 400, 40002);
    assert_eq!(ok(&client, "GET", &path, None), patched);
    // A new expression or zone recomputes next_run_at, as the preview shows it.
    let patched = ok(
        &client,
        "PATCH",
        &path,
        Some(json!({"cron_expr": "0 8 * * *", "timezone": "America/New_York"})),
    );
    assert_eq!(patched["next_run_at"], "2025-06-02T12:00:00Z");
    assert_eq!(
        patched["next_run_at"],
        first_preview(&client, "0 8 * * *", "America/New_York", at(11, 59, 31))
    );
    let patched = ok(
        &client,
        "PATCH",
        &path,
        Some(json!({"timezone": "Asia/Tokyo"})),
    );
    assert_eq!(patched["next_run_at"], "2025-06-02T23:00:00Z");

    // Deleting an endpoint drops it from the schedule's targets.
    ok(&client, "DELETE", &format!("/endpoints/{e2}"), None);
    let read = ok(&client, "GET", &path, None);
    assert_eq!(read["endpoint_ids"], json!([e1]));
    assert_eq!(read["endpoint_names"], json!({ e1.to_string(): "first" }));

    // Pause (idempotent) clears next_run_at; resume plans from now, without catch-up.
    let paused = ok(&client, "POST", &format!("{path}/pause"), None);
    assert_eq!(paused["status"], "paused");
    assert_eq!(paused["next_run_at"], Value::Null);
    assert_eq!(ok(&client, "POST", &format!("{path}/pause"), None), paused);
    assert_eq!(
        ok(&client, "GET", "/schedules?status=paused", None)["total"],
        1
    );
    // Patching a paused schedule's expression leaves it paused, with no next run.
    let still = ok(
        &client,
        "PATCH",
        &path,
        Some(json!({"cron_expr": "0 * * * *"})),
    );
    assert_eq!(
        (still["status"].as_str(), &still["next_run_at"]),
        (Some("paused"), &Value::Null)
    );
    server.advance(TimeDelta::hours(3));
    let resumed = ok(&client, "POST", &format!("{path}/resume"), None);
    assert_eq!(resumed["status"], "active");
    assert_eq!(resumed["next_run_at"], rfc(at(15, 0, 0)));
    assert_eq!(
        ok(&client, "POST", &format!("{path}/resume"), None),
        resumed
    );
    assert!(
        tasks_of(&server, s1).is_empty(),
        "no catch-up of paused time"
    );

    // Delete is soft: still readable, never listed, frozen (409), and repeatable.
    let deleted = ok(&client, "DELETE", &path, None);
    assert_eq!(deleted, json!({"id": s1, "deleted": true}));
    let read = ok(&client, "GET", &path, None);
    assert_eq!(read["status"], "deleted");
    assert_eq!(read["next_run_at"], Value::Null);
    assert_eq!(ok(&client, "GET", "/schedules", None)["total"], 1);
    for (method, suffix, body) in [
        ("PATCH", "", Some(json!({"name": "back"}))),
        ("POST", "/pause", None),
        ("POST", "/resume", None),
        ("POST", "/trigger", None),
    ] {
        err(
            &client,
            method,
            &format!("{path}{suffix}"),
            body,
            409,
            40901,
        );
    }
    assert_eq!(ok(&client, "DELETE", &path, None), deleted);
    assert_eq!(ok(&client, "GET", &path, None), read);
}

#[test]
fn cron_preview_validates_and_lists_runs_strictly_after_from() {
    let server = server_at(at(11, 59, 30));
    let client = server.client();
    let preview =
        |body: Value| ok(&client, "POST", "/cron/preview", Some(body))["next_runs"].clone();
    // Defaults: UTC, five runs, from now.
    assert_eq!(
        preview(json!({"cron_expr": "0 * * * *"})),
        json!([
            rfc(at(12, 0, 0)),
            rfc(at(13, 0, 0)),
            rfc(at(14, 0, 0)),
            rfc(at(15, 0, 0)),
            rfc(at(16, 0, 0))
        ])
    );
    // Strictly after `from`; `from` as epoch seconds too.
    let from_noon = json!({"cron_expr": "0 * * * *", "count": 2, "from": at(12, 0, 0).timestamp()});
    assert_eq!(
        preview(from_noon),
        json!([rfc(at(13, 0, 0)), rfc(at(14, 0, 0))])
    );
    // Weekdays: 2025-06-06 is a Friday, so the next weekday 09:00 after it is Monday.
    let weekdays = json!({"cron_expr": "0 9 * * 1-5", "count": 2, "from": "2025-06-06T10:00:00Z"});
    assert_eq!(
        preview(weekdays),
        json!(["2025-06-09T09:00:00Z", "2025-06-10T09:00:00Z"])
    );
    assert_eq!(
        preview(json!({"cron_expr": "* * * * *", "count": 100}))
            .as_array()
            .unwrap()
            .len(),
        100
    );

    let bad = [
        (json!({}), "cron_expr"),
        (json!({"cron_expr": "0 0 * * * *"}), "cron_expr"),
        (json!({"cron_expr": "@reboot"}), "cron_expr"),
        (json!({"cron_expr": "0 22-2 * * *"}), "cron_expr"),
        (json!({"cron_expr": "0 0 30 2 *"}), "cron_expr"),
        (json!({"cron_expr": "* * * *"}), "cron_expr"),
        (
            json!({"cron_expr": "* * * * *", "timezone": "Europe/Atlantis"}),
            "timezone",
        ),
        (json!({"cron_expr": "* * * * *", "count": 0}), "count"),
        (json!({"cron_expr": "* * * * *", "count": 101}), "count"),
        (json!({"cron_expr": "* * * * *", "count": "3"}), "count"),
        (json!({"cron_expr": "* * * * *", "from": "soon"}), "from"),
    ];
    expect_field_errors(&client, "POST", "/cron/preview", bad);
}

#[test]
fn cron_preview_follows_daylight_saving_in_berlin() {
    let server = server_at(at(11, 59, 30));
    let client = server.client();
    // Spring forward: 02:30 does not exist on 2025-03-30; it fires once, at 03:00 CEST.
    let spring = first_preview(
        &client,
        "30 2 * * *",
        "Europe/Berlin",
        "2025-03-29T12:00:00Z".parse().unwrap(),
    );
    assert_eq!(spring, "2025-03-30T01:00:00Z");
    // Fall back: 02:30 happens twice on 2025-10-26; it fires once, at the first (CEST).
    let body = json!({"cron_expr": "30 2 * * *", "timezone": "Europe/Berlin", "count": 2,
                      "from": "2025-10-25T12:00:00Z"});
    let runs = ok(&client, "POST", "/cron/preview", Some(body))["next_runs"].clone();
    assert_eq!(
        runs,
        json!(["2025-10-26T00:30:00Z", "2025-10-27T01:30:00Z"])
    );
}

/// The ids a trigger replies are the tasks it made, one per endpoint in the schedule's order,
/// across every statement size the task insert cuts a batch into (41 = 32 + 8 + 1 rows).
#[test]
fn trigger_replies_the_ids_of_the_tasks_it_made_across_insert_chunks() {
    let server = server_at(at(11, 59, 30));
    let client = server.client();
    let endpoints: Vec<i64> = (0..41)
        .map(|i| endpoint(&client, &format!("e{i}")))
        .collect();
    let fired = id(&schedule(
        &client,
        json!({"name": "wide", "cron_expr": "0 0 1 1 *", "endpoint_ids": endpoints}),
    ));
    // Tasks before it, so that ids do not start at 1.
    let other = id(&schedule(
        &client,
        json!({"name": "other", "cron_expr": "0 0 1 1 *", "endpoint_ids": [endpoints[0]]}),
    ));
    ok(
        &client,
        "POST",
        &format!("/schedules/{other}/trigger"),
        None,
    );

    let reply = ok(
        &client,
        "POST",
        &format!("/schedules/{fired}/trigger"),
        None,
    );
    let replied: Vec<i64> = reply["task_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_i64().unwrap())
        .collect();
    let mut made: Vec<(i64, i64)> = tasks_of(&server, fired)
        .iter()
        .map(|t| (t.id, t.endpoint_id))
        .collect();
    made.sort_unstable();
    assert_eq!(replied, made.iter().map(|m| m.0).collect::<Vec<_>>());
    assert_eq!(endpoints, made.iter().map(|m| m.1).collect::<Vec<_>>());
}

#[test]
fn trigger_fires_now_as_manual_tasks_for_enabled_targets() {
    let server = server_at(at(11, 59, 30));
    let client = server.client();
    let (e1, e2, e3) = (
        endpoint(&client, "a"),
        endpoint(&client, "b"),
        endpoint(&client, "c"),
    );
    ok(&client, "POST", &format!("/endpoints/{e2}/disable"), None);
    let listed = id(&schedule(
        &client,
        json!({"name": "l", "cron_expr": "0 0 1 1 *", "payload": {"n": 1}, "endpoint_ids": [e1, e2]}),
    ));
    let all = id(&schedule(
        &client,
        json!({"name": "a", "cron_expr": "0 0 1 1 *"}),
    ));

    let reply = ok(
        &client,
        "POST",
        &format!("/schedules/{listed}/trigger"),
        None,
    );
    let ids = reply["task_ids"].as_array().unwrap();
    assert_eq!(ids.len(), 1, "the disabled endpoint is skipped");
    let tasks = tasks_of(&server, listed);
    assert_eq!(tasks.len(), 1);
    let task = &tasks[0];
    assert_eq!(json!(task.id), ids[0]);
    assert_eq!((task.endpoint_id, task.task_type.as_str()), (e1, "manual"));
    assert_eq!(task.schedule_id, Some(listed));
    assert_eq!(task.run_at, at(11, 59, 30).timestamp_millis());
    assert_eq!(task.payload, json!({"n": 1}));

    // Empty endpoint_ids: every enabled endpoint. Paused schedules can be triggered.
    ok(&client, "POST", &format!("/schedules/{all}/pause"), None);
    let reply = ok(&client, "POST", &format!("/schedules/{all}/trigger"), None);
    assert_eq!(reply["task_ids"].as_array().unwrap().len(), 2);
    let mut targets: Vec<i64> = tasks_of(&server, all)
        .iter()
        .map(|t| t.endpoint_id)
        .collect();
    targets.sort_unstable();
    assert_eq!(targets, vec![e1, e3]);
    // A trigger is not a scheduled run.
    let read = ok(&client, "GET", &format!("/schedules/{all}"), None);
    assert_eq!(
        (read["last_run_at"].clone(), read["next_run_at"].clone()),
        (Value::Null, Value::Null)
    );
}

#[test]
fn scheduler_fires_due_schedules_one_task_per_enabled_target() {
    let server = server_at(at(11, 59, 58));
    let client = server.client();
    let policy = ok(
        &client,
        "POST",
        "/retries/policies",
        Some(json!({"name": "p", "max_attempts": 3, "backoff_type": "fixed"})),
    );
    let e1 = ok(
        &client,
        "POST",
        "/endpoints",
        Some(json!({"name": "a", "url": "http://127.0.0.1:9/a", "retry_policy_id": policy["id"]})),
    )["id"]
        .as_i64()
        .unwrap();
    let (e2, e3) = (endpoint(&client, "b"), endpoint(&client, "c"));
    ok(&client, "POST", &format!("/endpoints/{e2}/disable"), None);
    let minutely = id(&schedule(
        &client,
        json!({"name": "m", "cron_expr": "* * * * *", "payload": {"x": 1}, "endpoint_ids": [e1, e2]}),
    ));
    let noon = id(&schedule(
        &client,
        json!({"name": "n", "cron_expr": "0 12 * * *"}),
    ));
    let paused = id(&schedule(
        &client,
        json!({"name": "p", "cron_expr": "* * * * *"}),
    ));
    ok(&client, "POST", &format!("/schedules/{paused}/pause"), None);

    std::thread::sleep(Duration::from_millis(100));
    assert!(tasks_of(&server, minutely).is_empty(), "nothing is due yet");

    server.advance(TimeDelta::seconds(2));
    let tasks = wait_tasks(&server, minutely, 1);
    assert_eq!(tasks.len(), 1, "the disabled endpoint is skipped");
    let task = &tasks[0];
    assert_eq!(
        (task.endpoint_id, task.task_type.as_str()),
        (e1, "schedule")
    );
    assert_eq!(task.run_at, at(12, 0, 0).timestamp_millis());
    assert_eq!(task.max_attempts, 3);
    assert_eq!(task.payload, json!({"x": 1}));
    let mut targets: Vec<i64> = wait_tasks(&server, noon, 2)
        .iter()
        .map(|t| t.endpoint_id)
        .collect();
    targets.sort_unstable();
    assert_eq!(
        targets,
        vec![e1, e3],
        "empty endpoint_ids: every enabled endpoint"
    );
    assert!(tasks_of(&server, noon).iter().all(|t| t.max_attempts >= 3));
    let read = ok(&client, "GET", &format!("/schedules/{minutely}"), None);
    assert_eq!(read["last_run_at"], rfc(at(12, 0, 0)));
    assert_eq!(read["next_run_at"], rfc(at(12, 1, 0)));
    // Fired exactly on the instant of the manual clock: no lag. The scheduler stores the lag
    // just after its firing commits, so a reader that saw the tasks may be a moment early.
    let deadline = std::time::Instant::now() + crate::support::patient(Duration::from_secs(5));
    let metrics = loop {
        let (_, metrics) = get_text(&format!("{}/metrics", server.url));
        if metrics.contains("webhookd_scheduler_lag_seconds")
            || std::time::Instant::now() > deadline
        {
            break metrics;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        metrics.contains("webhookd_scheduler_lag_seconds 0.0\n"),
        "{metrics}"
    );

    server.advance(TimeDelta::minutes(1));
    let tasks = wait_tasks(&server, minutely, 2);
    assert_eq!(tasks[1].run_at, at(12, 1, 0).timestamp_millis());
    wait_next_run(&client, minutely, at(12, 2, 0));
    assert_eq!(tasks_of(&server, noon).len(), 2);
    assert!(tasks_of(&server, paused).is_empty());
}

#[test]
fn restart_after_downtime_fires_once_for_the_latest_missed_run() {
    let server = server_at(at(12, 0, 30));
    let client = server.client();
    endpoint(&client, "a");
    let minutely = id(&schedule(
        &client,
        json!({"name": "m", "cron_expr": "* * * * *"}),
    ));
    assert!(tasks_of(&server, minutely).is_empty());

    // Down from 12:00:30 to 12:10:30: ten runs missed, one fires (for 12:10).
    let server = server.restart_manual(at(12, 10, 30), wide_skew);
    let client = server.client();
    let tasks = wait_tasks(&server, minutely, 1);
    assert_eq!(tasks[0].run_at, at(12, 10, 0).timestamp_millis());
    wait_next_run(&client, minutely, at(12, 11, 0));
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(tasks_of(&server, minutely).len(), 1);
    let read = ok(&client, "GET", &format!("/schedules/{minutely}"), None);
    assert_eq!(
        (read["status"].as_str(), &read["last_run_at"]),
        (Some("active"), &json!(rfc(at(12, 10, 0))))
    );
}

#[test]
fn restart_after_downtime_beyond_the_grace_skips_missed_runs() {
    let server = server_at(at(12, 0, 30));
    let client = server.client();
    endpoint(&client, "a");
    let minutely = id(&schedule(
        &client,
        json!({"name": "m", "cron_expr": "* * * * *"}),
    ));

    // The latest missed run (12:10) is 30 s old at restart; the grace is 10 s.
    let server = server.restart_manual(at(12, 10, 30), |c| {
        wide_skew(c);
        c.misfire_grace_secs = 10;
    });
    let client = server.client();
    wait_next_run(&client, minutely, at(12, 11, 0));
    assert!(tasks_of(&server, minutely).is_empty());
    let read = ok(&client, "GET", &format!("/schedules/{minutely}"), None);
    assert_eq!(read["status"], "active", "never disabled for missed runs");
    // It fires again from the next run on.
    server.advance(TimeDelta::seconds(30));
    assert_eq!(
        wait_tasks(&server, minutely, 1)[0].run_at,
        at(12, 11, 0).timestamp_millis()
    );
}

#[test]
fn firing_twice_for_one_instant_creates_one_set_of_tasks() {
    let server = server_at(at(11, 59, 58));
    let client = server.client();
    endpoint(&client, "a");
    endpoint(&client, "b");
    let minutely = id(&schedule(
        &client,
        json!({"name": "m", "cron_expr": "* * * * *"}),
    ));
    let app = server.app();

    let first = webhookd::scheduler::fire_at(&app, minutely, at(12, 0, 0)).unwrap();
    assert_eq!(first.map(|ids| ids.len()), Some(2));
    let again = webhookd::scheduler::fire_at(&app, minutely, at(12, 0, 0)).unwrap();
    assert_eq!(again, None);
    assert_eq!(tasks_of(&server, minutely).len(), 2);

    // As if the move of next_run_at had been lost: the loop meets 12:00 again and skips it.
    crate::support::Db::open(&server.db).execute(
        "UPDATE schedules SET next_run_at = ?1 WHERE id = ?2",
        &[&at(12, 0, 0).timestamp_millis(), &minutely],
    );
    server.advance(TimeDelta::seconds(2));
    wait_next_run(&client, minutely, at(12, 1, 0));
    assert_eq!(tasks_of(&server, minutely).len(), 2);
}

#[test]
fn a_due_schedule_reaches_the_receiver_with_its_schedule_id() {
    let server = server_at(at(11, 59, 59));
    let client = server.client();
    let rx = Receiver::start();
    let body = json!({"name": "rx", "url": format!("{}/hook", rx.url)});
    let endpoint_id = id(&ok(&client, "POST", "/endpoints", Some(body)));
    let minutely = id(&schedule(
        &client,
        json!({"name": "m", "cron_expr": "* * * * *", "payload": {"hello": "world"},
               "endpoint_ids": [endpoint_id]}),
    ));

    server.advance(TimeDelta::seconds(1));
    let got = rx.wait_for(1, Duration::from_secs(5));
    assert_eq!(got.len(), 1, "the firing's task was delivered");
    let request = &got[0];
    assert_eq!(
        (request.method.as_str(), request.path.as_str()),
        ("POST", "/hook")
    );
    assert_eq!(
        request.header("X-Service-Schedule-Id"),
        Some(minutely.to_string().as_str())
    );
    assert_eq!(request.json(), json!({"hello": "world"}));
    let task = &tasks_of(&server, minutely)[0];
    assert_eq!(
        request.header("X-Service-Task-Id"),
        Some(task.id.to_string().as_str())
    );
    assert_eq!(task.run_at, at(12, 0, 0).timestamp_millis());
    // The same task through the API.
    let listed = ok(
        &client,
        "GET",
        &format!("/tasks?schedule_id={minutely}"),
        None,
    );
    assert_eq!(listed["total"], 1);
    assert_eq!(listed["items"][0]["task_type"], "schedule");
    assert_eq!(listed["items"][0]["endpoint_id"], endpoint_id);
}

#[test]
fn deleting_the_last_target_pauses_the_schedule_until_targets_are_set() {
    let server = TestServer::start();
    let client = server.client();
    let only = endpoint(&client, "only");
    let kept = endpoint(&client, "kept");
    let lone = schedule(
        &client,
        json!({"name": "lone", "cron_expr": "0 * * * *", "endpoint_ids": [only]}),
    );
    let shared = schedule(
        &client,
        json!({"name": "shared", "cron_expr": "0 * * * *", "endpoint_ids": [only, kept]}),
    );
    ok(&client, "DELETE", &format!("/endpoints/{only}"), None);

    let shared = ok(&client, "GET", &format!("/schedules/{}", id(&shared)), None);
    assert_eq!(shared["endpoint_ids"], json!([kept]));
    assert_eq!(shared["status"], "active");

    let path = format!("/schedules/{}", id(&lone));
    let paused = ok(&client, "GET", &path, None);
    assert_eq!(paused["status"], "paused");
    assert_eq!(paused["endpoint_ids"], json!([]));
    assert_eq!(paused["next_run_at"], Value::Null);
    assert!(paused["paused_reason"].is_string());
    // An empty list would now mean "every endpoint": resume and trigger are refused...
    err(&client, "POST", &format!("{path}/resume"), None, 409, 40901);
    err(
        &client,
        "POST",
        &format!("{path}/trigger"),
        None,
        409,
        40901,
    );
    // ...until the client names its targets again.
    ok(
        &client,
        "PATCH",
        &path,
        Some(json!({"endpoint_ids": [kept]})),
    );
    let resumed = ok(&client, "POST", &format!("{path}/resume"), None);
    assert_eq!(resumed["status"], "active");
    assert_eq!(resumed["paused_reason"], Value::Null);
}

/// A stored status outside its set and stored JSON that does not parse (a schedule's status,
/// payload and endpoint ids here) are errors of the read naming them, never defaults, on either
/// store (the twin of the corrupt-word tests of `sqlite/store.rs` and `pg_delivery.rs`).
#[test]
fn a_corrupt_stored_status_or_json_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::support::test_db(dir.path());
    let store = webhookd::store::open(&db, 1).unwrap();
    let mut raw = crate::support::Db::open(&db);
    raw.execute(
        "INSERT INTO schedules (id, app_id, name, cron_expr, timezone, status, created_at,
                                updated_at)
         VALUES (1, 'app1', 's', '0 * * * *', 'UTC', 'active', 0, 0)",
        &[],
    );
    let read = || store.read::<_, StoreError>(|tx| tx.get_schedule("app1", 1));
    assert_eq!(read().unwrap().unwrap().status, ScheduleStatus::Active);
    for (corrupt, message) in [
        ("status = 'gone'", "not a schedule status: \"gone\""),
        (
            "payload = '{\"a\":'",
            "not valid JSON for schedules.payload: ",
        ),
        (
            "endpoint_ids = '[1,'",
            "not valid JSON for schedules.endpoint_ids: ",
        ),
    ] {
        raw.execute(
            "UPDATE schedules SET status = 'active', payload = '{}', endpoint_ids = '[]'
              WHERE id = 1",
            &[],
        );
        raw.execute(&format!("UPDATE schedules SET {corrupt} WHERE id = 1"), &[]);
        let err = read().unwrap_err();
        assert!(
            matches!(&err, StoreError::Other(_)) && err.to_string().contains(message),
            "{corrupt}: {err}"
        );
    }
}
