//! Scenario 10: load. 64 concurrent clients (8 locks × 8 contenders) for 60 s
//! on each backend, no faults: 0 stale writes accepted, no overlapping holds,
//! no errors but wait timeouts, no keys left. The same for semaphores
//! (8 semaphores of [`PERMITS`] × 8 contenders; 10f–10h): per slot, 0 stale
//! writes, 0 overlaps and 0 token inversions; per semaphore, never more than
//! [`PERMITS`] holders at once, and that many reached. And for read-write
//! locks (10i etcd, 10j Redis; half the contenders readers): never a writer
//! beside anyone, readers sharing, writers' tokens above every earlier hold. Plus one long-running client in
//! its own process doing 100,000 acquire/release cycles while its resident
//! memory is sampled: it must stay flat.
//!
//! 10k (etcd), 10l (Redis, Upstash REST), 10m (Redlock): elections and lock
//! sets under load, in one run per backend: [`ELECTORS`] contenders
//! campaigning on one election (each proclaiming once per leadership, an
//! observer following it) beside [`SET_TAKERS`] contenders taking
//! overlapping sets of 3 of [`SET_NAMES`] names with `acquire_all`, each in
//! its own order (a deadlock would show as a contender that never completes
//! a round). Per name: 0 overlaps, 0 stale writes, 0 inversions; every
//! contender completes rounds; the observer ends on `Client::leader`
//! (nobody); a failed `acquire_all` (Try, and a 300 ms wait, against a held
//! name in the middle of the set) leaves none of its names held.
//!
//! 10s (one redis-server) and 10t (Redlock over three): the lock load over
//! TCP, the Redis protocol on the native driver's stream; 10u semaphores and
//! 10v read-write locks on one TCP node, with the checks of 10f–10j.
//!
//! 10w: the lock load on a standalone ZooKeeper (Curator's mutex recipe):
//! waiters queue by sequence node, so every contender must progress.
//!
//! The Worker's backends, in workerd ([`WorkerdHost`]): 10n the load above
//! on the Durable Object lock service (native clients through the Worker's
//! front; every contender must progress: its queue is FIFO); 10o parallel
//! callers of the job coordinator's `POST /jobs/:name/run` on the D1 table
//! lock (the jobs write to the fenced resource; see [`d1_jobs_report`]);
//! 10p the lock service stopped and started again under load
//! ([`restart_report`]); 10q semaphores of [`PERMITS`] and 10r read-write
//! locks on the lock service, with the checks of 10f–10j.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use edgelock_devtools::{EtcdServer, FencedResource};
use serde::{Deserialize, Serialize};

use edgelock::core::{AcquireOptions, Wait};

use super::s01_paused_holder::{observer_checks, on_webdis, WEBDIS_OBSERVE_ERRORS};
use super::Mode;
use crate::backend::BackendSpec;
use crate::checker::{check, check_fenced, check_observer, held_through_failed_acquire};
use crate::history::{History, OpKind};
use crate::infra::{
    contenders, etcd_keys, zk_nodes_left, zookeeper_server, Crew, RedisNodes, WorkerdHost,
    UPSTASH_TOKEN, WORKER_TOKEN,
};
use crate::report::ScenarioReport;
use crate::resource::ResourceClient;
use crate::workload::{hold_together, ContenderCfg, ObserverRun};

const TITLE: &str = "load: 64 concurrent clients";
const TITLE_PERMITS: &str = "load: 64 concurrent clients on semaphores";
const TITLE_RW: &str = "load: 64 concurrent clients on read-write locks";
const LOCKS: usize = 8;
const PER_LOCK: usize = 8;
const TTL_MS: u64 = 5_000;
/// The limit of the semaphores of 10f–10h.
const PERMITS: u32 = 3;
/// 10k–10m: contenders campaigning on the one election (short run, long run).
const ELECTORS: (usize, usize) = (4, 16);
/// 10k–10m: contenders taking sets of 3 names (short run, long run).
const SET_TAKERS: (usize, usize) = (6, 16);
/// 10k–10m: the names the sets are drawn from.
const SET_NAMES: usize = 5;
/// Error codes the scenario expects: a waiter giving up after `wait_ms`.
const EXPECTED: &[&str] = &["TIMEOUT"];

