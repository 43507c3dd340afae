//! The `LockMachine` interface: user calls, inputs, timers and outputs.

use super::*;

impl LockMachine for EtcdMachine {
    fn backend(&self) -> BackendKind {
        BackendKind::Etcd
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities { kinds: Capabilities::EXCLUSIVE_ONLY }
    }

    fn start_operation(&mut self, now: Millis, op: Operation) -> Result<OpId, LockError> {
        match op {
            Operation::Acquire { name, kind: _, options } => self.start_acquire(now, &name, &options),
            Operation::Release { lock } => self.start_release(now, lock),
            Operation::Extend { lock, ttl_ms: _ } => self.start_extend(now, lock),
            Operation::Resume { handle } => self.start_resume(now, &handle),
            Operation::Inspect { name } => self.start_inspect(now, &name),
        }
    }

    fn cancel(&mut self, now: Millis, op: OpId) {
        let Some(o) = self.ops.get(&op) else { return };
        if let OpKind::Acquire(a) = &o.kind {
            if a.phase != AcqPhase::Cleanup {
                let name = a.name.clone();
                self.cleanup(now, op, Ending::Error(LockError::Aborted { backend: BACKEND, name }));
            }
        }
    }

    fn close(&mut self, now: Millis) -> OpId {
        let op = self.out.op_id();
        if self.closed || self.closing.is_some() {
            self.out.complete(op, Ok(Outcome::Closed));
            return op;
        }
        self.closing = Some(op);
        // Pending operations end now; revoking the leases removes their keys.
        let ops: Vec<OpId> = self.ops.keys().copied().collect();
        for id in ops {
            if let Some(o) = self.ops.remove(&id) {
                self.cancel_request(o.req);
                self.out.fail(id, LockError::Closed { backend: BACKEND });
            }
        }
        let locks: Vec<LockId> = self.locks.keys().copied().collect();
        for lock in locks {
            if let Some(l) = self.locks.remove(&lock) {
                self.out.lost(lock, l.name, LostReason::ClientClosed);
            }
        }
        let pending: Vec<RequestId> = self.requests.keys().copied().collect();
        for id in pending {
            self.cancel_request(Some(id));
        }
        self.grant = None;
        self.orphans.clear();
        self.busy_names.clear();
        let leases: Vec<i64> = std::mem::take(&mut self.leases).into_keys().collect();
        self.session_lease = None;
        for lease in leases {
            self.send(now, Purpose::CloseStep, "/v3/lease/revoke", gw::lease_id(lease), false);
        }
        self.maybe_closed();
        op
    }

    fn handle_input(&mut self, now: Millis, input: Input) {
        let id = input.id();
        match input {
            Input::Chunk { data, .. } => {
                if self.requests.contains_key(&id) {
                    self.on_watch_chunk(now, id, &data);
                }
            }
            Input::StreamEnd { .. } => {
                if let Some(p) = self.requests.get(&id) {
                    if let Purpose::Op(op) = p.purpose {
                        self.watch_broken(now, id, op);
                    }
                }
            }
            Input::Response { status, body, .. } => {
                let Some(p) = self.requests.remove(&id) else { return };
                if p.splitter.is_some() {
                    // A streaming request answered whole: an error reply.
                    return self.stream_ended(now, id, p);
                }
                if !(200..300).contains(&status) {
                    let g = gw::classify_error(status, &body);
                    if g != GatewayError::LeaseNotFound {
                        return self.on_failure(now, id, p, Failure::Gateway(g));
                    }
                }
                self.dispatch(now, id, p, Ok((status, body)));
            }
            Input::Failed { error, .. } => {
                let Some(p) = self.requests.remove(&id) else { return };
                if p.splitter.is_some() {
                    return self.stream_ended(now, id, p);
                }
                self.on_failure(now, id, p, Failure::Transport(error));
            }
        }
    }

