//! Scenario 3: client↔backend partitions through the fault proxies
//! (`Fault::Blackhole`: requests are swallowed, nothing answers).
//!
//! - 3a etcd: one member's proxy blackholed while three contenders use all
//!   three proxied endpoints (requests must fail over);
//! - 3b Redlock: one of five nodes blackholed under three contenders;
//! - 3c etcd / 3d Redlock: the whole client partitioned — a holder (its own
//!   proxies, all blackholed) and a fresh probe client that keeps trying to
//!   acquire while partitioned; contenders on direct endpoints.
//!
//! - 3e–3h: the same four with a semaphore of [`PERMITS`]: per slot no
//!   overlap and 0 stale writes, never more than [`PERMITS`] holders, and
//!   the partitioned holder learns Lost before anyone is granted its slot;
//! - 3i / 3j: 3a / 3c on an etcd read-write lock (every other contender a
//!   reader; the partitioned holder a writer): never a writer beside anyone
//!   (Redlock does not grant shared holds).
//! - 3k etcd / 3l one Redis node: 3c on an election: the partitioned holder
//!   is the leader (the probe and both contenders campaign too, an observer
//!   on direct endpoints follows it): the leader learns Lost before anyone
//!   else leads, one leader at a time, its blind writes fenced, and the
//!   observer ends on `Client::leader` (nobody) once all stopped.
//!
//! Must hold: every operation ends within its bound (computed from the
//! machines' retry policies, see [`etcd_acquire_bound`] and
//! [`redlock_acquire_bound`]), no "acquired" while fully partitioned, a
//! partitioned holder learns Lost before anyone else is granted (no overlap),
//! 0 stale writes accepted. The holder writes blindly (also after Lost), so
//! the fence has stale writes to reject.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use edgelock_devtools::{EtcdOptions, Fault, FaultProxy, FencedResource};

use super::s01_paused_holder::{observer_checks, on_webdis, WEBDIS_OBSERVE_ERRORS};
use super::s02_etcd_leader::{
    errors_text, first_grant_after, lost_at, max_duration, rel, secs, Holder,
};
use super::Mode;
use crate::backend::BackendSpec;
use crate::checker::{check, check_observer};
use crate::history::{now_ms, History, Op, OpKind};
use crate::infra::addr_of;
use crate::infra::{contenders, Crew, EtcdNodes, RedisNodes};
use crate::report::ScenarioReport;
use crate::resource::ResourceClient;
use crate::workload::{acquire, ContenderCfg, ObserverRun};

const TITLE: &str = "client-backend partition";
const ETCD_TTL_MS: u64 = 4_000;
const ETCD_TIMEOUT_MS: u64 = 1_000;
const REDLOCK_TTL_MS: u64 = 3_000;
const REDLOCK_TIMEOUT_MS: u64 = 500;
/// Scheduling noise on a shared 2-core machine (driver thread wake-ups,
/// HTTP connection set-up), added to every computed bound.
const SLACK_MS: u64 = 1_500;
const WAIT_MS: u64 = 3_000;
const PROBE_WAIT_MS: u64 = 2_000;
/// The limit of the semaphore variants (3e–3h).
const PERMITS: u32 = 2;

/// Longest an etcd acquire with `Wait::For(wait)` can take: each request is
/// tried on up to n+1 endpoints (`max_attempts`), each attempt bounded by the
/// request timeout; at the deadline a txn in flight is awaited, then the
/// cleanup delete (also up to n+1 attempts) runs before the error returns.
/// A lease grant in flight at the deadline is abandoned at once.
fn etcd_acquire_bound(wait: u64, endpoints: u64, timeout: u64) -> u64 {
    wait + 2 * (endpoints + 1) * timeout
}

/// One txn with failover.
fn etcd_release_bound(endpoints: u64, timeout: u64) -> u64 {
    (endpoints + 1) * timeout
}

/// Redlock: retries are scheduled no later than the wait deadline; the last
/// attempt's round (≤ one timeout, nodes asked in parallel) is followed by a
/// cleanup round (≤ one timeout) before the error returns.
fn redlock_acquire_bound(wait: u64, timeout: u64) -> u64 {
    wait + 2 * timeout
}

