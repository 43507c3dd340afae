//! `EtcdMachine`: the etcd recipe (see the module docs) as a sans-IO state machine.

use std::collections::{BTreeMap, VecDeque};

use serde_json::Value;

use super::gateway::{self as gw, GatewayError, LeaseGrantResponse, LeaseTtl, RangeResponse, TxnResponse};
use super::{escape_name, EtcdConfig};
use crate::core::json_stream::JsonObjectSplitter;
use crate::core::names::validate_name;
use crate::core::outbox::{earliest, Outbox};
use crate::core::*;

const BACKEND: &str = "etcd";

/// Delay before re-checking after a watch broke, so a dead endpoint cannot
/// turn the waiter into a hot loop.
const WATCH_RETRY_MS: u64 = 200;
/// How often a key that could not be deleted is retried.
const ORPHAN_RETRY_MS: u64 = 1_000;
/// Range ops per key-check txn (etcd's default --max-txn-ops is 128).
const KEYS_PER_CHECK: usize = 100;
/// How often one acquire may start over because its key vanished before it
/// could be granted; beyond that the backend is misbehaving.
const MAX_RESTARTS: u32 = 5;

pub struct EtcdMachine {
    endpoints: Vec<String>,
    current_endpoint: usize,
    prefix: String,
    session_ttl_ms: u64,
    request_timeout_ms: u64,
    headers: Vec<(String, String)>,
    entropy: Box<dyn Entropy + Send>,
    out: Outbox,
    requests: BTreeMap<RequestId, Pending>,
    leases: BTreeMap<i64, Lease>,
    session_lease: Option<i64>,
    grant: Option<RequestId>,
    ops: BTreeMap<OpId, Op>,
    locks: BTreeMap<LockId, HeldLock>,
    /// Names this client is using (acquiring, holding or cleaning up), with the
    /// local acquires queued behind the current user.
    busy_names: BTreeMap<String, VecDeque<OpId>>,
    /// Keys whose deletion could not be confirmed; retried until done or the
    /// lease is gone. Their names stay busy meanwhile.
    orphans: Vec<Orphan>,
    closing: Option<OpId>,
    closed: bool,
}

