//! The PostgreSQL twins of the store functions (`src/store/postgres/<table>.rs`) against a
//! private server: every function is called and what it returns is checked against what was
//! stored. Compact on purpose: the whole suite runs on PostgreSQL once the store interface
//! lands; these checks hold the SQL until then.

use crate::pg::PgServer;
use std::sync::{Arc, Barrier};
use std::time::Duration;
use webhookd::retry::Backoff;
use webhookd::store::Page;
use webhookd::store::attempts::{Attempt, RequestHeaders};
use webhookd::store::endpoints::{DisabledReason, Endpoint, EndpointStatus, HealthDelta};
use webhookd::store::events::{EventStatus, NewEvent};
use webhookd::store::policies::{Policy, PolicyStatus};
use webhookd::store::postgres as pg;
use webhookd::store::postgres::PgTx;
use webhookd::store::tasks::IfBusy;
use webhookd::store::{
    AttemptQueries, EndpointQueries, EventQueries, KeyQueries, PolicyQueries, ReplayQueries,
    RetentionQueries,
};

/// A private server with one database holding the schema, and a connection to it.
fn opened(name: &str) -> Option<(PgServer, String, postgres::Client)> {
    let server = PgServer::start()?;
    let url = server.create_database(name);
    drop(pg::open(&url, 1).unwrap());
    let client = server.client(&url);
    Some((server, url, client))
}

fn page(page: u32, page_size: u32) -> Page {
    Page { page, page_size }
}

fn new_event<'a>(
    app_id: &'a str,
    event_name: &'a str,
    event_key: Option<&'a str>,
    payload: &'a str,
    now_ms: i64,
) -> NewEvent<'a> {
    NewEvent {
        app_id,
        event_name,
        event_key,
        payload,
        now_ms,
    }
}

fn policy(app: &str, name: &str) -> Policy {
    Policy {
        id: 0,
        app_id: app.into(),
        name: name.into(),
        max_attempts: 7,
        backoff_type: Backoff::Linear,
        initial_delay_sec: 2,
        max_delay_sec: 60,
        max_age_sec: Some(3600),
        jitter: webhookd::retry::Jitter::Full,
        status: PolicyStatus::Active,
        created_at: 1_000,
        updated_at: 1_000,
    }
}

fn endpoint(app: &str, name: &str, retry_policy_id: Option<i64>) -> Endpoint {
    let mut headers = serde_json::Map::new();
    headers.insert("X-Team".into(), "ops".into());
    Endpoint {
        id: 0,
        app_id: app.into(),
        name: name.into(),
        url: format!("http://127.0.0.1:9/{name}"),
        method: "POST".into(),
        headers,
        secret: Some("s3cret".into()),
        timeout_ms: 5_000,
        retry_policy_id,
        filter_events: Some("order.*".into()),
        filter_payload: serde_json::json!({"tier": "pro"}).as_object().cloned(),
        status: EndpointStatus::Enabled,
        rate_limit_per_sec: Some(2.5),
        max_in_flight: Some(3),
        previous_secret: Some("old".into()),
        previous_secret_expires_at: Some(9_000),
        created_at: 1_000,
        updated_at: 1_000,
        disabled_reason: None,
        last_success_at: None,
        last_failure_at: None,
        consecutive_failures: 0,
    }
}

/// Inserts a task row directly (the tasks functions are another file's); returns its id.
fn task(
    c: &mut postgres::Client,
    endpoint_id: i64,
    event_id: Option<i64>,
    status: &str,
    finished_at: Option<i64>,
) -> i64 {
    c.query_one(
        "INSERT INTO tasks (app_id, event_id, endpoint_id, task_type, status, run_at, max_attempts,
                            next_attempt_at, finished_at, created_at, updated_at)
         VALUES ('a', $1, $2, 'event', $3, 0, 5, CASE WHEN $3 = 'pending' THEN 0 END, $4, 0, 0)
         RETURNING id",
        &[&event_id, &endpoint_id, &status, &finished_at],
    )
    .unwrap()
    .get(0)
}

fn attempt(task_id: i64, attempt: i64) -> Attempt {
    Attempt {
        id: 0,
        task_id,
        attempt,
        started_at: 100 * attempt,
        duration_ms: 12,
        status_code: (attempt % 2 == 0).then_some(503),
        error: (attempt % 2 == 1).then(|| "connection refused".to_string()),
        response_body: Some(format!("body {attempt}")),
        request_headers: (attempt != 2)
            .then(|| RequestHeaders::encode([("x-try", attempt.to_string().as_str())])),
    }
}

fn count(c: &mut postgres::Client, sql: &str) -> i64 {
    c.query_one(sql, &[]).unwrap().get(0)
}

