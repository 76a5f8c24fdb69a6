//! A signed read's replay record written after its answer, on a store one process owns
//! (docs/design.md, "Replay"; docs/dev/storage.md, "A read's replay record behind its answer"):
//! the read's (key id, signature) pair is held in memory from its check until a background
//! thread (`replay-writer`) has committed it to `replay_guard` in one transaction with the
//! pairs of other reads, so a replay is refused by the memory until then and by the table
//! after. Writes keep their synchronous record (`auth::RequestGuard`).

use crate::auth::{Remembered, ReplayMemory};
use crate::store::Store;
use std::collections::HashSet;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

/// A read's pair on its way to the table.
struct Record {
    key_id: String,
    signature: String,
    sent_ms: i64,
    expires_ms: i64,
    now_ms: i64,
}

#[derive(Default)]
struct Held {
    /// Every pair held: checked and not yet in the table (or in [`ReplayMemory`]). A signature
    /// covers its timestamp, so the pair alone identifies the request.
    pairs: HashSet<(String, String)>,
    /// Pairs whose read was answered, waiting for the writer, oldest first.
    queue: Vec<Record>,
    /// Set by [`Writer::stop`]: the writer empties the queue, then ends; new pairs are refused.
    stopping: bool,
}

/// What [`ReadReplays::hold`] did with a pair.
#[derive(Debug, PartialEq, Eq)]
pub enum Hold {
    /// Held now: check the table, then [`ReadReplays::queue`] or [`ReadReplays::release`] it.
    First,
    /// Held already: a replay of a read still in flight or not yet written.
    Again,
    /// Not held (the memory is full, or the writer is stopping): record the pair synchronously.
    Declined,
}

/// The pairs of reads held until written, and the writer's wake-up.
pub struct ReadReplays {
    held: Mutex<Held>,
    wake: Condvar,
}

/// The `replay-writer` thread, stopped (after writing what is queued) by [`Writer::stop`].
pub struct Writer {
    replays: Arc<ReadReplays>,
    thread: JoinHandle<()>,
}

/// How long the writer waits before trying again after a failed write it could not move to
/// [`ReplayMemory`].
const RETRY_AFTER: Duration = Duration::from_millis(500);

/// How long the writer lets pairs gather after the first one queued before it writes them: one
/// transaction for a few milliseconds of reads rather than one per read or two. A pair is held
/// in memory (and could be lost to a crash of the process) about this long.
const GATHER: Duration = Duration::from_millis(5);

/// How long a stopping writer waits for the pairs of reads still being answered.
const LAST_CALL: Duration = Duration::from_secs(1);

impl ReadReplays {
    /// Pairs held at most: beyond this (the writer far behind, or the store refusing writes for
    /// long), reads record their pair synchronously as before.
    pub const CAPACITY: usize = 50_000;

    /// Starts the writer for `store`; `memory` takes the pairs the store refuses to write
    /// (a full disk), as it takes a read's pair on the synchronous path.
    pub fn start(
        store: Arc<dyn Store>,
        memory: Arc<ReplayMemory>,
    ) -> std::io::Result<(Arc<ReadReplays>, Writer)> {
        let replays = Arc::new(ReadReplays {
            held: Mutex::default(),
            wake: Condvar::new(),
        });
        let writing = replays.clone();
        let thread = std::thread::Builder::new()
            .name("replay-writer".into())
            .spawn(move || writing.write_until_stopped(&*store, &memory))?;
        Ok((replays.clone(), Writer { replays, thread }))
    }

    fn lock(&self) -> MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Holds the pair unless it is held already (a replay) or cannot be held.
    pub fn hold(&self, key_id: &str, signature: &str) -> Hold {
        let mut held = self.lock();
        if held.stopping || held.pairs.len() >= Self::CAPACITY {
            return Hold::Declined;
        }
        if held
            .pairs
            .insert((key_id.to_string(), signature.to_string()))
        {
            Hold::First
        } else {
            Hold::Again
        }
    }

    /// Lets go of a held pair that will not be written (its request was refused).
    pub fn release(&self, key_id: &str, signature: &str) {
        self.lock()
            .pairs
            .remove(&(key_id.to_string(), signature.to_string()));
    }

    /// Hands a held pair to the writer: recorded as used until `expires_ms`.
    pub fn queue(&self, key_id: &str, signature: &str, sent_ms: i64, expires_ms: i64, now_ms: i64) {
        let mut held = self.lock();
        held.queue.push(Record {
            key_id: key_id.to_string(),
            signature: signature.to_string(),
            sent_ms,
            expires_ms,
            now_ms,
        });
        if held.queue.len() == 1 {
            self.wake.notify_one();
        }
    }

