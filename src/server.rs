//! The HTTP server: a hyper 1 accept loop, the envelope on every reply, the body limit, and
//! the hand-off of each `/v1` request to a blocking thread (auth → route → handler → store).

use crate::api::{self, Ctx, Data, Request, input::Query};
use crate::app::App;
use crate::auth;
use crate::connections::{Admission, Caps, Gate, LogEvery, Reserved, Slot};
use crate::error::{ApiError, ApiResult};
use crate::replay_behind::ReadReplays;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{CONTENT_LENGTH, CONTENT_TYPE, HeaderValue};
use hyper::service::service_fn;
use hyper::{Method, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde::Serialize;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

type Reply = Response<Full<Bytes>>;

/// What a server's connections share besides the [`App`].
struct Shared {
    app: Arc<App>,
    /// Replay records of reads served while the store refuses writes (`auth::RequestGuard`).
    replay: Arc<auth::ReplayMemory>,
    /// Reads' replay records written after their answers, where one process owns the store
    /// (`replay_behind`).
    behind: Option<Arc<ReadReplays>>,
    /// The API keys held in memory (`auth::KeyCache`).
    keys: Arc<auth::KeyCache>,
    /// Blocking threads that API requests may hold at once (see [`API_THREADS`]).
    api_threads: Arc<Semaphore>,
    /// Bodies cut for arriving too slowly, logged once per interval.
    slow_bodies: LogEvery,
}

/// Blocking threads API requests may hold at once: tokio's pool has 512, and the 64 left over
/// stay free for `/healthz`, `/metrics` and the server's own work, whatever the API waits on.
const API_THREADS: usize = 448;

/// A request body gets this long before `--body-min-rate` applies (a client may pause while it
/// starts; a body of a byte every ten seconds is cut soon after).
const BODY_GRACE: Duration = Duration::from_secs(5);

/// The longest an accept loop pauses after failed accepts (out of file descriptors): it
/// starts at 10 ms and doubles, and goes back to none at the next accepted connection.
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// A reserved connection (beyond a connection cap) must send its request head within this.
const RESERVED_HEADER_TIMEOUT: Duration = Duration::from_secs(2);

/// Serves the API on `listener` until `shutdown` completes, then stops accepting and lets open
/// connections finish their current request (up to the shutdown grace). Connections are
/// capped overall and per peer address (`connections::Gate`); the accept loop never stops,
/// backing off while accepts fail.
pub async fn serve_http(
    app: Arc<App>,
    listener: TcpListener,
    caps: Caps,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let gate = Gate::new(caps);
    let replay = Arc::<auth::ReplayMemory>::default();
    let writer = if app.store.owned_by_one_process() {
        Some(ReadReplays::start(app.store.clone(), replay.clone())?)
    } else {
        None
    };
    let (behind, writer) = writer.unzip();
    let shared = Arc::new(Shared {
        app: app.clone(),
        replay,
        behind,
        keys: Arc::default(),
        api_threads: Arc::new(Semaphore::new(API_THREADS)),
        slow_bodies: LogEvery::new(LOG_INTERVAL),
    });
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(hyper_util::rt::TokioTimer::new())
        .keep_alive(true)
        .header_read_timeout(Duration::from_secs(30));
    let mut reserved_http = http.clone();
    reserved_http
        .keep_alive(false)
        .header_read_timeout(RESERVED_HEADER_TIMEOUT);
    let (accept_errors, refusals) = (LogEvery::new(LOG_INTERVAL), LogEvery::new(LOG_INTERVAL));
    let mut backoff = Duration::ZERO;
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = &mut shutdown => break,
        };
        let (stream, peer) = match accepted {
            Ok(conn) => {
                backoff = Duration::ZERO;
                conn
            }
            Err(e) => {
                backoff = (backoff * 2).clamp(Duration::from_millis(10), ACCEPT_BACKOFF_MAX);
                accept_errors.hit(|failed| {
                    tracing::warn!(
                        error = %e,
                        failed,
                        "accept failed; retrying with a back-off (out of file descriptors: lower --max-connections or raise the limit)"
                    )
                });
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => continue,
                    _ = &mut shutdown => break,
                }
            }
        };
        let _ = stream.set_nodelay(true);
        match gate.admit(peer.ip()) {
            Admission::Normal(slot) => {
                serve_connection(&graceful, &http, &shared, stream, slot, None);
            }
            Admission::Reserved(slot, reserved) => {
                let how = (&reserved_http, reserved);
                serve_connection(&graceful, &http, &shared, stream, slot, Some(how));
            }
            Admission::Refused(why) => {
                refusals.hit(|refused| {
                    tracing::warn!(peer = %peer.ip(), refused, "connections refused: {why}")
                });
                refuse(&stream, why);
            }
        }
    }
    drop(listener);
    let grace = Duration::from_secs(app.config.shutdown_grace_secs);
    if tokio::time::timeout(grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("some connections were still open after the shutdown grace");
    }
    if let Some(writer) = writer {
        tokio::task::spawn_blocking(move || writer.stop()).await?;
    }
    Ok(())
}

