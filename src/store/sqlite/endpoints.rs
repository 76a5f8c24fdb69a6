//! [`EndpointQueries`] on SQLite: the SQL of the `endpoints` table (records in `store::endpoints`).

use crate::store::Page;
#[allow(unused_imports)]
use crate::store::endpoints::*;
use crate::store::json::{EndpointHeaders, EndpointPayloadFilter, Stored};
use crate::store::sqlite::SqliteTx;
use crate::store::sqlite::list::{Filters, list_page};
use crate::store::{EndpointQueries, StoreError};
use rusqlite::{OptionalExtension, Row, params};

/// Cancels a deleted endpoint's pending tasks. It names `tasks_endpoint_due` (its pending tasks
/// only): without `tasks_endpoint_order`, SQLite 3.40 (Debian's shell) plans it through
/// `tasks_endpoint (endpoint_id=?)`, every task the endpoint ever had, inside the deletion's
/// write (250,000 of them: 1.7 → 104 ms); the bundled SQLite picks `tasks_endpoint_due` on its
/// own, and the name keeps it so whichever SQLite plans it.
const CANCEL_PENDING_OF_ENDPOINT: &str = "UPDATE tasks INDEXED BY tasks_endpoint_due
  SET status = 'canceled', finished_at = ?2, updated_at = ?2, next_attempt_at = NULL,
      last_error = coalesce(last_error, 'endpoint deleted')
  WHERE endpoint_id = ?1 AND status = 'pending'";

const COLUMNS: &str = "id, app_id, name, url, method, headers, secret, timeout_ms, retry_policy_id, filter_events, status, created_at, updated_at, rate_limit_per_sec, max_in_flight, previous_secret, previous_secret_expires_at, disabled_reason, last_success_at, last_failure_at, consecutive_failures, filter_payload";

fn from_row(r: &Row<'_>) -> rusqlite::Result<Endpoint> {
    Ok(Endpoint {
        id: r.get(0)?,
        app_id: r.get(1)?,
        name: r.get(2)?,
        url: r.get(3)?,
        method: r.get(4)?,
        headers: r.get::<_, Stored<EndpointHeaders>>(5)?.0,
        secret: r.get(6)?,
        timeout_ms: r.get(7)?,
        retry_policy_id: r.get(8)?,
        filter_events: r.get(9)?,
        status: r.get(10)?,
        rate_limit_per_sec: r.get(13)?,
        max_in_flight: r.get(14)?,
        previous_secret: r.get(15)?,
        previous_secret_expires_at: r.get(16)?,
        created_at: r.get(11)?,
        updated_at: r.get(12)?,
        disabled_reason: r.get(17)?,
        last_success_at: r.get(18)?,
        last_failure_at: r.get(19)?,
        consecutive_failures: r.get(20)?,
        filter_payload: r
            .get::<_, Option<Stored<EndpointPayloadFilter>>>(21)?
            .map(|f| f.0),
    })
}

fn headers_json(ep: &Endpoint) -> String {
    serde_json::Value::Object(ep.headers.clone()).to_string()
}

/// Gives `app_id` a new target generation (`EndpointQueries::enabled_targets_since`).
fn bump_target_generation(conn: &rusqlite::Connection, app_id: &str) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO target_generation (app_id, generation) VALUES (?1, ?2)
         ON CONFLICT (app_id) DO UPDATE SET generation = excluded.generation",
    )?
    .execute(params![app_id, fresh_generation()])?;
    Ok(())
}

/// The columns of a [`Target`] from `e` (endpoints) and `p` (its retry policy; `?2` is the
/// default policy's attempts), read by [`target_from_row`].
const TARGET_COLUMNS: &str =
    "e.id, e.filter_events, coalesce(p.max_attempts, ?2), e.filter_payload";

fn target_from_row(r: &Row<'_>) -> rusqlite::Result<Target> {
    Ok(Target {
        id: r.get(0)?,
        filter_events: r.get(1)?,
        max_attempts: r.get(2)?,
        filter_payload: r.get(3)?,
    })
}

