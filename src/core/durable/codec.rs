//! Requests of the lock service's HTTP API v1 and strict reading of its
//! answers (`docs/lock-service-api.md`). Every answer is checked field by
//! field: a malformed, hostile or unexpected answer is an error naming what
//! was wrong, never a panic, and never a value that could be a secret.

use serde_json::Value;

use super::DurableEndpoint;
use crate::core::error::sanitize_detail;
use crate::core::names::MAX_TTL_MS;
use crate::core::redis::quorum::validity_ms;
use crate::core::redis::webdis::encode_arg;
use crate::core::{HttpRequest, LockKind, Method, RequestId, Target, MAX_PERMITS};

/// The clock-drift factor applied to every lease (as the single-node Redis lock).
pub const DRIFT_FACTOR: f64 = 0.01;

/// Largest answer body read (the service's answers are a few dozen bytes).
pub const MAX_ANSWER_BYTES: usize = 16 * 1024;

/// Most waiters an answer may report: the API's queue bound (a larger count
/// is not believed, and `inspect` lists one entry per waiter).
pub const MAX_WAITERS: u64 = 512;

/// How long a lease of `ttl_ms` is trusted from the send time of the
/// request that established it: `ttl − (ttl × 1% + 2 ms)`, if positive.
pub fn lease_validity(ttl_ms: u64) -> Option<u64> {
    validity_ms(ttl_ms, 0, DRIFT_FACTOR)
}

/// One operation of the API.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApiOp {
    /// `/v1/acquire`.
    Acquire,
    /// `/v1/release`.
    Release,
    /// `/v1/extend`.
    Extend,
    /// `/v1/resume`.
    Resume,
    /// `/v1/inspect`.
    Inspect,
}

impl ApiOp {
    /// The path segment after `/v1/`.
    pub fn as_str(self) -> &'static str {
        match self {
            ApiOp::Acquire => "acquire",
            ApiOp::Release => "release",
            ApiOp::Extend => "extend",
            ApiOp::Resume => "resume",
            ApiOp::Inspect => "inspect",
        }
    }
}

/// `/v1/<op>?name=<percent-encoded name>`.
pub fn path(op: ApiOp, name: &str) -> String {
    let mut enc = Vec::with_capacity(name.len() + 8);
    encode_arg(name.as_bytes(), &mut enc);
    format!("/v1/{}?name={}", op.as_str(), String::from_utf8_lossy(&enc))
}

/// The request for `op` on `name` with the JSON `body`.
pub fn request(
    id: RequestId,
    endpoint: &DurableEndpoint,
    token: Option<&str>,
    op: ApiOp,
    name: &str,
    body: String,
    timeout_ms: u64,
) -> HttpRequest {
    let path = path(op, name);
    let target = match endpoint {
        DurableEndpoint::Url(base) => Target::Url(format!("{base}{path}")),
        DurableEndpoint::Binding(b) => Target::Binding {
            name: b.clone(),
            path,
        },
    };
    let mut headers = vec![("content-type".to_string(), "application/json".to_string())];
    if let Some(t) = token {
        headers.push(("authorization".to_string(), format!("Bearer {t}")));
    }
    HttpRequest {
        id,
        method: Method::Post,
        target,
        headers,
        body: body.into_bytes(),
        timeout_ms: Some(timeout_ms),
        stream: false,
    }
}

