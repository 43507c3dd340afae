//! How the machine reaches an acquire between its answers: each entry takes
//! the state (and its request in flight) out of the op table, lets it take
//! a step by value, and does what the step returns (see `operations.rs`
//! `follow`). Also the watch stream's bookkeeping, which only arms timers.

use super::super::super::{
    EtcdMachine, Pending, Purpose, BACKEND, MAX_RESTARTS, WATCH_REFRESH_MS, WATCH_RETRY_MS,
};
use super::super::{Next, Op, OpKind};
use super::{AcqPhase, Acquire, Ending};
use crate::core::etcd::gateway as gw;
use crate::core::{jitter, LockError, Millis, OpId, Outcome, RequestId};

impl EtcdMachine {
    pub(in crate::core::etcd::machine) fn acquire_mut(&mut self, op: OpId) -> Option<&mut Acquire> {
        match self.ops.get_mut(&op).map(|o| &mut o.kind) {
            Some(OpKind::Acquire(a)) => Some(a),
            _ => None,
        }
    }

    /// Takes acquire `op` (with its request in flight) out of the table,
    /// steps it with `f`, and follows what the step returns. Nothing if
    /// `op` is no acquire (any more).
    fn with_acquire(
        &mut self,
        now: Millis,
        op: OpId,
        f: impl FnOnce(Acquire, &mut EtcdMachine, Option<RequestId>) -> Next,
    ) {
        if !matches!(
            self.ops.get(&op),
            Some(Op {
                kind: OpKind::Acquire(_),
                ..
            })
        ) {
            return;
        }
        let Some(Op {
            req,
            kind: OpKind::Acquire(a),
        }) = self.ops.remove(&op)
        else {
            return;
        };
        let next = f(a, self, req);
        self.follow(now, op, next);
    }

    /// Advances an acquire that is in NeedLease: sends its txn once a lease
    /// exists. The state stays in the table while the lease is looked at
    /// (a lease an acquire is on counts as in use).
    pub(in crate::core::etcd::machine) fn acquire_step(&mut self, now: Millis, op: OpId) {
        match self.acquire_mut(op) {
            Some(a) if a.phase == AcqPhase::NeedLease => {}
            _ => return,
        }
        let Some(lease) = self.usable_session_lease(now) else {
            return;
        };
        self.with_acquire(now, op, |a, m, _| a.put_key(m, op, lease));
    }

    /// Acquire `op` leaves the local queue (its name is free here, or it
    /// needs no claim): it waits for the session lease, and sends its txn
    /// at once if the lease can carry a key.
    pub(in crate::core::etcd::machine) fn unqueue_acquire(&mut self, now: Millis, op: OpId) {
        self.with_acquire(now, op, |mut a, _, _| {
            a.phase = AcqPhase::NeedLease;
            Next::AwaitLease(Box::new(a.into()))
        });
    }

    /// The acquire's wait bound passed (`TimerKey::AcquireDeadline`): it
    /// times out, removing its key first if it may have one.
    pub(in crate::core::etcd::machine) fn on_acquire_deadline(&mut self, now: Millis, op: OpId) {
        self.with_acquire(now, op, |a, m, req| {
            if a.phase == AcqPhase::Cleanup || a.ending.is_some() {
                return Next::keep(a, req);
            }
            let ending = Ending::Error(LockError::Timeout {
                backend: BACKEND,
                name: a.name.clone(),
            });
            if a.phase == AcqPhase::LocalQueue {
                a.finish(m, now, op, req, ending)
            } else {
                a.cleanup(m, now, op, req, ending)
            }
        });
    }

    /// A waiter's re-check is due (`TimerKey::Recheck`).
    pub(in crate::core::etcd::machine) fn on_recheck(&mut self, now: Millis, op: OpId) {
        self.with_acquire(now, op, |a, m, mut req| {
            if a.phase == AcqPhase::Cleanup || a.ending.is_some() {
                return Next::keep(a, req);
            }
            // A watch due for its refresh is replaced, not doubled.
            if a.phase == AcqPhase::Watch {
                m.cancel_request(req.take());
            }
            a.recheck(m, op)
        });
    }

    /// The caller cancelled acquire `op`.
    pub(in crate::core::etcd::machine) fn cancel_acquire(&mut self, now: Millis, op: OpId) {
        self.with_acquire(now, op, |a, m, req| {
            if a.phase == AcqPhase::Cleanup {
                return Next::keep(a, req);
            }
            let aborted = LockError::Aborted {
                backend: BACKEND,
                name: a.name.clone(),
            };
            a.cleanup(m, now, op, req, Ending::Error(aborted))
        });
    }

    /// Ends acquire `op` without a hold (it has no key: local queue, or
    /// waiting for the lease).
    pub(in crate::core::etcd::machine) fn finish_acquire(
        &mut self,
        now: Millis,
        op: OpId,
        ending: Ending,
    ) {
        self.with_acquire(now, op, |a, m, req| a.finish(m, now, op, req, ending));
    }

