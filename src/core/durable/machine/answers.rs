//! The machine's answers: each kind of request's answer, read strictly by
//! the codec, turned into outcomes, held locks, losses and follow-up requests.

use super::*;

impl DurableMachine {
    pub(super) fn on_leave(
        &mut self,
        now: Millis,
        op: Option<OpId>,
        name: String,
        owner: String,
        input: Result<(u16, Vec<u8>), TransportError>,
    ) {
        if let Ok(AcquireAnswer::Granted { token, .. }) =
            self.read(&name, &owner, &input, codec::parse_acquire)
        {
            let req = Req::Release {
                op,
                lock: None,
                abort: op.map(|_| name.clone()),
            };
            self.release_request(now, &name, &owner, token, req);
            return;
        }
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

    // ---- answers ------------------------------------------------------------

    pub(super) fn on_acquire(
        &mut self,
        now: Millis,
        op: OpId,
        sent_at: Millis,
        input: Result<(u16, Vec<u8>), TransportError>,
    ) {
        let Some(a) = self.core.acquires.get_mut(&op) else {
            return;
        };
        a.request = None;
        let name = a.name.clone();
        let owner = a.owner.clone();
        let answer = self.read(&name, &owner, &input, codec::parse_acquire);
        let Some(a) = self.core.acquires.get(&op) else {
            return;
        };
        match answer {
            Ok(AcquireAnswer::Granted { slot, .. }) if matches!(a.kind, LockKind::Permits { limit } if slot.map_or(true, |s| s >= limit)) =>
            {
                let Some(a) = self.core.acquires.remove(&op) else {
                    return;
                };
                self.core.rt.timers.clear(Timer::Poll(op));
                let error = Self::backend_error(
                    &a.name,
                    AnswerError {
                        status: None,
                        message: "malformed answer from the lock service: a permit's grant without a slot below its limit".into(),
                    },
                );
                // Whatever it granted is released by the leave.
                self.leave(now, None, a);
                self.core.rt.out.fail(op, error);
            }
            Ok(AcquireAnswer::Granted {
                token,
                ttl_ms,
                slot,
            }) => {
                self.core.rt.timers.clear(Timer::Poll(op));
                // The lease asked for, or what is left of it if it was ours already.
                let ttl = ttl_ms.min(a.ttl);
                let expires_at = codec::lease_validity(ttl)
                    .map(|v| sent_at.saturating_add(v))
                    .filter(|e| *e > now);
                // Measured from the poll's send time, a grant that arrives
                // after its first renewal was due (the service held the
                // poll open) has little or no validity left, though its
                // lease began at the grant: confirm it first.
                let renewal_due = now >= sent_at.saturating_add(ttl / 3);
                match expires_at {
                    Some(expires_at) if !renewal_due => {
                        self.granted(op, token, slot, sent_at, expires_at)
                    }
                    _ => self.confirm(now, op, token, slot),
                }
            }
            Ok(AcquireAnswer::OtherLimit { limit }) => {
                let Some(a) = self.core.acquires.remove(&op) else {
                    return;
                };
                self.core.rt.timers.clear(Timer::Poll(op));
                let asked = match a.kind {
                    LockKind::Permits { limit } => limit,
                    _ => 0,
                };
                let error = LockError::invalid(format!(
                    "the durable-object semaphore {:?} is held with limit {limit}, not {asked}: every holder of a name must use the same limit (nothing was taken)",
                    a.name
                ));
                // Nothing was taken; an earlier poll of it may still be queued.
                self.leave(now, None, a);
                self.core.rt.out.fail(op, error);
            }
            Ok(AcquireAnswer::Refused) => {
                if a.wait == Wait::Try {
                    self.core.acquires.remove(&op);
                    self.core.rt.out.complete(op, Ok(Outcome::NotAcquired));
                } else if a.deadline.is_some_and(|d| d <= now) {
                    // The service took it out of the queue when its wait ended.
                    let Some(a) = self.core.acquires.remove(&op) else {
                        return;
                    };
                    self.core.rt.out.fail(
                        op,
                        LockError::Timeout {
                            backend: BACKEND,
                            name: a.name,
                        },
                    );
                } else {
                    // A refusal before the poll's time (a newer poll took its
                    // place, or the service did not wait): pause a little.
                    let early = now.saturating_sub(sent_at) < EARLY_REFUSAL_PAUSE_MS;
                    if early {
                        let at = now + EARLY_REFUSAL_PAUSE_MS;
                        let at = a.deadline.map_or(at, |d| at.min(d));
                        self.core.rt.timers.set(Timer::Poll(op), at);
                    } else {
                        self.attempt(now, op);
                    }
                }
            }
            Err(error) => {
                let Some(a) = self.core.acquires.remove(&op) else {
                    return;
                };
                self.core.rt.timers.clear(Timer::Poll(op));
                // Its outcome is unknown: it may be queued, or even granted.
                self.leave(now, None, a);
                self.core.rt.out.fail(op, error);
            }
        }
    }

    /// Acquire `op` holds the lock with `token`, valid until `expires_at`
    /// (measured from `sent_at`, the send time of the request that
    /// established it): a held lock, renewed from `sent_at`.
    fn granted(
        &mut self,
        op: OpId,
        token: u64,
        slot: Option<u32>,
        sent_at: Millis,
        expires_at: Millis,
    ) {
        let Some(a) = self.core.acquires.remove(&op) else {
            return;
        };
        self.core.grant(op, a, token, slot, sent_at, expires_at);
    }

    /// A grant whose lease, measured from its poll's send time, has already
    /// ended (the service held the poll open longer than the TTL, then
    /// granted it with a fresh lease): an owner-checked `extend` confirms
    /// it, and its answer anchors the lease from its own send time.
    fn confirm(&mut self, now: Millis, op: OpId, token: u64, slot: Option<u32>) {
        let Some(a) = self.core.acquires.get(&op) else {
            return;
        };
        let body = codec::extend_body(&a.owner, token, a.ttl);
        let name = a.name.clone();
        let timeout = self.cfg.request_timeout_ms;
        let req = Req::Confirm {
            op,
            token,
            slot,
            sent_at: now,
        };
        let id = self.send(now, req, ApiOp::Extend, &name, body, timeout);
        if let Some(a) = self.core.acquires.get_mut(&op) {
            a.request = Some(id);
        }
    }

    pub(super) fn on_confirm(
        &mut self,
        now: Millis,
        op: OpId,
        (token, slot): (u64, Option<u32>),
        sent_at: Millis,
        input: Result<(u16, Vec<u8>), TransportError>,
    ) {
        let Some(a) = self.core.acquires.get_mut(&op) else {
            return;
        };
        a.request = None;
        let (name, owner, ttl) = (a.name.clone(), a.owner.clone(), a.ttl);
        match self.read(&name, &owner, &input, codec::parse_extend) {
            Ok(Some(granted)) => {
                let exp = codec::lease_validity(granted.min(ttl))
                    .map(|v| sent_at.saturating_add(v))
                    .filter(|e| *e > now);
                match exp {
                    Some(exp) => self.granted(op, token, slot, sent_at, exp),
                    // Even the confirmation came back too late: ask again.
                    None => self.confirm(now, op, token, slot),
                }
            }
            // The lease ended before the confirmation arrived: not ours
            // (nor queued any more). Wait on while the wait lasts.
            Ok(None) => {
                let Some(a) = self.core.acquires.get(&op) else {
                    return;
                };
                if a.wait != Wait::Try && a.deadline.map_or(true, |d| d > now) {
                    self.attempt(now, op);
                } else if let Some(a) = self.core.acquires.remove(&op) {
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
                    self.core.rt.out.fail(op, error);
                }
            }
            Err(error) => {
                let Some(a) = self.core.acquires.remove(&op) else {
                    return;
                };
                // Its outcome is unknown: the grant may still be ours.
                self.leave(now, None, a);
                self.core.rt.out.fail(op, error);
            }
        }
    }

    pub(super) fn on_release(
        &mut self,
        op: Option<OpId>,
        lock: Option<Held>,
        abort: Option<String>,
        input: Result<(u16, Vec<u8>), TransportError>,
    ) {
        if let Some(name) = abort {
            // A cancelled acquire: it ends `Aborted` whatever the answer.
            if let Some(op) = op {
                self.core.rt.out.fail(
                    op,
                    LockError::Aborted {
                        backend: BACKEND,
                        name,
                    },
                );
            }
            return;
        }
        let (Some(op), Some(h)) = (op, lock) else {
            return;
        };
        let answer = self.read(&h.name, &h.owner, &input, codec::parse_release);
        self.core.released(op, h, answer);
    }

    pub(super) fn on_resume(
        &mut self,
        now: Millis,
        op: OpId,
        handle: LockHandle,
        sent_at: Millis,
        input: Result<(u16, Vec<u8>), TransportError>,
    ) {
        let answer = self
            .read(&handle.name, &handle.owner, &input, codec::parse_resume)
            .and_then(|r| match r {
                None => Ok(None),
                // A service that does not say the kind holds exclusive locks only.
                Some(r) if r.kind.unwrap_or(LockKind::Exclusive) != handle.kind => {
                    Err(LockError::invalid(format!(
                        "the handle is of a {} hold, the lock service holds it as a {}",
                        handle.kind.describe(),
                        r.kind.unwrap_or(LockKind::Exclusive).describe()
                    )))
                }
                Some(r) if r.slot != handle.slot => Err(LockError::invalid(
                    "the handle's slot is not the one the lock service holds",
                )),
                Some(r) => Ok(Some(r.pttl_ms)),
            });
        let validity = codec::lease_validity;
        self.core
            .resumed(now, op, handle, sent_at, answer, validity);
    }

    pub(super) fn on_inspect(
        &mut self,
        op: OpId,
        name: String,
        input: Result<(u16, Vec<u8>), TransportError>,
    ) {
        match self.read(&name, "", &input, codec::parse_inspect) {
            Ok(a) => {
                let holders = if !a.holders.is_empty() {
                    a.holders
                        .iter()
                        .map(|h| Holder {
                            kind: h.kind,
                            slot: h.slot,
                            fencing_token: Some(h.token),
                            ..Holder::default()
                        })
                        .collect()
                } else if a.held {
                    vec![Holder {
                        fencing_token: a.token,
                        ..Holder::default()
                    }]
                } else {
                    Vec::new()
                };
                let queued = (0..a.waiters).map(|_| Holder::default()).collect();
                let status = LockStatus {
                    name,
                    held: a.held,
                    holder: None,
                    fencing_token: a.token,
                    remaining_ms: if a.held { a.pttl_ms } else { None },
                    waiters: Vec::new(),
                    limit: a.limit,
                    holders,
                    queued,
                };
                self.core
                    .rt
                    .out
                    .complete(op, Ok(Outcome::Inspected(status)));
            }
            Err(e) => self.core.rt.out.fail(op, e),
        }
    }

    pub(super) fn answer(
        &mut self,
        now: Millis,
        owner: Req,
        input: Result<(u16, Vec<u8>), TransportError>,
    ) {
        match owner {
            Req::Acquire { op, sent_at } => self.on_acquire(now, op, sent_at, input),
            Req::Confirm {
                op,
                token,
                slot,
                sent_at,
            } => self.on_confirm(now, op, (token, slot), sent_at, input),
            Req::Release { op, lock, abort } => self.on_release(op, lock, abort, input),
            Req::Leave { op, name, owner } => self.on_leave(now, op, name, owner, input),
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
