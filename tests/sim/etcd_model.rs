//! An in-memory etcd v3 speaking the JSON gateway the way etcd 3.4.23 does,
//! limited to what the lock recipe uses (lease grant/keepalive/revoke/
//! timetolive, kv range/put/deleterange/txn, watch), but byte-exact there.
//!
//! One linearizable store (a cluster behind several endpoints is one model
//! with several URL bases). The clock is the world's global clock; a lease
//! expires exactly at `last keepalive received + TTL` (real etcd may expire a
//! little later, never earlier, so this is the harshest allowed choice).
//!
//! # Captured from a real etcd 3.4.23 (single member, defaults)
//!
//! Field order, omitted zero values, int64 as strings and base64 bytes below
//! are what the model reproduces (see the `matches_captured_etcd` tests).
//!
//! ```text
//! POST /v3/lease/grant {"TTL":10}
//!   {"header":{"cluster_id":"15118495548433857066","member_id":"13668033151171901709","revision":"1","raft_term":"2"},"ID":"4111120172064440581","TTL":"10"}
//! POST /v3/lease/grant {"TTL":1}                      -> ..."TTL":"2"   (minimum TTL 2 s)
//! POST /v3/lease/grant {"TTL":5,"ID":777} twice       -> 412 {"error":"etcdserver: lease already exists","message":"etcdserver: lease already exists","code":9}
//! POST /v3/kv/txn  put-if-create==0 + range(prefix, sort CREATE ASCEND, limit 1), success
//!   {"header":{..."revision":"2"...},"succeeded":true,"responses":[{"response_put":{"header":{"revision":"2"}}},
//!    {"response_range":{"header":{"revision":"2"},"kvs":[{"key":"ZWRnZWxvY2svYS8x","create_revision":"2","mod_revision":"2","version":"1","lease":"4111120172064440585"}],"count":"1"}}]}
//! same txn again (compare fails; "succeeded" omitted, failure branch runs)
//!   {"header":{...},"responses":[{"response_range":{"header":{"revision":"2"},"kvs":[...],"count":"1"}}]}
//! txn whose compare fails and has no failure ops -> {"header":{...}}
//! POST /v3/kv/range (nothing found)               -> {"header":{...}}
//! range count_only                                 -> {"header":{...},"count":"1"}
//! range limit 1 of 3 (sorted, filtered by max_create_revision) -> ...,"kvs":[...],"more":true,"count":"3"
//!   (count is the size of the whole range, before min/max filters and limit)
//! put (prev_kv) -> {"header":{...},"prev_kv":{"key":..,"create_revision":"5","mod_revision":"5","version":"1","value":"djM=","lease":".."}}
//! deleterange -> {"header":{...},"deleted":"1","prev_kvs":[...]};  nothing deleted -> {"header":{...}} (revision unchanged)
//! txn delete sub-responses -> {"response_delete_range":{"header":{"revision":"7"},"deleted":"1"}} / {"response_delete_range":{"header":{"revision":"7"}}}
//! POST /v3/lease/keepalive {"ID":".."}  -> {"result":{"header":{...},"ID":"..","TTL":"30"}}\n
//!   unknown or expired lease            -> {"result":{"header":{...},"ID":"12345"}}\n   (HTTP 200, TTL omitted = 0)
//! POST /v3/lease/timetolive {"ID":..,"keys":true} -> {"header":{...},"ID":"..","TTL":"29","grantedTTL":"30","keys":["ZWRnZWxvY2svYS8x"]}
//!   (TTL = whole seconds remaining, truncated; "keys" omitted when empty)   unknown -> {"header":{...},"ID":"12345","TTL":"-1"}
//! POST /v3/lease/revoke unknown, put/txn with an unknown lease
//!   -> 404 {"error":"etcdserver: requested lease not found","message":"etcdserver: requested lease not found","code":5}
//! revoking (or expiring) a lease with 2 keys deletes both at ONE new revision.
//! malformed JSON -> 400 {"error":"unexpected EOF","message":"unexpected EOF","code":3}
//! unknown path   -> 404, text "Not Found\n"
//! POST /v3/watch {"create_request":{"key":..,"start_revision":"9"}}  (chunked, one JSON object per line)
//!   {"result":{"header":{..."revision":"10"...},"created":true}}
//!   {"result":{"header":{..."revision":"10"...},"events":[{"kv":{"key":"ZWRnZWxvY2svYy8x","create_revision":"9","mod_revision":"9","version":"1","lease":".."}}]}}
//!   {"result":{"header":{..."revision":"12"...},"events":[{"type":"DELETE","kv":{"key":"ZWRnZWxvY2svYy8x","mod_revision":"12"}}]}}
//!   (replayed events come in one message headed by the current revision; live events one message per
//!    revision; PUT's "type" is omitted; with prev_kv each event also has "prev_kv")
//! compare on a missing key: VALUE compares are always false; others compare against zeros.
//! ```
//!
//! Not modelled: compaction (no `compact_revision` replies), historical reads
//! (`revision` in range is rejected), nested txns, auth, watch progress
//! notifications, `ignore_value`/`ignore_lease`.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet, HashMap};

