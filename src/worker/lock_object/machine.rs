//! The lock's state and its transitions, as plain data: what the object
//! stores (one value, [`LockState`]) and what each checked operation does
//! to it at a given time. No I/O and no `worker` types: the Durable Object
//! glue (`object.rs`) loads the state, calls one of these, stores the
//! state if it changed and delivers the [`Notice`]s to the requests held
//! open; the tests run on the host (tests/worker_lock_object.rs).
//!
//! One name holds one exclusive holder, or any number of shared holders
//! (a read-write lock), or up to `limit` permits (a semaphore, each permit
//! in its own slot of `0..limit`). Requests queue in FIFO order with their
//! kind; the heads are granted while they are compatible with the holders,
//! stopping at the first that is not (a queued writer is not overtaken by
//! later readers).
//!
//! Invariants, after every operation:
//! - `counter` never decreases; every grant increments it and the grant's
//!   token is the new value, so tokens are unique and strictly increasing;
//! - a holder whose lease has ended is gone before anything else is
//!   decided (every operation starts with [`LockState::settle`]);
//! - the queue's head, if any, is not compatible with the holders
//!   (compatible heads are granted at once; a waiter whose request is no
//!   longer open is dropped when its turn comes);
//! - holders are compatible: one exclusive, or only shared, or at most
//!   `limit` permits in distinct slots below `limit`; every permit holder
//!   and live permit waiter has the same limit;
//! - an owner is queued at most once, and never while it holds.

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

/// The largest semaphore limit (the core's `MAX_PERMITS`).
pub const MAX_LIMIT: u32 = 100;

/// What a hold (or a queued request) is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Alone (a mutex, or the writer of a read-write lock).
    #[default]
    Exclusive,
    /// With other shared holders (a reader).
    Shared,
    /// One of a semaphore's permits.
    Permit,
}

impl Mode {
    fn is_exclusive(&self) -> bool {
        *self == Mode::Exclusive
    }
}

/// What an `acquire` asks for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Kind {
    #[default]
    Exclusive,
    Shared,
    /// A permit of a semaphore of `limit` (1..=[`MAX_LIMIT`]).
    Permit {
        limit: u32,
    },
}

impl Kind {
    pub fn mode(self) -> Mode {
        match self {
            Kind::Exclusive => Mode::Exclusive,
            Kind::Shared => Mode::Shared,
            Kind::Permit { .. } => Mode::Permit,
        }
    }

    pub fn limit(self) -> Option<u32> {
        match self {
            Kind::Permit { limit } => Some(limit),
            _ => None,
        }
    }

    fn of(mode: Mode, limit: Option<u32>) -> Kind {
        match (mode, limit) {
            (Mode::Shared, _) => Kind::Shared,
            (Mode::Permit, Some(limit)) => Kind::Permit { limit },
            _ => Kind::Exclusive,
        }
    }
}

fn is_exclusive_mode(m: &Mode) -> bool {
    m.is_exclusive()
}

/// A holder.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    pub owner: String,
    pub token: u64,
    /// Lease end, ms since the epoch.
    pub deadline_ms: u64,
    /// Absent in a state stored by an older version: exclusive.
    #[serde(default, skip_serializing_if = "is_exclusive_mode")]
    pub mode: Mode,
    /// A permit's slot in `0..limit`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot: Option<u32>,
}

/// A queued `acquire`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Waiter {
    pub owner: String,
    /// The lease it asked for, counted from its grant.
    pub ttl_ms: u64,
    /// When its request gives up (`acquired:false`), ms since the epoch.
    pub deadline_ms: u64,
    #[serde(default, skip_serializing_if = "is_exclusive_mode")]
    pub mode: Mode,
    /// A permit request's semaphore limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

impl Waiter {
    pub fn kind(&self) -> Kind {
        Kind::of(self.mode, self.limit)
    }
}

/// An owner that left (see [`LockState::left`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Left {
    pub owner: String,
    /// When it is forgotten, ms since the epoch.
    pub until_ms: u64,
}