    /// `lease` is lost: every acquire on it that still wants a key starts
    /// over on a new lease, one cleaning up is done (its key died with the
    /// lease).
    pub(in crate::core::etcd::machine) fn acquires_on_lost_lease(
        &mut self,
        now: Millis,
        lease: i64,
    ) {
        let ops: Vec<OpId> = self.ops.keys().copied().collect();
        for op in ops {
            if matches!(self.acquire_mut(op), Some(a) if a.lease == Some(lease)) {
                self.with_acquire(now, op, |a, m, req| a.on_lease_lost(m, now, op, req));
            }
        }
    }

    /// Messages of a watch stream: an observe's, or a waiter's (which
    /// re-checks its predecessor when the watch says it went).
    pub(in crate::core::etcd::machine) fn on_watch_chunk(
        &mut self,
        now: Millis,
        id: RequestId,
        data: &[u8],
    ) {
        let Some(p) = self.rt.requests.owner_mut(id) else {
            return;
        };
        let Purpose::Op(op) = p.purpose else { return };
        let Some(splitter) = p.splitter.as_mut() else {
            return;
        };
        let messages = match splitter.push(data) {
            Ok(m) => m,
            Err(_) => return self.watch_broken(now, id, op),
        };
        if self.is_observe(op) {
            return self.on_observe_messages(now, id, op, messages);
        }
        // A semaphore's waiter re-checks on any event it watches for
        // (its predecessor's promotion is a PUT); a lock's on a delete.
        let any_event = matches!(self.acquire_mut(op), Some(a) if a.kind.wakes_on_any_event());
        for m in messages {
            match gw::parse_watch_message(&m) {
                Ok(w)
                    if w.canceled
                        || w.compact_revision > 0
                        || w.has_delete()
                        || (any_event && !w.events.is_empty()) =>
                {
                    // The predecessor went away (or the watch can't tell): re-check.
                    self.cancel_request(Some(id));
                    if let Some(o) = self.ops.get_mut(&op) {
                        o.req = None;
                    }
                    return self.with_acquire(now, op, |a, m, _| a.recheck(m, op));
                }
                Ok(w) if w.created => {
                    self.rt.requests.keep_open(id);
                    self.set_recheck(op, Some(now + WATCH_REFRESH_MS));
                }
                Ok(_) => {}
                Err(_) => return self.watch_broken(now, id, op),
            }
        }
    }

    /// A watch request (already taken out of the requests in flight) ended
    /// or failed: its waiter re-checks (see [`Self::watch_broken`]).
    pub(in crate::core::etcd::machine) fn stream_ended(
        &mut self,
        now: Millis,
        id: RequestId,
        p: Pending,
    ) {
        if let Purpose::Op(op) = p.purpose {
            self.recheck_later(now, id, op);
        }
    }

    /// The watch ended or failed: re-check after a short jittered pause.
    pub(in crate::core::etcd::machine) fn watch_broken(
        &mut self,
        now: Millis,
        id: RequestId,
        op: OpId,
    ) {
        self.cancel_request(Some(id));
        self.recheck_later(now, id, op);
    }

    fn recheck_later(&mut self, now: Millis, id: RequestId, op: OpId) {
        let delay = WATCH_RETRY_MS + jitter(self.entropy.as_mut(), WATCH_RETRY_MS);
        let observe = self.is_observe(op);
        if let Some(o) = self.ops.get_mut(&op) {
            if o.req == Some(id) {
                o.req = None;
            }
            if matches!(o.kind, OpKind::Acquire(_)) {
                self.set_recheck(op, Some(now + delay));
            } else if observe {
                self.observe_retry_at(op, now + delay);
            }
        }
    }

    /// Answers an acquire (or a set) that ends without a hold.
    pub(in crate::core::etcd::machine) fn report_ending(
        &mut self,
        op: OpId,
        _name: &str,
        ending: Ending,
    ) {
        match ending {
            Ending::NotAcquired => self.rt.out.complete(op, Ok(Outcome::NotAcquired)),
            Ending::Error(error) => self.rt.out.fail(op, error),
        }
    }
}

impl Acquire {
    /// The lease our key is (or was to be) on is lost.
    fn on_lease_lost(
        mut self,
        m: &mut EtcdMachine,
        now: Millis,
        op: OpId,
        req: Option<RequestId>,
    ) -> Next {
        if self.phase == AcqPhase::Cleanup || self.ending.is_some() {
            // The key died with the lease: nothing left to clean.
            let ending = self.ending.clone().unwrap_or(Ending::NotAcquired);
            return self.finish(m, now, op, req, ending);
        }
        if self.phase == AcqPhase::LocalQueue {
            return Next::keep(self, None);
        }
        if self.restarts >= MAX_RESTARTS {
            let error = LockError::Backend {
                backend: BACKEND,
                name: self.name.clone(),
                status: None,
                message: "the session lease keeps disappearing".into(),
            };
            return self.finish(m, now, op, req, Ending::Error(error));
        }
        self.restarts += 1;
        self.lease = None;
        self.my_rev = 0;
        self.phase = AcqPhase::NeedLease;
        if let Some(p) = self.kind.permit_mut() {
            // Its slot key, if a claim applied, died with the lease.
            p.forget_claims();
        }
        m.set_recheck(op, None);
        m.cancel_request(req);
        Next::AwaitLease(Box::new(self.into()))
    }
}
