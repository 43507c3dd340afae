//! Small in-memory backends that produce VALID replies in each codec's wire
//! format (etcd's JSON gateway, Upstash REST, Webdis), so that the fuzzer can
//! walk a machine deep into its protocol before mutating a reply. Shapes
//! follow src/core/etcd/gateway.rs, src/core/redis/{upstash,webdis}.rs and
//! the captured replies in tests/sim/etcd_model.rs.

use std::collections::{BTreeMap, HashMap};
use std::sync::OnceLock;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use edgelock::core::HttpRequest;
use edgelock::internals::redis::scripts::Script;
use edgelock::internals::redis::subscription::wake_channel;
use edgelock::internals::redis::webdis;
use serde_json::{json, Value};

/// A valid answer to one request.
#[derive(Clone, Debug)]
pub enum Reply {
    Whole {
        status: u16,
        body: Vec<u8>,
    },
    /// A 2xx streaming body: one JSON object per message.
    Stream {
        messages: Vec<Vec<u8>>,
    },
}

/// The path of a request URL (`/v3/kv/txn`), or "" when it has none.
pub fn path_of(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    rest.find('/').map_or("", |i| &rest[i..])
}

fn b64(b: &[u8]) -> String {
    B64.encode(b)
}

fn unb64(v: Option<&Value>) -> Vec<u8> {
    v.and_then(Value::as_str)
        .and_then(|s| B64.decode(s).ok())
        .unwrap_or_default()
}

/// int64 fields arrive as strings (our requests) or numbers.
fn int(v: Option<&Value>) -> i64 {
    match v {
        Some(Value::String(s)) => s.parse().unwrap_or(0),
        Some(Value::Number(n)) => n.as_i64().unwrap_or(0),
        _ => 0,
    }
}

#[derive(Clone, Debug)]
struct Kv {
    create: i64,
    modr: i64,
    version: i64,
    value: Vec<u8>,
    lease: i64,
}

/// One linearizable etcd store behind every endpoint.
pub struct EtcdModel {
    rev: i64,
    next_lease: i64,
    leases: HashMap<i64, i64>,
    kvs: BTreeMap<Vec<u8>, Kv>,
}

fn header(rev: i64) -> Value {
    json!({"cluster_id": "15118495548433857066", "member_id": "13668033151171901709", "revision": rev.to_string(), "raft_term": "2"})
}

fn kv_json(key: &[u8], kv: &Kv, keys_only: bool) -> Value {
    let mut o = json!({"key": b64(key), "create_revision": kv.create.to_string(), "mod_revision": kv.modr.to_string(), "version": kv.version.to_string()});
    if kv.lease != 0 {
        o["lease"] = json!(kv.lease.to_string());
    }
    if !keys_only && !kv.value.is_empty() {
        o["value"] = json!(b64(&kv.value));
    }
    o
}

fn lease_not_found() -> Reply {
    let m = "etcdserver: requested lease not found";
    Reply::Whole {
        status: 404,
        body: json!({"error": m, "message": m, "code": 5})
            .to_string()
            .into_bytes(),
    }
}

fn ok(v: Value) -> Reply {
    Reply::Whole {
        status: 200,
        body: v.to_string().into_bytes(),
    }
}

impl EtcdModel {
    pub fn new(lease_base: i64) -> EtcdModel {
        EtcdModel {
            rev: 1,
            next_lease: lease_base,
            leases: HashMap::new(),
            kvs: BTreeMap::new(),
        }
    }

    /// Another client's key (no lease) under `prefix`: the lock is held, and
    /// a waiter will watch it.
    pub fn seed_foreign(&mut self, prefix: &str, suffix: &str) {
        self.rev += 1;
        let kv = Kv {
            create: self.rev,
            modr: self.rev,
            version: 1,
            value: b"foreign".to_vec(),
            lease: 0,
        };
        self.kvs
            .insert(format!("{prefix}{suffix}").into_bytes(), kv);
    }

    fn put(&mut self, bumped: &mut bool, key: Vec<u8>, value: Vec<u8>, lease: i64) {
        if !*bumped {
            self.rev += 1;
            *bumped = true;
        }
        let rev = self.rev;
        let e = self.kvs.entry(key).or_insert(Kv {
            create: rev,
            modr: rev,
            version: 0,
            value: Vec::new(),
            lease,
        });
        e.modr = rev;
        e.version += 1;
        e.value = value;
        e.lease = lease;
    }

