//! The acquire recipe as a state taken by value ([`Acquire`], its phase
//! [`AcqPhase`]): txn, predecessor watch, grant. What the kinds differ in
//! is [`AcquireKind`] (`kind.rs`); the semaphore's and the reader's own
//! steps are `permits.rs` and `shared.rs` (with their keys' layout, which
//! inspect, resume and the ghost sweep read too); removing our key when the
//! acquire gives up is `cleanup.rs`; `entries.rs` is how the machine reaches
//! the state between answers (timers, the watch stream, cancel, a lost lease).
//!
//! Every step takes the state out of the op table, acts on the machine
//! (`m`), and returns the [`Next`] thing it waits for: a request's answer,
//! a watch, a timer, the session lease, or nothing (`Done`: answered).

mod cleanup;
mod entries;
pub(in crate::core::etcd::machine) mod kind;
pub(in crate::core::etcd::machine) mod permits;
pub(in crate::core::etcd::machine) mod shared;

use self::kind::AcquireKind;
use super::super::{EtcdMachine, Failure, HeldKind, HeldLock, BACKEND, MAX_RESTARTS};
use super::{Next, Reply};
use crate::core::etcd::gateway::{self as gw, GatewayError, TxnResponse};
use crate::core::{
    BackendKind, LockError, LockHandle, LockInfo, LostReason, Millis, OpId, Outcome, Wait,
};

impl Acquire {
    /// A lease can carry our key: put it there (the acquire txn).
    fn put_key(mut self, m: &mut EtcdMachine, op: OpId, lease: i64) -> Next {
        self.key = self.kind.key(&self.lock_prefix, lease, op);
        self.lease = Some(lease);
        self.phase = AcqPhase::Txn;
        // The lease is in use from now on: its timers must run.
        m.arm_lease(lease);
        let body = self.kind.acquire_body(&self, lease);
        Next::txn(self, body)
    }

    /// Re-reads our key's predecessor (after a watch event, a broken watch,
    /// or an earlier attempt of the txn that applied).
    pub(in crate::core::etcd::machine) fn recheck(mut self, m: &mut EtcdMachine, op: OpId) -> Next {
        self.phase = AcqPhase::Predecessor;
        m.set_recheck(op, None);
        let body = self.kind.check_body(&self);
        Next::txn(self, body)
    }

    /// The answer to the acquire's request.
    pub(in crate::core::etcd::machine) fn step(
        self,
        m: &mut EtcdMachine,
        now: Millis,
        op: OpId,
        reply: Reply,
    ) -> Next {
        let (phase, lease) = (self.phase.clone(), self.lease);
        if phase == AcqPhase::Cleanup {
            return self.on_cleanup_reply(m, now, op, reply.result);
        }
        if let Some(ending) = self.ending.clone() {
            // Cancelled or timed out while this txn was in flight (see `cleanup`).
            return self.cleanup_after_txn(m, now, op, phase, ending, reply.result);
        }
        if phase == AcqPhase::RemoveStale {
            return self.after_stale_removal(m, now, op, reply.result);
        }
        match reply.txn() {
            Ok(txn) => self.on_txn(m, now, op, phase, txn),
            Err(Failure::Gateway(GatewayError::LeaseNotFound)) => match lease {
                Some(lease) => Next::LeaseLost {
                    reason: LostReason::RenewalFailed("the lease no longer exists".into()),
                    state: Box::new(self.into()),
                    lease,
                },
                None => Next::keep(self, None),
            },
            Err(f) => {
                let err = m.backend_error(&self.name, f);
                self.cleanup(m, now, op, None, Ending::Error(err))
            }
        }
    }

    /// A leftover key of ours is gone (or could not be removed).
    fn after_stale_removal(
        mut self,
        m: &mut EtcdMachine,
        now: Millis,
        op: OpId,
        result: Result<(u16, Vec<u8>), Failure>,
    ) -> Next {
        match result {
            Ok(_) => {
                self.phase = AcqPhase::NeedLease;
                Next::AwaitLease(Box::new(self.into()))
            }
            Err(f) => {
                let err = m.backend_error(&self.name, f);
                self.finish(m, now, op, None, Ending::Error(err))
            }
        }
    }

