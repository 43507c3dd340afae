//! Curator's other recipes against a real ZooKeeper 3.8 and Curator 5.4 in
//! its own JVM (`CuratorPeer`), node for node, both ways: a Curator holder
//! keeps edgelock's try out and a waiting edgelock acquire completes once
//! Curator releases, and the reverse. The semaphore
//! (`InterProcessSemaphoreV2`), the read-write lock, the leader latch and
//! the multi-lock (`InterProcessMultiLock`, edgelock's `acquire_all`).
#![cfg(feature = "native")]

use std::thread;
use std::time::{Duration, Instant};

use edgelock::core::zookeeper::ZkConfig;
use edgelock::core::{AcquireOptions, BackendSpec, LockKind, Wait};
use edgelock::native::{Client, Lock};
use edgelock_devtools::{CuratorPeer, ZooKeeperServer};

fn client_with(connect: &str, read_write_names: &[&str]) -> Client {
    let mut cfg = ZkConfig::new(connect);
    cfg.session_timeout_ms = 4_000;
    cfg.request_timeout_ms = 3_000;
    cfg.read_write_names = read_write_names.iter().map(|n| n.to_string()).collect();
    Client::connect(BackendSpec::ZooKeeper(cfg)).expect("client")
}

fn client(connect: &str) -> Client {
    client_with(connect, &[])
}

fn wait_for(ms: u64) -> AcquireOptions {
    AcquireOptions {
        wait: Wait::For(ms),
        ttl_ms: None,
    }
}

/// The last segment of `path` is `_c_<uuid v4>-<marker><10 digits>`.
fn assert_curator_name(path: &str, marker: &str) {
    let name = path.rsplit('/').next().unwrap();
    let (head, seq) = name.split_at(name.len() - 10);
    assert!(seq.bytes().all(|b| b.is_ascii_digit()), "{name}");
    assert!(head.ends_with(marker), "{name}");
    let uuid = &head[3..39];
    assert!(head.starts_with("_c_") && &head[39..40] == "-", "{name}");
    let groups: Vec<usize> = uuid.split('-').map(str::len).collect();
    assert_eq!(groups, [8, 4, 4, 4, 12], "{name}");
    assert_eq!(&uuid[14..15], "4", "{name}");
}

/// Runs `f` on `peer` in a thread (a Curator call that blocks until
/// edgelock lets go); gives the peer back with the answer.
fn in_thread<T: Send + 'static>(
    mut peer: CuratorPeer,
    f: impl FnOnce(&mut CuratorPeer) -> T + Send + 'static,
) -> thread::JoinHandle<(CuratorPeer, T)> {
    thread::spawn(move || {
        let answer = f(&mut peer);
        (peer, answer)
    })
}

/// Waits for `f` on `c` in a thread.
fn spawn_on<T: Send + 'static>(
    c: &Client,
    f: impl FnOnce(&Client) -> T + Send + 'static,
) -> thread::JoinHandle<T> {
    let c = c.clone();
    thread::spawn(move || f(&c))
}

