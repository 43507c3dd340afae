//! Push wake-up of Redis waiters against real servers: a release publishes
//! on the lock's wake-up channel and a waiting acquire, subscribed through
//! webdis (`GET /SUBSCRIBE/…`, chunked JSON) or the Upstash gateway
//! (`POST /subscribe/…`, server-sent events), attempts at once instead of
//! at its next poll. Every request a client sends is recorded, so the tests
//! count attempts and subscriptions instead of timing anything.
#![cfg(feature = "native")]

use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use edgelock::core::redis::{RedisConfig, RedisMachine, RedisNode, RedlockConfig, RedlockMachine};
use edgelock::core::*;
use edgelock::internals::redis::keys::lock_key;
use edgelock::internals::redis::subscription::wake_channel;
use edgelock::native::{Client, OsEntropy};
use edgelock_devtools::{RedisServer, UpstashGateway, Webdis};

mod common;

const TOKEN: &str = "push-test-token-0123456789";

/// What a client sent: streaming (a subscription) or not (a script), and its URL.
#[derive(Clone, Debug)]
struct Sent {
    id: RequestId,
    at: Instant,
    stream: bool,
    url: String,
    /// A script command: sent as EVALSHA (true) or EVAL (false).
    evalsha: Option<bool>,
    /// Its response (or failure) was given to the machine.
    answered: bool,
}

type Log = Arc<Mutex<Vec<Sent>>>;

/// A client whose every request is recorded in the returned log.
fn recorded(machine: impl LockMachine + Send + 'static) -> (Client, Log) {
    let log = Log::default();
    let sink = log.clone();
    let on_send = Box::new(move |r: &HttpRequest| {
        let body = String::from_utf8_lossy(&r.body);
        let evalsha = if body.contains("EVALSHA") {
            Some(true)
        } else if body.contains("EVAL") {
            Some(false)
        } else {
            None
        };
        sink.lock().unwrap().push(Sent {
            id: r.id,
            at: Instant::now(),
            stream: r.stream,
            url: r.target.url().unwrap_or("").to_string(),
            evalsha,
            answered: false,
        });
    });
    let sink = log.clone();
    let on_input: common::InputHook = Box::new(move |i: &Input| {
        let id = match i {
            Input::Response { id, .. } | Input::Failed { id, .. } | Input::Chunk { id, .. } => id,
            Input::Opened { .. } | Input::StreamEnd { .. } => return,
        };
        // A script's answer, or a subscription's first message (its confirmation).
        for s in sink.lock().unwrap().iter_mut().filter(|s| s.id == *id) {
            s.answered = true;
        }
    });
    (
        Client::from_machine(Box::new(common::Observing {
            inner: machine,
            on_send,
            on_input: Some(on_input),
        })),
        log,
    )
}

/// A single-node client whose poll is slow (5 s): only a push can make it quick.
fn single(node: RedisNode) -> (Client, Log) {
    let mut cfg = RedisConfig::new(node);
    cfg.ttl_ms = 30_000;
    cfg.retry_delay_ms = 5_000;
    cfg.retry_jitter_ms = 0;
    recorded(RedisMachine::new(cfg, Box::new(OsEntropy)).expect("config"))
}

fn scripts_sent(log: &Log) -> usize {
    log.lock().unwrap().iter().filter(|s| !s.stream).count()
}

/// Scripts whose answer the machine has been given.
fn scripts_answered(log: &Log) -> usize {
    log.lock()
        .unwrap()
        .iter()
        .filter(|s| !s.stream && s.answered)
        .count()
}

/// Waits until the waiter's `streams` subscriptions are confirmed to it and
/// every script it sent is answered, and it stays so for 100 ms (a
/// confirmation is given to the machine just before the attempt it causes
/// is sent: the pause covers that step). From then on it only waits.
fn quiet(log: &Log, streams: usize) {
    let settled = || {
        let log = log.lock().unwrap();
        let confirmed = log.iter().filter(|s| s.stream && s.answered).count();
        confirmed >= streams && log.iter().all(|s| s.stream || s.answered)
    };
    loop {
        eventually("the waiter settled", settled);
        let sent = log.lock().unwrap().len();
        thread::sleep(Duration::from_millis(100));
        if settled() && log.lock().unwrap().len() == sent {
            return;
        }
    }
}

/// When the first script after `t` was sent.
fn first_script_after(log: &Log, t: Instant) -> Option<Instant> {
    log.lock()
        .unwrap()
        .iter()
        .filter(|s| !s.stream && s.at >= t)
        .map(|s| s.at)
        .min()
}

