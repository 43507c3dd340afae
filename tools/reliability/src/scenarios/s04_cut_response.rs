//! Scenario 4: the response to an acquire is lost after the backend applied
//! it. Variants, for an etcd client and a Redis (webdis) client:
//!
//! - **all answers cut** (`Fault::CutResponse` on the client's only
//!   endpoint: every request still reaches the server, every answer is cut);
//! - **answer cut, then partitioned** (a one-shot proxy below: the first
//!   answer is cut, after which nothing passes either way), so the client's
//!   cleanup cannot reach the backend and only the TTL removes the orphan;
//! - etcd only, **failover**: the first of three endpoints cuts answers; the
//!   retry on the next endpoint must adopt the key the cut attempt created
//!   (same nonce) rather than put a second one.
//!
//! 4f / 4g: the Redis variants over TCP (the Redis protocol on the native
//! driver's stream, the connection warmed up first): every answer cut, and
//! the acquire's reply cut mid-frame (its first half delivered) before a
//! partition.
//!
//! Must hold: the client never owns two keys at once (no blind re-acquire);
//! an acquire that never saw an answer ends with an error; the orphaned key
//! is gone within the TTL; a contender (started right after the cut) gets
//! the lock within TTL + slack; 0 stale writes accepted.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use edgelock_devtools::{http_request, EtcdOptions, Fault, FaultProxy, FencedResource};
use serde_json::{json, Value};

use super::s02_etcd_leader::{json_i64, secs};
use super::Mode;
use crate::backend::BackendSpec;
use crate::checker::check;
use crate::history::{now_ms, History, OpKind};
use crate::infra::addr_of;
use crate::infra::{etcd_keys, redis_lock_key, EtcdNodes, RedisNodes};
use crate::report::ScenarioReport;
use crate::resource::ResourceClient;
use crate::workload::{acquire, hold_and_release, ContenderCfg};

const TITLE: &str = "response lost after apply";
const TTL_MS: u64 = 3_000;
const REQUEST_TIMEOUT_MS: u64 = 1_000;
/// Scheduling noise on a shared 2-core machine plus etcd's lease-expiry
/// sweep (every 500 ms), on top of the TTL.
const SLACK_MS: f64 = 2_000.0;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Cut {
    /// Every answer cut (requests still applied).
    All,
    /// The first answer cut, then nothing passes.
    ThenPartition,
    /// Every answer of the first of three endpoints cut.
    FirstOfThree,
    /// The first answer cut mid-frame (its first half delivered, then the
    /// connection closed), then nothing passes.
    MidFrameThenPartition,
}

impl Cut {
    fn describe(self) -> &'static str {
        match self {
            Cut::All => {
                "CutResponse on the client's only endpoint (every answer lost, requests applied)"
            }
            Cut::ThenPartition => {
                "the acquire's answer cut, then the client partitioned (cleanup cannot reach)"
            }
            Cut::FirstOfThree => "CutResponse on the first of the client's 3 endpoints",
            Cut::MidFrameThenPartition => {
                "the acquire's reply cut mid-frame (its first half delivered), then the client partitioned (cleanup cannot reach)"
            }
        }
    }
}

pub fn run(mode: &Mode) -> Vec<ScenarioReport> {
    let mut out = Vec::new();
    // The variants `--variants` chose (every one by default).
    let chosen = |vs: Vec<(&'static str, Cut)>| -> Vec<(&'static str, Cut)> {
        vs.into_iter().filter(|(id, _)| super::wants(id)).collect()
    };
    let etcd = chosen(vec![
        ("4a", Cut::All),
        ("4b", Cut::ThenPartition),
        ("4c", Cut::FirstOfThree),
    ]);
    match (!etcd.is_empty()).then(|| EtcdNodes::start(3, EtcdOptions::default())) {
        None => {}
        Some(Ok(nodes)) => {
            for &(id, cut) in &etcd {
                let started = Instant::now();
                let mut r = etcd_cut(&nodes, id, cut)
                    .unwrap_or_else(|e| ScenarioReport::failed_to_run(id, TITLE, "etcd", &e));
                r.duration = started.elapsed();
                out.push(r);
            }
        }
        Some(Err(e)) => out.extend(etcd.iter().map(|(id, _)| {
            ScenarioReport::failed_to_run(id, TITLE, "etcd", &format!("etcd cluster: {e}"))
        })),
    }
    if !mode.redis() {
        return out;
    }
    let redis = chosen(vec![("4d", Cut::All), ("4e", Cut::ThenPartition)]);
    if !redis.is_empty() {
        redis_variants(
            &mut out,
            "redis (webdis)",
            RedisNodes::start(1, false),
            &redis,
        );
    }
    // Over TCP (the Redis protocol on the native driver's stream).
    let tcp = chosen(vec![("4f", Cut::All), ("4g", Cut::MidFrameThenPartition)]);
    if !tcp.is_empty() {
        redis_variants(
            &mut out,
            "redis (tcp)",
            RedisNodes::start_tcp(1, false),
            &tcp,
        );
    }
    out
}

