//! Reenter (one Redis node): one more hold of an exclusive lock, proved by
//! its handle's owner token and counted on the node (`scripts::REENTER`),
//! so the count survives this process. Redlock refuses it: a count per
//! node would need the quorum's agreement on every increment and
//! decrement, which this crate does not offer.

use super::super::context::{Context, Held};
use super::super::quorum::drift_ms;
use super::super::round::Round;
use super::super::scripts;
use super::super::task::{Next, Task};
use super::resume::{check_handle, is_token};
use crate::core::*;

pub(in super::super) struct ReenterTask {
    op: OpId,
    handle: LockHandle,
    fence_key: String,
    /// This hold's member in the lock's set of holds (random per re-entry,
    /// so that a retried release removes it once: see `scripts::REENTER`).
    hold: String,
    started: bool,
}

impl ReenterTask {
    /// Validates `handle` against this machine before anything is sent.
    pub(in super::super) fn new(cx: &mut Context, handle: &LockHandle) -> Result<Self, LockError> {
        if cx.node_count() != 1 || cx.s.backend == BackendKind::Redlock {
            return Err(LockError::invalid(
                "the redlock backend does not offer reentrant locks: a hold count on each \
                 node would need a quorum's agreement on every change (use etcd or one Redis node)",
            ));
        }
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
            op: cx.rt.out.op_id(),
            handle: handle.clone(),
            fence_key,
            hold,
            started: false,
        })
    }
}

impl Task for ReenterTask {
    fn op(&self) -> Option<OpId> {
        Some(self.op)
    }

    fn step(self: Box<Self>, cx: &mut Context, round: Option<Round>, now: Millis) -> Next {
        let ReenterTask {
            op,
            handle,
            fence_key,
            hold,
            started,
        } = *self;
        let round = match round {
            Some(round) => round,
            None if !started => {
                let cmd = scripts::reenter(&handle.key, &handle.owner, &hold);
                return Next::round(
                    ReenterTask {
                        op,
                        handle,
                        fence_key,
                        hold,
                        started: true,
                    },
                    cmd,
                    cx.all_nodes(),
                );
            }
            None => {
                cx.rt.out.fail(
                    op,
                    LockError::internal("a reenter was stepped without its round"),
                );
                return Next::Done;
            }
        };
        let parsed = round.parsed(scripts::parse_reenter);
        match parsed.first().map(|(_, r)| r) {
            Some(Ok(Some(pttl))) => {
                let pttl = *pttl;
                let exp = round
                    .started
                    .saturating_add(pttl)
                    .saturating_sub(drift_ms(pttl, cx.s.drift_factor))
                    .max(now);
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
            Some(Ok(None)) => {
                let error = LockError::Lost {
                    backend: cx.backend_str(),
                    name: handle.name,
                    reason: "the handle's key is no longer held by its owner".to_string(),
                };
                cx.rt.out.fail(op, error);
            }
            _ => {
                let error = cx.round_error(&handle.name, Round::first_error(&parsed), 0);
                cx.rt.out.fail(op, error);
            }
        }
        Next::Done
    }
}
