//! `scale`: the `api` and `publish` (fan-out 1) scenarios again on a database that already
//! holds a million finished tasks (1% failed, each with one attempt row), inserted directly in
//! batched transactions, compared with the same scenarios on an empty database.

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

/// `loaded / empty` for a figure both reports have.
fn ratio(loaded: &Report, empty: &Report, key: &str) -> Option<f64> {
    Some(loaded.get(key)? / empty.get(key)?)
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
    // The empty-database figures of this run, or measured now.
    let mut empty = Vec::new();
    for (scenario, fanout) in [("api", None), ("publish", Some(1))] {
        let found = bench
            .reports
            .iter()
            .find(|r| {
                r.scenario == scenario
                    && r.param_u64("db_tasks") == Some(0)
                    && r.param_u64("fanout") == fanout
            })
            .cloned();
        let report = match found {
            Some(r) => r,
            None => {
                let target = bench.target(|_| Ok(()))?;
                let r = match fanout {
                    None => api::measure(bench, &target, 0)?,
                    Some(f) => publish::measure(bench, &target, f as usize, 0)?,
                };
                target.stop();
                bench.emit(r.clone());
                r
            }
        };
        empty.push(report);
    }

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
            &empty[0],
            "get_endpoint_per_s",
            Goal::AtLeast(0.8),
        ),
        (
            &loaded_api,
            &empty[0],
            "list_failed_tasks_per_s",
            Goal::AtLeast(0.8),
        ),
        (
            &loaded_api,
            &empty[0],
            "get_endpoint_p99_ms",
            Goal::AtMost(1.2),
        ),
        (
            &loaded_api,
            &empty[0],
            "list_failed_tasks_p99_ms",
            Goal::AtMost(1.2),
        ),
        (
            &loaded_publish,
            &empty[1],
            "published_per_s",
            Goal::AtLeast(0.8),
        ),
        (
            &loaded_publish,
            &empty[1],
            "delivered_per_s",
            Goal::AtLeast(0.8),
        ),
        (
            &loaded_publish,
            &empty[1],
            "half_latency_p99_ms",
            Goal::AtMost(1.2),
        ),
    ];
    for (loaded, empty, key, goal) in pairs {
        if let Some(x) = ratio(loaded, empty, key) {
            r.add_target(&format!("{key}_vs_empty"), x, "x", goal);
        }
    }
    bench.emit(loaded_api);
    bench.emit(loaded_publish);
    bench.emit(r);
    Ok(())
}
