//! The scheduler shared by [`RedisMachine`](super::RedisMachine) (one node)
//! and [`RedlockMachine`](super::RedlockMachine) (N nodes): it runs the
//! tasks of `tasks/` (one state machine each), sends the rounds they ask
//! for through the core's runtime, steps them again with the answers or
//! when their timers fire, and keeps the held locks' expiry and renewal
//! timers. The single-node lock is exactly Redlock with N = 1 (quorum 1),
//! except that it reports the node's own error instead of `NoQuorum` and
//! does not retry an unreachable node.

use std::collections::BTreeMap;

use super::codec::NodeCodec;
use super::context::{Context, Settings, Spawn, TaskId, TimerKey};
use super::round::{NodeError, Round, Slot};
use super::task::{Next, OnClose, Task};
use super::tasks::{acquire::AcquireTask, extend, inspect::InspectTask, release::ReleaseTask, renew::RenewTask, resume::ResumeTask};
use super::value::RedisCommand;
use crate::core::*;

/// A task the engine keeps: waiting for its round, or asleep (its timer is
/// `TimerKey::Task`).
struct Running {
    /// The task's operation, as it was at its last step (`None` once answered).
    op: Option<OpId>,
    task: Box<dyn Task>,
    round: Option<Round>,
}

pub(crate) struct Engine {
    cx: Context,
    tasks: BTreeMap<TaskId, Running>,
    next_task: u64,
}

impl Engine {
    pub(crate) fn new(s: Settings, nodes: Vec<NodeCodec>, entropy: Box<dyn Entropy + Send>) -> Self {
        Engine { cx: Context::new(s, nodes, entropy), tasks: BTreeMap::new(), next_task: 0 }
    }

    pub(crate) fn backend(&self) -> BackendKind {
        self.cx.s.backend
    }

    // ---------------------------------------------------------------- scheduling

    fn new_task_id(&mut self) -> TaskId {
        self.next_task += 1;
        TaskId(self.next_task)
    }

    /// Runs a new task's first step.
    fn spawn(&mut self, task: Box<dyn Task>, now: Millis) -> TaskId {
        let tid = self.new_task_id();
        self.advance(tid, task, None, now);
        tid
    }

    /// Steps task `tid` and keeps it for what it waits on next.
    fn advance(&mut self, tid: TaskId, task: Box<dyn Task>, round: Option<Round>, now: Millis) {
        let (mut task, mut round) = (task, round);
        loop {
            match task.step(&mut self.cx, round.take(), now) {
                Next::Done => {
                    self.cx.rt.timers.clear(TimerKey::Task(tid));
                    return;
                }
                Next::Sleep { task: t, until } if until <= now => task = t,
                Next::Sleep { task: t, until } => {
                    self.cx.rt.timers.set(TimerKey::Task(tid), until);
                    self.tasks.insert(tid, Running { op: t.op(), task: t, round: None });
                    return;
                }
                Next::Round { task: t, cmd, targets } => {
                    self.cx.rt.timers.clear(TimerKey::Task(tid));
                    let r = self.send_round(tid, cmd, &targets, now);
                    if !r.is_done() {
                        self.tasks.insert(tid, Running { op: t.op(), task: t, round: Some(r) });
                        return;
                    }
                    // Nothing could be sent: the answers are all known now.
                    (task, round) = (t, Some(r));
                }
            }
        }
    }

    /// Sends `cmd` to every node with `targets[i]`, as task `tid`'s round.
    fn send_round(&mut self, tid: TaskId, cmd: RedisCommand, targets: &[bool], now: Millis) -> Round {
        let cx = &mut self.cx;
        let timeout = cx.s.request_timeout_ms;
        let slots = cx
            .nodes
            .iter()
            .enumerate()
            .map(|(i, node)| {
                if !targets.get(i).copied().unwrap_or(false) {
                    return Slot::Skipped;
                }
                match cx.rt.send(now, (tid, i), |id| node.encode(id, &cmd, timeout)) {
                    Ok(id) => Slot::Pending(id),
                    Err(e) => Slot::Done(Err(NodeError::NotSent(e.to_string()))),
                }
            })
            .collect();
        Round { cmd, started: now, slots }
    }

