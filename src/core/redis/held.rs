//! A held lock: automatic renewal (watchdog at TTL/3), manual extend,
//! release, and loss.
//!
//! Every renewal, extend and release carries the lock's fencing token, and
//! the scripts raise each node's counter to at least that value: that is
//! how Redlock's default (one-round) fencing spreads a holder's token to the
//! nodes whose counters lag (see `redlock.rs`).
//!
//! A renewal round succeeds with a quorum of owner-checked `PEXPIRE`s; the
//! new validity is `ttl − elapsed − drift` from the start of that round. The
//! lock is lost when more than N − quorum nodes answer that the key is gone
//! or foreign (no quorum can ever confirm it again), or when its validity
//! runs out before a renewal succeeded; transient failures are retried
//! meanwhile. A lost lock's remaining keys are deleted (owner-checked) in the
//! background.

use super::engine::{Engine, Owner, Task, TaskKind};
use super::quorum::expires_at;
use super::round::Round;
use super::scripts;
use crate::core::names::validate_ttl;
use crate::core::*;

/// How a round of extend or release scripts came out.
/// How the nodes answered an owner-checked script: done on our key, not
/// our key (gone or foreign), or no usable answer.
struct FlagCount {
    confirmed: usize,
    refused: usize,
    failed: usize,
    first_error: Option<super::round::NodeError>,
}

fn count_flags(round: &Round) -> FlagCount {
    let parsed = round.parsed(scripts::parse_flag);
    let mut c = FlagCount { confirmed: 0, refused: 0, failed: 0, first_error: Round::first_error(&parsed).cloned() };
    for (_, r) in &parsed {
        match r {
            Ok(true) => c.confirmed += 1,
            Ok(false) => c.refused += 1,
            Err(_) => c.failed += 1,
        }
    }
    c
}

impl Engine {
    /// Expiry and due renewals of held locks.
    pub(super) fn lock_timers(&mut self, now: Millis) {
        let expired: Vec<LockId> = self.locks.values().filter(|h| h.expires_at <= now).map(|h| h.id).collect();
        for id in expired {
            let reason = match self.locks.get(&id).and_then(|h| h.last_error.clone()) {
                Some(e) => LostReason::RenewalFailed(e),
                None => LostReason::Expired,
            };
            self.lose(id, reason, now);
        }
        let due: Vec<LockId> = self
            .locks
            .values()
            .filter(|h| h.renewal.is_none() && h.next_renewal.is_some_and(|t| t <= now))
            .map(|h| h.id)
            .collect();
        for id in due {
            self.start_renewal(id, now);
        }
    }

    fn start_renewal(&mut self, id: LockId, now: Millis) {
        let Some(h) = self.locks.get(&id) else { return };
        let cmd = scripts::extend(&h.key, &h.fence_key, &h.token, h.ttl, h.fencing_token);
        let all = self.all_nodes();
        let round = self.send_round(Owner::Renewal(id), cmd, &all, now);
        if let Some(h) = self.locks.get_mut(&id) {
            h.next_renewal = None;
            h.renewal = Some(round);
        }
        self.step_renewal(id, now);
    }

    pub(super) fn step_renewal(&mut self, id: LockId, now: Millis) {
        let (n, q, drift) = (self.node_count(), self.quorum_size(), self.s.drift_factor);
        let retry_delay = self.s.retry_delay_ms;
        let Some(h) = self.locks.get_mut(&id) else { return };
        if h.renewal.as_ref().map_or(true, |r| !r.is_done()) {
            return;
        }
        let Some(round) = h.renewal.take() else { return };
        let c = count_flags(&round);
        if c.confirmed >= q {
            if let Some(exp) = expires_at(round.started, now, h.ttl, drift) {
                h.expires_at = exp;
                h.last_error = None;
                h.next_renewal = h.renew.then(|| round.started + h.ttl / 3);
                self.out.renewed(id, exp);
                return;
            }
        }
        if c.refused > n - q {
            return self.lose(id, LostReason::KeyGone, now);
        }
        h.last_error = Some(match &c.first_error {
            Some(e) => e.to_lock_error(self.s.backend.as_str(), &h.name).to_string(),
            None => format!("only {} of {} nodes confirmed the renewal in time", c.confirmed, n),
        });
        // Try again soon, while validity remains; expiry ends it otherwise.
        let retry = now + (h.ttl / 10).clamp(1, retry_delay.max(1));
        if h.renew && retry < h.expires_at {
            h.next_renewal = Some(retry);
        }
    }

    /// Forgets a lock that is no longer held, tells the user, and deletes
    /// whatever is left of its keys.
    pub(super) fn lose(&mut self, id: LockId, reason: LostReason, now: Millis) {
        let Some(mut h) = self.locks.remove(&id) else { return };
        let r = h.renewal.take();
        self.drop_round(r);
        self.record_ended(id, &h.name);
        self.out.lost(id, h.name.clone(), reason);
        self.release_in_background(h, now);
    }