/// How often a flood's log line (failed accepts, refusals, cut bodies) is written at most.
const LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Why a reserved connection answers only `/healthz` and `/metrics`.
const RESERVED_WHY: &str = "the server or your address is at its connection cap";

/// Serves one admitted connection on its own task; `slot` is given back when it ends. A
/// reserved connection (`reserved`: its own builder and state) answers `/healthz` and
/// `/metrics` only, and ends early when the gate evicts it for a newer one.
fn serve_connection(
    graceful: &hyper_util::server::graceful::GracefulShutdown,
    http: &hyper::server::conn::http1::Builder,
    shared: &Arc<Shared>,
    stream: TcpStream,
    slot: Slot,
    reserved: Option<(&hyper::server::conn::http1::Builder, Arc<Reserved>)>,
) {
    let (stream, head_request) = crate::wire::Enveloped::new(stream);
    let shared = shared.clone();
    let state = reserved.as_ref().map(|(_, state)| state.clone());
    let service = service_fn(move |req: hyper::Request<Incoming>| {
        let shared = shared.clone();
        head_request.store(req.method() == Method::HEAD, Ordering::SeqCst);
        if let Some(state) = &state {
            state.head_received.store(true, Ordering::SeqCst);
        }
        let why = state.is_some().then_some(RESERVED_WHY);
        // A clone of the URI shares its bytes: no copy of the path per request.
        let uri = req.uri().clone();
        async move {
            let reply = with_allow(handle(shared, req, why).await, uri.path());
            Ok::<_, std::convert::Infallible>(reply)
        }
    });
    let http = reserved.as_ref().map_or(http, |(builder, _)| *builder);
    let conn = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
    let evicted = reserved.map(|(_, state)| state);
    tokio::spawn(async move {
        let _slot = slot;
        let evicted = async {
            match &evicted {
                Some(state) => state.evicted().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            ended = conn => {
                if let Err(e) = ended {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
            }
            _ = evicted => {}
        }
    });
}

/// Answers a connection beyond every cap with a 503 at once, without reading its request, and
/// closes it (the client may see the reply or only the close).
fn refuse(stream: &TcpStream, why: &str) {
    let request_id = crate::request_id::next();
    let (_, body) = envelope_body(&request_id, Err(ApiError::too_many_connections(why)));
    let mut reply = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nx-request-id: {request_id}\r\nretry-after: 1\r\nconnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    reply.extend_from_slice(&body);
    let _ = stream.try_write(&reply);
}

/// The envelope of a refusal: its `data` is `null`.
#[derive(Serialize)]
struct Envelope<'a> {
    code: u32,
    message: &'a str,
    request_id: &'a str,
    data: (),
}

fn json_reply(status: StatusCode, request_id: &str, body: Vec<u8>) -> Reply {
    let mut reply = Response::new(Full::new(Bytes::from(body)));
    *reply.status_mut() = status;
    let headers = reply.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if let Ok(id) = HeaderValue::from_str(request_id) {
        headers.insert("x-request-id", id);
    }
    reply
}

/// A 405 names the methods the path takes in `Allow`, as RFC 9110 requires (unless the part
/// that answered, such as the dashboard's files, has set it already).
fn with_allow(mut reply: Reply, path: &str) -> Reply {
    if reply.status() != StatusCode::METHOD_NOT_ALLOWED
        || reply.headers().contains_key(hyper::header::ALLOW)
    {
        return reply;
    }
    let methods = api::allowed_methods(path);
    if !methods.is_empty()
        && let Ok(allow) = HeaderValue::from_str(&methods.join(", "))
    {
        reply.headers_mut().insert(hyper::header::ALLOW, allow);
    }
    reply
}

/// A handler's result as the envelope's bytes, with its status. A success's `data` is the
/// handler's JSON text, written in as is (`api::Data`).
fn envelope_body(request_id: &str, result: ApiResult<Data>) -> (StatusCode, Vec<u8>) {
    match result {
        Ok(data) => {
            let data = data.as_bytes();
            let mut body = Vec::with_capacity(data.len() + 80);
            body.extend_from_slice(br#"{"code":0,"message":"success","request_id":"#);
            // A request id is plain text, but written as any JSON string would be.
            let _ = serde_json::to_writer(&mut body, request_id);
            body.extend_from_slice(br#","data":"#);
            body.extend_from_slice(data);
            body.push(b'}');
            (StatusCode::OK, body)
        }
        Err(e) => {
            let body = serde_json::to_vec(&Envelope {
                code: e.code,
                message: &e.message,
                request_id,
                data: (),
            })
            .unwrap_or_default();
            (e.status, body)
        }
    }
}

/// Wraps a handler's result in the envelope.
fn envelope(request_id: &str, result: ApiResult<Data>) -> Reply {
    let (status, body) = envelope_body(request_id, result);
    json_reply(status, request_id, body)
}

/// Answers one request. On a reserved connection (`reserved`: why it is one), only `/healthz`
/// and `/metrics` are answered; anything else gets 503 and the connection closes.
async fn handle(
    shared: Arc<Shared>,
    req: hyper::Request<Incoming>,
    reserved: Option<&'static str>,
) -> Reply {
    let app = shared.app.clone();
    let request_id = crate::request_id::next();
    let deadline = BodyDeadline::new(&app.config);
    let uri = req.uri().clone();
    let path = uri.path();
    if let Some(why) = reserved {
        let probe = matches!(req.method(), &Method::GET | &Method::HEAD)
            && (path == "/healthz" || path == "/metrics");
        if !probe {
            let mut reply = envelope(&request_id, Err(ApiError::too_many_connections(why)));
            reply
                .headers_mut()
                .insert(hyper::header::RETRY_AFTER, HeaderValue::from_static("1"));
            close_after(&mut reply);
            return reply;
        }
    }
    let early = match (req.method(), path) {
        (&Method::GET | &Method::HEAD, "/healthz") => {
            Some(health(app.clone(), &request_id).await.into())
        }
        (&Method::GET, "/metrics") if app.config.metrics => {
            Some(metrics(app.clone(), &request_id).await.into())
        }
        (&Method::GET, api::OPENAPI_PATH) => Some(openapi(&request_id).into()),
        (_, "/healthz" | api::OPENAPI_PATH) => {
            Some(ApiError::method_not_allowed(req.method().as_str(), path).into())
        }
        (_, "/metrics") if app.config.metrics => {
            Some(ApiError::method_not_allowed(req.method().as_str(), path).into())
        }
        _ if crate::ui::owns(path) => {
            Some(crate::ui::serve(req.method(), path, req.headers()).into())
        }
        _ if !path.starts_with("/v1/") => {
            Some(ApiError::not_found(format!("no route {path}; API paths begin with /v1")).into())
        }
        _ => None,
    }
    .map(|e| match e {
        Early::Reply(reply) => reply,
        Early::Error(e) => envelope(&request_id, Err(e)),
    });
    if let Some(mut reply) = early {
        if reserved.is_some() {
            close_after(&mut reply);
            return reply;
        }
        // Answered without looking at the body: read what the client sends anyway, so the
        // connection can carry its next request, or say that it closes.
        let limit = app.config.max_body_bytes;
        return finish_unread(&shared, reply, req.into_body(), limit, deadline).await;
    }
    let (result, body) = handle_api(&shared, req, deadline).await;
    if let Err(e) = &result
        && e.status.is_server_error()
    {
        tracing::warn!(request_id, code = e.code, "request failed");
    }
    let mut reply = envelope(&request_id, result);
    match body {
        BodyLeft::Read => reply,
        BodyLeft::Unread(body) => {
            finish_unread(&shared, reply, body, REFUSED_BODY_DRAIN, deadline).await
        }
        BodyLeft::Broken => {
            close_after(&mut reply);
            reply
        }
    }
}

/// A body refused before it was read (bad credentials) is still read and dropped up to this
/// size, so that a small request's connection carries on; a larger one is not read at all.
const REFUSED_BODY_DRAIN: usize = 64 * 1024;

/// What became of a request's body.
enum BodyLeft {
    /// Read to its end.
    Read,
    /// Refused before it was read: drain a small one, close on a large one.
    Unread(Incoming),
    /// Read in part (too slow, too large, broken): the connection closes.
    Broken,
}

/// A reply given before the body was read: a finished reply, or an error to wrap.
enum Early {
    Reply(Reply),
    Error(ApiError),
}

impl From<Reply> for Early {
    fn from(reply: Reply) -> Self {
        Early::Reply(reply)
    }
}

impl From<ApiError> for Early {
    fn from(e: ApiError) -> Self {
        Early::Error(e)
    }
}

/// Reads and discards a body the reply did not need, up to `limit` bytes and within the body
/// deadline; a longer, slower (or broken) one gets `Connection: close` instead, since hyper
/// would otherwise close the connection without saying so.
async fn finish_unread(
    shared: &Shared,
    mut reply: Reply,
    mut body: Incoming,
    limit: usize,
    deadline: BodyDeadline,
) -> Reply {
    use hyper::body::Body;
    if body.size_hint().lower() > limit as u64 {
        close_after(&mut reply);
        return reply;
    }
    let mut seen = 0usize;
    while !body.is_end_stream() {
        match deadline.frame(shared, &mut body, seen).await {
            Ok(Some(frame)) => {
                seen += frame.data_ref().map_or(0, |d| d.len());
                if seen > limit {
                    close_after(&mut reply);
                    break;
                }
            }
            Err(_) => {
                close_after(&mut reply);
                break;
            }
            Ok(None) => break,
        }
    }
    reply
}

/// Tells the client that the server closes the connection after this reply.
fn close_after(reply: &mut Reply) {
    reply
        .headers_mut()
        .insert(hyper::header::CONNECTION, HeaderValue::from_static("close"));
}

/// `GET`/`HEAD /healthz` (docs/design.md §10): 200 with the version when the database can be read
/// and written, else 503 with the reason (what to fix). No signature needed.
async fn health(app: Arc<App>, request_id: &str) -> Reply {
    let served = app.clone();
    let result = tokio::task::spawn_blocking(move || {
        app.store.health(app.clock.now_ms()).map_err(ApiError::from)
    })
    .await
    .unwrap_or_else(|e| Err(ApiError::internal(format!("health check panicked: {e}"))));
    let (status, mut body) = match result {
        Ok(()) => (
            StatusCode::OK,
            serde_json::json!({"status": "ok", "version": env!("CARGO_PKG_VERSION")}),
        ),
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            serde_json::json!({"status": "unavailable", "reason": e.message}),
        ),
    };
    if let Some(backup) = crate::backup::health_detail(&served.metrics) {
        body["backup"] = backup;
    }
    json_reply(status, request_id, body.to_string().into_bytes())
}

/// `GET /v1/openapi.json`: the API's OpenAPI document (docs/design.md §14); no signature needed, so
/// that viewers and client generators can load it.
fn openapi(request_id: &str) -> Reply {
    json_reply(
        StatusCode::OK,
        request_id,
        api::OPENAPI_DOCUMENT.as_bytes().to_vec(),
    )
}

/// `GET /metrics`: Prometheus text (docs/design.md §9); no signature needed.
async fn metrics(app: Arc<App>, request_id: &str) -> Reply {
    let rendered = tokio::task::spawn_blocking(move || {
        let counts = app
            .store
            .read(|tx| tx.count_tasks_by_status())
            .map_err(|e| e.to_string())?;
        Ok::<_, String>(app.metrics.render(&counts, app.spans.counts()))
    })
    .await
    .unwrap_or_else(|e| Err(e.to_string()));
    match rendered {
        Ok(text) => {
            let mut reply = json_reply(StatusCode::OK, request_id, text.into_bytes());
            reply.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static(
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                ),
            );
            reply
        }
        Err(e) => envelope(request_id, Err(ApiError::internal(format!("metrics: {e}")))),
    }
}

/// When a request body must have arrived: whole within `--body-timeout-secs` of the request
/// head, and after the first [`BODY_GRACE`] at least `--body-min-rate` bytes a second on
/// average (docs/API.md, "Limits").
#[derive(Debug, Clone, Copy)]
struct BodyDeadline {
    start: tokio::time::Instant,
    total: Duration,
    min_rate: u64,
}

impl BodyDeadline {
    fn new(config: &crate::config::Config) -> Self {
        BodyDeadline {
            start: tokio::time::Instant::now(),
            total: config.body_timeout,
            min_rate: config.body_min_rate,
        }
    }

    /// How long after the head the body may take with `received` bytes in; and whether the
    /// total time limit (rather than the rate) is what sets it.
    fn allowed(&self, received: usize) -> (Duration, bool) {
        if self.min_rate == 0 {
            return (self.total, true);
        }
        let earned_ms = (received as u64).saturating_mul(1000) / self.min_rate;
        let by_rate = BODY_GRACE
            .min(self.total)
            .saturating_add(Duration::from_millis(earned_ms));
        if by_rate < self.total {
            (by_rate, false)
        } else {
            (self.total, true)
        }
    }

    /// The body's next frame, or 408 when the deadline for `received` bytes passes first (the
    /// cut is counted and logged once per interval).
    async fn frame(
        &self,
        shared: &Shared,
        body: &mut Incoming,
        received: usize,
    ) -> ApiResult<Option<hyper::body::Frame<Bytes>>> {
        let (allowed, by_total) = self.allowed(received);
        match tokio::time::timeout_at(self.start + allowed, body.frame()).await {
            Ok(Some(Ok(frame))) => Ok(Some(frame)),
            Ok(Some(Err(e))) => Err(ApiError::bad_json(format!("body: could not be read ({e})"))),
            Ok(None) => Ok(None),
            Err(_) => {
                shared.slow_bodies.hit(|cut| {
                    tracing::warn!(
                        cut,
                        "request bodies cut for arriving too slowly (--body-timeout-secs, --body-min-rate)"
                    )
                });
                Err(ApiError::body_timeout(if by_total {
                    format!(
                        "body: not received within {} s (--body-timeout-secs); send the body with the request",
                        self.total.as_secs_f64()
                    )
                } else {
                    format!(
                        "body: arriving slower than {} bytes a second (--body-min-rate); {received} bytes came in {} s",
                        self.min_rate,
                        allowed.as_secs()
                    )
                }))
            }
        }
    }
}

/// Reads the body up to the limit, within the body deadline. An oversized body is still read
/// to its end (up to a cap) and thrown away, so that the client, which is still sending, gets
/// the 413 instead of a reset.
async fn read_body(
    shared: &Shared,
    mut body: Incoming,
    declared_len: Option<u64>,
    deadline: BodyDeadline,
) -> ApiResult<Bytes> {
    const DRAIN_CAP: usize = 64 * 1024 * 1024;
    let limit = shared.app.config.max_body_bytes;
    let mut collected = Vec::new();
    let mut seen = 0usize;
    let mut too_large = declared_len.is_some_and(|len| len > limit as u64);
    if declared_len.is_some_and(|len| len > DRAIN_CAP as u64) {
        return Err(ApiError::too_large(limit));
    }
    while let Some(frame) = deadline.frame(shared, &mut body, seen).await? {
        let Ok(data) = frame.into_data() else {
            continue;
        };
        seen += data.len();
        if seen > limit {
            too_large = true;
        }
        if too_large {
            if seen > DRAIN_CAP {
                break;
            }
            continue;
        }
        collected.extend_from_slice(&data);
    }
    if too_large {
        return Err(ApiError::too_large(limit));
    }
    Ok(Bytes::from(collected))
}

/// Runs `work` on a blocking thread, at most [`API_THREADS`] at once (the permit is held by
/// the thread, so a client that goes away does not free it early). `in_place`: on the
/// runtime's own thread instead ([`reads_in_place`]), under the same bound, in
/// `block_in_place`; `on_runtime` (with `in_place`): on that thread as it is, `work` moving
/// into `block_in_place` itself whatever may wait ([`one_resource`]). Either way a panic of
/// `work` is a 500.
async fn on_api_thread<T: Send + 'static>(
    shared: &Arc<Shared>,
    in_place: bool,
    on_runtime: bool,
    work: impl FnOnce(&Shared) -> T + Send + 'static,
) -> ApiResult<T> {
    let permit = shared
        .api_threads
        .clone()
        .acquire_owned()
        .await
        .map_err(ApiError::internal)?;
    if in_place && on_runtime {
        let _permit = permit;
        return std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(shared)))
            .map_err(|_| ApiError::internal("handler panicked"));
    }
    if in_place {
        let _permit = permit;
        let run = std::panic::AssertUnwindSafe(|| work(shared));
        return tokio::task::block_in_place(|| std::panic::catch_unwind(run))
            .map_err(|_| ApiError::internal("handler panicked"));
    }
    let shared = shared.clone();
    tokio::task::spawn_blocking(move || {
        let _permit = permit;
        work(&shared)
    })
    .await
    .map_err(|e| ApiError::internal(format!("handler panicked: {e}")))
}

