//! The Durable Object lock service in the simulated world: the service's
//! REAL request checks and state machine (src/worker/lock_object/
//! {protocol,machine}.rs, included by `#[path]`), wrapped as `object.rs`
//! wraps them for workerd — one object per lock name, one transition per
//! request or alarm, held-open `acquire`s answered later (by the release
//! or expiry that grants them, or when their `waitMs` ends), the alarm set
//! to the holder's lease end (re-armed only when it moves), and the front's
//! bearer-token check before anything. `Date.now` is the world's global
//! clock plus a fixed epoch offset.
//!
//! Restarts (eviction, code update) keep what the object stores (counter,
//! holder, queue, and the alarm) and lose what it holds in memory: the
//! held-open requests fail (a 500 from the front, or a reset connection)
//! and their queue entries become dead (dropped when they reach the head).
//! A request arriving while the object restarts fails without changing
//! anything (500, or no answer at all).
//!
//! The crate-level `mod core` that the included files name as
//! `crate::core` is declared by the test file (tests/sim_durable.rs).

#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};

use edgelock::core::{HttpRequest, Millis, RequestId, TransportError};

use super::net::{LateReply, Reply, SimRng, SimServer, CLIENT_HEADER};

#[path = "../../src/worker/lock_object/machine.rs"]
#[allow(dead_code)]
pub mod machine;

#[path = "../../src/worker/lock_object/protocol.rs"]
#[allow(dead_code)]
pub mod protocol;

use machine::{Acquire, LockState, Mode, Notice};
use protocol::{answer, Op};

/// `Date.now()` at global time 0.
pub const EPOCH_MS: u64 = 1_700_000_000_000;

/// How a holder's lease ended, as the service saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// Its owner's `release` (answered `released:true`).
    Released,
    /// Its lease end passed (alarm or a later request).
    Expired,
}

/// What the service did, in order.
#[derive(Clone, Debug)]
pub enum Rec {
    Granted {
        name: String,
        owner: String,
        token: u64,
        at: Millis,
        /// Lease end, global time.
        until: Millis,
    },
    Ended {
        name: String,
        owner: String,
        token: u64,
        at: Millis,
        how: End,
    },
    Restarted {
        at: Millis,
    },
}

struct Waiting {
    ticket: u64,
    /// The held request (its wire id).
    wire: RequestId,
    /// When its `waitMs` ends (global).
    wait_end: Millis,
}

/// One Durable Object: what it stores and what it holds in memory.
#[derive(Default)]
struct Obj {
    /// Stored (every transition is written before its answers leave).
    lock: LockState,
    /// The stored alarm: when it fires (global time).
    alarm: Option<Millis>,
    // ---- in memory (lost at a restart) ----
    open: HashMap<String, Waiting>,
    tickets: u64,
    armed: Option<u64>,
}

/// The service: every lock name's object, the front's token check.
pub struct DoService {
    token: String,
    /// The front's path prefix (`/lock`) and the URL's origin.
    origin: String,
    objects: BTreeMap<String, Obj>,
    replies: Vec<(RequestId, LateReply)>,
    rng: SimRng,
    /// Restart times (global), ascending, not yet done.
    restarts: Vec<Millis>,
    /// Requests arriving before this fail (a restart under way).
    down_until: Millis,
    /// Restarts last this long at most.
    pub restart_window: Millis,
    /// Alarms fire up to this late.
    pub alarm_delay_max: Millis,
    pub log: Vec<Rec>,
    /// The owner → client index (from the world's header), for checks.
    pub owners: HashMap<String, usize>,
    /// Owners that sent an `acquire` with `waitMs` 0 (a Try, or a client's
    /// leave after cancelling its poll).
    left: std::collections::HashSet<String>,
    /// Owners whose waiting poll arrived AFTER their own leave (the two
    /// travel on different connections, the leave overtook the poll): the
    /// service then queues (or grants) an owner its client abandoned.
    pub overtaken: std::collections::HashSet<String>,
    /// Broken invariants of the service seen by the model.
    pub violations: Vec<String>,
    pub requests: u64,
    pub held_open: u64,
    pub restarts_done: u64,
    pub alarms_fired: u64,
    pub refusals: u64,
    /// Permits refused for asking another limit than the held ones' (409).
    pub other_limits: u64,
}

