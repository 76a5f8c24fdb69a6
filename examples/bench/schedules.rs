//! `schedules`: S schedules `* * * * *` on one endpoint, all due on the same minute. Per task,
//! the lateness of its creation (from the database) and of its delivery (at the receiver)
//! relative to the scheduled instant, and the time until all are created and delivered.
//!
//! `--quick` does not wait for a minute boundary: it fires the schedules with
//! `POST /v1/schedules/{id}/trigger` and measures from when the triggers were sent.
//! `--fill` inserts the schedules straight into the database (all but the last, which is
//! created through the API and wakes the scheduler), for counts such as 100,000 that the API
//! would take minutes to create.
//!
//! Targets: 10,000 schedules all created ≤ 1 s and delivered ≤ 5 s after the minute;
//! 100,000 ≤ 2 s and ≤ 15 s.

use crate::load::{Until, drive, expect_ok};
use crate::publish::create_endpoints;
use crate::report::{Report, Stats, Target as Goal};
use crate::{Bench, now_us};
use serde_json::json;
use std::collections::HashSet;
use std::sync::Mutex;
use std::time::{Duration, Instant};

const MINUTE_US: i64 = 60_000_000;

/// The targets (s after the minute) for all tasks created and all delivered, by count.
fn goals(count: u64, trigger: bool) -> Option<(f64, f64)> {
    match count {
        _ if trigger => None,
        100_000.. => Some((2.0, 15.0)),
        10_000.. => Some((1.0, 5.0)),
        _ => None,
    }
}

/// Sleeps until the wall clock reaches `at_us`.
fn sleep_until_us(at_us: i64) {
    let wait = at_us - now_us();
    if wait > 0 {
        std::thread::sleep(Duration::from_micros(wait as u64));
    }
}

