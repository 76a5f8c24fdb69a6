//! The `webhookd` binary: parses the command line and runs the chosen command.

use anyhow::Context;
use clap::{CommandFactory, FromArgMatches};
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use webhookd::cli::{ApiArgs, Cli, Command, KeysCommand, MigrateArgs, ReceiveArgs, ServeArgs};
use webhookd::clock::{Clock, SystemClock, rfc3339};
use webhookd::config::{Cidr, Config};
use webhookd::store;

/// A mistake in how webhookd was started: exit code 2.
#[derive(Debug)]
struct UsageError(String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

fn main() -> ExitCode {
    let cli = parse_cli();
    init_logs(cli.log_format, cli.log_level);
    let json_logs = cli.log_format == webhookd::cli::LogFormat::Json;
    match try_main(cli) {
        Ok(code) => code,
        Err(err) => {
            if json_logs {
                tracing::error!(error = %format!("{err:#}"), "webhookd stopped");
            } else {
                eprintln!("webhookd: {err:#}");
            }
            if err.downcast_ref::<UsageError>().is_some() {
                ExitCode::from(2)
            } else {
                ExitCode::from(1)
            }
        }
    }
}

/// Parses the command line; a bad value's message names the flag and its environment
/// variable, since either may have supplied it (clap names only the flag). Exits 2 on misuse.
fn parse_cli() -> Cli {
    let mut command = Cli::command();
    let parsed = command
        .try_get_matches_from_mut(std::env::args_os())
        .and_then(|matches| Cli::from_arg_matches(&matches));
    match parsed {
        Ok(cli) => cli,
        Err(mut err) => {
            use clap::error::{ContextKind, ContextValue};
            if let Some(ContextValue::String(arg)) = err.get(ContextKind::InvalidArg) {
                let flag = arg.split_whitespace().next().unwrap_or_default();
                if let Some(env) = env_of(&command, flag) {
                    let named = format!("{arg} (env {env})");
                    err.insert(ContextKind::InvalidArg, ContextValue::String(named));
                }
            }
            err.exit()
        }
    }
}

/// The environment variable of the flag `--name` anywhere in the command tree.
fn env_of(command: &clap::Command, flag: &str) -> Option<String> {
    let long = flag.strip_prefix("--")?;
    command
        .get_arguments()
        .find(|a| a.get_long() == Some(long))
        .and_then(|a| a.get_env())
        .map(|env| env.to_string_lossy().into_owned())
        .or_else(|| command.get_subcommands().find_map(|sub| env_of(sub, flag)))
}

/// Log lines go to stderr, filtered by `WEBHOOKD_LOG` (a filter in `RUST_LOG`'s syntax) when it
/// is set, else by `--log-level`. Text lines carry colour codes only when stderr is a terminal
/// (and `NO_COLOR` is unset); JSON lines are one object each, with the event's fields
/// flattened next to `timestamp`, `level` and `message`.
fn init_logs(format: webhookd::cli::LogFormat, level: webhookd::cli::LogLevel) {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_env("WEBHOOKD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level.directive()));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        webhookd::cli::LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none())
            .init(),
        webhookd::cli::LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .init(),
    }
}

fn try_main(cli: Cli) -> anyhow::Result<ExitCode> {
    let json_logs = cli.log_format == webhookd::cli::LogFormat::Json;
    match cli.command {
        Command::Serve(args) => serve(args, json_logs).map(|()| ExitCode::SUCCESS),
        Command::Keys(command) => keys(command).map(|()| ExitCode::SUCCESS),
        Command::Api(args) => api(args),
        Command::Healthcheck { url } => healthcheck(&url).map(|()| ExitCode::SUCCESS),
        Command::Backup { db, out } => backup(&db, &out).map(|()| ExitCode::SUCCESS),
        Command::Migrate(args) => migrate(args).map(|()| ExitCode::SUCCESS),
        Command::Receive(args) => receive(args).map(|()| ExitCode::SUCCESS),
    }
}

fn receive(args: ReceiveArgs) -> anyhow::Result<()> {
    webhookd::receive::run(webhookd::receive::ReceiveOptions {
        listen: std::net::SocketAddr::new(args.host, args.port),
        secret: args.secret,
        tolerance_secs: i64::from(args.tolerance_secs),
    })
}

fn config_from(args: ServeArgs) -> anyhow::Result<Config> {
    let mut config = Config::new(args.db);
    config.listen = args.listen;
    config.max_skew_secs = args.max_skew_secs;
    config.max_body_bytes = args.max_body_bytes;
    config.body_timeout = std::time::Duration::from_secs(args.body_timeout_secs);
    config.body_min_rate = args.body_min_rate;
    config.max_connections = args.max_connections;
    config.max_connections_per_peer = args.max_connections_per_peer;
    config.workers = args.workers;
    config.max_in_flight = args.max_in_flight;
    config.app_max_in_flight = args.app_max_in_flight;
    config.endpoint_max_in_flight = args.endpoint_max_in_flight;
    config.misfire_grace_secs = args.misfire_grace_secs;
    config.shutdown_grace_secs = args.shutdown_grace_secs;
    config.deny_private_targets = args.deny_private_targets;
    config.retention_days = args.retention_days;
    config.metrics = !args.no_metrics;
    config.rate_limit_per_sec = args.rate_limit;
    config.disable_failing_after_hours = args.disable_failing_after_hours;
    config.wal_limit_bytes = args.wal_limit_mb.saturating_mul(1024 * 1024);
    config.sqlite_sync = args.sqlite_sync;
    config.backup = args.backup_dir.map(|dir| webhookd::backup::BackupConfig {
        dir,
        every: args.backup_every,
        keep: args.backup_keep,
    });
    config.pg_poll = std::time::Duration::from_millis(args.pg_poll_ms);
    config.pg_poll_only = args.pg_poll_only;
    config.otlp_endpoint = args.otlp_endpoint.filter(|url| !url.trim().is_empty());
    config.pg = webhookd::store::postgres::PgSettings {
        pool_size: args.pg_pool_size,
        statement_timeout: (args.pg_statement_timeout_ms > 0)
            .then(|| std::time::Duration::from_millis(args.pg_statement_timeout_ms)),
        pgbouncer: args.pg_poll_only,
    };
    config.allow_targets = args
        .allow_targets
        .iter()
        .filter(|t| !t.trim().is_empty())
        .map(|t| t.parse::<Cidr>())
        .collect::<Result<_, _>>()
        .map_err(|e| UsageError(format!("--allow-targets (env WEBHOOKD_ALLOW_TARGETS): {e}")))?;
    config.validate().map_err(UsageError)?;
    Ok(config)
}

/// Starts the server. The listener is bound before the database is opened and the first-start
/// key made: a start that fails (port taken, bad file) creates and prints no key.
fn serve(args: ServeArgs, json_logs: bool) -> anyhow::Result<()> {
    let config = config_from(args)?;
    let clock = Arc::new(SystemClock);
    let listener = std::net::TcpListener::bind(config.listen).map_err(|e| {
        UsageError(format!(
            "--listen (env WEBHOOKD_LISTEN): cannot listen on {}: {e}",
            config.listen
        ))
    })?;
    listener.set_nonblocking(true)?;
    {
        let store = store::open(&config.db, 1)
            .map_err(|e| UsageError(format!("--db (env WEBHOOKD_DB): {e:#}")))?;
        if store.read(|tx| tx.count_keys())? == 0 {
            let key = store.write(|tx| tx.create_key("default", "bootstrap", clock.now_ms()))?;
            // The hint repeats --db: a PostgreSQL URL's password must not reach the log (§16).
            let db = if store::postgres::is_url(&config.db) {
                store::postgres::redact(&config.db)
            } else {
                config.db.clone()
            };
            let more = format!("webhookd keys create --db {db} --app APP --name NAME");
            if json_logs {
                // One line of the JSON log stream, written whatever the log level: the secret
                // is shown only this once.
                let line = serde_json::json!({
                    "timestamp": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
                    "level": "WARN",
                    "message": "first start: created an API key for app 'default'; its secret is shown only this once",
                    "key_id": key.key_id,
                    "secret": key.secret,
                    "app_id": key.app_id,
                    "more_keys": more,
                });
                eprintln!("{line}");
            } else {
                eprintln!(
                    "webhookd: first start — created API key for app 'default':\n  key id: {}\n  secret: {}\nIt is shown only this once. Make more with: {more}",
                    key.key_id, key.secret
                );
            }
        }
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let running = webhookd::server::start_on(config, listener, clock, shutdown_signal())
            .await
            .map_err(|e| UsageError(format!("{e:#}")))?;
        running.wait().await
    })?;
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    Ok(())
}

