//! Release: one txn deleting exactly the hold's key incarnations (a permit:
//! its queue key and its slot key, all or none), so a late release never
//! touches a newer holder.
//!
//! An exclusive lock's release goes through its hold count (see
//! `hold_count.rs`): the first txn deletes the key only while no count
//! exists; otherwise what it read back says whether to write the count less
//! one or, for the last hold, delete the key and its count together.

use super::super::{EtcdMachine, ORPHAN_RETRY_MS};
use super::hold_count::{
    broken_reply, count_contended, count_value, parse_count, read_back, MAX_COUNT_TRIES,
};
use super::{Next, Reply};
use crate::core::etcd::gateway as gw;
use crate::core::{random_hex, LockError, LockId, Millis, OpId, Outcome};

pub(in super::super) struct ReleaseOp {
    lock: LockId,
    step: Step,
}

/// Where a release is.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Step {
    /// Not an exclusive lock (a permit, a shared hold, a leadership): the
    /// plain delete of its keys.
    Plain,
    /// Delete the lock key unless holds are counted on it.
    First { tries: u32 },
    /// Writing the count minus one (with `nonce`).
    Decrement { nonce: Vec<u8>, tries: u32 },
    /// The last hold: deleting the lock key and its count key.
    Last { tries: u32 },
}

impl Step {
    fn tries(&self) -> u32 {
        match self {
            Step::Plain => 0,
            Step::First { tries } | Step::Decrement { tries, .. } | Step::Last { tries } => *tries,
        }
    }
}

/// What a counted step knows of the hold.
struct Hold {
    name: String,
    key: Vec<u8>,
    rev: i64,
    lease: i64,
    count_key: Vec<u8>,
}

impl ReleaseOp {
    /// The lock this operation is about.
    pub(in super::super) fn lock(&self) -> LockId {
        self.lock
    }

    /// Starts the release of `lock` (op `op`): its delete txn, or the answer
    /// "released" at once for a lock no longer held (a release is idempotent).
    pub(in super::super) fn start(m: &mut EtcdMachine, op: OpId, lock: LockId) -> Next {
        let Some(held) = m.locks.get(&lock) else {
            let released = Outcome::Released {
                lock,
                held_until_release: false,
            };
            m.rt.out.complete(op, Ok(released));
            return Next::Done;
        };
        let (countable, keys) = (held.countable(), held.keys());
        let count_key = m.count_key(&held.name);
        if let Some(l) = m.locks.get_mut(&lock) {
            l.releasing = true;
        }
        let (step, body) = match keys.as_slice() {
            // An exclusive lock: deleted at once unless holds are counted
            // on it (no extra request for a plain lock).
            [(key, rev)] if countable => (
                Step::First { tries: 0 },
                gw::release_uncounted_txn(key, *rev, &count_key),
            ),
            [(key, rev)] => (Step::Plain, gw::delete_if_revision(key, *rev)),
            keys => (
                Step::Plain,
                gw::delete_all_if_revisions(
                    &keys
                        .iter()
                        .map(|(k, r)| (k.as_slice(), *r))
                        .collect::<Vec<_>>(),
                ),
            ),
        };
        Next::txn(ReleaseOp { lock, step }, body)
    }

    pub(in super::super) fn step(
        self,
        m: &mut EtcdMachine,
        now: Millis,
        op: OpId,
        reply: Reply,
    ) -> Next {
        match self.step {
            Step::Plain => self.on_plain(m, now, op, reply),
            _ => self.on_counted(m, now, op, reply),
        }
    }

    /// The plain delete's answer.
    fn on_plain(self, m: &mut EtcdMachine, now: Millis, op: OpId, reply: Reply) -> Next {
        let lock = self.lock;
        let Some(held) = m.locks.get(&lock) else {
            let released = Outcome::Released {
                lock,
                held_until_release: false,
            };
            m.rt.out.complete(op, Ok(released));
            return Next::Done;
        };
        let name = held.name.clone();
        match reply.txn() {
            Ok(t) => {
                if let Some(h) = m.locks.remove(&lock) {
                    if h.is_permit() {
                        if !t.succeeded {
                            // One of a permit's two keys was gone: the
                            // other, if still ours, goes in the background.
                            m.orphan_keys_of(h, now);
                        }
                    } else if h.claims_name() {
                        m.free_name(now, &name);
                    }
                }
                let released = Outcome::Released {
                    lock,
                    held_until_release: t.succeeded,
                };
                m.rt.out.complete(op, Ok(released));
            }
            Err(f) => {
                // Give up on the lock locally; keep deleting it in the background.
                if let Some(h) = m.locks.remove(&lock) {
                    m.orphan_keys_of(h, now + ORPHAN_RETRY_MS);
                }
                let error = m.backend_error(&name, f);
                m.rt.out.fail(op, error);
            }
        }
        Next::Done
    }

