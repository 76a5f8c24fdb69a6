//! `/v1/keys`: API keys managed through the API by `admin` keys of the same app (docs/API.md,
//! "Keys"; docs/design.md §17). A secret is shown once, in the reply that creates its key.

use super::input::{check_name, page_object, unknown_message};
use super::tasks::body_instant;
use super::{Ctx, Data, Request, to_data};
use crate::error::{ApiError, ApiResult};
use crate::store::keys::{Key, Scope};

/// A scope named in a request: 40001 with the nearest scope for a typo.
fn parse_scope(text: &str) -> ApiResult<Scope> {
    Scope::parse(text).ok_or_else(|| {
        let names = Scope::ALL.map(|s| s.as_str());
        ApiError::validation(format!(
            "scope: {} (one of {})",
            unknown_message("scope", text, names.into_iter()),
            names.join(", ")
        ))
    })
}

fn load(ctx: &Ctx<'_>, key_id: &str) -> ApiResult<Key> {
    ctx.store
        .read(|tx| tx.get_key(ctx.app_id, key_id))?
        .ok_or_else(|| ApiError::not_found(format!("key {key_id} not found")))
}

pub fn create(ctx: &mut Ctx<'_>, req: &Request) -> ApiResult<Data> {
    let body = req.json()?;
    let name = body.required_str("name")?;
    check_name("name", &name)?;
    let scope = match body.str("scope")? {
        Some(text) => parse_scope(&text)?,
        None => Scope::Admin,
    };
    let expires_at = body_instant(&body, "expires_at")?;
    if let Some(t) = expires_at.filter(|t| *t <= ctx.now_ms) {
        return Err(ApiError::validation(format!(
            "expires_at: {} is not in the future (now is {})",
            crate::clock::rfc3339(t),
            crate::clock::rfc3339(ctx.now_ms)
        )));
    }
    let shown = Key {
        id: String::new(),
        app_id: ctx.app_id.to_string(),
        name,
        scope,
        created_at: ctx.now_ms,
        expires_at,
        last_used_at: None,
        revoked_at: None,
    };
    body.finish_for(&shown)?;
    let (app_id, now_ms) = (ctx.app_id, ctx.now_ms);
    let (new, key) = ctx.store.write(|tx| {
        let new = tx.create_scoped_key(app_id, &shown.name, scope, expires_at, now_ms)?;
        let key = tx.get_key(app_id, &new.key_id)?;
        Ok::<_, ApiError>((new, key))
    })?;
    let key = key.ok_or_else(|| ApiError::internal("a created key could not be read back"))?;
    /// The key as `GET /keys/{key_id}` shows it, and its secret, this once.
    #[derive(serde::Serialize)]
    struct Created<'a> {
        #[serde(flatten)]
        key: &'a crate::store::keys::Key,
        secret: &'a str,
    }
    to_data(&Created {
        key: &key,
        secret: &new.secret,
    })
}

pub fn list(ctx: &mut Ctx<'_>, req: &Request) -> ApiResult<Data> {
    let page = req.query.page()?;
    let (total, items) = ctx.store.read(|tx| tx.list_app_keys(ctx.app_id, page))?;
    page_object(page, total, items)
}

pub fn get(ctx: &mut Ctx<'_>, req: &Request) -> ApiResult<Data> {
    to_data(&load(ctx, req.segment())?)
}

/// Revokes a key of the caller's app: from the commit on, every node refuses it (authentication
/// reads the key's row on every request). A key cannot revoke itself (409), so an admin cannot
/// lock itself out by accident; a key already revoked is 409 too.
pub fn revoke(ctx: &mut Ctx<'_>, req: &Request) -> ApiResult<Data> {
    req.no_body()?;
    let key_id = req.segment();
    if key_id == ctx.key_id {
        return Err(ApiError::conflict(format!(
            "key {key_id} is the key signing this request and cannot revoke itself; revoke it with another admin key"
        )));
    }
    let (app_id, now_ms) = (ctx.app_id, ctx.now_ms);
    let revoked = ctx.store.write(|tx| {
        let Some(key) = tx.get_key(app_id, key_id)? else {
            return Err(ApiError::not_found(format!("key {key_id} not found")));
        };
        if let Some(at) = key.revoked_at {
            return Err(ApiError::conflict(format!(
                "key {key_id} was already revoked at {}",
                crate::clock::rfc3339(at)
            )));
        }
        Ok(tx.revoke_key(key_id, now_ms)?)
    })?;
    if !revoked {
        return Err(ApiError::conflict(format!(
            "key {key_id} was already revoked"
        )));
    }
    Ok(serde_json::json!({ "id": key_id, "deleted": true }).into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_scope_suggests_the_nearest() {
        let e = parse_scope("reed").unwrap_err();
        assert_eq!(e.code, 40001);
        assert_eq!(
            e.message,
            r#"scope: unknown scope "reed"; did you mean "read"? (one of admin, write, read)"#
        );
        assert_eq!(parse_scope("write").unwrap(), Scope::Write);
    }
}
