//! Delivery controls (docs/design.md §12) and fair delivery, observed at loopback receivers that
//! record arrival times and concurrency: rate-limit spacing, `max_in_flight` caps, in-order
//! delivery across a retrying head, a hanging endpoint that must not stop the others, secret
//! rotation checked by the official `standardwebhooks` library, and the 40001s.

use crate::delivery::{endpoint, policy, task_id, wait_status};
use crate::support::{
    Answer, Receiver, TestServer, err, expect_field_errors, ok, require_component,
};
use chrono::Utc;
use serde_json::{Value, json};
use std::io::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use webhookd::client::Client;
use webhookd::clock::Clock as _;

const WAIT: Duration = Duration::from_secs(15);

/// Task ids in the order their deliveries arrived.
fn arrival_order(receiver: &Receiver) -> Vec<i64> {
    receiver
        .received()
        .iter()
        .map(|r| r.header("x-service-task-id").unwrap().parse().unwrap())
        .collect()
}

fn tasks(c: &Client, endpoint_id: i64, n: usize) -> Vec<i64> {
    (0..n).map(|_| task_id(c, endpoint_id)).collect()
}

#[test]
fn a_rate_limit_spaces_starts_with_a_burst_of_one() {
    // The limiter reads the server clock: moving it by hand makes the spacing exact, whatever
    // the machine's load. "Nothing more arrives" is checked for 300 ms of real time.
    let server = TestServer::start_manual(Utc::now(), |c| c.workers = 8);
    let c = server.client();
    let receiver = Receiver::start();
    let ep = endpoint(&c, &receiver.url, json!({ "rate_limit_per_sec": 2 }));
    let ids = tasks(&c, ep, 4);
    let quiet = || std::thread::sleep(Duration::from_millis(300));
    assert_eq!(receiver.wait_for(1, WAIT).len(), 1);
    quiet();
    assert_eq!(
        receiver.received().len(),
        1,
        "a burst of one: the rest wait"
    );
    for n in 2..=4 {
        server.advance(chrono::Duration::milliseconds(499));
        quiet();
        assert_eq!(receiver.received().len(), n - 1, "not before 500 ms at 2/s");
        server.advance(chrono::Duration::milliseconds(1));
        assert_eq!(receiver.wait_for(n, WAIT).len(), n, "the next slot is free");
        quiet();
        assert_eq!(receiver.received().len(), n, "one start per slot");
    }
    for id in &ids {
        assert_eq!(wait_status(&c, *id, "success")["attempts"], 1);
    }
    let mut delivered = arrival_order(&receiver);
    delivered.sort_unstable();
    assert_eq!(delivered, ids, "a limit never drops a task");
}

#[test]
fn a_rate_limited_endpoint_does_not_slow_another() {
    let server = TestServer::start_with(|c| c.workers = 4);
    let c = server.client();
    let (slow, fast) = (Receiver::start(), Receiver::start());
    let started = Instant::now();
    let limited = endpoint(&c, &slow.url, json!({ "rate_limit_per_sec": 0.5 }));
    tasks(&c, limited, 20);
    let free = endpoint(&c, &fast.url, json!({}));
    tasks(&c, free, 40);
    assert_eq!(fast.wait_for(40, WAIT).len(), 40);
    // Not a timing: the unlimited endpoint's 40 are all delivered while the limited one is
    // still far from its 20 (which take 38 s at 0.5/s), so they never queued behind it; and the
    // limited one had no more starts than its rate allows in the time that took.
    let slow_starts = slow.received().len();
    // Counted before the time is read, from before the limited endpoint existed: generous.
    let allowed = 2 + (started.elapsed().as_secs_f64() * 0.5) as usize;
    assert!(
        slow_starts < 20,
        "the unlimited endpoint waited for the limited one"
    );
    assert!(
        slow_starts <= allowed,
        "0.5/s allows {allowed} starts in {:?}, {slow_starts} made",
        started.elapsed()
    );
}

#[test]
fn max_in_flight_caps_concurrency_at_the_receiver() {
    let server = TestServer::start_with(|c| c.workers = 8);
    let c = server.client();
    for cap in [3, 1] {
        let receiver = Receiver::start();
        // Each reply takes a second: long enough that `cap` sends overlap even when a busy
        // machine is slow to start them.
        receiver.set_default(Answer::status(200).delayed(Duration::from_secs(1)));
        let ep = endpoint(&c, &receiver.url, json!({ "max_in_flight": cap }));
        let ids = tasks(&c, ep, 9);
        assert_eq!(receiver.wait_for(9, WAIT).len(), 9);
        assert_eq!(receiver.max_concurrent(), cap, "max_in_flight {cap}");
        if cap == 1 {
            assert_eq!(arrival_order(&receiver), ids, "one at a time is in order");
        }
        for id in ids {
            wait_status(&c, id, "success");
        }
    }
}

