//! The lock's state and its transitions, as plain data: what the object
//! stores (one value, [`LockState`]) and what each checked operation does
//! to it at a given time. No I/O and no `worker` types: the Durable Object
//! glue (`object.rs`) loads the state, calls one of these, stores the
//! state if it changed and delivers the [`Notice`]s to the requests held
//! open; the tests run on the host (tests/worker_lock_object.rs).
//!
//! Invariants, after every operation:
//! - `counter` never decreases; a grant increments it and the grant's token
//!   is the new value, so tokens are unique and strictly increasing;
//! - a holder whose lease has ended is gone before anything else is
//!   decided (every operation starts with [`LockState::settle`]);
//! - no holder ⇒ no live waiter in the queue (the head is granted as soon
//!   as the lock is free; waiters whose request is no longer open are
//!   dropped when they reach the head);
//! - an owner is queued at most once.

use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// Most waiters queued at once; an `acquire` beyond that answers
/// `acquired:false` at once (the stored value stays small).
pub const MAX_WAITERS: usize = 512;

/// Most owners remembered as having left (see [`LockState::left`]); the
/// oldest is forgotten first.
pub const MAX_LEFT: usize = 256;

/// How long an owner that left is remembered: longer than any poll can
/// be in flight (its `waitMs`, at most 60 s, plus a client's request
/// timeout, at most 600 s).
pub const LEFT_KEEP_MS: u64 = 660_000;

/// The current holder.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    pub owner: String,
    pub token: u64,
    /// Lease end, ms since the epoch.
    pub deadline_ms: u64,
}

/// A queued `acquire`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Waiter {
    pub owner: String,
    /// The lease it asked for, counted from its grant.
    pub ttl_ms: u64,
    /// When its request gives up (`acquired:false`), ms since the epoch.
    pub deadline_ms: u64,
}

/// Everything the object stores, under one key.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockState {
    /// The lock name (set by the first request).
    pub name: String,
    /// The last fencing token granted (0: none yet).
    pub counter: u64,
    pub holder: Option<Holder>,
    pub queue: VecDeque<Waiter>,
    /// Owners that ended their acquire (an `acquire` with `waitMs` 0, or a
    /// release while queued), each with when it is forgotten (ms since the
    /// epoch), oldest first: a later waiting `acquire` of one of them that
    /// does not hold the lock is answered `acquired:false` and neither
    /// queued nor granted. A client's poll can arrive after its own leave
    /// (they travel on different connections); without this the abandoned
    /// owner would be queued again and granted a lease nobody uses. Absent
    /// in a state stored by an older version: empty.
    #[serde(default, skip_serializing_if = "VecDeque::is_empty")]
    pub left: VecDeque<Left>,
}

/// An owner that left (see [`LockState::left`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Left {
    pub owner: String,
    /// When it is forgotten, ms since the epoch.
    pub until_ms: u64,
}

/// An answer for a request held open, delivered through its channel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Notice {
    /// The waiter `owner` now holds the lock.
    Granted {
        owner: String,
        token: u64,
        ttl_ms: u64,
        waiters: usize,
    },
    /// The waiter `owner` left the queue without the lock (its queued
    /// request was replaced by a newer one, or it released while queued).
    Dropped { owner: String },
}

/// What an `acquire` answers now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Acquire {
    /// `acquired:true` (`ttl_ms`: the lease left; the full TTL for a new grant).
    Held {
        token: u64,
        ttl_ms: u64,
        waiters: usize,
    },
    /// `acquired:false` at once.
    Busy(Busy),
    /// Queued: the request is held open until a [`Notice`] or its wait ends.
    Queued { waiters: usize },
}

/// `acquired:false`: the holder's token (the last one granted when free)
/// and the lease left.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Busy {
    pub token: u64,
    pub pttl_ms: u64,
    pub waiters: usize,
}

/// `inspect`'s answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Status {
    pub token: Option<u64>,
    pub pttl_ms: Option<u64>,
    pub waiters: usize,
}

impl LockState {
    /// Drops a holder whose lease has ended (at `now_ms` or before) and,
    /// while the lock is free, grants the head of the queue, dropping
    /// waiters that are not `live` (their request is no longer open).
    pub fn settle(&mut self, now_ms: u64, live: &dyn Fn(&str) -> bool, out: &mut Vec<Notice>) {
        while self.left.front().is_some_and(|l| l.until_ms <= now_ms) {
            self.left.pop_front();
        }
        if self
            .holder
            .as_ref()
            .is_some_and(|h| h.deadline_ms <= now_ms)
        {
            self.holder = None;
        }
        while self.holder.is_none() {
            let Some(w) = self.queue.pop_front() else {
                break;
            };
            if !live(&w.owner) {
                continue;
            }
            let token = self.grant(w.owner.clone(), w.ttl_ms, now_ms);
            out.push(Notice::Granted {
                owner: w.owner,
                token,
                ttl_ms: w.ttl_ms,
                waiters: self.queue.len(),
            });
        }
    }

