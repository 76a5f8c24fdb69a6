//! Inbound request authentication (docs/design.md §2): key lookup, the ±skew window, the HMAC
//! signature over `X-Timestamp + "\n" + payload`, and the replay check (in the database, so
//! that it survives restarts: `Tx::first_use_at_key_generation`; in memory for reads while the
//! database refuses writes). The header checks run before the body is read; once the request
//! is routed, the key's scope is checked ([`check_scope`]).
//!
//! Keys are held in memory ([`KeyCache`]) and checked against the store's key generation in the
//! transaction that writes the request's replay record ([`RequestGuard`]): a write request's
//! own transaction (one per request), a `GET`'s short write before its read (or, where one
//! process owns the store, the `GET`'s own read, its record written after the answer). A key revoked by
//! any node or by `webhookd keys revoke` is refused from the revocation's commit on
//! (docs/dev/storage.md, "Keys in memory").

use crate::error::ApiError;
use crate::error::ApiResult;
use crate::replay_behind::{Hold, ReadReplays};
use crate::signing;
use crate::store::keys::{KeyAuth, Scope};
use crate::store::replay::FirstUse;
use crate::store::{Store, StoreError, Tx, Wakers, Watcher};
use hyper::HeaderMap;
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

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

/// A live key as authentication needs it, held in memory by [`KeyCache`].
#[derive(Debug)]
pub struct HeldKey {
    secret: String,
    app_id: String,
    scope: Scope,
    expires_at: Option<i64>,
    /// `last_used_at` in ms, [`NEVER_USED`] for none: moved forward by the request that records
    /// a use, so that one request a minute per key writes it.
    last_used_at: AtomicI64,
}

const NEVER_USED: i64 = i64::MIN;

impl HeldKey {
    fn new(key: KeyAuth) -> HeldKey {
        HeldKey {
            last_used_at: AtomicI64::new(key.last_used_at.unwrap_or(NEVER_USED)),
            secret: key.secret,
            app_id: key.app_id,
            scope: key.scope,
            expires_at: key.expires_at,
        }
    }

    /// Whether the stored key still says what this one does (a revoked key reads as `None`).
    fn same_as(&self, stored: &KeyAuth) -> bool {
        (&self.secret, &self.app_id, self.scope, self.expires_at)
            == (
                &stored.secret,
                &stored.app_id,
                stored.scope,
                stored.expires_at,
            )
    }
}

/// The live API keys a server has seen, with the key generation (`KeyQueries::key_generation`)
/// they were read at. A key not held is read from the store (and held); a held key is used
/// without a read, and each request's own transaction compares the generation it was read at
/// with the stored one ([`RequestGuard`]): when it moved, the key is read again in that
/// transaction, and the keys held are dropped. Unknown key ids are never held, so a key made
/// by another node or the CLI works at once.
#[derive(Default)]
pub struct KeyCache {
    inner: RwLock<HeldKeys>,
}

#[derive(Default)]
struct HeldKeys {
    generation: i64,
    keys: HashMap<String, Arc<HeldKey>>,
}

impl KeyCache {
    /// Keys held at most; beyond, the keys held are dropped and read again as they are used.
    pub const CAPACITY: usize = 10_000;

    /// The key `key_id` and the generation it was read at, when held.
    fn held(&self, key_id: &str) -> Option<(Arc<HeldKey>, i64)> {
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        inner
            .keys
            .get(key_id)
            .map(|key| (key.clone(), inner.generation))
    }

    /// Reads the live key `key_id` from the store and holds it. The generation is read first,
    /// so the key is at least as new as the generation it is held at.
    fn load(
        &self,
        store: &dyn Store,
        key_id: &str,
    ) -> Result<Option<(Arc<HeldKey>, i64)>, StoreError> {
        let (generation, key) = store.read(|tx| {
            let generation = tx.key_generation()?;
            Ok::<_, StoreError>((generation, tx.lookup_key(key_id)?))
        })?;
        Ok(key.map(|key| (self.hold(key_id, key, generation), generation)))
    }

