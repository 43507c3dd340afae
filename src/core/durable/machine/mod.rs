//! The `durable-object` [`LockMachine`](crate::core::LockMachine): one
//! request per step, the service does the rest (see the module docs of
//! `durable`). The machine is the shared
//! [`LeaseMachine`](crate::core::lease::LeaseMachine) (lease table, timers,
//! renewals, `close`, the extend answers) over [`Durable`], the service's
//! own part: its requests (here), how a waiting acquire proceeds (`acquire`:
//! re-sent with the service holding it open, a late grant confirmed with an
//! extend, a leaving acquire asking again with `waitMs` 0) and what the
//! other answers do (`answers`).

mod acquire;
mod answers;

use super::codec::{self, AnswerError, ApiOp};
use super::DurableConfig;
use crate::core::error::sanitize_detail;
use crate::core::lease::{
    self, check_handle, Acquiring, Answer, Extend, Held, LeaseMachine, LeaseProtocol, LeaseReq,
};
use crate::core::{
    BackendKind, Entropy, KindFamily, LockError, LockHandle, LockId, Millis, OpId, RequestId,
    TransportError,
};

/// The lease a leaving acquire asks for (see [`Req::Leave`]).
const LEAVE_TTL_MS: u64 = 2_000;

/// Reads one kind of answer (`codec::parse_*`).
type Parser<T> = fn(u16, &[u8], &[&str]) -> Result<T, AnswerError>;

/// The state the machine lends the backend (see [`lease::Core`]).
type Core = lease::Core<Durable>;

/// Who a request in flight belongs to (besides extends, which the shared
/// machine keeps).
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
            Req::Release { op, .. } | Req::Leave { op, .. } => *op,
        }
    }

    fn ends_on_close(&self) -> bool {
        matches!(self, Req::Resume { .. } | Req::Inspect { .. })
    }
}

/// The lock service's part of the `durable-object` machine: its options.
#[derive(Debug)]
pub(crate) struct Durable {
    cfg: DurableConfig,
}

/// The `durable-object` backend as a sans-IO [`LockMachine`](crate::core::LockMachine).
pub(crate) type DurableMachine = LeaseMachine<Durable>;

const BACKEND: &str = "durable-object";

impl DurableMachine {
    /// Validates `cfg` and builds the machine. Nothing is sent before the
    /// first operation.
    pub(crate) fn new(
        cfg: DurableConfig,
        entropy: Box<dyn Entropy + Send>,
    ) -> Result<Self, LockError> {
        let cfg = cfg.validated()?;
        let (ttl, renew) = (cfg.ttl_ms, cfg.auto_extend);
        let kind = (BACKEND, BackendKind::DurableObject);
        Ok(LeaseMachine::with(
            Durable { cfg },
            kind,
            ttl,
            renew,
            entropy,
        ))
    }
}

impl Durable {
    // ---- sending -----------------------------------------------------------

    fn send(
        &self,
        core: &mut Core,
        now: Millis,
        owner: lease::Req<Req>,
        (op, name): (ApiOp, &str),
        body: String,
        timeout_ms: u64,
    ) -> RequestId {
        let (endpoint, token) = (&self.cfg.endpoint, self.cfg.token.as_deref());
        let sent = core.rt.send(now, owner, |id| {
            Ok::<_, std::convert::Infallible>(codec::request(
                id, endpoint, token, op, name, body, timeout_ms,
            ))
        });
        match sent {
            Ok(id) => id,
            Err(never) => match never {},
        }
    }

    /// Sends one of the service's own requests with the request timeout.
    fn send_own(&self, core: &mut Core, now: Millis, req: Req, to: (ApiOp, &str), body: String) {
        let timeout = self.cfg.request_timeout_ms;
        self.send(core, now, lease::Req::Own(req), to, body, timeout);
    }

    /// An owner-checked release of `owner` on `name` (token 0: leave the queue).
    fn release_request(
        &self,
        core: &mut Core,
        now: Millis,
        (name, owner): (&str, &str),
        token: u64,
        req: Req,
    ) {
        let body = codec::owner_body(owner, token);
        self.send_own(core, now, req, (ApiOp::Release, name), body);
    }

    // ---- errors ------------------------------------------------------------

