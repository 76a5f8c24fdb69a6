//! The one API error type: each variant maps to an HTTP status and an envelope `code`
//! (docs/design.md §3). Internal errors are logged with their detail and answered opaquely.

use hyper::StatusCode;
use std::fmt;

/// An error answered to an API client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    /// The envelope's non-zero `code`.
    pub code: u32,
    /// A human message naming the offending field or header.
    pub message: String,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, code: u32, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }

    /// 40001: a field is missing, of the wrong type, or out of range.
    pub fn validation(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, 40001, message)
    }

    /// 40002: the body is not JSON, or not a JSON object.
    pub fn bad_json(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, 40002, message)
    }

    /// 40003: the request line or a header could not be parsed (hyper's own 400).
    pub fn malformed_request() -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            40003,
            "request: the request line or a header is not valid HTTP/1.1",
        )
    }

    /// 41401: the request target is longer than the server reads.
    pub fn uri_too_long() -> Self {
        Self::new(
            StatusCode::URI_TOO_LONG,
            41401,
            "request: the URI is too long",
        )
    }

    /// 43101: too many headers, or a request head larger than the server reads.
    pub fn headers_too_large() -> Self {
        Self::new(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            43101,
            "request: too many headers, or headers too large (at most 100 headers)",
        )
    }

    pub fn auth_missing(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, 40101, message)
    }

    pub fn auth_unknown_key() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            40102,
            "X-Key-ID: unknown or revoked API key",
        )
    }

    /// 40102 too: the key exists but its `expires_at` has passed.
    pub fn auth_expired_key(expired_at: i64) -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            40102,
            format!(
                "X-Key-ID: this API key expired at {}; make a new one",
                crate::clock::rfc3339(expired_at)
            ),
        )
    }

    pub fn auth_bad_signature() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            40103,
            "X-Signature: signature does not match (HMAC-SHA256 of X-Timestamp + \"\\n\" + payload)",
        )
    }

    pub fn auth_skew(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, 40104, message)
    }

    pub fn auth_replay() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            40105,
            "X-Signature: this signature was already used; sign each request anew",
        )
    }

    /// 40301: the request is outside its key's scope (docs/design.md §17).
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, 40301, message)
    }

    /// 40401: no such route, or no such record in the caller's app.
    pub fn not_found(what: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, 40401, what)
    }

    pub fn method_not_allowed(method: &str, path: &str) -> Self {
        Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            40501,
            format!("method {method} is not allowed on {path}"),
        )
    }

    /// 40901: the record's state does not allow the operation.
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, 40901, message)
    }

    pub fn too_large(limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            41301,
            format!("request body is larger than the limit of {limit} bytes"),
        )
    }

    /// 40801: the request body did not arrive in time (`--body-timeout-secs`,
    /// `--body-min-rate`); the connection closes.
    pub fn body_timeout(message: impl Into<String>) -> Self {
        Self::new(StatusCode::REQUEST_TIMEOUT, 40801, message)
    }

    /// 42901: the key sent more requests than `--rate-limit` allows.
    pub fn rate_limited(retry_after_ms: u64) -> Self {
        Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            42901,
            format!("rate limit exceeded for this API key; retry in {retry_after_ms} ms"),
        )
    }

    /// 42901 also: the app has as many test deliveries in flight as it may (`bound`).
    pub fn too_many_tests(bound: usize) -> Self {
        Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            42901,
            format!(
                "this app already has {bound} test deliveries in flight, the most allowed; retry when one has answered"
            ),
        )
    }

    /// 50301: the disk holding the database is full. Writes work again once space is freed.
    pub fn disk_full() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            50301,
            "the disk holding the database is full; free space on it (writes resume without a restart)",
        )
    }

    /// 50302: the database cannot be written for another reason (a read-only file or mount,
    /// the file deleted or replaced while running, I/O errors); the message says which.
    pub fn unwritable(message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, 50302, message)
    }

    /// 50303: too many connections (overall or from the caller's address); retry later.
    pub fn too_many_connections(why: &str) -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            50303,
            format!("too many connections: {why}; retry later, or reuse one connection"),
        )
    }

    /// 50001: logs the detail, answers nothing secret.
    pub fn internal(detail: impl fmt::Display) -> Self {
        tracing::error!(error = %detail, "internal error");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            50001,
            "internal error; the server log has the detail",
        )
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}

impl std::error::Error for ApiError {}

/// The store's unavailable causes become 503s that say what to fix (docs/design.md §10); anything
/// else is an internal error.
impl From<crate::store::StoreError> for ApiError {
    fn from(err: crate::store::StoreError) -> Self {
        use crate::store::StoreError;
        match err {
            StoreError::DiskFull(message) => {
                Self::new(StatusCode::SERVICE_UNAVAILABLE, 50301, message)
            }
            StoreError::Unwritable(message) => ApiError::unwritable(message),
            // Reaches a handler only when a signed request's guard rolled its transaction back
            // (a replay, a revoked key): the guard's own 401 replaces it (`auth::RequestGuard`).
            StoreError::Aborted => Self::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                50001,
                "the transaction was rolled back",
            ),
            StoreError::Other(e) => ApiError::internal(format!("database: {e:#}")),
        }
    }
}

/// Result of an API handler.
pub type ApiResult<T> = Result<T, ApiError>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreError;

    #[test]
    fn unwritable_database_errors_are_503_with_their_own_codes() {
        let full = ApiError::from(StoreError::DiskFull(
            "the disk holding the database is full".into(),
        ));
        assert_eq!((full.status.as_u16(), full.code), (503, 50301));
        assert!(full.message.contains("disk holding the database is full"));
        let ro = ApiError::from(StoreError::Unwritable("the database is read-only".into()));
        assert_eq!((ro.status.as_u16(), ro.code), (503, 50302));
        assert!(ro.message.contains("read-only"));
        let other = ApiError::from(StoreError::Other(anyhow::anyhow!("constraint")));
        assert_eq!(other.code, 50001);
    }
}