fn streams_sent(log: &Log) -> Vec<Sent> {
    log.lock()
        .unwrap()
        .iter()
        .filter(|s| s.stream)
        .cloned()
        .collect()
}

/// Waits until `cond` holds (at most 10 s).
fn eventually(what: &str, cond: impl Fn() -> bool) {
    let end = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < end, "timed out waiting for: {what}");
        thread::sleep(Duration::from_millis(10));
    }
}

fn subscribers(redis: &RedisServer, channel: &str) -> i64 {
    let v = redis
        .redis_command(&[b"PUBSUB", b"NUMSUB", channel.as_bytes()])
        .expect("PUBSUB NUMSUB");
    format!("{v:?}")
        .rsplit(|c: char| !c.is_ascii_digit())
        .find(|s| !s.is_empty())
        .and_then(|s| s.parse().ok())
        .unwrap_or(-1)
}

/// A waiter subscribes after its first refused attempt, attempts once more
/// when the subscription is confirmed, then sleeps (its poll is 5 s away)
/// until the holder's release publishes: one attempt per wake-up.
fn wakes_on_release(redis: &RedisServer, node: RedisNode, label: &str) {
    let name = format!("push/{label}");
    let channel = wake_channel(&lock_key("edgelock", &name));
    let (holder, _) = single(node.clone());
    let (waiter, log) = single(node);
    let lock = holder.acquire(&name, None).expect("holder acquires");
    let t = {
        let name = name.clone();
        thread::spawn(move || {
            let l = waiter
                .acquire(&name, Some(Duration::from_secs(20)))
                .expect("waiter acquires");
            (waiter, l)
        })
    };
    eventually("the waiter's subscription is live", || {
        subscribers(redis, &channel) == 1
    });
    // The attempt that follows the confirmation is out once the server sees
    // the subscriber; it must be answered (refused) before the release, or
    // it could meet the lock free and be the grant itself.
    eventually("two attempts, answered", || scripts_answered(&log) >= 2);
    // A poll now would show here (none is due for 5 s).
    thread::sleep(Duration::from_millis(300));
    assert_eq!(
        scripts_sent(&log),
        2,
        "{label}: first attempt + the one after confirmation, no poll"
    );
    let released_at = Instant::now();
    let token = lock.fencing_token();
    assert!(lock.release().expect("release"));
    let (waiter, l) = t.join().expect("waiter thread");
    let waited = released_at.elapsed();
    assert!(
        waited < Duration::from_secs(4),
        "{label}: woken by push, not by the 5 s poll ({waited:?})"
    );
    assert_eq!(
        scripts_sent(&log),
        3,
        "{label}: exactly one attempt for the wake-up"
    );
    assert_eq!(
        l.fencing_token(),
        token + 1,
        "{label}: one node counts grants only"
    );
    let streams = streams_sent(&log);
    assert_eq!(streams.len(), 1, "{label}: one subscription: {streams:?}");
    assert!(
        streams[0].url.ends_with(&channel) && !streams[0].url.contains("push"),
        "{:?}",
        streams[0].url
    );
    // The acquire ended: its stream is closed.
    eventually("the subscription is closed", || {
        subscribers(redis, &channel) == 0
    });
    assert!(l.release().unwrap());
    waiter.close().unwrap();
    holder.close().unwrap();
}

#[test]
fn a_waiter_wakes_on_release_without_polling_via_webdis() {
    let redis = RedisServer::start().expect("redis");
    let webdis = Webdis::start(&redis).expect("webdis");
    wakes_on_release(&redis, RedisNode::webdis(webdis.url()), "webdis");
}

#[test]
fn a_waiter_wakes_on_release_without_polling_via_the_upstash_gateway() {
    let redis = RedisServer::start().expect("redis");
    let gateway = UpstashGateway::start(&redis, TOKEN).expect("gateway");
    wakes_on_release(&redis, RedisNode::upstash(gateway.url(), TOKEN), "upstash");
}

