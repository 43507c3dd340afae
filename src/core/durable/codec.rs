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
use crate::core::{HttpRequest, Method, RequestId, Target};

/// The clock-drift factor applied to every lease (as the single-node Redis lock).
pub const DRIFT_FACTOR: f64 = 0.01;

/// Largest answer body read (the service's answers are a few dozen bytes).
pub const MAX_ANSWER_BYTES: usize = 16 * 1024;

/// Most waiters an answer may report (a larger count is not believed).
pub const MAX_WAITERS: u64 = 1_000_000;

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

/// `{"owner","ttlMs","waitMs"}` (owners are hex: nothing to escape).
pub fn acquire_body(owner: &str, ttl_ms: u64, wait_ms: u64) -> String {
    format!(r#"{{"owner":"{owner}","ttlMs":{ttl_ms},"waitMs":{wait_ms}}}"#)
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
    },
    /// Not granted within `waitMs` (or superseded by a newer poll).
    Refused,
}

/// The answer to `extend`: the new lease, or `None` (the lock is lost).
pub type ExtendAnswer = Option<u64>;

/// The answer to `resume`: the remaining lease, or `None` (not held).
pub type ResumeAnswer = Option<u64>;

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
    let o = answer_object(status, body, secrets)?;
    waiters_field(&o)?;
    if bool_field(&o, "acquired")? {
        let token = token_field(&o, "token")?;
        let ttl_ms = ms_field(&o, "ttlMs")?;
        Ok(AcquireAnswer::Granted { token, ttl_ms })
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
    if bool_field(&o, "held")? {
        Ok(Some(ms_field(&o, "pttlMs")?))
    } else {
        Ok(None)
    }
}

/// Reads an `inspect` answer.
pub fn parse_inspect(
    status: u16,
    body: &[u8],
    secrets: &[&str],
) -> Result<InspectAnswer, AnswerError> {
    let o = answer_object(status, body, secrets)?;
    Ok(InspectAnswer {
        held: bool_field(&o, "held")?,
        token: opt_token_field(&o, "token")?,
        pttl_ms: opt_ms_field(&o, "pttlMs")?,
        waiters: waiters_field(&o)?,
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
