//! The command line (docs/design.md §1, §10): `serve`, `keys create|list|revoke`, `api`,
//! `healthcheck`, `backup`, `migrate`. Every flag also reads an environment variable `WEBHOOKD_<FLAG>`.

use crate::store::keys::Scope;
use clap::builder::BoolishValueParser;
use clap::{ArgAction, Args, Parser, Subcommand};
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Parser)]
#[command(
    name = "webhookd",
    version = crate::build_info::LONG_VERSION,
    about = "Self-hosted scheduled webhooks over one SQLite file"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Log line format on stderr: `text` (colours only when stderr is a terminal) or `json`
    /// (one JSON object a line, for log collectors).
    #[arg(
        long,
        global = true,
        env = "WEBHOOKD_LOG_FORMAT",
        value_enum,
        default_value = "text"
    )]
    pub log_format: LogFormat,
    /// Least severe log lines shown: error, warn, info, debug or trace. For finer control,
    /// WEBHOOKD_LOG takes a filter in RUST_LOG's syntax (e.g.
    /// `info,webhookd::delivery=debug`); it wins over this flag when set.
    #[arg(
        long,
        global = true,
        env = "WEBHOOKD_LOG_LEVEL",
        value_enum,
        default_value = "info"
    )]
    pub log_level: LogLevel,
}

/// `--log-level`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogLevel {
    Error,
    Warn,
    Info,
    Debug,
    Trace,
}

impl LogLevel {
    /// The level as a log filter directive.
    pub fn directive(self) -> &'static str {
        match self {
            LogLevel::Error => "error",
            LogLevel::Warn => "warn",
            LogLevel::Info => "info",
            LogLevel::Debug => "debug",
            LogLevel::Trace => "trace",
        }
    }
}

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the API, the scheduler and the delivery pool on one database file.
    Serve(ServeArgs),
    /// Manage API keys (works while a server runs on the same file).
    #[command(subcommand)]
    Keys(KeysCommand),
    /// Send one signed request to a running server and print the JSON reply.
    Api(ApiArgs),
    /// GET /healthz of a running server: exit 0 on 200, else 1 with one line saying why
    /// (for container HEALTHCHECKs in an image without a shell).
    Healthcheck {
        /// Server base URL.
        #[arg(long, env = "WEBHOOKD_URL", default_value = "http://127.0.0.1:8080")]
        url: String,
    },
    /// Write a consistent copy of a database (also while a server runs on it) to a new file
    /// with mode 0600. The copy holds the API key secrets: keep it as safe as the original.
    Backup {
        #[arg(long, env = "WEBHOOKD_DB")]
        db: String,
        /// The file to write; it must not exist yet.
        #[arg(long, env = "WEBHOOKD_OUT")]
        out: PathBuf,
    },
    /// Copy every record of a SQLite database (the same ids, the API keys) into an empty
    /// PostgreSQL database, in one transaction; prints the rows copied per table. Stop the
    /// server on the SQLite file first: tasks it was delivering arrive as pending.
    Migrate(MigrateArgs),
    /// Listen for webhook deliveries, verify both signatures with the endpoint's secret, and
    /// print each delivery; answers 401 to one that does not verify. For trying webhookd out
    /// and for debugging an endpoint.
    Receive(ReceiveArgs),
}

#[derive(Debug, Args)]
pub struct ReceiveArgs {
    /// Port to listen on (0: any free port; the one taken is printed at start).
    #[arg(long, env = "WEBHOOKD_RECEIVE_PORT", default_value_t = 9000)]
    pub port: u16,
    /// Address to listen on (0.0.0.0 for every interface).
    #[arg(long, env = "WEBHOOKD_RECEIVE_HOST", default_value = "127.0.0.1")]
    pub host: std::net::IpAddr,
    /// The endpoint's signing secret (as in its record, e.g. whsec_...). Without it,
    /// deliveries are printed and accepted without being verified.
    #[arg(long, env = "WEBHOOKD_RECEIVE_SECRET", hide_env_values = true)]
    pub secret: Option<String>,
    /// Largest accepted distance of X-Service-Timestamp from this machine's clock, in seconds.
    #[arg(long, env = "WEBHOOKD_RECEIVE_TOLERANCE_SECS", default_value_t = 300)]
    pub tolerance_secs: u32,
}

