//! Scenario 1: the holder is paused (SIGSTOP) past its TTL while others
//! contend, then resumed (SIGCONT) — Kleppmann's GC-pause case. The holder is
//! a worker process that writes "blindly" (without checking whether it still
//! holds the lock, as a process that was frozen would): its write after the
//! pause must be refused by the fenced resource, and its client must tell it
//! the lock was lost.
//!
//! 1d/1e run the same with a semaphore of [`PERMITS`]: the paused holder's
//! slot is taken over by another client, whose writes to that slot's
//! resource must fence the holder's late ones. 1f/1g: a read-write lock
//! whose paused holder is a writer, while a writer and a reader contend.
//!
//! 1h (etcd) / 1i (Redis): the paused holder is the leader of an election
//! (the others campaign too): its blind writes under its leadership token
//! after the pause must be fenced, another contender must take over, and an
//! observer (`Client::observe`, its own client) must end on what
//! `Client::leader` says once everyone stopped (nobody), having paired every
//! reported value with its own leader's token. 1j (etcd) / 1k (Redis): the
//! paused holder holds a set of two names (`acquire_all`); the others take
//! the same set, one of them in the other order: its late writes to both
//! names must be fenced.
//!
//! 1n / 1o: 1b's lock on one redis-server / Redlock over three, reached
//! over TCP (the Redis protocol on the native driver's stream, no HTTP front).
//!
//! 1p: 1b's lock on a standalone ZooKeeper, the TTL its session timeout.
//!
//! 1l: the lock service (Durable Object in workerd, the built Worker run by
//! `tools/devtools/workerd-host.mjs`), its clients native, through the
//! Worker's front `POST /lock/v1/<op>` with a bearer token.

use std::time::{Duration, Instant};

use edgelock_devtools::{EtcdServer, FencedResource};

use super::Mode;
use crate::backend::BackendSpec;
use crate::checker::{check, check_observer, held_through_failed_acquire, ObserverVerdict};
use crate::history::{now_ms, History, OpKind, Outcome};
use crate::infra::{
    contenders, etcd_keys, zk_nodes_left, zookeeper_server, Crew, RedisNodes, WorkerdHost,
    WORKER_TOKEN,
};
use crate::report::ScenarioReport;
use crate::resource::ResourceClient;
use crate::worker::{WorkerProcess, WorkerSpec};
use crate::workload::{ContenderCfg, ObserverRun};

const TTL_MS: u64 = 2_000;
/// What the clients take: the lock, permits, or a read-write lock (the
/// paused holder a writer; of the others one writer and one reader).
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Lock,
    Permits(u32),
    ReadWrite,
    /// The leader of an election (the others campaign).
    Leader,
    /// A set of two names taken with `acquire_all`.
    Multi,
}

/// The limit of the semaphore variants (1d, 1e).
const PERMITS: u32 = 2;
const LOCK: &str = "paused-holder";

