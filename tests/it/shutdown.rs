//! A delivery still under way when the shutdown grace ends: the receiver may have it, so the
//! attempt is recorded ("interrupted by shutdown", counted) and its task is `pending` again
//! with a sane `next_attempt_at` — never left `running` by a clean stop (both stores).

use crate::delivery::{attempts, endpoint, policy, task_id, wait_status};
use crate::support::{Answer, Receiver, TestServer, ok};
use chrono::{DateTime, Utc};
use serde_json::json;
use std::time::Duration;

/// Generous: the condition, not this budget, is what the test waits for.
const WAIT: Duration = Duration::from_secs(60);

fn ms(value: &serde_json::Value) -> i64 {
    DateTime::parse_from_rfc3339(value.as_str().expect("a time"))
        .expect("RFC 3339")
        .timestamp_millis()
}

#[test]
fn an_attempt_cut_by_shutdown_is_recorded_and_its_task_is_pending_again() {
    let grace = |c: &mut webhookd::config::Config| c.shutdown_grace_secs = 1;
    let server = TestServer::start_with(grace);
    let c = server.client();
    // The receiver holds each request far past the grace (and the stop).
    let held = Receiver::start();
    held.set_default(Answer::status(200).delayed(Duration::from_secs(30)));
    // Retried in an hour: after the restart nothing sends it again before the test looks.
    let hourly = policy(&c, 5, "fixed", 3600, 3600);
    let slow = endpoint(
        &c,
        &held.url,
        json!({ "timeout_ms": 60_000, "retry_policy_id": hourly }),
    );
    let retried = task_id(&c, slow);
    // A task on its last allowed attempt is not failed for good by a shutdown: it is tried once
    // more after the restart (and this time its receiver answers).
    let last = Receiver::start();
    last.script([Answer::status(200).delayed(Duration::from_secs(30))]);
    last.set_default(Answer::status(200));
    let once = policy(&c, 1, "fixed", 0, 0);
    let single = endpoint(
        &c,
        &last.url,
        json!({ "timeout_ms": 60_000, "retry_policy_id": once }),
    );
    let final_try = task_id(&c, single);
    assert_eq!(held.wait_for(1, WAIT).len(), 1);
    assert_eq!(last.wait_for(1, WAIT).len(), 1);
    let stopped_at = Utc::now().timestamp_millis();

    let server = server.restart(grace);
    let c = server.client();
    let t = ok(&c, "GET", &format!("/tasks/{retried}"), None);
    assert_eq!(t["status"], "pending", "{t}");
    assert_eq!(t["attempts"], 1, "{t}");
    assert_eq!(t["last_error"], "interrupted by shutdown", "{t}");
    let next = ms(&t["next_attempt_at"]);
    assert!(
        next >= stopped_at + 3_000_000,
        "due after the policy's hour, not in the past: {t}"
    );
    let recorded = attempts(&c, retried);
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    assert_eq!(recorded[0]["attempt"], 1);
    assert_eq!(recorded[0]["error"], "interrupted by shutdown");
    assert_eq!(recorded[0]["status_code"], serde_json::Value::Null);
    assert!(recorded[0]["duration_ms"].as_i64().unwrap() >= 0);

    let done = wait_status(&c, final_try, "success");
    assert_eq!(done["attempts"], 2, "{done}");
    let recorded = attempts(&c, final_try);
    let errors: Vec<_> = recorded.iter().map(|a| a["error"].clone()).collect();
    assert_eq!(
        errors,
        [json!("interrupted by shutdown"), serde_json::Value::Null],
        "{recorded:?}"
    );
    assert_eq!(last.wait_for(2, WAIT).len(), 2);
    // No task of the held endpoint is running or was sent again.
    let running = ok(&c, "GET", "/tasks?status=running", None);
    assert_eq!(running["total"], 0, "{running}");
    assert_eq!(held.received().len(), 1);
}