/// The release publishes its fencing token, never the owner token.
#[test]
fn the_release_publishes_the_fencing_token_only() {
    let redis = RedisServer::start().expect("redis");
    let webdis = Webdis::start(&redis).expect("webdis");
    let name = "push/payload";
    let channel = wake_channel(&lock_key("edgelock", name));
    // A raw subscriber on the server itself.
    let mut sub = redis.connect().expect("connect");
    sub.command(&[b"SUBSCRIBE".as_slice(), channel.as_bytes()])
        .expect("SUBSCRIBE");
    let (c, _) = single(RedisNode::webdis(webdis.url()));
    let lock = c.acquire(name, None).unwrap();
    let (token, owner) = (lock.fencing_token(), lock.handle().owner.clone());
    assert!(lock.release().unwrap());
    // Published before this PING is sent, so read before its answer.
    let reply = sub.command(&[b"PING".as_slice()]).expect("read");
    let items = reply.as_array().expect("a pub/sub array").to_vec();
    assert_eq!(
        items[0].as_bytes(),
        Some(b"message".as_slice()),
        "{reply:?}"
    );
    assert_eq!(items[1].as_bytes(), Some(channel.as_bytes()));
    let msg = items[2].as_bytes().expect("payload").to_vec();
    assert_eq!(msg, format!("released:{token}").into_bytes());
    assert!(!String::from_utf8_lossy(&msg).contains(&owner));
    c.close().unwrap();
}

/// A holder that dies publishes nothing: the waiter takes over at its TTL.
#[test]
fn a_dead_holder_is_taken_over_at_its_ttl() {
    let redis = RedisServer::start().expect("redis");
    let webdis = Webdis::start(&redis).expect("webdis");
    let node = RedisNode::webdis(webdis.url());
    let mut cfg = RedisConfig::new(node.clone());
    cfg.ttl_ms = 1_500;
    cfg.auto_extend = false;
    let dead = Client::from_machine(Box::new(
        RedisMachine::new(cfg, Box::new(OsEntropy)).unwrap(),
    ));
    let lock = dead.acquire("push/dead", None).unwrap();
    std::mem::forget(lock); // never released
    let (waiter, log) = single(node);
    let start = Instant::now();
    let l = waiter
        .acquire("push/dead", Some(Duration::from_secs(10)))
        .expect("taken over at the TTL");
    assert!(
        start.elapsed() < Duration::from_secs(4),
        "{:?}",
        start.elapsed()
    );
    // First attempt, the one after confirmation, the one at the PTTL (maybe one more: the PTTL is rounded).
    assert!(scripts_sent(&log) <= 4, "{}", scripts_sent(&log));
    assert!(l.release().unwrap());
}

/// The stream is cut mid-wait (webdis killed and restarted on the same
/// Redis): the waiter falls back to its timer, subscribes again and still
/// acquires as soon as the holder releases.
#[test]
fn a_cut_stream_falls_back_and_still_acquires() {
    let redis = RedisServer::start().expect("redis");
    let gateway = UpstashGateway::start(&redis, TOKEN).expect("gateway");
    let node = RedisNode::upstash(gateway.url(), TOKEN);
    let name = "push/cut";
    let channel = wake_channel(&lock_key("edgelock", name));
    let (holder, _) = single(node.clone());
    let (waiter, log) = single(node);
    let lock = holder.acquire(name, None).unwrap();
    let t = thread::spawn(move || {
        let l = waiter
            .acquire(name, Some(Duration::from_secs(30)))
            .expect("waiter acquires");
        (waiter, l)
    });
    eventually("subscribed", || subscribers(&redis, &channel) == 1);
    // Cut every subscription at the server: the stream ends.
    redis
        .redis_command(&[b"CLIENT", b"KILL", b"TYPE", b"pubsub"])
        .expect("CLIENT KILL");
    eventually("subscribed again", || {
        streams_sent(&log).len() >= 2 && subscribers(&redis, &channel) == 1
    });
    assert!(lock.release().unwrap());
    let (waiter, l) = t.join().unwrap();
    assert!(l.release().unwrap());
    waiter.close().unwrap();
}

