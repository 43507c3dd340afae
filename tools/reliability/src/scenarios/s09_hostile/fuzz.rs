//! Part 1: mutated backend replies through every codec, via the public
//! sans-IO machine API (the real decode paths), each session under
//! `catch_unwind`. Replies start VALID (from `models`) so that sessions walk
//! deep into each protocol (grant, wait, watch, renew, release, close) before
//! a hostile reply hits; every hostile body is also fed to the public
//! decoder functions directly.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;

use edgelock::core::d1::{D1Config, BATCH_PATH};
use edgelock::core::durable::{DurableConfig, DurableEndpoint};
use edgelock::core::etcd::{EtcdConfig, EtcdMachine};
use edgelock::core::redis::{
    RedisConfig, RedisMachine, RedisNode, RedisProtocol, RedlockConfig, RedlockFencing,
    RedlockMachine,
};
use edgelock::core::{
    AcquireOptions, BackendSpec, Event, HttpRequest, Input, LockHandle, LockId, LockMachine,
    LockMachineExt, OpId, Outcome, SeededEntropy, Target, Transmit, Wait,
};
use edgelock::internals::d1::codec as d1_codec;
use edgelock::internals::durable::codec as durable_codec;
use edgelock::internals::json_stream::JsonObjectSplitter;
use edgelock::internals::redis::resp::RespDecoder;
use edgelock::internals::redis::subscription::PushDecoder;
use edgelock::internals::redis::{scripts, upstash, webdis};
use edgelock::internals::sse_stream::SseSplitter;

use super::models::{
    subscription_channel, D1Model, DurableModel, EtcdModel, Proto, RedisModel, Reply,
};
use super::mutate::{deliver, mutate_body};
use super::panics::{in_case, take_last_panic};
use super::rng::{mix, Rng};
use super::{leak_count, SENTINEL};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Codec {
    Etcd,
    Upstash,
    Webdis,
    Redlock,
    Durable,
    D1,
}

impl Codec {
    pub const ALL: [Codec; 6] = [
        Codec::Etcd,
        Codec::Upstash,
        Codec::Webdis,
        Codec::Redlock,
        Codec::Durable,
        Codec::D1,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Codec::Etcd => "etcd gateway JSON (EtcdMachine)",
            Codec::Upstash => "Upstash REST (RedisMachine)",
            Codec::Webdis => "Webdis (RedisMachine)",
            Codec::Redlock => "Upstash + Webdis (RedlockMachine)",
            Codec::Durable => "Durable Object lock service API v1 (durable-object)",
            Codec::D1 => "D1 batch binding (d1)",
        }
    }
}

/// Inputs per session, and the step after which the session is closed.
const MAX_STEPS: usize = 60;
const CLOSE_AT: usize = 40;
const NAMES: &[&str] = &["a", "jobs/nightly", "x%2Fy", "ü", "a}b"];

#[derive(Clone, Debug, Default)]
pub struct Stats {
    pub sessions: u64,
    pub inputs: u64,
    pub hostile: u64,
    pub panics: u64,
    pub samples: Vec<String>,
    pub acquired: u64,
    pub released: u64,
    pub lost: u64,
    pub failed: u64,
    pub direct_calls: u64,
    pub error_texts: u64,
    pub sentinel_hits: u64,
    pub sentinel_fragments: u64,
    pub leak_samples: Vec<String>,
    pub foreign_urls: u64,
    pub closed: u64,
    /// Subscription requests (Redis push wake-up) answered, and of those
    /// answered with a hostile push stream (`push::hostile_stream`).
    pub subscriptions: u64,
    pub hostile_push_streams: u64,
    /// Error / loss texts holding a lock owner of the session (the
    /// `durable-object` and `d1` clients' credential: 32 hex characters
    /// sent in every request body, echoed back by hostile replies).
    pub owner_hits: u64,
    /// The owners the current session's requests carried (per session,
    /// not merged).
    pub session_owners: Vec<String>,
    pub elapsed: Duration,
}

