//! Endpoint `filter_events` (docs/design.md §5 "Endpoints"): comma-separated glob patterns deciding
//! which events an endpoint receives. Pure; `*` is the only wildcard.
//!
//! - `*` matches any run of characters, the empty run included (`order.*`, `*.created`).
//! - Whitespace around each pattern is trimmed; empty items between commas are ignored.
//! - A filter that is absent, empty, or holds no non-empty pattern (e.g. `" , "`) accepts every
//!   event.
//! - Matching is case-sensitive.

/// Longest allowed pattern, in characters.
const MAX_PATTERN_CHARS: usize = 200;
/// Longest allowed `filter_events` string, in characters.
const MAX_FILTER_CHARS: usize = 1000;

/// The non-empty, trimmed patterns of a filter string.
fn patterns(filter: &str) -> impl Iterator<Item = &str> {
    filter.split(',').map(str::trim).filter(|p| !p.is_empty())
}

/// Whether an endpoint's filter accepts an event name.
pub fn matches(filter: Option<&str>, event_name: &str) -> bool {
    let Some(filter) = filter else {
        return true;
    };
    let mut any_pattern = false;
    for pattern in patterns(filter) {
        if glob_match(pattern.as_bytes(), event_name.as_bytes()) {
            return true;
        }
        any_pattern = true;
    }
    !any_pattern
}

/// Whether an endpoint subscribes to an operator event (docs/design.md §11): only its patterns that
/// begin with `prefix` are consulted, so an absent filter, a catch-all `*` or `order.*` never
/// receives one.
pub fn matches_prefixed(filter: Option<&str>, prefix: &str, event_name: &str) -> bool {
    filter.is_some_and(|filter| {
        patterns(filter)
            .filter(|p| p.starts_with(prefix))
            .any(|p| glob_match(p.as_bytes(), event_name.as_bytes()))
    })
}

/// Validates a filter_events string for storage; Err is a human message starting "filter_events: ".
/// Each pattern: 1..=200 chars of A-Z a-z 0-9 . _ - : and '*'. Whole string <= 1000 chars. Empty string is valid (= all events).
pub fn validate(filter: &str) -> Result<(), String> {
    let total = filter.chars().count();
    if total > MAX_FILTER_CHARS {
        return Err(format!(
            "filter_events: is {total} characters long; at most {MAX_FILTER_CHARS} are allowed"
        ));
    }
    for pattern in patterns(filter) {
        let len = pattern.chars().count();
        if len > MAX_PATTERN_CHARS {
            return Err(format!(
                "filter_events: pattern \"{pattern}\" is {len} characters long; \
                 at most {MAX_PATTERN_CHARS} are allowed"
            ));
        }
        if let Some(bad) = pattern.chars().find(|&c| !is_pattern_char(c)) {
            return Err(format!(
                "filter_events: pattern \"{pattern}\" contains {bad:?}; patterns are \
                 comma-separated and may use only A-Z a-z 0-9 . _ - : and * (wildcard)"
            ));
        }
    }
    Ok(())
}

fn is_pattern_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':' | '*')
}

