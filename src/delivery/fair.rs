//! Fair claiming: which endpoints may start deliveries now, and how many.
//!
//! The dispatcher does not claim the oldest due tasks over everything (one endpoint with a
//! backlog would then fill every sender). It walks the endpoints that have pending tasks in id
//! order from a cursor that rotates round after round, and takes from each only what its
//! limits allow:
//! - **in flight**: at most `max_in_flight` of its tasks claimed and not yet recorded (the
//!   endpoint's own value); under the server's default cap (a quarter of `--workers`) at most
//!   that many sends at once, which the senders enforce, and — while it is *answering* (a send
//!   of it ended within [`ANSWERING_MS`]) — three times as many claimed behind them, so one
//!   busy endpoint is not held to one batch per round. An endpoint that has not answered yet,
//!   or whose sends all hang, has only its sends claimed: a receiver that never answers holds
//!   its cap of sockets and nothing queued behind them;
//! - **app share**: an app may have `--app-max-in-flight` tasks claimed (a quarter of
//!   `--max-in-flight` by default). Beyond that comes its reserve, as large again, shared
//!   max-min: an endpoint may still start sends while it holds fewer than its *fair part*, the
//!   share divided by the app's endpoints with something in flight (itself counted), at least
//!   one. So endpoints that never answer cannot shut out a healthy sibling, whichever came
//!   first; one app never holds more than twice its share (half of `--max-in-flight` by
//!   default), the rest staying free for the other apps;
//! - **rate**: `rate_limit_per_sec` through a `governor` GCRA limiter per endpoint, burst 1;
//! - **order**: with `max_in_flight: 1` only the head (first due, ties by id) may go, and only
//!   once it is due itself, so a head waiting to retry holds the rest back.
//!
//! Under the defaults (share 512, 4 sends per endpoint) that makes 128 hanging endpoints fit in
//! an app's share with every sibling at its full rate; past that, siblings still get their
//! fair part of the reserve, and once hanging sends time out their retries come back under the
//! fair part too (docs/design.md §12).
//!
//! An endpoint that may not start now is skipped, its tasks stay `pending` in the database, and
//! the walk tells the dispatcher when to look again (the earliest due time or rate-limit slot it
//! saw; a full endpoint is woken by a sender's result). A slow endpoint therefore waits in the
//! database, never in a sender, and never delays others. Test deliveries
//! (`POST /endpoints/{id}/test`) are admitted through the same accounting ([`Gate::admit`]).
//!
//! The walk reads the endpoints with pending tasks and their limits a page at a time (one
//! statement, [`TaskQueries::endpoints_with_pending`](crate::store::TaskQueries::endpoints_with_pending)),
//! and does not read at all the ones it knows to be **full**: its own claims of them at their
//! claim cap under limits it read less than [`LIMITS_FRESH_MS`] ago. It reads only the gaps
//! between them (none between consecutive ids), so endpoints that hang cost a round nothing
//! while they stay full, instead of look-ups each in every round. A cap raised by `PATCH`,
//! here or on another node, is used once those limits are stale
//! (the walk asks to be woken then); a full endpoint that was disabled or deleted meanwhile is
//! not claimed from either way. Each node counts only its own claims, as before. When no
//! endpoint is full and fewer than a page have pending tasks, one read from the first endpoint
//! gives them all, taken in turn from the cursor ([`Gate::read_whole`]): a walk from the
//! cursor that wraps would read twice.

use crate::clock::{Clock, GovernorClock};
use crate::store::tasks::{Claimed, PendingEndpoint};
use crate::store::{StoreError, Tx, endpoints::Limits};
use governor::clock::Reference as _;
use governor::middleware::NoOpMiddleware;
use governor::nanos::Nanos;
use governor::{Quota, RateLimiter, state::InMemoryState, state::NotKeyed};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

type Limiter = RateLimiter<NotKeyed, InMemoryState, GovernorClock, NoOpMiddleware<Nanos>>;

/// What the dispatcher remembers of one endpoint between rounds.
#[derive(Default)]
struct EndpointState {
    /// Claimed tasks whose result is not recorded yet.
    in_flight: usize,
    /// The rate it was built for, and the limiter.
    limiter: Option<(f64, Limiter)>,
    /// Epoch ms of its last claim: idle state is forgotten after a while.
    last_claim_ms: i64,
    /// Epoch ms when a send of it last ended (0: never): it may have claims queued behind its
    /// sends only while this is recent ([`ANSWERING_MS`]).
    last_answer_ms: i64,
    /// Its app, loaded once.
    app: Option<Arc<str>>,
    /// Its limits as the walk last read them, and when (epoch ms): while they are fresh
    /// ([`LIMITS_FRESH_MS`]) and it is full under them, the walk passes it over unread.
    limits: Option<(Limits, i64)>,
    /// When (epoch ms) the walk last logged that its row cannot be read (a damaged stored
    /// value: [`unreadable_endpoint`]), so that it says so once a minute, not every round.
    unreadable_logged_ms: Option<i64>,
}