#[test]
fn semaphore_v2_interoperates_both_ways() {
    let zk = ZooKeeperServer::start().expect("zookeeper starts");
    let connect = zk.connect_string();
    let mut curator = CuratorPeer::start(&connect).expect("curator peer");
    let ours = client(&connect);
    let one = LockKind::Permits { limit: 1 };
    let lease = curator
        .sem_acquire("/edgelock/s", 1, 0)
        .expect("curator acquire")
        .expect("curator holds the only lease");
    assert!(ours.try_acquire_kind("s", one).expect("try").is_none());
    let waiter = spawn_on(&ours, move |c| {
        c.acquire_kind("s", one, wait_for(10_000), None)
    });
    thread::sleep(Duration::from_millis(300));
    let started = Instant::now();
    curator.sem_release("/edgelock/s").expect("curator release");
    let permit = waiter.join().unwrap().expect("acquire").expect("held");
    // Only the watch wakes a ZooKeeper waiter (no timer), within its 10 s
    // wait; the bound leaves a slow machine room.
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "woken by the watch"
    );
    assert!(permit.fencing_token() > lease.czxid as u64);
    assert!(permit.handle().key.starts_with("/edgelock/s/leases/"));
    assert_curator_name(&permit.handle().key, "lease-");
    let leases = curator.children("/edgelock/s/leases").unwrap().unwrap();
    assert_eq!(
        leases,
        vec![permit.handle().key.rsplit('/').next().unwrap()]
    );
    let (czxid, _) = curator.stat(&permit.handle().key).unwrap().unwrap();
    assert_eq!(czxid as u64, permit.fencing_token());
    assert!(curator
        .children("/edgelock/s/locks")
        .unwrap()
        .unwrap_or_default()
        .is_empty());

    // The reverse: edgelock holds, Curator's try fails, its wait completes
    // once edgelock releases.
    assert!(curator
        .sem_acquire("/edgelock/s", 1, 200)
        .unwrap()
        .is_none());
    let curator_waits = in_thread(curator, |p| p.sem_acquire("/edgelock/s", 1, 10_000));
    thread::sleep(Duration::from_millis(500));
    assert!(permit.release().unwrap());
    let (mut curator, got) = curator_waits.join().unwrap();
    let got = got
        .expect("curator acquire")
        .expect("curator gets the lease");
    assert_curator_name(&got.path, "lease-");

    // Two permits: Curator's lease and edgelock's, a second edgelock client
    // is turned away.
    let two = LockKind::Permits { limit: 2 };
    let other = client(&connect);
    curator.sem_release("/edgelock/s").unwrap();
    curator
        .sem_acquire("/edgelock/t", 2, 0)
        .unwrap()
        .expect("curator lease");
    let mine = ours
        .try_acquire_kind("t", two)
        .unwrap()
        .expect("the second lease");
    assert!(other.try_acquire_kind("t", two).unwrap().is_none());
    assert!(curator
        .sem_acquire("/edgelock/t", 2, 200)
        .unwrap()
        .is_none());
    assert!(mine.release().unwrap());
    curator.close().unwrap();
    ours.close().unwrap();
    other.close().unwrap();
}

#[test]
fn read_write_lock_interoperates_both_ways() {
    let zk = ZooKeeperServer::start().expect("zookeeper starts");
    let connect = zk.connect_string();
    let mut curator = CuratorPeer::start(&connect).expect("curator peer");
    let ours = client_with(&connect, &["rw"]);
    let path = "/edgelock/rw";

    // Curator's writer keeps edgelock's reader and writer out; a waiting
    // edgelock reader gets in once it releases.
    let w = curator
        .write_acquire(path, 0)
        .unwrap()
        .expect("curator writes");
    assert_curator_name(&w.path, "__WRIT__");
    assert!(ours
        .try_acquire_kind("rw", LockKind::Shared)
        .unwrap()
        .is_none());
    assert!(ours
        .try_acquire_kind("rw", LockKind::Exclusive)
        .unwrap()
        .is_none());
    let reader = spawn_on(&ours, |c| {
        c.acquire_kind("rw", LockKind::Shared, wait_for(10_000), None)
    });
    thread::sleep(Duration::from_millis(300));
    curator.write_release(path).unwrap();
    let read = reader.join().unwrap().expect("acquire").expect("reads");
    assert_curator_name(&read.handle().key, "__READ__");
    assert!(read.fencing_token() > w.czxid as u64);

    // Readers share across both; Curator's writer waits for edgelock's reader.
    let theirs = curator
        .read_acquire(path, 0)
        .unwrap()
        .expect("readers share");
    assert!(curator.write_acquire(path, 200).unwrap().is_none());
    curator.read_release(path).unwrap();
    let _ = theirs;
    let curator_writes = in_thread(curator, |p| p.write_acquire("/edgelock/rw", 10_000));
    thread::sleep(Duration::from_millis(500));
    assert!(read.release().unwrap());
    let (mut curator, got) = curator_writes.join().unwrap();
    got.expect("write acquire")
        .expect("curator writes after the reader");
    curator.write_release(path).unwrap();

    // edgelock's writer (an exclusive acquire of a read-write name) keeps
    // Curator's reader out until it releases.
    let writer = ours.try_acquire("rw").unwrap().expect("edgelock writes");
    assert_curator_name(&writer.handle().key, "__WRIT__");
    assert!(curator.read_acquire(path, 200).unwrap().is_none());
    let curator_reads = in_thread(curator, |p| p.read_acquire("/edgelock/rw", 10_000));
    thread::sleep(Duration::from_millis(500));
    assert!(writer.release().unwrap());
    let (curator, got) = curator_reads.join().unwrap();
    got.expect("read acquire")
        .expect("curator reads after the writer");
    curator.close().unwrap();
    ours.close().unwrap();
}

