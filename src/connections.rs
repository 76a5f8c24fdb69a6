//! What one client can hold of the server: the connection caps (overall and per peer address,
//! with a small reserve for `/healthz` and `/metrics`), the file-descriptor limit they are
//! derived from, and log lines that stay one line per interval under a flood
//! (docs/API.md, "Limits").

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// File descriptors kept out of the connection budget: the database pool, the delivery pool's
/// outgoing sockets, log files and the like. The budget is half of what is left.
const FDS_KEPT: u64 = 256;

/// The default `--max-connections` is never more than this, whatever the descriptor limit:
/// each open connection costs memory (hyper's buffers) as well as a descriptor.
const MAX_DEFAULT_CONNECTIONS: u64 = 4096;

/// Raises the soft `RLIMIT_NOFILE` to the hard limit (the soft default, 1024 on most systems,
/// is what a few hundred slow clients used up) and returns the soft limit in force.
#[cfg(unix)]
pub fn raise_fd_limit() -> Option<u64> {
    // SAFETY: getrlimit and setrlimit read and write a properly sized, initialised struct.
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return None;
    }
    if limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: limit.rlim_max,
            rlim_max: limit.rlim_max,
        };
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            limit = raised;
        }
    }
    #[allow(clippy::unnecessary_cast)] // rlim_t differs between targets
    Some(limit.rlim_cur as u64)
}

#[cfg(not(unix))]
pub fn raise_fd_limit() -> Option<u64> {
    None
}

/// The caps in force: from the flags, or derived from the descriptor limit where a flag is 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    /// Connections served normally, all peers together.
    pub total: usize,
    /// Connections served normally from one peer address.
    pub per_peer: usize,
    /// Connections beyond either cap that may still ask for `/healthz` or `/metrics`; each
    /// serves one request and is closed. Anything else on them gets 503.
    pub reserve: usize,
}

impl Caps {
    /// `total` and `per_peer` as configured (0: derived from `fd_limit`, the soft
    /// `RLIMIT_NOFILE`, and the worker count).
    pub fn derive(total: usize, per_peer: usize, fd_limit: Option<u64>, workers: usize) -> Caps {
        let total = match total {
            0 => {
                let fds = fd_limit.unwrap_or(1024);
                let spare = fds.saturating_sub(FDS_KEPT + 4 * workers as u64) / 2;
                usize::try_from(spare.clamp(64, MAX_DEFAULT_CONNECTIONS)).unwrap_or(64)
            }
            n => n,
        };
        let per_peer = match per_peer {
            0 => (total / 4).max(8).min(total),
            n => n.min(total),
        };
        Caps {
            total,
            per_peer,
            reserve: (total / 16).max(8),
        }
    }
}

/// How a new connection is let in.
pub enum Admission {
    /// Within both caps: served like any connection.
    Normal(Slot),
    /// Beyond a cap but within the reserve: `/healthz` and `/metrics` only, one request. The
    /// connection must end when its [`Reserved::evicted`] completes.
    Reserved(Slot, Arc<Reserved>),
    /// Beyond the reserve too: answered 503 at once and closed. The text says which cap.
    Refused(&'static str),
}

/// Counts the open connections and lets new ones in by [`Caps`].
pub struct Gate {
    caps: Caps,
    state: Mutex<Counts>,
}

#[derive(Default)]
struct Counts {
    normal: usize,
    /// The reserved connections, oldest first.
    reserved: VecDeque<Arc<Reserved>>,
    /// Normal connections per peer address; an address leaves the map at zero.
    per_peer: HashMap<IpAddr, usize>,
}

impl Gate {
    pub fn new(caps: Caps) -> Arc<Gate> {
        Arc::new(Gate {
            caps,
            state: Mutex::new(Counts::default()),
        })
    }

    pub fn caps(&self) -> Caps {
        self.caps
    }

