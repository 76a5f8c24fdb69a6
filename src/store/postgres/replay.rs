//! The `replay_guard` table on PostgreSQL: accepted (key id, signature) pairs, shared by every
//! node on the database, so a request replayed to another node is refused too (docs/design.md §2).
//!
//! A signed `GET`'s pair rides with its read ([`PgTx::query_carrying`]): one autocommit
//! statement records the pair and reads the resource, so the read costs one checkout and one
//! round trip (docs/dev/storage.md, "A read's replay record on PostgreSQL"); a publish's pair
//! rides with its event's statement the same way (`events.rs`; "A publish in one statement on
//! PostgreSQL").

use crate::store::postgres::PgTx;
use crate::store::replay::{FirstUse, KEY_GENERATION_UNLESS_RECORDED};
use crate::store::{ReplayQueries, StoreError};
use postgres::types::ToSql;
use postgres::{GenericClient, Row};
use std::sync::LazyLock;

/// Records a (key, signature) pair (`$first`, `$first + 1`) signed at `$first + 2` until
/// `$first + 3`, or takes over one that expired before `$first + 4`; a replay changes no row.
fn record_pair(first: usize) -> String {
    record_pair_if(first, None)
}

/// [`record_pair`], with `only`: only when that `FROM … WHERE …` clause yields a row (a write
/// that carries the pair records it only when it writes too: `events.rs`).
pub(super) fn record_pair_if(first: usize, only: Option<&str>) -> String {
    let [key, signature, sent, expires, now] = std::array::from_fn(|i| format!("${}", first + i));
    let rows = match only {
        None => format!("VALUES ({key}, {signature}, {sent}, {expires})"),
        Some(only) => {
            format!("SELECT {key}::text, {signature}::text, {sent}::int8, {expires}::int8 {only}")
        }
    };
    format!(
        "INSERT INTO replay_guard (key_id, signature, sent_at, expires_at)
         {rows}
         ON CONFLICT (sent_at, key_id, signature) DO UPDATE SET expires_at = excluded.expires_at
         WHERE replay_guard.expires_at < {now}"
    )
}

/// [`record_pair`] returning the key generation for the row it changed (no row for a replay).
fn record_pair_at_generation(first: usize) -> String {
    record_pair(first)
        + " RETURNING coalesce((SELECT generation FROM key_generation WHERE id = 1), 0) AS generation"
}

/// The pairs' statements, parameters `$1`…`$5`.
static RECORD: LazyLock<String> = LazyLock::new(|| record_pair(1));
static RECORD_AT_GENERATION: LazyLock<String> = LazyLock::new(|| record_pair_at_generation(1));
/// [`RECORD_AT_GENERATION`] with `synchronous_commit` off for the statement's own transaction.
static RECORD_AT_GENERATION_UNSYNCED: LazyLock<String> =
    LazyLock::new(|| record_pair_at_generation(1) + super::store::SYNC_OFF);

/// The pair a read or a write outside a transaction was handed
/// ([`ReplayQueries::carry_first_use`]) and what became of it.
#[derive(Debug, Default)]
pub(super) enum Carried {
    /// None handed over.
    #[default]
    Nothing,
    /// Not recorded yet: the next [`PgTx::query_carrying`] (or a publish's statement,
    /// `events.rs`) records it.
    Pending(FirstUse),
    /// Recorded (or refused as a replay: `None`) by a statement of the read or write.
    Done(Option<i64>),
}

impl<C: GenericClient> PgTx<'_, C> {
    /// Runs `read` (a `SELECT` of at most one row, parameters `$1`… as `params`), carrying the
    /// pair this read was handed when it is still pending: then one autocommit statement
    /// records the pair and reads the row,
    ///
    /// ```sql
    /// WITH pair AS (INSERT INTO replay_guard … RETURNING <key generation>)
    /// SELECT found.*, (SELECT generation FROM pair), set_config('synchronous_commit', 'off', true)
    ///   FROM (VALUES (0)) AS one LEFT JOIN (SELECT *, true FROM (<read>) r) AS found ON true
    /// ```
    ///
    /// one row whether or not the resource exists, so that a replay is seen either way. Its
    /// commit does not wait for a WAL flush (as `write_unsynced`'s record); the read sees the
    /// database as of the statement's start, as it would have just after a separate record.
    /// The row returned holds `read`'s columns first, as `read` alone would.
    pub(super) fn query_carrying(
        &mut self,
        read: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, StoreError> {
        let Carried::Pending(pair) = &self.pair else {
            return Ok(self.c.query_opt(read, params)?);
        };
        let sql = format!(
            "WITH pair AS ({}) SELECT found.*, (SELECT generation FROM pair),
                    set_config('synchronous_commit', 'off', true)
               FROM (VALUES (0)) AS one LEFT JOIN (SELECT *, true FROM ({read}) r) AS found ON true",
            record_pair_at_generation(params.len() + 1)
        );
        let mut all: Vec<&(dyn ToSql + Sync)> = params.to_vec();
        all.extend([
            &pair.key_id as &(dyn ToSql + Sync),
            &pair.signature,
            &pair.sent_ms,
            &pair.expires_ms,
            &pair.now_ms,
        ]);
        let row = match self.c.query_one(&sql, &all) {
            Ok(row) => row,
            // The store refuses writes: the read alone, the pair left pending, so that the
            // caller may serve the read and keep the pair in memory.
            Err(e) => match StoreError::from(e) {
                StoreError::DiskFull(_) | StoreError::Unwritable(_) => {
                    return Ok(self.c.query_opt(read, params)?);
                }
                other => return Err(other),
            },
        };
        let n = row.len();
        let generation: Option<i64> = row.try_get(n - 2)?;
        let found: Option<bool> = row.try_get(n - 3)?;
        self.pair = Carried::Done(generation);
        Ok(found.is_some().then_some(row))
    }
}

