//! Acquiring: attempts, cleanup after a failed attempt, waiting and retries.
//!
//! One attempt = one round of the acquire script to every node, with a fresh
//! owner token. It succeeds with a quorum of grants while
//! `ttl − elapsed − drift > 0`, `elapsed` counted from the start of *this*
//! attempt. Otherwise every node that granted, or whose answer is unknown
//! (error, timeout), gets an owner-checked delete before anything else
//! happens; nodes that answered "held by someone else" cannot have our key.
//!
//! Then:
//! - contention (the answering nodes could have formed a quorum): `Wait::Try`
//!   ends with `NotAcquired`; a waiter sleeps until the other holders' keys
//!   would let a quorum go free (their PTTL), but at most `retry_delay`,
//!   plus a random `0..=retry_jitter` — so a released lock is noticed within
//!   one retry delay and an expiring one right when it expires;
//! - unavailability (too few answers, or a grant that came too late): retried
//!   after `retry_delay ± retry_jitter` up to `retry_count` times, then the
//!   operation fails (`NoQuorum` on Redlock, the node's error on one node).
//!
//! A cancel (or close) never interrupts a round in flight: its outcome is
//! awaited (bounded by the request timeout), then cleaned up, so no key is
//! left behind by a request whose result was unknown at cancel time.

use super::engine::{Engine, Held, Task, TaskKind, TOKEN_BYTES};
use super::quorum::{expires_at, free_quorum_in, verdict, AttemptVerdict};
use super::scripts::{self, AcquireReply};
use crate::core::names::validate_name;
use crate::core::*;

pub(super) struct Acquire {
    wait: Wait,
    deadline: Option<Millis>,
    ttl: u64,
    /// The current attempt's owner token.
    token: String,
    attempt_start: Millis,
    phase: Phase,
    unavailable: u32,
    /// Set by cancel/close: end with this error once nothing is left behind.
    abort: Option<LockError>,
}

enum Phase {
    Sleep { until: Millis },
    Attempt,
    /// Strict fencing: raising the counters to `fence` before handing out.
    Raise { fence: u64 },
    Cleanup { next: AfterCleanup },
    /// Handed out (or given up): the task is over.
    Done,
}

enum AfterCleanup {
    Retry { at: Millis },
    NotAcquired,
    Fail(LockError),
}

impl Acquire {
    pub(super) fn sleeping_until(&self) -> Option<Millis> {
        match self.phase {
            Phase::Sleep { until } => Some(if self.abort.is_some() { 0 } else { until }),
            _ => None,
        }
    }

    pub(super) fn abort(&mut self, error: LockError) {
        if self.abort.is_none() {
            self.abort = Some(error);
        }
    }
}

impl Engine {
    pub(crate) fn acquire(&mut self, now: Millis, name: &str, opts: &AcquireOptions) -> Result<OpId, LockError> {
        if self.closed {
            return Err(self.closed_error());
        }
        validate_name(name)?;
        let ttl = opts.ttl_ms.unwrap_or(self.s.ttl_ms);
        super::validate_lock_ttl(ttl, self.s.request_timeout_ms, self.s.drift_factor)?;
        let op = self.out.op_id();
        let (key, fence_key) = self.keys_for(name);
        let deadline = opts.wait.deadline(now);
        let a = Acquire {
            wait: opts.wait,
            deadline,
            ttl,
            token: String::new(),
            attempt_start: now,
            phase: Phase::Sleep { until: now },
            unavailable: 0,
            abort: None,
        };
        let task = Task { op: Some(op), name: name.to_string(), key, fence_key, round: None, kind: TaskKind::Acquire(a) };
        self.add_task(task, now);
        Ok(op)
    }

