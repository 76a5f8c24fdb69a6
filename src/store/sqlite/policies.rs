//! [`PolicyQueries`] on SQLite: the SQL of the `policies` table (records in `store::policies`).

use crate::store::Page;
#[allow(unused_imports)]
use crate::store::policies::*;
use crate::store::sqlite::SqliteTx;
use crate::store::sqlite::list::{Filters, list_page};
use crate::store::{PolicyQueries, StoreError};
use rusqlite::{OptionalExtension, Row, params};

const COLUMNS: &str = "id, app_id, name, max_attempts, backoff_type, initial_delay_sec, max_delay_sec, status, created_at, updated_at, max_age_sec, jitter";

fn from_row(r: &Row<'_>) -> rusqlite::Result<Policy> {
    Ok(Policy {
        id: r.get(0)?,
        app_id: r.get(1)?,
        name: r.get(2)?,
        max_attempts: r.get(3)?,
        backoff_type: r.get(4)?,
        initial_delay_sec: r.get(5)?,
        max_delay_sec: r.get(6)?,
        status: r.get(7)?,
        created_at: r.get(8)?,
        updated_at: r.get(9)?,
        max_age_sec: r.get(10)?,
        jitter: r.get(11)?,
    })
}

impl PolicyQueries for SqliteTx<'_> {
    fn insert_policy(&mut self, p: &Policy) -> Result<Policy, StoreError> {
        let conn = self.0;
        conn.prepare_cached(
            "INSERT INTO retry_policies (app_id, name, max_attempts, backoff_type, initial_delay_sec, max_delay_sec, status, created_at, updated_at, max_age_sec, jitter)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
        )?
        .execute(params![
            p.app_id,
            p.name,
            p.max_attempts,
            p.backoff_type,
            p.initial_delay_sec,
            p.max_delay_sec,
            p.status,
            p.created_at,
            p.updated_at,
            p.max_age_sec,
            p.jitter
        ])?;
        Ok(Policy {
            id: conn.last_insert_rowid(),
            ..p.clone()
        })
    }

    fn update_policy(&mut self, p: &Policy) -> Result<(), StoreError> {
        let conn = self.0;
        conn.prepare_cached(
            "UPDATE retry_policies SET name = ?3, max_attempts = ?4, backoff_type = ?5, initial_delay_sec = ?6,
             max_delay_sec = ?7, status = ?8, updated_at = ?9,
             max_age_sec = ?10, jitter = ?11 WHERE app_id = ?1 AND id = ?2",
        )?
        .execute(params![
            p.app_id,
            p.id,
            p.name,
            p.max_attempts,
            p.backoff_type,
            p.initial_delay_sec,
            p.max_delay_sec,
            p.status,
            p.updated_at,
            p.max_age_sec,
            p.jitter
        ])?;
        conn.prepare_cached(
            "INSERT INTO target_generation (app_id, generation)
             SELECT DISTINCT app_id, ?2 FROM endpoints WHERE retry_policy_id = ?1
             ON CONFLICT (app_id) DO UPDATE SET generation = excluded.generation",
        )?
        .execute(params![p.id, crate::store::endpoints::fresh_generation()])?;
        Ok(())
    }

    fn get_policy(&mut self, app_id: &str, id: i64) -> Result<Option<Policy>, StoreError> {
        let conn = self.0;
        Ok(conn
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM retry_policies WHERE app_id = ?1 AND id = ?2"
            ))?
            .query_row(params![app_id, id], from_row)
            .optional()?)
    }

    fn get_policy_any(&mut self, id: i64) -> Result<Option<Policy>, StoreError> {
        let conn = self.0;
        Ok(conn
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM retry_policies WHERE id = ?1"
            ))?
            .query_row(params![id], from_row)
            .optional()?)
    }

    fn list_policies(
        &mut self,
        app_id: &str,
        page: Page,
    ) -> Result<(i64, Vec<Policy>), StoreError> {
        let conn = self.0;
        Ok(list_page(
            conn,
            "retry_policies",
            COLUMNS,
            &Filters::app(app_id),
            page,
            from_row,
        )?)
    }

    fn delete_policy(&mut self, app_id: &str, id: i64) -> Result<bool, StoreError> {
        let conn = self.0;
        let n = conn.execute(
            "DELETE FROM retry_policies WHERE app_id = ?1 AND id = ?2",
            params![app_id, id],
        )?;
        Ok(n == 1)
    }
}