#[test]
fn keys_policies_events_attempts_and_the_probe_round_trip() {
    let Some((_server, _url, mut c)) = opened("round_trip") else {
        return;
    };
    // keys
    let k1 = PgTx::new(&mut c, "test")
        .create_key("a", "first", 2_000)
        .unwrap();
    let k2 = PgTx::new(&mut c, "test")
        .create_key("b", "second", 1_000)
        .unwrap();
    assert!(k1.key_id.starts_with("whk_") && k1.secret.starts_with("whs_"));
    assert_eq!(PgTx::new(&mut c, "test").count_keys().unwrap(), 2);
    let lookup = PgTx::new(&mut c, "test").lookup_key(&k1.key_id).unwrap();
    // last_used_at: written, then not again within a minute, then again.
    for (at, expected) in [(5_000, 5_000), (64_999, 5_000), (65_000, 65_000)] {
        PgTx::new(&mut c, "test").touch_key(&k1.key_id, at).unwrap();
        let seen = PgTx::new(&mut c, "test").lookup_key(&k1.key_id).unwrap();
        assert_eq!(seen.unwrap().last_used_at, Some(expected), "at {at}");
    }
    let lookup = lookup.map(|k| (k.secret, k.app_id));
    assert_eq!(lookup, Some((k1.secret.clone(), "a".to_string())));
    assert!(
        PgTx::new(&mut c, "test")
            .revoke_key(&k1.key_id, 3_000)
            .unwrap()
    );
    assert!(
        !PgTx::new(&mut c, "test")
            .revoke_key(&k1.key_id, 4_000)
            .unwrap()
    );
    assert_eq!(
        PgTx::new(&mut c, "test").lookup_key(&k1.key_id).unwrap(),
        None
    );
    assert_eq!(
        PgTx::new(&mut c, "test").lookup_key("whk_unknown").unwrap(),
        None
    );
    let keys = PgTx::new(&mut c, "test").list_keys().unwrap();
    let shown: Vec<_> = keys
        .iter()
        .map(|k| {
            (
                k.id.as_str(),
                k.app_id.as_str(),
                k.name.as_str(),
                webhookd::clock::rfc3339(k.created_at),
                k.revoked_at.is_some(),
            )
        })
        .collect();
    assert_eq!(
        shown,
        [
            (
                k2.key_id.as_str(),
                "b",
                "second",
                "1970-01-01T00:00:01Z".to_string(),
                false
            ),
            (
                k1.key_id.as_str(),
                "a",
                "first",
                "1970-01-01T00:00:02Z".to_string(),
                true
            ),
        ]
    );

    // policies
    let p1 = PgTx::new(&mut c, "test")
        .insert_policy(&policy("a", "p1"))
        .unwrap();
    assert!(p1.id > 0);
    assert_eq!(
        PgTx::new(&mut c, "test").get_policy("a", p1.id).unwrap(),
        Some(p1.clone())
    );
    assert_eq!(
        PgTx::new(&mut c, "test").get_policy("b", p1.id).unwrap(),
        None
    );
    let changed = Policy {
        name: "renamed".into(),
        max_attempts: 9,
        backoff_type: Backoff::Exponential,
        updated_at: 2_000,
        ..p1.clone()
    };
    PgTx::new(&mut c, "test").update_policy(&changed).unwrap();
    assert_eq!(
        PgTx::new(&mut c, "test").get_policy_any(p1.id).unwrap(),
        Some(changed.clone())
    );
    let p2 = PgTx::new(&mut c, "test")
        .insert_policy(&policy("a", "p2"))
        .unwrap();
    let p3 = PgTx::new(&mut c, "test")
        .insert_policy(&policy("a", "p3"))
        .unwrap();
    PgTx::new(&mut c, "test")
        .insert_policy(&policy("b", "other app"))
        .unwrap();
    let (total, first) = PgTx::new(&mut c, "test")
        .list_policies("a", page(1, 2))
        .unwrap();
    assert_eq!((total, first), (3, vec![p3.clone(), p2.clone()]));
    let (total, second) = PgTx::new(&mut c, "test")
        .list_policies("a", page(2, 2))
        .unwrap();
    assert_eq!((total, second), (3, vec![changed.clone()]));
    assert!(PgTx::new(&mut c, "test").delete_policy("a", p2.id).unwrap());
    assert!(!PgTx::new(&mut c, "test").delete_policy("a", p2.id).unwrap());
    assert_eq!(
        PgTx::new(&mut c, "test").get_policy("a", p2.id).unwrap(),
        None
    );

    // events
    let e1 = PgTx::new(&mut c, "test")
        .insert_event(
            &new_event("a", "order.paid", Some("k1"), r#"{"n":1}"#, 5_000),
            2,
        )
        .unwrap();
    let e2 = PgTx::new(&mut c, "test")
        .insert_event(&new_event("a", "order.sent", None, r#"{"n":2}"#, 6_000), 0)
        .unwrap();
    let e3 = PgTx::new(&mut c, "test")
        .insert_event(&new_event("a", "order.paid", None, "{}", 7_000), 1)
        .unwrap();
    PgTx::new(&mut c, "test")
        .insert_event(&new_event("b", "order.paid", Some("k1"), "{}", 7_000), 0)
        .unwrap();
    let got = PgTx::new(&mut c, "test")
        .get_event("a", e1)
        .unwrap()
        .unwrap();
    assert_eq!(
        (
            got.id,
            got.app_id.as_str(),
            got.event_name.as_str(),
            got.event_key.as_deref()
        ),
        (e1, "a", "order.paid", Some("k1"))
    );
    assert_eq!(
        (
            got.payload,
            got.status.as_str(),
            got.task_count,
            got.created_at
        ),
        (serde_json::json!({"n": 1}), "dispatched", 2, 5_000)
    );
    assert_eq!(PgTx::new(&mut c, "test").get_event("b", e1).unwrap(), None);
    assert_eq!(
        PgTx::new(&mut c, "test")
            .get_event("a", e2)
            .unwrap()
            .map(|e| e.event_name)
            .as_deref(),
        Some("order.sent")
    );
    let (total, items) = PgTx::new(&mut c, "test")
        .list_events("a", Some("order.paid"), page(1, 1))
        .unwrap();
    assert_eq!(
        (total, items.iter().map(|e| e.id).collect::<Vec<_>>()),
        (2, vec![e3])
    );
    let (total, items) = PgTx::new(&mut c, "test")
        .list_events("a", None, page(1, 10))
        .unwrap();
    assert_eq!(
        (total, items.iter().map(|e| e.id).collect::<Vec<_>>()),
        (3, vec![e3, e2, e1])
    );
    // the list builder's other filters, as the tasks list uses them
    let filters = pg::list::Filters::app("a")
        .eq("event_name", Some("order.paid"))
        .eq_word("status", Some(EventStatus::Dispatched))
        .cmp("created_at", ">=", 6_000_i64)
        .always("event_key IS NULL");
    assert!(filters.condition().contains("status = 'dispatched'"));
    let listed = pg::list::list_page(
        &mut pg::Sql::new(&mut c, None),
        "events",
        "id",
        &filters,
        page(1, 10),
        |r| r.try_get(0),
    )
    .unwrap();
    assert_eq!(listed, (1, vec![e3]));
    let bound = pg::list::Filters::app("a").eq("event_name", Some("order.sent"));
    assert!(bound.condition().ends_with("event_name = $2"));
    let listed = pg::list::list_page(
        &mut pg::Sql::new(&mut c, None),
        "events",
        "id",
        &bound,
        page(1, 10),
        |r| r.try_get(0),
    )
    .unwrap();
    assert_eq!(listed, (1, vec![e2]));
    let mut tx = c.transaction().unwrap();
    let found = PgTx::new(&mut tx, "test")
        .find_event_by_key("a", "order.paid", "k1", 5_000)
        .unwrap();
    assert_eq!(found.map(|e| e.id), Some(e1));
    let late = PgTx::new(&mut tx, "test")
        .find_event_by_key("a", "order.paid", "k1", 5_001)
        .unwrap();
    assert_eq!(late, None);
    tx.commit().unwrap();

    // attempts
    for n in 1..=3 {
        PgTx::new(&mut c, "test")
            .insert_attempt(&attempt(42, n))
            .unwrap();
    }
    PgTx::new(&mut c, "test")
        .insert_attempt(&attempt(43, 1))
        .unwrap();
    let (total, first) = PgTx::new(&mut c, "test")
        .list_attempts(42, page(1, 2))
        .unwrap();
    let strip = |a: &Attempt| Attempt { id: 0, ..a.clone() };
    assert_eq!(total, 3);
    assert_eq!(
        first.iter().map(strip).collect::<Vec<_>>(),
        [attempt(42, 1), attempt(42, 2)]
    );
    let (total, second) = PgTx::new(&mut c, "test")
        .list_attempts(42, page(2, 2))
        .unwrap();
    assert_eq!(
        (total, second.iter().map(strip).collect::<Vec<_>>()),
        (3, vec![attempt(42, 3)])
    );
    assert!(first[0].id < first[1].id && first[1].id < second[0].id);

    // the health probe
    pg::health::probe(&mut c, 1_234).unwrap();
    pg::health::probe(&mut c, 5_678).unwrap();
    assert_eq!(
        count(&mut c, "SELECT checked_at FROM health_probe WHERE id = 1"),
        5_678
    );
    assert_eq!(count(&mut c, "SELECT count(*) FROM health_probe"), 1);
}

#[test]
fn endpoints_round_trip_and_their_status_and_health_statements() {
    let Some((_server, _url, mut c)) = opened("endpoints") else {
        return;
    };
    let policy = PgTx::new(&mut c, "test")
        .insert_policy(&policy("a", "p"))
        .unwrap();
    let e1 = PgTx::new(&mut c, "test")
        .insert_endpoint(&endpoint("a", "one", Some(policy.id)))
        .unwrap();
    let e2 = PgTx::new(&mut c, "test")
        .insert_endpoint(&endpoint("a", "two", None))
        .unwrap();
    let other = PgTx::new(&mut c, "test")
        .insert_endpoint(&endpoint("b", "other", None))
        .unwrap();
    assert_eq!(
        PgTx::new(&mut c, "test").get_endpoint("a", e1.id).unwrap(),
        Some(e1.clone())
    );
    assert_eq!(
        PgTx::new(&mut c, "test").get_endpoint("b", e1.id).unwrap(),
        None
    );
    assert_eq!(
        PgTx::new(&mut c, "test")
            .get_endpoint_any(other.id)
            .unwrap(),
        Some(other.clone())
    );

    let mut headers = serde_json::Map::new();
    headers.insert("X-New".into(), "1".into());
    let changed = Endpoint {
        name: "uno".into(),
        url: "http://127.0.0.1:9/uno".into(),
        headers,
        secret: None,
        timeout_ms: 1_000,
        retry_policy_id: None,
        filter_events: None,
        rate_limit_per_sec: None,
        max_in_flight: None,
        previous_secret: None,
        previous_secret_expires_at: None,
        updated_at: 2_000,
        ..e1.clone()
    };
    PgTx::new(&mut c, "test").update_endpoint(&changed).unwrap();
    assert_eq!(
        PgTx::new(&mut c, "test").get_endpoint("a", e1.id).unwrap(),
        Some(changed.clone())
    );
    assert_eq!(
        PgTx::new(&mut c, "test")
            .count_endpoints_using_policy(policy.id)
            .unwrap(),
        0
    );
    PgTx::new(&mut c, "test")
        .update_endpoint(&Endpoint {
            retry_policy_id: Some(policy.id),
            ..changed.clone()
        })
        .unwrap();
    assert_eq!(
        PgTx::new(&mut c, "test")
            .count_endpoints_using_policy(policy.id)
            .unwrap(),
        1
    );

    let limits = PgTx::new(&mut c, "test")
        .get_endpoint_any(e2.id)
        .unwrap()
        .unwrap();
    assert_eq!(
        (
            limits.status.as_str(),
            limits.rate_limit_per_sec,
            limits.max_in_flight
        ),
        ("enabled", Some(2.5), Some(3))
    );
    assert!(
        PgTx::new(&mut c, "test")
            .get_endpoint_any(999_999)
            .unwrap()
            .is_none()
    );

    // enable / disable
    assert!(
        PgTx::new(&mut c, "test")
            .set_endpoint_status("a", e2.id, false, DisabledReason::Manual, 3_000)
            .unwrap()
    );
    assert!(
        !PgTx::new(&mut c, "test")
            .set_endpoint_status("a", e2.id, false, DisabledReason::Manual, 3_001)
            .unwrap()
    );
    let got = PgTx::new(&mut c, "test")
        .get_endpoint("a", e2.id)
        .unwrap()
        .unwrap();
    assert_eq!(
        (
            got.status.as_str(),
            got.disabled_reason.as_deref(),
            got.updated_at
        ),
        ("disabled", Some("manual"), 3_000)
    );
    assert_eq!(
        PgTx::new(&mut c, "test")
            .get_endpoint_any(e2.id)
            .unwrap()
            .unwrap()
            .status
            .as_str(),
        "disabled"
    );
    let (total, items) = PgTx::new(&mut c, "test")
        .list_endpoints("a", Some(EndpointStatus::Disabled), page(1, 10))
        .unwrap();
    assert_eq!((total, items), (1, vec![got]));
    let (total, items) = PgTx::new(&mut c, "test")
        .list_endpoints("a", None, page(2, 1))
        .unwrap();
    assert_eq!(
        (total, items.iter().map(|e| e.id).collect::<Vec<_>>()),
        (2, vec![e1.id])
    );
    assert_eq!(
        PgTx::new(&mut c, "test")
            .list_enabled_targets("a")
            .unwrap()
            .iter()
            .map(|e| e.id)
            .collect::<Vec<_>>(),
        [e1.id]
    );
    assert!(
        PgTx::new(&mut c, "test")
            .set_endpoint_status("a", e2.id, true, DisabledReason::Manual, 4_000)
            .unwrap()
    );
    assert_eq!(
        PgTx::new(&mut c, "test")
            .get_endpoint("a", e2.id)
            .unwrap()
            .unwrap()
            .disabled_reason,
        None
    );
    assert_eq!(
        PgTx::new(&mut c, "test")
            .disable_endpoint_any(e2.id, DisabledReason::Gone, 5_000)
            .unwrap()
            .as_deref(),
        Some("a")
    );
    assert_eq!(
        PgTx::new(&mut c, "test")
            .disable_endpoint_any(e2.id, DisabledReason::Gone, 5_001)
            .unwrap(),
        None
    );
    assert_eq!(
        PgTx::new(&mut c, "test")
            .get_endpoint("a", e2.id)
            .unwrap()
            .unwrap()
            .disabled_reason
            .as_deref(),
        Some("gone")
    );
    assert!(
        PgTx::new(&mut c, "test")
            .set_endpoint_status("a", e2.id, true, DisabledReason::Manual, 6_000)
            .unwrap()
    );

    // fan-out targets: the policy's attempts, or the default's
    let targets: Vec<_> = PgTx::new(&mut c, "test")
        .list_enabled_targets("a")
        .unwrap()
        .into_iter()
        .map(|t| (t.id, t.filter_events, t.max_attempts))
        .collect();
    let default = i64::from(webhookd::retry::RetryPolicy::DEFAULT.max_attempts);
    assert_eq!(
        targets,
        [
            (e1.id, None, 7),
            (e2.id, Some("order.*".to_string()), default)
        ]
    );
    assert_eq!(
        PgTx::new(&mut c, "test")
            .endpoint_names("a", &[e2.id, 999_999, e1.id, other.id, e2.id])
            .unwrap(),
        [
            (e2.id, "two".to_string()),
            (e1.id, "uno".to_string()),
            (e2.id, "two".to_string())
        ]
    );

    // health: failures extend the streak and disable at the threshold; a success resets it
    let failing = HealthDelta {
        last_failure_at: Some(7_000),
        failures: 2,
        first_failure_at: Some(6_500),
        ..Default::default()
    };
    assert_eq!(
        record_health(&mut c, e1.id, &failing, Some(1_000), 7_000),
        None
    );
    let more = HealthDelta {
        last_failure_at: Some(8_000),
        failures: 1,
        first_failure_at: Some(8_000),
        ..Default::default()
    };
    assert_eq!(
        record_health(&mut c, e1.id, &more, Some(1_000), 8_000),
        Some(("a".to_string(), 3))
    );
    let got = PgTx::new(&mut c, "test")
        .get_endpoint("a", e1.id)
        .unwrap()
        .unwrap();
    assert_eq!(
        (
            got.status.as_str(),
            got.disabled_reason.as_deref(),
            got.consecutive_failures,
            got.last_failure_at
        ),
        ("disabled", Some("failing"), 3, Some(8_000))
    );
    let healed = HealthDelta {
        last_success_at: Some(9_000),
        failures: 1,
        first_failure_at: Some(9_500),
        last_failure_at: Some(9_500),
    };
    assert_eq!(record_health(&mut c, e2.id, &failing, None, 7_000), None);
    assert_eq!(
        record_health(&mut c, e2.id, &healed, Some(1_000), 9_500),
        None
    );
    let got = PgTx::new(&mut c, "test")
        .get_endpoint("a", e2.id)
        .unwrap()
        .unwrap();
    assert_eq!(
        (
            got.status.as_str(),
            got.consecutive_failures,
            got.last_success_at,
            got.last_failure_at
        ),
        ("enabled", 1, Some(9_000), Some(9_500))
    );

    let mut tx = PgTx::new(&mut c, "test");
    assert_eq!(
        tx.delete_endpoint_cascade("b", other.id, 10_000).unwrap(),
        Some(vec![])
    );
    assert_eq!(
        tx.delete_endpoint_cascade("b", other.id, 10_001).unwrap(),
        None
    );
}

/// A round's health in one statement (`record_endpoints_health`), then the disabling test for
/// the endpoints whose round failed (`disable_failing_endpoint`), leaves every endpoint as one
/// `write_endpoint_health` and disabling test per endpoint (`record_health`) leaves its twin,
/// and disables the same ones; the round's endpoints are read in one statement too
/// (`get_endpoints_any`).
#[test]
fn a_rounds_health_and_endpoints_are_written_and_read_together_as_one_at_a_time() {
    let Some((_server, _url, mut c)) = opened("round_health") else {
        return;
    };
    let mut insert = |app: &str, name: &str| {
        PgTx::new(&mut c, "test")
            .insert_endpoint(&endpoint(app, name, None))
            .unwrap()
            .id
    };
    let (together, alone): (Vec<i64>, Vec<i64>) = (
        vec![insert("a", "t1"), insert("a", "t2"), insert("b", "t3")],
        vec![insert("a", "a1"), insert("a", "a2"), insert("b", "a3")],
    );
    let rounds = [
        // failing for long enough: disabled at the second round
        (
            HealthDelta {
                last_failure_at: Some(7_000),
                failures: 2,
                first_failure_at: Some(6_000),
                ..Default::default()
            },
            7_000,
        ),
        // a success, then a failure after it
        (
            HealthDelta {
                last_success_at: Some(9_000),
                last_failure_at: Some(9_500),
                failures: 1,
                first_failure_at: Some(9_500),
            },
            9_500,
        ),
        // successes only
        (
            HealthDelta {
                last_success_at: Some(9_000),
                ..Default::default()
            },
            0,
        ),
    ];
    let mut disabled_together = Vec::new();
    let mut disabled_alone = Vec::new();
    for _ in 0..2 {
        let batch: Vec<(i64, HealthDelta)> = together
            .iter()
            .zip(&rounds)
            .map(|(&id, &(delta, _))| (id, delta))
            .collect();
        PgTx::new(&mut c, "test")
            .record_endpoints_health(&batch, IfBusy::Wait)
            .unwrap();
        for (&id, (delta, now_ms)) in together.iter().zip(&rounds) {
            if delta.failures > 0
                && let Some((app, streak)) = PgTx::new(&mut c, "test")
                    .disable_failing_endpoint(id, 3, 1_000, *now_ms)
                    .unwrap()
            {
                disabled_together.push((id, app, streak));
            }
        }
        for (&id, (delta, now_ms)) in alone.iter().zip(&rounds) {
            if let Some((app, streak)) = record_health(&mut c, id, delta, Some(1_000), *now_ms) {
                disabled_alone.push((id, app, streak));
            }
        }
    }
    assert_eq!(disabled_together, vec![(together[0], "a".to_string(), 4)]);
    assert_eq!(disabled_alone, vec![(alone[0], "a".to_string(), 4)]);
    let mut ids = together.clone();
    ids.push(999_999);
    let mut read = PgTx::new(&mut c, "test").get_endpoints_any(&ids).unwrap();
    read.sort_by_key(|e| e.id);
    assert_eq!(read.len(), 3);
    for (got, &twin) in read.iter().zip(&alone) {
        let want = PgTx::new(&mut c, "test")
            .get_endpoint_any(twin)
            .unwrap()
            .unwrap();
        assert_eq!(
            (
                &got.status,
                &got.disabled_reason,
                got.consecutive_failures,
                got.last_success_at,
                got.last_failure_at,
            ),
            (
                &want.status,
                &want.disabled_reason,
                want.consecutive_failures,
                want.last_success_at,
                want.last_failure_at,
            ),
            "endpoint {} against its twin {twin}",
            got.id
        );
    }
    PgTx::new(&mut c, "test")
        .record_endpoints_health(&[], IfBusy::Wait)
        .unwrap();
    assert!(
        PgTx::new(&mut c, "test")
            .get_endpoints_any(&[])
            .unwrap()
            .is_empty()
    );
}

/// Health written with `IfBusy::Defer` (a dispatcher's carried change for an endpoint its round
/// has no result for) passes over an endpoint another writer holds, returning it unwritten, and
/// writes the others at once; with `IfBusy::Wait` the same change waits for the row.
#[test]
fn deferred_health_passes_over_a_held_endpoint_and_writes_the_others() {
    let Some((server, url, mut c)) = opened("health_pass_over") else {
        return;
    };
    let mut insert = |name: &str| {
        PgTx::new(&mut c, "test")
            .insert_endpoint(&endpoint("a", name, None))
            .unwrap()
            .id
    };
    let (held, free) = (insert("held"), insert("free"));
    let failed = HealthDelta {
        last_success_at: None,
        last_failure_at: Some(5_000),
        failures: 2,
        first_failure_at: Some(4_000),
    };
    let mut other = server.client(&url);
    let mut holder = other.transaction().unwrap();
    holder
        .query_one(
            "SELECT id FROM endpoints WHERE id = $1 FOR NO KEY UPDATE",
            &[&held],
        )
        .unwrap();
    let passed_over = PgTx::new(&mut c, "test")
        .record_endpoints_health(&[(held, failed), (free, failed)], IfBusy::Defer)
        .unwrap();
    assert_eq!(passed_over, vec![held]);
    let streak = |c: &mut postgres::Client, id: i64| {
        let e = PgTx::new(c, "test").get_endpoint_any(id).unwrap().unwrap();
        (e.consecutive_failures, e.last_failure_at)
    };
    assert_eq!(streak(&mut c, free), (2, Some(5_000)));
    assert_eq!(streak(&mut c, held), (0, None), "passed over, not written");
    holder.commit().unwrap();
    let passed_over = PgTx::new(&mut c, "test")
        .record_endpoints_health(&[(held, failed)], IfBusy::Defer)
        .unwrap();
    assert!(passed_over.is_empty());
    assert_eq!(streak(&mut c, held), (2, Some(5_000)));
}

/// An endpoint's health times never move back: a change written after a newer one (a node's
/// carried change, written a round late, after another node's) keeps the newer time, in the
/// round's statement and in the one-endpoint write alike.
#[test]
fn an_endpoints_health_times_never_move_back() {
    let Some((_server, _url, mut c)) = opened("health_times") else {
        return;
    };
    let id = PgTx::new(&mut c, "test")
        .insert_endpoint(&endpoint("a", "late", None))
        .unwrap()
        .id;
    let times = |c: &mut postgres::Client| {
        let e = PgTx::new(c, "test").get_endpoint_any(id).unwrap().unwrap();
        (e.last_success_at, e.last_failure_at)
    };
    let newer = HealthDelta {
        last_success_at: Some(9_000),
        last_failure_at: Some(9_500),
        failures: 1,
        first_failure_at: Some(9_500),
    };
    PgTx::new(&mut c, "test")
        .record_endpoints_health(&[(id, newer)], IfBusy::Wait)
        .unwrap();
    assert_eq!(times(&mut c), (Some(9_000), Some(9_500)));
    let older = HealthDelta {
        last_success_at: Some(8_000),
        last_failure_at: Some(8_500),
        failures: 1,
        first_failure_at: Some(8_500),
    };
    PgTx::new(&mut c, "test")
        .record_endpoints_health(&[(id, older)], IfBusy::Wait)
        .unwrap();
    assert_eq!(
        times(&mut c),
        (Some(9_000), Some(9_500)),
        "the round's statement"
    );
    PgTx::new(&mut c, "test")
        .write_endpoint_health(id, &older)
        .unwrap();
    assert_eq!(
        times(&mut c),
        (Some(9_000), Some(9_500)),
        "one endpoint's write"
    );
    let later = HealthDelta {
        last_success_at: Some(10_000),
        ..Default::default()
    };
    PgTx::new(&mut c, "test")
        .write_endpoint_health(id, &later)
        .unwrap();
    assert_eq!(
        times(&mut c),
        (Some(10_000), Some(9_500)),
        "a newer time is taken"
    );
}

#[test]
fn deleting_an_endpoint_cancels_its_tasks_and_pauses_schedules_left_without_targets() {
    let Some((_server, _url, mut c)) = opened("cascade") else {
        return;
    };
    let gone = PgTx::new(&mut c, "test")
        .insert_endpoint(&endpoint("a", "gone", None))
        .unwrap()
        .id;
    let kept = PgTx::new(&mut c, "test")
        .insert_endpoint(&endpoint("a", "kept", None))
        .unwrap()
        .id;
    let mut schedule = |app: &str, status: &str, ids: String| -> i64 {
        c.query_one(
            "INSERT INTO schedules (app_id, name, cron_expr, timezone, endpoint_ids, status, next_run_at, created_at, updated_at)
             VALUES ($1, 's', '* * * * *', 'UTC', $2, $3, 60000, 0, 0) RETURNING id",
            &[&app, &ids, &status],
        )
        .unwrap()
        .get(0)
    };
    let only = schedule("a", "active", format!("[{gone}]"));
    let shared = schedule("a", "active", format!("[{kept},{gone},77]"));
    let paused_already = schedule("a", "paused", format!("[{gone}]"));
    let untouched = schedule("a", "active", format!("[{kept}]"));
    let other_app = schedule("b", "active", format!("[{gone}]"));
    let pending = task(&mut c, gone, None, "pending", None);
    let done = task(&mut c, gone, None, "succeeded", Some(10));
    let elsewhere = task(&mut c, kept, None, "pending", None);

    let mut tx = c.transaction().unwrap();
    let paused = PgTx::new(&mut tx, "test")
        .delete_endpoint_cascade("a", gone, 50_000)
        .unwrap();
    tx.commit().unwrap();
    assert_eq!(paused, Some(vec![only]));
    assert_eq!(
        PgTx::new(&mut c, "test")
            .delete_endpoint_cascade("a", gone, 50_001)
            .unwrap(),
        None
    );
    assert_eq!(
        PgTx::new(&mut c, "test").get_endpoint("a", gone).unwrap(),
        None
    );

    let row = |c: &mut postgres::Client,
               id: i64|
     -> (String, Option<i64>, Option<String>, String, i64) {
        let r = c
            .query_one("SELECT status, next_run_at, paused_reason, endpoint_ids, updated_at FROM schedules WHERE id = $1", &[&id])
            .unwrap();
        (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4))
    };
    let reason = Some("every target endpoint was deleted".to_string());
    assert_eq!(
        row(&mut c, only),
        ("paused".into(), None, reason, "[]".into(), 50_000)
    );
    assert_eq!(
        row(&mut c, shared),
        (
            "active".into(),
            Some(60_000),
            None,
            format!("[{kept},77]"),
            50_000
        )
    );
    assert_eq!(
        row(&mut c, paused_already),
        ("paused".into(), Some(60_000), None, "[]".into(), 50_000)
    );
    assert_eq!(
        row(&mut c, untouched),
        ("active".into(), Some(60_000), None, format!("[{kept}]"), 0)
    );
    assert_eq!(
        row(&mut c, other_app),
        ("active".into(), Some(60_000), None, format!("[{gone}]"), 0)
    );

    let task_row =
        |c: &mut postgres::Client, id: i64| -> (String, Option<i64>, Option<i64>, Option<String>) {
            let r = c
            .query_one(
                "SELECT status, finished_at, next_attempt_at, last_error FROM tasks WHERE id = $1",
                &[&id],
            )
            .unwrap();
            (r.get(0), r.get(1), r.get(2), r.get(3))
        };
    assert_eq!(
        task_row(&mut c, pending),
        (
            "canceled".into(),
            Some(50_000),
            None,
            Some("endpoint deleted".into())
        )
    );
    assert_eq!(
        task_row(&mut c, done),
        ("succeeded".into(), Some(10), None, None)
    );
    assert_eq!(
        task_row(&mut c, elsewhere),
        ("pending".into(), None, Some(0), None)
    );
}

#[test]
fn replay_pairs_and_retention_chunks() {
    let Some((_server, _url, mut c)) = opened("replay_retention") else {
        return;
    };
    // replay: first use, replay, expiry taken over
    assert!(
        PgTx::new(&mut c, "test")
            .first_use_of_signature("whk_1", "sig", 0, 1_000, 500)
            .unwrap()
    );
    assert!(
        !PgTx::new(&mut c, "test")
            .first_use_of_signature("whk_1", "sig", 0, 1_500, 900)
            .unwrap()
    );
    assert!(
        !PgTx::new(&mut c, "test")
            .first_use_of_signature("whk_1", "sig", 0, 1_500, 1_000)
            .unwrap()
    );
    assert!(
        PgTx::new(&mut c, "test")
            .first_use_of_signature("whk_1", "sig", 0, 2_000, 1_001)
            .unwrap()
    );
    assert_eq!(count(&mut c, "SELECT expires_at FROM replay_guard"), 2_000);
    assert!(
        PgTx::new(&mut c, "test")
            .first_use_of_signature("whk_2", "sig", 0, 100, 0)
            .unwrap()
    );
    assert!(
        PgTx::new(&mut c, "test")
            .first_use_of_signature("whk_1", "other", 0, 200, 0)
            .unwrap()
    );
    assert_eq!(count(&mut c, "SELECT count(*) FROM replay_guard"), 3);
    // Nothing signed at or after `sent_before_ms` goes, expired or not.
    assert_eq!(
        PgTx::new(&mut c, "test")
            .prune_replay(1_500, 0, 10)
            .unwrap(),
        0
    );
    assert_eq!(
        PgTx::new(&mut c, "test").prune_replay(1_500, 1, 1).unwrap(),
        1
    );
    assert_eq!(
        PgTx::new(&mut c, "test")
            .prune_replay(1_500, 1, 10)
            .unwrap(),
        1
    );
    assert_eq!(
        PgTx::new(&mut c, "test")
            .prune_replay(1_500, 1, 10)
            .unwrap(),
        0
    );
    assert_eq!(count(&mut c, "SELECT count(*) FROM replay_guard"), 1);

    // retention: finished tasks before the cutoff go with their attempts, oldest first
    let ep = PgTx::new(&mut c, "test")
        .insert_endpoint(&endpoint("a", "e", None))
        .unwrap()
        .id;
    let kept_event = PgTx::new(&mut c, "test")
        .insert_event(&new_event("a", "x", None, "{}", 100), 1)
        .unwrap();
    let old_event = PgTx::new(&mut c, "test")
        .insert_event(&new_event("a", "x", None, "{}", 100), 0)
        .unwrap();
    let new_event = PgTx::new(&mut c, "test")
        .insert_event(&new_event("a", "x", None, "{}", 900), 0)
        .unwrap();
    let oldest = task(&mut c, ep, None, "succeeded", Some(100));
    let older = task(&mut c, ep, None, "failed", Some(200));
    let recent = task(&mut c, ep, None, "succeeded", Some(900));
    let open = task(&mut c, ep, Some(kept_event), "pending", None);
    for t in [oldest, older, recent, open] {
        PgTx::new(&mut c, "test")
            .insert_attempt(&attempt(t, 1))
            .unwrap();
    }
    assert_eq!(
        PgTx::new(&mut c, "test")
            .delete_finished_tasks(500, 1)
            .unwrap(),
        1
    );
    assert_eq!(
        count(
            &mut c,
            &format!("SELECT count(*) FROM tasks WHERE id = {oldest}")
        ),
        0
    );
    assert_eq!(
        count(
            &mut c,
            &format!("SELECT count(*) FROM tasks WHERE id = {older}")
        ),
        1
    );
    assert_eq!(
        PgTx::new(&mut c, "test")
            .delete_finished_tasks(500, 10)
            .unwrap(),
        1
    );
    assert_eq!(
        PgTx::new(&mut c, "test")
            .delete_finished_tasks(500, 10)
            .unwrap(),
        0
    );
    let left: Vec<i64> = c
        .query("SELECT id FROM tasks ORDER BY id", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(left, [recent, open]);
    let with_attempts: Vec<i64> = c
        .query("SELECT task_id FROM attempts ORDER BY task_id", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(with_attempts, [recent, open]);
    // old events go unless a task still refers to them
    assert_eq!(
        PgTx::new(&mut c, "test")
            .delete_old_events(500, 10)
            .unwrap(),
        1
    );
    assert_eq!(
        PgTx::new(&mut c, "test").get_event("a", old_event).unwrap(),
        None
    );
    assert!(
        PgTx::new(&mut c, "test")
            .get_event("a", kept_event)
            .unwrap()
            .is_some()
    );
    assert!(
        PgTx::new(&mut c, "test")
            .get_event("a", new_event)
            .unwrap()
            .is_some()
    );
    assert_eq!(
        PgTx::new(&mut c, "test")
            .delete_old_events(500, 10)
            .unwrap(),
        0
    );
}

/// Two nodes publishing the same key at once create one event: the advisory lock taken by
/// `find_by_key` makes the second wait for the first's commit, then find its event. Each
/// publisher pauses between lookup and insert, so without the lock both would insert.
#[test]
fn two_nodes_publishing_one_key_at_once_create_one_event() {
    let Some((server, url, mut c)) = opened("publish_race") else {
        return;
    };
    let barrier = Arc::new(Barrier::new(2));
    let publishers: Vec<_> = (0..2)
        .map(|_| {
            let mut node = server.client(&url);
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                let mut tx = node.transaction().unwrap();
                let found = PgTx::new(&mut tx, "test")
                    .find_event_by_key("a", "order.paid", "k", 0)
                    .unwrap();
                let id = match found {
                    Some(event) => event.id,
                    None => {
                        std::thread::sleep(Duration::from_millis(300));
                        PgTx::new(&mut tx, "test")
                            .insert_event(&new_event("a", "order.paid", Some("k"), "{}", 1_000), 0)
                            .unwrap()
                    }
                };
                tx.commit().unwrap();
                id
            })
        })
        .collect();
    let ids: Vec<i64> = publishers.into_iter().map(|p| p.join().unwrap()).collect();
    assert_eq!(ids[0], ids[1]);
    assert_eq!(count(&mut c, "SELECT count(*) FROM events"), 1);
}

/// Two nodes accepting the same signed request at once: exactly one sees a first use (the
/// second waits on the primary key for the first's commit, then finds a live row).
#[test]
fn a_signature_used_on_two_nodes_at_once_is_accepted_once() {
    let Some((server, url, mut c)) = opened("replay_race") else {
        return;
    };
    let barrier = Arc::new(Barrier::new(2));
    let nodes: Vec<_> = (0..2)
        .map(|_| {
            let mut node = server.client(&url);
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                let mut tx = node.transaction().unwrap();
                let first = PgTx::new(&mut tx, "test")
                    .first_use_of_signature("whk_1", "sig", 0, 10_000, 1_000)
                    .unwrap();
                std::thread::sleep(Duration::from_millis(200));
                tx.commit().unwrap();
                first
            })
        })
        .collect();
    let firsts: Vec<bool> = nodes.into_iter().map(|n| n.join().unwrap()).collect();
    assert_eq!(firsts.iter().filter(|&&f| f).count(), 1, "{firsts:?}");
    assert_eq!(count(&mut c, "SELECT count(*) FROM replay_guard"), 1);
}

