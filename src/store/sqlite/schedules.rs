//! [`ScheduleQueries`] on SQLite: the SQL of the `schedules` table (records in `store::schedules`).

use crate::store::Page;
use crate::store::json::{SchedulePayload, ScheduleTargets, Stored};
#[allow(unused_imports)]
use crate::store::schedules::*;
use crate::store::sqlite::list::{Filters, list_page};
use crate::store::sqlite::{SqliteTx, rows};
use crate::store::{ScheduleQueries, StoreError};
use rusqlite::{OptionalExtension, Row, ToSql, params};
use std::collections::{BTreeMap, HashSet};

const COLUMNS: &str = "id, app_id, name, cron_expr, timezone, payload, status, next_run_at, last_run_at, created_at, updated_at, endpoint_ids, paused_reason, catchup, overlap, skipped_runs, starts_at, ends_at, jitter_sec";

const FIRING_COLUMNS: &str = "id, app_id, cron_expr, timezone, payload, endpoint_ids, next_run_at, catchup, overlap, starts_at, ends_at, jitter_sec";

fn from_row(r: &Row<'_>) -> rusqlite::Result<Schedule> {
    Ok(Schedule {
        id: r.get(0)?,
        app_id: r.get(1)?,
        name: r.get(2)?,
        cron_expr: r.get(3)?,
        timezone: r.get(4)?,
        payload: r.get::<_, Stored<SchedulePayload>>(5)?.0,
        status: r.get(6)?,
        next_run_at: r.get(7)?,
        last_run_at: r.get(8)?,
        created_at: r.get(9)?,
        updated_at: r.get(10)?,
        endpoint_ids: r.get::<_, Stored<ScheduleTargets>>(11)?.0,
        paused_reason: r.get(12)?,
        catchup: r.get(13)?,
        overlap: r.get(14)?,
        skipped_runs: r.get(15)?,
        starts_at: r.get(16)?,
        ends_at: r.get(17)?,
        jitter_sec: r.get(18)?,
        endpoint_names: BTreeMap::new(),
        next_run_at_local: None,
    })
}

fn firing_from_row(r: &Row<'_>) -> rusqlite::Result<Firing> {
    Ok(Firing {
        id: r.get(0)?,
        app_id: r.get(1)?,
        cron_expr: r.get(2)?,
        timezone: r.get(3)?,
        payload: r.get(4)?,
        endpoint_ids: r.get::<_, Stored<ScheduleTargets>>(5)?.0,
        next_run_at: r.get(6)?,
        catchup: r.get(7)?,
        overlap: r.get(8)?,
        window: Window {
            starts_at: r.get(9)?,
            ends_at: r.get(10)?,
        },
        jitter_sec: r.get(11)?,
    })
}

