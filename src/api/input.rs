//! Reading request input: JSON bodies field by field and query strings, with 40001/40002
//! errors that name the offending field.

use crate::error::{ApiError, ApiResult};
use crate::store::{Page, Word};
use serde_json::{Map, Value};
use std::cell::RefCell;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// A PATCH field: left out, sent as `null`, or sent with a value.
#[derive(Debug, Clone, PartialEq)]
pub enum Patch<T> {
    Absent,
    Null,
    Value(T),
}

/// A JSON object request body. It remembers which fields the handler read: those are the
/// fields the route takes, and [`Body::finish`] refuses every other one (docs/design.md §3), so a
/// field added to a handler is known without being listed anywhere else.
#[derive(Debug, Default)]
pub struct Body {
    fields: Map<String, Value>,
    read: RefCell<BTreeSet<String>>,
    /// Set by [`Body::finish`]; shared with the request so the router can tell a handler that
    /// never checked its body (see `api::Request::checked`).
    checked: Arc<AtomicBool>,
}

/// 40001 for a text holding the NUL character (see [`Body::patch_str`]).
fn nul_error(name: &str, what: &str) -> ApiError {
    ApiError::validation(format!(
        "{name}: {what} must not contain the NUL character (U+0000)"
    ))
}

fn type_error(field: &str, expected: &str) -> ApiError {
    ApiError::validation(format!("{field}: must be {expected}"))
}

