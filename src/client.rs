//! A blocking, signing client for the webhookd API: used by `webhookd api`, the tests, the
//! benchmark and the examples, so that there is one implementation of request signing.

use crate::auth::signed_payload;
use crate::signing::hmac_hex;
use anyhow::Context;
use serde_json::Value;
use std::time::Duration;

/// Talks to one webhookd server with one API key.
#[derive(Clone)]
pub struct Client {
    base_url: String,
    key_id: String,
    secret: String,
    agent: ureq::Agent,
    /// The last X-Timestamp sent: each request gets a later one, so two identical requests in
    /// the same millisecond never share a signature (the server refuses a replayed one).
    last_timestamp: std::sync::Arc<std::sync::atomic::AtomicI64>,
}

/// A reply: HTTP status and the parsed envelope.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub body: Value,
}

impl Reply {
    /// The envelope's `code` (-1 when the reply was not an envelope).
    pub fn code(&self) -> i64 {
        self.body["code"].as_i64().unwrap_or(-1)
    }

    pub fn data(&self) -> &Value {
        &self.body["data"]
    }
}

impl Client {
    pub fn new(base_url: &str, key_id: &str, secret: &str) -> Self {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .timeout_global(Some(Duration::from_secs(60)))
            .max_idle_connections_per_host(64)
            .build()
            .into();
        Client {
            base_url: base_url.trim_end_matches('/').to_string(),
            key_id: key_id.to_string(),
            secret: secret.to_string(),
            agent,
            last_timestamp: Default::default(),
        }
    }

    /// Another client of the same key on its own connections (to `base_url`), sharing this
    /// one's timestamps: the two never send the same signature (load drivers with one key on
    /// many threads).
    pub fn same_key(&self, base_url: &str) -> Self {
        Client {
            last_timestamp: self.last_timestamp.clone(),
            ..Client::new(base_url, &self.key_id, &self.secret)
        }
    }

    /// The path under `/v1` (a leading `/v1` is added when missing).
    fn full_path(path: &str) -> String {
        let path = if path.starts_with('/') {
            path.to_string()
        } else {
            format!("/{path}")
        };
        if path.starts_with("/v1/") || path == "/v1" {
            path
        } else {
            format!("/v1{path}")
        }
    }

    /// The three auth headers for a request.
    pub fn auth_headers(
        &self,
        method: &str,
        path_and_query: &str,
        body: &[u8],
    ) -> [(&'static str, String); 3] {
        use std::sync::atomic::Ordering;
        let now = chrono::Utc::now().timestamp_millis();
        let previous = self
            .last_timestamp
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |last| {
                Some(now.max(last + 1))
            })
            .unwrap_or(now);
        let timestamp = now.max(previous + 1).to_string();
        let payload = signed_payload(method, path_and_query, body);
        let signature = hmac_hex(self.secret.as_bytes(), &timestamp, &payload);
        [
            ("X-Key-ID", self.key_id.clone()),
            ("X-Timestamp", timestamp),
            ("X-Signature", signature),
        ]
    }

    /// Sends a signed request; `body` is sent as given (JSON text), or nothing when empty.
    pub fn send_raw(&self, method: &str, path: &str, body: &[u8]) -> anyhow::Result<Reply> {
        let path = Self::full_path(path);
        let mut builder = ureq::http::Request::builder()
            .method(method)
            .uri(format!("{}{}", self.base_url, path));
        for (name, value) in self.auth_headers(method, &path, body) {
            builder = builder.header(name, value);
        }
        if !body.is_empty() {
            builder = builder.header("Content-Type", "application/json");
        }
        let request = builder.body(body.to_vec()).context("bad request")?;
        let mut response = self
            .agent
            .run(request)
            .with_context(|| format!("cannot reach {}", self.base_url))?;
        let status = response.status().as_u16();
        let text = response
            .body_mut()
            .with_config()
            .limit(64 * 1024 * 1024)
            .read_to_string()
            .context("cannot read the reply")?;
        let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Ok(Reply { status, body })
    }

    /// Sends a signed request with an optional JSON body.
    pub fn send(&self, method: &str, path: &str, body: Option<&Value>) -> anyhow::Result<Reply> {
        let bytes = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
        self.send_raw(method, path, &bytes)
    }
}
