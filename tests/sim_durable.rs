//! Deterministic simulation of the `durable-object` backend: several core
//! clients (`BackendSpec::DurableObject` with a URL, built and wrapped by
//! `BackendSpec::build` like every driver does) against the lock service's
//! REAL state machine and request checks (src/worker/lock_object/
//! {machine,protocol}.rs, one object per lock name, wrapped as `object.rs`
//! wraps them: tests/sim/durable_model.rs) in the seeded world of
//! tests/sim/net.rs — delays, lost requests and answers (resets or
//! silence), long delays, partitions, client pauses longer than leases,
//! object restarts (stored counter, holder and queue survive; held-open
//! waiters fail), late alarms; held-open acquires answered by the release
//! or expiry that grants them or when their `waitMs` ends.
//!
//! Properties, per seed:
//! 1. exclusion (the world, after every step) and, stronger, every
//!    believer is the service's holder (owner and token) and its belief
//!    ends (its own computed expiry, on its own clock) before the
//!    service's lease end;
//! 2. fencing tokens of successive grants strictly increase (the world, as
//!    clients hear them; the service's log, across restarts);
//! 3. every operation completes, every client closes; every grant ends
//!    accounted for — a `Lost` event or a release's outcome — and a
//!    release reporting `held_until_release` is one the service applied
//!    to a live lease; no lock outlives its expiry in a running client
//!    without `Lost`;
//! 4. a fenced resource written by believers (with their tokens) never
//!    rejects a believer's write and never accepts a token the service
//!    does not currently hold;
//! 5. at the end no request is held open, no queue entry and no holder is
//!    left (in calm runs: already when the last client closed), and calm
//!    runs meet the world's liveness expectations (`check_calm_run`).
//!
//! `SIM_SEEDS=N` sets the seed count; `SIM_SEED=N` replays one seed (with
//! `SIM_TRACE=1`, printing its whole step log).

mod sim {
    pub mod durable_model;
    pub mod net;
}

/// What `crate::core` names inside the service's included modules.
mod core {
    pub use edgelock::core::*;
}

use std::collections::{HashMap, HashSet};

use edgelock::core::durable::{DurableConfig, DurableEndpoint};
use edgelock::core::{BackendSpec, LockKind, LockMachine, Millis};
use sim::durable_model::{DoService, End, Rec};
use sim::net::{Clock, NetConfig, Outcome, Partition, Pause, SimRng, What, WorkloadConfig, World};

const ORIGIN: &str = "http://do-lock:8787";
const BASE: &str = "http://do-lock:8787/lock";
const TOKEN: &str = "sim-bearer-token";
/// Adversarial for the query (`?`, `&`, `=`, `#`, `%`, `+`, space, `/`) and UTF-8.
const NAMES: [&str; 5] = ["job", "a/../b c", "x?y&name=z#%2F+", "ü", "{t}"];
const FAULT_WINDOW_MS: Millis = 20_000;
const STOP_AT_MS: Millis = 150_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Every fault, restarts in some runs; 30 % of the runs calm.
    Main,
    /// Object restarts in every run, with pauses and loss.
    Restarts,
    /// As `Main`, every acquire a permit of a semaphore of 2 or 3 (with
    /// more clients than permits), sometimes another limit too (refused
    /// while permits of the held one are held).
    Permits,
    /// As `Main`, a read-write mix: exclusive and shared acquires.
    ReadWrite,
}

#[derive(Clone, Debug)]
#[allow(dead_code)] // read through Debug
struct Setup {
    mode: Mode,
    calm: bool,
    ttl_ms: u64,
    request_timeout_ms: u64,
    auto_extend: bool,
    clients: usize,
    names: Vec<String>,
    restarts: Vec<Millis>,
    /// The semaphore's limit (`Mode::Permits`).
    limit: Option<u32>,
    /// Some acquires ask for `limit + 1`.
    mixed_limits: bool,
}

#[derive(Default, Debug, Clone, Copy)]
struct Stats {
    seeds: u64,
    calm: u64,
    ops: u64,
    grants: u64,
    losts: u64,
    requests: u64,
    held_open: u64,
    overtaken: u64,
    restarts: u64,
    alarms: u64,
    writes: u64,
    timeouts: u64,
    aborted: u64,
    sim_ms: u64,
    /// Runs in which two clients believed they held one name at once
    /// (shared holds, or permits).
    concurrent: u64,
    /// Permits refused for another limit (409).
    other_limits: u64,
}

