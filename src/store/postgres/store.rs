//! [`PgStore`]: the `store::Store` of a `--db postgres://…` URL, and [`PgTx`], its `store::Tx`
//! (each table's query trait is implemented on it in that table's file). Several nodes may
//! share the database: every node has its own [`PgStore::node`] id, written into the tasks it
//! claims (the lease).

use super::group::{GroupCounts, PublishGroups};
use super::listen::Notifier;
use super::replay::Carried;
use super::tasks::ClaimFloors;
use super::{Conn, Link, PgPool, PgSettings, PgUrl, Sql, Statements};
use crate::store::{IdleCap, Peers, Store, StoreError, Tx, Watcher};
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
    /// Where this node's claims of each endpoint's tasks start.
    floors: ClaimFloors,
    /// Sends the notices other nodes are owed after this node's commits (`listen.rs`);
    /// `None` once the store drops.
    notifier: Option<Notifier>,
    /// Signed publishes in flight at once, written by one statement (`group.rs`).
    groups: PublishGroups,
}

impl Drop for PgStore {
    /// The `postgres` client closes each connection by blocking on its own small runtime, which
    /// panics (and, in a destructor, aborts the process) on a thread that is driving async
    /// tasks — where the last handle on the store may well go: the end of `Running::wait`, a
    /// finished connection task. So the pool is closed on a thread of its own, waited for.
    fn drop(&mut self) {
        if let Some(mut notifier) = self.notifier.take() {
            notifier.stop();
        }
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
        let node = node_id();
        let notifier = Notifier::spawn(pool.clone(), link.clone(), node.clone())?;
        Ok(PgStore {
            notifier: Some(notifier),
            pool: Some(pool),
            link,
            url: parsed,
            node,
            last_probe: Mutex::new(None),
            floors: ClaimFloors::default(),
            groups: PublishGroups::default(),
        })
    }

    /// How often signed publishes were written in groups so far (tests, benchmarks).
    pub fn publish_groups(&self) -> GroupCounts {
        self.groups.counts()
    }

    /// Tells the other nodes, after a commit, what it made due: marked owed, and sent by the
    /// `store-notifier` thread ([`Notifier`]) in a notice of its own, outside this transaction.
    ///
    /// Not inside the writing transaction: PostgreSQL serializes the commits of all transactions
    /// that notify (a database-wide lock taken at commit and held until the commit is done), so a
    /// notice inside every publish made publishes commit one at a time, each waiting for its own
    /// WAL flush, on every node of the database; there the lock is held for the notice alone. Nor
    /// on the writer's connection right after its commit, as it was: a round trip and a
    /// transaction per publish, where one notice per [`super::listen`] gap covers every commit
    /// made in it. The notice still follows the commit (a listener that wakes finds the rows) and
    /// is never sent for a rollback. A process that dies between the commit and the notice leaves
    /// the other nodes to find the work at their next poll; a failed notice is logged.
    fn announce(&self, wake: Wake) {
        if let Some(notifier) = &self.notifier {
            notifier.owe(wake.tasks, wake.schedules);
        }
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
        let mut conn = self.client_within(Some(super::HEALTH_WAIT))?;
        Ok(super::health::probe(&mut **conn, now_ms)?)
    }

    /// `f` with no transaction block, each of its statements its own transaction: with
    /// `unsynced`, the writing statements that matter turn `synchronous_commit` off for their
    /// own transaction, so their commits do not wait for the WAL flush (`write_unsynced`'s
    /// replay record, `write_redoable_statements`' round); without, every commit waits as a
    /// transaction's would and a statement may carry the request's replay record
    /// (`write_statement`). Claims start at this node's floors, as in a transaction. Work `f`
    /// made due is announced after it, as after a transaction.
    fn outside_block(
        &self,
        unsynced: bool,
        f: &mut dyn FnMut(&mut dyn Tx) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let mut conn = self.client()?;
        let (client, statements) = conn.split();
        let wake = {
            let mut pg = PgTx::cached(client, statements, &self.node);
            pg.floors = Some(&self.floors);
            pg.unsynced = unsynced;
            pg.autocommit = !unsynced;
            pg.groups = (!unsynced).then_some(&self.groups);
            f(&mut pg)?;
            pg.give_new_target_generations()?;
            pg.wake
        };
        self.announce(wake);
        Ok(())
    }