pub fn scenario(bench: &mut Bench) -> anyhow::Result<()> {
    let s = &bench.settings;
    let count = s.schedule_count();
    let trigger = s.quick && s.minutes.is_none();
    let minutes = if trigger { 1 } else { s.minutes.unwrap_or(1) };
    let target = bench.target(|_| Ok(()))?;
    let clients = target.clients(s.publish_clients())?;
    let endpoints = create_endpoints(&clients[0], &bench.receiver, 1)?;
    let endpoint_id = endpoints.ids[0];
    let mut r = Report::new("schedules");
    r.param("schedules", count)
        .param("minutes", minutes)
        .param("clients", clients.len())
        .param(
            "mode",
            if trigger {
                "trigger (quick: no minute wait)"
            } else {
                "cron * * * * *"
            },
        );

    if trigger && s.fill {
        anyhow::bail!("schedules: --fill needs the minute mode (no --quick, or --minutes M)");
    }
    r.param(
        "creation",
        if s.fill {
            "filled straight into the database, the last one through the API"
        } else {
            "through the API"
        },
    );

    // Creating must not straddle a minute boundary, or the schedules would fire apart.
    if !trigger {
        let per_s = if s.fill { 20_000 } else { 300 };
        let estimate_us = (count as i64 / per_s + 3) * 1_000_000;
        let now = now_us();
        let next_minute = (now / MINUTE_US + 1) * MINUTE_US;
        if next_minute - now < estimate_us {
            bench.progress("schedules: waiting for the minute to turn before creating");
            sleep_until_us(next_minute + 200_000);
        }
    }
    let create = |client: &webhookd::client::Client, n: u64| {
        let body = json!({
            "name": format!("bench-{}-{n}", endpoints.tag),
            "cron_expr": "* * * * *",
            "timezone": "UTC",
            "endpoint_ids": [endpoint_id],
            "payload": {"seq": n},
        });
        let data = expect_ok(client.send("POST", "/v1/schedules", Some(&body)))?;
        data["id"]
            .as_i64()
            .ok_or_else(|| "schedule reply without an id".to_string())
    };
    let ids = Mutex::new(Vec::with_capacity(count as usize));
    let (created, filled) = if s.fill {
        bench.progress(&format!(
            "schedules: filling {} into the database, then 1 through the API",
            count - 1
        ));
        let minute_ms = (now_us() / MINUTE_US + 1) * MINUTE_US / 1000;
        let started = Instant::now();
        target
            .fill_schedules(
                endpoint_id,
                &endpoints.tag.to_string(),
                count - 1,
                minute_ms,
            )
            .ok_or_else(|| anyhow::anyhow!("--fill needs a database the harness made"))??;
        let filled = started.elapsed();
        // Through the API: it wakes the scheduler, which then sees the filled ones too.
        let created = drive(&clients[..1], Until::Count(1), None, |client, _| {
            create(client, count - 1).map(|_| ())
        });
        r.add(
            "filled_per_s",
            (count - 1) as f64 / filled.as_secs_f64(),
            "rows/s",
        );
        (created, count - 1)
    } else {
        bench.progress(&format!("schedules: creating {count}"));
        let created = drive(&clients, Until::Count(count), None, |client, n| {
            let id = create(client, n)?;
            ids.lock().unwrap_or_else(|e| e.into_inner()).push(id);
            Ok(())
        });
        (created, 0)
    };
    let ids = ids.into_inner().unwrap_or_else(|e| e.into_inner());
    let made = created.ok + filled;
    r.add("created", made as f64, "")
        .add("created_per_s", created.rate(), "req/s");
    if let Some(e) = &created.first_error {
        r.note(format!("creating: {e}"));
    }

    // Fire: by the clock, or by hand in quick mode.
    let first_instant_us = if trigger {
        let start = now_us();
        let fired = drive(&clients, Until::Count(made), None, |client, n| {
            let path = format!("/v1/schedules/{}/trigger", ids[n as usize]);
            expect_ok(client.send("POST", &path, None)).map(|_| ())
        });
        if let Some(e) = &fired.first_error {
            r.note(format!("trigger: {e}"));
        }
        start
    } else {
        (now_us() / MINUTE_US + 1) * MINUTE_US
    };
    let expected = made as usize * minutes as usize;
    for k in 0..minutes {
        let instant = first_instant_us + i64::from(k) * MINUTE_US;
        if !trigger {
            bench.progress(&format!(
                "schedules: waiting {:.1} s for the minute",
                (instant - now_us()) as f64 / 1e6
            ));
            sleep_until_us(instant);
        }
        bench.receiver.wait_for(
            endpoints.tag,
            made as usize * (k as usize + 1),
            s.stall(),
            Instant::now() + Duration::from_secs(120),
        );
    }
    let deliveries = bench.receiver.deliveries(endpoints.tag);

    // Lateness against the instant each task was due: the minute it was delivered in (a
    // delivery is never a minute late here), or the trigger's send time.
    let due_us = |at_us: i64| {
        if trigger {
            first_instant_us
        } else {
            at_us.div_euclid(MINUTE_US) * MINUTE_US
        }
    };
    let unique: HashSet<i64> = deliveries.iter().filter_map(|d| d.task_id).collect();
    let with_schedule = deliveries
        .iter()
        .filter(|d| d.schedule_id.is_some())
        .count();
    let delivered = Stats::new(
        deliveries
            .iter()
            .map(|d| (d.at_us - due_us(d.at_us)).max(0) as u64)
            .collect(),
    );
    r.add("deliveries_expected", expected as f64, "")
        .add("deliveries_received", unique.len() as f64, "")
        .add("duplicates", (deliveries.len() - unique.len()) as f64, "")
        .add("with_schedule_header", with_schedule as f64, "");

    match target.task_times(endpoint_id) {
        Some(times) => {
            let times = times?;
            let creation = Stats::new(
                times
                    .iter()
                    .map(|(run_at, created_at)| {
                        let due_ms = if trigger {
                            first_instant_us / 1000
                        } else {
                            *run_at
                        };
                        (created_at - due_ms).max(0) as u64 * 1000
                    })
                    .collect(),
            );
            r.add("tasks_created", times.len() as f64, "");
            r.add_latency("creation_lateness", &creation, None);
            let goal = goals(count, trigger).map(|(created, _)| Goal::AtMost(created));
            let all = creation.max_ms() / 1000.0;
            match goal {
                Some(g) => r.add_target("all_created_after_s", all, "s", g),
                None => r.add("all_created_after_s", all, "s"),
            };
        }
        None => {
            r.note("task creation times need the database: not measured against --url");
        }
    }
    let one = (count == 1 && !trigger).then_some(Goal::AtMost(50.0));
    r.add_latency("delivery_lateness", &delivered, one);
    let all = delivered.max_ms() / 1000.0;
    if let Some((_, delivered)) = goals(count, trigger) {
        r.add_target("all_delivered_after_s", all, "s", Goal::AtMost(delivered));
    } else {
        r.add("all_delivered_after_s", all, "s");
    }
    if unique.len() < expected {
        r.note(format!(
            "only {} of {expected} deliveries arrived",
            unique.len()
        ));
    }
    if !target.owns_db() {
        for id in &ids {
            let _ = clients[0].send("DELETE", &format!("/v1/schedules/{id}"), None);
        }
    }
    target.stop();
    bench.emit(r);
    Ok(())
}
