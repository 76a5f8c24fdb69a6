//! The files an operator installs from `packaging/`: the systemd unit passes
//! `systemd-analyze verify` without a word, and the Containerfile has what docs/design.md §10 asks.

use crate::support::{program_runs, require_component};
use std::path::Path;

fn packaging(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("packaging")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The unit's settings as (key, value) pairs, comments left out.
fn unit_settings(unit: &str) -> Vec<(String, String)> {
    unit.lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#') && !l.starts_with('['))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

#[test]
fn systemd_unit_is_hardened_and_verifies_clean() {
    let unit = packaging("webhookd.service");
    let settings = unit_settings(&unit);
    let has = |key: &str, value: &str| settings.iter().any(|(k, v)| k == key && v == value);
    assert!(has("DynamicUser", "yes") || settings.iter().any(|(k, _)| k == "User"));
    assert!(has("StateDirectory", "webhookd"));
    assert!(has("ExecStart", "/usr/local/bin/webhookd serve"));
    assert!(has(
        "Environment",
        "WEBHOOKD_DB=/var/lib/webhookd/webhookd.sqlite"
    ));
    for (key, value) in [
        ("NoNewPrivileges", "yes"),
        ("ProtectSystem", "strict"),
        ("ProtectHome", "yes"),
        ("PrivateTmp", "yes"),
        ("CapabilityBoundingSet", ""),
    ] {
        assert!(has(key, value), "{key}={value} missing");
    }

    if !require_component(
        "systemd-analyze",
        program_runs("systemd-analyze", &["--version"]),
        "apt-get install systemd",
    ) {
        return;
    }
    // verify checks that ExecStart's program exists: point it at the binary under test.
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("webhookd.service");
    let unit = unit.replace("/usr/local/bin/webhookd", env!("CARGO_BIN_EXE_webhookd"));
    std::fs::write(&copy, unit).unwrap();
    let out = std::process::Command::new("systemd-analyze")
        .arg("verify")
        .arg(&copy)
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // systemd-analyze exits 0 on unknown keys and bad values, only warning: clean means silent.
    assert!(out.status.success() && said.trim().is_empty(), "{said}");
}

#[test]
fn containerfile_is_scratch_non_root_with_volume_and_healthcheck() {
    let file = packaging("Containerfile");
    let lines: Vec<&str> = file
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let first = |word: &str| lines.iter().find(|l| l.starts_with(word)).copied();
    assert_eq!(lines.first().copied(), Some("FROM scratch"));
    assert_eq!(lines.iter().filter(|l| l.starts_with("FROM ")).count(), 1);
    let copy = first("COPY dist/webhookd-").expect("COPY of the static binary from dist/");
    assert!(copy.ends_with(" /webhookd"), "{copy}");
    let user = first("USER ").expect("USER");
    let uid = user["USER ".len()..].split(':').next().unwrap();
    assert!(uid != "0" && uid != "root", "{user}");
    assert!(first("VOLUME ").is_some_and(|v| v.contains("/data")));
    assert!(first("ENV ").is_some_and(|e| e.contains("WEBHOOKD_DB=/data/")));
    let health = file
        .split("HEALTHCHECK")
        .nth(1)
        .expect("HEALTHCHECK")
        .split("\n\n")
        .next()
        .unwrap();
    assert!(
        health.contains(r#"CMD ["/webhookd", "healthcheck""#),
        "{health}"
    );
    assert_eq!(first("ENTRYPOINT"), Some(r#"ENTRYPOINT ["/webhookd"]"#));
    // Everything COPY names exists in the repo (or is made by scripts/release.sh).
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for l in lines.iter().filter(|l| l.starts_with("COPY ")) {
        let source = l.split_whitespace().rev().nth(1).unwrap();
        if !source.starts_with("dist/") {
            assert!(root.join(source).exists(), "{source} is not in the repo");
        }
    }
    let release = std::fs::read_to_string(root.join("scripts/release.sh")).unwrap();
    assert!(release.contains("$DIST/webhookd-$t"));
}

/// Every repository path the README and the user docs in docs/ cite in backquotes exists.
#[test]
fn readme_and_api_guide_cite_only_files_in_the_repo() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    // Folders the build, the release script and CI make (all in .gitignore).
    let made_by_tools = ["dist/", "target/", ".venv-ci/"];
    for doc in [
        "README.md",
        "docs/API.md",
        "docs/design.md",
        "docs/operations.md",
        "docs/dev/testing.md",
    ] {
        let text = std::fs::read_to_string(root.join(doc)).unwrap();
        let cited: Vec<&str> = text
            .split('`')
            .skip(1)
            .step_by(2)
            .filter(|s| !s.contains(' ') && !s.contains("://"))
            .filter(|s| {
                [
                    ".md",
                    ".rs",
                    ".sh",
                    ".sql",
                    ".service",
                    "Containerfile",
                    "/",
                ]
                .iter()
                .any(|end| s.ends_with(end))
            })
            .filter(|s| s.contains('/') || s.ends_with(".md") || s.ends_with(".sql"))
            .filter(|s| !s.starts_with('/') && !made_by_tools.iter().any(|m| s.starts_with(m)))
            .collect();
        assert!(!cited.is_empty(), "{doc} cites nothing?");
        for path in cited {
            assert!(
                root.join(path).exists(),
                "{doc} cites {path}, which is not in the repo"
            );
        }
    }
}

/// The worked signature example of docs/API.md is right (checked with webhookd's own HMAC).
#[test]
fn api_guide_signature_example_verifies() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let guide = std::fs::read_to_string(root.join("docs/API.md")).unwrap();
    let secret = "whs_3xampleSecretDoNotUse";
    let body = r#"{"name":"orders","url":"https://example.com/hooks/orders"}"#;
    let sign =
        |payload: &[u8]| webhookd::signing::hmac_hex(secret.as_bytes(), "1764000000", payload);
    let signed = sign(body.as_bytes());
    let bodyless = sign(b"GET /v1/endpoints?page=2");
    for needle in [secret, body, signed.as_str(), bodyless.as_str()] {
        assert!(guide.contains(needle), "docs/API.md does not show {needle}");
    }
}
