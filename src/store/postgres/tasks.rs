//! The `tasks` table on PostgreSQL: [`TaskQueries`] on a [`PgTx`], plus the per-task
//! lease that lets several nodes share one database (docs/design.md §16, docs/dev/storage.md).
//!
//! A claim marks a task `running` with `claimed_by` = the claiming node and `lease_until` = now
//! plus the endpoint's timeout plus [`LEASE_MARGIN_MS`]. Claims lock with `FOR UPDATE SKIP
//! LOCKED`, so concurrent nodes take disjoint rows without waiting on each other. A result is
//! recorded only by the node that still holds the claim; a running task whose lease ran out
//! goes back to `pending` (`rescue_expired_leases`) and another node may take it.

use super::endpoints::{HealthColumns, health_update};
use super::list::{Filters, list_page};
use crate::store::Page;
use crate::store::attempts::Attempt;
use crate::store::endpoints::HealthDelta;
use crate::store::endpoints::Limits;
use crate::store::json::{Stored, TaskPayload};
use crate::store::postgres::{Backing, PgTx, Sql};
use crate::store::tasks::{AfterAttempt, Claimed, Finish, NewTask, PendingEndpoint, RetryFilter};
use crate::store::tasks::{IfBusy, Recorded, record_attempts_in_turn};
use crate::store::tasks::{Task, TaskFilter, TaskStatus};
use crate::store::{StoreError, TaskQueries};
use crate::trace::TaskTrace;
use postgres::GenericClient;
use postgres::Row;
use postgres::types::ToSql;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// What a lease adds to the endpoint's timeout (ms): a live node has given up on its request
/// (and recorded it) well before its lease ends, so no other node rescues a task that is still
/// being delivered.
pub const LEASE_MARGIN_MS: i64 = 30_000;

const COLUMNS: &str = "id, app_id, schedule_id, event_id, endpoint_id, task_type, payload, status, run_at, attempts, max_attempts, next_attempt_at, last_status_code, last_error, finished_at, created_at, updated_at, trace_id";

fn from_row(r: &Row) -> Result<Task, postgres::Error> {
    Ok(Task {
        id: r.try_get(0)?,
        app_id: r.try_get(1)?,
        schedule_id: r.try_get(2)?,
        event_id: r.try_get(3)?,
        endpoint_id: r.try_get(4)?,
        task_type: r.try_get(5)?,
        payload: r.try_get::<_, Stored<TaskPayload>>(6)?.0,
        status: r.try_get(7)?,
        run_at: r.try_get(8)?,
        attempts: r.try_get(9)?,
        max_attempts: r.try_get(10)?,
        next_attempt_at: r.try_get(11)?,
        last_status_code: r.try_get(12)?,
        last_error: r.try_get(13)?,
        finished_at: r.try_get(14)?,
        created_at: r.try_get(15)?,
        updated_at: r.try_get(16)?,
        trace_id: r.try_get(17)?,
    })
}

/// The row `id` of `table` if it belongs to `app_id`.
pub(super) fn get_of_app<T>(
    c: &mut Sql<impl Backing>,
    table: &str,
    columns: &str,
    app_id: &str,
    id: i64,
    from_row: impl Fn(&Row) -> Result<T, postgres::Error>,
) -> Result<Option<T>, postgres::Error> {
    c.query_opt(
        &format!("SELECT {columns} FROM {table} WHERE app_id = $1 AND id = $2"),
        &[&app_id, &id],
    )?
    .as_ref()
    .map(from_row)
    .transpose()
}

