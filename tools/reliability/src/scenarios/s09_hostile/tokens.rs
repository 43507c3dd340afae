//! Part 4: owner tokens made the way the machines make them, from the OS
//! CSPRNG: Redis/Redlock owner tokens are `random_hex(entropy, 20)` (40 hex
//! characters, fresh per attempt: `engine::TOKEN_BYTES` and
//! `acquire.rs`), etcd acquire nonces `random_hex(entropy, 8)`
//! (`lock_machine.rs`). Most are drawn through that same function; a sample
//! is taken out of real `RedisMachine` / `EtcdMachine` requests to prove the
//! machines produce exactly this format. Then: duplicates.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use edgelock::core::etcd::{EtcdConfig, EtcdMachine};
use edgelock::core::redis::{RedisConfig, RedisMachine, RedisNode};
use edgelock::core::{
    random_hex, AcquireOptions, Input, LockMachine, LockMachineExt, Transmit, Wait,
};
use edgelock::native::OsEntropy;
use serde_json::{json, Value};

/// Bytes of a Redis owner token (edgelock's `engine::TOKEN_BYTES`, private).
const REDIS_TOKEN_BYTES: usize = 20;
const ETCD_NONCE_BYTES: usize = 8;

#[derive(Debug, Default)]
pub struct TokenResults {
    pub redis_tokens: usize,
    pub redis_from_machine: usize,
    pub redis_duplicates: usize,
    pub etcd_nonces: usize,
    pub etcd_from_machine: usize,
    pub etcd_duplicates: usize,
    /// Tokens whose text is not lowercase hex of the expected length.
    pub malformed: usize,
    pub harness: Vec<String>,
}

fn unhex<const N: usize>(s: &str) -> Option<[u8; N]> {
    if s.len() != 2 * N
        || !s
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return None;
    }
    let mut out = [0u8; N];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

fn duplicates<T: Ord>(mut v: Vec<T>) -> usize {
    v.sort_unstable();
    v.windows(2).filter(|w| w[0] == w[1]).count()
}

/// Owner tokens out of a RedisMachine's acquire scripts (`ARGV[1]`): each
/// attempt is answered "held by someone else" so that the next acquire is a
/// fresh attempt with a fresh token.
fn redis_machine_tokens(n: usize, r: &mut TokenResults) -> Vec<String> {
    let mut out = Vec::with_capacity(n);
    let Ok(mut m) = RedisMachine::new(
        RedisConfig::new(RedisNode::upstash("http://127.0.0.1:1", "t")),
        Box::new(OsEntropy),
    ) else {
        r.harness.push("cannot build a RedisMachine".into());
        return out;
    };
    for _ in 0..n {
        if m.acquire(
            0,
            "tokens",
            &AcquireOptions {
                wait: Wait::Try,
                ttl_ms: None,
            },
        )
        .is_err()
        {
            r.harness.push("RedisMachine refused an acquire".into());
            break;
        }
        while let Some(t) = m.poll_transmit() {
            if let Transmit::Send(req) = t {
                let args: Vec<String> = serde_json::from_slice(&req.body).unwrap_or_default();
                // `EVAL script numkeys KEYS... ARGV...`: ARGV[1] follows the keys.
                let keys = args
                    .get(2)
                    .and_then(|n| n.parse::<usize>().ok())
                    .unwrap_or(0);
                out.push(args.get(3 + keys).cloned().unwrap_or_default());
                let body = json!({"result": [0, 1, 5_000]}).to_string().into_bytes();
                m.handle_input(
                    0,
                    Input::Response {
                        id: req.id,
                        status: 200,
                        body,
                    },
                );
            }
        }
        while m.poll_event().is_some() {}
    }
    out
}

/// Nonces out of an EtcdMachine's acquire txns (the value it puts): each
/// txn is answered "someone else is ahead" so that the Try attempt ends, and
/// the cleanup is acknowledged.
fn etcd_machine_nonces(n: usize, r: &mut TokenResults) -> Vec<String> {
    let mut out = Vec::with_capacity(n);
    let Ok(mut m) = EtcdMachine::new(
        EtcdConfig::new(vec!["http://127.0.0.1:1".into()]),
        Box::new(OsEntropy),
    ) else {
        r.harness.push("cannot build an EtcdMachine".into());
        return out;
    };
    let header = json!({"revision": "10"});
    for _ in 0..n {
        if m.acquire(
            0,
            "tokens",
            &AcquireOptions {
                wait: Wait::Try,
                ttl_ms: None,
            },
        )
        .is_err()
        {
            r.harness.push("EtcdMachine refused an acquire".into());
            break;
        }
        for _ in 0..10 {
            let Some(t) = m.poll_transmit() else { break };
            let Transmit::Send(req) = t else { continue };
            let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
            let reply = if req
                .target
                .url()
                .is_some_and(|u| u.ends_with("/v3/lease/grant"))
            {
                json!({"header": header, "ID": "7", "TTL": "10"})
            } else if let Some(put) = body.pointer("/success/0/request_put") {
                let nonce = put
                    .get("value")
                    .and_then(Value::as_str)
                    .and_then(|v| B64.decode(v).ok())
                    .unwrap_or_default();
                out.push(String::from_utf8_lossy(&nonce).into_owned());
                let key = put.get("key").cloned().unwrap_or(Value::Null);
                let other = B64.encode(b"edgelock/tokens/1");
                json!({"header": header, "succeeded": true, "responses": [
                    {"response_put": {"header": header}},
                    {"response_range": {"header": header, "kvs": [
                        {"key": key, "create_revision": "10", "mod_revision": "10", "version": "1", "lease": "7"},
                        {"key": other, "create_revision": "5", "mod_revision": "5", "version": "1"}]}}]})
            } else {
                json!({"header": header, "succeeded": true, "responses": [{"response_delete_range": {"header": header, "deleted": "1"}}]})
            };
            m.handle_input(
                0,
                Input::Response {
                    id: req.id,
                    status: 200,
                    body: reply.to_string().into_bytes(),
                },
            );
        }
        while m.poll_event().is_some() {}
    }
    out
}

pub fn run(n: usize, from_machines: usize) -> TokenResults {
    let mut r = TokenResults::default();
    let mut redis: Vec<[u8; REDIS_TOKEN_BYTES]> = Vec::with_capacity(n);
    let machine_tokens = redis_machine_tokens(from_machines, &mut r);
    r.redis_from_machine = machine_tokens.len();
    let mut entropy = OsEntropy;
    let direct = (0..n.saturating_sub(machine_tokens.len()))
        .map(|_| random_hex(&mut entropy, REDIS_TOKEN_BYTES));
    for t in machine_tokens.into_iter().chain(direct) {
        match unhex::<REDIS_TOKEN_BYTES>(&t) {
            Some(b) => redis.push(b),
            None => r.malformed += 1,
        }
    }
    r.redis_tokens = redis.len();
    r.redis_duplicates = duplicates(redis);

    let mut etcd: Vec<[u8; ETCD_NONCE_BYTES]> = Vec::with_capacity(n);
    let machine_nonces = etcd_machine_nonces(from_machines, &mut r);
    r.etcd_from_machine = machine_nonces.len();
    let direct = (0..n.saturating_sub(machine_nonces.len()))
        .map(|_| random_hex(&mut entropy, ETCD_NONCE_BYTES));
    for t in machine_nonces.into_iter().chain(direct) {
        match unhex::<ETCD_NONCE_BYTES>(&t) {
            Some(b) => etcd.push(b),
            None => r.malformed += 1,
        }
    }
    r.etcd_nonces = etcd.len();
    r.etcd_duplicates = duplicates(etcd);
    r
}
