//! Signed publishes grouped into one statement on PostgreSQL (docs/dev/storage.md, "Publishes
//! grouped into one statement on PostgreSQL"), against the shared private server
//! (tests/it/pg.rs): many publishes at once, some sharing a replay pair and some whose app's
//! target generation moved, each answered as alone; a group whose statement fails still
//! commits its healthy members.

use std::collections::BTreeMap;
use std::sync::{Arc, Barrier};
use webhookd::store::events::{Event, NewEvent};
use webhookd::store::postgres::{GroupCounts, PgStore};
use webhookd::store::replay::FirstUse;
use webhookd::store::tasks::{NewTask, TaskKind};
use webhookd::store::{Store, StoreError};
use webhookd::trace::TaskTraces;

const NOW: i64 = 1_700_000_000_000;
/// Publishing threads: many more than the statements that run at once, so that groups form.
const THREADS: usize = 24;
/// Rounds at most; each test stops as soon as what it waits for has happened.
const MAX_ROUNDS: usize = 200;
/// The app whose target generation moved (stored 7, publishes hold 0).
const MOVED: &str = "moved";

/// One publish as `api::events::publish` makes it: the pair handed over, the event and its
/// two tasks written at target generation 0, then what became of the pair.
struct Published {
    written: Option<Event>,
    first: Option<i64>,
}

fn publish(
    store: &dyn Store,
    app_id: &str,
    signature: &str,
    payload: &str,
) -> Result<Published, StoreError> {
    let mut traces = TaskTraces::new(None, false);
    let event = NewEvent {
        app_id,
        event_name: "grouped",
        event_key: None,
        payload,
        now_ms: NOW,
    };
    let mut tasks: Vec<NewTask<'_>> = [1, 2]
        .into_iter()
        .map(|endpoint_id| NewTask {
            app_id,
            schedule_id: None,
            event_id: None,
            endpoint_id,
            task_type: TaskKind::Event,
            payload,
            run_at: NOW,
            max_attempts: 3,
            now_ms: NOW,
            trace: traces.for_task(),
        })
        .collect();
    store
        .write_statement(|tx| {
            let pair = FirstUse {
                key_id: "key".into(),
                signature: signature.into(),
                sent_ms: NOW,
                expires_ms: NOW + 300_000,
                now_ms: NOW,
                generation: 0,
            };
            assert!(
                tx.carry_first_use(pair),
                "a statement outside a transaction carries the pair"
            );
            let written = tx.insert_event_with_tasks_at(&event, 0, &mut tasks);
            let first = tx.carried_first_use();
            Ok(Published {
                written: written?,
                first: first?,
            })
        })
        .expect("PostgreSQL writes statements outside transactions")
}

fn store() -> Option<(Arc<PgStore>, postgres::Client)> {
    let server = crate::pg::shared()?;
    let url = server.fresh_database();
    let store = Arc::new(PgStore::open(&url, THREADS as u32 + 4).unwrap());
    let mut sql = server.client(&url);
    sql.execute(
        "INSERT INTO target_generation (app_id, generation) VALUES ($1, 7)",
        &[&MOVED],
    )
    .unwrap();
    Some((store, sql))
}

/// Runs rounds of `THREADS` publishes started together (thread `i` publishes what
/// `plan(round, i)` says) until `enough` holds of the store's group counts; every outcome.
fn rounds(
    store: &Arc<PgStore>,
    plan: fn(usize, usize) -> (&'static str, String, &'static str),
    enough: impl Fn(GroupCounts) -> bool,
) -> Vec<((usize, usize), Result<Published, StoreError>)> {
    let mut all = Vec::new();
    for round in 0..MAX_ROUNDS {
        let start = Arc::new(Barrier::new(THREADS));
        let threads: Vec<_> = (0..THREADS)
            .map(|i| {
                let (store, start) = (store.clone(), start.clone());
                std::thread::spawn(move || {
                    let (app, signature, payload) = plan(round, i);
                    start.wait();
                    ((round, i), publish(&*store, app, &signature, payload))
                })
            })
            .collect();
        all.extend(threads.into_iter().map(|t| t.join().unwrap()));
        if enough(store.publish_groups()) {
            return all;
        }
    }
    panic!(
        "not grouped as expected in {MAX_ROUNDS} rounds: {:?}",
        store.publish_groups()
    );
}

/// Per round: threads 0 and 1 send one pair (one is written, the other a replay), thread 2
/// publishes for the app whose target generation moved (nothing written, its pair recorded
/// after), every other thread its own pair.
fn mixed(round: usize, i: usize) -> (&'static str, String, &'static str) {
    match i {
        0 | 1 => ("app", format!("r{round}-shared"), "{}"),
        2 => (MOVED, format!("r{round}-moved"), "{}"),
        _ => ("app", format!("r{round}-{i}"), "{\"n\":1}"),
    }
}

