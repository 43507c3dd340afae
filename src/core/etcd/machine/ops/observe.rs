//! Observe: read who leads a name, then watch the name's prefix until that
//! changes or the wait bound passes (the recipe is in `election.rs`; a
//! leader query, and an observe that may not wait, is `leader.rs`).
//!
//! [`Observe`] is a state taken by value: its read's answer is a `step`,
//! and the machine steps it with its watch stream's events, its timers and
//! a cancel too (`EtcdMachine::with_observe`).

use super::super::election::{leader_read_body, leadership_of, malformed, read_leadership};
use super::super::{EtcdMachine, TimerKey, BACKEND, WATCH_REFRESH_MS, WATCH_RETRY_MS};
use super::{LeaderOp, Next, Op, OpKind, Reply};
use crate::core::etcd::gateway::{self as gw, WatchEvent};
use crate::core::names::validate_name;
use crate::core::{Leadership, LockError, Millis, OpId, Outcome, RequestId, Wait};

/// An observe in flight (a campaign is an acquire; proclaim and a leader
/// query are `ops/proclaim.rs` and `ops/leader.rs`).
pub(in super::super) struct Observe {
    name: String,
    lock_prefix: Vec<u8>,
    known: Option<Leadership>,
    wait: Wait,
    deadline: Option<Millis>,
    /// The oldest key of the name (key, create revision) as last read or
    /// derived from the watch; `None`: the name had no key.
    oldest: Option<(Vec<u8>, i64)>,
    /// The state as last read or derived; `None` until the first read.
    current: Option<Option<Leadership>>,
    /// The op's request is a read (else a watch, or nothing while a retry
    /// is pending).
    reading: bool,
}

/// What a watch message's events show.
enum Seen {
    /// The state is still the caller's `known`.
    Known,
    /// The oldest key went: who leads now is not in the events.
    Unclear,
    /// The state to answer with (or a hostile reply's error).
    Changed(Result<Option<Leadership>, LockError>),
}

impl From<Observe> for OpKind {
    fn from(s: Observe) -> OpKind {
        OpKind::Observe(Box::new(s))
    }
}

impl EtcdMachine {
    /// The name an observe watches.
    pub(in super::super) fn observe_name(o: &Observe) -> &str {
        &o.name
    }

    pub(in super::super) fn is_observe(&self, op: OpId) -> bool {
        matches!(self.ops.get(&op).map(|o| &o.kind), Some(OpKind::Observe(_)))
    }

    /// Takes observe `op` (with its request in flight) out of the table,
    /// steps it with `f`, and follows what the step returns; whether the
    /// state is kept as it was (no new request, not ended). Nothing (and
    /// `false`) if `op` is no observe (any more).
    fn with_observe(
        &mut self,
        now: Millis,
        op: OpId,
        f: impl FnOnce(Observe, &mut EtcdMachine, Option<RequestId>) -> Next,
    ) -> bool {
        if !self.is_observe(op) {
            return false;
        }
        let Some(Op {
            req,
            kind: OpKind::Observe(ob),
        }) = self.ops.remove(&op)
        else {
            return false;
        };
        let next = f(*ob, self, req);
        let kept = matches!(next, Next::Keep { .. });
        self.follow(now, op, next);
        kept
    }

    /// `Leader` (`observe: None`) or `Observe`.
    pub(in super::super) fn start_leader(
        &mut self,
        now: Millis,
        name: &str,
        observe: Option<(Option<Leadership>, Wait)>,
    ) -> Result<OpId, LockError> {
        self.check_open()?;
        validate_name(name)?;
        let (known, wait) = match observe {
            // An observe that may not wait is a leader query.
            None | Some((_, Wait::Try)) => {
                let op = self.rt.out.op_id();
                let next = LeaderOp::start(self, name);
                self.follow(now, op, next);
                return Ok(op);
            }
            Some(observe) => observe,
        };
        let op = self.rt.out.op_id();
        let ob = Observe {
            name: name.to_string(),
            lock_prefix: self.lock_prefix(name),
            known,
            wait,
            deadline: wait.deadline(now),
            oldest: None,
            current: None,
            reading: false,
        };
        if let Some(deadline) = ob.deadline {
            self.rt
                .timers
                .set(TimerKey::ObserveDeadline(op), deadline.max(now));
        }
        let next = ob.read(self);
        self.follow(now, op, next);
        Ok(op)
    }

    /// Messages of an observe's watch stream.
    pub(in super::super) fn on_observe_messages(
        &mut self,
        now: Millis,
        id: RequestId,
        op: OpId,
        messages: Vec<Vec<u8>>,
    ) {
        for m in messages {
            let w = match gw::parse_watch_message(&m) {
                Ok(w) if !w.canceled && w.compact_revision <= 0 => w,
                // Broken, cancelled or compacted: read again and watch anew.
                _ => return self.watch_broken(now, id, op),
            };
            if w.created {
                self.rt.requests.keep_open(id);
                self.observe_retry_at(op, now + WATCH_REFRESH_MS);
            }
            let kept = self.with_observe(now, op, |ob, m, req| {
                ob.on_events(m, op, id, req, &w.events)
            });
            if !kept {
                return;
            }
        }
    }