/// `{"owner","ttlMs","waitMs"}` (owners are hex: nothing to escape), with
/// `"mode":"shared"` for a shared hold or `"limit"` for a permit (an
/// exclusive acquire sends neither: what every version of the service reads).
pub fn acquire_body(owner: &str, kind: LockKind, ttl_ms: u64, wait_ms: u64) -> String {
    let extra = match kind {
        LockKind::Shared => r#","mode":"shared""#.to_string(),
        LockKind::Permits { limit } => format!(r#","limit":{limit}"#),
        LockKind::Exclusive | LockKind::Leader => String::new(),
    };
    format!(r#"{{"owner":"{owner}","ttlMs":{ttl_ms},"waitMs":{wait_ms}{extra}}}"#)
}

/// `{"owner","token"}` (release and resume).
pub fn owner_body(owner: &str, token: u64) -> String {
    format!(r#"{{"owner":"{owner}","token":"{token}"}}"#)
}

/// `{"owner","token","ttlMs"}`.
pub fn extend_body(owner: &str, token: u64, ttl_ms: u64) -> String {
    format!(r#"{{"owner":"{owner}","token":"{token}","ttlMs":{ttl_ms}}}"#)
}

/// What was wrong with an answer (or the HTTP error it was).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnswerError {
    /// The HTTP status, for an answer that was not a 200.
    pub status: Option<u16>,
    /// Never a secret: values are not repeated, the service's own message
    /// is sanitised.
    pub message: String,
}

impl AnswerError {
    fn malformed(what: &str) -> AnswerError {
        AnswerError {
            status: None,
            message: format!("malformed answer from the lock service: {what}"),
        }
    }
}

/// The answer to `acquire`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AcquireAnswer {
    /// Granted (or already ours): the fencing token and the lease in ms.
    Granted {
        /// The fencing token.
        token: u64,
        /// The lease from the service's answer.
        ttl_ms: u64,
        /// A permit's slot (`None` for other holds).
        slot: Option<u32>,
    },
    /// Not granted within `waitMs` (or superseded by a newer poll).
    Refused,
    /// A permit of another limit than the one the name's permits are held
    /// with (409): nothing was taken.
    OtherLimit {
        /// The limit the permits are held with.
        limit: u32,
    },
}

/// The answer to `extend`: the new lease, or `None` (the lock is lost).
pub type ExtendAnswer = Option<u64>;

/// The answer to `resume`: the hold, or `None` (not held).
pub type ResumeAnswer = Option<Resumed>;

/// A hold `resume` found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resumed {
    /// The remaining lease.
    pub pttl_ms: u64,
    /// What the service holds it as (`None`: a service that does not say,
    /// which holds exclusive locks only).
    pub kind: Option<LockKind>,
    /// A permit's slot.
    pub slot: Option<u32>,
}

/// One holder as `inspect` lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InspectHolder {
    /// Exclusive, shared, or a permit (of the answer's `limit`).
    pub kind: LockKind,
    /// Its fencing token.
    pub token: u64,
    /// Its remaining lease.
    pub pttl_ms: u64,
    /// A permit's slot.
    pub slot: Option<u32>,
}

/// The answer to `inspect`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InspectAnswer {
    /// Whether someone holds the lock.
    pub held: bool,
    /// The holder's (or the last) fencing token.
    pub token: Option<u64>,
    /// The holder's remaining lease.
    pub pttl_ms: Option<u64>,
    /// Queued waiters.
    pub waiters: u64,
    /// A semaphore's limit while permits are held.
    pub limit: Option<u32>,
    /// Every holder (a service that does not list them: empty).
    pub holders: Vec<InspectHolder>,
}

/// The JSON object of a 200 answer, or the error the answer is: an HTTP
/// error with the service's `{"error":{"code","message"}}` (sanitised,
/// `secrets` removed), or a malformed body.
pub fn answer_object(
    status: u16,
    body: &[u8],
    secrets: &[&str],
) -> Result<serde_json::Map<String, Value>, AnswerError> {
    if body.len() > MAX_ANSWER_BYTES {
        return Err(AnswerError {
            status: Some(status),
            message: format!(
                "the lock service's answer is {} bytes, more than the {MAX_ANSWER_BYTES} accepted",
                body.len()
            ),
        });
    }
    if status != 200 {
        return Err(http_error(status, body, secrets));
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(AnswerError::malformed("not a JSON object")),
        Err(_) => Err(AnswerError::malformed("not JSON")),
    }
}

fn http_error(status: u16, body: &[u8], secrets: &[&str]) -> AnswerError {
    // The service's `{"error":{"code","message"}}`, or the front's
    // `{"error":"message","code":"CODE"}` (its 401/403, like every route's).
    let detail = serde_json::from_slice::<Value>(body).ok().and_then(|v| {
        let e = v.get("error")?;
        let (code, message) = match e {
            Value::Object(_) => (
                e.get("code").and_then(Value::as_str),
                e.get("message").and_then(Value::as_str).unwrap_or(""),
            ),
            Value::String(m) => (v.get("code").and_then(Value::as_str), m.as_str()),
            _ => return None,
        };
        Some(match code {
            Some(c) if !c.is_empty() => format!("{c}: {message}"),
            _ => message.to_string(),
        })
    });
    let prefix = match status {
        401 | 403 => "the lock service refused the credentials",
        404 => "the lock service does not know this path (is the URL the service's base, e.g. https://…/lock?)",
        _ => "the lock service answered with an error",
    };
    let message = match detail {
        Some(d) => format!("{prefix} ({})", sanitize_detail(&d, secrets)),
        None => prefix.to_string(),
    };
    AnswerError {
        status: Some(status),
        message,
    }
}

