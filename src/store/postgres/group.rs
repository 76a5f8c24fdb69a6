//! Signed publishes in flight at the same moment written by one statement on PostgreSQL: one
//! executor start, one commit and one round trip for the group, each publish still committed
//! before its answer (docs/dev/storage.md, "Publishes grouped into one statement on PostgreSQL").

use super::events::{COLUMNS, from_row};
use super::tasks::{TaskColumns, insert_tasks_sql};
use super::{Backing, Sql};
use crate::store::StoreError;
use crate::store::events::{Event, NewEvent};
use crate::store::replay::FirstUse;
use crate::store::tasks::{NewTask, TaskKind};
use crate::trace::TaskTrace;
use postgres::Row;
use postgres::types::ToSql;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Condvar, Mutex, MutexGuard};

/// How many publish statements (a group's or a lone publish's) run at once: one, so that the
/// next group gathers behind it, as SQLite's writes gather behind a commit. Measured against two
/// and three (BENCHMARKS.md, "Publishes grouped into one statement on PostgreSQL"): one formed
/// the largest groups and delivered the most.
const RUNNING: usize = 1;
/// The most publishes one statement writes.
const MAX_GROUP: usize = 64;

/// The combiner a [`super::PgStore`] holds: a publish that finds [`RUNNING`] statements under
/// way (or others queued) queues its copy here; the first of the queued to find a statement's slot free leads, and
/// writes what is queued (up to [`MAX_GROUP`]) in one statement on its own connection.
#[derive(Default)]
pub struct PublishGroups {
    state: Mutex<State>,
    /// Signalled when an outcome is posted or a slot frees.
    changed: Condvar,
    groups: AtomicU64,
    members: AtomicU64,
    failed: AtomicU64,
}

#[derive(Default)]
struct State {
    running: usize,
    next_ticket: u64,
    queue: VecDeque<(u64, Publish)>,
    /// Per ticket of a publish a leader took: its outcome.
    outcomes: HashMap<u64, Outcome>,
}

/// How often publishes were grouped: statements of more than one publish, the publishes they
/// wrote, and those of them that failed (their publishes then ran alone).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupCounts {
    pub groups: u64,
    pub members: u64,
    pub failed: u64,
}

/// What a publish's statement found: the event when it was written, and whether the app's
/// target generation and the key generation were the ones the publish held (neither written
/// nor moved: a replay).
#[derive(Debug, Clone)]
pub(super) struct Stated {
    pub event: Option<Event>,
    pub targets_held: bool,
    pub key_held: bool,
}

impl Stated {
    /// A publish's row as its statement returns it, alone or in a group: the event's columns
    /// (NULL when nothing was written), then both generations' tests.
    pub(super) fn of_row(row: &Row) -> Result<Stated, postgres::Error> {
        let written: Option<i64> = row.try_get(0)?;
        Ok(Stated {
            event: written.map(|_| from_row(row)).transpose()?,
            targets_held: row.try_get(8)?,
            key_held: row.try_get(9)?,
        })
    }
}

/// What a group's leader posts for each of its other members.
enum Outcome {
    /// Written (or not) by the group's statement, committed.
    Stated(Stated),
    /// The group's statement failed, so nothing of it committed: the member runs alone.
    Alone,
    /// The statement committed but the member's row could not be read back: it fails, and is
    /// not run again (its pair is recorded, so a rerun would be refused as a replay).
    Unread(String),
}

/// The outcome of [`PublishGroups::write`].
pub(super) enum Turn<'g> {
    /// Run the publish's own statement: alone, holding a statement's slot until it drops
    /// (nothing was queued), or without one (its group's statement failed, nothing of it
    /// committed).
    Alone(Option<Slot<'g>>),
    /// Written (or not) by a group's statement, committed.
    Stated(Stated),
    /// Its group's statement committed, but what it wrote for this publish could not be read.
    Unread(String),
}