/// Each of `variants` on the one node of `nodes` (webdis, or TCP for nodes
/// from `RedisNodes::start_tcp`).
fn redis_variants(
    out: &mut Vec<ScenarioReport>,
    backend: &str,
    nodes: std::io::Result<RedisNodes>,
    variants: &[(&str, Cut)],
) {
    match nodes {
        Ok(nodes) => {
            for (id, cut) in variants {
                let started = Instant::now();
                let mut r = redis_cut(&nodes, id, *cut)
                    .unwrap_or_else(|e| ScenarioReport::failed_to_run(id, TITLE, backend, &e));
                r.duration = started.elapsed();
                out.push(r);
            }
        }
        Err(e) => out.extend(variants.iter().map(|(id, _)| {
            ScenarioReport::failed_to_run(id, TITLE, backend, &format!("redis: {e}"))
        })),
    }
}

// ---- the client's front: a fault proxy or the one-shot cut proxy ---------

enum Front {
    Fault(FaultProxy),
    Once(CutOnceProxy),
}

impl Front {
    fn start(upstream: SocketAddr, cut: Cut) -> std::io::Result<Front> {
        Ok(match cut {
            Cut::ThenPartition | Cut::MidFrameThenPartition => {
                Front::Once(CutOnceProxy::start(upstream)?)
            }
            Cut::All | Cut::FirstOfThree => Front::Fault(FaultProxy::start(upstream)?),
        })
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr())
    }

    fn addr(&self) -> SocketAddr {
        match self {
            Front::Fault(p) => p.addr(),
            Front::Once(p) => p.addr,
        }
    }

    fn arm(&self, cut: Cut) {
        match self {
            Front::Fault(p) => p.set(Fault::CutResponse),
            Front::Once(p) if cut == Cut::MidFrameThenPartition => {
                p.mode.store(CUT_MID_NEXT, Ordering::SeqCst)
            }
            Front::Once(p) => p.mode.store(CUT_NEXT, Ordering::SeqCst),
        }
    }

    /// The answer the one-shot proxy cut: (bytes delivered, of).
    fn cut_at(&self) -> Option<(usize, usize)> {
        match self {
            Front::Fault(_) => None,
            Front::Once(p) => *p.cut.lock().unwrap_or_else(|e| e.into_inner()),
        }
    }

    fn heal(&self) {
        match self {
            Front::Fault(p) => p.set(Fault::Pass),
            Front::Once(p) => p.mode.store(PASS, Ordering::SeqCst),
        }
    }
}

const PASS: u8 = 0;
const CUT_NEXT: u8 = 1;
const BLACKHOLE: u8 = 2;
/// As `CUT_NEXT`, but the first half of that answer's bytes go through.
const CUT_MID_NEXT: u8 = 3;

/// A TCP proxy that, once armed, cuts the first answer coming back (after
/// the server applied the request) and then lets nothing through either way
/// — "the reply was lost, then the network went" — which devtools'
/// `FaultProxy` cannot express atomically.
struct CutOnceProxy {
    addr: SocketAddr,
    mode: Arc<AtomicU8>,
    /// The answer it cut: (bytes delivered, bytes of the chunk read).
    cut: Arc<Mutex<Option<(usize, usize)>>>,
    stop: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<TcpStream>>>,
    accept: Option<JoinHandle<()>>,
}

