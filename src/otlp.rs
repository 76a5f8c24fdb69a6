//! OTLP/HTTP span export (`--otlp-endpoint`; docs/API.md, "Traces"). Spans go into a bounded
//! queue that never blocks the request or delivery that records them; one background thread
//! sends them in batches to `<endpoint>/v1/traces` as OTLP JSON. What does not fit the queue,
//! or what the collector refuses, is dropped and counted (`/metrics`).
//!
//! JSON, not protobuf: the OTLP/HTTP JSON encoding is part of the specification and every
//! collector accepts it, and writing it with serde (already in the tree) keeps the binary small
//! and static. The OpenTelemetry SDK crates would bring an async runtime of their own or a
//! protobuf stack for a few dozen lines of encoding.

use serde_json::{Value, json};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Spans waiting to be sent; beyond this they are dropped.
pub const QUEUE_CAPACITY: usize = 4096;
/// Most spans in one export request.
const BATCH_MAX: usize = 512;
/// Longest a span waits in a partly filled batch.
const BATCH_DELAY: Duration = Duration::from_secs(1);
/// Longest one export request may take.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long shutdown waits for the last batch.
const SHUTDOWN_FLUSH: Duration = Duration::from_secs(5);

/// What a span stands for, as OTLP names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanKind {
    /// Work inside webhookd: a schedule firing, a queue wait.
    Internal,
    /// An API request webhookd answered.
    Server,
    /// A delivery attempt webhookd sent.
    Client,
}

impl SpanKind {
    /// The OTLP enum value (`SPAN_KIND_INTERNAL` = 1, `SERVER` = 2, `CLIENT` = 3).
    fn code(self) -> u8 {
        match self {
            SpanKind::Internal => 1,
            SpanKind::Server => 2,
            SpanKind::Client => 3,
        }
    }
}

/// An attribute value.
#[derive(Debug, Clone, PartialEq)]
pub enum AttrValue {
    Str(String),
    Int(i64),
}

impl From<&str> for AttrValue {
    fn from(s: &str) -> Self {
        AttrValue::Str(s.to_string())
    }
}

impl From<String> for AttrValue {
    fn from(s: String) -> Self {
        AttrValue::Str(s)
    }
}

impl From<i64> for AttrValue {
    fn from(n: i64) -> Self {
        AttrValue::Int(n)
    }
}

/// One finished span.
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub parent_span_id: Option<[u8; 8]>,
    pub name: String,
    pub kind: SpanKind,
    /// Start and end, nanoseconds since the Unix epoch.
    pub start_unix_ns: u64,
    pub end_unix_ns: u64,
    pub attributes: Vec<(&'static str, AttrValue)>,
    /// Set when the work failed: the span's status is then ERROR with this message.
    pub error: Option<String>,
}

impl Span {
    /// The span in OTLP JSON (ids in hex, 64-bit integers as strings, as the encoding asks).
    fn to_json(&self) -> Value {
        let attributes: Vec<Value> = self
            .attributes
            .iter()
            .map(|(key, value)| {
                let value = match value {
                    AttrValue::Str(s) => json!({ "stringValue": s }),
                    AttrValue::Int(n) => json!({ "intValue": n.to_string() }),
                };
                json!({ "key": key, "value": value })
            })
            .collect();
        let mut span = json!({
            "traceId": hex::encode(self.trace_id),
            "spanId": hex::encode(self.span_id),
            "name": self.name,
            "kind": self.kind.code(),
            "startTimeUnixNano": self.start_unix_ns.to_string(),
            "endTimeUnixNano": self.end_unix_ns.to_string(),
            "attributes": attributes,
            "status": match &self.error {
                Some(message) => json!({ "code": 2, "message": message }),
                None => json!({ "code": 0 }),
            },
        });
        if let Some(parent) = self.parent_span_id {
            span["parentSpanId"] = json!(hex::encode(parent));
        }
        span
    }
}

/// The export request body for `spans`.
fn request_body(spans: &[Span]) -> Value {
    json!({
        "resourceSpans": [{
            "resource": { "attributes": [
                { "key": "service.name", "value": { "stringValue": "webhookd" } },
                { "key": "service.version", "value": { "stringValue": crate::build_info::VERSION } },
            ]},
            "scopeSpans": [{
                "scope": { "name": "webhookd", "version": crate::build_info::VERSION },
                "spans": spans.iter().map(Span::to_json).collect::<Vec<_>>(),
            }],
        }],
    })
}

/// Counts of what became of recorded spans, for `/metrics`.
#[derive(Debug, Default)]
pub struct ExportCounts {
    /// Accepted by the collector.
    pub exported: AtomicU64,
    /// Dropped because the queue was full.
    pub dropped_queue_full: AtomicU64,
    /// Dropped because the collector could not be reached or refused the batch.
    pub dropped_export_failed: AtomicU64,
}

/// A running exporter: [`Exporter::record`] queues a span without blocking.
pub struct Exporter {
    queue: SyncSender<Span>,
    counts: Arc<ExportCounts>,
    worker: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for Exporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exporter")
            .field("counts", &self.counts)
            .finish()
    }
}

