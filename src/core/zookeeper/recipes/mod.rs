//! Curator's recipes, node for node, as state machines over the session's
//! answers (the engine submits what they ask and routes answers back):
//!
//! | edgelock kind on name N (`<root>/<N>`) | Curator recipe | node |
//! |---|---|---|
//! | `Exclusive` | `InterProcessMutex` | `_c_<uuid>-lock-<seq>` |
//! | `Exclusive` on a name in `ZkConfig::read_write_names` | `InterProcessReadWriteLock` writer | `_c_<uuid>-__WRIT__<seq>` |
//! | `Shared` | `InterProcessReadWriteLock` reader | `_c_<uuid>-__READ__<seq>` |
//! | `Permits { limit }` | `InterProcessSemaphoreV2` | `locks/…lock-<seq>`, `leases/…lease-<seq>` |
//! | `Leader` (campaign) | `LeaderLatch` | `_c_<uuid>-latch-<seq>`, data = the value |
//!
//! [`lock_node`] is one contender node (create, list, judge by a rule,
//! watch, find after a lost reply); [`semaphore`] chains two of them;
//! [`latch`] reads who leads. `AcquireAll` is the crate's generic
//! `MultiLock` over exclusive acquires (ZooKeeper has no atomic set): the
//! nodes are `InterProcessMultiLock`'s, one mutex per name. Only the order
//! differs: edgelock takes the names sorted by bytes, Curator in its
//! caller's order, each with the full wait; a Curator caller passing
//! another order can deadlock with edgelock until one side's wait runs out
//! (as two Curator callers with different orders can).
//!
//! Mixing recipes on one name is not refused: a semaphore name's `locks`
//! and `leases` directories are no contender nodes, so a mutex on the same
//! name ignores them (as Curator's would).
//!
//! # A plain exclusive lock and the read-write lock on one name
//!
//! Curator's mutex sorts `__READ__`/`__WRIT__` nodes after every `lock-`
//! node (by their whole names), so a Curator reader and a Curator mutex on
//! one path do not exclude each other, and the machine cannot tell which
//! recipe a Curator peer uses on a name. So the writer marker is chosen by
//! configuration: an `Exclusive` acquire of a name listed in
//! `ZkConfig::read_write_names` is a read-write lock's writer (`__WRIT__`),
//! of any other name a mutex (`lock-`). `Shared` is always a reader. Among
//! edgelock clients the kinds exclude each other whatever the
//! configuration: edgelock orders every contender node of a name by its
//! sequence whatever its marker, and a reader waits behind any contender
//! that is no reader (stricter than Curator, never looser).

pub(crate) mod latch;
pub(crate) mod lock_node;
pub(crate) mod semaphore;

use super::records::err;
use super::session::{ZkError, ZkReply};
use crate::core::LockError;
use lock_node::{NodeAcquire, Purpose, Stage, Step};
use semaphore::SemaphoreAcquire;

/// An acquire under way: one node, or a semaphore's two (one value per
/// acquire under way: their sizes do not matter).
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(crate) enum Recipe {
    Node(NodeAcquire),
    Semaphore(SemaphoreAcquire),
}

impl Recipe {
    pub(crate) fn start(&mut self) -> Step {
        match self {
            Recipe::Node(n) => n.start(),
            Recipe::Semaphore(s) => s.start(),
        }
    }

    /// Every node of ours known so far.
    pub(crate) fn node_paths(&self) -> Vec<String> {
        match self {
            Recipe::Node(n) => n.node_path().into_iter().collect(),
            Recipe::Semaphore(s) => s.node_paths(),
        }
    }

    /// Nodes to delete once held (the semaphore's guard).
    pub(crate) fn leftovers(&self) -> Vec<String> {
        match self {
            Recipe::Node(_) => Vec::new(),
            Recipe::Semaphore(s) => s.guard_path().into_iter().collect(),
        }
    }

    pub(crate) fn on_answer(
        &mut self,
        (stage, purpose): (Stage, Purpose),
        result: Result<ZkReply, ZkError>,
    ) -> Step {
        match self {
            Recipe::Node(n) => n.on_answer(purpose, result),
            Recipe::Semaphore(s) => s.on_answer(stage, purpose, result),
        }
    }

    pub(crate) fn on_watch(&mut self, path: &str) -> Step {
        match self {
            Recipe::Node(n) => n.on_watch(path),
            Recipe::Semaphore(s) => s.on_watch(path),
        }
    }

    pub(crate) fn on_reconnected(&mut self) -> Step {
        match self {
            Recipe::Node(n) => n.on_reconnected(),
            Recipe::Semaphore(s) => s.on_reconnected(),
        }
    }
}

/// Why a recipe step failed, before it is named after its lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Failure {
    /// The server refused or answered something unusable.
    Backend(String),
    /// No answer (the outcome may be unknown).
    Transport(String),
    /// The session expired (its nodes are gone).
    Expired,
}

impl Failure {
    /// `e`, the answer to `what` on `path`.
    pub(crate) fn from_error(what: &str, path: &str, e: ZkError) -> Failure {
        match e {
            ZkError::Server(code) => Failure::Backend(format!(
                "ZooKeeper answered {} to {what} {path}",
                describe_code(code)
            )),
            ZkError::NotSent(m) | ZkError::Transport(m) => {
                Failure::Transport(format!("{what} {path}: {m}"))
            }
            ZkError::Refused(m) => Failure::Backend(m),
            ZkError::Expired => Failure::Expired,
        }
    }

    /// The error a user sees for lock `name`.
    pub(crate) fn into_lock_error(self, backend: &'static str, name: &str) -> LockError {
        let name = name.to_string();
        match self {
            Failure::Backend(message) => LockError::Backend {
                backend,
                name,
                status: None,
                message,
            },
            Failure::Transport(message) => LockError::Transport {
                backend,
                name,
                message,
            },
            Failure::Expired => LockError::Transport {
                backend,
                name,
                message: "the ZooKeeper session expired (its nodes are gone); try again".into(),
            },
        }
    }
}

/// A server error code with its name (`NONODE (-101)`).
pub(crate) fn describe_code(code: i32) -> String {
    let name = match code {
        err::NO_NODE => "NONODE",
        err::NO_AUTH => "NOAUTH",
        err::BAD_VERSION => "BADVERSION",
        err::NO_CHILDREN_FOR_EPHEMERALS => "NOCHILDRENFOREPHEMERALS",
        err::NODE_EXISTS => "NODEEXISTS",
        err::NOT_EMPTY => "NOTEMPTY",
        err::SESSION_EXPIRED => "SESSIONEXPIRED",
        err::INVALID_ACL => "INVALIDACL",
        err::AUTH_FAILED => "AUTHFAILED",
        err::SESSION_MOVED => "SESSIONMOVED",
        err::BAD_ARGUMENTS => "BADARGUMENTS",
        err::QUOTA_EXCEEDED => "QUOTAEXCEEDED",
        err::THROTTLED_OP => "THROTTLEDOP",
        _ => "an error",
    };
    format!("{name} ({code})")
}