use base64::Engine;
use edgelock::core::{HttpRequest, Method, Millis, RequestId};
use serde_json::Value;

use super::net::{Reply, SimRng, SimServer, CLIENT_HEADER};

pub const CLUSTER_ID: &str = "15118495548433857066";
pub const MEMBER_ID: &str = "13668033151171901709";
pub const RAFT_TERM: &str = "2";
/// etcd's minimum lease TTL with default heartbeat/election settings.
pub const MIN_TTL_S: i64 = 2;
pub const MAX_TTL_S: i64 = 9_000_000_000;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kv {
    pub create_revision: i64,
    pub mod_revision: i64,
    pub version: i64,
    pub value: Vec<u8>,
    pub lease: i64,
}

#[derive(Clone, Debug)]
pub struct Lease {
    pub id: i64,
    pub ttl_s: i64,
    pub expires_at: Millis,
    pub keys: BTreeSet<Vec<u8>>,
    /// The client index that granted it (from the world's CLIENT_HEADER).
    pub granted_by: Option<usize>,
    pub last_renewed: Millis,
}

#[derive(Clone, Debug)]
struct EventRec {
    rev: i64,
    key: Vec<u8>,
    /// None for a DELETE.
    kv: Option<Kv>,
    prev: Option<Kv>,
}

#[derive(Clone, Debug)]
struct Watcher {
    key: Vec<u8>,
    range_end: Vec<u8>,
    no_put: bool,
    no_delete: bool,
    prev_kv: bool,
    /// Live events below this revision are not sent (start_revision in the future).
    from_rev: i64,
}

#[derive(Debug)]
struct GwError {
    status: u16,
    code: i32,
    message: String,
}

impl GwError {
    fn new(status: u16, code: i32, message: impl Into<String>) -> Self {
        GwError {
            status,
            code,
            message: message.into(),
        }
    }
    fn lease_not_found() -> Self {
        GwError::new(404, 5, "etcdserver: requested lease not found")
    }
    fn bad(message: impl Into<String>) -> Self {
        GwError::new(400, 3, message)
    }
    fn reply(&self) -> Reply {
        let m = json_str(&self.message);
        let body = format!("{{\"error\":{m},\"message\":{m},\"code\":{}}}", self.code);
        Reply::Full {
            status: self.status,
            body: body.into_bytes(),
        }
    }
}

pub struct EtcdModel {
    revision: i64,
    kvs: BTreeMap<Vec<u8>, Kv>,
    leases: BTreeMap<i64, Lease>,
    history: Vec<EventRec>,
    watchers: BTreeMap<u64, Watcher>,
    out: Vec<(RequestId, Vec<u8>)>,
    next_lease_id: i64,
    /// Requests served, by path (e.g. "/v3/kv/txn").
    pub requests: HashMap<String, u64>,
    flaky: Option<Flaky>,
}

/// Transient server errors: etcd answers `503 "etcdserver: request timed out"`
/// (gRPC Unavailable, code 14) when a proposal does not commit in time — and
/// the proposal may still have been applied.
struct Flaky {
    rng: SimRng,
    chance: f64,
    until: Millis,
}

// ------------------------------------------------------------------ JSON out

fn json_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Builds one JSON object in a fixed field order.
struct Obj(String);

impl Obj {
    fn new() -> Self {
        Obj(String::from("{"))
    }
    fn field(mut self, k: &str, raw: &str) -> Self {
        if self.0.len() > 1 {
            self.0.push(',');
        }
        self.0.push('"');
        self.0.push_str(k);
        self.0.push_str("\":");
        self.0.push_str(raw);
        self
    }
    fn str(self, k: &str, v: &str) -> Self {
        let s = json_str(v);
        self.field(k, &s)
    }
    /// An int64 the way protobuf's JSON mapping writes it: a string, omitted when 0.
    fn int(self, k: &str, v: i64) -> Self {
        if v == 0 {
            self
        } else {
            self.field(k, &format!("\"{v}\""))
        }
    }
    fn bytes(self, k: &str, v: &[u8]) -> Self {
        if v.is_empty() {
            self
        } else {
            self.str(k, &b64(v))
        }
    }
    fn flag(self, k: &str, v: bool) -> Self {
        if v {
            self.field(k, "true")
        } else {
            self
        }
    }
    fn list(self, k: &str, items: &[String]) -> Self {
        if items.is_empty() {
            self
        } else {
            let raw = format!("[{}]", items.join(","));
            self.field(k, &raw)
        }
    }
    fn end(mut self) -> String {
        self.0.push('}');
        self.0
    }
}