fn json(v: serde_json::Value) -> Vec<u8> {
    v.to_string().into_bytes()
}

fn to_global(epoch_ms: u64) -> Millis {
    epoch_ms.saturating_sub(EPOCH_MS)
}

impl DoService {
    pub fn new(origin: &str, token: &str, seed: u64, restarts: Vec<Millis>) -> Self {
        let mut restarts = restarts;
        restarts.sort_unstable();
        DoService {
            token: token.to_string(),
            origin: origin.trim_end_matches('/').to_string(),
            objects: BTreeMap::new(),
            replies: Vec::new(),
            rng: SimRng::new(seed),
            restarts,
            down_until: 0,
            restart_window: 0,
            alarm_delay_max: 0,
            log: Vec::new(),
            owners: HashMap::new(),
            left: Default::default(),
            overtaken: Default::default(),
            violations: Vec::new(),
            requests: 0,
            held_open: 0,
            restarts_done: 0,
            alarms_fired: 0,
            refusals: 0,
            other_limits: 0,
        }
    }

    /// The stored state of `name`'s object.
    pub fn state(&self, name: &str) -> Option<&LockState> {
        self.objects.get(name).map(|o| &o.lock)
    }

    /// `name`'s holders whose lease has not ended at global `now`:
    /// (owner, token, lease end in global time, slot).
    pub fn holders(&self, name: &str, now: Millis) -> Vec<(String, u64, Millis, Option<u32>)> {
        let Some(o) = self.objects.get(name) else {
            return Vec::new();
        };
        o.lock
            .holders
            .iter()
            .map(|h| (h.owner.clone(), h.token, to_global(h.deadline_ms), h.slot))
            .filter(|(_, _, until, _)| *until > now)
            .collect()
    }

    /// Held-open requests right now.
    pub fn open_requests(&self) -> usize {
        self.objects.values().map(|o| o.open.len()).sum()
    }

    pub fn names(&self) -> Vec<String> {
        self.objects.keys().cloned().collect()
    }

    /// One transition of `name`'s object at global `now`, as `object.rs`'s
    /// `step`: `f` runs on the state, its notices are delivered, the
    /// alarm is set if the lease end moved. `released`: the holder
    /// (owner, token) this transition is a successful release of, if any.
    fn step<T>(
        &mut self,
        name: &str,
        now: Millis,
        f: impl FnOnce(&mut LockState, &dyn Fn(&str) -> bool, u64, &mut Vec<Notice>) -> T,
        released: impl FnOnce(&T) -> Option<(String, u64)>,
    ) -> T {
        let delay = self.rng.range(0, self.alarm_delay_max);
        let obj = self.objects.entry(name.to_string()).or_default();
        let before = obj.lock.clone();
        let epoch = EPOCH_MS + now;
        let mut out = Vec::new();
        let result = {
            let open = &obj.open;
            let live = |o: &str| open.contains_key(o);
            f(&mut obj.lock, &live, epoch, &mut out)
        };
        let after = obj.lock.clone();
        // Deliver the notices to the requests held open.
        let mut answers = Vec::new();
        for n in out {
            let owner = match &n {
                Notice::Granted { owner, .. } | Notice::Dropped { owner } => owner.clone(),
            };
            if let Some(w) = obj.open.remove(&owner) {
                answers.push((w.wire, n));
            }
        }
        // The alarm, as `step` sets it.
        let at = obj.lock.alarm_at();
        if at.is_some() && at != obj.armed {
            obj.armed = at;
            obj.alarm = at.map(|a| to_global(a) + delay);
        }
        for (wire, n) in answers {
            let body = match n {
                Notice::Granted {
                    token,
                    ttl_ms,
                    waiters,
                    slot,
                    ..
                } => answer::granted(token, ttl_ms, waiters, slot),
                Notice::Dropped { .. } => answer::busy(&obj.lock.busy(epoch)),
            };
            self.replies.push((wire, Ok((200, json(body)))));
        }
        let rel = released(&result);
        self.audit(name, now, &before, &after, rel);
        result
    }