pub fn run(mode: &Mode) -> Vec<ScenarioReport> {
    let secs = mode.pick(5, 60);
    let cycles = mode.pick(10_000, 100_000);
    let mut out = Vec::new();
    match EtcdServer::start() {
        Ok(etcd) => {
            let spec = BackendSpec::Etcd {
                endpoints: vec![etcd.url()],
                ttl_ms: TTL_MS,
                request_timeout_ms: 5_000,
            };
            let url = etcd.url();
            let keys = || {
                etcd_keys(&url, "edgelock/")
                    .map(|k| k.len())
                    .unwrap_or(usize::MAX)
            };
            for (id, kind) in [
                ("10a", Kind::Lock),
                ("10f", Kind::Permits(PERMITS)),
                ("10i", Kind::ReadWrite),
            ] {
                if super::wants(id) {
                    out.push(load_report(id, "etcd", &spec, secs, kind, &keys));
                }
            }
            if super::wants("10k") {
                out.push(elect_sets_report("10k", "etcd", &spec, mode, secs, &keys));
            }
        }
        Err(e) => out.push(ScenarioReport::failed_to_run(
            "10a",
            TITLE,
            "etcd",
            &e.to_string(),
        )),
    }
    if !mode.redis() {
        return out;
    }
    if ["10n", "10o", "10p", "10q", "10r"]
        .iter()
        .any(|v| super::wants(v))
    {
        worker_backends(mode, secs, &mut out);
    }
    tcp_variants(secs, &mut out);
    if super::wants("10w") {
        out.push(zookeeper_variant(secs));
    }
    match RedisNodes::start(5, false) {
        Ok(nodes) => {
            let keys = || {
                nodes
                    .lock_keys_left()
                    .iter()
                    .map(|k| k.unwrap_or(usize::MAX))
                    .sum()
            };
            let webdis = BackendSpec::Redis {
                node: nodes.webdis_specs()[0].clone(),
                token: None,
                ttl_ms: TTL_MS,
                request_timeout_ms: 5_000,
            };
            // KNOWN (webdis 0.1.9, not edgelock): with push wake-up, 64
            // clients that keep opening and closing subscription streams get
            // pub/sub chunks written into *other* connections (a response
            // whose "status line" is a 2-hex-digit chunk size: webdis writes
            // a message for a closed subscriber into the reused socket), so
            // a few command requests fail with TRANSPORT (8 in 49,127
            // acquisitions over 60 s; 0 stale writes). 10b therefore measures
            // polling waiters on webdis; 10c measures push on the gateway.
            if super::wants("10b") {
                std::env::set_var("RELIABILITY_REDIS_MAX_SUBSCRIPTIONS", "0");
                out.push(load_report(
                    "10b",
                    "redis (webdis, polling waiters)",
                    &webdis,
                    secs,
                    Kind::Lock,
                    &keys,
                ));
                std::env::remove_var("RELIABILITY_REDIS_MAX_SUBSCRIPTIONS");
            }
            let upstash = BackendSpec::Redis {
                node: nodes.upstash_specs()[0].clone(),
                token: Some(UPSTASH_TOKEN.into()),
                ttl_ms: TTL_MS,
                request_timeout_ms: 5_000,
            };
            for (id, kind) in [
                ("10c", Kind::Lock),
                ("10g", Kind::Permits(PERMITS)),
                ("10j", Kind::ReadWrite),
            ] {
                if super::wants(id) {
                    out.push(load_report(
                        id,
                        "redis (Upstash REST)",
                        &upstash,
                        secs,
                        kind,
                        &keys,
                    ));
                }
            }
            if super::wants("10l") {
                out.push(elect_sets_report(
                    "10l",
                    "redis (Upstash REST)",
                    &upstash,
                    mode,
                    secs,
                    &keys,
                ));
            }
            let redlock = BackendSpec::Redlock {
                nodes: nodes.webdis_specs(),
                token: None,
                ttl_ms: TTL_MS,
                request_timeout_ms: 2_000,
                folded: false,
            };
            for (id, kind) in [("10d", Kind::Lock), ("10h", Kind::Permits(PERMITS))] {
                if super::wants(id) {
                    out.push(load_report(
                        id,
                        "redlock (5 × webdis)",
                        &redlock,
                        secs,
                        kind,
                        &keys,
                    ));
                }
            }
            if super::wants("10m") {
                out.push(elect_sets_report(
                    "10m",
                    "redlock (5 × webdis)",
                    &redlock,
                    mode,
                    secs,
                    &keys,
                ));
            }
            if super::wants("10e") {
                out.push(memory_report("10e", "redis (webdis)", &webdis, cycles));
            }
        }
        Err(e) => out.push(ScenarioReport::failed_to_run(
            "10b",
            TITLE,
            "redis",
            &e.to_string(),
        )),
    }
    out
}

/// 10s: the load on one redis-server over TCP (the Redis protocol on the
/// native driver's stream; waiters poll: push wake-up over TCP is not built
/// yet); 10t: on Redlock over three; 10u / 10v: semaphores / read-write
/// locks on one node. Each on servers of its own, timed with their start-up.
fn tcp_variants(secs: u64, out: &mut Vec<ScenarioReport>) {
    for (id, n, kind) in [
        ("10s", 1, Kind::Lock),
        ("10t", 3, Kind::Lock),
        ("10u", 1, Kind::Permits(PERMITS)),
        ("10v", 1, Kind::ReadWrite),
    ] {
        if !super::wants(id) {
            continue;
        }
        let started = Instant::now();
        let backend = if n == 1 {
            "redis (tcp, push wake-up)".to_string()
        } else {
            format!("redlock ({n} × tcp)")
        };
        let mut r = match RedisNodes::start_tcp(n, false) {
            Ok(nodes) => {
                let spec = if n == 1 {
                    BackendSpec::redis_tcp(&nodes.tcp_specs()[0], None, TTL_MS, 5_000)
                } else {
                    BackendSpec::redlock_tcp(nodes.tcp_specs(), TTL_MS, 2_000)
                };
                load_report(id, &backend, &spec, secs, kind, &|| {
                    nodes.lock_keys_left_total()
                })
            }
            Err(e) => ScenarioReport::failed_to_run(id, TITLE, &backend, &e.to_string()),
        };
        r.duration = started.elapsed();
        out.push(r);
    }
}

/// 10w: the load on a standalone ZooKeeper (Curator's mutex recipe; a
/// waiter watches its predecessor), timed with the server's start-up.
fn zookeeper_variant(secs: u64) -> ScenarioReport {
    let id = "10w";
    let started = Instant::now();
    let mut r = match zookeeper_server() {
        Ok(zk) => {
            let spec = BackendSpec::ZooKeeper {
                connect: zk.connect_string(),
                ttl_ms: 4_000,
                request_timeout_ms: 5_000,
            };
            let addr = zk.addr();
            load_report(id, "zookeeper", &spec, secs, Kind::Lock, &|| {
                zk_nodes_left(&addr)
            })
        }
        Err(e) => ScenarioReport::failed_to_run(id, TITLE, "zookeeper", &e.to_string()),
    };
    r.duration = started.elapsed();
    r
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// What the clients of a load run take.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Lock,
    /// Permits of semaphores of this many.
    Permits(u32),
    /// Read-write locks: every other contender a reader.
    ReadWrite,
}

