//! The ZooKeeper / Curator test harness (issue 29) proven with Curator alone:
//! real ZooKeeper 3.8 servers (`edgelock_devtools::ZooKeeperServer`,
//! `ZooKeeperEnsemble`) and real Curator 5.4 clients in their own JVMs
//! (`CuratorPeer`) exclude each other recipe by recipe, with the node names
//! edgelock has to reproduce. The edgelock side of the interop tests builds
//! on exactly these pieces.
//!
//! JVM starts are the cost, so each test starts its servers once and runs
//! every check against them; the peers start in parallel.
#![cfg(feature = "native")]

use std::thread;
use std::time::{Duration, Instant};

use edgelock_devtools::{CuratorPeer, HeldNode, ZooKeeperEnsemble, ZooKeeperServer};

/// Starts `n` peers on `connect` at once (each is a JVM start).
fn start_peers(connect: &str, n: usize) -> Vec<CuratorPeer> {
    let starts: Vec<_> = (0..n)
        .map(|_| {
            let connect = connect.to_string();
            thread::spawn(move || CuratorPeer::start(&connect))
        })
        .collect();
    starts
        .into_iter()
        .map(|s| {
            s.join()
                .expect("peer start thread")
                .expect("CuratorPeer starts")
        })
        .collect()
}

/// Polls `f` every 20 ms until it returns true or `timeout` passes.
fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        thread::sleep(Duration::from_millis(20));
    }
    f()
}

/// Curator's protected node name: `_c_<v4 uuid>-<marker><10-digit sequence>`.
fn is_protected_name(name: &str, marker: &str) -> bool {
    let Some(rest) = name.strip_prefix("_c_") else {
        return false;
    };
    let (uuid, tail) = rest.split_at(rest.len().min(36));
    let hex_groups: Vec<&str> = uuid.split('-').collect();
    let uuid_ok = hex_groups.iter().map(|g| g.len()).eq([8, 4, 4, 4, 12])
        && hex_groups.iter().all(|g| {
            g.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        })
        && hex_groups[2].starts_with('4')
        && hex_groups[3].starts_with(['8', '9', 'a', 'b']);
    let seq = tail.strip_prefix('-').and_then(|t| t.strip_prefix(marker));
    uuid_ok && seq.is_some_and(|s| s.len() == 10 && s.bytes().all(|b| b.is_ascii_digit()))
}

fn assert_node(node: &HeldNode, parent: &str, marker: &str) {
    assert_eq!(
        node.path,
        format!("{parent}/{}", node.name()),
        "node directly under {parent}"
    );
    assert!(
        is_protected_name(node.name(), marker),
        "{} is not a Curator name with marker {marker:?}",
        node.name()
    );
    assert!(node.czxid > 0, "czxid of {node:?}");
}

fn child_count(peer: &mut CuratorPeer, path: &str) -> usize {
    peer.children(path).unwrap().map_or(0, |c| c.len())
}

#[test]
fn protected_name_check_accepts_curators_form_only() {
    let ok = "_c_cdaf2efd-b14f-40b9-a7c2-51c3cc998b9b-lock-0000000000";
    assert!(is_protected_name(ok, "lock-"));
    assert!(!is_protected_name(ok, "latch-"));
    assert!(!is_protected_name(&ok.replace("-40b9", "-30b9"), "lock-"));
    assert!(!is_protected_name(&ok.replace("-a7c2", "-c7c2"), "lock-"));
    assert!(!is_protected_name(
        &ok.replace("0000000000", "000000000"),
        "lock-"
    ));
    assert!(!is_protected_name(&ok.replace("cdaf", "CDAF"), "lock-"));
    assert!(!is_protected_name("lock-0000000000", "lock-"));
}

/// Two peers on an InterProcessMutex: the second's try fails, its timed
/// wait (queued behind the holder) succeeds once the first releases.
fn mutex_excludes(a: &mut CuratorPeer, mut b: CuratorPeer) -> CuratorPeer {
    const P: &str = "/edgelock/harness-mutex";
    let first = a
        .mutex_acquire(P, 0)
        .unwrap()
        .expect("a acquires the free mutex");
    assert_node(&first, P, "lock-");
    assert_eq!(
        b.mutex_acquire(P, 0).unwrap(),
        None,
        "b's try while a holds"
    );
    let waiter = thread::spawn(move || {
        let got = b.mutex_acquire(P, 20_000);
        (b, got)
    });
    assert!(
        wait_until(Duration::from_secs(10), || child_count(a, P) == 2),
        "b's waiting node appears"
    );
    a.mutex_release(P).unwrap();
    let (mut b, got) = waiter.join().unwrap();
    let second = got.unwrap().expect("b acquires after a released");
    assert_node(&second, P, "lock-");
    assert!(second.czxid > first.czxid, "{second:?} after {first:?}");
    assert_eq!(
        a.mutex_acquire(P, 0).unwrap(),
        None,
        "a's try while b holds"
    );
    b.mutex_release(P).unwrap();
    let took = b.bench_mutex(P, 20).unwrap();
    assert!(took > Duration::ZERO, "bench-mutex timed {took:?}");
    b
}

