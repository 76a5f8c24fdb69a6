//! The state one running server shares between its API, scheduler and delivery pool.

use crate::clock::Clock;
use crate::config::Config;
use crate::metrics::Metrics;
use crate::store::Store;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// Shared by every request handler and background loop.
pub struct App {
    pub config: Config,
    /// The database (SQLite or PostgreSQL); see `store::Store`.
    pub store: Arc<dyn Store>,
    pub clock: Arc<dyn Clock>,
    /// Per-key request limit (`--rate-limit`).
    pub rate_limit: crate::ratelimit::RateLimiter,
    /// Woken when a schedule is created or changed, so the scheduler re-plans its sleep.
    pub scheduler_wake: Signal,
    /// Woken when a task becomes due sooner than the delivery pool planned to look.
    pub delivery_wake: Signal,
    /// Counters served by `GET /metrics`.
    pub metrics: Metrics,
    /// Span export (`--otlp-endpoint`); off unless `server::start_on` starts it.
    pub spans: crate::spans::Spans,
    /// Test deliveries (`POST /endpoints/{id}/test`) handed to the delivery pool.
    pub probes: crate::delivery::probe::Probes,
    /// The random delay of jittered schedule firings (replaceable by tests).
    pub jitter: crate::scheduler::Jitter,
    /// Each app's enabled endpoints, held for publishes (`fanout::event`).
    pub targets: crate::targets::TargetCache,
}

impl App {
    pub fn new(config: Config, store: Arc<dyn Store>, clock: Arc<dyn Clock>) -> Self {
        let rate_limit =
            crate::ratelimit::RateLimiter::new(config.rate_limit_per_sec, clock.clone());
        App {
            store,
            clock,
            rate_limit,
            scheduler_wake: Signal::default(),
            delivery_wake: Signal::default(),
            metrics: Metrics::default(),
            spans: crate::spans::Spans::default(),
            probes: Default::default(),
            jitter: Default::default(),
            targets: Default::default(),
            config,
        }
    }

    /// Makes every background loop look at the clock and the database again (tests call it
    /// after moving a manual clock).
    pub fn poke(&self) {
        self.scheduler_wake.notify();
        self.delivery_wake.notify();
    }
}

/// A wake-up flag for a blocking loop: `notify` never blocks and is never lost, even when it
/// comes while the loop is busy rather than waiting.
#[derive(Debug, Default)]
pub struct Signal {
    pending: Mutex<bool>,
    cond: Condvar,
}

impl Signal {
    pub fn notify(&self) {
        *self.pending.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.cond.notify_all();
    }

    /// Sleeps until notified or `timeout` passes; returns true when notified.
    pub fn wait(&self, timeout: Duration) -> bool {
        let guard = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let (mut pending, _) = self
            .cond
            .wait_timeout_while(guard, timeout, |pending| !*pending)
            .unwrap_or_else(|e| e.into_inner());
        std::mem::take(&mut *pending)
    }
}
