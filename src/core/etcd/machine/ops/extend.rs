//! Extend: a keepalive of the hold's lease (its locks share it, so all of
//! them are extended), then one txn reading the hold's keys, so that an
//! extend never reports a lock whose key is gone as extended.

use super::super::{EtcdMachine, BACKEND};
use super::{Next, Reply};
use crate::core::etcd::gateway::{self as gw, TxnResponse};
use crate::core::{LockError, LockId, LostReason, Millis, OpId, Outcome};

pub(in super::super) struct ExtendOp {
    lock: LockId,
    phase: Phase,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// The lease's keepalive is in flight.
    KeepAlive,
    /// The read of the hold's keys is in flight.
    CheckKey,
}

/// What a step knows of the hold it extends.
struct Hold {
    name: String,
    lease: i64,
    keys: Vec<(Vec<u8>, i64)>,
}

impl ExtendOp {
    /// The lock this operation is about.
    pub(in super::super) fn lock(&self) -> LockId {
        self.lock
    }

    /// Starts an extend of `lock` (op `op`): its lease's keepalive, or the
    /// answer `NotHeld` at once.
    pub(in super::super) fn start(m: &mut EtcdMachine, op: OpId, lock: LockId) -> Next {
        match m.locks.get(&lock) {
            Some(h) if !h.releasing => {
                let lease = h.lease;
                let phase = Phase::KeepAlive;
                Next::keepalive(ExtendOp { lock, phase }, lease)
            }
            // Like every other outcome, "not held" completes the operation
            // (the Redis machine answers the same way).
            other => {
                let name =
                    other.map_or_else(|| "<released or lost lock>".to_string(), |h| h.name.clone());
                let error = LockError::NotHeld {
                    backend: BACKEND,
                    name,
                };
                m.rt.out.fail(op, error);
                Next::Done
            }
        }
    }

    pub(in super::super) fn step(
        self,
        m: &mut EtcdMachine,
        now: Millis,
        op: OpId,
        reply: Reply,
    ) -> Next {
        let Some(held) = m.locks.get(&self.lock) else {
            let error = LockError::NotHeld {
                backend: BACKEND,
                name: "<released or lost lock>".into(),
            };
            m.rt.out.fail(op, error);
            return Next::Done;
        };
        let hold = Hold {
            name: held.name.clone(),
            lease: held.lease,
            keys: held.keys(),
        };
        match self.phase {
            Phase::KeepAlive => self.on_keepalive(m, now, op, hold, reply),
            Phase::CheckKey => self.on_check(m, now, op, hold, reply),
        }
    }

    fn on_keepalive(
        self,
        m: &mut EtcdMachine,
        now: Millis,
        op: OpId,
        h: Hold,
        reply: Reply,
    ) -> Next {
        match m.apply_keepalive(h.lease, reply.sent_at, reply.result) {
            Ok(_) => {
                let body = gw::read_keys_txn(h.keys.iter().map(|(k, _)| k.as_slice()));
                let phase = Phase::CheckKey;
                Next::txn(ExtendOp { phase, ..self }, body)
            }
            Err(Ok(reason)) => {
                let error = LockError::Lost {
                    backend: BACKEND,
                    name: h.name,
                    reason: reason.to_string(),
                };
                m.rt.out.fail(op, error);
                m.lease_lost(now, h.lease, reason);
                Next::Done
            }
            Err(Err(f)) => {
                let error = m.backend_error(&h.name, f);
                m.rt.out.fail(op, error);
                Next::Done
            }
        }
    }

    fn on_check(self, m: &mut EtcdMachine, now: Millis, op: OpId, h: Hold, reply: Reply) -> Next {
        let lock = self.lock;
        match reply.txn() {
            Ok(t) if all_present(&t, &h.keys) => {
                let expires_at = m.leases.get(&h.lease).map(|l| l.expires_at).unwrap_or(now);
                m.rt.out
                    .complete(op, Ok(Outcome::Extended { lock, expires_at }));
            }
            Ok(_) if m.locks.get(&lock).map(|l| l.releasing).unwrap_or(true) => {
                // Released meanwhile: the key is gone by our own hand.
                let error = LockError::NotHeld {
                    backend: BACKEND,
                    name: h.name,
                };
                m.rt.out.fail(op, error);
            }
            Ok(_) => {
                let error = LockError::Lost {
                    backend: BACKEND,
                    name: h.name,
                    reason: LostReason::KeyGone.to_string(),
                };
                m.rt.out.fail(op, error);
                m.lose_lock(now, lock, LostReason::KeyGone);
            }
            Err(f) => {
                let error = m.backend_error(&h.name, f);
                m.rt.out.fail(op, error);
            }
        }
        Next::Done
    }
}

/// Whether the txn read every key, each still that incarnation.
fn all_present(t: &TxnResponse, keys: &[(Vec<u8>, i64)]) -> bool {
    keys.iter().all(|(k, rev)| {
        t.responses
            .iter()
            .filter_map(|r| r.response_range.as_ref())
            .flat_map(|r| &r.kvs)
            .any(|kv| kv.key == *k && kv.create_revision == *rev)
    })
}
