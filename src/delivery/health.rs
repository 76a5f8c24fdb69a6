//! Endpoint health (docs/design.md §11): folds one dispatcher round's attempt results into one
//! change per endpoint, so the result commit writes each endpoint once per round however many
//! of its attempts finished, and decides auto-disable there (no extra transaction).

use crate::store::endpoints::HealthDelta;
use std::collections::BTreeMap;

/// A streak shorter than this never auto-disables an endpoint, however long it lasted.
pub const MIN_FAILURES: i64 = 5;

/// When an endpoint is disabled with reason `failing`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rules {
    /// The streak must have lasted this long (ms) since its first failure; `None`: never.
    pub failing_after_ms: Option<i64>,
}

impl Rules {
    /// From `--disable-failing-after-hours` (a number of hours; 0 = never).
    pub fn from_hours(hours: f64) -> Rules {
        let failing_after_ms = (hours > 0.0).then(|| (hours * 3_600_000.0).round() as i64);
        Rules { failing_after_ms }
    }
}

/// One endpoint's attempts of a round, in the order they finished.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Seen {
    pub delta: HealthDelta,
    /// The round's last failure was a delivery that must not be reported by an operator
    /// event (an operator event's own delivery, or a test delivery).
    pub last_failure_quiet: bool,
}

/// Collects a round's results per endpoint.
#[derive(Debug, Default)]
pub struct Fold {
    endpoints: BTreeMap<i64, Seen>,
}

impl Fold {
    /// Adds one attempt's result, in the order results are recorded.
    pub fn add(&mut self, endpoint_id: i64, success: bool, at: i64, quiet: bool) {
        let seen = self.endpoints.entry(endpoint_id).or_default();
        let d = &mut seen.delta;
        if success {
            d.last_success_at = Some(d.last_success_at.map_or(at, |t| t.max(at)));
            d.failures = 0;
            d.first_failure_at = None;
        } else {
            d.last_failure_at = Some(d.last_failure_at.map_or(at, |t| t.max(at)));
            d.failures += 1;
            d.first_failure_at.get_or_insert(at);
            seen.last_failure_quiet = quiet;
        }
    }

    /// Each endpoint seen, by id.
    pub fn into_endpoints(self) -> impl Iterator<Item = (i64, Seen)> {
        self.endpoints.into_iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_success_restarts_the_streak_from_the_failures_after_it() {
        let mut f = Fold::default();
        f.add(1, false, 10, false);
        f.add(1, true, 20, false);
        f.add(1, false, 30, true);
        f.add(1, false, 40, false);
        f.add(2, false, 15, true);
        let seen: Vec<_> = f.into_endpoints().collect();
        assert_eq!(
            seen[0],
            (
                1,
                Seen {
                    delta: HealthDelta {
                        last_success_at: Some(20),
                        last_failure_at: Some(40),
                        failures: 2,
                        first_failure_at: Some(30),
                    },
                    last_failure_quiet: false,
                }
            )
        );
        assert_eq!(seen[1].1.delta.failures, 1);
        assert_eq!(seen[1].1.delta.last_success_at, None);
        assert!(seen[1].1.last_failure_quiet);
    }

    #[test]
    fn hours_become_milliseconds_and_zero_is_never() {
        assert_eq!(Rules::from_hours(0.0).failing_after_ms, None);
        assert_eq!(Rules::from_hours(120.0).failing_after_ms, Some(432_000_000));
        assert_eq!(Rules::from_hours(0.001).failing_after_ms, Some(3_600));
    }
}