impl Stats {
    fn add(&mut self, o: &Stats) {
        self.seeds += o.seeds;
        self.calm += o.calm;
        self.ops += o.ops;
        self.grants += o.grants;
        self.losts += o.losts;
        self.requests += o.requests;
        self.held_open += o.held_open;
        self.overtaken += o.overtaken;
        self.restarts += o.restarts;
        self.alarms += o.alarms;
        self.writes += o.writes;
        self.timeouts += o.timeouts;
        self.aborted += o.aborted;
        self.sim_ms += o.sim_ms;
        self.concurrent += o.concurrent;
        self.other_limits += o.other_limits;
    }
}

fn pick<T: Copy>(rng: &mut SimRng, xs: &[T]) -> T {
    xs[rng.below(xs.len() as u64) as usize]
}

fn build(seed: u64, mode: Mode) -> (World<DoService>, Setup) {
    let mut rng = SimRng::new(seed ^ 0xD00B_1EC7_0000_0000_u64);
    let calm = mode != Mode::Restarts && rng.chance(0.3);
    let ttl_ms = pick(&mut rng, &[1_000, 2_000, 3_000, 5_000]);
    let timeouts: Vec<u64> = [150, 300, 600, 1_000]
        .into_iter()
        .filter(|t| *t <= ttl_ms / 3)
        .collect();
    let request_timeout_ms = pick(&mut rng, &timeouts);
    // Without renewals a long hold is rightly lost: calm runs renew.
    let auto_extend = rng.chance(0.8) || calm;
    let mut clients = rng.range(2, 5) as usize;
    let limit = (mode == Mode::Permits).then(|| rng.range(2, 3) as u32);
    if let Some(l) = limit {
        // More clients than permits, so that they run out.
        clients = clients.max(l as usize + rng.range(1, 3) as usize);
    }
    let mixed_limits = limit.is_some() && rng.chance(0.3);
    let names: Vec<String> = {
        let k = rng.range(1, 3) as usize;
        let first = rng.below(NAMES.len() as u64) as usize;
        (0..k)
            .map(|i| NAMES[(first + i) % NAMES.len()].to_string())
            .collect()
    };
    let mut net = NetConfig::calm();
    net.delay = (1, rng.range(3, 30));
    if !calm {
        net.faults_until = FAULT_WINDOW_MS;
        net.long_delay_chance = pick(&mut rng, &[0.0, 0.01, 0.03]);
        net.long_delay_max = rng.range(100, 2 * request_timeout_ms);
        net.request_loss = pick(&mut rng, &[0.0, 0.01, 0.05]);
        net.response_loss = pick(&mut rng, &[0.0, 0.01, 0.05]);
        net.reset_chance = 0.3;
        net.late_after_cancel = 0.2;
    }
    let restarts: Vec<Millis> = match (mode, calm) {
        (_, true) => Vec::new(),
        (Mode::Main | Mode::Permits | Mode::ReadWrite, false) if rng.chance(0.5) => Vec::new(),
        _ => (0..rng.range(1, 4))
            .map(|_| rng.below(FAULT_WINDOW_MS))
            .collect(),
    };
    let setup = Setup {
        mode,
        calm,
        ttl_ms,
        request_timeout_ms,
        auto_extend,
        clients,
        names: names.clone(),
        restarts: restarts.clone(),
        limit,
        mixed_limits,
    };
    let mut service = DoService::new(ORIGIN, TOKEN, rng.next_u64(), restarts);
    service.restart_window = if calm { 0 } else { rng.range(0, 300) };
    service.alarm_delay_max = rng.range(0, 50);
    let mut w: World<DoService> = World::new(seed, net);
    w.max_steps = 2_000_000;
    w.add_server(&[BASE], service);
    for _ in 0..clients {
        let mut cfg = DurableConfig::new(DurableEndpoint::Url(BASE.to_string()));
        cfg.token = Some(TOKEN.to_string());
        cfg.ttl_ms = ttl_ms;
        cfg.request_timeout_ms = request_timeout_ms;
        cfg.auto_extend = auto_extend;
        // Built and wrapped exactly as every driver gets it.
        let machine: Box<dyn LockMachine> = BackendSpec::DurableObject(cfg)
            .build(Box::new(rng.fork()))
            .expect("valid config");
        let clock = Clock {
            offset: rng.below(1 << 40),
            ppm: rng.range(0, 8_000) as i64 - 4_000,
        };
        w.add_client(machine, clock);
    }
    if !calm {
        for c in 0..clients {
            for _ in 0..rng.below(3) {
                let from = rng.below(FAULT_WINDOW_MS);
                let until = (from + rng.range(100, 3 * ttl_ms)).min(FAULT_WINDOW_MS);
                w.add_partition(Partition {
                    client: c,
                    endpoint: 0,
                    from,
                    until,
                });
            }
            for _ in 0..rng.below(3) {
                let from = rng.below(FAULT_WINDOW_MS);
                let until = (from + rng.range(50, 2 * ttl_ms)).min(FAULT_WINDOW_MS);
                w.add_pause(Pause {
                    client: c,
                    from,
                    until,
                });
            }
        }
    }
    w.start_workload(WorkloadConfig {
        names,
        cycles: rng.range(3, 6) as u32,
        weights: (2, 3, 3),
        wait_for: (50, 2 * ttl_ms),
        cancel_chance: 0.2,
        cancel_after: (5, 1_000),
        hold: (0, 300),
        long_hold_chance: 0.15,
        extend_chance: 0.2,
        reenter_chance: 0.0,
        long_hold: (ttl_ms, 3 * ttl_ms),
        think: (0, 200),
        ttl_ms: if rng.chance(0.5) { Some(ttl_ms) } else { None },
        release_retries: 3,
        stop_at: STOP_AT_MS,
    });
    if let Some(limit) = limit {
        let mut kinds = vec![LockKind::Permits { limit }];
        if mixed_limits {
            kinds.push(LockKind::Permits { limit: limit + 1 });
        }
        w.set_acquire_kinds(kinds);
    }
    if mode == Mode::ReadWrite {
        w.set_acquire_kinds(vec![
            LockKind::Exclusive,
            LockKind::Shared,
            LockKind::Shared,
        ]);
    }
    (w, setup)
}