/// Glob match where `*` matches any run of bytes (including none) and every other byte matches
/// itself.
///
/// The classic greedy algorithm: on a mismatch, backtrack only to the most recent `*` and let it
/// swallow one more byte. Earlier stars never need revisiting (whatever they could absorb, the
/// latest star can absorb too), so this runs in O(pattern × text) time at worst and O(1) space —
/// no exponential blow-up on patterns like `a*a*a*a*b`.
///
/// Working on bytes is equivalent to working on chars here: `*` is ASCII, and a valid UTF-8
/// literal can only occur in valid UTF-8 text at a char boundary.
fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    // Position just after the last `*` seen, and the text position that star's match ends at.
    let mut backtrack: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some(b'*') => {
                p += 1;
                backtrack = Some((p, t));
            }
            Some(&c) if c == text[t] => {
                p += 1;
                t += 1;
            }
            _ => match backtrack {
                // Let the last star absorb one more byte and retry from there.
                Some((star_p, star_t)) => {
                    p = star_p;
                    t = star_t + 1;
                    backtrack = Some((star_p, t));
                }
                None => return false,
            },
        }
    }
    // Text used up: only stars may remain in the pattern.
    pattern[p..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn m(filter: &str, event: &str) -> bool {
        matches(Some(filter), event)
    }

    #[test]
    fn prefixed_patterns_only() {
        let p = |f: Option<&str>, e: &str| matches_prefixed(f, "webhookd.", e);
        assert!(p(Some("webhookd.*"), "webhookd.task.failed"));
        assert!(p(Some("order.*, webhookd.task.*"), "webhookd.task.failed"));
        assert!(!p(
            Some("order.*, webhookd.task.*"),
            "webhookd.endpoint.disabled"
        ));
        assert!(!p(Some("*"), "webhookd.task.failed"));
        assert!(!p(Some("*.failed"), "webhookd.task.failed"));
        assert!(!p(Some(""), "webhookd.task.failed"));
        assert!(!p(None, "webhookd.task.failed"));
    }

    #[test]
    fn exact() {
        assert!(m("invoice.paid", "invoice.paid"));
        assert!(!m("invoice.paid", "invoice.paid.v2"));
        assert!(!m("invoice.paid", "invoice.pai"));
        assert!(!m("invoice.paid", "xinvoice.paid"));
    }

    #[test]
    fn prefix() {
        assert!(m("order.*", "order.created"));
        assert!(m("order.*", "order.created.v2"));
        assert!(m("order.*", "order."));
        assert!(!m("order.*", "order"));
        assert!(!m("order.*", "orders.created"));
        assert!(!m("order.*", "invoice.order.created"));
    }

    #[test]
    fn suffix() {
        assert!(m("*.created", "order.created"));
        assert!(m("*.created", "a.b.created"));
        assert!(m("*.created", ".created"));
        assert!(!m("*.created", "created"));
        assert!(!m("*.created", "order.created.v2"));
        assert!(!m("*.created", "order.recreated"));
    }

    #[test]
    fn middle() {
        assert!(m("order.*.v2", "order.created.v2"));
        assert!(m("order.*.v2", "order.line.added.v2"));
        assert!(m("order.*.v2", "order..v2"));
        assert!(!m("order.*.v2", "order.v2"));
        assert!(!m("order.*.v2", "order.created.v3"));
        assert!(!m("order.*.v2", "order.created.v2x"));
        assert!(m("o*r*d", "oxxrxxd"));
        assert!(m("a*b*c", "abbbc"));
        assert!(!m("a*b*c", "acb"));
    }

    #[test]
    fn star_alone_and_consecutive_stars() {
        assert!(m("*", "anything.at:all"));
        assert!(m("*", ""));
        assert!(m("**", "x"));
        assert!(m("order.**", "order.x"));
        assert!(m("*order*", "order"));
    }

    #[test]
    fn lists() {
        assert!(m("a,b", "a"));
        assert!(m("a,b", "b"));
        assert!(!m("a,b", "c"));
        assert!(!m("a,b", "a,b"));
        assert!(m("invoice.paid,order.*", "order.created"));
        assert!(m("invoice.paid,order.*", "invoice.paid"));
        assert!(!m("invoice.paid,order.*", "invoice.created"));
    }

    #[test]
    fn whitespace_is_trimmed_and_empty_items_ignored() {
        assert!(m(" a , b ", "b"));
        assert!(m("\ta,\n order.* ", "order.x"));
        assert!(m("a,,b,", "b"));
        assert!(!m("a,,b,", ""));
        assert!(!m(" a , b ", " a"));
    }

    #[test]
    fn absent_or_empty_accepts_everything() {
        assert!(matches(None, "order.created"));
        assert!(matches(None, ""));
        assert!(m("", "order.created"));
        assert!(m("   ", "order.created"));
        assert!(m(" , ,", "order.created"));
    }

    #[test]
    fn no_match() {
        assert!(!m("order.*", "invoice.paid"));
        assert!(!m("a", ""));
        assert!(!m("a*", ""));
    }

    #[test]
    fn case_sensitive() {
        assert!(!m("Order.*", "order.created"));
        assert!(!m("order.created", "ORDER.CREATED"));
        assert!(m("Order.*", "Order.created"));
    }

    #[test]
    fn non_ascii_event_names() {
        assert!(m("*.créé", "commande.créé"));
        assert!(m("ü*", "über"));
        assert!(!m("ü*", "u"));
    }

    #[test]
    fn pathological_pattern_is_fast() {
        let text = "a".repeat(100_000);
        let start = Instant::now();
        assert!(!m("a*a*a*a*a*a*a*a*b", &text));
        assert!(!m(
            "*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*b",
            &text[..5_000]
        ));
        assert!(m("a*a*a*a*a*a*a*a*a", &text));
        assert!(m("*a", &text));
        assert!(!m("*b", &text));
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "took {:?}",
            start.elapsed()
        );
    }

    #[test]
    fn validate_accepts() {
        for ok in [
            "",
            "   ",
            ",",
            "invoice.paid",
            "order.*, *.created ,invoice.paid",
            "*",
            "A-Z_a-z:0-9.*",
            &"x".repeat(200),
            &vec!["y".repeat(199); 5].join(","),
        ] {
            assert_eq!(validate(ok), Ok(()), "{ok:?}");
        }
    }

    #[test]
    fn validate_rejects() {
        for bad in [
            "order created",
            "order.created/v2",
            "order.?",
            "ordér",
            "a;b",
            "a,b c",
            &"x".repeat(201),
            &format!("a,{}", "x".repeat(201)),
            &vec!["y".repeat(200); 5].join(","),
        ] {
            let err = validate(bad).unwrap_err();
            assert!(err.starts_with("filter_events: "), "{bad:?} -> {err}");
        }
    }

    #[test]
    fn validate_messages_name_the_problem() {
        let err = validate("order.*,order created").unwrap_err();
        assert!(err.contains("\"order created\""), "{err}");
        assert!(err.contains("' '"), "{err}");
        let err = validate(&"x".repeat(1001)).unwrap_err();
        assert!(err.contains("1001"), "{err}");
        let err = validate(&"x".repeat(201)).unwrap_err();
        assert!(err.contains("201"), "{err}");
    }
}
