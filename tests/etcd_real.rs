//! The etcd recipe against a real etcd (Debian's etcd-server), started by each
//! test on free loopback ports with a temp data dir and stopped afterwards.
#![cfg(feature = "native")]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use edgelock::core::etcd::{EtcdConfig, EtcdMachine};
use edgelock::core::*;
use edgelock::native::{Client, OsEntropy};
use edgelock_devtools::EtcdServer;

mod common;
use common::etcd_raw::{b64, keys_of, raw};
use serde_json::json;

fn config(etcd: &EtcdServer) -> EtcdConfig {
    EtcdConfig::new(vec![etcd.url()])
}

fn client(etcd: &EtcdServer) -> Client {
    Client::etcd(config(etcd)).expect("client")
}

fn counting_client(cfg: EtcdConfig) -> (Client, Arc<AtomicUsize>) {
    common::counting_client(EtcdMachine::new(cfg, Box::new(OsEntropy)).unwrap())
}

#[test]
fn eight_clients_fifty_acquisitions_each_are_mutually_exclusive_with_increasing_tokens() {
    let etcd = EtcdServer::start().expect("start etcd");
    let clients = (0..8).map(|_| client(&etcd)).collect();
    common::assert_mutual_exclusion(clients, "counter", 50, Duration::from_secs(60));
    assert!(keys_of(&etcd, "counter").is_empty(), "no key left behind");
}

#[test]
fn five_waiters_are_served_in_fifo_order() {
    let etcd = EtcdServer::start().expect("start etcd");
    let holder = client(&etcd);
    let lock = holder.acquire("fifo", None).unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut threads = Vec::new();
    for i in 0..5 {
        let c = client(&etcd);
        let order = order.clone();
        threads.push(std::thread::spawn(move || {
            let l = c.acquire("fifo", Some(Duration::from_secs(30))).unwrap();
            order.lock().unwrap().push((i, l.fencing_token()));
            std::thread::sleep(Duration::from_millis(20));
            l.release().unwrap();
        }));
        // Wait until waiter i has queued its key before starting the next one.
        let deadline = Instant::now() + Duration::from_secs(10);
        while keys_of(&etcd, "fifo").len() < i + 2 {
            assert!(Instant::now() < deadline, "waiter {i} never queued");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    let status = holder.inspect("fifo").unwrap();
    assert_eq!(status.waiters.len(), 5);
    assert_eq!(status.fencing_token, Some(lock.fencing_token()));
    lock.release().unwrap();
    for t in threads {
        t.join().unwrap();
    }
    let order = order.lock().unwrap();
    let ids: Vec<usize> = order.iter().map(|(i, _)| *i).collect();
    assert_eq!(ids, vec![0, 1, 2, 3, 4], "waiters served in arrival order");
    assert!(order.windows(2).all(|w| w[0].1 < w[1].1));
}

#[test]
fn try_acquire_on_a_held_lock_returns_none_and_leaves_no_key() {
    let etcd = EtcdServer::start().expect("start etcd");
    let a = client(&etcd);
    let b = client(&etcd);
    let lock = a.acquire("busy", None).unwrap();
    assert!(b.try_acquire("busy").unwrap().is_none());
    assert_eq!(
        keys_of(&etcd, "busy").len(),
        1,
        "only the holder's key remains"
    );
    // The same client asking again is also refused (it holds the name itself).
    assert!(a.try_acquire("busy").unwrap().is_none());
    lock.release().unwrap();
    let again = b.try_acquire("busy").unwrap().expect("free now");
    again.release().unwrap();
}

#[test]
fn wait_timeout_fails_with_timeout_and_leaves_no_key() {
    let etcd = EtcdServer::start().expect("start etcd");
    let a = client(&etcd);
    let b = client(&etcd);
    let lock = a.acquire("slow", None).unwrap();
    let started = Instant::now();
    let err = b
        .acquire("slow", Some(Duration::from_millis(400)))
        .unwrap_err();
    assert_eq!(err.code(), "TIMEOUT", "{err}");
    assert!(started.elapsed() >= Duration::from_millis(399)); // whole-ms clock: up to 1 ms early
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(
        keys_of(&etcd, "slow").len(),
        1,
        "the timed-out waiter removed its key"
    );
    lock.release().unwrap();
    assert!(keys_of(&etcd, "slow").is_empty());
}

#[test]
fn cancelled_waiter_fails_with_aborted_and_leaves_no_key() {
    let etcd = EtcdServer::start().expect("start etcd");
    let a = client(&etcd);
    let b = client(&etcd);
    let lock = a.acquire("cancel", None).unwrap();
    let token = edgelock::native::CancelToken::new();
    let t2 = token.clone();
    let canceller = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        t2.cancel();
    });
    let err = b
        .acquire_with(
            "cancel",
            AcquireOptions {
                wait: Wait::Forever,
                ttl_ms: None,
            },
            Some(&token),
        )
        .unwrap_err();
    canceller.join().unwrap();
    assert_eq!(err.code(), "ABORTED");
    assert_eq!(keys_of(&etcd, "cancel").len(), 1);
    lock.release().unwrap();
}

