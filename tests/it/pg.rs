//! A private PostgreSQL server for the tests: Debian's `initdb` and `pg_ctl` on a temp folder, a
//! free loopback port, the unix socket inside the folder, fsync off. Run as the `postgres` OS
//! user when the tests run as root (initdb refuses root). Stopped and removed on drop.

use std::path::PathBuf;
use std::process::Command;

/// The superuser the private server is created with.
pub const USER: &str = "webhookd";

/// A running private server.
pub struct PgServer {
    dir: tempfile::TempDir,
    bin: PathBuf,
    as_postgres: bool,
    port: u16,
    password: String,
}

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

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
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
             -c full_page_writes=off -c max_connections=60 -c shared_buffers=16MB",
            self.port,
            self.dir.path().display()
        );
        self.command("pg_ctl")
            .arg("-D")
            .arg(self.data_dir())
            .arg("-l")
            .arg(self.dir.path().join("server.log"))
            .args(["-w", "-t", "60", "-o", &options, "start"])
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

impl Drop for PgServer {
    fn drop(&mut self) {
        let data = self.data_dir();
        let _ = self
            .command("pg_ctl")
            .arg("-D")
            .arg(&data)
            .args(["-m", "fast", "-w", "stop"])
            .output();
        // Then `dir` drops and removes the folder (as root, or as the user who made it).
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
