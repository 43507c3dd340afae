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

use super::super::{EtcdMachine, Failure, HeldKind, HeldLock, Orphan, BACKEND, MAX_RESTARTS};
use super::acquire::Ending;
use super::{Next, Op, OpKind, Reply};
use crate::core::etcd::gateway::{self as gw, GatewayError, TxnResponse};
use crate::core::{
    random_hex, AcquireOptions, BackendKind, LockError, LockHandle, LockInfo, LockKind, LostReason,
    Millis, OpId, Outcome, RequestId,
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

    /// Takes set `op` (with its request in flight) out of the table, steps
    /// it with `f`, and follows what the step returns. Nothing if `op` is
    /// no set (any more).
    fn with_set(
        &mut self,
        now: Millis,
        op: OpId,
        f: impl FnOnce(AcquireSet, &mut EtcdMachine, Option<RequestId>) -> Next,
    ) {
        if self.set_mut(op).is_none() {
            return;
        }
        let Some(Op {
            req,
            kind: OpKind::AcquireSet(s),
        }) = self.ops.remove(&op)
        else {
            return;
        };
        let next = f(s, self, req);
        self.follow(now, op, next);
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

    /// Sends the set's txn once the session lease exists. The set stays in
    /// the table while the lease is looked at (a lease a set is on counts
    /// as in use).
    pub(in super::super) fn set_step(&mut self, now: Millis, op: OpId) {
        if self.set_mut(op).map(|s| s.phase) != Some(SetPhase::NeedLease) {
            return;
        }
        let Some(lease) = self.usable_session_lease(now) else {
            return;
        };
        self.with_set(now, op, |s, m, _| s.put_keys(m, lease));
    }

    /// The caller cancelled the set: at once while it waits for the lease;
    /// with its txn in flight, once the answer tells what to delete.
    pub(in super::super) fn cancel_set(&mut self, now: Millis, op: OpId) {
        self.with_set(now, op, |s, m, req| s.cancel(m, now, op, req));
    }

    /// Ends set `op` with `ending` (see [`AcquireSet::finish`]).
    pub(in super::super) fn finish_set(&mut self, now: Millis, op: OpId, ending: Ending) {
        self.with_set(now, op, |s, m, req| s.finish(m, now, op, req, ending));
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
            self.with_set(now, op, |s, m, req| s.on_lease_lost(m, now, op, req));
        }
    }
}

