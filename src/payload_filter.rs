//! Endpoint `filter_payload`: conditions on a published event's payload, all of which must hold
//! for the event to reach the endpoint (docs/API.md, "Content filters"). Pure: parsing (with
//! errors that name the path) and matching (with a reason a person can read).
//!
//! A filter is a JSON object. Each key is a dotted path into the payload (`customer.tier`,
//! `items.0.sku`: a number steps into an array); each value is either a JSON value, which the
//! payload's value must equal, or an object with exactly one operator:
//! - `$eq`, `$ne`: equal / not equal (a missing value is "not equal");
//! - `$in`, `$nin`: equal to one of / none of an array's values (missing: not in);
//! - `$exists`: `true` when the path must lead to a value (null counts), `false` when it must not;
//! - `$gt`, `$gte`, `$lt`, `$lte`: numbers compared as numbers, strings compared as text; a value
//!   of another type (or a missing one) does not match.
//!
//! Equality is JSON equality, with numbers compared by value (`1` equals `1.0`). An object value
//! whose keys do not start with `$` is an equality test against that whole object.

use serde_json::{Map, Value};
use std::cmp::Ordering;

/// Most conditions in one filter.
pub const MAX_CONDITIONS: usize = 32;
/// Most steps in one path (`a.b.c` has 3).
pub const MAX_PATH_DEPTH: usize = 8;

/// The operators a condition may use, in the order the docs list them.
const OPERATORS: [&str; 9] = [
    "$eq", "$ne", "$in", "$nin", "$exists", "$gt", "$gte", "$lt", "$lte",
];

/// A parsed filter, ready to match payloads.
#[derive(Debug, Clone, PartialEq)]
pub struct PayloadFilter {
    conditions: Vec<Condition>,
}

/// Why a filter was refused: the path (key) at fault, or `None` for the filter as a whole,
/// and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterError {
    pub path: Option<String>,
    pub message: String,
}

impl std::fmt::Display for FilterError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.path {
            Some(path) => write!(f, "filter_payload[\"{path}\"]: {}", self.message),
            None => write!(f, "filter_payload: {}", self.message),
        }
    }
}

/// Whether a payload passes, and why not when it does not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Matches,
    /// The first condition that failed, in words: `customer.tier is "free", not "pro"`.
    Fails(String),
}

#[derive(Debug, Clone, PartialEq)]
struct Condition {
    path: String,
    steps: Vec<String>,
    test: Test,
}

#[derive(Debug, Clone, PartialEq)]
enum Test {
    Eq(Value),
    Ne(Value),
    In(Vec<Value>),
    Nin(Vec<Value>),
    Exists(bool),
    Compare(Comparison, Value),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Comparison {
    Gt,
    Gte,
    Lt,
    Lte,
}

impl Comparison {
    fn holds(self, ordering: Ordering) -> bool {
        match self {
            Comparison::Gt => ordering == Ordering::Greater,
            Comparison::Gte => ordering != Ordering::Less,
            Comparison::Lt => ordering == Ordering::Less,
            Comparison::Lte => ordering != Ordering::Greater,
        }
    }

    fn words(self) -> &'static str {
        match self {
            Comparison::Gt => "greater than",
            Comparison::Gte => "at least",
            Comparison::Lt => "less than",
            Comparison::Lte => "at most",
        }
    }
}

impl PayloadFilter {
    /// Parses a filter object, refusing it with the path at fault.
    pub fn parse(filter: &Map<String, Value>) -> Result<PayloadFilter, FilterError> {
        if filter.len() > MAX_CONDITIONS {
            return Err(FilterError {
                path: None,
                message: format!(
                    "has {} conditions; at most {MAX_CONDITIONS} are allowed",
                    filter.len()
                ),
            });
        }
        let conditions = filter
            .iter()
            .map(|(path, value)| {
                let fail = |message: String| FilterError {
                    path: Some(path.clone()),
                    message,
                };
                Ok(Condition {
                    path: path.clone(),
                    steps: parse_path(path).map_err(fail)?,
                    test: parse_test(value).map_err(fail)?,
                })
            })
            .collect::<Result<Vec<_>, FilterError>>()?;
        Ok(PayloadFilter { conditions })
    }

