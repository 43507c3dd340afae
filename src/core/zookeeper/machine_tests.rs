//! The machine against [`FakeZk`](super::fake::FakeZk), byte for byte: every
//! request the machines write is decoded and answered by the fake server.

mod recipes;

use super::fake::FakeZk;
use super::records::op;
use super::{ZkConfig, ZkMachine};
use crate::core::{
    AcquireOptions, Event, Input, LockError, LockInfo, LockKind, LockMachine, LockMachineExt,
    LostReason, Millis, OpId, Operation, Outcome, SeededEntropy, Transmit, Wait,
};

struct Net {
    zk: FakeZk,
    ms: Vec<ZkMachine>,
    events: Vec<Vec<Event>>,
    now: Millis,
    /// A frozen server: writes are swallowed.
    paused: bool,
}

impl Net {
    fn new(n: usize) -> Net {
        Net::with(n, |_| {})
    }

    /// `n` machines, each configuration changed by `tweak`.
    fn with(n: usize, tweak: impl Fn(&mut ZkConfig)) -> Net {
        let ms = (0..n)
            .map(|i| {
                let mut c = ZkConfig::new("127.0.0.1:2181");
                c.session_timeout_ms = 3_000;
                c.request_timeout_ms = 1_000;
                tweak(&mut c);
                ZkMachine::new(c, Box::new(SeededEntropy::new(i as u64 + 1))).unwrap()
            })
            .collect();
        Net {
            zk: FakeZk::new(),
            ms,
            events: vec![Vec::new(); n],
            now: 0,
            paused: false,
        }
    }

    /// Delivers what the machines send and the server answers until quiet.
    fn pump(&mut self) {
        loop {
            let mut inputs = Vec::new();
            for m in 0..self.ms.len() {
                while let Some(t) = self.ms[m].poll_transmit() {
                    match t {
                        Transmit::Open(o) => {
                            self.zk.open(m, o.id);
                            inputs.push((m, Input::Opened { id: o.id }));
                        }
                        Transmit::Write { id, data } if !self.paused => {
                            for (mm, s, data) in self.zk.write(m, id, &data.0) {
                                inputs.push((mm, Input::Chunk { id: s, data }));
                            }
                        }
                        Transmit::Write { .. } => {}
                        Transmit::Cancel(id) => self.zk.drop_stream(m, id),
                        Transmit::Send(r) => panic!("an HTTP request: {r:?}"),
                    }
                }
                while let Some(e) = self.ms[m].poll_event() {
                    self.events[m].push(e);
                }
            }
            for (m, s) in std::mem::take(&mut self.zk.closed) {
                inputs.push((m, Input::StreamEnd { id: s }));
            }
            if inputs.is_empty() {
                return;
            }
            for (m, input) in inputs {
                self.ms[m].handle_input(self.now, input);
            }
        }
    }

    /// Runs every timer up to `to`.
    fn advance(&mut self, to: Millis) {
        loop {
            self.pump();
            let next = self.ms.iter().filter_map(|m| m.poll_timeout()).min();
            match next {
                Some(at) if at <= to => {
                    self.now = self.now.max(at);
                    for m in &mut self.ms {
                        m.handle_timeout(self.now);
                    }
                }
                _ => break,
            }
        }
        self.now = to;
        self.pump();
    }

    fn start(&mut self, m: usize, op: Operation) -> OpId {
        let id = self.ms[m].start(self.now, op).unwrap();
        self.pump();
        id
    }

    fn acquire(&mut self, m: usize, name: &str, wait: Wait) -> OpId {
        let options = AcquireOptions { wait, ttl_ms: None };
        self.start(m, Operation::acquire(name, options))
    }

    fn result(&mut self, m: usize, op: OpId) -> Option<Result<Outcome, LockError>> {
        let i = self.events[m]
            .iter()
            .position(|e| matches!(e, Event::Completed { op: o, .. } if *o == op))?;
        match self.events[m].remove(i) {
            Event::Completed { result, .. } => Some(result),
            _ => unreachable!(),
        }
    }

    fn acquired(&mut self, m: usize, op: OpId) -> LockInfo {
        match self.result(m, op) {
            Some(Ok(Outcome::Acquired(info))) => info,
            other => panic!("machine {m}: {other:?}"),
        }
    }

    fn lost(&mut self, m: usize) -> Vec<LostReason> {
        self.events[m]
            .iter()
            .filter_map(|e| match e {
                Event::Lost { reason, .. } => Some(reason.clone()),
                _ => None,
            })
            .collect()
    }
}

