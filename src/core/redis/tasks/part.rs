//! What an acquire's attempts need from the kind they acquire, behind one
//! trait: the attempt's script and the reading of its answers, what a
//! cleanup and a leave send, and what the grant hands out. `acquire.rs`
//! runs the attempts, waiting, retries and fencing the same way for every
//! kind; a kind is one file implementing [`Part`]: `exclusive` (the lock),
//! `campaign` (an election's candidate), `reader` (a shared hold of a
//! read-write lock), `permit` (a semaphore's permit).

use super::super::context::{Context, QUEUE_LEASE_MS};
use super::super::round::Round;
use super::super::scripts::{self, AcquireReply};
use super::super::value::{RedisCommand, RedisValue};
use super::tally::Tally;
use crate::core::{LockError, LockKind, Wait};

/// What one attempt is made of, whatever its kind.
pub(super) struct AttemptArgs<'a> {
    pub(super) key: &'a str,
    pub(super) fence_key: &'a str,
    /// The attempt's fresh owner token.
    pub(super) token: &'a str,
    pub(super) ttl: u64,
    pub(super) wait: Wait,
    /// One node: this waiter's id in the waiters' queue.
    pub(super) waiter: Option<&'a str>,
    /// An earlier attempt met contention: the acquire waits.
    pub(super) listening: bool,
}

impl AttemptArgs<'_> {
    /// The queue lease a waiter takes (0 for a try, which never queues).
    pub(super) fn queue_lease(&self) -> u64 {
        if self.wait == Wait::Try {
            0
        } else {
            QUEUE_LEASE_MS
        }
    }
}

/// What an attempt's answers lead to.
pub(super) enum AttemptRound {
    /// The acquire fails with `error` (after deleting what `maybe_ours` marks).
    Refused {
        error: LockError,
        maybe_ours: Vec<bool>,
    },
    /// The attempt is repeated at once (after the same cleanup).
    Repeat { maybe_ours: Vec<bool> },
    /// Counted as a lock's attempt: the acquire decides.
    Tallied(Tally),
}

/// A kind's part of an acquire (see the module docs). The defaults are
/// the exclusive lock's.
pub(super) trait Part: Send {
    /// The kind the grant hands out.
    fn kind(&self) -> LockKind;

    /// The attempt's script, and whether it may have put this waiter in
    /// the waiters' queue (then it leaves when it gives up).
    fn attempt(&mut self, cx: &mut Context, a: &AttemptArgs<'_>) -> (RedisCommand, bool);

    /// Whether the attempt's round is decided before every node answered:
    /// once a quorum granted (the raise round, which waits for every node,
    /// learns any counter a silent node holds above the token), once none
    /// can form, or once a quorum of nodes answered without a quorum of
    /// grants (success would need every silent node: the attempt is given
    /// up, cleaned up everywhere and retried, rather than left holding keys
    /// on the live nodes for the whole request timeout). The engine still
    /// waits a grace for slow nodes before it settles.
    fn attempt_settled(&self, round: &Round, quorum: usize) -> bool {
        let granted =
            |v: &RedisValue| matches!(scripts::parse_acquire(v), Ok(AcquireReply::Granted { .. }));
        round.quorum_decided(quorum, granted) || round.quorum_answered_short(quorum, granted)
    }

    /// Reads the attempt's answers (`name` for the errors).
    fn read(&mut self, cx: &Context, round: &Round, _name: &str) -> AttemptRound {
        AttemptRound::Tallied(tally_lock_answers(cx.node_count(), round))
    }

    /// The key the last attempt was granted, where it is not the lock key
    /// (a permit's slot): the raise round and the grant work on it.
    fn granted_key(&self) -> Option<String> {
        None
    }

    /// Whose waiters' queue and channel this acquire waits on, and whose
    /// waiters the granted hold's release wakes.
    fn wake_base<'a>(&'a self, key: &'a str) -> &'a str {
        key
    }

    /// The key the grant holds.
    fn held_key(&self, key: &str) -> String {
        key.to_string()
    }

    /// The permit's slot, for the handle.
    fn slot(&self) -> Option<u32> {
        None
    }

    /// One node: a refused attempt of a waiting writer sets the writer
    /// intent (see `scripts::ACQUIRE`), which it drops when it gives up.
    fn sets_writer_intent(&self) -> bool {
        false
    }

    /// Deletes the attempt's key where it may exist.
    fn cleanup(&self, key: &str, fence_key: &str, token: &str) -> RedisCommand {
        scripts::release(key, fence_key, token, 0)
    }

    /// A queued waiter leaves the queue (and drops its writer intent).
    fn leave(&self, key: &str, fence_key: &str, waiter: &str) -> RedisCommand {
        scripts::leave(key, fence_key, waiter)
    }

    /// A campaign's value: the leader record is written before the grant.
    fn record(&self) -> Option<&str> {
        None
    }
}

/// The answers to a lock's (or a reader's) attempt script.
pub(super) fn tally_lock_answers(n: usize, round: &Round) -> Tally {
    let mut t = Tally::new(n);
    for (i, r) in round.parsed(scripts::parse_acquire) {
        match r {
            Ok(AcquireReply::Granted { fence: f }) => {
                t.granted += 1;
                t.maybe_ours[i] = true;
                t.answered(i, f);
            }
            // Every answering node's counter counts, granted or not.
            Ok(AcquireReply::Held { fence: f, pttl }) => {
                t.held_pttls.push(pttl);
                t.answered(i, f);
            }
            Err(e) => t.failed(i, &e),
        }
    }
    t
}
