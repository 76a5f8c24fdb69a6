//! `baseline`: the limits webhookd is measured against, on the same machine in the same run —
//! the receiver driven directly by the delivery pool's client pattern (bare deliveries/s, no
//! webhookd), the publish load's signed requests against a bare server (bare publishes/s) and
//! the two-exchange ceiling of a fan-out-1 event they give, alone and with both loads at once,
//! bare GETs from the API clients' pattern, and raw SQLite inserts of a task row.

use crate::load::{Outcome, Until, drive};
use crate::publish;
use crate::receiver::serve;
use crate::report::{Report, Stats};
use crate::target::APP;
use crate::{Bench, now_us};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Response;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use serde_json::{Value, json};
use std::collections::HashSet;
use std::time::{Duration, Instant};
use webhookd::auth::signed_payload;
use webhookd::client::Client;
use webhookd::clock::{Clock, SystemClock};
use webhookd::signing::hmac_hex;
use webhookd::store::events::{Event, EventStatus};
use webhookd::store::keys::NewKey;
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

/// CPU time used so far, user and system, in µs: of this whole process
/// (`CLOCK_PROCESS_CPUTIME_ID`: every client, server and receiver thread of a bare load, and the
/// loopback TCP their system calls run) or of the calling thread (`CLOCK_THREAD_CPUTIME_ID`).
/// Unlike a rate, it does not drop when other processes share the cores.
fn cpu_us(clock: libc::clockid_t) -> i64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime only writes the timespec it is given.
    if unsafe { libc::clock_gettime(clock, &mut t) } != 0 {
        return 0;
    }
    t.tv_sec * 1_000_000 + t.tv_nsec / 1_000
}

/// Runs `load` and returns what it returned with the process CPU µs it took.
fn with_cpu<T>(load: impl FnOnce() -> T) -> (T, f64) {
    let before = cpu_us(libc::CLOCK_PROCESS_CPUTIME_ID);
    let out = load();
    (
        out,
        (cpu_us(libc::CLOCK_PROCESS_CPUTIME_ID) - before) as f64,
    )
}

/// What a bare delivery load did: deliveries from the delivery pool's pattern straight to the
/// receiver.
struct BareDeliveries {
    sent: u64,
    /// Distinct task ids the receiver saw.
    received: usize,
    /// When the first request could be sent and the last delivery arrived (µs since the epoch).
    start_us: i64,
    end_us: i64,
    latency: Stats,
    first_error: Option<String>,
}

impl BareDeliveries {
    fn per_s(&self) -> f64 {
        self.received as f64 / ((self.end_us - self.start_us) as f64 / 1e6).max(1e-9)
    }
}

/// The delivery workers webhookd would run: `--workers`, or its default.
fn workers(bench: &Bench) -> usize {
    bench
        .settings
        .workers
        .unwrap_or(webhookd::config::Config::new("").workers)
}

/// `count` deliveries from `workers` threads sharing one agent, as webhookd's delivery pool
/// sends them, to a fresh run of the receiver; waits until all arrived.
fn deliver(bench: &Bench, count: u64, workers: usize) -> BareDeliveries {
    let (tag, url) = bench.receiver.new_run();
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
        bench.settings.stall(),
        Instant::now() + Duration::from_secs(60),
    );
    let unique: HashSet<i64> = deliveries.iter().filter_map(|d| d.task_id).collect();
    BareDeliveries {
        sent: outcome.ok,
        received: unique.len(),
        start_us: outcome.start_us,
        end_us: deliveries.iter().map(|d| d.at_us).max().unwrap_or(0),
        latency: Stats::new(
            deliveries
                .iter()
                .filter_map(|d| d.sent_us.map(|sent| (d.at_us - sent).max(0) as u64))
                .collect(),
        ),
        first_error: outcome.first_error,
    }
}

/// The bare delivery load alone; returns its rate and its process CPU per delivery (µs).
fn bare_deliveries(bench: &Bench, r: &mut Report) -> (f64, f64) {
    let workers = workers(bench);
    let count = bench.settings.publish_events(1);
    bench.progress(&format!(
        "baseline: {count} bare deliveries from {workers} threads sharing one agent"
    ));
    let (bare, cpu) = with_cpu(|| deliver(bench, count, workers));
    r.param("workers", workers);
    r.add("bare_sent", bare.sent as f64, "")
        .add("bare_received", bare.received as f64, "")
        .add("bare_deliveries_per_s", bare.per_s(), "del/s")
        .add(
            "bare_delivery_cpu_us",
            cpu / bare.received.max(1) as f64,
            "us",
        );
    r.add_latency("bare_latency", &bare.latency, None);
    if let Some(e) = &bare.first_error {
        r.note(format!("bare delivery error: {e}"));
    }
    (bare.per_s(), cpu / bare.received.max(1) as f64)
}

