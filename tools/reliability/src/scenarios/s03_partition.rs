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
//! - 3m etcd / 3n one Redis node / 3o Redlock: 3c on a lock set of
//!   [`SET_NAMES`] names: the partitioned holder took the set with
//!   `acquire_all` and keeps writing to every name's resource under that
//!   name's own token; the probe and both contenders (one in the reverse
//!   order) take the same set. The holder learns Lost on every name before
//!   anyone else is granted it, a contender then takes the whole set, the
//!   holder's writes after its successor's are refused on every name, and
//!   no partial set shows (see [`set_checks`]). These three are in the
//!   scenario's short run.
//! - Over TCP (the Redis protocol on the native driver's stream, each
//!   redis-server behind a fault proxy; see [`tcp_variants`]): 3p is 3n on
//!   one node, 3q is 3o on Redlock over five (both in the short run), 3r is
//!   3b (one of five nodes blackholed under contention: commands past their
//!   deadline close the stream, so the half-open connection is noticed);
//!   3s cuts that node instead (connections closed, reconnects refused),
//!   3t delays every chunk to and from it past the request timeout.
//! - 3u: 3c on a standalone ZooKeeper (the holder and the probe each
//!   behind a fault proxy; the TTL is the session timeout): in the short run.
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
use crate::checker::{check, check_observer, held_through_failed_acquire};
use crate::history::{now_ms, History, Op, OpKind, Outcome};
use crate::infra::addr_of;
use crate::infra::{contenders, redis_url, tcp_proxy, Crew, EtcdNodes, RedisNodes};
use crate::report::ScenarioReport;
use crate::resource::ResourceClient;
use crate::workload::{acquire, acquire_set, ContenderCfg, ObserverRun};

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
/// The names of the lock set of 3m–3o.
const SET_NAMES: usize = 3;
/// The variants of the short run (`--short`): the partitioned holder of a
/// lock set, on etcd, one Redis node and Redlock (webdis, then TCP); and
/// ZooKeeper's partitioned holder (3u).
const IN_SHORT: &[&str] = &["3m", "3n", "3o", "3p", "3q", "3u"];

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
    // Whether variant `id` runs: chosen by `--variants` (or every one), and
    // in the short run only the short run's.
    let runs = |id: &str| super::wants(id) && (!mode.short || IN_SHORT.contains(&id));
    // `None` for a variant left out.
    let timed = |id: &str, backend: &str, f: &mut dyn FnMut() -> Result<ScenarioReport, String>| {
        if !runs(id) {
            return None;
        }
        let started = Instant::now();
        let mut r = f().unwrap_or_else(|e| ScenarioReport::failed_to_run(id, TITLE, backend, &e));
        r.duration = started.elapsed();
        Some(r)
    };
    const ETCD_IDS: [&str; 8] = ["3a", "3c", "3e", "3g", "3i", "3j", "3k", "3m"];
    const REDIS_IDS: [&str; 7] = ["3b", "3d", "3f", "3h", "3l", "3n", "3o"];
    // The clusters only for variants that run.
    let etcd = ETCD_IDS
        .iter()
        .any(|id| runs(id))
        .then(|| EtcdNodes::start(3, EtcdOptions::default()));
    match etcd {
        None => {}
        Some(Ok(nodes)) => {
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
                etcd_partitioned(mode, &nodes, None, false, true, 0)
            }));
            out.extend(timed("3m", "etcd", &mut || {
                etcd_partitioned(mode, &nodes, None, false, false, SET_NAMES)
            }));
        }
        Some(Err(e)) => {
            for id in ETCD_IDS.into_iter().filter(|id| runs(id)) {
                out.push(ScenarioReport::failed_to_run(
                    id,
                    TITLE,
                    "etcd",
                    &format!("etcd cluster: {e}"),
                ));
            }
        }
    }
    tcp_variants(mode, &mut out, &timed);
    // Not in the etcd-only run (another etcd version's).
    if !mode.etcd_only {
        out.extend(timed("3u", "zookeeper", &mut || {
            zookeeper_partitioned(mode)
        }));
    }
    let redis =
        (mode.redis() && REDIS_IDS.iter().any(|id| runs(id))).then(|| RedisNodes::start(5, false));
    match redis {
        None => {}
        Some(Ok(nodes)) => {
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
                redis_partitioned(mode, &nodes, true, 0)
            }));
            out.extend(timed("3n", "redis (webdis)", &mut || {
                redis_partitioned(mode, &nodes, false, SET_NAMES)
            }));
            out.extend(timed("3o", "redlock ×5", &mut || {
                redlock_partitioned(mode, &nodes, None, SET_NAMES)
            }));
        }
        Some(Err(e)) => {
            for id in REDIS_IDS.into_iter().filter(|id| runs(id)) {
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

/// How `run` measures a variant: its id, its backend (named if it fails to
/// run) and the work; `None` for a variant left out.
type Timed<'a> = dyn Fn(&str, &str, &mut dyn FnMut() -> Result<ScenarioReport, String>) -> Option<ScenarioReport>
    + 'a;

/// 3p (3n), 3q (3o) and 3r (3b) over TCP, and 3b's node cut (3s) or slowed
/// past the request timeout (3t): five redis-servers reached with the
/// Redis protocol, each behind a fault proxy of its own (the partitioned
/// clients get their own proxies as over webdis).
fn tcp_variants(mode: &Mode, out: &mut Vec<ScenarioReport>, timed: &Timed) {
    const TCP_IDS: [&str; 5] = ["3p", "3q", "3r", "3s", "3t"];
    let runs = |id: &str| super::wants(id) && (!mode.short || IN_SHORT.contains(&id));
    if !mode.redis() || !TCP_IDS.iter().any(|id| runs(id)) {
        return;
    }
    match RedisNodes::start_tcp(5, false) {
        Ok(nodes) => {
            out.extend(timed("3p", "redis (tcp)", &mut || {
                redis_partitioned(mode, &nodes, false, SET_NAMES)
            }));
            out.extend(timed("3q", "redlock (5 × tcp)", &mut || {
                redlock_partitioned(mode, &nodes, None, SET_NAMES)
            }));
            out.extend(timed("3r", "redlock (5 × tcp)", &mut || {
                redlock_one_node(mode, &nodes, None)
            }));
            out.extend(timed("3s", "redlock (5 × tcp)", &mut || {
                redlock_one_node_fault(mode, &nodes, None, Fault::Drop)
            }));
            let delay = Duration::from_millis(2 * REDLOCK_TIMEOUT_MS);
            out.extend(timed("3t", "redlock (5 × tcp)", &mut || {
                redlock_one_node_fault(mode, &nodes, None, Fault::Delay(delay))
            }));
        }
        Err(e) => {
            for id in TCP_IDS.into_iter().filter(|id| runs(id)) {
                out.push(ScenarioReport::failed_to_run(
                    id,
                    TITLE,
                    "redis (tcp)",
                    &format!("redis nodes: {e}"),
                ));
            }
        }
    }
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
    /// What the proxy does during the fault (a blackhole but over TCP).
    inject: Fault,
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
    s.proxy.set(s.inject);
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
            inject: Fault::Blackhole,
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
            inject: Fault::Blackhole,
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
    redlock_one_node_fault(mode, nodes, limit, Fault::Blackhole)
}

/// What a fault on one node's proxy does, as the report says it.
fn describe_node_fault(inject: Fault) -> String {
    match inject {
        Fault::Blackhole => "blackhole on 1 of 5 nodes' proxy".into(),
        Fault::Drop => {
            "cut on 1 of 5 nodes' proxy (its connections closed, new ones closed at once)".into()
        }
        Fault::Delay(d) => format!(
            "delay on 1 of 5 nodes' proxy: every chunk held {} ms (> the {REDLOCK_TIMEOUT_MS} ms request timeout)",
            d.as_millis()
        ),
        other => format!("{other:?} on 1 of 5 nodes' proxy"),
    }
}

/// 3b / 3f (webdis), and over TCP 3r (blackhole), 3s (cut), 3t (delay):
/// one of five Redlock nodes faulty under contention.
fn redlock_one_node_fault(
    mode: &Mode,
    nodes: &RedisNodes,
    limit: Option<u32>,
    inject: Fault,
) -> Result<ScenarioReport, String> {
    // Nodes from `RedisNodes::start_tcp` (no webdis): their proxies are in
    // front of the redis-servers, reached over TCP.
    let tcp = nodes.webdis.is_empty();
    let spec = BackendSpec::Redlock {
        nodes: if tcp {
            nodes.proxied_tcp_specs()
        } else {
            nodes.proxied_specs()
        },
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
    let id = match (tcp, limit, inject) {
        (true, _, Fault::Drop) => "3s",
        (true, _, Fault::Delay(_)) => "3t",
        (true, _, _) => "3r",
        (false, Some(_), _) => "3f",
        (false, None, _) => "3b",
    };
    let fault = describe_node_fault(inject);
    let backend = if tcp {
        spec.label()
    } else {
        "redlock ×5".to_string()
    };
    let mut r = one_node(
        mode,
        OneNode {
            id,
            backend: &backend,
            fault: &fault,
            spec,
            acquire_bound,
            release_bound,
            bound_text,
            proxy,
            inject,
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
    /// A lock set of this many names (`acquire_all`; 0 or 1: one lock): the
    /// holder, the probe and both contenders take the same set, the second
    /// contender in the reverse order.
    set: usize,
}

fn client_partitioned(mode: &Mode, s: Partitioned) -> Result<ScenarioReport, String> {
    let fault = match (s.limit, s.rw) {
        (Some(l), _) => format!("blackhole on every proxy of the holder and of a probe client (a semaphore of {l})"),
        (None, true) => "blackhole on every proxy of the holder (a writer) and of a probe client (a read-write lock, a reader contending)".to_string(),
        (None, false) if s.elect => "an election: blackhole on every proxy of the leader and of a probe client (all campaign; an observer on direct endpoints)".to_string(),
        (None, false) if s.set > 1 => format!("a set of {} names (acquire_all): blackhole on every proxy of its holder and of a probe client (2 contenders on direct endpoints take the same set, one in the reverse order)", s.set),
        (None, false) => "blackhole on every proxy of the holder and of a probe client".to_string(),
    };
    let mut r = ScenarioReport::new(s.id, TITLE, s.backend, &fault);
    let fenced = FencedResource::start().map_err(|e| format!("fenced resource: {e}"))?;
    let resource = ResourceClient::new(&fenced.url());
    let history = History::new();
    let lock = format!("s3-{}", s.id);
    let limit = s.limit;
    let elect = s.elect;
    // A lock set: `<lock>-a`, `<lock>-b`, ...; otherwise the one name.
    let names: Vec<String> = if s.set > 1 {
        (0..s.set)
            .map(|i| format!("{lock}-{}", char::from(b'a' + i as u8)))
            .collect()
    } else {
        vec![lock.clone()]
    };
    let multi = names.len() > 1;
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
            also: names[1..].to_vec(),
            ..ContenderCfg::new("holder", &names[0])
        },
        &resource,
        &history,
        Duration::from_millis(200),
    )?;
    // For a semaphore: the holder's slot, which the others may take only
    // once the holder was told it lost its permit.
    let held = holder.held.clone();
    // Every name it holds (a set: each of its names).
    let held_all = holder.names.clone();
    let tpl = ContenderCfg {
        wait_ms: 10_000,
        hold_ms: 200,
        writes_per_hold: 2,
        pause_ms: 100,
        limit,
        elect,
        ..ContenderCfg::new("", &lock)
    };
    let mut cfgs = contenders("c", 2, &names[0], &tpl);
    cfgs[1].shared = s.rw;
    if multi {
        // The same set, the second contender in the reverse order.
        let rev: Vec<String> = names.iter().rev().cloned().collect();
        cfgs[0].also = names[1..].to_vec();
        cfgs[1].lock = rev[0].clone();
        cfgs[1].also = rev[1..].to_vec();
    }
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
        let (spec, h, stop, names) = (
            s.partitioned.clone(),
            history.clone(),
            stop.clone(),
            names.clone(),
        );
        std::thread::spawn(move || {
            let Ok(client) = spec.client() else { return };
            let cfg = ContenderCfg {
                wait_ms: PROBE_WAIT_MS,
                limit,
                elect,
                also: names[1..].to_vec(),
                ..ContenderCfg::new("probe", &names[0])
            };
            while !stop.load(Ordering::SeqCst) {
                if cfg.also.is_empty() {
                    drop(acquire(&client, &cfg, &h));
                } else {
                    drop(acquire_set(&client, &cfg, &h));
                }
            }
            drop(client);
        })
    };
    let deadline = Instant::now() + Duration::from_millis(s.ttl_ms * 2 + mode.pick(6_000, 8_000));
    // Someone else was granted what the holder held (a set: every name).
    let granted_held = |ops: &[Op]| {
        held_all.iter().all(|h| {
            ops.iter().any(|o| {
                o.kind == OpKind::Acquire
                    && o.is_ok()
                    && o.client != "holder"
                    && o.end > t_part
                    && &o.lock == h
            })
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
    let set_figures = if multi {
        set_checks(&mut r, &ops, &held_all, t_part)
    } else {
        r.check(
            "the partitioned holder learns Lost before anyone else is granted",
            ok,
            detail,
        );
        Vec::new()
    };
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
    if multi {
        for (k, v) in &set_figures {
            r.figure(k, v);
        }
    } else {
        r.figure(
            "holder learned Lost after",
            lost.map_or("never".into(), |l| secs(l - t_part)),
        );
        r.figure(
            "handoff (partition → next grant)",
            grant.map_or("none".into(), |g| secs(g - t_part)),
        );
    }
    r.figure(
        "probe acquires while partitioned",
        format!("{probes}, max {}", probe_max.map_or("-".into(), secs)),
    );
    r.figure("stale writes rejected by the fence", v.stale_rejected);
    r.figure("errors", errors_text(&v));
    Ok(r)
}

/// The last part of a set's name (`s3-3m-b` → `b`), for figures.
fn short_name(name: &str) -> &str {
    name.rsplit('-').next().unwrap_or(name)
}

/// Each client's writes to the names of a set, in rounds: a holder of a
/// set writes once to every name per round, in one thread, so its writes
/// to these names sorted by start fall into rounds of `names.len()`.
fn write_rounds<'a>(ops: &'a [Op], names: &[String]) -> Vec<(&'a str, Vec<&'a Op>)> {
    let mut by_client: std::collections::BTreeMap<&str, Vec<&Op>> = Default::default();
    for o in ops
        .iter()
        .filter(|o| o.kind == OpKind::Write && names.contains(&o.lock))
    {
        by_client.entry(o.client.as_str()).or_default().push(o);
    }
    let mut rounds = Vec::new();
    for (client, mut writes) in by_client {
        writes.sort_by(|a, b| a.start.total_cmp(&b.start));
        for chunk in writes.chunks(names.len()) {
            rounds.push((client, chunk.to_vec()));
        }
    }
    rounds
}

/// 3m–3o: the checks of a partitioned holder of a lock set (`names`, in
/// the holder's order), beyond 3c's; returns the figures to report.
///
/// - the holder learns Lost on every name, each before anyone else is
///   granted that name;
/// - another contender takes the whole set (one `acquire_all` grant of
///   every name) after the holder learned Lost on all of them;
/// - the holder's writes after its successor's first write to a name are
///   refused, on every name;
/// - no partial set: every `acquire_all` grant recorded holds every name,
///   no name is held across a failed `acquire_all`
///   ([`held_through_failed_acquire`]), no write round of a contender is
///   refused on any name, and a round of the holder is accepted on some
///   names and refused on others only while a contender is writing its own
///   round (the fence of each name turns over as the new holder's writes
///   reach it, one name after the other).
fn set_checks(
    r: &mut ScenarioReport,
    ops: &[Op],
    names: &[String],
    t_part: f64,
) -> Vec<(String, String)> {
    let partitioned = |c: &str| c == "probe" || c == "holder";
    let stale = |o: &Op| matches!(&o.outcome, Outcome::Fail(c) if c == "STALE");
    let mut figures = Vec::new();

    // Lost on every name, before that name's next grant.
    let mut lost_ok = true;
    let mut lost_all: Option<f64> = Some(t_part);
    let mut lost_text = Vec::new();
    let mut lost_figure = Vec::new();
    for n in names {
        let lost = ops
            .iter()
            .filter(|o| {
                o.kind == OpKind::Lost && o.client == "holder" && &o.lock == n && o.start >= t_part
            })
            .map(|o| o.start)
            .min_by(f64::total_cmp);
        let grant = ops
            .iter()
            .filter(|o| {
                o.kind == OpKind::Acquire
                    && o.is_ok()
                    && !partitioned(&o.client)
                    && o.end > t_part
                    && &o.lock == n
            })
            .map(|o| o.end)
            .min_by(f64::total_cmp);
        lost_ok &= match (lost, grant) {
            (Some(l), Some(g)) => l < g,
            (Some(_), None) => true,
            (None, _) => false,
        };
        lost_all = match (lost_all, lost) {
            (Some(a), Some(l)) => Some(a.max(l)),
            _ => None,
        };
        lost_text.push(format!(
            "{}: Lost {}, next grant {}",
            short_name(n),
            lost.map_or("never".into(), |l| rel(l, t_part)),
            grant.map_or("none".into(), |g| rel(g, t_part))
        ));
        lost_figure.push(format!(
            "{} {}",
            short_name(n),
            lost.map_or("never".into(), |l| secs(l - t_part))
        ));
    }
    r.check(
        &format!(
            "the partitioned holder learns Lost on each of its {} names before anyone else is granted that name",
            names.len()
        ),
        lost_ok,
        lost_text.join("; "),
    );

    // Grants of a set, one per (client, acquire_all): the per-name records
    // of one grant share their times.
    let mut grants: std::collections::BTreeMap<(String, u64, u64), Vec<&str>> = Default::default();
    for o in ops
        .iter()
        .filter(|o| o.kind == OpKind::Acquire && o.is_ok() && names.contains(&o.lock))
    {
        grants
            .entry((o.client.clone(), o.start.to_bits(), o.end.to_bits()))
            .or_default()
            .push(o.lock.as_str());
    }
    let whole = |locks: &Vec<&str>| names.iter().all(|n| locks.contains(&n.as_str()));
    let partial_grants = grants
        .iter()
        .filter(|(_, locks)| !(whole(locks) && locks.len() == names.len()))
        .count();
    let taken: Vec<(f64, &str)> = grants
        .iter()
        .filter(|((c, _, end), locks)| {
            !partitioned(c) && f64::from_bits(*end) > t_part && whole(locks)
        })
        .map(|((c, _, end), _)| (f64::from_bits(*end), c.as_str()))
        .collect();
    let first_set = taken.iter().copied().min_by(|a, b| a.0.total_cmp(&b.0));
    r.check(
        "another contender takes the whole set (one acquire_all) after the holder learned Lost on every name",
        match (first_set, lost_all) {
            (Some((t, _)), Some(l)) => l < t,
            _ => false,
        },
        format!(
            "{}; holder Lost on all by {}",
            first_set.map_or("nobody took the set".into(), |(t, c)| format!(
                "{c} took it at {}",
                rel(t, t_part)
            )),
            lost_all.map_or("never".into(), |l| rel(l, t_part))
        ),
    );

    // The holder's writes after the cut, per name; those after its
    // successor's first accepted write to that name must all be refused.
    let mut fenced_ok = true;
    let mut after_cut = Vec::new();
    let mut after_successor = Vec::new();
    for n in names {
        let mine: Vec<&Op> = ops
            .iter()
            .filter(|o| {
                o.kind == OpKind::Write && o.client == "holder" && &o.lock == n && o.start >= t_part
            })
            .collect();
        let successor_wrote = ops
            .iter()
            .filter(|o| {
                o.kind == OpKind::Write
                    && o.is_ok()
                    && !partitioned(&o.client)
                    && &o.lock == n
                    && o.start >= t_part
            })
            .map(|o| o.end)
            .min_by(f64::total_cmp);
        let late: Vec<&&Op> = match successor_wrote {
            Some(w) => mine.iter().filter(|o| o.start > w).collect(),
            None => Vec::new(),
        };
        let refused = late.iter().filter(|o| stale(o)).count();
        fenced_ok &= !late.is_empty() && refused == late.len();
        after_cut.push(format!(
            "{} {} / {}",
            short_name(n),
            mine.iter().filter(|o| o.is_ok()).count(),
            mine.iter().filter(|o| stale(o)).count()
        ));
        after_successor.push(format!("{}: {refused} of {}", short_name(n), late.len()));
    }
    r.check(
        "the holder's writes after its successor's first write to a name are refused, on every name",
        fenced_ok,
        after_successor.join(", "),
    );

    // No partial set.
    let rounds = write_rounds(ops, names);
    let span = |w: &[&Op]| {
        (
            w.iter().map(|o| o.start).fold(f64::MAX, f64::min),
            w.iter().map(|o| o.end).fold(f64::MIN, f64::max),
        )
    };
    let contender_rounds: Vec<(f64, f64)> = rounds
        .iter()
        .filter(|(c, _)| !partitioned(c))
        .map(|(_, w)| span(w))
        .collect();
    let refused_contender_rounds = rounds
        .iter()
        .filter(|(c, w)| !partitioned(c) && w.iter().any(|o| stale(o)))
        .count();
    let mixed = |w: &[&Op]| w.iter().any(|o| o.is_ok()) && w.iter().any(|o| stale(o));
    let holder_mixed: Vec<(f64, f64)> = rounds
        .iter()
        .filter(|(c, w)| *c == "holder" && mixed(w))
        .map(|(_, w)| span(w))
        .collect();
    let unexplained = holder_mixed
        .iter()
        .filter(|(s, e)| !contender_rounds.iter().any(|(cs, ce)| cs < e && s < ce))
        .count();
    let held_through = held_through_failed_acquire(ops);
    r.check(
        "no partial set: every acquire_all grant holds every name, none held across a failed acquire_all, no contender's write round refused on any name, the holder's rounds split only while a contender was writing",
        partial_grants == 0 && held_through == 0 && refused_contender_rounds == 0 && unexplained == 0,
        format!(
            "{} grants, {partial_grants} partial; {held_through} held across a failed acquire_all; {refused_contender_rounds} of {} contender rounds refused somewhere; holder rounds split {} ({unexplained} outside a contender's round)",
            grants.len(),
            contender_rounds.len(),
            holder_mixed.len()
        ),
    );

    figures.push((
        "holder learned Lost after (per name)".into(),
        lost_figure.join(", "),
    ));
    figures.push((
        "holder learned Lost after (every name)".into(),
        lost_all.map_or("never".into(), |l| secs(l - t_part)),
    ));
    figures.push((
        "whole set taken by another contender after".into(),
        first_set.map_or("none".into(), |(t, _)| secs(t - t_part)),
    ));
    figures.push((
        "sets taken by the contenders after the cut".into(),
        taken.len().to_string(),
    ));
    figures.push((
        "holder's writes after the cut accepted / refused (per name)".into(),
        after_cut.join(", "),
    ));
    figures.push((
        "holder's write rounds split (accepted on some names, refused on others)".into(),
        holder_mixed.len().to_string(),
    ));
    figures
}

/// 3c on a read-write lock.
fn etcd_client_partitioned_rw(mode: &Mode, nodes: &EtcdNodes) -> Result<ScenarioReport, String> {
    etcd_partitioned(mode, nodes, None, true, false, 0)
}

fn etcd_client_partitioned(
    mode: &Mode,
    nodes: &EtcdNodes,
    limit: Option<u32>,
) -> Result<ScenarioReport, String> {
    etcd_partitioned(mode, nodes, limit, false, false, 0)
}

fn etcd_partitioned(
    mode: &Mode,
    nodes: &EtcdNodes,
    limit: Option<u32>,
    rw: bool,
    elect: bool,
    set: usize,
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
        (None, false) if set > 1 => "3m",
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
            set,
        },
    )
}

/// ZooKeeper's session timeout (the lock's TTL) and request timeout in 3u.
const ZK_SESSION_MS: u64 = 3_000;
const ZK_TIMEOUT_MS: u64 = 1_000;

/// 3u: 3c on a standalone ZooKeeper, the holder and the probe behind a
/// fault proxy of their own: the holder's client stops hearing the server,
/// drops the stream after 2/3 of the session timeout, and reports Lost at
/// its session bound (T after its last answered request); the server
/// expires the session (T after the last packet it received, so later)
/// and deletes the holder's node, and the next in line is granted.
fn zookeeper_partitioned(mode: &Mode) -> Result<ScenarioReport, String> {
    let zk = crate::infra::zookeeper_server().map_err(|e| format!("zookeeper: {e}"))?;
    let proxy = FaultProxy::start(zk.addr().parse().map_err(|e| format!("{e}"))?)
        .map_err(|e| format!("proxy: {e}"))?;
    let spec = |connect: String| BackendSpec::ZooKeeper {
        connect,
        ttl_ms: ZK_SESSION_MS,
        request_timeout_ms: ZK_TIMEOUT_MS,
    };
    // The probe's acquire ends at its wait; its create, if it went out,
    // is abandoned with the session.
    let probe_bound = PROBE_WAIT_MS + ZK_TIMEOUT_MS + SLACK_MS;
    let bound_text = format!("probe acquire wait {PROBE_WAIT_MS} + {ZK_TIMEOUT_MS} + {SLACK_MS} slack = {probe_bound} ms; session timeout {ZK_SESSION_MS} ms");
    let proxied = proxy.addr().to_string();
    let r = client_partitioned(
        mode,
        Partitioned {
            id: "3u",
            backend: "zookeeper",
            partitioned: spec(proxied),
            direct: spec(zk.connect_string()),
            proxies: vec![proxy],
            probe_bound,
            bound_text,
            ttl_ms: ZK_SESSION_MS,
            limit: None,
            rw: false,
            elect: false,
            set: 0,
        },
    );
    drop(zk);
    r
}

fn redlock_client_partitioned(
    mode: &Mode,
    nodes: &RedisNodes,
    limit: Option<u32>,
) -> Result<ScenarioReport, String> {
    redlock_partitioned(mode, nodes, limit, 0)
}

/// 3d (3h with a semaphore, 3o with a lock set of `set` names).
fn redlock_partitioned(
    mode: &Mode,
    nodes: &RedisNodes,
    limit: Option<u32>,
    set: usize,
) -> Result<ScenarioReport, String> {
    let routes = (0..nodes.servers.len())
        .map(|i| node_routes(nodes, i))
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
    let partitioned = spec(routes.iter().map(|r| r.proxied.clone()).collect());
    let direct = spec(routes.iter().map(|r| r.direct.clone()).collect());
    let proxies = routes.into_iter().map(|r| r.proxy).collect();
    let tcp = direct.on_tcp();
    let id = match (limit, set > 1) {
        (_, true) if tcp => "3q",
        (Some(_), _) => "3h",
        (None, true) => "3o",
        (None, false) => "3d",
    };
    let backend = if tcp {
        direct.label()
    } else {
        "redlock ×5".to_string()
    };
    client_partitioned(
        mode,
        Partitioned {
            id,
            backend: &backend,
            partitioned,
            direct,
            proxies,
            probe_bound,
            bound_text,
            ttl_ms: REDLOCK_TTL_MS,
            limit,
            rw: false,
            elect: false,
            set,
        },
    )
}

/// 3l: 3c's partition on an election of one Redis node (the first of
/// `nodes`, through webdis), with Redlock's TTL and request timeout; 3n:
/// the same on a lock set of `set` names instead of an election; 3p: 3n
/// over TCP (`nodes` from `RedisNodes::start_tcp`).
fn redis_partitioned(
    mode: &Mode,
    nodes: &RedisNodes,
    elect: bool,
    set: usize,
) -> Result<ScenarioReport, String> {
    if nodes.servers.is_empty() {
        return Err("no node".into());
    }
    let route = node_routes(nodes, 0).map_err(|e| format!("proxy: {e}"))?;
    // One node: an acquire's last attempt and its cleanup, one request each.
    let probe_bound = redlock_acquire_bound(PROBE_WAIT_MS, REDLOCK_TIMEOUT_MS) + SLACK_MS;
    let bound_text = format!("probe acquire wait {PROBE_WAIT_MS} + 2×{REDLOCK_TIMEOUT_MS} + {SLACK_MS} slack = {probe_bound} ms; TTL {REDLOCK_TTL_MS} ms");
    let spec = |node: String| BackendSpec::Redis {
        node,
        token: None,
        ttl_ms: REDLOCK_TTL_MS,
        request_timeout_ms: REDLOCK_TIMEOUT_MS,
    };
    let partitioned = spec(route.proxied);
    let direct = spec(route.direct);
    let tcp = direct.on_tcp();
    let backend = direct.label();
    client_partitioned(
        mode,
        Partitioned {
            id: match (tcp, elect) {
                (true, _) => "3p",
                (false, true) => "3l",
                (false, false) => "3n",
            },
            backend: &backend,
            partitioned,
            direct,
            proxies: vec![route.proxy],
            probe_bound,
            bound_text,
            ttl_ms: REDLOCK_TTL_MS,
            limit: None,
            rw: false,
            elect,
            set,
        },
    )
}

/// How a client reaches one Redis node: straight, or through a fault proxy
/// of the partitioned client's own.
struct NodeRoute {
    direct: String,
    proxy: FaultProxy,
    proxied: String,
}

/// Node `i` of `nodes`: through its webdis (`webdis+http://…`), or, for
/// nodes from [`RedisNodes::start_tcp`] (no webdis), the Redis protocol
/// over TCP (`redis://…`), the proxy then in front of the redis-server.
fn node_routes(nodes: &RedisNodes, i: usize) -> std::io::Result<NodeRoute> {
    match nodes.webdis.get(i) {
        Some(w) => {
            let proxy = addr_of(&w.url()).and_then(FaultProxy::start)?;
            Ok(NodeRoute {
                direct: format!("webdis+{}", w.url()),
                proxied: format!("webdis+{}", proxy.url()),
                proxy,
            })
        }
        None => {
            let server = nodes
                .servers
                .get(i)
                .ok_or_else(|| std::io::Error::other("no node"))?;
            let proxy = tcp_proxy(server)?;
            Ok(NodeRoute {
                direct: server.url(),
                proxied: redis_url(&proxy),
                proxy,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(client: &str, lock: &str, kind: OpKind, at: f64, outcome: &str, token: u64) -> Op {
        Op {
            client: client.into(),
            lock: lock.into(),
            kind,
            start: at,
            end: at + 1.0,
            outcome: if outcome == "ok" {
                Outcome::Ok
            } else {
                Outcome::Fail(outcome.into())
            },
            token: Some(token),
            write_id: None,
        }
    }

    /// A holder of {a, b} partitioned at 1000, Lost at 2500/2600, c0 takes
    /// the set at 3000 and writes; the holder's round at 3200 is refused.
    fn clean() -> Vec<Op> {
        use OpKind::*;
        let mut ops = Vec::new();
        for (n, t) in [("s-a", 1), ("s-b", 1)] {
            ops.push(op("holder", n, Acquire, 0.0, "ok", t));
        }
        for at in [100.0, 1200.0] {
            ops.push(op("holder", "s-a", Write, at, "ok", 1));
            ops.push(op("holder", "s-b", Write, at + 2.0, "ok", 1));
        }
        ops.push(op("holder", "s-a", Lost, 2500.0, "expired", 1));
        ops.push(op("holder", "s-b", Lost, 2600.0, "expired", 1));
        ops.push(op("c0", "s-a", Acquire, 3000.0, "ok", 2));
        ops.push(op("c0", "s-b", Acquire, 3000.0, "ok", 2));
        ops.push(op("c0", "s-a", Write, 3010.0, "ok", 2));
        ops.push(op("c0", "s-b", Write, 3012.0, "ok", 2));
        ops.push(op("holder", "s-a", Write, 3200.0, "STALE", 1));
        ops.push(op("holder", "s-b", Write, 3202.0, "STALE", 1));
        ops
    }

    fn verdicts(ops: &[Op]) -> Vec<(String, bool)> {
        let mut r = ScenarioReport::new("3x", TITLE, "test", "test");
        let names = vec!["s-a".to_string(), "s-b".to_string()];
        set_checks(&mut r, ops, &names, 1000.0);
        r.checks.into_iter().map(|c| (c.what, c.pass)).collect()
    }

    fn partial_ok(ops: &[Op]) -> bool {
        verdicts(ops)
            .into_iter()
            .find(|(w, _)| w.starts_with("no partial set"))
            .expect("the partial-set check")
            .1
    }

    #[test]
    fn a_clean_handoff_of_the_set_passes_every_check() {
        assert!(verdicts(&clean()).iter().all(|(_, pass)| *pass));
    }

    #[test]
    fn a_partial_set_is_seen() {
        // The holder's round split with no contender writing at the time.
        let mut ops = clean();
        ops.push(op("holder", "s-a", OpKind::Write, 5000.0, "STALE", 1));
        ops.push(op("holder", "s-b", OpKind::Write, 5002.0, "ok", 1));
        assert!(!partial_ok(&ops));
        // The same split while c0 writes its own round is the fence turning
        // over name by name.
        let mut ops = clean();
        ops.retain(|o| !(o.client == "c0" && o.kind == OpKind::Write));
        ops.push(op("c0", "s-a", OpKind::Write, 3010.0, "ok", 2));
        ops.push(op("holder", "s-a", OpKind::Write, 3011.5, "STALE", 1));
        ops.push(op("holder", "s-b", OpKind::Write, 3012.0, "ok", 1));
        ops.push(op("c0", "s-b", OpKind::Write, 3014.0, "ok", 2));
        assert!(partial_ok(&ops));
        // A grant of one name of the set.
        let mut ops = clean();
        ops.push(op("c1", "s-a", OpKind::Acquire, 4000.0, "ok", 3));
        assert!(!partial_ok(&ops));
        // A contender's write refused on one name.
        let mut ops = clean();
        ops.push(op("c0", "s-a", OpKind::Write, 3050.0, "ok", 2));
        ops.push(op("c0", "s-b", OpKind::Write, 3052.0, "STALE", 2));
        assert!(!partial_ok(&ops));
    }

    #[test]
    fn the_holder_must_learn_lost_on_every_name() {
        let mut ops = clean();
        ops.retain(|o| !(o.kind == OpKind::Lost && o.lock == "s-b"));
        let v = verdicts(&ops);
        assert!(!v[0].1, "{v:?}");
        assert!(!v[1].1, "{v:?}");
    }
}
