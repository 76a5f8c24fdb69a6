//! `/v1/schedules` and `/v1/cron/preview`: cron-driven triggers — create, list, read, update,
//! pause, resume, delete (soft), trigger now — and a preview of an expression's next runs.
//!
//! A deleted schedule stays readable but is frozen: PATCH, pause, resume, trigger and backfill
//! answer 409, and DELETE again answers as the first one did.
//!
//! Windows (`starts_at`, `ends_at`), `jitter_sec` and backfill: docs/API.md "Schedule windows,
//! jitter and backfill" (docs/design.md §19).

use super::input::{Body, Patch, check_name, check_range, page_object};
use super::{Ctx, Data, Request, missing, to_data};
use crate::clock::{from_ms, is_expressible, parse_instant, rfc3339};
use crate::cron::CronSchedule;
use crate::error::{ApiError, ApiResult};
use crate::scheduler::{instants_between, next_in_window};
use crate::store::Word;
use crate::store::schedules::{Catchup, Overlap, Schedule, ScheduleStatus, Window};
use chrono::{DateTime, Datelike, Utc};
use serde_json::{Value, json};

/// Most target endpoints one schedule may name.
const MAX_TARGETS: usize = 1000;

/// Parses and validates an expression in a zone; the cron module's message names the field.
fn parse_cron(cron_expr: &str, timezone: &str) -> ApiResult<CronSchedule> {
    CronSchedule::parse(cron_expr, timezone).map_err(ApiError::validation)
}

/// An enum field of create and PATCH (`catchup`, `overlap`): left out → `None`; `null` or a
/// word not in `T`'s set → 40001 naming the field and the values it takes.
fn choice<T: Word>(body: &Body, field: &str) -> ApiResult<Option<T>> {
    let Some(v) = body.update_str(field)? else {
        return Ok(None);
    };
    T::from_word(&v).map(Some).ok_or_else(|| {
        let allowed: Vec<_> = T::ALL.iter().map(Word::word).collect();
        ApiError::validation(format!(
            "{field}: must be one of {}, not \"{v}\"",
            allowed.join(", ")
        ))
    })
}

/// Most instants one backfill may fire.
const MAX_BACKFILL: usize = 1000;

/// The first fire instant after `now_ms` inside the window, in store milliseconds.
fn next_run(cron: &CronSchedule, window: Window, now_ms: i64) -> Option<i64> {
    next_in_window(cron, window, from_ms(now_ms)).map(|t| t.timestamp_millis())
}

/// A date-time field: an RFC 3339 instant or epoch seconds, else 40001 naming it.
fn instant(field: &str, value: &Value) -> ApiResult<DateTime<Utc>> {
    parse_instant(value).ok_or_else(|| {
        ApiError::validation(format!(
            "{field}: must be an RFC 3339 instant or epoch seconds, in the years 0001 to 9999"
        ))
    })
}

/// A nullable date-time field of create and PATCH (`starts_at`, `ends_at`), in ms.
fn patch_instant(body: &Body, field: &str) -> ApiResult<Patch<i64>> {
    Ok(match body.get(field) {
        None => Patch::Absent,
        Some(Value::Null) => Patch::Null,
        Some(v) => Patch::Value(instant(field, v)?.timestamp_millis()),
    })
}

/// Reads `starts_at` and `ends_at` over `window` and checks `ends_at` ≥ `starts_at`.
fn apply_window(body: &Body, window: &mut Window) -> ApiResult<()> {
    patch_instant(body, "starts_at")?.apply_nullable(&mut window.starts_at);
    patch_instant(body, "ends_at")?.apply_nullable(&mut window.ends_at);
    if let (Some(s), Some(e)) = (window.starts_at, window.ends_at)
        && e < s
    {
        return Err(ApiError::validation(
            "ends_at: must be at or after starts_at",
        ));
    }
    Ok(())
}

/// `jitter_sec`: 0..=3600.
fn check_jitter(jitter_sec: i64) -> ApiResult<i64> {
    check_range("jitter_sec", jitter_sec, 0..=3600)?;
    Ok(jitter_sec)
}

/// Checks target endpoint ids: each an endpoint of the caller's app. Duplicates are dropped,
/// keeping the first occurrence, so no endpoint gets two tasks from one firing.
fn check_targets(ctx: &Ctx<'_>, ids: Vec<i64>) -> ApiResult<Vec<i64>> {
    if ids.len() > MAX_TARGETS {
        return Err(ApiError::validation(format!(
            "endpoint_ids: at most {MAX_TARGETS} endpoints"
        )));
    }
    let mut unique = Vec::with_capacity(ids.len());
    for id in ids {
        if !unique.contains(&id) {
            unique.push(id);
        }
    }
    let found = ctx
        .store
        .read(|tx| tx.endpoint_names(ctx.app_id, &unique))?;
    if let Some(id) = unique
        .iter()
        .find(|id| !found.iter().any(|(f, _)| f == *id))
    {
        return Err(ApiError::validation(format!(
            "endpoint_ids: no endpoint {id} in this app"
        )));
    }
    Ok(unique)
}