#[test]
fn in_order_delivery_holds_back_the_rest_while_the_head_retries() {
    let server = TestServer::start_with(|c| c.workers = 8);
    let c = server.client();
    let receiver = Receiver::start();
    receiver.script([Answer::status(500), Answer::status(503)]);
    let p = policy(&c, 5, "fixed", 1, 1);
    let ep = endpoint(
        &c,
        &receiver.url,
        json!({ "max_in_flight": 1, "retry_policy_id": p }),
    );
    let ids = tasks(&c, ep, 4);
    for id in &ids {
        wait_status(&c, *id, "success");
    }
    let order = arrival_order(&receiver);
    assert_eq!(
        order,
        [ids[0], ids[0], ids[0], ids[1], ids[2], ids[3]],
        "the head failed twice, then succeeded; nothing overtook it"
    );
    let got = receiver.received();
    assert!(
        got[3].at - got[0].at >= Duration::from_millis(1900),
        "the others waited out both retry delays"
    );
    assert_eq!(receiver.max_concurrent(), 1);
}

#[test]
fn a_hanging_endpoint_holds_only_its_share_of_the_workers() {
    // 8 workers: the default cap is 2 sends per endpoint. The hanging receiver never answers within
    // the endpoint's timeout; before fair claiming, its backlog took all 8 workers.
    let server = TestServer::start_with(|c| {
        c.workers = 8;
        c.shutdown_grace_secs = 0;
    });
    let c = server.client();
    let hanging = Receiver::start();
    // Hangs past the longest timeout (300 s): its two sends hold their workers for the whole
    // test however slowly a busy machine runs it (a shorter hang timed out and let two more
    // start).
    hanging.set_default(Answer::status(200).delayed(Duration::from_secs(600)));
    let stuck = endpoint(&c, &hanging.url, json!({ "timeout_ms": 300_000 }));
    tasks(&c, stuck, 150);
    assert_eq!(hanging.wait_for(2, WAIT).len(), 2);

    let other_app = server.client_for_app("app2");
    let (same, other) = (Receiver::start(), Receiver::start());
    let same_ep = endpoint(&c, &same.url, json!({}));
    let other_ep = endpoint(&other_app, &other.url, json!({}));
    let mut latencies = Vec::new();
    for _ in 0..10 {
        for (client, ep, receiver) in [(&c, same_ep, &same), (&other_app, other_ep, &other)] {
            let before = receiver.received().len();
            let started = Instant::now();
            task_id(client, ep);
            assert_eq!(receiver.wait_for(before + 1, WAIT).len(), before + 1);
            latencies.push(started.elapsed());
        }
    }
    // The hanging tasks give up only after their 300 s timeout: a healthy delivery that waited
    // for one of their workers would take that long. Any shorter wait is the machine's load.
    let worst = latencies.iter().max().unwrap();
    assert!(
        *worst < Duration::from_secs(150),
        "a healthy delivery took {worst:?}: it waited for a hanging one"
    );
    assert_eq!(
        hanging.received().len(),
        2,
        "the hanging endpoint holds 2 workers; its other tasks wait pending"
    );
    // Behind its 2 sends, a few more may wait claimed in memory (4 per send it may have);
    // every other task waits pending in the database.
    let pending = ok(
        &c,
        "GET",
        &format!("/tasks?endpoint_id={stuck}&status=pending"),
        None,
    );
    let pending = pending["total"].as_i64().unwrap();
    assert!((142..=148).contains(&pending), "{pending} pending");
}

