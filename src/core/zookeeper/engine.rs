//! [`ZkMachine`]: the [`LockMachine`] of the ZooKeeper backend, Curator's
//! recipes node for node (see [`recipes`](super::recipes): the mutex, the
//! read-write lock, the semaphore and the leader latch; elections in
//! `election`).
//!
//! The machine owns one [`ZkSession`]; every request it submits is tracked
//! in the runtime's request table (owner and deadline) and its answer routed
//! back to the operation that asked. The session is the lease: a held lock
//! is the session's ephemeral node, so it lasts while the session lives and
//! is lost when the session expires (locally bounded, see the session) or
//! when its node is found deleted (an `exists` watch on it).

use super::config::ZkConfig;
use super::paths::{
    contender_order, lock_dir, marker_of, protected_prefix, LATCH_MARKER, LEASE_MARKER,
    MUTEX_MARKER, READ_MARKER, SEMAPHORE_LEASES, WRITE_MARKER,
};
use super::recipes::lock_node::{NodeAcquire, NodeSpec, Purpose, Rule, Stage, Step, Tag};
use super::recipes::semaphore::SemaphoreAcquire;
use super::recipes::{Failure, Recipe};
use super::records::{err, event, Acl};
use super::session::{Answer, SessionEvent, ZkError, ZkReply, ZkRequest, ZkSession};
use crate::core::operation::unserved;
use crate::core::outbox::earliest;
use crate::core::runtime::{Runtime, VecMap};
use crate::core::{
    BackendKind, Capabilities, Entropy, Event, Holder, Input, KindFamily, LockError, LockHandle,
    LockId, LockInfo, LockKind, LockMachine, LockStatus, LostReason, Millis, OpId, Operation,
    Outcome, Transmit, Wait,
};
use election::{Observing, Proclaiming};
use std::collections::VecDeque;

mod election;

const BACKEND: &str = "zookeeper";

/// What edgelock writes in its lock nodes (Curator writes the host's IP;
/// nobody reads a mutex node's data).
const NODE_DATA: &[u8] = b"edgelock";

/// Tries of a delete whose answer was lost, before it is left to the session.
const CLEANUP_TRIES: u8 = 3;

