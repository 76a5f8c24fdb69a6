//! Cron schedules (docs/design.md §5): parse and validate a five-field expression in an IANA time
//! zone, and compute its fire instants in UTC with Vixie cron / cronie daylight-saving rules. Pure.
//!
//! Matching is done on the zone's wall clock, then each match becomes UTC instants:
//!
//! | transition                | fixed-time                               | interval-like     |
//! |---------------------------|------------------------------------------|-------------------|
//! | spring forward (gap)      | once, at the first instant after the gap | gap times skipped |
//! | fall back (repeated time) | first occurrence only                    | both occurrences  |
//!
//! A schedule is interval-like when its minute or hour field starts with `*`.
//!
//! croner parses the expression (after this module has validated and normalised it) and answers
//! "does this date match" — `L`, `W`, `#` and the day-of-month / day-of-week rule. The wall-clock
//! walk and the DST mapping are done here: croner's own DST handling treats lists and ranges of
//! fixed times as interval jobs (`15,45 2 * * *` skips a spring-forward day, `0 1-3 * * *` fires
//! again in a repeated hour), which docs/design.md §5 does not allow.

use chrono::{
    DateTime, Datelike, LocalResult, NaiveDate, NaiveDateTime, Offset, TimeDelta, TimeZone,
    Timelike, Utc,
};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};

/// Longest expression accepted; real ones are far shorter, and error messages quote input.
const MAX_EXPR_LEN: usize = 256;

/// How far ahead (in years of wall-clock dates) a search for the next fire goes. The Gregorian
/// calendar, weekdays included, repeats every 400 years, and `parse` rejects expressions with no
/// matching date in a 400-year cycle, so a valid schedule always fires within this horizon.
const HORIZON_YEARS: i32 = 401;

/// Largest clock set-back this module looks around for: a repeated wall-clock range can only
/// hold a later fire than `after` when the set-back is this close. Real ones are 30 min – 2 h.
const FOLD_WINDOW: TimeDelta = TimeDelta::hours(3);

/// Cap on wall-clock matches looked at in one search step (they are skipped only inside a DST
/// transition, so real zones use a few dozen at most).
const MAX_STEPS: usize = 20_000;

const MONTH_NAMES: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
const DAY_NAMES: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

/// A parsed, validated cron schedule in a time zone.
#[derive(Debug, Clone)]
pub struct CronSchedule {
    /// The expression as given (shorthands kept), for storage and display.
    expr: String,
    tz: Tz,
    /// croner's parse of the normalised fields; used for its day matcher (L, W, #, DOM/DOW rule).
    cron: Cron,
    /// Bit m set when minute m matches.
    minutes: u64,
    /// Bit h set when hour h matches.
    hours: u32,
    /// Bit m set when month m (1-12) matches.
    months: u16,
    interval_like: bool,
}

impl CronSchedule {
    /// Parses and validates. Err carries a human message suitable for an API error, naming what
    /// is wrong; it starts with the field name `cron_expr:` or `timezone:`.
    pub fn parse(cron_expr: &str, timezone: &str) -> Result<CronSchedule, String> {
        let fields = split_expression(cron_expr)?;

        let mut normalised = Vec::with_capacity(5);
        for (field, raw) in FIELDS.iter().zip(fields.iter()) {
            normalised.push(normalise_field(*field, raw)?);
        }
        // Vixie cron: a day field starting with `*` does not restrict the day; if either does,
        // a day must match both fields (one of them then matches everything); otherwise either.
        let dom_and_dow = fields[2].starts_with('*') || fields[4].starts_with('*');
        let cron = CronParser::builder()
            .seconds(Seconds::Disallowed)
            .year(Year::Disallowed)
            .dom_and_dow(dom_and_dow)
            .build()
            .parse(&normalised.join(" "))
            .map_err(|e| format!("cron_expr: {e}"))?;

        let p = &cron.pattern;
        let minutes = (0..60u32)
            .filter(|&m| p.minute_match(m).unwrap_or(false))
            .fold(0u64, |acc, m| acc | 1 << m);
        let hours = (0..24u32)
            .filter(|&h| p.hour_match(h).unwrap_or(false))
            .fold(0u32, |acc, h| acc | 1 << h);
        let months = (1..=12u32)
            .filter(|&m| p.month_match(m).unwrap_or(false))
            .fold(0u16, |acc, m| acc | 1 << m);
        if minutes == 0 || hours == 0 || months == 0 {
            return Err("cron_expr: never fires".to_string());
        }
        let tz = parse_timezone(timezone)?;

        let schedule = CronSchedule {
            expr: cron_expr.trim().to_string(),
            tz,
            cron,
            minutes,
            hours,
            months,
            interval_like: fields[0].starts_with('*') || fields[1].starts_with('*'),
        };
        // One full 400-year cycle of dates: none matching means none ever will.
        let cycle = (
            NaiveDate::from_ymd_opt(2000, 1, 1),
            NaiveDate::from_ymd_opt(2400, 1, 1),
        );
        if let (Some(from), Some(until)) = cycle
            && schedule.first_matching_date(from, until).is_none()
        {
            return Err(
                "cron_expr: never fires (no calendar date matches its day and month fields)"
                    .to_string(),
            );
        }
        Ok(schedule)
    }

