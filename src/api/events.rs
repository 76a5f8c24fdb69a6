//! `/v1/events`: publish a named event — stored with one task per matching enabled endpoint,
//! in one transaction — and read events back.

use super::input::page_object;
use super::{Ctx, Data, Request, missing, to_data};
use crate::error::{ApiError, ApiResult};
use crate::store::events::{IDEMPOTENCY_WINDOW_MS, NewEvent};
use serde_json::Value;

/// `event_name`: 1..=200 characters of `A-Z a-z 0-9 . _ - :`.
fn check_event_name(name: &str) -> ApiResult<()> {
    let valid_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':');
    if name.is_empty() || name.len() > 200 {
        return Err(ApiError::validation(
            "event_name: must be 1 to 200 characters",
        ));
    }
    if let Some(bad) = name.chars().find(|c| !valid_char(*c)) {
        return Err(ApiError::validation(format!(
            "event_name: character '{bad}' is not allowed (use A-Z a-z 0-9 . _ - :)"
        )));
    }
    if crate::operator::is_operator_event(name) {
        return Err(ApiError::validation(format!(
            "event_name: names starting with \"{}\" are reserved for webhookd's own operator events",
            crate::operator::PREFIX
        )));
    }
    Ok(())
}

/// Fields of an event record that the server sets: ignored in a publish body (docs/design.md §3).
const READ_ONLY: &[&str] = &["id", "app_id", "status", "task_count", "created_at"];

pub fn publish(ctx: &mut Ctx<'_>, req: &Request) -> ApiResult<Data> {
    let body = req.json()?;
    let event_name = body.required_str("event_name")?;
    check_event_name(&event_name)?;
    let event_key = body.str("event_key")?;
    if let Some(key) = &event_key
        && (key.is_empty() || key.chars().count() > 200)
    {
        return Err(ApiError::validation(
            "event_key: must be 1 to 200 characters",
        ));
    }
    let payload = Value::Object(body.object("payload")?.unwrap_or_default()).to_string();
    body.finish_ignoring(READ_ONLY)?;
    let (app_id, now_ms) = (ctx.app_id, ctx.now_ms);

    // Without an `event_key` and with the app's targets held, a publish is one write of one
    // statement where the store has those (PostgreSQL: the replay record, both generations'
    // checks, the event and its tasks; docs/dev/storage.md, "A publish in one statement on
    // PostgreSQL"). It writes nothing when the targets held went stale: then the transaction
    // below reads them again. An `event_key` publish always takes the transaction: its check
    // for a first event holds a lock until its commit.
    let traces = &mut *ctx.traces;
    let targets = &ctx.app.targets;
    let event = NewEvent {
        app_id,
        event_name: &event_name,
        event_key: event_key.as_deref(),
        payload: &payload,
        now_ms,
    };
    let one = match event_key {
        None if targets.held(app_id).is_some() => ctx.store.write_statement(|tx| -> ApiResult<_> {
            traces.restart();
            Ok(crate::fanout::held_event(tx, targets, &event, traces)?)
        }),
        _ => None,
    };
    let held_tried = one.is_some();
    let written = match one.transpose()?.flatten() {
        Some(written) => written,
        // Check-then-insert inside one transaction: concurrent publishes with the same key are
        // serialized (SQLite's write lock, PostgreSQL's lock on the key), so only the first
        // creates tasks.
        None => ctx.store.write(|tx| -> ApiResult<_> {
            traces.restart();
            if let Some(key) = &event_key
                && let Some(first) =
                    tx.find_event_by_key(app_id, &event_name, key, now_ms - IDEMPOTENCY_WINDOW_MS)?
            {
                return Ok((first, 0));
            }
            let publish = if held_tried {
                crate::fanout::read_targets_event
            } else {
                crate::fanout::event
            };
            Ok(publish(tx, targets, &event, traces)?)
        })?,
    };
    let (event, created) = (written.0, written.1 > 0);
    if created {
        ctx.app.delivery_wake.notify();
    }
    to_data(&event)
}

pub fn list(ctx: &mut Ctx<'_>, req: &Request) -> ApiResult<Data> {
    let page = req.query.page()?;
    let name = req.query.get("event_name");
    let (total, items) = ctx
        .store
        .read(|tx| tx.list_events(ctx.app_id, name, page))?;
    page_object(page, total, items)
}

pub fn get(ctx: &mut Ctx<'_>, req: &Request) -> ApiResult<Data> {
    let id = req.id();
    let event = ctx
        .store
        .read(|tx| tx.get_event(ctx.app_id, id))?
        .ok_or_else(|| missing("event", id))?;
    to_data(&event)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_names() {
        for good in [
            "order.created",
            "a",
            "billing:invoice_paid-v2",
            &"x".repeat(200),
        ] {
            assert!(check_event_name(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "order created",
            "order/created",
            "ünï",
            &"x".repeat(201),
            "webhookd.task.failed",
        ] {
            let err = check_event_name(bad).unwrap_err();
            assert_eq!(err.code, 40001);
            assert!(err.message.starts_with("event_name"));
        }
    }
}
