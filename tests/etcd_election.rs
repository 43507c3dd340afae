//! Leader election (campaign / proclaim / leader / observe) on a real etcd,
//! started by each test on free loopback ports with a temp data dir
//! (`EDGELOCK_ETCD_BIN` picks another etcd, e.g. 3.5 from `scripts/etcd35.sh`).
#![cfg(feature = "native")]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use edgelock::core::etcd::{EtcdConfig, EtcdMachine};
use edgelock::core::*;
use edgelock::native::{CancelToken, Client, Lock, OsEntropy};
use edgelock_devtools::{EtcdServer, Fault, FaultProxy};
use serde_json::json;

mod common;
use common::etcd_raw::{keys_of, raw};
use common::etcd_traffic::{self, Traffic};

fn config(etcd: &EtcdServer) -> EtcdConfig {
    EtcdConfig::new(vec![etcd.url()])
}

fn client(etcd: &EtcdServer) -> Client {
    Client::etcd(config(etcd)).expect("client")
}

fn counted_client(etcd: &EtcdServer) -> (Client, Arc<Traffic>) {
    etcd_traffic::counted_client(EtcdMachine::new(config(etcd), Box::new(OsEntropy)).unwrap())
}

fn opts(wait: Wait) -> AcquireOptions {
    AcquireOptions { wait, ttl_ms: None }
}

fn campaign(c: &Client, name: &str, value: &str) -> Lock {
    c.campaign(name, value, opts(Wait::For(30_000)), None)
        .expect("campaign")
        .expect("elected")
}

fn leads(value: &str, token: u64) -> Option<Leadership> {
    Some(Leadership {
        value: value.into(),
        fencing_token: token,
    })
}

