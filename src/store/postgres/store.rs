//! [`PgStore`]: the `store::Store` of a `--db postgres://…` URL, and [`PgTx`], its `store::Tx`,
//! each method one of this module's table functions. Several nodes may share the database:
//! every node has its own [`PgStore::node`] id, written into the tasks it claims (the lease).

use super::{Link, PgPool, PgSettings, PgUrl};
use crate::store::{
    IdleCap, Page, Store, StoreError, Tx, Watcher, attempts, endpoints, events, keys, policies,
    schedules, tasks,
};
use postgres::GenericClient;
use postgres::error::SqlState;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often each node takes back the tasks of nodes whose lease ran out: a dead node's tasks
/// are delivered at most this long after their lease.
const LEASE_RESCUE_EVERY: Duration = Duration::from_secs(1);

/// A PostgreSQL database behind a pool of blocking connections.
pub struct PgStore {
    /// Always `Some` until the store drops (see its `Drop`).
    pool: Option<PgPool>,
    /// The pool's last failed connection attempt: the reason a request gets during an outage.
    link: Arc<Link>,
    url: PgUrl,
    /// This process's name in `tasks.claimed_by`: host, pid and a random part, so a restarted
    /// process never takes over the leases of its previous life.
    node: String,
    /// The last `/healthz` probe: when it ran and whether it failed (and why).
    last_probe: Mutex<Option<(i64, Option<String>)>>,
}

impl Drop for PgStore {
    /// The `postgres` client closes each connection by blocking on its own small runtime, which
    /// panics (and, in a destructor, aborts the process) on a thread that is driving async
    /// tasks — where the last handle on the store may well go: the end of `Running::wait`, a
    /// finished connection task. So the pool is closed on a thread of its own, waited for.
    fn drop(&mut self) {
        let Some(pool) = self.pool.take() else {
            return;
        };
        if tokio::runtime::Handle::try_current().is_err() {
            drop(pool);
            return;
        }
        let _ = std::thread::spawn(move || drop(pool)).join();
    }
}

impl PgStore {
    /// Connects to `url`, refuses a foreign or newer database untouched, applies pending schema
    /// upgrades, and keeps a pool of up to `pool_size` connections.
    pub fn open(url: &str, pool_size: u32) -> anyhow::Result<PgStore> {
        Self::open_with(url, pool_size, &PgSettings::default())
    }

    /// [`PgStore::open`] with the command line's connection settings (`--pg-pool-size`, when
    /// given, replaces `pool_size`).
    pub fn open_with(url: &str, pool_size: u32, settings: &PgSettings) -> anyhow::Result<PgStore> {
        let size = settings.pool_size.unwrap_or(pool_size);
        let (pool, link) = super::open_with(url, size, settings)?;
        let parsed = PgUrl::parse(url)?;
        tracing::info!(
            db = %parsed,
            pool_size = size,
            sslmode = ?parsed.tls().mode,
            "PostgreSQL connection pool ready (one more connection listens for other nodes' changes unless --pg-poll-only)"
        );
        Ok(PgStore {
            pool: Some(pool),
            link,
            url: parsed,
            node: node_id(),
            last_probe: Mutex::new(None),
        })
    }

    /// This node's id, as written in `tasks.claimed_by`.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The database's URL, its password hidden when shown.
    pub fn url(&self) -> &PgUrl {
        &self.url
    }

    fn client(&self) -> Result<r2d2::PooledConnection<super::Manager>, StoreError> {
        self.client_within(None)
    }

    /// A pooled connection, waiting at most `wait` (see [`super::checkout`]); an outage answers
    /// at once with the reason.
    fn client_within(
        &self,
        wait: Option<Duration>,
    ) -> Result<r2d2::PooledConnection<super::Manager>, StoreError> {
        let pool = self
            .pool
            .as_ref()
            .expect("the pool lives as long as the store");
        super::checkout(pool, &self.link, wait).map_err(|why| {
            tracing::debug!(error = %why, db = %self.url, "no PostgreSQL connection");
            StoreError::Unwritable(format!(
                "no connection to PostgreSQL at {}: {why}; check that the server runs and accepts this node",
                self.url
            ))
        })
    }

