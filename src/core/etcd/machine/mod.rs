//! `EtcdMachine`: the etcd recipe (see the `core::etcd` module docs) as a
//! sans-IO state machine. Where each part lives:
//!
//! - `mod.rs`: the machine's state (leases, held locks, orphans, the op
//!   table) and the types the files share.
//! - `lock_machine.rs`: the [`LockMachine`](crate::core::LockMachine)
//!   interface (user calls, inputs, `close`); `requests.rs`: sending,
//!   retrying on the next endpoint and routing answers; `timers.rs`: the
//!   one timer table.
//! - `operations.rs`: the op table's driver; `ops/`: one state struct per
//!   operation (release, extend, resume, inspect, re-entry and the hold
//!   count, proclaim, leader, observe, acquire, `AcquireAll`; see
//!   `ops/mod.rs`).
//! - The acquire recipe: `ops/acquire/mod.rs` (txn, predecessor watch,
//!   grant, cleanup), with what the kinds differ in in `ops/acquire/kind.rs`
//!   and their own parts in `ops/acquire/permits.rs` (semaphores),
//!   `ops/acquire/shared.rs` (readers) and `election.rs` (a campaign's
//!   value, the election recipe); `ops/sets.rs` is `AcquireAll` in one txn;
//!   `local_names.rs` queues a second local acquire of a name.
//! - Modules point one way: everything under `ops/` reaches the machine's
//!   state through `mod.rs` and never names the files beside `ops/`
//!   (`scripts/check-module-cycles.py` checks it).
//! - The session: `session.rs` (grant, keepalive, key checks, loss) and
//!   `ghosts.rs` (deleting keys a lost txn left on the lease).
//! - Tests: `scripted.rs` drives the machine by hand; `*_tests.rs`.

use std::collections::VecDeque;

use super::gateway::GatewayError;
use super::{escape_name, EtcdConfig};
use crate::core::json_stream::JsonObjectSplitter;
use crate::core::runtime::{Runtime, VecMap};
use crate::core::{Entropy, LockError, LockId, LockKind, Millis, OpId, RequestId, TransportError};

mod election;
#[cfg(test)]
mod election_tests;
mod ghosts;
mod local_names;
mod lock_machine;
mod operations;
mod ops;
#[cfg(test)]
mod reentry_tests;
mod requests;
#[cfg(test)]
mod scripted;
mod session;
#[cfg(test)]
mod sets_tests;
mod timers;

use ops::acquire::kind::AcquireKind;
use ops::acquire::{permits, shared, AcqPhase, Acquire, Ending};
use ops::sets;
use ops::{
    ExtendOp, InspectOp, Next, Op, OpKind, ProclaimOp, ReenterOp, ReleaseOp, Reply, ResumeOp,
};
use timers::TimerKey;

const BACKEND: &str = "etcd";

/// Delay before re-checking after a watch broke, so a dead endpoint cannot
/// turn the waiter into a hot loop.
const WATCH_RETRY_MS: u64 = 200;
/// A waiter re-checks its predecessor (and watches anew) this long after its
/// watch was created: a watch stream on a connection that silently died (a
/// blackholed endpoint, a half-open TCP) would otherwise never report the
/// predecessor's delete, and every waiter behind it would wait forever.
const WATCH_REFRESH_MS: u64 = 30_000;
/// How often a key that could not be deleted is retried.
const ORPHAN_RETRY_MS: u64 = 1_000;
/// Range ops per key-check txn (etcd's default --max-txn-ops is 128).
const KEYS_PER_CHECK: usize = 100;
/// How often one acquire may start over because its key vanished before it
/// could be granted; beyond that the backend is misbehaving.
const MAX_RESTARTS: u32 = 5;