pub fn run(mode: &Mode) -> Vec<ScenarioReport> {
    let mut out = Vec::new();
    // `None` for a variant `--variants` left out.
    let timed = |id: &str, backend: &str, f: &mut dyn FnMut() -> Result<ScenarioReport, String>| {
        if !super::wants(id) {
            return None;
        }
        let started = Instant::now();
        let mut r = f().unwrap_or_else(|e| ScenarioReport::failed_to_run(id, TITLE, backend, &e));
        r.duration = started.elapsed();
        Some(r)
    };
    match EtcdNodes::start(3, EtcdOptions::default()) {
        Ok(nodes) => {
            out.extend(timed("3a", "etcd", &mut || {
                etcd_one_member(mode, &nodes, None)
            }));
            out.extend(timed("3c", "etcd", &mut || {
                etcd_client_partitioned(mode, &nodes, None)
            }));
            out.extend(timed("3e", "etcd", &mut || {
                etcd_one_member(mode, &nodes, Some(PERMITS))
            }));
            out.extend(timed("3g", "etcd", &mut || {
                etcd_client_partitioned(mode, &nodes, Some(PERMITS))
            }));
            out.extend(timed("3i", "etcd", &mut || {
                etcd_one_member_rw(mode, &nodes)
            }));
            out.extend(timed("3j", "etcd", &mut || {
                etcd_client_partitioned_rw(mode, &nodes)
            }));
            out.extend(timed("3k", "etcd", &mut || {
                etcd_partitioned(mode, &nodes, None, false, true)
            }));
        }
        Err(e) => {
            for id in ["3a", "3c", "3e", "3g", "3i", "3j", "3k"] {
                out.push(ScenarioReport::failed_to_run(
                    id,
                    TITLE,
                    "etcd",
                    &format!("etcd cluster: {e}"),
                ));
            }
        }
    }
    match RedisNodes::start(5, false) {
        _ if !mode.redis() => {}
        Ok(nodes) => {
            out.extend(timed("3b", "redlock ×5", &mut || {
                redlock_one_node(mode, &nodes, None)
            }));
            out.extend(timed("3d", "redlock ×5", &mut || {
                redlock_client_partitioned(mode, &nodes, None)
            }));
            out.extend(timed("3f", "redlock ×5", &mut || {
                redlock_one_node(mode, &nodes, Some(PERMITS))
            }));
            out.extend(timed("3h", "redlock ×5", &mut || {
                redlock_client_partitioned(mode, &nodes, Some(PERMITS))
            }));
            out.extend(timed("3l", "redis (webdis)", &mut || {
                redis_leader_partitioned(mode, &nodes)
            }));
        }
        Err(e) => {
            for id in ["3b", "3d", "3f", "3h", "3l"] {
                out.push(ScenarioReport::failed_to_run(
                    id,
                    TITLE,
                    "redlock ×5",
                    &format!("redis nodes: {e}"),
                ));
            }
        }
    }
    out.sort_by(|a, b| a.id.cmp(&b.id));
    out
}

fn grants_between(ops: &[Op], from: f64, to: f64) -> usize {
    ops.iter()
        .filter(|o| o.kind == OpKind::Acquire && o.is_ok() && o.end >= from && o.end < to)
        .count()
}

fn bound_check(
    r: &mut ScenarioReport,
    what: &str,
    observed: Option<f64>,
    bound: u64,
    count: usize,
) {
    r.check(
        what,
        observed.map_or(true, |m| m <= bound as f64),
        format!(
            "max {} of {count} vs bound {}",
            observed.map_or("-".into(), secs),
            secs(bound as f64)
        ),
    );
}

/// 3a / 3b: one node blackholed for a while under contention.
struct OneNode<'a> {
    id: &'a str,
    backend: &'a str,
    fault: &'a str,
    spec: BackendSpec,
    acquire_bound: u64,
    release_bound: u64,
    bound_text: String,
    proxy: &'a FaultProxy,
    /// Permits of a semaphore of this many instead of the lock.
    limit: Option<u32>,
    /// A read-write lock: every other contender a reader.
    rw: bool,
}

/// The limit checks of a semaphore variant: never more than `limit` holders.
fn limit_check(r: &mut ScenarioReport, limit: Option<u32>, v: &crate::checker::Verdict) {
    if let Some(l) = limit {
        let most = v.max_holders_of_any();
        r.figure("most concurrent holders of the semaphore", most);
        r.check(
            &format!("never more than {l} holders at once"),
            most <= l as usize,
            most,
        );
    }
}

