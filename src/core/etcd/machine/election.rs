//! Leader election: campaign, proclaim, leader and observe.
//!
//! # Recipe
//!
//! A **campaign** is the exclusive lock's recipe unchanged (`acquire.rs`):
//! the key `P<lease hex>` under the name's prefix `P = <prefix>/<escaped
//! name>/`, on the client's session lease (renewed, checked and lost like
//! any lock's), created only if absent, queued FIFO by create revision,
//! each waiter watching the key directly ahead of it, cleaned up on
//! cancel, timeout and close. Only the key's *value* differs:
//!
//! ```text
//! l:<random hex>:<campaign value>
//! ```
//!
//! - The `l:` tag marks the key a leadership. An exclusive lock's value is
//!   bare random hex (never an `l`), a reader's `r:<random>` (`shared.rs`), a
//!   permit's `p<limit>:<random>` (`permits.rs`): no value of one kind
//!   decodes as another (the proptest in `election_tests.rs` checks it both
//!   ways). A campaign is thereby an ordinary writer for the other kinds: a
//!   semaphore's name refuses it, a reader queues behind it, and a campaign
//!   on a name held as an exclusive lock queues behind that lock exactly as
//!   another exclusive acquire would (one queue per name, whatever the kinds).
//! - The random part is the acquire's nonce: a key found with another value
//!   is a leftover of an earlier incarnation and never adopted.
//! - The campaign value follows the second `:` verbatim (any UTF-8, at most
//!   `MAX_CAMPAIGN_VALUE` bytes, checked before the machine sees it).
//!
//! FIFO (rather than "whoever writes first after the leader leaves") is what
//! the lock already guarantees: no thundering herd on a handoff (one watcher
//! per key), no starvation, and the leader is simply the oldest key.
//!
//! The leadership's **fencing token** is its key's create revision, as in
//! etcd's own `concurrency.Election`: strictly increasing across successive
//! leaders of a name (a later key has a later revision), unchanged by a
//! proclaim (a put keeps the create revision).
//!
//! **Proclaim** is one txn: `create_revision(key) == token` then put the new
//! value on the same lease. A failed compare means the leadership is gone
//! (its key deleted, or recreated by a later campaign of the same lease,
//! which has another revision): `Lost` (or `NotHeld` while our own release
//! is in flight), and the value of whoever leads now is never touched.
//!
//! **Leader** is one range of the name's prefix, oldest first, limit 1: the
//! oldest key leads. If it is a leadership key, `Some(Leadership { value,
//! fencing_token: create_revision })`. If nobody holds the name, *or the
//! holder is not a leadership* (a plain exclusive lock, a reader, a
//! semaphore's key), the answer is `None`: nobody leads the election even
//! though campaigns may be queued behind that lock; the first of them
//! becomes the leader (and `leader` says so) once the lock is released.
//!
//! **Observe** reads like `leader`; if the state differs from the caller's
//! `known`, it completes at once. Otherwise it watches the whole prefix from
//! the read's revision + 1 and derives the state from the pushed events: a
//! PUT on the oldest key (a proclaim) carries the new value; a PUT when the
//! name had no key makes that key the oldest; a DELETE of the oldest key
//! (resign, loss) is followed by one new read (the next in line is not in
//! the event). Other keys' events (waiters joining and leaving) change
//! nothing and cost no request. It completes as soon as the state differs
//! from `known`, or with the current state when the wait bound passes. A
//! broken, cancelled or compacted watch reads again and watches anew after
//! the usual short jittered pause (like a waiting acquire), and a watch is
//! renewed the same way after `WATCH_REFRESH_MS` (a silently dead stream
//! would otherwise never report anything); a failing read ends the observe
//! with the backend's error. Cancel ends it `Aborted`, close `Closed`.

use crate::core::names::validate_name;

use serde_json::Value;

use super::{
    EtcdMachine, Failure, HeldKind, LeaderOp, OpKind, ProclaimOp, Purpose, TimerKey, BACKEND,
    WATCH_REFRESH_MS, WATCH_RETRY_MS,
};
use crate::core::etcd::gateway::{self as gw, RangeResponse};
use crate::core::{Leadership, LockError, LockId, Millis, OpId, Outcome, RequestId, Wait};

/// The tag that starts every leadership key's value.
const LEADER_TAG: &[u8] = b"l:";
/// The longest nonce a leadership value may carry (ours: 16 hex digits).
const MAX_NONCE_HEX: usize = 32;

/// The value of a leadership key: `l:<random>:<value>`.
pub(super) fn leader_value(random: &str, value: &str) -> Vec<u8> {
    let mut v = Vec::with_capacity(LEADER_TAG.len() + random.len() + 1 + value.len());
    v.extend_from_slice(LEADER_TAG);
    v.extend_from_slice(random.as_bytes());
    v.push(b':');
    v.extend_from_slice(value.as_bytes());
    v
}

