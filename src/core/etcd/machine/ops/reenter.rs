//! Re-entry ([`crate::core::Operation::Reenter`]): one more hold of an
//! exclusive lock, by its handle. A keepalive of the handle's lease first
//! (it must be alive; it also tells how long the hold lasts), then the count
//! txn, a CAS retried while other holders change the count (see
//! `hold_count.rs` for the count key).

use super::super::{EtcdMachine, HeldKind, HeldLock, Lease, BACKEND};
use super::hold_count::{
    broken_reply, count_contended, count_value, parse_count, read_back, CountKey, MAX_COUNT_TRIES,
};
use super::{Next, Reply};
use crate::core::etcd::gateway::{self as gw, TxnResponse};
use crate::core::{
    random_hex, BackendKind, LockError, LockHandle, LockInfo, LockKind, Millis, OpId, Outcome,
};

/// A re-entry in progress.
pub(in super::super) struct ReenterOp {
    handle: LockHandle,
    /// The lock's lease (the handle's owner), renewed by this client while
    /// it holds the re-entered hold.
    lease: i64,
    /// The count txn is in flight (else the keepalive).
    counting: bool,
    /// Written into our count value: a retried txn that already applied is
    /// recognised by it.
    nonce: Vec<u8>,
    tries: u32,
}

/// What a count step knows of the lock.
struct Lock {
    name: String,
    key: Vec<u8>,
    rev: i64,
    count_key: Vec<u8>,
}

impl ReenterOp {
    /// The lease the re-entered hold lives on.
    pub(in super::super) fn lease(&self) -> i64 {
        self.lease
    }

    /// The name of the lock re-entered.
    pub(in super::super) fn name(&self) -> &str {
        &self.handle.name
    }

    /// Checks `handle`, borrows its lease: the op and its keepalive.
    pub(in super::super) fn start(
        m: &mut EtcdMachine,
        now: Millis,
        handle: &LockHandle,
    ) -> Result<(OpId, Next), LockError> {
        let lease = check_handle(m, handle)?;
        let nonce = random_hex(m.entropy.as_mut(), 8).into_bytes();
        let op = m.rt.out.op_id();
        // Another owner's lease (another client's session): never revoked
        // by our close (see `close`).
        if !m.leases.contains_key(&lease) && !m.borrowed.contains(&lease) {
            m.borrowed.push(lease);
        }
        // Like a resume: renew the lock's lease first (it must be alive),
        // which also tells how long the hold is valid.
        let ttl_ms = m.session_ttl_ms;
        m.leases
            .get_or_insert_with(lease, || Lease::unconfirmed(ttl_ms, now));
        let state = ReenterOp {
            handle: handle.clone(),
            lease,
            counting: false,
            nonce,
            tries: 0,
        };
        Ok((op, Next::keepalive(state, lease)))
    }

    pub(in super::super) fn step(
        self,
        m: &mut EtcdMachine,
        now: Millis,
        op: OpId,
        reply: Reply,
    ) -> Next {
        let lock = Lock {
            name: self.handle.name.clone(),
            key: self.handle.key.as_bytes().to_vec(),
            rev: self.handle.revision as i64,
            count_key: m.count_key(&self.handle.name),
        };
        if !self.counting {
            return self.on_keepalive(m, op, lock, reply);
        }
        let t = match reply.txn() {
            Ok(t) => t,
            Err(f) => {
                let e = m.backend_error(&lock.name, f);
                return self.fail(m, op, e);
            }
        };
        if t.succeeded {
            return self.counted(m, now, op, lock);
        }
        self.on_compare_failed(m, now, op, lock, &t)
    }

    fn on_keepalive(self, m: &mut EtcdMachine, op: OpId, lock: Lock, reply: Reply) -> Next {
        match m.apply_keepalive(self.lease, reply.sent_at, reply.result) {
            Ok(_) => {
                let value = count_value(lock.rev, 2, &self.nonce);
                let body =
                    gw::put_count_txn(&lock.key, lock.rev, &lock.count_key, 0, self.lease, &value);
                let state = ReenterOp {
                    counting: true,
                    tries: 1,
                    ..self
                };
                Next::txn(state, body)
            }
            Err(Ok(reason)) => {
                let e = lost(&lock.name, &reason.to_string());
                self.fail(m, op, e)
            }
            Err(Err(f)) => {
                let e = m.backend_error(&lock.name, f);
                self.fail(m, op, e)
            }
        }
    }

