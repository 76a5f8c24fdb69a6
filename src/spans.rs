//! The spans webhookd exports with `--otlp-endpoint` (docs/API.md, "Traces"): one per API
//! request, per schedule firing, per queue wait (task due → first byte sent) and per delivery
//! attempt, each in its task's trace under the right parent. Built here from what each part
//! knows and handed to [`crate::otlp::Exporter`], which never blocks. With export off,
//! [`Spans::on`] is false and no span is built.

use crate::otlp::{AttrValue, ExportCounts, Exporter, Span, SpanKind};
use crate::trace::{SpanContext, TaskTraces};
use std::time::Duration;

/// The exporter when `--otlp-endpoint` is set, else nothing.
#[derive(Debug, Default)]
pub struct Spans {
    exporter: Option<Exporter>,
}

/// Nanoseconds since the epoch of an instant in ms plus a measured duration.
pub fn unix_ns(at_ms: i64, plus: Duration) -> u64 {
    u64::try_from(at_ms)
        .unwrap_or(0)
        .saturating_mul(1_000_000)
        .saturating_add(u64::try_from(plus.as_nanos()).unwrap_or(u64::MAX))
}

/// `POST /v1/schedules/7/trigger` → `POST /v1/schedules/{id}/trigger`: a span name that does
/// not grow with the ids.
pub fn route_name(method: &str, path: &str) -> String {
    let path: Vec<&str> = path
        .split('/')
        .map(|segment| {
            if !segment.is_empty() && segment.bytes().all(|b| b.is_ascii_digit()) {
                "{id}"
            } else {
                segment
            }
        })
        .collect();
    format!("{method} {}", path.join("/"))
}

/// What the request span says about one API request.
pub struct RequestSpan<'a> {
    pub name: String,
    /// The caller's span, when the request carried a valid `traceparent`.
    pub caller: Option<SpanContext>,
    /// The request's own span under the caller's (tasks made under a caller hang below it).
    pub own: Option<SpanContext>,
    pub app_id: Option<&'a str>,
    pub status: u16,
    pub start_ms: i64,
    pub took: Duration,
}

/// One delivery attempt, as its span tells it.
pub struct AttemptSpan<'a> {
    pub task: &'a crate::store::tasks::Claimed,
    /// The attempt's own span (the `traceparent` the receiver got).
    pub span: SpanContext,
    pub start_ms: i64,
    pub took: Duration,
    pub status: Option<u16>,
    pub error: Option<&'a str>,
}

impl Spans {
    /// Starts exporting to `endpoint` (`<endpoint>/v1/traces`), or nothing when `None`.
    pub fn start(endpoint: Option<&str>) -> std::io::Result<Spans> {
        Ok(Spans {
            exporter: endpoint.map(Exporter::start).transpose()?,
        })
    }

    /// Whether spans are exported: callers build a span only when this holds.
    pub fn on(&self) -> bool {
        self.exporter.is_some()
    }

    /// What became of the spans so far (`/metrics`); `None` with export off.
    pub fn counts(&self) -> Option<&ExportCounts> {
        self.exporter.as_ref().map(Exporter::counts)
    }

    /// Sends what is queued and stops the export thread (shutdown).
    pub fn shutdown(&self) {
        if let Some(exporter) = &self.exporter {
            exporter.shutdown();
        }
    }

    fn record(&self, span: Span) {
        if let Some(exporter) = &self.exporter {
            exporter.record(span);
        }
    }

