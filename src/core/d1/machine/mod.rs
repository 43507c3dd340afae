//! The `d1` [`LockMachine`]: one batch per step (see the module docs of
//! `d1`); its batches and answers (in `answers`). The lease table, timers,
//! renewals, `close` and the answers both lease backends share live in
//! `crate::core::lease`; what is here is d1's own: the SQL batches, and
//! how a waiting acquire proceeds (polling after the holder's PTTL with
//! jitter, and an acquire given up mid-attempt freeing the row only after
//! that attempt's answer).

mod answers;

use super::codec::{self, AcquireAnswer, AnswerError, Param};
use super::{sql, D1Config};
use crate::core::error::sanitize_detail;
use crate::core::lease::{
    check_handle, Acquiring, Answer, Held, LeaseCore, LeaseProtocol, LeaseReq, Timer,
};
use crate::core::operation::unserved;
use crate::core::runtime::VecMap;
use crate::core::*;

const BACKEND: &str = "d1";

/// Reads one kind of answer (`codec::parse_*`).
type Parser<T> = fn(u16, &[u8], &[&str]) -> Result<T, AnswerError>;

/// Who a batch in flight belongs to.
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
            Req::Acquire { op, .. } | Req::Resume { op, .. } | Req::Inspect { op, .. } => Some(*op),
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

/// The `d1` backend as a sans-IO [`LockMachine`].
pub struct D1Machine {
    cfg: D1Config,
    core: LeaseCore<Req>,
    abandoned: VecMap<OpId, Abandoned>,
}

impl std::fmt::Debug for D1Machine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("D1Machine")
            .field("cfg", &self.cfg)
            .field("acquires", &self.core.acquires.len())
            .field("locks", &self.core.locks.len())
            .finish()
    }
}

fn check_name(name: &str) -> Result<(), LockError> {
    crate::core::lease::check_name(BACKEND, name)
}

fn text(s: &str) -> Param {
    Param::Text(s.to_string())
}

impl D1Machine {
    /// Validates `cfg` and builds the machine. Nothing is sent before the
    /// first operation.
    pub fn new(cfg: D1Config, entropy: Box<dyn Entropy + Send>) -> Result<Self, LockError> {
        let cfg = cfg.validated()?;
        let core = LeaseCore::new(
            BACKEND,
            BackendKind::D1,
            cfg.ttl_ms,
            cfg.auto_extend,
            entropy,
        );
        Ok(D1Machine {
            cfg,
            core,
            abandoned: VecMap::new(),
        })
    }

    // ---- sending -----------------------------------------------------------

    fn send(&mut self, now: Millis, owner: Req, statements: &[(String, Vec<Param>)]) -> RequestId {
        let body = codec::batch_body(&self.cfg.table, statements);
        let (binding, timeout) = (&self.cfg.binding, self.cfg.request_timeout_ms);
        let sent = self.core.rt.send(now, owner, |id| {
            Ok::<_, std::convert::Infallible>(codec::request(id, binding, body, timeout))
        });
        match sent {
            Ok(id) => id,
            Err(never) => match never {},
        }
    }

    fn release_request(&mut self, now: Millis, name: &str, owner: &str, token: u64, req: Req) {
        let st = [(
            sql::release(&self.cfg.table),
            vec![text(name), text(owner), Param::Int(token)],
        )];
        self.send(now, req, &st);
    }

    fn leave(&mut self, now: Millis, op: Option<OpId>, a: Acquiring) {
        let st = [(
            sql::leave(&self.cfg.table),
            vec![text(&a.name), text(&a.owner)],
        )];
        self.send(now, Req::Leave { op, name: a.name }, &st);
    }

    // ---- errors ------------------------------------------------------------

    fn read<T>(
        &self,
        name: &str,
        owner: &str,
        input: &Answer,
        parse: Parser<T>,
    ) -> Result<T, LockError> {
        let mut secrets: Vec<&str> = self.core.owners().collect();
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

    // ---- user operations ----------------------------------------------------

    fn start_resume(&mut self, now: Millis, handle: LockHandle) -> Result<OpId, LockError> {
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
        let op = self.core.rt.out.op_id();
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
        self.send(now, req, &st);
        Ok(op)
    }
}

impl LeaseProtocol for D1Machine {
    type Req = Req;

    fn core(&mut self) -> &mut LeaseCore<Req> {
        &mut self.core
    }

    /// Sends acquire `op`'s next attempt.
    fn attempt(&mut self, now: Millis, op: OpId) {
        let Some(a) = self.core.acquires.get(&op) else {
            return;
        };
        let t = &self.cfg.table;
        let statements = [
            (
                sql::take(t),
                vec![text(&a.name), text(&a.owner), Param::Int(a.ttl)],
            ),
            (sql::probe(t), vec![text(&a.name), text(&a.owner)]),
        ];
        let id = self.send(now, Req::Acquire { op, sent_at: now }, &statements);
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
        let h = self.core.locks.get(&lock)?;
        let st = [(
            sql::extend(&self.cfg.table),
            vec![
                text(&h.name),
                text(&h.owner),
                Param::Int(h.token),
                Param::Int(ttl),
            ],
        )];
        let req = Req::Extend {
            op,
            lock,
            ttl,
            sent_at: now,
        };
        Some(self.send(now, req, &st))
    }

    fn send_release(&mut self, now: Millis, h: &Held, op: Option<OpId>, lock: Option<Held>) {
        let req = Req::Release { op, lock };
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
        owner: &str,
        ttl: u64,
        input: &Answer,
    ) -> Result<Option<Option<u64>>, LockError> {
        let ours = self.read(name, owner, input, codec::parse_extend)?;
        Ok(ours.then(|| codec::lease_validity(ttl)))
    }

    /// An attempt in flight may commit: the row is freed after its answer.
    fn abandon_on_close(&mut self, _now: Millis, op: OpId, a: Acquiring) {
        if a.request.is_some() {
            let ab = Abandoned {
                acquiring: a,
                op: None,
            };
            self.abandoned.insert(op, ab);
        }
    }
}

impl LockMachine for D1Machine {
    crate::core::lease::lease_lock_machine_steps!();

    fn start_operation(&mut self, now: Millis, op: Operation) -> Result<OpId, LockError> {
        self.core.rt.closing.check_open(BackendKind::D1)?;
        match op {
            Operation::Acquire {
                name,
                kind: LockKind::Exclusive,
                options,
            } => self.lease_acquire(now, name, LockKind::Exclusive, options),
            Operation::Release { lock } => Ok(self.lease_release(now, lock)),
            Operation::Extend { lock, ttl_ms } => self.lease_extend(now, lock, ttl_ms),
            Operation::Resume { handle } => self.start_resume(now, handle),
            Operation::Inspect { name } => {
                check_name(&name)?;
                let op = self.core.rt.out.op_id();
                let st = [(sql::inspect(&self.cfg.table), vec![text(&name)])];
                self.send(now, Req::Inspect { op, name }, &st);
                Ok(op)
            }
            other => Err(unserved(BackendKind::D1, &other)),
        }
    }

    fn cancel(&mut self, _now: Millis, op: OpId) {
        let Some(a) = self.core.acquires.remove(&op) else {
            return;
        };
        self.core.rt.timers.clear(Timer::Poll(op));
        match a.request {
            // Its attempt may commit: free the row after its answer.
            Some(_) => {
                let ab = Abandoned {
                    acquiring: a,
                    op: Some(op),
                };
                self.abandoned.insert(op, ab);
            }
            // Pausing after a refusal: nothing of it is in the table.
            None => self.on_leave(Some(op), a.name),
        }
        self.core.settle();
    }
}
