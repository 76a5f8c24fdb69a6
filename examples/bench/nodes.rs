//! N real `webhookd serve` processes sharing one database (`--nodes N`, `--spawn`, or a
//! PostgreSQL `--db`): the harness's load is spread over them round robin, as a load balancer
//! would.
//!
//! With a `postgres://` `--db`, every scenario gets a fresh database on that server, named after
//! the URL's database (`<db>_b<pid>_<n>`, created through the URL, which must allow `CREATE
//! DATABASE`) and dropped after the scenario, so no run sees another's rows. With a file path
//! the nodes use that file (one node only: several processes cannot share one SQLite file
//! safely); without `--db`, a fresh temporary file per scenario.

use anyhow::{Context, bail};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};
use webhookd::store::postgres::{is_url, redact};

/// Databases made by this harness run, for unique names.
static MADE: AtomicU32 = AtomicU32::new(0);

/// The running nodes of one scenario.
pub struct Nodes {
    children: Vec<Child>,
    urls: Vec<String>,
    /// What every node got as `--db`.
    db: String,
    binary: PathBuf,
    /// `(admin URL, name)` of the database this harness created, dropped on stop.
    made: Option<(String, String)>,
    dir: tempfile::TempDir,
}

impl Nodes {
    /// Starts `settings.nodes` processes of the webhookd binary beside this harness on a fresh
    /// database, the first alone (it creates the schema), and waits for each `/healthz`. A
    /// fresh SQLite file is given to `prepare` first, which may fill it (`--spawn`: the same
    /// prefilled scenarios as in process, against any `--binary`).
    pub fn start(
        settings: &crate::Settings,
        prepare: impl FnOnce(&Path) -> anyhow::Result<()>,
    ) -> anyhow::Result<Nodes> {
        let binary = match &settings.binary {
            Some(path) => path.clone(),
            None => binary()?,
        };
        let dir = tempfile::tempdir()?;
        let (db, made) = match &settings.db {
            Some(url) if is_url(url) => {
                let (admin, name, db) = fresh_database(url)?;
                (db, Some((admin, name)))
            }
            Some(path) => (path.clone(), None),
            None => (
                dir.path().join("webhookd.sqlite").display().to_string(),
                None,
            ),
        };
        if made.is_none() && settings.db.is_none() {
            prepare(Path::new(&db))?;
        }
        let mut nodes = Nodes {
            children: Vec::new(),
            urls: Vec::new(),
            db,
            binary,
            made,
            dir,
        };
        for i in 0..settings.nodes.max(1) {
            // A failed start stops the nodes already running (and drops the database).
            nodes.start_one(i, settings.workers)?;
        }
        Ok(nodes)
    }

