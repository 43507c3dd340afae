//! The session lease (and adopted leases): grant, keepalive, key checks, loss.

use super::{AcqPhase, Ending, EtcdMachine, Failure, Lease, OpKind, Purpose, KEYS_PER_CHECK};
use crate::core::etcd::gateway::{
    self as gw, GatewayError, LeaseGrantResponse, LeaseTtl, TxnResponse,
};
use crate::core::{LockId, LostReason, Millis, OpId, RequestId};

impl EtcdMachine {
    // ---- the session lease -----------------------------------------------

    pub(super) fn lease_in_use(&self, lease: i64) -> bool {
        self.locks.values().any(|l| l.lease == lease)
            || self.ops.values().any(|o| match &o.kind {
                OpKind::Acquire(a) => a.lease == Some(lease) && a.phase != AcqPhase::LocalQueue,
                OpKind::AcquireSet(s) => s.lease == Some(lease),
                _ => false,
            })
            || self.orphans.iter().any(|o| o.lease == lease)
    }

    /// The session lease if it can still carry a new key, else None (and a
    /// grant is started).
    pub(super) fn usable_session_lease(&mut self, now: Millis) -> Option<i64> {
        if let Some(id) = self.session_lease {
            match self.leases.get(&id) {
                // A fresh grant leaves ~99% of the TTL; an idle lease older than
                // 2/3 of it is too close to expiry to put a new key on.
                // Saturating: `ttl_ms` is the backend's number (a hostile one can be huge).
                Some(l) if l.expires_at > now.saturating_add(l.ttl_ms / 3) => return Some(id),
                _ => {
                    // Drop it if nothing uses it; it expires on its own.
                    self.session_lease = None;
                    if !self.lease_in_use(id) {
                        self.leases.remove(&id);
                    }
                }
            }
        }
        if self.grant.is_none() {
            let ttl_s = self.session_ttl_ms.div_ceil(1000) as i64;
            self.grant = Some(self.send(
                now,
                Purpose::Grant,
                "/v3/lease/grant",
                gw::lease_grant(ttl_s),
                false,
            ));
        }
        None
    }

    /// Conservative expiry: the server's TTL counted from when we sent the
    /// request, less 1% + 2 ms for clock-rate drift between client and server.
    pub(super) fn expiry(sent_at: Millis, ttl_s: i64) -> Millis {
        // Saturating: the TTL is the backend's number, not ours.
        let ttl_ms = (ttl_s.max(0) as u64).saturating_mul(1000);
        sent_at
            .saturating_add(ttl_ms)
            .saturating_sub(ttl_ms / 100 + 2)
    }

    pub(super) fn on_grant(
        &mut self,
        now: Millis,
        id: RequestId,
        sent_at: Millis,
        result: Result<(u16, Vec<u8>), Failure>,
    ) {
        if self.grant != Some(id) {
            return;
        }
        self.grant = None;
        let parsed = match result {
            Ok((status, body)) => {
                gw::parse::<LeaseGrantResponse>(status, &body).map_err(Failure::Gateway)
            }
            Err(f) => Err(f),
        };
        let grant = match parsed {
            Ok(g) if g.ID != 0 && g.TTL > 0 => g,
            Ok(_) => {
                return self.fail_lease_waiters(
                    now,
                    Failure::Gateway(GatewayError::Malformed("lease grant without ID/TTL".into())),
                )
            }
            Err(f) => return self.fail_lease_waiters(now, f),
        };
        let ttl_ms = (grant.TTL as u64).saturating_mul(1000);
        self.leases.insert(
            grant.ID,
            Lease {
                ttl_ms,
                expires_at: Self::expiry(sent_at, grant.TTL),
                next_keepalive: sent_at.saturating_add(ttl_ms / 3),
                keepalive: None,
                check: None,
                checked: Vec::new(),
                sweep: None,
            },
        );
        self.session_lease = Some(grant.ID);
        self.arm_lease(grant.ID);
        let waiting: Vec<OpId> = self.acquires_in(AcqPhase::NeedLease);
        for op in waiting {
            self.acquire_step(now, op);
        }
        for op in self.sets_needing_lease() {
            self.set_step(now, op);
        }
    }

    pub(super) fn acquires_in(&self, phase: AcqPhase) -> Vec<OpId> {
        self.ops
            .iter()
            .filter(|(_, o)| matches!(&o.kind, OpKind::Acquire(a) if a.phase == phase))
            .map(|(id, _)| *id)
            .collect()
    }

    pub(super) fn fail_lease_waiters(&mut self, now: Millis, f: Failure) {
        for op in self.acquires_in(AcqPhase::NeedLease) {
            let name = self.op_name(op);
            let copy = match &f {
                Failure::Transport(t) => Failure::Transport(t.clone()),
                Failure::Gateway(g) => Failure::Gateway(g.clone()),
            };
            self.finish_acquire(now, op, Ending::Error(self.backend_error(&name, copy)));
        }
        for op in self.sets_needing_lease() {
            let name = self.op_name(op);
            let copy = match &f {
                Failure::Transport(t) => Failure::Transport(t.clone()),
                Failure::Gateway(g) => Failure::Gateway(g.clone()),
            };
            self.finish_set(now, op, Ending::Error(self.backend_error(&name, copy)));
        }
    }