    fn grant(&mut self, owner: String, ttl_ms: u64, now_ms: u64) -> u64 {
        self.counter += 1;
        self.holder = Some(Holder {
            owner,
            token: self.counter,
            deadline_ms: now_ms.saturating_add(ttl_ms),
        });
        self.counter
    }

    fn held_by(&self, owner: &str, token: u64) -> Option<&Holder> {
        self.holder
            .as_ref()
            .filter(|h| h.owner == owner && h.token == token)
    }

    fn has_left(&self, owner: &str) -> bool {
        self.left.iter().any(|l| l.owner == owner)
    }

    /// Remembers that `owner` left, until [`LEFT_KEEP_MS`] from now.
    fn remember_left(&mut self, owner: &str, now_ms: u64) {
        if let Some(i) = self.left.iter().position(|l| l.owner == owner) {
            self.left.remove(i);
        }
        while self.left.len() >= MAX_LEFT {
            self.left.pop_front();
        }
        self.left.push_back(Left {
            owner: owner.to_string(),
            until_ms: now_ms.saturating_add(LEFT_KEEP_MS),
        });
    }

    fn position(&self, owner: &str) -> Option<usize> {
        self.queue.iter().position(|w| w.owner == owner)
    }

    /// `acquired:false` as of `now_ms`.
    pub fn busy(&self, now_ms: u64) -> Busy {
        Busy {
            token: self.holder.as_ref().map_or(self.counter, |h| h.token),
            pttl_ms: self
                .holder
                .as_ref()
                .map_or(0, |h| h.deadline_ms.saturating_sub(now_ms)),
            waiters: self.queue.len(),
        }
    }

    /// `acquire`. An owner already queued is replaced in place (its older
    /// request gets [`Notice::Dropped`]); with `wait_ms` 0 it leaves the
    /// queue instead. `wait_ms` 0 ends the owner's acquire: it is
    /// remembered as left, and a later waiting acquire of it (`wait_ms` >
    /// 0: a poll that its own leave overtook) that does not hold the lock
    /// answers `acquired:false`, neither queued nor granted. (Trying again
    /// with `wait_ms` 0 stays possible.)
    pub fn acquire(
        &mut self,
        owner: &str,
        ttl_ms: u64,
        wait_ms: u64,
        now_ms: u64,
        live: &dyn Fn(&str) -> bool,
        out: &mut Vec<Notice>,
    ) -> Acquire {
        self.settle(now_ms, live, out);
        let ended = wait_ms > 0 && self.has_left(owner);
        if wait_ms == 0 {
            self.remember_left(owner, now_ms);
        }
        if let Some(h) = self.holder.as_ref().filter(|h| h.owner == owner) {
            return Acquire::Held {
                token: h.token,
                ttl_ms: h.deadline_ms.saturating_sub(now_ms),
                waiters: self.queue.len(),
            };
        }
        if ended {
            // Neither queued nor granted (it is not queued: leaving took
            // it out of the queue).
            if let Some(i) = self.position(owner) {
                self.queue.remove(i);
                out.push(Notice::Dropped {
                    owner: owner.to_string(),
                });
            }
            return Acquire::Busy(self.busy(now_ms));
        }
        if self.holder.is_none() {
            // Free: by the invariant the queue has no live waiter.
            let token = self.grant(owner.to_string(), ttl_ms, now_ms);
            return Acquire::Held {
                token,
                ttl_ms,
                waiters: self.queue.len(),
            };
        }
        let queued = self.position(owner);
        if queued.is_some() {
            out.push(Notice::Dropped {
                owner: owner.to_string(),
            });
        }
        let waiter = Waiter {
            owner: owner.to_string(),
            ttl_ms,
            deadline_ms: now_ms.saturating_add(wait_ms),
        };
        match queued {
            Some(i) if wait_ms == 0 => {
                self.queue.remove(i);
            }
            Some(i) => {
                self.queue[i] = waiter;
                return Acquire::Queued {
                    waiters: self.queue.len(),
                };
            }
            None if wait_ms > 0 && self.queue.len() < MAX_WAITERS => {
                self.queue.push_back(waiter);
                return Acquire::Queued {
                    waiters: self.queue.len(),
                };
            }
            None => {}
        }
        Acquire::Busy(self.busy(now_ms))
    }

    /// A queued request of `owner` gave up (its wait ended): it leaves the
    /// queue. Returns what to answer it, if it is still queued.
    pub fn give_up(
        &mut self,
        owner: &str,
        now_ms: u64,
        live: &dyn Fn(&str) -> bool,
        out: &mut Vec<Notice>,
    ) -> Busy {
        if let Some(i) = self.position(owner) {
            self.queue.remove(i);
        }
        self.settle(now_ms, live, out);
        self.busy(now_ms)
    }

