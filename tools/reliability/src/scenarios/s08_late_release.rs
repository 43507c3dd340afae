//! Scenario 8: a release that reaches the backend after the lock expired and
//! another client took it. The releasing client sits behind a fault proxy
//! that delays its traffic past the TTL; the next holder talks to the backend
//! directly. The late release must not delete the next holder's key (the
//! release is owner-checked on the server), must not report that the lock
//! was still held, and the next holder must keep its lock and its writes.
//! 8a etcd, 8b Redis, 8d Redis over TCP (the Redis protocol on the native
//! driver's stream), 8c the lock service (Durable Object in workerd through
//! the Worker's front; the late client without auto-extend).

use std::time::Duration;

use edgelock::core::redis::{RedisConfig, RedisMachine, RedisNode};
use edgelock::core::{AcquireOptions, Wait};
use edgelock::native::{Client, OsEntropy};
use edgelock_devtools::{EtcdServer, Fault, FaultProxy, FencedResource};

use super::Mode;
use crate::backend::BackendSpec;
use crate::history::now_ms;
use crate::infra::{
    addr_of, etcd_keys, redis_url, tcp_proxy, RedisNodes, WorkerdHost, WORKER_TOKEN,
};
use crate::report::ScenarioReport;
use crate::resource::ResourceClient;

const TITLE: &str = "late release after expiry";
const TTL_MS: u64 = 2_000;
/// Every chunk through the late client's proxy is held this long (> TTL).
const DELAY_MS: u64 = TTL_MS + 1_500;

/// How one backend is reached: the late client (through `proxy`) and the
/// next holder (direct), plus a way to count the lock's keys.
struct Target {
    late: Client,
    next: Client,
    proxy: FaultProxy,
    keys: Box<dyn Fn() -> usize>,
}

pub fn run(mode: &Mode) -> Vec<ScenarioReport> {
    let trials = mode.pick(1, 3);
    let mut out = Vec::new();
    if super::wants("8a") {
        match EtcdServer::start() {
            Ok(etcd) => out.push(report("8a", "etcd", trials, || etcd_target(&etcd))),
            Err(e) => out.push(ScenarioReport::failed_to_run(
                "8a",
                TITLE,
                "etcd",
                &e.to_string(),
            )),
        }
    }
    if !mode.redis() {
        return out;
    }
    if super::wants("8b") {
        match RedisNodes::start(1, false) {
            Ok(nodes) => out.push(report("8b", "redis (webdis)", trials, || {
                redis_target(&nodes)
            })),
            Err(e) => out.push(ScenarioReport::failed_to_run(
                "8b",
                TITLE,
                "redis (webdis)",
                &e.to_string(),
            )),
        }
    }
    if super::wants("8d") {
        // 8b over TCP: the late release is a command delayed on a stream
        // that stays open (its deadline is longer than the delay).
        let started = std::time::Instant::now();
        let mut r = match RedisNodes::start_tcp(1, false) {
            Ok(nodes) => report("8d", "redis (tcp)", trials, || redis_target(&nodes)),
            Err(e) => ScenarioReport::failed_to_run("8d", TITLE, "redis (tcp)", &e.to_string()),
        };
        r.duration = started.elapsed();
        out.push(r);
    }
    if super::wants("8c") {
        match WorkerdHost::start(None) {
            Ok(host) => {
                let r = report(
                    "8c",
                    "durable-object (workerd, Worker front)",
                    trials,
                    || durable_target(&host),
                );
                out.push(r);
            }
            Err(e) => out.push(ScenarioReport::failed_to_run(
                "8c",
                TITLE,
                "durable-object",
                &e.to_string(),
            )),
        }
    }
    out
}

fn etcd_target(etcd: &EtcdServer) -> Result<Target, String> {
    let proxy = addr_of(&etcd.url())
        .and_then(FaultProxy::start)
        .map_err(|e| e.to_string())?;
    // The late client's requests must outlive the delay both ways.
    let late = BackendSpec::Etcd {
        endpoints: vec![proxy.url()],
        ttl_ms: TTL_MS,
        request_timeout_ms: 3 * DELAY_MS,
    }
    .client()
    .map_err(|e| e.to_string())?;
    let next = BackendSpec::Etcd {
        endpoints: vec![etcd.url()],
        ttl_ms: TTL_MS,
        request_timeout_ms: 2_000,
    }
    .client()
    .map_err(|e| e.to_string())?;
    let url = etcd.url();
    Ok(Target {
        late,
        next,
        proxy,
        keys: Box::new(move || {
            etcd_keys(&url, "edgelock/")
                .map(|k| k.len())
                .unwrap_or(usize::MAX)
        }),
    })
}

