//! How a waiting acquire proceeds against the lock service. Each step takes
//! the acquire's state ([`Acquiring`]) out of the table by value and either
//! ends it (granted, refused, failed, leaving) or hands it on to what it
//! waits for next: another poll (sent now, or after a pause), or the extend
//! that confirms a late grant.

use super::super::codec::{self, AcquireAnswer, AnswerError, ApiOp};
use super::super::MAX_POLL_WAIT_MS;
use super::{Core, Durable, Req, BACKEND, LEAVE_TTL_MS};
use crate::core::lease::{self, Acquiring, Answer};
use crate::core::{LockError, LockKind, Millis, OpId, Outcome, Wait};

/// A refusal that came back before its `waitMs` (a newer poll of the same
/// owner superseded it, or a service that does not hold requests open) is
/// followed by a pause this long at most before the next poll.
const EARLY_REFUSAL_PAUSE_MS: u64 = 250;

/// What a poll's grant carried.
struct Grant {
    token: u64,
    /// The lease left (the full TTL for a new grant).
    ttl_ms: u64,
    /// A permit's slot.
    slot: Option<u32>,
}

impl Durable {
    /// Sends acquire `op`'s poll (`a`: its state, listed again with the
    /// poll in flight).
    pub(super) fn poll(&self, core: &mut Core, now: Millis, op: OpId, mut a: Acquiring) {
        let wait_ms = match (a.wait, a.deadline) {
            (Wait::Try, _) => 0,
            // At least 1 ms: `waitMs` 0 is how an acquire leaves, and the
            // service refuses a waiting poll of an owner that left (a late
            // poll overtaken by its own leave must not be granted).
            (_, Some(d)) => d.saturating_sub(now).clamp(1, MAX_POLL_WAIT_MS),
            (_, None) => MAX_POLL_WAIT_MS,
        };
        let body = codec::acquire_body(&a.owner, a.kind, a.ttl, wait_ms);
        let timeout = wait_ms + self.cfg.request_timeout_ms;
        let req = lease::Req::Own(Req::Acquire { op, sent_at: now });
        let to = (ApiOp::Acquire, a.name.as_str());
        a.request = Some(self.send(core, now, req, to, body, timeout));
        core.acquires.insert(op, a);
    }

    /// The answer of acquire `op`'s poll sent at `sent_at`.
    pub(super) fn on_acquire(
        &mut self,
        core: &mut Core,
        now: Millis,
        op: OpId,
        sent_at: Millis,
        input: Answer,
    ) {
        let Some(a) = core.acquires.get_mut(&op) else {
            return;
        };
        a.request = None;
        let (name, owner) = (a.name.clone(), a.owner.clone());
        let answer = self.read(core, (&name, &owner), &input, codec::parse_acquire);
        let Some(a) = core.acquires.remove(&op) else {
            return;
        };
        match answer {
            Ok(AcquireAnswer::Granted {
                token,
                ttl_ms,
                slot,
            }) => {
                let grant = Grant {
                    token,
                    ttl_ms,
                    slot,
                };
                self.on_grant(core, (now, sent_at), op, a, grant);
            }
            Ok(AcquireAnswer::OtherLimit { limit }) => {
                let asked = match a.kind {
                    LockKind::Permits { limit } => limit,
                    _ => 0,
                };
                let error = LockError::invalid(format!(
                    "the durable-object semaphore {:?} is held with limit {limit}, not {asked}: every holder of a name must use the same limit (nothing was taken)",
                    a.name
                ));
                // Nothing was taken; an earlier poll of it may still be queued.
                self.fail_leaving(core, now, op, a, error);
            }
            Ok(AcquireAnswer::Refused) => self.on_refused(core, (now, sent_at), op, a),
            // Its outcome is unknown: it may be queued, or even granted.
            Err(error) => self.fail_leaving(core, now, op, a, error),
        }
    }

    /// Fails acquire `op` with `error` after sending its leave (which also
    /// releases whatever the service may have granted it).
    fn fail_leaving(&self, core: &mut Core, now: Millis, op: OpId, a: Acquiring, error: LockError) {
        core.rt.timers.clear(lease::Timer::Poll(op));
        self.leave(core, now, None, a);
        core.rt.out.fail(op, error);
    }

    /// A poll (sent at `sent_at`) was granted.
    fn on_grant(
        &mut self,
        core: &mut Core,
        (now, sent_at): (Millis, Millis),
        op: OpId,
        a: Acquiring,
        g: Grant,
    ) {
        if let LockKind::Permits { limit } = a.kind {
            if g.slot.map_or(true, |s| s >= limit) {
                let error = Self::backend_error(
                    &a.name,
                    AnswerError {
                        status: None,
                        message: "malformed answer from the lock service: a permit's grant without a slot below its limit".into(),
                    },
                );
                // Whatever it granted is released by the leave.
                return self.fail_leaving(core, now, op, a, error);
            }
        }
        core.rt.timers.clear(lease::Timer::Poll(op));
        // The lease asked for, or what is left of it if it was ours already.
        let ttl = g.ttl_ms.min(a.ttl);
        let expires_at = codec::lease_validity(ttl)
            .map(|v| sent_at.saturating_add(v))
            .filter(|e| *e > now);
        // Measured from the poll's send time, a grant that arrives after
        // its first renewal was due (the service held the poll open) has
        // little or no validity left, though its lease began at the grant:
        // confirm it first.
        let renewal_due = now >= sent_at.saturating_add(ttl / 3);
        match expires_at {
            Some(expires_at) if !renewal_due => {
                core.grant(op, a, g.token, g.slot, sent_at, expires_at)
            }
            _ => self.confirm(core, now, op, a, (g.token, g.slot)),
        }
    }

