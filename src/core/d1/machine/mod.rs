//! The `d1` [`LockMachine`](crate::core::LockMachine): one batch per step
//! (see the module docs of `d1`). The machine is the shared
//! [`LeaseMachine`](crate::core::lease::LeaseMachine) (lease table, timers,
//! renewals, `close`, the extend answers) over [`D1`], d1's own part: the
//! SQL batches (here), how a waiting acquire proceeds (`acquire`: polling
//! after the holder's PTTL with jitter, and an acquire given up mid-attempt
//! freeing the row only after that attempt's answer) and what the other
//! answers do (`answers`).

mod acquire;
mod answers;

use super::codec::{self, AnswerError, Param};
use super::{sql, D1Config};
use crate::core::error::sanitize_detail;
use crate::core::lease::{
    self, check_handle, Acquiring, Answer, Extend, Held, LeaseMachine, LeaseProtocol, LeaseReq,
};
use crate::core::runtime::VecMap;
use crate::core::{
    BackendKind, Capabilities, Entropy, KindFamily, LockError, LockHandle, LockId, Millis, OpId,
    RequestId,
};

const BACKEND: &str = "d1";

/// Reads one kind of answer (`codec::parse_*`).
type Parser<T> = fn(u16, &[u8], &[&str]) -> Result<T, AnswerError>;

/// The state the machine lends the backend (see [`lease::Core`]).
type Core = lease::Core<D1>;

/// Who a batch in flight belongs to (besides extends, which the shared
/// machine keeps).
pub(crate) enum Req {
    /// An attempt of an acquire.
    Acquire { op: OpId, sent_at: Millis },
    /// A release of a held lock (`lock`, for the user's `op`), or in the
    /// background (`lock: None`).
    Release {
        op: Option<OpId>,
        lock: Option<Held>,
    },
    /// An acquire that ended without knowing whether its last attempt was
    /// granted (cancelled, closed, failed) frees the row if its owner has
    /// it. `op`: the cancelled acquire, answered `Aborted` after.
    Leave { op: Option<OpId>, name: String },
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
            Req::Acquire { op, .. } | Req::Resume { op, .. } | Req::Inspect { op, .. } => Some(*op),
            Req::Release { op, .. } | Req::Leave { op, .. } => *op,
        }
    }

    fn ends_on_close(&self) -> bool {
        matches!(self, Req::Resume { .. } | Req::Inspect { .. })
    }
}

/// An acquire given up (cancelled, or ended by `close`) while its attempt
/// was in flight. The attempt is left to finish and the row is freed after
/// its answer (or its timeout) if it may have become ours: a `leave` sent
/// beside it may run first (two requests are not ordered), and the take
/// committed after it would hold the row for a whole lease (the d1
/// simulation, tests/sim_d1.rs, found it on a calm network).
struct Abandoned {
    acquiring: Acquiring,
    /// The user's cancelled acquire, answered `Aborted` at the end (`None`:
    /// closed, already failed).
    op: Option<OpId>,
}

/// d1's part of the machine: its options, and the acquires given up while
/// their attempt was in flight.
pub(crate) struct D1 {
    cfg: D1Config,
    abandoned: VecMap<OpId, Abandoned>,
}

impl std::fmt::Debug for D1 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("D1")
            .field("cfg", &self.cfg)
            .field("abandoned", &self.abandoned.len())
            .finish()
    }
}

/// The `d1` backend as a sans-IO [`LockMachine`](crate::core::LockMachine).
pub(crate) type D1Machine = LeaseMachine<D1>;

fn text(s: &str) -> Param {
    Param::Text(s.to_string())
}

impl D1Machine {
    /// Validates `cfg` and builds the machine. Nothing is sent before the
    /// first operation.
    pub(crate) fn new(cfg: D1Config, entropy: Box<dyn Entropy + Send>) -> Result<Self, LockError> {
        let cfg = cfg.validated()?;
        let (ttl, renew) = (cfg.ttl_ms, cfg.auto_extend);
        let d1 = D1 {
            cfg,
            abandoned: VecMap::new(),
        };
        Ok(LeaseMachine::with(
            d1,
            (BACKEND, BackendKind::D1),
            ttl,
            renew,
            entropy,
        ))
    }
}

impl D1 {
    // ---- sending -----------------------------------------------------------

    fn send(
        &self,
        core: &mut Core,
        now: Millis,
        owner: lease::Req<Req>,
        statements: &[(String, Vec<Param>)],
    ) -> RequestId {
        let body = codec::batch_body(&self.cfg.table, statements);
        let (binding, timeout) = (&self.cfg.binding, self.cfg.request_timeout_ms);
        let sent = core.rt.send(now, owner, |id| {
            Ok::<_, std::convert::Infallible>(codec::request(id, binding, body, timeout))
        });
        match sent {
            Ok(id) => id,
            Err(never) => match never {},
        }
    }