/// The etcd lock recipe (see the `core::etcd` module docs) as a sans-IO
/// [`LockMachine`](crate::core::LockMachine): one session lease per client shared by all its locks.
pub struct EtcdMachine {
    endpoints: Vec<String>,
    current_endpoint: usize,
    prefix: String,
    session_ttl_ms: u64,
    request_timeout_ms: u64,
    headers: Vec<(String, String)>,
    entropy: Box<dyn Entropy + Send>,
    /// Outbox, requests in flight (owned by what they are for), close state.
    rt: Runtime<Pending, TimerKey>,
    leases: VecMap<i64, Lease>,
    session_lease: Option<i64>,
    grant: Option<RequestId>,
    ops: VecMap<OpId, Op>,
    locks: VecMap<LockId, HeldLock>,
    /// Names this client is using (acquiring, holding or cleaning up), with the
    /// local acquires queued behind the current user.
    busy_names: VecMap<String, VecDeque<OpId>>,
    /// Keys whose deletion could not be confirmed; retried until done or the
    /// lease is gone. Their names stay busy meanwhile.
    orphans: Vec<Orphan>,
    /// A txn of ours failed or was abandoned without a known outcome: it may
    /// still apply later and leave a key nobody uses on the session lease
    /// (see `ghosts.rs`). From then on every renewal also sweeps the lease.
    ghost_risk: bool,
    /// Leases of other owners this client renews only for holds it
    /// re-entered (see `ops/hold_count.rs`): its close never revokes them.
    borrowed: Vec<i64>,
    /// Leases on which a release of ours took one hold away and left
    /// others counted (possibly another process's): its close deletes its
    /// own keys there instead of revoking the lease (see `ops/hold_count.rs`).
    shared_leases: Vec<i64>,
}

struct Pending {
    purpose: Purpose,
    path: &'static str,
    body: Vec<u8>,
    endpoint: usize,
    attempt: u32,
    sent_at: Millis,
    splitter: Option<JsonObjectSplitter>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Purpose {
    Grant,
    KeepAlive {
        lease: i64,
    },
    KeyCheck {
        lease: i64,
    },
    /// Reads the keys attached to the lease, to delete ghosts.
    Sweep {
        lease: i64,
    },
    Revoke,
    Orphan,
    /// The current request of an operation; its phase says what it is.
    Op(OpId),
    /// A request that only needs to complete (close's deletions).
    CloseStep,
}

struct Lease {
    ttl_ms: u64,
    /// Conservative: measured from when the granting/renewing request was sent.
    expires_at: Millis,
    next_keepalive: Millis,
    keepalive: Option<RequestId>,
    check: Option<RequestId>,
    /// The locks (id, key, revision) the in-flight check reads, so that its
    /// answer is judged against exactly those and never a later lock.
    checked: Vec<(LockId, Vec<u8>, i64)>,
    sweep: Option<RequestId>,
}

impl Lease {
    /// A lease this client did not grant (a handle's, resumed or
    /// re-entered), not yet confirmed alive: due for a keepalive now.
    fn unconfirmed(ttl_ms: u64, now: Millis) -> Lease {
        Lease {
            ttl_ms,
            expires_at: 0,
            next_keepalive: now,
            keepalive: None,
            check: None,
            checked: Vec::new(),
            sweep: None,
        }
    }
}

struct HeldLock {
    name: String,
    key: Vec<u8>,
    rev: i64,
    lease: i64,
    /// The kind of hold, with what only that kind has (a permit's slot).
    kind: HeldKind,
    /// A release is in flight: a check that misses the key is the release's
    /// own doing, not a loss.
    releasing: bool,
    /// A hold taken by [`Operation::Reenter`](crate::core::Operation::Reenter) (see `ops/hold_count.rs`): it shares
    /// the key of an outer hold and does not claim the name locally (the
    /// outer hold, if it is local, does; its claim passes on to a local
    /// hold of the same key when it is released first).
    reentered: bool,
}

/// What kind of hold a held lock is, with what only that kind has.
enum HeldKind {
    Exclusive,
    /// A leadership (`LockKind::Leader`): an exclusive hold whose key's
    /// value carries the campaign value (see `election.rs`).
    Leader,
    /// A read-write lock's shared hold (a reader key of its own per
    /// acquisition, like a permit's queue key).
    Shared,
    /// A semaphore permit: its slot's key and that key's create revision
    /// (= the fencing token).
    Permit {
        key: Vec<u8>,
        rev: i64,
    },
}

impl HeldKind {
    /// The hold of `kind`; a permit's is its `slot` (slot, key, revision).
    fn new(kind: LockKind, slot: Option<(u32, Vec<u8>, i64)>) -> HeldKind {
        match (kind, slot) {
            (_, Some((_, key, rev))) => HeldKind::Permit { key, rev },
            (LockKind::Shared, None) => HeldKind::Shared,
            (LockKind::Leader, None) => HeldKind::Leader,
            _ => HeldKind::Exclusive,
        }
    }
}

impl HeldLock {
    /// Whether the hold owns its name locally: an exclusive lock's key is
    /// named by the lease alone, so a second local acquire must wait for it;
    /// permits and shared holds have keys of their own per acquisition.
    fn claims_name(&self) -> bool {
        matches!(self.kind, HeldKind::Exclusive | HeldKind::Leader) && !self.reentered
    }

