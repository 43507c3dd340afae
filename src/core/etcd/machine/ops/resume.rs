//! Resume: adopting a hold from its handle (another process's, or this
//! one's before a restart). One txn reads the handle's keys (each must still
//! be that incarnation, on the handle's lease, with a value of the handle's
//! kind), then a keepalive of the handle's lease proves it alive and says
//! how long the hold lasts.

use super::super::{election, permits, shared, EtcdMachine, HeldKind, HeldLock, Lease, BACKEND};
use super::{Next, Reply};
use crate::core::etcd::gateway::{self as gw, KeyValue, TxnResponse};
use crate::core::{
    BackendKind, LockError, LockHandle, LockInfo, LockKind, Millis, OpId, Outcome, MAX_PERMITS,
};

pub(in super::super) struct ResumeOp {
    handle: LockHandle,
    /// The handle's lease (its owner).
    lease: i64,
    phase: Phase,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// The read of the handle's keys is in flight.
    ReadKey,
    /// The keepalive of the handle's lease is in flight.
    KeepAlive,
}

impl ResumeOp {
    /// The lease the resumed hold lives on.
    pub(in super::super) fn lease(&self) -> i64 {
        self.lease
    }

    /// The name of the lock being resumed.
    pub(in super::super) fn name(&self) -> &str {
        &self.handle.name
    }

    /// Checks `handle` and claims its name: the op and its first request.
    pub(in super::super) fn start(
        m: &mut EtcdMachine,
        handle: &LockHandle,
    ) -> Result<(OpId, Next), LockError> {
        let lease = check_handle(m, handle)?;
        // Permits and shared holds have keys of their own per acquisition (no
        // local claim of the name), but the same hold is not adopted twice.
        let own_key = !claims_name(handle.kind);
        if own_key && m.locks.values().any(|l| l.key == handle.key.as_bytes()) {
            let what = if handle.kind == LockKind::Shared {
                "shared hold"
            } else {
                "permit"
            };
            return Err(LockError::invalid(format!(
                "this {what} of {:?} is already held by this client",
                handle.name
            )));
        }
        let op = m.rt.out.op_id();
        if !own_key && !m.claim_name(&handle.name, op) {
            m.unqueue_local(&handle.name, op);
            return Err(LockError::invalid(format!(
                "lock {:?} is already held or being acquired by this client",
                handle.name
            )));
        }
        let keys = m.resume_keys(handle);
        let body = gw::read_values_txn(keys.iter().map(|(k, _)| k.as_slice()));
        let state = ResumeOp {
            handle: handle.clone(),
            lease,
            phase: Phase::ReadKey,
        };
        Ok((op, Next::txn(state, body)))
    }

    pub(in super::super) fn step(
        self,
        m: &mut EtcdMachine,
        now: Millis,
        op: OpId,
        reply: Reply,
    ) -> Next {
        match self.phase {
            Phase::ReadKey => self.on_read(m, now, op, reply),
            Phase::KeepAlive => self.on_keepalive(m, now, op, reply),
        }
    }

    fn on_read(self, m: &mut EtcdMachine, now: Millis, op: OpId, reply: Reply) -> Next {
        match reply.txn() {
            Ok(t) if self.keys_held(m, &t) => {
                // Is it still the holder? No key of the lock may be older.
                let lease = self.lease;
                let ttl_ms = m.session_ttl_ms;
                m.leases
                    .get_or_insert_with(lease, || Lease::unconfirmed(ttl_ms, now));
                let phase = Phase::KeepAlive;
                Next::keepalive(ResumeOp { phase, ..self }, lease)
            }
            Ok(_) => {
                let error = self.lost("the key no longer exists");
                self.fail(m, now, op, error)
            }
            Err(f) => {
                let error = m.backend_error(&self.handle.name, f);
                self.fail(m, now, op, error)
            }
        }
    }

    /// Whether `t` read each of the handle's keys as that incarnation, on
    /// the handle's lease (a permit's also with its semaphore's limit).
    fn keys_held(&self, m: &EtcdMachine, t: &TxnResponse) -> bool {
        m.resume_keys(&self.handle).iter().all(|(k, rev)| {
            t.responses
                .iter()
                .filter_map(|r| r.response_range.as_ref())
                .flat_map(|r| &r.kvs)
                .any(|kv| {
                    kv.key == *k
                        && kv.create_revision == *rev
                        && kv.lease == self.lease
                        && value_of_kind(self.handle.kind, kv)
                })
        })
    }