    fn keys_in(&self, key: &[u8], end: Option<&[u8]>) -> Vec<Vec<u8>> {
        match end {
            None => self
                .kvs
                .contains_key(key)
                .then(|| key.to_vec())
                .into_iter()
                .collect(),
            Some(end) => self
                .kvs
                .range(key.to_vec()..)
                .map(|(k, _)| k)
                .take_while(|k| end == [0] || k.as_slice() < end)
                .cloned()
                .collect(),
        }
    }

    fn delete(&mut self, bumped: &mut bool, key: &[u8], end: Option<&[u8]>) -> usize {
        let keys = self.keys_in(key, end);
        if !keys.is_empty() && !*bumped {
            self.rev += 1;
            *bumped = true;
        }
        for k in &keys {
            self.kvs.remove(k);
        }
        keys.len()
    }

    fn range(&self, r: &Value) -> Value {
        let key = unb64(r.get("key"));
        let end = r.get("range_end").map(|e| unb64(Some(e)));
        let keys = self.keys_in(&key, end.as_deref());
        let count = keys.len();
        let max_create = int(r.get("max_create_revision"));
        let mut found: Vec<(Vec<u8>, Kv)> = keys
            .into_iter()
            .filter_map(|k| self.kvs.get(&k).cloned().map(|kv| (k, kv)))
            .filter(|(_, kv)| max_create <= 0 || kv.create <= max_create)
            .collect();
        if r.get("sort_target").and_then(Value::as_str) == Some("CREATE") {
            found.sort_by_key(|(_, kv)| kv.create);
        }
        if r.get("sort_order").and_then(Value::as_str) == Some("DESCEND") {
            found.reverse();
        }
        let limit = int(r.get("limit"));
        if limit > 0 {
            found.truncate(limit as usize);
        }
        let keys_only = r.get("keys_only").and_then(Value::as_bool).unwrap_or(false);
        let mut o = json!({"header": {"revision": self.rev.to_string()}});
        if !found.is_empty() {
            o["kvs"] = Value::Array(
                found
                    .iter()
                    .map(|(k, kv)| kv_json(k, kv, keys_only))
                    .collect(),
            );
        }
        if count > 0 {
            o["count"] = json!(count.to_string());
        }
        o
    }

    fn txn(&mut self, body: &Value) -> Reply {
        let empty = Vec::new();
        let compares = body
            .get("compare")
            .and_then(Value::as_array)
            .unwrap_or(&empty);
        let holds = compares.iter().all(|c| {
            let cur = self.kvs.get(&unb64(c.get("key"))).map_or(0, |kv| kv.create);
            cur == int(c.get("create_revision"))
        });
        let branch = if holds { "success" } else { "failure" };
        let ops = body
            .get(branch)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let mut bumped = false;
        let mut responses = Vec::new();
        for op in &ops {
            if let Some(p) = op.get("request_put") {
                let lease = int(p.get("lease"));
                if lease != 0 && !self.leases.contains_key(&lease) {
                    return lease_not_found();
                }
                self.put(
                    &mut bumped,
                    unb64(p.get("key")),
                    unb64(p.get("value")),
                    lease,
                );
                responses
                    .push(json!({"response_put": {"header": {"revision": self.rev.to_string()}}}));
            } else if let Some(r) = op.get("request_range") {
                responses.push(json!({"response_range": self.range(r)}));
            } else if let Some(d) = op.get("request_delete_range") {
                let end = d.get("range_end").map(|e| unb64(Some(e)));
                let n = self.delete(&mut bumped, &unb64(d.get("key")), end.as_deref());
                let mut r = json!({"header": {"revision": self.rev.to_string()}});
                if n > 0 {
                    r["deleted"] = json!(n.to_string());
                }
                responses.push(json!({"response_delete_range": r}));
            }
        }
        let mut o = json!({"header": header(self.rev)});
        if holds {
            o["succeeded"] = json!(true);
        }
        if !responses.is_empty() {
            o["responses"] = Value::Array(responses);
        }
        ok(o)
    }

