//! One delivery attempt (docs/design.md §6): the request a claimed task becomes, sending it with the
//! shared HTTP agent, and what the reply means for the task.

use super::target::{GuardedResolver, TargetRules};
use crate::config::Config;
use crate::retry::{RetryPolicy, parse_retry_after};
use crate::signing;
use crate::store::attempts::RequestHeaders;
use crate::store::endpoints::Endpoint;
use crate::store::tasks::{AfterAttempt, Claimed};
use chrono::{DateTime, Utc};
use std::borrow::Cow;
use std::io::Read;
use std::time::{Duration, Instant};
use ureq::http::{self, StatusCode};
use ureq::unversioned::transport::DefaultConnector;
use ureq::{AsSendBody, RequestExt};

/// How much of a reply body an attempt keeps.
const KEPT_BODY_BYTES: usize = 4096;
/// A reply body up to this size is read to its end so the connection can be reused.
const DRAINED_BODY_BYTES: u64 = 1024 * 1024;
/// The `User-Agent` of every delivery whose endpoint does not set its own.
const USER_AGENT: &str = concat!("webhookd/", env!("CARGO_PKG_VERSION"));
/// A header whose lower-case name holds one of these may carry a credential (an endpoint's own
/// headers may hold the receiver's): its value is recorded redacted (docs/API.md, "Attempt").
/// The list follows the usual scrubbing rules of error trackers (Authorization, Cookie,
/// X-Api-Key, X-Auth-Token, Private-Token, …); no header webhookd sets itself matches it.
const SECRET_NAME_PARTS: &[&str] = &[
    "auth",
    "cookie",
    "credential",
    "key",
    "passwd",
    "password",
    "secret",
    "session",
    "token",
];

/// Where and how tasks of one endpoint are sent; loaded once per claimed batch.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    pub endpoint_id: i64,
    pub url: String,
    pub method: String,
    /// The endpoint's own headers.
    pub headers: Vec<(String, String)>,
    pub secret: Option<String>,
    /// The secret of before the last rotation and when it stops signing (epoch ms).
    pub previous_secret: Option<(String, i64)>,
    pub timeout: Duration,
    pub policy: RetryPolicy,
}

impl Target {
    pub fn new(endpoint: &Endpoint, policy: RetryPolicy) -> Target {
        Target {
            endpoint_id: endpoint.id,
            url: endpoint.url.clone(),
            method: endpoint.method.clone(),
            headers: endpoint
                .headers
                .iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect(),
            secret: endpoint.secret.clone(),
            previous_secret: endpoint
                .previous_secret
                .clone()
                .zip(endpoint.previous_secret_expires_at),
            timeout: Duration::from_millis(u64::try_from(endpoint.timeout_ms).unwrap_or(1).max(1)),
            policy,
        }
    }

    /// The secrets that sign an attempt starting at `now_ms`: the current one, then the previous
    /// one while its overlap lasts.
    pub fn secrets_at(&self, now_ms: i64) -> Vec<&str> {
        let Some(current) = self.secret.as_deref() else {
            return Vec::new();
        };
        let mut secrets = vec![current];
        if let Some((previous, until)) = &self.previous_secret
            && now_ms < *until
        {
            secrets.push(previous.as_str());
        }
        secrets
    }

    /// POST, PUT and PATCH carry the payload; GET and DELETE send no body.
    pub fn sends_body(&self) -> bool {
        matches!(self.method.as_str(), "POST" | "PUT" | "PATCH")
    }
}

