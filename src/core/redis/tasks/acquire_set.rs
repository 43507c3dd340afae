//! `AcquireAll` of free names in one script (one node whose host accepts a
//! script over several hash slots: `Settings::cross_slot_scripts`).
//!
//! [`MultiLock`](crate::core::MultiLock) asks the machine (its
//! `atomic_sets` capability) to take a whole set at once before it falls
//! back to its one-name-at-a-time recipe. Here that is a single **try**:
//! one `EVAL` of [`scripts::ACQUIRE_SET`], which finds every name free (no
//! key of any kind but its fencing counter) and takes each exactly as the
//! ordinary acquire script does (same key, a fresh owner token per name,
//! `PX ttl`, `INCR` of the name's counter), or takes nothing.
//!
//! - Taken: each name is an ordinary held lock (released, extended,
//!   renewed, inspected, resumed and re-entered like any other), its
//!   validity counted from the start of the request, as for one name.
//! - Not taken: [`Outcome::NotAcquired`], the wait bound unused (waiting is
//!   the fallback's). So is a set with a name this client already holds,
//!   without a request.
//! - A failure after which the script may have run (transport error,
//!   timeout, a malformed reply), a grant that came too late to be valid,
//!   and a cancel or close while the script was in flight that it outlived
//!   with the set taken: every name's key is deleted, owner-checked (the
//!   ordinary release script with its token, waking nobody), before the set
//!   completes with its error.

use super::super::context::{Context, Held, TOKEN_BYTES};
use super::super::quorum::expires_at;
use super::super::round::Round;
use super::super::scripts;
use super::super::task::{Next, OnClose, Task};
use crate::core::names::validate_name;
use crate::core::operation::check_acquire_all_names;
use crate::core::*;

struct Member {
    name: String,
    key: String,
    fence_key: String,
    token: String,
}

enum Phase {
    /// The script is to be sent (first step).
    Start,
    /// The script is in flight.
    Attempt,
    /// Deleting member `next` (and the ones after it), then `ending`.
    Cleanup { next: usize },
}

pub(in super::super) struct AcquireSetTask {
    /// `None` once the user got an answer some other way (close).
    op: Option<OpId>,
    backend: BackendKind,
    members: Vec<Member>,
    ttl: u64,
    start: Millis,
    phase: Phase,
    /// Set by cancel/close: what to report once nothing is left behind.
    abort: Option<LockError>,
    /// What the cleanup ends with.
    ending: Option<LockError>,
}

impl AcquireSetTask {
    /// Validates the set. `Err(Ok(op))`: answered already (`NotAcquired`:
    /// this client holds one of the names).
    pub(in super::super) fn new(
        cx: &mut Context,
        now: Millis,
        names: Vec<String>,
        opts: &AcquireOptions,
    ) -> Result<Result<Self, OpId>, LockError> {
        check_acquire_all_names(&names)?;
        for name in &names {
            validate_name(name)?;
        }
        let ttl = opts.ttl_ms.unwrap_or(cx.s.ttl_ms);
        super::super::config::validate_lock_ttl(ttl, cx.s.request_timeout_ms, cx.s.drift_factor)?;
        let op = cx.rt.out.op_id();
        if names
            .iter()
            .any(|n| cx.locks.values().any(|h| h.name == *n))
        {
            // This client itself holds one of the names: the fallback
            // waits for it like any other acquire.
            cx.rt.out.complete(op, Ok(Outcome::NotAcquired));
            return Ok(Err(op));
        }
        let members = names
            .into_iter()
            .map(|name| {
                let (key, fence_key) = cx.keys_for(&name);
                Member {
                    name,
                    key,
                    fence_key,
                    token: String::new(),
                }
            })
            .collect();
        Ok(Ok(AcquireSetTask {
            op: Some(op),
            backend: cx.s.backend,
            members,
            ttl,
            start: now,
            phase: Phase::Start,
            abort: None,
            ending: None,
        }))
    }

    fn first(&self) -> &str {
        self.members.first().map_or("", |m| m.name.as_str())
    }

    fn attempt(mut self, cx: &mut Context, now: Millis) -> Next {
        if let Some(e) = self.abort.take() {
            return self.report(cx, Err(e));
        }
        self.start = now;
        for m in &mut self.members {
            m.token = random_hex(cx.entropy.as_mut(), TOKEN_BYTES);
        }
        let names: Vec<(&str, &str, &str)> = self
            .members
            .iter()
            .map(|m| (m.key.as_str(), m.fence_key.as_str(), m.token.as_str()))
            .collect();
        let cmd = scripts::acquire_set(&names, self.ttl);
        self.phase = Phase::Attempt;
        let targets = cx.all_nodes();
        Next::round(self, cmd, targets)
    }

