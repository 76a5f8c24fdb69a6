//! `bulk-retry`: `POST /v1/tasks/retry` moving 100,000 failed tasks back to `pending` while a
//! paced fan-out publish load runs, against the same load without it: the call's duration,
//! and publish→delivery latency (whole phase, and of the publishes sent during the call).
//!
//! Two variants, each on a fresh server: the failed tasks' endpoint `enabled` (the retried
//! tasks are then delivered, through the same workers as the load, to the receiver), and
//! `disabled` (they wait, pending; this is the variant that isolates the retry's own writes,
//! but 100,000 pending tasks of a disabled endpoint are also what the dispatcher's claim query
//! has to step over: BENCHMARKS.md).

use crate::load::{Until, drive, expect_ok};
use crate::publish::create_endpoints;
use crate::report::{Report, Stats};
use crate::{Bench, now_us};
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};
use webhookd::client::Client;
use webhookd::clock::{Clock, SystemClock};
use webhookd::store;

/// Endpoints each published event goes to.
const FANOUT: usize = 10;
/// Events per second of the publish load (× `FANOUT` deliveries): well under the rate
/// webhookd sustains on two cores, so latency shows interference rather than saturation.
const DEFAULT_RATE: f64 = 300.0;
/// The retry call starts this long after the load does.
const RETRY_AFTER: Duration = Duration::from_secs(2);

/// Puts one endpoint (`status`) and `n` failed tasks of it in the bench app; returns its id.
/// Its `filter_events` matches none of the load's events, so it gets only the retried tasks.
fn fill(db: &Path, n: u64, url: &str, status: &str) -> anyhow::Result<i64> {
    let pool = store::sqlite::open(db, 1)?;
    let mut conn = pool.get()?;
    let now_ms = SystemClock.now_ms();
    store::sqlite::write_tx(&mut conn, |tx| -> rusqlite::Result<i64> {
        tx.execute(
            "INSERT INTO endpoints (app_id, name, url, method, timeout_ms, filter_events, status, created_at, updated_at)
             VALUES ('bench', 'failed-before', ?1, 'POST', 30000, 'bench.none', ?3, ?2, ?2)",
            rusqlite::params![url, now_ms, status],
        )?;
        let endpoint = tx.last_insert_rowid();
        let mut task = tx.prepare_cached(
            "INSERT INTO tasks (app_id, endpoint_id, task_type, payload, status, run_at, attempts,
                                max_attempts, last_status_code, finished_at, created_at, updated_at)
             VALUES ('bench', ?1, 'manual', '{}', 'failed', ?2, 5, 5, 500, ?3, ?2, ?3)",
        )?;
        for i in 0..n as i64 {
            let at = now_ms - 3_600_000 + i;
            task.execute(rusqlite::params![endpoint, at, at + 10])?;
        }
        Ok(endpoint)
    })
    .map_err(Into::into)
}

/// One paced publish phase; with `retry`, the bulk retry runs beside it.
struct Phase {
    published: u64,
    errors: u64,
    request: Stats,
    expected: u64,
    received: u64,
    /// Publish→delivery over the whole phase.
    latency: Stats,
    /// Publish→delivery of the events published while the retry call ran.
    during: Stats,
    /// The retry call: (wall duration, retried count).
    retry: Option<(Duration, u64)>,
}

fn phase(
    bench: &Bench,
    clients: &[Client],
    retry: Option<(&Client, i64)>,
    events: u64,
    rate: f64,
) -> anyhow::Result<Phase> {
    let run = create_endpoints(&clients[0], &bench.receiver, FANOUT)?;
    let (outcome, call) = std::thread::scope(|scope| {
        let call = retry.map(|(client, endpoint)| {
            scope.spawn(move || {
                std::thread::sleep(RETRY_AFTER);
                let start_us = now_us();
                let started = Instant::now();
                let body = json!({ "endpoint_id": endpoint });
                let reply = expect_ok(client.send("POST", "/v1/tasks/retry", Some(&body)));
                (start_us, now_us(), started.elapsed(), reply)
            })
        });
        let outcome = drive(clients, Until::Count(events), Some(rate), |client, n| {
            let body =
                json!({"event_name": run.event_name, "payload": {"sent_us": now_us(), "seq": n}});
            expect_ok(client.send("POST", "/v1/events", Some(&body))).map(|_| ())
        });
        (
            outcome,
            call.map(|h| h.join().expect("retry thread panicked")),
        )
    });
    let expected = outcome.ok * FANOUT as u64;
    let deliveries = bench.receiver.wait_for(
        run.tag,
        expected as usize,
        bench.settings.stall(),
        Instant::now() + Duration::from_secs(300),
    );
    let latency_where = |keep: &dyn Fn(i64) -> bool| {
        Stats::new(
            deliveries
                .iter()
                .filter_map(|d| {
                    d.sent_us
                        .filter(|s| keep(*s))
                        .map(|s| (d.at_us - s).max(0) as u64)
                })
                .collect(),
        )
    };
    let (during, retry) = match call {
        Some((start_us, end_us, took, reply)) => {
            let data = reply.map_err(|e| anyhow::anyhow!("POST /v1/tasks/retry: {e}"))?;
            let count = data["count"].as_u64().unwrap_or(0);
            let during = latency_where(&|s| (start_us..=end_us).contains(&s));
            (during, Some((took, count)))
        }
        None => (Stats::default(), None),
    };
    Ok(Phase {
        published: outcome.ok,
        errors: outcome.errors,
        request: outcome.latency,
        expected,
        received: deliveries.len() as u64,
        latency: latency_where(&|_| true),
        during,
        retry,
    })
}