impl EndpointState {
    /// Until when (epoch ms) the walk may pass it over without reading it: while its limits
    /// read at most [`LIMITS_FRESH_MS`] ago leave it no room for one more claim. `None`: read
    /// it.
    fn full_until(&self, default_cap: usize, now_ms: i64) -> Option<i64> {
        let (limits, read_ms) = self.limits?;
        let fresh_until = read_ms.saturating_add(LIMITS_FRESH_MS);
        let rate_limited = limits.rate_limit_per_sec.is_some();
        let (_, claim_cap) = caps(
            default_cap,
            limits.max_in_flight,
            rate_limited,
            self,
            now_ms,
        );
        (now_ms < fresh_until && self.in_flight >= claim_cap).then_some(fresh_until)
    }
}

/// What the dispatcher counts of one app.
#[derive(Default)]
struct AppState {
    /// Claimed tasks of its endpoints whose result is not recorded yet.
    in_flight: usize,
    /// Its endpoints with something in flight: past the share, each may hold the share
    /// divided by these.
    busy_endpoints: usize,
}

/// What the walk takes from one endpoint.
enum Take {
    /// Claimed on the spot (an in-order endpoint's head).
    Now(Vec<Claimed>),
    /// Up to this many, claimed with the other endpoints' at the end of the walk.
    Later(usize),
}

/// The result of one walk.
pub struct Walk {
    pub claimed: Vec<Claimed>,
    /// Most sends at once for each endpoint claimed from (the workers hold to it).
    pub caps: HashMap<i64, usize>,
    /// True when the walk stopped because `free` was used up: more may be claimable now.
    pub out_of_room: bool,
    /// The earliest instant (epoch ms) an endpoint it skipped may start again, if any.
    pub wake_at: Option<i64>,
}

/// The per-endpoint accounting and the rotating cursor.
pub struct Gate {
    clock: Arc<dyn Clock>,
    default_cap: usize,
    /// `--app-max-in-flight`: what one app fills before only its endpoints with nothing in
    /// flight may start one.
    app_share: usize,
    /// The endpoint id the last walk stopped after; the next walk starts after it.
    cursor: i64,
    /// Until when (epoch ms) the walk reads from the cursor, a page at a time, without trying
    /// to read every endpoint at once ([`Gate::read_whole`]): a read found a page or more.
    paged_until: i64,
    endpoints: HashMap<i64, EndpointState>,
    apps: HashMap<Arc<str>, AppState>,
}

/// How many tasks an endpoint under the default cap may have claimed, per send it may have
/// under way: three waiting behind each send, taken by a sender as soon as one is free (a
/// smaller queue cost a third of one busy endpoint's throughput: it waits for more rounds).
const DEFAULT_QUEUE_FACTOR: usize = 4;

/// An endpoint is answering while one of its sends ended this recently; only then is its queue
/// ([`DEFAULT_QUEUE_FACTOR`]) claimed. A fast receiver answers within milliseconds of its first
/// claims; one that hangs never does, and holds no more than its sends.
const ANSWERING_MS: i64 = 1_000;

/// Endpoints with pending tasks read in one statement of the walk: a round over a few hundred
/// costs a few statements, whether they have room or not.
const PAGE: usize = 128;

/// How long an endpoint's limits, as the walk read them, are trusted to say it is full: until
/// then the walk passes it over without reading it again. A cap raised by `PATCH` (on this node
/// or another) is therefore used within this long, and a hanging endpoint costs the walk one
/// read per this long instead of one per round.
const LIMITS_FRESH_MS: i64 = 1_000;

/// Idle endpoint state (nothing in flight, no claim this long) is dropped; a rate limit's slot
/// is never longer than 100 s (0.01/s), so nothing is lost by forgetting it.
const FORGET_AFTER_MS: i64 = 200_000;

impl Gate {
    pub fn new(clock: Arc<dyn Clock>, default_cap: usize, app_share: usize) -> Self {
        Gate {
            clock,
            default_cap: default_cap.max(1),
            app_share: app_share.max(1),
            cursor: 0,
            paged_until: 0,
            endpoints: HashMap::new(),
            apps: HashMap::new(),
        }
    }

    /// A task of `endpoint_id` was recorded (or handed back) at `now_ms`: one fewer in flight,
    /// and the endpoint is answering.
    pub fn release(&mut self, endpoint_id: i64, now_ms: i64) {
        let Some(state) = self.endpoints.get_mut(&endpoint_id) else {
            return;
        };
        if state.in_flight == 0 {
            return;
        }
        state.in_flight -= 1;
        state.last_answer_ms = now_ms;
        if let Some(app) = state.app.as_ref().and_then(|a| self.apps.get_mut(a)) {
            app.in_flight = app.in_flight.saturating_sub(1);
            if state.in_flight == 0 {
                app.busy_endpoints = app.busy_endpoints.saturating_sub(1);
            }
        }
    }

