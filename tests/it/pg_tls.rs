//! PostgreSQL as a managed database is reached: over TLS, against a private server with
//! `ssl=on`, a `hostssl`-only `pg_hba.conf` and a CA this test makes (rcgen). `webhookd serve`
//! with `sslmode=verify-full` delivers; a wrong CA, a wrong host name and `sslmode=disable` are
//! refused with messages that name the cause and the fix; and when the database goes away,
//! `/healthz` and the API answer 503 with the reason instead of hanging for the pool's wait.

use crate::pg::PgServer;
use crate::support::{Receiver, ok, wait_for};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use serde_json::json;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use webhookd::client::Client;
use webhookd::store::postgres as pgstore;

/// `webhookd serve --db DB --workers 2` writing its log to a file (it logs on after start, so
/// its stderr must stay open), read until it listens.
struct Node {
    child: std::process::Child,
    log: PathBuf,
    _dir: tempfile::TempDir,
    url: String,
    key_id: String,
    secret: String,
}

impl Node {
    fn start(db: &str) -> Node {
        let dir = tempfile::tempdir().expect("temp dir");
        let log = dir.path().join("node.log");
        let listen = crate::support::free_local_addr();
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_webhookd"))
            .args(["serve", "--db", db, "--listen", &listen, "--workers", "2"])
            .env_remove("WEBHOOKD_DB")
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("webhookd starts");
        let mut node = Node {
            child,
            log,
            _dir: dir,
            url: format!("http://{listen}"),
            key_id: String::new(),
            secret: String::new(),
        };
        let text = wait_for(Duration::from_secs(120), || {
            let text = node.log_text();
            let exited = matches!(node.child.try_wait(), Ok(Some(_)));
            (text.contains("listening") || exited).then_some(text)
        })
        .expect("webhookd listens or exits");
        for line in text.lines() {
            if let Some(v) = line.trim().strip_prefix("key id: ") {
                node.key_id = v.to_string();
            }
            if let Some(v) = line.trim().strip_prefix("secret: ") {
                node.secret = v.to_string();
            }
        }
        node
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A CA: its parameters and key (to sign with) and its certificate in PEM.
fn make_ca(name: &str) -> (CertificateParams, KeyPair, String) {
    let key = KeyPair::generate().expect("CA key");
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let pem = params.self_signed(&key).expect("CA certificate").pem();
    (params, key, pem)
}

/// The test's certificates: the CA that signed the server's, and another one.
struct Pki {
    _dir: tempfile::TempDir,
    ca: PathBuf,
    other_ca: PathBuf,
}

/// A private server with `ssl=on`, its certificate issued by a fresh CA for `localhost` only,
/// and TCP allowed over TLS only (`hostssl`); database `hooks` made over the unix socket.
/// `None` (a loud skip, a failure under `CI=true`) when PostgreSQL is not installed.
fn tls_server() -> Option<(PgServer, Pki)> {
    let dir = tempfile::tempdir().expect("temp dir");
    let (ca_params, ca_key, ca_pem) = make_ca("webhookd test CA");
    let (_, _, other_pem) = make_ca("some other CA");
    let server_key = KeyPair::generate().expect("server key");
    let mut params = CertificateParams::new(vec!["localhost".to_string()]).expect("params");
    params
        .distinguished_name
        .push(DnType::CommonName, "localhost");
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let server_pem = params
        .signed_by(&server_key, &Issuer::from_params(&ca_params, &ca_key))
        .expect("server certificate")
        .pem();
    let pki = Pki {
        ca: dir.path().join("ca.pem"),
        other_ca: dir.path().join("other-ca.pem"),
        _dir: dir,
    };
    std::fs::write(&pki.ca, &ca_pem).unwrap();
    std::fs::write(&pki.other_ca, &other_pem).unwrap();
    let server = PgServer::start_configured(20, |server| {
        let data = server.data_dir();
        let put = |name: &str, text: &str, mode: u32| {
            let path = data.join(name);
            std::fs::write(&path, text).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            server.give_to_server(&path);
        };
        put("server.crt", &server_pem, 0o644);
        put("server.key", &server_key.serialize_pem(), 0o600);
        put(
            "pg_hba.conf",
            "local all all trust\nhostssl all all 127.0.0.1/32 scram-sha-256\n",
            0o600,
        );
        let conf = data.join("postgresql.conf");
        let mut text = std::fs::read_to_string(&conf).unwrap();
        text.push_str("\nssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n");
        std::fs::write(&conf, text).unwrap();
    })?;
    let mut admin = server.client(&server.socket_url("postgres"));
    admin.batch_execute("CREATE DATABASE hooks").unwrap();
    Some((server, pki))
}

/// The URL of database `hooks` at `host` with the query `params`.
fn url(server: &PgServer, host: &str, params: &str) -> String {
    format!(
        "postgres://{}:{}@{host}:{}/hooks{params}",
        crate::pg::USER,
        server.password(),
        server.port()
    )
}

/// The error `webhookd` gives when it opens `url` (it must fail); checked to hide the password.
fn refusal(server: &PgServer, url: &str) -> String {
    let err = format!("{:#}", pgstore::open(url, 1).expect_err(url));
    assert!(
        !err.contains(server.password()),
        "the password shows: {err}"
    );
    err
}

/// Whether a connection webhookd makes to `url` runs over TLS (`pg_stat_ssl`).
fn uses_tls(url: &str) -> bool {
    let parsed = pgstore::PgUrl::parse(url).unwrap();
    let mut client = pgstore::connect(&parsed).expect("connects");
    client
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .unwrap()
        .get(0)
}

#[test]
fn serve_over_verify_full_delivers_and_a_wrong_ca_or_host_is_refused_clearly() {
    let Some((server, pki)) = tls_server() else {
        return;
    };
    let ca = pki.ca.display().to_string();
    let other = pki.other_ca.display().to_string();

    // The suite's basics through `webhookd serve` over verify-full.
    let full = url(
        &server,
        "localhost",
        &format!("?sslmode=verify-full&sslrootcert={ca}"),
    );
    let node = Node::start(&full);
    assert!(
        !node.key_id.is_empty(),
        "webhookd serve did not start over TLS:\n{}",
        node.log_text()
    );
    let client = Client::new(&node.url, &node.key_id, &node.secret);
    let receiver = Receiver::start();
    ok(
        &client,
        "POST",
        "/v1/endpoints",
        Some(json!({"name": "tls", "url": receiver.url})),
    );
    ok(
        &client,
        "POST",
        "/v1/events",
        Some(json!({"event_name": "over.tls", "payload": {"n": 7}})),
    );
    let got = receiver.wait_for(1, Duration::from_secs(60));
    assert_eq!(got.len(), 1, "the delivery arrives");
    assert_eq!(got[0].json()["n"], 7, "{:?}", got[0]);
    let mut admin = server.client(&server.socket_url("postgres"));
    let tls_sessions: i64 = admin
        .query_one(
            "SELECT count(*) FROM pg_stat_ssl JOIN pg_stat_activity USING (pid)
             WHERE datname = 'hooks' AND ssl",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(tls_sessions > 0, "the node's sessions use TLS");
    let log = node.log_text();
    assert!(!log.contains(server.password()), "{log}");
    drop(node);

    // A certificate from another CA: refused, naming the CA file and the fix.
    for mode in ["verify-full", "verify-ca", "require"] {
        let err = refusal(
            &server,
            &url(
                &server,
                "localhost",
                &format!("?sslmode={mode}&sslrootcert={other}"),
            ),
        );
        assert!(
            err.contains(&format!(
                "the server's certificate is not signed by sslrootcert={other}"
            )) && err.contains("set sslrootcert to the CA certificate that signed it"),
            "{mode}: {err}"
        );
    }

    // The right CA, the wrong name: verify-full refuses and says what to do; verify-ca (chain
    // only) and require without a root (encrypted, not verified) connect over TLS.
    let err = refusal(
        &server,
        &url(
            &server,
            "127.0.0.1",
            &format!("?sslmode=verify-full&sslrootcert={ca}"),
        ),
    );
    assert!(
        err.contains("certificate is for localhost, not 127.0.0.1")
            && err.contains("sslmode=verify-ca"),
        "{err}"
    );
    assert!(uses_tls(&url(
        &server,
        "127.0.0.1",
        &format!("?sslmode=verify-ca&sslrootcert={ca}")
    )));
    assert!(uses_tls(&url(&server, "127.0.0.1", "?sslmode=require")));
    // prefer (libpq's default, no sslmode): TLS when the server offers it.
    assert!(uses_tls(&url(&server, "127.0.0.1", "")));

    // No TLS against a hostssl-only server: the server's refusal, and the fix.
    let err = refusal(&server, &url(&server, "127.0.0.1", "?sslmode=disable"));
    assert!(
        err.contains("no encryption") && err.contains("only over TLS: use sslmode=require"),
        "{err}"
    );

    // verify-full without any root certificate: refused before connecting, with the fix.
    let err = refusal(&server, &url(&server, "localhost", "?sslmode=verify-full"));
    assert!(err.contains("add sslrootcert=PATH"), "{err}");
}

/// Issue: a PostgreSQL outage made `/healthz` and the API hang for the pool's 30 s wait. Now
/// both answer 503 with the reason soon after the database goes away, and 200 once it is back.
#[test]
fn healthz_and_the_api_answer_503_with_the_reason_when_postgres_goes_away() {
    let Some(server) = PgServer::start() else {
        return;
    };
    let db = server.create_database("outage");
    let node = Node::start(&db);
    assert!(!node.key_id.is_empty(), "{}", node.log_text());
    let client = Client::new(&node.url, &node.key_id, &node.secret);
    ok(&client, "GET", "/v1/endpoints", None);
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .into();
    let healthz = || -> (u16, serde_json::Value) {
        let mut reply = agent
            .get(&format!("{}/healthz", node.url))
            .call()
            .unwrap_or_else(|e| panic!("healthz answers: {e}\n{}", node.log_text()));
        let status = reply.status().as_u16();
        let text = reply.body_mut().read_to_string().unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or_default())
    };
    assert_eq!(healthz().0, 200);

    server.halt();
    let gone = Instant::now();
    let (status, body) = wait_for(Duration::from_secs(60), || {
        let (status, body) = healthz();
        (status == 503).then_some((status, body))
    })
    .expect("healthz turns 503 while PostgreSQL is down");
    let noticed = gone.elapsed();
    let reason = body["reason"].as_str().unwrap_or_default().to_string();
    assert_eq!(
        (status, body["status"].as_str()),
        (503, Some("unavailable"))
    );
    assert!(
        reason.contains("no connection to PostgreSQL")
            && ["connection refused", "connection closed", "shutting down"]
                .iter()
                .any(|cause| reason.to_lowercase().contains(cause)),
        "the reason names the cause: {reason}"
    );
    assert!(!reason.contains(server.password()), "{reason}");
    // Loosely: the pool's old 30 s wait is gone (the aim is about 2 s).
    assert!(noticed < Duration::from_secs(15), "503 after {noticed:?}");

    // An API request during the outage is refused with the reason, not held.
    let asked = Instant::now();
    let reply = client
        .send("GET", "/v1/endpoints", None)
        .expect("the API answers");
    assert_eq!(reply.status, 503, "{}", reply.body);
    assert!(
        reply.body["message"]
            .as_str()
            .is_some_and(|m| m.contains("no connection to PostgreSQL")),
        "{}",
        reply.body
    );
    assert!(
        asked.elapsed() < Duration::from_secs(15),
        "{:?}",
        asked.elapsed()
    );

    // Back: the node recovers by itself.
    assert!(server.resume(), "the server starts again");
    wait_for(Duration::from_secs(60), || {
        (healthz().0 == 200).then_some(())
    })
    .expect("healthz turns 200 once PostgreSQL is back");
    ok(&client, "GET", "/v1/endpoints", None);
    let log = node.log_text();
    assert!(!log.contains(server.password()), "{log}");
    eprintln!("503 {noticed:?} after PostgreSQL stopped");
}

/// The pool's connections carry `--pg-statement-timeout-ms` (the URL's own `options` win);
/// behind PgBouncer (`--pg-poll-only`) none is sent, the role's applies.
#[test]
fn pooled_connections_carry_the_statement_timeout_unless_behind_pgbouncer() {
    let Some(server) = PgServer::start() else {
        return;
    };
    let url = server.create_database("settings");
    let open = |url: &str, settings: pgstore::PgSettings| {
        let (pool, _) = pgstore::open_with(url, 2, &settings).expect("opens");
        pool
    };
    let shown = |url: &str, settings: pgstore::PgSettings| -> String {
        let pool = open(url, settings);
        let mut client = pool.get().expect("a connection");
        client
            .query_one("SHOW statement_timeout", &[])
            .unwrap()
            .get(0)
    };
    let defaults = pgstore::PgSettings::default();
    assert_eq!(shown(&url, defaults), "30s");
    let short = pgstore::PgSettings {
        statement_timeout: Some(Duration::from_millis(300)),
        ..defaults
    };
    assert_eq!(shown(&url, short), "300ms");
    let own = format!("{url}?options=-c%20statement_timeout%3D5s");
    assert_eq!(shown(&own, short), "5s", "the URL's options win");
    let pgbouncer = pgstore::PgSettings {
        pgbouncer: true,
        ..short
    };
    assert_eq!(shown(&url, pgbouncer), "0", "the server's (role's) setting");

    // A statement over the limit is cancelled by the server.
    let pool = open(&url, short);
    let err = pool
        .get()
        .unwrap()
        .batch_execute("SELECT pg_sleep(5)")
        .expect_err("cancelled");
    assert_eq!(
        err.code(),
        Some(&postgres::error::SqlState::QUERY_CANCELED),
        "{err}"
    );
}

#[test]
fn the_pool_size_flag_is_validated() {
    for bad in ["0", "1001", "many"] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_webhookd"))
            .args(["serve", "--db", "postgres://h/db", "--pg-pool-size", bad])
            .env_remove("WEBHOOKD_DB")
            .output()
            .expect("webhookd runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad}: {stderr}");
        assert!(stderr.contains("--pg-pool-size"), "{bad}: {stderr}");
    }
}