    /// `release`: frees the lock if `owner`/`token` hold it (lease not
    /// ended), granting the head waiter; removes a queued `owner`.
    pub fn release(
        &mut self,
        owner: &str,
        token: u64,
        now_ms: u64,
        live: &dyn Fn(&str) -> bool,
        out: &mut Vec<Notice>,
    ) -> bool {
        self.settle(now_ms, live, out);
        if self.held_by(owner, token).is_some() {
            self.holder = None;
            self.settle(now_ms, live, out);
            return true;
        }
        if let Some(i) = self.position(owner) {
            self.queue.remove(i);
            self.remember_left(owner, now_ms);
            out.push(Notice::Dropped {
                owner: owner.to_string(),
            });
        }
        false
    }

    /// `extend`: the lease of the holder `owner`/`token` ends `ttl_ms` from now.
    pub fn extend(
        &mut self,
        owner: &str,
        token: u64,
        ttl_ms: u64,
        now_ms: u64,
        live: &dyn Fn(&str) -> bool,
        out: &mut Vec<Notice>,
    ) -> bool {
        self.settle(now_ms, live, out);
        let deadline = now_ms.saturating_add(ttl_ms);
        match self.holder.as_mut() {
            Some(h) if h.owner == owner && h.token == token => {
                h.deadline_ms = deadline;
                true
            }
            _ => false,
        }
    }

    /// `resume`: the lease left when `owner`/`token` hold the lock.
    pub fn resume(
        &mut self,
        owner: &str,
        token: u64,
        now_ms: u64,
        live: &dyn Fn(&str) -> bool,
        out: &mut Vec<Notice>,
    ) -> Option<u64> {
        self.settle(now_ms, live, out);
        self.held_by(owner, token)
            .map(|h| h.deadline_ms.saturating_sub(now_ms))
    }

    /// `inspect`.
    pub fn inspect(
        &mut self,
        now_ms: u64,
        live: &dyn Fn(&str) -> bool,
        out: &mut Vec<Notice>,
    ) -> Status {
        self.settle(now_ms, live, out);
        Status {
            token: self.holder.as_ref().map(|h| h.token),
            pttl_ms: self
                .holder
                .as_ref()
                .map(|h| h.deadline_ms.saturating_sub(now_ms)),
            waiters: self.queue.len(),
        }
    }

