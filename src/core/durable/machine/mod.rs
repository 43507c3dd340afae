//! The `durable-object` [`LockMachine`]: one request per step, the service
//! does the rest (see the module docs of `durable`).

mod answers;

use super::codec::{self, AcquireAnswer, AnswerError, ApiOp};
use super::{DurableConfig, MAX_POLL_WAIT_MS};
use crate::core::names::{validate_name, validate_ttl};
use crate::core::operation::unserved;
use crate::core::runtime::{Runtime, VecMap};
use crate::core::*;

/// Random bytes of an owner (32 hex characters).
const OWNER_BYTES: usize = 16;

/// Names of locks that ended, kept for messages (bounded).
const ENDED_NAMES_KEPT: usize = 1024;

/// A refusal that came back before its `waitMs` (a newer poll of the same
/// owner superseded it, or a service that does not hold requests open) is
/// followed by a pause this long at most before the next poll.
const EARLY_REFUSAL_PAUSE_MS: u64 = 250;

/// The lease a leaving acquire asks for (see [`Req::Leave`]).
const LEAVE_TTL_MS: u64 = 2_000;

/// Reads one kind of answer (`codec::parse_*`).
type Parser<T> = fn(u16, &[u8], &[&str]) -> Result<T, AnswerError>;

/// Who a request in flight belongs to.
enum Req {
    /// A poll of a waiting (or trying) acquire.
    Acquire { op: OpId, sent_at: Millis },
    /// An `extend` confirming a grant that arrived after its lease, as
    /// measured from its poll's send time, had ended (a request held open
    /// longer than the TTL): the service's answer anchors the lease anew.
    Confirm {
        op: OpId,
        token: u64,
        sent_at: Millis,
    },
    /// An owner-checked release: of a held lock (`lock`), or with token 0
    /// only to leave the queue (`lock: None`). `op`: the user's release,
    /// or the cancelled acquire to answer `Aborted`; `None` in the background.
    Release {
        op: Option<OpId>,
        lock: Option<Held>,
        abort: Option<String>,
    },
    /// An acquire that ended without a grant it knows of (cancelled, closed,
    /// failed) leaves: `acquire` with its owner and `waitMs` 0 takes it out
    /// of the queue, or answers the token of a grant it missed, which is
    /// then released. `op`: the cancelled acquire, answered `Aborted` after.
    Leave {
        op: Option<OpId>,
        name: String,
        owner: String,
    },
    /// A user's extend (`op`) or an automatic renewal.
    Extend {
        op: Option<OpId>,
        lock: LockId,
        ttl: u64,
        sent_at: Millis,
    },
    /// A resume from a handle.
    Resume {
        op: OpId,
        handle: LockHandle,
        sent_at: Millis,
    },
    /// An inspect.
    Inspect { op: OpId, name: String },
}