fn load_report(
    id: &str,
    backend: &str,
    spec: &BackendSpec,
    secs: u64,
    kind: Kind,
    keys_left: &dyn Fn() -> usize,
) -> ScenarioReport {
    let n = LOCKS * PER_LOCK;
    let limit = match kind {
        Kind::Permits(l) => Some(l),
        _ => None,
    };
    let (title, what) = match kind {
        Kind::Permits(l) => (TITLE_PERMITS, format!("semaphores of {l}")),
        Kind::ReadWrite => (TITLE_RW, "read-write locks (half readers)".to_string()),
        Kind::Lock => (TITLE, "locks".to_string()),
    };
    let mut r = ScenarioReport::new(
        id,
        title,
        backend,
        &format!("none: {n} clients ({LOCKS} {what} × {PER_LOCK}) for {secs} s"),
    );
    let fenced = match FencedResource::start() {
        Ok(f) => f,
        Err(e) => return ScenarioReport::failed_to_run(id, TITLE, backend, &e.to_string()),
    };
    let resource = ResourceClient::new(&fenced.url());
    let history = History::new();
    let tpl = ContenderCfg {
        hold_ms: 5,
        writes_per_hold: 1,
        wait_ms: 10_000,
        limit,
        // "every contender progressed" by construction (see the field).
        until_granted: true,
        ..ContenderCfg::new("", "")
    };
    let mut cfgs: Vec<ContenderCfg> = (0..LOCKS)
        .flat_map(|l| contenders(&format!("c{l}."), PER_LOCK, &format!("load-{l}"), &tpl))
        .collect();
    if kind == Kind::ReadWrite {
        for (i, c) in cfgs.iter_mut().enumerate() {
            c.shared = i % 2 == 1;
            c.lock = format!("{}-rw", c.lock);
        }
    }
    // The semaphore filled and readers sharing, arranged (not hoped for):
    // the first semaphore's or read-write lock's first `together` contenders
    // hold at once before the timed load begins.
    let together = match kind {
        Kind::Permits(l) => l as usize,
        Kind::ReadWrite => 2,
        Kind::Lock => 0,
    };
    if together > 0 {
        let first: Vec<ContenderCfg> = cfgs
            .iter()
            .filter(|c| c.lock == cfgs[0].lock && (kind != Kind::ReadWrite || c.shared))
            .take(together)
            .cloned()
            .collect();
        hold_together(spec, &first, &resource, &history);
    }
    let started = Instant::now();
    let crew = Crew::start(spec, cfgs, &resource, &history, Duration::from_secs(secs));
    crew.join_when_done();
    let elapsed = started.elapsed().as_secs_f64();
    // Give closed clients' background cleanup a moment before looking for keys.
    std::thread::sleep(Duration::from_millis(300));
    let left = keys_left();
    let ops = history.ops();
    let v = check(&ops, &fenced.log(None));
    let mut lat: Vec<f64> = ops
        .iter()
        .filter(|o| o.kind == OpKind::Acquire && o.is_ok())
        .map(|o| o.end - o.start)
        .collect();
    lat.sort_by(f64::total_cmp);
    r.figure(
        "acquisitions",
        format!(
            "{} ({:.0}/s)",
            v.acquisitions,
            v.acquisitions as f64 / elapsed
        ),
    );
    r.figure(
        "acquire latency p50 / p99 (ms)",
        format!(
            "{:.1} / {:.1}",
            percentile(&lat, 0.5),
            percentile(&lat, 0.99)
        ),
    );
    r.figure("writes accepted", v.writes_accepted);
    r.figure("errors", v.errors_text());
    r.check(
        "0 stale writes accepted",
        v.stale_accepted == 0,
        format!(
            "{} accepted, {} rejected",
            v.stale_accepted, v.stale_rejected
        ),
    );
    r.check(
        "fencing tokens follow grant order (0 inversions)",
        v.token_inversions == 0,
        v.token_inversions,
    );
    let overlaps = match kind {
        Kind::Permits(_) => "0 overlapping holds of one slot (no faults injected)",
        Kind::ReadWrite => "0 writers beside another holder (no faults injected)",
        Kind::Lock => "0 overlapping holds (no faults injected)",
    };
    r.check(overlaps, v.overlaps_believed == 0, v.overlaps_believed);
    if kind == Kind::ReadWrite {
        let most = v.max_holders_of_any();
        r.figure("most concurrent holders of one read-write lock", most);
        r.check(
            "readers shared a lock (more than one holder at once)",
            most > 1,
            most,
        );
    }
    if let Some(l) = limit {
        let most = v.max_holders_of_any();
        r.figure("most concurrent holders of one semaphore", most);
        r.check(
            &format!("never more than {l} holders of a semaphore at once"),
            most <= l as usize,
            most,
        );
        r.check(
            &format!("{l} permits held at once (the semaphore is used)"),
            most == l as usize,
            most,
        );
    }
    r.check(
        "0 errors other than wait timeouts",
        v.unexpected_errors(EXPECTED) == 0,
        v.errors_text(),
    );
    r.check("0 locks lost", v.lost_signals == 0, v.lost_signals);
    r.check(
        "0 acknowledged writes lost",
        v.acked_lost == 0,
        v.acked_lost,
    );
    if spec.queues_waiters_in_order() {
        // The lock service queues waiters FIFO: nobody starves.
        let progressed: std::collections::HashSet<&str> = ops
            .iter()
            .filter(|o| o.kind == OpKind::Acquire && o.is_ok())
            .map(|o| o.client.as_str())
            .collect();
        r.check(
            "every contender progressed",
            progressed.len() == n,
            format!("{} of {n}", progressed.len()),
        );
    }
    r.check(
        "work was done",
        v.acquisitions > n,
        format!("{} acquisitions", v.acquisitions),
    );
    r.check(
        "0 lock keys left after all clients closed",
        left == 0,
        format!("{left} left"),
    );
    r
}