#[derive(Debug, Args)]
pub struct MigrateArgs {
    /// The SQLite database file to copy (upgraded to this binary's schema version first).
    #[arg(long, env = "WEBHOOKD_FROM")]
    pub from: PathBuf,
    /// The PostgreSQL database to fill: postgres://USER:PASSWORD@HOST:PORT/DATABASE. Its schema
    /// is created if absent; it must hold no webhookd records.
    #[arg(long, env = "WEBHOOKD_TO", hide_env_values = true)]
    pub to: String,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The database: a SQLite file (created if absent) or a postgres:// URL (several nodes may
    /// share one PostgreSQL database).
    #[arg(long, env = "WEBHOOKD_DB")]
    pub db: String,
    /// Address to listen on: IP:PORT, [IPv6]:PORT, HOST:PORT (resolved once, at start) or
    /// :PORT (every IPv4 interface).
    #[arg(long, env = "WEBHOOKD_LISTEN", default_value = "127.0.0.1:8080", value_parser = parse_listen)]
    pub listen: SocketAddr,
    /// Accepted clock difference of a request's X-Timestamp, in seconds.
    #[arg(long, env = "WEBHOOKD_MAX_SKEW_SECS", default_value_t = 300)]
    pub max_skew_secs: u64,
    /// Largest accepted request body, in bytes.
    #[arg(long, env = "WEBHOOKD_MAX_BODY_BYTES", default_value_t = 1024 * 1024)]
    pub max_body_bytes: usize,
    /// A request body must arrive whole within this many seconds (else 408, connection closed).
    #[arg(long, env = "WEBHOOKD_BODY_TIMEOUT_SECS", default_value_t = 30)]
    pub body_timeout_secs: u64,
    /// After its first 5 seconds, a request body must arrive at least this many bytes a second
    /// on average (else 408, connection closed); 0 = only --body-timeout-secs applies.
    #[arg(long, env = "WEBHOOKD_BODY_MIN_RATE", default_value_t = 1024)]
    pub body_min_rate: u64,
    /// Most connections served at once; beyond it only /healthz and /metrics are answered
    /// (a small reserve), then 503. 0 = derived from the file-descriptor limit (at most 4096).
    #[arg(long, env = "WEBHOOKD_MAX_CONNECTIONS", default_value_t = 0)]
    pub max_connections: usize,
    /// Most connections served at once from one peer address (behind a reverse proxy, set it
    /// to --max-connections). 0 = a quarter of --max-connections (at least 8).
    #[arg(long, env = "WEBHOOKD_MAX_CONNECTIONS_PER_PEER", default_value_t = 0)]
    pub max_connections_per_peer: usize,
    /// Delivery senders kept ready while idle (more start on demand, up to --max-in-flight);
    /// a quarter of it is the default per-endpoint cap.
    #[arg(long, env = "WEBHOOKD_WORKERS", default_value_t = 16)]
    pub workers: usize,
    /// Most deliveries in flight at once over all apps; each send under way has its own small
    /// thread, so a receiver that never answers holds one socket, not the pool.
    #[arg(long, env = "WEBHOOKD_MAX_IN_FLIGHT", default_value_t = 2048)]
    pub max_in_flight: usize,
    /// Deliveries one app may have in flight; beyond it, as many again as a reserve from which
    /// each endpoint may start up to this divided by the app's busy endpoints (so one app
    /// holds at most twice this); 0 = a quarter of --max-in-flight.
    #[arg(long, env = "WEBHOOKD_APP_MAX_IN_FLIGHT", default_value_t = 0)]
    pub app_max_in_flight: usize,
    /// Most deliveries to one endpoint at once unless the endpoint sets `max_in_flight`;
    /// 0 = a quarter of --workers (at least 1).
    #[arg(long, env = "WEBHOOKD_ENDPOINT_MAX_IN_FLIGHT", default_value_t = 0)]
    pub endpoint_max_in_flight: usize,
    /// Missed schedule runs older than this (after downtime) are skipped, not fired.
    #[arg(long, env = "WEBHOOKD_MISFIRE_GRACE_SECS", default_value_t = 3600)]
    pub misfire_grace_secs: u64,
    /// Time in-flight deliveries get to finish on SIGINT/SIGTERM.
    #[arg(long, env = "WEBHOOKD_SHUTDOWN_GRACE_SECS", default_value_t = 10)]
    pub shutdown_grace_secs: u64,
    /// Comma-separated addresses or CIDR ranges deliveries may reach although refused by
    /// default (link-local) or by --deny-private-targets.
    #[arg(long, env = "WEBHOOKD_ALLOW_TARGETS", value_delimiter = ',')]
    pub allow_targets: Vec<String>,
    /// Also refuse loopback, private (RFC 1918), CGNAT and unique-local delivery targets.
    #[arg(long, env = "WEBHOOKD_DENY_PRIVATE_TARGETS", action = ArgAction::SetTrue, value_parser = BoolishValueParser::new())]
    pub deny_private_targets: bool,
    /// Delete finished tasks, attempts and events older than this many days (the scheduler's
    /// schedule firing records a day later).
    #[arg(long, env = "WEBHOOKD_RETENTION_DAYS", default_value_t = 30)]
    pub retention_days: u64,
    /// Requests per second allowed per API key (429 beyond); 0 = no limit.
    #[arg(long, env = "WEBHOOKD_RATE_LIMIT", default_value_t = 0)]
    pub rate_limit: u32,
    /// Disable an endpoint (reason `failing`) whose deliveries have failed at least 5 times in
    /// a row over this many hours; a number (0.5 = 30 minutes); 0 = never.
    #[arg(
        long,
        env = "WEBHOOKD_DISABLE_FAILING_AFTER_HOURS",
        default_value_t = 120.0,
        allow_negative_numbers = true,
        value_parser = parse_hours
    )]
    pub disable_failing_after_hours: f64,
    /// Keep the -wal file under about this many MiB: once half of it is written, a checkpoint
    /// briefly holds the writers and the WAL is reused from its start.
    #[arg(long, env = "WEBHOOKD_WAL_LIMIT_MB", default_value_t = 64)]
    pub wal_limit_mb: u64,
    /// SQLite only: `full` (default) makes every acknowledged write durable (an fsync of the
    /// WAL, shared by the commits queued behind it); `normal` commits faster but may lose the
    /// last acknowledged writes on a power loss or a disk error.
    #[arg(long, env = "WEBHOOKD_SQLITE_SYNC", value_enum, default_value = "full")]
    pub sqlite_sync: crate::config::SqliteSync,
    /// SQLite only: make a checked backup every --backup-every into this folder (created if
    /// absent), named webhookd-<UTC time>.sqlite, mode 0600; the newest --backup-keep are kept.
    #[arg(long, env = "WEBHOOKD_BACKUP_DIR")]
    pub backup_dir: Option<PathBuf>,
    /// Time between two scheduled backups: a number and s, m, h or d (30m, 6h, 1d); at least 10s.
    #[arg(long, env = "WEBHOOKD_BACKUP_EVERY", default_value = "1d", requires = "backup_dir", value_parser = crate::backup::parse_every)]
    pub backup_every: std::time::Duration,
    /// Scheduled backups kept in --backup-dir; older ones are removed.
    #[arg(long, env = "WEBHOOKD_BACKUP_KEEP", default_value_t = crate::backup::DEFAULT_KEEP, requires = "backup_dir")]
    pub backup_keep: usize,
    /// PostgreSQL only: longest the scheduler and the delivery pool wait before looking at the
    /// database again while no LISTEN connection brings other nodes' changes (--pg-poll-only,
    /// or while that connection is down), in milliseconds.
    #[arg(long, env = "WEBHOOKD_PG_POLL_MS", default_value_t = 1000)]
    pub pg_poll_ms: u64,
    /// PostgreSQL only: do not LISTEN for other nodes' changes (e.g. behind PgBouncer in
    /// transaction mode); poll every --pg-poll-ms instead.
    #[arg(long, env = "WEBHOOKD_PG_POLL_ONLY", action = ArgAction::SetTrue, value_parser = BoolishValueParser::new())]
    pub pg_poll_only: bool,
    /// Export spans over OTLP/HTTP (JSON) to URL/v1/traces: one per API request, schedule
    /// firing, queue wait and delivery attempt, in each task's trace. Off by default; a full
    /// queue or an unreachable collector drops spans (counted in /metrics), never a request.
    #[arg(long, env = "WEBHOOKD_OTLP_ENDPOINT", value_name = "URL")]
    pub otlp_endpoint: Option<String>,
    /// PostgreSQL only: most connections this node keeps in its pool (1-1000; one more listens
    /// for other nodes' changes unless --pg-poll-only). Default: --workers + 8.
    #[arg(long, env = "WEBHOOKD_PG_POOL_SIZE", value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub pg_pool_size: Option<u32>,
    /// PostgreSQL only: longest one SQL statement may run, in milliseconds (0 = no limit). Sent
    /// when each connection starts; with --pg-poll-only (PgBouncer refuses start-up options)
    /// set it on the role instead: ALTER ROLE <role> SET statement_timeout = '30s'.
    #[arg(
        long,
        env = "WEBHOOKD_PG_STATEMENT_TIMEOUT_MS",
        default_value_t = 30_000
    )]
    pub pg_statement_timeout_ms: u64,
    /// Do not serve GET /metrics.
    #[arg(long, env = "WEBHOOKD_NO_METRICS", action = ArgAction::SetTrue, value_parser = BoolishValueParser::new())]
    pub no_metrics: bool,
}

