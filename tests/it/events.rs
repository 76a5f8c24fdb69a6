//! `/v1/events`: fan-out by filter in one transaction, idempotent republish, validation.

use crate::support::*;
use serde_json::{Value, json};
use webhookd::client::Client;

fn endpoint(client: &Client, name: &str, filter: Option<&str>) -> i64 {
    endpoint_at(client, name, "http://127.0.0.1:9/unused", filter)
}

fn endpoint_at(client: &Client, name: &str, url: &str, filter: Option<&str>) -> i64 {
    let mut body = json!({"name": name, "url": url, "secret": "whsec_c2VjcmV0"});
    if let Some(f) = filter {
        body["filter_events"] = json!(f);
    }
    ok(client, "POST", "/endpoints", Some(body))["id"]
        .as_i64()
        .unwrap()
}

/// The tasks of an event, as `GET /tasks?event_id=` lists them.
fn tasks_of_event(client: &Client, event_id: i64) -> Vec<Value> {
    let page = ok(
        client,
        "GET",
        &format!("/tasks?event_id={event_id}&page_size=100"),
        None,
    );
    page["items"].as_array().unwrap().clone()
}

#[test]
fn fans_out_to_matching_enabled_endpoints_only() {
    let server = TestServer::start();
    let client = server.client();
    let receiver = Receiver::start();
    let url = |path: &str| format!("{}/{path}", receiver.url);
    let exact = endpoint_at(&client, "exact", &url("exact"), Some("order.created"));
    let prefix = endpoint_at(&client, "prefix", &url("prefix"), Some("order.*"));
    let all = endpoint_at(&client, "all", &url("all"), None);
    let _suffix_other = endpoint_at(&client, "invoices", &url("invoices"), Some("*.paid"));
    let disabled = endpoint_at(&client, "disabled", &url("disabled"), Some("order.*"));
    ok(
        &client,
        "POST",
        &format!("/endpoints/{disabled}/disable"),
        None,
    );
    let other_app = server.client_for_app("app2");
    endpoint(&other_app, "foreign", None);

    let event = ok(
        &client,
        "POST",
        "/events",
        Some(json!({"event_name": "order.created", "payload": {"order": 42}})),
    );
    assert_eq!(event["status"], "dispatched");
    assert_eq!(event["task_count"], 3);
    assert_eq!(event["payload"], json!({"order": 42}));
    assert_eq!(event["event_key"], Value::Null);
    let event_id = event["id"].as_i64().unwrap();
    let mut targets: Vec<i64> = tasks_of_event(&client, event_id)
        .iter()
        .map(|t| {
            assert_eq!(t["task_type"], "event");
            assert_eq!(t["event_id"], event_id);
            assert_eq!(t["payload"], json!({"order": 42}));
            t["endpoint_id"].as_i64().unwrap()
        })
        .collect();
    targets.sort();
    assert_eq!(targets, vec![exact, prefix, all]);

    // Each matching endpoint receives the payload once, signed, named by the event.
    let got = receiver.wait_for(3, std::time::Duration::from_secs(10));
    let mut paths: Vec<&str> = got.iter().map(|r| r.path.as_str()).collect();
    paths.sort();
    assert_eq!(paths, vec!["/all", "/exact", "/prefix"]);
    for delivery in &got {
        assert_eq!(delivery.json(), json!({"order": 42}));
        assert_eq!(delivery.header("x-service-event"), Some("order.created"));
        let timestamp = delivery.header("x-service-timestamp").unwrap();
        let expected = webhookd::signing::hmac_hex(b"whsec_c2VjcmV0", timestamp, &delivery.body);
        assert_eq!(
            delivery.header("x-service-signature"),
            Some(expected.as_str())
        );
    }
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert_eq!(
        receiver.received().len(),
        3,
        "no delivery to a disabled or non-matching endpoint"
    );
    assert_eq!(
        ok(&client, "GET", &format!("/events/{event_id}"), None),
        event
    );
}

#[test]
fn an_event_matching_nothing_is_stored_with_no_tasks() {
    let server = TestServer::start();
    let client = server.client();
    endpoint(&client, "orders", Some("order.*"));
    let event = ok(
        &client,
        "POST",
        "/events",
        Some(json!({"event_name": "user.signed_up"})),
    );
    assert_eq!(event["task_count"], 0);
    assert_eq!(event["payload"], json!({}));
    assert!(tasks_of_event(&client, event["id"].as_i64().unwrap()).is_empty());
}