fn one_node(mode: &Mode, s: OneNode) -> Result<ScenarioReport, String> {
    let fault = match (s.limit, s.rw) {
        (Some(l), _) => format!("{} (a semaphore of {l})", s.fault),
        (None, true) => format!(
            "{} (a read-write lock, every other contender a reader)",
            s.fault
        ),
        (None, false) => s.fault.to_string(),
    };
    let mut r = ScenarioReport::new(s.id, TITLE, s.backend, &fault);
    let fenced = FencedResource::start().map_err(|e| format!("fenced resource: {e}"))?;
    let resource = ResourceClient::new(&fenced.url());
    let history = History::new();
    let lock = format!("s3-{}", s.id);
    let tpl = ContenderCfg {
        wait_ms: WAIT_MS,
        hold_ms: 150,
        writes_per_hold: 2,
        pause_ms: 50,
        limit: s.limit,
        ..ContenderCfg::new("", &lock)
    };
    let mut cfgs = contenders("c", 4, &lock, &tpl);
    if s.rw {
        for (i, c) in cfgs.iter_mut().enumerate() {
            c.shared = i % 2 == 1;
        }
    } else {
        cfgs.truncate(3);
    }
    let crew = Crew::start(&s.spec, cfgs, &resource, &history, Duration::from_secs(90));
    std::thread::sleep(Duration::from_millis(mode.pick(2_000, 3_000)));
    let t_fault = now_ms();
    s.proxy.set(Fault::Blackhole);
    std::thread::sleep(Duration::from_millis(mode.pick(6_000, 10_000)));
    let t_heal = now_ms();
    s.proxy.set(Fault::Pass);
    std::thread::sleep(Duration::from_millis(2_000));
    crew.join();

    let ops = history.ops();
    let v = check(&ops, &fenced.log(None));
    let acquires = ops.iter().filter(|o| o.kind == OpKind::Acquire).count();
    let releases = ops.iter().filter(|o| o.kind == OpKind::Release).count();
    bound_check(
        &mut r,
        "every acquire ends within its bound",
        max_duration(&ops, OpKind::Acquire, |_| true),
        s.acquire_bound,
        acquires,
    );
    bound_check(
        &mut r,
        "every release ends within its bound",
        max_duration(&ops, OpKind::Release, |_| true),
        s.release_bound,
        releases,
    );
    r.check(
        "no overlapping holds",
        v.overlaps_believed == 0,
        format!(
            "{} overlaps in {} holds",
            v.overlaps_believed, v.acquisitions
        ),
    );
    r.check(
        "0 stale writes accepted",
        v.stale_accepted == 0,
        format!(
            "{} accepted, {} stale rejected",
            v.writes_accepted, v.stale_rejected
        ),
    );
    limit_check(&mut r, s.limit, &v);
    r.figure("bounds", s.bound_text);
    r.figure(
        "grants before / during / after the fault",
        format!(
            "{} / {} / {}",
            grants_between(&ops, 0.0, t_fault),
            grants_between(&ops, t_fault, t_heal),
            grants_between(&ops, t_heal, f64::MAX)
        ),
    );
    r.figure(
        "max acquire",
        max_duration(&ops, OpKind::Acquire, |_| true).map_or("-".into(), secs),
    );
    r.figure("errors", errors_text(&v));
    r.figure("fault lasted", secs(t_heal - t_fault));
    Ok(r)
}

fn etcd_one_member(
    mode: &Mode,
    nodes: &EtcdNodes,
    limit: Option<u32>,
) -> Result<ScenarioReport, String> {
    let n = nodes.proxies.len() as u64;
    let spec = BackendSpec::Etcd {
        endpoints: nodes.proxied_urls(),
        ttl_ms: ETCD_TTL_MS,
        request_timeout_ms: ETCD_TIMEOUT_MS,
    };
    let (acquire_bound, release_bound) = (
        etcd_acquire_bound(WAIT_MS, n, ETCD_TIMEOUT_MS) + SLACK_MS,
        etcd_release_bound(n, ETCD_TIMEOUT_MS) + SLACK_MS,
    );
    let bound_text = format!(
        "acquire wait {WAIT_MS} + 2×({n}+1)×{ETCD_TIMEOUT_MS} + {SLACK_MS} slack = {acquire_bound} ms; release ({n}+1)×{ETCD_TIMEOUT_MS} + {SLACK_MS} = {release_bound} ms"
    );
    let proxy = nodes.proxies.first().ok_or("no proxy")?;
    let id = if limit.is_some() { "3e" } else { "3a" };
    one_node(
        mode,
        OneNode {
            id,
            backend: "etcd ×3",
            fault: "blackhole on member 0's proxy (clients use all 3)",
            spec,
            acquire_bound,
            release_bound,
            bound_text,
            proxy,
            limit,
            rw: false,
        },
    )
}

