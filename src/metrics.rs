//! The metrics behind `GET /metrics` (docs/design.md §9, §10), kept with the `prometheus-client` crate
//! and served in its OpenMetrics text. Counting is lock-free (atomics) on the delivery hot path;
//! the per-endpoint counters take a read lock on their label map.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// Upper bounds (ms) of the delivery latency histogram buckets; `+Inf` follows.
const LATENCY_BUCKETS_MS: [u64; 12] = [
    5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10_000, 30_000,
];

/// The build's git commit and target triple, recorded by `build.rs` (the same values
/// `webhookd --version` prints; see `build_info`).
pub const GIT_COMMIT: &str = crate::build_info::COMMIT;
pub const TARGET: &str = crate::build_info::TARGET;

/// How one delivery attempt ended, as a metrics label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryOutcome {
    /// A 2xx reply.
    Success,
    /// A reply with another status.
    HttpError,
    /// No reply: timeout, refused connection, DNS, TLS, refused target.
    NetworkError,
}

impl DeliveryOutcome {
    const ALL: [DeliveryOutcome; 3] = [
        DeliveryOutcome::Success,
        DeliveryOutcome::HttpError,
        DeliveryOutcome::NetworkError,
    ];

    fn label(self) -> &'static str {
        match self {
            DeliveryOutcome::Success => "success",
            DeliveryOutcome::HttpError => "http_error",
            DeliveryOutcome::NetworkError => "network_error",
        }
    }
}

type Labels = Vec<(&'static str, String)>;

/// The server's metrics; one instance lives in [`crate::app::App`]. The metric handles are
/// cheap clones of shared atomics, so each scrape registers them in a fresh [`Registry`].
#[derive(Debug)]
pub struct Metrics {
    deliveries: Family<Labels, Counter>,
    endpoint_deliveries: Family<Labels, Counter>,
    latency: Histogram,
    /// How late (ms) the scheduler fired its last due schedule; set by the scheduler, -1 until
    /// it has fired anything (the gauge is left out until then).
    pub scheduler_lag_ms: AtomicI64,
    /// Unix time (s) of the newest good scheduled backup: -1 while backups are off (the metrics
    /// are left out), 0 until the first one.
    backup_last_success: AtomicI64,
    /// Scheduled backups that failed.
    backup_failures: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        let deliveries = Family::<Labels, Counter>::default();
        // Every outcome is shown from the start, at 0.
        for outcome in DeliveryOutcome::ALL {
            let _ = deliveries.get_or_create_owned(&vec![("outcome", outcome.label().to_string())]);
        }
        Metrics {
            deliveries,
            endpoint_deliveries: Family::default(),
            latency: Histogram::new(LATENCY_BUCKETS_MS.iter().map(|ms| *ms as f64 / 1000.0)),
            scheduler_lag_ms: AtomicI64::new(-1),
            backup_last_success: AtomicI64::new(-1),
            backup_failures: Counter::default(),
        }
    }
}

/// Resident memory (bytes) and open file descriptors of this process, from `/proc/self`.
fn process_stats() -> (Option<i64>, Option<i64>) {
    let rss = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
            let kib: i64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kib * 1024)
        });
    let fds = std::fs::read_dir("/proc/self/fd")
        .ok()
        .map(|dir| i64::try_from(dir.count()).unwrap_or(i64::MAX));
    (rss, fds)
}

impl Metrics {
    /// Counts one delivery attempt to `endpoint_id` and its duration.
    pub fn record_delivery(&self, endpoint_id: i64, outcome: DeliveryOutcome, duration_ms: u64) {
        let label = outcome.label().to_string();
        self.deliveries
            .get_or_create(&vec![("outcome", label.clone())])
            .inc();
        self.endpoint_deliveries
            .get_or_create(&vec![
                ("endpoint_id", endpoint_id.to_string()),
                ("outcome", label),
            ])
            .inc();
        self.latency.observe(duration_ms as f64 / 1000.0);
    }