/// A first acquire creates the container parents on NONODE, then takes the
/// lock in one round trip: create2 and getChildren in one write.
#[test]
fn an_uncontended_acquire_is_curators_node_and_its_czxid() {
    let mut net = Net::new(1);
    let op = net.acquire(0, "orders", Wait::Forever);
    let info = net.acquired(0, op);
    let kids = net.zk.children("/edgelock/orders");
    assert_eq!(kids.len(), 1);
    let node = &kids[0];
    assert!(
        node.starts_with("_c_") && node.ends_with("-lock-0000000000"),
        "{node}"
    );
    assert_eq!(node.len(), 40 + 5 + 10);
    let stat = net.zk.nodes[&format!("/edgelock/orders/{node}")].stat;
    assert_eq!(info.fencing_token, stat.czxid as u64);
    assert_eq!(info.handle.key, format!("/edgelock/orders/{node}"));
    let ops: Vec<i32> = net.zk.log.iter().map(|(_, o)| *o).collect();
    assert_eq!(
        ops[..6],
        [
            op::CREATE2,
            op::GET_CHILDREN2,
            op::CREATE_CONTAINER,
            op::CREATE_CONTAINER,
            op::CREATE2,
            op::GET_CHILDREN2
        ]
    );
    // The parents exist now: the next acquire is create2 + getChildren only.
    let r = net.start(0, Operation::Release { lock: info.id });
    assert!(matches!(
        net.result(0, r),
        Some(Ok(Outcome::Released {
            held_until_release: true,
            ..
        }))
    ));
    let before = net.zk.log.len();
    let again = net.acquire(0, "orders", Wait::Try);
    let second = net.acquired(0, again);
    assert!(second.fencing_token > info.fencing_token);
    let ops: Vec<i32> = net.zk.log[before..].iter().map(|(_, o)| *o).collect();
    assert_eq!(ops[..2], [op::CREATE2, op::GET_CHILDREN2]);
}

/// A waiter watches its predecessor and takes the lock when it goes, with a
/// higher token; a try meanwhile gets NotAcquired and leaves no node.
#[test]
fn a_waiter_is_woken_by_its_predecessors_delete() {
    let mut net = Net::new(3);
    let a = net.acquire(0, "n", Wait::Forever);
    let held = net.acquired(0, a);
    let b = net.acquire(1, "n", Wait::Forever);
    assert!(net.result(1, b).is_none());
    assert!(net
        .zk
        .log
        .iter()
        .any(|(m, o)| *m == 1 && *o == op::GET_DATA));
    let t = net.acquire(2, "n", Wait::Try);
    assert_eq!(net.result(2, t), Some(Ok(Outcome::NotAcquired)));
    assert_eq!(
        net.zk.children("/edgelock/n").len(),
        2,
        "the try's node is deleted"
    );
    net.start(0, Operation::Release { lock: held.id });
    let got = net.acquired(1, b);
    assert!(got.fencing_token > held.fencing_token);
}

/// A timed-out wait and a cancelled one each delete their node.
#[test]
fn timeout_and_cancel_delete_the_waiting_node() {
    let mut net = Net::new(3);
    let a = net.acquire(0, "n", Wait::Forever);
    net.acquired(0, a);
    let b = net.acquire(1, "n", Wait::For(500));
    let c = net.acquire(2, "n", Wait::Forever);
    assert_eq!(net.zk.children("/edgelock/n").len(), 3);
    net.ms[2].cancel(net.now, c);
    net.pump();
    assert!(matches!(
        net.result(2, c),
        Some(Err(LockError::Aborted { .. }))
    ));
    net.advance(600);
    assert!(matches!(
        net.result(1, b),
        Some(Err(LockError::Timeout { .. }))
    ));
    assert_eq!(net.zk.children("/edgelock/n").len(), 1);
}

/// The create is performed but its reply lost with the stream: after the
/// reconnect the machine finds its node by the protected prefix and holds
/// it, with its czxid, without creating a second node.
#[test]
fn a_lost_create_reply_is_found_by_its_protected_prefix() {
    let mut net = Net::new(1);
    // The directory exists (a first lock made it), so the create succeeds.
    let warm = net.acquire(0, "n", Wait::Try);
    let warm = net.acquired(0, warm);
    net.start(0, Operation::Release { lock: warm.id });
    net.zk.lose_reply_of = Some(op::CREATE2);
    let before = net.zk.log.len();
    let op_id = net.acquire(0, "n", Wait::Forever);
    net.advance(net.now + 10);
    let info = net.acquired(0, op_id);
    let kids = net.zk.children("/edgelock/n");
    assert_eq!(kids.len(), 1, "{kids:?}");
    let stat = net.zk.nodes[&format!("/edgelock/n/{}", kids[0])].stat;
    assert_eq!(info.fencing_token, stat.czxid as u64);
    assert!(
        net.lost(0).is_empty(),
        "the session lived on: {:?}",
        net.lost(0)
    );
    let ops: Vec<i32> = net.zk.log[before..].iter().map(|(_, o)| *o).collect();
    assert_eq!(
        ops.iter().filter(|o| **o == op::CREATE2).count(),
        1,
        "{ops:?}"
    );
    assert!(
        ops.contains(&op::EXISTS),
        "found by prefix, czxid read: {ops:?}"
    );
}

/// A frozen server: past the session bound every held lock is lost
/// (Expired), even though no server said so.
#[test]
fn an_unconfirmed_session_loses_its_locks_at_the_bound() {
    let mut net = Net::new(1);
    let a = net.acquire(0, "n", Wait::Forever);
    let info = net.acquired(0, a);
    assert_eq!(info.expires_at, 3_000);
    net.advance(2_000);
    assert!(net.lost(0).is_empty());
    net.paused = true;
    net.advance(10_000);
    assert_eq!(net.lost(0), vec![LostReason::Expired]);
}