fn durable_target(host: &WorkerdHost) -> Result<Target, String> {
    let proxy = addr_of(&host.url())
        .and_then(FaultProxy::start)
        .map_err(|e| e.to_string())?;
    // No auto-extend for the late client: its lease must end in the object.
    let late = BackendSpec::Durable {
        url: format!("{}/lock", proxy.url().trim_end_matches('/')),
        token: WORKER_TOKEN.into(),
        ttl_ms: TTL_MS,
        request_timeout_ms: 3 * DELAY_MS,
        auto_extend: false,
    }
    .client()
    .map_err(|e| e.to_string())?;
    // The next holder waits about a lease in the service's queue: its grant,
    // held open longer than its own lease, is confirmed by an extend (see
    // src/core/durable/mod.rs), so the same lease as the late holder's works.
    let next = BackendSpec::Durable {
        url: host.front_url(),
        token: WORKER_TOKEN.into(),
        ttl_ms: TTL_MS,
        request_timeout_ms: 2_000,
        auto_extend: true,
    }
    .client()
    .map_err(|e| e.to_string())?;
    let probe = WorkerdHost::probe(&host.url());
    Ok(Target {
        late,
        next,
        proxy,
        keys: Box::new(move || {
            // The trial's lock is the only one held: count it by name.
            (0..3)
                .map(|i| match probe(&format!("late-{i}")) {
                    Some(true) => 1,
                    Some(false) => 0,
                    None => usize::MAX / 4,
                })
                .sum()
        }),
    })
}

/// The one node of `nodes` through a fault proxy and straight: webdis, or
/// the Redis protocol over TCP for nodes from `RedisNodes::start_tcp`.
fn redis_routes(nodes: &RedisNodes) -> Result<(FaultProxy, String, String), String> {
    if let Some(webdis) = nodes.webdis.first() {
        let proxy = addr_of(&webdis.url())
            .and_then(FaultProxy::start)
            .map_err(|e| e.to_string())?;
        let through = format!("webdis+{}", proxy.url());
        return Ok((proxy, through, format!("webdis+{}", webdis.url())));
    }
    let server = nodes.servers.first().ok_or("no server")?;
    let proxy = tcp_proxy(server).map_err(|e| e.to_string())?;
    let through = redis_url(&proxy);
    Ok((proxy, through, server.url()))
}

fn redis_target(nodes: &RedisNodes) -> Result<Target, String> {
    let (proxy, through, direct) = redis_routes(nodes)?;
    // No auto-extend for the late client: its lock must expire on the server.
    let mut cfg =
        RedisConfig::new(RedisNode::from_spec(&through, None).map_err(|e| e.to_string())?);
    cfg.ttl_ms = TTL_MS;
    cfg.request_timeout_ms = 3 * DELAY_MS;
    cfg.auto_extend = false;
    let late = Client::try_from_machine(Box::new(
        RedisMachine::new(cfg, Box::new(OsEntropy)).map_err(|e| e.to_string())?,
    ))
    .map_err(|e| e.to_string())?;
    let next = BackendSpec::Redis {
        node: direct,
        token: None,
        ttl_ms: TTL_MS,
        request_timeout_ms: 2_000,
    }
    .client()
    .map_err(|e| e.to_string())?;
    let servers: Vec<u16> = nodes.servers.iter().map(|s| s.port()).collect();
    Ok(Target {
        late,
        next,
        proxy,
        keys: Box::new(move || {
            servers
                .iter()
                .map(|p| {
                    edgelock_devtools::RespConn::connect(
                        format!("127.0.0.1:{p}"),
                        Duration::from_secs(2),
                    )
                    .and_then(|mut c| {
                        c.command(&[b"KEYS".as_slice(), b"{edgelock:late-*}".as_slice()])
                    })
                })
                .map(|r| match r {
                    Ok(edgelock_devtools::RespValue::Array(v)) => v.len(),
                    _ => usize::MAX,
                })
                .sum()
        }),
    })
}

#[derive(Default)]
struct Tally {
    trials: usize,
    next_key_survived: usize,
    late_release_said_not_held: usize,
    next_release_confirmed: usize,
    next_lost: usize,
    late_write_refused: usize,
    next_write_after_accepted: usize,
    /// Per trial: ms between the next holder's grant and the moment the
    /// late release reached the server (its answer's arrival minus the delay).
    release_after_grant_ms: Vec<f64>,
    errors: Vec<String>,
}

