//! `AcquireAll` of free names in one transaction.
//!
//! [`MultiLock`](crate::core::MultiLock) asks this machine (its
//! `atomic_sets` capability) to take a whole set at once before it falls
//! back to its one-name-at-a-time recipe. Here that is a single **try**:
//!
//! - One txn compares, for every name, that the name's whole key range
//!   (`<prefix>/<escaped name>/`: queue keys, readers, permits and their
//!   slots, campaigns — every key of the name of any kind) is empty, and
//!   then puts each name's lock key exactly as an ordinary exclusive
//!   acquire puts it (`<lock prefix><session lease hex>`, a random value,
//!   on the session lease). Each lock is afterwards an ordinary held lock
//!   of the machine: released, extended, renewed, checked for loss,
//!   inspected, resumed and re-entered like any other. Its fencing token
//!   is its key's create revision: the txn's revision, one number for the
//!   whole set, still strictly increasing per name.
//! - Any key in any range: nothing is put, the answer is
//!   [`Outcome::NotAcquired`] (the wait bound is not used: waiting is the
//!   fallback's, with each name's FIFO queue). So is a name this client
//!   itself uses (holding, acquiring or cleaning up), without a request.
//! - The names are claimed locally while the txn is in flight, so that a
//!   local acquire of one of them queues behind the set.
//! - A set that fails after its txn may have applied (a transport error or
//!   a timeout: outcome unknown; a cancel while the txn was in flight, and
//!   it applied) leaves nothing behind when it completes: one more txn
//!   deletes its keys, all or none (exactly the txn's revision, or exactly
//!   our values when the outcome is unknown), like an ordinary acquire's
//!   cleanup, and only its answer completes the set. Should that delete
//!   fail too, each key goes to the orphans (deleted in the background, its
//!   name busy until that is confirmed). `ghost_risk` is set as for every
//!   abandoned txn (see `ghosts.rs`). A retried txn whose first attempt
//!   applied finds our own keys in its failure branch and takes them.

use crate::core::names::validate_name;
use crate::core::operation::check_acquire_all_names;

use super::super::{
    EtcdMachine, Failure, HeldKind, HeldLock, Orphan, Purpose, BACKEND, MAX_RESTARTS,
};
use super::acquire::Ending;
use super::{Op, OpKind};
use crate::core::etcd::gateway::{self as gw, GatewayError, TxnResponse};
use crate::core::{
    random_hex, AcquireOptions, BackendKind, LockError, LockHandle, LockInfo, LockKind, LostReason,
    Millis, OpId, Outcome,
};

/// An `AcquireAll` in progress.
pub(in super::super) struct AcquireSet {
    /// The names in the caller's order.
    pub(in super::super) members: Vec<Member>,
    /// The lease the txn put (or will put) the keys on.
    pub(in super::super) lease: Option<i64>,
    pub(in super::super) phase: SetPhase,
    /// Set by a cancel while the txn is in flight: what to report once its
    /// answer says which keys to delete.
    pub(in super::super) ending: Option<Ending>,
    pub(in super::super) restarts: u32,
    /// In `Cleanup`: the revision the keys were put at, if known.
    rev: Option<i64>,
}

pub(in super::super) struct Member {
    pub(in super::super) name: String,
    pub(in super::super) lock_prefix: Vec<u8>,
    /// The lock key (known once the lease is).
    pub(in super::super) key: Vec<u8>,
    /// The random value stored in the key.
    pub(in super::super) nonce: Vec<u8>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in super::super) enum SetPhase {
    NeedLease,
    Txn,
    /// Deleting the keys the txn put (or may have put) before reporting.
    Cleanup,
}

