//! Connections to PostgreSQL: the TLS of the URL (`tls.rs`), the time-outs and TCP keepalives
//! that make an unreachable database an answer in seconds rather than a hang, the statement
//! time-out (sent at start-up, or left to the role behind PgBouncer), and the pool with its
//! record of the last failed connection attempt, so that during an outage requests answer 503
//! with the reason at once instead of each waiting for the pool.

use super::PgUrl;
use anyhow::Context;
use postgres::error::SqlState;
use r2d2_postgres::PostgresConnectionManager;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The shared PostgreSQL connection pool.
pub type PgPool = r2d2::Pool<Manager>;
pub use super::conn::Manager;

/// A connection attempt (TCP and TLS) that takes longer fails, unless the URL sets its own
/// `connect_timeout`: a database that went away is reported within this, not the minutes of
/// the operating system's TCP time-out.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Data sent and not acknowledged for this long closes the connection (a database host that
/// vanished without a reset), unless the URL sets `tcp_user_timeout`.
const TCP_USER_TIMEOUT: Duration = Duration::from_secs(20);
/// TCP keepalives on idle connections (the driver's default waits two hours): firewalls and
/// cloud load balancers drop idle flows after minutes, and a dead peer is found within
/// `idle + interval × retries`. Each applies unless the URL sets it.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(30);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
const KEEPALIVE_RETRIES: u32 = 3;
/// How long a request waits for a pooled connection while the database is reachable.
const CHECKOUT_WAIT: Duration = Duration::from_secs(5);
/// How long a request waits for one while the last connection attempt failed: the outage is
/// known, so it answers 503 with the reason instead of holding an API thread.
const OUTAGE_WAIT: Duration = Duration::from_millis(200);
/// How long the health check waits for a connection (`/healthz` answers within about this
/// plus one probe).
pub const HEALTH_WAIT: Duration = Duration::from_millis(1500);

/// Connection settings from the command line (`--pg-pool-size`, `--pg-statement-timeout-ms`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PgSettings {
    /// Most pooled connections per node; `None`: the caller's default (`--workers` + 8).
    pub pool_size: Option<u32>,
    /// Longest one statement may run (PostgreSQL's `statement_timeout`); `None`: no limit.
    pub statement_timeout: Option<Duration>,
    /// Behind PgBouncer in transaction mode (`--pg-poll-only`): PgBouncer refuses start-up
    /// `options`, so the statement time-out is left to the role's setting and checked.
    pub pgbouncer: bool,
}

impl Default for PgSettings {
    fn default() -> Self {
        PgSettings {
            pool_size: None,
            statement_timeout: Some(Duration::from_secs(30)),
            pgbouncer: false,
        }
    }
}

/// The driver's settings for `url`: its own, plus this module's time-outs and keepalives
/// wherever the URL sets none.
fn tuned(url: &PgUrl) -> postgres::Config {
    let mut config = url.config().clone();
    if !url.sets("connect_timeout") {
        config.connect_timeout(CONNECT_TIMEOUT);
    }
    if !url.sets("tcp_user_timeout") {
        config.tcp_user_timeout(TCP_USER_TIMEOUT);
    }
    if !url.sets("keepalives_idle") {
        config.keepalives_idle(KEEPALIVE_IDLE);
    }
    if !url.sets("keepalives_interval") {
        config.keepalives_interval(KEEPALIVE_INTERVAL);
    }
    if !url.sets("keepalives_retries") {
        config.keepalives_retries(KEEPALIVE_RETRIES);
    }
    config
}

/// One connection outside the pool (start-up work, the listener, tests), with the given
/// settings (e.g. an `application_name`). The driver's error never holds the password; the
/// context names the redacted URL and, where the server or the certificate refused, the fix.
pub fn connect_with(url: &PgUrl, config: postgres::Config) -> anyhow::Result<postgres::Client> {
    let mut tuned_config = tuned(url);
    if let Some(name) = config.get_application_name() {
        tuned_config.application_name(name);
    }
    let tls = url.tls().connector()?;
    tuned_config
        .connect(tls)
        .map_err(explain)
        .with_context(|| format!("cannot connect to PostgreSQL at {url}"))
}

/// The driver's error with its causes (the driver's own text stops at "db error"), and a hint
/// where the server's answer names a TLS requirement. Never holds the password.
fn explain(err: postgres::Error) -> anyhow::Error {
    if let Some(refused) = super::tls::refusal_in(&err) {
        return anyhow::anyhow!(refused);
    }
    let needs_tls = err.code() == Some(&SqlState::INVALID_AUTHORIZATION_SPECIFICATION)
        && err
            .as_db_error()
            .is_some_and(|db| db.message().contains("no encryption"));
    let err = anyhow::Error::new(err);
    if needs_tls {
        err.context(
            "the server accepts this user only over TLS: use sslmode=require, or verify-full with sslrootcert=PATH",
        )
    } else {
        err
    }
}

/// The last failed connection attempt of a pool, cleared by the next one that succeeds.
#[derive(Debug, Default)]
pub struct Link {
    failure: Mutex<Option<(Instant, String)>>,
}

