//! Property-based fuzzing (proptest) of every parser that takes user text: cron expressions and
//! time zones, `filter_events` patterns, the three auth headers, JSON bodies and query strings,
//! endpoint URLs. None may panic; each answers a 4xx error or a value, and where a printer
//! exists, parse → print → parse gives the same thing back.

use chrono::{TimeZone, Utc};
use proptest::prelude::*;
use serde_json::Value;
use webhookd::api::endpoints::check_url;
use webhookd::api::input::{Body, Query};
use webhookd::cron::CronSchedule;

/// Text made mostly of the characters a parser cares about, with arbitrary ones mixed in.
fn text_of(alphabet: &'static str, max: usize) -> impl Strategy<Value = String> {
    let chars: Vec<char> = alphabet.chars().collect();
    prop::collection::vec(
        prop_oneof![
            8 => prop::sample::select(chars),
            1 => any::<char>(),
        ],
        0..max,
    )
    .prop_map(|cs| cs.into_iter().collect())
}

/// A cron-like expression: five (or a few more or fewer) fields of cron tokens.
fn cron_text() -> impl Strategy<Value = String> {
    let token = prop_oneof![
        text_of("0123456789*/,-?LW#", 8),
        prop::sample::select(vec![
            "MON", "fri", "JAN", "dec", "SUN-SAT", "@daily", "@hourly", "@weekly", "@reboot",
            "*/15", "1-5", "0", "59", "60", "31", "32", "7", "8", "L", "5#3",
        ])
        .prop_map(str::to_string),
    ];
    prop::collection::vec(token, 0..8).prop_map(|fields| fields.join(" "))
}

fn timezone_text() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "UTC",
            "Europe/Berlin",
            "America/New_York",
            "Australia/Lord_Howe",
            "Asia/Kathmandu",
            "Etc/GMT+12",
        ])
        .prop_map(str::to_string),
        text_of(
            "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ/_+-0123456789",
            24
        ),
    ]
}

/// An instant anywhere in the years RFC 3339 can write.
fn instant() -> impl Strategy<Value = chrono::DateTime<Utc>> {
    (-62_135_596_800i64..=253_402_300_799i64).prop_map(|s| Utc.timestamp_opt(s, 0).unwrap())
}

/// Any JSON value, nested a few levels.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        any::<String>().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(field_name(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn field_name() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "name",
            "url",
            "payload",
            "run_at",
            "headers",
            "endpoint_ids",
            "page",
            "",
        ])
        .prop_map(str::to_string),
        any::<String>(),
    ]
}

/// Reads one field of a body the way a handler does; the error code, if it refuses.
type FieldReader<'a> = dyn Fn(&Body) -> Option<u32> + 'a;

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn cron_parses_without_panic_and_round_trips(
        expr in cron_text(),
        tz in timezone_text(),
        from in instant(),
    ) {
        match CronSchedule::parse(&expr, &tz) {
            Err(message) => prop_assert!(
                message.starts_with("cron_expr:") || message.starts_with("timezone:"),
                "{message}"
            ),
            Ok(schedule) => {
                let runs = schedule.upcoming(from, 3);
                prop_assert!(runs.windows(2).all(|w| w[0] < w[1]));
                prop_assert!(runs.iter().all(|t| *t > from));
                let again = CronSchedule::parse(schedule.expr(), schedule.timezone().name())
                    .expect("a printed expression parses again");
                prop_assert_eq!(again.expr(), schedule.expr());
                prop_assert_eq!(again.upcoming(from, 3), runs);
            }
        }
    }

    #[test]
    fn filters_validate_and_match_without_panic(
        filter in text_of("abcxyzABC019.:_-*, ", 40),
        event in text_of("abcxyzABC019.:_-*", 30),
    ) {
        let valid = webhookd::filter::validate(&filter);
        if let Err(message) = &valid {
            prop_assert!(message.starts_with("filter_events:"), "{message}");
        }
        let _ = webhookd::filter::matches(Some(&filter), &event);
        // Every valid pattern without a wildcard matches itself; `*` matches everything.
        if valid.is_ok() {
            for pattern in filter.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                if !pattern.contains('*') {
                    prop_assert!(webhookd::filter::matches(Some(pattern), pattern));
                }
            }
        }
        prop_assert!(webhookd::filter::matches(Some("*"), &event));
    }

    #[test]
    fn urls_are_checked_without_panic_and_accepted_ones_round_trip(
        url in prop_oneof![
            text_of("htps:/[]%@?#.:-_0123456789abcdefABCDEF", 60),
            ("https?", 0u32..300, 0u32..300, 0u32..300, 0u32..300, prop::option::of(0i64..70000))
                .prop_map(|(scheme, a, b, c, d, port)| {
                    let port = port.map(|p| format!(":{p}")).unwrap_or_default();
                    format!("{scheme}://{a}.{b}.{c}.{d}{port}/x")
                }),
        ],
    ) {
        match check_url(&url) {
            Err(e) => {
                prop_assert_eq!(e.code, 40001);
                prop_assert!(e.message.starts_with("url"), "{}", e.message);
            }
            Ok(()) => {
                let printed = url.parse::<hyper::Uri>().unwrap().to_string();
                prop_assert!(check_url(&printed).is_ok(), "{url} → {printed}");
            }
        }
    }

    #[test]
    fn ipv4_urls_are_accepted_exactly_when_valid(
        octets in prop::array::uniform4(0u32..300),
        port in prop::option::of(-5i64..70000),
    ) {
        let host = octets.map(|o| o.to_string()).join(".");
        let port_text = port.map(|p| format!(":{p}")).unwrap_or_default();
        let url = format!("http://{host}{port_text}/hook");
        let valid = octets.iter().all(|o| *o <= 255) && port.is_none_or(|p| (1..=65535).contains(&p));
        prop_assert_eq!(check_url(&url).is_ok(), valid, "{}", url);
    }

    #[test]
    fn json_bodies_parse_without_panic(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        if let Err(e) = Body::parse(&bytes) {
            prop_assert!(e.code == 40002 || e.code == 40001, "{}: {}", e.code, e.message);
        }
    }

    #[test]
    fn json_bodies_round_trip_and_field_readers_never_panic(
        value in json_value(),
        field in field_name(),
    ) {
        let text = serde_json::to_vec(&value).unwrap();
        match (Body::parse(&text), &value) {
            (Ok(body), Value::Object(map)) => {
                for (name, v) in map {
                    prop_assert_eq!(body.get(name), Some(v));
                }
                let readers: [&FieldReader<'_>; 8] = [
                    &|b| b.str(&field).err().map(|e| e.code),
                    &|b| b.int(&field).err().map(|e| e.code),
                    &|b| b.object(&field).err().map(|e| e.code),
                    &|b| b.patch_str(&field).err().map(|e| e.code),
                    &|b| b.patch_int(&field).err().map(|e| e.code),
                    &|b| b.patch_bool(&field).err().map(|e| e.code),
                    &|b| b.patch_int_list(&field).err().map(|e| e.code),
                    &|b| b.patch_object_or_text(&field).err().map(|e| e.code),
                ];
                for read in readers {
                    if let Some(code) = read(&body) {
                        prop_assert_eq!(code, 40001);
                    }
                }
            }
            (Ok(_), other) => prop_assert!(false, "a non-object was accepted: {other}"),
            (Err(e), Value::Object(_)) => prop_assert!(false, "an object was refused: {}", e.message),
            (Err(e), _) => prop_assert_eq!(e.code, 40002),
        }
    }

    #[test]
    fn query_strings_parse_without_panic(raw in text_of("page_size=&%0123456789abcdef-+", 40)) {
        let query = Query::parse(Some(&raw));
        if let Err(e) = query.page() {
            prop_assert_eq!(e.code, 40001);
        }
    }
}

