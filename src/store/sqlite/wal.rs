//! The SQLite store's upkeep: the `wal-checkpoint` thread it starts when opened for serving
//! (`store::open_with`). Pool connections run with `wal_autocheckpoint=0`, so no API request
//! or delivery round pays for a checkpoint; this thread copies committed WAL pages back into
//! the database file and keeps the `-wal` file under `--wal-limit-mb` (BENCHMARKS.md).

use super::store::{file_state, lock_writer};
use super::{Conn, Pool};
use rusqlite::Connection;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// How often committed WAL pages are copied back into the database file.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(250);
/// How often the size of the `-wal` file is compared with its limit: a few MB of WAL can be
/// written in one checkpoint interval under load, and this is what the limit can overshoot by.
const WAL_SIZE_EVERY: Duration = Duration::from_millis(50);

/// What a checkpoint reports: frames written to the WAL since it was last rewound, how many of
/// them are copied back into the database file, and whether it had to stop short (a reader).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct WalState {
    busy: bool,
    written: u64,
    copied: u64,
}

fn wal_checkpoint(conn: &Connection, mode: &str) -> rusqlite::Result<WalState> {
    conn.query_row(&format!("PRAGMA wal_checkpoint({mode})"), [], |r| {
        let frames = |i| r.get::<_, i64>(i).map(|n| u64::try_from(n).unwrap_or(0));
        Ok(WalState {
            busy: r.get::<_, i64>(0)? != 0,
            written: frames(1)?,
            copied: frames(2)?,
        })
    })
}

/// Copies committed WAL pages back into the database file (PASSIVE: never waits for readers
/// or writers). The `wal-checkpoint` thread calls it a few times a second.
fn checkpoint(conn: &Connection) -> rusqlite::Result<WalState> {
    wal_checkpoint(conn, "PASSIVE")
}

/// The `-wal` file beside a database file.
pub fn wal_path(db: &Path) -> std::path::PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push("-wal");
    name.into()
}

/// Copies the last WAL pages back and waits until no reader uses the WAL any more, holding
/// the in-process writer lock meanwhile (writers wait, readers go on), so that the next writer
/// rewinds the WAL to its start (`RESTART`). PASSIVE checkpoints alone cannot bound the WAL
/// under sustained load: SQLite only rewinds it when a writer starts while every frame is
/// copied back and no reader still uses it, which never happens while requests keep coming
/// (BENCHMARKS.md). `TRUNCATE`, which also cuts the file to zero, held the writers three to
/// four times longer (the file is then grown again page by page); `journal_size_limit` cuts
/// it back to the limit instead. Waits at most `wait` for readers on older snapshots, looking
/// every 100 µs: SQLite's own busy handler sleeps 1, 2, 5 … 100 ms, with every writer queued.
/// `busy` in the result: a reader held on and the WAL will not be rewound. `mode`: `RESTART`,
/// or on a small disk `TRUNCATE` ([`rewind_point`]), which gives the file's space back to the
/// file system.
fn checkpoint_rewind(conn: &Connection, wait: Duration, mode: &str) -> rusqlite::Result<WalState> {
    let state = file_state(conn);
    let _queued = lock_writer(&state);
    READERS_DEADLINE.set(Some(std::time::Instant::now() + wait));
    conn.busy_handler(Some(wait_for_readers))?;
    let state = wal_checkpoint(conn, mode);
    READERS_DEADLINE.set(None);
    conn.busy_timeout(super::BUSY_TIMEOUT)?;
    state
}

thread_local! {
    /// Until when [`wait_for_readers`] keeps waiting (it is a plain `fn`: no captured state).
    static READERS_DEADLINE: std::cell::Cell<Option<std::time::Instant>> =
        const { std::cell::Cell::new(None) };
}

/// The busy handler of [`checkpoint_rewind`]: webhookd's readers hold their snapshot for
/// well under a millisecond, so look again soon rather than sleep with the writers queued.
fn wait_for_readers(_tries: i32) -> bool {
    match READERS_DEADLINE.get() {
        Some(deadline) if std::time::Instant::now() < deadline => {
            std::thread::sleep(Duration::from_micros(100));
            true
        }
        _ => false,
    }
}

