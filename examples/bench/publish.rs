//! `publish`: events that each match `fanout` endpoints, published as fast as the clients can
//! (publish rate, end-to-end delivered/s, publish→delivery latency), then again paced at half
//! the end-to-end rate measured, for the latency target.

use crate::load::{Until, drive, expect_ok};
use crate::receiver::Receiver;
use crate::report::{Report, Stats, Target as Goal};
use crate::target::Target;
use crate::{Bench, now_us};
use serde_json::json;
use std::collections::HashSet;
use std::time::{Duration, Instant};
use webhookd::client::Client;

/// What one publishing phase measured.
struct Phase {
    published: u64,
    errors: u64,
    first_error: Option<String>,
    /// Request latency of `POST /v1/events`.
    request: Stats,
    published_per_s: f64,
    expected: u64,
    received: u64,
    duplicates: u64,
    /// Deliveries per second from the first publish sent to the last delivery received.
    delivered_per_s: f64,
    /// Delivery arrival minus the publish request's send time.
    latency: Stats,
}

/// A run's endpoints: all point at the receiver under one tag and receive one event name.
pub struct Endpoints {
    pub tag: u32,
    pub event_name: String,
    pub ids: Vec<i64>,
}

/// Creates `n` endpoints that receive only a new run's event name.
pub fn create_endpoints(
    client: &Client,
    receiver: &Receiver,
    n: usize,
) -> anyhow::Result<Endpoints> {
    let (tag, url) = receiver.new_run();
    let event_name = format!("bench.run{tag}");
    let ids = (0..n)
        .map(|i| {
            let body = json!({"name": format!("bench-{tag}-{i}"), "url": url, "filter_events": event_name});
            let data = expect_ok(client.send("POST", "/v1/endpoints", Some(&body)))
                .map_err(|e| anyhow::anyhow!("cannot create an endpoint: {e}"))?;
            data["id"]
                .as_i64()
                .ok_or_else(|| anyhow::anyhow!("endpoint reply without an id: {data}"))
        })
        .collect::<anyhow::Result<_>>()?;
    Ok(Endpoints {
        tag,
        event_name,
        ids,
    })
}

/// The body of the load's `n`th publish: the event name and a payload carrying its send time.
pub fn event_body(event_name: &str, n: u64) -> serde_json::Value {
    json!({"event_name": event_name, "payload": {"sent_us": now_us(), "seq": n}})
}

/// One signed `POST /v1/events` of the load, checked: an envelope of code 0 whose event has
/// `fanout` tasks.
pub fn publish_one(client: &Client, event_name: &str, fanout: usize, n: u64) -> Result<(), String> {
    let data = expect_ok(client.send("POST", "/v1/events", Some(&event_body(event_name, n))))?;
    match data["task_count"].as_u64() {
        Some(count) if count == fanout as u64 => Ok(()),
        other => Err(format!("task_count {other:?}, expected {fanout}")),
    }
}

fn phase(
    bench: &Bench,
    clients: &[Client],
    fanout: usize,
    events: u64,
    rate: Option<f64>,
) -> anyhow::Result<Phase> {
    let Endpoints {
        tag, event_name, ..
    } = create_endpoints(&clients[0], &bench.receiver, fanout)?;
    let outcome = drive(clients, Until::Count(events), rate, |client, n| {
        publish_one(client, &event_name, fanout, n)
    });
    let expected = outcome.ok * fanout as u64;
    let deliveries = bench.receiver.wait_for(
        tag,
        expected as usize,
        bench.settings.stall(),
        Instant::now() + Duration::from_secs(900),
    );
    let unique: HashSet<i64> = deliveries.iter().filter_map(|d| d.task_id).collect();
    if let Some(path) = std::env::var_os("WEBHOOKD_BENCH_TIMINGS") {
        write_timings(
            &path,
            if rate.is_some() { "half" } else { "full" },
            &deliveries,
        )?;
    }
    let last_us = deliveries.iter().map(|d| d.at_us).max().unwrap_or(0);
    let span_s = (last_us - outcome.start_us) as f64 / 1e6;
    let latency = Stats::new(
        deliveries
            .iter()
            .filter_map(|d| d.sent_us.map(|sent| (d.at_us - sent).max(0) as u64))
            .collect(),
    );
    Ok(Phase {
        published: outcome.ok,
        errors: outcome.errors,
        first_error: outcome.first_error.clone(),
        published_per_s: outcome.rate(),
        request: outcome.latency,
        expected,
        received: unique.len() as u64,
        duplicates: (deliveries.len() - unique.len()) as u64,
        delivered_per_s: if span_s > 0.0 {
            unique.len() as f64 / span_s
        } else {
            0.0
        },
        latency,
    })
}

/// Appends one line per delivery to `path` (`WEBHOOKD_BENCH_TIMINGS`): the phase, the task id,
/// when the publish that caused it was sent and when it arrived (µs since the epoch), for
/// taking a latency apart against the database's own times (`scripts/latency-parts.py`).
fn write_timings(
    path: &std::ffi::OsStr,
    phase: &str,
    deliveries: &[crate::receiver::Delivery],
) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::BufWriter::new(
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?,
    );
    for d in deliveries {
        if let (Some(task_id), Some(sent_us)) = (d.task_id, d.sent_us) {
            writeln!(out, "{phase} {task_id} {sent_us} {}", d.at_us)?;
        }
    }
    Ok(out.flush()?)
}