pub fn run(mode: &Mode) -> Vec<ScenarioReport> {
    let trials = mode.pick(1, 3);
    let mut out = Vec::new();
    match EtcdServer::start() {
        Ok(etcd) => {
            let spec = BackendSpec::Etcd {
                endpoints: vec![etcd.url()],
                ttl_ms: TTL_MS,
                request_timeout_ms: 1_000,
            };
            let url = etcd.url();
            let keys = move || {
                etcd_keys(&url, "edgelock/")
                    .map(|k| k.len())
                    .unwrap_or(usize::MAX)
            };
            for (id, kind) in [
                ("1a", Kind::Lock),
                ("1d", Kind::Permits(PERMITS)),
                ("1f", Kind::ReadWrite),
                ("1h", Kind::Leader),
                ("1j", Kind::Multi),
            ] {
                if super::wants(id) {
                    out.push(trial_report(id, &spec, kind, trials, &keys));
                }
            }
        }
        Err(e) => out.push(ScenarioReport::failed_to_run(
            "1a",
            TITLE,
            "etcd",
            &format!("etcd: {e}"),
        )),
    }
    if !mode.redis() {
        return out;
    }
    match RedisNodes::start(1, false) {
        Ok(nodes) => {
            let spec = BackendSpec::Redis {
                node: nodes.webdis_specs()[0].clone(),
                token: None,
                ttl_ms: TTL_MS,
                request_timeout_ms: 1_000,
            };
            let keys = || {
                nodes
                    .lock_keys_left()
                    .iter()
                    .map(|k| k.unwrap_or(usize::MAX))
                    .sum()
            };
            for (id, kind) in [
                ("1b", Kind::Lock),
                ("1e", Kind::Permits(PERMITS)),
                ("1g", Kind::ReadWrite),
                ("1i", Kind::Leader),
                ("1k", Kind::Multi),
            ] {
                if super::wants(id) {
                    out.push(trial_report(id, &spec, kind, trials, &keys));
                }
            }
        }
        Err(e) => out.push(ScenarioReport::failed_to_run(
            "1b",
            TITLE,
            "redis (webdis)",
            &format!("redis: {e}"),
        )),
    }
    tcp_variants(&mut out, trials);
    if super::wants("1p") {
        out.push(zookeeper_variant("1p", trials));
    }
    if super::wants("1l") {
        // The lock service's Durable Object in workerd, reached by the
        // native client through the Worker's front.
        out.push(match WorkerdHost::start(None) {
            Ok(host) => {
                let spec = BackendSpec::Durable {
                    url: host.front_url(),
                    token: WORKER_TOKEN.into(),
                    ttl_ms: TTL_MS,
                    request_timeout_ms: 1_000,
                    auto_extend: true,
                };
                trial_report("1l", &spec, Kind::Lock, trials, &|| match host.held(LOCK) {
                    Some(false) => 0,
                    Some(true) => 1,
                    None => usize::MAX,
                })
            }
            Err(e) => ScenarioReport::failed_to_run(
                "1l",
                TITLE,
                "durable-object",
                &format!("workerd: {e}"),
            ),
        });
    }
    if super::wants("1m") {
        out.push(d1_stalled_report("1m", trials));
    }
    if !mode.short && super::wants("1c") {
        out.push(match RedisNodes::start(5, false) {
            Ok(nodes) => {
                let spec = BackendSpec::Redlock {
                    nodes: nodes.webdis_specs(),
                    token: None,
                    ttl_ms: TTL_MS,
                    request_timeout_ms: 1_000,
                    folded: false,
                };
                trial_report("1c", &spec, Kind::Lock, trials, &|| {
                    nodes
                        .lock_keys_left()
                        .iter()
                        .map(|k| k.unwrap_or(usize::MAX))
                        .sum()
                })
            }
            Err(e) => ScenarioReport::failed_to_run(
                "1c",
                TITLE,
                "redlock (5 × webdis)",
                &format!("redis: {e}"),
            ),
        });
    }
    out
}

/// 1n: the lock on one redis-server over TCP (the Redis protocol, no HTTP
/// front); 1o: Redlock over three of them. The paused holder's connection
/// stays open, frozen with it.
fn tcp_variants(out: &mut Vec<ScenarioReport>, trials: usize) {
    for (id, n) in [("1n", 1), ("1o", 3)] {
        if !super::wants(id) {
            continue;
        }
        let backend = if n == 1 {
            "redis (tcp)".to_string()
        } else {
            format!("redlock ({n} × tcp)")
        };
        let started = Instant::now();
        let mut r = match RedisNodes::start_tcp(n, false) {
            Ok(nodes) => {
                let spec = if n == 1 {
                    BackendSpec::redis_tcp(&nodes.tcp_specs()[0], None, TTL_MS, 1_000)
                } else {
                    BackendSpec::redlock_tcp(nodes.tcp_specs(), TTL_MS, 1_000)
                };
                trial_report(id, &spec, Kind::Lock, trials, &|| {
                    nodes.lock_keys_left_total()
                })
            }
            Err(e) => ScenarioReport::failed_to_run(id, TITLE, &backend, &format!("redis: {e}")),
        };
        // Its own servers' start-up and shutdown included: what it adds to a run.
        r.duration = started.elapsed();
        out.push(r);
    }
}

