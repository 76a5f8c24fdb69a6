//! Inbound request authentication (docs/design.md §2): key lookup, the ±skew window, the HMAC
//! signature over `X-Timestamp + "\n" + payload`, and the replay check (in the database, so
//! that it survives restarts: `Tx::first_use_of_signature`; in memory for reads while the
//! database refuses writes). The header checks run before the body is read; once the request
//! is routed, the key's scope is checked ([`check_scope`]).

use crate::error::ApiError;
use crate::signing;
use crate::store::keys::Scope;
use crate::store::{Store, StoreError};
use hyper::HeaderMap;
use std::collections::HashMap;
use std::sync::Mutex;

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

/// A request's key and auth headers, checked from the headers alone ([`check_headers`]), so
/// that a stranger is refused before the server reads a body; the signature over the body is
/// checked afterwards ([`Caller::verify`]).
#[derive(Debug)]
pub struct Caller {
    pub key_id: String,
    /// The app the key belongs to.
    pub app_id: String,
    /// What the key may do (docs/design.md §17).
    pub scope: Scope,
    /// When the key expired, if it has: refused once the signature shows the caller holds it.
    expired_at: Option<i64>,
    /// Whether the key's `last_used_at` is old enough to be written again.
    last_used_due: bool,
    secret: String,
    timestamp: String,
    /// Lower case: signatures are compared without regard to hex case.
    signature: String,
    /// When the signature leaves the skew window: its replay record is needed until then.
    expires_ms: i64,
}

/// Checks what the headers alone can tell: all three present, the key known and not revoked,
/// the timestamp within the skew window, the signature 64 hex digits (HMAC-SHA256).
pub fn check_headers(
    store: &dyn Store,
    now_ms: i64,
    max_skew_secs: u64,
    headers: &HeaderMap,
) -> Result<Caller, ApiError> {
    let key_id = header(headers, "X-Key-ID")?;
    let timestamp = header(headers, "X-Timestamp")?;
    let signature = header(headers, "X-Signature")?;

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
    if signature.len() != 64 || !signature.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(ApiError::auth_bad_signature());
    }
    Ok(Caller {
        key_id: key_id.to_string(),
        scope: key.scope,
        expired_at: key.expires_at.filter(|t| *t <= now_ms),
        last_used_due: key.last_used_due(now_ms),
        app_id: key.app_id,
        secret: key.secret,
        timestamp: timestamp.to_string(),
        signature: signature.to_ascii_lowercase(),
        expires_ms: sent_ms.saturating_add(skew_ms),
    })
}

impl Caller {
    /// Checks the signature over the request (its body, or `METHOD path?query`).
    pub fn verify(&self, method: &str, path_and_query: &str, body: &[u8]) -> Result<(), ApiError> {
        let payload = signed_payload(method, path_and_query, body);
        if !signing::verify_hex(
            self.secret.as_bytes(),
            &self.timestamp,
            &payload,
            &self.signature,
        ) {
            return Err(ApiError::auth_bad_signature());
        }
        // Only the secret's holder learns that the key expired, and when.
        if let Some(expired_at) = self.expired_at {
            return Err(ApiError::auth_expired_key(expired_at));
        }
        Ok(())
    }
}

/// Refuses a signature used before. The (key, signature) pair is committed before the request
/// is acted on: a crash of the process right after cannot let it be used again. It waits for
/// no fsync of its own (`Store::write_unsynced`): the request's own write (a publish, a
/// change) fsyncs it too, so only a read-only request's record can be lost, and only to a
/// power loss. While the store refuses writes (disk full, read-only), a read (`read_only`) is
/// still served: its pair is kept in `memory` instead until it expires, and `memory` is
/// consulted first, so a signature accepted during the fault is refused again during and
/// after it (docs/API.md, "Limits").
pub fn guard_replay(
    store: &dyn Store,
    memory: Option<&ReplayMemory>,
    caller: &Caller,
    now_ms: i64,
    read_only: bool,
) -> Result<(), ApiError> {
    if memory.is_some_and(|m| m.seen(&caller.key_id, &caller.signature, now_ms)) {
        return Err(ApiError::auth_replay());
    }
    let first = store.write_unsynced(|tx| {
        tx.first_use_of_signature(&caller.key_id, &caller.signature, caller.expires_ms, now_ms)
    });
    match (first, memory) {
        (Ok(true), _) => {
            note_use(store, caller, now_ms);
            Ok(())
        }
        (Ok(false), _) => Err(ApiError::auth_replay()),
        (Err(e @ (StoreError::DiskFull(_) | StoreError::Unwritable(_))), Some(memory))
            if read_only =>
        {
            match memory.remember(&caller.key_id, &caller.signature, caller.expires_ms, now_ms) {
                Remembered::First => Ok(()),
                Remembered::Again => Err(ApiError::auth_replay()),
                Remembered::Full => Err(e.into()),
            }
        }
        (Err(e), _) => Err(e.into()),
    }
}