/// Everything the object stores, under one key. Stored by an older version
/// (one `holder`, no kinds): read as that holder, exclusive.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "Stored")]
pub struct LockState {
    /// The lock name (set by the first request).
    pub name: String,
    /// The last fencing token granted (0: none yet).
    pub counter: u64,
    /// The holders, in grant order.
    pub holders: Vec<Holder>,
    /// The semaphore's limit while permits are held (`None` otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    pub queue: VecDeque<Waiter>,
    /// Owners that ended their acquire (an `acquire` with `waitMs` 0, or a
    /// release while queued), each with when it is forgotten (ms since the
    /// epoch), oldest first: a later waiting `acquire` of one of them that
    /// does not hold the lock is answered `acquired:false` and neither
    /// queued nor granted. A client's poll can arrive after its own leave
    /// (they travel on different connections); without this the abandoned
    /// owner would be queued again and granted a lease nobody uses. Absent
    /// in a state stored by an older version: empty.
    #[serde(skip_serializing_if = "VecDeque::is_empty")]
    pub left: VecDeque<Left>,
}

/// The stored shapes, old and new (see [`LockState`]).
#[derive(Deserialize)]
struct Stored {
    #[serde(default)]
    name: String,
    #[serde(default)]
    counter: u64,
    /// The older version's single holder.
    #[serde(default)]
    holder: Option<Holder>,
    #[serde(default)]
    holders: Vec<Holder>,
    #[serde(default)]
    limit: Option<u32>,
    #[serde(default)]
    queue: VecDeque<Waiter>,
    #[serde(default)]
    left: VecDeque<Left>,
}

impl From<Stored> for LockState {
    fn from(s: Stored) -> LockState {
        let mut holders = s.holders;
        holders.extend(s.holder);
        let limit = s
            .limit
            .filter(|_| holders.iter().any(|h| h.mode == Mode::Permit));
        LockState {
            name: s.name,
            counter: s.counter,
            holders,
            limit,
            queue: s.queue,
            left: s.left,
        }
    }
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
        /// A permit's slot.
        slot: Option<u32>,
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
        /// A permit's slot.
        slot: Option<u32>,
    },
    /// `acquired:false` at once.
    Busy(Busy),
    /// Queued: the request is held open until a [`Notice`] or its wait ends.
    Queued { waiters: usize },
    /// Refused, nothing changed: a permit of another limit than the one
    /// the name's permits are held (or queued) with.
    OtherLimit { limit: u32 },
}

/// `acquired:false`: the newest holder's token (the last one granted when
/// free) and the lease left until the first holder's lease ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Busy {
    pub token: u64,
    pub pttl_ms: u64,
    pub waiters: usize,
}

/// One holder, as `inspect` reports it (never its owner).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HolderStatus {
    pub mode: Mode,
    pub token: u64,
    pub pttl_ms: u64,
    pub slot: Option<u32>,
}

/// `inspect`'s answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Status {
    /// The newest holder's token.
    pub token: Option<u64>,
    /// The longest lease left among the holders.
    pub pttl_ms: Option<u64>,
    pub waiters: usize,
    /// The semaphore's limit while permits are held.
    pub limit: Option<u32>,
    /// Every holder, in grant order.
    pub holders: Vec<HolderStatus>,
}

/// `resume`'s answer: the hold of `owner`/`token`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hold {
    pub pttl_ms: u64,
    pub mode: Mode,
    pub limit: Option<u32>,
    pub slot: Option<u32>,
}