fn header(rev: i64) -> String {
    Obj::new()
        .str("cluster_id", CLUSTER_ID)
        .str("member_id", MEMBER_ID)
        .int("revision", rev)
        .str("raft_term", RAFT_TERM)
        .end()
}

fn sub_header(rev: i64) -> String {
    Obj::new().int("revision", rev).end()
}

fn kv_json(key: &[u8], kv: &Kv, keys_only: bool) -> String {
    let o = Obj::new()
        .bytes("key", key)
        .int("create_revision", kv.create_revision)
        .int("mod_revision", kv.mod_revision)
        .int("version", kv.version);
    let o = if keys_only {
        o
    } else {
        o.bytes("value", &kv.value)
    };
    o.int("lease", kv.lease).end()
}

// ------------------------------------------------------------------ JSON in

/// An int64 field: number, decimal string, or absent (0).
fn int(v: &Value, k: &str) -> Result<i64, GwError> {
    match v.get(k) {
        None | Some(Value::Null) => Ok(0),
        Some(Value::Number(n)) => n
            .as_i64()
            .ok_or_else(|| GwError::bad(format!("bad int64 in {k}"))),
        Some(Value::String(s)) => s
            .parse::<i64>()
            .map_err(|_| GwError::bad(format!("bad int64 in {k}"))),
        Some(_) => Err(GwError::bad(format!("bad int64 in {k}"))),
    }
}

fn bytes(v: &Value, k: &str) -> Result<Vec<u8>, GwError> {
    match v.get(k) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) => base64::engine::general_purpose::STANDARD
            .decode(s)
            .map_err(|e| GwError::bad(format!("illegal base64 data: {e}"))),
        Some(_) => Err(GwError::bad(format!("bad bytes in {k}"))),
    }
}

fn flag(v: &Value, k: &str) -> Result<bool, GwError> {
    match v.get(k) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(GwError::bad(format!("bad bool in {k}"))),
    }
}

/// A protobuf enum: its name or its number.
fn enumeration(v: &Value, k: &str, names: &[&str]) -> Result<i64, GwError> {
    match v.get(k) {
        None | Some(Value::Null) => Ok(0),
        Some(Value::Number(n)) => n
            .as_i64()
            .filter(|i| (0..names.len() as i64).contains(i))
            .ok_or_else(|| GwError::bad(format!("bad enum in {k}"))),
        Some(Value::String(s)) => names
            .iter()
            .position(|n| n == s)
            .map(|i| i as i64)
            .ok_or_else(|| GwError::bad(format!("unknown value {s:?} for enum {k}"))),
        Some(_) => Err(GwError::bad(format!("bad enum in {k}"))),
    }
}

const SORT_ORDER: &[&str] = &["NONE", "ASCEND", "DESCEND"];
const SORT_TARGET: &[&str] = &["KEY", "VERSION", "CREATE", "MOD", "VALUE"];
const CMP_TARGET: &[&str] = &["VERSION", "CREATE", "MOD", "VALUE", "LEASE"];
const CMP_RESULT: &[&str] = &["EQUAL", "GREATER", "LESS", "NOT_EQUAL"];
const WATCH_FILTER: &[&str] = &["NOPUT", "NODELETE"];

fn in_range(k: &[u8], key: &[u8], range_end: &[u8]) -> bool {
    if range_end.is_empty() {
        k == key
    } else if range_end == [0] {
        k >= key
    } else {
        k >= key && k < range_end
    }
}

// ------------------------------------------------------------------ results

struct RangeResult {
    kvs: Vec<(Vec<u8>, Kv)>,
    more: bool,
    count: i64,
    keys_only: bool,
    count_only: bool,
}

impl RangeResult {
    /// The body fields after the header (shared by /v3/kv/range and txn).
    fn fields(&self, o: Obj) -> Obj {
        let kvs: Vec<String> = if self.count_only {
            Vec::new()
        } else {
            self.kvs
                .iter()
                .map(|(k, kv)| kv_json(k, kv, self.keys_only))
                .collect()
        };
        o.list("kvs", &kvs)
            .flag("more", self.more)
            .int("count", self.count)
    }
}

enum OpResult {
    Put {
        prev: Option<(Vec<u8>, Kv)>,
    },
    Range(RangeResult),
    Delete {
        deleted: Vec<(Vec<u8>, Kv)>,
        prev_kv: bool,
    },
}