impl EndpointQueries for SqliteTx<'_> {
    fn insert_endpoint(&mut self, ep: &Endpoint) -> Result<Endpoint, StoreError> {
        let conn = self.0;
        conn.prepare_cached(
            "INSERT INTO endpoints (app_id, name, url, method, headers, secret, timeout_ms, retry_policy_id, filter_events, status, created_at, updated_at,
                                    rate_limit_per_sec, max_in_flight, previous_secret, previous_secret_expires_at, filter_payload)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)",
        )?
        .execute(params![
            ep.app_id,
            ep.name,
            ep.url,
            ep.method,
            headers_json(ep),
            ep.secret,
            ep.timeout_ms,
            ep.retry_policy_id,
            ep.filter_events,
            ep.status,
            ep.created_at,
            ep.updated_at,
            ep.rate_limit_per_sec,
            ep.max_in_flight,
            ep.previous_secret,
            ep.previous_secret_expires_at,
            filter_payload_text(ep)
        ])?;
        let id = conn.last_insert_rowid();
        bump_target_generation(conn, &ep.app_id)?;
        Ok(Endpoint { id, ..ep.clone() })
    }

    fn update_endpoint(&mut self, ep: &Endpoint) -> Result<(), StoreError> {
        let conn = self.0;
        conn.prepare_cached(
            "UPDATE endpoints SET name = ?3, url = ?4, method = ?5, headers = ?6, secret = ?7, timeout_ms = ?8,
             retry_policy_id = ?9, filter_events = ?10, updated_at = ?11,
             rate_limit_per_sec = ?12, max_in_flight = ?13, previous_secret = ?14, previous_secret_expires_at = ?15,
             filter_payload = ?16
             WHERE app_id = ?1 AND id = ?2",
        )?
        .execute(params![
            ep.app_id,
            ep.id,
            ep.name,
            ep.url,
            ep.method,
            headers_json(ep),
            ep.secret,
            ep.timeout_ms,
            ep.retry_policy_id,
            ep.filter_events,
            ep.updated_at,
            ep.rate_limit_per_sec,
            ep.max_in_flight,
            ep.previous_secret,
            ep.previous_secret_expires_at,
            filter_payload_text(ep)
        ])?;
        bump_target_generation(conn, &ep.app_id)?;
        Ok(())
    }

    fn get_endpoint(&mut self, app_id: &str, id: i64) -> Result<Option<Endpoint>, StoreError> {
        let conn = self.0;
        Ok(conn
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM endpoints WHERE app_id = ?1 AND id = ?2"
            ))?
            .query_row(params![app_id, id], from_row)
            .optional()?)
    }

    fn get_endpoint_any(&mut self, id: i64) -> Result<Option<Endpoint>, StoreError> {
        let conn = self.0;
        Ok(conn
            .prepare_cached(&format!("SELECT {COLUMNS} FROM endpoints WHERE id = ?1"))?
            .query_row(params![id], from_row)
            .optional()?)
    }

    fn set_endpoint_status(
        &mut self,
        app_id: &str,
        id: i64,
        enabled: bool,
        reason: DisabledReason,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let conn = self.0;
        let n = if enabled {
            conn.prepare_cached(
                "UPDATE endpoints SET status = 'enabled', disabled_reason = NULL, consecutive_failures = 0,
                 failing_since = NULL, updated_at = ?3
                 WHERE app_id = ?1 AND id = ?2 AND status != 'enabled'",
            )?
            .execute(params![app_id, id, now_ms])?
        } else {
            conn.prepare_cached(
                "UPDATE endpoints SET status = 'disabled', disabled_reason = ?3, updated_at = ?4
                 WHERE app_id = ?1 AND id = ?2 AND status != 'disabled'",
            )?
            .execute(params![app_id, id, reason.as_str(), now_ms])?
        };
        if n == 1 {
            bump_target_generation(conn, app_id)?;
        }
        Ok(n == 1)
    }

    fn disable_endpoint_any(
        &mut self,
        id: i64,
        reason: DisabledReason,
        now_ms: i64,
    ) -> Result<Option<String>, StoreError> {
        let conn = self.0;
        let app_id: Option<String> = conn
            .prepare_cached(
                "UPDATE endpoints SET status = 'disabled', disabled_reason = ?2, updated_at = ?3
             WHERE id = ?1 AND status = 'enabled' RETURNING app_id",
            )?
            .query_row(params![id, reason.as_str(), now_ms], |r| r.get(0))
            .optional()?;
        if let Some(app_id) = &app_id {
            bump_target_generation(conn, app_id)?;
        }
        Ok(app_id)
    }

    fn write_endpoint_health(&mut self, id: i64, delta: &HealthDelta) -> Result<(), StoreError> {
        let conn = self.0;
        // A success in the round restarts the streak from the failures after it; without one the
        // round's failures extend the streak. The times never move back (the later of the two,
        // either when the other is NULL), as on PostgreSQL.
        conn.prepare_cached(
            "UPDATE endpoints SET
                last_success_at = max(coalesce(?2, last_success_at), coalesce(last_success_at, ?2)),
                last_failure_at = max(coalesce(?3, last_failure_at), coalesce(last_failure_at, ?3)),
                consecutive_failures = CASE WHEN ?2 IS NULL THEN consecutive_failures + ?4 ELSE ?4 END,
                failing_since = CASE WHEN ?2 IS NULL THEN coalesce(failing_since, ?5) ELSE ?5 END
             WHERE id = ?1",
        )?
        .execute(params![
            id,
            delta.last_success_at,
            delta.last_failure_at,
            delta.failures,
            delta.first_failure_at
        ])?;
        Ok(())
    }

    fn disable_failing_endpoint(
        &mut self,
        id: i64,
        min_failures: i64,
        failing_after_ms: i64,
        now_ms: i64,
    ) -> Result<Option<(String, i64)>, StoreError> {
        let conn = self.0;
        let disabled: Option<(String, i64)> = conn
            .prepare_cached(
                "UPDATE endpoints SET status = 'disabled', disabled_reason = 'failing', updated_at = ?4
             WHERE id = ?1 AND status = 'enabled' AND consecutive_failures >= ?2
               AND failing_since IS NOT NULL AND ?4 - failing_since >= ?3
             RETURNING app_id, consecutive_failures",
            )?
            .query_row(params![id, min_failures, failing_after_ms, now_ms], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .optional()?;
        if let Some((app_id, _)) = &disabled {
            bump_target_generation(conn, app_id)?;
        }
        Ok(disabled)
    }

    fn list_endpoints(
        &mut self,
        app_id: &str,
        status: Option<EndpointStatus>,
        page: Page,
    ) -> Result<(i64, Vec<Endpoint>), StoreError> {
        let conn = self.0;
        let filters = Filters::app(app_id).eq_word("status", status);
        Ok(list_page(
            conn,
            "endpoints",
            COLUMNS,
            &filters,
            page,
            from_row,
        )?)
    }

    fn endpoint_names(
        &mut self,
        app_id: &str,
        ids: &[i64],
    ) -> Result<Vec<(i64, String)>, StoreError> {
        let conn = self.0;
        let mut stmt =
            conn.prepare_cached("SELECT id, name FROM endpoints WHERE app_id = ?1 AND id = ?2")?;
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(row) = stmt
                .query_row(params![app_id, id], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()?
            {
                out.push(row);
            }
        }
        Ok(out)
    }

    fn count_endpoints_using_policy(&mut self, policy_id: i64) -> Result<i64, StoreError> {
        let conn = self.0;
        Ok(conn.query_row(
            "SELECT count(*) FROM endpoints WHERE retry_policy_id = ?1",
            params![policy_id],
            |r| r.get(0),
        )?)
    }

    fn delete_endpoint_cascade(
        &mut self,
        app_id: &str,
        id: i64,
        now_ms: i64,
    ) -> Result<Option<Vec<i64>>, StoreError> {
        let conn = self.0;
        let deleted = conn.execute(
            "DELETE FROM endpoints WHERE app_id = ?1 AND id = ?2",
            params![app_id, id],
        )?;
        if deleted != 1 {
            return Ok(None);
        }
        bump_target_generation(conn, app_id)?;
        conn.prepare_cached(CANCEL_PENDING_OF_ENDPOINT)?
            .execute(params![id, now_ms])?;
        // The schedules this deletion leaves with no target: webhookd pauses them (logged at WARN,
        // docs/design.md §10).
        // The caller publishes `webhookd.schedule.paused` for each (docs/design.md §11).
        let paused: Vec<i64> = conn
            .prepare(
                "SELECT id FROM schedules WHERE app_id = ?2 AND status = 'active'
                 AND EXISTS (SELECT 1 FROM json_each(schedules.endpoint_ids) WHERE value = ?1)
                 AND NOT EXISTS (SELECT 1 FROM json_each(schedules.endpoint_ids) WHERE value != ?1)
                 ORDER BY id",
            )?
            .query_map(params![id, app_id], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        for &schedule_id in &paused {
            tracing::warn!(
                schedule_id,
                endpoint_id = id,
                reason = "every target endpoint was deleted",
                "schedule paused by webhookd"
            );
        }
        // SET expressions all read the row as it was, so `emptied` looks at the old list.
        conn.execute(
            "UPDATE schedules SET
                status = CASE WHEN status = 'active' AND NOT EXISTS
                    (SELECT 1 FROM json_each(schedules.endpoint_ids) WHERE value != ?1) THEN 'paused' ELSE status END,
                next_run_at = CASE WHEN status = 'active' AND NOT EXISTS
                    (SELECT 1 FROM json_each(schedules.endpoint_ids) WHERE value != ?1) THEN NULL ELSE next_run_at END,
                paused_reason = CASE WHEN status = 'active' AND NOT EXISTS
                    (SELECT 1 FROM json_each(schedules.endpoint_ids) WHERE value != ?1)
                    THEN 'every target endpoint was deleted' ELSE paused_reason END,
                endpoint_ids = (SELECT json_group_array(value) FROM json_each(schedules.endpoint_ids) WHERE value != ?1),
                updated_at = ?3
             WHERE app_id = ?2 AND EXISTS (SELECT 1 FROM json_each(schedules.endpoint_ids) WHERE value = ?1)",
            params![id, app_id, now_ms],
        )?;
        Ok(Some(paused))
    }

    fn list_enabled_targets(&mut self, app_id: &str) -> Result<Vec<Target>, StoreError> {
        let conn = self.0;
        let default_attempts = i64::from(crate::retry::RetryPolicy::DEFAULT.max_attempts);
        Ok(conn
            .prepare_cached(&format!(
                "SELECT {TARGET_COLUMNS}
             FROM endpoints e LEFT JOIN retry_policies p ON p.id = e.retry_policy_id
             WHERE e.app_id = ?1 AND e.status = 'enabled' ORDER BY e.id"
            ))?
            .query_map(params![app_id, default_attempts], target_from_row)?
            .collect::<Result<_, _>>()?)
    }

    /// Two statements, the generation first: in a write transaction (every publish's) both see
    /// one state of the file, and anywhere the targets are at least as new as the generation.
    fn enabled_targets_since(
        &mut self,
        app_id: &str,
        held: Option<i64>,
    ) -> Result<TargetsRead, StoreError> {
        let generation: i64 = self
            .0
            .prepare_cached(
                "SELECT coalesce((SELECT generation FROM target_generation WHERE app_id = ?1), 0)",
            )?
            .query_row([app_id], |r| r.get(0))?;
        if held == Some(generation) {
            return Ok(TargetsRead::Unchanged);
        }
        Ok(TargetsRead::Changed {
            generation,
            targets: self.list_enabled_targets(app_id)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 20,000 finished tasks and 3 pending of endpoint 1: the deletion's cancel reads the
    /// pending ones through `tasks_endpoint_due`, not the endpoint's history.
    #[test]
    fn deleting_an_endpoint_cancels_its_pending_tasks_without_reading_its_history() {
        use rusqlite::StatementStatus::VmStep;
        let (_dir, pool) = crate::store::sqlite::test_file_with_tasks(
            20_003,
            "CASE WHEN i > 20000 THEN 'pending' ELSE 'success' END",
            "i",
            "CASE WHEN i > 20000 THEN i END",
        );
        let conn = pool.get().unwrap();
        let plan: String = conn
            .query_row(
                &format!("EXPLAIN QUERY PLAN {CANCEL_PENDING_OF_ENDPOINT}"),
                params![1, 5],
                |r| r.get(3),
            )
            .unwrap();
        assert!(plan.contains("tasks_endpoint_due"), "{plan}");
        let mut cancel = conn.prepare(CANCEL_PENDING_OF_ENDPOINT).unwrap();
        assert_eq!(cancel.execute(params![1, 5]).unwrap(), 3);
        let steps = cancel.get_status(VmStep);
        assert!(steps < 2_000, "{steps} steps");
    }
}
