//! Isolation (issue 19): endpoints that accept connections and never answer must not take the
//! delivery capacity of another app, nor of a healthy endpoint of their own app, and test
//! deliveries are bounded per app (429 `42901`). Each case first waits until the hanging
//! endpoints hold every send they may (the state in which, before, 4 of them held all 16
//! workers), then counts what reaches the healthy receiver: all of it must arrive.

use crate::delivery::{endpoint, policy, task_id};
use crate::support::{Receiver, TestServer, err, ok, wait_for};
use serde_json::json;
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use webhookd::client::Client;

/// Generous: the property is counted, the limit only stops a broken build from hanging.
const WAIT: Duration = Duration::from_secs(60);
/// Far beyond the test: a hanging send never ends while it runs.
const HANG_MS: i64 = 120_000;
/// Deliveries sent to the healthy side in each case.
const HEALTHY: usize = 30;
/// The default cap of sends per endpoint with the test server's 16 workers.
const CAP: usize = 4;

/// A loopback listener that accepts every connection and never answers, on one thread;
/// dropping it closes them all.
struct Hanging {
    url: String,
    held: Arc<Mutex<Vec<TcpStream>>>,
    stop: Arc<AtomicBool>,
}

impl Hanging {
    fn start() -> Hanging {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        let held: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (h, s) = (held.clone(), stop.clone());
        std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => h.lock().unwrap().push(stream),
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Hanging { url, held, stop }
    }

    /// Connections held open so far.
    fn held(&self) -> usize {
        self.held.lock().unwrap().len()
    }

    /// Waits until `n` connections are held (every hanging endpoint at its cap).
    fn wait_held(&self, n: usize) {
        let held = wait_for(WAIT, || (self.held() >= n).then_some(()));
        assert!(
            held.is_some(),
            "{} of {n} hanging sends started",
            self.held()
        );
    }
}

impl Drop for Hanging {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.held.lock().unwrap().clear();
    }
}

/// The server's defaults (16 senders kept, a default cap of 4 sends per endpoint: before, 4
/// hanging endpoints held every worker) with no grace for the hanging sends at the end.
fn server() -> TestServer {
    TestServer::start_with(|c| {
        c.workers = 16;
        c.shutdown_grace_secs = 0;
    })
}

/// `n` endpoints of `c`'s app at the hanging listener, each given enough tasks to fill its
/// cap of 4 sends, the rest claimed behind them. Returns how many sends they hold
/// once all started.
fn hang(c: &Client, hanging: &Hanging, n: usize) -> usize {
    for _ in 0..n {
        let id = endpoint(c, &hanging.url, json!({ "timeout_ms": HANG_MS }));
        for _ in 0..10 {
            task_id(c, id);
        }
    }
    n * CAP
}

/// Publishes `n` `order.created` events.
fn publish(c: &Client, n: usize) {
    for i in 0..n {
        let event = json!({ "event_name": "order.created", "payload": { "n": i } });
        ok(c, "POST", "/events", Some(event));
    }
}

/// Sends [`HEALTHY`] tasks to `receiver` through a new endpoint of `c`'s app and asserts that
/// every one arrives.
fn all_arrive(c: &Client, receiver: &Receiver, what: &str) {
    let id = endpoint(c, &receiver.url, json!({}));
    for _ in 0..HEALTHY {
        task_id(c, id);
    }
    let got = receiver.wait_for(HEALTHY, WAIT).len();
    assert_eq!(
        got, HEALTHY,
        "{what}: {got} of {HEALTHY} deliveries arrived"
    );
}

fn other_app_is_served_beside(hanging_endpoints: usize) {
    let server = server();
    let (a, b) = (server.client(), server.client_for_app("app2"));
    let hanging = Hanging::start();
    let holds = hang(&a, &hanging, hanging_endpoints);
    hanging.wait_held(holds);
    all_arrive(
        &b,
        &Receiver::start(),
        &format!("another app beside {hanging_endpoints} hanging endpoints"),
    );
    assert_eq!(hanging.held(), holds, "each hanging endpoint holds its cap");
    server.stop();
}

fn sibling_is_served_beside(hanging_endpoints: usize) {
    let server = server();
    let a = server.client();
    let hanging = Hanging::start();
    let holds = hang(&a, &hanging, hanging_endpoints);
    hanging.wait_held(holds);
    all_arrive(
        &a,
        &Receiver::start(),
        &format!("an endpoint beside {hanging_endpoints} hanging siblings"),
    );
    server.stop();
}

