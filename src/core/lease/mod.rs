//! What the request/response lease-lock machines (`durable`, `d1`) share:
//! the table of acquires and held locks, expiry and automatic renewal,
//! losing a lock, `close`, reading final answers, and the renewal answers.
//!
//! Why the split is here: both backends keep a lock as "an owner string and
//! a fencing token, valid for a lease measured from the send time of the
//! request that granted or extended it", and everything that follows from
//! that alone (timers, loss reasons, renewal retries, the close drain) is
//! protocol-independent, so it lives once in [`LeaseCore`] and the provided
//! methods of [`LeaseProtocol`]. What stays in each backend is what truly
//! differs: its codec (how requests are encoded and answers parsed), how a
//! waiting acquire proceeds (`durable`: the service holds the request open,
//! a late grant is confirmed with an extend, a leaving acquire re-asks with
//! `waitMs` 0; `d1`: polling after the holder's PTTL with jitter, and an
//! acquire given up mid-attempt frees the row only after its answer), and
//! its options. The request-owner enums stay per backend (their variants
//! differ); they expose what the shared code needs through [`LeaseReq`].

use crate::core::names::{validate_name, validate_ttl};
use crate::core::runtime::{Runtime, VecMap};
use crate::core::*;

/// Random bytes of an owner (32 hex characters).
pub(crate) const OWNER_BYTES: usize = 16;

/// Names of locks that ended, kept for messages (bounded).
const ENDED_NAMES_KEPT: usize = 1024;

/// A final answer: status and body, or how the transport failed.
pub(crate) type Answer = Result<(u16, Vec<u8>), TransportError>;

/// The timers of a lease machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Timer {
    /// A waiting acquire's next attempt (or poll).
    Poll(OpId),
    /// A held lock's lease ends.
    Expiry(LockId),
    /// A held lock's next automatic renewal.
    Renewal(LockId),
}

/// An acquire under way.
pub(crate) struct Acquiring {
    pub(crate) name: String,
    /// What it asks for (a backend grants only the kinds of its
    /// [`LeaseProtocol::KINDS`]).
    pub(crate) kind: LockKind,
    pub(crate) owner: String,
    pub(crate) ttl: u64,
    pub(crate) wait: Wait,
    /// When a `Wait::For` runs out.
    pub(crate) deadline: Option<Millis>,
    /// The attempt in flight, if any (none while pausing).
    pub(crate) request: Option<RequestId>,
}

/// A lock this machine holds.
#[derive(Clone)]
pub(crate) struct Held {
    pub(crate) id: LockId,
    pub(crate) name: String,
    pub(crate) owner: String,
    pub(crate) token: u64,
    pub(crate) ttl: u64,
    pub(crate) expires_at: Millis,
    /// Renew automatically (off after a failed release).
    pub(crate) renew: bool,
    /// The renewal in flight, if any.
    pub(crate) renewal: Option<RequestId>,
    /// Why the last renewal failed, for the loss report.
    pub(crate) last_error: Option<String>,
}

/// What the shared code needs of a backend's request owner.
pub(crate) trait LeaseReq {
    /// The user's operation it answers, if any.
    fn op(&self) -> Option<OpId>;
    /// Whether `close` stops it at once, failing its operation (extends,
    /// resumes, inspects); the others are left to finish.
    fn ends_on_close(&self) -> bool;
}

/// A lock name the backend accepts: the core's rule, and no control
/// characters (refused before any request).
pub(crate) fn check_name(backend: &str, name: &str) -> Result<(), LockError> {
    validate_name(name)?;
    if name.chars().any(char::is_control) {
        return Err(LockError::invalid(format!(
            "a {backend} lock name must not contain control characters"
        )));
    }
    Ok(())
}

