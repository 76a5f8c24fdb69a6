//! [`KeyQueries`] on SQLite: the SQL of the `keys` table (records in `store::keys`).

use crate::store::endpoints::fresh_generation;
use crate::store::keys::{
    KEY_COLUMNS, KEY_GENERATION, Key, KeyAuth, LAST_USED_EVERY_MS, NEW_KEY_GENERATION, NewKey,
    Scope,
};
use crate::store::sqlite::SqliteTx;
use crate::store::{KeyQueries, Page, StoreError};
use rusqlite::{OptionalExtension, Row, params};

fn from_row(r: &Row<'_>) -> rusqlite::Result<Key> {
    Ok(Key::from_columns(
        r.get(0)?,
        r.get(1)?,
        r.get(2)?,
        r.get(3)?,
        r.get(4)?,
        r.get(5)?,
        r.get(6)?,
        r.get(7)?,
    ))
}

impl KeyQueries for SqliteTx<'_> {
    fn create_scoped_key(
        &mut self,
        app_id: &str,
        name: &str,
        scope: Scope,
        expires_at: Option<i64>,
        now_ms: i64,
    ) -> Result<NewKey, StoreError> {
        let conn = self.0;
        let key = NewKey::generate(app_id);
        conn.execute(
            "INSERT INTO api_keys (key_id, secret, app_id, name, created_at, scope, expires_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![
                key.key_id,
                key.secret,
                key.app_id,
                name,
                now_ms,
                scope.as_str(),
                expires_at
            ],
        )?;
        conn.prepare_cached(NEW_KEY_GENERATION)?
            .execute([fresh_generation()])?;
        Ok(key)
    }

    fn count_keys(&mut self) -> Result<i64, StoreError> {
        let conn = self.0;
        Ok(conn.query_row("SELECT count(*) FROM api_keys", [], |r| r.get(0))?)
    }

    fn list_keys(&mut self) -> Result<Vec<Key>, StoreError> {
        let conn = self.0;
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT {KEY_COLUMNS} FROM api_keys ORDER BY created_at, key_id"
        ))?;
        Ok(stmt.query_map([], from_row)?.collect::<Result<_, _>>()?)
    }

    fn list_app_keys(&mut self, app_id: &str, page: Page) -> Result<(i64, Vec<Key>), StoreError> {
        let conn = self.0;
        let total = conn
            .prepare_cached("SELECT count(*) FROM api_keys WHERE app_id = ?1")?
            .query_row([app_id], |r| r.get(0))?;
        let items = conn
            .prepare_cached(&format!(
                "SELECT {KEY_COLUMNS} FROM api_keys WHERE app_id = ?1
                 ORDER BY created_at DESC, key_id DESC LIMIT ?2 + 0 OFFSET ?3 + 0"
            ))?
            .query_map(params![app_id, page.limit(), page.offset()], from_row)?
            .collect::<Result<_, _>>()?;
        Ok((total, items))
    }

    fn get_key(&mut self, app_id: &str, key_id: &str) -> Result<Option<Key>, StoreError> {
        let conn = self.0;
        Ok(conn
            .prepare_cached(&format!(
                "SELECT {KEY_COLUMNS} FROM api_keys WHERE app_id = ?1 AND key_id = ?2"
            ))?
            .query_row([app_id, key_id], from_row)
            .optional()?)
    }

    fn revoke_key(&mut self, key_id: &str, now_ms: i64) -> Result<bool, StoreError> {
        let conn = self.0;
        let changed = conn.execute(
            "UPDATE api_keys SET revoked_at = ?2 WHERE key_id = ?1 AND revoked_at IS NULL",
            params![key_id, now_ms],
        )?;
        if changed == 1 {
            conn.prepare_cached(NEW_KEY_GENERATION)?
                .execute([fresh_generation()])?;
        }
        Ok(changed == 1)
    }

    fn lookup_key(&mut self, key_id: &str) -> Result<Option<KeyAuth>, StoreError> {
        let conn = self.0;
        Ok(conn
            .prepare_cached(
                "SELECT secret, app_id, scope, expires_at, last_used_at FROM api_keys
                 WHERE key_id = ?1 AND revoked_at IS NULL",
            )?
            .query_row([key_id], |r| {
                Ok(KeyAuth {
                    secret: r.get(0)?,
                    app_id: r.get(1)?,
                    scope: r.get(2)?,
                    expires_at: r.get(3)?,
                    last_used_at: r.get(4)?,
                })
            })
            .optional()?)
    }

    fn touch_key(&mut self, key_id: &str, now_ms: i64) -> Result<(), StoreError> {
        let conn = self.0;
        conn.prepare_cached(
            "UPDATE api_keys SET last_used_at = ?2
             WHERE key_id = ?1 AND (last_used_at IS NULL OR last_used_at <= ?3)",
        )?
        .execute(params![key_id, now_ms, now_ms - LAST_USED_EVERY_MS])?;
        Ok(())
    }

    fn key_generation(&mut self) -> Result<i64, StoreError> {
        let conn = self.0;
        Ok(conn
            .prepare_cached(KEY_GENERATION)?
            .query_row([], |r| r.get(0))?)
    }
}