/// 3a on a read-write lock.
fn etcd_one_member_rw(mode: &Mode, nodes: &EtcdNodes) -> Result<ScenarioReport, String> {
    let n = nodes.proxies.len() as u64;
    let spec = BackendSpec::Etcd {
        endpoints: nodes.proxied_urls(),
        ttl_ms: ETCD_TTL_MS,
        request_timeout_ms: ETCD_TIMEOUT_MS,
    };
    let (acquire_bound, release_bound) = (
        etcd_acquire_bound(WAIT_MS, n, ETCD_TIMEOUT_MS) + SLACK_MS,
        etcd_release_bound(n, ETCD_TIMEOUT_MS) + SLACK_MS,
    );
    let bound_text = format!("as 3a: acquire {acquire_bound} ms, release {release_bound} ms");
    let proxy = nodes.proxies.first().ok_or("no proxy")?;
    one_node(
        mode,
        OneNode {
            id: "3i",
            backend: "etcd ×3",
            fault: "blackhole on member 0's proxy (clients use all 3)",
            spec,
            acquire_bound,
            release_bound,
            bound_text,
            proxy,
            limit: None,
            rw: true,
        },
    )
}

fn redlock_one_node(
    mode: &Mode,
    nodes: &RedisNodes,
    limit: Option<u32>,
) -> Result<ScenarioReport, String> {
    let spec = BackendSpec::Redlock {
        nodes: nodes.proxied_specs(),
        token: None,
        ttl_ms: REDLOCK_TTL_MS,
        request_timeout_ms: REDLOCK_TIMEOUT_MS,
        folded: false,
    };
    let (acquire_bound, release_bound) = (
        redlock_acquire_bound(WAIT_MS, REDLOCK_TIMEOUT_MS) + SLACK_MS,
        REDLOCK_TIMEOUT_MS + SLACK_MS,
    );
    let bound_text = format!(
        "acquire wait {WAIT_MS} + 2×{REDLOCK_TIMEOUT_MS} + {SLACK_MS} slack = {acquire_bound} ms; release one round {REDLOCK_TIMEOUT_MS} + {SLACK_MS} = {release_bound} ms"
    );
    let proxy = nodes.proxies.first().ok_or("no proxy")?;
    let id = if limit.is_some() { "3f" } else { "3b" };
    let mut r = one_node(
        mode,
        OneNode {
            id,
            backend: "redlock ×5",
            fault: "blackhole on 1 of 5 nodes' proxy",
            spec,
            acquire_bound,
            release_bound,
            bound_text,
            proxy,
            limit,
            rw: false,
        },
    )?;
    // Keys the blackholed node kept (cleanups could not reach it) expire by PX.
    std::thread::sleep(Duration::from_millis(REDLOCK_TTL_MS + 500));
    let left: Vec<String> = nodes
        .lock_keys_left()
        .iter()
        .map(|k| k.map_or("?".into(), |n| n.to_string()))
        .collect();
    r.figure(
        "lock keys left per node one TTL after the run",
        left.join(" "),
    );
    Ok(r)
}

/// 3c / 3d: the holder and a probe client lose every backend at once.
struct Partitioned<'a> {
    id: &'a str,
    backend: &'a str,
    /// Endpoints through the partitioned client's own proxies.
    partitioned: BackendSpec,
    direct: BackendSpec,
    proxies: Vec<FaultProxy>,
    probe_bound: u64,
    bound_text: String,
    ttl_ms: u64,
    /// Permits of a semaphore of this many instead of the lock.
    limit: Option<u32>,
    /// A read-write lock: the holder and the probe writers, one of the
    /// two contenders a reader.
    rw: bool,
    /// An election: everyone campaigns (the holder is the leader), an
    /// observer on direct endpoints follows it.
    elect: bool,
}

