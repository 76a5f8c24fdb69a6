//! The metrics behind `GET /metrics` (docs/design.md §9, §10), kept with the `prometheus-client` crate
//! and served in its OpenMetrics text. Counting is lock-free (atomics) on the delivery hot path;
//! the per-endpoint counters take a read lock on their label map.

use crate::store::Word;
use crate::store::tasks::TaskStatus;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::collections::{HashSet, VecDeque};
use std::sync::RwLock;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// Upper bounds (ms) of the delivery latency histogram buckets; `+Inf` follows.
const LATENCY_BUCKETS_MS: [u64; 12] = [
    5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10_000, 30_000,
];

/// Upper bounds (s) of the firing lag and queue wait histogram buckets; `+Inf` follows. Both
/// are waits a busy node stretches from milliseconds to minutes, and a catch-up to an hour.
const WAIT_BUCKETS_S: [f64; 14] = [
    0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0, 3600.0,
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

/// Why a failed attempt is retried, as a metrics label: each names what an operator would look
/// at (README, "Metrics").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryReason {
    /// No reply within the endpoint's `timeout_ms`: a slow receiver, or too short a timeout.
    Timeout,
    /// No connection: refused, DNS, TLS, or a target webhookd refuses: the receiver is down or
    /// the URL is wrong.
    Connect,
    /// `429 Too Many Requests`: the receiver limits webhookd; lower the endpoint's
    /// `rate_limit_per_sec`.
    Http429,
    /// Another 4xx: the receiver refuses the delivery (signature, payload, path).
    Http4xx,
    /// A 5xx: the receiver failed.
    Http5xx,
    /// Any other non-2xx status (a redirect, which is not followed): fix the URL.
    HttpOther,
}

impl RetryReason {
    const ALL: [RetryReason; 6] = [
        RetryReason::Timeout,
        RetryReason::Connect,
        RetryReason::Http429,
        RetryReason::Http4xx,
        RetryReason::Http5xx,
        RetryReason::HttpOther,
    ];

    fn label(self) -> &'static str {
        match self {
            RetryReason::Timeout => "timeout",
            RetryReason::Connect => "connect",
            RetryReason::Http429 => "http_429",
            RetryReason::Http4xx => "http_4xx",
            RetryReason::Http5xx => "http_5xx",
            RetryReason::HttpOther => "http_other",
        }
    }

    /// The reason of a failed attempt, from its reply status or (none) whether it timed out.
    pub fn of(status: Option<u16>, timed_out: bool) -> RetryReason {
        match status {
            None if timed_out => RetryReason::Timeout,
            None => RetryReason::Connect,
            Some(429) => RetryReason::Http429,
            Some(400..=499) => RetryReason::Http4xx,
            Some(500..=599) => RetryReason::Http5xx,
            Some(_) => RetryReason::HttpOther,
        }
    }
}

/// What one scheduler transaction decided, counted once it commits ([`Metrics::record_firings`]):
/// a rolled-back batch counts nothing. Kept by `scheduler::Batch` where each decision is made.
#[derive(Debug, Default)]
pub struct FiringCounts {
    /// Missed instants not fired, by `catchup` or being older than `--misfire-grace-secs`.
    pub missed_skipped: u64,
    /// Runs not fired because `overlap: skip` held back a target (one per run).
    pub overlap_skipped: u64,
    /// Missed instants fired late (found more than the on-time slack after their instant).
    pub caught_up: u64,
    /// For each firing: how long (ms) after its instant its tasks were created.
    pub lags_ms: Vec<i64>,
}

impl FiringCounts {
    /// A firing made its tasks `lag` after its instant; it `ran` unless `overlap: skip` held
    /// back every target. A run found later than `on_time_slack` was missed, and is caught up.
    pub fn fired(&mut self, lag: chrono::TimeDelta, ran: bool, on_time_slack: chrono::TimeDelta) {
        if ran {
            self.lags_ms.push(lag.num_milliseconds());
            self.caught_up += u64::from(lag > on_time_slack);
        }
    }
}