/// 1p: the lock on a standalone ZooKeeper (Curator's mutex recipe), the
/// TTL its session timeout: the server expires the paused holder's session
/// (and its ephemeral lock node), the next in line is granted, and the
/// holder's client, resumed, finds its session bound passed and reports
/// Lost. Timed with the server's start-up (a JVM).
fn zookeeper_variant(id: &str, trials: usize) -> ScenarioReport {
    let started = Instant::now();
    let mut r = match zookeeper_server() {
        Ok(zk) => {
            let spec = BackendSpec::ZooKeeper {
                connect: zk.connect_string(),
                ttl_ms: TTL_MS,
                request_timeout_ms: 1_000,
            };
            let addr = zk.addr();
            trial_report(id, &spec, Kind::Lock, trials, &|| zk_nodes_left(&addr))
        }
        Err(e) => ScenarioReport::failed_to_run(id, TITLE, "zookeeper", &format!("zookeeper: {e}")),
    };
    r.duration = started.elapsed();
    r
}

const TITLE: &str = "holder paused (SIGSTOP) past its TTL";
const TITLE_PERMITS: &str = "permit holder paused (SIGSTOP) past its TTL";
const TITLE_RW: &str = "writer of a read-write lock paused (SIGSTOP) past its TTL";
const TITLE_LEADER: &str = "leader of an election paused (SIGSTOP) past its TTL";
const TITLE_MULTI: &str = "holder of a lock set (acquire_all) paused (SIGSTOP) past its TTL";

/// What one pause trial measured.
struct Trial {
    handoff_ms: Option<f64>,
    learned_lost_ms: Option<f64>,
    holder_late_writes: usize,
    holder_late_writes_rejected: usize,
    /// Per name the holder held: (name, late writes, of which rejected).
    late_by_name: Vec<(String, usize, usize)>,
    overlaps_believed: usize,
    stale_accepted: usize,
    acked_lost: usize,
    /// Holds recorded (per name) and writes the resource accepted / refused.
    holds: usize,
    writes_accepted: usize,
    stale_rejected: usize,
    /// Names held across one of their own failed acquires (lock sets).
    held_through_failed: usize,
    /// Elections: what the observer showed.
    observer: Option<ObserverVerdict>,
}

