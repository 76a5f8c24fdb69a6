//! Endpoint health (docs/design.md §11): folds one dispatcher round's attempt results into one
//! change per endpoint, so the result commit writes each endpoint once per round however many
//! of its attempts finished, and decides auto-disable there (no extra transaction). A change a
//! round could not write (another node was writing that endpoint, [`Carried`]) is folded
//! before the next round's change for the endpoint, earlier first ([`Seen::then`]).

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

impl Seen {
    /// One attempt's result at `at`.
    pub fn one(success: bool, at: i64, quiet: bool) -> Seen {
        let delta = if success {
            HealthDelta {
                last_success_at: Some(at),
                ..HealthDelta::default()
            }
        } else {
            HealthDelta {
                last_failure_at: Some(at),
                failures: 1,
                first_failure_at: Some(at),
                ..HealthDelta::default()
            }
        };
        Seen {
            delta,
            last_failure_quiet: !success && quiet,
        }
    }

    /// This change, then `later`: what writing the two in turn writes, as one change. A success
    /// in `later` restarts the streak from the failures after it; without one, `later`'s
    /// failures extend this one's streak. The latest times win.
    pub fn then(self, later: Seen) -> Seen {
        let (earlier, after) = (self.delta, later.delta);
        let (failures, first_failure_at) = match after.last_success_at {
            Some(_) => (after.failures, after.first_failure_at),
            None => (
                earlier.failures + after.failures,
                earlier.first_failure_at.or(after.first_failure_at),
            ),
        };
        Seen {
            delta: HealthDelta {
                last_success_at: earlier.last_success_at.max(after.last_success_at),
                last_failure_at: earlier.last_failure_at.max(after.last_failure_at),
                failures,
                first_failure_at,
            },
            last_failure_quiet: match after.last_failure_at {
                Some(_) => later.last_failure_quiet,
                None => self.last_failure_quiet,
            },
        }
    }
}

/// Collects a round's results per endpoint.
#[derive(Debug, Default, Clone)]
pub struct Fold {
    endpoints: BTreeMap<i64, Seen>,
}

impl Fold {
    /// Adds one attempt's result, in the order results are recorded.
    pub fn add(&mut self, endpoint_id: i64, success: bool, at: i64, quiet: bool) {
        let seen = self.endpoints.entry(endpoint_id).or_default();
        *seen = seen.then(Seen::one(success, at, quiet));
    }

    /// Each endpoint seen, by id.
    pub fn into_endpoints(self) -> impl Iterator<Item = (i64, Seen)> {
        self.endpoints.into_iter()
    }
}

/// Health changes a dispatcher's round could not write because another writer (another node's
/// round) was writing the endpoint at that moment, kept in memory for its next round: folded
/// before that round's change for the endpoint, or written on their own (waiting for the
/// endpoint) when the round has none. Nothing is lost; the stored health lags by a round.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Carried {
    endpoints: BTreeMap<i64, Seen>,
}

impl Carried {
    pub fn is_empty(&self) -> bool {
        self.endpoints.is_empty()
    }

    /// Keeps `seen` for `endpoint_id`, after what is already kept for it.
    pub fn keep(&mut self, endpoint_id: i64, seen: Seen) {
        let kept = self.endpoints.entry(endpoint_id).or_default();
        *kept = kept.then(seen);
    }

    /// What is kept for `endpoint_id`, then `later`.
    pub fn before(&self, endpoint_id: i64, later: Seen) -> Seen {
        self.endpoints
            .get(&endpoint_id)
            .map_or(later, |kept| kept.then(later))
    }

    /// What is kept for `endpoint_id`.
    pub fn get(&self, endpoint_id: i64) -> Option<Seen> {
        self.endpoints.get(&endpoint_id).copied()
    }