impl OpResult {
    fn to_json(&self, rev: i64) -> String {
        match self {
            OpResult::Put { prev } => {
                let o = Obj::new().field("header", &sub_header(rev));
                let o = match prev {
                    Some((k, kv)) => o.field("prev_kv", &kv_json(k, kv, false)),
                    None => o,
                };
                Obj::new().field("response_put", &o.end()).end()
            }
            OpResult::Range(r) => {
                let o = r.fields(Obj::new().field("header", &sub_header(rev)));
                Obj::new().field("response_range", &o.end()).end()
            }
            OpResult::Delete { deleted, prev_kv } => {
                let o = Obj::new()
                    .field("header", &sub_header(rev))
                    .int("deleted", deleted.len() as i64);
                let o = if *prev_kv {
                    let prevs: Vec<String> = deleted
                        .iter()
                        .map(|(k, kv)| kv_json(k, kv, false))
                        .collect();
                    o.list("prev_kvs", &prevs)
                } else {
                    o
                };
                Obj::new().field("response_delete_range", &o.end()).end()
            }
        }
    }
}

/// The writes of one request: they all get revision `rev` if any happen.
struct Tx {
    rev: i64,
    events: Vec<EventRec>,
}

impl EtcdModel {
    /// `lease_id_base`: the first lease id handed out (pick a large one: real
    /// ids are around 2^61 and must survive JSON round trips).
    pub fn new(lease_id_base: i64) -> Self {
        EtcdModel {
            revision: 1,
            kvs: BTreeMap::new(),
            leases: BTreeMap::new(),
            history: Vec::new(),
            watchers: BTreeMap::new(),
            out: Vec::new(),
            next_lease_id: lease_id_base.max(1),
            requests: HashMap::new(),
            flaky: None,
        }
    }

    /// Before `until`, answer non-watch requests with a 503 "request timed
    /// out" with probability `chance`; half of those were applied anyway.
    pub fn set_flaky(&mut self, seed: u64, chance: f64, until: Millis) {
        self.flaky = Some(Flaky {
            rng: SimRng::new(seed),
            chance,
            until,
        });
    }

    fn flaky_error(&mut self, now: Millis, req: &HttpRequest) -> Option<bool> {
        let f = self.flaky.as_mut()?;
        if req.stream || now >= f.until || !f.rng.chance(f.chance) {
            return None;
        }
        Some(f.rng.chance(0.5))
    }

    // -------------------------------------------------------------- inspection