impl LockState {
    /// Drops the holders whose lease has ended (at `now_ms` or before) and
    /// grants the head waiters while they are compatible with the holders,
    /// dropping those that are not `live` (their request is no longer open)
    /// instead when their turn comes.
    pub fn settle(&mut self, now_ms: u64, live: &dyn Fn(&str) -> bool, out: &mut Vec<Notice>) {
        while self.left.front().is_some_and(|l| l.until_ms <= now_ms) {
            self.left.pop_front();
        }
        self.holders.retain(|h| h.deadline_ms > now_ms);
        self.fix_limit();
        while let Some(w) = self.queue.front() {
            // A dead head is dropped only when its turn comes (it keeps its
            // place until then: a re-sent acquire of it takes the place up).
            if !self.admits(w.kind()) {
                break;
            }
            let Some(w) = self.queue.pop_front() else {
                break;
            };
            if !live(&w.owner) {
                continue;
            }
            let (token, slot) = self.grant(w.owner.clone(), w.kind(), w.ttl_ms, now_ms);
            out.push(Notice::Granted {
                owner: w.owner,
                token,
                ttl_ms: w.ttl_ms,
                waiters: self.queue.len(),
                slot,
            });
        }
    }

    /// `limit` is set exactly while permits are held.
    fn fix_limit(&mut self) {
        if !self.holders.iter().any(|h| h.mode == Mode::Permit) {
            self.limit = None;
        }
    }

    /// Whether a hold of `kind` can join the current holders.
    fn admits(&self, kind: Kind) -> bool {
        if self.holders.is_empty() {
            return true;
        }
        match kind {
            Kind::Exclusive => false,
            Kind::Shared => self.holders.iter().all(|h| h.mode == Mode::Shared),
            Kind::Permit { limit } => {
                self.holders.iter().all(|h| h.mode == Mode::Permit)
                    && self.limit == Some(limit)
                    && self.holders.len() < limit as usize
            }
        }
    }

    /// The lowest slot no permit holder has (below `limit`).
    fn free_slot(&self, limit: u32) -> Option<u32> {
        (0..limit).find(|s| !self.holders.iter().any(|h| h.slot == Some(*s)))
    }

    /// Adds a holder (the caller checked [`LockState::admits`]).
    fn grant(&mut self, owner: String, kind: Kind, ttl_ms: u64, now_ms: u64) -> (u64, Option<u32>) {
        self.counter += 1;
        let slot = match kind {
            Kind::Permit { limit } => {
                self.limit = Some(limit);
                // Admitted: fewer than `limit` permits are held.
                self.free_slot(limit)
            }
            _ => None,
        };
        self.holders.push(Holder {
            owner,
            token: self.counter,
            deadline_ms: now_ms.saturating_add(ttl_ms),
            mode: kind.mode(),
            slot,
        });
        (self.counter, slot)
    }