/// Completes on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
    tracing::info!("shutting down: finishing in-flight deliveries");
}

/// `webhookd backup` given a `postgres://` URL: refused (docs/design.md §16), a PostgreSQL database
/// is copied with its own tools.
fn refuse_postgres_backup(db: &str) -> Result<(), UsageError> {
    if store::postgres::is_url(db) {
        return Err(UsageError(format!(
            "--db {}: backup copies SQLite files only; back up a PostgreSQL database with pg_dump (e.g. pg_dump --format=custom --file webhookd.dump <url>)",
            store::postgres::redact(db)
        )));
    }
    Ok(())
}

fn open_for_keys(db: &str, create: bool) -> anyhow::Result<Arc<dyn store::Store>> {
    if !create && !store::postgres::is_url(db) && !Path::new(db).exists() {
        return Err(UsageError(format!(
            "--db (env WEBHOOKD_DB): {db} does not exist; start `webhookd serve --db {db}` once, or check the path"
        ))
        .into());
    }
    Ok(store::open(db, 1).map_err(|e| UsageError(format!("--db (env WEBHOOKD_DB): {e:#}")))?)
}

fn keys(command: KeysCommand) -> anyhow::Result<()> {
    match command {
        KeysCommand::Create {
            db,
            app,
            name,
            scope,
            expires_in,
            json,
        } => {
            if app.trim().is_empty() || app.len() > 200 {
                return Err(UsageError(
                    "--app (env WEBHOOKD_APP): must be 1 to 200 characters".into(),
                )
                .into());
            }
            if name.trim().is_empty() || name.len() > 200 {
                return Err(UsageError(
                    "--name (env WEBHOOKD_NAME): must be 1 to 200 characters".into(),
                )
                .into());
            }
            let store = open_for_keys(&db, true)?;
            let now_ms = SystemClock.now_ms();
            let expires_at = expires_in
                .map(|d| now_ms.saturating_add(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)));
            let key =
                store.write(|tx| tx.create_scoped_key(&app, &name, scope, expires_at, now_ms))?;
            if json {
                println!("{}", serde_json::to_string(&key)?);
            } else {
                println!(
                    "key id: {}\nsecret: {}\napp:    {}\nThe secret is shown only this once.",
                    key.key_id, key.secret, key.app_id
                );
            }
        }
        KeysCommand::List { db, json } => {
            let store = open_for_keys(&db, false)?;
            let keys = store.read(|tx| tx.list_keys())?;
            let text = if json {
                // The key records of the API, plus `key_id` and `revoked` as this list showed
                // them before keys had scopes.
                let shown = keys
                    .iter()
                    .map(|k| {
                        let mut v = serde_json::to_value(k)?;
                        v["key_id"] = k.id.clone().into();
                        v["revoked"] = k.revoked_at.is_some().into();
                        Ok(v)
                    })
                    .collect::<serde_json::Result<Vec<_>>>()?;
                serde_json::to_string(&shown)?
            } else if keys.is_empty() {
                String::new()
            } else {
                std::iter::once("KEY ID\tAPP\tNAME\tSCOPE\tCREATED\tEXPIRES\tSTATE".to_string())
                    .chain(keys.iter().map(|k| {
                        let state = match (k.revoked_at, k.expires_at) {
                            (Some(_), _) => "revoked",
                            (None, Some(t)) if t <= SystemClock.now_ms() => "expired",
                            _ => "active",
                        };
                        let expires = k.expires_at.map_or("never".into(), rfc3339);
                        format!(
                            "{}\t{}\t{}\t{}\t{}\t{}\t{}",
                            k.id,
                            k.app_id,
                            k.name,
                            k.scope.as_str(),
                            rfc3339(k.created_at),
                            expires,
                            state
                        )
                    }))
                    .collect::<Vec<_>>()
                    .join("\n")
            };
            if !text.is_empty() {
                print_out(&text)?;
            } else if !json {
                eprintln!("no keys yet (create one with `webhookd keys create`)");
            }
        }
        KeysCommand::Revoke { db, key_id } => {
            let store = open_for_keys(&db, false)?;
            if !store.write(|tx| tx.revoke_key(&key_id, SystemClock.now_ms()))? {
                anyhow::bail!("no active key {key_id} (see `webhookd keys list`)");
            }
            println!("revoked {key_id}");
        }
    }
    Ok(())
}

