//! Test harness: a real webhookd on a temporary database and port, signed clients, and a
//! loopback receiver whose replies can be scripted.

#![allow(dead_code)]

use chrono::{DateTime, Utc};
use serde_json::Value;
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use webhookd::app::App;
use webhookd::client::{Client, Reply};
use webhookd::clock::{Clock, ManualClock, SystemClock};
use webhookd::config::Config;
use webhookd::server::Running;

/// The database the suite runs on, from `WEBHOOKD_TEST_DB` (`sqlite`, the default, or
/// `postgres`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// The backend of this test run. An unknown `WEBHOOKD_TEST_DB` value panics; `postgres` without
/// an installed PostgreSQL server is a loud fallback to SQLite (a failure under `CI=true`).
pub fn backend() -> Backend {
    static CHOSEN: std::sync::OnceLock<Backend> = std::sync::OnceLock::new();
    *CHOSEN.get_or_init(|| {
        match std::env::var("WEBHOOKD_TEST_DB").as_deref() {
            Err(_) | Ok("" | "sqlite") => Backend::Sqlite,
            Ok("postgres") => {
                let found = crate::pg::PgServer::installed();
                if require_component(
                    "PostgreSQL server (WEBHOOKD_TEST_DB=postgres)",
                    found,
                    "apt-get install -y postgresql",
                ) {
                    Backend::Postgres
                } else {
                    // Written past the harness's capture, so the fallback is seen once.
                    let _ = std::io::stderr().write_all(
                        b"\n*** WEBHOOKD_TEST_DB=postgres: PostgreSQL is not installed; \
                          THE SUITE RUNS ON SQLITE INSTEAD ***\n",
                    );
                    Backend::Sqlite
                }
            }
            Ok(other) => panic!("WEBHOOKD_TEST_DB={other}: expected sqlite or postgres"),
        }
    })
}

/// A `--db` value for one test: a SQLite file in `dir`, or under `WEBHOOKD_TEST_DB=postgres` a
/// new database (the current schema, no rows) on this process's private server. The database
/// lives until the process ends; [`TestServer`] drops its own sooner.
pub fn test_db(dir: &Path) -> String {
    match backend() {
        Backend::Sqlite => dir.join("webhookd.sqlite").to_str().expect("utf-8").into(),
        Backend::Postgres => shared_pg().fresh_database(),
    }
}

fn shared_pg() -> &'static crate::pg::PgServer {
    crate::pg::shared().expect("backend() checked that PostgreSQL is installed")
}

/// The suffix of every test that checks something only SQLite has: the PostgreSQL suite
/// leaves such tests out by name (`--skip _on_sqlite`, .ci/suite-postgres.sh), so that none of
/// them is reported `ok` there without having checked anything.
pub const SQLITE_ONLY_SUFFIX: &str = "_on_sqlite";

/// True, after saying why on stderr, when this run is on PostgreSQL and the calling test checks
/// something only SQLite has (`reason`); the test then returns without checking anything.
/// Such a test's name ends in [`SQLITE_ONLY_SUFFIX`]; one that does not, or any reached under
/// `CI=true`, fails instead, since the PostgreSQL suite should have left it out.
pub fn sqlite_only(reason: &str) -> bool {
    if backend() == Backend::Sqlite {
        return false;
    }
    let thread = std::thread::current();
    let test = thread.name().unwrap_or_default();
    assert!(
        test.ends_with(SQLITE_ONLY_SUFFIX),
        "{test} checks SQLite only ({reason}): name it `…{SQLITE_ONLY_SUFFIX}` so that the \
         PostgreSQL suite leaves it out (--skip {SQLITE_ONLY_SUFFIX})"
    );
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{test} checks SQLite only ({reason}); under CI=true run the PostgreSQL suite with \
         --skip {SQLITE_ONLY_SUFFIX} (.ci/suite-postgres.sh)"
    );
    report_skip(&format!("SQLite only: {reason}"));
    true
}

