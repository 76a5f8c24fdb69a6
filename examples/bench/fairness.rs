//! `fairness` and `ratelimit`: delivery to a healthy endpoint next to a bad neighbour.
//!
//! - `fairness`: an endpoint that accepts connections and never answers (`timeout_ms` 30000)
//!   gets a backlog of 5,000 tasks; then events to a healthy endpoint are published at a paced
//!   rate and their publish→delivery latency is measured (target: p99 under 1 s). Also
//!   reported: how many connections the hanging endpoint held at once (its in-flight cap).
//! - `ratelimit`: the delivered/s of an unlimited endpoint alone, then again while another
//!   endpoint limited to 1/s has a backlog (target: within 10% of the figure alone).
//! - `isolation`: a healthy endpoint's delivered/s (events published as fast as the clients
//!   go) and its publish→delivery latency at a paced rate, with no hanging endpoint, then
//!   with 1, 4, 16 and 100 endpoints that never answer (`timeout_ms` 300000, 100 attempts at
//!   0 s, a backlog each) in another app, then in the healthy endpoint's own app; each case on
//!   a fresh server, whose rate without the hanging endpoints is measured first (target: at
//!   least 0.9x that rate; measured on the same server just before, so that a machine whose
//!   load drifts compares like with like).

use crate::load::{Until, drive, expect_ok};
use crate::publish::create_endpoints;
use crate::report::{Report, Stats, Target as Goal};
use crate::{Bench, now_us};
use serde_json::json;
use std::collections::HashSet;
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use webhookd::client::Client;

/// A loopback listener that accepts every connection and never answers; dropping it closes
/// them all.
struct Hanging {
    url: String,
    held: Arc<Mutex<Vec<TcpStream>>>,
    stop: Arc<AtomicBool>,
}

impl Hanging {
    fn start() -> anyhow::Result<Hanging> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let url = format!("http://{}/", listener.local_addr()?);
        let held: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (h, s) = (held.clone(), stop.clone());
        std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => h.lock().unwrap_or_else(|e| e.into_inner()).push(stream),
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Ok(Hanging { url, held, stop })
    }

    /// Connections accepted so far (the server holds each for the whole timeout).
    fn accepted(&self) -> usize {
        self.held.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

impl Drop for Hanging {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.held.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
}

/// Publishes `events` events named `event_name` from `clients` (paced at `rate` when given),
/// each carrying its send time.
fn publish(
    clients: &[Client],
    event_name: &str,
    events: u64,
    rate: Option<f64>,
) -> crate::load::Outcome {
    drive(clients, Until::Count(events), rate, |client, n| {
        let body = json!({"event_name": event_name, "payload": {"sent_us": now_us(), "seq": n}});
        expect_ok(client.send("POST", "/v1/events", Some(&body))).map(|_| ())
    })
}

/// A backlog of `n` tasks on a new endpoint with the given extra fields.
fn backlog(
    bench: &Bench,
    clients: &[Client],
    url: &str,
    extra: serde_json::Value,
    n: u64,
) -> anyhow::Result<()> {
    let (tag, _) = bench.receiver.new_run();
    let event_name = format!("bench.backlog{tag}");
    let mut body =
        json!({"name": format!("backlog-{tag}"), "url": url, "filter_events": event_name});
    if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
        body.extend(extra.clone());
    }
    expect_ok(clients[0].send("POST", "/v1/endpoints", Some(&body)))
        .map_err(|e| anyhow::anyhow!("cannot create the backlog endpoint: {e}"))?;
    let outcome = publish(clients, &event_name, n, None);
    if outcome.errors > 0 {
        anyhow::bail!("backlog publish errors: {:?}", outcome.first_error);
    }
    Ok(())
}

/// Publishes to one new healthy endpoint and waits for its deliveries: (received, latency,
/// delivered/s from the first publish to the last delivery).
fn healthy_run(
    bench: &Bench,
    clients: &[Client],
    events: u64,
    rate: Option<f64>,
) -> anyhow::Result<(u64, Stats, f64)> {
    let eps = create_endpoints(&clients[0], &bench.receiver, 1)?;
    let outcome = publish(clients, &eps.event_name, events, rate);
    let deliveries = bench.receiver.wait_for(
        eps.tag,
        outcome.ok as usize,
        bench.settings.stall(),
        Instant::now() + Duration::from_secs(600),
    );
    let unique: HashSet<i64> = deliveries.iter().filter_map(|d| d.task_id).collect();
    let latency = Stats::new(
        deliveries
            .iter()
            .filter_map(|d| d.sent_us.map(|sent| (d.at_us - sent).max(0) as u64))
            .collect(),
    );
    let last_us = deliveries.iter().map(|d| d.at_us).max().unwrap_or(0);
    let span_s = (last_us - outcome.start_us) as f64 / 1e6;
    let per_s = if span_s > 0.0 {
        unique.len() as f64 / span_s
    } else {
        0.0
    };
    Ok((unique.len() as u64, latency, per_s))
}

