//! The `LockMachine` interface: user calls, inputs, timers and outputs.

use serde_json::Value;

use crate::core::names::validate_name;

use super::{
    election, permits, shared, AcqPhase, Acquire, AcquireKind, Ending, EtcdMachine, Failure,
    OpKind, Pending, Purpose, TimerKey, BACKEND,
};
use crate::core::etcd::gateway::{self as gw, GatewayError};
use crate::core::{
    random_hex, AcquireOptions, BackendKind, Capabilities, Event, Input, KindFamily, LockError,
    LockId, LockKind, LockMachine, LostReason, Millis, OpId, Operation, RequestId, Transmit,
    TransportError, Wait,
};

impl LockMachine for EtcdMachine {
    fn backend(&self) -> BackendKind {
        BackendKind::Etcd
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            kinds: &[
                KindFamily::Exclusive,
                KindFamily::Shared,
                KindFamily::Permits,
                KindFamily::Leader,
            ],
            // `AcquireAll` of free names in one txn (see `sets.rs`).
            atomic_sets: true,
        }
    }

    fn start_operation(&mut self, now: Millis, op: Operation) -> Result<OpId, LockError> {
        match op {
            Operation::Acquire {
                name,
                kind,
                options,
            } => self.start_acquire(now, &name, kind, None, &options),
            Operation::Release { lock } => self.start_release(now, lock),
            Operation::Extend { lock, ttl_ms: _ } => self.start_extend(now, lock),
            Operation::Resume { handle } => self.start_resume(now, &handle),
            Operation::Reenter { handle } => self.start_reenter(now, &handle),
            Operation::Inspect { name } => self.start_inspect(now, &name),
            Operation::Campaign {
                name,
                value,
                options,
            } => {
                election::check_campaign_value(&value)?;
                self.start_acquire(now, &name, LockKind::Leader, Some(&value), &options)
            }
            Operation::Proclaim { lock, value } => {
                election::check_campaign_value(&value)?;
                self.start_proclaim(now, lock, &value)
            }
            Operation::Leader { name } => self.start_leader(now, &name, None),
            Operation::Observe { name, known, wait } => {
                self.start_leader(now, &name, Some((known, wait)))
            }
            Operation::AcquireAll { names, options } => {
                self.start_acquire_set(now, names, &options)
            }
        }
    }

    fn cancel(&mut self, now: Millis, op: OpId) {
        if self.is_observe(op) {
            return self.cancel_observe(now, op);
        }
        let Some(o) = self.ops.get(&op) else { return };
        if let OpKind::AcquireSet(_) = &o.kind {
            return self.cancel_set(now, op);
        }
        if let OpKind::Acquire(_) = &o.kind {
            self.cancel_acquire(now, op);
        }
    }

    fn close(&mut self, now: Millis) -> OpId {
        let op = self.rt.out.op_id();
        if !self.rt.closing.begin(op) {
            // Answered with the first close, once its drain is over.
            self.maybe_closed();
            return op;
        }
        // Pending operations end now; revoking the leases removes their keys.
        let ops: Vec<OpId> = self.ops.keys().copied().collect();
        for id in ops {
            if let Some(o) = self.ops.remove(&id) {
                self.cancel_request(o.req);
                self.rt.out.fail(id, LockError::Closed { backend: BACKEND });
            }
        }
        let borrowed = self.take_borrowed_leases();
        // A lease on which holds of others may still be counted (a release
        // of ours only took one hold away): revoking it would end their
        // holds too (see `close_deletes`).
        let shared: Vec<i64> = std::mem::take(&mut self.shared_leases);
        let deletes = self.close_deletes(&shared);
        let locks: Vec<LockId> = self.locks.keys().copied().collect();
        for lock in locks {
            if let Some(l) = self.locks.remove(&lock) {
                self.rt.out.lost(lock, l.name, LostReason::ClientClosed);
            }
        }
        let pending: Vec<RequestId> = self.rt.requests.iter().map(|(id, _)| id).collect();
        for id in pending {
            self.cancel_request(Some(id));
        }
        self.grant = None;
        self.orphans.clear();
        // Nothing is due any more: the leases are revoked below.
        self.rt.timers = Default::default();
        self.busy_names.clear();
        let leases: Vec<i64> = std::mem::take(&mut self.leases).into_keys().collect();
        self.session_lease = None;
        for body in deletes {
            self.send(now, Purpose::CloseStep, "/v3/kv/txn", body, false);
        }
        for lease in leases
            .into_iter()
            .filter(|l| !borrowed.contains(l) && !shared.contains(l))
        {
            self.send(
                now,
                Purpose::CloseStep,
                "/v3/lease/revoke",
                gw::lease_id(lease),
                false,
            );
        }
        self.maybe_closed();
        op
    }

    fn handle_input(&mut self, now: Millis, input: Input) {
        let id = input.id();
        match input {
            // etcd's JSON gateway is HTTP: it opens no byte stream.
            Input::Opened { .. } => {}
            Input::Chunk { data, .. } => {
                if self.rt.requests.owner(id).is_some() {
                    self.on_watch_chunk(now, id, &data);
                }
            }
            Input::StreamEnd { .. } => {
                if let Some(p) = self.rt.requests.finish(id) {
                    self.stream_ended(now, id, p);
                }
            }
            Input::Response { status, body, .. } => {
                let Some(p) = self.rt.requests.finish(id) else {
                    return;
                };
                if p.splitter.is_some() {
                    // A streaming request answered whole: an error reply.
                    return self.stream_ended(now, id, p);
                }
                if !(200..300).contains(&status) {
                    let g = gw::classify_error(status, &body);
                    if g != GatewayError::LeaseNotFound {
                        return self.on_failure(now, id, p, Failure::Gateway(g));
                    }
                }
                self.dispatch(now, id, p, Ok((status, body)));
            }
            Input::Failed { error, .. } => {
                let Some(p) = self.rt.requests.finish(id) else {
                    return;
                };
                self.on_request_failed(now, id, p, error);
            }
        }
    }

    fn handle_timeout(&mut self, now: Millis) {
        // 1. Requests past their deadline.
        for (id, p) in self.rt.expire(now) {
            self.on_request_failed(now, id, p, TransportError::Timeout);
        }
        // 2. The timer table (see `timers.rs`), earliest first.
        for key in self.rt.timers.take_due(now) {
            self.on_timer(now, key);
        }
    }

    fn poll_transmit(&mut self) -> Option<Transmit> {
        self.rt.poll_transmit()
    }

    fn poll_event(&mut self) -> Option<Event> {
        self.rt.poll_event()
    }

    fn poll_timeout(&self) -> Option<Millis> {
        self.rt.poll_timeout()
    }

    fn live_count(&self) -> usize {
        self.ops.len() + self.locks.len() + self.orphans.len()
    }
}

