//! `GET /metrics` beyond the delivery counts (README, "Metrics"): retries by reason and the queue
//! wait through a real receiver, per-endpoint series gone with their endpoint, and the README's
//! table naming every series the server exposes (and none it does not).

use crate::delivery::{endpoint, policy, task_id, wait_status};
use crate::support::{
    Answer, Backend, Receiver, TestServer, backend, free_local_addr, get_text, ok, wait_for,
};
use serde_json::json;
use std::collections::BTreeSet;
use std::time::Duration;

/// Generous: the condition, not this budget, is what the tests wait for.
const WAIT: Duration = Duration::from_secs(60);

/// The text of the server's `/metrics`.
pub(crate) fn scrape(server: &TestServer) -> String {
    let (status, text) = get_text(&format!("{}/metrics", server.url));
    assert_eq!(status, 200, "{text}");
    text
}

/// The value of one sample (`name` with its labels, as the text writes them), if listed.
pub(crate) fn metric(server: &TestServer, series: &str) -> Option<f64> {
    scrape(server)
        .lines()
        .find_map(|line| line.strip_prefix(&format!("{series} ")))
        .map(|v| v.trim().parse().expect("a number"))
}

/// Waits until the sample `series` has `value`; panics with the scrape otherwise. Counters are
/// set after the store commits, so a test that saw the commit waits for the count.
pub(crate) fn wait_metric(server: &TestServer, series: &str, value: f64) {
    if wait_for(WAIT, || {
        (metric(server, series) == Some(value)).then_some(())
    })
    .is_none()
    {
        panic!("{series} never became {value}:\n{}", scrape(server));
    }
}

#[test]
fn retries_by_reason_and_the_queue_wait_of_real_deliveries() {
    let server = TestServer::start();
    let c = server.client();
    let rx = Receiver::start();
    // 503, 429 and a reply after the endpoint's 300 ms timeout, then a 200.
    rx.script([
        Answer::status(503),
        Answer::status(429),
        Answer::status(200).delayed(Duration::from_secs(2)),
    ]);
    let retry_at_once = policy(&c, 5, "fixed", 0, 0);
    let ep = endpoint(
        &c,
        &rx.url,
        json!({ "retry_policy_id": retry_at_once, "timeout_ms": 300 }),
    );
    let task = task_id(&c, ep);
    wait_status(&c, task, "success");
    // Nothing listens: refused connections, retried until the task fails.
    let closed = endpoint(
        &c,
        &format!("http://{}/hook", free_local_addr()),
        json!({ "retry_policy_id": policy(&c, 2, "fixed", 0, 0) }),
    );
    wait_status(&c, task_id(&c, closed), "failed");
    for (reason, n) in [
        ("http_5xx", 1.0),
        ("http_429", 1.0),
        ("timeout", 1.0),
        ("connect", 1.0),
        ("http_4xx", 0.0),
        ("http_other", 0.0),
    ] {
        wait_metric(
            &server,
            &format!("webhookd_delivery_retries_total{{reason=\"{reason}\"}}"),
            n,
        );
    }
    // One queue wait per task (its first attempt), none per retry.
    wait_metric(&server, "webhookd_task_queue_wait_seconds_count", 2.0);
    wait_metric(
        &server,
        "webhookd_deliveries_total{outcome=\"network_error\"}",
        3.0,
    );
}