impl Body {
    /// Parses a body that must be a JSON object; an empty body reads as `{}`.
    pub fn parse(bytes: &[u8]) -> ApiResult<Body> {
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(Body::default());
        }
        match serde_json::from_slice::<Value>(bytes) {
            Ok(Value::Object(map)) => Ok(Body {
                fields: map,
                ..Body::default()
            }),
            Ok(_) => Err(ApiError::bad_json("body: must be a JSON object")),
            Err(e) => Err(ApiError::bad_json(format!("body: not valid JSON ({e})"))),
        }
    }

    /// Ties this body to the request's "checked" flag.
    pub(crate) fn with_flag(mut self, checked: Arc<AtomicBool>) -> Body {
        self.checked = checked;
        self
    }

    /// The value of `field`, which from now on counts as a field the route takes.
    pub fn get(&self, field: &str) -> Option<&Value> {
        self.read.borrow_mut().insert(field.to_string());
        self.fields.get(field)
    }

    /// Call after the last read and before any write: refuses (40001) every field the handler
    /// did not read, suggesting the nearest one it did. Taking `self` makes a read after the
    /// check a compile error.
    pub fn finish(self) -> ApiResult<()> {
        self.finish_ignoring(&[])
    }

    /// Like [`Body::finish`], but the fields of `record` (the route's own record as a GET
    /// returns it) that the handler did not read are read-only and ignored, so a client may
    /// send back a record it read. New record fields are covered without being listed.
    pub fn finish_for<T: serde::Serialize>(self, record: &T) -> ApiResult<()> {
        let keys: Vec<String> = match serde_json::to_value(record) {
            Ok(Value::Object(map)) => map.keys().cloned().collect(),
            _ => Vec::new(),
        };
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        self.finish_ignoring(&keys)
    }

    /// [`Body::finish`] with an explicit list of read-only names to ignore.
    pub fn finish_ignoring(self, read_only: &[&str]) -> ApiResult<()> {
        self.checked.store(true, Ordering::Relaxed);
        let read = self.read.borrow();
        let unknown: Vec<String> = self
            .fields
            .keys()
            .filter(|k| !read.contains(*k) && !read_only.contains(&k.as_str()))
            .map(|k| unknown_message("field", k, read.iter().map(String::as_str)))
            .collect();
        if unknown.is_empty() {
            Ok(())
        } else {
            Err(ApiError::validation(unknown.join("; ")))
        }
    }

    fn patch_with<T>(
        &self,
        field: &str,
        convert: impl FnOnce(&Value) -> Option<T>,
        expected: &str,
    ) -> ApiResult<Patch<T>> {
        match self.get(field) {
            None => Ok(Patch::Absent),
            Some(Value::Null) => Ok(Patch::Null),
            Some(v) => convert(v)
                .map(Patch::Value)
                .ok_or_else(|| type_error(field, expected)),
        }
    }

    /// A string. The NUL character (U+0000) is refused: PostgreSQL text cannot hold it, and a
    /// SQLite database must stay movable to PostgreSQL (`webhookd migrate`).
    pub fn patch_str(&self, field: &str) -> ApiResult<Patch<String>> {
        let text = self.patch_with(field, |v| v.as_str().map(str::to_string), "a string")?;
        if let Patch::Value(v) = &text
            && v.contains('\0')
        {
            return Err(nul_error(field, "field"));
        }
        Ok(text)
    }

    pub fn patch_int(&self, field: &str) -> ApiResult<Patch<i64>> {
        self.patch_with(field, as_integer, "an integer")
    }

    /// A JSON number, integer or not.
    pub fn patch_f64(&self, field: &str) -> ApiResult<Patch<f64>> {
        self.patch_with(field, Value::as_f64, "a number")
    }

    pub fn patch_bool(&self, field: &str) -> ApiResult<Patch<bool>> {
        self.patch_with(field, Value::as_bool, "true or false")
    }

    /// A JSON object.
    pub fn patch_object(&self, field: &str) -> ApiResult<Patch<Map<String, Value>>> {
        self.patch_with(field, |v| v.as_object().cloned(), "a JSON object")
    }

    /// A JSON object, or a string holding one: for the PATCH fields docs/API.md declares strings
    /// while its examples show objects (schedule `payload`, endpoint `headers`).
    pub fn patch_object_or_text(&self, field: &str) -> ApiResult<Patch<Map<String, Value>>> {
        self.patch_with(
            field,
            |v| match v {
                Value::Object(map) => Some(map.clone()),
                Value::String(text) => match serde_json::from_str(text) {
                    Ok(Value::Object(map)) => Some(map),
                    _ => None,
                },
                _ => None,
            },
            "a JSON object (or a string holding one)",
        )
    }

    /// An array of integers.
    pub fn patch_int_list(&self, field: &str) -> ApiResult<Patch<Vec<i64>>> {
        self.patch_with(
            field,
            |v| v.as_array()?.iter().map(as_integer).collect(),
            "an array of integers",
        )
    }

    /// An optional field where `null` means "not given".
    pub fn str(&self, field: &str) -> ApiResult<Option<String>> {
        Ok(self.patch_str(field)?.into_option())
    }

    pub fn int(&self, field: &str) -> ApiResult<Option<i64>> {
        Ok(self.patch_int(field)?.into_option())
    }

    pub fn f64(&self, field: &str) -> ApiResult<Option<f64>> {
        Ok(self.patch_f64(field)?.into_option())
    }

    pub fn object(&self, field: &str) -> ApiResult<Option<Map<String, Value>>> {
        Ok(self.patch_object(field)?.into_option())
    }

    pub fn required_str(&self, field: &str) -> ApiResult<String> {
        self.str(field)?.ok_or_else(|| self.missing(field))
    }

    pub fn required_int(&self, field: &str) -> ApiResult<i64> {
        self.int(field)?.ok_or_else(|| self.missing(field))
    }

    /// 40001 for a required `field` left out, naming the body's field that looks like a typo
    /// of it: `name: is required (the body has "nmae"; did you mean "name"?)`.
    pub fn missing(&self, field: &str) -> ApiError {
        let typo = self
            .fields
            .keys()
            .filter(|k| k.as_str() != field)
            .find(|k| crate::suggest::nearest(k, [field]).is_some());
        match typo {
            Some(k) => {
                let shown: String = k.chars().take(100).collect();
                ApiError::validation(format!(
                    "{field}: is required (the body has {shown:?}; did you mean {field:?}?)"
                ))
            }
            None => ApiError::validation(format!("{field}: is required")),
        }
    }

    /// A PATCH field that cannot be cleared: left out → `None`; `null` → 40001.
    pub fn update_str(&self, field: &str) -> ApiResult<Option<String>> {
        self.patch_str(field)?.not_null(field)
    }

    pub fn update_int(&self, field: &str) -> ApiResult<Option<i64>> {
        self.patch_int(field)?.not_null(field)
    }

    pub fn update_bool(&self, field: &str) -> ApiResult<Option<bool>> {
        self.patch_bool(field)?.not_null(field)
    }

    pub fn update_int_list(&self, field: &str) -> ApiResult<Option<Vec<i64>>> {
        self.patch_int_list(field)?.not_null(field)
    }

    pub fn update_object_or_text(&self, field: &str) -> ApiResult<Option<Map<String, Value>>> {
        self.patch_object_or_text(field)?.not_null(field)
    }
}

