//! The `webhookd` binary: parses the command line and runs the chosen command.

use anyhow::Context;
use clap::Parser;
use std::process::ExitCode;
use std::sync::Arc;
use webhookd::cli::{ApiArgs, Cli, Command, KeysCommand, ServeArgs};
use webhookd::clock::{Clock, SystemClock};
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
    let cli = Cli::parse();
    init_logs(cli.log_format);
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

/// Log lines go to stderr, filtered by `WEBHOOKD_LOG` (default `info`). Text lines carry colour
/// codes only when stderr is a terminal (and `NO_COLOR` is unset); JSON lines are one object
/// each, with the event's fields flattened next to `timestamp`, `level` and `message`.
fn init_logs(format: webhookd::cli::LogFormat) {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_env("WEBHOOKD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
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
    match cli.command {
        Command::Serve(args) => serve(args).map(|()| ExitCode::SUCCESS),
        Command::Keys(command) => keys(command).map(|()| ExitCode::SUCCESS),
        Command::Api(args) => api(args),
    }
}

fn config_from(args: ServeArgs) -> anyhow::Result<Config> {
    let mut config = Config::new(args.db);
    config.listen = args.listen;
    config.max_skew_secs = args.max_skew_secs;
    config.max_body_bytes = args.max_body_bytes;
    config.workers = args.workers;
    config.misfire_grace_secs = args.misfire_grace_secs;
    config.shutdown_grace_secs = args.shutdown_grace_secs;
    config.deny_private_targets = args.deny_private_targets;
    config.retention_days = args.retention_days;
    config.metrics = !args.no_metrics;
    config.rate_limit_per_sec = args.rate_limit;
    config.wal_limit_bytes = args.wal_limit_mb.saturating_mul(1024 * 1024);
    config.allow_targets = args
        .allow_targets
        .iter()
        .filter(|t| !t.trim().is_empty())
        .map(|t| t.parse::<Cidr>())
        .collect::<Result<_, _>>()
        .map_err(|e| UsageError(format!("--allow-targets: {e}")))?;
    config.validate().map_err(UsageError)?;
    Ok(config)
}

fn serve(args: ServeArgs) -> anyhow::Result<()> {
    refuse_postgres(&args.db)?;
    let config = config_from(args)?;
    let clock = Arc::new(SystemClock);
    {
        let pool = store::open(&config.db, 1).map_err(|e| UsageError(format!("--db: {e:#}")))?;
        let conn = pool.get()?;
        if store::keys::count(&conn)? == 0 {
            let key = store::keys::create(&conn, "default", "bootstrap", clock.now_ms())?;
            eprintln!(
                "webhookd: first start — created API key for app 'default':\n  key id: {}\n  secret: {}\nIt is shown only this once. Make more with: webhookd keys create --db {} --app APP --name NAME",
                key.key_id,
                key.secret,
                config.db.display()
            );
        }
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async move {
        let running = webhookd::server::start(config, clock, shutdown_signal())
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

/// `--db` given a `postgres://` URL: refused (exit 2) until the PostgreSQL store is complete
/// (contract §16, docs/dev/storage.md), rather than taken for a file path named "postgres:".
fn refuse_postgres(db: &std::path::Path) -> Result<(), UsageError> {
    match db.to_str() {
        Some(text) if store::postgres::is_url(text) => Err(UsageError(format!(
            "--db {}: the PostgreSQL store is not complete in this build (its schema and pool exist, the records do not yet live there); give --db a SQLite file path",
            store::postgres::redact(text)
        ))),
        _ => Ok(()),
    }
}

fn open_for_keys(db: &std::path::Path) -> anyhow::Result<store::Conn> {
    refuse_postgres(db)?;
    if !db.exists() {
        return Err(UsageError(format!(
            "--db: {} does not exist; start `webhookd serve --db {}` once, or check the path",
            db.display(),
            db.display()
        ))
        .into());
    }
    let pool = store::open(db, 1).map_err(|e| UsageError(format!("--db: {e:#}")))?;
    Ok(pool.get()?)
}

fn keys(command: KeysCommand) -> anyhow::Result<()> {
    match command {
        KeysCommand::Create {
            db,
            app,
            name,
            json,
        } => {
            if app.trim().is_empty() || app.len() > 200 {
                return Err(UsageError("--app: must be 1 to 200 characters".into()).into());
            }
            if name.trim().is_empty() || name.len() > 200 {
                return Err(UsageError("--name: must be 1 to 200 characters".into()).into());
            }
            let conn = open_for_keys(&db)?;
            let key = store::keys::create(&conn, &app, &name, SystemClock.now_ms())?;
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
            let conn = open_for_keys(&db)?;
            let keys = store::keys::list(&conn)?;
            if json {
                println!("{}", serde_json::to_string(&keys)?);
            } else {
                for k in keys {
                    let state = if k.revoked { "revoked" } else { "active" };
                    println!(
                        "{}\t{}\t{}\t{}\t{}",
                        k.key_id, k.app_id, k.name, k.created_at, state
                    );
                }
            }
        }
        KeysCommand::Revoke { db, key_id } => {
            let conn = open_for_keys(&db)?;
            if !store::keys::revoke(&conn, &key_id, SystemClock.now_ms())? {
                anyhow::bail!("no active key {key_id} (see `webhookd keys list`)");
            }
            println!("revoked {key_id}");
        }
    }
    Ok(())
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
    println!("{}", serde_json::to_string_pretty(&reply.body)?);
    Ok(if reply.code() == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