const TITLE_ELECT_SETS: &str = "load: an election and overlapping lock sets";

/// 10k–10m: electors and set takers at once (see the module docs).
fn elect_sets_report(
    id: &str,
    backend: &str,
    spec: &BackendSpec,
    mode: &Mode,
    secs: u64,
    keys_left: &dyn Fn() -> usize,
) -> ScenarioReport {
    let electors = mode.pick(ELECTORS.0, ELECTORS.1);
    let takers = mode.pick(SET_TAKERS.0, SET_TAKERS.1);
    let mut r = ScenarioReport::new(
        id,
        TITLE_ELECT_SETS,
        backend,
        &format!("none: {electors} clients campaigning on one election (an observer following it) and {takers} taking sets of 3 of {SET_NAMES} names (acquire_all, each in its own order) for {secs} s"),
    );
    let fenced = match FencedResource::start() {
        Ok(f) => f,
        Err(e) => {
            return ScenarioReport::failed_to_run(id, TITLE_ELECT_SETS, backend, &e.to_string())
        }
    };
    let observer_client = match spec.client() {
        Ok(c) => c,
        Err(e) => {
            return ScenarioReport::failed_to_run(
                id,
                TITLE_ELECT_SETS,
                backend,
                &format!("observer client: {e}"),
            )
        }
    };
    let election = format!("{id}-election");
    let observer = ObserverRun::start(observer_client, &election);
    let resource = ResourceClient::new(&fenced.url());
    let history = History::new();
    let tpl = ContenderCfg {
        hold_ms: 5,
        writes_per_hold: 1,
        wait_ms: 10_000,
        // "every elector led and every set taker completed sets" by construction.
        until_granted: true,
        ..ContenderCfg::new("", "")
    };
    let mut cfgs = contenders(
        "e",
        electors,
        &election,
        &ContenderCfg {
            elect: true,
            ..tpl.clone()
        },
    );
    // Taker i: names i, i+1, i+2 (mod SET_NAMES), in that order or reversed.
    let name = |k: usize| format!("{id}-set-{}", k % SET_NAMES);
    for i in 0..takers {
        let mut set: Vec<String> = (i..i + 3).map(name).collect();
        if i % 2 == 1 {
            set.reverse();
        }
        cfgs.push(ContenderCfg {
            id: format!("s{i}"),
            lock: set[0].clone(),
            also: set[1..].to_vec(),
            ..tpl.clone()
        });
    }
    let started = Instant::now();
    let crew = Crew::start(
        spec,
        cfgs.clone(),
        &resource,
        &history,
        Duration::from_secs(secs),
    );
    crew.join_when_done();
    let elapsed = started.elapsed().as_secs_f64();
    let ops = history.ops();
    let seen = observer.finish(Duration::from_secs(5));
    let probe = failed_set_probe(spec, id);
    std::thread::sleep(Duration::from_millis(300));
    let left = keys_left();
    let v = check(&ops, &fenced.log(None));
    let ov = check_observer(&ops, &election, &seen);
    // Completed rounds per contender: leaderships, or granted sets (counted
    // on the first name of the contender's own order).
    let rounds: Vec<(String, bool, usize)> = cfgs
        .iter()
        .map(|c| {
            let n = ops
                .iter()
                .filter(|o| {
                    o.kind == OpKind::Acquire && o.is_ok() && o.client == c.id && o.lock == c.lock
                })
                .count();
            (c.id.clone(), c.elect, n)
        })
        .collect();
    let range = |elect: bool| {
        let ns: Vec<usize> = rounds
            .iter()
            .filter(|r| r.1 == elect)
            .map(|r| r.2)
            .collect();
        (
            ns.iter().copied().min().unwrap_or(0),
            ns.iter().copied().max().unwrap_or(0),
            ns.iter().sum::<usize>(),
        )
    };
    let (lead_min, lead_max, leads) = range(true);
    let (set_min, set_max, sets) = range(false);
    let proclaims = ops
        .iter()
        .filter(|o| o.kind == OpKind::Proclaim && o.is_ok())
        .count();
    r.figure(
        "leaderships (per elector min / max)",
        format!(
            "{leads} ({:.0}/s; {lead_min} / {lead_max})",
            leads as f64 / elapsed
        ),
    );
    r.figure(
        "lock sets granted (per taker min / max)",
        format!(
            "{sets} ({:.0}/s; {set_min} / {set_max})",
            sets as f64 / elapsed
        ),
    );
    r.figure(
        "holds (leaderships, and one per name of each set)",
        v.acquisitions,
    );
    if set_max > 4 * set_min.max(1) {
        r.note(format!("Lock sets are served unevenly ({set_min} to {set_max} sets per taker): acquire_all takes the names one at a time in canonical order, and no queue spans several names. What is checked is progress (every taker completes sets; a deadlock would stop some at 0), not fairness."));
    }
    r.figure("proclaims accepted", proclaims);
    r.figure("writes accepted", v.writes_accepted);
    r.figure("errors", v.errors_text());
    r.check(
        "0 stale writes accepted",
        v.stale_accepted == 0,
        format!(
            "{} accepted, {} rejected",
            v.stale_accepted, v.stale_rejected
        ),
    );
    r.check(
        "0 overlapping holds: one leader at a time, one set holder per name (no faults injected)",
        v.overlaps_believed == 0,
        v.overlaps_believed,
    );
    r.check(
        "fencing tokens follow grant order per name (0 inversions)",
        v.token_inversions == 0,
        v.token_inversions,
    );
    r.check(
        "every elector led and every set taker completed sets (no deadlock, no starvation)",
        lead_min > 0 && set_min > 0,
        format!("fewest leaderships {lead_min}, fewest sets {set_min}"),
    );
    r.check(
        "0 errors other than wait timeouts (proclaims included)",
        v.unexpected_errors(EXPECTED) == 0,
        v.errors_text(),
    );
    r.check("0 locks lost", v.lost_signals == 0, v.lost_signals);
    r.check(
        "0 acknowledged writes lost",
        v.acked_lost == 0,
        v.acked_lost,
    );
    let held = held_through_failed_acquire(&ops);
    r.check("no name held across a failed acquire_all", held == 0, held);
    match probe {
        Ok(detail) => r.check(
            "a failed acquire_all leaves none of its names held (Try, and a 300 ms wait)",
            true,
            detail,
        ),
        Err(why) => r.check(
            "a failed acquire_all leaves none of its names held (Try, and a 300 ms wait)",
            false,
            why,
        ),
    }
    let tolerated = if on_webdis(spec) {
        WEBDIS_OBSERVE_ERRORS
    } else {
        &[]
    };
    observer_checks(&mut r, std::iter::once(&ov), tolerated);
    r.check(
        "0 lock keys left after all clients closed",
        left == 0,
        format!("{left} left"),
    );
    r
}

