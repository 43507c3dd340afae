//! Semaphores (`LockKind::Permits`) on a real etcd, started by each test on
//! free loopback ports with a temp data dir (`EDGELOCK_ETCD_BIN` picks
//! another etcd, e.g. 3.5 from `scripts/etcd35.sh`).
#![cfg(feature = "native")]

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use edgelock::core::etcd::{EtcdConfig, EtcdMachine};
use edgelock::core::*;
use edgelock::native::{Client, Lock, OsEntropy};
use edgelock_devtools::EtcdServer;
use serde_json::json;

mod common;
use common::etcd_raw::{b64, keys_of, raw};
use common::etcd_traffic::{self, Traffic};

fn config(etcd: &EtcdServer) -> EtcdConfig {
    EtcdConfig::new(vec![etcd.url()])
}

fn client(etcd: &EtcdServer) -> Client {
    Client::etcd(config(etcd)).expect("client")
}

fn permits(limit: u64) -> LockKind {
    LockKind::permits(limit).unwrap()
}

fn opts(wait: Wait) -> AcquireOptions {
    AcquireOptions { wait, ttl_ms: None }
}

fn take(c: &Client, name: &str, limit: u64) -> Lock {
    c.acquire_kind(name, permits(limit), opts(Wait::For(30_000)), None)
        .expect("acquire")
        .expect("granted")
}

fn try_take(c: &Client, name: &str, limit: u64) -> Option<Lock> {
    c.acquire_kind(name, permits(limit), opts(Wait::Try), None)
        .expect("try acquire")
}

/// Queue keys (not slot keys) of `name`.
fn queue_keys(etcd: &EtcdServer, name: &str) -> Vec<String> {
    keys_of(etcd, name)
        .into_iter()
        .filter(|k| !k.starts_with(&format!("edgelock/{name}/s/")))
        .collect()
}

fn counted_client(etcd: &EtcdServer) -> (Client, Arc<Traffic>) {
    etcd_traffic::counted_client(EtcdMachine::new(config(etcd), Box::new(OsEntropy)).unwrap())
}