    /// Steps task `tid` if its round is complete.
    fn round_progress(&mut self, tid: TaskId, now: Millis) {
        if self.tasks.get(&tid).is_some_and(|r| r.round.as_ref().is_some_and(Round::is_done)) {
            if let Some(r) = self.tasks.remove(&tid) {
                self.advance(tid, r.task, r.round, now);
            }
        }
    }

    /// Steps a sleeping task now (its timer fired, or it was aborted).
    fn wake(&mut self, tid: TaskId, now: Millis) {
        if self.tasks.get(&tid).is_some_and(|r| r.round.is_none()) {
            if let Some(r) = self.tasks.remove(&tid) {
                self.advance(tid, r.task, None, now);
            }
        }
    }

    /// Ends task `tid` without a further step, abandoning its requests.
    fn stop(&mut self, tid: TaskId) -> Option<Running> {
        let running = self.tasks.remove(&tid)?;
        self.cx.rt.timers.clear(TimerKey::Task(tid));
        self.cx.rt.cancel_where(|(t, _)| *t == tid);
        Some(running)
    }

    /// Carries out what tasks asked for, then finishes a close once nothing
    /// is left. Every entry point ends here.
    fn settle(&mut self, now: Millis) {
        loop {
            let stopped = std::mem::take(&mut self.cx.stopped);
            let spawned = std::mem::take(&mut self.cx.spawned);
            if stopped.is_empty() && spawned.is_empty() {
                break;
            }
            for tid in stopped {
                self.stop(tid);
            }
            for s in spawned {
                match s {
                    Spawn::ReleaseInBackground(h) => {
                        self.spawn(Box::new(ReleaseTask::background(h)), now);
                    }
                }
            }
        }
        let drained = self.tasks.is_empty() && self.cx.locks.is_empty();
        self.cx.rt.closing.finish_if(drained, &mut self.cx.rt.out);
    }

    // ---------------------------------------------------------------- driver side

