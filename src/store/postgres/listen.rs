//! Cross-node wake-ups (docs/design.md §16, `docs/dev/storage.md`): once a write that made work
//! due has committed, the store calls [`notify`] (never for a rollback), and every node's
//! `store-listener` thread, on its own connection outside the pool, `LISTEN`s and calls the
//! matching wake, except for the node's own notices (its own dispatcher and scheduler were
//! woken in process); the nodes it hears from are counted in [`Peers`] (the delivery pool
//! spaces its rounds by them). When the listener is not connected (or with
//! `--pg-poll-only`) the delivery pool and the scheduler cap their idle sleep at
//! `--pg-poll-ms` through an [`IdleCap`], so a missed notice costs at most that much delay.
//! While the node's own delivery pool keeps up ([`KeepingUp`]) its task notices are withheld
//! (its pool delivers what it made due) and a presence notice now and then keeps it counted.

use super::{Backing, Link, PgPool, PgUrl, Sql, connect_with};
use crate::store::watch::{IdleCap, KeepingUp, Peers, Wakers};
use postgres::fallible_iterator::FallibleIterator;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A notification channel webhookd uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Channel {
    /// A task became due (publish, POST /tasks, retry, firing, release, rescue).
    Tasks,
    /// A schedule was created, updated, resumed or deleted.
    Schedules,
    /// Nothing to wake for: the sender is alive and makes work due, which its own delivery pool
    /// keeps up with (it is counted in [`Peers`], no loop is woken). Nodes of versions before
    /// it do not listen on it.
    Nodes,
}

impl Channel {
    /// The PostgreSQL channel name.
    pub fn name(self) -> &'static str {
        match self {
            Channel::Tasks => "webhookd_tasks",
            Channel::Schedules => "webhookd_schedules",
            Channel::Nodes => "webhookd_nodes",
        }
    }

    fn from_name(name: &str) -> Option<Channel> {
        [Channel::Tasks, Channel::Schedules, Channel::Nodes]
            .into_iter()
            .find(|c| c.name() == name)
    }
}

/// Sends a notice on `channel` from node `sender` (its payload: the listener of that node
/// passes over its own notices), without waiting for a WAL flush (a notice is a wake-up, not
/// data: a crash may lose it, a poll finds the work). The [`Notifier`] runs it outside any
/// transaction, after the commits that made the work due, so it is a short transaction of its
/// own; inside a transaction it would be sent at that transaction's commit (never for a
/// rollback), and that commit would not wait for its flush either.
pub fn notify(
    c: &mut Sql<impl Backing>,
    channel: Channel,
    sender: &str,
) -> Result<(), postgres::Error> {
    c.execute(
        "SELECT set_config('synchronous_commit', 'off', true), pg_notify($1, $2)",
        &[&channel.name(), &sender],
    )?;
    Ok(())
}

/// After a notice, the `store-notifier` thread waits this long before the next one: under load a
/// notice covers every commit of its gap (at most 500 a second per node instead of one per
/// commit), and another node hears of work at most this much later than it would have.
const NOTICE_GAP: Duration = Duration::from_millis(2);

/// While its task notices are withheld, a node sends a presence notice ([`Channel::Nodes`]) at
/// most this often, and only when it withheld one since: the other nodes keep counting it in
/// their [`Peers`] (well within [`PEER_FRESH`]) and space their rounds by it as before.
const PRESENCE_EVERY: Duration = Duration::from_millis(500);

