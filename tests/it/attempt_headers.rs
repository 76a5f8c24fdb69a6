//! Attempts record the request headers webhookd sent (docs/API.md, "Attempt"): checked against
//! what a real loopback receiver got, retries and test deliveries included, with credentials
//! redacted.

use crate::delivery::{attempts, endpoint, policy, task_id, wait_status};
use crate::support::{Answer, Received, Receiver, TestServer, ok};
use serde_json::{Value, json};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(10);

/// The headers the HTTP client adds of its own, which an attempt does not record.
const TRANSPORT: &[&str] = &["accept", "accept-encoding", "content-length", "host"];

/// An attempt's `request_headers` as (name, value) pairs.
fn recorded(attempt: &Value) -> Vec<(String, String)> {
    attempt["request_headers"]
        .as_array()
        .unwrap_or_else(|| panic!("no request_headers in {attempt}"))
        .iter()
        .map(|pair| {
            let pair = pair.as_array().expect("a [name, value] pair");
            assert_eq!(pair.len(), 2, "{pair:?}");
            (
                pair[0].as_str().unwrap().to_string(),
                pair[1].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// The recorded headers are, in order, the headers the receiver got besides the client's own
/// transport headers: the same names and values, except the redacted ones named in `secret`,
/// whose recorded value is what [`redacted`] makes of the value sent.
fn assert_same_as_received(recorded: &[(String, String)], got: &Received, secret: &[&str]) {
    let sent: Vec<(String, String)> = got
        .headers
        .iter()
        .filter(|(name, _)| !TRANSPORT.contains(&name.as_str()))
        .cloned()
        .collect();
    let expected: Vec<(String, String)> = sent
        .iter()
        .map(|(name, value)| match secret.contains(&name.as_str()) {
            true => (name.clone(), redacted(name, value)),
            false => (name.clone(), value.clone()),
        })
        .collect();
    assert_eq!(recorded, expected.as_slice(), "recorded vs received");
    for name in TRANSPORT {
        let is_body = *name == "content-length";
        assert!(
            got.header(name).is_some() || (is_body && got.body.is_empty()),
            "the client's own {name} was not sent: {:?}",
            got.headers
        );
    }
}

/// How docs/API.md says a credential is recorded.
fn redacted(name: &str, value: &str) -> String {
    match value.split_once(' ') {
        Some((scheme, _)) if name.ends_with("authorization") => {
            format!("{scheme} … ({} bytes)", value.len())
        }
        _ => format!("… ({} bytes)", value.len()),
    }
}

fn value<'a>(pairs: &'a [(String, String)], name: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

#[test]
fn attempts_record_the_headers_the_receiver_got_with_credentials_redacted() {
    let server = TestServer::start();
    let c = server.client();
    let rx = Receiver::start();
    rx.script([Answer::status(500).body("again")]);
    let p = policy(&c, 2, "fixed", 0, 0);
    let token = "Bearer s3cr3t-t0ken-0123456789";
    let ep = endpoint(
        &c,
        &rx.url,
        json!({
            "retry_policy_id": p,
            "secret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "headers": {
                "X-Tenant": "acme",
                "Authorization": token,
                "X-Api-Key": "key with spaces 42",
                "Cookie": "session=abc",
            },
        }),
    );
    let id = task_id(&c, ep);
    wait_status(&c, id, "success");
    let got = rx.wait_for(2, WAIT);
    let tries = attempts(&c, id);
    assert_eq!(tries.len(), 2);
    let secret = ["authorization", "x-api-key", "cookie"];
    for (n, (attempt, got)) in tries.iter().zip(&got).enumerate() {
        let pairs = recorded(attempt);
        assert_same_as_received(&pairs, got, &secret);
        assert_eq!(
            value(&pairs, "x-service-attempt"),
            Some((n + 1).to_string().as_str())
        );
        assert_eq!(
            value(&pairs, "webhook-id"),
            Some(format!("task_{id}").as_str())
        );
        assert_eq!(value(&pairs, "content-type"), Some("application/json"));
        assert_eq!(
            value(&pairs, "user-agent"),
            Some(concat!("webhookd/", env!("CARGO_PKG_VERSION")))
        );
        assert_eq!(value(&pairs, "x-tenant"), Some("acme"));
        for name in ["x-service-signature", "webhook-signature", "traceparent"] {
            assert!(value(&pairs, name).is_some(), "{name} missing: {pairs:?}");
        }
        // No credential is stored: the receiver got it, the record has its length.
        assert_eq!(got.header("authorization"), Some(token));
        assert_eq!(
            value(&pairs, "authorization"),
            Some(format!("Bearer … ({} bytes)", token.len()).as_str())
        );
        assert_eq!(value(&pairs, "x-api-key"), Some("… (18 bytes)"));
        assert_eq!(value(&pairs, "cookie"), Some("… (11 bytes)"));
        let text = attempt["request_headers"].to_string();
        for hidden in ["s3cr3t", "key with spaces", "session=abc"] {
            assert!(!text.contains(hidden), "{hidden} recorded: {text}");
        }
    }
    // Each attempt has its own timestamp and signature, as sent.
    let sig = |a: &Value| value(&recorded(a), "webhook-signature").map(str::to_string);
    assert_eq!(
        sig(&tries[1]).as_deref(),
        got[1].header("webhook-signature")
    );
}

#[test]
fn a_bodiless_unsigned_request_records_its_own_user_agent_and_no_content_type() {
    let server = TestServer::start();
    let c = server.client();
    let rx = Receiver::start();
    let ep = endpoint(
        &c,
        &rx.url,
        json!({ "method": "GET", "secret": null, "headers": { "User-Agent": "acme-hooks/2", "X-Dup": "a", "x-dup": "b" } }),
    );
    let id = task_id(&c, ep);
    wait_status(&c, id, "success");
    let got = &rx.wait_for(1, WAIT)[0];
    let pairs = recorded(&attempts(&c, id)[0]);
    assert_same_as_received(&pairs, got, &[]);
    assert_eq!(value(&pairs, "user-agent"), Some("acme-hooks/2"));
    assert_eq!(value(&pairs, "content-type"), None);
    assert_eq!(value(&pairs, "x-service-signature"), None);
    // Names differing in case only are both sent, and both recorded.
    let dups: Vec<&str> = pairs
        .iter()
        .filter(|(n, _)| n == "x-dup")
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(dups.len(), 2, "{pairs:?}");
}

#[test]
fn a_test_delivery_records_its_headers_too() {
    let server = TestServer::start();
    let c = server.client();
    let rx = Receiver::start();
    let ep = endpoint(&c, &rx.url, json!({ "headers": { "X-Env": "staging" } }));
    let reply = ok(&c, "POST", &format!("/endpoints/{ep}/test"), None);
    let id = reply["task_id"]
        .as_i64()
        .unwrap_or_else(|| panic!("no task_id in {reply}"));
    let got = &rx.wait_for(1, WAIT)[0];
    let pairs = recorded(&attempts(&c, id)[0]);
    assert_same_as_received(&pairs, got, &[]);
    assert_eq!(value(&pairs, "x-env"), Some("staging"));
    // The reply's attempt is the recorded one.
    assert_eq!(recorded(&reply["attempt"]), pairs);
}