/// The tests that skipped in this run, with why: `libtest` reports a skipped test as `ok`, so
/// each skip is written past the output capture at once, and all of them again in one line
/// after the harness's own summary (an `atexit` hook), where people read the result.
static SKIPPED: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Records that the calling test skips, for `reason`, and says so on stderr now and at exit.
pub fn report_skip(reason: &str) {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        // SAFETY: atexit(3) with a plain `extern "C"` function that takes no arguments and
        // does not unwind (print_skips catches nothing that can panic: it writes or gives up).
        unsafe {
            libc::atexit(print_skips);
        }
    });
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("a test").to_string();
    // Written to the stderr handle, not through `eprintln!`, which the harness captures.
    let _ = writeln!(std::io::stderr(), "\n*** SKIPPED {test}: {reason} ***");
    if let Ok(mut skipped) = SKIPPED.lock() {
        skipped.push(format!("{test} ({reason})"));
    }
}

/// The `atexit` hook: one line naming every skipped test, after the harness's summary.
extern "C" fn print_skips() {
    let Ok(skipped) = SKIPPED.try_lock() else {
        return;
    };
    if !skipped.is_empty() {
        let _ = writeln!(
            std::io::stderr(),
            "\n{} tests skipped (reported as ok above): {}\n",
            skipped.len(),
            skipped.join(", ")
        );
    }
}

/// Drops a test's PostgreSQL database when its server is done with it (a new database holds
/// some megabytes; hundreds of tests would otherwise keep them all until the process ends).
struct DropDb(Option<String>);

impl Drop for DropDb {
    fn drop(&mut self) {
        if let Some(url) = self.0.take()
            && let Some(name) = url.rsplit('/').next()
        {
            shared_pg().drop_database(name);
        }
    }
}

/// A webhookd running in this process on its own runtime, database and port.
pub struct TestServer {
    pub dir: tempfile::TempDir,
    /// The `--db` value: a SQLite file path or a `postgres://` URL.
    pub db: String,
    pub url: String,
    pub key_id: String,
    pub secret: String,
    /// Set when started with a manual clock.
    pub manual_clock: Option<Arc<ManualClock>>,
    running: Option<Running>,
    runtime: tokio::runtime::Runtime,
    /// Declared after `running`: the database goes once the server has stopped.
    drop_db: DropDb,
}

impl TestServer {
    /// The default configuration (docs/design.md), real clock.
    pub fn start() -> TestServer {
        Self::start_with(|_| {})
    }

    /// Adjust the config before start.
    pub fn start_with(adjust: impl FnOnce(&mut Config)) -> TestServer {
        Self::launch(adjust, None)
    }

    /// Starts with a clock the test moves; call [`TestServer::advance`].
    pub fn start_manual(start: DateTime<Utc>, adjust: impl FnOnce(&mut Config)) -> TestServer {
        Self::launch(adjust, Some(Arc::new(ManualClock::new(start))))
    }

    fn launch(adjust: impl FnOnce(&mut Config), manual: Option<Arc<ManualClock>>) -> TestServer {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = test_db(dir.path());
        let drop_db = DropDb((backend() == Backend::Postgres).then(|| db.clone()));
        Self::launch_in(dir, db, drop_db, None, adjust, manual)
    }

    /// Stops this server and starts a new one on the same database file, with a manual clock
    /// at `start` and the same key: a restart after downtime.
    pub fn restart_manual(
        self,
        start: DateTime<Utc>,
        adjust: impl FnOnce(&mut Config),
    ) -> TestServer {
        self.relaunch(adjust, Some(Arc::new(ManualClock::new(start))))
    }

    /// Stops this server gracefully and starts a new one on the same database file, real
    /// clock, same key.
    pub fn restart(self, adjust: impl FnOnce(&mut Config)) -> TestServer {
        self.relaunch(adjust, None)
    }

    fn relaunch(
        mut self,
        adjust: impl FnOnce(&mut Config),
        manual: Option<Arc<ManualClock>>,
    ) -> TestServer {
        if let Some(running) = self.running.take() {
            self.runtime
                .block_on(running.shutdown())
                .expect("clean shutdown");
        }
        let dir = std::mem::replace(&mut self.dir, tempfile::tempdir().expect("temp dir"));
        let key = (self.key_id.clone(), self.secret.clone());
        let drop_db = DropDb(self.drop_db.0.take());
        Self::launch_in(dir, self.db.clone(), drop_db, Some(key), adjust, manual)
    }