impl Link {
    fn failed(&self, why: String) {
        let mut failure = self.failure.lock().unwrap_or_else(|e| e.into_inner());
        if failure.is_none() {
            tracing::warn!(error = %why, "PostgreSQL cannot be reached; answering 503 until it is back");
        }
        *failure = Some((Instant::now(), why));
    }

    fn connected(&self) {
        let mut failure = self.failure.lock().unwrap_or_else(|e| e.into_inner());
        if failure.take().is_some() {
            tracing::info!("PostgreSQL can be reached again");
        }
    }

    /// Why the last connection attempt failed, if none succeeded since.
    pub fn failure(&self) -> Option<String> {
        let failure = self.failure.lock().unwrap_or_else(|e| e.into_inner());
        failure.as_ref().map(|(_, why)| why.clone())
    }
}

/// Feeds the pool's connection attempts into its [`Link`].
#[derive(Debug)]
struct Watch(Arc<Link>);

impl r2d2::HandleError<postgres::Error> for Watch {
    fn handle_error(&self, error: postgres::Error) {
        self.0.failed(format!("{:#}", explain(error)));
    }
}

impl r2d2::CustomizeConnection<super::conn::PgConn, postgres::Error> for Watch {
    fn on_acquire(&self, _client: &mut super::conn::PgConn) -> Result<(), postgres::Error> {
        self.0.connected();
        Ok(())
    }
}

/// A pool of up to `size` connections to `url` (already migrated), with `settings`' statement
/// time-out, and the [`Link`] that records its failed connection attempts.
pub fn pool(url: &PgUrl, size: u32, settings: &PgSettings) -> anyhow::Result<(PgPool, Arc<Link>)> {
    let mut config = tuned(url);
    match settings.statement_timeout {
        Some(limit) if !settings.pgbouncer => {
            // Before the URL's own `options`, so that a `-c statement_timeout` there wins.
            let ours = format!("-c statement_timeout={}", limit.as_millis());
            let options = match url.config().get_options() {
                Some(theirs) => format!("{ours} {theirs}"),
                None => ours,
            };
            config.options(&options);
        }
        _ => {}
    }
    let link = Arc::new(Link::default());
    let manager = Manager::new(
        PostgresConnectionManager::new(config, url.tls().connector()?),
        link.clone(),
        !settings.pgbouncer,
    );
    let pool = r2d2::Pool::builder()
        .max_size(size)
        .min_idle(Some(1))
        .connection_timeout(CHECKOUT_WAIT)
        .error_handler(Box::new(Watch(link.clone())))
        .connection_customizer(Box::new(Watch(link.clone())))
        .build(manager)
        .map_err(|e| anyhow::anyhow!("{e}"))
        .with_context(|| format!("cannot build the connection pool for {url}"))?;
    if settings.pgbouncer {
        check_role_timeout(&pool, url);
    }
    Ok((pool, link))
}

/// Behind PgBouncer the statement time-out is the role's (`ALTER ROLE … SET
/// statement_timeout`): say so at start when it has none.
fn check_role_timeout(pool: &PgPool, url: &PgUrl) {
    let shown = pool.get().ok().and_then(|mut client| {
        client
            .query_one("SHOW statement_timeout", &[])
            .ok()
            .map(|row| row.get::<_, String>(0))
    });
    match shown.as_deref() {
        Some("0") => tracing::warn!(
            db = %url,
            "with --pg-poll-only (PgBouncer) webhookd sends no statement_timeout and the role has none: set one with ALTER ROLE <role> SET statement_timeout = '30s'"
        ),
        Some(limit) => tracing::info!(
            statement_timeout = limit,
            "the role's statement time-out applies"
        ),
        None => {}
    }
}

/// A pooled connection, waiting [`CHECKOUT_WAIT`] (at most `wait` when given), or only
/// [`OUTAGE_WAIT`] while the last attempt to connect failed. The error is the reason: the
/// driver's last connection error (it never holds the password).
pub fn checkout(
    pool: &PgPool,
    link: &Link,
    wait: Option<Duration>,
) -> Result<r2d2::PooledConnection<Manager>, String> {
    if let Some(client) = pool.try_get() {
        // Checked on the way out (a round trip) unless it was in use within the last second
        // (`conn::TRUSTED_FOR`) and no connection attempt failed since: the database answers.
        link.connected();
        return Ok(client);
    }
    let known_down = link.failure().is_some();
    let mut limit = if known_down {
        OUTAGE_WAIT
    } else {
        CHECKOUT_WAIT
    };
    if let Some(wait) = wait {
        limit = limit.min(wait);
    }
    let client = pool.get_timeout(limit).map_err(|e| {
        if let Some(why) = link.failure() {
            return why;
        }
        // r2d2 says "timed out waiting for connection", followed by the last error if any.
        let text = e.to_string();
        match text.split_once(": ") {
            Some((_, why)) => {
                let why = format!("PostgreSQL did not answer: {why}");
                link.failed(why.clone());
                why
            }
            None => format!(
                "all {} connections stayed busy for {} ms",
                pool.max_size(),
                limit.as_millis()
            ),
        }
    })?;
    link.connected();
    Ok(client)
}
