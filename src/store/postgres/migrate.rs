//! Schema versioning for PostgreSQL, the twin of `store::migrate` for SQLite: a one-row table
//! `webhookd_schema` holds an application marker and the version. Upgrades are forward-only,
//! each in its own transaction taken under a transaction-scoped advisory lock, so several
//! nodes starting together upgrade once and the others find the work done. A database of
//! another program, or one written by a newer webhookd, is refused before anything is written.

use anyhow::{Context, bail};
use postgres::{Client, Transaction};

/// The marker in `webhookd_schema.application`.
const APPLICATION: &str = "webhookd";

/// Key of the advisory lock schema upgrades are taken under: "WHKD", like SQLite's
/// `application_id`. Only webhookd's upgrades take it; it is released when each step commits.
const UPGRADE_LOCK: i64 = 0x5748_4B44;

/// Upgrade steps: entry `i` takes the schema from version `i` to `i + 1`. Version `N` has the
/// shape of SQLite's version `N` (`store::sqlite::SCHEMA_VERSION`), step for step.
const UPGRADES: &[&str] = &[
    include_str!("../../../migrations/postgres/schema.sql"),
    include_str!("../../../migrations/postgres/health.sql"),
    include_str!("../../../migrations/postgres/schedule_catchup_overlap.sql"),
    include_str!("../../../migrations/postgres/delivery_controls.sql"),
    include_str!("../../../migrations/postgres/replay_guard.sql"),
    include_str!("../../../migrations/postgres/visibility.sql"),
    include_str!("../../../migrations/postgres/lease.sql"),
    include_str!("../../../migrations/postgres/key_scopes.sql"),
    include_str!("../../../migrations/postgres/traces.sql"),
    include_str!("../../../migrations/postgres/schedule_windows.sql"),
    include_str!("../../../migrations/postgres/filters.sql"),
    include_str!("../../../migrations/postgres/request_headers.sql"),
    include_str!("../../../migrations/postgres/task_counts.sql"),
    include_str!("../../../migrations/postgres/key_generation.sql"),
    include_str!("../../../migrations/postgres/target_generation.sql"),
    include_str!("../../../migrations/postgres/replay_guard_by_time.sql"),
    include_str!("../../../migrations/postgres/pending_counted.sql"),
    include_str!("../../../migrations/postgres/event_task_range.sql"),
    include_str!("../../../migrations/postgres/claim_index_predicate.sql"),
    include_str!("../../../migrations/postgres/tasks_app_dropped.sql"),
    include_str!("../../../migrations/postgres/in_order_head_late.sql"),
];

/// The schema version this binary writes.
pub const SCHEMA_VERSION: i64 = UPGRADES.len() as i64;

/// Tuning steps: PostgreSQL-only settings that change no shape (storage parameters), applied
/// once each after the upgrade steps and counted in `webhookd_schema.tuning`, not in the
/// schema version (which SQLite's matches step for step). A database tuned by a newer
/// webhookd is served as it is: its settings change nothing this binary reads or writes.
const TUNING: &[&str] = &[include_str!(
    "../../../migrations/postgres/queue_autovacuum.sql"
)];

/// What the connected database (its current schema) holds before an upgrade step.
enum Found {
    /// No table at all: a new database for webhookd.
    Empty,
    /// webhookd's schema at this version.
    Ours(i64),
}

/// Reads the marker under the caller's transaction; refuses a database that holds tables but
/// not webhookd's marker.
fn inspect(tx: &mut Transaction<'_>, shown: &str) -> anyhow::Result<Found> {
    let tables: i64 = tx
        .query_one(
            "SELECT count(*) FROM pg_catalog.pg_class c
               JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
              WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p', 'v', 'm', 'f')",
            &[],
        )?
        .get(0);
    if tables == 0 {
        return Ok(Found::Empty);
    }
    let row = if has_schema_column(tx, "application")? {
        tx.query_opt("SELECT application, version FROM webhookd_schema", &[])?
    } else {
        None
    };
    // A table of the same name but other column types is another program's too: read with
    // `try_get`, which refuses a type mismatch instead of panicking.
    let ours = row.and_then(|row| match row.try_get::<_, &str>(0) {
        Ok(application) if application == APPLICATION => row.try_get::<_, i64>(1).ok(),
        _ => None,
    });
    match ours {
        Some(version) => Ok(Found::Ours(version)),
        None => bail!(
            "{shown} holds tables of another program, not webhookd's; it was left unchanged. Give --db an empty database."
        ),
    }
}

