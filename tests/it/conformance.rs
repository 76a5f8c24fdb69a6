//! Black-box conformance: `tests/conformance/client.py`, a Python client written only from
//! docs/API.md and docs/design.md, run against a real server. It signs its own requests, drives every
//! route, checks the error codes of bad requests, and receives and verifies deliveries on its own
//! loopback receiver. This test passes when the script's closing line reports no failure.

use crate::support::{TestServer, create_key};
use std::path::Path;
use std::process::Command;
use std::time::Instant;

/// Runs `webhookd` (the binary under test) with `args`; panics unless it succeeds.
fn webhookd(args: &[&str]) {
    let out = Command::new(env!("CARGO_BIN_EXE_webhookd"))
        .args(args)
        .output()
        .expect("run webhookd");
    assert!(
        out.status.success(),
        "webhookd {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn python_client_written_from_the_docs_passes() {
    let python = match Command::new("python3").arg("--version").output() {
        Ok(out) if out.status.success() => "python3",
        Ok(out) => panic!(
            "`python3 --version` failed ({}): the conformance test needs a working python3 on PATH",
            out.status
        ),
        Err(e) => panic!(
            "python3 is not on PATH ({e}): the conformance test runs tests/conformance/client.py \
             with python3 (standard library only); install python3 to run it"
        ),
    };
    let server = TestServer::start();
    let (key2, secret2) = create_key(&server.db, "app2");
    // A key revoked through the CLI while the server runs: its requests must get 40102.
    let (revoked, revoked_secret) = create_key(&server.db, "app1");
    let db = &server.db;
    webhookd(&["keys", "revoke", "--db", db, &revoked]);

    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/client.py");
    let started = Instant::now();
    let out = Command::new(python)
        .arg(&script)
        .args([&server.url, &server.key_id, &server.secret, &key2, &secret2])
        .env("WEBHOOKD_REVOKED_KEY_ID", &revoked)
        .env("WEBHOOKD_REVOKED_SECRET", &revoked_secret)
        .env("PYTHONIOENCODING", "utf-8")
        .output()
        .expect("run the conformance client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let summary = stdout
        .lines()
        .rev()
        .find(|l| l.ends_with(" failed") && l.contains(" passed, "))
        .unwrap_or("(no summary line)");
    assert!(
        out.status.success() && summary.ends_with(", 0 failed"),
        "conformance client failed ({}, {summary}, {:.1} s)\n--- failures ---\n{}\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}",
        out.status,
        started.elapsed().as_secs_f64(),
        stdout
            .lines()
            .filter(|l| l.starts_with("FAIL"))
            .collect::<Vec<_>>()
            .join("\n"),
    );
}
