//! [`TaskQueries`] on SQLite: the SQL of the `tasks` table (records in `store::tasks`).

use crate::store::Page;
use crate::store::endpoints::Limits;
use crate::store::json::{Stored, TaskPayload};
use crate::store::sqlite::SqliteTx;
use crate::store::sqlite::ids;
use crate::store::sqlite::list::{Filters, list_page, page_of};
use crate::store::sqlite::rows;
#[allow(unused_imports)]
use crate::store::tasks::*;
use crate::store::{StoreError, TaskQueries};
use crate::trace::TaskTrace;
use rusqlite::{OptionalExtension, Row, ToSql, params};

pub const COLUMNS: &str = "id, app_id, schedule_id, event_id, endpoint_id, task_type, payload, status, run_at, attempts, max_attempts, next_attempt_at, last_status_code, last_error, finished_at, created_at, updated_at, trace_id";

/// The first task of an endpoint's `tasks_endpoint_late` by (`run_at`, id) (`in_order_head`).
const LATE_HEAD: &str =
    "SELECT run_at, id, next_attempt_at FROM tasks INDEXED BY tasks_endpoint_late
  WHERE status = 'pending' AND endpoint_id = ?1 AND next_attempt_at IS NOT run_at
  ORDER BY run_at, id LIMIT 1";

/// The first task of an endpoint due at its `run_at`, due no later than `?2` (`in_order_head`).
const ON_TIME_HEAD: &str = "SELECT run_at, id FROM tasks INDEXED BY tasks_endpoint_due
  WHERE status = 'pending' AND endpoint_id = ?1 AND next_attempt_at <= ?2
    AND next_attempt_at = run_at
  ORDER BY next_attempt_at, id LIMIT 1";

pub fn from_row(r: &Row<'_>) -> rusqlite::Result<Task> {
    Ok(Task {
        id: r.get(0)?,
        app_id: r.get(1)?,
        schedule_id: r.get(2)?,
        event_id: r.get(3)?,
        endpoint_id: r.get(4)?,
        task_type: r.get(5)?,
        payload: r.get::<_, Stored<TaskPayload>>(6)?.0,
        status: r.get(7)?,
        run_at: r.get(8)?,
        attempts: r.get(9)?,
        max_attempts: r.get(10)?,
        next_attempt_at: r.get(11)?,
        last_status_code: r.get(12)?,
        last_error: r.get(13)?,
        finished_at: r.get(14)?,
        created_at: r.get(15)?,
        updated_at: r.get(16)?,
        trace_id: r.get(17)?,
    })
}

