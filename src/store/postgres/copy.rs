//! `webhookd migrate` (docs/design.md §16): copies every row of a SQLite database into an empty
//! PostgreSQL database of the same schema version, with the same ids, in one PostgreSQL
//! transaction (binary `COPY` per table) read from one SQLite snapshot.
//!
//! Tables and columns are read from both schemas rather than written down here, and must match
//! exactly, so a future schema step cannot silently leave a column (or a table) out of the copy:
//! only the foreign-key order of the tables is listed, and a table missing from it is an error.

use anyhow::{Context, bail};
use postgres::binary_copy::BinaryCopyInWriter;
use postgres::types::{ToSql, Type};
use postgres::{GenericClient, Transaction};
use rusqlite::types::ValueRef;
use std::collections::BTreeSet;

/// Every webhookd table, parents before the tables that refer to them.
const ORDER: &[&str] = &[
    "api_keys",
    "key_generation",
    "target_generation",
    "retry_policies",
    "endpoints",
    "schedules",
    "schedule_firings",
    "events",
    "tasks",
    "attempts",
    "replay_guard",
    "health_probe",
];

/// SQLite's own derived tables, kept by its triggers and absent on PostgreSQL: not copied
/// (`task_counts`: docs/dev/storage.md "Task totals and the tasks indexes").
const SQLITE_ONLY: &[&str] = &["task_counts"];

/// The PostgreSQL bookkeeping table, written by `store::postgres::open`, not copied.
const MARKER_TABLE: &str = "webhookd_schema";

/// The target database already holds webhookd records: nothing was copied.
#[derive(Debug)]
pub struct NotEmpty(pub Vec<(String, i64)>);

impl std::fmt::Display for NotEmpty {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let tables: Vec<String> = self
            .0
            .iter()
            .map(|(table, rows)| format!("{table}: {rows} rows"))
            .collect();
        write!(
            f,
            "the target database is not empty ({}); migrate only copies into an empty database, \
             and nothing was changed. Give --to a new database.",
            tables.join(", ")
        )
    }
}

impl std::error::Error for NotEmpty {}

/// What was copied: rows per table in copy order, and how many `running` tasks became
/// `pending`.
#[derive(Debug, Default)]
pub struct Copied {
    pub tables: Vec<(String, u64)>,
    pub requeued: u64,
}

/// One column of the target: its name and PostgreSQL type.
struct Column {
    name: String,
    kind: Type,
}

/// Copies every table of `source` into `target`, which must hold webhookd's schema at the same
/// version and no records (else [`NotEmpty`]). `running` tasks arrive as `pending`, due at
/// once, as a restart would make them (`tasks::requeue_running`); `now_ms` is that instant.
/// Nothing is written unless everything was copied and counted.
pub fn copy(
    source: &rusqlite::Connection,
    target: &mut postgres::Client,
    now_ms: i64,
) -> anyhow::Result<Copied> {
    let mut tx = target.transaction()?;
    let tables = matching_tables(source, &mut tx)?;
    // Keep other writers (a node started too early, a second migrate) out until commit, so the
    // emptiness seen here still holds when the copy commits.
    tx.batch_execute(&format!(
        "LOCK TABLE {} IN EXCLUSIVE MODE",
        tables.join(", ")
    ))?;
    let filled = filled_tables(&mut tx)?;
    if !filled.is_empty() {
        return Err(NotEmpty(filled).into());
    }
    // One read snapshot of the source: a server still writing to it cannot tear the copy.
    let snapshot =
        rusqlite::Transaction::new_unchecked(source, rusqlite::TransactionBehavior::Deferred)?;
    let mut copied = Copied::default();
    for table in &tables {
        let columns = matching_columns(&snapshot, &mut tx, table)?;
        let rows = copy_table(&snapshot, &mut tx, table, &columns, now_ms, &mut copied)?;
        let expected: i64 =
            snapshot.query_row(&format!("SELECT count(*) FROM \"{table}\""), [], |r| {
                r.get(0)
            })?;
        let landed: i64 = tx
            .query_one(&format!("SELECT count(*) FROM {table}"), &[])?
            .get(0);
        if rows != expected as u64 || landed != expected {
            bail!(
                "{table}: {expected} rows in the SQLite database but {landed} copied; nothing was \
                 changed in the target"
            );
        }
        copied.tables.push((table.to_string(), rows));
    }
    snapshot.finish()?;
    restart_identities(&mut tx, &tables)?;
    tx.commit().context("the copy could not be committed")?;
    Ok(copied)
}

