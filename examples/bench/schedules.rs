//! `schedules`: S schedules `* * * * *` on one endpoint, all due on the same minute. Per task,
//! the lateness of its creation (from the database) and of its delivery (at the receiver)
//! relative to the scheduled instant, and the time until all are created and delivered.
//!
//! `--quick` does not wait for a minute boundary: it fires the schedules with
//! `POST /v1/schedules/{id}/trigger` and measures from when the triggers were sent.

use crate::load::{Until, drive, expect_ok};
use crate::publish::create_endpoints;
use crate::report::{Report, Stats, Target as Goal};
use crate::{Bench, now_us};
use serde_json::json;
use std::collections::HashSet;
use std::sync::Mutex;
use std::time::{Duration, Instant};

const MINUTE_US: i64 = 60_000_000;

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

    // Creating must not straddle a minute boundary, or the schedules would fire apart.
    if !trigger {
        let estimate_us = (count as i64 / 300 + 3) * 1_000_000;
        let now = now_us();
        let next_minute = (now / MINUTE_US + 1) * MINUTE_US;
        if next_minute - now < estimate_us {
            bench.progress("schedules: waiting for the minute to turn before creating");
            sleep_until_us(next_minute + 200_000);
        }
    }
    bench.progress(&format!("schedules: creating {count}"));
    let ids = Mutex::new(Vec::with_capacity(count as usize));
    let created = drive(&clients, Until::Count(count), None, |client, n| {
        let body = json!({
            "name": format!("bench-{}-{n}", endpoints.tag),
            "cron_expr": "* * * * *",
            "timezone": "UTC",
            "endpoint_ids": [endpoint_id],
            "payload": {"seq": n},
        });
        let data = expect_ok(client.send("POST", "/v1/schedules", Some(&body)))?;
        let id = data["id"].as_i64().ok_or("schedule reply without an id")?;
        ids.lock().unwrap_or_else(|e| e.into_inner()).push(id);
        Ok(())
    });
    let ids = ids.into_inner().unwrap_or_else(|e| e.into_inner());
    r.add("created", created.ok as f64, "")
        .add("created_per_s", created.rate(), "req/s");
    if let Some(e) = &created.first_error {
        r.note(format!("creating: {e}"));
    }

    // Fire: by the clock, or by hand in quick mode.
    let first_instant_us = if trigger {
        let start = now_us();
        let fired = drive(
            &clients,
            Until::Count(ids.len() as u64),
            None,
            |client, n| {
                let path = format!("/v1/schedules/{}/trigger", ids[n as usize]);
                expect_ok(client.send("POST", &path, None)).map(|_| ())
            },
        );
        if let Some(e) = &fired.first_error {
            r.note(format!("trigger: {e}"));
        }
        start
    } else {
        (now_us() / MINUTE_US + 1) * MINUTE_US
    };
    let expected = ids.len() * minutes as usize;
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
            ids.len() * (k as usize + 1),
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
            let goal = (count >= 10_000 && !trigger).then_some(Goal::AtMost(1.0));
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
    if count >= 10_000 && !trigger {
        r.add_target("all_delivered_after_s", all, "s", Goal::AtMost(5.0));
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
