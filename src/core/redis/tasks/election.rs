//! Elections' tasks (see [`election`](super::super::election) for the
//! recipe): `proclaim` (an owner-checked record write), `leader` (one read
//! round) and `observe` (read, then wait for a push or the fallback timer,
//! read again). A campaign is an acquire (`acquire.rs`, its `Record` phase).

use super::super::context::{Context, PUSH_FALLBACK_MS};
use super::super::election::{self, agreed, soonest_expiry, LeaderReply};
use super::super::round::{FlagCount, Round};
use super::super::subscription::wake_channel;
use super::super::task::{Next, Push, Task};
use super::super::value::RedisCommand;
use crate::core::names::validate_name;
use crate::core::*;

// ---------------------------------------------------------------- proclaim

pub(in super::super) struct ProclaimTask {
    op: OpId,
    lock: LockId,
    name: String,
    /// The owner token the round ran with: the answer applies only to it.
    token: String,
    cmd: Option<RedisCommand>,
}

/// Validates a proclaim of `lock`: a task, or the operation already
/// answered (`NotHeld` for a lock this machine does not hold).
pub(in super::super) fn proclaim(
    cx: &mut Context,
    lock: LockId,
    value: &str,
) -> Result<Result<ProclaimTask, OpId>, LockError> {
    check_campaign_value(value)?;
    if cx.locks.get(&lock).is_some_and(|h| !h.leader) {
        return Err(LockError::invalid(
            "only a leadership (a campaign's lock) can proclaim a value",
        ));
    }
    let op = cx.rt.out.op_id();
    let Some(h) = cx.locks.get(&lock) else {
        let error = LockError::NotHeld {
            backend: cx.backend_str(),
            name: cx.ended_name(lock),
        };
        cx.rt.out.fail(op, error);
        return Ok(Err(op));
    };
    let cmd = election::record(&h.key, &h.token, h.fencing_token, value);
    Ok(Ok(ProclaimTask {
        op,
        lock,
        name: h.name.clone(),
        token: h.token.clone(),
        cmd: Some(cmd),
    }))
}

impl Task for ProclaimTask {
    fn op(&self) -> Option<OpId> {
        Some(self.op)
    }

    fn step(mut self: Box<Self>, cx: &mut Context, round: Option<Round>, _now: Millis) -> Next {
        let Some(round) = round else {
            return match self.cmd.take() {
                Some(cmd) => {
                    let targets = cx.all_nodes();
                    Next::Round {
                        task: self,
                        cmd,
                        targets,
                    }
                }
                None => {
                    cx.rt.out.fail(
                        self.op,
                        LockError::internal("a proclaim was stepped without its round"),
                    );
                    Next::Done
                }
            };
        };
        let ProclaimTask {
            op,
            lock,
            name,
            token,
            ..
        } = *self;
        let (n, q, backend) = (cx.node_count(), cx.quorum_size(), cx.backend_str());
        let c = FlagCount::of(&round);
        if !cx.locks.get(&lock).is_some_and(|h| h.token == token) {
            cx.rt.out.fail(op, LockError::NotHeld { backend, name });
            return Next::Done;
        }
        if c.confirmed >= q {
            cx.rt.out.complete(op, Ok(Outcome::Proclaimed { lock }));
            return Next::Done;
        }
        if c.refused > n - q {
            let error = LockError::Lost {
                backend,
                name,
                reason: LostReason::KeyGone.to_string(),
            };
            cx.rt.out.fail(op, error);
            cx.lose(lock, LostReason::KeyGone);
            return Next::Done;
        }
        let error = cx.round_error(&name, c.first_error.as_ref(), c.confirmed);
        cx.rt.out.fail(op, error);
        Next::Done
    }
}

// ---------------------------------------------------------------- reading

/// What a round of [`election::LEADER`] says: the state a quorum agrees on
/// and when a holder's key expires next, or the round's error.
fn read(
    cx: &Context,
    name: &str,
    round: &Round,
) -> Result<(Option<Leadership>, Option<u64>), LockError> {
    let parsed = round.parsed(election::parse_leader);
    let answers: Vec<LeaderReply> = parsed
        .iter()
        .filter_map(|(_, r)| r.as_ref().ok().cloned())
        .collect();
    let q = cx.quorum_size();
    if answers.len() < q {
        return Err(cx.round_error(name, Round::first_error(&parsed), answers.len()));
    }
    Ok((agreed(&answers, q), soonest_expiry(&answers)))
}

// ---------------------------------------------------------------- leader

pub(in super::super) struct LeaderTask {
    op: OpId,
    name: String,
    key: String,
    sent: bool,
}

impl LeaderTask {
    pub(in super::super) fn new(cx: &mut Context, name: &str) -> Result<Self, LockError> {
        validate_name(name)?;
        let (key, _) = cx.keys_for(name);
        Ok(LeaderTask {
            op: cx.rt.out.op_id(),
            name: name.to_string(),
            key,
            sent: false,
        })
    }
}

impl Task for LeaderTask {
    fn op(&self) -> Option<OpId> {
        Some(self.op)
    }

    fn step(mut self: Box<Self>, cx: &mut Context, round: Option<Round>, _now: Millis) -> Next {
        let Some(round) = round else {
            if self.sent {
                cx.rt.out.fail(
                    self.op,
                    LockError::internal("a leader query was stepped without its round"),
                );
                return Next::Done;
            }
            self.sent = true;
            let cmd = election::leader(&self.key);
            let targets = cx.all_nodes();
            return Next::Round {
                task: self,
                cmd,
                targets,
            };
        };
        let answer = read(cx, &self.name, &round).map(|(l, _)| Outcome::Leader(l));
        cx.rt.out.complete(self.op, answer);
        Next::Done
    }
}

