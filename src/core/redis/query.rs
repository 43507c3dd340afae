//! Read-only operations: resume (adopt a lock from a handle) and inspect.

use super::engine::{Engine, Held, Task, TaskKind, TOKEN_BYTES};
use super::quorum::{drift_ms, kth_largest};
use super::round::Round;
use super::scripts::{self, StatusReply};
use crate::core::names::validate_name;
use crate::core::*;

fn is_token(s: &str) -> bool {
    s.len() == TOKEN_BYTES * 2 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

impl Engine {
    pub(crate) fn resume(&mut self, now: Millis, handle: &LockHandle) -> Result<OpId, LockError> {
        if self.closed {
            return Err(self.closed_error());
        }
        if handle.v != 1 {
            return Err(LockError::invalid(format!("unsupported lock handle version {}", handle.v)));
        }
        if handle.backend != self.s.backend {
            return Err(LockError::invalid(format!(
                "the handle is for the {} backend, this client is {}",
                handle.backend.as_str(),
                self.backend_str()
            )));
        }
        validate_name(&handle.name)?;
        let (key, fence_key) = self.keys_for(&handle.name);
        if handle.key != key {
            return Err(LockError::invalid("the handle's key does not match its name and this client's prefix"));
        }
        if !is_token(&handle.owner) {
            return Err(LockError::invalid("the handle's owner token is malformed"));
        }
        let op = self.out.op_id();
        let cmd = scripts::status(&key, &fence_key, Some(&handle.owner));
        let task = Task {
            op: Some(op),
            name: handle.name.clone(),
            key,
            fence_key,
            round: None,
            kind: TaskKind::Resume { handle: handle.clone() },
        };
        self.start_task(task, cmd, now);
        Ok(op)
    }

    pub(super) fn step_resume(&mut self, task: &mut Task, now: Millis) -> bool {
        if task.round.as_ref().is_some_and(|r| !r.is_done()) {
            return true;
        }
        let (Some(round), Some(op)) = (task.round.take(), task.op) else { return false };
        let TaskKind::Resume { handle } = &task.kind else { return false };
        let parsed = round.parsed(scripts::parse_status);
        let mine: Vec<u64> =
            parsed.iter().filter_map(|(_, r)| r.as_ref().ok().filter(|s| s.mine).and_then(|s| s.pttl)).collect();
        let failed = parsed.iter().filter(|(_, r)| r.is_err()).count();
        let q = self.quorum_size();
        let backend = self.backend_str();
        // The key lives at least `pttl` past the round's start on each node.
        let exp = kth_largest(mine.clone(), q)
            .and_then(|p| (round.started + p).checked_sub(drift_ms(p, self.s.drift_factor)))
            .filter(|e| *e > now);
        match exp {
            Some(exp) => {
                let id = self.out.lock_id();
                let ttl = self.s.ttl_ms;
                let info = LockInfo {
                    id,
                    name: task.name.clone(),
                    fencing_token: handle.fencing_token,
                    expires_at: exp,
                    handle: handle.clone(),
                };
                self.locks.insert(
                    id,
                    Held {
                        id,
                        name: task.name.clone(),
                        key: task.key.clone(),
                        fence_key: task.fence_key.clone(),
                        token: handle.owner.clone(),
                        ttl,
                        fencing_token: handle.fencing_token,
                        expires_at: exp,
                        renew: self.s.auto_extend,
                        // Soon: the remaining lifetime is whatever the previous owner left.
                        next_renewal: self.s.auto_extend.then(|| now + (ttl / 3).min((exp - now) / 2)),
                        renewal: None,
                        last_error: None,
                    },
                );
                self.out.complete(op, Ok(Outcome::Acquired(info)));
            }
            None if mine.len() + failed >= q && failed > 0 => {
                let error = self.round_error(&task.name, Round::first_error(&parsed), mine.len());
                self.out.fail(op, error);
            }
            None => {
                let reason = "the handle's key is no longer held by its owner".to_string();
                let error = LockError::Lost { backend, name: task.name.clone(), reason };
                self.out.fail(op, error);
            }
        }
        false
    }

    pub(crate) fn inspect(&mut self, now: Millis, name: &str) -> Result<OpId, LockError> {
        if self.closed {
            return Err(self.closed_error());
        }
        validate_name(name)?;
        let op = self.out.op_id();
        let (key, fence_key) = self.keys_for(name);
        let cmd = scripts::status(&key, &fence_key, None);
        let task = Task { op: Some(op), name: name.to_string(), key, fence_key, round: None, kind: TaskKind::Inspect };
        self.start_task(task, cmd, now);
        Ok(op)
    }

    pub(super) fn step_inspect(&mut self, task: &mut Task, _now: Millis) -> bool {
        if task.round.as_ref().is_some_and(|r| !r.is_done()) {
            return true;
        }
        let (Some(round), Some(op)) = (task.round.take(), task.op) else { return false };
        let parsed = round.parsed(scripts::parse_status);
        let answers: Vec<StatusReply> = parsed.iter().filter_map(|(_, r)| r.as_ref().ok().copied()).collect();
        let q = self.quorum_size();
        if answers.len() < q {
            let error = self.round_error(&task.name, Round::first_error(&parsed), answers.len());
            self.out.fail(op, error);
            return false;
        }
        let existing: Vec<&StatusReply> = answers.iter().filter(|s| s.exists).collect();
        let held = existing.len() >= q;
        let remaining_ms = if held { kth_largest(existing.iter().filter_map(|s| s.pttl).collect(), q) } else { None };
        let status = LockStatus {
            name: task.name.clone(),
            held,
            holder: None,
            fencing_token: answers.iter().map(|s| s.fence).max(),
            remaining_ms,
            waiters: Vec::new(),
        };
        self.out.complete(op, Ok(Outcome::Inspected(status)));
        false
    }
}