/// A set `[<p>-c, <p>-b, <p>-a]` whose middle name (canonically) another
/// client holds: `acquire_all` with `Wait::Try` must answer "not acquired"
/// and with a 300 ms wait fail, and each time a third client must at once be
/// able to take `<p>-a` (taken first in canonical order, then given back)
/// and `<p>-c`. `Ok(detail)` when all of that held.
fn failed_set_probe(spec: &BackendSpec, id: &str) -> Result<String, String> {
    let p = format!("{id}-probe");
    let (a, b, c) = (format!("{p}-a"), format!("{p}-b"), format!("{p}-c"));
    let blocker = spec.client().map_err(|e| format!("client: {e}"))?;
    let prober = spec.client().map_err(|e| format!("client: {e}"))?;
    let checker = spec.client().map_err(|e| format!("client: {e}"))?;
    let result = (|| {
        let held = blocker
            .try_acquire(&b)
            .map_err(|e| format!("blocker: {e}"))?
            .ok_or("the blocker could not take the middle name")?;
        let mut seen = Vec::new();
        for (label, wait) in [("Try", Wait::Try), ("300 ms", Wait::For(300))] {
            let opts = AcquireOptions { wait, ttl_ms: None };
            let got = prober.acquire_all(&[c.as_str(), b.as_str(), a.as_str()], opts, None);
            let outcome = match got {
                Ok(None) => "not acquired".to_string(),
                Err(e) => e.code().to_string(),
                Ok(Some(_)) => {
                    return Err(format!("{label}: the set was granted while {b} was held"))
                }
            };
            if label == "Try" && outcome != "not acquired" {
                return Err(format!("{label}: {outcome} instead of not acquired"));
            }
            for name in [&a, &c] {
                match checker.try_acquire(name) {
                    Ok(Some(l)) => {
                        let _ = l.release();
                    }
                    Ok(None) => return Err(format!("{label} ({outcome}): {name} stayed held")),
                    Err(e) => return Err(format!("{label}: taking {name}: {e}")),
                }
            }
            seen.push(format!("{label}: {outcome}, {a} and {c} free"));
        }
        let _ = held.release();
        Ok(seen.join("; "))
    })();
    for cl in [&blocker, &prober, &checker] {
        let _ = cl.close();
    }
    result
}

/// What the `memory` subcommand is told to do.
#[derive(Serialize, Deserialize)]
pub struct MemorySpec {
    pub backend: BackendSpec,
    pub cycles: u64,
    pub sample_every: u64,
}

#[derive(Serialize, Deserialize)]
struct Sample {
    cycles: u64,
    rss_kb: u64,
    #[serde(default)]
    failures: u64,
}

fn rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// `reliability memory '<MemorySpec JSON>'`: one client, `cycles` uncontended
/// acquire/release cycles, a JSON line with its RSS every `sample_every`.
pub fn memory_main(spec_json: &str) -> i32 {
    let Ok(spec) = serde_json::from_str::<MemorySpec>(spec_json) else {
        eprintln!("reliability memory: bad spec");
        return 64;
    };
    let client = match spec.backend.client() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("reliability memory: {e}");
            return 69;
        }
    };
    let mut failures = 0u64;
    for i in 1..=spec.cycles {
        match client.try_acquire("memory") {
            Ok(Some(lock)) => {
                if !matches!(lock.release(), Ok(true)) {
                    failures += 1;
                }
            }
            _ => failures += 1,
        }
        if i % spec.sample_every.max(1) == 0 {
            println!(
                "{}",
                serde_json::json!({"cycles": i, "rss_kb": rss_kb(), "failures": failures})
            );
        }
    }
    let _ = client.close();
    0
}