/// Redlock: a waiter subscribes on every node and wakes on the release.
#[test]
fn a_redlock_waiter_wakes_on_release() {
    let servers: Vec<RedisServer> = (0..3)
        .map(|_| RedisServer::start().expect("redis"))
        .collect();
    let webdis: Vec<Webdis> = servers
        .iter()
        .step_by(2)
        .map(|r| Webdis::start(r).expect("webdis"))
        .collect();
    let gateway = UpstashGateway::start(&servers[1], TOKEN).expect("gateway");
    let nodes = vec![
        RedisNode::webdis(webdis[0].url()),
        RedisNode::upstash(gateway.url(), TOKEN),
        RedisNode::webdis(webdis[1].url()),
    ];
    let mut cfg = RedlockConfig::new(nodes);
    cfg.ttl_ms = 30_000;
    cfg.retry_delay_ms = 5_000;
    cfg.retry_jitter_ms = 0;
    let holder = Client::from_machine(Box::new(
        RedlockMachine::new(cfg.clone(), Box::new(OsEntropy)).unwrap(),
    ));
    let (waiter, log) = recorded(RedlockMachine::new(cfg, Box::new(OsEntropy)).unwrap());
    let name = "push/redlock";
    let channel = wake_channel(&lock_key("edgelock", name));
    let lock = holder.acquire(name, None).unwrap();
    let t = thread::spawn(move || {
        let l = waiter
            .acquire(name, Some(Duration::from_secs(20)))
            .expect("waiter acquires");
        (waiter, l)
    });
    eventually("subscribed on every node", || {
        servers.iter().all(|r| subscribers(r, &channel) == 1)
    });
    // Its attempts after the confirmations are answered (refused): the
    // next one is the wake-up's, or its poll 5 s away.
    quiet(&log, 3);
    let before = scripts_sent(&log);
    let released_at = Instant::now();
    assert!(lock.release().unwrap());
    let (waiter, l) = t.join().unwrap();
    let woke = first_script_after(&log, released_at).expect("an attempt after the release");
    assert!(
        woke - released_at < Duration::from_secs(2),
        "woken by the push, not its 5 s poll: first attempt {:?} after the release",
        woke - released_at
    );
    // Granted by that attempt, or (when the first node's publish reached the
    // waiter before the release reached the others: one wake-up per
    // release, see redis_election's succession) by its retry 5 s later.
    assert!(
        released_at.elapsed() < Duration::from_secs(5 + 3),
        "{:?}",
        released_at.elapsed()
    );
    assert_eq!(streams_sent(&log).len(), 3);
    assert!(
        scripts_sent(&log) - before <= 3 * 3,
        "at most a few parallel rounds after the wake-up: {}",
        scripts_sent(&log) - before
    );
    eventually("streams closed", || {
        servers.iter().all(|r| subscribers(r, &channel) == 0)
    });
    assert!(l.release().unwrap());
    waiter.close().unwrap();
    holder.close().unwrap();
}

/// `max_subscriptions = 0` keeps the old behaviour: polling only.
#[test]
fn without_subscriptions_waiters_poll() {
    let redis = RedisServer::start().expect("redis");
    let webdis = Webdis::start(&redis).expect("webdis");
    let mut cfg = RedisConfig::new(RedisNode::webdis(webdis.url()));
    cfg.retry_delay_ms = 50;
    cfg.max_subscriptions = 0;
    let holder = Client::from_machine(Box::new(
        RedisMachine::new(cfg.clone(), Box::new(OsEntropy)).unwrap(),
    ));
    let (waiter, log) = recorded(RedisMachine::new(cfg, Box::new(OsEntropy)).unwrap());
    let lock = holder.acquire("push/poll", None).unwrap();
    let t = thread::spawn(move || {
        waiter
            .acquire("push/poll", Some(Duration::from_secs(10)))
            .map(|l| (waiter, l))
    });
    eventually("polling", || scripts_sent(&log) >= 5);
    assert!(lock.release().unwrap());
    let (_w, l) = t.join().unwrap().unwrap();
    assert!(streams_sent(&log).is_empty());
    assert!(l.release().unwrap());
}

/// Scripts travel as `EVALSHA` once a node has run them (a few hundred
/// bytes less per request); after `SCRIPT FLUSH` (what a restart does to
/// the cache) the `NOSCRIPT` answer brings the whole `EVAL` back, and the
/// lock keeps working. Real servers, both protocols.
#[test]
fn scripts_go_by_sha_and_survive_a_flushed_script_cache() {
    let redis = RedisServer::start().expect("redis");
    let webdis = Webdis::start(&redis).expect("webdis");
    let gateway = UpstashGateway::start(&redis, TOKEN).expect("gateway");
    for (label, node) in [
        ("webdis", RedisNode::webdis(webdis.url())),
        ("upstash", RedisNode::upstash(gateway.url(), TOKEN)),
    ] {
        redis
            .redis_command(&[b"SCRIPT", b"FLUSH"])
            .expect("SCRIPT FLUSH");
        let (c, log) = single(node);
        let whole = |log: &Log| {
            log.lock()
                .unwrap()
                .iter()
                .filter(|s| !s.stream && s.evalsha == Some(false))
                .count()
        };
        let by_sha = |log: &Log| {
            log.lock()
                .unwrap()
                .iter()
                .filter(|s| !s.stream && s.evalsha == Some(true))
                .count()
        };
        for _ in 0..3 {
            assert!(c.acquire("sha/job", None).unwrap().release().unwrap());
        }
        assert_eq!(
            (whole(&log), by_sha(&log)),
            (2, 4),
            "{label}: acquire and release whole once each, then by SHA"
        );
        redis
            .redis_command(&[b"SCRIPT", b"FLUSH"])
            .expect("SCRIPT FLUSH");
        let l = c.acquire("sha/job", None).expect("after NOSCRIPT");
        assert!(l.release().unwrap());
        assert_eq!(
            (whole(&log), by_sha(&log)),
            (4, 6),
            "{label}: each script refused once by SHA, then sent whole"
        );
        c.close().unwrap();
    }
}

