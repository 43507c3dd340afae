//! Reentrant locks against real servers: a holder re-enters by its lock's
//! handle (from another client, as another process would), the hold count
//! lives on the backend, and only the release of the last hold frees the lock.
#![cfg(feature = "native")]

use std::sync::atomic::Ordering;

use edgelock::core::etcd::{EtcdConfig, EtcdMachine};
use edgelock::core::*;
use edgelock::native::{Client, OsEntropy};
use edgelock_devtools::EtcdServer;

mod common;
use common::etcd_raw::{b64, keys_of, raw};
use serde_json::json;

fn client(etcd: &EtcdServer) -> Client {
    Client::etcd(EtcdConfig::new(vec![etcd.url()])).expect("client")
}

fn counting_client(etcd: &EtcdServer) -> (Client, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    common::counting_client(
        EtcdMachine::new(EtcdConfig::new(vec![etcd.url()]), Box::new(OsEntropy)).unwrap(),
    )
}

/// The value of `name`'s hold count key, if it exists.
fn count_of(etcd: &EtcdServer, name: &str) -> Option<String> {
    let key = format!("edgelock/{name}%holds");
    let v = raw(etcd, "/v3/kv/range", json!({ "key": b64(key.as_bytes()) }));
    let kv = v["kvs"].as_array()?.first()?.clone();
    let value = kv["value"].as_str()?;
    String::from_utf8(edgelock::internals::b64::decode(value.as_bytes())?).ok()
}

/// Whether a third client can take `name` right now (released at once).
fn free(other: &Client, name: &str) -> bool {
    match other.try_acquire(name).unwrap() {
        Some(l) => {
            assert!(l.release().unwrap());
            true
        }
        None => false,
    }
}

#[test]
fn etcd_reentry_from_another_client_outer_released_first() {
    let etcd = EtcdServer::start().expect("start etcd");
    let (a, b, c) = (client(&etcd), client(&etcd), client(&etcd));
    let outer = a.acquire("job", None).unwrap();
    let inner = b.reenter(outer.handle()).unwrap();
    assert_eq!(inner.fencing_token(), outer.fencing_token(), "same token");
    assert_eq!(inner.handle(), outer.handle(), "same handle");
    let count = count_of(&etcd, "job").expect("a count key");
    assert!(
        count.starts_with(&format!("{}:2:", outer.fencing_token())),
        "{count}"
    );
    assert_eq!(
        keys_of(&etcd, "job").len(),
        1,
        "the count is outside the name's range"
    );
    assert!(!free(&c, "job"));
    assert!(
        outer.release().unwrap(),
        "a decrement is a release of a held hold"
    );
    assert!(!free(&c, "job"), "one hold left");
    assert_eq!(keys_of(&etcd, "job").len(), 1);
    // The outer holder's process ends: its session lease carries the lock
    // key, so its close must not revoke it while another hold is counted.
    let other = a.acquire("other", None).unwrap();
    a.close().unwrap();
    assert!(other.is_lost(), "its own lock ended with the close");
    assert!(
        keys_of(&etcd, "other").is_empty(),
        "deleted, not left to the lease"
    );
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert!(
        !inner.is_lost(),
        "the inner hold survives the outer's process"
    );
    assert!(!free(&c, "job"), "one hold left after the outer's close");
    assert!(inner.release().unwrap());
    assert!(keys_of(&etcd, "job").is_empty());
    assert_eq!(
        count_of(&etcd, "job"),
        None,
        "the count key goes with the lock"
    );
    assert!(free(&c, "job"));
    for x in [b, c] {
        x.close().unwrap();
    }
}

#[test]
fn etcd_reentry_inner_released_first_and_a_waiter_gets_in_after_the_last() {
    let etcd = EtcdServer::start().expect("start etcd");
    let (a, b, c) = (client(&etcd), client(&etcd), client(&etcd));
    let outer = a.acquire("job", None).unwrap();
    let token = outer.fencing_token();
    let inner = b.reenter(outer.handle()).unwrap();
    let inner2 = a.reenter(outer.handle()).unwrap();
    assert_eq!(inner2.fencing_token(), token);
    let waiter = std::thread::spawn(move || {
        let l = c
            .acquire("job", Some(std::time::Duration::from_secs(30)))
            .unwrap();
        let t = l.fencing_token();
        l.release().unwrap();
        t
    });
    assert!(inner.release().unwrap());
    assert!(inner2.release().unwrap());
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(!waiter.is_finished(), "the outer hold still holds");
    assert!(outer.release().unwrap());
    let waited = waiter.join().unwrap();
    assert!(waited > token, "the waiter got in after the last release");
    assert!(keys_of(&etcd, "job").is_empty());
    assert_eq!(count_of(&etcd, "job"), None);
}