/// Whether a `GET` or a publish runs on the runtime's own thread
/// ([`tokio::task::block_in_place`]) instead of a blocking thread's: where a read's replay
/// record is written after its answer (`replay_behind`), a signed `GET` is one read and no
/// write, and the hand-off to a blocking thread and back cost it more than its read; a publish
/// gained a little too, waiting for its group commit there (docs/dev/storage.md, "Reads on the
/// runtime's thread"). `block_in_place` hands the thread's other tasks to another thread first,
/// so the runtime keeps answering meanwhile. Needs the multi-threaded runtime `serve` uses.
fn reads_in_place(shared: &Shared) -> bool {
    shared.behind.is_some()
        && tokio::runtime::Handle::current().runtime_flavor()
            == tokio::runtime::RuntimeFlavor::MultiThread
}

/// Whether a `GET` run in place ([`reads_in_place`]) runs on the runtime's thread without
/// `block_in_place`: a read of one resource by its id (the path ends in a numeric id, no
/// query), whose statements find their rows by key. `block_in_place` itself costs a thread
/// hand-off per request, more than such a read (docs/dev/storage.md, "Reads on the runtime's
/// thread"); the request moves into it for whatever may wait (`auth::RequestGuard::on_runtime`),
/// and a list, whose page can take long, keeps it for all its work.
fn one_resource(uri: &hyper::Uri) -> bool {
    let last = uri.path().rsplit('/').next().unwrap_or_default();
    uri.query().is_none() && !last.is_empty() && last.bytes().all(|b| b.is_ascii_digit())
}

