//! `/v1/retries/policies`: attempt counts and back-off settings endpoints can attach.

use super::input::{Body, check_name, check_range, page_object};
use super::{Ctx, Data, Request, missing, to_data};
use crate::error::{ApiError, ApiResult};
use crate::retry::{Backoff, Jitter};
use crate::store::Word;
use crate::store::policies::{Policy, PolicyStatus};

fn parse_backoff(text: &str) -> ApiResult<Backoff> {
    Backoff::from_word(text).ok_or_else(|| {
        ApiError::validation(format!(
            "backoff_type: '{text}' is not one of fixed, exponential, linear"
        ))
    })
}

fn parse_jitter(text: &str) -> ApiResult<Jitter> {
    Jitter::from_word(text)
        .ok_or_else(|| ApiError::validation(format!("jitter: '{text}' is not one of none, full")))
}

/// Range checks over the whole (created or patched) policy.
fn check(policy: &Policy) -> ApiResult<()> {
    check_name("name", &policy.name)?;
    check_range("max_attempts", policy.max_attempts, 1..=100)?;
    check_range("initial_delay_sec", policy.initial_delay_sec, 0..=86_400)?;
    if policy.max_delay_sec < policy.initial_delay_sec {
        return Err(ApiError::validation(
            "max_delay_sec: must be at least initial_delay_sec",
        ));
    }
    check_range("max_delay_sec", policy.max_delay_sec, 0..=604_800)?;
    match policy.max_age_sec {
        Some(age) if age < 1 => Err(ApiError::validation(format!(
            "max_age_sec: must be at least 1 (seconds), or null for no limit; got {age}"
        ))),
        _ => Ok(()),
    }
}

fn load(ctx: &Ctx<'_>, id: i64) -> ApiResult<Policy> {
    ctx.store
        .read(|tx| tx.get_policy(ctx.app_id, id))?
        .ok_or_else(|| missing("retry policy", id))
}

pub fn create(ctx: &mut Ctx<'_>, req: &Request) -> ApiResult<Data> {
    let body = req.json()?;
    let name = body.required_str("name")?;
    let max_attempts = body.required_int("max_attempts")?;
    let backoff_type = parse_backoff(&body.required_str("backoff_type")?)?;
    let initial_delay_sec = body.int("initial_delay_sec")?.unwrap_or(60);
    check_range("initial_delay_sec", initial_delay_sec, 0..=86_400)?;
    let max_delay_given = body.int("max_delay_sec")?;
    if max_delay_given.is_none() && initial_delay_sec > 3600 {
        return Err(ApiError::validation(format!(
            "max_delay_sec: the default 3600 is below initial_delay_sec {initial_delay_sec}; send a max_delay_sec of at least {initial_delay_sec}"
        )));
    }
    let max_delay_sec = max_delay_given.unwrap_or(3600);
    let max_age_sec = body.int("max_age_sec")?;
    let jitter = match body.str("jitter")? {
        Some(text) => parse_jitter(&text)?,
        None => Jitter::Off,
    };
    let policy = Policy {
        id: 0,
        app_id: ctx.app_id.to_string(),
        name,
        max_attempts,
        backoff_type,
        initial_delay_sec,
        max_delay_sec,
        max_age_sec,
        jitter,
        status: PolicyStatus::Active,
        created_at: ctx.now_ms,
        updated_at: ctx.now_ms,
    };
    check(&policy)?;
    body.finish_for(&policy)?;
    to_data(&ctx.store.write(|tx| tx.insert_policy(&policy))?)
}

pub fn list(ctx: &mut Ctx<'_>, req: &Request) -> ApiResult<Data> {
    let page = req.query.page()?;
    let (total, items) = ctx.store.read(|tx| tx.list_policies(ctx.app_id, page))?;
    page_object(page, total, items)
}

pub fn get(ctx: &mut Ctx<'_>, req: &Request) -> ApiResult<Data> {
    to_data(&load(ctx, req.id())?)
}

fn apply_patch(policy: &mut Policy, body: &Body) -> ApiResult<()> {
    if let Some(name) = body.update_str("name")? {
        policy.name = name;
    }
    if let Some(max_attempts) = body.update_int("max_attempts")? {
        policy.max_attempts = max_attempts;
    }
    if let Some(backoff) = body.update_str("backoff_type")? {
        policy.backoff_type = parse_backoff(&backoff)?;
    }
    if let Some(initial) = body.update_int("initial_delay_sec")? {
        policy.initial_delay_sec = initial;
    }
    if let Some(max) = body.update_int("max_delay_sec")? {
        policy.max_delay_sec = max;
    }
    body.patch_int("max_age_sec")?
        .apply_nullable(&mut policy.max_age_sec);
    if let Some(jitter) = body.update_str("jitter")? {
        policy.jitter = parse_jitter(&jitter)?;
    }
    check(policy)
}

pub fn update(ctx: &mut Ctx<'_>, req: &Request) -> ApiResult<Data> {
    let body = req.json()?;
    let mut policy = load(ctx, req.id())?;
    let before = policy.clone();
    apply_patch(&mut policy, &body)?;
    body.finish_for(&before)?;
    if policy != before {
        policy.updated_at = ctx.now_ms;
        ctx.store.write(|tx| tx.update_policy(&policy))?;
    }
    to_data(&policy)
}

/// Deletes a policy no endpoint uses (409 otherwise).
pub fn delete(ctx: &mut Ctx<'_>, req: &Request) -> ApiResult<Data> {
    req.no_body()?;
    let id = req.id();
    let app_id = ctx.app_id;
    ctx.store.write(|tx| {
        if tx.get_policy(app_id, id)?.is_none() {
            return Err(missing("retry policy", id));
        }
        let users = tx.count_endpoints_using_policy(id)?;
        if users > 0 {
            return Err(ApiError::conflict(format!(
                "retry policy {id} is used by {users} endpoint(s); detach it (retry_policy_id: null) first"
            )));
        }
        tx.delete_policy(app_id, id)?;
        Ok(())
    })?;
    Ok(serde_json::json!({ "id": id, "deleted": true }).into())
}
