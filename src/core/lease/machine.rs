//! [`LeaseMachine`]: the one [`LockMachine`] of both lease backends. It owns
//! the shared state ([`LeaseCore`]) and the backend ([`LeaseProtocol`]),
//! and does everything that does not depend on the backend's wire format:
//! routing operations, user releases and extends, renewals and their
//! answers, expiry, losing a lock and `close`. Each step that needs the
//! backend's requests or answers calls one method of the protocol with the
//! core lent to it.

use super::checks::{check_name, check_ttl};
use super::table::{Acquiring, Answer, Held, LeaseCore, LeaseReq, Timer};
use crate::core::operation::unserved;
use crate::core::{
    BackendKind, Capabilities, Entropy, Event, Input, KindFamily, LockError, LockHandle, LockId,
    LockMachine, LostReason, Millis, OpId, Operation, Outcome, RequestId, Transmit, TransportError,
};

/// Who a request in flight belongs to: an extend (both backends keep the
/// same facts about it and answer it alike), or one of the backend's own.
pub(crate) enum Req<B> {
    /// A user's extend or an automatic renewal.
    Extend(Extend),
    /// One of the backend's requests (acquire attempts, releases, …).
    Own(B),
}

/// An extend in flight.
pub(crate) struct Extend {
    /// The user's extend; `None`: an automatic renewal.
    pub(crate) op: Option<OpId>,
    pub(crate) lock: LockId,
    /// The lease asked for.
    pub(crate) ttl: u64,
    /// When it was sent (the lease it confirms is measured from here).
    pub(crate) sent_at: Millis,
}

impl<B: LeaseReq> LeaseReq for Req<B> {
    fn op(&self) -> Option<OpId> {
        match self {
            Req::Extend(e) => e.op,
            Req::Own(b) => b.op(),
        }
    }

    fn ends_on_close(&self) -> bool {
        match self {
            Req::Extend(_) => true,
            Req::Own(b) => b.ends_on_close(),
        }
    }
}

/// The core of a lease machine whose backend is `P`.
pub(crate) type Core<P> = LeaseCore<Req<<P as LeaseProtocol>::Req>>;

/// What a lease backend supplies: its requests (sent through the core lent
/// to each method) and how it reads their answers.
pub(crate) trait LeaseProtocol {
    /// The backend's own requests (see [`Req::Own`]).
    type Req: LeaseReq;

    /// The lock kinds the backend grants (its [`Capabilities`]).
    const KINDS: &'static [KindFamily];

    /// The codec's lease validity of a TTL (after the clock-drift allowance).
    fn validity(ttl: u64) -> Option<u64>;

    /// Sends acquire `op`'s next attempt (or poll).
    fn attempt(&mut self, core: &mut Core<Self>, now: Millis, op: OpId);

    /// Sends an extend of `lock` to `ttl` (`op`: the user's; `None`: a
    /// renewal) as a [`Req::Extend`].
    fn send_extend(
        &mut self,
        core: &mut Core<Self>,
        now: Millis,
        lock: LockId,
        ttl: u64,
        op: Option<OpId>,
    ) -> Option<RequestId>;

    /// Sends an owner-checked release of `h`: the user's (`op`, `lock`:
    /// the lock taken out of the table) or in the background (both `None`).
    fn send_release(
        &mut self,
        core: &mut Core<Self>,
        now: Millis,
        h: &Held,
        op: Option<OpId>,
        lock: Option<Held>,
    );

    /// Reads an extend's answer for lock `name` of `owner`: `Ok(None)` the
    /// lock is not ours, `Ok(Some(validity))` confirmed, the lease lasting
    /// `validity` from the send time (`None`: none left).
    fn read_extend(
        &self,
        core: &Core<Self>,
        name: &str,
        owner: &str,
        ttl: u64,
        input: &Answer,
    ) -> Result<Option<Option<u64>>, LockError>;

    /// Handles the final answer of one of the backend's requests.
    fn answer(&mut self, core: &mut Core<Self>, now: Millis, owner: Self::Req, input: Answer);