#[test]
fn etcd_a_stale_handle_is_lost_and_never_frees_the_next_holders_lock() {
    let etcd = EtcdServer::start().expect("start etcd");
    let (a, b, c) = (client(&etcd), client(&etcd), client(&etcd));
    let outer = a.acquire("job", None).unwrap();
    let handle = outer.handle().clone();
    let inner = b.reenter(&handle).unwrap();
    assert!(inner.release().unwrap());
    assert!(outer.release().unwrap());
    // Every hold is gone: the count never goes below zero, the lock is free.
    let next = c.acquire("job", None).unwrap();
    assert!(next.fencing_token() > handle.fencing_token);
    let e = b.reenter(&handle).unwrap_err();
    assert_eq!(e.code(), "LOST", "{e}");
    assert_eq!(count_of(&etcd, "job"), None, "nothing counted");
    assert!(!free(&b, "job"), "the next holder still holds");
    assert_eq!(
        c.inspect("job").unwrap().fencing_token,
        Some(next.fencing_token())
    );
    // A handle whose lease is gone (its client closed): LOST as well.
    let gone = a.acquire("other", None).unwrap();
    let handle = gone.handle().clone();
    a.close().unwrap();
    assert_eq!(b.reenter(&handle).unwrap_err().code(), "LOST");
    assert!(next.release().unwrap());
}

#[test]
fn etcd_only_exclusive_handles_reenter_with_no_request() {
    let etcd = EtcdServer::start().expect("start etcd");
    let a = client(&etcd);
    let (b, sent) = counting_client(&etcd);
    let permit = a
        .try_acquire_kind("sem", LockKind::Permits { limit: 2 })
        .unwrap()
        .unwrap();
    let shared = a.try_acquire_kind("rw", LockKind::Shared).unwrap().unwrap();
    for handle in [permit.handle(), shared.handle()] {
        let e = b.reenter(handle).unwrap_err();
        assert_eq!(e.code(), "INVALID_ARGUMENT", "{e}");
        assert!(e.to_string().contains("only an exclusive lock"), "{e}");
    }
    let mut leader = permit.handle().clone();
    leader.kind = LockKind::Leader;
    leader.slot = None;
    assert_eq!(b.reenter(&leader).unwrap_err().code(), "INVALID_ARGUMENT");
    assert_eq!(sent.load(Ordering::SeqCst), 0, "no request sent");
}

/// Requests per operation (uncontended), printed for the record and checked.
#[test]
fn etcd_requests_per_reentrant_operation() {
    let etcd = EtcdServer::start().expect("start etcd");
    let (a, sent_a) = counting_client(&etcd);
    let (b, sent_b) = counting_client(&etcd);
    // Warm the session lease up.
    a.acquire("warm", None).unwrap().release().unwrap();
    let n = |s: &std::sync::atomic::AtomicUsize| s.load(Ordering::SeqCst);
    let before = n(&sent_a);
    let plain = a.acquire("job", None).unwrap();
    let acquire = n(&sent_a) - before;
    let before = n(&sent_a);
    assert!(plain.release().unwrap());
    let release = n(&sent_a) - before;
    println!("plain: acquire {acquire} request(s), release {release}");
    assert_eq!((acquire, release), (1, 1), "a plain release stays one txn");

    let outer = a.acquire("job", None).unwrap();
    let before = n(&sent_b);
    let inner = b.reenter(outer.handle()).unwrap();
    let reenter = n(&sent_b) - before;
    let before = n(&sent_b);
    assert!(inner.release().unwrap());
    let decrement = n(&sent_b) - before;
    let before = n(&sent_a);
    assert!(outer.release().unwrap());
    let last = n(&sent_a) - before;
    println!("reenter {reenter} (keepalive + txn), its release {decrement}, the outer's last release {last}");
    assert_eq!((reenter, decrement), (2, 2));
    assert_eq!(
        last, 2,
        "the last hold reads the count (1) and deletes both keys"
    );
}