    /// An acquire's txn answered: a permit's and a reader's go to their own
    /// files (`permits.rs`, `shared.rs`), a lock's (and a campaign's) on here.
    fn on_txn(
        self,
        m: &mut EtcdMachine,
        now: Millis,
        op: OpId,
        phase: AcqPhase,
        txn: TxnResponse,
    ) -> Next {
        // A failed compare of an acquire txn is the lock's case for every
        // kind: our key existed (see `lock_key_existed`).
        if self.kind.own_key() && (phase != AcqPhase::Txn || txn.succeeded) {
            if txn.header.revision <= 0 {
                return self.malformed(m, now, op, "txn reply without revision");
            }
            return match self.kind {
                AcquireKind::Permit(_) => self.on_permit_txn(m, now, op, phase, txn),
                _ => self.on_shared_txn(m, now, op, phase, txn),
            };
        }
        if txn.header.revision <= 0 || txn.range(0).is_none() {
            return self.malformed(m, now, op, "txn reply without revision or range");
        }
        match phase {
            AcqPhase::Txn if txn.succeeded => self.lock_key_put(m, now, op, &txn),
            AcqPhase::Txn => self.lock_key_existed(m, now, op, &txn),
            AcqPhase::Predecessor => {
                let (predecessor, own_present) = predecessor_read(&self, &txn);
                let revision = txn.header.revision;
                self.wait_or_grant(m, now, op, revision, predecessor, own_present)
            }
            _ => Next::keep(self, None),
        }
    }

    /// The acquire txn put our key: refuse a semaphore's name, else go on
    /// with our predecessor, if any.
    fn lock_key_put(
        mut self,
        m: &mut EtcdMachine,
        now: Millis,
        op: OpId,
        txn: &TxnResponse,
    ) -> Next {
        self.my_rev = txn.header.revision;
        // The oldest key decides what the name is: a semaphore's
        // (its value carries the limit) is no lock to wait for.
        if let Some(permits::KeyKind::Permit(limit)) = txn
            .range(1)
            .and_then(|r| r.kvs.first())
            .map(|kv| permits::key_kind(&kv.value))
        {
            let name = &self.name;
            let message = format!("{name:?} is a semaphore of {limit}, not an exclusive lock");
            return self.cleanup(m, now, op, None, Ending::Error(LockError::invalid(message)));
        }
        let newest = txn.range(0).map(|r| r.kvs.clone()).unwrap_or_default();
        let pred = newest
            .iter()
            .find(|kv| kv.key != self.key && kv.create_revision < self.my_rev)
            .map(|kv| kv.key.clone());
        self.wait_or_grant(m, now, op, txn.header.revision, pred, true)
    }

    /// Our key already existed: an earlier attempt applied (learn its
    /// revision and check the predecessor), or it is a leftover of an
    /// earlier incarnation (remove exactly it, then try again with a fresh key).
    fn lock_key_existed(
        mut self,
        m: &mut EtcdMachine,
        now: Millis,
        op: OpId,
        txn: &TxnResponse,
    ) -> Next {
        let found = txn
            .range(0)
            .and_then(|r| r.kvs.iter().find(|kv| kv.key == self.key))
            .cloned();
        match found {
            // A revision is positive; anything else is a hostile reply.
            Some(kv) if kv.value == self.nonce && kv.create_revision > 0 => {
                self.my_rev = kv.create_revision;
                self.recheck(m, op)
            }
            Some(kv) => {
                self.restarts += 1;
                if self.restarts > MAX_RESTARTS {
                    return self.malformed(m, now, op, "a stale key cannot be removed");
                }
                self.phase = AcqPhase::RemoveStale;
                Next::txn(self, gw::delete_if_revision(&kv.key, kv.create_revision))
            }
            None => {
                let revision = txn.header.revision;
                self.wait_or_grant(m, now, op, revision, None, false)
            }
        }
    }