impl EtcdMachine {
    pub(in super::super) fn start_acquire_set(
        &mut self,
        now: Millis,
        names: Vec<String>,
        opts: &AcquireOptions,
    ) -> Result<OpId, LockError> {
        self.check_open()?;
        check_acquire_all_names(&names)?;
        for name in &names {
            validate_name(name)?;
        }
        if let Some(ttl) = opts.ttl_ms {
            crate::core::names::validate_ttl("ttlMs", ttl)?;
        }
        if names.iter().any(|n| self.busy_names.contains_key(n)) {
            // This client itself uses one of the names: the fallback waits
            // in that name's local queue.
            let op = self.rt.out.op_id();
            self.rt.out.complete(op, Ok(Outcome::NotAcquired));
            return Ok(op);
        }
        let members = names
            .into_iter()
            .map(|name| Member {
                lock_prefix: self.lock_prefix(&name),
                key: Vec::new(),
                nonce: random_hex(self.entropy.as_mut(), 8).into_bytes(),
                name,
            })
            .collect::<Vec<_>>();
        let claims: Vec<String> = members.iter().map(|m| m.name.clone()).collect();
        let op = self.new_op(OpKind::AcquireSet(AcquireSet {
            members,
            lease: None,
            phase: SetPhase::NeedLease,
            ending: None,
            restarts: 0,
            rev: None,
        }));
        for name in &claims {
            self.claim_name(name, op);
        }
        self.set_step(now, op);
        Ok(op)
    }

    pub(in super::super) fn set_mut(&mut self, op: OpId) -> Option<&mut AcquireSet> {
        match self.ops.get_mut(&op).map(|o| &mut o.kind) {
            Some(OpKind::AcquireSet(s)) => Some(s),
            _ => None,
        }
    }

    /// The sets waiting for the session lease.
    pub(in super::super) fn sets_needing_lease(&self) -> Vec<OpId> {
        self.ops
            .iter()
            .filter(
                |(_, o)| matches!(&o.kind, OpKind::AcquireSet(s) if s.phase == SetPhase::NeedLease),
            )
            .map(|(id, _)| *id)
            .collect()
    }

    /// Sends the set's txn once the session lease exists.
    pub(in super::super) fn set_step(&mut self, now: Millis, op: OpId) {
        if self.set_mut(op).map(|s| s.phase) != Some(SetPhase::NeedLease) {
            return;
        }
        let Some(lease) = self.usable_session_lease(now) else {
            return;
        };
        let Some(s) = self.set_mut(op) else { return };
        for m in &mut s.members {
            // The key layout of an ordinary exclusive acquire (`acquire_step`).
            m.key = [m.lock_prefix.as_slice(), format!("{lease:x}").as_bytes()].concat();
        }
        s.lease = Some(lease);
        s.phase = SetPhase::Txn;
        let body = gw::acquire_set_txn(
            &s.members
                .iter()
                .map(|m| gw::SetMember {
                    key: &m.key,
                    lock_prefix: &m.lock_prefix,
                    value: &m.nonce,
                })
                .collect::<Vec<_>>(),
            lease,
        );
        // The lease is in use from now on: its timers must run.
        self.arm_lease(lease);
        let req = self.send(now, Purpose::Op(op), "/v3/kv/txn", body, false);
        if let Some(o) = self.ops.get_mut(&op) {
            o.req = Some(req);
        }
    }

    /// The caller cancelled the set: at once while it waits for the lease;
    /// with its txn in flight, once the answer tells what to delete.
    pub(in super::super) fn cancel_set(&mut self, now: Millis, op: OpId) {
        let Some(s) = self.set_mut(op) else { return };
        if s.ending.is_some() {
            return;
        }
        let aborted = Ending::Error(LockError::Aborted {
            backend: BACKEND,
            name: s.members[0].name.clone(),
        });
        match s.phase {
            SetPhase::NeedLease => self.finish_set(now, op, aborted),
            SetPhase::Txn => s.ending = Some(aborted),
            SetPhase::Cleanup => {}
        }
    }

    /// Ends the set without a key left (or with its keys handed to the
    /// orphans, which keep their names busy): frees the other names.
    pub(in super::super) fn finish_set(&mut self, now: Millis, op: OpId, ending: Ending) {
        let Some(o) = self.ops.remove(&op) else {
            return;
        };
        self.cancel_request(o.req);
        let OpKind::AcquireSet(s) = o.kind else {
            return;
        };
        self.report_ending(op, &s.members[0].name, ending);
        for m in &s.members {
            if !self
                .orphans
                .iter()
                .any(|o| o.name == m.name && o.holds_name)
            {
                self.free_name(now, &m.name);
            }
        }
    }

