//! The `api_keys` table: one key per client, bound to one app; secrets never leave `create`.
//! The record types live here; the SQLite SQL is in `store::sqlite::keys`.

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
