//! One round: the same script sent to a set of nodes in parallel, complete
//! when every node has answered, failed or timed out (the requests and their
//! deadlines live in the core's runtime; a round only collects answers).

use super::value::{RedisCommand, RedisValue};
use crate::core::{LockError, Millis, RequestId};

/// Why a node gave no usable answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeError {
    /// The request timed out (the core's deadline or the driver's).
    Timeout,
    /// The request certainly did not reach the node (connection refused).
    NotSent(String),
    /// The connection broke, or the answer came in an unexpected form; the node
    /// may have run the command.
    Transport(String),
    /// HTTP-level refusal or an unusable body.
    Http {
        /// The HTTP status, when there was a response.
        status: Option<u16>,
        /// What was wrong, already sanitized.
        message: String,
    },
    /// Redis ran the script and returned an error, or a reply of the wrong shape.
    Redis(String),
    /// The node answered a connection's set-up (`AUTH`, `SELECT`) with a
    /// refusal: nothing after it ran. Reported like an HTTP refusal of the
    /// credentials (the server answered and refused us), not as transport.
    Refused(String),
}

impl NodeError {
    /// Whether the node may have run the command anyway. A refused
    /// connection, a refused set-up, or an HTTP refusal of the credentials,
    /// means it did not;
    /// anything else (timeouts, broken connections, Redis errors in the
    /// middle of a script) may have left its effect behind.
    pub fn maybe_applied(&self) -> bool {
        !matches!(
            self,
            NodeError::NotSent(_)
                | NodeError::Refused(_)
                | NodeError::Http {
                    status: Some(401 | 403),
                    ..
                }
        )
    }

    /// The [`LockError`] reporting this node error for lock `name` on `backend`.
    pub fn to_lock_error(&self, backend: &'static str, name: &str) -> LockError {
        let name = name.to_string();
        match self {
            NodeError::Timeout => LockError::Transport {
                backend,
                name,
                message: "request timed out".into(),
            },
            NodeError::Transport(m) | NodeError::NotSent(m) => LockError::Transport {
                backend,
                name,
                message: m.clone(),
            },
            NodeError::Http { status, message } => LockError::Backend {
                backend,
                name,
                status: *status,
                message: message.clone(),
            },
            NodeError::Redis(m) | NodeError::Refused(m) => LockError::Backend {
                backend,
                name,
                status: None,
                message: m.clone(),
            },
        }
    }
}

/// One node's part in a round.
#[derive(Clone, Debug)]
pub enum Slot {
    /// Not part of this round.
    Skipped,
    /// The node's request is in flight.
    Pending(RequestId),
    /// The node answered, or gave no usable answer.
    Done(Result<RedisValue, NodeError>),
}

/// One command sent to a set of nodes in parallel, and their answers so far.
#[derive(Debug)]
pub struct Round {
    /// The command every node in the round runs.
    pub cmd: RedisCommand,
    /// When the first request of the round was handed to the driver.
    pub started: Millis,
    /// One slot per node, by node index.
    pub slots: Vec<Slot>,
    /// Per node: its request went as `EVALSHA` (see `scripts::as_evalsha`).
    pub sha: Vec<bool>,
    /// When the round stops waiting for its slow nodes, once its outcome
    /// was decided without them (see `Task::settled`); `None` until then.
    pub settle_at: Option<Millis>,
}

impl Round {
    /// True once no node's request is in flight.
    pub fn is_done(&self) -> bool {
        !self.slots.iter().any(|s| matches!(s, Slot::Pending { .. }))
    }

    /// Records node `node`'s answer to request `id`; false when the round
    /// was not waiting for that request.
    pub fn answer(
        &mut self,
        node: usize,
        id: RequestId,
        result: Result<RedisValue, NodeError>,
    ) -> bool {
        match self.slots.get_mut(node) {
            Some(slot) if matches!(&*slot, Slot::Pending(i) if *i == id) => {
                *slot = Slot::Done(result);
                true
            }
            _ => false,
        }
    }

    /// Stops waiting for the nodes still pending: their slots become
    /// [`NodeError::Timeout`] (the request may still apply, exactly as a
    /// timed-out one may). Returns their requests, for the caller to cancel.
    pub fn abandon_pending(&mut self) -> Vec<RequestId> {
        let mut ids = Vec::new();
        for slot in &mut self.slots {
            if let Slot::Pending(id) = *slot {
                ids.push(id);
                *slot = Slot::Done(Err(NodeError::Timeout));
            }
        }
        ids
    }