fn load(ctx: &Ctx<'_>, id: i64) -> ApiResult<Schedule> {
    ctx.store
        .read(|tx| tx.get_schedule(ctx.app_id, id))?
        .ok_or_else(|| missing("schedule", id))
}

/// Loads a schedule an operation is about to change: 409 when it is deleted.
fn load_live(ctx: &Ctx<'_>, id: i64, operation: &str) -> ApiResult<Schedule> {
    let schedule = load(ctx, id)?;
    if schedule.status == ScheduleStatus::Deleted {
        return Err(ApiError::conflict(format!(
            "schedule {id} is deleted; it cannot be {operation}"
        )));
    }
    Ok(schedule)
}

/// The record as replied: with `endpoint_names`.
fn record(ctx: &Ctx<'_>, mut schedule: Schedule) -> ApiResult<Data> {
    ctx.store.read(|tx| tx.fill_schedule_names(&mut schedule))?;
    to_data(&schedule)
}

/// Saves a changed schedule, stamps `updated_at`, and wakes the scheduler to re-plan.
fn save(ctx: &mut Ctx<'_>, schedule: &mut Schedule) -> ApiResult<()> {
    schedule.updated_at = ctx.now_ms;
    ctx.store.write(|tx| tx.update_schedule(schedule))?;
    ctx.app.scheduler_wake.notify();
    Ok(())
}

pub fn create(ctx: &mut Ctx<'_>, req: &Request) -> ApiResult<Data> {
    let body = req.json()?;
    let name = body.required_str("name")?;
    check_name("name", &name)?;
    let cron_expr = body.required_str("cron_expr")?;
    let timezone = body.str("timezone")?.unwrap_or_else(|| "UTC".into());
    let cron = parse_cron(&cron_expr, &timezone)?;
    let payload = body.object("payload")?.unwrap_or_default();
    let endpoint_ids = check_targets(
        ctx,
        body.patch_int_list("endpoint_ids")?
            .into_option()
            .unwrap_or_default(),
    )?;
    let catchup = choice(&body, "catchup")?.unwrap_or(Catchup::Latest);
    let overlap = choice(&body, "overlap")?.unwrap_or(Overlap::Allow);
    let mut window = Window::default();
    apply_window(&body, &mut window)?;
    let jitter_sec = check_jitter(body.int("jitter_sec")?.unwrap_or(0))?;
    let schedule = Schedule {
        id: 0,
        app_id: ctx.app_id.to_string(),
        name,
        cron_expr,
        timezone,
        payload,
        status: ScheduleStatus::Active,
        next_run_at: next_run(&cron, window, ctx.now_ms),
        last_run_at: None,
        created_at: ctx.now_ms,
        updated_at: ctx.now_ms,
        endpoint_ids,
        paused_reason: None,
        catchup,
        overlap,
        skipped_runs: 0,
        starts_at: window.starts_at,
        ends_at: window.ends_at,
        jitter_sec,
        endpoint_names: Default::default(),
        next_run_at_local: None,
    };
    body.finish_for(&schedule)?;
    let schedule = ctx.store.write(|tx| tx.insert_schedule(&schedule))?;
    ctx.app.scheduler_wake.notify();
    record(ctx, schedule)
}

pub fn list(ctx: &mut Ctx<'_>, req: &Request) -> ApiResult<Data> {
    let page = req.query.page()?;
    let status = req
        .query
        .one_of("status", &[ScheduleStatus::Active, ScheduleStatus::Paused])?;
    let (total, mut items) = ctx
        .store
        .read(|tx| tx.list_schedules(ctx.app_id, status, page))?;
    for schedule in &mut items {
        ctx.store.read(|tx| tx.fill_schedule_names(schedule))?;
    }
    page_object(page, total, items)
}

pub fn get(ctx: &mut Ctx<'_>, req: &Request) -> ApiResult<Data> {
    let schedule = load(ctx, req.id())?;
    record(ctx, schedule)
}