type Obj = serde_json::Map<String, Value>;

fn bool_field(o: &Obj, key: &str) -> Result<bool, AnswerError> {
    o.get(key)
        .and_then(Value::as_bool)
        .ok_or_else(|| AnswerError::malformed(&format!("`{key}` is missing or not a boolean")))
}

/// A lease in ms: a whole number in 0..=MAX_TTL_MS.
fn ms_field(o: &Obj, key: &str) -> Result<u64, AnswerError> {
    o.get(key)
        .and_then(Value::as_u64)
        .filter(|n| *n <= MAX_TTL_MS)
        .ok_or_else(|| {
            AnswerError::malformed(&format!(
                "`{key}` is missing or not a whole number of ms in 0..={MAX_TTL_MS}"
            ))
        })
}

fn opt_ms_field(o: &Obj, key: &str) -> Result<Option<u64>, AnswerError> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(_) => ms_field(o, key).map(Some),
    }
}

/// A fencing token: the canonical decimal string of a u64 (digits only, no
/// sign, no leading zero).
pub fn parse_token(s: &str) -> Option<u64> {
    if s.is_empty() || s.len() > 20 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if s.len() > 1 && s.starts_with('0') {
        return None;
    }
    s.parse().ok()
}

fn token_field(o: &Obj, key: &str) -> Result<u64, AnswerError> {
    o.get(key)
        .and_then(Value::as_str)
        .and_then(parse_token)
        .ok_or_else(|| {
            AnswerError::malformed(&format!(
                "`{key}` is missing or not a decimal string of a 64-bit token"
            ))
        })
}

fn opt_token_field(o: &Obj, key: &str) -> Result<Option<u64>, AnswerError> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(_) => token_field(o, key).map(Some),
    }
}

/// An optional whole number below `below`.
fn opt_small_field(o: &Obj, key: &str, below: u32) -> Result<Option<u32>, AnswerError> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .filter(|n| *n < below as u64)
            .map(|n| Some(n as u32))
            .ok_or_else(|| {
                AnswerError::malformed(&format!("`{key}` is not a whole number below {below}"))
            }),
    }
}

fn opt_limit_field(o: &Obj) -> Result<Option<u32>, AnswerError> {
    let l = opt_small_field(o, "limit", MAX_PERMITS + 1)?;
    if l == Some(0) {
        return Err(AnswerError::malformed("`limit` is 0"));
    }
    Ok(l)
}

/// `mode` (+ the limit for a permit): `None` when absent.
fn opt_kind_field(o: &Obj, limit: Option<u32>) -> Result<Option<LockKind>, AnswerError> {
    let bad =
        || AnswerError::malformed("`mode` is not exclusive, shared, or a permit with its limit");
    match o.get("mode") {
        None => Ok(None),
        Some(Value::String(m)) => match (m.as_str(), limit) {
            ("exclusive", _) => Ok(Some(LockKind::Exclusive)),
            ("shared", _) => Ok(Some(LockKind::Shared)),
            ("permit", Some(limit)) => Ok(Some(LockKind::Permits { limit })),
            _ => Err(bad()),
        },
        Some(_) => Err(bad()),
    }
}

fn waiters_field(o: &Obj) -> Result<u64, AnswerError> {
    match o.get("waiters") {
        None => Ok(0),
        Some(v) => v.as_u64().filter(|n| *n <= MAX_WAITERS).ok_or_else(|| {
            AnswerError::malformed(&format!(
                "`waiters` is not a whole number in 0..={MAX_WAITERS}"
            ))
        }),
    }
}

/// Reads an `acquire` answer.
pub fn parse_acquire(
    status: u16,
    body: &[u8],
    secrets: &[&str],
) -> Result<AcquireAnswer, AnswerError> {
    if status == 409 {
        // `{"error":{"code":"INVALID_ARGUMENT","message","limit"}}`.
        let limit = serde_json::from_slice::<Value>(body)
            .ok()
            .and_then(|v| v.get("error")?.get("limit")?.as_u64())
            .filter(|l| (1..=MAX_PERMITS as u64).contains(l));
        if let Some(limit) = limit {
            return Ok(AcquireAnswer::OtherLimit {
                limit: limit as u32,
            });
        }
    }
    let o = answer_object(status, body, secrets)?;
    waiters_field(&o)?;
    if bool_field(&o, "acquired")? {
        let token = token_field(&o, "token")?;
        let ttl_ms = ms_field(&o, "ttlMs")?;
        let slot = opt_small_field(&o, "slot", MAX_PERMITS)?;
        Ok(AcquireAnswer::Granted {
            token,
            ttl_ms,
            slot,
        })
    } else {
        opt_token_field(&o, "token")?;
        opt_ms_field(&o, "pttlMs")?;
        Ok(AcquireAnswer::Refused)
    }
}

