//! The webhookd benchmark harness: starts webhookd (in this process on a temporary database
//! and loopback port, or uses one at `--url`), runs its own loopback receiver, drives signed
//! load from N client threads, and prints a table of figures against the targets of
//! `BENCHMARKS.md` (`--json`: one JSON object per scenario run on stdout).
//!
//! ```sh
//! cargo run --release --example bench -- all
//! cargo run --release --example bench -- baseline publish --fanout 10
//! cargo run --release --example bench -- all --quick --json
//! cargo run --release --example bench -- publish api --db postgres://u:pw@127.0.0.1/bench --nodes 3
//! ```
//!
//! `--db postgres://…` runs each scenario on N real `serve` processes (`--nodes`, default 1)
//! sharing a fresh database on that server; `--spawn` runs the SQLite store as a real process
//! too, so the two stores are compared on equal terms (see `nodes.rs`).
//!
//! Scenarios: `baseline` (the limits on this machine), `publish`, `api`, `schedules`,
//! `footprint` (the real binary as a subprocess), `scale` (1M finished tasks), `fairness` (a
//! healthy endpoint next to one that never answers), `ratelimit` (an unlimited endpoint next
//! to one limited to 1/s), `all`; `bulk-retry` (100,000 failed tasks retried in one call beside
//! a publish load; not in `all`).

mod api;
mod baseline;
mod bulk_retry;
mod fairness;
mod footprint;
mod load;
mod nodes;
mod publish;
mod receiver;
mod report;
mod scale;
mod schedules;
mod target;

use clap::{Parser, ValueEnum};
use report::Report;
use std::path::Path;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Scenario {
    Baseline,
    Publish,
    Api,
    Schedules,
    Footprint,
    Scale,
    /// A healthy endpoint's latency next to one that never answers (5,000 tasks).
    Fairness,
    /// An unlimited endpoint's delivered/s alone and next to one limited to 1/s.
    Ratelimit,
    /// A healthy endpoint's delivered/s and paced latency while 1, 4, 16 and 100 endpoints
    /// that never answer hang in another app, then in its own app, against none.
    Isolation,
    /// `POST /v1/tasks/retry` of 100,000 failed tasks (--tasks) beside a paced fan-out 10
    /// publish load (--rate, default 300 events/s), against the same load alone.
    BulkRetry,
    /// baseline, publish (fan-out 1 and 10), api, schedules, footprint, scale, fairness,
    /// ratelimit.
    All,
}