#[test]
fn republish_with_the_same_key_returns_the_first_event() {
    let server = TestServer::start();
    let client = server.client();
    endpoint(&client, "all", None);
    let body = json!({"event_name": "invoice.paid", "event_key": "inv-1", "payload": {"n": 1}});
    let first = ok(&client, "POST", "/events", Some(body.clone()));
    let again = ok(
        &client,
        "POST",
        "/events",
        Some(json!({"event_name": "invoice.paid", "event_key": "inv-1", "payload": {"n": 2}})),
    );
    assert_eq!(again, first);
    // another name or key is another event
    let other = ok(
        &client,
        "POST",
        "/events",
        Some(json!({"event_name": "invoice.sent", "event_key": "inv-1"})),
    );
    assert_ne!(other["id"], first["id"]);
    assert_eq!(
        tasks_of_event(&client, first["id"].as_i64().unwrap()).len(),
        1
    );

    // concurrent publishes of one key: one event, one set of tasks
    let racers: Vec<_> = (0..8)
        .map(|_| {
            let client = client.clone();
            std::thread::spawn(move || {
                ok(
                    &client,
                    "POST",
                    "/events",
                    Some(json!({"event_name": "race", "event_key": "k"})),
                )["id"]
                    .as_i64()
                    .unwrap()
            })
        })
        .collect();
    let ids: Vec<i64> = racers.into_iter().map(|r| r.join().unwrap()).collect();
    assert!(ids.iter().all(|id| *id == ids[0]), "{ids:?}");
    assert_eq!(tasks_of_event(&client, ids[0]).len(), 1);
    let listed = ok(&client, "GET", "/events?event_name=race", None);
    assert_eq!(listed["total"], 1);
}

#[test]
fn validation_and_listing() {
    let server = TestServer::start();
    let client = server.client();
    let cases = [
        (json!({}), "event_name"),
        (json!({"event_name": ""}), "event_name"),
        (json!({"event_name": "has space"}), "event_name"),
        (json!({"event_name": 7}), "event_name"),
        (json!({"event_name": "a", "event_key": ""}), "event_key"),
        (json!({"event_name": "a", "payload": [1]}), "payload"),
        (json!({"event_name": "a", "payload": "text"}), "payload"),
    ];
    expect_field_errors(&client, "POST", "/events", cases);
    for i in 0..3 {
        ok(
            &client,
            "POST",
            "/events",
            Some(json!({"event_name": format!("e.{i}")})),
        );
    }
    let page = ok(&client, "GET", "/events?page_size=2", None);
    assert_eq!(page["total"], 3);
    assert_eq!(page["items"][0]["event_name"], "e.2");
    err(&client, "GET", "/events/999", None, 404, 40401);
    let theirs = server.client_for_app("app2");
    let id = page["items"][0]["id"].as_i64().unwrap();
    err(&theirs, "GET", &format!("/events/{id}"), None, 404, 40401);
}

/// SQLite finds an event's tasks by their id range (`events.first_task_id` ..
/// `last_task_id`, schema step `event_task_range`) and their resent copies through
/// `tasks_event_copies`: a file from before that step gets each event's range from the tasks
/// its publish made, whatever their order, and keeps every row and id.
#[test]
fn an_upgraded_database_lists_each_events_tasks_on_sqlite() {
    if crate::support::sqlite_only("the id range of an event's tasks is kept on SQLite only") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = crate::catchup::version_1_database(dir.path(), "event_tasks");
    let mut conn = Db::open(&db);
    for (id, tasks) in [(7, 2), (8, 1), (9, 0)] {
        conn.execute(
            "INSERT INTO events (id, app_id, event_name, payload, status, task_count, created_at)
             VALUES (?1, 'app1', 'order.paid', '{}', 'dispatched', ?2,
                     CAST(strftime('%s', 'now') AS INTEGER) * 1000)",
            &[&id, &tasks],
        );
    }
    // Event 7's tasks on both sides of event 8's (the range covers what lies between), a
    // task of no event, and a resent copy of one of event 7's tasks.
    for (id, event, task_type) in [
        (11, 7, "event"),
        (12, 8, "event"),
        (13, 7, "event"),
        (14, 0, "manual"),
        (15, 7, "manual"),
    ] {
        conn.execute(
            "INSERT INTO tasks (id, app_id, event_id, endpoint_id, task_type, status, run_at,
                                max_attempts, created_at, updated_at)
             VALUES (?1, 'app1', nullif(?2, 0), 1, ?3, 'failed', 0, 1, 0, 0)",
            &[&id, &event, &task_type],
        );
    }
    drop(conn);
    let server = TestServer::start_with(|config| config.db = db.clone());
    let c = server.client();
    let ids = |event: i64| -> Vec<i64> {
        tasks_of_event(&c, event)
            .iter()
            .map(|t| t["id"].as_i64().unwrap())
            .collect()
    };
    assert_eq!(ids(7), [15, 13, 11]);
    assert_eq!(ids(8), [12]);
    assert!(ids(9).is_empty());
    let mut conn = Db::open(&db);
    let int = Cell::Int;
    assert_eq!(
        conn.rows(
            "SELECT id, first_task_id, last_task_id FROM events ORDER BY id",
            &[]
        ),
        [
            vec![int(7), int(11), int(13)],
            vec![int(8), int(12), int(12)],
            vec![int(9), Cell::Null, Cell::Null]
        ]
    );
    assert_eq!(conn.int("SELECT count(*) FROM tasks", &[]), 5);

    // A new event names its tasks' range; the list by event finds them.
    let e = endpoint(&c, "new", None);
    let event = ok(
        &c,
        "POST",
        "/events",
        Some(json!({"event_name": "order.paid", "payload": {}})),
    );
    let event_id = event["id"].as_i64().unwrap();
    let listed = tasks_of_event(&c, event_id);
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["endpoint_id"], e);
    let range = conn.rows(
        "SELECT first_task_id, last_task_id FROM events WHERE id = ?1",
        &[&event_id],
    );
    let task = int(listed[0]["id"].as_i64().unwrap());
    assert_eq!(range, [vec![task.clone(), task]]);
}