    /// Runs the acquire task until it waits for something; false when it ended.
    pub(super) fn step_acquire(&mut self, tid: u64, task: &mut Task, now: Millis) -> bool {
        loop {
            if task.round.as_ref().is_some_and(|r| !r.is_done()) {
                return true;
            }
            let TaskKind::Acquire(a) = &mut task.kind else { return false };
            match std::mem::replace(&mut a.phase, Phase::Attempt) {
                Phase::Sleep { until } => {
                    if let Some(e) = a.abort.clone() {
                        return self.finish(task, AfterCleanup::Fail(e));
                    }
                    if now < until {
                        a.phase = Phase::Sleep { until };
                        return true;
                    }
                    a.token = random_hex(self.entropy.as_mut(), TOKEN_BYTES);
                    a.attempt_start = now;
                    let cmd = scripts::acquire(&task.key, &task.fence_key, &a.token, a.ttl);
                    let all = self.all_nodes();
                    self.start_task_round(tid, task, cmd, &all, now);
                }
                Phase::Done => return false,
                Phase::Attempt => self.after_attempt(tid, task, now),
                Phase::Raise { fence } => self.after_raise(tid, task, fence, now),
                Phase::Cleanup { next } => {
                    task.round = None;
                    let TaskKind::Acquire(a) = &mut task.kind else { return false };
                    match (a.abort.clone(), next) {
                        (Some(e), _) => return self.finish(task, AfterCleanup::Fail(e)),
                        (None, AfterCleanup::Retry { at }) => a.phase = Phase::Sleep { until: at },
                        (None, next) => return self.finish(task, next),
                    }
                }
            }
        }
    }

    fn after_attempt(&mut self, tid: u64, task: &mut Task, now: Millis) {
        let Some(round) = task.round.take() else { return self.set_done(task) };
        let parsed = round.parsed(scripts::parse_acquire);
        let n = self.node_count();
        let mut granted = 0;
        let mut held_pttls = Vec::new();
        let mut fence = 0u64;
        let mut maybe_ours = vec![false; n];
        for (i, r) in &parsed {
            match r {
                Ok(AcquireReply::Granted { fence: f }) => {
                    granted += 1;
                    maybe_ours[*i] = true;
                    fence = fence.max(*f);
                }
                // Every answering node's counter counts, granted or not.
                Ok(AcquireReply::Held { fence: f, pttl }) => {
                    held_pttls.push(*pttl);
                    fence = fence.max(*f);
                }
                Err(e) => maybe_ours[*i] = e.maybe_applied(),
            }
        }
        let TaskKind::Acquire(a) = &mut task.kind else { return };
        if let Some(e) = a.abort.clone() {
            return self.cleanup(tid, task, maybe_ours, AfterCleanup::Fail(e), now);
        }
        let next = match verdict(n, granted, held_pttls.len()) {
            AttemptVerdict::Quorum => match expires_at(a.attempt_start, now, a.ttl, self.s.drift_factor) {
                Some(_) if self.s.strict_fencing && n > 1 => {
                    a.phase = Phase::Raise { fence };
                    let cmd = scripts::extend(&task.key, &task.fence_key, &a.token, a.ttl, fence);
                    let all = self.all_nodes();
                    return self.start_task_round(tid, task, cmd, &all, now);
                }
                Some(exp) => return self.grant(task, fence, exp),
                None => {
                    let e = LockError::Transport {
                        backend: self.backend_str(),
                        name: task.name.clone(),
                        message: "the nodes answered too late: the TTL was used up before the lock could be handed out".into(),
                    };
                    self.unavailable_next(task, e, now)
                }
            },
            AttemptVerdict::Unavailable => {
                let e = self.round_error(&task.name, super::round::Round::first_error(&parsed), granted);
                self.unavailable_next(task, e, now)
            }
            AttemptVerdict::Contended => self.contended_next(task, held_pttls, now),
        };
        self.cleanup(tid, task, maybe_ours, next, now);
    }

    fn after_raise(&mut self, tid: u64, task: &mut Task, fence: u64, now: Millis) {
        let Some(round) = task.round.take() else { return self.set_done(task) };
        let parsed = round.parsed(scripts::parse_flag);
        let still_ours = parsed.iter().filter(|(_, r)| matches!(r, Ok(true))).count();
        let all = self.all_nodes();
        let TaskKind::Acquire(a) = &mut task.kind else { return };
        if let Some(e) = a.abort.clone() {
            return self.cleanup(tid, task, all, AfterCleanup::Fail(e), now);
        }
        let exp = expires_at(a.attempt_start, now, a.ttl, self.s.drift_factor);
        match exp {
            Some(exp) if still_ours >= self.quorum_size() => self.grant(task, fence, exp),
            _ => {
                let e = self.round_error(&task.name, super::round::Round::first_error(&parsed), still_ours);
                let next = self.unavailable_next(task, e, now);
                self.cleanup(tid, task, all, next, now);
            }
        }
    }