fn memory_report(id: &str, backend: &str, spec: &BackendSpec, cycles: u64) -> ScenarioReport {
    let mut r = ScenarioReport::new(
        id,
        "long-running client memory",
        backend,
        &format!("none: one client, {cycles} acquire/release cycles in its own process"),
    );
    let sample_every = cycles / 20;
    let json = serde_json::to_string(&MemorySpec {
        backend: spec.clone(),
        cycles,
        sample_every,
    })
    .unwrap_or_default();
    let started = Instant::now();
    let child = std::env::current_exe().and_then(|exe| {
        Command::new(exe)
            .arg("memory")
            .arg(json)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
    });
    let mut child = match child {
        Ok(c) => c,
        Err(e) => return ScenarioReport::failed_to_run(id, TITLE, backend, &e.to_string()),
    };
    let samples: Vec<Sample> = child
        .stdout
        .take()
        .map(|o| {
            BufReader::new(o)
                .lines()
                .map_while(Result::ok)
                .filter_map(|l| serde_json::from_str(&l).ok())
                .collect()
        })
        .unwrap_or_default();
    let _ = child.wait();
    let secs = started.elapsed().as_secs_f64();
    let done = samples.last().map_or(0, |s| s.cycles);
    let failures = samples.last().map_or(0, |s| s.failures);
    // The first fifth warms up (allocator arenas, connection pool, thread
    // caches); after that, resident memory must not grow.
    let warm = samples
        .iter()
        .find(|s| s.cycles >= cycles / 5)
        .map_or(0, |s| s.rss_kb);
    let peak_after = samples
        .iter()
        .filter(|s| s.cycles >= cycles / 5)
        .map(|s| s.rss_kb)
        .max()
        .unwrap_or(0);
    let end = samples.last().map_or(0, |s| s.rss_kb);
    let growth = peak_after.saturating_sub(warm);
    r.figure(
        "cycles",
        format!(
            "{done} in {secs:.0} s ({:.0}/s)",
            done as f64 / secs.max(0.001)
        ),
    );
    r.figure(
        "RSS after warm-up / peak after / at end (KiB)",
        format!("{warm} / {peak_after} / {end}"),
    );
    r.figure(
        "RSS samples (KiB)",
        samples
            .iter()
            .map(|s| s.rss_kb.to_string())
            .collect::<Vec<_>>()
            .join(" "),
    );
    r.check(
        "every cycle ran and succeeded",
        done == cycles && failures == 0,
        format!("{done} cycles, {failures} failed"),
    );
    r.check(
        "memory flat after warm-up (growth ≤ 1 MiB)",
        done == cycles && growth <= 1024,
        format!("+{growth} KiB"),
    );
    r
}

const TITLE_D1: &str = "load: concurrent job runs on the D1 table lock";
/// 10o: parallel callers of `POST /jobs/:name/run` (short run, long run).
const D1_CALLERS: (usize, usize) = (6, 16);
/// 10o: job names they share.
const D1_JOBS: usize = 2;

/// 10n (the Durable Object lock service through the Worker's front, native
/// clients) and 10o (the D1 table lock, contenders inside workerd: the job
/// coordinator's runs), on one workerd host.
fn worker_backends(mode: &Mode, secs: u64, out: &mut Vec<ScenarioReport>) {
    let fenced = match FencedResource::start() {
        Ok(f) => f,
        Err(e) => {
            out.push(ScenarioReport::failed_to_run(
                "10n",
                TITLE,
                "durable-object",
                &e.to_string(),
            ));
            return;
        }
    };
    let host = match WorkerdHost::start(Some(&fenced.url())) {
        Ok(h) => h,
        Err(e) => {
            out.push(ScenarioReport::failed_to_run(
                "10n",
                TITLE,
                "durable-object",
                &e.to_string(),
            ));
            return;
        }
    };
    let spec = BackendSpec::Durable {
        url: host.front_url(),
        token: WORKER_TOKEN.into(),
        ttl_ms: TTL_MS,
        request_timeout_ms: 5_000,
        auto_extend: true,
    };
    // Names still held after every client closed (the lock service keeps
    // no key per lock: its `inspect` says whether anyone holds the name).
    let keys = || {
        (0..LOCKS)
            .flat_map(|l| [format!("load-{l}"), format!("load-{l}-rw")])
            .map(|name| match host.held(&name) {
                Some(false) => 0,
                Some(true) => 1,
                None => usize::MAX / (4 * LOCKS),
            })
            .sum()
    };
    for (id, kind) in [
        ("10n", Kind::Lock),
        ("10q", Kind::Permits(PERMITS)),
        ("10r", Kind::ReadWrite),
    ] {
        if super::wants(id) {
            let backend = "durable-object (workerd, Worker front)";
            out.push(load_report(id, backend, &spec, secs, kind, &keys));
        }
    }
    if super::wants("10o") {
        out.push(d1_jobs_report("10o", &host, &fenced, mode, secs));
    }
    if super::wants("10p") {
        let mut host = host;
        out.push(restart_report("10p", &mut host));
    }
}

const TITLE_RESTART: &str = "lock service restarted under load";
/// 10p: contenders per lock, locks, lease.
const RESTART_CLIENTS: usize = 4;
const RESTART_LOCKS: usize = 2;
const RESTART_TTL_MS: u64 = 2_000;

/// 10p: native contenders on the lock service while workerd is stopped
/// (Miniflare disposed) and started again on the same persisted storage and
/// port, with locks held. The fencing counters are in the objects' storage:
/// tokens must keep rising across the restart (0 inversions, 0 stale writes
/// accepted); a holder whose renewals fail meanwhile must learn Lost before
/// anyone else is granted its lock (0 overlapping holds); every contender
/// must acquire again after the restart.
/// 10p's safety bound on the run after the restart (it ends as soon as
/// every contender acquired again).
const RESTART_RUN_BOUND: Duration = Duration::from_secs(60);