#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Create an API key for an application; prints its secret once. Creates the database
    /// (mode 0600) when it does not exist yet, so that `serve` then prints no first-start key.
    Create {
        #[arg(long, env = "WEBHOOKD_DB")]
        db: String,
        /// Application id the key belongs to; it sees only that app's records.
        #[arg(long, env = "WEBHOOKD_APP")]
        app: String,
        /// A label for the key.
        #[arg(long, env = "WEBHOOKD_NAME")]
        name: String,
        /// What the key may do in its app: admin (everything, keys included), write (every
        /// route but the keys routes) or read (GET routes and POST /cron/preview).
        #[arg(long, env = "WEBHOOKD_SCOPE", default_value = "admin", value_parser = parse_scope)]
        scope: Scope,
        /// The key stops working after this long: a number and a unit, s, m, h, d or w
        /// (90d, 12h). Default: never.
        #[arg(long, env = "WEBHOOKD_EXPIRES_IN", value_parser = parse_expires_in)]
        expires_in: Option<Duration>,
        /// Print exactly one JSON object: {"key_id","secret","app_id"}.
        #[arg(long)]
        json: bool,
    },
    /// List keys (never their secrets): one line each under a header row.
    List {
        #[arg(long, env = "WEBHOOKD_DB")]
        db: String,
        /// Print one JSON array of {"key_id","app_id","name","created_at","revoked"} instead.
        #[arg(long)]
        json: bool,
    },
    /// Revoke a key: its requests get 401 from now on.
    Revoke {
        #[arg(long, env = "WEBHOOKD_DB")]
        db: String,
        /// The key's id (whk_…), as `webhookd keys list` shows it.
        key_id: String,
    },
}

