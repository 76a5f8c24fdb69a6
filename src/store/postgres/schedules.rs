//! The `schedules` table and `schedule_firings` on PostgreSQL, [`ScheduleQueries`] on a
//! [`PgTx`]. Every node runs the scheduler: `due_schedules` locks with `FOR UPDATE SKIP LOCKED`,
//! so two nodes' ticks split a batch instead of queueing, and `record_firings`' rows — not the
//! lock — is the once-per-(schedule, instant) guarantee (it also holds when an API update moved
//! `next_run_at` on another node mid-tick).

use super::list::{Filters, list_page};
use super::tasks::get_of_app;
use crate::store::Page;
use crate::store::json::{SchedulePayload, ScheduleTargets, Stored};
use crate::store::postgres::PgTx;
use crate::store::schedules::{Advance, Firing, Schedule, ScheduleStatus, Window};
use crate::store::{ScheduleQueries, StoreError};
use postgres::GenericClient;
use postgres::Row;
use std::collections::{BTreeMap, HashSet};

const COLUMNS: &str = "id, app_id, name, cron_expr, timezone, payload, status, next_run_at, last_run_at, created_at, updated_at, endpoint_ids, paused_reason, catchup, overlap, skipped_runs, starts_at, ends_at, jitter_sec";
const FIRING_COLUMNS: &str = "id, app_id, cron_expr, timezone, payload, endpoint_ids, next_run_at, catchup, overlap, starts_at, ends_at, jitter_sec";

fn from_row(r: &Row) -> Result<Schedule, postgres::Error> {
    Ok(Schedule {
        id: r.try_get(0)?,
        app_id: r.try_get(1)?,
        name: r.try_get(2)?,
        cron_expr: r.try_get(3)?,
        timezone: r.try_get(4)?,
        payload: r.try_get::<_, Stored<SchedulePayload>>(5)?.0,
        status: r.try_get(6)?,
        next_run_at: r.try_get(7)?,
        last_run_at: r.try_get(8)?,
        created_at: r.try_get(9)?,
        updated_at: r.try_get(10)?,
        endpoint_ids: r.try_get::<_, Stored<ScheduleTargets>>(11)?.0,
        paused_reason: r.try_get(12)?,
        catchup: r.try_get(13)?,
        overlap: r.try_get(14)?,
        skipped_runs: r.try_get(15)?,
        starts_at: r.try_get(16)?,
        ends_at: r.try_get(17)?,
        jitter_sec: r.try_get(18)?,
        endpoint_names: BTreeMap::new(),
        next_run_at_local: None,
    })
}

fn firing_from_row(r: &Row) -> Result<Firing, postgres::Error> {
    Ok(Firing {
        id: r.try_get(0)?,
        app_id: r.try_get(1)?,
        cron_expr: r.try_get(2)?,
        timezone: r.try_get(3)?,
        payload: r.try_get(4)?,
        endpoint_ids: r.try_get::<_, Stored<ScheduleTargets>>(5)?.0,
        next_run_at: r.try_get(6)?,
        catchup: r.try_get(7)?,
        overlap: r.try_get(8)?,
        window: Window {
            starts_at: r.try_get(9)?,
            ends_at: r.try_get(10)?,
        },
        jitter_sec: r.try_get(11)?,
    })
}

