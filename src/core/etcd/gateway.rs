//! Codec for etcd v3's JSON gateway (grpc-gateway): request bodies and response
//! parsing. Pure functions; no state.
//!
//! Gateway conventions (checked against etcd 3.4.23): keys and values are base64,
//! int64 fields are JSON strings, zero/false fields are omitted (`succeeded` is
//! absent when a txn's compare failed, an empty value is absent), streaming
//! endpoints wrap each message in `{"result": …}`, errors are
//! `{"error": "...", "message": "...", "code": <grpc code>}` with an HTTP status
//! mapped from the gRPC code. `count` in a range ignores `max_create_revision`,
//! so only `kvs` is trusted.

use crate::core::b64;
use serde_json::{json, Map, Value};

/// A gateway message read out of a parsed [`Value`] by hand. A derived
/// `Deserialize` per message type cost about 4 KiB of wasm each (twice, for
/// `from_slice` and `from_value`); one `Value` parser serves them all. The
/// rules are serde's `#[serde(default)]` ones: an absent field takes its
/// default, a present field of the wrong type (`null` included) is an error.
pub(super) trait FromJson: Sized {
    fn from_json(v: &Value) -> Result<Self, String>;
}

fn object<'a>(v: &'a Value, what: &str) -> Result<&'a Map<String, Value>, String> {
    v.as_object()
        .ok_or_else(|| format!("{what}: expected an object"))
}

/// int64 that the gateway sends as a string (or, from other gateways, a number).
fn int(o: &Map<String, Value>, key: &str) -> Result<i64, String> {
    match o.get(key) {
        None => Ok(0),
        Some(Value::String(s)) => s.parse().map_err(|_| format!("{key}: not an integer")),
        Some(Value::Number(n)) => n.as_i64().ok_or_else(|| format!("{key}: not an int64")),
        Some(_) => Err(format!("{key}: expected an integer")),
    }
}

fn flag(o: &Map<String, Value>, key: &str) -> Result<bool, String> {
    match o.get(key) {
        None => Ok(false),
        Some(v) => v
            .as_bool()
            .ok_or_else(|| format!("{key}: expected a boolean")),
    }
}

fn bytes(v: &Value, key: &str) -> Result<Vec<u8>, String> {
    let s = v
        .as_str()
        .ok_or_else(|| format!("{key}: expected a base64 string"))?;
    b64::decode(s.as_bytes()).ok_or_else(|| format!("{key}: invalid base64"))
}

fn b64_field(o: &Map<String, Value>, key: &str) -> Result<Vec<u8>, String> {
    o.get(key).map_or(Ok(Vec::new()), |v| bytes(v, key))
}

fn list<T>(
    o: &Map<String, Value>,
    key: &str,
    item: impl Fn(&Value) -> Result<T, String>,
) -> Result<Vec<T>, String> {
    match o.get(key) {
        None => Ok(Vec::new()),
        Some(Value::Array(a)) => a.iter().map(item).collect(),
        Some(_) => Err(format!("{key}: expected an array")),
    }
}

fn nested<T: FromJson + Default>(o: &Map<String, Value>, key: &str) -> Result<T, String> {
    o.get(key).map_or(Ok(T::default()), T::from_json)
}

/// An `Option` field: absent and `null` are both `None`.
fn optional<T: FromJson>(o: &Map<String, Value>, key: &str) -> Result<Option<T>, String> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => T::from_json(v).map(Some),
    }
}

impl FromJson for Value {
    fn from_json(v: &Value) -> Result<Self, String> {
        Ok(v.clone())
    }
}

/// `/v3/lease/timetolive` with `keys: true`: the keys attached to a lease.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct LeaseKeys {
    pub keys: Vec<Vec<u8>>,
}

