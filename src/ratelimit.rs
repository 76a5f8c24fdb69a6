//! An optional per-key request rate limit (token bucket); off unless `--rate-limit` is set.

use std::collections::HashMap;
use std::sync::Mutex;

/// Token buckets by API key id: each refills at `per_sec` tokens a second up to `per_sec`.
#[derive(Debug)]
pub struct RateLimiter {
    per_sec: u32,
    buckets: Mutex<HashMap<String, Bucket>>,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    updated_ms: i64,
}

impl RateLimiter {
    /// `per_sec` 0 turns the limit off.
    pub fn new(per_sec: u32) -> Self {
        RateLimiter {
            per_sec,
            buckets: Mutex::default(),
        }
    }

    /// Takes one token for `key`; when none is left, the milliseconds until one is.
    pub fn check(&self, key: &str, now_ms: i64) -> Result<(), u64> {
        if self.per_sec == 0 {
            return Ok(());
        }
        let capacity = f64::from(self.per_sec);
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        if buckets.len() > 100_000 {
            // Keys are few in practice; forget idle ones rather than grow without bound.
            buckets.retain(|_, b| now_ms - b.updated_ms < 10_000);
        }
        let bucket = buckets.entry(key.to_string()).or_insert(Bucket {
            tokens: capacity,
            updated_ms: now_ms,
        });
        let elapsed_secs = (now_ms - bucket.updated_ms).max(0) as f64 / 1000.0;
        bucket.tokens = (bucket.tokens + elapsed_secs * capacity).min(capacity);
        bucket.updated_ms = now_ms;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else {
            let wait_secs = (1.0 - bucket.tokens) / capacity;
            Err((wait_secs * 1000.0).ceil() as u64)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_by_default() {
        let limiter = RateLimiter::new(0);
        assert!((0..10_000).all(|_| limiter.check("k", 0).is_ok()));
    }

    #[test]
    fn allows_a_burst_then_refills_per_key() {
        let limiter = RateLimiter::new(5);
        assert!((0..5).all(|_| limiter.check("a", 1_000).is_ok()));
        assert_eq!(limiter.check("a", 1_000), Err(200));
        assert!(
            limiter.check("b", 1_000).is_ok(),
            "keys have their own buckets"
        );
        assert!(
            limiter.check("a", 1_200).is_ok(),
            "one token back after 1/5 s"
        );
        assert!(limiter.check("a", 1_200).is_err());
    }
}
