//! The HTTP server: a hyper 1 accept loop, the envelope on every reply, the body limit, and
//! the hand-off of each `/v1` request to a blocking thread (auth → route → handler → store).

use crate::api::{self, Ctx, Request, input::Query};
use crate::app::App;
use crate::auth::{self, SignedParts};
use crate::error::{ApiError, ApiResult};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{CONTENT_LENGTH, CONTENT_TYPE, HeaderValue};
use hyper::service::service_fn;
use hyper::{Method, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde::Serialize;
use serde_json::Value;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::net::TcpListener;

type Reply = Response<Full<Bytes>>;

/// Serves the API on `listener` until `shutdown` completes, then stops accepting and lets open
/// connections finish their current request (up to the shutdown grace).
pub async fn serve_http(
    app: Arc<App>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(hyper_util::rt::TokioTimer::new())
        .keep_alive(true)
        .header_read_timeout(Duration::from_secs(30));
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, _) = match accepted {
                    Ok(conn) => conn,
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let (stream, head_request) = crate::wire::Enveloped::new(stream);
                let app = app.clone();
                let service = service_fn(move |req: hyper::Request<Incoming>| {
                    let app = app.clone();
                    head_request.store(req.method() == Method::HEAD, Ordering::SeqCst);
                    let path = req.uri().path().to_string();
                    async move {
                        let reply = with_allow(handle(app, req).await, &path);
                        Ok::<_, std::convert::Infallible>(reply)
                    }
                });
                let conn = http.serve_connection(TokioIo::new(stream), service);
                let conn = graceful.watch(conn);
                tokio::spawn(async move {
                    if let Err(e) = conn.await {
                        tracing::debug!(error = %e, "connection ended with an error");
                    }
                });
            }
            _ = &mut shutdown => break,
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
    Ok(())
}

static REQUEST_COUNTER: AtomicU64 = AtomicU64::new(0);
static REQUEST_PREFIX: std::sync::OnceLock<String> = std::sync::OnceLock::new();

pub(crate) fn next_request_id() -> String {
    let prefix = REQUEST_PREFIX.get_or_init(|| format!("{:08x}", rand::random::<u32>()));
    let n = REQUEST_COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("req_{prefix}{n:010x}")
}

#[derive(Serialize)]
struct Envelope<'a> {
    code: u32,
    message: &'a str,
    request_id: &'a str,
    data: &'a Value,
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

/// Wraps a handler's result in the envelope.
fn envelope(request_id: &str, result: ApiResult<Value>) -> Reply {
    let (status, code, message, data) = match &result {
        Ok(data) => (StatusCode::OK, 0, "success", data),
        Err(e) => (e.status, e.code, e.message.as_str(), &Value::Null),
    };
    let body = serde_json::to_vec(&Envelope {
        code,
        message,
        request_id,
        data,
    })
    .unwrap_or_default();
    json_reply(status, request_id, body)
}

