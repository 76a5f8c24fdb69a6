//! The `/v1` API: a table of routes, each to a handler in one file per resource. Handlers run
//! on a blocking thread and reach the database through `ctx.store` (`store::Store`); they return
//! the envelope's `data`.

pub mod endpoints;
pub mod events;
pub mod input;
pub mod keys;
pub mod policies;
pub mod schedules;
pub mod tasks;

use crate::app::App;
use crate::error::{ApiError, ApiResult};
use crate::store::Store;
use bytes::Bytes;
use input::{Body, Query};
use serde_json::Value;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// One API request as a handler sees it.
pub struct Request {
    pub method: String,
    /// Path without the query, e.g. `/v1/endpoints/7`.
    pub path: String,
    pub query: Query,
    pub body: Bytes,
    /// The `{id}` segments of the matched route, in order.
    pub ids: Vec<i64>,
    /// Set once the handler has checked the body for unknown fields ([`Body::finish`] or
    /// [`Request::no_body`]); see [`dispatch`].
    pub checked: Arc<AtomicBool>,
}

impl Request {
    /// The first `{id}` of the route.
    pub fn id(&self) -> i64 {
        self.ids.first().copied().unwrap_or_default()
    }

    /// The JSON object body. The handler reads its fields, then calls one of the `finish`
    /// methods before it writes anything.
    pub fn json(&self) -> ApiResult<Body> {
        Ok(Body::parse(&self.body)?.with_flag(self.checked.clone()))
    }

    /// For routes that take no body: any field sent is unknown (40001). Call it first.
    pub fn no_body(&self) -> ApiResult<()> {
        self.json()?.finish()
    }

    /// The last segment of the path: the `{key_id}` of a keys route.
    pub fn segment(&self) -> &str {
        self.path
            .trim_end_matches('/')
            .rsplit('/')
            .next()
            .unwrap_or_default()
    }

    fn body_is_blank(&self) -> bool {
        self.body.iter().all(u8::is_ascii_whitespace)
    }
}

/// Runs a handler with the unknown-field rule of docs/design.md §3 around it. Only `GET` routes read
/// query parameters and they write nothing, so their parameters (and any body fields, which
/// none takes) are checked after the handler has read what it takes; other methods take no
/// query parameter, so one is refused before the handler runs. A body sent to a route whose
/// handler returns without checking it is a bug in that handler: logged, and fatal in debug
/// builds so that a test sending a body finds it.
pub fn dispatch(handler: Handler, ctx: &mut Ctx<'_>, req: &Request) -> ApiResult<Data> {
    req.query.refuse_nul()?;
    if req.method == "GET" {
        let data = handler(ctx, req)?;
        req.query.finish()?;
        if !req.body_is_blank() {
            req.no_body()?;
        }
        return Ok(data);
    }
    req.query.finish()?;
    // Writing into a file the path no longer names would be lost: 503 instead (docs/design.md §10).
    ctx.app.store.quick_check()?;
    let data = handler(ctx, req)?;
    if !req.body_is_blank() && !req.checked.load(Ordering::Relaxed) {
        tracing::error!(
            method = %req.method,
            path = %req.path,
            "handler did not check its body for unknown fields (call Body::finish or Request::no_body)"
        );
        debug_assert!(false, "{} {} did not check its body", req.method, req.path);
    }
    Ok(data)
}

/// What a handler works with: the server, the caller's app, the store, and "now".
pub struct Ctx<'a> {
    pub app: &'a App,
    pub app_id: &'a str,
    /// The key that signed the request (`whk_…`).
    pub key_id: &'a str,
    pub store: &'a dyn Store,
    pub now_ms: i64,
    /// The traces of the tasks this request makes (`trace::TaskTraces`).
    pub traces: &'a mut crate::trace::TaskTraces,
}