#[test]
fn a_vanished_holder_is_replaced_after_its_lease_ttl() {
    let etcd = EtcdServer::start().expect("start etcd");
    // A holder that dies without releasing: its lease (TTL 2 s) is never
    // renewed. It is granted after this instant and lives 2 s from then,
    // however long the set-up below takes.
    let started = Instant::now();
    let grant = raw(&etcd, "/v3/lease/grant", json!({"TTL": "2"}));
    let lease: i64 = grant["ID"].as_str().unwrap().parse().unwrap();
    let key = format!("edgelock/vanish/{lease:x}");
    let put = raw(
        &etcd,
        "/v3/kv/put",
        json!({"key": b64(key.as_bytes()), "value": "", "lease": lease.to_string()}),
    );
    let dead_rev: u64 = put["header"]["revision"].as_str().unwrap().parse().unwrap();
    let c = client(&etcd);
    let lock = c
        .acquire("vanish", Some(Duration::from_secs(15)))
        .expect("granted after the dead lease expires");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(1_900),
        "waited only {waited:?}: the dead holder was not respected"
    );
    assert!(waited < Duration::from_secs(8), "waited {waited:?}");
    assert!(lock.fencing_token() > dead_rev);
    lock.release().unwrap();
}

#[test]
fn keepalive_keeps_a_lock_held_across_three_ttls() {
    let etcd = EtcdServer::start().expect("start etcd");
    let mut cfg = config(&etcd);
    cfg.session_ttl_ms = 2_000;
    let a = Client::etcd(cfg).unwrap();
    let lock = a.acquire("long", None).unwrap();
    std::thread::sleep(Duration::from_millis(6_500));
    assert!(!lock.is_lost(), "lost: {:?}", lock.lost_reason());
    assert!(lock.expires_in() > Duration::ZERO);
    let b = client(&etcd);
    assert!(
        b.try_acquire("long").unwrap().is_none(),
        "still held on the server"
    );
    assert!(lock.release().unwrap(), "held until release");
}

#[test]
fn deleting_the_key_or_revoking_the_lease_signals_lost() {
    let etcd = EtcdServer::start().expect("start etcd");
    let mut cfg = config(&etcd);
    cfg.session_ttl_ms = 3_000;
    let a = Client::etcd(cfg.clone()).unwrap();
    let lock = a.acquire("victim", None).unwrap();
    let key = lock.handle().key.clone();
    raw(
        &etcd,
        "/v3/kv/deleterange",
        json!({"key": b64(key.as_bytes())}),
    );
    let reason = lock
        .wait_lost(Some(Duration::from_secs(5)))
        .expect("loss signalled within TTL/3 and a bit");
    assert_eq!(reason, LostReason::KeyGone);
    // A late release reports it was not held until the end, and deletes nothing.
    let other = client(&etcd)
        .acquire("victim", Some(Duration::from_secs(5)))
        .unwrap();
    assert!(!lock.release().unwrap());
    assert_eq!(
        keys_of(&etcd, "victim").len(),
        1,
        "the next holder's key survived the late release"
    );
    other.release().unwrap();

    let b = Client::etcd(cfg).unwrap();
    let lock = b.acquire("victim2", None).unwrap();
    let lease = lock.handle().owner.clone();
    raw(&etcd, "/v3/lease/revoke", json!({"ID": lease}));
    let reason = lock
        .wait_lost(Some(Duration::from_secs(5)))
        .expect("loss signalled");
    assert!(
        matches!(reason, LostReason::KeyGone | LostReason::RenewalFailed(_)),
        "{reason:?}"
    );
}

#[test]
fn uncontended_acquire_and_release_cost_exactly_two_requests_once_the_session_exists() {
    let etcd = EtcdServer::start().expect("start etcd");
    let (c, sent) = counting_client(config(&etcd));
    c.acquire("warm", None).unwrap().release().unwrap(); // grants the session lease
    for _ in 0..5 {
        let before = sent.load(Ordering::SeqCst);
        let lock = c.acquire("two", None).unwrap();
        assert!(lock.release().unwrap());
        assert_eq!(
            sent.load(Ordering::SeqCst) - before,
            2,
            "acquire + release = 2 HTTP requests"
        );
    }
}