/// Who a request in flight belongs to.
#[derive(Debug)]
enum Owner {
    Acquire {
        op: OpId,
        tag: Tag,
    },
    /// A leader read or an observe.
    Leader {
        op: OpId,
    },
    Proclaim {
        op: OpId,
    },
    Release {
        op: OpId,
    },
    Inspect {
        op: OpId,
    },
    /// The `exists` watch on a held lock's node.
    Check {
        lock: LockId,
    },
    /// Deleting a node nobody waits for (a try that lost, a cancelled wait).
    Cleanup {
        path: String,
        tries: u8,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum TimerKey {
    /// An acquire's or an observe's wait runs out.
    Deadline(OpId),
}

/// An acquire under way.
struct Acquiring {
    name: String,
    kind: LockKind,
    recipe: Recipe,
    /// Answered already (timed out or cancelled): only cleans up.
    abandoned: bool,
    /// Its requests not answered yet (an abandoned acquire lingers until
    /// none is left, so that a create in flight is not orphaned).
    in_flight: usize,
    /// Our nodes already deleted (abandoned).
    deleted: Vec<String>,
}

/// A lock held: our node.
struct Held {
    name: String,
    path: String,
    kind: LockKind,
    releasing: bool,
}

/// A release under way.
struct Releasing {
    lock: LockId,
    path: String,
    name: String,
}

/// An inspect under way: the sorted children once listed.
struct Inspecting {
    name: String,
    dir: String,
    sorted: Option<Vec<String>>,
    /// How many of `sorted` hold (the rest wait).
    holders: usize,
    /// Listing a semaphore's `leases` (every lease holds).
    leases: bool,
}

/// The ZooKeeper lock machine (Curator's recipes).
pub struct ZkMachine {
    root: String,
    read_write_names: Vec<String>,
    request_timeout_ms: u64,
    rt: Runtime<Owner, TimerKey>,
    session: ZkSession,
    entropy: Box<dyn Entropy + Send>,
    acquires: VecMap<OpId, Acquiring>,
    held: VecMap<LockId, Held>,
    releases: VecMap<OpId, Releasing>,
    inspects: VecMap<OpId, Inspecting>,
    /// Leader reads and observes.
    observes: VecMap<OpId, Observing>,
    proclaims: VecMap<OpId, Proclaiming>,
    /// Answers to route (submissions refused at once land here too).
    answers: VecDeque<Answer>,
    /// The session bound last reported in a `Renewed` event.
    reported_until: Millis,
}

impl ZkMachine {
    /// A machine for `config` (validated first).
    pub fn new(config: ZkConfig, entropy: Box<dyn Entropy + Send>) -> Result<Self, LockError> {
        let address = config.validate()?;
        let session = ZkSession::new(
            address,
            config.tls,
            config.session_timeout_ms,
            config.digest.clone(),
        );
        Ok(ZkMachine {
            root: config.root,
            read_write_names: config.read_write_names,
            request_timeout_ms: config.request_timeout_ms,
            rt: Runtime::default(),
            session,
            entropy,
            acquires: VecMap::new(),
            held: VecMap::new(),
            releases: VecMap::new(),
            inspects: VecMap::new(),
            observes: VecMap::new(),
            proclaims: VecMap::new(),
            answers: VecDeque::new(),
            reported_until: 0,
        })
    }

    // ------------------------------------------------------------ requests

    /// Submits `req` on behalf of `owner`, bounded by the request timeout.
    fn submit(&mut self, now: Millis, owner: Owner, req: ZkRequest) {
        if let Owner::Acquire { op, .. } = owner {
            if let Some(a) = self.acquires.get_mut(&op) {
                a.in_flight += 1;
            }
        }
        let out = &mut self.rt.out;
        let id = self
            .rt
            .requests
            .track(out, now, owner, self.request_timeout_ms);
        if let Err(e) = self.session.submit(out, now, id, req) {
            self.answers.push_back((id, Err(e)));
        }
    }

    /// Routes every answer and session event until none is left, then
    /// reports renewals and a finished close.
    fn settle(&mut self, now: Millis) {
        loop {
            if let Some((id, result)) = self.answers.pop_front() {
                if let Some(owner) = self.rt.requests.finish(id) {
                    self.dispatch(now, owner, result);
                }
                continue;
            }
            let events = self.session.take_events();
            if events.is_empty() {
                break;
            }
            for e in events {
                self.on_session_event(now, e);
            }
        }
        self.report_renewals();
        let drained = self.session.is_closed()
            && self.acquires.is_empty()
            && self.releases.is_empty()
            && self.inspects.is_empty()
            && self.observes.is_empty()
            && self.proclaims.is_empty();
        self.rt.closing.finish_if(drained, &mut self.rt.out);
    }

    fn dispatch(&mut self, now: Millis, owner: Owner, result: Result<ZkReply, ZkError>) {
        match owner {
            Owner::Acquire { op, tag } => {
                let Some(a) = self.acquires.get_mut(&op) else {
                    return;
                };
                a.in_flight = a.in_flight.saturating_sub(1);
                let step = a.recipe.on_answer(tag, result);
                self.apply(now, op, step);
            }
            Owner::Leader { op } => self.on_leader_answer(now, op, result),
            Owner::Proclaim { op } => self.on_proclaim_answer(op, result),
            Owner::Release { op } => self.on_release_answer(now, op, result),
            Owner::Inspect { op } => self.on_inspect_answer(now, op, result),
            Owner::Check { lock } => {
                if result == Err(ZkError::Server(err::NO_NODE)) {
                    self.lose(lock, LostReason::KeyGone);
                }
            }
            Owner::Cleanup { path, tries } => {
                let retry = matches!(result, Err(ZkError::Transport(_) | ZkError::NotSent(_)));
                if retry && tries + 1 < CLEANUP_TRIES && !self.rt.closing.started() {
                    self.delete(now, path, tries + 1);
                }
            }
        }
    }

    fn delete(&mut self, now: Millis, path: String, tries: u8) {
        let req = ZkRequest::Delete {
            path: path.clone(),
            version: -1,
        };
        self.submit(now, Owner::Cleanup { path, tries }, req);
    }

    // ------------------------------------------------------------ acquire

    /// Starts an acquire of `kind` (a campaign: `Leader` with its value).
    fn start_acquire(
        &mut self,
        now: Millis,
        name: String,
        kind: LockKind,
        wait: Wait,
        value: Option<String>,
    ) -> OpId {
        let op = self.rt.out.op_id();
        let mut recipe = self.recipe(&name, kind, wait == Wait::Try, value);
        if let Some(at) = wait.deadline(now) {
            self.rt.timers.set(TimerKey::Deadline(op), at);
        }
        let step = recipe.start();
        let acquiring = Acquiring {
            name,
            kind,
            recipe,
            abandoned: false,
            in_flight: 0,
            deleted: Vec::new(),
        };
        self.acquires.insert(op, acquiring);
        self.apply(now, op, step);
        op
    }

    /// The recipe of `kind` on `name` (design 2.6; see `recipes`).
    fn recipe(
        &mut self,
        name: &str,
        kind: LockKind,
        try_only: bool,
        value: Option<String>,
    ) -> Recipe {
        let (marker, rule) = match kind {
            LockKind::Shared => (READ_MARKER, Rule::Reader),
            LockKind::Leader => (LATCH_MARKER, Rule::First),
            LockKind::Exclusive if self.read_write_names.iter().any(|n| n == name) => {
                (WRITE_MARKER, Rule::First)
            }
            LockKind::Exclusive | LockKind::Permits { .. } => (MUTEX_MARKER, Rule::First),
        };
        let spec = NodeSpec {
            dir: lock_dir(&self.root, name),
            marker,
            rule,
            stage: Stage::Main,
            data: value.map_or_else(|| NODE_DATA.to_vec(), String::into_bytes),
            acl: vec![Acl::open_unsafe()],
            try_only,
        };
        let prefix = protected_prefix(&mut *self.entropy);
        match kind {
            LockKind::Permits { limit } => {
                let lease_prefix = protected_prefix(&mut *self.entropy);
                Recipe::Semaphore(SemaphoreAcquire::new(spec, limit, (prefix, lease_prefix)))
            }
            _ => Recipe::Node(NodeAcquire::new(spec, prefix)),
        }
    }

    /// Carries out what acquire `op`'s recipe asked for.
    fn apply(&mut self, now: Millis, op: OpId, step: Step) {
        let Some(a) = self.acquires.get(&op) else {
            return;
        };
        if a.abandoned {
            return self.apply_abandoned(now, op, step);
        }
        match step {
            Step::Idle => {}
            Step::Send(reqs) => {
                for (tag, req) in reqs {
                    self.submit(now, Owner::Acquire { op, tag }, req);
                }
            }
            Step::Acquired { path, czxid, slot } => self.grant(now, op, path, czxid, slot),
            Step::NotAcquired => {
                self.finish_acquire(now, op, Ok(Outcome::NotAcquired));
            }
            Step::Fail(f) => {
                let name = a.name.clone();
                self.finish_acquire(now, op, Err(f.into_lock_error(BACKEND, &name)));
            }
        }
    }

    /// An acquire already answered: its nodes go as soon as they are
    /// known; it never creates one anew, and lingers while a request of it
    /// (a create) is in flight.
    fn apply_abandoned(&mut self, now: Millis, op: OpId, step: Step) {
        let Some(a) = self.acquires.get_mut(&op) else {
            return;
        };
        let fresh: Vec<String> = a
            .recipe
            .node_paths()
            .into_iter()
            .filter(|p| !a.deleted.contains(p))
            .collect();
        a.deleted.extend(fresh.iter().cloned());
        let in_flight = a.in_flight;
        for path in fresh {
            self.delete(now, path, 0);
        }
        match step {
            // Finding a node whose create reply was lost, so it can go.
            Step::Send(reqs) if !reqs.iter().any(|((_, p), _)| *p == Purpose::Create) => {
                for (tag, req) in reqs {
                    self.submit(now, Owner::Acquire { op, tag }, req);
                }
            }
            _ if in_flight > 0 => {}
            _ => {
                self.acquires.remove(&op);
            }
        }
    }

    /// Completes acquire `op` and removes it (its node, if any, deleted).
    fn finish_acquire(&mut self, now: Millis, op: OpId, result: Result<Outcome, LockError>) {
        self.rt.timers.clear(TimerKey::Deadline(op));
        if let Some(mut a) = self.acquires.remove(&op) {
            // Its requests in flight: kept to clean up after them.
            if a.in_flight > 0 {
                a.abandoned = true;
                self.acquires.insert(op, a);
                self.apply_abandoned(now, op, Step::Idle);
            } else {
                for path in a.recipe.node_paths() {
                    self.delete(now, path, 0);
                }
            }
        }
        self.rt.out.complete(op, result);
    }

    fn grant(&mut self, now: Millis, op: OpId, path: String, czxid: i64, slot: Option<u32>) {
        self.rt.timers.clear(TimerKey::Deadline(op));
        let Some(a) = self.acquires.remove(&op) else {
            return;
        };
        for leftover in a.recipe.leftovers() {
            self.delete(now, leftover, 0);
        }
        let lock = self.rt.out.lock_id();
        let token = u64::try_from(czxid).unwrap_or(0);
        let handle = LockHandle {
            v: 1,
            backend: BackendKind::ZooKeeper,
            name: a.name.clone(),
            key: path.clone(),
            owner: format!("{:x}", self.session.session_id().unwrap_or(0)),
            fencing_token: token,
            revision: token,
            kind: a.kind,
            slot,
        };
        let info = LockInfo {
            id: lock,
            name: a.name.clone(),
            fencing_token: token,
            expires_at: self.session.alive_until().unwrap_or(now),
            handle,
        };
        self.held.insert(
            lock,
            Held {
                name: a.name,
                path: path.clone(),
                kind: a.kind,
                releasing: false,
            },
        );
        self.rt.out.complete(op, Ok(Outcome::Acquired(info)));
        self.check(now, lock, path);
    }

    /// Watches held lock `lock`'s node (`exists` with a watch): its
    /// deletion is the lock's loss.
    fn check(&mut self, now: Millis, lock: LockId, path: String) {
        let req = ZkRequest::Exists { path, watch: true };
        self.submit(now, Owner::Check { lock }, req);
    }

    /// Acquire `op` is answered with `error` now (timeout, cancel); it
    /// cleans up after itself.
    fn abandon(&mut self, now: Millis, op: OpId, error: LockError) {
        let Some(a) = self.acquires.get_mut(&op) else {
            return;
        };
        if a.abandoned {
            return;
        }
        a.abandoned = true;
        self.rt.timers.clear(TimerKey::Deadline(op));
        self.rt.out.fail(op, error);
        self.apply_abandoned(now, op, Step::Idle);
    }

    fn lose(&mut self, lock: LockId, reason: LostReason) {
        match self.held.get(&lock) {
            Some(h) if !h.releasing => {}
            _ => return,
        }
        if let Some(h) = self.held.remove(&lock) {
            self.rt.out.lost(lock, h.name, reason);
        }
    }

    // ------------------------------------------------------------ release

    fn start_release(&mut self, now: Millis, lock: LockId) -> OpId {
        let op = self.rt.out.op_id();
        let Some(h) = self.held.get_mut(&lock).filter(|h| !h.releasing) else {
            let outcome = Outcome::Released {
                lock,
                held_until_release: false,
            };
            self.rt.out.complete(op, Ok(outcome));
            return op;
        };
        h.releasing = true;
        let (path, name) = (h.path.clone(), h.name.clone());
        self.releases.insert(op, Releasing { lock, path, name });
        self.send_release(now, op);
        op
    }

    fn send_release(&mut self, now: Millis, op: OpId) {
        let Some(r) = self.releases.get(&op) else {
            return;
        };
        let req = ZkRequest::Delete {
            path: r.path.clone(),
            version: -1,
        };
        self.submit(now, Owner::Release { op }, req);
    }

    fn on_release_answer(&mut self, now: Millis, op: OpId, result: Result<ZkReply, ZkError>) {
        let held_until_release = match result {
            Ok(_) => true,
            Err(ZkError::Server(err::NO_NODE) | ZkError::Expired) => false,
            // The answer is lost: delete again (Curator's guaranteed delete);
            // a closing session deletes its nodes itself.
            Err(ZkError::Transport(_) | ZkError::NotSent(_)) if !self.rt.closing.started() => {
                return self.send_release(now, op);
            }
            Err(ZkError::Transport(_) | ZkError::NotSent(_)) => true,
            Err(e) => {
                let Some(r) = self.releases.remove(&op) else {
                    return;
                };
                if let Some(h) = self.held.get_mut(&r.lock) {
                    h.releasing = false;
                }
                let error =
                    Failure::from_error("delete", &r.path, e).into_lock_error(BACKEND, &r.name);
                return self.rt.out.fail(op, error);
            }
        };
        let Some(r) = self.releases.remove(&op) else {
            return;
        };
        self.held.remove(&r.lock);
        let outcome = Outcome::Released {
            lock: r.lock,
            held_until_release,
        };
        self.rt.out.complete(op, Ok(outcome));
    }

    // ------------------------------------------------------------ inspect

    fn start_inspect(&mut self, now: Millis, name: String) -> OpId {
        let op = self.rt.out.op_id();
        let dir = lock_dir(&self.root, &name);
        let req = ZkRequest::GetChildren {
            path: dir.clone(),
            watch: false,
        };
        self.inspects.insert(
            op,
            Inspecting {
                name,
                dir,
                sorted: None,
                holders: 0,
                leases: false,
            },
        );
        self.submit(now, Owner::Inspect { op }, req);
        op
    }

    fn on_inspect_answer(&mut self, now: Millis, op: OpId, result: Result<ZkReply, ZkError>) {
        let Some(i) = self.inspects.get_mut(&op) else {
            return;
        };
        let (dir, name) = (i.dir.clone(), i.name.clone());
        let next = match (i.sorted.take(), result) {
            // A semaphore's directory: its leases are the holders.
            (None, Ok(ZkReply::Children { children, .. }))
                if !i.leases && is_semaphore_dir(&children) =>
            {
                i.leases = true;
                i.dir = format!("{dir}/{SEMAPHORE_LEASES}");
                ZkRequest::GetChildren {
                    path: i.dir.clone(),
                    watch: false,
                }
            }
            (None, Ok(ZkReply::Children { children, .. })) => {
                let sorted: Vec<String> = contender_order(children)
                    .into_iter()
                    .filter(|c| marker_of(c).is_some())
                    .collect();
                let Some(first) = sorted.first() else {
                    return self.finish_inspect(op, Ok(not_held(name)));
                };
                i.holders = holders_of(&sorted, i.leases);
                let path = format!("{dir}/{first}");
                i.sorted = Some(sorted);
                ZkRequest::Exists { path, watch: false }
            }
            (Some(sorted), Ok(ZkReply::Stat(stat))) => {
                let status = held_status(name, sorted, i.holders, stat.czxid);
                return self.finish_inspect(op, Ok(status));
            }
            (None, Err(ZkError::Server(err::NO_NODE))) => {
                return self.finish_inspect(op, Ok(not_held(name)));
            }
            // The holder left between the list and its stat: list again.
            (Some(_), Err(ZkError::Server(err::NO_NODE))) => ZkRequest::GetChildren {
                path: dir,
                watch: false,
            },
            (_, Err(e)) => {
                let error = Failure::from_error("inspect", &dir, e).into_lock_error(BACKEND, &name);
                return self.finish_inspect(op, Err(error));
            }
            (_, Ok(_)) => {
                let error = LockError::internal("an inspect answer of the wrong kind");
                return self.finish_inspect(op, Err(error));
            }
        };
        self.submit(now, Owner::Inspect { op }, next);
    }

    fn finish_inspect(&mut self, op: OpId, result: Result<LockStatus, LockError>) {
        self.inspects.remove(&op);
        self.rt.out.complete(op, result.map(Outcome::Inspected));
    }

    // ------------------------------------------------------------ session

    fn on_session_event(&mut self, now: Millis, e: SessionEvent) {
        match e {
            SessionEvent::Connected { new_session: false } => {
                self.observes_reconnected(now);
                let ops: Vec<OpId> = self.acquires.keys().copied().collect();
                for op in ops {
                    if let Some(a) = self.acquires.get_mut(&op) {
                        let step = a.recipe.on_reconnected();
                        self.apply(now, op, step);
                    }
                }
                let held: Vec<(LockId, String)> = self
                    .held
                    .iter()
                    .map(|(id, h)| (*id, h.path.clone()))
                    .collect();
                for (lock, path) in held {
                    self.check(now, lock, path);
                }
            }
            SessionEvent::Connected { new_session: true } | SessionEvent::Disconnected => {}
            SessionEvent::Expired => self.on_expired(now),
            SessionEvent::Watch { path, event_type } => self.on_watch(now, &path, event_type),
        }
    }

    /// Every node of the session is gone: held locks are lost, acquires fail.
    fn on_expired(&mut self, now: Millis) {
        let locks: Vec<LockId> = self.held.keys().copied().collect();
        for lock in locks {
            self.lose(lock, LostReason::Expired);
        }
        let ops: Vec<OpId> = self.acquires.keys().copied().collect();
        for op in ops {
            self.apply(now, op, Step::Fail(Failure::Expired));
        }
    }

    fn on_watch(&mut self, now: Millis, path: &str, event_type: i32) {
        self.observes_on_watch(now, path);
        let ops: Vec<OpId> = self.acquires.keys().copied().collect();
        for op in ops {
            if let Some(a) = self.acquires.get_mut(&op) {
                let step = a.recipe.on_watch(path);
                self.apply(now, op, step);
            }
        }
        let held: Vec<LockId> = self
            .held
            .iter()
            .filter(|(_, h)| h.path == path)
            .map(|(id, _)| *id)
            .collect();
        for lock in held {
            if event_type == event::NODE_DELETED {
                self.lose(lock, LostReason::KeyGone);
            } else {
                // Another event spent the one-shot watch: set it again.
                self.check(now, lock, path.to_string());
            }
        }
    }

    /// `Renewed` for every held lock once the session's bound moved on by
    /// a quarter of its timeout (drivers show the validity).
    fn report_renewals(&mut self) {
        let Some(until) = self.session.alive_until() else {
            return;
        };
        if until < self.reported_until + self.session.timeout_ms() / 4 {
            return;
        }
        self.reported_until = until;
        let locks: Vec<LockId> = self.held.keys().copied().collect();
        for lock in locks {
            self.rt.out.renewed(lock, until);
        }
    }
}

fn not_held(name: String) -> LockStatus {
    LockStatus {
        name,
        ..LockStatus::default()
    }
}

/// Whether `children` are a semaphore's (`locks`, `leases`), not
/// contender nodes.
fn is_semaphore_dir(children: &[String]) -> bool {
    children.iter().any(|c| c == SEMAPHORE_LEASES)
        && children.iter().all(|c| marker_of(c).is_none())
}

/// How many of the contenders in `sorted` hold: every lease; the readers
/// before the first other contender; else the first.
fn holders_of(sorted: &[String], leases: bool) -> usize {
    if leases {
        return sorted.len();
    }
    let readers = sorted
        .iter()
        .take_while(|c| marker_of(c) == Some(READ_MARKER))
        .count();
    readers.max(1)
}

/// The kind a contender node stands for. A lease is a permit of a limit
/// ZooKeeper does not store: reported as at least the leases there are.
fn kind_of(name: &str, leases: usize) -> LockKind {
    match marker_of(name) {
        Some(LEASE_MARKER) => LockKind::Permits {
            limit: u32::try_from(leases).unwrap_or(u32::MAX).max(1),
        },
        Some(READ_MARKER) => LockKind::Shared,
        Some(LATCH_MARKER) => LockKind::Leader,
        _ => LockKind::Exclusive,
    }
}

/// The first `holders` of `sorted` hold (token: the first one's czxid;
/// leases stand for permits of a limit ZooKeeper does not store); the
/// others wait.
fn held_status(name: String, sorted: Vec<String>, holders: usize, czxid: i64) -> LockStatus {
    let token = u64::try_from(czxid).ok();
    let holder = |id: &String, token| Holder {
        id: id.clone(),
        kind: kind_of(id, sorted.len()),
        slot: None,
        fencing_token: token,
    };
    let (held, waiting) = sorted.split_at(holders.min(sorted.len()));
    LockStatus {
        name,
        held: true,
        holder: sorted.first().cloned(),
        fencing_token: token,
        remaining_ms: None,
        waiters: waiting.to_vec(),
        limit: None,
        holders: held
            .iter()
            .enumerate()
            .map(|(i, h)| holder(h, token.filter(|_| i == 0)))
            .collect(),
        queued: waiting.iter().map(|w| holder(w, None)).collect(),
    }
}

impl LockMachine for ZkMachine {
    fn backend(&self) -> BackendKind {
        BackendKind::ZooKeeper
    }

    /// Every kind (Curator's mutex, read-write lock, semaphore and leader
    /// latch); no atomic sets (ZooKeeper has no "range is empty" compare),
    /// so `AcquireAll` is the generic `MultiLock`'s, as Curator's
    /// `InterProcessMultiLock` is one mutex per path.
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            kinds: &[
                KindFamily::Exclusive,
                KindFamily::Shared,
                KindFamily::Permits,
                KindFamily::Leader,
            ],
            atomic_sets: false,
        }
    }

