//! The time source: the system clock in production, a movable clock in tests.
//!
//! Everything that decides "is it due yet" (scheduler, delivery pool, auth skew window) asks a
//! [`Clock`], so tests can jump hours ahead without sleeping.

use chrono::{DateTime, TimeZone, Utc};
use std::sync::Mutex;

/// A source of the current instant.
pub trait Clock: Send + Sync + 'static {
    fn now(&self) -> DateTime<Utc>;

    /// Current time as Unix epoch milliseconds, the unit the store uses.
    fn now_ms(&self) -> i64 {
        self.now().timestamp_millis()
    }
}

/// The real wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A clock that only moves when told to; for tests.
#[derive(Debug)]
pub struct ManualClock {
    now: Mutex<DateTime<Utc>>,
}

impl ManualClock {
    pub fn new(start: DateTime<Utc>) -> Self {
        ManualClock {
            now: Mutex::new(start),
        }
    }

    pub fn set(&self, to: DateTime<Utc>) {
        *self.now.lock().unwrap_or_else(|e| e.into_inner()) = to;
    }

    pub fn advance(&self, by: chrono::Duration) {
        let mut now = self.now.lock().unwrap_or_else(|e| e.into_inner());
        *now += by;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.now.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A [`Clock`] as the `governor` rate limiters read time: nanoseconds since the epoch, so
/// tests that move a manual clock move the limits too.
#[derive(Clone)]
pub struct GovernorClock(pub std::sync::Arc<dyn Clock>);

impl governor::clock::Clock for GovernorClock {
    type Instant = governor::nanos::Nanos;

    fn now(&self) -> governor::nanos::Nanos {
        let ms = u64::try_from(self.0.now_ms()).unwrap_or(0);
        governor::nanos::Nanos::from(ms.saturating_mul(1_000_000))
    }
}

/// Converts store milliseconds to a UTC instant (out-of-range values clamp to the epoch).
pub fn from_ms(ms: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(ms).single().unwrap_or_default()
}

/// Formats store milliseconds the way every reply shows time: RFC 3339, UTC, seconds, `Z`.
pub fn rfc3339(ms: i64) -> String {
    from_ms(ms).to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// The latest instant a reply can show: RFC 3339 has four-digit years, and chrono writes a
/// later one as `+10000-…`, which no RFC 3339 parser reads.
pub const LATEST_INSTANT_MS: i64 = 253_402_300_799_000; // 9999-12-31T23:59:59Z
/// The earliest such instant: the first of the year 0001 (the year 0000 is refused too: it is
/// RFC 3339 but no real calendar year, and chrono writes earlier years with a minus sign).
pub const EARLIEST_INSTANT_MS: i64 = -62_135_596_800_000; // 0001-01-01T00:00:00Z

/// Whether an instant can be written as RFC 3339 (years 0001 to 9999).
pub fn is_expressible(t: &DateTime<Utc>) -> bool {
    (EARLIEST_INSTANT_MS..=LATEST_INSTANT_MS).contains(&t.timestamp_millis())
}

/// Parses a time given in a request: an RFC 3339 string or epoch seconds (number or digits),
/// between the years 0001 and 9999 (so that every reply can show it as RFC 3339).
pub fn parse_instant(value: &serde_json::Value) -> Option<DateTime<Utc>> {
    parse_any_instant(value).filter(is_expressible)
}

fn parse_any_instant(value: &serde_json::Value) -> Option<DateTime<Utc>> {
    match value {
        // `1751328000.0` too: JSON Schema's integer (whole numbers past any instant we take are
        // refused anyway, so f64 is exact here).
        serde_json::Value::Number(n) => n
            .as_i64()
            .or_else(|| {
                n.as_f64()
                    .filter(|f| f.fract() == 0.0 && f.abs() < 1e15)
                    .map(|f| f as i64)
            })
            .and_then(|secs| Utc.timestamp_opt(secs, 0).single()),
        serde_json::Value::String(s) => {
            if let Ok(secs) = s.trim().parse::<i64>() {
                return Utc.timestamp_opt(secs, 0).single();
            }
            DateTime::parse_from_rfc3339(s.trim())
                .ok()
                .map(|t| t.with_timezone(&Utc))
        }
        _ => None,
    }
}

/// `serialize_with` helper: store milliseconds as an RFC 3339 reply timestamp.
pub fn ser_ms<S: serde::Serializer>(ms: &i64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&rfc3339(*ms))
}

/// `serialize_with` helper: optional store milliseconds as an RFC 3339 timestamp or null.
pub fn ser_opt_ms<S: serde::Serializer>(ms: &Option<i64>, s: S) -> Result<S::Ok, S::Error> {
    match ms {
        Some(ms) => s.serialize_str(&rfc3339(*ms)),
        None => s.serialize_none(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_seconds_precision_utc() {
        assert_eq!(rfc3339(1_763_758_800_123), "2025-11-21T21:00:00Z");
    }

    #[test]
    fn parses_rfc3339_and_epoch_seconds() {
        let want = Utc.with_ymd_and_hms(2026, 11, 21, 21, 0, 0).unwrap();
        let epoch = serde_json::json!(want.timestamp());
        assert_eq!(parse_instant(&epoch), Some(want));
        let text = serde_json::json!("2026-11-21T22:00:00+01:00");
        assert_eq!(parse_instant(&text), Some(want));
        assert_eq!(parse_instant(&serde_json::json!("yesterday")), None);
        assert_eq!(parse_instant(&serde_json::json!(true)), None);
    }

    #[test]
    fn manual_clock_moves_only_when_told() {
        let start = Utc.with_ymd_and_hms(2025, 3, 30, 0, 0, 0).unwrap();
        let clock = ManualClock::new(start);
        clock.advance(chrono::Duration::hours(2));
        assert_eq!(clock.now(), start + chrono::Duration::hours(2));
    }
}