/// The WAL is rewound once this share of `--wal-limit-mb` is written to it (1/2): the file
/// then stays under the limit with room for what is written while the checkpoint runs.
const REWIND_AT_DIVISOR: u64 = 2;
/// PASSIVE passes run before the writers are held, each copying back what was written during
/// the one before, until fewer than [`SMALL_REST`] frames came in meanwhile.
const COPY_AHEAD_PASSES: u32 = 3;
const SMALL_REST: u64 = 256;
/// How far ahead the checkpointer looks: the WAL is watched at every tick (not only at the
/// PASSIVE ones) while it could reach its rewind point within this time at its current pace.
const LOOK_AHEAD: Duration = Duration::from_millis(500);

/// Where the WAL stood at the last PASSIVE checkpoint, and whether it is near its rewind point.
#[derive(Debug)]
struct WalSeen {
    written: u64,
    at: std::time::Instant,
    near: bool,
}

impl Default for WalSeen {
    fn default() -> Self {
        WalSeen {
            written: 0,
            at: std::time::Instant::now(),
            near: false,
        }
    }
}

impl WalSeen {
    /// Records `written` frames now. Near: at the pace since the last look, the WAL reaches
    /// `rewind_at` bytes within [`LOOK_AHEAD`]; after a rewind the pace is unknown, so near.
    fn update(&mut self, written: u64, bytes: impl Fn(u64) -> u64, rewind_at: u64) {
        let now = std::time::Instant::now();
        let elapsed = now.duration_since(self.at).as_secs_f64().max(1e-3);
        let ahead = match written.checked_sub(self.written) {
            Some(grew) => bytes(grew) as f64 * LOOK_AHEAD.as_secs_f64() / elapsed,
            None => rewind_at as f64,
        };
        self.near = bytes(written) as f64 + ahead >= rewind_at as f64;
        self.written = written;
        self.at = now;
    }
}

/// The smallest rewind point on a small or nearly full disk.
const MIN_REWIND_BYTES: u64 = 1024 * 1024;

/// Where the WAL is rewound (bytes written to it), and whether each rewind also cuts the file
/// to zero (`TRUNCATE`), given `--wal-limit-mb`, the free space of the disk and the WAL's
/// size. With room to spare, half the limit and a `RESTART` that keeps the file for reuse. On
/// a small or nearly full disk — less than four rewind points of room, counting the WAL's own
/// space — a quarter of that room (at least [`MIN_REWIND_BYTES`]) and `TRUNCATE`: space the
/// WAL holds is space the database file cannot grow into, and with a fixed rewind point writes
/// were refused on a small disk with 12.5 MB of WAL beside a 1.8 MB database
/// (docs/operations.md, "Storage and durability").
fn rewind_point(wal_limit_bytes: u64, free_bytes: Option<u64>, wal_bytes: u64) -> (u64, bool) {
    let roomy = wal_limit_bytes / REWIND_AT_DIVISOR;
    let Some(free) = free_bytes else {
        return (roomy, false);
    };
    let quarter = free.saturating_add(wal_bytes) / 4;
    if quarter >= roomy {
        (roomy, false)
    } else {
        (quarter.max(MIN_REWIND_BYTES).min(roomy), true)
    }
}

/// How long writes may only trickle ([`QUIET_FRAMES`] WAL frames at most) before the
/// connections' caches are given back.
const QUIET_FRAMES: u64 = 100;
/// The quiet time itself.
const QUIET_BEFORE_RELEASE: Duration = Duration::from_secs(10);

/// The WAL as last seen by [`WalCheckpoints::release_memory_when_idle`].
#[derive(Debug)]
struct Quiet {
    written: u64,
    since: std::time::Instant,
    released: bool,
}

impl Default for Quiet {
    fn default() -> Self {
        Quiet {
            written: 0,
            since: std::time::Instant::now(),
            released: false,
        }
    }
}

/// What one WAL frame takes beyond its page: its header.
const FRAME_HEADER_BYTES: u64 = 24;

/// What the checkpoint thread works on: the database, its WAL limit, and what it saw last.
struct WalCheckpoints {
    pool: Pool,
    path: PathBuf,
    /// `--wal-limit-mb` in bytes.
    wal_limit_bytes: u64,
    /// Longest a rewinding checkpoint waits for readers of an older snapshot.
    checkpoint_wait: Duration,
    /// The last PASSIVE checkpoint's look at the WAL.
    wal_seen: Mutex<WalSeen>,
    /// `written` of the last rewinding checkpoint.
    rewound_at: AtomicU64,
    /// Whether the last attempt to rewind the WAL found a reader in the way (one warning each
    /// time).
    held_back: AtomicBool,
    /// When writes last came, for [`WalCheckpoints::release_memory_when_idle`].
    quiet: Mutex<Quiet>,
}

