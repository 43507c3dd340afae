//! The acquire recipe: its state ([`Acquire`], [`AcqPhase`]), txn, predecessor
//! watch, grant, cleanup of abandoned keys. What the kinds differ in is
//! [`AcquireKind`] (`kind.rs`); the semaphore's and the reader's own steps
//! are `permits.rs` and `shared.rs` (with their keys' layout, which inspect,
//! resume and the ghost sweep read too).

pub(in crate::core::etcd::machine) mod kind;
pub(in crate::core::etcd::machine) mod permits;
pub(in crate::core::etcd::machine) mod shared;

use self::kind::AcquireKind;
use super::super::{
    EtcdMachine, Failure, HeldKind, HeldLock, Orphan, Pending, Purpose, BACKEND, MAX_RESTARTS,
    ORPHAN_RETRY_MS, WATCH_REFRESH_MS, WATCH_RETRY_MS,
};
use super::{Op, OpKind};
use crate::core::etcd::gateway::{self as gw, GatewayError, TxnResponse};
use crate::core::{
    jitter, BackendKind, LockError, LockHandle, LockInfo, LostReason, Millis, OpId, Outcome,
    RequestId, Wait,
};

impl EtcdMachine {
    pub(in crate::core::etcd::machine) fn acquire_mut(&mut self, op: OpId) -> Option<&mut Acquire> {
        match self.ops.get_mut(&op).map(|o| &mut o.kind) {
            Some(OpKind::Acquire(a)) => Some(a),
            _ => None,
        }
    }

    /// Advances an acquire that is in NeedLease: sends its txn once a lease exists.
    pub(in crate::core::etcd::machine) fn acquire_step(&mut self, now: Millis, op: OpId) {
        let Some(a) = self.acquire_mut(op) else {
            return;
        };
        if a.phase != AcqPhase::NeedLease {
            return;
        }
        let Some(lease) = self.usable_session_lease(now) else {
            return;
        };
        let Some(a) = self.acquire_mut(op) else {
            return;
        };
        a.key = a.kind.key(&a.lock_prefix, lease, op);
        a.lease = Some(lease);
        a.phase = AcqPhase::Txn;
        // The lease is in use from now on: its timers must run.
        self.arm_lease(lease);
        let Some(a) = self.acquire_mut(op) else {
            return;
        };
        let body = a.kind.acquire_body(a, lease);
        let req = self.send(now, Purpose::Op(op), "/v3/kv/txn", body, false);
        if let Some(o) = self.ops.get_mut(&op) {
            o.req = Some(req);
        }
    }

    pub(in crate::core::etcd::machine) fn send_predecessor_check(&mut self, now: Millis, op: OpId) {
        let Some(a) = self.acquire_mut(op) else {
            return;
        };
        a.phase = AcqPhase::Predecessor;
        self.set_recheck(op, None);
        let Some(a) = self.acquire_mut(op) else {
            return;
        };
        let body = a.kind.check_body(a);
        let req = self.send(now, Purpose::Op(op), "/v3/kv/txn", body, false);
        if let Some(o) = self.ops.get_mut(&op) {
            o.req = Some(req);
        }
    }

    /// The acquire's wait bound passed (`TimerKey::AcquireDeadline`): it
    /// times out, removing its key first if it may have one.
    pub(in crate::core::etcd::machine) fn on_acquire_deadline(&mut self, now: Millis, op: OpId) {
        let Some(a) = self.acquire_mut(op) else {
            return;
        };
        if a.phase == AcqPhase::Cleanup || a.ending.is_some() {
            return;
        }
        let (name, queued) = (a.name.clone(), a.phase == AcqPhase::LocalQueue);
        let ending = Ending::Error(LockError::Timeout {
            backend: BACKEND,
            name,
        });
        if queued {
            self.finish_acquire(now, op, ending);
        } else {
            self.cleanup(now, op, ending);
        }
    }