/// Benchmarks webhookd against its targets and against this machine's baselines.
#[derive(Debug, Clone, Parser)]
#[command(name = "bench")]
struct Args {
    /// What to run, in order.
    #[arg(required = true, value_enum)]
    scenarios: Vec<Scenario>,
    /// Tiny counts, seconds in total; `schedules` triggers by hand instead of waiting for a
    /// minute boundary (unless --minutes is given).
    #[arg(long)]
    quick: bool,
    /// One JSON object per scenario run on stdout (the tables go to stderr).
    #[arg(long)]
    json: bool,
    /// Load threads (default: 16 for publish and schedules, 32 for api).
    #[arg(long)]
    clients: Option<usize>,
    /// Events per publish run (default: 20,000 at fan-out 1, 5,000 at fan-out 10; `isolation`:
    /// the healthy endpoint's unpaced run, default 3,000).
    #[arg(long)]
    events: Option<u64>,
    /// Endpoints each event goes to (`publish`; `all` runs 1 and 10).
    #[arg(long)]
    fanout: Option<usize>,
    /// Seconds each api read runs (default 10).
    #[arg(long)]
    duration: Option<f64>,
    /// Pace the second publish phase at this many events/s (default: half the measured rate).
    #[arg(long)]
    rate: Option<f64>,
    /// Schedules due on the same minute (default 10,000).
    #[arg(long)]
    schedules: Option<u64>,
    /// Minutes of schedule firings to wait for (default 1).
    #[arg(long)]
    minutes: Option<u32>,
    /// `schedules`: insert the schedules straight into the database (10,000 rows per
    /// transaction) instead of creating each through the API, the last one excepted (created
    /// through the API, it wakes the scheduler); for counts the API would take minutes to
    /// create. Not with --url.
    #[arg(long, conflicts_with = "url")]
    fill: bool,
    /// Finished tasks put in the database for `scale` (default 1,000,000), failed tasks for
    /// `bulk-retry` (default 100,000).
    #[arg(long)]
    tasks: Option<u64>,
    /// Delivery workers of the webhookd the harness starts (default: webhookd's default).
    #[arg(long)]
    workers: Option<usize>,
    /// `isolation`: only these counts of hanging endpoints (comma-separated; default 1, 4, 16,
    /// 100), and without the case of none.
    #[arg(long, value_delimiter = ',')]
    hanging: Vec<usize>,
    /// `isolation`: only the hanging endpoints in this place (default both); `same_app_idle`:
    /// the control, as many endpoints of the same app with no task at all.
    #[arg(long, value_parser = ["other_app", "same_app", "same_app_idle"])]
    place: Option<String>,
    /// The database of the webhookd the harness starts: a SQLite file path, or a
    /// `postgres://` URL on whose server each scenario gets a fresh database (default: a fresh
    /// temporary SQLite file per scenario).
    #[arg(long, conflicts_with = "url")]
    db: Option<String>,
    /// Start this many `webhookd serve` processes on the one database (PostgreSQL only when
    /// above 1); the load clients are spread over them round robin.
    #[arg(long, default_value_t = 1, conflicts_with = "url")]
    nodes: usize,
    /// Run the server as the real binary in a subprocess even for one node on SQLite (the
    /// default runs it in the harness's process), as it always is with a PostgreSQL --db.
    #[arg(long, conflicts_with = "url")]
    spawn: bool,
    /// The webhookd binary to run as `serve` processes (--spawn, --nodes, a PostgreSQL --db)
    /// instead of the one built beside the harness: A/B runs of two builds with the same
    /// harness.
    #[arg(long, conflicts_with = "url")]
    binary: Option<std::path::PathBuf>,
    /// Use the webhookd running at this URL instead of starting one.
    #[arg(long, requires_all = ["key_id", "secret"])]
    url: Option<String>,
    #[arg(long)]
    key_id: Option<String>,
    #[arg(long)]
    secret: Option<String>,
}

/// The options every scenario reads, with quick-mode and normal defaults.
#[derive(Debug, Clone)]
pub struct Settings {
    pub quick: bool,
    json: bool,
    clients: Option<usize>,
    pub events: Option<u64>,
    duration: Option<f64>,
    pub rate: Option<f64>,
    schedules: Option<u64>,
    pub minutes: Option<u32>,
    /// `--fill`: schedules inserted straight into the database.
    pub fill: bool,
    tasks: Option<u64>,
    pub workers: Option<usize>,
    /// `--hanging`: the `isolation` cases to run (empty: all).
    pub hanging: Vec<usize>,
    /// `--place`: `other_app` or `same_app` only.
    pub place: Option<String>,
    /// `--db`: a SQLite path or a PostgreSQL URL (None: a temporary SQLite file).
    pub db: Option<String>,
    /// `serve` processes on the one database.
    pub nodes: usize,
    /// Subprocesses even for one node on SQLite.
    pub spawn: bool,
    /// `--binary`: the webhookd to spawn instead of the one beside the harness.
    pub binary: Option<std::path::PathBuf>,
    /// `(url, key id, secret)` of a running server.
    pub remote: Option<(String, String, String)>,
}

impl Settings {
    pub fn publish_events(&self, fanout: usize) -> u64 {
        self.events.unwrap_or(match (self.quick, fanout > 1) {
            (true, false) => 200,
            (true, true) => 40,
            (false, false) => 20_000,
            (false, true) => 5_000,
        })
    }

    pub fn publish_clients(&self) -> usize {
        self.clients.unwrap_or(16).max(1)
    }

    pub fn api_clients(&self) -> usize {
        self.clients.unwrap_or(32).max(1)
    }

    pub fn api_duration(&self) -> Duration {
        let secs = self.duration.unwrap_or(if self.quick { 0.3 } else { 10.0 });
        Duration::from_secs_f64(secs.max(0.01))
    }