// ---- one Redis node, via webdis and via the Upstash gateway ---------------

use common::redis_node::Node;
use edgelock::core::redis::{RedisConfig, RedisMachine, RedisNode};
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

const TOKEN: &str = "reentrant-test-token";

fn redis_client(node: RedisNode, ttl_ms: u64, auto_extend: bool) -> (Client, Arc<AtomicUsize>) {
    let mut cfg = RedisConfig::new(node);
    cfg.ttl_ms = ttl_ms;
    cfg.auto_extend = auto_extend;
    cfg.retry_delay_ms = 50;
    common::counting_client(RedisMachine::new(cfg, Box::new(OsEntropy)).unwrap())
}

fn redis_scenario(node: &Node, via: fn(&Node) -> RedisNode) {
    let c = || redis_client(via(node), 10_000, true).0;
    let n = |s: &AtomicUsize| s.load(Ordering::SeqCst);
    let holds = "{edgelock:job}:holds";

    // Outer released first.
    let (a, b, x) = (c(), c(), c());
    let outer = a.acquire("job", None).unwrap();
    let inner = b.reenter(outer.handle()).unwrap();
    assert_eq!(inner.fencing_token(), outer.fencing_token(), "same token");
    assert_eq!(inner.handle(), outer.handle(), "same handle");
    // The set of holds: the owner's marker, the outer hold and the inner one.
    let members = node
        .redis
        .redis_command(&[b"SCARD", holds.as_bytes()])
        .expect("SCARD")
        .as_int();
    assert_eq!(members, Some(3), "marker + two holds");
    let ttl = node
        .redis
        .redis_command(&[b"PTTL", holds.as_bytes()])
        .expect("PTTL")
        .as_int()
        .unwrap();
    assert!(ttl > 0, "the set expires with the lock: {ttl}");
    assert!(!free(&x, "job"));
    assert!(outer.release().unwrap());
    assert!(!free(&x, "job"), "one hold left");
    assert!(node.exists("{edgelock:job}"));
    assert!(inner.release().unwrap());
    assert!(!node.exists("{edgelock:job}") && !node.exists(holds));
    assert!(free(&x, "job"));

    // Inner first, three holds, a waiter gets in after the last release.
    let outer = a.acquire("job", None).unwrap();
    let token = outer.fencing_token();
    let inner = b.reenter(outer.handle()).unwrap();
    let inner2 = a.reenter(outer.handle()).unwrap();
    let waiter = std::thread::spawn(move || {
        let l = x
            .acquire("job", Some(std::time::Duration::from_secs(30)))
            .unwrap();
        let t = l.fencing_token();
        l.release().unwrap();
        t
    });
    assert!(inner2.release().unwrap());
    assert!(inner.release().unwrap());
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(!waiter.is_finished(), "the outer hold still holds");
    assert!(outer.release().unwrap());
    assert!(waiter.join().unwrap() > token);

    // A stale handle: LOST, nothing counted, the next holder untouched.
    let outer = a.acquire("job", None).unwrap();
    let handle = outer.handle().clone();
    assert!(outer.release().unwrap());
    let next = c().acquire("job", None).unwrap();
    assert_eq!(b.reenter(&handle).unwrap_err().code(), "LOST");
    assert!(!node.exists(holds), "nothing counted");
    assert!(!free(&b, "job"), "the next holder still holds");
    assert!(next.release().unwrap());

    // An expired hold: LOST.
    let (short, _) = redis_client(via(node), 300, false);
    let gone = short.acquire("brief", None).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(600));
    assert_eq!(b.reenter(gone.handle()).unwrap_err().code(), "LOST");

    // Other kinds: INVALID_ARGUMENT before any request.
    let (d, sent_d) = redis_client(via(node), 10_000, true);
    let permit = a
        .try_acquire_kind("sem", LockKind::Permits { limit: 2 })
        .unwrap()
        .unwrap();
    let shared = a.try_acquire_kind("rw", LockKind::Shared).unwrap().unwrap();
    for handle in [permit.handle(), shared.handle()] {
        assert_eq!(d.reenter(handle).unwrap_err().code(), "INVALID_ARGUMENT");
    }
    assert_eq!(n(&sent_d), 0, "no request sent");

    // Requests per operation (auto-extend off: nothing in the background).
    let (p, sent_p) = redis_client(via(node), 10_000, false);
    let (q, sent_q) = redis_client(via(node), 10_000, false);
    let before = n(&sent_p);
    let plain = p.acquire("cost", None).unwrap();
    let acquire = n(&sent_p) - before;
    let before = n(&sent_p);
    assert!(plain.release().unwrap());
    let release = n(&sent_p) - before;
    let outer = p.acquire("cost", None).unwrap();
    let before = n(&sent_q);
    let inner = q.reenter(outer.handle()).unwrap();
    let reenter = n(&sent_q) - before;
    let before = n(&sent_q);
    assert!(inner.release().unwrap());
    let decrement = n(&sent_q) - before;
    let before = n(&sent_p);
    assert!(outer.release().unwrap());
    let last = n(&sent_p) - before;
    println!(
        "redis: acquire {acquire}, release {release}; reenter {reenter}, decrement {decrement}, last release {last}"
    );
    assert_eq!((release, reenter, decrement, last), (1, 1, 1, 1));
}

