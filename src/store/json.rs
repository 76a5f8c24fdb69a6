//! JSON stored as text — payloads, endpoint headers, a schedule's endpoint ids: read back as a
//! [`Stored`] value of its column, so text that does not parse is an error of the read naming
//! the column, never an empty default. Each backend converts it in its driver's terms
//! (`sqlite/mod.rs`, `postgres/mod.rs`), as it does stored words (`store::word`).

use serde_json::{Map, Value};

/// A column that holds JSON text.
pub trait JsonColumn: 'static {
    /// What the text holds.
    type Value: serde::de::DeserializeOwned;
    /// The table and column (`tasks.payload`), for an error.
    const COLUMN: &'static str;
}

/// The value of column `C` as read from a row.
pub struct Stored<C: JsonColumn>(pub C::Value);

impl<C: JsonColumn> Stored<C> {
    /// Parses the column's text; text that does not hold a `C::Value` is an error naming the
    /// column.
    pub fn parse(text: &str) -> Result<Self, crate::store::Unreadable> {
        serde_json::from_str(text)
            .map(Stored)
            .map_err(|e| crate::store::Unreadable(format!("not valid JSON for {}: {e}", C::COLUMN)))
    }
}

/// Declares [`JsonColumn`]s: a marker type per column, with what its text holds and its name.
macro_rules! json_columns {
    ($($(#[$meta:meta])* $name:ident: $value:ty = $column:literal),+ $(,)?) => {$(
        $(#[$meta])*
        pub struct $name;

        impl JsonColumn for $name {
            type Value = $value;
            const COLUMN: &'static str = $column;
        }
    )+};
}

json_columns! {
    /// A task's payload, sent as is.
    TaskPayload: Value = "tasks.payload",
    /// An event's payload.
    EventPayload: Value = "events.payload",
    /// A schedule's payload, copied into each firing's tasks.
    SchedulePayload: Map<String, Value> = "schedules.payload",
    /// A schedule's target endpoints (empty: every enabled endpoint of the app).
    ScheduleTargets: Vec<i64> = "schedules.endpoint_ids",
    /// An endpoint's headers, name → value.
    EndpointHeaders: Map<String, Value> = "endpoints.headers",
    /// An endpoint's conditions on a payload (`NULL`: none). Text that is not an object is an
    /// error of the read, not "no filter", which would show the endpoint as taking every event
    /// while the fan-out sends it none (`targets`).
    EndpointPayloadFilter: Map<String, Value> = "endpoints.filter_payload",
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_that_does_not_hold_the_column_s_value_is_an_error_naming_it() {
        assert_eq!(Stored::<ScheduleTargets>::parse("[1,2]").unwrap().0, [1, 2]);
        let err = Stored::<ScheduleTargets>::parse("{}").err().unwrap().0;
        assert!(
            err.starts_with("not valid JSON for schedules.endpoint_ids: "),
            "{err}"
        );
        assert!(Stored::<SchedulePayload>::parse("[]").is_err());
        assert!(Stored::<TaskPayload>::parse("{\"a\":").is_err());
    }
}