/// The notices a node owes the other nodes after its commits, sent by its `store-notifier`
/// thread (docs/dev/storage.md, "Notices after the commit").
///
/// A writer that made work due marks the channel owed ([`Notifier::owe`]) once it committed,
/// and goes on: no round trip, no transaction of its own on the request's path. The thread
/// takes what is owed, sends one notice per channel on a pooled connection, waits
/// [`NOTICE_GAP`], and takes again: every commit marked before a notice is taken is covered by
/// it, and one marked while a notice is sent is covered by the next. So a notice still follows
/// the commits it announces and is never sent for a rollback; what a crash loses between a
/// commit and its notice the other nodes find at their next poll, as before.
///
/// A task notice is **withheld** while the node's delivery pool says it keeps up
/// ([`Notifier::keeping_up`]): that pool was woken in process by the same commit and delivers
/// the work, and waking the other nodes for it only had them race it for the claim (on three
/// nodes a notice per 1.7 deliveries, each waking two dispatchers). The moment the pool says it
/// is behind or stopping, one notice covers everything withheld so far (the other nodes' walk
/// reads all due work), and notices go out as before; [`Notifier::stop`] sends one too. What a
/// node that dies leaves withheld is what a crash between a commit and its notice always left:
/// the other nodes find it at their next look, at most `LEASE_RESCUE_EVERY` (1 s) apart, and
/// its claimed tasks after their lease, as before.
pub struct Notifier {
    owed: Arc<Owed>,
    thread: Option<JoinHandle<()>>,
}

#[derive(Default)]
struct Owed {
    state: Mutex<OwedState>,
    marked: Condvar,
}

#[derive(Debug, Default, Clone, Copy)]
struct OwedState {
    tasks: bool,
    schedules: bool,
    stop: bool,
    /// The delivery pool said it keeps up: task notices are withheld.
    keeping_up: bool,
    /// A task notice was withheld since the last one sent.
    withheld: bool,
}

impl Owed {
    fn lock(&self) -> MutexGuard<'_, OwedState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The delivery pool's report: when it falls behind, what was withheld is owed again.
    fn set_keeping_up(&self, keeping_up: bool) {
        let mut state = self.lock();
        state.keeping_up = keeping_up;
        if !keeping_up && state.withheld {
            state.tasks = true;
            self.marked.notify_one();
        }
    }
}

/// What one turn of the `store-notifier` thread sends.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Turn {
    tasks: bool,
    schedules: bool,
    /// A task notice was withheld: a presence notice is due unless one went out lately.
    withheld: bool,
    stop: bool,
}

impl OwedState {
    /// Takes what is owed (the caller waited until something is): a task notice withheld while
    /// the pool keeps up (unless stopping, when everything withheld is sent).
    fn take(&mut self) -> Turn {
        let withhold = self.tasks && self.keeping_up && !self.stop;
        if withhold {
            self.withheld = true;
        }
        let tasks = (self.tasks && !withhold) || (self.stop && self.withheld);
        if tasks {
            self.withheld = false;
        }
        let turn = Turn {
            tasks,
            schedules: self.schedules,
            withheld: withhold,
            stop: self.stop,
        };
        (self.tasks, self.schedules) = (false, false);
        turn
    }
}

impl Notifier {
    /// Starts the `store-notifier` thread, sending on connections of `pool` as node `node`.
    pub fn spawn(pool: PgPool, link: Arc<Link>, node: String) -> std::io::Result<Notifier> {
        let owed = Arc::new(Owed::default());
        let thread = {
            let owed = owed.clone();
            std::thread::Builder::new()
                .name("store-notifier".into())
                .spawn(move || send_owed(&pool, &link, &owed, &node))?
        };
        Ok(Notifier {
            owed,
            thread: Some(thread),
        })
    }

    /// Where the delivery pool reports whether it keeps up: task notices are withheld while it
    /// does (above).
    pub fn keeping_up(&self) -> KeepingUp {
        let owed = self.owed.clone();
        KeepingUp::new(move |keeping_up| owed.set_keeping_up(keeping_up))
    }

    /// Marks the channels a committed write made owed (`tasks`: a task became due;
    /// `schedules`: a schedule changed).
    pub fn owe(&self, tasks: bool, schedules: bool) {
        if !tasks && !schedules {
            return;
        }
        let mut state = self.owed.lock();
        state.tasks |= tasks;
        state.schedules |= schedules;
        self.owed.marked.notify_one();
    }

