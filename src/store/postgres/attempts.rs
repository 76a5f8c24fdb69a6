//! The `attempts` table on PostgreSQL ([`AttemptQueries`] on a [`PgTx`]).

use crate::store::Page;
use crate::store::attempts::{Attempt, RequestHeaders};
use crate::store::postgres::PgTx;
use crate::store::{AttemptQueries, StoreError};
use postgres::{Error, GenericClient, Row};

const COLUMNS: &str = "id, task_id, attempt, started_at, duration_ms, status_code, error, response_body, request_headers";

fn from_row(r: &Row) -> Result<Attempt, Error> {
    Ok(Attempt {
        id: r.try_get(0)?,
        task_id: r.try_get(1)?,
        attempt: r.try_get(2)?,
        started_at: r.try_get(3)?,
        duration_ms: r.try_get(4)?,
        status_code: r.try_get(5)?,
        error: r.try_get(6)?,
        response_body: r.try_get(7)?,
        request_headers: r
            .try_get::<_, Option<String>>(8)?
            .map(RequestHeaders::from_stored),
    })
}

impl<C: GenericClient> AttemptQueries for PgTx<'_, C> {
    /// Appends an attempt row (its `id` is ignored), in the delivery pool's result transaction.
    fn insert_attempt(&mut self, a: &Attempt) -> Result<(), StoreError> {
        let c = &mut *self.c;
        c.execute(
            "INSERT INTO attempts (task_id, attempt, started_at, duration_ms, status_code, error, response_body, request_headers)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            &[
                &a.task_id,
                &a.attempt,
                &a.started_at,
                &a.duration_ms,
                &a.status_code,
                &a.error,
                &a.response_body,
                &a.request_headers.as_ref().map(RequestHeaders::as_str),
            ],
        )?;
        Ok(())
    }

    /// One `INSERT … SELECT FROM unnest(…)` for the round (`ORDER BY ord`: ids ascend in the
    /// order given, as one insert each would make them).
    fn insert_attempts(&mut self, attempts: &[Attempt]) -> Result<(), StoreError> {
        if attempts.len() < 2 {
            return attempts.iter().try_for_each(|a| self.insert_attempt(a));
        }
        let c = &mut *self.c;
        let col = |f: fn(&Attempt) -> i64| attempts.iter().map(f).collect::<Vec<i64>>();
        let codes: Vec<Option<i64>> = attempts.iter().map(|a| a.status_code).collect();
        let errors: Vec<Option<&str>> = attempts.iter().map(|a| a.error.as_deref()).collect();
        let (bodies, headers) = reply_columns(attempts);
        c.execute(
            "INSERT INTO attempts (task_id, attempt, started_at, duration_ms, status_code, error, response_body, request_headers)
             SELECT task_id, attempt, started_at, duration_ms, status_code, error, response_body, request_headers
             FROM unnest($1::int8[], $2::int8[], $3::int8[], $4::int8[], $5::int8[], $6::text[], $7::text[], $8::text[])
                  WITH ORDINALITY AS a(task_id, attempt, started_at, duration_ms, status_code, error,
                                       response_body, request_headers, ord)
             ORDER BY ord",
            &[
                &col(|a| a.task_id),
                &col(|a| a.attempt),
                &col(|a| a.started_at),
                &col(|a| a.duration_ms),
                &codes,
                &errors,
                &bodies,
                &headers,
            ],
        )?;
        Ok(())
    }

    fn list_attempts(
        &mut self,
        task_id: i64,
        page: Page,
    ) -> Result<(i64, Vec<Attempt>), StoreError> {
        let c = &mut *self.c;
        let total: i64 = c
            .query_one(
                "SELECT count(*) FROM attempts WHERE task_id = $1",
                &[&task_id],
            )?
            .try_get(0)?;
        let items = c
            .query(
                &format!(
                    "SELECT {COLUMNS} FROM attempts WHERE task_id = $1 ORDER BY id LIMIT $2 OFFSET $3"
                ),
                &[&task_id, &page.limit(), &page.offset()],
            )?
            .iter()
            .map(from_row)
            .collect::<Result<Vec<_>, _>>()?;
        Ok((total, items))
    }

    fn first_attempt_started_at(&mut self, task_id: i64) -> Result<Option<i64>, StoreError> {
        let c = &mut *self.c;
        Ok(c.query_one(
            "SELECT max(started_at) FROM attempts WHERE task_id = $1 AND attempt = 1",
            &[&task_id],
        )?
        .try_get(0)?)
    }
}

/// The response bodies and request headers of `attempts`, as the text arrays of a batched
/// insert.
pub(super) fn reply_columns(attempts: &[Attempt]) -> (Vec<Option<&str>>, Vec<Option<&str>>) {
    let bodies = attempts
        .iter()
        .map(|a| a.response_body.as_deref())
        .collect();
    let headers = attempts
        .iter()
        .map(|a| a.request_headers.as_ref().map(RequestHeaders::as_str))
        .collect();
    (bodies, headers)
}