#[derive(Debug, Args)]
pub struct ApiArgs {
    /// Server base URL.
    #[arg(long, env = "WEBHOOKD_URL", default_value = "http://127.0.0.1:8080")]
    pub url: String,
    #[arg(long, env = "WEBHOOKD_KEY_ID")]
    pub key_id: String,
    #[arg(long, env = "WEBHOOKD_SECRET", hide_env_values = true)]
    pub secret: String,
    /// HTTP method, e.g. GET, POST, PATCH, DELETE.
    pub method: String,
    /// Path, e.g. /v1/endpoints (the /v1 prefix may be left out).
    pub path: String,
    /// JSON body.
    pub body: Option<String>,
}

/// `--disable-failing-after-hours`: a number of hours; the message names the flag's env var too
/// (the range is checked by `Config::validate`).
fn parse_scope(value: &str) -> Result<Scope, String> {
    Scope::parse(value).ok_or_else(|| format!("'{value}' is not one of admin, write, read"))
}

/// `--expires-in`: a positive whole number and a unit, `s`, `m`, `h`, `d` or `w` (`90d`, `12h`).
pub fn parse_expires_in(value: &str) -> Result<Duration, String> {
    let value = value.trim();
    let bad = || format!("'{value}' is not a duration such as 90d, 12h, 30m (units s, m, h, d, w)");
    let split = value.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (number, unit) = value.split_at(split);
    let n: u64 = number.parse().map_err(|_| bad())?;
    let unit_secs = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        "w" => 604_800,
        _ => return Err(bad()),
    };
    match n.checked_mul(unit_secs) {
        Some(0) => Err(format!(
            "'{value}' is no time at all; give a positive duration"
        )),
        // At most about 100 years, so that every expiry shows as an RFC 3339 time.
        Some(secs) if secs <= 100 * 366 * 86_400 => Ok(Duration::from_secs(secs)),
        _ => Err(format!("'{value}' is longer than 100 years")),
    }
}