fn client_partitioned(mode: &Mode, s: Partitioned) -> Result<ScenarioReport, String> {
    let fault = match (s.limit, s.rw) {
        (Some(l), _) => format!("blackhole on every proxy of the holder and of a probe client (a semaphore of {l})"),
        (None, true) => "blackhole on every proxy of the holder (a writer) and of a probe client (a read-write lock, a reader contending)".to_string(),
        (None, false) if s.elect => "an election: blackhole on every proxy of the leader and of a probe client (all campaign; an observer on direct endpoints)".to_string(),
        (None, false) => "blackhole on every proxy of the holder and of a probe client".to_string(),
    };
    let mut r = ScenarioReport::new(s.id, TITLE, s.backend, &fault);
    let fenced = FencedResource::start().map_err(|e| format!("fenced resource: {e}"))?;
    let resource = ResourceClient::new(&fenced.url());
    let history = History::new();
    let lock = format!("s3-{}", s.id);
    let limit = s.limit;
    let elect = s.elect;
    let observer = if elect {
        Some(ObserverRun::start(
            s.direct
                .client()
                .map_err(|e| format!("observer client: {e}"))?,
            &lock,
        ))
    } else {
        None
    };
    let holder = Holder::start(
        &s.partitioned,
        ContenderCfg {
            wait_ms: 5_000,
            limit,
            elect,
            ..ContenderCfg::new("holder", &lock)
        },
        &resource,
        &history,
        Duration::from_millis(200),
    )?;
    // For a semaphore: the holder's slot, which the others may take only
    // once the holder was told it lost its permit.
    let held = holder.held.clone();
    let tpl = ContenderCfg {
        wait_ms: 10_000,
        hold_ms: 200,
        writes_per_hold: 2,
        pause_ms: 100,
        limit,
        elect,
        ..ContenderCfg::new("", &lock)
    };
    let mut cfgs = contenders("c", 2, &lock, &tpl);
    cfgs[1].shared = s.rw;
    let crew = Crew::start(
        &s.direct,
        cfgs,
        &resource,
        &history,
        Duration::from_secs(60),
    );
    std::thread::sleep(Duration::from_millis(1_000));

    let t_part = now_ms();
    for p in &s.proxies {
        p.set(Fault::Blackhole);
    }
    // A fresh client behind the same partition keeps trying to acquire.
    let stop = Arc::new(AtomicBool::new(false));
    let probe = {
        let (spec, h, stop, lock) = (
            s.partitioned.clone(),
            history.clone(),
            stop.clone(),
            lock.clone(),
        );
        std::thread::spawn(move || {
            let Ok(client) = spec.client() else { return };
            let cfg = ContenderCfg {
                wait_ms: PROBE_WAIT_MS,
                limit,
                elect,
                ..ContenderCfg::new("probe", &lock)
            };
            while !stop.load(Ordering::SeqCst) {
                if let Some(l) = acquire(&client, &cfg, &h) {
                    drop(l);
                }
            }
            drop(client);
        })
    };
    let deadline = Instant::now() + Duration::from_millis(s.ttl_ms * 2 + mode.pick(6_000, 8_000));
    let granted_held = |ops: &[Op]| {
        ops.iter().any(|o| {
            o.kind == OpKind::Acquire
                && o.is_ok()
                && o.client != "holder"
                && o.end > t_part
                && o.lock == held
        })
    };
    while !(first_grant_after(&history.ops(), t_part, "holder").is_some()
        && granted_held(&history.ops()))
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(1_000));
    stop.store(true, Ordering::SeqCst);
    let _ = probe.join();
    let t_heal = now_ms();
    for p in &s.proxies {
        p.set(Fault::Pass);
    }
    crew.join();
    holder.stop();

    let ops = history.ops();
    let v = check(&ops, &fenced.log(None));
    // Everyone stopped and resigned: the observer must settle on nobody.
    let observed = observer.map(|o| check_observer(&ops, &lock, &o.finish(Duration::from_secs(5))));
    let partitioned = |c: &str| c == "probe" || c == "holder";
    let false_grants: Vec<&Op> = ops
        .iter()
        .filter(|o| {
            o.kind == OpKind::Acquire
                && o.is_ok()
                && partitioned(&o.client)
                && o.end >= t_part
                && o.end <= t_heal
        })
        .collect();
    let probes = ops
        .iter()
        .filter(|o| o.kind == OpKind::Acquire && o.client == "probe")
        .count();
    let probe_max = max_duration(&ops, OpKind::Acquire, |c| c == "probe");
    let lost = lost_at(&ops, "holder", t_part);
    let grant = ops
        .iter()
        .filter(|o| {
            o.kind == OpKind::Acquire
                && o.is_ok()
                && !partitioned(&o.client)
                && o.end > t_part
                && o.lock == held
        })
        .map(|o| o.end)
        .min_by(f64::total_cmp);
    r.check(
        "no \"acquired\" while fully partitioned",
        false_grants.is_empty(),
        format!(
            "{} grants to partitioned clients in {probes} probe attempts",
            false_grants.len()
        ),
    );
    bound_check(
        &mut r,
        "every partitioned acquire ends within its bound",
        probe_max,
        s.probe_bound,
        probes,
    );
    let (ok, detail) = match (lost, grant) {
        (Some(l), Some(g)) => (
            l < g,
            format!(
                "holder Lost at {}, next grant at {}",
                rel(l, t_part),
                rel(g, t_part)
            ),
        ),
        (None, Some(g)) => (
            false,
            format!("holder never told, next grant at {}", rel(g, t_part)),
        ),
        (Some(l), None) => (
            true,
            format!("holder Lost at {}, nobody else granted", rel(l, t_part)),
        ),
        (None, None) => (true, "holder never told, nobody else granted".into()),
    };
    r.check(
        "the partitioned holder learns Lost before anyone else is granted",
        ok,
        detail,
    );
    r.check(
        "no overlapping holds",
        v.overlaps_believed == 0,
        format!(
            "{} overlaps in {} holds",
            v.overlaps_believed, v.acquisitions
        ),
    );
    r.check(
        "0 stale writes accepted",
        v.stale_accepted == 0,
        format!(
            "{} accepted, {} stale rejected",
            v.writes_accepted, v.stale_rejected
        ),
    );
    limit_check(&mut r, limit, &v);
    if let Some(ov) = &observed {
        let tolerated = if on_webdis(&s.direct) {
            WEBDIS_OBSERVE_ERRORS
        } else {
            &[]
        };
        observer_checks(&mut r, std::iter::once(ov), tolerated);
    }
    r.figure("bounds", s.bound_text);
    r.figure(
        "holder learned Lost after",
        lost.map_or("never".into(), |l| secs(l - t_part)),
    );
    r.figure(
        "handoff (partition → next grant)",
        grant.map_or("none".into(), |g| secs(g - t_part)),
    );
    r.figure(
        "probe acquires while partitioned",
        format!("{probes}, max {}", probe_max.map_or("-".into(), secs)),
    );
    r.figure("stale writes rejected by the fence", v.stale_rejected);
    r.figure("errors", errors_text(&v));
    Ok(r)
}