impl Stats {
    pub fn merge(&mut self, o: &Stats) {
        self.sessions += o.sessions;
        self.inputs += o.inputs;
        self.hostile += o.hostile;
        self.panics += o.panics;
        self.acquired += o.acquired;
        self.released += o.released;
        self.lost += o.lost;
        self.failed += o.failed;
        self.direct_calls += o.direct_calls;
        self.error_texts += o.error_texts;
        self.sentinel_hits += o.sentinel_hits;
        self.sentinel_fragments += o.sentinel_fragments;
        self.foreign_urls += o.foreign_urls;
        self.closed += o.closed;
        self.subscriptions += o.subscriptions;
        self.hostile_push_streams += o.hostile_push_streams;
        self.owner_hits += o.owner_hits;
        self.elapsed = self.elapsed.max(o.elapsed);
        for s in &o.samples {
            let site = s
                .split(" at ")
                .nth(1)
                .and_then(|r| r.split(';').next())
                .unwrap_or("");
            if self.samples.len() < 8
                && !self
                    .samples
                    .iter()
                    .any(|x| x.contains(&format!(" at {site};")))
            {
                self.samples.push(s.clone());
            }
        }
        for s in &o.leak_samples {
            if self.leak_samples.len() < 5 {
                self.leak_samples.push(s.clone());
            }
        }
    }
}

// ---- one session -------------------------------------------------------------

struct World {
    codec: Codec,
    etcd: EtcdModel,
    redis: Vec<(String, Proto, RedisModel)>,
    /// The lock service and its base URL (`Codec::Durable`).
    durable: Option<(String, DurableModel)>,
    /// The database and its binding's request target (`Codec::D1`).
    d1: Option<(String, D1Model)>,
}

/// Where a request goes, as one string: the URL, or `binding:<name><path>`.
fn target_of(req: &HttpRequest) -> String {
    req.target.to_string()
}

impl World {
    fn reply(&mut self, req: &HttpRequest, now: u64) -> Reply {
        match (self.codec, &mut self.durable, &mut self.d1) {
            (Codec::Etcd, _, _) => return self.etcd.reply(req),
            (Codec::Durable, Some((_, model)), _) => return model.reply(req, now),
            (Codec::D1, _, Some((target, model))) if target_of(req) == *target => {
                return model.reply(req, now)
            }
            (Codec::Durable | Codec::D1, _, _) => {
                return Reply::Whole {
                    status: 404,
                    body: b"no such binding or path".to_vec(),
                }
            }
            _ => {}
        }
        match self.redis.iter_mut().find(|(base, _, _)| {
            req.target
                .url()
                .is_some_and(|u| u.starts_with(base.as_str()))
        }) {
            Some((_, proto, model)) => model.reply(req, *proto, now),
            None => Reply::Whole {
                status: 404,
                body: b"no such node".to_vec(),
            },
        }
    }

    /// The protocol of the Redis node `req` goes to.
    fn redis_proto(&self, req: &HttpRequest) -> Option<Proto> {
        self.redis
            .iter()
            .find(|(base, _, _)| {
                req.target
                    .url()
                    .is_some_and(|u| u.starts_with(base.as_str()))
            })
            .map(|(_, p, _)| *p)
    }

    fn bases(&self, etcd_endpoints: &[String]) -> Vec<String> {
        match self.codec {
            Codec::Etcd => etcd_endpoints.to_vec(),
            // `<base>/v1/…`: the base with its slash, so that a sibling
            // path (`/locks`) is not taken for it.
            Codec::Durable => self
                .durable
                .iter()
                .map(|(b, _)| format!("{b}/v1/"))
                .collect(),
            Codec::D1 => self.d1.iter().map(|(t, _)| t.clone()).collect(),
            _ => self.redis.iter().map(|(b, _, _)| b.clone()).collect(),
        }
    }
}

fn escape(name: &str) -> String {
    name.replace('%', "%25").replace('/', "%2F")
}

/// A lock name as the `durable-object` client spells it in `?name=`.
fn escape_query(name: &str) -> String {
    let mut out = Vec::new();
    webdis::encode_arg(name.as_bytes(), &mut out);
    String::from_utf8_lossy(&out).into_owned()
}

