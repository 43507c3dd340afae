//! Read-write locks on one node: `LockKind::Shared` (a reader) beside
//! `LockKind::Exclusive` (the writer), after Redisson's `RReadWriteLock`.
//!
//! # The recipe
//!
//! - The writer is the exclusive lock itself: the lock key `{<prefix>:<name>}`
//!   holding its owner token with `PX ttl`.
//! - The readers are one sorted set, `{<prefix>:<name>}:readers` (see
//!   `keys`): member = a reader's random owner token, score = the
//!   end of its lease in the server's `TIME` ms (never a client clock). Every
//!   script that reads it first drops the members whose lease is over, and
//!   the set itself expires with its last reader.
//! - [`ACQUIRE_SHARED`](super::scripts::ACQUIRE_SHARED) adds a reader unless
//!   the lock key exists (a writer holds) or the writer intent
//!   `{<prefix>:<name>}:wintent` does (a writer waits); otherwise it answers
//!   the writer's or the intent's PTTL as the wait.
//! - The writer's acquire scripts ([`ACQUIRE`](super::scripts::ACQUIRE),
//!   [`ACQUIRE_QUEUED`](super::scripts::ACQUIRE_QUEUED)) drop expired
//!   readers and refuse while one remains (the wait is then the last
//!   reader's lease end: a reader that died frees the writer at its lease's
//!   end). A refused writer that will wait (never a try) sets the intent
//!   with a short `PX` (the queue lease, 6 s, renewed at each of its
//!   attempts, at least every 2 s), so that readers arriving after it queue
//!   behind it: readers cannot starve a writer. A grant deletes the intent,
//!   and so does a writer that gives up ([`LEAVE`](super::scripts::LEAVE),
//!   which then wakes the readers if nothing else waits); other waiting
//!   writers set it again with their next attempt.
//!   The added cost is a few commands inside the same script: still one
//!   request per attempt.
//! - A reader's release ([`RELEASE_SHARED`](super::scripts::RELEASE_SHARED))
//!   removes its member; the last reader out publishes on the name's wake-up
//!   channel, naming the waiters' queue's live head (a waiting writer) as a
//!   writer's release does, so the writer attempts at once. A writer's
//!   release wakes waiting readers: they do not join the queue, so they act
//!   on messages that name no head (no writer queued) and otherwise on
//!   their timers (at least every 2 s; a message naming a queued writer
//!   means that writer goes next).
//! - Extend and renewal ([`EXTEND_SHARED`](super::scripts::EXTEND_SHARED))
//!   move the reader's score only while it is still a member (else the
//!   hold is lost); resume checks membership
//!   ([`STATUS_SHARED`](super::scripts::STATUS_SHARED)); inspect counts the
//!   live readers (never their tokens).
//!
//! The fair option orders writers only: a reader never joins the queue.
//! The intent is one anonymous key: a writer that gives up deletes it even
//! while other writers wait, and readers may slip in until one of those
//! attempts again (at once if it heads the queue and the lock is free, else
//! within 2 s); a writer that vanished leaves it for at most its 6 s.
//!
//! # Fencing
//!
//! One counter per name, `{<prefix>:<name>}:fence`, raised atomically with
//! every grant of any kind (reader, writer, permit). So a writer's token is
//! above the token of every hold granted before it, shared or exclusive,
//! and each reader's token is above every earlier writer's. Readers that
//! hold at once have distinct tokens; a resource protected by the lock
//! should accept a read with any token above the last write's token it
//! saw, and a write only with a token above every token it saw.
//!
//! # Not here
//!
//! - **Older clients**: an edgelock from before read-write locks runs its
//!   own (older) exclusive scripts, which do not look at the readers: every
//!   client of a name must run this version before any of them takes it
//!   shared.
//! - **Redlock** refuses `Shared` with `INVALID_ARGUMENT`. The scripts would
//!   run per node, but the guarantees would not fall out of them: a reader
//!   and a writer each holding a quorum do meet on a node, yet the writer
//!   intent, the cross-node fencing argument (successive holders of one
//!   key, see [`super::redlock`]) and split votes between many readers and
//!   one writer would each need their own argument and tests.
//! - A semaphore and a read-write lock of the same name use disjoint keys
//!   (slot keys versus the lock key and the readers) and do not exclude
//!   each other, as the exclusive lock and the semaphore already do not;
//!   detecting the mix would need every slot key declared in the shared
//!   scripts (the limit record outlives the permits, so its presence alone
//!   says nothing). Use one kind per name.

use super::context::Held;
use super::scripts;
use super::value::RedisCommand;

/// The command that renews or extends `h` to `ttl_ms` (carrying its token
/// as the fencing floor), whatever its kind.
pub(super) fn extend_command(h: &Held, ttl_ms: u64) -> RedisCommand {
    if h.shared {
        scripts::extend_shared(&h.key, &h.fence_key, &h.token, ttl_ms, h.fencing_token)
    } else {
        scripts::extend_hold(
            &h.key,
            &h.fence_key,
            &h.token,
            ttl_ms,
            h.fencing_token,
            h.hold.as_deref().unwrap_or(scripts::OUTER_HOLD),
        )
    }
}

/// The command that releases `h`, waking its waiters, whatever its kind.
/// A shared hold's `key` is the readers' set and its `wake_base` the lock key.
pub(super) fn release_command(h: &Held) -> RedisCommand {
    if h.shared {
        scripts::release_shared(&h.wake_base, &h.fence_key, &h.token, h.fencing_token)
    } else {
        scripts::release_hold(
            &h.key,
            &h.fence_key,
            &h.wake_base,
            &h.token,
            h.fencing_token,
            h.hold.as_deref().unwrap_or(scripts::OUTER_HOLD),
        )
    }
}