    /// One `READ COMMITTED` transaction running `f`, committed when it succeeds; `redoable`:
    /// with `synchronous_commit` off for it alone ([`Store::write_redoable_dyn`]). Changes that
    /// make work due for other nodes are announced to them (`pg_notify`) after the commit
    /// ([`PgStore::announce`]), never for a rollback.
    fn write_tx(
        &self,
        redoable: bool,
        f: &mut dyn FnMut(&mut dyn Tx) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let mut conn = self.client()?;
        let (client, statements) = conn.split();
        let mut tx = client.transaction()?;
        if redoable {
            tx.batch_execute("SET LOCAL synchronous_commit = off")?;
        }
        let wake = {
            let mut pg = PgTx::cached(&mut tx, statements, &self.node);
            pg.floors = Some(&self.floors);
            f(&mut pg)?;
            pg.give_new_target_generations()?;
            pg.wake
        };
        tx.commit()?;
        self.announce(wake);
        Ok(())
    }
}

/// Added to the columns a statement returns: turns `synchronous_commit` off for the
/// statement's own transaction when it runs outside a transaction block
/// ([`PgTx::unsynced`]). Evaluated for each row returned, so a statement that returns no row
/// keeps it on: the round's writes return a row for each row they change.
pub(super) const SYNC_OFF: &str = ", set_config('synchronous_commit', 'off', true)";

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
        let mut conn = self.client()?;
        let (client, statements) = conn.split();
        let mut pg = PgTx::cached(client, statements, &self.node);
        pg.autocommit = true;
        f(&mut pg)?;
        pg.give_new_target_generations()
    }

    /// One `READ COMMITTED` transaction ([`PgStore::write_tx`]).
    fn write_dyn(
        &self,
        f: &mut dyn FnMut(&mut dyn Tx) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        self.write_tx(false, f)
    }

    /// [`PgStore::write_dyn`]'s transaction with `synchronous_commit` off for it alone
    /// (`SET LOCAL`): still atomic and seen by every node at its commit, which does not wait
    /// for PostgreSQL's WAL flush. A crash of the server may lose it with the commits after
    /// it, never one before (the WAL is flushed in order).
    fn write_redoable_dyn(
        &self,
        f: &mut dyn FnMut(&mut dyn Tx) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        self.write_tx(true, f)
    }

    /// No transaction block ([`PgStore::outside_block`], as `write_unsynced`): each statement
    /// of `f` is its own transaction, and the round's writing statements (its results, its
    /// claim, its lease renewal) turn `synchronous_commit` off for their own
    /// (`set_config(…, true)` in the same statement). The dispatcher's round of successes is
    /// then three statements (results, the walk's read, the claim) where a transaction block
    /// took six (`BEGIN`, `SET LOCAL`, …, `COMMIT`), and the results statement's row locks
    /// (the endpoint's health row) are held for that statement, not for the whole round
    /// (docs/dev/storage.md, "The delivery round without a transaction on PostgreSQL").
    /// `set_config(…, true)` is local to the statement's transaction: fine behind PgBouncer
    /// in transaction mode (`--pg-poll-only`).
    fn write_redoable_statements_dyn(
        &self,
        f: &mut dyn FnMut(&mut dyn Tx) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        self.outside_block(true, f)
    }

    /// The replay record of a signed request (the only use of `write_unsynced`): no
    /// transaction block, so each statement of `f` is its own transaction, and
    /// `first_use_at_key_generation` turns `synchronous_commit` off for its own
    /// (`set_config(…, true)` in the same statement), so its commit does not wait for
    /// PostgreSQL's WAL flush. Two round trips fewer than a transaction block (no `BEGIN`, no
    /// `COMMIT`) and no flush wait: the record is one statement, and the key read that may
    /// follow it (when the key generation moved) needs no transaction with it. The row is
    /// visible to every node from that commit on; only a crash of PostgreSQL before the next
    /// flush can forget it, and then what a replay obtains is a read's answer again
    /// (docs/dev/storage.md, "A read's replay record on PostgreSQL").
    fn write_unsynced_dyn(
        &self,
        f: &mut dyn FnMut(&mut dyn Tx) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        self.outside_block(true, f)
    }

    /// No transaction block: each statement of `f` is its own transaction, committed with
    /// the session's `synchronous_commit` (on: its commit waits for the WAL flush, as a
    /// transaction's would), two round trips fewer than `BEGIN` … `COMMIT`. A statement that
    /// is handed the request's replay record carries it
    /// ([`crate::store::ReplayQueries::carry_first_use`]): a publish is then one statement
    /// (docs/dev/storage.md, "A publish in one statement on PostgreSQL"). Work it made due is
    /// announced after it, as after a transaction.
    fn write_statement_dyn(
        &self,
        f: &mut dyn FnMut(&mut dyn Tx) -> Result<(), StoreError>,
    ) -> Option<Result<(), StoreError>> {
        Some(self.outside_block(false, f))
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

    /// Refused (docs/design.md §16): a consistent copy of a PostgreSQL database is `pg_dump`'s job.
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
        // The other nodes find what this one's notices leave out at their next look (at least
        // every `LEASE_RESCUE_EVERY`): `listen::Notifier`, "withheld".
        let keeping_up = self
            .notifier
            .as_ref()
            .map(Notifier::keeping_up)
            .unwrap_or_default();
        if poll_only {
            return Ok(Watcher::shared(
                cap,
                Peers::default(),
                keeping_up,
                LEASE_RESCUE_EVERY,
                None,
            ));
        }
        let peers = Peers::default();
        let listener = super::listen::Listener::spawn(&self.url, &self.node, wakers, &cap, &peers)?;
        Ok(Watcher::shared(
            cap,
            peers,
            keeping_up,
            LEASE_RESCUE_EVERY,
            Some(Box::new(move || listener.stop())),
        ))
    }
}

