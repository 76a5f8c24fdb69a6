//! A private PostgreSQL server for the tests: Debian's `initdb` and `pg_ctl` on a temp folder, a
//! free loopback port, the unix socket inside the folder, fsync off. Run as the `postgres` OS
//! user when the tests run as root (initdb refuses root). Stopped and removed on drop.
//!
//! [`shared`] is the one server of the whole test process that `WEBHOOKD_TEST_DB=postgres` runs
//! the suite on: started on first use, a template database holding the schema, one cheap
//! `CREATE DATABASE … TEMPLATE` per test, stopped at process exit.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock, mpsc};
use std::time::{Duration, SystemTime};

/// The superuser the private server is created with.
pub const USER: &str = "webhookd";

/// A running private server.
pub struct PgServer {
    dir: tempfile::TempDir,
    bin: PathBuf,
    as_postgres: bool,
    port: u16,
    password: String,
    max_connections: u32,
}

/// The file in a server's folder holding the pid of the test process that made it.
const OWNER: &str = "owner.pid";

/// The newest `/usr/lib/postgresql/<version>/bin` holding `initdb` and `pg_ctl`.
fn server_binaries() -> Option<PathBuf> {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = entry.path().join("bin");
            (bin.join("initdb").is_file() && bin.join("pg_ctl").is_file()).then_some((version, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin)
}

impl PgServer {
    /// Starts a private server, or returns `None` after a loud skip when the PostgreSQL server
    /// is not installed (a failure under `CI=true`).
    pub fn start() -> Option<PgServer> {
        Self::start_with(60)
    }

    /// Whether a PostgreSQL server can be started here (its binaries are installed).
    pub fn installed() -> bool {
        server_binaries().is_some()
    }

    fn start_with(max_connections: u32) -> Option<PgServer> {
        Self::start_configured(max_connections, |_| {})
    }

    /// [`PgServer::start`] with `setup` run between `initdb` and the first start (e.g. to put
    /// TLS files and a `pg_hba.conf` into [`PgServer::data_dir`]).
    pub fn start_configured(
        max_connections: u32,
        setup: impl FnOnce(&PgServer),
    ) -> Option<PgServer> {
        let bin = server_binaries();
        if !crate::support::require_component(
            "PostgreSQL server",
            bin.is_some(),
            "apt-get install -y postgresql",
        ) {
            return None;
        }
        let bin = bin?;
        // SAFETY: geteuid has no preconditions and cannot fail.
        let as_postgres = unsafe { libc::geteuid() } == 0;
        let dir = tempfile::Builder::new()
            .prefix("webhookd-pg")
            .tempdir()
            .expect("temp folder");
        // Who made the folder, so a later run can tell a dead run's leftover from a live one.
        std::fs::write(dir.path().join(OWNER), std::process::id().to_string()).unwrap();
        let password = format!("pw-{:016x}", rand::random::<u64>());
        let pwfile = dir.path().join("pwfile");
        std::fs::write(&pwfile, &password).unwrap();
        if as_postgres {
            let chown = Command::new("chown")
                .args(["-R", "postgres:"])
                .arg(dir.path())
                .status()
                .expect("chown runs");
            assert!(
                chown.success(),
                "cannot chown the test folder to the postgres user"
            );
        }
        let mut server = PgServer {
            dir,
            bin,
            as_postgres,
            port: 0,
            password,
            max_connections,
        };
        let data = server.data_dir();
        server.run(
            "initdb",
            &[
                "-D".as_ref(),
                data.as_os_str(),
                "-U".as_ref(),
                USER.as_ref(),
                "--pwfile".as_ref(),
                pwfile.as_os_str(),
                // Password checks over TCP (the tests connect there), trust on the private socket.
                "--auth-host=scram-sha-256".as_ref(),
                "--auth-local=trust".as_ref(),
                "--no-sync".as_ref(),
                "-E".as_ref(),
                "UTF8".as_ref(),
                "--locale=C".as_ref(),
            ],
        );
        std::fs::remove_file(&pwfile).unwrap();
        setup(&server);
        // A free port can be taken by someone else before the server binds it: try again.
        for _ in 0..5 {
            server.port = free_port();
            if server.pg_ctl_start() {
                return Some(server);
            }
        }
        let log = std::fs::read_to_string(server.dir.path().join("server.log")).unwrap_or_default();
        panic!("the private PostgreSQL server did not start:\n{log}");
    }

    /// The server's data folder (`postgresql.conf`, `pg_hba.conf`).
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Hands a file the test wrote to the `postgres` user (when the tests run as root), as the
    /// server wants for its own files (e.g. a TLS key, mode 0600).
    pub fn give_to_server(&self, path: &Path) {
        if self.as_postgres {
            let chown = Command::new("chown")
                .arg("postgres:")
                .arg(path)
                .status()
                .expect("chown runs");
            assert!(chown.success(), "cannot chown {}", path.display());
        }
    }

    /// The loopback port the server listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A URL of database `db` over the server's private unix socket (trusted, no password):
    /// the test's own way in when TCP is restricted.
    pub fn socket_url(&self, db: &str) -> String {
        let socket_dir = self.dir.path().display().to_string().replace('/', "%2F");
        format!("postgres://{USER}@{socket_dir}:{}/{db}", self.port)
    }

    /// Stops the server as an outage would (sessions are ended); [`PgServer::resume`] starts it
    /// again on the same port.
    pub fn halt(&self) {
        self.stop("fast");
    }

    /// Starts a [`PgServer::halt`]ed server again; whether it started.
    pub fn resume(&self) -> bool {
        self.pg_ctl_start()
    }

    /// `program args…` from the server's bin folder, as the `postgres` user when we are root.
    fn command(&self, program: &str) -> Command {
        let path = self.bin.join(program);
        if self.as_postgres {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(path);
            command
        } else {
            Command::new(path)
        }
    }

    fn run(&self, program: &str, args: &[&std::ffi::OsStr]) {
        let out = self.command(program).args(args).output().expect(program);
        assert!(
            out.status.success(),
            "{program} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn pg_ctl_start(&self) -> bool {
        let options = format!(
            "-c listen_addresses=127.0.0.1 -p {} -k {} -c fsync=off -c synchronous_commit=off \
             -c full_page_writes=off -c max_connections={} -c shared_buffers=16MB",
            self.port,
            self.dir.path().display(),
            self.max_connections,
        );
        self.command("pg_ctl")
            .arg("-D")
            .arg(self.data_dir())
            .arg("-l")
            .arg(self.dir.path().join("server.log"))
            .args(["-w", "-t", "300", "-o", &options, "start"])
            .output()
            .expect("pg_ctl runs")
            .status
            .success()
    }

    /// The URL of database `db` on this server, with the superuser's real password.
    pub fn url(&self, db: &str) -> String {
        self.url_with_password(db, &self.password)
    }

    /// The URL of database `db` with the given password (a wrong one, in a test).
    pub fn url_with_password(&self, db: &str, password: &str) -> String {
        format!("postgres://{USER}:{password}@127.0.0.1:{}/{db}", self.port)
    }

    /// The superuser's password (tests check it never shows).
    pub fn password(&self) -> &str {
        &self.password
    }

    /// A new empty database; returns its URL.
    pub fn create_database(&self, name: &str) -> String {
        let mut admin = self.client(&self.url("postgres"));
        admin
            .batch_execute(&format!("CREATE DATABASE \"{name}\""))
            .expect("CREATE DATABASE");
        self.url(name)
    }

    /// A plain connection (the tests' own view of the database).
    pub fn client(&self, url: &str) -> postgres::Client {
        postgres::Client::connect(url, postgres::NoTls).expect("test connection")
    }
}

impl PgServer {
    /// Stops the server (`mode`: `fast` lets sessions end cleanly, `immediate` does not wait).
    fn stop(&self, mode: &str) {
        let _ = self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.data_dir())
            .args(["-m", mode, "-w", "stop"])
            .output();
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        self.stop("fast");
        // Then `dir` drops and removes the folder (as root, or as the user who made it).
    }
}

/// The template database of the shared server: the schema applied once by
/// `webhookd::store::postgres::open`, copied by every test's `CREATE DATABASE`.
const TEMPLATE: &str = "tmpl";

static SHARED: OnceLock<Option<PgServer>> = OnceLock::new();
static DATABASES: AtomicU64 = AtomicU64::new(0);

/// The one server of this test process, started on first use with a template database, or
/// `None` after a loud skip when PostgreSQL is not installed (a failure under `CI=true`).
///
/// A static never drops, so the server is stopped and its folder removed by an `atexit` hook
/// (the test harness ends with `exit`) and, when the process dies without running it (SIGKILL,
/// Ctrl-C), by a watchdog process that polls for this process and then stops the server.
/// Leftovers of runs that died before either could act are reaped on the next start.
pub fn shared() -> Option<&'static PgServer> {
    SHARED
        .get_or_init(|| {
            reap_dead_runs();
            // Several test servers at once, each with its own pool.
            let server = PgServer::start_with(400)?;
            server.watch_parent();
            // SAFETY: `stop_shared` is a plain `extern "C" fn` taking no arguments; registering
            // it has no other precondition.
            unsafe { libc::atexit(stop_shared) };
            let url = server.create_database(TEMPLATE);
            // Drop the pool before any copy: a template may not have open sessions.
            drop(webhookd::store::postgres::open(&url, 1).expect("schema on the template"));
            Some(server)
        })
        .as_ref()
}

