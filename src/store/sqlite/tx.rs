//! [`SqliteTx`]: the `store::Tx` of SQLite, each method one of the functions of this module's
//! table files over the connection (or transaction) it wraps.

use super as sql;
use crate::store::{
    Page, StoreError, Tx, attempts, endpoints, events, keys, policies, schedules, tasks,
};
use rusqlite::Connection;

/// `store::Tx` over one SQLite connection: a pooled one for reads, the open transaction for
/// writes (a `rusqlite::Transaction` derefs to its connection).
pub struct SqliteTx<'c>(pub &'c Connection);

impl Tx for SqliteTx<'_> {
    fn write_health_probe(&mut self, now_ms: i64) -> Result<(), StoreError> {
        Ok(sql::health::write_probe(self.0, now_ms)?)
    }

    /// Always 0: one process owns a SQLite file, and `serve` hands every `running` task back
    /// at start-up (`requeue_running_tasks`), so no lease can outlive its holder.
    fn rescue_expired_leases(&mut self, _now_ms: i64) -> Result<usize, StoreError> {
        Ok(0)
    }

    fn create_key(
        &mut self,
        app_id: &str,
        name: &str,
        now_ms: i64,
    ) -> Result<keys::NewKey, StoreError> {
        Ok(sql::keys::create(self.0, app_id, name, now_ms)?)
    }

    fn count_keys(&mut self) -> Result<i64, StoreError> {
        Ok(sql::keys::count(self.0)?)
    }

    fn list_keys(&mut self) -> Result<Vec<keys::KeyInfo>, StoreError> {
        Ok(sql::keys::list(self.0)?)
    }

    fn revoke_key(&mut self, key_id: &str, now_ms: i64) -> Result<bool, StoreError> {
        Ok(sql::keys::revoke(self.0, key_id, now_ms)?)
    }

    fn lookup_key(&mut self, key_id: &str) -> Result<Option<(String, String)>, StoreError> {
        Ok(sql::keys::lookup(self.0, key_id)?)
    }

    fn first_use_of_signature(
        &mut self,
        key_id: &str,
        signature: &str,
        expires_ms: i64,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        Ok(sql::replay::first_use(
            self.0, key_id, signature, expires_ms, now_ms,
        )?)
    }

    fn prune_replay(&mut self, now_ms: i64, limit: usize) -> Result<usize, StoreError> {
        Ok(sql::replay::prune(self.0, now_ms, limit)?)
    }

    fn count_replay(&mut self) -> Result<i64, StoreError> {
        Ok(sql::replay::count(self.0)?)
    }

    fn insert_policy(&mut self, p: &policies::Policy) -> Result<policies::Policy, StoreError> {
        Ok(sql::policies::insert(self.0, p)?)
    }

    fn update_policy(&mut self, p: &policies::Policy) -> Result<(), StoreError> {
        Ok(sql::policies::update(self.0, p)?)
    }

    fn get_policy(
        &mut self,
        app_id: &str,
        id: i64,
    ) -> Result<Option<policies::Policy>, StoreError> {
        Ok(sql::policies::get(self.0, app_id, id)?)
    }

    fn get_policy_any(&mut self, id: i64) -> Result<Option<policies::Policy>, StoreError> {
        Ok(sql::policies::get_any(self.0, id)?)
    }

    fn list_policies(
        &mut self,
        app_id: &str,
        page: Page,
    ) -> Result<(i64, Vec<policies::Policy>), StoreError> {
        Ok(sql::policies::list(self.0, app_id, page)?)
    }

    fn delete_policy(&mut self, app_id: &str, id: i64) -> Result<bool, StoreError> {
        Ok(sql::policies::delete(self.0, app_id, id)?)
    }

    fn insert_endpoint(
        &mut self,
        ep: &endpoints::Endpoint,
    ) -> Result<endpoints::Endpoint, StoreError> {
        Ok(sql::endpoints::insert(self.0, ep)?)
    }

    fn update_endpoint(&mut self, ep: &endpoints::Endpoint) -> Result<(), StoreError> {
        Ok(sql::endpoints::update(self.0, ep)?)
    }

    fn get_endpoint(
        &mut self,
        app_id: &str,
        id: i64,
    ) -> Result<Option<endpoints::Endpoint>, StoreError> {
        Ok(sql::endpoints::get(self.0, app_id, id)?)
    }

    fn get_endpoint_any(&mut self, id: i64) -> Result<Option<endpoints::Endpoint>, StoreError> {
        Ok(sql::endpoints::get_any(self.0, id)?)
    }

    fn endpoint_limits_any(&mut self, id: i64) -> Result<Option<endpoints::Limits>, StoreError> {
        Ok(sql::endpoints::limits_any(self.0, id)?)
    }

    fn set_endpoint_status(
        &mut self,
        app_id: &str,
        id: i64,
        enabled: bool,
        reason: endpoints::DisabledReason,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        Ok(sql::endpoints::set_status(
            self.0, app_id, id, enabled, reason, now_ms,
        )?)
    }

    fn disable_endpoint_any(
        &mut self,
        id: i64,
        reason: endpoints::DisabledReason,
        now_ms: i64,
    ) -> Result<Option<String>, StoreError> {
        Ok(sql::endpoints::disable_any(self.0, id, reason, now_ms)?)
    }

    fn record_endpoint_health(
        &mut self,
        id: i64,
        delta: &endpoints::HealthDelta,
        min_failures: i64,
        failing_after_ms: Option<i64>,
        now_ms: i64,
    ) -> Result<Option<(String, i64)>, StoreError> {
        Ok(sql::endpoints::record_health(
            self.0,
            id,
            delta,
            min_failures,
            failing_after_ms,
            now_ms,
        )?)
    }

    fn list_endpoints(
        &mut self,
        app_id: &str,
        status: Option<&str>,
        page: Page,
    ) -> Result<(i64, Vec<endpoints::Endpoint>), StoreError> {
        Ok(sql::endpoints::list(self.0, app_id, status, page)?)
    }

    fn list_enabled_endpoints(
        &mut self,
        app_id: &str,
    ) -> Result<Vec<endpoints::Endpoint>, StoreError> {
        Ok(sql::endpoints::list_enabled(self.0, app_id)?)
    }

    fn endpoint_names(
        &mut self,
        app_id: &str,
        ids: &[i64],
    ) -> Result<Vec<(i64, String)>, StoreError> {
        Ok(sql::endpoints::names(self.0, app_id, ids)?)
    }

    fn delete_endpoint(&mut self, app_id: &str, id: i64) -> Result<bool, StoreError> {
        Ok(sql::endpoints::delete(self.0, app_id, id)?)
    }

    fn count_endpoints_using_policy(&mut self, policy_id: i64) -> Result<i64, StoreError> {
        Ok(sql::endpoints::count_using_policy(self.0, policy_id)?)
    }

    fn delete_endpoint_cascade(
        &mut self,
        app_id: &str,
        id: i64,
        now_ms: i64,
    ) -> Result<Option<Vec<i64>>, StoreError> {
        Ok(sql::endpoints::delete_cascade(self.0, app_id, id, now_ms)?)
    }

    fn list_enabled_targets(&mut self, app_id: &str) -> Result<Vec<endpoints::Target>, StoreError> {
        Ok(sql::endpoints::enabled_targets(self.0, app_id)?)
    }

    fn insert_event(
        &mut self,
        app_id: &str,
        event_name: &str,
        event_key: Option<&str>,
        payload: &str,
        task_count: i64,
        now_ms: i64,
    ) -> Result<i64, StoreError> {
        Ok(sql::events::insert(
            self.0, app_id, event_name, event_key, payload, task_count, now_ms,
        )?)
    }

    fn find_event_by_key(
        &mut self,
        app_id: &str,
        event_name: &str,
        event_key: &str,
        since_ms: i64,
    ) -> Result<Option<events::Event>, StoreError> {
        Ok(sql::events::find_by_key(
            self.0, app_id, event_name, event_key, since_ms,
        )?)
    }

    fn get_event(&mut self, app_id: &str, id: i64) -> Result<Option<events::Event>, StoreError> {
        Ok(sql::events::get(self.0, app_id, id)?)
    }

    fn event_name_of(&mut self, id: i64) -> Result<Option<String>, StoreError> {
        Ok(sql::events::name_of(self.0, id)?)
    }

    fn list_events(
        &mut self,
        app_id: &str,
        event_name: Option<&str>,
        page: Page,
    ) -> Result<(i64, Vec<events::Event>), StoreError> {
        Ok(sql::events::list(self.0, app_id, event_name, page)?)
    }

    fn insert_attempt(&mut self, a: &attempts::Attempt) -> Result<(), StoreError> {
        Ok(sql::attempts::insert(self.0, a)?)
    }

    fn list_attempts(
        &mut self,
        task_id: i64,
        page: Page,
    ) -> Result<(i64, Vec<attempts::Attempt>), StoreError> {
        Ok(sql::attempts::list(self.0, task_id, page)?)
    }

    fn delete_finished_tasks(&mut self, cutoff_ms: i64, limit: usize) -> Result<usize, StoreError> {
        Ok(sql::retention::delete_finished_tasks(
            self.0, cutoff_ms, limit,
        )?)
    }

    fn delete_old_events(&mut self, cutoff_ms: i64, limit: usize) -> Result<usize, StoreError> {
        Ok(sql::retention::delete_old_events(self.0, cutoff_ms, limit)?)
    }

    fn insert_schedule(
        &mut self,
        s: &schedules::Schedule,
    ) -> Result<schedules::Schedule, StoreError> {
        Ok(sql::schedules::insert(self.0, s)?)
    }

    fn update_schedule(&mut self, s: &schedules::Schedule) -> Result<(), StoreError> {
        Ok(sql::schedules::update(self.0, s)?)
    }

    fn get_schedule(
        &mut self,
        app_id: &str,
        id: i64,
    ) -> Result<Option<schedules::Schedule>, StoreError> {
        Ok(sql::schedules::get(self.0, app_id, id)?)
    }

    fn list_schedules(
        &mut self,
        app_id: &str,
        status: Option<&str>,
        page: Page,
    ) -> Result<(i64, Vec<schedules::Schedule>), StoreError> {
        Ok(sql::schedules::list(self.0, app_id, status, page)?)
    }

    fn due_schedules(
        &mut self,
        now_ms: i64,
        limit: usize,
    ) -> Result<Vec<schedules::Firing>, StoreError> {
        Ok(sql::schedules::due(self.0, now_ms, limit)?)
    }

    fn get_active_schedule(&mut self, id: i64) -> Result<Option<schedules::Firing>, StoreError> {
        Ok(sql::schedules::get_active(self.0, id)?)
    }

    fn earliest_next_run(&mut self) -> Result<Option<i64>, StoreError> {
        Ok(sql::schedules::earliest_next_run(self.0)?)
    }

    fn record_firing(&mut self, schedule_id: i64, scheduled_at: i64) -> Result<bool, StoreError> {
        Ok(sql::schedules::record_firing(
            self.0,
            schedule_id,
            scheduled_at,
        )?)
    }

    fn advance_schedule(
        &mut self,
        id: i64,
        fired_at: Option<i64>,
        next_run_at: Option<i64>,
        skipped: i64,
    ) -> Result<(), StoreError> {
        Ok(sql::schedules::advance(
            self.0,
            id,
            fired_at,
            next_run_at,
            skipped,
        )?)
    }

    fn forget_firings(&mut self, schedule_id: i64, cutoff_ms: i64) -> Result<(), StoreError> {
        Ok(sql::schedules::forget_firings(
            self.0,
            schedule_id,
            cutoff_ms,
        )?)
    }

    fn insert_task(&mut self, t: &tasks::NewTask<'_>) -> Result<i64, StoreError> {
        Ok(sql::tasks::insert(self.0, t)?)
    }

    fn get_task(&mut self, app_id: &str, id: i64) -> Result<Option<tasks::Task>, StoreError> {
        Ok(sql::tasks::get(self.0, app_id, id)?)
    }

    fn list_tasks(
        &mut self,
        app_id: &str,
        f: &tasks::TaskFilter,
        page: Page,
    ) -> Result<(i64, Vec<tasks::Task>), StoreError> {
        Ok(sql::tasks::list(self.0, app_id, f, page)?)
    }

    fn next_endpoint_with_pending(&mut self, after: i64) -> Result<Option<(i64, i64)>, StoreError> {
        Ok(sql::tasks::next_endpoint_with_pending(self.0, after)?)
    }

    fn in_order_head(&mut self, endpoint_id: i64) -> Result<Option<(i64, i64)>, StoreError> {
        Ok(sql::tasks::in_order_head(self.0, endpoint_id)?)
    }

    fn claim_endpoint_tasks(
        &mut self,
        endpoint_id: i64,
        now_ms: i64,
        limit: usize,
    ) -> Result<Vec<tasks::Claimed>, StoreError> {
        Ok(sql::tasks::claim_endpoint(
            self.0,
            endpoint_id,
            now_ms,
            limit,
        )?)
    }

    fn claim_task(&mut self, id: i64, now_ms: i64) -> Result<Option<tasks::Claimed>, StoreError> {
        Ok(sql::tasks::claim_one(self.0, id, now_ms)?)
    }

    fn finish_attempt(
        &mut self,
        task_id: i64,
        attempt: i64,
        after: tasks::AfterAttempt,
        last_status_code: Option<i64>,
        last_error: Option<&str>,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        Ok(sql::tasks::finish_attempt(
            self.0,
            task_id,
            attempt,
            after,
            last_status_code,
            last_error,
            now_ms,
        )?)
    }

    fn start_task_now(&mut self, id: i64, now_ms: i64) -> Result<(), StoreError> {
        Ok(sql::tasks::start_now(self.0, id, now_ms)?)
    }

    fn task_app(&mut self, id: i64) -> Result<Option<String>, StoreError> {
        Ok(sql::tasks::app_of(self.0, id)?)
    }

    fn requeue_running_tasks(&mut self, now_ms: i64) -> Result<usize, StoreError> {
        Ok(sql::tasks::requeue_running(self.0, now_ms)?)
    }

    fn renew_leases(&mut self, ids: &[i64], _now_ms: i64) -> Result<Vec<i64>, StoreError> {
        Ok(ids.to_vec())
    }

    fn cancel_orphan_tasks(&mut self, now_ms: i64) -> Result<usize, StoreError> {
        Ok(sql::tasks::cancel_orphans(self.0, now_ms)?)
    }

    fn cancel_task(&mut self, app_id: &str, id: i64, now_ms: i64) -> Result<bool, StoreError> {
        Ok(sql::tasks::cancel(self.0, app_id, id, now_ms)?)
    }

    fn retry_tasks(
        &mut self,
        app_id: &str,
        ids: &[i64],
        now_ms: i64,
    ) -> Result<Vec<i64>, StoreError> {
        Ok(sql::tasks::retry(self.0, app_id, ids, now_ms)?)
    }

    fn retryable_task_ids(
        &mut self,
        app_id: &str,
        f: &tasks::RetryFilter,
        limit: usize,
    ) -> Result<Vec<i64>, StoreError> {
        Ok(sql::tasks::retryable_ids(self.0, app_id, f, limit)?)
    }

    fn schedule_task_open(
        &mut self,
        schedule_id: i64,
        endpoint_id: i64,
    ) -> Result<bool, StoreError> {
        Ok(sql::tasks::schedule_task_open(
            self.0,
            schedule_id,
            endpoint_id,
        )?)
    }

    fn count_tasks_by_status(&mut self) -> Result<Vec<(String, i64)>, StoreError> {
        Ok(sql::tasks::count_by_status(self.0)?)
    }
}
