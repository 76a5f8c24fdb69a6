//! Inbound request authentication (contract §2): key lookup, the ±skew window, the HMAC
//! signature over `X-Timestamp + "\n" + payload`, and the replay check (in the database, so
//! that it survives restarts: `Tx::first_use_of_signature`); then, once the request is routed,
//! the key's scope ([`check_scope`]).

use crate::error::ApiError;
use crate::signing;
use crate::store::Store;
use crate::store::keys::Scope;
use hyper::HeaderMap;

/// The parts of a request its signature covers.
pub struct SignedParts<'a> {
    pub headers: &'a HeaderMap,
    pub method: &'a str,
    /// Path and query exactly as sent, e.g. `/v1/endpoints?page=2`.
    pub path_and_query: &'a str,
    pub body: &'a [u8],
}

/// The text a request's signature covers after the timestamp line: the raw body, or for a
/// bodyless request `METHOD path?query`, so that the signature is bound to its request.
pub fn signed_payload(method: &str, path_and_query: &str, body: &[u8]) -> Vec<u8> {
    if body.is_empty() {
        format!("{method} {path_and_query}").into_bytes()
    } else {
        body.to_vec()
    }
}

fn header<'h>(headers: &'h HeaderMap, name: &str) -> Result<&'h str, ApiError> {
    let value = headers
        .get(name)
        .ok_or_else(|| ApiError::auth_missing(format!("{name}: header is required")))?;
    value
        .to_str()
        .ok()
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .ok_or_else(|| ApiError::auth_missing(format!("{name}: header is empty or not text")))
}

/// Parses X-Timestamp: epoch seconds, or milliseconds when it has 13 or more digits.
fn parse_timestamp_ms(text: &str) -> Option<i64> {
    if text.is_empty() || text.len() > 16 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: i64 = text.parse().ok()?;
    Some(if text.len() >= 13 { n } else { n * 1000 })
}

/// The key a request was signed with.
#[derive(Debug, Clone)]
pub struct Caller {
    pub key_id: String,
    pub app_id: String,
    pub scope: Scope,
}

/// Checks a request's three headers and returns its key.
pub fn authenticate(
    store: &dyn Store,
    now_ms: i64,
    max_skew_secs: u64,
    req: &SignedParts<'_>,
) -> Result<Caller, ApiError> {
    let key_id = header(req.headers, "X-Key-ID")?;
    let timestamp = header(req.headers, "X-Timestamp")?;
    let signature = header(req.headers, "X-Signature")?;

    let key = store
        .read(|tx| tx.lookup_key(key_id))?
        .ok_or_else(ApiError::auth_unknown_key)?;

    let skew_ms = i64::try_from(max_skew_secs)
        .unwrap_or(i64::MAX / 1000)
        .saturating_mul(1000);
    let sent_ms = parse_timestamp_ms(timestamp).ok_or_else(|| {
        ApiError::auth_skew("X-Timestamp: expected Unix time in seconds or milliseconds")
    })?;
    if (sent_ms - now_ms).abs() > skew_ms {
        return Err(ApiError::auth_skew(format!(
            "X-Timestamp: {timestamp} is more than {max_skew_secs} s from the server clock ({}); check the client's clock",
            now_ms / 1000
        )));
    }

    let payload = signed_payload(req.method, req.path_and_query, req.body);
    if !signing::verify_hex(key.secret.as_bytes(), timestamp, &payload, signature) {
        return Err(ApiError::auth_bad_signature());
    }
    // Only the secret's holder learns that the key expired, and when.
    if let Some(expired_at) = key.expires_at.filter(|t| *t <= now_ms) {
        return Err(ApiError::auth_expired_key(expired_at));
    }
    // The pair is committed before the request is acted on: a crash of the process right after
    // cannot let it be used again. It waits for no fsync of its own: the request's own write
    // (a publish, a change) fsyncs it too, so only a read-only request's record can be lost,
    // and only to a power loss. Signatures are compared without regard to hex case.
    let signature = signature.to_ascii_lowercase();
    let expires_ms = sent_ms.saturating_add(skew_ms);
    let first = store
        .write_unsynced(|tx| tx.first_use_of_signature(key_id, &signature, expires_ms, now_ms))?;
    if !first {
        return Err(ApiError::auth_replay());
    }
    // `last_used_at` is informational: written at most once a minute per key, and a failure to
    // write it does not fail the request.
    if key.last_used_due(now_ms)
        && let Err(e) = store.write(|tx| tx.touch_key(key_id, now_ms))
    {
        tracing::warn!(key_id, error = %e, "could not record the key's last use");
    }
    Ok(Caller {
        key_id: key_id.to_string(),
        app_id: key.app_id,
        scope: key.scope,
    })
}

