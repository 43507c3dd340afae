//! The machinery shared by [`RedisMachine`](super::RedisMachine) (one node)
//! and [`RedlockMachine`](super::RedlockMachine) (N nodes): rounds of
//! requests, request timeouts, timers, the table of held locks and the
//! life of every operation. The single-node lock is exactly Redlock with
//! N = 1 (quorum 1), except that it reports the node's own error instead of
//! `NoQuorum` and does not retry an unreachable node.
//!
//! Split by concern: `acquire` (attempts, retries, waiting), `held`
//! (renewal, extend, release, loss), `query` (resume, inspect).

use std::collections::{BTreeMap, HashMap};

use super::codec::NodeCodec;
use super::keys::{fence_key, lock_key};
use super::quorum::quorum;
use super::round::{NodeError, Round, Slot};
use super::value::RedisCommand;
use crate::core::outbox::{earliest, Outbox};
use crate::core::*;

/// Settings common to both machines, already validated.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub backend: BackendKind,
    pub prefix: String,
    pub ttl_ms: u64,
    pub request_timeout_ms: u64,
    pub auto_extend: bool,
    pub drift_factor: f64,
    /// Attempts that fail for lack of reachable nodes are retried this often.
    pub retry_count: u32,
    pub retry_delay_ms: u64,
    pub retry_jitter_ms: u64,
    /// Raise the quorum's counters before handing a lock out (Redlock only).
    pub strict_fencing: bool,
}

/// Random bytes in an owner token (hex-encoded: twice as many characters).
pub(super) const TOKEN_BYTES: usize = 20;

/// Names of locks that ended, kept for messages (bounded).
const ENDED_NAMES_KEPT: usize = 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Owner {
    Task(u64),
    Renewal(LockId),
}

pub(super) struct Task {
    pub op: Option<OpId>,
    pub name: String,
    pub key: String,
    pub fence_key: String,
    pub round: Option<Round>,
    pub kind: TaskKind,
}

pub(super) enum TaskKind {
    Acquire(super::acquire::Acquire),
    /// `op: None`: giving up a lock in the background (lost, closed).
    Release { lock: Held },
    Extend { lock: LockId, ttl: u64, token: String },
    Resume { handle: LockHandle },
    Inspect,
}

/// A lock this machine holds.
pub(super) struct Held {
    pub id: LockId,
    pub name: String,
    pub key: String,
    pub fence_key: String,
    pub token: String,
    pub ttl: u64,
    pub fencing_token: u64,
    pub expires_at: Millis,
    /// Renew automatically (off after a failed release: the user gave it up).
    pub renew: bool,
    pub next_renewal: Option<Millis>,
    pub renewal: Option<Round>,
    pub last_error: Option<String>,
}

pub(crate) struct Engine {
    pub(super) s: Settings,
    pub(super) nodes: Vec<NodeCodec>,
    pub(super) entropy: Box<dyn Entropy + Send>,
    pub(super) out: Outbox,
    reqs: HashMap<RequestId, (Owner, usize)>,
    pub(super) tasks: BTreeMap<u64, Task>,
    pub(super) locks: BTreeMap<LockId, Held>,
    next_task: u64,
    ended: BTreeMap<LockId, String>,
    pub(super) closed: bool,
    close_ops: Vec<OpId>,
}

impl Engine {
    pub(crate) fn new(s: Settings, nodes: Vec<NodeCodec>, entropy: Box<dyn Entropy + Send>) -> Self {
        Engine {
            s,
            nodes,
            entropy,
            out: Outbox::default(),
            reqs: HashMap::new(),
            tasks: BTreeMap::new(),
            locks: BTreeMap::new(),
            next_task: 0,
            ended: BTreeMap::new(),
            closed: false,
            close_ops: Vec::new(),
        }
    }

    pub(super) fn node_count(&self) -> usize {
        self.nodes.len()
    }

    pub(super) fn quorum_size(&self) -> usize {
        quorum(self.nodes.len())
    }

