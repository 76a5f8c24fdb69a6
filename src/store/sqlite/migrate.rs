//! Schema versioning: `schema.sql` is version 1; later versions append upgrade steps here.
//! Upgrades are forward-only, each in its own transaction; a newer or foreign file is refused
//! before anything is written to it.

use anyhow::{Context, bail};
use rusqlite::Connection;
use std::path::Path;

/// `PRAGMA application_id` of a webhookd database: "WHKD".
const APPLICATION_ID: i64 = 0x5748_4B44;

/// Upgrade steps: entry `i` takes the schema from version `i` to `i + 1`.
const UPGRADES: &[&str] = &[
    include_str!("../../../schema.sql"),
    include_str!("../../../migrations/health.sql"),
    include_str!("../../../migrations/schedule_catchup_overlap.sql"),
    include_str!("../../../migrations/delivery_controls.sql"),
    include_str!("../../../migrations/replay_guard.sql"),
    include_str!("../../../migrations/visibility.sql"),
    include_str!("../../../migrations/lease.sql"),
    include_str!("../../../migrations/key_scopes.sql"),
    include_str!("../../../migrations/traces.sql"),
    include_str!("../../../migrations/schedule_windows.sql"),
    include_str!("../../../migrations/filters.sql"),
    include_str!("../../../migrations/request_headers.sql"),
    include_str!("../../../migrations/task_counts.sql"),
    include_str!("../../../migrations/key_generation.sql"),
    include_str!("../../../migrations/target_generation.sql"),
    include_str!("../../../migrations/replay_guard_by_time.sql"),
    include_str!("../../../migrations/pending_counted.sql"),
    include_str!("../../../migrations/event_task_range.sql"),
    include_str!("../../../migrations/claim_index_predicate.sql"),
    include_str!("../../../migrations/tasks_app_dropped.sql"),
    include_str!("../../../migrations/in_order_head_late.sql"),
];

/// The schema version this binary writes.
pub const SCHEMA_VERSION: i64 = UPGRADES.len() as i64;

/// Refuses a file that is not SQLite, belongs to another program, or is newer than this binary.
pub fn check_is_ours(conn: &Connection, path: &Path) -> anyhow::Result<()> {
    let shown = path.display();
    let read = |pragma: &str| -> anyhow::Result<i64> {
        conn.query_row(&format!("PRAGMA {pragma}"), [], |r| r.get(0))
            .with_context(|| {
                format!(
                    "{shown} is not a SQLite database; give --db a new path or a webhookd database"
                )
            })
    };
    let application_id = read("application_id")?;
    let version = read("user_version")?;
    let tables: i64 = conn
        .query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))
        .with_context(|| format!("{shown} is not a SQLite database"))?;
    let fresh = application_id == 0 && version == 0 && tables == 0;
    if !fresh && application_id != APPLICATION_ID {
        bail!(
            "{shown} is a SQLite database of another program, not webhookd's; it was left unchanged. Give --db a new path."
        );
    }
    if version > SCHEMA_VERSION {
        bail!(
            "{shown} was written by a newer webhookd (schema version {version}, this binary knows {SCHEMA_VERSION}); it was left unchanged. Upgrade webhookd."
        );
    }
    Ok(())
}

/// Applies every upgrade step the file has not had yet.
pub fn upgrade(conn: &mut Connection) -> anyhow::Result<()> {
    let mut from = None;
    loop {
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Exclusive)?;
        let version: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        let Some(step) = usize::try_from(version).ok().and_then(|v| UPGRADES.get(v)) else {
            crate::store::log_schema_upgrade("SQLite", from, version);
            return Ok(());
        };
        from.get_or_insert(version);
        tx.execute_batch(step)
            .with_context(|| format!("schema upgrade to version {} failed", version + 1))?;
        tx.pragma_update(None, "application_id", APPLICATION_ID)?;
        tx.pragma_update(None, "user_version", version + 1)?;
        tx.commit()?;
    }
}