/// The holder's node deleted by someone else: the lock is lost (KeyGone).
#[test]
fn a_deleted_node_loses_the_lock() {
    let mut net = Net::new(1);
    let a = net.acquire(0, "n", Wait::Forever);
    let info = net.acquired(0, a);
    for (m, s, data) in net.zk.remove(&info.handle.key) {
        net.ms[m].handle_input(net.now, Input::Chunk { id: s, data });
    }
    net.pump();
    assert_eq!(net.lost(0), vec![LostReason::KeyGone]);
    assert_eq!(net.ms[0].live_count(), 0);
}

/// The server expired the session while the stream was down: the reconnect
/// learns it (timeOut 0) and the lock is lost; a later acquire works in a
/// new session.
#[test]
fn a_session_expired_on_the_server_is_learnt_at_reconnect() {
    let mut net = Net::new(1);
    let a = net.acquire(0, "n", Wait::Forever);
    net.acquired(0, a);
    let session = net.zk.session_of(0).unwrap();
    let stream = net.zk.stream_of(0).unwrap();
    net.zk.drop_stream(0, stream);
    net.zk.expire(session, &mut Vec::new());
    net.ms[0].handle_input(net.now, Input::StreamEnd { id: stream });
    net.pump();
    assert_eq!(net.lost(0), vec![LostReason::Expired]);
    let b = net.acquire(0, "n", Wait::Try);
    net.acquired(0, b);
    assert_ne!(net.zk.session_of(0), Some(session));
}

/// Extend answers from the session without I/O; a leadership asked for by
/// an acquire (not a campaign) is refused before anything is sent.
#[test]
fn extend_without_io_and_a_leader_acquire_refused_up_front() {
    let mut net = Net::new(1);
    let a = net.acquire(0, "n", Wait::Forever);
    let info = net.acquired(0, a);
    let before = net.zk.log.len();
    let e = net.ms[0].extend(net.now, info.id, None).unwrap();
    net.pump();
    assert!(matches!(
        net.result(0, e),
        Some(Ok(Outcome::Extended { .. }))
    ));
    assert_eq!(net.zk.log.len(), before);
    let op = Operation::Acquire {
        name: "n".into(),
        kind: LockKind::Leader,
        options: AcquireOptions::default(),
    };
    let err = net.ms[0].start(net.now, op).unwrap_err();
    assert_eq!(err.code(), "INVALID_ARGUMENT");
    assert!(err.to_string().contains("campaign"), "{err}");
    assert!(net.ms[0].poll_transmit().is_none());
}

/// Inspect: the first node holds (its czxid the token), the rest queue.
#[test]
fn inspect_lists_holder_token_and_waiters() {
    let mut net = Net::new(2);
    let i = net.ms[0].inspect(net.now, "n").unwrap();
    net.pump();
    match net.result(0, i) {
        Some(Ok(Outcome::Inspected(s))) => assert!(!s.held),
        other => panic!("{other:?}"),
    }
    let a = net.acquire(0, "n", Wait::Forever);
    let info = net.acquired(0, a);
    net.acquire(1, "n", Wait::Forever);
    let i = net.ms[1].inspect(net.now, "n").unwrap();
    net.pump();
    let Some(Ok(Outcome::Inspected(s))) = net.result(1, i) else {
        panic!()
    };
    assert!(s.held);
    assert_eq!(s.fencing_token, Some(info.fencing_token));
    assert_eq!(s.holder.as_deref(), info.handle.key.rsplit('/').next());
    assert_eq!(s.waiters.len(), 1);
}

/// Close: closeSession, so the server drops the nodes at once; held locks
/// are reported lost (ClientClosed) and the close completes.
#[test]
fn close_ends_the_session_and_its_nodes() {
    let mut net = Net::new(1);
    let a = net.acquire(0, "n", Wait::Forever);
    net.acquired(0, a);
    let c = net.ms[0].close(net.now);
    net.pump();
    assert_eq!(net.result(0, c), Some(Ok(Outcome::Closed)));
    assert_eq!(net.lost(0), vec![LostReason::ClientClosed]);
    assert!(net.zk.children("/edgelock/n").is_empty());
    assert_eq!(net.ms[0].live_count(), 0);
}

/// Contenders queue in creation order: each release hands the lock to the
/// next one only, and tokens rise.
#[test]
fn contenders_are_served_in_order_one_at_a_time() {
    let mut net = Net::new(5);
    let ops: Vec<OpId> = (0..5).map(|m| net.acquire(m, "q", Wait::Forever)).collect();
    let mut last = 0;
    for (m, op) in ops.into_iter().enumerate() {
        let info = net.acquired(m, op);
        assert!(info.fencing_token > last);
        last = info.fencing_token;
        for other in m + 1..5 {
            assert!(net.events[other].is_empty(), "machine {other} woke early");
        }
        net.start(m, Operation::Release { lock: info.id });
    }
    assert!(net.zk.children("/edgelock/q").is_empty());
}