impl FromJson for LeaseKeys {
    fn from_json(v: &Value) -> Result<Self, String> {
        Ok(LeaseKeys {
            keys: list(object(v, "lease keys")?, "keys", |k| bytes(k, "keys"))?,
        })
    }
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct Header {
    pub revision: i64,
}

impl FromJson for Header {
    fn from_json(v: &Value) -> Result<Self, String> {
        Ok(Header {
            revision: int(object(v, "header")?, "revision")?,
        })
    }
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct KeyValue {
    pub key: Vec<u8>,
    pub create_revision: i64,
    pub mod_revision: i64,
    pub lease: i64,
    pub value: Vec<u8>,
}

impl FromJson for KeyValue {
    fn from_json(v: &Value) -> Result<Self, String> {
        let o = object(v, "kv")?;
        Ok(KeyValue {
            key: b64_field(o, "key")?,
            create_revision: int(o, "create_revision")?,
            mod_revision: int(o, "mod_revision")?,
            lease: int(o, "lease")?,
            value: b64_field(o, "value")?,
        })
    }
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct RangeResponse {
    pub header: Header,
    pub kvs: Vec<KeyValue>,
}

impl FromJson for RangeResponse {
    fn from_json(v: &Value) -> Result<Self, String> {
        let o = object(v, "range response")?;
        Ok(RangeResponse {
            header: nested(o, "header")?,
            kvs: list(o, "kvs", KeyValue::from_json)?,
        })
    }
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct ResponseOp {
    pub response_range: Option<RangeResponse>,
    pub response_put: Option<Value>,
    pub response_delete_range: Option<Value>,
}

impl FromJson for ResponseOp {
    fn from_json(v: &Value) -> Result<Self, String> {
        let o = object(v, "txn response op")?;
        Ok(ResponseOp {
            response_range: optional(o, "response_range")?,
            response_put: optional(o, "response_put")?,
            response_delete_range: optional(o, "response_delete_range")?,
        })
    }
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct TxnResponse {
    pub header: Header,
    pub succeeded: bool,
    pub responses: Vec<ResponseOp>,
}

impl FromJson for TxnResponse {
    fn from_json(v: &Value) -> Result<Self, String> {
        let o = object(v, "txn response")?;
        Ok(TxnResponse {
            header: nested(o, "header")?,
            succeeded: flag(o, "succeeded")?,
            responses: list(o, "responses", ResponseOp::from_json)?,
        })
    }
}

impl TxnResponse {
    /// The i-th range response of the executed branch.
    pub(super) fn range(&self, i: usize) -> Option<&RangeResponse> {
        self.responses
            .iter()
            .filter_map(|r| r.response_range.as_ref())
            .nth(i)
    }
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
#[allow(non_snake_case)]
pub(super) struct LeaseGrantResponse {
    pub ID: i64,
    pub TTL: i64,
    pub error: Option<String>,
}

impl FromJson for LeaseGrantResponse {
    fn from_json(v: &Value) -> Result<Self, String> {
        let o = object(v, "lease grant")?;
        let error = match o.get("error") {
            None | Some(Value::Null) => None,
            Some(e) => Some(e.as_str().ok_or("error: expected a string")?.to_string()),
        };
        Ok(LeaseGrantResponse {
            ID: int(o, "ID")?,
            TTL: int(o, "TTL")?,
            error,
        })
    }
}

/// Keepalive and timetolive share the fields we need: a TTL ≤ 0 (or absent)
/// means the lease no longer exists.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
#[allow(non_snake_case)]
pub(super) struct LeaseTtl {
    pub ID: i64,
    pub TTL: i64,
}

impl FromJson for LeaseTtl {
    fn from_json(v: &Value) -> Result<Self, String> {
        let o = object(v, "lease")?;
        Ok(LeaseTtl {
            ID: int(o, "ID")?,
            TTL: int(o, "TTL")?,
        })
    }
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct WatchEvent {
    /// The event's `type` (`PUT` is the default and omitted, `DELETE`).
    pub kind: Option<String>,
    pub kv: KeyValue,
}

impl FromJson for WatchEvent {
    fn from_json(v: &Value) -> Result<Self, String> {
        let o = object(v, "watch event")?;
        let kind = match o.get("type") {
            None | Some(Value::Null) => None,
            Some(t) => Some(t.as_str().ok_or("type: expected a string")?.to_string()),
        };
        Ok(WatchEvent {
            kind,
            kv: nested(o, "kv")?,
        })
    }
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct WatchResponse {
    pub header: Header,
    pub created: bool,
    pub canceled: bool,
    pub compact_revision: i64,
    pub events: Vec<WatchEvent>,
}

impl FromJson for WatchResponse {
    fn from_json(v: &Value) -> Result<Self, String> {
        let o = object(v, "watch response")?;
        Ok(WatchResponse {
            header: nested(o, "header")?,
            created: flag(o, "created")?,
            canceled: flag(o, "canceled")?,
            compact_revision: int(o, "compact_revision")?,
            events: list(o, "events", WatchEvent::from_json)?,
        })
    }
}

impl WatchResponse {
    pub(super) fn has_delete(&self) -> bool {
        self.events
            .iter()
            .any(|e| e.kind.as_deref() == Some("DELETE"))
    }
}

/// A reply that is not what we asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum GatewayError {
    /// The server said the lease does not exist (expired or revoked).
    LeaseNotFound,
    /// Worth retrying on another endpoint: 5xx, unavailable, leader changes.
    Retryable { status: u16, message: String },
    /// A definite error (bad request, permission denied, ...).
    Fatal { status: u16, message: String },
    /// 2xx but not parseable as the expected message.
    Malformed(String),
}

impl GatewayError {
    pub(super) fn message(&self) -> String {
        match self {
            GatewayError::LeaseNotFound => "requested lease not found".into(),
            GatewayError::Retryable { message, .. } | GatewayError::Fatal { message, .. } => {
                message.clone()
            }
            GatewayError::Malformed(m) => format!("malformed reply: {m}"),
        }
    }
    pub(super) fn status(&self) -> Option<u16> {
        match self {
            GatewayError::Retryable { status, .. } | GatewayError::Fatal { status, .. } => {
                Some(*status)
            }
            _ => None,
        }
    }
}

/// gRPC codes that mean "try again, maybe elsewhere".
const RETRYABLE_GRPC: &[i64] = &[1, 4, 8, 10, 13, 14];

/// Classifies a non-2xx answer (or a 2xx carrying an error object).
pub(super) fn classify_error(status: u16, body: &[u8]) -> GatewayError {
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    let message = parsed
        .as_ref()
        .and_then(|v| v.get("message").or_else(|| v.get("error")))
        .and_then(|m| m.as_str())
        // Kept whole here: `backend_error` redacts configured header values, then cuts.
        .map(crate::core::error::clean_control)
        .unwrap_or_else(|| format!("HTTP {status}"));
    let code = parsed
        .as_ref()
        .and_then(|v| v.get("code"))
        .and_then(|c| c.as_i64());
    if message.contains("requested lease not found") {
        return GatewayError::LeaseNotFound;
    }
    let retry_by_code = code.map(|c| RETRYABLE_GRPC.contains(&c)).unwrap_or(false);
    let retry_by_text = message.contains("leader changed")
        || message.contains("no leader")
        || message.contains("timed out");
    if status >= 500 || status == 429 || status == 408 || retry_by_code || retry_by_text {
        GatewayError::Retryable { status, message }
    } else {
        GatewayError::Fatal { status, message }
    }
}

/// Parses a 2xx unary reply into `T`, treating an embedded error object as an error.
pub(super) fn parse<T: FromJson>(status: u16, body: &[u8]) -> Result<T, GatewayError> {
    if !(200..300).contains(&status) {
        return Err(classify_error(status, body));
    }
    let v: Value =
        serde_json::from_slice(body).map_err(|e| GatewayError::Malformed(e.to_string()))?;
    if !v.is_object() {
        return Err(GatewayError::Malformed("expected a JSON object".into()));
    }
    if v.get("error").is_some() {
        return Err(classify_error(status, body));
    }
    T::from_json(&v).map_err(GatewayError::Malformed)
}

/// Parses a reply of a streaming endpoint used unary (keepalive): `{"result": T}`.
pub(super) fn parse_wrapped<T: FromJson>(status: u16, body: &[u8]) -> Result<T, GatewayError> {
    if !(200..300).contains(&status) {
        return Err(classify_error(status, body));
    }
    let v: Value =
        serde_json::from_slice(body).map_err(|e| GatewayError::Malformed(e.to_string()))?;
    let o = object(&v, "reply").map_err(GatewayError::Malformed)?;
    if o.get("error").is_some_and(|e| !e.is_null()) {
        return Err(classify_error(status, body));
    }
    match o.get("result") {
        None | Some(Value::Null) => Err(GatewayError::Malformed("missing result".into())),
        Some(r) => T::from_json(r).map_err(GatewayError::Malformed),
    }
}

/// Parses one message of the watch stream.
pub(super) fn parse_watch_message(msg: &[u8]) -> Result<WatchResponse, GatewayError> {
    parse_wrapped(200, msg)
}

pub(super) fn b64(bytes: &[u8]) -> String {
    b64::encode(bytes)
}

/// The first key after every key with prefix `p` (etcd's `range_end` for a prefix).
pub(super) fn prefix_end(p: &[u8]) -> Vec<u8> {
    let mut end = p.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0] // whole keyspace
}

// ---- request bodies -------------------------------------------------------

pub(super) fn lease_grant(ttl_s: i64) -> Value {
    json!({ "TTL": ttl_s.to_string() })
}

pub(super) fn lease_id(id: i64) -> Value {
    json!({ "ID": id.to_string() })
}

/// `/v3/lease/timetolive` asking for the lease's keys.
pub(super) fn lease_keys(id: i64) -> Value {
    json!({ "ID": id.to_string(), "keys": true })
}

/// The acquire transaction: if our key does not exist, create it bound to the
/// lease and read the two newest keys under the lock's prefix (ours and our
/// predecessor) and the oldest one, with its value (a semaphore's keys carry
/// their limit: a lock's acquire on a semaphore's name is refused);
/// otherwise (a retry whose first attempt did apply) read our key, whose
/// value (the attempt's nonce) tells whether it is really this attempt's.
pub(super) fn acquire_txn(key: &[u8], lock_prefix: &[u8], lease: i64, nonce: &[u8]) -> Value {
    json!({
        "compare": [{ "key": b64(key), "target": "CREATE", "result": "EQUAL", "create_revision": "0" }],
        "success": [
            { "request_put": { "key": b64(key), "value": b64(nonce), "lease": lease.to_string() } },
            { "request_range": { "key": b64(lock_prefix), "range_end": b64(&prefix_end(lock_prefix)),
                                 "sort_order": "DESCEND", "sort_target": "CREATE", "limit": "2", "keys_only": true } },
            { "request_range": { "key": b64(lock_prefix), "range_end": b64(&prefix_end(lock_prefix)),
                                 "sort_order": "ASCEND", "sort_target": "CREATE", "limit": "1" } }
        ],
        "failure": [ { "request_range": { "key": b64(key) } } ]
    })
}

/// One name of an [`acquire_set_txn`]: its lock key, its lock prefix (the
/// range of every key of the name) and the value to store.
pub(super) struct SetMember<'a> {
    pub(super) key: &'a [u8],
    pub(super) lock_prefix: &'a [u8],
    pub(super) value: &'a [u8],
}

/// Takes a whole set of free names in one txn: for each name, its whole
/// key range is compared empty (etcd compares an empty range as one zero
/// key: `create_revision == 0` holds iff no key of the name exists, of any
/// kind), and then each name's lock key is put on `lease` exactly as
/// [`acquire_txn`] puts it. On failure nothing is put; the failure branch
/// reads our own keys (an earlier attempt of this very txn may have applied).
pub(super) fn acquire_set_txn(members: &[SetMember<'_>], lease: i64) -> Value {
    let compare: Vec<Value> = members
        .iter()
        .map(|m| {
            json!({ "key": b64(m.lock_prefix), "range_end": b64(&prefix_end(m.lock_prefix)),
                    "target": "CREATE", "result": "EQUAL", "create_revision": "0" })
        })
        .collect();
    let success: Vec<Value> = members
        .iter()
        .map(|m| {
            json!({ "request_put": { "key": b64(m.key), "value": b64(m.value), "lease": lease.to_string() } })
        })
        .collect();
    let failure: Vec<Value> = members
        .iter()
        .map(|m| json!({ "request_range": { "key": b64(m.key) } }))
        .collect();
    json!({ "compare": compare, "success": success, "failure": failure })
}

/// Reads our key and the waiter directly ahead of us (largest create revision
/// below ours) in one round trip.
pub(super) fn predecessor_txn(key: &[u8], lock_prefix: &[u8], my_rev: i64) -> Value {
    json!({
        "compare": [],
        "success": [
            { "request_range": { "key": b64(key), "keys_only": true } },
            { "request_range": { "key": b64(lock_prefix), "range_end": b64(&prefix_end(lock_prefix)),
                                 "sort_order": "DESCEND", "sort_target": "CREATE", "limit": "1",
                                 "max_create_revision": my_rev.saturating_sub(1).to_string(), "keys_only": true } }
        ]
    })
}

/// Deletes exactly one incarnation of a key: only if its create revision is `rev`.
pub(super) fn delete_if_revision(key: &[u8], rev: i64) -> Value {
    json!({
        "compare": [{ "key": b64(key), "target": "CREATE", "result": "EQUAL", "create_revision": rev.to_string() }],
        "success": [ { "request_delete_range": { "key": b64(key) } } ]
    })
}

pub(super) fn delete_key(key: &[u8]) -> Value {
    json!({ "key": b64(key) })
}

/// Reads several keys in one round trip (checking that held keys still exist).
pub(super) fn read_keys_txn<'a>(keys: impl Iterator<Item = &'a [u8]>) -> Value {
    let ops: Vec<Value> = keys
        .map(|k| json!({ "request_range": { "key": b64(k), "keys_only": true } }))
        .collect();
    json!({ "compare": [], "success": ops })
}

/// Reads several keys with their values in one round trip (a resumed
/// permit's keys must carry its semaphore's limit).
pub(super) fn read_values_txn<'a>(keys: impl Iterator<Item = &'a [u8]>) -> Value {
    let ops: Vec<Value> = keys
        .map(|k| json!({ "request_range": { "key": b64(k) } }))
        .collect();
    json!({ "compare": [], "success": ops })
}

/// Every key of a name, oldest first, with values (a semaphore's carry its limit).
pub(super) fn range_prefix_ascending(lock_prefix: &[u8]) -> Value {
    json!({ "key": b64(lock_prefix), "range_end": b64(&prefix_end(lock_prefix)),
            "sort_order": "ASCEND", "sort_target": "CREATE", "limit": "1000" })
}

/// Watch one key for its deletion, replaying from `start_revision`.
pub(super) fn watch_delete(key: &[u8], start_revision: i64) -> Value {
    json!({ "create_request": { "key": b64(key), "start_revision": start_revision.to_string(), "filters": ["NOPUT"] } })
}

// ---- semaphores (see `machine/permits.rs` for the key layout) ------------

/// A range `[start, end)` sorted by create revision, with values (a
/// semaphore's keys carry its limit in their value).
fn range_by_create(
    start: &[u8],
    end: &[u8],
    order: &str,
    limit: u32,
    max_create_revision: Option<i64>,
) -> Value {
    let mut r = json!({ "key": b64(start), "range_end": b64(end), "sort_order": order, "sort_target": "CREATE", "limit": limit.to_string() });
    if let (Some(max), Some(o)) = (max_create_revision, r.as_object_mut()) {
        o.insert("max_create_revision".into(), json!(max.to_string()));
    }
    json!({ "request_range": r })
}

/// Every slot key (`[start, end)`), sorted by key.
fn slot_range(slots: (&[u8], &[u8])) -> Value {
    json!({ "request_range": { "key": b64(slots.0), "range_end": b64(slots.1) } })
}

/// A permit's acquire: if our queue key does not exist, create it bound to
/// the lease, then read (1) the oldest `limit + 1` queue keys, (2) the two
/// newest (ours and our predecessor), (3) every slot key and (4) whether
/// any read-write lock reader key exists (a read-write lock's name is no
/// semaphore); otherwise (a retry whose first attempt applied) read our key.
pub(super) fn permit_acquire_txn(
    key: &[u8],
    queue: (&[u8], &[u8]),
    slots: (&[u8], &[u8]),
    readers: (&[u8], &[u8]),
    lease: i64,
    value: &[u8],
    limit: u32,
) -> Value {
    json!({
        "compare": [{ "key": b64(key), "target": "CREATE", "result": "EQUAL", "create_revision": "0" }],
        "success": [
            { "request_put": { "key": b64(key), "value": b64(value), "lease": lease.to_string() } },
            range_by_create(queue.0, queue.1, "ASCEND", limit.saturating_add(1), None),
            range_by_create(queue.0, queue.1, "DESCEND", 2, None),
            slot_range(slots),
            { "request_range": { "key": b64(readers.0), "range_end": b64(readers.1), "limit": "1", "keys_only": true } }
        ],
        "failure": [ { "request_range": { "key": b64(key) } } ]
    })
}

/// A waiting permit's re-check, with the same reads as its acquire: our key,
/// the oldest `limit + 1` queue keys up to ours, our predecessor (the newest
/// key below ours), and every slot key.
pub(super) fn permit_check_txn(
    key: &[u8],
    my_rev: i64,
    queue: (&[u8], &[u8]),
    slots: (&[u8], &[u8]),
    limit: u32,
) -> Value {
    json!({
        "compare": [],
        "success": [
            { "request_range": { "key": b64(key) } },
            range_by_create(queue.0, queue.1, "ASCEND", limit.saturating_add(1), Some(my_rev)),
            range_by_create(queue.0, queue.1, "DESCEND", 1, Some(my_rev.saturating_sub(1))),
            slot_range(slots)
        ]
    })
}

/// Claims slot key `slot` for the holder of queue key `key` (created at
/// `my_rev`): only if the slot is free and our key is still that
/// incarnation. The claim puts our queue key again (same value and lease, so
/// its create revision stays): that PUT wakes the waiter watching us. On
/// failure, reads our key and every slot key to choose again.
pub(super) fn claim_slot_txn(
    slot: &[u8],
    key: &[u8],
    my_rev: i64,
    lease: i64,
    value: &[u8],
    slots: (&[u8], &[u8]),
) -> Value {
    json!({
        "compare": [
            { "key": b64(slot), "target": "CREATE", "result": "EQUAL", "create_revision": "0" },
            { "key": b64(key), "target": "CREATE", "result": "EQUAL", "create_revision": my_rev.to_string() }
        ],
        "success": [
            { "request_put": { "key": b64(slot), "value": b64(value), "lease": lease.to_string() } },
            { "request_put": { "key": b64(key), "value": b64(value), "lease": lease.to_string() } }
        ],
        "failure": [ { "request_range": { "key": b64(key) } }, slot_range(slots) ]
    })
}

/// Deletes exactly the given key incarnations, all or none (a permit's
/// queue key and slot key): a late release never touches newer keys.
pub(super) fn delete_all_if_revisions(keys: &[(&[u8], i64)]) -> Value {
    let compare: Vec<Value> = keys
        .iter()
        .map(|(k, rev)| json!({ "key": b64(k), "target": "CREATE", "result": "EQUAL", "create_revision": rev.to_string() }))
        .collect();
    let success: Vec<Value> = keys
        .iter()
        .map(|(k, _)| json!({ "request_delete_range": { "key": b64(k) } }))
        .collect();
    json!({ "compare": compare, "success": success })
}

/// Deletes every key only while each holds its value, all or none (the
/// keys of a set txn whose outcome is unknown: if it applied, every key
/// holds our value; if it did not, none exists and nothing is deleted).
pub(super) fn delete_all_if_values(keys: &[(&[u8], &[u8])]) -> Value {
    let compare: Vec<Value> = keys
        .iter()
        .map(|(k, v)| json!({ "key": b64(k), "target": "VALUE", "result": "EQUAL", "value": b64(v) }))
        .collect();
    let success: Vec<Value> = keys
        .iter()
        .map(|(k, _)| json!({ "request_delete_range": { "key": b64(k) } }))
        .collect();
    json!({ "compare": compare, "success": success })
}

/// Deletes `key` only while it holds `value` (a slot we may have claimed
/// with an unanswered txn: ours carries our acquisition's value).
pub(super) fn delete_if_value(key: &[u8], value: &[u8]) -> Value {
    json!({
        "compare": [{ "key": b64(key), "target": "VALUE", "result": "EQUAL", "value": b64(value) }],
        "success": [ { "request_delete_range": { "key": b64(key) } } ]
    })
}

/// Deletes `key` only while it is bound to `lease`: a key found on our
/// lease whose revision we do not know (a ghost). A semaphore's slot keys
/// are named by slot, not by lease: a blind delete could hit another
/// client's slot created since.
pub(super) fn delete_if_lease(key: &[u8], lease: i64) -> Value {
    json!({
        "compare": [{ "key": b64(key), "target": "LEASE", "result": "EQUAL", "lease": lease.to_string() }],
        "success": [ { "request_delete_range": { "key": b64(key) } } ]
    })
}

/// Watch every DELETE in `[start, end)` from `start_revision` (the first
/// waiter of a semaphore: any holder leaving may promote it; holders'
/// claim PUTs are filtered out by the server).
pub(super) fn watch_range_deletes(start: &[u8], end: &[u8], start_revision: i64) -> Value {
    json!({ "create_request": { "key": b64(start), "range_end": b64(end), "start_revision": start_revision.to_string(), "filters": ["NOPUT"] } })
}

// ---- read-write locks (see `machine/shared.rs` for the key layout) -------

/// A shared hold's acquire: if our reader key does not exist, create it
/// bound to the lease, then read (1) the newest key of the writers' range
/// (an exclusive lock's keys; no reader key is in it, so any key found is
/// older than ours) and (2) the oldest key of the whole name, both with
/// values (a semaphore's keys carry its limit: a shared acquire of a
/// semaphore's name is refused); otherwise (a retry whose first attempt
/// applied) read our key.
pub(super) fn shared_acquire_txn(
    key: &[u8],
    lock_prefix: &[u8],
    writers: (&[u8], &[u8]),
    lease: i64,
    value: &[u8],
) -> Value {
    json!({
        "compare": [{ "key": b64(key), "target": "CREATE", "result": "EQUAL", "create_revision": "0" }],
        "success": [
            { "request_put": { "key": b64(key), "value": b64(value), "lease": lease.to_string() } },
            range_by_create(writers.0, writers.1, "DESCEND", 1, None),
            range_by_create(lock_prefix, &prefix_end(lock_prefix), "ASCEND", 1, None)
        ],
        "failure": [ { "request_range": { "key": b64(key) } } ]
    })
}

/// A waiting reader's re-check: our key, and the newest key of the writers'
/// range created before ours (with its value).
pub(super) fn shared_check_txn(key: &[u8], writers: (&[u8], &[u8]), my_rev: i64) -> Value {
    json!({
        "compare": [],
        "success": [
            { "request_range": { "key": b64(key), "keys_only": true } },
            range_by_create(writers.0, writers.1, "DESCEND", 1, Some(my_rev.saturating_sub(1)))
        ]
    })
}

/// Watch one key for any event from `start_revision` (a later waiter of a
/// semaphore watches its predecessor: DELETE when it leaves, PUT when it is
/// promoted and claims its slot).
pub(super) fn watch_key(key: &[u8], start_revision: i64) -> Value {
    json!({ "create_request": { "key": b64(key), "start_revision": start_revision.to_string() } })
}

// ---- reentrant holds (see `machine/ops/hold_count.rs` for the count key) --------

fn if_created(key: &[u8], rev: i64) -> Value {
    json!({ "key": b64(key), "target": "CREATE", "result": "EQUAL", "create_revision": rev.to_string() })
}

fn if_modified(key: &[u8], rev: i64) -> Value {
    json!({ "key": b64(key), "target": "MOD", "result": "EQUAL", "mod_revision": rev.to_string() })
}

/// What every count txn reads when its compare fails: the lock key (index
/// 0) and the count key (index 1).
fn read_lock_and_count(key: &[u8], count_key: &[u8]) -> Value {
    json!([ { "request_range": { "key": b64(key) } }, { "request_range": { "key": b64(count_key) } } ])
}

/// An exclusive lock's release: delete exactly this incarnation of the key
/// if no hold count exists (the plain lock's one request); otherwise read
/// both keys, and the release takes a hold away instead.
pub(super) fn release_uncounted_txn(key: &[u8], rev: i64, count_key: &[u8]) -> Value {
    json!({
        "compare": [ if_created(key, rev), if_created(count_key, 0) ],
        "success": [ { "request_delete_range": { "key": b64(key) } } ],
        "failure": read_lock_and_count(key, count_key)
    })
}

/// Writes the hold count `value` (on the lock's lease) while the lock is
/// this incarnation and the count key is as last read (`count_mod` 0: it
/// does not exist); otherwise reads both keys.
pub(super) fn put_count_txn(
    key: &[u8],
    rev: i64,
    count_key: &[u8],
    count_mod: i64,
    lease: i64,
    value: &[u8],
) -> Value {
    let count_cmp = if count_mod == 0 {
        if_created(count_key, 0)
    } else {
        if_modified(count_key, count_mod)
    };
    json!({
        "compare": [ if_created(key, rev), count_cmp ],
        "success": [ { "request_put": { "key": b64(count_key), "value": b64(value), "lease": lease.to_string() } } ],
        "failure": read_lock_and_count(key, count_key)
    })
}

/// The last hold's release: deletes the lock key and its count key while
/// both are as last read; otherwise reads both keys.
pub(super) fn delete_counted_txn(key: &[u8], rev: i64, count_key: &[u8], count_mod: i64) -> Value {
    json!({
        "compare": [ if_created(key, rev), if_modified(count_key, count_mod) ],
        "success": [ { "request_delete_range": { "key": b64(key) } },
                     { "request_delete_range": { "key": b64(count_key) } } ],
        "failure": read_lock_and_count(key, count_key)
    })
}

// ---- elections (see `machine/election.rs`) --------------------------------

/// The oldest key of a name, with its value: who leads its election.
pub(super) fn range_oldest(lock_prefix: &[u8]) -> Value {
    json!({ "key": b64(lock_prefix), "range_end": b64(&prefix_end(lock_prefix)),
            "sort_order": "ASCEND", "sort_target": "CREATE", "limit": "1" })
}

/// A proclaim: replace the value of exactly this incarnation of the
/// leader's key (its create revision is the leadership's token), on its lease.
pub(super) fn proclaim_txn(key: &[u8], rev: i64, lease: i64, value: &[u8]) -> Value {
    json!({
        "compare": [{ "key": b64(key), "target": "CREATE", "result": "EQUAL", "create_revision": rev.to_string() }],
        "success": [ { "request_put": { "key": b64(key), "value": b64(value), "lease": lease.to_string() } } ]
    })
}

/// Watch every event under a name's prefix from `start_revision` (an observer).
pub(super) fn watch_prefix(lock_prefix: &[u8], start_revision: i64) -> Value {
    json!({ "create_request": { "key": b64(lock_prefix), "range_end": b64(&prefix_end(lock_prefix)), "start_revision": start_revision.to_string() } })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_real_replies() {
        let txn = br#"{"header":{"cluster_id":"1","member_id":"2","revision":"2","raft_term":"2"},"succeeded":true,"responses":[{"response_put":{"header":{"revision":"2"}}},{"response_range":{"header":{"revision":"2"},"kvs":[{"key":"ZWwveC8x","create_revision":"2","mod_revision":"2","version":"1","lease":"2324035544931282439"}],"count":"1"}}]}"#;
        let t: TxnResponse = parse(200, txn).unwrap();
        assert!(t.succeeded);
        assert_eq!(t.header.revision, 2);
        let r = t.range(0).unwrap();
        assert_eq!(r.kvs[0].key, b"el/x/1");
        assert_eq!(r.kvs[0].lease, 2324035544931282439);

        let failed = br#"{"header":{"revision":"2"},"responses":[{"response_range":{"header":{"revision":"2"},"count":"1"}}]}"#;
        let t: TxnResponse = parse(200, failed).unwrap();
        assert!(!t.succeeded);
        assert!(t.range(0).unwrap().kvs.is_empty());

        let ka = br#"{"result":{"header":{"revision":"2"},"ID":"12345"}}"#;
        let k: LeaseTtl = parse_wrapped(200, ka).unwrap();
        assert_eq!((k.ID, k.TTL), (12345, 0));

        let err = br#"{"error":"etcdserver: requested lease not found","message":"etcdserver: requested lease not found","code":5}"#;
        assert_eq!(
            parse::<TxnResponse>(404, err).unwrap_err(),
            GatewayError::LeaseNotFound
        );
        assert_eq!(
            parse::<TxnResponse>(200, err).unwrap_err(),
            GatewayError::LeaseNotFound
        );
        assert!(matches!(
            parse::<TxnResponse>(503, b"oops").unwrap_err(),
            GatewayError::Retryable { .. }
        ));
        assert!(matches!(
            parse::<TxnResponse>(400, br#"{"error":"bad","code":3}"#).unwrap_err(),
            GatewayError::Fatal { .. }
        ));
        assert!(matches!(
            parse::<TxnResponse>(200, b"[]").unwrap_err(),
            GatewayError::Malformed(_)
        ));

        let w = br#"{"result":{"header":{"revision":"4"},"events":[{"type":"DELETE","kv":{"key":"ZWwveC8x","mod_revision":"4"}}]}}"#;
        assert!(parse_watch_message(w).unwrap().has_delete());
    }

    fn unb64(v: &Value) -> Vec<u8> {
        b64::decode(v.as_str().unwrap().as_bytes()).unwrap()
    }

    #[test]
    fn permit_bodies() {
        let queue: (&[u8], &[u8]) = (b"el/s/", b"el/s/g");
        let slots: (&[u8], &[u8]) = (b"el/s/s/", b"el/s/s0");
        let t = permit_acquire_txn(
            b"el/s/1f.3",
            queue,
            slots,
            (b"el/s/r/", b"el/s/r0"),
            31,
            b"p3:ab",
            3,
        );
        assert_eq!(t["compare"][0]["create_revision"], "0");
        let put = &t["success"][0]["request_put"];
        assert_eq!(
            (
                unb64(&put["key"]),
                unb64(&put["value"]),
                put["lease"].as_str()
            ),
            (b"el/s/1f.3".to_vec(), b"p3:ab".to_vec(), Some("31"))
        );
        let oldest = &t["success"][1]["request_range"];
        assert_eq!(
            (unb64(&oldest["key"]), unb64(&oldest["range_end"])),
            (b"el/s/".to_vec(), b"el/s/g".to_vec())
        );
        assert_eq!(
            (
                &oldest["sort_order"],
                &oldest["sort_target"],
                &oldest["limit"]
            ),
            (&json!("ASCEND"), &json!("CREATE"), &json!("4"))
        );
        assert!(oldest.get("keys_only").is_none(), "values carry the limit");
        assert_eq!(
            (
                &t["success"][2]["request_range"]["sort_order"],
                &t["success"][2]["request_range"]["limit"]
            ),
            (&json!("DESCEND"), &json!("2"))
        );
        assert_eq!(
            unb64(&t["success"][3]["request_range"]["range_end"]),
            b"el/s/s0"
        );
        assert_eq!(
            unb64(&t["failure"][0]["request_range"]["key"]),
            b"el/s/1f.3"
        );
        let readers = &t["success"][4]["request_range"];
        assert_eq!(
            (
                unb64(&readers["key"]),
                unb64(&readers["range_end"]),
                &readers["limit"]
            ),
            (b"el/s/r/".to_vec(), b"el/s/r0".to_vec(), &json!("1"))
        );

        let c = permit_check_txn(b"el/s/1f.3", 10, queue, slots, 3);
        assert_eq!(
            c["success"][1]["request_range"]["max_create_revision"],
            "10"
        );
        assert_eq!(c["success"][1]["request_range"]["limit"], "4");
        assert_eq!(c["success"][2]["request_range"]["max_create_revision"], "9");
        assert_eq!(c["success"][2]["request_range"]["limit"], "1");

        let claim = claim_slot_txn(b"el/s/s/2", b"el/s/1f.3", 10, 31, b"p3:ab", slots);
        assert_eq!(unb64(&claim["compare"][0]["key"]), b"el/s/s/2");
        assert_eq!(claim["compare"][0]["create_revision"], "0");
        assert_eq!(
            (
                unb64(&claim["compare"][1]["key"]),
                &claim["compare"][1]["create_revision"]
            ),
            (b"el/s/1f.3".to_vec(), &json!("10"))
        );
        for (i, key) in [(0, &b"el/s/s/2"[..]), (1, b"el/s/1f.3")] {
            let put = &claim["success"][i]["request_put"];
            assert_eq!(
                (unb64(&put["key"]), unb64(&put["value"]), &put["lease"]),
                (key.to_vec(), b"p3:ab".to_vec(), &json!("31"))
            );
        }
        assert_eq!(claim["failure"].as_array().map(Vec::len), Some(2));

        let d = delete_all_if_revisions(&[(b"el/s/1f.3", 10), (b"el/s/s/2", 11)]);
        assert_eq!(
            (
                &d["compare"][0]["create_revision"],
                &d["compare"][1]["create_revision"]
            ),
            (&json!("10"), &json!("11"))
        );
        assert_eq!(
            unb64(&d["success"][1]["request_delete_range"]["key"]),
            b"el/s/s/2"
        );
        let v = delete_if_value(b"el/s/s/2", b"p3:ab");
        assert_eq!(
            (&v["compare"][0]["target"], unb64(&v["compare"][0]["value"])),
            (&json!("VALUE"), b"p3:ab".to_vec())
        );

        // A lock's acquire also reads the oldest key, with its value.
        let lock = acquire_txn(b"el/s/1f", b"el/s/", 31, b"ab");
        let oldest = &lock["success"][2]["request_range"];
        assert_eq!(
            (
                &oldest["sort_order"],
                &oldest["limit"],
                oldest.get("keys_only")
            ),
            (&json!("ASCEND"), &json!("1"), None)
        );

        let w = watch_range_deletes(b"el/s/", b"el/s/g", 12);
        assert_eq!(
            (
                &w["create_request"]["filters"],
                &w["create_request"]["start_revision"]
            ),
            (&json!(["NOPUT"]), &json!("12"))
        );
        let w = watch_key(b"el/s/2a.1", 12);
        assert!(
            w["create_request"].get("filters").is_none()
                && w["create_request"].get("range_end").is_none()
        );
        // A promotion is a PUT event (no "type"): a permit's waiter sees it.
        let put = br#"{"result":{"header":{"revision":"12"},"events":[{"kv":{"key":"ZWwvcy8yYS4x","create_revision":"7","mod_revision":"12"}}]}}"#;
        let m = parse_watch_message(put).unwrap();
        assert!(!m.has_delete() && m.events.len() == 1 && m.events[0].kind.is_none());
    }

    #[test]
    fn shared_bodies() {
        let writers: (&[u8], &[u8]) = (b"el/rw/", b"el/rw/g");
        let t = shared_acquire_txn(b"el/rw/r/1f.3", b"el/rw/", writers, 31, b"r:ab");
        assert_eq!(t["compare"][0]["create_revision"], "0");
        let put = &t["success"][0]["request_put"];
        assert_eq!(
            (
                unb64(&put["key"]),
                unb64(&put["value"]),
                put["lease"].as_str()
            ),
            (b"el/rw/r/1f.3".to_vec(), b"r:ab".to_vec(), Some("31"))
        );
        // The newest writer key, with its value (a semaphore's carries a limit).
        let newest = &t["success"][1]["request_range"];
        assert_eq!(
            (unb64(&newest["key"]), unb64(&newest["range_end"])),
            (b"el/rw/".to_vec(), b"el/rw/g".to_vec())
        );
        assert_eq!(
            (
                &newest["sort_order"],
                &newest["sort_target"],
                &newest["limit"]
            ),
            (&json!("DESCEND"), &json!("CREATE"), &json!("1"))
        );
        assert!(newest.get("keys_only").is_none() && newest.get("max_create_revision").is_none());
        // The oldest key of the whole name (reader keys included).
        let oldest = &t["success"][2]["request_range"];
        assert_eq!(
            (unb64(&oldest["key"]), unb64(&oldest["range_end"])),
            (b"el/rw/".to_vec(), b"el/rw0".to_vec())
        );
        assert_eq!(
            (&oldest["sort_order"], &oldest["limit"]),
            (&json!("ASCEND"), &json!("1"))
        );
        assert_eq!(
            unb64(&t["failure"][0]["request_range"]["key"]),
            b"el/rw/r/1f.3"
        );

        let c = shared_check_txn(b"el/rw/r/1f.3", writers, 10);
        assert_eq!(
            unb64(&c["success"][0]["request_range"]["key"]),
            b"el/rw/r/1f.3"
        );
        let w = &c["success"][1]["request_range"];
        assert_eq!(
            (
                unb64(&w["key"]),
                unb64(&w["range_end"]),
                &w["max_create_revision"],
                &w["limit"]
            ),
            (
                b"el/rw/".to_vec(),
                b"el/rw/g".to_vec(),
                &json!("9"),
                &json!("1")
            )
        );
        assert_eq!(w["sort_order"], "DESCEND");
    }

    #[test]
    fn prefix_ends() {
        assert_eq!(prefix_end(b"a/"), b"a0");
        assert_eq!(prefix_end(b"a\xff"), b"b");
        assert_eq!(prefix_end(b"\xff"), vec![0]);
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|i| json!(i)),
            any::<i64>().prop_map(|i| json!(i.to_string())),
            "[a-zA-Z0-9+/=_]{0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::vec(
                    (
                        prop_oneof![
                            Just("header".to_string()),
                            Just("revision".to_string()),
                            Just("kvs".to_string()),
                            Just("key".to_string()),
                            Just("create_revision".to_string()),
                            Just("result".to_string()),
                            Just("events".to_string()),
                            Just("succeeded".to_string()),
                            Just("responses".to_string()),
                            Just("response_range".to_string()),
                            Just("TTL".to_string()),
                            Just("ID".to_string()),
                            Just("error".to_string()),
                            Just("code".to_string())
                        ],
                        inner
                    ),
                    0..5
                )
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn parsers_never_panic_on_bytes(status in 0u16..600, body in prop::collection::vec(any::<u8>(), 0..200)) {
            let _ = parse::<TxnResponse>(status, &body);
            let _ = parse::<RangeResponse>(status, &body);
            let _ = parse::<LeaseGrantResponse>(status, &body);
            let _ = parse_wrapped::<LeaseTtl>(status, &body);
            let _ = parse_watch_message(&body);
        }

        #[test]
        fn parsers_never_panic_on_hostile_json(v in arb_json(), status in prop_oneof![Just(200u16), Just(404), Just(503)]) {
            let body = serde_json::to_vec(&v).unwrap();
            let _ = parse::<TxnResponse>(status, &body).map(|t| t.range(1).cloned());
            let _ = parse::<RangeResponse>(status, &body);
            let _ = parse::<LeaseGrantResponse>(status, &body);
            let _ = parse_wrapped::<LeaseTtl>(status, &body);
            let _ = parse_watch_message(&body);
        }
    }
}