/// Reads a `release` answer: whether the lock was ours until then.
pub fn parse_release(status: u16, body: &[u8], secrets: &[&str]) -> Result<bool, AnswerError> {
    bool_field(&answer_object(status, body, secrets)?, "released")
}

/// Reads an `extend` answer.
pub fn parse_extend(
    status: u16,
    body: &[u8],
    secrets: &[&str],
) -> Result<ExtendAnswer, AnswerError> {
    let o = answer_object(status, body, secrets)?;
    if bool_field(&o, "extended")? {
        Ok(Some(ms_field(&o, "ttlMs")?))
    } else {
        Ok(None)
    }
}

/// Reads a `resume` answer.
pub fn parse_resume(
    status: u16,
    body: &[u8],
    secrets: &[&str],
) -> Result<ResumeAnswer, AnswerError> {
    let o = answer_object(status, body, secrets)?;
    if !bool_field(&o, "held")? {
        return Ok(None);
    }
    let limit = opt_limit_field(&o)?;
    let slot = opt_small_field(&o, "slot", limit.unwrap_or(0))?;
    Ok(Some(Resumed {
        pttl_ms: ms_field(&o, "pttlMs")?,
        kind: opt_kind_field(&o, limit)?,
        slot,
    }))
}

/// Reads an `inspect` answer.
pub fn parse_inspect(
    status: u16,
    body: &[u8],
    secrets: &[&str],
) -> Result<InspectAnswer, AnswerError> {
    let o = answer_object(status, body, secrets)?;
    let limit = opt_limit_field(&o)?;
    let holders = match o.get("holders") {
        None | Some(Value::Null) => Vec::new(),
        // Bounded by the answer's size (MAX_ANSWER_BYTES).
        Some(Value::Array(hs)) => hs
            .iter()
            .map(|h| {
                let h = h
                    .as_object()
                    .ok_or_else(|| AnswerError::malformed("a holder is not an object"))?;
                let kind = opt_kind_field(h, limit)?.unwrap_or(LockKind::Exclusive);
                let slot = opt_small_field(h, "slot", limit.unwrap_or(0))?;
                Ok(InspectHolder {
                    kind,
                    token: token_field(h, "token")?,
                    pttl_ms: ms_field(h, "pttlMs")?,
                    slot,
                })
            })
            .collect::<Result<_, AnswerError>>()?,
        Some(_) => return Err(AnswerError::malformed("`holders` is not a list")),
    };
    Ok(InspectAnswer {
        held: bool_field(&o, "held")?,
        token: opt_token_field(&o, "token")?,
        pttl_ms: opt_ms_field(&o, "pttlMs")?,
        waiters: waiters_field(&o)?,
        limit,
        holders,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn tokens_are_canonical_decimal_u64s() {
        assert_eq!(parse_token("0"), Some(0));
        assert_eq!(parse_token("18446744073709551615"), Some(u64::MAX));
        for bad in [
            "",
            "01",
            "+1",
            "-1",
            " 1",
            "1.0",
            "18446744073709551616",
            "0x1",
            "１",
        ] {
            assert_eq!(parse_token(bad), None, "{bad:?}");
        }
    }

    proptest! {
        #[test]
        fn arbitrary_answers_never_panic(status in 100u16..600, body in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = parse_acquire(status, &body, &["secret"]);
            let _ = parse_release(status, &body, &[]);
            let _ = parse_extend(status, &body, &[]);
            let _ = parse_resume(status, &body, &[]);
            let _ = parse_inspect(status, &body, &[]);
        }

        #[test]
        fn arbitrary_json_never_panics(s in "[\\[\\]{}\",:0-9a-zA-Z\\-. ]{0,80}") {
            for status in [200u16, 400, 500] {
                let _ = parse_acquire(status, s.as_bytes(), &[]);
                let _ = parse_inspect(status, s.as_bytes(), &[]);
            }
        }
    }
}
