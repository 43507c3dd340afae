//! Multi-resource locks (`acquire_all`) against real servers, each test
//! starting its own: etcd (`edgelock_devtools::EtcdServer`), one Redis node
//! through the Upstash gateway, and Redlock on three nodes (mixed
//! protocols). Every client is built by `BackendSpec::build`, the
//! constructor every binding uses, so `MultiLock` is the one users get.
//!
//! For each backend: a set of three names comes back as three locks in the
//! caller's order, each with its own fencing token, increasing per name; a
//! conflicting `Try` returns `None` and leaves nothing held; a wait that
//! runs out leaves nothing held, and so does a cancel while the group waits
//! for its second name; three clients asking 20 times each for
//! overlapping sets in different orders all finish (no deadlock) with
//! mutual exclusion per name and increasing tokens per name; bad sets are
//! `INVALID_ARGUMENT` before any request.
//!
//! etcd takes a set of free names in one transaction (`sets.rs`): an
//! uncontended set costs exactly one txn request whatever the wait, each
//! lock being an ordinary one (extended, inspected, released by itself);
//! a `Try` against a set partly held (by a lock of any kind) costs one
//! txn and takes nothing, not even for a moment.
//!
//! One Redis node through webdis (a standalone redis-server, so
//! `cross_slot_scripts` is on) takes a set of free names in one script
//! (`ACQUIRE_SET`): the same suite runs there too, an uncontended set costs
//! exactly one request, and a `Try` against a set partly held costs one and
//! takes nothing. Through the Upstash gateway (the option off by default)
//! the names go one by one.
#![cfg(feature = "native")]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use edgelock::core::etcd::EtcdConfig;
use edgelock::core::redis::{RedisConfig, RedlockConfig};
use edgelock::core::LockStatus;
use edgelock::core::*;
use edgelock::native::{AsyncClient, CancelToken, Client, OsEntropy};
use edgelock_devtools::EtcdServer;

mod common;
use common::redis_node::Node;

const TOKEN: &str = "multi-lock-test-token-0123456789";

/// The servers of one backend, kept alive for the test.
enum Servers {
    Etcd(Box<EtcdServer>),
    Redis(Box<Node>),
    /// One node through webdis: one script may take a whole set
    /// (`cross_slot_scripts`, on by default there).
    RedisWebdis(Box<Node>),
    Redlock(Vec<Node>),
}

impl Servers {
    fn etcd() -> Servers {
        Servers::Etcd(Box::new(EtcdServer::start().expect("start etcd")))
    }
    fn redis() -> Servers {
        Servers::Redis(Box::new(Node::start(TOKEN)))
    }
    fn redis_webdis() -> Servers {
        Servers::RedisWebdis(Box::new(Node::start(TOKEN)))
    }
    fn redlock() -> Servers {
        Servers::Redlock((0..3).map(|_| Node::start(TOKEN)).collect())
    }

    fn spec(&self) -> BackendSpec {
        match self {
            Servers::Etcd(e) => BackendSpec::Etcd(EtcdConfig::new(vec![e.url()])),
            Servers::Redis(n) => {
                let mut cfg = RedisConfig::new(n.via_upstash());
                cfg.retry_delay_ms = 50;
                BackendSpec::Redis(cfg)
            }
            Servers::RedisWebdis(n) => {
                let mut cfg = RedisConfig::new(n.via_webdis());
                assert!(cfg.cross_slot_scripts, "the webdis default");
                cfg.retry_delay_ms = 50;
                BackendSpec::Redis(cfg)
            }
            Servers::Redlock(nodes) => {
                let mut cfg = RedlockConfig::new(
                    nodes
                        .iter()
                        .enumerate()
                        .map(|(i, n)| {
                            if i % 2 == 0 {
                                n.via_upstash()
                            } else {
                                n.via_webdis()
                            }
                        })
                        .collect(),
                );
                cfg.retry_delay_ms = 50;
                BackendSpec::Redlock(cfg)
            }
        }
    }

    fn client(&self) -> Client {
        Client::connect(self.spec()).expect("client")
    }

    /// A client built the same way, counting the requests it sends.
    fn counting_client(&self) -> (Client, Arc<AtomicUsize>) {
        let machine = self.spec().build(Box::new(OsEntropy)).expect("machine");
        common::counting_client(machine)
    }
}