fn redis_node(rng: &mut Rng, i: usize, proto: Proto) -> (RedisNode, String) {
    let url = format!("http://10.9.{}.{}:{}", i / 200, i % 200 + 1, 7000 + i);
    let node = match proto {
        Proto::Upstash => RedisNode::upstash(url.clone(), SENTINEL),
        Proto::Webdis => RedisNode {
            url: url.clone(),
            protocol: RedisProtocol::Webdis,
            token: rng.chance(50).then(|| SENTINEL.to_string()),
        },
    };
    (node, url)
}

/// A machine, the model answering it, and (etcd) its endpoints.
type Built = (Box<dyn LockMachine>, World, Vec<String>);

fn build(codec: Codec, rng: &mut Rng, seed: u64, name: &str, now: u64) -> Result<Built, String> {
    let entropy = Box::new(SeededEntropy::new(seed));
    let mut world = World {
        codec,
        etcd: EtcdModel::new(0x7000_0000_0000 + (seed as i64 & 0xffff) * 1000),
        redis: Vec::new(),
        durable: None,
        d1: None,
    };
    let ttl = *rng.pick(&[100u64, 1_000, 3_000, 10_000]);
    let timeout = *rng.pick(&[50u64, 500, 1_000, 5_000]);
    let foreign = rng.chance(40);
    let m: Box<dyn LockMachine> = match codec {
        Codec::Etcd => {
            let endpoints: Vec<String> = (0..1 + rng.below(3))
                .map(|i| format!("http://10.8.0.{}:2379", i + 1))
                .collect();
            let mut cfg = EtcdConfig::new(endpoints.clone());
            cfg.session_ttl_ms = ttl.max(1_000);
            cfg.request_timeout_ms = timeout;
            cfg.headers = vec![("Authorization".into(), format!("Bearer {SENTINEL}"))];
            if foreign {
                let prefix = format!("edgelock/{}/", escape(name));
                for i in 0..1 + rng.below(2) {
                    world.etcd.seed_foreign(&prefix, &format!("f00{i}"));
                }
            }
            let m = EtcdMachine::new(cfg, entropy).map_err(|e| e.to_string())?;
            return Ok((Box::new(m), world, endpoints));
        }
        Codec::Durable => {
            let base = format!(
                "http://10.7.0.{}:8787{}",
                1 + rng.below(9),
                rng.pick(&["/lock", "", "/api/lock"])
            );
            let mut model = DurableModel::new(&base, SENTINEL);
            // The configured URL, sometimes with a trailing `/` (normalised away).
            let url = if rng.chance(20) {
                format!("{base}/")
            } else {
                base.clone()
            };
            let mut cfg = DurableConfig::new(DurableEndpoint::Url(url));
            cfg.token = Some(SENTINEL.to_string());
            cfg.ttl_ms = ttl;
            cfg.request_timeout_ms = timeout;
            cfg.auto_extend = rng.chance(80);
            if foreign {
                let until = now + rng.below(3_000) as u64;
                model.seed_foreign(&escape_query(name), 1 + rng.below(50) as u64, until);
            }
            world.durable = Some((base, model));
            let m = BackendSpec::DurableObject(cfg)
                .build(entropy)
                .map_err(|e| e.to_string())?;
            return Ok((m, world, Vec::new()));
        }
        Codec::D1 => {
            let binding = *rng.pick(&["LOCKS_DB", "db", "edge-locks_2"]);
            let mut cfg = D1Config::new(binding);
            if rng.chance(30) {
                cfg.table = "locks_v2".into();
            }
            let mut model = D1Model::new(&cfg.table);
            cfg.ttl_ms = ttl;
            cfg.request_timeout_ms = timeout;
            cfg.auto_extend = rng.chance(80);
            cfg.retry_delay_ms = *rng.pick(&[1u64, 50, 250]);
            cfg.retry_jitter_ms = *rng.pick(&[0u64, 50, 100]);
            if foreign {
                let until = now + rng.below(3_000) as u64;
                model.seed_foreign(name, 1 + rng.below(50) as u64, until);
            }
            let target = Target::Binding {
                name: binding.to_string(),
                path: BATCH_PATH.to_string(),
            }
            .to_string();
            world.d1 = Some((target, model));
            let m = BackendSpec::D1(cfg)
                .build(entropy)
                .map_err(|e| e.to_string())?;
            return Ok((m, world, Vec::new()));
        }
        Codec::Upstash | Codec::Webdis => {
            let proto = if codec == Codec::Upstash {
                Proto::Upstash
            } else {
                Proto::Webdis
            };
            let (node, url) = redis_node(rng, 0, proto);
            world.redis.push((url, proto, RedisModel::default()));
            let mut cfg = RedisConfig::new(node);
            cfg.ttl_ms = ttl;
            cfg.request_timeout_ms = timeout;
            cfg.auto_extend = rng.chance(80);
            cfg.retry_delay_ms = *rng.pick(&[0u64, 50, 200]);
            cfg.retry_jitter_ms = *rng.pick(&[0u64, 50]);
            Box::new(RedisMachine::new(cfg, entropy).map_err(|e| e.to_string())?)
        }
        Codec::Redlock => {
            let n = *rng.pick(&[1usize, 3, 5]);
            let mut nodes = Vec::new();
            for i in 0..n {
                let proto = if rng.chance(50) {
                    Proto::Upstash
                } else {
                    Proto::Webdis
                };
                let (node, url) = redis_node(rng, i, proto);
                world.redis.push((url, proto, RedisModel::default()));
                nodes.push(node);
            }
            let mut cfg = RedlockConfig::new(nodes);
            cfg.ttl_ms = ttl;
            cfg.request_timeout_ms = timeout;
            cfg.retry_count = *rng.pick(&[0u32, 1, 3]);
            cfg.retry_delay_ms = *rng.pick(&[0u64, 50, 200]);
            cfg.retry_jitter_ms = *rng.pick(&[0u64, 50]);
            cfg.auto_extend = rng.chance(80);
            cfg.fencing = if rng.chance(50) {
                RedlockFencing::Strict
            } else {
                RedlockFencing::Folded
            };
            Box::new(RedlockMachine::new(cfg, entropy).map_err(|e| e.to_string())?)
        }
    };
    if foreign {
        let key = format!("{{edgelock:{name}}}");
        for (_, _, model) in world.redis.iter_mut() {
            model.seed_foreign(&key, now + rng.below(3_000) as u64);
        }
    }
    Ok((m, world, Vec::new()))
}