    fn after_attempt(self, cx: &mut Context, round: Round, now: Millis) -> Next {
        let n = self.members.len();
        let parsed = round.parsed(|v| scripts::parse_acquire_set(v, n));
        let answer = parsed.into_iter().next().map(|(_, r)| r);
        match answer {
            Some(Ok(None)) => match self.abort.clone() {
                Some(e) => self.report(cx, Err(e)),
                None => self.report(cx, Ok(None)),
            },
            Some(Ok(Some(fences))) => {
                if let Some(e) = self.abort.clone() {
                    return self.cleanup(cx, e);
                }
                match expires_at(self.start, now, self.ttl, cx.s.drift_factor) {
                    Some(exp) => self.grant(cx, &fences, exp),
                    None => {
                        let e = LockError::Transport {
                            backend: self.backend.as_str(),
                            name: self.first().to_string(),
                            message: "the set was granted too late to be valid".into(),
                        };
                        self.cleanup(cx, e)
                    }
                }
            }
            Some(Err(e)) => {
                let error = self
                    .abort
                    .clone()
                    .unwrap_or_else(|| e.to_lock_error(self.backend.as_str(), self.first()));
                if e.maybe_applied() {
                    self.cleanup(cx, error)
                } else {
                    self.report(cx, Err(error))
                }
            }
            None => {
                let e = LockError::internal("an acquire set's round had no answer");
                self.cleanup(cx, e)
            }
        }
    }

    /// Deletes every member's key (owner-checked), then ends with `error`.
    fn cleanup(mut self, cx: &mut Context, error: LockError) -> Next {
        self.ending = Some(error);
        self.phase = Phase::Cleanup { next: 0 };
        self.cleanup_next(cx)
    }

    fn cleanup_next(mut self, cx: &mut Context) -> Next {
        let Phase::Cleanup { next } = self.phase else {
            return Next::Done;
        };
        let Some(m) = self.members.get(next) else {
            let error = self
                .ending
                .take()
                .unwrap_or_else(|| LockError::internal("an acquire set's cleanup without cause"));
            return self.report(cx, Err(error));
        };
        // Fence floor 0: nothing was handed out, nobody is woken.
        let cmd = scripts::release(&m.key, &m.fence_key, &m.token, 0);
        self.phase = Phase::Cleanup { next: next + 1 };
        let targets = cx.all_nodes();
        Next::round(self, cmd, targets)
    }

    /// Ends without a lock: `Ok(None)` is `NotAcquired`.
    fn report(self, cx: &mut Context, result: Result<Option<()>, LockError>) -> Next {
        if let Some(op) = self.op {
            match result {
                Ok(_) => cx.rt.out.complete(op, Ok(Outcome::NotAcquired)),
                Err(e) => cx.rt.out.fail(op, e),
            }
        }
        Next::Done
    }

    /// Every name is held: each an ordinary held lock (see `acquire.rs`'s
    /// `grant_now`), `fences[i]` name `i`'s token.
    fn grant(self, cx: &mut Context, fences: &[u64], exp: Millis) -> Next {
        let Some(op) = self.op else {
            return Next::Done;
        };
        let renew_at = self.start + self.ttl / 3;
        let mut infos = Vec::with_capacity(self.members.len());
        for (m, fence) in self.members.into_iter().zip(fences.iter().copied()) {
            let id = cx.rt.out.lock_id();
            let handle = LockHandle {
                v: 1,
                backend: cx.s.backend,
                name: m.name.clone(),
                key: m.key.clone(),
                owner: m.token.clone(),
                fencing_token: fence,
                revision: 0,
                kind: LockKind::Exclusive,
                slot: None,
            };
            infos.push(LockInfo {
                id,
                name: m.name.clone(),
                fencing_token: fence,
                expires_at: exp,
                handle,
            });
            let held = Held {
                id,
                name: m.name,
                wake_base: m.key.clone(),
                key: m.key,
                fence_key: m.fence_key,
                token: m.token,
                shared: false,
                leader: false,
                hold: None,
                ttl: self.ttl,
                fencing_token: fence,
                expires_at: exp,
                renew: cx.s.auto_extend,
                renewal: None,
                last_error: None,
            };
            cx.hold(held, renew_at);
        }
        cx.rt.out.complete(op, Ok(Outcome::AcquiredAll(infos)));
        Next::Done
    }
}

impl Task for AcquireSetTask {
    fn op(&self) -> Option<OpId> {
        self.op
    }

    fn cancel(&mut self) {
        if self.abort.is_none() {
            self.abort = Some(LockError::Aborted {
                backend: self.backend.as_str(),
                name: self.first().to_string(),
            });
        }
    }

    fn on_close(&mut self, error: &LockError) -> OnClose {
        self.op = None;
        if self.abort.is_none() {
            self.abort = Some(error.clone());
        }
        OnClose::Detach
    }

    fn step(self: Box<Self>, cx: &mut Context, round: Option<Round>, now: Millis) -> Next {
        let task = *self;
        match (&task.phase, round) {
            (Phase::Start, _) => task.attempt(cx, now),
            (Phase::Attempt, Some(round)) => task.after_attempt(cx, round, now),
            (Phase::Cleanup { .. }, _) => task.cleanup_next(cx),
            (Phase::Attempt, None) => {
                let e = LockError::internal("an acquire set was stepped without its round");
                task.cleanup(cx, e)
            }
        }
    }
}