#[test]
fn another_app_gets_every_delivery_while_one_app_has_4_hanging_endpoints() {
    other_app_is_served_beside(4);
}

#[test]
fn another_app_gets_every_delivery_while_one_app_has_16_hanging_endpoints() {
    other_app_is_served_beside(16);
}

#[test]
fn a_healthy_endpoint_gets_every_delivery_beside_4_hanging_siblings() {
    sibling_is_served_beside(4);
}

#[test]
fn a_healthy_endpoint_gets_every_delivery_beside_16_hanging_siblings() {
    sibling_is_served_beside(16);
}

#[test]
fn a_healthy_endpoint_has_its_full_cap_and_every_delivery_beside_100_hanging_siblings() {
    // The probe's case: 100 endpoints of one app that never answer (`timeout_ms` 300 s, a
    // policy of 100 attempts at 0 s), subscribed to the same events as a healthy sibling.
    const SIBLINGS: usize = 100;
    let server = server();
    let a = server.client();
    let hanging = Hanging::start();
    let hammer = policy(&a, 100, "fixed", 0, 0);
    for _ in 0..SIBLINGS {
        let hangs = json!({ "timeout_ms": 300_000, "retry_policy_id": hammer,
            "filter_events": "order.*" });
        endpoint(&a, &hanging.url, hangs);
    }
    // 5 tasks each, 4 of them sent: every hanging sibling at its cap.
    publish(&a, 5);
    hanging.wait_held(SIBLINGS * CAP);
    // The healthy sibling's receiver is bound but not answering yet: its sends connect and
    // wait, so how many it may have under way at once shows as its running tasks.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let healthy = endpoint(
        &a,
        &url,
        json!({ "timeout_ms": HANG_MS, "filter_events": "order.*" }),
    );
    publish(&a, HEALTHY);
    let running = format!("/tasks?endpoint_id={healthy}&status=running");
    let count = || ok(&a, "GET", &running, None)["total"].as_u64().unwrap();
    let full = wait_for(WAIT, || (count() == CAP as u64).then_some(()));
    assert!(
        full.is_some(),
        "the healthy sibling has {} sends under way, not its cap of {CAP}",
        count()
    );
    let receiver = Receiver::start_on(listener);
    let got = receiver.wait_for(HEALTHY, WAIT).len();
    assert_eq!(
        got, HEALTHY,
        "{got} of {HEALTHY} deliveries reached the healthy sibling"
    );
    assert_eq!(
        hanging.held(),
        SIBLINGS * CAP,
        "each hanging sibling holds its {CAP} sends and starts no more"
    );
    server.stop();
}

#[test]
fn one_app_holds_at_most_twice_its_share_and_its_siblings_still_start() {
    // A share of 8: 6 hanging endpoints want 6 x 4 sends. Two fill the share; then each other
    // endpoint may start up to its fair part of the reserve (as large as the share): 8 divided
    // by the app's endpoints with sends under way, at least one. The app holds at most 16,
    // and a healthy sibling and another app are served.
    let server = TestServer::start_with(|c| {
        c.workers = 16;
        c.shutdown_grace_secs = 0;
        c.app_max_in_flight = 8;
    });
    let (a, b) = (server.client(), server.client_for_app("app2"));
    let hanging = Hanging::start();
    hang(&a, &hanging, 6);
    // Whichever endpoints filled the share, every one of the 6 gets to start.
    hanging.wait_held(6);
    let running = || {
        ok(&a, "GET", "/tasks?status=running", None)["total"]
            .as_i64()
            .unwrap()
    };
    assert!(
        (9..=16).contains(&running()),
        "{} claimed: the share of 8, then one from the reserve per endpoint with none",
        running()
    );
    all_arrive(&a, &Receiver::start(), "a sibling of 6 hanging endpoints");
    all_arrive(&b, &Receiver::start(), "another app");
    assert!(running() <= 16, "{} claimed", running());
    assert!(hanging.held() <= 16, "{} hanging sends", hanging.held());
    server.stop();
}

