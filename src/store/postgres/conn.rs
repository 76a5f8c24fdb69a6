//! A pooled PostgreSQL connection and the statements it has prepared (docs/dev/storage.md,
//! "PostgreSQL round trips").
//!
//! The `postgres` driver prepares a statement for every query given as text: a Parse/Describe
//! round trip before the Bind/Execute one, so every statement cost two. Each pooled connection
//! keeps the statements it prepared, by their SQL text, and runs them again by name: one round
//! trip per statement. Table files still write plain SQL (`c.query("SELECT …", &[…])`); [`Sql`]
//! is what `c` is, and it looks the text up.
//!
//! The pool also no longer asks the server whether a connection is alive each time it hands
//! one out (`SELECT` of nothing, one more round trip): a connection handed out within
//! [`TRUSTED_FOR`] of its last checkout is trusted, unless the pool's last connection attempt
//! failed (the database is known to be down). A connection that broke while idle answers its
//! first statement with "connection closed" (the request gets a 503, a delivery round is
//! retried) and the pool drops it.

use super::Link;
use super::tls::PgTls;
use postgres::error::SqlState;
use postgres::types::ToSql;
use postgres::{Error, GenericClient, Row, Statement, Transaction};
use r2d2_postgres::PostgresConnectionManager;
use std::collections::HashMap;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A connection handed out again within this of its last checkout is not tested: the pool
/// keeps busy connections busy, and one that idled longer (or any while the database is known
/// to be down) is tested with an empty query, as before.
pub const TRUSTED_FOR: Duration = Duration::from_secs(1);

/// Distinct statements one connection keeps prepared; past this it forgets them all and starts
/// over (the store's statements are a few hundred at most: list filters combine, the rest is
/// fixed text).
const MOST_STATEMENTS: usize = 512;

/// A pooled connection: the driver's client, its prepared statements, and when the pool last
/// handed it out. Derefs to the client for work outside the store's tables (migrations, tests).
pub struct PgConn {
    client: postgres::Client,
    statements: Statements,
    checked_out: Instant,
}

impl PgConn {
    /// The client and the statement cache, borrowed apart (a transaction holds the one while
    /// the store's queries use the other).
    pub fn split(&mut self) -> (&mut postgres::Client, &mut Statements) {
        (&mut self.client, &mut self.statements)
    }
}

impl Deref for PgConn {
    type Target = postgres::Client;

    fn deref(&self) -> &postgres::Client {
        &self.client
    }
}

impl DerefMut for PgConn {
    fn deref_mut(&mut self) -> &mut postgres::Client {
        &mut self.client
    }
}

/// The statements one connection has prepared, by SQL text. Disabled behind PgBouncer in
/// transaction mode (`--pg-poll-only`), where a named statement prepared on one server
/// connection may be run on another.
pub struct Statements {
    by_sql: HashMap<String, Statement>,
    enabled: bool,
}

impl Statements {
    fn new(enabled: bool) -> Self {
        Statements {
            by_sql: HashMap::new(),
            enabled,
        }
    }
}

/// The pool's connection manager: `r2d2_postgres`'s (TLS as the URL's `sslmode` says), with a
/// statement cache per connection and the checkout test skipped for busy connections.
pub struct Manager {
    inner: PostgresConnectionManager<PgTls>,
    link: Arc<Link>,
    cache_statements: bool,
}

impl std::fmt::Debug for Manager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Manager")
            .field("cache_statements", &self.cache_statements)
            .finish_non_exhaustive()
    }
}

impl Manager {
    pub fn new(
        inner: PostgresConnectionManager<PgTls>,
        link: Arc<Link>,
        cache_statements: bool,
    ) -> Self {
        Manager {
            inner,
            link,
            cache_statements,
        }
    }
}

impl r2d2::ManageConnection for Manager {
    type Connection = PgConn;
    type Error = Error;

    fn connect(&self) -> Result<PgConn, Error> {
        Ok(PgConn {
            client: self.inner.connect()?,
            statements: Statements::new(self.cache_statements),
            checked_out: Instant::now(),
        })
    }

    fn is_valid(&self, conn: &mut PgConn) -> Result<(), Error> {
        let idle = conn.checked_out.elapsed();
        conn.checked_out = Instant::now();
        if idle < TRUSTED_FOR && self.link.failure().is_none() {
            return Ok(());
        }
        self.inner.is_valid(&mut conn.client)
    }

    fn has_broken(&self, conn: &mut PgConn) -> bool {
        conn.client.is_closed()
    }
}

/// What [`Sql`] runs statements on: a borrowed client or transaction, or a transaction of its
/// own (`Sql::transaction`).
pub trait Backing {
    type Client: GenericClient;
    fn client(&mut self) -> &mut Self::Client;
}