    /// The span of one API request (server kind). Under a caller it is the caller's child;
    /// otherwise it is the root of each trace its tasks started (one copy per trace), or of a
    /// trace of its own when it made no task.
    pub fn request(&self, r: RequestSpan<'_>, traces: &TaskTraces) {
        if !self.on() {
            return;
        }
        let mut attributes: Vec<(&'static str, AttrValue)> =
            vec![("http.response.status_code", i64::from(r.status).into())];
        if let Some(app) = r.app_id {
            attributes.push(("webhookd.app", app.into()));
        }
        let error = (r.status >= 500).then(|| format!("HTTP {}", r.status));
        let span = |at: SpanContext, parent: Option<SpanContext>| Span {
            trace_id: at.trace_id,
            span_id: at.span_id,
            parent_span_id: parent.map(|p| p.span_id),
            name: r.name.clone(),
            kind: SpanKind::Server,
            start_unix_ns: unix_ns(r.start_ms, Duration::ZERO),
            end_unix_ns: unix_ns(r.start_ms, r.took),
            attributes: attributes.clone(),
            error: error.clone(),
        };
        match (r.own, traces.roots()) {
            (Some(own), _) => self.record(span(own, r.caller)),
            (None, []) => self.record(span(SpanContext::new_root(), None)),
            (None, roots) => roots.iter().for_each(|root| self.record(span(*root, None))),
        }
    }

    /// The span of one schedule firing (internal kind), the root of each trace its tasks
    /// started (one copy per task, naming it), or of a trace of its own when it made none.
    pub fn firing(
        &self,
        schedule_id: i64,
        app_id: &str,
        scheduled_at_ms: i64,
        start_ms: i64,
        took: Duration,
        tasks: &[(SpanContext, i64)],
    ) {
        if !self.on() {
            return;
        }
        let span = |at: SpanContext, task_id: Option<i64>| {
            let mut attributes: Vec<(&'static str, AttrValue)> = vec![
                ("webhookd.app", app_id.into()),
                ("webhookd.schedule_id", schedule_id.into()),
                (
                    "webhookd.scheduled_at",
                    crate::clock::rfc3339(scheduled_at_ms).into(),
                ),
            ];
            if let Some(id) = task_id {
                attributes.push(("webhookd.task_id", id.into()));
            }
            Span {
                trace_id: at.trace_id,
                span_id: at.span_id,
                parent_span_id: None,
                name: "schedule firing".into(),
                kind: SpanKind::Internal,
                start_unix_ns: unix_ns(start_ms, Duration::ZERO),
                end_unix_ns: unix_ns(start_ms, took),
                attributes,
                error: None,
            }
        };
        if tasks.is_empty() {
            self.record(span(SpanContext::new_root(), None));
        }
        for (root, task_id) in tasks {
            self.record(span(*root, Some(*task_id)));
        }
    }

    /// A task's wait in the queue, from when it was due to its first attempt's first byte
    /// (internal kind), beside its attempts under the task's parent.
    pub fn queue_wait(&self, task: &crate::store::tasks::Claimed, sent_at_ms: i64) {
        let (true, Some(trace)) = (self.on(), task.trace) else {
            return;
        };
        self.record(Span {
            trace_id: trace.trace_id,
            span_id: trace.attempt().span_id,
            parent_span_id: Some(trace.parent_span_id),
            name: "queue wait".into(),
            kind: SpanKind::Internal,
            start_unix_ns: unix_ns(task.due_at.min(sent_at_ms), Duration::ZERO),
            end_unix_ns: unix_ns(sent_at_ms, Duration::ZERO),
            attributes: vec![
                ("webhookd.app", task.app_id.as_str().into()),
                ("webhookd.task_id", task.id.into()),
                ("webhookd.endpoint_id", task.endpoint_id.into()),
            ],
            error: None,
        });
    }

    /// One delivery attempt (client kind) under the task's parent; ERROR when it failed.
    pub fn attempt(&self, a: AttemptSpan<'_>) {
        if !self.on() {
            return;
        }
        let task = a.task;
        let mut attributes: Vec<(&'static str, AttrValue)> = vec![
            ("webhookd.app", task.app_id.as_str().into()),
            ("webhookd.endpoint_id", task.endpoint_id.into()),
            ("webhookd.task_id", task.id.into()),
            ("webhookd.attempt", task.attempt.into()),
        ];
        if let Some(status) = a.status {
            attributes.push(("http.response.status_code", i64::from(status).into()));
        }
        let failed = !a.status.is_some_and(|s| (200..300).contains(&s));
        let error = failed.then(|| match (a.status, a.error) {
            (_, Some(e)) => e.to_string(),
            (Some(s), None) => format!("HTTP {s}"),
            (None, None) => "no reply".to_string(),
        });
        self.record(Span {
            trace_id: a.span.trace_id,
            span_id: a.span.span_id,
            parent_span_id: task.trace.map(|t| t.parent_span_id),
            name: "delivery attempt".into(),
            kind: SpanKind::Client,
            start_unix_ns: unix_ns(a.start_ms, Duration::ZERO),
            end_unix_ns: unix_ns(a.start_ms, a.took),
            attributes,
            error,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_names_hide_ids() {
        assert_eq!(route_name("POST", "/v1/events"), "POST /v1/events");
        assert_eq!(
            route_name("POST", "/v1/schedules/17/trigger"),
            "POST /v1/schedules/{id}/trigger"
        );
        assert_eq!(route_name("GET", "/v1/tasks/3"), "GET /v1/tasks/{id}");
        assert_eq!(route_name("GET", "/v1/x7"), "GET /v1/x7");
    }

    #[test]
    fn instants_in_nanoseconds() {
        assert_eq!(
            unix_ns(1_700_000_000_000, Duration::ZERO),
            1_700_000_000_000_000_000
        );
        assert_eq!(
            unix_ns(1_700_000_000_000, Duration::from_micros(1500)),
            1_700_000_000_001_500_000
        );
        assert_eq!(unix_ns(-5, Duration::ZERO), 0);
    }

    #[test]
    fn off_builds_nothing() {
        let spans = Spans::default();
        assert!(!spans.on());
        assert!(spans.counts().is_none());
    }
}