    pub fn revision(&self) -> i64 {
        self.revision
    }
    pub fn kv(&self, key: &[u8]) -> Option<&Kv> {
        self.kvs.get(key)
    }
    pub fn keys_with_prefix<'a>(
        &'a self,
        prefix: &'a [u8],
    ) -> impl Iterator<Item = (&'a Vec<u8>, &'a Kv)> + 'a {
        self.kvs
            .range(prefix.to_vec()..)
            .take_while(move |(k, _)| k.starts_with(prefix))
    }
    pub fn key_count(&self) -> usize {
        self.kvs.len()
    }
    pub fn lease(&self, id: i64) -> Option<&Lease> {
        self.leases.get(&id)
    }
    pub fn leases(&self) -> impl Iterator<Item = &Lease> {
        self.leases.values()
    }
    pub fn watcher_count(&self) -> usize {
        self.watchers.len()
    }

    // -------------------------------------------------------------- store

    fn begin(&self) -> Tx {
        Tx {
            rev: self.revision + 1,
            events: Vec::new(),
        }
    }

    fn put(&mut self, tx: &mut Tx, key: Vec<u8>, value: Vec<u8>, lease: i64) -> Option<Kv> {
        let prev = self.kvs.get(&key).cloned();
        if let Some(p) = &prev {
            if p.lease != 0 && p.lease != lease {
                if let Some(l) = self.leases.get_mut(&p.lease) {
                    l.keys.remove(&key);
                }
            }
        }
        if lease != 0 {
            if let Some(l) = self.leases.get_mut(&lease) {
                l.keys.insert(key.clone());
            }
        }
        let kv = Kv {
            create_revision: prev.as_ref().map_or(tx.rev, |p| p.create_revision),
            mod_revision: tx.rev,
            version: prev.as_ref().map_or(1, |p| p.version + 1),
            value,
            lease,
        };
        self.kvs.insert(key.clone(), kv.clone());
        tx.events.push(EventRec {
            rev: tx.rev,
            key,
            kv: Some(kv),
            prev: prev.clone(),
        });
        prev
    }

    fn delete_range(&mut self, tx: &mut Tx, key: &[u8], range_end: &[u8]) -> Vec<(Vec<u8>, Kv)> {
        let doomed: Vec<Vec<u8>> = self.range_keys(key, range_end);
        let mut out = Vec::new();
        for k in doomed {
            if let Some(kv) = self.kvs.remove(&k) {
                if let Some(l) = self.leases.get_mut(&kv.lease) {
                    l.keys.remove(&k);
                }
                tx.events.push(EventRec {
                    rev: tx.rev,
                    key: k.clone(),
                    kv: None,
                    prev: Some(kv.clone()),
                });
                out.push((k, kv));
            }
        }
        out
    }

    fn range_keys(&self, key: &[u8], range_end: &[u8]) -> Vec<Vec<u8>> {
        if range_end.is_empty() {
            return if self.kvs.contains_key(key) {
                vec![key.to_vec()]
            } else {
                Vec::new()
            };
        }
        self.kvs
            .range(key.to_vec()..)
            .map(|(k, _)| k)
            .take_while(|k| in_range(k, key, range_end))
            .cloned()
            .collect()
    }

    /// Commits the writes of `tx` (one new revision if there were any) and feeds watchers.
    fn commit(&mut self, tx: Tx) {
        if tx.events.is_empty() {
            return;
        }
        self.revision = tx.rev;
        for (wid, w) in &self.watchers {
            let evs: Vec<&EventRec> = tx.events.iter().filter(|e| watch_matches(w, e)).collect();
            if !evs.is_empty() {
                self.out
                    .push((RequestId(*wid), watch_message(tx.rev, &evs, w.prev_kv)));
            }
        }
        self.history.extend(tx.events);
    }

    fn range(&self, r: &Value) -> Result<RangeResult, GwError> {
        let key = bytes(r, "key")?;
        let range_end = bytes(r, "range_end")?;
        if int(r, "revision")? != 0 {
            return Err(GwError::bad("model: historical reads are not modelled"));
        }
        let limit = int(r, "limit")?;
        let mut order = enumeration(r, "sort_order", SORT_ORDER)?;
        let target = enumeration(r, "sort_target", SORT_TARGET)?;
        let (min_c, max_c) = (
            int(r, "min_create_revision")?,
            int(r, "max_create_revision")?,
        );
        let (min_m, max_m) = (int(r, "min_mod_revision")?, int(r, "max_mod_revision")?);
        let keys_only = flag(r, "keys_only")?;
        let count_only = flag(r, "count_only")?;
        let all: Vec<(Vec<u8>, Kv)> = self
            .range_keys(&key, &range_end)
            .into_iter()
            .filter_map(|k| self.kvs.get(&k).cloned().map(|kv| (k, kv)))
            .collect();
        let count = all.len() as i64;
        let mut kvs: Vec<(Vec<u8>, Kv)> = all
            .into_iter()
            .filter(|(_, kv)| {
                (min_c == 0 || kv.create_revision >= min_c)
                    && (max_c == 0 || kv.create_revision <= max_c)
                    && (min_m == 0 || kv.mod_revision >= min_m)
                    && (max_m == 0 || kv.mod_revision <= max_m)
            })
            .collect();
        if target != 0 && order == 0 {
            order = 1; // etcd sorts ascending by default when the target is not KEY
        }
        if order != 0 {
            let cmp = |a: &(Vec<u8>, Kv), b: &(Vec<u8>, Kv)| match target {
                1 => a.1.version.cmp(&b.1.version),
                2 => a.1.create_revision.cmp(&b.1.create_revision),
                3 => a.1.mod_revision.cmp(&b.1.mod_revision),
                4 => a.1.value.cmp(&b.1.value),
                _ => a.0.cmp(&b.0),
            };
            if order == 2 {
                kvs.sort_by(|a, b| cmp(b, a));
            } else {
                kvs.sort_by(cmp);
            }
        }
        let mut more = false;
        if limit > 0 && kvs.len() > limit as usize {
            kvs.truncate(limit as usize);
            more = true;
        }
        Ok(RangeResult {
            kvs,
            more,
            count,
            keys_only,
            count_only,
        })
    }

    fn compare(&self, c: &Value) -> Result<bool, GwError> {
        let key = bytes(c, "key")?;
        let range_end = bytes(c, "range_end")?;
        let target = enumeration(c, "target", CMP_TARGET)?;
        let result = enumeration(c, "result", CMP_RESULT)?;
        let keys = self.range_keys(&key, &range_end);
        let zero = Kv {
            create_revision: 0,
            mod_revision: 0,
            version: 0,
            value: Vec::new(),
            lease: 0,
        };
        let kvs: Vec<&Kv> = if keys.is_empty() {
            if target == 3 {
                return Ok(false); // etcd: a VALUE compare on a missing key always fails
            }
            vec![&zero]
        } else {
            keys.iter().filter_map(|k| self.kvs.get(k)).collect()
        };
        for kv in kvs {
            let ord = match target {
                0 => kv.version.cmp(&int(c, "version")?),
                1 => kv.create_revision.cmp(&int(c, "create_revision")?),
                2 => kv.mod_revision.cmp(&int(c, "mod_revision")?),
                3 => kv.value.as_slice().cmp(bytes(c, "value")?.as_slice()),
                _ => kv.lease.cmp(&int(c, "lease")?),
            };
            let ok = match result {
                0 => ord.is_eq(),
                1 => ord.is_gt(),
                2 => ord.is_lt(),
                _ => ord.is_ne(),
            };
            if !ok {
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn check_put_lease(&self, p: &Value) -> Result<(), GwError> {
        let lease = int(p, "lease")?;
        if lease != 0 && !self.leases.contains_key(&lease) {
            return Err(GwError::lease_not_found());
        }
        Ok(())
    }

    fn apply_op(&mut self, tx: &mut Tx, op: &Value) -> Result<OpResult, GwError> {
        if let Some(p) = op.get("request_put") {
            let key = bytes(p, "key")?;
            let value = bytes(p, "value")?;
            let lease = int(p, "lease")?;
            let prev = self.put(tx, key.clone(), value, lease);
            let prev = if flag(p, "prev_kv")? {
                prev.map(|kv| (key, kv))
            } else {
                None
            };
            Ok(OpResult::Put { prev })
        } else if let Some(r) = op.get("request_range") {
            Ok(OpResult::Range(self.range(r)?))
        } else if let Some(d) = op.get("request_delete_range") {
            let key = bytes(d, "key")?;
            let range_end = bytes(d, "range_end")?;
            let deleted = self.delete_range(tx, &key, &range_end);
            Ok(OpResult::Delete {
                deleted,
                prev_kv: flag(d, "prev_kv")?,
            })
        } else {
            Err(GwError::bad("model: unsupported txn op"))
        }
    }

    // -------------------------------------------------------------- endpoints

    fn ep_range(&mut self, body: &Value) -> Result<String, GwError> {
        let r = self.range(body)?;
        Ok(r.fields(Obj::new().field("header", &header(self.revision)))
            .end())
    }

    fn ep_put(&mut self, body: &Value) -> Result<String, GwError> {
        self.check_put_lease(body)?;
        let mut tx = self.begin();
        let key = bytes(body, "key")?;
        let prev = self.put(
            &mut tx,
            key.clone(),
            bytes(body, "value")?,
            int(body, "lease")?,
        );
        self.commit(tx);
        let o = Obj::new().field("header", &header(self.revision));
        let o = match prev {
            Some(kv) if flag(body, "prev_kv")? => o.field("prev_kv", &kv_json(&key, &kv, false)),
            _ => o,
        };
        Ok(o.end())
    }

    fn ep_deleterange(&mut self, body: &Value) -> Result<String, GwError> {
        let key = bytes(body, "key")?;
        let range_end = bytes(body, "range_end")?;
        let prev_kv = flag(body, "prev_kv")?;
        let mut tx = self.begin();
        let deleted = self.delete_range(&mut tx, &key, &range_end);
        self.commit(tx);
        let o = Obj::new()
            .field("header", &header(self.revision))
            .int("deleted", deleted.len() as i64);
        let o = if prev_kv {
            let prevs: Vec<String> = deleted
                .iter()
                .map(|(k, kv)| kv_json(k, kv, false))
                .collect();
            o.list("prev_kvs", &prevs)
        } else {
            o
        };
        Ok(o.end())
    }

    fn ep_txn(&mut self, body: &Value) -> Result<String, GwError> {
        let empty = Vec::new();
        let arr = |k: &str| -> Result<&Vec<Value>, GwError> {
            match body.get(k) {
                None | Some(Value::Null) => Ok(&empty),
                Some(Value::Array(a)) => Ok(a),
                Some(_) => Err(GwError::bad(format!("bad array in {k}"))),
            }
        };
        let compares = arr("compare")?;
        let (success, failure) = (arr("success")?, arr("failure")?);
        let mut ok = true;
        for c in compares {
            if !self.compare(c)? {
                ok = false;
                break;
            }
        }
        let ops = if ok { success } else { failure };
        for op in ops {
            if let Some(p) = op.get("request_put") {
                self.check_put_lease(p)?;
            }
        }
        let mut tx = self.begin();
        let mut results = Vec::new();
        for op in ops {
            match self.apply_op(&mut tx, op) {
                Ok(r) => results.push(r),
                Err(e) => {
                    // Validation happens up front in etcd; the model only fails
                    // here on requests it does not model, before any write.
                    if !tx.events.is_empty() {
                        return Err(GwError::new(
                            500,
                            13,
                            format!("model: txn failed mid-way: {}", e.message),
                        ));
                    }
                    return Err(e);
                }
            }
        }
        self.commit(tx);
        let rev = self.revision;
        let responses: Vec<String> = results.iter().map(|r| r.to_json(rev)).collect();
        Ok(Obj::new()
            .field("header", &header(rev))
            .flag("succeeded", ok)
            .list("responses", &responses)
            .end())
    }

    fn ep_grant(
        &mut self,
        now: Millis,
        body: &Value,
        client: Option<usize>,
    ) -> Result<String, GwError> {
        let ttl = int(body, "TTL")?;
        if ttl > MAX_TTL_S {
            return Err(GwError::new(400, 11, "etcdserver: too large lease TTL"));
        }
        let ttl = ttl.max(MIN_TTL_S);
        let mut id = int(body, "ID")?;
        if id == 0 {
            while self.leases.contains_key(&self.next_lease_id) {
                self.next_lease_id += 1;
            }
            id = self.next_lease_id;
            self.next_lease_id += 2;
        } else if self.leases.contains_key(&id) {
            return Err(GwError::new(412, 9, "etcdserver: lease already exists"));
        }
        self.leases.insert(
            id,
            Lease {
                id,
                ttl_s: ttl,
                expires_at: now + ttl as u64 * 1000,
                keys: BTreeSet::new(),
                granted_by: client,
                last_renewed: now,
            },
        );
        Ok(Obj::new()
            .field("header", &header(self.revision))
            .int("ID", id)
            .int("TTL", ttl)
            .end())
    }

    fn ep_keepalive(&mut self, now: Millis, body: &Value) -> Result<String, GwError> {
        let id = int(body, "ID")?;
        let ttl = match self.leases.get_mut(&id) {
            Some(l) => {
                l.expires_at = now + l.ttl_s as u64 * 1000;
                l.last_renewed = now;
                l.ttl_s
            }
            None => 0,
        };
        let inner = Obj::new()
            .field("header", &header(self.revision))
            .int("ID", id)
            .int("TTL", ttl)
            .end();
        Ok(format!("{}\n", Obj::new().field("result", &inner).end()))
    }

    fn revoke(&mut self, id: i64) -> bool {
        let Some(lease) = self.leases.remove(&id) else {
            return false;
        };
        let mut tx = self.begin();
        for k in &lease.keys {
            self.delete_range(&mut tx, k, &[]);
        }
        self.commit(tx);
        true
    }

    fn ep_revoke(&mut self, body: &Value) -> Result<String, GwError> {
        if !self.revoke(int(body, "ID")?) {
            return Err(GwError::lease_not_found());
        }
        Ok(Obj::new().field("header", &header(self.revision)).end())
    }

    fn ep_timetolive(&mut self, now: Millis, body: &Value) -> Result<String, GwError> {
        let id = int(body, "ID")?;
        let o = Obj::new()
            .field("header", &header(self.revision))
            .int("ID", id);
        let o = match self.leases.get(&id) {
            Some(l) => {
                let remaining = (l.expires_at.saturating_sub(now) / 1000) as i64;
                let keys: Vec<String> = if flag(body, "keys")? {
                    l.keys.iter().map(|k| json_str(&b64(k))).collect()
                } else {
                    Vec::new()
                };
                o.int("TTL", remaining)
                    .int("grantedTTL", l.ttl_s)
                    .list("keys", &keys)
            }
            None => o.int("TTL", -1),
        };
        Ok(o.end())
    }

    fn ep_watch(&mut self, wire: RequestId, body: &Value) -> Result<(), GwError> {
        let Some(cr) = body.get("create_request") else {
            return Ok(()); // a stream with no watch yet stays silent
        };
        let key = bytes(cr, "key")?;
        let range_end = bytes(cr, "range_end")?;
        let start = int(cr, "start_revision")?;
        let prev_kv = flag(cr, "prev_kv")?;
        let (mut no_put, mut no_delete) = (false, false);
        if let Some(Value::Array(fs)) = cr.get("filters") {
            for f in fs {
                let v = serde_json::json!({ "f": f });
                match enumeration(&v, "f", WATCH_FILTER)? {
                    0 => no_put = true,
                    _ => no_delete = true,
                }
            }
        }
        let from_rev = if start > 0 { start } else { self.revision + 1 };
        let w = Watcher {
            key,
            range_end,
            no_put,
            no_delete,
            prev_kv,
            from_rev,
        };
        let created = Obj::new()
            .field("header", &header(self.revision))
            .flag("created", true)
            .end();
        self.out.push((
            wire,
            format!("{}\n", Obj::new().field("result", &created).end()).into_bytes(),
        ));
        if start > 0 && start <= self.revision {
            let evs: Vec<&EventRec> = self
                .history
                .iter()
                .filter(|e| e.rev >= start && watch_matches(&w, e))
                .collect();
            if !evs.is_empty() {
                self.out
                    .push((wire, watch_message(self.revision, &evs, prev_kv)));
            }
        }
        self.watchers.insert(wire.0, w);
        Ok(())
    }

    fn dispatch(&mut self, now: Millis, req: &HttpRequest) -> Result<Reply, GwError> {
        let url = req.target.url().unwrap_or("");
        let path = url.find("/v3/").map_or("", |i| &url[i..]).to_string();
        *self.requests.entry(path.clone()).or_insert(0) += 1;
        let known = [
            "/v3/kv/range",
            "/v3/kv/put",
            "/v3/kv/deleterange",
            "/v3/kv/txn",
            "/v3/lease/grant",
            "/v3/lease/keepalive",
            "/v3/lease/revoke",
            "/v3/lease/timetolive",
            "/v3/watch",
        ];
        if !known.contains(&path.as_str()) {
            return Ok(Reply::Full {
                status: 404,
                body: b"Not Found\n".to_vec(),
            });
        }
        if req.method != Method::Post {
            return Ok(Reply::Full {
                status: 405,
                body: b"Method Not Allowed\n".to_vec(),
            });
        }
        let body: Value = if req.body.iter().all(|b| b.is_ascii_whitespace()) {
            Value::Object(Default::default())
        } else {
            serde_json::from_slice(&req.body).map_err(|e| {
                if e.is_eof() {
                    GwError::bad("unexpected EOF")
                } else {
                    GwError::bad(format!("invalid character: {e}"))
                }
            })?
        };
        if !body.is_object() {
            return Err(GwError::bad(
                "json: cannot unmarshal non-object into Go value",
            ));
        }
        let client = req
            .headers
            .iter()
            .find(|(k, _)| k == CLIENT_HEADER)
            .and_then(|(_, v)| v.parse().ok());
        let text = match path.as_str() {
            "/v3/kv/range" => self.ep_range(&body)?,
            "/v3/kv/put" => self.ep_put(&body)?,
            "/v3/kv/deleterange" => self.ep_deleterange(&body)?,
            "/v3/kv/txn" => self.ep_txn(&body)?,
            "/v3/lease/grant" => self.ep_grant(now, &body, client)?,
            "/v3/lease/keepalive" => self.ep_keepalive(now, &body)?,
            "/v3/lease/revoke" => self.ep_revoke(&body)?,
            "/v3/lease/timetolive" => self.ep_timetolive(now, &body)?,
            _ => {
                self.ep_watch(req.id, &body)?;
                return Ok(Reply::Stream { status: 200 });
            }
        };
        Ok(Reply::Full {
            status: 200,
            body: text.into_bytes(),
        })
    }
}

fn watch_matches(w: &Watcher, e: &EventRec) -> bool {
    in_range(&e.key, &w.key, &w.range_end)
        && e.rev >= w.from_rev
        && !(e.kv.is_some() && w.no_put)
        && !(e.kv.is_none() && w.no_delete)
}

fn watch_message(rev: i64, evs: &[&EventRec], prev_kv: bool) -> Vec<u8> {
    let events: Vec<String> = evs
        .iter()
        .map(|e| {
            let o = match &e.kv {
                Some(kv) => Obj::new().field("kv", &kv_json(&e.key, kv, false)),
                None => Obj::new().str("type", "DELETE").field(
                    "kv",
                    &Obj::new()
                        .bytes("key", &e.key)
                        .int("mod_revision", e.rev)
                        .end(),
                ),
            };
            let o = match (&e.prev, prev_kv) {
                (Some(p), true) => o.field("prev_kv", &kv_json(&e.key, p, false)),
                _ => o,
            };
            o.end()
        })
        .collect();
    let inner = Obj::new()
        .field("header", &header(rev))
        .list("events", &events)
        .end();
    format!("{}\n", Obj::new().field("result", &inner).end()).into_bytes()
}

impl SimServer for EtcdModel {
    fn handle(&mut self, now: Millis, req: &HttpRequest) -> Reply {
        self.advance(now);
        let flaky = self.flaky_error(now, req);
        if flaky == Some(false) {
            return GwError::new(503, 14, "etcdserver: request timed out").reply();
        }
        let reply = match self.dispatch(now, req) {
            Ok(r) => r,
            Err(e) => e.reply(),
        };
        if flaky == Some(true) {
            return GwError::new(503, 14, "etcdserver: request timed out").reply();
        }
        reply
    }

    fn drain_stream_chunks(&mut self, _now: Millis) -> Vec<(RequestId, Vec<u8>)> {
        std::mem::take(&mut self.out)
    }

    fn stream_closed(&mut self, id: RequestId) {
        self.watchers.remove(&id.0);
        self.out.retain(|(w, _)| *w != id);
    }

    fn advance(&mut self, now: Millis) {
        let expired: Vec<i64> = self
            .leases
            .values()
            .filter(|l| l.expires_at <= now)
            .map(|l| l.id)
            .collect();
        for id in expired {
            self.revoke(id);
        }
    }

    fn next_deadline(&self) -> Option<Millis> {
        self.leases.values().map(|l| l.expires_at).min()
    }

    /// etcd persists everything; a restarted member's lessor (like a new
    /// leader's promotion) restarts every lease's countdown at its full TTL.
    /// Its watch streams already broke when it went down.
    fn crash_restart(&mut self, now: Millis) {
        self.watchers.clear();
        self.out.clear();
        for l in self.leases.values_mut() {
            l.expires_at = l.expires_at.max(now + l.ttl_s as u64 * 1000);
        }
    }
}