/// A statement's slot, given back when dropped.
pub(super) struct Slot<'g>(&'g PublishGroups);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        lock(&self.0.state).running -= 1;
        self.0.changed.notify_all();
    }
}

/// A publish handed to a group: owned copies of what its statement writes.
pub(super) struct Publish {
    app_id: String,
    event_name: String,
    event_key: Option<String>,
    payload: String,
    now_ms: i64,
    /// The app's target generation the tasks were chosen at.
    generation: i64,
    pair: FirstUse,
    tasks: Vec<OwnedTask>,
}

struct OwnedTask {
    app_id: String,
    schedule_id: Option<i64>,
    endpoint_id: i64,
    task_type: TaskKind,
    payload: String,
    run_at: i64,
    max_attempts: i64,
    now_ms: i64,
    trace: TaskTrace,
}

impl Publish {
    pub(super) fn new(
        event: &NewEvent<'_>,
        generation: i64,
        pair: &FirstUse,
        tasks: &[NewTask<'_>],
    ) -> Self {
        Publish {
            app_id: event.app_id.to_string(),
            event_name: event.event_name.to_string(),
            event_key: event.event_key.map(str::to_string),
            payload: event.payload.to_string(),
            now_ms: event.now_ms,
            generation,
            pair: pair.clone(),
            tasks: tasks
                .iter()
                .map(|t| OwnedTask {
                    app_id: t.app_id.to_string(),
                    schedule_id: t.schedule_id,
                    endpoint_id: t.endpoint_id,
                    task_type: t.task_type,
                    payload: t.payload.to_string(),
                    run_at: t.run_at,
                    max_attempts: t.max_attempts,
                    now_ms: t.now_ms,
                    trace: t.trace,
                })
                .collect(),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl PublishGroups {
    /// How often publishes were grouped so far.
    pub fn counts(&self) -> GroupCounts {
        GroupCounts {
            groups: self.groups.load(Relaxed),
            members: self.members.load(Relaxed),
            failed: self.failed.load(Relaxed),
        }
    }

    /// A publish's turn: alone with a statement's slot when one is free and nothing is queued
    /// (today's single statement, so nothing waits at low load); else its copy (`publish()`)
    /// queues until a group's statement has written it, or until a slot frees and it leads a
    /// group itself on `c`, its own connection.
    pub(super) fn write<B: Backing>(
        &self,
        c: &mut Sql<B>,
        publish: impl FnOnce() -> Publish,
    ) -> Turn<'_> {
        let mut s = lock(&self.state);
        if s.running < RUNNING && s.queue.is_empty() {
            s.running += 1;
            return Turn::Alone(Some(Slot(self)));
        }
        let ticket = s.next_ticket;
        s.next_ticket += 1;
        s.queue.push_back((ticket, publish()));
        loop {
            if let Some(outcome) = s.outcomes.remove(&ticket) {
                return match outcome {
                    Outcome::Stated(stated) => Turn::Stated(stated),
                    Outcome::Alone => Turn::Alone(None),
                    Outcome::Unread(why) => Turn::Unread(why),
                };
            }
            if s.running < RUNNING
                && let Some(at) = s.queue.iter().position(|(t, _)| *t == ticket)
            {
                s.running += 1;
                let slot = Slot(self);
                let own = s.queue.remove(at).expect("found just now").1;
                let others: Vec<(u64, Publish)> = {
                    let n = s.queue.len().min(MAX_GROUP - 1);
                    s.queue.drain(..n).collect()
                };
                drop(s);
                if others.is_empty() {
                    return Turn::Alone(Some(slot));
                }
                return self.lead(c, own, others);
            }
            s = self.changed.wait(s).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Writes `own` and `others` in one statement, posts the others' outcomes, returns its own.
    fn lead<B: Backing>(
        &self,
        c: &mut Sql<B>,
        own: Publish,
        others: Vec<(u64, Publish)>,
    ) -> Turn<'_> {
        let (tickets, mut group): (Vec<u64>, Vec<Publish>) = others.into_iter().unzip();
        group.insert(0, own);
        let mut answer = Answer {
            groups: self,
            tickets,
            outcomes: None,
        };
        let outcomes = match write_group(c, &group) {
            Ok(outcomes) => {
                self.groups.fetch_add(1, Relaxed);
                self.members.fetch_add(group.len() as u64, Relaxed);
                outcomes
            }
            Err(e) => {
                tracing::debug!(error = %e, members = group.len(), "a group of publishes failed; each runs alone");
                self.failed.fetch_add(1, Relaxed);
                return Turn::Alone(None);
            }
        };
        let mut outcomes = outcomes.into_iter();
        let own = outcomes.next();
        answer.outcomes = Some(outcomes.collect());
        drop(answer);
        match own {
            Some(Outcome::Stated(stated)) => Turn::Stated(stated),
            Some(Outcome::Unread(why)) => Turn::Unread(why),
            Some(Outcome::Alone) | None => {
                Turn::Unread("the group's statement returned no row".into())
            }
        }
    }
}

/// Posts the outcomes of a group's other members when dropped: theirs, or (the statement failed,
/// or the leader unwound) [`Outcome::Alone`], so that each runs alone. No member waits forever.
struct Answer<'g> {
    groups: &'g PublishGroups,
    tickets: Vec<u64>,
    outcomes: Option<Vec<Outcome>>,
}

impl Drop for Answer<'_> {
    fn drop(&mut self) {
        let mut outcomes = self.outcomes.take().map(Vec::into_iter);
        let mut s = lock(&self.groups.state);
        for ticket in self.tickets.drain(..) {
            let outcome = match &mut outcomes {
                None => Outcome::Alone,
                Some(written) => written.next().unwrap_or_else(|| {
                    Outcome::Unread("the group's statement returned no row for it".into())
                }),
            };
            s.outcomes.insert(ticket, outcome);
        }
        drop(s);
        self.groups.changed.notify_all();
    }
}

/// The group's statement: per publish (`p`, numbered by `n`) whether both generations held
/// (`g`); the first publish of each replay pair among those that held (`first`, so that two
/// members with one pair are one write and one replay, as one after the other); the pairs
/// recorded (`pair`, a replay changes no row); an event id drawn for each publish whose pair was
/// recorded (`w`, materialized so that rows map back) and its event and tasks; one row per
/// publish, in order, as a lone publish's statement returns it (`events.rs`).
fn group_sql() -> String {
    let tasks = insert_tasks_sql(1, "w.id", "JOIN w ON w.n = u.event_id");
    format!(
        "WITH p AS MATERIALIZED (
             SELECT * FROM unnest($13::text[], $14::text[], $15::text[], $16::text[], $17::int8[],
                                  $18::int8[], $19::int8[], $20::text[], $21::text[], $22::int8[],
                                  $23::int8[], $24::int8[], $25::int8[])
                  WITH ORDINALITY AS p(app_id, event_name, event_key, payload, task_count, now_ms,
                                       generation, key_id, signature, sent_at, expires_at,
                                       pair_now, key_generation, n)),
         g AS MATERIALIZED (
             SELECT p.*,
                    coalesce((SELECT t.generation FROM target_generation t WHERE t.app_id = p.app_id), 0)
                        = p.generation AS targets_held,
                    coalesce((SELECT k.generation FROM key_generation k WHERE k.id = 1), 0)
                        = p.key_generation AS key_held
               FROM p),
         first AS MATERIALIZED (
             SELECT DISTINCT ON (sent_at, key_id, signature) * FROM g WHERE targets_held AND key_held
              ORDER BY sent_at, key_id, signature, n),
         pair AS (
             INSERT INTO replay_guard AS r (key_id, signature, sent_at, expires_at)
             SELECT key_id, signature, sent_at, expires_at FROM first ORDER BY sent_at, key_id, signature
             ON CONFLICT (sent_at, key_id, signature) DO UPDATE SET expires_at = excluded.expires_at
             WHERE r.expires_at < (SELECT f.pair_now FROM first f
                                    WHERE (f.sent_at, f.key_id, f.signature)
                                        = (excluded.sent_at, excluded.key_id, excluded.signature))
             RETURNING sent_at, key_id, signature),
         w AS MATERIALIZED (
             SELECT f.n, f.app_id, f.event_name, f.event_key, f.payload, f.task_count, f.now_ms,
                    nextval(pg_get_serial_sequence('events', 'id')) AS id
               FROM first f JOIN pair USING (sent_at, key_id, signature) ORDER BY f.n),
         e AS (
             INSERT INTO events (id, app_id, event_name, event_key, payload, status, task_count, created_at)
             SELECT id, app_id, event_name, event_key, payload, 'dispatched', task_count, now_ms
               FROM w ORDER BY n
             RETURNING {COLUMNS}),
         t AS ({tasks})
         SELECT e.*, g.targets_held, g.key_held
           FROM g LEFT JOIN w USING (n) LEFT JOIN e ON e.id = w.id
          ORDER BY g.n"
    )
}

/// Runs the group's statement on `c`: one [`Outcome`] per publish of `group`, in order.
/// `Err`: the statement failed and nothing of it committed.
fn write_group<B: Backing>(c: &mut Sql<B>, group: &[Publish]) -> Result<Vec<Outcome>, StoreError> {
    static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(group_sql);
    // Each task carries the number of its publish (1-based) in its event id column.
    let tasks: Vec<NewTask<'_>> = (1_i64..)
        .zip(group)
        .flat_map(|(n, p)| {
            p.tasks.iter().map(move |t| NewTask {
                app_id: &t.app_id,
                schedule_id: t.schedule_id,
                event_id: Some(n),
                endpoint_id: t.endpoint_id,
                task_type: t.task_type,
                payload: &t.payload,
                run_at: t.run_at,
                max_attempts: t.max_attempts,
                now_ms: t.now_ms,
                trace: t.trace,
            })
        })
        .collect();
    let columns = TaskColumns::new(&tasks);
    let column = |f: fn(&Publish) -> i64| group.iter().map(f).collect::<Vec<i64>>();
    let text = |f: fn(&Publish) -> &str| group.iter().map(f).collect::<Vec<&str>>();
    let app_ids = text(|p| &p.app_id);
    let event_names = text(|p| &p.event_name);
    let event_keys: Vec<Option<&str>> = group.iter().map(|p| p.event_key.as_deref()).collect();
    let payloads = text(|p| &p.payload);
    let task_counts = column(|p| i64::try_from(p.tasks.len()).unwrap_or(i64::MAX));
    let nows = column(|p| p.now_ms);
    let generations = column(|p| p.generation);
    let key_ids = text(|p| &p.pair.key_id);
    let signatures = text(|p| &p.pair.signature);
    let sents = column(|p| p.pair.sent_ms);
    let expires = column(|p| p.pair.expires_ms);
    let pair_nows = column(|p| p.pair.now_ms);
    let key_generations = column(|p| p.pair.generation);
    let mut params: Vec<&(dyn ToSql + Sync)> = columns.params().to_vec();
    params.extend([
        &app_ids as &(dyn ToSql + Sync),
        &event_names,
        &event_keys,
        &payloads,
        &task_counts,
        &nows,
        &generations,
        &key_ids,
        &signatures,
        &sents,
        &expires,
        &pair_nows,
        &key_generations,
    ]);
    let rows = c.query(&SQL, &params)?;
    // From here the statement has committed: a row that cannot be read fails its publish, which
    // is not run again.
    if rows.len() != group.len() {
        let why = format!(
            "a group of {} publishes returned {} rows",
            group.len(),
            rows.len()
        );
        return Ok(group.iter().map(|_| Outcome::Unread(why.clone())).collect());
    }
    Ok(rows
        .iter()
        .map(|row| {
            Stated::of_row(row).map_or_else(|e| Outcome::Unread(e.to_string()), Outcome::Stated)
        })
        .collect())
}