    /// Lets a connection from `peer` in, or not. The returned slot is given back when dropped
    /// (when the connection ends).
    pub fn admit(self: &Arc<Self>, peer: IpAddr) -> Admission {
        let peer = peer.to_canonical();
        let mut counts = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let from_peer = counts.per_peer.get(&peer).copied().unwrap_or(0);
        let over = if counts.normal >= self.caps.total {
            Some("the server has as many connections as --max-connections allows")
        } else if from_peer >= self.caps.per_peer {
            Some("your address has as many connections as --max-connections-per-peer allows")
        } else {
            None
        };
        let Some(why) = over else {
            counts.normal += 1;
            *counts.per_peer.entry(peer).or_insert(0) += 1;
            return Admission::Normal(Slot {
                gate: self.clone(),
                kind: SlotKind::Normal(peer),
            });
        };
        if counts.reserved.len() >= self.caps.reserve {
            // A full reserve makes room by closing its oldest connection still waiting for
            // its request head: a stranger holding the reserve with slow heads is pushed out
            // by each newcomer, while a health check, whose head comes at once, is served.
            let waiting = counts
                .reserved
                .iter()
                .position(|r| !r.head_received.load(Ordering::SeqCst));
            let Some(oldest) = waiting.and_then(|at| counts.reserved.remove(at)) else {
                return Admission::Refused(why);
            };
            oldest.evict.notify_one();
        }
        let reserved = Arc::new(Reserved::default());
        counts.reserved.push_back(reserved.clone());
        Admission::Reserved(
            Slot {
                gate: self.clone(),
                kind: SlotKind::Reserved(reserved.clone()),
            },
            reserved,
        )
    }

    /// Open connections: (normal, reserved).
    pub fn open(&self) -> (usize, usize) {
        let counts = self.state.lock().unwrap_or_else(|e| e.into_inner());
        (counts.normal, counts.reserved.len())
    }
}

/// A reserved connection's state, shared between the gate and the connection's task.
#[derive(Default)]
pub struct Reserved {
    /// Set once the request head has been read (the connection can no longer be evicted).
    pub head_received: AtomicBool,
    evict: tokio::sync::Notify,
}

impl Reserved {
    /// Completes when the gate takes this connection's place for a newer one.
    pub async fn evicted(&self) {
        self.evict.notified().await
    }
}

/// One admitted connection's place; dropping it frees the place.
pub struct Slot {
    gate: Arc<Gate>,
    kind: SlotKind,
}

enum SlotKind {
    /// A normal connection from this peer.
    Normal(IpAddr),
    Reserved(Arc<Reserved>),
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut counts = self.gate.state.lock().unwrap_or_else(|e| e.into_inner());
        match &self.kind {
            SlotKind::Normal(peer) => {
                counts.normal = counts.normal.saturating_sub(1);
                if let Some(n) = counts.per_peer.get_mut(peer) {
                    *n = n.saturating_sub(1);
                    if *n == 0 {
                        counts.per_peer.remove(peer);
                    }
                }
            }
            // An evicted connection left the queue when it was evicted.
            SlotKind::Reserved(reserved) => counts.reserved.retain(|r| !Arc::ptr_eq(r, reserved)),
        }
    }
}

/// A log line for something that can happen thousands of times a second under attack (a
/// failed accept, a refused connection, a slow body cut): logged at most once per interval,
/// with how many times it happened since the last line.
pub struct LogEvery {
    interval: Duration,
    start: Instant,
    /// Milliseconds after `start` of the last line, plus one (0: never logged).
    last_ms: AtomicU64,
    count: AtomicUsize,
}

impl LogEvery {
    pub fn new(interval: Duration) -> LogEvery {
        LogEvery {
            interval,
            start: Instant::now(),
            last_ms: AtomicU64::new(0),
            count: AtomicUsize::new(0),
        }
    }