    /// Our key's predecessor is known: hold, give up (a try) or watch it.
    fn wait_or_grant(
        mut self,
        m: &mut EtcdMachine,
        now: Millis,
        op: OpId,
        revision: i64,
        predecessor: Option<Vec<u8>>,
        own_present: bool,
    ) -> Next {
        if !own_present || self.my_rev <= 0 {
            return self.restart(m, now, op);
        }
        match predecessor {
            None => self.grant(m, now, op, None),
            Some(_) if self.wait == Wait::Try => {
                self.cleanup(m, now, op, None, Ending::NotAcquired)
            }
            Some(pred) => {
                self.phase = AcqPhase::Watch;
                Next::watch(self, gw::watch_delete(&pred, revision.saturating_add(1)))
            }
        }
    }

    /// Our key vanished (deleted, or the lease expired): start over.
    pub(in crate::core::etcd::machine) fn restart(
        mut self,
        m: &mut EtcdMachine,
        now: Millis,
        op: OpId,
    ) -> Next {
        self.restarts += 1;
        if self.restarts > MAX_RESTARTS {
            return self.malformed(m, now, op, "our key keeps vanishing");
        }
        self.phase = AcqPhase::NeedLease;
        self.my_rev = 0;
        if let Some(p) = self.kind.permit_mut() {
            // A slot claimed on the vanished key's lease went with it.
            p.forget_claims();
        }
        Next::AwaitLease(Box::new(self.into()))
    }

    /// Our key is the lowest (a lock), or we claimed `slot` = (slot, its
    /// key's create revision) of a semaphore: hand the hold out if our lease
    /// is still valid.
    pub(in crate::core::etcd::machine) fn grant(
        self,
        m: &mut EtcdMachine,
        now: Millis,
        op: OpId,
        slot: Option<(u32, i64)>,
    ) -> Next {
        let lease = self.lease.unwrap_or(0);
        let expires_at = match m.leases.get(&lease) {
            Some(l) if l.expires_at > now => l.expires_at,
            _ => {
                return Next::LeaseLost {
                    state: Box::new(self.into()),
                    lease,
                    reason: LostReason::Expired,
                }
            }
        };
        m.clear_acquire_timers(op);
        let lock = m.rt.out.lock_id();
        let (kind, token) = self.kind.granted(self.my_rev, slot.map(|(_, rev)| rev));
        let handle = LockHandle {
            v: 1,
            backend: BackendKind::Etcd,
            name: self.name.clone(),
            key: String::from_utf8_lossy(&self.key).into_owned(),
            owner: lease.to_string(),
            fencing_token: token as u64,
            revision: self.my_rev as u64,
            kind,
            slot: slot.map(|s| s.0),
        };
        let slot = slot.map(|(s, rev)| (s, permits::slot_key(&self.lock_prefix, s), rev));
        m.locks.insert(
            lock,
            HeldLock {
                name: self.name.clone(),
                key: self.key,
                rev: self.my_rev,
                lease,
                kind: HeldKind::new(kind, slot),
                releasing: false,
                reentered: false,
            },
        );
        let info = LockInfo {
            id: lock,
            name: self.name,
            fencing_token: token as u64,
            expires_at,
            handle,
        };
        m.rt.out.complete(op, Ok(Outcome::Acquired(info)));
        Next::Done
    }

    /// A reply that makes no sense: give up (removing our key) with a
    /// backend error.
    pub(in crate::core::etcd::machine) fn malformed(
        self,
        m: &mut EtcdMachine,
        now: Millis,
        op: OpId,
        message: &str,
    ) -> Next {
        let error = LockError::Backend {
            backend: BACKEND,
            name: self.name.clone(),
            status: None,
            message: format!("malformed reply: {message}"),
        };
        self.cleanup(m, now, op, None, Ending::Error(error))
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