/// The tables to copy, in copy order, after checking that both databases hold exactly the
/// tables of [`ORDER`].
fn matching_tables(
    source: &rusqlite::Connection,
    target: &mut Transaction<'_>,
) -> anyhow::Result<Vec<&'static str>> {
    let in_source: BTreeSet<String> = source
        .prepare(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'",
        )?
        .query_map([], |r| r.get::<_, String>(0))?
        .filter(|name| !matches!(name, Ok(name) if SQLITE_ONLY.contains(&name.as_str())))
        .collect::<Result<_, _>>()?;
    let in_target: BTreeSet<String> = target
        .query(
            "SELECT tablename::text FROM pg_tables
              WHERE schemaname = current_schema() AND tablename <> $1",
            &[&MARKER_TABLE],
        )?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let known: BTreeSet<String> = ORDER.iter().map(|t| t.to_string()).collect();
    for (side, found) in [("SQLite", &in_source), ("PostgreSQL", &in_target)] {
        if let Some(extra) = found.difference(&known).next() {
            bail!(
                "the {side} database holds a table `{extra}` this webhookd's migrate does not know \
                 how to order; nothing was copied (a bug: add it to store::postgres::copy::ORDER)"
            );
        }
        if let Some(missing) = known.difference(found).next() {
            bail!(
                "the {side} database has no table `{missing}`; both sides must be at the same \
                 schema version. Nothing was copied."
            );
        }
    }
    Ok(ORDER.to_vec())
}