type Labels = Vec<(&'static str, String)>;

/// How many deleted endpoints [`Forgotten`] remembers: far more than can be deleted while one
/// attempt (at most `timeout_ms`, 300 s) is under way.
const FORGOTTEN_KEPT: usize = 4096;

/// The latest [`FORGOTTEN_KEPT`] deleted endpoint ids (ids are never reused).
#[derive(Debug, Default)]
struct Forgotten {
    ids: HashSet<i64>,
    order: VecDeque<i64>,
}

/// The server's metrics; one instance lives in [`crate::app::App`]. The metric handles are
/// cheap clones of shared atomics, so each scrape registers them in a fresh [`Registry`].
#[derive(Debug)]
pub struct Metrics {
    deliveries: Family<Labels, Counter>,
    endpoint_deliveries: Family<Labels, Counter>,
    /// Endpoints deleted lately: an attempt still under way when its endpoint was deleted must
    /// not bring the endpoint's series back.
    forgotten: RwLock<Forgotten>,
    latency: Histogram,
    /// How late (ms) the scheduler fired its last due schedule; set by the scheduler, -1 until
    /// it has fired anything (the gauge is left out until then).
    pub scheduler_lag_ms: AtomicI64,
    /// Unix time (s) of the newest good scheduled backup: -1 while backups are off (the metrics
    /// are left out), 0 until the first one.
    backup_last_success: AtomicI64,
    /// Scheduled backups that failed.
    backup_failures: Counter,
    /// Schedule runs not fired, by `reason`: `missed` or `overlap`.
    runs_skipped: Family<Labels, Counter>,
    runs_caught_up: Counter,
    firing_lag: Histogram,
    queue_wait: Histogram,
    retries: Family<Labels, Counter>,
}

/// A labelled family with one series per `(name, value)` at 0 from the start.
fn family_of(
    name: &'static str,
    values: impl IntoIterator<Item = &'static str>,
) -> Family<Labels, Counter> {
    let family = Family::<Labels, Counter>::default();
    for value in values {
        let _ = family.get_or_create_owned(&vec![(name, value.to_string())]);
    }
    family
}

fn wait_histogram() -> Histogram {
    Histogram::new(WAIT_BUCKETS_S)
}

impl Default for Metrics {
    fn default() -> Self {
        // Every outcome and reason is shown from the start, at 0.
        Metrics {
            deliveries: family_of("outcome", DeliveryOutcome::ALL.map(DeliveryOutcome::label)),
            endpoint_deliveries: Family::default(),
            forgotten: RwLock::default(),
            latency: Histogram::new(LATENCY_BUCKETS_MS.iter().map(|ms| *ms as f64 / 1000.0)),
            scheduler_lag_ms: AtomicI64::new(-1),
            backup_last_success: AtomicI64::new(-1),
            backup_failures: Counter::default(),
            runs_skipped: family_of("reason", ["missed", "overlap"]),
            runs_caught_up: Counter::default(),
            firing_lag: wait_histogram(),
            queue_wait: wait_histogram(),
            retries: family_of("reason", RetryReason::ALL.map(RetryReason::label)),
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
        // Held while counting, so that a deletion is either after (and removes the series)
        // or before (and this attempt is not counted per endpoint).
        let forgotten = self.forgotten.read();
        if forgotten
            .as_ref()
            .is_ok_and(|f| !f.ids.contains(&endpoint_id))
        {
            self.endpoint_deliveries
                .get_or_create(&vec![
                    ("endpoint_id", endpoint_id.to_string()),
                    ("outcome", label),
                ])
                .inc();
        }
        drop(forgotten);
        self.latency.observe(duration_ms as f64 / 1000.0);
    }

    /// Drops `endpoint_id`'s per-endpoint series (the endpoint was deleted), and keeps them
    /// from coming back when an attempt under way ends.
    pub fn forget_endpoint(&self, endpoint_id: i64) {
        let Ok(mut forgotten) = self.forgotten.write() else {
            return;
        };
        if forgotten.ids.insert(endpoint_id) {
            forgotten.order.push_back(endpoint_id);
        }
        if forgotten.order.len() > FORGOTTEN_KEPT
            && let Some(oldest) = forgotten.order.pop_front()
        {
            forgotten.ids.remove(&oldest);
        }
        for outcome in DeliveryOutcome::ALL {
            self.endpoint_deliveries.remove(&vec![
                ("endpoint_id", endpoint_id.to_string()),
                ("outcome", outcome.label().to_string()),
            ]);
        }
    }

    /// Counts what a committed scheduler transaction decided.
    pub fn record_firings(&self, counts: &FiringCounts) {
        let skipped = [
            ("missed", counts.missed_skipped),
            ("overlap", counts.overlap_skipped),
        ];
        for (reason, n) in skipped.into_iter().filter(|(_, n)| *n > 0) {
            self.runs_skipped
                .get_or_create(&vec![("reason", reason.to_string())])
                .inc_by(n);
        }
        self.runs_caught_up.inc_by(counts.caught_up);
        for lag in &counts.lags_ms {
            self.firing_lag.observe(*lag.max(&0) as f64 / 1000.0);
        }
    }

    /// A task's first attempt started `waited_ms` after the task was due.
    pub fn record_queue_wait(&self, waited_ms: i64) {
        self.queue_wait.observe(waited_ms.max(0) as f64 / 1000.0);
    }

    /// Counts a failed attempt that will be retried, by its [`RetryReason`].
    pub fn record_verdict(
        &self,
        sent: &crate::delivery::send::Sent,
        verdict: &crate::delivery::send::Verdict,
    ) {
        if let crate::store::tasks::AfterAttempt::RetryAt(_) = verdict.after {
            let reason = RetryReason::of(sent.status, sent.timed_out);
            self.retries
                .get_or_create(&vec![("reason", reason.label().to_string())])
                .inc();
        }
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
        tasks_by_status: &[(TaskStatus, i64)],
        otlp: Option<&crate::otlp::ExportCounts>,
    ) -> String {
        let mut registry = Registry::default();
        let tasks = Family::<Labels, Gauge>::default();
        for &status in TaskStatus::ALL {
            let count = tasks_by_status
                .iter()
                .find(|(s, _)| *s == status)
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
        registry.register(
            "webhookd_delivery_retries",
            "Failed attempts that will be retried, by reason",
            self.retries.clone(),
        );
        registry.register_with_unit(
            "webhookd_task_queue_wait",
            "Time from a task being due to its first attempt's first byte",
            prometheus_client::registry::Unit::Seconds,
            self.queue_wait.clone(),
        );
        registry.register(
            "webhookd_schedule_runs_skipped",
            "Schedule runs not fired: missed (catchup, misfire grace) or held back by overlap: skip",
            self.runs_skipped.clone(),
        );
        registry.register(
            "webhookd_schedule_runs_caught_up",
            "Missed schedule runs fired late, after downtime",
            self.runs_caught_up.clone(),
        );
        registry.register_with_unit(
            "webhookd_schedule_firing_lag",
            "Time from a schedule instant to its tasks being created",
            prometheus_client::registry::Unit::Seconds,
            self.firing_lag.clone(),
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
        let text = m.render(&[(TaskStatus::Pending, 7)], None);
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
    fn scheduler_totals_queue_wait_and_retries_by_reason() {
        let m = Metrics::default();
        let text = m.render(&[], None);
        for line in [
            "webhookd_schedule_runs_skipped_total{reason=\"missed\"} 0\n",
            "webhookd_schedule_runs_skipped_total{reason=\"overlap\"} 0\n",
            "webhookd_schedule_runs_caught_up_total 0\n",
            "webhookd_schedule_firing_lag_seconds_count 0\n",
            "webhookd_task_queue_wait_seconds_count 0\n",
            "webhookd_delivery_retries_total{reason=\"timeout\"} 0\n",
            "webhookd_delivery_retries_total{reason=\"http_other\"} 0\n",
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
        let slack = chrono::TimeDelta::seconds(10);
        let mut counts = FiringCounts {
            missed_skipped: 9,
            overlap_skipped: 2,
            ..FiringCounts::default()
        };
        counts.fired(chrono::TimeDelta::seconds(30), true, slack);
        counts.fired(chrono::TimeDelta::milliseconds(40), true, slack);
        // Overlap held back every target: neither a lag nor a catch-up.
        counts.fired(chrono::TimeDelta::seconds(90), false, slack);
        m.record_firings(&counts);
        m.record_queue_wait(3);
        m.record_queue_wait(-5);
        m.record_queue_wait(7_000);
        let text = m.render(&[], None);
        for line in [
            "webhookd_schedule_runs_skipped_total{reason=\"missed\"} 9\n",
            "webhookd_schedule_runs_skipped_total{reason=\"overlap\"} 2\n",
            "webhookd_schedule_runs_caught_up_total 1\n",
            "webhookd_schedule_firing_lag_seconds_bucket{le=\"0.05\"} 1\n",
            "webhookd_schedule_firing_lag_seconds_bucket{le=\"10.0\"} 1\n",
            "webhookd_schedule_firing_lag_seconds_bucket{le=\"30.0\"} 2\n",
            "webhookd_schedule_firing_lag_seconds_count 2\n",
            "webhookd_task_queue_wait_seconds_bucket{le=\"0.01\"} 2\n",
            "webhookd_task_queue_wait_seconds_bucket{le=\"5.0\"} 2\n",
            "webhookd_task_queue_wait_seconds_bucket{le=\"10.0\"} 3\n",
            "webhookd_task_queue_wait_seconds_sum 7.003\n",
            "# TYPE webhookd_task_queue_wait_seconds histogram\n",
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
    }

    #[test]
    fn retry_reasons_name_what_to_look_at() {
        for (status, timed_out, reason) in [
            (None, true, "timeout"),
            (None, false, "connect"),
            (Some(429), false, "http_429"),
            (Some(401), false, "http_4xx"),
            (Some(499), false, "http_4xx"),
            (Some(500), false, "http_5xx"),
            (Some(503), false, "http_5xx"),
            (Some(302), false, "http_other"),
            (Some(600), false, "http_other"),
        ] {
            assert_eq!(
                RetryReason::of(status, timed_out).label(),
                reason,
                "{status:?}"
            );
        }
        use crate::delivery::send::{Sent, Verdict};
        use crate::store::tasks::AfterAttempt;
        let m = Metrics::default();
        let verdict = |after| Verdict {
            after,
            disable_endpoint: false,
            error: Some("x".into()),
        };
        let timed_out = Sent {
            timed_out: true,
            ..Sent::default()
        };
        let http_503 = Sent {
            status: Some(503),
            ..Sent::default()
        };
        m.record_verdict(&timed_out, &verdict(AfterAttempt::RetryAt(1)));
        m.record_verdict(&http_503, &verdict(AfterAttempt::RetryAt(1)));
        m.record_verdict(&http_503, &verdict(AfterAttempt::RetryAt(2)));
        // Failed for good is no retry.
        m.record_verdict(&http_503, &verdict(AfterAttempt::Failed));
        let text = m.render(&[], None);
        for line in [
            "webhookd_delivery_retries_total{reason=\"timeout\"} 1\n",
            "webhookd_delivery_retries_total{reason=\"http_5xx\"} 2\n",
            "webhookd_delivery_retries_total{reason=\"connect\"} 0\n",
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
    }

    #[test]
    fn a_forgotten_endpoint_leaves_no_series() {
        let m = Metrics::default();
        m.record_delivery(7, DeliveryOutcome::Success, 3);
        m.record_delivery(7, DeliveryOutcome::HttpError, 3);
        m.record_delivery(8, DeliveryOutcome::Success, 3);
        m.forget_endpoint(7);
        // An attempt under way when the endpoint was deleted ends after: not counted per endpoint.
        m.record_delivery(7, DeliveryOutcome::Success, 3);
        let text = m.render(&[], None);
        assert!(!text.contains("endpoint_id=\"7\""), "{text}");
        assert!(text.contains(
            "webhookd_endpoint_deliveries_total{endpoint_id=\"8\",outcome=\"success\"} 1\n"
        ));
        // The totals keep every attempt.
        assert!(text.contains("webhookd_deliveries_total{outcome=\"success\"} 3\n"));
        // Only the latest deletions are remembered.
        for id in 100..100 + FORGOTTEN_KEPT as i64 {
            m.forget_endpoint(id);
        }
        m.record_delivery(7, DeliveryOutcome::Success, 3);
        m.record_delivery(100, DeliveryOutcome::Success, 3);
        let text = m.render(&[], None);
        assert!(
            text.contains("{endpoint_id=\"7\",outcome=\"success\"} 1\n"),
            "{text}"
        );
        assert!(!text.contains("endpoint_id=\"100\""), "{text}");
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
