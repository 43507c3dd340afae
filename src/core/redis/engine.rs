//! The scheduler shared by [`RedisMachine`](super::RedisMachine) (one node)
//! and [`RedlockMachine`](super::RedlockMachine) (N nodes): it runs the
//! tasks of `tasks/` (one state machine each), sends the rounds they ask
//! for through the core's runtime, steps them again with the answers or
//! when their timers fire, and keeps the held locks' expiry and renewal
//! timers. The single-node lock is exactly Redlock with N = 1 (quorum 1),
//! except that it reports the node's own error instead of `NoQuorum` and
//! does not retry an unreachable node.

use crate::core::runtime::VecMap;

use super::connection::{Answer, SubNews};
use super::context::{Context, RequestOwner, Settings, Spawn, TaskId, TimerKey};
use super::link::NodeLink;
use super::round::{NodeError, Round, Slot};
use super::scripts::{self, Script};
use super::subscription::{PushDecoder, PushFrame};
use super::task::{Next, OnClose, Push, Task};
use super::tasks::{
    acquire::AcquireTask,
    acquire_set::AcquireSetTask,
    election::{self, LeaderTask, ObserveTask},
    extend,
    inspect::InspectTask,
    reenter::ReenterTask,
    release::ReleaseTask,
    renew::RenewTask,
    resume::ResumeTask,
};
use super::value::{RedisCommand, RedisValue};
use crate::core::*;

/// What webdis' reply to an `EVALSHA` is named after.
static EVALSHA: std::sync::LazyLock<RedisCommand> =
    std::sync::LazyLock::new(|| RedisCommand::new("EVALSHA"));

/// A task the engine keeps: waiting for its round, or asleep (its timer is
/// `TimerKey::Task`).
struct Running {
    /// The task's operation, as it was at its last step (`None` once answered).
    op: Option<OpId>,
    task: Box<dyn Task>,
    round: Option<Round>,
}

/// A task's wake-up subscription on one node.
enum Sub {
    /// The streaming request is out (confirmed or not yet).
    Open { id: RequestId, failures: u32 },
    /// On a Redis-protocol node: `channel` is subscribed on the node's one
    /// subscriber connection, which every waiter of this client shares.
    Shared { channel: String, failures: u32 },
    /// It ended; opened again from `retry_at` on (backing off).
    Down { retry_at: Millis, failures: u32 },
}

pub(crate) struct Engine {
    cx: Context,
    tasks: VecMap<TaskId, Running>,
    /// Wake-up subscriptions, by task and node (see [`Task::listens`]).
    subs: VecMap<(TaskId, usize), Sub>,
    next_task: u64,
}