#[test]
fn invalid_input_is_rejected_before_any_request() {
    let etcd = EtcdServer::start().expect("start etcd");
    let (c, sent) = counting_client(config(&etcd));
    for bad in ["", "a\0b"] {
        assert_eq!(c.acquire(bad, None).unwrap_err().code(), "INVALID_ARGUMENT");
    }
    assert_eq!(
        c.try_acquire(&"x".repeat(10_000)).unwrap_err().code(),
        "INVALID_ARGUMENT"
    );
    assert_eq!(sent.load(Ordering::SeqCst), 0, "nothing was sent");
    for bad_url in ["", "ftp://x", "http://", "http://h:99999", "http://h/?q"] {
        assert_eq!(
            Client::etcd(EtcdConfig::new(vec![bad_url.to_string()]))
                .err()
                .map(|e| e.code()),
            Some("INVALID_ARGUMENT"),
            "{bad_url}"
        );
    }
    let mut cfg = config(&etcd);
    cfg.session_ttl_ms = 0;
    assert_eq!(
        Client::etcd(cfg).err().map(|e| e.code()),
        Some("INVALID_ARGUMENT")
    );
}

#[test]
fn names_with_slashes_and_odd_bytes_do_not_collide() {
    let etcd = EtcdServer::start().expect("start etcd");
    let c = client(&etcd);
    let a = c.acquire("a", None).unwrap();
    let ab = c
        .try_acquire("a/b")
        .unwrap()
        .expect("a/b is a different lock from a");
    let odd = c
        .try_acquire("../%2F?#\r\né")
        .unwrap()
        .expect("odd names work");
    assert_eq!(
        c.inspect("a").unwrap().waiters.len(),
        0,
        "a's range does not contain a/b's key"
    );
    for l in [a, ab, odd] {
        assert!(l.release().unwrap());
    }
}

#[test]
fn unreachable_etcd_gives_transport_error_and_failover_uses_the_next_endpoint() {
    let etcd = EtcdServer::start().expect("start etcd");
    let dead = format!(
        "http://127.0.0.1:{}",
        edgelock_devtools::free_port().unwrap()
    );
    let mut cfg = EtcdConfig::new(vec![dead.clone()]);
    cfg.request_timeout_ms = 500;
    let err = Client::etcd(cfg).unwrap().try_acquire("x").unwrap_err();
    assert_eq!(err.code(), "TRANSPORT", "{err}");
    let cfg = EtcdConfig::new(vec![dead, etcd.url()]);
    let lock = Client::etcd(cfg)
        .unwrap()
        .try_acquire("x")
        .unwrap()
        .expect("second endpoint serves");
    lock.release().unwrap();
}

#[test]
fn resume_from_a_handle_in_another_client() {
    let etcd = EtcdServer::start().expect("start etcd");
    let a = client(&etcd);
    let lock = a.acquire("handoff", None).unwrap();
    let handle: LockHandle =
        serde_json::from_str(&serde_json::to_string(lock.handle()).unwrap()).unwrap();
    let b = client(&etcd);
    let resumed = b.resume(&handle).expect("still held");
    assert_eq!(resumed.fencing_token(), lock.fencing_token());
    assert!(resumed.release().unwrap());
    assert!(keys_of(&etcd, "handoff").is_empty());
    assert_eq!(b.resume(&handle).unwrap_err().code(), "LOST");
    std::mem::forget(lock);
}

/// A key on our session lease that nothing of ours uses (an acquire txn that
/// applied after we gave up on it) is deleted by the renewal rounds once a
/// txn outcome was unknown, and the name becomes free for others.
#[test]
fn a_ghost_key_on_the_session_lease_is_swept() {
    use edgelock_devtools::{Fault, FaultProxy};
    let etcd = EtcdServer::start().expect("start etcd");
    let upstream: std::net::SocketAddr = etcd.url().trim_start_matches("http://").parse().unwrap();
    let proxy = FaultProxy::start(upstream).unwrap();
    let mut cfg = EtcdConfig::new(vec![proxy.url()]);
    cfg.request_timeout_ms = 500;
    cfg.session_ttl_ms = 3_000;
    let c = Client::etcd(cfg).unwrap();
    let held = c.acquire("keeps-the-session", None).unwrap();
    let lease: i64 = held.handle().owner.parse().unwrap();
    // One txn whose answer is lost: from now on the client sweeps.
    proxy.set(Fault::CutResponse);
    assert!(c.try_acquire("cut").is_err());
    proxy.set(Fault::Pass);
    // The ghost: our key for "ghost", bound to our lease, that no operation made.
    let key = format!("edgelock/ghost/{lease:x}");
    raw(
        &etcd,
        "/v3/kv/put",
        json!({"key": b64(key.as_bytes()), "value": b64(b"late"), "lease": lease.to_string()}),
    );
    assert_eq!(keys_of(&etcd, "ghost"), vec![key]);
    let other = client(&etcd);
    let lock = other
        .acquire("ghost", Some(Duration::from_secs(8)))
        .expect("the ghost is swept within a few renewal rounds");
    assert!(lock.release().unwrap());
    assert!(!held.is_lost(), "the real hold is untouched");
    assert!(held.release().unwrap());
}