    /// The set ends with `ending` once its keys (put at `rev`, or perhaps put
    /// at all when `None`) are deleted, all or none, by one txn.
    fn cleanup_set(&mut self, now: Millis, op: OpId, rev: Option<i64>, ending: Ending) {
        let Some(s) = self.set_mut(op) else { return };
        s.phase = SetPhase::Cleanup;
        s.ending = Some(ending);
        s.rev = rev;
        let body = match rev {
            Some(rev) => gw::delete_all_if_revisions(
                &s.members
                    .iter()
                    .map(|m| (m.key.as_slice(), rev))
                    .collect::<Vec<_>>(),
            ),
            None => gw::delete_all_if_values(
                &s.members
                    .iter()
                    .map(|m| (m.key.as_slice(), m.nonce.as_slice()))
                    .collect::<Vec<_>>(),
            ),
        };
        let req = self.send(now, Purpose::Op(op), "/v3/kv/txn", body, false);
        if let Some(o) = self.ops.get_mut(&op) {
            o.req = Some(req);
        }
    }

    /// Every key of the set may exist: delete each in the background
    /// (exactly `rev`, or exactly our value when the revision is unknown).
    fn orphan_set_keys(&mut self, now: Millis, op: OpId, rev: Option<i64>) {
        let Some(s) = self.set_mut(op) else { return };
        let lease = s.lease.unwrap_or(0);
        let orphans: Vec<Orphan> = s
            .members
            .iter()
            .map(|m| Orphan {
                name: m.name.clone(),
                key: m.key.clone(),
                rev,
                value: rev.is_none().then(|| m.nonce.clone()),
                holds_name: true,
                lease,
                retry_at: now,
                req: None,
            })
            .collect();
        self.orphans.extend(orphans);
        self.arm_orphans();
    }

    pub(in super::super) fn on_set_reply(
        &mut self,
        now: Millis,
        op: OpId,
        result: Result<(u16, Vec<u8>), Failure>,
    ) {
        let Some(s) = self.set_mut(op) else { return };
        let (lease, first) = (s.lease.unwrap_or(0), s.members[0].name.clone());
        let ending = s.ending.clone();
        if s.phase == SetPhase::Cleanup {
            let ending = ending.unwrap_or(Ending::NotAcquired);
            let rev = s.rev;
            if !matches!(&result, Ok((st, _)) if (200..300).contains(st)) {
                // Keep deleting in the background; the names stay busy.
                self.orphan_set_keys(now, op, rev);
            }
            return self.finish_set(now, op, ending);
        }
        let txn = match result
            .and_then(|(st, b)| gw::parse::<TxnResponse>(st, &b).map_err(Failure::Gateway))
        {
            Ok(t) => t,
            Err(Failure::Gateway(GatewayError::LeaseNotFound)) => {
                // Nothing was put; the set starts over on a new lease (or
                // ends, if cancelled: see `lease_lost`).
                return self.lease_lost(
                    now,
                    lease,
                    LostReason::RenewalFailed("the lease no longer exists".into()),
                );
            }
            Err(f) => {
                // Unknown outcome: whatever it put goes in the background.
                let error = self.backend_error(&first, f);
                return self.cleanup_set(now, op, None, ending.unwrap_or(Ending::Error(error)));
            }
        };
        let Some(s) = self.set_mut(op) else { return };
        let rev = if txn.succeeded {
            Some(txn.header.revision)
        } else {
            match earlier_attempt(&s.members, &txn) {
                Earlier::Applied(r) => Some(r),
                Earlier::Partly => {
                    // A set is put whole or not at all: a partial one is a
                    // reply we cannot trust. Delete what may be ours.
                    self.orphan_set_keys(now, op, None);
                    let error =
                        self.set_malformed(&first, "keys of one txn at different revisions");
                    return self.finish_set(now, op, ending.unwrap_or(Ending::Error(error)));
                }
                Earlier::Not => None,
            }
        };
        let Some(rev) = rev else {
            return self.finish_set(now, op, ending.unwrap_or(Ending::NotAcquired));
        };
        if rev <= 0 {
            let error = self.set_malformed(&first, "txn reply without revision");
            return self.cleanup_set(now, op, None, ending.unwrap_or(Ending::Error(error)));
        }
        if let Some(ending) = ending {
            // Cancelled while the txn was in flight, and it applied.
            return self.cleanup_set(now, op, Some(rev), ending);
        }
        self.grant_set(now, op, lease, rev);
    }

