//! Multi-resource locks: [`Operation::AcquireAll`] served around any
//! [`LockMachine`].
//!
//! [`MultiLock`] wraps a machine and passes every operation, input, timeout,
//! transmit and event through, except `AcquireAll`, which it serves itself
//! with the inner machine's ordinary exclusive acquires and releases, after
//! one atomic try of the whole set where the inner machine offers that. It
//! knows no protocol and sends no request of its own.
//!
//! # The atomic try (etcd; one Redis node where the host allows it)
//!
//! A machine whose [`Capabilities::atomic_sets`] is set (etcd; one Redis
//! node with `RedisConfig::cross_slot_scripts`; never Redlock) is first
//! handed the whole `AcquireAll` as it came. It answers as one try, never
//! waiting (etcd: one transaction, see `etcd/machine/sets.rs`, that
//! compares every name's whole key range empty and puts every name's
//! ordinary lock key, or puts nothing; Redis: one script,
//! `redis::scripts::ACQUIRE_SET`, see `redis/tasks/acquire_set.rs`, that
//! finds no key of any kind of any name but its fencing counter and then
//! takes every name exactly as the ordinary acquire script takes one, or
//! takes nothing):
//!
//! - [`Outcome::AcquiredAll`]: the group completes with it at once. Every
//!   lock is an ordinary lock of the inner machine, as below.
//! - [`Outcome::NotAcquired`] (a name is held by anyone, of any kind, or
//!   used by this client): nothing was taken, not even for a moment. A
//!   `Wait::Try` group completes `NotAcquired` there; any other wait falls
//!   back to the recipe below, from the first name on.
//! - An error: the group completes with it (the machine has deleted
//!   whatever its try may have put before answering).
//!
//! A cancel of the group while the try is in flight cancels it; the group
//! completes `Aborted` once the machine has answered (with nothing left
//! held: a set the answer brings anyway is released first).
//!
//! # The recipe
//!
//! - The names are sorted canonically (by bytes) and taken **one at a time**,
//!   each as an ordinary exclusive acquire of the inner machine: every name
//!   with its own script (Redis, Redlock) or transaction (etcd), its own key,
//!   fencing token, renewal and [`LockId`]. Two clients asking for
//!   overlapping sets in any order always take their common names in the
//!   same order, so neither can hold one name while waiting for a name the
//!   other holds and waits behind: no deadlock.
//! - The caller's wait bound covers the whole set: `Wait::Try` stays `Try` for
//!   each name, `Wait::Forever` stays `Forever`, and `Wait::For(ms)` becomes a
//!   deadline fixed when the operation starts; each step waits
//!   `For(deadline - now)` (`For(0)` once the bound is used up: the name is
//!   still tried once, as a single acquire with `For(0)` is, so a set of free
//!   names is taken whatever the bound; a held one times out at once).
//! - On any failure (a step's `NotAcquired`, timeout or error, a
//!   [`cancel`](LockMachine::cancel) of the group, or a `Lost` event for a
//!   name of the set taken earlier) the step in flight is cancelled, every
//!   name already taken is released with the inner machine's `Release`, and
//!   the group completes only once those releases (and the cancelled step)
//!   have completed: [`Outcome::NotAcquired`] for a `Try` that found a name
//!   held, else the error (`Aborted` for a cancel, as for a waiting acquire).
//!   The set is never left partially held by a completed group.
//! - On success the group completes with [`Outcome::AcquiredAll`]: one
//!   [`LockInfo`] per name in the order of the caller's `names`. Each lock is
//!   then an ordinary lock of the inner machine: the user releases, extends
//!   and watches each one by its own `LockId`.
//!
//! # What it is not
//!
//! The recipe is not one atomic operation on the backend: while a group is
//! acquired name by name, its first names are held (and visible to
//! `inspect`) before the last ones; another client's `Try` may see part of
//! the set held. Each name still has its own fencing token, increasing per
//! name.
//!
//! What is atomic, on etcd and on one Redis node whose host allows it: the
//! first try. A set whose names are all free when its transaction (script)
//! applies is taken whole, in that one step: on etcd with one fencing token
//! for every name (the transaction's revision: still strictly increasing
//! per name), on Redis with each name's own counter incremented, as for a
//! single acquire; a `Try` that finds any name held takes nothing at all. The recipe (and so partial holds while a group waits)
//! runs only after that try found a name held and the caller asked to
//! wait: a waiting etcd acquire keeps each name's FIFO queue, and the
//! canonical order keeps overlapping waiting groups deadlock free.
//!
//! On Redis the keys of a name carry the name's own hash tag
//! (`{<prefix>:<name>}`, see `redis::keys`), so the keys of two names are in
//! different Redis Cluster hash slots. One script over all the names fails
//! with `CROSSSLOT` on Cluster-style hosts (a Redis Cluster, or a proxy
//! that routes by slot), so the atomic try is opt-in by host: `RedisConfig::cross_slot_scripts` (npm
//! `crossSlotScripts`), on by default for Webdis (it fronts a standalone
//! `redis-server`), off by default for the Upstash REST protocol (its
//! documentation does not say whether a script may touch several slots).
//! With the option off, one Redis node uses the recipe only: the names one
//! by one, one script each, which works on every host. Redlock always uses
//! the recipe (its nodes vote name by name).
//!
//! Costs: on etcd, and on one Redis node with the option, a set of N free
//! names takes one transaction or script (one round trip, whatever the
//! wait; `tests/multi_lock.rs` counts it), and a `Try` that finds a name
//! held one request and no release. A waiting set that finds a name held
//! costs that request plus the recipe. The recipe (Redis without the
//! option, Redlock, the fallback) takes a set of N free names
//! in N sequential acquires (N round trips; Redlock: N quorum rounds), and a
//! failed set one release per name taken. A release that itself fails (a
//! transport error) completes the group all the same: that name's key is
//! then left to expire with its TTL or lease, as after any failed release.
//!
//! # Where it sits
//!
//! [`BackendSpec::build`](super::BackendSpec::build), the one constructor
//! behind the npm bindings, the Worker, the CLI, the native `Client::connect`
//! / `Client::etcd` and the reliability tool, wraps every machine it builds
//! (etcd, etcd with auth, one Redis node, Redlock) in a `MultiLock`, once. A
//! machine built by hand and given to `Client::from_machine` is not wrapped:
//! wrap it with [`MultiLock::new`] for `acquire_all` (a machine alone refuses
//! `AcquireAll` with `INVALID_ARGUMENT`). A budget wrapper (`Budgeted`) goes
//! around the `MultiLock`, so that it counts the steps' requests too.
//!
//! # Ids
//!
//! The group needs an [`OpId`] that can never collide with an id of the inner
//! machine. It takes the id the inner machine returned for its **first**
//! step (the atomic try, where there is one): that id belongs to the inner
//! machine, which never reuses an id (every machine counts its ids up in its
//! `Outbox`), and the first step's own completion is swallowed here, so the
//! id completes exactly once, as the group. Later steps' and the releases' completions are swallowed too.
//! `Renewed` and `Lost` events of the locks of a group still in progress are
//! not passed on (the user does not know those ids yet): a renewal moves the
//! `expires_at` of the lock the group will report, a loss fails the group.
//! Every other event passes through unchanged.

