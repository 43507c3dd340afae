//! Read-write locks (`LockKind::Shared` readers, `LockKind::Exclusive`
//! writers) on a real etcd, started by each test on free loopback ports with
//! a temp data dir (`EDGELOCK_ETCD_BIN` picks another etcd, e.g. 3.5 from
//! `scripts/etcd35.sh`).
#![cfg(feature = "native")]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
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

fn opts(wait: Wait) -> AcquireOptions {
    AcquireOptions { wait, ttl_ms: None }
}

fn read(c: &Client, name: &str) -> Lock {
    c.acquire_kind(name, LockKind::Shared, opts(Wait::For(30_000)), None)
        .expect("shared acquire")
        .expect("granted")
}

fn try_read(c: &Client, name: &str) -> Option<Lock> {
    c.acquire_kind(name, LockKind::Shared, opts(Wait::Try), None)
        .expect("shared try")
}

fn write(c: &Client, name: &str) -> Lock {
    c.acquire_kind(name, LockKind::Exclusive, opts(Wait::For(30_000)), None)
        .expect("exclusive acquire")
        .expect("granted")
}

fn try_write(c: &Client, name: &str) -> Option<Lock> {
    c.acquire_kind(name, LockKind::Exclusive, opts(Wait::Try), None)
        .expect("exclusive try")
}