    fn held_by(&self, owner: &str, token: u64) -> Option<usize> {
        self.holders
            .iter()
            .position(|h| h.owner == owner && h.token == token)
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
            token: self
                .holders
                .iter()
                .map(|h| h.token)
                .max()
                .unwrap_or(self.counter),
            pttl_ms: self
                .holders
                .iter()
                .map(|h| h.deadline_ms.saturating_sub(now_ms))
                .min()
                .unwrap_or(0),
            waiters: self.queue.len(),
        }
    }

    /// The limit a permit request must use: the held permits', or else the
    /// live queued permits' (`None`: any).
    fn required_limit(&self, live: &dyn Fn(&str) -> bool) -> Option<u32> {
        self.limit.or_else(|| {
            self.queue
                .iter()
                .find(|w| w.mode == Mode::Permit && live(&w.owner))
                .and_then(|w| w.limit)
        })
    }

    /// `acquire` of `kind`. An owner already queued is replaced in place
    /// (its older request gets [`Notice::Dropped`]; it keeps its place and
    /// the kind it queued with); with `wait_ms` 0 it leaves the queue
    /// instead. `wait_ms` 0 ends the owner's acquire: it is remembered as
    /// left, and a later waiting acquire of it (`wait_ms` > 0: a poll that
    /// its own leave overtook) that does not hold the lock answers
    /// `acquired:false`, neither queued nor granted. (Trying again with
    /// `wait_ms` 0 stays possible.) A permit of another limit than the
    /// name's permits are held or queued with is refused
    /// ([`Acquire::OtherLimit`]) and takes nothing (a refused `wait_ms` 0
    /// is still remembered as left).
    #[allow(clippy::too_many_arguments)]
    pub fn acquire(
        &mut self,
        owner: &str,
        kind: Kind,
        ttl_ms: u64,
        wait_ms: u64,
        now_ms: u64,
        live: &dyn Fn(&str) -> bool,
        out: &mut Vec<Notice>,
    ) -> Acquire {
        self.settle(now_ms, live, out);
        if let Some(h) = self.holders.iter().find(|h| h.owner == owner) {
            return Acquire::Held {
                token: h.token,
                ttl_ms: h.deadline_ms.saturating_sub(now_ms),
                waiters: self.queue.len(),
                slot: h.slot,
            };
        }
        let ended = wait_ms > 0 && self.has_left(owner);
        if wait_ms == 0 {
            // Before the limit check: a leave refused for its limit is a
            // leave all the same (its own poll may still be on the way).
            self.remember_left(owner, now_ms);
        }
        if let Kind::Permit { limit } = kind {
            let other = |o: &str| o != owner && live(o);
            if let Some(required) = self.required_limit(&other).filter(|l| *l != limit) {
                return Acquire::OtherLimit { limit: required };
            }
        }
        if ended {
            return self.refuse_ended(owner, now_ms, out);
        }
        if self.queue.is_empty() && self.admits(kind) {
            // By the invariant an empty queue has nobody ahead.
            let (token, slot) = self.grant(owner.to_string(), kind, ttl_ms, now_ms);
            return Acquire::Held {
                token,
                ttl_ms,
                waiters: self.queue.len(),
                slot,
            };
        }
        self.queue_up(owner, kind, (ttl_ms, wait_ms), now_ms, live, out)
    }

    /// A waiting `acquire` of `owner` after it left: neither queued nor
    /// granted (it is not queued: leaving took it out of the queue).
    fn refuse_ended(&mut self, owner: &str, now_ms: u64, out: &mut Vec<Notice>) -> Acquire {
        if let Some(i) = self.position(owner) {
            self.queue.remove(i);
            out.push(Notice::Dropped {
                owner: owner.to_string(),
            });
        }
        Acquire::Busy(self.busy(now_ms))
    }

    /// An `acquire` of `kind` that cannot be granted now: queued (an
    /// owner already queued is replaced in place), or with `wait_ms` 0
    /// out of the queue, or refused when the queue is full.
    fn queue_up(
        &mut self,
        owner: &str,
        kind: Kind,
        (ttl_ms, wait_ms): (u64, u64),
        now_ms: u64,
        live: &dyn Fn(&str) -> bool,
        out: &mut Vec<Notice>,
    ) -> Acquire {
        let queued = self.position(owner);
        if queued.is_some() {
            out.push(Notice::Dropped {
                owner: owner.to_string(),
            });
        }
        match queued {
            Some(i) if wait_ms == 0 => {
                self.queue.remove(i);
                // The head may have left: the next ones may be compatible.
                self.settle(now_ms, &|o| o != owner && live(o), out);
            }
            Some(i) => {
                let w = &mut self.queue[i];
                w.ttl_ms = ttl_ms;
                w.deadline_ms = now_ms.saturating_add(wait_ms);
                return Acquire::Queued {
                    waiters: self.queue.len(),
                };
            }
            None if wait_ms > 0 && self.queue.len() < MAX_WAITERS => {
                self.queue.push_back(Waiter {
                    owner: owner.to_string(),
                    ttl_ms,
                    deadline_ms: now_ms.saturating_add(wait_ms),
                    mode: kind.mode(),
                    limit: kind.limit(),
                });
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

    /// `release`: frees the hold of `owner`/`token` (lease not ended),
    /// granting the head waiters it admits; removes a queued `owner`.
    pub fn release(
        &mut self,
        owner: &str,
        token: u64,
        now_ms: u64,
        live: &dyn Fn(&str) -> bool,
        out: &mut Vec<Notice>,
    ) -> bool {
        self.settle(now_ms, live, out);
        if let Some(i) = self.held_by(owner, token) {
            self.holders.remove(i);
            self.settle(now_ms, live, out);
            return true;
        }
        if let Some(i) = self.position(owner) {
            self.queue.remove(i);
            self.remember_left(owner, now_ms);
            out.push(Notice::Dropped {
                owner: owner.to_string(),
            });
            // It may have been the head.
            self.settle(now_ms, live, out);
        }
        false
    }

    /// `extend`: the lease of the hold `owner`/`token` ends `ttl_ms` from now.
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
        match self.held_by(owner, token) {
            Some(i) => {
                self.holders[i].deadline_ms = now_ms.saturating_add(ttl_ms);
                true
            }
            None => false,
        }
    }

    /// `resume`: the hold of `owner`/`token`, if it lasts.
    pub fn resume(
        &mut self,
        owner: &str,
        token: u64,
        now_ms: u64,
        live: &dyn Fn(&str) -> bool,
        out: &mut Vec<Notice>,
    ) -> Option<Hold> {
        self.settle(now_ms, live, out);
        let h = &self.holders[self.held_by(owner, token)?];
        Some(Hold {
            pttl_ms: h.deadline_ms.saturating_sub(now_ms),
            mode: h.mode,
            limit: self.limit.filter(|_| h.mode == Mode::Permit),
            slot: h.slot,
        })
    }

    /// `inspect`.
    pub fn inspect(
        &mut self,
        now_ms: u64,
        live: &dyn Fn(&str) -> bool,
        out: &mut Vec<Notice>,
    ) -> Status {
        self.settle(now_ms, live, out);
        let left = |h: &Holder| h.deadline_ms.saturating_sub(now_ms);
        Status {
            token: self.holders.iter().map(|h| h.token).max(),
            pttl_ms: self.holders.iter().map(left).max(),
            waiters: self.queue.len(),
            limit: self.limit,
            holders: self
                .holders
                .iter()
                .map(|h| HolderStatus {
                    mode: h.mode,
                    token: h.token,
                    pttl_ms: left(h),
                    slot: h.slot,
                })
                .collect(),
        }
    }

    /// When the alarm should next fire: the earliest lease end.
    pub fn alarm_at(&self) -> Option<u64> {
        self.holders.iter().map(|h| h.deadline_ms).min()
    }
}

#[cfg(test)]
mod tests {
    use super::{Acquire, Busy, HolderStatus, Kind, LockState, Mode, Notice, Status, MAX_WAITERS};

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
            s.acquire(A, Kind::Exclusive, 1000, 0, 0, &all, &mut out),
            Acquire::Held {
                token: 1,
                ttl_ms: 1000,
                waiters: 0,
                slot: None
            }
        );
        // A retried acquire is idempotent: same token, the lease left.
        assert_eq!(
            s.acquire(A, Kind::Exclusive, 5000, 0, 400, &all, &mut out),
            Acquire::Held {
                token: 1,
                ttl_ms: 600,
                waiters: 0,
                slot: None
            }
        );
        assert_eq!(
            s.acquire(B, Kind::Exclusive, 1000, 0, 500, &all, &mut out),
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
            s.acquire(B, Kind::Exclusive, 1000, 0, 501, &all, &mut out),
            Acquire::Held {
                token: 2,
                ttl_ms: 1000,
                waiters: 0,
                slot: None
            }
        );
        assert!(out.is_empty());
        assert_eq!(s.counter, 2);
    }

    #[test]
    fn waiters_are_granted_in_fifo_order_by_release_and_expiry() {
        let mut s = LockState::default();
        let mut out = vec![];
        s.acquire(A, Kind::Exclusive, 1000, 0, 0, &all, &mut out);
        assert_eq!(
            s.acquire(B, Kind::Exclusive, 2000, 10_000, 1, &all, &mut out),
            Acquire::Queued { waiters: 1 }
        );
        assert_eq!(
            s.acquire(C, Kind::Exclusive, 3000, 10_000, 2, &all, &mut out),
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
                waiters: 0,
                slot: None
            }]
        );
        out.clear();
        // B's late release and extend touch nothing.
        assert!(!s.release(B, 2, 2020, &all, &mut out));
        assert!(!s.extend(B, 2, 1000, 2020, &all, &mut out));
        assert_eq!(
            s.resume(C, 3, 2020, &all, &mut out).map(|h| h.pttl_ms),
            Some(2990)
        );
        assert_eq!(s.resume(B, 2, 2020, &all, &mut out), None);
    }

    #[test]
    fn dead_waiters_are_dropped_at_the_head() {
        let mut s = LockState::default();
        let mut out = vec![];
        s.acquire(A, Kind::Exclusive, 1000, 0, 0, &all, &mut out);
        s.acquire(B, Kind::Exclusive, 1000, 5000, 0, &all, &mut out);
        s.acquire(C, Kind::Exclusive, 1000, 5000, 0, &all, &mut out);
        let live = |o: &str| o == C;
        assert!(s.release(A, 1, 10, &live, &mut out));
        assert_eq!(granted(&out), vec![(C.to_string(), 2)]);
        assert!(s.queue.is_empty());
    }

    #[test]
    fn a_requeued_owner_keeps_its_place_and_its_old_request_is_dropped() {
        let mut s = LockState::default();
        let mut out = vec![];
        s.acquire(A, Kind::Exclusive, 1000, 0, 0, &all, &mut out);
        s.acquire(B, Kind::Exclusive, 1000, 5000, 0, &all, &mut out);
        s.acquire(C, Kind::Exclusive, 1000, 5000, 0, &all, &mut out);
        assert_eq!(
            s.acquire(B, Kind::Exclusive, 1000, 9000, 5, &all, &mut out),
            Acquire::Queued { waiters: 2 }
        );
        assert_eq!(out, vec![Notice::Dropped { owner: B.into() }]);
        assert_eq!(s.queue[0].owner, B);
        assert_eq!(s.queue[0].deadline_ms, 9005);
        out.clear();
        // Queued and trying once: leaves the queue, busy.
        assert!(matches!(
            s.acquire(B, Kind::Exclusive, 1000, 0, 6, &all, &mut out),
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
        s.acquire(A, Kind::Exclusive, 1000, 0, 0, &all, &mut out);
        s.acquire(B, Kind::Exclusive, 1000, 100, 0, &all, &mut out);
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
        s.acquire(A, Kind::Exclusive, 1000, 0, 0, &all, &mut out);
        for i in 0..MAX_WAITERS {
            let o = format!("{i:032x}");
            assert!(matches!(
                s.acquire(&o, Kind::Exclusive, 1000, 10, 0, &all, &mut out),
                Acquire::Queued { .. }
            ));
        }
        assert!(matches!(
            s.acquire(B, Kind::Exclusive, 1000, 10, 0, &all, &mut out),
            Acquire::Busy(_)
        ));
        assert!(serde_json::to_vec(&s).unwrap().len() < 64 * 1024);
    }

    #[test]
    fn extend_moves_the_lease_and_inspect_reports_it() {
        let mut s = LockState::default();
        let mut out = vec![];
        s.acquire(A, Kind::Exclusive, 1000, 0, 0, &all, &mut out);
        assert!(s.extend(A, 1, 5000, 900, &all, &mut out));
        assert_eq!(s.alarm_at(), Some(5900));
        assert_eq!(
            s.inspect(1000, &all, &mut out),
            Status {
                token: Some(1),
                pttl_ms: Some(4900),
                waiters: 0,
                limit: None,
                holders: vec![HolderStatus {
                    mode: Mode::Exclusive,
                    token: 1,
                    pttl_ms: 4900,
                    slot: None
                }]
            }
        );
        assert_eq!(
            s.inspect(5900, &all, &mut out),
            Status {
                token: None,
                pttl_ms: None,
                waiters: 0,
                limit: None,
                holders: vec![]
            }
        );
        // Free again: the next grant still counts up.
        assert!(matches!(
            s.acquire(B, Kind::Exclusive, 10, 0, 6000, &all, &mut out),
            Acquire::Held { token: 2, .. }
        ));
    }
}
