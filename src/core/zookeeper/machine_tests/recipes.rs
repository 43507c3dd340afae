//! Curator's other recipes against the fake server: the semaphore, the
//! read-write lock and the leader latch, node for node.

use super::Net;
use crate::core::zookeeper::paths::marker_of;
use crate::core::{
    AcquireOptions, Leadership, LockError, LockInfo, LockKind, LockMachine, OpId, Operation,
    Outcome, Wait,
};

fn acquire_kind(net: &mut Net, m: usize, name: &str, kind: LockKind, wait: Wait) -> OpId {
    let options = AcquireOptions { wait, ttl_ms: None };
    let op = Operation::Acquire {
        name: name.into(),
        kind,
        options,
    };
    net.start(m, op)
}

fn campaign(net: &mut Net, m: usize, name: &str, value: &str, wait: Wait) -> OpId {
    let options = AcquireOptions { wait, ttl_ms: None };
    let op = Operation::Campaign {
        name: name.into(),
        value: value.into(),
        options,
    };
    net.start(m, op)
}

fn release(net: &mut Net, m: usize, info: &LockInfo) {
    let r = net.start(m, Operation::Release { lock: info.id });
    assert!(
        matches!(net.result(m, r), Some(Ok(Outcome::Released { .. }))),
        "release"
    );
}

fn leader(net: &mut Net, m: usize, name: &str) -> Option<Leadership> {
    let op = net.start(m, Operation::Leader { name: name.into() });
    match net.result(m, op) {
        Some(Ok(Outcome::Leader(l))) => l,
        other => panic!("{other:?}"),
    }
}

fn markers(net: &Net, dir: &str) -> Vec<&'static str> {
    let mut kids = net.zk.children(dir);
    kids.sort_by(|a, b| a[a.len() - 10..].cmp(&b[b.len() - 10..]));
    kids.iter().map(|k| marker_of(k).unwrap()).collect()
}

/// Two permits: two holders at once, each a lease node under `leases`
/// (its czxid the token) whose guard mutex under `locks` is gone once held;
/// the third waits (its guard held, watching the leases' children) and is
/// woken by a release; a try on the full semaphore leaves no node.
#[test]
fn a_semaphore_admits_its_limit_and_wakes_a_waiter_on_release() {
    let mut net = Net::new(4);
    let two = LockKind::Permits { limit: 2 };
    let a = acquire_kind(&mut net, 0, "s", two, Wait::Forever);
    let a = net.acquired(0, a);
    let b = acquire_kind(&mut net, 1, "s", two, Wait::Forever);
    let b = net.acquired(1, b);
    assert_eq!(a.handle.kind, two);
    assert!(
        a.handle.key.starts_with("/edgelock/s/leases/_c_"),
        "{}",
        a.handle.key
    );
    assert!(
        a.handle.key.ends_with("-lease-0000000000"),
        "{}",
        a.handle.key
    );
    let stat = net.zk.nodes[&a.handle.key].stat;
    assert_eq!(a.fencing_token, stat.czxid as u64);
    assert!(net.zk.children("/edgelock/s/locks").is_empty());
    assert_eq!(net.zk.children("/edgelock/s/leases").len(), 2);
    assert_ne!(a.handle.slot, b.handle.slot);

    let c = acquire_kind(&mut net, 2, "s", two, Wait::Forever);
    assert!(net.result(2, c).is_none());
    assert_eq!(
        net.zk.children("/edgelock/s/locks").len(),
        1,
        "the waiter's guard"
    );
    let t = acquire_kind(&mut net, 3, "s", two, Wait::Try);
    assert_eq!(net.result(3, t), Some(Ok(Outcome::NotAcquired)));
    assert_eq!(net.zk.children("/edgelock/s/leases").len(), 3);

    release(&mut net, 0, &a);
    let c = net.acquired(2, c);
    assert!(c.fencing_token > b.fencing_token);
    assert!(net.zk.children("/edgelock/s/locks").is_empty());
    assert_eq!(net.zk.children("/edgelock/s/leases").len(), 2);
}