/// PostgreSQL's "cannot write" conditions become the unavailable causes (docs/design.md §10): a full
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

/// `store::Tx` over a PostgreSQL connection (reads) or transaction (writes). Table files run
/// their SQL on `c`, which prepares each statement once per pooled connection (`conn.rs`).
pub struct PgTx<'c, C: GenericClient> {
    pub(super) c: Conn<'c, C>,
    /// This node's id, written into the tasks it claims (the lease).
    pub(super) node: &'c str,
    wake: Wake,
    /// Where this node's claims start (`tasks.rs`); `None` in reads: claims search each
    /// endpoint from its first entry.
    pub(super) floors: Option<&'c ClaimFloors>,
    /// `write_unsynced` and `write_redoable_statements` (no transaction block): the replay
    /// pair's statement, the round's results statement, its claim and its lease renewal turn
    /// `synchronous_commit` off for their own transaction ([`SYNC_OFF`]), so that their
    /// commits do not wait for the WAL flush.
    pub(super) unsynced: bool,
    /// A read or `write_statement`: no transaction block, each statement commits on its own, so
    /// a statement may carry the request's replay record (`replay.rs`, `PgTx::query_carrying`;
    /// a publish's statement, `events.rs`).
    pub(super) autocommit: bool,
    /// The replay record handed to this read, and what became of it (`replay.rs`).
    pub(super) pair: Carried,
    /// The apps whose targets this transaction changed: they get a new target generation just
    /// before it commits (`endpoints.rs`, `give_new_target_generations`).
    pub(super) targets_changed: Vec<String>,
    /// `write_statement`: a publish carrying its replay pair may be written by one statement
    /// with others in flight at once (`group.rs`).
    pub(super) groups: Option<&'c PublishGroups>,
}

impl<'c, C: GenericClient> PgTx<'c, C> {
    /// Over a client of its own (tests, tools): each statement prepared as it runs.
    pub fn new(c: &'c mut C, node: &'c str) -> Self {
        PgTx {
            c: Conn(Sql::new(c, None)),
            node,
            wake: Wake::default(),
            floors: None,
            unsynced: false,
            autocommit: false,
            pair: Carried::Nothing,
            targets_changed: Vec::new(),
            groups: None,
        }
    }

    /// Over a pooled connection's client or transaction, with that connection's statements.
    pub fn cached(c: &'c mut C, statements: &'c mut Statements, node: &'c str) -> Self {
        PgTx {
            c: Conn(Sql::new(c, Some(statements))),
            node,
            wake: Wake::default(),
            floors: None,
            unsynced: false,
            autocommit: false,
            pair: Carried::Nothing,
            targets_changed: Vec::new(),
            groups: None,
        }
    }

    /// Claims start at `floors`' floors, as in the store's write transactions (tests).
    pub fn with_floors(mut self, floors: &'c ClaimFloors) -> Self {
        self.floors = Some(floors);
        self
    }

    /// [`SYNC_OFF`] for a statement run without a transaction block whose commit need not wait
    /// for the WAL flush ([`PgTx::unsynced`]), else nothing.
    pub(super) fn sync_off(&self) -> &'static str {
        if self.unsynced { SYNC_OFF } else { "" }
    }

    /// Tells the other nodes' delivery pools, on commit, that a task became due.
    pub(super) fn tasks_due(&mut self) {
        self.wake.tasks = true;
    }

    /// Tells the other nodes' schedulers, on commit, that a schedule changed.
    pub(super) fn schedules_changed(&mut self) {
        self.wake.schedules = true;
    }
}
