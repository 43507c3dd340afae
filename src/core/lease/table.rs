//! The state both lease machines keep ([`LeaseCore`]: the runtime, the
//! acquires under way, the held locks, the names of ended locks) and the
//! protocol-independent steps on it: granting, resuming, releasing,
//! extending and losing a lease.

use crate::core::runtime::{Runtime, VecMap};
use crate::core::{
    random_hex, BackendKind, Entropy, LockError, LockHandle, LockId, LockInfo, LockKind, Millis,
    OpId, Outcome, RequestId, TransportError, Wait,
};

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
    /// `LeaseProtocol::KINDS`).
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

    /// Lists acquire `op` (`a`) again, pausing until its next attempt at `at`.
    pub(crate) fn pause(&mut self, op: OpId, a: Acquiring, at: Millis) {
        self.acquires.insert(op, a);
        self.rt.timers.set(Timer::Poll(op), at);
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
