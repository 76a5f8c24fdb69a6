//! PostgreSQL storage, the groundwork of contract §16: a pool of blocking connections
//! (`postgres` + `r2d2_postgres`, so the blocking delivery model stays) and the versioned
//! schema, and one file per table implementing that table's query trait
//! (`store::endpoints::EndpointQueries`, …) on [`PgTx`], laid out like the SQLite store's.
//! `docs/dev/storage.md` describes the interface both implement.
//!
//! The `postgres` client runs its own small runtime and blocks: call it from plain threads or
//! `spawn_blocking`, never directly inside an async task.

pub mod attempts;
pub mod copy;
pub mod endpoints;
pub mod events;
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
mod url;

pub use migrate::{SCHEMA_VERSION, upgrade_with_extra};
pub use store::{PgStore, PgTx};
pub use url::{PgUrl, is_url, redact};

use crate::retry::Backoff;
use crate::store::Word;
use crate::store::schedules::{Catchup, Overlap};
use crate::store::tasks::{TaskKind, TaskStatus};
use anyhow::Context;
use postgres::NoTls;
use postgres::types::{FromSql, IsNull, ToSql, Type};
use r2d2_postgres::PostgresConnectionManager;
use std::error::Error;
use std::time::Duration;

/// The shared PostgreSQL connection pool.
pub type PgPool = r2d2::Pool<Manager>;
/// The pool's connection manager (no TLS yet: `docs/dev/storage.md`).
pub type Manager = PostgresConnectionManager<NoTls>;

/// Connects once to `url` (a `postgres://` / `postgresql://` URL), refuses a database of another
/// program or of a newer webhookd untouched, applies pending schema upgrades, and returns a pool
/// of up to `size` connections. Error messages show the URL with its password hidden.
pub fn open(url: &str, size: u32) -> anyhow::Result<PgPool> {
    let url = PgUrl::parse(url)?;
    let mut client = connect(&url)?;
    migrate::upgrade(&mut client, &url.to_string())?;
    drop(client);
    let manager = PostgresConnectionManager::new(url.config().clone(), NoTls);
    r2d2::Pool::builder()
        .max_size(size)
        .min_idle(Some(1))
        .connection_timeout(Duration::from_secs(30))
        .build(manager)
        .with_context(|| format!("cannot build the connection pool for {url}"))
}

/// One connection outside the pool (start-up work, tests). The driver's error never holds the
/// password; the context names the redacted URL.
pub fn connect(url: &PgUrl) -> anyhow::Result<postgres::Client> {
    connect_with(url, url.config().clone())
}

/// [`connect`] with adjusted settings (e.g. an `application_name` shown in `pg_stat_activity`).
fn connect_with(url: &PgUrl, mut config: postgres::Config) -> anyhow::Result<postgres::Client> {
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(Duration::from_secs(10));
    }
    config
        .connect(NoTls)
        .with_context(|| format!("cannot connect to PostgreSQL at {url}"))
}

/// Stored words (`store::word`) as PostgreSQL text: a word outside the set is a conversion
/// error of the row (a `StoreError`), never a default.
macro_rules! stored_words {
    ($($word:ty),+) => {$(
        impl<'a> FromSql<'a> for $word {
            fn from_sql(ty: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn Error + Sync + Send>> {
                let text = <&str as FromSql>::from_sql(ty, raw)?;
                <$word as Word>::from_word(text)
                    .ok_or_else(|| format!("not a {}: {text:?}", <$word as Word>::WHAT).into())
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

stored_words!(Backoff, Catchup, Overlap, TaskKind, TaskStatus);
