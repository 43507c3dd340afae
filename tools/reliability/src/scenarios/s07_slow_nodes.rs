//! Scenario 7: slow Redlock nodes.
//!
//! (a) 2 of 5 nodes delayed by TTL/2: right after each grant, the validity
//!     the client reports (`Lock::expires_in`) is compared with the PTTL of
//!     the lock key read directly on every node: the validity must never
//!     exceed the remaining TTL of any node that holds the key.
//! (b) attempts that fail — 3 nodes too slow for the request timeout, or so
//!     slow that the validity is used up — must leave no key behind once the
//!     client returned and its cleanup had time to land.

use std::time::{Duration, Instant};

use edgelock::core::{AcquireOptions, Wait};
use edgelock::native::Client;
use edgelock_devtools::{http_request, Fault, RespConn};

use super::s05_redlock_restart::{redlock_client, ClientKnobs, BACKEND};
use super::Mode;
use crate::infra::{redis_lock_key, RedisNodes};
use crate::report::ScenarioReport;

const TITLE: &str = "TTL/2 delay on 2 of 5 Redlock nodes";

pub fn run(mode: &Mode) -> Vec<ScenarioReport> {
    let nodes = match RedisNodes::start(5, false) {
        Ok(n) => n,
        Err(e) => {
            return vec![ScenarioReport::failed_to_run(
                "7",
                TITLE,
                BACKEND,
                &format!("setup: {e}"),
            )]
        }
    };
    let mut out = Vec::new();
    // Strict fencing (the default) and the opt-in Folded: Strict's second
    // round also waits for the slow nodes, so its grants are measured apart.
    for strict in [true, false] {
        let started = Instant::now();
        let mut a = validity(&nodes, mode.pick(2, 5), strict);
        a.duration = started.elapsed();
        out.push(a);
    }
    let started = Instant::now();
    let mut b = failed_attempts(&nodes, mode.pick(1, 3));
    b.duration = started.elapsed();
    out.push(b);
    out
}

fn set_delays(nodes: &RedisNodes, slow: &[usize], per_direction: Duration) {
    for (i, p) in nodes.proxies.iter().enumerate() {
        p.set(if slow.contains(&i) {
            Fault::Delay(per_direction)
        } else {
            Fault::Pass
        });
    }
}