/// Feeds a hostile body to the public decoders of `codec` directly.
fn feed_direct(codec: Codec, status: u16, body: &[u8], st: &mut Stats) {
    let parse_all = |v: &edgelock::core::redis::RedisValue| {
        let _ = scripts::parse_acquire(v);
        let _ = scripts::parse_flag(v);
        let _ = scripts::parse_status(v);
        let _ = scripts::parse_inspect(v, 0);
        let _ = scripts::parse_inspect(v, 3);
        let _ = scripts::parse_acquire_permit(v, 3);
        let _ = scripts::parse_acquire_permit(v, 100);
    };
    if matches!(codec, Codec::Etcd) {
        let mut s = JsonObjectSplitter::new();
        let _ = s.push(body);
        let _ = serde_json::from_slice::<LockHandle>(body);
        st.direct_calls += 2;
    }
    if matches!(codec, Codec::Upstash | Codec::Redlock) {
        if let Ok(v) = upstash::decode_reply(status, body, true) {
            parse_all(&v);
        }
        let _ = upstash::decode_pipeline(status, body, 2, true);
        // The push wake-up stream decoders (server-sent events).
        let _ = SseSplitter::new().push(body);
        let _ = PushDecoder::new(RedisProtocol::Upstash).push(body);
        st.direct_calls += 4;
    }
    if matches!(codec, Codec::Webdis | Codec::Redlock) {
        if let Ok(v) = webdis::decode_reply(status, body, b"EVAL") {
            parse_all(&v);
        }
        let _ = webdis::decode_body(body);
        let _ = PushDecoder::new(RedisProtocol::Webdis).push(body);
        st.direct_calls += 3;
    }
    if matches!(codec, Codec::Upstash | Codec::Webdis | Codec::Redlock) {
        // The RESP decoder (Redis over TCP) meets the same hostile bodies.
        let mut d = RespDecoder::new();
        d.feed(body);
        while let Ok(Some(_)) = d.next_frame() {}
        if let Some(e) = d.error() {
            scan_sentinel(&format!("{e} {e:?}"), st);
        }
        st.direct_calls += 1;
    }
    if matches!(codec, Codec::Durable) {
        let secrets = [SENTINEL];
        let _ = durable_codec::parse_acquire(status, body, &secrets);
        let _ = durable_codec::parse_release(status, body, &secrets);
        let _ = durable_codec::parse_extend(status, body, &secrets);
        let _ = durable_codec::parse_resume(status, body, &secrets);
        let _ = durable_codec::parse_inspect(status, body, &secrets);
        // The texts of their errors must not carry the token either.
        if let Err(e) = durable_codec::answer_object(status, body, &secrets) {
            scan_sentinel(&format!("{} {e:?}", e.message), st);
        }
        st.direct_calls += 6;
    }
    if matches!(codec, Codec::D1) {
        let secrets = [SENTINEL];
        let _ = d1_codec::parse_acquire(status, body, &secrets);
        let _ = d1_codec::parse_release(status, body, &secrets);
        let _ = d1_codec::parse_extend(status, body, &secrets);
        let _ = d1_codec::parse_resume(status, body, &secrets);
        let _ = d1_codec::parse_inspect(status, body, &secrets);
        if let Err(e) = d1_codec::results(status, body, 2, &secrets) {
            scan_sentinel(&format!("{} {e:?}", e.message), st);
        }
        st.direct_calls += 6;
    }
}