impl CutOnceProxy {
    fn start(upstream: SocketAddr) -> std::io::Result<CutOnceProxy> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let (mode, stop, conns) = (
            Arc::new(AtomicU8::new(PASS)),
            Arc::new(AtomicBool::new(false)),
            Arc::new(Mutex::new(Vec::new())),
        );
        let cut: Arc<Mutex<Option<(usize, usize)>>> = Arc::default();
        let (m, s, c, k) = (mode.clone(), stop.clone(), conns.clone(), cut.clone());
        let accept = std::thread::spawn(move || {
            for client in listener.incoming() {
                if s.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect_timeout(&upstream, Duration::from_secs(2))
                else {
                    continue;
                };
                if let (Ok(a), Ok(b)) = (client.try_clone(), server.try_clone()) {
                    c.lock().unwrap_or_else(|p| p.into_inner()).extend([a, b]);
                }
                let (Ok(cr), Ok(sw), Ok(sr), Ok(cw)) = (
                    client.try_clone(),
                    server.try_clone(),
                    server.try_clone(),
                    client.try_clone(),
                ) else {
                    continue;
                };
                let (m1, m2, k2) = (m.clone(), m.clone(), k.clone());
                std::thread::spawn(move || pump(cr, sw, &m1, None));
                std::thread::spawn(move || pump(sr, cw, &m2, Some(&k2)));
            }
        });
        Ok(CutOnceProxy {
            addr,
            mode,
            cut,
            stop,
            conns,
            accept: Some(accept),
        })
    }
}

/// `cut`: on the answers' side, where the cut answer's split is recorded.
fn pump(
    mut from: TcpStream,
    mut to: TcpStream,
    mode: &AtomicU8,
    cut: Option<&Mutex<Option<(usize, usize)>>>,
) {
    let response = cut.is_some();
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        match mode.load(Ordering::SeqCst) {
            BLACKHOLE => continue,
            armed @ (CUT_NEXT | CUT_MID_NEXT) if response => {
                if mode
                    .compare_exchange(armed, BLACKHOLE, Ordering::SeqCst, Ordering::SeqCst)
                    .is_ok()
                {
                    // A frame cut in the middle: its head arrives.
                    let head = if armed == CUT_MID_NEXT {
                        n.div_ceil(2).min(n - 1).max(1)
                    } else {
                        0
                    };
                    let _ = to.write_all(&buf[..head]);
                    if let Some(c) = cut {
                        *c.lock().unwrap_or_else(|p| p.into_inner()) = Some((head, n));
                    }
                    let _ = from.shutdown(Shutdown::Both);
                    let _ = to.shutdown(Shutdown::Both);
                    return;
                }
                continue;
            }
            _ => {}
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

impl Drop for CutOnceProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for c in self
            .conns
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
        {
            let _ = c.shutdown(Shutdown::Both);
        }
        let _ = TcpStream::connect(self.addr);
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
    }
}

// ---- observation helpers --------------------------------------------------

/// (wall ms, what was seen).
type Samples = Vec<(f64, BTreeSet<String>)>;

/// Samples a set of keys (or owner values) every 10 ms on a thread.
struct KeyWatch {
    stop: Arc<AtomicBool>,
    samples: Arc<Mutex<Samples>>,
    thread: JoinHandle<()>,
}

