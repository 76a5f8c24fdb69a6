//! The background loops of a running server — the scheduler, the delivery pool, the replay
//! pruner and scheduled backups — started and stopped together. The store's own upkeep
//! (SQLite's WAL checkpoints) is the store's: it runs from `store::open_with` until the store
//! drops.

use crate::app::App;
use crate::store::{Wakers, Watcher};
use std::sync::Arc;
use std::sync::mpsc::RecvTimeoutError;
use std::thread::JoinHandle;
use std::time::Duration;

/// How often expired replay records are deleted (by the server's clock), and how many per
/// transaction.
const PRUNE_EVERY_MS: i64 = 10_000;
const PRUNE_CHUNK: usize = 5000;
/// How often the pruner looks at the server's clock (a test's manual clock may jump).
const PRUNE_LOOK_EVERY: Duration = Duration::from_secs(1);

/// Handles to the running background loops.
pub struct Background {
    scheduler: crate::scheduler::Scheduler,
    delivery: crate::delivery::DeliveryPool,
    pruner: ReplayPruner,
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
            pruner: ReplayPruner::start(app.clone())?,
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
        self.pruner.stop();
        self.watcher.stop();
    }
}

/// The `replay-prune` thread: deletes expired replay records (`prune_replay`) every
/// [`PRUNE_EVERY_MS`] of the server's clock.
struct ReplayPruner {
    stop: std::sync::mpsc::Sender<()>,
    thread: JoinHandle<()>,
}

impl ReplayPruner {
    fn start(app: Arc<App>) -> anyhow::Result<Self> {
        let (stop, stopping) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("replay-prune".into())
            .spawn(move || {
                let mut next_prune_ms = 0;
                // Woken by a message or a hang-up: both mean stop.
                while let Err(RecvTimeoutError::Timeout) = stopping.recv_timeout(PRUNE_LOOK_EVERY) {
                    let now_ms = app.clock.now_ms();
                    if now_ms >= next_prune_ms {
                        next_prune_ms = now_ms + PRUNE_EVERY_MS;
                        if let Err(e) = prune_replay(&app, now_ms) {
                            tracing::warn!(error = %e, "pruning replay records failed; will retry");
                        }
                    }
                }
            })?;
        Ok(ReplayPruner { stop, thread })
    }

    fn stop(self) {
        let _ = self.stop.send(());
        if self.thread.join().is_err() {
            tracing::error!("the replay pruning thread panicked");
        }
    }
}

/// Deletes expired replay records, a chunk per transaction, among those signed before the skew
/// window (a request signed earlier is refused by its timestamp alone).
fn prune_replay(app: &App, now_ms: i64) -> anyhow::Result<()> {
    let skew_ms = i64::try_from(app.config.max_skew_secs)
        .unwrap_or(i64::MAX / 1000)
        .saturating_mul(1000);
    let sent_before_ms = now_ms.saturating_sub(skew_ms);
    while app
        .store
        .write(|tx| tx.prune_replay(now_ms, sent_before_ms, PRUNE_CHUNK))?
        == PRUNE_CHUNK
    {}
    Ok(())
}
