//! The loopback receiver every delivery goes to: a hyper 1 HTTP/1.1 server with keep-alive
//! that answers 200 at once and timestamps each request on arrival. Its server, [`serve`], is
//! also the bare publish server of `baseline`.
//!
//! Deliveries are told apart by the first path segment (`/{tag}`): each run points its
//! endpoints at its own tag, so a late delivery from an earlier run is never counted twice.

use crate::now_us;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper::{Request, Response, body::Incoming};
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One request as the receiver saw it.
#[derive(Debug, Clone, Copy)]
pub struct Delivery {
    /// Wall-clock arrival, microseconds since the Unix epoch.
    pub at_us: i64,
    /// The run it belongs to (first path segment).
    pub tag: u32,
    /// `X-Service-Task-Id`.
    pub task_id: Option<i64>,
    /// `X-Service-Schedule-Id`.
    pub schedule_id: Option<i64>,
    /// `sent_us` from the JSON body: when the load driver sent the request that caused it.
    pub sent_us: Option<i64>,
}

/// The part of a delivery body the harness put there.
#[derive(Deserialize)]
struct Probe {
    sent_us: Option<i64>,
}

#[derive(Default)]
struct State {
    /// Deliveries by tag, in arrival order.
    deliveries: Mutex<HashMap<u32, Vec<Delivery>>>,
    /// Every delivery of any tag, to see progress without taking the lock.
    count: AtomicUsize,
}

/// A running receiver; stops when dropped.
pub struct Receiver {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    state: Arc<State>,
    next_tag: AtomicU32,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Receiver {
    pub fn start() -> anyhow::Result<Receiver> {
        let state = Arc::new(State::default());
        let shared = state.clone();
        let (url, runtime) = serve("receiver", move |req| {
            let state = shared.clone();
            async move { receive(&state, req).await }
        })?;
        Ok(Receiver {
            url,
            state,
            next_tag: AtomicU32::new(1),
            runtime: Some(runtime),
        })
    }

    /// A fresh tag for one run, and the URL its endpoints should use.
    pub fn new_run(&self) -> (u32, String) {
        let tag = self.next_tag.fetch_add(1, Ordering::Relaxed);
        (tag, format!("{}/{tag}", self.url))
    }

    /// Deliveries received so far for `tag`.
    pub fn deliveries(&self, tag: u32) -> Vec<Delivery> {
        let all = self
            .state
            .deliveries
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        all.get(&tag).cloned().unwrap_or_default()
    }

    /// Waits until `tag` has `want` deliveries, or none arrived for `stall`, or `deadline`.
    /// Returns the deliveries of `tag` (which may be fewer than wanted).
    pub fn wait_for(
        &self,
        tag: u32,
        want: usize,
        stall: Duration,
        deadline: Instant,
    ) -> Vec<Delivery> {
        let mut seen = self.state.count.load(Ordering::Acquire);
        let mut last_progress = Instant::now();
        loop {
            let count = self.count_tag(tag);
            if count >= want || Instant::now() >= deadline || last_progress.elapsed() >= stall {
                return self.deliveries(tag);
            }
            std::thread::sleep(Duration::from_millis(5));
            let now_seen = self.state.count.load(Ordering::Acquire);
            if now_seen != seen {
                seen = now_seen;
                last_progress = Instant::now();
            }
        }
    }

    fn count_tag(&self, tag: u32) -> usize {
        let all = self
            .state
            .deliveries
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        all.get(&tag).map_or(0, Vec::len)
    }
}

/// Serves HTTP/1.1 with keep-alive on a fresh loopback port, answering every request with
/// `answer`, on a runtime of its own with two worker threads named `name` (the server stops
/// when the runtime is dropped). Returns `http://127.0.0.1:PORT` and the runtime.
pub fn serve<F, Fut>(name: &str, answer: F) -> anyhow::Result<(String, tokio::runtime::Runtime)>
where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(name)
        .enable_all()
        .build()?;
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    listener.set_nonblocking(true)?;
    let url = format!("http://{}", listener.local_addr()?);
    let name = name.to_string();
    runtime.spawn(async move {
        let listener = match tokio::net::TcpListener::from_std(listener) {
            Ok(l) => l,
            Err(e) => return eprintln!("{name}: cannot listen: {e}"),
        };
        let mut http = hyper::server::conn::http1::Builder::new();
        http.keep_alive(true);
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let _ = stream.set_nodelay(true);
            let answer = answer.clone();
            let conn = http.serve_connection(
                TokioIo::new(stream),
                service_fn(move |req| {
                    let reply = answer(req);
                    async move { Ok::<_, std::convert::Infallible>(reply.await) }
                }),
            );
            tokio::spawn(conn);
        }
    });
    Ok((url, runtime))
}

impl Drop for Receiver {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

fn header_i64(req: &Request<Incoming>, name: &str) -> Option<i64> {
    req.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
}

async fn receive(state: &State, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let at_us = now_us();
    let tag = req
        .uri()
        .path()
        .trim_start_matches('/')
        .split('/')
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let task_id = header_i64(&req, "x-service-task-id");
    let schedule_id = header_i64(&req, "x-service-schedule-id");
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let sent_us = serde_json::from_slice::<Probe>(&body)
        .ok()
        .and_then(|p| p.sent_us);
    let delivery = Delivery {
        at_us,
        tag,
        task_id,
        schedule_id,
        sent_us,
    };
    state
        .deliveries
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry(tag)
        .or_default()
        .push(delivery);
    state.count.fetch_add(1, Ordering::Release);
    Response::new(Full::new(Bytes::new()))
}