    /// Records grants and ends, and checks the machine's invariants.
    fn audit(
        &mut self,
        name: &str,
        now: Millis,
        before: &LockState,
        after: &LockState,
        released: Option<(String, u64)>,
    ) {
        let epoch = EPOCH_MS + now;
        if after.counter < before.counter {
            self.violations.push(format!(
                "{name:?}: the counter went down from {} to {}",
                before.counter, after.counter
            ));
        }
        let same =
            |a: &machine::Holder, b: &machine::Holder| a.owner == b.owner && a.token == b.token;
        for b in &before.holders {
            if after.holders.iter().any(|a| same(a, b)) {
                continue;
            }
            let by_release = released
                .as_ref()
                .is_some_and(|(o, t)| *o == b.owner && *t == b.token);
            let how = if by_release {
                End::Released
            } else {
                if b.deadline_ms > epoch {
                    self.violations.push(format!(
                        "{name:?}: holder token {} dropped at t={now}, {} ms before its lease end, without its release",
                        b.token,
                        b.deadline_ms - epoch
                    ));
                }
                End::Expired
            };
            self.log.push(Rec::Ended {
                name: name.to_string(),
                owner: b.owner.clone(),
                token: b.token,
                at: now,
                how,
            });
        }
        let new: Vec<&machine::Holder> = after
            .holders
            .iter()
            .filter(|a| !before.holders.iter().any(|b| same(a, b)))
            .collect();
        if after.counter != before.counter + new.len() as u64 {
            self.violations.push(format!(
                "{name:?}: {} new holder(s) but the counter went {} → {}",
                new.len(),
                before.counter,
                after.counter
            ));
        }
        for (i, a) in new.iter().enumerate() {
            if a.token != before.counter + 1 + i as u64 {
                self.violations.push(format!(
                    "{name:?}: a new holder with token {} (counter {} → {})",
                    a.token, before.counter, after.counter
                ));
            }
            self.log.push(Rec::Granted {
                name: name.to_string(),
                owner: a.owner.clone(),
                token: a.token,
                at: now,
                until: to_global(a.deadline_ms),
            });
        }
        // Holders are compatible: one exclusive, or shared ones, or at most
        // `limit` permits in distinct slots below it.
        let hs = &after.holders;
        let modes = |m: Mode| hs.iter().filter(|h| h.mode == m).count();
        let (ex, sh, pe) = (
            modes(Mode::Exclusive),
            modes(Mode::Shared),
            modes(Mode::Permit),
        );
        let mixed = [ex, sh, pe].iter().filter(|n| **n > 0).count() > 1;
        if ex > 1 || mixed {
            self.violations.push(format!(
                "{name:?}: incompatible holders at t={now}: {ex} exclusive, {sh} shared, {pe} permits"
            ));
        }
        if pe > 0 {
            let limit = after.limit.unwrap_or(0);
            let mut slots: Vec<Option<u32>> = hs.iter().map(|h| h.slot).collect();
            slots.sort_unstable();
            slots.dedup();
            if pe > limit as usize
                || slots.len() != pe
                || hs.iter().any(|h| h.slot.map_or(true, |s| s >= limit))
            {
                self.violations.push(format!(
                    "{name:?}: {pe} permits of limit {limit} at t={now}, slots {:?}",
                    hs.iter().map(|h| h.slot).collect::<Vec<_>>()
                ));
            }
        }
        // No holder ⇒ no live waiter.
        if after.holders.is_empty() {
            if let Some(o) = self.objects.get(name) {
                if after.queue.iter().any(|w| o.open.contains_key(&w.owner)) {
                    self.violations.push(format!(
                        "{name:?}: free at t={now} with a live waiter queued"
                    ));
                }
            }
        }
    }

    fn restart(&mut self, now: Millis) {
        self.restarts_done += 1;
        self.log.push(Rec::Restarted { at: now });
        self.down_until = now + self.rng.range(0, self.restart_window);
        let mut failed = Vec::new();
        for obj in self.objects.values_mut() {
            for (_, w) in obj.open.drain() {
                failed.push(w.wire);
            }
            obj.armed = None;
            obj.tickets = 0;
        }
        failed.sort_unstable_by_key(|w| w.0);
        for wire in failed {
            let r = if self.rng.chance(0.5) {
                Ok((500, b"error code: 1101".to_vec()))
            } else {
                Err(TransportError::Io(
                    "connection reset: the Durable Object was reset".into(),
                ))
            };
            self.replies.push((wire, r));
        }
    }

