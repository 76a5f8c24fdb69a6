//! Retry delays: when a failed delivery is attempted again (docs/design.md §5 "Retry policies"),
//! and parsing of a receiver's `Retry-After` header. Pure; no clock of its own.

use chrono::{DateTime, NaiveDateTime, Utc};

crate::store::word::words! {
    /// How the delay grows from one failed attempt to the next.
    Backoff, "back-off type" {
        /// Always `initial_delay_sec`.
        Fixed = "fixed",
        /// `initial_delay_sec × n`.
        Linear = "linear",
        /// `initial_delay_sec × 2^(n−1)`.
        Exponential = "exponential",
    }
}

crate::store::word::words! {
    /// Whether retry delays are spread at random, so that a receiver that comes back is not hit
    /// by every waiting retry at once.
    Jitter, "jitter" {
        /// Each delay is what the back-off says.
        Off = "none",
        /// Each delay is drawn uniformly from [delay/2, delay].
        Full = "full",
    }
}

/// The parts of a retry policy that decide when, and how often, a delivery is retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Total attempts, the first one included.
    pub max_attempts: u32,
    pub backoff: Backoff,
    pub initial_delay_sec: u64,
    /// Upper bound on every delay, `Retry-After` included.
    pub max_delay_sec: u64,
    /// A task whose first attempt began longer ago than this is not retried; `None`: no limit.
    pub max_age_sec: Option<u64>,
    pub jitter: Jitter,
}

impl RetryPolicy {
    /// The default for endpoints without a policy: 5 attempts, exponential, 60 s initial, 3600 s max.
    pub const DEFAULT: RetryPolicy = RetryPolicy {
        max_attempts: 5,
        backoff: Backoff::Exponential,
        initial_delay_sec: 60,
        max_delay_sec: 3600,
        max_age_sec: None,
        jitter: Jitter::Off,
    };

    /// Delay in seconds after failed attempt n (1-based): fixed = initial; linear = initial*n;
    /// exponential = initial*2^(n-1); capped at max_delay. A Retry-After (seconds, from a 429/503)
    /// is honoured when longer, still capped at max_delay.
    ///
    /// Arithmetic saturates, so this never overflows or panics for any `n` (up to `u32::MAX`).
    /// `n = 0` is treated as 1.
    pub fn next_delay_secs(&self, failed_attempt: u32, retry_after_secs: Option<u64>) -> u64 {
        let n = failed_attempt.max(1);
        let initial = self.initial_delay_sec;
        let base = match self.backoff {
            Backoff::Fixed => initial,
            Backoff::Linear => initial.saturating_mul(u64::from(n)),
            Backoff::Exponential => {
                if initial == 0 {
                    0
                } else {
                    // 2^(n-1) overflows u64 from n = 65 on; saturate to "huge", the cap follows.
                    2u64.checked_pow(n - 1)
                        .map_or(u64::MAX, |factor| initial.saturating_mul(factor))
                }
            }
        };
        base.max(retry_after_secs.unwrap_or(0))
            .min(self.max_delay_sec)
    }
}

impl RetryPolicy {
    /// The delay in milliseconds after failed attempt n, jitter applied: `draw` is a random
    /// number in [0, 1) that the caller supplies (so this stays pure). With [`Jitter::Full`] the
    /// back-off delay `d` (after its cap) becomes `d/2 + draw × d/2`, uniform over [d/2, d]; a
    /// longer `Retry-After` is honoured as is, never shortened by jitter, still under the cap.
    pub fn next_delay_ms(
        &self,
        failed_attempt: u32,
        retry_after_secs: Option<u64>,
        draw: f64,
    ) -> u64 {
        let cap_ms = self.max_delay_sec.saturating_mul(1000);
        let base_ms = self
            .next_delay_secs(failed_attempt, None)
            .saturating_mul(1000);
        let jittered = match self.jitter {
            Jitter::Off => base_ms,
            Jitter::Full => {
                let half = base_ms / 2;
                let span = base_ms - half;
                // `draw` in [0, 1): the product stays below `span`; clamp a careless draw.
                let extra = (span as f64 * draw.clamp(0.0, 1.0)) as u64;
                half + extra.min(span)
            }
        };
        let asked_ms = retry_after_secs.unwrap_or(0).saturating_mul(1000);
        jittered.max(asked_ms.min(cap_ms))
    }