/// LeaderLatch: the first participant leads, a reader that never joined
/// sees its id, and closing hands leadership to the second.
fn latch_hands_over(a: &mut CuratorPeer, b: &mut CuratorPeer, reader: &mut CuratorPeer) {
    const P: &str = "/edgelock/harness-latch";
    a.latch_start(P, "alpha").unwrap();
    assert!(a.latch_has(P, 10_000).unwrap(), "alpha leads alone");
    b.latch_start(P, "beta").unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || child_count(reader, P) == 2),
        "beta's latch node appears"
    );
    assert!(!b.latch_has(P, 0).unwrap(), "beta does not lead yet");
    assert_eq!(reader.latch_leader(P).unwrap().as_deref(), Some("alpha"));
    assert_node(&a.latch_node(P).unwrap().unwrap(), P, "latch-");
    assert_node(&b.latch_node(P).unwrap().unwrap(), P, "latch-");
    a.latch_close(P).unwrap();
    assert!(
        b.latch_has(P, 10_000).unwrap(),
        "beta leads after alpha closed"
    );
    assert_eq!(reader.latch_leader(P).unwrap().as_deref(), Some("beta"));
    b.latch_close(P).unwrap();
}

/// InterProcessSemaphoreV2 with 2 leases and three peers.
fn semaphore_of_two(a: &mut CuratorPeer, b: &mut CuratorPeer, mut c: CuratorPeer) -> CuratorPeer {
    const P: &str = "/edgelock/harness-sem";
    let leases = format!("{P}/leases");
    let la = a.sem_acquire(P, 2, 0).unwrap().expect("first lease");
    let lb = b.sem_acquire(P, 2, 0).unwrap().expect("second lease");
    assert_node(&la, &leases, "lease-");
    assert_node(&lb, &leases, "lease-");
    assert_eq!(c.sem_acquire(P, 2, 0).unwrap(), None, "no third lease");
    let waiter = thread::spawn(move || {
        let got = c.sem_acquire(P, 2, 20_000);
        (c, got)
    });
    // The waiter holds the `locks` mutex while it waits on the leases.
    assert!(
        wait_until(Duration::from_secs(10), || child_count(a, &leases) == 3),
        "c's waiting lease node appears"
    );
    a.sem_release(P).unwrap();
    let (mut c, got) = waiter.join().unwrap();
    let lc = got.unwrap().expect("c gets the freed lease");
    assert_node(&lc, &leases, "lease-");
    assert_eq!(child_count(a, &leases), 2);
    b.sem_release(P).unwrap();
    c.sem_release(P).unwrap();
    c
}

/// InterProcessReadWriteLock: readers share, a writer waits for both and
/// then excludes readers.
fn read_shared_write_exclusive(a: &mut CuratorPeer, b: &mut CuratorPeer, mut c: CuratorPeer) {
    const P: &str = "/edgelock/harness-rw";
    assert_node(
        &a.read_acquire(P, 0).unwrap().expect("a reads"),
        P,
        "__READ__",
    );
    assert_node(
        &b.read_acquire(P, 0).unwrap().expect("b reads too"),
        P,
        "__READ__",
    );
    assert_eq!(
        c.write_acquire(P, 0).unwrap(),
        None,
        "no writer beside readers"
    );
    let waiter = thread::spawn(move || {
        let got = c.write_acquire(P, 20_000);
        (c, got)
    });
    assert!(
        wait_until(Duration::from_secs(10), || child_count(a, P) == 3),
        "the writer's node appears"
    );
    a.read_release(P).unwrap();
    b.read_release(P).unwrap();
    let (mut c, got) = waiter.join().unwrap();
    assert_node(
        &got.unwrap().expect("writer after the readers"),
        P,
        "__WRIT__",
    );
    assert_eq!(
        a.read_acquire(P, 0).unwrap(),
        None,
        "no reader beside the writer"
    );
    c.write_release(P).unwrap();
    assert!(a.read_acquire(P, 0).unwrap().is_some(), "reads again");
    a.read_release(P).unwrap();
}