/// Per-step checks.
struct Checks {
    setup: Setup,
    rng: SimRng,
    /// The fenced resources: per name (a permit: per name and slot), the
    /// highest token it accepted.
    resource: HashMap<(String, Option<u32>), u64>,
    writes: u64,
    calm_close_checked: bool,
    concurrent: bool,
}

impl Checks {
    fn new(seed: u64, setup: &Setup) -> Self {
        Checks {
            setup: setup.clone(),
            rng: SimRng::new(seed ^ 0xFE4C_ED00),
            resource: HashMap::new(),
            writes: 0,
            calm_close_checked: false,
            concurrent: false,
        }
    }

    fn check(&mut self, w: &World<DoService>) -> Result<(), String> {
        let m = w.server(0);
        if let Some(v) = m.violations.first() {
            return Err(format!("service: {v}"));
        }
        let believers = w.believers();
        for (i, a) in believers.iter().enumerate() {
            self.concurrent |= believers[i + 1..]
                .iter()
                .any(|b| b.name == a.name && b.client != a.client);
        }
        // (1) Every believer is one of the service's holders (owner,
        // token and slot), and its belief ends before that lease does.
        for b in w.believers() {
            let holders = m.holders(&b.name, w.now);
            let Some((_, token, until, slot)) = holders.iter().find(|h| h.0 == b.owner) else {
                return Err(format!(
                    "client {} believes it holds {:?} (token {}) at t={}, the service has no such holder (holders' tokens {:?})",
                    b.client, b.name, b.token, w.now, holders.iter().map(|h| h.1).collect::<Vec<_>>()
                ));
            };
            if *token != b.token || *slot != b.slot {
                return Err(format!(
                    "client {} believes it holds {:?} (token {}, slot {:?}) at t={}, the service's holder has token {token}, slot {slot:?}",
                    b.client, b.name, b.token, b.slot, w.now
                ));
            }
            let until = *until;
            // The last instant of the belief: local clock still <= expires_at.
            let belief_end = w.client_clock(b.client).to_global(b.expires_at + 1);
            if belief_end > until {
                return Err(format!(
                    "client {} believes it holds {:?} (token {}) until t={} (global; {} local), the service's lease ends at t={until}",
                    b.client, b.name, b.token, belief_end - 1, b.expires_at
                ));
            }
            // (4) It uses the fenced resource (a permit: its slot's), now and
            // then: a writer (exclusive, permit) writes with its token, a
            // reader (shared) reads, which a newer write must not precede.
            if self.rng.chance(0.2) {
                self.writes += 1;
                let highest = self.resource.entry((b.name.clone(), b.slot)).or_insert(0);
                if b.token < *highest {
                    return Err(format!(
                        "the fenced resource of {:?} (slot {:?}) rejected client {}'s {} with token {} at t={}: it had accepted {}",
                        b.name, b.slot, b.client, if b.kind == LockKind::Shared { "read" } else { "write" }, b.token, w.now, highest
                    ));
                }
                if b.kind != LockKind::Shared {
                    *highest = b.token;
                }
            }
        }
        // (3) No lock outlives its expiry in a running client without Lost.
        for c in 0..w.client_count() {
            if w.is_paused(c) {
                continue;
            }
            let local = w.client_clock(c).local(w.now);
            for (lock, name, token, expires_at, user_done) in w.held_locks(c) {
                if !user_done && local > expires_at + 1 {
                    return Err(format!(
                        "client {c}: lock {lock:?} of {name:?} (token {token}) outlived its expiry ({expires_at} local, now {local}) without Lost"
                    ));
                }
            }
        }
        // (5) Calm: nothing left in the service when the last client closed.
        if self.setup.calm && !self.calm_close_checked && w.all_closed_at.is_some() {
            self.calm_close_checked = true;
            service_is_empty(w, false)?;
        }
        Ok(())
    }
}