fn opts(wait: Wait) -> AcquireOptions {
    AcquireOptions { wait, ttl_ms: None }
}

/// Whether anyone holds `name`, asked of the backend by a fresh client.
fn held(observer: &Client, name: &str) -> bool {
    observer.inspect(name).expect("inspect").held
}

/// Polls until `name` is held (at most 15 s).
fn wait_until_held(observer: &Client, name: &str) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !held(observer, name) {
        assert!(Instant::now() < deadline, "{name} never taken");
        thread::sleep(Duration::from_millis(10));
    }
}

fn three_names_come_back_as_three_locks(servers: Servers) {
    let c = servers.client();
    let names = ["m-c", "m-a", "m-b"];
    let locks = c
        .acquire_all(&names, opts(Wait::Try), None)
        .expect("acquire_all")
        .expect("granted");
    let got: Vec<&str> = locks.iter().map(|l| l.name()).collect();
    assert_eq!(got, names, "the caller's order");
    let first: BTreeMap<String, u64> = locks
        .iter()
        .map(|l| (l.name().to_string(), l.fencing_token()))
        .collect();
    assert!(first.values().all(|t| *t > 0), "{first:?}");
    if matches!(servers, Servers::Etcd(_)) {
        // One transaction for the whole set: one revision for every name.
        let canonical: Vec<u64> = first.values().copied().collect();
        assert!(canonical.windows(2).all(|w| w[0] == w[1]), "{first:?}");
    }
    let observer = servers.client();
    for n in names {
        assert!(held(&observer, n), "{n}");
    }
    // Each lock is an ordinary lock: released one by one.
    for l in locks {
        assert!(l.release().expect("release"));
    }
    for n in names {
        assert!(!held(&observer, n), "{n}");
    }
    // A second round: every name's token increases.
    let again = c
        .acquire_all(&["m-a", "m-b", "m-c"], opts(Wait::For(5_000)), None)
        .expect("acquire_all")
        .expect("granted");
    for l in &again {
        assert!(
            l.fencing_token() > first[l.name()],
            "{}: {} after {}",
            l.name(),
            l.fencing_token(),
            first[l.name()]
        );
    }
    for l in again {
        l.release().expect("release");
    }
}

fn a_conflicting_try_returns_none_and_leaves_nothing_held(servers: Servers) {
    let (holder, other, observer) = (servers.client(), servers.client(), servers.client());
    let b = holder
        .acquire("t-b", Some(Duration::from_secs(5)))
        .expect("plain acquire");
    // t-a is taken first (canonical order), then t-b is found held.
    let r = other
        .acquire_all(&["t-c", "t-b", "t-a"], opts(Wait::Try), None)
        .expect("acquire_all");
    assert!(r.is_none());
    assert!(!held(&observer, "t-a"), "t-a was released before None");
    assert!(!held(&observer, "t-c"), "t-c was never taken");
    assert!(held(&observer, "t-b"));
    b.release().expect("release");
    let locks = other
        .acquire_all(&["t-c", "t-b", "t-a"], opts(Wait::Try), None)
        .expect("acquire_all")
        .expect("free now");
    assert_eq!(locks.len(), 3);
}