/// A JSON integer as JSON Schema reads one: `3` or `3.0` (a number with no fractional part, as
/// some JSON encoders write whole numbers), within i64. Found by schemathesis: `3.0` for
/// `max_attempts` was refused although the document's `"type": "integer"` allows it.
pub fn as_integer(value: &Value) -> Option<i64> {
    value.as_i64().or_else(|| {
        let f = value.as_f64()?;
        // i64::MAX as f64 rounds up to 2^63, so the upper bound is exclusive.
        (f.fract() == 0.0 && f >= i64::MIN as f64 && f < i64::MAX as f64).then_some(f as i64)
    })
}

impl<T> Patch<T> {
    /// `Absent` and `Null` both become `None`.
    pub fn into_option(self) -> Option<T> {
        match self {
            Patch::Value(v) => Some(v),
            Patch::Absent | Patch::Null => None,
        }
    }

    /// For fields that cannot be cleared: `null` is a 40001 naming the field.
    pub fn not_null(self, field: &str) -> ApiResult<Option<T>> {
        match self {
            Patch::Absent => Ok(None),
            Patch::Null => Err(ApiError::validation(format!(
                "{field}: cannot be null; leave it out to keep the current value"
            ))),
            Patch::Value(v) => Ok(Some(v)),
        }
    }

    /// Applies the patch to a nullable field.
    pub fn apply_nullable(self, field: &mut Option<T>) {
        match self {
            Patch::Absent => {}
            Patch::Null => *field = None,
            Patch::Value(v) => *field = Some(v),
        }
    }
}

/// Checks a name: 1..=200 characters.
pub fn check_name(field: &str, name: &str) -> ApiResult<()> {
    let len = name.chars().count();
    if len == 0 || len > 200 || name.trim().is_empty() {
        return Err(ApiError::validation(format!(
            "{field}: must be 1 to 200 characters"
        )));
    }
    Ok(())
}

/// Checks an integer is within `range`, naming the field when it is not.
pub fn check_range(field: &str, value: i64, range: std::ops::RangeInclusive<i64>) -> ApiResult<()> {
    if range.contains(&value) {
        Ok(())
    } else {
        Err(ApiError::validation(format!(
            "{field}: must be between {} and {}",
            range.start(),
            range.end()
        )))
    }
}

/// The highest `page` a list accepts: 100 million rows deep at the largest page size, far past
/// any real list, and well inside SQLite's 64-bit OFFSET.
pub const MAX_PAGE: i64 = 1_000_000;

/// A decoded query string. Like [`Body`], it remembers which parameters the handler read, and
/// [`Query::finish`] refuses the others (docs/design.md §3).
#[derive(Debug, Default, Clone)]
pub struct Query {
    pairs: Vec<(String, String)>,
    read: RefCell<BTreeSet<String>>,
}

impl Query {
    pub fn parse(raw: Option<&str>) -> Query {
        let pairs = raw
            .unwrap_or("")
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|pair| {
                let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
                (percent_decode(k), percent_decode(v))
            })
            .collect();
        Query {
            pairs,
            read: RefCell::default(),
        }
    }

    /// Refuses (40001) a parameter whose value holds the NUL character, before any handler
    /// takes it to the database (see [`Body::patch_str`]).
    pub fn refuse_nul(&self) -> ApiResult<()> {
        match self.pairs.iter().find(|(_, v)| v.contains('\0')) {
            Some((name, _)) => Err(nul_error(name, "query parameter")),
            None => Ok(()),
        }
    }

    /// True when no parameter was given at all.
    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    /// Refuses (40001) every parameter the handler did not read, suggesting the nearest one it
    /// did.
    pub fn finish(&self) -> ApiResult<()> {
        let read = self.read.borrow();
        let mut unknown: Vec<String> = Vec::new();
        for (name, _) in &self.pairs {
            let message = unknown_message("query parameter", name, read.iter().map(String::as_str));
            if !read.contains(name) && !unknown.contains(&message) {
                unknown.push(message);
            }
        }
        if unknown.is_empty() {
            Ok(())
        } else {
            Err(ApiError::validation(unknown.join("; ")))
        }
    }

    /// The last value given for `name`, if not empty.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.read.borrow_mut().insert(name.to_string());
        self.pairs
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .filter(|v| !v.is_empty())
    }

    pub fn int(&self, name: &str) -> ApiResult<Option<i64>> {
        self.get(name)
            .map(|v| {
                v.parse::<i64>().map_err(|_| {
                    ApiError::validation(format!("{name}: query parameter must be an integer"))
                })
            })
            .transpose()
    }

    /// A value that must be the word of one of `allowed` (`T::ALL`, or part of it), parsed into
    /// it; else 40001 listing the words.
    pub fn one_of<T: Word>(&self, name: &str, allowed: &[T]) -> ApiResult<Option<T>> {
        let Some(v) = self.get(name) else {
            return Ok(None);
        };
        match allowed.iter().find(|w| w.word() == v) {
            Some(w) => Ok(Some(*w)),
            None => {
                let words: Vec<_> = allowed.iter().map(Word::word).collect();
                Err(ApiError::validation(format!(
                    "{name}: '{v}' is not one of {}",
                    words.join(", ")
                )))
            }
        }
    }

    /// `page` in 1..=[`MAX_PAGE`] (default 1) and `page_size` clamped to 1..=100 (default 20).
    pub fn page(&self) -> ApiResult<Page> {
        let page = self.int("page")?.unwrap_or(1);
        if !(1..=MAX_PAGE).contains(&page) {
            return Err(ApiError::validation(format!(
                "page: must be between 1 and {MAX_PAGE}"
            )));
        }
        let page_size = self.int("page_size")?.unwrap_or(20).clamp(1, 100);
        Ok(Page {
            page: u32::try_from(page).unwrap_or(u32::MAX),
            page_size: u32::try_from(page_size).unwrap_or(20),
        })
    }
}