impl TaskQueries for SqliteTx<'_> {
    /// The three calls in turn; one process owns the file, so no endpoint is ever busy.
    fn record_attempts(
        &mut self,
        results: &[Finish<'_>],
        attempts: &[crate::store::attempts::Attempt],
        health: &[(i64, crate::store::endpoints::HealthDelta)],
        _: crate::store::tasks::IfBusy,
    ) -> Result<Recorded, StoreError> {
        record_attempts_in_turn(self, results, attempts, health)
    }

    /// Always 0: one process owns a SQLite file, and `serve` hands every `running` task back
    /// at start-up (`requeue_running_tasks`), so no lease can outlive its holder.
    fn rescue_expired_leases(&mut self, _now_ms: i64) -> Result<usize, StoreError> {
        Ok(0)
    }

    /// Every id: one process owns the file, so there are no leases to lose.
    fn renew_leases(&mut self, ids: &[i64], _now_ms: i64) -> Result<Vec<i64>, StoreError> {
        Ok(ids.to_vec())
    }

    fn insert_task(&mut self, t: &NewTask<'_>) -> Result<i64, StoreError> {
        self.insert_tasks(std::slice::from_ref(t))?
            .first()
            .copied()
            .ok_or_else(|| StoreError::Other(anyhow::anyhow!("the task insert returned no id")))
    }

    /// A few multi-row statements (`rows::chunks`): row by row, each insert would set up the
    /// `task_counts` trigger and its statement journal again. The ids are taken first, in
    /// `tasks`' order, from the block reserved in memory (`ids`: no `sqlite_sequence` write
    /// per commit), and inserted with the rows. Without `RETURNING`, which SQLite runs through
    /// an ephemeral table per statement: see BENCHMARKS.md, "fanout1".
    fn insert_tasks(&mut self, tasks: &[NewTask<'_>]) -> Result<Vec<i64>, StoreError> {
        let conn = self.0;
        let traces: Vec<_> = tasks.iter().map(|t| t.trace.to_columns()).collect();
        let (first, reserved) = ids::take_reserving(conn, ids::Table::Tasks, tasks.len())?;
        if reserved {
            // Bounds the pending tasks left uncounted when no round claims (all due later):
            // this commit writes `sqlite_sequence` anyway, and `task_counts` once per block.
            count_pending(conn)?;
        }
        let ids: Vec<i64> = (first..).take(tasks.len()).collect();
        for range in rows::chunks(tasks.len()) {
            let sql = rows::values(
                "INSERT INTO tasks (id, app_id, schedule_id, event_id, endpoint_id, task_type, payload, status, run_at,
                                    attempts, max_attempts, next_attempt_at, created_at, updated_at,
                                    trace_id, trace_parent, trace_flags)",
                "(?, ?, ?, ?, ?, ?, ?, 'pending', ?, 0, ?, ?, ?, ?, ?, ?, ?)",
                range.len(),
                "",
            );
            let mut args: Vec<&dyn ToSql> = Vec::with_capacity(range.len() * 15);
            for ((t, (trace_id, trace_parent, trace_flags)), id) in tasks[range.clone()]
                .iter()
                .zip(&traces[range.clone()])
                .zip(&ids[range])
            {
                args.extend([
                    id as &dyn ToSql,
                    &t.app_id,
                    &t.schedule_id,
                    &t.event_id,
                    &t.endpoint_id,
                    &t.task_type,
                    &t.payload,
                    &t.run_at,
                    &t.max_attempts,
                    &t.run_at,
                    &t.now_ms,
                    &t.now_ms,
                    trace_id,
                    trace_parent,
                    trace_flags,
                ]);
            }
            conn.prepare_cached(&sql)?.execute(&*args)?;
        }
        Ok(ids)
    }

    fn get_task(&mut self, app_id: &str, id: i64) -> Result<Option<Task>, StoreError> {
        let conn = self.0;
        Ok(conn
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM tasks WHERE app_id = ?1 AND id = ?2"
            ))?
            .query_row(params![app_id, id], from_row)
            .optional()?)
    }

    fn list_tasks(
        &mut self,
        app_id: &str,
        f: &TaskFilter,
        page: Page,
    ) -> Result<(i64, Vec<Task>), StoreError> {
        let conn = self.0;
        let filters = list_filters(app_id, f);
        // By app alone or by app and status, the total is the counters' (`task_counts`, kept
        // by triggers): the same cost at any size. Any other filter counts its matches.
        let status = match f.status {
            Some(StatusFilter::Is(status)) => Some(status),
            Some(StatusFilter::Retrying) | None => None,
        };
        let counted = f.status != Some(StatusFilter::Retrying)
            && f.schedule_id.is_none()
            && f.event_id.is_none()
            && f.endpoint_id.is_none()
            && f.task_type.is_none();
        if !counted {
            return Ok(list_page(conn, "tasks", COLUMNS, &filters, page, from_row)?);
        }
        let counters: i64 = match status {
            Some(status) => conn
                .prepare_cached(
                    "SELECT coalesce(sum(n), 0) FROM task_counts WHERE app_id = ?1 AND status = ?2",
                )?
                .query_row(params![app_id, status], |r| r.get(0))?,
            None => conn
                .prepare_cached("SELECT coalesce(sum(n), 0) FROM task_counts WHERE app_id = ?1")?
                .query_row(params![app_id], |r| r.get(0))?,
        };
        // The newest pending tasks are not in the counters yet ([`count_pending`]).
        let total = match status {
            None | Some(TaskStatus::Pending) => counters + uncounted_pending(conn, app_id)?,
            Some(_) => counters,
        };
        Ok((
            total,
            page_of(conn, "tasks", COLUMNS, &filters, page, from_row)?,
        ))
    }

    /// A recursive CTE steps from endpoint to endpoint, one seek each in `tasks_endpoint_due`
    /// (the seed row `?1` and the final NULL are filtered out, hence `LIMIT ?2 + 1`).
    fn endpoints_with_pending(
        &mut self,
        after: i64,
        before: i64,
        limit: usize,
    ) -> Result<Vec<PendingEndpoint>, StoreError> {
        let conn = self.0;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX - 1);
        Ok(conn
            .prepare_cached(
                "WITH RECURSIVE pending(endpoint_id) AS (
                     SELECT ?1
                     UNION ALL
                     SELECT (SELECT t.endpoint_id FROM tasks t INDEXED BY tasks_endpoint_due
                              WHERE t.status = 'pending' AND t.endpoint_id > pending.endpoint_id
                                AND t.endpoint_id < ?3 AND t.next_attempt_at IS NOT NULL
                              ORDER BY t.endpoint_id, t.next_attempt_at LIMIT 1)
                       FROM pending WHERE pending.endpoint_id IS NOT NULL
                     LIMIT ?2 + 1)
                 SELECT p.endpoint_id,
                        (SELECT t.next_attempt_at FROM tasks t INDEXED BY tasks_endpoint_due
                          WHERE t.status = 'pending' AND t.endpoint_id = p.endpoint_id
                            AND t.next_attempt_at IS NOT NULL
                          ORDER BY t.next_attempt_at LIMIT 1),
                        e.id IS NOT NULL, e.status = 'enabled', e.rate_limit_per_sec,
                        e.max_in_flight
                   FROM pending p LEFT JOIN endpoints e ON e.id = p.endpoint_id
                  WHERE p.endpoint_id > ?1
                  ORDER BY p.endpoint_id",
            )?
            .query_map(params![after, limit, before], |r| {
                let exists: bool = r.get(2)?;
                Ok(PendingEndpoint {
                    endpoint_id: r.get(0)?,
                    earliest_due: r.get(1)?,
                    limits: exists
                        .then(|| {
                            Ok::<_, rusqlite::Error>(Limits {
                                enabled: r.get(3)?,
                                rate_limit_per_sec: r.get(4)?,
                                max_in_flight: r.get(5)?,
                            })
                        })
                        .transpose()?,
                })
            })?
            .collect::<rusqlite::Result<_>>()?)
    }

    /// Two seeks, no `tasks_endpoint_order` (migrations/in_order_head_late.sql): the first task
    /// of `tasks_endpoint_late` by (`run_at`, id), and the first on-time task (due at its
    /// `run_at`) of `tasks_endpoint_due` due no later than that one runs: for an on-time task
    /// the order by due time is the order by `run_at`. Whichever runs first is the head. The
    /// second seek reads past only tasks due before their `run_at` (canceled before they ran,
    /// then sent back by `retry` to be due now), one row look-up each: a task due after its
    /// `run_at` ahead of the late head would run before it, so it would have been the late
    /// head (docs/dev/storage.md, "The in-order head without `tasks_endpoint_order`").
    fn in_order_head(&mut self, endpoint_id: i64) -> Result<Option<(i64, i64)>, StoreError> {
        let conn = self.0;
        let late = conn
            .prepare_cached(LATE_HEAD)?
            .query_row(params![endpoint_id], |r| {
                Ok((
                    (r.get::<_, i64>(0)?, r.get::<_, i64>(1)?),
                    r.get::<_, Option<i64>>(2)?,
                ))
            })
            .optional()?;
        let on_time = conn
            .prepare_cached(ON_TIME_HEAD)?
            .query_row(
                params![
                    endpoint_id,
                    late.map_or(i64::MAX, |((run_at, _), _)| run_at)
                ],
                |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)),
            )
            .optional()?;
        Ok(match (late, on_time) {
            (Some((first, due)), on_time) if on_time.is_none_or(|o| first < o) => {
                Some((first.1, due.unwrap_or(i64::MAX)))
            }
            (_, on_time) => on_time.map(|(run_at, id)| (id, run_at)),
        })
    }

    /// `LIMIT ?3 + 0`, not `LIMIT ?3`: SQLite plans with the value bound to a bare `LIMIT`
    /// parameter, so rebinding it re-prepares the statement on every run.
    fn claim_endpoint_tasks(
        &mut self,
        endpoint_id: i64,
        now_ms: i64,
        limit: usize,
    ) -> Result<Vec<Claimed>, StoreError> {
        let conn = self.0;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let mut claimed = conn
            .prepare_cached(&format!(
                "UPDATE tasks SET status = 'running', updated_at = ?2
                 WHERE id IN (SELECT id FROM tasks INDEXED BY tasks_endpoint_due
                              WHERE status = 'pending' AND endpoint_id = ?1 AND next_attempt_at <= ?2
                              ORDER BY next_attempt_at, id LIMIT ?3 + 0)
                 {CLAIM_RETURNING}"
            ))?
            .query_map(params![endpoint_id, now_ms, limit], claimed_from)?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        if !claimed.is_empty() {
            // The round writes `task_counts` anyway (the claimed tasks are now `running`).
            count_pending(conn)?;
        }
        claimed.sort_by_key(|((due, _), c)| (*due, c.id));
        Ok(claimed.into_iter().map(|(_, c)| c).collect())
    }

    fn claim_task(&mut self, id: i64, now_ms: i64) -> Result<Option<Claimed>, StoreError> {
        let conn = self.0;
        Ok(conn
            .prepare_cached(&format!(
                "UPDATE tasks SET status = 'running', updated_at = ?2
             WHERE id = ?1 AND status = 'pending' AND next_attempt_at <= ?2
             {CLAIM_RETURNING}"
            ))?
            .query_row(params![id, now_ms], claimed_from)
            .optional()
            .map(|c| c.map(|(_, c)| c))?)
    }

    fn finish_attempt(
        &mut self,
        task_id: i64,
        attempt: i64,
        after: AfterAttempt,
        last_status_code: Option<i64>,
        last_error: Option<&str>,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let conn = self.0;
        let (status, next_attempt_at) = match after {
            AfterAttempt::Success => ("success", None),
            AfterAttempt::RetryAt(at) => ("pending", Some(at)),
            AfterAttempt::Failed => ("failed", None),
        };
        let n = conn
            .prepare_cached(
                "UPDATE tasks SET
                    status = CASE WHEN ?2 = 'pending' AND NOT EXISTS
                        (SELECT 1 FROM endpoints e WHERE e.id = tasks.endpoint_id) THEN 'canceled' ELSE ?2 END,
                    finished_at = CASE WHEN ?2 != 'pending' OR NOT EXISTS
                        (SELECT 1 FROM endpoints e WHERE e.id = tasks.endpoint_id) THEN ?7 END,
                    next_attempt_at = CASE WHEN EXISTS
                        (SELECT 1 FROM endpoints e WHERE e.id = tasks.endpoint_id) THEN ?4 END,
                    attempts = ?3, last_status_code = ?5, last_error = ?6, updated_at = ?7
                 WHERE id = ?1 AND status = 'running'",
            )?
            .execute(params![
                task_id,
                status,
                attempt,
                next_attempt_at,
                last_status_code,
                last_error,
                now_ms
            ])?;
        Ok(n == 1)
    }

    fn start_task_now(&mut self, id: i64, now_ms: i64) -> Result<(), StoreError> {
        let conn = self.0;
        conn.prepare_cached(
            "UPDATE tasks SET status = 'running', updated_at = ?2 WHERE id = ?1 AND status = 'pending'",
        )?
        .execute(params![id, now_ms])?;
        Ok(())
    }

    fn task_app(&mut self, id: i64) -> Result<Option<String>, StoreError> {
        let conn = self.0;
        Ok(conn
            .prepare_cached("SELECT app_id FROM tasks WHERE id = ?1")?
            .query_row(params![id], |r| r.get(0))
            .optional()?)
    }

    /// Finds the running tasks through the apps `task_counts` says have some, then
    /// `tasks_app_status`: no index of running tasks is kept on SQLite, and without the
    /// `app_id` this would read the whole table.
    fn requeue_running_tasks(&mut self, now_ms: i64) -> Result<usize, StoreError> {
        let conn = self.0;
        Ok(conn.prepare_cached(
            "UPDATE tasks SET status = 'pending', next_attempt_at = min(coalesce(next_attempt_at, ?1), ?1),
             updated_at = ?1
             WHERE app_id IN (SELECT app_id FROM task_counts WHERE status = 'running' AND n > 0)
               AND status = 'running'",
        )?
        .execute(params![now_ms])?)
    }

    fn cancel_orphan_tasks(&mut self, now_ms: i64) -> Result<usize, StoreError> {
        let conn = self.0;
        Ok(conn.prepare_cached(
            "UPDATE tasks SET status = 'canceled', finished_at = ?1, updated_at = ?1, next_attempt_at = NULL,
             last_error = coalesce(last_error, 'endpoint deleted')
             WHERE status = 'pending' AND NOT EXISTS (SELECT 1 FROM endpoints e WHERE e.id = tasks.endpoint_id)",
        )?
        .execute(params![now_ms])?)
    }

    fn cancel_task(&mut self, app_id: &str, id: i64, now_ms: i64) -> Result<bool, StoreError> {
        let conn = self.0;
        let n = conn
            .prepare_cached(
                "UPDATE tasks SET status = 'canceled', finished_at = ?3, updated_at = ?3, next_attempt_at = NULL
                 WHERE app_id = ?1 AND id = ?2 AND status = 'pending'",
            )?
            .execute(params![app_id, id, now_ms])?;
        Ok(n == 1)
    }

    /// The ids travel as one JSON array (`json_each`), so one cached statement serves a batch of
    /// any size.
    fn retry_tasks(
        &mut self,
        app_id: &str,
        ids: &[i64],
        now_ms: i64,
    ) -> Result<Vec<i64>, StoreError> {
        let conn = self.0;
        let default_attempts = i64::from(crate::retry::RetryPolicy::DEFAULT.max_attempts);
        let ids = serde_json::to_string(ids).unwrap_or_else(|_| "[]".into());
        Ok(conn.prepare_cached(
            "UPDATE tasks SET status = 'pending', attempts = 0, next_attempt_at = ?3, finished_at = NULL,
                 updated_at = ?3,
                 max_attempts = (SELECT coalesce(p.max_attempts, ?4)
                                 FROM endpoints e LEFT JOIN retry_policies p ON p.id = e.retry_policy_id
                                 WHERE e.id = tasks.endpoint_id)
             WHERE id IN (SELECT value FROM json_each(?2)) AND app_id = ?1
               AND status IN ('failed', 'canceled')
               AND EXISTS (SELECT 1 FROM endpoints e WHERE e.id = tasks.endpoint_id)
             RETURNING id",
        )?
        .query_map(params![app_id, ids, now_ms, default_attempts], |r| r.get(0))?
        .collect::<Result<_, _>>()?)
    }

    fn retryable_task_ids(
        &mut self,
        app_id: &str,
        f: &RetryFilter,
        limit: usize,
    ) -> Result<Vec<i64>, StoreError> {
        let conn = self.0;
        let mut filters = Filters::app(app_id)
            .eq_word("status", Some(f.status))
            .eq("endpoint_id", f.endpoint_id)
            .eq("schedule_id", f.schedule_id)
            .event(f.event_id)
            .always("EXISTS (SELECT 1 FROM endpoints e WHERE e.id = tasks.endpoint_id)");
        if let Some(since) = f.since {
            filters = filters.cmp("finished_at", ">=", since);
        }
        if let Some(until) = f.until {
            filters = filters.cmp("finished_at", "<", until);
        }
        let mut values = filters.values().to_vec();
        values.push(i64::try_from(limit).unwrap_or(i64::MAX).into());
        // `LIMIT ? + 0`: see `claim_due`.
        let sql = format!(
            "SELECT id FROM tasks WHERE {} ORDER BY id LIMIT ?{} + 0",
            filters.condition(),
            values.len()
        );
        Ok(conn
            .prepare_cached(&sql)?
            .query_map(rusqlite::params_from_iter(&values), |r| r.get(0))?
            .collect::<Result<_, _>>()?)
    }

    fn schedule_task_open(
        &mut self,
        schedule_id: i64,
        endpoint_id: i64,
    ) -> Result<bool, StoreError> {
        let conn = self.0;
        Ok(conn
            .prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM tasks WHERE schedule_id = ?1 AND endpoint_id = ?2
                            AND status IN ('pending', 'running'))",
            )?
            .query_row(params![schedule_id, endpoint_id], |r| r.get(0))?)
    }

    fn count_tasks_by_status(&mut self) -> Result<Vec<(TaskStatus, i64)>, StoreError> {
        let conn = self.0;
        let mut counts: Vec<(TaskStatus, i64)> = conn
            .prepare_cached(
                "SELECT status, sum(n) FROM task_counts WHERE status <> '' GROUP BY status",
            )?
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<_, _>>()?;
        // The newest pending tasks of every app, not in the counters yet ([`count_pending`]):
        // app by app (one seek each in `tasks_app_status`, whose prefix is `app_id`), then
        // each app's range of `tasks_app_status` above the mark. Not a `rowid` range above
        // the mark: rows written by another program (a fill, `migrate`) can leave every task
        // above it until a claim.
        let uncounted: i64 = conn
            .prepare_cached(&format!(
                "WITH RECURSIVE apps(app_id) AS (
                     SELECT (SELECT min(app_id) FROM tasks)
                     UNION ALL
                     SELECT (SELECT min(t.app_id) FROM tasks t WHERE t.app_id > apps.app_id)
                       FROM apps WHERE apps.app_id IS NOT NULL)
                 SELECT coalesce(sum((SELECT count(*) FROM tasks t
                                       WHERE t.app_id = apps.app_id AND t.status = 'pending'
                                         AND t.id > {MARK})), 0)
                   FROM apps WHERE app_id IS NOT NULL"
            ))?
            .query_row([], |r| r.get(0))?;
        match counts
            .iter_mut()
            .find(|(status, _)| *status == TaskStatus::Pending)
        {
            Some((_, n)) => *n += uncounted,
            None => counts.push((TaskStatus::Pending, uncounted)),
        }
        counts.retain(|(_, n)| *n > 0);
        Ok(counts)
    }
}

