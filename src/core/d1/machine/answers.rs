//! The machine's answers: each kind of batch's answer, read strictly by the
//! codec, turned into outcomes, held locks, losses and follow-up batches.

use super::*;

impl D1Machine {
    // ---- answers ------------------------------------------------------------

    pub(super) fn on_acquire(&mut self, now: Millis, op: OpId, sent_at: Millis, input: Answer) {
        if let Some(Abandoned { acquiring: a, op }) = self.abandoned.remove(&op) {
            // Given up meanwhile: free the row unless the answer says the
            // take did not happen.
            match self.read(&a.name, &a.owner, &input, codec::parse_acquire) {
                Ok(AcquireAnswer::Busy { .. }) => self.on_leave(op, a.name),
                _ => self.leave(now, op, a),
            }
            return;
        }
        let Some(a) = self.core.acquires.get_mut(&op) else {
            return;
        };
        a.request = None;
        let (name, owner) = (a.name.clone(), a.owner.clone());
        let answer = self.read(&name, &owner, &input, codec::parse_acquire);
        match answer {
            Ok(AcquireAnswer::Granted { token, pttl_ms }) => {
                let Some(a) = self.core.acquires.remove(&op) else {
                    return;
                };
                self.core.rt.timers.clear(Timer::Poll(op));
                let ttl = pttl_ms.min(a.ttl);
                let expires_at = codec::lease_validity(ttl)
                    .map(|v| sent_at.saturating_add(v))
                    .filter(|e| *e > now);
                let Some(expires_at) = expires_at else {
                    let req = Req::Release {
                        op: None,
                        lock: None,
                    };
                    self.release_request(now, &a.name, &a.owner, token, req);
                    self.core.rt.out.fail(
                        op,
                        LockError::Backend {
                            backend: BACKEND,
                            name: a.name,
                            status: None,
                            message: "the grant arrived after its lease had ended (released again)"
                                .into(),
                        },
                    );
                    return;
                };
                self.core.grant(op, a, token, None, sent_at, expires_at);
            }
            Ok(AcquireAnswer::Busy { pttl_ms }) => {
                let Some(a) = self.core.acquires.get(&op) else {
                    return;
                };
                if a.wait == Wait::Try {
                    self.core.acquires.remove(&op);
                    self.core.rt.out.complete(op, Ok(Outcome::NotAcquired));
                } else if a.deadline.is_some_and(|d| d <= now) {
                    self.core.acquires.remove(&op);
                    self.core.rt.out.fail(
                        op,
                        LockError::Timeout {
                            backend: BACKEND,
                            name,
                        },
                    );
                } else {
                    // The holder's remaining lease, capped, plus jitter; the
                    // last attempt at the deadline.
                    let deadline = a.deadline;
                    let pause = pttl_ms.unwrap_or(0).clamp(1, self.cfg.retry_delay_ms)
                        + jitter(self.core.entropy.as_mut(), self.cfg.retry_jitter_ms);
                    let at = now + pause;
                    let at = deadline.map_or(at, |d| at.min(d));
                    self.core.rt.timers.set(Timer::Poll(op), at);
                }
            }
            Err(error) => {
                let Some(a) = self.core.acquires.remove(&op) else {
                    return;
                };
                self.core.rt.timers.clear(Timer::Poll(op));
                // The batch may have committed: free the row if it is ours.
                self.leave(now, None, a);
                self.core.rt.out.fail(op, error);
            }
        }
    }

    pub(super) fn on_release(&mut self, op: Option<OpId>, lock: Option<Held>, input: Answer) {
        let (Some(op), Some(h)) = (op, lock) else {
            return;
        };
        let answer = self.read(&h.name, &h.owner, &input, codec::parse_release);
        self.core.released(op, h, answer);
    }

    pub(super) fn on_leave(&mut self, op: Option<OpId>, name: String) {
        if let Some(op) = op {
            self.core.rt.out.fail(
                op,
                LockError::Aborted {
                    backend: BACKEND,
                    name,
                },
            );
        }
    }

    pub(super) fn on_resume(
        &mut self,
        now: Millis,
        op: OpId,
        handle: LockHandle,
        sent_at: Millis,
        input: Answer,
    ) {
        let answer = self.read(&handle.name, &handle.owner, &input, codec::parse_resume);
        let validity = codec::lease_validity;
        self.core
            .resumed(now, op, handle, sent_at, answer, validity);
    }

    pub(super) fn on_inspect(&mut self, op: OpId, name: String, input: Answer) {
        match self.read(&name, "", &input, codec::parse_inspect) {
            Ok(a) => {
                let held = a.pttl_ms.is_some();
                let holders = if held {
                    vec![Holder {
                        fencing_token: a.version,
                        ..Holder::default()
                    }]
                } else {
                    Vec::new()
                };
                let status = LockStatus {
                    name,
                    held,
                    holder: None,
                    fencing_token: a.version,
                    remaining_ms: a.pttl_ms,
                    waiters: Vec::new(),
                    limit: None,
                    holders,
                    queued: Vec::new(),
                };
                self.core
                    .rt
                    .out
                    .complete(op, Ok(Outcome::Inspected(status)));
            }
            Err(e) => self.core.rt.out.fail(op, e),
        }
    }

    pub(super) fn answer(&mut self, now: Millis, owner: Req, input: Answer) {
        match owner {
            Req::Acquire { op, sent_at } => self.on_acquire(now, op, sent_at, input),
            Req::Release { op, lock } => self.on_release(op, lock, input),
            Req::Leave { op, name } => self.on_leave(op, name),
            Req::Extend {
                op,
                lock,
                ttl,
                sent_at,
            } => self.on_extend(now, op, lock, ttl, sent_at, input),
            Req::Resume {
                op,
                handle,
                sent_at,
            } => self.on_resume(now, op, handle, sent_at, input),
            Req::Inspect { op, name } => self.on_inspect(op, name, input),
        }
    }
}
