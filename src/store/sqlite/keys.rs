//! [`KeyQueries`] on SQLite: the SQL of the `keys` table (records in `store::keys`).

#[allow(unused_imports)]
use crate::store::keys::*;
use crate::store::sqlite::SqliteTx;
use crate::store::{KeyQueries, StoreError};
use rusqlite::{OptionalExtension, params};

impl KeyQueries for SqliteTx<'_> {
    fn create_key(&mut self, app_id: &str, name: &str, now_ms: i64) -> Result<NewKey, StoreError> {
        let conn = self.0;
        let key = NewKey::generate(app_id);
        conn.execute(
            "INSERT INTO api_keys (key_id, secret, app_id, name, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![key.key_id, key.secret, key.app_id, name, now_ms],
        )?;
        Ok(key)
    }

    fn count_keys(&mut self) -> Result<i64, StoreError> {
        let conn = self.0;
        Ok(conn.query_row("SELECT count(*) FROM api_keys", [], |r| r.get(0))?)
    }

    fn list_keys(&mut self) -> Result<Vec<KeyInfo>, StoreError> {
        let conn = self.0;
        let mut stmt = conn.prepare_cached(
            "SELECT key_id, app_id, name, created_at, revoked_at IS NOT NULL FROM api_keys ORDER BY created_at, key_id",
        )?;
        Ok(stmt
            .query_map([], |r| {
                Ok(KeyInfo {
                    key_id: r.get(0)?,
                    app_id: r.get(1)?,
                    name: r.get(2)?,
                    created_at: crate::clock::rfc3339(r.get(3)?),
                    revoked: r.get(4)?,
                })
            })?
            .collect::<Result<_, _>>()?)
    }

    fn revoke_key(&mut self, key_id: &str, now_ms: i64) -> Result<bool, StoreError> {
        let conn = self.0;
        let changed = conn.execute(
            "UPDATE api_keys SET revoked_at = ?2 WHERE key_id = ?1 AND revoked_at IS NULL",
            params![key_id, now_ms],
        )?;
        Ok(changed == 1)
    }

    fn lookup_key(&mut self, key_id: &str) -> Result<Option<(String, String)>, StoreError> {
        let conn = self.0;
        Ok(conn
            .prepare_cached(
                "SELECT secret, app_id FROM api_keys WHERE key_id = ?1 AND revoked_at IS NULL",
            )?
            .query_row([key_id], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?)
    }
}