impl KeyWatch {
    fn start(mut read: impl FnMut() -> Option<BTreeSet<String>> + Send + 'static) -> KeyWatch {
        let stop = Arc::new(AtomicBool::new(false));
        let samples = Arc::new(Mutex::new(Vec::new()));
        let (s, out) = (stop.clone(), samples.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                if let Some(keys) = read() {
                    out.lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push((now_ms(), keys));
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        KeyWatch {
            stop,
            samples,
            thread,
        }
    }

    fn finish(self) -> Samples {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.thread.join();
        std::mem::take(&mut *self.samples.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// Most entries other than `except` seen at once, and the last time one was seen.
fn orphan_stats(
    samples: &[(f64, BTreeSet<String>)],
    except: &BTreeSet<String>,
) -> (usize, Option<f64>) {
    let mut most = 0;
    let mut last = None;
    for (t, keys) in samples {
        let n = keys.iter().filter(|k| !except.contains(*k)).count();
        most = most.max(n);
        if n > 0 {
            last = Some(*t);
        }
    }
    (most, last)
}

/// Distinct entries other than `except` over the whole run.
fn distinct(samples: &[(f64, BTreeSet<String>)], except: &BTreeSet<String>) -> usize {
    samples
        .iter()
        .flat_map(|(_, k)| k.iter())
        .filter(|k| !except.contains(*k))
        .collect::<BTreeSet<_>>()
        .len()
}

fn etcd_post(url: &str, path: &str, body: &str) -> Option<Value> {
    let r = http_request(
        "POST",
        &format!("{url}{path}"),
        &[("content-type", "application/json")],
        body.as_bytes(),
        Duration::from_secs(2),
    )
    .ok()?;
    serde_json::from_slice(&r.body).ok()
}

/// etcd's current revision (every put and delete raises it; lease grants do not).
fn etcd_revision(url: &str) -> Option<i64> {
    json_i64(
        etcd_post(url, "/v3/kv/range", r#"{"key":"AA=="}"#)?
            .get("header")?
            .get("revision")?,
    )
}

/// The create revision of `key`, if it exists.
fn etcd_create_revision(url: &str, key: &str) -> Option<i64> {
    use base64::engine::general_purpose::STANDARD;
    use base64::Engine as _;
    let v = etcd_post(
        url,
        "/v3/kv/range",
        &json!({ "key": STANDARD.encode(key.as_bytes()) }).to_string(),
    )?;
    json_i64(v.get("kvs")?.as_array()?.first()?.get("create_revision")?)
}

/// What the contender got: when (wall ms), its key and owner value.
#[derive(Default)]
struct Granted {
    at: Option<f64>,
    key: Option<String>,
    owner: Option<String>,
}

/// A contender on direct endpoints, on its own thread: waits for the lock,
/// writes under its token, releases.
fn contender(
    spec: &BackendSpec,
    lock: &str,
    resource: &ResourceClient,
    history: &History,
    wait_ms: u64,
) -> JoinHandle<Granted> {
    let (spec, resource, history) = (spec.clone(), resource.clone(), history.clone());
    let cfg = ContenderCfg {
        wait_ms,
        hold_ms: 100,
        writes_per_hold: 2,
        ..ContenderCfg::new("contender", lock)
    };
    std::thread::spawn(move || {
        let Ok(client) = spec.client() else {
            return Granted::default();
        };
        let out = match acquire(&client, &cfg, &history) {
            Some(l) => {
                let g = Granted {
                    at: Some(now_ms()),
                    key: Some(l.handle().key.clone()),
                    owner: Some(l.handle().owner.clone()),
                };
                hold_and_release(l, &cfg, &resource, &history);
                g
            }
            None => Granted::default(),
        };
        let _ = client.close();
        out
    })
}

/// Lets the cut request reach the server before the contender queues up.
const CONTENDER_DELAY: Duration = Duration::from_millis(200);

/// `last_seen`: when the cut client's orphaned key was last seen (`None`:
/// never), or `None` when no orphan is expected (the acquire was granted).
fn common_checks(
    r: &mut ScenarioReport,
    t0: f64,
    granted: &Granted,
    orphan: Option<Option<f64>>,
    stale: (usize, usize, usize),
) {
    if let Some(last_seen) = orphan {
        let lifetime = last_seen.map(|t| t - t0);
        r.check(
            "the orphaned key lives ≤ TTL",
            lifetime.map_or(true, |l| l <= TTL_MS as f64 + SLACK_MS),
            format!(
                "last seen {} after the cut acquire began (TTL {TTL_MS} ms + {SLACK_MS} ms slack)",
                lifetime.map_or("never".into(), secs)
            ),
        );
        r.figure(
            "orphaned key survived",
            last_seen.map_or("not seen by the 10 ms sampler".into(), |t| secs(t - t0)),
        );
    }
    r.check(
        "a contender gets the lock within TTL + slack",
        granted
            .at
            .is_some_and(|g| g - t0 <= TTL_MS as f64 + SLACK_MS),
        format!(
            "granted {} after the cut acquire began",
            granted.at.map_or("never".into(), |g| secs(g - t0))
        ),
    );
    r.check(
        "0 stale writes accepted",
        stale.0 == 0,
        format!("{} accepted, {} stale rejected", stale.1, stale.2),
    );
    r.figure(
        "contender granted after",
        granted.at.map_or("never".into(), |g| secs(g - t0)),
    );
}

/// One acquire and release of `<lock>-warmup`, before the fault is armed.
fn warm_up(client: &edgelock::native::Client, lock: &str) -> Result<(), String> {
    client
        .acquire(&format!("{lock}-warmup"), Some(Duration::from_secs(5)))
        .and_then(|l| l.release())
        .map(drop)
        .map_err(|e| format!("warm-up: {e}"))
}

/// That the one-shot proxy cut the reply inside its frame (`cut_at`: bytes
/// delivered, of the chunk read).
fn mid_frame_check(r: &mut ScenarioReport, cut_at: Option<(usize, usize)>) {
    r.check(
        "the reply was cut inside its frame (some, not all, of its bytes delivered)",
        cut_at.is_some_and(|(head, n)| head > 0 && head < n),
        cut_at.map_or("no reply cut".into(), |(head, n)| {
            format!("{head} of {n} bytes delivered")
        }),
    );
}

// ---- etcd -----------------------------------------------------------------

fn etcd_cut(nodes: &EtcdNodes, id: &str, cut: Cut) -> Result<ScenarioReport, String> {
    let urls = nodes.cluster.urls();
    let mut r = ScenarioReport::new(id, TITLE, "etcd", cut.describe());
    let front = Front::start(addr_of(&urls[0]).map_err(|e| e.to_string())?, cut)
        .map_err(|e| format!("proxy: {e}"))?;
    let endpoints = if cut == Cut::FirstOfThree {
        vec![front.url(), urls[1].clone(), urls[2].clone()]
    } else {
        vec![front.url()]
    };
    let n = endpoints.len();
    let spec = BackendSpec::Etcd {
        endpoints,
        ttl_ms: TTL_MS,
        request_timeout_ms: REQUEST_TIMEOUT_MS,
    };
    let direct = BackendSpec::Etcd {
        endpoints: urls.clone(),
        ttl_ms: TTL_MS,
        request_timeout_ms: REQUEST_TIMEOUT_MS,
    };
    let fenced = FencedResource::start().map_err(|e| format!("fenced resource: {e}"))?;
    let resource = ResourceClient::new(&fenced.url());
    let history = History::new();
    let lock = format!("s4-{id}");
    let prefix = format!("edgelock/{lock}/");

    let client = spec.client().map_err(|e| format!("client: {e}"))?;
    // Warm up: with the session lease granted, the first request of the
    // acquire (the one whose answer is cut) is its txn.
    warm_up(&client, &lock)?;

    let (watch_url, p) = (urls[1].clone(), prefix.clone());
    let watch = KeyWatch::start(move || {
        etcd_keys(&watch_url, &p)
            .ok()
            .map(|k| k.into_iter().collect())
    });
    let rev_before = etcd_revision(&urls[1]);
    front.arm(cut);
    let t0 = now_ms();
    let contender = {
        let (direct, lock, resource, history) = (
            direct.clone(),
            lock.clone(),
            resource.clone(),
            history.clone(),
        );
        std::thread::spawn(move || {
            std::thread::sleep(CONTENDER_DELAY);
            contender(&direct, &lock, &resource, &history, TTL_MS + 4_000)
                .join()
                .unwrap_or_default()
        })
    };
    let cfg = ContenderCfg {
        wait_ms: 2_000,
        hold_ms: 100,
        ..ContenderCfg::new("cut-client", &lock)
    };
    let got = acquire(&client, &cfg, &history);
    let t_returned = now_ms();
    // Only meaningful before the contender starts writing keys of its own.
    let rev_returned = (t_returned - t0 < CONTENDER_DELAY.as_millis() as f64 - 20.0)
        .then(|| etcd_revision(&urls[1]))
        .flatten();
    let mut own_key = None;
    if let Some(l) = got {
        let key = l.handle().key.clone();
        let keys = etcd_keys(&urls[1], &prefix).unwrap_or_default();
        let create = etcd_create_revision(&urls[1], &key);
        let theirs = keys.iter().filter(|k| **k != key).count();
        let ok = keys.contains(&key) && create == Some(l.fencing_token() as i64);
        own_key = Some((ok, format!("own key present with create revision {create:?} = token {}; {theirs} other key(s) queued", l.fencing_token())));
        hold_and_release(l, &cfg, &resource, &history);
    }
    let granted = contender.join().unwrap_or_default();
    std::thread::sleep(Duration::from_millis(200));
    let samples = watch.finish();
    front.heal();
    let recovered = client
        .acquire(&format!("{lock}-after"), Some(Duration::from_secs(5)))
        .and_then(|l| l.release());
    let _ = client.close();

    let ops = history.ops();
    let v = check(&ops, &fenced.log(None));
    let except: BTreeSet<String> = granted.key.iter().cloned().collect();
    let (most, last_seen) = orphan_stats(&samples, &except);
    let acquire_op = ops
        .iter()
        .find(|o| o.client == "cut-client" && o.kind == OpKind::Acquire);
    let outcome = acquire_op.map_or("?".to_string(), |o| format!("{:?}", o.outcome));
    r.check(
        "the client never owns two keys (no blind re-acquire)",
        most <= 1,
        format!(
            "at most {most} key(s) of the cut client at once, {} distinct ({} samples)",
            distinct(&samples, &except),
            samples.len()
        ),
    );
    let adopted = own_key.is_some();
    match (cut, own_key) {
        (Cut::FirstOfThree, Some((ok, detail))) => r.check(
            "the retry adopts the key the cut attempt created (token = its create revision)",
            ok,
            detail,
        ),
        (Cut::FirstOfThree, None) => r.note(format!(
            "The acquire failed over but was not granted ({outcome})."
        )),
        (_, granted_anyway) => r.check(
            "an acquire that saw no answer ends with an error",
            granted_anyway.is_none() && acquire_op.is_some_and(|o| !o.is_ok()),
            outcome.clone(),
        ),
    }
    common_checks(
        &mut r,
        t0,
        &granted,
        if adopted { None } else { Some(last_seen) },
        (v.stale_accepted, v.writes_accepted, v.stale_rejected),
    );
    r.figure(
        "cut client's acquire",
        format!(
            "{outcome} after {} (request bound {n}+1 attempts × {REQUEST_TIMEOUT_MS} ms)",
            secs(t_returned - t0)
        ),
    );
    if let (Some(a), Some(b)) = (rev_before, rev_returned) {
        r.figure(
            "etcd revisions written by the cut client's acquire (puts + deletes)",
            b - a,
        );
    }
    r.figure(
        "client usable once answers flow again",
        if recovered.is_ok() {
            "yes".to_string()
        } else {
            format!("no: {recovered:?}")
        },
    );
    Ok(r)
}

// ---- Redis ----------------------------------------------------------------

/// The client's URL for a front at `addr` (webdis, or the Redis protocol),
/// and the node's own.
struct NodeUrls {
    upstream: SocketAddr,
    direct: String,
    through: fn(SocketAddr) -> String,
}

/// Nodes from `RedisNodes::start_tcp` (no webdis) are reached over TCP.
fn node_urls(nodes: &RedisNodes) -> Result<NodeUrls, String> {
    if let Some(webdis) = nodes.webdis.first() {
        return Ok(NodeUrls {
            upstream: addr_of(&webdis.url()).map_err(|e| e.to_string())?,
            direct: format!("webdis+{}", webdis.url()),
            through: |a| format!("webdis+http://{a}"),
        });
    }
    let server = nodes.servers.first().ok_or("no server")?;
    Ok(NodeUrls {
        upstream: server.addr().parse().map_err(|e| format!("{e}"))?,
        direct: server.url(),
        through: |a| format!("redis://{a}"),
    })
}

fn redis_cut(nodes: &RedisNodes, id: &str, cut: Cut) -> Result<ScenarioReport, String> {
    let urls = node_urls(nodes)?;
    let tcp = nodes.webdis.is_empty();
    let backend = if tcp { "redis (tcp)" } else { "redis (webdis)" };
    let mut r = ScenarioReport::new(id, TITLE, backend, cut.describe());
    let front = Front::start(urls.upstream, cut).map_err(|e| format!("proxy: {e}"))?;
    let fenced = FencedResource::start().map_err(|e| format!("fenced resource: {e}"))?;
    let resource = ResourceClient::new(&fenced.url());
    let history = History::new();
    let lock = format!("s4-{id}");
    let key = redis_lock_key(&lock);
    let spec_of = |node: String| BackendSpec::Redis {
        node,
        token: None,
        ttl_ms: TTL_MS,
        request_timeout_ms: REQUEST_TIMEOUT_MS,
    };
    let cut_spec = spec_of((urls.through)(front.addr()));
    let direct = spec_of(urls.direct);
    let client = cut_spec.client().map_err(|e| format!("client: {e}"))?;
    let server = nodes.servers.first().ok_or("no server")?;
    if tcp {
        // Warm up: the connection open and set up, the script cached, so
        // the answer cut is the acquire's own (a cut set-up reply would
        // leave the acquire unsent).
        warm_up(&client, &lock)?;
    }

    // Sample the lock key's owner value: a second value of the cut client
    // would be a second grant.
    let mut conn = server
        .connect()
        .map_err(|e| format!("redis connection: {e}"))?;
    let k = key.clone();
    let watch = KeyWatch::start(move || {
        Some(
            conn.command(&[b"GET", k.as_bytes()])
                .ok()?
                .as_text()
                .into_iter()
                .collect(),
        )
    });
    front.arm(cut);
    let t0 = now_ms();
    let contender = {
        let (direct, lock, resource, history) = (
            direct.clone(),
            lock.clone(),
            resource.clone(),
            history.clone(),
        );
        std::thread::spawn(move || {
            std::thread::sleep(CONTENDER_DELAY);
            contender(&direct, &lock, &resource, &history, TTL_MS + 4_000)
                .join()
                .unwrap_or_default()
        })
    };
    let cfg = ContenderCfg {
        wait_ms: 2_000,
        ..ContenderCfg::new("cut-client", &lock)
    };
    let got = acquire(&client, &cfg, &history);
    let t_returned = now_ms();
    let granted_cut = got.is_some();
    drop(got);
    let granted = contender.join().unwrap_or_default();
    std::thread::sleep(Duration::from_millis(200));
    let samples = watch.finish();
    let cut_at = front.cut_at();
    front.heal();
    let _ = client.close();

    let ops = history.ops();
    let v = check(&ops, &fenced.log(None));
    let except: BTreeSet<String> = granted.owner.iter().cloned().collect();
    let (_, last_seen) = orphan_stats(&samples, &except);
    let owners = distinct(&samples, &except);
    let acquire_op = ops
        .iter()
        .find(|o| o.client == "cut-client" && o.kind == OpKind::Acquire);
    let outcome = acquire_op.map_or("?".to_string(), |o| format!("{:?}", o.outcome));
    r.check(
        "an acquire that saw no answer ends with an error",
        !granted_cut && acquire_op.is_some_and(|o| !o.is_ok()),
        outcome.clone(),
    );
    r.check(
        "the client never owns two keys (no blind re-acquire)",
        owners <= 1,
        format!(
            "{owners} owner value(s) of the cut client seen on the lock key ({} samples)",
            samples.len()
        ),
    );
    common_checks(
        &mut r,
        t0,
        &granted,
        Some(last_seen),
        (v.stale_accepted, v.writes_accepted, v.stale_rejected),
    );
    r.figure(
        "cut client's acquire",
        format!(
            "{outcome} after {} (request timeout {REQUEST_TIMEOUT_MS} ms)",
            secs(t_returned - t0)
        ),
    );
    if cut == Cut::MidFrameThenPartition {
        mid_frame_check(&mut r, cut_at);
    }
    Ok(r)
}