fn limit_of(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

impl<C: GenericClient> TaskQueries for PgTx<'_, C> {
    /// Inserts a pending task and returns its id.
    fn insert_task(&mut self, t: &NewTask<'_>) -> Result<i64, StoreError> {
        let c = &mut *self.c;
        let (trace_id, trace_parent, trace_flags) = t.trace.to_columns();
        let id: i64 = c.query_one(
            "INSERT INTO tasks (app_id, schedule_id, event_id, endpoint_id, task_type, payload, status, run_at,
                                attempts, max_attempts, next_attempt_at, created_at, updated_at,
                                trace_id, trace_parent, trace_flags)
             VALUES ($1, $2, $3, $4, $5, $6, 'pending', $7, 0, $8, $7, $9, $9, $10, $11, $12)
             RETURNING id",
            &[
                &t.app_id,
                &t.schedule_id,
                &t.event_id,
                &t.endpoint_id,
                &t.task_type,
                &t.payload,
                &t.run_at,
                &t.max_attempts,
                &t.now_ms,
                &trace_id,
                &trace_parent,
                &trace_flags,
            ],
        )?
        .try_get(0)?;
        self.tasks_due();
        Ok(id)
    }

    /// One statement for all of them (arrays unnested), so a batch of firings costs one round
    /// trip. The rows are inserted in the order of `tasks` (`ORDER BY ord`), so their identity
    /// ids ascend in that order: the returned ids, sorted, line up with `tasks`.
    fn insert_tasks(&mut self, tasks: &[NewTask<'_>]) -> Result<Vec<i64>, StoreError> {
        if tasks.is_empty() {
            return Ok(Vec::new());
        }
        let c = &mut *self.c;
        let columns = TaskColumns::new(tasks);
        let sql = format!("{} RETURNING id", insert_tasks_sql(1, "u.event_id", ""));
        let mut ids = c
            .query(&sql, &columns.params())?
            .iter()
            .map(|r| r.try_get(0))
            .collect::<Result<Vec<i64>, _>>()?;
        ids.sort_unstable();
        self.tasks_due();
        Ok(ids)
    }

    fn get_task(&mut self, app_id: &str, id: i64) -> Result<Option<Task>, StoreError> {
        let c = &mut *self.c;
        Ok(get_of_app(c, "tasks", COLUMNS, app_id, id, from_row)?)
    }

    /// One page, newest first, and the total count of matches (`retrying` = pending tasks that
    /// failed at least one attempt).
    fn list_tasks(
        &mut self,
        app_id: &str,
        f: &TaskFilter,
        page: Page,
    ) -> Result<(i64, Vec<Task>), StoreError> {
        let c = &mut *self.c;
        let filters = f.conditions(app_id, |filters: Filters, event_id| {
            filters.eq("event_id", Some(event_id))
        });
        Ok(list_page(c, "tasks", COLUMNS, &filters, page, from_row)?)
    }

    /// A recursive CTE steps from endpoint to endpoint, one index seek each, in one round trip;
    /// the outer `LIMIT` stops the recursion. An endpoint with a fresh claim floor (in a store's
    /// write transaction) is looked at from its floor, like its claim ([`ClaimFloors`]): each
    /// step takes the first pending entry before the next such endpoint, or else that
    /// endpoint's first entry at or above its floor (a row with `found` false when it has
    /// none, so the walk goes on past it).
    fn endpoints_with_pending(
        &mut self,
        after: i64,
        before: i64,
        limit: usize,
    ) -> Result<Vec<PendingEndpoint>, StoreError> {
        let (known, floors) = self
            .floors
            .map(|f| f.fresh(after, before))
            .unwrap_or_default();
        let c = &mut *self.c;
        let sql = format!(
            "WITH RECURSIVE known AS (
                 SELECT k.id, k.floor FROM unnest($4::int8[], $5::int8[]) AS k(id, floor)),
             pending AS (
                 SELECT $1::int8 AS endpoint_id, NULL::int8 AS next_attempt_at, false AS found
                 UNION ALL
                 SELECT n.endpoint_id, n.next_attempt_at, n.found FROM pending p CROSS JOIN LATERAL (
                     SELECT * FROM (
                         (SELECT endpoint_id, next_attempt_at, true AS found FROM tasks
                           WHERE {DUE_PENDING} AND endpoint_id > p.endpoint_id
                             AND endpoint_id < $3 AND next_attempt_at IS NOT NULL
                             AND endpoint_id < coalesce((SELECT min(k.id) FROM known k
                                                          WHERE k.id > p.endpoint_id), $3)
                           ORDER BY endpoint_id, next_attempt_at LIMIT 1)
                         UNION ALL
                         (SELECT k.id, d.next_attempt_at, d.next_attempt_at IS NOT NULL
                            FROM known k LEFT JOIN LATERAL (
                                SELECT t.next_attempt_at FROM tasks t
                                 WHERE {DUE_PENDING} AND t.endpoint_id = k.id
                                   AND t.next_attempt_at >= k.floor
                                 ORDER BY t.next_attempt_at LIMIT 1) d ON true
                           WHERE k.id > p.endpoint_id AND k.id < $3
                           ORDER BY k.id LIMIT 1)) s
                      ORDER BY s.endpoint_id LIMIT 1) n)
             SELECT p.endpoint_id, p.next_attempt_at, e.id IS NOT NULL, e.status = 'enabled',
                    e.rate_limit_per_sec, e.max_in_flight
               FROM (SELECT * FROM pending WHERE found LIMIT $2) p
               LEFT JOIN endpoints e ON e.id = p.endpoint_id
              ORDER BY p.endpoint_id"
        );
        Ok(
            c.query(&sql, &[&after, &limit_of(limit), &before, &known, &floors])?
                .iter()
                .map(|r| {
                    let exists: bool = r.try_get(2)?;
                    Ok::<_, postgres::Error>(PendingEndpoint {
                        endpoint_id: r.try_get(0)?,
                        earliest_due: r.try_get(1)?,
                        limits: exists
                            .then(|| {
                                Ok::<_, postgres::Error>(Limits {
                                    enabled: r.try_get(3)?,
                                    rate_limit_per_sec: r.try_get(4)?,
                                    max_in_flight: r.try_get(5)?,
                                })
                            })
                            .transpose()?,
                    })
                })
                .collect::<Result<_, _>>()?,
        )
    }

    fn in_order_head(&mut self, endpoint_id: i64) -> Result<Option<(i64, i64)>, StoreError> {
        let c = &mut *self.c;
        Ok(c.query_opt(
            "SELECT id, next_attempt_at FROM tasks
                 WHERE status = 'pending' AND endpoint_id = $1 ORDER BY run_at, id LIMIT 1",
            &[&endpoint_id],
        )?
        .map(|r| {
            let due: Option<i64> = r.try_get(1)?;
            Ok::<_, postgres::Error>((r.try_get(0)?, due.unwrap_or(i64::MAX)))
        })
        .transpose()?)
    }

    /// Claims for `node` up to `limit` due tasks of one endpoint, earliest due first (ties by id).
    /// Rows another node is claiming right now are skipped, not waited for. In a store's write
    /// transaction the search starts at the endpoint's [`ClaimFloors`] floor, not at its first
    /// index entry.
    fn claim_endpoint_tasks(
        &mut self,
        endpoint_id: i64,
        now_ms: i64,
        limit: usize,
    ) -> Result<Vec<Claimed>, StoreError> {
        let node = self.node;
        let floor = self.floors.and_then(|f| f.floor(endpoint_id));
        let sql = format!(
            "WITH due AS (
                 SELECT id FROM tasks
                  WHERE {DUE_PENDING} AND endpoint_id = $1 AND next_attempt_at <= $2
                    AND next_attempt_at >= $5
                  ORDER BY next_attempt_at, id LIMIT $3
                  FOR UPDATE SKIP LOCKED)
             UPDATE tasks t SET {}
               FROM due WHERE t.id = due.id AND {STILL_PENDING}
             {CLAIM_RETURNING}{}",
            claim_set(4, 2),
            self.sync_off()
        );
        let c = &mut *self.c;
        let mut claimed: Vec<_> = c
            .query(
                &sql,
                &[
                    &endpoint_id,
                    &now_ms,
                    &limit_of(limit),
                    &node,
                    &floor.unwrap_or(i64::MIN),
                ],
            )?
            .iter()
            .map(claimed_from)
            .collect::<Result<_, _>>()?;
        claimed.sort_by_key(|(due, c)| (*due, c.id));
        if let Some(floors) = self.floors {
            let latest = claimed.iter().filter_map(|(due, _)| *due).max();
            floors.claimed(endpoint_id, floor.is_none(), latest);
        }
        Ok(claimed.into_iter().map(|(_, c)| c).collect())
    }

    /// [`TaskQueries::claim_endpoint_tasks`] for every endpoint of a round in one statement:
    /// each endpoint's search (from its floor, `LIMIT` its own) is a `LATERAL` subquery over
    /// the arrays, so the index work per endpoint is the same as its own claim's, and the round
    /// pays one round trip and one statement's overhead instead of one per endpoint.
    fn claim_endpoints_tasks(
        &mut self,
        wanted: &[(i64, usize)],
        now_ms: i64,
    ) -> Result<Vec<Vec<Claimed>>, StoreError> {
        if wanted.len() < 2 {
            return wanted
                .iter()
                .map(|&(endpoint_id, limit)| self.claim_endpoint_tasks(endpoint_id, now_ms, limit))
                .collect();
        }
        let floors: Vec<Option<i64>> = wanted
            .iter()
            .map(|&(id, _)| self.floors.and_then(|f| f.floor(id)))
            .collect();
        let ids: Vec<i64> = wanted.iter().map(|&(id, _)| id).collect();
        let limits: Vec<i64> = wanted.iter().map(|&(_, n)| limit_of(n)).collect();
        let lows: Vec<i64> = floors.iter().map(|f| f.unwrap_or(i64::MIN)).collect();
        let sql = format!(
            "WITH due AS (
                 SELECT d.id FROM unnest($1::int8[], $2::int8[], $3::int8[]) AS w(endpoint_id, n, floor)
                 CROSS JOIN LATERAL (
                     SELECT id FROM tasks
                      WHERE {DUE_PENDING} AND endpoint_id = w.endpoint_id
                        AND next_attempt_at <= $4 AND next_attempt_at >= w.floor
                      ORDER BY next_attempt_at, id LIMIT w.n
                      FOR UPDATE SKIP LOCKED) d)
             UPDATE tasks t SET {}
               FROM due WHERE t.id = due.id AND {STILL_PENDING}
             {CLAIM_RETURNING}{}",
            claim_set(5, 4),
            self.sync_off()
        );
        let node = self.node;
        let c = &mut *self.c;
        let rows = c.query(&sql, &[&ids, &limits, &lows, &now_ms, &node])?;
        let mut by_endpoint: HashMap<i64, Vec<(Option<i64>, Claimed)>> = HashMap::new();
        for r in &rows {
            let (due, claimed) = claimed_from(r)?;
            by_endpoint
                .entry(claimed.endpoint_id)
                .or_default()
                .push((due, claimed));
        }
        Ok(wanted
            .iter()
            .zip(floors)
            .map(|(&(endpoint_id, _), floor)| {
                let mut claimed = by_endpoint.remove(&endpoint_id).unwrap_or_default();
                claimed.sort_by_key(|(due, c)| (*due, c.id));
                if let Some(floors) = self.floors {
                    let latest = claimed.iter().filter_map(|(due, _)| *due).max();
                    floors.claimed(endpoint_id, floor.is_none(), latest);
                }
                claimed.into_iter().map(|(_, c)| c).collect()
            })
            .collect())
    }

    /// Claims for `node` one task of an in-order endpoint by id, if it is still pending, due, and
    /// the endpoint's head with nothing of the endpoint running (on any node).
    ///
    /// Two statements under a savepoint: the endpoint row is locked first, so concurrent claimers of
    /// one endpoint take turns; the update then runs with a snapshot taken after the lock was
    /// granted, so it sees a task another node claimed (or handed back for a retry) meanwhile. In
    /// one statement the checks would read the snapshot from before the wait, and two nodes could
    /// each start a task of the endpoint.
    fn claim_task(&mut self, id: i64, now_ms: i64) -> Result<Option<Claimed>, StoreError> {
        let c = &mut *self.c;
        let node = self.node;
        let mut tx = c.transaction()?;
        tx.execute(
            "SELECT 1 FROM endpoints WHERE id = (SELECT endpoint_id FROM tasks WHERE id = $1)
             FOR NO KEY UPDATE",
            &[&id],
        )?;
        let sql = format!(
            "UPDATE tasks t SET {}
              WHERE t.id = $1 AND t.status = 'pending' AND t.next_attempt_at <= $2
                AND NOT EXISTS (SELECT 1 FROM tasks o
                                 WHERE o.status = 'running' AND o.endpoint_id = t.endpoint_id
                                   AND o.id <> t.id)
                AND NOT EXISTS (SELECT 1 FROM tasks o
                                 WHERE o.status = 'pending' AND o.endpoint_id = t.endpoint_id
                                   AND (o.run_at, o.id) < (t.run_at, t.id))
             {CLAIM_RETURNING}",
            claim_set(3, 2)
        );
        let claimed = tx
            .query_opt(&sql, &[&id, &now_ms, &node])?
            .map(|r| claimed_from(&r).map(|(_, claimed)| claimed))
            .transpose()?;
        tx.commit()?;
        Ok(claimed)
    }

    /// Records the result of attempt `attempt` on a task `node` holds. A task whose endpoint was
    /// deleted while it was in flight is `canceled` instead of going back to `pending`. Returns
    /// false (and changes nothing) when the task is not `running` under `node`'s claim of that
    /// attempt — handed back, or rescued after the lease ran out and perhaps claimed by another
    /// node, or already recorded (by a round whose later statement failed, and perhaps
    /// claimed again since) — so the caller leaves the attempt unrecorded: a result is
    /// recorded once however often it is retried.
    #[allow(clippy::too_many_arguments)]
    fn finish_attempt(
        &mut self,
        task_id: i64,
        attempt: i64,
        after: AfterAttempt,
        last_status_code: Option<i64>,
        last_error: Option<&str>,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let c = &mut *self.c;
        let node = self.node;
        let (status, next_attempt_at) = after_columns(after);
        let n = c.execute(
            "UPDATE tasks SET
                status = CASE WHEN $2::text = 'pending' AND NOT EXISTS
                    (SELECT 1 FROM endpoints e WHERE e.id = tasks.endpoint_id) THEN 'canceled' ELSE $2::text END,
                finished_at = CASE WHEN $2::text <> 'pending' OR NOT EXISTS
                    (SELECT 1 FROM endpoints e WHERE e.id = tasks.endpoint_id) THEN $7::bigint END,
                next_attempt_at = CASE WHEN EXISTS
                    (SELECT 1 FROM endpoints e WHERE e.id = tasks.endpoint_id) THEN $4::bigint END,
                attempts = $3, last_status_code = $5, last_error = $6, updated_at = $7,
                claimed_by = NULL, lease_until = NULL
             WHERE id = $1 AND status = 'running' AND claimed_by = $8 AND attempts + 1 = $3",
            &[
                &task_id,
                &status,
                &attempt,
                &next_attempt_at,
                &last_status_code,
                &last_error,
                &now_ms,
                &node,
            ],
        )?;
        Ok(n == 1)
    }

    /// One `UPDATE … FROM unnest(…)` for distinct tasks, with [`TaskQueries::finish_attempt`]'s
    /// rules row by row; the tasks it returns are the ones recorded.
    ///
    /// Each task is found by its primary key. `status = 'running'` as written would let the
    /// planner walk `tasks_leased` (partial on that predicate) instead and join the batch to
    /// every entry, the dead ones of tasks finished since the last VACUUM included: 280–500
    /// buffers per batch of about seven in `scripts/bench-pg.sh` publish1, twice what the
    /// primary key costs. The same test under `COLLATE "C"` (equal text is equal under every
    /// deterministic collation) does not match the index's predicate, so that plan is out
    /// (docs/dev/storage.md, "PostgreSQL round trips").
    fn finish_attempts(&mut self, results: &[Finish<'_>]) -> Result<Vec<bool>, StoreError> {
        let Some(columns) = FinishColumns::of(results, 2) else {
            return results.iter().map(|f| f.record_alone(self)).collect();
        };
        let node = self.node;
        let c = &mut *self.c;
        let params = columns.params(&node);
        let rows = c.query(FINISH_FROM_UNNEST, &params)?;
        columns.recorded(&rows)
    }

    /// [`TaskQueries::finish_attempts`]'s statement with the attempt rows of the tasks it
    /// recorded inserted by the same statement (a data-modifying `WITH`; `ORDER BY ord`: ids
    /// ascend in the order given, as one insert each would make them), and the health update
    /// of [`EndpointQueries::record_endpoints_health`](crate::store::EndpointQueries::record_endpoints_health)
    /// in it too, done only when the results' update recorded every one. One statement, where
    /// the three took three. With [`IfBusy::Defer`] the health update passes over an endpoint
    /// row another transaction holds (`FOR NO KEY UPDATE SKIP LOCKED`: on several nodes, each
    /// node's round writes the same endpoints' rows, and waited for the others' here) and
    /// returns those endpoints; every row of it returns them, as an array beside the task id.
    fn record_attempts(
        &mut self,
        results: &[Finish<'_>],
        attempts: &[Attempt],
        health: &[(i64, HealthDelta)],
        if_busy: IfBusy,
    ) -> Result<Recorded, StoreError> {
        let Some(columns) =
            FinishColumns::of(results, 1).filter(|_| attempts.len() == results.len())
        else {
            return record_attempts_in_turn(self, results, attempts, health);
        };
        let node = self.node;
        let col = |f: fn(&Attempt) -> i64| attempts.iter().map(f).collect::<Vec<i64>>();
        let (started, durations) = (col(|a| a.started_at), col(|a| a.duration_ms));
        let (bodies, headers) = super::attempts::reply_columns(attempts);
        let health_columns = HealthColumns::of(health);
        let all = i64::try_from(results.len()).unwrap_or(i64::MAX);
        let mut params = columns.params(&node).to_vec();
        params.extend_from_slice(&[&started, &durations, &bodies, &headers]);
        params.extend_from_slice(&health_columns.params());
        params.push(&all);
        let sql = format!(
            "WITH f AS ({FINISH_FROM_UNNEST}),
             a AS (INSERT INTO attempts (task_id, attempt, started_at, duration_ms, status_code,
                                         error, response_body, request_headers)
                   SELECT a.task_id, a.attempt, a.started_at, a.duration_ms, a.status_code,
                          a.error, a.response_body, a.request_headers
                     FROM unnest($1::int8[], $3::int8[], $9::int8[], $10::int8[], $5::int8[],
                                 $6::text[], $11::text[], $12::text[])
                          WITH ORDINALITY AS a(task_id, attempt, started_at, duration_ms,
                                               status_code, error, response_body,
                                               request_headers, ord)
                    WHERE a.task_id IN (SELECT id FROM f)
                    ORDER BY a.ord),
             {}
             SELECT id, (SELECT array_agg(id ORDER BY id) FROM deferred){} FROM f",
            health_update(13, "(SELECT count(*) FROM f) = $18", if_busy),
            self.sync_off()
        );
        let c = &mut *self.c;
        let rows = c.query(&sql, &params)?;
        let recorded = columns.recorded(&rows)?;
        let health_written = recorded.iter().all(|r| *r);
        let deferred = match rows.first() {
            Some(row) => row.try_get::<_, Option<Vec<i64>>>(1)?.unwrap_or_default(),
            None => Vec::new(),
        };
        Ok(Recorded {
            recorded,
            health_written,
            deferred,
        })
    }

    /// Marks a task just inserted in the caller's transaction as `running` under `node`'s claim,
    /// so no dispatcher claims it and `node` can record its result (`POST /endpoints/{id}/test`).
    fn start_task_now(&mut self, id: i64, now_ms: i64) -> Result<(), StoreError> {
        let c = &mut *self.c;
        let node = self.node;
        c.execute(
            &format!(
                "UPDATE tasks t SET {} WHERE t.id = $1 AND t.status = 'pending'",
                claim_set(3, 2)
            ),
            &[&id, &now_ms, &node],
        )?;
        Ok(())
    }

    /// The app a task belongs to.
    fn task_app(&mut self, id: i64) -> Result<Option<String>, StoreError> {
        let c = &mut *self.c;
        Ok(
            c.query_opt("SELECT app_id FROM tasks WHERE id = $1", &[&id])?
                .map(|r| r.try_get(0))
                .transpose()?,
        )
    }

    /// Start-up and shutdown hand-back on PostgreSQL: `node`'s own running tasks, and every expired
    /// lease, go back to `pending`. Another live node's running tasks are left alone.
    fn requeue_running_tasks(&mut self, now_ms: i64) -> Result<usize, StoreError> {
        let c = &mut *self.c;
        let node = self.node;
        let n = hand_back(
            c,
            &format!("claimed_by = $2 OR {LEASE_OVER}"),
            &[&now_ms, &node],
        )?;
        if n > 0 {
            self.tasks_due();
            if let Some(floors) = self.floors {
                floors.reset();
            }
        }
        Ok(n)
    }

    /// Extends `node`'s leases on the given running tasks to now + timeout + margin (a claimed task
    /// waiting in memory for a worker may otherwise outlive its lease). Returns the ids still held:
    /// a task missing from the answer was rescued and must not be sent.
    fn renew_leases(&mut self, ids: &[i64], now_ms: i64) -> Result<Vec<i64>, StoreError> {
        let node = self.node;
        let sql = format!(
            "UPDATE tasks t SET lease_until = $3 + coalesce((SELECT e.timeout_ms FROM endpoints e
                                                                   WHERE e.id = t.endpoint_id), 0)
                                                    + $4
                  WHERE t.id = ANY($2) AND t.status = 'running' AND t.claimed_by = $1
                 RETURNING t.id{}",
            self.sync_off()
        );
        let c = &mut *self.c;
        Ok(c.query(&sql, &[&node, &ids, &now_ms, &LEASE_MARGIN_MS])?
            .iter()
            .map(|r| r.try_get(0))
            .collect::<Result<_, _>>()?)
    }

    /// Running tasks whose lease ended by `now_ms` go back to `pending` (their node died or
    /// stalled): the attempt is made again, by whichever node claims it. Returns how many.
    fn rescue_expired_leases(&mut self, now_ms: i64) -> Result<usize, StoreError> {
        let c = &mut *self.c;
        let n = hand_back(c, LEASE_OVER, &[&now_ms])?;
        if n > 0 {
            self.tasks_due();
            if let Some(floors) = self.floors {
                floors.reset();
            }
        }
        Ok(n)
    }

    /// Cancels pending tasks whose endpoint no longer exists.
    fn cancel_orphan_tasks(&mut self, now_ms: i64) -> Result<usize, StoreError> {
        let c = &mut *self.c;
        let n = c.execute(
            "UPDATE tasks SET status = 'canceled', finished_at = $1, updated_at = $1, next_attempt_at = NULL,
             last_error = coalesce(last_error, 'endpoint deleted')
             WHERE status = 'pending' AND NOT EXISTS (SELECT 1 FROM endpoints e WHERE e.id = tasks.endpoint_id)",
            &[&now_ms],
        )?;
        Ok(usize::try_from(n).unwrap_or(usize::MAX))
    }

    /// `POST /tasks/{id}/cancel`: a pending task becomes `canceled`; false when it is not pending.
    fn cancel_task(&mut self, app_id: &str, id: i64, now_ms: i64) -> Result<bool, StoreError> {
        let c = &mut *self.c;
        let n = c.execute(
            "UPDATE tasks SET status = 'canceled', finished_at = $3, updated_at = $3, next_attempt_at = NULL
             WHERE app_id = $1 AND id = $2 AND status = 'pending'",
            &[&app_id, &id, &now_ms],
        )?;
        Ok(n == 1)
    }

    /// `POST /tasks/{id}/retry` and `POST /tasks/retry`: the failed or canceled tasks among `ids`
    /// (of `app_id`, endpoint still there) go back to `pending`, due now, attempts reset,
    /// `max_attempts` from the endpoint's current policy. Returns the ids it changed.
    fn retry_tasks(
        &mut self,
        app_id: &str,
        ids: &[i64],
        now_ms: i64,
    ) -> Result<Vec<i64>, StoreError> {
        let c = &mut *self.c;
        let default_attempts = i64::from(crate::retry::RetryPolicy::DEFAULT.max_attempts);
        let retried: Vec<i64> = c
            .query(
                "UPDATE tasks SET status = 'pending', attempts = 0, next_attempt_at = $3, finished_at = NULL,
                     updated_at = $3,
                     max_attempts = (SELECT coalesce(p.max_attempts, $4)
                                     FROM endpoints e LEFT JOIN retry_policies p ON p.id = e.retry_policy_id
                                     WHERE e.id = tasks.endpoint_id)
                 WHERE id = ANY($2) AND app_id = $1
                   AND status IN ('failed', 'canceled')
                   AND EXISTS (SELECT 1 FROM endpoints e WHERE e.id = tasks.endpoint_id)
                 RETURNING id",
                &[&app_id, &ids, &now_ms, &default_attempts],
            )?
            .iter()
            .map(|r| r.try_get(0))
            .collect::<Result<_, _>>()?;
        if !retried.is_empty() {
            self.tasks_due();
            if let Some(floors) = self.floors {
                floors.reset();
            }
        }
        Ok(retried)
    }

    /// The ids of the tasks `f` matches whose endpoint still exists, lowest first, at most `limit`.
    fn retryable_task_ids(
        &mut self,
        app_id: &str,
        f: &RetryFilter,
        limit: usize,
    ) -> Result<Vec<i64>, StoreError> {
        let c = &mut *self.c;
        let mut filters = Filters::app(app_id)
            .eq_word("status", Some(f.status))
            .eq("endpoint_id", f.endpoint_id)
            .eq("schedule_id", f.schedule_id)
            .eq("event_id", f.event_id)
            .always("EXISTS (SELECT 1 FROM endpoints e WHERE e.id = tasks.endpoint_id)");
        if let Some(since) = f.since {
            filters = filters.cmp("finished_at", ">=", since);
        }
        if let Some(until) = f.until {
            filters = filters.cmp("finished_at", "<", until);
        }
        let limit = limit_of(limit);
        let mut params = filters.params();
        let sql = format!(
            "SELECT id FROM tasks WHERE {} ORDER BY id LIMIT ${}",
            filters.condition(),
            params.len() + 1
        );
        params.push(&limit);
        Ok(c.query(&sql, &params)?
            .iter()
            .map(|r| r.try_get(0))
            .collect::<Result<_, _>>()?)
    }

    /// Whether a task of `schedule_id` for `endpoint_id` is still `pending` or `running`.
    fn schedule_task_open(
        &mut self,
        schedule_id: i64,
        endpoint_id: i64,
    ) -> Result<bool, StoreError> {
        let c = &mut *self.c;
        Ok(c.query_one(
            "SELECT EXISTS (SELECT 1 FROM tasks WHERE schedule_id = $1 AND endpoint_id = $2
                                AND status IN ('pending', 'running'))",
            &[&schedule_id, &endpoint_id],
        )?
        .try_get(0)?)
    }

    /// How many tasks are in each status, over every app.
    fn count_tasks_by_status(&mut self) -> Result<Vec<(TaskStatus, i64)>, StoreError> {
        let c = &mut *self.c;
        Ok(
            c.query("SELECT status, count(*) FROM tasks GROUP BY status", &[])?
                .iter()
                .map(|r| Ok::<_, postgres::Error>((r.try_get(0)?, r.try_get(1)?)))
                .collect::<Result<_, _>>()?,
        )
    }
}