/// What a hostile server can echo: the request's own header lines, and the
/// decoded credentials of HTTP Basic auth (the server checks them, so it
/// knows them). A request that carries no secret cannot leak one.
fn echo_of(req: &HttpRequest) -> String {
    let mut echo: Vec<String> = req
        .headers
        .iter()
        .map(|(k, v)| format!("{k}: {v}"))
        .collect();
    for (_, v) in &req.headers {
        if let Some(b) = v.strip_prefix("Basic ").and_then(|b| B64.decode(b).ok()) {
            echo.push(format!("user={}", String::from_utf8_lossy(&b)));
        }
    }
    echo.join("\r\n")
}

/// The lock owners a request body carries: JSON strings of exactly 32
/// lowercase hex characters (`"owner":"…"` of the lock service, the owner
/// parameter of a d1 statement).
fn owners_in(body: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(body)
        .split('"')
        .filter(|p| p.len() == 32 && p.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
        .map(str::to_string)
        .collect()
}

/// Scans a text of the machine (an error or a loss) for the sentinel and
/// the session's owners.
fn scan(text: &str, st: &mut Stats) {
    scan_for(text, st, true);
}

/// Scans a text of a decoder called directly, for the sentinel only (the
/// decoder was told the sentinel is secret, not the owners).
fn scan_sentinel(text: &str, st: &mut Stats) {
    scan_for(text, st, false);
}

fn scan_for(text: &str, st: &mut Stats, owners: bool) {
    st.error_texts += 1;
    let (full, fragments) = leak_count(text);
    st.sentinel_hits += full as u64;
    st.sentinel_fragments += fragments as u64;
    let owner = owners && st.session_owners.iter().any(|o| text.contains(o.as_str()));
    st.owner_hits += u64::from(owner);
    if (full > 0 || fragments > 0 || owner) && st.leak_samples.len() < 5 {
        st.leak_samples.push(
            text.chars()
                .take(300)
                .map(|c| if c.is_control() { ' ' } else { c })
                .collect(),
        );
    }
}

struct Session {
    pending: Vec<HttpRequest>,
    held: Vec<(LockId, LockHandle)>,
    ops: Vec<OpId>,
    closed: bool,
    bases: Vec<String>,
    /// Whether requests carry lock owners to watch for (`Durable`, `D1`).
    lease_owners: bool,
}

impl Session {
    /// Drains every output of the machine (the driver loop's step 2).
    fn pump(&mut self, m: &mut dyn LockMachine, rng: &mut Rng, st: &mut Stats) {
        while let Some(t) = m.poll_transmit() {
            match t {
                Transmit::Send(r) => {
                    let to = target_of(&r);
                    if !self.bases.iter().any(|b| to.starts_with(b.as_str())) {
                        st.foreign_urls += 1;
                    }
                    if self.lease_owners {
                        for o in owners_in(&r.body) {
                            if !st.session_owners.contains(&o) {
                                st.session_owners.push(o);
                            }
                        }
                    }
                    self.pending.push(r);
                }
                // Sometimes keep it: a late answer to a cancelled request.
                t @ (Transmit::Open(_) | Transmit::Write { .. }) => {
                    panic!("an HTTP machine opened a byte stream: {t:?}")
                }
                Transmit::Cancel(id) if !rng.chance(10) => self.pending.retain(|r| r.id != id),
                Transmit::Cancel(_) => {}
            }
        }
        while let Some(e) = m.poll_event() {
            match e {
                Event::Completed {
                    result: Ok(Outcome::Acquired(lock)),
                    ..
                } => {
                    st.acquired += 1;
                    self.held.push((lock.id, lock.handle));
                }
                Event::Completed {
                    result: Ok(Outcome::Released { lock, .. }),
                    ..
                } => {
                    st.released += 1;
                    self.held.retain(|(l, _)| *l != lock);
                }
                Event::Completed {
                    result: Err(error), ..
                } => {
                    st.failed += 1;
                    scan(&format!("{error} {error:?}"), st);
                }
                Event::Lost { lock, reason, .. } => {
                    st.lost += 1;
                    self.held.retain(|(l, _)| *l != lock);
                    scan(&format!("{reason} {reason:?}"), st);
                }
                Event::Completed {
                    result: Ok(Outcome::Closed),
                    ..
                } => {
                    st.closed += 1;
                    self.closed = true;
                }
                Event::Completed {
                    result:
                        Ok(Outcome::Extended { .. } | Outcome::Inspected(_) | Outcome::NotAcquired),
                    ..
                }
                // The fuzzer never campaigns nor takes lock sets.
                | Event::Completed {
                    result:
                        Ok(
                            Outcome::Proclaimed { .. }
                            | Outcome::Leader(_)
                            | Outcome::AcquiredAll(_),
                        ),
                    ..
                }
                | Event::Renewed { .. } => {}
            }
        }
    }
}

fn record<T>(r: Result<T, edgelock::core::LockError>, st: &mut Stats) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(e) => {
            scan(&format!("{e} {e:?}"), st);
            None
        }
    }
}