    fn launch_in(
        dir: tempfile::TempDir,
        db: String,
        drop_db: DropDb,
        key: Option<(String, String)>,
        adjust: impl FnOnce(&mut Config),
        manual: Option<Arc<ManualClock>>,
    ) -> TestServer {
        let mut config = Config::new(db);
        config.listen = "127.0.0.1:0".parse().unwrap();
        config.workers = 4;
        config.shutdown_grace_secs = 2;
        adjust(&mut config);
        let db = config.db.clone();
        let (key_id, secret) = key.unwrap_or_else(|| create_key(&db, "app1"));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let clock: Arc<dyn Clock> = match &manual {
            Some(m) => m.clone(),
            None => Arc::new(SystemClock),
        };
        let running = runtime
            .block_on(webhookd::server::start(
                config,
                clock,
                std::future::pending(),
            ))
            .expect("server starts");
        TestServer {
            url: format!("http://{}", running.addr),
            dir,
            db,
            key_id,
            secret,
            manual_clock: manual,
            running: Some(running),
            runtime,
            drop_db,
        }
    }

    pub fn app(&self) -> Arc<App> {
        self.running.as_ref().expect("running").app.clone()
    }

    /// A client signed with the server's first key (app `app1`).
    pub fn client(&self) -> Client {
        Client::new(&self.url, &self.key_id, &self.secret)
    }

    /// A client with a fresh key for another app.
    pub fn client_for_app(&self, app_id: &str) -> Client {
        let (key_id, secret) = create_key(&self.db, app_id);
        Client::new(&self.url, &key_id, &secret)
    }

    /// Moves the manual clock and wakes the background loops.
    pub fn advance(&self, by: chrono::Duration) {
        self.manual_clock
            .as_ref()
            .expect("started with a manual clock")
            .advance(by);
        self.app().poke();
    }

