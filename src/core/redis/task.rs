//! The one interface between the engine and its tasks.
//!
//! A task is a small state machine (one file each under `tasks/`) taken by
//! value at every step and handing back what it waits for next: a round of
//! one command to a set of nodes, a point in time, or nothing (it ended,
//! having reported its outcome through the context's outbox). The engine
//! sends the round, keeps the task, and steps it again with the finished
//! round or when its time comes; tasks never send, time out or cancel
//! requests themselves.

use super::context::Context;
use super::round::Round;
use super::value::RedisCommand;
use crate::core::{LockError, Millis, OpId};

pub(super) trait Task: Send {
    /// The user's operation this task answers (none for background work).
    fn op(&self) -> Option<OpId>;

    /// One step: `round` is the finished round the task asked for, `None` on
    /// its first step and when its sleep ended (or it was aborted).
    fn step(self: Box<Self>, cx: &mut Context, round: Option<Round>, now: Millis) -> Next;

    /// Whether the outcome of the task's `round` is decided before every
    /// node answered (Redlock: a quorum granted, or none can form any more;
    /// `quorum` is the machine's). The engine then waits a short grace for
    /// the rest (a tenth of the request timeout) and stops: it cancels the
    /// requests still out and records them as timed out (they may still
    /// apply, exactly as a timed-out request may). So the per-node timeout
    /// holds up only a round whose outcome hangs on the slow node, and a
    /// frozen minority of nodes cannot stall every attempt (issue 26).
    fn settled(&self, _round: &Round, _quorum: usize) -> bool {
        false
    }

    /// The wake-up channel this task wants to hear while it waits (see
    /// [`super::subscription`]); the engine keeps one subscription per node
    /// open for it, and closes them when this turns `None` or the task ends.
    fn listens(&self) -> Option<&str> {
        None
    }

    /// Something happened on the task's subscription to `node`. `true`
    /// asks for a step now if the task sleeps (a task in a round remembers
    /// it for when the round ends).
    fn on_push(&mut self, _node: usize, _push: Push, _now: Millis) -> bool {
        false
    }

    /// The user cancelled the operation: end with `Aborted` as soon as
    /// nothing is left behind. Short tasks let their answer decide.
    fn cancel(&mut self) {}

    /// The machine closes (see [`OnClose`]).
    fn on_close(&mut self, _error: &LockError) -> OnClose {
        OnClose::Stop
    }
}

/// What a task waits for after a step.
pub(super) enum Next {
    /// Run `cmd` on the nodes with `targets[i]`, then step again.
    Round {
        task: Box<dyn Task>,
        cmd: RedisCommand,
        targets: Vec<bool>,
    },
    /// Step again at `until` (at once if it has passed).
    Sleep { task: Box<dyn Task>, until: Millis },
    /// The task ended.
    Done,
}

impl Next {
    pub(super) fn round(task: impl Task + 'static, cmd: RedisCommand, targets: Vec<bool>) -> Next {
        Next::Round {
            task: Box::new(task),
            cmd,
            targets,
        }
    }

    pub(super) fn sleep(task: impl Task + 'static, until: Millis) -> Next {
        Next::Sleep {
            task: Box::new(task),
            until,
        }
    }
}

/// What becomes of a task when the machine closes.
pub(super) enum OnClose {
    /// Keep running; it answers its operation itself (a release).
    Finish,
    /// Keep running silently until nothing is left behind; the engine
    /// answers its operation with `Closed` now (an acquire whose round may
    /// have created keys).
    Detach,
    /// Stop now: the engine answers its operation with `Closed` and cancels
    /// its requests.
    Stop,
}

/// An event of a task's wake-up subscription on one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Push {
    /// The server confirmed it: no later publish is missed while it lasts.
    Live,
    /// A message arrived (a holder released), with its payload.
    Message(Vec<u8>),
    /// The stream ended, failed, timed out or could not be read.
    Down,
}