/// Authenticates, reads the body, then routes and runs the request on a blocking thread. A
/// request with a body is authenticated from its headers first (key, timestamp, signature
/// format), so that a stranger is refused before the server reads what it sends.
async fn handle_api(
    shared: &Arc<Shared>,
    req: hyper::Request<Incoming>,
    deadline: BodyDeadline,
) -> (ApiResult<Data>, BodyLeft) {
    use hyper::body::Body;
    let (parts, body) = req.into_parts();
    let declared_len = parts
        .headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let (parts, caller) = if body.is_end_stream() {
        (parts, None)
    } else {
        // A key held in memory is checked here; only a key to read from the store needs a
        // blocking thread.
        let app = &shared.app;
        let (now_ms, skew) = (app.clock.now_ms(), app.config.max_skew_secs);
        let checked = match auth::check_headers(&shared.keys, None, now_ms, skew, &parts.headers) {
            Ok(Some(caller)) => Ok((parts, Ok(caller))),
            Ok(None) => {
                on_api_thread(shared, false, false, move |shared| {
                    let store = Some(&*shared.app.store);
                    let caller =
                        auth::check_headers(&shared.keys, store, now_ms, skew, &parts.headers)
                            .and_then(|c| c.ok_or_else(ApiError::auth_unknown_key));
                    (parts, caller)
                })
                .await
            }
            Err(e) => Ok((parts, Err(e))),
        };
        match checked {
            Ok((parts, Ok(caller))) => (parts, Some(caller)),
            Ok((_, Err(e))) | Err(e) => return (Err(e), BodyLeft::Unread(body)),
        }
    };
    let body = match read_body(shared, body, declared_len, deadline).await {
        Ok(body) => body,
        Err(e) => return (Err(e), BodyLeft::Broken),
    };
    // A publish too (docs/dev/storage.md, "Reads on the runtime's thread").
    let is_get = parts.method == Method::GET;
    let in_place = (is_get || parts.uri.path() == "/v1/events") && reads_in_place(shared);
    let on_runtime = in_place && is_get && one_resource(&parts.uri);
    let result = on_api_thread(shared, in_place, on_runtime, move |shared| {
        handle_blocking(shared, &parts, body, caller, on_runtime)
    })
    .await
    .and_then(|result| result);
    (result, BodyLeft::Read)
}

