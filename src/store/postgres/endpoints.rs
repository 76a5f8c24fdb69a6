//! The `endpoints` table on PostgreSQL ([`EndpointQueries`] on a [`PgTx`]).

use super::list::{Filters, list_page};
use crate::store::Page;
use crate::store::endpoints::{
    DisabledReason, Endpoint, EndpointStatus, HealthDelta, Target, TargetsRead,
    filter_payload_text, fresh_generation,
};
use crate::store::json::{EndpointHeaders, EndpointPayloadFilter, Stored};
use crate::store::postgres::PgTx;
use crate::store::tasks::IfBusy;
use crate::store::{EndpointQueries, StoreError};
use postgres::{Error, GenericClient, Row};

const COLUMNS: &str = "id, app_id, name, url, method, headers, secret, timeout_ms, retry_policy_id, filter_events, status, created_at, updated_at, rate_limit_per_sec, max_in_flight, previous_secret, previous_secret_expires_at, disabled_reason, last_success_at, last_failure_at, consecutive_failures, filter_payload";

fn from_row(r: &Row) -> Result<Endpoint, Error> {
    Ok(Endpoint {
        id: r.try_get(0)?,
        app_id: r.try_get(1)?,
        name: r.try_get(2)?,
        url: r.try_get(3)?,
        method: r.try_get(4)?,
        headers: r.try_get::<_, Stored<EndpointHeaders>>(5)?.0,
        secret: r.try_get(6)?,
        timeout_ms: r.try_get(7)?,
        retry_policy_id: r.try_get(8)?,
        filter_events: r.try_get(9)?,
        status: r.try_get(10)?,
        created_at: r.try_get(11)?,
        updated_at: r.try_get(12)?,
        rate_limit_per_sec: r.try_get(13)?,
        max_in_flight: r.try_get(14)?,
        previous_secret: r.try_get(15)?,
        previous_secret_expires_at: r.try_get(16)?,
        disabled_reason: r.try_get(17)?,
        last_success_at: r.try_get(18)?,
        last_failure_at: r.try_get(19)?,
        consecutive_failures: r.try_get(20)?,
        filter_payload: r
            .try_get::<_, Option<Stored<EndpointPayloadFilter>>>(21)?
            .map(|f| f.0),
    })
}

fn headers_json(ep: &Endpoint) -> String {
    serde_json::Value::Object(ep.headers.clone()).to_string()
}

impl<C: GenericClient> PgTx<'_, C> {
    /// Notes that this transaction changed the targets of `app_id`: the app gets a new target
    /// generation just before the transaction commits ([`PgTx::give_new_target_generations`]).
    pub(super) fn target_changed(&mut self, app_id: &str) {
        if !self.targets_changed.iter().any(|a| a == app_id) {
            self.targets_changed.push(app_id.to_string());
        }
    }

    /// Gives each app noted by [`PgTx::target_changed`] a new target generation, in one
    /// statement, run by the store last in every write (`PgStore::write_dyn`). Last, and by app
    /// id: every transaction locks the `target_generation` rows it writes after the endpoint
    /// rows it changed, in one order, so that a delivery round disabling endpoints of several
    /// apps and an API write to another endpoint of one of them cannot deadlock.
    pub(super) fn give_new_target_generations(&mut self) -> Result<(), StoreError> {
        if self.targets_changed.is_empty() {
            return Ok(());
        }
        let mut apps = std::mem::take(&mut self.targets_changed);
        apps.sort();
        self.c.execute(
            "INSERT INTO target_generation (app_id, generation)
             SELECT app_id, $2::bigint FROM unnest($1::text[]) AS a (app_id) ORDER BY app_id
             ON CONFLICT (app_id) DO UPDATE SET generation = excluded.generation",
            &[&apps, &fresh_generation()],
        )?;
        Ok(())
    }
}

/// The columns of a [`Target`] from `e` (endpoints) and `p` (its retry policy; `$2` is the
/// default policy's attempts), read by [`target_from_row`] from column `at` on.
const TARGET_COLUMNS: &str =
    "e.id, e.filter_events, coalesce(p.max_attempts, $2), e.filter_payload";