fn fair_client(node: RedisNode) -> Client {
    let mut cfg = RedisConfig::new(node);
    cfg.ttl_ms = 30_000;
    cfg.fair = true;
    Client::from_machine(Box::new(
        RedisMachine::new(cfg, Box::new(OsEntropy)).expect("config"),
    ))
}

fn queue_len(redis: &RedisServer, name: &str) -> i64 {
    let q = edgelock::internals::redis::keys::queue_key(&lock_key("edgelock", name));
    redis
        .redis_command(&[b"LLEN", q.as_bytes()])
        .expect("LLEN")
        .as_int()
        .unwrap_or(-1)
}

/// Fair mode: 8 waiters queued one after the other get the lock in arrival
/// order, each woken alone by its predecessor's release; a queued waiter
/// that vanished without leaving (an entry whose lease nobody renews) is
/// skipped once its lease is over; a waiter that gives up leaves at once.
#[test]
fn fair_mode_hands_off_in_arrival_order_and_survives_a_vanished_waiter() {
    let redis = RedisServer::start().expect("redis");
    let gateway = UpstashGateway::start(&redis, TOKEN).expect("gateway");
    let webdis = Webdis::start(&redis).expect("webdis");
    let name = "fair/job";
    let holder = fair_client(RedisNode::upstash(gateway.url(), TOKEN));
    let lock = holder.acquire(name, None).unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut threads = Vec::new();
    for i in 0..8 {
        if i == 3 {
            // A waiter that vanished: queued with a 2 s lease, never renewed.
            let key = lock_key("edgelock", name);
            let t = redis.redis_command(&[b"TIME"]).unwrap();
            let secs: u64 = t.as_array().unwrap()[0].as_text().unwrap().parse().unwrap();
            let exp = (secs * 1000 + 2_000).to_string();
            let q = edgelock::internals::redis::keys::queue_key(&key);
            let l = edgelock::internals::redis::keys::leases_key(&key);
            redis
                .redis_command(&[b"RPUSH", q.as_bytes(), b"vanished"])
                .unwrap();
            redis
                .redis_command(&[b"ZADD", l.as_bytes(), exp.as_bytes(), b"vanished"])
                .unwrap();
        }
        let node = if i % 2 == 0 {
            RedisNode::upstash(gateway.url(), TOKEN)
        } else {
            RedisNode::webdis(webdis.url())
        };
        let c = fair_client(node);
        let order = order.clone();
        threads.push(thread::spawn(move || {
            let l = c
                .acquire(name, Some(Duration::from_secs(60)))
                .expect("fair waiter acquires");
            order.lock().unwrap().push(i);
            thread::sleep(Duration::from_millis(20));
            assert!(l.release().unwrap());
            c.close().unwrap();
        }));
        let queued = i + 1 + usize::from(i >= 3);
        eventually("the waiter joined the queue", || {
            queue_len(&redis, name) == queued as i64
        });
    }
    // A waiter that gives up leaves the queue at once.
    let quitter = fair_client(RedisNode::webdis(webdis.url()));
    assert!(matches!(
        quitter.acquire(name, Some(Duration::from_millis(300))),
        Err(LockError::Timeout { .. })
    ));
    assert_eq!(queue_len(&redis, name), 9, "the quitter left the queue");
    let start = Instant::now();
    assert!(lock.release().unwrap());
    for t in threads {
        t.join().expect("waiter thread");
    }
    assert_eq!(
        *order.lock().unwrap(),
        (0..8).collect::<Vec<_>>(),
        "arrival order"
    );
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(queue_len(&redis, name), 0);
    holder.close().unwrap();
}
