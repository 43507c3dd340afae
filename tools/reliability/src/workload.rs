//! The contender loop every scenario runs: acquire, write to the fenced
//! resource under the token, hold, release; everything recorded.
//!
//! A contender with a `limit` takes permits of a semaphore instead of the
//! lock. Its history names each hold by its slot (`<name>#slot<k>`, see
//! [`hold_name`]) and it writes to that slot's resource: a permit's token is
//! only promised to increase across successive holders of the same slot, so
//! every per-lock check of the checker (overlaps, stale writes, token
//! inversions) applies per slot, and the checker's per-name count of
//! concurrent holders (`checker::max_concurrent_holders`) judges the limit.
//!
//! A `shared` contender takes the reader side of a read-write lock: its
//! holds are recorded as `<name>#shared` (the checker lets those overlap
//! each other, never an exclusive hold of `<name>`) and it does not write to
//! the fenced resource (readers read; only exclusive holders write, under
//! tokens that must rise above every earlier holder's).
//!
//! An `elect` contender campaigns for the election `<lock>` (value: its id)
//! instead of acquiring: a leadership is recorded like an exclusive hold of
//! `<lock>` (so the per-name checks judge "one leader at a time" and the
//! leader's fenced writes), and once per hold it proclaims `<id>#<token>`
//! (recorded as a `Proclaim` op), which lets an observer's reports be
//! matched to the leadership they name (`checker::check_observer`).
//!
//! A contender with `also` names takes a multi-resource lock: one
//! `acquire_all` of `[lock] + also` in that (its own) order. Each lock of
//! the set is recorded as an exclusive hold of its own name under its own
//! token and written to under that token (so every per-name check applies
//! per name); a failed `acquire_all` is recorded as one failed acquire per
//! name of the set.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use std::sync::{Arc, Mutex};

use edgelock::core::{AcquireOptions, Leadership, LockKind, Wait};
use edgelock::native::{CancelToken, Client, Lock};
use serde::{Deserialize, Serialize};

use crate::history::{now_ms, History, Op, OpKind, Outcome};
use crate::resource::ResourceClient;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ContenderCfg {
    pub id: String,
    pub lock: String,
    /// How long one acquire may wait for the lock.
    pub wait_ms: u64,
    /// How long a hold lasts (the writes are spread over it).
    pub hold_ms: u64,
    pub writes_per_hold: u32,
    /// Pause between a release and the next acquire.
    pub pause_ms: u64,
    /// Per-lock TTL for Redis backends (`None`: the client's default).
    #[serde(default)]
    pub ttl_ms: Option<u64>,
    /// Write without first looking whether the lock was lost, like a
    /// process that does not know it was paused: the fence must catch it.
    #[serde(default)]
    pub blind_writes: bool,
    /// Stop after this many acquire attempts.
    #[serde(default)]
    pub max_rounds: Option<u64>,
    /// Take permits of a semaphore of this many instead of the lock.
    #[serde(default)]
    pub limit: Option<u32>,
    /// Take shared (reader) holds of a read-write lock instead.
    #[serde(default)]
    pub shared: bool,
    /// Campaign for the election `lock` (value: `id`) instead of acquiring;
    /// proclaim `<id>#<token>` once per hold.
    #[serde(default)]
    pub elect: bool,
    /// More names: take `[lock] + also` with one `acquire_all`, in this order.
    #[serde(default)]
    pub also: Vec<String>,
    /// Keep going past the run's deadline (up to [`UNTIL_GRANTED_GRACE`]
    /// more) until granted once: a check that every contender progressed
    /// then holds on a slow machine too, where the timed run may end before
    /// a contender's turn came.
    #[serde(default)]
    pub until_granted: bool,
}

/// How long a contender with [`ContenderCfg::until_granted`] may go on past
/// the run's deadline: a safety bound, not a speed assumption.
pub const UNTIL_GRANTED_GRACE: Duration = Duration::from_secs(60);

impl ContenderCfg {
    pub fn new(id: impl Into<String>, lock: impl Into<String>) -> ContenderCfg {
        ContenderCfg {
            id: id.into(),
            lock: lock.into(),
            wait_ms: 5_000,
            hold_ms: 20,
            writes_per_hold: 2,
            pause_ms: 0,
            ttl_ms: None,
            blind_writes: false,
            max_rounds: None,
            limit: None,
            shared: false,
            elect: false,
            also: Vec::new(),
            until_granted: false,
        }
    }

