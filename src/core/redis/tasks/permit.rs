//! A semaphore permit's part of an acquire (see
//! [`semaphore`](super::super::semaphore)): the attempt, cleanup and leave
//! commands, and the reading of an attempt's answers into the lock's
//! [`Tally`], so that `acquire.rs` runs a permit's attempts like a lock's
//! (see [`Part`]).
//!
//! One node takes the lowest free slot; Redlock names one slot on every node,
//! chosen from the nodes' last answers ([`choose_slot`]). A refused limit
//! ends the acquire, a node's larger stored limit repeats the attempt with
//! its slots declared, and a Redlock attempt whose named slot is held while
//! another is free on a quorum is repeated at once, a few times in a row.

use super::super::context::Context;
use super::super::keys::{limit_key, permit_base, permit_key, permit_keys};
use super::super::round::{NodeError, Round};
use super::super::scripts::{self, FreeSlots, PermitReply};
use super::super::semaphore::{choose_slot, limit_mismatch};
use super::super::value::RedisCommand;
use super::part::{AttemptArgs, AttemptRound, Part};
use super::tally::Tally;
use crate::core::LockKind;

/// A Redlock permit attempt that met its named slot held while another
/// slot is free on a quorum is repeated at once (a try too: a permit is
/// free), at most this many times in a row; then it waits as contention.
const MAX_SLOT_RETRIES: u32 = 3;

/// What a permit's attempts keep.
pub(super) struct Permit {
    limit: u32,
    /// The name's lock key, whose slots are `keys::permit_key`.
    lock_key: String,
    /// The semaphore's waiters' base (queue, leases, channel).
    base: String,
    limit_key: String,
    /// The slot keys every attempt declares: `0..limit`, or more when a
    /// node's stored limit is larger (the script must see its slots).
    declared: Vec<String>,
    /// Redlock: per node, the slots it last reported free (the next
    /// attempt names the slot free on the most).
    free: Vec<FreeSlots>,
    /// The slot the last attempt was granted (where it was).
    slot: Option<u32>,
    /// Redlock: attempts in a row repeated at once (see [`MAX_SLOT_RETRIES`]).
    slot_retries: u32,
}

/// What a permit attempt's answers said, before anything is decided.
struct Answers {
    /// The answers as a lock's attempt would count them.
    t: Tally,
    /// A node's stored limit other than ours, with holders.
    mismatch: Option<u32>,
    /// The largest stored limit with more slots than were declared.
    needs: Option<u32>,
    /// The slot granted (where it was).
    slot: Option<u32>,
}

impl Part for Permit {
    fn kind(&self) -> LockKind {
        LockKind::Permits { limit: self.limit }
    }

    /// The attempt script; one node's waiter joins the semaphore's queue
    /// once it waits (never fair, see `semaphore`).
    fn attempt(&mut self, cx: &mut Context, a: &AttemptArgs<'_>) -> (RedisCommand, bool) {
        let waiter = match a.waiter {
            Some(w) if a.listening => Some((w, a.queue_lease())),
            _ => None,
        };
        let redlock = cx.node_count() > 1;
        let cmd = scripts::acquire_permit(&scripts::PermitAttempt {
            fence_key: a.fence_key,
            limit_key: &self.limit_key,
            base: &self.base,
            slots: &self.declared,
            token: a.token,
            ttl_ms: a.ttl,
            limit: self.limit,
            preferred: redlock.then(|| choose_slot(self.limit, &self.free, cx.entropy.as_mut())),
            count_every_attempt: redlock,
            waiter,
        });
        (cmd, waiter.is_some_and(|(_, lease)| lease > 0))
    }

    /// A permit attempt waits for every node: its slot choice needs all.
    fn attempt_settled(&self, _round: &Round, _quorum: usize) -> bool {
        false
    }

    fn read(&mut self, cx: &Context, round: &Round, name: &str) -> AttemptRound {
        self.tally(cx, round, name)
    }

    /// The key of the slot the last attempt was granted.
    fn granted_key(&self) -> Option<String> {
        self.slot.map(|k| permit_key(&self.lock_key, k))
    }

    /// The semaphore's waiters (queue, leases, channel).
    fn wake_base<'a>(&'a self, _key: &'a str) -> &'a str {
        &self.base
    }

    fn slot(&self) -> Option<u32> {
        self.slot
    }

