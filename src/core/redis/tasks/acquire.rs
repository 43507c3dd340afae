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
//!   ends with `NotAcquired`; a waiter subscribes to the lock's wake-up
//!   channel on every node (see [`subscription`](super::super::subscription):
//!   a release publishes there) and sleeps until the other holders' keys
//!   would let a quorum go free (their PTTL), but at most `retry_delay` —
//!   or [`PUSH_FALLBACK_MS`] once enough subscriptions are confirmed that
//!   any holder's release reaches one of them — plus a random
//!   `0..=retry_jitter`. A message, and the confirmation of a subscription
//!   (a release published before it was live is then covered), make the
//!   next attempt happen at once (right after the round in flight, if any);
//!   so does a subscription that goes down, after which the short timer
//!   applies until it is confirmed again;
//! - unavailability (too few answers, or a grant that came too late): retried
//!   after `retry_delay ± retry_jitter` up to `retry_count` times, then the
//!   operation fails (`NoQuorum` on Redlock, the node's error on one node).
//!
//! A cancel (or close) never interrupts a round in flight: its outcome is
//! awaited (bounded by the request timeout), then cleaned up, so no key is
//! left behind by a request whose result was unknown at cancel time.
//!
//! A semaphore's permit (see [`semaphore`](super::super::semaphore)) goes
//! the same way with its own attempt script: the granted slot's key is then
//! the held key (raise round, grant), a cleanup deletes the attempt's token
//! from whichever slot holds it, and its waiters share the semaphore's
//! queue and channel.
//!
//! A shared hold of a read-write lock (one node, see
//! [`rwlock`](super::super::rwlock)) goes the same way with the shared
//! acquire script (same reply); its waiters listen on the lock's channel
//! without joining the queue. A writer that will wait sets the writer
//! intent with every refused attempt (see `ACQUIRE`).
//!
//! What differs by kind lives in the kind's part (`part.rs`: `exclusive`,
//! `campaign`, `reader`, `permit`); this file never asks which kind it runs.

use super::super::context::{
    Context, Held, PUSH_FALLBACK_MS, QUEUE_LEASE_MS, TOKEN_BYTES, WAITER_BYTES,
};
use super::super::election::{self, LEADER_MESSAGE_PREFIX};
use super::super::quorum::{expires_at, free_quorum_in, verdict, AttemptVerdict};
use super::super::round::{FlagCount, Round};
use super::super::scripts;
use super::super::subscription::wake_channel;
use super::super::task::{Next, OnClose, Push, Task};
use super::super::value::{RedisCommand, RedisValue};
use super::campaign::Campaign;
use super::exclusive::Exclusive;
use super::part::{AttemptArgs, AttemptRound, Part};
use super::permit::Permit;
use super::reader::Reader;
use super::tally::Tally;
use crate::core::names::validate_name;
use crate::core::*;

/// Raise rounds after the first, when a node reports a counter above the
/// token (its attempt answer was lost, or other waiters moved it since).
const MAX_EXTRA_RAISES: u32 = 2;

/// What stays the same across an acquire's attempts, and its counters.
struct Attempts {
    /// `None` once the user got an answer some other way (close).
    op: Option<OpId>,
    backend: BackendKind,
    name: String,
    key: String,
    fence_key: String,
    wait: Wait,
    deadline: Option<Millis>,
    ttl: u64,
    /// The current attempt's owner token.
    token: String,
    attempt_start: Millis,
    unavailable: u32,
    /// Set by cancel/close: end with this error once nothing is left behind.
    abort: Option<LockError>,
    /// The lock's wake-up channel, listened to once an attempt met contention.
    channel: String,
    listening: bool,
    /// Per node: its subscription is confirmed.
    live: Vec<bool>,
    /// Attempt at once: something happened since the current attempt began.
    woken: bool,
    /// One node: this waiter's id in the waiters' queue (which a release
    /// reads to wake only its head), and whether it may be in it or may
    /// have set the writer intent (either way it leaves when it gives up).
    waiter: Option<String>,
    queued: bool,
    /// The payload of the message that last woke this waiter.
    last_wake: Option<Vec<u8>>,
    /// Woken by a message (not by its stream's confirmation or loss), and
    /// when the last attempt a message caused began.
    pushed: bool,
    /// The message named this waiter as the queue's head.
    named: bool,
    last_push_attempt: Option<Millis>,
    /// Raise rounds of the current attempt (bounded: see `after_raise`).
    raises: u32,
    /// What is particular to the kind acquired (see `part.rs`).
    part: Box<dyn Part>,
}