fn trial_report(
    id: &str,
    spec: &BackendSpec,
    kind: Kind,
    trials: usize,
    keys_left: &dyn Fn() -> usize,
) -> ScenarioReport {
    // `redlock (5 × webdis)`, `redis (webdis)`, `etcd`, `durable-object`.
    let backend = spec.label();
    let (title, fault) = match kind {
        Kind::ReadWrite => (TITLE_RW, format!("a read-write lock: SIGSTOP the writer's process for TTL ({TTL_MS} ms) + until another writer wrote (a reader contends too); then SIGCONT")),
        Kind::Permits(l) => (TITLE_PERMITS, format!("a semaphore of {l}: SIGSTOP the holder's process for TTL ({TTL_MS} ms) + until another client wrote under its slot; then SIGCONT")),
        Kind::Lock => (TITLE, format!("SIGSTOP the holder's process for TTL ({TTL_MS} ms) + until another client wrote; then SIGCONT")),
        Kind::Leader => (TITLE_LEADER, format!("an election (2 others campaign, an observer follows it): SIGSTOP the leader's process for TTL ({TTL_MS} ms) + until a new leader wrote; then SIGCONT")),
        Kind::Multi => (TITLE_MULTI, format!("a set of 2 names (2 others take the same set, one in the other order): SIGSTOP the holder's process for TTL ({TTL_MS} ms) + until others wrote to both names; then SIGCONT")),
    };
    let mut r = ScenarioReport::new(id, title, &backend, &fault);
    let mut results = Vec::new();
    for t in 0..trials {
        let lock = match kind {
            Kind::Permits(_) => format!("{LOCK}-sem-{t}"),
            Kind::ReadWrite => format!("{LOCK}-rw-{t}"),
            Kind::Lock => format!("{LOCK}-{t}"),
            Kind::Leader => format!("{LOCK}-elect-{t}"),
            Kind::Multi => format!("{LOCK}-set-{t}"),
        };
        match one_trial(spec, &lock, kind) {
            Ok(tr) => results.push(tr),
            Err(e) => {
                r.check("trial ran", false, e);
                return r;
            }
        }
    }
    let sum = |f: fn(&Trial) -> usize| results.iter().map(f).sum::<usize>();
    let handoffs: Vec<f64> = results.iter().filter_map(|t| t.handoff_ms).collect();
    let learned: Vec<f64> = results.iter().filter_map(|t| t.learned_lost_ms).collect();
    let left = keys_left();
    r.figure("trials", trials);
    r.figure("handoff after pause (ms, per trial)", fmt_list(&handoffs));
    r.figure(
        "holder told Lost after SIGCONT (ms, per trial)",
        fmt_list(&learned),
    );
    r.figure(
        "holds / writes accepted / stale writes rejected",
        format!(
            "{} / {} / {}",
            sum(|t| t.holds),
            sum(|t| t.writes_accepted),
            sum(|t| t.stale_rejected)
        ),
    );
    r.figure("overlapping holds believed", sum(|t| t.overlaps_believed));
    r.figure(
        "holder's post-pause writes rejected",
        format!(
            "{} of {}",
            sum(|t| t.holder_late_writes_rejected),
            sum(|t| t.holder_late_writes)
        ),
    );
    r.check(
        "0 stale writes accepted",
        sum(|t| t.stale_accepted) == 0,
        format!("{} accepted", sum(|t| t.stale_accepted)),
    );
    r.check(
        "the paused holder's writes after the handoff are refused",
        sum(|t| t.holder_late_writes) > 0
            && sum(|t| t.holder_late_writes_rejected) == sum(|t| t.holder_late_writes),
        format!(
            "{} of {} refused",
            sum(|t| t.holder_late_writes_rejected),
            sum(|t| t.holder_late_writes)
        ),
    );
    r.check(
        "another client got the lock during the pause",
        handoffs.len() == trials,
        format!("{} of {trials} trials", handoffs.len()),
    );
    r.check(
        "the holder is told it lost the lock after SIGCONT",
        learned.len() == trials,
        format!("{} of {trials} trials", learned.len()),
    );
    r.check(
        "0 acknowledged writes lost",
        sum(|t| t.acked_lost) == 0,
        format!("{}", sum(|t| t.acked_lost)),
    );
    if kind == Kind::Multi {
        let names: Vec<String> = results
            .iter()
            .flat_map(|t| t.late_by_name.iter())
            .map(|(n, late, rejected)| format!("{n}: {rejected} of {late}"))
            .collect();
        r.figure(
            "holder's post-pause writes rejected per name",
            names.join(", "),
        );
        r.check(
            "the paused holder wrote late to both names of its set, and every such write was refused",
            results.iter().all(|t| {
                t.late_by_name.len() == 2
                    && t.late_by_name.iter().all(|(_, l, rj)| *l > 0 && rj == l)
            }),
            names.join(", "),
        );
        r.check(
            "no name held across a failed acquire_all",
            sum(|t| t.held_through_failed) == 0,
            sum(|t| t.held_through_failed),
        );
    }
    if kind == Kind::Leader {
        let tolerated = if on_webdis(spec) {
            WEBDIS_OBSERVE_ERRORS
        } else {
            &[]
        };
        observer_checks(
            &mut r,
            results.iter().filter_map(|t| t.observer.as_ref()),
            tolerated,
        );
    }
    r.check(
        "0 lock keys left after all clients stopped",
        left == 0,
        format!("{left} left"),
    );
    r.note("The paused holder believes it holds the lock until it is told otherwise, so its hold overlaps its successor's by construction (the figure above): no lease-based lock can prevent that. What must hold is that the fence refuses its writes.");
    r
}