    /// Deletes the attempt's token from whichever slot holds it (one node
    /// chose the slot itself: an unknown outcome may have taken any).
    fn cleanup(&self, _key: &str, _fence_key: &str, token: &str) -> RedisCommand {
        scripts::permit_cleanup(&self.declared, token)
    }

    /// A queued waiter leaves the semaphore's queue.
    fn leave(&self, _key: &str, fence_key: &str, waiter: &str) -> RedisCommand {
        scripts::leave_permits(&self.base, fence_key, waiter)
    }
}

impl Permit {
    /// A permit of `limit` (already checked) of the semaphore at `lock_key`.
    pub(super) fn new(lock_key: &str, limit: u32) -> Permit {
        Permit {
            limit,
            lock_key: lock_key.to_string(),
            base: permit_base(lock_key),
            limit_key: limit_key(lock_key),
            declared: permit_keys(lock_key, limit),
            free: Vec::new(),
            slot: None,
            slot_retries: 0,
        }
    }

    /// Reads an attempt's answers (see the module docs).
    fn tally(&mut self, cx: &Context, round: &Round, name: &str) -> AttemptRound {
        let n = cx.node_count();
        let Answers {
            mut t,
            mismatch,
            needs,
            slot,
        } = self.read_answers(n, round);
        self.slot = slot;
        if let Some(stored) = mismatch {
            return AttemptRound::Refused {
                error: limit_mismatch(name, stored, self.limit),
                maybe_ours: t.maybe_ours,
            };
        }
        if let Some(stored) = needs {
            // Not contention nor unavailability: the same attempt again,
            // declaring the stored limit's slots.
            self.declared = permit_keys(&self.lock_key, stored);
            return AttemptRound::Repeat {
                maybe_ours: t.maybe_ours,
            };
        }
        // Another slot is free on a quorum: name it at once.
        let q = cx.quorum_size();
        let contended = t.granted < q && t.granted + t.held_pttls.len() >= q;
        let free_on_quorum =
            (0..self.limit).any(|k| self.free.iter().filter(|f| (*f >> k) & 1 == 1).count() >= q);
        if n > 1 && contended && free_on_quorum && self.slot_retries < MAX_SLOT_RETRIES {
            self.slot_retries += 1;
            return AttemptRound::Repeat {
                maybe_ours: t.maybe_ours,
            };
        }
        self.slot_retries = 0;
        if n > 1 {
            // "Another slot is free" (wait 0) after the quick retries ran
            // out is a split vote, not a time: wait as for the lock's.
            for w in &mut t.held_pttls {
                if *w == Some(0) {
                    *w = None;
                }
            }
        }
        AttemptRound::Tallied(t)
    }

    /// Each node's answer, into the lock's tally and this permit's free
    /// slots (`self.free`).
    fn read_answers(&mut self, n: usize, round: &Round) -> Answers {
        let mut t = Tally::new(n);
        let (mut mismatch, mut needs) = (None, None);
        let mut slot = None;
        self.free = Vec::with_capacity(n);
        for (i, r) in round.parsed(|v| scripts::parse_acquire_permit(v, self.limit)) {
            match r {
                Ok(PermitReply::Granted {
                    fence,
                    slot: k,
                    free,
                }) => {
                    // Redlock names one slot, so every grant is of it; a
                    // grant of another would be a protocol error, and the
                    // cleanup deletes by token wherever it landed.
                    t.maybe_ours[i] = true;
                    if slot.is_none() || slot == Some(k) {
                        slot = Some(k);
                        t.granted += 1;
                    }
                    t.answered(i, fence);
                    // Free again if this attempt is cleaned up.
                    self.free.push(free | (1 << k));
                }
                Ok(PermitReply::Busy { fence, wait, free }) => {
                    t.held_pttls.push(wait);
                    t.answered(i, fence);
                    self.free.push(free);
                }
                Ok(PermitReply::LimitMismatch { stored }) => mismatch = Some(stored),
                Ok(PermitReply::NeedsSlots { stored }) if stored as usize > self.declared.len() => {
                    needs = needs.max(Some(stored));
                }
                Ok(PermitReply::NeedsSlots { .. }) => t.failed(
                    i,
                    &NodeError::Redis(
                        "a permit attempt was asked for slots it had declared".into(),
                    ),
                ),
                Err(e) => t.failed(i, &e),
            }
        }
        Answers {
            t,
            mismatch,
            needs,
            slot,
        }
    }
}
