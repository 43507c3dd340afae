//! The `d1` [`LockMachine`]: one batch per step (see the module docs of
//! `d1`); its state, batches and user operations (the answers in `answers`).

mod answers;

use super::codec::{self, AcquireAnswer, AnswerError, Param};
use super::{sql, D1Config};
use crate::core::names::{validate_name, validate_ttl};
use crate::core::operation::unserved;
use crate::core::runtime::{Runtime, VecMap};
use crate::core::*;

/// Random bytes of an owner (32 hex characters).
const OWNER_BYTES: usize = 16;

/// Names of locks that ended, kept for messages (bounded).
const ENDED_NAMES_KEPT: usize = 1024;

const BACKEND: &str = "d1";

/// Reads one kind of answer (`codec::parse_*`).
type Parser<T> = fn(u16, &[u8], &[&str]) -> Result<T, AnswerError>;

type Answer = Result<(u16, Vec<u8>), TransportError>;

/// Who a batch in flight belongs to.
enum Req {
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

impl Req {
    fn op(&self) -> Option<OpId> {
        match self {
            Req::Acquire { op, .. } | Req::Resume { op, .. } | Req::Inspect { op, .. } => Some(*op),
            Req::Release { op, .. } | Req::Extend { op, .. } | Req::Leave { op, .. } => *op,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Timer {
    /// A waiting acquire's next attempt.
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
    deadline: Option<Millis>,
    /// The attempt in flight, if any (none while pausing).
    request: Option<RequestId>,
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

/// A lock this machine holds.
#[derive(Clone)]
struct Held {
    id: LockId,
    name: String,
    owner: String,
    token: u64,
    ttl: u64,
    expires_at: Millis,
    renew: bool,
    renewal: Option<RequestId>,
    last_error: Option<String>,
}

/// The `d1` backend as a sans-IO [`LockMachine`].
pub struct D1Machine {
    cfg: D1Config,
    entropy: Box<dyn Entropy + Send>,
    rt: Runtime<Req, Timer>,
    acquires: VecMap<OpId, Acquiring>,
    locks: VecMap<LockId, Held>,
    ended: VecMap<LockId, String>,
    abandoned: VecMap<OpId, Abandoned>,
}

impl std::fmt::Debug for D1Machine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("D1Machine")
            .field("cfg", &self.cfg)
            .field("acquires", &self.acquires.len())
            .field("locks", &self.locks.len())
            .finish()
    }
}

fn check_name(name: &str) -> Result<(), LockError> {
    validate_name(name)?;
    if name.chars().any(char::is_control) {
        return Err(LockError::invalid(
            "a d1 lock name must not contain control characters",
        ));
    }
    Ok(())
}

fn is_owner(s: &str) -> bool {
    (16..=64).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn check_ttl(ttl: u64) -> Result<(), LockError> {
    validate_ttl("ttl_ms", ttl)?;
    if codec::lease_validity(ttl).is_none() {
        return Err(LockError::invalid(format!(
            "ttl_ms of {ttl} ms leaves no validity after the clock-drift allowance"
        )));
    }
    Ok(())
}

fn text(s: &str) -> Param {
    Param::Text(s.to_string())
}

impl D1Machine {
    /// Validates `cfg` and builds the machine. Nothing is sent before the
    /// first operation.
    pub fn new(cfg: D1Config, entropy: Box<dyn Entropy + Send>) -> Result<Self, LockError> {
        Ok(D1Machine {
            cfg: cfg.validated()?,
            entropy,
            rt: Runtime::default(),
            acquires: VecMap::new(),
            locks: VecMap::new(),
            ended: VecMap::new(),
            abandoned: VecMap::new(),
        })
    }

    // ---- sending -----------------------------------------------------------

    fn send(&mut self, now: Millis, owner: Req, statements: &[(String, Vec<Param>)]) -> RequestId {
        let body = codec::batch_body(&self.cfg.table, statements);
        let (binding, timeout) = (&self.cfg.binding, self.cfg.request_timeout_ms);
        let sent = self.rt.send(now, owner, |id| {
            Ok::<_, std::convert::Infallible>(codec::request(id, binding, body, timeout))
        });
        match sent {
            Ok(id) => id,
            Err(never) => match never {},
        }
    }

    /// Sends acquire `op`'s next attempt.
    fn attempt(&mut self, now: Millis, op: OpId) {
        let Some(a) = self.acquires.get(&op) else {
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
        if let Some(a) = self.acquires.get_mut(&op) {
            a.request = Some(id);
        }
    }

    fn send_release(&mut self, now: Millis, name: &str, owner: &str, token: u64, req: Req) {
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

    fn send_extend(
        &mut self,
        now: Millis,
        lock: LockId,
        ttl: u64,
        op: Option<OpId>,
    ) -> Option<RequestId> {
        let h = self.locks.get(&lock)?;
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

    // ---- errors ------------------------------------------------------------

    fn read<T>(
        &self,
        name: &str,
        owner: &str,
        input: &Answer,
        parse: Parser<T>,
    ) -> Result<T, LockError> {
        match input {
            Ok((status, body)) => {
                let mut secrets: Vec<&str> =
                    self.locks.values().map(|h| h.owner.as_str()).collect();
                secrets.extend(self.acquires.values().map(|a| a.owner.as_str()));
                secrets.push(owner);
                secrets.retain(|s| !s.is_empty());
                parse(*status, body, &secrets).map_err(|e| LockError::Backend {
                    backend: BACKEND,
                    name: name.to_string(),
                    status: e.status,
                    message: e.message,
                })
            }
            Err(e) => Err(LockError::Transport {
                backend: BACKEND,
                name: name.to_string(),
                message: e.to_string(),
            }),
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

    /// Forgets lock `id`, reports it lost, and (unless the database said it
    /// is not ours) releases whatever may still be ours.
    fn lose(&mut self, now: Millis, id: LockId, reason: LostReason) {
        let Some(h) = self.take_lock(id) else {
            return;
        };
        self.record_ended(id, &h.name);
        if reason != LostReason::KeyGone {
            let req = Req::Release {
                op: None,
                lock: None,
            };
            self.send_release(now, &h.name, &h.owner, h.token, req);
        }
        self.rt.out.lost(id, h.name, reason);
    }

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
        check_ttl(ttl)?;
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
        self.attempt(now, op);
        Ok(op)
    }

    fn start_resume(&mut self, now: Millis, handle: LockHandle) -> Result<OpId, LockError> {
        if handle.v != 1 {
            return Err(LockError::invalid(format!(
                "unsupported lock handle version {}",
                handle.v
            )));
        }
        if handle.backend != BackendKind::D1 {
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
        if handle.fencing_token == 0 || handle.fencing_token > codec::MAX_VERSION {
            return Err(LockError::invalid(
                "the handle's fencing token is out of range",
            ));
        }
        let op = self.rt.out.op_id();
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

impl LockMachine for D1Machine {
    fn backend(&self) -> BackendKind {
        BackendKind::D1
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
        self.rt.closing.check_open(BackendKind::D1)?;
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
                        let req = Req::Release {
                            op: Some(op),
                            lock: Some(h),
                        };
                        self.send_release(now, &name, &owner, token, req);
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
                    check_ttl(t)?;
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
                let st = [(sql::inspect(&self.cfg.table), vec![text(&name)])];
                self.send(now, Req::Inspect { op, name }, &st);
                Ok(op)
            }
            other => Err(unserved(BackendKind::D1, &other)),
        }
    }

    fn cancel(&mut self, _now: Millis, op: OpId) {
        let Some(a) = self.acquires.remove(&op) else {
            return;
        };
        self.rt.timers.clear(Timer::Poll(op));
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
        self.settle();
    }

    fn close(&mut self, now: Millis) -> OpId {
        let op = self.rt.out.op_id();
        if self.rt.closing.begin(op) {
            let closed = LockError::Closed { backend: BACKEND };
            let ops: Vec<OpId> = self.acquires.keys().copied().collect();
            for aop in ops {
                if let Some(a) = self.acquires.remove(&aop) {
                    self.rt.timers.clear(Timer::Poll(aop));
                    if a.request.is_some() {
                        let ab = Abandoned {
                            acquiring: a,
                            op: None,
                        };
                        self.abandoned.insert(aop, ab);
                    }
                    self.rt.out.fail(aop, closed.clone());
                }
            }
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
                Timer::Poll(op) => self.attempt(now, op),
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
