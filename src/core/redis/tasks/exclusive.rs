//! The exclusive lock's part of an acquire: one node queues its waiters
//! (every attempt of a fair lock, a default lock's once it waits), and a
//! writer that will wait keeps new readers out.

use super::super::context::{Context, QUEUE_LEASE_MS};
use super::super::scripts;
use super::super::value::RedisCommand;
use super::part::{AttemptArgs, Part};
use crate::core::{LockKind, Wait};

/// An exclusive lock.
pub(super) struct Exclusive;

impl Part for Exclusive {
    fn kind(&self) -> LockKind {
        LockKind::Exclusive
    }

    fn attempt(&mut self, cx: &mut Context, a: &AttemptArgs<'_>) -> (RedisCommand, bool) {
        lock_attempt(cx, a, cx.s.fair)
    }

    fn sets_writer_intent(&self) -> bool {
        true
    }
}

/// How many times others may take the free lock while a live waiter heads
/// the queue: none for a fair lock, [`scripts::MAX_BYPASS`] by default.
fn max_bypass(fair: bool) -> u32 {
    if fair {
        0
    } else {
        scripts::MAX_BYPASS
    }
}

/// A lock's attempt script; `fair`: only the queue's head may take it.
pub(super) fn lock_attempt(cx: &Context, a: &AttemptArgs<'_>, fair: bool) -> (RedisCommand, bool) {
    match a.waiter {
        // One node: a fair lock's every attempt goes through the queue
        // (a try never queues); a waiter of the default lock joins it
        // once it waits (its first attempt met contention), so that a
        // release wakes one waiter, not all of them.
        Some(waiter) if fair || a.listening => {
            let lease = a.queue_lease();
            let cmd = scripts::acquire_queued(
                a.key,
                a.fence_key,
                a.token,
                a.ttl,
                waiter,
                lease,
                max_bypass(fair),
            );
            (cmd, lease > 0)
        }
        _ => {
            // One node: a writer that will wait keeps new readers out
            // (Redlock has no readers).
            let intent = if a.wait == Wait::Try || cx.node_count() > 1 {
                0
            } else {
                QUEUE_LEASE_MS
            };
            let cmd = scripts::acquire(
                a.key,
                a.fence_key,
                a.token,
                a.ttl,
                cx.node_count() > 1,
                intent,
                max_bypass(fair),
            );
            (cmd, false)
        }
    }
}
