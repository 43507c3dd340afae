//! The Redis lock and Redlock against real servers: `redis-server` processes
//! (no persistence, loopback, free ports, temp dirs) fronted by Debian's
//! `webdis` and by the local Upstash-compatible gateway, all started by each
//! test through `edgelock-devtools` and stopped when it ends.
#![cfg(feature = "native")]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use edgelock::core::redis::{
    RedisCommand, RedisConfig, RedisMachine, RedisNode, RedisValue, RedlockConfig, RedlockFencing,
    RedlockMachine,
};
use edgelock::core::*;
use edgelock::internals::redis::codec::NodeCodec;
use edgelock::internals::redis::keys::{fence_key, lock_key};
use edgelock::internals::redis::{scripts, webdis};
use edgelock::native::http::{CancelHandle, HttpClient, Request};
use edgelock::native::{Client, OsEntropy};

mod common;
use common::redis_node::Node;

const TOKEN: &str = "test-token-0123456789";

fn nodes(n: usize) -> Vec<Node> {
    (0..n).map(|_| Node::start(TOKEN)).collect()
}

/// Even nodes through webdis, odd ones through the gateway.
fn mixed(nodes: &[Node]) -> Vec<RedisNode> {
    nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            if i % 2 == 0 {
                n.via_webdis()
            } else {
                n.via_upstash()
            }
        })
        .collect()
}

fn redlock_cfg(nodes: &[Node]) -> RedlockConfig {
    let mut cfg = RedlockConfig::new(mixed(nodes));
    cfg.ttl_ms = 5_000;
    cfg.retry_delay_ms = 30;
    cfg.retry_jitter_ms = 20;
    cfg
}

fn redlock(cfg: RedlockConfig) -> Client {
    Client::from_machine(Box::new(
        RedlockMachine::new(cfg, Box::new(OsEntropy)).expect("config"),
    ))
}

/// Runs one command on a node through `codec`, over real HTTP.
fn raw(codec: &NodeCodec, cmd: &RedisCommand) -> RedisValue {
    let req = codec.encode(RequestId(1), cmd, 5_000).expect("encode");
    let http = HttpClient::new();
    let r = Request {
        method: "POST",
        url: req.target.url().unwrap_or(""),
        headers: &req.headers,
        body: &req.body,
        timeout: Some(Duration::from_secs(5)),
    };
    let resp = http.send(&r, &CancelHandle::new()).expect("HTTP");
    codec.decode(cmd, resp.status, &resp.body).expect("decode")
}

fn lock_keys_of(node: &Node) -> Vec<String> {
    node.keys()
        .into_iter()
        .filter(|k| !k.ends_with(b":fence"))
        .map(|k| String::from_utf8_lossy(&k).into_owned())
        .collect()
}

#[test]
fn eight_clients_fifty_acquisitions_on_five_nodes_are_mutually_exclusive() {
    let nodes = nodes(5);
    let clients = (0..8).map(|_| redlock(redlock_cfg(&nodes))).collect();
    common::assert_mutual_exclusion(clients, "counter", 50, Duration::from_secs(120));
    for (i, n) in nodes.iter().enumerate() {
        assert!(
            lock_keys_of(n).is_empty(),
            "node {i}: lock key left behind: {:?}",
            lock_keys_of(n)
        );
    }
}

#[test]
fn uncontended_acquire_and_release_cost_one_parallel_round_each_way_with_either_fencing() {
    for fencing in [RedlockFencing::Folded, RedlockFencing::Strict] {
        uncontended_rounds(fencing);
    }
}