/// Round trip of a webdis PING through proxy `i` (ms), as the client sees it.
fn round_trip_ms(nodes: &RedisNodes, i: usize) -> Option<f64> {
    let url = format!("{}/PING", nodes.proxies.get(i)?.url());
    let t = Instant::now();
    let r = http_request("GET", &url, &[], b"", Duration::from_secs(10)).ok()?;
    (r.status == 200).then(|| t.elapsed().as_secs_f64() * 1000.0)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// One grant's measurement: margins (ms) of every node holding the key.
struct Grant {
    validity_ms: f64,
    /// `remaining TTL on the node − reported validity`, per node holding the key,
    /// both taken at the same instant (the later end of the PTTL read, so a
    /// slow read can only make a margin look smaller... never hide a violation).
    margins: Vec<f64>,
}

fn measure_grant(
    client: &Client,
    conns: &mut [Option<RespConn>],
    name: &str,
) -> Result<Grant, String> {
    let opts = AcquireOptions {
        wait: Wait::For(5_000),
        ttl_ms: None,
    };
    let lock = client
        .acquire_with(name, opts, None)
        .map_err(|e| e.code().to_string())?
        .ok_or("not acquired")?;
    let tv = Instant::now();
    let validity = ms(lock.expires_in());
    let key = redis_lock_key(name);
    let mut margins = Vec::new();
    for c in conns.iter_mut() {
        let Some(c) = c else { continue };
        let reply = c.command(&["PTTL", key.as_str()]);
        let read_end = ms(tv.elapsed());
        if let Ok(p) = reply {
            if let Some(p) = p.as_int().filter(|p| *p >= 0) {
                // At the end of the read the node had ≤ p ms left (the command
                // ran earlier), and the client's validity had `validity −
                // read_end` left: a margin below 0 is a certain violation.
                margins.push(p as f64 - (validity - read_end));
            }
        }
    }
    let _ = lock.release();
    Ok(Grant {
        validity_ms: validity,
        margins,
    })
}

fn validity(nodes: &RedisNodes, trials: usize, strict: bool) -> ScenarioReport {
    const TTL: u64 = 2_000;
    let mut rep = ScenarioReport::new(
        if strict { "7a" } else { "7a-folded" },
        &format!("{TITLE}: reported validity vs remaining TTL (fencing {})", if strict { "Strict, the default" } else { "Folded, opt-in" }),
        BACKEND,
        "proxy delay on nodes 3 and 4: (i) TTL/4 each way = TTL/2 round trip; (ii) TTL/2 each way (answers after the request timeout)",
    );
    let mut conns: Vec<Option<RespConn>> = nodes.servers.iter().map(|s| s.connect().ok()).collect();
    let client = match redlock_client(
        &nodes.proxied_specs(),
        ClientKnobs {
            strict,
            ..ClientKnobs::new(TTL, 1_500)
        },
    ) {
        Ok(c) => c,
        Err(e) => {
            rep.check("scenario ran", false, e.to_string());
            return rep;
        }
    };
    let mut all_ok = true;
    let mut failures = Vec::new();
    let mut too_few = 0;
    let mut grants_total = 0;
    for (label, per_dir) in [("TTL/2 round trip", TTL / 4), ("TTL/2 each way", TTL / 2)] {
        set_delays(nodes, &[3, 4], Duration::from_millis(per_dir));
        let rtt = round_trip_ms(nodes, 3);
        let mut validities = Vec::new();
        let mut mins = Vec::new();
        let mut holders = Vec::new();
        for k in 0..trials {
            match measure_grant(&client, &mut conns, &format!("s7a-{per_dir}-{k}")) {
                Ok(g) => {
                    grants_total += 1;
                    let min = g.margins.iter().copied().fold(f64::INFINITY, f64::min);
                    if min < 0.0 {
                        all_ok = false;
                    }
                    if g.margins.len() < 3 {
                        too_few += 1;
                    }
                    holders.push(g.margins.len());
                    validities.push(g.validity_ms);
                    mins.push(min);
                }
                Err(e) => failures.push(format!("{label}: {e}")),
            }
        }
        let fmt = |v: &[f64]| {
            let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            if v.is_empty() {
                "-".to_string()
            } else {
                format!("{lo:.0}–{hi:.0} ms")
            }
        };
        rep.figure(
            &format!("{label}: measured round trip through a slow proxy"),
            rtt.map_or("-".into(), |r| format!("{r:.0} ms")),
        );
        rep.figure(
            &format!("{label}: reported validity after grant"),
            fmt(&validities),
        );
        rep.figure(
            &format!(
                "{label}: margin = smallest remaining TTL − validity (min–max over {} grants)",
                mins.len()
            ),
            fmt(&mins),
        );
        rep.figure(
            &format!("{label}: nodes holding the key at grant"),
            format!("{holders:?}"),
        );
    }
    set_delays(nodes, &[], Duration::ZERO);
    let _ = client.close();
    let failed = if failures.is_empty() {
        "all granted".to_string()
    } else {
        failures.join("; ")
    };
    if strict {
        // Two rounds that each wait for the slow nodes use up the validity:
        // what must hold is that nothing is handed out with a validity the
        // nodes do not back, and that every attempt ends (with an error).
        rep.figure(
            "attempts granted",
            format!("{grants_total} of {}", trials * 2),
        );
        rep.check("reported validity ≤ smallest remaining TTL among the nodes holding the key, for every grant", all_ok, format!("{grants_total} grants"));
        rep.check(
            "every attempt ended (granted or an error, within its wait)",
            grants_total + failures.len() == trials * 2,
            failed.clone(),
        );
        if grants_total < trials * 2 {
            rep.finding(format!(
                "Liveness cost of Strict fencing: its raise round waits for every node like the attempt round, so with 2 of 5 nodes \
                 answering after TTL/2 the two rounds use up the validity and {} of {} attempts were not granted ({failed}). \
                 Folded (one round) is granted in the same setting (7a-folded). Handing out after a quorum of raise \
                 confirmations was tried and reverted: the restart simulation showed it can issue a lower token when the \
                 attempt round lost the answer of the node carrying the higher counter.",
                trials * 2 - grants_total,
                trials * 2
            ));
        }
    } else {
        rep.check(
            "every attempt was granted (5 fast enough nodes)",
            failures.is_empty() && grants_total == trials * 2,
            failed,
        );
        rep.check("reported validity ≤ smallest remaining TTL among the nodes holding the key (margin ≥ 0)", all_ok && grants_total > 0, format!("{grants_total} grants"));
    }
    rep.check(
        "a quorum (≥ 3 nodes) holds the key at every grant",
        too_few == 0,
        format!("{too_few} grants with fewer"),
    );
    rep.note(format!(
        "TTL {TTL} ms, request timeout 1500 ms, drift factor 1 %. The fault proxy delays every chunk in each direction, so the \
         round trip through a slow node is about twice the per-direction delay (measured above). Margins are taken \
         conservatively: validity from Lock::expires_in() right after the grant, minus the time until each direct PTTL \
         read (one open RESP connection per node) finished. The margin's floor is the drift allowance (1 % of TTL + 2 ms) \
         plus the time between the attempt's start and the SET on the fastest node that holds the key: the fast nodes bound \
         the validity, not the slow ones. When the attempt took longer than TTL/3, the first renewal is due at the grant and may \
         re-arm the keys before the read: that only raises a margin (the max figure), never lowers it. In (ii) the slow nodes answer after the request timeout: the grant comes from the \
         3 fast nodes after the timeout, and the slow nodes' keys (set ~TTL/2 later) are removed by the release."
    ));
    rep
}

fn keys_left(nodes: &RedisNodes) -> usize {
    nodes
        .lock_keys_left()
        .iter()
        .map(|k| k.unwrap_or(usize::MAX / 8))
        .sum()
}

/// Runs one failing acquire; returns (error code, keys at return, max keys
/// seen while waiting, keys after the wait).
fn failing_attempt(
    client: &Client,
    nodes: &RedisNodes,
    name: &str,
    wait_after: Duration,
) -> (String, usize, usize, usize) {
    let opts = AcquireOptions {
        wait: Wait::For(10_000),
        ttl_ms: None,
    };
    let code = match client.acquire_with(name, opts, None) {
        Ok(Some(l)) => {
            let _ = l.release();
            "GRANTED".to_string()
        }
        Ok(None) => "NOT_ACQUIRED".to_string(),
        Err(e) => e.code().to_string(),
    };
    let at_return = keys_left(nodes);
    let t = Instant::now();
    let mut max_seen = at_return;
    while t.elapsed() < wait_after {
        max_seen = max_seen.max(keys_left(nodes));
        std::thread::sleep(Duration::from_millis(100));
    }
    (code, at_return, max_seen, keys_left(nodes))
}

fn failed_attempts(nodes: &RedisNodes, trials: usize) -> ScenarioReport {
    let mut rep = ScenarioReport::new(
        "7b",
        &format!("{TITLE}: failed attempts leave no key"),
        BACKEND,
        "(i) 1 s delay each way on 3 of 5 nodes, request timeout 400 ms; (ii) 1.1 s each way on 3 nodes, request timeout 3 s, TTL 2 s",
    );
    // (i) Timeouts: the slow nodes apply the SET ~1 s after the client gave up
    // on them; its owner-checked cleanup reaches them ~1 s after it was sent.
    const D1: u64 = 1_000;
    const TTL1: u64 = 4_000;
    let wait1 = Duration::from_millis(D1 + 1_000);
    set_delays(nodes, &[0, 1, 2], Duration::from_millis(D1));
    let knobs = ClientKnobs {
        retry_count: 2,
        ..ClientKnobs::new(TTL1, 400)
    };
    let mut res1 = Vec::new();
    if let Ok(c) = redlock_client(&nodes.proxied_specs(), knobs) {
        for k in 0..trials {
            res1.push(failing_attempt(
                &c,
                nodes,
                &format!("s7b-timeout-{k}"),
                wait1,
            ));
        }
        let _ = c.close();
    }
    // (ii) Too late: a quorum grants, but after more than the TTL.
    const D2: u64 = 1_100;
    const TTL2: u64 = 2_000;
    let wait2 = Duration::from_millis(D2 + 1_000);
    set_delays(nodes, &[0, 1, 2], Duration::from_millis(D2));
    let knobs = ClientKnobs {
        retry_count: 0,
        ..ClientKnobs::new(TTL2, 3_000)
    };
    let mut res2 = Vec::new();
    if let Ok(c) = redlock_client(&nodes.proxied_specs(), knobs) {
        for k in 0..trials.min(2) {
            res2.push(failing_attempt(&c, nodes, &format!("s7b-late-{k}"), wait2));
        }
        let _ = c.close();
    }
    set_delays(nodes, &[], Duration::ZERO);

    let granted = res1
        .iter()
        .chain(&res2)
        .filter(|r| r.0 == "GRANTED")
        .count();
    let left1: usize = res1.iter().map(|r| r.3).sum();
    let seen1 = res1.iter().map(|r| r.2).max().unwrap_or(0);
    let left2: usize = res2.iter().map(|r| r.3).sum();
    rep.check(
        &format!("{} + {} failing attempts ran", res1.len(), res2.len()),
        res1.len() == trials && !res2.is_empty(),
        "",
    );
    rep.check(
        "no lock handed out (no false \"acquired\")",
        granted == 0,
        format!("codes: {}", codes(&res1, &res2)),
    );
    rep.check(
        &format!(
            "timeouts (i): 0 lock keys on any node {} ms after the client returned",
            wait1.as_millis()
        ),
        left1 == 0,
        format!("keys left {left1}; keys seen while waiting (max) {seen1}"),
    );
    rep.figure(
        "(i) error codes",
        res1.iter()
            .map(|r| r.0.clone())
            .collect::<Vec<_>>()
            .join(", "),
    );
    rep.figure(
        "(i) keys at return / max seen during the wait / after the wait",
        res1.iter()
            .map(|r| format!("{}/{}/{}", r.1, r.2, r.3))
            .collect::<Vec<_>>()
            .join("; "),
    );
    rep.figure(
        "(ii) error codes",
        res2.iter()
            .map(|r| r.0.clone())
            .collect::<Vec<_>>()
            .join(", "),
    );
    rep.figure(
        "(ii) keys at return / max seen / after the wait",
        res2.iter()
            .map(|r| format!("{}/{}/{}", r.1, r.2, r.3))
            .collect::<Vec<_>>()
            .join("; "),
    );
    rep.figure(
        "(ii) keys left after the wait (not a check, see note)",
        left2,
    );
    rep.note(format!(
        "Wait used before counting keys: (i) {} ms after the client returned (the per-direction delay, which a cleanup sent \
         just before the return needs to reach a slow node, + 1 s slack). Without cleanup a key from the last attempt would \
         still live then: it reaches a slow node ≥ {D1} ms after its attempt started and has TTL {TTL1} ms, and the client \
         returns at most ~2 request timeouts (800 ms) after that attempt's start — so (i) tests the cleanup, not expiry. \
         The max-seen figure shows that the slow nodes did apply the timed-out SETs. \
         (ii) (validity used up) is reported but not a key check: a quorum answer that arrives after more than the TTL \
         means every key the attempt set has expired (or expires) before any cleanup sent after that answer can arrive, so \
         no wait can tell cleanup from expiry there; what must hold is that no lock is handed out.",
        wait1.as_millis()
    ));
    rep
}

fn codes(a: &[(String, usize, usize, usize)], b: &[(String, usize, usize, usize)]) -> String {
    a.iter()
        .chain(b)
        .map(|r| r.0.clone())
        .collect::<Vec<_>>()
        .join(", ")
}