    /// Admits one test delivery to `endpoint_id` of `app_id` if the endpoint's cap and its
    /// app's share have room for it now, and counts it in flight (released like a claim).
    /// Returns the endpoint's send cap, or `None` when it must wait for a later round.
    pub fn admit(
        &mut self,
        endpoint_id: i64,
        app_id: &str,
        max_in_flight: Option<i64>,
        now_ms: i64,
    ) -> Option<usize> {
        let state = self.endpoints.entry(endpoint_id).or_default();
        let (cap, claim_cap) = caps(self.default_cap, max_in_flight, false, state, now_ms);
        if state.app.is_none() {
            state.app = Some(Arc::from(app_id));
        }
        let app_room = room_in_app(&self.apps, state, self.app_share);
        if claim_cap.saturating_sub(state.in_flight).min(app_room) == 0 {
            return None;
        }
        count_claims(&mut self.apps, state, 1, now_ms);
        Some(cap)
    }

    /// Claims up to `free` tasks, endpoint by endpoint from the cursor, within each endpoint's
    /// limits: each endpoint's share is decided and counted in walk order, and the shares are
    /// claimed together at the end ([`Gate::claim_takes`]). Runs inside the dispatcher's write
    /// transaction.
    pub fn walk(&mut self, tx: &mut dyn Tx, now_ms: i64, free: usize) -> Result<Walk, StoreError> {
        let mut walk = Walk {
            claimed: Vec::new(),
            caps: HashMap::new(),
            out_of_room: false,
            wake_at: None,
        };
        if free == 0 {
            walk.out_of_room = true;
            return Ok(walk);
        }
        // Endpoints known to be full are passed over without a look at the store; the walk reads
        // the gaps between them, a page at a time.
        let mut full: Vec<(i64, i64)> = self
            .endpoints
            .iter()
            .filter_map(|(&id, s)| Some((id, s.full_until(self.default_cap, now_ms)?)))
            .collect();
        full.sort_unstable();
        let start = self.cursor;
        let mut after = start;
        let mut wrapped = false;
        let mut page = Vec::new().into_iter();
        // The first full endpoint after an id, and until when it is passed over (`i64::MAX`:
        // none).
        let next_full = |after: i64| {
            let i = full.partition_point(|&(id, _)| id <= after);
            full.get(i).copied().unwrap_or((i64::MAX, 0))
        };
        // The gap being read ends before `gap_end`; `gap_read`: its last page was read.
        let ((mut gap_end, mut full_until), mut gap_read) = (next_full(start), false);
        // What each endpoint takes, in walk order, and how many that makes so far.
        let (mut takes, mut taken) = (Vec::new(), 0);
        let whole = self.read_whole(tx, start, full.is_empty(), now_ms)?;
        let read_whole = whole.is_some();
        if let Some(read) = whole {
            page = read.into_iter();
        }
        loop {
            let Some(pending) = page.next() else {
                if read_whole {
                    break; // every endpoint had its turn
                }
                if !gap_read {
                    // An empty gap (two full endpoints with consecutive ids) is not read.
                    let read = match gap_end.saturating_sub(after) > 1 {
                        true => tx.endpoints_with_pending(after, gap_end, PAGE)?,
                        false => Vec::new(),
                    };
                    gap_read = read.len() < PAGE;
                    page = read.into_iter();
                    continue;
                }
                if gap_end < i64::MAX {
                    if wrapped && gap_end > start {
                        break; // every endpoint had its turn
                    }
                    // Passed over: looked at again once its limits are no longer fresh.
                    wake(&mut walk.wake_at, full_until);
                    after = gap_end;
                    if wrapped && after == start {
                        break;
                    }
                } else if wrapped || start == 0 {
                    break;
                } else {
                    (wrapped, after) = (true, 0);
                }
                ((gap_end, full_until), gap_read) = (next_full(after), false);
                continue;
            };
            let endpoint_id = pending.endpoint_id;
            if wrapped && endpoint_id > start {
                break; // every endpoint had its turn
            }
            after = endpoint_id;
            if pending.earliest_due > now_ms {
                wake(&mut walk.wake_at, pending.earliest_due);
                continue;
            }
            let Some(limits) = pending.limits else {
                continue; // deleted: its tasks are canceled in the delete's transaction
            };
            if !limits.enabled {
                continue; // enabling it wakes the dispatcher
            }
            let room = free - taken;
            taken += self.take_from(
                tx,
                endpoint_id,
                &limits,
                now_ms,
                room,
                &mut walk,
                &mut takes,
            )?;
            if taken >= free {
                walk.out_of_room = true;
                break;
            }
        }
        self.claim_takes(tx, now_ms, takes, &mut walk)?;
        self.forget_idle(now_ms);
        Ok(walk)
    }