/// Whether `webhookd_schema` (in the current schema) has the column `column`.
fn has_schema_column(tx: &mut Transaction<'_>, column: &str) -> anyhow::Result<bool> {
    Ok(tx
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM information_schema.columns
                             WHERE table_schema = current_schema()
                               AND table_name = 'webhookd_schema' AND column_name = $1::text)",
            &[&column],
        )?
        .get(0))
}

/// Applies every upgrade step, then every tuning step, the database has not had yet.
pub fn upgrade(client: &mut Client, shown: &str) -> anyhow::Result<()> {
    upgrade_with(client, shown, UPGRADES)?;
    tune(client, shown, TUNING)
}

/// Applies the tuning steps past the count in `webhookd_schema.tuning` (a column added, at 0,
/// by the first binary that has tuning steps), each in its own transaction under the upgrade
/// lock. Writes nothing when the database has them all.
fn tune(client: &mut Client, shown: &str, steps: &[&str]) -> anyhow::Result<()> {
    loop {
        let mut tx = client.transaction()?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&UPGRADE_LOCK])?;
        let counted = has_schema_column(&mut tx, "tuning")?;
        let done: i64 = if counted {
            tx.query_one("SELECT tuning FROM webhookd_schema", &[])?
                .get(0)
        } else {
            0
        };
        // Dropping `tx` when there is nothing to do rolls back a transaction that wrote nothing.
        let Some(step) = usize::try_from(done).ok().and_then(|d| steps.get(d)) else {
            return Ok(());
        };
        if !counted {
            tx.batch_execute(
                "ALTER TABLE webhookd_schema ADD COLUMN tuning BIGINT NOT NULL DEFAULT 0",
            )?;
        }
        tx.batch_execute(step)
            .with_context(|| format!("tuning step {} of {shown} failed", done + 1))?;
        tx.execute("UPDATE webhookd_schema SET tuning = $1", &[&(done + 1)])?;
        tx.commit()
            .with_context(|| format!("tuning step {} of {shown} failed", done + 1))?;
        tracing::info!(
            step = done + 1,
            "PostgreSQL: applied tuning step {}",
            done + 1
        );
    }
}

/// [`upgrade`] over the given steps (tests use more steps than the binary has).
fn upgrade_with(client: &mut Client, shown: &str, steps: &[&str]) -> anyhow::Result<()> {
    let latest = steps.len() as i64;
    let mut from = None;
    loop {
        let mut tx = client.transaction()?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&UPGRADE_LOCK])?;
        let version = match inspect(&mut tx, shown)? {
            Found::Empty => 0,
            Found::Ours(version) => version,
        };
        if version > latest {
            bail!(
                "{shown} was written by a newer webhookd (schema version {version}, this binary knows {latest}); it was left unchanged. Upgrade webhookd."
            );
        }
        // Dropping `tx` when there is nothing to do rolls back a transaction that wrote nothing.
        let Some(step) = usize::try_from(version).ok().and_then(|v| steps.get(v)) else {
            crate::store::log_schema_upgrade("PostgreSQL", from, version);
            return Ok(());
        };
        from.get_or_insert(version);
        tx.batch_execute(step).with_context(|| {
            format!(
                "schema upgrade of {shown} to version {} failed",
                version + 1
            )
        })?;
        if version == 0 {
            tx.batch_execute(
                "CREATE TABLE webhookd_schema (
                     single      BOOLEAN PRIMARY KEY DEFAULT true CHECK (single),
                     application TEXT NOT NULL,
                     version     BIGINT NOT NULL
                 )",
            )?;
            tx.execute(
                "INSERT INTO webhookd_schema (application, version) VALUES ($1, 1)",
                &[&APPLICATION],
            )?;
        } else {
            tx.execute("UPDATE webhookd_schema SET version = $1", &[&(version + 1)])?;
        }
        tx.commit().with_context(|| {
            format!(
                "schema upgrade of {shown} to version {} failed",
                version + 1
            )
        })?;
    }
}

/// Hidden entry for the integration tests: open with extra upgrade steps after the binary's
/// own, to exercise a real upgrade of an existing database.
#[doc(hidden)]
pub fn upgrade_with_extra(client: &mut Client, shown: &str, extra: &[&str]) -> anyhow::Result<()> {
    let steps: Vec<&str> = UPGRADES.iter().chain(extra).copied().collect();
    upgrade_with(client, shown, &steps)?;
    tune(client, shown, TUNING)
}