#[test]
fn redis_reentry_via_webdis() {
    let node = Node::start(TOKEN);
    redis_scenario(&node, Node::via_webdis);
}

#[test]
fn redis_reentry_via_the_upstash_gateway() {
    let node = Node::start(TOKEN);
    redis_scenario(&node, Node::via_upstash);
}

// ---- Redlock -----------------------------------------------------------------

use common::redis_node::{Nodes, Via};
use edgelock::core::redis::{RedlockConfig, RedlockMachine};

fn redlock_client(nodes: &Nodes, auto_extend: bool) -> (Client, Arc<AtomicUsize>) {
    let mut cfg = RedlockConfig::new((0..nodes.nodes.len()).map(|i| nodes.node(i)).collect());
    cfg.auto_extend = auto_extend;
    cfg.retry_delay_ms = 50;
    cfg.retry_jitter_ms = 20;
    cfg.retry_count = 3;
    common::counting_client(RedlockMachine::new(cfg, Box::new(OsEntropy)).unwrap())
}

/// How many members the set of holds of `job` has on each node.
fn members(nodes: &Nodes) -> Vec<Option<i64>> {
    nodes
        .nodes
        .iter()
        .map(|n| {
            n.redis
                .redis_command(&[b"SCARD", b"{edgelock:job}:holds"])
                .ok()
                .and_then(|v| v.as_int())
        })
        .collect()
}