fn target_from_row(r: &Row, at: usize) -> Result<Target, Error> {
    Ok(Target {
        id: r.try_get(at)?,
        filter_events: r.try_get(at + 1)?,
        max_attempts: r.try_get(at + 2)?,
        filter_payload: r.try_get(at + 3)?,
    })
}

/// A round's health deltas as the arrays of [`health_update`].
pub(super) struct HealthColumns {
    ids: Vec<i64>,
    last_success: Vec<Option<i64>>,
    last_failure: Vec<Option<i64>>,
    failures: Vec<i64>,
    first_failure: Vec<Option<i64>>,
}

impl HealthColumns {
    pub(super) fn of(deltas: &[(i64, HealthDelta)]) -> Self {
        let column = |f: fn(&HealthDelta) -> Option<i64>| -> Vec<Option<i64>> {
            deltas.iter().map(|(_, d)| f(d)).collect()
        };
        HealthColumns {
            ids: deltas.iter().map(|(id, _)| *id).collect(),
            last_success: column(|d| d.last_success_at),
            last_failure: column(|d| d.last_failure_at),
            failures: deltas.iter().map(|(_, d)| d.failures).collect(),
            first_failure: column(|d| d.first_failure_at),
        }
    }

    /// The five arrays, in [`health_update`]'s order.
    pub(super) fn params(&self) -> [&(dyn postgres::types::ToSql + Sync); 5] {
        [
            &self.ids,
            &self.last_success,
            &self.last_failure,
            &self.failures,
            &self.first_failure,
        ]
    }
}

/// [`EndpointQueries::record_endpoints_health`]'s update as the tail of a `WITH` (CTEs `d`,
/// `locked`, `h`, `deferred`): the deltas are the parameters from `$first` on
/// ([`HealthColumns::params`]), written only where `when` holds. The rows are locked in id
/// order first (`ORDER BY … FOR NO KEY UPDATE`), as one statement per endpoint in id order
/// locked them, so two nodes' rounds cannot deadlock on each other's endpoints; each row then
/// gets [`EndpointQueries::write_endpoint_health`]'s rules. With [`IfBusy::Defer`] a row
/// another transaction holds is passed over (`SKIP LOCKED`) and its id is in `deferred` (an
/// endpoint that no longer exists is not); with [`IfBusy::Wait`] `deferred` is empty.
pub(super) fn health_update(first: usize, when: &str, if_busy: IfBusy) -> String {
    let p = |i: usize| first + i;
    let (skip, deferred) = match if_busy {
        IfBusy::Wait => ("", "SELECT NULL::int8 AS id WHERE false"),
        IfBusy::Defer => (
            " SKIP LOCKED",
            "SELECT d.id FROM d WHERE d.id NOT IN (SELECT id FROM locked)
                AND EXISTS (SELECT 1 FROM endpoints e WHERE e.id = d.id)",
        ),
    };
    format!(
        "d AS (
             SELECT * FROM unnest(${}::int8[], ${}::int8[], ${}::int8[], ${}::int8[], ${}::int8[])
                 AS d(id, last_success_at, last_failure_at, failures, first_failure_at)
              WHERE {when}),
         locked AS (
             SELECT e.id FROM endpoints e WHERE e.id IN (SELECT id FROM d)
             ORDER BY e.id FOR NO KEY UPDATE{skip}),
         h AS (
             UPDATE endpoints e SET
                last_success_at = greatest(d.last_success_at, e.last_success_at),
                last_failure_at = greatest(d.last_failure_at, e.last_failure_at),
                consecutive_failures = CASE WHEN d.last_success_at IS NULL
                    THEN e.consecutive_failures + d.failures ELSE d.failures END,
                failing_since = CASE WHEN d.last_success_at IS NULL
                    THEN coalesce(e.failing_since, d.first_failure_at) ELSE d.first_failure_at END
               FROM d, locked WHERE e.id = d.id AND locked.id = d.id),
         deferred AS ({deferred})",
        p(0),
        p(1),
        p(2),
        p(3),
        p(4)
    )
}