/// Runs one request on a blocking thread in its trace (docs/API.md, "Traces"): a valid
/// `traceparent` makes the request's span the caller's child, and the tasks it makes continue
/// that trace; its span is exported when export is on. `caller` is the key when the headers
/// were checked already; `on_runtime`: it runs on the runtime's thread ([`one_resource`]).
fn handle_blocking(
    shared: &Shared,
    parts: &hyper::http::request::Parts,
    body: Bytes,
    caller: Option<auth::Caller>,
    on_runtime: bool,
) -> ApiResult<Data> {
    let app = &*shared.app;
    let started = std::time::Instant::now();
    let start_ms = app.clock.now_ms();
    let parent = parts
        .headers
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .and_then(crate::trace::SpanContext::parse);
    let own = parent.map(|c| c.child());
    let mut traces = crate::trace::TaskTraces::new(own, app.spans.on());
    let mut app_id = None;
    let result = handle_authenticated(
        shared,
        parts,
        body,
        caller,
        on_runtime,
        &mut traces,
        &mut app_id,
    );
    if app.spans.on() {
        let status = match &result {
            Ok(_) => StatusCode::OK,
            Err(e) => e.status,
        };
        let request = crate::spans::RequestSpan {
            name: crate::spans::route_name(parts.method.as_str(), parts.uri.path()),
            caller: parent,
            own,
            app_id: app_id.as_deref(),
            status: status.as_u16(),
            start_ms,
            took: started.elapsed(),
        };
        app.spans.request(request, &traces);
    }
    result
}

