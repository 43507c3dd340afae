//! Scenario 12: a ZooKeeper ensemble of three loses a server while locks
//! are in use (Debian's ZooKeeper 3.8, `QuorumPeerMain`, tickTime 200).
//!
//! - 12a: the leader is killed (SIGKILL) under contention: four contenders,
//!   every one connected to the leader first (the connect string lists it
//!   first), so every stream breaks; the survivors elect a new leader and
//!   each session moves to another server. Must hold: 0 stale writes,
//!   no overlapping holds, tokens (czxid) rising in grant order (the new
//!   epoch's zxids are above the old one's), and work resumes after the
//!   kill. Figures: grants before / after, when the first grant after the
//!   kill came, locks lost (a session that could not reconnect within its
//!   timeout while the quorum re-formed).
//! - 12b: the server a holder is connected to is killed (a follower, the
//!   holder's connect string lists it first; the contenders use the other
//!   two): the holder's session moves to the next server within its
//!   timeout and the lock stays held. Must hold: the holder is not told
//!   Lost, nobody else is granted while it holds, its writes after the
//!   kill are accepted (its token still the newest), 0 stale writes; once
//!   it releases, a contender is granted.
//!
//! The killed member is started again after 12a (a quorum of three for
//! 12b). Not in the short run (three JVMs).

use std::time::{Duration, Instant};

use edgelock_devtools::{FencedResource, ZooKeeperEnsemble};

use super::s02_etcd_leader::{errors_text, first_grant_after, lost_at, secs, Holder};
use super::Mode;
use crate::backend::BackendSpec;
use crate::checker::check;
use crate::history::{now_ms, History, OpKind};
use crate::infra::{contenders, Crew};
use crate::report::ScenarioReport;
use crate::resource::ResourceClient;
use crate::workload::ContenderCfg;

const TITLE: &str = "ZooKeeper ensemble: a server killed";
/// The session timeout (the most tickTime 200 allows: 20 ticks).
const SESSION_MS: u64 = 4_000;
const TIMEOUT_MS: u64 = 1_000;
const LEADER_WAIT: Duration = Duration::from_secs(30);

pub fn run(mode: &Mode) -> Vec<ScenarioReport> {
    let started = Instant::now();
    let mut ens = match ZooKeeperEnsemble::start(3) {
        Ok(e) => e,
        Err(e) => {
            return vec![ScenarioReport::failed_to_run(
                "12a",
                TITLE,
                "zookeeper ×3",
                &format!("ensemble: {e}"),
            )]
        }
    };
    let mut out = Vec::new();
    if super::wants("12a") {
        out.push(
            leader_killed(mode, &mut ens).unwrap_or_else(|e| {
                ScenarioReport::failed_to_run("12a", TITLE, "zookeeper ×3", &e)
            }),
        );
    }
    if super::wants("12b") {
        out.push(
            holder_server_killed(mode, &mut ens).unwrap_or_else(|e| {
                ScenarioReport::failed_to_run("12b", TITLE, "zookeeper ×3", &e)
            }),
        );
    }
    // The ensemble's start-up shared by the variants.
    let per = started.elapsed() / u32::try_from(out.len()).unwrap_or(1).max(1);
    for r in &mut out {
        r.duration = per;
    }
    out
}

/// The connect string with member `first` first, then the others in order.
fn first_then_others(ens: &ZooKeeperEnsemble, first: usize) -> String {
    let mut hosts = vec![ens.member_connect_string(first)];
    hosts.extend(
        (0..ens.len())
            .filter(|i| *i != first)
            .map(|i| ens.member_connect_string(i)),
    );
    hosts.join(",")
}

fn spec(connect: String) -> BackendSpec {
    BackendSpec::ZooKeeper {
        connect,
        ttl_ms: SESSION_MS,
        request_timeout_ms: TIMEOUT_MS,
    }
}

fn leader_killed(mode: &Mode, ens: &mut ZooKeeperEnsemble) -> Result<ScenarioReport, String> {
    let leader = ens
        .wait_for_leader(LEADER_WAIT)
        .map_err(|e| format!("no leader: {e}"))?;
    let mut r = ScenarioReport::new(
        "12a",
        TITLE,
        "zookeeper ×3",
        &format!("SIGKILL the leader (member {leader}, every client's first server) under 4 contenders on one lock; session timeout {SESSION_MS} ms"),
    );
    let fenced = FencedResource::start().map_err(|e| format!("fenced resource: {e}"))?;
    let resource = ResourceClient::new(&fenced.url());
    let history = History::new();
    let lock = "s12-leader";
    let tpl = ContenderCfg {
        wait_ms: 10_000,
        hold_ms: 100,
        writes_per_hold: 2,
        pause_ms: 20,
        ..ContenderCfg::new("", lock)
    };
    let spec = spec(first_then_others(ens, leader));
    let crew = Crew::start(
        &spec,
        contenders("c", 4, lock, &tpl),
        &resource,
        &history,
        Duration::from_secs(60),
    );
    std::thread::sleep(Duration::from_millis(mode.pick(3_000, 5_000)));
    let t_kill = now_ms();
    ens.kill(leader);
    let new_leader = ens.wait_for_leader(LEADER_WAIT).ok();
    let t_elected = now_ms();
    std::thread::sleep(Duration::from_millis(mode.pick(6_000, 10_000)));
    crew.join();
    let restarted = ens.start_again(leader);

    let ops = history.ops();
    let v = check(&ops, &fenced.log(None));
    let before = ops
        .iter()
        .filter(|o| o.kind == OpKind::Acquire && o.is_ok() && o.end < t_kill)
        .count();
    let after = ops
        .iter()
        .filter(|o| o.kind == OpKind::Acquire && o.is_ok() && o.start > t_kill)
        .count();
    let first_after = first_grant_after(&ops, t_kill, "");
    r.figure(
        "new leader",
        format!(
            "{new_leader:?}, elected within {}",
            secs(t_elected - t_kill)
        ),
    );
    r.figure(
        "grants before / after the kill",
        format!("{before} / {after}"),
    );
    r.figure(
        "first grant after the kill",
        first_after.map_or("-".into(), |t| secs(t - t_kill)),
    );
    r.figure("locks lost", v.lost_signals);
    r.figure("errors", errors_text(&v));
    r.check(
        "0 stale writes accepted",
        v.stale_accepted == 0,
        format!(
            "{} accepted, {} stale rejected",
            v.writes_accepted, v.stale_rejected
        ),
    );
    r.check(
        "no overlapping holds",
        v.overlaps_believed == 0,
        format!("{} in {} holds", v.overlaps_believed, v.acquisitions),
    );
    r.check(
        "fencing tokens follow grant order across the new epoch (0 inversions)",
        v.token_inversions == 0,
        v.token_inversions,
    );
    r.check(
        "work resumed after the kill",
        after > 0,
        format!("{after} grants"),
    );
    r.check(
        "the killed member rejoined",
        restarted.is_ok(),
        format!("{restarted:?}"),
    );
    Ok(r)
}

