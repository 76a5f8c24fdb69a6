//! Inbound request authentication (contract §2): key lookup, the ±skew window, the HMAC
//! signature over `X-Timestamp + "\n" + payload`, and the replay check (in the database, so
//! that it survives restarts: `Tx::first_use_of_signature`).

use crate::error::ApiError;
use crate::signing;
use crate::store::Store;
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

/// Checks a request's three headers and returns the app id of its key.
pub fn authenticate(
    store: &dyn Store,
    now_ms: i64,
    max_skew_secs: u64,
    req: &SignedParts<'_>,
) -> Result<String, ApiError> {
    let key_id = header(req.headers, "X-Key-ID")?;
    let timestamp = header(req.headers, "X-Timestamp")?;
    let signature = header(req.headers, "X-Signature")?;

    let (secret, app_id) = store
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
    if !signing::verify_hex(secret.as_bytes(), timestamp, &payload, signature) {
        return Err(ApiError::auth_bad_signature());
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
    Ok(app_id)
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
}