    fn revoke(&mut self, id: i64) -> bool {
        if self.leases.remove(&id).is_none() {
            return false;
        }
        let keys: Vec<Vec<u8>> = self
            .kvs
            .iter()
            .filter(|(_, kv)| kv.lease == id)
            .map(|(k, _)| k.clone())
            .collect();
        if !keys.is_empty() {
            self.rev += 1;
        }
        for k in keys {
            self.kvs.remove(&k);
        }
        true
    }

    /// The valid reply to `req` (and its effect on the store).
    pub fn reply(&mut self, req: &HttpRequest) -> Reply {
        let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
        match path_of(req.target.url().unwrap_or("")) {
            "/v3/lease/grant" => {
                self.next_lease += 1;
                let ttl = int(body.get("TTL")).max(2);
                self.leases.insert(self.next_lease, ttl);
                ok(
                    json!({"header": header(self.rev), "ID": self.next_lease.to_string(), "TTL": ttl.to_string()}),
                )
            }
            "/v3/lease/keepalive" => {
                let id = int(body.get("ID"));
                let mut r = json!({"header": header(self.rev), "ID": id.to_string()});
                if let Some(ttl) = self.leases.get(&id) {
                    r["TTL"] = json!(ttl.to_string());
                }
                let mut bytes = json!({ "result": r }).to_string().into_bytes();
                bytes.push(b'\n');
                Reply::Whole {
                    status: 200,
                    body: bytes,
                }
            }
            "/v3/lease/timetolive" => {
                let id = int(body.get("ID"));
                match self.leases.get(&id) {
                    Some(ttl) => ok(
                        json!({"header": header(self.rev), "ID": id.to_string(), "TTL": (ttl - 1).to_string(), "grantedTTL": ttl.to_string()}),
                    ),
                    None => {
                        ok(json!({"header": header(self.rev), "ID": id.to_string(), "TTL": "-1"}))
                    }
                }
            }
            "/v3/lease/revoke" => {
                if self.revoke(int(body.get("ID"))) {
                    ok(json!({"header": header(self.rev)}))
                } else {
                    lease_not_found()
                }
            }
            "/v3/kv/txn" => self.txn(&body),
            "/v3/kv/range" => {
                let mut r = self.range(&body);
                r["header"] = header(self.rev);
                ok(r)
            }
            "/v3/kv/deleterange" => {
                let mut bumped = false;
                let end = body.get("range_end").map(|e| unb64(Some(e)));
                let n = self.delete(&mut bumped, &unb64(body.get("key")), end.as_deref());
                let mut r = json!({"header": header(self.rev)});
                if n > 0 {
                    r["deleted"] = json!(n.to_string());
                }
                ok(r)
            }
            "/v3/watch" => {
                let key = unb64(body.pointer("/create_request/key"));
                let created = json!({"result": {"header": header(self.rev), "created": true}});
                // The watched predecessor goes away (its holder released).
                let mut bumped = false;
                self.delete(&mut bumped, &key, None);
                if !bumped {
                    self.rev += 1;
                }
                let deleted = json!({"result": {"header": header(self.rev), "events": [{"type": "DELETE", "kv": {"key": b64(&key), "mod_revision": self.rev.to_string()}}]}});
                Reply::Stream {
                    messages: vec![
                        format!("{created}\n").into_bytes(),
                        format!("{deleted}\n").into_bytes(),
                    ],
                }
            }
            _ => Reply::Whole {
                status: 404,
                body: b"Not Found\n".to_vec(),
            },
        }
    }
}

/// How a Redis node is spoken to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    Upstash,
    Webdis,
}

/// The scripts as webdis bodies carry them (percent-encoded), computed once:
/// decoding ~1 KiB of script per request dominated the fuzzer's time.
fn encoded_scripts() -> &'static [(Script, Vec<u8>)] {
    static ENCODED: OnceLock<Vec<(Script, Vec<u8>)>> = OnceLock::new();
    ENCODED.get_or_init(|| {
        Script::ALL
            .iter()
            .map(|s| {
                let mut out = Vec::new();
                webdis::encode_arg(s.text().as_bytes(), &mut out);
                (*s, out)
            })
            .collect()
    })
}

/// A webdis body's arguments, as `webdis::decode_body` would return them.
fn webdis_args(body: &[u8]) -> Vec<Vec<u8>> {
    body.split(|&b| b == b'/')
        .enumerate()
        .map(|(i, seg)| {
            match encoded_scripts()
                .iter()
                .find(|(_, e)| i == 1 && e.as_slice() == seg)
            {
                Some((script, _)) => script.text().as_bytes().to_vec(),
                None if i == 0 => seg.to_vec(),
                None => webdis::decode_body(&[b"X/", seg].concat())
                    .pop()
                    .unwrap_or_default(),
            }
        })
        .collect()
}