/// Where the acquire is; each phase waits for one thing.
enum Phase {
    /// Waiting for the next attempt.
    Sleep { until: Millis },
    /// The acquire script's round is out.
    Attempt,
    /// Strict fencing: raising the counters to `fence` before handing out.
    Raise { fence: u64 },
    /// A campaign: writing the leader record for the lock granted at `fence`.
    Record { fence: u64 },
    /// Deleting this attempt's key where it may exist, then `next`.
    Cleanup { next: AfterCleanup },
    /// A queued waiter leaving the queue before reporting `next`.
    Leave { next: AfterCleanup },
}

enum AfterCleanup {
    Retry { at: Millis },
    NotAcquired,
    Fail(LockError),
}

/// An acquire (see the module docs).
pub(in super::super) struct AcquireTask {
    a: Attempts,
    phase: Phase,
}

impl AcquireTask {
    /// Validates the request; the first attempt runs at the first step.
    pub(in super::super) fn new(
        cx: &mut Context,
        now: Millis,
        name: &str,
        kind: LockKind,
        opts: &AcquireOptions,
    ) -> Result<Self, LockError> {
        validate_name(name)?;
        let ttl = opts.ttl_ms.unwrap_or(cx.s.ttl_ms);
        super::super::config::validate_lock_ttl(ttl, cx.s.request_timeout_ms, cx.s.drift_factor)?;
        let (key, fence_key) = cx.keys_for(name);
        let part: Box<dyn Part> = match kind {
            // A campaign's part replaces this one (see `campaign`).
            LockKind::Exclusive | LockKind::Leader => Box::new(Exclusive),
            LockKind::Permits { limit } => {
                // The capabilities check refused these already; the core
                // must not trust its caller for the slot arithmetic.
                LockKind::permits(u64::from(limit))?;
                Box::new(Permit::new(&key, limit))
            }
            // Redlock refuses readers (see `rwlock`); its capabilities
            // did already, the core does not trust its caller.
            LockKind::Shared if cx.node_count() == 1 => Box::new(Reader),
            other => {
                return Err(LockError::invalid(format!(
                    "the {} backend does not offer {} locks",
                    cx.backend_str(),
                    other.as_str()
                )))
            }
        };
        let channel = wake_channel(part.wake_base(&key));
        let a = Attempts {
            op: Some(cx.rt.out.op_id()),
            backend: cx.s.backend,
            name: name.to_string(),
            key: key.clone(),
            fence_key,
            wait: opts.wait,
            deadline: opts.wait.deadline(now),
            ttl,
            token: String::new(),
            attempt_start: now,
            unavailable: 0,
            abort: None,
            channel,
            listening: false,
            live: vec![false; cx.node_count()],
            woken: false,
            waiter: (cx.node_count() == 1).then(|| random_hex(cx.entropy.as_mut(), WAITER_BYTES)),
            queued: false,
            last_wake: None,
            pushed: false,
            named: false,
            last_push_attempt: None,
            raises: 0,
            part,
        };
        Ok(AcquireTask {
            a,
            phase: Phase::Sleep { until: now },
        })
    }
}