    /// A counted step's answer (see the module docs).
    fn on_counted(self, m: &mut EtcdMachine, now: Millis, op: OpId, reply: Reply) -> Next {
        let lock = self.lock;
        let Some(held) = m.locks.get(&lock) else {
            // Lost meanwhile.
            return finish(m, now, op, lock, false);
        };
        let h = Hold {
            name: held.name.clone(),
            key: held.key.clone(),
            rev: held.rev,
            lease: held.lease,
            count_key: m.count_key(&held.name),
        };
        let t = match reply.txn() {
            Ok(t) => t,
            Err(f) => {
                let e = m.backend_error(&h.name, f);
                return abandon(m, now, op, lock, e);
            }
        };
        if t.succeeded {
            if matches!(self.step, Step::Decrement { .. }) {
                m.note_shared_lease(h.lease);
            }
            return finish(m, now, op, lock, true);
        }
        let Some((still_held, count)) = read_back(&t, &h.key, h.rev, &h.count_key) else {
            return abandon(m, now, op, lock, broken_reply(&h.name));
        };
        let parsed = count.as_ref().and_then(|c| parse_count(&c.value));
        if let Step::Decrement { nonce, .. } = &self.step {
            // A retried decrement whose first attempt applied.
            if parsed
                .as_ref()
                .is_some_and(|c| c.token == h.rev && c.nonce == *nonce)
            {
                m.note_shared_lease(h.lease);
                return finish(m, now, op, lock, true);
            }
        }
        if !still_held {
            return finish(m, now, op, lock, false);
        }
        let tries = self.step.tries() + 1;
        if tries > MAX_COUNT_TRIES {
            return abandon(m, now, op, lock, count_contended(&h.name));
        }
        let (step, body) = match (count, parsed) {
            (Some(c), Some(p)) if p.token == h.rev && p.holds >= 2 => {
                let nonce = random_hex(m.entropy.as_mut(), 8).into_bytes();
                let value = count_value(h.rev, p.holds - 1, &nonce);
                (
                    Step::Decrement { nonce, tries },
                    gw::put_count_txn(&h.key, h.rev, &h.count_key, c.mod_revision, h.lease, &value),
                )
            }
            // The last hold (or a count of an earlier incarnation: one hold).
            (Some(c), _) => (
                Step::Last { tries },
                gw::delete_counted_txn(&h.key, h.rev, &h.count_key, c.mod_revision),
            ),
            // The count key vanished in between: the plain delete again.
            (None, _) => (
                Step::First { tries },
                gw::release_uncounted_txn(&h.key, h.rev, &h.count_key),
            ),
        };
        Next::txn(ReleaseOp { lock, step }, body)
    }
}

/// A release is over: the hold is gone locally.
fn finish(m: &mut EtcdMachine, now: Millis, op: OpId, lock: LockId, held: bool) -> Next {
    if let Some(h) = m.locks.remove(&lock) {
        if h.claims_name() {
            m.pass_on_name(now, &h);
        }
        if h.reentered {
            m.drop_lease_if_unused(h.lease, op);
        }
    }
    let released = Outcome::Released {
        lock,
        held_until_release: held,
    };
    m.rt.out.complete(op, Ok(released));
    Next::Done
}

/// A release without a known outcome: give the hold up locally. Its key
/// is deleted in the background only when no other local hold shares
/// it, and then only while no count exists (see `timers.rs`).
fn abandon(m: &mut EtcdMachine, now: Millis, op: OpId, lock: LockId, error: LockError) -> Next {
    if let Some(h) = m.locks.remove(&lock) {
        let shared_key = m.locks.values().any(|l| l.key == h.key);
        if shared_key {
            if h.claims_name() {
                m.pass_on_name(now, &h);
            }
        } else if h.reentered {
            m.drop_lease_if_unused(h.lease, op);
        } else {
            m.orphan_keys_of(h, now + ORPHAN_RETRY_MS);
        }
    }
    m.rt.out.fail(op, error);
    Next::Done
}