/// No holder, no queue entry, and (`at_end`) no held-open request. An
/// owner whose poll arrived after its own leave (see
/// `DoService::overtaken`) gets no exception: the service remembers owners
/// that left and neither queues nor grants such a poll.
fn service_is_empty(w: &World<DoService>, at_end: bool) -> Result<(), String> {
    let m = w.server(0);
    let ok = |_: &str| false;
    for name in m.names() {
        let s = m.state(&name).expect("listed");
        let holder = s.holders.iter().find(|h| !ok(&h.owner)).map(|h| h.token);
        if let Some(t) = holder {
            return Err(format!(
                "{name:?} is still held (token {t}) at t={} after every client closed",
                w.now
            ));
        }
        if let Some(q) = s.queue.iter().find(|q| !ok(&q.owner)) {
            let who = m.owners.get(&q.owner);
            return Err(format!(
                "{name:?} still queues {} waiter(s) (the first of client {who:?}) at t={} after every client closed",
                s.queue.len(),
                w.now
            ));
        }
    }
    if at_end && m.open_requests() != 0 {
        return Err(format!(
            "the service still holds {} request(s) open at the end",
            m.open_requests()
        ));
    }
    Ok(())
}

type Failure = (String, Box<World<DoService>>, Setup);

fn run_seed(seed: u64, mode: Mode, trace: bool) -> Result<(Stats, u64), Failure> {
    let (mut w, setup) = build(seed, mode);
    if trace {
        w.enable_trace();
    }
    let mut checks = Checks::new(seed, &setup);
    let until = STOP_AT_MS + 30 * setup.ttl_ms + 120_000;
    let mut result = w.run(until, &mut |w| checks.check(w));
    if result.is_ok() {
        result = final_checks(&w, &setup);
    }
    match result {
        Err(e) => Err((e, Box::new(w), setup)),
        Ok(()) => {
            let m = w.server(0);
            let failed = |code: &str| {
                w.history
                    .iter()
                    .filter(|r| matches!(&r.outcome, Outcome::Failed { code: c, .. } if *c == code))
                    .count() as u64
            };
            Ok((
                Stats {
                    seeds: 1,
                    calm: setup.calm as u64,
                    ops: w.history.len() as u64,
                    grants: w.grants.len() as u64,
                    losts: w.losts.len() as u64,
                    requests: m.requests,
                    held_open: m.held_open,
                    overtaken: m.overtaken.len() as u64,
                    restarts: m.restarts_done,
                    alarms: m.alarms_fired,
                    writes: checks.writes,
                    timeouts: failed("TIMEOUT"),
                    aborted: failed("ABORTED"),
                    sim_ms: w.now,
                    concurrent: checks.concurrent as u64,
                    other_limits: m.other_limits,
                },
                m.refusals,
            ))
        }
    }
}