    pub fn schedule_count(&self) -> u64 {
        self.schedules
            .unwrap_or(if self.quick { 20 } else { 10_000 })
            .max(1)
    }

    pub fn scale_tasks(&self) -> u64 {
        self.tasks
            .unwrap_or(if self.quick { 5_000 } else { 1_000_000 })
    }

    pub fn bulk_retry_tasks(&self) -> u64 {
        self.tasks
            .unwrap_or(if self.quick { 5_000 } else { 100_000 })
    }

    /// Whether the store is PostgreSQL.
    pub fn postgres(&self) -> bool {
        self.db
            .as_deref()
            .is_some_and(webhookd::store::postgres::is_url)
    }

    /// Whether the server runs as real `serve` processes rather than in this process.
    pub fn spawned(&self) -> bool {
        self.remote.is_none() && (self.spawn || self.nodes > 1 || self.postgres())
    }

    /// Why a scenario that fills the SQLite file before the server opens it cannot run here:
    /// it fills a fresh temporary file, in this process or before one `--spawn` node starts.
    pub fn cannot_prefill(&self) -> Option<&'static str> {
        (self.db.is_some() || self.nodes > 1).then_some(
            "skipped: it fills a fresh SQLite file before the server starts, so it runs only \
             without --db and --nodes",
        )
    }

    /// How long a wait for deliveries goes on without any arriving before giving up. Every
    /// wait expects all its deliveries and ends as soon as they are in, so this only bounds a
    /// run that lost some; quick runs (the smoke test, often on a busy machine) wait longer
    /// rather than report a loss that was only a pause.
    pub fn stall(&self) -> Duration {
        Duration::from_secs(if self.quick { 60 } else { 15 })
    }
}

/// One harness run: settings, the receiver, and the reports so far (later scenarios compare
/// themselves with earlier ones, e.g. with the baseline).
pub struct Bench {
    pub settings: Settings,
    pub receiver: receiver::Receiver,
    pub reports: Vec<Report>,
}

impl Bench {
    /// A fresh webhookd on a temporary database (which `prepare` may fill before the server
    /// opens it, in this process or `--spawn`ed), `--nodes` processes on the `--db` (`prepare`
    /// is not called: scenarios that fill the database check [`Settings::cannot_prefill`]
    /// first), or the `--url` one.
    pub fn target(
        &self,
        prepare: impl FnOnce(&Path) -> anyhow::Result<()>,
    ) -> anyhow::Result<target::Target> {
        let s = &self.settings;
        match &s.remote {
            Some((url, key_id, secret)) => Ok(target::Target::remote(url, key_id, secret)),
            None if s.spawned() => target::Target::nodes(s, prepare),
            None => target::Target::in_process(s.workers, s.db.as_deref().map(Path::new), prepare),
        }
    }

    /// A figure of the latest report of `scenario` in this run.
    pub fn figure(&self, scenario: &str, key: &str) -> Option<f64> {
        self.reports
            .iter()
            .rev()
            .find(|r| r.scenario == scenario)
            .and_then(|r| r.get(key))
    }

    pub fn progress(&self, text: &str) {
        eprintln!("bench: {text}");
    }

    /// Prints a finished report (table, or JSON line) and keeps it.
    pub fn emit(&mut self, mut report: Report) {
        let s = &self.settings;
        if s.remote.is_none() {
            report
                .param("store", if s.postgres() { "postgres" } else { "sqlite" })
                .param("nodes", s.nodes)
                .param(
                    "server",
                    if s.spawned() {
                        "processes"
                    } else {
                        "in-process"
                    },
                );
        }
        if self.settings.json {
            eprint!("{}", report.table());
            println!("{}", report.to_json());
        } else {
            print!("{}", report.table());
        }
        self.reports.push(report);
    }
}

/// Microseconds since the Unix epoch: the one time base of senders and the receiver.
pub fn now_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or_default()
}