    pub(super) fn send_keepalive(
        &mut self,
        now: Millis,
        lease: i64,
        purpose: Purpose,
    ) -> RequestId {
        self.send(
            now,
            purpose,
            "/v3/lease/keepalive",
            gw::lease_id(lease),
            false,
        )
    }

    /// Periodic renewal: keepalive plus one txn reading every held key on the lease.
    pub(super) fn renew(&mut self, now: Millis, lease: i64) {
        let keepalive = self.send_keepalive(now, lease, Purpose::KeepAlive { lease });
        let targets: Vec<(LockId, Vec<u8>, i64)> = self
            .locks
            .iter()
            .filter(|(_, l)| l.lease == lease && !l.releasing)
            // A permit is checked by both its keys: its queue key and its slot.
            .flat_map(|(id, l)| l.keys().into_iter().map(move |(key, rev)| (*id, key, rev)))
            .take(KEYS_PER_CHECK)
            .collect();
        let check = if targets.is_empty() {
            None
        } else {
            Some(self.send(
                now,
                Purpose::KeyCheck { lease },
                "/v3/kv/txn",
                gw::read_keys_txn(targets.iter().map(|t| t.1.as_slice())),
                false,
            ))
        };
        // Never on a lease borrowed for a re-entry: the other keys on it are
        // its owner's locks, not ghosts of ours.
        let sweep_due = self.ghost_risk
            && !self.borrowed.contains(&lease)
            && self.leases.get(&lease).is_some_and(|l| l.sweep.is_none());
        let sweep = sweep_due.then(|| {
            self.send(
                now,
                Purpose::Sweep { lease },
                "/v3/lease/timetolive",
                gw::lease_keys(lease),
                false,
            )
        });
        if let Some(l) = self.leases.get_mut(&lease) {
            l.keepalive = Some(keepalive);
            l.check = check;
            l.checked = targets;
            if sweep.is_some() {
                l.sweep = sweep;
            }
        }
    }

    /// Applies a keepalive answer to the lease; returns Ok(expires_at) or the loss reason.
    pub(super) fn apply_keepalive(
        &mut self,
        lease: i64,
        sent_at: Millis,
        result: Result<(u16, Vec<u8>), Failure>,
    ) -> Result<Millis, Result<LostReason, Failure>> {
        let parsed = match result {
            Ok((status, body)) => {
                gw::parse_wrapped::<LeaseTtl>(status, &body).map_err(Failure::Gateway)
            }
            Err(f) => Err(f),
        };
        match parsed {
            Ok(k) if k.TTL > 0 => {
                let l = self.leases.get_mut(&lease).ok_or(Ok(LostReason::Expired))?;
                let exp = Self::expiry(sent_at, k.TTL);
                // Never move expiry backwards because of a late, older answer.
                l.expires_at = l.expires_at.max(exp);
                l.ttl_ms = (k.TTL as u64).saturating_mul(1000);
                l.next_keepalive = l.next_keepalive.max(sent_at.saturating_add(l.ttl_ms / 3));
                let expires_at = l.expires_at;
                self.arm_lease(lease);
                Ok(expires_at)
            }
            Ok(_) | Err(Failure::Gateway(GatewayError::LeaseNotFound)) => Err(Ok(
                LostReason::RenewalFailed("the lease no longer exists".into()),
            )),
            Err(f) => Err(Err(f)),
        }
    }

    pub(super) fn on_keepalive(
        &mut self,
        now: Millis,
        id: RequestId,
        lease: i64,
        sent_at: Millis,
        result: Result<(u16, Vec<u8>), Failure>,
    ) {
        match self.leases.get_mut(&lease) {
            Some(l) if l.keepalive == Some(id) => l.keepalive = None,
            _ => return,
        }
        match self.apply_keepalive(lease, sent_at, result) {
            Ok(expires_at) => {
                let renewed: Vec<LockId> = self
                    .locks
                    .iter()
                    .filter(|(_, l)| l.lease == lease)
                    .map(|(id, _)| *id)
                    .collect();
                for lock in renewed {
                    self.rt.out.renewed(lock, expires_at);
                }
            }
            Err(Ok(reason)) => self.lease_lost(now, lease, reason),
            Err(Err(_)) => {
                // Could not reach anyone: try again soon; expiry is enforced by the timer.
                if let Some(l) = self.leases.get_mut(&lease) {
                    l.next_keepalive = now + (l.ttl_ms / 10).clamp(100, 1_000);
                }
                self.arm_lease(lease);
            }
        }
    }