impl AcquireSet {
    /// The session lease `lease` can carry the keys: the set's txn.
    fn put_keys(mut self, m: &mut EtcdMachine, lease: i64) -> Next {
        for member in &mut self.members {
            // The key layout of an ordinary exclusive acquire (`AcquireKind::key`).
            member.key = [
                member.lock_prefix.as_slice(),
                format!("{lease:x}").as_bytes(),
            ]
            .concat();
        }
        self.lease = Some(lease);
        self.phase = SetPhase::Txn;
        let body = gw::acquire_set_txn(
            &self
                .members
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
        m.arm_lease(lease);
        Next::txn(self, body)
    }

    /// The caller cancelled (`req`: the request in flight).
    fn cancel(
        mut self,
        m: &mut EtcdMachine,
        now: Millis,
        op: OpId,
        req: Option<RequestId>,
    ) -> Next {
        if self.ending.is_some() {
            return Next::keep(self, req);
        }
        let aborted = Ending::Error(LockError::Aborted {
            backend: BACKEND,
            name: self.members[0].name.clone(),
        });
        match self.phase {
            SetPhase::NeedLease => self.finish(m, now, op, req, aborted),
            SetPhase::Txn => {
                self.ending = Some(aborted);
                Next::keep(self, req)
            }
            SetPhase::Cleanup => Next::keep(self, req),
        }
    }

    /// Ends the set without a key left (or with its keys handed to the
    /// orphans, which keep their names busy): frees the other names.
    fn finish(
        self,
        m: &mut EtcdMachine,
        now: Millis,
        op: OpId,
        req: Option<RequestId>,
        ending: Ending,
    ) -> Next {
        m.cancel_request(req);
        m.report_ending(op, &self.members[0].name, ending);
        for member in &self.members {
            if !m
                .orphans
                .iter()
                .any(|o| o.name == member.name && o.holds_name)
            {
                m.free_name(now, &member.name);
            }
        }
        Next::Done
    }

    /// The set ends with `ending` once its keys (put at `rev`, or perhaps put
    /// at all when `None`) are deleted, all or none, by one txn.
    fn cleanup(mut self, rev: Option<i64>, ending: Ending) -> Next {
        self.phase = SetPhase::Cleanup;
        self.ending = Some(ending);
        self.rev = rev;
        let body = match rev {
            Some(rev) => gw::delete_all_if_revisions(
                &self
                    .members
                    .iter()
                    .map(|m| (m.key.as_slice(), rev))
                    .collect::<Vec<_>>(),
            ),
            None => gw::delete_all_if_values(
                &self
                    .members
                    .iter()
                    .map(|m| (m.key.as_slice(), m.nonce.as_slice()))
                    .collect::<Vec<_>>(),
            ),
        };
        Next::txn(self, body)
    }

    /// Every key of the set may exist: delete each in the background
    /// (exactly `rev`, or exactly our value when the revision is unknown).
    fn orphan_keys(&self, m: &mut EtcdMachine, now: Millis, rev: Option<i64>) {
        let lease = self.lease.unwrap_or(0);
        let orphans = self.members.iter().map(|member| Orphan {
            name: member.name.clone(),
            key: member.key.clone(),
            rev,
            value: rev.is_none().then(|| member.nonce.clone()),
            holds_name: true,
            lease,
            retry_at: now,
            req: None,
        });
        m.orphans.extend(orphans);
        m.arm_orphans();
    }

    /// The answer to the set's request (its txn, or its keys' deletion).
    pub(in super::super) fn step(
        self,
        m: &mut EtcdMachine,
        now: Millis,
        op: OpId,
        reply: Reply,
    ) -> Next {
        let (lease, first) = (self.lease.unwrap_or(0), self.members[0].name.clone());
        let ending = self.ending.clone();
        if self.phase == SetPhase::Cleanup {
            let ending = ending.unwrap_or(Ending::NotAcquired);
            if !matches!(&reply.result, Ok((st, _)) if (200..300).contains(st)) {
                // Keep deleting in the background; the names stay busy.
                self.orphan_keys(m, now, self.rev);
            }
            return self.finish(m, now, op, None, ending);
        }
        match reply.txn() {
            Ok(txn) => self.on_txn(m, now, op, txn),
            // Nothing was put; the set starts over on a new lease (or
            // ends, if cancelled: see `on_lease_lost`).
            Err(Failure::Gateway(GatewayError::LeaseNotFound)) => Next::LeaseLost {
                state: Box::new(self.into()),
                lease,
                reason: LostReason::RenewalFailed("the lease no longer exists".into()),
            },
            Err(f) => {
                // Unknown outcome: whatever it put goes in the background.
                let error = m.backend_error(&first, f);
                self.cleanup(None, ending.unwrap_or(Ending::Error(error)))
            }
        }
    }

    /// The set's txn answered: granted, not acquired, or (cancelled
    /// meanwhile, or a reply we cannot trust) its keys deleted.
    fn on_txn(self, m: &mut EtcdMachine, now: Millis, op: OpId, txn: TxnResponse) -> Next {
        let (lease, first) = (self.lease.unwrap_or(0), self.members[0].name.clone());
        let ending = self.ending.clone();
        let rev = if txn.succeeded {
            Some(txn.header.revision)
        } else {
            match earlier_attempt(&self.members, &txn) {
                Earlier::Applied(r) => Some(r),
                Earlier::Partly => {
                    // A set is put whole or not at all: a partial one is a
                    // reply we cannot trust. Delete what may be ours.
                    self.orphan_keys(m, now, None);
                    let error = set_malformed(&first, "keys of one txn at different revisions");
                    return self.finish(m, now, op, None, ending.unwrap_or(Ending::Error(error)));
                }
                Earlier::Not => None,
            }
        };
        let Some(rev) = rev else {
            return self.finish(m, now, op, None, ending.unwrap_or(Ending::NotAcquired));
        };
        if rev <= 0 {
            let error = set_malformed(&first, "txn reply without revision");
            return self.cleanup(None, ending.unwrap_or(Ending::Error(error)));
        }
        if let Some(ending) = ending {
            // Cancelled while the txn was in flight, and it applied.
            return self.cleanup(Some(rev), ending);
        }
        self.grant(m, now, op, lease, rev)
    }

    /// Every key of the set exists at `rev`: each name is an ordinary held
    /// exclusive lock (see `Acquire::grant`).
    fn grant(self, m: &mut EtcdMachine, now: Millis, op: OpId, lease: i64, rev: i64) -> Next {
        let expires_at = match m.leases.get(&lease) {
            Some(l) if l.expires_at > now => l.expires_at,
            // The keys go with the lease; the set starts over (`on_lease_lost`).
            _ => {
                return Next::LeaseLost {
                    state: Box::new(self.into()),
                    lease,
                    reason: LostReason::Expired,
                }
            }
        };
        let mut infos = Vec::with_capacity(self.members.len());
        for member in self.members {
            let lock = m.rt.out.lock_id();
            let handle = LockHandle {
                v: 1,
                backend: BackendKind::Etcd,
                name: member.name.clone(),
                key: String::from_utf8_lossy(&member.key).into_owned(),
                owner: lease.to_string(),
                fencing_token: rev as u64,
                revision: rev as u64,
                kind: LockKind::Exclusive,
                slot: None,
            };
            // The name stays claimed locally: by the held lock now.
            m.locks.insert(
                lock,
                HeldLock {
                    name: member.name.clone(),
                    key: member.key,
                    rev,
                    lease,
                    kind: HeldKind::Exclusive,
                    releasing: false,
                    reentered: false,
                },
            );
            infos.push(LockInfo {
                id: lock,
                name: member.name,
                fencing_token: rev as u64,
                expires_at,
                handle,
            });
        }
        m.rt.out.complete(op, Ok(Outcome::AcquiredAll(infos)));
        Next::Done
    }

    /// The lease the set is on is lost.
    fn on_lease_lost(
        mut self,
        m: &mut EtcdMachine,
        now: Millis,
        op: OpId,
        req: Option<RequestId>,
    ) -> Next {
        if let Some(ending) = self.ending.clone() {
            return self.finish(m, now, op, req, ending);
        }
        if self.restarts >= MAX_RESTARTS {
            let error = LockError::Backend {
                backend: BACKEND,
                name: self.members[0].name.clone(),
                status: None,
                message: "the session lease keeps disappearing".into(),
            };
            return self.finish(m, now, op, req, Ending::Error(error));
        }
        self.restarts += 1;
        self.lease = None;
        self.phase = SetPhase::NeedLease;
        m.cancel_request(req);
        Next::AwaitLease(Box::new(self.into()))
    }
}

fn set_malformed(name: &str, what: &str) -> LockError {
    LockError::Backend {
        backend: BACKEND,
        name: name.to_string(),
        status: None,
        message: format!("malformed reply: {what}"),
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