    /// The names of a multi-lock contender's set, in its own order
    /// (`[lock] + also`).
    pub fn set(&self) -> Vec<String> {
        std::iter::once(self.lock.clone())
            .chain(self.also.iter().cloned())
            .collect()
    }

    /// The kind of hold the contender asks for.
    pub fn kind(&self) -> LockKind {
        match (self.limit, self.shared) {
            (Some(limit), _) => LockKind::Permits { limit },
            (None, true) => LockKind::Shared,
            (None, false) => LockKind::Exclusive,
        }
    }
}

/// The name a hold is recorded and fenced under: the lock's name, or for a
/// permit `<name>#slot<k>` (see the module docs).
pub fn hold_name(lock: &Lock) -> String {
    match (lock.slot(), lock.kind()) {
        (Some(slot), _) => slot_name(lock.name(), slot),
        (None, LockKind::Shared) => format!("{}{SHARED}", lock.name()),
        (None, _) => lock.name().to_string(),
    }
}

/// The suffix of a shared hold's recorded name.
pub const SHARED: &str = "#shared";

/// `<name>#slot<k>`: one slot of a semaphore, as histories name it.
pub fn slot_name(name: &str, slot: u32) -> String {
    format!("{name}#slot{slot}")
}

/// The semaphore (or lock) name of a recorded hold name.
pub fn base_name(hold: &str) -> &str {
    let hold = hold.strip_suffix(SHARED).unwrap_or(hold);
    hold.rsplit_once("#slot").map_or(hold, |(base, _)| base)
}

fn record(
    h: &History,
    cfg: &ContenderCfg,
    kind: OpKind,
    start: f64,
    outcome: Outcome,
    token: Option<u64>,
) {
    h.record(Op {
        client: cfg.id.clone(),
        lock: cfg.lock.clone(),
        kind,
        start,
        end: now_ms(),
        outcome,
        token,
        write_id: None,
    });
}

/// One attempt to acquire; `Some(lock)` when granted.
pub fn acquire(client: &Client, cfg: &ContenderCfg, history: &History) -> Option<Lock> {
    let start = now_ms();
    let opts = AcquireOptions {
        wait: Wait::For(cfg.wait_ms),
        ttl_ms: cfg.ttl_ms,
    };
    let result = if cfg.elect {
        client.campaign(&cfg.lock, &cfg.id, opts, None)
    } else {
        client.acquire_kind(&cfg.lock, cfg.kind(), opts, None)
    };
    match result {
        Ok(Some(lock)) => {
            let op = Op {
                client: cfg.id.clone(),
                lock: hold_name(&lock),
                kind: OpKind::Acquire,
                start,
                end: now_ms(),
                outcome: Outcome::Ok,
                token: Some(lock.fencing_token()),
                write_id: None,
            };
            history.record(op);
            Some(lock)
        }
        Ok(None) => {
            record(
                history,
                cfg,
                OpKind::Acquire,
                start,
                Outcome::Fail("NOT_ACQUIRED".into()),
                None,
            );
            None
        }
        Err(e) => {
            // Only codes go into the history; RELIABILITY_LOG_ERRORS=1 shows
            // the messages (which never carry a secret) when investigating.
            if std::env::var_os("RELIABILITY_LOG_ERRORS").is_some() {
                eprintln!("[{}] acquire {:?}: {e}", cfg.id, cfg.lock);
            }
            record(
                history,
                cfg,
                OpKind::Acquire,
                start,
                Outcome::Fail(e.code().into()),
                None,
            );
            None
        }
    }
}

/// Holds `lock` for `cfg.hold_ms`, writing `cfg.writes_per_hold` times,
/// then releases it. Records a `Lost` op if the client is told it lost the
/// lock (and then stops using it).
pub fn hold_and_release(
    lock: Lock,
    cfg: &ContenderCfg,
    resource: &ResourceClient,
    history: &History,
) {
    let token = lock.fencing_token();
    let watcher = watch_lost(&lock, history, &cfg.id);
    if cfg.elect && lock.kind() == LockKind::Leader {
        proclaim_recorded(&lock, history, &cfg.id, &format!("{}#{token}", cfg.id));
    }
    let writes = cfg.writes_per_hold.max(1);
    let slice = Duration::from_millis(cfg.hold_ms / u64::from(writes));
    for _ in 0..writes {
        if !cfg.blind_writes && lock.is_lost() {
            break;
        }
        // Readers read: only exclusive holders and permits write.
        if !cfg.shared {
            write_recorded(resource, history, &cfg.id, &hold_name(&lock), token);
        }
        if cfg.blind_writes {
            std::thread::sleep(slice);
        } else if lock.wait_lost(Some(slice)).is_some() {
            break;
        }
    }
    release_recorded(lock, history, &cfg.id);
    if let Some(w) = watcher {
        let _ = w.join();
    }
}