#[test]
fn limits_are_validated_stored_and_cleared() {
    let server = TestServer::start();
    let c = server.client();
    let created = ok(
        &c,
        "POST",
        "/endpoints",
        Some(
            json!({ "name": "e", "url": "http://127.0.0.1:9/", "rate_limit_per_sec": 2.5, "max_in_flight": 1 }),
        ),
    );
    assert_eq!(created["rate_limit_per_sec"], 2.5);
    assert_eq!(created["max_in_flight"], 1);
    assert_eq!(created["previous_secret_expires_at"], Value::Null);
    let id = created["id"].as_i64().unwrap();
    let path = format!("/endpoints/{id}");
    let cleared = ok(
        &c,
        "PATCH",
        &path,
        Some(json!({ "rate_limit_per_sec": null, "max_in_flight": 5 })),
    );
    assert_eq!(cleared["rate_limit_per_sec"], Value::Null);
    assert_eq!(cleared["max_in_flight"], 5);
    let bad: [(&'static str, Value); 9] = [
        ("rate_limit_per_sec", json!(0)),
        ("rate_limit_per_sec", json!(0.001)),
        ("rate_limit_per_sec", json!(10_000.5)),
        ("rate_limit_per_sec", json!("2")),
        ("max_in_flight", json!(0)),
        ("max_in_flight", json!(1001)),
        ("max_in_flight", json!(1.5)),
        ("secret", json!("whsec_not base64!")),
        ("secret", json!("whsec_")),
    ];
    let create = bad.iter().map(|(field, value)| {
        let mut body = json!({ "name": "e", "url": "http://127.0.0.1:9/" });
        body[*field] = value.clone();
        (body, *field)
    });
    expect_field_errors(&c, "POST", "/endpoints", create);
    let patch = bad
        .iter()
        .map(|(field, value)| (json!({ *field: value }), *field));
    expect_field_errors(&c, "PATCH", &path, patch);
}

#[test]
fn rotate_secret_validates_its_body() {
    let server = TestServer::start();
    let c = server.client();
    // Unsigned (an explicit null), so the rotation below has no secret before it.
    let id = endpoint(&c, "http://127.0.0.1:9/", json!({ "secret": null }));
    let path = format!("/endpoints/{id}/rotate-secret");
    expect_field_errors(
        &c,
        "POST",
        &path,
        [
            (json!({ "secret": "whsec_%%%" }), "secret"),
            (json!({ "overlap_secs": 604_801 }), "overlap_secs"),
            (json!({ "overlap_secs": -1 }), "overlap_secs"),
            (json!({ "overlap_secs": "1" }), "overlap_secs"),
            (json!({ "overlap": 60 }), "unknown field \"overlap\""),
        ],
    );
    err(
        &c,
        "POST",
        "/endpoints/999999/rotate-secret",
        None,
        404,
        40401,
    );
    // No secret before: the new one, nothing to overlap with.
    let rotated = ok(&c, "POST", &path, Some(json!({})));
    let secret = rotated["secret"].as_str().unwrap();
    assert!(
        secret.starts_with("whsec_") && secret.len() == 6 + 44,
        "{secret}"
    );
    assert_eq!(rotated["previous_secret_expires_at"], Value::Null);
}

/// The Python of the venv holding the official `standardwebhooks` library: the one
/// `.ci/standardwebhooks.sh` made, or one this makes when pip can reach PyPI.
fn standardwebhooks_python() -> Option<PathBuf> {
    if let Ok(python) = std::env::var("WEBHOOKD_STANDARDWEBHOOKS_PYTHON") {
        return Some(PathBuf::from(python));
    }
    let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/venvs/standardwebhooks");
    let python = venv.join("bin/python");
    let has_lib = |python: &PathBuf| {
        crate::support::program_runs(python.to_str().unwrap(), &["-c", "import standardwebhooks"])
    };
    if has_lib(&python) {
        return Some(python);
    }
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".ci/standardwebhooks.sh");
    // Past the harness's capture: a test that downloads and installs says so.
    let _ = writeln!(
        std::io::stderr(),
        "\n*** {}: installing the standardwebhooks Python library from PyPI into {} \
         (pip, and apt-get install python3-venv if venv is missing: .ci/standardwebhooks.sh) ***",
        std::thread::current().name().unwrap_or("a test"),
        venv.display()
    );
    let made = std::process::Command::new("bash")
        .arg(script)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    (made && has_lib(&python)).then_some(python)
}

/// Asks the official library whether `secret` verifies the delivery `r`.
fn verifies(python: &PathBuf, secret: &str, r: &crate::support::Received) -> bool {
    let input = json!({
        "secret": secret,
        "body": String::from_utf8_lossy(&r.body),
        "headers": {
            "webhook-id": r.header("webhook-id").unwrap(),
            "webhook-timestamp": r.header("webhook-timestamp").unwrap(),
            "webhook-signature": r.header("webhook-signature").unwrap(),
        },
    });
    let code = "import json, sys\n\
        from standardwebhooks.webhooks import Webhook\n\
        d = json.load(sys.stdin)\n\
        try:\n    Webhook(d['secret']).verify(d['body'], d['headers'])\n    print('ok')\n\
        except Exception as e:\n    print('rejected', e)\n";
    let mut child = std::process::Command::new(python)
        .args(["-c", code])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("run python");
    use std::io::Write as _;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim() == "ok"
}