pub fn scenario(bench: &mut Bench) -> anyhow::Result<()> {
    if bench.settings.remote.is_some() {
        anyhow::bail!("bulk-retry fills its own database: it cannot run against --url");
    }
    if let Some(why) = bench.settings.cannot_prefill() {
        let mut r = crate::report::Report::new("bulk-retry");
        r.note(why);
        bench.emit(r);
        return Ok(());
    }
    for status in ["enabled", "disabled"] {
        variant(bench, status)?;
    }
    Ok(())
}

/// One run: the failed tasks' endpoint is `status`.
fn variant(bench: &mut Bench, status: &str) -> anyhow::Result<()> {
    let n = bench.settings.bulk_retry_tasks();
    let rate = bench.settings.rate.unwrap_or(DEFAULT_RATE);
    let secs = if bench.settings.quick { 3.0 } else { 10.0 };
    let events = (rate * secs) as u64;
    let (retried_tag, url) = bench.receiver.new_run();
    let mut endpoint = 0;
    bench.progress(&format!(
        "bulk-retry: inserting {n} failed tasks of an {status} endpoint"
    ));
    let target = bench.target(|db| {
        endpoint = fill(db, n, &url, status)?;
        Ok(())
    })?;
    let mut clients = target.clients(bench.settings.publish_clients() + 1)?;
    let retry_client = clients.pop().expect("one more client than load threads");

    bench.progress(&format!(
        "bulk-retry: fan-out {FANOUT} at {rate:.0} events/s for {secs:.0} s, without the retry"
    ));
    let without = phase(bench, &clients, None, events, rate)?;
    bench.progress("bulk-retry: the same load, retrying the failed tasks after 2 s");
    let with = phase(
        bench,
        &clients,
        Some((&retry_client, endpoint)),
        events,
        rate,
    )?;
    let retried_delivered = if status == "enabled" {
        let arrived = bench.receiver.wait_for(
            retried_tag,
            n as usize,
            bench.settings.stall(),
            Instant::now() + Duration::from_secs(600),
        );
        arrived.len() as i64
    } else {
        0
    };
    // A delivery reaches the receiver before its result is recorded: wait (while the count
    // still moves) for the last results rather than reading the statuses once.
    let pending: i64 = {
        let pool = store::sqlite::open(target.db.as_deref().expect("in-process target"), 1)?;
        let conn = pool.get()?;
        let count = || -> anyhow::Result<i64> {
            Ok(conn.query_row(
                "SELECT count(*) FROM tasks WHERE endpoint_id = ?1 AND attempts < 2
                 AND (status = 'pending' AND attempts = 0 OR status = 'success')",
                [endpoint],
                |r| r.get(0),
            )?)
        };
        let (mut seen, mut moved) = (count()?, Instant::now());
        while seen < n as i64 && moved.elapsed() < bench.settings.stall() {
            std::thread::sleep(Duration::from_millis(50));
            let now = count()?;
            if now != seen {
                (seen, moved) = (now, Instant::now());
            }
        }
        seen
    };
    target.stop();

    let mut r = Report::new("bulk-retry");
    r.param("endpoint", status)
        .param("failed_tasks", n)
        .param("fanout", FANOUT)
        .param("rate_events_per_s", rate)
        .param("events", events)
        .param("clients", clients.len());
    let (took, count) = with.retry.unwrap_or_default();
    r.add("retried", count as f64, "tasks")
        .add("retried_pending_or_delivered", pending as f64, "tasks")
        .add("retried_delivered", retried_delivered as f64, "tasks")
        .add("retry_call_s", took.as_secs_f64(), "s")
        .add(
            "retried_per_s",
            count as f64 / took.as_secs_f64().max(1e-9),
            "tasks/s",
        );
    for (name, p) in [("without", &without), ("with", &with)] {
        r.add(&format!("{name}_published"), p.published as f64, "events")
            .add(&format!("{name}_publish_errors"), p.errors as f64, "")
            .add(
                &format!("{name}_deliveries_expected"),
                p.expected as f64,
                "",
            )
            .add(
                &format!("{name}_deliveries_received"),
                p.received as f64,
                "",
            );
        r.add_latency(&format!("{name}_publish_request"), &p.request, None);
        r.add_latency(&format!("{name}_latency"), &p.latency, None);
    }
    r.add_latency("during_retry_latency", &with.during, None);
    r.add("during_retry_deliveries", with.during.len() as f64, "");
    if count != n || pending != n as i64 {
        r.note(format!(
            "expected {n} retried and then pending or delivered, got {count} retried, {pending}"
        ));
    }
    for p in [&without, &with] {
        if p.received < p.expected || p.errors > 0 {
            r.note(format!(
                "{} of {} deliveries, {} publish errors",
                p.received, p.expected, p.errors
            ));
        }
    }
    bench.emit(r);
    Ok(())
}