impl AcquireTask {
    /// A campaign (see [`election`](super::super::election)): an exclusive
    /// acquire of `name` that writes the leader record before the grant.
    pub(in super::super) fn campaign(
        cx: &mut Context,
        now: Millis,
        name: &str,
        value: &str,
        opts: &AcquireOptions,
    ) -> Result<Self, LockError> {
        crate::core::operation::check_campaign_value(value)?;
        let mut task = AcquireTask::new(cx, now, name, LockKind::Leader, opts)?;
        task.a.part = Box::new(Campaign {
            value: value.to_string(),
        });
        Ok(task)
    }
}

impl Task for AcquireTask {
    fn op(&self) -> Option<OpId> {
        self.a.op
    }

    fn cancel(&mut self) {
        let error = LockError::Aborted {
            backend: self.a.backend.as_str(),
            name: self.a.name.clone(),
        };
        self.a.abort(error);
    }

    fn on_close(&mut self, error: &LockError) -> OnClose {
        self.a.op = None;
        self.a.abort(error.clone());
        OnClose::Detach
    }

    fn listens(&self) -> Option<&str> {
        (self.a.listening && self.a.abort.is_none()).then_some(self.a.channel.as_str())
    }

    /// An attempt is decided when its kind says so (see
    /// `Part::attempt_settled`); a raise round only once it can no longer
    /// confirm a quorum (its grant waits for every answer, see `after_raise`).
    fn settled(&self, round: &Round, quorum: usize) -> bool {
        let confirmed =
            |v: &RedisValue| matches!(scripts::parse_flag_and_counter(v), Ok((true, _)));
        match self.phase {
            Phase::Attempt => self.a.part.attempt_settled(round, quorum),
            Phase::Raise { .. } => round.quorum_lost(quorum, confirmed),
            _ => false,
        }
    }

    fn on_push(&mut self, node: usize, push: Push, now: Millis) -> bool {
        if let Some(live) = self.a.live.get_mut(node) {
            *live = push != Push::Down;
        }
        if let Push::Message(payload) = &push {
            // A leader record written or proclaimed frees nothing.
            if payload.starts_with(LEADER_MESSAGE_PREFIX) {
                return false;
            }
            // One release publishes on every node it held: wake once.
            if self.a.last_wake.as_deref() == Some(payload.as_slice()) {
                return false;
            }
            self.a.last_wake = Some(payload.clone());
            self.a.pushed = true;
        }
        if let (Push::Message(payload), Some(me)) = (&push, &self.a.waiter) {
            // `released:<fence>:<head>`: a release for another queued waiter.
            let head = payload.splitn(3, |b| *b == b':').nth(2);
            if head.is_some_and(|h| h != me.as_bytes()) {
                return false;
            }
            self.a.named |= head.is_some();
        }
        self.a.woken = true;
        match &mut self.phase {
            Phase::Sleep { until } => {
                *until = now;
                true
            }
            _ => false,
        }
    }

    fn step(self: Box<Self>, cx: &mut Context, round: Option<Round>, now: Millis) -> Next {
        let AcquireTask { a, phase } = *self;
        match (phase, round) {
            (Phase::Sleep { until }, _) => a.attempt(cx, until, now),
            (Phase::Attempt, Some(round)) => a.after_attempt(cx, round, now),
            (Phase::Raise { fence }, Some(round)) => a.after_raise(cx, round, fence, now),
            (Phase::Record { fence }, Some(round)) => a.after_record(cx, round, fence, now),
            (Phase::Cleanup { next }, _) => a.after_cleanup(cx, next, now),
            (Phase::Leave { next }, _) => a.report(cx, next),
            // The engine steps a task without a round only when it asked for none.
            (Phase::Attempt | Phase::Raise { .. } | Phase::Record { .. }, None) => {
                let error =
                    LockError::internal("an acquire was stepped without the round it waits for");
                a.finish(cx, AfterCleanup::Fail(error))
            }
        }
    }
}

impl Attempts {
    fn abort(&mut self, error: LockError) {
        if self.abort.is_none() {
            self.abort = Some(error);
        }
    }

    fn into_task(self, phase: Phase) -> AcquireTask {
        AcquireTask { a: self, phase }
    }