#[test]
fn test_deliveries_are_bounded_per_app_and_another_app_is_not_held_up() {
    let server = server();
    let (a, b) = (server.client(), server.client_for_app("app2"));
    let hanging = Hanging::start();
    let stuck = endpoint(&a, &hanging.url, json!({ "timeout_ms": HANG_MS }));
    let path = format!("/endpoints/{stuck}/test");
    // The bound: 8 test deliveries in flight per app; each of these waits for the receiver.
    // One key each: the same signed request twice in a second would be a replay.
    let waiting: Vec<_> = (0..8)
        .map(|_| {
            let (c, path) = (server.client_for_app("app1"), path.clone());
            std::thread::spawn(move || c.send("POST", &path, None).expect("request sent"))
        })
        .collect();
    // Their tasks exist once they are counted; 4 are sent (the endpoint's cap), 4 wait.
    let tasks = format!("/tasks?endpoint_id={stuck}");
    let counted = wait_for(WAIT, || {
        (ok(&a, "GET", &tasks, None)["total"] == 8).then_some(())
    });
    assert!(
        counted.is_some(),
        "8 test deliveries were never under way: {}",
        ok(&a, "GET", &tasks, None)
    );
    hanging.wait_held(4);
    let refused = err(&a, "POST", &path, None, 429, 42901);
    assert!(
        refused.body["message"]
            .as_str()
            .unwrap()
            .contains("8 test deliveries"),
        "{:?}",
        refused.body
    );
    assert_eq!(
        ok(&a, "GET", &tasks, None)["total"],
        8,
        "a refused test makes no task"
    );
    // Another app's test delivery is neither refused nor held up.
    let healthy = Receiver::start();
    let other = endpoint(&b, &healthy.url, json!({}));
    let reply = ok(&b, "POST", &format!("/endpoints/{other}/test"), None);
    assert_eq!(reply["attempt"]["status_code"], 200, "{reply}");
    // Closing the hanging connections ends the 8: each answers 200 with its failed attempt.
    drop(hanging);
    for handle in waiting {
        let reply = handle.join().unwrap();
        assert_eq!(reply.status, 200, "{:?}", reply.body);
        assert!(
            reply.body["data"]["attempt"]["status_code"].is_null(),
            "{:?}",
            reply.body
        );
    }
    // The bound is free again.
    let healthy_a = Receiver::start();
    let fine = endpoint(&a, &healthy_a.url, json!({}));
    let reply = ok(&a, "POST", &format!("/endpoints/{fine}/test"), None);
    assert_eq!(reply["attempt"]["status_code"], 200, "{reply}");
    server.stop();
}

/// An endpoint whose stored row cannot be read (headers made invalid JSON by hand; the API
/// refuses such input) stops its own deliveries only: its sibling in the same app gets every
/// event, the damaged one none, and reading it answers an internal error naming the column
/// (docs/operations.md, "A stored value webhookd cannot read"). Before, one such row failed
/// every delivery round.
#[test]
fn an_endpoint_whose_row_cannot_be_read_stops_only_its_own_deliveries() {
    let server = TestServer::start();
    let c = server.client();
    let (healthy, damaged) = (Receiver::start(), Receiver::start());
    ok(
        &c,
        "POST",
        "/v1/endpoints",
        Some(json!({"name": "h", "url": healthy.url})),
    );
    let damaged_id = ok(
        &c,
        "POST",
        "/v1/endpoints",
        Some(json!({"name": "d", "url": damaged.url})),
    )["id"]
        .as_i64()
        .unwrap();
    let mut raw = crate::support::Db::open(&server.db);
    raw.execute(
        &format!("UPDATE endpoints SET headers = 'x' WHERE id = {damaged_id}"),
        &[],
    );
    for n in 0..3 {
        ok(
            &c,
            "POST",
            "/v1/events",
            Some(json!({"event_name": "e", "payload": {"n": n}})),
        );
    }
    let arrived = healthy.wait_for(3, WAIT);
    assert_eq!(
        arrived.len(),
        3,
        "the healthy sibling got {} of 3",
        arrived.len()
    );
    assert!(damaged.received().is_empty());
    err(
        &c,
        "GET",
        &format!("/v1/endpoints/{damaged_id}"),
        None,
        500,
        50001,
    );
    // The damaged endpoint's tasks wait: none was sent or failed.
    let tasks = ok(
        &c,
        "GET",
        &format!("/v1/tasks?endpoint_id={damaged_id}"),
        None,
    );
    assert_eq!(tasks["total"], 3, "{tasks}");
    assert!(
        tasks["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["attempts"] == 0),
        "{tasks}"
    );
}