struct Pending {
    purpose: Purpose,
    path: &'static str,
    body: Vec<u8>,
    /// None once a stream is established (a watch may wait indefinitely).
    deadline: Option<Millis>,
    endpoint: usize,
    attempt: u32,
    sent_at: Millis,
    splitter: Option<JsonObjectSplitter>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Purpose {
    Grant,
    KeepAlive { lease: i64 },
    KeyCheck { lease: i64 },
    Revoke,
    Orphan,
    /// The current request of an operation; its phase says what it is.
    Op(OpId),
    /// A request that only needs to complete (close's deletions).
    CloseStep,
}

struct Lease {
    ttl_ms: u64,
    /// Conservative: measured from when the granting/renewing request was sent.
    expires_at: Millis,
    next_keepalive: Millis,
    keepalive: Option<RequestId>,
    check: Option<RequestId>,
    /// The locks (id, key, revision) the in-flight check reads, so that its
    /// answer is judged against exactly those and never a later lock.
    checked: Vec<(LockId, Vec<u8>, i64)>,
}

struct HeldLock {
    name: String,
    key: Vec<u8>,
    rev: i64,
    lease: i64,
    /// A release is in flight: a check that misses the key is the release's
    /// own doing, not a loss.
    releasing: bool,
}

struct Orphan {
    name: String,
    key: Vec<u8>,
    rev: Option<i64>,
    lease: i64,
    retry_at: Millis,
    req: Option<RequestId>,
}

struct Op {
    req: Option<RequestId>,
    kind: OpKind,
}

enum OpKind {
    Acquire(Acquire),
    Release { lock: LockId },
    Extend { lock: LockId, phase: ExtendPhase },
    Resume { handle: LockHandle, lease: i64, phase: ResumePhase },
    Inspect { name: String, status: Option<LockStatus> },
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum ExtendPhase {
    KeepAlive,
    CheckKey,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum ResumePhase {
    ReadKey,
    KeepAlive,
}

struct Acquire {
    name: String,
    lock_prefix: Vec<u8>,
    wait: Wait,
    deadline: Option<Millis>,
    lease: Option<i64>,
    key: Vec<u8>,
    my_rev: i64,
    phase: AcqPhase,
    /// When set, a re-check is scheduled for this time (after a broken watch).
    retry_at: Option<Millis>,
    ending: Option<Ending>,
    restarts: u32,
    /// Random value stored in our key: a key found with another value is a
    /// leftover of an earlier incarnation and must never be adopted (its
    /// revision, as a fencing token, would go backwards).
    nonce: Vec<u8>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum AcqPhase {
    LocalQueue,
    NeedLease,
    Txn,
    Predecessor,
    Watch,
    /// Deleting a leftover key of ours before trying again.
    RemoveStale,
    Cleanup,
}

#[derive(Clone, Debug)]
enum Ending {
    NotAcquired,
    Error(LockError),
}

enum Failure {
    Transport(TransportError),
    Gateway(GatewayError),
}

impl Failure {
    fn retryable(&self) -> bool {
        match self {
            Failure::Transport(_) => true,
            Failure::Gateway(g) => matches!(g, GatewayError::Retryable { .. }),
        }
    }
}

impl EtcdMachine {
    pub fn new(cfg: EtcdConfig, entropy: Box<dyn Entropy + Send>) -> Result<Self, LockError> {
        let endpoints = cfg.validate()?;
        Ok(EtcdMachine {
            endpoints,
            current_endpoint: 0,
            prefix: cfg.prefix,
            session_ttl_ms: cfg.session_ttl_ms,
            request_timeout_ms: cfg.request_timeout_ms,
            headers: cfg.headers,
            entropy,
            out: Outbox::default(),
            requests: BTreeMap::new(),
            leases: BTreeMap::new(),
            session_lease: None,
            grant: None,
            ops: BTreeMap::new(),
            locks: BTreeMap::new(),
            busy_names: BTreeMap::new(),
            orphans: Vec::new(),
            closing: None,
            closed: false,
        })
    }

    fn lock_prefix(&self, name: &str) -> Vec<u8> {
        format!("{}/{}/", self.prefix, escape_name(name)).into_bytes()
    }

    fn max_attempts(&self) -> u32 {
        (self.endpoints.len() as u32).max(1) + 1
    }

    // ---- requests ---------------------------------------------------------

    fn send(&mut self, now: Millis, purpose: Purpose, path: &'static str, body: Value, stream: bool) -> RequestId {
        let body = serde_json::to_vec(&body).unwrap_or_default();
        self.send_raw(now, purpose, path, body, stream, 1)
    }

    fn send_raw(&mut self, now: Millis, purpose: Purpose, path: &'static str, body: Vec<u8>, stream: bool, attempt: u32) -> RequestId {
        let id = self.out.request_id();
        let endpoint = self.current_endpoint % self.endpoints.len();
        let mut headers = vec![("content-type".to_string(), "application/json".to_string())];
        headers.extend(self.headers.iter().cloned());
        self.out.send(HttpRequest {
            id,
            method: Method::Post,
            url: format!("{}{}", self.endpoints[endpoint], path),
            headers,
            body: body.clone(),
            timeout_ms: Some(self.request_timeout_ms),
            stream,
        });
        self.requests.insert(
            id,
            Pending {
                purpose,
                path,
                body,
                deadline: Some(now + self.request_timeout_ms),
                endpoint,
                attempt,
                sent_at: now,
                splitter: stream.then(JsonObjectSplitter::new),
            },
        );
        id
    }

    fn cancel_request(&mut self, id: Option<RequestId>) {
        if let Some(id) = id {
            if self.requests.remove(&id).is_some() {
                self.out.cancel(id);
            }
        }
    }

    /// A request failed: retry it on the next endpoint when that can help,
    /// otherwise hand the failure to its purpose.
    fn on_failure(&mut self, now: Millis, id: RequestId, p: Pending, f: Failure) {
        if f.retryable() && p.endpoint == self.current_endpoint % self.endpoints.len() {
            self.current_endpoint = (p.endpoint + 1) % self.endpoints.len();
        }
        let is_stream = p.splitter.is_some();
        if f.retryable() && !is_stream && p.attempt < self.max_attempts() && !self.closed {
            let new_id = self.send_raw(now, p.purpose, p.path, p.body, false, p.attempt + 1);
            self.retarget(p.purpose, id, new_id);
            return;
        }
        self.dispatch(now, id, p, Err(f));
    }

    /// After a retry, the purpose's bookkeeping must point at the new request.
    fn retarget(&mut self, purpose: Purpose, old: RequestId, new: RequestId) {
        let swap = |slot: &mut Option<RequestId>| {
            if *slot == Some(old) {
                *slot = Some(new);
            }
        };
        match purpose {
            Purpose::Grant => swap(&mut self.grant),
            Purpose::KeepAlive { lease } => {
                if let Some(l) = self.leases.get_mut(&lease) {
                    swap(&mut l.keepalive)
                }
            }
            Purpose::KeyCheck { lease } => {
                if let Some(l) = self.leases.get_mut(&lease) {
                    swap(&mut l.check)
                }
            }
            Purpose::Op(op) => {
                if let Some(o) = self.ops.get_mut(&op) {
                    swap(&mut o.req)
                }
            }
            Purpose::Orphan => {
                for o in &mut self.orphans {
                    swap(&mut o.req)
                }
            }
            Purpose::Revoke | Purpose::CloseStep => {}
        }
    }

    fn dispatch(&mut self, now: Millis, id: RequestId, p: Pending, result: Result<(u16, Vec<u8>), Failure>) {
        match p.purpose {
            Purpose::Grant => self.on_grant(now, id, p.sent_at, result),
            Purpose::KeepAlive { lease } => self.on_keepalive(now, id, lease, p.sent_at, result),
            Purpose::KeyCheck { lease } => self.on_key_check(now, id, lease, result),
            Purpose::Revoke => {}
            Purpose::Orphan => self.on_orphan(now, id, result),
            Purpose::CloseStep => self.maybe_closed(),
            Purpose::Op(op) => {
                if self.ops.get(&op).map(|o| o.req == Some(id)).unwrap_or(false) {
                    if let Some(o) = self.ops.get_mut(&op) {
                        o.req = None;
                    }
                    self.on_op_reply(now, op, p.sent_at, result);
                }
            }
        }
    }

    fn backend_error(&self, name: &str, f: Failure) -> LockError {
        match f {
            Failure::Transport(t) => LockError::Transport { backend: BACKEND, name: name.to_string(), message: t.to_string() },
            Failure::Gateway(g) => {
                // A backend (or a proxy) may echo our headers back: never let
                // a configured header value reach an error message.
                let secrets: Vec<&str> = self
                    .headers
                    .iter()
                    .flat_map(|(_, v)| std::iter::once(v.as_str()).chain(v.split_whitespace()))
                    .collect();
                let message = crate::core::error::sanitize_detail(&g.message(), &secrets);
                LockError::Backend { backend: BACKEND, name: name.to_string(), status: g.status(), message }
            }
        }
    }

    // ---- the session lease -----------------------------------------------

    fn lease_in_use(&self, lease: i64) -> bool {
        self.locks.values().any(|l| l.lease == lease)
            || self.ops.values().any(|o| match &o.kind {
                OpKind::Acquire(a) => a.lease == Some(lease) && a.phase != AcqPhase::LocalQueue,
                _ => false,
            })
            || self.orphans.iter().any(|o| o.lease == lease)
    }

    /// The session lease if it can still carry a new key, else None (and a
    /// grant is started).
    fn usable_session_lease(&mut self, now: Millis) -> Option<i64> {
        if let Some(id) = self.session_lease {
            match self.leases.get(&id) {
                // A fresh grant leaves ~99% of the TTL; an idle lease older than
                // 2/3 of it is too close to expiry to put a new key on.
                Some(l) if l.expires_at > now + l.ttl_ms / 3 => return Some(id),
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
            self.grant = Some(self.send(now, Purpose::Grant, "/v3/lease/grant", gw::lease_grant(ttl_s), false));
        }
        None
    }

    /// Conservative expiry: the server's TTL counted from when we sent the
    /// request, less 1% + 2 ms for clock-rate drift between client and server.
    fn expiry(sent_at: Millis, ttl_s: i64) -> Millis {
        let ttl_ms = (ttl_s.max(0) as u64) * 1000;
        (sent_at + ttl_ms).saturating_sub(ttl_ms / 100 + 2)
    }

    fn on_grant(&mut self, now: Millis, id: RequestId, sent_at: Millis, result: Result<(u16, Vec<u8>), Failure>) {
        if self.grant != Some(id) {
            return;
        }
        self.grant = None;
        let parsed = match result {
            Ok((status, body)) => gw::parse::<LeaseGrantResponse>(status, &body).map_err(Failure::Gateway),
            Err(f) => Err(f),
        };
        let grant = match parsed {
            Ok(g) if g.ID != 0 && g.TTL > 0 => g,
            Ok(_) => return self.fail_lease_waiters(now, Failure::Gateway(GatewayError::Malformed("lease grant without ID/TTL".into()))),
            Err(f) => return self.fail_lease_waiters(now, f),
        };
        let ttl_ms = grant.TTL as u64 * 1000;
        self.leases.insert(
            grant.ID,
            Lease { ttl_ms, expires_at: Self::expiry(sent_at, grant.TTL), next_keepalive: sent_at + ttl_ms / 3, keepalive: None, check: None, checked: Vec::new() },
        );
        self.session_lease = Some(grant.ID);
        let waiting: Vec<OpId> = self.acquires_in(AcqPhase::NeedLease);
        for op in waiting {
            self.acquire_step(now, op);
        }
    }

    fn acquires_in(&self, phase: AcqPhase) -> Vec<OpId> {
        self.ops
            .iter()
            .filter(|(_, o)| matches!(&o.kind, OpKind::Acquire(a) if a.phase == phase))
            .map(|(id, _)| *id)
            .collect()
    }

    fn fail_lease_waiters(&mut self, now: Millis, f: Failure) {
        for op in self.acquires_in(AcqPhase::NeedLease) {
            let name = self.op_name(op);
            let copy = match &f {
                Failure::Transport(t) => Failure::Transport(t.clone()),
                Failure::Gateway(g) => Failure::Gateway(g.clone()),
            };
            self.finish_acquire(now, op, Ending::Error(self.backend_error(&name, copy)));
        }
    }

    fn send_keepalive(&mut self, now: Millis, lease: i64, purpose: Purpose) -> RequestId {
        self.send(now, purpose, "/v3/lease/keepalive", gw::lease_id(lease), false)
    }

    /// Periodic renewal: keepalive plus one txn reading every held key on the lease.
    fn renew(&mut self, now: Millis, lease: i64) {
        let keepalive = self.send_keepalive(now, lease, Purpose::KeepAlive { lease });
        let targets: Vec<(LockId, Vec<u8>, i64)> = self
            .locks
            .iter()
            .filter(|(_, l)| l.lease == lease && !l.releasing)
            .map(|(id, l)| (*id, l.key.clone(), l.rev))
            .take(KEYS_PER_CHECK)
            .collect();
        let check = if targets.is_empty() {
            None
        } else {
            Some(self.send(now, Purpose::KeyCheck { lease }, "/v3/kv/txn", gw::read_keys_txn(targets.iter().map(|t| t.1.as_slice())), false))
        };
        if let Some(l) = self.leases.get_mut(&lease) {
            l.keepalive = Some(keepalive);
            l.check = check;
            l.checked = targets;
        }
    }

    /// Applies a keepalive answer to the lease; returns Ok(expires_at) or the loss reason.
    fn apply_keepalive(&mut self, lease: i64, sent_at: Millis, result: Result<(u16, Vec<u8>), Failure>) -> Result<Millis, Result<LostReason, Failure>> {
        let parsed = match result {
            Ok((status, body)) => gw::parse_wrapped::<LeaseTtl>(status, &body).map_err(Failure::Gateway),
            Err(f) => Err(f),
        };
        match parsed {
            Ok(k) if k.TTL > 0 => {
                let l = self.leases.get_mut(&lease).ok_or(Ok(LostReason::Expired))?;
                let exp = Self::expiry(sent_at, k.TTL);
                // Never move expiry backwards because of a late, older answer.
                l.expires_at = l.expires_at.max(exp);
                l.ttl_ms = k.TTL as u64 * 1000;
                l.next_keepalive = l.next_keepalive.max(sent_at + l.ttl_ms / 3);
                Ok(l.expires_at)
            }
            Ok(_) | Err(Failure::Gateway(GatewayError::LeaseNotFound)) => Err(Ok(LostReason::RenewalFailed("the lease no longer exists".into()))),
            Err(f) => Err(Err(f)),
        }
    }

    fn on_keepalive(&mut self, now: Millis, id: RequestId, lease: i64, sent_at: Millis, result: Result<(u16, Vec<u8>), Failure>) {
        match self.leases.get_mut(&lease) {
            Some(l) if l.keepalive == Some(id) => l.keepalive = None,
            _ => return,
        }
        match self.apply_keepalive(lease, sent_at, result) {
            Ok(expires_at) => {
                let renewed: Vec<LockId> = self.locks.iter().filter(|(_, l)| l.lease == lease).map(|(id, _)| *id).collect();
                for lock in renewed {
                    self.out.event(Event::Renewed { lock, expires_at });
                }
            }
            Err(Ok(reason)) => self.lease_lost(now, lease, reason),
            Err(Err(_)) => {
                // Could not reach anyone: try again soon; expiry is enforced by the timer.
                if let Some(l) = self.leases.get_mut(&lease) {
                    l.next_keepalive = now + (l.ttl_ms / 10).clamp(100, 1_000);
                }
            }
        }
    }

    fn on_key_check(&mut self, now: Millis, id: RequestId, lease: i64, result: Result<(u16, Vec<u8>), Failure>) {
        let targets = match self.leases.get_mut(&lease) {
            Some(l) if l.check == Some(id) => {
                l.check = None;
                std::mem::take(&mut l.checked)
            }
            _ => return,
        };
        let txn = match result.and_then(|(s, b)| gw::parse::<TxnResponse>(s, &b).map_err(Failure::Gateway)) {
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
            let still_ours = self.locks.get(&lock).map(|l| l.key == key && l.rev == rev && !l.releasing).unwrap_or(false);
            if still_ours && !present.iter().any(|(k, r)| *k == key && *r == rev) {
                self.lose_lock(now, lock, LostReason::KeyGone);
            }
        }
    }

    /// The lease is gone (or can no longer be trusted): every lock on it is
    /// lost, and waiters on it start over with a new session lease.
    fn lease_lost(&mut self, now: Millis, lease: i64, reason: LostReason) {
        if let Some(l) = self.leases.remove(&lease) {
            self.cancel_request(l.keepalive);
            self.cancel_request(l.check);
            // Best effort: if the server still has it, revoking frees its keys now.
            self.send(now, Purpose::Revoke, "/v3/lease/revoke", gw::lease_id(lease), false);
        }
        if self.session_lease == Some(lease) {
            self.session_lease = None;
        }
        let locks: Vec<LockId> = self.locks.iter().filter(|(_, l)| l.lease == lease).map(|(id, _)| *id).collect();
        for lock in locks {
            self.lose_lock(now, lock, reason.clone());
        }
        let orphan_names: Vec<String> = self.orphans.iter().filter(|o| o.lease == lease).map(|o| o.name.clone()).collect();
        self.orphans.retain(|o| o.lease != lease);
        for name in orphan_names {
            self.free_name(now, &name);
        }
        let ops: Vec<OpId> = self.ops.keys().copied().collect();
        for op in ops {
            let Some(o) = self.ops.get_mut(&op) else { continue };
            match &mut o.kind {
                OpKind::Acquire(a) if a.lease == Some(lease) => {
                    let req = o.req.take();
                    if a.phase == AcqPhase::Cleanup || a.ending.is_some() {
                        // The key died with the lease: nothing left to clean.
                        let ending = a.ending.clone().unwrap_or(Ending::NotAcquired);
                        self.cancel_request(req);
                        self.finish_acquire(now, op, ending);
                    } else if a.phase != AcqPhase::LocalQueue && a.restarts >= MAX_RESTARTS {
                        let name = a.name.clone();
                        self.cancel_request(req);
                        let error = LockError::Backend { backend: BACKEND, name, status: None, message: "the session lease keeps disappearing".into() };
                        self.finish_acquire(now, op, Ending::Error(error));
                    } else if a.phase != AcqPhase::LocalQueue {
                        a.restarts += 1;
                        a.lease = None;
                        a.my_rev = 0;
                        a.phase = AcqPhase::NeedLease;
                        a.retry_at = None;
                        self.cancel_request(req);
                        self.acquire_step(now, op);
                    }
                }
                _ => {}
            }
        }
    }

    fn lose_lock(&mut self, now: Millis, lock: LockId, reason: LostReason) {
        if let Some(l) = self.locks.remove(&lock) {
            self.out.event(Event::Lost { lock, name: l.name.clone(), reason });
            self.free_name(now, &l.name);
        }
    }

    // ---- names in use by this client ------------------------------------

    /// Claims `name` for `op`; false if another local operation uses it.
    fn claim_name(&mut self, name: &str, op: OpId) -> bool {
        match self.busy_names.get_mut(name) {
            Some(queue) => {
                queue.push_back(op);
                false
            }
            None => {
                self.busy_names.insert(name.to_string(), VecDeque::new());
                true
            }
        }
    }

    /// The current user of `name` is done with it: start the next local waiter.
    fn free_name(&mut self, now: Millis, name: &str) {
        let next = match self.busy_names.get_mut(name) {
            Some(queue) => queue.pop_front(),
            None => return,
        };
        match next {
            Some(op) => {
                if let Some(OpKind::Acquire(a)) = self.ops.get_mut(&op).map(|o| &mut o.kind) {
                    a.phase = AcqPhase::NeedLease;
                }
                self.acquire_step(now, op);
            }
            None => {
                self.busy_names.remove(name);
            }
        }
    }

    fn unqueue_local(&mut self, name: &str, op: OpId) {
        if let Some(q) = self.busy_names.get_mut(name) {
            q.retain(|o| *o != op);
        }
    }

    // ---- acquire ----------------------------------------------------------

    fn op_name(&self, op: OpId) -> String {
        match self.ops.get(&op).map(|o| &o.kind) {
            Some(OpKind::Acquire(a)) => a.name.clone(),
            Some(OpKind::Inspect { name, .. }) => name.clone(),
            Some(OpKind::Resume { handle, .. }) => handle.name.clone(),
            Some(OpKind::Release { lock }) | Some(OpKind::Extend { lock, .. }) => {
                self.locks.get(lock).map(|l| l.name.clone()).unwrap_or_default()
            }
            None => String::new(),
        }
    }

    fn acquire_mut(&mut self, op: OpId) -> Option<&mut Acquire> {
        match self.ops.get_mut(&op).map(|o| &mut o.kind) {
            Some(OpKind::Acquire(a)) => Some(a),
            _ => None,
        }
    }

    /// Advances an acquire that is in NeedLease: sends its txn once a lease exists.
    fn acquire_step(&mut self, now: Millis, op: OpId) {
        let Some(a) = self.acquire_mut(op) else { return };
        if a.phase != AcqPhase::NeedLease {
            return;
        }
        let Some(lease) = self.usable_session_lease(now) else { return };
        let Some(a) = self.acquire_mut(op) else { return };
        let mut key = a.lock_prefix.clone();
        key.extend_from_slice(format!("{lease:x}").as_bytes());
        a.key = key;
        a.lease = Some(lease);
        a.phase = AcqPhase::Txn;
        let body = gw::acquire_txn(&a.key, &a.lock_prefix, lease, &a.nonce);
        let req = self.send(now, Purpose::Op(op), "/v3/kv/txn", body, false);
        if let Some(o) = self.ops.get_mut(&op) {
            o.req = Some(req);
        }
    }

    fn send_predecessor_check(&mut self, now: Millis, op: OpId) {
        let Some(a) = self.acquire_mut(op) else { return };
        a.phase = AcqPhase::Predecessor;
        a.retry_at = None;
        let body = gw::predecessor_txn(&a.key, &a.lock_prefix, a.my_rev);
        let req = self.send(now, Purpose::Op(op), "/v3/kv/txn", body, false);
        if let Some(o) = self.ops.get_mut(&op) {
            o.req = Some(req);
        }
    }

    fn on_acquire_reply(&mut self, now: Millis, op: OpId, result: Result<(u16, Vec<u8>), Failure>) {
        let Some(a) = self.acquire_mut(op) else { return };
        let phase = a.phase.clone();
        let name = a.name.clone();
        let lease = a.lease;
        if phase == AcqPhase::Cleanup {
            return self.on_cleanup_reply(now, op, result);
        }
        if let Some(ending) = a.ending.clone() {
            // Cancelled or timed out while this txn was in flight (see `cleanup`).
            return self.cleanup_after_txn(now, op, phase, ending, result);
        }
        if phase == AcqPhase::RemoveStale {
            return match result {
                Ok(_) => {
                    if let Some(a) = self.acquire_mut(op) {
                        a.phase = AcqPhase::NeedLease;
                    }
                    self.acquire_step(now, op)
                }
                Err(f) => {
                    let err = self.backend_error(&name, f);
                    self.finish_acquire(now, op, Ending::Error(err))
                }
            };
        }
        let txn = match result.and_then(|(s, b)| gw::parse::<TxnResponse>(s, &b).map_err(Failure::Gateway)) {
            Ok(t) => t,
            Err(Failure::Gateway(GatewayError::LeaseNotFound)) => {
                if let Some(l) = lease {
                    self.lease_lost(now, l, LostReason::RenewalFailed("the lease no longer exists".into()));
                }
                return;
            }
            Err(f) => {
                let err = self.backend_error(&name, f);
                return self.cleanup(now, op, Ending::Error(err));
            }
        };
        let Some(a) = self.acquire_mut(op) else { return };
        let revision = txn.header.revision;
        let malformed = |m: &str| LockError::Backend { backend: BACKEND, name: name.clone(), status: None, message: format!("malformed reply: {m}") };
        if revision <= 0 || txn.range(0).is_none() {
            return self.cleanup(now, op, Ending::Error(malformed("txn reply without revision or range")));
        }
        let (predecessor, own_present) = match phase {
            AcqPhase::Txn if txn.succeeded => {
                a.my_rev = revision;
                let newest = txn.range(0).map(|r| r.kvs.clone()).unwrap_or_default();
                let pred = newest.iter().find(|kv| kv.key != a.key && kv.create_revision < a.my_rev).map(|kv| kv.key.clone());
                (pred, true)
            }
            AcqPhase::Txn => {
                // Our key already exists: an earlier attempt applied. Learn its revision.
                match txn.range(0).and_then(|r| r.kvs.iter().find(|kv| kv.key == a.key)).cloned() {
                    Some(kv) if kv.value == a.nonce => {
                        a.my_rev = kv.create_revision;
                        return self.send_predecessor_check(now, op);
                    }
                    Some(kv) => {
                        // A leftover of an earlier incarnation of our key: remove
                        // exactly it, then try again with a fresh key.
                        a.restarts += 1;
                        if a.restarts > MAX_RESTARTS {
                            return self.cleanup(now, op, Ending::Error(malformed("a stale key cannot be removed")));
                        }
                        a.phase = AcqPhase::NeedLease;
                        let body = gw::delete_if_revision(&kv.key, kv.create_revision);
                        let req = self.send(now, Purpose::Op(op), "/v3/kv/txn", body, false);
                        if let Some(o) = self.ops.get_mut(&op) {
                            o.req = Some(req);
                        }
                        if let Some(a) = self.acquire_mut(op) {
                            a.phase = AcqPhase::RemoveStale;
                        }
                        return;
                    }
                    None => (None, false),
                }
            }
            AcqPhase::Predecessor => {
                let own = txn.range(0).map(|r| r.kvs.iter().any(|kv| kv.key == a.key && kv.create_revision == a.my_rev)).unwrap_or(false);
                let pred = txn.range(1).and_then(|r| r.kvs.first()).map(|kv| kv.key.clone());
                (pred, own)
            }
            _ => return,
        };
        if !own_present || a.my_rev <= 0 {
            // Our key vanished (deleted, or the lease expired): start over.
            a.restarts += 1;
            if a.restarts > MAX_RESTARTS {
                return self.cleanup(now, op, Ending::Error(malformed("our key keeps vanishing")));
            }
            a.phase = AcqPhase::NeedLease;
            a.my_rev = 0;
            return self.acquire_step(now, op);
        }
        match predecessor {
            None => self.grant_lock(now, op),
            Some(_) if a.wait == Wait::Try => self.cleanup(now, op, Ending::NotAcquired),
            Some(pred) => {
                a.phase = AcqPhase::Watch;
                let body = gw::watch_delete(&pred, revision + 1);
                let req = self.send(now, Purpose::Op(op), "/v3/watch", body, true);
                if let Some(o) = self.ops.get_mut(&op) {
                    o.req = Some(req);
                }
            }
        }
    }

    /// Our key is the lowest: hand the lock out if our lease is still valid.
    fn grant_lock(&mut self, now: Millis, op: OpId) {
        let Some(a) = self.acquire_mut(op) else { return };
        let lease = a.lease.unwrap_or(0);
        let expires_at = match self.leases.get(&lease) {
            Some(l) if l.expires_at > now => l.expires_at,
            _ => {
                return self.lease_lost(now, lease, LostReason::Expired);
            }
        };
        let Some(Op { kind: OpKind::Acquire(a), .. }) = self.ops.remove(&op) else { return };
        let lock = self.out.lock_id();
        let handle = LockHandle {
            v: 1,
            backend: BackendKind::Etcd,
            name: a.name.clone(),
            key: String::from_utf8_lossy(&a.key).into_owned(),
            owner: lease.to_string(),
            fencing_token: a.my_rev as u64,
            revision: a.my_rev as u64,
        };
        self.locks.insert(lock, HeldLock { name: a.name.clone(), key: a.key.clone(), rev: a.my_rev, lease, releasing: false });
        self.out.event(Event::Acquired {
            op,
            lock: LockInfo { id: lock, name: a.name, fencing_token: a.my_rev as u64, expires_at, handle },
        });
    }

    fn on_watch_chunk(&mut self, now: Millis, id: RequestId, data: &[u8]) {
        let Some(p) = self.requests.get_mut(&id) else { return };
        let Purpose::Op(op) = p.purpose else { return };
        let Some(splitter) = p.splitter.as_mut() else { return };
        let messages = match splitter.push(data) {
            Ok(m) => m,
            Err(_) => return self.watch_broken(now, id, op),
        };
        for m in messages {
            match gw::parse_watch_message(&m) {
                Ok(w) if w.canceled || w.compact_revision > 0 || w.has_delete() => {
                    // The predecessor went away (or the watch can't tell): re-check.
                    self.cancel_request(Some(id));
                    if let Some(o) = self.ops.get_mut(&op) {
                        o.req = None;
                    }
                    return self.send_predecessor_check(now, op);
                }
                Ok(w) if w.created => {
                    if let Some(p) = self.requests.get_mut(&id) {
                        p.deadline = None;
                    }
                }
                Ok(_) => {}
                Err(_) => return self.watch_broken(now, id, op),
            }
        }
    }

    /// The watch ended or failed: re-check after a short jittered pause.
    fn watch_broken(&mut self, now: Millis, id: RequestId, op: OpId) {
        self.cancel_request(Some(id));
        let delay = WATCH_RETRY_MS + jitter(self.entropy.as_mut(), WATCH_RETRY_MS);
        if let Some(o) = self.ops.get_mut(&op) {
            if o.req == Some(id) {
                o.req = None;
            }
            if let OpKind::Acquire(a) = &mut o.kind {
                a.retry_at = Some(now + delay);
            }
        }
    }

    /// Remove our key (if it may exist), then report `ending`.
    fn cleanup(&mut self, now: Millis, op: OpId, ending: Ending) {
        let Some(o) = self.ops.get_mut(&op) else { return };
        let OpKind::Acquire(a) = &mut o.kind else { return };
        a.retry_at = None;
        if matches!(a.phase, AcqPhase::Txn | AcqPhase::RemoveStale) && o.req.is_some() {
            // The txn in flight may still apply after anything we send now:
            // wait for its answer, which tells exactly which key to delete.
            a.ending = Some(ending);
            return;
        }
        let req = o.req.take();
        let has_key = matches!(a.phase, AcqPhase::Txn | AcqPhase::Predecessor | AcqPhase::Watch);
        if !has_key || a.lease.is_none() {
            self.cancel_request(req);
            return self.finish_acquire(now, op, ending);
        }
        a.phase = AcqPhase::Cleanup;
        a.ending = Some(ending);
        let body = if a.my_rev > 0 { gw::delete_if_revision(&a.key, a.my_rev) } else { gw::delete_key(&a.key) };
        let path = if a.my_rev > 0 { "/v3/kv/txn" } else { "/v3/kv/deleterange" };
        self.cancel_request(req);
        let req = self.send(now, Purpose::Op(op), path, body, false);
        if let Some(o) = self.ops.get_mut(&op) {
            o.req = Some(req);
        }
    }

    /// The answer to the txn that was in flight when the acquire was cancelled:
    /// learn our key's revision from it (if it applied) and delete exactly that.
    fn cleanup_after_txn(&mut self, now: Millis, op: OpId, phase: AcqPhase, ending: Ending, result: Result<(u16, Vec<u8>), Failure>) {
        let Some(a) = self.acquire_mut(op) else { return };
        if phase == AcqPhase::RemoveStale {
            // Nothing of this attempt was created.
            a.phase = AcqPhase::NeedLease;
            return self.finish_acquire(now, op, ending);
        }
        let txn = result.ok().and_then(|(s, b)| gw::parse::<TxnResponse>(s, &b).ok());
        match txn {
            Some(t) if t.succeeded && t.header.revision > 0 => a.my_rev = t.header.revision,
            Some(t) => match t.range(0).and_then(|r| r.kvs.iter().find(|kv| kv.key == a.key)) {
                Some(kv) => a.my_rev = kv.create_revision,
                None => {
                    // Definitely nothing created.
                    a.phase = AcqPhase::NeedLease;
                    return self.finish_acquire(now, op, ending);
                }
            },
            None => a.my_rev = 0, // unknown outcome: delete whatever is there
        }
        a.phase = AcqPhase::Watch; // "may have a key": cleanup deletes it
        self.cleanup(now, op, ending);
    }

    fn on_cleanup_reply(&mut self, now: Millis, op: OpId, result: Result<(u16, Vec<u8>), Failure>) {
        let Some(a) = self.acquire_mut(op) else { return };
        let ending = a.ending.clone().unwrap_or(Ending::NotAcquired);
        let ok = matches!(&result, Ok((s, _)) if (200..300).contains(s));
        if !ok {
            // Keep the name busy and retry in the background; report now.
            let orphan = Orphan {
                name: a.name.clone(),
                key: a.key.clone(),
                rev: (a.my_rev > 0).then_some(a.my_rev),
                lease: a.lease.unwrap_or(0),
                retry_at: now + ORPHAN_RETRY_MS,
                req: None,
            };
            if let Some(Op { kind: OpKind::Acquire(a), .. }) = self.ops.remove(&op) {
                self.orphans.push(orphan);
                self.report_ending(op, &a.name, ending);
            }
            return;
        }
        self.finish_acquire(now, op, ending);
    }

    fn report_ending(&mut self, op: OpId, _name: &str, ending: Ending) {
        match ending {
            Ending::NotAcquired => self.out.event(Event::NotAcquired { op }),
            Ending::Error(error) => self.out.event(Event::Failed { op, error }),
        }
    }

    fn finish_acquire(&mut self, now: Millis, op: OpId, ending: Ending) {
        let Some(o) = self.ops.remove(&op) else { return };
        self.cancel_request(o.req);
        let OpKind::Acquire(a) = o.kind else { return };
        self.report_ending(op, &a.name, ending);
        if a.phase == AcqPhase::LocalQueue {
            self.unqueue_local(&a.name, op);
        } else {
            self.free_name(now, &a.name);
        }
    }

    fn on_orphan(&mut self, now: Millis, id: RequestId, result: Result<(u16, Vec<u8>), Failure>) {
        let Some(i) = self.orphans.iter().position(|o| o.req == Some(id)) else { return };
        if matches!(&result, Ok((s, _)) if (200..300).contains(s)) {
            let o = self.orphans.remove(i);
            self.free_name(now, &o.name);
        } else {
            self.orphans[i].req = None;
            self.orphans[i].retry_at = now + ORPHAN_RETRY_MS;
        }
    }

    // ---- other operations -------------------------------------------------

    fn on_op_reply(&mut self, now: Millis, op: OpId, sent_at: Millis, result: Result<(u16, Vec<u8>), Failure>) {
        let Some(o) = self.ops.get(&op) else { return };
        match &o.kind {
            OpKind::Acquire(_) => self.on_acquire_reply(now, op, result),
            OpKind::Release { lock } => {
                let lock = *lock;
                self.ops.remove(&op);
                let Some(held) = self.locks.get(&lock) else {
                    return self.out.event(Event::Released { op, lock, held_until_release: false });
                };
                let name = held.name.clone();
                match result.and_then(|(s, b)| gw::parse::<TxnResponse>(s, &b).map_err(Failure::Gateway)) {
                    Ok(t) => {
                        self.locks.remove(&lock);
                        self.out.event(Event::Released { op, lock, held_until_release: t.succeeded });
                        self.free_name(now, &name);
                    }
                    Err(f) => {
                        // Give up on the lock locally; keep deleting it in the background.
                        if let Some(h) = self.locks.remove(&lock) {
                            self.orphans.push(Orphan { name: h.name, key: h.key, rev: Some(h.rev), lease: h.lease, retry_at: now + ORPHAN_RETRY_MS, req: None });
                        }
                        self.out.event(Event::Failed { op, error: self.backend_error(&name, f) });
                    }
                }
            }
            OpKind::Extend { lock, phase } => {
                let (lock, phase) = (*lock, *phase);
                let Some(held) = self.locks.get(&lock) else {
                    self.ops.remove(&op);
                    return self.out.event(Event::Failed { op, error: LockError::NotHeld { backend: BACKEND, name: "<released or lost lock>".into() } });
                };
                let (name, lease, key, rev) = (held.name.clone(), held.lease, held.key.clone(), held.rev);
                match phase {
                    ExtendPhase::KeepAlive => match self.apply_keepalive(lease, sent_at, result) {
                        Ok(_) => {
                            if let Some(Op { kind: OpKind::Extend { phase, .. }, req }) = self.ops.get_mut(&op) {
                                *phase = ExtendPhase::CheckKey;
                                let _ = req;
                            }
                            let r = self.send(now, Purpose::Op(op), "/v3/kv/range", gw::range_key(&key), false);
                            if let Some(o) = self.ops.get_mut(&op) {
                                o.req = Some(r);
                            }
                        }
                        Err(Ok(reason)) => {
                            self.ops.remove(&op);
                            self.out.event(Event::Failed { op, error: LockError::Lost { backend: BACKEND, name, reason: reason.to_string() } });
                            self.lease_lost(now, lease, reason);
                        }
                        Err(Err(f)) => {
                            self.ops.remove(&op);
                            self.out.event(Event::Failed { op, error: self.backend_error(&name, f) });
                        }
                    },
                    ExtendPhase::CheckKey => {
                        self.ops.remove(&op);
                        match result.and_then(|(s, b)| gw::parse::<RangeResponse>(s, &b).map_err(Failure::Gateway)) {
                            Ok(r) if r.kvs.iter().any(|kv| kv.key == key && kv.create_revision == rev) => {
                                let expires_at = self.leases.get(&lease).map(|l| l.expires_at).unwrap_or(now);
                                self.out.event(Event::Extended { op, lock, expires_at });
                            }
                            Ok(_) if self.locks.get(&lock).map(|l| l.releasing).unwrap_or(true) => {
                                // Released meanwhile: the key is gone by our own hand.
                                self.out.event(Event::Failed { op, error: LockError::NotHeld { backend: BACKEND, name } });
                            }
                            Ok(_) => {
                                self.out.event(Event::Failed { op, error: LockError::Lost { backend: BACKEND, name, reason: LostReason::KeyGone.to_string() } });
                                self.lose_lock(now, lock, LostReason::KeyGone);
                            }
                            Err(f) => self.out.event(Event::Failed { op, error: self.backend_error(&name, f) }),
                        }
                    }
                }
            }
            OpKind::Resume { handle, lease, phase } => {
                let (handle, lease, phase) = (handle.clone(), *lease, *phase);
                let lost = |reason: &str| LockError::Lost { backend: BACKEND, name: handle.name.clone(), reason: reason.to_string() };
                match phase {
                    ResumePhase::ReadKey => match result.and_then(|(s, b)| gw::parse::<RangeResponse>(s, &b).map_err(Failure::Gateway)) {
                        Ok(r) if r.kvs.iter().any(|kv| kv.key == handle.key.as_bytes() && kv.create_revision == handle.revision as i64 && kv.lease == lease) => {
                            // Is it still the holder? No key of the lock may be older.
                            if let Some(Op { kind: OpKind::Resume { phase, .. }, .. }) = self.ops.get_mut(&op) {
                                *phase = ResumePhase::KeepAlive;
                            }
                            self.leases.entry(lease).or_insert(Lease { ttl_ms: self.session_ttl_ms, expires_at: 0, next_keepalive: now, keepalive: None, check: None, checked: Vec::new() });
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
                            let lock = self.out.lock_id();
                            self.locks.insert(lock, HeldLock { name: handle.name.clone(), key: handle.key.as_bytes().to_vec(), rev: handle.revision as i64, lease, releasing: false });
                            self.out.event(Event::Acquired {
                                op,
                                lock: LockInfo { id: lock, name: handle.name.clone(), fencing_token: handle.fencing_token, expires_at, handle },
                            });
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
            OpKind::Inspect { name, status } => {
                let name = name.clone();
                match status.clone() {
                    None => match result.and_then(|(s, b)| gw::parse::<RangeResponse>(s, &b).map_err(Failure::Gateway)) {
                        Ok(r) => {
                            let mut kvs = r.kvs;
                            kvs.sort_by_key(|kv| kv.create_revision);
                            let holder = kvs.first().cloned();
                            let st = LockStatus {
                                name: name.clone(),
                                held: holder.is_some(),
                                holder: holder.as_ref().map(|kv| String::from_utf8_lossy(&kv.key).into_owned()),
                                fencing_token: holder.as_ref().map(|kv| kv.create_revision as u64),
                                remaining_ms: None,
                                waiters: kvs.iter().skip(1).map(|kv| String::from_utf8_lossy(&kv.key).into_owned()).collect(),
                            };
                            match holder {
                                Some(h) if h.lease != 0 => {
                                    if let Some(Op { kind: OpKind::Inspect { status, .. }, .. }) = self.ops.get_mut(&op) {
                                        *status = Some(st);
                                    }
                                    let r = self.send(now, Purpose::Op(op), "/v3/lease/timetolive", gw::lease_id(h.lease), false);
                                    if let Some(o) = self.ops.get_mut(&op) {
                                        o.req = Some(r);
                                    }
                                }
                                _ => {
                                    self.ops.remove(&op);
                                    self.out.event(Event::Inspected { op, status: st });
                                }
                            }
                        }
                        Err(f) => self.fail_op(now, op, self.backend_error(&name, f)),
                    },
                    Some(mut st) => {
                        self.ops.remove(&op);
                        if let Ok((s, b)) = result {
                            if let Ok(t) = gw::parse::<LeaseTtl>(s, &b) {
                                st.remaining_ms = (t.TTL > 0).then_some(t.TTL as u64 * 1000);
                            }
                        }
                        self.out.event(Event::Inspected { op, status: st });
                    }
                }
            }
        }
    }

    fn drop_lease_if_unused(&mut self, lease: i64, op: OpId) {
        let resumed_elsewhere = self.ops.iter().any(|(id, o)| *id != op && matches!(&o.kind, OpKind::Resume { lease: l, .. } if *l == lease));
        if !self.lease_in_use(lease) && !resumed_elsewhere && self.session_lease != Some(lease) {
            self.leases.remove(&lease);
        }
    }

    fn fail_op(&mut self, now: Millis, op: OpId, error: LockError) {
        if let Some(OpKind::Resume { handle, .. }) = self.ops.get(&op).map(|o| &o.kind) {
            let name = handle.name.clone();
            self.ops.remove(&op);
            self.out.event(Event::Failed { op, error });
            return self.free_name(now, &name);
        }
        self.ops.remove(&op);
        self.out.event(Event::Failed { op, error });
    }

    fn new_op(&mut self, kind: OpKind) -> OpId {
        let op = self.out.op_id();
        self.ops.insert(op, Op { req: None, kind });
        op
    }

    fn check_open(&self) -> Result<(), LockError> {
        if self.closed || self.closing.is_some() {
            Err(LockError::Closed { backend: BACKEND })
        } else {
            Ok(())
        }
    }

    fn maybe_closed(&mut self) {
        if let Some(op) = self.closing {
            let outstanding = self.requests.values().any(|p| p.purpose == Purpose::CloseStep);
            if !outstanding {
                self.closing = None;
                self.closed = true;
                self.out.event(Event::Closed { op });
            }
        }
    }
}

impl LockMachine for EtcdMachine {
    fn backend(&self) -> BackendKind {
        BackendKind::Etcd
    }

    fn acquire(&mut self, now: Millis, name: &str, opts: &AcquireOptions) -> Result<OpId, LockError> {
        self.check_open()?;
        validate_name(name)?;
        if let Some(ttl) = opts.ttl_ms {
            crate::core::names::validate_ttl("ttlMs", ttl)?;
        }
        let deadline = match opts.wait {
            Wait::For(ms) => Some(now.saturating_add(ms)),
            Wait::Try | Wait::Forever => None,
        };
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

    fn release(&mut self, now: Millis, lock: LockId) -> Result<OpId, LockError> {
        if self.closed {
            return Err(LockError::Closed { backend: BACKEND });
        }
        let op = self.new_op(OpKind::Release { lock });
        let Some(held) = self.locks.get(&lock) else {
            // Idempotent: already released or lost.
            self.ops.remove(&op);
            self.out.event(Event::Released { op, lock, held_until_release: false });
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

    fn extend(&mut self, now: Millis, lock: LockId, _ttl_ms: Option<u64>) -> Result<OpId, LockError> {
        self.check_open()?;
        let held = match self.locks.get(&lock) {
            Some(h) if !h.releasing => h,
            Some(h) => return Err(LockError::NotHeld { backend: BACKEND, name: h.name.clone() }),
            None => return Err(LockError::NotHeld { backend: BACKEND, name: "<released or lost lock>".into() }),
        };
        let lease = held.lease;
        let op = self.new_op(OpKind::Extend { lock, phase: ExtendPhase::KeepAlive });
        let req = self.send_keepalive(now, lease, Purpose::Op(op));
        if let Some(o) = self.ops.get_mut(&op) {
            o.req = Some(req);
        }
        Ok(op)
    }

    fn resume(&mut self, now: Millis, handle: &LockHandle) -> Result<OpId, LockError> {
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

    fn inspect(&mut self, now: Millis, name: &str) -> Result<OpId, LockError> {
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
            self.out.event(Event::Closed { op });
            return op;
        }
        self.closing = Some(op);
        // Pending operations end now; revoking the leases removes their keys.
        let ops: Vec<OpId> = self.ops.keys().copied().collect();
        for id in ops {
            if let Some(o) = self.ops.remove(&id) {
                self.cancel_request(o.req);
                self.out.event(Event::Failed { op: id, error: LockError::Closed { backend: BACKEND } });
            }
        }
        let locks: Vec<LockId> = self.locks.keys().copied().collect();
        for lock in locks {
            if let Some(l) = self.locks.remove(&lock) {
                self.out.event(Event::Lost { lock, name: l.name, reason: LostReason::ClientClosed });
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
                    if let Purpose::Op(op) = p.purpose {
                        self.requests.insert(id, p);
                        return self.watch_broken(now, id, op);
                    }
                    return;
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
                    if let Purpose::Op(op) = p.purpose {
                        self.requests.insert(id, p);
                        return self.watch_broken(now, id, op);
                    }
                    return;
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