/// One user action on a live machine.
fn user_action(
    m: &mut dyn LockMachine,
    s: &mut Session,
    rng: &mut Rng,
    now: u64,
    name: &str,
    codec: Codec,
    st: &mut Stats,
) {
    let lock = (!s.held.is_empty()).then(|| s.held[rng.below(s.held.len())].clone());
    match (rng.below(7), lock) {
        (0, Some((id, _))) => {
            let _ = record(m.release(now, id), st);
        }
        (1, Some((id, _))) => {
            let ttl = rng
                .chance(50)
                .then(|| *rng.pick(&[1u64, 500, 20_000, u64::MAX]));
            let _ = record(m.extend(now, id, ttl), st);
        }
        (2, Some((_, handle))) => {
            // A hostile handle (it comes from users and storage).
            let json = serde_json::to_vec(&handle).unwrap_or_default();
            let bad = if rng.chance(50) {
                mutate_body(rng, &json, SENTINEL)
            } else {
                json
            };
            feed_direct(codec, 200, &bad, st);
            if let Ok(h) = serde_json::from_slice::<LockHandle>(&bad) {
                if let Some(op) = record(m.resume(now, &h), st) {
                    s.ops.push(op);
                }
            }
        }
        (3, _) => {
            if let Some(op) = record(m.inspect(now, name), st) {
                s.ops.push(op);
            }
        }
        (4, _) if !s.ops.is_empty() => {
            let op = s.ops[rng.below(s.ops.len())];
            m.cancel(now, op);
        }
        _ => {
            let wait = *rng.pick(&[Wait::Try, Wait::For(500), Wait::Forever]);
            if let Some(op) = record(
                m.acquire(now, name, &AcquireOptions { wait, ttl_ms: None }),
                st,
            ) {
                s.ops.push(op);
            }
        }
    }
}

/// The last input fed, for the report of a panic.
type Last = Option<Input>;