fn wait_until(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn three_permits_from_different_clients_and_from_one_client() {
    let etcd = EtcdServer::start().expect("start etcd");
    let (a, b, c) = (client(&etcd), client(&etcd), client(&etcd));
    // One client holds two permits at once (no local queueing behind itself).
    let a1 = take(&a, "pool", 3);
    let a2 = take(&a, "pool", 3);
    let b1 = take(&b, "pool", 3);
    let mut slots: Vec<u32> = [&a1, &a2, &b1]
        .iter()
        .map(|l| l.slot().expect("a permit has a slot"))
        .collect();
    slots.sort();
    assert_eq!(slots, vec![0, 1, 2], "three holders, three distinct slots");
    for l in [&a1, &a2, &b1] {
        assert_eq!(l.kind(), LockKind::Permits { limit: 3 });
        assert_eq!(l.handle().kind, LockKind::Permits { limit: 3 });
        assert!(
            l.fencing_token() > l.handle().revision,
            "the token is the slot key's create revision"
        );
    }
    // The fourth, from a third client or from a holder, is refused and leaves no key.
    assert!(try_take(&c, "pool", 3).is_none());
    assert!(try_take(&a, "pool", 3).is_none());
    assert_eq!(
        queue_keys(&etcd, "pool").len(),
        3,
        "the refused tries left no queue key"
    );
    assert_eq!(
        keys_of(&etcd, "pool").len(),
        6,
        "three queue keys and three slot keys"
    );
    assert!(a2.release().unwrap(), "held until release");
    let c1 = try_take(&c, "pool", 3).expect("a permit is free again");
    for l in [a1, b1, c1] {
        assert!(l.release().unwrap());
    }
    assert!(keys_of(&etcd, "pool").is_empty(), "nothing left behind");
}

/// Six waiters behind three holders: granted in arrival order, and each
/// handoff wakes O(1) waiters (the first one, then the one its claim
/// promotes), not all six.
#[test]
fn waiters_are_granted_fifo_and_a_release_does_not_wake_every_waiter() {
    let etcd = EtcdServer::start().expect("start etcd");
    let holder = client(&etcd);
    let held: Vec<Lock> = (0..3).map(|_| take(&holder, "fifo", 3)).collect();
    let grants = Arc::new(Mutex::new(Vec::new()));
    let release_tx: Vec<std::sync::mpsc::Sender<()>> = Vec::new();
    let mut release_tx = release_tx;
    let mut threads = Vec::new();
    let mut traffic = Vec::new();
    const WAITERS: usize = 6;
    for i in 0..WAITERS {
        let (c, t) = counted_client(&etcd);
        traffic.push(t);
        let grants = grants.clone();
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        release_tx.push(tx);
        threads.push(std::thread::spawn(move || {
            let l = take(&c, "fifo", 3);
            grants
                .lock()
                .unwrap()
                .push((i, l.slot().unwrap(), l.fencing_token()));
            rx.recv().unwrap();
            assert!(l.release().unwrap(), "waiter {i} held until release");
            c.close().unwrap();
        }));
        // Waiter i queues before waiter i + 1 starts.
        wait_until(&format!("waiter {i} queued"), || {
            queue_keys(&etcd, "fifo").len() == 3 + i + 1
        });
    }
    let total = |f: fn(&Traffic) -> usize| traffic.iter().map(|t| f(t)).sum::<usize>();
    let rechecks = |t: &Traffic| t.rechecks.load(Ordering::SeqCst);
    let events = |t: &Traffic| t.watch_events.load(Ordering::SeqCst);
    // Let every waiter settle on its watch.
    wait_until("every waiter watches", || {
        traffic
            .iter()
            .all(|t| t.watches.load(Ordering::SeqCst) >= 1)
    });
    std::thread::sleep(Duration::from_millis(300));
    let mut per_handoff = Vec::new();
    // Six handoffs: the three holders release, then the first three waiters.
    let mut held = held.into_iter();
    for h in 0..WAITERS {
        let (r0, e0) = (total(rechecks), total(events));
        match held.next() {
            Some(l) => assert!(l.release().unwrap()),
            None => release_tx[h - 3].send(()).unwrap(),
        }
        wait_until(&format!("handoff {h} granted"), || {
            grants.lock().unwrap().len() == h + 1
        });
        // The grant ends the first waiter's part; the waiter behind it (if
        // any) re-checks on the claim afterwards, on its own time. Wait for
        // that chain to have happened, so that it is counted here and not
        // in the next handoff however slowly it ran; then give any further
        // (herd) wake-ups 300 ms to show up.
        let chain = if h + 1 < WAITERS { 2 } else { 1 };
        wait_until(&format!("handoff {h}'s wake-up chain"), || {
            total(rechecks) - r0 >= chain && total(events) - e0 >= chain
        });
        std::thread::sleep(Duration::from_millis(300));
        per_handoff.push((total(rechecks) - r0, total(events) - e0));
    }
    for tx in &release_tx[3..] {
        tx.send(()).unwrap();
    }
    for t in threads {
        t.join().unwrap();
    }
    eprintln!("re-check txns and watch messages with events per handoff ({WAITERS} waiters): {per_handoff:?}");
    for (h, (rechecks, events)) in per_handoff.iter().enumerate() {
        // The first waiter re-checks on the holder's delete, and the waiter
        // behind it on the first one's claim: two, whatever the queue length.
        assert!(
            *rechecks <= 2,
            "handoff {h}: {rechecks} re-checks (a herd would be up to {})",
            WAITERS - h
        );
        assert!(*events <= 2, "handoff {h}: {events} watch messages");
    }
    let grants = grants.lock().unwrap().clone();
    let mut by_token = grants.clone();
    by_token.sort_by_key(|g| g.2);
    assert_eq!(
        by_token.iter().map(|g| g.0).collect::<Vec<_>>(),
        (0..WAITERS).collect::<Vec<_>>(),
        "granted in arrival order: {grants:?}"
    );
    assert!(keys_of(&etcd, "fifo").is_empty());
}

/// Per slot, successive holders' tokens strictly increase (and every grant
/// of the name gets a token no other grant had).
#[test]
fn tokens_strictly_increase_per_slot() {
    let etcd = EtcdServer::start().expect("start etcd");
    let clients: Vec<Client> = (0..4).map(|_| client(&etcd)).collect();
    let grants = Arc::new(Mutex::new(Vec::new()));
    let threads: Vec<_> = clients
        .into_iter()
        .map(|c| {
            let grants = grants.clone();
            std::thread::spawn(move || {
                for _ in 0..15 {
                    let l = take(&c, "tokens", 2);
                    grants
                        .lock()
                        .unwrap()
                        .push((l.slot().unwrap(), l.fencing_token()));
                    std::thread::yield_now();
                    assert!(l.release().unwrap());
                }
                c.close().unwrap();
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let grants = grants.lock().unwrap();
    assert_eq!(grants.len(), 60);
    for slot in 0..2 {
        // Pushed in grant order per slot: a slot's next holder is granted
        // only after the previous one released it.
        let tokens: Vec<u64> = grants.iter().filter(|g| g.0 == slot).map(|g| g.1).collect();
        assert!(
            tokens.windows(2).all(|w| w[0] < w[1]),
            "slot {slot}: {tokens:?}"
        );
    }
    let mut all: Vec<u64> = grants.iter().map(|g| g.1).collect();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 60, "every grant has a token of its own");
    assert!(keys_of(&etcd, "tokens").is_empty());
}

#[test]
fn release_extend_resume_and_a_late_release_does_not_touch_the_next_holder() {
    let etcd = EtcdServer::start().expect("start etcd");
    let (a, b, c) = (client(&etcd), client(&etcd), client(&etcd));
    let lock = take(&a, "handoff", 1);
    lock.extend(None).expect("extend renews the session lease");
    // Another process resumes the permit from its JSON handle.
    let json = serde_json::to_string(lock.handle()).unwrap();
    assert!(
        json.contains(r#""mode":"permit","limit":1,"slot":0"#),
        "{json}"
    );
    let handle: LockHandle = serde_json::from_str(&json).unwrap();
    let resumed = b.resume(&handle).expect("still held");
    assert_eq!(
        (resumed.fencing_token(), resumed.slot()),
        (lock.fencing_token(), Some(0))
    );
    resumed.extend(None).expect("the resumed permit extends");
    assert_eq!(
        b.resume(&handle).unwrap_err().code(),
        "INVALID_ARGUMENT",
        "the same permit is not adopted twice"
    );
    assert!(resumed.release().unwrap());
    assert!(
        keys_of(&etcd, "handoff").is_empty(),
        "the release deleted both keys"
    );
    assert_eq!(b.resume(&handle).unwrap_err().code(), "LOST");
    // The next holder is untouched by the original's late release.
    let next = take(&c, "handoff", 1);
    assert!(next.fencing_token() > lock.fencing_token());
    assert!(!lock.release().unwrap(), "not held until this late release");
    assert_eq!(
        keys_of(&etcd, "handoff").len(),
        2,
        "the next holder's queue and slot keys survived"
    );
    assert!(!next.is_lost());
    assert!(next.release().unwrap());
    // A handle whose slot key was deleted behind its back is not resumed.
    let l = take(&a, "handoff", 1);
    let slot_key = format!("edgelock/handoff/s/{}", l.slot().unwrap());
    raw(
        &etcd,
        "/v3/kv/deleterange",
        json!({"key": b64(slot_key.as_bytes())}),
    );
    assert_eq!(b.resume(l.handle()).unwrap_err().code(), "LOST");
    // ... and its holder learns it lost the permit; its queue key goes too.
    let reason = l
        .wait_lost(Some(Duration::from_secs(10)))
        .expect("loss signalled");
    assert_eq!(reason, LostReason::KeyGone);
    wait_until("the lost permit's queue key is deleted", || {
        keys_of(&etcd, "handoff").is_empty()
    });
}

/// A holder whose process died (its session lease is no longer renewed)
/// keeps its permit until the lease ends; then the waiter gets it.
#[test]
fn a_dead_holder_is_taken_over_at_lease_end() {
    let etcd = EtcdServer::start().expect("start etcd");
    // The lease is granted after this instant and lives 2 s from its grant:
    // measured from here, however long the set-up below takes.
    let started = Instant::now();
    let grant = raw(&etcd, "/v3/lease/grant", json!({"TTL": "2"}));
    let lease: i64 = grant["ID"].as_str().unwrap().parse().unwrap();
    let put = |key: String| {
        let r = raw(
            &etcd,
            "/v3/kv/put",
            json!({"key": b64(key.as_bytes()), "value": b64(b"p1:dead"), "lease": lease.to_string()}),
        );
        r["header"]["revision"]
            .as_str()
            .unwrap()
            .parse::<u64>()
            .unwrap()
    };
    put(format!("edgelock/dead/{lease:x}.1"));
    let dead_token = put("edgelock/dead/s/0".to_string());
    let c = client(&etcd);
    assert!(
        try_take(&c, "dead", 1).is_none(),
        "the dead holder's permit is respected"
    );
    let lock = take(&c, "dead", 1);
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(1_900),
        "waited only {waited:?} since before the 2 s lease was granted"
    );
    assert!(waited < Duration::from_secs(8), "waited {waited:?}");
    assert_eq!(lock.slot(), Some(0));
    assert!(
        lock.fencing_token() > dead_token,
        "the slot's token increased"
    );
    assert!(lock.release().unwrap());
}

#[test]
fn a_different_limit_is_refused_and_leaves_nothing_behind() {
    let etcd = EtcdServer::start().expect("start etcd");
    let (a, b) = (client(&etcd), client(&etcd));
    let held: Vec<Lock> = (0..3).map(|_| take(&a, "limits", 3)).collect();
    let before = keys_of(&etcd, "limits");
    for wait in [Wait::Try, Wait::For(2_000)] {
        let err = b
            .acquire_kind("limits", permits(5), opts(wait), None)
            .unwrap_err();
        assert_eq!(err.code(), "INVALID_ARGUMENT", "{err}");
        assert!(err.to_string().contains("has limit 3, not 5"), "{err}");
        assert_eq!(keys_of(&etcd, "limits"), before, "nothing left behind");
    }
    // Nor is a semaphore's name an exclusive lock.
    let err = b
        .acquire("limits", Some(Duration::from_secs(2)))
        .unwrap_err();
    assert_eq!(err.code(), "INVALID_ARGUMENT", "{err}");
    assert!(
        err.to_string()
            .contains("is a semaphore of 3, not an exclusive lock"),
        "{err}"
    );
    assert_eq!(keys_of(&etcd, "limits"), before, "nothing left behind");
    // An exclusive lock's name is not a semaphore either.
    let lock = b.acquire("plain", None).unwrap();
    let err = a
        .acquire_kind("plain", permits(2), opts(Wait::Try), None)
        .unwrap_err();
    assert_eq!(err.code(), "INVALID_ARGUMENT", "{err}");
    assert!(err.to_string().contains("exclusive lock"), "{err}");
    assert_eq!(keys_of(&etcd, "plain").len(), 1);
    lock.release().unwrap();
    for l in held {
        l.release().unwrap();
    }
}

#[test]
fn inspect_shows_limit_holders_and_queue() {
    let etcd = EtcdServer::start().expect("start etcd");
    let a = client(&etcd);
    let held: Vec<Lock> = (0..3).map(|_| take(&a, "seen", 3)).collect();
    let mut waiters = Vec::new();
    for i in 0..2 {
        let c = client(&etcd);
        waiters.push(std::thread::spawn(move || {
            let l = take(&c, "seen", 3);
            l.release().unwrap();
        }));
        wait_until("queued", || queue_keys(&etcd, "seen").len() == 3 + i + 1);
    }
    let st = a.inspect("seen").unwrap();
    assert_eq!(st.limit, Some(3));
    assert!(st.held);
    assert_eq!(st.holders.len(), 3);
    let tokens: Vec<u64> = st
        .holders
        .iter()
        .map(|h| h.fencing_token.unwrap())
        .collect();
    assert_eq!(
        tokens,
        held.iter().map(|l| l.fencing_token()).collect::<Vec<_>>(),
        "holders oldest first, with their tokens"
    );
    let mut slots: Vec<u32> = st.holders.iter().map(|h| h.slot.unwrap()).collect();
    slots.sort();
    assert_eq!(slots, vec![0, 1, 2]);
    assert!(st
        .holders
        .iter()
        .all(|h| h.kind == LockKind::Permits { limit: 3 }));
    assert_eq!(st.queued.len(), 2);
    assert_eq!(st.waiters.len(), 2);
    assert!(st.remaining_ms.is_some());
    for l in held {
        l.release().unwrap();
    }
    for w in waiters {
        w.join().unwrap();
    }
    let st = a.inspect("seen").unwrap();
    assert_eq!((st.held, st.limit, st.holders.len()), (false, None, 0));
}

#[test]
fn uncontended_permit_costs_three_requests_once_the_session_exists() {
    let etcd = EtcdServer::start().expect("start etcd");
    let (c, traffic) = counted_client(&etcd);
    take(&c, "warm", 2).release().unwrap(); // grants the session lease
    for _ in 0..5 {
        let before = traffic.requests.load(Ordering::SeqCst);
        let lock = take(&c, "cheap", 2);
        assert!(lock.release().unwrap());
        // Acquire txn, slot claim, release.
        assert_eq!(
            traffic.requests.load(Ordering::SeqCst) - before,
            3,
            "acquire + claim + release"
        );
    }
}

/// Keys on our session lease that nothing of ours uses — a queue key and a
/// slot key, as a claim that applied after we gave up would leave — are
/// swept once a txn outcome was unknown, and the permits become free.
#[test]
fn ghost_queue_and_slot_keys_on_the_session_lease_are_swept() {
    use edgelock_devtools::{Fault, FaultProxy};
    let etcd = EtcdServer::start().expect("start etcd");
    let upstream: std::net::SocketAddr = etcd.url().trim_start_matches("http://").parse().unwrap();
    let proxy = FaultProxy::start(upstream).unwrap();
    let mut cfg = EtcdConfig::new(vec![proxy.url()]);
    cfg.request_timeout_ms = 500;
    cfg.session_ttl_ms = 3_000;
    let c = Client::etcd(cfg).unwrap();
    let held = take(&c, "keeps-the-session", 2);
    let lease: i64 = held.handle().owner.parse().unwrap();
    // One txn whose answer is lost: from now on the client sweeps.
    proxy.set(Fault::CutResponse);
    assert!(c
        .acquire_kind("cut", permits(2), opts(Wait::Try), None)
        .is_err());
    proxy.set(Fault::Pass);
    for key in [
        format!("edgelock/ghost/{lease:x}.999"),
        "edgelock/ghost/s/0".to_string(),
    ] {
        raw(
            &etcd,
            "/v3/kv/put",
            json!({"key": b64(key.as_bytes()), "value": b64(b"p1:late"), "lease": lease.to_string()}),
        );
    }
    assert_eq!(keys_of(&etcd, "ghost").len(), 2);
    let other = client(&etcd);
    let lock = other
        .acquire_kind("ghost", permits(1), opts(Wait::For(8_000)), None)
        .unwrap()
        .expect("the ghosts are swept within a few renewal rounds");
    assert_eq!(lock.slot(), Some(0));
    assert!(lock.release().unwrap());
    assert!(!held.is_lost(), "the real permit is untouched");
    assert!(held.release().unwrap());
}

/// Through a proxy that blackholes, then cuts every answer: no permit is
/// falsely granted, and whatever the cut requests left behind is gone
/// within the lease TTL, so another client gets every permit.
#[test]
fn through_a_fault_proxy_no_false_permit_and_nothing_left_behind() {
    use edgelock_devtools::{Fault, FaultProxy};
    let etcd = EtcdServer::start().expect("start etcd");
    let upstream: std::net::SocketAddr = etcd.url().trim_start_matches("http://").parse().unwrap();
    let proxy = FaultProxy::start(upstream).unwrap();
    let mut cfg = EtcdConfig::new(vec![proxy.url()]);
    cfg.request_timeout_ms = 400;
    cfg.session_ttl_ms = 3_000;
    let c = Client::etcd(cfg).unwrap();
    take(&c, "warm", 2).release().unwrap();
    proxy.set(Fault::Blackhole);
    let err = c
        .acquire_kind("cut", permits(2), opts(Wait::Try), None)
        .unwrap_err();
    assert_eq!(err.code(), "TRANSPORT", "{err}");
    proxy.set(Fault::CutResponse);
    for _ in 0..2 {
        let err = c
            .acquire_kind("cut", permits(2), opts(Wait::Try), None)
            .unwrap_err();
        assert_eq!(err.code(), "TRANSPORT", "{err}");
    }
    proxy.set(Fault::Pass);
    let other = client(&etcd);
    let both: Vec<Lock> = (0..2)
        .map(|_| {
            other
                .acquire_kind("cut", permits(2), opts(Wait::For(8_000)), None)
                .unwrap()
                .expect("free within the TTL")
        })
        .collect();
    assert_eq!(
        keys_of(&etcd, "cut").len(),
        4,
        "only the new holders' queue and slot keys"
    );
    for l in both {
        assert!(l.release().unwrap());
    }
    // The faulted client recovers too.
    let l = c
        .acquire_kind("cut", permits(2), opts(Wait::For(8_000)), None)
        .unwrap()
        .expect("recovered");
    assert!(l.release().unwrap());
}