    fn unavailable_next(&mut self, task: &mut Task, error: LockError, now: Millis) -> AfterCleanup {
        let TaskKind::Acquire(a) = &mut task.kind else { return AfterCleanup::Fail(error) };
        a.unavailable += 1;
        if a.wait == Wait::Try || a.unavailable > self.s.retry_count {
            return AfterCleanup::Fail(error);
        }
        let j = self.s.retry_jitter_ms;
        let delay = self.s.retry_delay_ms.saturating_sub(j) + jitter(self.entropy.as_mut(), j.saturating_mul(2));
        Self::bounded_by_deadline(a, &task.name, self.s.backend, now, now + delay.max(1))
    }

    fn contended_next(&mut self, task: &mut Task, held_pttls: Vec<Option<u64>>, now: Millis) -> AfterCleanup {
        let n = self.node_count();
        let TaskKind::Acquire(a) = &mut task.kind else { return AfterCleanup::NotAcquired };
        if a.wait == Wait::Try {
            return AfterCleanup::NotAcquired;
        }
        let base = free_quorum_in(n, held_pttls).map_or(self.s.retry_delay_ms, |p| p.min(self.s.retry_delay_ms));
        let delay = base + jitter(self.entropy.as_mut(), self.s.retry_jitter_ms);
        Self::bounded_by_deadline(a, &task.name, self.s.backend, now, now + delay.max(1))
    }

    /// A retry at `at`, or at the wait deadline (one last attempt), or a timeout.
    fn bounded_by_deadline(a: &Acquire, name: &str, backend: BackendKind, now: Millis, at: Millis) -> AfterCleanup {
        match a.deadline {
            Some(d) if now >= d => AfterCleanup::Fail(LockError::Timeout { backend: backend.as_str(), name: name.to_string() }),
            Some(d) => AfterCleanup::Retry { at: at.min(d) },
            None => AfterCleanup::Retry { at },
        }
    }

    /// Deletes this attempt's key where it may exist, then continues with `next`.
    fn cleanup(&mut self, tid: u64, task: &mut Task, targets: Vec<bool>, next: AfterCleanup, now: Millis) {
        let TaskKind::Acquire(a) = &mut task.kind else { return };
        a.phase = Phase::Cleanup { next };
        if targets.iter().any(|t| *t) {
            let cmd = scripts::release(&task.key, &task.fence_key, &a.token, 0);
            self.start_task_round(tid, task, cmd, &targets, now);
        }
    }

    fn finish(&mut self, task: &mut Task, next: AfterCleanup) -> bool {
        // No op: the user already got its answer (close).
        let Some(op) = task.op else { return false };
        match next {
            AfterCleanup::NotAcquired => self.out.complete(op, Ok(Outcome::NotAcquired)),
            AfterCleanup::Fail(error) => self.out.fail(op, error),
            AfterCleanup::Retry { .. } => {}
        }
        false
    }

    /// Hands the lock out: `fence` is its token, `exp` its validity end.
    fn grant(&mut self, task: &mut Task, fence: u64, exp: Millis) {
        let TaskKind::Acquire(a) = &mut task.kind else { return };
        let Some(op) = task.op else { return };
        let id = self.out.lock_id();
        let handle = LockHandle {
            v: 1,
            backend: self.s.backend,
            name: task.name.clone(),
            key: task.key.clone(),
            owner: a.token.clone(),
            fencing_token: fence,
            revision: 0,
        };
        let info = LockInfo { id, name: task.name.clone(), fencing_token: fence, expires_at: exp, handle };
        let held = Held {
            id,
            name: task.name.clone(),
            key: task.key.clone(),
            fence_key: task.fence_key.clone(),
            token: a.token.clone(),
            ttl: a.ttl,
            fencing_token: fence,
            expires_at: exp,
            renew: self.s.auto_extend,
            next_renewal: self.s.auto_extend.then(|| a.attempt_start + a.ttl / 3),
            renewal: None,
            last_error: None,
        };
        self.locks.insert(id, held);
        self.out.complete(op, Ok(Outcome::Acquired(info)));
        a.phase = Phase::Done;
    }

    fn set_done(&mut self, task: &mut Task) {
        if let TaskKind::Acquire(a) = &mut task.kind {
            a.phase = Phase::Done;
        }
    }
}