/// How far behind the latest due time it claimed a node's next claim of an endpoint starts
/// looking (ms): a task whose transaction committed late (a publish that took its time
/// between reading the clock and committing, another node's clock a little behind) is still
/// found at once.
const FLOOR_LAG_MS: i64 = 1_000;

/// How often a node's claim of an endpoint searches from the endpoint's first index entry
/// anyway: what lies below the floor (a task handed back by another node, a firing whose
/// `run_at` is older than the floor) waits at most this long.
const FULL_SCAN_EVERY: Duration = Duration::from_secs(1);

/// Above this many endpoints, floors that would be searched in full anyway are forgotten.
const FLOORS_KEPT: usize = 4096;

/// Where this node's next claim of each endpoint starts looking, in `tasks_endpoint_due`
/// order (docs/dev/storage.md, "The claim's floor").
///
/// A claim moves tasks from `pending` to `running` with a non-HOT update (`status` is in
/// the indexes), so each claimed task leaves its entry in the pending-only
/// `tasks_endpoint_due` until VACUUM removes it; the entries of an endpoint's claimed tasks
/// sort before its pending ones, and a claim that seeks to the endpoint's first entry steps
/// over all of them. Under a backlog the claim grew with every task claimed since the last
/// VACUUM (the index scan of a claim of 8 behind 45,000 claimed tasks read 236 buffers,
/// 20 from a floor: BENCHMARKS.md, "The claim's floor on PostgreSQL").
/// Starting at the latest due time claimed minus [`FLOOR_LAG_MS`] bounds that to the tasks
/// claimed in the last second. What is due below the floor waits for the next full search,
/// at most [`FULL_SCAN_EVERY`] later (at once after this node hands tasks back or retries
/// them, which [`ClaimFloors::reset`]s), so in that window a task may be claimed after one
/// that became due later than it.
pub struct ClaimFloors {
    floors: Mutex<HashMap<i64, Floor>>,
    /// [`FULL_SCAN_EVERY`], or what a test chose.
    full_every: Duration,
}

