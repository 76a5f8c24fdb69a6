//! Cross-node wake-ups (docs/design.md §16) against a private server: a notice sent on one connection
//! reaches the `store-listener`'s wake, a notice of a rolled-back transaction
//! never does (and a committed one only at commit), nor one the listener's own node sent (the
//! sender is counted among its peers otherwise), and after its backend is terminated the
//! listener reconnects and fires both wakes once. While it cannot listen, the idle cap polls.

use crate::pg::PgServer;
use crate::support::patient;
use std::sync::Mutex;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::time::{Duration, Instant};
use webhookd::store::postgres::listen::{self, Channel, Listener};
use webhookd::store::postgres::{PgUrl, Sql};
use webhookd::store::{IdleCap, Peers, Wakers};

const POLL: Duration = Duration::from_millis(250);
/// The node whose listener the tests start, and another node sending notices.
const THIS_NODE: &str = "this-node";
const OTHER_NODE: &str = "other-node";
/// How long a test waits for a wake it expects: generous, since the point is that the notice
/// arrives, not how fast a loaded machine passes it on (nothing else sends one here).
const WAKE: Duration = Duration::from_secs(60);

/// Wakes that report which channel fired, in order.
fn wakers() -> (Wakers, Receiver<Channel>) {
    let (tx, rx) = channel();
    let sender = |tx: Sender<Channel>, channel: Channel| {
        let tx = Mutex::new(tx);
        Box::new(move || {
            let _ = tx.lock().unwrap().send(channel);
        }) as Box<dyn Fn() + Send + Sync>
    };
    let wakers = Wakers {
        tasks: sender(tx.clone(), Channel::Tasks),
        schedules: sender(tx, Channel::Schedules),
    };
    (wakers, rx)
}