fn a_wait_that_runs_out_leaves_nothing_held(servers: Servers) {
    let (holder, other, observer) = (servers.client(), servers.client(), servers.client());
    let z = holder
        .acquire("w-z", Some(Duration::from_secs(5)))
        .expect("plain acquire");
    let start = Instant::now();
    let e = other
        .acquire_all(&["w-z", "w-y", "w-x"], opts(Wait::For(800)), None)
        .map(|r| r.map(|l| l.len()))
        .expect_err("times out");
    let took = start.elapsed();
    assert_eq!(e.code(), "TIMEOUT", "{e}");
    assert!(took >= Duration::from_millis(700), "{took:?}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert!(!held(&observer, "w-x"));
    assert!(!held(&observer, "w-y"));
    z.release().expect("release");
    assert!(!held(&observer, "w-z"));
}

fn a_cancel_while_waiting_midway_leaves_nothing_held(servers: Servers) {
    let (holder, other, observer) = (servers.client(), servers.client(), servers.client());
    let y = holder
        .acquire("k-y", Some(Duration::from_secs(5)))
        .expect("plain acquire");
    let token = CancelToken::new();
    // Cancelled once k-x is taken (midway by construction, not by a pause).
    let canceller = {
        let (token, watcher) = (token.clone(), servers.client());
        thread::spawn(move || {
            wait_until_held(&watcher, "k-x");
            token.cancel();
        })
    };
    // k-x is taken, then the group waits for k-y until cancelled.
    let e = other
        .acquire_all(&["k-y", "k-x"], opts(Wait::Forever), Some(&token))
        .map(|r| r.map(|l| l.len()))
        .expect_err("cancelled");
    canceller.join().unwrap();
    assert_eq!(e.code(), "ABORTED", "{e}");
    assert!(!held(&observer, "k-x"), "k-x was released");
    assert!(held(&observer, "k-y"));
    y.release().expect("release");
    let locks = other
        .acquire_all(&["k-y", "k-x"], opts(Wait::Try), None)
        .expect("acquire_all")
        .expect("nothing of the cancelled group is in the way");
    assert_eq!(locks.len(), 2);
}

fn overlapping_sets_in_any_order_never_deadlock(servers: Servers) {
    let sets: [&[&str]; 3] = [
        &["o-a", "o-b", "o-c"],
        &["o-c", "o-b", "o-a"],
        &["o-b", "o-d", "o-a"],
    ];
    const ROUNDS: usize = 20;
    let holders: Arc<BTreeMap<&str, AtomicI32>> = Arc::new(
        ["o-a", "o-b", "o-c", "o-d"]
            .into_iter()
            .map(|n| (n, AtomicI32::new(0)))
            .collect(),
    );
    let tokens: Arc<Mutex<BTreeMap<String, Vec<u64>>>> = Arc::default();
    let start = Instant::now();
    let threads: Vec<_> = sets
        .iter()
        .map(|set| {
            let client = servers.client();
            let set: Vec<&'static str> = set.to_vec();
            let (holders, tokens) = (holders.clone(), tokens.clone());
            thread::spawn(move || {
                for round in 0..ROUNDS {
                    let locks = client
                        .acquire_all(&set, opts(Wait::For(30_000)), None)
                        .unwrap_or_else(|e| panic!("{set:?} round {round}: {e}"))
                        .expect("a waiting acquire is granted");
                    for l in &locks {
                        let before = holders[l.name()].fetch_add(1, Ordering::SeqCst);
                        assert_eq!(before, 0, "{} held twice at once", l.name());
                        tokens
                            .lock()
                            .unwrap()
                            .entry(l.name().to_string())
                            .or_default()
                            .push(l.fencing_token());
                    }
                    thread::sleep(Duration::from_millis(2));
                    for l in &locks {
                        holders[l.name()].fetch_sub(1, Ordering::SeqCst);
                    }
                    for l in locks {
                        assert!(l.release().expect("release"), "held until released");
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("a client thread failed");
    }
    assert!(start.elapsed() < Duration::from_secs(120));
    let tokens = tokens.lock().unwrap();
    let mut total = 0;
    for (name, ts) in tokens.iter() {
        total += ts.len();
        assert!(
            ts.windows(2).all(|w| w[0] < w[1]),
            "{name}: tokens must increase in hold order: {ts:?}"
        );
    }
    // a and b are in every set, c in two, d in one.
    assert_eq!(tokens["o-a"].len(), 3 * ROUNDS);
    assert_eq!(tokens["o-b"].len(), 3 * ROUNDS);
    assert_eq!(tokens["o-c"].len(), 2 * ROUNDS);
    assert_eq!(tokens["o-d"].len(), ROUNDS);
    assert_eq!(total, 9 * ROUNDS);
}

fn bad_sets_are_refused_before_any_request(servers: Servers) {
    let (c, sent) = servers.counting_client();
    // Warm up (etcd grants its session lease on first use).
    c.inspect("warm").expect("inspect");
    let before = sent.load(Ordering::SeqCst);
    let many: Vec<String> = (0..=MAX_ACQUIRE_ALL).map(|i| format!("n{i}")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    let cases: [&[&str]; 5] = [&[], &["a", "b", "a"], &many, &["a", "", "b"], &["a", "b\0"]];
    for names in cases {
        let e = c
            .acquire_all(names, opts(Wait::Try), None)
            .map(|r| r.map(|l| l.len()))
            .expect_err("refused");
        assert_eq!(e.code(), "INVALID_ARGUMENT", "{names:?}: {e}");
    }
    assert_eq!(sent.load(Ordering::SeqCst), before, "no request sent");
    // The client still works afterwards.
    let locks = c
        .acquire_all(&["a", "b"], opts(Wait::Try), None)
        .expect("acquire_all")
        .expect("granted");
    assert_eq!(locks.len(), 2);
    assert!(sent.load(Ordering::SeqCst) > before);
}

#[test]
fn etcd_three_names_come_back_as_three_locks() {
    three_names_come_back_as_three_locks(Servers::etcd());
}
#[test]
fn etcd_a_conflicting_try_returns_none_and_leaves_nothing_held() {
    a_conflicting_try_returns_none_and_leaves_nothing_held(Servers::etcd());
}
#[test]
fn etcd_a_wait_that_runs_out_leaves_nothing_held() {
    a_wait_that_runs_out_leaves_nothing_held(Servers::etcd());
}
#[test]
fn etcd_a_cancel_while_waiting_midway_leaves_nothing_held() {
    a_cancel_while_waiting_midway_leaves_nothing_held(Servers::etcd());
}
#[test]
fn etcd_overlapping_sets_in_any_order_never_deadlock() {
    overlapping_sets_in_any_order_never_deadlock(Servers::etcd());
}
#[test]
fn etcd_bad_sets_are_refused_before_any_request() {
    bad_sets_are_refused_before_any_request(Servers::etcd());
}

#[test]
fn redis_three_names_come_back_as_three_locks() {
    three_names_come_back_as_three_locks(Servers::redis());
}
#[test]
fn redis_a_conflicting_try_returns_none_and_leaves_nothing_held() {
    a_conflicting_try_returns_none_and_leaves_nothing_held(Servers::redis());
}
#[test]
fn redis_a_wait_that_runs_out_leaves_nothing_held() {
    a_wait_that_runs_out_leaves_nothing_held(Servers::redis());
}
#[test]
fn redis_a_cancel_while_waiting_midway_leaves_nothing_held() {
    a_cancel_while_waiting_midway_leaves_nothing_held(Servers::redis());
}
#[test]
fn redis_overlapping_sets_in_any_order_never_deadlock() {
    overlapping_sets_in_any_order_never_deadlock(Servers::redis());
}
#[test]
fn redis_bad_sets_are_refused_before_any_request() {
    bad_sets_are_refused_before_any_request(Servers::redis());
}

#[test]
fn redlock_three_names_come_back_as_three_locks() {
    three_names_come_back_as_three_locks(Servers::redlock());
}
#[test]
fn redlock_a_conflicting_try_returns_none_and_leaves_nothing_held() {
    a_conflicting_try_returns_none_and_leaves_nothing_held(Servers::redlock());
}
#[test]
fn redlock_a_wait_that_runs_out_leaves_nothing_held() {
    a_wait_that_runs_out_leaves_nothing_held(Servers::redlock());
}
#[test]
fn redlock_a_cancel_while_waiting_midway_leaves_nothing_held() {
    a_cancel_while_waiting_midway_leaves_nothing_held(Servers::redlock());
}
#[test]
fn redlock_overlapping_sets_in_any_order_never_deadlock() {
    overlapping_sets_in_any_order_never_deadlock(Servers::redlock());
}
#[test]
fn redlock_bad_sets_are_refused_before_any_request() {
    bad_sets_are_refused_before_any_request(Servers::redlock());
}

/// The async client: a set, a conflicting `Try`, and a waiting group
/// cancelled by dropping its future (the usual way to cancel a future),
/// which leaves nothing held.
#[test]
fn etcd_async_client_acquire_all_and_a_dropped_future() {
    let servers = Servers::etcd();
    let spec = servers.spec();
    let observer = servers.client();
    smol::block_on(async move {
        let a = AsyncClient::connect(spec.clone()).expect("client");
        let b = AsyncClient::connect(spec).expect("client");
        let locks = a
            .acquire_all(&["as-b", "as-a"], opts(Wait::Try))
            .await
            .expect("acquire_all")
            .expect("granted");
        let names: Vec<&str> = locks.iter().map(|l| l.name()).collect();
        assert_eq!(names, ["as-b", "as-a"]);
        assert!(b
            .acquire_all(&["as-c", "as-a"], opts(Wait::Try))
            .await
            .expect("acquire_all")
            .is_none());
        assert!(!held(&observer, "as-c"));
        // A waiting group (as-a2 is free, as-b held), dropped once it has
        // taken its first name (polled: however long that takes).
        let mut waiting = Box::pin(b.acquire_all(&["as-a2", "as-b"], opts(Wait::Forever)));
        let first_taken = async {
            let deadline = Instant::now() + Duration::from_secs(15);
            while !held(&observer, "as-a2") {
                assert!(Instant::now() < deadline, "as-a2 never taken");
                smol::Timer::after(Duration::from_millis(20)).await;
            }
            None
        };
        let r = smol::future::or(async { Some((&mut waiting).await) }, first_taken).await;
        assert!(r.is_none(), "the group waits while as-b is held");
        assert!(held(&observer, "as-a2"), "its first name is taken");
        drop(waiting);
        // The drop cancels it; its first name is released shortly after.
        let deadline = Instant::now() + Duration::from_secs(10);
        while held(&observer, "as-a2") {
            assert!(Instant::now() < deadline, "as-a2 still held after the drop");
            smol::Timer::after(Duration::from_millis(20)).await;
        }
        for l in locks {
            assert!(l.release().await.expect("release"));
        }
        let again = b
            .acquire_all(&["as-a2", "as-b"], opts(Wait::Try))
            .await
            .expect("acquire_all")
            .expect("free after the release");
        assert_eq!(again.len(), 2);
    });
}

/// An etcd client (built like every other, `BackendSpec::build`) that
/// records the path of every request it sends.
fn etcd_recording_client(servers: &Servers) -> (Client, Arc<Mutex<Vec<String>>>) {
    let machine = servers.spec().build(Box::new(OsEntropy)).expect("machine");
    let paths: Arc<Mutex<Vec<String>>> = Arc::default();
    let log = paths.clone();
    let observing = common::Observing {
        inner: machine,
        on_send: Box::new(move |r: &HttpRequest| {
            let target = r.target.to_string();
            let path = target[target.find("/v3/").unwrap_or(0)..].to_string();
            log.lock().unwrap().push(path);
        }),
        on_input: None,
    };
    (Client::from_machine(Box::new(observing)), paths)
}

fn take_paths(paths: &Arc<Mutex<Vec<String>>>) -> Vec<String> {
    std::mem::take(&mut *paths.lock().unwrap())
}

#[test]
fn etcd_an_uncontended_set_is_one_txn_and_each_lock_an_ordinary_lock() {
    let servers = Servers::etcd();
    let (c, paths) = etcd_recording_client(&servers);
    let observer = servers.client();
    // Warm up: the session lease is granted on first use.
    c.acquire("u-warm", Some(Duration::from_secs(5)))
        .expect("acquire")
        .release()
        .expect("release");
    take_paths(&paths);
    let mut last: BTreeMap<String, u64> = BTreeMap::new();
    for (round, wait) in [Wait::Try, Wait::Forever, Wait::For(5_000)]
        .into_iter()
        .enumerate()
    {
        let names = ["u-c", "u-a", "u-b"];
        let locks = c
            .acquire_all(&names, opts(wait), None)
            .expect("acquire_all")
            .expect("granted");
        assert_eq!(
            take_paths(&paths),
            ["/v3/kv/txn"],
            "round {round} ({wait:?}): one txn for the whole set"
        );
        let got: Vec<&str> = locks.iter().map(|l| l.name()).collect();
        assert_eq!(got, names);
        let token = locks[0].fencing_token();
        for l in &locks {
            assert_eq!(l.fencing_token(), token, "one revision for the set");
            assert_eq!(l.kind(), LockKind::Exclusive);
            if let Some(before) = last.get(l.name()) {
                assert!(token > *before, "{}: {token} after {before}", l.name());
            }
            last.insert(l.name().to_string(), token);
            let status: LockStatus = observer.inspect(l.name()).expect("inspect");
            assert!(status.held, "{}", l.name());
            assert_eq!(
                status.fencing_token,
                Some(token),
                "{}: inspect sees the lock's token",
                l.name()
            );
        }
        // Ordinary locks: each extends and releases by itself.
        locks[1].extend(None).expect("extend");
        for l in locks {
            assert!(l.release().expect("release"), "held until release");
        }
        let sent = take_paths(&paths);
        assert_eq!(
            sent.iter().filter(|p| p.as_str() == "/v3/kv/txn").count(),
            1 + 3,
            "{sent:?}: the extend's key check and one release per name"
        );
        for n in names {
            assert!(!held(&observer, n), "{n}");
        }
    }
}

#[test]
fn etcd_a_try_against_a_partly_held_set_is_one_txn_and_takes_nothing() {
    let servers = Servers::etcd();
    let (c, paths) = etcd_recording_client(&servers);
    let (holder, observer) = (servers.client(), servers.client());
    c.acquire("p-warm", Some(Duration::from_secs(5)))
        .expect("acquire")
        .release()
        .expect("release");
    // A lock of any kind on one name is in the way: here a reader.
    let reader = holder
        .try_acquire_kind("p-b", LockKind::Shared)
        .expect("shared")
        .expect("free");
    take_paths(&paths);
    let r = c
        .acquire_all(&["p-c", "p-b", "p-a"], opts(Wait::Try), None)
        .expect("acquire_all");
    assert!(r.is_none());
    assert_eq!(take_paths(&paths), ["/v3/kv/txn"], "one txn, no release");
    for n in ["p-a", "p-c"] {
        assert!(!held(&observer, n), "{n} was never taken");
    }
    // A waiting set falls back to the names one by one and gets them once
    // the reader is gone: released once the set took its first name (so
    // it is waiting on the way, however slowly it got there).
    let watcher = servers.client();
    let releaser = thread::spawn(move || {
        wait_until_held(&watcher, "p-a");
        assert!(reader.release().expect("release"));
    });
    let locks = c
        .acquire_all(&["p-c", "p-b", "p-a"], opts(Wait::For(10_000)), None)
        .expect("acquire_all")
        .expect("granted after the reader left");
    releaser.join().unwrap();
    assert_eq!(locks.len(), 3);
    // The fallback: one txn per name, each its own revision.
    let tokens: BTreeMap<&str, u64> = locks
        .iter()
        .map(|l| (l.name(), l.fencing_token()))
        .collect();
    let canonical: Vec<u64> = tokens.values().copied().collect();
    assert!(canonical.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    for l in locks {
        l.release().expect("release");
    }
}

#[test]
fn redis_webdis_three_names_come_back_as_three_locks() {
    three_names_come_back_as_three_locks(Servers::redis_webdis());
}
#[test]
fn redis_webdis_a_conflicting_try_returns_none_and_leaves_nothing_held() {
    a_conflicting_try_returns_none_and_leaves_nothing_held(Servers::redis_webdis());
}
#[test]
fn redis_webdis_a_wait_that_runs_out_leaves_nothing_held() {
    a_wait_that_runs_out_leaves_nothing_held(Servers::redis_webdis());
}
#[test]
fn redis_webdis_a_cancel_while_waiting_midway_leaves_nothing_held() {
    a_cancel_while_waiting_midway_leaves_nothing_held(Servers::redis_webdis());
}
#[test]
fn redis_webdis_overlapping_sets_in_any_order_never_deadlock() {
    overlapping_sets_in_any_order_never_deadlock(Servers::redis_webdis());
}
#[test]
fn redis_webdis_bad_sets_are_refused_before_any_request() {
    bad_sets_are_refused_before_any_request(Servers::redis_webdis());
}

#[test]
fn redis_an_uncontended_set_is_one_script_and_each_lock_an_ordinary_lock() {
    let servers = Servers::redis_webdis();
    let (c, sent) = servers.counting_client();
    let observer = servers.client();
    let mut last: BTreeMap<String, u64> = BTreeMap::new();
    for (round, wait) in [Wait::Try, Wait::Forever, Wait::For(5_000), Wait::Try]
        .into_iter()
        .enumerate()
    {
        let names = ["rs-c", "rs-a", "rs-b"];
        sent.store(0, Ordering::SeqCst);
        let locks = c
            .acquire_all(&names, opts(wait), None)
            .expect("acquire_all")
            .expect("granted");
        assert_eq!(
            sent.load(Ordering::SeqCst),
            1,
            "round {round} ({wait:?}): one script for the whole set"
        );
        let got: Vec<&str> = locks.iter().map(|l| l.name()).collect();
        assert_eq!(got, names);
        for l in &locks {
            assert_eq!(l.kind(), LockKind::Exclusive);
            let token = l.fencing_token();
            if let Some(before) = last.get(l.name()) {
                assert!(token > *before, "{}: {token} after {before}", l.name());
            }
            last.insert(l.name().to_string(), token);
            let status: LockStatus = observer.inspect(l.name()).expect("inspect");
            assert!(status.held, "{}", l.name());
            assert_eq!(status.fencing_token, Some(token), "{}", l.name());
        }
        // Ordinary locks: each extends and releases by itself.
        sent.store(0, Ordering::SeqCst);
        locks[1].extend(None).expect("extend");
        for l in locks {
            assert!(l.release().expect("release"), "held until release");
        }
        assert_eq!(
            sent.load(Ordering::SeqCst),
            1 + 3,
            "an extend, three releases"
        );
        for n in names {
            assert!(!held(&observer, n), "{n}");
        }
    }
    // A single acquire of one of the names afterwards: an ordinary lock,
    // its token after the set's.
    let one = c
        .acquire("rs-a", Some(Duration::from_secs(5)))
        .expect("acquire");
    assert!(one.fencing_token() > last["rs-a"]);
    one.release().expect("release");
}

#[test]
fn redis_a_try_against_a_partly_held_set_is_one_script_and_takes_nothing() {
    let servers = Servers::redis_webdis();
    let (c, sent) = servers.counting_client();
    let (holder, observer) = (servers.client(), servers.client());
    // A lock of any kind on one name is in the way: here a reader.
    let reader = holder
        .try_acquire_kind("rp-b", LockKind::Shared)
        .expect("shared")
        .expect("free");
    sent.store(0, Ordering::SeqCst);
    let r = c
        .acquire_all(&["rp-c", "rp-b", "rp-a"], opts(Wait::Try), None)
        .expect("acquire_all");
    assert!(r.is_none());
    assert_eq!(sent.load(Ordering::SeqCst), 1, "one script, no release");
    for n in ["rp-a", "rp-c"] {
        assert!(!held(&observer, n), "{n} was never taken");
    }
    // A waiting set falls back to the names one by one and gets them once
    // the reader is gone: released once the set took its first name (so
    // it is waiting on the way, however slowly it got there).
    let watcher = servers.client();
    let releaser = thread::spawn(move || {
        wait_until_held(&watcher, "rp-a");
        assert!(reader.release().expect("release"));
    });
    let locks = c
        .acquire_all(&["rp-c", "rp-b", "rp-a"], opts(Wait::For(10_000)), None)
        .expect("acquire_all")
        .expect("granted after the reader left");
    releaser.join().unwrap();
    assert_eq!(locks.len(), 3);
    for l in locks {
        l.release().expect("release");
    }
    // An exclusive holder of one name: the same.
    let b = holder
        .acquire("rp-b", Some(Duration::from_secs(5)))
        .expect("acquire");
    sent.store(0, Ordering::SeqCst);
    let r = c
        .acquire_all(&["rp-a", "rp-b"], opts(Wait::Try), None)
        .expect("acquire_all");
    assert!(r.is_none());
    assert_eq!(sent.load(Ordering::SeqCst), 1);
    assert!(!held(&observer, "rp-a"));
    b.release().expect("release");
    // A semaphore permit (its slot key, found through the limit record).
    let permit = holder
        .try_acquire_kind("rp-b", LockKind::Permits { limit: 3 })
        .expect("permit")
        .expect("free");
    sent.store(0, Ordering::SeqCst);
    let r = c
        .acquire_all(&["rp-a", "rp-b"], opts(Wait::Try), None)
        .expect("acquire_all");
    assert!(r.is_none(), "a permit holder is in the way");
    assert_eq!(sent.load(Ordering::SeqCst), 1);
    assert!(!held(&observer, "rp-a"));
    permit.release().expect("release");
    // The limit record stays, but no slot is held: the name is free again.
    sent.store(0, Ordering::SeqCst);
    let locks = c
        .acquire_all(&["rp-a", "rp-b"], opts(Wait::Try), None)
        .expect("acquire_all")
        .expect("free once the permit is gone");
    assert_eq!(sent.load(Ordering::SeqCst), 1);
    for l in locks {
        l.release().expect("release");
    }
}