    /// Starts a resume of `handle` (checked here: the backend's rules).
    fn resume(
        &mut self,
        core: &mut Core<Self>,
        now: Millis,
        handle: LockHandle,
    ) -> Result<OpId, LockError>;

    /// Sends inspect `op` of `name` (a name already checked).
    fn inspect(&mut self, core: &mut Core<Self>, now: Millis, op: OpId, name: String);

    /// Acquire `op` (already out of the table, its poll timer cleared) ends
    /// without a grant it knows of: whatever the backend needs to give it
    /// up. `aborted`: the cancelled acquire to answer `Aborted` when that is
    /// done; `None` when `close` ended it (it is failed `Closed` after this).
    fn give_up(
        &mut self,
        core: &mut Core<Self>,
        now: Millis,
        op: OpId,
        a: Acquiring,
        aborted: Option<OpId>,
    );
}

/// A request/response lease lock ([`LeaseCore`] plus a backend `P`) as a
/// sans-IO [`LockMachine`].
pub(crate) struct LeaseMachine<P: LeaseProtocol> {
    pub(crate) core: Core<P>,
    pub(crate) backend: P,
}

impl<P: LeaseProtocol + std::fmt::Debug> std::fmt::Debug for LeaseMachine<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseMachine")
            .field("backend", &self.backend)
            .field("acquires", &self.core.acquires.len())
            .field("locks", &self.core.locks.len())
            .finish()
    }
}

