//! The operation table's driver: starting the states of `ops/` (release,
//! extend, resume, re-entry, inspect, proclaim, leader), stepping them with
//! their answers and sending what they ask for; acquires, observes and sets
//! are stepped by their own files.

use crate::core::names::validate_name;

use super::{
    permits, EtcdMachine, ExtendOp, Failure, HeldKind, HeldLock, InspectOp, Next, Op, OpKind,
    Orphan, ProclaimOp, Purpose, ReenterOp, ReleaseOp, Reply, ResumeOp, BACKEND, ORPHAN_RETRY_MS,
};
use crate::core::{BackendKind, LockError, LockHandle, LockId, Millis, OpId, RequestId};

impl EtcdMachine {
    /// The answer to operation `op`'s request: its state takes a step.
    pub(super) fn on_op_reply(
        &mut self,
        now: Millis,
        op: OpId,
        sent_at: Millis,
        result: Result<(u16, Vec<u8>), Failure>,
    ) {
        let Some(Op { kind, .. }) = self.ops.remove(&op) else {
            return;
        };
        let reply = Reply { sent_at, result };
        let next = match kind {
            OpKind::Release(s) => s.step(self, now, op, reply),
            OpKind::Reenter(s) => s.step(self, now, op, reply),
            OpKind::Extend(s) => s.step(self, now, op, reply),
            OpKind::Resume(s) => s.step(self, now, op, reply),
            OpKind::Inspect(s) => s.step(self, op, reply),
            OpKind::Proclaim(s) => s.step(self, now, op, reply),
            OpKind::Leader(s) => s.step(self, op, reply),
            OpKind::Acquire(s) => s.step(self, now, op, reply),
            OpKind::Observe(s) => (*s).step(self, now, op, reply),
            OpKind::AcquireSet(s) => s.step(self, now, op, reply),
        };
        self.follow(now, op, next);
    }

    /// Does what a state's step asked for: sends its request and keeps the
    /// state in the table until the answer (or forgets nothing: `Done`).
    pub(super) fn follow(&mut self, now: Millis, op: OpId, next: Next) {
        match next {
            Next::Send { state, path, body } => {
                let req = self.send(now, Purpose::Op(op), path, body, false);
                self.keep_op(op, *state, Some(req));
            }
            Next::Watch { state, body } => {
                let req = self.send(now, Purpose::Op(op), "/v3/watch", body, true);
                self.keep_op(op, *state, Some(req));
            }
            Next::Keep { state, req } => self.keep_op(op, *state, req),
            Next::AwaitLease(state) => {
                let set = matches!(*state, OpKind::AcquireSet(_));
                self.keep_op(op, *state, None);
                if set {
                    self.set_step(now, op);
                } else {
                    self.acquire_step(now, op);
                }
            }
            Next::LeaseLost {
                state,
                lease,
                reason,
            } => {
                self.keep_op(op, *state, None);
                self.lease_lost(now, lease, reason);
            }
            Next::Done => {}
        }
    }

    fn keep_op(&mut self, op: OpId, kind: OpKind, req: Option<RequestId>) {
        self.ops.insert(op, Op { req, kind });
    }

    pub(super) fn start_release(&mut self, now: Millis, lock: LockId) -> Result<OpId, LockError> {
        if self.rt.closing.drained() {
            return Err(LockError::Closed { backend: BACKEND });
        }
        let op = self.rt.out.op_id();
        let next = ReleaseOp::start(self, op, lock);
        self.follow(now, op, next);
        Ok(op)
    }

    pub(super) fn start_extend(&mut self, now: Millis, lock: LockId) -> Result<OpId, LockError> {
        self.check_open()?;
        let op = self.rt.out.op_id();
        let next = ExtendOp::start(self, op, lock);
        self.follow(now, op, next);
        Ok(op)
    }

    pub(super) fn start_resume(
        &mut self,
        now: Millis,
        handle: &LockHandle,
    ) -> Result<OpId, LockError> {
        self.check_open()?;
        validate_name(&handle.name)?;
        let (op, next) = ResumeOp::start(self, handle)?;
        self.follow(now, op, next);
        Ok(op)
    }

    pub(super) fn start_reenter(
        &mut self,
        now: Millis,
        handle: &LockHandle,
    ) -> Result<OpId, LockError> {
        self.check_open()?;
        validate_name(&handle.name)?;
        let (op, next) = ReenterOp::start(self, now, handle)?;
        self.follow(now, op, next);
        Ok(op)
    }

    pub(super) fn start_inspect(&mut self, now: Millis, name: &str) -> Result<OpId, LockError> {
        self.check_open()?;
        validate_name(name)?;
        let op = self.rt.out.op_id();
        let next = InspectOp::start(self, name);
        self.follow(now, op, next);
        Ok(op)
    }

