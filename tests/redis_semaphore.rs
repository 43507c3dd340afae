//! Semaphores (`LockKind::Permits`) against real servers: one Redis node
//! through the Upstash gateway and through webdis, and Redlock on three
//! nodes (mixed protocols), each started by the test through
//! `edgelock-devtools` and stopped when it ends.
//!
//! For each: three holders of a limit-3 semaphore get distinct slots, a
//! fourth `Wait::Try` is not acquired, a waiting fourth is woken by a
//! release (push, not its poll) and takes the freed slot with a higher
//! token, another limit is refused while permits are held (and takes
//! nothing), inspect lists the permits by slot without tokens, resume and
//! extend work, an expired permit frees its slot at its TTL and its late
//! release does not free the next holder's, and the limit may change once
//! the semaphore is empty.
#![cfg(feature = "native")]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use edgelock::core::redis::{RedisConfig, RedisMachine, RedlockConfig, RedlockMachine};
use edgelock::core::*;
use edgelock::internals::redis::keys::{limit_key, lock_key, permit_key};
use edgelock::native::{Client, Lock, OsEntropy};

mod common;
use common::redis_node::{Nodes as Setup, Via};

const TOKEN: &str = "semaphore-test-token-0123456789";
const NAME: &str = "pool";

/// What a client sent: when, and whether it was a subscription.
type Log = Arc<Mutex<Vec<(Instant, bool)>>>;

impl Setup {
    fn new(via: Via) -> Setup {
        Setup::start(via, TOKEN)
    }

    /// A client with `ttl_ms`, renewing or not, polling at most every 5 s
    /// while waiting (only a push makes a waiter quick), recording what it sends.
    fn client(&self, ttl_ms: u64, auto_extend: bool) -> (Client, Log) {
        let log = Log::default();
        let sink = log.clone();
        let on_send: Box<dyn FnMut(&HttpRequest) + Send> =
            Box::new(move |r: &HttpRequest| sink.lock().unwrap().push((Instant::now(), r.stream)));
        let client = if self.via == Via::Redlock {
            let mut cfg = RedlockConfig::new((0..self.nodes.len()).map(|i| self.node(i)).collect());
            (
                cfg.ttl_ms,
                cfg.auto_extend,
                cfg.retry_delay_ms,
                cfg.retry_jitter_ms,
            ) = (ttl_ms, auto_extend, 5_000, 0);
            let m = RedlockMachine::new(cfg, Box::new(OsEntropy)).expect("config");
            Client::from_machine(Box::new(common::Observing {
                inner: m,
                on_send,
                on_input: None,
            }))
        } else {
            let mut cfg = RedisConfig::new(self.node(0));
            (
                cfg.ttl_ms,
                cfg.auto_extend,
                cfg.retry_delay_ms,
                cfg.retry_jitter_ms,
            ) = (ttl_ms, auto_extend, 5_000, 0);
            let m = RedisMachine::new(cfg, Box::new(OsEntropy)).expect("config");
            Client::from_machine(Box::new(common::Observing {
                inner: m,
                on_send,
                on_input: None,
            }))
        };
        (client, log)
    }

    /// How many nodes hold `owner` in slot `slot` of the semaphore.
    fn holding(&self, slot: u32, owner: &str) -> usize {
        let key = permit_key(&lock_key("edgelock", NAME), slot);
        self.nodes
            .iter()
            .filter(|n| n.get(&key).as_deref() == Some(owner.as_bytes()))
            .count()
    }

    fn quorum(&self) -> usize {
        self.nodes.len() / 2 + 1
    }
}

fn permits(limit: u32, wait: Wait) -> (LockKind, AcquireOptions) {
    (
        LockKind::Permits { limit },
        AcquireOptions { wait, ttl_ms: None },
    )
}

fn take(c: &Client, limit: u32, wait: Wait) -> Result<Option<Lock>, LockError> {
    let (kind, opts) = permits(limit, wait);
    c.acquire_kind(NAME, kind, opts, None)
}

/// Per slot, the last token handed out: every grant must raise it.
#[derive(Default)]
struct Tokens(BTreeMap<u32, u64>);

