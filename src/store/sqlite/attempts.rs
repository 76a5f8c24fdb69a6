//! [`AttemptQueries`] on SQLite: the SQL of the `attempts` table (records in `store::attempts`).

use crate::store::Page;
use crate::store::attempts::{Attempt, RequestHeaders};
use crate::store::sqlite::SqliteTx;
use crate::store::sqlite::ids;
use crate::store::{AttemptQueries, StoreError};
use rusqlite::{Row, params};

const COLUMNS: &str = "id, task_id, attempt, started_at, duration_ms, status_code, error, response_body, request_headers";

fn from_row(r: &Row<'_>) -> rusqlite::Result<Attempt> {
    Ok(Attempt {
        id: r.get(0)?,
        task_id: r.get(1)?,
        attempt: r.get(2)?,
        started_at: r.get(3)?,
        duration_ms: r.get(4)?,
        status_code: r.get(5)?,
        error: r.get(6)?,
        response_body: r.get(7)?,
        request_headers: r
            .get::<_, Option<String>>(8)?
            .map(RequestHeaders::from_stored),
    })
}

impl AttemptQueries for SqliteTx<'_> {
    fn insert_attempt(&mut self, a: &Attempt) -> Result<(), StoreError> {
        let conn = self.0;
        let id = ids::take(conn, ids::Table::Attempts, 1)?;
        conn.prepare_cached(
            "INSERT INTO attempts (id, task_id, attempt, started_at, duration_ms, status_code, error, response_body, request_headers)
             VALUES (?9, ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        )?
        .execute(params![
            a.task_id,
            a.attempt,
            a.started_at,
            a.duration_ms,
            a.status_code,
            a.error,
            a.response_body,
            a.request_headers.as_ref().map(RequestHeaders::as_str),
            id
        ])?;
        Ok(())
    }

    fn list_attempts(
        &mut self,
        task_id: i64,
        page: Page,
    ) -> Result<(i64, Vec<Attempt>), StoreError> {
        let conn = self.0;
        let total = conn
            .prepare_cached("SELECT count(*) FROM attempts WHERE task_id = ?1")?
            .query_row(params![task_id], |r| r.get(0))?;
        let items = conn
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM attempts WHERE task_id = ?1 ORDER BY id LIMIT ?2 + 0 OFFSET ?3 + 0"
            ))?
            .query_map(params![task_id, page.limit(), page.offset()], from_row)?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok((total, items))
    }

    fn first_attempt_started_at(&mut self, task_id: i64) -> Result<Option<i64>, StoreError> {
        let conn = self.0;
        Ok(conn
            .prepare_cached(
                "SELECT max(started_at) FROM attempts WHERE task_id = ?1 AND attempt = 1",
            )?
            .query_row(params![task_id], |r| r.get(0))?)
    }
}