    /// Every endpoint with pending tasks in walk order (after the cursor, then from the first up
    /// to the cursor), read with one statement where that is all of them: when no endpoint is
    /// passed over as full and fewer than a page have pending tasks. The walk from the cursor
    /// would read the same in two (the endpoints after the cursor, then from the first on,
    /// stopping at the cursor). `None`: the walk reads from the cursor. After a read that found
    /// a page or more, the walk reads from the cursor for [`LIMITS_FRESH_MS`].
    fn read_whole(
        &mut self,
        tx: &mut dyn Tx,
        start: i64,
        none_full: bool,
        now_ms: i64,
    ) -> Result<Option<Vec<PendingEndpoint>>, StoreError> {
        if start == 0 || !none_full || now_ms < self.paged_until {
            return Ok(None);
        }
        let read = tx.endpoints_with_pending(0, i64::MAX, PAGE)?;
        if read.len() >= PAGE {
            self.paged_until = now_ms.saturating_add(LIMITS_FRESH_MS);
            return Ok(None);
        }
        let (before, after): (Vec<_>, Vec<_>) =
            read.into_iter().partition(|p| p.endpoint_id <= start);
        Ok(Some(after.into_iter().chain(before).collect()))
    }

    /// Claims what the walk decided, in one call for every endpoint that was not claimed on the
    /// spot ([`TaskQueries::claim_endpoints_tasks`](crate::store::TaskQueries::claim_endpoints_tasks):
    /// one statement on PostgreSQL), and puts the claims in walk order. An endpoint that
    /// yields fewer than it was counted for (another node claimed them meanwhile) gives the rest
    /// back to its accounting; the cursor stops after the last endpoint that yielded any.
    fn claim_takes(
        &mut self,
        tx: &mut dyn Tx,
        now_ms: i64,
        takes: Vec<(i64, Take)>,
        walk: &mut Walk,
    ) -> Result<(), StoreError> {
        let wanted: Vec<(i64, usize)> = takes
            .iter()
            .filter_map(|(id, take)| match take {
                Take::Later(n) => Some((*id, *n)),
                Take::Now(_) => None,
            })
            .collect();
        let mut claimed_later = match wanted.is_empty() {
            true => Vec::new(),
            false => tx.claim_endpoints_tasks(&wanted, now_ms)?,
        }
        .into_iter();
        for (endpoint_id, take) in takes {
            let claimed = match take {
                Take::Now(claimed) => claimed,
                Take::Later(counted) => {
                    let claimed = claimed_later.next().unwrap_or_default();
                    self.uncount(endpoint_id, counted.saturating_sub(claimed.len()));
                    claimed
                }
            };
            if !claimed.is_empty() {
                self.cursor = endpoint_id;
            }
            walk.claimed.extend(claimed);
        }
        Ok(())
    }

    /// Takes back `n` claims counted for `endpoint_id` that its claim did not yield.
    fn uncount(&mut self, endpoint_id: i64, n: usize) {
        let Some(state) = self.endpoints.get_mut(&endpoint_id) else {
            return;
        };
        let n = n.min(state.in_flight);
        if n == 0 {
            return;
        }
        state.in_flight -= n;
        if let Some(app) = state.app.as_ref().and_then(|a| self.apps.get_mut(a)) {
            app.in_flight = app.in_flight.saturating_sub(n);
            if state.in_flight == 0 {
                app.busy_endpoints = app.busy_endpoints.saturating_sub(1);
            }
        }
    }

    /// Decides what one due, enabled endpoint may start now (at most `room`) and counts it as
    /// claimed: an in-order endpoint's head is claimed on the spot, the others are claimed
    /// together at the end of the walk ([`Gate::claim_takes`]). Returns how many it counted.
    #[allow(clippy::too_many_arguments)]
    fn take_from(
        &mut self,
        tx: &mut dyn Tx,
        endpoint_id: i64,
        limits: &Limits,
        now_ms: i64,
        room: usize,
        walk: &mut Walk,
        takes: &mut Vec<(i64, Take)>,
    ) -> Result<usize, StoreError> {
        let clock = self.clock.clone();
        let state = self.endpoints.entry(endpoint_id).or_default();
        state.limits = Some((*limits, now_ms));
        if state.app.is_none() {
            let endpoint = match tx.get_endpoint_any(endpoint_id) {
                Ok(Some(endpoint)) => endpoint,
                Ok(None) => return Ok(0),
                // A damaged row stops this endpoint's deliveries, not the round's.
                Err(e) if e.is_unreadable_value() => {
                    let logged = &mut state.unreadable_logged_ms;
                    if logged.is_none_or(|at| now_ms.saturating_sub(at) >= 60_000) {
                        *logged = Some(now_ms);
                        unreadable_endpoint(endpoint_id, &e);
                    }
                    return Ok(0);
                }
                Err(e) => return Err(e),
            };
            state.app = Some(Arc::from(endpoint.app_id));
        }
        let rate_limited = limits.rate_limit_per_sec.is_some();
        let (cap, claim_cap) = caps(
            self.default_cap,
            limits.max_in_flight,
            rate_limited,
            state,
            now_ms,
        );
        let app_room = room_in_app(&self.apps, state, self.app_share);
        let mut allowed = claim_cap
            .saturating_sub(state.in_flight)
            .min(room)
            .min(app_room);
        if allowed == 0 {
            return Ok(0); // a sender's result wakes the dispatcher
        }
        // In order only when the endpoint asks for one at a time, not under a default cap of 1
        // (fewer than 8 workers): that cap limits sends, never their order.
        let in_order = limits.max_in_flight == Some(1);
        let head = if in_order {
            match tx.in_order_head(endpoint_id)? {
                Some((_, due)) if due > now_ms => {
                    wake(&mut walk.wake_at, due); // the head waits to retry: all wait
                    return Ok(0);
                }
                Some((id, _)) => Some(id),
                None => return Ok(0),
            }
        } else {
            None
        };
        if let Some(rate) = limits.rate_limit_per_sec {
            let limiter = limiter_for(state, rate, clock);
            let mut granted = 0;
            while granted < allowed {
                match limiter.check() {
                    Ok(()) => granted += 1,
                    Err(not_until) => {
                        let at = not_until.earliest_possible();
                        let ms = at
                            .duration_since(Nanos::from(0))
                            .as_u64()
                            .div_ceil(1_000_000);
                        wake(&mut walk.wake_at, i64::try_from(ms).unwrap_or(i64::MAX));
                        break;
                    }
                }
            }
            allowed = granted;
        } else {
            state.limiter = None;
        }
        if allowed == 0 {
            return Ok(0);
        }
        let (n, take) = match head {
            Some(id) => {
                let claimed: Vec<_> = tx.claim_task(id, now_ms)?.into_iter().collect();
                (claimed.len(), Take::Now(claimed))
            }
            None => (allowed, Take::Later(allowed)),
        };
        walk.caps.insert(endpoint_id, cap);
        count_claims(&mut self.apps, state, n, now_ms);
        if n > 0 {
            takes.push((endpoint_id, take));
        }
        Ok(n)
    }