/// Authenticates (with `caller` when the headers were checked already), routes and runs one
/// request; sets `caller_app` once the caller is known (only when spans are exported: it is the
/// request span's `webhookd.app`). `on_runtime`: it runs on the runtime's thread, where a key
/// not held is read in `block_in_place`.
fn handle_authenticated(
    shared: &Shared,
    parts: &hyper::http::request::Parts,
    body: Bytes,
    caller: Option<auth::Caller>,
    on_runtime: bool,
    traces: &mut crate::trace::TaskTraces,
    caller_app: &mut Option<String>,
) -> ApiResult<Data> {
    let app = &*shared.app;
    let now_ms = app.clock.now_ms();
    let path_and_query = parts
        .uri
        .path_and_query()
        .map(|pq| pq.as_str())
        .unwrap_or("/");
    let check = |store: Option<&dyn crate::store::Store>| {
        auth::check_headers(
            &shared.keys,
            store,
            now_ms,
            app.config.max_skew_secs,
            &parts.headers,
        )
    };
    let caller = match caller {
        Some(caller) => Some(caller),
        None if on_runtime => match check(None)? {
            Some(caller) => Some(caller),
            None => tokio::task::block_in_place(|| check(Some(&*app.store)))?,
        },
        None => check(Some(&*app.store))?,
    }
    .ok_or_else(ApiError::auth_unknown_key)?;
    caller.verify(parts.method.as_str(), path_and_query, &body)?;
    // A read is served while the store refuses writes; its replay record is then kept in
    // memory (docs/API.md, "Limits").
    let read_only = parts.method == Method::GET;
    let guard = auth::RequestGuard::begin(
        app.store.clone(),
        shared.keys.clone(),
        shared.replay.clone(),
        shared.behind.clone(),
        caller,
        now_ms,
        read_only,
    )?
    .on_runtime(on_runtime);
    let caller = guard.caller();
    if app.spans.on() {
        *caller_app = Some(caller.app_id.clone());
    }
    let result = (|| {
        app.rate_limit
            .check(&caller.key_id)
            .map_err(ApiError::rate_limited)?;
        let (handler, ids) = api::resolve(parts.method.as_str(), parts.uri.path())?;
        auth::check_scope(caller, parts.method.as_str(), parts.uri.path())?;
        let request = Request {
            method: parts.method.to_string(),
            path: parts.uri.path().to_string(),
            query: Query::parse(parts.uri.query()),
            body,
            ids,
            checked: Default::default(),
        };
        let mut ctx = Ctx {
            app,
            app_id: &caller.app_id,
            key_id: &caller.key_id,
            store: &guard,
            now_ms,
            traces,
        };
        api::dispatch(handler, &mut ctx, &request)
    })();
    // Nothing is answered before the request's replay record is written and its key checked.
    guard.finish(result)
}