    pub(crate) fn release(&mut self, now: Millis, lock: LockId) -> Result<OpId, LockError> {
        if self.closed {
            return Err(self.closed_error());
        }
        let op = self.out.op_id();
        let Some(mut h) = self.locks.remove(&lock) else {
            self.out.complete(op, Ok(Outcome::Released { lock, held_until_release: false }));
            return Ok(op);
        };
        let r = h.renewal.take();
        self.drop_round(r);
        let cmd = scripts::release(&h.key, &h.fence_key, &h.token, h.fencing_token);
        let task = Task {
            op: Some(op),
            name: h.name.clone(),
            key: h.key.clone(),
            fence_key: h.fence_key.clone(),
            round: None,
            kind: TaskKind::Release { lock: h },
        };
        self.start_task(task, cmd, now);
        Ok(op)
    }

    pub(super) fn step_release(&mut self, task: &mut Task, _now: Millis) -> bool {
        if task.round.as_ref().is_some_and(|r| !r.is_done()) {
            return true;
        }
        let Some(round) = task.round.take() else { return false };
        let TaskKind::Release { lock } = std::mem::replace(&mut task.kind, TaskKind::Inspect) else { return false };
        let c = count_flags(&round);
        let (n, q) = (self.node_count(), self.quorum_size());
        let settled = c.confirmed >= q || c.failed == 0 || c.refused > n - q;
        match task.op {
            None => self.record_ended(lock.id, &lock.name),
            Some(op) if settled => {
                self.record_ended(lock.id, &lock.name);
                self.out.complete(op, Ok(Outcome::Released { lock: lock.id, held_until_release: c.confirmed >= q }));
            }
            Some(op) => {
                // Nothing definite: keep the lock (without renewals) so that the
                // user can retry; it expires on its own otherwise.
                let error = self.round_error(&lock.name, c.first_error.as_ref(), c.confirmed);
                self.out.fail(op, error);
                if !self.closed {
                    let mut lock = lock;
                    lock.renew = false;
                    lock.next_renewal = None;
                    self.locks.insert(lock.id, lock);
                } else {
                    self.record_ended(lock.id, &lock.name);
                }
            }
        }
        false
    }

    pub(crate) fn extend(&mut self, now: Millis, lock: LockId, ttl_ms: Option<u64>) -> Result<OpId, LockError> {
        if self.closed {
            return Err(self.closed_error());
        }
        if let Some(t) = ttl_ms {
            validate_ttl("ttl_ms", t)?;
            super::validate_lock_ttl(t, self.s.request_timeout_ms, self.s.drift_factor)?;
        }
        let op = self.out.op_id();
        let Some(h) = self.locks.get(&lock) else {
            let name = self.ended_name(lock);
            let error = LockError::NotHeld { backend: self.backend_str(), name };
            self.out.fail(op, error);
            return Ok(op);
        };
        let ttl = ttl_ms.unwrap_or(h.ttl);
        let cmd = scripts::extend(&h.key, &h.fence_key, &h.token, ttl, h.fencing_token);
        let task = Task {
            op: Some(op),
            name: h.name.clone(),
            key: h.key.clone(),
            fence_key: h.fence_key.clone(),
            round: None,
            kind: TaskKind::Extend { lock, ttl, token: h.token.clone() },
        };
        self.start_task(task, cmd, now);
        Ok(op)
    }

    pub(super) fn step_extend(&mut self, task: &mut Task, now: Millis) -> bool {
        if task.round.as_ref().is_some_and(|r| !r.is_done()) {
            return true;
        }
        let Some(round) = task.round.take() else { return false };
        let TaskKind::Extend { lock, ttl, ref token } = task.kind else { return false };
        let Some(op) = task.op else { return false };
        let (n, q, drift, backend) = (self.node_count(), self.quorum_size(), self.s.drift_factor, self.backend_str());
        let c = count_flags(&round);
        let Some(h) = self.locks.get_mut(&lock).filter(|h| &h.token == token) else {
            let error = LockError::NotHeld { backend, name: task.name.clone() };
            self.out.fail(op, error);
            return false;
        };
        if c.confirmed >= q {
            if let Some(exp) = expires_at(round.started, now, ttl, drift) {
                h.ttl = ttl;
                h.expires_at = exp;
                h.last_error = None;
                if h.renew {
                    h.next_renewal = Some(round.started + ttl / 3);
                }
                self.out.complete(op, Ok(Outcome::Extended { lock, expires_at: exp }));
                return false;
            }
        }
        if c.refused > n - q {
            let error = LockError::Lost { backend, name: task.name.clone(), reason: LostReason::KeyGone.to_string() };
            self.out.fail(op, error);
            self.lose(lock, LostReason::KeyGone, now);
            return false;
        }
        let error = self.round_error(&task.name, c.first_error.as_ref(), c.confirmed);
        self.out.fail(op, error);
        false
    }
}
