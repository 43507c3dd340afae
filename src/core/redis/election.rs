//! Leader election on one Redis node and on Redlock: the recipe, the key
//! layout, and what a quorum of answers agrees on (the scripts and their
//! replies are in `scripts/election.rs`, the tasks in `tasks/election.rs`).
//!
//! # Recipe
//!
//! - **Campaign** is an exclusive acquire of the election's lock key (the
//!   same attempts, push wake-up and fencing counter as
//!   [`LockKind::Exclusive`](crate::core::LockKind::Exclusive); on one node
//!   a campaign always uses the *fair* waiters' queue (`ACQUIRE_QUEUED`
//!   with `fair`, whatever the machine's `fair` setting): candidates lead in
//!   the order they started waiting, a release wakes only the queue's head,
//!   and a dead head holds the others up for at most its lease; a
//!   `Wait::Try` campaign never queues and is refused while a live head
//!   waits. Redlock has no queue: its waiters are woken by the release's
//!   publish and race, like its locks),
//!   followed, before the leadership is handed out, by one round of
//!   [`RECORD`] writing the **leader record** with the lock's owner token,
//!   fencing token and value. On Redlock the record must be written on a
//!   quorum within the lock's validity (`ttl − elapsed − drift`, elapsed
//!   counted from the start of the acquire attempt); otherwise the attempt
//!   is cleaned up and counts as unavailable (retried like an acquire).
//! - **Proclaim** is [`RECORD`] again with the held lock's owner token and
//!   fencing token: owner-checked on the server (`GET lock == owner`), it
//!   rewrites the value and publishes `leader:<fence>` on the name's
//!   wake-up channel. A quorum of refusals means the lock is gone (`Lost`);
//!   a lock this client does not hold is `NotHeld`.
//! - **Resign** is the lock's release: the release script deletes the lock
//!   key and publishes `released:<fence>[:<head>]` on the same channel.
//!   The record is not deleted; it is *invalidated*: it only counts while
//!   its owner token is the lock key's value (next point).
//! - **Leader** is one [`LEADER`] script per node: it reports the record's
//!   fencing token and value only when the record's owner token equals the
//!   lock key's current value (compared on the server; the owner token
//!   never leaves it). So a lock that expired or was released, or a new
//!   holder whose record is not written yet, reports nobody: **no reader
//!   ever sees a new leader's token paired with an earlier leader's value**
//!   (the token and the value are written together, in one hash, by the
//!   owner). A new leader becomes visible once its record is written, which
//!   happens before its campaign completes. Redlock reports the
//!   `(token, value)` pair that a quorum of nodes agrees on, each of them
//!   checking the pair's owner against its own lock key; otherwise nobody
//!   (also, briefly, while a proclaim is reaching the nodes).
//! - **Observe** reads like Leader, and while the state equals the
//!   caller's, listens on the name's wake-up channel (releases, records and
//!   proclaims publish there) with a timer as the fallback: a lock that
//!   expires publishes nothing, so the observer re-reads at the holder's
//!   PTTL and at least every `PUSH_FALLBACK_MS` (2 s) while
//!   the subscriptions are confirmed (the retry delay otherwise).
//!
//! # Keys
//!
//! The leader record is the hash `{<prefix>:<name>}:leader` (same hash tag
//! as the lock key, see `keys`) with fields `o` (the holder's owner
//! token), `f` (its fencing token, decimal) and `v` (`=` followed by the
//! value: webdis cannot carry an empty argument). It has no expiry: like
//! the fencing counter it costs one small key per election name; it is
//! only ever reported while its owner holds the lock key.
//!
//! An election is a lock name: an exclusive lock on the same name (with
//! the same prefix) excludes campaigners and is reported as "nobody leads".
//!
//! # Replies
//!
//! Both scripts return a flat array whose only string is the value (UTF-8,
//! at most [`MAX_CAMPAIGN_VALUE`](crate::core::MAX_CAMPAIGN_VALUE) bytes), which both HTTP protocols carry:
//! [`RECORD`] returns 1 (written) or 0 (the lock is not ours), [`LEADER`]
//! `{1, fence, pttl, "=value"}` or `{0, 0, pttl}` (`pttl` of the lock key,
//! -2 when absent). Any other reply is an error, never a panic.
//!
//! # Redlock's limits
//!
//! Redlock assumes bounded clock drift and process pauses shorter than the
//! lock's validity. A leader paused past its validity (or nodes whose
//! clocks jump) may still believe it leads while another has been elected;
//! its proclaims are then refused by the owner check, but its own actions
//! are not. The fencing token, which strictly increases across leaders
//! (see [`super::redlock`]), is the safety net: a resource that remembers
//! the highest token it has seen refuses the stale leader. The record's
//! token is the lock's, so it has exactly the lock's guarantee: with
//! `Strict` fencing (the default) under the stated precondition on node
//! restarts, with `Folded` only while every attempt reaches every node.
//! A node that restarts without persistence loses its records with its
//! keys; the delayed restart that keeps the lock safe keeps the records
//! consistent too (a node without the record does not vouch for anyone).
//!
//! Nothing here is refused as unsound: every operation has the guarantee
//! of the lock underneath. What Redlock cannot give is a linearizable
//! read: `leader` and `observe` report what a quorum vouched for when
//! each node answered, which may already be stale when it arrives (as on
//! every backend), and on Redlock may briefly be "nobody" while a record
//! reaches a quorum.
//!
//! # Cost
//!
//! A campaign costs the acquire's rounds plus one record round; proclaim
//! and leader one round each; an observer one read round per wake-up (a
//! message, a confirmed subscription) or timer (the holder's PTTL, the
//! fallback period), and one subscription per node while it waits.

pub use super::scripts::election::{
    leader, parse_leader, record, record_key, LeaderReply, LEADER, RECORD,
};
use crate::core::Leadership;

/// The wake-up message prefix of a record write (campaign or proclaim).
/// Waiters of the lock ignore it (only releases free the lock).
pub const LEADER_MESSAGE_PREFIX: &[u8] = b"leader:";

/// The state a quorum `q` of `answers` agrees on: the leader that at least
/// `q` nodes vouch for with the same token and value, else nobody.
pub fn agreed(answers: &[LeaderReply], q: usize) -> Option<Leadership> {
    answers
        .iter()
        .filter_map(|a| a.leader.as_ref())
        .find(|l| {
            answers
                .iter()
                .filter(|a| a.leader.as_ref() == Some(*l))
                .count()
                >= q
        })
        .cloned()
}

/// When to look again without a push: the soonest a holder's key expires
/// (an expiry publishes nothing).
pub fn soonest_expiry(answers: &[LeaderReply]) -> Option<u64> {
    answers.iter().filter_map(|a| a.pttl).min()
}