#[test]
fn rotation_signs_with_both_secrets_during_the_overlap_then_only_the_new() {
    let Some(python) = standardwebhooks_python() else {
        require_component(
            "the standardwebhooks Python library",
            false,
            "bash .ci/standardwebhooks.sh (python3 -m venv; pip install standardwebhooks)",
        );
        return;
    };
    // A manual clock at the real time: the library checks the timestamp against its own clock.
    let server = TestServer::start_manual(Utc::now(), |_| {});
    let c = server.client();
    let receiver = Receiver::start();
    let old = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let id = endpoint(&c, &receiver.url, json!({ "secret": old }));
    let rotated = ok(
        &c,
        "POST",
        &format!("/endpoints/{id}/rotate-secret"),
        Some(json!({ "overlap_secs": 120 })),
    );
    let new = rotated["secret"].as_str().unwrap().to_string();
    assert!(new.starts_with("whsec_") && new != old);
    let expires = chrono::DateTime::parse_from_rfc3339(
        rotated["previous_secret_expires_at"].as_str().unwrap(),
    )
    .unwrap();
    let now = server.manual_clock.as_ref().unwrap().now_ms() / 1000;
    assert!((expires.timestamp() - now - 120).abs() <= 1, "{rotated}");

    task_id(&c, id);
    let during = receiver.wait_for(1, WAIT).pop().unwrap();
    let signatures: Vec<&str> = during
        .header("webhook-signature")
        .unwrap()
        .split(' ')
        .collect();
    assert_eq!(signatures.len(), 2, "new and old during the overlap");
    let hex: Vec<&str> = during
        .header("x-service-signature")
        .unwrap()
        .split(',')
        .collect();
    assert_eq!(hex.len(), 2);
    let ts = during.header("x-service-timestamp").unwrap();
    assert!(webhookd::signing::verify_hex(
        new.as_bytes(),
        ts,
        &during.body,
        hex[0]
    ));
    assert!(webhookd::signing::verify_hex(
        old.as_bytes(),
        ts,
        &during.body,
        hex[1]
    ));
    assert!(verifies(&python, &new, &during), "the new secret verifies");
    assert!(
        verifies(&python, old, &during),
        "the old secret still verifies"
    );
    assert!(!verifies(&python, "whsec_dGhpcyBpcyBub3QgaXQ=", &during));

    server.advance(chrono::Duration::seconds(121));
    task_id(&c, id);
    let after = receiver.wait_for(2, WAIT).pop().unwrap();
    assert_eq!(
        after
            .header("webhook-signature")
            .unwrap()
            .split(' ')
            .count(),
        1
    );
    assert!(!after.header("x-service-signature").unwrap().contains(','));
    assert!(verifies(&python, &new, &after), "the new secret verifies");
    assert!(
        !verifies(&python, old, &after),
        "the old secret no longer does"
    );

    // A second rotation, then clear_secret: no overlap left, nothing signed.
    ok(
        &c,
        "POST",
        &format!("/endpoints/{id}/rotate-secret"),
        Some(json!({ "secret": "whsec_dGhpcyBpcyBub3QgaXQ=" })),
    );
    let cleared = ok(
        &c,
        "PATCH",
        &format!("/endpoints/{id}"),
        Some(json!({ "clear_secret": true })),
    );
    assert_eq!(cleared["secret"], Value::Null);
    assert_eq!(cleared["previous_secret_expires_at"], Value::Null);
    task_id(&c, id);
    let unsigned = receiver.wait_for(3, WAIT).pop().unwrap();
    assert_eq!(unsigned.header("webhook-signature"), None);
    assert_eq!(unsigned.header("x-service-signature"), None);
}

#[test]
fn a_default_cap_of_one_limits_sends_but_not_order() {
    // 4 workers: the default cap is 1 send per endpoint; a task waiting an hour to retry must
    // not hold back the next one (only `max_in_flight: 1` means in order).
    let server = TestServer::start_with(|c| c.workers = 4);
    let c = server.client();
    let receiver = Receiver::start();
    receiver.script([Answer::status(500)]);
    let p = policy(&c, 3, "fixed", 3600, 3600);
    let ep = endpoint(&c, &receiver.url, json!({ "retry_policy_id": p }));
    let first = task_id(&c, ep);
    assert_eq!(receiver.wait_for(1, WAIT).len(), 1);
    let second = task_id(&c, ep);
    wait_status(&c, second, "success");
    let t = ok(&c, "GET", &format!("/tasks/{first}"), None);
    assert_eq!(
        (t["status"].as_str(), t["attempts"].as_i64()),
        (Some("pending"), Some(1))
    );
}
