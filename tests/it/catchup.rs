//! Schedule `catchup` and `overlap` (docs/design.md §13) on a manual clock: each catch-up mode after
//! downtime, `overlap: skip` with a failing endpoint, `skipped_runs` and their totals in
//! `/metrics`, validation, and the upgrade of a version-1 database.

use crate::delivery::{policy, wait_attempts};
use crate::metrics::{metric, wait_metric};
use crate::schedules::{
    at, endpoint, id, rfc, schedule, server_at, tasks_of, wait_next_run, wait_tasks, wide_skew,
};
use crate::support::{TestServer, expect_field_errors, ok};
use chrono::TimeDelta;
use serde_json::{Value, json};
use std::time::Duration;
use webhookd::client::Client;

const MISSED: &str = "webhookd_schedule_runs_skipped_total{reason=\"missed\"}";
const OVERLAPPED: &str = "webhookd_schedule_runs_skipped_total{reason=\"overlap\"}";
const CAUGHT_UP: &str = "webhookd_schedule_runs_caught_up_total";
const LAGS: &str = "webhookd_schedule_firing_lag_seconds_count";

pub(crate) fn read(client: &Client, schedule_id: i64) -> Value {
    ok(client, "GET", &format!("/schedules/{schedule_id}"), None)
}

pub(crate) fn minutely(client: &Client, name: &str, extra: Value) -> i64 {
    let mut body = json!({ "name": name, "cron_expr": "* * * * *" });
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    id(&schedule(client, body))
}

pub(crate) fn run_ats(server: &TestServer, schedule_id: i64) -> Vec<i64> {
    tasks_of(server, schedule_id)
        .iter()
        .map(|t| t.run_at)
        .collect()
}

fn minutes(from: (u32, u32), to: (u32, u32)) -> Vec<i64> {
    let (start, end) = (at(from.0, from.1, 0), at(to.0, to.1, 0));
    let mut out = Vec::new();
    let mut t = start;
    while t <= end {
        out.push(t.timestamp_millis());
        t += TimeDelta::minutes(1);
    }
    out
}

