//! Publishes hold each app's enabled endpoints in memory (`targets::TargetCache`), checked in
//! the publish's transaction against the app's target generation: every change to who gets an
//! event's tasks, or with which filters and attempts, holds from the very next publish, whether
//! it came through this server's API, the delivery pool (a `410 Gone`, auto-disable), another
//! node or the CLI (a write through the store standing for either), on both stores.

use crate::delivery::{endpoint, policy, task_id, wait_attempts};
use crate::support::{Answer, Db, Receiver, TestServer, ok, wait_for};
use chrono::{SubsecRound, Utc};
use serde_json::{Value, json};
use std::time::Duration;
use webhookd::client::Client;
use webhookd::store::endpoints::DisabledReason;

const WAIT: Duration = Duration::from_secs(30);
/// Nothing listens there: the tasks made are counted, not delivered.
const NOWHERE: &str = "http://127.0.0.1:9/hook";

/// Publishes `event_name` with `payload`; the (endpoint id, max_attempts) of the tasks it made,
/// by endpoint id.
fn publish(c: &Client, event_name: &str, payload: Value) -> Vec<(i64, i64)> {
    let event = ok(
        c,
        "POST",
        "/events",
        Some(json!({ "event_name": event_name, "payload": payload })),
    );
    let id = event["id"].as_i64().unwrap();
    let page = ok(
        c,
        "GET",
        &format!("/tasks?event_id={id}&page_size=100"),
        None,
    );
    let mut tasks: Vec<(i64, i64)> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["endpoint_id"].as_i64().unwrap(),
                t["max_attempts"].as_i64().unwrap(),
            )
        })
        .collect();
    tasks.sort();
    assert_eq!(event["task_count"], json!(tasks.len()));
    tasks
}

/// The endpoints that got a task.
fn reached(c: &Client, event_name: &str, payload: Value) -> Vec<i64> {
    publish(c, event_name, payload)
        .into_iter()
        .map(|(id, _)| id)
        .collect()
}

#[test]
fn every_api_change_holds_from_the_very_next_publish() {
    let server = TestServer::start();
    let c = server.client();
    let p = policy(&c, 3, "fixed", 60, 60);
    let a = endpoint(&c, NOWHERE, json!({ "filter_events": "order.*" }));
    let b = endpoint(
        &c,
        NOWHERE,
        json!({ "filter_events": "order.created", "retry_policy_id": p }),
    );
    assert_eq!(
        publish(&c, "order.created", json!({})),
        vec![(a, 5), (b, 3)]
    );

    // Disabled, then enabled again.
    ok(&c, "POST", &format!("/endpoints/{b}/disable"), None);
    assert_eq!(reached(&c, "order.created", json!({})), vec![a]);
    ok(&c, "POST", &format!("/endpoints/{b}/enable"), None);
    assert_eq!(reached(&c, "order.created", json!({})), vec![a, b]);

    // filter_events and filter_payload changed by PATCH.
    ok(
        &c,
        "PATCH",
        &format!("/endpoints/{a}"),
        Some(json!({ "filter_events": "invoice.paid" })),
    );
    assert_eq!(reached(&c, "order.created", json!({})), vec![b]);
    assert_eq!(reached(&c, "invoice.paid", json!({})), vec![a]);
    ok(
        &c,
        "PATCH",
        &format!("/endpoints/{b}"),
        Some(json!({ "filter_payload": { "tier": "pro" } })),
    );
    assert_eq!(
        reached(&c, "order.created", json!({ "tier": "free" })),
        Vec::<i64>::new()
    );
    assert_eq!(
        reached(&c, "order.created", json!({ "tier": "pro" })),
        vec![b]
    );

    // The retry policy's attempts, changed on the policy itself.
    ok(
        &c,
        "PATCH",
        &format!("/retries/policies/{p}"),
        Some(json!({ "max_attempts": 7 })),
    );
    assert_eq!(
        publish(&c, "order.created", json!({ "tier": "pro" })),
        vec![(b, 7)]
    );

    // Created, then deleted.
    let d = endpoint(&c, NOWHERE, json!({ "filter_events": "invoice.*" }));
    assert_eq!(reached(&c, "invoice.paid", json!({})), vec![a, d]);
    ok(&c, "DELETE", &format!("/endpoints/{a}"), None);
    assert_eq!(reached(&c, "invoice.paid", json!({})), vec![d]);
}

