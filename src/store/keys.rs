//! The `api_keys` table: one key per client, bound to one app; secrets never leave `create`.
//! The record types and [`KeyQueries`] live here; each backend implements the queries
//! in its own `keys.rs` (`store::sqlite::keys`, `store::postgres::keys`).

use crate::store::StoreError;
use serde::Serialize;

/// A key as `keys list` shows it (no secret).
#[derive(Debug, Clone, Serialize)]
pub struct KeyInfo {
    pub key_id: String,
    pub app_id: String,
    pub name: String,
    pub created_at: String,
    pub revoked: bool,
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
    /// Creates a key for `app_id` (a fresh id and secret, `NewKey::generate`).
    fn create_key(&mut self, app_id: &str, name: &str, now_ms: i64) -> Result<NewKey, StoreError>;
    /// How many keys exist, revoked ones included (first start makes one when none).
    fn count_keys(&mut self) -> Result<i64, StoreError>;
    /// Every key, oldest first, without secrets.
    fn list_keys(&mut self) -> Result<Vec<KeyInfo>, StoreError>;
    /// Marks a key revoked; false when no live key has that id.
    fn revoke_key(&mut self, key_id: &str, now_ms: i64) -> Result<bool, StoreError>;
    /// The secret and app of a live (not revoked) key.
    fn lookup_key(&mut self, key_id: &str) -> Result<Option<(String, String)>, StoreError>;
}