    /// Sends what is still owed and stops the thread, waiting for it.
    pub fn stop(&mut self) {
        self.owed.lock().stop = true;
        self.owed.marked.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The `store-notifier` loop: waits until something is owed, sends it, pauses [`NOTICE_GAP`].
fn send_owed(pool: &PgPool, link: &Link, owed: &Owed, node: &str) {
    // Any notice counts the node among the other nodes' peers.
    let mut last_notice: Option<Instant> = None;
    loop {
        let taken = {
            let mut state = owed.lock();
            while !state.tasks && !state.schedules && !state.stop {
                state = owed.marked.wait(state).unwrap_or_else(|e| e.into_inner());
            }
            state.take()
        };
        let present = taken.withheld
            && !taken.tasks
            && !taken.schedules
            && last_notice.is_none_or(|at| at.elapsed() >= PRESENCE_EVERY);
        let channels = [
            (taken.tasks, Channel::Tasks),
            (taken.schedules, Channel::Schedules),
            (present, Channel::Nodes),
        ];
        let mut channels = channels.into_iter().filter(|(owed, _)| *owed).peekable();
        if channels.peek().is_some() {
            last_notice = Some(Instant::now());
            match super::checkout(pool, link, None) {
                Ok(mut conn) => {
                    let (client, statements) = conn.split();
                    let mut sql = Sql::new(client, Some(statements));
                    for (_, channel) in channels {
                        if let Err(e) = notify(&mut sql, channel, node) {
                            tracing::warn!(error = %e, channel = channel.name(), "could not tell the other nodes of a change (they find it at their next poll)");
                        }
                    }
                }
                Err(why) => {
                    tracing::warn!(error = %why, "could not tell the other nodes of a change (they find it at their next poll)");
                }
            }
        }
        if taken.stop {
            return;
        }
        std::thread::sleep(NOTICE_GAP);
    }
}

/// Calls the wake of `channel`.
fn wake(wakers: &Wakers, channel: Channel) {
    match channel {
        Channel::Tasks => (wakers.tasks)(),
        Channel::Schedules => (wakers.schedules)(),
        Channel::Nodes => {}
    }
}

/// How long the listener blocks waiting for notices before it looks at its stop flag.
const TICK: Duration = Duration::from_secs(1);
/// A silent connection is checked with a round trip this often (a peer that vanished without
/// closing the socket would otherwise go unnoticed).
const CHECK_EVERY: Duration = Duration::from_secs(15);
/// First and largest pause between reconnection attempts (doubling in between).
const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(10);

/// The running `store-listener` thread.
pub struct Listener {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

impl Listener {
    /// Starts the `store-listener` thread of node `node` on its own connection to `url`. It
    /// connects in the background and marks `cap` listening while connected (so sleeps are
    /// capped until then and whenever the connection is down). Notices `node` sent itself wake
    /// nothing; the other nodes heard from within [`PEER_FRESH`] are counted in `peers`.
    /// Errors only when the thread cannot be started.
    pub fn spawn(
        url: &PgUrl,
        node: &str,
        wakers: Wakers,
        cap: &IdleCap,
        peers: &Peers,
    ) -> std::io::Result<Listener> {
        let stop = Arc::new(AtomicBool::new(false));
        let (url, stopping, listening) = (url.clone(), stop.clone(), cap.listening_flag());
        let mut heard = Heard::new(node, peers.clone());
        let thread = std::thread::Builder::new()
            .name("store-listener".into())
            .spawn(move || run(&url, &mut heard, &wakers, &stopping, &listening))?;
        Ok(Listener { stop, thread })
    }

    /// Stops the thread (within about a second) and waits for it.
    pub fn stop(self) {
        self.stop.store(true, Ordering::Release);
        self.thread.thread().unpark();
        let _ = self.thread.join();
    }
}

/// The listener loop: connect and `LISTEN`, deliver notices until the connection fails,
/// reconnect with backoff. After every (re)connection both wakes fire once, since notices sent
/// while no connection listened are lost.
fn run(url: &PgUrl, heard: &mut Heard, wakers: &Wakers, stop: &AtomicBool, listening: &AtomicBool) {
    let mut backoff = BACKOFF_MIN;
    let mut failures = 0u32;
    while !stop.load(Ordering::Acquire) {
        match subscribe(url) {
            Ok(mut client) => {
                if failures > 0 {
                    tracing::info!(url = %url, "PostgreSQL listener connected again");
                } else {
                    tracing::debug!(url = %url, "PostgreSQL listener connected");
                }
                listening.store(true, Ordering::Release);
                wake(wakers, Channel::Tasks);
                wake(wakers, Channel::Schedules);
                backoff = BACKOFF_MIN;
                failures = 0;
                let why = listen(&mut client, heard, wakers, stop);
                listening.store(false, Ordering::Release);
                heard.forget();
                match why {
                    Ok(()) => return,
                    Err(e) => tracing::warn!(
                        error = %format!("{e:#}"),
                        "PostgreSQL listener lost its connection; polling until it is back"
                    ),
                }
            }
            Err(e) => {
                failures += 1;
                // The first failure and then every tenth: a long outage does not flood the log.
                if failures % 10 == 1 {
                    tracing::warn!(
                        error = %format!("{e:#}"),
                        attempts = failures,
                        "PostgreSQL listener cannot LISTEN; polling meanwhile"
                    );
                }
                pause(backoff, stop);
                backoff = (backoff * 2).min(BACKOFF_MAX);
            }
        }
    }
}

/// The `application_name` of the listener's connection, unless the URL sets one: operators
/// see it in `pg_stat_activity`.
pub const APPLICATION_NAME: &str = "webhookd-listener";

/// A new connection listening on the three channels.
fn subscribe(url: &PgUrl) -> anyhow::Result<postgres::Client> {
    let mut config = url.config().clone();
    if config.get_application_name().is_none() {
        config.application_name(APPLICATION_NAME);
    }
    let mut client = connect_with(url, config)?;
    client.batch_execute(&format!(
        "LISTEN {}; LISTEN {}; LISTEN {}",
        Channel::Tasks.name(),
        Channel::Schedules.name(),
        Channel::Nodes.name()
    ))?;
    Ok(client)
}

/// Calls the wakes for other nodes' notices until `stop` (Ok) or the connection fails (Err).
/// A node's own notice is passed over: the commit it announces woke this node's loops in
/// process already, and waking them again would cost a round that finds the work claimed.
fn listen(
    client: &mut postgres::Client,
    heard: &mut Heard,
    wakers: &Wakers,
    stop: &AtomicBool,
) -> anyhow::Result<()> {
    let mut checked = Instant::now();
    while !stop.load(Ordering::Acquire) {
        let mut heard_any = false;
        {
            let mut notices = client.notifications();
            let mut iter = notices.timeout_iter(TICK);
            while let Some(notice) = iter.next()? {
                heard_any = true;
                let own = heard.from(notice.payload());
                let channel = Channel::from_name(notice.channel());
                if let (false, Some(channel @ (Channel::Tasks | Channel::Schedules))) =
                    (own, channel)
                {
                    // At debug: what woke a loop is visible (tests count these lines).
                    tracing::debug!(channel = channel.name(), "woken by a notice");
                    wake(wakers, channel);
                }
                if stop.load(Ordering::Acquire) {
                    return Ok(());
                }
            }
        }
        if client.is_closed() {
            anyhow::bail!("the connection was closed");
        }
        heard.count(Instant::now());
        if heard_any {
            checked = Instant::now();
        } else if checked.elapsed() >= CHECK_EVERY {
            client.is_valid(Duration::from_secs(5))?;
            checked = Instant::now();
        }
    }
    Ok(())
}

/// A node is counted in [`Peers`] while its last notice is younger than this (a node sends at
/// most one per [`NOTICE_GAP`] while it makes work due; one that stopped publishing, or died,
/// drops out after it).
pub const PEER_FRESH: Duration = Duration::from_secs(2);

/// The nodes a listener heard from, each with the time of its last notice (a node's notices
/// carry its id; nodes of a version that sent none count as one, the empty id).
struct Heard {
    node: String,
    last: HashMap<String, Instant>,
    counted: Instant,
    peers: Peers,
}

impl Heard {
    fn new(node: &str, peers: Peers) -> Heard {
        Heard {
            node: node.to_string(),
            last: HashMap::new(),
            counted: Instant::now(),
            peers,
        }
    }

    /// Notes a notice from `sender`; true when it is this node's own.
    fn from(&mut self, sender: &str) -> bool {
        if sender == self.node {
            return true;
        }
        let now = Instant::now();
        match self.last.get_mut(sender) {
            Some(last) => *last = now,
            None => {
                self.last.insert(sender.to_string(), now);
                self.publish();
            }
        }
        if now.duration_since(self.counted) >= PEER_FRESH {
            self.count(now);
        }
        false
    }

    /// Drops the nodes not heard from within [`PEER_FRESH`] and publishes the count.
    fn count(&mut self, now: Instant) {
        self.last
            .retain(|_, last| now.duration_since(*last) < PEER_FRESH);
        self.counted = now;
        self.publish();
    }

    /// Sets [`Peers`] to the nodes heard from, logged (at debug) when that changes.
    fn publish(&mut self) {
        let n = self.last.len();
        if self.peers.count() != n {
            tracing::debug!(peers = n, "other nodes heard from");
            self.peers.set(n);
        }
    }

    /// The connection is down: nobody is heard from until it is back.
    fn forget(&mut self) {
        self.last.clear();
        self.publish();
    }
}

/// Sleeps `pause` unless `stop` is set meanwhile ([`Listener::stop`] unparks the thread).
fn pause(pause: Duration, stop: &AtomicBool) {
    let until = Instant::now() + pause;
    while !stop.load(Ordering::Acquire) {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        std::thread::park_timeout(left);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channel_names_round_trip() {
        for channel in [Channel::Tasks, Channel::Schedules] {
            assert_eq!(Channel::from_name(channel.name()), Some(channel));
        }
        assert_eq!(Channel::from_name("other"), None);
    }

    #[test]
    fn task_notices_are_withheld_while_the_pool_keeps_up_and_owed_again_when_it_falls_behind() {
        let owed = Owed::default();
        let take = |owed: &Owed| owed.lock().take();
        let sent = Turn {
            tasks: true,
            ..Turn::default()
        };
        // Until the pool says it keeps up: sent as before.
        owed.lock().tasks = true;
        assert_eq!(take(&owed), sent);
        owed.set_keeping_up(true);
        owed.lock().tasks = true;
        let withheld = Turn {
            withheld: true,
            ..Turn::default()
        };
        assert_eq!(take(&owed), withheld);
        // A schedule notice is never withheld (the scheduler is not the pool).
        (owed.lock().tasks, owed.lock().schedules) = (true, true);
        assert_eq!(
            take(&owed),
            Turn {
                schedules: true,
                withheld: true,
                ..Turn::default()
            }
        );
        // Behind: what was withheld is owed again, without a new write.
        owed.set_keeping_up(false);
        assert!(owed.lock().tasks);
        assert_eq!(take(&owed), sent);
        // Nothing withheld since: falling behind again owes nothing.
        owed.set_keeping_up(true);
        owed.set_keeping_up(false);
        assert!(!owed.lock().tasks);
        // Stopping sends what was withheld.
        owed.set_keeping_up(true);
        owed.lock().tasks = true;
        assert_eq!(take(&owed), withheld);
        owed.lock().stop = true;
        assert_eq!(
            take(&owed),
            Turn {
                tasks: true,
                stop: true,
                ..Turn::default()
            }
        );
    }
}