    /// Whether holds can be counted on the key: an exclusive lock (not a
    /// leadership, a permit or a shared hold).
    fn countable(&self) -> bool {
        matches!(self.kind, HeldKind::Exclusive)
    }

    /// Whether the hold is a semaphore's permit (two keys: queue and slot).
    fn is_permit(&self) -> bool {
        matches!(self.kind, HeldKind::Permit { .. })
    }

    /// Every key of the hold with its create revision: the lock's key, and a
    /// permit's slot key.
    fn keys(&self) -> Vec<(Vec<u8>, i64)> {
        let mut keys = vec![(self.key.clone(), self.rev)];
        if let HeldKind::Permit { key, rev, .. } = &self.kind {
            keys.push((key.clone(), *rev));
        }
        keys
    }
}

struct Orphan {
    name: String,
    key: Vec<u8>,
    rev: Option<i64>,
    /// Delete only while the key holds this value (a slot key an unanswered
    /// claim may have created: ours carries our acquisition's value).
    value: Option<Vec<u8>>,
    /// The name stays busy locally until this key is gone (an exclusive
    /// lock's key is reused by the next acquire; a permit's never is).
    holds_name: bool,
    lease: i64,
    retry_at: Millis,
    req: Option<RequestId>,
}

enum Failure {
    Transport(TransportError),
    Gateway(GatewayError),
}

impl Failure {
    fn retryable(&self) -> bool {
        match self {
            Failure::Transport(_) => true,
            Failure::Gateway(g) => matches!(g, GatewayError::Retryable { .. }),
        }
    }
}

impl EtcdMachine {
    /// Validates `cfg` and builds the machine. Nothing is sent before the first
    /// operation (the session lease is granted lazily).
    pub fn new(cfg: EtcdConfig, entropy: Box<dyn Entropy + Send>) -> Result<Self, LockError> {
        let endpoints = cfg.validate()?;
        Ok(EtcdMachine {
            endpoints,
            current_endpoint: 0,
            prefix: cfg.prefix,
            session_ttl_ms: cfg.session_ttl_ms,
            request_timeout_ms: cfg.request_timeout_ms,
            headers: cfg.headers,
            entropy,
            rt: Runtime::default(),
            leases: VecMap::new(),
            session_lease: None,
            grant: None,
            ops: VecMap::new(),
            locks: VecMap::new(),
            busy_names: VecMap::new(),
            orphans: Vec::new(),
            ghost_risk: false,
            borrowed: Vec::new(),
            shared_leases: Vec::new(),
        })
    }

    fn lock_prefix(&self, name: &str) -> Vec<u8> {
        format!("{}/{}/", self.prefix, escape_name(name)).into_bytes()
    }

    fn max_attempts(&self) -> u32 {
        (self.endpoints.len() as u32).max(1) + 1
    }
}