    /// Why a failed task is not retried because of `max_age_sec`, when its first attempt began
    /// at `first_attempt_ms` and it is now `now_ms`; `None` when it may be retried.
    pub fn too_old(&self, first_attempt_ms: i64, now_ms: i64) -> Option<String> {
        let max_age = self.max_age_sec?;
        let age_ms = now_ms.saturating_sub(first_attempt_ms).max(0);
        let limit_ms = i64::try_from(max_age.saturating_mul(1000)).unwrap_or(i64::MAX);
        (age_ms > limit_ms).then(|| {
            format!(
                "not retried: first attempt was {} s ago, max_age_sec is {max_age}",
                age_ms / 1000
            )
        })
    }
}

/// Parses a Retry-After header value: delay-seconds, or an HTTP-date (IMF-fixdate, e.g.
/// "Wed, 21 Oct 2015 07:28:00 GMT") relative to `now`; returns seconds (0 if in the past), None if unparseable.
///
/// Surrounding whitespace is ignored. Delay-seconds too large for `u64` saturate (the policy's
/// cap applies later). Besides IMF-fixdate, the two obsolete HTTP-date forms that RFC 9110 §5.6.7
/// says recipients must accept are understood too: RFC 850 (`Sunday, 06-Nov-94 08:49:37 GMT`)
/// and asctime (`Sun Nov  6 08:49:37 1994`). A date's distance from `now` is rounded up to whole
/// seconds, so a retry is never scheduled before the date the receiver asked for.
pub fn parse_retry_after(value: &str, now: DateTime<Utc>) -> Option<u64> {
    let value = value.trim();
    if value.is_empty() {
        return None;
    }
    if value.bytes().all(|b| b.is_ascii_digit()) {
        // All digits, so the only possible parse error is overflow.
        return Some(value.parse::<u64>().unwrap_or(u64::MAX));
    }
    let date = parse_http_date(value)?;
    let millis = (date - now).num_milliseconds();
    if millis <= 0 {
        return Some(0);
    }
    Some(u64::try_from(millis).map_or(0, |ms| ms.div_ceil(1000)))
}