    /// A waiter's re-check is due (`TimerKey::Recheck`).
    pub(in crate::core::etcd::machine) fn on_recheck(&mut self, now: Millis, op: OpId) {
        let Some(a) = self.acquire_mut(op) else {
            return;
        };
        if a.phase == AcqPhase::Cleanup || a.ending.is_some() {
            return;
        }
        // A watch due for its refresh is replaced, not doubled.
        if a.phase == AcqPhase::Watch {
            let req = self.ops.get_mut(&op).and_then(|o| o.req.take());
            self.cancel_request(req);
        }
        self.send_predecessor_check(now, op);
    }

    pub(in crate::core::etcd::machine) fn on_acquire_reply(
        &mut self,
        now: Millis,
        op: OpId,
        result: Result<(u16, Vec<u8>), Failure>,
    ) {
        let Some(a) = self.acquire_mut(op) else {
            return;
        };
        let (phase, name, lease) = (a.phase.clone(), a.name.clone(), a.lease);
        if phase == AcqPhase::Cleanup {
            return self.on_cleanup_reply(now, op, result);
        }
        if let Some(ending) = a.ending.clone() {
            // Cancelled or timed out while this txn was in flight (see `cleanup`).
            return self.cleanup_after_txn(now, op, phase, ending, result);
        }
        if phase == AcqPhase::RemoveStale {
            return match result {
                Ok(_) => {
                    if let Some(a) = self.acquire_mut(op) {
                        a.phase = AcqPhase::NeedLease;
                    }
                    self.acquire_step(now, op)
                }
                Err(f) => {
                    let err = self.backend_error(&name, f);
                    self.finish_acquire(now, op, Ending::Error(err))
                }
            };
        }
        match result.and_then(|(s, b)| gw::parse::<TxnResponse>(s, &b).map_err(Failure::Gateway)) {
            Ok(txn) => self.on_acquire_txn(now, op, phase, txn),
            Err(Failure::Gateway(GatewayError::LeaseNotFound)) => {
                if let Some(l) = lease {
                    let reason = LostReason::RenewalFailed("the lease no longer exists".into());
                    self.lease_lost(now, l, reason);
                }
            }
            Err(f) => {
                let err = self.backend_error(&name, f);
                self.cleanup(now, op, Ending::Error(err))
            }
        }
    }

    /// An acquire's txn answered: a permit's and a reader's go to their own
    /// files (`permits.rs`, `shared.rs`), a lock's (and a campaign's) on here.
    fn on_acquire_txn(&mut self, now: Millis, op: OpId, phase: AcqPhase, txn: TxnResponse) {
        let Some(a) = self.acquire_mut(op) else {
            return;
        };
        // A failed compare of an acquire txn is the lock's case for every
        // kind: our key existed (see `lock_key_existed`).
        if a.kind.own_key() && (phase != AcqPhase::Txn || txn.succeeded) {
            if txn.header.revision <= 0 {
                return self.malformed(now, op, "txn reply without revision");
            }
            return match a.kind {
                AcquireKind::Permit(_) => self.on_permit_txn(now, op, phase, txn),
                _ => self.on_shared_txn(now, op, phase, txn),
            };
        }
        if txn.header.revision <= 0 || txn.range(0).is_none() {
            return self.malformed(now, op, "txn reply without revision or range");
        }
        let found = match phase {
            AcqPhase::Txn if txn.succeeded => self.lock_key_put(now, op, &txn),
            AcqPhase::Txn => self.lock_key_existed(now, op, &txn),
            AcqPhase::Predecessor => self.acquire_mut(op).map(|a| predecessor_read(a, &txn)),
            _ => None,
        };
        if let Some((predecessor, own_present)) = found {
            self.wait_or_grant(now, op, txn.header.revision, predecessor, own_present);
        }
    }

