//! The `replay_guard` table on PostgreSQL: accepted (key id, signature) pairs, shared by every
//! node on the database, so a request replayed to another node is refused too (docs/design.md §2).

use crate::store::postgres::PgTx;
use crate::store::replay::KEY_GENERATION_UNLESS_RECORDED;
use crate::store::{ReplayQueries, StoreError};
use postgres::GenericClient;
use std::collections::HashMap;
use std::sync::{Condvar, Mutex, MutexGuard};

/// Records a (key, signature) pair ($1, $2) signed at $3 until $4, or takes over one that
/// expired before $5; a replay changes no row. A macro, so that the statements below build on it as literals.
macro_rules! record_pair {
    () => {
        "INSERT INTO replay_guard (key_id, signature, sent_at, expires_at) VALUES ($1, $2, $3, $4)
         ON CONFLICT (sent_at, key_id, signature) DO UPDATE SET expires_at = excluded.expires_at
         WHERE replay_guard.expires_at < $5"
    };
}

/// [`record_pair!`] returning the key generation for the row it changed.
macro_rules! record_pair_at_generation {
    () => {
        concat!(
            record_pair!(),
            " RETURNING coalesce((SELECT generation FROM key_generation WHERE id = 1), 0)"
        )
    };
}

/// [`record_pair_at_generation!`] under `write_unsynced`: `synchronous_commit` off for the
/// statement's own transaction (`set_config(…, true)`), so its commit does not wait for a WAL
/// flush and costs no extra round trip.
const RECORD_UNSYNCED: &str = concat!(
    record_pair_at_generation!(),
    ", set_config('synchronous_commit', 'off', true)"
);

/// [`RECORD_UNSYNCED`] for many pairs in one statement (its own transaction): the pairs as
/// arrays, ordered by the primary key so that two nodes' batches lock conflicting rows in the
/// same order; the rows written (new or taken over) come back with the key generation. A
/// takeover compares with the earliest `now` of the batch (a pair whose record expired within
/// the batch's spread of a few ms is judged a replay: the safe side).
const RECORD_BATCH_UNSYNCED: &str = "INSERT INTO replay_guard (key_id, signature, sent_at, expires_at)
     SELECT key_id, signature, sent_at, expires_at
       FROM unnest($1::text[], $2::text[], $3::int8[], $4::int8[]) AS p(key_id, signature, sent_at, expires_at)
      ORDER BY sent_at, key_id, signature
     ON CONFLICT (sent_at, key_id, signature) DO UPDATE SET expires_at = excluded.expires_at
     WHERE replay_guard.expires_at < $5
     RETURNING key_id, signature, sent_at,
               coalesce((SELECT generation FROM key_generation WHERE id = 1), 0),
               set_config('synchronous_commit', 'off', true)";

/// One signed request's pair, as [`ReplayQueries::first_use_at_key_generation`] takes it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Pair {
    key_id: String,
    signature: String,
    sent_ms: i64,
}

/// The signed reads' replay pairs of one node, recorded a batch per statement
/// (docs/dev/storage.md, "A read's replay record on PostgreSQL").
///
/// Each read's pair was an `INSERT` of its own, and under concurrent reads those inserts all
/// land on the newest leaf of `replay_guard`'s primary key (keyed by signed time) and the
/// table's last page: backends waited on each other's buffer locks (`LWLock:BufferContent` in
/// `pg_stat_activity`), a millisecond of execution per insert on two cores. Here the first
/// request to arrive while no batch is under way leads: it takes every pair queued so far and
/// records them in one statement on its own connection, then hands each its answer; pairs that
/// arrive meanwhile wait for the next batch, led by one of them. A pair is still committed
/// before its request goes on, and a replay is still refused on every node: each row's
/// `ON CONFLICT` answers for it as its own statement did. A batch that fails (a lost
/// connection, a conflict with another node's batch) is retried pair by pair, each on its own
/// request's connection, so one bad pair cannot fail another request.
#[derive(Default)]
pub struct PairBatch {
    state: Mutex<Queue>,
    answered: Condvar,
}

#[derive(Default)]
struct Queue {
    waiting: Vec<(u64, Pair, i64, i64)>,
    next: u64,
    leading: bool,
    answers: HashMap<u64, Answer>,
}

/// A pair's answer from a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// Written: the key generation read with it.
    First(i64),
    /// Not written: a replay.
    Replay,
    /// The batch failed: the request records its pair on its own.
    Alone,
}