/// `last_used_at` is informational: written at most once a minute per key, and a failure to
/// write it does not fail the request.
fn note_use(store: &dyn Store, caller: &Caller, now_ms: i64) {
    if caller.last_used_due
        && let Err(e) = store.write(|tx| tx.touch_key(&caller.key_id, now_ms))
    {
        tracing::warn!(key_id = %caller.key_id, error = %e, "could not record the key's last use");
    }
}

/// Checks a request's three headers, its signature and that it is not a replay (durably only);
/// returns its key.
pub fn authenticate(
    store: &dyn Store,
    now_ms: i64,
    max_skew_secs: u64,
    req: &SignedParts<'_>,
) -> Result<Caller, ApiError> {
    let caller = check_headers(store, now_ms, max_skew_secs, req.headers)?;
    caller.verify(req.method, req.path_and_query, req.body)?;
    guard_replay(store, None, &caller, now_ms, false)?;
    Ok(caller)
}

/// The replay records of reads served while the store could not write them: (key id,
/// signature) until the signature leaves the skew window. Bounded: beyond
/// [`ReplayMemory::CAPACITY`] live entries, reads get the store's 503 like writes.
#[derive(Default)]
pub struct ReplayMemory {
    inner: Mutex<Remembering>,
}

#[derive(Default)]
struct Remembering {
    /// (key id, signature) → when the pair expires.
    seen: HashMap<(String, String), i64>,
    /// No pair expires before this: until then a purge would find nothing to remove.
    earliest_expiry: i64,
}

/// What [`ReplayMemory::remember`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Remembered {
    First,
    Again,
    Full,
}

impl ReplayMemory {
    /// About 20 MB at most; a fault longer than the skew window at more reads a second than
    /// this allows per window refuses the excess (503) rather than lose replay protection.
    pub const CAPACITY: usize = 100_000;

    /// Whether the pair was remembered and has not expired.
    pub fn seen(&self, key_id: &str, signature: &str, now_ms: i64) -> bool {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if inner.seen.is_empty() {
            return false;
        }
        inner
            .seen
            .get(&(key_id.to_string(), signature.to_string()))
            .is_some_and(|expires| *expires >= now_ms)
    }

    /// Records the pair unless it is there already or the memory is full of live pairs.
    pub fn remember(
        &self,
        key_id: &str,
        signature: &str,
        expires_ms: i64,
        now_ms: i64,
    ) -> Remembered {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        // Expired pairs go when the memory is full or every 1,024 pairs, if any has expired.
        let due = inner.seen.len() >= Self::CAPACITY || (inner.seen.len() + 1).is_multiple_of(1024);
        if due && now_ms > inner.earliest_expiry {
            let mut earliest = i64::MAX;
            inner.seen.retain(|_, expires| {
                let live = *expires >= now_ms;
                if live {
                    earliest = earliest.min(*expires);
                }
                live
            });
            inner.earliest_expiry = earliest;
        }
        let pair = (key_id.to_string(), signature.to_string());
        match inner.seen.get(&pair) {
            Some(expires) if *expires >= now_ms => return Remembered::Again,
            _ if inner.seen.len() >= Self::CAPACITY => return Remembered::Full,
            _ => {}
        }
        if inner.seen.is_empty() || expires_ms < inner.earliest_expiry {
            inner.earliest_expiry = expires_ms;
        }
        inner.seen.insert(pair, expires_ms);
        Remembered::First
    }
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
    fn replay_memory_refuses_a_pair_until_it_expires() {
        let memory = ReplayMemory::default();
        assert!(!memory.seen("k", "s", 1000));
        assert_eq!(memory.remember("k", "s", 2000, 1000), Remembered::First);
        assert!(memory.seen("k", "s", 2000));
        assert_eq!(memory.remember("k", "s", 2000, 1500), Remembered::Again);
        assert_eq!(memory.remember("k2", "s", 2000, 1500), Remembered::First);
        assert!(!memory.seen("k", "s", 2001), "expired");
        assert_eq!(memory.remember("k", "s", 9000, 2001), Remembered::First);
        // Full of live pairs: refused (the caller answers the store's 503).
        let mut n = 0;
        while memory.remember("k", &n.to_string(), 9000, 2001) == Remembered::First {
            n += 1;
        }
        assert_eq!(
            memory.inner.lock().unwrap().seen.len(),
            ReplayMemory::CAPACITY
        );
        assert_eq!(
            memory.remember("k", "one more", 9000, 2001),
            Remembered::Full
        );
        // Once they expire, room again.
        assert_eq!(
            memory.remember("k", "one more", 20_000, 9001),
            Remembered::First
        );
        assert_eq!(memory.inner.lock().unwrap().seen.len(), 1);
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
            expired_at: None,
            last_used_due: false,
            secret: String::new(),
            timestamp: String::new(),
            signature: String::new(),
            expires_ms: 0,
        };
        let refused = check_scope(&caller, "POST", "/v1/endpoints").unwrap_err();
        assert_eq!((refused.status.as_u16(), refused.code), (403, 40301));
        assert_eq!(
            refused.message,
            r#"key scope "read" does not allow POST /v1/endpoints"#
        );
    }
}
