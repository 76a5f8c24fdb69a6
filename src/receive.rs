//! `webhookd receive`: a webhook receiver for trying webhookd out and for debugging an endpoint.
//! It listens, checks both signatures of each delivery with [`signing::verify_delivery`],
//! prints every delivery on stdout, and answers 204 — or 401 when the signatures do not verify.

use crate::signing;
use anyhow::Context;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;
use std::sync::Arc;

/// Bodies above this are answered 413 and not printed: webhookd's own payload limit is far below.
const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;

/// How `webhookd receive` was asked to run.
#[derive(Debug, Clone)]
pub struct ReceiveOptions {
    pub listen: SocketAddr,
    /// The endpoint's signing secret; `None` prints deliveries without verifying them.
    pub secret: Option<String>,
    /// Largest accepted distance of `X-Service-Timestamp` from this machine's clock.
    pub tolerance_secs: i64,
}

/// Runs the receiver until the process is stopped. The address actually bound (useful with
/// port 0) is printed on stderr before the first delivery can arrive.
pub fn run(options: ReceiveOptions) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the receiver's runtime")?;
    runtime.block_on(serve(options))
}

async fn serve(options: ReceiveOptions) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(options.listen)
        .await
        .with_context(|| {
            format!(
                "cannot listen on {} (is the port taken? try another --port)",
                options.listen
            )
        })?;
    let bound = listener.local_addr().context("no local address")?;
    eprintln!(
        "webhookd receive: listening on http://{bound}/ ({})",
        if options.secret.is_some() {
            "verifying signatures"
        } else {
            "no --secret: printing deliveries without verifying them"
        }
    );
    let options = Arc::new(options);
    loop {
        let (stream, _) = listener.accept().await.context("accept failed")?;
        let options = Arc::clone(&options);
        tokio::spawn(async move {
            let service = service_fn(move |req: Request<Incoming>| {
                let options = Arc::clone(&options);
                async move { Ok::<_, hyper::Error>(handle(req, &options).await) }
            });
            // A client that goes away mid-request is not worth a message.
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

async fn handle(req: Request<Incoming>, options: &ReceiveOptions) -> Response<Full<Bytes>> {
    let (parts, body) = req.into_parts();
    let body = match Limited::new(body, MAX_BODY_BYTES).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => return reply(StatusCode::PAYLOAD_TOO_LARGE),
    };
    let header = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok());
    let verdict = options.secret.as_deref().map(|secret| {
        signing::verify_delivery(
            secret,
            header,
            &body,
            chrono::Utc::now().timestamp(),
            options.tolerance_secs,
        )
    });
    let (status, outcome) = match verdict {
        None => (
            StatusCode::NO_CONTENT,
            "not verified (no --secret)".to_string(),
        ),
        Some(Ok(())) => (
            StatusCode::NO_CONTENT,
            "verified (X-Service-Signature, webhook-signature)".to_string(),
        ),
        Some(Err(why)) => (StatusCode::UNAUTHORIZED, format!("REFUSED with 401: {why}")),
    };
    let origin = match (header("X-Service-Event"), header("X-Service-Schedule-Id")) {
        (Some(event), _) => format!(" event={event}"),
        (None, Some(schedule)) => format!(" schedule={schedule}"),
        (None, None) => String::new(),
    };
    // One write per delivery, so that concurrent deliveries never interleave their lines.
    println!(
        "{} {} task={} attempt={}{origin}: {outcome}\n  {}",
        parts.method,
        parts.uri,
        header("X-Service-Task-Id").unwrap_or("-"),
        header("X-Service-Attempt").unwrap_or("-"),
        String::from_utf8_lossy(&body)
    );
    reply(status)
}

fn reply(status: StatusCode) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = status;
    response
}