/// A semaphore waiter that times out deletes its lease and its guard.
#[test]
fn a_timed_out_semaphore_waiter_deletes_both_its_nodes() {
    let mut net = Net::new(2);
    let one = LockKind::Permits { limit: 1 };
    let a = acquire_kind(&mut net, 0, "s", one, Wait::Forever);
    net.acquired(0, a);
    let b = acquire_kind(&mut net, 1, "s", one, Wait::For(500));
    net.advance(600);
    assert!(matches!(
        net.result(1, b),
        Some(Err(LockError::Timeout { .. }))
    ));
    assert!(net.zk.children("/edgelock/s/locks").is_empty());
    assert_eq!(net.zk.children("/edgelock/s/leases").len(), 1);
}

/// Readers share; an exclusive acquire of a name configured read-write is
/// a `__WRIT__` node that waits for the readers before it, and a reader
/// after it waits for it (Curator's reader watches the first writer).
#[test]
fn readers_share_and_a_writer_on_a_read_write_name_excludes_them() {
    let mut net = Net::with(3, |c| c.read_write_names = vec!["rw".into()]);
    let r0 = acquire_kind(&mut net, 0, "rw", LockKind::Shared, Wait::Forever);
    let r0 = net.acquired(0, r0);
    let r1 = acquire_kind(&mut net, 1, "rw", LockKind::Shared, Wait::Forever);
    let r1 = net.acquired(1, r1);
    assert!(r0.handle.key.contains("-__READ__"), "{}", r0.handle.key);
    let w = acquire_kind(&mut net, 2, "rw", LockKind::Exclusive, Wait::Forever);
    assert!(net.result(2, w).is_none());
    let late = acquire_kind(&mut net, 0, "rw", LockKind::Shared, Wait::Forever);
    assert!(
        net.result(0, late).is_none(),
        "a reader after a writer waits"
    );
    assert_eq!(
        markers(&net, "/edgelock/rw"),
        ["__READ__", "__READ__", "__WRIT__", "__READ__"]
    );
    release(&mut net, 0, &r0);
    assert!(net.result(2, w).is_none(), "one reader left");
    release(&mut net, 1, &r1);
    let w = net.acquired(2, w);
    assert!(w.handle.key.contains("-__WRIT__"));
    assert!(net.result(0, late).is_none());
    release(&mut net, 2, &w);
    net.acquired(0, late);
}

/// Among edgelock clients a plain exclusive lock and a reader on one name
/// exclude each other (every contender node orders by its sequence).
#[test]
fn a_mutex_and_a_reader_on_one_name_exclude_each_other() {
    let mut net = Net::new(2);
    let x = acquire_kind(&mut net, 0, "m", LockKind::Exclusive, Wait::Forever);
    let x = net.acquired(0, x);
    let r = acquire_kind(&mut net, 1, "m", LockKind::Shared, Wait::Try);
    assert_eq!(net.result(1, r), Some(Ok(Outcome::NotAcquired)));
    let r = acquire_kind(&mut net, 1, "m", LockKind::Shared, Wait::Forever);
    assert!(net.result(1, r).is_none());
    release(&mut net, 0, &x);
    let r = net.acquired(1, r);
    let t = acquire_kind(&mut net, 0, "m", LockKind::Exclusive, Wait::Try);
    assert_eq!(net.result(0, t), Some(Ok(Outcome::NotAcquired)));
    release(&mut net, 1, &r);
}