    fn on_keepalive(self, m: &mut EtcdMachine, now: Millis, op: OpId, reply: Reply) -> Next {
        match m.apply_keepalive(self.lease, reply.sent_at, reply.result) {
            Ok(expires_at) => {
                self.adopt(m, op, expires_at);
                Next::Done
            }
            Err(Ok(reason)) => {
                m.drop_lease_if_unused(self.lease, op);
                let error = self.lost(&reason.to_string());
                self.fail(m, now, op, error)
            }
            Err(Err(f)) => {
                m.drop_lease_if_unused(self.lease, op);
                let error = m.backend_error(&self.handle.name, f);
                self.fail(m, now, op, error)
            }
        }
    }

    /// The hold is ours: a lock of this machine, answered as acquired.
    fn adopt(self, m: &mut EtcdMachine, op: OpId, expires_at: Millis) {
        let ResumeOp { handle, lease, .. } = self;
        let lock = m.rt.out.lock_id();
        let slot = handle.slot.map(|s| {
            (
                s,
                permits::slot_key(&m.lock_prefix(&handle.name), s),
                handle.fencing_token as i64,
            )
        });
        m.locks.insert(
            lock,
            HeldLock {
                name: handle.name.clone(),
                key: handle.key.as_bytes().to_vec(),
                rev: handle.revision as i64,
                lease,
                kind: HeldKind::new(handle.kind, slot),
                releasing: false,
                reentered: false,
            },
        );
        let info = LockInfo {
            id: lock,
            name: handle.name.clone(),
            fencing_token: handle.fencing_token,
            expires_at,
            handle,
        };
        m.rt.out.complete(op, Ok(Outcome::Acquired(info)));
    }

    fn lost(&self, reason: &str) -> LockError {
        LockError::Lost {
            backend: BACKEND,
            name: self.handle.name.clone(),
            reason: reason.to_string(),
        }
    }

    /// Answers `error`; an exclusive lock's or a leadership's resume gives
    /// its local claim of the name up (a permit's or a reader's never had one).
    fn fail(self, m: &mut EtcdMachine, now: Millis, op: OpId, error: LockError) -> Next {
        m.rt.out.fail(op, error);
        if claims_name(self.handle.kind) {
            m.free_name(now, &self.handle.name);
        }
        Next::Done
    }
}

/// Whether a hold of `kind` claims its name locally (see `HeldLock::claims_name`).
fn claims_name(kind: LockKind) -> bool {
    matches!(kind, LockKind::Exclusive | LockKind::Leader)
}

/// Whether `kv`'s value is of a hold of `kind`: a permit's carries its
/// semaphore's limit, a reader's is a reader value, and a leadership's key
/// carries a campaign value, a lock's never.
fn value_of_kind(kind: LockKind, kv: &KeyValue) -> bool {
    match kind {
        LockKind::Permits { limit } => {
            permits::key_kind(&kv.value) == permits::KeyKind::Permit(limit)
        }
        LockKind::Shared => shared::is_shared_value(&kv.value),
        LockKind::Leader => election::is_leader_value(&kv.value),
        _ => !election::is_leader_value(&kv.value),
    }
}

/// Checks a handle against this machine's backend, prefix and the kinds it
/// offers; returns its lease.
fn check_handle(m: &EtcdMachine, handle: &LockHandle) -> Result<i64, LockError> {
    if handle.backend != BackendKind::Etcd {
        return Err(LockError::invalid(format!(
            "handle is for the {} backend, not etcd",
            handle.backend.as_str()
        )));
    }
    let prefix = String::from_utf8_lossy(&m.lock_prefix(&handle.name)).into_owned();
    let lease: i64 = handle
        .owner
        .parse()
        .map_err(|_| LockError::invalid("handle owner is not an etcd lease id"))?;
    let suffix = handle.key.strip_prefix(&prefix).unwrap_or("");
    let (key_ok, tokens_ok) = match (handle.kind, handle.slot) {
        (LockKind::Exclusive | LockKind::Leader, None) => (
            suffix == format!("{lease:x}"),
            handle.fencing_token == handle.revision,
        ),
        (LockKind::Shared, None) => (
            shared::is_reader_suffix_of(suffix, lease),
            handle.fencing_token == handle.revision,
        ),
        // A permit's token is its slot key's create revision, which is
        // created after its queue key.
        (LockKind::Permits { limit }, Some(slot)) if slot < limit && limit <= MAX_PERMITS => (
            permits::is_queue_suffix_of(suffix, lease),
            handle.fencing_token > handle.revision && handle.fencing_token <= i64::MAX as u64,
        ),
        (kind, _) => {
            return Err(LockError::invalid(format!(
                "the etcd backend does not offer {} holds",
                kind.describe()
            )))
        }
    };
    if !key_ok {
        return Err(LockError::invalid(
            "handle key does not belong to this lock name and prefix",
        ));
    }
    if handle.revision == 0 || handle.revision > i64::MAX as u64 || !tokens_ok {
        return Err(LockError::invalid(
            "handle revision/fencing token is not valid",
        ));
    }
    Ok(lease)
}
