//! `api`: signed reads from N clients for a fixed time — `GET /v1/endpoints/{id}` and
//! `GET /v1/tasks?status=failed` — with req/s and latency percentiles of each.

use crate::Bench;
use crate::load::{Until, drive, expect_ok};
use crate::publish::create_endpoints;
use crate::report::{Report, Target as Goal};
use crate::target::Target;

/// Measures both reads against `target` and returns the report (not yet emitted).
pub fn measure(bench: &Bench, target: &Target, db_tasks: u64) -> anyhow::Result<Report> {
    let s = &bench.settings;
    let clients = target.clients(s.api_clients())?;
    let duration = s.api_duration();
    let mut r = Report::new("api");
    r.param("clients", clients.len())
        .param("duration_s", duration.as_secs_f64())
        .param("db_tasks", db_tasks);
    let id = create_endpoints(&clients[0], &bench.receiver, 1)?.ids[0];
    let bare = bench.figure("baseline", "bare_get_per_s");
    for (key, path) in [
        ("get_endpoint", format!("/v1/endpoints/{id}")),
        ("list_failed_tasks", "/v1/tasks?status=failed".to_string()),
    ] {
        bench.progress(&format!(
            "api: GET {path} from {} clients for {duration:?}",
            clients.len()
        ));
        let outcome = drive(&clients, Until::Elapsed(duration), None, |client, _| {
            expect_ok(client.send("GET", &path, None)).map(|_| ())
        });
        r.add_target(
            &format!("{key}_per_s"),
            outcome.rate(),
            "req/s",
            Goal::AtLeast(15_000.0),
        );
        r.add_latency(key, &outcome.latency, Some(Goal::AtMost(5.0)));
        r.add(&format!("{key}_errors"), outcome.errors as f64, "");
        if let Some(bare) = bare {
            r.add(&format!("{key}_vs_bare"), outcome.rate() / bare, "x");
        }
        if let Some(e) = outcome.first_error {
            r.note(format!("{key}: {e}"));
        }
    }
    Ok(r)
}

/// The `api` scenario on a fresh server (or the `--url` one).
pub fn scenario(bench: &mut Bench) -> anyhow::Result<()> {
    let target = bench.target(|_| Ok(()))?;
    let report = measure(bench, &target, 0)?;
    target.stop();
    bench.emit(report);
    Ok(())
}
