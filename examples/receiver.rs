//! A webhook receiver that verifies webhookd's signatures — a starting point for your own.
//!
//! ```sh
//! cargo run --example receiver -- 127.0.0.1:9000 'whsec_c2VjcmV0LWtleS1mb3ItdGVzdHM='
//! ```
//! It checks both `X-Service-Signature` (hex HMAC-SHA256 over `timestamp + "\n" + body`) and
//! the Standard Webhooks `webhook-signature`, rejects stale timestamps (over 5 minutes), prints
//! each delivery, and answers 204 — or 401 when a signature does not verify.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;

/// Largest clock difference accepted between webhookd and this receiver.
const TOLERANCE_SECS: i64 = 300;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let listen = args.next().unwrap_or_else(|| "127.0.0.1:9000".into());
    let secret = args.next();
    let listener = TcpListener::bind(&listen)?;
    eprintln!(
        "receiver listening on http://{listen} (secret: {})",
        if secret.is_some() {
            "set"
        } else {
            "none, not verifying"
        }
    );
    for stream in listener.incoming() {
        let mut stream = stream?;
        let mut reader = BufReader::new(stream.try_clone()?);
        let mut request_line = String::new();
        reader.read_line(&mut request_line)?;
        let mut headers = Vec::new();
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line)? == 0 || line.trim().is_empty() {
                break;
            }
            if let Some((k, v)) = line.split_once(':') {
                headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
            }
        }
        let get = |name: &str| {
            headers
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
        };
        let length: usize = get("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0; length];
        reader.read_exact(&mut body)?;
        let verdict = match &secret {
            None => Ok(()),
            Some(secret) => verify(secret, &get, &body),
        };
        println!(
            "{} task={} attempt={} event={} schedule={} verified={:?}\n  {}",
            request_line.trim(),
            get("x-service-task-id").unwrap_or("-"),
            get("x-service-attempt").unwrap_or("-"),
            get("x-service-event").unwrap_or("-"),
            get("x-service-schedule-id").unwrap_or("-"),
            verdict,
            String::from_utf8_lossy(&body)
        );
        let status = if verdict.is_ok() {
            "204 No Content"
        } else {
            "401 Unauthorized"
        };
        write!(
            stream,
            "HTTP/1.1 {status}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )?;
    }
    Ok(())
}

/// Checks both signatures and the timestamp's freshness.
fn verify<'a>(
    secret: &str,
    get: &impl Fn(&str) -> Option<&'a str>,
    body: &[u8],
) -> Result<(), String> {
    let timestamp = get("x-service-timestamp").ok_or("no X-Service-Timestamp")?;
    let sent: i64 = timestamp.parse().map_err(|_| "bad X-Service-Timestamp")?;
    if (chrono::Utc::now().timestamp() - sent).abs() > TOLERANCE_SECS {
        return Err("stale timestamp".into());
    }
    let hex = get("x-service-signature").ok_or("no X-Service-Signature")?;
    if !webhookd::signing::verify_hex(secret.as_bytes(), timestamp, body, hex) {
        return Err("X-Service-Signature does not verify".into());
    }
    let msg_id = get("webhook-id").ok_or("no webhook-id")?;
    let expected = webhookd::signing::standard_webhooks_signature(secret, msg_id, sent, body);
    // webhook-signature may carry several space-separated signatures; any may match.
    let header = get("webhook-signature").ok_or("no webhook-signature")?;
    if !header
        .split(' ')
        .any(|candidate| constant_time_eq(candidate.as_bytes(), expected.as_bytes()))
    {
        return Err("webhook-signature does not verify".into());
    }
    Ok(())
}

/// Compares without an early exit, so timing does not reveal how much of a guess was right.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