/// One Redis node running edgelock's four scripts.
#[derive(Default)]
pub struct RedisModel {
    locks: HashMap<Vec<u8>, (Vec<u8>, u64)>,
    fences: HashMap<Vec<u8>, i64>,
}

impl RedisModel {
    /// Another client holds `key` until `until`.
    pub fn seed_foreign(&mut self, key: &str, until: u64) {
        self.locks
            .insert(key.as_bytes().to_vec(), (b"foreign-owner".to_vec(), until));
    }

    fn live(&mut self, key: &[u8], now: u64) -> Option<(Vec<u8>, u64)> {
        match self.locks.get(key) {
            Some((_, exp)) if *exp <= now => {
                self.locks.remove(key);
                None
            }
            other => other.cloned(),
        }
    }

    fn raise(&mut self, fence: &[u8], floor: i64) -> i64 {
        let f = self.fences.entry(fence.to_vec()).or_insert(0);
        *f = (*f).max(floor);
        *f
    }

    /// The script's result: an integer or a flat array of integers.
    fn run(&mut self, args: &[Vec<u8>], now: u64) -> Result<Vec<i64>, String> {
        let script = match args.first().map(Vec::as_slice) {
            Some(b"EVAL") => args.get(1).and_then(|t| Script::from_text(t)),
            // This model keeps every script cached (no restarts).
            Some(b"EVALSHA") => args.get(1).and_then(|t| Script::from_sha1(t)),
            _ => return Err("ERR unknown command".into()),
        };
        // The acquire, release, queued acquire and leave scripts also name
        // the waiters' queue and its leases, the readers and the writer
        // intent (keys 3.., 4 to 6 keys in all); this model keeps no queue
        // and no reader (a queued acquire is an acquire, a leave does
        // nothing): drop them, keeping the lock key and the counter.
        let mut args = args.to_vec();
        let numkeys = args
            .get(2)
            .and_then(|n| std::str::from_utf8(n).ok()?.parse::<usize>().ok())
            .unwrap_or(0);
        if script != Some(Script::Inspect) && numkeys > 2 && args.len() >= 3 + numkeys {
            args.drain(5..3 + numkeys);
        }
        let arg = |i: usize| args.get(i).cloned().unwrap_or_default();
        let num = |i: usize| {
            std::str::from_utf8(&arg(i))
                .ok()
                .and_then(|s| s.parse::<i64>().ok())
                .unwrap_or(0)
        };
        let (key, fence, token) = (arg(3), arg(4), arg(5));
        match script {
            Some(Script::Acquire | Script::AcquireQueued) => {
                let f = self.raise(&fence, 0).saturating_add(1);
                self.fences.insert(fence.clone(), f);
                match self.live(&key, now) {
                    None => {
                        self.locks
                            .insert(key, (token, now.saturating_add(num(6).max(1) as u64)));
                        Ok(vec![1, f, 0])
                    }
                    Some((_, exp)) => Ok(vec![
                        0,
                        f,
                        exp.saturating_sub(now).min(i64::MAX as u64) as i64,
                    ]),
                }
            }
            Some(Script::Extend) => {
                let f = self.raise(&fence, num(7));
                match self.live(&key, now) {
                    Some((t, _)) if t == token => {
                        self.locks
                            .insert(key, (t, now.saturating_add(num(6).max(1) as u64)));
                        Ok(vec![1, f])
                    }
                    _ => Ok(vec![0, f]),
                }
            }
            Some(Script::Release) => {
                self.raise(&fence, num(6));
                match self.live(&key, now) {
                    Some((t, _)) if t == token => {
                        self.locks.remove(&key);
                        Ok(vec![1])
                    }
                    _ => Ok(vec![0]),
                }
            }
            Some(Script::Status) => {
                let f = self.raise(&fence, 0);
                match self.live(&key, now) {
                    None => Ok(vec![0, 0, -2, f]),
                    Some((t, exp)) => Ok(vec![
                        1,
                        i64::from(t == token),
                        exp.saturating_sub(now).min(i64::MAX as u64) as i64,
                        f,
                    ]),
                }
            }
            Some(Script::Leave) => Ok(vec![1]),
            // Inspect: the lock key, and no semaphore (this model keeps none:
            // the scenario takes locks only); a declared slot is free.
            Some(Script::Inspect) => {
                let f = self.raise(&fence, 0);
                // Keys: lock, counter, limit, readers, then the slots; no reader here.
                let slots = usize::try_from(num(2).saturating_sub(4)).unwrap_or(0);
                let mut r = match self.live(&key, now) {
                    None => vec![0, -2, f, 0, 0, -2],
                    Some((_, exp)) => vec![
                        1,
                        exp.saturating_sub(now).min(i64::MAX as u64) as i64,
                        f,
                        0,
                        0,
                        -2,
                    ],
                };
                r.extend(std::iter::repeat(-2).take(slots));
                Ok(r)
            }
            Some(Script::AcquirePermit | Script::PermitCleanup) => {
                Err("ERR semaphores are not modelled here".into())
            }
            Some(
                Script::AcquireShared
                | Script::ExtendShared
                | Script::ReleaseShared
                | Script::StatusShared,
            ) => Err("ERR read-write locks are not modelled here".into()),
            // The hostile scenarios take locks only: no leader record.
            Some(Script::LeaderRecord | Script::Leader) => {
                Err("ERR elections are not modelled here".into())
            }
            // Nor re-entry: the locks here are never re-entered.
            Some(Script::Reenter) => Err("ERR re-entry is not modelled here".into()),
            // Nor sets: the scenarios take one name at a time.
            Some(Script::AcquireSet) => Err("ERR lock sets are not modelled here".into()),
            None => Err("NOSCRIPT unknown script".into()),
        }
    }