impl Req {
    fn op(&self) -> Option<OpId> {
        match self {
            Req::Acquire { op, .. }
            | Req::Confirm { op, .. }
            | Req::Resume { op, .. }
            | Req::Inspect { op, .. } => Some(*op),
            Req::Release { op, .. } | Req::Extend { op, .. } | Req::Leave { op, .. } => *op,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Timer {
    /// A waiting acquire's next poll (after an early refusal).
    Poll(OpId),
    /// A held lock's lease ends.
    Expiry(LockId),
    /// A held lock's next automatic renewal.
    Renewal(LockId),
}

/// An acquire under way.
struct Acquiring {
    name: String,
    owner: String,
    ttl: u64,
    wait: Wait,
    /// When a `Wait::For` runs out.
    deadline: Option<Millis>,
    /// The poll in flight, if any (none while pausing).
    request: Option<RequestId>,
}

/// A lock this machine holds.
#[derive(Clone)]
struct Held {
    id: LockId,
    name: String,
    owner: String,
    token: u64,
    ttl: u64,
    expires_at: Millis,
    /// Renew automatically (off after a failed release).
    renew: bool,
    /// The renewal in flight, if any.
    renewal: Option<RequestId>,
    /// Why the last renewal failed, for the loss report.
    last_error: Option<String>,
}

/// The `durable-object` backend as a sans-IO [`LockMachine`].
pub struct DurableMachine {
    cfg: DurableConfig,
    entropy: Box<dyn Entropy + Send>,
    rt: Runtime<Req, Timer>,
    acquires: VecMap<OpId, Acquiring>,
    locks: VecMap<LockId, Held>,
    ended: VecMap<LockId, String>,
}

impl std::fmt::Debug for DurableMachine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DurableMachine")
            .field("cfg", &self.cfg)
            .field("acquires", &self.acquires.len())
            .field("locks", &self.locks.len())
            .finish()
    }
}

const BACKEND: &str = "durable-object";

/// A lock name the service accepts: the core's rule, and no control
/// characters (refused before any request, not by the service).
fn check_name(name: &str) -> Result<(), LockError> {
    validate_name(name)?;
    if name.chars().any(char::is_control) {
        return Err(LockError::invalid(
            "a durable-object lock name must not contain control characters",
        ));
    }
    Ok(())
}

/// Whether `s` can be an owner: 16..=64 lowercase hex characters.
fn is_owner(s: &str) -> bool {
    (16..=64).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

impl DurableMachine {
    /// Validates `cfg` and builds the machine. Nothing is sent before the
    /// first operation.
    pub fn new(cfg: DurableConfig, entropy: Box<dyn Entropy + Send>) -> Result<Self, LockError> {
        Ok(DurableMachine {
            cfg: cfg.validated()?,
            entropy,
            rt: Runtime::default(),
            acquires: VecMap::new(),
            locks: VecMap::new(),
            ended: VecMap::new(),
        })
    }

    // ---- sending -----------------------------------------------------------

    fn send(
        &mut self,
        now: Millis,
        owner: Req,
        op: ApiOp,
        name: &str,
        body: String,
        timeout_ms: u64,
    ) -> RequestId {
        let (endpoint, token) = (&self.cfg.endpoint, self.cfg.token.as_deref());
        let sent = self.rt.send(now, owner, |id| {
            Ok::<_, std::convert::Infallible>(codec::request(
                id, endpoint, token, op, name, body, timeout_ms,
            ))
        });
        match sent {
            Ok(id) => id,
            Err(never) => match never {},
        }
    }

    /// Sends (or re-sends) acquire `op`'s poll.
    fn poll(&mut self, now: Millis, op: OpId) {
        let Some(a) = self.acquires.get(&op) else {
            return;
        };
        let wait_ms = match (a.wait, a.deadline) {
            (Wait::Try, _) => 0,
            (_, Some(d)) => d.saturating_sub(now).min(MAX_POLL_WAIT_MS),
            (_, None) => MAX_POLL_WAIT_MS,
        };
        let body = codec::acquire_body(&a.owner, a.ttl, wait_ms);
        let name = a.name.clone();
        let timeout = wait_ms + self.cfg.request_timeout_ms;
        let id = self.send(
            now,
            Req::Acquire { op, sent_at: now },
            ApiOp::Acquire,
            &name,
            body,
            timeout,
        );
        if let Some(a) = self.acquires.get_mut(&op) {
            a.request = Some(id);
        }
    }

    /// An owner-checked release of `owner` on `name` (token 0: leave the queue).
    fn send_release(&mut self, now: Millis, name: &str, owner: &str, token: u64, req: Req) {
        let body = codec::owner_body(owner, token);
        let timeout = self.cfg.request_timeout_ms;
        self.send(now, req, ApiOp::Release, name, body, timeout);
    }

    /// Takes acquire `a` out of the service's queue, or releases the grant
    /// it may have had without hearing of it (see [`Req::Leave`]). The
    /// service keeps a waiter whose caller went away (workerd does not tell
    /// it), so a cancelled request alone is not enough.
    fn leave(&mut self, now: Millis, op: Option<OpId>, a: Acquiring) {
        // A short lease: were the lock free, this grants it, and it is
        // released at once (a failed release then blocks it briefly only).
        let body = codec::acquire_body(&a.owner, a.ttl.min(LEAVE_TTL_MS), 0);
        let timeout = self.cfg.request_timeout_ms;
        let req = Req::Leave {
            op,
            name: a.name.clone(),
            owner: a.owner,
        };
        self.send(now, req, ApiOp::Acquire, &a.name, body, timeout);
    }

    fn send_extend(
        &mut self,
        now: Millis,
        lock: LockId,
        ttl: u64,
        op: Option<OpId>,
    ) -> Option<RequestId> {
        let h = self.locks.get_mut(&lock)?;
        // The service sets the lease to `ttl` from the moment the extend
        // arrives: a shorter TTL may shorten it, whatever comes back (or
        // not). Trust the lock no longer than the new lease from now.
        let bound = codec::lease_validity(ttl).map(|v| now.saturating_add(v));
        if let Some(bound) = bound.filter(|b| *b < h.expires_at) {
            h.expires_at = bound;
            self.rt.timers.set(Timer::Expiry(lock), bound);
        }
        let h = self.locks.get(&lock)?;
        let body = codec::extend_body(&h.owner, h.token, ttl);
        let name = h.name.clone();
        let timeout = self.cfg.request_timeout_ms;
        let req = Req::Extend {
            op,
            lock,
            ttl,
            sent_at: now,
        };
        Some(self.send(now, req, ApiOp::Extend, &name, body, timeout))
    }

    // ---- errors ------------------------------------------------------------

    fn secrets(&self) -> Vec<String> {
        let mut s: Vec<String> = self.cfg.token.iter().cloned().collect();
        s.extend(self.locks.values().map(|h| h.owner.clone()));
        s.extend(self.acquires.values().map(|a| a.owner.clone()));
        s
    }

    fn backend_error(name: &str, e: AnswerError) -> LockError {
        LockError::Backend {
            backend: BACKEND,
            name: name.to_string(),
            status: e.status,
            message: e.message,
        }
    }

    fn transport_error(name: &str, e: &TransportError) -> LockError {
        LockError::Transport {
            backend: BACKEND,
            name: name.to_string(),
            message: e.to_string(),
        }
    }

    /// Reads a final input with `parse`, mapping transport failures and
    /// malformed answers to the operation's error.
    /// `owner`: the request's owner, kept out of messages even when the
    /// machine no longer lists it.
    fn read<T>(
        &self,
        name: &str,
        owner: &str,
        input: &Result<(u16, Vec<u8>), TransportError>,
        parse: Parser<T>,
    ) -> Result<T, LockError> {
        match input {
            Ok((status, body)) => {
                let secrets = self.secrets();
                let mut secrets: Vec<&str> = secrets.iter().map(String::as_str).collect();
                secrets.push(owner);
                parse(*status, body, &secrets).map_err(|e| Self::backend_error(name, e))
            }
            Err(e) => Err(Self::transport_error(name, e)),
        }
    }

    fn record_ended(&mut self, id: LockId, name: &str) {
        self.ended.insert(id, name.to_string());
        while self.ended.len() > ENDED_NAMES_KEPT {
            self.ended.pop_first();
        }
    }

    fn not_held(&self, lock: LockId) -> LockError {
        LockError::NotHeld {
            backend: BACKEND,
            name: self.ended.get(&lock).cloned().unwrap_or_default(),
        }
    }

    // ---- the table of held locks -------------------------------------------

    fn hold(&mut self, h: Held, renew_at: Millis) {
        self.rt.timers.set(Timer::Expiry(h.id), h.expires_at);
        if h.renew {
            self.rt.timers.set(Timer::Renewal(h.id), renew_at);
        }
        self.locks.insert(h.id, h);
    }

    fn take_lock(&mut self, id: LockId) -> Option<Held> {
        let mut h = self.locks.remove(&id)?;
        self.rt.timers.clear(Timer::Expiry(id));
        self.rt.timers.clear(Timer::Renewal(id));
        if let Some(r) = h.renewal.take() {
            self.rt.cancel(r);
        }
        Some(h)
    }

    /// Forgets lock `id`, reports it lost, and (unless the service said it
    /// is not ours) releases whatever the service may still hold of it.
    fn lose(&mut self, now: Millis, id: LockId, reason: LostReason) {
        let Some(h) = self.take_lock(id) else {
            return;
        };
        self.record_ended(id, &h.name);
        if reason != LostReason::KeyGone {
            self.send_release(
                now,
                &h.name,
                &h.owner,
                h.token,
                Req::Release {
                    op: None,
                    lock: None,
                    abort: None,
                },
            );
        }
        self.rt.out.lost(id, h.name, reason);
    }

    /// Answers the close calls once nothing is in flight or held.
    fn settle(&mut self) {
        let drained =
            self.acquires.is_empty() && self.locks.is_empty() && !self.rt.requests.any(|_| true);
        self.rt.closing.finish_if(drained, &mut self.rt.out);
    }

    // ---- user operations ----------------------------------------------------

    fn start_acquire(
        &mut self,
        now: Millis,
        name: String,
        options: AcquireOptions,
    ) -> Result<OpId, LockError> {
        check_name(&name)?;
        let ttl = options.ttl_ms.unwrap_or(self.cfg.ttl_ms);
        validate_ttl("ttl_ms", ttl)?;
        if codec::lease_validity(ttl).is_none() {
            return Err(LockError::invalid(format!(
                "ttl_ms of {ttl} ms leaves no validity after the clock-drift allowance"
            )));
        }
        let op = self.rt.out.op_id();
        let owner = random_hex(self.entropy.as_mut(), OWNER_BYTES);
        self.acquires.insert(
            op,
            Acquiring {
                name,
                owner,
                ttl,
                wait: options.wait,
                deadline: options.wait.deadline(now),
                request: None,
            },
        );
        self.poll(now, op);
        Ok(op)
    }

    fn start_resume(&mut self, now: Millis, handle: LockHandle) -> Result<OpId, LockError> {
        if handle.v != 1 {
            return Err(LockError::invalid(format!(
                "unsupported lock handle version {}",
                handle.v
            )));
        }
        if handle.backend != BackendKind::DurableObject {
            return Err(LockError::invalid(format!(
                "the handle is for the {} backend, this client is {BACKEND}",
                handle.backend.as_str()
            )));
        }
        check_name(&handle.name)?;
        handle.check_kind(LockKind::Exclusive)?;
        if handle.key != handle.name {
            return Err(LockError::invalid(
                "the handle's key does not match its name",
            ));
        }
        if !is_owner(&handle.owner) {
            return Err(LockError::invalid("the handle's owner is malformed"));
        }
        let op = self.rt.out.op_id();
        let body = codec::owner_body(&handle.owner, handle.fencing_token);
        let name = handle.name.clone();
        let timeout = self.cfg.request_timeout_ms;
        self.send(
            now,
            Req::Resume {
                op,
                handle,
                sent_at: now,
            },
            ApiOp::Resume,
            &name,
            body,
            timeout,
        );
        Ok(op)
    }
}

impl LockMachine for DurableMachine {
    fn backend(&self) -> BackendKind {
        BackendKind::DurableObject
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            kinds: Capabilities::EXCLUSIVE_ONLY,
            atomic_sets: false,
        }
    }

    fn live_count(&self) -> usize {
        let requests = self.rt.requests.iter().count();
        let pausing = self
            .acquires
            .values()
            .filter(|a| a.request.is_none())
            .count();
        requests + pausing + self.locks.len()
    }

    fn start_operation(&mut self, now: Millis, op: Operation) -> Result<OpId, LockError> {
        self.rt.closing.check_open(BackendKind::DurableObject)?;
        match op {
            Operation::Acquire {
                name,
                kind: LockKind::Exclusive,
                options,
            } => self.start_acquire(now, name, options),
            Operation::Release { lock } => {
                let op = self.rt.out.op_id();
                match self.take_lock(lock) {
                    Some(h) => {
                        let (name, owner, token) = (h.name.clone(), h.owner.clone(), h.token);
                        self.send_release(
                            now,
                            &name,
                            &owner,
                            token,
                            Req::Release {
                                op: Some(op),
                                lock: Some(h),
                                abort: None,
                            },
                        );
                    }
                    None => self.rt.out.complete(
                        op,
                        Ok(Outcome::Released {
                            lock,
                            held_until_release: false,
                        }),
                    ),
                }
                Ok(op)
            }
            Operation::Extend { lock, ttl_ms } => {
                if let Some(t) = ttl_ms {
                    validate_ttl("ttl_ms", t)?;
                    if codec::lease_validity(t).is_none() {
                        return Err(LockError::invalid(format!(
                            "ttl_ms of {t} ms leaves no validity after the clock-drift allowance"
                        )));
                    }
                }
                let op = self.rt.out.op_id();
                match self.locks.get(&lock).map(|h| ttl_ms.unwrap_or(h.ttl)) {
                    Some(ttl) => {
                        self.send_extend(now, lock, ttl, Some(op));
                    }
                    None => {
                        let e = self.not_held(lock);
                        self.rt.out.fail(op, e);
                    }
                }
                Ok(op)
            }
            Operation::Resume { handle } => self.start_resume(now, handle),
            Operation::Inspect { name } => {
                check_name(&name)?;
                let op = self.rt.out.op_id();
                let timeout = self.cfg.request_timeout_ms;
                self.send(
                    now,
                    Req::Inspect {
                        op,
                        name: name.clone(),
                    },
                    ApiOp::Inspect,
                    &name,
                    "{}".into(),
                    timeout,
                );
                Ok(op)
            }
            other => Err(unserved(BackendKind::DurableObject, &other)),
        }
    }

    fn cancel(&mut self, now: Millis, op: OpId) {
        let Some(a) = self.acquires.remove(&op) else {
            return;
        };
        self.rt.timers.clear(Timer::Poll(op));
        if let Some(r) = a.request {
            self.rt.cancel(r);
        }
        self.leave(now, Some(op), a);
    }

    fn close(&mut self, now: Millis) -> OpId {
        let op = self.rt.out.op_id();
        if self.rt.closing.begin(op) {
            let closed = LockError::Closed { backend: BACKEND };
            // Waiting acquires end now and leave their queues.
            let ops: Vec<OpId> = self.acquires.keys().copied().collect();
            for aop in ops {
                if let Some(a) = self.acquires.remove(&aop) {
                    self.rt.timers.clear(Timer::Poll(aop));
                    if let Some(r) = a.request {
                        self.rt.cancel(r);
                    }
                    self.leave(now, None, a);
                    self.rt.out.fail(aop, closed.clone());
                }
            }
            // Extends, resumes and inspects end now; user releases finish.
            let stopped = self.rt.cancel_where(|r| {
                matches!(
                    r,
                    Req::Extend { .. } | Req::Resume { .. } | Req::Inspect { .. }
                )
            });
            for (_, r) in stopped {
                if let Some(op) = r.op() {
                    self.rt.out.fail(op, closed.clone());
                }
            }
            let ids: Vec<LockId> = self.locks.keys().copied().collect();
            for id in ids {
                self.lose(now, id, LostReason::ClientClosed);
            }
        }
        self.settle();
        op
    }

    fn handle_input(&mut self, now: Millis, input: Input) {
        if !input.is_final() {
            return;
        }
        let Some(owner) = self.rt.requests.finish(input.id()) else {
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
        self.settle();
    }

    fn handle_timeout(&mut self, now: Millis) {
        for (_, owner) in self.rt.expire(now) {
            self.dispatch(now, owner, Err(TransportError::Timeout));
        }
        for key in self.rt.timers.take_due(now) {
            match key {
                Timer::Poll(op) => self.poll(now, op),
                Timer::Expiry(id) => {
                    let reason = match self.locks.get(&id).and_then(|h| h.last_error.clone()) {
                        Some(e) => LostReason::RenewalFailed(e),
                        None => LostReason::Expired,
                    };
                    self.lose(now, id, reason);
                }
                Timer::Renewal(id) => {
                    let Some(h) = self.locks.get(&id) else {
                        continue;
                    };
                    if h.renewal.is_some() || !h.renew {
                        continue;
                    }
                    let ttl = h.ttl;
                    let r = self.send_extend(now, id, ttl, None);
                    if let Some(h) = self.locks.get_mut(&id) {
                        h.renewal = r;
                    }
                }
            }
        }
        self.settle();
    }

    fn poll_transmit(&mut self) -> Option<Transmit> {
        self.rt.poll_transmit()
    }

    fn poll_event(&mut self) -> Option<Event> {
        self.rt.poll_event()
    }

    fn poll_timeout(&self) -> Option<Millis> {
        self.rt.poll_timeout()
    }
}