fn uncontended_rounds(fencing: RedlockFencing) {
    let nodes = nodes(5);
    let sent = Arc::new(AtomicUsize::new(0));
    let mut cfg = redlock_cfg(&nodes);
    cfg.fencing = fencing;
    let machine = RedlockMachine::new(cfg, Box::new(OsEntropy)).unwrap();
    let c = Client::from_machine(Box::new(common::counting(machine, sent.clone())));
    let gw_before: Vec<u64> = nodes.iter().map(|n| n.gateway.request_count()).collect();
    let lock = c.acquire("solo", None).unwrap();
    assert_eq!(
        sent.load(Ordering::SeqCst),
        5,
        "acquire: one request per node"
    );
    assert!(lock.release().unwrap());
    assert_eq!(
        sent.load(Ordering::SeqCst),
        10,
        "release: one request per node"
    );
    // The servers agree: one HTTP request per gateway-fronted node each way.
    for (i, n) in nodes.iter().enumerate().filter(|(i, _)| i % 2 == 1) {
        assert_eq!(n.gateway.request_count() - gw_before[i], 2, "node {i}");
    }
    c.close().unwrap();
}

#[test]
fn two_of_five_nodes_down_still_acquires() {
    let mut nodes = nodes(5);
    nodes[1].redis.kill();
    nodes[4].redis.kill();
    let c = redlock(redlock_cfg(&nodes));
    let lock = c
        .acquire("job", Some(Duration::from_secs(10)))
        .expect("a quorum of 3 is enough");
    let key = lock_key("edgelock", "job");
    for i in [0, 2, 3] {
        assert_eq!(
            nodes[i].get(key.as_bytes()).as_deref(),
            Some(lock.handle().owner.as_bytes()),
            "node {i}"
        );
    }
    assert!(lock.release().unwrap());
    for i in [0, 2, 3] {
        assert!(lock_keys_of(&nodes[i]).is_empty());
    }
    c.close().unwrap();
}

#[test]
fn three_of_five_nodes_down_fails_fast_with_no_quorum_and_leaves_no_key() {
    let mut nodes = nodes(5);
    for i in [0, 1, 3] {
        nodes[i].redis.kill();
    }
    let mut cfg = redlock_cfg(&nodes);
    cfg.retry_count = 3;
    let c = redlock(cfg);
    let started = Instant::now();
    let err = c.acquire("job", None).expect_err("no quorum");
    let took = started.elapsed();
    assert_eq!(err.code(), "NO_QUORUM", "{err}");
    assert!(took < Duration::from_secs(5), "took {took:?}");
    for i in [2, 4] {
        assert!(
            lock_keys_of(&nodes[i]).is_empty(),
            "node {i}: {:?}",
            lock_keys_of(&nodes[i])
        );
    }
    // Wait::Try gives up after one attempt.
    let started = Instant::now();
    let err = c
        .acquire_with(
            "job",
            AcquireOptions {
                wait: Wait::Try,
                ttl_ms: None,
            },
            None,
        )
        .expect_err("no quorum");
    assert_eq!(err.code(), "NO_QUORUM");
    assert!(started.elapsed() < Duration::from_secs(2));
    for i in [2, 4] {
        assert!(lock_keys_of(&nodes[i]).is_empty());
    }
    c.close().unwrap();
}

