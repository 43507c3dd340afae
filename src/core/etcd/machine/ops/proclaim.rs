//! Proclaim: one txn that puts a new campaign value on a leadership's key,
//! only while the key is that incarnation (see `election.rs`).

use super::super::election::leader_value;
use super::super::{EtcdMachine, Failure, BACKEND};
use super::{Next, Reply};
use crate::core::etcd::gateway::{self as gw, GatewayError};
use crate::core::{LockError, LockId, LostReason, Millis, OpId, Outcome};

pub(in super::super) struct ProclaimOp {
    lock: LockId,
}

impl ProclaimOp {
    /// The leadership this operation is about.
    pub(in super::super) fn lock(&self) -> LockId {
        self.lock
    }

    /// Starts proclaiming `value` on leadership `lock` (op `op`): its txn,
    /// or the answer `NotHeld` at once. The caller has checked that `lock`,
    /// if held, is a leadership.
    pub(in super::super) fn start(
        m: &mut EtcdMachine,
        op: OpId,
        lock: LockId,
        value: &str,
    ) -> Next {
        let (key, rev, lease) = match m.locks.get(&lock) {
            Some(h) if !h.releasing => (h.key.clone(), h.rev, h.lease),
            // Like extend: "not held" completes the operation.
            other => {
                let name =
                    other.map_or_else(|| "<released or lost lock>".to_string(), |h| h.name.clone());
                let error = LockError::NotHeld {
                    backend: BACKEND,
                    name,
                };
                m.rt.out.fail(op, error);
                return Next::Done;
            }
        };
        let body = gw::proclaim_txn(&key, rev, lease, &leader_value(value));
        Next::txn(ProclaimOp { lock }, body)
    }

    pub(in super::super) fn step(
        self,
        m: &mut EtcdMachine,
        now: Millis,
        op: OpId,
        reply: Reply,
    ) -> Next {
        let lock = self.lock;
        let Some(held) = m.locks.get(&lock) else {
            let error = LockError::NotHeld {
                backend: BACKEND,
                name: "<released or lost lock>".into(),
            };
            m.rt.out.fail(op, error);
            return Next::Done;
        };
        let (name, lease, releasing) = (held.name.clone(), held.lease, held.releasing);
        let lost = |reason: &LostReason| LockError::Lost {
            backend: BACKEND,
            name: name.clone(),
            reason: reason.to_string(),
        };
        match reply.txn() {
            Ok(t) if t.succeeded => m.rt.out.complete(op, Ok(Outcome::Proclaimed { lock })),
            Ok(_) if releasing => m.rt.out.fail(
                op,
                LockError::NotHeld {
                    backend: BACKEND,
                    name,
                },
            ),
            Ok(_) => {
                // The compare failed: this incarnation of the key is gone.
                m.rt.out.fail(op, lost(&LostReason::KeyGone));
                m.lose_lock(now, lock, LostReason::KeyGone);
            }
            Err(Failure::Gateway(GatewayError::LeaseNotFound)) => {
                let reason = LostReason::RenewalFailed("the lease no longer exists".into());
                m.rt.out.fail(op, lost(&reason));
                m.lease_lost(now, lease, reason);
            }
            Err(f) => {
                let e = m.backend_error(&name, f);
                m.rt.out.fail(op, e);
            }
        }
        Next::Done
    }
}