    fn handle_timeout(&mut self, now: Millis) {
        // 1. Requests past their deadline.
        let expired: Vec<RequestId> = self.requests.iter().filter(|(_, p)| p.deadline.map(|d| d <= now).unwrap_or(false)).map(|(id, _)| *id).collect();
        for id in expired {
            self.out.cancel(id);
            self.handle_input(now, Input::Failed { id, error: TransportError::Timeout });
        }
        // 2. Leases: lost when their conservative expiry passes, renewed when due.
        let lease_ids: Vec<i64> = self.leases.keys().copied().collect();
        for lease in lease_ids {
            if !self.lease_in_use(lease) {
                continue;
            }
            let Some(l) = self.leases.get(&lease) else { continue };
            if l.expires_at <= now {
                self.lease_lost(now, lease, LostReason::Expired);
            } else if l.next_keepalive <= now && l.keepalive.is_none() {
                self.renew(now, lease);
            }
        }
        // 3. Acquire deadlines and scheduled re-checks.
        let ops: Vec<OpId> = self.ops.keys().copied().collect();
        for op in ops {
            let Some(a) = self.acquire_mut(op) else { continue };
            if a.phase == AcqPhase::Cleanup || a.ending.is_some() {
                continue;
            }
            if a.deadline.map(|d| d <= now).unwrap_or(false) {
                let name = a.name.clone();
                if a.phase == AcqPhase::LocalQueue {
                    self.finish_acquire(now, op, Ending::Error(LockError::Timeout { backend: BACKEND, name }));
                } else {
                    self.cleanup(now, op, Ending::Error(LockError::Timeout { backend: BACKEND, name }));
                }
            } else if a.retry_at.map(|t| t <= now).unwrap_or(false) {
                a.retry_at = None;
                // A watch due for its refresh is replaced, not doubled.
                if a.phase == AcqPhase::Watch {
                    let req = self.ops.get_mut(&op).and_then(|o| o.req.take());
                    self.cancel_request(req);
                }
                self.send_predecessor_check(now, op);
            }
        }
        // 4. Orphaned keys.
        for i in 0..self.orphans.len() {
            if self.orphans[i].req.is_none() && self.orphans[i].retry_at <= now {
                let o = &self.orphans[i];
                let (path, body) = match o.rev {
                    Some(rev) => ("/v3/kv/txn", gw::delete_if_revision(&o.key, rev)),
                    None => ("/v3/kv/deleterange", gw::delete_key(&o.key)),
                };
                let req = self.send(now, Purpose::Orphan, path, body, false);
                self.orphans[i].req = Some(req);
            }
        }
    }

    fn poll_transmit(&mut self) -> Option<Transmit> {
        self.out.poll_transmit()
    }

    fn poll_event(&mut self) -> Option<Event> {
        self.out.poll_event()
    }

    fn poll_timeout(&self) -> Option<Millis> {
        let requests = self.requests.values().map(|p| p.deadline);
        let leases = self.leases.iter().filter(|(id, _)| self.lease_in_use(**id)).flat_map(|(_, l)| {
            [Some(l.expires_at), if l.keepalive.is_none() { Some(l.next_keepalive) } else { None }]
        });
        let ops = self.ops.values().flat_map(|o| match &o.kind {
            OpKind::Acquire(a) if a.phase != AcqPhase::Cleanup && a.ending.is_none() => [a.deadline, a.retry_at],
            _ => [None, None],
        });
        let orphans = self.orphans.iter().map(|o| if o.req.is_none() { Some(o.retry_at) } else { None });
        earliest(requests.chain(leases).chain(ops).chain(orphans))
    }

    fn live_count(&self) -> usize {
        self.ops.len() + self.locks.len() + self.orphans.len()
    }
}

impl EtcdMachine {
    fn start_acquire(&mut self, now: Millis, name: &str, opts: &AcquireOptions) -> Result<OpId, LockError> {
        self.check_open()?;
        validate_name(name)?;
        if let Some(ttl) = opts.ttl_ms {
            crate::core::names::validate_ttl("ttlMs", ttl)?;
        }
        let deadline = opts.wait.deadline(now);
        let nonce = random_hex(self.entropy.as_mut(), 8).into_bytes();
        let op = self.new_op(OpKind::Acquire(Acquire {
            name: name.to_string(),
            lock_prefix: self.lock_prefix(name),
            wait: opts.wait,
            deadline,
            lease: None,
            key: Vec::new(),
            my_rev: 0,
            phase: AcqPhase::LocalQueue,
            retry_at: None,
            ending: None,
            restarts: 0,
            nonce,
        }));
        if self.claim_name(name, op) {
            if let Some(a) = self.acquire_mut(op) {
                a.phase = AcqPhase::NeedLease;
            }
            self.acquire_step(now, op);
        } else if opts.wait == Wait::Try {
            // This client itself holds or is acquiring the name.
            self.finish_acquire(now, op, Ending::NotAcquired);
        }
        Ok(op)
    }

