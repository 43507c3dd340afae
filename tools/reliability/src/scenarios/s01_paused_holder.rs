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

use std::time::{Duration, Instant};

use edgelock_devtools::{EtcdServer, FencedResource};

use super::Mode;
use crate::backend::BackendSpec;
use crate::checker::check;
use crate::history::{now_ms, History, OpKind, Outcome};
use crate::infra::{contenders, etcd_keys, Crew, RedisNodes};
use crate::report::ScenarioReport;
use crate::resource::ResourceClient;
use crate::worker::{WorkerProcess, WorkerSpec};
use crate::workload::ContenderCfg;

const TTL_MS: u64 = 2_000;
/// What the clients take: the lock, permits, or a read-write lock (the
/// paused holder a writer; of the others one writer and one reader).
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Lock,
    Permits(u32),
    ReadWrite,
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
            out.push(trial_report("1a", &spec, Kind::Lock, trials, &keys));
            out.push(trial_report(
                "1d",
                &spec,
                Kind::Permits(PERMITS),
                trials,
                &keys,
            ));
            out.push(trial_report("1f", &spec, Kind::ReadWrite, trials, &keys));
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
            out.push(trial_report("1b", &spec, Kind::Lock, trials, &keys));
            out.push(trial_report(
                "1e",
                &spec,
                Kind::Permits(PERMITS),
                trials,
                &keys,
            ));
            out.push(trial_report("1g", &spec, Kind::ReadWrite, trials, &keys));
        }
        Err(e) => out.push(ScenarioReport::failed_to_run(
            "1b",
            TITLE,
            "redis (webdis)",
            &format!("redis: {e}"),
        )),
    }
    if !mode.short {
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

const TITLE: &str = "holder paused (SIGSTOP) past its TTL";
const TITLE_PERMITS: &str = "permit holder paused (SIGSTOP) past its TTL";
const TITLE_RW: &str = "writer of a read-write lock paused (SIGSTOP) past its TTL";

/// What one pause trial measured.
struct Trial {
    handoff_ms: Option<f64>,
    learned_lost_ms: Option<f64>,
    holder_late_writes: usize,
    holder_late_writes_rejected: usize,
    overlaps_believed: usize,
    stale_accepted: usize,
    acked_lost: usize,
}

fn trial_report(
    id: &str,
    spec: &BackendSpec,
    kind: Kind,
    trials: usize,
    keys_left: &dyn Fn() -> usize,
) -> ScenarioReport {
    let backend = match spec.kind() {
        "redlock" => "redlock (5 × webdis)",
        "redis" => "redis (webdis)",
        k => k,
    };
    let (title, fault) = match kind {
        Kind::ReadWrite => (TITLE_RW, format!("a read-write lock: SIGSTOP the writer's process for TTL ({TTL_MS} ms) + until another writer wrote (a reader contends too); then SIGCONT")),
        Kind::Permits(l) => (TITLE_PERMITS, format!("a semaphore of {l}: SIGSTOP the holder's process for TTL ({TTL_MS} ms) + until another client wrote under its slot; then SIGCONT")),
        Kind::Lock => (TITLE, format!("SIGSTOP the holder's process for TTL ({TTL_MS} ms) + until another client wrote; then SIGCONT")),
    };
    let mut r = ScenarioReport::new(id, title, backend, &fault);
    let mut results = Vec::new();
    for t in 0..trials {
        let lock = match kind {
            Kind::Permits(_) => format!("{LOCK}-sem-{t}"),
            Kind::ReadWrite => format!("{LOCK}-rw-{t}"),
            Kind::Lock => format!("{LOCK}-{t}"),
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
    r.check(
        "0 lock keys left after all clients stopped",
        left == 0,
        format!("{left} left"),
    );
    r.note("The paused holder believes it holds the lock until it is told otherwise, so its hold overlaps its successor's by construction (the figure above): no lease-based lock can prevent that. What must hold is that the fence refuses its writes.");
    r
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
    let fenced = FencedResource::start().map_err(|e| format!("fenced resource: {e}"))?;
    let resource = ResourceClient::new(&fenced.url());
    // The holder: one acquisition, three blind writes spread over 3 × TTL.
    let holder_cfg = ContenderCfg {
        hold_ms: 3 * TTL_MS,
        writes_per_hold: 3,
        blind_writes: true,
        max_rounds: Some(1),
        wait_ms: 5_000,
        limit,
        ..ContenderCfg::new("holder", lock)
    };
    let holder = WorkerProcess::spawn(&WorkerSpec {
        backend: spec.clone(),
        contender: holder_cfg,
        resource_url: fenced.url(),
        duration_ms: 30_000,
    })
    .map_err(|e| format!("worker: {e}"))?;
    let first_write = wait_for(Duration::from_secs(15), || {
        holder
            .history()
            .ops()
            .iter()
            .any(|o| o.kind == OpKind::Write)
    });
    if !first_write {
        return Err("the holder never acquired and wrote".into());
    }
    // What the holder holds: the lock, or one slot of the semaphore.
    let held = holder
        .history()
        .ops()
        .iter()
        .find(|o| o.kind == OpKind::Write)
        .map(|o| o.lock.clone())
        .unwrap_or_default();
    holder.pause().map_err(|e| format!("SIGSTOP: {e}"))?;
    let paused_at = now_ms();

    let others = History::new();
    let tpl = ContenderCfg {
        hold_ms: 100,
        writes_per_hold: 2,
        wait_ms: 10_000,
        pause_ms: 50,
        limit,
        ..ContenderCfg::new("", lock)
    };
    let mut crew_cfgs = contenders("other", 2, lock, &tpl);
    if kind == Kind::ReadWrite {
        crew_cfgs[1].shared = true;
    }
    let crew = Crew::start(spec, crew_cfgs, &resource, &others, Duration::from_secs(20));
    // Hold the pause until a successor has written under what the holder
    // held (at least TTL): for a semaphore, the holder's slot.
    let successor_wrote = wait_for(Duration::from_millis(4 * TTL_MS + 5_000), || {
        others
            .ops()
            .iter()
            .any(|o| o.kind == OpKind::Write && o.is_ok() && o.lock == held)
    });
    let resumed_at = now_ms();
    holder.resume().map_err(|e| format!("SIGCONT: {e}"))?;
    let holder_history = holder.finish(Duration::from_millis(4 * TTL_MS + 5_000));
    crew.join();

    let mut ops = holder_history.ops();
    ops.extend(others.ops());
    let verdict = check(&ops, &fenced.log(None));
    let handoff_ms = if successor_wrote {
        others
            .ops()
            .iter()
            .filter(|o| o.kind == OpKind::Acquire && o.is_ok() && o.lock == held)
            .map(|o| o.end - paused_at)
            .reduce(f64::min)
    } else {
        None
    };
    let learned_lost_ms = holder_history
        .ops()
        .iter()
        .find(|o| o.kind == OpKind::Lost)
        .map(|o| (o.start - resumed_at).max(0.0));
    let late: Vec<_> = holder_history
        .ops()
        .into_iter()
        .filter(|o| o.kind == OpKind::Write && o.start >= resumed_at)
        .collect();
    Ok(Trial {
        handoff_ms,
        learned_lost_ms,
        holder_late_writes: late.len(),
        holder_late_writes_rejected: late
            .iter()
            .filter(|o| matches!(&o.outcome, Outcome::Fail(c) if c == "STALE"))
            .count(),
        overlaps_believed: verdict.overlaps_believed,
        stale_accepted: verdict.stale_accepted,
        acked_lost: verdict.acked_lost,
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