/// Redlock over three nodes (webdis, Upstash, webdis): re-entered twice
/// from two clients, the same token, freed only by the last release in
/// either order; a released lock's handle is `LOST`; requests per
/// operation.
#[test]
fn redlock_reentry_over_three_nodes() {
    let nodes = Nodes::start(Via::Redlock, TOKEN);
    let c = || redlock_client(&nodes, true).0;
    let (a, b, x) = (c(), c(), c());

    // Outer released first, then the second re-entry, then the first.
    let outer = a.acquire("job", None).unwrap();
    let inner = b.reenter(outer.handle()).unwrap();
    let inner2 = a.reenter(outer.handle()).unwrap();
    for h in [&inner, &inner2] {
        assert_eq!(h.fencing_token(), outer.fencing_token(), "same token");
        assert_eq!(h.handle(), outer.handle(), "same handle");
    }
    // Every node: the owner's marker, the outer hold and both re-entries.
    assert_eq!(members(&nodes), [Some(4); 3]);
    assert!(!free(&x, "job"));
    assert!(outer.release().unwrap());
    assert!(!free(&x, "job"), "two holds left");
    assert!(inner2.release().unwrap());
    assert!(!free(&x, "job"), "one hold left");
    assert!(nodes.nodes.iter().all(|n| n.exists("{edgelock:job}")));
    assert!(inner.release().unwrap());
    for n in &nodes.nodes {
        assert!(!n.exists("{edgelock:job}") && !n.exists("{edgelock:job}:holds"));
    }
    assert!(free(&x, "job"));

    // Re-entries released first; a waiter gets in after the last release.
    let outer = a.acquire("job", None).unwrap();
    let token = outer.fencing_token();
    let inner = b.reenter(outer.handle()).unwrap();
    let inner2 = b.reenter(outer.handle()).unwrap();
    let waiter = std::thread::spawn(move || {
        let l = x
            .acquire("job", Some(std::time::Duration::from_secs(30)))
            .unwrap();
        let t = l.fencing_token();
        l.release().unwrap();
        (t, x)
    });
    assert!(inner.release().unwrap());
    assert!(inner2.release().unwrap());
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(!waiter.is_finished(), "the outer hold still holds");
    assert!(outer.release().unwrap());
    let (t, x) = waiter.join().unwrap();
    assert!(t > token);

    // A released lock's handle: LOST, nothing counted, the next holder untouched.
    let outer = a.acquire("job", None).unwrap();
    let handle = outer.handle().clone();
    assert!(outer.release().unwrap());
    let next = c().acquire("job", None).unwrap();
    assert_eq!(b.reenter(&handle).unwrap_err().code(), "LOST");
    assert_eq!(members(&nodes), [Some(0); 3], "nothing counted");
    assert!(!free(&x, "job"), "the next holder still holds");
    assert!(next.release().unwrap());
    assert!(free(&x, "job"));

    // Requests per operation (auto-extend off: nothing in the background).
    let n = |s: &AtomicUsize| s.load(Ordering::SeqCst);
    let (p, sent_p) = redlock_client(&nodes, false);
    let (q, sent_q) = redlock_client(&nodes, false);
    let outer = p.acquire("cost", None).unwrap();
    let before = n(&sent_q);
    let inner = q.reenter(outer.handle()).unwrap();
    let reenter = n(&sent_q) - before;
    let before = n(&sent_q);
    assert!(inner.release().unwrap());
    let decrement = n(&sent_q) - before;
    let before = n(&sent_p);
    assert!(outer.release().unwrap());
    let last = n(&sent_p) - before;
    println!("redlock x3: reenter {reenter}, decrement {decrement}, last release {last}");
    assert_eq!((reenter, decrement, last), (3, 3, 3));
}

/// One of three nodes stopped while the lock is held: the re-entry still
/// gets its quorum, the count stays right on the two left, and the lock is
/// freed only by the last release.
#[test]
fn redlock_reentry_with_one_of_three_nodes_down() {
    let mut nodes = Nodes::start(Via::Redlock, TOKEN);
    let (a, _) = redlock_client(&nodes, true);
    let (b, _) = redlock_client(&nodes, true);
    let (x, _) = redlock_client(&nodes, true);
    let outer = a.acquire("job", None).unwrap();
    nodes.nodes[2].redis.kill();
    let inner = b
        .reenter(outer.handle())
        .expect("a quorum of two counts it");
    assert_eq!(inner.fencing_token(), outer.fencing_token());
    let inner2 = a.reenter(outer.handle()).expect("again");
    assert_eq!(members(&nodes)[..2], [Some(4), Some(4)]);
    assert!(!free(&x, "job"));
    assert!(inner.release().unwrap());
    assert_eq!(members(&nodes)[..2], [Some(3), Some(3)]);
    assert!(!free(&x, "job"), "two holds left");
    assert!(outer.release().unwrap());
    assert!(!free(&x, "job"), "one hold left");
    assert!(inner2.release().unwrap());
    for n in &nodes.nodes[..2] {
        assert!(!n.exists("{edgelock:job}") && !n.exists("{edgelock:job}:holds"));
    }
    assert!(free(&x, "job"));

    // Taken with the node down: the same on the two left.
    let outer = a.acquire("job", None).unwrap();
    let inner = b.reenter(outer.handle()).unwrap();
    assert!(outer.release().unwrap());
    assert!(!free(&x, "job"), "the re-entered hold still holds");
    assert!(inner.release().unwrap());
    assert!(free(&x, "job"));
}

/// The seeded workload on Redlock over three nodes.
#[test]
fn redlock_reentrant_workload_never_lets_a_second_owner_in() {
    let nodes = Nodes::start(Via::Redlock, TOKEN);
    let c = || redlock_client(&nodes, true).0;
    let clients = (0..3).map(|_| (c(), c())).collect();
    reentrant_workload(clients, "shared-job", 6, seed());
    for n in &nodes.nodes {
        assert!(!n.exists("{edgelock:shared-job}"));
        assert!(!n.exists("{edgelock:shared-job}:holds"));
    }
}

