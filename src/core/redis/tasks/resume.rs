//! Resume: adopt a lock from its handle, after checking on the nodes that
//! the handle's owner token still holds the key on a quorum. A permit's
//! handle resumes as that permit: its key must be its slot's key.

use super::super::context::{Context, Held, TOKEN_BYTES};
use super::super::keys::{permit_base, permit_key, readers_key};
use super::super::quorum::{drift_ms, kth_largest};
use super::super::round::Round;
use super::super::scripts;
use super::super::task::{Next, Task};
use crate::core::names::validate_name;
use crate::core::*;

pub(super) fn is_token(s: &str) -> bool {
    s.len() == TOKEN_BYTES * 2
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

pub(in super::super) struct ResumeTask {
    op: OpId,
    handle: LockHandle,
    fence_key: String,
    /// Whose waiters the resumed lock's release wakes (see `Held`).
    wake_base: String,
    /// A reader of a read-write lock (see `Held::shared`).
    shared: bool,
    started: bool,
}

/// The checks every handle passes before anything is sent: its format
/// version, its backend (this machine's) and its name.
pub(super) fn check_handle(cx: &Context, handle: &LockHandle) -> Result<(), LockError> {
    if handle.v != 1 {
        return Err(LockError::invalid(format!(
            "unsupported lock handle version {}",
            handle.v
        )));
    }
    if handle.backend != cx.s.backend {
        return Err(LockError::invalid(format!(
            "the handle is for the {} backend, this client is {}",
            handle.backend.as_str(),
            cx.backend_str()
        )));
    }
    validate_name(&handle.name)?;
    Ok(())
}

impl ResumeTask {
    /// Validates `handle` against this machine before anything is sent.
    pub(in super::super) fn new(cx: &mut Context, handle: &LockHandle) -> Result<Self, LockError> {
        check_handle(cx, handle)?;
        let (key, fence_key) = cx.keys_for(&handle.name);
        // A handle resumes as the kind it was granted as: a permit on its
        // slot's key (waking its semaphore's waiters), a lock on the lock key.
        let (expected, wake_base) = match (handle.kind, handle.slot) {
            (LockKind::Exclusive | LockKind::Leader, None) => (key.clone(), key),
            // Redlock does not grant shared holds (see `rwlock`).
            (LockKind::Shared, None) if cx.node_count() == 1 => (readers_key(&key), key),
            (LockKind::Permits { limit }, Some(slot)) if slot < limit => {
                LockKind::permits(u64::from(limit))?;
                (permit_key(&key, slot), permit_base(&key))
            }
            (LockKind::Permits { .. }, _) => {
                return Err(LockError::invalid(
                    "a permit's handle needs a slot below its limit",
                ))
            }
            (kind, _) => {
                return Err(LockError::invalid(format!(
                    "the {} backend does not offer {} locks",
                    cx.backend_str(),
                    kind.as_str()
                )))
            }
        };
        if handle.key != expected {
            return Err(LockError::invalid(
                "the handle's key does not match its name, kind and this client's prefix",
            ));
        }
        if !is_token(&handle.owner) {
            return Err(LockError::invalid("the handle's owner token is malformed"));
        }
        let shared = handle.kind == LockKind::Shared;
        Ok(ResumeTask {
            op: cx.rt.out.op_id(),
            handle: handle.clone(),
            fence_key,
            wake_base,
            shared,
            started: false,
        })
    }
}

impl Task for ResumeTask {
    fn op(&self) -> Option<OpId> {
        Some(self.op)
    }

    fn step(self: Box<Self>, cx: &mut Context, round: Option<Round>, now: Millis) -> Next {
        match round {
            Some(round) => (*self).after_status(cx, &round, now),
            None if !self.started => (*self).ask_status(cx),
            None => {
                cx.rt.out.fail(
                    self.op,
                    LockError::internal("a resume was stepped without its round"),
                );
                Next::Done
            }
        }
    }
}

impl ResumeTask {
    /// Asks every node whether the handle's owner still holds its key.
    fn ask_status(mut self, cx: &mut Context) -> Next {
        let (key, owner) = (&self.handle.key, &self.handle.owner);
        let cmd = if self.shared {
            scripts::status_shared(key, &self.fence_key, owner)
        } else {
            scripts::status(key, &self.fence_key, Some(owner))
        };
        self.started = true;
        Next::round(self, cmd, cx.all_nodes())
    }

    /// Adopts the lock if a quorum vouches for the owner long enough;
    /// otherwise reports why not (the nodes' errors, or the lock is lost).
    fn after_status(self, cx: &mut Context, round: &Round, now: Millis) -> Next {
        let parsed = round.parsed(scripts::parse_status);
        let mine: Vec<u64> = parsed
            .iter()
            .filter_map(|(_, r)| r.as_ref().ok().filter(|s| s.mine).and_then(|s| s.pttl))
            .collect();
        let failed = parsed.iter().filter(|(_, r)| r.is_err()).count();
        let q = cx.quorum_size();
        // The key lives at least `pttl` past the round's start on each node.
        let exp = kth_largest(mine.clone(), q)
            .and_then(|p| {
                round
                    .started
                    .saturating_add(p)
                    .checked_sub(drift_ms(p, cx.s.drift_factor))
            })
            .filter(|e| *e > now);
        match exp {
            Some(exp) => self.adopt(cx, exp, now),
            None if mine.len() + failed >= q && failed > 0 => {
                let error =
                    cx.round_error(&self.handle.name, Round::first_error(&parsed), mine.len());
                cx.rt.out.fail(self.op, error);
            }
            None => {
                let reason = "the handle's key is no longer held by its owner".to_string();
                let error = LockError::Lost {
                    backend: cx.backend_str(),
                    name: self.handle.name,
                    reason,
                };
                cx.rt.out.fail(self.op, error);
            }
        }
        Next::Done
    }

    /// Holds the resumed lock until `exp` and answers the operation with it.
    fn adopt(self, cx: &mut Context, exp: Millis, now: Millis) {
        let ResumeTask {
            op,
            handle,
            fence_key,
            wake_base,
            shared,
            started: _,
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
            key: handle.key,
            fence_key,
            wake_base,
            token: handle.owner,
            shared,
            leader: handle.kind == LockKind::Leader,
            hold: None,
            ttl,
            fencing_token: handle.fencing_token,
            expires_at: exp,
            renew: cx.s.auto_extend,
            renewal: None,
            last_error: None,
        };
        // Soon: the remaining lifetime is whatever the previous owner left.
        cx.hold(held, now + (ttl / 3).min((exp - now) / 2));
        cx.rt.out.complete(op, Ok(Outcome::Acquired(info)));
    }
}