extern "C" fn stop_shared() {
    if let Some(Some(server)) = SHARED.get() {
        server.stop("immediate");
        let _ = std::fs::remove_dir_all(server.dir.path());
    }
}

impl PgServer {
    /// A new database `t<n>` copied from the template (the current schema, no rows); its URL.
    ///
    /// A copy takes a few hundred milliseconds on a loaded machine (it writes the new
    /// database's system catalogs, ~7 MB), so a thread makes the next ones while tests run and
    /// this usually returns at once.
    pub fn fresh_database(&'static self) -> String {
        static READY: OnceLock<Mutex<mpsc::Receiver<String>>> = OnceLock::new();
        let ready = READY.get_or_init(|| {
            let (send, receive) = mpsc::sync_channel(2);
            std::thread::Builder::new()
                .name("pg-databases".into())
                .spawn(move || {
                    // Ends when nobody takes databases any more, i.e. at process exit.
                    while send.send(self.database_from_template()).is_ok() {}
                })
                .expect("the database maker starts");
            Mutex::new(receive)
        });
        ready
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .recv()
            .expect("the database maker runs")
    }

    /// Copies the template into a new database `t<n>`; its URL.
    pub fn database_from_template(&self) -> String {
        let name = format!("t{}", DATABASES.fetch_add(1, Ordering::SeqCst));
        let mut admin = self.client(&self.url("postgres"));
        let sql = format!("CREATE DATABASE \"{name}\" TEMPLATE \"{TEMPLATE}\"");
        // The template's last session may still be closing right after the pool dropped.
        let mut tries = 0;
        loop {
            match admin.batch_execute(&sql) {
                Ok(()) => return self.url(&name),
                Err(e) if tries < 50 && e.to_string().contains("being accessed") => {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => panic!("{sql}: {e}"),
            }
        }
    }

    /// Drops database `name`, ending its sessions (a test's server pool may still hold some).
    pub fn drop_database(&self, name: &str) {
        let mut admin = self.client(&self.url("postgres"));
        admin
            .batch_execute(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"))
            .unwrap_or_else(|e| panic!("DROP DATABASE {name}: {e}"));
    }

    /// Starts a process in its own process group (so Ctrl-C does not reach it) that waits for
    /// this test process to end, then stops the server and removes its folder. After a normal
    /// exit the `atexit` hook has already done both and the watchdog finds nothing to do.
    fn watch_parent(&self) {
        use std::os::unix::process::CommandExt;
        let mut stop = self.command("pg_ctl");
        stop.arg("-D")
            .arg(self.data_dir())
            .args(["-m", "immediate", "-w", "stop"]);
        let stop_line = std::iter::once(stop.get_program())
            .chain(stop.get_args())
            .map(|part| shell_quote(&part.to_string_lossy()))
            .collect::<Vec<_>>()
            .join(" ");
        let script = format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 1; done; \
             if [ -d {dir} ]; then {stop_line} >/dev/null 2>&1; rm -rf {dir}; fi",
            pid = std::process::id(),
            dir = shell_quote(&self.dir.path().to_string_lossy()),
        );
        // Never waited for: it ends only after this process has.
        #[expect(
            clippy::zombie_processes,
            reason = "the watchdog outlives this process"
        )]
        Command::new("sh")
            .args(["-c", &script])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .process_group(0)
            .spawn()
            .expect("the server's watchdog starts");
    }
}

