//! What every Redis task works with: the settings, the nodes, the entropy,
//! the core's runtime, and the table of held locks. Tasks receive it as
//! `&mut Context` for one step; they never see the engine or each other.
//! What only the engine can do (start a background task, stop a lock's
//! renewal) a task asks for through [`Context::spawned`] / [`Context::stopped`].

use crate::core::runtime::VecMap;

use super::keys::{fence_key, lock_key};
use super::link::NodeLink;
use super::quorum::quorum;
use super::round::NodeError;
use super::scripts::Script;
use super::subscription::PushDecoder;
use crate::core::runtime::Runtime;
use crate::core::*;

/// Settings common to both machines, already validated.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub backend: BackendKind,
    pub prefix: String,
    pub ttl_ms: u64,
    pub request_timeout_ms: u64,
    pub auto_extend: bool,
    pub drift_factor: f64,
    /// Attempts that fail for lack of reachable nodes are retried this often.
    pub retry_count: u32,
    pub retry_delay_ms: u64,
    pub retry_jitter_ms: u64,
    /// Raise the quorum's counters before handing a lock out (Redlock only).
    pub strict_fencing: bool,
    /// Subscription streams this machine may hold open at once (0: waiters
    /// only poll). A Workers invocation may hold 6 connections open.
    pub max_subscriptions: usize,
    /// Only the waiters' queue head may take a free lock (one node only, see
    /// `ACQUIRE_QUEUED`).
    pub fair: bool,
    /// One script may touch the keys of several names (several hash
    /// slots): an `AcquireAll` of free names is then one script (one node
    /// only, see `tasks/acquire_set.rs`).
    pub cross_slot_scripts: bool,
}

/// A waiter whose wake-up streams are live still attempts this often at
/// least (a publish can be lost with its connection; an expired holder
/// publishes nothing, but then its PTTL is the waiter's timer anyway).
pub(super) const PUSH_FALLBACK_MS: u64 = 2_000;

/// A fair waiter's place in the queue lasts this long unless renewed; it
/// renews at every attempt, and attempts at least every third of it, so a
/// waiter that died blocks the queue for at most this long.
pub(super) const QUEUE_LEASE_MS: u64 = 3 * PUSH_FALLBACK_MS;

/// Random bytes in a fair waiter's id (published: not a secret).
pub(super) const WAITER_BYTES: usize = 8;

/// Random bytes in an owner token (hex-encoded: twice as many characters).
pub(super) const TOKEN_BYTES: usize = 20;

/// Names of locks that ended, kept for messages (bounded).
const ENDED_NAMES_KEPT: usize = 1024;

/// A task of the engine (an operation, a renewal, a background release).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) struct TaskId(pub u64);

/// The engine's timers. Keys sort in the order they are handled when due
/// together: a task's wake-up, then a lock's expiry, then its renewal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum TimerKey {
    /// A sleeping task's next step (an acquire's next attempt).
    Task(TaskId),
    /// A held lock's validity ends.
    Expiry(LockId),
    /// A held lock's next automatic renewal.
    Renewal(LockId),
}

/// Who a request in flight belongs to.
pub(super) enum RequestOwner {
    /// Node `node`'s answer to task `task`'s round.
    Round { task: TaskId, node: usize },
    /// Task `task`'s wake-up subscription on node `node`, with its decoder.
    Stream {
        task: TaskId,
        node: usize,
        decoder: PushDecoder,
    },
}

impl RequestOwner {
    pub(super) fn task(&self) -> TaskId {
        match self {
            RequestOwner::Round { task, .. } | RequestOwner::Stream { task, .. } => *task,
        }
    }
}

/// A lock this machine holds.
pub(super) struct Held {
    pub id: LockId,
    pub name: String,
    pub key: String,
    pub fence_key: String,
    /// Whose waiters its release wakes: the lock key itself, or for a
    /// permit its semaphore's base (`keys::permit_base`).
    pub wake_base: String,
    pub token: String,
    /// A reader of a read-write lock: `key` is then the readers' set and
    /// `wake_base` the lock key (see `rwlock`).
    pub shared: bool,
    /// A leadership (an election's lock, see `election`): it may proclaim.
    pub leader: bool,
    /// A re-entered hold's member in the lock's set of holds
    /// (`scripts::REENTER`); `None` for the hold an acquire granted.
    pub hold: Option<String>,
    pub ttl: u64,
    pub fencing_token: u64,
    pub expires_at: Millis,
    /// Renew automatically (off after a failed release: the user gave it up).
    pub renew: bool,
    /// The renewal task in flight, if any.
    pub renewal: Option<TaskId>,
    /// Why the last renewal failed, for the loss report.
    pub last_error: Option<String>,
}

/// Work a task asks the engine for.
pub(super) enum Spawn {
    /// Delete this lock's keys (owner-checked) without telling anyone.
    ReleaseInBackground(Held),
}