    /// Endpoints seen `n` claims ago that are idle now need no memory, nor apps with nothing
    /// in flight.
    fn forget_idle(&mut self, now_ms: i64) {
        if self.endpoints.len() > 1024 {
            self.endpoints
                .retain(|_, s| s.in_flight > 0 || now_ms - s.last_claim_ms < FORGET_AFTER_MS);
            self.apps.retain(|_, a| a.in_flight > 0);
        }
    }
}

/// An endpoint's send cap and how many of its tasks may be claimed at once.
fn caps(
    default_cap: usize,
    max_in_flight: Option<i64>,
    rate_limited: bool,
    state: &EndpointState,
    now_ms: i64,
) -> (usize, usize) {
    let cap = max_in_flight
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(default_cap)
        .max(1);
    // An endpoint with limits of its own has at most `cap` claimed. One under the default cap
    // may have a few more claimed while it answers, waiting in memory for a sender that it gets
    // only while fewer than `cap` of its sends are under way: without that queue, one busy
    // endpoint could take no more than `cap` tasks per dispatcher round. One that does not
    // answer would only hold them out of its app's share.
    let answering = state.last_answer_ms > 0 && now_ms - state.last_answer_ms < ANSWERING_MS;
    if max_in_flight.is_some() || rate_limited || !answering {
        (cap, cap)
    } else {
        (cap, cap * DEFAULT_QUEUE_FACTOR)
    }
}

/// How many more tasks an endpoint may have claimed as far as its app is concerned: what is
/// left of the app's share; once that is used, its fair part of the reserve: up to the share
/// divided by the app's endpoints with something in flight (itself counted), at least one, and
/// never past twice the share in all. An endpoint that got in first with more than that keeps
/// what it holds but starts no more while the app is past its share.
fn room_in_app(apps: &HashMap<Arc<str>, AppState>, state: &EndpointState, share: usize) -> usize {
    let Some(app) = state.app.as_ref().and_then(|a| apps.get(a)) else {
        return share;
    };
    if app.in_flight < share {
        return share - app.in_flight;
    }
    let busy = app.busy_endpoints + usize::from(state.in_flight == 0);
    let fair = (share / busy.max(1)).max(1);
    fair.saturating_sub(state.in_flight)
        .min(share.saturating_mul(2).saturating_sub(app.in_flight))
}

/// Counts `n` new claims of an endpoint in it and in its app.
fn count_claims(
    apps: &mut HashMap<Arc<str>, AppState>,
    state: &mut EndpointState,
    n: usize,
    now_ms: i64,
) {
    if n == 0 {
        return;
    }
    if let Some(app_id) = &state.app {
        let app = apps.entry(app_id.clone()).or_default();
        app.in_flight += n;
        if state.in_flight == 0 {
            app.busy_endpoints += 1;
        }
    }
    state.in_flight += n;
    state.last_claim_ms = now_ms;
}

