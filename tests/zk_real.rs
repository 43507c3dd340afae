//! The ZooKeeper backend against a real ZooKeeper 3.8 (Debian's, started by
//! `edgelock_devtools::ZooKeeperServer` with tickTime 200: sessions of
//! 400 ms … 4 s), reached by the native client's byte streams; and against
//! Curator 5.4's `InterProcessMutex` in its own JVM (`CuratorPeer`), node for
//! node.
#![cfg(feature = "native")]

use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use edgelock::core::zookeeper::{ZkConfig, ZkMachine};
use edgelock::core::LostReason;
use edgelock::native::{Client, OsEntropy};
use edgelock_devtools::{CuratorPeer, ZooKeeperServer};

fn client(connect: &str, session_timeout_ms: u32) -> Client {
    let mut cfg = ZkConfig::new(connect);
    cfg.session_timeout_ms = session_timeout_ms;
    cfg.request_timeout_ms = 3_000;
    Client::from_machine(Box::new(
        ZkMachine::new(cfg, Box::new(OsEntropy)).expect("config"),
    ))
}

/// Exclusion, try, a waiter woken by its predecessor's delete, tokens that
/// rise, inspect, and Curator's node names.
#[test]
fn exclusive_lock_excludes_wakes_the_waiter_and_tokens_rise() {
    let zk = ZooKeeperServer::start().expect("zookeeper starts");
    let connect = zk.connect_string();
    let a = client(&connect, 4_000);
    let b = client(&connect, 4_000);
    let first = a.acquire("job", None).expect("acquire");
    let node = first.handle().key.clone();
    let name = node.rsplit('/').next().unwrap();
    assert!(node.starts_with("/edgelock/job/_c_"), "{node}");
    assert!(
        name.ends_with("lock-0000000000") && name.len() == 55,
        "{name}"
    );
    assert!(b.try_acquire("job").expect("try").is_none());
    let status = b.inspect("job").expect("inspect");
    assert!(status.held, "{status:?}");
    assert_eq!(status.fencing_token, Some(first.fencing_token()));
    let first_token = first.fencing_token();
    let waiter = thread::spawn(move || {
        let lock = b.acquire("job", Some(Duration::from_secs(10)));
        (b, lock)
    });
    thread::sleep(Duration::from_millis(300));
    first
        .extend(None)
        .expect("extend: the session is the lease");
    let started = Instant::now();
    assert!(first.release().expect("release"));
    let (b, second) = waiter.join().unwrap();
    let second = second.expect("the waiter gets the lock");
    // A ZooKeeper waiter has no timer to fall back on: only the watch wakes
    // it, within its 10 s wait. The bound leaves a slow machine room.
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "woken by the watch, not a timer"
    );
    assert!(second.fencing_token() > first_token);
    assert!(second.release().expect("release"));
    let timed = a.acquire("other", None).expect("acquire other");
    let Err(err) = b.acquire("other", Some(Duration::from_millis(300))) else {
        panic!("the second acquire must time out");
    };
    assert_eq!(err.code(), "TIMEOUT");
    assert!(timed.release().unwrap());
    a.close().unwrap();
    b.close().unwrap();
}