    /// Each endpoint kept, by id.
    pub fn iter(&self) -> impl Iterator<Item = (i64, Seen)> + '_ {
        self.endpoints.iter().map(|(id, seen)| (*id, *seen))
    }

    /// Some change kept holds a failure: writing it extends a streak, so it is followed by the
    /// auto-disable test.
    pub fn has_failures(&self) -> bool {
        self.endpoints.values().any(|s| s.delta.failures > 0)
    }

    /// Writing what is kept may publish an operator event (an endpoint disabled for failing).
    pub fn may_publish(&self) -> bool {
        self.endpoints
            .values()
            .any(|s| s.delta.failures > 0 && !s.last_failure_quiet)
    }

    /// What is kept, each endpoint's change followed by `round`'s for it.
    pub fn then_round(mut self, round: &Fold) -> Carried {
        for (&id, &seen) in &round.endpoints {
            self.keep(id, seen);
        }
        self
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

    fn failures(n: i64, first: i64, last: i64, quiet: bool) -> Seen {
        Seen {
            delta: HealthDelta {
                last_success_at: None,
                last_failure_at: Some(last),
                failures: n,
                first_failure_at: Some(first),
            },
            last_failure_quiet: quiet,
        }
    }

    fn success_then_failures(success: i64, n: i64, first: i64, last: i64) -> Seen {
        Seen {
            delta: HealthDelta {
                last_success_at: Some(success),
                last_failure_at: (n > 0).then_some(last),
                failures: n,
                first_failure_at: (n > 0).then_some(first),
            },
            last_failure_quiet: false,
        }
    }

    /// Earlier-then-later, with fixed vectors: what the two writes in turn leave is what the
    /// one folded write leaves.
    #[test]
    fn a_carried_change_folds_before_the_next_rounds() {
        // A success, then failures: the streak is the later failures.
        assert_eq!(
            success_then_failures(100, 0, 0, 0).then(failures(2, 110, 120, true)),
            Seen {
                delta: HealthDelta {
                    last_success_at: Some(100),
                    last_failure_at: Some(120),
                    failures: 2,
                    first_failure_at: Some(110),
                },
                last_failure_quiet: true,
            }
        );
        // Failures, then a success (and one failure after it): the success restarts the streak.
        assert_eq!(
            failures(3, 100, 120, false).then(success_then_failures(130, 1, 140, 140)),
            Seen {
                delta: HealthDelta {
                    last_success_at: Some(130),
                    last_failure_at: Some(140),
                    failures: 1,
                    first_failure_at: Some(140),
                },
                last_failure_quiet: false,
            }
        );
        // Failures, then failures: one streak, from the first, the later quiet flag.
        assert_eq!(
            failures(3, 100, 120, false).then(failures(2, 130, 140, true)),
            failures(5, 100, 140, true)
        );
        // A success with failures after it, then failures: the streak runs on from those.
        assert_eq!(
            success_then_failures(100, 1, 105, 105).then(failures(2, 110, 120, false)),
            success_then_failures(100, 3, 105, 120)
        );
        // Nothing kept, or nothing later: unchanged.
        let some = failures(3, 100, 120, true);
        assert_eq!(Seen::default().then(some), some);
        assert_eq!(some.then(Seen::default()), some);
    }

    /// A change is the same folded whichever way its parts are grouped, so a round's results
    /// folded one by one and a carried change folded before them agree.
    #[test]
    fn folding_is_grouping_free_and_matches_one_by_one() {
        let results = [
            (false, 10, false),
            (true, 20, false),
            (false, 30, true),
            (false, 40, false),
            (true, 50, false),
            (false, 60, true),
        ];
        for split in 0..=results.len() {
            let mut whole = Fold::default();
            let (mut earlier, mut later) = (Fold::default(), Fold::default());
            for (i, &(success, at, quiet)) in results.iter().enumerate() {
                whole.add(1, success, at, quiet);
                let part = if i < split { &mut earlier } else { &mut later };
                part.add(1, success, at, quiet);
            }
            let whole = whole.into_endpoints().next().unwrap().1;
            let carried = Carried::default().then_round(&earlier);
            let later = later
                .into_endpoints()
                .next()
                .map_or_else(Seen::default, |e| e.1);
            assert_eq!(carried.before(1, later), whole, "split at {split}");
        }
    }

    #[test]
    fn carried_failures_may_publish_unless_quiet() {
        let mut carried = Carried::default();
        assert!(!carried.has_failures() && !carried.may_publish());
        carried.keep(1, success_then_failures(100, 0, 0, 0));
        assert!(!carried.has_failures());
        carried.keep(2, failures(1, 110, 110, true));
        assert!(carried.has_failures() && !carried.may_publish());
        carried.keep(2, failures(1, 120, 120, false));
        assert!(carried.may_publish());
        assert_eq!(carried.get(2), Some(failures(2, 110, 120, false)));
    }

    #[test]
    fn hours_become_milliseconds_and_zero_is_never() {
        assert_eq!(Rules::from_hours(0.0).failing_after_ms, None);
        assert_eq!(Rules::from_hours(120.0).failing_after_ms, Some(432_000_000));
        assert_eq!(Rules::from_hours(0.001).failing_after_ms, Some(3_600));
    }
}