    fn set_malformed(&self, name: &str, what: &str) -> LockError {
        LockError::Backend {
            backend: BACKEND,
            name: name.to_string(),
            status: None,
            message: format!("malformed reply: {what}"),
        }
    }

    /// Every key of the set exists at `rev`: each name is an ordinary held
    /// exclusive lock (see [`Self::grant_lock`]).
    fn grant_set(&mut self, now: Millis, op: OpId, lease: i64, rev: i64) {
        let expires_at = match self.leases.get(&lease) {
            Some(l) if l.expires_at > now => l.expires_at,
            // The keys go with the lease; the set starts over (`lease_lost`).
            _ => return self.lease_lost(now, lease, LostReason::Expired),
        };
        let Some(Op {
            kind: OpKind::AcquireSet(s),
            ..
        }) = self.ops.remove(&op)
        else {
            return;
        };
        let mut infos = Vec::with_capacity(s.members.len());
        for m in s.members {
            let lock = self.rt.out.lock_id();
            let handle = LockHandle {
                v: 1,
                backend: BackendKind::Etcd,
                name: m.name.clone(),
                key: String::from_utf8_lossy(&m.key).into_owned(),
                owner: lease.to_string(),
                fencing_token: rev as u64,
                revision: rev as u64,
                kind: LockKind::Exclusive,
                slot: None,
            };
            // The name stays claimed locally: by the held lock now.
            self.locks.insert(
                lock,
                HeldLock {
                    name: m.name.clone(),
                    key: m.key,
                    rev,
                    lease,
                    kind: HeldKind::Exclusive,
                    releasing: false,
                    reentered: false,
                },
            );
            infos.push(LockInfo {
                id: lock,
                name: m.name,
                fencing_token: rev as u64,
                expires_at,
                handle,
            });
        }
        self.rt.out.complete(op, Ok(Outcome::AcquiredAll(infos)));
    }

    /// The session lease `lease` is gone: a set on it starts over (its txn,
    /// if it applies at all, put its keys on the dead lease), or ends if it
    /// was cancelled or keeps losing its lease.
    pub(in super::super) fn sets_on_lost_lease(&mut self, now: Millis, lease: i64) {
        let sets: Vec<OpId> = self
            .ops
            .iter()
            .filter(|(_, o)| matches!(&o.kind, OpKind::AcquireSet(s) if s.lease == Some(lease)))
            .map(|(id, _)| *id)
            .collect();
        for op in sets {
            let Some(s) = self.set_mut(op) else { continue };
            if let Some(ending) = s.ending.clone() {
                self.finish_set(now, op, ending);
            } else if s.restarts >= MAX_RESTARTS {
                let error = LockError::Backend {
                    backend: BACKEND,
                    name: s.members[0].name.clone(),
                    status: None,
                    message: "the session lease keeps disappearing".into(),
                };
                self.finish_set(now, op, Ending::Error(error));
            } else {
                s.restarts += 1;
                s.lease = None;
                s.phase = SetPhase::NeedLease;
                let req = self.ops.get_mut(&op).and_then(|o| o.req.take());
                self.cancel_request(req);
                self.set_step(now, op);
            }
        }
    }
}

/// Whether an earlier attempt of a set's txn (retried after a transport
/// error) applied, as its failed compare read back.
enum Earlier {
    /// Every key is ours, all of this one revision.
    Applied(i64),
    /// Some keys are ours, or at different revisions.
    Partly,
    Not,
}

fn earlier_attempt(members: &[Member], txn: &TxnResponse) -> Earlier {
    let found: Vec<Option<i64>> = members
        .iter()
        .enumerate()
        .map(|(i, m)| {
            txn.range(i)
                .and_then(|r| r.kvs.iter().find(|kv| kv.key == m.key))
                .filter(|kv| kv.value == m.nonce)
                .map(|kv| kv.create_revision)
        })
        .collect();
    match found.first() {
        Some(Some(r)) if found.iter().all(|f| *f == Some(*r)) => Earlier::Applied(*r),
        _ if found.iter().any(|f| f.is_some()) => Earlier::Partly,
        _ => Earlier::Not,
    }
}