impl Exporter {
    /// Starts the export thread for `endpoint` (e.g. `http://127.0.0.1:4318`; spans go to
    /// `<endpoint>/v1/traces`).
    pub fn start(endpoint: &str) -> std::io::Result<Exporter> {
        Self::start_with(endpoint, QUEUE_CAPACITY)
    }

    /// [`Exporter::start`] with a queue of `capacity` spans.
    pub fn start_with(endpoint: &str, capacity: usize) -> std::io::Result<Exporter> {
        let url = format!("{}/v1/traces", endpoint.trim_end_matches('/'));
        let (queue, spans) = std::sync::mpsc::sync_channel(capacity);
        let counts = Arc::new(ExportCounts::default());
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(EXPORT_TIMEOUT))
            .http_status_as_error(false)
            .build()
            .into();
        let worker = std::thread::Builder::new()
            .name("otlp-export".into())
            .spawn({
                let counts = counts.clone();
                move || export_loop(&agent, &url, &spans, &counts)
            })?;
        Ok(Exporter {
            queue,
            counts,
            worker: Mutex::new(Some(worker)),
        })
    }

    /// Queues a finished span; never blocks. A full queue drops it (counted).
    pub fn record(&self, span: Span) {
        match self.queue.try_send(span) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.counts
                    .dropped_queue_full
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// What became of the spans recorded so far.
    pub fn counts(&self) -> &ExportCounts {
        &self.counts
    }

    /// Sends what is queued (waiting at most a few seconds) and stops the thread. Spans recorded
    /// afterwards are counted as dropped.
    pub fn shutdown(&self) {
        let Some(worker) = self.worker.lock().ok().and_then(|mut w| w.take()) else {
            return;
        };
        // A zero-size span name marks the end: the loop flushes and returns when it sees it.
        let _ = self.queue.try_send(Span {
            trace_id: [0; 16],
            span_id: [0; 8],
            parent_span_id: None,
            name: String::new(),
            kind: SpanKind::Internal,
            start_unix_ns: 0,
            end_unix_ns: 0,
            attributes: Vec::new(),
            error: None,
        });
        let deadline = Instant::now() + SHUTDOWN_FLUSH;
        while !worker.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if worker.is_finished() {
            let _ = worker.join();
        }
    }
}

/// Is this the end marker [`Exporter::shutdown`] queues?
fn is_end_marker(span: &Span) -> bool {
    span.name.is_empty() && span.trace_id == [0; 16]
}

/// Collects spans into batches (full, or a second old) and sends each; returns at the end
/// marker after sending what came before it.
fn export_loop(agent: &ureq::Agent, url: &str, spans: &Receiver<Span>, counts: &ExportCounts) {
    let mut batch: Vec<Span> = Vec::with_capacity(BATCH_MAX);
    let mut oldest: Option<Instant> = None;
    loop {
        let wait = oldest.map_or(Duration::from_secs(3600), |t| {
            BATCH_DELAY.saturating_sub(t.elapsed())
        });
        let (ended, due) = match spans.recv_timeout(wait) {
            Ok(span) if is_end_marker(&span) => (true, true),
            Ok(span) => {
                oldest.get_or_insert_with(Instant::now);
                batch.push(span);
                (false, batch.len() >= BATCH_MAX)
            }
            Err(RecvTimeoutError::Timeout) => (false, true),
            Err(RecvTimeoutError::Disconnected) => (true, true),
        };
        if due && !batch.is_empty() {
            send_batch(agent, url, &batch, counts);
            batch.clear();
            oldest = None;
        }
        if ended {
            return;
        }
    }
}

/// Logs an export failure at most once a minute.
fn warn_rarely(message: &str) {
    static LAST: Mutex<Option<Instant>> = Mutex::new(None);
    if let Ok(mut last) = LAST.lock()
        && last.is_none_or(|t| t.elapsed() >= Duration::from_secs(60))
    {
        *last = Some(Instant::now());
        tracing::warn!(
            "OTLP export failed (spans dropped; next warning in a minute at the earliest): {message}"
        );
    }
}