impl WalCheckpoints {
    /// A PASSIVE checkpoint when `passive`, and on the ticks between while the WAL nears the
    /// point where it is rewound (`WalSeen`); past that point (half of `wal_limit_bytes` written
    /// since the last rewind), PASSIVE passes copy back what they can while writers go on, then
    /// [`checkpoint_rewind`] holds the writers for the last frames and the rewind. The file
    /// thus stays under the limit plus what is written during one check and checkpoint, and
    /// each stop of the writers is short (BENCHMARKS.md).
    fn tick(&self, passive: bool) -> anyhow::Result<()> {
        use Ordering::Relaxed;
        let near = self.wal_seen.lock().unwrap_or_else(|e| e.into_inner()).near;
        // What is written since the last rewind is never more than the file holds.
        let size = std::fs::metadata(wal_path(&self.path)).map_or(0, |m| m.len());
        let free = crate::health::free_bytes(&self.path);
        let (rewind_at, truncate) = rewind_point(self.wal_limit_bytes, free, size);
        if !passive && (!near || size <= rewind_at) {
            return Ok(());
        }
        let conn = self.pool.get()?;
        let page: u32 = conn.query_row("PRAGMA page_size", [], |r| r.get(0))?;
        let frame = u64::from(page) + FRAME_HEADER_BYTES;
        let bytes = |frames: u64| frames.saturating_mul(frame);
        let mut state = checkpoint(&conn)?;
        drop(conn);
        self.release_memory_when_idle(state.written);
        let conn = self.pool.get()?;
        self.wal_seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .update(state.written, bytes, rewind_at);
        if bytes(state.written) <= rewind_at
            || (state.copied == state.written && self.rewound_at.load(Relaxed) == state.written)
        {
            // Below the mark, or rewound already and no writer has come since.
            return Ok(());
        }
        for _ in 0..COPY_AHEAD_PASSES {
            let next = checkpoint(&conn)?;
            let came = next.written.saturating_sub(state.written);
            state = next;
            if came < SMALL_REST {
                break;
            }
        }
        // A reader on a snapshot this old would keep the writers waiting for it: leave them be
        // and look again at the next tick.
        let behind = bytes(state.written.saturating_sub(state.copied));
        let done = if behind > rewind_at / 4 {
            None
        } else {
            let mode = if truncate { "TRUNCATE" } else { "RESTART" };
            Some(checkpoint_rewind(&conn, self.checkpoint_wait, mode)?).filter(|done| !done.busy)
        };
        match done {
            Some(done) => {
                self.rewound_at.store(done.written, Relaxed);
                self.held_back.store(false, Relaxed);
                tracing::debug!(
                    bytes = bytes(done.written),
                    truncated = truncate,
                    "WAL copied back; the next writer rewinds it"
                );
            }
            None if !self.held_back.swap(true, Relaxed) => tracing::warn!(
                bytes = bytes(state.written),
                "the WAL is past its rewind point and a reader holds an old snapshot; it is \
                 rewound once the reader ends"
            ),
            None => {}
        }
        Ok(())
    }

    /// After a load, gives memory back once writes have only trickled for
    /// [`QUIET_BEFORE_RELEASE`] (`written`: the WAL's frame count at this PASSIVE checkpoint):
    /// each idle connection drops its page cache (`PRAGMA shrink_memory`, up to `cache_size`
    /// each, the pool holds up to `super::connections_cap`) and its cached statements, then glibc's allocator
    /// returns the freed pages to the system (`malloc_trim`; its per-thread arenas keep them
    /// otherwise). Without it, RSS stayed at 32 MiB after a publish run (13 MiB at start);
    /// docs/operations.md, "Memory".
    fn release_memory_when_idle(&self, written: u64) {
        {
            let mut quiet = self.quiet.lock().unwrap_or_else(|e| e.into_inner());
            // A health probe or a trickle of writes is quiet; a rewound WAL is not.
            let came = written.checked_sub(quiet.written).unwrap_or(u64::MAX);
            if came > QUIET_FRAMES {
                *quiet = Quiet {
                    written,
                    ..Quiet::default()
                };
                return;
            }
            if quiet.released || quiet.since.elapsed() < QUIET_BEFORE_RELEASE {
                return;
            }
            quiet.released = true;
        }
        // Every idle connection at once (the pool hands the last returned one out first).
        let idle: Vec<Conn> = std::iter::from_fn(|| self.pool.try_get()).collect();
        for conn in &idle {
            conn.flush_prepared_statement_cache();
            if let Err(e) = conn.execute_batch("PRAGMA shrink_memory") {
                tracing::debug!(error = %e, "shrink_memory failed");
            }
        }
        let connections = idle.len();
        drop(idle);
        trim_allocator();
        tracing::debug!(connections, "idle: database caches released");
    }
}