    pub(super) fn on_key_check(
        &mut self,
        now: Millis,
        id: RequestId,
        lease: i64,
        result: Result<(u16, Vec<u8>), Failure>,
    ) {
        let targets = match self.leases.get_mut(&lease) {
            Some(l) if l.check == Some(id) => {
                l.check = None;
                std::mem::take(&mut l.checked)
            }
            _ => return,
        };
        let txn = match result
            .and_then(|(s, b)| gw::parse::<TxnResponse>(s, &b).map_err(Failure::Gateway))
        {
            Ok(t) if t.responses.len() == targets.len() => t,
            _ => return, // checked again next round
        };
        let present: Vec<(Vec<u8>, i64)> = txn
            .responses
            .iter()
            .filter_map(|r| r.response_range.as_ref())
            .flat_map(|r| r.kvs.iter().map(|kv| (kv.key.clone(), kv.create_revision)))
            .collect();
        for (lock, key, rev) in targets {
            // (A permit's target is either of its two keys.)
            let still_ours = self.locks.get(&lock).is_some_and(|l| {
                !l.releasing && l.keys().iter().any(|(k, r)| *k == key && *r == rev)
            });
            if still_ours && !present.iter().any(|(k, r)| *k == key && *r == rev) {
                self.lose_lock(now, lock, LostReason::KeyGone);
            }
        }
    }

    /// The lease is gone (or can no longer be trusted): every lock on it is
    /// lost, and waiters on it start over with a new session lease.
    pub(super) fn lease_lost(&mut self, now: Millis, lease: i64, reason: LostReason) {
        if let Some(l) = self.leases.remove(&lease) {
            self.cancel_request(l.keepalive);
            self.cancel_request(l.check);
            // Best effort: if the server still has it, revoking frees its keys now.
            self.send(
                now,
                Purpose::Revoke,
                "/v3/lease/revoke",
                gw::lease_id(lease),
                false,
            );
        }
        if self.session_lease == Some(lease) {
            self.session_lease = None;
        }
        let locks: Vec<LockId> = self
            .locks
            .iter()
            .filter(|(_, l)| l.lease == lease)
            .map(|(id, _)| *id)
            .collect();
        for lock in locks {
            self.lose_lock(now, lock, reason.clone());
        }
        // Only orphans that hold their name locally free it (a permit's or
        // reader's never claimed it: freeing would start another's waiter).
        let orphan_names: Vec<String> = self
            .orphans
            .iter()
            .filter(|o| o.lease == lease && o.holds_name)
            .map(|o| o.name.clone())
            .collect();
        self.orphans.retain(|o| o.lease != lease);
        self.arm_orphans();
        for name in orphan_names {
            self.free_name(now, &name);
        }
        self.sets_on_lost_lease(now, lease);
        self.acquires_on_lost_lease(now, lease);
    }

    pub(super) fn lose_lock(&mut self, now: Millis, lock: LockId, reason: LostReason) {
        if let Some(l) = self.locks.remove(&lock) {
            self.rt.out.lost(lock, l.name.clone(), reason.clone());
            if l.claims_name() {
                self.pass_on_name(now, &l);
            } else if l.is_permit() && reason == LostReason::KeyGone {
                // One of a permit's keys is gone, the other may not be: on a
                // lease that lives on, a slot key without its holder would
                // take a permit away from everyone until the session ends.
                self.orphan_keys_of(l, now);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::EtcdMachine;
    use crate::core::etcd::EtcdConfig;
    use crate::core::{
        AcquireOptions, Input, LockMachine, LockMachineExt, SeededEntropy, Transmit,
    };

    /// A hostile lease grant with the largest TTL etcd's JSON can carry, and
    /// a clock far along, once overflowed `now + ttl / 3` (found by
    /// reliability scenario 9a, whose driver jumps to the machine's timers).
    #[test]
    fn a_huge_granted_ttl_is_no_panic() {
        let mut m = EtcdMachine::new(
            EtcdConfig::new(vec!["http://127.0.0.1:2379".into()]),
            Box::new(SeededEntropy::new(1)),
        )
        .unwrap();
        let now = 1_000;
        m.acquire(now, "job", &AcquireOptions::default()).unwrap();
        let Some(Transmit::Send(grant)) = m.poll_transmit() else {
            panic!("no lease grant sent")
        };
        let body = br#"{"ID":"7","TTL":"9223372036854775807"}"#.to_vec();
        m.handle_input(
            now + 1,
            Input::Response {
                id: grant.id,
                status: 200,
                body,
            },
        );
        // The lease is usable: the acquire's txn goes out on it.
        let Some(Transmit::Send(txn)) = m.poll_transmit() else {
            panic!("no txn after the grant")
        };
        assert!(
            txn.target.to_string().ends_with("/v3/kv/txn"),
            "{}",
            txn.target
        );
        // Much later (a driver follows the machine's own far-off timers), a
        // second acquire checks whether the lease can still carry a key.
        let later = u64::MAX / 10 * 9;
        m.handle_timeout(later);
        m.acquire(later, "other", &AcquireOptions::default())
            .unwrap();
        assert!(std::iter::from_fn(|| m.poll_transmit()).any(|t| matches!(t, Transmit::Send(_))));
    }
}