    pub(in super::super) fn observe_retry_at(&mut self, op: OpId, at: Millis) {
        if self.is_observe(op) {
            self.rt.timers.set(TimerKey::ObserveRetry(op), at);
        }
    }

    pub(in super::super) fn on_observe_retry(&mut self, now: Millis, op: OpId) {
        self.with_observe(now, op, |ob, m, req| {
            if ob.reading {
                return Next::keep(ob, req);
            }
            // A watch due for its refresh is replaced, not doubled.
            m.cancel_request(req);
            ob.read(m)
        });
    }

    pub(in super::super) fn on_observe_deadline(&mut self, now: Millis, op: OpId) {
        self.with_observe(now, op, |ob, m, req| match ob.current.clone() {
            Some(state) => ob.end(m, op, req, Ok(state)),
            // Before the first read answered, that answer completes the observe.
            None => Next::keep(ob, req),
        });
    }

    pub(in super::super) fn cancel_observe(&mut self, now: Millis, op: OpId) {
        self.with_observe(now, op, |ob, m, req| {
            let aborted = LockError::Aborted {
                backend: BACKEND,
                name: ob.name.clone(),
            };
            ob.end(m, op, req, Err(aborted))
        });
    }
}

impl Observe {
    /// Reads who leads the name now.
    fn read(mut self, m: &EtcdMachine) -> Next {
        let body = leader_read_body(m, &self.name);
        self.reading = true;
        Next::send(self, "/v3/kv/range", body)
    }

    /// The answer to the observe's request: its read (a watch answered as
    /// a whole request broke).
    pub(in super::super) fn step(
        mut self,
        m: &mut EtcdMachine,
        now: Millis,
        op: OpId,
        reply: Reply,
    ) -> Next {
        if !self.reading {
            // A watch answered as a whole request: it broke.
            m.rt.timers
                .set(TimerKey::ObserveRetry(op), now + WATCH_RETRY_MS);
            return Next::keep(self, None);
        }
        let (r, state) = match read_leadership(m, &self.name, reply.result) {
            Ok(x) => x,
            Err(e) => return self.end(m, op, None, Err(e)),
        };
        self.reading = false;
        self.oldest = r.kvs.first().map(|kv| (kv.key.clone(), kv.create_revision));
        self.current = Some(state.clone());
        let expired = self.deadline.is_some_and(|d| now >= d);
        if state != self.known || self.wait == Wait::Try || expired {
            return self.end(m, op, None, Ok(state));
        }
        if r.header.revision <= 0 {
            let error = malformed(&self.name, "range reply without revision");
            return self.end(m, op, None, Err(error));
        }
        let body = gw::watch_prefix(&self.lock_prefix, r.header.revision.saturating_add(1));
        Next::watch(self, body)
    }

    /// Events of one watch message (`id`, the observe's request `req`):
    /// the state they show, if it differs from `known`; a read when who
    /// leads now is not in them.
    fn on_events(
        mut self,
        m: &mut EtcdMachine,
        op: OpId,
        id: RequestId,
        req: Option<RequestId>,
        events: &[WatchEvent],
    ) -> Next {
        match self.derive(events) {
            Seen::Known => Next::keep(self, req),
            // Read again: the watch is replaced by a new one after it.
            Seen::Unclear => {
                m.cancel_request(Some(id));
                self.read(m)
            }
            Seen::Changed(result) => self.end(m, op, req, result),
        }
    }

    /// Follows the oldest key through `events` (see [`Seen`]).
    fn derive(&mut self, events: &[WatchEvent]) -> Seen {
        for e in events {
            let delete = e.kind.as_deref() == Some("DELETE");
            let derived = match &self.oldest {
                // The leader (or the lock ahead of every campaign) went:
                // who is next is not in the event.
                Some((key, _)) if delete && e.kv.key == *key => None,
                Some(_) if delete => continue,
                // A put on the oldest key: a proclaim.
                Some((key, rev)) if e.kv.key == *key && e.kv.create_revision == *rev => Some(&e.kv),
                // Our oldest key recreated: we missed its deletion.
                Some((key, _)) if e.kv.key == *key => None,
                // A waiter joining, or a permit's slot claim.
                Some(_) => continue,
                None if delete => continue,
                // The name had no key: this one is the oldest now.
                None => Some(&e.kv),
            };
            let Some(kv) = derived else {
                return Seen::Unclear;
            };
            match leadership_of(Some(kv)) {
                Ok(state) => {
                    self.oldest = Some((kv.key.clone(), kv.create_revision));
                    self.current = Some(state.clone());
                    if state != self.known {
                        return Seen::Changed(Ok(state));
                    }
                }
                Err(message) => return Seen::Changed(Err(malformed(&self.name, &message))),
            }
        }
        Seen::Known
    }

    /// Ends the observe: its request, its timers, its report.
    fn end(
        self,
        m: &mut EtcdMachine,
        op: OpId,
        req: Option<RequestId>,
        result: Result<Option<Leadership>, LockError>,
    ) -> Next {
        m.rt.timers.clear(TimerKey::ObserveDeadline(op));
        m.rt.timers.clear(TimerKey::ObserveRetry(op));
        m.cancel_request(req);
        m.rt.out.complete(op, result.map(Outcome::Leader));
        Next::Done
    }
}