fn wait_until(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn campaign_leader_proclaim_resign_round_trip() {
    let etcd = EtcdServer::start().expect("start etcd");
    let (a, b) = (client(&etcd), client(&etcd));
    assert_eq!(b.leader("round").unwrap(), None, "nobody leads yet");
    let l = campaign(&a, "round", "A");
    assert_eq!(l.kind(), LockKind::Leader);
    assert_eq!(l.handle().kind, LockKind::Leader);
    let token = l.fencing_token();
    assert_eq!(token, l.handle().revision, "the key's create revision");
    assert_eq!(b.leader("round").unwrap(), leads("A", token));
    l.proclaim("A, again").unwrap();
    assert_eq!(
        b.leader("round").unwrap(),
        leads("A, again", token),
        "a proclaim keeps the token"
    );
    // The empty value is a value.
    l.proclaim("").unwrap();
    assert_eq!(b.leader("round").unwrap(), leads("", token));
    // Inspect names the kind.
    let st = b.inspect("round").unwrap();
    assert_eq!(st.holders[0].kind, LockKind::Leader);
    // A try campaign while someone leads is refused and leaves no key.
    assert!(b
        .campaign("round", "B", opts(Wait::Try), None)
        .unwrap()
        .is_none());
    assert_eq!(keys_of(&etcd, "round").len(), 1);
    assert!(l.release().unwrap(), "led until the resign");
    assert_eq!(b.leader("round").unwrap(), None);
    assert!(keys_of(&etcd, "round").is_empty(), "nothing left behind");
    // Leadership after a resign: a new, larger token.
    let l2 = campaign(&b, "round", "B");
    assert!(l2.fencing_token() > token);
    assert_eq!(a.leader("round").unwrap(), leads("B", l2.fencing_token()));
    l2.release().unwrap();
}

/// A plain exclusive lock on the name: campaigns queue behind it like
/// another lock, and `leader` says nobody leads while it holds.
#[test]
fn a_plain_lock_on_the_name_is_no_leader_and_campaigns_queue_behind_it() {
    let etcd = EtcdServer::start().expect("start etcd");
    let (a, b) = (client(&etcd), client(&etcd));
    let plain = a.acquire("mixed", None).unwrap();
    assert_eq!(b.leader("mixed").unwrap(), None);
    let e = plain.proclaim("x").unwrap_err();
    assert_eq!(e.code(), "INVALID_ARGUMENT");
    let waiter = std::thread::spawn(move || {
        let l = campaign(&b, "mixed", "B");
        (l.fencing_token(), l, b)
    });
    wait_until("the campaign queued", || keys_of(&etcd, "mixed").len() == 2);
    assert_eq!(a.leader("mixed").unwrap(), None);
    let plain_token = plain.fencing_token();
    plain.release().unwrap();
    let (token, l, _b) = waiter.join().unwrap();
    assert!(token > plain_token);
    assert_eq!(a.leader("mixed").unwrap(), leads("B", token));
    // And an exclusive acquire queues behind the leadership.
    assert!(a.try_acquire("mixed").unwrap().is_none());
    l.release().unwrap();
}

/// Three clients campaign in turn: they lead in that order, one at a time,
/// with strictly increasing tokens, and each handoff wakes only the next
/// in line (one re-check, one watch message).
#[test]
fn three_campaigners_lead_fifo_one_at_a_time_with_increasing_tokens() {
    let etcd = EtcdServer::start().expect("start etcd");
    let first = client(&etcd);
    let head = campaign(&first, "fifo", "head");
    let leading = Arc::new(AtomicUsize::new(0));
    let grants = Arc::new(Mutex::new(Vec::new()));
    let observer = client(&etcd);
    let mut resign = Vec::new();
    let mut threads = Vec::new();
    let mut traffic = Vec::new();
    const N: usize = 3;
    for i in 0..N {
        let (c, t) = counted_client(&etcd);
        traffic.push(t);
        let (leading, grants) = (leading.clone(), grants.clone());
        let (tx, rx) = channel::<()>();
        resign.push(tx);
        threads.push(std::thread::spawn(move || {
            let l = campaign(&c, "fifo", &format!("c{i}"));
            let now = leading.fetch_add(1, Ordering::SeqCst) + 1;
            assert_eq!(now, 1, "campaigner {i} leads alongside another");
            grants.lock().unwrap().push((i, l.fencing_token()));
            rx.recv().unwrap();
            leading.fetch_sub(1, Ordering::SeqCst);
            assert!(l.release().unwrap(), "campaigner {i} led until it resigned");
            c.close().unwrap();
        }));
        wait_until(&format!("campaigner {i} queued"), || {
            keys_of(&etcd, "fifo").len() == 2 + i
        });
    }
    wait_until("every campaigner watches", || {
        traffic
            .iter()
            .all(|t| t.watches.load(Ordering::SeqCst) >= 1)
    });
    std::thread::sleep(Duration::from_millis(300));
    let total = |f: fn(&Traffic) -> usize| traffic.iter().map(|t| f(t)).sum::<usize>();
    let rechecks = |t: &Traffic| t.rechecks.load(Ordering::SeqCst);
    let events = |t: &Traffic| t.watch_events.load(Ordering::SeqCst);
    let mut per_handoff = Vec::new();
    let mut head = Some(head);
    for h in 0..N {
        let (r0, e0) = (total(rechecks), total(events));
        if let Some(l) = head.take() {
            assert!(l.release().unwrap());
        } else {
            resign[h - 1].send(()).unwrap();
        }
        wait_until(&format!("handoff {h}"), || {
            grants.lock().unwrap().len() == h + 1
        });
        let (i, token) = grants.lock().unwrap()[h];
        assert_eq!(
            observer.leader("fifo").unwrap(),
            leads(&format!("c{i}"), token),
            "leader reports the campaigner that was granted"
        );
        std::thread::sleep(Duration::from_millis(200));
        per_handoff.push((total(rechecks) - r0, total(events) - e0));
    }
    resign[N - 1].send(()).unwrap();
    for t in threads {
        t.join().unwrap();
    }
    eprintln!("re-checks and watch messages with events per handoff: {per_handoff:?}");
    for (h, (rechecks, events)) in per_handoff.iter().enumerate() {
        assert_eq!(*rechecks, 1, "handoff {h}: only the next in line re-checks");
        assert_eq!(*events, 1, "handoff {h}: one watch message");
    }
    let grants = grants.lock().unwrap().clone();
    assert_eq!(
        grants.iter().map(|g| g.0).collect::<Vec<_>>(),
        (0..N).collect::<Vec<_>>(),
        "led in campaign order"
    );
    assert!(grants.windows(2).all(|w| w[0].1 < w[1].1), "{grants:?}");
    assert_eq!(observer.leader("fifo").unwrap(), None);
    assert!(keys_of(&etcd, "fifo").is_empty());
}

/// The leader's lease is revoked behind its back: the next campaigner
/// leads, and the old leader's proclaim fails without touching its value.
#[test]
fn a_proclaim_after_losing_fails_and_leaves_the_new_leader_alone() {
    let etcd = EtcdServer::start().expect("start etcd");
    let (a, b) = (client(&etcd), client(&etcd));
    let old = campaign(&a, "lost", "A");
    let waiter = std::thread::spawn(move || (campaign(&b, "lost", "B"), b));
    wait_until("B queued", || keys_of(&etcd, "lost").len() == 2);
    raw(
        &etcd,
        "/v3/lease/revoke",
        json!({ "ID": old.handle().owner.clone() }),
    );
    let (new, _b) = waiter.join().unwrap();
    assert!(new.fencing_token() > old.fencing_token());
    let e = old.proclaim("stale").unwrap_err();
    assert!(matches!(e.code(), "LOST" | "NOT_HELD"), "{e:?}");
    assert_eq!(a.leader("lost").unwrap(), leads("B", new.fencing_token()));
    assert!(old.wait_lost(Some(Duration::from_secs(5))).is_some());
    // A later proclaim of the lost leadership sends nothing and fails too.
    assert!(old.proclaim("stale again").is_err());
    assert_eq!(a.leader("lost").unwrap(), leads("B", new.fencing_token()));
    new.release().unwrap();
}

/// A leader whose process goes away without resigning (its client closes:
/// its session lease is revoked, as its expiry would) is replaced.
#[test]
fn a_leader_that_stops_renewing_is_replaced() {
    let etcd = EtcdServer::start().expect("start etcd");
    let (a, b, o) = (client(&etcd), client(&etcd), client(&etcd));
    let _old = campaign(&a, "crash", "A");
    let waiter = std::thread::spawn(move || (campaign(&b, "crash", "B"), b));
    wait_until("B queued", || keys_of(&etcd, "crash").len() == 2);
    a.close().unwrap();
    let (new, _b) = waiter.join().unwrap();
    assert_eq!(o.leader("crash").unwrap(), leads("B", new.fencing_token()));
    new.release().unwrap();
}

/// A leader that stops renewing and never comes back: a leadership key on
/// a 2 s lease nobody keeps alive (as a crashed process leaves it) leads
/// until the lease expires, then the next campaigner leads.
#[test]
fn a_leader_key_whose_lease_expires_is_replaced() {
    let etcd = EtcdServer::start().expect("start etcd");
    // A campaign as another implementation (Go's) would leave it: the raw
    // value, on a 2 s lease that nobody keeps alive. It is granted after
    // this instant and lives 2 s from then, however long the set-up takes.
    let started = Instant::now();
    let grant = raw(&etcd, "/v3/lease/grant", json!({ "TTL": "2" }));
    let lease = grant["ID"].as_str().unwrap().to_string();
    raw(
        &etcd,
        "/v3/kv/put",
        json!({ "key": common::etcd_raw::b64(b"edgelock/expire/abc"),
                "value": common::etcd_raw::b64(b"ghost"), "lease": lease }),
    );
    let (b, o) = (client(&etcd), client(&etcd));
    let t = o.leader("expire").unwrap().expect("the ghost leads");
    assert_eq!(t.value, "ghost");
    let new = campaign(&b, "expire", "B");
    assert!(
        started.elapsed() >= Duration::from_millis(1_900),
        "led after {:?}, before the 2 s lease ended",
        started.elapsed()
    );
    assert!(new.fencing_token() > t.fencing_token);
    assert_eq!(o.leader("expire").unwrap(), leads("B", new.fencing_token()));
    new.release().unwrap();
}

fn next(rx: &Receiver<Result<Option<Leadership>, LockError>>) -> Option<Leadership> {
    rx.recv_timeout(Duration::from_secs(10))
        .expect("the observer yields")
        .expect("no error")
}

/// Observe yields the current state, then each change, pushed by the watch
/// (no request while nothing changes), and ends when cancelled.
#[test]
fn observe_yields_the_current_state_then_each_change_and_ends_on_cancel() {
    let etcd = EtcdServer::start().expect("start etcd");
    let (a, b) = (client(&etcd), client(&etcd));
    let (o, traffic) = counted_client(&etcd);
    let cancel = CancelToken::new();
    let observer = o.observe("obs", cancel.clone());
    let (tx, rx) = channel();
    let thread = std::thread::spawn(move || {
        for item in observer {
            if tx.send(item).is_err() {
                break;
            }
        }
    });
    assert_eq!(next(&rx), None, "first the current state: nobody");
    let la = campaign(&a, "obs", "A");
    let ta = la.fencing_token();
    assert_eq!(next(&rx), leads("A", ta));
    la.proclaim("A2").unwrap();
    assert_eq!(next(&rx), leads("A2", ta));
    // B queues behind A: no change to report.
    let waiter = std::thread::spawn(move || (campaign(&b, "obs", "B"), b));
    wait_until("B queued", || keys_of(&etcd, "obs").len() == 2);
    // Nothing changes for a while: the observer sends nothing (pushed, not polled).
    std::thread::sleep(Duration::from_millis(300));
    let idle = traffic.requests.load(Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        traffic.requests.load(Ordering::SeqCst),
        idle,
        "no request while nothing changes"
    );
    assert!(rx.try_recv().is_err(), "no change reported for a waiter");
    la.release().unwrap();
    let (lb, _b) = waiter.join().unwrap();
    assert_eq!(next(&rx), leads("B", lb.fencing_token()));
    lb.release().unwrap();
    assert_eq!(next(&rx), None, "the final state: nobody");
    // Observe ends cleanly on cancel.
    cancel.cancel();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !thread.is_finished() {
        assert!(Instant::now() < deadline, "the observer did not end");
        std::thread::sleep(Duration::from_millis(10));
    }
    thread.join().unwrap();
    assert!(rx.try_recv().is_err(), "nothing after the cancel");
    let w = traffic.watches.load(Ordering::SeqCst);
    eprintln!(
        "observer: {} requests, {w} watches",
        traffic.requests.load(Ordering::SeqCst)
    );
}

/// An observe with a wait bound and no change completes with the current
/// state; a change is reported to `observe_change` without polling.
#[test]
fn observe_change_returns_the_unchanged_state_at_its_bound() {
    let etcd = EtcdServer::start().expect("start etcd");
    let (a, o) = (client(&etcd), client(&etcd));
    let l = campaign(&a, "bound", "A");
    let known = leads("A", l.fencing_token());
    let started = Instant::now();
    let seen = o
        .observe_change("bound", known.as_ref(), Wait::For(700), None)
        .unwrap();
    assert_eq!(seen, known);
    assert!(started.elapsed() >= Duration::from_millis(650));
    // Knowing something stale: answered at once.
    let seen = o
        .observe_change("bound", None, Wait::Forever, None)
        .unwrap();
    assert_eq!(seen, known);
    l.release().unwrap();
}

#[test]
fn a_leadership_resumed_in_another_client_can_proclaim() {
    let etcd = EtcdServer::start().expect("start etcd");
    let (a, b) = (client(&etcd), client(&etcd));
    let l = campaign(&a, "moved", "A");
    let handle = l.handle().clone();
    let json = serde_json::to_string(&handle).unwrap();
    assert!(json.contains("\"mode\":\"leader\""), "{json}");
    let resumed = b.resume(&serde_json::from_str(&json).unwrap()).unwrap();
    assert_eq!(resumed.kind(), LockKind::Leader);
    assert_eq!(resumed.fencing_token(), l.fencing_token());
    resumed.proclaim("from B").unwrap();
    assert_eq!(
        a.leader("moved").unwrap(),
        leads("from B", l.fencing_token())
    );
    // The kind is checked: the same key is no exclusive lock.
    let mut plain = handle.clone();
    plain.kind = LockKind::Exclusive;
    assert!(client(&etcd).resume(&plain).is_err());
    resumed.release().unwrap();
    assert_eq!(a.leader("moved").unwrap(), None);
}

#[test]
fn bad_input_is_refused_without_a_request() {
    let etcd = EtcdServer::start().expect("start etcd");
    let (c, traffic) = counted_client(&etcd);
    let big = "v".repeat(MAX_CAMPAIGN_VALUE + 1);
    let e = c.campaign("bad", &big, opts(Wait::Try), None).unwrap_err();
    assert_eq!(e.code(), "INVALID_ARGUMENT");
    let e = c.campaign("", "v", opts(Wait::Try), None).unwrap_err();
    assert_eq!(e.code(), "INVALID_ARGUMENT");
    assert_eq!(c.leader("").unwrap_err().code(), "INVALID_ARGUMENT");
    let e = c.observe_change("", None, Wait::For(10), None).unwrap_err();
    assert_eq!(e.code(), "INVALID_ARGUMENT");
    assert_eq!(traffic.requests.load(Ordering::SeqCst), 0, "nothing sent");
    // The largest value is fine, and so is a too-large proclaim refused.
    let l = campaign(&c, "bad", &"v".repeat(MAX_CAMPAIGN_VALUE));
    let before = traffic.requests.load(Ordering::SeqCst);
    assert_eq!(l.proclaim(&big).unwrap_err().code(), "INVALID_ARGUMENT");
    assert_eq!(traffic.requests.load(Ordering::SeqCst), before);
    assert_eq!(
        c.leader("bad").unwrap().unwrap().value.len(),
        MAX_CAMPAIGN_VALUE
    );
    l.release().unwrap();
}

#[test]
fn uncontended_campaign_and_resign_cost_two_requests() {
    let etcd = EtcdServer::start().expect("start etcd");
    let (c, traffic) = counted_client(&etcd);
    campaign(&c, "warm", "w").release().unwrap(); // grants the session lease
    for _ in 0..5 {
        let before = traffic.requests.load(Ordering::SeqCst);
        let l = campaign(&c, "cheap", "v");
        assert!(l.release().unwrap());
        assert_eq!(
            traffic.requests.load(Ordering::SeqCst) - before,
            2,
            "campaign txn + resign txn"
        );
    }
    let before = traffic.requests.load(Ordering::SeqCst);
    let l = campaign(&c, "cheap", "v");
    l.proclaim("w").unwrap();
    c.leader("cheap").unwrap();
    l.release().unwrap();
    assert_eq!(
        traffic.requests.load(Ordering::SeqCst) - before,
        4,
        "campaign, proclaim, leader and resign: one request each"
    );
}

/// A counted client that reaches `etcd` through a fault proxy (for the
/// observer), with the proxy to cut its connections.
fn observer_behind_a_proxy(etcd: &EtcdServer) -> (FaultProxy, Client, Arc<Traffic>) {
    let upstream: std::net::SocketAddr = etcd.url().trim_start_matches("http://").parse().unwrap();
    let proxy = FaultProxy::start(upstream).unwrap();
    let (o, traffic) = etcd_traffic::counted_client(
        EtcdMachine::new(EtcdConfig::new(vec![proxy.url()]), Box::new(OsEntropy)).unwrap(),
    );
    (proxy, o, traffic)
}

/// The observer's watch connection is dropped while it waits: it reads
/// again and watches anew, and still reports the next change.
#[test]
fn observe_survives_a_dropped_watch_connection() {
    let etcd = EtcdServer::start().expect("start etcd");
    let (proxy, o, traffic) = observer_behind_a_proxy(&etcd);
    let a = client(&etcd);
    let l = campaign(&a, "drop", "A");
    let known = leads("A", l.fencing_token());
    let (tx, rx) = channel();
    let observer = std::thread::spawn(move || {
        let seen = o.observe_change("drop", known.as_ref(), Wait::For(20_000), None);
        tx.send(seen).unwrap();
        o
    });
    // Created: its connection is through the proxy (a watch only sent
    // might connect after the drop below and never be cut).
    wait_until("the observer watches", || {
        traffic.watches_created.load(Ordering::SeqCst) == 1
    });
    proxy.set(Fault::Drop);
    std::thread::sleep(Duration::from_millis(50));
    proxy.set(Fault::Pass);
    wait_until("the observer watches anew", || {
        traffic.watches.load(Ordering::SeqCst) >= 2
            && traffic.watches_created.load(Ordering::SeqCst) >= 2
    });
    assert!(rx.try_recv().is_err(), "no change yet, no report");
    l.proclaim("A2").unwrap();
    let seen = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the observe completes")
        .expect("no error");
    assert_eq!(seen, leads("A2", l.fencing_token()));
    observer.join().unwrap();
    l.release().unwrap();
}

/// The observer iterator rides out a short outage (each failed read is
/// retried with backoff: 50, 100, 200, 400, 800 ms) and still reports the
/// next change; an outage that lasts is reported as an error after the
/// fifth retry, and the iterator then ends.
#[test]
fn observe_iterator_retries_an_outage_then_reports_one_that_lasts() {
    let etcd = EtcdServer::start().expect("start etcd");
    let (proxy, o, traffic) = observer_behind_a_proxy(&etcd);
    let a = client(&etcd);
    let l = campaign(&a, "outage", "A");
    let cancel = CancelToken::new();
    let mut observer = o.observe("outage", cancel.clone());
    assert_eq!(
        observer.next().unwrap().unwrap(),
        leads("A", l.fencing_token())
    );
    let (tx, rx) = channel();
    let thread = std::thread::spawn(move || {
        for item in observer.by_ref() {
            let _ = tx.send((Instant::now(), item));
        }
        tx.send((Instant::now(), Ok(leads("iterator ended", 0))))
            .unwrap();
    });
    // Created: its connection is through the proxy (a watch only sent
    // might connect after the outage below and never be cut).
    wait_until("the observer watches", || {
        traffic.watches_created.load(Ordering::SeqCst) == 1
    });
    // A short outage while the observer waits: its watch and the reads
    // after it fail for 300 ms.
    proxy.set(Fault::Drop);
    std::thread::sleep(Duration::from_millis(300));
    proxy.set(Fault::Pass);
    wait_until("the observer watches anew", || {
        traffic.watches.load(Ordering::SeqCst) >= 2
            && traffic.watches_created.load(Ordering::SeqCst) >= 2
    });
    assert!(rx.try_recv().is_err(), "no error and no change reported");
    l.proclaim("A2").unwrap();
    let (_, item) = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(item.unwrap(), leads("A2", l.fencing_token()));
    // An outage that lasts: reported after five retries, about 1.55 s.
    let cut = Instant::now();
    proxy.set(Fault::Drop);
    l.proclaim("A3")
        .unwrap_or_else(|e| panic!("the leader's own client is direct: {e}"));
    let (at, item) = rx.recv_timeout(Duration::from_secs(15)).unwrap();
    let err = item.expect_err("a lasting outage is an error");
    assert!(err.is_retryable(), "{err}");
    let took = at - cut;
    assert!(
        took >= Duration::from_millis(1400),
        "reported after {took:?}: before the retries ran"
    );
    let (_, end) = rx.recv_timeout(Duration::from_secs(5)).unwrap();
    assert_eq!(
        end.unwrap(),
        leads("iterator ended", 0),
        "the iterator ends after its error"
    );
    thread.join().unwrap();
    cancel.cancel();
    l.release().unwrap();
}