fn send_batch(agent: &ureq::Agent, url: &str, batch: &[Span], counts: &ExportCounts) {
    let n = batch.len() as u64;
    let body = request_body(batch).to_string();
    let result = agent
        .post(url)
        .header("Content-Type", "application/json")
        .send(body.as_bytes());
    match result {
        Ok(reply) if reply.status().is_success() => {
            counts.exported.fetch_add(n, Ordering::Relaxed);
        }
        Ok(reply) => {
            counts.dropped_export_failed.fetch_add(n, Ordering::Relaxed);
            warn_rarely(&format!("{url} answered {}", reply.status()));
        }
        Err(e) => {
            counts.dropped_export_failed.fetch_add(n, Ordering::Relaxed);
            warn_rarely(&format!("{url}: {e}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::TcpListener;

    /// Waits until `counter` reaches `want` (the worker counts after it reads the reply, which
    /// may come after the stand-in handed the body over).
    fn wait_for(counter: &AtomicU64, want: u64) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while counter.load(Ordering::Relaxed) < want && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(counter.load(Ordering::Relaxed), want);
    }

    fn span(name: &str) -> Span {
        Span {
            trace_id: [0x4b; 16],
            span_id: [0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08],
            parent_span_id: Some([0xaa; 8]),
            name: name.to_string(),
            kind: SpanKind::Client,
            start_unix_ns: 1_700_000_000_000_000_000,
            end_unix_ns: 1_700_000_000_250_000_000,
            attributes: vec![
                ("webhookd.task_id", AttrValue::Int(7)),
                ("webhookd.app", "acme".into()),
            ],
            error: Some("HTTP 500".into()),
        }
    }

    #[test]
    fn a_span_in_otlp_json() {
        let body = request_body(&[span("deliver")]);
        let s = &body["resourceSpans"][0]["scopeSpans"][0]["spans"][0];
        assert_eq!(s["traceId"], "4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b");
        assert_eq!(s["spanId"], "0102030405060708");
        assert_eq!(s["parentSpanId"], "aaaaaaaaaaaaaaaa");
        assert_eq!(s["kind"], 3);
        assert_eq!(s["startTimeUnixNano"], "1700000000000000000");
        assert_eq!(s["endTimeUnixNano"], "1700000000250000000");
        assert_eq!(
            s["attributes"][0],
            json!({"key": "webhookd.task_id", "value": {"intValue": "7"}})
        );
        assert_eq!(
            s["attributes"][1],
            json!({"key": "webhookd.app", "value": {"stringValue": "acme"}})
        );
        assert_eq!(s["status"], json!({"code": 2, "message": "HTTP 500"}));
        assert_eq!(
            body["resourceSpans"][0]["resource"]["attributes"][0],
            json!({"key": "service.name", "value": {"stringValue": "webhookd"}})
        );
    }

    /// A collector stand-in: answers `status` to each request and hands back each body.
    fn collector(status: u16) -> (String, std::sync::mpsc::Receiver<(String, Value)>) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let address = format!("http://{}", listener.local_addr().expect("addr"));
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let mut reader = BufReader::new(stream.try_clone().expect("clone"));
                let mut request_line = String::new();
                reader.read_line(&mut request_line).expect("request line");
                let mut length = 0usize;
                loop {
                    let mut line = String::new();
                    reader.read_line(&mut line).expect("header");
                    if line == "\r\n" || line.is_empty() {
                        break;
                    }
                    if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                        length = v.trim().parse().expect("length");
                    }
                }
                let mut body = vec![0; length];
                reader.read_exact(&mut body).expect("body");
                let reply = format!(
                    "HTTP/1.1 {status} X\r\ncontent-length: 2\r\ncontent-type: application/json\r\n\r\n{{}}"
                );
                stream.write_all(reply.as_bytes()).expect("reply");
                let _ = tx.send((request_line, serde_json::from_slice(&body).expect("json")));
            }
        });
        (address, rx)
    }

    #[test]
    fn batches_reach_the_collector_and_are_counted() {
        let (endpoint, bodies) = collector(200);
        let exporter = Exporter::start(&format!("{endpoint}/")).expect("start");
        exporter.record(span("one"));
        exporter.record(span("two"));
        exporter.shutdown();
        let mut names = Vec::new();
        while let Ok((line, body)) = bodies.recv_timeout(Duration::from_secs(30)) {
            assert!(line.starts_with("POST /v1/traces "), "{line}");
            for s in body["resourceSpans"][0]["scopeSpans"][0]["spans"]
                .as_array()
                .expect("spans")
            {
                names.push(s["name"].as_str().expect("name").to_string());
            }
            if names.len() == 2 {
                break;
            }
        }
        assert_eq!(names, ["one", "two"]);
        wait_for(&exporter.counts().exported, 2);
    }

    #[test]
    fn a_full_queue_drops_and_counts_without_blocking() {
        // A collector that never answers: once the worker has a full batch it hangs in the
        // export, and the one-span queue behind it fills.
        let hanging = TcpListener::bind("127.0.0.1:0").expect("bind");
        let endpoint = format!("http://{}", hanging.local_addr().expect("addr"));
        let exporter = Exporter::start_with(&endpoint, 1).expect("start");
        let total = BATCH_MAX + 100;
        for i in 0..total {
            exporter.record(span(&format!("s{i}")));
        }
        // At most one batch in the worker and one span in the queue were taken.
        let dropped = exporter.counts().dropped_queue_full.load(Ordering::Relaxed);
        assert!(
            dropped as usize >= total - BATCH_MAX - 1,
            "dropped {dropped} of {total}"
        );
        exporter.shutdown();
        drop(hanging);
    }

    #[test]
    fn a_refusing_collector_counts_export_failures() {
        let (endpoint, bodies) = collector(503);
        let exporter = Exporter::start(&endpoint).expect("start");
        exporter.record(span("refused"));
        exporter.shutdown();
        bodies
            .recv_timeout(Duration::from_secs(30))
            .expect("the batch was sent");
        wait_for(&exporter.counts().dropped_export_failed, 1);
        assert_eq!(exporter.counts().exported.load(Ordering::Relaxed), 0);
    }
}