    /// Holds `key` as read at `generation`; another generation drops every key held before.
    /// Generations have no order (they are random: `KeyQueries::key_generation`), so a read
    /// that raced a change may hold an older one; the next request's own check sees that it
    /// is not the stored one and reads again ([`key_holds`]).
    fn hold(&self, key_id: &str, key: KeyAuth, generation: i64) -> Arc<HeldKey> {
        let held = Arc::new(HeldKey::new(key));
        let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
        if generation != inner.generation || inner.keys.len() >= Self::CAPACITY {
            inner.keys.clear();
            inner.generation = generation;
        }
        inner.keys.insert(key_id.to_string(), held.clone());
        held
    }

    /// The key generation moved to `generation`: drops the keys held before it, and holds
    /// `key_id` as just read (`None`: revoked).
    fn refresh(&self, key_id: &str, key: Option<KeyAuth>, generation: i64) {
        match key {
            Some(key) => {
                self.hold(key_id, key, generation);
            }
            None => {
                let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
                if generation != inner.generation {
                    inner.keys.clear();
                    inner.generation = generation;
                }
                inner.keys.remove(key_id);
            }
        }
    }
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
    key: Arc<HeldKey>,
    /// The key generation the key was read at: checked in the request's transaction.
    generation: i64,
    timestamp: String,
    /// Lower case: signatures are compared without regard to hex case.
    signature: String,
    /// The signed time (`X-Timestamp`) in milliseconds: the first part of the replay record's key.
    sent_ms: i64,
    /// When the signature leaves the skew window: its replay record is needed until then.
    expires_ms: i64,
}

/// Checks what the headers alone can tell: all three present, the key known and not revoked,
/// the timestamp within the skew window, the signature 64 hex digits (HMAC-SHA256). A key not
/// held in `keys` is read from `store`; with no store given (on the async runtime, which must
/// not wait on the database) the answer is `Ok(None)`: ask again with the store.
pub fn check_headers(
    keys: &KeyCache,
    store: Option<&dyn Store>,
    now_ms: i64,
    max_skew_secs: u64,
    headers: &HeaderMap,
) -> Result<Option<Caller>, ApiError> {
    let key_id = header(headers, "X-Key-ID")?;
    let timestamp = header(headers, "X-Timestamp")?;
    let signature = header(headers, "X-Signature")?;

    let held = match (keys.held(key_id), store) {
        (Some(held), _) => held,
        (None, Some(store)) => keys
            .load(store, key_id)?
            .ok_or_else(ApiError::auth_unknown_key)?,
        (None, None) => return Ok(None),
    };
    let (key, generation) = held;

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
    Ok(Some(Caller {
        key_id: key_id.to_string(),
        scope: key.scope,
        expired_at: key.expires_at.filter(|t| *t <= now_ms),
        app_id: key.app_id.clone(),
        key,
        generation,
        timestamp: timestamp.to_string(),
        signature: signature.to_ascii_lowercase(),
        sent_ms,
        expires_ms: sent_ms.saturating_add(skew_ms),
    }))
}

