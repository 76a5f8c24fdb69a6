//! The validated configuration of a running server, with the defaults of docs/design.md.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// Everything `serve` needs; built from the CLI, or directly by tests.
#[derive(Debug, Clone)]
pub struct Config {
    pub db: String,
    pub listen: SocketAddr,
    /// Accepted distance between a request's X-Timestamp and the server clock.
    pub max_skew_secs: u64,
    /// Larger request bodies get 413.
    pub max_body_bytes: usize,
    /// A request body must arrive whole within this (else 408 and the connection closes).
    pub body_timeout: Duration,
    /// After its first seconds, a request body must arrive at least this fast on average, in
    /// bytes a second (else 408); 0 means only `body_timeout` applies.
    pub body_min_rate: u64,
    /// Most connections served at once; 0 means derived from the file-descriptor limit
    /// (`connections::Caps::derive`).
    pub max_connections: usize,
    /// Most connections served at once from one peer address; 0 means a quarter of
    /// `max_connections` (at least 8).
    pub max_connections_per_peer: usize,
    /// Delivery senders kept ready while idle; more are started on demand, up to
    /// `max_in_flight`. A quarter of it is the default per-endpoint cap.
    pub workers: usize,
    /// Most deliveries claimed at once, over all apps (each send under way has its own small
    /// sender thread, so a hanging receiver costs a socket and a thread, never the pool).
    pub max_in_flight: usize,
    /// Most deliveries one app has claimed at once, plus as many again as a reserve its
    /// endpoints share max-min (see `delivery::fair`); 0 means a quarter of `max_in_flight`.
    pub app_max_in_flight: usize,
    /// Most deliveries to one endpoint at once, for endpoints without their own
    /// `max_in_flight`; 0 means a quarter of the workers (at least 1). Keeps one slow receiver
    /// from holding every worker.
    pub endpoint_max_in_flight: usize,
    /// A missed schedule run older than this is skipped at start-up instead of fired.
    pub misfire_grace_secs: u64,
    /// How long in-flight deliveries may take to finish on SIGINT/SIGTERM.
    pub shutdown_grace_secs: u64,
    /// Link-local (or, with `deny_private_targets`, private) ranges deliveries may still reach.
    pub allow_targets: Vec<Cidr>,
    /// Also refuse loopback, RFC 1918, CGNAT and unique-local delivery targets.
    pub deny_private_targets: bool,
    /// Finished tasks, attempts and events older than this many days are deleted (schedule
    /// firing records a day later), and a backfill fires no instant older than this.
    pub retention_days: u64,
    /// Requests per second allowed per API key (a burst of as many); 0 means no limit.
    pub rate_limit_per_sec: u32,
    /// Serve `GET /metrics`.
    pub metrics: bool,
    /// An endpoint failing for this many hours (with at least 5 failed attempts in a row) is
    /// disabled with reason `failing`; 0 means never. A number, so tests can use seconds.
    pub disable_failing_after_hours: f64,
    /// Most tasks one `POST /tasks/retry` call moves back to `pending` (docs/design.md §12:
    /// 100,000); tests lower it to reach `"more": true` without 100,000 rows.
    pub bulk_retry_max: usize,
    /// Longest the scheduler and delivery pool sleep without looking at the database; they are
    /// woken sooner whenever work becomes due earlier. Tests shorten it.
    pub max_idle: Duration,
    /// The `-wal` file is kept under this many bytes (plus what is written during one
    /// checkpoint): once half of it is written, a checkpoint briefly holds the writers and the
    /// WAL is rewound (PASSIVE checkpoints alone cannot bound it under steady load).
    pub wal_limit_bytes: u64,
    /// SQLite `synchronous`: `Full` (the default) fsyncs the WAL at every commit, so a 200 means
    /// the write is on disk; `Normal` (`--sqlite-sync normal`) may lose the last commits on a
    /// power loss or a file system error, for cheaper commits (docs/operations.md, "Storage
    /// and durability").
    pub sqlite_sync: SqliteSync,
    /// Scheduled backups (`--backup-dir`, `--backup-every`, `--backup-keep`); `None`: off.
    pub backup: Option<crate::backup::BackupConfig>,
    /// PostgreSQL: the cap on the scheduler's and delivery pool's idle sleep while no LISTEN
    /// connection brings other nodes' changes (`store::IdleCap`).
    pub pg_poll: Duration,
    /// PostgreSQL: never LISTEN; always poll every `pg_poll`.
    pub pg_poll_only: bool,
    /// `--otlp-endpoint`: where spans are exported over OTLP/HTTP (`<url>/v1/traces`); `None`
    /// exports nothing (docs/API.md, "Traces").
    pub otlp_endpoint: Option<String>,
    /// PostgreSQL: pool size, statement time-out (`--pg-pool-size`, `--pg-statement-timeout-ms`).
    pub pg: crate::store::postgres::PgSettings,
}