/// The generation, not the server's own writes, is what makes a publish read the endpoints
/// again: a row changed behind the store's back goes unseen until some write gives the app a
/// new generation; a write through the store (another node, the CLI) is seen at once.
#[test]
fn a_write_by_another_node_or_the_cli_holds_from_the_very_next_publish() {
    let server = TestServer::start();
    let c = server.client();
    let a = endpoint(&c, NOWHERE, json!({ "filter_events": "order.*" }));
    let b = endpoint(&c, NOWHERE, json!({ "filter_events": "order.*" }));
    assert_eq!(reached(&c, "order.created", json!({})), vec![a, b]);

    // Behind the store's back: the endpoints held are used.
    let mut db = Db::open(&server.db);
    if let Db::Sqlite(conn) = &db {
        // The server writes the failed attempts of the tasks meanwhile.
        conn.busy_timeout(WAIT).unwrap();
    }
    db.execute(
        "UPDATE endpoints SET filter_events = 'invoice.*' WHERE id = ?1",
        &[&a],
    );
    assert_eq!(reached(&c, "order.created", json!({})), vec![a, b]);

    // Another process disables b through the store: the next publish sees it, and the row
    // changed above with it.
    let other = webhookd::store::open(&server.db, 1).unwrap();
    let now = Utc::now().timestamp_millis();
    let changed = other
        .write(|tx| tx.set_endpoint_status("app1", b, false, DisabledReason::Manual, now))
        .unwrap();
    assert!(changed);
    assert_eq!(reached(&c, "order.created", json!({})), Vec::<i64>::new());
    assert_eq!(reached(&c, "invoice.paid", json!({})), vec![a]);

    // And a PATCH-like update through the store.
    let mut stored = other
        .read(|tx| tx.get_endpoint("app1", a))
        .unwrap()
        .unwrap();
    stored.filter_events = Some("order.paid".into());
    other.write(|tx| tx.update_endpoint(&stored)).unwrap();
    assert_eq!(reached(&c, "order.paid", json!({})), vec![a]);
    assert_eq!(reached(&c, "invoice.paid", json!({})), Vec::<i64>::new());
}

/// An endpoint the delivery pool disables (`410 Gone`) gets no task from the next publish.
#[test]
fn an_endpoint_disabled_by_a_410_gets_no_task_from_the_next_publish() {
    let server = TestServer::start();
    let c = server.client();
    let gone = Receiver::start();
    gone.set_default(Answer::status(410));
    let g = endpoint(&c, &gone.url, json!({ "filter_events": "order.*" }));
    let h = endpoint(&c, NOWHERE, json!({ "filter_events": "order.*" }));
    assert_eq!(reached(&c, "order.created", json!({})), vec![g, h]);
    wait_disabled(&c, g, "gone");
    assert_eq!(reached(&c, "order.created", json!({})), vec![h]);
}

/// Auto-disable (failing for `--disable-failing-after-hours`) likewise: 0.001 h is 3.6 s, and
/// attempts 2 s apart on the manual clock make the fifth failure (8 s into the streak) disable it.
#[test]
fn an_endpoint_auto_disabled_for_failing_gets_no_task_from_the_next_publish() {
    let server = TestServer::start_manual(Utc::now().trunc_subsecs(0), |config| {
        config.max_skew_secs = 3600;
        config.disable_failing_after_hours = 0.001;
    });
    let c = server.client();
    let failing = Receiver::start();
    failing.set_default(Answer::status(500));
    let p = policy(&c, 20, "fixed", 2, 2);
    let f = endpoint(
        &c,
        &failing.url,
        json!({ "filter_events": "order.*", "retry_policy_id": p }),
    );
    let h = endpoint(&c, NOWHERE, json!({ "filter_events": "order.*" }));
    assert_eq!(reached(&c, "invoice.paid", json!({})), Vec::<i64>::new());
    let id = task_id(&c, f);
    for n in 1..5 {
        wait_attempts(&c, id, n);
        server.advance(chrono::Duration::seconds(2));
    }
    wait_disabled(&c, f, "failing");
    assert_eq!(reached(&c, "order.created", json!({})), vec![h]);
}

fn wait_disabled(c: &Client, id: i64, reason: &str) {
    let mut last = Value::Null;
    wait_for(WAIT, || {
        last = ok(c, "GET", &format!("/endpoints/{id}"), None);
        (last["status"] == "disabled").then_some(())
    })
    .unwrap_or_else(|| panic!("endpoint {id} was never disabled: {last}"));
    assert_eq!(last["disabled_reason"], reason);
}