    /// Graceful stop; waits for the end.
    pub fn stop(mut self) {
        if let Some(running) = self.running.take() {
            self.runtime
                .block_on(running.shutdown())
                .expect("clean shutdown");
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(running) = self.running.take() {
            let _ = self.runtime.block_on(running.shutdown());
        }
    }
}

/// Creates an API key directly in the database (as `webhookd keys create` does).
pub fn create_key(db: &str, app_id: &str) -> (String, String) {
    let store = webhookd::store::open(db, 1).expect("open db");
    let now = Utc::now().timestamp_millis();
    let key = store
        .write::<_, webhookd::store::StoreError>(|tx| tx.create_key(app_id, "test", now))
        .expect("create a key");
    (key.key_id, key.secret)
}

/// Shorthand: send and expect success, returning `data`.
pub fn ok(client: &Client, method: &str, path: &str, body: Option<Value>) -> Value {
    let reply = client
        .send(method, path, body.as_ref())
        .expect("request sent");
    assert_eq!(
        reply.code(),
        0,
        "{method} {path} failed: {} {}",
        reply.status,
        reply.body
    );
    assert_eq!(reply.status, 200);
    reply.data().clone()
}

/// Shorthand: send and expect the given HTTP status and envelope code.
pub fn err(
    client: &Client,
    method: &str,
    path: &str,
    body: Option<Value>,
    status: u16,
    code: i64,
) -> Reply {
    let reply = client
        .send(method, path, body.as_ref())
        .expect("request sent");
    assert_eq!(
        (reply.status, reply.code()),
        (status, code),
        "{method} {path}: {}",
        reply.body
    );
    assert!(reply.data().is_null());
    assert!(
        reply.body["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty())
    );
    reply
}

/// A `127.0.0.1:PORT` address with a port free a moment ago, for a server started as a
/// subprocess (`--listen`).
pub fn free_local_addr() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("local address").to_string()
}

/// Sends each body and expects 400 / 40001 with a message that starts with the named field.
pub fn expect_field_errors(
    client: &Client,
    method: &str,
    path: &str,
    cases: impl IntoIterator<Item = (Value, &'static str)>,
) {
    for (body, field) in cases {
        let reply = err(client, method, path, Some(body.clone()), 400, 40001);
        let message = reply.body["message"].as_str().unwrap();
        assert!(message.starts_with(field), "{body} → {message}");
    }
}

/// How much longer than its nominal limit a test waits for a condition: 6 times, and at least a
/// minute (`WEBHOOKD_TEST_PATIENCE` sets the factor). A wait ends as soon as its condition holds,
/// so a long limit costs nothing when the test passes; it only keeps a loaded machine (two cores
/// shared with other builds) from failing a test that would have passed a little later.
pub fn patient(limit: Duration) -> Duration {
    static FACTOR: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    let factor = *FACTOR.get_or_init(|| {
        std::env::var("WEBHOOKD_TEST_PATIENCE")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(6)
    });
    (limit * factor).max(Duration::from_secs(60))
}

/// Polls `check` until it returns Some or the [`patient`] form of `timeout` passes.
pub fn wait_for<T>(timeout: Duration, mut check: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + patient(timeout);
    loop {
        if let Some(v) = check() {
            return Some(v);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One request the receiver got.
#[derive(Debug, Clone)]
pub struct Received {
    pub method: String,
    pub path: String,
    /// Header names lower-cased.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub at: Instant,
    /// Requests being served when this one arrived, itself included (a request counts until
    /// its answer starts being written).
    pub concurrent: usize,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
}

/// How the receiver answers one request.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub delay: Duration,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Answer {
    pub fn status(status: u16) -> Answer {
        Answer {
            status,
            delay: Duration::ZERO,
            headers: Vec::new(),
            body: String::new(),
        }
    }

    pub fn delayed(mut self, delay: Duration) -> Answer {
        self.delay = delay;
        self
    }

    pub fn header(mut self, name: &str, value: &str) -> Answer {
        self.headers.push((name.into(), value.into()));
        self
    }

    pub fn body(mut self, body: &str) -> Answer {
        self.body = body.into();
        self
    }
}

#[derive(Default)]
struct ReceiverState {
    received: Vec<Received>,
    /// Answers used in order; when empty, `default` answers.
    script: VecDeque<Answer>,
    default: Option<Answer>,
    /// Requests received and not yet answered.
    active: usize,
}

/// A loopback HTTP receiver that records every request and answers as scripted (200 by default).
#[derive(Clone)]
pub struct Receiver {
    pub url: String,
    state: Arc<(Mutex<ReceiverState>, Condvar)>,
}

impl Receiver {
    pub fn start() -> Receiver {
        Receiver::start_on(TcpListener::bind("127.0.0.1:0").unwrap())
    }

    /// Starts answering on a listener bound earlier: connections made before are queued by the
    /// kernel meanwhile, their requests sent and waiting, and are answered now.
    pub fn start_on(listener: TcpListener) -> Receiver {
        let url = format!("http://{}", listener.local_addr().unwrap());
        let state: Arc<(Mutex<ReceiverState>, Condvar)> = Arc::default();
        let shared = state.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let shared = shared.clone();
                std::thread::spawn(move || serve_connection(stream, &shared));
            }
        });
        Receiver { url, state }
    }

    /// Answers the next requests with these, in order.
    pub fn script(&self, answers: impl IntoIterator<Item = Answer>) {
        self.state.0.lock().unwrap().script.extend(answers);
    }

    /// Answers every request not covered by the script with this.
    pub fn set_default(&self, answer: Answer) {
        self.state.0.lock().unwrap().default = Some(answer);
    }

    pub fn received(&self) -> Vec<Received> {
        self.state.0.lock().unwrap().received.clone()
    }

    /// The most requests it was serving at once.
    pub fn max_concurrent(&self) -> usize {
        self.received()
            .iter()
            .map(|r| r.concurrent)
            .max()
            .unwrap_or(0)
    }

    /// Waits until at least `n` requests arrived, or the [`patient`] form of `timeout` passed;
    /// returns them all.
    pub fn wait_for(&self, n: usize, timeout: Duration) -> Vec<Received> {
        let (lock, cond) = &*self.state;
        let guard = lock.lock().unwrap();
        let (guard, _) = cond
            .wait_timeout_while(guard, patient(timeout), |s| s.received.len() < n)
            .unwrap();
        guard.received.clone()
    }
}

fn serve_connection(stream: TcpStream, state: &Arc<(Mutex<ReceiverState>, Condvar)>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream;
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        let mut parts = request_line.split_whitespace();
        let method = parts.next().unwrap_or("").to_string();
        let path = parts.next().unwrap_or("").to_string();
        let mut headers = Vec::new();
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((k, v)) = line.split_once(':') {
                headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
            }
        }
        let length = headers
            .iter()
            .find(|(k, _)| k == "content-length")
            .and_then(|(_, v)| v.parse::<usize>().ok())
            .unwrap_or(0);
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let answer = {
            let (lock, cond) = &**state;
            let mut s = lock.lock().unwrap();
            s.active += 1;
            let concurrent = s.active;
            s.received.push(Received {
                method,
                path,
                headers,
                body,
                at: Instant::now(),
                concurrent,
            });
            cond.notify_all();
            s.script
                .pop_front()
                .or_else(|| s.default.clone())
                .unwrap_or_else(|| Answer::status(200))
        };
        std::thread::sleep(answer.delay);
        // Counted as done before the answer is written, so the count never includes a request
        // whose sender may already have moved on.
        state.0.lock().unwrap().active -= 1;
        let mut head = format!(
            "HTTP/1.1 {} X\r\nContent-Length: {}\r\n",
            answer.status,
            answer.body.len()
        );
        for (k, v) in &answer.headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        if writer.write_all(head.as_bytes()).is_err()
            || writer.write_all(answer.body.as_bytes()).is_err()
        {
            return;
        }
    }
}