    /// When the alarm should next fire: the holder's lease end.
    pub fn alarm_at(&self) -> Option<u64> {
        self.holder.as_ref().map(|h| h.deadline_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
    const C: &str = "cccccccccccccccccccccccccccccccc";

    fn all(_: &str) -> bool {
        true
    }

    fn granted(out: &[Notice]) -> Vec<(String, u64)> {
        out.iter()
            .filter_map(|n| match n {
                Notice::Granted { owner, token, .. } => Some((owner.clone(), *token)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn grants_are_exclusive_and_tokens_strictly_increase() {
        let mut s = LockState::default();
        let mut out = vec![];
        assert_eq!(
            s.acquire(A, 1000, 0, 0, &all, &mut out),
            Acquire::Held {
                token: 1,
                ttl_ms: 1000,
                waiters: 0
            }
        );
        // A retried acquire is idempotent: same token, the lease left.
        assert_eq!(
            s.acquire(A, 5000, 0, 400, &all, &mut out),
            Acquire::Held {
                token: 1,
                ttl_ms: 600,
                waiters: 0
            }
        );
        assert_eq!(
            s.acquire(B, 1000, 0, 500, &all, &mut out),
            Acquire::Busy(Busy {
                token: 1,
                pttl_ms: 500,
                waiters: 0
            })
        );
        assert!(!s.release(B, 1, 500, &all, &mut out));
        assert!(!s.release(A, 2, 500, &all, &mut out));
        assert!(s.release(A, 1, 500, &all, &mut out));
        assert_eq!(
            s.acquire(B, 1000, 0, 501, &all, &mut out),
            Acquire::Held {
                token: 2,
                ttl_ms: 1000,
                waiters: 0
            }
        );
        assert!(out.is_empty());
        assert_eq!(s.counter, 2);
    }

    #[test]
    fn waiters_are_granted_in_fifo_order_by_release_and_expiry() {
        let mut s = LockState::default();
        let mut out = vec![];
        s.acquire(A, 1000, 0, 0, &all, &mut out);
        assert_eq!(
            s.acquire(B, 2000, 10_000, 1, &all, &mut out),
            Acquire::Queued { waiters: 1 }
        );
        assert_eq!(
            s.acquire(C, 3000, 10_000, 2, &all, &mut out),
            Acquire::Queued { waiters: 2 }
        );
        assert!(s.release(A, 1, 10, &all, &mut out));
        assert_eq!(granted(&out), vec![(B.to_string(), 2)]);
        assert_eq!(s.alarm_at(), Some(2010));
        out.clear();
        // B stops extending: at its lease end C is granted (the alarm).
        s.settle(2009, &all, &mut out);
        assert!(out.is_empty());
        s.settle(2010, &all, &mut out);
        assert_eq!(
            out,
            vec![Notice::Granted {
                owner: C.into(),
                token: 3,
                ttl_ms: 3000,
                waiters: 0
            }]
        );
        out.clear();
        // B's late release and extend touch nothing.
        assert!(!s.release(B, 2, 2020, &all, &mut out));
        assert!(!s.extend(B, 2, 1000, 2020, &all, &mut out));
        assert_eq!(s.resume(C, 3, 2020, &all, &mut out), Some(2990));
        assert_eq!(s.resume(B, 2, 2020, &all, &mut out), None);
    }

    #[test]
    fn dead_waiters_are_dropped_at_the_head() {
        let mut s = LockState::default();
        let mut out = vec![];
        s.acquire(A, 1000, 0, 0, &all, &mut out);
        s.acquire(B, 1000, 5000, 0, &all, &mut out);
        s.acquire(C, 1000, 5000, 0, &all, &mut out);
        let live = |o: &str| o == C;
        assert!(s.release(A, 1, 10, &live, &mut out));
        assert_eq!(granted(&out), vec![(C.to_string(), 2)]);
        assert!(s.queue.is_empty());
    }

    #[test]
    fn a_requeued_owner_keeps_its_place_and_its_old_request_is_dropped() {
        let mut s = LockState::default();
        let mut out = vec![];
        s.acquire(A, 1000, 0, 0, &all, &mut out);
        s.acquire(B, 1000, 5000, 0, &all, &mut out);
        s.acquire(C, 1000, 5000, 0, &all, &mut out);
        assert_eq!(
            s.acquire(B, 1000, 9000, 5, &all, &mut out),
            Acquire::Queued { waiters: 2 }
        );
        assert_eq!(out, vec![Notice::Dropped { owner: B.into() }]);
        assert_eq!(s.queue[0].owner, B);
        assert_eq!(s.queue[0].deadline_ms, 9005);
        out.clear();
        // Queued and trying once: leaves the queue, busy.
        assert!(matches!(
            s.acquire(B, 1000, 0, 6, &all, &mut out),
            Acquire::Busy(_)
        ));
        assert_eq!(s.queue.len(), 1);
        out.clear();
        // A queued owner's release leaves the queue.
        assert!(!s.release(C, 0, 7, &all, &mut out));
        assert_eq!(out, vec![Notice::Dropped { owner: C.into() }]);
        assert!(s.queue.is_empty());
    }

    #[test]
    fn give_up_leaves_the_queue_and_answers_the_holder() {
        let mut s = LockState::default();
        let mut out = vec![];
        s.acquire(A, 1000, 0, 0, &all, &mut out);
        s.acquire(B, 1000, 100, 0, &all, &mut out);
        assert_eq!(
            s.give_up(B, 100, &all, &mut out),
            Busy {
                token: 1,
                pttl_ms: 900,
                waiters: 0
            }
        );
        assert!(out.is_empty());
    }

    #[test]
    fn the_queue_is_bounded() {
        let mut s = LockState::default();
        let mut out = vec![];
        s.acquire(A, 1000, 0, 0, &all, &mut out);
        for i in 0..MAX_WAITERS {
            let o = format!("{i:032x}");
            assert!(matches!(
                s.acquire(&o, 1000, 10, 0, &all, &mut out),
                Acquire::Queued { .. }
            ));
        }
        assert!(matches!(
            s.acquire(B, 1000, 10, 0, &all, &mut out),
            Acquire::Busy(_)
        ));
        assert!(serde_json::to_vec(&s).unwrap().len() < 64 * 1024);
    }

    #[test]
    fn extend_moves_the_lease_and_inspect_reports_it() {
        let mut s = LockState::default();
        let mut out = vec![];
        s.acquire(A, 1000, 0, 0, &all, &mut out);
        assert!(s.extend(A, 1, 5000, 900, &all, &mut out));
        assert_eq!(s.alarm_at(), Some(5900));
        assert_eq!(
            s.inspect(1000, &all, &mut out),
            Status {
                token: Some(1),
                pttl_ms: Some(4900),
                waiters: 0
            }
        );
        assert_eq!(
            s.inspect(5900, &all, &mut out),
            Status {
                token: None,
                pttl_ms: None,
                waiters: 0
            }
        );
        // Free again: the next grant still counts up.
        assert!(matches!(
            s.acquire(B, 10, 0, 6000, &all, &mut out),
            Acquire::Held { token: 2, .. }
        ));
    }
}