    /// Counts one occurrence; calls `log` with the count when a line is due.
    pub fn hit(&self, log: impl FnOnce(usize)) {
        self.count.fetch_add(1, Ordering::Relaxed);
        let now = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX - 1) + 1;
        let last = self.last_ms.load(Ordering::Relaxed);
        let interval = u64::try_from(self.interval.as_millis()).unwrap_or(u64::MAX);
        if last != 0 && now.saturating_sub(last) < interval {
            return;
        }
        if self
            .last_ms
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            log(self.count.swap(0, Ordering::Relaxed));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn defaults_follow_the_descriptor_limit() {
        let caps = Caps::derive(0, 0, Some(1024), 16);
        assert_eq!(caps.total, (1024 - 256 - 64) / 2);
        assert_eq!(caps.per_peer, caps.total / 4);
        assert_eq!(caps.reserve, caps.total / 16);
        assert_eq!(Caps::derive(0, 0, Some(1 << 20), 16).total, 4096);
        assert_eq!(Caps::derive(0, 0, Some(100), 16).total, 64);
        let set = Caps::derive(10, 50, None, 16);
        assert_eq!((set.total, set.per_peer, set.reserve), (10, 10, 8));
    }

    #[test]
    fn caps_per_peer_then_reserve_then_refuse() {
        let gate = Gate::new(Caps {
            total: 3,
            per_peer: 2,
            reserve: 1,
        });
        let a1 = gate.admit(ip("127.0.0.1"));
        let a2 = gate.admit(ip("::ffff:127.0.0.1"));
        assert!(matches!(
            (&a1, &a2),
            (Admission::Normal(_), Admission::Normal(_))
        ));
        let a3 = gate.admit(ip("127.0.0.1"));
        let Admission::Reserved(_, a3_state) = &a3 else {
            panic!("reserved")
        };
        // Its head came: the full reserve cannot make room by closing it.
        a3_state.head_received.store(true, Ordering::SeqCst);
        assert!(
            matches!(gate.admit(ip("127.0.0.1")), Admission::Refused(m) if m.contains("per-peer"))
        );
        let b1 = gate.admit(ip("127.0.0.2"));
        assert!(matches!(b1, Admission::Normal(_)));
        assert!(
            matches!(gate.admit(ip("127.0.0.3")), Admission::Refused(m) if m.contains("--max-connections "))
        );
        assert_eq!(gate.open(), (3, 1));
        drop((a1, a3));
        assert_eq!(gate.open(), (2, 0));
        assert!(matches!(gate.admit(ip("127.0.0.1")), Admission::Normal(_)));
        assert_eq!(gate.open(), (2, 0), "the slot was dropped at once");
    }

    #[test]
    fn a_full_reserve_evicts_its_oldest_connection_still_waiting_for_a_head() {
        let gate = Gate::new(Caps {
            total: 1,
            per_peer: 1,
            reserve: 1,
        });
        let _normal = gate.admit(ip("127.0.0.2"));
        let waiting = gate.admit(ip("127.0.0.2"));
        let Admission::Reserved(_, waiting_state) = &waiting else {
            panic!("reserved")
        };
        let newcomer = gate.admit(ip("127.0.0.2"));
        assert!(matches!(newcomer, Admission::Reserved(..)));
        assert_eq!(gate.open(), (1, 1), "the waiting one was evicted");
        let evicted = waiting_state.clone();
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap()
            .block_on(async move {
                tokio::time::timeout(Duration::from_secs(5), evicted.evicted())
                    .await
                    .expect("told to go")
            });
        drop(waiting);
        assert_eq!(gate.open(), (1, 1), "its end frees nothing twice");
        drop(newcomer);
        assert_eq!(gate.open(), (1, 0));
    }

    #[test]
    fn log_every_counts_between_lines() {
        let log = LogEvery::new(Duration::from_secs(3600));
        let mut lines = Vec::new();
        for _ in 0..5 {
            log.hit(|n| lines.push(n));
        }
        assert_eq!(lines, vec![1]);
        let log = LogEvery::new(Duration::ZERO);
        log.hit(|n| lines.push(n));
        assert_eq!(lines, vec![1, 1]);
    }
}