impl Tokens {
    fn granted(&mut self, lock: &Lock) {
        let slot = lock.slot().expect("a permit has a slot");
        let last = self.0.insert(slot, lock.fencing_token()).unwrap_or(0);
        assert!(
            lock.fencing_token() > last,
            "slot {slot}: token {} after {last}",
            lock.fencing_token()
        );
    }
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

fn semaphore_scenario(via: Via) {
    let s = Setup::new(via);
    let mut tokens = Tokens::default();
    let clients: Vec<(Client, Log)> = (0..3).map(|_| s.client(30_000, true)).collect();

    // Three holders, distinct slots; what one acquire and release cost.
    let mut held = Vec::new();
    for (c, log) in &clients {
        let before = log.lock().unwrap().len();
        let lock = take(c, 3, Wait::Try).unwrap().expect("a free permit");
        assert_eq!(lock.kind(), LockKind::Permits { limit: 3 });
        tokens.granted(&lock);
        assert!(s.holding(lock.slot().unwrap(), &lock.handle().owner) >= s.quorum());
        eprintln!(
            "{via:?}: permit acquire sent {} requests",
            log.lock().unwrap().len() - before
        );
        held.push(lock);
    }
    let slots: std::collections::BTreeSet<u32> = held.iter().filter_map(Lock::slot).collect();
    assert_eq!(slots.len(), 3, "distinct slots: {slots:?}");
    assert!(slots.iter().all(|k| *k < 3));

    // The fourth: a try is not acquired.
    let (fourth, fourth_log) = s.client(30_000, true);
    assert!(take(&fourth, 3, Wait::Try).unwrap().is_none());

    // Another limit while permits are held: INVALID_ARGUMENT, nothing taken.
    let e = take(&fourth, 5, Wait::Try).expect_err("refused");
    assert_eq!(e.code(), "INVALID_ARGUMENT", "{e}");
    assert!(e.to_string().contains("has limit 3, not 5"), "{e}");
    let e = take(&fourth, 2, Wait::Forever).expect_err("refused");
    assert_eq!(e.code(), "INVALID_ARGUMENT", "{e}");
    for n in &s.nodes {
        assert_eq!(
            n.get(limit_key(&lock_key("edgelock", NAME))).as_deref(),
            Some(&b"3"[..])
        );
        for k in 3..5 {
            assert!(
                n.get(permit_key(&lock_key("edgelock", NAME), k)).is_none(),
                "slot {k} taken by a refused limit"
            );
        }
    }

    // Inspect: the limit and the three slots, no token anywhere.
    let st = clients[0].0.inspect(NAME).unwrap();
    assert!(st.held);
    assert_eq!(st.limit, Some(3));
    let mut listed: Vec<u32> = st.holders.iter().filter_map(|h| h.slot).collect();
    listed.sort();
    assert_eq!(listed, [0, 1, 2], "{st:?}");
    assert!(st
        .holders
        .iter()
        .all(|h| h.id.is_empty() && h.kind == LockKind::Permits { limit: 3 }));
    assert!(
        st.remaining_ms.is_some_and(|r| r > 20_000 && r <= 30_000),
        "{st:?}"
    );
    let shown = format!("{st:?}");
    assert!(
        held.iter().all(|l| !shown.contains(&l.handle().owner)),
        "a token leaked into the status"
    );

    // A waiter is woken by a release (push): its poll is seconds away.
    let waiter = thread::spawn(move || {
        let lock = take(&fourth, 3, Wait::For(20_000));
        (lock, Instant::now(), fourth)
    });
    // Subscribed (on every node) and past its attempt after the confirmation.
    let end = Instant::now() + Duration::from_secs(10);
    while streams(&fourth_log) < s.nodes.len()
        || scripts_since(&fourth_log, Instant::now() - Duration::from_millis(150)) > 0
    {
        assert!(Instant::now() < end, "the waiter never settled");
        thread::sleep(Duration::from_millis(50));
    }
    let before = common::just_after_an_attempt(&fourth_log);
    let released = held.remove(1);
    let freed = released.slot().unwrap();
    let released_at = Instant::now();
    assert!(released.release().unwrap());
    let (lock, got_at, _fourth) = waiter.join().unwrap();
    let lock = lock.unwrap().expect("granted after the release");
    let woke_in = got_at - released_at;
    eprintln!(
        "{via:?}: the waiter got the freed permit {woke_in:?} after the release ({} scripts)",
        scripts_since(&fourth_log, released_at)
    );
    // Its next poll was due 2 s (one node) or 5 s (Redlock) after its last attempt.
    assert!(
        got_at - before < Duration::from_millis(1_900),
        "granted at its poll, not by the release ({:?})",
        got_at - before
    );
    assert!(
        woke_in < Duration::from_millis(1_000),
        "woken by its poll, not the release: {woke_in:?}"
    );
    assert_eq!(lock.slot(), Some(freed), "the only free slot");
    tokens.granted(&lock);
    held.push(lock);

    // Resume on another client, extend there, owner-checked: the handle
    // of a released permit no longer resumes.
    let (other, _) = s.client(30_000, true);
    let resumed = other.resume(held[0].handle()).unwrap();
    assert_eq!(
        (resumed.kind(), resumed.slot()),
        (held[0].kind(), held[0].slot())
    );
    resumed.extend(Some(Duration::from_secs(20))).unwrap();
    let mut stale = held[2].handle().clone();
    stale.owner = "0".repeat(40);
    assert!(other.resume(&stale).is_err());

    // A holder that stops renewing frees its slot at its TTL; its late
    // release does not free the next holder's permit.
    let (short, _) = s.client(400, false);
    let freed = held.pop().unwrap();
    let freed_slot = freed.slot().unwrap();
    assert!(freed.release().unwrap());
    // The permit's 400 ms TTL starts after this instant, however long the
    // take's round trip is on a loaded machine.
    let t0 = Instant::now();
    let expiring = take(&short, 3, Wait::Try).unwrap().expect("the freed slot");
    tokens.granted(&expiring);
    assert_eq!(expiring.slot(), Some(freed_slot));
    let (next_client, _) = s.client(30_000, true);
    let next = take(&next_client, 3, Wait::For(10_000))
        .unwrap()
        .expect("granted once the permit expired");
    assert!(
        t0.elapsed() >= Duration::from_millis(390),
        "granted before the 400 ms TTL: {:?}",
        t0.elapsed()
    );
    assert_eq!(next.slot(), Some(freed_slot));
    tokens.granted(&next);
    // Owner-checked on the server: the expired permit's handle resumes nothing.
    let e = other
        .resume(expiring.handle())
        .expect_err("the slot is the next holder's");
    assert_eq!(e.code(), "LOST", "{e}");
    assert!(
        !expiring.release().unwrap(),
        "the expired holder learns it had lost it"
    );
    assert!(
        s.holding(freed_slot, &next.handle().owner) >= s.quorum(),
        "the next holder's permit is intact"
    );

    // Everything released: the limit may change.
    drop(resumed);
    for l in held.into_iter().chain([next]) {
        l.release().unwrap();
    }
    let (c5, _) = s.client(30_000, true);
    let five: Vec<Lock> = (0..5)
        .map(|_| take(&c5, 5, Wait::Try).unwrap().expect("a permit of 5"))
        .collect();
    for l in &five {
        tokens.granted(l);
    }
    assert!(take(&c5, 5, Wait::Try).unwrap().is_none());
    assert_eq!(c5.inspect(NAME).unwrap().limit, Some(5));
    for l in five {
        assert!(l.release().unwrap());
    }
    assert!(!c5.inspect(NAME).unwrap().held);
}

#[test]
fn a_semaphore_through_the_upstash_gateway() {
    semaphore_scenario(Via::Upstash);
}

#[test]
fn a_semaphore_through_webdis() {
    semaphore_scenario(Via::Webdis);
}

#[test]
fn a_semaphore_on_redlock_over_three_nodes() {
    semaphore_scenario(Via::Redlock);
}

#[test]
fn an_uncontended_permit_costs_one_request_per_node_each_way() {
    for via in [Via::Upstash, Via::Redlock] {
        let s = Setup::new(via);
        let (c, log) = s.client(30_000, true);
        let n = s.nodes.len();
        let lock = take(&c, 3, Wait::Try).unwrap().unwrap();
        assert_eq!(log.lock().unwrap().len(), n, "{via:?}: acquire");
        assert!(lock.release().unwrap());
        assert_eq!(log.lock().unwrap().len(), 2 * n, "{via:?}: release");
        c.close().unwrap();
    }
}