async fn handle(app: Arc<App>, req: hyper::Request<Incoming>) -> Reply {
    let request_id = next_request_id();
    let path = req.uri().path().to_string();
    let early = match (req.method(), path.as_str()) {
        (&Method::GET | &Method::HEAD, "/healthz") => {
            Some(health(app.clone(), &request_id).await.into())
        }
        (&Method::GET, "/metrics") if app.config.metrics => {
            Some(metrics(app.clone(), &request_id).await.into())
        }
        (&Method::GET, api::OPENAPI_PATH) => Some(openapi(&request_id).into()),
        (_, "/healthz" | api::OPENAPI_PATH) => {
            Some(ApiError::method_not_allowed(req.method().as_str(), &path).into())
        }
        (_, "/metrics") if app.config.metrics => {
            Some(ApiError::method_not_allowed(req.method().as_str(), &path).into())
        }
        _ if crate::ui::owns(&path) => {
            Some(crate::ui::serve(req.method(), &path, req.headers()).into())
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
    if let Some(reply) = early {
        // Answered without looking at the body: read what the client sends anyway, so the
        // connection can carry its next request, or say that it closes.
        let limit = app.config.max_body_bytes;
        return finish_unread(reply, req.into_body(), limit).await;
    }
    let (result, body_unread) = handle_api(app, req).await;
    if let Err(e) = &result
        && e.status.is_server_error()
    {
        tracing::warn!(request_id, code = e.code, "request failed");
    }
    let mut reply = envelope(&request_id, result);
    if body_unread {
        close_after(&mut reply);
    }
    reply
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

/// Reads and discards a body the reply did not need, up to `limit` bytes; a longer (or broken)
/// one gets `Connection: close` instead, since hyper would otherwise close the connection
/// without saying so.
async fn finish_unread(mut reply: Reply, mut body: Incoming, limit: usize) -> Reply {
    use hyper::body::Body;
    if body.size_hint().lower() > limit as u64 {
        close_after(&mut reply);
        return reply;
    }
    let mut seen = 0usize;
    while !body.is_end_stream() {
        match body.frame().await {
            Some(Ok(frame)) => {
                seen += frame.data_ref().map_or(0, |d| d.len());
                if seen > limit {
                    close_after(&mut reply);
                    break;
                }
            }
            Some(Err(_)) => {
                close_after(&mut reply);
                break;
            }
            None => break,
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

/// `GET`/`HEAD /healthz` (contract §10): 200 with the version when the database can be read
/// and written, else 503 with the reason (what to fix). No signature needed.
async fn health(app: Arc<App>, request_id: &str) -> Reply {
    let result = tokio::task::spawn_blocking(move || {
        app.store.health(app.clock.now_ms()).map_err(ApiError::from)
    })
    .await
    .unwrap_or_else(|e| Err(ApiError::internal(format!("health check panicked: {e}"))));
    let (status, body) = match result {
        Ok(()) => (
            StatusCode::OK,
            serde_json::json!({"status": "ok", "version": env!("CARGO_PKG_VERSION")}),
        ),
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            serde_json::json!({"status": "unavailable", "reason": e.message}),
        ),
    };
    json_reply(status, request_id, body.to_string().into_bytes())
}

/// `GET /v1/openapi.json`: the API's OpenAPI document (contract §14); no signature needed, so
/// that viewers and client generators can load it.
fn openapi(request_id: &str) -> Reply {
    json_reply(
        StatusCode::OK,
        request_id,
        api::OPENAPI_DOCUMENT.as_bytes().to_vec(),
    )
}

/// `GET /metrics`: Prometheus text (contract §9); no signature needed.
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

/// Reads the body up to the limit. An oversized body is still read to its end (up to a cap) and
/// thrown away, so that the client, which is still sending, gets the 413 instead of a reset.
async fn read_body(app: &App, mut body: Incoming, declared_len: Option<u64>) -> ApiResult<Bytes> {
    const DRAIN_CAP: usize = 64 * 1024 * 1024;
    let limit = app.config.max_body_bytes;
    let mut collected = Vec::new();
    let mut seen = 0usize;
    let mut too_large = declared_len.is_some_and(|len| len > limit as u64);
    if declared_len.is_some_and(|len| len > DRAIN_CAP as u64) {
        return Err(ApiError::too_large(limit));
    }
    while let Some(frame) = body.frame().await {
        let frame =
            frame.map_err(|e| ApiError::bad_json(format!("body: could not be read ({e})")))?;
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

/// Reads the body, then authenticates, routes and runs the request on a blocking thread. The
/// flag is true when the body was not read to its end (the connection must close).
async fn handle_api(app: Arc<App>, req: hyper::Request<Incoming>) -> (ApiResult<Value>, bool) {
    let (parts, body) = req.into_parts();
    let declared_len = parts
        .headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let body = match read_body(&app, body, declared_len).await {
        Ok(body) => body,
        Err(e) => return (Err(e), true),
    };
    let result = tokio::task::spawn_blocking(move || handle_blocking(&app, &parts, body))
        .await
        .unwrap_or_else(|e| Err(ApiError::internal(format!("handler panicked: {e}"))));
    (result, false)
}

/// Runs one request on a blocking thread in its trace (docs/API.md, "Traces"): a valid
/// `traceparent` makes the request's span the caller's child, and the tasks it makes continue
/// that trace; its span is exported when export is on.
fn handle_blocking(
    app: &App,
    parts: &hyper::http::request::Parts,
    body: Bytes,
) -> ApiResult<Value> {
    let started = std::time::Instant::now();
    let start_ms = app.clock.now_ms();
    let caller = parts
        .headers
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .and_then(crate::trace::SpanContext::parse);
    let own = caller.map(|c| c.child());
    let mut traces = crate::trace::TaskTraces::new(own, app.spans.on());
    let mut app_id = None;
    let result = handle_authenticated(app, parts, body, &mut traces, &mut app_id);
    if app.spans.on() {
        let status = match &result {
            Ok(_) => StatusCode::OK,
            Err(e) => e.status,
        };
        let request = crate::spans::RequestSpan {
            name: crate::spans::route_name(parts.method.as_str(), parts.uri.path()),
            caller,
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

/// Authenticates, routes and runs one request; sets `caller_app` once the caller is known
/// (only when spans are exported: it is the request span's `webhookd.app`).
fn handle_authenticated(
    app: &App,
    parts: &hyper::http::request::Parts,
    body: Bytes,
    traces: &mut crate::trace::TaskTraces,
    caller_app: &mut Option<String>,
) -> ApiResult<Value> {
    let now_ms = app.clock.now_ms();
    let path_and_query = parts
        .uri
        .path_and_query()
        .map(|pq| pq.as_str())
        .unwrap_or("/");
    let app_id = auth::authenticate(
        &*app.store,
        now_ms,
        app.config.max_skew_secs,
        &SignedParts {
            headers: &parts.headers,
            method: parts.method.as_str(),
            path_and_query,
            body: &body,
        },
    )?;
    if app.spans.on() {
        *caller_app = Some(app_id.clone());
    }
    let key_id = parts
        .headers
        .get("X-Key-ID")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    app.rate_limit
        .check(key_id)
        .map_err(ApiError::rate_limited)?;
    let (handler, ids) = api::resolve(parts.method.as_str(), parts.uri.path())?;
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
        app_id: &app_id,
        store: &*app.store,
        now_ms,
        traces,
    };
    api::dispatch(handler, &mut ctx, &request)
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
        ..Default::default()
    };
    let store = tokio::task::spawn_blocking(move || {
        let store = crate::store::open_with(&db, options)?;
        store.require_writable(now_ms)?;
        Ok::<_, anyhow::Error>(store)
    })
    .await??;
    let addr = listener.local_addr()?;
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
            tokio::join!(serve_http(served, listener, stopped), background);
        stopped_background?;
        // The last spans (the final attempts') go out before the process ends.
        tokio::task::spawn_blocking(move || flushed.spans.shutdown()).await?;
        result
    });
    tracing::info!(%addr, store = %app.store.describe(), "webhookd listening");
    Ok(Running {
        addr,
        app,
        stop: Some(stop_tx),
        task,
    })
}
