//! Elections on [`ZkMachine`]: `Leader`, `Observe` and `Proclaim` (a
//! campaign is an acquire of kind `Leader`; see
//! [`recipes::latch`](super::super::recipes::latch) for the nodes).

use super::{Owner, TimerKey, ZkMachine, BACKEND};
use crate::core::zookeeper::paths::lock_dir;
use crate::core::zookeeper::recipes::latch::{LeaderRead, ReadStep};
use crate::core::zookeeper::records::err;
use crate::core::zookeeper::session::{ZkError, ZkReply, ZkRequest};
use crate::core::{Leadership, LockError, LockId, LockKind, Millis, OpId, Outcome, Wait};

/// A leader read (`observe: false`) or an observe under way.
pub(super) struct Observing {
    name: String,
    read: LeaderRead,
    known: Option<Leadership>,
    /// Answers with the first state read (leader; observe with `Wait::Try`).
    at_once: bool,
    /// The state last read.
    current: Option<Leadership>,
    /// Paths whose watch events make it read again (while waiting).
    watching: Vec<String>,
}

/// A proclaim under way.
pub(super) struct Proclaiming {
    lock: LockId,
    name: String,
}

impl ZkMachine {
    pub(super) fn start_observe(
        &mut self,
        now: Millis,
        name: String,
        known: Option<Leadership>,
        wait: Wait,
        observe: bool,
    ) -> OpId {
        let op = self.rt.out.op_id();
        let mut read = LeaderRead::new(lock_dir(&self.root, &name), observe && wait != Wait::Try);
        if let Some(at) = wait.deadline(now).filter(|_| observe) {
            self.rt.timers.set(TimerKey::Deadline(op), at);
        }
        let step = read.start();
        let o = Observing {
            name,
            read,
            known: known.clone(),
            at_once: !observe || wait == Wait::Try,
            current: known,
            watching: Vec::new(),
        };
        self.observes.insert(op, o);
        self.observe_step(now, op, step);
        op
    }

    fn observe_step(&mut self, now: Millis, op: OpId, step: ReadStep) {
        let Some(o) = self.observes.get_mut(&op) else {
            return;
        };
        match step {
            ReadStep::Send(req) => self.submit(now, Owner::Leader { op }, req),
            ReadStep::Done(state) => {
                let (leader, path) = match state {
                    Some((l, path)) => (Some(l), Some(path)),
                    None => (None, None),
                };
                if o.at_once || leader != o.known {
                    return self.finish_observe(op, Ok(leader));
                }
                // Unchanged: wait for a watch event (or the deadline).
                o.current = leader;
                o.watching = std::iter::once(o.read.dir().to_string())
                    .chain(path)
                    .collect();
            }
            ReadStep::Fail(f) => {
                let name = o.name.clone();
                self.finish_observe(op, Err(f.into_lock_error(BACKEND, &name)));
            }
        }
    }

    fn finish_observe(&mut self, op: OpId, result: Result<Option<Leadership>, LockError>) {
        self.rt.timers.clear(TimerKey::Deadline(op));
        self.observes.remove(&op);
        self.rt.out.complete(op, result.map(Outcome::Leader));
    }

    pub(super) fn on_leader_answer(
        &mut self,
        now: Millis,
        op: OpId,
        result: Result<ZkReply, ZkError>,
    ) {
        if let Some(o) = self.observes.get_mut(&op) {
            let step = o.read.on_answer(result);
            self.observe_step(now, op, step);
        }
    }

    /// A watch fired on `path`: waiting observes of it read again.
    pub(super) fn observes_on_watch(&mut self, now: Millis, path: &str) {
        let ops: Vec<OpId> = self
            .observes
            .iter()
            .filter(|(_, o)| o.watching.iter().any(|w| w == path))
            .map(|(op, _)| *op)
            .collect();
        self.observes_read_again(now, ops);
    }

    /// The stream broke and came back: the watches are gone, read again.
    pub(super) fn observes_reconnected(&mut self, now: Millis) {
        let ops: Vec<OpId> = self
            .observes
            .iter()
            .filter(|(_, o)| !o.watching.is_empty())
            .map(|(op, _)| *op)
            .collect();
        self.observes_read_again(now, ops);
    }

    fn observes_read_again(&mut self, now: Millis, ops: Vec<OpId>) {
        for op in ops {
            if let Some(o) = self.observes.get_mut(&op) {
                o.watching.clear();
                let step = o.read.start();
                self.observe_step(now, op, step);
            }
        }
    }

    /// An observe's wait ran out: the state it knows (unchanged).
    pub(super) fn observe_deadline(&mut self, op: OpId) {
        if let Some(o) = self.observes.get(&op) {
            let current = o.current.clone();
            self.finish_observe(op, Ok(current));
        }
    }

    pub(super) fn close_observes(&mut self) {
        for (op, _) in self.observes.drain().collect::<Vec<_>>() {
            self.rt.timers.clear(TimerKey::Deadline(op));
            self.rt.out.fail(op, LockError::Closed { backend: BACKEND });
        }
    }

    /// `setData` on our own latch node: it exists only while this session
    /// holds it, and a held latch node is the first, so success means we
    /// lead (the token, the node's czxid, is unchanged).
    pub(super) fn start_proclaim(&mut self, now: Millis, lock: LockId, value: String) -> OpId {
        let op = self.rt.out.op_id();
        let held = self.held.get(&lock).filter(|h| !h.releasing);
        let Some(h) = held.filter(|h| h.kind == LockKind::Leader) else {
            let name = held.map(|h| h.name.clone()).unwrap_or_default();
            let error = match held {
                Some(_) => LockError::invalid("only a leadership can proclaim"),
                None => LockError::NotHeld {
                    backend: BACKEND,
                    name,
                },
            };
            self.rt.out.fail(op, error);
            return op;
        };
        let req = ZkRequest::SetData {
            path: h.path.clone(),
            data: value.into_bytes(),
            version: -1,
        };
        let name = h.name.clone();
        self.proclaims.insert(op, Proclaiming { lock, name });
        self.submit(now, Owner::Proclaim { op }, req);
        op
    }

    pub(super) fn on_proclaim_answer(&mut self, op: OpId, result: Result<ZkReply, ZkError>) {
        let Some(p) = self.proclaims.remove(&op) else {
            return;
        };
        let error = match result {
            Ok(_) => {
                let outcome = Outcome::Proclaimed { lock: p.lock };
                return self.rt.out.complete(op, Ok(outcome));
            }
            Err(ZkError::Server(err::NO_NODE) | ZkError::Expired) => {
                self.lose(p.lock, crate::core::LostReason::KeyGone);
                LockError::Lost {
                    backend: BACKEND,
                    name: p.name,
                    reason: "the leader's node is gone".into(),
                }
            }
            Err(e) => {
                let f = crate::core::zookeeper::recipes::Failure::from_error("setData", "", e);
                f.into_lock_error(BACKEND, &p.name)
            }
        };
        self.rt.out.fail(op, error);
    }
}