    fn live_count(&self) -> usize {
        self.acquires.len()
            + self.held.len()
            + self.releases.len()
            + self.inspects.len()
            + self.observes.len()
            + self.proclaims.len()
    }

    /// `Extend` succeeds without I/O while the session lives: the session
    /// is the lease (pings keep it), and its bound is the new validity.
    fn start_operation(&mut self, now: Millis, op: Operation) -> Result<OpId, LockError> {
        self.rt.closing.check_open(BackendKind::ZooKeeper)?;
        let id = match op {
            Operation::Acquire {
                name,
                kind,
                options,
            } => {
                crate::core::names::validate_name(&name)?;
                self.start_acquire(now, name, kind, options.wait, None)
            }
            Operation::Campaign {
                name,
                value,
                options,
            } => {
                crate::core::names::validate_name(&name)?;
                self.start_acquire(now, name, LockKind::Leader, options.wait, Some(value))
            }
            Operation::Leader { name } => {
                crate::core::names::validate_name(&name)?;
                self.start_observe(now, name, None, Wait::Try, false)
            }
            Operation::Observe { name, known, wait } => {
                crate::core::names::validate_name(&name)?;
                self.start_observe(now, name, known, wait, true)
            }
            Operation::Proclaim { lock, value } => self.start_proclaim(now, lock, value),
            Operation::Release { lock } => self.start_release(now, lock),
            Operation::Extend { lock, .. } => self.extend(lock),
            Operation::Inspect { name } => {
                crate::core::names::validate_name(&name)?;
                self.start_inspect(now, name)
            }
            Operation::Resume { .. } => {
                return Err(LockError::invalid(
                    "the zookeeper backend cannot resume a lock yet: a lock is its session's node, and the session lives in the client that took it",
                ))
            }
            other => return Err(unserved(BackendKind::ZooKeeper, &other)),
        };
        self.settle(now);
        Ok(id)
    }