/// The conditions of `list_tasks` ([`TaskFilter::conditions`]), an event's tasks by their id
/// range. By app alone or by type the page is merged from one arm per status
/// ([`TaskFilter::pages_by_status`]).
fn list_filters(app_id: &str, f: &TaskFilter) -> Filters {
    let filters = f.conditions(app_id, |filters: Filters, event_id| {
        filters.event(Some(event_id))
    });
    match f.pages_by_status() {
        true => filters.merged_over::<TaskStatus>("status"),
        false => filters,
    }
}

/// The mark in `task_counts` at or below which pending tasks are counted
/// (migrations/pending_counted.sql).
const MARK: &str = "(SELECT n FROM task_counts WHERE app_id = '' AND status = '')";

/// `app_id`'s pending tasks above the mark: the newest ones, which no counter holds yet, found
/// through `tasks_app_status` (a few hundred entries at most: [`count_pending`]).
fn uncounted_pending(conn: &rusqlite::Connection, app_id: &str) -> rusqlite::Result<i64> {
    conn.prepare_cached(&format!(
        "SELECT count(*) FROM tasks WHERE app_id = ?1 AND status = 'pending' AND id > {MARK}"
    ))?
    .query_row(params![app_id], |r| r.get(0))
}

/// Raises the mark to the newest task, adding the pending tasks it passes to their apps'
/// counters (docs/dev/storage.md, "Pending tasks counted in arrears"). Called where a write
/// already changes `task_counts` or `sqlite_sequence`: the delivery round's claim, and the
/// insert that takes a new block of task ids, so at most about two blocks of tasks are above
/// the mark when nothing is claimed. It reads the `rowid` range it passes: the tasks inserted
/// since the last raise, a few; once after another program filled the file (a bench fill of a
/// million tasks, which leaves the mark where it was) the whole fill, in one round.
fn count_pending(conn: &rusqlite::Connection) -> rusqlite::Result<()> {
    let (mark, newest): (i64, i64) = conn
        .prepare_cached(&format!(
            "SELECT {MARK}, (SELECT coalesce(max(id), 0) FROM tasks)"
        ))?
        .query_row([], |r| Ok((r.get(0)?, r.get(1)?)))?;
    if newest <= mark {
        return Ok(());
    }
    conn.prepare_cached(
        "INSERT INTO task_counts (app_id, status, n)
         SELECT app_id, 'pending', count(*) FROM tasks
          WHERE id > ?1 AND id <= ?2 AND status = 'pending' GROUP BY app_id
         ON CONFLICT (app_id, status) DO UPDATE SET n = n + excluded.n",
    )?
    .execute(params![mark, newest])?;
    conn.prepare_cached("UPDATE task_counts SET n = ?1 WHERE app_id = '' AND status = ''")?
        .execute(params![newest])?;
    Ok(())
}