impl<P: LeaseProtocol> LeaseMachine<P> {
    /// A machine of `backend` (named `name`, of `kind`) with the options'
    /// default lease and renewal.
    pub(crate) fn with(
        backend: P,
        (name, kind): (&'static str, BackendKind),
        ttl_ms: u64,
        auto_extend: bool,
        entropy: Box<dyn Entropy + Send>,
    ) -> Self {
        let core = LeaseCore::new(name, kind, ttl_ms, auto_extend, entropy);
        LeaseMachine { core, backend }
    }

    // ---- user operations ----------------------------------------------------

    /// Starts an acquire of `name` for a hold of `kind` (the options' TTL
    /// unless the options say otherwise) and sends its first attempt.
    fn acquire(
        &mut self,
        now: Millis,
        name: String,
        kind: crate::core::LockKind,
        options: crate::core::AcquireOptions,
    ) -> Result<OpId, LockError> {
        check_name(self.core.backend, &name)?;
        let ttl = options.ttl_ms.unwrap_or(self.core.ttl_ms);
        check_ttl(ttl, P::validity)?;
        let op = self.core.new_acquire(now, name, kind, ttl, options.wait);
        self.backend.attempt(&mut self.core, now, op);
        Ok(op)
    }

    /// A user's release: of a held lock, or at once of one not held.
    fn release(&mut self, now: Millis, lock: LockId) -> OpId {
        let op = self.core.rt.out.op_id();
        match self.core.take_lock(lock) {
            Some(h) => {
                let held = h.clone();
                self.backend
                    .send_release(&mut self.core, now, &held, Some(op), Some(h));
            }
            None => self.core.rt.out.complete(
                op,
                Ok(Outcome::Released {
                    lock,
                    held_until_release: false,
                }),
            ),
        }
        op
    }

    /// A user's extend (to `ttl_ms`, or the lock's own TTL).
    fn extend(
        &mut self,
        now: Millis,
        lock: LockId,
        ttl_ms: Option<u64>,
    ) -> Result<OpId, LockError> {
        if let Some(t) = ttl_ms {
            check_ttl(t, P::validity)?;
        }
        let op = self.core.rt.out.op_id();
        match self.core.locks.get(&lock).map(|h| ttl_ms.unwrap_or(h.ttl)) {
            Some(ttl) => {
                self.backend
                    .send_extend(&mut self.core, now, lock, ttl, Some(op));
            }
            None => {
                let e = self.core.not_held(lock);
                self.core.rt.out.fail(op, e);
            }
        }
        Ok(op)
    }

    /// An inspect of `name`, checked before anything is sent.
    fn inspect(&mut self, now: Millis, name: String) -> Result<OpId, LockError> {
        check_name(self.core.backend, &name)?;
        let op = self.core.rt.out.op_id();
        self.backend.inspect(&mut self.core, now, op, name);
        Ok(op)
    }

    // ---- losing a lock --------------------------------------------------------

    /// Forgets lock `id`, reports it lost, and (unless the backend said it
    /// is not ours) releases whatever the backend may still hold of it.
    fn lose(&mut self, now: Millis, id: LockId, reason: LostReason) {
        let Some(h) = self.core.take_lock(id) else {
            return;
        };
        self.core.record_ended(id, &h.name);
        if reason != LostReason::KeyGone {
            self.backend
                .send_release(&mut self.core, now, &h, None, None);
        }
        self.core.rt.out.lost(id, h.name, reason);
    }

    /// An extend that found the lock not ours: lose it, and fail the user's
    /// extend (if any) `Lost`.
    fn extend_key_gone(&mut self, now: Millis, op: Option<OpId>, lock: LockId, name: String) {
        self.lose(now, lock, LostReason::KeyGone);
        if let Some(op) = op {
            let e = LockError::Lost {
                backend: self.core.backend,
                name,
                reason: LostReason::KeyGone.to_string(),
            };
            self.core.rt.out.fail(op, e);
        }
    }

    // ---- answers --------------------------------------------------------------

    /// Handles the final answer of a request.
    fn dispatch(&mut self, now: Millis, owner: Req<P::Req>, input: Answer) {
        match owner {
            Req::Extend(e) => self.on_extend(now, e, input),
            Req::Own(r) => self.backend.answer(&mut self.core, now, r, input),
        }
    }

    /// The answer of an extend (`op`: the user's; `None`: a renewal).
    fn on_extend(&mut self, now: Millis, e: Extend, input: Answer) {
        let Extend {
            op,
            lock,
            ttl,
            sent_at,
        } = e;
        let core = &mut self.core;
        let Some(h) = core.locks.get(&lock) else {
            if let Some(op) = op {
                let e = core.not_held(lock);
                core.rt.out.fail(op, e);
            }
            return;
        };
        let (name, owner) = (h.name.clone(), h.owner.clone());
        let answer = self.backend.read_extend(core, &name, &owner, ttl, &input);
        let Some(h) = core.locks.get_mut(&lock) else {
            return;
        };
        if op.is_none() {
            h.renewal = None;
        }
        match answer {
            Ok(Some(validity)) => core.extended(now, op, lock, ttl, sent_at, validity),
            Ok(None) => self.extend_key_gone(now, op, lock, name),
            Err(e) => match op {
                Some(op) => core.rt.out.fail(op, e),
                None => core.extend_failed(now, None, lock, e.to_string()),
            },
        }
    }

    // ---- timers ---------------------------------------------------------------

    /// Lock `id`'s lease ended before a renewal confirmed it.
    fn expire(&mut self, now: Millis, id: LockId) {
        let last = self.core.locks.get(&id).and_then(|h| h.last_error.clone());
        let reason = match last {
            Some(e) => LostReason::RenewalFailed(e),
            None => LostReason::Expired,
        };
        self.lose(now, id, reason);
    }

    /// Lock `id`'s automatic renewal is due (unless one is in flight).
    fn renew(&mut self, now: Millis, id: LockId) {
        let Some(h) = self.core.locks.get(&id) else {
            return;
        };
        if h.renewal.is_some() || !h.renew {
            return;
        }
        let ttl = h.ttl;
        let r = self.backend.send_extend(&mut self.core, now, id, ttl, None);
        if let Some(h) = self.core.locks.get_mut(&id) {
            h.renewal = r;
        }
    }
}

/// A final input as an [`Answer`].
fn answer_of(input: Input) -> Answer {
    match input {
        Input::Response { status, body, .. } => Ok((status, body)),
        Input::Failed { error, .. } => Err(error),
        // Nothing here streams: an end without a response is a broken answer.
        Input::Opened { .. } | Input::StreamEnd { .. } | Input::Chunk { .. } => {
            Err(TransportError::Io("the answer ended without a body".into()))
        }
    }
}

impl<P: LeaseProtocol> LockMachine for LeaseMachine<P> {
    fn backend(&self) -> BackendKind {
        self.core.kind
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            kinds: P::KINDS,
            atomic_sets: false,
        }
    }