/// The `fairness` scenario.
pub fn fairness(bench: &mut Bench) -> anyhow::Result<()> {
    let quick = bench.settings.quick;
    let (stuck_tasks, events, rate) = if quick {
        (200, 40, 40.0)
    } else {
        (5_000, 1_000, 100.0)
    };
    let target = bench.target(|_| Ok(()))?;
    let clients = target.clients(bench.settings.publish_clients())?;
    let hanging = Hanging::start()?;
    bench.progress(&format!(
        "fairness: {stuck_tasks} tasks to an endpoint that never answers (timeout 30 s)"
    ));
    backlog(
        bench,
        &clients,
        &hanging.url,
        json!({"timeout_ms": 30_000}),
        stuck_tasks,
    )?;
    std::thread::sleep(Duration::from_millis(300));
    bench.progress(&format!(
        "fairness: {events} events to a healthy endpoint at {rate} events/s"
    ));
    let (received, latency, _) = healthy_run(bench, &clients, events, Some(rate))?;
    let held = hanging.accepted();
    drop(hanging);
    target.stop();
    let mut r = Report::new("fairness");
    r.param("hanging_tasks", stuck_tasks)
        .param("events", events)
        .param("rate", rate);
    if let Some(w) = bench.settings.workers {
        r.param("workers", w);
    }
    r.add("healthy_expected", events as f64, "")
        .add("healthy_received", received as f64, "")
        .add("hanging_connections_held", held as f64, "");
    r.add_latency("healthy_latency", &latency, Some(Goal::AtMost(1000.0)));
    if received < events {
        r.note(format!(
            "only {received} of {events} healthy deliveries arrived"
        ));
    }
    bench.emit(r);
    Ok(())
}

/// The `ratelimit` scenario.
pub fn ratelimit(bench: &mut Bench) -> anyhow::Result<()> {
    let events = bench.settings.publish_events(1);
    let limited_backlog = if bench.settings.quick { 100 } else { 1_000 };
    let target = bench.target(|_| Ok(()))?;
    let clients = target.clients(bench.settings.publish_clients())?;
    bench.progress(&format!(
        "ratelimit: {events} events to an unlimited endpoint alone"
    ));
    let (alone_received, _, alone) = healthy_run(bench, &clients, events, None)?;
    let (_, url) = bench.receiver.new_run();
    backlog(
        bench,
        &clients,
        &url,
        json!({"rate_limit_per_sec": 1}),
        limited_backlog,
    )?;
    bench.progress(&format!(
        "ratelimit: {events} events to an unlimited endpoint next to one limited to 1/s"
    ));
    let (beside_received, _, beside) = healthy_run(bench, &clients, events, None)?;
    target.stop();
    let mut r = Report::new("ratelimit");
    r.param("events", events)
        .param("limited_backlog", limited_backlog);
    r.add("alone_received", alone_received as f64, "")
        .add("alone_delivered_per_s", alone, "del/s")
        .add("beside_received", beside_received as f64, "")
        .add("beside_delivered_per_s", beside, "del/s")
        .add_target(
            "beside_vs_alone",
            if alone > 0.0 { beside / alone } else { 0.0 },
            "x",
            Goal::AtLeast(0.9),
        );
    bench.emit(r);
    Ok(())
}

/// Creates `n` endpoints of `client`'s app at `url` that never answer, each given a backlog
/// of `per_endpoint` tasks (one event fanned out to all of them per task), retried 100 times
/// at 0 s as the probe did.
fn hang_endpoints(
    client: &Client,
    clients: &[Client],
    url: &str,
    n: usize,
    per_endpoint: u64,
) -> anyhow::Result<()> {
    let policy = json!({"name": "hammer", "max_attempts": 100, "backoff_type": "fixed",
        "initial_delay_sec": 0, "max_delay_sec": 0});
    let policy = expect_ok(client.send("POST", "/v1/retries/policies", Some(&policy)))
        .map_err(|e| anyhow::anyhow!("cannot create the retry policy: {e}"))?;
    let event_name = format!("bench.hang{}", now_us());
    for i in 0..n {
        let body = json!({"name": format!("hanging-{i}"), "url": url, "filter_events": event_name,
            "timeout_ms": 300_000, "retry_policy_id": policy["id"]});
        expect_ok(client.send("POST", "/v1/endpoints", Some(&body)))
            .map_err(|e| anyhow::anyhow!("cannot create a hanging endpoint: {e}"))?;
    }
    let outcome = publish(clients, &event_name, per_endpoint, None);
    if outcome.errors > 0 {
        anyhow::bail!("hanging backlog publish errors: {:?}", outcome.first_error);
    }
    Ok(())
}