fn run(args: Args) -> anyhow::Result<Vec<Report>> {
    let settings = Settings {
        quick: args.quick,
        json: args.json,
        clients: args.clients,
        events: args.events,
        duration: args.duration,
        rate: args.rate,
        schedules: args.schedules,
        minutes: args.minutes,
        fill: args.fill,
        tasks: args.tasks,
        workers: args.workers,
        hanging: args.hanging,
        place: args.place,
        db: args.db,
        nodes: args.nodes,
        spawn: args.spawn,
        binary: args.binary,
        remote: args.url.map(|url| {
            (
                url,
                args.key_id.unwrap_or_default(),
                args.secret.unwrap_or_default(),
            )
        }),
    };
    if settings.nodes == 0 {
        anyhow::bail!("--nodes must be at least 1");
    }
    if settings.nodes > 1 && !settings.postgres() {
        anyhow::bail!(
            "--nodes {} needs a postgres:// --db: several processes cannot share one SQLite file",
            settings.nodes
        );
    }
    let mut bench = Bench {
        settings,
        receiver: receiver::Receiver::start()?,
        reports: Vec::new(),
    };
    let fanouts = match args.fanout {
        Some(f) => vec![f.max(1)],
        None if args.scenarios.contains(&Scenario::All) => vec![1, 10],
        None => vec![1],
    };
    for scenario in args.scenarios {
        let steps = match scenario {
            Scenario::All => vec![
                Scenario::Baseline,
                Scenario::Publish,
                Scenario::Api,
                Scenario::Schedules,
                Scenario::Footprint,
                Scenario::Scale,
                Scenario::Fairness,
                Scenario::Ratelimit,
            ],
            one => vec![one],
        };
        for step in steps {
            match step {
                Scenario::Baseline => baseline::scenario(&mut bench)?,
                Scenario::Publish => {
                    for &fanout in &fanouts {
                        publish::scenario(&mut bench, fanout)?;
                    }
                }
                Scenario::Api => api::scenario(&mut bench)?,
                Scenario::Schedules => schedules::scenario(&mut bench)?,
                Scenario::Footprint => footprint::scenario(&mut bench)?,
                Scenario::Scale => scale::scenario(&mut bench)?,
                Scenario::Fairness => fairness::fairness(&mut bench)?,
                Scenario::Ratelimit => fairness::ratelimit(&mut bench)?,
                Scenario::Isolation => fairness::isolation(&mut bench)?,
                Scenario::BulkRetry => bulk_retry::scenario(&mut bench)?,
                Scenario::All => unreachable!("expanded above"),
            }
        }
    }
    Ok(bench.reports)
}