    /// A new attempt with a fresh owner token, once `until` has come.
    fn attempt(mut self, cx: &mut Context, until: Millis, now: Millis) -> Next {
        if let Some(e) = self.abort.clone() {
            return self.finish(cx, AfterCleanup::Fail(e));
        }
        if now < until && !self.woken {
            return Next::sleep(self.into_task(Phase::Sleep { until }), until);
        }
        if self.woken && std::mem::take(&mut self.pushed) {
            // The first message is acted on at once (the handoff); after
            // that a waiter attempts on messages at most once per retry
            // delay, so a burst of releases costs it no more than polling
            // (a Worker's subrequest budget is counted per invocation).
            // A release naming this waiter as the queue's head is acted on
            // at once: the bounded bypass keeps the free lock for it, and
            // at most `MAX_BYPASS + 1` releases name it before it is granted.
            let named = std::mem::take(&mut self.named);
            let earliest = self
                .last_push_attempt
                .map_or(now, |t| t.saturating_add(cx.s.retry_delay_ms));
            if now < earliest && !named {
                self.woken = false;
                let at = self.deadline.map_or(earliest, |d| earliest.min(d));
                return Next::sleep(self.into_task(Phase::Sleep { until: at }), at);
            }
            self.last_push_attempt = Some(now);
        }
        self.woken = false;
        self.raises = 0;
        self.token = random_hex(cx.entropy.as_mut(), TOKEN_BYTES);
        self.attempt_start = now;
        let cmd = self.attempt_command(cx);
        Next::round(self.into_task(Phase::Attempt), cmd, cx.all_nodes())
    }

    /// The attempt's script (its kind's, see `part.rs`).
    fn attempt_command(&mut self, cx: &mut Context) -> RedisCommand {
        let args = AttemptArgs {
            key: &self.key,
            fence_key: &self.fence_key,
            token: &self.token,
            ttl: self.ttl,
            wait: self.wait,
            waiter: self.waiter.as_deref(),
            listening: self.listening,
        };
        let (cmd, queued) = self.part.attempt(cx, &args);
        self.queued |= queued;
        cmd
    }

    /// An attempt's answers, read by its kind; a permit's granted slot
    /// becomes the key the raise round and the grant work on.
    fn after_attempt(mut self, cx: &mut Context, round: Round, now: Millis) -> Next {
        let answer = self.part.read(cx, &round, &self.name);
        if let Some(key) = self.part.granted_key() {
            self.key = key;
        }
        match answer {
            AttemptRound::Refused { error, maybe_ours } => {
                self.cleanup(cx, maybe_ours, AfterCleanup::Fail(error), now)
            }
            AttemptRound::Repeat { maybe_ours } if self.abort.is_none() => {
                self.cleanup(cx, maybe_ours, AfterCleanup::Retry { at: now }, now)
            }
            AttemptRound::Repeat { maybe_ours } => {
                let mut t = Tally::new(cx.node_count());
                t.maybe_ours = maybe_ours;
                self.decide(cx, t, now)
            }
            AttemptRound::Tallied(t) => self.decide(cx, t, now),
        }
    }