pub type Handler = fn(&mut Ctx<'_>, &Request) -> ApiResult<Data>;

/// One route: a method and a path pattern under `/v1`, where `{id}` stands for an integer and
/// `{key_id}` for any one segment (an API key id, which the handler reads: [`Request::segment`]).
struct Route {
    method: &'static str,
    pattern: &'static str,
    handler: Handler,
}

const fn route(method: &'static str, pattern: &'static str, handler: Handler) -> Route {
    Route {
        method,
        pattern,
        handler,
    }
}

static ROUTES: &[Route] = &[
    route("POST", "endpoints", endpoints::create),
    route("GET", "endpoints", endpoints::list),
    route("GET", "endpoints/{id}", endpoints::get),
    route("PATCH", "endpoints/{id}", endpoints::update),
    route("DELETE", "endpoints/{id}", endpoints::delete),
    route("POST", "endpoints/{id}/enable", endpoints::enable),
    route("POST", "endpoints/{id}/disable", endpoints::disable),
    route(
        "POST",
        "endpoints/{id}/rotate-secret",
        endpoints::rotate_secret,
    ),
    route("POST", "endpoints/{id}/test", endpoints::test),
    route("POST", "endpoints/{id}/filter-test", endpoints::filter_test),
    route("POST", "retries/policies", policies::create),
    route("GET", "retries/policies", policies::list),
    route("GET", "retries/policies/{id}", policies::get),
    route("PATCH", "retries/policies/{id}", policies::update),
    route("DELETE", "retries/policies/{id}", policies::delete),
    route("POST", "schedules", schedules::create),
    route("GET", "schedules", schedules::list),
    route("GET", "schedules/{id}", schedules::get),
    route("PATCH", "schedules/{id}", schedules::update),
    route("DELETE", "schedules/{id}", schedules::delete),
    route("POST", "schedules/{id}/pause", schedules::pause),
    route("POST", "schedules/{id}/resume", schedules::resume),
    route("POST", "schedules/{id}/trigger", schedules::trigger),
    route("POST", "schedules/{id}/backfill", schedules::backfill),
    route("POST", "cron/preview", schedules::preview),
    route("POST", "events", events::publish),
    route("GET", "events", events::list),
    route("GET", "events/{id}", events::get),
    route("POST", "tasks", tasks::create),
    route("GET", "tasks", tasks::list),
    route("POST", "tasks/retry", tasks::retry_bulk),
    route("GET", "tasks/{id}", tasks::get),
    route("GET", "tasks/{id}/attempts", tasks::attempts),
    route("POST", "tasks/{id}/cancel", tasks::cancel),
    route("POST", "tasks/{id}/retry", tasks::retry),
    route("POST", "tasks/{id}/resend", tasks::resend),
    route("POST", "keys", keys::create),
    route("GET", "keys", keys::list),
    route("GET", "keys/{key_id}", keys::get),
    route("DELETE", "keys/{key_id}", keys::revoke),
];

/// The routes of the table as (method, path) pairs, paths with the `/v1/` prefix
/// (`/v1/endpoints/{id}`): what the OpenAPI document must describe, and no more.
pub fn route_table() -> impl Iterator<Item = (&'static str, String)> {
    ROUTES
        .iter()
        .map(|r| (r.method, format!("/v1/{}", r.pattern)))
}

/// The routes the server answers without a signature, outside [`ROUTES`] (see `server::handle`).
pub const UNSIGNED_ROUTES: &[(&str, &str)] = &[
    ("GET", "/healthz"),
    ("HEAD", "/healthz"),
    ("GET", "/metrics"),
    ("GET", OPENAPI_PATH),
];

/// Where the OpenAPI document is served.
pub const OPENAPI_PATH: &str = "/v1/openapi.json";

/// The OpenAPI 3.1 document of this API: the repository's `openapi.json`, byte for byte.
pub const OPENAPI_DOCUMENT: &str = include_str!("../../openapi.json");

/// Finds the handler for a method and a path under `/v1`, with its `{id}` values:
/// 404 when no pattern matches the path, 405 when one does but not for this method.
pub fn resolve(method: &str, path: &str) -> ApiResult<(Handler, Vec<i64>)> {
    let rest = path
        .strip_prefix("/v1/")
        .ok_or_else(|| ApiError::not_found(format!("no route {path}")))?;
    let segments = split_path(rest);
    let named = routes_naming(&segments);
    let Some(r) = named.iter().find(|r| r.method == method) else {
        return Err(if named.is_empty() {
            ApiError::not_found(format!("no route {method} {path}"))
        } else {
            ApiError::method_not_allowed(method, path)
        });
    };
    let ids = r
        .pattern
        .split('/')
        .zip(&segments)
        .filter(|(p, _)| *p == "{id}")
        .map(|(_, s)| {
            s.parse::<i64>().map_err(|_| {
                ApiError::validation(format!("id: path segment '{s}' must be an integer"))
            })
        })
        .collect::<ApiResult<Vec<i64>>>()?;
    Ok((r.handler, ids))
}

/// A path under `/v1/` as segments (a trailing slash ignored).
fn split_path(rest: &str) -> Vec<&str> {
    rest.trim_end_matches('/').split('/').collect()
}

/// The routes whose pattern names the path, whatever their method: what decides between 404
/// and 405 in [`resolve`] and what `Allow` lists, so the two always agree. When a literal route
/// names the path (`tasks/retry`), a pattern that would need a non-integer `{id}` there
/// (`tasks/{id}`) does not: `GET /tasks/retry` is a 405 whose `Allow` is `POST`, not a bad id.
fn routes_naming(segments: &[&str]) -> Vec<&'static Route> {
    let matching = |r: &&Route| pattern_matches(r.pattern, segments);
    let literal_named = ROUTES
        .iter()
        .filter(matching)
        .any(|r| !r.pattern.contains("{id}"));
    ROUTES
        .iter()
        .filter(matching)
        .filter(|r| {
            let bad_id = r
                .pattern
                .split('/')
                .zip(segments)
                .any(|(p, s)| p == "{id}" && s.parse::<i64>().is_err());
            !(literal_named && bad_id)
        })
        .collect()
}

