//! Reenter: one more hold of an exclusive lock, proved by its handle's owner
//! token and counted on the nodes (`scripts::REENTER`), so the count
//! survives this process.
//!
//! One node and Redlock alike: one parallel round of the REENTER script on
//! every node with a fresh hold id. The hold is granted when a quorum of
//! nodes counted it (the key was the owner's there) and the outer lock's
//! validity has not ended: the conservative end is computed as for an
//! acquire or an extend, `start + pttl − drift(pttl)` from the start of the
//! round, with the lifetime a quorum of the counting nodes still has (the
//! quorum-th largest PTTL they reported). Otherwise the hold id is removed
//! again (`SREM` of that member, see below) from every node that counted it
//! or may have, and the operation fails: `Lost` when the owner no longer
//! holds the key on a quorum (as on one node), the round's error when too
//! few nodes answered to tell.
//!
//! # Why counting holds per node is sound on Redlock
//!
//! Each node keeps the set of holds `{prefix:name}:holds`: the owner's
//! marker, `+` for the outer hold and one member per re-entered hold id.
//! Adds and removals are of members, so they are idempotent, and a node that
//! missed a change is never "off by one": it simply does not know a hold.
//! A release of hold `h` runs RELEASE v4 with `h` on every node, and a node
//! deletes its key only when its set has no hold of the owner left — or when
//! it never had a set (it counted no re-entry at all). So:
//!
//! - every node that counted `h` keeps its key until `h` is released there
//!   (or the key expires: renewals re-arm the key and its set together,
//!   EXTEND v3);
//! - a re-entered hold is only granted when a quorum counted it, so while
//!   any re-entered hold is live, a quorum keeps the key;
//! - every node that counted any re-entry also has `+` in its set (REENTER
//!   creates the set with it), so while the outer hold is live after a
//!   re-entry, that re-entry's quorum keeps the key; before any re-entry,
//!   nothing differs from a plain Redlock lock.
//!
//! A node that missed re-entry `h2` (it was down, or slow) frees its key
//! early — at the release of `h2` if it counted no re-entry at all, or at
//! the outer release — while the quorum that recorded `h2` keeps the lock
//! held; it is then just like a node on which the key expired, which
//! Redlock already tolerates. A quorum still decides: another client needs
//! a quorum of nodes with the key gone, and two quorums intersect in a node
//! that keeps it. A release succeeds under Redlock's usual rule (a quorum
//! confirmed it, answered 1 or 2).
//!
//! The failed re-entry's cleanup is a plain `SREM` of its hold id, never
//! the release script: a node that did not run the REENTER (its answer was
//! lost) has no set, and RELEASE there would delete the outer hold's key.
//! `SREM` only ever forgets this hold; in the rare race where it was the
//! owner's last hold on a node (every other hold released meanwhile), that
//! key stays until it expires (it is no longer renewed).

use super::super::context::{Context, Held};
use super::super::quorum::{expires_at, kth_largest};
use super::super::round::Round;
use super::super::scripts;
use super::super::task::{Next, OnClose, Task};
use super::resume::{check_handle, is_token};
use crate::core::*;

enum Phase {
    /// Nothing sent yet.
    Start,
    /// The REENTER round is out.
    Counting,
    /// The hold id is being removed again; then `error` is reported.
    Forgetting { error: LockError },
}

pub(in super::super) struct ReenterTask {
    /// `None` once the machine closed (the task only cleans up then).
    op: Option<OpId>,
    handle: LockHandle,
    fence_key: String,
    /// This hold's member in the lock's set of holds (random per re-entry,
    /// so that a retried release removes it once: see `scripts::REENTER`).
    hold: String,
    phase: Phase,
}

impl ReenterTask {
    /// Validates `handle` against this machine before anything is sent.
    pub(in super::super) fn new(cx: &mut Context, handle: &LockHandle) -> Result<Self, LockError> {
        check_handle(cx, handle)?;
        if handle.kind != LockKind::Exclusive || handle.slot.is_some() {
            return Err(LockError::invalid(format!(
                "only an exclusive lock can be re-entered, not a {} hold",
                handle.kind.describe()
            )));
        }
        let (key, fence_key) = cx.keys_for(&handle.name);
        if handle.key != key {
            return Err(LockError::invalid(
                "the handle's key does not match its name and this client's prefix",
            ));
        }
        if !is_token(&handle.owner) {
            return Err(LockError::invalid("the handle's owner token is malformed"));
        }
        let hold = random_hex(cx.entropy.as_mut(), 8);
        Ok(ReenterTask {
            op: Some(cx.rt.out.op_id()),
            handle: handle.clone(),
            fence_key,
            hold,
            phase: Phase::Start,
        })
    }