impl Caller {
    /// Checks the signature over the request (its body, or `METHOD path?query`).
    pub fn verify(&self, method: &str, path_and_query: &str, body: &[u8]) -> Result<(), ApiError> {
        let payload = signed_payload(method, path_and_query, body);
        if !signing::verify_hex(
            self.key.secret.as_bytes(),
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

    /// Whether the key's `last_used_at` is due to be written at `now_ms`; true for one caller
    /// only, which then writes it.
    fn claim_last_use(&self, now_ms: i64) -> bool {
        let last = self.key.last_used_at.load(Ordering::Relaxed);
        let due = crate::store::keys::last_used_due((last != NEVER_USED).then_some(last), now_ms);
        due && self
            .key
            .last_used_at
            .compare_exchange(last, now_ms, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }
}

/// What became of a request's replay record and key check ([`RequestGuard`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Guarded {
    /// Not written yet: no transaction of the request has committed.
    Pending,
    /// Committed with the request's first transaction, the key still as read.
    Recorded,
    /// Kept in [`ReplayMemory`] (a read while the store refuses writes).
    Remembered,
    /// The signature was used before.
    Replay,
    /// The key was revoked (or changed) after it was read.
    KeyGone,
}

/// In a transaction (or a read while the store refuses writes): whether the caller's key is
/// still as it was read. When the key generation is the one it was read at, nothing changed;
/// otherwise the key is read again and the keys held are dropped.
fn key_holds(
    tx: &mut dyn Tx,
    keys: &KeyCache,
    caller: &Caller,
    generation: i64,
) -> Result<bool, StoreError> {
    if generation == caller.generation {
        return Ok(true);
    }
    let stored = tx.lookup_key(&caller.key_id)?;
    let holds = stored.as_ref().is_some_and(|k| caller.key.same_as(k));
    keys.refresh(&caller.key_id, stored, generation);
    Ok(holds)
}

/// Records the caller's (key, signature) pair and checks its key in `tx`:
/// [`Guarded::Recorded`] once committed.
fn record_pair(
    tx: &mut dyn Tx,
    keys: &KeyCache,
    caller: &Caller,
    now_ms: i64,
) -> Result<Guarded, StoreError> {
    let c = caller;
    let first =
        tx.first_use_at_key_generation(&c.key_id, &c.signature, c.sent_ms, c.expires_ms, now_ms)?;
    judge_pair(tx, keys, c, first)
}

/// What a pair's check in `tx` found (`first`: the key generation when the pair was a first
/// use, `None` for a replay) means for the request: recorded only while its key still holds.
fn judge_pair(
    tx: &mut dyn Tx,
    keys: &KeyCache,
    caller: &Caller,
    first: Option<i64>,
) -> Result<Guarded, StoreError> {
    let Some(generation) = first else {
        return Ok(Guarded::Replay);
    };
    Ok(if key_holds(tx, keys, caller, generation)? {
        Guarded::Recorded
    } else {
        Guarded::KeyGone
    })
}

/// Checks a request's three headers, its signature and that it is not a replay (durably only,
/// in a transaction of its own; the server guards a request with [`RequestGuard`] instead);
/// returns its key.
pub fn authenticate(
    store: &dyn Store,
    now_ms: i64,
    max_skew_secs: u64,
    req: &SignedParts<'_>,
) -> Result<Caller, ApiError> {
    let keys = KeyCache::default();
    let caller = check_headers(&keys, Some(store), now_ms, max_skew_secs, req.headers)?
        .ok_or_else(ApiError::auth_unknown_key)?;
    caller.verify(req.method, req.path_and_query, req.body)?;
    match store.write_unsynced(|tx| record_pair(tx, &keys, &caller, now_ms))? {
        Guarded::Recorded => Ok(caller),
        Guarded::Replay => Err(ApiError::auth_replay()),
        _ => Err(ApiError::auth_unknown_key()),
    }
}

/// A signed request's guard, and the store its handler writes through: the first transaction
/// the request commits also records its (key, signature) pair and checks that its key still
/// stands, so a request costs one transaction, not three (key read, replay record, handler).
///
/// The pair is committed before the request's effects are acted on or answered: a replay of
/// it, on any node, is refused. On a store one process owns, a `GET`'s pair is instead held in
/// memory and written after its answer ([`ReadReplays`]; docs/dev/storage.md, "A read's replay
/// record behind its answer"). Where reads can write (PostgreSQL), a `GET` handler's first
/// read carries the pair: recorded by the read's own statement, or by one more on its
/// connection before the answer (docs/dev/storage.md, "A read's replay record on PostgreSQL").
/// Elsewhere the first read is preceded by a short write of the pair. Either way the pair's
/// commit waits for no fsync of its own (only a read-only request's record can be lost, and
/// only to a crash), and the read runs outside the writer's lock, so a long list never holds
/// publishes back; a write request's first write carries the pair (fsynced with the write).
/// When no transaction of the request committed (its handler failed, or needed no store), the
/// pair is written on its own at the end ([`RequestGuard::finish`]), before the reply, as
/// before this guard existed. While the store refuses writes (disk full, read-only), a read is
/// still served: its pair is kept in `memory` instead until it expires, and `memory` is
/// consulted first, so a signature accepted during the fault is refused again during and after
/// it (docs/API.md, "Limits").
pub struct RequestGuard {
    store: Arc<dyn Store>,
    keys: Arc<KeyCache>,
    memory: Arc<ReplayMemory>,
    /// A `GET`'s record written after its answer, on a store one process owns
    /// ([`ReadReplays`]): `None` for other requests, and where several nodes share the store.
    behind: Option<Arc<ReadReplays>>,
    caller: Caller,
    now_ms: i64,
    /// A `GET`: served from memory while the store refuses writes.
    read_only: bool,
    /// The request runs on the runtime's own thread ([`RequestGuard::on_runtime`]).
    on_runtime: bool,
    state: Mutex<Guarded>,
}

impl RequestGuard {
    /// Starts guarding `caller`'s request (signature verified); refuses a pair the memory holds.
    /// `behind`: where a read's pair may be written after its answer (used when `read_only`).
    pub fn begin(
        store: Arc<dyn Store>,
        keys: Arc<KeyCache>,
        memory: Arc<ReplayMemory>,
        behind: Option<Arc<ReadReplays>>,
        caller: Caller,
        now_ms: i64,
        read_only: bool,
    ) -> Result<RequestGuard, ApiError> {
        if memory.seen(&caller.key_id, &caller.signature, now_ms) {
            return Err(ApiError::auth_replay());
        }
        Ok(RequestGuard {
            store,
            keys,
            memory,
            behind: behind.filter(|_| read_only),
            caller,
            now_ms,
            read_only,
            on_runtime: false,
            state: Mutex::new(Guarded::Pending),
        })
    }

    /// The request runs on the runtime's own thread, not a blocking one (the server's point
    /// reads, docs/dev/storage.md, "Reads on the runtime's thread"): a read runs there only
    /// on a connection free at once, and anything that may wait (a write, a connection from
    /// a busy pool) runs in `tokio::task::block_in_place`, which first hands the thread's
    /// other tasks to another thread.
    pub fn on_runtime(mut self, on_runtime: bool) -> RequestGuard {
        self.on_runtime = on_runtime;
        self
    }

    /// Runs `f`, which may wait for the store, off the runtime's thread when the request runs
    /// on it ([`RequestGuard::on_runtime`]).
    fn may_wait<T>(&self, f: impl FnOnce() -> T) -> T {
        if self.on_runtime {
            tokio::task::block_in_place(f)
        } else {
            f()
        }
    }

    /// A read of the store: on the runtime's thread at once when a connection is free, and
    /// where it may wait otherwise.
    fn read_store(
        &self,
        f: &mut dyn FnMut(&mut dyn Tx) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        if self.on_runtime
            && let Some(done) = self.store.read_now_dyn(f)
        {
            return done;
        }
        self.may_wait(|| self.store.read_dyn(f))
    }

    pub fn caller(&self) -> &Caller {
        &self.caller
    }

    fn state(&self) -> Guarded {
        *self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn set_state(&self, state: Guarded) {
        *self.state.lock().unwrap_or_else(|e| e.into_inner()) = state;
    }

    fn record_in(&self, tx: &mut dyn Tx) -> Result<Guarded, StoreError> {
        record_pair(tx, &self.keys, &self.caller, self.now_ms)
    }

    /// Runs `f` in `run`'s transaction after the guard, while the pair is pending; the state
    /// moves only once the transaction committed (or was refused by the guard). Once the pair
    /// is settled, `f` runs in `run` alone.
    fn guarded(
        &self,
        f: &mut dyn FnMut(&mut dyn Tx) -> Result<(), StoreError>,
        run: impl FnOnce(
            &mut dyn FnMut(&mut dyn Tx) -> Result<(), StoreError>,
        ) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        if self.state() != Guarded::Pending {
            return run(f);
        }
        let mut outcome = Guarded::Pending;
        let result = run(&mut |tx| {
            outcome = self.record_in(tx)?;
            if outcome != Guarded::Recorded {
                return Err(StoreError::Aborted);
            }
            f(tx)
        });
        match (&result, outcome) {
            (Ok(()), _) => self.set_state(Guarded::Recorded),
            (Err(_), Guarded::Replay | Guarded::KeyGone) => self.set_state(outcome),
            (Err(_), _) => {}
        }
        result
    }

    /// A read with its pair held in [`ReadReplays`] instead of written first: the table is
    /// checked for the pair (recorded before a restart, or written since) and the key for its
    /// generation in the read itself, and the pair is queued for the writer once the read is
    /// accepted. `None` when the pair cannot be held: record it synchronously.
    fn read_behind(
        &self,
        behind: &ReadReplays,
        f: &mut dyn FnMut(&mut dyn Tx) -> Result<(), StoreError>,
    ) -> Option<Result<(), StoreError>> {
        let c = &self.caller;
        match behind.hold(&c.key_id, &c.signature) {
            Hold::Declined => return None,
            Hold::Again => {
                self.set_state(Guarded::Replay);
                return Some(Err(StoreError::Aborted));
            }
            Hold::First => {}
        }
        // The writer lets go of a pair only once the table or the memory has it: a pair the
        // store refused to write may have moved to the memory since `begin` looked.
        if self.memory.seen(&c.key_id, &c.signature, self.now_ms) {
            behind.release(&c.key_id, &c.signature);
            self.set_state(Guarded::Replay);
            return Some(Err(StoreError::Aborted));
        }
        let mut outcome = Guarded::Pending;
        let result = self.read_store(&mut |tx| {
            let (sent, now) = (c.sent_ms, self.now_ms);
            let unrecorded =
                tx.key_generation_unless_recorded(&c.key_id, &c.signature, sent, now)?;
            outcome = judge_pair(tx, &self.keys, c, unrecorded)?;
            if outcome != Guarded::Recorded {
                return Err(StoreError::Aborted);
            }
            f(tx)
        });
        match outcome {
            Guarded::Recorded => {
                let (sent, expires) = (c.sent_ms, c.expires_ms);
                behind.queue(&c.key_id, &c.signature, sent, expires, self.now_ms);
                self.set_state(outcome);
            }
            Guarded::Replay | Guarded::KeyGone => {
                behind.release(&c.key_id, &c.signature);
                self.set_state(outcome);
            }
            // The check itself failed: the pair is recorded synchronously at the end.
            _ => behind.release(&c.key_id, &c.signature),
        }
        Some(result)
    }

    /// A read that records its pair itself, where the store's reads can write
    /// ([`ReplayQueries::carry_first_use`]): a statement of the read carries the pair (one round
    /// trip for both on PostgreSQL), or the pair is recorded on the read's connection after it,
    /// and the read's result counts only once the pair is recorded as a first use and the key
    /// still holds. While the store refuses writes, the read stands and its pair goes to
    /// memory, as in [`RequestGuard::read_dyn`]. `None` when the store's reads cannot record
    /// it (nothing ran).
    fn read_carrying(
        &self,
        f: &mut dyn FnMut(&mut dyn Tx) -> Result<(), StoreError>,
    ) -> Option<Result<(), StoreError>> {
        self.carrying(f, |g| Some(self.read_store(g)))
    }

    /// Runs `f` through `run` (a read, or [`Store::write_statement_dyn`]'s write) with the
    /// pair handed to its connection ([`ReplayQueries::carry_first_use`]): a statement of `f`
    /// carries it, or it is recorded on that connection after `f`; `f`'s result counts only
    /// once the pair is recorded as a first use and the key still holds. A write's statement
    /// writes only while the key generation is the one the caller was authenticated at
    /// ([`FirstUse`]), so what it wrote stands. While the store refuses writes, a read stands
    /// and its pair goes to memory; a write fails. `None` when `run` did not run `f`, or the
    /// connection cannot carry the pair (nothing ran).
    fn carrying(
        &self,
        f: &mut dyn FnMut(&mut dyn Tx) -> Result<(), StoreError>,
        run: impl FnOnce(
            &mut dyn FnMut(&mut dyn Tx) -> Result<(), StoreError>,
        ) -> Option<Result<(), StoreError>>,
    ) -> Option<Result<(), StoreError>> {
        let c = &self.caller;
        let mut carried = true;
        let mut outcome = Guarded::Pending;
        let mut unwritten = None;
        let result = run(&mut |tx| {
            let pair = FirstUse {
                key_id: c.key_id.clone(),
                signature: c.signature.clone(),
                sent_ms: c.sent_ms,
                expires_ms: c.expires_ms,
                now_ms: self.now_ms,
                generation: c.generation,
            };
            if !tx.carry_first_use(pair) {
                carried = false;
                return Ok(());
            }
            let done = f(tx);
            // Asked even when `f` failed: a statement before the failure may have recorded
            // the pair, and a pair recorded but thought pending would be refused as a replay at
            // the end. `f`'s own error wins over the pair's.
            let first = match (tx.carried_first_use(), done.is_err()) {
                (Ok(first), _) => first,
                // The store refuses writes: a read stands, its pair goes to memory below.
                (Err(e @ (StoreError::DiskFull(_) | StoreError::Unwritable(_))), false)
                    if self.read_only =>
                {
                    unwritten = Some(e);
                    return Ok(());
                }
                (Err(e), false) => return Err(e),
                (Err(_), true) => return done,
            };
            outcome = judge_pair(tx, &self.keys, c, first)?;
            if outcome != Guarded::Recorded {
                return Err(StoreError::Aborted);
            }
            done
        })?;
        if !carried {
            return None;
        }
        if let Some(failed) = unwritten {
            outcome = match self.remember(failed) {
                Ok(state) => state,
                Err(e) => return Some(Err(e)),
            };
            self.set_state(outcome);
            return Some(match outcome {
                Guarded::Remembered => result,
                _ => Err(StoreError::Aborted),
            });
        }
        if outcome != Guarded::Pending {
            self.set_state(outcome);
        }
        Some(result)
    }

    /// The pair kept in memory while the store refuses writes (`failed`: the store's error,
    /// answered when the memory is full); the key is checked with a read.
    fn remember(&self, failed: StoreError) -> Result<Guarded, StoreError> {
        let c = &self.caller;
        let holds = self.may_wait(|| {
            self.store.read(|tx| {
                let generation = tx.key_generation()?;
                key_holds(tx, &self.keys, c, generation)
            })
        })?;
        if !holds {
            return Ok(Guarded::KeyGone);
        }
        Ok(
            match self
                .memory
                .remember(&c.key_id, &c.signature, c.expires_ms, self.now_ms)
            {
                Remembered::First => Guarded::Remembered,
                Remembered::Again => Guarded::Replay,
                Remembered::Full => return Err(failed),
            },
        )
    }

    /// The request's result as answered: refused when its pair was a replay or its key went
    /// while it ran, and otherwise only once the pair is recorded (on its own here, when no
    /// transaction of the request committed it). Writes the key's `last_used_at` when due.
    pub fn finish<T>(&self, result: ApiResult<T>) -> ApiResult<T> {
        let mut state = self.state();
        if state == Guarded::Pending {
            let alone = self.may_wait(|| self.store.write_unsynced(|tx| self.record_in(tx)));
            state = match alone {
                Ok(state) => state,
                Err(e @ (StoreError::DiskFull(_) | StoreError::Unwritable(_)))
                    if self.read_only =>
                {
                    self.remember(e)?
                }
                Err(e) => return Err(e.into()),
            };
            self.set_state(state);
        }
        match state {
            Guarded::Replay => Err(ApiError::auth_replay()),
            Guarded::KeyGone => Err(ApiError::auth_unknown_key()),
            Guarded::Pending => Err(ApiError::internal(
                "the request's replay record was not written",
            )),
            Guarded::Recorded | Guarded::Remembered => {
                self.note_use();
                result
            }
        }
    }

    /// `last_used_at` is informational: written at most once a minute per key, and a failure to
    /// write it does not fail the request.
    fn note_use(&self) {
        let c = &self.caller;
        if c.claim_last_use(self.now_ms)
            && let Err(e) =
                self.may_wait(|| self.store.write(|tx| tx.touch_key(&c.key_id, self.now_ms)))
        {
            tracing::warn!(key_id = %c.key_id, error = %e, "could not record the key's last use");
        }
    }
}

/// The store as a signed request's handler sees it: every call goes to the server's store,
/// and the first transaction while the pair is pending carries the guard ([`RequestGuard`]).
impl Store for RequestGuard {
    /// A `GET`'s first read records the pair: behind its answer ([`ReadReplays`]), in the read
    /// itself ([`RequestGuard::read_carrying`]), or, where reads cannot write, in the guard's
    /// own short write first (unsynced, see [`RequestGuard`]), the read running as a plain read
    /// once that committed: never inside the writer's lock. When the store refuses the write,
    /// the pair goes to memory and the read is served anyway. Other reads go straight to the
    /// store.
    fn read_dyn(
        &self,
        f: &mut dyn FnMut(&mut dyn Tx) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        if !self.read_only || self.state() != Guarded::Pending {
            return self.read_store(f);
        }
        if let Some(behind) = &self.behind
            && let Some(result) = self.read_behind(behind, f)
        {
            return result;
        }
        if let Some(result) = self.read_carrying(f) {
            return result;
        }
        let result = self.guarded(&mut |_| Ok(()), |g| {
            self.may_wait(|| self.store.write_unsynced_dyn(g))
        });
        match result {
            Ok(()) => self.read_store(f),
            Err(e @ (StoreError::DiskFull(_) | StoreError::Unwritable(_)))
                if self.state() == Guarded::Pending =>
            {
                let state = self.remember(e)?;
                self.set_state(state);
                match state {
                    Guarded::Remembered => self.read_store(f),
                    _ => Err(StoreError::Aborted),
                }
            }
            Err(e) => Err(e),
        }
    }

    fn write_dyn(
        &self,
        f: &mut dyn FnMut(&mut dyn Tx) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        self.guarded(f, |g| self.may_wait(|| self.store.write_dyn(g)))
    }

    fn write_unsynced_dyn(
        &self,
        f: &mut dyn FnMut(&mut dyn Tx) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        self.guarded(f, |g| self.may_wait(|| self.store.write_unsynced_dyn(g)))
    }

    /// While the pair is pending, the write's statement carries it
    /// ([`RequestGuard::carrying`]: a publish is one statement on PostgreSQL); `None` where
    /// the store has no such writes, and the caller writes with [`Store::write_dyn`].
    fn write_statement_dyn(
        &self,
        f: &mut dyn FnMut(&mut dyn Tx) -> Result<(), StoreError>,
    ) -> Option<Result<(), StoreError>> {
        if self.state() != Guarded::Pending {
            return self.may_wait(|| self.store.write_statement_dyn(f));
        }
        self.carrying(f, |g| self.may_wait(|| self.store.write_statement_dyn(g)))
    }

    fn quick_check(&self) -> Result<(), StoreError> {
        self.store.quick_check()
    }

    fn health(&self, now_ms: i64) -> Result<(), StoreError> {
        self.store.health(now_ms)
    }

    fn require_writable(&self, now_ms: i64) -> anyhow::Result<()> {
        self.store.require_writable(now_ms)
    }

    fn backup(&self, out: &Path) -> anyhow::Result<()> {
        self.store.backup(out)
    }

    fn describe(&self) -> String {
        self.store.describe()
    }

    fn backend(&self) -> &'static str {
        self.store.backend()
    }

    fn watch(&self, wakers: Wakers, poll: Duration, poll_only: bool) -> anyhow::Result<Watcher> {
        self.store.watch(wakers, poll, poll_only)
    }
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
        let key = KeyAuth {
            secret: String::new(),
            app_id: "app1".into(),
            scope: Scope::Read,
            expires_at: None,
            last_used_at: None,
        };
        let caller = Caller {
            key_id: own.into(),
            app_id: "app1".into(),
            scope: Scope::Read,
            expired_at: None,
            key: Arc::new(HeldKey::new(key)),
            generation: 0,
            timestamp: String::new(),
            signature: String::new(),
            sent_ms: 0,
            expires_ms: 0,
        };
        let refused = check_scope(&caller, "POST", "/v1/endpoints").unwrap_err();
        assert_eq!((refused.status.as_u16(), refused.code), (403, 40301));
        assert_eq!(
            refused.message,
            r#"key scope "read" does not allow POST /v1/endpoints"#
        );
    }

    /// Generations are random, so the cache compares them for equality only: a key held at
    /// one generation is dropped by a hold or refresh at any other, lower or higher.
    #[test]
    fn held_keys_follow_any_other_generation() {
        let key = || KeyAuth {
            secret: String::new(),
            app_id: "app1".into(),
            scope: Scope::Admin,
            expires_at: None,
            last_used_at: None,
        };
        let cache = KeyCache::default();
        cache.hold("a", key(), 900);
        assert_eq!(cache.held("a").map(|(_, g)| g), Some(900));
        // A revocation read at a lower value than the one held still drops the key.
        cache.refresh("a", None, 7);
        assert!(cache.held("a").is_none());
        cache.hold("b", key(), 7);
        // Another generation, lower again: "b" read at 7 is not held as current for it.
        cache.hold("a", key(), -5);
        assert!(cache.held("b").is_none());
        assert_eq!(cache.held("a").map(|(_, g)| g), Some(-5));
    }
}
