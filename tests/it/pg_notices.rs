//! Task notices only while a node's delivery pool is behind (docs/dev/storage.md, "Notices only
//! when behind"), against a private server: a node's `store-notifier` withholds its task
//! notices while its pool says it keeps up, sends a presence notice instead (another node's
//! listener counts it, wakes nothing), owes one task notice again the moment the pool falls
//! behind, and sends one when it stops; schedule notices are never withheld.

use crate::pg::PgServer;
use crate::support::patient;
use postgres::fallible_iterator::FallibleIterator;
use std::sync::Mutex;
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};
use webhookd::store::postgres::listen::{Channel, Listener, Notifier};
use webhookd::store::postgres::{PgSettings, PgUrl, open_with};
use webhookd::store::{IdleCap, Peers, Wakers};

const SENDER: &str = "sending-node";
const LISTENER: &str = "listening-node";
/// How long a wake or notice that must come may take on a loaded machine (nothing else sends).
const WAKE: Duration = Duration::from_secs(60);

fn wakers() -> (Wakers, Receiver<Channel>) {
    let (tx, rx) = channel();
    let (tasks, schedules) = (Mutex::new(tx.clone()), Mutex::new(tx));
    let wakers = Wakers {
        tasks: Box::new(move || {
            let _ = tasks.lock().unwrap().send(Channel::Tasks);
        }),
        schedules: Box::new(move || {
            let _ = schedules.lock().unwrap().send(Channel::Schedules);
        }),
    };
    (wakers, rx)
}

/// The next notice on `client` (which `LISTEN`s) within [`WAKE`]: (channel, payload).
fn next_notice(client: &mut postgres::Client) -> (String, String) {
    let mut notices = client.notifications();
    let notice = notices
        .timeout_iter(patient(WAKE))
        .next()
        .unwrap()
        .expect("a notice");
    (notice.channel().to_string(), notice.payload().to_string())
}

#[test]
fn task_notices_are_withheld_while_the_pool_keeps_up_and_sent_when_it_falls_behind_or_stops() {
    let Some(pg) = PgServer::start() else {
        return;
    };
    let url = pg.create_database("withheld");
    // Another node's listener (its wakes and peers), and a raw connection seeing every notice.
    let (wakers, wakes) = wakers();
    let cap = IdleCap::new(Duration::from_millis(250));
    let peers = Peers::default();
    let listener =
        Listener::spawn(&PgUrl::parse(&url).unwrap(), LISTENER, wakers, &cap, &peers).unwrap();
    let deadline = Instant::now() + patient(Duration::from_secs(10));
    while !cap.is_listening() {
        assert!(Instant::now() < deadline, "the listener never listened");
        std::thread::sleep(Duration::from_millis(10));
    }
    // The two wakes of its connection.
    for _ in 0..2 {
        wakes.recv_timeout(patient(WAKE)).expect("connection wake");
    }
    let mut raw = pg.client(&url);
    raw.batch_execute(&format!(
        "LISTEN {}; LISTEN {}",
        Channel::Tasks.name(),
        Channel::Nodes.name()
    ))
    .unwrap();

    let (pool, link) = open_with(&url, 2, &PgSettings::default()).unwrap();
    let mut notifier = Notifier::spawn(pool, link, SENDER.to_string()).unwrap();
    // Before its pool says anything, a node wakes the others as it always did.
    notifier.owe(true, false);
    assert_eq!(wakes.recv_timeout(patient(WAKE)), Ok(Channel::Tasks));
    assert_eq!(
        next_notice(&mut raw),
        (Channel::Tasks.name().into(), SENDER.into())
    );
    assert_eq!(peers.count(), 1);

    // Keeping up: what it makes due is withheld; a presence notice (at most one per half
    // second) keeps it counted and wakes nothing.
    let pace = notifier.keeping_up();
    pace.set(true);
    let presence = loop {
        notifier.owe(true, false);
        let mut notices = raw.notifications();
        if let Some(n) = notices
            .timeout_iter(Duration::from_millis(100))
            .next()
            .unwrap()
        {
            break (n.channel().to_string(), n.payload().to_string());
        }
    };
    assert_eq!(presence, (Channel::Nodes.name().into(), SENDER.into()));
    // Falling behind: one task notice covers what was withheld, with no new write. A schedule
    // notice (never withheld) follows as a marker: had any of the withheld notices been sent,
    // its wake would have come before these two.
    pace.set(false);
    assert_eq!(wakes.recv_timeout(patient(WAKE)), Ok(Channel::Tasks));
    pace.set(true);
    notifier.owe(false, true);
    assert_eq!(wakes.recv_timeout(patient(WAKE)), Ok(Channel::Schedules));
    assert_eq!(peers.count(), 1);

    // Stopping sends what was withheld.
    notifier.owe(true, false);
    notifier.stop();
    assert_eq!(wakes.recv_timeout(patient(WAKE)), Ok(Channel::Tasks));
    listener.stop();
}