/// An input as text, its body as (lossy, escaped) text.
fn describe(input: &Input) -> String {
    let text = |b: &[u8]| format!("{:?}", String::from_utf8_lossy(&b[..b.len().min(600)]));
    match input {
        Input::Response { id, status, body } => format!(
            "Response {{ id: {}, status: {status}, body ({} bytes): {} }}",
            id.0,
            body.len(),
            text(body)
        ),
        Input::Chunk { id, data } => format!(
            "Chunk {{ id: {}, data ({} bytes): {} }}",
            id.0,
            data.len(),
            text(data)
        ),
        other => format!("{other:?}"),
    }
}

fn run_session(codec: Codec, seed: u64, st: &mut Stats, last: &mut Last) {
    let mut rng = Rng::new(seed);
    let name = *rng.pick(NAMES);
    let mut now: u64 = 1_000_000;
    let (mut m, mut world, endpoints) = match build(codec, &mut rng, seed, name, now) {
        Ok(x) => x,
        Err(e) => {
            // A configuration the harness believed valid: a harness bug, and
            // counted as such so it cannot go unnoticed.
            st.samples
                .push(format!("harness: cannot build {codec:?}: {e}"));
            st.panics += 1;
            return;
        }
    };
    // Mostly hostile, with some nearly valid sessions to reach deep states.
    let hostile_pct = *rng.pick(&[5u64, 20, 50, 100, 100]);
    let mut s = Session {
        pending: Vec::new(),
        held: Vec::new(),
        ops: Vec::new(),
        closed: false,
        bases: world.bases(&endpoints),
        lease_owners: matches!(codec, Codec::Durable | Codec::D1),
    };
    let wait_ms = rng.below(3_000) as u64;
    let wait = *rng.pick(&[Wait::Try, Wait::For(wait_ms), Wait::Forever]);
    let ttl_ms =
        (codec != Codec::Etcd && rng.chance(30)).then(|| *rng.pick(&[50u64, 2_000, 60_000]));
    if let Some(op) = record(m.acquire(now, name, &AcquireOptions { wait, ttl_ms }), st) {
        s.ops.push(op);
    }
    let mut closing = false;
    for step in 0..MAX_STEPS {
        s.pump(m.as_mut(), &mut rng, st);
        if s.closed {
            break;
        }
        if step >= CLOSE_AT && !closing {
            closing = true;
            let op = m.close(now);
            s.ops.push(op);
            continue;
        }
        if !s.pending.is_empty() && (rng.chance(85) || m.poll_timeout().is_none()) {
            let idx = if rng.chance(70) {
                0
            } else {
                rng.below(s.pending.len())
            };
            let req = s.pending.remove(idx);
            if rng.chance(3) {
                continue; // never answered: the machine's own timeout must end it
            }
            if rng.chance(20) {
                now += rng.below(req.timeout_ms.unwrap_or(1_000) as usize + 200) as u64;
                if m.poll_timeout().is_some_and(|t| t <= now) {
                    m.handle_timeout(now);
                    s.pump(m.as_mut(), &mut rng, st);
                }
            }
            let reply = world.reply(&req, now);
            let hostile = rng.chance(hostile_pct);
            // A Redis subscription: sometimes a hostile push stream instead
            // of a mutation of the valid one.
            let push = match world.redis_proto(&req) {
                Some(proto) if req.stream => subscription_channel(&req, proto).map(|c| (proto, c)),
                _ => None,
            };
            st.subscriptions += u64::from(push.is_some());
            let (inputs, h) = match push {
                Some((proto, channel)) if hostile && rng.chance(50) => {
                    st.hostile_push_streams += 1;
                    (
                        super::push::hostile_stream(&mut rng, proto, req.id, &channel),
                        1,
                    )
                }
                _ => {
                    let mut echo = echo_of(&req);
                    // The lock service and the database know the owner too.
                    if s.lease_owners {
                        let mut owners = owners_in(&req.body);
                        owners.dedup();
                        for o in owners {
                            echo.push_str(&format!("\r\nowner={o}"));
                        }
                    }
                    deliver(&mut rng, &req, &reply, hostile, &echo)
                }
            };
            st.hostile += h;
            for input in inputs {
                if hostile {
                    if let Input::Response { status, body, .. } = &input {
                        feed_direct(codec, *status, body, st);
                    }
                }
                st.inputs += 1;
                *last = Some(input.clone());
                m.handle_input(now, input);
            }
        } else if !closing && rng.chance(15) {
            user_action(m.as_mut(), &mut s, &mut rng, now, name, codec, st);
        } else if let Some(t) = m.poll_timeout() {
            // Never stand still: a timer due "now" must make progress too.
            now = now.max(t).max(now + u64::from(t <= now));
            m.handle_timeout(now);
        } else if s.pending.is_empty() {
            if closing {
                break;
            }
            closing = true;
            let op = m.close(now);
            s.ops.push(op);
        }
    }
}