/// `--sqlite-sync`: when a SQLite commit is made durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum SqliteSync {
    /// A write returns once its commit is fsynced: an acknowledged write survives a power loss
    /// or a file system error (`synchronous=FULL`'s promise). Commits queued behind one fsync
    /// share the next (group commit); BENCHMARKS.md has the cost.
    #[default]
    Full,
    /// The WAL is fsynced only at checkpoints: a crash of the process loses nothing, a power
    /// loss or a file system error may lose the last commits (never corrupts the file).
    Normal,
}

/// `--wal-limit-mb`'s default, 64 MiB.
pub const DEFAULT_WAL_LIMIT_BYTES: u64 = 64 * 1024 * 1024;

impl Config {
    /// The oldest instant `--retention-days` keeps at `now_ms`: finished tasks and events
    /// before it are deleted, and a backfill fires no instant before it.
    pub fn retention_cutoff(&self, now_ms: i64) -> i64 {
        const DAY_MS: i64 = 24 * 60 * 60 * 1000;
        let days = i64::try_from(self.retention_days).unwrap_or(i64::MAX / DAY_MS);
        now_ms.saturating_sub(days.saturating_mul(DAY_MS))
    }

    /// The defaults (docs/design.md) for a database path.
    pub fn new(db: impl Into<String>) -> Self {
        Config {
            db: db.into(),
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            max_skew_secs: 300,
            max_body_bytes: 1024 * 1024,
            body_timeout: Duration::from_secs(30),
            body_min_rate: 1024,
            max_connections: 0,
            max_connections_per_peer: 0,
            workers: 16,
            max_in_flight: 2048,
            app_max_in_flight: 0,
            endpoint_max_in_flight: 0,
            misfire_grace_secs: 3600,
            shutdown_grace_secs: 10,
            allow_targets: Vec::new(),
            deny_private_targets: false,
            retention_days: 30,
            rate_limit_per_sec: 0,
            metrics: true,
            disable_failing_after_hours: 120.0,
            max_idle: Duration::from_secs(60),
            wal_limit_bytes: DEFAULT_WAL_LIMIT_BYTES,
            sqlite_sync: SqliteSync::Full,
            backup: None,
            bulk_retry_max: 100_000,
            pg_poll: Duration::from_millis(1000),
            pg_poll_only: false,
            otlp_endpoint: None,
            pg: crate::store::postgres::PgSettings::default(),
        }
    }

    /// The in-flight cap of an endpoint that sets no `max_in_flight` of its own.
    pub fn default_endpoint_cap(&self) -> usize {
        match self.endpoint_max_in_flight {
            0 => (self.workers / 4).max(1),
            n => n,
        }
    }

    /// The share of `max_in_flight` one app fills before each of its endpoints is held to its
    /// fair part of a reserve as large again.
    pub fn app_share(&self) -> usize {
        match self.app_max_in_flight {
            0 => (self.max_in_flight / 4).max(1),
            n => n,
        }
    }

