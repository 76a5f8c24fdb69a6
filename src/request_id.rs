//! Request ids (`req_` + a per-process random prefix + a counter): one for every reply, in the
//! envelope's `request_id` and the `X-Request-Id` header, whether the service answered
//! (`server`) or hyper refused the request head (`wire`).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

static COUNTER: AtomicU64 = AtomicU64::new(0);
static PREFIX: OnceLock<String> = OnceLock::new();

/// A new id, unique within the process and unlikely to repeat across restarts (the prefix is
/// random).
pub fn next() -> String {
    let prefix = PREFIX.get_or_init(|| format!("{:08x}", rand::random::<u32>()));
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("req_{prefix}{n:010x}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn ids_are_distinct_and_share_the_prefix() {
        let (a, b) = (super::next(), super::next());
        assert_ne!(a, b);
        assert_eq!(a.len(), "req_".len() + 8 + 10);
        assert_eq!(a[..12], b[..12]);
    }
}