    /// A held request's wait ended (`object.rs`'s `wait` after its delay).
    fn wait_ended(&mut self, name: &str, owner: &str, now: Millis) {
        let Some(obj) = self.objects.get(name) else {
            return;
        };
        let Some(w) = obj.open.get(owner) else {
            return;
        };
        let (ticket, wire) = (w.ticket, w.wire);
        let owner_s = owner.to_string();
        let busy = self.step(
            name,
            now,
            |lock, live, epoch, out| {
                lock.give_up(&owner_s, epoch, &|o| o != owner_s && live(o), out)
            },
            |_| None,
        );
        if let Some(obj) = self.objects.get_mut(name) {
            if obj.open.get(owner).is_some_and(|w| w.ticket == ticket) {
                obj.open.remove(owner);
            }
        }
        self.replies
            .push((wire, Ok((200, json(answer::busy(&busy))))));
    }

    fn alarm(&mut self, name: &str, now: Millis) {
        self.alarms_fired += 1;
        if let Some(obj) = self.objects.get_mut(name) {
            obj.alarm = None;
            obj.armed = None;
        }
        self.step(
            name,
            now,
            |l, live, epoch, out| l.settle(epoch, live, out),
            |_| None,
        );
    }

    fn serve(&mut self, now: Millis, req: &HttpRequest) -> Reply {
        let full = |status: u16, body: Vec<u8>| Reply::Full { status, body };
        let Some(url) = req.target.url() else {
            return full(400, b"binding targets are not served here".to_vec());
        };
        let Some(rest) = url.strip_prefix(&self.origin) else {
            return full(404, Vec::new());
        };
        // The front: the bearer token first.
        let auth = req
            .headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("authorization"))
            .map(|(_, v)| v.as_str());
        if auth != Some(&format!("Bearer {}", self.token)) {
            self.refusals += 1;
            return full(
                401,
                json(
                    serde_json::json!({"error": "missing or wrong bearer token", "code": "UNAUTHORIZED"}),
                ),
            );
        }
        let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
        let Some(path) = path.strip_prefix("/lock") else {
            return full(404, Vec::new());
        };
        let method = match req.method {
            edgelock::core::Method::Post => "POST",
            _ => "GET",
        };
        let cmd = match protocol::parse(method, path, query, &req.body) {
            Ok(c) => c,
            Err(r) => {
                self.refusals += 1;
                return full(r.status, json(r.body()));
            }
        };
        let client = req
            .headers
            .iter()
            .find(|(k, _)| k == CLIENT_HEADER)
            .and_then(|(_, v)| v.parse::<usize>().ok());
        let name = cmd.name;
        let ok = |v: serde_json::Value| Reply::Full {
            status: 200,
            body: json(v),
        };
        match cmd.op {
            Op::Acquire {
                owner,
                kind,
                ttl_ms,
                wait_ms,
            } => {
                if let Some(c) = client {
                    self.owners.insert(owner.clone(), c);
                }
                let late_poll = wait_ms > 0 && self.left.contains(&owner);
                if wait_ms == 0 {
                    self.left.insert(owner.clone());
                } else if late_poll {
                    self.overtaken.insert(owner.clone());
                }
                let counter_before = self.objects.get(&name).map_or(0, |o| o.lock.counter);
                let ticket = {
                    let obj = self.objects.entry(name.clone()).or_default();
                    obj.tickets += 1;
                    obj.tickets
                };
                let o = owner.clone();
                let a = self.step(
                    &name,
                    now,
                    |l, live, epoch, out| l.acquire(&o, kind, ttl_ms, wait_ms, epoch, live, out),
                    |_| None,
                );
                if late_poll {
                    let granted =
                        matches!(a, Acquire::Held { token, .. } if token > counter_before);
                    if granted || matches!(a, Acquire::Queued { .. }) {
                        self.violations.push(format!(
                            "{name:?}: a poll that arrived after its own leave at t={now} was {}",
                            if granted { "granted" } else { "queued" }
                        ));
                    }
                }
                match a {
                    Acquire::Held {
                        token,
                        ttl_ms,
                        waiters,
                        slot,
                    } => ok(answer::granted(token, ttl_ms, waiters, slot)),
                    Acquire::Busy(b) => ok(answer::busy(&b)),
                    Acquire::OtherLimit { limit } => {
                        self.other_limits += 1;
                        full(409, json(answer::other_limit(limit)))
                    }
                    Acquire::Queued { .. } => {
                        self.held_open += 1;
                        let obj = self.objects.entry(name).or_default();
                        obj.open.insert(
                            owner,
                            Waiting {
                                ticket,
                                wire: req.id,
                                wait_end: now + wait_ms,
                            },
                        );
                        Reply::Held
                    }
                }
            }
            Op::Release { owner, token } => {
                let o = owner.clone();
                let done = self.step(
                    &name,
                    now,
                    |l, live, epoch, out| l.release(&o, token, epoch, live, out),
                    |ok| ok.then(|| (owner.clone(), token)),
                );
                ok(answer::released(done))
            }
            Op::Extend {
                owner,
                token,
                ttl_ms,
            } => {
                let done = self.step(
                    &name,
                    now,
                    |l, live, epoch, out| l.extend(&owner, token, ttl_ms, epoch, live, out),
                    |_| None,
                );
                ok(answer::extended(done.then_some(ttl_ms)))
            }
            Op::Resume { owner, token } => {
                let left = self.step(
                    &name,
                    now,
                    |l, live, epoch, out| l.resume(&owner, token, epoch, live, out),
                    |_| None,
                );
                ok(answer::resumed(left.as_ref()))
            }
            Op::Inspect => {
                let s = self.step(
                    &name,
                    now,
                    |l, live, epoch, out| l.inspect(epoch, live, out),
                    |_| None,
                );
                ok(answer::status(&s))
            }
        }
    }

    /// The next due event at or before `now`: (time, what).
    fn next_due(&self, now: Millis) -> Option<(Millis, Due)> {
        let mut best: Option<(Millis, Due)> = None;
        let mut consider = |t: Millis, d: Due| {
            if t <= now && best.as_ref().map_or(true, |(bt, _)| t < *bt) {
                best = Some((t, d));
            }
        };
        if let Some(&r) = self.restarts.first() {
            consider(r, Due::Restart);
        }
        for (name, o) in &self.objects {
            if let Some(a) = o.alarm {
                consider(a, Due::Alarm(name.clone()));
            }
            let mut waits: Vec<(&String, &Waiting)> = o.open.iter().collect();
            waits.sort_by_key(|(_, w)| (w.wait_end, w.ticket));
            if let Some((owner, w)) = waits.first() {
                consider(w.wait_end, Due::Wait(name.clone(), (*owner).clone()));
            }
        }
        best
    }
}