/// What a claim returns of each task; `claimed_from` reads it in this order.
const CLAIM_RETURNING: &str = "RETURNING id, endpoint_id, schedule_id, event_id,
    (SELECT event_name FROM events WHERE events.id = tasks.event_id),
    payload, attempts + 1, max_attempts, next_attempt_at, run_at,
    app_id, trace_id, trace_parent, trace_flags";

fn claimed_from(r: &Row<'_>) -> rusqlite::Result<((i64, i64), Claimed)> {
    Ok((
        (r.get(8)?, r.get(9)?),
        Claimed {
            id: r.get(0)?,
            endpoint_id: r.get(1)?,
            schedule_id: r.get(2)?,
            event_id: r.get(3)?,
            event_name: r.get(4)?,
            payload: r.get(5)?,
            attempt: r.get(6)?,
            max_attempts: r.get(7)?,
            app_id: r.get(10)?,
            due_at: r.get(8)?,
            // Read in place: a claim allocates nothing for the trace.
            trace: TaskTrace::from_columns(
                r.get_ref(11)?.as_str_or_null()?,
                r.get_ref(12)?.as_str_or_null()?,
                r.get(13)?,
            ),
            // Not read here: the dispatcher loads the endpoint each round.
            target_generation: None,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::word::Word;

    type Totals = Vec<(String, String, i64)>;

    /// (app, status, total) for every app and status with tasks: what `list_tasks` answers
    /// (the counters, and for `pending` the tasks above the mark) against a count of the rows.
    fn totals(conn: &rusqlite::Connection) -> (Totals, Totals) {
        let counted: Totals = conn
            .prepare("SELECT app_id, status, count(*) FROM tasks GROUP BY 1, 2 ORDER BY 1, 2")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let answered = counted
            .iter()
            .map(|(app, status, _)| {
                let mut n: i64 = conn
                    .query_row(
                        "SELECT coalesce(sum(n), 0) FROM task_counts WHERE app_id = ?1 AND status = ?2",
                        params![app, status],
                        |r| r.get(0),
                    )
                    .unwrap();
                if status == "pending" {
                    n += uncounted_pending(conn, app).unwrap();
                }
                (app.clone(), status.clone(), n)
            })
            .collect();
        (answered, counted)
    }

    /// Adds tasks `from..to` (ids), nine in ten of app `a`, in every status (mostly
    /// `success`, as a real file) and two types.
    fn fill(conn: &rusqlite::Connection, from: i64, to: i64) {
        conn.execute(
            "WITH RECURSIVE n(i) AS (SELECT ?1 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?2)
             INSERT INTO tasks (id, app_id, endpoint_id, task_type, status, run_at, max_attempts,
                                created_at, updated_at)
             SELECT i, CASE WHEN i % 10 = 0 THEN 'b' ELSE 'a' END, 1,
                    CASE WHEN i % 3 = 0 THEN 'manual' ELSE 'event' END,
                    CASE WHEN i % 7 = 0 THEN 'pending' WHEN i % 11 = 0 THEN 'running'
                         WHEN i % 13 = 0 THEN 'failed' WHEN i % 17 = 0 THEN 'canceled'
                         ELSE 'success' END, 0, 1, 0, 0 FROM n",
            params![from, to],
        )
        .unwrap();
    }

    /// A page of `list_tasks`' statement for app `a`: its plan, the ids, and the statement's
    /// counters (virtual machine steps, sorts, steps of full scans).
    fn page_read(
        conn: &rusqlite::Connection,
        f: &TaskFilter,
        page: Page,
    ) -> (Vec<String>, Vec<i64>, [i32; 3]) {
        use rusqlite::StatementStatus::{FullscanStep, Sort, VmStep};
        let filters = list_filters("a", f);
        let sql = crate::store::sqlite::list::page_sql("tasks", COLUMNS, &filters);
        let mut values = filters.values().to_vec();
        values.push(page.limit().into());
        values.push(page.offset().into());
        let plan = conn
            .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
            .unwrap()
            .query_map(rusqlite::params_from_iter(&values), |r| r.get(3))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let mut statement = conn.prepare(&sql).unwrap();
        let ids = statement
            .query_map(rusqlite::params_from_iter(&values), |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let counters = [VmStep, Sort, FullscanStep].map(|c| statement.get_status(c));
        (plan, ids, counters)
    }

    /// The same page read from the table without any index.
    fn page_wanted(conn: &rusqlite::Connection, task_type: Option<&str>, page: Page) -> Vec<i64> {
        conn.prepare(
            "SELECT id FROM tasks NOT INDEXED WHERE app_id = 'a' AND coalesce(?1 = task_type, 1)
              ORDER BY id DESC LIMIT ?2 OFFSET ?3",
        )
        .unwrap()
        .query_map(params![task_type, page.limit(), page.offset()], |r| {
            r.get(0)
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
    }

    #[test]
    fn the_list_by_app_alone_merges_one_index_arm_per_status_at_any_size() {
        let dir = tempfile::tempdir().unwrap();
        let pool = crate::store::sqlite::open(&dir.path().join("t.db"), 1).unwrap();
        let conn = pool.get().unwrap();
        let by_app = TaskFilter::default();
        let by_type = TaskFilter {
            task_type: Some(TaskKind::Manual),
            ..TaskFilter::default()
        };
        let first = Page {
            page: 1,
            page_size: 20,
        };
        let mut steps_at = Vec::new();
        for tasks in [2_000, 40_000] {
            fill(
                &conn,
                conn.query_row("SELECT coalesce(max(id), 0) + 1 FROM tasks", [], |r| {
                    r.get(0)
                })
                .unwrap(),
                tasks + 1,
            );
            for (f, task_type) in [(&by_app, None), (&by_type, Some("manual"))] {
                for page in [first, Page { page: 2, ..first }, Page { page: 40, ..first }] {
                    let (plan, ids, [steps, sorts, full_scans]) = page_read(&conn, f, page);
                    let at = format!(
                        "{tasks} tasks, type {task_type:?}, page {}: {plan:?}",
                        page.page
                    );
                    assert_eq!(ids, page_wanted(&conn, task_type, page), "{at}");
                    // The arms, then the page's rows by id.
                    let arm = match task_type {
                        None => {
                            "SEARCH tasks USING COVERING INDEX tasks_app_status (app_id=? AND status=?)"
                        }
                        Some(_) => {
                            "SEARCH tasks USING INDEX tasks_app_status (app_id=? AND status=?)"
                        }
                    };
                    let searches: Vec<_> =
                        plan.iter().filter(|l| l.starts_with("SEARCH")).collect();
                    assert_eq!(searches.len(), TaskStatus::ALL.len() + 1, "{at}");
                    assert_eq!(
                        searches[0], "SEARCH tasks USING INTEGER PRIMARY KEY (rowid=?)",
                        "{at}"
                    );
                    assert!(
                        searches[1..].iter().all(|l| *l == arm),
                        "one arm per status: {at}"
                    );
                    assert!(plan.iter().any(|l| l.starts_with("MERGE")), "{at}");
                    assert!(!plan.iter().any(|l| l.contains("TEMP B-TREE")), "{at}");
                    assert_eq!((sorts, full_scans), (0, 0), "{at}");
                    if f.task_type.is_none() && page == first {
                        steps_at.push(steps);
                    }
                }
            }
            // Through the store: the same page and the exact total.
            let (total, tasks_listed) = SqliteTx(&conn).list_tasks("a", &by_app, first).unwrap();
            let ids: Vec<i64> = tasks_listed.iter().map(|t| t.id).collect();
            assert_eq!(ids, page_wanted(&conn, None, first));
            let count: i64 = conn
                .query_row("SELECT count(*) FROM tasks WHERE app_id = 'a'", [], |r| {
                    r.get(0)
                })
                .unwrap();
            assert_eq!(total, count);
        }
        // A page costs the same at 20 times the tasks: about a page of rows read per arm,
        // none of the app's other tasks.
        assert!(
            steps_at[1] < steps_at[0] * 3 / 2,
            "virtual machine steps of the first page at 2,000 and 40,000 tasks: {steps_at:?}"
        );
        // By event: not merged; the event's tasks found by `rowid`, not the app's by
        // `tasks_app_status (app_id=?)`.
        let by_event = TaskFilter {
            event_id: Some(7),
            ..TaskFilter::default()
        };
        let (plan, _, _) = page_read(&conn, &by_event, first);
        assert_eq!(
            plan.iter()
                .find(|l| l.starts_with("SEARCH tasks"))
                .map(String::as_str),
            Some("SEARCH tasks USING INTEGER PRIMARY KEY (rowid=?)"),
            "{plan:?}"
        );
    }

    fn pending_counter(conn: &rusqlite::Connection, app: &str) -> Option<i64> {
        conn.query_row(
            "SELECT n FROM task_counts WHERE app_id = ?1 AND status = 'pending'",
            [app],
            |r| r.get(0),
        )
        .optional()
        .unwrap()
    }

    #[test]
    fn pending_totals_stay_exact_on_both_sides_of_the_mark() {
        let dir = tempfile::tempdir().unwrap();
        let pool = crate::store::sqlite::open(&dir.path().join("t.db"), 1).unwrap();
        let conn = pool.get().unwrap();
        let insert = |id: i64, app: &str| {
            conn.execute(
                "INSERT INTO tasks (id, app_id, endpoint_id, task_type, status, run_at,
                                    max_attempts, created_at, updated_at)
                 VALUES (?1, ?2, 1, 'manual', 'pending', 0, 1, 0, 0)",
                params![id, app],
            )
            .unwrap();
        };
        let set = |id: i64, status: &str| {
            conn.execute(
                "UPDATE tasks SET status = ?2 WHERE id = ?1",
                params![id, status],
            )
            .unwrap();
        };
        let exact = |step: &str| {
            let (answered, counted) = totals(&conn);
            assert_eq!(answered, counted, "{step}");
        };
        for (id, app) in [(1, "a"), (2, "a"), (3, "a"), (4, "b")] {
            insert(id, app);
        }
        exact("inserted, none counted");
        assert_eq!(
            pending_counter(&conn, "a"),
            None,
            "a pending insert leaves the counters"
        );
        count_pending(&conn).unwrap();
        assert_eq!(
            (pending_counter(&conn, "a"), pending_counter(&conn, "b")),
            (Some(3), Some(1))
        );
        exact("counted up to 4");
        insert(5, "a");
        insert(6, "a");
        exact("two above the mark");
        for (id, status) in [
            (2, "running"),
            (5, "running"),
            (5, "pending"),
            (2, "pending"),
            (6, "success"),
            (1, "canceled"),
        ] {
            set(id, status);
            exact(&format!("task {id} {status}"));
        }
        for id in [3, 6, 5] {
            conn.execute("DELETE FROM tasks WHERE id = ?1", [id])
                .unwrap();
            exact(&format!("task {id} deleted"));
        }
        insert(7, "b");
        count_pending(&conn).unwrap();
        exact("counted up to 7");
        assert_eq!(
            conn.query_row(&format!("SELECT {MARK}"), [], |r| r.get::<_, i64>(0))
                .unwrap(),
            7
        );
        // A task inserted at or below the mark (another process's id) is counted at once.
        conn.execute("DELETE FROM tasks WHERE id = 4", []).unwrap();
        insert(4, "b");
        exact("inserted below the mark");
        assert_eq!(pending_counter(&conn, "b"), Some(2));
    }

    /// Tasks of endpoint 1 (and of 2 between them) with `run_at` in `0..40` and a due time
    /// chosen by `lcg`: on time, later (waiting to retry), earlier (sent back by `retry`), none,
    /// or not pending; then the head is taken away until none is left, and at each step
    /// `in_order_head` names the task a full read of the table says runs first.
    #[test]
    fn the_in_order_head_is_the_first_task_by_run_at_without_an_index_in_that_order() {
        let dir = tempfile::tempdir().unwrap();
        let pool = crate::store::sqlite::open(&dir.path().join("t.db"), 1).unwrap();
        let conn = pool.get().unwrap();
        let mut seed: u64 = 42;
        let mut lcg = |n: i64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            i64::try_from((seed >> 33) % n as u64).unwrap()
        };
        let wanted = |conn: &rusqlite::Connection| -> Option<(i64, i64)> {
            conn.query_row(
                "SELECT id, coalesce(next_attempt_at, 9223372036854775807) FROM tasks NOT INDEXED
                  WHERE status = 'pending' AND endpoint_id = 1 ORDER BY run_at, id LIMIT 1",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .unwrap()
        };
        let mut heads = 0;
        for round in 0..40 {
            conn.execute("DELETE FROM tasks", []).unwrap();
            for id in 1..=60 {
                let run_at = lcg(40);
                let (status, due) = match lcg(20) {
                    0..=9 => ("pending", Some(run_at)),
                    10..=13 => ("pending", Some(run_at + 1 + lcg(30))),
                    14..=15 => ("pending", Some(run_at - 1 - lcg(30))),
                    16 => ("pending", None),
                    17 => ("running", Some(run_at)),
                    _ => ("success", None),
                };
                conn.execute(
                    "INSERT INTO tasks (id, app_id, endpoint_id, task_type, status, run_at,
                                        next_attempt_at, max_attempts, created_at, updated_at)
                     VALUES (?1, 'a', ?2, 'event', ?3, ?4, ?5, 1, 0, 0)",
                    params![id, 1 + lcg(4) / 3, status, run_at, due],
                )
                .unwrap();
            }
            loop {
                let head = SqliteTx(&conn).in_order_head(1).unwrap();
                assert_eq!(head, wanted(&conn), "round {round}, after {heads} heads");
                let Some((id, _)) = head else { break };
                conn.execute("UPDATE tasks SET status = 'success' WHERE id = ?1", [id])
                    .unwrap();
                heads += 1;
            }
        }
        assert!(heads > 1_000, "{heads} heads compared");
    }

    /// A backlog sent back by a bulk retry (due now, `run_at` long past), ahead of a backlog on
    /// time in `tasks_endpoint_due`: the head's two seeks read a few entries, not the
    /// backlogs, and neither sorts; then the same with the on-time backlog alone.
    #[test]
    fn the_in_order_head_reads_no_backlog() {
        use rusqlite::StatementStatus::{FullscanStep, Sort, VmStep};
        let (_dir, pool) = crate::store::sqlite::test_file_with_tasks(
            20_000,
            "'pending'",
            "CASE WHEN i <= 10000 THEN i ELSE i + 20000 END",
            "CASE WHEN i <= 10000 THEN 25000 ELSE i + 20000 END",
        );
        let conn = pool.get().unwrap();
        // The two statements as `in_order_head` left them in the connection's cache.
        let counters = |conn: &rusqlite::Connection| {
            let mut sums = [0; 3];
            for sql in [LATE_HEAD, ON_TIME_HEAD] {
                let cached = conn.prepare_cached(sql).unwrap();
                for (sum, c) in sums.iter_mut().zip([VmStep, Sort, FullscanStep]) {
                    *sum += cached.get_status(c);
                }
            }
            sums
        };
        for (step, expected) in [
            ("the late backlog ahead", (1, 25_000)),
            ("the on-time backlog alone", (10_001, 30_001)),
        ] {
            let before = counters(&conn);
            assert_eq!(SqliteTx(&conn).in_order_head(1).unwrap(), Some(expected));
            let after = counters(&conn);
            let [steps, sorts, full_scans] = [0, 1, 2].map(|i| after[i] - before[i]);
            assert!(steps < 200, "{step}: {steps} steps");
            assert_eq!((sorts, full_scans), (0, 0), "{step}");
            conn.execute("UPDATE tasks SET status = 'success' WHERE id <= 10000", [])
                .unwrap();
        }
    }
}
