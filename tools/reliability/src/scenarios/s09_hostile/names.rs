//! Part 2: adversarial lock names against real servers (etcd, Redis through
//! webdis and through the Upstash gateway). Unrelated keys are seeded first
//! — including keys that look like edgelock keys of other names — then every
//! adversarial name is acquired (all held at once, so two names mapping to
//! one key would show as a collision) and released; afterwards every seeded
//! key must be unchanged (value, etcd mod revision, Redis TTL). Invalid names
//! must be rejected with INVALID_ARGUMENT before any request.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use edgelock::core::etcd::{EtcdConfig, EtcdMachine};
use edgelock::core::redis::{RedisConfig, RedisMachine, RedisNode, RedlockConfig, RedlockMachine};
use edgelock::core::{AcquireOptions, LockMachine, LockMachineExt, SeededEntropy, Wait};
use edgelock::native::{Client, OsEntropy};
use edgelock_devtools::{http_request, EtcdServer, RedisServer, RespValue, UpstashGateway, Webdis};
use serde_json::{json, Value};

use crate::infra::UPSTASH_TOKEN;

/// Valid names chosen to collide with something if keys were built or
/// escaped carelessly.
pub fn adversarial_names() -> Vec<String> {
    let mut v: Vec<String> = [
        "a}",
        "a}:fence",
        "a}:fence}",
        "a:fence",
        "{edgelock:a}",
        "{edgelock:a",
        "edgelock:a}",
        "a*",
        "*",
        "?",
        "a?",
        "[a]",
        "[",
        "a[b",
        "[a-z]*",
        "%",
        "%25",
        "%2F",
        "a%2Fb",
        "/",
        "a/",
        "/a",
        "a/b",
        "//",
        "..",
        "../a",
        "a/../b",
        ".",
        "a\r\nb",
        "\r\n",
        "\n",
        "{",
        "}",
        "{}",
        "}{",
        "ab}",
        "a b",
        " ",
        "\t",
        "+",
        "a+b",
        "a.raw",
        "x.json",
        "EVAL",
        "0",
        "1/2",
        "\"",
        "'",
        "\\",
        "é",
        "日本語",
        "🔒",
        "\u{202e}rtl",
        "\u{7f}",
        "\u{1}",
        "edgelock",
        "edgelock/a",
        "a\u{0301}",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    v.push("x".repeat(512));
    v.push("/".repeat(512));
    v.push("%".repeat(512));
    v.push("é".repeat(256));
    v
}

/// Names that must be refused before any request.
pub fn invalid_names() -> Vec<String> {
    vec![
        String::new(),
        "\0".into(),
        "a\0b".into(),
        "x".repeat(513),
        "é".repeat(257),
        "\0".repeat(512),
    ]
}

fn escape(name: &str) -> String {
    name.replace('%', "%25").replace('/', "%2F")
}

/// Keys on Redis that are not the lock or fence key of any adversarial name:
/// victims' lock keys and counters, prefix-sharing and glob-looking keys.
fn redis_seed_keys() -> Vec<String> {
    let mut v: Vec<String> = [
        "{edgelock:a}",
        "{edgelock:a}:fence",
        "{edgelock:ab}",
        "{edgelock:ab}:fence",
        "{edgelock:a/bc}",
        "{edgelock:job}",
        "{edgelock:a}}:x",
        "{edgelock:a}x",
        "x{edgelock:a}",
        "{edgelock:}",
        "{edgelock:*}:fence:x",
        "edgelock",
        "edgelock:a",
        "{edgelock:a",
        "edgelock:a}",
        "a",
        "*",
        "?",
        "[",
        "%",
        "/",
        "..",
        "job\r\n",
        "é",
        "{}",
        "{edgelock:a b}:x",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    v.push("k".repeat(1000));
    v.push(format!("{{edgelock:{}}}", "x".repeat(600)));
    v
}

/// Keys on etcd outside every adversarial name's range `edgelock/<escaped>/`.
fn etcd_seed_keys() -> Vec<String> {
    [
        "edgelock/a/694d",
        "edgelock/ab/1",
        "edgelock/a/b/1",
        "edgelock/a%2Fbc/1",
        "edgelock/a",
        "edgelock/",
        "edgelock0",
        "edgelocj/a/1",
        "other/a/1",
        "edgelock/b*/1",
        "edgelock/q?/1",
        "edgelock/a\r\nc/1",
        "edgelock/ü/1",
        "edgelock/%2/1",
        "edgelock/edgelocks/1",
        "a",
        "*",
        "/",
        "..",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

#[derive(Debug, Default)]
pub struct NameResults {
    pub names_tried: usize,
    pub acquired: usize,
    pub released: usize,
    /// Adversarial names that could not be acquired while the others were held.
    pub collisions: Vec<String>,
    pub errors: Vec<String>,
    pub seeded: usize,
    pub touched: Vec<String>,
    pub left_behind: Vec<String>,
    pub invalid_client_calls: usize,
    pub invalid_client_wrong: Vec<String>,
    pub gateway_requests_for_invalid: u64,
    pub harness: Vec<String>,
}

fn show(s: &str) -> String {
    format!("{:?}", s.chars().take(40).collect::<String>())
}

/// Acquires every adversarial name (all held at once), releases them, and
/// tries every invalid name.
fn exercise(client: &Client, label: &str, r: &mut NameResults) {
    let mut held = Vec::new();
    for name in adversarial_names() {
        r.names_tried += 1;
        match client.acquire_with(
            &name,
            AcquireOptions {
                wait: Wait::Try,
                ttl_ms: None,
            },
            None,
        ) {
            Ok(Some(lock)) => {
                r.acquired += 1;
                held.push(lock);
            }
            Ok(None) => r.collisions.push(format!("{label}: {}", show(&name))),
            Err(e) => r.errors.push(format!("{label}: {}: {e}", show(&name))),
        }
    }
    for lock in held {
        let name = lock.name().to_string();
        match lock.release() {
            Ok(true) => r.released += 1,
            Ok(false) => r.errors.push(format!(
                "{label}: {}: released but no longer held",
                show(&name)
            )),
            Err(e) => r
                .errors
                .push(format!("{label}: {}: release: {e}", show(&name))),
        }
    }
    for name in invalid_names() {
        r.invalid_client_calls += 1;
        match client.try_acquire(&name) {
            Err(e) if e.code() == "INVALID_ARGUMENT" => {}
            other => r.invalid_client_wrong.push(format!(
                "{label}: {}: {:?}",
                show(&name),
                other.map(|l| l.is_some())
            )),
        }
    }
}

// ---- Redis ---------------------------------------------------------------

/// key -> (value, PTTL).
type RedisSnapshot = BTreeMap<Vec<u8>, (Option<Vec<u8>>, i64)>;

fn redis_snapshot(redis: &RedisServer) -> Result<RedisSnapshot, String> {
    let mut conn = redis.connect().map_err(|e| e.to_string())?;
    let mut out = BTreeMap::new();
    for k in redis.all_keys().map_err(|e| e.to_string())? {
        let v = conn
            .command(&[&b"GET"[..], &k])
            .map_err(|e| e.to_string())?;
        let t = conn
            .command(&[&b"PTTL"[..], &k])
            .map_err(|e| e.to_string())?;
        out.insert(
            k,
            (
                v.as_bytes().map(<[u8]>::to_vec),
                t.as_int().unwrap_or(i64::MIN),
            ),
        );
    }
    Ok(out)
}

/// Seeded keys: every other one expires in a little over an hour.
const SEED_TTL_MS: i64 = 3_600_123;

fn seed_redis(redis: &RedisServer) -> Result<usize, String> {
    let mut conn = redis.connect().map_err(|e| e.to_string())?;
    let keys = redis_seed_keys();
    for (i, k) in keys.iter().enumerate() {
        let value = format!("seed-{i}");
        let reply = if i % 2 == 0 {
            conn.command(&["SET", k.as_str(), &value])
        } else {
            conn.command(&["SET", k.as_str(), &value, "PX", &SEED_TTL_MS.to_string()])
        };
        if !matches!(reply, Ok(RespValue::Simple(_))) {
            return Err(format!("seeding {k:?}: {reply:?}"));
        }
    }
    Ok(keys.len())
}

fn compare_redis(redis: &RedisServer, elapsed_ms: i64, r: &mut NameResults) {
    let after = match redis_snapshot(redis) {
        Ok(a) => a,
        Err(e) => return r.harness.push(format!("redis snapshot: {e}")),
    };
    let seeded = redis_seed_keys();
    for (i, k) in seeded.iter().enumerate() {
        let want = format!("seed-{i}").into_bytes();
        let ok = match after.get(k.as_bytes()) {
            Some((Some(v), ttl)) if *v == want => {
                if i % 2 == 0 {
                    *ttl == -1
                } else {
                    *ttl <= SEED_TTL_MS && *ttl >= SEED_TTL_MS - elapsed_ms - 2_000
                }
            }
            _ => false,
        };
        if !ok {
            r.touched.push(format!(
                "redis {}: now {:?}",
                show(k),
                after.get(k.as_bytes()).map(|(v, t)| (
                    v.as_ref().map(|v| String::from_utf8_lossy(v).into_owned()),
                    t
                ))
            ));
        }
    }
    // Fence counters of the adversarial names are meant to stay; nothing else may appear.
    let fences: Vec<String> = adversarial_names()
        .iter()
        .map(|n| format!("{{edgelock:{n}}}:fence"))
        .collect();
    for k in after.keys() {
        let k = String::from_utf8_lossy(k).into_owned();
        if !seeded.contains(&k) && !fences.contains(&k) {
            r.left_behind.push(format!("redis {}", show(&k)));
        }
    }
}

fn harness_checks(r: &mut NameResults) {
    for name in adversarial_names() {
        let lock = format!("{{edgelock:{name}}}");
        let fence = format!("{lock}:fence");
        for k in redis_seed_keys() {
            if k == lock || k == fence {
                r.harness.push(format!(
                    "seeded Redis key {} belongs to adversarial name {}",
                    show(&k),
                    show(&name)
                ));
            }
        }
        let range = format!("edgelock/{}/", escape(&name));
        for k in etcd_seed_keys() {
            if k.starts_with(&range) {
                r.harness.push(format!(
                    "seeded etcd key {} is in the range of {}",
                    show(&k),
                    show(&name)
                ));
            }
        }
    }
}

// ---- etcd ------------------------------------------------------------------

/// key -> (value, mod_revision, version, lease) of the whole keyspace.
fn etcd_snapshot(url: &str) -> Result<BTreeMap<Vec<u8>, Value>, String> {
    let body = json!({"key": B64.encode([0u8]), "range_end": B64.encode([0u8])}).to_string();
    let resp = http_request(
        "POST",
        &format!("{url}/v3/kv/range"),
        &[("content-type", "application/json")],
        body.as_bytes(),
        Duration::from_secs(3),
    )
    .map_err(|e| e.to_string())?;
    let v: Value = serde_json::from_slice(&resp.body).map_err(|e| e.to_string())?;
    let mut out = BTreeMap::new();
    for kv in v
        .get("kvs")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
    {
        let key = kv
            .get("key")
            .and_then(Value::as_str)
            .and_then(|k| B64.decode(k).ok())
            .unwrap_or_default();
        out.insert(
            key,
            json!([
                kv.get("value"),
                kv.get("mod_revision"),
                kv.get("version"),
                kv.get("lease")
            ]),
        );
    }
    Ok(out)
}

fn seed_etcd(url: &str) -> Result<usize, String> {
    for (i, k) in etcd_seed_keys().iter().enumerate() {
        let body =
            json!({"key": B64.encode(k.as_bytes()), "value": B64.encode(format!("seed-{i}"))})
                .to_string();
        let resp = http_request(
            "POST",
            &format!("{url}/v3/kv/put"),
            &[("content-type", "application/json")],
            body.as_bytes(),
            Duration::from_secs(3),
        )
        .map_err(|e| e.to_string())?;
        if resp.status != 200 {
            return Err(format!("seeding {k:?}: HTTP {}", resp.status));
        }
    }
    Ok(etcd_seed_keys().len())
}

fn compare_etcd(url: &str, before: &BTreeMap<Vec<u8>, Value>, r: &mut NameResults) {
    let after = match etcd_snapshot(url) {
        Ok(a) => a,
        Err(e) => return r.harness.push(format!("etcd snapshot: {e}")),
    };
    for (k, v) in before {
        if after.get(k) != Some(v) {
            r.touched.push(format!(
                "etcd {}: {v} -> {:?}",
                show(&String::from_utf8_lossy(k)),
                after.get(k)
            ));
        }
    }
    for k in after.keys().filter(|k| !before.contains_key(*k)) {
        r.left_behind
            .push(format!("etcd {}", show(&String::from_utf8_lossy(k))));
    }
}

/// Runs part 2 against freshly started servers.
pub fn run() -> NameResults {
    let mut r = NameResults::default();
    harness_checks(&mut r);
    match EtcdServer::start() {
        Ok(etcd) => {
            let url = etcd.url();
            let before = seed_etcd(&url).and_then(|n| {
                r.seeded += n;
                etcd_snapshot(&url)
            });
            match before {
                Ok(before) => {
                    let mut cfg = EtcdConfig::new(vec![url.clone()]);
                    cfg.request_timeout_ms = 3_000;
                    match Client::etcd(cfg) {
                        Ok(client) => {
                            exercise(&client, "etcd", &mut r);
                            let _ = client.close();
                        }
                        Err(e) => r.harness.push(format!("etcd client: {e}")),
                    }
                    compare_etcd(&url, &before, &mut r);
                }
                Err(e) => r.harness.push(format!("etcd seeding: {e}")),
            }
        }
        Err(e) => r.harness.push(format!("etcd start: {e}")),
    }
    let redis = match RedisServer::start() {
        Ok(s) => s,
        Err(e) => {
            r.harness.push(format!("redis start: {e}"));
            return r;
        }
    };
    let (webdis, gateway) = match (
        Webdis::start(&redis),
        UpstashGateway::start(&redis, UPSTASH_TOKEN),
    ) {
        (Ok(w), Ok(g)) => (w, g),
        (w, g) => {
            r.harness
                .push(format!("webdis/gateway start: {:?} {:?}", w.err(), g.err()));
            return r;
        }
    };
    let redis_started = Instant::now();
    match seed_redis(&redis) {
        Ok(n) => r.seeded += n,
        Err(e) => r.harness.push(e),
    }
    let nodes = [
        ("redis (webdis)", RedisNode::webdis(webdis.url())),
        (
            "redis (upstash)",
            RedisNode::upstash(gateway.url(), UPSTASH_TOKEN),
        ),
    ];
    for (label, node) in nodes {
        let client = RedisMachine::new(RedisConfig::new(node), Box::new(OsEntropy))
            .and_then(|m| Client::try_from_machine(Box::new(m)));
        match client {
            Ok(client) => {
                exercise(&client, label, &mut r);
                let _ = client.close();
            }
            Err(e) => r.harness.push(format!("{label} client: {e}")),
        }
    }
    // Invalid names on the upstash client once more, counting requests at the gateway.
    if let Ok(client) = RedisMachine::new(
        RedisConfig::new(RedisNode::upstash(gateway.url(), UPSTASH_TOKEN)),
        Box::new(OsEntropy),
    )
    .and_then(|m| Client::try_from_machine(Box::new(m)))
    {
        let before = gateway.request_count();
        for name in invalid_names() {
            let _ = client.try_acquire(&name);
            let _ = client.inspect(&name);
        }
        r.gateway_requests_for_invalid = gateway.request_count().saturating_sub(before);
        let _ = client.close();
    }
    compare_redis(
        &redis,
        i64::try_from(redis_started.elapsed().as_millis()).unwrap_or(i64::MAX),
        &mut r,
    );
    r
}

fn fresh_machine(kind: &str) -> Option<Box<dyn LockMachine>> {
    let e = || Box::new(SeededEntropy::new(1));
    Some(match kind {
        "etcd" => Box::new(
            EtcdMachine::new(EtcdConfig::new(vec!["http://127.0.0.1:1".into()]), e()).ok()?,
        ),
        "upstash" => Box::new(
            RedisMachine::new(
                RedisConfig::new(RedisNode::upstash("http://127.0.0.1:1", "t")),
                e(),
            )
            .ok()?,
        ),
        "webdis" => Box::new(
            RedisMachine::new(
                RedisConfig::new(RedisNode::webdis("http://127.0.0.1:1")),
                e(),
            )
            .ok()?,
        ),
        _ => {
            let nodes = vec![
                RedisNode::webdis("http://127.0.0.1:1"),
                RedisNode::upstash("http://127.0.0.1:2", "t"),
                RedisNode::webdis("http://127.0.0.1:3"),
            ];
            Box::new(RedlockMachine::new(RedlockConfig::new(nodes), e()).ok()?)
        }
    })
}

/// Invalid names (and TTLs) on fresh machines of every kind: each call must
/// fail with INVALID_ARGUMENT and emit no request. Returns (calls, calls
/// that emitted a request or left state, calls not rejected as INVALID_ARGUMENT).
pub fn invalid_on_machines() -> (usize, usize, Vec<String>) {
    let mut calls = 0;
    let mut requests = 0;
    let mut wrong = Vec::new();
    for label in ["etcd", "upstash", "webdis", "redlock"] {
        let Some(mut m) = fresh_machine(label) else {
            wrong.push(format!("{label}: harness could not build the machine"));
            continue;
        };
        let mut attempts: Vec<(String, AcquireOptions)> = invalid_names()
            .into_iter()
            .map(|n| {
                (
                    n,
                    AcquireOptions {
                        wait: Wait::Try,
                        ttl_ms: None,
                    },
                )
            })
            .collect();
        attempts.push((
            "ok-name".into(),
            AcquireOptions {
                wait: Wait::Try,
                ttl_ms: Some(0),
            },
        ));
        attempts.push((
            "ok-name".into(),
            AcquireOptions {
                wait: Wait::Try,
                ttl_ms: Some(u64::MAX),
            },
        ));
        for (name, opts) in attempts {
            for inspect in [false, true] {
                if inspect && opts.ttl_ms.is_some() {
                    continue;
                }
                calls += 1;
                let res = if inspect {
                    m.inspect(0, &name)
                } else {
                    m.acquire(0, &name, &opts)
                };
                match res {
                    Err(e) if e.code() == "INVALID_ARGUMENT" => {}
                    other => wrong.push(format!(
                        "{label} {} {}: {:?}",
                        if inspect { "inspect" } else { "acquire" },
                        show(&name),
                        other.map(|_| "accepted")
                    )),
                }
                let mut emitted = false;
                while m.poll_transmit().is_some() {
                    emitted = true;
                }
                if emitted || m.live_count() != 0 {
                    requests += 1;
                }
            }
        }
    }
    (calls, requests, wrong)
}
