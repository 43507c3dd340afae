//! The machine's one timer table: what is due when, and what happens then.
//!
//! Every time the recipe depends on is a key here, armed where the time is
//! decided. A timer that fires re-checks the state it is about (a lease
//! still in use, an acquire not yet ending), so a timer left armed for
//! something that moved on is harmless.

use super::{EtcdMachine, Purpose};
use crate::core::etcd::gateway as gw;
use crate::core::{LostReason, Millis, OpId};

/// What a timer is for. Keys due at the same moment fire in this order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum TimerKey {
    /// A lease in use passes its conservative expiry: its locks are lost.
    LeaseExpiry(i64),
    /// A lease in use is due for its keepalive (and key check).
    KeepAlive(i64),
    /// An acquire's wait bound.
    AcquireDeadline(OpId),
    /// A waiter re-checks its predecessor (after a broken watch, or to
    /// refresh a watch that may be silently dead).
    Recheck(OpId),
    /// Keys whose deletion failed are retried.
    Orphans,
    /// An observe's wait bound (see `election.rs`).
    ObserveDeadline(OpId),
    /// An observe reads its election again and watches anew (after a
    /// broken watch, or to refresh one that may be silently dead).
    ObserveRetry(OpId),
}

impl EtcdMachine {
    /// Arms `lease`'s expiry and keepalive from its state.
    pub(super) fn arm_lease(&mut self, lease: i64) {
        let Some(l) = self.leases.get(&lease) else {
            return;
        };
        let (expires_at, keepalive_at) = (
            l.expires_at,
            l.keepalive.is_none().then_some(l.next_keepalive),
        );
        self.rt.timers.set(TimerKey::LeaseExpiry(lease), expires_at);
        match keepalive_at {
            Some(at) => self.rt.timers.set(TimerKey::KeepAlive(lease), at),
            None => self.rt.timers.clear(TimerKey::KeepAlive(lease)),
        }
    }

    /// Schedules (or, with `None`, calls off) the re-check of acquire `op`.
    pub(super) fn set_recheck(&mut self, op: OpId, at: Option<Millis>) {
        match at {
            Some(at) => self.rt.timers.set(TimerKey::Recheck(op), at),
            None => self.rt.timers.clear(TimerKey::Recheck(op)),
        }
    }

    /// Forgets the timers of an acquire that ended.
    pub(super) fn clear_acquire_timers(&mut self, op: OpId) {
        self.rt.timers.clear(TimerKey::AcquireDeadline(op));
        self.rt.timers.clear(TimerKey::Recheck(op));
    }

    /// Arms the orphan retry for the earliest orphan not in flight.
    pub(super) fn arm_orphans(&mut self) {
        match self
            .orphans
            .iter()
            .filter(|o| o.req.is_none())
            .map(|o| o.retry_at)
            .min()
        {
            Some(at) => self.rt.timers.set(TimerKey::Orphans, at),
            None => self.rt.timers.clear(TimerKey::Orphans),
        }
    }

    pub(super) fn on_timer(&mut self, now: Millis, key: TimerKey) {
        match key {
            TimerKey::LeaseExpiry(lease) => {
                if self.lease_in_use(lease)
                    && self.leases.get(&lease).is_some_and(|l| l.expires_at <= now)
                {
                    self.lease_lost(now, lease, LostReason::Expired);
                }
            }
            TimerKey::KeepAlive(lease) => {
                // An unused lease is re-armed when an acquire puts a key on it.
                let due = self
                    .leases
                    .get(&lease)
                    .is_some_and(|l| l.keepalive.is_none() && l.next_keepalive <= now);
                if due && self.lease_in_use(lease) {
                    self.renew(now, lease);
                }
            }
            TimerKey::AcquireDeadline(op) => self.on_acquire_deadline(now, op),
            TimerKey::Recheck(op) => self.on_recheck(now, op),
            TimerKey::ObserveDeadline(op) => self.on_observe_deadline(now, op),
            TimerKey::ObserveRetry(op) => self.on_observe_retry(now, op),
            TimerKey::Orphans => {
                for i in 0..self.orphans.len() {
                    if self.orphans[i].req.is_none() && self.orphans[i].retry_at <= now {
                        let o = &self.orphans[i];
                        let (path, body) = match (o.rev, &o.value) {
                            // An exclusive lock's key: only while no holds
                            // are counted on it (see `ops/hold_count.rs`).
                            (Some(rev), _) if o.holds_name => (
                                "/v3/kv/txn",
                                gw::release_uncounted_txn(&o.key, rev, &self.count_key(&o.name)),
                            ),
                            (Some(rev), _) => ("/v3/kv/txn", gw::delete_if_revision(&o.key, rev)),
                            (None, Some(value)) => {
                                ("/v3/kv/txn", gw::delete_if_value(&o.key, value))
                            }
                            (None, None) => ("/v3/kv/txn", gw::delete_if_lease(&o.key, o.lease)),
                        };
                        let req = self.send(now, Purpose::Orphan, path, body, false);
                        self.orphans[i].req = Some(req);
                    }
                }
                self.arm_orphans();
            }
        }
    }
}
