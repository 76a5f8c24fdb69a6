//! The `api_keys` table on PostgreSQL ([`KeyQueries`] on a [`PgTx`]).

use crate::store::keys::{KeyInfo, NewKey};
use crate::store::postgres::PgTx;
use crate::store::{KeyQueries, StoreError};
use postgres::{Error, GenericClient};

impl<C: GenericClient> KeyQueries for PgTx<'_, C> {
    fn create_key(&mut self, app_id: &str, name: &str, now_ms: i64) -> Result<NewKey, StoreError> {
        let c = &mut *self.c;
        let key = NewKey::generate(app_id);
        c.execute(
            "INSERT INTO api_keys (key_id, secret, app_id, name, created_at) VALUES ($1, $2, $3, $4, $5)",
            &[&key.key_id, &key.secret, &key.app_id, &name, &now_ms],
        )?;
        Ok(key)
    }

    fn count_keys(&mut self) -> Result<i64, StoreError> {
        let c = &mut *self.c;
        Ok(c.query_one("SELECT count(*) FROM api_keys", &[])?
            .try_get(0)?)
    }

    /// Oldest first; `COLLATE "C"` orders ties by bytes, as SQLite does, whatever the database's
    /// collation.
    fn list_keys(&mut self) -> Result<Vec<KeyInfo>, StoreError> {
        let c = &mut *self.c;
        Ok(c.query(
            "SELECT key_id, app_id, name, created_at, revoked_at IS NOT NULL FROM api_keys
             ORDER BY created_at, key_id COLLATE \"C\"",
            &[],
        )?
        .iter()
        .map(|r| {
            Ok::<_, Error>(KeyInfo {
                key_id: r.try_get(0)?,
                app_id: r.try_get(1)?,
                name: r.try_get(2)?,
                created_at: crate::clock::rfc3339(r.try_get(3)?),
                revoked: r.try_get(4)?,
            })
        })
        .collect::<Result<_, _>>()?)
    }

    /// Marks a key revoked; false when no live key has that id. Every node reads the row on each
    /// request ([`lookup`]), so the revocation holds on all of them from the commit on.
    fn revoke_key(&mut self, key_id: &str, now_ms: i64) -> Result<bool, StoreError> {
        let c = &mut *self.c;
        let changed = c.execute(
            "UPDATE api_keys SET revoked_at = $2 WHERE key_id = $1 AND revoked_at IS NULL",
            &[&key_id, &now_ms],
        )?;
        Ok(changed == 1)
    }

    /// The secret and app of a live (not revoked) key. Runs on every authenticated request: a
    /// prepared-statement cache per pooled connection would save its parse round trip later
    /// (`GenericClient` has none; no key cache may replace the read, see docs/dev/storage.md).
    fn lookup_key(&mut self, key_id: &str) -> Result<Option<(String, String)>, StoreError> {
        let c = &mut *self.c;
        Ok(c.query_opt(
            "SELECT secret, app_id FROM api_keys WHERE key_id = $1 AND revoked_at IS NULL",
            &[&key_id],
        )?
        .map(|r| Ok::<_, Error>((r.try_get(0)?, r.try_get(1)?)))
        .transpose()?)
    }
}