    /// The valid reply to `req` in `proto`'s format.
    pub fn reply(&mut self, req: &HttpRequest, proto: Proto, now: u64) -> Reply {
        if let Some(channel) = subscription_channel(req, proto) {
            return self.subscribe(&channel, proto, now);
        }
        let args: Vec<Vec<u8>> = match proto {
            Proto::Upstash => serde_json::from_slice::<Vec<String>>(&req.body)
                .unwrap_or_default()
                .into_iter()
                .map(String::into_bytes)
                .collect(),
            Proto::Webdis => webdis_args(&req.body),
        };
        let verb = args
            .first()
            .map_or_else(String::new, |v| String::from_utf8_lossy(v).into_owned());
        let result = self.run(&args, now);
        let value = match &result {
            Ok(ints) if ints.len() == 1 => json!(ints[0]),
            Ok(ints) => json!(ints),
            Err(e) => Value::String(e.clone()),
        };
        let body = match (proto, result.is_ok()) {
            (Proto::Upstash, true) => json!({ "result": value }),
            (Proto::Upstash, false) => json!({ "error": value }),
            // Webdis keys the reply by the command name as sent (EVAL or EVALSHA).
            (Proto::Webdis, true) => json!({ verb: value }),
            (Proto::Webdis, false) => json!({ verb: [false, value] }),
        };
        let status = if proto == Proto::Upstash && result.is_err() {
            400
        } else {
            200
        };
        Reply::Whole {
            status,
            body: body.to_string().into_bytes(),
        }
    }
}

/// The channel of a subscription request (`POST <base>/subscribe/<ch>` on
/// Upstash, `GET <base>/SUBSCRIBE/<ch>` on webdis), if it is one.
pub fn subscription_channel(req: &HttpRequest, proto: Proto) -> Option<String> {
    let path = path_of(req.target.url().unwrap_or(""));
    let prefix = match proto {
        Proto::Upstash => "/subscribe/",
        Proto::Webdis => "/SUBSCRIBE/",
    };
    path.strip_prefix(prefix)
        .filter(|c| !c.is_empty() && !c.contains('/'))
        .map(str::to_string)
}

/// One push event in `proto`'s framing: `kind`, the channel, then the count
/// (a number) or the payload (a string).
pub fn push_event(proto: Proto, kind: &str, channel: &str, last: &Value) -> Vec<u8> {
    match proto {
        Proto::Upstash => {
            let last = last
                .as_str()
                .map_or_else(|| last.to_string(), str::to_string);
            format!("data: {kind},{channel},{last}\n\n").into_bytes()
        }
        Proto::Webdis => json!({ "SUBSCRIBE": [kind, channel, last] })
            .to_string()
            .into_bytes(),
    }
}