    /// The first fire instant strictly after `after`, or None if none within a reasonable
    /// horizon (about 400 years). Instants are searched from, and returned in, years 1–9999
    /// both in UTC and on the schedule's wall clock: RFC 3339 has four-digit years, so an
    /// instant in year 10000 could not be written in a reply.
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        if !(1..=9999).contains(&after.year()) {
            return None;
        }
        let local_after = after.with_timezone(&self.tz).naive_local();
        let first = self.next_first_occurrence(after, local_after);
        let second = if self.interval_like {
            self.next_second_occurrence(after, local_after)
        } else {
            None
        };
        let next = match (first, second) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        next.filter(|t| crate::clock::is_expressible(t) && t.with_timezone(&self.tz).year() <= 9999)
    }

    /// Convenience: up to `count` successive fire instants strictly after `after`.
    pub fn upcoming(&self, after: DateTime<Utc>, count: usize) -> Vec<DateTime<Utc>> {
        let mut out = Vec::with_capacity(count.min(1024));
        let mut cursor = after;
        while out.len() < count {
            match self.next_after(cursor) {
                Some(next) => {
                    out.push(next);
                    cursor = next;
                }
                None => break,
            }
        }
        out
    }

    /// Whether the schedule is interval-like (minute or hour field starts with `*`).
    pub fn is_interval_like(&self) -> bool {
        self.interval_like
    }

    /// The expression as given (trimmed; shorthands such as `@daily` are kept).
    pub fn expr(&self) -> &str {
        &self.expr
    }

    /// The schedule's time zone.
    pub fn timezone(&self) -> Tz {
        self.tz
    }

    /// `at` on the schedule's wall clock, RFC 3339 with its offset at that instant, seconds
    /// precision (`2027-03-28T03:00:00+02:00`; UTC shows `+00:00`).
    pub fn local_rfc3339(&self, at: DateTime<Utc>) -> String {
        local_rfc3339(at, self.tz)
    }

    /// The earliest instant after `after` among each wall-clock match's first (or only)
    /// instant, and for fixed-time schedules the end of a gap that swallowed a match.
    ///
    /// That mapping never goes back in time as the wall clock goes forward, so the walk starts
    /// at `after`'s own wall-clock time and stops at the first instant past `after`; the only
    /// matches it skips are the first occurrences of a repeated range `after` is in the second
    /// pass of, and (interval-like) times inside a gap.
    fn next_first_occurrence(
        &self,
        after: DateTime<Utc>,
        local_after: NaiveDateTime,
    ) -> Option<DateTime<Utc>> {
        let mut wall = local_after;
        for _ in 0..MAX_STEPS {
            wall = self.next_wall_match(wall)?;
            let instant = match self.resolve(wall) {
                Wall::Once(at) => Some(at),
                Wall::Twice(first, _) => Some(first),
                Wall::Skipped if self.interval_like => None,
                Wall::Skipped => self.gap_end(wall),
            };
            if let Some(at) = instant
                && at > after
            {
                return Some(at);
            }
        }
        None
    }

    /// Interval-like only: the earliest second occurrence of a repeated wall-clock time that
    /// lies after `after`. Such an instant is within [`FOLD_WINDOW`] of a clock set-back that is
    /// itself that close to `after`, so nothing is searched unless the offset drops around it.
    fn next_second_occurrence(
        &self,
        after: DateTime<Utc>,
        local_after: NaiveDateTime,
    ) -> Option<DateTime<Utc>> {
        let offset = |at: DateTime<Utc>| {
            self.tz
                .offset_from_utc_datetime(&at.naive_utc())
                .fix()
                .local_minus_utc()
        };
        let before = after.checked_sub_signed(FOLD_WINDOW)?;
        let later = after.checked_add_signed(FOLD_WINDOW)?;
        if offset(before) <= offset(later) {
            return None;
        }
        let end = local_after.checked_add_signed(FOLD_WINDOW * 2)?;
        let mut wall = local_after.checked_sub_signed(FOLD_WINDOW)?;
        for _ in 0..MAX_STEPS {
            wall = self.next_wall_match(wall)?;
            if wall > end {
                return None;
            }
            if let Wall::Twice(_, second) = self.resolve(wall)
                && second > after
            {
                return Some(second);
            }
        }
        None
    }

    /// Where the zone puts a wall-clock time.
    fn resolve(&self, wall: NaiveDateTime) -> Wall {
        match self.tz.from_local_datetime(&wall) {
            LocalResult::Single(at) => Wall::Once(at.with_timezone(&Utc)),
            LocalResult::Ambiguous(a, b) => {
                let (a, b) = (a.with_timezone(&Utc), b.with_timezone(&Utc));
                Wall::Twice(a.min(b), a.max(b))
            }
            LocalResult::None => Wall::Skipped,
        }
    }

    /// The first instant after the gap that skips wall-clock time `wall`: the smallest instant
    /// whose wall-clock time is later than `wall` (for a 02:00→03:00 gap, 03:00 local).
    fn gap_end(&self, wall: NaiveDateTime) -> Option<DateTime<Utc>> {
        let wall_at = |secs: i64| {
            DateTime::from_timestamp(secs, 0).map(|at| at.with_timezone(&self.tz).naive_local())
        };
        // UTC offsets stay well within ±36 h, so wall(lo) <= wall < wall(hi).
        let base = wall.and_utc().timestamp();
        let (mut lo, mut hi) = (base - 36 * 3600, base + 36 * 3600);
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if wall_at(mid)? > wall {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        DateTime::from_timestamp(hi, 0)
    }

    /// The first matching wall-clock minute strictly after `after`, within the horizon.
    fn next_wall_match(&self, after: NaiveDateTime) -> Option<NaiveDateTime> {
        let start = after
            .with_second(0)?
            .with_nanosecond(0)?
            .checked_add_signed(TimeDelta::minutes(1))?;
        let until = NaiveDate::from_ymd_opt(start.year().checked_add(HORIZON_YEARS)?, 1, 1)?;
        let mut date = start.date();
        let mut from_minute = start.hour() * 60 + start.minute();
        loop {
            let day = self.first_matching_date(date, until)?;
            if day != date {
                from_minute = 0;
            }
            if let Some((h, m)) = self.first_time_from(from_minute) {
                return day.and_hms_opt(h, m, 0);
            }
            date = day.succ_opt()?;
            from_minute = 0;
        }
    }

    /// The first date in `from..until` whose month and day match.
    fn first_matching_date(&self, from: NaiveDate, until: NaiveDate) -> Option<NaiveDate> {
        let mut date = from;
        while date < until {
            if self.months & (1 << date.month()) == 0 {
                date = first_of_next_month(date)?;
                continue;
            }
            let weekday =
                croner::Weekday::from_days_from_sunday(date.weekday().num_days_from_sunday());
            if self
                .cron
                .pattern
                .day_match(date.year(), date.month(), date.day(), weekday)
                .unwrap_or(false)
            {
                return Some(date);
            }
            date = date.succ_opt()?;
        }
        None
    }

    /// The first matching (hour, minute) of a day at or after minute-of-day `from_minute`.
    fn first_time_from(&self, from_minute: u32) -> Option<(u32, u32)> {
        let mut minute = from_minute % 60;
        for hour in from_minute / 60..24 {
            if self.hours & (1 << hour) != 0 {
                let left = self.minutes >> minute << minute;
                if left != 0 {
                    return Some((hour, left.trailing_zeros()));
                }
            }
            minute = 0;
        }
        None
    }
}

/// How a zone maps one wall-clock time.
enum Wall {
    Once(DateTime<Utc>),
    /// A repeated time (clock set back): earlier and later instant.
    Twice(DateTime<Utc>, DateTime<Utc>),
    /// A time that does not exist (clock set forward).
    Skipped,
}

fn first_of_next_month(date: NaiveDate) -> Option<NaiveDate> {
    if date.month() == 12 {
        NaiveDate::from_ymd_opt(date.year().checked_add(1)?, 1, 1)
    } else {
        NaiveDate::from_ymd_opt(date.year(), date.month() + 1, 1)
    }
}

/// `at` in zone `tz`, RFC 3339 with the zone's offset at that instant, seconds precision.
pub fn local_rfc3339(at: DateTime<Utc>, tz: Tz) -> String {
    at.with_timezone(&tz)
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, false)
}

/// `ms` (store milliseconds) in the IANA zone named `timezone`; `None` for an unknown name
/// (stored schedules always have a known one).
pub fn local_rfc3339_ms(ms: i64, timezone: &str) -> Option<String> {
    let tz = timezone.parse::<Tz>().ok()?;
    Some(local_rfc3339(crate::clock::from_ms(ms), tz))
}

fn parse_timezone(timezone: &str) -> Result<Tz, String> {
    if timezone.is_empty() {
        return Err(
            "timezone: must not be empty (an IANA name such as 'Europe/Berlin' or 'UTC')".into(),
        );
    }
    timezone.parse::<Tz>().map_err(|_| {
        let unknown = format!("timezone: unknown time zone '{}'", clip(timezone));
        match crate::suggest::time_zone(timezone) {
            Some(meant) => format!("{unknown}; did you mean '{meant}'?"),
            None => format!("{unknown} (an IANA name such as 'Europe/Berlin' or 'UTC')"),
        }
    })
}

/// Expands a shorthand and splits the expression into its five fields (upper-cased).
fn split_expression(cron_expr: &str) -> Result<Vec<String>, String> {
    let expr = cron_expr.trim();
    if expr.is_empty() {
        return Err("cron_expr: must not be empty".to_string());
    }
    if expr.len() > MAX_EXPR_LEN {
        return Err(format!(
            "cron_expr: too long (at most {MAX_EXPR_LEN} characters)"
        ));
    }
    if let Some(bad) = expr
        .chars()
        .find(|c| !(c.is_ascii_graphic() || *c == ' ' || *c == '\t'))
    {
        return Err(format!("cron_expr: unexpected character {bad:?}"));
    }
    let expr = expr.to_ascii_uppercase();
    let expr = if expr.starts_with('@') {
        match expr.as_str() {
            "@YEARLY" | "@ANNUALLY" => "0 0 1 1 *",
            "@MONTHLY" => "0 0 1 * *",
            "@WEEKLY" => "0 0 * * 0",
            "@DAILY" | "@MIDNIGHT" => "0 0 * * *",
            "@HOURLY" => "0 * * * *",
            "@REBOOT" => return Err("cron_expr: @reboot is not supported".to_string()),
            _ => {
                return Err(format!(
                    "cron_expr: unknown shorthand '{}' (accepted: @yearly, @annually, @monthly, \
                     @weekly, @daily, @midnight, @hourly)",
                    clip(cron_expr.trim())
                ));
            }
        }
        .to_string()
    } else {
        expr
    };
    let fields: Vec<String> = expr.split_ascii_whitespace().map(str::to_string).collect();
    if fields.len() != 5 {
        return Err(format!(
            "cron_expr: expected 5 fields, got {}",
            fields.len()
        ));
    }
    Ok(fields)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Minute,
    Hour,
    DayOfMonth,
    Month,
    DayOfWeek,
}