    /// Scheduled backups are on: their metrics are shown from now on.
    pub fn backups_enabled(&self) {
        let _ =
            self.backup_last_success
                .compare_exchange(-1, 0, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// A good backup was made at `unix_secs`.
    pub fn backup_succeeded(&self, unix_secs: i64) {
        self.backup_last_success.store(unix_secs, Ordering::Relaxed);
    }

    /// A scheduled backup failed.
    pub fn backup_failed(&self) {
        self.backup_failures.inc();
    }

    /// `None` while backups are off; `Some(None)` before the first good one; else its Unix time.
    pub fn last_backup(&self) -> Option<Option<i64>> {
        match self.backup_last_success.load(Ordering::Relaxed) {
            -1 => None,
            0 => Some(None),
            at => Some(Some(at)),
        }
    }

    /// The OpenMetrics text, with the task counts by status read by the caller, and what
    /// became of exported spans when `--otlp-endpoint` is set.
    pub fn render(
        &self,
        tasks_by_status: &[(String, i64)],
        otlp: Option<&crate::otlp::ExportCounts>,
    ) -> String {
        let mut registry = Registry::default();
        let tasks = Family::<Labels, Gauge>::default();
        for status in ["pending", "running", "success", "failed", "canceled"] {
            let count = tasks_by_status
                .iter()
                .find(|(s, _)| s == status)
                .map_or(0, |(_, n)| *n);
            tasks
                .get_or_create(&vec![("status", status.to_string())])
                .set(count);
        }
        registry.register("webhookd_tasks", "Tasks by status", tasks);
        registry.register(
            "webhookd_deliveries",
            "Delivery attempts by outcome",
            self.deliveries.clone(),
        );
        registry.register(
            "webhookd_endpoint_deliveries",
            "Delivery attempts by endpoint and outcome",
            self.endpoint_deliveries.clone(),
        );
        registry.register_with_unit(
            "webhookd_delivery_duration",
            "Time from sending a delivery to its outcome",
            prometheus_client::registry::Unit::Seconds,
            self.latency.clone(),
        );
        let lag = self.scheduler_lag_ms.load(Ordering::Relaxed);
        if lag >= 0 {
            let gauge = Gauge::<f64, AtomicU64>::default();
            gauge.set(lag as f64 / 1000.0);
            registry.register_with_unit(
                "webhookd_scheduler_lag",
                "How late the last schedule firing was",
                prometheus_client::registry::Unit::Seconds,
                gauge,
            );
        }
        if let Some(last) = self.last_backup() {
            let gauge = Gauge::<i64>::default();
            gauge.set(last.unwrap_or(0));
            registry.register(
                "webhookd_backup_last_success_timestamp_seconds",
                "Unix time of the newest good scheduled backup (0: none yet)",
                gauge,
            );
            registry.register(
                "webhookd_backup_failures",
                "Scheduled backups that failed",
                self.backup_failures.clone(),
            );
        }
        let build = Family::<Labels, Gauge>::default();
        build
            .get_or_create(&vec![
                ("version", env!("CARGO_PKG_VERSION").to_string()),
                ("commit", GIT_COMMIT.to_string()),
                ("target", TARGET.to_string()),
            ])
            .set(1);
        registry.register(
            "webhookd_build_info",
            "The running build: version, git commit and target triple",
            build,
        );
        let (rss, fds) = process_stats();
        if let Some(rss) = rss {
            let gauge = Gauge::<i64>::default();
            gauge.set(rss);
            registry.register_with_unit(
                "process_resident_memory",
                "Resident memory of the process",
                prometheus_client::registry::Unit::Bytes,
                gauge,
            );
        }
        if let Some(fds) = fds {
            let gauge = Gauge::<i64>::default();
            gauge.set(fds);
            registry.register("process_open_fds", "Open file descriptors", gauge);
        }
        if let Some(otlp) = otlp {
            register_otlp(&mut registry, otlp);
        }
        let mut out = String::with_capacity(4096);
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &registry);
        out
    }
}

/// `webhookd_otlp_spans_exported_total` and `webhookd_otlp_spans_dropped_total{reason}`.
fn register_otlp(registry: &mut Registry, otlp: &crate::otlp::ExportCounts) {
    let exported = Counter::<u64>::default();
    exported.inc_by(otlp.exported.load(Ordering::Relaxed));
    registry.register(
        "webhookd_otlp_spans_exported",
        "Spans the OTLP collector accepted",
        exported,
    );
    let dropped = Family::<Labels, Counter>::default();
    for (reason, count) in [
        ("queue_full", &otlp.dropped_queue_full),
        ("export_failed", &otlp.dropped_export_failed),
    ] {
        dropped
            .get_or_create(&vec![("reason", reason.to_string())])
            .inc_by(count.load(Ordering::Relaxed));
    }
    registry.register(
        "webhookd_otlp_spans_dropped",
        "Spans dropped: the export queue was full, or the collector could not be reached or refused them",
        dropped,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counts_per_endpoint_a_cumulative_histogram_and_build_info() {
        let m = Metrics::default();
        m.record_delivery(7, DeliveryOutcome::Success, 3);
        m.record_delivery(7, DeliveryOutcome::Success, 40);
        m.record_delivery(8, DeliveryOutcome::NetworkError, 60_000);
        let text = m.render(&[("pending".into(), 7)], None);
        for line in [
            "webhookd_tasks{status=\"pending\"} 7\n",
            "webhookd_tasks{status=\"failed\"} 0\n",
            "webhookd_deliveries_total{outcome=\"success\"} 2\n",
            "webhookd_deliveries_total{outcome=\"http_error\"} 0\n",
            "webhookd_deliveries_total{outcome=\"network_error\"} 1\n",
            "webhookd_endpoint_deliveries_total{endpoint_id=\"7\",outcome=\"success\"} 2\n",
            "webhookd_endpoint_deliveries_total{endpoint_id=\"8\",outcome=\"network_error\"} 1\n",
            "webhookd_delivery_duration_seconds_bucket{le=\"0.005\"} 1\n",
            "webhookd_delivery_duration_seconds_bucket{le=\"0.05\"} 2\n",
            "webhookd_delivery_duration_seconds_bucket{le=\"+Inf\"} 3\n",
            "webhookd_delivery_duration_seconds_count 3\n",
            "# TYPE process_open_fds gauge\n",
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
        assert!(text.contains(&format!(
            "webhookd_build_info{{version=\"{}\",commit=\"{GIT_COMMIT}\",target=\"{TARGET}\"}} 1\n",
            env!("CARGO_PKG_VERSION")
        )));
        assert!(text.contains("process_resident_memory_bytes "));
        assert!(text.ends_with("# EOF\n"));
        assert!(!text.contains("scheduler_lag"));
        assert!(!text.contains("webhookd_backup"));
        m.backups_enabled();
        let text = m.render(&[], None);
        assert!(
            text.contains("webhookd_backup_last_success_timestamp_seconds 0\n"),
            "{text}"
        );
        assert!(
            text.contains("webhookd_backup_failures_total 0\n"),
            "{text}"
        );
        m.backup_succeeded(1_764_000_000);
        m.backup_failed();
        m.backups_enabled();
        let text = m.render(&[], None);
        assert!(text.contains("webhookd_backup_last_success_timestamp_seconds 1764000000\n"));
        assert!(text.contains("webhookd_backup_failures_total 1\n"));
        m.scheduler_lag_ms.store(1500, Ordering::Relaxed);
        assert!(
            m.render(&[], None)
                .contains("webhookd_scheduler_lag_seconds 1.5\n")
        );
    }

    #[test]
    fn process_stats_are_read_from_proc() {
        let (rss, fds) = process_stats();
        assert!(rss.is_some_and(|b| b > 1024 * 1024), "{rss:?}");
        assert!(fds.is_some_and(|n| n >= 3), "{fds:?}");
    }

    #[test]
    fn otlp_counts_only_with_export_on() {
        let m = Metrics::default();
        assert!(!m.render(&[], None).contains("otlp"));
        let counts = crate::otlp::ExportCounts::default();
        counts.exported.store(12, Ordering::Relaxed);
        counts.dropped_queue_full.store(3, Ordering::Relaxed);
        let text = m.render(&[], Some(&counts));
        for line in [
            "webhookd_otlp_spans_exported_total 12\n",
            "webhookd_otlp_spans_dropped_total{reason=\"queue_full\"} 3\n",
            "webhookd_otlp_spans_dropped_total{reason=\"export_failed\"} 0\n",
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
    }
}
