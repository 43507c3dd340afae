//! Automatic renewal of a held lock (the watchdog, at TTL/3).
//!
//! A renewal round succeeds with a quorum of owner-checked `PEXPIRE`s; the
//! new validity is `ttl − elapsed − drift` from the start of that round. The
//! lock is lost when more than N − quorum nodes answer that the key is gone
//! or foreign (no quorum can ever confirm it again); its expiry timer ends
//! it when its validity runs out before a renewal succeeded. Transient
//! failures are retried meanwhile, every `ttl / 10` (at most the retry
//! delay). Every renewal carries the lock's fencing token: the scripts raise
//! each node's counter to at least that value (how Redlock's default
//! one-round fencing spreads a holder's token, see `redlock.rs`).

use super::super::context::{Context, Held};
use super::super::quorum::expires_at;
use super::super::round::{FlagCount, Round};
use super::super::rwlock;
use super::super::task::{Next, Task};
use crate::core::*;

pub(in super::super) struct RenewTask {
    lock: LockId,
    /// The owner token the round ran with (the answer is only for that lock).
    token: String,
    ttl: u64,
    cmd: Option<super::super::value::RedisCommand>,
}

impl RenewTask {
    pub(in super::super) fn new(h: &Held) -> Self {
        let cmd = rwlock::extend_command(h, h.ttl);
        RenewTask {
            lock: h.id,
            token: h.token.clone(),
            ttl: h.ttl,
            cmd: Some(cmd),
        }
    }
}

impl Task for RenewTask {
    fn op(&self) -> Option<OpId> {
        None
    }

    fn step(self: Box<Self>, cx: &mut Context, round: Option<Round>, now: Millis) -> Next {
        let RenewTask {
            lock,
            token,
            ttl,
            cmd,
        } = *self;
        let Some(round) = round else {
            return match cmd {
                Some(cmd) => Next::round(
                    RenewTask {
                        lock,
                        token,
                        ttl,
                        cmd: None,
                    },
                    cmd,
                    cx.all_nodes(),
                ),
                None => Next::Done,
            };
        };
        let (n, q, drift, backend) = (
            cx.node_count(),
            cx.quorum_size(),
            cx.s.drift_factor,
            cx.backend_str(),
        );
        let retry_delay = cx.s.retry_delay_ms;
        let Some(h) = cx.locks.get_mut(&lock).filter(|h| h.token == token) else {
            return Next::Done;
        };
        h.renewal = None;
        let c = FlagCount::of(&round);
        if c.confirmed >= q {
            if let Some(exp) = expires_at(round.started, now, ttl, drift) {
                let ttl = h.ttl;
                cx.confirmed(lock, ttl, exp, round.started + ttl / 3);
                cx.rt.out.renewed(lock, exp);
                return Next::Done;
            }
        }
        if c.refused > n - q {
            cx.lose(lock, LostReason::KeyGone);
            return Next::Done;
        }
        h.last_error = Some(match &c.first_error {
            Some(e) => e.to_lock_error(backend, &h.name).to_string(),
            None => format!(
                "only {} of {} nodes confirmed the renewal in time",
                c.confirmed, n
            ),
        });
        // Try again soon, while validity remains; expiry ends it otherwise.
        let retry = now + (h.ttl / 10).clamp(1, retry_delay.max(1));
        if retry < h.expires_at {
            cx.renew_at(lock, retry);
        }
        Next::Done
    }
}
