//! The dashboard (docs/design.md §15): its files and headers over HTTP, and the whole UI in a real
//! headless Chromium (tests/browser/dashboard.py, Python playwright with Debian's chromium).

use crate::support::{Answer, Receiver, TestServer, program_runs, require_component};
use std::path::Path;
use std::process::Command;

fn get(url: &str) -> ureq::http::Response<ureq::Body> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .build()
        .into();
    agent.get(url).call().expect("request sent")
}

fn header<'a>(reply: &'a ureq::http::Response<ureq::Body>, name: &str) -> &'a str {
    reply
        .headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
}

#[test]
fn root_redirects_and_ui_files_carry_security_headers_without_a_signature() {
    let server = TestServer::start();
    let root = get(&format!("{}/", server.url));
    assert_eq!(root.status(), 302);
    assert_eq!(header(&root, "location"), "/ui/");
    let mut page = get(&format!("{}/ui/", server.url));
    assert_eq!(page.status(), 200);
    assert!(header(&page, "content-type").starts_with("text/html"));
    let csp = header(&page, "content-security-policy").to_string();
    for part in [
        "default-src 'self'",
        "script-src 'self'",
        "connect-src 'self'",
        "frame-ancestors 'none'",
    ] {
        assert!(csp.contains(part), "{csp}");
    }
    assert!(
        !csp.contains("unsafe-inline") && !csp.contains("http"),
        "{csp}"
    );
    assert_eq!(header(&page, "x-frame-options"), "DENY");
    assert_eq!(header(&page, "x-content-type-options"), "nosniff");
    assert_eq!(header(&page, "referrer-policy"), "no-referrer");
    let html = page.body_mut().read_to_string().unwrap();
    assert!(html.contains(r#"<script type="module" src="app.js">"#));
    let script = get(&format!("{}/ui/sha256.js", server.url));
    assert!(header(&script, "content-type").starts_with("text/javascript"));
    assert!(!header(&script, "etag").is_empty());
    assert_eq!(get(&format!("{}/ui/missing.js", server.url)).status(), 404);
    // The API itself still wants a signature.
    assert_eq!(get(&format!("{}/v1/endpoints", server.url)).status(), 401);
}

/// The Python that has playwright: `WEBHOOKD_BROWSER_PYTHON`, else the venv .ci/browser.sh
/// makes (`.venv-ci/`), else `python3`.
fn browser_python() -> String {
    if let Ok(python) = std::env::var("WEBHOOKD_BROWSER_PYTHON") {
        return python;
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv-ci/bin/python");
    if venv.exists() {
        return venv.display().to_string();
    }
    "python3".into()
}

#[test]
fn dashboard_works_in_headless_chromium_on_a_non_secure_origin() {
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    if !require_component(
        "chromium",
        program_runs(&chromium, &["--headless", "--no-sandbox", "--version"]),
        "apt-get install chromium (or run .ci/browser.sh)",
    ) {
        return;
    }
    let python = browser_python();
    if !require_component(
        "python playwright",
        program_runs(&python, &["-c", "import playwright.sync_api"]),
        "pip install playwright, then set WEBHOOKD_BROWSER_PYTHON (or run .ci/browser.sh)",
    ) {
        return;
    }
    let server = TestServer::start();
    let receiver = Receiver::start();
    receiver.script([Answer::status(500).body("boom from receiver")]);
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let screenshots = root.join("target/ui-screenshots");
    let output = Command::new(&python)
        .arg(root.join("tests/browser/dashboard.py"))
        .env("WEBHOOKD_URL", &server.url)
        .env("WEBHOOKD_KEY_ID", &server.key_id)
        .env("WEBHOOKD_SECRET", &server.secret)
        .env("RECEIVER_URL", &receiver.url)
        .env("SCREENSHOTS", &screenshots)
        .env("CHROMIUM", &chromium)
        .output()
        .expect("the browser test starts");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "browser test failed\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
    );
    let result = stdout
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .expect("the browser test reports its figures");
    eprintln!("dashboard in chromium: {result}");
    let figures: serde_json::Value = serde_json::from_str(result).unwrap();
    assert!(figures["first_load_transferred_bytes"].as_u64().unwrap() < 200 * 1024);
    // The receiver got the failing delivery, its retry, and the event's two deliveries.
    assert!(
        receiver.received().len() >= 4,
        "{:?}",
        receiver.received().len()
    );
    // What the dashboard showed for the failing delivery is what its receiver got; the
    // endpoint's Authorization (RECEIVER_TOKEN in dashboard.py) only as its length.
    let shown: Vec<(String, String)> =
        serde_json::from_value(figures["first_attempt_request_headers"].clone())
            .expect("the headers the dashboard showed");
    let value = |name: &str| {
        shown
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    };
    let got = receiver
        .received()
        .into_iter()
        .find(|r| {
            r.header("x-service-task-id") == value("x-service-task-id")
                && r.header("x-service-attempt") == Some("1")
        })
        .expect("the receiver got the attempt the dashboard showed");
    let token = got
        .header("authorization")
        .expect("the credential was sent");
    assert_eq!(token, "Bearer dashboard-s3cr3t-0123456789");
    for (name, shown) in &shown {
        let sent = got
            .header(name)
            .unwrap_or_else(|| panic!("{name} was not sent"));
        match name.as_str() {
            "authorization" => assert_eq!(*shown, format!("Bearer … ({} bytes)", sent.len())),
            _ => assert_eq!(shown, sent, "{name}"),
        }
    }
}