impl PairBatch {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records `pair` (until `expires_ms`, a takeover judged at `now_ms`) with the pairs queued
    /// beside it; `c` runs the batch when this call leads one, and the pair alone when its batch
    /// failed. `None`: a replay.
    fn record<C: GenericClient>(
        &self,
        c: &mut super::Sql<'_, &mut C>,
        pair: Pair,
        expires_ms: i64,
        now_ms: i64,
    ) -> Result<Option<i64>, StoreError> {
        let mut queue = self.lock();
        let id = queue.next;
        queue.next += 1;
        queue.waiting.push((id, pair.clone(), expires_ms, now_ms));
        let answer = loop {
            if let Some(answer) = queue.answers.remove(&id) {
                break answer;
            }
            if queue.leading {
                queue = self.answered.wait(queue).unwrap_or_else(|e| e.into_inner());
                continue;
            }
            queue.leading = true;
            let batch = std::mem::take(&mut queue.waiting);
            drop(queue);
            let answers = record_batch(c, &batch);
            queue = self.lock();
            queue.leading = false;
            queue.answers.extend(answers);
            self.answered.notify_all();
        };
        drop(queue);
        match answer {
            Answer::First(generation) => Ok(Some(generation)),
            Answer::Replay => Ok(None),
            Answer::Alone => record_alone(c, &pair, expires_ms, now_ms),
        }
    }
}

/// The answers of one batch, by waiting id. The same pair twice in a batch is written once: the
/// later ones are replays of it.
fn record_batch<C: GenericClient>(
    c: &mut super::Sql<'_, &mut C>,
    batch: &[(u64, Pair, i64, i64)],
) -> Vec<(u64, Answer)> {
    let mut first: HashMap<&Pair, u64> = HashMap::with_capacity(batch.len());
    let (mut keys, mut signatures, mut sent, mut expires) = (vec![], vec![], vec![], vec![]);
    let mut now = i64::MAX;
    for (id, pair, expires_ms, now_ms) in batch {
        if first.contains_key(pair) {
            continue;
        }
        first.insert(pair, *id);
        keys.push(pair.key_id.as_str());
        signatures.push(pair.signature.as_str());
        sent.push(pair.sent_ms);
        expires.push(*expires_ms);
        now = now.min(*now_ms);
    }
    let written = c
        .query(
            RECORD_BATCH_UNSYNCED,
            &[&keys, &signatures, &sent, &expires, &now],
        )
        .and_then(|rows| {
            rows.iter()
                .map(|r| {
                    let pair = Pair {
                        key_id: r.try_get(0)?,
                        signature: r.try_get(1)?,
                        sent_ms: r.try_get(2)?,
                    };
                    Ok((pair, r.try_get::<_, i64>(3)?))
                })
                .collect::<Result<HashMap<Pair, i64>, postgres::Error>>()
        });
    match written {
        Ok(written) => batch
            .iter()
            .map(|(id, pair, ..)| {
                let answer = match written.get(pair) {
                    Some(&generation) if first.get(pair) == Some(id) => Answer::First(generation),
                    _ => Answer::Replay,
                };
                (*id, answer)
            })
            .collect(),
        Err(e) => {
            tracing::debug!(error = %e, pairs = batch.len(), "replay pairs: the batch failed; each is recorded alone");
            batch.iter().map(|(id, ..)| (*id, Answer::Alone)).collect()
        }
    }
}

/// [`RECORD_UNSYNCED`] for one pair.
fn record_alone<C: GenericClient>(
    c: &mut super::Sql<'_, &mut C>,
    pair: &Pair,
    expires_ms: i64,
    now_ms: i64,
) -> Result<Option<i64>, StoreError> {
    let row = c.query_opt(
        RECORD_UNSYNCED,
        &[
            &pair.key_id,
            &pair.signature,
            &pair.sent_ms,
            &expires_ms,
            &now_ms,
        ],
    )?;
    Ok(row.map(|r| r.try_get(0)).transpose()?)
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
            record_pair!(),
            &[&key_id, &signature, &sent_ms, &expires_ms, &now_ms],
        )?;
        Ok(changed == 1)
    }

    /// One statement, so one round trip: the generation comes back with the inserted (or taken
    /// over) row, and no row comes back for a replay. Under `write_unsynced` (no transaction
    /// block: the statement is its own transaction) the statement is [`RECORD_UNSYNCED`], or,
    /// with the store's [`PairBatch`], one batch of the pairs of the requests arriving together.
    fn first_use_at_key_generation(
        &mut self,
        key_id: &str,
        signature: &str,
        sent_ms: i64,
        expires_ms: i64,
        now_ms: i64,
    ) -> Result<Option<i64>, StoreError> {
        if self.unsynced {
            let pair = Pair {
                key_id: key_id.to_owned(),
                signature: signature.to_owned(),
                sent_ms,
            };
            return match self.pairs {
                Some(batch) => batch.record(&mut self.c, pair, expires_ms, now_ms),
                None => record_alone(&mut self.c, &pair, expires_ms, now_ms),
            };
        }
        let c = &mut *self.c;
        let row = c.query_opt(
            record_pair_at_generation!(),
            &[&key_id, &signature, &sent_ms, &expires_ms, &now_ms],
        )?;
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