    fn grant(self, cx: &mut Context, op: OpId, exp: Millis, now: Millis) {
        let ReenterTask {
            handle,
            fence_key,
            hold,
            ..
        } = self;
        let id = cx.rt.out.lock_id();
        let ttl = cx.s.ttl_ms;
        let info = LockInfo {
            id,
            name: handle.name.clone(),
            fencing_token: handle.fencing_token,
            expires_at: exp,
            handle: handle.clone(),
        };
        let held = Held {
            id,
            name: handle.name,
            wake_base: handle.key.clone(),
            key: handle.key,
            fence_key,
            token: handle.owner,
            shared: false,
            leader: false,
            hold: Some(hold),
            ttl,
            fencing_token: handle.fencing_token,
            expires_at: exp,
            renew: cx.s.auto_extend,
            renewal: None,
            last_error: None,
        };
        // Like a resume: the remaining lifetime is what the outer hold left.
        cx.hold(held, now + (ttl / 3).min(exp.saturating_sub(now) / 2));
        cx.rt.out.complete(op, Ok(Outcome::Acquired(info)));
    }

    fn report(self, cx: &mut Context, error: LockError) -> Next {
        if let Some(op) = self.op {
            cx.rt.out.fail(op, error);
        }
        Next::Done
    }
}

impl Task for ReenterTask {
    fn op(&self) -> Option<OpId> {
        self.op
    }

    fn on_close(&mut self, _error: &LockError) -> OnClose {
        match self.phase {
            // Nothing was sent: nothing to undo.
            Phase::Start => OnClose::Stop,
            // The round may count the hold: take it back, silently.
            Phase::Counting | Phase::Forgetting { .. } => {
                self.op = None;
                OnClose::Detach
            }
        }
    }

    fn step(mut self: Box<Self>, cx: &mut Context, round: Option<Round>, now: Millis) -> Next {
        let phase = std::mem::replace(&mut self.phase, Phase::Counting);
        let round = match (phase, round) {
            (Phase::Start, None) => {
                let cmd = scripts::reenter(&self.handle.key, &self.handle.owner, &self.hold);
                return Next::round(*self, cmd, cx.all_nodes());
            }
            (Phase::Counting, Some(round)) => round,
            (Phase::Forgetting { error }, Some(_)) => return self.report(cx, error),
            _ => {
                let error = LockError::internal("a reenter was stepped without its round");
                return self.report(cx, error);
            }
        };
        let parsed = round.parsed(scripts::parse_reenter);
        let counted: Vec<u64> = parsed
            .iter()
            .filter_map(|(_, r)| r.as_ref().ok().copied().flatten())
            .collect();
        let failed = parsed.iter().filter(|(_, r)| r.is_err()).count();
        let q = cx.quorum_size();
        // The key lives at least `pttl` past the round's start on a quorum.
        let exp = kth_largest(counted.clone(), q)
            .and_then(|p| expires_at(round.started, now, p, cx.s.drift_factor));
        if let (Some(op), Some(exp)) = (self.op, exp) {
            self.grant(cx, op, exp, now);
            return Next::Done;
        }
        let error = if counted.len() + failed >= q && failed > 0 {
            cx.round_error(
                &self.handle.name,
                Round::first_error(&parsed),
                counted.len(),
            )
        } else {
            LockError::Lost {
                backend: cx.backend_str(),
                name: self.handle.name.clone(),
                reason: "the handle's key is no longer held by its owner".to_string(),
            }
        };
        // Forget the hold wherever it may have been counted.
        let targets: Vec<bool> = (0..cx.node_count())
            .map(|i| {
                parsed.iter().any(|(n, r)| {
                    *n == i
                        && match r {
                            Ok(counted) => counted.is_some(),
                            Err(e) => e.maybe_applied(),
                        }
                })
            })
            .collect();
        if !targets.contains(&true) {
            return self.report(cx, error);
        }
        let cmd = scripts::forget_hold(&self.handle.key, &self.hold);
        self.phase = Phase::Forgetting { error };
        Next::round(*self, cmd, targets)
    }
}
