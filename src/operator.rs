//! Operator events (docs/design.md §11): what webhookd publishes in an app when it gives up on
//! something by itself — it disabled an endpoint, failed a task for good, or paused a schedule.
//!
//! Each is an ordinary event (`GET /events` lists it) created in the same transaction as the
//! state change it reports. It goes only to enabled endpoints whose `filter_events` has a
//! pattern that begins with `webhookd.` and matches it, so a catch-all endpoint never gets one.
//! Clients cannot publish names with that prefix. A failed delivery *of* an operator event is
//! never reported by another one (the caller checks [`is_operator_event`]), so a failing
//! subscriber cannot start a storm.

use crate::store::{StoreError, Tx};
use serde_json::{Value, json};

/// Every operator event's name starts with this; client events may not.
pub const PREFIX: &str = "webhookd.";

/// Whether an event name is one of webhookd's own.
pub fn is_operator_event(event_name: &str) -> bool {
    event_name.starts_with(PREFIX)
}

/// Something webhookd did by itself that the operator should hear about.
#[derive(Debug, Clone, PartialEq)]
pub enum OperatorEvent {
    /// `webhookd.endpoint.disabled`; `reason` is the endpoint's `disabled_reason` (`gone` or
    /// `failing`), `task_id` the task whose attempt decided it.
    EndpointDisabled {
        endpoint_id: i64,
        reason: &'static str,
        task_id: Option<i64>,
        consecutive_failures: Option<i64>,
    },
    /// `webhookd.task.failed`: a task used its attempts (`attempts_exhausted`) or its endpoint
    /// answered 410 (`gone`).
    TaskFailed {
        task_id: i64,
        endpoint_id: i64,
        schedule_id: Option<i64>,
        event_id: Option<i64>,
        reason: &'static str,
        attempts: i64,
        last_status_code: Option<i64>,
        last_error: Option<String>,
    },
    /// `webhookd.schedule.paused`: the last endpoint a schedule targeted was deleted.
    SchedulePaused {
        schedule_id: i64,
        endpoint_id: i64,
        reason: &'static str,
    },
}

impl OperatorEvent {
    pub fn name(&self) -> &'static str {
        match self {
            OperatorEvent::EndpointDisabled { .. } => "webhookd.endpoint.disabled",
            OperatorEvent::TaskFailed { .. } => "webhookd.task.failed",
            OperatorEvent::SchedulePaused { .. } => "webhookd.schedule.paused",
        }
    }

    /// The event's payload: the ids involved and the reason.
    pub fn payload(&self) -> Value {
        match self {
            OperatorEvent::EndpointDisabled {
                endpoint_id,
                reason,
                task_id,
                consecutive_failures,
            } => json!({
                "endpoint_id": endpoint_id,
                "reason": reason,
                "task_id": task_id,
                "consecutive_failures": consecutive_failures,
            }),
            OperatorEvent::TaskFailed {
                task_id,
                endpoint_id,
                schedule_id,
                event_id,
                reason,
                attempts,
                last_status_code,
                last_error,
            } => json!({
                "task_id": task_id,
                "endpoint_id": endpoint_id,
                "schedule_id": schedule_id,
                "event_id": event_id,
                "reason": reason,
                "attempts": attempts,
                "last_status_code": last_status_code,
                "last_error": last_error,
            }),
            OperatorEvent::SchedulePaused {
                schedule_id,
                endpoint_id,
                reason,
            } => json!({
                "schedule_id": schedule_id,
                "endpoint_id": endpoint_id,
                "reason": reason,
            }),
        }
    }
}

/// Publishes `event` in `app_id` inside the caller's transaction: the event row, and one task
/// per enabled endpoint subscribed to it with a `webhookd.` pattern. Returns the event's id and
/// how many tasks it made.
pub fn publish(
    tx: &mut dyn Tx,
    app_id: &str,
    event: &OperatorEvent,
    now_ms: i64,
) -> Result<(i64, usize), StoreError> {
    let payload = event.payload().to_string();
    crate::fanout::operator_event(tx, app_id, PREFIX, event.name(), &payload, now_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_payloads_carry_ids_and_reason() {
        let e = OperatorEvent::SchedulePaused {
            schedule_id: 3,
            endpoint_id: 9,
            reason: "endpoint_deleted",
        };
        assert_eq!(e.name(), "webhookd.schedule.paused");
        assert_eq!(
            e.payload(),
            json!({"schedule_id": 3, "endpoint_id": 9, "reason": "endpoint_deleted"})
        );
        assert!(is_operator_event(e.name()));
        assert!(!is_operator_event("order.created"));
        assert!(!is_operator_event("webhookd"));
    }
}