/// `unknown field "filter_event"; did you mean "filter_events"?`: the suggestion is the known
/// name nearest by edit distance, when it is close: at most a third of the name's length (and
/// at least 1) edits away, or one name holding the other (`max_delay` → `max_delay_sec`).
pub(crate) fn unknown_message<'a>(
    what: &str,
    name: &str,
    known: impl Iterator<Item = &'a str>,
) -> String {
    let shown: String = name.chars().take(100).collect();
    match crate::suggest::nearest(name, known) {
        Some(k) => format!("unknown {what} {shown:?}; did you mean {k:?}?"),
        None => format!("unknown {what} {shown:?}"),
    }
}

/// Decodes one key or value of an `application/x-www-form-urlencoded` query: `+` is a space,
/// `%XX` a byte; a `%` not followed by two hex digits stays as it is, and bytes that are not
/// UTF-8 become U+FFFD.
fn percent_decode(text: &str) -> String {
    let spaced = text.replace('+', " ");
    percent_encoding::percent_decode_str(&spaced)
        .decode_utf8_lossy()
        .into_owned()
}

/// The page object of list replies.
pub fn page_object<T: serde::Serialize>(
    page: Page,
    total: i64,
    items: Vec<T>,
) -> ApiResult<super::Data> {
    #[derive(serde::Serialize)]
    struct Paged<T> {
        total: i64,
        page: u32,
        page_size: u32,
        items: Vec<T>,
    }
    super::to_data(&Paged {
        total,
        page: page.page,
        page_size: page.page_size,
        items,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_decoding_and_paging() {
        let q = Query::parse(Some("page=2&page_size=500&name=a%20b+c&bad=%zz"));
        assert_eq!(q.get("name"), Some("a b c"));
        assert_eq!(q.get("bad"), Some("%zz"));
        let odd = Query::parse(Some(
            "plus=1%2B1&cut=50%&half=%4&utf8=caf%C3%A9&latin1=caf%E9&k%3Dy=v",
        ));
        assert_eq!(odd.get("plus"), Some("1+1"));
        assert_eq!(odd.get("cut"), Some("50%"));
        assert_eq!(odd.get("half"), Some("%4"));
        assert_eq!(odd.get("utf8"), Some("café"));
        assert_eq!(odd.get("latin1"), Some("caf\u{fffd}"));
        assert_eq!(odd.get("k=y"), Some("v"));
        assert_eq!(
            q.page().unwrap(),
            Page {
                page: 2,
                page_size: 100
            }
        );
        assert_eq!(
            Query::parse(Some("page=abc")).page().unwrap_err().code,
            40001
        );
        assert_eq!(Query::parse(Some("page=0")).page().unwrap_err().code, 40001);
        assert_eq!(
            Query::parse(Some("page_size=0")).page().unwrap().page_size,
            1
        );
    }

    #[test]
    fn body_fields_and_patch_states() {
        let body = Body::parse(br#"{"a": null, "b": "x", "c": 5, "h": "{\"k\":\"v\"}"}"#).unwrap();
        assert_eq!(body.patch_str("a").unwrap(), Patch::Null);
        assert_eq!(body.patch_str("z").unwrap(), Patch::Absent);
        assert_eq!(body.patch_str("b").unwrap(), Patch::Value("x".into()));
        assert_eq!(body.patch_str("c").unwrap_err().code, 40001);
        assert!(
            body.update_object_or_text("h")
                .unwrap()
                .unwrap()
                .contains_key("k")
        );
        assert_eq!(body.object("h").unwrap_err().code, 40001);
        assert_eq!(body.update_str("a").unwrap_err().code, 40001);
        assert_eq!(body.update_str("z").unwrap(), None);
        assert_eq!(Body::parse(b"[1]").unwrap_err().code, 40002);
        let numbers = Body::parse(br#"{"w": 3.0, "f": 3.5, "big": 1e300, "l": [1, 2.0]}"#).unwrap();
        assert_eq!(numbers.int("w").unwrap(), Some(3));
        assert_eq!(numbers.int("f").unwrap_err().code, 40001);
        assert_eq!(numbers.int("big").unwrap_err().code, 40001);
        assert_eq!(numbers.update_int_list("l").unwrap(), Some(vec![1, 2]));
        assert_eq!(Body::parse(b"{oops").unwrap_err().code, 40002);
        assert!(Body::parse(b"").is_ok());
    }

    #[test]
    fn unknown_fields_are_refused_with_the_nearest_name() {
        let body = Body::parse(br#"{"name": "a", "filter_event": "x"}"#).unwrap();
        body.str("name").unwrap();
        body.str("filter_events").unwrap();
        let err = body.finish().unwrap_err();
        assert_eq!(err.code, 40001);
        assert_eq!(
            err.message,
            r#"unknown field "filter_event"; did you mean "filter_events"?"#
        );

        let body = Body::parse(br#"{"name": "a", "zzz": 1}"#).unwrap();
        body.str("name").unwrap();
        assert_eq!(body.finish().unwrap_err().message, r#"unknown field "zzz""#);
        let body = Body::parse(br#"{"max_delay": 1}"#).unwrap();
        body.int("max_delay_sec").unwrap();
        body.int("max_attempts").unwrap();
        assert_eq!(
            body.finish().unwrap_err().message,
            r#"unknown field "max_delay"; did you mean "max_delay_sec"?"#
        );

        // Read-only fields of the record are ignored; the others still count.
        let body = Body::parse(br#"{"name": "a", "id": 7, "created_at": "x"}"#).unwrap();
        body.str("name").unwrap();
        assert!(body.finish_ignoring(&["id", "created_at"]).is_ok());
        let body = Body::parse(br#"{"id": 7}"#).unwrap();
        assert!(body.finish_for(&serde_json::json!({"id": 1})).is_ok());
        let body = Body::parse(br#"{"id": 7}"#).unwrap();
        assert_eq!(body.finish().unwrap_err().code, 40001);
        assert!(Body::parse(b"").unwrap().finish().is_ok());
    }

    #[test]
    fn nul_characters_are_refused_in_strings_and_query_values() {
        let body = Body::parse(br#"{"name": "a\u0000b", "url": "ok"}"#).unwrap();
        let err = body.str("name").unwrap_err();
        assert_eq!(err.code, 40001);
        assert_eq!(
            err.message,
            "name: field must not contain the NUL character (U+0000)"
        );
        assert_eq!(body.str("url").unwrap().as_deref(), Some("ok"));
        let q = Query::parse(Some("status=failed&event_name=a%00b"));
        let err = q.refuse_nul().unwrap_err();
        assert_eq!(
            err.message,
            "event_name: query parameter must not contain the NUL character (U+0000)"
        );
        assert!(Query::parse(Some("status=failed")).refuse_nul().is_ok());
    }

    #[test]
    fn unknown_query_parameters_are_refused() {
        let q = Query::parse(Some("page=2&statu=failed&statu=x"));
        q.page().unwrap();
        q.get("status");
        let err = q.finish().unwrap_err();
        assert_eq!(
            err.message,
            r#"unknown query parameter "statu"; did you mean "status"?"#
        );
        let q = Query::parse(Some("page=2"));
        q.page().unwrap();
        assert!(q.finish().is_ok());
    }
}