/// Sends a request with exactly these headers (no signing), for auth tests.
pub fn raw(
    url: &str,
    method: &str,
    path: &str,
    headers: &[(&str, String)],
    body: &[u8],
) -> (u16, Value) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut builder = ureq::http::Request::builder()
        .method(method)
        .uri(format!("{url}{path}"));
    for (k, v) in headers {
        builder = builder.header(*k, v.as_str());
    }
    let mut response = agent
        .run(builder.body(body.to_vec()).unwrap())
        .expect("request sent");
    let status = response.status().as_u16();
    let text = response.body_mut().read_to_string().unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// The three auth headers for a request, signed with `secret` at `timestamp`.
pub fn signed_headers(
    key_id: &str,
    secret: &str,
    timestamp: &str,
    method: &str,
    path: &str,
    body: &[u8],
) -> Vec<(&'static str, String)> {
    let payload = webhookd::auth::signed_payload(method, path, body);
    vec![
        ("X-Key-ID", key_id.to_string()),
        ("X-Timestamp", timestamp.to_string()),
        (
            "X-Signature",
            webhookd::signing::hmac_hex(secret.as_bytes(), timestamp, &payload),
        ),
    ]
}

/// A plain unsigned GET (for `/metrics` and `/healthz`): status and body text.
pub fn get_text(url: &str) -> (u16, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut reply = agent.get(url).call().unwrap();
    let status = reply.status().as_u16();
    (status, reply.body_mut().read_to_string().unwrap())
}

/// Whether a real external component a test needs (PostgreSQL, Chromium, qemu-user,
/// schemathesis, systemd-analyze, …) is present, as told by `found`.
///
/// On a developer's fresh machine a missing component is a loud skip: the test prints what was
/// skipped and how to install it, and returns early. Under CI (`CI=true`, where `.ci/run`
/// installs every component) a missing component fails the test, so a skip is never reported
/// as a pass there.
pub fn require_component(component: &str, found: bool, how_to_install: &str) -> bool {
    if found {
        return true;
    }
    let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
    assert!(
        !ci,
        "{component} is missing and CI=true: .ci/run must install it ({how_to_install})"
    );
    report_skip(&format!(
        "{component} is not installed, so this test did not run; install it with: {how_to_install}"
    ));
    false
}

/// Whether `program` runs with `args` and exits 0 (e.g. `("chromium", &["--version"])`).
pub fn program_runs(program: &str, args: &[&str]) -> bool {
    std::process::Command::new(program)
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The tests' own view of a `--db` database, on either backend: a few plain queries for what a
/// test checks beside the API (row counts, a stored status, an injected row). SQL is written
/// once with `?1`-style placeholders, which PostgreSQL gets as `$1`.
pub enum Db {
    Sqlite(rusqlite::Connection),
    Postgres(postgres::Client),
}

/// A parameter either driver can bind.
pub trait Param: rusqlite::ToSql + postgres::types::ToSql + Sync {}
impl<T: rusqlite::ToSql + postgres::types::ToSql + Sync> Param for T {}

/// One column value of a row read through [`Db`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cell {
    Null,
    Int(i64),
    Text(String),
}

impl Cell {
    pub fn int(&self) -> i64 {
        match self {
            Cell::Int(n) => *n,
            other => panic!("expected an integer, got {other:?}"),
        }
    }

    pub fn text(&self) -> &str {
        match self {
            Cell::Text(s) => s,
            other => panic!("expected text, got {other:?}"),
        }
    }
}