fn reader_keys(etcd: &EtcdServer, name: &str) -> Vec<String> {
    keys_of(etcd, name)
        .into_iter()
        .filter(|k| k.starts_with(&format!("edgelock/{name}/r/")))
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

/// A waiter on its own thread: `granted` is set when it holds; sending on
/// the channel releases it; the join handle returns its token.
struct Waiter {
    granted: Arc<AtomicBool>,
    release: std::sync::mpsc::Sender<()>,
    thread: std::thread::JoinHandle<u64>,
}

fn spawn_waiter(c: Client, name: &'static str, kind: LockKind) -> Waiter {
    let granted = Arc::new(AtomicBool::new(false));
    let (release, rx) = std::sync::mpsc::channel::<()>();
    let flag = granted.clone();
    let thread = std::thread::spawn(move || {
        let l = c
            .acquire_kind(name, kind, opts(Wait::For(30_000)), None)
            .expect("acquire")
            .expect("granted");
        assert_eq!(l.kind(), kind);
        flag.store(true, Ordering::SeqCst);
        let token = l.fencing_token();
        rx.recv().unwrap();
        assert!(l.release().unwrap(), "held until release");
        c.close().unwrap();
        token
    });
    Waiter {
        granted,
        release,
        thread,
    }
}

impl Waiter {
    fn granted(&self) -> bool {
        self.granted.load(Ordering::SeqCst)
    }
    fn finish(self) -> u64 {
        self.release.send(()).unwrap();
        self.thread.join().unwrap()
    }
}

#[test]
fn several_readers_hold_at_once_and_exclude_a_writer() {
    let etcd = EtcdServer::start().expect("start etcd");
    let (a, b, c) = (client(&etcd), client(&etcd), client(&etcd));
    // One client holds two shared holds at once (no local queueing behind itself).
    let a1 = try_read(&a, "cfg").expect("first reader");
    let a2 = try_read(&a, "cfg").expect("second reader of the same client");
    let b1 = try_read(&b, "cfg").expect("reader of another client");
    for l in [&a1, &a2, &b1] {
        assert_eq!(l.kind(), LockKind::Shared);
        assert_eq!(l.handle().kind, LockKind::Shared);
        assert_eq!(
            l.fencing_token(),
            l.handle().revision,
            "a reader's token is its key's create revision"
        );
    }
    assert_eq!(reader_keys(&etcd, "cfg").len(), 3);
    // An exclusive try behind readers fails, from a reader's own client too, and leaves no key.
    assert!(try_write(&c, "cfg").is_none());
    assert!(try_write(&a, "cfg").is_none());
    assert_eq!(
        keys_of(&etcd, "cfg").len(),
        3,
        "the refused tries left nothing"
    );
    let st = c.inspect("cfg").unwrap();
    assert_eq!(
        st.holders
            .iter()
            .map(|h| (h.kind, h.fencing_token))
            .collect::<Vec<_>>(),
        [&a1, &a2, &b1]
            .iter()
            .map(|l| (LockKind::Shared, Some(l.fencing_token())))
            .collect::<Vec<_>>()
    );
    assert!(st.queued.is_empty() && st.held && st.limit.is_none() && st.remaining_ms.is_some());
    for l in [a1, a2, b1] {
        assert!(l.release().unwrap());
    }
    // Once they are gone a writer holds, and a shared try behind it fails.
    let w = try_write(&c, "cfg").expect("free once the readers left");
    assert!(try_read(&a, "cfg").is_none());
    assert!(
        try_read(&c, "cfg").is_none(),
        "not even from the writer's own client"
    );
    let st = a.inspect("cfg").unwrap();
    assert_eq!(
        st.holders.iter().map(|h| h.kind).collect::<Vec<_>>(),
        vec![LockKind::Exclusive]
    );
    assert!(w.release().unwrap());
    assert!(keys_of(&etcd, "cfg").is_empty(), "nothing left behind");
}

/// Readers R1, R2 hold; writer W queues; readers R3..R5 arrive after W. W is
/// granted once R1 and R2 released (not starved by the later readers), the
/// later readers only after W released; tokens follow.
#[test]
fn a_waiting_writer_is_not_starved_by_later_readers() {
    let etcd = EtcdServer::start().expect("start etcd");
    let holders = client(&etcd);
    let r1 = read(&holders, "stream");
    let r2 = read(&holders, "stream");
    let w = spawn_waiter(client(&etcd), "stream", LockKind::Exclusive);
    wait_until("the writer queued", || keys_of(&etcd, "stream").len() == 3);
    let late: Vec<Waiter> = (0..3)
        .map(|i| {
            let r = spawn_waiter(client(&etcd), "stream", LockKind::Shared);
            wait_until("a late reader queued", || {
                reader_keys(&etcd, "stream").len() == 3 + i
            });
            r
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !w.granted() && late.iter().all(|r| !r.granted()),
        "readers arriving after a waiting writer wait behind it"
    );
    let st = holders.inspect("stream").unwrap();
    assert_eq!(
        st.holders.iter().map(|h| h.kind).collect::<Vec<_>>(),
        vec![LockKind::Shared; 2]
    );
    assert_eq!(
        st.queued.iter().map(|h| h.kind).collect::<Vec<_>>(),
        vec![
            LockKind::Exclusive,
            LockKind::Shared,
            LockKind::Shared,
            LockKind::Shared
        ]
    );
    let earlier = [r1.fencing_token(), r2.fencing_token()];
    assert!(r1.release().unwrap());
    std::thread::sleep(Duration::from_millis(300));
    assert!(!w.granted(), "one earlier reader still holds");
    assert!(r2.release().unwrap());
    wait_until("the writer is granted", || w.granted());
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        late.iter().all(|r| !r.granted()),
        "no reader beside the writer"
    );
    let st = holders.inspect("stream").unwrap();
    assert_eq!(st.holders.len(), 1);
    assert_eq!(st.holders[0].kind, LockKind::Exclusive);
    let w_token = w.finish();
    assert!(
        earlier.iter().all(|t| *t < w_token),
        "writer token {w_token} above the earlier readers' {earlier:?}"
    );
    wait_until("every late reader is granted", || {
        late.iter().all(|r| r.granted())
    });
    for r in late {
        assert!(
            r.finish() > w_token,
            "a reader's token is above every earlier writer's"
        );
    }
    assert!(keys_of(&etcd, "stream").is_empty());
}

/// Writer W1 holds; readers R1..R3 wait behind it; writer W2 waits behind
/// them. W1's release wakes each reader once and not W2; W2 re-checks only
/// when its own predecessor leaves.
#[test]
fn a_writers_release_wakes_the_readers_behind_it_but_not_the_next_writer() {
    let etcd = EtcdServer::start().expect("start etcd");
    let w1 = write(&client(&etcd), "wake");
    let mut readers = Vec::new();
    let mut reader_traffic = Vec::new();
    for i in 0..3 {
        let (c, t) = counted_client(&etcd);
        readers.push(spawn_waiter(c, "wake", LockKind::Shared));
        reader_traffic.push(t);
        wait_until("a reader queued", || keys_of(&etcd, "wake").len() == 2 + i);
    }
    let (c, w2_traffic) = counted_client(&etcd);
    let w2 = spawn_waiter(c, "wake", LockKind::Exclusive);
    wait_until("the second writer queued", || {
        keys_of(&etcd, "wake").len() == 5
    });
    wait_until("everyone watches", || {
        reader_traffic
            .iter()
            .chain([&w2_traffic])
            .all(|t| t.watches.load(Ordering::SeqCst) >= 1)
    });
    std::thread::sleep(Duration::from_millis(300));
    let rechecks = |t: &Arc<Traffic>| t.rechecks.load(Ordering::SeqCst);
    let before: Vec<usize> = reader_traffic.iter().map(rechecks).collect();
    let w2_before = rechecks(&w2_traffic);
    assert!(w1.release().unwrap());
    wait_until("the readers are granted", || {
        readers.iter().all(|r| r.granted())
    });
    std::thread::sleep(Duration::from_millis(300));
    let per_reader: Vec<usize> = reader_traffic
        .iter()
        .zip(&before)
        .map(|(t, b)| rechecks(t) - b)
        .collect();
    let w2_after_w1 = rechecks(&w2_traffic) - w2_before;
    eprintln!(
        "re-checks on the writer's release: readers {per_reader:?}, next writer {w2_after_w1}"
    );
    assert_eq!(
        per_reader,
        vec![1, 1, 1],
        "each reader behind the writer re-checks once"
    );
    assert_eq!(
        w2_after_w1, 0,
        "the writer queued after the readers is not woken"
    );
    assert!(!w2.granted());
    // The readers leave, oldest first: W2 watches the newest one (its predecessor) only.
    let mut readers = readers.into_iter();
    let tokens: Vec<u64> = (0..2).map(|_| readers.next().unwrap().finish()).collect();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        rechecks(&w2_traffic) - w2_before,
        0,
        "older readers leaving do not wake the writer"
    );
    assert!(!w2.granted());
    let last = readers.next().unwrap().finish();
    wait_until("the second writer is granted", || w2.granted());
    eprintln!(
        "re-checks of the second writer for its grant: {}",
        rechecks(&w2_traffic) - w2_before
    );
    assert_eq!(rechecks(&w2_traffic) - w2_before, 1);
    let w2_token = w2.finish();
    assert!(tokens.iter().chain([&last]).all(|t| *t < w2_token));
    assert!(keys_of(&etcd, "wake").is_empty());
}