fn final_checks(w: &World<DoService>, setup: &Setup) -> Result<(), String> {
    if !w.all_done() {
        return Err("not every client finished its close".into());
    }
    if let Some(r) = w.history.iter().find(|r| r.outcome == Outcome::Pending) {
        return Err(format!(
            "client {} op {:?} {:?} never completed",
            r.client, r.op, r.what
        ));
    }
    for c in 0..w.client_count() {
        if w.machine(c).live_count() != 0 {
            return Err(format!(
                "client {c} reports {} live operations/locks after close",
                w.machine(c).live_count()
            ));
        }
    }
    let m = w.server(0);
    if m.refusals != 0 {
        return Err(format!(
            "the service refused {} request(s) of the core client (400/401/404/405/413)",
            m.refusals
        ));
    }
    // (2) The service's grants: strictly increasing tokens per name, across restarts.
    let mut last: HashMap<&str, u64> = HashMap::new();
    let mut ends: HashMap<(&str, u64), End> = HashMap::new();
    for r in &m.log {
        match r {
            Rec::Granted {
                name, token, at, ..
            } => {
                let l = last.entry(name.as_str()).or_insert(0);
                if *token <= *l {
                    return Err(format!(
                        "the service granted {name:?} token {token} at t={at} after {l}"
                    ));
                }
                *l = *token;
            }
            Rec::Ended {
                name, token, how, ..
            } => {
                ends.insert((name.as_str(), *token), *how);
            }
            Rec::Restarted { .. } => {}
        }
    }
    // Every grant a client heard is one the service made (same owner).
    for g in &w.grants {
        let made = m.log.iter().any(|r| {
            matches!(r, Rec::Granted { name, token, owner, .. }
                if *name == g.name && *token == g.token && m.owners.get(owner) == Some(&g.client))
        });
        if !made {
            return Err(format!(
                "client {} heard a grant of {:?} with token {} the service never made to it",
                g.client, g.name, g.token
            ));
        }
    }
    // (3) Every grant ends accounted for; `held_until_release` only for a
    // lease the service saw released.
    let lost: HashSet<(usize, u64)> = w.losts.iter().map(|l| (l.client, l.lock.0)).collect();
    for g in &w.grants {
        let releases: Vec<&sim::net::OpRecord> = w
            .history
            .iter()
            .filter(|r| {
                r.client == g.client
                    && matches!(r.what, What::Release { lock, .. } if lock == g.lock)
            })
            .collect();
        let released_held = releases.iter().any(|r| {
            r.outcome
                == Outcome::Released {
                    held_until_release: true,
                }
        });
        let accounted = lost.contains(&(g.client, g.lock.0))
            || releases
                .iter()
                .any(|r| matches!(r.outcome, Outcome::Released { .. }));
        if !accounted {
            return Err(format!(
                "client {}'s grant of {:?} (token {}) ended without Lost or a release outcome",
                g.client, g.name, g.token
            ));
        }
        if released_held && ends.get(&(g.name.as_str(), g.token)) != Some(&End::Released) {
            return Err(format!(
                "client {} reported its hold of {:?} (token {}) held until release, the service ended it {:?}",
                g.client,
                g.name,
                g.token,
                ends.get(&(g.name.as_str(), g.token))
            ));
        }
    }
    // (5) Nothing left: no holder, no queue, no open request.
    service_is_empty(w, true)?;
    if setup.calm {
        w.check_calm_run()?;
    }
    Ok(())
}

fn report_failure(seed: u64, mode: Mode, test: &str, first_message: &str) -> String {
    let mut out = format!(
        "\nseed {seed} failed: {first_message}\nreplay: SIM_SEED={seed} cargo test --features native --test sim_durable {test}\n"
    );
    match run_seed(seed, mode, true) {
        Ok(_) => out.push_str("(the replay did NOT fail: the simulation is not deterministic!)\n"),
        Err((msg, w, setup)) => {
            if msg != first_message {
                out.push_str(&format!("(replay failed differently: {msg})\n"));
            }
            out.push_str(&format!("setup: {setup:?}\n"));
            out.push_str(&w.failure_report(&setup.names, setup.ttl_ms, &msg));
        }
    }
    out
}