// ---------------------------------------------------------------- observe

pub(in super::super) struct ObserveTask {
    op: OpId,
    backend: BackendKind,
    name: String,
    key: String,
    channel: String,
    known: Option<Leadership>,
    wait: Wait,
    deadline: Option<Millis>,
    /// Reading (`None`) or asleep until then.
    sleep: Option<Millis>,
    /// Subscribed once the first read found no change.
    listening: bool,
    /// Per node: its subscription is confirmed.
    live: Vec<bool>,
    /// Something was pushed since the read in flight began: read again.
    woken: bool,
    /// Rounds in a row that got no quorum of answers.
    failures: u32,
    /// Set by cancel: end with this error.
    abort: Option<LockError>,
}

impl ObserveTask {
    pub(in super::super) fn new(
        cx: &mut Context,
        now: Millis,
        name: &str,
        known: Option<Leadership>,
        wait: Wait,
    ) -> Result<Self, LockError> {
        validate_name(name)?;
        if let Some(k) = &known {
            check_campaign_value(&k.value)?;
        }
        let (key, _) = cx.keys_for(name);
        Ok(ObserveTask {
            op: cx.rt.out.op_id(),
            backend: cx.s.backend,
            name: name.to_string(),
            channel: wake_channel(&key),
            key,
            known,
            wait,
            deadline: wait.deadline(now),
            sleep: Some(now),
            listening: false,
            live: vec![false; cx.node_count()],
            woken: false,
            failures: 0,
            abort: None,
        })
    }

    /// The next read of the leader state.
    fn read_round(mut self: Box<Self>, cx: &Context) -> Next {
        self.sleep = None;
        self.woken = false;
        let cmd = election::leader(&self.key);
        let targets = cx.all_nodes();
        Next::Round {
            task: self,
            cmd,
            targets,
        }
    }

    /// Sleeps until `at`, bounded by the wait's deadline.
    fn sleep_until(mut self: Box<Self>, at: Millis) -> Next {
        let at = self.deadline.map_or(at, |d| at.min(d));
        self.sleep = Some(at);
        Next::Sleep {
            task: self,
            until: at,
        }
    }

    /// Whether every holder's publish reaches a confirmed subscription (a
    /// holder has a quorum of nodes).
    fn push_covers(&self, cx: &Context) -> bool {
        let live = self.live.iter().filter(|l| **l).count();
        live > cx.node_count() - cx.quorum_size()
    }

    fn after_read(mut self: Box<Self>, cx: &mut Context, round: Round, now: Millis) -> Next {
        if let Some(e) = self.abort.take() {
            cx.rt.out.fail(self.op, e);
            return Next::Done;
        }
        let timed_out = self.deadline.is_some_and(|d| now >= d);
        let (state, expiry) = match read(cx, &self.name, &round) {
            Ok(r) => r,
            Err(e) => {
                self.failures += 1;
                if self.wait == Wait::Try || timed_out || self.failures > cx.s.retry_count {
                    cx.rt.out.fail(self.op, e);
                    return Next::Done;
                }
                let at = now.saturating_add(cx.s.retry_delay_ms.max(1));
                return self.sleep_until(at);
            }
        };
        self.failures = 0;
        if self.wait == Wait::Try || state != self.known || timed_out {
            cx.rt.out.complete(self.op, Ok(Outcome::Leader(state)));
            return Next::Done;
        }
        self.listening = true;
        if self.woken {
            return self.read_round(cx);
        }
        let cap = if self.push_covers(cx) {
            PUSH_FALLBACK_MS.max(cx.s.retry_delay_ms)
        } else {
            cx.s.retry_delay_ms
        };
        // An expiry publishes nothing: look again just after it.
        let delay = expiry.map_or(cap, |p| p.saturating_add(1).min(cap)).max(1);
        self.sleep_until(now.saturating_add(delay))
    }
}

impl Task for ObserveTask {
    fn op(&self) -> Option<OpId> {
        Some(self.op)
    }

    fn listens(&self) -> Option<&str> {
        (self.listening && self.abort.is_none()).then_some(self.channel.as_str())
    }

    fn on_push(&mut self, node: usize, push: Push, now: Millis) -> bool {
        if let Some(live) = self.live.get_mut(node) {
            *live = push != Push::Down;
        }
        // A message, a confirmation (a change published before it was
        // live is then covered) or a lost stream (the short timer applies
        // again): read now.
        self.woken = true;
        match &mut self.sleep {
            Some(until) => {
                *until = now;
                true
            }
            None => false,
        }
    }

    fn cancel(&mut self) {
        self.abort.get_or_insert(LockError::Aborted {
            backend: self.backend.as_str(),
            name: self.name.clone(),
        });
        if let Some(until) = &mut self.sleep {
            *until = 0;
        }
    }

    fn step(self: Box<Self>, cx: &mut Context, round: Option<Round>, now: Millis) -> Next {
        match (round, self.sleep) {
            (Some(round), _) => self.after_read(cx, round, now),
            (None, Some(until)) => {
                if let Some(e) = self.abort.clone() {
                    cx.rt.out.fail(self.op, e);
                    return Next::Done;
                }
                if now < until && !self.woken {
                    return self.sleep_until(until);
                }
                self.read_round(cx)
            }
            (None, None) => {
                cx.rt.out.fail(
                    self.op,
                    LockError::internal("an observe was stepped without its round"),
                );
                Next::Done
            }
        }
    }
}