    fn cancel(&mut self, now: Millis, op: OpId) {
        if let Some(a) = self.acquires.get(&op) {
            let error = LockError::Aborted {
                backend: BACKEND,
                name: a.name.clone(),
            };
            self.abandon(now, op, error);
            self.settle(now);
        }
    }

    fn close(&mut self, now: Millis) -> OpId {
        let op = self.rt.out.op_id();
        if self.rt.closing.begin(op) {
            for (op, a) in self.acquires.drain().collect::<Vec<_>>() {
                self.rt.timers.clear(TimerKey::Deadline(op));
                if !a.abandoned {
                    self.rt.out.fail(op, LockError::Closed { backend: BACKEND });
                }
            }
            self.close_observes();
            let locks: Vec<LockId> = self.held.keys().copied().collect();
            for lock in locks {
                self.lose(lock, LostReason::ClientClosed);
            }
            let answers = self.session.close(&mut self.rt.out, now);
            self.answers.extend(answers);
        }
        self.settle(now);
        op
    }

    fn handle_input(&mut self, now: Millis, input: Input) {
        if self.session.owns(input.id()) {
            let answers = self.session.handle_input(&mut self.rt.out, now, input);
            self.answers.extend(answers);
        }
        self.settle(now);
    }

    fn handle_timeout(&mut self, now: Millis) {
        for (id, owner) in self.rt.expire(now) {
            let (sent, others) = self.session.timed_out(&mut self.rt.out, now, id);
            self.answers.extend(others);
            let error = if sent {
                ZkError::Transport("no answer within the request timeout".into())
            } else {
                ZkError::NotSent("could not reach ZooKeeper within the request timeout".into())
            };
            self.dispatch(now, owner, Err(error));
        }
        let answers = self.session.handle_timeout(&mut self.rt.out, now);
        self.answers.extend(answers);
        for key in self.rt.timers.take_due(now) {
            let TimerKey::Deadline(op) = key;
            self.observe_deadline(op);
            if let Some(a) = self.acquires.get(&op) {
                let error = LockError::Timeout {
                    backend: BACKEND,
                    name: a.name.clone(),
                };
                self.abandon(now, op, error);
            }
        }
        self.settle(now);
    }

    fn poll_transmit(&mut self) -> Option<Transmit> {
        self.rt.poll_transmit()
    }

    fn poll_event(&mut self) -> Option<Event> {
        self.rt.poll_event()
    }

    fn poll_timeout(&self) -> Option<Millis> {
        earliest([self.rt.poll_timeout(), self.session.poll_timeout()])
    }
}

impl ZkMachine {
    fn extend(&mut self, lock: LockId) -> OpId {
        let op = self.rt.out.op_id();
        let held = self.held.get(&lock).filter(|h| !h.releasing);
        let result = match (held, self.session.alive_until()) {
            (Some(_), Some(expires_at)) => Ok(Outcome::Extended { lock, expires_at }),
            (h, _) => Err(LockError::NotHeld {
                backend: BACKEND,
                name: h.map(|h| h.name.clone()).unwrap_or_default(),
            }),
        };
        self.rt.out.complete(op, result);
        op
    }
}