use std::collections::VecDeque;

use super::names::validate_name;
use super::operation::{check_acquire_all_names, Capabilities, Event, Operation, Outcome};
use super::types::{
    AcquireOptions, BackendKind, Input, LockId, LockInfo, Millis, OpId, Transmit, Wait,
};
use super::{LockError, LockMachine};

/// One `AcquireAll` in progress.
struct Group {
    /// The group's id (its first step's inner id, see the module doc).
    id: OpId,
    /// The caller's names, in the caller's order.
    names: Vec<String>,
    /// Indices into `names`, in canonical (byte) order.
    order: Vec<usize>,
    /// How many entries of `order` have been started.
    started: usize,
    /// The step in flight: its inner op and the index of its name.
    current: Option<(OpId, usize)>,
    /// The step in flight is the inner machine's atomic try of the whole
    /// set (`Capabilities::atomic_sets`), not one name's acquire.
    atomic: bool,
    /// Names taken so far: (index into `names`, the lock).
    acquired: Vec<(usize, LockInfo)>,
    /// Inner releases of a failing group still in flight, with their locks.
    releasing: Vec<(OpId, LockId)>,
    /// Set once the group fails: what it will complete with.
    failure: Option<Result<Outcome, LockError>>,
    /// The caller cancelled the group.
    cancelled: bool,
    /// The end of the caller's wait bound (`Wait::For`).
    deadline: Option<Millis>,
    options: AcquireOptions,
}

impl Group {
    fn owns_lock(&self, lock: LockId) -> bool {
        self.acquired.iter().any(|(_, l)| l.id == lock)
            || self.releasing.iter().any(|(_, l)| *l == lock)
    }