/// Curator and edgelock exclude each other on the same path, both ways; a
/// killed Curator holder's session expires and frees the lock for an
/// edgelock waiter; closing an edgelock client frees its lock at once.
#[test]
fn curator_and_edgelock_exclude_each_other_and_a_dead_holder_expires() {
    let zk = ZooKeeperServer::start().expect("zookeeper starts");
    let connect = zk.connect_string();
    let mut curator = CuratorPeer::start(&connect).expect("curator peer");
    let ours = client(&connect, 2_000);
    let held = curator
        .mutex_acquire("/edgelock/orders", 0)
        .expect("curator acquire")
        .expect("curator holds");
    assert!(ours.try_acquire("orders").expect("try").is_none());
    let status = ours.inspect("orders").expect("inspect");
    assert_eq!(status.fencing_token, Some(held.czxid as u64));
    assert_eq!(status.holder.as_deref(), Some(held.name()));
    curator.mutex_release("/edgelock/orders").expect("release");
    let lock = ours
        .acquire("orders", Some(Duration::from_secs(5)))
        .expect("edgelock acquires");
    assert!(lock.fencing_token() > held.czxid as u64);
    let blocked = curator
        .mutex_acquire("/edgelock/orders", 200)
        .expect("curator try");
    assert!(blocked.is_none(), "Curator must see edgelock's node");
    assert!(lock.release().unwrap());

    // A Curator holder killed with SIGKILL: its session expires (at most
    // 20 ticks = 4 s), its node goes, the edgelock waiter gets the lock.
    curator
        .mutex_acquire("/edgelock/orders", 0)
        .expect("curator acquire")
        .expect("curator holds again");
    let status = Command::new("kill")
        .args(["-9", &curator.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let started = Instant::now();
    let after = ours
        .acquire("orders", Some(Duration::from_secs(15)))
        .expect("the dead holder's session expires");
    assert!(started.elapsed() < Duration::from_secs(12));
    assert!(after.lost_reason().is_none());
    drop(curator);

    // Closing the client ends its session: the node is gone at once.
    let other = client(&connect, 4_000);
    ours.close().unwrap();
    assert_eq!(
        after.wait_lost(Some(Duration::from_secs(1))),
        Some(LostReason::ClientClosed)
    );
    let started = Instant::now();
    let next = other
        .acquire("orders", Some(Duration::from_secs(3)))
        .expect("freed by closeSession");
    // Freed by closeSession, not by the session's expiry (4 s after close).
    assert!(started.elapsed() < Duration::from_millis(3_500));
    assert!(next.release().unwrap());
    other.close().unwrap();
}

/// A paused server (SIGSTOP) past the session timeout: the holder's lock is
/// reported lost (the local bound), and after the server resumes another
/// client takes the lock with a higher token.
#[test]
fn a_frozen_server_loses_the_lock_at_the_session_bound() {
    let zk = ZooKeeperServer::start().expect("zookeeper starts");
    let connect = zk.connect_string();
    let holder = client(&connect, 1_000);
    let lock = holder.acquire("frozen", None).expect("acquire");
    let token = lock.fencing_token();
    zk.pause().expect("SIGSTOP");
    let reason = lock.wait_lost(Some(Duration::from_secs(5)));
    zk.resume().expect("SIGCONT");
    assert_eq!(reason, Some(LostReason::Expired));
    let other = client(&connect, 4_000);
    let next = other
        .acquire("frozen", Some(Duration::from_secs(10)))
        .expect("the expired session's node goes");
    assert!(next.fencing_token() > token);
    assert!(next.release().unwrap());
    holder.close().unwrap();
    other.close().unwrap();
}

/// A chroot: the client's paths live under it (`/ch/edgelock/<name>` for
/// `host/ch`), and a client without it sees the same nodes there; a missing
/// chroot is a clear error. Digest credentials are sent on every connection
/// (the server accepts any `user:password` for `digest`).
#[test]
fn chroot_and_digest() {
    let zk = ZooKeeperServer::start().expect("zookeeper starts");
    let connect = zk.connect_string();
    let mut plain_cfg = ZkConfig::new(connect.as_str());
    plain_cfg.root = "/ch/edgelock".into();
    let plain = Client::from_machine(Box::new(
        ZkMachine::new(plain_cfg, Box::new(OsEntropy)).unwrap(),
    ));
    let held = plain.acquire("a", None).expect("acquire without chroot");
    assert!(held.handle().key.starts_with("/ch/edgelock/a/_c_"));
    let mut cfg = ZkConfig::new(format!("{connect}/ch"));
    cfg.digest = Some(edgelock::core::zookeeper::ZkDigest {
        user: "locker".into(),
        password: "s3cret-pw".into(),
    });
    let chrooted =
        Client::from_machine(Box::new(ZkMachine::new(cfg, Box::new(OsEntropy)).unwrap()));
    assert!(chrooted.try_acquire("a").expect("try").is_none());
    let status = chrooted.inspect("a").expect("inspect");
    assert_eq!(status.fencing_token, Some(held.fencing_token()));
    assert!(held.release().unwrap());
    let ours = chrooted.try_acquire("a").expect("try").expect("free now");
    assert!(
        ours.handle().key.starts_with("/edgelock/a/_c_"),
        "chroot stripped: {}",
        ours.handle().key
    );
    assert!(ours.release().unwrap());

    let missing = client(&format!("{connect}/no/such/chroot"), 4_000);
    let Err(e) = missing.try_acquire("a") else {
        panic!("a missing chroot must fail");
    };
    assert_eq!(e.code(), "BACKEND");
    assert!(e.to_string().contains("chroot"), "{e}");
    for c in [plain, chrooted, missing] {
        c.close().unwrap();
    }
}

/// A lock held for several session timeouts stays held: the pings keep the
/// session (the lease) alive, and `extend` answers from it.
#[test]
fn a_lock_outlives_many_session_timeouts_while_the_session_pings() {
    let zk = ZooKeeperServer::start().expect("zookeeper starts");
    let c = client(&zk.connect_string(), 1_000);
    let lock = c.acquire("long", None).expect("acquire");
    thread::sleep(Duration::from_millis(3_500));
    assert_eq!(lock.lost_reason(), None);
    lock.extend(None).expect("extend");
    assert!(
        lock.expires_in() > Duration::from_millis(300),
        "{:?}",
        lock.expires_in()
    );
    assert!(lock.release().expect("release"), "still ours at release");
    c.close().unwrap();
}