    /// The writer: takes everything queued, writes it in one transaction (group-committed
    /// without an fsync wait, like the synchronous record of a read), then lets go of the
    /// pairs, which the table now refuses. What the store refuses to write goes to `memory`;
    /// what `memory` has no room for stays held and is tried again.
    fn write_until_stopped(&self, store: &dyn Store, memory: &ReplayMemory) {
        loop {
            let (batch, stopping) = {
                let mut held = self.lock();
                let mut last_call = None;
                while held.queue.is_empty() {
                    if !held.stopping {
                        held = self.wake.wait(held).unwrap_or_else(|e| e.into_inner());
                        continue;
                    }
                    // Stopping: a read answered while the server stopped may still queue its
                    // pair; wait for it a little, not for a read that hangs.
                    if held.pairs.is_empty() || last_call.is_some() {
                        return;
                    }
                    let waited = self.wake.wait_timeout(held, LAST_CALL);
                    held = waited.unwrap_or_else(|e| e.into_inner()).0;
                    last_call = Some(());
                }
                if !held.stopping {
                    // Let the reads answered meanwhile join this transaction.
                    drop(held);
                    std::thread::sleep(GATHER);
                    held = self.lock();
                }
                (std::mem::take(&mut held.queue), held.stopping)
            };
            let written = store.write_unsynced(|tx| {
                for r in &batch {
                    tx.first_use_of_signature(
                        &r.key_id,
                        &r.signature,
                        r.sent_ms,
                        r.expires_ms,
                        r.now_ms,
                    )?;
                }
                Ok::<_, crate::store::StoreError>(())
            });
            let failed = written.err();
            let mut held = self.lock();
            let mut kept = Vec::new();
            for r in batch {
                let remembered = match &failed {
                    None => true,
                    Some(_) => {
                        let at = r.now_ms;
                        memory.remember(&r.key_id, &r.signature, r.expires_ms, at)
                            != Remembered::Full
                    }
                };
                if remembered || stopping {
                    held.pairs.remove(&(r.key_id, r.signature));
                } else {
                    kept.push(r);
                }
            }
            if let Some(e) = failed {
                tracing::warn!(error = %e, kept = kept.len(), "could not write reads' replay records");
                if !kept.is_empty() {
                    kept.append(&mut held.queue);
                    held.queue = kept;
                    let _ = self
                        .wake
                        .wait_timeout(held, RETRY_AFTER)
                        .unwrap_or_else(|e| e.into_inner());
                }
            }
        }
    }
}

impl Writer {
    /// Refuses new pairs, writes the ones queued, and ends the thread.
    pub fn stop(self) {
        self.replays.lock().stopping = true;
        self.replays.wake.notify_all();
        if self.thread.join().is_err() {
            tracing::error!("the replay-writer thread panicked");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pair_is_held_once_until_let_go_and_not_at_all_while_stopping() {
        let replays = ReadReplays {
            held: Mutex::default(),
            wake: Condvar::new(),
        };
        assert_eq!(replays.hold("k1", "s"), Hold::First);
        assert_eq!(replays.hold("k1", "s"), Hold::Again);
        assert_eq!(replays.hold("k1", "t"), Hold::First);
        assert_eq!(replays.hold("k2", "s"), Hold::First);
        replays.release("k1", "s");
        assert_eq!(replays.hold("k1", "s"), Hold::First);
        replays.lock().stopping = true;
        assert_eq!(replays.hold("k1", "u"), Hold::Declined);
    }

    /// The writer commits what was queued (a stop writes the queue first) and then lets go of
    /// the pair, which the table now refuses.
    #[test]
    fn the_writer_commits_a_queued_pair_then_lets_it_go() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("replay.sqlite");
        let store = crate::store::open(path.to_str().unwrap(), 2).unwrap();
        let memory = Arc::new(ReplayMemory::default());
        let (replays, writer) = ReadReplays::start(store.clone(), memory.clone()).unwrap();
        assert_eq!(replays.hold("k1", "sig"), Hold::First);
        replays.queue("k1", "sig", 1_000, 301_000, 2_000);
        writer.stop();
        assert!(replays.lock().pairs.is_empty());
        let unrecorded = |sent_ms: i64, now_ms: i64| {
            store
                .read(|tx| tx.key_generation_unless_recorded("k1", "sig", sent_ms, now_ms))
                .unwrap()
        };
        assert_eq!(unrecorded(1_000, 2_000), None, "recorded and live");
        assert_eq!(unrecorded(1_001, 2_000), Some(0), "another signed time");
        assert_eq!(unrecorded(1_000, 301_001), Some(0), "expired");
        assert!(!memory.seen("k1", "sig", 2_000), "written, not remembered");
    }
}