/// A started server: its address, its shared state, and the handle to stop it.
pub struct Running {
    pub addr: std::net::SocketAddr,
    pub app: Arc<App>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Running {
    /// Stops accepting, lets in-flight work finish within the grace, and waits for the end.
    pub async fn shutdown(mut self) -> anyhow::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.wait().await
    }

    /// Waits until the server stops on its own (its shutdown future completed).
    pub async fn wait(self) -> anyhow::Result<()> {
        self.task.await?
    }
}

/// Binds `config.listen`, opens the database, and runs the API, the scheduler and the delivery
/// pool until `shutdown` completes or [`Running::shutdown`] is called.
pub async fn start(
    config: crate::config::Config,
    clock: Arc<dyn crate::clock::Clock>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<Running> {
    use anyhow::Context;
    let listener = TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot listen on {} (change --listen)", config.listen))?;
    start_on(config, listener, clock, shutdown).await
}

/// [`start`] on a listener bound by the caller (the binary binds before it makes the
/// first-start key, so that a start that cannot listen creates no key).
pub async fn start_on(
    config: crate::config::Config,
    listener: TcpListener,
    clock: Arc<dyn crate::clock::Clock>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<Running> {
    let db = config.db.clone();
    let pool_size = u32::try_from(config.workers + 8).unwrap_or(32);
    let now_ms = clock.now_ms();
    let options = crate::store::OpenOptions {
        pool_size,
        wal_limit_bytes: config.wal_limit_bytes,
        sqlite_sync: config.sqlite_sync,
        pg: config.pg,
        ..Default::default()
    };
    let store = tokio::task::spawn_blocking(move || {
        let store = crate::store::open_with(&db, options)?;
        store.require_writable(now_ms)?;
        Ok::<_, anyhow::Error>(store)
    })
    .await??;
    let addr = listener.local_addr()?;
    let caps = Caps::derive(
        config.max_connections,
        config.max_connections_per_peer,
        crate::connections::raise_fd_limit(),
        config.workers,
    );
    let mut app = App::new(config, store, clock);
    app.spans = crate::spans::Spans::start(app.config.otlp_endpoint.as_deref())
        .map_err(|e| anyhow::anyhow!("cannot start the OTLP export thread: {e}"))?;
    let app = Arc::new(app);
    let background = crate::background::Background::start(app.clone())?;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let served = app.clone();
    let task = tokio::spawn(async move {
        // One stop signal starts both the HTTP drain and the background stop, so that they
        // share the shutdown grace instead of taking it one after the other.
        let (stop_background, background_stopping) = tokio::sync::oneshot::channel::<()>();
        let stopped = async move {
            tokio::select! {
                _ = shutdown => {}
                _ = stop_rx => {}
            }
            let _ = stop_background.send(());
        };
        let background = async move {
            let _ = background_stopping.await;
            tokio::task::spawn_blocking(move || background.stop()).await
        };
        let flushed = served.clone();
        let (result, stopped_background) =
            tokio::join!(serve_http(served, listener, caps, stopped), background);
        stopped_background?;
        // The last spans (the final attempts') go out before the process ends.
        tokio::task::spawn_blocking(move || flushed.spans.shutdown()).await?;
        result
    });
    tracing::info!(
        %addr,
        store = %app.store.describe(),
        max_connections = caps.total,
        max_connections_per_peer = caps.per_peer,
        reserved_for_health = caps.reserve,
        "webhookd listening"
    );
    Ok(Running {
        addr,
        app,
        stop: Some(stop_tx),
        task,
    })
}

#[cfg(test)]
mod tests {
    use super::one_resource;

    /// Only a read of one resource by its numeric id runs on the runtime's thread as it is:
    /// lists (a query, or a collection after the id) keep `block_in_place`.
    #[test]
    fn one_resource_is_a_path_ending_in_an_id_without_a_query() {
        for (uri, one) in [
            ("/v1/endpoints/12", true),
            ("/v1/tasks/7", true),
            ("/v1/endpoints", false),
            ("/v1/endpoints/", false),
            ("/v1/tasks?status=failed", false),
            ("/v1/tasks/7/attempts", false),
            ("/v1/tasks/7?x=1", false),
            ("/v1/keys/k_abc", false),
            ("/v1/endpoints/1a", false),
        ] {
            let parsed: hyper::Uri = uri.parse().unwrap();
            assert_eq!(one_resource(&parsed), one, "{uri}");
        }
    }
}
