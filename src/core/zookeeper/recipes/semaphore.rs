//! One lease of Curator's `InterProcessSemaphoreV2`, node for node (design
//! 2.2): lock `N` of `Permits { limit }` is the directory `<dir>` with
//!
//! 1. the guard: an `InterProcessMutex` on `<dir>/locks`
//!    (`_c_<uuid>-lock-<seq>`), taken first;
//! 2. the lease: `<dir>/leases/_c_<uuid>-lease-<seq>`, created while the
//!    guard is held; then `getChildren(<dir>/leases, watch)` until there are
//!    at most `limit` children (every child counts, as in Curator), waiting
//!    for the children watch in between;
//! 3. the guard is released (always: the engine deletes it once the lease
//!    is held, or with the lease when the acquire fails or is abandoned).
//!
//! The limit is not stored in ZooKeeper (Curator passes `maxLeases` to each
//! client): every participant must use the same one. The fencing token is
//! the lease node's czxid; the slot is our lease's place among the leases
//! when it was granted (informational: Curator's leases have no slots).
//! Only the guard holder waits on the leases' children, so a release wakes
//! one waiter. A try gives up when the guard is held by another acquirer
//! at that moment, as Curator's `acquire(0, …)` does.

use super::super::paths::{LEASE_MARKER, MUTEX_MARKER, SEMAPHORE_LEASES, SEMAPHORE_LOCKS};
use super::super::session::{ZkError, ZkReply};
use super::lock_node::{NodeAcquire, NodeSpec, Purpose, Rule, Stage, Step};

/// See the module documentation.
#[derive(Debug)]
pub(crate) struct SemaphoreAcquire {
    guard: NodeAcquire,
    lease: NodeAcquire,
    /// The guard is held: the lease is under way.
    leasing: bool,
}

impl SemaphoreAcquire {
    /// An acquire of one lease under `base` (`dir` of the lock, data, ACL,
    /// try) for a semaphore of `limit`; each node with its own protected
    /// prefix.
    pub(crate) fn new(base: NodeSpec, limit: u32, prefixes: (String, String)) -> Self {
        let guard = NodeSpec {
            dir: format!("{}/{SEMAPHORE_LOCKS}", base.dir),
            marker: MUTEX_MARKER,
            rule: Rule::First,
            stage: Stage::Guard,
            ..base.clone()
        };
        let lease = NodeSpec {
            dir: format!("{}/{SEMAPHORE_LEASES}", base.dir),
            marker: LEASE_MARKER,
            rule: Rule::Leases { limit },
            stage: Stage::Main,
            ..base
        };
        SemaphoreAcquire {
            guard: NodeAcquire::new(guard, prefixes.0),
            lease: NodeAcquire::new(lease, prefixes.1),
            leasing: false,
        }
    }

    pub(crate) fn start(&mut self) -> Step {
        self.leasing = false;
        self.guard.start()
    }

    /// Our nodes known so far (lease first).
    pub(crate) fn node_paths(&self) -> Vec<String> {
        self.lease
            .node_path()
            .into_iter()
            .chain(self.guard.node_path())
            .collect()
    }

    /// The guard node, to delete once the lease is held.
    pub(crate) fn guard_path(&self) -> Option<String> {
        self.guard.node_path()
    }

    pub(crate) fn on_answer(
        &mut self,
        stage: Stage,
        purpose: Purpose,
        result: Result<ZkReply, ZkError>,
    ) -> Step {
        match stage {
            Stage::Guard => {
                let step = self.guard.on_answer(purpose, result);
                self.after_guard(step)
            }
            Stage::Main => self.lease.on_answer(purpose, result),
        }
    }

    /// The guard held: on to the lease.
    fn after_guard(&mut self, step: Step) -> Step {
        match step {
            Step::Acquired { .. } => {
                self.leasing = true;
                self.lease.start()
            }
            other => other,
        }
    }

    pub(crate) fn on_watch(&mut self, path: &str) -> Step {
        if self.leasing {
            return self.lease.on_watch(path);
        }
        let step = self.guard.on_watch(path);
        self.after_guard(step)
    }

    pub(crate) fn on_reconnected(&mut self) -> Step {
        if self.leasing {
            return self.lease.on_reconnected();
        }
        let step = self.guard.on_reconnected();
        self.after_guard(step)
    }
}
