//! The PostgreSQL task and schedule functions against a private server (tests/it/pg.rs), with
//! several nodes on one database: concurrent claims take disjoint tasks, an in-order endpoint
//! never runs two tasks at once, expired leases are rescued and the late node records nothing,
//! a node hands back only its own tasks, one firing per (schedule, instant); plus round trips.

use crate::pg::PgServer;
use postgres::{Client, GenericClient};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use webhookd::store::Page;
use webhookd::store::postgres as pgstore;
use webhookd::store::postgres::PgTx;
use webhookd::store::schedules::{Catchup, Overlap, Schedule, ScheduleStatus};
use webhookd::store::tasks::{AfterAttempt, IfBusy, NewTask, RetryFilter, TaskFilter, TaskKind};
use webhookd::store::tasks::{StatusFilter, TaskStatus};
use webhookd::store::{ScheduleQueries, TaskQueries, Word};

const NOW: i64 = 1_700_000_000_000;

/// A private server with database `name`, schema applied by the store; `None` (a loud skip)
/// when PostgreSQL is not installed.
fn database(name: &str) -> Option<(PgServer, String)> {
    let server = PgServer::start()?;
    let url = server.create_database(name);
    drop(pgstore::open(&url, 1).unwrap());
    Some((server, url))
}

fn endpoint(c: &mut Client, timeout_ms: i64, max_in_flight: Option<i64>) -> i64 {
    c.query_one(
        "INSERT INTO endpoints (app_id, name, url, method, timeout_ms, status, created_at, updated_at,
                                max_in_flight)
         VALUES ('app', 'ep', 'http://127.0.0.1:9/', 'POST', $1, 'enabled', 0, 0, $2) RETURNING id",
        &[&timeout_ms, &max_in_flight],
    )
    .unwrap()
    .get(0)
}

fn task(c: &mut impl GenericClient, endpoint_id: i64, run_at: i64) -> i64 {
    PgTx::new(c, "test")
        .insert_task(&NewTask {
            app_id: "app",
            schedule_id: None,
            event_id: None,
            endpoint_id,
            task_type: TaskKind::Manual,
            payload: r#"{"n":1}"#,
            run_at,
            max_attempts: 3,
            now_ms: run_at,
            trace: webhookd::trace::TaskTraces::new(None, false).for_task(),
        })
        .unwrap()
}

/// (status, claimed_by, lease_until, next_attempt_at) of a task.
fn state(c: &mut Client, id: i64) -> (String, Option<String>, Option<i64>, Option<i64>) {
    let r = c
        .query_one(
            "SELECT status, claimed_by, lease_until, next_attempt_at FROM tasks WHERE id = $1",
            &[&id],
        )
        .unwrap();
    (r.get(0), r.get(1), r.get(2), r.get(3))
}

#[test]
fn concurrent_claims_take_disjoint_tasks_covering_all() {
    let Some((server, url)) = database("claims") else {
        return;
    };
    let mut c = server.client(&url);
    let endpoints: Vec<i64> = (0..4).map(|_| endpoint(&mut c, 5_000, None)).collect();
    let mut all = BTreeSet::new();
    for i in 0..200 {
        all.insert(task(&mut c, endpoints[i % 4], NOW - 1_000 + i as i64));
    }
    let start = Arc::new(Barrier::new(2));
    let claimers: Vec<_> = ["node-a", "node-b"]
        .into_iter()
        .map(|node| {
            let (mut c, start, endpoints) = (server.client(&url), start.clone(), endpoints.clone());
            std::thread::spawn(move || {
                start.wait();
                let mut mine = Vec::new();
                loop {
                    let mut tx = c.transaction().unwrap();
                    let before = mine.len();
                    for &e in &endpoints {
                        mine.extend(
                            PgTx::new(&mut tx, node)
                                .claim_endpoint_tasks(e, NOW, 3)
                                .unwrap(),
                        );
                    }
                    tx.commit().unwrap();
                    if mine.len() == before {
                        return (node, mine);
                    }
                }
            })
        })
        .collect();
    let mut seen = BTreeSet::new();
    let mut per_node = BTreeMap::new();
    for claimer in claimers {
        let (node, mine) = claimer.join().unwrap();
        for claimed in &mine {
            assert!(seen.insert(claimed.id), "task {} claimed twice", claimed.id);
            assert_eq!(claimed.attempt, 1);
            assert_eq!(state(&mut c, claimed.id).1.as_deref(), Some(node));
        }
        per_node.insert(node, mine.len());
    }
    // Which node takes how many is up to the scheduler: on a loaded machine one thread may
    // claim all 200 before the other first runs, so only the sum is asserted.
    assert_eq!(seen, all, "every due task claimed exactly once");
    assert_eq!(per_node.values().sum::<usize>(), 200, "{per_node:?}");
    let running: i64 = c
        .query_one(
            "SELECT count(*) FROM tasks WHERE status = 'running' AND lease_until = $1",
            &[&(NOW + 5_000 + pgstore::tasks::LEASE_MARGIN_MS)],
        )
        .unwrap()
        .get(0);
    assert_eq!(running, 200);

    // A claim in a transaction not yet committed holds its rows: another node takes the next
    // ones at once instead of waiting for it (a blocked claim would hit the statement timeout).
    let e = endpoints[0];
    let fresh: Vec<i64> = (0..3).map(|i| task(&mut c, e, NOW + i)).collect();
    let mut a = server.client(&url);
    let mut ta = a.transaction().unwrap();
    let first = PgTx::new(&mut ta, "node-a")
        .claim_endpoint_tasks(e, NOW + 10, 1)
        .unwrap();
    let mut b = server.client(&url);
    b.batch_execute("SET statement_timeout = '3s'").unwrap();
    let rest = PgTx::new(&mut b, "node-b")
        .claim_endpoint_tasks(e, NOW + 10, 10)
        .unwrap();
    ta.commit().unwrap();
    assert_eq!(first[0].id, fresh[0]);
    assert_eq!(rest.iter().map(|t| t.id).collect::<Vec<_>>(), &fresh[1..]);
}

#[test]
fn an_expired_lease_is_rescued_and_the_late_node_records_nothing() {
    let Some((server, url)) = database("lease") else {
        return;
    };
    let mut c = server.client(&url);
    let e = endpoint(&mut c, 1_000, None);
    let id = task(&mut c, e, NOW);
    let a = PgTx::new(&mut c, "node-a")
        .claim_endpoint_tasks(e, NOW, 10)
        .unwrap();
    assert_eq!(a.len(), 1);
    let lease_end = NOW + 1_000 + pgstore::tasks::LEASE_MARGIN_MS;
    assert_eq!(
        state(&mut c, id),
        (
            "running".into(),
            Some("node-a".into()),
            Some(lease_end),
            Some(NOW)
        )
    );
    // A live lease is not rescued, nor taken by another node.
    assert_eq!(
        PgTx::new(&mut c, "test")
            .rescue_expired_leases(lease_end - 1)
            .unwrap(),
        0
    );
    assert!(
        PgTx::new(&mut c, "node-b")
            .claim_endpoint_tasks(e, lease_end - 1, 10)
            .unwrap()
            .is_empty()
    );
    assert_eq!(state(&mut c, id).0, "running");
    // Renewing moves the lease on, for the holder only.
    assert_eq!(
        PgTx::new(&mut c, "node-b")
            .renew_leases(&[id], NOW + 10)
            .unwrap(),
        Vec::<i64>::new()
    );
    assert_eq!(
        PgTx::new(&mut c, "node-a")
            .renew_leases(&[id], NOW + 10)
            .unwrap(),
        [id]
    );
    let lease_end = lease_end + 10;
    assert_eq!(state(&mut c, id).2, Some(lease_end));

    // Node A stalls past its lease: the task goes back to pending, due at once.
    assert_eq!(
        PgTx::new(&mut c, "test")
            .rescue_expired_leases(lease_end)
            .unwrap(),
        1
    );
    assert_eq!(state(&mut c, id), ("pending".into(), None, None, Some(NOW)));
    let b = PgTx::new(&mut c, "node-b")
        .claim_endpoint_tasks(e, lease_end, 10)
        .unwrap();
    assert_eq!((b[0].id, b[0].attempt), (id, 1));
    assert_eq!(state(&mut c, id).1.as_deref(), Some("node-b"));

    // A's late result is refused; B's counts.
    let record = |c: &mut Client, node: &str| {
        PgTx::new(c, node)
            .finish_attempt(id, 1, AfterAttempt::Success, Some(200), None, lease_end + 5)
            .unwrap()
    };
    assert!(!record(&mut c, "node-a"));
    assert_eq!(state(&mut c, id).0, "running");
    assert!(record(&mut c, "node-b"));
    assert_eq!(state(&mut c, id), ("success".into(), None, None, None));
    let t = PgTx::new(&mut c, "test")
        .get_task("app", id)
        .unwrap()
        .unwrap();
    assert_eq!(
        (t.attempts, t.last_status_code, t.finished_at),
        (1, Some(200), Some(lease_end + 5))
    );
    // Finished twice: refused.
    assert!(!record(&mut c, "node-b"));
}

/// A node's claim starts at its floor for the endpoint (a second behind the latest due time
/// it claimed): a task due further back waits for the next full search, which a hand-back by
/// this node makes at once (docs/dev/storage.md, "The claim's floor").
#[test]
fn a_claim_starts_at_its_floor_and_a_hand_back_searches_from_the_start_again() {
    let Some((server, url)) = database("floors") else {
        return;
    };
    let mut c = server.client(&url);
    let e = endpoint(&mut c, 1_000, None);
    let first: Vec<i64> = (0..3).map(|i| task(&mut c, e, NOW + i * 10_000)).collect();
    // No full search again within the test: only the hand-back may bring one.
    let floors = pgstore::tasks::ClaimFloors::new(std::time::Duration::from_secs(3600));
    let claim = |c: &mut Client, node: &str, at: i64, limit: usize| -> Vec<i64> {
        PgTx::new(c, node)
            .with_floors(&floors)
            .claim_endpoint_tasks(e, at, limit)
            .unwrap()
            .iter()
            .map(|t| t.id)
            .collect()
    };
    let at = NOW + 60_000;
    assert_eq!(
        claim(&mut c, "node-a", at, 2),
        first[..2],
        "a full search first"
    );
    // Another node hands back a task below A's floor (NOW + 10 s - 1 s) and one is made there.
    let late = task(&mut c, e, NOW + 5_000);
    assert_eq!(
        claim(&mut c, "node-a", at, 10),
        [first[2]],
        "from the floor: the task at NOW + 5 s lies below it"
    );
    assert_eq!(state(&mut c, late).0, "pending");
    // A task due within the lag of the floor (now NOW + 20 s - 1 s) is found.
    let close = task(&mut c, e, NOW + 19_500);
    assert_eq!(claim(&mut c, "node-a", at, 10), [close]);
    // This node's hand-back resets the floors: the next claim takes the late task.
    assert_eq!(
        PgTx::new(&mut c, "node-a")
            .with_floors(&floors)
            .requeue_running_tasks(at)
            .unwrap(),
        4
    );
    assert_eq!(
        claim(&mut c, "node-a", at, 10),
        [first[0], late, first[1], close, first[2]],
        "earliest due first again, from the first entry"
    );
}

