//! Release: an owner-checked delete of the lock's key on every node.
//!
//! The release is settled when a quorum confirmed it, when every node gave
//! a definite answer, or when too many refused for the key to exist on a
//! quorum. Otherwise (nothing definite) the user gets the error and the lock
//! stays known, without renewals, so that a retry can still release it; it
//! expires on its own otherwise. The same task, without an operation,
//! deletes the keys of a lost lock or of a lock held at close.

use super::super::context::{Context, Held};
use super::super::round::{FlagCount, Round};
use super::super::rwlock;
use super::super::task::{Next, OnClose, Task};
use crate::core::*;

pub(in super::super) struct ReleaseTask {
    /// `None`: in the background, reporting nothing.
    op: Option<OpId>,
    lock: Held,
}

impl ReleaseTask {
    /// Releases `lock` for operation `op` (taken out of the table by the caller).
    pub(in super::super) fn new(op: OpId, lock: Held) -> Self {
        ReleaseTask { op: Some(op), lock }
    }

    /// Deletes what is left of `lock`'s keys, reporting nothing.
    pub(in super::super) fn background(lock: Held) -> Self {
        ReleaseTask { op: None, lock }
    }
}

impl Task for ReleaseTask {
    fn op(&self) -> Option<OpId> {
        self.op
    }

    fn on_close(&mut self, _error: &LockError) -> OnClose {
        OnClose::Finish
    }

    fn step(self: Box<Self>, cx: &mut Context, round: Option<Round>, _now: Millis) -> Next {
        let ReleaseTask { op, mut lock } = *self;
        let Some(round) = round else {
            let cmd = rwlock::release_command(&lock);
            return Next::round(ReleaseTask { op, lock }, cmd, cx.all_nodes());
        };
        let c = FlagCount::of_release(&round);
        let (n, q) = (cx.node_count(), cx.quorum_size());
        let settled = c.confirmed >= q || c.failed == 0 || c.refused > n - q;
        match op {
            None => cx.record_ended(lock.id, &lock.name),
            Some(op) if settled => {
                cx.record_ended(lock.id, &lock.name);
                cx.rt.out.complete(
                    op,
                    Ok(Outcome::Released {
                        lock: lock.id,
                        held_until_release: c.confirmed >= q,
                    }),
                );
            }
            Some(op) => {
                let error = cx.round_error(&lock.name, c.first_error.as_ref(), c.confirmed);
                cx.rt.out.fail(op, error);
                if cx.is_closing() {
                    cx.record_ended(lock.id, &lock.name);
                } else {
                    lock.renew = false;
                    let renew_at = lock.expires_at;
                    cx.hold(lock, renew_at);
                }
            }
        }
        Next::Done
    }
}
