//! Release, extend, resume and inspect.

use super::*;

impl EtcdMachine {
    // ---- other operations -------------------------------------------------

    pub(super) fn on_op_reply(
        &mut self,
        now: Millis,
        op: OpId,
        sent_at: Millis,
        result: Result<(u16, Vec<u8>), Failure>,
    ) {
        let Some(o) = self.ops.get(&op) else { return };
        match &o.kind {
            OpKind::Acquire(_) => self.on_acquire_reply(now, op, result),
            OpKind::Release { lock, step } if *step != reentry::ReleaseStep::Plain => {
                let (lock, step) = (*lock, step.clone());
                self.on_counted_release_reply(now, op, lock, step, result)
            }
            OpKind::Reenter(_) => self.on_reenter_reply(now, op, sent_at, result),
            OpKind::Release { lock, .. } => {
                let lock = *lock;
                self.ops.remove(&op);
                let Some(held) = self.locks.get(&lock) else {
                    return self.rt.out.complete(
                        op,
                        Ok(Outcome::Released {
                            lock,
                            held_until_release: false,
                        }),
                    );
                };
                let name = held.name.clone();
                match result
                    .and_then(|(s, b)| gw::parse::<TxnResponse>(s, &b).map_err(Failure::Gateway))
                {
                    Ok(t) => {
                        if let Some(h) = self.locks.remove(&lock) {
                            if h.slot.is_some() {
                                if !t.succeeded {
                                    // One of a permit's two keys was gone: the
                                    // other, if still ours, goes in the background.
                                    self.orphan_keys_of(h, now);
                                }
                            } else if h.claims_name() {
                                self.free_name(now, &name);
                            }
                        }
                        self.rt.out.complete(
                            op,
                            Ok(Outcome::Released {
                                lock,
                                held_until_release: t.succeeded,
                            }),
                        );
                    }
                    Err(f) => {
                        // Give up on the lock locally; keep deleting it in the background.
                        if let Some(h) = self.locks.remove(&lock) {
                            self.orphan_keys_of(h, now + ORPHAN_RETRY_MS);
                        }
                        self.rt.out.fail(op, self.backend_error(&name, f));
                    }
                }
            }
            OpKind::Extend { lock, phase } => {
                let (lock, phase) = (*lock, *phase);
                let Some(held) = self.locks.get(&lock) else {
                    self.ops.remove(&op);
                    return self.rt.out.fail(
                        op,
                        LockError::NotHeld {
                            backend: BACKEND,
                            name: "<released or lost lock>".into(),
                        },
                    );
                };
                let (name, lease, keys) = (held.name.clone(), held.lease, held.keys());
                match phase {
                    ExtendPhase::KeepAlive => match self.apply_keepalive(lease, sent_at, result) {
                        Ok(_) => {
                            if let Some(Op {
                                kind: OpKind::Extend { phase, .. },
                                req,
                            }) = self.ops.get_mut(&op)
                            {
                                *phase = ExtendPhase::CheckKey;
                                let _ = req;
                            }
                            let body = gw::read_keys_txn(keys.iter().map(|(k, _)| k.as_slice()));
                            let r = self.send(now, Purpose::Op(op), "/v3/kv/txn", body, false);
                            if let Some(o) = self.ops.get_mut(&op) {
                                o.req = Some(r);
                            }
                        }
                        Err(Ok(reason)) => {
                            self.ops.remove(&op);
                            self.rt.out.fail(
                                op,
                                LockError::Lost {
                                    backend: BACKEND,
                                    name,
                                    reason: reason.to_string(),
                                },
                            );
                            self.lease_lost(now, lease, reason);
                        }
                        Err(Err(f)) => {
                            self.ops.remove(&op);
                            self.rt.out.fail(op, self.backend_error(&name, f));
                        }
                    },
                    ExtendPhase::CheckKey => {
                        self.ops.remove(&op);
                        match result.and_then(|(s, b)| {
                            gw::parse::<TxnResponse>(s, &b).map_err(Failure::Gateway)
                        }) {
                            Ok(t)
                                if keys.iter().all(|(k, rev)| {
                                    t.responses
                                        .iter()
                                        .filter_map(|r| r.response_range.as_ref())
                                        .flat_map(|r| &r.kvs)
                                        .any(|kv| kv.key == *k && kv.create_revision == *rev)
                                }) =>
                            {
                                let expires_at =
                                    self.leases.get(&lease).map(|l| l.expires_at).unwrap_or(now);
                                self.rt
                                    .out
                                    .complete(op, Ok(Outcome::Extended { lock, expires_at }));
                            }
                            Ok(_) if self.locks.get(&lock).map(|l| l.releasing).unwrap_or(true) => {
                                // Released meanwhile: the key is gone by our own hand.
                                self.rt.out.fail(
                                    op,
                                    LockError::NotHeld {
                                        backend: BACKEND,
                                        name,
                                    },
                                );
                            }
                            Ok(_) => {
                                self.rt.out.fail(
                                    op,
                                    LockError::Lost {
                                        backend: BACKEND,
                                        name,
                                        reason: LostReason::KeyGone.to_string(),
                                    },
                                );
                                self.lose_lock(now, lock, LostReason::KeyGone);
                            }
                            Err(f) => self.rt.out.fail(op, self.backend_error(&name, f)),
                        }
                    }
                }
            }
            OpKind::Resume {
                handle,
                lease,
                phase,
            } => {
                let (handle, lease, phase) = (handle.clone(), *lease, *phase);
                let lost = |reason: &str| LockError::Lost {
                    backend: BACKEND,
                    name: handle.name.clone(),
                    reason: reason.to_string(),
                };
                match phase {
                    ResumePhase::ReadKey => match result.and_then(|(s, b)| {
                        gw::parse::<TxnResponse>(s, &b).map_err(Failure::Gateway)
                    }) {
                        Ok(t)
                            if self.resume_keys(&handle).iter().all(|(k, rev)| {
                                // Each key still that incarnation, on the handle's
                                // lease (a permit's also with its semaphore's limit).
                                t.responses
                                    .iter()
                                    .filter_map(|r| r.response_range.as_ref())
                                    .flat_map(|r| &r.kvs)
                                    .any(|kv| {
                                        kv.key == *k
                                            && kv.create_revision == *rev
                                            && kv.lease == lease
                                            && match handle.kind {
                                                LockKind::Permits { limit } => {
                                                    permits::key_kind(&kv.value)
                                                        == permits::KeyKind::Permit(limit)
                                                }
                                                LockKind::Shared => {
                                                    shared::is_shared_value(&kv.value)
                                                }
                                                // The kind must match: a
                                                // leadership's key carries a
                                                // campaign value, a lock's never.
                                                LockKind::Leader => {
                                                    election::is_leader_value(&kv.value)
                                                }
                                                _ => !election::is_leader_value(&kv.value),
                                            }
                                    })
                            }) =>
                        {
                            // Is it still the holder? No key of the lock may be older.
                            if let Some(Op {
                                kind: OpKind::Resume { phase, .. },
                                ..
                            }) = self.ops.get_mut(&op)
                            {
                                *phase = ResumePhase::KeepAlive;
                            }
                            self.leases.get_or_insert_with(lease, || Lease {
                                ttl_ms: self.session_ttl_ms,
                                expires_at: 0,
                                next_keepalive: now,
                                keepalive: None,
                                check: None,
                                checked: Vec::new(),
                                sweep: None,
                            });
                            let r = self.send_keepalive(now, lease, Purpose::Op(op));
                            if let Some(o) = self.ops.get_mut(&op) {
                                o.req = Some(r);
                            }
                        }
                        Ok(_) => self.fail_op(now, op, lost("the key no longer exists")),
                        Err(f) => self.fail_op(now, op, self.backend_error(&handle.name, f)),
                    },
                    ResumePhase::KeepAlive => match self.apply_keepalive(lease, sent_at, result) {
                        Ok(expires_at) => {
                            self.ops.remove(&op);
                            let lock = self.rt.out.lock_id();
                            let slot = handle.slot.map(|s| {
                                (
                                    s,
                                    permits::slot_key(&self.lock_prefix(&handle.name), s),
                                    handle.fencing_token as i64,
                                )
                            });
                            self.locks.insert(
                                lock,
                                HeldLock {
                                    name: handle.name.clone(),
                                    key: handle.key.as_bytes().to_vec(),
                                    rev: handle.revision as i64,
                                    lease,
                                    slot,
                                    shared: handle.kind == LockKind::Shared,
                                    releasing: false,
                                    leader: handle.kind == LockKind::Leader,
                                    reentered: false,
                                },
                            );
                            self.rt.out.complete(
                                op,
                                Ok(Outcome::Acquired(LockInfo {
                                    id: lock,
                                    name: handle.name.clone(),
                                    fencing_token: handle.fencing_token,
                                    expires_at,
                                    handle,
                                })),
                            );
                        }
                        Err(Ok(reason)) => {
                            self.drop_lease_if_unused(lease, op);
                            self.fail_op(now, op, lost(&reason.to_string()))
                        }
                        Err(Err(f)) => {
                            self.drop_lease_if_unused(lease, op);
                            self.fail_op(now, op, self.backend_error(&handle.name, f))
                        }
                    },
                }
            }
            OpKind::Election(_) => self.on_election_reply(now, op, result),
            OpKind::AcquireSet(_) => self.on_set_reply(now, op, result),
            OpKind::Inspect { name, status } => {
                let name = name.clone();
                match status.clone() {
                    None => match result.and_then(|(s, b)| {
                        gw::parse::<RangeResponse>(s, &b).map_err(Failure::Gateway)
                    }) {
                        Ok(r) => {
                            let mut kvs = r.kvs;
                            crate::core::runtime::small_sort::sort_by_key(&mut kvs, |kv| {
                                kv.create_revision
                            });
                            let lock_prefix = self.lock_prefix(&name);
                            let (st, holder) =
                                match permits::semaphore_status(&name, &lock_prefix, &kvs) {
                                    Some(st) => {
                                        let oldest = st.holders.first().and_then(|h| {
                                            kvs.iter().find(|kv| kv.key == h.id.as_bytes()).cloned()
                                        });
                                        (st, oldest)
                                    }
                                    None => {
                                        // An exclusive holder, or the readers ahead of the oldest writer.
                                        let st = shared::rw_status(&name, &lock_prefix, &kvs);
                                        (st, kvs.first().cloned())
                                    }
                                };
                            match holder {
                                Some(h) if h.lease != 0 => {
                                    if let Some(Op {
                                        kind: OpKind::Inspect { status, .. },
                                        ..
                                    }) = self.ops.get_mut(&op)
                                    {
                                        *status = Some(st);
                                    }
                                    let r = self.send(
                                        now,
                                        Purpose::Op(op),
                                        "/v3/lease/timetolive",
                                        gw::lease_id(h.lease),
                                        false,
                                    );
                                    if let Some(o) = self.ops.get_mut(&op) {
                                        o.req = Some(r);
                                    }
                                }
                                _ => {
                                    self.ops.remove(&op);
                                    self.rt.out.complete(op, Ok(Outcome::Inspected(st)));
                                }
                            }
                        }
                        Err(f) => self.fail_op(now, op, self.backend_error(&name, f)),
                    },
                    Some(mut st) => {
                        self.ops.remove(&op);
                        if let Ok((s, b)) = result {
                            if let Ok(t) = gw::parse::<LeaseTtl>(s, &b) {
                                st.remaining_ms =
                                    (t.TTL > 0).then(|| (t.TTL as u64).saturating_mul(1000));
                            }
                        }
                        self.rt.out.complete(op, Ok(Outcome::Inspected(st)));
                    }
                }
            }
        }
    }