/// Runs seeds `0..n` (or `SIM_SEED`) on up to 2 threads; panics with the
/// lowest failing seed, its replay command and its history.
fn sweep(test: &str, default_seeds: u64, mode: Mode) -> Stats {
    if let Ok(one) = std::env::var("SIM_SEED") {
        let seed: u64 = one.trim().parse().expect("SIM_SEED must be a number");
        match run_seed(seed, mode, true) {
            Ok((stats, _)) => {
                eprintln!("seed {seed} passed: {stats:?}");
                if std::env::var("SIM_TRACE").is_ok() {
                    let (mut w, setup) = build(seed, mode);
                    w.enable_trace();
                    let mut checks = Checks::new(seed, &setup);
                    let _ = w.run(STOP_AT_MS + 30 * setup.ttl_ms + 120_000, &mut |w| {
                        checks.check(w)
                    });
                    eprintln!("setup: {setup:?}");
                    for line in w.trace.iter().flatten() {
                        eprintln!("{line}");
                    }
                }
                return stats;
            }
            Err((msg, _, _)) => panic!("{}", report_failure(seed, mode, test, &msg)),
        }
    }
    let seeds: u64 = std::env::var("SIM_SEEDS")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(default_seeds);
    let started = std::time::Instant::now();
    let workers = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .clamp(1, 2) as u64;
    let results: Vec<(Stats, Vec<(u64, String)>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|k| {
                scope.spawn(move || {
                    let mut stats = Stats::default();
                    let mut failures = Vec::new();
                    let mut seed = k;
                    while seed < seeds {
                        match run_seed(seed, mode, false) {
                            Ok((s, _)) => stats.add(&s),
                            Err((msg, _, _)) => {
                                failures.push((seed, msg));
                                break;
                            }
                        }
                        seed += workers;
                    }
                    (stats, failures)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("simulation worker panicked"))
            .collect()
    });
    let mut total = Stats::default();
    for (s, _) in &results {
        total.add(s);
    }
    eprintln!(
        "{test}: {} seeds ({} calm) in {:.1} s: {} runs with concurrent holders, {} permits refused for another limit, {} ops, {} grants, {} lost, {} wait timeouts, {} aborted, {} HTTP requests, {} held open, {} polls overtaken by their leave, {} object restarts, {} alarms, {} fenced writes, {} simulated minutes",
        total.seeds,
        total.calm,
        started.elapsed().as_secs_f64(),
        total.concurrent,
        total.other_limits,
        total.ops,
        total.grants,
        total.losts,
        total.timeouts,
        total.aborted,
        total.requests,
        total.held_open,
        total.overtaken,
        total.restarts,
        total.alarms,
        total.writes,
        total.sim_ms / 60_000
    );
    if let Some((seed, msg)) = results
        .iter()
        .flat_map(|(_, f)| f.iter().cloned())
        .min_by_key(|(s, _)| *s)
    {
        panic!("{}", report_failure(seed, mode, test, &msg));
    }
    total
}

/// A sweep (not one replayed seed): its totals are checked.
fn sweeping() -> bool {
    std::env::var("SIM_SEED").is_err()
}

#[test]
fn simulation() {
    let s = sweep("simulation", 500, Mode::Main);
    if !sweeping() {
        return;
    }
    assert!(
        s.grants > s.seeds,
        "the workload should acquire locks: {s:?}"
    );
    assert!(s.held_open > s.seeds, "acquires should be held open: {s:?}");
    assert!(
        s.calm > 0 && s.calm < s.seeds,
        "calm and faulty runs: {s:?}"
    );
    assert!(s.losts > 0, "faults should make some locks lost: {s:?}");
    assert!(s.restarts > 0, "some runs restart the objects: {s:?}");
}

#[test]
fn restarts() {
    let s = sweep("restarts", 300, Mode::Restarts);
    if !sweeping() {
        return;
    }
    assert!(s.restarts >= s.seeds, "every run restarts: {s:?}");
    assert!(
        s.grants > s.seeds,
        "the workload should acquire locks: {s:?}"
    );
}

#[test]
fn semaphores() {
    let s = sweep("semaphores", 500, Mode::Permits);
    if !sweeping() {
        return;
    }
    assert!(
        s.grants > s.seeds,
        "the workload should acquire permits: {s:?}"
    );
    assert!(s.held_open > s.seeds, "acquires should be held open: {s:?}");
    assert!(
        s.concurrent > s.seeds / 4,
        "permits should be held together: {s:?}"
    );
    assert!(s.other_limits > 0, "another limit should be refused: {s:?}");
}

#[test]
fn read_write() {
    let s = sweep("read_write", 500, Mode::ReadWrite);
    if !sweeping() {
        return;
    }
    assert!(
        s.grants > s.seeds,
        "the workload should acquire locks: {s:?}"
    );
    assert!(s.concurrent > s.seeds / 10, "readers should share: {s:?}");
}

#[test]
fn simulation_is_deterministic() {
    for seed in [3, 17] {
        let a = run_seed(seed, Mode::Main, false).map(|(s, _)| format!("{s:?}"));
        let b = run_seed(seed, Mode::Main, false).map(|(s, _)| format!("{s:?}"));
        assert_eq!(
            a.as_ref().map_err(|e| e.0.clone()),
            b.as_ref().map_err(|e| e.0.clone())
        );
    }
}