fn restart_report(id: &str, host: &mut WorkerdHost) -> ScenarioReport {
    let backend = "durable-object (workerd, Worker front)";
    let n = RESTART_CLIENTS * RESTART_LOCKS;
    let mut r = ScenarioReport::new(
        id,
        TITLE_RESTART,
        backend,
        &format!("workerd stopped and started again on the same storage while {n} clients ({RESTART_LOCKS} locks × {RESTART_CLIENTS}, lease {RESTART_TTL_MS} ms) hold and wait"),
    );
    let fenced = match FencedResource::start() {
        Ok(f) => f,
        Err(e) => return ScenarioReport::failed_to_run(id, TITLE_RESTART, backend, &e.to_string()),
    };
    let resource = ResourceClient::new(&fenced.url());
    let history = History::new();
    let spec = BackendSpec::Durable {
        url: host.front_url(),
        token: WORKER_TOKEN.into(),
        ttl_ms: RESTART_TTL_MS,
        request_timeout_ms: 1_000,
        auto_extend: true,
    };
    // Waits shorter than the lease (a grant after a longer held-open wait
    // arrives expired, see 8c's note); holds long enough to span renewals.
    let tpl = ContenderCfg {
        hold_ms: 400,
        writes_per_hold: 4,
        wait_ms: 1_500,
        // Not spinning on refused connections while workerd is down.
        pause_ms: 20,
        ..ContenderCfg::new("", "")
    };
    let cfgs: Vec<ContenderCfg> = (0..RESTART_LOCKS)
        .flat_map(|l| {
            contenders(
                &format!("r{l}."),
                RESTART_CLIENTS,
                &format!("restart-{l}"),
                &tpl,
            )
        })
        .collect();
    // The crew runs until every contender acquired again after the restart
    // (and at least a second past it), not for a fixed time: a slow restart
    // (3 s on a loaded machine) must not leave too little time for it.
    let crew = Crew::start(&spec, cfgs, &resource, &history, RESTART_RUN_BOUND);
    std::thread::sleep(Duration::from_millis(2_000));
    let held_before: usize = (0..RESTART_LOCKS)
        .filter(|l| host.held(&format!("restart-{l}")) == Some(true))
        .count();
    let stopped_at = crate::history::now_ms();
    let restart = host.restart();
    let restarted_at = crate::history::now_ms();
    super::s01_paused_holder::wait_for(RESTART_RUN_BOUND, || {
        let acquired_after: std::collections::BTreeSet<String> = history
            .ops()
            .iter()
            .filter(|o| o.kind == OpKind::Acquire && o.is_ok() && o.start > restarted_at)
            .map(|o| o.client.clone())
            .collect();
        acquired_after.len() == n && crate::history::now_ms() > restarted_at + 1_000.0
    });
    crew.join();
    std::thread::sleep(Duration::from_millis(300));
    let ops = history.ops();
    let v = check(&ops, &fenced.log(None));
    let after =
        |o: &&crate::history::Op| o.kind == OpKind::Acquire && o.is_ok() && o.start > restarted_at;
    let mut progressed_after: std::collections::BTreeSet<&str> = Default::default();
    for o in ops.iter().filter(after) {
        progressed_after.insert(o.client.as_str());
    }
    let max_before = ops
        .iter()
        .filter(|o| o.kind == OpKind::Acquire && o.is_ok() && o.end < stopped_at)
        .filter_map(|o| o.token)
        .max()
        .unwrap_or(0);
    let min_after = ops.iter().filter(after).filter_map(|o| o.token).min();
    let left: usize = (0..RESTART_LOCKS)
        .map(|l| match host.held(&format!("restart-{l}")) {
            Some(false) => 0,
            _ => 1,
        })
        .sum();
    r.figure(
        "restart (stop + start, ms)",
        format!("{:.0}", restarted_at - stopped_at),
    );
    r.figure(
        "locks held when stopped",
        format!("{held_before} of {RESTART_LOCKS}"),
    );
    r.figure("acquisitions", v.acquisitions);
    r.figure(
        "highest token before / lowest after the restart",
        format!(
            "{max_before} / {}",
            min_after.map_or("-".into(), |t| t.to_string())
        ),
    );
    r.figure("holders told Lost", v.lost_signals);
    r.figure("errors", v.errors_text());
    r.check(
        "workerd started again",
        restart.is_ok(),
        match &restart {
            Ok(()) => "ok".to_string(),
            Err(e) => e.to_string(),
        },
    );
    check_fenced(&mut r, &v);
    r.check(
        "tokens keep rising across the restart (0 inversions, the first after above the last before)",
        v.token_inversions == 0 && min_after.is_some_and(|t| t > max_before),
        format!("{} inversions; {max_before} / {min_after:?}", v.token_inversions),
    );
    r.check(
        "0 acknowledged writes lost",
        v.acked_lost == 0,
        v.acked_lost,
    );
    r.check(
        "every contender acquired again after the restart",
        progressed_after.len() == n,
        format!("{} of {n}", progressed_after.len()),
    );
    r.check("0 locks left held", left == 0, format!("{left} left"));
    r.note("Errors while workerd is down (transport failures of acquires, renewals and releases) are expected and counted above; what must hold is the fence, the order of tokens and that no two clients believed they held a lock at once.");
    r
}