    pub(crate) fn handle_input(&mut self, now: Millis, input: Input) {
        let id = input.id();
        let Some((tid, node)) = self.cx.rt.requests.finish(id) else { return };
        let Some(codec) = self.cx.nodes.get(node) else { return };
        let Some(round) = self.tasks.get_mut(&tid).and_then(|r| r.round.as_mut()) else { return };
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
                // No Redis request streams (yet): drop the rest of it.
                self.cx.rt.out.cancel(id);
                Err(NodeError::Transport("unexpected streamed answer".into()))
            }
        };
        if round.answer(node, id, result) {
            self.round_progress(tid, now);
        }
        self.settle(now);
    }

    pub(crate) fn handle_timeout(&mut self, now: Millis) {
        // 1. Requests past their deadline.
        let mut waiting = Vec::new();
        for (id, (tid, node)) in self.cx.rt.expire(now) {
            if let Some(round) = self.tasks.get_mut(&tid).and_then(|r| r.round.as_mut()) {
                round.answer(node, id, Err(NodeError::Timeout));
                waiting.push(tid);
            }
        }
        waiting.dedup();
        for tid in waiting {
            self.round_progress(tid, now);
        }
        // 2. Timers: sleeping tasks, then held locks' expiry and renewal.
        for key in self.cx.rt.timers.take_due(now) {
            match key {
                TimerKey::Task(tid) => self.wake(tid, now),
                TimerKey::Expiry(lock) => {
                    let reason = match self.cx.locks.get(&lock).and_then(|h| h.last_error.clone()) {
                        Some(e) => LostReason::RenewalFailed(e),
                        None => LostReason::Expired,
                    };
                    self.cx.lose(lock, reason);
                }
                TimerKey::Renewal(lock) => self.start_renewal(lock, now),
            }
            self.settle(now);
        }
        self.settle(now);
    }

    /// A renewal due while one is in flight waits for it (which schedules the next).
    fn start_renewal(&mut self, lock: LockId, now: Millis) {
        let Some(h) = self.cx.locks.get(&lock).filter(|h| h.renewal.is_none()) else { return };
        let task = RenewTask::new(h);
        let tid = self.new_task_id();
        if let Some(h) = self.cx.locks.get_mut(&lock) {
            h.renewal = Some(tid);
        }
        self.advance(tid, Box::new(task), None, now);
    }

    pub(crate) fn poll_timeout(&self) -> Option<Millis> {
        self.cx.rt.poll_timeout()
    }

    pub(crate) fn poll_transmit(&mut self) -> Option<Transmit> {
        self.cx.rt.poll_transmit()
    }

    pub(crate) fn poll_event(&mut self) -> Option<Event> {
        self.cx.rt.poll_event()
    }

    pub(crate) fn live_count(&self) -> usize {
        self.tasks.len() + self.cx.locks.len()
    }

    // ---------------------------------------------------------------- user side

    pub(crate) fn start_operation(&mut self, now: Millis, op: Operation) -> Result<OpId, LockError> {
        self.cx.rt.closing.check_open(self.cx.s.backend)?;
        let task: Box<dyn Task> = match op {
            Operation::Acquire { name, kind: _, options } => Box::new(AcquireTask::new(&mut self.cx, now, &name, &options)?),
            Operation::Release { lock } => {
                let op = self.cx.rt.out.op_id();
                let Some(h) = self.cx.take_lock(lock) else {
                    self.cx.rt.out.complete(op, Ok(Outcome::Released { lock, held_until_release: false }));
                    return Ok(op);
                };
                Box::new(ReleaseTask::new(op, h))
            }
            Operation::Extend { lock, ttl_ms } => match extend::start(&mut self.cx, lock, ttl_ms)? {
                Ok(task) => Box::new(task),
                Err(answered) => return Ok(answered),
            },
            Operation::Resume { handle } => Box::new(ResumeTask::new(&mut self.cx, &handle)?),
            Operation::Inspect { name } => Box::new(InspectTask::new(&mut self.cx, &name)?),
        };
        let op = task.op().ok_or_else(|| LockError::internal("a user operation's task has no operation id"))?;
        self.spawn(task, now);
        self.settle(now);
        Ok(op)
    }

    pub(crate) fn cancel(&mut self, now: Millis, op: OpId) {
        let Some((&tid, running)) = self.tasks.iter_mut().find(|(_, r)| r.op == Some(op)) else { return };
        running.task.cancel();
        self.wake(tid, now);
        self.settle(now);
    }

    pub(crate) fn close(&mut self, now: Millis) -> OpId {
        let op = self.cx.rt.out.op_id();
        if !self.cx.rt.closing.begin(op) {
            self.settle(now);
            return op;
        }
        // Pending operations end now. An acquire keeps running silently until
        // the outcome of its requests in flight is known and its possible keys
        // are deleted; close completes after that. A release finishes.
        let error = self.cx.closed_error();
        let tids: Vec<TaskId> = self.tasks.keys().copied().collect();
        for tid in tids {
            let Some(running) = self.tasks.get_mut(&tid) else { continue };
            let answer = running.op;
            match running.task.on_close(&error) {
                OnClose::Finish => continue,
                OnClose::Detach => {
                    running.op = None;
                    self.wake(tid, now);
                }
                OnClose::Stop => {
                    self.stop(tid);
                }
            }
            if let Some(op) = answer {
                self.cx.rt.out.fail(op, error.clone());
            }
        }
        let ids: Vec<LockId> = self.cx.locks.keys().copied().collect();
        for id in ids {
            self.cx.lose(id, LostReason::ClientClosed);
        }
        self.settle(now);
        op
    }
}