/// The dispatcher's walk looks at an endpoint with a fresh floor from that floor, at the others
/// from their first entry, and goes on past a floored endpoint with nothing above its floor.
#[test]
fn the_walk_looks_at_endpoints_with_a_floor_from_their_floor() {
    let Some((server, url)) = database("walk_floors") else {
        return;
    };
    let mut c = server.client(&url);
    let e: Vec<i64> = (0..4).map(|_| endpoint(&mut c, 1_000, None)).collect();
    let floors = pgstore::tasks::ClaimFloors::new(std::time::Duration::from_secs(3600));
    // e0: no floor. e1: a floor at NOW + 19 s, one task below it, one above. e2: a floor,
    // nothing above it. e3: no floor, after e2.
    task(&mut c, e[0], NOW + 1_000);
    for (endpoint, due) in [(e[1], NOW + 20_000), (e[2], NOW + 20_000)] {
        task(&mut c, endpoint, due);
        let claimed = PgTx::new(&mut c, "node-a")
            .with_floors(&floors)
            .claim_endpoint_tasks(endpoint, NOW + 60_000, 1)
            .unwrap();
        assert_eq!(claimed.len(), 1);
    }
    task(&mut c, e[1], NOW + 5_000);
    task(&mut c, e[1], NOW + 30_000);
    task(&mut c, e[2], NOW + 2_000);
    task(&mut c, e[3], NOW + 3_000);
    let walk = |c: &mut Client, floors: Option<&pgstore::tasks::ClaimFloors>| -> Vec<(i64, i64)> {
        let tx = PgTx::new(c, "node-a");
        let mut tx = match floors {
            Some(f) => tx.with_floors(f),
            None => tx,
        };
        tx.endpoints_with_pending(0, i64::MAX, 10)
            .unwrap()
            .iter()
            .map(|p| (p.endpoint_id, p.earliest_due))
            .collect()
    };
    assert_eq!(
        walk(&mut c, Some(&floors)),
        [
            (e[0], NOW + 1_000),
            (e[1], NOW + 30_000),
            (e[3], NOW + 3_000)
        ]
    );
    assert_eq!(
        walk(&mut c, None),
        [
            (e[0], NOW + 1_000),
            (e[1], NOW + 5_000),
            (e[2], NOW + 2_000),
            (e[3], NOW + 3_000)
        ],
        "without floors, every pending task counts"
    );
}

#[test]
fn requeue_running_hands_back_only_this_nodes_tasks_and_expired_leases() {
    let Some((server, url)) = database("requeue") else {
        return;
    };
    let mut c = server.client(&url);
    let (e1, e2, e3) = (
        endpoint(&mut c, 1_000, None),
        endpoint(&mut c, 1_000, None),
        endpoint(&mut c, 1_000, None),
    );
    let (t1, t2, t3) = (
        task(&mut c, e1, NOW),
        task(&mut c, e2, NOW),
        task(&mut c, e3, NOW),
    );
    PgTx::new(&mut c, "node-a")
        .claim_endpoint_tasks(e1, NOW, 1)
        .unwrap();
    PgTx::new(&mut c, "node-b")
        .claim_endpoint_tasks(e2, NOW + 20_000, 1)
        .unwrap();
    PgTx::new(&mut c, "node-c")
        .claim_endpoint_tasks(e3, NOW, 1)
        .unwrap();
    // At NOW + 40 s: C's lease (NOW + 31 s) ran out, B's (NOW + 51 s) holds.
    let at = NOW + 40_000;
    assert_eq!(
        PgTx::new(&mut c, "node-a")
            .requeue_running_tasks(at)
            .unwrap(),
        2
    );
    assert_eq!(state(&mut c, t1), ("pending".into(), None, None, Some(NOW)));
    assert_eq!(state(&mut c, t3), ("pending".into(), None, None, Some(NOW)));
    assert_eq!(state(&mut c, t2).0, "running");
    assert_eq!(state(&mut c, t2).1.as_deref(), Some("node-b"));
    // A running row no PostgreSQL claim wrote (no lease, e.g. copied from SQLite) is nobody's.
    c.execute("UPDATE tasks SET status = 'running' WHERE id = $1", &[&t1])
        .unwrap();
    assert_eq!(
        PgTx::new(&mut c, "test").rescue_expired_leases(at).unwrap(),
        1
    );
    assert_eq!(state(&mut c, t1).0, "pending");
    assert_eq!(state(&mut c, t2).0, "running");
}

#[test]
fn an_in_order_endpoint_never_runs_two_tasks_across_nodes() {
    let Some((server, url)) = database("in_order") else {
        return;
    };
    let mut c = server.client(&url);
    let e = endpoint(&mut c, 1_000, Some(1));

    // Deterministic: the head runs, so nothing else starts; a head handed back for a retry
    // goes first again, even to a node that read an older head.
    let (x, y) = (task(&mut c, e, NOW - 2), task(&mut c, e, NOW - 1));
    assert_eq!(
        PgTx::new(&mut c, "test").in_order_head(e).unwrap(),
        Some((x, NOW - 2))
    );
    assert_eq!(
        PgTx::new(&mut c, "node-a")
            .claim_task(x, NOW)
            .unwrap()
            .unwrap()
            .id,
        x
    );
    assert_eq!(
        PgTx::new(&mut c, "test").in_order_head(e).unwrap(),
        Some((y, NOW - 1))
    );
    assert_eq!(
        PgTx::new(&mut c, "node-b").claim_task(y, NOW).unwrap(),
        None
    );
    assert!(
        PgTx::new(&mut c, "node-a")
            .finish_attempt(x, 1, AfterAttempt::RetryAt(NOW), Some(500), None, NOW)
            .unwrap()
    );
    assert_eq!(
        PgTx::new(&mut c, "node-b").claim_task(y, NOW).unwrap(),
        None
    );
    let again = PgTx::new(&mut c, "node-b")
        .claim_task(x, NOW)
        .unwrap()
        .unwrap();
    assert_eq!((again.id, again.attempt), (x, 2));
    assert!(finish(&mut c, "node-b", x, 2, AfterAttempt::Success));
    // Not claimed yet: nothing to record.
    assert!(
        !PgTx::new(&mut c, "node-a")
            .finish_attempt(y, 1, AfterAttempt::Success, None, None, NOW)
            .unwrap()
    );
    assert_eq!(
        PgTx::new(&mut c, "node-a")
            .claim_task(y, NOW)
            .unwrap()
            .unwrap()
            .id,
        y
    );
    assert!(finish(&mut c, "node-a", y, 1, AfterAttempt::Success));

    // A task made pending again (retried, rescued) while another node's claim of a later task
    // is not committed yet: the endpoint lock makes the second claimer wait and then see it.
    let (p, q) = (task(&mut c, e, NOW - 20), task(&mut c, e, NOW - 19));
    PgTx::new(&mut c, "node-a")
        .claim_task(p, NOW)
        .unwrap()
        .unwrap();
    assert!(
        PgTx::new(&mut c, "node-a")
            .finish_attempt(p, 1, AfterAttempt::Failed, Some(500), None, NOW)
            .unwrap()
    );
    let mut a = server.client(&url);
    let mut ta = a.transaction().unwrap();
    assert_eq!(
        PgTx::new(&mut ta, "node-a")
            .claim_task(q, NOW)
            .unwrap()
            .unwrap()
            .id,
        q
    );
    assert_eq!(
        PgTx::new(&mut c, "test")
            .retry_tasks("app", &[p], NOW)
            .unwrap(),
        [p]
    );
    let mut b = server.client(&url);
    let waiting = std::thread::spawn(move || {
        let claimed = PgTx::new(&mut b, "node-b").claim_task(p, NOW).unwrap();
        (b, claimed)
    });
    std::thread::sleep(std::time::Duration::from_millis(300));
    ta.commit().unwrap();
    let (mut b, claimed) = waiting.join().unwrap();
    assert_eq!(
        claimed, None,
        "claimed while the endpoint's task {q} was running"
    );
    assert!(finish(&mut a, "node-a", q, 1, AfterAttempt::Success));
    assert_eq!(
        PgTx::new(&mut b, "node-b")
            .claim_task(p, NOW)
            .unwrap()
            .unwrap()
            .id,
        p
    );
    assert!(finish(&mut b, "node-b", p, 1, AfterAttempt::Success));

    // Two nodes racing on 40 tasks, every fifth failing once: one at a time, in order.
    let ids: Vec<i64> = (0..40).map(|i| task(&mut c, e, NOW + i)).collect();
    let running = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let delivered = Arc::new(Mutex::new(Vec::new()));
    let start = Arc::new(Barrier::new(2));
    let nodes: Vec<_> = ["node-a", "node-b"]
        .into_iter()
        .map(|node| {
            let mut c = server.client(&url);
            let (running, most, delivered, start) = (
                running.clone(),
                most.clone(),
                delivered.clone(),
                start.clone(),
            );
            let failing: BTreeSet<i64> = ids.iter().copied().step_by(5).collect();
            let last = *ids.last().unwrap();
            std::thread::spawn(move || {
                start.wait();
                let at = NOW + 1_000;
                let deadline = std::time::Instant::now()
                    + crate::support::patient(std::time::Duration::from_secs(120));
                loop {
                    assert!(
                        std::time::Instant::now() < deadline,
                        "stuck: {:?}",
                        delivered.lock().unwrap()
                    );
                    let mut tx = c.transaction().unwrap();
                    let claimed = match PgTx::new(&mut tx, "test").in_order_head(e).unwrap() {
                        Some((id, _)) => PgTx::new(&mut tx, node).claim_task(id, at).unwrap(),
                        None => None,
                    };
                    tx.commit().unwrap();
                    let Some(t) = claimed else {
                        let done = delivered.lock().unwrap().last() == Some(&last);
                        if done {
                            return;
                        }
                        std::thread::yield_now();
                        continue;
                    };
                    let now_running = running.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now_running, Ordering::SeqCst);
                    std::thread::sleep(std::time::Duration::from_millis(1));
                    let after = if failing.contains(&t.id) && t.attempt == 1 {
                        AfterAttempt::RetryAt(at)
                    } else {
                        delivered.lock().unwrap().push(t.id);
                        AfterAttempt::Success
                    };
                    running.fetch_sub(1, Ordering::SeqCst);
                    assert!(
                        PgTx::new(&mut c, node)
                            .finish_attempt(t.id, t.attempt, after, Some(200), None, at)
                            .unwrap()
                    );
                }
            })
        })
        .collect();
    for node in nodes {
        node.join().unwrap();
    }
    assert_eq!(
        most.load(Ordering::SeqCst),
        1,
        "two tasks of an in-order endpoint ran at once"
    );
    assert_eq!(
        *delivered.lock().unwrap(),
        ids,
        "delivered out of order or twice"
    );
}