    /// The acquire txn put our key: its predecessor, if any (`None`: the
    /// acquire already moved on, refused a semaphore's name).
    fn lock_key_put(
        &mut self,
        now: Millis,
        op: OpId,
        txn: &TxnResponse,
    ) -> Option<(Option<Vec<u8>>, bool)> {
        let a = self.acquire_mut(op)?;
        a.my_rev = txn.header.revision;
        // The oldest key decides what the name is: a semaphore's
        // (its value carries the limit) is no lock to wait for.
        if let Some(permits::KeyKind::Permit(limit)) = txn
            .range(1)
            .and_then(|r| r.kvs.first())
            .map(|kv| permits::key_kind(&kv.value))
        {
            let name = &a.name;
            let message = format!("{name:?} is a semaphore of {limit}, not an exclusive lock");
            self.cleanup(now, op, Ending::Error(LockError::invalid(message)));
            return None;
        }
        let newest = txn.range(0).map(|r| r.kvs.clone()).unwrap_or_default();
        let pred = newest
            .iter()
            .find(|kv| kv.key != a.key && kv.create_revision < a.my_rev)
            .map(|kv| kv.key.clone());
        Some((pred, true))
    }

    /// Our key already existed: an earlier attempt applied (learn its
    /// revision and check the predecessor), or it is a leftover of an
    /// earlier incarnation (remove exactly it, then try again with a fresh key).
    fn lock_key_existed(
        &mut self,
        now: Millis,
        op: OpId,
        txn: &TxnResponse,
    ) -> Option<(Option<Vec<u8>>, bool)> {
        let a = self.acquire_mut(op)?;
        let found = txn
            .range(0)
            .and_then(|r| r.kvs.iter().find(|kv| kv.key == a.key))
            .cloned();
        match found {
            // A revision is positive; anything else is a hostile reply.
            Some(kv) if kv.value == a.nonce && kv.create_revision > 0 => {
                a.my_rev = kv.create_revision;
                self.send_predecessor_check(now, op);
                None
            }
            Some(kv) => {
                a.restarts += 1;
                if a.restarts > MAX_RESTARTS {
                    self.malformed(now, op, "a stale key cannot be removed");
                    return None;
                }
                a.phase = AcqPhase::NeedLease;
                let body = gw::delete_if_revision(&kv.key, kv.create_revision);
                let req = self.send(now, Purpose::Op(op), "/v3/kv/txn", body, false);
                if let Some(o) = self.ops.get_mut(&op) {
                    o.req = Some(req);
                }
                if let Some(a) = self.acquire_mut(op) {
                    a.phase = AcqPhase::RemoveStale;
                }
                None
            }
            None => Some((None, false)),
        }
    }

    /// Our key's predecessor is known: hold, give up (a try) or watch it.
    fn wait_or_grant(
        &mut self,
        now: Millis,
        op: OpId,
        revision: i64,
        predecessor: Option<Vec<u8>>,
        own_present: bool,
    ) {
        let Some(a) = self.acquire_mut(op) else {
            return;
        };
        if !own_present || a.my_rev <= 0 {
            return self.restart_acquire(now, op);
        }
        match predecessor {
            None => self.grant_lock(now, op, None),
            Some(_) if a.wait == Wait::Try => self.cleanup(now, op, Ending::NotAcquired),
            Some(pred) => {
                a.phase = AcqPhase::Watch;
                let body = gw::watch_delete(&pred, revision.saturating_add(1));
                let req = self.send(now, Purpose::Op(op), "/v3/watch", body, true);
                if let Some(o) = self.ops.get_mut(&op) {
                    o.req = Some(req);
                }
            }
        }
    }

    /// Our key vanished (deleted, or the lease expired): start over.
    pub(in crate::core::etcd::machine) fn restart_acquire(&mut self, now: Millis, op: OpId) {
        let Some(a) = self.acquire_mut(op) else {
            return;
        };
        a.restarts += 1;
        if a.restarts > MAX_RESTARTS {
            return self.malformed(now, op, "our key keeps vanishing");
        }
        a.phase = AcqPhase::NeedLease;
        a.my_rev = 0;
        if let Some(p) = a.kind.permit_mut() {
            // A slot claimed on the vanished key's lease went with it.
            p.forget_claims();
        }
        self.acquire_step(now, op)
    }