    fn secrets(&self, core: &Core) -> Vec<String> {
        let mut s: Vec<String> = self.cfg.token.iter().cloned().collect();
        s.extend(core.owners().map(str::to_string));
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
        core: &Core,
        (name, owner): (&str, &str),
        input: &Answer,
        parse: Parser<T>,
    ) -> Result<T, LockError> {
        let secrets = self.secrets(core);
        let mut secrets: Vec<&str> = secrets.iter().map(String::as_str).collect();
        secrets.push(owner);
        match input {
            Ok((status, body)) => {
                parse(*status, body, &secrets).map_err(|e| Self::backend_error(name, e))
            }
            Err(e) => Err(Self::transport_error(name, e, &secrets)),
        }
    }
}

/// What the service grants: exclusive locks, read-write locks (shared
/// holds) and semaphores (permits), each name in one object.
const KINDS: &[KindFamily] = &[
    KindFamily::Exclusive,
    KindFamily::Shared,
    KindFamily::Permits,
];

impl LeaseProtocol for Durable {
    type Req = Req;

    const KINDS: &'static [KindFamily] = KINDS;

    fn validity(ttl: u64) -> Option<u64> {
        codec::lease_validity(ttl)
    }

    /// Sends (or re-sends) acquire `op`'s poll.
    fn attempt(&mut self, core: &mut Core, now: Millis, op: OpId) {
        if let Some(a) = core.acquires.remove(&op) {
            self.poll(core, now, op, a);
        }
    }

    fn send_extend(
        &mut self,
        core: &mut Core,
        now: Millis,
        lock: LockId,
        ttl: u64,
        op: Option<OpId>,
    ) -> Option<RequestId> {
        let h = core.locks.get_mut(&lock)?;
        // The service sets the lease to `ttl` from the moment the extend
        // arrives: a shorter TTL may shorten it, whatever comes back (or
        // not). Trust the lock no longer than the new lease from now.
        let bound = codec::lease_validity(ttl).map(|v| now.saturating_add(v));
        if let Some(bound) = bound.filter(|b| *b < h.expires_at) {
            h.expires_at = bound;
            core.rt.timers.set(lease::Timer::Expiry(lock), bound);
        }
        let h = core.locks.get(&lock)?;
        let body = codec::extend_body(&h.owner, h.token, ttl);
        let name = h.name.clone();
        let timeout = self.cfg.request_timeout_ms;
        let req = lease::Req::Extend(Extend {
            op,
            lock,
            ttl,
            sent_at: now,
        });
        Some(self.send(core, now, req, (ApiOp::Extend, &name), body, timeout))
    }

    fn send_release(
        &mut self,
        core: &mut Core,
        now: Millis,
        h: &Held,
        op: Option<OpId>,
        lock: Option<Held>,
    ) {
        let req = Req::Release {
            op,
            lock,
            abort: None,
        };
        self.release_request(core, now, (&h.name, &h.owner), h.token, req);
    }

    fn read_extend(
        &self,
        core: &Core,
        name: &str,
        _owner: &str,
        ttl: u64,
        input: &Answer,
    ) -> Result<Option<Option<u64>>, LockError> {
        let granted = self.read(core, (name, ""), input, codec::parse_extend)?;
        Ok(granted.map(|g| codec::lease_validity(g.min(ttl))))
    }

    fn answer(&mut self, core: &mut Core, now: Millis, owner: Req, input: Answer) {
        self.dispatch(core, now, owner, input);
    }

    fn resume(
        &mut self,
        core: &mut Core,
        now: Millis,
        handle: LockHandle,
    ) -> Result<OpId, LockError> {
        check_handle(BACKEND, BackendKind::DurableObject, KINDS, &handle)?;
        let op = core.rt.out.op_id();
        let body = codec::owner_body(&handle.owner, handle.fencing_token);
        let name = handle.name.clone();
        let req = Req::Resume {
            op,
            handle,
            sent_at: now,
        };
        self.send_own(core, now, req, (ApiOp::Resume, &name), body);
        Ok(op)
    }

    fn inspect(&mut self, core: &mut Core, now: Millis, op: OpId, name: String) {
        let req = Req::Inspect {
            op,
            name: name.clone(),
        };
        self.send_own(core, now, req, (ApiOp::Inspect, &name), "{}".into());
    }

    /// The waiting request ends now, and the acquire leaves the queue.
    fn give_up(
        &mut self,
        core: &mut Core,
        now: Millis,
        _op: OpId,
        a: Acquiring,
        aborted: Option<OpId>,
    ) {
        if let Some(r) = a.request {
            core.rt.cancel(r);
        }
        self.leave(core, now, aborted, a);
    }
}
