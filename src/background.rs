//! The background loops of a running server — the scheduler, the delivery pool, the WAL
//! checkpointer and scheduled backups — started and stopped together.

use crate::app::App;
use crate::store::{Wakers, Watcher};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// How often committed WAL pages are copied back into the database file.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(250);
/// How often the size of the `-wal` file is compared with its limit: a few MB of WAL can be
/// written in one checkpoint interval under load, and this is what the limit can overshoot by.
const WAL_SIZE_EVERY: Duration = Duration::from_millis(50);
/// How often expired replay records are deleted, and how many per transaction.
const PRUNE_EVERY_MS: i64 = 10_000;
const PRUNE_CHUNK: usize = 5000;

/// Handles to the running background loops.
pub struct Background {
    scheduler: crate::scheduler::Scheduler,
    delivery: crate::delivery::DeliveryPool,
    checkpointer: Checkpointer,
    /// Scheduled backups (`--backup-dir`), when on.
    backups: Option<crate::backup::Backups>,
    /// Other processes' changes (PostgreSQL nodes) waking the scheduler and the delivery pool.
    watcher: Watcher,
}

impl Background {
    pub fn start(app: Arc<App>) -> anyhow::Result<Self> {
        // First: a --backup-dir that cannot be used stops the start before any loop runs.
        let backups = crate::backup::Backups::start(app.clone())?;
        let wakers = {
            let (tasks, schedules) = (app.clone(), app.clone());
            Wakers {
                tasks: Box::new(move || tasks.delivery_wake.notify()),
                schedules: Box::new(move || schedules.scheduler_wake.notify()),
            }
        };
        let watcher = app
            .store
            .watch(wakers, app.config.pg_poll, app.config.pg_poll_only)?;
        Ok(Background {
            backups,
            checkpointer: Checkpointer::start(app.clone()),
            scheduler: crate::scheduler::Scheduler::start(app.clone(), watcher.idle_cap.clone()),
            delivery: crate::delivery::DeliveryPool::start(app, &watcher),
            watcher,
        })
    }

    /// Stops firing schedules, then lets in-flight deliveries finish within the shutdown grace.
    /// Blocking.
    pub fn stop(self) {
        self.scheduler.stop();
        self.delivery.stop();
        if let Some(backups) = self.backups {
            backups.stop();
        }
        self.checkpointer.stop();
        self.watcher.stop();
    }
}

/// Runs the WAL checkpoints on their own thread, so that no API request or delivery round pays
/// for them (pool connections run with `wal_autocheckpoint=0`), and prunes expired replay
/// records (`Tx::prune_replay`). The checkpoint itself is the store's (`Store::maintain`).
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
                    if let Err(e) = app.store.maintain(passive, app.config.wal_limit_bytes) {
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

/// Deletes expired replay records, a chunk per transaction.
fn prune_replay(app: &App, now_ms: i64) -> anyhow::Result<()> {
    while app.store.write(|tx| tx.prune_replay(now_ms, PRUNE_CHUNK))? == PRUNE_CHUNK {}
    Ok(())
}