/// Error codes an observer on webdis may end with (then it starts again):
/// webdis 0.1.9 writes pub/sub chunks into other connections (see 10b's
/// note), which the client reads as a broken response.
pub const WEBDIS_OBSERVE_ERRORS: &[&str] = &["TRANSPORT"];

/// Whether `spec` talks to webdis (whose pub/sub misroutes, see
/// [`WEBDIS_OBSERVE_ERRORS`]).
pub fn on_webdis(spec: &BackendSpec) -> bool {
    spec.on_webdis()
}

/// The observer checks of an election variant (one verdict per trial):
/// observe errors with a code in `tolerated` are counted (the observer
/// started again), any other fails the variant.
pub fn observer_checks<'a>(
    r: &mut ScenarioReport,
    verdicts: impl Iterator<Item = &'a ObserverVerdict>,
    tolerated: &[&str],
) {
    let vs: Vec<&ObserverVerdict> = verdicts.collect();
    let sum = |f: fn(&ObserverVerdict) -> usize| vs.iter().map(|v| f(v)).sum::<usize>();
    r.figure(
        "observer reports / leaders reported / distinct leaders",
        format!(
            "{} / {} / {}",
            sum(|v| v.reports),
            sum(|v| v.leaders_reported),
            sum(|v| v.distinct_leaders)
        ),
    );
    r.figure(
        "observer reports no recorded grant carries",
        sum(|v| v.unrecorded),
    );
    let mut observe_errors: std::collections::BTreeMap<&str, usize> = Default::default();
    for (code, n) in vs.iter().flat_map(|v| v.observe_errors.iter()) {
        *observe_errors.entry(code.as_str()).or_default() += n;
    }
    let observe_text = if observe_errors.is_empty() {
        "none".to_string()
    } else {
        observe_errors
            .iter()
            .map(|(k, n)| format!("{k}×{n}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    r.figure("observer errors (it started again)", &observe_text);
    let untolerated = observe_errors
        .keys()
        .filter(|k| !tolerated.contains(k))
        .count();
    r.check(
        &if tolerated.is_empty() {
            "the observer never failed".to_string()
        } else {
            format!(
                "the observer failed only with {} (webdis' misrouted pub/sub, see 10b)",
                tolerated.join("/")
            )
        },
        untolerated == 0,
        observe_text,
    );
    if !observe_errors.is_empty() && untolerated == 0 {
        r.note("The observer's iterator ended with TRANSPORT errors (\"not an HTTP/1.x response (status line of 2 bytes)\"), the signature of webdis 0.1.9 writing a pub/sub chunk into another connection (see 10b); it started observing again, and the checks above judge what it reported. With polling waiters (RELIABILITY_REDIS_MAX_SUBSCRIPTIONS=0) the error does not occur.");
    }
    let errors: Vec<String> = vs.iter().filter_map(|v| v.error.clone()).collect();
    r.check(
        "the observer's last report equals Client::leader once all stopped, and that is nobody",
        !vs.is_empty()
            && vs
                .iter()
                .all(|v| v.final_matches && v.final_is_none && v.error.is_none()),
        format!(
            "{} of {} observers ended on the final state{}{}",
            vs.iter().filter(|v| v.final_matches).count(),
            vs.len(),
            if vs.iter().all(|v| v.final_is_none) {
                ""
            } else {
                ", a leader remained"
            },
            if errors.is_empty() {
                String::new()
            } else {
                format!(", errors: {}", errors.join(", "))
            }
        ),
    );
    r.check(
        "the observer saw more than one leader, each value with its own leader's token, tokens only rising",
        vs.iter().all(|v| v.distinct_leaders > 1)
            && sum(|v| v.mismatched) == 0
            && sum(|v| v.token_regressions) == 0,
        format!(
            "{} mismatched, {} token regressions, distinct leaders {}",
            sum(|v| v.mismatched),
            sum(|v| v.token_regressions),
            vs.iter()
                .map(|v| v.distinct_leaders.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    );
}

fn fmt_list(v: &[f64]) -> String {
    if v.is_empty() {
        return "-".into();
    }
    v.iter()
        .map(|x| format!("{x:.0}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn one_trial(spec: &BackendSpec, lock: &str, kind: Kind) -> Result<Trial, String> {
    let limit = match kind {
        Kind::Permits(l) => Some(l),
        _ => None,
    };
    // A lock set: `<lock>-a` and `<lock>-b`; otherwise the one name.
    let names: Vec<String> = match kind {
        Kind::Multi => vec![format!("{lock}-a"), format!("{lock}-b")],
        _ => vec![lock.to_string()],
    };
    let first = names[0].clone();
    let fenced = FencedResource::start().map_err(|e| format!("fenced resource: {e}"))?;
    let resource = ResourceClient::new(&fenced.url());
    // Elections: an observer on its own client, from before the first campaign.
    let observer = match kind {
        Kind::Leader => Some(ObserverRun::start(
            spec.client().map_err(|e| format!("observer client: {e}"))?,
            lock,
        )),
        _ => None,
    };
    // The holder: one acquisition, three blind writes spread over 3 × TTL.
    let holder_cfg = ContenderCfg {
        hold_ms: 3 * TTL_MS,
        writes_per_hold: 3,
        blind_writes: true,
        max_rounds: Some(1),
        wait_ms: 5_000,
        limit,
        elect: kind == Kind::Leader,
        also: names[1..].to_vec(),
        ..ContenderCfg::new("holder", &first)
    };
    let holder = WorkerProcess::spawn(&WorkerSpec {
        backend: spec.clone(),
        contender: holder_cfg,
        resource_url: fenced.url(),
        duration_ms: 30_000,
    })
    .map_err(|e| format!("worker: {e}"))?;
    // What the holder holds: the lock, one slot of the semaphore, or every
    // name of its set (wait until it wrote to each).
    let held_now = || {
        let mut held: Vec<String> = holder
            .history()
            .ops()
            .iter()
            .filter(|o| o.kind == OpKind::Write)
            .map(|o| o.lock.clone())
            .collect();
        held.sort();
        held.dedup();
        held
    };
    let first_write = wait_for(Duration::from_secs(15), || held_now().len() >= names.len());
    if !first_write {
        return Err("the holder never acquired and wrote".into());
    }
    let held = held_now();
    holder.pause().map_err(|e| format!("SIGSTOP: {e}"))?;
    let paused_at = now_ms();

    let others = History::new();
    let tpl = ContenderCfg {
        hold_ms: 100,
        writes_per_hold: 2,
        wait_ms: 10_000,
        pause_ms: 50,
        limit,
        elect: kind == Kind::Leader,
        ..ContenderCfg::new("", &first)
    };
    let mut crew_cfgs = contenders("other", 2, &first, &tpl);
    if kind == Kind::ReadWrite {
        crew_cfgs[1].shared = true;
    }
    if kind == Kind::Multi {
        // The same set, the second contender in the other order.
        crew_cfgs[0].also = names[1..].to_vec();
        crew_cfgs[1].lock = names[1].clone();
        crew_cfgs[1].also = vec![names[0].clone()];
    }
    let crew = Crew::start(spec, crew_cfgs, &resource, &others, Duration::from_secs(20));
    // Hold the pause until a successor has written under what the holder
    // held (at least TTL): for a semaphore, the holder's slot; for a set,
    // each of its names.
    let successor_wrote = wait_for(Duration::from_millis(4 * TTL_MS + 5_000), || {
        let ops = others.ops();
        held.iter().all(|h| {
            ops.iter()
                .any(|o| o.kind == OpKind::Write && o.is_ok() && &o.lock == h)
        })
    });
    let resumed_at = now_ms();
    holder.resume().map_err(|e| format!("SIGCONT: {e}"))?;
    let holder_history = holder.finish(Duration::from_millis(4 * TTL_MS + 5_000));
    crew.join();

    let mut ops = holder_history.ops();
    ops.extend(others.ops());
    // Everyone stopped and released: the observer must settle on the final state.
    let observer = observer.map(|o| check_observer(&ops, lock, &o.finish(Duration::from_secs(5))));
    let verdict = check(&ops, &fenced.log(None));
    let handoff_ms = if successor_wrote {
        others
            .ops()
            .iter()
            .filter(|o| o.kind == OpKind::Acquire && o.is_ok() && held.contains(&o.lock))
            .map(|o| o.end - paused_at)
            .reduce(f64::min)
    } else {
        None
    };
    // When the holder had been told it lost everything it held.
    let learned_lost_ms = held
        .iter()
        .map(|h| {
            holder_history
                .ops()
                .iter()
                .find(|o| o.kind == OpKind::Lost && &o.lock == h)
                .map(|o| (o.start - resumed_at).max(0.0))
        })
        .collect::<Option<Vec<f64>>>()
        .and_then(|v| v.into_iter().reduce(f64::max));
    let late: Vec<_> = holder_history
        .ops()
        .into_iter()
        .filter(|o| o.kind == OpKind::Write && o.start >= resumed_at)
        .collect();
    let rejected = |o: &&crate::history::Op| matches!(&o.outcome, Outcome::Fail(c) if c == "STALE");
    let late_by_name = held
        .iter()
        .map(|h| {
            let mine: Vec<_> = late.iter().filter(|o| &o.lock == h).collect();
            (
                h.clone(),
                mine.len(),
                mine.iter().filter(|o| rejected(o)).count(),
            )
        })
        .collect();
    Ok(Trial {
        handoff_ms,
        learned_lost_ms,
        holder_late_writes: late.len(),
        holder_late_writes_rejected: late.iter().filter(rejected).count(),
        late_by_name,
        overlaps_believed: verdict.overlaps_believed,
        stale_accepted: verdict.stale_accepted,
        acked_lost: verdict.acked_lost,
        holds: verdict.acquisitions,
        writes_accepted: verdict.writes_accepted,
        stale_rejected: verdict.stale_rejected,
        held_through_failed: held_through_failed_acquire(&ops),
        observer,
    })
}

/// Polls `cond` every 20 ms until it holds or `timeout` passes.
pub fn wait_for(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

const TITLE_D1: &str = "job holder stalled past its TTL (D1, inside workerd)";

/// 1m (see the module docs): per trial, `start` with a 1 s lease, a run
/// waiting for the lock (granted after the lease ended, its job writes),
/// then the stalled holder's `finish`, then one more run.
fn d1_stalled_report(id: &str, trials: usize) -> ScenarioReport {
    use serde_json::{json, Value};
    let backend = "d1 (workerd, job coordinator)";
    let ttl = 1_000u64;
    let mut r = ScenarioReport::new(
        id,
        TITLE_D1,
        backend,
        &format!("POST /jobs/:name/start (lease {ttl} ms, never renewed), another run waits for it, then the first holder's late POST /jobs/:name/finish"),
    );
    let fenced = match FencedResource::start() {
        Ok(f) => f,
        Err(e) => return ScenarioReport::failed_to_run(id, TITLE_D1, backend, &e.to_string()),
    };
    let host = match WorkerdHost::start(Some(&fenced.url())) {
        Ok(h) => h,
        Err(e) => return ScenarioReport::failed_to_run(id, TITLE_D1, backend, &e.to_string()),
    };
    let call = |path: &str, body: Value| {
        host.post(path, &body, Duration::from_secs(20))
            .unwrap_or((0, Value::Null))
    };
    let token_of = |v: &Value| {
        v.get("token")
            .and_then(Value::as_str)
            .and_then(|t| t.parse::<u64>().ok())
    };
    let (mut ran, mut took_over, mut late_refused, mut next_kept, mut rising) = (0, 0, 0, 0, 0);
    let mut takeover_ms = Vec::new();
    let mut errors = Vec::new();
    for i in 0..trials {
        let job = format!("d1-stalled-{i}");
        let (s1, first) = call(&format!("/jobs/{job}/start"), json!({"ttlMs": ttl}));
        if s1 != 200 {
            errors.push(format!("start: HTTP {s1} {first}"));
            continue;
        }
        let t0 = now_ms();
        let (s2, second) = call(
            &format!("/jobs/{job}/run"),
            json!({"waitMs": 10_000, "ttlMs": 10_000}),
        );
        let waited = now_ms() - t0;
        if s2 != 200 {
            errors.push(format!("run: HTTP {s2} {second}"));
            continue;
        }
        ran += 1;
        takeover_ms.push(format!("{waited:.0}"));
        if token_of(&second) > token_of(&first) && waited >= (ttl as f64) * 0.5 {
            took_over += 1;
        }
        let (s3, _) = call(
            &format!("/jobs/{job}/finish"),
            json!({"handle": first.get("handle").cloned().unwrap_or(Value::Null)}),
        );
        if s3 == 409 {
            late_refused += 1;
        }
        let (s4, third) = call(&format!("/jobs/{job}/run"), json!({"waitMs": 5_000}));
        if s4 == 200 {
            next_kept += 1;
        }
        if s4 == 200 && token_of(&third) > token_of(&second) {
            rising += 1;
        }
    }
    let log = fenced.log(None);
    let v = check(&[], &log);
    let entries = log
        .get("entries")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let of = |n: usize| format!("{n} of {trials}");
    r.figure("trials", trials);
    r.figure("second run granted after (ms)", takeover_ms.join(", "));
    r.figure(
        "resource writes accepted / refused",
        format!("{} / {}", v.writes_accepted, v.stale_rejected),
    );
    r.check(
        "every trial ran",
        errors.is_empty() && ran == trials,
        if errors.is_empty() {
            "ok".to_string()
        } else {
            errors.join("; ")
        },
    );
    r.check(
        "the waiting run took over after the stalled holder's lease, with a higher token",
        took_over == trials,
        of(took_over),
    );
    r.check(
        "the stalled holder's late finish is refused (409) and its job does not write",
        late_refused == trials && entries.len() == 2 * trials,
        format!(
            "refused {}, resource entries {} (2 runs per trial)",
            of(late_refused),
            entries.len()
        ),
    );
    r.check(
        "0 stale writes accepted",
        v.stale_accepted == 0 && v.stale_rejected == 0,
        format!(
            "{} accepted, {} refused",
            v.stale_accepted, v.stale_rejected
        ),
    );
    r.check(
        "the lock works on after the late finish, tokens still rising",
        next_kept == trials && rising == trials,
        of(rising),
    );
    r.note("The job route renews its lease while the job works (a slow job keeps its lock: no late write), and the late `finish` resumes the handle before its job runs, so a stalled holder never reaches the resource with its old token: the fence is not exercised here; 10o judges the runs' tokens at the resource under load.");
    r
}