    /// Sends one of d1's own batches.
    fn send_own(
        &self,
        core: &mut Core,
        now: Millis,
        req: Req,
        statements: &[(String, Vec<Param>)],
    ) -> RequestId {
        self.send(core, now, lease::Req::Own(req), statements)
    }

    fn release_request(
        &self,
        core: &mut Core,
        now: Millis,
        (name, owner): (&str, &str),
        token: u64,
        req: Req,
    ) {
        let st = [(
            sql::release(&self.cfg.table),
            vec![text(name), text(owner), Param::Int(token)],
        )];
        self.send_own(core, now, req, &st);
    }

    // ---- errors ------------------------------------------------------------

    fn read<T>(
        &self,
        core: &Core,
        (name, owner): (&str, &str),
        input: &Answer,
        parse: Parser<T>,
    ) -> Result<T, LockError> {
        let mut secrets: Vec<&str> = core.owners().collect();
        secrets.push(owner);
        secrets.retain(|s| !s.is_empty());
        match input {
            Ok((status, body)) => parse(*status, body, &secrets).map_err(|e| LockError::Backend {
                backend: BACKEND,
                name: name.to_string(),
                status: e.status,
                message: e.message,
            }),
            // A driver's transport message may quote what it sent (an owner).
            Err(e) => Err(LockError::Transport {
                backend: BACKEND,
                name: name.to_string(),
                message: sanitize_detail(&e.to_string(), &secrets),
            }),
        }
    }
}

impl LeaseProtocol for D1 {
    type Req = Req;

    const KINDS: &'static [KindFamily] = Capabilities::EXCLUSIVE_ONLY;

    fn validity(ttl: u64) -> Option<u64> {
        codec::lease_validity(ttl)
    }

    /// Sends acquire `op`'s next attempt.
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
        let h = core.locks.get(&lock)?;
        let st = [(
            sql::extend(&self.cfg.table),
            vec![
                text(&h.name),
                text(&h.owner),
                Param::Int(h.token),
                Param::Int(ttl),
            ],
        )];
        let req = lease::Req::Extend(Extend {
            op,
            lock,
            ttl,
            sent_at: now,
        });
        Some(self.send(core, now, req, &st))
    }

    fn send_release(
        &mut self,
        core: &mut Core,
        now: Millis,
        h: &Held,
        op: Option<OpId>,
        lock: Option<Held>,
    ) {
        let req = Req::Release { op, lock };
        self.release_request(core, now, (&h.name, &h.owner), h.token, req);
    }

    fn read_extend(
        &self,
        core: &Core,
        name: &str,
        owner: &str,
        ttl: u64,
        input: &Answer,
    ) -> Result<Option<Option<u64>>, LockError> {
        let ours = self.read(core, (name, owner), input, codec::parse_extend)?;
        Ok(ours.then(|| codec::lease_validity(ttl)))
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
        check_handle(
            BACKEND,
            BackendKind::D1,
            Capabilities::EXCLUSIVE_ONLY,
            &handle,
        )?;
        if handle.fencing_token == 0 || handle.fencing_token > codec::MAX_VERSION {
            return Err(LockError::invalid(
                "the handle's fencing token is out of range",
            ));
        }
        let op = core.rt.out.op_id();
        let st = [(
            sql::resume(&self.cfg.table),
            vec![
                text(&handle.name),
                text(&handle.owner),
                Param::Int(handle.fencing_token),
            ],
        )];
        let req = Req::Resume {
            op,
            handle,
            sent_at: now,
        };
        self.send_own(core, now, req, &st);
        Ok(op)
    }

    fn inspect(&mut self, core: &mut Core, now: Millis, op: OpId, name: String) {
        let st = [(sql::inspect(&self.cfg.table), vec![text(&name)])];
        self.send_own(core, now, Req::Inspect { op, name }, &st);
    }

    /// An attempt in flight may commit: the row is freed after its answer
    /// (see [`Abandoned`]). Pausing after a refusal, nothing of it is in
    /// the table: a cancelled acquire ends `Aborted` at once.
    fn give_up(
        &mut self,
        core: &mut Core,
        _now: Millis,
        op: OpId,
        a: Acquiring,
        aborted: Option<OpId>,
    ) {
        if a.request.is_some() {
            let ab = Abandoned {
                acquiring: a,
                op: aborted,
            };
            self.abandoned.insert(op, ab);
        } else {
            self.on_leave(core, aborted, a.name);
        }
    }
}