const FIELDS: [Field; 5] = [
    Field::Minute,
    Field::Hour,
    Field::DayOfMonth,
    Field::Month,
    Field::DayOfWeek,
];

impl Field {
    fn name(self) -> &'static str {
        match self {
            Field::Minute => "minute",
            Field::Hour => "hour",
            Field::DayOfMonth => "day-of-month",
            Field::Month => "month",
            Field::DayOfWeek => "day-of-week",
        }
    }

    fn bounds(self) -> (u32, u32) {
        match self {
            Field::Minute => (0, 59),
            Field::Hour => (0, 23),
            Field::DayOfMonth => (1, 31),
            Field::Month => (1, 12),
            Field::DayOfWeek => (0, 7),
        }
    }

    fn invalid(self, text: &str) -> String {
        let hint = match self {
            Field::DayOfMonth => " (use numbers 1-31, '*', lists, ranges, steps, L, LW or nW)",
            Field::Month => " (use numbers 1-12 or JAN-DEC, '*', lists, ranges, steps)",
            Field::DayOfWeek => " (use 0-7 or SUN-SAT, '*', lists, ranges, steps, n#k or nL)",
            _ => " (use numbers, '*', lists, ranges, steps)",
        };
        format!(
            "cron_expr: invalid {} field '{}'{hint}",
            self.name(),
            clip(text)
        )
    }
}

/// Validates one field and rewrites it in the plain numeric form croner reads.
fn normalise_field(field: Field, raw: &str) -> Result<String, String> {
    if raw == "*" {
        return Ok("*".to_string());
    }
    if raw.contains('?') {
        return Err(format!(
            "cron_expr: '?' is not supported in the {} field; use '*'",
            field.name()
        ));
    }
    if raw.starts_with('+') {
        return Err(format!(
            "cron_expr: '+' is not supported in the {} field; when both day fields are \
             restricted a day matches if either matches",
            field.name()
        ));
    }
    let items = raw
        .split(',')
        .map(|item| normalise_item(field, raw, item))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(items.join(","))
}

fn normalise_item(field: Field, raw: &str, item: &str) -> Result<String, String> {
    let (min, max) = field.bounds();
    if item.is_empty() {
        return Err(format!(
            "cron_expr: empty list item in the {} field '{}'",
            field.name(),
            clip(raw)
        ));
    }
    if item == "*" {
        return Ok(format!("{min}-{max}"));
    }
    if field == Field::DayOfWeek
        && let Some((base, nth)) = item.split_once('#')
    {
        let nth = match nth {
            "L" => "L".to_string(),
            n if n.len() == 1 && ("1"..="5").contains(&n) => n.to_string(),
            _ => {
                return Err(format!(
                    "cron_expr: '#' takes 1-5 or L in the day-of-week field, got '{}'",
                    clip(item)
                ));
            }
        };
        return Ok(format!("{}#{nth}", value_or_range(field, raw, base)?));
    }
    if let Some((base, step)) = item.split_once('/') {
        let step = parse_number(step).ok_or_else(|| field.invalid(raw))?;
        let span = max - min + 1;
        if step == 0 || step > span {
            return Err(format!(
                "cron_expr: step must be 1-{span} in the {} field, got '{}'",
                field.name(),
                clip(item)
            ));
        }
        if base == "*" {
            return Ok(format!("*/{step}"));
        }
        if !base.contains('-') {
            return Err(format!(
                "cron_expr: a step needs '*' or a range before it, e.g. '*/{step}' or \
                 '{min}-{max}/{step}' (in the {} field '{}')",
                field.name(),
                clip(item)
            ));
        }
        return Ok(format!("{}/{step}", value_or_range(field, raw, base)?));
    }
    match field {
        Field::DayOfMonth if item == "L" || item == "LW" => return Ok(item.to_string()),
        Field::DayOfMonth if item.len() > 1 && item.ends_with('W') => {
            let day = value(field, raw, &item[..item.len() - 1], false)?;
            return Ok(format!("{day}W"));
        }
        Field::DayOfWeek if item == "L" => {
            return Err(
                "cron_expr: 'L' alone is not valid in the day-of-week field; use e.g. '5L' for \
                 the last Friday of the month"
                    .to_string(),
            );
        }
        Field::DayOfWeek if item.len() > 1 && item.ends_with('L') => {
            let day = value(field, raw, &item[..item.len() - 1], false)?;
            return Ok(format!("{day}#L"));
        }
        _ => {}
    }
    value_or_range(field, raw, item)
}

/// `n` or `a-b` (no wrap-around), as numbers.
fn value_or_range(field: Field, raw: &str, text: &str) -> Result<String, String> {
    match text.split_once('-') {
        None => Ok(value(field, raw, text, false)?.to_string()),
        Some((start, end)) => {
            let a = value(field, raw, start, false)?;
            let b = value(field, raw, end, a > 0)?;
            if a > b {
                return Err(format!(
                    "cron_expr: wrap-around range {} is not supported (in the {} field); \
                     split it into two ranges",
                    clip(text),
                    field.name()
                ));
            }
            Ok(format!("{a}-{b}"))
        }
    }
}

/// One value: a number in the field's bounds, or a month / weekday name. `SUN` ending a range
/// that starts later in the week (`sunday_is_7`) is 7, so `SAT-SUN` and `MON-SUN` are not
/// wrap-around ranges (and `SUN-SUN` stays Sunday only).
fn value(field: Field, raw: &str, text: &str, sunday_is_7: bool) -> Result<u32, String> {
    let (min, max) = field.bounds();
    if let Some(n) = parse_number(text) {
        if n < min || n > max {
            return Err(format!(
                "cron_expr: {} value {} is out of range {min}-{max}",
                field.name(),
                clip(text)
            ));
        }
        return Ok(n);
    }
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "cron_expr: {} value {} is out of range {min}-{max}",
            field.name(),
            clip(text)
        ));
    }
    let named = match field {
        Field::Month => MONTH_NAMES
            .iter()
            .position(|&m| m == text)
            .map(|i| i as u32 + 1),
        Field::DayOfWeek => DAY_NAMES
            .iter()
            .position(|&d| d == text)
            .map(|i| if i == 0 && sunday_is_7 { 7 } else { i as u32 }),
        _ => None,
    };
    named.ok_or_else(|| field.invalid(raw))
}