    /// What an attempt's tally leads to: the grant (after the raise round
    /// where strict fencing needs one), or a cleanup and the next step.
    fn decide(mut self, cx: &mut Context, t: Tally, now: Millis) -> Next {
        let n = cx.node_count();
        let Tally {
            granted,
            held_pttls,
            fence,
            maybe_ours,
            counters,
            first_error,
        } = t;
        // The raise would set every node's counter to at least `fence`: a
        // no-op exactly when every node answered with its counter there
        // already. A quorum at `fence` is not enough: a silent node may lag.
        let raise_is_noop = counters.iter().all(|c| *c == Some(fence));
        if let Some(e) = self.abort.clone() {
            // Cancelled while its attempt was out: if the lock was held, a
            // waiting writer's attempt set the writer intent, which it must
            // drop on leaving (as `contended_next` arranges for a waiter
            // that listened), or the intent keeps readers and atomic sets
            // out for a queue lease (multi_lock's cancelled group, met in
            // the loaded CI rehearsal).
            self.queued |= !held_pttls.is_empty()
                && self.wait != Wait::Try
                && self.waiter.is_some()
                && self.part.sets_writer_intent();
            return self.cleanup(cx, maybe_ours, AfterCleanup::Fail(e), now);
        }
        let next = match verdict(n, granted, held_pttls.len()) {
            AttemptVerdict::Quorum => {
                match expires_at(self.attempt_start, now, self.ttl, cx.s.drift_factor) {
                    Some(_) if cx.s.strict_fencing && n > 1 && !raise_is_noop => {
                        let cmd = scripts::extend(
                            &self.key,
                            &self.fence_key,
                            &self.token,
                            self.ttl,
                            fence,
                        );
                        return Next::round(
                            self.into_task(Phase::Raise { fence }),
                            cmd,
                            cx.all_nodes(),
                        );
                    }
                    Some(exp) => return self.grant(cx, fence, exp),
                    None => {
                        let e = LockError::Transport {
                        backend: cx.backend_str(),
                        name: self.name.clone(),
                        message: "the nodes answered too late: the TTL was used up before the lock could be handed out".into(),
                    };
                        self.unavailable_next(cx, e, now)
                    }
                }
            }
            AttemptVerdict::Unavailable => {
                let e = cx.round_error(&self.name, first_error.as_ref(), granted);
                self.unavailable_next(cx, e, now)
            }
            AttemptVerdict::Contended => self.contended_next(cx, held_pttls, now),
        };
        self.cleanup(cx, maybe_ours, next, now)
    }

    fn after_raise(mut self, cx: &mut Context, round: Round, fence: u64, now: Millis) -> Next {
        let parsed = round.parsed(scripts::parse_flag_and_counter);
        let still_ours = parsed
            .iter()
            .filter(|(_, r)| matches!(r, Ok((true, _))))
            .count();
        // A node whose attempt answer was lost may hold a counter above the
        // token: then the token must rise to it, and a quorum must be raised
        // to the new token before anything is handed out.
        let above = parsed
            .iter()
            .filter_map(|(_, r)| r.as_ref().ok().and_then(|(_, c)| *c))
            .max()
            .filter(|c| *c > fence);
        let all = cx.all_nodes();
        if let Some(e) = self.abort.clone() {
            return self.cleanup(cx, all, AfterCleanup::Fail(e), now);
        }
        match expires_at(self.attempt_start, now, self.ttl, cx.s.drift_factor) {
            // Other waiters' attempts keep moving the counters: raise again
            // at most twice, then give the attempt up as unavailable.
            Some(_)
                if still_ours >= cx.quorum_size()
                    && above.is_some()
                    && self.raises < MAX_EXTRA_RAISES =>
            {
                self.raises += 1;
                let fence = above.unwrap_or(fence);
                let cmd = scripts::extend(&self.key, &self.fence_key, &self.token, self.ttl, fence);
                Next::round(self.into_task(Phase::Raise { fence }), cmd, all)
            }
            Some(exp) if still_ours >= cx.quorum_size() && above.is_none() => {
                self.grant(cx, fence, exp)
            }
            // The counters would not settle: other waiters are attempting.
            // That is contention (a try is not acquired), not unavailability.
            Some(_) if still_ours >= cx.quorum_size() => {
                let next = self.contended_next(cx, Vec::new(), now);
                self.cleanup(cx, all, next, now)
            }
            _ => {
                let e = cx.round_error(&self.name, Round::first_error(&parsed), still_ours);
                let next = self.unavailable_next(cx, e, now);
                self.cleanup(cx, all, next, now)
            }
        }
    }

