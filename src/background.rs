//! The background loops of a running server — the scheduler, the delivery pool and the WAL
//! checkpointer — started and stopped together.

use crate::app::App;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// How often committed WAL pages are copied back into the database file.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(250);

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

/// Runs the WAL checkpoint on its own thread, so that no API request or delivery round pays
/// for it (pool connections run with `wal_autocheckpoint=0`).
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
                while !stopping.load(Ordering::SeqCst) {
                    std::thread::sleep(CHECKPOINT_EVERY);
                    let done = app.pool.get().map_err(|e| e.to_string()).and_then(|conn| {
                        crate::store::checkpoint(&conn).map_err(|e| e.to_string())
                    });
                    if let Err(e) = done {
                        tracing::warn!(error = %e, "WAL checkpoint failed; will retry");
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
