//! The `api_keys` table: one key per client, bound to one app, with a scope (docs/design.md §17);
//! secrets never leave `create`. The record types and [`KeyQueries`] live here; each backend
//! implements the queries in its own `keys.rs` (`store::sqlite::keys`, `store::postgres::keys`).

use crate::clock::{ser_ms, ser_opt_ms};
use crate::store::{Page, StoreError};
use serde::Serialize;

crate::store::word::words!(
    /// What a key may do in its app (docs/API.md, "Keys"). Ordered: each scope allows everything
    /// the one before it does.
    #[derive(PartialOrd, Ord)]
    Scope, "key scope" {
        /// `GET` routes and `POST /cron/preview`.
        Read = "read",
        /// Every route but the keys routes.
        Write = "write",
        /// Everything in its app, keys included.
        Admin = "admin",
    }
);

impl Scope {
    /// Every scope, widest first (the order messages list them in).
    pub const ALL: [Scope; 3] = [Scope::Admin, Scope::Write, Scope::Read];

    /// The scope spelled `text` (exact, lowercase), if any.
    pub fn parse(text: &str) -> Option<Scope> {
        <Scope as crate::store::word::Word>::from_word(text)
    }
}

/// A key record as the API and `keys list` show it: never its secret.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Key {
    /// The key id, `whk_…`.
    pub id: String,
    pub app_id: String,
    pub name: String,
    pub scope: Scope,
    #[serde(serialize_with = "ser_ms")]
    pub created_at: i64,
    #[serde(serialize_with = "ser_opt_ms")]
    pub expires_at: Option<i64>,
    #[serde(serialize_with = "ser_opt_ms")]
    pub last_used_at: Option<i64>,
    #[serde(serialize_with = "ser_opt_ms")]
    pub revoked_at: Option<i64>,
}

/// The columns [`Key::from_columns`] reads, in its order.
pub(crate) const KEY_COLUMNS: &str =
    "key_id, app_id, name, scope, created_at, expires_at, last_used_at, revoked_at";

impl Key {
    /// A key from the values of [`KEY_COLUMNS`] (each backend reads its row into these).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn from_columns(
        id: String,
        app_id: String,
        name: String,
        scope: Scope,
        created_at: i64,
        expires_at: Option<i64>,
        last_used_at: Option<i64>,
        revoked_at: Option<i64>,
    ) -> Key {
        Key {
            id,
            app_id,
            name,
            scope,
            created_at,
            expires_at,
            last_used_at,
            revoked_at,
        }
    }
}

/// What authentication needs of a live (not revoked) key.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyAuth {
    pub secret: String,
    pub app_id: String,
    pub scope: Scope,
    pub expires_at: Option<i64>,
    pub last_used_at: Option<i64>,
}

/// `last_used_at` is written at most this often per key (ms): authentication reads it with the
/// key and writes only when it is older, so a busy key costs one write a minute, not one a request.
pub const LAST_USED_EVERY_MS: i64 = 60_000;

/// Whether a key last used at `last_used_at` is due to have it written again at `now_ms`.
pub fn last_used_due(last_used_at: Option<i64>, now_ms: i64) -> bool {
    last_used_at.is_none_or(|t| now_ms - t >= LAST_USED_EVERY_MS)
}

/// A newly created key, the only time its secret is shown.
#[derive(Debug, Clone, Serialize)]
pub struct NewKey {
    pub key_id: String,
    pub secret: String,
    pub app_id: String,
}

impl NewKey {
    /// A fresh key id and secret for `app_id` (not stored yet).
    pub fn generate(app_id: &str) -> NewKey {
        NewKey {
            key_id: format!("whk_{}", random_hex(8)),
            secret: format!("whs_{}", random_hex(24)),
            app_id: app_id.to_string(),
        }
    }
}

fn random_hex(bytes: usize) -> String {
    (0..bytes)
        .map(|_| format!("{:02x}", rand::random::<u8>()))
        .collect()
}

/// The queries on API keys, one body per backend (`store::sqlite::keys`,
/// `store::postgres::keys`); part of [`crate::store::Tx`].
pub trait KeyQueries {
    /// Creates a key for `app_id` with `scope`, expiring at `expires_at` (ms) when given.
    fn create_scoped_key(
        &mut self,
        app_id: &str,
        name: &str,
        scope: Scope,
        expires_at: Option<i64>,
        now_ms: i64,
    ) -> Result<NewKey, StoreError>;
    /// Creates an `admin` key that does not expire.
    fn create_key(&mut self, app_id: &str, name: &str, now_ms: i64) -> Result<NewKey, StoreError> {
        self.create_scoped_key(app_id, name, Scope::Admin, None, now_ms)
    }
    /// How many keys exist, revoked ones included (first start makes one when none).
    fn count_keys(&mut self) -> Result<i64, StoreError>;
    /// Every key of every app, oldest first (`keys list`).
    fn list_keys(&mut self) -> Result<Vec<Key>, StoreError>;
    /// One page of an app's keys, revoked ones included, newest first, and how many it has.
    fn list_app_keys(&mut self, app_id: &str, page: Page) -> Result<(i64, Vec<Key>), StoreError>;
    /// A key of `app_id`, revoked or not.
    fn get_key(&mut self, app_id: &str, key_id: &str) -> Result<Option<Key>, StoreError>;
    /// Marks a key revoked; false when no live key has that id.
    fn revoke_key(&mut self, key_id: &str, now_ms: i64) -> Result<bool, StoreError>;
    /// A live (not revoked) key, as authentication needs it.
    fn lookup_key(&mut self, key_id: &str) -> Result<Option<KeyAuth>, StoreError>;
    /// Sets `last_used_at` to `now_ms` unless it was set less than [`LAST_USED_EVERY_MS`] ago
    /// (checked in the statement too, so nodes racing on one key write once).
    fn touch_key(&mut self, key_id: &str, now_ms: i64) -> Result<(), StoreError>;
    /// The generation of the keys: a number that [`KeyQueries::create_scoped_key`] and
    /// [`KeyQueries::revoke_key`] set to a new random value in their own transaction, so a key
    /// read at one generation is known to be unchanged while the number stays
    /// (`auth::KeyCache`). Compared for equality only: it has no order.
    fn key_generation(&mut self) -> Result<i64, StoreError>;
}

/// The statement that moves [`KeyQueries::key_generation`] to a new value, its one parameter
/// (`store::endpoints::fresh_generation`): the same SQL on both backends (SQLite reads `$1` as
/// a named parameter, the first and only one).
pub(crate) const NEW_KEY_GENERATION: &str =
    "INSERT INTO key_generation (id, generation) VALUES (1, $1)
     ON CONFLICT (id) DO UPDATE SET generation = excluded.generation";

/// The statement that reads [`KeyQueries::key_generation`].
/// No row yet is generation 0.
pub(crate) const KEY_GENERATION: &str =
    "SELECT coalesce((SELECT generation FROM key_generation WHERE id = 1), 0)";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_parse_and_order() {
        for s in Scope::ALL {
            assert_eq!(Scope::parse(s.as_str()), Some(s));
        }
        assert_eq!(Scope::parse("Admin"), None);
        assert!(Scope::Read < Scope::Write && Scope::Write < Scope::Admin);
    }

    #[test]
    fn last_used_is_due_once_a_minute() {
        assert!(last_used_due(None, 0));
        assert!(!last_used_due(Some(1_000), 60_999));
        assert!(last_used_due(Some(1_000), 61_000));
    }
}