/// Prints `text` and a newline on stdout. A reader that went away (`webhookd api … | head`) is
/// not an error: the output was simply not wanted any more (`println!` would panic).
fn print_out(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match writeln!(out, "{text}").and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

fn api(args: ApiArgs) -> anyhow::Result<ExitCode> {
    let client = webhookd::client::Client::new(&args.url, &args.key_id, &args.secret);
    let body = args
        .body
        .as_deref()
        .map(|text| {
            serde_json::from_str::<serde_json::Value>(text)
                .map_err(|e| UsageError(format!("BODY: not valid JSON ({e})")))
        })
        .transpose()?;
    let reply = client.send(&args.method.to_ascii_uppercase(), &args.path, body.as_ref())?;
    print_out(&serde_json::to_string_pretty(&reply.body)?)?;
    Ok(if reply.code() == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// `webhookd healthcheck`: GET `/healthz`; Ok only on 200. Any other answer or a failed
/// connection is an error whose one line says why.
fn healthcheck(url: &str) -> anyhow::Result<()> {
    let url = format!("{}/healthz", url.trim_end_matches('/'));
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .timeout_global(Some(std::time::Duration::from_secs(5)))
        .build()
        .into();
    let mut reply = agent
        .get(&url)
        .call()
        .map_err(|e| anyhow::anyhow!("unhealthy: cannot reach {url}: {e}"))?;
    let status = reply.status().as_u16();
    if status == 200 {
        return Ok(());
    }
    let body = reply
        .body_mut()
        .with_config()
        .limit(64 * 1024)
        .read_to_string()
        .unwrap_or_default();
    let why = serde_json::from_str::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v["reason"].as_str().map(str::to_owned))
        .unwrap_or_else(|| body.split_whitespace().collect::<Vec<_>>().join(" "));
    let why: String = why.chars().take(300).collect();
    anyhow::bail!("unhealthy: {url} answered {status}: {why}")
}

/// `webhookd backup`: a consistent copy of a (possibly live) database by `VACUUM INTO`, which
/// reads one snapshot in a single read transaction, so writers are not blocked and every
/// commit made before it started is in the copy. The file is created first, exclusively and
/// with mode 0600 (it holds the key secrets), so an existing file is never overwritten.
fn backup(db: &str, out: &Path) -> anyhow::Result<()> {
    refuse_postgres_backup(db)?;
    let source = store::open_existing(db)
        .map_err(|e| UsageError(format!("--db (env WEBHOOKD_DB): {e:#}")))?;
    {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(out)
            .map_err(|e| {
                let why = if e.kind() == std::io::ErrorKind::AlreadyExists {
                    "exists; refusing to overwrite it (choose a new name)".to_string()
                } else {
                    format!("cannot be created: {e}")
                };
                UsageError(format!("--out (env WEBHOOKD_OUT): {} {why}", out.display()))
            })?;
    }
    let copied = source.backup(out);
    if let Err(e) = copied {
        let _ = std::fs::remove_file(out);
        return Err(e);
    }
    eprintln!(
        "webhookd: backed up {} to {} (mode 0600; it holds API key secrets)",
        db,
        out.display()
    );
    Ok(())
}

/// `webhookd migrate`: copies a SQLite database into an empty PostgreSQL one
/// (`store::postgres::copy`) and prints the rows copied per table.
fn migrate(args: MigrateArgs) -> anyhow::Result<()> {
    let from = &args.from;
    if from.to_str().is_some_and(store::postgres::is_url) || !from.is_file() {
        return Err(UsageError(format!(
            "--from (env WEBHOOKD_FROM): {} is not a file; give the SQLite database to copy",
            store::postgres::redact(&from.display().to_string())
        ))
        .into());
    }
    let to = store::postgres::PgUrl::parse(&args.to)
        .map_err(|e| UsageError(format!("--to (env WEBHOOKD_TO): {e:#}")))?;
    let source = store::sqlite::open(from, 1)
        .map_err(|e| UsageError(format!("--from (env WEBHOOKD_FROM): {e:#}")))?;
    let source = source.get()?;
    let target = store::postgres::open(&args.to, 1)?;
    let mut target = target.get()?;
    let started = std::time::Instant::now();
    let copied = store::postgres::copy::copy(&source, &mut target, SystemClock.now_ms()).map_err(
        |e| match e.downcast::<store::postgres::copy::NotEmpty>() {
            Ok(full) => UsageError(format!("--to {to}: {full}")).into(),
            Err(e) => e.context(format!("migrating {} to {to}", from.display())),
        },
    )?;
    let lines: Vec<String> = copied
        .tables
        .iter()
        .map(|(table, rows)| format!("{table}\t{rows}"))
        .collect();
    print_out(&lines.join("\n"))?;
    let total: u64 = copied.tables.iter().map(|(_, rows)| rows).sum();
    eprintln!(
        "webhookd: copied {total} rows from {} to {to} in {:.1} s{}",
        from.display(),
        started.elapsed().as_secs_f64(),
        match copied.requeued {
            0 => String::new(),
            n => format!("; {n} tasks that were being delivered are pending again"),
        }
    );
    Ok(())
}
