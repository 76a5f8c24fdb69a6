//! The command line (contract §1): `serve`, `keys create|list|revoke`, `api`. Every flag also
//! reads an environment variable `WEBHOOKD_<FLAG>`.

use clap::{Args, Parser, Subcommand};
use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(
    name = "webhookd",
    version,
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
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// SQLite database file (created if absent).
    #[arg(long, env = "WEBHOOKD_DB")]
    pub db: PathBuf,
    /// Address to listen on.
    #[arg(long, env = "WEBHOOKD_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Accepted clock difference of a request's X-Timestamp, in seconds.
    #[arg(long, env = "WEBHOOKD_MAX_SKEW_SECS", default_value_t = 300)]
    pub max_skew_secs: u64,
    /// Largest accepted request body, in bytes.
    #[arg(long, env = "WEBHOOKD_MAX_BODY_BYTES", default_value_t = 1024 * 1024)]
    pub max_body_bytes: usize,
    /// Delivery worker threads.
    #[arg(long, env = "WEBHOOKD_WORKERS", default_value_t = 16)]
    pub workers: usize,
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
    #[arg(long, env = "WEBHOOKD_DENY_PRIVATE_TARGETS")]
    pub deny_private_targets: bool,
    /// Delete finished tasks, attempts and events older than this many days.
    #[arg(long, env = "WEBHOOKD_RETENTION_DAYS", default_value_t = 30)]
    pub retention_days: u64,
    /// Requests per second allowed per API key (429 beyond); 0 = no limit.
    #[arg(long, env = "WEBHOOKD_RATE_LIMIT", default_value_t = 0)]
    pub rate_limit: u32,
    /// Keep the -wal file under about this many MiB: past it, a checkpoint briefly holds the
    /// writers and empties the WAL.
    #[arg(long, env = "WEBHOOKD_WAL_LIMIT_MB", default_value_t = 64)]
    pub wal_limit_mb: u64,
    /// Do not serve GET /metrics.
    #[arg(long, env = "WEBHOOKD_NO_METRICS")]
    pub no_metrics: bool,
}

#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Create an API key for an application; prints its secret once.
    Create {
        #[arg(long, env = "WEBHOOKD_DB")]
        db: PathBuf,
        /// Application id the key belongs to; it sees only that app's records.
        #[arg(long, env = "WEBHOOKD_APP")]
        app: String,
        /// A label for the key.
        #[arg(long, env = "WEBHOOKD_NAME")]
        name: String,
        /// Print exactly one JSON object: {"key_id","secret","app_id"}.
        #[arg(long)]
        json: bool,
    },
    /// List keys (never their secrets).
    List {
        #[arg(long, env = "WEBHOOKD_DB")]
        db: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Revoke a key: its requests get 401 from now on.
    Revoke {
        #[arg(long, env = "WEBHOOKD_DB")]
        db: PathBuf,
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