/// The HTTP agent every worker shares: keep-alive pooling, no redirects followed, no proxy
/// from the environment (the target rules must see the real target), the target rules in the
/// resolver, and reply statuses returned rather than turned into errors. Each connection's
/// buffers are zero-filled when first used, so their size is memory every open connection
/// (a hanging send's among them) holds: 32 KiB in for a reply's head (ureq's default is 128),
/// 16 KiB out (the request is written in pieces; a piece is one header line, at most ~4 KiB).
pub fn agent(config: &Config) -> ureq::Agent {
    let idle = config.workers.saturating_mul(4).max(16);
    let http_config = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .max_redirects_will_error(false)
        .proxy(None)
        .user_agent(USER_AGENT)
        .max_idle_connections(idle)
        .max_idle_connections_per_host(config.workers.max(4))
        .input_buffer_size(32 * 1024)
        .output_buffer_size(16 * 1024)
        .build();
    let rules = TargetRules {
        allow: config.allow_targets.clone(),
        deny_private: config.deny_private_targets,
    };
    ureq::Agent::with_parts(
        http_config,
        DefaultConnector::default(),
        GuardedResolver::new(rules),
    )
}

/// The webhookd headers of one attempt (docs/design.md §6), besides the endpoint's own and
/// `Content-Type`. `body` is what is sent (empty for GET/DELETE); both signatures cover it.
/// With several `secrets` (a rotation's overlap, newest first) each header carries one
/// signature per secret: `v1,<new> v1,<old>` and `<new hex>,<old hex>`.
pub fn delivery_headers(
    task: &Claimed,
    secrets: &[&str],
    timestamp: i64,
    body: &[u8],
) -> Vec<(&'static str, String)> {
    let ts = timestamp.to_string();
    let webhook_id = format!("task_{}", task.id);
    let mut headers = Vec::with_capacity(8);
    headers.push(("X-Service-Task-Id", task.id.to_string()));
    headers.push(("X-Service-Attempt", task.attempt.to_string()));
    headers.push(("X-Service-Timestamp", ts.clone()));
    if let Some(event) = &task.event_name {
        headers.push(("X-Service-Event", event.clone()));
    } else if let Some(schedule_id) = task.schedule_id {
        headers.push(("X-Service-Schedule-Id", schedule_id.to_string()));
    }
    if !secrets.is_empty() {
        let hex: Vec<String> = secrets
            .iter()
            .map(|secret| signing::hmac_hex(secret.as_bytes(), &ts, body))
            .collect();
        let standard: Vec<String> = secrets
            .iter()
            .map(|secret| {
                signing::standard_webhooks_signature(secret, &webhook_id, timestamp, body)
            })
            .collect();
        headers.push(("X-Service-Signature", hex.join(",")));
        headers.push(("webhook-signature", standard.join(" ")));
    }
    headers.push(("webhook-id", webhook_id));
    headers.push(("webhook-timestamp", ts));
    headers
}

/// What one attempt got back.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sent {
    /// Epoch ms when the attempt started.
    pub started_at: i64,
    pub duration_ms: i64,
    /// `None` when no reply came.
    pub status: Option<u16>,
    /// The reply's `Retry-After` header.
    pub retry_after: Option<String>,
    /// The first 4 KiB of the reply body.
    pub body: Option<String>,
    /// Why no reply came.
    pub error: Option<String>,
    /// No reply came within the endpoint's timeout (for the retry metrics).
    pub timed_out: bool,
    /// Whether the request carried signatures (the endpoint had a secret).
    pub signed: bool,
    /// The headers the request was sent with, as the attempt records them; `None` when no
    /// request could be built.
    pub request_headers: Option<RequestHeaders>,
}

impl Sent {
    pub fn is_success(&self) -> bool {
        self.status.is_some_and(|s| (200..300).contains(&s))
    }
}

