//! Load from N threads: each takes the next request number from a shared counter until the
//! count or the duration is used up (optionally paced to a fixed rate, open loop), and records
//! the latency of every request it sends.

use crate::now_us;
use crate::report::Stats;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// When a load run ends.
#[derive(Debug, Clone, Copy)]
pub enum Until {
    /// After this many requests in all.
    Count(u64),
    /// When this much time has passed (requests in flight then still complete).
    Elapsed(Duration),
}

/// What a load run did.
#[derive(Debug)]
pub struct Outcome {
    pub ok: u64,
    pub errors: u64,
    pub first_error: Option<String>,
    /// Per-request latency, send to reply.
    pub latency: Stats,
    /// Wall clock when the first request could be sent, microseconds since the epoch.
    pub start_us: i64,
    /// From the start to the end of the last request.
    pub elapsed: Duration,
}

impl Outcome {
    /// Successful requests per second.
    pub fn rate(&self) -> f64 {
        self.ok as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Runs one thread per element of `clients`; each calls `op(client, n)` for request numbers
/// `n` taken in order. With `rate`, request `n` is not sent before `start + n / rate`.
pub fn drive<C: Sync>(
    clients: &[C],
    until: Until,
    rate: Option<f64>,
    op: impl Fn(&C, u64) -> Result<(), String> + Sync,
) -> Outcome {
    let next = AtomicU64::new(0);
    let first_error = Mutex::new(None);
    let start = Instant::now();
    let start_us = now_us();
    let per_thread: Vec<(u64, u64, Vec<u64>, Instant)> = std::thread::scope(|scope| {
        let handles: Vec<_> = clients
            .iter()
            .map(|client| {
                let (next, first_error, op) = (&next, &first_error, &op);
                scope.spawn(move || {
                    let (mut ok, mut errors, mut latencies) = (0u64, 0u64, Vec::new());
                    let mut last_end = start;
                    loop {
                        let n = next.fetch_add(1, Ordering::Relaxed);
                        match until {
                            Until::Count(total) if n >= total => break,
                            Until::Elapsed(d) if start.elapsed() >= d => break,
                            _ => {}
                        }
                        if let Some(rate) = rate {
                            let due = start + Duration::from_secs_f64(n as f64 / rate);
                            let now = Instant::now();
                            if due > now {
                                std::thread::sleep(due - now);
                            }
                        }
                        let sent = Instant::now();
                        let result = op(client, n);
                        last_end = Instant::now();
                        latencies.push((last_end - sent).as_micros() as u64);
                        match result {
                            Ok(()) => ok += 1,
                            Err(e) => {
                                errors += 1;
                                first_error
                                    .lock()
                                    .unwrap_or_else(|e| e.into_inner())
                                    .get_or_insert(e);
                            }
                        }
                    }
                    (ok, errors, latencies, last_end)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("load thread panicked"))
            .collect()
    });
    let end = per_thread
        .iter()
        .map(|t| t.3)
        .max()
        .unwrap_or_else(Instant::now);
    Outcome {
        ok: per_thread.iter().map(|t| t.0).sum(),
        errors: per_thread.iter().map(|t| t.1).sum(),
        first_error: first_error.into_inner().unwrap_or_else(|e| e.into_inner()),
        latency: Stats::new(per_thread.into_iter().flat_map(|t| t.2).collect()),
        start_us,
        elapsed: end - start,
    }
}

/// Checks a webhookd reply: HTTP 200 with envelope code 0, or an error naming what came back.
pub fn expect_ok(
    reply: anyhow::Result<webhookd::client::Reply>,
) -> Result<serde_json::Value, String> {
    match reply {
        Ok(r) if r.status == 200 && r.code() == 0 => Ok(r.data().clone()),
        Ok(r) => Err(format!("HTTP {}: {}", r.status, r.body)),
        Err(e) => Err(format!("{e:#}")),
    }
}