/// A leader's proclaim of `value`, recorded as a `Proclaim` op of the
/// election (its outcome: `Ok`, or the error's code).
pub fn proclaim_recorded(lock: &Lock, history: &History, client: &str, value: &str) -> Outcome {
    let start = now_ms();
    let outcome = match lock.proclaim(value) {
        Ok(()) => Outcome::Ok,
        Err(e) => {
            if std::env::var_os("RELIABILITY_LOG_ERRORS").is_some() {
                eprintln!("[{client}] proclaim {:?}: {e}", lock.name());
            }
            Outcome::Fail(e.code().into())
        }
    };
    history.record(Op {
        client: client.into(),
        lock: hold_name(lock),
        kind: OpKind::Proclaim,
        start,
        end: now_ms(),
        outcome: outcome.clone(),
        token: Some(lock.fencing_token()),
        write_id: None,
    });
    outcome
}

/// `cfgs.len()` clients that hold `cfgs`' lock at the same time, by
/// construction rather than by the machine's speed: each acquires (recorded
/// like any acquire), writes once when it is not a reader, then waits at a
/// barrier until every one of them has acquired or given up, and only then
/// releases. A load check that the workload reached L holders at once (L
/// permits, readers sharing) holds whatever the machine's speed, as long as
/// the lock grants them. Returns how many acquired.
pub fn hold_together(
    backend: &crate::backend::BackendSpec,
    cfgs: &[ContenderCfg],
    resource: &ResourceClient,
    history: &History,
) -> usize {
    let barrier = std::sync::Barrier::new(cfgs.len());
    let acquired = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for cfg in cfgs {
            let (barrier, acquired) = (&barrier, &acquired);
            scope.spawn(move || {
                let client = backend.client().ok();
                let lock = client.as_ref().and_then(|c| acquire(c, cfg, history));
                if let Some(lock) = &lock {
                    acquired.fetch_add(1, Ordering::SeqCst);
                    if !cfg.shared {
                        let token = lock.fencing_token();
                        write_recorded(resource, history, &cfg.id, &hold_name(lock), token);
                    }
                }
                // Everyone arrives, granted or not: the wait is bounded.
                barrier.wait();
                if let Some(lock) = lock {
                    release_recorded(lock, history, &cfg.id);
                }
                if let Some(c) = client {
                    let _ = c.close();
                }
            });
        }
    });
    acquired.into_inner()
}

/// One `acquire_all` of the contender's set (`[lock] + also`, in its
/// order); `Some(locks)` (in that order) when granted. A grant is recorded
/// as one acquire per name (each under its lock's token, all with the same
/// times); a failure as one failed acquire per name.
pub fn acquire_set(client: &Client, cfg: &ContenderCfg, history: &History) -> Option<Vec<Lock>> {
    let names = cfg.set();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let start = now_ms();
    let opts = AcquireOptions {
        wait: Wait::For(cfg.wait_ms),
        ttl_ms: cfg.ttl_ms,
    };
    let failed = |code: String| {
        let end = now_ms();
        for name in &names {
            history.record(Op {
                client: cfg.id.clone(),
                lock: name.clone(),
                kind: OpKind::Acquire,
                start,
                end,
                outcome: Outcome::Fail(code.clone()),
                token: None,
                write_id: None,
            });
        }
    };
    match client.acquire_all(&refs, opts, None) {
        Ok(Some(locks)) => {
            let end = now_ms();
            for lock in &locks {
                history.record(Op {
                    client: cfg.id.clone(),
                    lock: hold_name(lock),
                    kind: OpKind::Acquire,
                    start,
                    end,
                    outcome: Outcome::Ok,
                    token: Some(lock.fencing_token()),
                    write_id: None,
                });
            }
            Some(locks)
        }
        Ok(None) => {
            failed("NOT_ACQUIRED".into());
            None
        }
        Err(e) => {
            if std::env::var_os("RELIABILITY_LOG_ERRORS").is_some() {
                eprintln!("[{}] acquire_all {names:?}: {e}", cfg.id);
            }
            failed(e.code().into());
            None
        }
    }
}