#[test]
fn a_late_release_by_an_expired_holder_does_not_delete_the_next_holders_key() {
    let nodes = nodes(1);
    for node in [nodes[0].via_webdis(), nodes[0].via_upstash()] {
        let mut cfg = RedisConfig::new(node.clone());
        cfg.auto_extend = false;
        cfg.retry_delay_ms = 20;
        let a = Client::from_machine(Box::new(
            RedisMachine::new(cfg.clone(), Box::new(OsEntropy)).unwrap(),
        ));
        let b = Client::from_machine(Box::new(
            RedisMachine::new(cfg, Box::new(OsEntropy)).unwrap(),
        ));
        let opts = AcquireOptions {
            wait: Wait::Forever,
            ttl_ms: Some(300),
        };
        let first = a.acquire_with("late", opts, None).unwrap().unwrap();
        // B waits until A's key expires, then holds it.
        let second = b
            .acquire_with(
                "late",
                AcquireOptions {
                    wait: Wait::Forever,
                    ttl_ms: Some(10_000),
                },
                None,
            )
            .unwrap()
            .unwrap();
        assert!(second.fencing_token() > first.fencing_token());
        let key = lock_key("edgelock", "late");
        // A's release, as a paused holder would send it after waking up: the
        // real script on the real server, through this protocol.
        let codec = NodeCodec::new(&node).unwrap();
        let cmd = scripts::release(
            &key,
            &fence_key(&key),
            &first.handle().owner,
            first.fencing_token(),
        );
        assert_eq!(
            raw(&codec, &cmd),
            RedisValue::Int(0),
            "the owner check refuses"
        );
        assert_eq!(
            nodes[0].get(key.as_bytes()).as_deref(),
            Some(second.handle().owner.as_bytes()),
            "B's key is intact"
        );
        // And through the client: A learns it had lost the lock.
        assert!(!first.release().unwrap());
        assert_eq!(
            nodes[0].get(key.as_bytes()).as_deref(),
            Some(second.handle().owner.as_bytes())
        );
        assert!(second.release().unwrap());
        assert!(nodes[0].get(key.as_bytes()).is_none());
        a.close().unwrap();
        b.close().unwrap();
    }
}

const ADVERSARIAL: [&str; 16] = [
    "a/b",
    "..",
    ".",
    "../..",
    "x.json",
    "y.raw",
    "%",
    "%2F",
    "%zz",
    "q?x=1",
    "#frag",
    "a+b c",
    "line\r\nbreak",
    "é🔒",
    "}{",
    "/",
];

#[test]
fn adversarial_keys_round_trip_and_touch_no_other_key() {
    let node = Node::start(TOKEN);
    // Bystanders whose names an escaping bug could hit.
    let bystanders: Vec<&[u8]> = vec![
        b"a",
        b"b",
        b"edgelock",
        b"{edgelock:a}",
        b"{edgelock:..}x",
        b"x",
        b"y",
        b"q",
        b"%",
        b"/",
    ];
    for k in &bystanders {
        node.redis
            .redis_command(&[b"SET", k, b"bystander"])
            .unwrap();
    }
    let before = node.keys();
    for via in [node.via_webdis(), node.via_upstash()] {
        let c = Client::from_machine(Box::new(
            RedisMachine::new(RedisConfig::new(via.clone()), Box::new(OsEntropy)).unwrap(),
        ));
        for name in ADVERSARIAL {
            let lock = c
                .try_acquire(name)
                .unwrap()
                .unwrap_or_else(|| panic!("{name:?} is free"));
            let key = lock_key("edgelock", name);
            assert_eq!(lock.handle().key, key);
            // Byte for byte: exactly this key holds exactly this token.
            assert_eq!(
                node.get(key.as_bytes()).as_deref(),
                Some(lock.handle().owner.as_bytes()),
                "{via:?} {name:?}"
            );
            let st = c.inspect(name).unwrap();
            assert!(st.held, "{name:?}");
            assert_eq!(st.fencing_token, Some(lock.fencing_token()));
            assert!(lock.release().unwrap(), "{name:?}");
            assert!(node.get(key.as_bytes()).is_none(), "{name:?}");
        }
        c.close().unwrap();
    }
    // Nothing but the fencing counters was added, nothing else touched.
    let mut expected = before.clone();
    for name in ADVERSARIAL {
        expected.push(fence_key(&lock_key("edgelock", name)).into_bytes());
    }
    expected.sort();
    expected.dedup();
    assert_eq!(node.keys(), expected);
    for k in &bystanders {
        assert_eq!(node.get(k).as_deref(), Some(&b"bystander"[..]));
    }
    // Below the lock API (names are text): any byte string, NUL and
    // non-UTF-8 included, reaches Redis unchanged through webdis.
    let codec = NodeCodec::new(&node.via_webdis()).unwrap();
    let key: Vec<u8> = (0u8..=255).chain(*b"/../.json").collect();
    assert_eq!(
        raw(&codec, &RedisCommand::new("SET").arg(&key).arg("v")),
        RedisValue::Bulk(b"OK".to_vec())
    );
    assert_eq!(node.get(&key).as_deref(), Some(&b"v"[..]));
    assert_eq!(
        raw(&codec, &RedisCommand::new("STRLEN").arg(&key)),
        RedisValue::Int(1)
    );
    let mut with_raw_key = expected.clone();
    with_raw_key.push(key.clone());
    with_raw_key.sort();
    assert_eq!(
        node.keys(),
        with_raw_key,
        "webdis did not split the key at '/' or drop a '.ext'"
    );
    // What webdis cannot carry is refused before sending.
    assert!(webdis::encode_command(&RedisCommand::new("GET").arg("")).is_err());
}