/// Applies a PATCH body to a loaded schedule, validating each field it sends.
fn apply_patch(ctx: &Ctx<'_>, s: &mut Schedule, body: &Body) -> ApiResult<()> {
    if let Some(name) = body.update_str("name")? {
        check_name("name", &name)?;
        s.name = name;
    }
    let cron_expr = body.update_str("cron_expr")?;
    let timezone = body.update_str("timezone")?;
    let mut window = s.window();
    apply_window(body, &mut window)?;
    if cron_expr.is_some() || timezone.is_some() || window != s.window() {
        let cron_expr = cron_expr.unwrap_or_else(|| s.cron_expr.clone());
        let timezone = timezone.unwrap_or_else(|| s.timezone.clone());
        let cron = parse_cron(&cron_expr, &timezone)?;
        // A changed expression or window re-plans from now: a schedule past its end revives
        // when its end moves later.
        if ((&cron_expr, &timezone) != (&s.cron_expr, &s.timezone) || window != s.window())
            && s.status == ScheduleStatus::Active
        {
            s.next_run_at = next_run(&cron, window, ctx.now_ms);
        }
        (s.cron_expr, s.timezone) = (cron_expr, timezone);
        (s.starts_at, s.ends_at) = (window.starts_at, window.ends_at);
    }
    if let Some(jitter_sec) = body.update_int("jitter_sec")? {
        s.jitter_sec = check_jitter(jitter_sec)?;
    }
    if let Some(payload) = body.update_object_or_text("payload")? {
        s.payload = payload;
    }
    if let Some(ids) = body.update_int_list("endpoint_ids")? {
        s.endpoint_ids = check_targets(ctx, ids)?;
        s.paused_reason = None;
    }
    if let Some(catchup) = choice(body, "catchup")? {
        s.catchup = catchup;
    }
    if let Some(overlap) = choice(body, "overlap")? {
        s.overlap = overlap;
    }
    Ok(())
}

pub fn update(ctx: &mut Ctx<'_>, req: &Request) -> ApiResult<Data> {
    let body = req.json()?;
    let mut schedule = load_live(ctx, req.id(), "changed")?;
    let before = schedule.clone();
    apply_patch(ctx, &mut schedule, &body)?;
    body.finish_for(&before)?;
    if schedule != before {
        save(ctx, &mut schedule)?;
    }
    record(ctx, schedule)
}

/// Pause is idempotent: pausing a paused schedule changes nothing.
pub fn pause(ctx: &mut Ctx<'_>, req: &Request) -> ApiResult<Data> {
    req.no_body()?;
    let mut schedule = load_live(ctx, req.id(), "paused")?;
    if schedule.status != ScheduleStatus::Paused {
        schedule.status = ScheduleStatus::Paused;
        schedule.paused_reason = None;
        schedule.next_run_at = None;
        save(ctx, &mut schedule)?;
    }
    record(ctx, schedule)
}

/// Resume plans the next run from now: runs that fell while paused are not caught up.
/// Resuming an active schedule changes nothing.
pub fn resume(ctx: &mut Ctx<'_>, req: &Request) -> ApiResult<Data> {
    req.no_body()?;
    let mut schedule = load_live(ctx, req.id(), "resumed")?;
    check_has_targets(&schedule, "resumed")?;
    if schedule.status != ScheduleStatus::Active {
        schedule.paused_reason = None;
        let cron = parse_cron(&schedule.cron_expr, &schedule.timezone)?;
        schedule.status = ScheduleStatus::Active;
        schedule.next_run_at = next_run(&cron, schedule.window(), ctx.now_ms);
        save(ctx, &mut schedule)?;
    }
    record(ctx, schedule)
}

/// Refuses to resume or trigger a schedule webhookd paused because its last target endpoint was
/// deleted: its empty `endpoint_ids` would otherwise start sending to every endpoint.
fn check_has_targets(schedule: &Schedule, operation: &str) -> ApiResult<()> {
    if schedule.paused_reason.is_some() && schedule.endpoint_ids.is_empty() {
        return Err(ApiError::conflict(format!(
            "schedule {} cannot be {operation}: every endpoint it targeted was deleted; set endpoint_ids with PATCH first ([] targets every enabled endpoint)",
            schedule.id
        )));
    }
    Ok(())
}

/// Soft delete: the record stays readable with status `deleted` and never fires again.
pub fn delete(ctx: &mut Ctx<'_>, req: &Request) -> ApiResult<Data> {
    req.no_body()?;
    let id = req.id();
    let mut schedule = load(ctx, id)?;
    if schedule.status != ScheduleStatus::Deleted {
        schedule.status = ScheduleStatus::Deleted;
        schedule.next_run_at = None;
        save(ctx, &mut schedule)?;
    }
    Ok(json!({ "id": id, "deleted": true }).into())
}