fn report(
    id: &str,
    backend: &str,
    trials: usize,
    target: impl Fn() -> Result<Target, String>,
) -> ScenarioReport {
    let mut r = ScenarioReport::new(id, TITLE, backend, &format!("the first holder's traffic delayed {DELAY_MS} ms (TTL {TTL_MS} ms) while it releases; the next holder is direct"));
    let mut t = Tally::default();
    for i in 0..trials {
        match target().and_then(|tg| one_trial(&tg, &format!("late-{i}"), &mut t)) {
            Ok(()) => t.trials += 1,
            Err(e) => t.errors.push(e),
        }
    }
    let of = |n: usize| format!("{n} of {}", t.trials);
    r.figure("trials", t.trials);
    r.figure(
        "next holder's key intact after the late release",
        of(t.next_key_survived),
    );
    r.figure(
        "late release answered",
        format!("not held in {}", of(t.late_release_said_not_held)),
    );
    r.figure(
        "late holder's write after its release refused",
        of(t.late_write_refused),
    );
    let margins: Vec<String> = t
        .release_after_grant_ms
        .iter()
        .map(|m| format!("{m:.0}"))
        .collect();
    r.figure(
        "late release reached the server after the next grant by (ms)",
        margins.join(", "),
    );
    r.check(
        "the release really arrived late (after the next grant)",
        !t.release_after_grant_ms.is_empty() && t.release_after_grant_ms.iter().all(|m| *m > 0.0),
        margins.join(", "),
    );
    r.check(
        "every trial ran",
        t.errors.is_empty() && t.trials == trials,
        if t.errors.is_empty() {
            "ok".to_string()
        } else {
            t.errors.join("; ")
        },
    );
    r.check(
        "the late release never deletes the next holder's key",
        t.trials > 0 && t.next_key_survived == t.trials,
        of(t.next_key_survived),
    );
    r.check(
        "the late release does not report the lock as held",
        t.late_release_said_not_held == t.trials,
        of(t.late_release_said_not_held),
    );
    r.check(
        "the next holder keeps its lock (not lost, release confirmed)",
        t.next_lost == 0 && t.next_release_confirmed == t.trials,
        format!(
            "lost {}, release confirmed {}",
            t.next_lost,
            of(t.next_release_confirmed)
        ),
    );
    r.check(
        "0 stale writes accepted (late holder refused, next holder accepted)",
        t.late_write_refused == t.trials && t.next_write_after_accepted == t.trials,
        format!(
            "refused {}, next accepted {}",
            of(t.late_write_refused),
            of(t.next_write_after_accepted)
        ),
    );
    r
}

fn one_trial(tg: &Target, name: &str, t: &mut Tally) -> Result<(), String> {
    let fenced = FencedResource::start().map_err(|e| e.to_string())?;
    let res = ResourceClient::new(&fenced.url());
    let first = tg
        .late
        .acquire_with(
            name,
            AcquireOptions {
                wait: Wait::Try,
                ttl_ms: None,
            },
            None,
        )
        .map_err(|e| e.to_string())?
        .ok_or("first acquire: not acquired")?;
    let first_token = first.fencing_token();
    if res.write(
        name,
        "late",
        first_token,
        &ResourceClient::next_write_id("late"),
    ) != crate::history::Outcome::Ok
    {
        return Err("the first holder's write was refused".into());
    }
    tg.proxy.set(Fault::Delay(Duration::from_millis(DELAY_MS)));
    let releasing = std::thread::spawn(move || {
        let answer = first.release();
        (answer, now_ms())
    });
    let next = tg
        .next
        .acquire_with(
            name,
            AcquireOptions {
                wait: Wait::For(4 * TTL_MS + DELAY_MS),
                ttl_ms: None,
            },
            None,
        )
        .map_err(|e| format!("next acquire: {e}"))?
        .ok_or("next acquire: not acquired")?;
    let granted_at = now_ms();
    let next_token = next.fencing_token();
    let _ = res.write(
        name,
        "next",
        next_token,
        &ResourceClient::next_write_id("next"),
    );
    let (late_answer, answered_at) = releasing
        .join()
        .map_err(|_| "release thread panicked".to_string())?;
    t.release_after_grant_ms
        .push(answered_at - DELAY_MS as f64 - granted_at);
    tg.proxy.set(Fault::Pass);
    // The late release has reached the server (its answer came back through
    // the same delay); give the server a beat, then look.
    std::thread::sleep(Duration::from_millis(200));
    if (tg.keys)() == 1 && !next.is_lost() {
        t.next_key_survived += 1;
    }
    if !matches!(late_answer, Ok(true)) {
        t.late_release_said_not_held += 1;
    }
    if res.write(
        name,
        "late",
        first_token,
        &ResourceClient::next_write_id("late"),
    ) == crate::history::Outcome::Fail("STALE".into())
    {
        t.late_write_refused += 1;
    }
    if res.write(
        name,
        "next",
        next_token,
        &ResourceClient::next_write_id("next"),
    ) == crate::history::Outcome::Ok
    {
        t.next_write_after_accepted += 1;
    }
    if next.is_lost() {
        t.next_lost += 1;
    }
    if matches!(next.release(), Ok(true)) {
        t.next_release_confirmed += 1;
    }
    Ok(())
}