enum Due {
    Restart,
    Alarm(String),
    Wait(String, String),
}

impl SimServer for DoService {
    fn handle(&mut self, now: Millis, req: &HttpRequest) -> Reply {
        self.requests += 1;
        if now < self.down_until {
            return if self.rng.chance(0.5) {
                Reply::Full {
                    status: 500,
                    body: b"error code: 1101".to_vec(),
                }
            } else {
                Reply::NoReply
            };
        }
        self.serve(now, req)
    }

    fn drain_stream_chunks(&mut self, _now: Millis) -> Vec<(RequestId, Vec<u8>)> {
        Vec::new()
    }

    fn stream_closed(&mut self, _id: RequestId) {}

    fn advance(&mut self, now: Millis) {
        while let Some((t, due)) = self.next_due(now) {
            match due {
                Due::Restart => {
                    self.restarts.remove(0);
                    self.restart(t);
                }
                Due::Alarm(name) => self.alarm(&name, t),
                Due::Wait(name, owner) => self.wait_ended(&name, &owner, t),
            }
        }
    }

    fn next_deadline(&self) -> Option<Millis> {
        self.next_due(Millis::MAX).map(|(t, _)| t)
    }

    fn drain_late_replies(&mut self, _now: Millis) -> Vec<(RequestId, LateReply)> {
        std::mem::take(&mut self.replies)
    }
}
