//! The webhookd under test: started in this process on a temporary database, started as the
//! real binary in a subprocess (footprint), N real `serve` processes sharing one database
//! (`--nodes`, `--spawn`, a PostgreSQL `--db`: see [`crate::nodes`]), or a server already
//! running at `--url`.

use anyhow::{Context, bail};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use webhookd::client::Client;
use webhookd::clock::{Clock, SystemClock};
use webhookd::config::{Config, SqliteSync};
use webhookd::server::Running;
use webhookd::store::KeyQueries;

/// The app every harness key belongs to.
pub const APP: &str = "bench";
/// Rows per transaction of [`Target::fill_schedules`].
const FILL_BATCH: u64 = 10_000;

/// A webhookd the harness can send requests to.
pub struct Target {
    /// The first node's URL (setup requests go there).
    pub url: String,
    /// Every node's URL: load clients are spread over them round robin.
    pub urls: Vec<String>,
    /// The database file, when the harness made it: lets it create a key per client thread and
    /// read task rows directly.
    pub db: Option<PathBuf>,
    key: (String, String),
    kind: Kind,
}

enum Kind {
    InProcess {
        running: Option<Running>,
        runtime: tokio::runtime::Runtime,
        _dir: tempfile::TempDir,
    },
    Process {
        child: Child,
        _dir: tempfile::TempDir,
    },
    /// `serve` processes on one database; keys through `webhookd keys create`.
    Nodes(crate::nodes::Nodes),
    Remote,
}

