//! `/v1/endpoints`: webhook targets — create, list, read, update, enable, disable, delete.

use super::input::{Body, Patch, check_name, check_range, page_object};
use super::{Ctx, Data, Request, missing, to_data};
use crate::error::{ApiError, ApiResult};
use crate::operator::{self, OperatorEvent};
use crate::payload_filter::PayloadFilter;
use crate::store::Word;
use crate::store::endpoints::{DisabledReason, Endpoint, EndpointStatus};
use serde_json::{Map, Value};

const METHODS: &[&str] = &["GET", "POST", "PUT", "PATCH", "DELETE"];
/// Header names webhookd sets itself on deliveries; an endpoint may not override them.
const RESERVED_HEADERS: &[&str] = &["content-type", "content-length", "host", "traceparent"];
const RESERVED_PREFIXES: &[&str] = &["x-service-", "webhook-"];

pub fn check_url(url: &str) -> ApiResult<()> {
    let bad = |why: &str| ApiError::validation(format!("url: {why}"));
    if url.len() > 2048 {
        return Err(bad("must be at most 2048 characters"));
    }
    let uri: hyper::Uri = url
        .parse()
        .map_err(|_| bad("must be an absolute http or https URL"))?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        _ => return Err(bad("scheme must be http or https")),
    }
    let host = uri
        .host()
        .filter(|h| !h.is_empty())
        .ok_or_else(|| bad("must name a host"))?;
    check_host(host).map_err(|why| bad(&why))?;
    // `Uri::port` is None for a port it cannot read as u16, and such a URL was then delivered
    // to the scheme's default port (`:99999` went to port 80): read the authority's own text.
    let authority = uri.authority().map(|a| a.as_str()).unwrap_or_default();
    let host_and_port = authority
        .rsplit_once('@')
        .map_or(authority, |(_, rest)| rest);
    let after_host = match host_and_port.rfind(']') {
        Some(end) if host_and_port.starts_with('[') => &host_and_port[end + 1..],
        _ => host_and_port.find(':').map_or("", |i| &host_and_port[i..]),
    };
    if let Some(port) = after_host.strip_prefix(':')
        && !port.is_empty()
        && !matches!(port.parse::<u16>(), Ok(1..))
    {
        return Err(bad(&format!("port {port} is not between 1 and 65535")));
    }
    Ok(())
}

/// A host must be an IPv4 address, an IPv6 address in brackets without a zone id (the zone
/// names an interface of the server, not a place on the network), or a DNS name. Anything made
/// of digits and dots must be a valid IPv4 address (`256.256.256.256` is not a name).
pub fn check_host(host: &str) -> Result<(), String> {
    if let Some(inner) = host.strip_prefix('[') {
        let inner = inner
            .strip_suffix(']')
            .ok_or_else(|| format!("host '{host}' has an unclosed '['"))?;
        if inner.contains('%') {
            return Err(format!(
                "host '{host}' has an IPv6 zone id, which names an interface of this server"
            ));
        }
        return inner
            .parse::<std::net::Ipv6Addr>()
            .map(|_| ())
            .map_err(|_| format!("host '{host}' is not an IPv6 address"));
    }
    if host.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return host
            .parse::<std::net::Ipv4Addr>()
            .map(|_| ())
            .map_err(|_| format!("host '{host}' is not an IPv4 address"));
    }
    let name = host.strip_suffix('.').unwrap_or(host);
    let label_ok = |label: &str| {
        (1..=63).contains(&label.len())
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    if name.len() > 253 || !name.split('.').all(label_ok) {
        return Err(format!("host '{host}' is not a valid host name"));
    }
    Ok(())
}

fn check_method(method: &str) -> ApiResult<String> {
    let upper = method.to_ascii_uppercase();
    if METHODS.contains(&upper.as_str()) {
        Ok(upper)
    } else {
        Err(ApiError::validation(format!(
            "method: '{method}' is not one of {}",
            METHODS.join(", ")
        )))
    }
}

fn check_headers(headers: &Map<String, Value>) -> ApiResult<()> {
    if headers.len() > 50 {
        return Err(ApiError::validation("headers: at most 50 headers"));
    }
    for (name, value) in headers {
        let lower = name.to_ascii_lowercase();
        if hyper::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
            return Err(ApiError::validation(format!(
                "headers: '{name}' is not a valid header name"
            )));
        }
        if RESERVED_HEADERS.contains(&lower.as_str())
            || RESERVED_PREFIXES.iter().any(|p| lower.starts_with(p))
        {
            return Err(ApiError::validation(format!(
                "headers: '{name}' is reserved; webhookd sets it on every delivery"
            )));
        }
        let text = value.as_str().ok_or_else(|| {
            ApiError::validation(format!("headers: value of '{name}' must be a string"))
        })?;
        if hyper::header::HeaderValue::from_str(text).is_err() || text.len() > 4096 {
            return Err(ApiError::validation(format!(
                "headers: value of '{name}' is not a valid header value"
            )));
        }
    }
    Ok(())
}

