//! `scale`: the `api` and `publish` (fan-out 1) scenarios again on a database that already
//! holds a million finished tasks (1% failed, each with one attempt row), inserted directly in
//! batched transactions, compared with the same scenarios on a small database: `publish` on an
//! empty one, `api` on one filled alike with [`ONE_PAGE`] tasks, whose failed tasks make
//! exactly one page, so that `GET /v1/tasks?status=failed` answers 20 tasks on both and the
//! ratio measures size, not page size (an empty database answers a page of none).

use crate::report::{Report, Target as Goal};
use crate::{Bench, api, publish};
use serde_json::json;
use std::path::Path;
use std::time::Instant;
use webhookd::clock::{Clock, SystemClock};
use webhookd::store;

/// Rows per fill transaction.
const BATCH: u64 = 10_000;
/// Every this-many-th finished task failed; the rest succeeded.
const FAILED_EVERY: u64 = 100;
/// The tasks of the small database `api` is compared with: their failed tasks fill exactly one
/// page of the list's default size (20).
pub const ONE_PAGE: u64 = 20 * FAILED_EVERY;

/// Inserts `n` finished tasks of the bench app spread over the last seven days (inside the
/// retention window, so the server keeps them), with one attempt each; returns rows/s.
fn fill(db: &Path, n: u64) -> anyhow::Result<f64> {
    let pool = store::sqlite::open(db, 1)?;
    let mut conn = pool.get()?;
    let now_ms = SystemClock.now_ms();
    let week_ms = 7 * 24 * 3600 * 1000;
    let payload = json!({"order": 12345, "customer": "c_0001", "amount": 4200}).to_string();
    let start = Instant::now();
    let mut done = 0;
    while done < n {
        let batch = BATCH.min(n - done);
        store::sqlite::write_tx(&mut conn, |tx| -> rusqlite::Result<()> {
            let mut task = tx.prepare_cached(
                "INSERT INTO tasks (app_id, event_id, endpoint_id, task_type, payload, status, run_at,
                                    attempts, max_attempts, last_status_code, finished_at, created_at, updated_at)
                 VALUES ('bench', ?1, 1, 'event', ?2, ?3, ?4, ?5, 5, ?6, ?7, ?4, ?7)",
            )?;
            let mut attempt = tx.prepare_cached(
                "INSERT INTO attempts (task_id, attempt, started_at, duration_ms, status_code, error, response_body)
                 VALUES (?1, ?2, ?3, 3, ?4, NULL, '')",
            )?;
            for i in done..done + batch {
                let created = now_ms - week_ms + (i as i64 * week_ms) / n as i64;
                let failed = i % FAILED_EVERY == 0;
                let (status, attempts, code) = if failed {
                    ("failed", 5, 500)
                } else {
                    ("success", 1, 200)
                };
                task.execute(rusqlite::params![
                    i as i64 + 1,
                    payload,
                    status,
                    created,
                    attempts,
                    code,
                    created + 5
                ])?;
                attempt.execute(rusqlite::params![
                    tx.last_insert_rowid(),
                    attempts,
                    created + 1,
                    code
                ])?;
            }
            Ok(())
        })?;
        done += batch;
    }
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

/// The file sizes of the database and its WAL.
fn db_bytes(db: &Path) -> u64 {
    let wal = db.with_extension("sqlite-wal");
    [db, wal.as_path()]
        .iter()
        .filter_map(|p| std::fs::metadata(p).ok())
        .map(|m| m.len())
        .sum()
}

/// `loaded / small` for a figure both reports have.
fn ratio(loaded: &Report, small: &Report, key: &str) -> Option<f64> {
    Some(loaded.get(key)? / small.get(key)?)
}

pub fn scenario(bench: &mut Bench) -> anyhow::Result<()> {
    if bench.settings.remote.is_some() {
        anyhow::bail!("scale fills its own database: it cannot run against --url");
    }
    if let Some(why) = bench.settings.cannot_prefill() {
        let mut r = crate::report::Report::new("scale");
        r.note(why);
        bench.emit(r);
        return Ok(());
    }
    let n = bench.settings.scale_tasks();
    // The small database's api figures, measured now, and the empty database's publish
    // figures of this run, or measured now.
    bench.progress(&format!(
        "scale: api on {ONE_PAGE} finished tasks (one page failed)"
    ));
    let target = bench.target(|db| fill(db, ONE_PAGE).map(|_| ()))?;
    let small_api = api::measure(bench, &target, ONE_PAGE)?;
    target.stop();
    bench.emit(small_api.clone());
    let found = bench
        .reports
        .iter()
        .find(|r| {
            r.scenario == "publish"
                && r.param_u64("db_tasks") == Some(0)
                && r.param_u64("fanout") == Some(1)
        })
        .cloned();
    let empty_publish = match found {
        Some(r) => r,
        None => {
            let target = bench.target(|_| Ok(()))?;
            let r = publish::measure(bench, &target, 1, 0)?;
            target.stop();
            bench.emit(r.clone());
            r
        }
    };

    bench.progress(&format!("scale: inserting {n} finished tasks"));
    let mut fill_rate = 0.0;
    let mut size = 0;
    let target = bench.target(|db| {
        fill_rate = fill(db, n)?;
        size = db_bytes(db);
        Ok(())
    })?;
    let loaded_api = api::measure(bench, &target, n)?;
    let loaded_publish = publish::measure(bench, &target, 1, n)?;
    target.stop();

    let mut r = Report::new("scale");
    r.param("db_tasks", n);
    r.add("fill_rows_per_s", fill_rate, "rows/s")
        .add("db_mb", size as f64 / 1e6, "MB");
    let pairs = [
        (
            &loaded_api,
            &small_api,
            "get_endpoint_per_s",
            Goal::AtLeast(0.8),
        ),
        (
            &loaded_api,
            &small_api,
            "list_failed_tasks_per_s",
            Goal::AtLeast(0.8),
        ),
        (
            &loaded_api,
            &small_api,
            "get_endpoint_p99_ms",
            Goal::AtMost(1.2),
        ),
        (
            &loaded_api,
            &small_api,
            "list_failed_tasks_p99_ms",
            Goal::AtMost(1.2),
        ),
    ];
    for (loaded, small, key, goal) in pairs {
        if let Some(x) = ratio(loaded, small, key) {
            r.add_target(&format!("{key}_vs_one_page"), x, "x", goal);
        }
    }
    let pairs = [
        (&loaded_publish, "published_per_s", Goal::AtLeast(0.8)),
        (&loaded_publish, "delivered_per_s", Goal::AtLeast(0.8)),
        (&loaded_publish, "half_latency_p99_ms", Goal::AtMost(1.2)),
    ];
    for (loaded, key, goal) in pairs {
        if let Some(x) = ratio(loaded, &empty_publish, key) {
            r.add_target(&format!("{key}_vs_empty"), x, "x", goal);
        }
    }
    bench.emit(loaded_api);
    bench.emit(loaded_publish);
    bench.emit(r);
    Ok(())
}