    /// Gives up on a held lock's keys locally and deletes each (that
    /// incarnation) in the background, from `retry_at`.
    pub(super) fn orphan_keys_of(&mut self, h: HeldLock, retry_at: Millis) {
        let holds_name = h.claims_name();
        for (key, rev) in h.keys() {
            self.orphans.push(Orphan {
                name: h.name.clone(),
                key,
                rev: Some(rev),
                value: None,
                holds_name,
                lease: h.lease,
                retry_at,
                req: None,
            });
        }
        self.arm_orphans();
    }

    /// The keys (and create revisions) a handle names: its key, and a
    /// permit's slot key.
    pub(super) fn resume_keys(&self, handle: &LockHandle) -> Vec<(Vec<u8>, i64)> {
        let mut keys = vec![(handle.key.as_bytes().to_vec(), handle.revision as i64)];
        if let Some(slot) = handle.slot {
            keys.push((
                permits::slot_key(&self.lock_prefix(&handle.name), slot),
                handle.fencing_token as i64,
            ));
        }
        keys
    }

    pub(super) fn drop_lease_if_unused(&mut self, lease: i64, op: OpId) {
        let resumed_elsewhere = self.ops.iter().any(|(id, o)| {
            *id != op
                && match &o.kind {
                    OpKind::Resume { lease: l, .. } => *l == lease,
                    OpKind::Reenter(r) => r.lease == lease,
                    _ => false,
                }
        });
        if !self.lease_in_use(lease) && !resumed_elsewhere && self.session_lease != Some(lease) {
            self.leases.remove(&lease);
        }
    }

    pub(super) fn fail_op(&mut self, now: Millis, op: OpId, error: LockError) {
        if let Some(OpKind::Resume { handle, .. }) = self.ops.get(&op).map(|o| &o.kind) {
            let (name, claimed) = (
                handle.name.clone(),
                matches!(handle.kind, LockKind::Exclusive | LockKind::Leader),
            );
            self.ops.remove(&op);
            self.rt.out.fail(op, error);
            // A permit's resume never claimed its name locally.
            if claimed {
                self.free_name(now, &name);
            }
            return;
        }
        self.ops.remove(&op);
        self.rt.out.fail(op, error);
    }

    pub(super) fn new_op(&mut self, kind: OpKind) -> OpId {
        let op = self.rt.out.op_id();
        self.ops.insert(op, Op { req: None, kind });
        op
    }

    pub(super) fn check_open(&self) -> Result<(), LockError> {
        self.rt.closing.check_open(BackendKind::Etcd)
    }

    pub(super) fn maybe_closed(&mut self) {
        let outstanding = self.rt.requests.any(|p| p.purpose == Purpose::CloseStep);
        self.rt.closing.finish_if(!outstanding, &mut self.rt.out);
    }
}