fn check_secret(secret: &str) -> ApiResult<()> {
    if secret.len() > 512 {
        return Err(ApiError::validation(
            "secret: must be at most 512 characters",
        ));
    }
    crate::signing::check_whsec(secret)
        .map_err(|why| ApiError::validation(format!("secret: {why}")))
}

/// `rate_limit_per_sec`: 0.01..=10000 starts a second.
fn check_rate(rate: f64) -> ApiResult<()> {
    if (0.01..=10_000.0).contains(&rate) {
        Ok(())
    } else {
        Err(ApiError::validation(
            "rate_limit_per_sec: must be between 0.01 and 10000 (or null for no limit)",
        ))
    }
}

/// `max_in_flight`: 1..=1000 deliveries at once.
fn check_max_in_flight(n: i64) -> ApiResult<()> {
    check_range("max_in_flight", n, 1..=1000)
}

/// Longest overlap of a rotated secret: a week.
const MAX_OVERLAP_SECS: i64 = 604_800;
const DEFAULT_OVERLAP_SECS: i64 = 86_400;

fn check_policy(ctx: &Ctx<'_>, policy_id: i64) -> ApiResult<()> {
    match ctx.store.read(|tx| tx.get_policy(ctx.app_id, policy_id))? {
        Some(_) => Ok(()),
        None => Err(ApiError::validation(format!(
            "retry_policy_id: no retry policy {policy_id} in this app"
        ))),
    }
}

fn check_filter(filter: &str) -> ApiResult<()> {
    crate::filter::validate(filter).map_err(ApiError::validation)
}

/// Parses a `filter_payload` object, refusing it with a 40001 that names the path at fault.
fn check_filter_payload(filter: &Map<String, Value>) -> ApiResult<PayloadFilter> {
    PayloadFilter::parse(filter).map_err(|e| ApiError::validation(e.to_string()))
}

fn load(ctx: &Ctx<'_>, id: i64) -> ApiResult<Endpoint> {
    ctx.store
        .read(|tx| tx.get_endpoint(ctx.app_id, id))?
        .ok_or_else(|| missing("endpoint", id))
}

pub fn create(ctx: &mut Ctx<'_>, req: &Request) -> ApiResult<Data> {
    let body = req.json()?;
    let name = body.required_str("name")?;
    check_name("name", &name)?;
    let url = body.required_str("url")?;
    check_url(&url)?;
    let method = check_method(&body.str("method")?.unwrap_or_else(|| "POST".into()))?;
    let headers = body.object("headers")?.unwrap_or_default();
    check_headers(&headers)?;
    // Signed by default (docs/API.md, "Signed by default"): no `secret` → a new random one;
    // an explicit `null` (or "") → an unsigned endpoint.
    let secret = match body.patch_str("secret")? {
        Patch::Absent => Some(crate::signing::new_whsec()),
        Patch::Null => None,
        Patch::Value(secret) if secret.is_empty() => None,
        Patch::Value(secret) => {
            check_secret(&secret)?;
            Some(secret)
        }
    };
    let timeout_ms = body.int("timeout_ms")?.unwrap_or(30_000);
    check_range("timeout_ms", timeout_ms, 1..=300_000)?;
    let retry_policy_id = body.int("retry_policy_id")?;
    if let Some(policy_id) = retry_policy_id {
        check_policy(ctx, policy_id)?;
    }
    let filter_events = body.str("filter_events")?;
    if let Some(filter) = &filter_events {
        check_filter(filter)?;
    }
    let filter_payload = body.object("filter_payload")?;
    if let Some(filter) = &filter_payload {
        check_filter_payload(filter)?;
    }
    let rate_limit_per_sec = body.f64("rate_limit_per_sec")?;
    if let Some(rate) = rate_limit_per_sec {
        check_rate(rate)?;
    }
    let max_in_flight = body.int("max_in_flight")?;
    if let Some(n) = max_in_flight {
        check_max_in_flight(n)?;
    }
    let endpoint = Endpoint {
        id: 0,
        app_id: ctx.app_id.to_string(),
        name,
        url,
        method,
        headers,
        secret,
        timeout_ms,
        retry_policy_id,
        filter_events,
        filter_payload,
        status: EndpointStatus::Enabled,
        rate_limit_per_sec,
        max_in_flight,
        previous_secret: None,
        previous_secret_expires_at: None,
        created_at: ctx.now_ms,
        updated_at: ctx.now_ms,
        disabled_reason: None,
        last_success_at: None,
        last_failure_at: None,
        consecutive_failures: 0,
    };
    body.finish_for(&endpoint)?;
    to_data(&ctx.store.write(|tx| tx.insert_endpoint(&endpoint))?)
}