impl<C: GenericClient> ReplayQueries for PgTx<'_, C> {
    fn first_use_of_signature(
        &mut self,
        key_id: &str,
        signature: &str,
        sent_ms: i64,
        expires_ms: i64,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let c = &mut *self.c;
        let changed = c.execute(
            &RECORD,
            &[&key_id, &signature, &sent_ms, &expires_ms, &now_ms],
        )?;
        Ok(changed == 1)
    }

    /// One statement, so one round trip: the generation comes back with the inserted (or taken
    /// over) row, and no row comes back for a replay. Under `write_unsynced` (no transaction
    /// block: the statement is its own transaction) the same statement turns
    /// `synchronous_commit` off for that transaction (`set_config(…, true)`), so its commit
    /// does not wait for a WAL flush and costs no extra round trip.
    fn first_use_at_key_generation(
        &mut self,
        key_id: &str,
        signature: &str,
        sent_ms: i64,
        expires_ms: i64,
        now_ms: i64,
    ) -> Result<Option<i64>, StoreError> {
        let sql = if self.unsynced {
            &RECORD_AT_GENERATION_UNSYNCED
        } else {
            &RECORD_AT_GENERATION
        };
        let c = &mut *self.c;
        let row = c.query_opt(sql, &[&key_id, &signature, &sent_ms, &expires_ms, &now_ms])?;
        Ok(row.map(|r| r.try_get(0)).transpose()?)
    }

    fn key_generation_unless_recorded(
        &mut self,
        key_id: &str,
        signature: &str,
        sent_ms: i64,
        now_ms: i64,
    ) -> Result<Option<i64>, StoreError> {
        let c = &mut *self.c;
        let row = c.query_one(
            KEY_GENERATION_UNLESS_RECORDED,
            &[&sent_ms, &key_id, &signature, &now_ms],
        )?;
        let recorded: bool = row.try_get(0)?;
        Ok((!recorded).then(|| row.try_get(1)).transpose()?)
    }

    /// A read or `write_statement`'s write may carry it: it runs on a connection outside any
    /// transaction block, where each statement commits on its own ([`PgTx::query_carrying`],
    /// a publish's statement in `events.rs`); a transaction may not.
    fn carry_first_use(&mut self, pair: FirstUse) -> bool {
        if self.autocommit {
            self.pair = Carried::Pending(pair);
        }
        self.autocommit
    }

    /// Recorded on its own (the same statement as `write_unsynced`'s) when no statement of the
    /// read carried it: a read that failed before it, or whose query does not carry pairs.
    fn carried_first_use(&mut self) -> Result<Option<i64>, StoreError> {
        match std::mem::take(&mut self.pair) {
            Carried::Done(generation) => Ok(generation),
            Carried::Pending(p) => {
                let row = self.c.query_opt(
                    &RECORD_AT_GENERATION_UNSYNCED,
                    &[
                        &p.key_id,
                        &p.signature,
                        &p.sent_ms,
                        &p.expires_ms,
                        &p.now_ms,
                    ],
                )?;
                Ok(row.map(|r| r.try_get(0)).transpose()?)
            }
            Carried::Nothing => Err(StoreError::Other(anyhow::anyhow!(
                "no replay record was handed to this read"
            ))),
        }
    }

    /// Deletes up to `limit` rows that expired before `now_ms` from the oldest end of the
    /// primary key (signed before `sent_before_ms`); returns how many went. Nodes pruning at
    /// once skip each other's rows instead of waiting on them.
    fn prune_replay(
        &mut self,
        now_ms: i64,
        sent_before_ms: i64,
        limit: usize,
    ) -> Result<usize, StoreError> {
        let c = &mut *self.c;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let n = c.execute(
            "DELETE FROM replay_guard WHERE (sent_at, key_id, signature) IN (
                SELECT sent_at, key_id, signature FROM replay_guard
                 WHERE sent_at < $2 AND expires_at < $1
                 ORDER BY sent_at LIMIT $3 FOR UPDATE SKIP LOCKED)",
            &[&now_ms, &sent_before_ms, &limit],
        )?;
        Ok(usize::try_from(n).unwrap_or(usize::MAX))
    }
}
