//! `baseline`: the limits webhookd is measured against, on the same machine in the same run —
//! the receiver driven directly by the delivery pool's client pattern (bare deliveries/s, no
//! webhookd), bare GETs from the API clients' pattern, and raw SQLite inserts of a task row.

use crate::load::{Until, drive};
use crate::report::{Report, Stats};
use crate::{Bench, now_us};
use serde_json::json;
use std::collections::HashSet;
use std::time::{Duration, Instant};
use webhookd::clock::{Clock, SystemClock};
use webhookd::store::{self, TaskQueries, tasks::NewTask};

/// An HTTP agent like the ones webhookd's delivery workers and the signing client use:
/// keep-alive, no redirects, statuses as values.
fn agent(idle_per_host: usize) -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .timeout_global(Some(Duration::from_secs(30)))
        .max_idle_connections_per_host(idle_per_host)
        .build()
        .into()
}

fn bare_deliveries(bench: &Bench, r: &mut Report) {
    let s = &bench.settings;
    let workers = s
        .workers
        .unwrap_or(webhookd::config::Config::new("").workers);
    let count = s.publish_events(1);
    let (tag, url) = bench.receiver.new_run();
    bench.progress(&format!(
        "baseline: {count} bare deliveries from {workers} threads sharing one agent"
    ));
    let shared = agent(workers);
    let threads = vec![shared; workers];
    let outcome = drive(&threads, Until::Count(count), None, |agent, n| {
        let body = json!({"sent_us": now_us(), "seq": n}).to_string();
        match agent
            .post(&url)
            .header("Content-Type", "application/json")
            .header("X-Service-Task-Id", n.to_string())
            .send(body.as_bytes())
        {
            Ok(reply) if reply.status() == 200 => Ok(()),
            Ok(reply) => Err(format!("HTTP {}", reply.status())),
            Err(e) => Err(e.to_string()),
        }
    });
    let deliveries = bench.receiver.wait_for(
        tag,
        outcome.ok as usize,
        s.stall(),
        Instant::now() + Duration::from_secs(60),
    );
    let unique: HashSet<i64> = deliveries.iter().filter_map(|d| d.task_id).collect();
    let last_us = deliveries.iter().map(|d| d.at_us).max().unwrap_or(0);
    let span_s = ((last_us - outcome.start_us) as f64 / 1e6).max(1e-9);
    r.param("workers", workers);
    r.add("bare_sent", outcome.ok as f64, "")
        .add("bare_received", unique.len() as f64, "")
        .add(
            "bare_deliveries_per_s",
            unique.len() as f64 / span_s,
            "del/s",
        );
    let latency = Stats::new(
        deliveries
            .iter()
            .filter_map(|d| d.sent_us.map(|sent| (d.at_us - sent).max(0) as u64))
            .collect(),
    );
    r.add_latency("bare_latency", &latency, None);
    if let Some(e) = outcome.first_error {
        r.note(format!("bare delivery error: {e}"));
    }
}

fn bare_gets(bench: &Bench, r: &mut Report) {
    let s = &bench.settings;
    let clients = s.api_clients();
    let duration = s.api_duration();
    let (_, url) = bench.receiver.new_run();
    bench.progress(&format!(
        "baseline: bare GETs from {clients} clients for {duration:?}"
    ));
    let agents: Vec<ureq::Agent> = (0..clients).map(|_| agent(64)).collect();
    let outcome = drive(
        &agents,
        Until::Elapsed(duration),
        None,
        |agent, _| match agent.get(&url).call() {
            Ok(reply) if reply.status() == 200 => Ok(()),
            Ok(reply) => Err(format!("HTTP {}", reply.status())),
            Err(e) => Err(e.to_string()),
        },
    );
    r.param("api_clients", clients);
    r.add("bare_get_per_s", outcome.rate(), "req/s");
    r.add_latency("bare_get", &outcome.latency, None);
}

/// Inserts pending task rows with webhookd's own statement and settings, `batch` per
/// transaction, for `duration`; returns (rows/s, transactions/s).
pub fn sqlite_inserts(batch: usize, duration: Duration) -> anyhow::Result<(f64, f64)> {
    let dir = tempfile::tempdir()?;
    let pool = store::sqlite::open(&dir.path().join("inserts.sqlite"), 1)?;
    let mut conn = pool.get()?;
    let payload = json!({"sent_us": now_us(), "seq": 123_456}).to_string();
    let start = Instant::now();
    let mut transactions = 0u64;
    while start.elapsed() < duration {
        let now_ms = SystemClock.now_ms();
        store::sqlite::write_tx(&mut conn, |tx| -> Result<(), store::StoreError> {
            for _ in 0..batch {
                store::sqlite::SqliteTx(tx).insert_task(&NewTask {
                    app_id: "bench",
                    schedule_id: None,
                    event_id: Some(1),
                    endpoint_id: 1,
                    task_type: store::tasks::TaskKind::Event,
                    payload: &payload,
                    run_at: now_ms,
                    max_attempts: 5,
                    now_ms,
                })?;
            }
            Ok(())
        })?;
        transactions += 1;
    }
    let secs = start.elapsed().as_secs_f64();
    Ok((
        (transactions * batch as u64) as f64 / secs,
        transactions as f64 / secs,
    ))
}

/// The `baseline` scenario.
pub fn scenario(bench: &mut Bench) -> anyhow::Result<()> {
    let mut r = Report::new("baseline");
    bare_deliveries(bench, &mut r);
    bare_gets(bench, &mut r);
    let duration = if bench.settings.quick {
        Duration::from_millis(200)
    } else {
        Duration::from_secs(2)
    };
    for batch in [1, 10, 100] {
        bench.progress(&format!(
            "baseline: SQLite task inserts, {batch} per transaction"
        ));
        let (rows, txs) = sqlite_inserts(batch, duration)?;
        r.add(&format!("sqlite_rows_per_s_batch{batch}"), rows, "rows/s")
            .add(&format!("sqlite_tx_per_s_batch{batch}"), txs, "tx/s");
    }
    bench.emit(r);
    Ok(())
}