pub fn list(ctx: &mut Ctx<'_>, req: &Request) -> ApiResult<Data> {
    let page = req.query.page()?;
    let status = req.query.one_of("status", EndpointStatus::ALL)?;
    let (total, items) = ctx
        .store
        .read(|tx| tx.list_endpoints(ctx.app_id, status, page))?;
    page_object(page, total, items)
}

pub fn get(ctx: &mut Ctx<'_>, req: &Request) -> ApiResult<Data> {
    to_data(&load(ctx, req.id())?)
}

/// Applies a PATCH body to a loaded endpoint, validating each field it sends.
fn apply_patch(ctx: &Ctx<'_>, ep: &mut Endpoint, body: &Body) -> ApiResult<()> {
    if let Some(name) = body.update_str("name")? {
        check_name("name", &name)?;
        ep.name = name;
    }
    if let Some(url) = body.update_str("url")? {
        check_url(&url)?;
        ep.url = url;
    }
    if let Some(method) = body.update_str("method")? {
        ep.method = check_method(&method)?;
    }
    if let Some(headers) = body.update_object_or_text("headers")? {
        check_headers(&headers)?;
        ep.headers = headers;
    }
    if let Some(timeout_ms) = body.update_int("timeout_ms")? {
        check_range("timeout_ms", timeout_ms, 1..=300_000)?;
        ep.timeout_ms = timeout_ms;
    }
    let policy = body.patch_int("retry_policy_id")?;
    if let Patch::Value(policy_id) = policy {
        check_policy(ctx, policy_id)?;
    }
    policy.apply_nullable(&mut ep.retry_policy_id);
    let filter = body.patch_str("filter_events")?;
    if let Patch::Value(filter) = &filter {
        check_filter(filter)?;
    }
    filter.apply_nullable(&mut ep.filter_events);
    let filter_payload = body.patch_object("filter_payload")?;
    if let Patch::Value(filter) = &filter_payload {
        check_filter_payload(filter)?;
    }
    filter_payload.apply_nullable(&mut ep.filter_payload);
    let secret = body.patch_str("secret")?;
    if let Patch::Value(secret) = &secret {
        check_secret(secret)?;
    }
    let rate = body.patch_f64("rate_limit_per_sec")?;
    if let Patch::Value(rate) = rate {
        check_rate(rate)?;
    }
    rate.apply_nullable(&mut ep.rate_limit_per_sec);
    let max_in_flight = body.patch_int("max_in_flight")?;
    if let Patch::Value(n) = max_in_flight {
        check_max_in_flight(n)?;
    }
    max_in_flight.apply_nullable(&mut ep.max_in_flight);
    let clear_secret = body.update_bool("clear_secret")? == Some(true);
    if clear_secret {
        ep.secret = None;
        end_overlap(ep);
    } else {
        secret.apply_nullable(&mut ep.secret);
        if ep.secret.as_deref() == Some("") {
            ep.secret = None;
        }
    }
    Ok(())
}

/// Forgets the secret of before the last rotation: only the current one signs from now on.
fn end_overlap(ep: &mut Endpoint) {
    ep.previous_secret = None;
    ep.previous_secret_expires_at = None;
}

/// Saves a changed endpoint and wakes the delivery pool: a raised limit or a re-enabled endpoint
/// may make tasks claimable now.
fn save(ctx: &mut Ctx<'_>, endpoint: &mut Endpoint, before: &Endpoint) -> ApiResult<()> {
    if endpoint != before {
        endpoint.updated_at = ctx.now_ms;
        ctx.store.write(|tx| tx.update_endpoint(endpoint))?;
        ctx.app.delivery_wake.notify();
    }
    Ok(())
}

pub fn update(ctx: &mut Ctx<'_>, req: &Request) -> ApiResult<Data> {
    let body = req.json()?;
    let mut endpoint = load(ctx, req.id())?;
    let before = endpoint.clone();
    apply_patch(ctx, &mut endpoint, &body)?;
    body.finish_for(&before)?;
    save(ctx, &mut endpoint, &before)?;
    to_data(&endpoint)
}

/// `POST /endpoints/{id}/rotate-secret`: a new secret (given, or a random `whsec_` one) signs
/// from now on; the old one signs too for `overlap_secs` (default a day), so receivers can
/// switch over without rejecting a delivery.
pub fn rotate_secret(ctx: &mut Ctx<'_>, req: &Request) -> ApiResult<Data> {
    let body = req.json()?;
    let mut endpoint = load(ctx, req.id())?;
    let secret = match body.str("secret")? {
        Some(secret) if !secret.is_empty() => {
            check_secret(&secret)?;
            secret
        }
        _ => crate::signing::new_whsec(),
    };
    let overlap_secs = body.int("overlap_secs")?.unwrap_or(DEFAULT_OVERLAP_SECS);
    check_range("overlap_secs", overlap_secs, 0..=MAX_OVERLAP_SECS)?;
    body.finish()?;
    let before = endpoint.clone();
    match endpoint.secret.take() {
        Some(old) if overlap_secs > 0 && old != secret => {
            endpoint.previous_secret = Some(old);
            endpoint.previous_secret_expires_at = Some(ctx.now_ms + overlap_secs * 1000);
        }
        _ => end_overlap(&mut endpoint),
    }
    endpoint.secret = Some(secret);
    save(ctx, &mut endpoint, &before)?;
    to_data(&endpoint)
}