/// The campaign value a key's value carries, if it is a leadership's.
pub(super) fn decode_leader_value(v: &[u8]) -> Option<&str> {
    let rest = v.strip_prefix(LEADER_TAG)?;
    let colon = rest.iter().position(|b| *b == b':')?;
    let (nonce, tail) = rest.split_at(colon);
    if nonce.is_empty()
        || nonce.len() > MAX_NONCE_HEX
        || !nonce
            .iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
    {
        return None;
    }
    let value = std::str::from_utf8(tail.get(1..)?).ok()?;
    (value.len() <= crate::core::operation::MAX_CAMPAIGN_VALUE).then_some(value)
}

/// Whether a key's value is a leadership's.
pub(super) fn is_leader_value(v: &[u8]) -> bool {
    decode_leader_value(v).is_some()
}

/// Who leads, from the oldest key of a name (with its value). A leadership
/// key without a positive create revision is a hostile reply.
pub(super) fn leadership_of(oldest: Option<&gw::KeyValue>) -> Result<Option<Leadership>, String> {
    let Some(kv) = oldest else { return Ok(None) };
    let Some(value) = decode_leader_value(&kv.value) else {
        return Ok(None);
    };
    if kv.create_revision <= 0 {
        return Err("a leadership key without a create revision".into());
    }
    Ok(Some(Leadership {
        value: value.to_string(),
        fencing_token: kv.create_revision as u64,
    }))
}

/// An observe in flight (a campaign is an acquire; proclaim and a leader
/// query are `ops/proclaim.rs` and `ops/leader.rs`).
pub(super) struct Observe {
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
    pub(super) fn observe_name(o: &Observe) -> &str {
        &o.name
    }

    pub(super) fn is_observe(&self, op: OpId) -> bool {
        matches!(self.ops.get(&op).map(|o| &o.kind), Some(OpKind::Observe(_)))
    }

    fn observe_mut(&mut self, op: OpId) -> Option<&mut Observe> {
        match self.ops.get_mut(&op).map(|o| &mut o.kind) {
            Some(OpKind::Observe(o)) => Some(o),
            _ => None,
        }
    }

    // ---- proclaim ---------------------------------------------------------

    pub(super) fn start_proclaim(
        &mut self,
        now: Millis,
        lock: LockId,
        value: &str,
    ) -> Result<OpId, LockError> {
        self.check_open()?;
        crate::core::operation::check_campaign_value(value)?;
        if matches!(self.locks.get(&lock), Some(h) if !matches!(h.kind, HeldKind::Leader)) {
            return Err(LockError::invalid(
                "proclaim needs a leadership (a campaign's lock), not a lock",
            ));
        }
        let op = self.rt.out.op_id();
        let next = ProclaimOp::start(self, op, lock, value);
        self.follow(now, op, next);
        Ok(op)
    }

    // ---- leader and observe -----------------------------------------------

    /// `Leader` (`observe: None`) or `Observe`.
    pub(super) fn start_leader(
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

    pub(super) fn on_observe_reply(
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
    pub(super) fn on_observe_messages(
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

    pub(super) fn observe_retry_at(&mut self, op: OpId, at: Millis) {
        if self.is_observe(op) {
            self.rt.timers.set(TimerKey::ObserveRetry(op), at);
        }
    }

    pub(super) fn on_observe_retry(&mut self, now: Millis, op: OpId) {
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

    pub(super) fn on_observe_deadline(&mut self, _now: Millis, op: OpId) {
        let Some(ob) = self.observe_mut(op) else {
            return;
        };
        // Before the first read answered, that answer completes the observe.
        if let Some(state) = ob.current.clone() {
            self.end_election_op(op, Ok(state));
        }
    }

    pub(super) fn cancel_observe(&mut self, op: OpId) {
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

/// The read of the oldest key of `name` (a leader query's, an observe's).
pub(super) fn leader_read_body(m: &EtcdMachine, name: &str) -> Value {
    gw::range_oldest(&m.lock_prefix(name))
}

/// A leader read's answer: the range, and who leads by it.
pub(super) fn read_leadership(
    m: &EtcdMachine,
    name: &str,
    result: Result<(u16, Vec<u8>), Failure>,
) -> Result<(RangeResponse, Option<Leadership>), LockError> {
    result
        .and_then(|(s, b)| gw::parse::<RangeResponse>(s, &b).map_err(Failure::Gateway))
        .map_err(|f| m.backend_error(name, f))
        .and_then(|r| {
            let state = leadership_of(r.kvs.first()).map_err(|m| malformed(name, &m))?;
            Ok((r, state))
        })
}

fn malformed(name: &str, message: &str) -> LockError {
    LockError::Backend {
        backend: BACKEND,
        name: name.to_string(),
        status: None,
        message: format!("malformed reply: {message}"),
    }
}