    /// Our key is the lowest (a lock), or we claimed `slot` = (slot, its
    /// key's create revision) of a semaphore: hand the hold out if our lease
    /// is still valid.
    pub(in crate::core::etcd::machine) fn grant_lock(
        &mut self,
        now: Millis,
        op: OpId,
        slot: Option<(u32, i64)>,
    ) {
        let Some(a) = self.acquire_mut(op) else {
            return;
        };
        let lease = a.lease.unwrap_or(0);
        let expires_at = match self.leases.get(&lease) {
            Some(l) if l.expires_at > now => l.expires_at,
            _ => {
                return self.lease_lost(now, lease, LostReason::Expired);
            }
        };
        let Some(Op {
            kind: OpKind::Acquire(a),
            ..
        }) = self.ops.remove(&op)
        else {
            return;
        };
        self.clear_acquire_timers(op);
        let lock = self.rt.out.lock_id();
        let (kind, token) = a.kind.granted(a.my_rev, slot.map(|(_, rev)| rev));
        let handle = LockHandle {
            v: 1,
            backend: BackendKind::Etcd,
            name: a.name.clone(),
            key: String::from_utf8_lossy(&a.key).into_owned(),
            owner: lease.to_string(),
            fencing_token: token as u64,
            revision: a.my_rev as u64,
            kind,
            slot: slot.map(|s| s.0),
        };
        let slot = slot.map(|(s, rev)| (s, permits::slot_key(&a.lock_prefix, s), rev));
        self.locks.insert(
            lock,
            HeldLock {
                name: a.name.clone(),
                key: a.key.clone(),
                rev: a.my_rev,
                lease,
                kind: HeldKind::new(kind, slot),
                releasing: false,
                reentered: false,
            },
        );
        self.rt.out.complete(
            op,
            Ok(Outcome::Acquired(LockInfo {
                id: lock,
                name: a.name,
                fencing_token: token as u64,
                expires_at,
                handle,
            })),
        );
    }

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
        for m in messages {
            // A semaphore's waiter re-checks on any event it watches for
            // (its predecessor's promotion is a PUT); a lock's on a delete.
            let any_event = matches!(self.ops.get(&op).map(|o| &o.kind), Some(OpKind::Acquire(a)) if a.kind.wakes_on_any_event());
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
                    return self.send_predecessor_check(now, op);
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

    /// Remove our key (if it may exist), then report `ending`.
    pub(in crate::core::etcd::machine) fn cleanup(
        &mut self,
        now: Millis,
        op: OpId,
        ending: Ending,
    ) {
        let Some(o) = self.ops.get_mut(&op) else {
            return;
        };
        if !matches!(o.kind, OpKind::Acquire(_)) {
            return;
        }
        self.set_recheck(op, None);
        let Some(o) = self.ops.get_mut(&op) else {
            return;
        };
        let OpKind::Acquire(a) = &mut o.kind else {
            return;
        };
        if matches!(
            a.phase,
            AcqPhase::Txn | AcqPhase::RemoveStale | AcqPhase::Claim
        ) && o.req.is_some()
        {
            // The txn in flight may still apply after anything we send now:
            // wait for its answer, which tells exactly which key to delete.
            a.ending = Some(ending);
            return;
        }
        let req = o.req.take();
        if a.phase == AcqPhase::Claim {
            // The claim's answer was an error: its slot key may exist.
            a.phase = AcqPhase::Watch;
            self.forget_unanswered_claim(now, op);
        }
        let Some(o) = self.ops.get_mut(&op) else {
            return;
        };
        let OpKind::Acquire(a) = &mut o.kind else {
            return;
        };
        let has_key = matches!(
            a.phase,
            AcqPhase::Txn | AcqPhase::Predecessor | AcqPhase::Watch
        );
        if !has_key || a.lease.is_none() {
            self.cancel_request(req);
            return self.finish_acquire(now, op, ending);
        }
        a.phase = AcqPhase::Cleanup;
        a.ending = Some(ending);
        let claimed = a
            .kind
            .permit()
            .and_then(|p| p.claimed)
            .map(|(slot, rev)| (permits::slot_key(&a.lock_prefix, slot), rev));
        let body = match claimed {
            Some((slot_key, rev)) if a.my_rev > 0 => {
                gw::delete_all_if_revisions(&[(&a.key, a.my_rev), (&slot_key, rev)])
            }
            _ if a.my_rev > 0 => gw::delete_if_revision(&a.key, a.my_rev),
            _ => gw::delete_key(&a.key),
        };
        let path = if a.my_rev > 0 {
            "/v3/kv/txn"
        } else {
            "/v3/kv/deleterange"
        };
        self.cancel_request(req);
        let req = self.send(now, Purpose::Op(op), path, body, false);
        if let Some(o) = self.ops.get_mut(&op) {
            o.req = Some(req);
        }
    }

    /// The answer to the txn that was in flight when the acquire was cancelled:
    /// learn our key's revision from it (if it applied) and delete exactly that.
    pub(in crate::core::etcd::machine) fn cleanup_after_txn(
        &mut self,
        now: Millis,
        op: OpId,
        phase: AcqPhase,
        ending: Ending,
        result: Result<(u16, Vec<u8>), Failure>,
    ) {
        let Some(a) = self.acquire_mut(op) else {
            return;
        };
        if phase == AcqPhase::RemoveStale {
            // Nothing of this attempt was created.
            a.phase = AcqPhase::NeedLease;
            return self.finish_acquire(now, op, ending);
        }
        if phase == AcqPhase::Claim {
            // Our key exists at `my_rev`. A claim that applied is undone with
            // it in one txn; one whose outcome is unknown is deleted in the
            // background (comparing the value: a slot we did not get is left alone).
            a.phase = AcqPhase::Watch;
            match result
                .ok()
                .and_then(|(s, b)| gw::parse::<TxnResponse>(s, &b).ok())
            {
                Some(t) if t.succeeded && t.header.revision > 0 => {
                    if let Some(p) = a.kind.permit_mut() {
                        p.claimed = p.claiming.take().map(|slot| (slot, t.header.revision));
                    }
                }
                Some(_) => {
                    if let Some(p) = a.kind.permit_mut() {
                        p.claiming = None;
                    }
                }
                None => self.forget_unanswered_claim(now, op),
            }
            return self.cleanup(now, op, ending);
        }
        let txn = result
            .ok()
            .and_then(|(s, b)| gw::parse::<TxnResponse>(s, &b).ok());
        match txn {
            Some(t) if t.succeeded && t.header.revision > 0 => a.my_rev = t.header.revision,
            Some(t) => match t
                .range(0)
                .and_then(|r| r.kvs.iter().find(|kv| kv.key == a.key))
            {
                // 0 = unknown revision: cleanup deletes whatever is there.
                Some(kv) => a.my_rev = kv.create_revision.max(0),
                None => {
                    // Definitely nothing created.
                    a.phase = AcqPhase::NeedLease;
                    return self.finish_acquire(now, op, ending);
                }
            },
            None => a.my_rev = 0, // unknown outcome: delete whatever is there
        }
        a.phase = AcqPhase::Watch; // "may have a key": cleanup deletes it
        self.cleanup(now, op, ending);
    }

    pub(in crate::core::etcd::machine) fn on_cleanup_reply(
        &mut self,
        now: Millis,
        op: OpId,
        result: Result<(u16, Vec<u8>), Failure>,
    ) {
        let Some(a) = self.acquire_mut(op) else {
            return;
        };
        let ending = a.ending.clone().unwrap_or(Ending::NotAcquired);
        let ok = matches!(&result, Ok((s, _)) if (200..300).contains(s));
        if !ok {
            // Keep the name busy and retry in the background; report now.
            let orphan = Orphan {
                name: a.name.clone(),
                key: a.key.clone(),
                rev: (a.my_rev > 0).then_some(a.my_rev),
                value: None,
                holds_name: a.claims_name(),
                lease: a.lease.unwrap_or(0),
                retry_at: now + ORPHAN_RETRY_MS,
                req: None,
            };
            if let Some(Op {
                kind: OpKind::Acquire(a),
                ..
            }) = self.ops.remove(&op)
            {
                if let Some((slot, rev)) = a.kind.permit().and_then(|p| p.claimed) {
                    let key = permits::slot_key(&a.lock_prefix, slot);
                    let (name, lease, retry_at) =
                        (orphan.name.clone(), orphan.lease, orphan.retry_at);
                    self.orphans.push(Orphan {
                        name,
                        key,
                        rev: Some(rev),
                        value: None,
                        holds_name: false,
                        lease,
                        retry_at,
                        req: None,
                    });
                }
                self.orphans.push(orphan);
                self.arm_orphans();
                self.report_ending(op, &a.name, ending);
            }
            return;
        }
        self.finish_acquire(now, op, ending);
    }

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

    pub(in crate::core::etcd::machine) fn finish_acquire(
        &mut self,
        now: Millis,
        op: OpId,
        ending: Ending,
    ) {
        let Some(o) = self.ops.remove(&op) else {
            return;
        };
        self.clear_acquire_timers(op);
        self.cancel_request(o.req);
        let OpKind::Acquire(a) = o.kind else { return };
        self.report_ending(op, &a.name, ending);
        if !a.claims_name() {
            // Permits and shared holds never claim their name locally.
        } else if a.phase == AcqPhase::LocalQueue {
            self.unqueue_local(&a.name, op);
        } else {
            self.free_name(now, &a.name);
        }
    }

    pub(in crate::core::etcd::machine) fn on_orphan(
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
}

pub(in crate::core::etcd::machine) struct Acquire {
    pub(in crate::core::etcd::machine) name: String,
    pub(in crate::core::etcd::machine) lock_prefix: Vec<u8>,
    pub(in crate::core::etcd::machine) wait: Wait,
    pub(in crate::core::etcd::machine) lease: Option<i64>,
    pub(in crate::core::etcd::machine) key: Vec<u8>,
    pub(in crate::core::etcd::machine) my_rev: i64,
    pub(in crate::core::etcd::machine) phase: AcqPhase,
    pub(in crate::core::etcd::machine) ending: Option<Ending>,
    pub(in crate::core::etcd::machine) restarts: u32,
    /// Random value stored in our key: a key found with another value is a
    /// leftover of an earlier incarnation and must never be adopted (its
    /// revision, as a fencing token, would go backwards). A permit's is
    /// `p<limit>:<random>`, so that every key of a semaphore carries its limit.
    pub(in crate::core::etcd::machine) nonce: Vec<u8>,
    /// The kind of hold taken, with the kind's own state (a permit's).
    pub(in crate::core::etcd::machine) kind: AcquireKind,
}

impl Acquire {
    /// Whether the acquire claims its name locally (see [`HeldLock::claims_name`]).
    pub(in crate::core::etcd::machine) fn claims_name(&self) -> bool {
        !self.kind.own_key()
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(in crate::core::etcd::machine) enum AcqPhase {
    LocalQueue,
    NeedLease,
    Txn,
    Predecessor,
    Watch,
    /// A permit holder's claim of a slot key is in flight.
    Claim,
    /// Deleting a leftover key of ours before trying again.
    RemoveStale,
    Cleanup,
}

#[derive(Clone, Debug)]
pub(in crate::core::etcd::machine) enum Ending {
    NotAcquired,
    Error(LockError),
}

/// A re-check's answer: our key's predecessor, and whether our key is
/// still that incarnation.
fn predecessor_read(a: &Acquire, txn: &TxnResponse) -> (Option<Vec<u8>>, bool) {
    let own = txn
        .range(0)
        .map(|r| {
            r.kvs
                .iter()
                .any(|kv| kv.key == a.key && kv.create_revision == a.my_rev)
        })
        .unwrap_or(false);
    let pred = txn
        .range(1)
        .and_then(|r| r.kvs.first())
        .map(|kv| kv.key.clone());
    (pred, own)
}