    fn after_cleanup(self, cx: &mut Context, next: AfterCleanup, now: Millis) -> Next {
        match (self.abort.clone(), next) {
            (Some(e), _) => self.finish(cx, AfterCleanup::Fail(e)),
            // The cleanup took us past the wait bound: no further attempt.
            (None, AfterCleanup::Retry { .. }) if self.deadline.is_some_and(|d| now > d) => {
                let e = LockError::Timeout {
                    backend: self.backend.as_str(),
                    name: self.name.clone(),
                };
                self.finish(cx, AfterCleanup::Fail(e))
            }
            (None, AfterCleanup::Retry { at }) => self.attempt(cx, at, now),
            (None, next) => self.finish(cx, next),
        }
    }

    fn unavailable_next(
        &mut self,
        cx: &mut Context,
        error: LockError,
        now: Millis,
    ) -> AfterCleanup {
        self.unavailable += 1;
        if self.wait == Wait::Try || self.unavailable > cx.s.retry_count {
            return AfterCleanup::Fail(error);
        }
        let j = cx.s.retry_jitter_ms;
        let delay = cx.s.retry_delay_ms.saturating_sub(j)
            + jitter(cx.entropy.as_mut(), j.saturating_mul(2));
        self.bounded_by_deadline(now, now + delay.max(1))
    }

    fn contended_next(
        &mut self,
        cx: &mut Context,
        held_pttls: Vec<Option<u64>>,
        now: Millis,
    ) -> AfterCleanup {
        if self.wait == Wait::Try {
            return AfterCleanup::NotAcquired;
        }
        // One node: a refused writer that waits has set the writer intent
        // (see `ACQUIRE`), which it drops if it gives up.
        self.queued |= self.waiter.is_some() && self.part.sets_writer_intent();
        self.listening = true;
        if self.woken {
            return self.bounded_by_deadline(now, now);
        }
        let mut cap = if self.push_covers(cx) {
            PUSH_FALLBACK_MS.max(cx.s.retry_delay_ms)
        } else {
            cx.s.retry_delay_ms
        };
        if self.waiter.is_some() {
            // Renew the queue lease well before it runs out.
            cap = cap.min(QUEUE_LEASE_MS / 3);
        }
        let base = free_quorum_in(cx.node_count(), held_pttls).map_or(cap, |p| p.min(cap));
        let delay = base + jitter(cx.entropy.as_mut(), cx.s.retry_jitter_ms);
        self.bounded_by_deadline(now, now + delay.max(1))
    }

    /// Whether every holder's release publishes on a confirmed subscription:
    /// a holder has a quorum of nodes, so `n − quorum + 1` live ones meet it.
    fn push_covers(&self, cx: &Context) -> bool {
        let live = self.live.iter().filter(|l| **l).count();
        live > cx.node_count() - cx.quorum_size()
    }

    /// A retry at `at`, or at the wait deadline (one last attempt), or a timeout.
    fn bounded_by_deadline(&self, now: Millis, at: Millis) -> AfterCleanup {
        match self.deadline {
            Some(d) if now >= d => AfterCleanup::Fail(LockError::Timeout {
                backend: self.backend.as_str(),
                name: self.name.clone(),
            }),
            Some(d) => AfterCleanup::Retry { at: at.min(d) },
            None => AfterCleanup::Retry { at },
        }
    }

    /// Deletes this attempt's key where it may exist, then continues with `next`.
    fn cleanup(
        self,
        cx: &mut Context,
        targets: Vec<bool>,
        next: AfterCleanup,
        now: Millis,
    ) -> Next {
        if !targets.iter().any(|t| *t) {
            return self.after_cleanup(cx, next, now);
        }
        let cmd = self.part.cleanup(&self.key, &self.fence_key, &self.token);
        Next::round(self.into_task(Phase::Cleanup { next }), cmd, targets)
    }

