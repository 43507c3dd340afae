//! The `durable-object` [`LockMachine`]: one request per step, the service
//! does the rest (see the module docs of `durable`). The lease table,
//! timers, renewals, `close` and the answers both lease backends share live
//! in `crate::core::lease`; what is here is the service's own: its
//! requests, and how a waiting acquire proceeds (re-sent with the service
//! holding it open, a late grant confirmed with an extend, a leaving acquire
//! asking again with `waitMs` 0).

mod answers;

use super::codec::{self, AcquireAnswer, AnswerError, ApiOp};
use super::{DurableConfig, MAX_POLL_WAIT_MS};
use crate::core::error::sanitize_detail;
use crate::core::lease::{
    check_handle, Acquiring, Answer, Held, LeaseCore, LeaseProtocol, LeaseReq, Timer,
};
use crate::core::operation::unserved;
use crate::core::*;

/// A refusal that came back before its `waitMs` (a newer poll of the same
/// owner superseded it, or a service that does not hold requests open) is
/// followed by a pause this long at most before the next poll.
const EARLY_REFUSAL_PAUSE_MS: u64 = 250;

/// The lease a leaving acquire asks for (see [`Req::Leave`]).
const LEAVE_TTL_MS: u64 = 2_000;

/// Reads one kind of answer (`codec::parse_*`).
type Parser<T> = fn(u16, &[u8], &[&str]) -> Result<T, AnswerError>;

/// Who a request in flight belongs to.
pub(crate) enum Req {
    /// A poll of a waiting (or trying) acquire.
    Acquire { op: OpId, sent_at: Millis },
    /// An `extend` confirming a grant that arrived after its lease, as
    /// measured from its poll's send time, had ended (a request held open
    /// longer than the TTL): the service's answer anchors the lease anew.
    Confirm {
        op: OpId,
        token: u64,
        /// A permit's slot.
        slot: Option<u32>,
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

impl LeaseReq for Req {
    fn op(&self) -> Option<OpId> {
        match self {
            Req::Acquire { op, .. }
            | Req::Confirm { op, .. }
            | Req::Resume { op, .. }
            | Req::Inspect { op, .. } => Some(*op),
            Req::Release { op, .. } | Req::Extend { op, .. } | Req::Leave { op, .. } => *op,
        }
    }

    fn ends_on_close(&self) -> bool {
        matches!(
            self,
            Req::Extend { .. } | Req::Resume { .. } | Req::Inspect { .. }
        )
    }
}

/// The `durable-object` backend as a sans-IO [`LockMachine`].
pub struct DurableMachine {
    cfg: DurableConfig,
    core: LeaseCore<Req>,
}

impl std::fmt::Debug for DurableMachine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DurableMachine")
            .field("cfg", &self.cfg)
            .field("acquires", &self.core.acquires.len())
            .field("locks", &self.core.locks.len())
            .finish()
    }
}

const BACKEND: &str = "durable-object";

/// A lock name the service accepts: the core's rule, and no control
/// characters (refused before any request, not by the service).
fn check_name(name: &str) -> Result<(), LockError> {
    crate::core::lease::check_name(BACKEND, name)
}

impl DurableMachine {
    /// Validates `cfg` and builds the machine. Nothing is sent before the
    /// first operation.
    pub fn new(cfg: DurableConfig, entropy: Box<dyn Entropy + Send>) -> Result<Self, LockError> {
        let cfg = cfg.validated()?;
        let core = LeaseCore::new(
            BACKEND,
            BackendKind::DurableObject,
            cfg.ttl_ms,
            cfg.auto_extend,
            entropy,
        );
        Ok(DurableMachine { cfg, core })
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
        let sent = self.core.rt.send(now, owner, |id| {
            Ok::<_, std::convert::Infallible>(codec::request(
                id, endpoint, token, op, name, body, timeout_ms,
            ))
        });
        match sent {
            Ok(id) => id,
            Err(never) => match never {},
        }
    }

    /// An owner-checked release of `owner` on `name` (token 0: leave the queue).
    fn release_request(&mut self, now: Millis, name: &str, owner: &str, token: u64, req: Req) {
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
        let body = codec::acquire_body(&a.owner, a.kind, a.ttl.min(LEAVE_TTL_MS), 0);
        let timeout = self.cfg.request_timeout_ms;
        let req = Req::Leave {
            op,
            name: a.name.clone(),
            owner: a.owner,
        };
        self.send(now, req, ApiOp::Acquire, &a.name, body, timeout);
    }

    // ---- errors ------------------------------------------------------------