impl<C: GenericClient> Backing for &mut C {
    type Client = C;
    fn client(&mut self) -> &mut C {
        self
    }
}

impl Backing for Transaction<'_> {
    type Client = Self;
    fn client(&mut self) -> &mut Self {
        self
    }
}

/// A client (or transaction) with its connection's statement cache: the driver's query calls,
/// each statement prepared once per connection. Without a cache (a client made outside the
/// pool, PgBouncer) each is prepared as it runs, as the driver does.
pub struct Sql<'s, B> {
    on: B,
    statements: Option<&'s mut Statements>,
}

type Params<'p> = [&'p (dyn ToSql + Sync)];

impl<'s, B: Backing> Sql<'s, B> {
    pub fn new(on: B, statements: Option<&'s mut Statements>) -> Self {
        let statements = statements.filter(|s| s.enabled);
        Sql { on, statements }
    }

    /// The prepared statement for `sql`, prepared now if this connection has not yet; `None`
    /// without a cache.
    fn prepared(&mut self, sql: &str) -> Result<Option<Statement>, Error> {
        let Some(cache) = self.statements.as_deref_mut() else {
            return Ok(None);
        };
        if let Some(statement) = cache.by_sql.get(sql) {
            return Ok(Some(statement.clone()));
        }
        let statement = self.on.client().prepare(sql)?;
        if cache.by_sql.len() >= MOST_STATEMENTS {
            cache.by_sql.clear();
        }
        cache.by_sql.insert(sql.to_owned(), statement.clone());
        Ok(Some(statement))
    }

    /// Runs `run` with the cached statement (or the text), and forgets the statement when the
    /// server refused it: a schema change since it was prepared ("cached plan must not change
    /// result type", a dropped table) makes the next use prepare it again.
    fn run<T>(
        &mut self,
        sql: &str,
        run: impl FnOnce(&mut B::Client, Option<&Statement>) -> Result<T, Error>,
    ) -> Result<T, Error> {
        let statement = self.prepared(sql)?;
        let result = run(self.on.client(), statement.as_ref());
        if result.as_ref().is_err_and(stale)
            && let Some(cache) = self.statements.as_deref_mut()
        {
            cache.by_sql.remove(sql);
        }
        result
    }

    pub fn query(&mut self, sql: &str, params: &Params<'_>) -> Result<Vec<Row>, Error> {
        self.run(sql, |c, s| match s {
            Some(s) => c.query(s, params),
            None => c.query(sql, params),
        })
    }

    pub fn query_one(&mut self, sql: &str, params: &Params<'_>) -> Result<Row, Error> {
        self.run(sql, |c, s| match s {
            Some(s) => c.query_one(s, params),
            None => c.query_one(sql, params),
        })
    }

    pub fn query_opt(&mut self, sql: &str, params: &Params<'_>) -> Result<Option<Row>, Error> {
        self.run(sql, |c, s| match s {
            Some(s) => c.query_opt(s, params),
            None => c.query_opt(sql, params),
        })
    }

    pub fn execute(&mut self, sql: &str, params: &Params<'_>) -> Result<u64, Error> {
        self.run(sql, |c, s| match s {
            Some(s) => c.execute(s, params),
            None => c.execute(sql, params),
        })
    }

    /// A transaction (a savepoint inside one) sharing this connection's statements.
    pub fn transaction(&mut self) -> Result<Sql<'_, Transaction<'_>>, Error> {
        let tx = self.on.client().transaction()?;
        Ok(Sql {
            on: tx,
            statements: self.statements.as_deref_mut(),
        })
    }
}

impl Sql<'_, Transaction<'_>> {
    pub fn commit(self) -> Result<(), Error> {
        self.on.commit()
    }
}

/// Whether the server's refusal may come from a statement prepared before a schema change.
fn stale(err: &Error) -> bool {
    let stale = [
        SqlState::FEATURE_NOT_SUPPORTED, // cached plan must not change result type
        SqlState::INVALID_SQL_STATEMENT_NAME,
        SqlState::UNDEFINED_TABLE,
        SqlState::UNDEFINED_COLUMN,
        SqlState::UNDEFINED_FUNCTION,
        SqlState::UNDEFINED_OBJECT,
        SqlState::INTERNAL_ERROR, // cache lookup failed for a dropped relation
    ];
    err.code().is_some_and(|code| stale.contains(code))
}

/// What `PgTx::c` is: a [`Sql`] over the transaction's client, reached with `&mut *self.c` as a
/// borrowed client would be.
pub struct Conn<'c, C>(pub(super) Sql<'c, &'c mut C>);

impl<'c, C> Deref for Conn<'c, C> {
    type Target = Sql<'c, &'c mut C>;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl<C> DerefMut for Conn<'_, C> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}