    /// Runs the health probe (a read of the schema marker and a committed write), waiting for
    /// a connection no longer than [`super::HEALTH_WAIT`].
    fn probe(&self, now_ms: i64) -> Result<(), StoreError> {
        let mut client = self.client_within(Some(super::HEALTH_WAIT))?;
        Ok(super::health::probe(&mut *client, now_ms)?)
    }
}

/// `host-pid-random`: unique among the nodes sharing a database, readable in `tasks.claimed_by`.
fn node_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "node".to_string());
    format!(
        "{host}-{}-{:08x}",
        std::process::id(),
        rand::random::<u32>()
    )
}

impl Store for PgStore {
    fn read_dyn(
        &self,
        f: &mut dyn FnMut(&mut dyn Tx) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let mut client = self.client()?;
        f(&mut PgTx::new(&mut *client, &self.node))
    }

    /// One `READ COMMITTED` transaction. Changes that make work due for other nodes send a
    /// notice (`pg_notify`) in the same transaction, so it reaches them on commit, never for a
    /// rollback.
    fn write_dyn(
        &self,
        f: &mut dyn FnMut(&mut dyn Tx) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let mut client = self.client()?;
        let mut tx = client.transaction()?;
        let wake = {
            let mut pg = PgTx::new(&mut tx, &self.node);
            f(&mut pg)?;
            pg.wake
        };
        if wake.tasks {
            super::listen::notify(&mut tx, super::listen::Channel::Tasks, "")?;
        }
        if wake.schedules {
            super::listen::notify(&mut tx, super::listen::Channel::Schedules, "")?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Nothing to stat: the server is reached over a connection; [`Store::health`] checks it.
    fn quick_check(&self) -> Result<(), StoreError> {
        Ok(())
    }

    fn health(&self, now_ms: i64) -> Result<(), StoreError> {
        let mut last = self.last_probe.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((at, result)) = last.as_ref()
            && now_ms - *at < crate::health::PROBE_INTERVAL_MS
            && now_ms >= *at
        {
            return match result {
                None => Ok(()),
                Some(why) => Err(StoreError::Unwritable(why.clone())),
            };
        }
        let result = self.probe(now_ms);
        *last = Some((
            now_ms,
            result.as_ref().err().map(|e| match e {
                StoreError::DiskFull(m) | StoreError::Unwritable(m) => m.clone(),
                other => other.to_string(),
            }),
        ));
        match result {
            Err(StoreError::DiskFull(m)) => Err(StoreError::DiskFull(m)),
            Err(StoreError::Other(e)) => Err(StoreError::Unwritable(format!("{e:#}"))),
            other => other,
        }
    }

    fn require_writable(&self, now_ms: i64) -> anyhow::Result<()> {
        self.probe(now_ms).map_err(|e| {
            anyhow::anyhow!(
                "cannot write to PostgreSQL at {}: {e}; webhookd needs a role that may read and write its tables",
                self.url
            )
        })
    }

    /// Nothing to do: PostgreSQL's own autovacuum and checkpoints keep its files in bounds.
    fn maintain(&self, _passive: bool, _wal_limit_bytes: u64) -> anyhow::Result<()> {
        Ok(())
    }

    /// Refused (contract §16): a consistent copy of a PostgreSQL database is `pg_dump`'s job.
    fn backup(&self, _out: &Path) -> anyhow::Result<()> {
        anyhow::bail!(
            "backup copies SQLite files only; back up the PostgreSQL database at {} with pg_dump (e.g. pg_dump --format=custom --file webhookd.dump <url>)",
            self.url
        )
    }

    fn describe(&self) -> String {
        format!("postgres {} (node {})", self.url, self.node)
    }

    fn backend(&self) -> &'static str {
        "postgres"
    }

    /// The `store-listener` thread (`LISTEN` on its own connection); until it is connected, and
    /// always with `--pg-poll-only`, idle sleeps are capped at `poll`.
    fn watch(
        &self,
        wakers: crate::store::Wakers,
        poll: Duration,
        poll_only: bool,
    ) -> anyhow::Result<Watcher> {
        let cap = IdleCap::new(poll);
        if poll_only {
            return Ok(Watcher::shared(cap, LEASE_RESCUE_EVERY, None));
        }
        let listener = super::listen::Listener::spawn(&self.url, wakers, &cap)?;
        Ok(Watcher::shared(
            cap,
            LEASE_RESCUE_EVERY,
            Some(Box::new(move || listener.stop())),
        ))
    }
}

/// PostgreSQL's "cannot write" conditions become the unavailable causes (contract §10): a full
/// disk (53100), a read-only server or standby (25006), a server shutting down or refusing
/// connections, a lost connection. Anything else is `Other`. The driver's messages never hold
/// the URL, so no password can leak through them.
impl From<postgres::Error> for StoreError {
    fn from(err: postgres::Error) -> Self {
        let code = err.code();
        if code == Some(&SqlState::DISK_FULL) {
            tracing::warn!(error = %err, "database write failed: disk full");
            return StoreError::DiskFull(
                "the disk holding the PostgreSQL database is full; free space on the database server"
                    .into(),
            );
        }
        if code == Some(&SqlState::READ_ONLY_SQL_TRANSACTION) {
            tracing::warn!(error = %err, "database write failed: read-only");
            return StoreError::Unwritable(
                "the PostgreSQL server refuses writes (a read-only server or a standby); point --db at the primary".into(),
            );
        }
        let gone = [
            SqlState::ADMIN_SHUTDOWN,
            SqlState::CRASH_SHUTDOWN,
            SqlState::CANNOT_CONNECT_NOW,
            SqlState::CONNECTION_EXCEPTION,
            SqlState::CONNECTION_FAILURE,
            SqlState::TOO_MANY_CONNECTIONS,
        ];
        if err.is_closed() || code.is_some_and(|c| gone.contains(c)) || is_io(&err) {
            tracing::warn!(error = %err, "database connection lost or refused");
            return StoreError::Unwritable(
                "the connection to PostgreSQL was lost or refused; check that the server runs (webhookd reconnects by itself)".into(),
            );
        }
        StoreError::Other(err.into())
    }
}

/// Whether the driver's error comes from the socket (a dropped or refused connection).
fn is_io(err: &postgres::Error) -> bool {
    let mut source = std::error::Error::source(err);
    while let Some(e) = source {
        if e.is::<std::io::Error>() {
            return true;
        }
        source = e.source();
    }
    false
}

/// Which other-node wake-ups a write transaction has earned.
#[derive(Debug, Default, Clone, Copy)]
struct Wake {
    /// A task became due (created, retried, handed back): every node's delivery pool looks.
    tasks: bool,
    /// A schedule was created or changed: every node's scheduler re-plans its sleep.
    schedules: bool,
}

/// `store::Tx` over a PostgreSQL connection (reads) or transaction (writes).
pub struct PgTx<'c, C: GenericClient> {
    c: &'c mut C,
    node: &'c str,
    wake: Wake,
}