    pub(super) fn backend_str(&self) -> &'static str {
        self.s.backend.as_str()
    }

    pub(super) fn keys_for(&self, name: &str) -> (String, String) {
        let key = lock_key(&self.s.prefix, name);
        let fence = fence_key(&key);
        (key, fence)
    }

    pub(super) fn all_nodes(&self) -> Vec<bool> {
        vec![true; self.node_count()]
    }

    pub(super) fn closed_error(&self) -> LockError {
        LockError::Closed { backend: self.backend_str() }
    }

    /// The error for a round that did not reach a quorum: the node's own
    /// error on a single node, `NoQuorum` on several.
    pub(super) fn round_error(&self, name: &str, first_error: Option<&NodeError>, granted: usize) -> LockError {
        if self.node_count() == 1 {
            first_error
                .unwrap_or(&NodeError::Redis("no usable answer".into()))
                .to_lock_error(self.backend_str(), name)
        } else {
            LockError::NoQuorum { backend: self.backend_str(), name: name.to_string(), granted, needed: self.quorum_size() }
        }
    }

    pub(super) fn add_task(&mut self, task: Task, now: Millis) {
        self.next_task += 1;
        let tid = self.next_task;
        self.run_task(tid, task, now);
    }

    /// Sends `cmd` to every node with `targets[i]`.
    pub(super) fn send_round(&mut self, owner: Owner, cmd: RedisCommand, targets: &[bool], now: Millis) -> Round {
        let timeout = self.s.request_timeout_ms;
        let mut slots = Vec::with_capacity(self.nodes.len());
        for (i, node) in self.nodes.iter().enumerate() {
            if !targets.get(i).copied().unwrap_or(false) {
                slots.push(Slot::Skipped);
                continue;
            }
            let id = self.out.request_id();
            match node.encode(id, &cmd, timeout) {
                Ok(req) => {
                    self.out.send(req);
                    self.reqs.insert(id, (owner, i));
                    slots.push(Slot::Pending { id, deadline: now.saturating_add(timeout) });
                }
                Err(e) => slots.push(Slot::Done(Err(NodeError::NotSent(e.to_string())))),
            }
        }
        Round { cmd, started: now, slots }
    }

    /// Forgets a round, cancelling what is still in flight.
    pub(super) fn drop_round(&mut self, round: Option<Round>) {
        if let Some(r) = round {
            for id in r.pending_ids() {
                self.reqs.remove(&id);
                self.out.cancel(id);
            }
        }
    }

    pub(super) fn record_ended(&mut self, id: LockId, name: &str) {
        self.ended.insert(id, name.to_string());
        while self.ended.len() > ENDED_NAMES_KEPT {
            self.ended.pop_first();
        }
    }

    pub(super) fn ended_name(&self, id: LockId) -> String {
        self.ended.get(&id).cloned().unwrap_or_default()
    }

    fn round_mut(&mut self, owner: Owner) -> Option<&mut Round> {
        match owner {
            Owner::Task(t) => self.tasks.get_mut(&t).and_then(|t| t.round.as_mut()),
            Owner::Renewal(l) => self.locks.get_mut(&l).and_then(|h| h.renewal.as_mut()),
        }
    }

    fn progress(&mut self, owner: Owner, now: Millis) {
        match owner {
            Owner::Task(tid) => {
                if let Some(task) = self.tasks.remove(&tid) {
                    self.run_task(tid, task, now);
                }
            }
            Owner::Renewal(id) => self.step_renewal(id, now),
        }
    }

    /// Advances a task as far as it can go now; keeps it if it is not finished.
    fn run_task(&mut self, tid: u64, mut task: Task, now: Millis) {
        let keep = match task.kind {
            TaskKind::Acquire(_) => self.step_acquire(tid, &mut task, now),
            TaskKind::Release { .. } => self.step_release(&mut task, now),
            TaskKind::Extend { .. } => self.step_extend(&mut task, now),
            TaskKind::Resume { .. } => self.step_resume(&mut task, now),
            TaskKind::Inspect => self.step_inspect(&mut task, now),
        };
        if keep {
            self.tasks.insert(tid, task);
        }
        self.maybe_finish_close();
    }

    /// Starts a task's first round (all nodes) and runs it.
    pub(super) fn start_task(&mut self, mut task: Task, cmd: RedisCommand, now: Millis) {
        self.next_task += 1;
        let tid = self.next_task;
        let all = self.all_nodes();
        task.round = Some(self.send_round(Owner::Task(tid), cmd, &all, now));
        self.run_task(tid, task, now);
    }

    pub(super) fn start_task_round(&mut self, tid: u64, task: &mut Task, cmd: RedisCommand, targets: &[bool], now: Millis) {
        task.round = Some(self.send_round(Owner::Task(tid), cmd, targets, now));
    }

    fn maybe_finish_close(&mut self) {
        if self.closed && self.tasks.is_empty() && self.locks.is_empty() {
            for op in std::mem::take(&mut self.close_ops) {
                self.out.complete(op, Ok(Outcome::Closed));
            }
        }
    }

    // ---------------------------------------------------------------- driver side

    pub(crate) fn handle_input(&mut self, now: Millis, input: Input) {
        let Some((owner, node)) = self.reqs.remove(&input.id()) else {
            return;
        };
        let id = input.id();
        let Some(codec) = self.nodes.get(node).cloned() else {
            return;
        };
        let Some(round) = self.round_mut(owner) else {
            return;
        };
        let result = match input {
            Input::Response { status, body, .. } => codec
                .decode(&round.cmd, status, &body)
                .map_err(|e| NodeError::Http { status: e.status, message: e.message }),
            Input::Failed { error: TransportError::Timeout, .. } => Err(NodeError::Timeout),
            Input::Failed { error: error @ TransportError::Connect(_), .. } => {
                Err(NodeError::NotSent(codec.scrub(&error.to_string())))
            }
            Input::Failed { error, .. } => Err(NodeError::Transport(codec.scrub(&error.to_string()))),
            Input::Chunk { .. } | Input::StreamEnd { .. } => {
                Err(NodeError::Transport("unexpected streamed answer".into()))
            }
        };
        match round.slots.get_mut(node) {
            Some(slot) if matches!(&*slot, Slot::Pending { id: i, .. } if *i == id) => *slot = Slot::Done(result),
            _ => return,
        }
        self.progress(owner, now);
    }

    pub(crate) fn handle_timeout(&mut self, now: Millis) {
        // 1. Requests past their deadline.
        let mut expired: Vec<(Owner, RequestId)> = Vec::new();
        let mut collect = |owner: Owner, r: &Round| {
            for s in &r.slots {
                if let Slot::Pending { id, deadline } = s {
                    if *deadline <= now {
                        expired.push((owner, *id));
                    }
                }
            }
        };
        for (tid, t) in &self.tasks {
            if let Some(r) = &t.round {
                collect(Owner::Task(*tid), r);
            }
        }
        for (id, h) in &self.locks {
            if let Some(r) = &h.renewal {
                collect(Owner::Renewal(*id), r);
            }
        }
        let mut owners: Vec<Owner> = Vec::new();
        for (owner, id) in expired {
            self.reqs.remove(&id);
            self.out.cancel(id);
            if let Some(r) = self.round_mut(owner) {
                for s in r.slots.iter_mut() {
                    if matches!(&*s, Slot::Pending { id: i, .. } if *i == id) {
                        *s = Slot::Done(Err(NodeError::Timeout));
                    }
                }
            }
            if !owners.contains(&owner) {
                owners.push(owner);
            }
        }
        for owner in owners {
            self.progress(owner, now);
        }
        // 2. Waiting acquires whose next attempt is due.
        let due: Vec<u64> = self
            .tasks
            .iter()
            .filter(|(_, t)| Self::task_timer(t).is_some_and(|d| d <= now))
            .map(|(tid, _)| *tid)
            .collect();
        for tid in due {
            self.progress(Owner::Task(tid), now);
        }
        // 3. Held locks: expiry and renewal.
        self.lock_timers(now);
        self.maybe_finish_close();
    }

    fn task_timer(t: &Task) -> Option<Millis> {
        match &t.kind {
            TaskKind::Acquire(a) if t.round.is_none() => a.sleeping_until(),
            _ => None,
        }
    }

    pub(crate) fn poll_timeout(&self) -> Option<Millis> {
        let tasks = self.tasks.values().flat_map(|t| [t.round.as_ref().and_then(Round::next_deadline), Self::task_timer(t)]);
        let locks = self.locks.values().flat_map(|h| {
            // A renewal due while one is in flight waits for it (see `lock_timers`).
            let renewal_due = h.next_renewal.filter(|_| h.renewal.is_none());
            [Some(h.expires_at), renewal_due, h.renewal.as_ref().and_then(Round::next_deadline)]
        });
        earliest(tasks.chain(locks))
    }

    pub(crate) fn poll_transmit(&mut self) -> Option<Transmit> {
        self.out.poll_transmit()
    }

    pub(crate) fn poll_event(&mut self) -> Option<Event> {
        self.out.poll_event()
    }

    pub(crate) fn live_count(&self) -> usize {
        self.tasks.len() + self.locks.len()
    }

    // ---------------------------------------------------------------- user side

    pub(crate) fn start_operation(&mut self, now: Millis, op: Operation) -> Result<OpId, LockError> {
        match op {
            Operation::Acquire { name, kind: _, options } => self.acquire(now, &name, &options),
            Operation::Release { lock } => self.release(now, lock),
            Operation::Extend { lock, ttl_ms } => self.extend(now, lock, ttl_ms),
            Operation::Resume { handle } => self.resume(now, &handle),
            Operation::Inspect { name } => self.inspect(now, &name),
        }
    }

    pub(crate) fn cancel(&mut self, now: Millis, op: OpId) {
        let Some(tid) = self.tasks.iter().find(|(_, t)| t.op == Some(op)).map(|(tid, _)| *tid) else {
            return;
        };
        if let Some(mut task) = self.tasks.remove(&tid) {
            let name = task.name.clone();
            if let TaskKind::Acquire(a) = &mut task.kind {
                a.abort(LockError::Aborted { backend: self.s.backend.as_str(), name });
            }
            self.run_task(tid, task, now);
        }
    }

    pub(crate) fn close(&mut self, now: Millis) -> OpId {
        let op = self.out.op_id();
        self.close_ops.push(op);
        if self.closed {
            self.maybe_finish_close();
            return op;
        }
        self.closed = true;
        // Pending operations end now. An acquire keeps running silently until
        // the outcome of its requests in flight is known and its possible keys
        // are deleted; close completes after that.
        let tids: Vec<u64> = self.tasks.keys().copied().collect();
        for tid in tids {
            let Some(mut task) = self.tasks.remove(&tid) else { continue };
            if matches!(task.kind, TaskKind::Release { .. }) {
                self.tasks.insert(tid, task);
                continue;
            }
            if let Some(op) = task.op.take() {
                let error = self.closed_error();
                self.out.fail(op, error);
            }
            match &mut task.kind {
                TaskKind::Acquire(a) => {
                    a.abort(self.closed_error());
                    self.run_task(tid, task, now);
                }
                _ => self.drop_round(task.round.take()),
            }
        }
        let ids: Vec<LockId> = self.locks.keys().copied().collect();
        for id in ids {
            if let Some(mut h) = self.locks.remove(&id) {
                let r = h.renewal.take();
                self.drop_round(r);
                self.record_ended(id, &h.name);
                self.out.lost(id, h.name.clone(), LostReason::ClientClosed);
                self.release_in_background(h, now);
            }
        }
        self.maybe_finish_close();
        op
    }

    /// Runs an owner-checked delete of `h` on every node, reporting nothing.
    pub(super) fn release_in_background(&mut self, h: Held, now: Millis) {
        let cmd = super::scripts::release(&h.key, &h.fence_key, &h.token, h.fencing_token);
        let task = Task {
            op: None,
            name: h.name.clone(),
            key: h.key.clone(),
            fence_key: h.fence_key.clone(),
            round: None,
            kind: TaskKind::Release { lock: h },
        };
        self.start_task(task, cmd, now);
    }
}