/// Sends attempt `task.attempt` of a task to its target with its W3C `traceparent` and waits
/// for the reply (at most the endpoint's timeout).
pub fn send(
    agent: &ureq::Agent,
    target: &Target,
    task: &Claimed,
    started_at: i64,
    traceparent: &str,
) -> Sent {
    let body: &[u8] = if target.sends_body() {
        task.payload.as_bytes()
    } else {
        b""
    };
    let secrets = target.secrets_at(started_at);
    let headers = delivery_headers(task, &secrets, started_at.div_euclid(1000), body);
    let mut request = http::Request::builder()
        .method(target.method.as_str())
        .uri(target.url.as_str());
    // `traceparent` is webhookd's own (refused on new endpoints; skipped on older ones).
    for (name, value) in &target.headers {
        if !name.eq_ignore_ascii_case("traceparent") {
            request = request.header(name.as_str(), value.as_str());
        }
    }
    for (name, value) in headers {
        request = request.header(name, value);
    }
    request = request.header("traceparent", traceparent);
    if target.sends_body() {
        request = request.header(http::header::CONTENT_TYPE, "application/json");
    }
    // Set here rather than left to the agent, so the recorded headers hold it; an endpoint's
    // own `User-Agent` replaces it, as it would the agent's.
    if request
        .headers_ref()
        .is_some_and(|h| !h.contains_key(http::header::USER_AGENT))
    {
        request = request.header(http::header::USER_AGENT, USER_AGENT);
    }
    let request_headers = request.headers_ref().map(recorded_headers);
    let clock = Instant::now();
    let reply = if target.sends_body() {
        request
            .body(body)
            .map_err(ureq::Error::from)
            .and_then(|r| run(agent, r, target.timeout))
    } else {
        request
            .body(())
            .map_err(ureq::Error::from)
            .and_then(|r| run(agent, r, target.timeout))
    };
    let mut sent = Sent {
        started_at,
        signed: !secrets.is_empty(),
        request_headers,
        ..Sent::default()
    };
    match reply {
        Ok(mut response) => {
            sent.status = Some(response.status().as_u16());
            sent.retry_after = response
                .headers()
                .get(http::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            sent.body = read_body(response.body_mut());
        }
        Err(e) => {
            sent.timed_out = matches!(e, ureq::Error::Timeout(_));
            sent.error = Some(describe_error(&e, target.timeout));
        }
    }
    sent.duration_ms = i64::try_from(clock.elapsed().as_millis()).unwrap_or(i64::MAX);
    sent
}

/// The headers of a request as the attempt records them: in the order the HTTP client writes
/// them, names lower-case (as they go on the wire), values of headers that may hold a
/// credential redacted. The client adds only `Host`, `Content-Length`, `Accept` and
/// `Accept-Encoding` of its own, which are not recorded.
fn recorded_headers(headers: &http::HeaderMap) -> RequestHeaders {
    let values: Vec<(&str, Cow<'_, str>)> = headers
        .iter()
        .map(|(name, value)| {
            let name = name.as_str();
            let value = String::from_utf8_lossy(value.as_bytes());
            if holds_credential(name) {
                (name, Cow::Owned(redact(name, &value)))
            } else {
                (name, value)
            }
        })
        .collect();
    RequestHeaders::encode(values.iter().map(|(name, value)| (*name, value.as_ref())))
}

/// Whether a header of this (lower-case) name may carry a credential.
fn holds_credential(name: &str) -> bool {
    SECRET_NAME_PARTS.iter().any(|part| name.contains(part))
}

/// A credential as recorded: its length in bytes only, after its scheme in an
/// `Authorization` or `Proxy-Authorization` header (`Bearer … (47 bytes)`), so an operator can
/// tell which kind of credential went and whether it was the one expected, without the
/// attempt holding a copy of it.
fn redact(name: &str, value: &str) -> String {
    let scheme = value
        .split_once(' ')
        .map(|(first, _)| first)
        .filter(|first| {
            name.ends_with("authorization")
                && !first.is_empty()
                && first
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        });
    match scheme {
        Some(scheme) => format!("{scheme} … ({} bytes)", value.len()),
        None => format!("… ({} bytes)", value.len()),
    }
}

fn run<B: AsSendBody>(
    agent: &ureq::Agent,
    request: http::Request<B>,
    timeout: Duration,
) -> Result<http::Response<ureq::Body>, ureq::Error> {
    request
        .with_agent(agent)
        .configure()
        .timeout_global(Some(timeout))
        .build()
        .run()
}

/// Keeps the first 4 KiB of a reply body and reads on to its end (up to a limit) so the
/// connection goes back to the pool. A body that fails midway keeps what was read.
fn read_body(body: &mut ureq::Body) -> Option<String> {
    let mut reader = body.as_reader();
    let mut kept = Vec::with_capacity(256);
    let _ = (&mut reader)
        .take(KEPT_BODY_BYTES as u64)
        .read_to_end(&mut kept);
    if kept.len() == KEPT_BODY_BYTES {
        let _ = std::io::copy(&mut reader.take(DRAINED_BODY_BYTES), &mut std::io::sink());
    }
    if kept.is_empty() {
        return None;
    }
    Some(String::from_utf8_lossy(&kept).into_owned())
}

/// A short, operator-facing reason for a request that got no reply.
fn describe_error(error: &ureq::Error, timeout: Duration) -> String {
    match error {
        ureq::Error::Timeout(_) => format!(
            "timeout: no complete reply within {} ms (the endpoint's timeout_ms)",
            timeout.as_millis()
        ),
        ureq::Error::Io(e) if e.kind() == std::io::ErrorKind::PermissionDenied => e.to_string(),
        ureq::Error::Io(e) => format!("connection failed: {e}"),
        ureq::Error::HostNotFound => "DNS: host not found".to_string(),
        other => format!("request failed: {other}"),
    }
}

/// What an attempt's result does to its task and endpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub after: AfterAttempt,
    /// A `410 Gone` reply: the endpoint is disabled.
    pub disable_endpoint: bool,
    /// The task's `last_error` (and the attempt's `error`); `None` on success.
    pub error: Option<String>,
}

/// What judging a failed attempt needs besides the reply, passed in so [`judge`] stays pure:
/// when the task's first attempt began (for `max_age_sec`) and a random draw in [0, 1) (for
/// `jitter: full`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryInputs {
    pub first_attempt_at: i64,
    pub draw: f64,
}