/// How often the checkpoint thread hands the allocator's free pages back ([`trim_allocator`]).
const TRIM_EVERY: Duration = Duration::from_secs(1);

/// Gives the pages glibc's allocator holds free back to the system (`malloc_trim`). Under
/// load every thread that touches the database frees page-cache pages and statements in its
/// own arena (up to 8 per core), and glibc keeps what it freed in the middle of an arena: in
/// a publish run the free part grew from 1.5 to 9 MiB of a 24 MiB heap, most of the resident
/// set's growth after warm-up. A trim each second keeps it near what is in use; it costs a
/// walk of the arenas and, later, a page fault per 4 KiB page taken again (BENCHMARKS.md,
/// "Peak RSS"). The static musl build's allocator returns free pages by itself.
fn trim_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks and trims glibc's own heaps; it takes no pointer.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The `wal-checkpoint` thread: a look at the WAL every [`WAL_SIZE_EVERY`], a PASSIVE
/// checkpoint every [`CHECKPOINT_EVERY`]. Stopped (and waited for) when dropped, with the store.
pub(super) struct Checkpointer {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Checkpointer {
    /// Starts the thread on its own handle of `pool`.
    pub(super) fn start(
        pool: Pool,
        path: &Path,
        wal_limit_bytes: u64,
        checkpoint_wait: Duration,
    ) -> anyhow::Result<Checkpointer> {
        let wal = WalCheckpoints {
            pool,
            path: path.to_path_buf(),
            wal_limit_bytes,
            checkpoint_wait,
            wal_seen: Mutex::new(WalSeen::default()),
            rewound_at: AtomicU64::new(0),
            held_back: AtomicBool::new(false),
            quiet: Mutex::default(),
        };
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::Builder::new()
            .name("wal-checkpoint".into())
            .spawn(move || {
                let mut next_checkpoint = std::time::Instant::now();
                let mut next_trim = next_checkpoint + TRIM_EVERY;
                while !stopping.load(Ordering::SeqCst) {
                    std::thread::sleep(WAL_SIZE_EVERY);
                    let passive = std::time::Instant::now() >= next_checkpoint;
                    if passive {
                        next_checkpoint += CHECKPOINT_EVERY;
                    }
                    if let Err(e) = wal.tick(passive) {
                        tracing::warn!(error = %e, "WAL checkpoint failed; will retry");
                    }
                    if std::time::Instant::now() >= next_trim {
                        next_trim += TRIM_EVERY;
                        trim_allocator();
                    }
                }
            })?;
        Ok(Checkpointer {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::error!("the checkpoint thread panicked");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wal_rewinds_sooner_and_gives_its_space_back_on_a_small_disk() {
        const MB: u64 = 1024 * 1024;
        let limit = 64 * MB;
        // Room to spare, or free space unknown: half the limit, the file kept for reuse.
        assert_eq!(rewind_point(limit, Some(10_000 * MB), 0), (32 * MB, false));
        assert_eq!(rewind_point(limit, Some(128 * MB), 0), (32 * MB, false));
        assert_eq!(rewind_point(limit, None, 0), (32 * MB, false));
        // A 16 MB disk: a quarter of the room the WAL and the free space make, truncated.
        assert_eq!(rewind_point(limit, Some(12 * MB), 4 * MB), (4 * MB, true));
        assert_eq!(rewind_point(limit, Some(100 * MB), 0), (25 * MB, true));
        // Nearly full: never below 1 MiB; a small --wal-limit-mb still bounds it.
        assert_eq!(rewind_point(limit, Some(MB / 2), 0), (MB, true));
        assert_eq!(rewind_point(2 * MB, Some(MB), 0), (MB, true));
    }
}
