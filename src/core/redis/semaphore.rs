//! Semaphores (`LockKind::Permits { limit }`) on one node and on Redlock.
//!
//! # The recipe
//!
//! A semaphore of `limit` permits is `limit` slot keys under the name's hash
//! tag, `{<prefix>:<name>}:permit:<k>` for `k` in `0..limit` (see
//! `keys`): a permit is one slot key holding its owner token with
//! `PX ttl`, so a permit's lease ends on the Redis server's own clock like
//! a lock's. One script ([`ACQUIRE_PERMIT`](super::scripts::ACQUIRE_PERMIT))
//! declares every slot key and takes a free one atomically; the held permit
//! is then a lock on its slot key: the existing extend, release, status and
//! renewal scripts run on it unchanged, its release waking the semaphore's
//! waiters (their queue and channel are those of the base
//! `{<prefix>:<name>}:permit`, not of the slot).
//!
//! - **One node**: the script takes the lowest free slot; a waiter joins the
//!   semaphore's queue (as a lock's waiter does, see
//!   [`ACQUIRE_QUEUED`](super::scripts::ACQUIRE_QUEUED)), so a release wakes
//!   its live head only. The single-node `fair` option does not apply to
//!   permits: the queue decides whom a release wakes, not who may take a
//!   free slot. A waiter that gives up wakes the new head without knowing
//!   whether a slot is free (one spurious attempt at most).
//! - **Redlock**: a permit needs a quorum of nodes granting *the same*
//!   slot (as redis-semaphore's `RedlockSemaphore`): every attempt names
//!   one slot. The first attempt picks it at random (injected entropy); the
//!   replies carry each node's free slots, and a retry picks the slot free
//!   on the most nodes ([`choose_slot`]); an attempt whose named slot was
//!   held while another was free on a quorum is repeated at once (at most
//!   three times in a row, then it waits like a split vote). Validity,
//!   cleanup of partial grants, retries with jitter and strict fencing are
//!   the lock's. Uncontended, an acquire and a release are one round each
//!   (one request per node), as for the lock.
//!
//! # The limit
//!
//! The limit record `{<prefix>:<name>}:limit` (no expiry, like the counter)
//! stores the limit the holders use. An attempt asking for another limit
//! while any slot of the stored one is held is refused with
//! `INVALID_ARGUMENT` and takes nothing: never a silent extra holder. Once
//! every slot is free, the next attempt writes its own limit. A held slot
//! is always below the stored limit (a record changes only while its slots
//! are all free), so checking the stored limit's slots is enough; a script
//! reads only keys it declared, so an attempt that declared fewer slots
//! than the stored limit is told so and repeated with them. A slot key left
//! by a partial Redlock grant whose cleanup failed counts as held until it
//! expires (a refusal then errs on the safe side).
//!
//! # Fencing
//!
//! Each permit has a slot in `0..limit`; its fencing token is the name's
//! counter (`{<prefix>:<name>}:fence`, shared with the exclusive lock of
//! the same name). On one node the counter moves on every grant of the name,
//! atomically with it, so tokens strictly increase across all permits of
//! the name (and across successive holders of each slot). On Redlock the
//! counter moves on every attempt and the holder's scripts raise it, and the
//! lock's cross-node argument (see [`super::redlock`]) applies to a slot key
//! as to a lock key: successive holders of one slot get strictly increasing
//! tokens (under the same drift and restart bounds; Strict fencing raises a
//! quorum before handing the permit out). Two permits held at once on
//! different slots have distinct tokens on one node, but on Redlock they may
//! share one; tokens order the holders of a slot, not the permits of a
//! name, which a resource checking tokens per slot must keep in mind.
//!
//! # Inspect
//!
//! Inspect has only a name: its script reads the lock key, the counter and
//! the limit record at once; a name with a limit record is a semaphore, and
//! a second round reads its slots. Holders are listed by slot, never with
//! a token (the owner credential); `LockStatus::limit` is the stored limit
//! while a permit is held, and `remaining_ms` the time until the first held
//! permit frees itself (a quorum's view on Redlock).

use super::scripts::FreeSlots;
use crate::core::{jitter, Entropy, LockError};

/// The error for an acquire of `asked` permits of a semaphore whose
/// holders use `stored`.
pub(super) fn limit_mismatch(name: &str, stored: u32, asked: u32) -> LockError {
    LockError::invalid(format!(
        "semaphore {name:?} has limit {stored}, not {asked}: its permits are held with that limit (it may change once none is held)"
    ))
}

/// The slot a Redlock attempt names: the one the most nodes reported free
/// (`free[i]`: node `i`'s free slots, including a slot it granted to an
/// attempt that was then cleaned up), ties broken at random; at random in
/// `0..limit` when nothing is known.
pub fn choose_slot(limit: u32, free: &[FreeSlots], entropy: &mut dyn Entropy) -> u32 {
    let limit = limit.clamp(1, 128);
    let votes = |k: u32| free.iter().filter(|f| (*f >> k) & 1 == 1).count();
    let best = (0..limit).map(votes).max().unwrap_or(0);
    let ties: Vec<u32> = (0..limit).filter(|k| votes(*k) == best).collect();
    let pick = jitter(entropy, ties.len().saturating_sub(1) as u64) as usize;
    ties.get(pick).copied().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::SeededEntropy;
    use proptest::prelude::*;

    #[test]
    fn the_slot_free_on_most_nodes_wins() {
        let mut e = SeededEntropy::new(1);
        assert_eq!(choose_slot(3, &[0b100, 0b110, 0b010, 0b010], &mut e), 1);
        assert_eq!(choose_slot(100, &[1 << 99, 1 << 99, 1], &mut e), 99);
        let e = limit_mismatch("s", 3, 5);
        assert_eq!(e.code(), "INVALID_ARGUMENT");
        assert!(e.to_string().contains("has limit 3, not 5"), "{e}");
    }

    proptest! {
        #[test]
        fn a_chosen_slot_is_in_range_and_spread_when_nothing_is_known(limit in 1u32..=100, seed in any::<u64>(), free in proptest::collection::vec(any::<u128>(), 0..5)) {
            let mut e = SeededEntropy::new(seed);
            prop_assert!(choose_slot(limit, &free, &mut e) < limit);
            let picks: std::collections::BTreeSet<u32> = (0..64).map(|_| choose_slot(limit, &[], &mut e)).collect();
            prop_assert!(picks.len() > 1 || limit == 1);
        }
    }
}