/// A waiter whose watch stream runs through an endpoint that goes silent
/// must not wait forever (nor hold up everyone queued behind it): when its
/// session's keepalive fails over, the watch is restarted on the next endpoint.
#[test]
fn a_waiter_whose_watch_endpoint_goes_silent_still_gets_the_lock() {
    use edgelock_devtools::{Fault, FaultProxy};
    let etcd = EtcdServer::start().expect("start etcd");
    let upstream: std::net::SocketAddr = etcd.url().trim_start_matches("http://").parse().unwrap();
    let proxy = FaultProxy::start(upstream).unwrap();
    let holder = client(&etcd);
    let lock = holder.acquire("silent-watch", None).unwrap();
    let mut cfg = EtcdConfig::new(vec![proxy.url(), etcd.url()]);
    cfg.request_timeout_ms = 1_000;
    cfg.session_ttl_ms = 3_000;
    let (waiter, traffic) =
        common::etcd_traffic::counted_client(EtcdMachine::new(cfg, Box::new(OsEntropy)).unwrap());
    let w = std::thread::spawn(move || {
        let r = waiter.acquire("silent-watch", Some(Duration::from_secs(25)));
        (r.map(|l| l.release()), Instant::now())
    });
    // The waiter watches the holder's key through the proxy (etcd
    // confirmed the watch) before the proxy goes silent.
    let deadline = Instant::now() + Duration::from_secs(15);
    while traffic.watches_created.load(Ordering::SeqCst) == 0 {
        assert!(Instant::now() < deadline, "the waiter never watched");
        std::thread::sleep(Duration::from_millis(10));
    }
    proxy.set(Fault::Blackhole);
    let released_at = Instant::now();
    assert!(lock.release().unwrap());
    let (r, granted_at) = w.join().unwrap();
    assert!(matches!(r, Ok(Ok(true))), "{r:?}");
    // Keepalive every TTL/3 (1 s), its timeout (1 s), then a re-check.
    let took = granted_at - released_at;
    assert!(
        took < Duration::from_secs(8),
        "granted {took:?} after the release"
    );
}

#[test]
fn through_a_fault_proxy_no_false_grant_and_nothing_left_behind() {
    use edgelock_devtools::{Fault, FaultProxy};
    let etcd = EtcdServer::start().expect("start etcd");
    let upstream: std::net::SocketAddr = etcd.url().trim_start_matches("http://").parse().unwrap();
    let proxy = FaultProxy::start(upstream).unwrap();
    let mut cfg = EtcdConfig::new(vec![proxy.url()]);
    cfg.request_timeout_ms = 400;
    cfg.session_ttl_ms = 3_000;
    let c = Client::etcd(cfg).unwrap();
    c.acquire("warm", None).unwrap().release().unwrap();

    // Partition: every request ends within its timeouts, and nothing is granted.
    proxy.set(Fault::Blackhole);
    let started = Instant::now();
    let err = c.try_acquire("cut").unwrap_err();
    assert_eq!(err.code(), "TRANSPORT", "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );

    // Until its cleanup of "cut" is confirmed, this client treats the name as
    // busy (its own abandoned key may exist): it answers "not acquired".
    assert!(c.try_acquire("cut").unwrap().is_none());

    // Applied, but every answer lost: still no false "acquired".
    proxy.set(Fault::CutResponse);
    let err = c.try_acquire("cut2").unwrap_err();
    assert_eq!(err.code(), "TRANSPORT", "{err}");

    // Heal: whatever the cut requests left behind is gone within the lease TTL,
    // and another client gets both locks.
    proxy.set(Fault::Pass);
    let other = client(&etcd);
    for name in ["cut", "cut2"] {
        let lock = other
            .acquire(name, Some(Duration::from_secs(8)))
            .expect("free within the TTL");
        assert_eq!(keys_of(&etcd, name).len(), 1, "only the new holder's key");
        lock.release().unwrap();
    }
    // And the faulted client recovers once its background cleanup went through.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match c.try_acquire("cut") {
            Ok(Some(l)) => break assert!(l.release().unwrap()),
            _ if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(200)),
            other => panic!(
                "the faulted client never recovered: {:?}",
                other.map(|l| l.is_some())
            ),
        }
    }
}