fn parse_hours(value: &str) -> Result<f64, String> {
    value.trim().parse::<f64>().map_err(|_| {
        format!(
            "'{value}' is not a number of hours (--disable-failing-after-hours, \
             WEBHOOKD_DISABLE_FAILING_AFTER_HOURS; e.g. 120, 0.5, or 0 for never)"
        )
    })
}

/// `--listen`: `IP:PORT`, `[IPv6]:PORT`, `:PORT` (all IPv4 interfaces) or `HOST:PORT`, whose
/// name is resolved once, here; the first address the resolver gives is used.
pub fn parse_listen(text: &str) -> Result<SocketAddr, String> {
    let text = text.trim();
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let Some((host, port)) = text.rsplit_once(':') else {
        return Err("expected IP:PORT, [IPv6]:PORT, HOST:PORT or :PORT".into());
    };
    let port: u16 = port
        .parse()
        .map_err(|_| format!("'{port}' is not a port number (0 to 65535)"))?;
    if host.is_empty() {
        return Ok(SocketAddr::from(([0, 0, 0, 0], port)));
    }
    if host.contains(':') && !host.starts_with('[') {
        return Err("write an IPv6 address in brackets: [::1]:8080".into());
    }
    (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve '{host}': {e}"))?
        .next()
        .ok_or_else(|| format!("'{host}' resolves to no address"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expires_in_forms() {
        assert_eq!(
            parse_expires_in("90d"),
            Ok(Duration::from_secs(90 * 86_400))
        );
        assert_eq!(parse_expires_in("12h"), Ok(Duration::from_secs(12 * 3600)));
        assert_eq!(parse_expires_in("30m"), Ok(Duration::from_secs(1800)));
        assert_eq!(parse_expires_in("45s"), Ok(Duration::from_secs(45)));
        assert_eq!(parse_expires_in("2w"), Ok(Duration::from_secs(14 * 86_400)));
        for bad in [
            "",
            "d",
            "90",
            "-1d",
            "1.5h",
            "1y",
            "0d",
            "99999999999999w",
            "1 d",
        ] {
            assert!(parse_expires_in(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn listen_forms() {
        assert_eq!(
            parse_listen("127.0.0.1:8080").unwrap().to_string(),
            "127.0.0.1:8080"
        );
        assert_eq!(
            parse_listen("[::1]:9000").unwrap().to_string(),
            "[::1]:9000"
        );
        assert_eq!(parse_listen(":8080").unwrap().to_string(), "0.0.0.0:8080");
        assert!(parse_listen("localhost:8080").unwrap().ip().is_loopback());
        assert_eq!(parse_listen("localhost:8080").unwrap().port(), 8080);
        for bad in [
            "8080",
            "127.0.0.1",
            "127.0.0.1:99999",
            ":x",
            "::1:80",
            "no-such-host.invalid:80",
        ] {
            assert!(parse_listen(bad).is_err(), "{bad} was accepted");
        }
    }
}