impl RedisModel {
    /// A subscription: confirmed at once. A foreign holder of the lock the
    /// channel belongs to releases right after (the etcd model's watched
    /// predecessor goes away the same way), which publishes on it, so that
    /// the waiter's next attempt walks on into a grant.
    fn subscribe(&mut self, channel: &str, proto: Proto, now: u64) -> Reply {
        let mut messages = vec![push_event(proto, "subscribe", channel, &json!(1))];
        let key = self
            .locks
            .keys()
            .find(|k| wake_channel(&String::from_utf8_lossy(k)) == channel)
            .cloned();
        if let Some(key) = key {
            if self
                .live(&key, now)
                .is_some_and(|(owner, _)| owner == b"foreign-owner")
            {
                self.locks.remove(&key);
                let fence = self
                    .fences
                    .get(&[key.as_slice(), b":fence"].concat())
                    .copied()
                    .unwrap_or(0);
                messages.push(push_event(
                    proto,
                    "message",
                    channel,
                    &json!(format!("released:{fence}")),
                ));
            }
        }
        Reply::Stream { messages }
    }
}

// ---- the Durable Object lock service (docs/lock-service-api.md) --------------

/// The owner of a lock another client holds (a valid owner: 32 hex).
pub const FOREIGN_OWNER: &str = "f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0";

struct DurableLock {
    /// The fencing counter (the last token granted).
    counter: u64,
    /// Owner, token and lease end.
    holder: Option<(String, u64, u64)>,
}

/// The lock service behind the front (`<base>/v1/<op>?name=`, bearer
/// token): one holder per name with its owner, token and lease end; no
/// queue. A held-open acquire (`waitMs` > 0) against another client's lock
/// is answered at once, every other time granted (that client released
/// meanwhile, as the other models' foreign holders do) and otherwise
/// refused (its wait "ran out"); against this session's own lock it is
/// refused.
pub struct DurableModel {
    base: String,
    bearer: String,
    locks: HashMap<String, DurableLock>,
    polls: u64,
}

fn service_error(status: u16, message: &str) -> Reply {
    Reply::Whole {
        status,
        body: json!({"error": {"code": "INVALID_ARGUMENT", "message": message}})
            .to_string()
            .into_bytes(),
    }
}

impl DurableModel {
    pub fn new(base: &str, token: &str) -> DurableModel {
        DurableModel {
            base: base.to_string(),
            bearer: format!("Bearer {token}"),
            locks: HashMap::new(),
            polls: 0,
        }
    }

    /// Another client holds `name` (as the request's query spells it)
    /// until `until`, with token `token`.
    pub fn seed_foreign(&mut self, name: &str, token: u64, until: u64) {
        self.locks.insert(
            name.to_string(),
            DurableLock {
                counter: token,
                holder: Some((FOREIGN_OWNER.to_string(), token, until)),
            },
        );
    }