#[test]
fn publishes_in_flight_at_once_are_grouped_and_each_answered_as_alone() {
    let Some((store, mut sql)) = store() else {
        return;
    };
    let all = rounds(&store, mixed, |c| c.groups >= 3);
    let counts = store.publish_groups();
    assert!(counts.members > counts.groups, "{counts:?}");
    assert_eq!(counts.failed, 0);

    let mut written = BTreeMap::new();
    let mut shared = BTreeMap::<usize, Vec<(bool, Option<i64>)>>::new();
    for ((round, i), outcome) in all {
        let p = outcome.unwrap();
        match i {
            0 | 1 => shared
                .entry(round)
                .or_default()
                .push((p.written.is_some(), p.first)),
            2 => {
                assert!(p.written.is_none(), "round {round}: the generation moved");
                assert_eq!(p.first, Some(0), "its pair is recorded on its own after");
            }
            _ => {
                assert_eq!(p.first, Some(0), "round {round}, thread {i}: a first use");
                let event = p.written.expect("written");
                assert_eq!((event.task_count, event.app_id.as_str()), (2, "app"));
                assert_eq!(event.payload, serde_json::json!({ "n": 1 }));
                assert!(
                    written.insert(event.id, (round, i)).is_none(),
                    "one id each"
                );
            }
        }
    }
    for (round, outcomes) in &shared {
        let mut outcomes = outcomes.clone();
        outcomes.sort();
        assert_eq!(
            outcomes,
            vec![(false, None), (true, Some(0))],
            "round {round}: one pair, written once, refused once"
        );
    }
    let rounds = shared.len() as i64;
    let count =
        |sql: &mut postgres::Client, q: &str| -> i64 { sql.query_one(q, &[]).unwrap().get(0) };
    assert_eq!(
        count(&mut sql, "SELECT count(*) FROM events"),
        rounds * (THREADS as i64 - 2)
    );
    assert_eq!(
        count(
            &mut sql,
            "SELECT count(*) FROM events WHERE app_id = 'moved'"
        ),
        0
    );
    assert_eq!(
        count(&mut sql, "SELECT count(*) FROM replay_guard"),
        rounds * (THREADS as i64 - 1),
        "every pair recorded once, the shared one once"
    );
    // Every event has its two tasks, to endpoints 1 and 2, in order.
    let tasks = sql
        .query(
            "SELECT e.id, array_agg(t.endpoint_id ORDER BY t.id), count(*) FILTER (WHERE t.payload = e.payload)
               FROM events e JOIN tasks t ON t.event_id = e.id GROUP BY e.id",
            &[],
        )
        .unwrap();
    assert_eq!(tasks.len() as i64, rounds * (THREADS as i64 - 2));
    for row in tasks {
        let (id, endpoints, same): (i64, Vec<i64>, i64) = (row.get(0), row.get(1), row.get(2));
        assert_eq!((endpoints, same), (vec![1, 2], 2), "event {id}");
    }
    assert_eq!(
        count(
            &mut sql,
            "SELECT count(*) FROM tasks WHERE event_id IS NULL"
        ),
        0
    );
}

/// Thread 3 sends a payload PostgreSQL refuses (a NUL character in text): the group it joins
/// fails as a whole, and every other member is then written alone.
fn one_broken(round: usize, i: usize) -> (&'static str, String, &'static str) {
    match i {
        3 => ("app", format!("r{round}-broken"), "{\"nul\":\"\0\"}"),
        _ => ("app", format!("r{round}-{i}"), "{}"),
    }
}

#[test]
fn a_group_whose_statement_fails_still_commits_its_healthy_members() {
    let Some((store, mut sql)) = store() else {
        return;
    };
    let all = rounds(&store, one_broken, |c| c.failed >= 1);
    let mut healthy = 0;
    for ((round, i), outcome) in all {
        match (i, outcome) {
            (3, Err(_)) => {}
            (3, Ok(_)) => panic!("round {round}: a NUL character was written"),
            (_, Ok(p)) => {
                assert_eq!(p.first, Some(0));
                assert!(p.written.is_some(), "round {round}, thread {i}");
                healthy += 1;
            }
            (_, Err(e)) => panic!("round {round}, thread {i}: {e}"),
        }
    }
    let events: i64 = sql
        .query_one("SELECT count(*) FROM events", &[])
        .unwrap()
        .get(0);
    assert_eq!(events, healthy);
    let broken: i64 = sql
        .query_one(
            "SELECT count(*) FROM replay_guard WHERE signature LIKE '%broken'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        broken, 0,
        "the broken publish wrote nothing, not even its pair"
    );
}