    fn start_release(&mut self, now: Millis, lock: LockId) -> Result<OpId, LockError> {
        if self.closed {
            return Err(LockError::Closed { backend: BACKEND });
        }
        let op = self.new_op(OpKind::Release { lock });
        let Some(held) = self.locks.get(&lock) else {
            // Idempotent: already released or lost.
            self.ops.remove(&op);
            self.out.complete(op, Ok(Outcome::Released { lock, held_until_release: false }));
            return Ok(op);
        };
        let body = gw::delete_if_revision(&held.key, held.rev);
        if let Some(l) = self.locks.get_mut(&lock) {
            l.releasing = true;
        }
        let req = self.send(now, Purpose::Op(op), "/v3/kv/txn", body, false);
        if let Some(o) = self.ops.get_mut(&op) {
            o.req = Some(req);
        }
        Ok(op)
    }

    fn start_extend(&mut self, now: Millis, lock: LockId) -> Result<OpId, LockError> {
        self.check_open()?;
        let lease = match self.locks.get(&lock) {
            Some(h) if !h.releasing => h.lease,
            // Like every other outcome, "not held" completes the operation
            // (the Redis machine answers the same way).
            other => {
                let name = other.map_or_else(|| "<released or lost lock>".to_string(), |h| h.name.clone());
                let op = self.out.op_id();
                self.out.fail(op, LockError::NotHeld { backend: BACKEND, name });
                return Ok(op);
            }
        };
        let op = self.new_op(OpKind::Extend { lock, phase: ExtendPhase::KeepAlive });
        let req = self.send_keepalive(now, lease, Purpose::Op(op));
        if let Some(o) = self.ops.get_mut(&op) {
            o.req = Some(req);
        }
        Ok(op)
    }

    fn start_resume(&mut self, now: Millis, handle: &LockHandle) -> Result<OpId, LockError> {
        self.check_open()?;
        validate_name(&handle.name)?;
        if handle.backend != BackendKind::Etcd {
            return Err(LockError::invalid(format!("handle is for the {} backend, not etcd", handle.backend.as_str())));
        }
        let prefix = String::from_utf8_lossy(&self.lock_prefix(&handle.name)).into_owned();
        let lease: i64 = handle.owner.parse().map_err(|_| LockError::invalid("handle owner is not an etcd lease id"))?;
        if !handle.key.starts_with(&prefix) || handle.key != format!("{prefix}{lease:x}") {
            return Err(LockError::invalid("handle key does not belong to this lock name and prefix"));
        }
        if handle.revision == 0 || handle.revision > i64::MAX as u64 || handle.fencing_token != handle.revision {
            return Err(LockError::invalid("handle revision/fencing token is not valid"));
        }
        let op = self.new_op(OpKind::Resume { handle: handle.clone(), lease, phase: ResumePhase::ReadKey });
        if !self.claim_name(&handle.name, op) {
            self.unqueue_local(&handle.name, op);
            self.ops.remove(&op);
            return Err(LockError::invalid(format!("lock {:?} is already held or being acquired by this client", handle.name)));
        }
        let req = self.send(now, Purpose::Op(op), "/v3/kv/range", gw::range_key(handle.key.as_bytes()), false);
        if let Some(o) = self.ops.get_mut(&op) {
            o.req = Some(req);
        }
        Ok(op)
    }

    fn start_inspect(&mut self, now: Millis, name: &str) -> Result<OpId, LockError> {
        self.check_open()?;
        validate_name(name)?;
        let op = self.new_op(OpKind::Inspect { name: name.to_string(), status: None });
        let body = gw::range_prefix_ascending(&self.lock_prefix(name));
        let req = self.send(now, Purpose::Op(op), "/v3/kv/range", body, false);
        if let Some(o) = self.ops.get_mut(&op) {
            o.req = Some(req);
        }
        Ok(op)
    }
}