    fn secrets(&self) -> Vec<String> {
        let mut s: Vec<String> = self.cfg.token.iter().cloned().collect();
        s.extend(self.core.owners().map(str::to_string));
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

    /// A driver's transport message may quote what it sent (the bearer
    /// token, an owner): scrubbed like a backend's.
    fn transport_error(name: &str, e: &TransportError, secrets: &[&str]) -> LockError {
        LockError::Transport {
            backend: BACKEND,
            name: name.to_string(),
            message: sanitize_detail(&e.to_string(), secrets),
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
        let secrets = self.secrets();
        let mut secrets: Vec<&str> = secrets.iter().map(String::as_str).collect();
        secrets.push(owner);
        match input {
            Ok((status, body)) => {
                parse(*status, body, &secrets).map_err(|e| Self::backend_error(name, e))
            }
            Err(e) => Err(Self::transport_error(name, e, &secrets)),
        }
    }

    // ---- user operations ----------------------------------------------------

    fn start_resume(&mut self, now: Millis, handle: LockHandle) -> Result<OpId, LockError> {
        check_handle(BACKEND, BackendKind::DurableObject, KINDS, &handle)?;
        let op = self.core.rt.out.op_id();
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

/// What the service grants: exclusive locks, read-write locks (shared
/// holds) and semaphores (permits), each name in one object.
const KINDS: &[KindFamily] = &[
    KindFamily::Exclusive,
    KindFamily::Shared,
    KindFamily::Permits,
];

impl LeaseProtocol for DurableMachine {
    type Req = Req;

    const KINDS: &'static [KindFamily] = KINDS;

    fn core(&mut self) -> &mut LeaseCore<Req> {
        &mut self.core
    }

    /// Sends (or re-sends) acquire `op`'s poll.
    fn attempt(&mut self, now: Millis, op: OpId) {
        let Some(a) = self.core.acquires.get(&op) else {
            return;
        };
        let wait_ms = match (a.wait, a.deadline) {
            (Wait::Try, _) => 0,
            // At least 1 ms: `waitMs` 0 is how an acquire leaves, and the
            // service refuses a waiting poll of an owner that left (a late
            // poll overtaken by its own leave must not be granted).
            (_, Some(d)) => d.saturating_sub(now).clamp(1, MAX_POLL_WAIT_MS),
            (_, None) => MAX_POLL_WAIT_MS,
        };
        let body = codec::acquire_body(&a.owner, a.kind, a.ttl, wait_ms);
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
        if let Some(a) = self.core.acquires.get_mut(&op) {
            a.request = Some(id);
        }
    }

    fn send_extend(
        &mut self,
        now: Millis,
        lock: LockId,
        ttl: u64,
        op: Option<OpId>,
    ) -> Option<RequestId> {
        let h = self.core.locks.get_mut(&lock)?;
        // The service sets the lease to `ttl` from the moment the extend
        // arrives: a shorter TTL may shorten it, whatever comes back (or
        // not). Trust the lock no longer than the new lease from now.
        let bound = codec::lease_validity(ttl).map(|v| now.saturating_add(v));
        if let Some(bound) = bound.filter(|b| *b < h.expires_at) {
            h.expires_at = bound;
            self.core.rt.timers.set(Timer::Expiry(lock), bound);
        }
        let h = self.core.locks.get(&lock)?;
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

    fn send_release(&mut self, now: Millis, h: &Held, op: Option<OpId>, lock: Option<Held>) {
        let req = Req::Release {
            op,
            lock,
            abort: None,
        };
        self.release_request(now, &h.name, &h.owner, h.token, req);
    }

    fn validity(ttl: u64) -> Option<u64> {
        codec::lease_validity(ttl)
    }

    fn dispatch(&mut self, now: Millis, owner: Req, input: Answer) {
        self.answer(now, owner, input);
    }

    fn read_extend(
        &self,
        name: &str,
        _owner: &str,
        ttl: u64,
        input: &Answer,
    ) -> Result<Option<Option<u64>>, LockError> {
        let granted = self.read(name, "", input, codec::parse_extend)?;
        Ok(granted.map(|g| codec::lease_validity(g.min(ttl))))
    }

    /// Waiting acquires end now and leave their queues.
    fn abandon_on_close(&mut self, now: Millis, _op: OpId, a: Acquiring) {
        if let Some(r) = a.request {
            self.core.rt.cancel(r);
        }
        self.leave(now, None, a);
    }
}

impl LockMachine for DurableMachine {
    crate::core::lease::lease_lock_machine_steps!();

    fn start_operation(&mut self, now: Millis, op: Operation) -> Result<OpId, LockError> {
        self.core
            .rt
            .closing
            .check_open(BackendKind::DurableObject)?;
        match op {
            Operation::Acquire {
                name,
                kind: kind @ (LockKind::Exclusive | LockKind::Shared | LockKind::Permits { .. }),
                options,
            } => self.lease_acquire(now, name, kind, options),
            Operation::Release { lock } => Ok(self.lease_release(now, lock)),
            Operation::Extend { lock, ttl_ms } => self.lease_extend(now, lock, ttl_ms),
            Operation::Resume { handle } => self.start_resume(now, handle),
            Operation::Inspect { name } => {
                check_name(&name)?;
                let op = self.core.rt.out.op_id();
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
        let Some(a) = self.core.acquires.remove(&op) else {
            return;
        };
        self.core.rt.timers.clear(Timer::Poll(op));
        if let Some(r) = a.request {
            self.core.rt.cancel(r);
        }
        self.leave(now, Some(op), a);
    }
}