impl<C: GenericClient> ScheduleQueries for PgTx<'_, C> {
    /// Wakes the schedulers of every node.
    fn insert_schedule(&mut self, s: &Schedule) -> Result<Schedule, StoreError> {
        let c = &mut *self.c;
        let id: i64 = c
            .query_one(
                "INSERT INTO schedules (app_id, name, cron_expr, timezone, payload, endpoint_ids, status, next_run_at,
                                        last_run_at, created_at, updated_at, paused_reason, catchup, overlap, skipped_runs, starts_at, ends_at, jitter_sec)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)
                 RETURNING id",
                &[
                    &s.app_id,
                    &s.name,
                    &s.cron_expr,
                    &s.timezone,
                    &s.payload_text(),
                    &s.endpoint_ids_text(),
                    &s.status,
                    &s.next_run_at,
                    &s.last_run_at,
                    &s.created_at,
                    &s.updated_at,
                    &s.paused_reason,
                    &s.catchup,
                    &s.overlap,
                    &s.skipped_runs,
                    &s.starts_at,
                    &s.ends_at,
                    &s.jitter_sec,
                ],
            )?
            .try_get(0)?;
        self.schedules_changed();
        Ok(Schedule { id, ..s.clone() })
    }

    /// Wakes the schedulers of every node.
    fn update_schedule(&mut self, s: &Schedule) -> Result<(), StoreError> {
        let c = &mut *self.c;
        c.execute(
            "UPDATE schedules SET name = $3, cron_expr = $4, timezone = $5, payload = $6, endpoint_ids = $7,
             status = $8, next_run_at = $9, updated_at = $10, paused_reason = $11, catchup = $12, overlap = $13,
             starts_at = $14, ends_at = $15, jitter_sec = $16
             WHERE app_id = $1 AND id = $2",
            &[
                &s.app_id,
                &s.id,
                &s.name,
                &s.cron_expr,
                &s.timezone,
                &s.payload_text(),
                &s.endpoint_ids_text(),
                &s.status,
                &s.next_run_at,
                &s.updated_at,
                &s.paused_reason,
                &s.catchup,
                &s.overlap,
                &s.starts_at,
                &s.ends_at,
                &s.jitter_sec,
            ],
        )?;
        self.schedules_changed();
        Ok(())
    }

    fn get_schedule(&mut self, app_id: &str, id: i64) -> Result<Option<Schedule>, StoreError> {
        let c = &mut *self.c;
        Ok(get_of_app(c, "schedules", COLUMNS, app_id, id, from_row)?)
    }

    fn list_schedules(
        &mut self,
        app_id: &str,
        status: Option<ScheduleStatus>,
        page: Page,
    ) -> Result<(i64, Vec<Schedule>), StoreError> {
        let c = &mut *self.c;
        let filters = Filters::app(app_id)
            .always("status <> 'deleted'")
            .eq_word("status", status);
        Ok(list_page(
            c,
            "schedules",
            COLUMNS,
            &filters,
            page,
            from_row,
        )?)
    }

    /// Active schedules due at `now_ms`, earliest first, at most `limit`, locked for the caller's
    /// transaction. Schedules another node's scheduler holds are skipped, not waited for.
    fn due_schedules(&mut self, now_ms: i64, limit: usize) -> Result<Vec<Firing>, StoreError> {
        let c = &mut *self.c;
        Ok(c.query(
            &format!(
                "SELECT {FIRING_COLUMNS} FROM schedules
                      WHERE status = 'active' AND next_run_at <= $1 ORDER BY next_run_at LIMIT $2
                      FOR UPDATE SKIP LOCKED"
            ),
            &[&now_ms, &i64::try_from(limit).unwrap_or(i64::MAX)],
        )?
        .iter()
        .map(firing_from_row)
        .collect::<Result<_, _>>()?)
    }

    fn get_active_schedule(&mut self, id: i64) -> Result<Option<Firing>, StoreError> {
        let c = &mut *self.c;
        Ok(c.query_opt(
            &format!("SELECT {FIRING_COLUMNS} FROM schedules WHERE id = $1 AND status = 'active'"),
            &[&id],
        )?
        .as_ref()
        .map(firing_from_row)
        .transpose()?)
    }

    /// The earliest `next_run_at` of all active schedules.
    fn earliest_next_run(&mut self) -> Result<Option<i64>, StoreError> {
        let c = &mut *self.c;
        Ok(c.query_one(
            "SELECT min(next_run_at) FROM schedules WHERE status = 'active'",
            &[],
        )?
        .try_get(0)?)
    }

    /// Records the firings in one statement; for each, false when it had fired already, on this
    /// node or another (a concurrent insert of the same instant waits for the first to commit,
    /// then inserts nothing), or appears earlier in `firings`.
    fn record_firings(&mut self, firings: &[(i64, i64)]) -> Result<Vec<bool>, StoreError> {
        if firings.is_empty() {
            return Ok(Vec::new());
        }
        let c = &mut *self.c;
        let (ids, ats): (Vec<i64>, Vec<i64>) = firings.iter().copied().unzip();
        let mut inserted: HashSet<(i64, i64)> = c
            .query(
                "INSERT INTO schedule_firings (schedule_id, scheduled_at)
                 SELECT * FROM unnest($1::int8[], $2::int8[])
                 ON CONFLICT DO NOTHING
                 RETURNING schedule_id, scheduled_at",
                &[&ids, &ats],
            )?
            .iter()
            .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
            .collect::<Result<_, postgres::Error>>()?;
        Ok(firings.iter().map(|f| inserted.remove(f)).collect())
    }

    /// Moves active schedules on in one statement: `next_run_at` always, `last_run_at` when
    /// it fired, `skipped_runs` up by `skipped`. `updated_at` is left alone.
    fn advance_schedules(&mut self, moves: &[Advance]) -> Result<(), StoreError> {
        if moves.is_empty() {
            return Ok(());
        }
        let c = &mut *self.c;
        let ids: Vec<i64> = moves.iter().map(|m| m.id).collect();
        let fired: Vec<Option<i64>> = moves.iter().map(|m| m.fired_at).collect();
        let next: Vec<Option<i64>> = moves.iter().map(|m| m.next_run_at).collect();
        let skipped: Vec<i64> = moves.iter().map(|m| m.skipped).collect();
        c.execute(
            "UPDATE schedules s SET last_run_at = coalesce(m.fired_at, s.last_run_at),
             next_run_at = m.next_run_at, skipped_runs = s.skipped_runs + m.skipped
             FROM unnest($1::int8[], $2::int8[], $3::int8[], $4::int8[])
                  AS m(id, fired_at, next_run_at, skipped)
             WHERE s.id = m.id AND s.status = 'active'",
            &[&ids, &fired, &next, &skipped],
        )?;
        Ok(())
    }
}
