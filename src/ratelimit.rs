//! An optional per-key request rate limit; off unless `--rate-limit` is set. A `governor`
//! keyed GCRA limiter (the same crate paces endpoints in the delivery pool) on the server clock.

use crate::clock::{Clock, GovernorClock};
use governor::clock::Clock as _;
use governor::middleware::NoOpMiddleware;
use governor::nanos::Nanos;
use governor::state::keyed::HashMapStateStore;
use governor::{Quota, RateLimiter as Gcra};
use std::num::NonZeroU32;
use std::sync::Arc;

type Keyed = Gcra<String, HashMapStateStore<String>, GovernorClock, NoOpMiddleware<Nanos>>;

/// Keys remembered before idle ones are forgotten.
const MAX_KEYS: usize = 100_000;

/// Request limits by API key id: `per_sec` a second, with a burst of as many.
pub struct RateLimiter {
    limiter: Option<Keyed>,
    clock: GovernorClock,
}

impl std::fmt::Debug for RateLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimiter")
            .field("on", &self.limiter.is_some())
            .finish()
    }
}

impl RateLimiter {
    /// `per_sec` 0 turns the limit off.
    pub fn new(per_sec: u32, clock: Arc<dyn Clock>) -> Self {
        let clock = GovernorClock(clock);
        let limiter = NonZeroU32::new(per_sec)
            .map(|n| Gcra::hashmap_with_clock(Quota::per_second(n), clock.clone()));
        RateLimiter { limiter, clock }
    }

    /// Takes one request for `key`; when none is allowed now, the milliseconds until one is.
    pub fn check(&self, key: &str) -> Result<(), u64> {
        let Some(limiter) = &self.limiter else {
            return Ok(());
        };
        if limiter.len() > MAX_KEYS {
            // Keys are few in practice; forget idle ones rather than grow without bound.
            limiter.retain_recent();
        }
        limiter.check_key(&key.to_string()).map_err(|not_until| {
            let wait = not_until.wait_time_from(self.clock.now());
            u64::try_from(wait.as_millis()).unwrap_or(u64::MAX).max(1)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use chrono::TimeZone;

    fn clock() -> Arc<ManualClock> {
        Arc::new(ManualClock::new(
            chrono::Utc.timestamp_opt(1_700_000_000, 0).unwrap(),
        ))
    }

    #[test]
    fn off_by_default() {
        let limiter = RateLimiter::new(0, clock());
        assert!((0..10_000).all(|_| limiter.check("k").is_ok()));
    }

    #[test]
    fn allows_a_burst_then_refills_per_key() {
        let clock = clock();
        let limiter = RateLimiter::new(5, clock.clone());
        assert!((0..5).all(|_| limiter.check("a").is_ok()));
        assert_eq!(limiter.check("a"), Err(200));
        assert!(limiter.check("b").is_ok(), "keys have their own buckets");
        clock.advance(chrono::Duration::milliseconds(200));
        assert!(limiter.check("a").is_ok(), "one back after 1/5 s");
        assert!(limiter.check("a").is_err());
    }
}