#[test]
fn an_endpoint_deleted_through_the_api_leaves_no_series() {
    let server = TestServer::start();
    let c = server.client();
    let rx = Receiver::start();
    // The deleted endpoint's second delivery is under way when it is deleted.
    let slow = Receiver::start();
    slow.script([
        Answer::status(200),
        Answer::status(200).delayed(Duration::from_secs(2)),
    ]);
    let kept = endpoint(&c, &rx.url, json!({}));
    let deleted = endpoint(&c, &slow.url, json!({}));
    for ep in [kept, deleted] {
        wait_status(&c, task_id(&c, ep), "success");
    }
    let series = |ep: i64| {
        format!("webhookd_endpoint_deliveries_total{{endpoint_id=\"{ep}\",outcome=\"success\"}}")
    };
    for ep in [kept, deleted] {
        wait_metric(&server, &series(ep), 1.0);
    }
    let in_flight = task_id(&c, deleted);
    assert_eq!(
        slow.wait_for(2, WAIT).len(),
        2,
        "the second delivery is under way"
    );
    ok(&c, "DELETE", &format!("/endpoints/{deleted}"), None);
    assert!(
        !scrape(&server).contains(&format!("endpoint_id=\"{deleted}\"")),
        "the deleted endpoint's series stayed"
    );
    // The attempt under way ends after the deletion: counted in the totals only.
    wait_status(&c, in_flight, "success");
    wait_metric(
        &server,
        "webhookd_deliveries_total{outcome=\"success\"}",
        3.0,
    );
    let text = scrape(&server);
    assert!(
        !text.contains(&format!("endpoint_id=\"{deleted}\"")),
        "the deleted endpoint's series stayed:\n{text}"
    );
    assert!(text.contains(&format!("{} 1\n", series(kept))), "{text}");
}

/// The series names the README's metrics table lists: the first cell of each row between the
/// `## Metrics` heading and the next heading, in backquotes.
fn readme_series() -> BTreeSet<String> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    let section = readme
        .split("\n## Metrics\n")
        .nth(1)
        .expect("README.md has a `## Metrics` section");
    let section = section.split("\n## ").next().unwrap_or(section);
    section
        .lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|rest| rest.split('`').next())
        .map(str::to_string)
        .collect()
}

/// The series a scrape exposes, as one queries them: a counter's with `_total`, others by
/// their family name (a histogram's `_bucket`, `_sum` and `_count` under it).
fn exposed_series(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .map(|rest| match rest.split_once(' ') {
            Some((name, "counter")) => format!("{name}_total"),
            Some((name, _)) => name.to_string(),
            None => panic!("a TYPE line without a type: {rest}"),
        })
        .collect()
}

#[test]
fn the_readme_metrics_table_lists_every_series_and_no_other() {
    // Every conditional series on: a schedule fired (the lag gauge), backups (SQLite only),
    // span export (to a port nothing listens on: spans are dropped and counted).
    let backups = tempfile::tempdir().unwrap();
    let dir = backups.path().to_path_buf();
    let otlp = format!("http://{}", free_local_addr());
    let server = TestServer::start_manual(crate::schedules::at(12, 0, 30), move |config| {
        crate::schedules::wide_skew(config);
        config.otlp_endpoint = Some(otlp);
        if backend() == Backend::Sqlite {
            config.backup = Some(webhookd::backup::BackupConfig {
                dir,
                every: Duration::from_secs(3600),
                keep: 1,
            });
        }
    });
    let c = server.client();
    let rx = Receiver::start();
    let ep = endpoint(&c, &rx.url, json!({}));
    ok(
        &c,
        "POST",
        "/schedules",
        Some(json!({ "name": "m", "cron_expr": "* * * * *", "endpoint_ids": [ep] })),
    );
    server.advance(chrono::TimeDelta::seconds(30));
    let text = wait_for(WAIT, || {
        let text = scrape(&server);
        text.contains("webhookd_endpoint_deliveries_total{")
            .then_some(text)
            .filter(|t| t.contains("webhookd_scheduler_lag_seconds "))
    })
    .unwrap_or_else(|| panic!("no delivery or firing in:\n{}", scrape(&server)));
    let exposed = exposed_series(&text);
    let listed = readme_series();
    let missing: Vec<_> = exposed.difference(&listed).collect();
    assert!(
        missing.is_empty(),
        "/metrics exposes series the README's metrics table does not list: {missing:?}"
    );
    let mut stale: Vec<_> = listed.difference(&exposed).collect();
    if backend() == Backend::Postgres {
        stale.retain(|s| !s.starts_with("webhookd_backup_"));
    }
    assert!(
        stale.is_empty(),
        "the README's metrics table lists series /metrics does not expose: {stale:?}"
    );
}