/// The target's columns of `table` (in its order) after checking both sides have the same
/// column names.
fn matching_columns(
    source: &rusqlite::Connection,
    target: &mut Transaction<'_>,
    table: &str,
) -> anyhow::Result<Vec<Column>> {
    let in_source: BTreeSet<String> = source
        .prepare("SELECT name FROM pragma_table_info(?1)")?
        .query_map([table], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    let mut columns = Vec::new();
    for row in target.query(
        "SELECT a.attname::text, a.atttypid
           FROM pg_attribute a
          WHERE a.attrelid = $1::text::regclass AND a.attnum > 0 AND NOT a.attisdropped
          ORDER BY a.attnum",
        &[&table],
    )? {
        let oid: u32 = row.get(1);
        let kind = Type::from_oid(oid)
            .with_context(|| format!("{table}: a column of an unknown type (oid {oid})"))?;
        columns.push(Column {
            name: row.get(0),
            kind,
        });
    }
    let in_target: BTreeSet<String> = columns.iter().map(|c| c.name.clone()).collect();
    if in_source != in_target {
        let only = |a: &BTreeSet<String>, b: &BTreeSet<String>| {
            a.difference(b).cloned().collect::<Vec<_>>().join(", ")
        };
        bail!(
            "{table}: the columns differ (only in SQLite: [{}]; only in PostgreSQL: [{}]); both \
             sides must be at the same schema version. Nothing was copied.",
            only(&in_source, &in_target),
            only(&in_target, &in_source)
        );
    }
    Ok(columns)
}

/// One value on its way to PostgreSQL, typed as the target column is.
enum Cell {
    Int(Option<i64>),
    Real(Option<f64>),
    Text(Option<String>),
    Bool(Option<bool>),
}

impl Cell {
    fn sql(&self) -> &(dyn ToSql + Sync) {
        match self {
            Cell::Int(v) => v,
            Cell::Real(v) => v,
            Cell::Text(v) => v,
            Cell::Bool(v) => v,
        }
    }

    /// SQLite's value converted to the target column's type; a value that does not fit (text
    /// in an integer column) is an error naming the column, never a silent change.
    fn from_sqlite(value: ValueRef<'_>, kind: &Type, column: &str) -> anyhow::Result<Cell> {
        let unfit = || {
            anyhow::anyhow!(
                "{column}: a {:?} value does not fit {kind}",
                value.data_type()
            )
        };
        Ok(match *kind {
            Type::INT8 | Type::INT4 | Type::INT2 => Cell::Int(match value {
                ValueRef::Null => None,
                ValueRef::Integer(i) => Some(i),
                _ => return Err(unfit()),
            }),
            Type::FLOAT8 | Type::FLOAT4 => Cell::Real(match value {
                ValueRef::Null => None,
                ValueRef::Real(r) => Some(r),
                ValueRef::Integer(i) => Some(i as f64),
                _ => return Err(unfit()),
            }),
            Type::TEXT | Type::VARCHAR => Cell::Text(match value {
                ValueRef::Null => None,
                ValueRef::Text(t) => Some(
                    String::from_utf8(t.to_vec())
                        .map_err(|_| anyhow::anyhow!("{column}: text that is not UTF-8"))?,
                ),
                _ => return Err(unfit()),
            }),
            Type::BOOL => Cell::Bool(match value {
                ValueRef::Null => None,
                ValueRef::Integer(i) => Some(i != 0),
                _ => return Err(unfit()),
            }),
            _ => bail!("{column}: the column type {kind} is not supported by migrate"),
        })
    }
}

/// Streams one table with binary `COPY`; returns the rows written.
fn copy_table(
    source: &rusqlite::Connection,
    target: &mut Transaction<'_>,
    table: &str,
    columns: &[Column],
    now_ms: i64,
    copied: &mut Copied,
) -> anyhow::Result<u64> {
    let names: Vec<String> = columns.iter().map(|c| format!("\"{}\"", c.name)).collect();
    let names = names.join(", ");
    let types: Vec<Type> = columns.iter().map(|c| c.kind.clone()).collect();
    let requeue = (table == "tasks")
        .then(|| Requeue::new(columns))
        .transpose()?;
    let mut select = source.prepare(&format!("SELECT {names} FROM \"{table}\""))?;
    let mut rows = select.query([])?;
    let sink = target.copy_in(&format!(
        "COPY {table} ({names}) FROM STDIN (FORMAT binary)"
    ))?;
    let mut writer = BinaryCopyInWriter::new(sink, &types);
    let mut cells = Vec::with_capacity(columns.len());
    while let Some(row) = rows.next()? {
        cells.clear();
        for (i, column) in columns.iter().enumerate() {
            let name = format!("{table}.{}", column.name);
            cells.push(Cell::from_sqlite(row.get_ref(i)?, &column.kind, &name)?);
        }
        if let Some(requeue) = &requeue
            && requeue.apply(&mut cells, now_ms)
        {
            copied.requeued += 1;
        }
        let values: Vec<&(dyn ToSql + Sync)> = cells.iter().map(Cell::sql).collect();
        writer
            .write(&values)
            .with_context(|| format!("copying {table}"))?;
    }
    writer.finish().with_context(|| format!("copying {table}"))
}

/// Positions of the task columns a `running` task's copy changes.
struct Requeue {
    status: usize,
    next_attempt_at: usize,
    updated_at: usize,
}

impl Requeue {
    fn new(columns: &[Column]) -> anyhow::Result<Requeue> {
        let at = |name: &str| {
            columns
                .iter()
                .position(|c| c.name == name)
                .with_context(|| format!("tasks has no column {name}"))
        };
        Ok(Requeue {
            status: at("status")?,
            next_attempt_at: at("next_attempt_at")?,
            updated_at: at("updated_at")?,
        })
    }

    /// Makes a `running` task `pending`, due now at the latest, exactly as
    /// `tasks::requeue_running` does at start-up: the attempt it was in is made again.
    fn apply(&self, cells: &mut [Cell], now_ms: i64) -> bool {
        if !matches!(&cells[self.status], Cell::Text(Some(s)) if s == "running") {
            return false;
        }
        cells[self.status] = Cell::Text(Some("pending".into()));
        if let Cell::Int(next) = &mut cells[self.next_attempt_at] {
            *next = Some(next.map_or(now_ms, |n| n.min(now_ms)));
        }
        if let Cell::Int(updated) = &mut cells[self.updated_at] {
            *updated = Some(now_ms);
        }
        true
    }
}

/// Moves each identity column's sequence past the copied ids, so the next insert does not
/// collide with a copied row. Empty tables keep their sequence untouched.
fn restart_identities(target: &mut Transaction<'_>, tables: &[&str]) -> anyhow::Result<()> {
    for table in tables {
        let identities: Vec<String> = target
            .query(
                "SELECT column_name::text FROM information_schema.columns
                  WHERE table_schema = current_schema() AND table_name = $1
                    AND is_identity = 'YES'",
                &[table],
            )?
            .iter()
            .map(|r| r.get(0))
            .collect();
        for column in identities {
            target.execute(
                &format!(
                    "SELECT setval(pg_get_serial_sequence($1, $2), max(\"{column}\")) FROM {table}
                      HAVING max(\"{column}\") IS NOT NULL"
                ),
                &[table, &column],
            )?;
        }
    }
    Ok(())
}

/// The webhookd tables of `target` that hold rows, with their counts.
fn filled_tables(target: &mut impl GenericClient) -> anyhow::Result<Vec<(String, i64)>> {
    let mut filled = Vec::new();
    for table in ORDER {
        let rows: i64 = target
            .query_one(&format!("SELECT count(*) FROM {table}"), &[])?
            .get(0);
        if rows > 0 {
            filled.push((table.to_string(), rows));
        }
    }
    Ok(filled)
}
