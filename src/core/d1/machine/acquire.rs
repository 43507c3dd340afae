//! How a waiting acquire proceeds against the lock table. Each step takes
//! the acquire's state ([`Acquiring`]) out of the table by value and either
//! ends it (granted, busy for a try, timed out, failed) or hands it on to
//! its next attempt (sent now, or after a pause). An acquire given up while
//! its attempt was in flight waits as an [`Abandoned`] for that attempt's
//! answer.

use super::super::codec::{self, AcquireAnswer, Param};
use super::super::sql;
use super::{text, Abandoned, Core, Req, BACKEND, D1};
use crate::core::lease::{self, Acquiring, Answer};
use crate::core::{jitter, LockError, Millis, OpId, Outcome, Wait};

impl D1 {
    /// Sends acquire `op`'s attempt (`a`: its state, listed again with the
    /// attempt in flight).
    pub(super) fn poll(&self, core: &mut Core, now: Millis, op: OpId, mut a: Acquiring) {
        let t = &self.cfg.table;
        let statements = [
            (
                sql::take(t),
                vec![text(&a.name), text(&a.owner), Param::Int(a.ttl)],
            ),
            (sql::probe(t), vec![text(&a.name), text(&a.owner)]),
        ];
        let req = Req::Acquire { op, sent_at: now };
        a.request = Some(self.send_own(core, now, req, &statements));
        core.acquires.insert(op, a);
    }

    /// The answer of acquire `op`'s attempt sent at `sent_at`.
    pub(super) fn on_acquire(
        &mut self,
        core: &mut Core,
        (now, sent_at): (Millis, Millis),
        op: OpId,
        input: Answer,
    ) {
        if let Some(ab) = self.abandoned.remove(&op) {
            return self.on_abandoned(core, now, ab, &input);
        }
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
            Ok(AcquireAnswer::Granted { token, pttl_ms }) => {
                core.rt.timers.clear(lease::Timer::Poll(op));
                self.on_grant(core, (now, sent_at), op, a, (token, pttl_ms));
            }
            Ok(AcquireAnswer::Busy { pttl_ms }) => self.on_busy(core, now, op, a, pttl_ms),
            Err(error) => {
                core.rt.timers.clear(lease::Timer::Poll(op));
                // The batch may have committed: free the row if it is ours.
                self.leave(core, now, None, a);
                core.rt.out.fail(op, error);
            }
        }
    }

    /// Given up meanwhile: free the row unless the answer says the take did
    /// not happen.
    fn on_abandoned(&mut self, core: &mut Core, now: Millis, ab: Abandoned, input: &Answer) {
        let Abandoned { acquiring: a, op } = ab;
        match self.read(core, (&a.name, &a.owner), input, codec::parse_acquire) {
            Ok(AcquireAnswer::Busy { .. }) => self.on_leave(core, op, a.name),
            _ => self.leave(core, now, op, a),
        }
    }

    /// The attempt (sent at `sent_at`) took the row with `token`, its lease
    /// `pttl_ms`: a held lock, unless the answer came too late to use it.
    fn on_grant(
        &mut self,
        core: &mut Core,
        (now, sent_at): (Millis, Millis),
        op: OpId,
        a: Acquiring,
        (token, pttl_ms): (u64, u64),
    ) {
        let ttl = pttl_ms.min(a.ttl);
        let expires_at = codec::lease_validity(ttl)
            .map(|v| sent_at.saturating_add(v))
            .filter(|e| *e > now);
        let Some(expires_at) = expires_at else {
            let req = Req::Release {
                op: None,
                lock: None,
            };
            self.release_request(core, now, (&a.name, &a.owner), token, req);
            core.rt.out.fail(
                op,
                LockError::Backend {
                    backend: BACKEND,
                    name: a.name,
                    status: None,
                    message: "the grant arrived after its lease had ended (released again)".into(),
                },
            );
            return;
        };
        core.grant(op, a, token, None, sent_at, expires_at);
    }

    /// Another owner holds the row (for `pttl_ms` more, if known): the
    /// acquire ends if it only tried or its wait ran out, else it pauses.
    fn on_busy(
        &mut self,
        core: &mut Core,
        now: Millis,
        op: OpId,
        a: Acquiring,
        pttl_ms: Option<u64>,
    ) {
        if a.wait == Wait::Try {
            core.rt.out.complete(op, Ok(Outcome::NotAcquired));
        } else if a.deadline.is_some_and(|d| d <= now) {
            let e = LockError::Timeout {
                backend: BACKEND,
                name: a.name,
            };
            core.rt.out.fail(op, e);
        } else {
            // The holder's remaining lease, capped, plus jitter; the last
            // attempt at the deadline.
            let pause = pttl_ms.unwrap_or(0).clamp(1, self.cfg.retry_delay_ms)
                + jitter(core.entropy.as_mut(), self.cfg.retry_jitter_ms);
            let at = now + pause;
            let at = a.deadline.map_or(at, |d| at.min(d));
            core.pause(op, a, at);
        }
    }

    /// Frees the row if acquire `a`'s owner has it (see [`Req::Leave`]).
    pub(super) fn leave(&self, core: &mut Core, now: Millis, op: Option<OpId>, a: Acquiring) {
        let st = [(
            sql::leave(&self.cfg.table),
            vec![text(&a.name), text(&a.owner)],
        )];
        self.send_own(core, now, Req::Leave { op, name: a.name }, &st);
    }

    /// A leave is done (whatever it answered): a cancelled acquire (`op`)
    /// ends `Aborted`.
    pub(super) fn on_leave(&mut self, core: &mut Core, op: Option<OpId>, name: String) {
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