/// Runs both phases against `target` and returns the report (not yet emitted).
pub fn measure(
    bench: &Bench,
    target: &Target,
    fanout: usize,
    db_tasks: u64,
) -> anyhow::Result<Report> {
    let s = &bench.settings;
    let events = s.publish_events(fanout);
    let clients = target.clients(s.publish_clients())?;
    let mut r = Report::new("publish");
    r.param("fanout", fanout)
        .param("events", events)
        .param("clients", clients.len())
        .param("db_tasks", db_tasks);
    if let Some(w) = s.workers {
        r.param("workers", w);
    }
    bench.progress(&format!(
        "publish: fan-out {fanout}, {events} events from {} clients",
        clients.len()
    ));
    let max = phase(bench, &clients, fanout, events, None)?;
    r.add("published", max.published as f64, "events")
        .add("publish_errors", max.errors as f64, "")
        .add("published_per_s", max.published_per_s, "ev/s");
    r.add_latency("publish_request", &max.request, None);
    r.add("deliveries_expected", max.expected as f64, "")
        .add("deliveries_received", max.received as f64, "")
        .add("duplicates", max.duplicates as f64, "");
    match fanout {
        1 => r.add_target(
            "delivered_per_s",
            max.delivered_per_s,
            "del/s",
            Goal::AtLeast(3000.0),
        ),
        10 => r.add_target(
            "delivered_per_s",
            max.delivered_per_s,
            "del/s",
            Goal::AtLeast(8000.0),
        ),
        _ => r.add("delivered_per_s", max.delivered_per_s, "del/s"),
    };
    r.add_latency("latency", &max.latency, None);
    if let Some(e) = &max.first_error {
        r.note(format!("publish error: {e}"));
    }
    if max.received < max.expected {
        r.note(format!(
            "only {} of {} deliveries arrived (none for {:?})",
            max.received,
            max.expected,
            s.stall()
        ));
    }
    if let Some(bare) = bench.figure("baseline", "bare_deliveries_per_s") {
        let goal = (fanout == 1).then_some(Goal::AtLeast(0.5));
        let ratio = max.delivered_per_s / bare;
        match goal {
            Some(g) => r.add_target("delivered_vs_bare", ratio, "x", g),
            None => r.add("delivered_vs_bare", ratio, "x"),
        };
    }
    // The two-exchange ceiling: an event costs the machine one bare publish and `fanout` bare
    // deliveries of CPU (`baseline`), with free storage, signing and bookkeeping.
    if let (Some(bare_publish), Some(bare)) = (
        bench.figure("baseline", "bare_publish_per_s"),
        bench.figure("baseline", "bare_deliveries_per_s"),
    ) {
        let f = fanout as f64;
        let ceiling = f / (1.0 / bare_publish + f / bare);
        let ratio = max.delivered_per_s / ceiling;
        match fanout {
            1 => r.add_target("delivered_vs_ceiling", ratio, "x", Goal::AtLeast(0.8)),
            _ => r.add("delivered_vs_ceiling", ratio, "x"),
        };
    }
    // The two exchanges run at once without webhookd: the ceiling as measured, not predicted.
    if let (1, Some(both)) = (fanout, bench.figure("baseline", "both_at_once_per_s")) {
        r.add("delivered_vs_both_at_once", max.delivered_per_s / both, "x");
    }
    let batch = if fanout >= 10 { 10 } else { 1 };
    if let Some(tx) = bench.figure("baseline", &format!("sqlite_tx_per_s_batch{batch}")) {
        r.add(
            &format!("published_vs_sqlite_tx_batch{batch}"),
            max.published_per_s / tx,
            "x",
        );
    }

    // Half the sustained rate, paced: the latency a system not at its limit sees.
    let half_rate = s.rate.unwrap_or(max.delivered_per_s / 2.0 / fanout as f64);
    if half_rate > 0.0 && max.received > 0 {
        let half_events = (events / 2).max(1);
        bench.progress(&format!(
            "publish: fan-out {fanout}, {half_events} events paced at {half_rate:.0} events/s"
        ));
        let half = phase(bench, &clients, fanout, half_events, Some(half_rate))?;
        r.add("half_rate_events_per_s", half_rate, "ev/s")
            .add("half_deliveries_expected", half.expected as f64, "")
            .add("half_deliveries_received", half.received as f64, "")
            .add("half_delivered_per_s", half.delivered_per_s, "del/s");
        r.add_latency("half_latency", &half.latency, Some(Goal::AtMost(50.0)));
        if half.received < half.expected || half.errors > 0 {
            r.note(format!(
                "half-rate phase: {} of {} deliveries, {} publish errors",
                half.received, half.expected, half.errors
            ));
        }
    } else {
        r.note("no deliveries at full rate: the half-rate phase was skipped");
    }
    Ok(r)
}

/// The `publish` scenario on a fresh server (or the `--url` one).
pub fn scenario(bench: &mut Bench, fanout: usize) -> anyhow::Result<()> {
    let target = bench.target(|_| Ok(()))?;
    let report = measure(bench, &target, fanout, 0)?;
    target.stop();
    bench.emit(report);
    Ok(())
}