pub(crate) struct Context {
    pub(super) s: Settings,
    pub(super) nodes: Vec<NodeLink>,
    pub(super) entropy: Box<dyn Entropy + Send>,
    pub(super) rt: Runtime<RequestOwner, TimerKey>,
    pub(super) locks: VecMap<LockId, Held>,
    ended: VecMap<LockId, String>,
    pub(super) spawned: Vec<Spawn>,
    pub(super) stopped: Vec<TaskId>,
    /// Per node: the scripts its script cache holds, as far as we know
    /// (their commands then go as `EVALSHA`).
    cached: Vec<[bool; Script::ALL.len()]>,
}

impl Context {
    pub(super) fn new(s: Settings, nodes: Vec<NodeLink>, entropy: Box<dyn Entropy + Send>) -> Self {
        let n = nodes.len();
        Context {
            s,
            nodes,
            entropy,
            rt: Runtime::default(),
            locks: VecMap::new(),
            ended: VecMap::new(),
            spawned: Vec::new(),
            stopped: Vec::new(),
            cached: vec![[false; Script::ALL.len()]; n],
        }
    }

    pub(super) fn script_cached(&self, node: usize, script: Script) -> bool {
        self.cached.get(node).is_some_and(|c| c[script.index()])
    }

    pub(super) fn set_script_cached(&mut self, node: usize, script: Script, cached: bool) {
        if let Some(c) = self.cached.get_mut(node) {
            c[script.index()] = cached;
        }
    }

    pub(super) fn node_count(&self) -> usize {
        self.nodes.len()
    }

    pub(super) fn quorum_size(&self) -> usize {
        quorum(self.nodes.len())
    }

    pub(super) fn backend_str(&self) -> &'static str {
        self.s.backend.as_str()
    }

    pub(super) fn keys_for(&self, name: &str) -> (String, String) {
        let key = lock_key(&self.s.prefix, name);
        let fence = fence_key(&key);
        (key, fence)
    }

    pub(super) fn all_nodes(&self) -> Vec<bool> {
        vec![true; self.node_count()]
    }

    pub(super) fn closed_error(&self) -> LockError {
        LockError::Closed {
            backend: self.backend_str(),
        }
    }

    pub(super) fn is_closing(&self) -> bool {
        self.rt.closing.started()
    }

    /// The error for a round that did not reach a quorum: the node's own
    /// error on a single node, `NoQuorum` on several.
    pub(super) fn round_error(
        &self,
        name: &str,
        first_error: Option<&NodeError>,
        granted: usize,
    ) -> LockError {
        if self.node_count() == 1 {
            first_error
                .unwrap_or(&NodeError::Redis("no usable answer".into()))
                .to_lock_error(self.backend_str(), name)
        } else {
            LockError::NoQuorum {
                backend: self.backend_str(),
                name: name.to_string(),
                granted,
                needed: self.quorum_size(),
            }
        }
    }

    pub(super) fn record_ended(&mut self, id: LockId, name: &str) {
        self.ended.insert(id, name.to_string());
        while self.ended.len() > ENDED_NAMES_KEPT {
            self.ended.pop_first();
        }
    }

    pub(super) fn ended_name(&self, id: LockId) -> String {
        self.ended.get(&id).cloned().unwrap_or_default()
    }

    // ---- the table of held locks and its timers ---------------------------

    /// Starts holding `h`; the first renewal is due at `renew_at` (if it renews).
    pub(super) fn hold(&mut self, h: Held, renew_at: Millis) {
        self.rt.timers.set(TimerKey::Expiry(h.id), h.expires_at);
        if h.renew {
            self.rt.timers.set(TimerKey::Renewal(h.id), renew_at);
        }
        self.locks.insert(h.id, h);
    }

    /// A renewal or extend confirmed `id` until `expires_at`; the next
    /// automatic renewal is due at `renew_at` (if it renews).
    pub(super) fn confirmed(&mut self, id: LockId, ttl: u64, expires_at: Millis, renew_at: Millis) {
        let Some(h) = self.locks.get_mut(&id) else {
            return;
        };
        h.ttl = ttl;
        h.expires_at = expires_at;
        h.last_error = None;
        self.rt.timers.set(TimerKey::Expiry(id), expires_at);
        if h.renew {
            self.rt.timers.set(TimerKey::Renewal(id), renew_at);
        }
    }

    /// Schedules the next automatic renewal of `id` at `at`.
    pub(super) fn renew_at(&mut self, id: LockId, at: Millis) {
        if self.locks.get(&id).is_some_and(|h| h.renew) {
            self.rt.timers.set(TimerKey::Renewal(id), at);
        }
    }

    /// Stops holding `id`: its timers end and its renewal in flight is stopped.
    pub(super) fn take_lock(&mut self, id: LockId) -> Option<Held> {
        let h = self.locks.remove(&id)?;
        self.rt.timers.clear(TimerKey::Expiry(id));
        self.rt.timers.clear(TimerKey::Renewal(id));
        self.stopped.extend(h.renewal);
        Some(h)
    }

    /// Forgets a lock that is no longer held, tells the user, and deletes
    /// whatever is left of its keys.
    pub(super) fn lose(&mut self, id: LockId, reason: LostReason) {
        let Some(mut h) = self.take_lock(id) else {
            return;
        };
        h.renewal = None;
        self.record_ended(id, &h.name);
        self.rt.out.lost(id, h.name.clone(), reason);
        self.spawned.push(Spawn::ReleaseInBackground(h));
    }
}