    /// Checks every condition against `payload`, in the filter's order.
    pub fn check(&self, payload: &Value) -> Verdict {
        for condition in &self.conditions {
            if let Some(reason) = condition.failure(payload) {
                return Verdict::Fails(reason);
            }
        }
        Verdict::Matches
    }

    /// Whether `payload` passes every condition.
    pub fn matches(&self, payload: &Value) -> bool {
        self.check(payload) == Verdict::Matches
    }

    /// How many conditions the filter holds.
    pub fn len(&self) -> usize {
        self.conditions.len()
    }

    /// Whether the filter holds no condition (it then passes every payload).
    pub fn is_empty(&self) -> bool {
        self.conditions.is_empty()
    }
}

fn parse_path(path: &str) -> Result<Vec<String>, String> {
    let steps: Vec<String> = path.split('.').map(str::to_owned).collect();
    if steps.iter().any(String::is_empty) {
        return Err(
            "a path is names joined by dots, with no empty step (e.g. \"customer.tier\")".into(),
        );
    }
    if steps.len() > MAX_PATH_DEPTH {
        return Err(format!(
            "the path has {} steps; at most {MAX_PATH_DEPTH} are allowed",
            steps.len()
        ));
    }
    Ok(steps)
}

fn parse_test(value: &Value) -> Result<Test, String> {
    let Value::Object(object) = value else {
        return Ok(Test::Eq(value.clone()));
    };
    if !object.keys().any(|k| k.starts_with('$')) {
        return Ok(Test::Eq(value.clone()));
    }
    let mut entries = object.iter();
    let (Some((operator, operand)), None) = (entries.next(), entries.next()) else {
        return Err(format!(
            "an operator object holds exactly one operator; this one has {} keys",
            object.len()
        ));
    };
    match operator.as_str() {
        "$eq" => Ok(Test::Eq(operand.clone())),
        "$ne" => Ok(Test::Ne(operand.clone())),
        "$in" | "$nin" => {
            let Value::Array(values) = operand else {
                return Err(format!("{operator} takes an array of values"));
            };
            Ok(if operator == "$in" {
                Test::In(values.clone())
            } else {
                Test::Nin(values.clone())
            })
        }
        "$exists" => match operand {
            Value::Bool(b) => Ok(Test::Exists(*b)),
            _ => Err("$exists takes true or false".into()),
        },
        "$gt" | "$gte" | "$lt" | "$lte" => {
            if !(operand.is_number() || operand.is_string()) {
                return Err(format!("{operator} takes a number or a string"));
            }
            let comparison = match operator.as_str() {
                "$gt" => Comparison::Gt,
                "$gte" => Comparison::Gte,
                "$lt" => Comparison::Lt,
                _ => Comparison::Lte,
            };
            Ok(Test::Compare(comparison, operand.clone()))
        }
        unknown => {
            // The nearest operator (the did-you-mean of every other field), or one the
            // unknown word starts with (`$equal`).
            let hint = crate::suggest::nearest(unknown, OPERATORS)
                .or_else(|| {
                    OPERATORS
                        .iter()
                        .filter(|op| unknown.starts_with(**op))
                        .max_by_key(|op| op.len())
                        .copied()
                })
                .map(|op| format!("; did you mean \"{op}\"?"))
                .unwrap_or_else(|| format!("; the operators are {}", OPERATORS.join(", ")));
            Err(format!("unknown operator \"{unknown}\"{hint}"))
        }
    }
}

/// The value `steps` lead to in `payload`, if any (a number steps into an array).
fn lookup<'a>(payload: &'a Value, steps: &[String]) -> Option<&'a Value> {
    steps.iter().try_fold(payload, |value, step| match value {
        Value::Object(map) => map.get(step),
        Value::Array(items) => step.parse::<usize>().ok().and_then(|i| items.get(i)),
        _ => None,
    })
}

