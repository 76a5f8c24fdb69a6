//! What a stranger without a key can hold of the server, and what a storage fault still
//! serves (docs/design.md §21, docs/API.md "Limits"): connections are capped per peer address with a reserve
//! that keeps `/healthz` answering, slow bodies are cut with a 408, a bad key is refused
//! before the body is read, and signed reads are served while the store refuses writes.

use crate::support::{
    Db, TestServer, backend, ok, raw, require_component, signed_headers, wait_for,
};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// A connection to `server` from the local address `local` (another loopback address is
/// another peer to the server's per-address cap).
fn connect_from(local: &str, url: &str) -> std::io::Result<TcpStream> {
    let addr: SocketAddr = url.trim_start_matches("http://").parse().unwrap();
    let local: SocketAddr = format!("{local}:0").parse().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()?;
    let stream = runtime.block_on(async {
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.bind(local)?;
        socket.connect(addr).await?.into_std()
    })?;
    stream.set_nonblocking(false)?;
    // Only a safety net against a hung test: every wait below is for an answer that comes.
    stream.set_read_timeout(Some(Duration::from_secs(120)))?;
    Ok(stream)
}

/// One response read from `stream`: status, lower-cased head, JSON body. `None` when the
/// server closed (or reset) the connection without one.
fn read_response(stream: &mut TcpStream) -> Option<(u16, String, Value)> {
    read_response_after(stream, &mut Vec::new())
}

/// The next response on `stream`, starting with `bytes` already read past the previous one
/// (a pipelined reply can arrive in the same read as the one before it); what is read past this
/// response is left in `bytes`.
fn read_response_after(
    stream: &mut TcpStream,
    bytes: &mut Vec<u8>,
) -> Option<(u16, String, Value)> {
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(at) = bytes.windows(4).position(|w| w == b"\r\n\r\n") {
            break at;
        }
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) => bytes.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&bytes[..head_end]).to_ascii_lowercase();
    let status = head.get(9..12)?.parse().ok()?;
    let length: usize = head
        .split("\r\n")
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    while bytes.len() < head_end + 4 + length {
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) => bytes.extend_from_slice(&chunk[..n]),
        }
    }
    let body: Vec<u8> = bytes
        .drain(..head_end + 4 + length)
        .skip(head_end + 4)
        .collect();
    let json = serde_json::from_slice(&body).unwrap_or(Value::Null);
    Some((status, head, json))
}

/// Sends `request` on a new connection from `local`; the response, `None` when the
/// connection was refused or closed without one.
fn ask_from(local: &str, url: &str, request: &[u8]) -> Option<(u16, String, Value)> {
    let mut stream = connect_from(local, url).ok()?;
    stream.write_all(request).ok()?;
    read_response(&mut stream)
}