impl EtcdMachine {
    /// The leases this client only borrowed to re-enter another owner's
    /// lock: closing ends our holds' renewals, never the owner's lease (our
    /// holds stay counted until it ends). (Unless a lock of ours, resumed
    /// from a handle, also uses it.)
    fn take_borrowed_leases(&mut self) -> Vec<i64> {
        std::mem::take(&mut self.borrowed)
            .into_iter()
            .filter(|lease| {
                self.session_lease != Some(*lease)
                    && self
                        .locks
                        .values()
                        .all(|l| l.lease != *lease || l.reentered)
            })
            .collect()
    }

    /// The txns deleting our own keys on the `shared` leases one by one
    /// (those leases are not revoked: holds of others may be counted on
    /// them); an exclusive lock's key only while no holds are counted on
    /// it. The lease ends when its last holder stops renewing it.
    fn close_deletes(&self, shared: &[i64]) -> Vec<Value> {
        let mut deletes: Vec<Value> = Vec::new();
        for l in self.locks.values() {
            if !shared.contains(&l.lease) || l.reentered {
                continue;
            }
            deletes.push(if l.countable() {
                gw::release_uncounted_txn(&l.key, l.rev, &self.count_key(&l.name))
            } else {
                let keys = l.keys();
                gw::delete_all_if_revisions(
                    &keys
                        .iter()
                        .map(|(k, r)| (k.as_slice(), *r))
                        .collect::<Vec<_>>(),
                )
            });
        }
        for o in self.orphans.iter().filter(|o| shared.contains(&o.lease)) {
            if let Some(rev) = o.rev {
                deletes.push(gw::release_uncounted_txn(
                    &o.key,
                    rev,
                    &self.count_key(&o.name),
                ));
            }
        }
        deletes
    }

    /// A request failed or timed out (already out of the requests in flight).
    fn on_request_failed(&mut self, now: Millis, id: RequestId, p: Pending, error: TransportError) {
        if p.splitter.is_some() {
            return self.stream_ended(now, id, p);
        }
        self.on_failure(now, id, p, Failure::Transport(error));
    }

    fn start_acquire(
        &mut self,
        now: Millis,
        name: &str,
        kind: LockKind,
        campaign: Option<&str>,
        opts: &AcquireOptions,
    ) -> Result<OpId, LockError> {
        self.check_open()?;
        validate_name(name)?;
        if let Some(ttl) = opts.ttl_ms {
            crate::core::names::validate_ttl("ttlMs", ttl)?;
        }
        let deadline = opts.wait.deadline(now);
        let random = random_hex(self.entropy.as_mut(), 8);
        let nonce = match kind {
            LockKind::Permits { limit } => permits::permit_value(limit, &random),
            LockKind::Leader => election::leader_value(campaign.unwrap_or_default()),
            LockKind::Exclusive => random.into_bytes(),
            LockKind::Shared => shared::shared_value(&random),
        };
        let kind = AcquireKind::new(kind);
        let own_key = kind.own_key();
        let op = self.new_op(OpKind::Acquire(Acquire {
            name: name.to_string(),
            lock_prefix: self.lock_prefix(name),
            wait: opts.wait,
            lease: None,
            key: Vec::new(),
            my_rev: 0,
            phase: AcqPhase::LocalQueue,
            ending: None,
            restarts: 0,
            nonce,
            kind,
        }));
        if let Some(deadline) = deadline {
            self.rt.timers.set(TimerKey::AcquireDeadline(op), deadline);
        }
        // Permits and shared holds have keys of their own per acquisition:
        // one client may hold several of one name, so they never queue locally.
        if own_key || self.claim_name(name, op) {
            self.unqueue_acquire(now, op);
        } else if opts.wait == Wait::Try {
            // This client itself holds or is acquiring the name.
            self.finish_acquire(now, op, Ending::NotAcquired);
        }
        Ok(op)
    }
}