impl<C: GenericClient> EndpointQueries for PgTx<'_, C> {
    fn insert_endpoint(&mut self, ep: &Endpoint) -> Result<Endpoint, StoreError> {
        let c = &mut *self.c;
        let id: i64 = c
            .query_one(
                "INSERT INTO endpoints (app_id, name, url, method, headers, secret, timeout_ms, retry_policy_id, filter_events, status, created_at, updated_at,
                                        rate_limit_per_sec, max_in_flight, previous_secret, previous_secret_expires_at, filter_payload)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17) RETURNING id",
                &[
                    &ep.app_id,
                    &ep.name,
                    &ep.url,
                    &ep.method,
                    &headers_json(ep),
                    &ep.secret,
                    &ep.timeout_ms,
                    &ep.retry_policy_id,
                    &ep.filter_events,
                    &ep.status,
                    &ep.created_at,
                    &ep.updated_at,
                    &ep.rate_limit_per_sec,
                    &ep.max_in_flight,
                    &ep.previous_secret,
                    &ep.previous_secret_expires_at,
                    &filter_payload_text(ep),
                ],
            )?
            .try_get(0)?;
        self.target_changed(&ep.app_id);
        Ok(Endpoint { id, ..ep.clone() })
    }

    /// Wakes the delivery pools: new limits may let waiting tasks go.
    fn update_endpoint(&mut self, ep: &Endpoint) -> Result<(), StoreError> {
        let c = &mut *self.c;
        c.execute(
            "UPDATE endpoints SET name = $3, url = $4, method = $5, headers = $6, secret = $7, timeout_ms = $8,
             retry_policy_id = $9, filter_events = $10, updated_at = $11,
             rate_limit_per_sec = $12, max_in_flight = $13, previous_secret = $14, previous_secret_expires_at = $15,
             filter_payload = $16
             WHERE app_id = $1 AND id = $2",
            &[
                &ep.app_id,
                &ep.id,
                &ep.name,
                &ep.url,
                &ep.method,
                &headers_json(ep),
                &ep.secret,
                &ep.timeout_ms,
                &ep.retry_policy_id,
                &ep.filter_events,
                &ep.updated_at,
                &ep.rate_limit_per_sec,
                &ep.max_in_flight,
                &ep.previous_secret,
                &ep.previous_secret_expires_at,
                &filter_payload_text(ep),
            ],
        )?;
        self.target_changed(&ep.app_id);
        self.tasks_due();
        Ok(())
    }

    /// Carries a signed read's replay record when it has one (`replay.rs`, `query_carrying`).
    fn get_endpoint(&mut self, app_id: &str, id: i64) -> Result<Option<Endpoint>, StoreError> {
        Ok(self
            .query_carrying(
                &format!("SELECT {COLUMNS} FROM endpoints WHERE app_id = $1 AND id = $2"),
                &[&app_id, &id],
            )?
            .as_ref()
            .map(from_row)
            .transpose()?)
    }

    fn get_endpoint_any(&mut self, id: i64) -> Result<Option<Endpoint>, StoreError> {
        let c = &mut *self.c;
        Ok(c.query_opt(
            &format!("SELECT {COLUMNS} FROM endpoints WHERE id = $1"),
            &[&id],
        )?
        .as_ref()
        .map(from_row)
        .transpose()?)
    }

    /// One statement, so one round trip per dispatcher round, however many endpoints it claimed.
    fn get_endpoints_any(&mut self, ids: &[i64]) -> Result<Vec<Endpoint>, StoreError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let c = &mut *self.c;
        Ok(c.query(
            &format!("SELECT {COLUMNS} FROM endpoints WHERE id = ANY($1::int8[])"),
            &[&ids],
        )?
        .iter()
        .map(from_row)
        .collect::<Result<_, _>>()?)
    }

    /// Wakes the delivery pools when an endpoint is enabled: its waiting tasks may go.
    fn set_endpoint_status(
        &mut self,
        app_id: &str,
        id: i64,
        enabled: bool,
        reason: DisabledReason,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let c = &mut *self.c;
        let n = if enabled {
            c.execute(
                "UPDATE endpoints SET status = 'enabled', disabled_reason = NULL, consecutive_failures = 0,
                 failing_since = NULL, updated_at = $3
                 WHERE app_id = $1 AND id = $2 AND status != 'enabled'",
                &[&app_id, &id, &now_ms],
            )?
        } else {
            c.execute(
                "UPDATE endpoints SET status = 'disabled', disabled_reason = $3, updated_at = $4
                 WHERE app_id = $1 AND id = $2 AND status != 'disabled'",
                &[&app_id, &id, &reason.as_str(), &now_ms],
            )?
        };
        if n == 1 {
            self.target_changed(app_id);
        }
        if n == 1 && enabled {
            self.tasks_due();
        }
        Ok(n == 1)
    }

    /// Disables any endpoint, whatever its app (a `410 Gone` reply, or auto-disable). Returns the
    /// endpoint's app when it was enabled until now, `None` when it was already disabled (or is
    /// gone), so the caller tells the operator only once, whichever node saw it first.
    fn disable_endpoint_any(
        &mut self,
        id: i64,
        reason: DisabledReason,
        now_ms: i64,
    ) -> Result<Option<String>, StoreError> {
        let c = &mut *self.c;
        let app_id: Option<String> = c
            .query_opt(
                "UPDATE endpoints SET status = 'disabled', disabled_reason = $2, updated_at = $3
                 WHERE id = $1 AND status = 'enabled' RETURNING app_id",
                &[&id, &reason.as_str(), &now_ms],
            )?
            .map(|r| r.try_get(0))
            .transpose()?;
        if let Some(app_id) = &app_id {
            self.target_changed(app_id);
        }
        Ok(app_id)
    }

    /// The increments are relative (`consecutive_failures + $4`), so two nodes' result commits
    /// on one endpoint add up rather than overwrite each other.
    fn write_endpoint_health(&mut self, id: i64, delta: &HealthDelta) -> Result<(), StoreError> {
        let c = &mut *self.c;
        // A success in the round restarts the streak from the failures after it; without one the
        // round's failures extend the streak. The times never move back (`greatest` passes over
        // NULL): a change written late, another node's, is no newer. The casts type `$2` where
        // it is only tested for NULL.
        c.execute(
            "UPDATE endpoints SET
                last_success_at = greatest($2::bigint, last_success_at),
                last_failure_at = greatest($3::bigint, last_failure_at),
                consecutive_failures = CASE WHEN $2::bigint IS NULL THEN consecutive_failures + $4::bigint ELSE $4::bigint END,
                failing_since = CASE WHEN $2::bigint IS NULL THEN coalesce(failing_since, $5::bigint) ELSE $5::bigint END
             WHERE id = $1",
            &[
                &id,
                &delta.last_success_at,
                &delta.last_failure_at,
                &delta.failures,
                &delta.first_failure_at,
            ],
        )?;
        Ok(())
    }

    fn disable_failing_endpoint(
        &mut self,
        id: i64,
        min_failures: i64,
        failing_after_ms: i64,
        now_ms: i64,
    ) -> Result<Option<(String, i64)>, StoreError> {
        let c = &mut *self.c;
        let disabled: Option<(String, i64)> = c
            .query_opt(
                "UPDATE endpoints SET status = 'disabled', disabled_reason = 'failing', updated_at = $4
                 WHERE id = $1 AND status = 'enabled' AND consecutive_failures >= $2
                   AND failing_since IS NOT NULL AND $4 - failing_since >= $3
                 RETURNING app_id, consecutive_failures",
                &[&id, &min_failures, &failing_after_ms, &now_ms],
            )?
            .map(|r| Ok::<_, Error>((r.try_get(0)?, r.try_get(1)?)))
            .transpose()?;
        if let Some((app_id, _)) = &disabled {
            self.target_changed(app_id);
        }
        Ok(disabled)
    }

    /// The round's deltas in one `UPDATE … FROM unnest(…)` with
    /// [`EndpointQueries::write_endpoint_health`]'s rules row by row; its rows are locked in
    /// id order first (`ORDER BY … FOR NO KEY UPDATE`), as one statement per endpoint in id
    /// order locked them, so two nodes' rounds cannot deadlock on each other's endpoints.
    /// With [`IfBusy::Defer`] the rows another writer holds are skipped (`SKIP LOCKED`) and
    /// returned, as the round's results statement does.
    fn record_endpoints_health(
        &mut self,
        deltas: &[(i64, HealthDelta)],
        if_busy: IfBusy,
    ) -> Result<Vec<i64>, StoreError> {
        if deltas.is_empty() {
            return Ok(Vec::new());
        }
        let columns = HealthColumns::of(deltas);
        let c = &mut *self.c;
        let sql = format!(
            "WITH {} SELECT id FROM deferred ORDER BY id",
            health_update(1, "true", if_busy)
        );
        let rows = c.query(&sql, &columns.params())?;
        Ok(rows
            .iter()
            .map(|r| r.try_get(0))
            .collect::<Result<_, _>>()?)
    }

    fn list_endpoints(
        &mut self,
        app_id: &str,
        status: Option<EndpointStatus>,
        page: Page,
    ) -> Result<(i64, Vec<Endpoint>), StoreError> {
        let c = &mut *self.c;
        let filters = Filters::app(app_id).eq_word("status", status);
        Ok(list_page(
            c,
            "endpoints",
            COLUMNS,
            &filters,
            page,
            from_row,
        )?)
    }

    /// Names of the given endpoints of an app, in the order of `ids` (repeats included, as the
    /// SQLite twin's one lookup per id gives); unknown ids are left out. One statement.
    fn endpoint_names(
        &mut self,
        app_id: &str,
        ids: &[i64],
    ) -> Result<Vec<(i64, String)>, StoreError> {
        let c = &mut *self.c;
        Ok(c.query(
            "SELECT e.id, e.name FROM unnest($2::bigint[]) WITH ORDINALITY AS wanted (id, n)
             JOIN endpoints e ON e.id = wanted.id AND e.app_id = $1 ORDER BY wanted.n",
            &[&app_id, &ids],
        )?
        .iter()
        .map(|r| Ok::<_, Error>((r.try_get(0)?, r.try_get(1)?)))
        .collect::<Result<_, _>>()?)
    }

    fn count_endpoints_using_policy(&mut self, policy_id: i64) -> Result<i64, StoreError> {
        let c = &mut *self.c;
        Ok(c.query_one(
            "SELECT count(*) FROM endpoints WHERE retry_policy_id = $1",
            &[&policy_id],
        )?
        .try_get(0)?)
    }

    fn delete_endpoint_cascade(
        &mut self,
        app_id: &str,
        id: i64,
        now_ms: i64,
    ) -> Result<Option<Vec<i64>>, StoreError> {
        let c = &mut *self.c;
        let deleted = c.execute(
            "DELETE FROM endpoints WHERE app_id = $1 AND id = $2",
            &[&app_id, &id],
        )?;
        if deleted != 1 {
            return Ok(None);
        }
        self.target_changed(app_id);
        let c = &mut *self.c;
        c.execute(
            "UPDATE tasks SET status = 'canceled', finished_at = $2, updated_at = $2, next_attempt_at = NULL,
             last_error = coalesce(last_error, 'endpoint deleted')
             WHERE endpoint_id = $1 AND status = 'pending'",
            &[&id, &now_ms],
        )?;
        // `emptied`: every id left in the list would be this one. The caller publishes
        // `webhookd.schedule.paused` for each paused schedule (docs/design.md §11).
        let mut paused = Vec::new();
        for row in c.query(
            "SELECT id, status = 'active' AND NOT EXISTS (
                    SELECT 1 FROM jsonb_array_elements(endpoint_ids::jsonb) AS v (value)
                    WHERE v.value <> to_jsonb($1::bigint))
               FROM schedules
              WHERE app_id = $2 AND endpoint_ids::jsonb @> jsonb_build_array($1::bigint)
              ORDER BY id FOR UPDATE",
            &[&id, &app_id],
        )? {
            if row.try_get::<_, bool>(1)? {
                paused.push(row.try_get::<_, i64>(0)?);
            }
        }
        for &schedule_id in &paused {
            tracing::warn!(
                schedule_id,
                endpoint_id = id,
                reason = "every target endpoint was deleted",
                "schedule paused by webhookd"
            );
        }
        // `kept`: the list without this id, in its order, as compact JSON like the SQLite twin's;
        // NULL when nothing is left. The rows are locked above, so it is the list as selected.
        c.execute(
            "WITH kept AS (
                SELECT s.id, (SELECT '[' || string_agg(v.value::text, ',' ORDER BY v.n) || ']'
                                FROM jsonb_array_elements(s.endpoint_ids::jsonb)
                                     WITH ORDINALITY AS v (value, n)
                               WHERE v.value <> to_jsonb($1::bigint)) AS ids
                  FROM schedules s
                 WHERE s.app_id = $2 AND s.endpoint_ids::jsonb @> jsonb_build_array($1::bigint))
             UPDATE schedules SET
                status = CASE WHEN status = 'active' AND kept.ids IS NULL THEN 'paused' ELSE status END,
                next_run_at = CASE WHEN status = 'active' AND kept.ids IS NULL THEN NULL ELSE next_run_at END,
                paused_reason = CASE WHEN status = 'active' AND kept.ids IS NULL
                    THEN 'every target endpoint was deleted' ELSE paused_reason END,
                endpoint_ids = coalesce(kept.ids, '[]'),
                updated_at = $3
               FROM kept WHERE schedules.id = kept.id",
            &[&id, &app_id, &now_ms],
        )?;
        if !paused.is_empty() {
            // Wakes the schedulers: a schedule was paused by the deletion.
            self.schedules_changed();
        }
        Ok(Some(paused))
    }

    fn list_enabled_targets(&mut self, app_id: &str) -> Result<Vec<Target>, StoreError> {
        let c = &mut *self.c;
        let default_attempts = i64::from(crate::retry::RetryPolicy::DEFAULT.max_attempts);
        Ok(c.query(
            &format!(
                "SELECT {TARGET_COLUMNS}
                 FROM endpoints e LEFT JOIN retry_policies p ON p.id = e.retry_policy_id
                 WHERE e.app_id = $1 AND e.status = 'enabled' ORDER BY e.id"
            ),
            &[&app_id, &default_attempts],
        )?
        .iter()
        .map(|r| target_from_row(r, 0))
        .collect::<Result<_, _>>()?)
    }

    /// One statement, so one round trip and one snapshot: the generation comes in every row,
    /// with no endpoint (one row) when it is `held`, else joined to each enabled endpoint.
    fn enabled_targets_since(
        &mut self,
        app_id: &str,
        held: Option<i64>,
    ) -> Result<TargetsRead, StoreError> {
        let c = &mut *self.c;
        let default_attempts = i64::from(crate::retry::RetryPolicy::DEFAULT.max_attempts);
        let rows = c.query(
            &format!(
                "WITH g AS (SELECT coalesce(
                     (SELECT generation FROM target_generation WHERE app_id = $1), 0) AS generation)
                 SELECT g.generation, {TARGET_COLUMNS}
                 FROM g LEFT JOIN endpoints e
                   ON g.generation IS DISTINCT FROM $3::bigint AND e.app_id = $1 AND e.status = 'enabled'
                 LEFT JOIN retry_policies p ON p.id = e.retry_policy_id
                 ORDER BY e.id"
            ),
            &[&app_id, &default_attempts, &held],
        )?;
        let Some(first) = rows.first() else {
            return Err(StoreError::Other(anyhow::anyhow!(
                "the target generation read returned no row"
            )));
        };
        let generation: i64 = first.try_get(0)?;
        if held == Some(generation) {
            return Ok(TargetsRead::Unchanged);
        }
        let mut targets = Vec::with_capacity(rows.len());
        for r in &rows {
            if r.try_get::<_, Option<i64>>(1)?.is_some() {
                targets.push(target_from_row(r, 1)?);
            }
        }
        Ok(TargetsRead::Changed {
            generation,
            targets,
        })
    }
}