/// 3c on a read-write lock.
fn etcd_client_partitioned_rw(mode: &Mode, nodes: &EtcdNodes) -> Result<ScenarioReport, String> {
    etcd_partitioned(mode, nodes, None, true, false)
}

fn etcd_client_partitioned(
    mode: &Mode,
    nodes: &EtcdNodes,
    limit: Option<u32>,
) -> Result<ScenarioReport, String> {
    etcd_partitioned(mode, nodes, limit, false, false)
}

fn etcd_partitioned(
    mode: &Mode,
    nodes: &EtcdNodes,
    limit: Option<u32>,
    rw: bool,
    elect: bool,
) -> Result<ScenarioReport, String> {
    let urls = nodes.cluster.urls();
    let proxies = urls
        .iter()
        .map(|u| addr_of(u).and_then(FaultProxy::start))
        .collect::<std::io::Result<Vec<_>>>()
        .map_err(|e| format!("proxies: {e}"))?;
    let n = proxies.len() as u64;
    let probe_bound = etcd_acquire_bound(PROBE_WAIT_MS, n, ETCD_TIMEOUT_MS) + SLACK_MS;
    let bound_text = format!("probe acquire wait {PROBE_WAIT_MS} + 2×({n}+1)×{ETCD_TIMEOUT_MS} + {SLACK_MS} slack = {probe_bound} ms; session TTL {ETCD_TTL_MS} ms");
    let partitioned = BackendSpec::Etcd {
        endpoints: proxies.iter().map(FaultProxy::url).collect(),
        ttl_ms: ETCD_TTL_MS,
        request_timeout_ms: ETCD_TIMEOUT_MS,
    };
    let direct = BackendSpec::Etcd {
        endpoints: urls,
        ttl_ms: ETCD_TTL_MS,
        request_timeout_ms: ETCD_TIMEOUT_MS,
    };
    let id = match (limit, rw) {
        (Some(_), _) => "3g",
        (None, true) => "3j",
        (None, false) if elect => "3k",
        (None, false) => "3c",
    };
    client_partitioned(
        mode,
        Partitioned {
            id,
            backend: "etcd ×3",
            partitioned,
            direct,
            proxies,
            probe_bound,
            bound_text,
            ttl_ms: ETCD_TTL_MS,
            limit,
            rw,
            elect,
        },
    )
}