/// A plain decimal number of at most 4 digits.
fn parse_number(text: &str) -> Option<u32> {
    if text.is_empty() || text.len() > 4 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// Input quoted in an error message, cut to a readable length.
fn clip(text: &str) -> String {
    const MAX: usize = 40;
    if text.chars().count() <= MAX {
        text.to_string()
    } else {
        format!("{}…", text.chars().take(MAX).collect::<String>())
    }
}

#[cfg(test)]
#[path = "cron_vectors.rs"]
mod vectors;

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s)
            .unwrap_or_else(|e| panic!("bad test instant {s}: {e}"))
            .with_timezone(&Utc)
    }

    fn fmt(t: DateTime<Utc>) -> String {
        t.format("%Y-%m-%dT%H:%M:%SZ").to_string()
    }

    #[test]
    fn local_times_carry_the_offset_of_that_instant() {
        let at = |s: &str| DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc);
        let cases = [
            (
                "2027-03-28T01:00:00Z",
                "Europe/Berlin",
                "2027-03-28T03:00:00+02:00",
            ),
            (
                "2027-03-28T00:59:59Z",
                "Europe/Berlin",
                "2027-03-28T01:59:59+01:00",
            ),
            (
                "2026-11-01T06:30:00Z",
                "America/New_York",
                "2026-11-01T01:30:00-05:00",
            ),
            (
                "2026-11-01T05:30:00Z",
                "America/New_York",
                "2026-11-01T01:30:00-04:00",
            ),
            (
                "2026-11-21T21:00:00Z",
                "Asia/Kathmandu",
                "2026-11-22T02:45:00+05:45",
            ),
            (
                "2026-10-03T15:29:59Z",
                "Australia/Lord_Howe",
                "2026-10-04T01:59:59+10:30",
            ),
            (
                "2026-10-03T15:30:00Z",
                "Australia/Lord_Howe",
                "2026-10-04T02:30:00+11:00",
            ),
            ("2026-10-03T15:30:00Z", "UTC", "2026-10-03T15:30:00+00:00"),
        ];
        for (utc, tz, want) in cases {
            assert_eq!(
                local_rfc3339(at(utc), tz.parse().unwrap()),
                want,
                "{utc} {tz}"
            );
        }
        assert_eq!(local_rfc3339_ms(0, "Nowhere/Atlantis"), None);
    }

    fn sched(expr: &str, tz: &str) -> CronSchedule {
        CronSchedule::parse(expr, tz).unwrap_or_else(|e| panic!("{expr:?} in {tz}: {e}"))
    }

    /// The next `count` fires of `expr` in `tz` strictly after `from`, as RFC 3339 UTC strings.
    fn fires(expr: &str, tz: &str, from: &str, count: usize) -> Vec<String> {
        sched(expr, tz)
            .upcoming(at(from), count)
            .into_iter()
            .map(fmt)
            .collect()
    }

    fn err(expr: &str, tz: &str) -> String {
        match CronSchedule::parse(expr, tz) {
            Ok(s) => panic!("{expr:?} in {tz:?} should be rejected, parsed as {s:?}"),
            Err(e) => e,
        }
    }

    #[test]
    fn every_minute_and_strictly_after() {
        assert_eq!(
            fires("* * * * *", "UTC", "2025-01-01T00:00:00Z", 3),
            [
                "2025-01-01T00:01:00Z",
                "2025-01-01T00:02:00Z",
                "2025-01-01T00:03:00Z"
            ]
        );
        // Seconds and sub-seconds after a minute still move on to the next minute.
        let s = sched("* * * * *", "UTC");
        assert_eq!(
            s.next_after(at("2025-01-01T00:00:59.999Z"))
                .map(fmt)
                .as_deref(),
            Some("2025-01-01T00:01:00Z")
        );
        assert_eq!(
            fires("*/15 * * * *", "UTC", "2025-01-01T00:14:30Z", 2),
            ["2025-01-01T00:15:00Z", "2025-01-01T00:30:00Z"]
        );
        // Year and month roll-over.
        assert_eq!(
            fires("59 23 31 12 *", "UTC", "2025-06-01T00:00:00Z", 2),
            ["2025-12-31T23:59:00Z", "2026-12-31T23:59:00Z"]
        );
    }

    #[test]
    fn fixed_zone_offsets() {
        assert_eq!(
            fires("30 9 * * *", "Asia/Kolkata", "2025-01-01T00:00:00Z", 2),
            ["2025-01-01T04:00:00Z", "2025-01-02T04:00:00Z"]
        );
        assert_eq!(
            fires("0 9 * * *", "Europe/Berlin", "2025-07-01T00:00:00Z", 1),
            ["2025-07-01T07:00:00Z"]
        );
    }

    #[test]
    fn weekday_numbering() {
        // 2025-06-01 is a Sunday.
        let weekdays = [
            "2025-06-02T12:00:00Z",
            "2025-06-03T12:00:00Z",
            "2025-06-04T12:00:00Z",
            "2025-06-05T12:00:00Z",
            "2025-06-06T12:00:00Z",
            "2025-06-09T12:00:00Z",
        ];
        for expr in [
            "0 12 * * 1-5",
            "0 12 * * MON-FRI",
            "0 12 * * mon-fri",
            "0 12 * * 1,2,3,4,5",
        ] {
            assert_eq!(
                fires(expr, "UTC", "2025-06-01T00:00:00Z", 6),
                weekdays,
                "{expr}"
            );
        }
        let sundays = ["2025-06-01T12:00:00Z", "2025-06-08T12:00:00Z"];
        for expr in ["0 12 * * 0", "0 12 * * 7", "0 12 * * SUN", "0 12 * * sun"] {
            assert_eq!(
                fires(expr, "UTC", "2025-05-31T00:00:00Z", 2),
                sundays,
                "{expr}"
            );
        }
        let weekend = [
            "2025-06-07T12:00:00Z",
            "2025-06-08T12:00:00Z",
            "2025-06-14T12:00:00Z",
        ];
        for expr in [
            "0 12 * * SAT-SUN",
            "0 12 * * 6-7",
            "0 12 * * 6,0",
            "0 12 * * SAT,SUN",
        ] {
            assert_eq!(
                fires(expr, "UTC", "2025-06-02T00:00:00Z", 3),
                weekend,
                "{expr}"
            );
        }
        assert_eq!(
            fires("0 12 * * SUN-SUN", "UTC", "2025-05-31T00:00:00Z", 2),
            sundays
        );
        // 0-7 and */1 cover every day once.
        assert_eq!(
            fires("0 12 * * 0-7", "UTC", "2025-06-01T00:00:00Z", 3),
            fires("0 12 * * *", "UTC", "2025-06-01T00:00:00Z", 3)
        );
        assert_eq!(
            fires("0 12 * * MON-SUN", "UTC", "2025-06-01T00:00:00Z", 8),
            fires("0 12 * * *", "UTC", "2025-06-01T00:00:00Z", 8)
        );
    }

    #[test]
    fn month_names_lists_ranges_steps() {
        assert_eq!(
            fires("0 0 1 JAN,jul *", "UTC", "2025-02-01T00:00:00Z", 2),
            ["2025-07-01T00:00:00Z", "2026-01-01T00:00:00Z"]
        );
        assert_eq!(
            fires("0 0 1 */4 *", "UTC", "2025-02-01T00:00:00Z", 3),
            [
                "2025-05-01T00:00:00Z",
                "2025-09-01T00:00:00Z",
                "2026-01-01T00:00:00Z"
            ]
        );
        assert_eq!(
            fires("0 0 1 FEB-APR *", "UTC", "2025-01-01T00:00:00Z", 4),
            [
                "2025-02-01T00:00:00Z",
                "2025-03-01T00:00:00Z",
                "2025-04-01T00:00:00Z",
                "2026-02-01T00:00:00Z"
            ]
        );
        assert_eq!(
            fires("10-30/10 8-9 * * *", "UTC", "2025-01-01T00:00:00Z", 4),
            [
                "2025-01-01T08:10:00Z",
                "2025-01-01T08:20:00Z",
                "2025-01-01T08:30:00Z",
                "2025-01-01T09:10:00Z"
            ]
        );
        assert_eq!(
            fires("5,*/20 0 * * *", "UTC", "2025-01-01T00:00:00Z", 3),
            [
                "2025-01-01T00:05:00Z",
                "2025-01-01T00:20:00Z",
                "2025-01-01T00:40:00Z"
            ]
        );
        // Leading zeros are plain numbers.
        assert_eq!(
            fires("05 09 * * *", "UTC", "2025-01-01T00:00:00Z", 1),
            ["2025-01-01T09:05:00Z"]
        );
    }

    #[test]
    fn day_of_month_or_day_of_week() {
        // Both restricted: the 1st of the month OR any Monday (2025-10-01 is a Wednesday).
        assert_eq!(
            fires("0 0 1 * MON", "UTC", "2025-09-30T00:00:00Z", 7),
            [
                "2025-10-01T00:00:00Z",
                "2025-10-06T00:00:00Z",
                "2025-10-13T00:00:00Z",
                "2025-10-20T00:00:00Z",
                "2025-10-27T00:00:00Z",
                "2025-11-01T00:00:00Z",
                "2025-11-03T00:00:00Z"
            ]
        );
        assert_eq!(
            fires("0 0 13 * FRI", "UTC", "2025-06-01T00:00:00Z", 3),
            [
                "2025-06-06T00:00:00Z",
                "2025-06-13T00:00:00Z",
                "2025-06-20T00:00:00Z"
            ]
        );
        // One field `*`: only the other one counts.
        assert_eq!(
            fires("0 0 * * MON", "UTC", "2025-09-30T00:00:00Z", 2),
            ["2025-10-06T00:00:00Z", "2025-10-13T00:00:00Z"]
        );
        assert_eq!(
            fires("0 0 1 * *", "UTC", "2025-09-30T00:00:00Z", 2),
            ["2025-10-01T00:00:00Z", "2025-11-01T00:00:00Z"]
        );
        // Vixie cron (and Debian cron, cronsim): a day field starting with `*` does not count as
        // restricted, so `*/10` with MON means days 1, 11, 21, 31 that are also Mondays.
        assert_eq!(
            fires("0 0 */10 * MON", "UTC", "2025-01-01T00:00:00Z", 4),
            [
                "2025-03-31T00:00:00Z",
                "2025-04-21T00:00:00Z",
                "2025-07-21T00:00:00Z",
                "2025-08-11T00:00:00Z"
            ]
        );
    }

    #[test]
    fn last_nearest_weekday_and_nth() {
        assert_eq!(
            fires("0 0 L * *", "UTC", "2024-01-15T00:00:00Z", 4),
            [
                "2024-01-31T00:00:00Z",
                "2024-02-29T00:00:00Z",
                "2024-03-31T00:00:00Z",
                "2024-04-30T00:00:00Z"
            ]
        );
        assert_eq!(
            fires("0 0 L 2 *", "UTC", "2025-01-01T00:00:00Z", 2),
            ["2025-02-28T00:00:00Z", "2026-02-28T00:00:00Z"]
        );
        // Last weekday: 2025-05-31 is a Saturday, 2025-08-31 a Sunday.
        assert_eq!(
            fires("0 0 LW 5,8 *", "UTC", "2025-01-01T00:00:00Z", 2),
            ["2025-05-30T00:00:00Z", "2025-08-29T00:00:00Z"]
        );
        // Nearest weekday: 2025-03-15 is a Saturday -> Friday 14th; 2025-06-15 a Sunday ->
        // Monday 16th; 2025-11-01 a Saturday -> Monday 3rd (W stays in its month).
        assert_eq!(
            fires("0 0 15W 3,6 *", "UTC", "2025-01-01T00:00:00Z", 2),
            ["2025-03-14T00:00:00Z", "2025-06-16T00:00:00Z"]
        );
        assert_eq!(
            fires("0 0 1W 11 *", "UTC", "2025-01-01T00:00:00Z", 1),
            ["2025-11-03T00:00:00Z"]
        );
        // Third Friday, last Friday, first Monday of the month.
        assert_eq!(
            fires("0 0 * * 5#3", "UTC", "2025-01-01T00:00:00Z", 3),
            [
                "2025-01-17T00:00:00Z",
                "2025-02-21T00:00:00Z",
                "2025-03-21T00:00:00Z"
            ]
        );
        assert_eq!(
            fires("0 0 * * FRI#3", "UTC", "2025-01-01T00:00:00Z", 1),
            ["2025-01-17T00:00:00Z"]
        );
        assert_eq!(
            fires("0 0 * * 5L", "UTC", "2025-01-01T00:00:00Z", 3),
            [
                "2025-01-31T00:00:00Z",
                "2025-02-28T00:00:00Z",
                "2025-03-28T00:00:00Z"
            ]
        );
        assert_eq!(
            fires("0 0 * * 5#L", "UTC", "2025-01-01T00:00:00Z", 1),
            ["2025-01-31T00:00:00Z"]
        );
        assert_eq!(
            fires("0 0 * * MON#1", "UTC", "2025-01-01T00:00:00Z", 2),
            ["2025-01-06T00:00:00Z", "2025-02-03T00:00:00Z"]
        );
        assert_eq!(
            fires("0 0 * * 0#1", "UTC", "2025-01-01T00:00:00Z", 1),
            fires("0 0 * * 7#1", "UTC", "2025-01-01T00:00:00Z", 1)
        );
        // Fifth Friday of February only exists when 29 February is a Friday.
        assert_eq!(
            fires("0 0 * 2 5#5", "UTC", "2025-01-01T00:00:00Z", 2),
            ["2036-02-29T00:00:00Z", "2064-02-29T00:00:00Z"]
        );
    }

    #[test]
    fn leap_day_is_valid() {
        assert_eq!(
            fires("0 0 29 2 *", "UTC", "2025-01-01T00:00:00Z", 3),
            [
                "2028-02-29T00:00:00Z",
                "2032-02-29T00:00:00Z",
                "2036-02-29T00:00:00Z"
            ]
        );
        // 2100 is not a leap year: eight years between fires.
        assert_eq!(
            fires("0 0 29 2 *", "UTC", "2097-01-01T00:00:00Z", 1),
            ["2104-02-29T00:00:00Z"]
        );
    }

    #[test]
    fn shorthands() {
        let cases = [
            ("@yearly", "0 0 1 1 *", false),
            ("@annually", "0 0 1 1 *", false),
            ("@monthly", "0 0 1 * *", false),
            ("@weekly", "0 0 * * 0", false),
            ("@daily", "0 0 * * *", false),
            ("@midnight", "0 0 * * *", false),
            ("@hourly", "0 * * * *", true),
            ("@DAILY", "0 0 * * *", false),
        ];
        for (short, long, interval) in cases {
            let s = sched(short, "Europe/Berlin");
            assert_eq!(s.expr(), short);
            assert_eq!(s.is_interval_like(), interval, "{short}");
            assert_eq!(
                fires(short, "Europe/Berlin", "2025-03-29T12:00:00Z", 5),
                fires(long, "Europe/Berlin", "2025-03-29T12:00:00Z", 5),
                "{short}"
            );
        }
        assert_eq!(
            fires("@weekly", "UTC", "2025-06-02T00:00:00Z", 1),
            ["2025-06-08T00:00:00Z"]
        );
    }

    #[test]
    fn interval_like_classification() {
        for expr in [
            "*/15 * * * *",
            "0 * * * *",
            "* 2 * * *",
            "*/5 2 * * *",
            "30 */2 * * *",
            "*,5 3 * * *",
        ] {
            assert!(sched(expr, "UTC").is_interval_like(), "{expr}");
        }
        for expr in [
            "30 2 * * *",
            "15,45 2 * * *",
            "0 1-3 * * *",
            "0-59 2 * * *",
            "0 0-23 * * *",
            "0 0 * * *",
        ] {
            assert!(!sched(expr, "UTC").is_interval_like(), "{expr}");
        }
    }

    #[test]
    fn accessors_and_whitespace() {
        let s = sched("  30\t2  * *   * ", "Europe/Berlin");
        assert_eq!(s.expr(), "30\t2  * *   *");
        assert_eq!(s.timezone(), chrono_tz::Europe::Berlin);
        assert_eq!(
            fires("  30\t2  * *   * ", "UTC", "2025-01-01T00:00:00Z", 1),
            ["2025-01-01T02:30:00Z"]
        );
    }

    #[test]
    fn validation_messages() {
        let cases: &[(&str, &str, &str)] = &[
            ("", "UTC", "cron_expr: must not be empty"),
            ("   ", "UTC", "cron_expr: must not be empty"),
            ("* * * *", "UTC", "cron_expr: expected 5 fields, got 4"),
            ("0 * * * * *", "UTC", "cron_expr: expected 5 fields, got 6"),
            (
                "0 0 * * * * 2025",
                "UTC",
                "cron_expr: expected 5 fields, got 7",
            ),
            ("@reboot", "UTC", "cron_expr: @reboot is not supported"),
            (
                "@every 5m",
                "UTC",
                "cron_expr: unknown shorthand '@every 5m'",
            ),
            (
                "0 22-2 * * *",
                "UTC",
                "cron_expr: wrap-around range 22-2 is not supported",
            ),
            (
                "0 0 * * FRI-MON",
                "UTC",
                "cron_expr: wrap-around range FRI-MON is not supported",
            ),
            (
                "0 0 1 NOV-FEB *",
                "UTC",
                "cron_expr: wrap-around range NOV-FEB is not supported",
            ),
            (
                "50-10/5 * * * *",
                "UTC",
                "cron_expr: wrap-around range 50-10 is not supported",
            ),
            ("0 0 30 2 *", "UTC", "cron_expr: never fires"),
            ("0 0 31 4 *", "UTC", "cron_expr: never fires"),
            ("0 0 31 2,4,6,9,11 *", "UTC", "cron_expr: never fires"),
            ("0 0 30,31 FEB *", "UTC", "cron_expr: never fires"),
            (
                "60 * * * *",
                "UTC",
                "cron_expr: minute value 60 is out of range 0-59",
            ),
            (
                "0 24 * * *",
                "UTC",
                "cron_expr: hour value 24 is out of range 0-23",
            ),
            (
                "0 0 0 * *",
                "UTC",
                "cron_expr: day-of-month value 0 is out of range 1-31",
            ),
            (
                "0 0 32 * *",
                "UTC",
                "cron_expr: day-of-month value 32 is out of range 1-31",
            ),
            (
                "0 0 * 13 *",
                "UTC",
                "cron_expr: month value 13 is out of range 1-12",
            ),
            (
                "* * * * 8",
                "UTC",
                "cron_expr: day-of-week value 8 is out of range 0-7",
            ),
            (
                "99999999999 * * * *",
                "UTC",
                "cron_expr: minute value 99999999999 is out of range",
            ),
            (
                "*/0 * * * *",
                "UTC",
                "cron_expr: step must be 1-60 in the minute field",
            ),
            (
                "*/61 * * * *",
                "UTC",
                "cron_expr: step must be 1-60 in the minute field",
            ),
            (
                "5/10 * * * *",
                "UTC",
                "cron_expr: a step needs '*' or a range before it",
            ),
            (
                "/10 * * * *",
                "UTC",
                "cron_expr: a step needs '*' or a range before it",
            ),
            ("*/ * * * *", "UTC", "cron_expr: invalid minute field '*/'"),
            (
                "1,,2 * * * *",
                "UTC",
                "cron_expr: empty list item in the minute field '1,,2'",
            ),
            ("0 0 * * MON#6", "UTC", "cron_expr: '#' takes 1-5 or L"),
            (
                "0 0 * * L",
                "UTC",
                "cron_expr: 'L' alone is not valid in the day-of-week field",
            ),
            (
                "0 0 ? * MON",
                "UTC",
                "cron_expr: '?' is not supported in the day-of-month field",
            ),
            (
                "0 0 1 * +MON",
                "UTC",
                "cron_expr: '+' is not supported in the day-of-week field",
            ),
            ("0 MON * * *", "UTC", "cron_expr: invalid hour field 'MON'"),
            (
                "0 0 1 * JAN",
                "UTC",
                "cron_expr: invalid day-of-week field 'JAN'",
            ),
            ("0 0 1 MON *", "UTC", "cron_expr: invalid month field 'MON'"),
            (
                "0 0 L-3 * *",
                "UTC",
                "cron_expr: invalid day-of-month field 'L-3'",
            ),
            (
                "0 0 1 * 1W",
                "UTC",
                "cron_expr: invalid day-of-week field '1W'",
            ),
            (
                "0 0 * * *",
                "Mars/Olympus",
                "timezone: unknown time zone 'Mars/Olympus'",
            ),
            ("0 0 * * *", "", "timezone: must not be empty"),
            (
                "0 0 * * *",
                "europe/berlin",
                "timezone: unknown time zone 'europe/berlin'; did you mean 'Europe/Berlin'?",
            ),
            (
                "0 0 * * *",
                "Berlin",
                "timezone: unknown time zone 'Berlin'; did you mean 'Europe/Berlin'?",
            ),
            (
                "0 0 * * *",
                "Europe/Berln",
                "timezone: unknown time zone 'Europe/Berln'; did you mean 'Europe/Berlin'?",
            ),
            (
                "0 0 * * *",
                "+02:00",
                "timezone: unknown time zone '+02:00'",
            ),
        ];
        for (expr, tz, want) in cases {
            let got = err(expr, tz);
            assert!(
                got.starts_with(want),
                "{expr:?} in {tz:?}: got {got:?}, want {want:?}…"
            );
        }
    }

    #[test]
    fn garbage_is_rejected_without_panic() {
        let long = "1,".repeat(5000);
        let many_fields = "* ".repeat(1000);
        let deep = format!("{} * * * *", "0-1/1,".repeat(40));
        let garbage: Vec<&str> = vec![
            "",
            " ",
            "\t\n",
            "*",
            "* * * * * * * * *",
            long.as_str(),
            many_fields.as_str(),
            deep.as_str(),
            "é * * * *",
            "* * * * ☃",
            "٣ * * * *",
            "\u{0} * * * *",
            "*/0 * * * *",
            "*/-1 * * * *",
            "-1 * * * *",
            "1- * * * *",
            "-5 * * * *",
            "1-2-3 * * * *",
            "1--2 * * * *",
            "1/2/3 * * * *",
            "*/2/2 * * * *",
            "** * * * *",
            "*1 * * * *",
            "60 * * * *",
            "* 24 * * *",
            "* * 32 * *",
            "* * * 0 *",
            "* * * * 8",
            "* * * * -1",
            "@reboot",
            "@every 5m",
            "@",
            "@@daily",
            "@daily extra",
            "@ daily",
            "daily",
            "0 0 30 2 *",
            "0 0 31 4 *",
            "0 0 LW-3 * *",
            "0 0 WL * *",
            "0 0 W * *",
            "0 0 32W * *",
            "0 0 0W * *",
            "0 0 L/2 * *",
            "0 0 * * #",
            "0 0 * * 1#",
            "0 0 * * #1",
            "0 0 * * 1#1#1",
            "0 0 * * 1#0",
            "0 0 * * 8#1",
            "0 0 * * LL",
            "0 0 * * 8L",
            "0 0 * * */2#1",
            "0 0 * * MONDAY",
            "0 0 * JANUARY *",
            "0 0 * J *",
            "0 0 * * M",
            "0 0 * SUN *",
            "0 0 * * DEC",
            "0 0 1 * +1",
            "? ? ? ? ?",
            "0 0 ? ? ?",
            "L L L L L",
            "W W W W W",
            "# # # # #",
            "H * * * *",
            "0 0 * * 1-5/0",
            "0 0 * * 1-5/9",
            "99999999999999999999 * * * *",
            "*/99999999999999999999 * * * *",
            "0-99999 * * * *",
            "1-99999/2 * * * *",
            "0,60 * * * *",
            ", * * * *",
            "0, * * * *",
            ",0 * * * *",
            "0 0 1,,2 * *",
            "0 0 * * 1-",
            "0 0 * * -5",
            "0 0 1-L * *",
            "0 0 L-L * *",
            "0 0 1 * 5L#2",
            "0 0 1 * 5#L#",
            "0 0 1 * 1-5#L#2",
            "0x10 * * * *",
            "1e1 * * * *",
            "+1 * * * *",
            "0 0 * * * ;rm -rf /",
            "0 0 * * *\u{200b}",
        ];
        for g in garbage {
            for tz in ["UTC", "Europe/Berlin"] {
                let outcome = std::panic::catch_unwind(|| CronSchedule::parse(g, tz));
                match outcome {
                    Ok(Err(e)) => assert!(e.starts_with("cron_expr: "), "{g:?}: {e}"),
                    Ok(Ok(s)) => panic!("{g:?} should be rejected, parsed as {s:?}"),
                    Err(_) => panic!("{g:?} panicked"),
                }
            }
        }
        for tz in [
            "Mars/Olympus",
            "",
            " ",
            "UTC ",
            "é",
            "\u{0}",
            "Europe/",
            "/",
            "../../etc/passwd",
        ] {
            let e = CronSchedule::parse("* * * * *", tz).unwrap_err();
            assert!(e.starts_with("timezone: "), "{tz:?}: {e}");
        }
    }

    #[test]
    fn valid_expressions_parse() {
        for expr in [
            "* * * * *",
            "0 0 29 2 *",
            "0 0 31 * *",
            "0 0 31 2 MON",
            "0 0 * 2 5#5",
            "0 0 L * *",
            "0 0 LW * *",
            "0 0 1W,15W * *",
            "0 0 * * 1-5#2",
            "0 0 * * 5#L",
            "*/1 */1 */1 */1 */1",
            "0-59 0-23 1-31 1-12 0-7",
            "0 0 * * 7",
            "*/60 * * * *",
            "0 0 1 JAN-DEC SUN-SAT",
        ] {
            let s = sched(expr, "UTC");
            assert!(s.next_after(at("2025-01-01T00:00:00Z")).is_some(), "{expr}");
        }
    }

    #[test]
    fn extreme_instants_do_not_panic() {
        for expr in ["* * * * *", "30 2 * * *", "0 0 29 2 *", "*/15 * * * *"] {
            for tz in [
                "UTC",
                "Pacific/Kiritimati",
                "Pacific/Pago_Pago",
                "Europe/Berlin",
            ] {
                let s = sched(expr, tz);
                let _ = s.next_after(DateTime::<Utc>::MIN_UTC);
                assert_eq!(s.next_after(DateTime::<Utc>::MAX_UTC), None);
                let _ = s.next_after(at("9999-12-31T23:59:59Z"));
                assert!(s.next_after(at("0001-01-01T00:00:00Z")).is_some());
                assert!(s.upcoming(at("9999-12-31T00:00:00Z"), 10).len() <= 10);
            }
        }
    }

    /// Schemathesis found a schedule starting at 9999-12-31T23:59:58Z whose next run was
    /// written as `+10000-01-01T00:00:00Z`, which is not RFC 3339.
    #[test]
    fn no_instant_past_year_9999_in_utc_or_on_the_wall_clock() {
        for tz in ["UTC", "Pacific/Kiritimati", "Pacific/Pago_Pago"] {
            for expr in ["*/5 * * * *", "0 0 1 1 *", "* * * * *"] {
                let s = sched(expr, tz);
                for after in ["9999-12-31T23:59:58Z", "9999-12-31T09:00:00Z"] {
                    for t in s.upcoming(at(after), 2000) {
                        assert!(t.year() <= 9999, "{expr} {tz}: {t}");
                        let local = t.with_timezone(&s.timezone());
                        assert!(local.year() <= 9999, "{expr} {tz}: {local}");
                    }
                }
            }
        }
        assert_eq!(
            sched("*/5 * * * *", "UTC").next_after(at("9999-12-31T23:59:58Z")),
            None
        );
    }

    /// docs/design.md §5's DST table, Europe/Berlin 2025: the clock goes 02:00 CET → 03:00 CEST on
    /// 30 March (01:00Z) and 03:00 CEST → 02:00 CET on 26 October (01:00Z).
    #[test]
    fn dst_europe_berlin() {
        let tz = "Europe/Berlin";
        // Spring forward, fixed-time: the gap time fires once, at 03:00 CEST.
        assert_eq!(
            fires("30 2 * * *", tz, "2025-03-29T12:00:00Z", 2),
            ["2025-03-30T01:00:00Z", "2025-03-31T00:30:00Z"]
        );
        assert_eq!(
            fires("15,45 2 * * *", tz, "2025-03-29T12:00:00Z", 3),
            [
                "2025-03-30T01:00:00Z",
                "2025-03-31T00:15:00Z",
                "2025-03-31T00:45:00Z"
            ]
        );
        // 02:00 (gap, → 03:00) and 03:00 are the same instant: one firing.
        assert_eq!(
            fires("0 2,3 * * *", tz, "2025-03-29T12:00:00Z", 3),
            [
                "2025-03-30T01:00:00Z",
                "2025-03-31T00:00:00Z",
                "2025-03-31T01:00:00Z"
            ]
        );
        assert_eq!(
            fires("0 1-3 * * *", tz, "2025-03-29T12:00:00Z", 3),
            [
                "2025-03-30T00:00:00Z",
                "2025-03-30T01:00:00Z",
                "2025-03-30T23:00:00Z"
            ]
        );
        // Spring forward, interval-like: gap times are skipped.
        assert_eq!(
            fires("*/30 * * * *", tz, "2025-03-30T00:00:00Z", 3),
            [
                "2025-03-30T00:30:00Z",
                "2025-03-30T01:00:00Z",
                "2025-03-30T01:30:00Z"
            ]
        );
        assert_eq!(
            fires("*/15 2 * * *", tz, "2025-03-29T12:00:00Z", 5),
            [
                "2025-03-31T00:00:00Z",
                "2025-03-31T00:15:00Z",
                "2025-03-31T00:30:00Z",
                "2025-03-31T00:45:00Z",
                "2025-04-01T00:00:00Z"
            ]
        );
        // Fall back, fixed-time: first occurrence only.
        assert_eq!(
            fires("30 2 * * *", tz, "2025-10-25T12:00:00Z", 2),
            ["2025-10-26T00:30:00Z", "2025-10-27T01:30:00Z"]
        );
        assert_eq!(
            fires("0 1-3 * * *", tz, "2025-10-25T12:00:00Z", 4),
            [
                "2025-10-25T23:00:00Z",
                "2025-10-26T00:00:00Z",
                "2025-10-26T02:00:00Z",
                "2025-10-27T00:00:00Z"
            ]
        );
        // Fall back, interval-like: both occurrences, real-time spacing kept.
        assert_eq!(
            fires("*/30 * * * *", tz, "2025-10-26T00:00:00Z", 4),
            [
                "2025-10-26T00:30:00Z",
                "2025-10-26T01:00:00Z",
                "2025-10-26T01:30:00Z",
                "2025-10-26T02:00:00Z"
            ]
        );
        assert_eq!(
            fires("0 * * * *", tz, "2025-10-25T23:30:00Z", 3),
            [
                "2025-10-26T00:00:00Z",
                "2025-10-26T01:00:00Z",
                "2025-10-26T02:00:00Z"
            ]
        );
        assert_eq!(
            fires("*/20 2 * * *", tz, "2025-10-25T12:00:00Z", 7),
            [
                "2025-10-26T00:00:00Z",
                "2025-10-26T00:20:00Z",
                "2025-10-26T00:40:00Z",
                "2025-10-26T01:00:00Z",
                "2025-10-26T01:20:00Z",
                "2025-10-26T01:40:00Z",
                "2025-10-27T01:00:00Z"
            ]
        );
        // Starting inside the repeated hour, on either pass.
        let every_15 = sched("*/15 * * * *", tz);
        // 02:50 CEST (first pass) → 02:00 CET (second pass).
        assert_eq!(
            every_15
                .next_after(at("2025-10-26T00:50:00Z"))
                .map(fmt)
                .as_deref(),
            Some("2025-10-26T01:00:00Z")
        );
        // 02:50 CET (second pass) → 03:00 CET.
        assert_eq!(
            every_15
                .next_after(at("2025-10-26T01:50:00Z"))
                .map(fmt)
                .as_deref(),
            Some("2025-10-26T02:00:00Z")
        );
        let fixed = sched("45 2 * * *", tz);
        // 02:30 CET (second pass): 02:45 already ran at its first occurrence.
        assert_eq!(
            fixed
                .next_after(at("2025-10-26T01:30:00Z"))
                .map(fmt)
                .as_deref(),
            Some("2025-10-27T01:45:00Z")
        );
    }

    /// America/New_York 2025: 02:00 EST → 03:00 EDT on 9 March (07:00Z), 02:00 EDT → 01:00 EST
    /// on 2 November (06:00Z).
    #[test]
    fn dst_america_new_york() {
        let tz = "America/New_York";
        assert_eq!(
            fires("30 2 * * *", tz, "2025-03-08T12:00:00Z", 2),
            ["2025-03-09T07:00:00Z", "2025-03-10T06:30:00Z"]
        );
        assert_eq!(
            fires("15,45 2 * * *", tz, "2025-03-08T12:00:00Z", 2),
            ["2025-03-09T07:00:00Z", "2025-03-10T06:15:00Z"]
        );
        assert_eq!(
            fires("0 1-3 * * *", tz, "2025-03-08T12:00:00Z", 3),
            [
                "2025-03-09T06:00:00Z",
                "2025-03-09T07:00:00Z",
                "2025-03-10T05:00:00Z"
            ]
        );
        assert_eq!(
            fires("*/30 * * * *", tz, "2025-03-09T06:00:00Z", 3),
            [
                "2025-03-09T06:30:00Z",
                "2025-03-09T07:00:00Z",
                "2025-03-09T07:30:00Z"
            ]
        );
        assert_eq!(
            fires("30 1 * * *", tz, "2025-11-01T12:00:00Z", 2),
            ["2025-11-02T05:30:00Z", "2025-11-03T06:30:00Z"]
        );
        assert_eq!(
            fires("0 1-3 * * *", tz, "2025-11-01T12:00:00Z", 4),
            [
                "2025-11-02T05:00:00Z",
                "2025-11-02T07:00:00Z",
                "2025-11-02T08:00:00Z",
                "2025-11-03T06:00:00Z"
            ]
        );
        assert_eq!(
            fires("*/30 * * * *", tz, "2025-11-02T05:00:00Z", 4),
            [
                "2025-11-02T05:30:00Z",
                "2025-11-02T06:00:00Z",
                "2025-11-02T06:30:00Z",
                "2025-11-02T07:00:00Z"
            ]
        );
        assert_eq!(
            fires("30 * * * *", tz, "2025-11-02T04:00:00Z", 4),
            [
                "2025-11-02T04:30:00Z",
                "2025-11-02T05:30:00Z",
                "2025-11-02T06:30:00Z",
                "2025-11-02T07:30:00Z"
            ]
        );
    }

    /// Australia/Lord_Howe moves its clock by 30 minutes: 02:00 → 02:30 on 5 October 2025
    /// (15:30Z), 02:00 → 01:30 on 6 April 2025 (15:00Z).
    #[test]
    fn dst_half_hour_shift() {
        let tz = "Australia/Lord_Howe";
        assert_eq!(
            fires("0,15,30 2 * * *", tz, "2025-10-04T00:00:00Z", 2),
            ["2025-10-04T15:30:00Z", "2025-10-05T15:00:00Z"]
        );
        assert_eq!(
            fires("*/15 2 * * *", tz, "2025-10-04T00:00:00Z", 3),
            [
                "2025-10-04T15:30:00Z",
                "2025-10-04T15:45:00Z",
                "2025-10-05T15:00:00Z"
            ]
        );
        assert_eq!(
            fires("45 1 * * *", tz, "2025-04-05T00:00:00Z", 2),
            ["2025-04-05T14:45:00Z", "2025-04-06T15:15:00Z"]
        );
        assert_eq!(
            fires("45 * * * *", tz, "2025-04-05T13:00:00Z", 3),
            [
                "2025-04-05T13:45:00Z",
                "2025-04-05T14:45:00Z",
                "2025-04-05T15:15:00Z"
            ]
        );
    }

    /// The vectors generated with cronsim (Debian cron's DST handling), in four zones around
    /// both 2025 transitions: the chained sequence, and each fire found again from just before
    /// it (so every starting point inside a transition is covered too).
    #[test]
    fn cronsim_vectors() {
        for v in vectors::CRONSIM {
            let s = sched(v.expr, v.zone);
            let want: Vec<DateTime<Utc>> = v.fires.iter().map(|f| at(f)).collect();
            let got = s.upcoming(at(v.start), want.len());
            assert_eq!(
                got.iter().map(|t| fmt(*t)).collect::<Vec<_>>(),
                v.fires,
                "{} {} {:?}",
                v.zone,
                v.transition,
                v.expr
            );
            let mut before = at(v.start);
            for (i, fire) in want.iter().enumerate() {
                let probe = *fire - TimeDelta::seconds(1);
                assert_eq!(
                    s.next_after(probe),
                    Some(*fire),
                    "{} {:?} from {}",
                    v.zone,
                    v.expr,
                    fmt(probe)
                );
                // Any point between the previous fire and this one finds this one.
                let mid = before + (*fire - before) / 2;
                assert_eq!(
                    s.next_after(mid),
                    Some(*fire),
                    "{} {:?} from {mid}",
                    v.zone,
                    v.expr
                );
                if i + 1 < want.len() {
                    assert_eq!(s.next_after(*fire), Some(want[i + 1]));
                }
                before = *fire;
            }
        }
        assert_eq!(vectors::CRONSIM.len(), 88);
    }

    /// Without DST (UTC) croner's own search is right, so the wall-clock walk here must agree
    /// with it.
    #[test]
    fn agrees_with_croner_in_utc() {
        for expr in [
            "* * * * *",
            "*/7 * * * *",
            "5,*/20 0 * * *",
            "10-50/20 2-4 * * *",
            "0 0 1 * MON",
            "0 0 */10 * MON",
            "0 0 1 * */2",
            "0 0 L * *",
            "0 0 LW * *",
            "0 0 1W,15W,31W * *",
            "0 0 * * 5#3",
            "0 0 * * 1-5#2",
            "0 0 * * 5L",
            "0 12 * * MON-FRI",
            "0 12 * * SAT-SUN",
            "0 0 13 * FRI",
            "59 23 31 DEC *",
            "0 0 29 2 *",
            "0 0 1 */4 *",
            "@weekly",
            "@hourly",
        ] {
            let s = sched(expr, "UTC");
            let mut ours = at("2024-12-31T13:17:00Z");
            let mut theirs = ours;
            for _ in 0..200 {
                ours = s
                    .next_after(ours)
                    .unwrap_or_else(|| panic!("{expr}: no fire"));
                theirs = s
                    .cron
                    .find_next_occurrence(&theirs, false)
                    .unwrap_or_else(|e| panic!("{expr}: croner: {e}"));
                assert_eq!(ours, theirs, "{expr}");
            }
        }
    }

    /// Every zone with DST, a year of fires: strictly increasing (never twice for an instant),
    /// and each fire lands on a matching wall-clock time or right at the end of a gap.
    #[test]
    fn fires_strictly_increase_across_zones() {
        let zones = [
            "Europe/Berlin",
            "America/New_York",
            "Australia/Sydney",
            "Australia/Lord_Howe",
            "America/Santiago",
            "Asia/Tehran",
            "Antarctica/Troll",
            "Pacific/Chatham",
            "America/Havana",
        ];
        let exprs = [
            "*/15 * * * *",
            "0 * * * *",
            "30 2 * * *",
            "0 0 * * *",
            "15,45 0-3 * * *",
            "*/10 0-3 * * *",
        ];
        for zone in zones {
            for expr in exprs {
                let s = sched(expr, zone);
                let count = if s.is_interval_like() { 2000 } else { 400 };
                let mut last = at("2024-12-31T00:00:00Z");
                for _ in 0..10 {
                    let batch = s.upcoming(last, count);
                    assert_eq!(batch.len(), count, "{zone} {expr}");
                    for t in batch {
                        assert!(t > last, "{zone} {expr}: {t} after {last}");
                        let wall = t.with_timezone(&s.tz).naive_local();
                        let m = wall.minute();
                        let on_pattern =
                            s.minutes & (1 << m) != 0 && s.hours & (1 << wall.hour()) != 0;
                        let gap_end = s.tz.offset_from_utc_datetime(&t.naive_utc()).fix()
                            != s.tz
                                .offset_from_utc_datetime(&(t - TimeDelta::seconds(1)).naive_utc())
                                .fix();
                        assert!(on_pattern || gap_end, "{zone} {expr}: {t} ({wall})");
                        last = t;
                    }
                }
            }
        }
    }
}