    /// Checks ranges; the error names the flag to change.
    pub fn validate(&self) -> Result<(), String> {
        if self.workers == 0 || self.workers > 1024 {
            return Err("--workers (env WEBHOOKD_WORKERS) must be between 1 and 1024".into());
        }
        if !(self.workers..=65_536).contains(&self.max_in_flight) {
            return Err(format!(
                "--max-in-flight (env WEBHOOKD_MAX_IN_FLIGHT) must be between --workers ({}) and 65536",
                self.workers
            ));
        }
        if self.app_max_in_flight > self.max_in_flight {
            return Err(format!(
                "--app-max-in-flight (env WEBHOOKD_APP_MAX_IN_FLIGHT) must be between 0 (a quarter of --max-in-flight) and --max-in-flight ({})",
                self.max_in_flight
            ));
        }
        if self.endpoint_max_in_flight > 1000 {
            return Err(
                "--endpoint-max-in-flight must be between 0 (a quarter of the workers) and 1000"
                    .into(),
            );
        }
        if self.max_body_bytes < 1024 {
            return Err(
                "--max-body-bytes (env WEBHOOKD_MAX_BODY_BYTES) must be at least 1024".into(),
            );
        }
        if !(Duration::from_millis(100)..=Duration::from_secs(3600)).contains(&self.body_timeout) {
            return Err(
                "--body-timeout-secs (env WEBHOOKD_BODY_TIMEOUT_SECS) must be between 1 and 3600"
                    .into(),
            );
        }
        if self.max_connections > 1_000_000 || self.max_connections_per_peer > 1_000_000 {
            return Err("--max-connections and --max-connections-per-peer (env WEBHOOKD_MAX_CONNECTIONS, WEBHOOKD_MAX_CONNECTIONS_PER_PEER) must be at most 1000000 (0: derived from the file-descriptor limit)".into());
        }
        if self.wal_limit_bytes < 1024 * 1024 {
            return Err("--wal-limit-mb must be at least 1".into());
        }
        if self.retention_days == 0 {
            return Err("--retention-days (env WEBHOOKD_RETENTION_DAYS) must be at least 1".into());
        }
        if !(Duration::from_millis(10)..=Duration::from_secs(3600)).contains(&self.pg_poll) {
            return Err(
                "--pg-poll-ms (env WEBHOOKD_PG_POLL_MS) must be between 10 and 3600000".into(),
            );
        }
        if let Some(backup) = &self.backup {
            if crate::store::postgres::is_url(&self.db) {
                return Err("--backup-dir (env WEBHOOKD_BACKUP_DIR) copies SQLite databases only; back up PostgreSQL with pg_dump (e.g. pg_dump --format=custom --file webhookd.dump <url>) or with point-in-time recovery (continuous WAL archiving)".into());
            }
            if backup.keep == 0 {
                return Err("--backup-keep (env WEBHOOKD_BACKUP_KEEP) must be at least 1".into());
            }
            if backup.every < crate::backup::MIN_EVERY {
                return Err(
                    "--backup-every (env WEBHOOKD_BACKUP_EVERY) must be at least 10s".into(),
                );
            }
        }
        let hours = self.disable_failing_after_hours;
        if !hours.is_finite() || !(0.0..=1_000_000.0).contains(&hours) {
            return Err(
                "--disable-failing-after-hours (WEBHOOKD_DISABLE_FAILING_AFTER_HOURS) must be a number of hours from 0 (never) to 1000000"
                    .into(),
            );
        }
        if let Some(url) = &self.otlp_endpoint {
            check_otlp_endpoint(url)
                .map_err(|e| format!("--otlp-endpoint (env WEBHOOKD_OTLP_ENDPOINT): {e}"))?;
        }
        Ok(())
    }
}

/// An address range such as `169.254.169.254/32` or `fd00::/8`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    pub addr: IpAddr,
    pub prefix: u8,
}

impl Cidr {
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                prefix_eq(&net.octets(), &ip.octets(), self.prefix)
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                prefix_eq(&net.octets(), &ip.octets(), self.prefix)
            }
            (IpAddr::V6(net), IpAddr::V4(ip)) => {
                prefix_eq(&net.octets(), &ip.to_ipv6_mapped().octets(), self.prefix)
            }
            (IpAddr::V4(_), IpAddr::V6(ip)) => ip
                .to_ipv4_mapped()
                .is_some_and(|v4| self.contains(IpAddr::V4(v4))),
        }
    }
}

fn prefix_eq(a: &[u8], b: &[u8], prefix: u8) -> bool {
    let full = usize::from(prefix / 8);
    let rest = prefix % 8;
    if a[..full] != b[..full] {
        return false;
    }
    if rest == 0 {
        return true;
    }
    let mask = 0xffu8 << (8 - rest);
    (a[full] & mask) == (b[full] & mask)
}