    /// The valid reply to `req` at `now` (and its effect on the service).
    pub fn reply(&mut self, req: &HttpRequest, now: u64) -> Reply {
        let authorized = req
            .headers
            .iter()
            .any(|(k, v)| k.eq_ignore_ascii_case("authorization") && *v == self.bearer);
        if !authorized {
            return Reply::Whole {
                status: 401,
                body: json!({"error": "missing or wrong bearer token", "code": "UNAUTHORIZED"})
                    .to_string()
                    .into_bytes(),
            };
        }
        let url = req.target.url().unwrap_or("");
        let Some((op, name)) = url
            .strip_prefix(self.base.as_str())
            .and_then(|p| p.strip_prefix("/v1/"))
            .and_then(|p| p.split_once("?name="))
        else {
            return service_error(404, "unknown path");
        };
        if name.is_empty() {
            return service_error(400, "missing name");
        }
        let body = match serde_json::from_slice::<Value>(&req.body) {
            Ok(Value::Object(o)) => o,
            _ => return service_error(400, "the body must be a JSON object"),
        };
        let owner = body.get("owner").and_then(Value::as_str).unwrap_or("");
        let token = body
            .get("token")
            .and_then(Value::as_str)
            .and_then(|t| t.parse::<u64>().ok());
        let ttl = body.get("ttlMs").and_then(Value::as_u64);
        let lock = self.locks.entry(name.to_string()).or_insert(DurableLock {
            counter: 0,
            holder: None,
        });
        // A holder whose lease ended is gone.
        if lock
            .holder
            .as_ref()
            .is_some_and(|(_, _, until)| *until <= now)
        {
            lock.holder = None;
        }
        let ours = |lock: &DurableLock| matches!(&lock.holder, Some((o, t, _)) if o == owner && Some(*t) == token);
        match op {
            "acquire" => {
                let (Some(ttl), Some(wait)) = (ttl, body.get("waitMs").and_then(Value::as_u64))
                else {
                    return service_error(400, "bad ttlMs or waitMs");
                };
                if owner.is_empty() || ttl == 0 {
                    return service_error(400, "bad owner or ttlMs");
                }
                match lock.holder.clone() {
                    Some((o, t, until)) if o == owner => ok(
                        json!({"acquired": true, "token": t.to_string(), "ttlMs": until - now, "waiters": 0}),
                    ),
                    Some((o, t, until)) => {
                        self.polls += 1;
                        if wait > 0 && o == FOREIGN_OWNER && self.polls % 2 == 0 {
                            lock.counter += 1;
                            lock.holder =
                                Some((owner.to_string(), lock.counter, now.saturating_add(ttl)));
                            ok(
                                json!({"acquired": true, "token": lock.counter.to_string(), "ttlMs": ttl, "waiters": 0}),
                            )
                        } else {
                            ok(
                                json!({"acquired": false, "token": t.to_string(), "pttlMs": until - now, "waiters": u64::from(wait > 0)}),
                            )
                        }
                    }
                    None => {
                        lock.counter += 1;
                        lock.holder =
                            Some((owner.to_string(), lock.counter, now.saturating_add(ttl)));
                        ok(
                            json!({"acquired": true, "token": lock.counter.to_string(), "ttlMs": ttl, "waiters": 0}),
                        )
                    }
                }
            }
            "release" => {
                let released = ours(lock);
                if released {
                    lock.holder = None;
                }
                ok(json!({ "released": released }))
            }
            "extend" => match ttl.filter(|t| *t > 0) {
                None => service_error(400, "bad ttlMs"),
                Some(ttl) if ours(lock) => {
                    if let Some(h) = lock.holder.as_mut() {
                        h.2 = now.saturating_add(ttl);
                    }
                    ok(json!({"extended": true, "ttlMs": ttl}))
                }
                Some(_) => ok(json!({"extended": false})),
            },
            "resume" => match &lock.holder {
                Some((_, _, until)) if ours(lock) => {
                    ok(json!({"held": true, "pttlMs": until - now}))
                }
                _ => ok(json!({"held": false})),
            },
            "inspect" => {
                let token = (lock.counter > 0).then(|| lock.counter.to_string());
                match &lock.holder {
                    Some((_, t, until)) => ok(
                        json!({"held": true, "token": t.to_string(), "pttlMs": until - now, "waiters": 0}),
                    ),
                    None => {
                        ok(json!({"held": false, "token": token, "pttlMs": null, "waiters": 0}))
                    }
                }
            }
            _ => service_error(404, "unknown path"),
        }
    }
}

// ---- a D1 database behind its binding (`/d1/batch`) --------------------------

struct D1Row {
    owner: Option<String>,
    expires_at: u64,
    version: u64,
}

/// The lock table of src/core/d1/sql.rs answered by hand: each statement
/// the codec builds is recognised by its exact text and applied to a map
/// of rows, on the database's clock (the session's `now` plus an epoch).
pub struct D1Model {
    table: String,
    rows: HashMap<String, D1Row>,
}

/// The database's clock: ms since the Unix epoch.
const D1_EPOCH: u64 = 1_760_000_000_000;

impl D1Model {
    pub fn new(table: &str) -> D1Model {
        D1Model {
            table: table.to_string(),
            rows: HashMap::new(),
        }
    }

    /// Another client holds `name` until `until` (session time), as grant
    /// `version`.
    pub fn seed_foreign(&mut self, name: &str, version: u64, until: u64) {
        self.rows.insert(
            name.to_string(),
            D1Row {
                owner: Some(FOREIGN_OWNER.to_string()),
                expires_at: D1_EPOCH + until,
                version,
            },
        );
    }