/// Signed reads record their pairs through `write_unsynced` (each pair its own statement and
/// transaction, not waiting for a flush): two nodes, many requests at once, each pair sent
/// twice to each node. Every pair is a first use exactly once; an expired pair is taken over,
/// and is a replay again after that.
#[test]
fn signed_reads_on_two_nodes_at_once_accept_each_pair_once() {
    let Some((_server, url, mut c)) = opened("replay_batches") else {
        return;
    };
    let nodes: Vec<Arc<dyn webhookd::store::Store>> = (0..2)
        .map(|_| Arc::new(pg::PgStore::open(&url, 8).unwrap()) as Arc<dyn webhookd::store::Store>)
        .collect();
    const PAIRS: usize = 60;
    const COPIES: usize = 4;
    let barrier = Arc::new(Barrier::new(PAIRS * COPIES));
    let requests: Vec<_> = (0..PAIRS * COPIES)
        .map(|i| {
            let (pair, node) = (i % PAIRS, nodes[(i / PAIRS) % 2].clone());
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                let first = node
                    .write_unsynced(|tx| {
                        tx.first_use_at_key_generation(
                            "whk_1",
                            &format!("sig-{pair}"),
                            (pair % 7) as i64,
                            10_000,
                            1_000,
                        )
                    })
                    .unwrap();
                (pair, first)
            })
        })
        .collect();
    let mut firsts = [0; PAIRS];
    for request in requests {
        let (pair, first) = request.join().unwrap();
        if let Some(generation) = first {
            assert_eq!(generation, 0);
            firsts[pair] += 1;
        }
    }
    assert_eq!(firsts, [1; PAIRS]);
    assert_eq!(
        count(&mut c, "SELECT count(*) FROM replay_guard"),
        PAIRS as i64
    );
    // Expired at 10,000: taken over at 10,001, a replay again after that.
    let again = |now| {
        nodes[0]
            .write_unsynced(|tx| tx.first_use_at_key_generation("whk_1", "sig-0", 0, 20_000, now))
            .unwrap()
    };
    assert_eq!(again(10_001), Some(0));
    assert_eq!(again(10_002), None);
    assert_eq!(
        count(
            &mut c,
            "SELECT expires_at FROM replay_guard WHERE signature = 'sig-0'"
        ),
        20_000
    );
}

/// One endpoint's round as the delivery pool records it: the health write, then (when the
/// round failed and auto-disabling is on) the disabling test at 3 failures over
/// `failing_after_ms`. Returns the app and streak of an endpoint this disabled.
fn record_health(
    c: &mut postgres::Client,
    id: i64,
    delta: &HealthDelta,
    failing_after_ms: Option<i64>,
    now_ms: i64,
) -> Option<(String, i64)> {
    let mut tx = PgTx::new(c, "test");
    tx.write_endpoint_health(id, delta).unwrap();
    match failing_after_ms {
        Some(after_ms) if delta.failures > 0 => tx
            .disable_failing_endpoint(id, 3, after_ms, now_ms)
            .unwrap(),
        _ => None,
    }
}