impl ScheduleQueries for SqliteTx<'_> {
    fn insert_schedule(&mut self, s: &Schedule) -> Result<Schedule, StoreError> {
        let conn = self.0;
        conn.prepare_cached(
            "INSERT INTO schedules (app_id, name, cron_expr, timezone, payload, endpoint_ids, status, next_run_at, last_run_at, created_at, updated_at, paused_reason, catchup, overlap, skipped_runs, starts_at, ends_at, jitter_sec)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)",
        )?
        .execute(params![
            s.app_id,
            s.name,
            s.cron_expr,
            s.timezone,
            s.payload_text(),
            s.endpoint_ids_text(),
            s.status,
            s.next_run_at,
            s.last_run_at,
            s.created_at,
            s.updated_at,
            s.paused_reason,
            s.catchup,
            s.overlap,
            s.skipped_runs,
            s.starts_at,
            s.ends_at,
            s.jitter_sec
        ])?;
        Ok(Schedule {
            id: conn.last_insert_rowid(),
            ..s.clone()
        })
    }

    fn update_schedule(&mut self, s: &Schedule) -> Result<(), StoreError> {
        let conn = self.0;
        conn.prepare_cached(
            "UPDATE schedules SET name = ?3, cron_expr = ?4, timezone = ?5, payload = ?6, endpoint_ids = ?7,
             status = ?8, next_run_at = ?9, updated_at = ?10, paused_reason = ?11, catchup = ?12, overlap = ?13,
             starts_at = ?14, ends_at = ?15, jitter_sec = ?16
             WHERE app_id = ?1 AND id = ?2",
        )?
        .execute(params![
            s.app_id,
            s.id,
            s.name,
            s.cron_expr,
            s.timezone,
            s.payload_text(),
            s.endpoint_ids_text(),
            s.status,
            s.next_run_at,
            s.updated_at,
            s.paused_reason,
            s.catchup,
            s.overlap,
            s.starts_at,
            s.ends_at,
            s.jitter_sec
        ])?;
        Ok(())
    }

    fn get_schedule(&mut self, app_id: &str, id: i64) -> Result<Option<Schedule>, StoreError> {
        let conn = self.0;
        Ok(conn
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM schedules WHERE app_id = ?1 AND id = ?2"
            ))?
            .query_row(params![app_id, id], from_row)
            .optional()?)
    }

    fn list_schedules(
        &mut self,
        app_id: &str,
        status: Option<ScheduleStatus>,
        page: Page,
    ) -> Result<(i64, Vec<Schedule>), StoreError> {
        let conn = self.0;
        let filters = Filters::app(app_id)
            .always("status != 'deleted'")
            .eq_word("status", status);
        Ok(list_page(
            conn,
            "schedules",
            COLUMNS,
            &filters,
            page,
            from_row,
        )?)
    }

    fn due_schedules(&mut self, now_ms: i64, limit: usize) -> Result<Vec<Firing>, StoreError> {
        let conn = self.0;
        Ok(conn
            .prepare_cached(&format!(
                "SELECT {FIRING_COLUMNS} FROM schedules
             WHERE status = 'active' AND next_run_at <= ?1 ORDER BY next_run_at LIMIT ?2"
            ))?
            .query_map(
                params![now_ms, i64::try_from(limit).unwrap_or(i64::MAX)],
                firing_from_row,
            )?
            .collect::<Result<_, _>>()?)
    }

    fn get_active_schedule(&mut self, id: i64) -> Result<Option<Firing>, StoreError> {
        let conn = self.0;
        Ok(conn
            .prepare_cached(&format!(
                "SELECT {FIRING_COLUMNS} FROM schedules WHERE id = ?1 AND status = 'active'"
            ))?
            .query_row(params![id], firing_from_row)
            .optional()?)
    }

    fn earliest_next_run(&mut self) -> Result<Option<i64>, StoreError> {
        let conn = self.0;
        Ok(conn
            .prepare_cached("SELECT min(next_run_at) FROM schedules WHERE status = 'active'")?
            .query_row([], |r| r.get(0))?)
    }

    /// A few multi-row statements (`rows::chunks`); for each firing, false when it had fired
    /// already or appears earlier in `firings` (`RETURNING` names the rows inserted).
    fn record_firings(&mut self, firings: &[(i64, i64)]) -> Result<Vec<bool>, StoreError> {
        let conn = self.0;
        let mut inserted = HashSet::with_capacity(firings.len());
        for range in rows::chunks(firings.len()) {
            let sql = rows::values(
                "INSERT OR IGNORE INTO schedule_firings (schedule_id, scheduled_at)",
                "(?, ?)",
                range.len(),
                " RETURNING schedule_id, scheduled_at",
            );
            let args: Vec<&dyn ToSql> = firings[range]
                .iter()
                .flat_map(|(id, at)| [id as &dyn ToSql, at])
                .collect();
            let mut stmt = conn.prepare_cached(&sql)?;
            let mut rows = stmt.query(&*args)?;
            while let Some(r) = rows.next()? {
                inserted.insert((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?));
            }
        }
        Ok(firings.iter().map(|f| inserted.remove(f)).collect())
    }

    /// A few multi-row statements (`rows::chunks`), as on PostgreSQL: `next_run_at` always,
    /// `last_run_at` when it fired, `skipped_runs` up by `skipped`.
    fn advance_schedules(&mut self, moves: &[Advance]) -> Result<(), StoreError> {
        let conn = self.0;
        for range in rows::chunks(moves.len()) {
            let sql = rows::values(
                "WITH m (id, fired_at, next_run_at, skipped) AS (",
                "(?, ?, ?, ?)",
                range.len(),
                ") UPDATE schedules SET last_run_at = coalesce(m.fired_at, schedules.last_run_at),
                   next_run_at = m.next_run_at, skipped_runs = schedules.skipped_runs + m.skipped
                 FROM m WHERE schedules.id = m.id AND schedules.status = 'active'",
            );
            let args: Vec<&dyn ToSql> = moves[range]
                .iter()
                .flat_map(|m| [&m.id as &dyn ToSql, &m.fired_at, &m.next_run_at, &m.skipped])
                .collect();
            conn.prepare_cached(&sql)?.execute(&*args)?;
        }
        Ok(())
    }
}