    fn live_count(&self) -> usize {
        self.core.live_count()
    }

    fn start_operation(&mut self, now: Millis, op: Operation) -> Result<OpId, LockError> {
        self.core.rt.closing.check_open(self.core.kind)?;
        match op {
            Operation::Acquire {
                name,
                kind,
                options,
            } if self.capabilities().supports(kind) => self.acquire(now, name, kind, options),
            Operation::Release { lock } => Ok(self.release(now, lock)),
            Operation::Extend { lock, ttl_ms } => self.extend(now, lock, ttl_ms),
            Operation::Resume { handle } => self.backend.resume(&mut self.core, now, handle),
            Operation::Inspect { name } => self.inspect(now, name),
            other => Err(unserved(self.core.kind, &other)),
        }
    }

    /// The acquire ends `Aborted` once the backend has given it up.
    fn cancel(&mut self, now: Millis, op: OpId) {
        let Some(a) = self.core.acquires.remove(&op) else {
            return;
        };
        self.core.rt.timers.clear(Timer::Poll(op));
        self.backend.give_up(&mut self.core, now, op, a, Some(op));
        self.core.settle();
    }

    /// Acquires end (each as the backend gives it up), extends, resumes and
    /// inspects end now, user releases finish, held locks are lost
    /// `ClientClosed` and released.
    fn close(&mut self, now: Millis) -> OpId {
        let op = self.core.rt.out.op_id();
        if self.core.rt.closing.begin(op) {
            let closed = LockError::Closed {
                backend: self.core.backend,
            };
            let ops: Vec<OpId> = self.core.acquires.keys().copied().collect();
            for aop in ops {
                if let Some(a) = self.core.acquires.remove(&aop) {
                    self.core.rt.timers.clear(Timer::Poll(aop));
                    self.backend.give_up(&mut self.core, now, aop, a, None);
                    self.core.rt.out.fail(aop, closed.clone());
                }
            }
            let stopped = self.core.rt.cancel_where(|r| r.ends_on_close());
            for (_, r) in stopped {
                if let Some(op) = r.op() {
                    self.core.rt.out.fail(op, closed.clone());
                }
            }
            let ids: Vec<LockId> = self.core.locks.keys().copied().collect();
            for id in ids {
                self.lose(now, id, LostReason::ClientClosed);
            }
        }
        self.core.settle();
        op
    }

    fn handle_input(&mut self, now: Millis, input: Input) {
        if !input.is_final() {
            return;
        }
        let Some(owner) = self.core.rt.requests.finish(input.id()) else {
            return;
        };
        self.dispatch(now, owner, answer_of(input));
        self.core.settle();
    }

    fn handle_timeout(&mut self, now: Millis) {
        for (_, owner) in self.core.rt.expire(now) {
            self.dispatch(now, owner, Err(TransportError::Timeout));
        }
        for key in self.core.rt.timers.take_due(now) {
            match key {
                Timer::Poll(op) => self.backend.attempt(&mut self.core, now, op),
                Timer::Expiry(id) => self.expire(now, id),
                Timer::Renewal(id) => self.renew(now, id),
            }
        }
        self.core.settle();
    }

    fn poll_transmit(&mut self) -> Option<Transmit> {
        self.core.rt.poll_transmit()
    }

    fn poll_event(&mut self) -> Option<Event> {
        self.core.rt.poll_event()
    }

    fn poll_timeout(&self) -> Option<Millis> {
        self.core.rt.poll_timeout()
    }
}