/// An HTTP-date in any of its three forms (RFC 9110 §5.6.7), as UTC.
fn parse_http_date(value: &str) -> Option<DateTime<Utc>> {
    const FORMATS: [&str; 3] = [
        "%a, %d %b %Y %H:%M:%S GMT", // IMF-fixdate
        "%A, %d-%b-%y %H:%M:%S GMT", // RFC 850
        "%a %b %e %H:%M:%S %Y",      // asctime
    ];
    FORMATS
        .iter()
        .find_map(|format| NaiveDateTime::parse_from_str(value, format).ok())
        .map(|naive| naive.and_utc())
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn policy(backoff: Backoff, initial: u64, max: u64) -> RetryPolicy {
        RetryPolicy {
            max_attempts: 10,
            backoff,
            initial_delay_sec: initial,
            max_delay_sec: max,
            max_age_sec: None,
            jitter: Jitter::Off,
        }
    }

    #[test]
    fn full_jitter_spans_half_to_whole_delay() {
        let p = RetryPolicy {
            jitter: Jitter::Full,
            ..policy(Backoff::Exponential, 10, 100)
        };
        // Fixed draws: 0 gives the half, just under 1 the whole, 0.5 the middle.
        assert_eq!(p.next_delay_ms(1, None, 0.0), 5_000);
        assert_eq!(p.next_delay_ms(1, None, 0.5), 7_500);
        assert_eq!(p.next_delay_ms(1, None, 0.999_9), 9_999);
        assert_eq!(p.next_delay_ms(3, None, 0.25), 25_000); // 40 s → [20 s, 40 s]
        // The cap applies before the jitter: [50 s, 100 s] at attempt 10.
        assert_eq!(p.next_delay_ms(10, None, 0.0), 50_000);
        assert_eq!(p.next_delay_ms(10, None, 0.999_99), 99_999);
        // Out-of-range draws are clamped, never outside [d/2, d].
        assert_eq!(p.next_delay_ms(1, None, -3.0), 5_000);
        assert_eq!(p.next_delay_ms(1, None, 7.0), 10_000);
        // A longer Retry-After is honoured as is (capped), not jittered down.
        assert_eq!(p.next_delay_ms(1, Some(40), 0.0), 40_000);
        assert_eq!(p.next_delay_ms(1, Some(400), 0.0), 100_000);
        // Odd milliseconds: 1 s → [500, 1000].
        let one = RetryPolicy {
            jitter: Jitter::Full,
            ..policy(Backoff::Fixed, 1, 100)
        };
        assert_eq!(one.next_delay_ms(1, None, 0.0), 500);
        for i in 0..100 {
            let d = one.next_delay_ms(1, None, f64::from(i) / 100.0);
            assert!((500..=1000).contains(&d), "{d}");
        }
    }

    #[test]
    fn without_jitter_the_delay_is_the_back_off_in_ms() {
        use crate::store::Word;
        let p = policy(Backoff::Linear, 30, 3600);
        for draw in [0.0, 0.3, 0.99] {
            assert_eq!(p.next_delay_ms(2, None, draw), 60_000);
        }
        assert_eq!(p.next_delay_ms(2, Some(90), 0.0), 90_000);
        assert_eq!(Jitter::from_word("full"), Some(Jitter::Full));
        assert_eq!(Jitter::from_word("none"), Some(Jitter::Off));
        assert_eq!(Jitter::from_word("half"), None);
    }

    #[test]
    fn max_age_stops_retries_past_it() {
        let p = RetryPolicy {
            max_age_sec: Some(3600),
            ..policy(Backoff::Fixed, 60, 3600)
        };
        let first = 1_000_000;
        assert_eq!(
            p.too_old(first, first + 3_600_000),
            None,
            "exactly at the limit"
        );
        assert_eq!(
            p.too_old(first, first + 3_700_000).as_deref(),
            Some("not retried: first attempt was 3700 s ago, max_age_sec is 3600")
        );
        assert_eq!(p.too_old(first, first - 5), None, "a clock step back");
        assert_eq!(policy(Backoff::Fixed, 60, 3600).too_old(0, i64::MAX), None);
    }

    fn delays(p: &RetryPolicy, upto: u32) -> Vec<u64> {
        (1..=upto).map(|n| p.next_delay_secs(n, None)).collect()
    }

    #[test]
    fn backoff_words_round_trip() {
        use crate::store::Word;
        for b in [Backoff::Fixed, Backoff::Linear, Backoff::Exponential] {
            assert_eq!(Backoff::from_word(b.word()), Some(b));
            assert_eq!(serde_json::to_value(b).unwrap(), b.word());
        }
        assert_eq!(Backoff::ALL.len(), 3);
        assert_eq!(
            Backoff::from_word("exponential"),
            Some(Backoff::Exponential)
        );
        assert_eq!(Backoff::from_word("Exponential"), None);
        assert_eq!(Backoff::from_word(" fixed"), None);
        assert_eq!(Backoff::from_word(""), None);
        assert_eq!(Backoff::from_word("random"), None);
    }

    #[test]
    fn default_policy() {
        let p = RetryPolicy::DEFAULT;
        assert_eq!(p.max_attempts, 5);
        assert_eq!(p.backoff, Backoff::Exponential);
        assert_eq!(p.initial_delay_sec, 60);
        assert_eq!(p.max_delay_sec, 3600);
        assert_eq!(delays(&p, 8), [60, 120, 240, 480, 960, 1920, 3600, 3600]);
    }

    #[test]
    fn fixed_backoff() {
        assert_eq!(
            delays(&policy(Backoff::Fixed, 30, 3600), 4),
            [30, 30, 30, 30]
        );
    }

    #[test]
    fn linear_backoff() {
        assert_eq!(
            delays(&policy(Backoff::Linear, 30, 3600), 5),
            [30, 60, 90, 120, 150]
        );
    }

    #[test]
    fn exponential_backoff() {
        assert_eq!(
            delays(&policy(Backoff::Exponential, 10, 3600), 6),
            [10, 20, 40, 80, 160, 320]
        );
    }

    #[test]
    fn delays_are_capped_at_max_delay() {
        assert_eq!(
            delays(&policy(Backoff::Exponential, 10, 100), 6),
            [10, 20, 40, 80, 100, 100]
        );
        assert_eq!(
            delays(&policy(Backoff::Linear, 40, 100), 4),
            [40, 80, 100, 100]
        );
        // Cap below initial (rejected by validation, but still honoured here).
        assert_eq!(delays(&policy(Backoff::Fixed, 60, 10), 2), [10, 10]);
    }

    #[test]
    fn zero_initial_delay_retries_immediately() {
        for b in [Backoff::Fixed, Backoff::Linear, Backoff::Exponential] {
            let p = policy(b, 0, 3600);
            assert_eq!(p.next_delay_secs(1, None), 0);
            assert_eq!(p.next_delay_secs(200, None), 0);
            assert_eq!(p.next_delay_secs(u32::MAX, None), 0);
        }
    }

    #[test]
    fn attempt_zero_is_treated_as_first() {
        let p = policy(Backoff::Exponential, 10, 3600);
        assert_eq!(p.next_delay_secs(0, None), 10);
        let p = policy(Backoff::Linear, 10, 3600);
        assert_eq!(p.next_delay_secs(0, None), 10);
    }

    #[test]
    fn retry_after_longer_is_honoured() {
        let p = policy(Backoff::Exponential, 10, 3600);
        assert_eq!(p.next_delay_secs(1, Some(500)), 500);
        assert_eq!(p.next_delay_secs(3, Some(41)), 41);
    }

    #[test]
    fn retry_after_shorter_is_ignored() {
        let p = policy(Backoff::Exponential, 10, 3600);
        assert_eq!(p.next_delay_secs(3, Some(5)), 40);
        assert_eq!(p.next_delay_secs(3, Some(0)), 40);
    }

    #[test]
    fn retry_after_over_the_cap_is_capped() {
        let p = policy(Backoff::Fixed, 10, 3600);
        assert_eq!(p.next_delay_secs(1, Some(86_400)), 3600);
        assert_eq!(p.next_delay_secs(1, Some(u64::MAX)), 3600);
    }

    #[test]
    fn huge_attempt_numbers_do_not_overflow() {
        let max = 604_800;
        for b in [Backoff::Fixed, Backoff::Linear, Backoff::Exponential] {
            let p = policy(b, 86_400, max);
            for n in [64, 65, 66, 1_000, u32::MAX - 1, u32::MAX] {
                let expected = if b == Backoff::Fixed { 86_400 } else { max };
                assert_eq!(p.next_delay_secs(n, None), expected, "{b:?} n={n}");
                assert_eq!(p.next_delay_secs(n, Some(u64::MAX)), max);
            }
        }
        // Even with an unbounded cap, the result saturates instead of wrapping.
        let p = policy(Backoff::Exponential, u64::MAX, u64::MAX);
        assert_eq!(p.next_delay_secs(u32::MAX, None), u64::MAX);
        let p = policy(Backoff::Linear, u64::MAX, u64::MAX);
        assert_eq!(p.next_delay_secs(u32::MAX, None), u64::MAX);
        // 2^63 still fits: n = 64 with initial 1.
        let p = policy(Backoff::Exponential, 1, u64::MAX);
        assert_eq!(p.next_delay_secs(64, None), 1 << 63);
        assert_eq!(p.next_delay_secs(65, None), u64::MAX);
    }

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2015, 10, 21, 7, 27, 0).unwrap()
    }

    #[test]
    fn retry_after_delay_seconds() {
        assert_eq!(parse_retry_after("120", now()), Some(120));
        assert_eq!(parse_retry_after("0", now()), Some(0));
        assert_eq!(parse_retry_after("  30 ", now()), Some(30));
        assert_eq!(
            parse_retry_after("99999999999999999999999", now()),
            Some(u64::MAX)
        );
    }

    #[test]
    fn retry_after_http_date() {
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now()),
            Some(60)
        );
        // Obsolete forms.
        assert_eq!(
            parse_retry_after("Wednesday, 21-Oct-15 07:28:00 GMT", now()),
            Some(60)
        );
        assert_eq!(
            parse_retry_after("Wed Oct 21 07:28:00 2015", now()),
            Some(60)
        );
        let early = Utc.with_ymd_and_hms(2015, 10, 1, 7, 27, 0).unwrap();
        assert_eq!(
            parse_retry_after("Thu Oct  1 07:28:00 2015", early),
            Some(60)
        );
    }

    #[test]
    fn retry_after_date_in_the_past_is_zero() {
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:26:00 GMT", now()),
            Some(0)
        );
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:27:00 GMT", now()),
            Some(0)
        );
    }

    #[test]
    fn retry_after_partial_seconds_round_up() {
        let now = now() + chrono::Duration::milliseconds(500);
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now),
            Some(60)
        );
    }

    #[test]
    fn retry_after_unparseable() {
        for bad in [
            "",
            "   ",
            "-5",
            "1.5",
            "+10",
            "soon",
            "Wed, 21 Oct 2015 25:28:00 GMT",
            "Wed, 32 Oct 2015 07:28:00 GMT",
            "2015-10-21T07:28:00Z",
        ] {
            assert_eq!(parse_retry_after(bad, now()), None, "{bad:?}");
        }
    }
}
