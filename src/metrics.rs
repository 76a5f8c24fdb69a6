//! In-memory counters behind `GET /metrics` and their Prometheus text rendering (contract §9).
//! Counting is lock-free (atomics), so the delivery hot path pays a few relaxed increments.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// Upper bounds (ms) of the delivery latency histogram buckets; `+Inf` follows.
const LATENCY_BUCKETS_MS: [u64; 12] = [
    5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10_000, 30_000,
];

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

/// The server's counters; one instance lives in [`crate::app::App`].
#[derive(Debug)]
pub struct Metrics {
    deliveries: [AtomicU64; 3],
    /// Cumulative counts per bucket of [`LATENCY_BUCKETS_MS`], then `+Inf`.
    latency_buckets: [AtomicU64; LATENCY_BUCKETS_MS.len() + 1],
    latency_sum_ms: AtomicU64,
    /// How late (ms) the scheduler fired its last due schedule; set by the scheduler, -1 until
    /// it has fired anything.
    pub scheduler_lag_ms: AtomicI64,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            deliveries: Default::default(),
            latency_buckets: Default::default(),
            latency_sum_ms: AtomicU64::new(0),
            scheduler_lag_ms: AtomicI64::new(-1),
        }
    }
}

impl Metrics {
    /// Counts one delivery attempt and its duration.
    pub fn record_delivery(&self, outcome: DeliveryOutcome, duration_ms: u64) {
        let index = DeliveryOutcome::ALL
            .iter()
            .position(|o| *o == outcome)
            .unwrap_or(0);
        self.deliveries[index].fetch_add(1, Ordering::Relaxed);
        let bucket = LATENCY_BUCKETS_MS
            .iter()
            .position(|le| duration_ms <= *le)
            .unwrap_or(LATENCY_BUCKETS_MS.len());
        self.latency_buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.latency_sum_ms
            .fetch_add(duration_ms, Ordering::Relaxed);
    }

    /// The Prometheus text exposition, with the task counts by status read by the caller.
    pub fn render(&self, tasks_by_status: &[(String, i64)]) -> String {
        let mut out = String::with_capacity(2048);
        out.push_str("# HELP webhookd_tasks Tasks by status.\n# TYPE webhookd_tasks gauge\n");
        for status in ["pending", "running", "success", "failed", "canceled"] {
            let count = tasks_by_status
                .iter()
                .find(|(s, _)| s == status)
                .map_or(0, |(_, n)| *n);
            let _ = writeln!(out, "webhookd_tasks{{status=\"{status}\"}} {count}");
        }
        out.push_str(
            "# HELP webhookd_deliveries_total Delivery attempts by outcome.\n# TYPE webhookd_deliveries_total counter\n",
        );
        for (outcome, count) in DeliveryOutcome::ALL.iter().zip(&self.deliveries) {
            let _ = writeln!(
                out,
                "webhookd_deliveries_total{{outcome=\"{}\"}} {}",
                outcome.label(),
                count.load(Ordering::Relaxed)
            );
        }
        out.push_str(
            "# HELP webhookd_delivery_duration_seconds Time from sending a delivery to its outcome.\n# TYPE webhookd_delivery_duration_seconds histogram\n",
        );
        let mut cumulative = 0;
        for (i, bucket) in self.latency_buckets.iter().enumerate() {
            cumulative += bucket.load(Ordering::Relaxed);
            let le = LATENCY_BUCKETS_MS.get(i).map_or_else(
                || "+Inf".to_string(),
                |ms| format!("{}", *ms as f64 / 1000.0),
            );
            let _ = writeln!(
                out,
                "webhookd_delivery_duration_seconds_bucket{{le=\"{le}\"}} {cumulative}"
            );
        }
        let sum = self.latency_sum_ms.load(Ordering::Relaxed) as f64 / 1000.0;
        let _ = writeln!(out, "webhookd_delivery_duration_seconds_sum {sum}");
        let _ = writeln!(out, "webhookd_delivery_duration_seconds_count {cumulative}");
        let lag = self.scheduler_lag_ms.load(Ordering::Relaxed);
        if lag >= 0 {
            out.push_str(
                "# HELP webhookd_scheduler_lag_seconds How late the last schedule firing was.\n# TYPE webhookd_scheduler_lag_seconds gauge\n",
            );
            let _ = writeln!(
                out,
                "webhookd_scheduler_lag_seconds {}",
                lag as f64 / 1000.0
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counts_and_a_cumulative_histogram() {
        let m = Metrics::default();
        m.record_delivery(DeliveryOutcome::Success, 3);
        m.record_delivery(DeliveryOutcome::Success, 40);
        m.record_delivery(DeliveryOutcome::NetworkError, 60_000);
        let text = m.render(&[("pending".into(), 7)]);
        assert!(text.contains("webhookd_tasks{status=\"pending\"} 7\n"));
        assert!(text.contains("webhookd_tasks{status=\"failed\"} 0\n"));
        assert!(text.contains("webhookd_deliveries_total{outcome=\"success\"} 2\n"));
        assert!(text.contains("webhookd_deliveries_total{outcome=\"network_error\"} 1\n"));
        assert!(text.contains("webhookd_delivery_duration_seconds_bucket{le=\"0.005\"} 1\n"));
        assert!(text.contains("webhookd_delivery_duration_seconds_bucket{le=\"0.05\"} 2\n"));
        assert!(text.contains("webhookd_delivery_duration_seconds_bucket{le=\"+Inf\"} 3\n"));
        assert!(text.contains("webhookd_delivery_duration_seconds_count 3\n"));
        assert!(!text.contains("scheduler_lag"));
        m.scheduler_lag_ms.store(1500, Ordering::Relaxed);
        assert!(
            m.render(&[])
                .contains("webhookd_scheduler_lag_seconds 1.5\n")
        );
    }
}