impl Engine {
    pub(crate) fn new(s: Settings, nodes: Vec<NodeLink>, entropy: Box<dyn Entropy + Send>) -> Self {
        Engine {
            cx: Context::new(s, nodes, entropy),
            tasks: VecMap::new(),
            subs: VecMap::new(),
            next_task: 0,
        }
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
                    self.close_streams(tid);
                    return;
                }
                Next::Sleep { task: t, until } if until <= now => task = t,
                Next::Sleep { task: t, until } => {
                    self.cx.rt.timers.set(TimerKey::Task(tid), until);
                    self.tasks.insert(
                        tid,
                        Running {
                            op: t.op(),
                            task: t,
                            round: None,
                        },
                    );
                    self.sync_streams(tid, now);
                    return;
                }
                Next::Round {
                    task: t,
                    cmd,
                    targets,
                } => {
                    self.cx.rt.timers.clear(TimerKey::Task(tid));
                    let r = self.send_round(tid, cmd, &targets, now);
                    if !r.is_done() {
                        self.tasks.insert(
                            tid,
                            Running {
                                op: t.op(),
                                task: t,
                                round: Some(r),
                            },
                        );
                        self.sync_streams(tid, now);
                        return;
                    }
                    // Nothing could be sent: the answers are all known now.
                    (task, round) = (t, Some(r));
                }
            }
        }
    }

    /// Sends `cmd` to every node with `targets[i]`, as task `tid`'s round.
    fn send_round(
        &mut self,
        tid: TaskId,
        cmd: RedisCommand,
        targets: &[bool],
        now: Millis,
    ) -> Round {
        let n = self.cx.node_count();
        let mut round = Round {
            cmd,
            started: now,
            slots: vec![Slot::Skipped; n],
            sha: vec![false; n],
            settle_at: None,
        };
        for node in (0..n).filter(|i| targets.get(*i).copied().unwrap_or(false)) {
            (round.slots[node], round.sha[node]) = self.send_to(tid, node, &round.cmd, now);
        }
        round
    }

    /// Sends `cmd` to `node` for task `tid`'s round: as `EVALSHA` when the
    /// node is known to cache the script (see [`scripts::as_evalsha`]).
    /// Returns the node's slot and whether it went as `EVALSHA`.
    fn send_to(
        &mut self,
        tid: TaskId,
        node: usize,
        cmd: &RedisCommand,
        now: Millis,
    ) -> (Slot, bool) {
        let cx = &mut self.cx;
        let cached =
            Script::of_command(cmd).filter(|s| cmd.name() == b"EVAL" && cx.script_cached(node, *s));
        let sha = cached.map(|s| scripts::as_evalsha(cmd, s));
        let wire = sha.as_ref().unwrap_or(cmd);
        let timeout = cx.s.request_timeout_ms;
        let owner = RequestOwner::Round { task: tid, node };
        let sent = match cx.nodes.get_mut(node) {
            None => Err(NodeError::NotSent("no such node".into())),
            Some(NodeLink::Http(codec)) => cx
                .rt
                .send(now, owner, |id| codec.encode(id, wire, timeout))
                .map_err(|e| NodeError::NotSent(e.to_string())),
            Some(NodeLink::Resp(r)) => {
                let id = cx.rt.requests.track(&mut cx.rt.out, now, owner, timeout);
                r.commands.send(&mut cx.rt.out, id, wire);
                Ok(id)
            }
        };
        match sent {
            Ok(id) => (Slot::Pending(id), sha.is_some()),
            Err(e) => (Slot::Done(Err(e)), false),
        }
    }

    /// Node `node` answered `result` to `round.cmd` sent as `EVALSHA` or
    /// not (`sha`): learns whether it caches the script. `true` when the
    /// answer is `NOSCRIPT` and the command must go again as `EVAL`.
    fn learn_script_cache(
        &mut self,
        node: usize,
        cmd: &RedisCommand,
        sha: bool,
        result: &Result<RedisValue, NodeError>,
    ) -> bool {
        let (Some(script), Ok(v)) = (Script::of_command(cmd), result) else {
            return false;
        };
        if scripts::is_noscript(v) {
            self.cx.set_script_cached(node, script, false);
            return sha;
        }
        // A script that ran is in the cache now; another error says nothing.
        if !matches!(v, RedisValue::Error(_)) {
            self.cx.set_script_cached(node, script, true);
        }
        false
    }

    /// Steps task `tid` if its round is complete, or if its outcome was
    /// decided without its slow nodes (see [`Task::settled`]) a grace period
    /// ago: then the requests still out are cancelled and count as timed
    /// out. The grace (a tenth of the request timeout) lets nodes that are
    /// merely a little behind answer, so rounds whose every node answers
    /// promptly keep every answer (strict fencing's one-round acquire needs
    /// them all); a frozen node holds the round up for the grace only.
    fn round_progress(&mut self, tid: TaskId, now: Millis) {
        let quorum = self.cx.quorum_size();
        let grace = (self.cx.s.request_timeout_ms / 10).max(1);
        let Some(running) = self.tasks.get_mut(&tid) else {
            return;
        };
        let Some(round) = running.round.as_mut() else {
            return;
        };
        if !round.is_done() {
            if !running.task.settled(round, quorum) {
                return;
            }
            let at = *round.settle_at.get_or_insert(now.saturating_add(grace));
            if now < at {
                self.cx.rt.timers.set(TimerKey::Task(tid), at);
                return;
            }
            for id in round.abandon_pending() {
                self.cx.rt.cancel(id);
            }
        }
        if let Some(r) = self.tasks.remove(&tid) {
            self.advance(tid, r.task, r.round, now);
        }
    }

    /// Steps a sleeping task now (its timer fired, or it was aborted); a
    /// task in a round, when the round's settle time came.
    fn wake(&mut self, tid: TaskId, now: Millis) {
        match self.tasks.get(&tid).map(|r| r.round.is_none()) {
            Some(true) => {
                if let Some(r) = self.tasks.remove(&tid) {
                    self.advance(tid, r.task, None, now);
                }
            }
            Some(false) => self.round_progress(tid, now),
            None => {}
        }
    }

    /// Ends task `tid` without a further step, abandoning its requests.
    fn stop(&mut self, tid: TaskId) -> Option<Running> {
        let running = self.tasks.remove(&tid)?;
        self.cx.rt.timers.clear(TimerKey::Task(tid));
        self.cx.rt.cancel_where(|o| o.task() == tid);
        self.subs.retain(|(t, _), _| *t != tid);
        Some(running)
    }

    // ---------------------------------------------------------------- wake-up streams

    /// Opens or closes task `tid`'s subscriptions to match what it
    /// [listens](Task::listens) to: one per node, within the machine's
    /// `max_subscriptions` (nodes beyond it are left to the task's timer),
    /// a failed one again only after its back-off.
    fn sync_streams(&mut self, tid: TaskId, now: Millis) {
        let Some(channel) = self
            .tasks
            .get(&tid)
            .and_then(|r| r.task.listens())
            .map(str::to_string)
        else {
            self.close_streams(tid);
            return;
        };
        for node in 0..self.cx.node_count() {
            let failures = match self.subs.get(&(tid, node)) {
                Some(Sub::Open { .. } | Sub::Shared { .. }) => continue,
                Some(Sub::Down { retry_at, .. }) if now < *retry_at => continue,
                Some(Sub::Down { failures, .. }) => *failures,
                None => 0,
            };
            if matches!(self.cx.nodes.get(node), Some(NodeLink::Resp(_))) {
                if self.subscriber_allowed(node) {
                    self.subscribe_shared(tid, node, &channel, failures, now);
                }
                continue;
            }
            let open = self
                .subs
                .values()
                .filter(|s| matches!(s, Sub::Open { .. }))
                .count();
            if open >= self.cx.s.max_subscriptions {
                return;
            }
            let cx = &mut self.cx;
            let Some(NodeLink::Http(codec)) = cx.nodes.get(node) else {
                continue;
            };
            let owner = RequestOwner::Stream {
                task: tid,
                node,
                decoder: PushDecoder::new(codec.protocol()),
            };
            let timeout = cx.s.request_timeout_ms;
            let sub = match cx
                .rt
                .send(now, owner, |id| codec.subscribe(id, &channel, timeout))
            {
                Ok(id) => Sub::Open { id, failures },
                Err(_) => Sub::Down {
                    retry_at: self.backoff(now, failures + 1),
                    failures: failures + 1,
                },
            };
            self.subs.insert((tid, node), sub);
        }
    }

    /// Whether node `node` may carry subscriptions: its subscriber stream is
    /// open already, or fewer than `max_subscriptions` are (a Worker's
    /// connection cap: each is one more open connection).
    fn subscriber_allowed(&self, node: usize) -> bool {
        let in_use = |l: &NodeLink| matches!(l, NodeLink::Resp(r) if r.pubsub.in_use());
        let Some(link) = self.cx.nodes.get(node) else {
            return false;
        };
        in_use(link)
            || self.cx.nodes.iter().filter(|l| in_use(l)).count() < self.cx.s.max_subscriptions
    }

    /// Subscribes task `tid` to `channel` on Redis-protocol node `node`'s
    /// shared subscriber connection; a channel confirmed already is live
    /// for the task at once.
    fn subscribe_shared(
        &mut self,
        tid: TaskId,
        node: usize,
        channel: &str,
        failures: u32,
        now: Millis,
    ) {
        let Some(NodeLink::Resp(r)) = self.cx.nodes.get_mut(node) else {
            return;
        };
        let confirmed = r.pubsub.subscribe(&mut self.cx.rt.out, channel);
        let channel = channel.to_string();
        self.subs
            .insert((tid, node), Sub::Shared { channel, failures });
        if confirmed {
            self.push(tid, node, Push::Live, now);
        }
    }

    /// Closes every subscription of task `tid`.
    fn close_streams(&mut self, tid: TaskId) {
        let keys: Vec<(TaskId, usize)> = self
            .subs
            .range((tid, 0)..=(tid, usize::MAX))
            .map(|(k, _)| *k)
            .collect();
        for key in keys {
            match self.subs.remove(&key) {
                Some(Sub::Open { id, .. }) => {
                    self.cx.rt.cancel(id);
                }
                Some(Sub::Shared { channel, .. }) => self.unsubscribe_shared(key.1, &channel),
                Some(Sub::Down { .. }) | None => {}
            }
        }
    }

    /// Unsubscribes `channel` on node `node` once no task listens on it.
    fn unsubscribe_shared(&mut self, node: usize, channel: &str) {
        let still = self.subs.iter().any(|((_, n), s)| {
            *n == node && matches!(s, Sub::Shared { channel: c, .. } if c == channel)
        });
        if let (false, Some(NodeLink::Resp(r))) = (still, self.cx.nodes.get_mut(node)) {
            r.pubsub.unsubscribe(&mut self.cx.rt.out, channel);
        }
    }

    /// When a subscription that failed `failures` times in a row may be
    /// opened again: the retry delay, doubling up to 32 times it.
    fn backoff(&self, now: Millis, failures: u32) -> Millis {
        let factor = 1u64 << failures.saturating_sub(1).min(5);
        now.saturating_add(self.cx.s.retry_delay_ms.max(1).saturating_mul(factor))
    }

    /// Input for a subscription's streaming request `id`.
    fn stream_input(&mut self, id: RequestId, input: Input, now: Millis) {
        let Some(RequestOwner::Stream { task, node, .. }) = self.cx.rt.requests.owner(id) else {
            return;
        };
        let (tid, node) = (*task, *node);
        let Input::Chunk { data, .. } = input else {
            // Refused (non-2xx), ended or failed: the task falls back to its timer.
            self.cx.rt.requests.finish(id);
            return self.stream_down(tid, node, now);
        };
        let Some(RequestOwner::Stream { decoder, .. }) = self.cx.rt.requests.owner_mut(id) else {
            return;
        };
        let frames = match decoder.push(&data) {
            Ok(frames) => frames,
            Err(_) => {
                self.cx.rt.cancel(id);
                return self.stream_down(tid, node, now);
            }
        };
        for frame in frames {
            let push = match frame {
                PushFrame::Subscribed => {
                    // Only a stream still open (an earlier frame may have ended its task).
                    let Some(Sub::Open { id: open, failures }) = self.subs.get_mut(&(tid, node))
                    else {
                        continue;
                    };
                    if *open != id {
                        continue;
                    }
                    *failures = 0;
                    self.cx.rt.requests.keep_open(id);
                    Push::Live
                }
                PushFrame::Message(payload) => Push::Message(payload),
            };
            self.push(tid, node, push, now);
        }
    }

    /// Subscription (`tid`, `node`) is gone: open it again after its back-off.
    fn stream_down(&mut self, tid: TaskId, node: usize, now: Millis) {
        let failures = match self.subs.get(&(tid, node)) {
            Some(
                Sub::Open { failures, .. }
                | Sub::Shared { failures, .. }
                | Sub::Down { failures, .. },
            ) => failures + 1,
            None => return,
        };
        self.subs.insert(
            (tid, node),
            Sub::Down {
                retry_at: self.backoff(now, failures),
                failures,
            },
        );
        self.push(tid, node, Push::Down, now);
    }

    /// Tells task `tid` about its subscription to `node`; steps it if it
    /// sleeps and asks to.
    fn push(&mut self, tid: TaskId, node: usize, push: Push, now: Millis) {
        let Some(running) = self.tasks.get_mut(&tid) else {
            return;
        };
        let wake = running.task.on_push(node, push, now) && running.round.is_none();
        if wake {
            self.wake(tid, now);
        } else {
            self.sync_streams(tid, now);
        }
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
        if drained && self.cx.rt.closing.started() {
            // Closed clients leave no connection open.
            for link in &mut self.cx.nodes {
                if let NodeLink::Resp(r) = link {
                    r.commands.shut(&mut self.cx.rt.out);
                    r.pubsub.shut(&mut self.cx.rt.out);
                }
            }
        }
        self.cx.rt.closing.finish_if(drained, &mut self.cx.rt.out);
    }

    // ---------------------------------------------------------------- driver side

    pub(crate) fn handle_input(&mut self, now: Millis, input: Input) {
        let id = input.id();
        if let Some(node) = self.connection_of(id) {
            let (answers, news) = match self.cx.nodes.get_mut(node) {
                Some(NodeLink::Resp(r)) if r.pubsub.owns(id) => {
                    let answers = r.pubsub.on_input(&mut self.cx.rt.out, input);
                    (answers, r.pubsub.take_news())
                }
                Some(NodeLink::Resp(r)) => {
                    (r.commands.on_input(&mut self.cx.rt.out, input), Vec::new())
                }
                _ => (Vec::new(), Vec::new()),
            };
            self.on_stream_answers(answers, now);
            self.on_sub_news(node, news, now);
            return self.settle(now);
        }
        if matches!(
            self.cx.rt.requests.owner(id),
            Some(RequestOwner::Stream { .. })
        ) {
            self.stream_input(id, input, now);
            return self.settle(now);
        }
        let Some(RequestOwner::Round { task: tid, node }) = self.cx.rt.requests.finish(id) else {
            return;
        };
        let Some(result) = self.decode_http(tid, node, id, input) else {
            return;
        };
        self.on_node_answer(tid, node, id, result, now);
        self.settle(now);
    }

    /// The node whose Redis-protocol connection is stream `id`.
    fn connection_of(&self, id: RequestId) -> Option<usize> {
        self.cx.nodes.iter().position(
            |l| matches!(l, NodeLink::Resp(r) if r.commands.owns(id) || r.pubsub.owns(id)),
        )
    }

    /// What node `node`'s subscriber connection reported, told to the
    /// tasks listening on the channel it concerns.
    fn on_sub_news(&mut self, node: usize, news: Vec<SubNews>, now: Millis) {
        for n in news {
            let (channel, push) = match n {
                SubNews::Confirmed(ch) => (Some(ch), Push::Live),
                SubNews::Message(ch, payload) => (Some(ch), Push::Message(payload)),
                SubNews::Down => (None, Push::Down),
            };
            let listening: Vec<TaskId> = self
                .subs
                .iter()
                .filter(|((_, n), sub)| {
                    *n == node
                        && matches!(sub, Sub::Shared { channel: c, .. }
                            if channel.as_ref().map_or(true, |ch| ch == c))
                })
                .map(|((tid, _), _)| *tid)
                .collect();
            for tid in listening {
                match &push {
                    Push::Down => self.stream_down(tid, node, now),
                    Push::Live => {
                        if let Some(Sub::Shared { failures, .. }) = self.subs.get_mut(&(tid, node))
                        {
                            *failures = 0;
                        }
                        self.push(tid, node, Push::Live, now);
                    }
                    Push::Message(p) => self.push(tid, node, Push::Message(p.clone()), now),
                }
            }
        }
    }

    /// Answers read on a connection, each to the round that still waits for it.
    fn on_stream_answers(&mut self, answers: Vec<Answer>, now: Millis) {
        for (id, result) in answers {
            if let Some(RequestOwner::Round { task, node }) = self.cx.rt.requests.finish(id) {
                let result = result.map(|v| self.scrub_value(node, v));
                self.on_node_answer(task, node, id, result, now);
            }
        }
    }

    /// Redis error replies are data too (`-ERR …` may quote what it was
    /// sent, a password included): scrubbed like failures.
    fn scrub_value(&self, node: usize, v: RedisValue) -> RedisValue {
        match (v, self.cx.nodes.get(node)) {
            (RedisValue::Error(e), Some(link)) => RedisValue::Error(link.scrub(&e)),
            (v, _) => v,
        }
    }

    /// An HTTP node's answer to task `tid`'s round as a reply or a failure.
    fn decode_http(
        &mut self,
        tid: TaskId,
        node: usize,
        id: RequestId,
        input: Input,
    ) -> Option<Result<RedisValue, NodeError>> {
        let Some(NodeLink::Http(codec)) = self.cx.nodes.get(node) else {
            return None;
        };
        let round = self.tasks.get(&tid).and_then(|r| r.round.as_ref())?;
        let sha = round.sha.get(node).copied().unwrap_or(false);
        Some(match input {
            // Webdis names its reply after the command as sent.
            Input::Response { status, body, .. } => codec
                .decode(if sha { &EVALSHA } else { &round.cmd }, status, &body)
                .map_err(|e| NodeError::Http {
                    status: e.status,
                    message: e.message,
                }),
            Input::Failed {
                error: TransportError::Timeout,
                ..
            } => Err(NodeError::Timeout),
            Input::Failed {
                error: error @ TransportError::Connect(_),
                ..
            } => Err(NodeError::NotSent(codec.scrub(&error.to_string()))),
            Input::Failed { error, .. } => {
                Err(NodeError::Transport(codec.scrub(&error.to_string())))
            }
            Input::Opened { .. } | Input::Chunk { .. } | Input::StreamEnd { .. } => {
                // A command's answer never streams: drop the rest of it.
                self.cx.rt.out.cancel(id);
                Err(NodeError::Transport("unexpected streamed answer".into()))
            }
        })
    }

    /// Node `node`'s answer to request `id` of task `tid`'s round: a
    /// `NOSCRIPT` sends the `EVAL` again; anything else counts in the round.
    fn on_node_answer(
        &mut self,
        tid: TaskId,
        node: usize,
        id: RequestId,
        result: Result<RedisValue, NodeError>,
        now: Millis,
    ) {
        let Some(round) = self.tasks.get(&tid).and_then(|r| r.round.as_ref()) else {
            return;
        };
        let (cmd, sha) = (
            round.cmd.clone(),
            round.sha.get(node).copied().unwrap_or(false),
        );
        if self.learn_script_cache(node, &cmd, sha, &result) {
            // NOSCRIPT: the node lost its script cache. Send the EVAL instead,
            // in the same round.
            let (slot, sha) = self.send_to(tid, node, &cmd, now);
            if let Some(round) = self.tasks.get_mut(&tid).and_then(|r| r.round.as_mut()) {
                if matches!(round.slots.get(node), Some(Slot::Pending(i)) if *i == id) {
                    (round.slots[node], round.sha[node]) = (slot, sha);
                }
            }
            return self.round_progress(tid, now);
        }
        let Some(round) = self.tasks.get_mut(&tid).and_then(|r| r.round.as_mut()) else {
            return;
        };
        if round.answer(node, id, result) {
            self.round_progress(tid, now);
        }
    }

    pub(crate) fn handle_timeout(&mut self, now: Millis) {
        // 1. Requests past their deadline.
        let mut waiting = Vec::new();
        for (id, owner) in self.cx.rt.expire(now) {
            let (tid, node) = match owner {
                RequestOwner::Round { task, node } => (task, node),
                // A subscription not confirmed in time.
                RequestOwner::Stream { task, node, .. } => {
                    self.stream_down(task, node, now);
                    continue;
                }
            };
            if let Some(round) = self.tasks.get_mut(&tid).and_then(|r| r.round.as_mut()) {
                round.answer(node, id, Err(NodeError::Timeout));
                waiting.push(tid);
            }
            // A command late on a stream: the connection may be half-open.
            if let Some(NodeLink::Resp(r)) = self.cx.nodes.get_mut(node) {
                let others = r.commands.timed_out(&mut self.cx.rt.out, id);
                self.on_stream_answers(others, now);
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
        let Some(h) = self.cx.locks.get(&lock).filter(|h| h.renewal.is_none()) else {
            return;
        };
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

    /// `AcquireAll` of free names as one script (one node whose host
    /// accepts scripts over several hash slots).
    pub(crate) fn atomic_sets(&self) -> bool {
        self.cx.s.cross_slot_scripts && self.cx.node_count() == 1
    }

    pub(crate) fn live_count(&self) -> usize {
        self.tasks.len() + self.cx.locks.len()
    }

    // ---------------------------------------------------------------- user side

    pub(crate) fn start_operation(
        &mut self,
        now: Millis,
        op: Operation,
    ) -> Result<OpId, LockError> {
        self.cx.rt.closing.check_open(self.cx.s.backend)?;
        let task = match self.task_for(now, op)? {
            Ok(task) => task,
            Err(answered) => return Ok(answered),
        };
        let op = task
            .op()
            .ok_or_else(|| LockError::internal("a user operation's task has no operation id"))?;
        self.spawn(task, now);
        self.settle(now);
        Ok(op)
    }

    /// The task that runs `op`, or its id when it is answered already.
    fn task_for(&mut self, now: Millis, op: Operation) -> Result<Started, LockError> {
        let atomic_sets = self.atomic_sets();
        let cx = &mut self.cx;
        let task: Box<dyn Task> = match op {
            // The capabilities check refuses it too; the core does not trust its caller.
            Operation::Acquire {
                kind: LockKind::Leader,
                ..
            } => {
                return Err(LockError::invalid(
                    "a leadership is taken by a campaign, not an acquire",
                ))
            }
            Operation::Acquire {
                name,
                kind,
                options,
            } => Box::new(AcquireTask::new(cx, now, &name, kind, &options)?),
            Operation::Release { lock } => return Ok(release_task(cx, lock)),
            Operation::Extend { lock, ttl_ms } => return boxed(extend::start(cx, lock, ttl_ms)?),
            Operation::Resume { handle } => Box::new(ResumeTask::new(cx, &handle)?),
            Operation::Inspect { name } => Box::new(InspectTask::new(cx, &name)?),
            Operation::Campaign {
                name,
                value,
                options,
            } => Box::new(AcquireTask::campaign(cx, now, &name, &value, &options)?),
            Operation::Proclaim { lock, value } => {
                return boxed(election::proclaim(cx, lock, &value)?)
            }
            Operation::Leader { name } => Box::new(LeaderTask::new(cx, &name)?),
            Operation::Observe { name, known, wait } => {
                Box::new(ObserveTask::new(cx, now, &name, known, wait)?)
            }
            Operation::Reenter { handle } => Box::new(ReenterTask::new(cx, &handle)?),
            Operation::AcquireAll { names, options } if atomic_sets => {
                return boxed(AcquireSetTask::new(cx, now, names, &options)?)
            }
            op @ Operation::AcquireAll { .. } => {
                return Err(crate::core::operation::unserved(cx.s.backend, &op))
            }
        };
        Ok(Ok(task))
    }

    pub(crate) fn cancel(&mut self, now: Millis, op: OpId) {
        let Some((&tid, running)) = self.tasks.iter_mut().find(|(_, r)| r.op == Some(op)) else {
            return;
        };
        running.task.cancel();
        self.sync_streams(tid, now);
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
            let Some(running) = self.tasks.get_mut(&tid) else {
                continue;
            };
            let answer = running.op;
            match running.task.on_close(&error) {
                OnClose::Finish => continue,
                OnClose::Detach => {
                    running.op = None;
                    self.sync_streams(tid, now);
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

/// A started operation: its task, or its id when it was answered at once.
type Started = Result<Box<dyn Task>, OpId>;

fn boxed<T: Task + 'static>(started: Result<T, OpId>) -> Result<Started, LockError> {
    Ok(started.map(|task| Box::new(task) as Box<dyn Task>))
}

/// A release's task; a lock this machine does not hold is answered at once.
fn release_task(cx: &mut Context, lock: LockId) -> Started {
    let op = cx.rt.out.op_id();
    let Some(h) = cx.take_lock(lock) else {
        cx.rt.out.complete(
            op,
            Ok(Outcome::Released {
                lock,
                held_until_release: false,
            }),
        );
        return Err(op);
    };
    Ok(Box::new(ReleaseTask::new(op, h)))
}

/// Implements [`LockMachine`](crate::core::LockMachine) by delegating to the engine.
macro_rules! delegate_lock_machine {
    ($t:ty, [$($kind:ident),*]) => {
        impl $crate::core::LockMachine for $t {
            fn backend(&self) -> $crate::core::BackendKind {
                self.engine.backend()
            }
            fn capabilities(&self) -> $crate::core::Capabilities {
                $crate::core::Capabilities {
                    kinds: &[$($crate::core::KindFamily::$kind),*],
                    // A name's keys carry its own hash tag: one script
                    // over several names only where the host allows it
                    // (one node, see `core::multi`).
                    atomic_sets: self.engine.atomic_sets(),
                }
            }
            fn live_count(&self) -> usize {
                self.engine.live_count()
            }
            fn start_operation(
                &mut self,
                now: $crate::core::Millis,
                op: $crate::core::Operation,
            ) -> Result<$crate::core::OpId, $crate::core::LockError> {
                self.engine.start_operation(now, op)
            }
            fn cancel(&mut self, now: $crate::core::Millis, op: $crate::core::OpId) {
                self.engine.cancel(now, op)
            }
            fn close(&mut self, now: $crate::core::Millis) -> $crate::core::OpId {
                self.engine.close(now)
            }
            fn handle_input(&mut self, now: $crate::core::Millis, input: $crate::core::Input) {
                self.engine.handle_input(now, input)
            }
            fn handle_timeout(&mut self, now: $crate::core::Millis) {
                self.engine.handle_timeout(now)
            }
            fn poll_transmit(&mut self) -> Option<$crate::core::Transmit> {
                self.engine.poll_transmit()
            }
            fn poll_event(&mut self) -> Option<$crate::core::Event> {
                self.engine.poll_event()
            }
            fn poll_timeout(&self) -> Option<$crate::core::Millis> {
                self.engine.poll_timeout()
            }
        }
    };
}
pub(crate) use delegate_lock_machine;
