//! Read-write locks (`LockKind::Shared` readers, `LockKind::Exclusive`
//! writers) against real servers: one Redis node through the Upstash
//! gateway and through webdis, each started by the test through
//! `edgelock-devtools` and stopped when it ends; Redlock over three nodes
//! refuses readers before sending anything.
//!
//! For each protocol: readers hold side by side (one request each way); a
//! writer's try is not acquired while they do; a waiting writer sets its
//! intent, so that a reader arriving after it is not acquired (try) or
//! waits behind it; the last reader's release wakes the writer by push and
//! it gets a token above every reader's; the writer's release wakes the
//! waiting reader by push; inspect lists readers without tokens; a reader's
//! handle resumes as a reader and extends; a reader that stops renewing
//! frees the writer at its lease's end, and its late release leaves the
//! other readers in place.
#![cfg(feature = "native")]

use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use edgelock::core::redis::{RedisConfig, RedisMachine, RedisNode, RedlockConfig, RedlockMachine};
use edgelock::core::*;
use edgelock::internals::redis::keys::{intent_key, lock_key, readers_key};
use edgelock::native::{Client, Lock, OsEntropy};

mod common;
use common::redis_node::Node;

const TOKEN: &str = "rwlock-test-token-0123456789abc";
const NAME: &str = "config";