#[test]
fn schedule_catchup_and_overlap_default_validate_and_patch() {
    let server = server_at(at(12, 0, 30));
    let c = server.client();
    let s = schedule(&c, json!({ "name": "s", "cron_expr": "0 * * * *" }));
    assert_eq!(
        (&s["catchup"], &s["overlap"], &s["skipped_runs"]),
        (&json!("latest"), &json!("allow"), &json!(0))
    );
    let sid = id(&s);
    let base = json!({ "name": "s", "cron_expr": "0 * * * *" });
    let with = |k: &str, v: Value| {
        let mut b = base.clone();
        b[k] = v;
        b
    };
    expect_field_errors(
        &c,
        "POST",
        "/schedules",
        [
            (with("catchup", json!("sometimes")), "catchup"),
            (with("catchup", json!(1)), "catchup"),
            (with("catchup", json!("LATEST")), "catchup"),
            (with("overlap", json!("deny")), "overlap"),
            (with("overlap", json!(true)), "overlap"),
        ],
    );
    let path = format!("/schedules/{sid}");
    expect_field_errors(
        &c,
        "PATCH",
        &path,
        [
            (json!({ "catchup": null }), "catchup"),
            (json!({ "catchup": "some" }), "catchup"),
            (json!({ "overlap": null }), "overlap"),
            (json!({ "overlap": "forbid" }), "overlap"),
        ],
    );
    let patched = ok(
        &c,
        "PATCH",
        &path,
        Some(json!({ "catchup": "all", "overlap": "skip" })),
    );
    assert_eq!(
        (&patched["catchup"], &patched["overlap"]),
        (&json!("all"), &json!("skip"))
    );
    assert_eq!(
        patched["next_run_at"],
        rfc(at(13, 0, 0)),
        "unchanged by the patch"
    );
    // The preview plans instants only: it takes neither field.
    let preview = json!({ "cron_expr": "0 * * * *", "catchup": "all" });
    let reply = crate::support::err(&c, "POST", "/cron/preview", Some(preview), 400, 40001);
    assert!(reply.body["message"].as_str().unwrap().contains("catchup"));
    let created = schedule(
        &c,
        json!({ "name": "n", "cron_expr": "0 * * * *", "catchup": "none", "overlap": "allow" }),
    );
    assert_eq!(read(&c, id(&created))["catchup"], "none");
    let listed = ok(&c, "GET", "/schedules", None);
    assert!(
        listed["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["skipped_runs"] == 0 && s["overlap"].is_string())
    );
}

#[test]
fn each_catchup_mode_after_downtime() {
    let server = server_at(at(12, 0, 30));
    let c = server.client();
    endpoint(&c, "a");
    let latest = minutely(&c, "latest", json!({}));
    let none = minutely(&c, "none", json!({ "catchup": "none" }));
    let all = minutely(&c, "all", json!({ "catchup": "all" }));

    // Down from 12:00:30 to 12:10:30: 12:01 … 12:10 missed, all within the hour's grace.
    let server = server.restart_manual(at(12, 10, 30), wide_skew);
    let c = server.client();
    for s in [latest, none, all] {
        wait_next_run(&c, s, at(12, 11, 0));
    }
    assert_eq!(run_ats(&server, latest), minutes((12, 10), (12, 10)));
    assert!(run_ats(&server, none).is_empty());
    // `all`: every missed minute, oldest first (ids ascend with run_at).
    assert_eq!(run_ats(&server, all), minutes((12, 1), (12, 10)));
    let skipped = |s| read(&c, s)["skipped_runs"].as_i64().unwrap();
    assert_eq!((skipped(latest), skipped(none), skipped(all)), (9, 10, 0));
    assert_eq!(read(&c, all)["last_run_at"], rfc(at(12, 10, 0)));
    assert!(read(&c, none)["last_run_at"].is_null());
    // /metrics: the skips, and 12:10 (latest) and 12:01 … 12:10 (all) fired late.
    wait_metric(&server, MISSED, 19.0);
    wait_metric(&server, CAUGHT_UP, 11.0);
    wait_metric(&server, LAGS, 11.0);
    assert_eq!(metric(&server, OVERLAPPED), Some(0.0));

    // On time, every mode fires.
    server.advance(TimeDelta::seconds(30));
    for (s, n) in [(latest, 2), (none, 1), (all, 11)] {
        let tasks = wait_tasks(&server, s, n);
        assert_eq!(
            tasks.last().unwrap().run_at,
            at(12, 11, 0).timestamp_millis()
        );
    }
    // Three firings on time: lags of 0, no catch-up.
    wait_metric(&server, LAGS, 14.0);
    wait_metric(
        &server,
        "webhookd_schedule_firing_lag_seconds_bucket{le=\"0.01\"}",
        3.0,
    );
    assert_eq!(metric(&server, CAUGHT_UP), Some(11.0));

    // Down again until 12:30:30 with a five-minute grace: 12:12 … 12:30 missed.
    let server = server.restart_manual(at(12, 30, 30), |config| {
        wide_skew(config);
        config.misfire_grace_secs = 300;
    });
    let c = server.client();
    for s in [latest, none, all] {
        wait_next_run(&c, s, at(12, 31, 0));
    }
    let skipped = |s| read(&c, s)["skipped_runs"].as_i64().unwrap();
    // latest: 12:30 fires; none: nothing; all: 12:26 … 12:30 (within 300 s) fire.
    assert_eq!(
        run_ats(&server, latest).last(),
        Some(&at(12, 30, 0).timestamp_millis())
    );
    assert_eq!(run_ats(&server, latest).len(), 3);
    assert_eq!(run_ats(&server, none).len(), 1);
    assert_eq!(run_ats(&server, all)[11..], minutes((12, 26), (12, 30))[..]);
    assert_eq!(
        (skipped(latest), skipped(none), skipped(all)),
        (9 + 18, 10 + 19, 14)
    );
    // A new process counts from 0: this outage's skips, and 12:30 and 12:26 … 12:30 caught up.
    wait_metric(&server, MISSED, (18 + 19 + 14) as f64);
    wait_metric(&server, CAUGHT_UP, 6.0);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(run_ats(&server, all).len(), 16, "no firing twice");
}

#[test]
fn catchup_all_fires_at_most_100_of_a_long_outage() {
    let server = server_at(at(9, 0, 30));
    let c = server.client();
    endpoint(&c, "a");
    let all = minutely(&c, "all", json!({ "catchup": "all" }));
    // Three hours down (180 minutes) with a day's grace: the latest 100 fire.
    let server = server.restart_manual(at(12, 0, 30), |config| {
        wide_skew(config);
        config.misfire_grace_secs = 86_400;
    });
    let c = server.client();
    wait_next_run(&c, all, at(12, 1, 0));
    assert_eq!(run_ats(&server, all), minutes((10, 21), (12, 0)));
    assert_eq!(read(&c, all)["skipped_runs"], 80);
}

#[test]
fn overlap_skip_holds_back_new_tasks_while_a_failing_one_retries() {
    let server = server_at(at(12, 0, 30));
    let c = server.client();
    // Nothing listens on the endpoint; its policy retries an hour after each failure.
    let slow = policy(&c, 5, "fixed", 3600, 3600);
    let ep = endpoint(&c, "failing");
    ok(
        &c,
        "PATCH",
        &format!("/endpoints/{ep}"),
        Some(json!({ "retry_policy_id": slow })),
    );
    let skip = minutely(
        &c,
        "skip",
        json!({ "overlap": "skip", "endpoint_ids": [ep] }),
    );
    let allow = minutely(&c, "allow", json!({ "endpoint_ids": [ep] }));

    server.advance(TimeDelta::seconds(30));
    let first = wait_tasks(&server, skip, 1)[0].id;
    wait_tasks(&server, allow, 1);
    let retrying = wait_attempts(&c, first, 1);
    assert_eq!(
        retrying["status"], "pending",
        "failed once, waiting to retry"
    );

    // 12:02 and 12:03: `skip` makes no new task while the first retries; `allow` does.
    for (minute, skipped) in [(2, 1), (3, 2)] {
        server.advance(TimeDelta::minutes(1));
        wait_next_run(&c, skip, at(12, minute + 1, 0));
        wait_tasks(&server, allow, minute as usize);
        assert_eq!(tasks_of(&server, skip).len(), 1);
        let s = read(&c, skip);
        assert_eq!(s["skipped_runs"], skipped);
        assert_eq!(
            s["last_run_at"],
            rfc(at(12, 1, 0)),
            "a skipped run did not run"
        );
    }
    assert_eq!(read(&c, allow)["skipped_runs"], 0);
    wait_metric(&server, OVERLAPPED, 2.0);
    assert_eq!(metric(&server, MISSED), Some(0.0));

    // A trigger is not held back.
    let triggered = ok(&c, "POST", &format!("/schedules/{skip}/trigger"), None);
    assert_eq!(tasks_of(&server, skip).len(), 2);
    wait_attempts(&c, triggered["task_ids"][0].as_i64().unwrap(), 1);
    // Once no task of the schedule is open, the next firing makes one again.
    for task in tasks_of(&server, skip) {
        ok(&c, "POST", &format!("/tasks/{}/cancel", task.id), None);
    }
    server.advance(TimeDelta::minutes(1));
    let tasks = wait_tasks(&server, skip, 3);
    assert_eq!(tasks[2].run_at, at(12, 4, 0).timestamp_millis());
    wait_next_run(&c, skip, at(12, 5, 0));
    let s = read(&c, skip);
    assert_eq!(
        (&s["skipped_runs"], &s["last_run_at"]),
        (&json!(2), &json!(rfc(at(12, 4, 0))))
    );
}

/// A database left at schema version 1 (before `catchup`/`overlap` existed) with one schedule:
/// its `--db` value. On PostgreSQL, version 1 is `migrations/postgres/schema.sql` and the marker,
/// in a database named after `name` (unique per test).
pub(crate) fn version_1_database(dir: &std::path::Path, name: &str) -> String {
    const OLD_SCHEDULE: &str = "INSERT INTO schedules
        (app_id, name, cron_expr, timezone, status, created_at, updated_at)
        VALUES ('app1', 'old', '0 * * * *', 'UTC', 'active', 0, 0)";
    match crate::support::backend() {
        crate::support::Backend::Sqlite => {
            let db = dir.join(format!("{name}.sqlite"));
            let conn = rusqlite::Connection::open(&db).unwrap();
            conn.execute_batch(include_str!("../../schema.sql"))
                .unwrap();
            conn.pragma_update(None, "application_id", 0x5748_4B44)
                .unwrap();
            conn.pragma_update(None, "user_version", 1).unwrap();
            conn.execute(OLD_SCHEDULE, []).unwrap();
            db.to_str().unwrap().to_string()
        }
        crate::support::Backend::Postgres => {
            let server = crate::pg::shared().expect("PostgreSQL is installed");
            let url = server.create_database(&format!("{name}_{}", std::process::id()));
            let mut client = server.client(&url);
            client
                .batch_execute(include_str!("../../migrations/postgres/schema.sql"))
                .unwrap();
            // The marker as src/store/postgres/migrate.rs writes it after step 1.
            client
                .batch_execute(
                    "CREATE TABLE webhookd_schema (
                         single BOOLEAN PRIMARY KEY DEFAULT true CHECK (single),
                         application TEXT NOT NULL,
                         version BIGINT NOT NULL);
                     INSERT INTO webhookd_schema (application, version) VALUES ('webhookd', 1)",
                )
                .unwrap();
            client.batch_execute(OLD_SCHEDULE).unwrap();
            url
        }
    }
}

#[test]
fn a_version_1_database_upgrades_with_the_default_modes() {
    let dir = tempfile::tempdir().unwrap();
    let db = version_1_database(dir.path(), "v1");
    drop(webhookd::store::open(&db, 1).unwrap());
    let mut conn = crate::support::Db::open(&db);
    let s = conn.rows(
        "SELECT catchup, overlap, skipped_runs FROM schedules WHERE id = 1",
        &[],
    );
    assert_eq!(
        (s[0][0].text(), s[0][1].text(), s[0][2].int()),
        ("latest", "allow", 0)
    );
    let (version, expected) = match crate::support::backend() {
        crate::support::Backend::Sqlite => (
            conn.int("PRAGMA user_version", &[]),
            webhookd::store::sqlite::SCHEMA_VERSION,
        ),
        crate::support::Backend::Postgres => (
            conn.int("SELECT version FROM webhookd_schema", &[]),
            webhookd::store::postgres::SCHEMA_VERSION,
        ),
    };
    assert_eq!(version, expected);
}