/// The `isolation` scenario.
pub fn isolation(bench: &mut Bench) -> anyhow::Result<()> {
    let quick = bench.settings.quick;
    let (events, paced, rate, counts): (u64, u64, f64, &[usize]) = if quick {
        (200, 50, 50.0, &[1, 4])
    } else {
        (3_000, 500, 100.0, &[1, 4, 16, 100])
    };
    let events = bench.settings.events.unwrap_or(events);
    let selected = !bench.settings.hanging.is_empty() || bench.settings.place.is_some();
    let counts = match bench.settings.hanging.as_slice() {
        [] => counts.to_vec(),
        chosen => chosen.to_vec(),
    };
    let mut cases = if selected { vec![] } else { vec![("none", 0)] };
    for place in ["other_app", "same_app"] {
        if bench.settings.place.as_deref().is_none_or(|p| p == place) {
            cases.extend(counts.iter().map(|&n| (place, n)));
        }
    }
    // The control, only when asked for: as many endpoints of the same app, subscribed to an
    // event never published (no task, nothing hanging): what an app's endpoint count alone
    // costs its publishes.
    if bench.settings.place.as_deref() == Some("same_app_idle") {
        cases.extend(counts.iter().map(|&n| ("same_app_idle", n)));
    }
    for (place, n) in cases {
        let target = bench.target(|_| Ok(()))?;
        let clients = target.clients(bench.settings.publish_clients())?;
        let hanging = Hanging::start()?;
        let mut baseline = None;
        if n > 0 {
            bench.progress(&format!(
                "isolation ({place}, {n} hanging): {events} events before they hang"
            ));
            baseline = Some(healthy_run(bench, &clients, events, None)?.2);
            let noisy = match place {
                "other_app" => target.clients_for_app("noisy", 4)?,
                _ => target.clients(4)?,
            };
            bench.progress(&format!(
                "isolation: {n} hanging endpoints in the {place}, 20 tasks each"
            ));
            let idle = place == "same_app_idle";
            hang_endpoints(
                &noisy[0],
                &noisy,
                &hanging.url,
                n,
                if idle { 0 } else { 20 },
            )?;
            // Until the hanging endpoints hold what they may (at most 10 s).
            let until = Instant::now() + Duration::from_secs(if idle { 0 } else { 10 });
            let mut last = usize::MAX;
            while Instant::now() < until {
                std::thread::sleep(Duration::from_millis(500));
                let held = hanging.accepted();
                if held == last && held > 0 {
                    break;
                }
                last = held;
            }
        }
        bench.progress(&format!(
            "isolation ({place}, {n} hanging): {events} events, then {paced} at {rate}/s"
        ));
        let (received, _, per_s) = healthy_run(bench, &clients, events, None)?;
        let (paced_received, latency, _) = healthy_run(bench, &clients, paced, Some(rate))?;
        let rss = target
            .pid()
            .and_then(|pid| crate::footprint::proc_status_bytes(pid, "VmRSS"));
        let held = hanging.accepted();
        drop(hanging);
        target.stop();
        let mut r = Report::new("isolation");
        r.param("place", place)
            .param("hanging_endpoints", n)
            .param("events", events)
            .param("paced_events", paced)
            .param("rate", rate);
        r.add("received", received as f64, "")
            .add("delivered_per_s", per_s, "del/s")
            .add("paced_received", paced_received as f64, "")
            .add("hanging_connections_held", held as f64, "");
        if let Some(rss) = rss {
            r.add("rss_mib", rss as f64 / (1024.0 * 1024.0), "MiB");
        }
        r.add_latency("paced_latency", &latency, Some(Goal::AtMost(1000.0)));
        if let Some(base) = baseline {
            r.add("before_delivered_per_s", base, "del/s");
            r.add_target(
                "rate_vs_none",
                if base > 0.0 { per_s / base } else { 0.0 },
                "x",
                Goal::AtLeast(0.9),
            );
        }
        if received < events || paced_received < paced {
            r.note(format!(
                "only {received} of {events} and {paced_received} of {paced} healthy deliveries arrived"
            ));
        }
        bench.emit(r);
    }
    Ok(())
}
