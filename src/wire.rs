//! The connection wrapper that puts hyper's own protocol-error replies into the envelope.
//!
//! When a request head cannot be parsed (a malformed request line or header → 400, a URI too
//! long → 414, too many or too large headers → 431), hyper answers by itself before any
//! service runs, with an empty body and no `X-Request-Id`, and closes the connection. hyper 1
//! has no hook for that reply, so this wrapper watches the bytes written to the socket: each
//! response head is held until its blank line, and a 400/414/431 head without `x-request-id`
//! (every reply of the service carries one) is replaced by the same status with the JSON
//! envelope, an id and `Connection: close`. Everything else passes through unchanged; bodies
//! are skipped by their `content-length`.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, ready};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A head longer than this is passed through without a look (hyper's own are tiny).
const MAX_HEAD: usize = 64 * 1024;

/// Wraps a connection's stream; see the module documentation.
pub struct Enveloped<T> {
    inner: T,
    /// Set by the service while it answers a HEAD request, whose reply has no body.
    head_request: Arc<AtomicBool>,
    /// The response head being written, until its blank line.
    head: Vec<u8>,
    /// Body bytes of the current response still to pass through.
    body_left: u64,
    /// Set when a response's framing cannot be followed (chunked): pass everything through.
    blind: bool,
    /// Bytes taken from hyper and not yet written to `inner`.
    out: Vec<u8>,
    out_pos: usize,
}

impl<T> Enveloped<T> {
    /// The wrapper and the flag the service sets while answering a HEAD request.
    pub fn new(inner: T) -> (Self, Arc<AtomicBool>) {
        let head_request = Arc::new(AtomicBool::new(false));
        let wrapped = Enveloped {
            inner,
            head_request: head_request.clone(),
            head: Vec::new(),
            body_left: 0,
            blind: false,
            out: Vec::new(),
            out_pos: 0,
        };
        (wrapped, head_request)
    }
}

impl<T: AsyncWrite + Unpin> Enveloped<T> {
    /// Writes out what was taken from hyper but not yet sent.
    fn drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.out_pos < self.out.len() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.out[self.out_pos..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.out_pos += n;
        }
        self.out.clear();
        self.out_pos = 0;
        Poll::Ready(Ok(()))
    }

    /// A complete head: queue it (or its replacement) and learn how long its body is.
    fn finish_head(&mut self) {
        let head = std::mem::take(&mut self.head);
        let text = String::from_utf8_lossy(&head).to_ascii_lowercase();
        let no_body = self.head_request.load(Ordering::SeqCst);
        if !text.starts_with("http/1.") {
            self.blind = true;
            self.out.extend_from_slice(&head);
            return;
        }
        let status = text.get(9..12).unwrap_or_default();
        if let Some(replacement) = protocol_error_reply(status, &text) {
            self.out.extend_from_slice(&replacement);
            return;
        }
        match header_value(&text, "content-length").and_then(|v| v.parse::<u64>().ok()) {
            Some(len) if !no_body => self.body_left = len,
            Some(_) => {}
            None if header_value(&text, "transfer-encoding").is_some() => self.blind = true,
            None => {}
        }
        self.out.extend_from_slice(&head);
    }
}

/// The value of a header in a lower-cased head.
fn header_value<'t>(head: &'t str, name: &str) -> Option<&'t str> {
    head.split("\r\n")
        .skip(1)
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
}

/// The envelope reply replacing one of hyper's automatic error heads, if `head` is one.
fn protocol_error_reply(status: &str, head: &str) -> Option<Vec<u8>> {
    if header_value(head, "x-request-id").is_some() {
        return None;
    }
    let (status, reason, error) = match status {
        "400" => (
            400,
            "Bad Request",
            crate::error::ApiError::malformed_request(),
        ),
        "414" => (414, "URI Too Long", crate::error::ApiError::uri_too_long()),
        "431" => (
            431,
            "Request Header Fields Too Large",
            crate::error::ApiError::headers_too_large(),
        ),
        _ => return None,
    };
    let request_id = crate::request_id::next();
    let body = serde_json::json!({
        "code": error.code,
        "message": error.message,
        "request_id": request_id,
        "data": null,
    })
    .to_string();
    let date = header_value(head, "date")
        .map(|d| format!("date: {d}\r\n"))
        .unwrap_or_default();
    let mut reply = format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nx-request-id: {request_id}\r\nconnection: close\r\n{date}\r\n",
        body.len()
    )
    .into_bytes();
    reply.extend_from_slice(body.as_bytes());
    Some(reply)
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Enveloped<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.drain(cx))?;
        if this.blind {
            return Pin::new(&mut this.inner).poll_write(cx, buf);
        }
        if this.body_left > 0 {
            let n = buf
                .len()
                .min(usize::try_from(this.body_left).unwrap_or(usize::MAX));
            let written = ready!(Pin::new(&mut this.inner).poll_write(cx, &buf[..n]))?;
            this.body_left -= written as u64;
            return Poll::Ready(Ok(written));
        }
        // Inside a head: take bytes up to its blank line.
        let searched_from = this.head.len().saturating_sub(3);
        let before = this.head.len();
        this.head.extend_from_slice(buf);
        let taken = match find(&this.head[searched_from..], b"\r\n\r\n") {
            Some(at) => {
                let end = searched_from + at + 4;
                this.head.truncate(end);
                this.finish_head();
                end - before
            }
            None if this.head.len() > MAX_HEAD => {
                this.blind = true;
                this.out.append(&mut this.head);
                buf.len()
            }
            None => buf.len(),
        };
        // The bytes are ours now; send what the socket takes, the rest at the next call.
        if let Poll::Ready(Err(e)) = this.drain(cx) {
            return Poll::Ready(Err(e));
        }
        Poll::Ready(Ok(taken))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.drain(cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.drain(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Enveloped<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_only_hyper_error_heads() {
        let hyper_head =
            "http/1.1 431 request header fields too large\r\ncontent-length: 0\r\ndate: x\r\n\r\n";
        let reply = protocol_error_reply("431", hyper_head).unwrap();
        let text = String::from_utf8(reply).unwrap();
        assert!(text.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\n"));
        assert!(text.contains("x-request-id: req_"));
        assert!(text.ends_with("\"data\":null}") || text.contains("\"data\":null"));
        let ours = "http/1.1 400 bad request\r\nx-request-id: req_1\r\ncontent-length: 10\r\n\r\n";
        assert!(protocol_error_reply("400", ours).is_none());
        assert!(protocol_error_reply("404", "http/1.1 404 not found\r\n\r\n").is_none());
        assert_eq!(header_value(ours, "content-length"), Some("10"));
    }
}
