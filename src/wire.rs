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
/// Body bytes written in the same call as their head are sent with it, up to this many (a
/// copy); longer bodies pass through as hyper writes them.
const MAX_JOINED_BODY: usize = 16 * 1024;
/// The send buffer a connection keeps between replies, at most (heads and small replies).
const KEEP_OUT: usize = 4 * 1024;

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
        if self.out.capacity() > KEEP_OUT {
            // A joined body made it large: an idle keep-alive connection holds no more than this.
            self.out = Vec::new();
        }
        Poll::Ready(Ok(()))
    }

    /// Queues up to [`MAX_JOINED_BODY`] bytes of the current response's body from the start of
    /// `rest` behind its head; returns how many.
    fn take_body(&mut self, rest: &[u8]) -> usize {
        if self.blind {
            return 0;
        }
        let n = rest
            .len()
            .min(MAX_JOINED_BODY)
            .min(usize::try_from(self.body_left).unwrap_or(usize::MAX));
        self.out.extend_from_slice(&rest[..n]);
        self.body_left -= n as u64;
        n
    }

    /// A complete head: queue it (or its replacement) and learn how long its body is. Header
    /// names are matched without regard to case, on the head as written (no lower-cased copy);
    /// the head's buffer is kept for the next reply.
    fn finish_head(&mut self) {
        let head = std::mem::take(&mut self.head);
        self.queue_head(&head);
        self.head = head;
        self.head.clear();
    }

    fn queue_head(&mut self, head: &[u8]) {
        let text = String::from_utf8_lossy(head);
        if !starts_with_ignoring_case(&text, "http/1.") {
            self.blind = true;
            self.out.extend_from_slice(head);
            return;
        }
        let no_body = self.head_request.load(Ordering::SeqCst);
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
        self.out.extend_from_slice(head);
    }
}

fn starts_with_ignoring_case(text: &str, prefix: &str) -> bool {
    text.as_bytes()
        .get(..prefix.len())
        .is_some_and(|start| start.eq_ignore_ascii_case(prefix.as_bytes()))
}

/// The value of a header in a head, the name (lower case) matched without regard to case.
fn header_value<'t>(head: &'t str, name: &str) -> Option<&'t str> {
    head.split("\r\n")
        .skip(1)
        .find_map(|line| {
            let value = line.get(name.len()..)?;
            starts_with_ignoring_case(line, name)
                .then_some(value)?
                .strip_prefix(':')
        })
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
                let head_taken = end - before;
                // The body hyper wrote in the same buffer (it flattens a small reply into one)
                // goes out with its head: one send instead of two.
                let body = this.take_body(&buf[head_taken..]);
                head_taken + body
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
        // Names in any case, matched on the head as written (its values keep their case).
        let written = "HTTP/1.1 200 OK\r\nContent-Length: 7\r\nDate: Wed, 26 Nov\r\n\r\n";
        assert_eq!(header_value(written, "content-length"), Some("7"));
        assert_eq!(header_value(written, "date"), Some("Wed, 26 Nov"));
        assert_eq!(header_value(written, "content-type"), None);
        assert!(starts_with_ignoring_case(written, "http/1."));
    }

    /// A writer that records each write it is given.
    #[derive(Default)]
    struct Writes(Vec<Vec<u8>>);

    impl AsyncWrite for Writes {
        fn poll_write(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            self.get_mut().0.push(buf.to_vec());
            Poll::Ready(Ok(buf.len()))
        }

        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    /// Writes `buf` through the wrapper as hyper does: until all of it was taken.
    fn write_all(w: &mut Enveloped<Writes>, mut buf: &[u8]) {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        while !buf.is_empty() {
            match Pin::new(&mut *w).poll_write(&mut cx, buf) {
                Poll::Ready(Ok(n)) => buf = &buf[n..],
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn a_small_reply_written_at_once_is_sent_at_once() {
        let (mut w, _) = Enveloped::new(Writes::default());
        let head = "HTTP/1.1 200 OK\r\nx-request-id: req_1\r\ncontent-length: 7\r\n\r\n";
        // Head and body in one buffer, then the next reply on the same connection.
        write_all(&mut w, format!("{head}{{\"a\":1}}").as_bytes());
        write_all(&mut w, format!("{head}{{\"b\":2}}").as_bytes());
        let sent: Vec<String> = w
            .inner
            .0
            .iter()
            .map(|b| String::from_utf8_lossy(b).into())
            .collect();
        assert_eq!(
            sent,
            [format!("{head}{{\"a\":1}}"), format!("{head}{{\"b\":2}}")]
        );
        // A body longer than MAX_JOINED_BODY: its start goes with the head, the rest after.
        let (mut w, _) = Enveloped::new(Writes::default());
        let body = "x".repeat(MAX_JOINED_BODY + 10);
        let head = format!(
            "HTTP/1.1 200 OK\r\nx-request-id: req_2\r\ncontent-length: {}\r\n\r\n",
            body.len()
        );
        write_all(&mut w, format!("{head}{body}").as_bytes());
        let sent = w.inner.0.concat();
        assert_eq!(sent, format!("{head}{body}").into_bytes());
        assert_eq!(w.inner.0.len(), 2);
        assert_eq!(w.inner.0[0].len(), head.len() + MAX_JOINED_BODY);
        assert!(
            w.out.capacity() <= KEEP_OUT,
            "the joined body's buffer is not kept"
        );
        // A protocol error head of hyper's is still replaced, and what follows it passes.
        let (mut w, _) = Enveloped::new(Writes::default());
        write_all(
            &mut w,
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n",
        );
        let sent = String::from_utf8(w.inner.0.concat()).unwrap();
        assert!(
            sent.contains("x-request-id: req_") && sent.contains("\"data\":null"),
            "{sent}"
        );
    }
}