    /// Ends an acquire that got no lock: a queued waiter first leaves the
    /// queue (waking the next one if the lock is free), so that it does not
    /// hold the others up until its lease runs out; a writer also drops its
    /// intent, so that readers are not held back by a writer that gave up.
    fn finish(mut self, cx: &mut Context, next: AfterCleanup) -> Next {
        match (&self.waiter, self.queued) {
            (Some(waiter), true) => {
                self.queued = false;
                let cmd = self.part.leave(&self.key, &self.fence_key, waiter);
                Next::round(self.into_task(Phase::Leave { next }), cmd, cx.all_nodes())
            }
            _ => self.report(cx, next),
        }
    }

    /// Reports the end of an acquire that got no lock.
    fn report(self, cx: &mut Context, next: AfterCleanup) -> Next {
        // No op: the user already got its answer (close).
        if let Some(op) = self.op {
            match next {
                AfterCleanup::NotAcquired => cx.rt.out.complete(op, Ok(Outcome::NotAcquired)),
                AfterCleanup::Fail(error) => cx.rt.out.fail(op, error),
                AfterCleanup::Retry { .. } => {}
            }
        }
        Next::Done
    }

    /// A campaign's record round ended: the leadership is handed out if a
    /// quorum wrote it while the lock is still valid; otherwise the attempt
    /// is cleaned up and counts as unavailable (the lock may have been lost
    /// between the grant and the record: retried like an acquire).
    fn after_record(mut self, cx: &mut Context, round: Round, fence: u64, now: Millis) -> Next {
        let c = FlagCount::of(&round);
        let all = cx.all_nodes();
        if let Some(e) = self.abort.clone() {
            return self.cleanup(cx, all, AfterCleanup::Fail(e), now);
        }
        if c.confirmed >= cx.quorum_size() {
            if let Some(exp) = expires_at(self.attempt_start, now, self.ttl, cx.s.drift_factor) {
                return self.grant_now(cx, fence, exp);
            }
        }
        let e = cx.round_error(&self.name, c.first_error.as_ref(), c.confirmed);
        let next = self.unavailable_next(cx, e, now);
        self.cleanup(cx, all, next, now)
    }

    /// Hands the lock out (a campaign writes its leader record first).
    fn grant(self, cx: &mut Context, fence: u64, exp: Millis) -> Next {
        if self.op.is_none() {
            return Next::Done;
        }
        if let Some(value) = self.part.record() {
            let cmd = election::record(&self.key, &self.token, fence, value);
            let targets = cx.all_nodes();
            return Next::round(self.into_task(Phase::Record { fence }), cmd, targets);
        }
        self.grant_now(cx, fence, exp)
    }

    /// Hands the lock out: `fence` is its token, `exp` its validity end.
    fn grant_now(self, cx: &mut Context, fence: u64, exp: Millis) -> Next {
        let Some(op) = self.op else { return Next::Done };
        let id = cx.rt.out.lock_id();
        // A reader's held key is the readers' set; its release wakes the lock's waiters.
        let held_key = self.part.held_key(&self.key);
        let kind = self.part.kind();
        let handle = LockHandle {
            v: 1,
            backend: cx.s.backend,
            name: self.name.clone(),
            key: held_key.clone(),
            owner: self.token.clone(),
            fencing_token: fence,
            revision: 0,
            kind,
            slot: self.part.slot(),
        };
        let wake_base = self.part.wake_base(&self.key).to_string();
        let info = LockInfo {
            id,
            name: self.name.clone(),
            fencing_token: fence,
            expires_at: exp,
            handle,
        };
        let renew_at = self.attempt_start + self.ttl / 3;
        let held = Held {
            id,
            name: self.name,
            key: held_key,
            fence_key: self.fence_key,
            wake_base,
            token: self.token,
            shared: kind == LockKind::Shared,
            leader: kind == LockKind::Leader,
            hold: None,
            ttl: self.ttl,
            fencing_token: fence,
            expires_at: exp,
            renew: cx.s.auto_extend,
            renewal: None,
            last_error: None,
        };
        cx.hold(held, renew_at);
        cx.rt.out.complete(op, Ok(Outcome::Acquired(info)));
        Next::Done
    }
}
