//! `GET /tasks`'s `total` stays exact (docs/dev/storage.md "Task totals and the tasks
//! indexes"): after inserts, deliveries, failures, cancels, retries, an endpoint's deletion and
//! retention deletes, every status's total (and the app's) equals a count of the rows, on
//! both stores; a SQLite database upgraded from an older schema gets counters equal to the
//! rows it already held.

use crate::catchup::version_1_database;
use crate::delivery::{endpoint, policy, task_id, wait_status};
use crate::schedules::wide_skew;
use crate::support::{Db, Receiver, TestServer, ok, wait_for};
use chrono::{SubsecRound, Utc};
use serde_json::json;
use std::time::Duration;
use webhookd::client::Client;

/// Nothing listens here: every attempt fails at once (connection refused).
const NOWHERE: &str = "http://127.0.0.1:9/hook";

const WAIT: Duration = Duration::from_secs(60);

/// The `total` the API gives for `app`'s tasks with `status` (all of them for `None`) equals
/// the count of its rows; `what` names the step for the failure message.
fn assert_totals(c: &Client, db: &mut Db, app: &str, what: &str) {
    for status in [
        None,
        Some("pending"),
        Some("running"),
        Some("success"),
        Some("failed"),
        Some("canceled"),
    ] {
        let (path, rows) = match status {
            Some(s) => (
                format!("/tasks?status={s}"),
                db.int(
                    "SELECT count(*) FROM tasks WHERE app_id = ?1 AND status = ?2",
                    &[&app, &s],
                ),
            ),
            None => (
                "/tasks".to_string(),
                db.int("SELECT count(*) FROM tasks WHERE app_id = ?1", &[&app]),
            ),
        };
        let total = ok(c, "GET", &path, None)["total"].as_i64().unwrap();
        assert_eq!(total, rows, "{what}: {app} {path}");
    }
}

#[test]
fn totals_stay_exact_through_every_status_change_and_delete() {
    let start = Utc::now().trunc_subsecs(0);
    let server = TestServer::start_manual(start, |config| {
        // The clock moves 31 days ahead: requests stay signed with the real time.
        wide_skew(config);
        config.retention_days = 30;
        config.max_idle = Duration::from_millis(100);
    });
    let c = server.client();
    let other = server.client_for_app("app2");
    let mut db = Db::open(&server.db);
    let rx = Receiver::start();

    let good = endpoint(&c, &rx.url, json!({}));
    let once = policy(&c, 1, "fixed", 0, 0);
    let failing = endpoint(&c, NOWHERE, json!({ "retry_policy_id": once }));
    let parked = endpoint(&c, NOWHERE, json!({}));
    ok(&c, "POST", &format!("/endpoints/{parked}/disable"), None);
    let theirs = endpoint(&other, &rx.url, json!({}));

    // Inserts (pending), then pending → running → success / failed, and pending → canceled.
    let delivered: Vec<i64> = (0..3).map(|_| task_id(&c, good)).collect();
    let failed: Vec<i64> = (0..2).map(|_| task_id(&c, failing)).collect();
    let waiting: Vec<i64> = (0..3).map(|_| task_id(&c, parked)).collect();
    let their_task = task_id(&other, theirs);
    for id in &delivered {
        wait_status(&c, *id, "success");
    }
    for id in &failed {
        wait_status(&c, *id, "failed");
    }
    wait_status(&other, their_task, "success");
    ok(&c, "POST", &format!("/tasks/{}/cancel", waiting[0]), None);
    assert_totals(&c, &mut db, "app1", "after inserts and deliveries");
    assert_totals(&other, &mut db, "app2", "the other app");

    // failed → pending → running → failed again.
    ok(&c, "POST", &format!("/tasks/{}/retry", failed[0]), None);
    wait_for(WAIT, || {
        let t = ok(&c, "GET", &format!("/tasks/{}", failed[0]), None);
        (t["status"] == "failed" && t["attempts"] == 1).then_some(())
    })
    .expect("the retried task fails again");
    assert_totals(&c, &mut db, "app1", "after a retry");

    // Deleting an endpoint cancels its pending tasks.
    ok(&c, "DELETE", &format!("/endpoints/{parked}"), None);
    wait_status(&c, waiting[1], "canceled");
    assert_totals(&c, &mut db, "app1", "after an endpoint's deletion");

    // Retention deletes every finished task once they are older than 30 days.
    server.advance(chrono::Duration::days(31));
    wait_for(WAIT, || {
        let finished = db.int(
            "SELECT count(*) FROM tasks WHERE finished_at IS NOT NULL",
            &[],
        );
        (finished == 0).then_some(())
    })
    .expect("retention deletes the old finished tasks");
    assert_totals(&c, &mut db, "app1", "after retention");
    assert_totals(&other, &mut db, "app2", "the other app after retention");
    let left = ok(&c, "GET", "/tasks", None);
    assert_eq!(left["total"], 0, "{left}");
    wait_status(&c, task_id(&c, failing), "failed");
    assert_totals(&c, &mut db, "app1", "a task after retention");
}

#[test]
fn an_upgraded_database_counts_the_tasks_it_held_on_sqlite() {
    if crate::support::sqlite_only("task_counts is kept on SQLite only") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = version_1_database(dir.path(), "counted");
    let mut conn = Db::open(&db);
    for (app, status, n) in [
        ("app1", "success", 5),
        ("app1", "failed", 3),
        ("app1", "canceled", 1),
        ("app2", "failed", 4),
    ] {
        for _ in 0..n {
            conn.execute(
                "INSERT INTO tasks (app_id, endpoint_id, task_type, status, run_at,
                                    max_attempts, created_at, updated_at)
                 VALUES (?1, 1, 'manual', ?2, 0, 1, 0, 0)",
                &[&app, &status],
            );
        }
    }
    drop(conn);
    // Upgraded by the store alone: nothing else changes a task meanwhile.
    drop(webhookd::store::open(&db, 1).unwrap());
    let mut conn = Db::open(&db);
    // The row ('', '') is the mark below which pending tasks are counted: every task held.
    assert_eq!(
        conn.int(
            "SELECT n FROM task_counts WHERE app_id = '' AND status = ''",
            &[]
        ),
        conn.int("SELECT max(id) FROM tasks", &[])
    );
    let counters = conn.rows(
        "SELECT app_id, status, n FROM task_counts WHERE n <> 0 AND app_id <> '' ORDER BY 1, 2",
        &[],
    );
    let counted = conn.rows(
        "SELECT app_id, status, count(*) FROM tasks GROUP BY 1, 2 ORDER BY 1, 2",
        &[],
    );
    assert_eq!(counters, counted);
    // Only finished tasks: the server changes none of them at start-up.
    let server = TestServer::start_with(|config| config.db = db.clone());
    assert_totals(&server.client(), &mut conn, "app1", "after the upgrade");
    assert_eq!(
        ok(&server.client(), "GET", "/tasks?status=failed", None)["total"],
        3
    );
}
