//! Scenario 6: Redlock with a wrong clock on one of the holder's 3 nodes
//! (Redis under libfaketime): (a) a jump forward by the TTL, (b) a clock
//! running at 2× speed. Overlaps believed vs stale writes accepted.
//!
//! Same trial as scenario 5 (see `two_holder_trial`): H1 holds exactly 3
//! nodes (2 blackholed for it throughout), the clock of one of them is moved,
//! H2 tries with all 5 reachable; if H2 gets the lock both write, H1 last.

use std::time::{Duration, Instant};

use edgelock_devtools::{FaultProxy, FencedResource};

use super::s05_redlock_restart::{
    private_proxies, sorted_text, two_holder_trial, wait_webdis, ClientKnobs, Trial, TwoHolders,
    BACKEND,
};
use super::Mode;
use crate::history::Outcome;
use crate::infra::RedisNodes;
use crate::report::ScenarioReport;
use crate::resource::ResourceClient;

const TITLE: &str = "Redlock node clock jump and drift";
const TTL_MS: u64 = 4_000;
const REQUEST_TIMEOUT_MS: u64 = 400;

pub fn run(mode: &Mode) -> Vec<ScenarioReport> {
    let setup = || -> std::io::Result<(RedisNodes, Vec<FaultProxy>, FencedResource)> {
        let nodes = RedisNodes::start(5, true)?;
        let h1p = private_proxies(&nodes)?;
        let fenced = FencedResource::start()?;
        Ok((nodes, h1p, fenced))
    };
    let (mut nodes, h1p, fenced) = match setup() {
        Ok(s) => s,
        Err(e) => {
            return vec![ScenarioReport::failed_to_run(
                "6",
                TITLE,
                BACKEND,
                &format!("setup (faketime): {e}"),
            )]
        }
    };
    let resource = ResourceClient::new(&fenced.url());
    let started = Instant::now();
    let mut a = jump(&mut nodes, &h1p, &fenced, &resource, mode.pick(2, 6));
    a.duration = started.elapsed();
    let started = Instant::now();
    let mut b = drift(&mut nodes, &h1p, &fenced, &resource, mode.pick(2, 6));
    b.duration = started.elapsed();
    vec![a, b]
}

fn knobs(auto_extend: bool) -> ClientKnobs {
    ClientKnobs {
        auto_extend,
        ..ClientKnobs::new(TTL_MS, REQUEST_TIMEOUT_MS)
    }
}

fn jump(
    nodes: &mut RedisNodes,
    h1p: &[FaultProxy],
    fenced: &FencedResource,
    resource: &ResourceClient,
    trials: usize,
) -> ScenarioReport {
    let mut rep = ScenarioReport::new(
        "6a",
        &format!("{TITLE}: jump forward by the TTL (fencing Strict)"),
        BACKEND,
        "faketime: one of the holder's 3 nodes jumps +TTL (4 s) right after the grant",
    );
    let mut offsets = [0u64; 5];
    let mut results: Vec<Trial> = Vec::new();
    for k in 0..trials {
        let j = k % 5;
        offsets[j] += TTL_MS / 1000;
        let spec = format!("+{}s", offsets[j]);
        let trial = two_holder_trial(
            TwoHolders {
                nodes,
                h1_proxies: h1p,
                resource,
                fenced,
                lock: format!("s6a-{k}"),
                h1_cut: [(k + 3) % 5, (k + 4) % 5],
                h1_knobs: knobs(true),
                h2_knobs: knobs(true),
                h2_wait_ms: 3_500,
            },
            |nodes| {
                let s = nodes.servers.get(j).ok_or("no such node")?;
                s.set_faketime(&spec).map_err(|e| e.to_string())?;
                Ok(format!("node {j} clock {spec}"))
            },
        );
        results.push(trial);
    }
    report_common(
        &mut rep,
        &results,
        trials,
        "H2 granted after the jump was set (faketime applies within ≈1 s)",
    );
    let ran = results.iter().filter(|t| t.skipped.is_none()).count();
    let double = results
        .iter()
        .filter(|t| t.skipped.is_none() && t.verdict.overlaps_believed > 0)
        .count();
    rep.finding(format!(
        "A forward jump by the TTL expires H1's key on that node at once; with the 2 nodes H1 never reached, H2 forms a \
         second quorum while H1's validity still runs (double grant in {double} of {ran} trials). Redlock assumes bounded \
         clock drift; a jump breaks mutual exclusion, as expected. The fencing counters survive a clock jump (no restart), \
         so H2's token is above H1's and the fence refuses H1's late write."
    ));
    rep
}