/// Stops and removes the servers of earlier test processes that are gone (killed before their
/// watchdog could act, or from before the watchdog existed and more than two hours old).
fn reap_dead_runs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let dir = entry.path();
        let is_ours = entry
            .file_name()
            .to_str()
            .is_some_and(|n| n.starts_with("webhookd-pg"));
        if !is_ours || !dir.is_dir() || !leftover(&dir) {
            continue;
        }
        let data = dir.join("data");
        if data.join("postmaster.pid").exists()
            && let Some(bin) = server_binaries()
        {
            // SAFETY: geteuid has no preconditions and cannot fail.
            let root = unsafe { libc::geteuid() } == 0;
            let pg_ctl = bin.join("pg_ctl");
            let mut stop = if root {
                let mut c = Command::new("runuser");
                c.args(["-u", "postgres", "--"]).arg(pg_ctl);
                c
            } else {
                Command::new(pg_ctl)
            };
            let _ = stop
                .arg("-D")
                .arg(&data)
                .args(["-m", "immediate", "-w", "stop"])
                .output();
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Whether `dir` (a `webhookd-pg*` folder) belongs to no live test process.
fn leftover(dir: &Path) -> bool {
    match std::fs::read_to_string(dir.join(OWNER)) {
        Ok(pid) => match pid.trim().parse::<i32>() {
            // SAFETY: kill with signal 0 only checks that the process exists.
            Ok(pid) => {
                let gone = unsafe { libc::kill(pid, 0) } != 0;
                gone && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
            }
            Err(_) => false,
        },
        // Made before owners were recorded: only when clearly abandoned.
        Err(_) => std::fs::metadata(dir)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| SystemTime::now().duration_since(t).ok())
            .is_some_and(|age| age > Duration::from_secs(2 * 3600)),
    }
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The shared server's databases: each new one is empty but holds the current schema (the
/// template's copy), is its own database, and costs a copy rather than an initdb.
#[test]
fn fresh_databases_copy_the_schema_and_nothing_else() {
    let Some(server) = shared() else {
        return;
    };
    let started = std::time::Instant::now();
    let (a, b) = (
        server.database_from_template(),
        server.database_from_template(),
    );
    let per_database = started.elapsed() / 2;
    let ready = std::time::Instant::now();
    let c = server.fresh_database();
    let waited = ready.elapsed();
    assert_ne!(a, b);
    let version = |url: &str| -> i64 {
        server
            .client(url)
            .query_one("SELECT version FROM webhookd_schema", &[])
            .expect("the schema marker")
            .get(0)
    };
    assert_eq!(version(&a), webhookd::store::postgres::SCHEMA_VERSION);
    assert_eq!(version(&b), webhookd::store::postgres::SCHEMA_VERSION);
    let mut first = server.client(&a);
    first
        .batch_execute(
            "INSERT INTO api_keys (key_id, secret, app_id, name, created_at) \
             VALUES ('k', 's', 'app', 'n', 0)",
        )
        .unwrap();
    let count = |url: &str| -> i64 {
        server
            .client(url)
            .query_one("SELECT count(*) FROM api_keys", &[])
            .unwrap()
            .get(0)
    };
    assert_eq!(
        (count(&a), count(&b)),
        (1, 0),
        "a row in one is not in the other"
    );
    drop(first);
    for url in [&a, &b, &c] {
        server.drop_database(url.rsplit('/').next().unwrap());
    }
    // A figure to read, not a check: a loaded machine makes any copy slow. That each one is a
    // copy of the template (not a new schema) is what the version and row checks above show.
    eprintln!("one database from the template: {per_database:?}; a prepared one: {waited:?}");
}