/// Clients mixing shared and exclusive holds: a writer never overlaps
/// anyone, and every writer's token is above every token granted before it.
#[test]
fn mixed_holders_exclude_writers_and_writer_tokens_increase() {
    let etcd = EtcdServer::start().expect("start etcd");
    let readers_in = Arc::new(AtomicUsize::new(0));
    let writer_in = Arc::new(AtomicBool::new(false));
    let grants = Arc::new(Mutex::new(Vec::<(LockKind, u64)>::new()));
    let threads: Vec<_> = (0..4)
        .map(|i| {
            let c = client(&etcd);
            let (readers_in, writer_in, grants) =
                (readers_in.clone(), writer_in.clone(), grants.clone());
            std::thread::spawn(move || {
                for j in 0..12 {
                    let kind = if (i + j) % 3 == 0 {
                        LockKind::Exclusive
                    } else {
                        LockKind::Shared
                    };
                    let l = c
                        .acquire_kind("mixed", kind, opts(Wait::For(30_000)), None)
                        .unwrap()
                        .expect("granted");
                    grants.lock().unwrap().push((kind, l.fencing_token()));
                    if kind == LockKind::Exclusive {
                        assert!(
                            !writer_in.swap(true, Ordering::SeqCst),
                            "two writers at once"
                        );
                        assert_eq!(
                            readers_in.load(Ordering::SeqCst),
                            0,
                            "a writer beside readers"
                        );
                        std::thread::sleep(Duration::from_millis(3));
                        writer_in.store(false, Ordering::SeqCst);
                    } else {
                        readers_in.fetch_add(1, Ordering::SeqCst);
                        assert!(
                            !writer_in.load(Ordering::SeqCst),
                            "a reader beside a writer"
                        );
                        std::thread::sleep(Duration::from_millis(3));
                        readers_in.fetch_sub(1, Ordering::SeqCst);
                    }
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
    assert_eq!(grants.len(), 48);
    let writers = grants.iter().filter(|g| g.0 == LockKind::Exclusive).count();
    assert!(writers >= 12, "{writers} writers");
    // Recorded while held: a writer's record is ordered against every other record.
    for (i, (kind, token)) in grants.iter().enumerate() {
        let before = &grants[..i];
        match kind {
            LockKind::Exclusive => assert!(
                before.iter().all(|g| g.1 < *token),
                "writer {token} after {before:?}"
            ),
            _ => assert!(
                before
                    .iter()
                    .filter(|g| g.0 == LockKind::Exclusive)
                    .all(|g| g.1 < *token),
                "reader {token} after {before:?}"
            ),
        }
    }
    assert!(keys_of(&etcd, "mixed").is_empty());
}

#[test]
fn a_shared_handle_is_resumed_extended_and_released() {
    let etcd = EtcdServer::start().expect("start etcd");
    let (a, b, c) = (client(&etcd), client(&etcd), client(&etcd));
    let lock = read(&a, "resume");
    lock.extend(None).expect("extend renews the session lease");
    let json = serde_json::to_string(lock.handle()).unwrap();
    assert!(json.contains(r#""mode":"shared""#), "{json}");
    let handle: LockHandle = serde_json::from_str(&json).unwrap();
    let resumed = b.resume(&handle).expect("still held");
    assert_eq!(
        (resumed.kind(), resumed.fencing_token()),
        (LockKind::Shared, lock.fencing_token())
    );
    resumed.extend(None).expect("the resumed hold extends");
    assert_eq!(
        b.resume(&handle).unwrap_err().code(),
        "INVALID_ARGUMENT",
        "the same hold is not adopted twice"
    );
    // A second reader of the resuming client is not blocked by the resumed hold.
    let other = try_read(&b, "resume").expect("readers share");
    assert!(other.release().unwrap());
    assert!(resumed.release().unwrap());
    assert!(keys_of(&etcd, "resume").is_empty());
    assert_eq!(b.resume(&handle).unwrap_err().code(), "LOST");
    // A writer now; the original's late release does not touch it.
    let w = write(&c, "resume");
    assert!(w.fencing_token() > lock.fencing_token());
    assert!(!lock.release().unwrap(), "not held until this late release");
    assert_eq!(keys_of(&etcd, "resume").len(), 1);
    assert!(!w.is_lost());
    assert!(w.release().unwrap());
    // A reader whose key is deleted behind its back learns it lost the hold.
    let l = read(&a, "resume");
    raw(
        &etcd,
        "/v3/kv/deleterange",
        json!({"key": b64(l.handle().key.as_bytes())}),
    );
    assert_eq!(
        l.wait_lost(Some(Duration::from_secs(10))),
        Some(LostReason::KeyGone)
    );
}

/// A reader whose process died (its session lease is no longer renewed)
/// keeps out writers until the lease ends, but not other readers.
#[test]
fn a_dead_reader_is_taken_over_at_lease_end() {
    let etcd = EtcdServer::start().expect("start etcd");
    // The lease is granted after this instant and lives 2 s from its grant:
    // measured from here, however long the set-up below takes.
    let started = Instant::now();
    let grant = raw(&etcd, "/v3/lease/grant", json!({"TTL": "2"}));
    let lease: i64 = grant["ID"].as_str().unwrap().parse().unwrap();
    let key = format!("edgelock/dead/r/{lease:x}.1");
    let put = raw(
        &etcd,
        "/v3/kv/put",
        json!({"key": b64(key.as_bytes()), "value": b64(b"r:dead"), "lease": lease.to_string()}),
    );
    let dead_token: u64 = put["header"]["revision"].as_str().unwrap().parse().unwrap();
    let c = client(&etcd);
    assert!(
        try_write(&c, "dead").is_none(),
        "the dead reader's hold is respected"
    );
    let reader = try_read(&c, "dead").expect("readers share with the dead reader");
    assert!(reader.release().unwrap());
    let w = write(&c, "dead");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(1_900),
        "waited only {waited:?} since before the 2 s lease was granted"
    );
    assert!(waited < Duration::from_secs(8), "waited {waited:?}");
    assert!(w.fencing_token() > dead_token);
    assert!(w.release().unwrap());
}

#[test]
fn permits_and_shared_holds_do_not_mix() {
    let etcd = EtcdServer::start().expect("start etcd");
    let (a, b) = (client(&etcd), client(&etcd));
    let r = read(&a, "rw");
    let before = keys_of(&etcd, "rw");
    for wait in [Wait::Try, Wait::For(2_000)] {
        let err = b
            .acquire_kind("rw", LockKind::permits(2).unwrap(), opts(wait), None)
            .unwrap_err();
        assert_eq!(err.code(), "INVALID_ARGUMENT", "{err}");
        assert!(
            err.to_string()
                .contains("is a read-write lock, not a semaphore of 2"),
            "{err}"
        );
        assert_eq!(keys_of(&etcd, "rw"), before, "nothing left behind");
    }
    let p = b
        .acquire_kind("sem", LockKind::permits(2).unwrap(), opts(Wait::Try), None)
        .unwrap()
        .expect("permit");
    let before = keys_of(&etcd, "sem");
    for wait in [Wait::Try, Wait::For(2_000)] {
        let err = a
            .acquire_kind("sem", LockKind::Shared, opts(wait), None)
            .unwrap_err();
        assert_eq!(err.code(), "INVALID_ARGUMENT", "{err}");
        assert!(
            err.to_string()
                .contains("is a semaphore of 2, not a read-write lock"),
            "{err}"
        );
        assert_eq!(keys_of(&etcd, "sem"), before, "nothing left behind");
    }
    // Reader keys are no semaphore's: an exclusive acquire waits behind them, not refused.
    assert!(try_write(&b, "rw").is_none());
    assert!(r.release().unwrap());
    assert!(p.release().unwrap());
}

#[test]
fn uncontended_shared_acquire_and_release_cost_two_requests() {
    let etcd = EtcdServer::start().expect("start etcd");
    let (c, traffic) = counted_client(&etcd);
    read(&c, "warm").release().unwrap(); // grants the session lease
    for _ in 0..5 {
        let before = traffic.requests.load(Ordering::SeqCst);
        let lock = read(&c, "cheap");
        assert!(lock.release().unwrap());
        assert_eq!(
            traffic.requests.load(Ordering::SeqCst) - before,
            2,
            "acquire txn + release"
        );
    }
}

#[test]
fn a_reader_that_times_out_behind_a_writer_leaves_no_key() {
    let etcd = EtcdServer::start().expect("start etcd");
    let (a, b) = (client(&etcd), client(&etcd));
    let w = write(&a, "timeout");
    let started = Instant::now();
    let err = b
        .acquire_kind("timeout", LockKind::Shared, opts(Wait::For(400)), None)
        .unwrap_err();
    assert_eq!(err.code(), "TIMEOUT", "{err}");
    assert!(started.elapsed() >= Duration::from_millis(399)); // whole-ms clock: up to 1 ms early
    assert_eq!(
        keys_of(&etcd, "timeout"),
        vec![w.handle().key.clone()],
        "only the writer's key"
    );
    // The same client's own reader waits behind its writer too.
    assert!(try_read(&a, "timeout").is_none());
    assert!(w.release().unwrap());
    let r = try_read(&b, "timeout").expect("free");
    assert!(r.release().unwrap());
    assert!(keys_of(&etcd, "timeout").is_empty());
}

/// A reader key on our session lease that nothing of ours uses (as a shared
/// acquire txn that applied after we gave up would leave) is swept once a
/// txn outcome was unknown, and a writer gets the name.
#[test]
fn a_ghost_reader_key_on_the_session_lease_is_swept() {
    use edgelock_devtools::{Fault, FaultProxy};
    let etcd = EtcdServer::start().expect("start etcd");
    let upstream: std::net::SocketAddr = etcd.url().trim_start_matches("http://").parse().unwrap();
    let proxy = FaultProxy::start(upstream).unwrap();
    let mut cfg = EtcdConfig::new(vec![proxy.url()]);
    cfg.request_timeout_ms = 500;
    cfg.session_ttl_ms = 3_000;
    let c = Client::etcd(cfg).unwrap();
    let held = read(&c, "keeps-the-session");
    let lease: i64 = held.handle().owner.parse().unwrap();
    proxy.set(Fault::CutResponse);
    assert!(c
        .acquire_kind("cut", LockKind::Shared, opts(Wait::Try), None)
        .is_err());
    proxy.set(Fault::Pass);
    let key = format!("edgelock/ghost/r/{lease:x}.999");
    raw(
        &etcd,
        "/v3/kv/put",
        json!({"key": b64(key.as_bytes()), "value": b64(b"r:late"), "lease": lease.to_string()}),
    );
    let other = client(&etcd);
    let w = other
        .acquire_kind("ghost", LockKind::Exclusive, opts(Wait::For(8_000)), None)
        .unwrap()
        .expect("the ghost is swept within a few renewal rounds");
    assert!(w.release().unwrap());
    assert!(!held.is_lost(), "the real reader is untouched");
    assert!(held.release().unwrap());
}