#[test]
fn strict_fencing_tokens_keep_increasing_across_node_restarts() {
    let mut nodes = nodes(5);
    let mut cfg = redlock_cfg(&nodes);
    cfg.fencing = RedlockFencing::Strict;
    let sent = Arc::new(AtomicUsize::new(0));
    let machine = RedlockMachine::new(cfg, Box::new(OsEntropy)).unwrap();
    let c = Client::from_machine(Box::new(common::counting(machine, sent.clone())));
    let mut last = 0;
    for round in 0..4 {
        let before = sent.load(Ordering::SeqCst);
        let lock = c.acquire("fenced", None).unwrap();
        let sent_now = sent.load(Ordering::SeqCst) - before;
        if round == 0 {
            assert_eq!(
                sent_now, 5,
                "strict fencing, counters in agreement: the raise is skipped"
            );
        } else {
            // Restarted nodes lag: the raise round is back (plus a NOSCRIPT
            // resend per restarted node and script, and whatever a node still
            // starting up costs).
            assert!(
                sent_now >= 10,
                "strict fencing after restarts: attempt and raise ({sent_now})"
            );
        }
        assert!(
            lock.fencing_token() > last,
            "round {round}: {} after {last}",
            lock.fencing_token()
        );
        last = lock.fencing_token();
        assert!(lock.release().unwrap());
        // Two nodes (a minority) lose all data between holders.
        for i in [round % 5, (round + 2) % 5] {
            nodes[i].redis.restart().unwrap();
        }
    }
    c.close().unwrap();
}

#[test]
fn the_watchdog_keeps_a_short_ttl_lock_alive_until_release() {
    let nodes = nodes(3);
    let mut cfg = redlock_cfg(&nodes);
    cfg.ttl_ms = 600;
    let c = redlock(cfg);
    let lock = c.acquire("renewed", None).unwrap();
    std::thread::sleep(Duration::from_millis(2_000));
    assert!(!lock.is_lost(), "{:?}", lock.lost_reason());
    assert!(c.inspect("renewed").unwrap().held);
    assert!(lock.release().unwrap());
    assert!(!c.inspect("renewed").unwrap().held);
    c.close().unwrap();
}

#[test]
fn a_held_key_deleted_behind_the_clients_back_is_reported_lost() {
    let node = Node::start(TOKEN);
    let mut cfg = RedisConfig::new(node.via_upstash());
    cfg.ttl_ms = 900;
    let c = Client::from_machine(Box::new(
        RedisMachine::new(cfg, Box::new(OsEntropy)).unwrap(),
    ));
    let lock = c.acquire("victim", None).unwrap();
    node.redis
        .redis_command(&[b"DEL", lock_key("edgelock", "victim").as_bytes()])
        .unwrap();
    assert_eq!(
        lock.wait_lost(Some(Duration::from_secs(5))),
        Some(LostReason::KeyGone)
    );
    assert!(!lock.release().unwrap());
    c.close().unwrap();
}