/// Fires now, whatever the schedule's next run (a paused schedule too): one `manual` task per
/// target endpoint, `schedule_id` set.
pub fn trigger(ctx: &mut Ctx<'_>, req: &Request) -> ApiResult<Data> {
    req.no_body()?;
    let schedule = load_live(ctx, req.id(), "triggered")?;
    check_has_targets(&schedule, "triggered")?;
    let firing = schedule.firing();
    let now_ms = ctx.now_ms;
    let traces = &mut *ctx.traces;
    let task_ids = ctx
        .store
        .write(|tx| crate::scheduler::trigger(tx, &firing, now_ms, traces))?;
    if !task_ids.is_empty() {
        ctx.app.delivery_wake.notify();
    }
    Ok(json!({ "task_ids": task_ids }).into())
}

/// `POST /schedules/{id}/backfill`: fires each instant of the schedule in [`from`, `to`] (and
/// in its window) that has not fired before, oldest first, its tasks due now. Instants after
/// now are left to the scheduler: a backfill is of the past.
pub fn backfill(ctx: &mut Ctx<'_>, req: &Request) -> ApiResult<Data> {
    let body = req.json()?;
    let from = instant("from", body.get("from").unwrap_or(&Value::Null))?;
    let to = instant("to", body.get("to").unwrap_or(&Value::Null))?;
    body.finish()?;
    if to < from {
        return Err(ApiError::validation("to: must be at or after from"));
    }
    let schedule = load_live(ctx, req.id(), "backfilled")?;
    // The scheduler's firing records older than the retention are deleted (docs/operations.md,
    // "Retention"): an instant between the schedule's creation and the retention's edge can no
    // longer be told fired or not. Instants before the creation only a backfill fires, and
    // their records are kept, so any past before it can be backfilled (and repeated).
    let oldest = ctx.app.config.retention_cutoff(ctx.now_ms);
    let forgotten = schedule.created_at..oldest;
    if from.timestamp_millis() < forgotten.end && to.timestamp_millis() >= forgotten.start {
        let days = ctx.app.config.retention_days;
        return Err(ApiError::validation(format!(
            "from: the instants between the schedule's creation ({}) and {} are past --retention-days ({days} days): their firing records are gone, so they cannot be told fired or not; backfill from {} on, or only before the creation",
            rfc3339(schedule.created_at),
            rfc3339(oldest),
            rfc3339(oldest)
        )));
    }
    check_has_targets(&schedule, "backfilled")?;
    let cron = parse_cron(&schedule.cron_expr, &schedule.timezone)?;
    let until = to.min(from_ms(ctx.now_ms));
    let instants = instants_between(&cron, schedule.window(), from, until, MAX_BACKFILL)
        .ok_or_else(|| {
            ApiError::validation(format!(
                "to: the schedule has more than {MAX_BACKFILL} instants between from and to; backfill a shorter interval"
            ))
        })?;
    let done = crate::scheduler::backfill(ctx.app, &schedule.firing(), &instants, ctx.traces)?;
    Ok(json!({ "fired": done.fired, "already_fired": done.already_fired }).into())
}

/// `POST /cron/preview`: the next `count` instants an expression fires at after `from`, inside
/// the window when `starts_at` or `ends_at` is given.
pub fn preview(ctx: &mut Ctx<'_>, req: &Request) -> ApiResult<Data> {
    let body = req.json()?;
    let cron_expr = body.required_str("cron_expr")?;
    let timezone = body.str("timezone")?.unwrap_or_else(|| "UTC".into());
    let count = body.int("count")?.unwrap_or(5);
    check_range("count", count, 1..=100)?;
    let from = match body.get("from") {
        None | Some(Value::Null) => from_ms(ctx.now_ms),
        Some(value) => instant("from", value)?,
    };
    let mut window = Window::default();
    apply_window(&body, &mut window)?;
    let cron = parse_cron(&cron_expr, &timezone)?;
    body.finish()?;
    let mut upcoming = Vec::new();
    let mut next = next_in_window(&cron, window, from);
    while let Some(t) = next
        && upcoming.len() < usize::try_from(count).unwrap_or(5)
    {
        upcoming.push(t);
        next = next_in_window(&cron, window, t);
    }
    // An instant past 9999-12-31 cannot be written as RFC 3339, in UTC or on the zone's wall
    // clock (9999-12-31T10:00Z is +10000-01-01 at +14:00); both lists end before the first.
    let upcoming: Vec<_> = upcoming
        .into_iter()
        .take_while(|t| is_expressible(t) && t.with_timezone(&cron.timezone()).year() <= 9999)
        .collect();
    let next_runs: Vec<String> = upcoming
        .iter()
        .map(|t| rfc3339(t.timestamp_millis()))
        .collect();
    let next_runs_local: Vec<String> = upcoming.iter().map(|t| cron.local_rfc3339(*t)).collect();
    Ok(json!({ "next_runs": next_runs, "next_runs_local": next_runs_local }).into())
}