/// The three auth headers, fuzzed against a real key in a real database file.
mod auth {
    use super::*;
    use hyper::HeaderMap;
    use webhookd::auth::{SignedParts, authenticate};

    struct Keyed {
        _dir: tempfile::TempDir,
        store: std::sync::Arc<dyn webhookd::store::Store>,
        key_id: String,
        secret: String,
    }

    fn keyed() -> Keyed {
        let dir = tempfile::tempdir().unwrap();
        let db = crate::support::test_db(dir.path());
        let (key_id, secret) = crate::support::create_key(&db, "app1");
        let store = webhookd::store::open(&db, 2).unwrap();
        Keyed {
            _dir: dir,
            store,
            key_id,
            secret,
        }
    }

    fn headers(pairs: &[(&'static str, &[u8])]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            if let Ok(value) = hyper::header::HeaderValue::from_bytes(value) {
                map.insert(*name, value);
            }
        }
        map
    }

    const NOW_MS: i64 = 1_763_758_800_000;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        #[test]
        fn arbitrary_auth_headers_are_refused_with_a_401(
            key in prop_oneof![Just(None), prop::collection::vec(any::<u8>(), 0..40).prop_map(Some)],
            timestamp in prop_oneof![
                text_of("0123456789-+. e", 20).prop_map(String::into_bytes),
                prop::collection::vec(any::<u8>(), 0..20),
            ],
            signature in prop::collection::vec(any::<u8>(), 0..80),
            real_key in any::<bool>(),
            body in prop::collection::vec(any::<u8>(), 0..64),
        ) {
            let k = keyed();
            let key_id = match (&key, real_key) {
                (_, true) => Some(k.key_id.clone().into_bytes()),
                (k, false) => k.clone(),
            };
            let mut pairs: Vec<(&'static str, &[u8])> =
                vec![("x-timestamp", &timestamp), ("x-signature", &signature)];
            if let Some(key_id) = &key_id {
                pairs.push(("x-key-id", key_id));
            }
            let headers = headers(&pairs);
            let result = authenticate(&*k.store, NOW_MS, 300, &SignedParts {
                headers: &headers,
                method: "POST",
                path_and_query: "/v1/events",
                body: &body,
            });
            match result {
                Err(e) => prop_assert!((40101..=40105).contains(&e.code), "{}: {}", e.code, e.message),
                Ok(_) => prop_assert!(false, "a random signature was accepted"),
            }
        }

        #[test]
        fn a_signed_request_is_accepted_once(
            body in prop::collection::vec(any::<u8>(), 0..64),
            skew_ms in -300_000i64..=300_000,
            upper in any::<bool>(),
        ) {
            let k = keyed();
            let timestamp = (NOW_MS + skew_ms).to_string();
            let payload = webhookd::auth::signed_payload("POST", "/v1/events", &body);
            let mut signature = webhookd::signing::hmac_hex(k.secret.as_bytes(), &timestamp, &payload);
            let headers_with = |signature: &str| headers(&[
                ("x-key-id", k.key_id.as_bytes()),
                ("x-timestamp", timestamp.as_bytes()),
                ("x-signature", signature.as_bytes()),
            ]);
            let send = |signature: &str| {
                let headers = headers_with(signature);
                authenticate(&*k.store, NOW_MS, 300, &SignedParts {
                    headers: &headers,
                    method: "POST",
                    path_and_query: "/v1/events",
                    body: &body,
                })
            };
            prop_assert_eq!(send(&signature).unwrap().app_id, "app1");
            if upper {
                signature = signature.to_ascii_uppercase();
            }
            prop_assert_eq!(send(&signature).unwrap_err().code, 40105);
        }
    }
}