/// JSON equality with numbers compared by value.
fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(x), Some(y)) => x == y,
            _ => x.as_f64() == y.as_f64(),
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_eq(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|other| json_eq(v, other)))
        }
        _ => a == b,
    }
}

/// Numbers by value, strings as text; `None` for any other pair of types.
fn json_cmp(a: &Value, b: &Value) -> Option<Ordering> {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(x), Some(y)) => Some(x.cmp(&y)),
            _ => x.as_f64()?.partial_cmp(&y.as_f64()?),
        },
        (Value::String(x), Value::String(y)) => Some(x.cmp(y)),
        _ => None,
    }
}

impl Condition {
    /// `None` when the condition holds, else why not.
    fn failure(&self, payload: &Value) -> Option<String> {
        let found = lookup(payload, &self.steps);
        let path = &self.path;
        let shown = || match found {
            Some(v) => format!("{path} is {v}"),
            None => format!("{path} is missing"),
        };
        let holds = match &self.test {
            Test::Eq(want) => found.is_some_and(|v| json_eq(v, want)),
            Test::Ne(want) => !found.is_some_and(|v| json_eq(v, want)),
            Test::In(list) => found.is_some_and(|v| list.iter().any(|w| json_eq(v, w))),
            Test::Nin(list) => !found.is_some_and(|v| list.iter().any(|w| json_eq(v, w))),
            Test::Exists(want) => found.is_some() == *want,
            Test::Compare(op, bound) => found
                .and_then(|v| json_cmp(v, bound))
                .is_some_and(|ordering| op.holds(ordering)),
        };
        if holds {
            return None;
        }
        Some(match &self.test {
            Test::Eq(want) => format!("{}, not {want}", shown()),
            Test::Ne(want) => format!("{path} is {want}, which the filter excludes"),
            Test::In(list) => format!("{}, not one of {}", shown(), Value::Array(list.clone())),
            Test::Nin(list) => format!(
                "{}, one of the excluded {}",
                shown(),
                Value::Array(list.clone())
            ),
            Test::Exists(true) => format!("{path} is missing, and must exist"),
            Test::Exists(false) => format!("{}, and must not exist", shown()),
            Test::Compare(op, bound) => format!("{}, not {} {bound}", shown(), op.words()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn filter(value: Value) -> PayloadFilter {
        let Value::Object(map) = value else {
            panic!("a filter is an object")
        };
        PayloadFilter::parse(&map).expect("valid filter")
    }

    fn refused(value: Value) -> FilterError {
        let Value::Object(map) = value else {
            panic!("a filter is an object")
        };
        PayloadFilter::parse(&map).expect_err("must be refused")
    }

    fn payload() -> Value {
        json!({
            "customer": {"tier": "pro", "id": 42, "since": "2024-03-01", "note": null},
            "items": [{"sku": "A-1", "qty": 2}, {"sku": "B-7", "qty": 1}],
            "total": 99.5
        })
    }

    #[test]
    fn equality_on_dotted_paths_and_array_indexes() {
        let p = payload();
        assert!(filter(json!({"customer.tier": "pro"})).matches(&p));
        assert!(filter(json!({"items.1.sku": "B-7"})).matches(&p));
        assert!(
            filter(json!({"customer.id": 42.0})).matches(&p),
            "numbers by value"
        );
        assert!(
            filter(
                json!({"customer": {"tier": "pro", "id": 42, "since": "2024-03-01", "note": null}})
            )
            .matches(&p)
        );
        assert_eq!(
            filter(json!({"customer.tier": "free"})).check(&p),
            Verdict::Fails("customer.tier is \"pro\", not \"free\"".into())
        );
        assert_eq!(
            filter(json!({"items.5.sku": "A-1"})).check(&p),
            Verdict::Fails("items.5.sku is missing, not \"A-1\"".into())
        );
    }

    #[test]
    fn every_operator() {
        let p = payload();
        let cases = [
            (json!({"customer.tier": {"$eq": "pro"}}), true),
            (json!({"customer.tier": {"$ne": "free"}}), true),
            (json!({"customer.tier": {"$ne": "pro"}}), false),
            (json!({"customer.missing": {"$ne": "pro"}}), true),
            (
                json!({"customer.tier": {"$in": ["pro", "enterprise"]}}),
                true,
            ),
            (json!({"customer.tier": {"$in": ["free"]}}), false),
            (json!({"customer.missing": {"$in": ["free"]}}), false),
            (json!({"customer.tier": {"$nin": ["free"]}}), true),
            (json!({"customer.tier": {"$nin": ["pro"]}}), false),
            (json!({"customer.missing": {"$nin": ["pro"]}}), true),
            (json!({"customer.note": {"$exists": true}}), true),
            (json!({"customer.missing": {"$exists": true}}), false),
            (json!({"customer.missing": {"$exists": false}}), true),
            (json!({"total": {"$gt": 99}}), true),
            (json!({"total": {"$gt": 99.5}}), false),
            (json!({"total": {"$gte": 99.5}}), true),
            (json!({"total": {"$lt": 100}}), true),
            (json!({"total": {"$lte": 99}}), false),
            (json!({"customer.since": {"$gte": "2024-01-01"}}), true),
            (json!({"customer.since": {"$lt": "2024-01-01"}}), false),
            // a comparison across types never matches
            (json!({"customer.tier": {"$gt": 1}}), false),
            (json!({"customer.missing": {"$lt": 1}}), false),
            // an object without operators is equality against the whole object
            (json!({"items.0": {"sku": "A-1", "qty": 2}}), true),
            (json!({"items.0": {"sku": "A-1"}}), false),
        ];
        for (f, want) in cases {
            assert_eq!(filter(f.clone()).matches(&p), want, "{f}");
        }
    }

    #[test]
    fn all_conditions_must_hold_and_the_first_failure_is_named() {
        let p = payload();
        let f = filter(json!({"customer.tier": "pro", "total": {"$lt": 50}}));
        assert_eq!(
            f.check(&p),
            Verdict::Fails("total is 99.5, not less than 50".into())
        );
        assert!(
            filter(json!({})).matches(&p),
            "an empty filter passes everything"
        );
    }

    #[test]
    fn bad_filters_name_the_path() {
        let e = refused(json!({"customer.tier": {"$in": "pro"}}));
        assert_eq!(e.path.as_deref(), Some("customer.tier"));
        assert_eq!(
            e.to_string(),
            "filter_payload[\"customer.tier\"]: $in takes an array of values"
        );

        let e = refused(json!({"a": {"$equal": 1}}));
        assert_eq!(
            e.message,
            "unknown operator \"$equal\"; did you mean \"$eq\"?"
        );
        let e = refused(json!({"a": {"$regex": "x"}}));
        assert!(
            e.message.contains("the operators are $eq, $ne"),
            "{}",
            e.message
        );

        assert!(
            refused(json!({"a": {"$gt": 1, "$lt": 5}}))
                .message
                .contains("exactly one operator")
        );
        assert!(
            refused(json!({"a": {"$gt": true}}))
                .message
                .contains("number or a string")
        );
        assert!(
            refused(json!({"a": {"$exists": 1}}))
                .message
                .contains("true or false")
        );
        assert_eq!(refused(json!({"a..b": 1})).path.as_deref(), Some("a..b"));
        assert_eq!(refused(json!({"": 1})).path.as_deref(), Some(""));
        assert!(
            refused(json!({"a.b.c.d.e.f.g.h.i": 1}))
                .message
                .contains("at most 8")
        );
        assert!(filter(json!({"a.b.c.d.e.f.g.h": 1})).len() == 1);

        let many: Map<String, Value> = (0..33).map(|i| (format!("k{i}"), json!(i))).collect();
        let e = PayloadFilter::parse(&many).expect_err("33 conditions");
        assert_eq!(e.path, None);
        assert!(e.to_string().contains("at most 32"), "{e}");
    }
}