/// A signed request head: `method path` with `Content-Length: length`, signed over `body`
/// (what the client means to send, whether or not it does).
fn signed_head(
    server: &TestServer,
    method: &str,
    path: &str,
    length: usize,
    body: &[u8],
) -> String {
    let timestamp = chrono::Utc::now().timestamp_millis().to_string();
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n");
    for (name, value) in signed_headers(
        &server.key_id,
        &server.secret,
        &timestamp,
        method,
        path,
        body,
    ) {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head + "\r\n"
}

/// A signed `GET path` as raw bytes.
fn signed_get(server: &TestServer, path: &str) -> Vec<u8> {
    signed_head(server, "GET", path, 0, b"").into_bytes()
}

/// Whether the server answered EOF (closed) on `stream` after its reply.
fn closed_after_reply(stream: &mut TcpStream) -> bool {
    let mut byte = [0u8; 1];
    matches!(stream.read(&mut byte), Ok(0) | Err(_))
}

#[test]
fn slow_strangers_over_the_per_peer_cap_leave_health_and_other_peers_served() {
    const PER_PEER: usize = 8;
    let server = TestServer::start_with(|config| {
        config.max_connections = 64;
        config.max_connections_per_peer = PER_PEER;
        // The probe's bodies are held open for the whole test, not cut.
        config.body_timeout = Duration::from_secs(600);
        config.body_min_rate = 0;
    });
    // The probe, at a size a test affords: three times the per-peer cap of connections from
    // 127.0.0.1, each declaring a body and sending one byte of it, without a key.
    let mut strangers = Vec::new();
    for _ in 0..3 * PER_PEER {
        let Ok(mut stream) = connect_from("127.0.0.1", &server.url) else {
            continue;
        };
        let _ =
            stream.write_all(b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nx");
        strangers.push(stream);
    }
    // Those beyond the cap were answered 503 (or closed) rather than queued: the reserve serves
    // only /healthz and /metrics.
    let mut refused = 0;
    for stream in strangers.iter_mut().skip(PER_PEER) {
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        match read_response(stream) {
            Some((status, head, body)) => {
                assert_eq!(
                    (status, body["code"].as_i64()),
                    (503, Some(50303)),
                    "{body}"
                );
                assert!(head.contains("connection: close"), "{head}");
                refused += 1;
            }
            None => refused += 1,
        }
    }
    assert_eq!(refused, 2 * PER_PEER);

    // More strangers take the reserve too, sending their heads slowly (a head must come within
    // 2 s there); each newcomer pushes the oldest of them out.
    let mut slow_heads = Vec::new();
    for _ in 0..2 * PER_PEER {
        if let Ok(mut stream) = connect_from("127.0.0.1", &server.url) {
            let _ = stream.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n");
            slow_heads.push(stream);
        }
    }

    // /healthz answers, even from the strangers' own address (the reserve).
    let health = wait_for(Duration::from_secs(60), || {
        ask_from(
            "127.0.0.1",
            &server.url,
            b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
        )
        .filter(|(status, _, _)| *status == 200)
    })
    .expect("/healthz answered under the probe");
    assert_eq!(health.2["status"], "ok");
    let metrics = wait_for(Duration::from_secs(60), || {
        ask_from(
            "127.0.0.1",
            &server.url,
            b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
        )
        .filter(|(status, _, _)| *status == 200)
    });
    assert!(metrics.is_some(), "/metrics answered under the probe");

    // A signed request from the same machine, another peer address, is served.
    let (status, _, body) = ask_from("127.0.0.2", &server.url, &signed_get(&server, "/v1/tasks"))
        .expect("an answer to 127.0.0.2");
    assert_eq!((status, body["code"].as_i64()), (200, Some(0)), "{body}");
    // From the capped address, the API answers 503 50303 (never a hang).
    let (status, head, body) = wait_for(Duration::from_secs(60), || {
        ask_from("127.0.0.1", &server.url, &signed_get(&server, "/v1/tasks"))
    })
    .expect("an answer to 127.0.0.1");
    assert_eq!(
        (status, body["code"].as_i64()),
        (503, Some(50303)),
        "{body}"
    );
    assert!(head.contains("retry-after: 1"), "{head}");
    assert!(
        body["message"].as_str().unwrap().contains("connection cap"),
        "{body}"
    );

    // Once the strangers leave, their address is served again.
    drop((strangers, slow_heads));
    let served = wait_for(Duration::from_secs(60), || {
        ask_from("127.0.0.1", &server.url, &signed_get(&server, "/v1/tasks"))
            .filter(|(status, _, _)| *status == 200)
    });
    assert!(served.is_some(), "127.0.0.1 served again after the probe");
}

#[test]
fn a_slow_body_is_cut_with_a_408_and_the_connection_closed() {
    // The total time limit.
    let server = TestServer::start_with(|config| config.body_timeout = Duration::from_secs(1));
    let body = br#"{"event_name":"slow.body","payload":{"pad":"xxxxxxxxxx"}}"#;
    let head = signed_head(&server, "POST", "/v1/events", body.len(), body);
    let mut stream = connect_from("127.0.0.1", &server.url).unwrap();
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(&body[..10]).unwrap();
    let (status, reply_head, reply) = read_response(&mut stream).expect("a 408");
    assert_cut_by(status, &reply, "--body-timeout-secs");
    assert!(reply_head.contains("connection: close"), "{reply_head}");
    assert!(closed_after_reply(&mut stream));
    // Nothing was published.
    let events = ok(&server.client(), "GET", "/v1/events", None);
    assert_eq!(events["total"], 0, "{events}");
    drop(server);

    // The minimum rate (defaults: 1024 bytes a second after 5 s): a byte, then nothing. The
    // stranger is not even asked for a key here: the path is answered without one.
    let server = TestServer::start();
    let mut stream = connect_from("127.0.0.1", &server.url).unwrap();
    stream
        .write_all(b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\nx")
        .unwrap();
    let (status, reply_head, _) = read_response(&mut stream).expect("a reply");
    assert_eq!(status, 404);
    assert!(reply_head.contains("connection: close"), "{reply_head}");
    assert!(closed_after_reply(&mut stream));
    // The same with a key: 408 naming the rate.
    let head = signed_head(&server, "POST", "/v1/events", 100_000, b"x");
    let mut stream = connect_from("127.0.0.1", &server.url).unwrap();
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(b"x").unwrap();
    let (status, _, reply) = read_response(&mut stream).expect("a 408");
    assert_cut_by(status, &reply, "--body-min-rate");
    assert!(closed_after_reply(&mut stream));
}

#[test]
fn bad_credentials_are_refused_before_the_body_is_read() {
    // A long body time-out: a reply that waited for the body would be a 408, much later.
    let server = TestServer::start_with(|config| {
        config.body_timeout = Duration::from_secs(600);
        config.body_min_rate = 0;
    });
    let now = chrono::Utc::now().timestamp_millis().to_string();
    let stale = (chrono::Utc::now().timestamp() - 3600).to_string();
    let good_sig = "ab".repeat(32);
    type Headers<'a> = Vec<(&'a str, &'a str)>;
    let cases: [(&str, Headers, i64); 5] = [
        ("no headers", vec![], 40101),
        (
            "unknown key",
            vec![
                ("X-Key-ID", "key_nobody"),
                ("X-Timestamp", &now),
                ("X-Signature", &good_sig),
            ],
            40102,
        ),
        (
            "stale timestamp",
            vec![
                ("X-Key-ID", &server.key_id),
                ("X-Timestamp", &stale),
                ("X-Signature", &good_sig),
            ],
            40104,
        ),
        (
            "malformed signature",
            vec![
                ("X-Key-ID", &server.key_id),
                ("X-Timestamp", &now),
                ("X-Signature", "not-hex"),
            ],
            40103,
        ),
        (
            "short signature",
            vec![
                ("X-Key-ID", &server.key_id),
                ("X-Timestamp", &now),
                ("X-Signature", "abcd"),
            ],
            40103,
        ),
    ];
    for (case, headers, code) in cases {
        let mut request =
            "POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Length: 500000\r\n".to_string();
        for (name, value) in headers {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        request.push_str("\r\n");
        // The head only: not one byte of the declared body is sent.
        let mut stream = connect_from("127.0.0.1", &server.url).unwrap();
        stream.write_all(request.as_bytes()).unwrap();
        let (status, head, body) = read_response(&mut stream).expect(case);
        assert_eq!(
            (status, body["code"].as_i64()),
            (401, Some(code)),
            "{case}: {body}"
        );
        assert!(head.contains("connection: close"), "{case}: {head}");
        assert!(closed_after_reply(&mut stream), "{case}");
    }
    // A small refused body is read and dropped: its connection carries the next request.
    let mut stream = connect_from("127.0.0.1", &server.url).unwrap();
    stream
        .write_all(
            b"POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nX-Key-ID: key_nobody\r\nX-Timestamp: 1\r\nX-Signature: 00\r\n\r\n{}GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
        )
        .unwrap();
    let mut past = Vec::new();
    let (status, head, _) = read_response_after(&mut stream, &mut past).expect("a 401");
    assert_eq!(status, 401);
    assert!(!head.contains("connection: close"), "{head}");
    let next = read_response_after(&mut stream, &mut past).expect("the next reply");
    assert_eq!(next.0, 200);
}

#[test]
fn signed_reads_are_served_while_the_store_refuses_writes_and_replays_stay_refused() {
    let (server, fault) = match backend() {
        crate::support::Backend::Sqlite => {
            if !require_component(
                "root (to mount a small tmpfs as a disk that fills up)",
                crate::health::is_root(),
                "run `cargo test` as root, as CI does",
            ) {
                return;
            }
            let dir = tempfile::tempdir().unwrap();
            let disk = dir.path().join("disk");
            std::fs::create_dir_all(&disk).unwrap();
            let mounted = crate::health::Mounted::tmpfs(&disk, "6m");
            let db = disk.join("webhookd.sqlite");
            let server = TestServer::start_with(|config| config.db = db.to_str().unwrap().into());
            (
                server,
                Fault::FullDisk {
                    disk,
                    _mounted: mounted,
                    _dir: dir,
                },
            )
        }
        crate::support::Backend::Postgres => (TestServer::start(), Fault::ReadOnlyPg),
    };
    let c = server.client();
    // A read of one endpoint carries its replay record on PostgreSQL (docs/dev/storage.md,
    // "A read's replay record on PostgreSQL"): served during the fault too.
    let endpoint = ok(
        &c,
        "POST",
        "/v1/endpoints",
        Some(json!({"name": "a", "url": "https://example.com/h"})),
    );
    // Published after the endpoint, so that the app's targets are held and current: the
    // publishes during the fault are one statement each on PostgreSQL (docs/dev/storage.md,
    // "A publish in one statement on PostgreSQL"), refused with the rest.
    let event = ok(
        &c,
        "POST",
        "/v1/events",
        Some(json!({"event_name": "before.fault"})),
    );
    let one_endpoint = format!("/v1/endpoints/{}", endpoint["id"]);
    fault.begin(&server);

    // Writes are refused with the store's 503.
    let payload = json!({"event_name": "during.fault", "payload": {"pad": "x".repeat(200_000)}});
    let refused = wait_for(Duration::from_secs(60), || {
        let reply = c.send("POST", "/v1/events", Some(&payload)).unwrap();
        (reply.status != 200).then_some(reply)
    })
    .expect("writes kept succeeding during the fault");
    assert_eq!(refused.status, 503, "{}", refused.body);
    assert!(matches!(refused.code(), 50301 | 50302), "{}", refused.body);

    // Reads are served, several times over (each its own signature).
    for _ in 0..5 {
        let events = ok(&c, "GET", "/v1/events", None);
        assert_eq!(events["items"][0]["id"], event["id"], "{events}");
        ok(&c, "GET", &format!("/v1/events/{}", event["id"]), None);
        assert_eq!(ok(&c, "GET", &one_endpoint, None)["id"], endpoint["id"]);
    }
    // A read's signature sent again is still a replay (a list, and one resource).
    // Signed 5 s ago (well inside the allowed skew): the client's own timestamps rise by at
    // least a millisecond a request and may run ahead of the clock, so "now + 1 ms" could be
    // one it already used on this path (the same signature: refused as a replay at once; seen
    // in CI).
    let timestamp = (chrono::Utc::now().timestamp_millis() - 5_000).to_string();
    let replayed = ["/v1/tasks", one_endpoint.as_str()];
    for path in replayed {
        let headers = signed_headers(&server.key_id, &server.secret, &timestamp, "GET", path, b"");
        let (status, first) = raw(&server.url, "GET", path, &headers, b"");
        assert_eq!(status, 200, "{path}: {first}");
        let (status, again) = raw(&server.url, "GET", path, &headers, b"");
        assert_eq!(
            (status, again["code"].as_i64()),
            (401, Some(40105)),
            "{path}: {again}"
        );
    }
    // Writes still get their 503, signed anew.
    let reply = c.send("POST", "/v1/events", Some(&payload)).unwrap();
    assert_eq!(reply.status, 503, "{}", reply.body);

    // After the fault, writes resume and the replay seen during it is still refused.
    fault.end(&server);
    let resumed = wait_for(Duration::from_secs(60), || {
        let reply = c
            .send(
                "POST",
                "/v1/events",
                Some(&json!({"event_name": "after.fault"})),
            )
            .unwrap();
        (reply.status == 200).then_some(reply)
    });
    assert!(resumed.is_some(), "writes resumed after the fault");
    for path in replayed {
        let headers = signed_headers(&server.key_id, &server.secret, &timestamp, "GET", path, b"");
        let (status, again) = raw(&server.url, "GET", path, &headers, b"");
        assert_eq!(
            (status, again["code"].as_i64()),
            (401, Some(40105)),
            "{path}: {again}"
        );
    }
    // The server stops before its disk goes.
    drop(server);
    drop(fault);
}

/// A storage fault made for real on each store: a full disk under the SQLite file (a small
/// tmpfs, filled), or a PostgreSQL that refuses writes as a read-only server does (SQLSTATE
/// 25006, raised by triggers on the tables written).
enum Fault {
    FullDisk {
        disk: std::path::PathBuf,
        _mounted: crate::health::Mounted,
        _dir: tempfile::TempDir,
    },
    ReadOnlyPg,
}

const PG_TABLES_WRITTEN: [&str; 2] = ["replay_guard", "events"];

impl Fault {
    fn begin(&self, server: &TestServer) {
        match self {
            Fault::FullDisk { disk, .. } => {
                let mut file = std::fs::File::create(disk.join("filler")).unwrap();
                let chunk = vec![0u8; 64 * 1024];
                while file.write_all(&chunk).is_ok() {}
                let _ = file.sync_all();
            }
            Fault::ReadOnlyPg => {
                let mut sql = "CREATE FUNCTION refuse_writes() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'cannot execute in a read-only transaction' USING ERRCODE = 'read_only_sql_transaction'; END $$;".to_string();
                for table in PG_TABLES_WRITTEN {
                    sql.push_str(&format!(
                        "CREATE TRIGGER refuse_writes BEFORE INSERT OR UPDATE ON {table} FOR EACH ROW EXECUTE FUNCTION refuse_writes();"
                    ));
                }
                pg_batch(server, &sql);
            }
        }
    }

    fn end(&self, server: &TestServer) {
        match self {
            Fault::FullDisk { disk, .. } => std::fs::remove_file(disk.join("filler")).unwrap(),
            Fault::ReadOnlyPg => {
                let sql: String = PG_TABLES_WRITTEN
                    .iter()
                    .map(|t| format!("DROP TRIGGER refuse_writes ON {t};"))
                    .collect();
                pg_batch(server, &sql);
            }
        }
    }
}

fn pg_batch(server: &TestServer, sql: &str) {
    match Db::open(&server.db) {
        Db::Postgres(mut client) => client.batch_execute(sql).expect(sql),
        Db::Sqlite(_) => unreachable!("PostgreSQL only"),
    }
}

/// The server run as its own process with a small descriptor limit (soft = hard, so it cannot
/// raise it), its log read on a thread as it comes.
struct Limited {
    child: std::process::Child,
    url: String,
    log: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Limited {
    fn start(db: &str, nofile: u64, args: &[&str]) -> Limited {
        use std::io::{BufRead, BufReader};
        use std::os::unix::process::CommandExt;
        let listen = crate::support::free_local_addr();
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_webhookd"));
        command
            .args(["serve", "--db", db, "--listen", &listen])
            .args(args)
            .env_remove("WEBHOOKD_DB")
            .stderr(std::process::Stdio::piped());
        // SAFETY: setrlimit is async-signal-safe and touches only the child.
        unsafe {
            command.pre_exec(move || {
                let limit = libc::rlimit {
                    rlim_cur: nofile as libc::rlim_t,
                    rlim_max: nofile as libc::rlim_t,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = command.spawn().expect("spawn webhookd serve");
        let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let stderr = BufReader::new(child.stderr.take().unwrap());
        let kept = log.clone();
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                if line.contains("webhookd listening") {
                    let _ = ready_tx.send(());
                }
                let mut log = kept.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        let started = ready_rx.recv_timeout(Duration::from_secs(120));
        assert!(
            started.is_ok(),
            "serve did not start: {}",
            log.lock().unwrap()
        );
        Limited {
            child,
            url: format!("http://{listen}"),
            log,
        }
    }

    fn lines_with(&self, needle: &str) -> usize {
        self.log.lock().unwrap().matches(needle).count()
    }
}

impl Drop for Limited {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn out_of_descriptors_the_accept_loop_backs_off_logs_once_and_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::support::test_db(dir.path());
    // Caps far above what 128 descriptors allow: accept itself fails (EMFILE).
    let server = Limited::start(
        &db,
        128,
        &[
            "--workers",
            "1",
            "--max-connections",
            "10000",
            "--max-connections-per-peer",
            "10000",
        ],
    );
    let addr = server.url.trim_start_matches("http://").to_string();
    // Idle connections until accepts fail, and a few more waiting in the backlog (each
    // connect is bounded: a full backlog drops SYNs, and a blocked connect would stall).
    let mut idle = Vec::new();
    let mut started = None;
    let mut after_failure = 0;
    while idle.len() < 400 && after_failure < 10 {
        let addr: SocketAddr = addr.parse().unwrap();
        if let Ok(stream) = TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
            idle.push(stream);
        }
        if started.is_some() {
            after_failure += 1;
        } else if server.lines_with("accept failed") > 0 {
            started = Some(std::time::Instant::now());
        }
    }
    wait_for(Duration::from_secs(60), || {
        (server.lines_with("accept failed") > 0).then_some(())
    })
    .expect("accept failed for want of descriptors");
    let started = started.unwrap_or_else(std::time::Instant::now);
    // Let the loop retry for a while: one line per 10 s at most, each with its count.
    std::thread::sleep(Duration::from_secs(3));
    let lines = server.lines_with("accept failed");
    let allowed = 2 + started.elapsed().as_secs() as usize / 10;
    assert!(
        lines <= allowed,
        "{lines} 'accept failed' lines in {:?}: {}",
        started.elapsed(),
        server.log.lock().unwrap()
    );
    assert!(
        server.log.lock().unwrap().contains("failed="),
        "the line counts the failures"
    );

    // The descriptors come back: the server accepts again and answers.
    drop(idle);
    let health = wait_for(Duration::from_secs(120), || {
        ask_from(
            "127.0.0.1",
            &server.url,
            b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
        )
        .filter(|(status, _, _)| *status == 200)
    });
    assert!(
        health.is_some(),
        "/healthz after the descriptors came back: {}",
        server.log.lock().unwrap()
    );
}

/// A body cut for being too slow: 408 / 40801, the message naming the flag that cut it.
fn assert_cut_by(status: u16, reply: &Value, flag: &str) {
    assert_eq!(
        (status, reply["code"].as_i64()),
        (408, Some(40801)),
        "{reply}"
    );
    assert!(
        reply["message"].as_str().unwrap_or_default().contains(flag),
        "{reply}"
    );
}