fn wait_listening(cap: &IdleCap) {
    let deadline = Instant::now() + patient(Duration::from_secs(10));
    while !cap.is_listening() {
        assert!(Instant::now() < deadline, "the listener never listened");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The two wakes every (re)connection fires, in either order.
fn expect_both(rx: &Receiver<Channel>, within: Duration) {
    let within = patient(within);
    let mut got = vec![
        rx.recv_timeout(within).expect("a wake after connecting"),
        rx.recv_timeout(within)
            .expect("the second wake after connecting"),
    ];
    got.sort_by_key(|c| c.name());
    assert_eq!(got, [Channel::Schedules, Channel::Tasks]);
}

fn no_wake(rx: &Receiver<Channel>, during: Duration) {
    if let Ok(channel) = rx.recv_timeout(during) {
        panic!("unexpected wake {channel:?}");
    }
}

/// A started listener on a new database of `pg`, its wake reports, and a second connection.
fn started(
    pg: &PgServer,
    db: &str,
) -> (
    Listener,
    IdleCap,
    Peers,
    Receiver<Channel>,
    postgres::Client,
) {
    let url = pg.create_database(db);
    let (wakers, rx) = wakers();
    let cap = IdleCap::new(POLL);
    assert_eq!(cap.cap(Duration::from_secs(60)), POLL);
    let peers = Peers::default();
    let listener = Listener::spawn(
        &PgUrl::parse(&url).unwrap(),
        THIS_NODE,
        wakers,
        &cap,
        &peers,
    )
    .unwrap();
    wait_listening(&cap);
    expect_both(&rx, Duration::from_secs(2));
    (listener, cap, peers, rx, pg.client(&url))
}

#[test]
fn a_notice_wakes_the_listener_and_a_rollback_sends_none() {
    let Some(pg) = PgServer::start() else {
        return;
    };
    let (listener, cap, peers, rx, mut other) = started(&pg, "wakes");
    assert_eq!(peers.count(), 0);
    assert_eq!(cap.cap(Duration::from_secs(60)), Duration::from_secs(60));

    for channel in [Channel::Tasks, Channel::Schedules] {
        listen::notify(&mut Sql::new(&mut other, None), channel, OTHER_NODE).unwrap();
        assert_eq!(rx.recv_timeout(WAKE), Ok(channel));
    }

    // Rolled back: never sent. The committed notice after it is the next one to arrive.
    let mut tx = other.transaction().unwrap();
    listen::notify(&mut Sql::new(&mut tx, None), Channel::Tasks, OTHER_NODE).unwrap();
    tx.rollback().unwrap();
    listen::notify(
        &mut Sql::new(&mut other, None),
        Channel::Schedules,
        OTHER_NODE,
    )
    .unwrap();
    assert_eq!(rx.recv_timeout(WAKE), Ok(Channel::Schedules));
    no_wake(&rx, Duration::from_millis(1500));

    // The node's own notice wakes nothing (its loops were woken in process): the next wake is
    // the other node's notice sent after it.
    listen::notify(&mut Sql::new(&mut other, None), Channel::Tasks, THIS_NODE).unwrap();
    listen::notify(
        &mut Sql::new(&mut other, None),
        Channel::Schedules,
        OTHER_NODE,
    )
    .unwrap();
    assert_eq!(rx.recv_timeout(WAKE), Ok(Channel::Schedules));
    // The other node is counted among the peers (the delivery pool spaces its rounds by
    // them), the listener's own node is not.
    assert_eq!(peers.count(), 1);

    // In a transaction: sent at commit, not before.
    let mut tx = other.transaction().unwrap();
    listen::notify(&mut Sql::new(&mut tx, None), Channel::Tasks, OTHER_NODE).unwrap();
    no_wake(&rx, Duration::from_millis(500));
    tx.commit().unwrap();
    assert_eq!(rx.recv_timeout(WAKE), Ok(Channel::Tasks));

    let stopping = Instant::now();
    listener.stop();
    // Stops within its tick (1 s) on a quiet machine; the check is that it stops at all.
    assert!(stopping.elapsed() < patient(Duration::from_secs(3)));
}

#[test]
fn a_terminated_listener_reconnects_and_fires_both_wakes() {
    let Some(pg) = PgServer::start() else {
        return;
    };
    let (listener, cap, _, rx, mut other) = started(&pg, "reconnect");
    let backend = |c: &mut postgres::Client| -> Option<i32> {
        c.query_opt(
            "SELECT pid FROM pg_stat_activity WHERE application_name = $1",
            &[&listen::APPLICATION_NAME],
        )
        .unwrap()
        .map(|r| r.get(0))
    };
    let first = backend(&mut other).expect("the listener's backend");
    let killed: bool = other
        .query_one("SELECT pg_terminate_backend($1)", &[&first])
        .unwrap()
        .get(0);
    assert!(killed);
    // Detected within a tick, reconnected after a short pause: both wakes, once.
    expect_both(&rx, Duration::from_secs(5));
    no_wake(&rx, Duration::from_millis(300));
    wait_listening(&cap);
    let second = backend(&mut other).expect("a new backend");
    assert_ne!(first, second);
    listen::notify(&mut Sql::new(&mut other, None), Channel::Tasks, OTHER_NODE).unwrap();
    assert_eq!(rx.recv_timeout(WAKE), Ok(Channel::Tasks));
    listener.stop();
}

#[test]
fn without_a_server_the_listener_keeps_trying_and_sleeps_are_capped() {
    // Nothing listens on this port: the listener cannot connect, so the loops poll.
    let port = crate::support::free_local_addr();
    let url = PgUrl::parse(&format!("postgres://u:pw@{port}/db")).unwrap();
    let (wakers, rx) = wakers();
    let cap = IdleCap::new(POLL);
    let listener = Listener::spawn(&url, THIS_NODE, wakers, &cap, &Peers::default()).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert!(!cap.is_listening());
    assert_eq!(cap.cap(Duration::from_secs(60)), POLL);
    assert!(rx.try_recv().is_err(), "no wake without a connection");
    let stopping = Instant::now();
    listener.stop();
    assert!(stopping.elapsed() < patient(Duration::from_secs(2)));
}