/// 10o: callers run jobs through `POST /jobs/:name/run` (the coordinator on
/// the d1 backend acquires, runs the demo job, which appends
/// `{token, started, finished}` to the fenced resource, and releases). Each
/// run is recorded as a hold from the job's `started` to its `finished` (its
/// own clock, inside the lock) under its token, and the resource's log is
/// judged by the checker.
fn d1_jobs_report(
    id: &str,
    host: &WorkerdHost,
    fenced: &FencedResource,
    mode: &Mode,
    secs: u64,
) -> ScenarioReport {
    let callers = mode.pick(D1_CALLERS.0, D1_CALLERS.1);
    let mut r = ScenarioReport::new(
        id,
        TITLE_D1,
        "d1 (workerd, job coordinator)",
        &format!("none: {callers} parallel callers of POST /jobs/:name/run on {D1_JOBS} jobs for {secs} s"),
    );
    let history = History::new();
    let deadline = Instant::now() + Duration::from_secs(secs);
    let statuses = std::sync::Mutex::new(std::collections::BTreeMap::<String, usize>::new());
    let per_caller = std::sync::Mutex::new(vec![0usize; callers]);
    let started = Instant::now();
    std::thread::scope(|sc| {
        for c in 0..callers {
            let (history, statuses, per_caller) = (&history, &statuses, &per_caller);
            sc.spawn(move || {
                let job = format!("d1-load-{}", c % D1_JOBS);
                let client = format!("caller{c}");
                // Past the deadline, a caller that never ran its job goes on
                // (60 s more at most): "every caller progressed" must not
                // depend on how fast the machine hands the lock on.
                let ran = || per_caller.lock().map_or(0, |p| p[c]) > 0;
                while Instant::now() < deadline
                    || (!ran() && Instant::now() < deadline + Duration::from_secs(60))
                {
                    let t0 = crate::history::now_ms();
                    let answer = host.post(
                        &format!("/jobs/{job}/run"),
                        &serde_json::json!({"waitMs": 10_000, "ttlMs": TTL_MS}),
                        Duration::from_secs(20),
                    );
                    let t1 = crate::history::now_ms();
                    let key = match &answer {
                        Ok((200, v)) => {
                            let token = v
                                .get("token")
                                .and_then(serde_json::Value::as_str)
                                .and_then(|t| t.parse::<u64>().ok());
                            let (from, to) = (
                                v.get("started").and_then(serde_json::Value::as_f64),
                                v.get("finished").and_then(serde_json::Value::as_f64),
                            );
                            let (from, to) = (from.unwrap_or(t0), to.unwrap_or(t1));
                            history.record(crate::history::Op {
                                client: client.clone(),
                                lock: job.clone(),
                                kind: OpKind::Acquire,
                                start: t0.min(from),
                                end: from,
                                outcome: crate::history::Outcome::Ok,
                                token,
                                write_id: None,
                            });
                            history.record(crate::history::Op {
                                client: client.clone(),
                                lock: job.clone(),
                                kind: OpKind::Release,
                                start: to,
                                end: t1.max(to),
                                outcome: crate::history::Outcome::Ok,
                                token,
                                write_id: None,
                            });
                            if let Ok(mut p) = per_caller.lock() {
                                p[c] += 1;
                            }
                            // A release that found the lease gone: the run outlived its hold.
                            if v.pointer("/release/heldUntilRelease")
                                != Some(&serde_json::Value::Bool(true))
                            {
                                "200, not held until release".to_string()
                            } else {
                                "200".to_string()
                            }
                        }
                        Ok((s, v)) => format!(
                            "{s} {}",
                            v.get("code")
                                .and_then(serde_json::Value::as_str)
                                .unwrap_or("")
                        ),
                        Err(e) => format!("transport: {}", e.kind()),
                    };
                    if let Ok(mut m) = statuses.lock() {
                        *m.entry(key).or_default() += 1;
                    }
                }
            });
        }
    });
    let elapsed = started.elapsed().as_secs_f64();
    let ops = history.ops();
    let log = fenced.log(None);
    let v = check(&ops, &log);
    // Arrival order at the resource, per job: accepted tokens strictly increase.
    let mut last: std::collections::HashMap<String, u64> = Default::default();
    let mut not_increasing = 0usize;
    let mut runs_logged = 0usize;
    for e in log
        .get("entries")
        .and_then(serde_json::Value::as_array)
        .into_iter()
        .flatten()
    {
        let res = e
            .get("resource")
            .and_then(serde_json::Value::as_str)
            .unwrap_or("");
        if !res.starts_with("d1-load-") || e.get("accepted") != Some(&serde_json::Value::Bool(true))
        {
            continue;
        }
        runs_logged += 1;
        let t: u64 = e
            .get("token")
            .and_then(serde_json::Value::as_str)
            .and_then(|t| t.parse().ok())
            .unwrap_or(0);
        let prev = last.insert(res.to_string(), t);
        if prev.is_some_and(|p| t <= p) {
            not_increasing += 1;
        }
    }
    let statuses = statuses.into_inner().unwrap_or_default();
    let per_caller = per_caller.into_inner().unwrap_or_default();
    let status_text = statuses
        .iter()
        .map(|(k, n)| format!("{k}: {n}"))
        .collect::<Vec<_>>()
        .join(", ");
    let runs_ok = statuses.get("200").copied().unwrap_or(0);
    r.figure(
        "job runs",
        format!("{runs_ok} ({:.0}/s)", runs_ok as f64 / elapsed),
    );
    r.figure("answers", &status_text);
    r.figure("runs per caller", format!("{per_caller:?}"));
    r.check(
        "0 stale writes accepted",
        v.stale_accepted == 0,
        format!(
            "{} accepted, {} rejected",
            v.stale_accepted, v.stale_rejected
        ),
    );
    r.check(
        "0 overlapping runs of one job (the job's own start/finish)",
        v.overlaps_believed == 0,
        v.overlaps_believed,
    );
    r.check(
        "accepted tokens strictly increase per job (arrival order)",
        not_increasing == 0,
        format!("{not_increasing} not increasing of {runs_logged}"),
    );
    let timeouts = statuses.get("504 TIMEOUT").copied().unwrap_or(0);
    r.check(
        "every run answered 200 or 504 TIMEOUT (a wait that ran out; no refused token, no backend error)",
        runs_ok > 0 && runs_ok + timeouts == statuses.values().sum::<usize>(),
        &status_text,
    );
    r.check(
        "every run reached the resource",
        runs_logged == runs_ok,
        format!("{runs_logged} logged, {runs_ok} answered"),
    );
    r.check(
        "every caller progressed",
        per_caller.iter().all(|n| *n > 0),
        format!("{per_caller:?}"),
    );
    r
}