impl Db {
    /// Opens `db` (a SQLite path or a `postgres://` URL) as it is, without any schema upgrade.
    pub fn open(db: &str) -> Db {
        if webhookd::store::postgres::is_url(db) {
            Db::Postgres(postgres::Client::connect(db, postgres::NoTls).expect("test connection"))
        } else {
            Db::Sqlite(rusqlite::Connection::open(db).expect("open the SQLite file"))
        }
    }

    /// Runs one statement; the number of rows it changed.
    pub fn execute(&mut self, sql: &str, params: &[&dyn Param]) -> u64 {
        match self {
            Db::Sqlite(conn) => {
                let params: Vec<&dyn rusqlite::ToSql> = params.iter().map(|p| *p as _).collect();
                conn.execute(sql, params.as_slice())
                    .unwrap_or_else(|e| panic!("{sql}: {e}")) as u64
            }
            Db::Postgres(client) => {
                let params: Vec<&(dyn postgres::types::ToSql + Sync)> =
                    params.iter().map(|p| *p as _).collect();
                client
                    .execute(&dollar_placeholders(sql), &params)
                    .unwrap_or_else(|e| panic!("{sql}: {e}"))
            }
        }
    }

    /// Every row of a query, each column read as an integer, text or NULL.
    pub fn rows(&mut self, sql: &str, params: &[&dyn Param]) -> Vec<Vec<Cell>> {
        match self {
            Db::Sqlite(conn) => {
                use rusqlite::types::ValueRef;
                let params: Vec<&dyn rusqlite::ToSql> = params.iter().map(|p| *p as _).collect();
                let mut stmt = conn.prepare(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
                let columns = stmt.column_count();
                stmt.query_map(params.as_slice(), |row| {
                    (0..columns)
                        .map(|i| {
                            Ok(match row.get_ref(i)? {
                                ValueRef::Null => Cell::Null,
                                ValueRef::Integer(n) => Cell::Int(n),
                                ValueRef::Text(t) => Cell::Text(String::from_utf8_lossy(t).into()),
                                other => panic!("{sql}: column {i} is {other:?}"),
                            })
                        })
                        .collect()
                })
                .and_then(Iterator::collect)
                .unwrap_or_else(|e| panic!("{sql}: {e}"))
            }
            Db::Postgres(client) => {
                use postgres::types::Type;
                let params: Vec<&(dyn postgres::types::ToSql + Sync)> =
                    params.iter().map(|p| *p as _).collect();
                let rows = client
                    .query(&dollar_placeholders(sql), &params)
                    .unwrap_or_else(|e| panic!("{sql}: {e}"));
                rows.iter()
                    .map(|row| {
                        (0..row.len())
                            .map(|i| {
                                let ty = row.columns()[i].type_().clone();
                                let cell = match ty {
                                    Type::INT8 => row.get::<_, Option<i64>>(i).map(Cell::Int),
                                    Type::INT4 => {
                                        row.get::<_, Option<i32>>(i).map(|n| Cell::Int(n.into()))
                                    }
                                    Type::INT2 => {
                                        row.get::<_, Option<i16>>(i).map(|n| Cell::Int(n.into()))
                                    }
                                    Type::TEXT | Type::VARCHAR | Type::NAME => {
                                        row.get::<_, Option<String>>(i).map(Cell::Text)
                                    }
                                    other => panic!("{sql}: column {i} has type {other}"),
                                };
                                cell.unwrap_or(Cell::Null)
                            })
                            .collect()
                    })
                    .collect()
            }
        }
    }

    /// The one integer a query returns (`SELECT count(*) …`).
    pub fn int(&mut self, sql: &str, params: &[&dyn Param]) -> i64 {
        let rows = self.rows(sql, params);
        assert_eq!(rows.len(), 1, "{sql}: {} rows", rows.len());
        rows[0][0].int()
    }

    /// The first column of every row, as integers.
    pub fn ints(&mut self, sql: &str, params: &[&dyn Param]) -> Vec<i64> {
        self.rows(sql, params).iter().map(|r| r[0].int()).collect()
    }
}

/// `?1`, `?2`, … as PostgreSQL's `$1`, `$2`, … (the tests' SQL holds no `?` in literals).
fn dollar_placeholders(sql: &str) -> String {
    sql.replace('?', "$")
}