/// A stand-in for webhookd's `POST /v1/events` that does none of webhookd's work: it reads the
/// whole request body and answers 200 with a reply of the same headers and size as webhookd's
/// (the envelope around the event record, `Content-Type`, `X-Request-Id`), precomputed but for
/// the request id. No store, no signature check, no JSON parsing.
struct BarePublish {
    url: String,
    runtime: Option<tokio::runtime::Runtime>,
}

impl BarePublish {
    fn start(event_name: &str) -> anyhow::Result<BarePublish> {
        let data = Bytes::from(event_record(event_name)?);
        let (url, runtime) = serve("bare-publish", move |req| {
            let data = data.clone();
            async move {
                let _ = req.into_body().collect().await;
                publish_reply(&data)
            }
        })?;
        Ok(BarePublish {
            url,
            runtime: Some(runtime),
        })
    }
}

impl Drop for BarePublish {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

/// The `data` of webhookd's reply to the load's publish: the event record as webhookd writes
/// it, with the payload the load sends (its `sent_us` and a 5-digit `seq`, as in a full run).
fn event_record(event_name: &str) -> anyhow::Result<Vec<u8>> {
    let Value::Object(payload) = publish::event_body(event_name, 10_000)["payload"].take() else {
        anyhow::bail!("the publish body has no payload object");
    };
    Ok(serde_json::to_vec(&Event {
        id: 10_000,
        app_id: APP.to_string(),
        event_name: event_name.to_string(),
        event_key: None,
        payload: Value::Object(payload),
        status: EventStatus::Dispatched,
        task_count: 1,
        created_at: SystemClock.now_ms(),
    })?)
}

/// webhookd's success envelope around `data`, with a fresh request id in the body and in
/// `X-Request-Id`, as its server writes it.
fn publish_reply(data: &[u8]) -> Response<Full<Bytes>> {
    let id = webhookd::request_id::next();
    let mut body = Vec::with_capacity(data.len() + 80);
    body.extend_from_slice(br#"{"code":0,"message":"success","request_id":""#);
    body.extend_from_slice(id.as_bytes());
    body.extend_from_slice(br#"","data":"#);
    body.extend_from_slice(data);
    body.push(b'}');
    let mut reply = Response::new(Full::new(Bytes::from(body)));
    let headers = reply.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if let Ok(id) = HeaderValue::from_str(&id) {
        headers.insert("x-request-id", id);
    }
    reply
}

/// The publish load's clients (as many threads as `publish` runs, each its own key of
/// webhookd's shape) pointed at `url`.
fn publish_clients(bench: &Bench, url: &str) -> Vec<Client> {
    (0..bench.settings.publish_clients())
        .map(|_| {
            let key = NewKey::generate(APP);
            Client::new(url, &key.key_id, &key.secret)
        })
        .collect()
}

/// `count` of the publish scenario's signed requests from `clients`.
fn publish_bare(clients: &[Client], event_name: &str, count: u64) -> Outcome {
    drive(clients, Until::Count(count), None, |client, n| {
        publish::publish_one(client, event_name, 1, n)
    })
}

/// The CPU µs of the HMAC a signature check computes for one publish request of the load (the
/// signed payload built and its HMAC-SHA256 taken): this thread's CPU time over `rounds` of
/// 1,000, the least per round (a round the thread was preempted in counts no more).
fn publish_hmac_us(event_name: &str, rounds: usize) -> f64 {
    let key = NewKey::generate(APP);
    let body = publish::event_body(event_name, 10_000).to_string();
    let timestamp = SystemClock.now_ms().to_string();
    (0..rounds)
        .map(|_| {
            let start = cpu_us(libc::CLOCK_THREAD_CPUTIME_ID);
            for _ in 0..1_000 {
                let payload = signed_payload("POST", "/v1/events", body.as_bytes());
                std::hint::black_box(hmac_hex(key.secret.as_bytes(), &timestamp, &payload));
            }
            (cpu_us(libc::CLOCK_THREAD_CPUTIME_ID) - start) as f64 / 1_000.0
        })
        .fold(f64::INFINITY, f64::min)
}

/// The two exchanges of a fan-out-1 event without webhookd: the publish scenario's signed
/// publishes against [`BarePublish`] alone; the ceiling that adding up their CPU per event
/// predicts; then `count` publishes and `count` bare deliveries at once (one of each per
/// event), to check that prediction.
fn bare_publishes(
    bench: &Bench,
    r: &mut Report,
    (bare_deliveries_per_s, delivery_cpu_us): (f64, f64),
) -> anyhow::Result<()> {
    let count = bench.settings.publish_events(1);
    let event_name = "bench.bare";
    let server = BarePublish::start(event_name)?;
    let clients = publish_clients(bench, &server.url);
    bench.progress(&format!(
        "baseline: {count} signed publishes from {} clients to a bare server",
        clients.len()
    ));
    let (alone, cpu) = with_cpu(|| publish_bare(&clients, event_name, count));
    let publish_per_s = alone.rate();
    let publish_cpu_us = cpu / alone.ok.max(1) as f64;
    r.param("publish_clients", clients.len());
    r.add("bare_publish_sent", alone.ok as f64, "")
        .add("bare_publish_errors", alone.errors as f64, "")
        .add("bare_publish_per_s", publish_per_s, "req/s")
        .add("bare_publish_cpu_us", publish_cpu_us, "us");
    r.add_latency("bare_publish", &alone.latency, None);
    if let Some(e) = &alone.first_error {
        r.note(format!("bare publish error: {e}"));
    }
    // Both exchanges share the two cores: when their CPU per event adds up, one event costs
    // 1/P + 1/D seconds of the machine.
    let ceiling = 1.0 / (1.0 / publish_per_s + 1.0 / bare_deliveries_per_s);
    r.add("two_exchange_ceiling_per_s", ceiling, "ev/s")
        .add(
            "two_exchange_ceiling_share",
            ceiling / bare_deliveries_per_s,
            "x",
        )
        // The same from CPU per exchange, which other processes on the cores move less than
        // a rate: the share of the bare client's rate an event costing both exchanges can reach.
        .add(
            "two_exchange_cpu_share",
            delivery_cpu_us / (delivery_cpu_us + publish_cpu_us),
            "x",
        );

    bench.progress(&format!(
        "baseline: {count} bare publishes and {count} bare deliveries at once"
    ));
    let workers = workers(bench);
    let ((publishes, deliveries), cpu) = with_cpu(|| {
        std::thread::scope(|scope| {
            let publishes = scope.spawn(|| publish_bare(&clients, event_name, count));
            let deliveries = deliver(bench, count, workers);
            (publishes.join(), deliveries)
        })
    });
    let publishes = publishes.map_err(|_| anyhow::anyhow!("a publish load thread panicked"))?;
    let start_us = publishes.start_us.min(deliveries.start_us);
    let end_us = (publishes.start_us + publishes.elapsed.as_micros() as i64).max(deliveries.end_us);
    let events = publishes.ok.min(deliveries.received as u64);
    let both_per_s = events as f64 / ((end_us - start_us) as f64 / 1e6).max(1e-9);
    r.add("both_publish_sent", publishes.ok as f64, "")
        .add("both_publish_errors", publishes.errors as f64, "")
        .add("both_sent", deliveries.sent as f64, "")
        .add("both_received", deliveries.received as f64, "")
        .add("both_at_once_per_s", both_per_s, "ev/s")
        .add(
            "both_at_once_share",
            both_per_s / bare_deliveries_per_s,
            "x",
        )
        .add("both_at_once_vs_ceiling", both_per_s / ceiling, "x")
        .add("both_cpu_us", cpu / events.max(1) as f64, "us")
        .add(
            "both_cpu_vs_sum",
            cpu / events.max(1) as f64 / (publish_cpu_us + delivery_cpu_us),
            "x",
        );
    for e in [publishes.first_error, deliveries.first_error]
        .into_iter()
        .flatten()
    {
        r.note(format!("both at once: {e}"));
    }

    let rounds = if bench.settings.quick { 5 } else { 200 };
    r.add("publish_hmac_us", publish_hmac_us(event_name, rounds), "us");
    Ok(())
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
                    trace: webhookd::trace::TaskTraces::new(None, false).for_task(),
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
    let bare = bare_deliveries(bench, &mut r);
    bare_publishes(bench, &mut r, bare)?;
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