impl Target {
    /// Starts webhookd in this process, as `webhookd serve` would, on a fresh temporary
    /// database that `prepare` may fill first.
    /// `db`: the file to use instead of a fresh temporary one.
    pub fn in_process(
        workers: Option<usize>,
        db: Option<&Path>,
        prepare: impl FnOnce(&Path) -> anyhow::Result<()>,
    ) -> anyhow::Result<Target> {
        let dir = tempfile::tempdir()?;
        let db = db.map_or_else(|| dir.path().join("webhookd.sqlite"), Path::to_path_buf);
        let key = create_keys(&db, 1)?.remove(0);
        prepare(&db)?;
        let mut config = Config::new(db.to_string_lossy());
        config.listen = "127.0.0.1:0".parse()?;
        config.shutdown_grace_secs = 2;
        if let Some(workers) = workers {
            config.workers = workers;
        }
        // As `webhookd serve` reads it, so that in-process and spawned runs choose alike.
        if let Ok(mode) = std::env::var("WEBHOOKD_SQLITE_SYNC") {
            config.sqlite_sync = <SqliteSync as clap::ValueEnum>::from_str(&mode, true)
                .map_err(|e| anyhow::anyhow!("WEBHOOKD_SQLITE_SYNC: {e}"))?;
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?;
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let running = runtime.block_on(webhookd::server::start(
            config,
            clock,
            std::future::pending(),
        ))?;
        let url = format!("http://{}", running.addr);
        Ok(Target {
            urls: vec![url.clone()],
            url,
            db: Some(db),
            key,
            kind: Kind::InProcess {
                running: Some(running),
                runtime,
                _dir: dir,
            },
        })
    }

    /// Starts the real binary on a fresh database and a free loopback port; returns it with
    /// the time from spawning the process to the first healthy `/healthz`.
    pub fn spawn(binary: &Path) -> anyhow::Result<(Target, Duration)> {
        let dir = tempfile::tempdir()?;
        let db = dir.path().join("webhookd.sqlite");
        let key = create_keys(&db, 1)?.remove(0);
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let url = format!("http://127.0.0.1:{port}");
        let log = std::fs::File::create(dir.path().join("webhookd.log"))?;
        let started = Instant::now();
        let mut child = Command::new(binary)
            .arg("serve")
            .arg("--db")
            .arg(&db)
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .env("WEBHOOKD_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .with_context(|| format!("cannot start {}", binary.display()))?;
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(2)))
            .build()
            .into();
        let healthz = format!("{url}/healthz");
        let startup = loop {
            if let Ok(reply) = agent.get(&healthz).call()
                && reply.status() == 200
            {
                break started.elapsed();
            }
            if let Some(status) = child.try_wait()? {
                let log =
                    std::fs::read_to_string(dir.path().join("webhookd.log")).unwrap_or_default();
                bail!("webhookd exited with {status} before it was healthy:\n{log}");
            }
            if started.elapsed() > Duration::from_secs(20) {
                let _ = child.kill();
                bail!("webhookd was not healthy within 20 s");
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        let target = Target {
            urls: vec![url.clone()],
            url,
            db: Some(db),
            key,
            kind: Kind::Process { child, _dir: dir },
        };
        Ok((target, startup))
    }

    /// A server that is already running; every client shares its one key.
    pub fn remote(url: &str, key_id: &str, secret: &str) -> Target {
        let url = url.trim_end_matches('/').to_string();
        Target {
            urls: vec![url.clone()],
            url,
            db: None,
            key: (key_id.to_string(), secret.to_string()),
            kind: Kind::Remote,
        }
    }

    /// One client for setup requests.
    pub fn client(&self) -> Client {
        Client::new(&self.url, &self.key.0, &self.key.1)
    }

    /// `n` clients for `n` load threads. Each gets its own key when the harness owns the
    /// database: a client's X-Timestamp advances by at least 1 ms per request (so no two
    /// requests share a signature), and one key shared by thousands of requests a second would
    /// run its timestamps ahead of the clock and out of the server's skew window.
    /// With several nodes, client `i` talks to node `i % nodes`.
    pub fn clients(&self, n: usize) -> anyhow::Result<Vec<Client>> {
        let keys = match (&self.kind, &self.db) {
            (Kind::Nodes(nodes), _) => nodes.keys(APP, n)?,
            (_, Some(db)) => create_keys(db, n)?,
            (_, None) => {
                // One key (`--url`): the clients share its timestamps, or two of them would
                // send the same signature in the same millisecond and get a replay's 401.
                let (id, secret) = &self.key;
                let first = Client::new(&self.urls[0], id, secret);
                return Ok((0..n)
                    .map(|i| first.same_key(&self.urls[i % self.urls.len()]))
                    .collect());
            }
        };
        Ok(keys
            .iter()
            .enumerate()
            .map(|(i, (id, secret))| Client::new(&self.urls[i % self.urls.len()], id, secret))
            .collect())
    }

    /// `n` clients of another app, each with its own key (needs a database the harness made).
    pub fn clients_for_app(&self, app: &str, n: usize) -> anyhow::Result<Vec<Client>> {
        let keys = match (&self.kind, &self.db) {
            (Kind::Nodes(nodes), _) => nodes.keys(app, n)?,
            (_, Some(db)) => create_app_keys(db, app, n)?,
            (_, None) => anyhow::bail!("a second app needs a database the harness made (no --url)"),
        };
        Ok(keys
            .iter()
            .enumerate()
            .map(|(i, (id, secret))| Client::new(&self.urls[i % self.urls.len()], id, secret))
            .collect())
    }

    /// Started by the harness on a database it made (not `--url`).
    pub fn owns_db(&self) -> bool {
        !matches!(self.kind, Kind::Remote)
    }

    /// `(run_at, created_at)` in ms of every task of an endpoint, straight from the database
    /// (the API shows times in whole seconds); `None` for a `--url` server.
    pub fn task_times(&self, endpoint_id: i64) -> Option<anyhow::Result<Vec<(i64, i64)>>> {
        const SQL: &str = "SELECT run_at, created_at FROM tasks WHERE endpoint_id = $1";
        if let Kind::Nodes(nodes) = &self.kind
            && let Some(client) = nodes.postgres()
        {
            return Some(client.and_then(|mut c| {
                let rows = c.query(SQL, &[&endpoint_id])?;
                Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
            }));
        }
        let db = self.db.as_ref()?;
        Some((|| {
            let conn = rusqlite::Connection::open(db)?;
            let mut stmt = conn.prepare(&SQL.replace('$', "?"))?;
            let rows = stmt
                .query_map([endpoint_id], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            Ok(rows)
        })())
    }

    /// Inserts `count` active `* * * * *` schedules of the bench app on `endpoint_id` due at
    /// `next_run_at` (ms) straight into the database, [`FILL_BATCH`] rows per transaction, as
    /// `POST /v1/schedules` would store them (names `bench-{tag}-{n}`, payload `{"seq": n}`);
    /// `None` for a `--url` server. The server's scheduler does not know of them until it is
    /// woken (a schedule created through the API wakes it).
    pub fn fill_schedules(
        &self,
        endpoint_id: i64,
        tag: &str,
        count: u64,
        next_run_at: i64,
    ) -> Option<anyhow::Result<()>> {
        const SQL: &str = "INSERT INTO schedules (app_id, name, cron_expr, timezone, payload, endpoint_ids, status, next_run_at, created_at, updated_at)";
        let now_ms = SystemClock.now_ms();
        let ids = format!("[{endpoint_id}]");
        let name = |n: u64| format!("bench-{tag}-{n}");
        let payload = |n: u64| format!("{{\"seq\":{n}}}");
        if let Kind::Nodes(nodes) = &self.kind
            && let Some(client) = nodes.postgres()
        {
            return Some(client.and_then(|mut c| {
                for start in (0..count).step_by(FILL_BATCH as usize) {
                    let ns = start..count.min(start + FILL_BATCH);
                    let names: Vec<String> = ns.clone().map(name).collect();
                    let payloads: Vec<String> = ns.map(payload).collect();
                    c.execute(
                        &format!(
                            "{SQL} SELECT $1, n, '* * * * *', 'UTC', p, $2, 'active', $3, $4, $4
                             FROM unnest($5::text[], $6::text[]) AS t(n, p)"
                        ),
                        &[&APP, &ids, &next_run_at, &now_ms, &names, &payloads],
                    )?;
                }
                Ok(())
            }));
        }
        let db = self.db.as_ref()?;
        Some((|| {
            let mut conn = rusqlite::Connection::open(db)?;
            conn.busy_timeout(Duration::from_secs(30))?;
            for start in (0..count).step_by(FILL_BATCH as usize) {
                let tx = conn.transaction()?;
                {
                    let mut insert = tx.prepare(&format!(
                        "{SQL} VALUES (?1, ?2, '* * * * *', 'UTC', ?3, ?4, 'active', ?5, ?6, ?6)"
                    ))?;
                    for n in start..count.min(start + FILL_BATCH) {
                        insert.execute(rusqlite::params![
                            APP,
                            name(n),
                            payload(n),
                            ids,
                            next_run_at,
                            now_ms
                        ])?;
                    }
                }
                tx.commit()?;
            }
            Ok(())
        })())
    }

    /// The server's process id (this process when in-process).
    pub fn pid(&self) -> Option<u32> {
        match &self.kind {
            Kind::InProcess { .. } => Some(std::process::id()),
            Kind::Process { child, .. } => Some(child.id()),
            Kind::Nodes(nodes) => nodes.pids().first().copied(),
            Kind::Remote => None,
        }
    }

    /// Stops a server the harness started (SIGTERM for a subprocess) and waits for it.
    pub fn stop(mut self) {
        self.stop_inner();
    }

    fn stop_inner(&mut self) {
        match &mut self.kind {
            Kind::InProcess {
                running, runtime, ..
            } => {
                if let Some(running) = running.take()
                    && let Err(e) = runtime.block_on(running.shutdown())
                {
                    eprintln!("bench: webhookd shutdown: {e:#}");
                }
            }
            Kind::Process { child, .. } => {
                if matches!(child.try_wait(), Ok(None)) {
                    let _ = Command::new("kill")
                        .arg("-TERM")
                        .arg(child.id().to_string())
                        .status();
                    let deadline = Instant::now() + Duration::from_secs(15);
                    while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    let _ = child.kill();
                    let _ = child.wait();
                }
            }
            Kind::Nodes(nodes) => nodes.stop(),
            Kind::Remote => {}
        }
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        self.stop_inner();
    }
}

/// The harness's target of N `serve` processes on `db` (see [`crate::nodes`]).
impl Target {
    pub fn nodes(
        settings: &crate::Settings,
        prepare: impl FnOnce(&Path) -> anyhow::Result<()>,
    ) -> anyhow::Result<Target> {
        let nodes = crate::nodes::Nodes::start(settings, prepare)?;
        let key = nodes.keys(APP, 1)?.remove(0);
        let urls = nodes.urls();
        Ok(Target {
            url: urls[0].clone(),
            urls,
            db: nodes.sqlite_file(),
            key,
            kind: Kind::Nodes(nodes),
        })
    }
}

/// Creates `n` API keys of the bench app directly in the database file (creating the file and
/// its schema when absent), as `webhookd keys create` does.
fn create_keys(db: &Path, n: usize) -> anyhow::Result<Vec<(String, String)>> {
    create_app_keys(db, APP, n)
}

/// Creates `n` API keys of `app` directly in the database file.
fn create_app_keys(db: &Path, app: &str, n: usize) -> anyhow::Result<Vec<(String, String)>> {
    let pool = webhookd::store::sqlite::open(db, 1)?;
    let conn = pool.get()?;
    let now_ms = SystemClock.now_ms();
    (0..n)
        .map(|_| {
            let key = webhookd::store::sqlite::SqliteTx(&conn).create_key(app, "bench", now_ms)?;
            Ok((key.key_id, key.secret))
        })
        .collect()
}