    fn done(&self) -> bool {
        self.failure.is_some() && self.current.is_none() && self.releasing.is_empty()
    }
}

/// A [`LockMachine`] that serves [`Operation::AcquireAll`] around any inner
/// machine (see the module documentation for the recipe).
pub struct MultiLock<M> {
    inner: M,
    groups: Vec<Group>,
    /// Events for the driver, in order (passed through or the groups' own).
    events: VecDeque<Event>,
    /// The inner close's completion, held back until no group is left.
    close_done: Option<Event>,
    /// The time of the latest call.
    now: Millis,
}

impl<M: LockMachine> MultiLock<M> {
    /// Wraps `inner`.
    pub fn new(inner: M) -> Self {
        MultiLock {
            inner,
            groups: Vec::new(),
            events: VecDeque::new(),
            close_done: None,
            now: 0,
        }
    }

    /// The wrapped machine.
    pub fn inner(&self) -> &M {
        &self.inner
    }

    /// Number of `AcquireAll` groups in progress.
    pub fn groups_in_progress(&self) -> usize {
        self.groups.len()
    }

    fn backend_str(&self) -> &'static str {
        self.inner.backend().as_str()
    }

    fn start_group(
        &mut self,
        now: Millis,
        names: Vec<String>,
        options: AcquireOptions,
    ) -> Result<OpId, LockError> {
        // `start` checked the set already; `start_operation` may be called
        // directly. Every name is checked before the first request, so that
        // an invalid name in the middle cannot fail a half-taken group.
        check_acquire_all_names(&names)?;
        for name in &names {
            validate_name(name)?;
        }
        let mut order: Vec<usize> = (0..names.len()).collect();
        order.sort_by(|a, b| names[*a].as_bytes().cmp(names[*b].as_bytes()));
        let first = order[0];
        // A machine that can take the whole set at once tries that first;
        // the recipe (from the first name on) is its fallback.
        let atomic = self.inner.capabilities().atomic_sets;
        let (op, started) = if atomic {
            let all = Operation::AcquireAll {
                names: names.clone(),
                options,
            };
            (self.inner.start(now, all)?, 0)
        } else {
            let one = Operation::acquire(names[first].clone(), options);
            (self.inner.start(now, one)?, 1)
        };
        self.groups.push(Group {
            id: op,
            names,
            order,
            started,
            current: Some((op, first)),
            atomic,
            acquired: Vec::new(),
            releasing: Vec::new(),
            failure: None,
            cancelled: false,
            deadline: options.wait.deadline(now),
            options,
        });
        Ok(op)
    }

    /// Drains the inner machine's events, serving the groups' steps.
    fn pump(&mut self) {
        while let Some(e) = self.inner.poll_event() {
            self.on_inner_event(e);
        }
        if self.groups.is_empty() {
            if let Some(e) = self.close_done.take() {
                self.events.push_back(e);
            }
        }
    }

    fn on_inner_event(&mut self, e: Event) {
        match e {
            Event::Completed { op, result } => {
                if let Some(g) = self
                    .groups
                    .iter()
                    .position(|g| g.current.is_some_and(|(c, _)| c == op))
                {
                    let id = self.groups[g].id;
                    self.on_step(g, result);
                    self.finish_if_done(id);
                } else if let Some(g) = self
                    .groups
                    .iter()
                    .position(|g| g.releasing.iter().any(|(r, _)| *r == op))
                {
                    self.groups[g].releasing.retain(|(r, _)| *r != op);
                    let id = self.groups[g].id;
                    self.finish_if_done(id);
                } else if self.close_done.is_none()
                    && !self.groups.is_empty()
                    && matches!(result, Ok(Outcome::Closed))
                {
                    // The inner machine closed; groups still clean up.
                    self.close_done = Some(Event::Completed { op, result });
                } else {
                    self.events.push_back(Event::Completed { op, result });
                }
            }
            Event::Renewed { lock, expires_at } => {
                let mut ours = false;
                for g in &mut self.groups {
                    for (_, l) in &mut g.acquired {
                        if l.id == lock {
                            l.expires_at = expires_at;
                            ours = true;
                        }
                    }
                    ours |= g.releasing.iter().any(|(_, l)| *l == lock);
                }
                if !ours {
                    self.events.push_back(Event::Renewed { lock, expires_at });
                }
            }
            Event::Lost { lock, name, reason } => {
                match self.groups.iter().position(|g| g.owns_lock(lock)) {
                    Some(g) => {
                        if self.groups[g].failure.is_none() {
                            let error = LockError::Lost {
                                backend: self.backend_str(),
                                name,
                                reason: reason.to_string(),
                            };
                            self.fail(g, Err(error));
                            let id = self.groups[g].id;
                            self.finish_if_done(id);
                        }
                    }
                    None => self.events.push_back(Event::Lost { lock, name, reason }),
                }
            }
        }
    }

    /// The step in flight of group `g` completed.
    fn on_step(&mut self, g: usize, result: Result<Outcome, LockError>) {
        let now = self.now;
        let Some((_, index)) = self.groups[g].current.take() else {
            return;
        };
        if std::mem::take(&mut self.groups[g].atomic) {
            return self.on_atomic(now, g, index, result);
        }
        if self.groups[g].failure.is_some() {
            // The group failed while this step was in flight: give back
            // whatever it got.
            if let Ok(Outcome::Acquired(info)) = result {
                self.release_lock(g, info.id);
            }
            return;
        }
        match result {
            Ok(Outcome::Acquired(info)) => {
                self.groups[g].acquired.push((index, info));
                if self.groups[g].cancelled {
                    let error = self.aborted(g, index);
                    self.fail(g, Err(error));
                } else {
                    self.next_step(now, g);
                }
            }
            Ok(Outcome::NotAcquired) => self.fail(g, Ok(Outcome::NotAcquired)),
            Ok(other) => self.fail(
                g,
                Err(LockError::internal(format!(
                    "a step of acquireAll completed with {}",
                    other.as_str()
                ))),
            ),
            Err(e) => self.fail(g, Err(e)),
        }
    }

    /// The inner machine's atomic try of group `g`'s whole set completed
    /// (`index`: the group's first name in canonical order).
    fn on_atomic(
        &mut self,
        now: Millis,
        g: usize,
        index: usize,
        result: Result<Outcome, LockError>,
    ) {
        match result {
            Ok(Outcome::AcquiredAll(locks)) => {
                let group = &mut self.groups[g];
                let matches = locks.len() == group.names.len()
                    && locks.iter().zip(&group.names).all(|(l, n)| l.name == *n);
                group.acquired = locks.into_iter().enumerate().collect();
                if group.failure.is_some() {
                    // Failed meanwhile: give the whole set back.
                    for (_, info) in std::mem::take(&mut self.groups[g].acquired) {
                        self.release_lock(g, info.id);
                    }
                } else if !matches {
                    let error = LockError::internal(
                        "the atomic acquireAll answered other names than it was asked for",
                    );
                    self.fail(g, Err(error));
                } else if group.cancelled {
                    let error = self.aborted(g, index);
                    self.fail(g, Err(error));
                } else {
                    // Every name held: `next_step` completes the group.
                    group.started = group.order.len();
                    self.next_step(now, g);
                }
            }
            _ if self.groups[g].failure.is_some() => {}
            Ok(Outcome::NotAcquired) if self.groups[g].cancelled => {
                let error = self.aborted(g, index);
                self.fail(g, Err(error));
            }
            // Nothing was taken; a try is over.
            Ok(Outcome::NotAcquired) if self.groups[g].options.wait == Wait::Try => {
                self.fail(g, Ok(Outcome::NotAcquired))
            }
            // Some name is held (or used by this client): the recipe, one
            // name at a time in canonical order, waiting in each name's queue.
            Ok(Outcome::NotAcquired) => self.next_step(now, g),
            Ok(other) => self.fail(
                g,
                Err(LockError::internal(format!(
                    "the atomic acquireAll completed with {}",
                    other.as_str()
                ))),
            ),
            Err(e) => self.fail(g, Err(e)),
        }
    }

    fn aborted(&self, g: usize, index: usize) -> LockError {
        LockError::Aborted {
            backend: self.backend_str(),
            name: self.groups[g].names[index].clone(),
        }
    }

    /// Starts the next name of group `g`, or completes it when every name is held.
    fn next_step(&mut self, now: Millis, g: usize) {
        let group = &mut self.groups[g];
        if group.started == group.order.len() {
            let group = self.groups.remove(g);
            let mut locks = group.acquired;
            locks.sort_by_key(|(i, _)| *i);
            self.events.push_back(Event::Completed {
                op: group.id,
                result: Ok(Outcome::AcquiredAll(
                    locks.into_iter().map(|(_, l)| l).collect(),
                )),
            });
            return;
        }
        let index = group.order[group.started];
        group.started += 1;
        // What is left of the bound; once it is used up, `For(0)`: the inner
        // machine still tries the name once (a free name is taken, a held one
        // times out at once), as a single acquire with `For(0)` does.
        let wait = match (group.options.wait, group.deadline) {
            (Wait::For(_), Some(deadline)) => Wait::For(deadline.saturating_sub(now)),
            (wait, _) => wait,
        };
        let options = AcquireOptions {
            wait,
            ..group.options
        };
        let op = Operation::acquire(group.names[index].clone(), options);
        match self.inner.start(now, op) {
            Ok(op) => self.groups[g].current = Some((op, index)),
            Err(e) => self.fail(g, Err(e)),
        }
    }

    /// Group `g` fails with `result`: cancel its step in flight and release
    /// every name it holds.
    fn fail(&mut self, g: usize, result: Result<Outcome, LockError>) {
        let now = self.now;
        self.groups[g].failure = Some(result);
        if let Some((op, _)) = self.groups[g].current {
            self.inner.cancel(now, op);
        }
        for (_, info) in std::mem::take(&mut self.groups[g].acquired) {
            self.release_lock(g, info.id);
        }
    }

    fn release_lock(&mut self, g: usize, lock: LockId) {
        // A release the inner machine refuses (it is closing) leaves the
        // lock to the inner machine's own cleanup: nothing to wait for.
        if let Ok(op) = self.inner.start(self.now, Operation::Release { lock }) {
            self.groups[g].releasing.push((op, lock));
        }
    }

    /// Completes the group `id` (if still in progress) once it has failed
    /// and nothing of it is in flight any more.
    fn finish_if_done(&mut self, id: OpId) {
        let Some(g) = self.groups.iter().position(|g| g.id == id) else {
            return;
        };
        if self.groups[g].done() {
            let group = self.groups.remove(g);
            if let Some(result) = group.failure {
                self.events.push_back(Event::Completed {
                    op: group.id,
                    result,
                });
            }
        }
    }

    /// Whether `op` is a step or release of a group (ids the user never saw).
    fn is_sub_op(&self, op: OpId) -> bool {
        self.groups.iter().any(|g| {
            g.current.is_some_and(|(c, _)| c == op) || g.releasing.iter().any(|(r, _)| *r == op)
        })
    }
}