/// The scope check (docs/design.md §17): `read` allows `GET` routes and `POST /cron/preview`,
/// `write` every route but the keys routes, `admin` everything. Every key may read its own key
/// record (`GET /v1/keys/{its id}`), so that a client such as the dashboard learns its scope.
/// Run after routing: a path that is no route stays a 404 whatever the scope.
pub fn check_scope(caller: &Caller, method: &str, path: &str) -> Result<(), ApiError> {
    if caller.scope >= required_scope(method, path, &caller.key_id) {
        return Ok(());
    }
    Err(ApiError::forbidden(format!(
        "key scope {:?} does not allow {method} {path}",
        caller.scope.as_str()
    )))
}

/// The least scope a request needs; `own_key_id` is the id of the key that signed it.
pub fn required_scope(method: &str, path: &str, own_key_id: &str) -> Scope {
    let route = path
        .strip_prefix("/v1/")
        .unwrap_or(path)
        .trim_end_matches('/');
    if route == "keys" || route.starts_with("keys/") {
        let own = method == "GET" && route.strip_prefix("keys/") == Some(own_key_id);
        if own { Scope::Read } else { Scope::Admin }
    } else if method == "GET" || (method == "POST" && route == "cron/preview") {
        Scope::Read
    } else {
        Scope::Write
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_in_seconds_or_milliseconds() {
        assert_eq!(parse_timestamp_ms("1763758800"), Some(1_763_758_800_000));
        assert_eq!(parse_timestamp_ms("1763758800123"), Some(1_763_758_800_123));
        assert_eq!(parse_timestamp_ms("-5"), None);
        assert_eq!(parse_timestamp_ms("12a"), None);
        assert_eq!(parse_timestamp_ms(""), None);
    }

    #[test]
    fn bodyless_payload_is_bound_to_the_request() {
        assert_eq!(
            signed_payload("GET", "/v1/endpoints?page=2", b""),
            b"GET /v1/endpoints?page=2".to_vec()
        );
        assert_eq!(signed_payload("POST", "/v1/x", b"{}"), b"{}".to_vec());
    }

    #[test]
    fn scope_each_route_needs() {
        let own = "whk_own";
        for (method, path, needed) in [
            ("GET", "/v1/endpoints", Scope::Read),
            ("GET", "/v1/tasks/7/attempts", Scope::Read),
            ("POST", "/v1/cron/preview", Scope::Read),
            ("POST", "/v1/events", Scope::Write),
            ("DELETE", "/v1/schedules/3", Scope::Write),
            ("GET", "/v1/keys", Scope::Admin),
            ("POST", "/v1/keys", Scope::Admin),
            ("GET", "/v1/keys/whk_other", Scope::Admin),
            ("GET", "/v1/keys/whk_own", Scope::Read),
            ("DELETE", "/v1/keys/whk_own", Scope::Admin),
        ] {
            assert_eq!(required_scope(method, path, own), needed, "{method} {path}");
        }
        let caller = Caller {
            key_id: own.into(),
            app_id: "app1".into(),
            scope: Scope::Read,
        };
        let refused = check_scope(&caller, "POST", "/v1/endpoints").unwrap_err();
        assert_eq!((refused.status.as_u16(), refused.code), (403, 40301));
        assert_eq!(
            refused.message,
            r#"key scope "read" does not allow POST /v1/endpoints"#
        );
    }
}