    /// One statement: its rows and changes, or D1's error message.
    fn statement(&mut self, sql_text: &str, params: &[Value], now: u64) -> Result<Value, String> {
        use edgelock::internals::d1::sql;
        let t = self.table.as_str();
        let text = |i: usize| params.get(i).and_then(Value::as_str).unwrap_or("");
        let int = |i: usize| params.get(i).and_then(Value::as_u64).unwrap_or(0);
        let name = text(0).to_string();
        let owner = text(1).to_string();
        let db_now = D1_EPOCH + now;
        let live = |r: &D1Row| r.owner.is_some() && r.expires_at > db_now;
        let result = |rows: Vec<Value>, changes: u64| json!({"rows": rows, "changes": changes});
        if sql_text == sql::create(t) {
            return Ok(result(Vec::new(), 0));
        }
        if sql_text == sql::take(t) {
            let expires_at = db_now.saturating_add(int(2));
            return Ok(match self.rows.get_mut(&name) {
                None => {
                    let row = D1Row {
                        owner: Some(owner),
                        expires_at,
                        version: 1,
                    };
                    self.rows.insert(name, row);
                    result(Vec::new(), 1)
                }
                Some(r) if !live(r) => {
                    r.owner = Some(owner);
                    r.expires_at = expires_at;
                    r.version += 1;
                    result(Vec::new(), 1)
                }
                Some(_) => result(Vec::new(), 0),
            });
        }
        let pttl = |r: &D1Row| live(r).then(|| r.expires_at - db_now);
        let mine = |r: &D1Row| live(r) && r.owner.as_deref() == Some(owner.as_str());
        let grant = |r: &D1Row| mine(r) && r.version == int(2);
        if sql_text == sql::probe(t) {
            let rows = self.rows.get(&name).map(
                |r| json!({"mine": u64::from(mine(r)), "version": r.version, "pttl": pttl(r)}),
            );
            return Ok(result(rows.into_iter().collect(), 0));
        }
        if sql_text == sql::release(t) {
            let changed = self.rows.get_mut(&name).filter(|r| grant(r));
            let n = u64::from(changed.is_some());
            if let Some(r) = changed {
                r.owner = None;
            }
            return Ok(result(Vec::new(), n));
        }
        if sql_text == sql::leave(t) {
            let changed = self
                .rows
                .get_mut(&name)
                .filter(|r| r.owner.as_deref() == Some(owner.as_str()));
            let n = u64::from(changed.is_some());
            if let Some(r) = changed {
                r.owner = None;
            }
            return Ok(result(Vec::new(), n));
        }
        if sql_text == sql::extend(t) {
            let ttl = int(3);
            let changed = self.rows.get_mut(&name).filter(|r| grant(r));
            let n = u64::from(changed.is_some());
            if let Some(r) = changed {
                r.expires_at = db_now.saturating_add(ttl);
            }
            return Ok(result(Vec::new(), n));
        }
        if sql_text == sql::resume(t) {
            let rows = self
                .rows
                .get(&name)
                .filter(|r| grant(r))
                .map(|r| json!({ "pttl": r.expires_at - db_now }));
            return Ok(result(rows.into_iter().collect(), 0));
        }
        if sql_text == sql::inspect(t) {
            let rows = self
                .rows
                .get(&name)
                .map(|r| json!({"version": r.version, "pttl": pttl(r)}));
            return Ok(result(rows.into_iter().collect(), 0));
        }
        Err("D1_ERROR: not a statement of the lock table".into())
    }

    /// The valid answer to a batch (one transaction: an error undoes
    /// nothing here, as no statement of this model fails after another
    /// changed something).
    pub fn reply(&mut self, req: &HttpRequest, now: u64) -> Reply {
        let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
        let Some(statements) = body.get("statements").and_then(Value::as_array) else {
            return Reply::Whole {
                status: 500,
                body: json!({"error": "D1_ERROR: no statements"})
                    .to_string()
                    .into_bytes(),
            };
        };
        let mut results = Vec::new();
        for s in statements {
            let sql_text = s.get("sql").and_then(Value::as_str).unwrap_or("");
            let params = s
                .get("params")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            match self.statement(sql_text, &params, now) {
                Ok(r) => results.push(r),
                Err(e) => {
                    return Reply::Whole {
                        status: 500,
                        body: json!({ "error": e }).to_string().into_bytes(),
                    }
                }
            }
        }
        ok(json!({ "results": results }))
    }
}