#[test]
fn leader_latch_interoperates_both_ways() {
    let zk = ZooKeeperServer::start().expect("zookeeper starts");
    let connect = zk.connect_string();
    let mut curator = CuratorPeer::start(&connect).expect("curator peer");
    let ours = client(&connect);
    let path = "/edgelock/e";

    // Curator leads: edgelock's leader() is Curator's id (its node's czxid
    // the token); a try campaign loses, a waiting one wins once Curator
    // closes its latch.
    curator.latch_start(path, "curator-1").unwrap();
    assert!(curator.latch_has(path, 5_000).unwrap());
    let node = curator.latch_node(path).unwrap().unwrap();
    assert_curator_name(&node.path, "latch-");
    let lead = ours.leader("e").unwrap().expect("a leader");
    assert_eq!(lead.value, "curator-1");
    assert_eq!(lead.fencing_token, node.czxid as u64);
    let try_once = AcquireOptions {
        wait: Wait::Try,
        ttl_ms: None,
    };
    let tried = ours.campaign("e", "edge-1", try_once, None);
    assert!(tried.unwrap().is_none());
    let campaign = spawn_on(&ours, |c| c.campaign("e", "edge-1", wait_for(10_000), None));
    thread::sleep(Duration::from_millis(300));
    curator.latch_close(path).unwrap();
    let leading: Lock = campaign.join().unwrap().expect("campaign").expect("leads");
    assert_curator_name(&leading.handle().key, "latch-");
    assert_eq!(leading.kind(), LockKind::Leader);

    // edgelock leads: Curator's getLeader().getId() is the campaign value,
    // then the proclaimed one (setData on edgelock's node).
    assert_eq!(
        curator.latch_leader(path).unwrap().as_deref(),
        Some("edge-1")
    );
    leading.proclaim("edge-2").unwrap();
    assert_eq!(
        curator.latch_leader(path).unwrap().as_deref(),
        Some("edge-2")
    );
    let lead = ours.leader("e").unwrap().unwrap();
    assert_eq!(lead.value, "edge-2");
    assert_eq!(lead.fencing_token, leading.fencing_token());
    curator.latch_start(path, "curator-2").unwrap();
    assert!(!curator.latch_has(path, 300).unwrap());

    // An observer sees the hand-over to Curator when edgelock resigns.
    let watcher = client(&connect);
    let observer = spawn_on(&watcher, move |c| {
        c.observe_change("e", Some(&lead), Wait::For(10_000), None)
    });
    thread::sleep(Duration::from_millis(300));
    assert!(leading.release().unwrap());
    assert!(curator.latch_has(path, 5_000).unwrap());
    let seen = observer
        .join()
        .unwrap()
        .expect("observe")
        .expect("a leader");
    assert_eq!(seen.value, "curator-2");
    assert_eq!(ours.leader("e").unwrap().unwrap().value, "curator-2");
    curator.close().unwrap();
    ours.close().unwrap();
    watcher.close().unwrap();
}

#[test]
fn multi_lock_interoperates_both_ways() {
    let zk = ZooKeeperServer::start().expect("zookeeper starts");
    let connect = zk.connect_string();
    let mut curator = CuratorPeer::start(&connect).expect("curator peer");
    let ours = client(&connect);
    let paths = ["/edgelock/a", "/edgelock/b"];
    assert!(curator.multi_acquire(&paths, 0).unwrap());
    let try_all = AcquireOptions {
        wait: Wait::Try,
        ttl_ms: None,
    };
    assert!(ours
        .acquire_all(&["a", "b"], try_all, None)
        .unwrap()
        .is_none());
    let waiter = spawn_on(&ours, |c| {
        c.acquire_all(&["b", "a"], wait_for(10_000), None)
    });
    thread::sleep(Duration::from_millis(300));
    curator.multi_release(&paths).unwrap();
    let locks = waiter.join().unwrap().expect("acquire_all").expect("both");
    assert_eq!(locks.len(), 2);
    for l in &locks {
        assert_curator_name(&l.handle().key, "lock-");
    }
    assert!(!curator.multi_acquire(&paths, 200).unwrap());
    let curator_waits = in_thread(curator, |p| {
        p.multi_acquire(&["/edgelock/a", "/edgelock/b"], 10_000)
    });
    thread::sleep(Duration::from_millis(500));
    for l in locks {
        assert!(l.release().unwrap());
    }
    let (mut curator, got) = curator_waits.join().unwrap();
    assert!(got.expect("multi acquire"), "curator gets both");
    assert!(ours.try_acquire("a").unwrap().is_none());
    curator.multi_release(&paths).unwrap();
    curator.close().unwrap();
    ours.close().unwrap();
}
