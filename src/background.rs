//! The background loops of a running server — the scheduler, the delivery pool and the WAL
//! checkpointer — started and stopped together.

use crate::app::App;
use crate::store;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// How often committed WAL pages are copied back into the database file.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(250);
/// How often the size of the `-wal` file is compared with its limit: a few MB of WAL can be
/// written in one checkpoint interval under load, and this is what the limit can overshoot by.
const WAL_SIZE_EVERY: Duration = Duration::from_millis(50);
/// Longest a truncating checkpoint waits for readers of an older snapshot (writers wait too).
const TRUNCATE_WAIT: Duration = Duration::from_secs(1);
/// How often expired replay records are deleted, and how many per transaction.
const PRUNE_EVERY_MS: i64 = 10_000;
const PRUNE_CHUNK: usize = 5000;

/// Handles to the running background loops.
pub struct Background {
    scheduler: crate::scheduler::Scheduler,
    delivery: crate::delivery::DeliveryPool,
    checkpointer: Checkpointer,
}

impl Background {
    pub fn start(app: Arc<App>) -> Self {
        Background {
            checkpointer: Checkpointer::start(app.clone()),
            scheduler: crate::scheduler::Scheduler::start(app.clone()),
            delivery: crate::delivery::DeliveryPool::start(app),
        }
    }

    /// Stops firing schedules, then lets in-flight deliveries finish within the shutdown grace.
    /// Blocking.
    pub fn stop(self) {
        self.scheduler.stop();
        self.delivery.stop();
        self.checkpointer.stop();
    }
}

/// Runs the WAL checkpoints on their own thread, so that no API request or delivery round pays
/// for them (pool connections run with `wal_autocheckpoint=0`), and prunes expired replay
/// records (`store::replay`).
struct Checkpointer {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

impl Checkpointer {
    fn start(app: Arc<App>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::Builder::new()
            .name("wal-checkpoint".into())
            .spawn(move || {
                let mut next_prune_ms = 0;
                let mut next_checkpoint = std::time::Instant::now();
                while !stopping.load(Ordering::SeqCst) {
                    std::thread::sleep(WAL_SIZE_EVERY);
                    let passive = std::time::Instant::now() >= next_checkpoint;
                    if passive {
                        next_checkpoint += CHECKPOINT_EVERY;
                    }
                    if let Err(e) = checkpoint(&app, passive) {
                        tracing::warn!(error = %e, "WAL checkpoint failed; will retry");
                    }
                    let now_ms = app.clock.now_ms();
                    if now_ms >= next_prune_ms {
                        next_prune_ms = now_ms + PRUNE_EVERY_MS;
                        if let Err(e) = prune_replay(&app, now_ms) {
                            tracing::warn!(error = %e, "pruning replay records failed; will retry");
                        }
                    }
                }
            })
            .expect("cannot start the checkpoint thread");
        Checkpointer { stop, thread }
    }

    fn stop(self) {
        self.stop.store(true, Ordering::SeqCst);
        if self.thread.join().is_err() {
            tracing::error!("the checkpoint thread panicked");
        }
    }
}

/// A PASSIVE checkpoint when `passive` or over the limit; and when the `-wal` file has passed
/// `--wal-limit-mb`, then one that holds the writers until the WAL is copied back and truncated.
fn checkpoint(app: &App, passive: bool) -> anyhow::Result<()> {
    let wal = store::wal_path(&app.config.db);
    let size = std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
    let over = size > app.config.wal_limit_bytes;
    if !passive && !over {
        return Ok(());
    }
    let conn = app.pool.get()?;
    // Over the limit, a PASSIVE checkpoint first copies back what it can while writers go on,
    // so that the truncating one, which holds them, has only the last frames left to copy.
    store::checkpoint(&conn)?;
    if over {
        let emptied = store::checkpoint_truncate(&conn, TRUNCATE_WAIT)?;
        if emptied {
            tracing::debug!(
                bytes = size,
                "WAL over its limit: checkpointed and truncated"
            );
        } else {
            tracing::warn!(
                bytes = size,
                "WAL over its limit and a reader held an old snapshot; will retry"
            );
        }
    }
    Ok(())
}

/// Deletes expired replay records, a chunk per transaction.
fn prune_replay(app: &App, now_ms: i64) -> anyhow::Result<()> {
    let mut conn = app.pool.get()?;
    while store::write_tx(&mut conn, |tx| {
        store::replay::prune(tx, now_ms, PRUNE_CHUNK)
    })? == PRUNE_CHUNK
    {}
    Ok(())
}