// ---- the async client ------------------------------------------------------

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark()
        }
    }
    let waker = std::task::Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = std::task::Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    loop {
        if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park_timeout(std::time::Duration::from_millis(50));
    }
}

#[test]
fn etcd_async_reentry_by_handle() {
    let etcd = EtcdServer::start().expect("start etcd");
    let (a, b) = (client(&etcd).to_async(), client(&etcd).to_async());
    let other = client(&etcd);
    block_on(async {
        let outer = a.acquire("job", None).await.unwrap();
        let inner = b.reenter(outer.handle()).await.unwrap();
        assert_eq!(inner.fencing_token(), outer.fencing_token());
        assert!(inner.release().await.unwrap());
        assert!(!free(&other, "job"), "the outer hold still holds");
        assert!(outer.release().await.unwrap());
    });
    assert!(free(&other, "job"));
    assert_eq!(count_of(&etcd, "job"), None);
}

// ---- a small randomized workload -------------------------------------------

/// Workers take `name`, re-enter it 0..=2 times through their own handle
/// (from their second client and from the first), release the holds in a
/// random order and leave the critical section just before the last
/// release. Another worker inside before every hold ended is a violation:
/// a count never lets a second owner in. Seeded: the seed is printed.
fn reentrant_workload(
    clients: Vec<(Client, Client)>,
    name: &'static str,
    rounds: usize,
    seed: u64,
) {
    use std::sync::Mutex;
    println!("reentrant workload on {name}: seed {seed}");
    let inside = Arc::new(Mutex::new(None::<usize>));
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let threads: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(w, (first, second))| {
            let (inside, tokens) = (inside.clone(), tokens.clone());
            std::thread::spawn(move || {
                let mut rng = seed ^ (w as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                let mut next = move |n: u64| {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    rng % n
                };
                for _ in 0..rounds {
                    let outer = first
                        .acquire(name, Some(std::time::Duration::from_secs(60)))
                        .unwrap();
                    {
                        let mut i = inside.lock().unwrap();
                        assert_eq!(*i, None, "worker {w} entered while {i:?} was inside");
                        *i = Some(w);
                    }
                    tokens.lock().unwrap().push(outer.fencing_token());
                    let mut holds = vec![];
                    for _ in 0..next(3) {
                        let via = if next(2) == 0 { &second } else { &first };
                        let inner = via.reenter(outer.handle()).unwrap();
                        assert_eq!(inner.fencing_token(), outer.fencing_token());
                        holds.push(inner);
                    }
                    holds.insert(next(holds.len() as u64 + 1) as usize, outer);
                    while holds.len() > 1 {
                        let h = holds.remove(next(holds.len() as u64) as usize);
                        assert!(h.release().unwrap());
                        std::thread::sleep(std::time::Duration::from_millis(next(5)));
                        assert_eq!(*inside.lock().unwrap(), Some(w), "still ours");
                    }
                    *inside.lock().unwrap() = None;
                    assert!(holds.pop().unwrap().release().unwrap());
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let tokens = tokens.lock().unwrap();
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens increase: {tokens:?}"
    );
}

fn seed() -> u64 {
    std::env::var("EDGELOCK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64 | 1)
        })
}

#[test]
fn etcd_reentrant_workload_never_lets_a_second_owner_in() {
    let etcd = EtcdServer::start().expect("start etcd");
    let clients = (0..4).map(|_| (client(&etcd), client(&etcd))).collect();
    reentrant_workload(clients, "shared-job", 10, seed());
    assert!(keys_of(&etcd, "shared-job").is_empty());
    assert_eq!(count_of(&etcd, "shared-job"), None);
}

#[test]
fn redis_reentrant_workload_never_lets_a_second_owner_in() {
    let node = Node::start(TOKEN);
    let c = || redis_client(node.via_webdis(), 10_000, true).0;
    let clients = (0..4).map(|_| (c(), c())).collect();
    reentrant_workload(clients, "shared-job", 10, seed());
    assert!(!node.exists("{edgelock:shared-job}"));
    assert!(!node.exists("{edgelock:shared-job}:holds"));
}