/// Whether `owner` is a reader of the name (its member in the readers' set).
fn is_reader(node: &Node, owner: &str) -> bool {
    let key = readers_key(&lock_key("edgelock", NAME));
    !node
        .redis
        .redis_command(&[b"ZSCORE", key.as_bytes(), owner.as_bytes()])
        .expect("ZSCORE")
        .as_bytes()
        .unwrap_or_default()
        .is_empty()
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Via {
    Upstash,
    Webdis,
}

/// What a client sent: when, and whether it was a subscription.
type Log = Arc<Mutex<Vec<(Instant, bool)>>>;

/// A client of `node` with `ttl_ms`, renewing or not, recording what it
/// sends; its waiters poll at least every 2 s (only a push makes them quick).
fn client(node: &Node, via: Via, ttl_ms: u64, auto_extend: bool) -> (Client, Log) {
    let log = Log::default();
    let sink = log.clone();
    let on_send: Box<dyn FnMut(&HttpRequest) + Send> =
        Box::new(move |r: &HttpRequest| sink.lock().unwrap().push((Instant::now(), r.stream)));
    let n = match via {
        Via::Upstash => RedisNode::upstash(node.gateway.url(), TOKEN),
        Via::Webdis => RedisNode::webdis(node.webdis.url()),
    };
    let mut cfg = RedisConfig::new(n);
    (
        cfg.ttl_ms,
        cfg.auto_extend,
        cfg.retry_delay_ms,
        cfg.retry_jitter_ms,
    ) = (ttl_ms, auto_extend, 5_000, 0);
    let m = RedisMachine::new(cfg, Box::new(OsEntropy)).expect("config");
    (
        Client::from_machine(Box::new(common::Observing {
            inner: m,
            on_send,
            on_input: None,
        })),
        log,
    )
}

fn read(c: &Client, wait: Wait) -> Result<Option<Lock>, LockError> {
    c.acquire_kind(
        NAME,
        LockKind::Shared,
        AcquireOptions { wait, ttl_ms: None },
        None,
    )
}

/// Runs `op` again (up to 5 times) while it fails with the signature of
/// webdis 0.1.9's misrouting: right after a subscriber disconnects, webdis
/// may write that subscriber's pending pub/sub chunk (a hex chunk-size line
/// first) into a new connection that reused its descriptor, so the next
/// answer on it is not HTTP. The quitting writer's subscription closes just
/// before the try below; the CI rehearsal under load met it once. A failed
/// try-acquire is cleaned up by the client, so another try is a fresh one.
fn past_webdis_misrouting<T>(mut op: impl FnMut() -> Result<T, LockError>) -> Result<T, LockError> {
    let mut tries = 1;
    loop {
        match op() {
            Err(e) if tries < 5 && e.to_string().contains("not an HTTP/1.x response") => tries += 1,
            other => return other,
        }
    }
}

fn write(c: &Client, wait: Wait) -> Result<Option<Lock>, LockError> {
    c.acquire_kind(
        NAME,
        LockKind::Exclusive,
        AcquireOptions { wait, ttl_ms: None },
        None,
    )
}

fn sent(log: &Log) -> usize {
    log.lock().unwrap().len()
}

fn scripts_since(log: &Log, t: Instant) -> usize {
    log.lock()
        .unwrap()
        .iter()
        .filter(|(at, stream)| *at >= t && !stream)
        .count()
}

fn streams(log: &Log) -> usize {
    log.lock()
        .unwrap()
        .iter()
        .filter(|(_, stream)| *stream)
        .count()
}

/// Waits until a waiter has subscribed and gone quiet (its attempt after
/// the confirmation answered), so that its next poll is seconds away.
fn settled(log: &Log) {
    let end = Instant::now() + Duration::from_secs(10);
    while streams(log) < 1 || scripts_since(log, Instant::now() - Duration::from_millis(150)) > 0 {
        assert!(Instant::now() < end, "the waiter never settled");
        thread::sleep(Duration::from_millis(50));
    }
    thread::sleep(Duration::from_millis(100));
}

/// A waiter granted at `got_at`, `released_at` being the release that
/// should have woken it: by push, not by its poll (due 2 s after its last
/// attempt before the release).
fn woken_by_push(what: &str, got_at: Instant, released_at: Instant, last_before: Instant) {
    let woke_in = got_at - released_at;
    eprintln!("{what}: granted {woke_in:?} after the release");
    assert!(
        got_at - last_before < Duration::from_millis(1_900),
        "{what}: granted at its poll ({:?} after its last attempt)",
        got_at - last_before
    );
    assert!(
        woke_in < Duration::from_millis(1_000),
        "{what}: not woken by the release: {woke_in:?}"
    );
}

fn rwlock_scenario(via: Via) {
    let node = Node::start(TOKEN);
    let intent = intent_key(&lock_key("edgelock", NAME));
    let readers: Vec<(Client, Log)> = (0..3).map(|_| client(&node, via, 30_000, true)).collect();

    // Readers side by side, one request each; distinct, rising tokens.
    let mut held = Vec::new();
    let mut tokens = Vec::new();
    for (c, log) in &readers {
        let before = sent(log);
        let lock = read(c, Wait::Try).unwrap().expect("readers share");
        assert_eq!(
            sent(log) - before,
            1,
            "{via:?}: an uncontended shared acquire is one request"
        );
        assert_eq!(lock.kind(), LockKind::Shared);
        assert!(is_reader(&node, &lock.handle().owner));
        assert!(tokens.last().map_or(true, |t| lock.fencing_token() > *t));
        tokens.push(lock.fencing_token());
        held.push(lock);
    }

    // A writer's try: not acquired, and it leaves no intent behind.
    let (writer, writer_log) = client(&node, via, 30_000, true);
    assert!(write(&writer, Wait::Try).unwrap().is_none());
    assert!(!node.exists(&intent), "a try sets no writer intent");

    // Inspect: three shared holders, no token anywhere.
    let st = readers[0].0.inspect(NAME).unwrap();
    assert!(st.held);
    assert_eq!(st.holders.len(), 3, "{st:?}");
    assert!(st
        .holders
        .iter()
        .all(|h| h.kind == LockKind::Shared && h.id.is_empty() && h.fencing_token.is_none()));
    assert!(
        st.remaining_ms.is_some_and(|r| r > 20_000 && r <= 30_000),
        "{st:?}"
    );
    let shown = format!("{st:?}");
    assert!(
        held.iter().all(|l| !shown.contains(&l.handle().owner)),
        "a token leaked into the status"
    );

    // A writer that waits sets its intent: a reader arriving after it is
    // not acquired (try) and waits behind it.
    let w = thread::spawn(move || {
        let lock = write(&writer, Wait::For(20_000));
        (lock, Instant::now(), writer)
    });
    settled(&writer_log);
    assert!(node.exists(&intent), "the waiting writer's intent");
    let (late, late_log) = client(&node, via, 30_000, true);
    assert!(
        read(&late, Wait::Try).unwrap().is_none(),
        "a reader arriving after a waiting writer queues behind it"
    );
    let r = thread::spawn(move || {
        let lock = read(&late, Wait::For(20_000));
        (lock, Instant::now(), late)
    });
    settled(&late_log);

    // The readers leave; the last one's release wakes the writer (push).
    let last = held.pop().unwrap();
    for l in held.drain(..) {
        assert!(l.release().unwrap());
    }
    thread::sleep(Duration::from_millis(300));
    assert!(!w.is_finished(), "granted while a reader holds");
    let before = common::just_after_an_attempt(&writer_log);
    let released_at = Instant::now();
    assert!(last.release().unwrap());
    let (wlock, got_at, _writer) = w.join().unwrap();
    let wlock = wlock
        .unwrap()
        .expect("the writer is granted once the readers left");
    woken_by_push(&format!("{via:?} writer"), got_at, released_at, before);
    assert!(
        tokens.iter().all(|t| wlock.fencing_token() > *t),
        "writer token {} after readers' {tokens:?}",
        wlock.fencing_token()
    );
    assert!(!node.exists(&intent), "a grant deletes the intent");

    // The writer holds: the queued reader waits, and its release wakes it (push).
    thread::sleep(Duration::from_millis(300));
    assert!(!r.is_finished(), "a reader granted beside the writer");
    let st = readers[0].0.inspect(NAME).unwrap();
    assert_eq!(
        (st.holders.len(), st.holders[0].kind),
        (1, LockKind::Exclusive),
        "{st:?}"
    );
    let before = common::just_after_an_attempt(&late_log);
    let writer_token = wlock.fencing_token();
    let released_at = Instant::now();
    assert!(wlock.release().unwrap());
    let (rlock, got_at, _late) = r.join().unwrap();
    let rlock = rlock
        .unwrap()
        .expect("the reader is granted after the writer");
    woken_by_push(&format!("{via:?} reader"), got_at, released_at, before);
    assert!(rlock.fencing_token() > writer_token);

    // Resume on another client, as a reader; extend there.
    let (other, _) = client(&node, via, 30_000, true);
    let resumed = other.resume(rlock.handle()).unwrap();
    assert_eq!(
        (resumed.kind(), resumed.fencing_token()),
        (LockKind::Shared, rlock.fencing_token())
    );
    resumed.extend(Some(Duration::from_secs(20))).unwrap();
    let mut stale = rlock.handle().clone();
    stale.owner = "0".repeat(40);
    assert_eq!(
        other.resume(&stale).expect_err("not a reader").code(),
        "LOST"
    );
    let owner = rlock.handle().owner.clone();
    assert!(resumed.release().unwrap());
    assert!(!is_reader(&node, &owner));
    assert!(
        !rlock.release().unwrap(),
        "released through the resumed handle already"
    );

    // A reader that stops renewing: the writer waits for its lease's end,
    // and its late release finds nothing to remove.
    let (short, _) = client(&node, via, 400, false);
    // The reader's 400 ms lease starts after this instant, however long
    // its round trip is on a loaded machine.
    let t0 = Instant::now();
    let expiring = read(&short, Wait::Try).unwrap().expect("free");
    let (w2c, _) = client(&node, via, 30_000, true);
    let w2 = write(&w2c, Wait::For(10_000))
        .unwrap()
        .expect("granted once the reader's lease ended");
    assert!(
        t0.elapsed() >= Duration::from_millis(390),
        "granted before the reader's lease ended: {:?}",
        t0.elapsed()
    );
    assert!(w2.fencing_token() > expiring.fencing_token());
    assert!(
        !expiring.release().unwrap(),
        "the expired reader learns it had lost it"
    );
    assert!(w2.release().unwrap());

    // Its late release leaves the other readers in place.
    let (short, _) = client(&node, via, 400, false);
    let expiring = read(&short, Wait::Try).unwrap().expect("free");
    let (long, _) = client(&node, via, 30_000, true);
    let staying = read(&long, Wait::Try).unwrap().expect("readers share");
    thread::sleep(Duration::from_millis(600));
    assert!(!expiring.release().unwrap());
    assert!(
        is_reader(&node, &staying.handle().owner),
        "a late release removed another reader"
    );
    assert_eq!(long.inspect(NAME).unwrap().holders.len(), 1);

    // A writer that gives up takes its intent along: readers are not held
    // back until it expires.
    let (quitter, _) = client(&node, via, 30_000, true);
    let e = write(&quitter, Wait::For(300)).expect_err("readers hold");
    assert_eq!(e.code(), "TIMEOUT", "{e}");
    assert!(!node.exists(&intent), "the intent of a writer that gave up");
    let (next, _) = client(&node, via, 30_000, true);
    let joined = past_webdis_misrouting(|| read(&next, Wait::Try))
        .unwrap()
        .expect("no intent left behind");
    assert!(joined.release().unwrap());
    assert!(staying.release().unwrap());
    assert!(!long.inspect(NAME).unwrap().held);
}

#[test]
fn a_read_write_lock_through_the_upstash_gateway() {
    rwlock_scenario(Via::Upstash);
}

#[test]
fn a_read_write_lock_through_webdis() {
    rwlock_scenario(Via::Webdis);
}

/// An uncontended reader costs one request to acquire and one to release,
/// like the exclusive lock.
#[test]
fn an_uncontended_reader_costs_one_request_each_way() {
    let node = Node::start(TOKEN);
    let (c, log) = client(&node, Via::Upstash, 30_000, true);
    let lock = read(&c, Wait::Try).unwrap().unwrap();
    assert_eq!(sent(&log), 1, "acquire");
    assert!(lock.release().unwrap());
    assert_eq!(sent(&log), 2, "release");
    let lock = write(&c, Wait::Try).unwrap().unwrap();
    assert!(lock.release().unwrap());
    assert_eq!(
        sent(&log),
        4,
        "the writer's acquire and release stay one request each"
    );
    c.close().unwrap();
}

/// Redlock does not grant readers: refused before anything is sent.
#[test]
fn redlock_refuses_readers_before_sending() {
    let nodes: Vec<Node> = (0..3).map(|_| Node::start(TOKEN)).collect();
    let log = Log::default();
    let sink = log.clone();
    let on_send: Box<dyn FnMut(&HttpRequest) + Send> =
        Box::new(move |r: &HttpRequest| sink.lock().unwrap().push((Instant::now(), r.stream)));
    let cfg = RedlockConfig::new(
        nodes
            .iter()
            .map(|n| RedisNode::webdis(n.webdis.url()))
            .collect(),
    );
    let m = RedlockMachine::new(cfg, Box::new(OsEntropy)).expect("config");
    let c = Client::from_machine(Box::new(common::Observing {
        inner: m,
        on_send,
        on_input: None,
    }));
    let e = read(&c, Wait::Try).expect_err("refused");
    assert_eq!(e.code(), "INVALID_ARGUMENT", "{e}");
    assert!(
        e.to_string()
            .contains("redlock backend does not offer shared locks"),
        "{e}"
    );
    assert_eq!(sent(&log), 0);
    // The writer side works as before.
    let w = write(&c, Wait::Try).unwrap().expect("free");
    assert!(w.release().unwrap());
}