fn redlock_client_partitioned(
    mode: &Mode,
    nodes: &RedisNodes,
    limit: Option<u32>,
) -> Result<ScenarioReport, String> {
    let proxies = nodes
        .webdis
        .iter()
        .map(|w| addr_of(&w.url()).and_then(FaultProxy::start))
        .collect::<std::io::Result<Vec<_>>>()
        .map_err(|e| format!("proxies: {e}"))?;
    let probe_bound = redlock_acquire_bound(PROBE_WAIT_MS, REDLOCK_TIMEOUT_MS) + SLACK_MS;
    let bound_text = format!("probe acquire wait {PROBE_WAIT_MS} + 2×{REDLOCK_TIMEOUT_MS} + {SLACK_MS} slack = {probe_bound} ms; TTL {REDLOCK_TTL_MS} ms");
    let spec = |nodes: Vec<String>| BackendSpec::Redlock {
        nodes,
        token: None,
        ttl_ms: REDLOCK_TTL_MS,
        request_timeout_ms: REDLOCK_TIMEOUT_MS,
        folded: false,
    };
    let partitioned = spec(
        proxies
            .iter()
            .map(|p| format!("webdis+{}", p.url()))
            .collect(),
    );
    let direct = spec(nodes.webdis_specs());
    let id = if limit.is_some() { "3h" } else { "3d" };
    client_partitioned(
        mode,
        Partitioned {
            id,
            backend: "redlock ×5",
            partitioned,
            direct,
            proxies,
            probe_bound,
            bound_text,
            ttl_ms: REDLOCK_TTL_MS,
            limit,
            rw: false,
            elect: false,
        },
    )
}

/// 3l: 3c's partition on an election of one Redis node (the first of
/// `nodes`, through webdis), with Redlock's TTL and request timeout.
fn redis_leader_partitioned(mode: &Mode, nodes: &RedisNodes) -> Result<ScenarioReport, String> {
    let webdis = nodes.webdis.first().ok_or("no node")?;
    let proxies = vec![addr_of(&webdis.url())
        .and_then(FaultProxy::start)
        .map_err(|e| format!("proxy: {e}"))?];
    // One node: an acquire's last attempt and its cleanup, one request each.
    let probe_bound = redlock_acquire_bound(PROBE_WAIT_MS, REDLOCK_TIMEOUT_MS) + SLACK_MS;
    let bound_text = format!("probe acquire wait {PROBE_WAIT_MS} + 2×{REDLOCK_TIMEOUT_MS} + {SLACK_MS} slack = {probe_bound} ms; TTL {REDLOCK_TTL_MS} ms");
    let spec = |node: String| BackendSpec::Redis {
        node,
        token: None,
        ttl_ms: REDLOCK_TTL_MS,
        request_timeout_ms: REDLOCK_TIMEOUT_MS,
    };
    let partitioned = spec(format!("webdis+{}", proxies[0].url()));
    let direct = spec(format!("webdis+{}", webdis.url()));
    client_partitioned(
        mode,
        Partitioned {
            id: "3l",
            backend: "redis (webdis)",
            partitioned,
            direct,
            proxies,
            probe_bound,
            bound_text,
            ttl_ms: REDLOCK_TTL_MS,
            limit: None,
            rw: false,
            elect: true,
        },
    )
}