impl<'c, C: GenericClient> PgTx<'c, C> {
    pub fn new(c: &'c mut C, node: &'c str) -> Self {
        PgTx {
            c,
            node,
            wake: Wake::default(),
        }
    }

    fn tasks_due(&mut self) {
        self.wake.tasks = true;
    }

    fn schedules_changed(&mut self) {
        self.wake.schedules = true;
    }
}

use super::{
    attempts as pg_attempts, endpoints as pg_endpoints, events as pg_events, keys as pg_keys,
    policies as pg_policies, replay as pg_replay, retention as pg_retention,
    schedules as pg_schedules, tasks as pg_tasks,
};

impl<C: GenericClient> Tx for PgTx<'_, C> {
    fn write_health_probe(&mut self, now_ms: i64) -> Result<(), StoreError> {
        Ok(super::health::probe(self.c, now_ms)?)
    }

    fn rescue_expired_leases(&mut self, now_ms: i64) -> Result<usize, StoreError> {
        let n = pg_tasks::rescue_expired_leases(self.c, now_ms)?;
        if n > 0 {
            self.tasks_due();
        }
        Ok(n)
    }

    fn create_key(
        &mut self,
        app_id: &str,
        name: &str,
        now_ms: i64,
    ) -> Result<keys::NewKey, StoreError> {
        Ok(pg_keys::create(self.c, app_id, name, now_ms)?)
    }

    fn count_keys(&mut self) -> Result<i64, StoreError> {
        Ok(pg_keys::count(self.c)?)
    }

    fn list_keys(&mut self) -> Result<Vec<keys::KeyInfo>, StoreError> {
        Ok(pg_keys::list(self.c)?)
    }

    fn revoke_key(&mut self, key_id: &str, now_ms: i64) -> Result<bool, StoreError> {
        Ok(pg_keys::revoke(self.c, key_id, now_ms)?)
    }

    fn lookup_key(&mut self, key_id: &str) -> Result<Option<(String, String)>, StoreError> {
        Ok(pg_keys::lookup(self.c, key_id)?)
    }

    fn first_use_of_signature(
        &mut self,
        key_id: &str,
        signature: &str,
        expires_ms: i64,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        Ok(pg_replay::first_use(
            self.c, key_id, signature, expires_ms, now_ms,
        )?)
    }

    fn prune_replay(&mut self, now_ms: i64, limit: usize) -> Result<usize, StoreError> {
        Ok(pg_replay::prune(self.c, now_ms, limit)?)
    }

    fn count_replay(&mut self) -> Result<i64, StoreError> {
        Ok(pg_replay::count(self.c)?)
    }

    fn insert_policy(&mut self, p: &policies::Policy) -> Result<policies::Policy, StoreError> {
        Ok(pg_policies::insert(self.c, p)?)
    }

    fn update_policy(&mut self, p: &policies::Policy) -> Result<(), StoreError> {
        Ok(pg_policies::update(self.c, p)?)
    }

    fn get_policy(
        &mut self,
        app_id: &str,
        id: i64,
    ) -> Result<Option<policies::Policy>, StoreError> {
        Ok(pg_policies::get(self.c, app_id, id)?)
    }

    fn get_policy_any(&mut self, id: i64) -> Result<Option<policies::Policy>, StoreError> {
        Ok(pg_policies::get_any(self.c, id)?)
    }

    fn list_policies(
        &mut self,
        app_id: &str,
        page: Page,
    ) -> Result<(i64, Vec<policies::Policy>), StoreError> {
        Ok(pg_policies::list(self.c, app_id, page)?)
    }

    fn delete_policy(&mut self, app_id: &str, id: i64) -> Result<bool, StoreError> {
        Ok(pg_policies::delete(self.c, app_id, id)?)
    }

    fn insert_endpoint(
        &mut self,
        ep: &endpoints::Endpoint,
    ) -> Result<endpoints::Endpoint, StoreError> {
        Ok(pg_endpoints::insert(self.c, ep)?)
    }

    /// Wakes the delivery pools: new limits may let waiting tasks go.
    fn update_endpoint(&mut self, ep: &endpoints::Endpoint) -> Result<(), StoreError> {
        pg_endpoints::update(self.c, ep)?;
        self.tasks_due();
        Ok(())
    }

    fn get_endpoint(
        &mut self,
        app_id: &str,
        id: i64,
    ) -> Result<Option<endpoints::Endpoint>, StoreError> {
        Ok(pg_endpoints::get(self.c, app_id, id)?)
    }

    fn get_endpoint_any(&mut self, id: i64) -> Result<Option<endpoints::Endpoint>, StoreError> {
        Ok(pg_endpoints::get_any(self.c, id)?)
    }

    fn endpoint_limits_any(&mut self, id: i64) -> Result<Option<endpoints::Limits>, StoreError> {
        Ok(pg_endpoints::limits_any(self.c, id)?)
    }

    /// Wakes the delivery pools when an endpoint is enabled: its waiting tasks may go.
    fn set_endpoint_status(
        &mut self,
        app_id: &str,
        id: i64,
        enabled: bool,
        reason: endpoints::DisabledReason,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let changed = pg_endpoints::set_status(self.c, app_id, id, enabled, reason, now_ms)?;
        if changed && enabled {
            self.tasks_due();
        }
        Ok(changed)
    }

    fn disable_endpoint_any(
        &mut self,
        id: i64,
        reason: endpoints::DisabledReason,
        now_ms: i64,
    ) -> Result<Option<String>, StoreError> {
        Ok(pg_endpoints::disable_any(self.c, id, reason, now_ms)?)
    }

    fn record_endpoint_health(
        &mut self,
        id: i64,
        delta: &endpoints::HealthDelta,
        min_failures: i64,
        failing_after_ms: Option<i64>,
        now_ms: i64,
    ) -> Result<Option<(String, i64)>, StoreError> {
        Ok(pg_endpoints::record_health(
            self.c,
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
        Ok(pg_endpoints::list(self.c, app_id, status, page)?)
    }

    fn list_enabled_endpoints(
        &mut self,
        app_id: &str,
    ) -> Result<Vec<endpoints::Endpoint>, StoreError> {
        Ok(pg_endpoints::list_enabled(self.c, app_id)?)
    }

    fn endpoint_names(
        &mut self,
        app_id: &str,
        ids: &[i64],
    ) -> Result<Vec<(i64, String)>, StoreError> {
        Ok(pg_endpoints::names(self.c, app_id, ids)?)
    }

    fn delete_endpoint(&mut self, app_id: &str, id: i64) -> Result<bool, StoreError> {
        Ok(pg_endpoints::delete(self.c, app_id, id)?)
    }

    fn count_endpoints_using_policy(&mut self, policy_id: i64) -> Result<i64, StoreError> {
        Ok(pg_endpoints::count_using_policy(self.c, policy_id)?)
    }

    /// Wakes the schedulers when a schedule was paused by the deletion.
    fn delete_endpoint_cascade(
        &mut self,
        app_id: &str,
        id: i64,
        now_ms: i64,
    ) -> Result<Option<Vec<i64>>, StoreError> {
        let paused = pg_endpoints::delete_cascade(self.c, app_id, id, now_ms)?;
        if paused.as_ref().is_some_and(|p| !p.is_empty()) {
            self.schedules_changed();
        }
        Ok(paused)
    }

    fn list_enabled_targets(&mut self, app_id: &str) -> Result<Vec<endpoints::Target>, StoreError> {
        Ok(pg_endpoints::enabled_targets(self.c, app_id)?)
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
        Ok(pg_events::insert(
            self.c, app_id, event_name, event_key, payload, task_count, now_ms,
        )?)
    }

    fn find_event_by_key(
        &mut self,
        app_id: &str,
        event_name: &str,
        event_key: &str,
        since_ms: i64,
    ) -> Result<Option<events::Event>, StoreError> {
        Ok(pg_events::find_by_key(
            self.c, app_id, event_name, event_key, since_ms,
        )?)
    }

    fn get_event(&mut self, app_id: &str, id: i64) -> Result<Option<events::Event>, StoreError> {
        Ok(pg_events::get(self.c, app_id, id)?)
    }

    fn event_name_of(&mut self, id: i64) -> Result<Option<String>, StoreError> {
        Ok(pg_events::name_of(self.c, id)?)
    }

    fn list_events(
        &mut self,
        app_id: &str,
        event_name: Option<&str>,
        page: Page,
    ) -> Result<(i64, Vec<events::Event>), StoreError> {
        Ok(pg_events::list(self.c, app_id, event_name, page)?)
    }

    fn insert_attempt(&mut self, a: &attempts::Attempt) -> Result<(), StoreError> {
        Ok(pg_attempts::insert(self.c, a)?)
    }

    fn list_attempts(
        &mut self,
        task_id: i64,
        page: Page,
    ) -> Result<(i64, Vec<attempts::Attempt>), StoreError> {
        Ok(pg_attempts::list(self.c, task_id, page)?)
    }

    fn delete_finished_tasks(&mut self, cutoff_ms: i64, limit: usize) -> Result<usize, StoreError> {
        Ok(pg_retention::delete_finished_tasks(
            self.c, cutoff_ms, limit,
        )?)
    }

    fn delete_old_events(&mut self, cutoff_ms: i64, limit: usize) -> Result<usize, StoreError> {
        Ok(pg_retention::delete_old_events(self.c, cutoff_ms, limit)?)
    }

    fn insert_schedule(
        &mut self,
        s: &schedules::Schedule,
    ) -> Result<schedules::Schedule, StoreError> {
        let stored = pg_schedules::insert(self.c, s)?;
        self.schedules_changed();
        Ok(stored)
    }

    fn update_schedule(&mut self, s: &schedules::Schedule) -> Result<(), StoreError> {
        pg_schedules::update(self.c, s)?;
        self.schedules_changed();
        Ok(())
    }

    fn get_schedule(
        &mut self,
        app_id: &str,
        id: i64,
    ) -> Result<Option<schedules::Schedule>, StoreError> {
        Ok(pg_schedules::get(self.c, app_id, id)?)
    }

    fn list_schedules(
        &mut self,
        app_id: &str,
        status: Option<&str>,
        page: Page,
    ) -> Result<(i64, Vec<schedules::Schedule>), StoreError> {
        Ok(pg_schedules::list(self.c, app_id, status, page)?)
    }

    fn due_schedules(
        &mut self,
        now_ms: i64,
        limit: usize,
    ) -> Result<Vec<schedules::Firing>, StoreError> {
        Ok(pg_schedules::due(self.c, now_ms, limit)?)
    }

    fn get_active_schedule(&mut self, id: i64) -> Result<Option<schedules::Firing>, StoreError> {
        Ok(pg_schedules::get_active(self.c, id)?)
    }

    fn earliest_next_run(&mut self) -> Result<Option<i64>, StoreError> {
        Ok(pg_schedules::earliest_next_run(self.c)?)
    }

    fn record_firing(&mut self, schedule_id: i64, scheduled_at: i64) -> Result<bool, StoreError> {
        Ok(pg_schedules::record_firing(
            self.c,
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
        Ok(pg_schedules::advance(
            self.c,
            id,
            fired_at,
            next_run_at,
            skipped,
        )?)
    }

    fn forget_firings(&mut self, schedule_id: i64, cutoff_ms: i64) -> Result<(), StoreError> {
        Ok(pg_schedules::forget_firings(
            self.c,
            schedule_id,
            cutoff_ms,
        )?)
    }

    fn insert_task(&mut self, t: &tasks::NewTask<'_>) -> Result<i64, StoreError> {
        let id = pg_tasks::insert(self.c, t)?;
        self.tasks_due();
        Ok(id)
    }

    fn get_task(&mut self, app_id: &str, id: i64) -> Result<Option<tasks::Task>, StoreError> {
        Ok(pg_tasks::get(self.c, app_id, id)?)
    }

    fn list_tasks(
        &mut self,
        app_id: &str,
        f: &tasks::TaskFilter,
        page: Page,
    ) -> Result<(i64, Vec<tasks::Task>), StoreError> {
        Ok(pg_tasks::list(self.c, app_id, f, page)?)
    }

    fn next_endpoint_with_pending(&mut self, after: i64) -> Result<Option<(i64, i64)>, StoreError> {
        Ok(pg_tasks::next_endpoint_with_pending(self.c, after)?)
    }

    fn in_order_head(&mut self, endpoint_id: i64) -> Result<Option<(i64, i64)>, StoreError> {
        Ok(pg_tasks::in_order_head(self.c, endpoint_id)?)
    }

    fn claim_endpoint_tasks(
        &mut self,
        endpoint_id: i64,
        now_ms: i64,
        limit: usize,
    ) -> Result<Vec<tasks::Claimed>, StoreError> {
        Ok(pg_tasks::claim_endpoint(
            self.c,
            self.node,
            endpoint_id,
            now_ms,
            limit,
        )?)
    }

    fn claim_task(&mut self, id: i64, now_ms: i64) -> Result<Option<tasks::Claimed>, StoreError> {
        Ok(pg_tasks::claim_one(self.c, self.node, id, now_ms)?)
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
        Ok(pg_tasks::finish_attempt(
            self.c,
            self.node,
            task_id,
            attempt,
            after,
            last_status_code,
            last_error,
            now_ms,
        )?)
    }

    fn start_task_now(&mut self, id: i64, now_ms: i64) -> Result<(), StoreError> {
        Ok(pg_tasks::start_now(self.c, self.node, id, now_ms)?)
    }

    fn task_app(&mut self, id: i64) -> Result<Option<String>, StoreError> {
        Ok(pg_tasks::app_of(self.c, id)?)
    }

    /// This node's running tasks and every expired lease; never another live node's.
    fn requeue_running_tasks(&mut self, now_ms: i64) -> Result<usize, StoreError> {
        let n = pg_tasks::requeue_running(self.c, self.node, now_ms)?;
        if n > 0 {
            self.tasks_due();
        }
        Ok(n)
    }

    fn renew_leases(&mut self, ids: &[i64], now_ms: i64) -> Result<Vec<i64>, StoreError> {
        Ok(pg_tasks::renew_leases(self.c, self.node, ids, now_ms)?)
    }

    fn cancel_orphan_tasks(&mut self, now_ms: i64) -> Result<usize, StoreError> {
        Ok(pg_tasks::cancel_orphans(self.c, now_ms)?)
    }

    fn cancel_task(&mut self, app_id: &str, id: i64, now_ms: i64) -> Result<bool, StoreError> {
        Ok(pg_tasks::cancel(self.c, app_id, id, now_ms)?)
    }

    fn retry_tasks(
        &mut self,
        app_id: &str,
        ids: &[i64],
        now_ms: i64,
    ) -> Result<Vec<i64>, StoreError> {
        let retried = pg_tasks::retry(self.c, app_id, ids, now_ms)?;
        if !retried.is_empty() {
            self.tasks_due();
        }
        Ok(retried)
    }

    fn retryable_task_ids(
        &mut self,
        app_id: &str,
        f: &tasks::RetryFilter,
        limit: usize,
    ) -> Result<Vec<i64>, StoreError> {
        Ok(pg_tasks::retryable_ids(self.c, app_id, f, limit)?)
    }

    fn schedule_task_open(
        &mut self,
        schedule_id: i64,
        endpoint_id: i64,
    ) -> Result<bool, StoreError> {
        Ok(pg_tasks::schedule_task_open(
            self.c,
            schedule_id,
            endpoint_id,
        )?)
    }

    fn count_tasks_by_status(&mut self) -> Result<Vec<(String, i64)>, StoreError> {
        Ok(pg_tasks::count_by_status(self.c)?)
    }
}