/// A campaign is a `latch-` node whose data is the value; leader reads the
/// first one's data; a proclaim rewrites it (the token stays) and wakes an
/// observer; resigning hands the lead to the next campaign.
#[test]
fn a_campaign_is_a_latch_node_and_proclaim_rewrites_its_data() {
    let mut net = Net::new(3);
    assert_eq!(leader(&mut net, 2, "e"), None);
    let a = campaign(&mut net, 0, "e", "node-a", Wait::Forever);
    let a = net.acquired(0, a);
    assert_eq!(a.handle.kind, LockKind::Leader);
    assert!(
        a.handle.key.ends_with("-latch-0000000000"),
        "{}",
        a.handle.key
    );
    assert_eq!(net.zk.nodes[&a.handle.key].data, b"node-a");
    let b = campaign(&mut net, 1, "e", "node-b", Wait::Forever);
    assert!(net.result(1, b).is_none());
    let t = campaign(&mut net, 2, "e", "node-c", Wait::Try);
    assert_eq!(net.result(2, t), Some(Ok(Outcome::NotAcquired)));
    let known = Leadership {
        value: "node-a".into(),
        fencing_token: a.fencing_token,
    };
    assert_eq!(leader(&mut net, 2, "e"), Some(known.clone()));

    let observe = Operation::Observe {
        name: "e".into(),
        known: Some(known),
        wait: Wait::Forever,
    };
    let o = net.start(2, observe);
    assert!(net.result(2, o).is_none());
    let p = net.start(
        0,
        Operation::Proclaim {
            lock: a.id,
            value: "node-a2".into(),
        },
    );
    assert!(matches!(
        net.result(0, p),
        Some(Ok(Outcome::Proclaimed { .. }))
    ));
    let changed = Some(Leadership {
        value: "node-a2".into(),
        fencing_token: a.fencing_token,
    });
    assert_eq!(net.result(2, o), Some(Ok(Outcome::Leader(changed.clone()))));

    let o = net.start(
        2,
        Operation::Observe {
            name: "e".into(),
            known: changed,
            wait: Wait::Forever,
        },
    );
    release(&mut net, 0, &a);
    let b = net.acquired(1, b);
    let now_b = Some(Leadership {
        value: "node-b".into(),
        fencing_token: b.fencing_token,
    });
    assert_eq!(net.result(2, o), Some(Ok(Outcome::Leader(now_b.clone()))));
    assert_eq!(leader(&mut net, 2, "e"), now_b);
}

/// An observe of an election nobody ever campaigned in (no directory)
/// sees the first campaign; one that waits out its bound answers the
/// unchanged state.
#[test]
fn observe_sees_the_first_campaign_and_times_out_unchanged() {
    let mut net = Net::new(2);
    let o = net.start(
        1,
        Operation::Observe {
            name: "new".into(),
            known: None,
            wait: Wait::Forever,
        },
    );
    assert!(net.result(1, o).is_none());
    let a = campaign(&mut net, 0, "new", "first", Wait::Forever);
    let a = net.acquired(0, a);
    match net.result(1, o) {
        Some(Ok(Outcome::Leader(Some(l)))) => {
            assert_eq!(l.value, "first");
            assert_eq!(l.fencing_token, a.fencing_token);
        }
        other => panic!("{other:?}"),
    }
    let known = leader(&mut net, 1, "new");
    let o = net.start(
        1,
        Operation::Observe {
            name: "new".into(),
            known: known.clone(),
            wait: Wait::For(300),
        },
    );
    net.advance(net.now + 400);
    assert_eq!(net.result(1, o), Some(Ok(Outcome::Leader(known))));
}

fn inspect(net: &mut Net, m: usize, name: &str) -> crate::core::LockStatus {
    let i = net.start(m, Operation::Inspect { name: name.into() });
    match net.result(m, i) {
        Some(Ok(Outcome::Inspected(s))) => s,
        other => panic!("{other:?}"),
    }
}