/// The endpoint's limiter, rebuilt when its rate changed.
fn limiter_for(state: &mut EndpointState, rate: f64, clock: Arc<dyn Clock>) -> &Limiter {
    if state.limiter.as_ref().is_none_or(|(r, _)| *r != rate) {
        let period = Duration::from_secs_f64(1.0 / rate.clamp(0.01, 10_000.0));
        // `with_period` is burst 1: one start, then one more per period.
        let quota = Quota::with_period(period).expect("a positive period");
        state.limiter = Some((
            rate,
            RateLimiter::direct_with_clock(quota, GovernorClock(clock)),
        ));
    }
    &state.limiter.as_ref().expect("set above").1
}

fn wake(at: &mut Option<i64>, candidate: i64) {
    *at = Some(at.map_or(candidate, |a| a.min(candidate)));
}

/// Logs that endpoint `endpoint_id`'s row cannot be read (`error`: a stored value that does not
/// read as its type): its tasks wait, unclaimed, until the value is set again; every other
/// endpoint is delivered as usual (docs/operations.md, "A stored value webhookd cannot read").
pub(crate) fn unreadable_endpoint(endpoint_id: i64, error: &StoreError) {
    tracing::error!(
        endpoint_id,
        error = %error,
        "delivery pool: the endpoint's stored row cannot be read; its tasks wait until it is set again (other endpoints are delivered)"
    );
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use chrono::TimeZone;

    #[test]
    fn past_its_share_an_app_s_endpoints_each_get_a_fair_part_up_to_twice_the_share() {
        let mut apps = HashMap::new();
        let app: Arc<str> = Arc::from("a");
        let endpoint = |in_flight| EndpointState {
            in_flight,
            app: Some(app.clone()),
            ..EndpointState::default()
        };
        assert_eq!(
            room_in_app(&apps, &endpoint(0), 8),
            8,
            "an app not seen yet"
        );
        // (share, app in flight, its busy endpoints, the endpoint's in flight, room)
        for (share, app_in_flight, busy_endpoints, endpoint_in_flight, room) in [
            (8, 0, 0, 0, 8),
            (8, 5, 1, 5, 3),
            (8, 8, 1, 8, 0),
            (8, 8, 1, 0, 4),
            (8, 8, 2, 4, 0),
            (8, 8, 3, 1, 1),
            (8, 12, 4, 0, 1),
            (8, 15, 7, 0, 1),
            (8, 15, 8, 1, 0),
            (8, 16, 8, 0, 0),
            // 100 hanging endpoints with 4 sends each fit in the default share of 512 ...
            (512, 400, 100, 0, 112),
            // ... and with 200 a healthy sibling still gets 512 / 201 = 2 at once.
            (512, 800, 200, 0, 2),
            (512, 1023, 200, 0, 1),
            (512, 1024, 200, 0, 0),
        ] {
            apps.insert(
                app.clone(),
                AppState {
                    in_flight: app_in_flight,
                    busy_endpoints,
                },
            );
            assert_eq!(
                room_in_app(&apps, &endpoint(endpoint_in_flight), share),
                room,
                "share {share}, app {app_in_flight} over {busy_endpoints}, endpoint {endpoint_in_flight}"
            );
        }
    }

    #[test]
    fn only_an_answering_endpoint_has_claims_queued_behind_its_sends() {
        let clock = Arc::new(ManualClock::new(
            chrono::Utc.timestamp_opt(1_700_000_000, 0).unwrap(),
        ));
        let mut gate = Gate::new(clock, 4, 512);
        let admitted = |gate: &mut Gate, at| {
            std::iter::from_fn(|| gate.admit(1, "a", None, at))
                .take(100)
                .count()
        };
        assert_eq!(admitted(&mut gate, 1_000), 4, "not answered yet: its sends");
        gate.release(1, 2_000);
        assert_eq!(
            admitted(&mut gate, 2_500),
            13,
            "answering: 16 claimed in all"
        );
        assert_eq!(gate.endpoints[&1].in_flight, 16);
        for _ in 0..16 {
            gate.release(1, 3_000);
        }
        assert_eq!(
            admitted(&mut gate, 3_000 + ANSWERING_MS),
            4,
            "silent for a second: its sends again"
        );
        assert_eq!(gate.apps[&Arc::from("a")].busy_endpoints, 1);
        for _ in 0..4 {
            gate.release(1, 5_000);
        }
        assert_eq!(gate.apps[&Arc::from("a")].busy_endpoints, 0);
    }

    #[test]
    fn claims_and_releases_are_counted_per_endpoint_and_per_app() {
        let clock = Arc::new(ManualClock::new(
            chrono::Utc.timestamp_opt(1_700_000_000, 0).unwrap(),
        ));
        let mut gate = Gate::new(clock, 4, 8);
        assert_eq!(gate.admit(1, "a", None, 0), Some(4));
        assert_eq!(gate.admit(2, "a", Some(1), 0), Some(1));
        assert_eq!(gate.admit(2, "a", Some(1), 0), None, "its own cap of 1");
        assert_eq!(gate.apps[&Arc::from("a")].in_flight, 2);
        assert_eq!(gate.apps[&Arc::from("a")].busy_endpoints, 2);
        gate.release(2, 0);
        gate.release(2, 0);
        assert_eq!(gate.apps[&Arc::from("a")].in_flight, 1, "released once");
        assert_eq!(gate.endpoints[&2].in_flight, 0);
        assert_eq!(gate.apps[&Arc::from("a")].busy_endpoints, 1);
    }

    /// Endpoints of app `a` on a fresh SQLite store, each with `tasks` pending tasks due at 0;
    /// the store (kept in its directory) and their ids.
    pub(crate) fn store_with_endpoints(
        n: usize,
        tasks: usize,
    ) -> (tempfile::TempDir, Arc<dyn crate::store::Store>, Vec<i64>) {
        use crate::store::endpoints::Endpoint;
        use crate::store::tasks::{NewTask, TaskKind};
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::open(dir.path().join("t.sqlite").to_str().unwrap(), 2).unwrap();
        let ids = store
            .write(|tx| {
                let mut ids = Vec::new();
                for i in 0..n {
                    let endpoint = tx.insert_endpoint(&Endpoint {
                        id: 0,
                        app_id: "a".into(),
                        name: format!("e{i}"),
                        url: "http://127.0.0.1:9/".into(),
                        method: "POST".into(),
                        headers: serde_json::Map::new(),
                        secret: None,
                        timeout_ms: 1_000,
                        retry_policy_id: None,
                        filter_events: None,
                        filter_payload: None,
                        status: crate::store::endpoints::EndpointStatus::Enabled,
                        rate_limit_per_sec: None,
                        max_in_flight: None,
                        previous_secret: None,
                        previous_secret_expires_at: None,
                        created_at: 0,
                        updated_at: 0,
                        disabled_reason: None,
                        last_success_at: None,
                        last_failure_at: None,
                        consecutive_failures: 0,
                    })?;
                    for _ in 0..tasks {
                        tx.insert_task(&NewTask {
                            app_id: "a",
                            schedule_id: None,
                            event_id: None,
                            endpoint_id: endpoint.id,
                            task_type: TaskKind::Manual,
                            payload: "{}",
                            run_at: 0,
                            max_attempts: 3,
                            now_ms: 0,
                            trace: crate::trace::TaskTrace::under(
                                &crate::trace::SpanContext::new_root(),
                            ),
                        })?;
                    }
                    ids.push(endpoint.id);
                }
                Ok::<_, StoreError>(ids)
            })
            .unwrap();
        (dir, store, ids)
    }

    /// The walk reads endpoints a page at a time: past a page of full endpoints it still reaches
    /// the ones with room, every endpoint gets its turn from the rotating cursor, and a disabled
    /// one is passed over.
    #[test]
    fn the_walk_pages_past_full_endpoints_and_gives_each_its_turn() {
        let clock = Arc::new(ManualClock::new(
            chrono::Utc.timestamp_opt(1_700_000_000, 0).unwrap(),
        ));
        let n = PAGE * 2 + 3;
        let (_dir, store, ids) = store_with_endpoints(n, 8);
        let mut gate = Gate::new(clock, 4, 4 * n);
        // Releases at 10 and walks at `LATER`: not answering, so each holds its sends only.
        const LATER: i64 = 10 + ANSWERING_MS;
        let walk = |gate: &mut Gate, free| {
            let walk = store.write(|tx| gate.walk(tx, LATER, free)).unwrap();
            let mut per_endpoint = std::collections::BTreeMap::new();
            for task in &walk.claimed {
                *per_endpoint.entry(task.endpoint_id).or_insert(0) += 1;
            }
            (per_endpoint, walk.out_of_room)
        };
        // The store's page: ids strictly between the bounds, at most `limit`, in id order.
        let between = |after, before, limit| {
            let page = store.read(|tx| tx.endpoints_with_pending(after, before, limit));
            let page = page.unwrap().into_iter();
            page.map(|p| p.endpoint_id).collect::<Vec<_>>()
        };
        assert_eq!(between(ids[0], ids[3], 10), ids[1..3]);
        assert_eq!(between(0, i64::MAX, 2), ids[..2]);
        assert_eq!(between(ids[n - 2], i64::MAX, 10), ids[n - 1..]);
        // Every endpoint its sends (4, not answering yet): 4 * n claimed in one walk.
        let (first, out_of_room) = walk(&mut gate, usize::MAX);
        assert_eq!(first.len(), n);
        assert!(first.values().all(|&c| c == 4), "{first:?}");
        assert!(!out_of_room);
        // All full now: nothing, though each still has 4 pending.
        assert_eq!(walk(&mut gate, usize::MAX).0.len(), 0);
        // The last three get room: reached past two pages of full endpoints.
        for &id in &ids[PAGE * 2..] {
            gate.release(id, 10);
        }
        let (freed, _) = walk(&mut gate, usize::MAX);
        let expected: std::collections::BTreeMap<_, _> =
            ids[PAGE * 2..].iter().map(|&id| (id, 1)).collect();
        assert_eq!(freed, expected, "one each: their own released place");
        // The cursor is at the last endpoint claimed from: with room everywhere and one claim
        // per walk, the next walk starts at the first endpoint again (wrapped).
        for &id in &ids {
            gate.release(id, 10);
        }
        assert_eq!(
            walk(&mut gate, 1).0.keys().copied().collect::<Vec<_>>(),
            [ids[0]]
        );
        assert_eq!(
            walk(&mut gate, 1).0.keys().copied().collect::<Vec<_>>(),
            [ids[1]]
        );
        // A disabled endpoint is passed over.
        store
            .write(|tx| {
                tx.set_endpoint_status(
                    "a",
                    ids[2],
                    false,
                    crate::store::endpoints::DisabledReason::Manual,
                    10,
                )
            })
            .unwrap();
        assert_eq!(
            walk(&mut gate, 1).0.keys().copied().collect::<Vec<_>>(),
            [ids[3]]
        );
    }

    /// With fewer than a page of endpoints pending and none full, the walk reads them all at
    /// once ([`Gate::read_whole`]) and still takes them in turn from the cursor, wrapping past
    /// the last to the first, as the read from the cursor does.
    #[test]
    fn a_walk_over_fewer_than_a_page_turns_at_the_cursor() {
        let clock = Arc::new(ManualClock::new(
            chrono::Utc.timestamp_opt(1_700_000_000, 0).unwrap(),
        ));
        let (_dir, store, ids) = store_with_endpoints(3, 40);
        let mut gate = Gate::new(clock, 4, 512);
        // The endpoints claimed from, in walk order.
        let mut walk = |free| {
            let walk = store.write(|tx| gate.walk(tx, 5_000, free)).unwrap();
            let mut order: Vec<i64> = walk.claimed.iter().map(|t| t.endpoint_id).collect();
            for &id in &order {
                gate.release(id, 5_000);
            }
            order.dedup();
            order
        };
        assert_eq!(walk(1), [ids[0]], "from the first");
        assert_eq!(walk(1), [ids[1]]);
        assert_eq!(
            walk(usize::MAX),
            [ids[2], ids[0], ids[1]],
            "after the cursor, then wrapped, each once"
        );
        assert_eq!(walk(1), [ids[2]], "after the last claimed from");
    }

    /// An endpoint full under limits read less than [`LIMITS_FRESH_MS`] ago is passed over
    /// unread (a raised cap waits until they are stale, and the walk asks to be woken then); one
    /// with room again after a release is read at once.
    #[test]
    fn a_full_endpoint_is_passed_over_until_its_limits_are_stale() {
        let clock = Arc::new(ManualClock::new(
            chrono::Utc.timestamp_opt(1_700_000_000, 0).unwrap(),
        ));
        let (_dir, store, ids) = store_with_endpoints(2, 12);
        let (e1, e2) = (ids[0], ids[1]);
        let mut gate = Gate::new(clock, 4, 512);
        let walk = |gate: &mut Gate, at| {
            let walk = store.write(|tx| gate.walk(tx, at, usize::MAX)).unwrap();
            let count = |id| walk.claimed.iter().filter(|t| t.endpoint_id == id).count();
            (count(e1), count(e2), walk.wake_at)
        };
        assert_eq!(
            walk(&mut gate, 5_000),
            (4, 4, None),
            "their sends: full now"
        );
        store
            .write(|tx| {
                let mut raised = tx.get_endpoint_any(e1)?.unwrap();
                raised.max_in_flight = Some(8);
                tx.update_endpoint(&raised)
            })
            .unwrap();
        assert_eq!(
            walk(&mut gate, 5_999),
            (0, 0, Some(5_000 + LIMITS_FRESH_MS)),
            "passed over unread: the raised cap is not seen yet"
        );
        assert_eq!(
            walk(&mut gate, 6_000),
            (4, 0, None),
            "read again: 8 at once"
        );
        gate.release(e2, 6_100);
        assert_eq!(
            walk(&mut gate, 6_100),
            (0, 8, Some(6_000 + LIMITS_FRESH_MS)),
            "room again: read at once"
        );
    }

    #[test]
    fn the_limiter_spaces_starts_by_the_period_with_a_burst_of_one() {
        let clock = Arc::new(ManualClock::new(
            chrono::Utc.timestamp_opt(1_700_000_000, 0).unwrap(),
        ));
        let mut state = EndpointState::default();
        let limiter = limiter_for(&mut state, 2.0, clock.clone());
        assert!(limiter.check().is_ok());
        let not_until = limiter.check().expect_err("burst of one");
        let at = not_until.earliest_possible().as_u64() / 1_000_000;
        assert_eq!(
            at, 1_700_000_000_500,
            "the next slot is half a second later"
        );
        clock.advance(chrono::Duration::milliseconds(499));
        assert!(limiter_for(&mut state, 2.0, clock.clone()).check().is_err());
        clock.advance(chrono::Duration::milliseconds(1));
        assert!(limiter_for(&mut state, 2.0, clock.clone()).check().is_ok());
        assert!(limiter_for(&mut state, 2.0, clock.clone()).check().is_err());
    }
}
