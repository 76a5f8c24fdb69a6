//! PostgreSQL storage, the groundwork of docs/design.md §16: a pool of blocking connections
//! (`postgres` + `r2d2_postgres`, so the blocking delivery model stays) and the versioned
//! schema, and one file per table implementing that table's query trait
//! (`store::endpoints::EndpointQueries`, …) on [`PgTx`], laid out like the SQLite store's.
//! `docs/dev/storage.md` describes the interface both implement.
//!
//! The `postgres` client runs its own small runtime and blocks: call it from plain threads or
//! `spawn_blocking`, never directly inside an async task.

pub mod attempts;
mod conn;
mod connect;
pub mod copy;
pub mod endpoints;
pub mod events;
mod group;
pub mod health;
pub mod keys;
pub mod list;
pub mod listen;
mod migrate;
pub mod policies;
pub mod replay;
pub mod retention;
pub mod schedules;
mod store;
pub mod tasks;
mod tls;
mod url;

pub use group::GroupCounts;
pub use migrate::{SCHEMA_VERSION, upgrade_with_extra};
pub use store::{PgStore, PgTx};
pub use tls::{RootCert, SslMode, TlsSettings};
pub use url::{PgUrl, is_url, redact};

use crate::store::Word;
use crate::store::json::{JsonColumn, Stored};
pub use conn::{Backing, Conn, PgConn, Sql, Statements};
use connect::connect_with;
pub use connect::{HEALTH_WAIT, Link, Manager, PgPool, PgSettings, checkout};
use postgres::types::{FromSql, IsNull, ToSql, Type};
use std::error::Error;
use std::sync::Arc;

/// Connects once to `url` (a `postgres://` / `postgresql://` URL), refuses a database of another
/// program or of a newer webhookd untouched, applies pending schema upgrades, and returns a pool
/// of up to `size` connections with no statement time-out (`webhookd migrate`'s long copy).
/// Error messages show the URL with its password hidden.
pub fn open(url: &str, size: u32) -> anyhow::Result<PgPool> {
    let settings = PgSettings {
        statement_timeout: None,
        ..PgSettings::default()
    };
    Ok(open_with(url, size, &settings)?.0)
}

/// [`open`] with the connection settings of the command line; also returns the pool's record
/// of failed connection attempts.
pub fn open_with(
    url: &str,
    size: u32,
    settings: &PgSettings,
) -> anyhow::Result<(PgPool, Arc<Link>)> {
    let url = PgUrl::parse(url)?;
    let mut client = connect(&url)?;
    migrate::upgrade(&mut client, &url.to_string())?;
    drop(client);
    connect::pool(&url, size, settings)
}

/// One connection outside the pool (start-up work, tests). The driver's error never holds the
/// password; the context names the redacted URL.
pub fn connect(url: &PgUrl) -> anyhow::Result<postgres::Client> {
    connect_with(url, url.config().clone())
}

/// Stored words (`store::word`) as PostgreSQL text: a word outside the set is a conversion
/// error of the row (a `StoreError`), never a default.
macro_rules! stored_words {
    ($($word:ty),+) => {$(
        impl<'a> FromSql<'a> for $word {
            fn from_sql(ty: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn Error + Sync + Send>> {
                Ok(<$word as Word>::from_stored(<&str as FromSql>::from_sql(ty, raw)?)?)
            }

            fn accepts(ty: &Type) -> bool {
                <&str as FromSql>::accepts(ty)
            }
        }

        impl ToSql for $word {
            fn to_sql(
                &self,
                ty: &Type,
                out: &mut bytes::BytesMut,
            ) -> Result<IsNull, Box<dyn Error + Sync + Send>> {
                Word::word(self).to_sql(ty, out)
            }

            fn accepts(ty: &Type) -> bool {
                <&str as ToSql>::accepts(ty)
            }

            postgres::types::to_sql_checked!();
        }
    )+};
}

crate::store::word::stored_word_types!(stored_words);

/// Stored JSON (`store::json`) from PostgreSQL text: text that does not parse is a conversion
/// error of the row (a `StoreError`), never a default.
impl<'a, C: JsonColumn> FromSql<'a> for Stored<C> {
    fn from_sql(ty: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn Error + Sync + Send>> {
        Ok(Stored::parse(<&str as FromSql>::from_sql(ty, raw)?)?)
    }

    fn accepts(ty: &Type) -> bool {
        <&str as FromSql>::accepts(ty)
    }
}