fn holder_server_killed(
    mode: &Mode,
    ens: &mut ZooKeeperEnsemble,
) -> Result<ScenarioReport, String> {
    let leader = ens
        .wait_for_leader(LEADER_WAIT)
        .map_err(|e| format!("no leader: {e}"))?;
    let follower = (0..ens.len()).find(|i| *i != leader).unwrap_or(0);
    let others: Vec<String> = (0..ens.len())
        .filter(|i| *i != follower)
        .map(|i| ens.member_connect_string(i))
        .collect();
    let mut r = ScenarioReport::new(
        "12b",
        TITLE,
        "zookeeper ×3",
        &format!("SIGKILL the holder's server (member {follower}, a follower) while it holds and writes; 2 contenders on the other members; session timeout {SESSION_MS} ms"),
    );
    let fenced = FencedResource::start().map_err(|e| format!("fenced resource: {e}"))?;
    let resource = ResourceClient::new(&fenced.url());
    let history = History::new();
    let lock = "s12-holder";
    let holder_cfg = ContenderCfg {
        blind_writes: true,
        ..ContenderCfg::new("holder", lock)
    };
    let holder = Holder::start(
        &spec(first_then_others(ens, follower)),
        holder_cfg,
        &resource,
        &history,
        Duration::from_millis(200),
    )?;
    let tpl = ContenderCfg {
        wait_ms: 20_000,
        hold_ms: 100,
        writes_per_hold: 2,
        pause_ms: 20,
        max_rounds: Some(3),
        ..ContenderCfg::new("", lock)
    };
    let crew = Crew::start(
        &spec(others.join(",")),
        contenders("c", 2, lock, &tpl),
        &resource,
        &history,
        Duration::from_secs(60),
    );
    std::thread::sleep(Duration::from_millis(1_000));
    let t_kill = now_ms();
    ens.kill(follower);
    std::thread::sleep(Duration::from_millis(
        mode.pick(3 * SESSION_MS, 4 * SESSION_MS),
    ));
    let t_release = now_ms();
    holder.stop();
    crew.join_when_done();
    let restarted = ens.start_again(follower);

    let ops = history.ops();
    let v = check(&ops, &fenced.log(None));
    let late: Vec<_> = ops
        .iter()
        .filter(|o| {
            o.client == "holder"
                && o.kind == OpKind::Write
                && o.start > t_kill + 1.5 * SESSION_MS as f64
        })
        .collect();
    let accepted = late.iter().filter(|o| o.is_ok()).count();
    let lost = lost_at(&ops, "holder", t_kill);
    let granted_while_held = first_grant_after(&ops, t_kill, "holder").filter(|t| *t < t_release);
    let granted_after = first_grant_after(&ops, t_release, "holder");
    r.figure(
        "holder's writes past 1.5 × the session timeout after the kill (accepted)",
        format!("{} ({accepted})", late.len()),
    );
    r.figure(
        "grant to a contender after the holder released",
        granted_after.map_or("-".into(), |t| secs(t - t_release)),
    );
    r.figure("errors", errors_text(&v));
    r.check(
        "the holder is not told Lost (its session moved to another server)",
        lost.is_none(),
        format!("{lost:?}"),
    );
    r.check(
        "nobody else is granted while the holder holds",
        granted_while_held.is_none(),
        format!("{granted_while_held:?}"),
    );
    r.check(
        "the holder's writes after the kill are accepted",
        !late.is_empty() && accepted == late.len(),
        format!("{accepted} of {}", late.len()),
    );
    r.check(
        "0 stale writes accepted",
        v.stale_accepted == 0,
        format!(
            "{} accepted, {} stale rejected",
            v.writes_accepted, v.stale_rejected
        ),
    );
    r.check(
        "a contender is granted once the holder released",
        granted_after.is_some(),
        format!("{granted_after:?}"),
    );
    r.check(
        "the killed member rejoined",
        restarted.is_ok(),
        format!("{restarted:?}"),
    );
    Ok(r)
}