/// Holds a multi-lock set for `cfg.hold_ms`: each of `cfg.writes_per_hold`
/// rounds writes once to every name's resource under that name's token;
/// then releases every lock (each recorded). Without `blind_writes` it
/// stops writing once any lock of the set is lost.
pub fn hold_set_and_release(
    locks: Vec<Lock>,
    cfg: &ContenderCfg,
    resource: &ResourceClient,
    history: &History,
) {
    let watchers: Vec<_> = locks
        .iter()
        .filter_map(|l| watch_lost(l, history, &cfg.id))
        .collect();
    let writes = cfg.writes_per_hold.max(1);
    let slice = Duration::from_millis(cfg.hold_ms / u64::from(writes));
    for _ in 0..writes {
        if !cfg.blind_writes && locks.iter().any(Lock::is_lost) {
            break;
        }
        for lock in &locks {
            write_recorded(
                resource,
                history,
                &cfg.id,
                &hold_name(lock),
                lock.fencing_token(),
            );
        }
        std::thread::sleep(slice);
    }
    for lock in locks {
        release_recorded(lock, history, &cfg.id);
    }
    for w in watchers {
        let _ = w.join();
    }
}

/// One write to the fenced resource under `token`, recorded.
pub fn write_recorded(
    resource: &ResourceClient,
    history: &History,
    client: &str,
    lock: &str,
    token: u64,
) -> Outcome {
    let id = ResourceClient::next_write_id(client);
    let start = now_ms();
    let outcome = resource.write(lock, client, token, &id);
    history.record(Op {
        client: client.into(),
        lock: lock.into(),
        kind: OpKind::Write,
        start,
        end: now_ms(),
        outcome: outcome.clone(),
        token: Some(token),
        write_id: Some(id),
    });
    outcome
}

/// Releases, recording the outcome (a lock already lost is only dropped:
/// its `Lost` op is the record).
pub fn release_recorded(lock: Lock, history: &History, client: &str) {
    if lock.is_lost() {
        return;
    }
    let (name, token) = (hold_name(&lock), lock.fencing_token());
    let start = now_ms();
    let outcome = match lock.release() {
        Ok(true) => Outcome::Ok,
        Ok(false) => Outcome::Fail("NOT_HELD".into()),
        Err(e) => Outcome::Fail(e.code().into()),
    };
    history.record(Op {
        client: client.into(),
        lock: name,
        kind: OpKind::Release,
        start,
        end: now_ms(),
        outcome,
        token: Some(token),
        write_id: None,
    });
}

/// Records a `Lost` op the moment the client signals the loss (a thread
/// blocked on the lock's lost channel, which disconnects on release).
pub fn watch_lost(
    lock: &Lock,
    history: &History,
    client: &str,
) -> Option<std::thread::JoinHandle<()>> {
    let rx = lock.lost();
    let (h, client, name, token) = (
        history.clone(),
        client.to_string(),
        hold_name(lock),
        lock.fencing_token(),
    );
    std::thread::Builder::new()
        .name("lost-watch".into())
        .spawn(move || {
            if let Ok(reason) = rx.recv() {
                let t = now_ms();
                h.record(Op {
                    client,
                    lock: name,
                    kind: OpKind::Lost,
                    start: t,
                    end: t,
                    outcome: Outcome::Fail(reason.to_string()),
                    token: Some(token),
                    write_id: None,
                });
            }
        })
        .ok()
}

/// Runs the contender loop until `stop` is set, `deadline` passes or
/// `cfg.max_rounds` attempts were made.
pub fn contend(
    client: &Client,
    cfg: &ContenderCfg,
    resource: &ResourceClient,
    history: &History,
    stop: &AtomicBool,
    deadline: Instant,
) {
    let mut rounds = 0u64;
    let mut granted = false;
    let in_time = |granted: bool| {
        let now = Instant::now();
        now < deadline || (cfg.until_granted && !granted && now < deadline + UNTIL_GRANTED_GRACE)
    };
    while !stop.load(Ordering::SeqCst)
        && in_time(granted)
        && cfg.max_rounds.map_or(true, |m| rounds < m)
    {
        rounds += 1;
        if !cfg.also.is_empty() {
            if let Some(locks) = acquire_set(client, cfg, history) {
                granted = true;
                hold_set_and_release(locks, cfg, resource, history);
            }
        } else if let Some(lock) = acquire(client, cfg, history) {
            granted = true;
            hold_and_release(lock, cfg, resource, history);
        }
        if cfg.pause_ms > 0 {
            std::thread::sleep(Duration::from_millis(cfg.pause_ms));
        }
    }
}

/// One report of an election observer: when it arrived and what it said
/// (`None`: nobody leads).
#[derive(Clone, Debug, PartialEq)]
pub struct Observed {
    pub at: f64,
    pub leader: Option<Leadership>,
}