/// InterProcessMultiLock holds every path; its nodes are plain mutex nodes.
fn multi_lock_holds_each_path(a: &mut CuratorPeer, b: &mut CuratorPeer) {
    let paths = ["/edgelock/harness-m1", "/edgelock/harness-m2"];
    assert!(a.multi_acquire(&paths, 0).unwrap());
    assert_eq!(b.mutex_acquire(paths[1], 0).unwrap(), None);
    let children = a.children(paths[0]).unwrap().unwrap();
    assert!(is_protected_name(&children[0], "lock-"), "{children:?}");
    a.multi_release(&paths).unwrap();
    assert!(b.mutex_acquire(paths[1], 0).unwrap().is_some());
    b.mutex_release(paths[1]).unwrap();
}

#[test]
fn curator_recipes_exclude_each_other_on_one_server() {
    let t0 = Instant::now();
    let mut zk = ZooKeeperServer::start().unwrap();
    // tickTime 200: sessions are clamped into [400 ms, 4 s].
    assert_eq!(zk.handshake(60_000).unwrap().timeout_ms, 4000);
    assert_eq!(zk.handshake(1).unwrap().timeout_ms, 400);
    assert_eq!(zk.mode().unwrap(), "standalone");
    let mut peers = start_peers(&zk.connect_string(), 3);
    let c = peers.pop().unwrap();
    let b = peers.pop().unwrap();
    let mut a = peers.pop().unwrap();
    assert_ne!(a.session_id(), b.session_id());
    let mut b = mutex_excludes(&mut a, b);
    let mut c = semaphore_of_two(&mut a, &mut b, c);
    latch_hands_over(&mut a, &mut b, &mut c);
    multi_lock_holds_each_path(&mut a, &mut b);
    read_shared_write_exclusive(&mut a, &mut b, c);
    // Emptied container parents go (checkIntervalMs=100): the sequence
    // restarts there, which is why the fencing token is the czxid.
    assert!(
        wait_until(Duration::from_secs(10), || a
            .children("/edgelock/harness-mutex")
            .unwrap()
            .is_none()),
        "the empty container is deleted"
    );

    // A paused server answers nothing; resumed, it serves again.
    zk.pause().unwrap();
    assert!(zk.handshake(4000).is_err(), "paused server answers");
    zk.resume().unwrap();
    zk.handshake(4000).unwrap();

    // Restarted on the same port with the same data, the peer reconnects
    // and keeps its session (the nodes survive the restart).
    let kept = a
        .mutex_acquire("/edgelock/harness-restart", 0)
        .unwrap()
        .unwrap();
    let session = a.session_id().to_string();
    zk.restart().unwrap();
    let after = a
        .stat(&kept.path)
        .unwrap()
        .expect("the holder's node survives a restart");
    assert_eq!(after, (kept.czxid, session));
    a.mutex_release("/edgelock/harness-restart").unwrap();
    a.close().unwrap();
    eprintln!("curator recipes on one server: {:?}", t0.elapsed());
}

#[test]
fn ensemble_of_three_keeps_serving_when_the_leader_is_killed() {
    let t0 = Instant::now();
    let mut ensemble = ZooKeeperEnsemble::start(3).unwrap();
    let leader = ensemble.wait_for_leader(Duration::from_secs(30)).unwrap();
    let mut peer = CuratorPeer::start(&ensemble.connect_string()).unwrap();
    const P: &str = "/edgelock/harness-ensemble";
    let held = peer
        .mutex_acquire(P, 0)
        .unwrap()
        .expect("acquires through the ensemble");
    assert_node(&held, P, "lock-");

    ensemble.kill(leader);
    let next = ensemble.wait_for_leader(Duration::from_secs(30)).unwrap();
    assert_ne!(next, leader, "the two left elect another leader");
    // Same session on a surviving server: the holder's node is still there.
    let stat = peer.stat(&held.path).unwrap().expect("node kept");
    assert_eq!(stat, (held.czxid, peer.session_id().to_string()));
    peer.mutex_release(P).unwrap();
    let again = peer
        .mutex_acquire(P, 0)
        .unwrap()
        .expect("acquires with one server down");
    assert!(again.czxid > held.czxid);
    peer.mutex_release(P).unwrap();

    ensemble.start_again(leader).unwrap();
    assert_eq!(ensemble.len(), 3);
    peer.close().unwrap();
    eprintln!("ensemble of three: {:?}", t0.elapsed());
}