fn main() -> std::process::ExitCode {
    match run(Args::parse()) {
        Ok(_) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    /// `all --quick --json` runs in seconds and every count adds up: each published event's
    /// deliveries arrived, each triggered schedule delivered, each baseline request received.
    #[test]
    fn quick_run_of_every_scenario_adds_up() {
        let args = Args::parse_from(["bench", "all", "--quick", "--json"]);
        let reports = run(args).expect("the quick run completes");
        let lines: Vec<Value> = reports
            .iter()
            .map(|r| serde_json::from_str(&r.to_json().to_string()).expect("JSON parses"))
            .collect();
        let n = |v: &Value, key: &str| v[key].as_f64().unwrap_or(-1.0);
        let of = |name: &'static str| lines.iter().filter(move |v| v["scenario"] == name);
        assert_eq!(of("baseline").count(), 1);
        for b in of("baseline") {
            assert!(n(b, "bare_sent") > 0.0);
            assert_eq!(n(b, "bare_received"), n(b, "bare_sent"), "{b}");
            assert!(n(b, "sqlite_rows_per_s_batch10") > 0.0);
            assert_eq!(n(b, "bare_publish_errors"), 0.0, "{b}");
            assert_eq!(n(b, "bare_publish_sent"), n(b, "bare_sent"), "{b}");
            assert_eq!(n(b, "both_publish_errors"), 0.0, "{b}");
            assert_eq!(n(b, "both_publish_sent"), n(b, "bare_sent"), "{b}");
            assert_eq!(n(b, "both_received"), n(b, "both_sent"), "{b}");
            let share = n(b, "two_exchange_ceiling_share");
            assert!(share > 0.0 && share < 1.0, "{b}");
            assert!(n(b, "both_at_once_per_s") > 0.0, "{b}");
            assert!(n(b, "publish_hmac_us") > 0.0, "{b}");
        }
        // fan-out 1 and 10 on an empty database, fan-out 1 again with the scale fill.
        assert_eq!(of("publish").count(), 3);
        for p in of("publish") {
            assert_eq!(n(p, "publish_errors"), 0.0, "{p}");
            assert_eq!(n(p, "published"), n(p, "events"), "{p}");
            assert_eq!(n(p, "deliveries_expected"), n(p, "events") * n(p, "fanout"));
            assert_eq!(
                n(p, "deliveries_received"),
                n(p, "deliveries_expected"),
                "{p}"
            );
            assert_eq!(
                n(p, "half_deliveries_received"),
                n(p, "half_deliveries_expected")
            );
            assert!(n(p, "delivered_per_s") > 0.0);
            assert!(n(p, "delivered_vs_ceiling") > 0.0, "{p}");
            assert!(n(p, "latency_p99_ms") >= n(p, "latency_p50_ms"));
        }
        // Empty, one page of failed tasks, and the scale fill.
        assert_eq!(of("api").count(), 3);
        for a in of("api") {
            assert_eq!(n(a, "get_endpoint_errors"), 0.0, "{a}");
            assert_eq!(n(a, "list_failed_tasks_errors"), 0.0, "{a}");
            assert!(n(a, "get_endpoint_per_s") > 0.0);
        }
        for s in of("schedules") {
            assert_eq!(n(s, "created"), n(s, "schedules"), "{s}");
            assert_eq!(n(s, "tasks_created"), n(s, "schedules"), "{s}");
            assert_eq!(n(s, "deliveries_received"), n(s, "schedules"), "{s}");
            assert_eq!(n(s, "with_schedule_header"), n(s, "schedules"), "{s}");
        }
        let footprint = of("footprint").next().expect("a footprint report");
        if footprint["notes"]
            .as_array()
            .is_none_or(|notes| notes.is_empty())
        {
            assert!(n(footprint, "idle_rss_mib") > 0.0, "{footprint}");
            assert!(n(footprint, "start_to_healthy_ms") > 0.0);
        }
        let scale = of("scale").next().expect("a scale report");
        assert!(n(scale, "get_endpoint_per_s_vs_one_page") > 0.0, "{scale}");
        assert!(
            n(scale, "list_failed_tasks_per_s_vs_one_page") > 0.0,
            "{scale}"
        );
        let fair = of("fairness").next().expect("a fairness report");
        assert_eq!(
            n(fair, "healthy_received"),
            n(fair, "healthy_expected"),
            "{fair}"
        );
        assert!(n(fair, "hanging_connections_held") >= 1.0, "{fair}");
        let limited = of("ratelimit").next().expect("a ratelimit report");
        assert_eq!(
            n(limited, "alone_received"),
            n(limited, "events"),
            "{limited}"
        );
        assert_eq!(
            n(limited, "beside_received"),
            n(limited, "events"),
            "{limited}"
        );
    }

    /// `bulk-retry --quick`: every failed task retried (and delivered, when its endpoint is
    /// enabled), every delivery of both phases arrived.
    #[test]
    fn quick_bulk_retry_adds_up() {
        let args = Args::parse_from(["bench", "bulk-retry", "--quick", "--json"]);
        let reports = run(args).expect("the quick run completes");
        assert_eq!(reports.len(), 2, "enabled and disabled");
        for report in &reports {
            let r = serde_json::from_str::<Value>(&report.to_json().to_string()).unwrap();
            let n = |key: &str| r[key].as_f64().unwrap_or(-1.0);
            assert_eq!(n("retried"), n("failed_tasks"), "{r}");
            assert_eq!(n("retried_pending_or_delivered"), n("failed_tasks"), "{r}");
            let delivered = if r["endpoint"] == "enabled" {
                n("failed_tasks")
            } else {
                0.0
            };
            assert_eq!(n("retried_delivered"), delivered, "{r}");
            for phase in ["without", "with"] {
                let expected = n(&format!("{phase}_deliveries_expected"));
                assert!(expected > 0.0, "{r}");
                assert_eq!(n(&format!("{phase}_deliveries_received")), expected, "{r}");
            }
            assert!(n("retry_call_s") > 0.0, "{r}");
        }
    }
}
