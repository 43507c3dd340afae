//! Observe: read who leads a name, then watch the name's prefix until that
//! changes or the wait bound passes (the recipe is in `election.rs`; a
//! leader query, and an observe that may not wait, is `leader.rs`).

use super::super::election::{leader_read_body, leadership_of, malformed, read_leadership};
use super::super::{
    EtcdMachine, Failure, Purpose, TimerKey, BACKEND, WATCH_REFRESH_MS, WATCH_RETRY_MS,
};
use super::{LeaderOp, OpKind};
use crate::core::etcd::gateway as gw;
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

impl EtcdMachine {
    /// The name an observe watches.
    pub(in super::super) fn observe_name(o: &Observe) -> &str {
        &o.name
    }

    pub(in super::super) fn is_observe(&self, op: OpId) -> bool {
        matches!(self.ops.get(&op).map(|o| &o.kind), Some(OpKind::Observe(_)))
    }

    fn observe_mut(&mut self, op: OpId) -> Option<&mut Observe> {
        match self.ops.get_mut(&op).map(|o| &mut o.kind) {
            Some(OpKind::Observe(o)) => Some(o),
            _ => None,
        }
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
        let op = self.new_op(OpKind::Observe(Box::new(Observe {
            name: name.to_string(),
            lock_prefix: self.lock_prefix(name),
            known,
            wait,
            deadline: wait.deadline(now),
            oldest: None,
            current: None,
            reading: false,
        })));
        if let Some(deadline) = self.observe_mut(op).and_then(|o| o.deadline) {
            self.rt
                .timers
                .set(TimerKey::ObserveDeadline(op), deadline.max(now));
        }
        self.send_leader_read(now, op, name);
        Ok(op)
    }

    fn send_leader_read(&mut self, now: Millis, op: OpId, name: &str) {
        let body = leader_read_body(self, name);
        let req = self.send(now, Purpose::Op(op), "/v3/kv/range", body, false);
        if let Some(o) = self.ops.get_mut(&op) {
            o.req = Some(req);
        }
        if let Some(ob) = self.observe_mut(op) {
            ob.reading = true;
        }
    }

    pub(in super::super) fn on_observe_reply(
        &mut self,
        now: Millis,
        op: OpId,
        result: Result<(u16, Vec<u8>), Failure>,
    ) {
        let name = match self.ops.get(&op).map(|o| &o.kind) {
            Some(OpKind::Observe(o)) if o.reading => o.name.clone(),
            Some(OpKind::Observe(_)) => {
                // A watch answered as a whole request: it broke.
                return self.observe_retry_at(op, now + WATCH_RETRY_MS);
            }
            _ => return,
        };
        let (r, state) = match read_leadership(self, &name, result) {
            Ok(x) => x,
            Err(e) => return self.end_election_op(op, Err(e)),
        };
        let Some(ob) = self.observe_mut(op) else {
            return;
        };
        ob.reading = false;
        ob.oldest = r.kvs.first().map(|kv| (kv.key.clone(), kv.create_revision));
        ob.current = Some(state.clone());
        let expired = ob.deadline.is_some_and(|d| now >= d);
        if state != ob.known || ob.wait == Wait::Try || expired {
            return self.end_election_op(op, Ok(state));
        }
        if r.header.revision <= 0 {
            return self.end_election_op(op, Err(malformed(&name, "range reply without revision")));
        }
        let body = gw::watch_prefix(&ob.lock_prefix, r.header.revision.saturating_add(1));
        let req = self.send(now, Purpose::Op(op), "/v3/watch", body, true);
        if let Some(o) = self.ops.get_mut(&op) {
            o.req = Some(req);
        }
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
            let Some(ob) = self.observe_mut(op) else {
                return;
            };
            let (name, known) = (ob.name.clone(), ob.known.clone());
            let (mut oldest, mut current) = (ob.oldest.clone(), ob.current.clone());
            let mut next = None;
            for e in &w.events {
                let delete = e.kind.as_deref() == Some("DELETE");
                let derived = match &oldest {
                    // The leader (or the lock ahead of every campaign) went:
                    // who is next is not in the event.
                    Some((key, _)) if delete && e.kv.key == *key => None,
                    Some(_) if delete => continue,
                    // A put on the oldest key: a proclaim.
                    Some((key, rev)) if e.kv.key == *key && e.kv.create_revision == *rev => {
                        Some(&e.kv)
                    }
                    // Our oldest key recreated: we missed its deletion.
                    Some((key, _)) if e.kv.key == *key => None,
                    // A waiter joining, or a permit's slot claim.
                    Some(_) => continue,
                    None if delete => continue,
                    // The name had no key: this one is the oldest now.
                    None => Some(&e.kv),
                };
                let Some(kv) = derived else {
                    next = Some(None);
                    break;
                };
                match leadership_of(Some(kv)) {
                    Ok(state) => {
                        oldest = Some((kv.key.clone(), kv.create_revision));
                        current = Some(state.clone());
                        if state != known {
                            next = Some(Some(Ok(state)));
                            break;
                        }
                    }
                    Err(m) => {
                        next = Some(Some(Err(malformed(&name, &m))));
                        break;
                    }
                }
            }
            if let Some(ob) = self.observe_mut(op) {
                (ob.oldest, ob.current) = (oldest, current);
            }
            match next {
                None => {}
                // Read again: the watch is replaced by a new one after it.
                Some(None) => {
                    self.cancel_request(Some(id));
                    if let Some(o) = self.ops.get_mut(&op) {
                        o.req = None;
                    }
                    return self.send_leader_read(now, op, &name);
                }
                Some(Some(result)) => return self.end_election_op(op, result),
            }
        }
    }

    pub(in super::super) fn observe_retry_at(&mut self, op: OpId, at: Millis) {
        if self.is_observe(op) {
            self.rt.timers.set(TimerKey::ObserveRetry(op), at);
        }
    }

    pub(in super::super) fn on_observe_retry(&mut self, now: Millis, op: OpId) {
        let Some(ob) = self.observe_mut(op) else {
            return;
        };
        if ob.reading {
            return;
        }
        let name = ob.name.clone();
        // A watch due for its refresh is replaced, not doubled.
        let req = self.ops.get_mut(&op).and_then(|o| o.req.take());
        self.cancel_request(req);
        self.send_leader_read(now, op, &name);
    }

    pub(in super::super) fn on_observe_deadline(&mut self, _now: Millis, op: OpId) {
        let Some(ob) = self.observe_mut(op) else {
            return;
        };
        // Before the first read answered, that answer completes the observe.
        if let Some(state) = ob.current.clone() {
            self.end_election_op(op, Ok(state));
        }
    }

    pub(in super::super) fn cancel_observe(&mut self, op: OpId) {
        let Some(ob) = self.observe_mut(op) else {
            return;
        };
        let name = ob.name.clone();
        self.end_election_op(
            op,
            Err(LockError::Aborted {
                backend: BACKEND,
                name,
            }),
        );
    }

    /// Ends an observe: its request, its timers, its report.
    fn end_election_op(&mut self, op: OpId, result: Result<Option<Leadership>, LockError>) {
        let Some(o) = self.ops.remove(&op) else {
            return;
        };
        self.rt.timers.clear(TimerKey::ObserveDeadline(op));
        self.rt.timers.clear(TimerKey::ObserveRetry(op));
        self.cancel_request(o.req);
        self.rt.out.complete(op, result.map(Outcome::Leader));
    }
}