    fn start_one(&mut self, i: usize, workers: Option<usize>) -> anyhow::Result<()> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let url = format!("http://127.0.0.1:{port}");
        let log_path = self.dir.path().join(format!("node{i}.log"));
        let mut command = Command::new(&self.binary);
        command
            .args(["serve", "--db", &self.db])
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(["--shutdown-grace-secs", "2"])
            .env_remove("WEBHOOKD_DB")
            .env("WEBHOOKD_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log_path)?);
        if let Some(w) = workers {
            command.args(["--workers", &w.to_string()]);
        }
        // SAFETY: prctl(PR_SET_PDEATHSIG) is async-signal-safe and touches no parent memory:
        // the nodes die with the harness, even when it is killed.
        unsafe {
            command.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                Ok(())
            });
        }
        let mut child = command
            .spawn()
            .with_context(|| format!("cannot start {}", self.binary.display()))?;
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(2)))
            .build()
            .into();
        let started = Instant::now();
        loop {
            if let Ok(reply) = agent.get(format!("{url}/healthz")).call()
                && reply.status() == 200
            {
                break;
            }
            if let Some(status) = child.try_wait()? {
                let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                bail!("node {i} exited with {status} before it was healthy:\n{log}");
            }
            if started.elapsed() > Duration::from_secs(30) {
                let _ = child.kill();
                let _ = child.wait();
                bail!("node {i} was not healthy within 30 s");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        self.children.push(child);
        self.urls.push(url);
        Ok(())
    }

    pub fn urls(&self) -> Vec<String> {
        self.urls.clone()
    }

    pub fn pids(&self) -> Vec<u32> {
        self.children.iter().map(Child::id).collect()
    }

    /// The SQLite file the nodes use, when they use one.
    pub fn sqlite_file(&self) -> Option<PathBuf> {
        (!is_url(&self.db)).then(|| PathBuf::from(&self.db))
    }

    /// A connection to the nodes' PostgreSQL database, when they use one.
    pub fn postgres(&self) -> Option<anyhow::Result<postgres::Client>> {
        is_url(&self.db).then(|| {
            postgres::Client::connect(&self.db, postgres::NoTls)
                .with_context(|| format!("cannot connect to {}", redact(&self.db)))
        })
    }

    /// `n` new API keys of `app`, made by `webhookd keys create --db` while the nodes run
    /// (eight commands at a time).
    pub fn keys(&self, app: &str, n: usize) -> anyhow::Result<Vec<(String, String)>> {
        let mut keys = Vec::with_capacity(n);
        while keys.len() < n {
            let batch: Vec<_> = (0..(n - keys.len()).min(8))
                .map(|_| {
                    Command::new(&self.binary)
                        .args(["keys", "create", "--db", &self.db, "--app", app])
                        .args(["--name", "bench", "--json"])
                        .env_remove("WEBHOOKD_DB")
                        .stdout(Stdio::piped())
                        .stderr(Stdio::piped())
                        .spawn()
                })
                .collect::<Result<_, _>>()?;
            for child in batch {
                let out = child.wait_with_output()?;
                if !out.status.success() {
                    bail!(
                        "webhookd keys create failed: {}",
                        String::from_utf8_lossy(&out.stderr)
                    );
                }
                let key: serde_json::Value = serde_json::from_slice(&out.stdout)?;
                let field = |k: &str| {
                    key[k]
                        .as_str()
                        .map(str::to_string)
                        .with_context(|| format!("keys create --json without {k}: {key}"))
                };
                keys.push((field("key_id")?, field("secret")?));
            }
        }
        Ok(keys)
    }

    /// SIGTERM to every node, waits (killing one that takes over 15 s), then drops the
    /// database this harness made (kept with `WEBHOOKD_BENCH_KEEP_DB` set, for a look after).
    pub fn stop(&mut self) {
        for child in &self.children {
            if let Ok(pid) = i32::try_from(child.id()) {
                // SAFETY: kill(2) on our own unreaped child's pid.
                unsafe { libc::kill(pid, libc::SIGTERM) };
            }
        }
        let deadline = Instant::now() + Duration::from_secs(15);
        for child in &mut self.children {
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        self.children.clear();
        if let Some((admin, name)) = self.made.take() {
            if std::env::var_os("WEBHOOKD_BENCH_KEEP_DB").is_some() {
                eprintln!("bench: database {name} kept (WEBHOOKD_BENCH_KEEP_DB)");
                return;
            }
            let dropped = postgres::Client::connect(&admin, postgres::NoTls).and_then(|mut c| {
                c.batch_execute(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"))
            });
            if let Err(e) = dropped {
                eprintln!("bench: cannot drop database {name}: {e}");
            }
        }
    }
}

impl Drop for Nodes {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The webhookd binary beside this harness, found (and brought up to date) once per run.
fn binary() -> anyhow::Result<PathBuf> {
    static FOUND: OnceLock<PathBuf> = OnceLock::new();
    if let Some(found) = FOUND.get() {
        return Ok(found.clone());
    }
    let found = crate::footprint::binary()?.context(
        "no webhookd binary beside the harness: build it with cargo build --bin webhookd",
    )?;
    Ok(FOUND.get_or_init(|| found).clone())
}

/// Creates a fresh database beside the one `url` names; returns `(url, its name, the new
/// database's URL)`.
fn fresh_database(url: &str) -> anyhow::Result<(String, String, String)> {
    let (prefix, base, query) = split_database(url)?;
    let base = if base.is_empty() { "webhookd" } else { base };
    let name = format!(
        "{base}_b{}_{}",
        std::process::id(),
        MADE.fetch_add(1, Ordering::Relaxed)
    );
    let mut admin = postgres::Client::connect(url, postgres::NoTls)
        .with_context(|| format!("cannot connect to {}", redact(url)))?;
    admin
        .batch_execute(&format!("CREATE DATABASE \"{name}\""))
        .with_context(|| format!("cannot create database {name} through {}", redact(url)))?;
    Ok((
        url.to_string(),
        name.clone(),
        format!("{prefix}{name}{query}"),
    ))
}

/// `postgres://user:pw@host:port/db?x=y` → (`postgres://user:pw@host:port/`, `db`, `?x=y`).
fn split_database(url: &str) -> anyhow::Result<(&str, &str, &str)> {
    let authority = url.find("://").map(|i| i + 3).unwrap_or(0);
    let query = url[authority..]
        .find('?')
        .map_or(url.len(), |i| authority + i);
    // The path starts at the first `/` after the user info (which may hold a `/` in a
    // password, so look after its last `@`).
    let host = url[authority..query]
        .rfind('@')
        .map_or(authority, |i| authority + i + 1);
    let Some(slash) = url[host..query].find('/').map(|i| host + i) else {
        bail!("{}: give the URL a database name", redact(url));
    };
    Ok((&url[..=slash], &url[slash + 1..query], &url[query..]))
}

#[cfg(test)]
mod tests {
    use super::split_database;

    #[test]
    fn the_database_name_is_found_after_the_user_info() {
        assert_eq!(
            split_database("postgres://u:p/w@h:5432/db?sslmode=disable").unwrap(),
            ("postgres://u:p/w@h:5432/", "db", "?sslmode=disable")
        );
        assert_eq!(
            split_database("postgresql://h/db").unwrap(),
            ("postgresql://h/", "db", "")
        );
        assert!(split_database("postgres://h:5432").is_err());
    }
}