/// Node `node` records a 200 for attempt `attempt` of task `id` at `NOW`.
fn finish(
    c: &mut impl GenericClient,
    node: &str,
    id: i64,
    attempt: i64,
    after: AfterAttempt,
) -> bool {
    PgTx::new(c, node)
        .finish_attempt(id, attempt, after, Some(200), None, NOW)
        .unwrap()
}

fn schedule(next_run_at: i64, endpoint_ids: Vec<i64>) -> Schedule {
    Schedule {
        id: 0,
        app_id: "app".into(),
        name: "nightly".into(),
        cron_expr: "0 0 * * *".into(),
        timezone: "UTC".into(),
        payload: serde_json::from_str(r#"{"k":"v"}"#).unwrap(),
        status: ScheduleStatus::Active,
        next_run_at: Some(next_run_at),
        last_run_at: None,
        created_at: NOW,
        updated_at: NOW,
        endpoint_ids,
        paused_reason: None,
        catchup: Catchup::Latest,
        overlap: Overlap::Skip,
        skipped_runs: 0,
        starts_at: None,
        ends_at: None,
        jitter_sec: 0,
        endpoint_names: BTreeMap::new(),
        next_run_at_local: None,
    }
}

#[test]
fn two_nodes_fire_one_schedule_instant_once_and_split_due_batches() {
    let Some((server, url)) = database("firings") else {
        return;
    };
    let mut c = server.client(&url);
    let s1 = PgTx::new(&mut c, "test")
        .insert_schedule(&schedule(NOW - 2, vec![]))
        .unwrap();
    let s2 = PgTx::new(&mut c, "test")
        .insert_schedule(&schedule(NOW - 1, vec![]))
        .unwrap();

    // Two schedulers' ticks split the due batch instead of waiting on each other.
    let (mut a, mut b) = (server.client(&url), server.client(&url));
    let mut ta = a.transaction().unwrap();
    let mut tb = b.transaction().unwrap();
    let due_a = PgTx::new(&mut ta, "test").due_schedules(NOW, 1).unwrap();
    let due_b = PgTx::new(&mut tb, "test").due_schedules(NOW, 10).unwrap();
    assert_eq!((due_a[0].id, due_b.len(), due_b[0].id), (s1.id, 1, s2.id));
    assert_eq!(due_a[0].payload, r#"{"k":"v"}"#);
    drop((ta, tb));

    // Both fire the same instant at once: one firing row, one winner.
    let start = Arc::new(Barrier::new(2));
    let firers: Vec<_> = (0..2)
        .map(|_| {
            let (mut c, start) = (server.client(&url), start.clone());
            std::thread::spawn(move || {
                let mut tx = c.transaction().unwrap();
                start.wait();
                let new = PgTx::new(&mut tx, "test")
                    .record_firing(s1.id, NOW - 2)
                    .unwrap();
                std::thread::sleep(std::time::Duration::from_millis(50));
                tx.commit().unwrap();
                new
            })
        })
        .collect();
    let wins: Vec<bool> = firers.into_iter().map(|f| f.join().unwrap()).collect();
    assert_eq!(wins.iter().filter(|&&w| w).count(), 1, "{wins:?}");
    let rows: i64 = c
        .query_one("SELECT count(*) FROM schedule_firings", &[])
        .unwrap()
        .get(0);
    assert_eq!(rows, 1);
    assert!(
        !PgTx::new(&mut c, "test")
            .record_firing(s1.id, NOW - 2)
            .unwrap()
    );
    assert!(
        PgTx::new(&mut c, "test")
            .record_firing(s1.id, NOW + 5)
            .unwrap()
    );
    assert!(
        !PgTx::new(&mut c, "test")
            .record_firing(s1.id, NOW + 5)
            .unwrap()
    );
}

/// Batches of firings as the scheduler writes them: two transactions recording overlapping
/// sets at once (in the same ascending order) record each (schedule, instant) once between
/// them, an instant listed twice is recorded once, and a batch of tasks comes back with its
/// ids in the order given; one statement moves several schedules on.
#[test]
fn batches_of_firings_record_each_instant_once_and_tasks_keep_their_order() {
    let Some((server, url)) = database("firing_batches") else {
        return;
    };
    let mut c = server.client(&url);
    let ids: Vec<i64> = (0..3)
        .map(|i| {
            PgTx::new(&mut c, "test")
                .insert_schedule(&schedule(NOW + i, vec![]))
                .unwrap()
                .id
        })
        .collect();
    let start = Arc::new(Barrier::new(2));
    let batches = [
        vec![(ids[0], NOW), (ids[1], NOW), (ids[2], NOW)],
        vec![(ids[1], NOW), (ids[2], NOW), (ids[2], NOW + 60_000)],
    ];
    let racers: Vec<_> = batches
        .into_iter()
        .map(|keys| {
            let (mut c, start) = (server.client(&url), start.clone());
            std::thread::spawn(move || {
                let mut tx = c.transaction().unwrap();
                start.wait();
                let new = PgTx::new(&mut tx, "test").record_firings(&keys).unwrap();
                std::thread::sleep(std::time::Duration::from_millis(50));
                tx.commit().unwrap();
                keys.into_iter().zip(new).collect::<Vec<_>>()
            })
        })
        .collect();
    let mut wins = BTreeMap::new();
    for racer in racers {
        for (key, new) in racer.join().unwrap() {
            *wins.entry(key).or_insert(0) += usize::from(new);
        }
    }
    assert_eq!(wins.len(), 4);
    assert!(wins.values().all(|&n| n == 1), "{wins:?}");
    let rows: i64 = c
        .query_one("SELECT count(*) FROM schedule_firings", &[])
        .unwrap()
        .get(0);
    assert_eq!(rows, 4);
    assert_eq!(
        PgTx::new(&mut c, "test")
            .record_firings(&[(ids[0], NOW + 1), (ids[0], NOW + 1), (ids[0], NOW)])
            .unwrap(),
        [true, false, false]
    );

    // Tasks in one statement, ids in the order given.
    let endpoints: Vec<i64> = (0..5).map(|_| endpoint(&mut c, 1_000, None)).collect();
    let mut traces = webhookd::trace::TaskTraces::new(None, false);
    let tasks: Vec<NewTask> = endpoints
        .iter()
        .rev()
        .map(|&endpoint_id| NewTask {
            app_id: "app",
            schedule_id: Some(ids[0]),
            event_id: None,
            endpoint_id,
            task_type: TaskKind::Schedule,
            payload: r#"{"n":1}"#,
            run_at: NOW + endpoint_id,
            max_attempts: 3,
            now_ms: NOW,
            trace: traces.for_task(),
        })
        .collect();
    let task_ids = PgTx::new(&mut c, "test").insert_tasks(&tasks).unwrap();
    assert_eq!(task_ids.len(), tasks.len());
    for (id, t) in task_ids.iter().zip(&tasks) {
        let r = c
            .query_one(
                "SELECT endpoint_id, run_at, status, schedule_id, trace_id FROM tasks WHERE id = $1",
                &[id],
            )
            .unwrap();
        let got: (i64, i64, String, Option<i64>, Option<String>) =
            (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4));
        let trace = Some(t.trace.to_columns().0);
        assert_eq!(
            got,
            (
                t.endpoint_id,
                t.run_at,
                "pending".into(),
                Some(ids[0]),
                trace
            )
        );
    }
    assert!(
        PgTx::new(&mut c, "test")
            .insert_tasks(&[])
            .unwrap()
            .is_empty()
    );

    // Several schedules moved on in one statement.
    PgTx::new(&mut c, "test")
        .advance_schedules(&[
            webhookd::store::schedules::Advance {
                id: ids[0],
                fired_at: Some(NOW),
                next_run_at: Some(NOW + 60_000),
                skipped: 1,
            },
            webhookd::store::schedules::Advance {
                id: ids[1],
                fired_at: None,
                next_run_at: None,
                skipped: 0,
            },
        ])
        .unwrap();
    let moved: Vec<(Option<i64>, Option<i64>, i64)> = c
        .query(
            "SELECT last_run_at, next_run_at, skipped_runs FROM schedules ORDER BY id",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(
        moved,
        [
            (Some(NOW), Some(NOW + 60_000), 1),
            (None, None, 0),
            (None, Some(NOW + 2), 0)
        ]
    );
}

#[test]
fn schedule_round_trips() {
    let Some((server, url)) = database("schedules") else {
        return;
    };
    let mut c = server.client(&url);
    let e = endpoint(&mut c, 1_000, None);
    let mut s = PgTx::new(&mut c, "test")
        .insert_schedule(&schedule(NOW + 60_000, vec![e, 999]))
        .unwrap();
    assert!(s.id > 0);
    assert_eq!(
        PgTx::new(&mut c, "test")
            .get_schedule("app", s.id)
            .unwrap()
            .as_ref(),
        Some(&s)
    );
    assert_eq!(
        PgTx::new(&mut c, "test")
            .get_schedule("other", s.id)
            .unwrap(),
        None
    );
    // The names as the store fills them for a reply (`Tx::fill_schedule_names`).
    webhookd::store::Tx::fill_schedule_names(&mut pgstore::PgTx::new(&mut c, "node"), &mut s)
        .unwrap();
    assert_eq!(
        s.endpoint_names,
        BTreeMap::from([(e.to_string(), "ep".to_string())])
    );
    let local = s.next_run_at_local.as_deref().unwrap();
    assert!(local.starts_with("2023-11-14T22:14:20"), "{local}");

    assert_eq!(
        PgTx::new(&mut c, "test").earliest_next_run().unwrap(),
        Some(NOW + 60_000)
    );
    assert_eq!(
        PgTx::new(&mut c, "test")
            .get_active_schedule(s.id)
            .unwrap()
            .unwrap()
            .endpoint_ids,
        [e, 999]
    );
    PgTx::new(&mut c, "test")
        .advance_schedule(s.id, Some(NOW), Some(NOW + 120_000), 2)
        .unwrap();
    let got = PgTx::new(&mut c, "test")
        .get_schedule("app", s.id)
        .unwrap()
        .unwrap();
    assert_eq!(
        (got.last_run_at, got.next_run_at, got.skipped_runs),
        (Some(NOW), Some(NOW + 120_000), 2)
    );

    let mut paused = got.clone();
    paused.status = ScheduleStatus::Paused;
    paused.next_run_at = None;
    paused.name = "renamed".into();
    paused.updated_at = NOW + 1;
    PgTx::new(&mut c, "test").update_schedule(&paused).unwrap();
    assert_eq!(
        PgTx::new(&mut c, "test")
            .get_schedule("app", s.id)
            .unwrap()
            .unwrap(),
        paused
    );
    assert_eq!(
        PgTx::new(&mut c, "test").get_active_schedule(s.id).unwrap(),
        None
    );
    assert_eq!(PgTx::new(&mut c, "test").earliest_next_run().unwrap(), None);

    let other = PgTx::new(&mut c, "test")
        .insert_schedule(&schedule(NOW, vec![]))
        .unwrap();
    let mut deleted = schedule(NOW, vec![]);
    deleted.status = ScheduleStatus::Deleted;
    PgTx::new(&mut c, "test").insert_schedule(&deleted).unwrap();
    let page = |n| Page {
        page: n,
        page_size: 1,
    };
    let (total, items) = PgTx::new(&mut c, "test")
        .list_schedules("app", None, page(1))
        .unwrap();
    assert_eq!((total, items[0].id), (2, other.id));
    let (total, items) = PgTx::new(&mut c, "test")
        .list_schedules("app", None, page(2))
        .unwrap();
    assert_eq!((total, items[0].id), (2, s.id));
    let (total, items) = PgTx::new(&mut c, "test")
        .list_schedules("app", Some(ScheduleStatus::Paused), page(1))
        .unwrap();
    assert_eq!((total, items[0].name.as_str()), (1, "renamed"));
    assert_eq!(
        PgTx::new(&mut c, "test")
            .list_schedules("app", Some(ScheduleStatus::Deleted), page(1))
            .unwrap()
            .0,
        0
    );
}

#[test]
fn task_round_trips() {
    let Some((server, url)) = database("tasks") else {
        return;
    };
    let mut c = server.client(&url);
    let (e1, e2) = (endpoint(&mut c, 1_000, None), endpoint(&mut c, 1_000, None));
    let t1 = task(&mut c, e1, NOW);
    let t2 = task(&mut c, e2, NOW + 10);
    let t3 = task(&mut c, e2, NOW - 10);
    let got = PgTx::new(&mut c, "test")
        .get_task("app", t1)
        .unwrap()
        .unwrap();
    assert_eq!(
        (got.status.as_str(), got.endpoint_id, got.next_attempt_at),
        ("pending", e1, Some(NOW))
    );
    assert_eq!(got.payload, serde_json::json!({"n": 1}));
    assert_eq!(
        PgTx::new(&mut c, "test").get_task("other", t1).unwrap(),
        None
    );
    assert_eq!(
        PgTx::new(&mut c, "test").task_app(t1).unwrap().as_deref(),
        Some("app")
    );

    // The dispatcher's walk: endpoints in id order with their earliest due task and limits,
    // a page at a time.
    let walk = |c: &mut Client, after, limit| {
        PgTx::new(c, "test")
            .endpoints_with_pending(after, i64::MAX, limit)
            .unwrap()
            .iter()
            .map(|p| (p.endpoint_id, p.earliest_due, p.limits.map(|l| l.enabled)))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        walk(&mut c, 0, 10),
        [(e1, NOW, Some(true)), (e2, NOW - 10, Some(true))]
    );
    assert_eq!(walk(&mut c, 0, 1), [(e1, NOW, Some(true))]);
    assert_eq!(walk(&mut c, e1, 10), [(e2, NOW - 10, Some(true))]);
    assert_eq!(walk(&mut c, e2, 10), []);
    let below_e2 = PgTx::new(&mut c, "test")
        .endpoints_with_pending(0, e2, 10)
        .unwrap();
    assert_eq!(
        below_e2.iter().map(|p| p.endpoint_id).collect::<Vec<_>>(),
        [e1]
    );
    let claimed = PgTx::new(&mut c, "n")
        .claim_endpoint_tasks(e2, NOW + 10, 5)
        .unwrap();
    assert_eq!(claimed.iter().map(|t| t.id).collect::<Vec<_>>(), [t3, t2]);
    assert_eq!(claimed[0].payload, r#"{"n":1}"#);
    assert!(
        PgTx::new(&mut c, "n")
            .finish_attempt(
                t3,
                1,
                AfterAttempt::Failed,
                Some(500),
                Some("boom"),
                NOW + 20
            )
            .unwrap()
    );
    assert!(
        PgTx::new(&mut c, "n")
            .finish_attempt(
                t2,
                1,
                AfterAttempt::RetryAt(NOW + 99),
                Some(503),
                None,
                NOW + 20
            )
            .unwrap()
    );
    let t2_now = PgTx::new(&mut c, "test")
        .get_task("app", t2)
        .unwrap()
        .unwrap();
    assert_eq!(
        (
            t2_now.status.as_str(),
            t2_now.attempts,
            t2_now.next_attempt_at,
            t2_now.finished_at
        ),
        ("pending", 1, Some(NOW + 99), None)
    );

    let filter = |status: &str| TaskFilter {
        status: Some(StatusFilter::from_word(status).unwrap()),
        ..TaskFilter::default()
    };
    let page = Page {
        page: 1,
        page_size: 10,
    };
    let ids = |r: (i64, Vec<webhookd::store::tasks::Task>)| {
        (r.0, r.1.iter().map(|t| t.id).collect::<Vec<_>>())
    };
    assert_eq!(
        ids(PgTx::new(&mut c, "test")
            .list_tasks("app", &TaskFilter::default(), page)
            .unwrap()),
        (3, vec![t3, t2, t1])
    );
    assert_eq!(
        ids(PgTx::new(&mut c, "test")
            .list_tasks("app", &filter("retrying"), page)
            .unwrap()),
        (1, vec![t2])
    );
    assert_eq!(
        ids(PgTx::new(&mut c, "test")
            .list_tasks("app", &filter("failed"), page)
            .unwrap()),
        (1, vec![t3])
    );
    let by_endpoint = TaskFilter {
        endpoint_id: Some(e1),
        task_type: Some(TaskKind::Manual),
        ..TaskFilter::default()
    };
    assert_eq!(
        ids(PgTx::new(&mut c, "test")
            .list_tasks("app", &by_endpoint, page)
            .unwrap()),
        (1, vec![t1])
    );
    // A status outside the set never reaches the store: the API refuses it (40001).
    assert_eq!(StatusFilter::from_word("nonsense"), None);
    let page2 = Page {
        page: 2,
        page_size: 2,
    };
    assert_eq!(
        ids(PgTx::new(&mut c, "test")
            .list_tasks("app", &TaskFilter::default(), page2)
            .unwrap()),
        (3, vec![t1])
    );

    // Cancel, bulk-retry selection and retry.
    assert!(
        PgTx::new(&mut c, "test")
            .cancel_task("app", t1, NOW + 30)
            .unwrap()
    );
    assert!(
        !PgTx::new(&mut c, "test")
            .cancel_task("app", t1, NOW + 30)
            .unwrap()
    );
    let rf = |status: &str, since, until| RetryFilter {
        status: TaskStatus::from_word(status).unwrap(),
        endpoint_id: None,
        schedule_id: None,
        event_id: None,
        since,
        until,
    };
    assert_eq!(
        PgTx::new(&mut c, "test")
            .retryable_task_ids("app", &rf("failed", None, None), 10)
            .unwrap(),
        [t3]
    );
    assert_eq!(
        PgTx::new(&mut c, "test")
            .retryable_task_ids("app", &rf("canceled", Some(NOW + 30), Some(NOW + 31)), 10)
            .unwrap(),
        [t1]
    );
    assert!(
        PgTx::new(&mut c, "test")
            .retryable_task_ids("app", &rf("canceled", Some(NOW + 31), None), 10)
            .unwrap()
            .is_empty()
    );
    let mut retried = PgTx::new(&mut c, "test")
        .retry_tasks("app", &[t1, t2, t3], NOW + 40)
        .unwrap();
    retried.sort();
    assert_eq!(retried, [t1, t3]);
    let t3_now = PgTx::new(&mut c, "test")
        .get_task("app", t3)
        .unwrap()
        .unwrap();
    let default_attempts = i64::from(webhookd::retry::RetryPolicy::DEFAULT.max_attempts);
    assert_eq!(
        (
            t3_now.status.as_str(),
            t3_now.attempts,
            t3_now.max_attempts,
            t3_now.next_attempt_at,
            t3_now.finished_at
        ),
        ("pending", 0, default_attempts, Some(NOW + 40), None)
    );

    // A test delivery runs under this node's claim; a task of a deleted endpoint is canceled.
    let probe = task(&mut c, e1, NOW);
    PgTx::new(&mut c, "n").start_task_now(probe, NOW).unwrap();
    assert_eq!(state(&mut c, probe).1.as_deref(), Some("n"));
    assert!(
        PgTx::new(&mut c, "test")
            .schedule_task_open(1, e1)
            .is_ok_and(|open| !open)
    );
    c.execute("UPDATE tasks SET schedule_id = 1 WHERE id = $1", &[&probe])
        .unwrap();
    assert!(PgTx::new(&mut c, "test").schedule_task_open(1, e1).unwrap());
    c.execute("DELETE FROM endpoints WHERE id = $1", &[&e1])
        .unwrap();
    assert!(
        PgTx::new(&mut c, "n")
            .finish_attempt(
                probe,
                1,
                AfterAttempt::RetryAt(NOW + 5),
                None,
                Some("x"),
                NOW + 50
            )
            .unwrap()
    );
    let p = PgTx::new(&mut c, "test")
        .get_task("app", probe)
        .unwrap()
        .unwrap();
    assert_eq!(
        (p.status.as_str(), p.next_attempt_at, p.finished_at),
        ("canceled", None, Some(NOW + 50))
    );
    assert_eq!(
        PgTx::new(&mut c, "test")
            .cancel_orphan_tasks(NOW + 60)
            .unwrap(),
        1
    ); // t1, pending again
    assert_eq!(
        PgTx::new(&mut c, "test")
            .get_task("app", t1)
            .unwrap()
            .unwrap()
            .last_error
            .as_deref(),
        Some("endpoint deleted")
    );

    let counts: BTreeMap<String, i64> = PgTx::new(&mut c, "test")
        .count_tasks_by_status()
        .unwrap()
        .into_iter()
        .map(|(status, n)| (status.to_string(), n))
        .collect();
    assert_eq!(
        counts,
        BTreeMap::from([("canceled".into(), 2), ("pending".into(), 2)])
    );
}

/// A stored word outside its set (here a task type) is an error of the read, never a default.
#[test]
fn a_corrupt_stored_word_is_an_error() {
    let Some((server, url)) = database("words") else {
        return;
    };
    let mut c = server.client(&url);
    let e = endpoint(&mut c, 1_000, None);
    let t = task(&mut c, e, NOW);
    c.execute("UPDATE tasks SET task_type = 'bogus' WHERE id = $1", &[&t])
        .unwrap();
    let err = PgTx::new(&mut c, "test").get_task("app", t).unwrap_err();
    assert!(
        format!("{err}").contains("not a task type: \"bogus\""),
        "{err}"
    );
}

/// One fan-out's tasks in one statement keep their order, endpoints and traces; a round's
/// results in one statement follow `finish_attempt`'s rules row by row: only the claiming
/// node's running tasks are recorded, a retry stays pending, a deleted endpoint cancels.
#[test]
fn batched_fan_out_inserts_and_results_follow_the_single_row_rules() {
    use webhookd::store::tasks::Finish;
    let Some((server, url)) = database("batches") else {
        return;
    };
    let mut c = server.client(&url);
    let endpoints: Vec<i64> = (0..3).map(|_| endpoint(&mut c, 1_000, None)).collect();
    let mut traces = webhookd::trace::TaskTraces::new(None, false);
    let fan_out: Vec<NewTask<'_>> = endpoints
        .iter()
        .map(|&endpoint_id| NewTask {
            app_id: "app",
            schedule_id: None,
            event_id: Some(7),
            endpoint_id,
            task_type: TaskKind::Event,
            payload: r#"{"n":2}"#,
            run_at: NOW,
            max_attempts: endpoint_id + 1,
            now_ms: NOW,
            trace: traces.for_task(),
        })
        .collect();
    assert_eq!(
        PgTx::new(&mut c, "test")
            .insert_tasks(&fan_out)
            .unwrap()
            .len(),
        3
    );
    let rows: Vec<(i64, i64, i64, String, Option<String>)> = c
        .query(
            "SELECT id, endpoint_id, max_attempts, status, trace_id FROM tasks WHERE event_id = 7 ORDER BY id",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
        .collect();
    assert_eq!(
        rows.iter().map(|r| (r.1, r.2)).collect::<Vec<_>>(),
        endpoints.iter().map(|&e| (e, e + 1)).collect::<Vec<_>>(),
        "in order, each with its endpoint's attempts"
    );
    for (row, task) in rows.iter().zip(&fan_out) {
        assert_eq!(row.3, "pending");
        assert_eq!(row.4.as_deref(), Some(task.trace.to_columns().0.as_str()));
    }
    let ids: Vec<i64> = rows.iter().map(|r| r.0).collect();

    // Node A claims the first two, node B the third; endpoint 2 is deleted meanwhile.
    for (&e, node) in endpoints.iter().zip(["node-a", "node-a", "node-b"]) {
        let claimed = PgTx::new(&mut c, node)
            .claim_endpoint_tasks(e, NOW, 10)
            .unwrap();
        assert_eq!(claimed.len(), 1);
    }
    c.execute("DELETE FROM endpoints WHERE id = $1", &[&endpoints[1]])
        .unwrap();
    let result = |task_id, after| Finish {
        task_id,
        attempt: 1,
        after,
        last_status_code: Some(500),
        last_error: Some("HTTP 500"),
        now_ms: NOW + 10,
    };
    let recorded = PgTx::new(&mut c, "node-a")
        .finish_attempts(&[
            result(ids[0], AfterAttempt::RetryAt(NOW + 1_000)),
            result(ids[1], AfterAttempt::RetryAt(NOW + 1_000)),
            result(ids[2], AfterAttempt::Failed),
        ])
        .unwrap();
    assert_eq!(
        recorded,
        [true, true, false],
        "B's task is not A's to record"
    );
    type Row = (String, Option<i64>, Option<i64>, i64, Option<String>);
    let after: Vec<Row> = c
        .query(
            "SELECT status, next_attempt_at, finished_at, attempts, claimed_by FROM tasks
              WHERE id = ANY($1) ORDER BY id",
            &[&ids],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
        .collect();
    assert_eq!(
        after,
        [
            ("pending".into(), Some(NOW + 1_000), None, 1, None),
            ("canceled".into(), None, Some(NOW + 10), 1, None),
            ("running".into(), Some(NOW), None, 0, Some("node-b".into())),
        ]
    );
}

/// docs/dev/storage.md, "PostgreSQL round trips": a publish's event, its tasks and the event as
/// stored come from one statement, and a round's attempts go in with one; both write what the
/// one-row statements write, in order.
#[test]
fn an_event_with_its_tasks_and_a_rounds_attempts_each_take_one_statement() {
    use webhookd::store::attempts::{Attempt, RequestHeaders};
    use webhookd::store::events::NewEvent;
    use webhookd::store::{AttemptQueries, EventQueries};
    let Some((server, url)) = database("publish_batches") else {
        return;
    };
    let mut c = server.client(&url);
    let endpoints: Vec<i64> = (0..3).map(|_| endpoint(&mut c, 1_000, None)).collect();
    let mut traces = webhookd::trace::TaskTraces::new(None, false);
    let mut tasks: Vec<NewTask<'_>> = endpoints
        .iter()
        .map(|&endpoint_id| NewTask {
            app_id: "app",
            schedule_id: None,
            event_id: None,
            endpoint_id,
            task_type: TaskKind::Event,
            payload: r#"{"n":3}"#,
            run_at: NOW,
            max_attempts: endpoint_id + 2,
            now_ms: NOW,
            trace: traces.for_task(),
        })
        .collect();
    let event = PgTx::new(&mut c, "test")
        .insert_event_with_tasks(
            &NewEvent {
                app_id: "app",
                event_name: "order.paid",
                event_key: Some("k"),
                payload: r#"{"n":3}"#,
                now_ms: NOW,
            },
            &mut tasks,
        )
        .unwrap();
    let stored = PgTx::new(&mut c, "test")
        .get_event("app", event.id)
        .unwrap();
    assert_eq!(stored.as_ref(), Some(&event), "returned as stored");
    assert_eq!(
        (
            event.event_name.as_str(),
            event.event_key.as_deref(),
            event.task_count,
            event.created_at
        ),
        ("order.paid", Some("k"), 3, NOW)
    );
    assert!(tasks.iter().all(|t| t.event_id == Some(event.id)));
    let rows: Vec<(i64, i64, String, Option<String>)> = c
        .query(
            "SELECT endpoint_id, max_attempts, status, trace_id FROM tasks WHERE event_id = $1 ORDER BY id",
            &[&event.id],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    let expected: Vec<_> = tasks
        .iter()
        .map(|t| {
            let trace = Some(t.trace.to_columns().0);
            (t.endpoint_id, t.max_attempts, "pending".to_string(), trace)
        })
        .collect();
    assert_eq!(
        rows, expected,
        "in order, each with its endpoint's attempts"
    );
    // No matching endpoint: the event alone, with no tasks.
    let lone = PgTx::new(&mut c, "test")
        .insert_event_with_tasks(
            &NewEvent {
                app_id: "app",
                event_name: "order.lone",
                event_key: None,
                payload: "{}",
                now_ms: NOW,
            },
            &mut [],
        )
        .unwrap();
    assert_eq!((lone.task_count, lone.event_key), (0, None));
    let lone_tasks: i64 = c
        .query_one(
            "SELECT count(*) FROM tasks WHERE event_id = $1",
            &[&lone.id],
        )
        .unwrap()
        .get(0);
    assert_eq!(lone_tasks, 0);

    // A round's attempts: nulls where the one-row insert writes them, ids in the order given.
    let attempt = |task_id: i64, n: i64| Attempt {
        id: 0,
        task_id,
        attempt: n,
        started_at: NOW + n,
        duration_ms: 7 * n,
        status_code: (n != 2).then_some(500 + n),
        error: (n == 2).then(|| "connection refused".to_string()),
        response_body: (n != 3).then(|| format!("body {n}")),
        request_headers: (n != 1).then(|| RequestHeaders::encode([("x-n", "1")])),
    };
    let round = [attempt(41, 1), attempt(42, 2), attempt(41, 3)];
    PgTx::new(&mut c, "test").insert_attempts(&round).unwrap();
    PgTx::new(&mut c, "test").insert_attempts(&[]).unwrap();
    PgTx::new(&mut c, "test")
        .insert_attempts(&[attempt(43, 4)])
        .unwrap();
    let mut stored = Vec::new();
    for task_id in [41, 42, 43] {
        let (_, items) = PgTx::new(&mut c, "test")
            .list_attempts(
                task_id,
                Page {
                    page: 1,
                    page_size: 10,
                },
            )
            .unwrap();
        stored.extend(items);
    }
    stored.sort_by_key(|a| a.id);
    let strip = |a: &Attempt| Attempt { id: 0, ..a.clone() };
    assert_eq!(
        stored.iter().map(strip).collect::<Vec<_>>(),
        [
            attempt(41, 1),
            attempt(42, 2),
            attempt(41, 3),
            attempt(43, 4)
        ]
    );
}

/// A round's claims in one statement: each endpoint gets at most its own limit, earliest due
/// first, only due tasks, with this node's lease; a task another node holds locked is skipped;
/// the answer follows the order asked, an endpoint with nothing due getting nothing.
#[test]
fn one_claim_for_several_endpoints_keeps_each_endpoints_limit_and_order() {
    let Some((server, url)) = database("claim_across") else {
        return;
    };
    let mut c = server.client(&url);
    let endpoints: Vec<i64> = (0..4).map(|_| endpoint(&mut c, 5_000, None)).collect();
    let mut due: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    // Inserted latest first, so ids run against due times.
    for i in 0..6 {
        for &e in &endpoints[..3] {
            due.entry(e)
                .or_default()
                .push(task(&mut c, e, NOW - 100 * i));
        }
    }
    for ids in due.values_mut() {
        ids.reverse(); // earliest due first
    }
    task(&mut c, endpoints[3], NOW + 60_000); // not due yet
    // Another node holds the earliest task of the second endpoint locked.
    let mut other = server.client(&url);
    let mut held = other.transaction().unwrap();
    let first_of_second = due[&endpoints[1]][0];
    held.execute(
        "SELECT 1 FROM tasks WHERE id = $1 FOR UPDATE",
        &[&first_of_second],
    )
    .unwrap();
    let wanted = [
        (endpoints[2], 2),
        (endpoints[0], 10),
        (endpoints[3], 5),
        (endpoints[1], 3),
    ];
    let claimed = PgTx::new(&mut c, "node-a")
        .claim_endpoints_tasks(&wanted, NOW)
        .unwrap();
    held.commit().unwrap();
    let ids: Vec<Vec<i64>> = claimed
        .iter()
        .map(|tasks| tasks.iter().map(|t| t.id).collect())
        .collect();
    assert_eq!(ids[0], &due[&endpoints[2]][..2]);
    assert_eq!(ids[1], due[&endpoints[0]]);
    assert!(ids[2].is_empty());
    assert_eq!(ids[3], &due[&endpoints[1]][1..4]);
    for (tasks, (e, _)) in claimed.iter().zip(wanted) {
        for t in tasks {
            assert_eq!(t.endpoint_id, e);
            assert_eq!(
                state(&mut c, t.id),
                (
                    "running".into(),
                    Some("node-a".into()),
                    Some(NOW + 5_000 + pgstore::tasks::LEASE_MARGIN_MS),
                    Some(t.due_at)
                )
            );
        }
    }
    assert_eq!(state(&mut c, first_of_second).0, "pending");
}

/// A round's results and their attempts in one statement (`record_attempts`) leave the rows
/// exactly as `finish_attempts` and then `insert_attempts` of the recorded ones do: a retry, a
/// task of a deleted endpoint canceled, a final failure, a success, another node's task left
/// alone with no attempt row; one result alone, and a task twice, likewise. The round's health
/// is written with them only when every result was recorded, as `record_endpoints_health`
/// writes it. A claim returns its app's target generation (0 before the app has one).
#[test]
fn a_rounds_results_and_attempts_in_one_statement_write_what_the_two_write() {
    use webhookd::store::AttemptQueries;
    use webhookd::store::EndpointQueries;
    use webhookd::store::attempts::{Attempt, RequestHeaders};
    use webhookd::store::endpoints::HealthDelta;
    use webhookd::store::tasks::Finish;
    let Some((server, url)) = database("record_attempts") else {
        return;
    };
    let mut c = server.client(&url);
    let attempt = |task_id: i64, n: i64| Attempt {
        id: 0,
        task_id,
        attempt: 1,
        started_at: NOW + n,
        duration_ms: 7 * n,
        status_code: (n != 2).then_some(500 + n),
        error: (n == 2).then(|| "connection refused".to_string()),
        response_body: (n != 3).then(|| format!("body {n}")),
        request_headers: (n != 1).then(|| RequestHeaders::encode([("x-n", "1")])),
    };
    let finish = |task_id: i64, n: i64| {
        let after = match n {
            1 | 4 => AfterAttempt::RetryAt(NOW + 1_000 * n),
            2 => AfterAttempt::Failed,
            _ => AfterAttempt::Success,
        };
        (
            task_id,
            after,
            (n != 2).then_some(500 + n),
            (n == 2).then_some("connection refused"),
        )
    };
    type TaskRow = (
        String,
        Option<i64>,
        Option<i64>,
        i64,
        Option<i64>,
        Option<String>,
        Option<String>,
    );
    let task_rows = |c: &mut Client, ids: &[i64]| -> Vec<TaskRow> {
        ids.iter()
            .map(|id| {
                let r = c
                    .query_one(
                        "SELECT status, next_attempt_at, finished_at, attempts, last_status_code,
                                last_error, claimed_by FROM tasks WHERE id = $1",
                        &[id],
                    )
                    .unwrap();
                (
                    r.get(0),
                    r.get(1),
                    r.get(2),
                    r.get(3),
                    r.get(4),
                    r.get(5),
                    r.get(6),
                )
            })
            .collect()
    };
    let attempt_rows = |c: &mut Client, ids: &[i64]| -> Vec<(usize, i64, i64, Option<i64>)> {
        c.query(
            "SELECT task_id, started_at, duration_ms, status_code FROM attempts
              WHERE task_id = ANY($1) ORDER BY id",
            &[&ids],
        )
        .unwrap()
        .iter()
        .map(|r| {
            let task_id: i64 = r.get(0);
            let at = ids.iter().position(|&id| id == task_id).unwrap();
            (at, r.get(1), r.get(2), r.get(3))
        })
        .collect()
    };
    // Twin rounds: one recorded with the one statement, one with the two.
    let mut rounds = Vec::new();
    for _ in 0..2 {
        let endpoints: Vec<i64> = (0..5).map(|_| endpoint(&mut c, 1_000, None)).collect();
        let ids: Vec<i64> = endpoints.iter().map(|&e| task(&mut c, e, NOW)).collect();
        for (&e, node) in endpoints.iter().zip(["a", "a", "a", "a", "b"]) {
            let claimed = PgTx::new(&mut c, node)
                .claim_endpoint_tasks(e, NOW, 10)
                .unwrap();
            assert_eq!(claimed.len(), 1);
            assert_eq!(claimed[0].target_generation, Some(0), "no generation yet");
        }
        c.execute("DELETE FROM endpoints WHERE id = $1", &[&endpoints[3]])
            .unwrap();
        rounds.push((ids, endpoints[0]));
    }
    let failed = HealthDelta {
        last_failure_at: Some(NOW + 10),
        failures: 1,
        first_failure_at: Some(NOW + 10),
        ..Default::default()
    };
    type HealthRow = (Option<i64>, Option<i64>, i64, Option<i64>);
    let health_row = |c: &mut Client, id: i64| -> HealthRow {
        let r = c
            .query_one(
                "SELECT last_success_at, last_failure_at, consecutive_failures, failing_since
                   FROM endpoints WHERE id = $1",
                &[&id],
            )
            .unwrap();
        (r.get(0), r.get(1), r.get(2), r.get(3))
    };
    let results = |ids: &[i64]| -> (Vec<Finish<'static>>, Vec<Attempt>) {
        ids.iter()
            .zip(1..)
            .map(|(&id, n)| {
                let (task_id, after, last_status_code, last_error) = finish(id, n);
                let f = Finish {
                    task_id,
                    attempt: 1,
                    after,
                    last_status_code,
                    last_error,
                    now_ms: NOW + 10 * n,
                };
                (f, attempt(id, n))
            })
            .unzip()
    };
    let ((one, first_endpoint), (two, _)) = (&rounds[0], &rounds[1]);
    let (finishes, attempts) = results(one);
    let written = PgTx::new(&mut c, "a")
        .record_attempts(
            &finishes,
            &attempts,
            &[(*first_endpoint, failed)],
            IfBusy::Wait,
        )
        .unwrap();
    assert!(!written.health_written, "not every result was recorded");
    assert_eq!(health_row(&mut c, *first_endpoint), (None, None, 0, None));
    let recorded_one = written.recorded;
    let (finishes, attempts) = results(two);
    let recorded_two = PgTx::new(&mut c, "a").finish_attempts(&finishes).unwrap();
    let kept: Vec<Attempt> = attempts
        .iter()
        .zip(&recorded_two)
        .filter(|(_, r)| **r)
        .map(|(a, _)| a.clone())
        .collect();
    PgTx::new(&mut c, "a").insert_attempts(&kept).unwrap();
    assert_eq!(
        recorded_one,
        [true, true, true, true, false],
        "b's task is b's"
    );
    assert_eq!(recorded_one, recorded_two);
    assert_eq!(task_rows(&mut c, one), task_rows(&mut c, two));
    assert_eq!(attempt_rows(&mut c, one), attempt_rows(&mut c, two));
    assert_eq!(attempt_rows(&mut c, one).len(), 4);
    assert_eq!(task_rows(&mut c, one)[3].0, "canceled");

    // One result alone, and a task given twice (the second finds it no longer running).
    c.execute(
        "INSERT INTO target_generation (app_id, generation) VALUES ('app', 42)",
        &[],
    )
    .unwrap();
    let mut singles = Vec::new();
    for _ in 0..2 {
        let e = endpoint(&mut c, 1_000, None);
        let ids = [task(&mut c, e, NOW), task(&mut c, e, NOW)];
        let claimed = PgTx::new(&mut c, "a")
            .claim_endpoint_tasks(e, NOW, 10)
            .unwrap();
        assert!(claimed.iter().all(|t| t.target_generation == Some(42)));
        singles.push((ids, e));
    }
    let ((single, e1), (twin, e2)) = (singles[0], singles[1]);
    let (finishes, attempts) = results(&single[..1]);
    let written = PgTx::new(&mut c, "a")
        .record_attempts(&finishes, &attempts, &[(e1, failed)], IfBusy::Wait)
        .unwrap();
    assert_eq!(
        (written.recorded, written.health_written),
        (vec![true], true)
    );
    let (finishes, attempts) = results(&twin[..1]);
    assert_eq!(
        PgTx::new(&mut c, "a").finish_attempts(&finishes).unwrap(),
        [true]
    );
    PgTx::new(&mut c, "a").insert_attempts(&attempts).unwrap();
    PgTx::new(&mut c, "a")
        .record_endpoints_health(&[(e2, failed)], IfBusy::Wait)
        .unwrap();
    assert_eq!(
        health_row(&mut c, e1),
        (None, Some(NOW + 10), 1, Some(NOW + 10))
    );
    assert_eq!(health_row(&mut c, e1), health_row(&mut c, e2));
    let twice = [single[1], single[1]];
    let (finishes, attempts) = results(&twice);
    let written = PgTx::new(&mut c, "a")
        .record_attempts(&finishes, &attempts, &[(e1, failed)], IfBusy::Wait)
        .unwrap();
    assert_eq!(
        (written.recorded, written.health_written),
        (vec![true, false], false)
    );
    let (finishes, _) = results(&[twin[1], twin[1]]);
    assert_eq!(
        PgTx::new(&mut c, "a").finish_attempts(&finishes).unwrap(),
        [true, false]
    );
    PgTx::new(&mut c, "a")
        .insert_attempts(&[attempt(twin[1], 1)])
        .unwrap();
    assert_eq!(task_rows(&mut c, &single), task_rows(&mut c, &twin));
    assert_eq!(attempt_rows(&mut c, &single), attempt_rows(&mut c, &twin));
    assert!(
        PgTx::new(&mut c, "a")
            .record_attempts(&[], &[], &[], IfBusy::Wait)
            .unwrap()
            .recorded
            .is_empty()
    );
}

/// A claim reads only what it claims, on a generic plan (as the store's statement cache keeps
/// one) made without statistics (a new database before autovacuum's first `ANALYZE`) or with
/// statistics taken while nothing was pending (an idle database, then a burst): it never reads
/// the endpoint's backlog through an index that does not give due order, which made every
/// claim read and sort the whole backlog (BENCHMARKS.md, pgsteady).
#[test]
fn a_claim_reads_no_backlog_on_a_plan_made_without_statistics_or_while_idle() {
    let Some((server, url)) = database("claim_plan") else {
        return;
    };
    let mut c = server.client(&url);
    c.batch_execute(
        "ALTER TABLE tasks SET (autovacuum_enabled = false);
         SET plan_cache_mode = force_generic_plan",
    )
    .unwrap();
    let e = endpoint(&mut c, 1_000, None);
    let other = endpoint(&mut c, 1_000, None);
    // Index entries read through anything but the due-order index and the primary key.
    let other_entries = |c: &mut Client| -> i64 {
        c.batch_execute("SELECT pg_stat_force_next_flush()")
            .unwrap();
        c.query_one(
            "SELECT coalesce(sum(idx_tup_read), 0)::int8 FROM pg_stat_user_indexes
              WHERE relname = 'tasks' AND indexrelname NOT IN ('tasks_endpoint_due', 'tasks_pkey')",
            &[],
        )
        .unwrap()
        .get(0)
    };
    let claims = |c: &mut Client, at: i64| {
        let one = PgTx::new(c, "node-a")
            .claim_endpoint_tasks(e, at, 2)
            .unwrap();
        let round = PgTx::new(c, "node-a")
            .claim_endpoints_tasks(&[(e, 2), (other, 1)], at)
            .unwrap();
        assert_eq!(
            (one.len(), round.iter().map(Vec::len).collect::<Vec<_>>()),
            (2, vec![2, 1])
        );
    };
    let burst = |c: &mut Client| {
        for i in 0..400 {
            task(c, e, NOW + i);
        }
        task(c, other, NOW);
    };
    burst(&mut c);
    let never_analyzed: f32 = c
        .query_one(
            "SELECT reltuples FROM pg_class WHERE relname = 'tasks'",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(never_analyzed < 0.0, "no statistics yet: {never_analyzed}");
    let before = other_entries(&mut c);
    claims(&mut c, NOW + 1_000);
    let read = other_entries(&mut c) - before;
    assert!(
        read < 50,
        "no statistics: {read} entries read for 5 claimed tasks"
    );

    c.batch_execute(
        "UPDATE tasks SET status = 'succeeded', finished_at = run_at, next_attempt_at = NULL;
         ANALYZE tasks",
    )
    .unwrap();
    burst(&mut c);
    let before = other_entries(&mut c);
    claims(&mut c, NOW + 1_000);
    let read = other_entries(&mut c) - before;
    assert!(
        read < 50,
        "idle statistics: {read} entries read for 5 claimed tasks"
    );
}

/// The claims and the walk read an endpoint's pending tasks through `tasks_endpoint_due` and
/// no other pending-only index: `tasks_endpoint_order (endpoint_id, run_at, id) WHERE status =
/// 'pending'` would serve their `status = 'pending' AND endpoint_id = …` too, by reading the
/// endpoint's whole backlog, filtering and sorting it (11.4 M entries in one
/// `scripts/bench-pg.sh` run, BENCHMARKS.md, pgdue). On generic plans: over statistics taken
/// while nothing was pending, the due index reads only what the claims take (the claim's
/// update, written to match no index predicate, does not walk it whole); over statistics of
/// a backlog and with the due index dropped (the worst the planner could think of it), the
/// in-order index is still no alternative. It reads nothing until the in-order head asks.
#[test]
fn a_claim_or_the_walk_never_reads_an_endpoint_in_run_at_order() {
    let Some((server, url)) = database("claim_order_index") else {
        return;
    };
    let mut c = server.client(&url);
    let e = endpoint(&mut c, 1_000, None);
    let other = endpoint(&mut c, 1_000, None);
    // Finished tasks, so that a whole scan of `tasks` costs more than any index of the pending.
    c.execute(
        "INSERT INTO tasks (app_id, endpoint_id, task_type, payload, status, run_at, max_attempts,
                            attempts, finished_at, created_at, updated_at)
         SELECT 'app', CASE WHEN i % 2 = 0 THEN $1::int8 ELSE $2::int8 END, 'manual', '{}',
                'succeeded', $3::int8 - 100000 + i, 3, 1, $3::int8 - 100000 + i, $3, $3
           FROM generate_series(1, 20000) AS i",
        &[&e, &other, &NOW],
    )
    .unwrap();
    c.batch_execute(
        "ALTER TABLE tasks SET (autovacuum_enabled = false);
         ANALYZE tasks;
         SET plan_cache_mode = force_generic_plan",
    )
    .unwrap();
    for i in 0..400 {
        task(&mut c, e, NOW + i);
    }
    task(&mut c, other, NOW);
    task(&mut c, other, NOW + 1);
    let entries = |c: &mut Client, index: &str| -> i64 {
        c.batch_execute("SELECT pg_stat_force_next_flush()")
            .unwrap();
        c.query_one(
            "SELECT idx_tup_read FROM pg_stat_user_indexes
              WHERE relname = 'tasks' AND indexrelname = $1",
            &[&index],
        )
        .unwrap()
        .get(0)
    };
    let walk_and_claim = |c: &mut Client| {
        let walked = PgTx::new(c, "node-a")
            .endpoints_with_pending(0, i64::MAX, 10)
            .unwrap();
        assert_eq!(
            walked.iter().map(|p| p.endpoint_id).collect::<Vec<_>>(),
            [e, other]
        );
        let one = PgTx::new(c, "node-a")
            .claim_endpoint_tasks(e, NOW + 1_000, 2)
            .unwrap();
        let round = PgTx::new(c, "node-a")
            .claim_endpoints_tasks(&[(e, 2), (other, 1)], NOW + 1_000)
            .unwrap();
        assert_eq!(
            (one.len(), round.iter().map(Vec::len).collect::<Vec<_>>()),
            (2, vec![2, 1])
        );
    };
    let order_before = entries(&mut c, "tasks_endpoint_order");
    let due_before = entries(&mut c, "tasks_endpoint_due");
    walk_and_claim(&mut c);
    let due_read = entries(&mut c, "tasks_endpoint_due") - due_before;
    assert!(
        due_read < 50,
        "idle statistics: {due_read} due entries read for 5 claimed tasks"
    );

    c.batch_execute("ANALYZE tasks; DROP INDEX tasks_endpoint_due")
        .unwrap();
    walk_and_claim(&mut c);
    assert_eq!(
        entries(&mut c, "tasks_endpoint_order") - order_before,
        0,
        "the walk and the claims read the in-order index"
    );
    // The in-order claim's head is what the index is for, and the counter sees it.
    assert!(
        PgTx::new(&mut c, "node-a")
            .in_order_head(e)
            .unwrap()
            .is_some()
    );
    assert!(entries(&mut c, "tasks_endpoint_order") > order_before);
}

/// The dispatcher's round of successes runs without a transaction block
/// (`Store::write_redoable_statements`), each statement committing on its own. A round that
/// fails after its results statement committed (here its claim's answer is lost, after the
/// claim took one of those tasks again) keeps what committed, and the dispatcher's retry of
/// the same results records none of them twice: no second attempt row, no second health
/// update, the task claimed again left to its new attempt, whose own result still records.
#[test]
fn a_round_failing_after_its_results_committed_is_retried_without_recording_twice() {
    use webhookd::store::StoreError;
    use webhookd::store::attempts::Attempt;
    use webhookd::store::endpoints::HealthDelta;
    use webhookd::store::tasks::Finish;
    let Some((server, url)) = database("round_statements") else {
        return;
    };
    let mut c = server.client(&url);
    let store = webhookd::store::open(&url, 1).unwrap();
    let e = endpoint(&mut c, 1_000, None);
    let ids = [task(&mut c, e, NOW), task(&mut c, e, NOW + 1)];
    let claimed = store
        .write_redoable_statements::<_, StoreError>(|tx| {
            tx.claim_endpoints_tasks(&[(e, 10)], NOW + 1)
        })
        .unwrap();
    assert_eq!(claimed[0].iter().map(|t| t.id).collect::<Vec<_>>(), ids);
    let finishes = [
        Finish {
            task_id: ids[0],
            attempt: 1,
            after: AfterAttempt::Success,
            last_status_code: Some(200),
            last_error: None,
            now_ms: NOW + 10,
        },
        Finish {
            task_id: ids[1],
            attempt: 1,
            after: AfterAttempt::RetryAt(NOW + 10),
            last_status_code: Some(500),
            last_error: Some("HTTP 500"),
            now_ms: NOW + 10,
        },
    ];
    let attempts: Vec<Attempt> = finishes
        .iter()
        .map(|f| Attempt {
            id: 0,
            task_id: f.task_id,
            attempt: f.attempt,
            started_at: NOW + 5,
            duration_ms: 5,
            status_code: f.last_status_code,
            error: f.last_error.map(str::to_string),
            response_body: None,
            request_headers: None,
        })
        .collect();
    let health = [(
        e,
        HealthDelta {
            last_success_at: Some(NOW + 10),
            last_failure_at: Some(NOW + 10),
            failures: 1,
            first_failure_at: Some(NOW + 10),
        },
    )];
    let seen = |c: &mut Client| {
        let tasks: Vec<(String, i64)> = c
            .query(
                "SELECT status, attempts FROM tasks WHERE id = ANY($1) ORDER BY id",
                &[&&ids[..]],
            )
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        let attempt_rows: i64 = c
            .query_one("SELECT count(*) FROM attempts", &[])
            .unwrap()
            .get(0);
        let streak: i64 = c
            .query_one(
                "SELECT consecutive_failures FROM endpoints WHERE id = $1",
                &[&e],
            )
            .unwrap()
            .get(0);
        (tasks, attempt_rows, streak)
    };

    let failed = store.write_redoable_statements::<(), StoreError>(|tx| {
        let written = tx.record_attempts(&finishes, &attempts, &health, IfBusy::Wait)?;
        assert_eq!(
            (written.recorded, written.health_written),
            (vec![true, true], true)
        );
        let again = tx.claim_endpoints_tasks(&[(e, 10)], NOW + 20)?;
        assert_eq!(
            again[0]
                .iter()
                .map(|t| (t.id, t.attempt))
                .collect::<Vec<_>>(),
            [(ids[1], 2)]
        );
        Err(StoreError::Other(anyhow::anyhow!(
            "the claim's answer was lost"
        )))
    });
    assert!(failed.is_err());
    let committed = (
        vec![("success".to_string(), 1), ("running".to_string(), 1)],
        2,
        1,
    );
    assert_eq!(
        seen(&mut c),
        committed,
        "each statement committed on its own"
    );

    let retried = store
        .write_redoable_statements::<_, StoreError>(|tx| {
            tx.record_attempts(&finishes, &attempts, &health, IfBusy::Wait)
        })
        .unwrap();
    assert_eq!(
        (retried.recorded, retried.health_written),
        (vec![false, false], false)
    );
    assert_eq!(seen(&mut c), committed, "nothing recorded twice");

    let second = Finish {
        attempt: 2,
        after: AfterAttempt::Success,
        last_status_code: Some(200),
        last_error: None,
        now_ms: NOW + 30,
        ..finishes[1]
    };
    let attempt = Attempt {
        attempt: 2,
        status_code: Some(200),
        error: None,
        ..attempts[1].clone()
    };
    let written = store
        .write_redoable_statements::<_, StoreError>(|tx| {
            tx.record_attempts(&[second], &[attempt], &[], IfBusy::Wait)
        })
        .unwrap();
    assert_eq!(written.recorded, [true]);
    assert_eq!(
        seen(&mut c),
        (
            vec![("success".to_string(), 1), ("success".to_string(), 2)],
            3,
            1
        )
    );
}

/// A round's health passes over an endpoint whose row another transaction holds: the round
/// returns while that transaction is still open (it does not wait for it), records its results
/// and attempts, writes the health of the endpoints nobody held, and says which it deferred.
/// Once the other transaction ends, the carried change written before the next round's (the
/// dispatcher's fold, `delivery::health::Carried`) leaves the streak of both rounds.
#[test]
fn a_rounds_health_passes_over_an_endpoint_another_writer_holds_and_is_written_later() {
    use std::sync::mpsc;
    use std::time::Duration;
    use webhookd::delivery::health::{Carried, Fold};
    use webhookd::store::StoreError;
    use webhookd::store::attempts::Attempt;
    use webhookd::store::tasks::Finish;
    let Some((server, url)) = database("health_deferred") else {
        return;
    };
    let mut c = server.client(&url);
    let store = webhookd::store::open(&url, 2).unwrap();
    let (held, free) = (endpoint(&mut c, 1_000, None), endpoint(&mut c, 1_000, None));
    let tasks: Vec<i64> = [held, held, free, held]
        .iter()
        .map(|&e| task(&mut c, e, NOW))
        .collect();
    let claimed = store
        .write_redoable_statements::<_, StoreError>(|tx| {
            tx.claim_endpoints_tasks(&[(held, 10), (free, 10)], NOW)
        })
        .unwrap();
    assert_eq!(claimed.iter().map(Vec::len).sum::<usize>(), 4);
    // Results at NOW + 10, + 20 (failures of `held`), + 30 (a failure of `free`); the last
    // task of `held` fails in the next round, at NOW + 40.
    let result = |task_id: i64, at: i64| {
        let finish = Finish {
            task_id,
            attempt: 1,
            after: AfterAttempt::RetryAt(at + 60_000),
            last_status_code: Some(500),
            last_error: Some("HTTP 500"),
            now_ms: at,
        };
        let attempt = Attempt {
            id: 0,
            task_id,
            attempt: 1,
            started_at: at - 5,
            duration_ms: 5,
            status_code: Some(500),
            error: Some("HTTP 500".into()),
            response_body: None,
            request_headers: None,
        };
        (finish, attempt)
    };
    let round_one = [
        (tasks[0], held, NOW + 10),
        (tasks[1], held, NOW + 20),
        (tasks[2], free, NOW + 30),
    ];
    let (finishes, attempts): (Vec<_>, Vec<_>) =
        round_one.iter().map(|&(t, _, at)| result(t, at)).unzip();
    let mut fold = Fold::default();
    for &(_, e, at) in &round_one {
        fold.add(e, false, at, false);
    }
    let changes: Vec<_> = fold.clone().into_endpoints().collect();
    let deltas: Vec<_> = changes.iter().map(|(id, s)| (*id, s.delta)).collect();

    // Another writer holds `held`'s row.
    let mut other = server.client(&url);
    let mut holder = other.transaction().unwrap();
    holder
        .query_one(
            "SELECT id FROM endpoints WHERE id = $1 FOR UPDATE",
            &[&held],
        )
        .unwrap();
    let (sent, answer) = mpsc::channel();
    let round = {
        let store = store.clone();
        std::thread::spawn(move || {
            let written = store.write_redoable_statements::<_, StoreError>(|tx| {
                tx.record_attempts(&finishes, &attempts, &deltas, IfBusy::Defer)
            });
            sent.send(written).unwrap();
        })
    };
    // A guard against a hang only: the round answers while the other writer still holds the row.
    let written = answer
        .recv_timeout(Duration::from_secs(120))
        .expect("the round waited for the row another writer holds")
        .unwrap();
    round.join().unwrap();
    assert_eq!(written.recorded, [true, true, true]);
    assert!(written.health_written);
    assert_eq!(
        written.deferred,
        [held],
        "only the held endpoint is deferred"
    );
    let health = |c: &mut Client, id: i64| -> (Option<i64>, Option<i64>, i64, Option<i64>) {
        let r = c
            .query_one(
                "SELECT last_success_at, last_failure_at, consecutive_failures, failing_since
                   FROM endpoints WHERE id = $1",
                &[&id],
            )
            .unwrap();
        (r.get(0), r.get(1), r.get(2), r.get(3))
    };
    assert_eq!(
        health(&mut c, free),
        (None, Some(NOW + 30), 1, Some(NOW + 30))
    );
    assert_eq!(
        health(&mut c, held),
        (None, None, 0, None),
        "not written yet"
    );
    let recorded: Vec<(String, i64)> = c
        .query(
            "SELECT t.status, (SELECT count(*) FROM attempts a WHERE a.task_id = t.id)
               FROM tasks t WHERE t.id = ANY($1) ORDER BY t.id",
            &[&&tasks[..3]],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(recorded, vec![("pending".to_string(), 1); 3]);
    holder.rollback().unwrap();

    // The dispatcher carries the deferred change and folds it before its next round's.
    let mut carried = Carried::default();
    for (id, seen) in changes {
        if written.deferred.contains(&id) {
            carried.keep(id, seen);
        }
    }
    let mut next = Fold::default();
    next.add(held, false, NOW + 40, false);
    let (_, later) = next.into_endpoints().next().unwrap();
    let delta = carried.before(held, later).delta;
    let (finish, attempt) = result(tasks[3], NOW + 40);
    let written = store
        .write_redoable_statements::<_, StoreError>(|tx| {
            tx.record_attempts(&[finish], &[attempt], &[(held, delta)], IfBusy::Defer)
        })
        .unwrap();
    assert_eq!((written.recorded, written.deferred), (vec![true], vec![]));
    assert_eq!(
        health(&mut c, held),
        (None, Some(NOW + 40), 3, Some(NOW + 10)),
        "the streak of both rounds, from the first failure"
    );
}

/// A node delivers to an endpoint whose row another writer holds (`FOR NO KEY UPDATE`, as
/// another node's round holds it): the node records the delivery while the row is held and
/// carries its health; once the other writer is done, the node writes that health (its next
/// round, which has no result for the endpoint, waits for the row).
#[test]
fn a_node_records_deliveries_while_another_writer_holds_the_endpoint_and_its_health_after() {
    use crate::support::{Receiver, create_key, ok, wait_for};
    use serde_json::json;
    use std::time::Duration;
    let Some((server, url)) = database("health_node") else {
        return;
    };
    let mut config = webhookd::config::Config::new(url.clone());
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.workers = 2;
    let (key_id, secret) = create_key(&url, "app1");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let running = runtime
        .block_on(webhookd::server::start(
            config,
            Arc::new(webhookd::clock::SystemClock),
            std::future::pending(),
        ))
        .expect("server starts");
    let api = webhookd::client::Client::new(&format!("http://{}", running.addr), &key_id, &secret);
    let receiver = Receiver::start();
    let body = json!({ "name": "receiver", "url": receiver.url });
    let ep = ok(&api, "POST", "/endpoints", Some(body))["id"]
        .as_i64()
        .unwrap();
    let mut reader = server.client(&url);
    let mut health = move || -> (Option<i64>, i64, Vec<String>) {
        let r = reader
            .query_one(
                "SELECT last_success_at, consecutive_failures,
                        ARRAY(SELECT status FROM tasks WHERE endpoint_id = $1 ORDER BY id)
                   FROM endpoints WHERE id = $1",
                &[&ep],
            )
            .unwrap();
        (r.get(0), r.get(1), r.get(2))
    };

    let mut other = server.client(&url);
    let mut holder = other.transaction().unwrap();
    holder
        .query_one(
            "SELECT id FROM endpoints WHERE id = $1 FOR NO KEY UPDATE",
            &[&ep],
        )
        .unwrap();
    for _ in 0..3 {
        ok(&api, "POST", "/tasks", Some(json!({ "endpoint_id": ep })));
    }
    let while_held = wait_for(Duration::from_secs(60), || {
        let now = health();
        (now.2.iter().all(|s| s == "success")).then_some(now)
    })
    .expect("the deliveries are recorded while another writer holds the endpoint");
    assert_eq!(
        (while_held.0, while_held.1),
        (None, 0),
        "the health waits for the row"
    );
    holder.commit().unwrap();
    let after = wait_for(Duration::from_secs(60), || {
        let now = health();
        now.0.is_some().then_some(now)
    })
    .expect("the carried health is written once the row is free");
    assert_eq!(after.1, 0);
    assert_eq!(receiver.received().len(), 3);
    runtime
        .block_on(running.shutdown())
        .expect("clean shutdown");
}