impl std::str::FromStr for Cidr {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| format!("'{s}' is not an IP address or CIDR range"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            Some(p) => p
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= max)
                .ok_or_else(|| format!("'{s}' has a bad prefix length (0..={max})"))?,
            None => max,
        };
        Ok(Cidr { addr, prefix })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pg_poll_range() {
        let mut config = Config::new("x.sqlite");
        assert!(config.validate().is_ok());
        for (ms, fine) in [
            (9, false),
            (10, true),
            (3_600_000, true),
            (3_600_001, false),
        ] {
            config.pg_poll = Duration::from_millis(ms);
            let checked = config.validate();
            assert_eq!(checked.is_ok(), fine, "{ms}: {checked:?}");
            if let Err(e) = checked {
                assert!(e.contains("--pg-poll-ms"), "{e}");
            }
        }
    }

    #[test]
    fn in_flight_bounds_name_their_flags() {
        let mut config = Config::new("x.sqlite");
        assert_eq!(config.app_share(), 512, "a quarter of 2048");
        config.max_in_flight = 15;
        let e = config.validate().unwrap_err();
        assert!(e.contains("--max-in-flight") && e.contains("(16)"), "{e}");
        config.max_in_flight = 64;
        config.app_max_in_flight = 65;
        let e = config.validate().unwrap_err();
        assert!(e.contains("--app-max-in-flight"), "{e}");
        config.app_max_in_flight = 64;
        assert!(config.validate().is_ok());
        assert_eq!(config.app_share(), 64);
    }

    #[test]
    fn cidr_contains() {
        let link_local: Cidr = "169.254.0.0/16".parse().unwrap();
        assert!(link_local.contains("169.254.169.254".parse().unwrap()));
        assert!(!link_local.contains("169.255.0.1".parse().unwrap()));
        let one: Cidr = "10.1.2.3".parse().unwrap();
        assert!(one.contains("10.1.2.3".parse().unwrap()));
        assert!(!one.contains("10.1.2.4".parse().unwrap()));
        let odd: Cidr = "100.64.0.0/10".parse().unwrap();
        assert!(odd.contains("100.127.255.255".parse().unwrap()));
        assert!(!odd.contains("100.128.0.0".parse().unwrap()));
        let v6: Cidr = "fe80::/10".parse().unwrap();
        assert!(v6.contains("fe80::1".parse().unwrap()));
        assert!(!v6.contains("fec0::1".parse().unwrap()));
        assert!("10.0.0.0/33".parse::<Cidr>().is_err());
        assert!("nope".parse::<Cidr>().is_err());
    }
}

/// An OTLP/HTTP endpoint is an `http` or `https` URL with a host and no query or fragment,
/// e.g. `http://127.0.0.1:4318` (spans go to its `/v1/traces`).
pub fn check_otlp_endpoint(url: &str) -> Result<(), String> {
    let shape = "give an http(s) URL such as http://127.0.0.1:4318 (spans go to its /v1/traces)";
    let uri: ureq::http::Uri = url
        .parse()
        .map_err(|e| format!("{url:?} is not a URL ({e}); {shape}"))?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        _ => return Err(format!("{url:?} is not an http or https URL; {shape}")),
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(format!("{url:?} names no host; {shape}"));
    }
    if uri.query().is_some() || url.contains('#') {
        return Err(format!("{url:?} has a query or fragment; {shape}"));
    }
    Ok(())
}

#[cfg(test)]
mod otlp_endpoint_tests {
    use super::check_otlp_endpoint;

    #[test]
    fn http_and_https_urls_with_a_host() {
        for good in [
            "http://127.0.0.1:4318",
            "https://collector.example.com",
            "http://[::1]:4318/",
            "http://otel:4318/prefix",
        ] {
            assert_eq!(check_otlp_endpoint(good), Ok(()), "{good}");
        }
        for bad in [
            "",
            "127.0.0.1:4318",
            "grpc://127.0.0.1:4317",
            "ftp://host",
            "http://",
            "http://host:4318/?x=1",
            "http://host#frag",
            "not a url",
        ] {
            let e = check_otlp_endpoint(bad).expect_err(bad);
            assert!(e.contains("http(s) URL"), "{bad}: {e}");
        }
    }
}
