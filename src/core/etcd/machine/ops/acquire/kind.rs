//! What an acquire takes, as one value: the kind of hold and that kind's
//! own state. The common recipe (`mod.rs`) asks the kind for what
//! differs (its key, its txns, its handle's kind) instead of testing flags;
//! each kind's own steps live in its file: `permits.rs` (a semaphore's
//! queue and slots), `shared.rs` (a reader), `election.rs` (a campaign's
//! value); the exclusive lock is the recipe itself.

use serde_json::Value;

use super::permits::{self, PermitAcquire};
use super::{shared, Acquire};
use crate::core::etcd::gateway as gw;
use crate::core::{LockKind, OpId};

/// The kind of hold an acquire takes, with the kind's own state.
pub(in crate::core::etcd::machine) enum AcquireKind {
    /// An exclusive lock: one key per lease, the oldest key holds.
    Exclusive,
    /// A campaign (`LockKind::Leader`): the exclusive recipe, the acquire's
    /// nonce being the encoded campaign value (see `election.rs`).
    Leader,
    /// The reader side of a read-write lock (see `shared.rs`).
    Shared,
    /// A semaphore permit (see `permits.rs`).
    Permit(PermitAcquire),
}

impl AcquireKind {
    /// A fresh acquire's kind for `kind`.
    pub(in crate::core::etcd::machine) fn new(kind: LockKind) -> AcquireKind {
        match kind {
            LockKind::Permits { limit } => AcquireKind::Permit(PermitAcquire::new(limit)),
            LockKind::Leader => AcquireKind::Leader,
            LockKind::Shared => AcquireKind::Shared,
            LockKind::Exclusive => AcquireKind::Exclusive,
        }
    }

    /// Whether each acquisition has a key of its own (a permit's queue key,
    /// a reader's key): one client may then hold several of one name, so
    /// such an acquire never queues locally and never claims its name.
    pub(in crate::core::etcd::machine) fn own_key(&self) -> bool {
        matches!(self, AcquireKind::Permit(_) | AcquireKind::Shared)
    }

    /// The permit's state, for a semaphore's acquire.
    pub(in crate::core::etcd::machine) fn permit(&self) -> Option<&PermitAcquire> {
        match self {
            AcquireKind::Permit(p) => Some(p),
            _ => None,
        }
    }

    pub(in crate::core::etcd::machine) fn permit_mut(&mut self) -> Option<&mut PermitAcquire> {
        match self {
            AcquireKind::Permit(p) => Some(p),
            _ => None,
        }
    }

    /// The key acquisition `op` puts on `lease`.
    pub(in crate::core::etcd::machine) fn key(
        &self,
        lock_prefix: &[u8],
        lease: i64,
        op: OpId,
    ) -> Vec<u8> {
        match self {
            AcquireKind::Permit(_) => permits::queue_key(lock_prefix, lease, op),
            AcquireKind::Shared => shared::reader_key(lock_prefix, lease, op),
            AcquireKind::Exclusive | AcquireKind::Leader => {
                [lock_prefix, format!("{lease:x}").as_bytes()].concat()
            }
        }
    }

    /// The acquire txn of `a` (its key set) on `lease`.
    pub(in crate::core::etcd::machine) fn acquire_body(&self, a: &Acquire, lease: i64) -> Value {
        match self {
            AcquireKind::Permit(p) => {
                let readers = shared::readers_range(&a.lock_prefix);
                permits::permit_acquire_body(a, lease, p.limit, readers)
            }
            AcquireKind::Shared => shared::shared_acquire_body(a, lease),
            AcquireKind::Exclusive | AcquireKind::Leader => {
                gw::acquire_txn(&a.key, &a.lock_prefix, lease, &a.nonce)
            }
        }
    }

    /// The re-check txn of `a` (its key created at `a.my_rev`).
    pub(in crate::core::etcd::machine) fn check_body(&self, a: &Acquire) -> Value {
        match self {
            AcquireKind::Permit(p) => permits::permit_check_body(a, p.limit),
            AcquireKind::Shared => shared::shared_check_body(a),
            AcquireKind::Exclusive | AcquireKind::Leader => {
                gw::predecessor_txn(&a.key, &a.lock_prefix, a.my_rev)
            }
        }
    }

    /// Whether a watch event that is no delete wakes the waiter: a
    /// semaphore's waiter re-checks on any event (its predecessor's
    /// promotion is a PUT); the others on a delete.
    pub(in crate::core::etcd::machine) fn wakes_on_any_event(&self) -> bool {
        matches!(self, AcquireKind::Permit(_))
    }

    /// The granted hold's kind, and its fencing token: a permit's is its
    /// slot key's create revision (`slot_rev`), every other kind's its own
    /// key's (`my_rev`; a leadership's is etcd's own `concurrency.Election`
    /// revision).
    pub(in crate::core::etcd::machine) fn granted(
        &self,
        my_rev: i64,
        slot_rev: Option<i64>,
    ) -> (LockKind, i64) {
        match (self, slot_rev) {
            (AcquireKind::Permit(p), Some(rev)) => (LockKind::Permits { limit: p.limit }, rev),
            (AcquireKind::Shared, _) => (LockKind::Shared, my_rev),
            (AcquireKind::Leader, _) => (LockKind::Leader, my_rev),
            _ => (LockKind::Exclusive, my_rev),
        }
    }
}
