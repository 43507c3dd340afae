//! Reenter: one more hold of an exclusive lock, proved by its handle's owner
//! token and counted on the nodes (`scripts::REENTER`), so the count
//! survives this process.
//!
//! One node and Redlock alike: one parallel round of the REENTER script on
//! every node with a fresh hold id. The hold is granted when a quorum of
//! nodes counted it (the key was the owner's there) and the outer lock's
//! validity has not ended: its end is computed as for an acquire or an
//! extend, `start + pttl − drift(pttl)` from the start of the round, `pttl`
//! the lifetime a quorum of the counting nodes still has (the quorum-th
//! largest PTTL they reported). Otherwise the hold id is released again
//! (RELEASE v5 with that id) on every node that counted it or may have, and
//! the operation fails: `Lost` when the owner no longer holds the key on a
//! quorum (as on one node), the round's error when too few nodes answered
//! to tell. The re-entered hold has the outer hold's token and handle.
//!
//! # Why counting holds per node is sound on Redlock
//!
//! Each node keeps its own set of holds `{prefix:name}:holds` (in the lock
//! key's hash slot): the owner's marker, `+` for the outer hold and one
//! member per re-entered hold id. The nodes never agree on a number: a set
//! of ids makes every change idempotent, and a node that missed a change
//! is never "off by one", it just does not know that hold. What keeps a
//! quorum is that a node only acts on holds it knows:
//!
//! - a release of hold `h` (RELEASE v5 with `h`, on every node) frees a
//!   node's key only when `h` was the last hold that node knew; a node
//!   that does not know `h` changes nothing (it answers 0);
//! - a renewal of `h` (EXTEND v4 with `h`) re-arms the key (and the set)
//!   only where the node knows `h`, so a hold's validity — granted by the
//!   REENTER round, then by its renewals — always rests on a quorum of
//!   nodes that know it;
//! - a node knows `h` from the REENTER that counted it until `h`'s release
//!   there (a node without a set knows only `+`; REENTER creates the set
//!   with `+`).
//!
//! So while a hold lives, the quorum its validity rests on keeps the key at
//! least until that validity ends, whatever happens to the other holds, and
//! two quorums intersect: no other client gets a quorum in the meantime.
//! A node that missed re-entry `h2` frees its key at the outer release (if
//! `h2` outlives it) while the quorum that recorded `h2` keeps the lock
//! held; for `h2` it is like a node whose key expired, which Redlock
//! already tolerates. (The first version let a release of an unknown hold
//! delete the key on a node without a set; the simulation,
//! `redlock_reentrant_holds`, found the outer hold's validity then resting
//! on nodes that had dropped the key: RELEASE v5 and EXTEND v4 close it.)
//! A release succeeds under Redlock's usual rule (a quorum confirmed it,
//! answering 1 or 2); requests: one round of N for a re-entry, one round
//! of N for each release.

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
    /// The hold id is being released again; then `error` is reported.
    Releasing { error: LockError },
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
            Phase::Counting | Phase::Releasing { .. } => {
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
            (Phase::Releasing { error }, Some(_)) => return self.report(cx, error),
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
        // Release the hold wherever it may have been counted (a node that
        // does not know it changes nothing, RELEASE v5).
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
        let h = &self.handle;
        let cmd = scripts::release_hold(
            &h.key,
            &self.fence_key,
            &h.key,
            &h.owner,
            h.fencing_token,
            &self.hold,
        );
        self.phase = Phase::Releasing { error };
        Next::round(*self, cmd, targets)
    }
}