    /// How many nodes answered `yes` so far, and how many are still pending.
    fn quorum_count(&self, yes: impl Fn(&RedisValue) -> bool) -> (usize, usize) {
        let (mut count, mut pending) = (0, 0);
        for slot in &self.slots {
            match slot {
                Slot::Pending(_) => pending += 1,
                Slot::Done(Ok(v)) if !matches!(v, RedisValue::Error(_)) && yes(v) => count += 1,
                _ => {}
            }
        }
        (count, pending)
    }

    /// Whether a round of several nodes can no longer reach `quorum`
    /// answers `yes`, whatever the nodes still pending answer.
    pub fn quorum_lost(&self, quorum: usize, yes: impl Fn(&RedisValue) -> bool) -> bool {
        let (count, pending) = self.quorum_count(yes);
        self.several_nodes() && pending > 0 && count + pending < quorum
    }

    /// Whether a round of several nodes has `quorum` answers `yes` already,
    /// or can no longer reach it.
    pub fn quorum_decided(&self, quorum: usize, yes: impl Fn(&RedisValue) -> bool) -> bool {
        let (count, pending) = self.quorum_count(yes);
        self.several_nodes() && pending > 0 && (count >= quorum || count + pending < quorum)
    }

    /// Whether a round of several nodes has answers from `quorum` nodes in
    /// (errors included), fewer than `quorum` of them `yes`, and nodes still
    /// pending: success then rests on every slow node saying `yes`. A
    /// Redlock attempt split between contenders is such a round when a
    /// minority is frozen; waiting the whole request timeout for it kept the
    /// attempt's keys on the live nodes that long, so that contending
    /// waiters kept failing one another (reliability 11b under load).
    pub fn quorum_answered_short(&self, quorum: usize, yes: impl Fn(&RedisValue) -> bool) -> bool {
        let (count, pending) = self.quorum_count(yes);
        let answered = self
            .slots
            .iter()
            .filter(|s| matches!(s, Slot::Done(_)))
            .count();
        self.several_nodes() && pending > 0 && answered >= quorum && count < quorum
    }

    fn several_nodes(&self) -> bool {
        self.slots
            .iter()
            .filter(|s| !matches!(s, Slot::Skipped))
            .count()
            > 1
    }

    /// Results of the nodes that took part, by node index.
    pub fn results(&self) -> impl Iterator<Item = (usize, &Result<RedisValue, NodeError>)> {
        self.slots.iter().enumerate().filter_map(|(i, s)| match s {
            Slot::Done(r) => Some((i, r)),
            _ => None,
        })
    }

    /// Parses every result with `parse`; a reply that does not parse
    /// becomes a node error.
    pub fn parsed<T>(
        &self,
        parse: impl Fn(&RedisValue) -> Result<T, String>,
    ) -> Vec<(usize, Result<T, NodeError>)> {
        self.results()
            .map(|(i, r)| {
                let v = match r {
                    Ok(RedisValue::Error(e)) => Err(NodeError::Redis(e.clone())),
                    Ok(v) => parse(v).map_err(NodeError::Redis),
                    Err(e) => Err(e.clone()),
                };
                (i, v)
            })
            .collect()
    }

    /// The first node error, if any (single-node error reports).
    pub fn first_error<T>(parsed: &[(usize, Result<T, NodeError>)]) -> Option<&NodeError> {
        parsed.iter().find_map(|(_, r)| r.as_ref().err())
    }
}

/// How the nodes answered an owner-checked script (extend, release): done
/// on our key, not our key (gone or foreign), or no usable answer.
pub(super) struct FlagCount {
    pub confirmed: usize,
    pub refused: usize,
    pub failed: usize,
    pub first_error: Option<NodeError>,
}

impl FlagCount {
    pub(super) fn of(round: &Round) -> FlagCount {
        Self::count(round.parsed(super::scripts::parse_flag))
    }

    /// A release round's: a decrement of counted holds (reply 2) is done
    /// on our key like a delete.
    pub(super) fn of_release(round: &Round) -> FlagCount {
        Self::count(round.parsed(|v| {
            super::scripts::parse_release(v).map(|r| r != super::scripts::Released::NotOurs)
        }))
    }

    fn count(parsed: Vec<(usize, Result<bool, NodeError>)>) -> FlagCount {
        let mut c = FlagCount {
            confirmed: 0,
            refused: 0,
            failed: 0,
            first_error: Round::first_error(&parsed).cloned(),
        };
        for (_, r) in &parsed {
            match r {
                Ok(true) => c.confirmed += 1,
                Ok(false) => c.refused += 1,
                Err(_) => c.failed += 1,
            }
        }
        c
    }
}