    /// The count compare failed: our write applied after all (a retry), the
    /// lock is gone, or another holder changed the count (count again).
    fn on_compare_failed(
        self,
        m: &mut EtcdMachine,
        now: Millis,
        op: OpId,
        lock: Lock,
        t: &TxnResponse,
    ) -> Next {
        let Some((held, count)) = read_back(t, &lock.key, lock.rev, &lock.count_key) else {
            return self.fail(m, op, broken_reply(&lock.name));
        };
        let applied = count
            .as_ref()
            .and_then(|c| parse_count(&c.value))
            .is_some_and(|c| c.token == lock.rev && c.nonce == self.nonce);
        if applied {
            return self.counted(m, now, op, lock);
        }
        if !held {
            return self.fail(m, op, lost(&lock.name, "the key no longer exists"));
        }
        if self.tries >= MAX_COUNT_TRIES {
            return self.fail(m, op, count_contended(&lock.name));
        }
        // Another holder changed the count: count again from what we read.
        let (holds, count_mod) = holds_read(count.as_ref(), lock.rev);
        let Some(holds) = holds.checked_add(1) else {
            let e = LockError::invalid(format!("lock {:?} has too many holds", lock.name));
            return self.fail(m, op, e);
        };
        let value = count_value(lock.rev, holds, &self.nonce);
        let body = gw::put_count_txn(
            &lock.key,
            lock.rev,
            &lock.count_key,
            count_mod,
            self.lease,
            &value,
        );
        let tries = self.tries + 1;
        Next::txn(ReenterOp { tries, ..self }, body)
    }

    /// Counted: the hold is ours.
    fn counted(self, m: &mut EtcdMachine, now: Millis, op: OpId, lock: Lock) -> Next {
        let id = m.rt.out.lock_id();
        m.locks.insert(
            id,
            HeldLock {
                name: lock.name.clone(),
                key: lock.key,
                rev: lock.rev,
                lease: self.lease,
                kind: HeldKind::Exclusive,
                releasing: false,
                reentered: true,
            },
        );
        let expires_at = m
            .leases
            .get(&self.lease)
            .map(|l| l.expires_at)
            .unwrap_or(now);
        let info = LockInfo {
            id,
            name: lock.name,
            fencing_token: self.handle.fencing_token,
            expires_at,
            handle: self.handle,
        };
        m.rt.out.complete(op, Ok(Outcome::Acquired(info)));
        Next::Done
    }

    fn fail(self, m: &mut EtcdMachine, op: OpId, error: LockError) -> Next {
        m.drop_lease_if_unused(self.lease, op);
        m.rt.out.fail(op, error);
        Next::Done
    }
}

/// The holds a read count says and its mod revision: no count is one hold,
/// and so is a count of an earlier incarnation of the key.
fn holds_read(count: Option<&CountKey>, rev: i64) -> (u32, i64) {
    match count {
        Some(c) => match parse_count(&c.value) {
            Some(p) if p.token == rev => (p.holds, c.mod_revision),
            _ => (1, c.mod_revision),
        },
        None => (1, 0),
    }
}

fn lost(name: &str, reason: &str) -> LockError {
    LockError::Lost {
        backend: BACKEND,
        name: name.to_string(),
        reason: reason.to_string(),
    }
}

/// Checks that `handle` is an exclusive lock's of this machine's prefix;
/// returns its lease.
fn check_handle(m: &EtcdMachine, handle: &LockHandle) -> Result<i64, LockError> {
    if handle.backend != BackendKind::Etcd {
        return Err(LockError::invalid(format!(
            "handle is for the {} backend, not etcd",
            handle.backend.as_str()
        )));
    }
    if handle.kind != LockKind::Exclusive || handle.slot.is_some() {
        return Err(LockError::invalid(format!(
            "only an exclusive lock can be re-entered, not a {} hold",
            handle.kind.describe()
        )));
    }
    let lease: i64 = handle
        .owner
        .parse()
        .map_err(|_| LockError::invalid("handle owner is not an etcd lease id"))?;
    let prefix = String::from_utf8_lossy(&m.lock_prefix(&handle.name)).into_owned();
    if handle.key.strip_prefix(&prefix) != Some(format!("{lease:x}").as_str()) {
        return Err(LockError::invalid(
            "handle key does not belong to this lock name and prefix",
        ));
    }
    if handle.revision == 0
        || handle.revision > i64::MAX as u64
        || handle.fencing_token != handle.revision
    {
        return Err(LockError::invalid(
            "handle revision/fencing token is not valid",
        ));
    }
    Ok(lease)
}
