//! The `api_keys` table on PostgreSQL ([`KeyQueries`] on a [`PgTx`]).

use crate::store::endpoints::fresh_generation;
use crate::store::keys::{
    KEY_COLUMNS, KEY_GENERATION, Key, KeyAuth, LAST_USED_EVERY_MS, NEW_KEY_GENERATION, NewKey,
    Scope,
};
use crate::store::postgres::PgTx;
use crate::store::{KeyQueries, Page, StoreError};
use postgres::{Error, GenericClient, Row};

fn from_row(r: &Row) -> Result<Key, Error> {
    Ok(Key::from_columns(
        r.try_get(0)?,
        r.try_get(1)?,
        r.try_get(2)?,
        r.try_get(3)?,
        r.try_get(4)?,
        r.try_get(5)?,
        r.try_get(6)?,
        r.try_get(7)?,
    ))
}

impl<C: GenericClient> KeyQueries for PgTx<'_, C> {
    fn create_scoped_key(
        &mut self,
        app_id: &str,
        name: &str,
        scope: Scope,
        expires_at: Option<i64>,
        now_ms: i64,
    ) -> Result<NewKey, StoreError> {
        let c = &mut *self.c;
        let key = NewKey::generate(app_id);
        c.execute(
            "INSERT INTO api_keys (key_id, secret, app_id, name, created_at, scope, expires_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
            &[
                &key.key_id,
                &key.secret,
                &key.app_id,
                &name,
                &now_ms,
                &scope.as_str(),
                &expires_at,
            ],
        )?;
        c.execute(NEW_KEY_GENERATION, &[&fresh_generation()])?;
        Ok(key)
    }

    fn count_keys(&mut self) -> Result<i64, StoreError> {
        let c = &mut *self.c;
        Ok(c.query_one("SELECT count(*) FROM api_keys", &[])?
            .try_get(0)?)
    }

    /// Oldest first; `COLLATE "C"` orders ties by bytes, as SQLite does, whatever the database's
    /// collation.
    fn list_keys(&mut self) -> Result<Vec<Key>, StoreError> {
        let c = &mut *self.c;
        Ok(c.query(
            &format!(
                "SELECT {KEY_COLUMNS} FROM api_keys ORDER BY created_at, key_id COLLATE \"C\""
            ),
            &[],
        )?
        .iter()
        .map(from_row)
        .collect::<Result<_, _>>()?)
    }

    fn list_app_keys(&mut self, app_id: &str, page: Page) -> Result<(i64, Vec<Key>), StoreError> {
        let c = &mut *self.c;
        let total: i64 = c
            .query_one(
                "SELECT count(*) FROM api_keys WHERE app_id = $1",
                &[&app_id],
            )?
            .try_get(0)?;
        let items = c
            .query(
                &format!(
                    "SELECT {KEY_COLUMNS} FROM api_keys WHERE app_id = $1
                     ORDER BY created_at DESC, key_id COLLATE \"C\" DESC LIMIT $2 OFFSET $3"
                ),
                &[&app_id, &page.limit(), &page.offset()],
            )?
            .iter()
            .map(from_row)
            .collect::<Result<_, _>>()?;
        Ok((total, items))
    }

    fn get_key(&mut self, app_id: &str, key_id: &str) -> Result<Option<Key>, StoreError> {
        let c = &mut *self.c;
        Ok(c.query_opt(
            &format!("SELECT {KEY_COLUMNS} FROM api_keys WHERE app_id = $1 AND key_id = $2"),
            &[&app_id, &key_id],
        )?
        .map(|r| from_row(&r))
        .transpose()?)
    }

    /// Marks a key revoked; false when no live key has that id. The key generation moves in the
    /// same transaction, and every node reads it in each request's own transaction, so the
    /// revocation holds on all of them from the commit on.
    fn revoke_key(&mut self, key_id: &str, now_ms: i64) -> Result<bool, StoreError> {
        let c = &mut *self.c;
        let changed = c.execute(
            "UPDATE api_keys SET revoked_at = $2 WHERE key_id = $1 AND revoked_at IS NULL",
            &[&key_id, &now_ms],
        )?;
        if changed == 1 {
            c.execute(NEW_KEY_GENERATION, &[&fresh_generation()])?;
        }
        Ok(changed == 1)
    }

    /// A live (not revoked) key: read when a node does not hold it in memory yet, or when the
    /// key generation moved since it did (`auth::KeyCache`).
    fn lookup_key(&mut self, key_id: &str) -> Result<Option<KeyAuth>, StoreError> {
        let c = &mut *self.c;
        Ok(c.query_opt(
            "SELECT secret, app_id, scope, expires_at, last_used_at FROM api_keys
             WHERE key_id = $1 AND revoked_at IS NULL",
            &[&key_id],
        )?
        .map(|r| {
            Ok::<_, Error>(KeyAuth {
                secret: r.try_get(0)?,
                app_id: r.try_get(1)?,
                scope: r.try_get(2)?,
                expires_at: r.try_get(3)?,
                last_used_at: r.try_get(4)?,
            })
        })
        .transpose()?)
    }

    fn touch_key(&mut self, key_id: &str, now_ms: i64) -> Result<(), StoreError> {
        let c = &mut *self.c;
        c.execute(
            "UPDATE api_keys SET last_used_at = $2
             WHERE key_id = $1 AND (last_used_at IS NULL OR last_used_at <= $3)",
            &[&key_id, &now_ms, &(now_ms - LAST_USED_EVERY_MS)],
        )?;
        Ok(())
    }

    fn key_generation(&mut self) -> Result<i64, StoreError> {
        let c = &mut *self.c;
        Ok(c.query_one(KEY_GENERATION, &[])?.try_get(0)?)
    }
}
