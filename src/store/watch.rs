//! Watching for changes other processes make to the database: what [`Store::watch`] returns
//! ([`Watcher`]), the wakes it calls ([`Wakers`]), the cap on idle sleeps while notices may
//! be missed ([`IdleCap`]), how many other processes were heard from ([`Peers`]) and whether
//! this process's delivery pool keeps up with the work due ([`KeepingUp`]).
//! Backend-neutral: a store with nothing to watch returns [`Watcher::none`].
//!
//! [`Store::watch`]: crate::store::Store::watch

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

/// What a store's watcher calls when another process made work due: the delivery pool's and
/// the scheduler's wakes.
pub struct Wakers {
    pub tasks: Box<dyn Fn() + Send + Sync>,
    pub schedules: Box<dyn Fn() + Send + Sync>,
}

/// The cap on the delivery pool's and the scheduler's idle sleep: none while the store's
/// watcher is connected (a notice wakes them), `poll` otherwise. Cheap to clone; the clones
/// share the listening state, so one can be made before the watching starts.
#[derive(Debug, Clone)]
pub struct IdleCap {
    listening: Arc<AtomicBool>,
    poll: Duration,
}

impl IdleCap {
    /// Caps sleeps at `poll` until the watcher given this cap is connected; with no watcher
    /// (polling only) always. `Duration::MAX` never caps (one process, whose own wakes cover
    /// every change).
    pub fn new(poll: Duration) -> IdleCap {
        IdleCap {
            listening: Arc::new(AtomicBool::new(false)),
            poll,
        }
    }

    /// Whether notices currently arrive.
    pub fn is_listening(&self) -> bool {
        self.listening.load(Ordering::Acquire)
    }

    /// How long to sleep when the loop would sleep `idle`.
    pub fn cap(&self, idle: Duration) -> Duration {
        if self.is_listening() {
            idle
        } else {
            idle.min(self.poll)
        }
    }

    /// The flag a watcher sets while notices arrive.
    pub(crate) fn listening_flag(&self) -> Arc<AtomicBool> {
        self.listening.clone()
    }
}

/// How many other processes sharing the database the store's watcher heard from lately (their
/// notices): the delivery pool spaces its rounds by it, so that several nodes together claim
/// about as often as one. Cheap to clone; the clones share the count.
#[derive(Debug, Clone, Default)]
pub struct Peers(Arc<AtomicUsize>);

impl Peers {
    /// The other processes heard from lately (0 with nothing to watch).
    pub fn count(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }

    /// Set by the watcher.
    pub fn set(&self, n: usize) {
        self.0.store(n, Ordering::Relaxed);
    }
}

/// Where the delivery pool tells the store whether it keeps up with the work due (it claims
/// what is due soon after it is due, with room to spare): while it does, a store shared with
/// other processes need not wake them for the work this process makes due, since its own pool,
/// woken in process, delivers it (docs/dev/storage.md, "Notices only when behind"). Until the
/// pool first says so, and whenever it says it does not (behind, or stopping), the other
/// processes are woken as before. Cheap to clone; a store with nothing to tell does nothing.
#[derive(Clone, Default)]
pub struct KeepingUp(Option<Arc<dyn Fn(bool) + Send + Sync>>);

impl KeepingUp {
    /// Calls `told` with each change the delivery pool reports.
    pub fn new(told: impl Fn(bool) + Send + Sync + 'static) -> KeepingUp {
        KeepingUp(Some(Arc::new(told)))
    }

    /// Reports whether the delivery pool keeps up (called on changes only).
    pub fn set(&self, keeping_up: bool) {
        if let Some(told) = &self.0 {
            told(keeping_up);
        }
    }
}

impl std::fmt::Debug for KeepingUp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.0 {
            Some(_) => "KeepingUp(told)",
            None => "KeepingUp(none)",
        })
    }
}

/// What [`Store::watch`](crate::store::Store::watch) started: the cap on idle sleeps, how often
/// leases of other processes must be looked at, and the watching to stop at shutdown.
pub struct Watcher {
    pub idle_cap: IdleCap,
    /// How often the delivery pool takes back tasks whose lease ran out
    /// (`rescue_expired_leases`), idle or not: a node dying with claimed tasks sends no
    /// notice. `None`: no other process can hold a lease.
    pub rescue_every: Option<Duration>,
    /// Other processes heard from lately (always 0 for a store one process owns).
    pub peers: Peers,
    /// Where the delivery pool says whether it keeps up (nowhere for a store one process owns).
    pub keeping_up: KeepingUp,
    stop: Option<Box<dyn FnOnce() + Send>>,
}

impl Watcher {
    /// Nothing watched, no cap, no leases: the process's own wakes cover every change.
    pub fn none() -> Watcher {
        Watcher {
            idle_cap: IdleCap::new(Duration::MAX),
            rescue_every: None,
            peers: Peers::default(),
            keeping_up: KeepingUp::default(),
            stop: None,
        }
    }

    /// Several processes on one database: sleeps capped by `idle_cap`, the others counted in
    /// `peers`, the delivery pool's pace told to `keeping_up`, leases looked at every
    /// `rescue_every`, and `stop` run at shutdown.
    pub fn shared(
        idle_cap: IdleCap,
        peers: Peers,
        keeping_up: KeepingUp,
        rescue_every: Duration,
        stop: Option<Box<dyn FnOnce() + Send>>,
    ) -> Watcher {
        Watcher {
            idle_cap,
            rescue_every: Some(rescue_every),
            peers,
            keeping_up,
            stop,
        }
    }

    /// Stops watching (blocking, about a second at most).
    pub fn stop(self) {
        if let Some(stop) = self.stop {
            stop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_applies_only_while_not_listening() {
        let cap = IdleCap::new(Duration::from_millis(1000));
        assert_eq!(cap.cap(Duration::from_secs(60)), Duration::from_secs(1));
        assert_eq!(
            cap.cap(Duration::from_millis(200)),
            Duration::from_millis(200)
        );
        cap.listening.store(true, Ordering::Release);
        assert_eq!(cap.cap(Duration::from_secs(60)), Duration::from_secs(60));
        assert!(cap.is_listening());
        let never = IdleCap::new(Duration::MAX);
        assert_eq!(never.cap(Duration::from_secs(60)), Duration::from_secs(60));
    }
}