/// Inspect names every reader before the first writer as a holder, and
/// every lease of a semaphore.
#[test]
fn inspect_reports_shared_holders_and_leases() {
    let mut net = Net::with(3, |c| c.read_write_names = vec!["rw".into()]);
    let r0 = acquire_kind(&mut net, 0, "rw", LockKind::Shared, Wait::Forever);
    let r0 = net.acquired(0, r0);
    let r1 = acquire_kind(&mut net, 1, "rw", LockKind::Shared, Wait::Forever);
    net.acquired(1, r1);
    acquire_kind(&mut net, 2, "rw", LockKind::Exclusive, Wait::Forever);
    let s = inspect(&mut net, 2, "rw");
    assert!(s.held);
    assert_eq!(s.holders.len(), 2);
    assert!(s.holders.iter().all(|h| h.kind == LockKind::Shared));
    assert_eq!(s.holders[0].fencing_token, Some(r0.fencing_token));
    assert_eq!(s.queued.len(), 1);
    assert_eq!(s.queued[0].kind, LockKind::Exclusive);

    let two = LockKind::Permits { limit: 2 };
    let a = acquire_kind(&mut net, 0, "s", two, Wait::Forever);
    net.acquired(0, a);
    let b = acquire_kind(&mut net, 1, "s", two, Wait::Forever);
    net.acquired(1, b);
    let s = inspect(&mut net, 2, "s");
    assert!(s.held);
    assert_eq!(s.holders.len(), 2);
    assert_eq!(s.holders[0].kind, two);
    assert!(!inspect(&mut net, 2, "nothing").held);
}

/// The lease's create is performed but its reply lost with the stream:
/// after the reconnect the lease is found by its protected prefix and held
/// (no second lease), and the guard is gone.
#[test]
fn a_lost_lease_create_reply_is_found_by_its_prefix() {
    let mut net = Net::new(1);
    let one = LockKind::Permits { limit: 1 };
    let warm = acquire_kind(&mut net, 0, "s", one, Wait::Try);
    let warm = net.acquired(0, warm);
    release(&mut net, 0, &warm);
    // The guard's create goes through, the lease's reply is lost.
    net.zk.lose_reply_of = Some(crate::core::zookeeper::records::op::CREATE2);
    net.zk.lose_after = 1;
    let before = net.zk.log.len();
    let a = acquire_kind(&mut net, 0, "s", one, Wait::Forever);
    net.advance(net.now + 10);
    let a = net.acquired(0, a);
    assert_eq!(net.zk.lose_reply_of, None, "a reply was lost");
    let creates = net.zk.log[before..]
        .iter()
        .filter(|(_, o)| *o == crate::core::zookeeper::records::op::CREATE2)
        .count();
    assert_eq!(creates, 2, "the guard and one lease");
    let leases = net.zk.children("/edgelock/s/leases");
    assert_eq!(leases.len(), 1, "{leases:?}");
    assert!(a.handle.key.ends_with(&leases[0]));
    assert_eq!(
        net.zk.nodes[&a.handle.key].stat.czxid as u64,
        a.fencing_token
    );
    assert!(net.zk.children("/edgelock/s/locks").is_empty());
}

/// A cancelled semaphore waiter deletes its guard and its lease.
#[test]
fn a_cancelled_semaphore_waiter_leaves_no_node() {
    let mut net = Net::new(2);
    let one = LockKind::Permits { limit: 1 };
    let a = acquire_kind(&mut net, 0, "s", one, Wait::Forever);
    net.acquired(0, a);
    let b = acquire_kind(&mut net, 1, "s", one, Wait::Forever);
    assert_eq!(net.zk.children("/edgelock/s/leases").len(), 2);
    net.ms[1].cancel(net.now, b);
    net.pump();
    assert!(matches!(
        net.result(1, b),
        Some(Err(LockError::Aborted { .. }))
    ));
    assert!(net.zk.children("/edgelock/s/locks").is_empty());
    assert_eq!(net.zk.children("/edgelock/s/leases").len(), 1);
    assert_eq!(net.ms[1].live_count(), 0);
}