/// Whether `s` can be an owner: 16..=64 lowercase hex characters.
pub(crate) fn is_owner(s: &str) -> bool {
    (16..=64).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// A lease the backend can keep: the core's TTL rule, and some validity
/// left after the clock-drift allowance (`validity`: the codec's).
pub(crate) fn check_ttl(ttl: u64, validity: fn(u64) -> Option<u64>) -> Result<(), LockError> {
    validate_ttl("ttl_ms", ttl)?;
    if validity(ttl).is_none() {
        return Err(LockError::invalid(format!(
            "ttl_ms of {ttl} ms leaves no validity after the clock-drift allowance"
        )));
    }
    Ok(())
}

/// A binding name of the options: 1..=256 letters, digits, `_` or `-`.
pub(crate) fn check_binding(backend: &str, b: &str) -> Result<(), LockError> {
    if b.is_empty()
        || b.len() > 256
        || !b
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-')
    {
        return Err(LockError::invalid(format!(
            "a {backend} binding must be a name of 1..=256 letters, digits, `_` or `-`"
        )));
    }
    Ok(())
}

/// The options' lease and request timeout.
pub(crate) fn check_lease_options(
    ttl_ms: u64,
    request_timeout_ms: u64,
    validity: fn(u64) -> Option<u64>,
) -> Result<(), LockError> {
    check_ttl(ttl_ms, validity)?;
    if request_timeout_ms == 0 || request_timeout_ms > 600_000 {
        return Err(LockError::invalid(
            "request_timeout_ms must be between 1 and 600000",
        ));
    }
    Ok(())
}

/// A handle this backend (`kind`, named `backend`) can resume: version 1,
/// a hold of one of `kinds`, key equal to its name, a well-formed owner.
pub(crate) fn check_handle(
    backend: &str,
    kind: BackendKind,
    kinds: &'static [KindFamily],
    handle: &LockHandle,
) -> Result<(), LockError> {
    if handle.v != 1 {
        return Err(LockError::invalid(format!(
            "unsupported lock handle version {}",
            handle.v
        )));
    }
    if handle.backend != kind {
        return Err(LockError::invalid(format!(
            "the handle is for the {} backend, this client is {backend}",
            handle.backend.as_str()
        )));
    }
    check_name(backend, &handle.name)?;
    let offered = Capabilities {
        kinds,
        atomic_sets: false,
    };
    // No lease backend grants leaderships (a campaign is refused).
    if handle.kind == LockKind::Leader || !offered.supports(handle.kind) {
        return Err(LockError::invalid(format!(
            "the handle is of a {} hold, which the {backend} backend does not grant",
            handle.kind.describe()
        )));
    }
    if handle.key != handle.name {
        return Err(LockError::invalid(
            "the handle's key does not match its name",
        ));
    }
    if !is_owner(&handle.owner) {
        return Err(LockError::invalid("the handle's owner is malformed"));
    }
    Ok(())
}

/// The state both lease machines keep: the runtime (requests, timers,
/// outbox, closing), acquires, held locks and the names of ended locks.
pub(crate) struct LeaseCore<R> {
    pub(crate) backend: &'static str,
    pub(crate) kind: BackendKind,
    /// The options' default lease (acquires without one, resumed locks).
    pub(crate) ttl_ms: u64,
    /// The options' automatic renewal.
    pub(crate) auto_extend: bool,
    /// Where owners (and the d1 poll jitter) come from.
    pub(crate) entropy: Box<dyn Entropy + Send>,
    pub(crate) rt: Runtime<R, Timer>,
    pub(crate) acquires: VecMap<OpId, Acquiring>,
    pub(crate) locks: VecMap<LockId, Held>,
    pub(crate) ended: VecMap<LockId, String>,
}

impl<R: LeaseReq> LeaseCore<R> {
    /// Every owner credential this client knows (held locks and acquires
    /// under way): kept out of every error and loss text.
    pub(crate) fn owners(&self) -> impl Iterator<Item = &str> {
        let held = self.locks.values().map(|h| h.owner.as_str());
        held.chain(self.acquires.values().map(|a| a.owner.as_str()))
    }

    pub(crate) fn new(
        backend: &'static str,
        kind: BackendKind,
        ttl_ms: u64,
        auto_extend: bool,
        entropy: Box<dyn Entropy + Send>,
    ) -> Self {
        LeaseCore {
            backend,
            kind,
            ttl_ms,
            auto_extend,
            entropy,
            rt: Runtime::default(),
            acquires: VecMap::new(),
            locks: VecMap::new(),
            ended: VecMap::new(),
        }
    }

    pub(crate) fn record_ended(&mut self, id: LockId, name: &str) {
        self.ended.insert(id, name.to_string());
        while self.ended.len() > ENDED_NAMES_KEPT {
            self.ended.pop_first();
        }
    }

    pub(crate) fn not_held(&self, lock: LockId) -> LockError {
        LockError::NotHeld {
            backend: self.backend,
            name: self.ended.get(&lock).cloned().unwrap_or_default(),
        }
    }

    pub(crate) fn hold(&mut self, h: Held, renew_at: Millis) {
        self.rt.timers.set(Timer::Expiry(h.id), h.expires_at);
        if h.renew {
            self.rt.timers.set(Timer::Renewal(h.id), renew_at);
        }
        self.locks.insert(h.id, h);
    }

    pub(crate) fn take_lock(&mut self, id: LockId) -> Option<Held> {
        let mut h = self.locks.remove(&id)?;
        self.rt.timers.clear(Timer::Expiry(id));
        self.rt.timers.clear(Timer::Renewal(id));
        if let Some(r) = h.renewal.take() {
            self.rt.cancel(r);
        }
        Some(h)
    }

    /// Answers the close calls once nothing is in flight or held.
    pub(crate) fn settle(&mut self) {
        let drained =
            self.acquires.is_empty() && self.locks.is_empty() && !self.rt.requests.any(|_| true);
        self.rt.closing.finish_if(drained, &mut self.rt.out);
    }

    pub(crate) fn live_count(&self) -> usize {
        let requests = self.rt.requests.iter().count();
        let pausing = self
            .acquires
            .values()
            .filter(|a| a.request.is_none())
            .count();
        requests + pausing + self.locks.len()
    }

    /// Lists a new acquire of `name` with a fresh random owner (its first
    /// attempt is the backend's to send).
    pub(crate) fn new_acquire(
        &mut self,
        now: Millis,
        name: String,
        kind: LockKind,
        ttl: u64,
        wait: Wait,
    ) -> OpId {
        let op = self.rt.out.op_id();
        let owner = random_hex(self.entropy.as_mut(), OWNER_BYTES);
        self.acquires.insert(
            op,
            Acquiring {
                name,
                kind,
                owner,
                ttl,
                wait,
                deadline: wait.deadline(now),
                request: None,
            },
        );
        op
    }

    /// Acquire `op` (`a`, out of the table) holds the lock with `token`
    /// (a permit: in `slot`), valid until `expires_at` (measured from
    /// `sent_at`, the send time of the request that established it): a
    /// held lock, renewed from `sent_at`.
    pub(crate) fn grant(
        &mut self,
        op: OpId,
        a: Acquiring,
        token: u64,
        slot: Option<u32>,
        sent_at: Millis,
        expires_at: Millis,
    ) {
        let id = self.rt.out.lock_id();
        let handle = LockHandle {
            v: 1,
            backend: self.kind,
            name: a.name.clone(),
            key: a.name.clone(),
            owner: a.owner.clone(),
            fencing_token: token,
            revision: token,
            kind: a.kind,
            slot: slot.filter(|_| matches!(a.kind, LockKind::Permits { .. })),
        };
        let info = LockInfo {
            id,
            name: a.name.clone(),
            fencing_token: token,
            expires_at,
            handle,
        };
        let renew_at = sent_at + a.ttl / 3;
        self.hold(
            Held {
                id,
                name: a.name,
                owner: a.owner,
                token,
                ttl: a.ttl,
                expires_at,
                renew: self.auto_extend,
                renewal: None,
                last_error: None,
            },
            renew_at,
        );
        self.rt.out.complete(op, Ok(Outcome::Acquired(info)));
    }

    /// The answer of resume `op` of `handle` sent at `sent_at`: the lock's
    /// remaining lease (`Ok(None)`: not held by the handle's owner).
    pub(crate) fn resumed(
        &mut self,
        now: Millis,
        op: OpId,
        handle: LockHandle,
        sent_at: Millis,
        answer: Result<Option<u64>, LockError>,
        validity: fn(u64) -> Option<u64>,
    ) {
        let lost = |name: String, reason: &str| LockError::Lost {
            backend: self.backend,
            name,
            reason: reason.to_string(),
        };
        match answer {
            Ok(Some(pttl)) => {
                let exp = validity(pttl)
                    .map(|v| sent_at.saturating_add(v))
                    .filter(|e| *e > now);
                let Some(exp) = exp else {
                    let e = lost(
                        handle.name,
                        "the handle's lease ends before it could be resumed",
                    );
                    self.rt.out.fail(op, e);
                    return;
                };
                let id = self.rt.out.lock_id();
                let ttl = self.ttl_ms;
                let info = LockInfo {
                    id,
                    name: handle.name.clone(),
                    fencing_token: handle.fencing_token,
                    expires_at: exp,
                    handle: handle.clone(),
                };
                let h = Held {
                    id,
                    name: handle.name,
                    owner: handle.owner,
                    token: handle.fencing_token,
                    ttl,
                    expires_at: exp,
                    renew: self.auto_extend,
                    renewal: None,
                    last_error: None,
                };
                // Soon: the remaining lease is whatever the previous process left.
                self.hold(h, now + (ttl / 3).min((exp - now) / 2));
                self.rt.out.complete(op, Ok(Outcome::Acquired(info)));
            }
            Ok(None) => {
                let e = lost(
                    handle.name,
                    "the handle's lock is no longer held by its owner",
                );
                self.rt.out.fail(op, e);
            }
            Err(e) => self.rt.out.fail(op, e),
        }
    }

    /// The answer of a user's release `op` of `h` (`answer`: whether the
    /// lock was still held until the release).
    pub(crate) fn released(&mut self, op: OpId, h: Held, answer: Result<bool, LockError>) {
        match answer {
            Ok(held) => {
                self.record_ended(h.id, &h.name);
                self.rt.out.complete(
                    op,
                    Ok(Outcome::Released {
                        lock: h.id,
                        held_until_release: held,
                    }),
                );
            }
            Err(e) => {
                self.rt.out.fail(op, e);
                if self.rt.closing.started() {
                    self.record_ended(h.id, &h.name);
                } else {
                    // Kept (without renewals) so that a retry can still release it.
                    let mut h = h;
                    h.renew = false;
                    let at = h.expires_at;
                    self.hold(h, at);
                }
            }
        }
    }

    /// A renewal that did not confirm the lock: retried soon while the
    /// lease lasts (its expiry timer ends the lock otherwise).
    pub(crate) fn extend_failed(
        &mut self,
        now: Millis,
        op: Option<OpId>,
        lock: LockId,
        error: String,
    ) {
        let Some(h) = self.locks.get_mut(&lock) else {
            return;
        };
        if let Some(op) = op {
            let e = LockError::Backend {
                backend: self.backend,
                name: h.name.clone(),
                status: None,
                message: error.clone(),
            };
            self.rt.out.fail(op, e);
        }
        h.last_error = Some(error);
        let retry = now + (h.ttl / 10).clamp(1, 1_000);
        if h.renew && retry < h.expires_at {
            self.rt.timers.set(Timer::Renewal(lock), retry);
        }
    }

    /// An extend the backend confirmed: the lease is `validity` from
    /// `sent_at` (`None`: no validity left). Renews again a third of `ttl` on.
    pub(crate) fn extended(
        &mut self,
        now: Millis,
        op: Option<OpId>,
        lock: LockId,
        ttl: u64,
        sent_at: Millis,
        validity: Option<u64>,
    ) {
        let Some(h) = self.locks.get_mut(&lock) else {
            return;
        };
        let exp = validity
            .map(|v| sent_at.saturating_add(v))
            .filter(|e| *e > now);
        match exp {
            Some(exp) => {
                h.ttl = ttl;
                h.expires_at = exp;
                h.last_error = None;
                let renew = h.renew;
                self.rt.timers.set(Timer::Expiry(lock), exp);
                if renew {
                    self.rt.timers.set(Timer::Renewal(lock), sent_at + ttl / 3);
                }
                match op {
                    Some(op) => self.rt.out.complete(
                        op,
                        Ok(Outcome::Extended {
                            lock,
                            expires_at: exp,
                        }),
                    ),
                    None => self.rt.out.renewed(lock, exp),
                }
            }
            None => {
                let e = "the renewal's answer arrived after its lease had ended".to_string();
                self.extend_failed(now, op, lock, e);
            }
        }
    }
}

/// A request/response lease machine: what each backend supplies (its
/// requests and answers), and the shared steps built on them.
pub(crate) trait LeaseProtocol {
    type Req: LeaseReq;

    /// The lock kinds the backend grants (its [`Capabilities`]).
    const KINDS: &'static [KindFamily] = Capabilities::EXCLUSIVE_ONLY;

    fn core(&mut self) -> &mut LeaseCore<Self::Req>;

    /// Sends acquire `op`'s next attempt (or poll).
    fn attempt(&mut self, now: Millis, op: OpId);

    /// Sends an extend of `lock` to `ttl` (`op`: the user's; `None`: a renewal).
    fn send_extend(
        &mut self,
        now: Millis,
        lock: LockId,
        ttl: u64,
        op: Option<OpId>,
    ) -> Option<RequestId>;

    /// Sends an owner-checked release of `h`: the user's (`op`, `lock`:
    /// the lock taken out of the table) or in the background (both `None`).
    fn send_release(&mut self, now: Millis, h: &Held, op: Option<OpId>, lock: Option<Held>);

    /// The codec's lease validity of a TTL (after the clock-drift allowance).
    fn validity(ttl: u64) -> Option<u64>;

    /// Handles the final answer of a request.
    fn dispatch(&mut self, now: Millis, owner: Self::Req, input: Answer);

    /// Reads an extend's answer for lock `name` of `owner`: `Ok(None)` the
    /// lock is not ours, `Ok(Some(validity))` confirmed, the lease lasting
    /// `validity` from the send time (`None`: none left).
    fn read_extend(
        &self,
        name: &str,
        owner: &str,
        ttl: u64,
        input: &Answer,
    ) -> Result<Option<Option<u64>>, LockError>;

    /// `close` ends acquire `op` (already out of the table; it is failed
    /// `Closed` after this): whatever the backend needs to give it up.
    fn abandon_on_close(&mut self, now: Millis, op: OpId, a: Acquiring);

    /// Forgets lock `id`, reports it lost, and (unless the backend said it
    /// is not ours) releases whatever the backend may still hold of it.
    fn lose(&mut self, now: Millis, id: LockId, reason: LostReason) {
        let Some(h) = self.core().take_lock(id) else {
            return;
        };
        self.core().record_ended(id, &h.name);
        if reason != LostReason::KeyGone {
            self.send_release(now, &h, None, None);
        }
        self.core().rt.out.lost(id, h.name, reason);
    }

    /// An extend that found the lock not ours: lose it, and fail the user's
    /// extend (if any) `Lost`.
    fn extend_key_gone(&mut self, now: Millis, op: Option<OpId>, lock: LockId, name: String) {
        self.lose(now, lock, LostReason::KeyGone);
        if let Some(op) = op {
            let backend = self.core().backend;
            self.core().rt.out.fail(
                op,
                LockError::Lost {
                    backend,
                    name,
                    reason: LostReason::KeyGone.to_string(),
                },
            );
        }
    }

    /// Starts an acquire of `name` for a hold of `kind` (the options' TTL
    /// unless the options say otherwise) and sends its first attempt.
    fn lease_acquire(
        &mut self,
        now: Millis,
        name: String,
        kind: LockKind,
        options: AcquireOptions,
    ) -> Result<OpId, LockError> {
        check_name(self.core().backend, &name)?;
        let ttl = options.ttl_ms.unwrap_or(self.core().ttl_ms);
        check_ttl(ttl, Self::validity)?;
        let op = self.core().new_acquire(now, name, kind, ttl, options.wait);
        self.attempt(now, op);
        Ok(op)
    }

    /// A user's release: of a held lock, or at once of one not held.
    fn lease_release(&mut self, now: Millis, lock: LockId) -> OpId {
        let op = self.core().rt.out.op_id();
        match self.core().take_lock(lock) {
            Some(h) => {
                let held = h.clone();
                self.send_release(now, &held, Some(op), Some(h));
            }
            None => self.core().rt.out.complete(
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
    fn lease_extend(
        &mut self,
        now: Millis,
        lock: LockId,
        ttl_ms: Option<u64>,
    ) -> Result<OpId, LockError> {
        if let Some(t) = ttl_ms {
            check_ttl(t, Self::validity)?;
        }
        let op = self.core().rt.out.op_id();
        match self
            .core()
            .locks
            .get(&lock)
            .map(|h| ttl_ms.unwrap_or(h.ttl))
        {
            Some(ttl) => {
                self.send_extend(now, lock, ttl, Some(op));
            }
            None => {
                let e = self.core().not_held(lock);
                self.core().rt.out.fail(op, e);
            }
        }
        Ok(op)
    }

    /// The answer of an extend (`op`: the user's; `None`: a renewal).
    fn on_extend(
        &mut self,
        now: Millis,
        op: Option<OpId>,
        lock: LockId,
        ttl: u64,
        sent_at: Millis,
        input: Answer,
    ) {
        let core = self.core();
        let Some(h) = core.locks.get(&lock) else {
            if let Some(op) = op {
                let e = core.not_held(lock);
                core.rt.out.fail(op, e);
            }
            return;
        };
        let (name, owner) = (h.name.clone(), h.owner.clone());
        let answer = self.read_extend(&name, &owner, ttl, &input);
        let core = self.core();
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

    /// [`LockMachine::close`]: acquires end (each as the backend gives it
    /// up), extends, resumes and inspects end now, user releases finish,
    /// held locks are lost `ClientClosed` and released.
    fn lease_close(&mut self, now: Millis) -> OpId {
        let op = self.core().rt.out.op_id();
        if self.core().rt.closing.begin(op) {
            let closed = LockError::Closed {
                backend: self.core().backend,
            };
            let ops: Vec<OpId> = self.core().acquires.keys().copied().collect();
            for aop in ops {
                if let Some(a) = self.core().acquires.remove(&aop) {
                    self.core().rt.timers.clear(Timer::Poll(aop));
                    self.abandon_on_close(now, aop, a);
                    self.core().rt.out.fail(aop, closed.clone());
                }
            }
            let stopped = self.core().rt.cancel_where(|r| r.ends_on_close());
            for (_, r) in stopped {
                if let Some(op) = r.op() {
                    self.core().rt.out.fail(op, closed.clone());
                }
            }
            let ids: Vec<LockId> = self.core().locks.keys().copied().collect();
            for id in ids {
                self.lose(now, id, LostReason::ClientClosed);
            }
        }
        self.core().settle();
        op
    }

    /// [`LockMachine::handle_input`].
    fn lease_input(&mut self, now: Millis, input: Input) {
        if !input.is_final() {
            return;
        }
        let Some(owner) = self.core().rt.requests.finish(input.id()) else {
            return;
        };
        let result = match input {
            Input::Response { status, body, .. } => Ok((status, body)),
            Input::Failed { error, .. } => Err(error),
            // Nothing here streams: an end without a response is a broken answer.
            Input::StreamEnd { .. } | Input::Chunk { .. } => {
                Err(TransportError::Io("the answer ended without a body".into()))
            }
        };
        self.dispatch(now, owner, result);
        self.core().settle();
    }

    /// [`LockMachine::handle_timeout`].
    fn lease_timeout(&mut self, now: Millis) {
        for (_, owner) in self.core().rt.expire(now) {
            self.dispatch(now, owner, Err(TransportError::Timeout));
        }
        for key in self.core().rt.timers.take_due(now) {
            match key {
                Timer::Poll(op) => self.attempt(now, op),
                Timer::Expiry(id) => {
                    let last = self
                        .core()
                        .locks
                        .get(&id)
                        .and_then(|h| h.last_error.clone());
                    let reason = match last {
                        Some(e) => LostReason::RenewalFailed(e),
                        None => LostReason::Expired,
                    };
                    self.lose(now, id, reason);
                }
                Timer::Renewal(id) => {
                    let Some(h) = self.core().locks.get(&id) else {
                        continue;
                    };
                    if h.renewal.is_some() || !h.renew {
                        continue;
                    }
                    let ttl = h.ttl;
                    let r = self.send_extend(now, id, ttl, None);
                    if let Some(h) = self.core().locks.get_mut(&id) {
                        h.renewal = r;
                    }
                }
            }
        }
        self.core().settle();
    }
}

/// The [`LockMachine`] methods a lease machine (a `core` field, an impl of
/// [`LeaseProtocol`]) answers alike, for the body of its `impl LockMachine`.
macro_rules! lease_lock_machine_steps {
    () => {
        fn backend(&self) -> BackendKind {
            self.core.kind
        }

        fn capabilities(&self) -> Capabilities {
            Capabilities {
                kinds: <Self as $crate::core::lease::LeaseProtocol>::KINDS,
                atomic_sets: false,
            }
        }

        fn live_count(&self) -> usize {
            self.core.live_count()
        }

        fn close(&mut self, now: Millis) -> OpId {
            self.lease_close(now)
        }

        fn handle_input(&mut self, now: Millis, input: Input) {
            self.lease_input(now, input)
        }

        fn handle_timeout(&mut self, now: Millis) {
            self.lease_timeout(now)
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
    };
}
pub(crate) use lease_lock_machine_steps;
