//! The `retry_policies` table on PostgreSQL ([`PolicyQueries`] on a [`PgTx`]).

use super::list::{Filters, list_page};
use crate::store::Page;
use crate::store::policies::Policy;
use crate::store::postgres::PgTx;
use crate::store::{PolicyQueries, StoreError};
use postgres::{Error, GenericClient, Row};

const COLUMNS: &str = "id, app_id, name, max_attempts, backoff_type, initial_delay_sec, max_delay_sec, status, created_at, updated_at, max_age_sec, jitter";

fn from_row(r: &Row) -> Result<Policy, Error> {
    Ok(Policy {
        id: r.try_get(0)?,
        app_id: r.try_get(1)?,
        name: r.try_get(2)?,
        max_attempts: r.try_get(3)?,
        backoff_type: r.try_get(4)?,
        initial_delay_sec: r.try_get(5)?,
        max_delay_sec: r.try_get(6)?,
        status: r.try_get(7)?,
        created_at: r.try_get(8)?,
        updated_at: r.try_get(9)?,
        max_age_sec: r.try_get(10)?,
        jitter: r.try_get(11)?,
    })
}

impl<C: GenericClient> PolicyQueries for PgTx<'_, C> {
    fn insert_policy(&mut self, p: &Policy) -> Result<Policy, StoreError> {
        let c = &mut *self.c;
        let id: i64 = c
            .query_one(
                "INSERT INTO retry_policies (app_id, name, max_attempts, backoff_type, initial_delay_sec, max_delay_sec, status, created_at, updated_at, max_age_sec, jitter)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) RETURNING id",
                &[
                    &p.app_id,
                    &p.name,
                    &p.max_attempts,
                    &p.backoff_type,
                    &p.initial_delay_sec,
                    &p.max_delay_sec,
                    &p.status,
                    &p.created_at,
                    &p.updated_at,
                    &p.max_age_sec,
                    &p.jitter,
                ],
            )?
            .try_get(0)?;
        Ok(Policy { id, ..p.clone() })
    }

    fn update_policy(&mut self, p: &Policy) -> Result<(), StoreError> {
        let c = &mut *self.c;
        c.execute(
            "UPDATE retry_policies SET name = $3, max_attempts = $4, backoff_type = $5, initial_delay_sec = $6,
             max_delay_sec = $7, status = $8, updated_at = $9,
             max_age_sec = $10, jitter = $11 WHERE app_id = $1 AND id = $2",
            &[
                &p.app_id,
                &p.id,
                &p.name,
                &p.max_attempts,
                &p.backoff_type,
                &p.initial_delay_sec,
                &p.max_delay_sec,
                &p.status,
                &p.updated_at,
                &p.max_age_sec,
                &p.jitter,
            ],
        )?;
        let apps = c.query(
            "SELECT DISTINCT app_id FROM endpoints WHERE retry_policy_id = $1",
            &[&p.id],
        )?;
        for row in &apps {
            let app_id: String = row.try_get(0)?;
            self.target_changed(&app_id);
        }
        Ok(())
    }

    fn get_policy(&mut self, app_id: &str, id: i64) -> Result<Option<Policy>, StoreError> {
        let c = &mut *self.c;
        Ok(c.query_opt(
            &format!("SELECT {COLUMNS} FROM retry_policies WHERE app_id = $1 AND id = $2"),
            &[&app_id, &id],
        )?
        .as_ref()
        .map(from_row)
        .transpose()?)
    }

    fn get_policy_any(&mut self, id: i64) -> Result<Option<Policy>, StoreError> {
        let c = &mut *self.c;
        Ok(c.query_opt(
            &format!("SELECT {COLUMNS} FROM retry_policies WHERE id = $1"),
            &[&id],
        )?
        .as_ref()
        .map(from_row)
        .transpose()?)
    }

    fn list_policies(
        &mut self,
        app_id: &str,
        page: Page,
    ) -> Result<(i64, Vec<Policy>), StoreError> {
        let c = &mut *self.c;
        Ok(list_page(
            c,
            "retry_policies",
            COLUMNS,
            &Filters::app(app_id),
            page,
            from_row,
        )?)
    }

    fn delete_policy(&mut self, app_id: &str, id: i64) -> Result<bool, StoreError> {
        let c = &mut *self.c;
        let n = c.execute(
            "DELETE FROM retry_policies WHERE app_id = $1 AND id = $2",
            &[&app_id, &id],
        )?;
        Ok(n == 1)
    }
}