    /// The name operation `op` is about (for its errors).
    pub(super) fn op_name(&self, op: OpId) -> String {
        match self.ops.get(&op).map(|o| &o.kind) {
            Some(OpKind::Acquire(a)) => a.name.clone(),
            Some(OpKind::Inspect(i)) => i.name().to_string(),
            Some(OpKind::Observe(o)) => Self::observe_name(o).to_string(),
            Some(OpKind::Leader(l)) => l.name().to_string(),
            Some(OpKind::Proclaim(p)) => self.lock_name(p.lock()),
            Some(OpKind::Resume(r)) => r.name().to_string(),
            Some(OpKind::Reenter(r)) => r.name().to_string(),
            Some(OpKind::AcquireSet(s)) => s.members[0].name.clone(),
            Some(OpKind::Release(r)) => self.lock_name(r.lock()),
            Some(OpKind::Extend(e)) => self.lock_name(e.lock()),
            None => String::new(),
        }
    }

    fn lock_name(&self, lock: LockId) -> String {
        self.locks
            .get(&lock)
            .map(|l| l.name.clone())
            .unwrap_or_default()
    }

    /// Starts a proclaim on leadership `lock` (see `ops/proclaim.rs`).
    pub(super) fn start_proclaim(
        &mut self,
        now: Millis,
        lock: LockId,
        value: &str,
    ) -> Result<OpId, LockError> {
        self.check_open()?;
        crate::core::operation::check_campaign_value(value)?;
        if matches!(self.locks.get(&lock), Some(h) if !matches!(h.kind, HeldKind::Leader)) {
            return Err(LockError::invalid(
                "proclaim needs a leadership (a campaign's lock), not a lock",
            ));
        }
        let op = self.rt.out.op_id();
        let next = ProclaimOp::start(self, op, lock, value);
        self.follow(now, op, next);
        Ok(op)
    }

    /// Gives up on a held lock's keys locally and deletes each (that
    /// incarnation) in the background, from `retry_at`.
    pub(super) fn orphan_keys_of(&mut self, h: HeldLock, retry_at: Millis) {
        let holds_name = h.claims_name();
        for (key, rev) in h.keys() {
            self.orphans.push(Orphan {
                name: h.name.clone(),
                key,
                rev: Some(rev),
                value: None,
                holds_name,
                lease: h.lease,
                retry_at,
                req: None,
            });
        }
        self.arm_orphans();
    }

    /// The answer to an orphan's deletion: done (its name is free, if it
    /// held it), or retried later.
    pub(super) fn on_orphan(
        &mut self,
        now: Millis,
        id: RequestId,
        result: Result<(u16, Vec<u8>), Failure>,
    ) {
        let Some(i) = self.orphans.iter().position(|o| o.req == Some(id)) else {
            return;
        };
        if matches!(&result, Ok((s, _)) if (200..300).contains(s)) {
            let o = self.orphans.remove(i);
            if o.holds_name {
                self.free_name(now, &o.name);
            }
        } else {
            self.orphans[i].req = None;
            self.orphans[i].retry_at = now + ORPHAN_RETRY_MS;
            self.arm_orphans();
        }
    }

    /// The keys (and create revisions) a handle names: its key, and a
    /// permit's slot key.
    pub(super) fn resume_keys(&self, handle: &LockHandle) -> Vec<(Vec<u8>, i64)> {
        let mut keys = vec![(handle.key.as_bytes().to_vec(), handle.revision as i64)];
        if let Some(slot) = handle.slot {
            keys.push((
                permits::slot_key(&self.lock_prefix(&handle.name), slot),
                handle.fencing_token as i64,
            ));
        }
        keys
    }

    pub(super) fn drop_lease_if_unused(&mut self, lease: i64, op: OpId) {
        let resumed_elsewhere = self.ops.iter().any(|(id, o)| {
            *id != op
                && match &o.kind {
                    OpKind::Resume(r) => r.lease() == lease,
                    OpKind::Reenter(r) => r.lease() == lease,
                    _ => false,
                }
        });
        if !self.lease_in_use(lease) && !resumed_elsewhere && self.session_lease != Some(lease) {
            self.leases.remove(&lease);
        }
    }

    pub(super) fn new_op(&mut self, kind: OpKind) -> OpId {
        let op = self.rt.out.op_id();
        self.ops.insert(op, Op { req: None, kind });
        op
    }

    pub(super) fn check_open(&self) -> Result<(), LockError> {
        self.rt.closing.check_open(BackendKind::Etcd)
    }

    pub(super) fn maybe_closed(&mut self) {
        let outstanding = self.rt.requests.any(|p| p.purpose == Purpose::CloseStep);
        self.rt.closing.finish_if(!outstanding, &mut self.rt.out);
    }
}