/// Decides, from an attempt's result, whether the task succeeded, is retried (when, by the
/// endpoint's policy, honouring `Retry-After` on 429/503, with the policy's jitter) or failed
/// for good (out of attempts, `410 Gone`, or past the policy's `max_age_sec`).
pub fn judge(
    task: &Claimed,
    policy: &RetryPolicy,
    sent: &Sent,
    now: DateTime<Utc>,
    inputs: RetryInputs,
) -> Verdict {
    if sent.is_success() {
        return Verdict {
            after: AfterAttempt::Success,
            disable_endpoint: false,
            error: None,
        };
    }
    let gone = sent.status == Some(410);
    let mut error = match sent.status {
        Some(410) => "HTTP 410 Gone: the endpoint was disabled".to_string(),
        Some(code) if (300..400).contains(&code) => {
            format!("HTTP {code}: redirects are not followed")
        }
        Some(code @ (401 | 403)) => {
            let reason = if code == 401 {
                "Unauthorized"
            } else {
                "Forbidden"
            };
            if sent.signed {
                format!(
                    "HTTP {code} {reason}: the receiver refused the delivery; it was signed \
                     (X-Service-Signature, webhook-signature) with the endpoint's secret: check \
                     that the receiver verifies with that same secret"
                )
            } else {
                format!(
                    "HTTP {code} {reason}: the receiver refused the delivery; it was not signed \
                     (the endpoint has no secret): give the endpoint the receiver's secret"
                )
            }
        }
        Some(code) => match StatusCode::from_u16(code)
            .ok()
            .and_then(|s| s.canonical_reason())
        {
            Some(reason) => format!("HTTP {code} {reason}"),
            None => format!("HTTP {code}"),
        },
        None => sent.error.clone().unwrap_or_else(|| "no reply".to_string()),
    };
    let too_old = policy.too_old(inputs.first_attempt_at, now.timestamp_millis());
    let after = if gone || task.attempt >= task.max_attempts {
        AfterAttempt::Failed
    } else if let Some(why) = too_old {
        error = format!("{error}; {why}");
        AfterAttempt::Failed
    } else {
        let retry_after = match sent.status {
            Some(429 | 503) => sent
                .retry_after
                .as_deref()
                .and_then(|v| parse_retry_after(v, now)),
            _ => None,
        };
        let failed = u32::try_from(task.attempt).unwrap_or(u32::MAX);
        let delay_ms = policy.next_delay_ms(failed, retry_after, inputs.draw);
        let delay_ms = i64::try_from(delay_ms).unwrap_or(i64::MAX);
        AfterAttempt::RetryAt(now.timestamp_millis().saturating_add(delay_ms))
    };
    Verdict {
        after,
        disable_endpoint: gone,
        error: Some(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retry::{Backoff, Jitter};
    use chrono::TimeZone;

    fn task(attempt: i64, max_attempts: i64) -> Claimed {
        Claimed {
            id: 42,
            endpoint_id: 7,
            schedule_id: None,
            event_id: Some(3),
            event_name: Some("order.created".into()),
            payload: r#"{"a":1}"#.into(),
            attempt,
            max_attempts,
            app_id: "default".into(),
            due_at: 0,
            trace: None,
            target_generation: None,
        }
    }

    fn header<'a>(headers: &'a [(&str, String)], name: &str) -> Option<&'a str> {
        headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn headers_carry_ids_timestamps_and_both_signatures() {
        let body = br#"{"a":1}"#;
        let headers = delivery_headers(&task(2, 5), &["s3cret"], 1_700_000_000, body);
        assert_eq!(header(&headers, "X-Service-Task-Id"), Some("42"));
        assert_eq!(header(&headers, "X-Service-Attempt"), Some("2"));
        assert_eq!(header(&headers, "X-Service-Timestamp"), Some("1700000000"));
        assert_eq!(header(&headers, "webhook-timestamp"), Some("1700000000"));
        assert_eq!(header(&headers, "webhook-id"), Some("task_42"));
        assert_eq!(header(&headers, "X-Service-Event"), Some("order.created"));
        assert_eq!(header(&headers, "X-Service-Schedule-Id"), None);
        assert_eq!(
            header(&headers, "X-Service-Signature").unwrap(),
            signing::hmac_hex(b"s3cret", "1700000000", body)
        );
        assert_eq!(
            header(&headers, "webhook-signature").unwrap(),
            signing::standard_webhooks_signature("s3cret", "task_42", 1_700_000_000, body)
        );
    }

    #[test]
    fn an_overlap_signs_with_the_new_secret_then_the_old() {
        let body = br#"{"a":1}"#;
        let headers = delivery_headers(&task(1, 5), &["new", "old"], 1_700_000_000, body);
        let sig = |s| signing::standard_webhooks_signature(s, "task_42", 1_700_000_000, body);
        assert_eq!(
            header(&headers, "webhook-signature").unwrap(),
            format!("{} {}", sig("new"), sig("old"))
        );
        let hex = |s: &str| signing::hmac_hex(s.as_bytes(), "1700000000", body);
        assert_eq!(
            header(&headers, "X-Service-Signature").unwrap(),
            format!("{},{}", hex("new"), hex("old"))
        );
    }

    #[test]
    fn the_previous_secret_signs_only_until_its_overlap_ends() {
        let mut target = Target {
            endpoint_id: 1,
            url: "http://127.0.0.1/".into(),
            method: "POST".into(),
            headers: Vec::new(),
            secret: Some("new".into()),
            previous_secret: Some(("old".into(), 2_000)),
            timeout: Duration::from_secs(1),
            policy: RetryPolicy::DEFAULT,
        };
        assert_eq!(target.secrets_at(1_999), ["new", "old"]);
        assert_eq!(target.secrets_at(2_000), ["new"]);
        target.secret = None;
        assert!(target.secrets_at(0).is_empty(), "no secret, no signature");
    }

    #[test]
    fn headers_without_secret_have_no_signatures_and_name_the_schedule() {
        let mut t = task(1, 5);
        t.event_id = None;
        t.event_name = None;
        t.schedule_id = Some(9);
        let headers = delivery_headers(&t, &[], 1, b"");
        assert_eq!(header(&headers, "X-Service-Schedule-Id"), Some("9"));
        assert_eq!(header(&headers, "X-Service-Event"), None);
        assert_eq!(header(&headers, "X-Service-Signature"), None);
        assert_eq!(header(&headers, "webhook-signature"), None);
    }

    #[test]
    fn credentials_are_redacted_to_their_length_and_scheme() {
        assert_eq!(
            redact("authorization", "Bearer abc123"),
            "Bearer … (13 bytes)"
        );
        assert_eq!(
            redact("proxy-authorization", "Basic dXNlcjpwYXNz"),
            "Basic … (18 bytes)"
        );
        assert_eq!(redact("authorization", "abc123"), "… (6 bytes)");
        // Only an Authorization header has a scheme: the first word of a key stays hidden.
        assert_eq!(redact("x-api-key", "first second"), "… (12 bytes)");
        assert_eq!(redact("cookie", "a=b; c=d"), "… (8 bytes)");
        for name in [
            "authorization",
            "proxy-authorization",
            "cookie",
            "x-api-key",
            "apikey",
            "x-auth-token",
            "private-token",
            "x-client-secret",
            "x-session-id",
            "x-db-password",
        ] {
            assert!(holds_credential(name), "{name}");
        }
        for name in ["x-tenant", "x-request-source", "accept-language"] {
            assert!(!holds_credential(name), "{name}");
        }
    }

    #[test]
    fn webhookds_own_headers_are_recorded_in_the_clear_in_the_order_set() {
        let headers = delivery_headers(&task(1, 5), &["s3cret"], 1_700_000_000, b"{}");
        let mut map = http::HeaderMap::new();
        map.append("x-tenant", http::HeaderValue::from_static("acme"));
        map.append(
            "authorization",
            http::HeaderValue::from_static("Bearer t0ken"),
        );
        for (name, value) in &headers {
            map.append(*name, http::HeaderValue::from_str(value).unwrap());
        }
        map.append("traceparent", http::HeaderValue::from_static("00-a-b-01"));
        map.append(
            http::header::USER_AGENT,
            http::HeaderValue::from_static(USER_AGENT),
        );
        let pairs = recorded_headers(&map).pairs().unwrap();
        let mut expected = vec![
            ("x-tenant".to_string(), "acme".to_string()),
            (
                "authorization".to_string(),
                "Bearer … (12 bytes)".to_string(),
            ),
        ];
        expected.extend(
            headers
                .iter()
                .map(|(n, v)| (n.to_ascii_lowercase(), v.clone())),
        );
        expected.push(("traceparent".into(), "00-a-b-01".into()));
        expected.push(("user-agent".into(), USER_AGENT.into()));
        assert_eq!(pairs, expected);
        for (name, _) in &headers {
            assert!(!holds_credential(&name.to_ascii_lowercase()), "{name}");
        }
        for name in ["traceparent", "user-agent", "content-type"] {
            assert!(!holds_credential(name), "{name}");
        }
    }

    fn reply(status: u16) -> Sent {
        Sent {
            status: Some(status),
            ..Sent::default()
        }
    }

    #[test]
    fn judges_success_retry_exhaustion_gone_and_retry_after() {
        let policy = RetryPolicy {
            max_attempts: 3,
            backoff: Backoff::Exponential,
            initial_delay_sec: 10,
            max_delay_sec: 100,
            max_age_sec: None,
            jitter: Jitter::Off,
        };
        let now = Utc.timestamp_opt(1_000, 0).unwrap();
        let fresh = RetryInputs {
            first_attempt_at: 1_000_000,
            draw: 0.0,
        };
        let at = |secs: i64| AfterAttempt::RetryAt((1_000 + secs) * 1000);
        assert_eq!(
            judge(&task(1, 3), &policy, &reply(204), now, fresh).after,
            AfterAttempt::Success
        );
        let v = judge(&task(2, 3), &policy, &reply(500), now, fresh);
        assert_eq!(v.after, at(20));
        assert_eq!(v.error.as_deref(), Some("HTTP 500 Internal Server Error"));
        assert_eq!(
            judge(&task(3, 3), &policy, &reply(500), now, fresh).after,
            AfterAttempt::Failed
        );
        let gone = judge(&task(1, 3), &policy, &reply(410), now, fresh);
        assert_eq!(
            (gone.after, gone.disable_endpoint),
            (AfterAttempt::Failed, true)
        );
        let mut busy = reply(429);
        busy.retry_after = Some("50".into());
        assert_eq!(judge(&task(1, 3), &policy, &busy, now, fresh).after, at(50));
        busy.retry_after = Some("5000".into());
        assert_eq!(
            judge(&task(1, 3), &policy, &busy, now, fresh).after,
            at(100)
        );
        let mut ignored = reply(500);
        ignored.retry_after = Some("50".into());
        assert_eq!(
            judge(&task(1, 3), &policy, &ignored, now, fresh).after,
            at(10)
        );
        let mut refused = reply(401);
        refused.signed = true;
        let error = judge(&task(1, 3), &policy, &refused, now, fresh)
            .error
            .unwrap();
        assert!(
            error.starts_with("HTTP 401 Unauthorized: the receiver refused the delivery")
                && error.contains("X-Service-Signature, webhook-signature"),
            "{error}"
        );
        let error = judge(&task(1, 3), &policy, &reply(403), now, fresh)
            .error
            .unwrap();
        assert!(
            error.starts_with("HTTP 403 Forbidden: the receiver refused the delivery")
                && error.contains("not signed"),
            "{error}"
        );
        let redirect = judge(&task(1, 3), &policy, &reply(302), now, fresh);
        assert!(
            redirect
                .error
                .unwrap()
                .contains("redirects are not followed")
        );
        let network = Sent {
            error: Some("connection failed: refused".into()),
            ..Sent::default()
        };
        let v = judge(&task(1, 3), &policy, &network, now, fresh);
        assert_eq!(
            (v.after, v.error.as_deref()),
            (at(10), Some("connection failed: refused"))
        );
    }

    #[test]
    fn judges_max_age_and_jitter() {
        let policy = RetryPolicy {
            max_attempts: 10,
            backoff: Backoff::Fixed,
            initial_delay_sec: 60,
            max_delay_sec: 600,
            max_age_sec: Some(3600),
            jitter: Jitter::Full,
        };
        let now = Utc.timestamp_opt(10_000, 0).unwrap();
        let first = |secs_ago: i64| RetryInputs {
            first_attempt_at: (10_000 - secs_ago) * 1000,
            draw: 0.5,
        };
        // Within the age: retried, 60 s jittered to 45 s by the draw 0.5.
        let v = judge(&task(2, 10), &policy, &reply(500), now, first(3600));
        assert_eq!(v.after, AfterAttempt::RetryAt(10_045_000));
        // Past it: failed for good, and the error says why.
        let v = judge(&task(2, 10), &policy, &reply(500), now, first(3700));
        assert_eq!(v.after, AfterAttempt::Failed);
        assert_eq!(
            v.error.as_deref(),
            Some(
                "HTTP 500 Internal Server Error; not retried: first attempt was 3700 s ago, max_age_sec is 3600"
            )
        );
        // A success is a success, however old.
        let v = judge(&task(2, 10), &policy, &reply(200), now, first(9999));
        assert_eq!(v.after, AfterAttempt::Success);
    }
}