/// How many times an observer starts again after an error.
pub const OBSERVER_RESTARTS: usize = 20;

/// A thread following one election with `Client::observe` (its own
/// client), recording every report. When the observer's iterator ends with
/// an error, the error is recorded and observing starts again (as an
/// application would; the new iterator reports the current state first), up
/// to [`OBSERVER_RESTARTS`] times.
pub struct ObserverRun {
    client: Client,
    name: String,
    cancel: CancelToken,
    reports: Arc<Mutex<Vec<Observed>>>,
    errors: Arc<Mutex<Vec<String>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// What an observer saw, and the leader state it was compared with once the
/// run quiesced.
#[derive(Clone, Debug)]
pub struct ObserverOutcome {
    pub reports: Vec<Observed>,
    /// `Client::leader` after the run (an error's code if it failed).
    pub final_leader: Result<Option<Leadership>, String>,
    /// The errors the observer's iterators ended with (their codes).
    pub errors: Vec<String>,
}

fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl ObserverRun {
    /// Starts observing `name` with `client` (built by the caller for the
    /// observer alone, so that it has its own session).
    pub fn start(client: Client, name: &str) -> ObserverRun {
        let cancel = CancelToken::new();
        let reports: Arc<Mutex<Vec<Observed>>> = Arc::default();
        let errors: Arc<Mutex<Vec<String>>> = Arc::default();
        let (c, n, k, r, e) = (
            client.clone(),
            name.to_string(),
            cancel.clone(),
            reports.clone(),
            errors.clone(),
        );
        let thread = std::thread::Builder::new()
            .name("observer".into())
            .spawn(move || observe_loop(&c, &n, &k, &r, &e))
            .ok();
        ObserverRun {
            client,
            name: name.to_string(),
            cancel,
            reports,
            errors,
            thread,
        }
    }

    /// The reports so far.
    pub fn reports(&self) -> Vec<Observed> {
        locked(&self.reports).clone()
    }

    /// Call once the run quiesced (every contender stopped and released):
    /// waits up to `settle` for the observer's last report to equal
    /// `Client::leader`, then stops the observer and closes its client.
    pub fn finish(mut self, settle: Duration) -> ObserverOutcome {
        let deadline = Instant::now() + settle;
        let final_leader = loop {
            let now = self
                .client
                .leader(&self.name)
                .map_err(|e| e.code().to_string());
            let last = self.reports().last().map(|o| o.leader.clone());
            let agreed = matches!((&now, &last), (Ok(n), Some(l)) if n == l);
            let gave_up = locked(&self.errors).len() > OBSERVER_RESTARTS;
            if agreed || gave_up || Instant::now() >= deadline {
                break now;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        self.cancel.cancel();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = self.client.close();
        ObserverOutcome {
            reports: self.reports(),
            final_leader,
            errors: locked(&self.errors).clone(),
        }
    }
}

fn observe_loop(
    client: &Client,
    name: &str,
    cancel: &CancelToken,
    reports: &Mutex<Vec<Observed>>,
    errors: &Mutex<Vec<String>>,
) {
    loop {
        for item in client.observe(name, cancel.clone()) {
            match item {
                Ok(leader) => locked(reports).push(Observed {
                    at: now_ms(),
                    leader,
                }),
                Err(e) => {
                    if std::env::var_os("RELIABILITY_LOG_ERRORS").is_some() {
                        eprintln!("[observer] observe {name:?}: {e}");
                    }
                    locked(errors).push(e.code().to_string());
                }
            }
        }
        if cancel.is_cancelled() || locked(errors).len() > OBSERVER_RESTARTS {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spec_without_the_new_fields_is_a_single_lock_contender() {
        let old =
            r#"{"id":"c0","lock":"l","wait_ms":5,"hold_ms":1,"writes_per_hold":1,"pause_ms":0}"#;
        let cfg: ContenderCfg = serde_json::from_str(old).expect("parses");
        assert!(!cfg.elect && cfg.also.is_empty());
        assert_eq!(cfg.kind(), LockKind::Exclusive);
        assert_eq!(cfg.set(), vec!["l".to_string()]);
        // A lock set keeps the contender's own order; both fields round-trip.
        let set = ContenderCfg {
            also: vec!["c".into(), "a".into()],
            elect: true,
            ..ContenderCfg::new("s", "b")
        };
        assert_eq!(set.set(), vec!["b", "c", "a"]);
        let back: ContenderCfg =
            serde_json::from_str(&serde_json::to_string(&set).expect("json")).expect("parses");
        assert_eq!((back.elect, back.set()), (true, set.set()));
    }
}