fn drift(
    nodes: &mut RedisNodes,
    h1p: &[FaultProxy],
    fenced: &FencedResource,
    resource: &ResourceClient,
    trials: usize,
) -> ScenarioReport {
    let mut rep = ScenarioReport::new(
        "6b",
        &format!("{TITLE}: clock at 2× speed (fencing Strict)"),
        BACKEND,
        "faketime \"+0 x2\" on node 0 (one of the holder's 3 nodes) for the whole run",
    );
    const D: usize = 0;
    // A rate applies from the process's start, so restart the node under the
    // new spec rather than speeding up a running one (which would also jump).
    let prep = (|| -> Result<f64, String> {
        let s = nodes.servers.get_mut(D).ok_or("no node")?;
        s.set_faketime("+0 x2").map_err(|e| e.to_string())?;
        s.restart().map_err(|e| e.to_string())?;
        let w = nodes.webdis.get(D).ok_or("no webdis")?;
        wait_webdis(w, Duration::from_secs(10)).ok_or("webdis did not reconnect")?;
        let s = nodes.servers.get(D).ok_or("no node")?;
        s.redis_command(&[b"SET", b"s6-rate-probe", b"1", b"PX", b"10000"])
            .map_err(|e| e.to_string())?;
        let t = Instant::now();
        std::thread::sleep(Duration::from_millis(1_000));
        let pttl = s
            .redis_command(&[b"PTTL", b"s6-rate-probe"])
            .map_err(|e| e.to_string())?
            .as_int()
            .ok_or("no PTTL")?;
        let real = t.elapsed().as_secs_f64() * 1000.0;
        let _ = s.redis_command(&[b"DEL", b"s6-rate-probe"]);
        Ok((10_000.0 - pttl as f64) / real)
    })();
    let rate = match prep {
        Ok(r) => r,
        Err(e) => {
            rep.check("scenario ran", false, format!("drift setup: {e}"));
            return rep;
        }
    };
    rep.figure(
        "measured clock rate of node 0 (fake ms per real ms)",
        format!("{rate:.2}"),
    );
    let mut results: Vec<Trial> = Vec::new();
    let mut renewing = Vec::new();
    let others = [1usize, 2, 3, 4];
    for k in 0..trials {
        // H1's 3 nodes: node 0 (fast clock) and two of the others.
        let cut = [others[k % 4], others[(k + 1) % 4]];
        let renews = k % 2 == 1;
        let mut trial = two_holder_trial(
            TwoHolders {
                nodes,
                h1_proxies: h1p,
                resource,
                fenced,
                lock: format!("s6b-{k}"),
                h1_cut: cut,
                h1_knobs: knobs(renews),
                h2_knobs: knobs(true),
                h2_wait_ms: TTL_MS,
            },
            |_| Ok(String::new()),
        );
        trial.diverged = renews;
        renewing.push(renews);
        results.push(trial);
    }
    report_common(&mut rep, &results, trials, "H2 granted after H1's grant");
    let kind = |r: bool| {
        let v: Vec<&Trial> = results
            .iter()
            .filter(|t| t.skipped.is_none() && t.diverged == r)
            .collect();
        (
            v.iter().filter(|t| t.verdict.overlaps_believed > 0).count(),
            v.iter().filter(|t| t.t2.is_some()).count(),
            v.len(),
        )
    };
    let (ov_n, g_n, n_n) = kind(false);
    let (ov_r, g_r, n_r) = kind(true);
    rep.figure(
        "holder without auto-renewal: double grants / H2 granted",
        format!("{ov_n} / {g_n} of {n_n}"),
    );
    rep.figure(
        "holder renewing at TTL/3 (ᵈ): double grants / H2 granted",
        format!("{ov_r} / {g_r} of {n_r}"),
    );
    rep.finding(format!(
        "Node 0's clock runs at {rate:.2}× (measured), so a key's PX TTL there lasts about TTL/2 of real time. A holder that \
         does not renew (auto_extend off, relying on its validity of TTL − elapsed − 1 % drift allowance) loses node 0's key \
         halfway through its validity and H2 forms a quorum with node 0 and the 2 nodes H1 never reached: double grants \
         {ov_n} of {n_n}. A holder that renews every TTL/3 re-arms node 0's key before it expires (TTL/3 < TTL/2), so H2 got \
         the lock in {g_r} of {n_r} trials (ᵈ). The 1 % drift factor does not cover a 2× clock; fencing still does: the \
         counters are not reset by drift, so every token H2 got is above H1's."
    ));
    rep
}

/// Checks and figures shared by both variants.
fn report_common(rep: &mut ScenarioReport, results: &[Trial], trials: usize, grant_label: &str) {
    let ran: Vec<&Trial> = results.iter().filter(|t| t.skipped.is_none()).collect();
    let double = ran
        .iter()
        .filter(|t| t.verdict.overlaps_believed > 0)
        .count();
    let second = ran.iter().filter(|t| t.t2.is_some()).count();
    let late_accepted = ran.iter().filter(|t| t.late_accepted()).count();
    let late_refused = ran
        .iter()
        .filter(|t| matches!(&t.late_write, Some(Outcome::Fail(c)) if c == "STALE"))
        .count();
    let checker_stale: usize = ran.iter().map(|t| t.verdict.stale_accepted).sum();
    rep.check(
        &format!(
            "{} of {} trials ran (H1 held exactly 3 nodes)",
            ran.len(),
            trials
        ),
        ran.len() == trials && trials > 0,
        results
            .iter()
            .filter_map(|t| t.skipped.clone())
            .collect::<Vec<_>>()
            .join("; "),
    );
    rep.check(
        "0 stale writes accepted (the older holder's write after the newer grant refused by the fence; checker's count too)",
        late_accepted == 0 && checker_stale == 0,
        format!("late writes accepted {late_accepted} of {second}, refused {late_refused}; checker stale_accepted {checker_stale}"),
    );
    rep.figure("trials", ran.len());
    rep.figure(
        "overlaps believed (double grants)",
        format!("{double} of {} trials", ran.len()),
    );
    rep.figure(
        "stale writes accepted / refused",
        format!("{late_accepted} / {late_refused}"),
    );
    rep.figure(
        "per trial: T1→T2, overlaps, late write",
        ran.iter()
            .map(|t| t.summary())
            .collect::<Vec<_>>()
            .join("; "),
    );
    rep.figure(
        grant_label,
        sorted_text(ran.iter().filter_map(|t| t.h2_after_fault_ms).collect()),
    );
}
