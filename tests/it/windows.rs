//! Schedule windows, jitter and backfill (docs/design.md §19) on a manual clock, on both stores:
//! firing only inside [starts_at, ends_at], `next_run_at` null past the end while `active`, a
//! later end reviving the schedule, catch-up inside the window, jittered `run_at` with one
//! firing per instant, and backfill firing each missing instant once — also when two backfills
//! and the scheduler race on one node.

use crate::catchup::{minutely, read, run_ats};
use crate::schedules::{
    at, endpoint, id, rfc, schedule, server_at, tasks_of, wait_next_run, wait_tasks, wide_skew,
};
use crate::support::{Db, TestServer, err, expect_field_errors, ok, wait_for};
use chrono::{DateTime, TimeDelta, Utc};
use serde_json::{Value, json};
use std::time::Duration;
use webhookd::client::Client;

fn ms(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

fn backfill(client: &Client, schedule_id: i64, from: DateTime<Utc>, to: DateTime<Utc>) -> Value {
    let body = json!({ "from": rfc(from), "to": rfc(to) });
    ok(
        client,
        "POST",
        &format!("/schedules/{schedule_id}/backfill"),
        Some(body),
    )
}

/// The schedule's rows in `schedule_firings`.
fn firings(server: &TestServer, schedule_id: i64) -> i64 {
    Db::open(&server.db).int(
        &format!("SELECT count(*) FROM schedule_firings WHERE schedule_id = {schedule_id}"),
        &[],
    )
}

#[test]
fn a_window_bounds_firing_and_a_later_end_revives() {
    let server = server_at(at(12, 0, 30));
    let c = server.client();
    endpoint(&c, "a");
    // starts_at in the future, on an instant: the first run is that instant (inclusive).
    let s = schedule(
        &c,
        json!({ "name": "w", "cron_expr": "* * * * *",
                "starts_at": rfc(at(12, 3, 0)), "ends_at": rfc(at(12, 5, 0)) }),
    );
    let sid = id(&s);
    assert_eq!(
        (&s["starts_at"], &s["ends_at"], &s["jitter_sec"]),
        (
            &json!(rfc(at(12, 3, 0))),
            &json!(rfc(at(12, 5, 0))),
            &json!(0)
        )
    );
    assert_eq!(s["next_run_at"], rfc(at(12, 3, 0)));
    // A start between instants: the first instant after it.
    let later = minutely(&c, "w", json!({ "starts_at": rfc(at(12, 7, 30)) }));
    assert_eq!(read(&c, later)["next_run_at"], rfc(at(12, 8, 0)));
    ok(&c, "DELETE", &format!("/schedules/{later}"), None);

    // Minute by minute to 12:07:30: only 12:03, 12:04 and 12:05 fire.
    // Each firing is waited for before the clock moves on, so none is a catch-up.
    for minute in 1..=7 {
        server.advance(TimeDelta::minutes(1));
        if (3..=5).contains(&minute) {
            wait_tasks(&server, sid, usize::try_from(minute - 2).unwrap());
        }
        if (3..5).contains(&minute) {
            wait_next_run(&c, sid, at(12, minute + 1, 0));
        }
    }
    let record = wait_for(Duration::from_secs(5), || {
        let r = read(&c, sid);
        r["next_run_at"].is_null().then_some(r)
    })
    .expect("next_run_at never became null after ends_at");
    assert_eq!(record["status"], "active");
    assert_eq!(record["last_run_at"], rfc(at(12, 5, 0)));
    assert_eq!(
        run_ats(&server, sid),
        vec![ms(at(12, 3, 0)), ms(at(12, 4, 0)), ms(at(12, 5, 0))]
    );

    // Moving the end later revives it from now (12:07:30).
    let path = format!("/schedules/{sid}");
    let patched = ok(
        &c,
        "PATCH",
        &path,
        Some(json!({ "ends_at": rfc(at(12, 9, 0)) })),
    );
    assert_eq!(patched["next_run_at"], rfc(at(12, 8, 0)));
    server.advance(TimeDelta::minutes(1));
    wait_tasks(&server, sid, 4);
    wait_next_run(&c, sid, at(12, 9, 0));
    // Clearing the end: no end at all.
    let patched = ok(&c, "PATCH", &path, Some(json!({ "ends_at": null })));
    assert!(patched["ends_at"].is_null());
    assert_eq!(patched["next_run_at"], rfc(at(12, 9, 0)));

    // Validation names the field.
    let base = json!({ "name": "v", "cron_expr": "* * * * *" });
    let with = |pairs: &[(&str, Value)]| {
        let mut b = base.clone();
        for (k, v) in pairs {
            b[*k] = v.clone();
        }
        b
    };
    expect_field_errors(
        &c,
        "POST",
        "/schedules",
        [
            (
                with(&[
                    ("starts_at", json!(rfc(at(13, 0, 0)))),
                    ("ends_at", json!(rfc(at(12, 0, 0)))),
                ]),
                "ends_at",
            ),
            (with(&[("starts_at", json!("tomorrow"))]), "starts_at"),
            (with(&[("ends_at", json!(true))]), "ends_at"),
            (with(&[("jitter_sec", json!(3601))]), "jitter_sec"),
            (with(&[("jitter_sec", json!(-1))]), "jitter_sec"),
            (with(&[("jitter_sec", json!("5"))]), "jitter_sec"),
        ],
    );
    // An end before the stored start, by PATCH.
    let patch_start = ok(
        &c,
        "PATCH",
        &path,
        Some(json!({ "starts_at": rfc(at(12, 0, 0)) })),
    );
    assert_eq!(patch_start["starts_at"], rfc(at(12, 0, 0)));
    expect_field_errors(
        &c,
        "PATCH",
        &path,
        [(json!({ "ends_at": rfc(at(11, 0, 0)) }), "ends_at")],
    );

    // The preview lists only instants inside the window.
    let preview = ok(
        &c,
        "POST",
        "/cron/preview",
        Some(
            json!({ "cron_expr": "* * * * *", "count": 10, "from": rfc(at(12, 0, 0)),
                     "starts_at": rfc(at(12, 3, 0)), "ends_at": rfc(at(12, 5, 0)) }),
        ),
    );
    assert_eq!(
        preview["next_runs"],
        json!([rfc(at(12, 3, 0)), rfc(at(12, 4, 0)), rfc(at(12, 5, 0))])
    );
}

#[test]
fn catchup_fires_only_inside_the_window() {
    let server = server_at(at(12, 0, 30));
    let c = server.client();
    endpoint(&c, "a");
    let all = minutely(
        &c,
        "w",
        json!({ "catchup": "all", "starts_at": rfc(at(12, 3, 0)), "ends_at": rfc(at(12, 6, 0)) }),
    );
    let latest = minutely(&c, "w", json!({ "ends_at": rfc(at(12, 6, 0)) }));
    // Down from 12:00:30 to 12:10:30: 12:01 … 12:10 missed; the window holds 12:03 … 12:06.
    let server = server.restart_manual(at(12, 10, 30), wide_skew);
    let c = server.client();
    for s in [all, latest] {
        wait_for(Duration::from_secs(5), || {
            read(&c, s)["next_run_at"].is_null().then_some(())
        })
        .expect("next_run_at never became null");
    }
    assert_eq!(
        run_ats(&server, all),
        (3..=6).map(|m| ms(at(12, m, 0))).collect::<Vec<_>>()
    );
    // `latest` fires the latest missed instant inside the window, not 12:10.
    assert_eq!(run_ats(&server, latest), vec![ms(at(12, 6, 0))]);
    assert_eq!(read(&c, all)["status"], "active");
}

#[test]
fn jitter_delays_tasks_and_keeps_one_firing_per_instant() {
    let server = server_at(at(12, 0, 30));
    let c = server.client();
    endpoint(&c, "a");
    endpoint(&c, "b");
    let sid = minutely(&c, "w", json!({ "jitter_sec": 90 }));
    assert_eq!(read(&c, sid)["jitter_sec"], 90);
    // Pinned to the largest delay: each task due exactly 90 s after its instant.
    server.app().jitter.pin(|max_ms| max_ms);
    server.advance(TimeDelta::minutes(1));
    let tasks = wait_tasks(&server, sid, 2);
    assert!(
        tasks.iter().all(|t| t.run_at == ms(at(12, 1, 0)) + 90_000),
        "{:?}",
        tasks.iter().map(|t| t.run_at).collect::<Vec<_>>()
    );
    // The real draw: inside [instant, instant + 90 s], and the firing is still once per
    // instant (one row, one task per endpoint).
    server
        .app()
        .jitter
        .pin(|max_ms| rand::random_range(0..=max_ms));
    for minute in 2..=6 {
        server.advance(TimeDelta::minutes(1));
        wait_tasks(&server, sid, 2 * usize::try_from(minute).unwrap());
        wait_next_run(&c, sid, at(12, minute + 1, 0));
    }
    // Tasks in id order come two per firing (endpoints a and b), 12:01 first; a firing's
    // tasks share one delay.
    let tasks = tasks_of(&server, sid);
    assert_eq!(tasks.len(), 12);
    for (minute, pair) in (1..=6).zip(tasks.chunks(2)) {
        let instant = ms(at(12, minute, 0));
        assert!(
            (instant..=instant + 90_000).contains(&pair[0].run_at),
            "12:{minute:02}: run_at {}",
            pair[0].run_at
        );
        assert_eq!(pair[0].run_at, pair[1].run_at);
    }
    assert_eq!(firings(&server, sid), 6);
    assert_eq!(read(&c, sid)["last_run_at"], rfc(at(12, 6, 0)));
}

#[test]
fn backfill_fires_missing_instants_once() {
    let server = server_at(at(12, 0, 30));
    let c = server.client();
    endpoint(&c, "a");
    let sid = minutely(&c, "w", json!({ "jitter_sec": 600 }));
    // The scheduler fires 12:01 first.
    server.advance(TimeDelta::minutes(1));
    wait_tasks(&server, sid, 1);
    wait_next_run(&c, sid, at(12, 2, 0));
    // 11:55 … 12:01: seven instants, 12:01 already fired; the six others fire due now
    // (12:01:30), without jitter.
    let done = backfill(&c, sid, at(11, 55, 0), at(12, 1, 0));
    assert_eq!(done, json!({ "fired": 6, "already_fired": 1 }));
    let tasks = tasks_of(&server, sid);
    assert_eq!(tasks.len(), 7);
    assert!(
        tasks[1..]
            .iter()
            .all(|t| t.run_at == ms(at(12, 1, 30)) && t.task_type.to_string() == "schedule")
    );
    // Repeating it fires nothing; a wider one only the new instants.
    let again = backfill(&c, sid, at(11, 55, 0), at(12, 1, 0));
    assert_eq!(again, json!({ "fired": 0, "already_fired": 7 }));
    // Instants after now (12:01:30) are the scheduler's: 12:02 … 13:00 are neither fired nor
    // counted.
    let ahead = backfill(&c, sid, at(12, 1, 0), at(13, 0, 0));
    assert_eq!(ahead, json!({ "fired": 0, "already_fired": 1 }));
    // 11:51 … 11:56, of which 11:55 and 11:56 fired.
    let wider = backfill(&c, sid, at(11, 50, 30), at(11, 56, 0));
    assert_eq!(wider, json!({ "fired": 4, "already_fired": 2 }));
    // Neither last_run_at nor next_run_at moved.
    let record = read(&c, sid);
    assert_eq!(
        (&record["last_run_at"], &record["next_run_at"]),
        (&json!(rfc(at(12, 1, 0))), &json!(rfc(at(12, 2, 0))))
    );

    // Bad input is 40001 naming the field.
    let path = format!("/schedules/{sid}/backfill");
    let range =
        |from: DateTime<Utc>, to: DateTime<Utc>| json!({ "from": rfc(from), "to": rfc(to) });
    expect_field_errors(
        &c,
        "POST",
        &path,
        [
            (range(at(12, 0, 0), at(11, 0, 0)), "to"),
            // 1,001 instants up to now.
            (
                range(at(12, 1, 0) - TimeDelta::minutes(1000), at(12, 1, 0)),
                "to",
            ),
            (json!({ "to": rfc(at(12, 0, 0)) }), "from"),
            (
                json!({ "from": "yesterday", "to": rfc(at(12, 0, 0)) }),
                "from",
            ),
            (json!({ "from": rfc(at(11, 0, 0)) }), "to"),
        ],
    );
    err(
        &c,
        "POST",
        "/schedules/999999/backfill",
        Some(range(at(11, 0, 0), at(11, 1, 0))),
        404,
        40401,
    );

    // A paused schedule backfills; exactly 1,000 instants is allowed.
    ok(&c, "POST", &format!("/schedules/{sid}/pause"), None);
    let big = backfill(
        &c,
        sid,
        at(12, 1, 0) - TimeDelta::minutes(999),
        at(12, 1, 0),
    );
    assert_eq!(
        big["fired"].as_i64().unwrap() + big["already_fired"].as_i64().unwrap(),
        1000
    );
    assert_eq!(big["already_fired"], 11);
    assert_eq!(firings(&server, sid), 1000);

    // A window bounds a backfill too; a deleted schedule is 409.
    let windowed = minutely(
        &c,
        "w",
        json!({ "starts_at": rfc(at(11, 0, 0)), "ends_at": rfc(at(11, 2, 0)) }),
    );
    let done = backfill(&c, windowed, at(10, 0, 0), at(12, 0, 0));
    assert_eq!(done, json!({ "fired": 3, "already_fired": 0 }));
    ok(&c, "DELETE", &format!("/schedules/{windowed}"), None);
    err(
        &c,
        "POST",
        &format!("/schedules/{windowed}/backfill"),
        Some(range(at(11, 0, 0), at(11, 1, 0))),
        409,
        40901,
    );
}

/// Two backfills over overlapping ranges and the scheduler, all at once on one node: every
/// instant fires once (one firing row, one task), and the backfills' counts add up.
#[test]
fn racing_backfills_and_the_scheduler_fire_each_instant_once() {
    let server = server_at(at(12, 0, 30));
    let c = server.client();
    endpoint(&c, "a");
    let sid = minutely(&c, "w", json!({ "catchup": "all" }));
    // The clock moves to 12:10:30: the woken scheduler fires 12:01 … 12:10 (catch-up all)
    // while the two backfills run.
    server.advance(TimeDelta::minutes(10));
    let racers: Vec<_> = [
        (at(11, 0, 0), at(12, 10, 0)),
        (at(11, 30, 0), at(12, 30, 0)),
    ]
    .into_iter()
    .map(|(from, to)| {
        let c = server.client();
        std::thread::spawn(move || backfill(&c, sid, from, to))
    })
    .collect();
    let counts: Vec<Value> = racers.into_iter().map(|r| r.join().unwrap()).collect();
    wait_next_run(&c, sid, at(12, 11, 0));
    // 11:00 … 12:10 is 71 instants; each fired once, by whoever came first. The second
    // backfill's instants after now (12:11 … 12:30) are left to the scheduler.
    assert_eq!(firings(&server, sid), 71);
    let tasks = tasks_of(&server, sid);
    assert_eq!(tasks.len(), 71);
    let fired: i64 = counts.iter().map(|c| c["fired"].as_i64().unwrap()).sum();
    let by_scheduler = 71 - fired;
    assert!((0..=10).contains(&by_scheduler), "{counts:?}");
    let total = |c: &Value| c["fired"].as_i64().unwrap() + c["already_fired"].as_i64().unwrap();
    assert_eq!((total(&counts[0]), total(&counts[1])), (71, 41));
}

/// The scheduler's firing records older than `--retention-days` plus a day are deleted by the
/// retention sweep; younger ones stay, and so do a backfill's records of instants before the
/// schedule was created (only a backfill fires those). A backfill refuses the instants between
/// the creation and the retention's edge (it could no longer tell them fired or not) and
/// takes any before the creation, so no instant can fire twice.
#[test]
fn firing_records_past_the_retention_go_and_backfill_stays_inside_it() {
    let server = TestServer::start_manual(at(12, 0, 30), |config| {
        wide_skew(config);
        config.retention_days = 1;
        config.max_idle = Duration::from_millis(100);
    });
    let c = server.client();
    endpoint(&c, "a");
    let sid = minutely(&c, "w", json!({}));
    let day = TimeDelta::days(1);
    // 12:01 fires, and a backfill fires 11:55 … 12:00.
    server.advance(TimeDelta::minutes(1));
    wait_tasks(&server, sid, 1);
    let done = backfill(&c, sid, at(11, 55, 0), at(12, 1, 0));
    assert_eq!(done, json!({ "fired": 6, "already_fired": 1 }));
    // 14:00 fires (caught up); then, a minute short of two days later, 13:59 of day 3.
    server.advance(TimeDelta::minutes(119));
    wait_next_run(&c, sid, at(14, 1, 0));
    server.advance(day * 2 - TimeDelta::minutes(1));
    wait_next_run(&c, sid, at(14, 0, 0) + day * 2);
    // Now is 13:59:30 on day 3: the scheduler's records before 13:59:30 on day 1 (retention
    // 1 day, plus a day) go; 14:00 of day 1 stays, and so do the backfilled 11:55 … 12:00,
    // instants before the schedule was created (12:00:30).
    let mut db = Db::open(&server.db);
    let kept = wait_for(Duration::from_secs(10), || {
        let rows = db.rows(
            &format!(
                "SELECT scheduled_at FROM schedule_firings WHERE schedule_id = {sid} ORDER BY scheduled_at"
            ),
            &[],
        );
        let kept: Vec<i64> = rows.iter().map(|r| r[0].int()).collect();
        (kept.len() == 8).then_some(kept)
    })
    .unwrap_or_else(|| panic!("the old firing records are deleted: {}", firings(&server, sid)));
    let backfilled = (55..=59)
        .map(|m| ms(at(11, m, 0)))
        .chain([ms(at(12, 0, 0))]);
    let scheduler = [ms(at(14, 0, 0)), ms(at(13, 59, 0) + day * 2)];
    assert_eq!(kept, backfilled.chain(scheduler).collect::<Vec<_>>());

    // A backfill reaching before the retention (13:59:30 yesterday) is refused naming from;
    // one inside it fires the instants that have not fired.
    expect_field_errors(
        &c,
        "POST",
        &format!("/schedules/{sid}/backfill"),
        [(
            json!({ "from": rfc(at(13, 59, 0) + day), "to": rfc(at(14, 3, 0) + day) }),
            "from",
        )],
    );
    let inside = backfill(&c, sid, at(14, 0, 0) + day, at(14, 3, 0) + day);
    assert_eq!(inside, json!({ "fired": 4, "already_fired": 0 }));
    // Before the creation, any past is open, and a repeat fires nothing twice.
    let before = backfill(&c, sid, at(11, 50, 0), at(11, 59, 0));
    assert_eq!(before, json!({ "fired": 5, "already_fired": 5 }));
    let repeat = backfill(&c, sid, at(11, 50, 0), at(11, 59, 0));
    assert_eq!(repeat, json!({ "fired": 0, "already_fired": 10 }));
}
