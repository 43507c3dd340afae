//! Extend: an owner-checked `PEXPIRE` to a new TTL on every node; the new
//! validity is `ttl − elapsed − drift` from the start of the round.

use super::super::context::Context;
use super::super::quorum::expires_at;
use super::super::round::{FlagCount, Round};
use super::super::rwlock;
use super::super::task::{Next, Task};
use crate::core::names::validate_ttl;
use crate::core::*;

pub(in super::super) struct ExtendTask {
    op: OpId,
    lock: LockId,
    name: String,
    ttl: u64,
    /// The owner token the round ran with: the answer applies only to the
    /// lock it was sent for.
    token: String,
    cmd: Option<super::super::value::RedisCommand>,
}

/// Validates an extend of `lock`: a task, or the operation already answered
/// (`NotHeld` for a lock this machine does not hold).
pub(in super::super) fn start(
    cx: &mut Context,
    lock: LockId,
    ttl_ms: Option<u64>,
) -> Result<Result<ExtendTask, OpId>, LockError> {
    if let Some(t) = ttl_ms {
        validate_ttl("ttl_ms", t)?;
        super::super::config::validate_lock_ttl(t, cx.s.request_timeout_ms, cx.s.drift_factor)?;
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
    let ttl = ttl_ms.unwrap_or(h.ttl);
    let cmd = rwlock::extend_command(h, ttl);
    Ok(Ok(ExtendTask {
        op,
        lock,
        name: h.name.clone(),
        ttl,
        token: h.token.clone(),
        cmd: Some(cmd),
    }))
}

impl Task for ExtendTask {
    fn op(&self) -> Option<OpId> {
        Some(self.op)
    }

    fn step(self: Box<Self>, cx: &mut Context, round: Option<Round>, now: Millis) -> Next {
        let ExtendTask {
            op,
            lock,
            name,
            ttl,
            token,
            cmd,
        } = *self;
        let Some(round) = round else {
            return match cmd {
                Some(cmd) => Next::round(
                    ExtendTask {
                        op,
                        lock,
                        name,
                        ttl,
                        token,
                        cmd: None,
                    },
                    cmd,
                    cx.all_nodes(),
                ),
                None => {
                    cx.rt.out.fail(
                        op,
                        LockError::internal("an extend was stepped without its round"),
                    );
                    Next::Done
                }
            };
        };
        let (n, q, backend) = (cx.node_count(), cx.quorum_size(), cx.backend_str());
        let c = FlagCount::of(&round);
        if !cx.locks.get(&lock).is_some_and(|h| h.token == token) {
            cx.rt.out.fail(op, LockError::NotHeld { backend, name });
            return Next::Done;
        }
        if c.confirmed >= q {
            if let Some(exp) = expires_at(round.started, now, ttl, cx.s.drift_factor) {
                cx.confirmed(lock, ttl, exp, round.started + ttl / 3);
                cx.rt.out.complete(
                    op,
                    Ok(Outcome::Extended {
                        lock,
                        expires_at: exp,
                    }),
                );
                return Next::Done;
            }
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