/// Enable and disable are idempotent. Enabling clears `disabled_reason` and the failure
/// streak; a client's disable records reason `manual`.
fn set_status(ctx: &mut Ctx<'_>, id: i64, enabled: bool) -> ApiResult<Data> {
    let changed = ctx.store.write(|tx| {
        tx.set_endpoint_status(ctx.app_id, id, enabled, DisabledReason::Manual, ctx.now_ms)
    })?;
    let endpoint = load(ctx, id)?;
    if changed && enabled {
        // Tasks held while it was disabled are due now.
        ctx.app.delivery_wake.notify();
    }
    to_data(&endpoint)
}

pub fn enable(ctx: &mut Ctx<'_>, req: &Request) -> ApiResult<Data> {
    req.no_body()?;
    set_status(ctx, req.id(), true)
}

pub fn disable(ctx: &mut Ctx<'_>, req: &Request) -> ApiResult<Data> {
    req.no_body()?;
    set_status(ctx, req.id(), false)
}

/// Deletes the endpoint, cancels its pending tasks and drops it from schedules' targets.
pub fn delete(ctx: &mut Ctx<'_>, req: &Request) -> ApiResult<Data> {
    req.no_body()?;
    let id = req.id();
    let (app_id, now_ms) = (ctx.app_id, ctx.now_ms);
    let deleted = ctx.store.write(|tx| {
        let Some(paused) = tx.delete_endpoint_cascade(app_id, id, now_ms)? else {
            return Ok(false);
        };
        for schedule_id in paused {
            let event = OperatorEvent::SchedulePaused {
                schedule_id,
                endpoint_id: id,
                reason: "endpoint_deleted",
            };
            operator::publish(tx, app_id, &event, now_ms)?;
        }
        Ok::<_, crate::store::StoreError>(true)
    })?;
    if !deleted {
        return Err(missing("endpoint", id));
    }
    ctx.app.metrics.forget_endpoint(id);
    ctx.app.delivery_wake.notify();
    ctx.app.scheduler_wake.notify();
    Ok(serde_json::json!({ "id": id, "deleted": true }).into())
}

/// `POST /endpoints/{id}/test`: one real, signed delivery now (to a disabled endpoint too),
/// answered when it is done, within the endpoint's `timeout_ms` once sent. The delivery pool
/// sends it under the same fair shares as any delivery; this blocking-pool thread only waits.
/// An app has at most `probe::TESTS_PER_APP` in flight (429 beyond).
pub fn test(ctx: &mut Ctx<'_>, req: &Request) -> ApiResult<Data> {
    use crate::delivery::probe::{self, ProbeError};
    req.no_body()?;
    let endpoint = load(ctx, req.id())?;
    let probe = probe::run(ctx.app, &endpoint, ctx.traces).map_err(|e| match e {
        ProbeError::Busy => ApiError::too_many_tests(probe::TESTS_PER_APP),
        ProbeError::Stopped => {
            ApiError::internal("the delivery pool stopped before the test delivery was sent")
        }
        ProbeError::Starting => ApiError::unwritable(
            "the delivery pool has not started yet: it waits for the database to answer",
        ),
        ProbeError::Other(e) => ApiError::internal(format!("{e:#}")),
    })?;
    to_data(&probe)
}

/// `POST /endpoints/{id}/filter-test` with `{"event_name", "payload"}`: whether such an event
/// would reach the endpoint (its `filter_events` and `filter_payload`, as publishing checks
/// them) and why, without publishing anything.
pub fn filter_test(ctx: &mut Ctx<'_>, req: &Request) -> ApiResult<Data> {
    let body = req.json()?;
    let event_name = body.required_str("event_name")?;
    let payload = Value::Object(body.object("payload")?.unwrap_or_default());
    body.finish()?;
    let endpoint = load(ctx, req.id())?;
    let filter = endpoint
        .filter_payload
        .as_ref()
        .map(check_filter_payload)
        .transpose()?;
    let (matches, reason) = crate::fanout::explain(
        endpoint.filter_events.as_deref(),
        filter.as_ref(),
        &event_name,
        &payload,
    );
    to_data(&serde_json::json!({ "matches": matches, "reason": reason }))
}