/// Runs sessions of `codec` until `target` hostile inputs were fed. A count,
/// not a time budget: the check that counts them must not depend on the
/// machine's speed (a slow or shared machine only takes longer).
pub fn run_codec(
    codec: Codec,
    seed_base: u64,
    target: u64,
    stop: &std::sync::atomic::AtomicBool,
) -> Stats {
    let mut st = Stats::default();
    let started = Instant::now();
    let mut i: u64 = 0;
    // Reproduction of one session: S09_SEED=<hex seed>
    // S09_CODEC=<Etcd|Upstash|Webdis|Redlock|Durable|D1>.
    let replay = std::env::var("S09_SEED")
        .ok()
        .and_then(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok());
    let replay_codec = std::env::var("S09_CODEC").unwrap_or_default();
    if replay.is_some() && !format!("{codec:?}").eq_ignore_ascii_case(&replay_codec) {
        return st;
    }
    while st.hostile < target && !stop.load(std::sync::atomic::Ordering::Relaxed) {
        if replay.is_some() && i > 0 {
            break;
        }
        let seed = replay.unwrap_or_else(|| mix(seed_base ^ (i << 8) ^ codec as u64));
        i += 1;
        st.sessions += 1;
        let mut last: Last = None;
        let mut case = Stats::default();
        in_case(true);
        let result = catch_unwind(AssertUnwindSafe(|| {
            run_session(codec, seed, &mut case, &mut last)
        }));
        in_case(false);
        for l in &mut case.leak_samples {
            *l = format!("seed {seed:#x}: {l}");
        }
        st.merge(&case);
        if result.is_err() {
            st.panics += 1;
            let why = take_last_panic().unwrap_or_default();
            // One sample per panic site.
            let site = why.rsplit(" at ").next().unwrap_or("").to_string();
            if st.samples.len() < 8
                && !st
                    .samples
                    .iter()
                    .any(|s| s.contains(&format!(" at {site};")))
            {
                let input = last.as_ref().map(describe).unwrap_or_default();
                st.samples.push(format!(
                    "{codec:?} session seed {seed:#x}: panicked: {why}; last input: {input}"
                ));
            }
        }
    }
    st.elapsed = started.elapsed();
    st
}

/// Part 1 across all codecs on `threads` threads; returns per-codec stats.
pub fn run_all(target_per_codec: u64, threads: usize) -> Vec<(Codec, Stats)> {
    let _capture = super::panics::PanicCapture::install();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let results: Mutex<Vec<(Codec, Stats)>> = Mutex::new(Vec::new());
    let threads = threads.max(1);
    std::thread::scope(|scope| {
        for t in 0..threads {
            let (results, stop) = (&results, &stop);
            scope.spawn(move || {
                // etcd last: it is the slowest.
                let order = [
                    Codec::Upstash,
                    Codec::Webdis,
                    Codec::Redlock,
                    Codec::Durable,
                    Codec::D1,
                    Codec::Etcd,
                ];
                for codec in order {
                    let share = target_per_codec.div_ceil(threads as u64);
                    let st = run_codec(codec, 0x5eed_0000 + t as u64 * 0x1_0000_0000, share, stop);
                    if let Ok(mut r) = results.lock() {
                        r.push((codec, st));
                    }
                }
            });
        }
    });
    let all = results.into_inner().unwrap_or_default();
    Codec::ALL
        .iter()
        .map(|c| {
            let mut total = Stats::default();
            for (_, st) in all.iter().filter(|(k, _)| k == c) {
                total.merge(st);
            }
            (*c, total)
        })
        .collect()
}