impl<M: LockMachine> LockMachine for MultiLock<M> {
    fn backend(&self) -> BackendKind {
        self.inner.backend()
    }

    fn capabilities(&self) -> Capabilities {
        // What this layer serves is no single atomic try (it waits, and
        // falls back to taking names one by one): a `MultiLock` around it
        // would only ask twice.
        Capabilities {
            atomic_sets: false,
            ..self.inner.capabilities()
        }
    }

    fn live_count(&self) -> usize {
        self.inner.live_count() + self.groups.len()
    }

    fn start_operation(&mut self, now: Millis, op: Operation) -> Result<OpId, LockError> {
        self.now = now;
        let r = match op {
            Operation::AcquireAll { names, options } => self.start_group(now, names, options),
            op => self.inner.start_operation(now, op),
        };
        self.pump();
        r
    }

    fn cancel(&mut self, now: Millis, op: OpId) {
        self.now = now;
        if let Some(g) = self.groups.iter().position(|g| g.id == op) {
            let group = &mut self.groups[g];
            if group.failure.is_none() && !group.cancelled {
                group.cancelled = true;
                if let Some((step, _)) = group.current {
                    self.inner.cancel(now, step);
                }
            }
        } else if !self.is_sub_op(op) {
            self.inner.cancel(now, op);
        }
        self.pump();
    }

    fn close(&mut self, now: Millis) -> OpId {
        self.now = now;
        let op = self.inner.close(now);
        self.pump();
        op
    }

    fn handle_input(&mut self, now: Millis, input: Input) {
        self.now = now;
        self.inner.handle_input(now, input);
        self.pump();
    }

    fn handle_timeout(&mut self, now: Millis) {
        self.now = now;
        self.inner.handle_timeout(now);
        self.pump();
    }

    fn poll_transmit(&mut self) -> Option<Transmit> {
        self.inner.poll_transmit()
    }

    fn poll_event(&mut self) -> Option<Event> {
        if self.events.is_empty() {
            self.pump();
        }
        self.events.pop_front()
    }

    fn poll_timeout(&self) -> Option<Millis> {
        self.inner.poll_timeout()
    }
}

#[cfg(test)]
mod atomic_tests;
#[cfg(test)]
mod tests;
