//! The retention job (docs/design.md §9): once an hour (by the server's clock), deletes finished
//! tasks with their attempts, and unreferenced events, older than `--retention-days`, and
//! schedule firing records older than that plus [`FIRINGS_MARGIN_MS`] (docs/operations.md,
//! "Retention"): a backfill fires only instants inside the retention, so older records are
//! not needed to fire an instant once.

use crate::app::{App, Signal};
use crate::store::{Store, StoreError, Tx};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

/// Time between two sweeps.
const EVERY_MS: i64 = 60 * 60 * 1000;
/// Rows deleted per transaction, so a large sweep never holds the write lock for long.
const CHUNK: usize = 2000;
const DAY_MS: i64 = 24 * 60 * 60 * 1000;
/// Schedules whose old firing records one transaction deletes.
const FIRINGS_CHUNK: usize = 500;
/// How much longer than the retention firing records are kept: a backfill checks its instants
/// against the retention on its own node's clock, and a day covers any skew between nodes and
/// a backfill that started before the sweep.
const FIRINGS_MARGIN_MS: i64 = DAY_MS;

struct Stop {
    flag: AtomicBool,
    signal: Signal,
}

/// The running retention thread.
pub struct Retention {
    stop: Arc<Stop>,
    handle: Option<JoinHandle<()>>,
}

impl Retention {
    pub fn start(app: Arc<App>) -> Retention {
        let stop = Arc::new(Stop {
            flag: AtomicBool::new(false),
            signal: Signal::default(),
        });
        let handle = {
            let stop = stop.clone();
            std::thread::Builder::new()
                .name("retention".into())
                .spawn(move || run(&app, &stop))
                .expect("spawn the retention thread")
        };
        Retention {
            stop,
            handle: Some(handle),
        }
    }

    pub fn stop(mut self) {
        self.stop.flag.store(true, Ordering::SeqCst);
        self.stop.signal.notify();
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}

fn run(app: &App, stop: &Stop) {
    let mut next_at = app.clock.now_ms();
    while !stop.flag.load(Ordering::SeqCst) {
        let now = app.clock.now_ms();
        if now >= next_at {
            if let Err(e) = sweep(app, app.config.retention_cutoff(now), &stop.flag) {
                tracing::error!(error = %e, "retention: sweep failed; trying again next time");
            }
            next_at = now + EVERY_MS;
        }
        // The clock may be moved (tests), so look again at least every `max_idle`.
        let ms = u64::try_from(next_at.saturating_sub(now)).unwrap_or(0);
        stop.signal
            .wait(std::time::Duration::from_millis(ms).min(app.config.max_idle));
    }
}

/// Deletes everything older than `cutoff_ms`, chunk by chunk; stops early at shutdown.
fn sweep(app: &App, cutoff_ms: i64, stopping: &AtomicBool) -> anyhow::Result<()> {
    let tasks = in_chunks(&*app.store, stopping, |tx| {
        tx.delete_finished_tasks(cutoff_ms, CHUNK)
    })?;
    let events = in_chunks(&*app.store, stopping, |tx| {
        tx.delete_old_events(cutoff_ms, CHUNK)
    })?;
    let firings = firing_records(
        &*app.store,
        cutoff_ms.saturating_sub(FIRINGS_MARGIN_MS),
        stopping,
    )?;
    if tasks + events + firings > 0 {
        tracing::info!(tasks, events, firings, "retention: deleted old records");
    }
    Ok(())
}

/// Deletes the firing records before `cutoff_ms`, [`FIRINGS_CHUNK`] schedules per
/// transaction, walking every schedule once; stops early at shutdown.
fn firing_records(
    store: &dyn Store,
    cutoff_ms: i64,
    stopping: &AtomicBool,
) -> Result<usize, StoreError> {
    let (mut total, mut after) = (0, 0);
    while !stopping.load(Ordering::SeqCst) {
        let (n, last) = store.write(|tx| tx.delete_old_firings(cutoff_ms, after, FIRINGS_CHUNK))?;
        total += n;
        match last {
            Some(last) => after = last,
            None => break,
        }
    }
    Ok(total)
}

/// Runs `delete` (one chunk per transaction) until it deletes less than a chunk.
fn in_chunks(
    store: &dyn Store,
    stopping: &AtomicBool,
    delete: impl Fn(&mut dyn Tx) -> Result<usize, StoreError>,
) -> Result<usize, StoreError> {
    let mut total = 0;
    while !stopping.load(Ordering::SeqCst) {
        let n = store.write(&delete)?;
        total += n;
        if n < CHUNK {
            break;
        }
    }
    Ok(total)
}