/// Whether `pattern` (segments joined by `/`) names the path `segments`. Walks both without
/// collecting them: every signed request runs this against each route, twice.
fn pattern_matches(pattern: &str, segments: &[&str]) -> bool {
    let mut parts = pattern.split('/');
    segments.iter().all(|s| {
        parts
            .next()
            .is_some_and(|p| p == "{id}" || (p == "{key_id}" && !s.is_empty()) || p == *s)
    }) && parts.next().is_none()
}

/// The methods a path answers to, for the `Allow` header of a 405 (RFC 9110 §15.5.6).
pub fn allowed_methods(path: &str) -> Vec<&'static str> {
    let mut methods: Vec<&'static str> = UNSIGNED_ROUTES
        .iter()
        .filter(|(_, p)| *p == path)
        .map(|(m, _)| *m)
        .collect();
    if let Some(rest) = path.strip_prefix("/v1/") {
        for r in routes_naming(&split_path(rest)) {
            if !methods.contains(&r.method) {
                methods.push(r.method);
            }
        }
    }
    methods
}

/// The envelope's `data` as JSON text: a record serialized straight from its struct
/// ([`to_data`]), with no `serde_json::Value` tree built in between; the server writes it into
/// the envelope as is.
#[derive(Debug, Clone, PartialEq)]
pub struct Data(Vec<u8>);

impl Data {
    /// The JSON text.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

/// A reply built in place (`json!({...})`).
impl From<Value> for Data {
    fn from(value: Value) -> Self {
        Data(value.to_string().into_bytes())
    }
}

/// Serializes a record as the envelope's `data`.
pub fn to_data<T: serde::Serialize>(record: &T) -> ApiResult<Data> {
    serde_json::to_vec(record)
        .map(Data)
        .map_err(ApiError::internal)
}

/// The 404 for a record that does not exist in the caller's app.
pub fn missing(what: &str, id: i64) -> ApiError {
    ApiError::not_found(format!("{what} {id} not found"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_routes_ids_404_and_405() {
        let (_, ids) = resolve("POST", "/v1/endpoints/42/enable").unwrap();
        assert_eq!(ids, vec![42]);
        assert_eq!(resolve("GET", "/v1/nothing").unwrap_err().code, 40401);
        assert_eq!(resolve("PUT", "/v1/endpoints").unwrap_err().code, 40501);
        assert_eq!(resolve("GET", "/v1/endpoints/x").unwrap_err().code, 40001);
        // Whatever the method, and past i64 too: a bad id, not a 405 (schemathesis found it).
        for method in ["GET", "PATCH", "DELETE"] {
            let path = "/v1/endpoints/9223372036854775808";
            assert_eq!(resolve(method, path).unwrap_err().code, 40001, "{method}");
        }
        assert_eq!(resolve("GET", "/v2/endpoints").unwrap_err().code, 40401);
        assert_eq!(resolve("GET", "/v1/tasks/retry").unwrap_err().code, 40501);
        assert!(resolve("POST", "/v1/tasks/retry").is_ok());
        assert_eq!(resolve("POST", "/v1/tasks/7/retry").unwrap().1, vec![7]);
    }

    /// Every path of the table answers 405 with an `Allow` that names exactly the methods
    /// `resolve` accepts there (checked on a concrete path of each pattern).
    #[test]
    fn allow_agrees_with_resolve_on_every_route() {
        const METHODS: [&str; 5] = ["GET", "POST", "PATCH", "DELETE", "PUT"];
        for r in ROUTES {
            let path = format!("/v1/{}", r.pattern.replace("{id}", "7"));
            let accepted: Vec<&str> = METHODS
                .into_iter()
                .filter(|m| resolve(m, &path).is_ok())
                .collect();
            let mut allowed = allowed_methods(&path);
            allowed.sort_unstable();
            let mut accepted_sorted = accepted.clone();
            accepted_sorted.sort_unstable();
            assert_eq!(allowed, accepted_sorted, "{path}");
            for m in METHODS.into_iter().filter(|m| !accepted.contains(m)) {
                assert_eq!(resolve(m, &path).unwrap_err().code, 40501, "{m} {path}");
            }
        }
    }

    #[test]
    fn allowed_methods_of_a_path() {
        assert_eq!(allowed_methods("/v1/endpoints"), vec!["POST", "GET"]);
        assert_eq!(
            allowed_methods("/v1/endpoints/7"),
            vec!["GET", "PATCH", "DELETE"]
        );
        assert_eq!(allowed_methods("/healthz"), vec!["GET", "HEAD"]);
        // A literal route takes its path from `{id}` patterns: POST only.
        assert_eq!(allowed_methods("/v1/tasks/retry"), vec!["POST"]);
        assert_eq!(allowed_methods("/v1/tasks/7"), vec!["GET"]);
        assert_eq!(allowed_methods("/v1/tasks/7/retry"), vec!["POST"]);
        assert_eq!(allowed_methods("/v1/tasks/"), vec!["POST", "GET"]);
        assert_eq!(allowed_methods(OPENAPI_PATH), vec!["GET"]);
        assert!(allowed_methods("/v1/nothing").is_empty());
    }
}