    /// A poll (sent at `sent_at`) was refused: the acquire ends if it only
    /// tried or its wait ran out, else it polls again.
    fn on_refused(
        &mut self,
        core: &mut Core,
        (now, sent_at): (Millis, Millis),
        op: OpId,
        a: Acquiring,
    ) {
        if a.wait == Wait::Try {
            core.rt.out.complete(op, Ok(Outcome::NotAcquired));
        } else if a.deadline.is_some_and(|d| d <= now) {
            // The service took it out of the queue when its wait ended.
            let e = LockError::Timeout {
                backend: BACKEND,
                name: a.name,
            };
            core.rt.out.fail(op, e);
        } else if now.saturating_sub(sent_at) < EARLY_REFUSAL_PAUSE_MS {
            // A refusal before the poll's time (a newer poll took its
            // place, or the service did not wait): pause a little.
            let at = now + EARLY_REFUSAL_PAUSE_MS;
            let at = a.deadline.map_or(at, |d| at.min(d));
            core.pause(op, a, at);
        } else {
            self.poll(core, now, op, a);
        }
    }

    /// A grant whose lease, measured from its poll's send time, has already
    /// ended (the service held the poll open longer than the TTL, then
    /// granted it with a fresh lease): an owner-checked `extend` confirms
    /// it, and its answer anchors the lease from its own send time.
    fn confirm(
        &self,
        core: &mut Core,
        now: Millis,
        op: OpId,
        mut a: Acquiring,
        (token, slot): (u64, Option<u32>),
    ) {
        let body = codec::extend_body(&a.owner, token, a.ttl);
        let timeout = self.cfg.request_timeout_ms;
        let req = lease::Req::Own(Req::Confirm {
            op,
            token,
            slot,
            sent_at: now,
        });
        let to = (ApiOp::Extend, a.name.as_str());
        a.request = Some(self.send(core, now, req, to, body, timeout));
        core.acquires.insert(op, a);
    }

    /// The answer of the extend confirming acquire `op`'s late grant.
    pub(super) fn on_confirm(
        &mut self,
        core: &mut Core,
        (now, sent_at): (Millis, Millis),
        op: OpId,
        grant: (u64, Option<u32>),
        input: Answer,
    ) {
        let Some(a) = core.acquires.get_mut(&op) else {
            return;
        };
        a.request = None;
        let (name, owner) = (a.name.clone(), a.owner.clone());
        let answer = self.read(core, (&name, &owner), &input, codec::parse_extend);
        let Some(a) = core.acquires.remove(&op) else {
            return;
        };
        match answer {
            Ok(Some(granted)) => {
                let exp = codec::lease_validity(granted.min(a.ttl))
                    .map(|v| sent_at.saturating_add(v))
                    .filter(|e| *e > now);
                match exp {
                    Some(exp) => core.grant(op, a, grant.0, grant.1, sent_at, exp),
                    // Even the confirmation came back too late: ask again.
                    None => self.confirm(core, now, op, a, grant),
                }
            }
            // The lease ended before the confirmation arrived: not ours
            // (nor queued any more). Wait on while the wait lasts.
            Ok(None) if a.wait != Wait::Try && a.deadline.map_or(true, |d| d > now) => {
                self.poll(core, now, op, a)
            }
            Ok(None) => {
                let error = match a.wait {
                    Wait::Try => LockError::Backend {
                        backend: BACKEND,
                        name: a.name,
                        status: None,
                        message: "the grant arrived after its lease had ended".into(),
                    },
                    _ => LockError::Timeout {
                        backend: BACKEND,
                        name: a.name,
                    },
                };
                core.rt.out.fail(op, error);
            }
            Err(error) => {
                // Its outcome is unknown: the grant may still be ours.
                self.leave(core, now, None, a);
                core.rt.out.fail(op, error);
            }
        }
    }

    /// Takes acquire `a` out of the service's queue, or releases the grant
    /// it may have had without hearing of it (see [`Req::Leave`]). The
    /// service keeps a waiter whose caller went away (workerd does not tell
    /// it), so a cancelled request alone is not enough.
    pub(super) fn leave(&self, core: &mut Core, now: Millis, op: Option<OpId>, a: Acquiring) {
        // A short lease: were the lock free, this grants it, and it is
        // released at once (a failed release then blocks it briefly only).
        let body = codec::acquire_body(&a.owner, a.kind, a.ttl.min(LEAVE_TTL_MS), 0);
        let req = Req::Leave {
            op,
            name: a.name.clone(),
            owner: a.owner,
        };
        self.send_own(core, now, req, (ApiOp::Acquire, &a.name), body);
    }

    /// The answer of a leave: a grant it missed is released; a cancelled
    /// acquire (`op`) ends `Aborted` (after that release, if any).
    pub(super) fn on_leave(
        &mut self,
        core: &mut Core,
        now: Millis,
        (op, name, owner): (Option<OpId>, String, String),
        input: Answer,
    ) {
        if let Ok(AcquireAnswer::Granted { token, .. }) =
            self.read(core, (&name, &owner), &input, codec::parse_acquire)
        {
            let req = Req::Release {
                op,
                lock: None,
                abort: op.map(|_| name.clone()),
            };
            self.release_request(core, now, (&name, &owner), token, req);
            return;
        }
        if let Some(op) = op {
            core.rt.out.fail(
                op,
                LockError::Aborted {
                    backend: BACKEND,
                    name,
                },
            );
        }
    }
}