impl Default for ClaimFloors {
    fn default() -> Self {
        ClaimFloors::new(FULL_SCAN_EVERY)
    }
}

/// One endpoint's floor.
struct Floor {
    /// The lowest `next_attempt_at` the next claim looks at.
    due: i64,
    /// When a claim of the endpoint last searched from its first entry.
    full_at: Instant,
}

impl ClaimFloors {
    /// Floors whose claims search in full at least every `full_every`.
    pub fn new(full_every: Duration) -> Self {
        ClaimFloors {
            floors: Mutex::new(HashMap::new()),
            full_every,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<i64, Floor>> {
        self.floors.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Where the next claim of `endpoint_id` starts; `None`: from its first entry.
    fn floor(&self, endpoint_id: i64) -> Option<i64> {
        self.lock()
            .get(&endpoint_id)
            .filter(|f| f.full_at.elapsed() < self.full_every)
            .map(|f| f.due)
    }

    /// After a claim of `endpoint_id` (`full`: it searched from the first entry) whose latest
    /// claimed task was due at `latest`: the floor never moves down between full searches.
    fn claimed(&self, endpoint_id: i64, full: bool, latest: Option<i64>) {
        let mut floors = self.lock();
        if full && floors.len() >= FLOORS_KEPT {
            let every = self.full_every;
            floors.retain(|_, f| f.full_at.elapsed() < every);
        }
        let now = Instant::now();
        let floor = floors.entry(endpoint_id).or_insert(Floor {
            due: i64::MIN,
            full_at: now,
        });
        if full {
            floor.full_at = now;
        }
        if let Some(latest) = latest {
            floor.due = floor.due.max(latest.saturating_sub(FLOOR_LAG_MS));
        }
    }

    /// The endpoints between `after` and `before` whose floors are fresh, in id order, and
    /// their floors.
    fn fresh(&self, after: i64, before: i64) -> (Vec<i64>, Vec<i64>) {
        let floors = self.lock();
        let mut fresh: Vec<(i64, i64)> = floors
            .iter()
            .filter(|&(&id, f)| id > after && id < before && f.full_at.elapsed() < self.full_every)
            .map(|(&id, f)| (id, f.due))
            .collect();
        fresh.sort_unstable();
        fresh.into_iter().unzip()
    }

    /// Every endpoint's next claim searches from its first entry: tasks went back to
    /// `pending` below their floors.
    fn reset(&self) {
        self.lock().clear();
    }
}

/// The results of [`TaskQueries::finish_attempts`] as the arrays of [`FINISH_FROM_UNNEST`].
struct FinishColumns<'a> {
    ids: Vec<i64>,
    statuses: Vec<&'static str>,
    next_attempts: Vec<Option<i64>>,
    attempts: Vec<i64>,
    codes: Vec<Option<i64>>,
    errors: Vec<Option<&'a str>>,
    nows: Vec<i64>,
}

impl<'a> FinishColumns<'a> {
    /// `None` when the results are not for one statement: fewer than `at_least`, or a task
    /// twice (an `UPDATE … FROM` changes a row once, so only the one-at-a-time form records
    /// both).
    fn of(results: &[Finish<'a>], at_least: usize) -> Option<Self> {
        let ids: Vec<i64> = results.iter().map(|f| f.task_id).collect();
        let mut distinct = ids.clone();
        distinct.sort_unstable();
        distinct.dedup();
        if results.len() < at_least || distinct.len() < ids.len() {
            return None;
        }
        let (statuses, next_attempts) = results.iter().map(|f| after_columns(f.after)).unzip();
        Some(FinishColumns {
            ids,
            statuses,
            next_attempts,
            attempts: results.iter().map(|f| f.attempt).collect(),
            codes: results.iter().map(|f| f.last_status_code).collect(),
            errors: results.iter().map(|f| f.last_error).collect(),
            nows: results.iter().map(|f| f.now_ms).collect(),
        })
    }

    /// `$1`…`$8` of [`FINISH_FROM_UNNEST`].
    fn params<'p>(&'p self, node: &'p &'p str) -> [&'p (dyn ToSql + Sync); 8] {
        [
            &self.ids,
            &self.statuses,
            &self.attempts,
            &self.next_attempts,
            &self.codes,
            &self.errors,
            &self.nows,
            node,
        ]
    }

    /// Whether each result was recorded, in order, from the ids the statement returned.
    fn recorded(&self, rows: &[Row]) -> Result<Vec<bool>, StoreError> {
        let recorded: std::collections::HashSet<i64> = rows
            .iter()
            .map(|r| r.try_get(0))
            .collect::<Result<_, _>>()?;
        Ok(self.ids.iter().map(|id| recorded.contains(id)).collect())
    }
}

/// [`TaskQueries::finish_attempts`]'s statement: the results are `$1`…`$7` (task id, status,
/// attempts, next attempt, status code, error, time), the node `$8`; returns the tasks recorded.
const FINISH_FROM_UNNEST: &str = "UPDATE tasks SET
            status = CASE WHEN r.status = 'pending' AND NOT EXISTS
                (SELECT 1 FROM endpoints e WHERE e.id = tasks.endpoint_id) THEN 'canceled' ELSE r.status END,
            finished_at = CASE WHEN r.status <> 'pending' OR NOT EXISTS
                (SELECT 1 FROM endpoints e WHERE e.id = tasks.endpoint_id) THEN r.now END,
            next_attempt_at = CASE WHEN EXISTS
                (SELECT 1 FROM endpoints e WHERE e.id = tasks.endpoint_id) THEN r.next_attempt_at END,
            attempts = r.attempts, last_status_code = r.status_code, last_error = r.error,
            updated_at = r.now, claimed_by = NULL, lease_until = NULL
           FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::bigint[], $5::bigint[],
                       $6::text[], $7::bigint[])
                AS r(id, status, attempts, next_attempt_at, status_code, error, now)
          WHERE tasks.id = r.id AND (tasks.status COLLATE \"C\") = 'running'
            AND tasks.claimed_by = $8 AND tasks.attempts + 1 = r.attempts
         RETURNING tasks.id";

/// The status and next attempt time a result leaves a task in (before the endpoint check).
fn after_columns(after: AfterAttempt) -> (&'static str, Option<i64>) {
    match after {
        AfterAttempt::Success => ("success", None),
        AfterAttempt::RetryAt(at) => ("pending", Some(at)),
        AfterAttempt::Failed => ("failed", None),
    }
}

/// `SET` of a claim by node `$node` at `$now` (the parameter numbers are the caller's).
fn claim_set(node: usize, now: usize) -> String {
    format!(
        "status = 'running', claimed_by = ${node}, updated_at = ${now},
         lease_until = ${now} + coalesce((SELECT e.timeout_ms FROM endpoints e WHERE e.id = t.endpoint_id), 0)
                       + {LEASE_MARGIN_MS}"
    )
}

/// The pending test of the claims' `due` subqueries and of the walk: `tasks_endpoint_due`'s
/// predicate as the index writes it (step `claim_index_predicate`), so that PostgreSQL can
/// serve them from that index and from no other partial one. Written `status = 'pending'`, it
/// matched `tasks_endpoint_order`'s predicate as well, and a generic plan could read the
/// endpoint's whole backlog in `run_at` order, filter and sort it (BENCHMARKS.md, pgdue).
/// Equal text is equal under every deterministic collation: the same rows as `status =
/// 'pending'`. Unqualified: every query it is written in has one `status`, the task's.
const DUE_PENDING: &str = "(status COLLATE \"C\") = 'pending'";

/// A claim's update finds each task the `due` subquery locked by its primary key, and tests it
/// is still pending. Written `t.status = 'pending'`, that test would match the predicate of
/// `tasks_endpoint_order` (and under `COLLATE "C"`, [`DUE_PENDING`], `tasks_endpoint_due`'s),
/// and a plan made while `tasks` has no statistics (a new database, until autovacuum's first
/// `ANALYZE`), or statistics taken while nothing was pending, walks one of them whole and joins
/// every pending task to the claimed few: the endpoint's whole backlog read per claim, 37–90 ms
/// each, which decided every PostgreSQL benchmark run by when autovacuum first came
/// (BENCHMARKS.md, pgsteady). Under `COLLATE "POSIX"` (another deterministic collation, another expression to
/// the planner) the test matches no index predicate, so the update can only look each task up
/// by its key.
const STILL_PENDING: &str = "(t.status COLLATE \"POSIX\") = 'pending'";

/// What a claim returns of each task; `claimed_from` reads it in this order.
const CLAIM_RETURNING: &str = "RETURNING t.id, t.endpoint_id, t.schedule_id, t.event_id,
    (SELECT event_name FROM events WHERE events.id = t.event_id),
    t.payload, t.attempts + 1, t.max_attempts, t.next_attempt_at,
    coalesce(t.next_attempt_at, t.run_at), t.app_id, t.trace_id, t.trace_parent, t.trace_flags,
    coalesce((SELECT g.generation FROM target_generation g WHERE g.app_id = t.app_id), 0)";

fn claimed_from(r: &Row) -> Result<(Option<i64>, Claimed), postgres::Error> {
    Ok((
        r.try_get(8)?,
        Claimed {
            id: r.try_get(0)?,
            endpoint_id: r.try_get(1)?,
            schedule_id: r.try_get(2)?,
            event_id: r.try_get(3)?,
            event_name: r.try_get(4)?,
            payload: r.try_get(5)?,
            attempt: r.try_get(6)?,
            max_attempts: r.try_get(7)?,
            due_at: r.try_get(9)?,
            app_id: r.try_get(10)?,
            trace: TaskTrace::from_columns(
                r.try_get::<_, Option<&str>>(11)?,
                r.try_get::<_, Option<&str>>(12)?,
                r.try_get(13)?,
            ),
            target_generation: Some(r.try_get(14)?),
        },
    ))
}

/// Which running tasks go back to `pending`: a lease that ended, or none at all (a row no
/// PostgreSQL claim wrote, e.g. copied from a SQLite file).
const LEASE_OVER: &str = "(lease_until IS NULL OR lease_until <= $1)";

/// Hands running tasks back to `pending`, due at the latest now; clears their claim.
fn hand_back(
    c: &mut Sql<impl Backing>,
    which: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<usize, postgres::Error> {
    let n = c.execute(
        &format!(
            "UPDATE tasks SET status = 'pending', claimed_by = NULL, lease_until = NULL,
                    next_attempt_at = LEAST(coalesce(next_attempt_at, $1), $1), updated_at = $1
              WHERE status = 'running' AND ({which})"
        ),
        params,
    )?;
    Ok(usize::try_from(n).unwrap_or(usize::MAX))
}

/// New tasks as the column arrays of [`insert_tasks_sql`], in the order of the tasks.
pub(super) struct TaskColumns<'a> {
    app_ids: Vec<&'a str>,
    schedule_ids: Vec<Option<i64>>,
    event_ids: Vec<Option<i64>>,
    endpoint_ids: Vec<i64>,
    kinds: Vec<&'static str>,
    payloads: Vec<&'a str>,
    run_ats: Vec<i64>,
    max_attempts: Vec<i64>,
    nows: Vec<i64>,
    trace_ids: Vec<String>,
    trace_parents: Vec<String>,
    trace_flags: Vec<i64>,
}

impl<'a> TaskColumns<'a> {
    pub(super) fn new(tasks: &[NewTask<'a>]) -> Self {
        let mut columns = TaskColumns {
            app_ids: Vec::with_capacity(tasks.len()),
            schedule_ids: Vec::with_capacity(tasks.len()),
            event_ids: Vec::with_capacity(tasks.len()),
            endpoint_ids: Vec::with_capacity(tasks.len()),
            kinds: Vec::with_capacity(tasks.len()),
            payloads: Vec::with_capacity(tasks.len()),
            run_ats: Vec::with_capacity(tasks.len()),
            max_attempts: Vec::with_capacity(tasks.len()),
            nows: Vec::with_capacity(tasks.len()),
            trace_ids: Vec::with_capacity(tasks.len()),
            trace_parents: Vec::with_capacity(tasks.len()),
            trace_flags: Vec::with_capacity(tasks.len()),
        };
        for t in tasks {
            let (trace_id, trace_parent, trace_flags) = t.trace.to_columns();
            columns.app_ids.push(t.app_id);
            columns.schedule_ids.push(t.schedule_id);
            columns.event_ids.push(t.event_id);
            columns.endpoint_ids.push(t.endpoint_id);
            columns.kinds.push(t.task_type.as_str());
            columns.payloads.push(t.payload);
            columns.run_ats.push(t.run_at);
            columns.max_attempts.push(t.max_attempts);
            columns.nows.push(t.now_ms);
            columns.trace_ids.push(trace_id);
            columns.trace_parents.push(trace_parent);
            columns.trace_flags.push(trace_flags);
        }
        columns
    }

    /// The twelve arrays, in the order [`insert_tasks_sql`] numbers them.
    pub(super) fn params(&self) -> [&(dyn ToSql + Sync); 12] {
        [
            &self.app_ids,
            &self.schedule_ids,
            &self.event_ids,
            &self.endpoint_ids,
            &self.kinds,
            &self.payloads,
            &self.run_ats,
            &self.max_attempts,
            &self.nows,
            &self.trace_ids,
            &self.trace_parents,
            &self.trace_flags,
        ]
    }
}

/// `INSERT INTO tasks … SELECT … FROM unnest(…)` of the arrays of [`TaskColumns`], numbered
/// from `$first`, without `RETURNING`. The rows are inserted in the order of the arrays
/// (`ORDER BY ord`), so their identity ids ascend in that order. `event_id` is the expression
/// of the event id (`u.event_id`, the array's, or a column of a relation `more_from` joins in,
/// e.g. `, e`).
pub(super) fn insert_tasks_sql(first: usize, event_id: &str, more_from: &str) -> String {
    let p: Vec<String> = (first..first + 12).map(|n| format!("${n}")).collect();
    format!(
        "INSERT INTO tasks (app_id, schedule_id, event_id, endpoint_id, task_type, payload, status, run_at,
                            attempts, max_attempts, next_attempt_at, created_at, updated_at,
                            trace_id, trace_parent, trace_flags)
         SELECT u.app_id, u.schedule_id, {event_id}, u.endpoint_id, u.task_type, u.payload, 'pending', u.run_at,
                0, u.max_attempts, u.run_at, u.now_ms, u.now_ms, u.trace_id, u.trace_parent, u.trace_flags
         FROM unnest({}::text[], {}::int8[], {}::int8[], {}::int8[], {}::text[], {}::text[],
                     {}::int8[], {}::int8[], {}::int8[], {}::text[], {}::text[], {}::int8[])
              WITH ORDINALITY AS u(app_id, schedule_id, event_id, endpoint_id, task_type, payload,
                                   run_at, max_attempts, now_ms, trace_id, trace_parent, trace_flags, ord)
              {more_from}
         ORDER BY u.ord",
        p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_floor_trails_the_latest_claimed_due_time_and_never_moves_down_until_reset() {
        let floors = ClaimFloors::new(Duration::from_secs(3600));
        assert_eq!(
            floors.floor(7),
            None,
            "an unknown endpoint is searched in full"
        );
        floors.claimed(7, true, Some(50_000));
        assert_eq!(floors.floor(7), Some(50_000 - FLOOR_LAG_MS));
        floors.claimed(7, false, Some(40_000));
        assert_eq!(floors.floor(7), Some(50_000 - FLOOR_LAG_MS), "never down");
        floors.claimed(7, false, None);
        assert_eq!(floors.floor(7), Some(50_000 - FLOOR_LAG_MS));
        floors.claimed(7, false, Some(52_500));
        assert_eq!(floors.floor(7), Some(52_500 - FLOOR_LAG_MS));
        assert_eq!(floors.floor(8), None, "floors are per endpoint");
        floors.claimed(8, true, None);
        assert_eq!(
            floors.floor(8),
            Some(i64::MIN),
            "nothing claimed: from the start"
        );
        floors.reset();
        assert_eq!(floors.floor(7), None);
    }

    #[test]
    fn past_its_period_a_floor_is_searched_in_full_again() {
        let floors = ClaimFloors::new(Duration::ZERO);
        floors.claimed(7, true, Some(50_000));
        assert_eq!(floors.floor(7), None);
    }
}
