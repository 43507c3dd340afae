//! HTTP API v1 of the lock service (docs/lock-service-api.md) on plain
//! data: a request's method, path, query and body in, a [`Command`] or a
//! [`Refusal`] out; and the JSON answers. No `worker` types, so the checks
//! run on the host too (tests/worker_lock_object.rs).
//!
//! Every refusal is decided here, before the object's state is looked at,
//! so a refused request changes nothing. Messages name the field that is
//! wrong, never its value (an `owner` is a credential).

use serde::Deserialize;
use serde_json::{json, Value};

use super::machine::{Kind, MAX_LIMIT};
use crate::core::names::{validate_name, MAX_TTL_MS};

/// Largest request body accepted, in bytes.
pub const MAX_BODY_BYTES: usize = 4096;
/// Longest wait of one `acquire` (a client waiting longer re-sends it).
pub const MAX_WAIT_MS: u64 = 60_000;
/// Owners are 16..=64 lowercase hex characters.
pub const OWNER_HEX: std::ops::RangeInclusive<usize> = 16..=64;

/// The operations, by their path `/v1/<op>`.
pub const OPS: [&str; 5] = ["acquire", "release", "extend", "resume", "inspect"];

/// A refused request: the HTTP status and a message without user data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub status: u16,
    pub message: String,
}

impl Refusal {
    pub fn new(status: u16, message: impl Into<String>) -> Refusal {
        Refusal {
            status,
            message: message.into(),
        }
    }

    fn bad(message: impl Into<String>) -> Refusal {
        Refusal::new(400, message)
    }

    /// `{"error":{"code":"INVALID_ARGUMENT","message":…}}`.
    pub fn body(&self) -> Value {
        json!({ "error": { "code": "INVALID_ARGUMENT", "message": self.message } })
    }
}

/// One checked operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    Acquire {
        owner: String,
        kind: Kind,
        ttl_ms: u64,
        wait_ms: u64,
    },
    Release {
        owner: String,
        token: u64,
    },
    Extend {
        owner: String,
        token: u64,
        ttl_ms: u64,
    },
    Resume {
        owner: String,
        token: u64,
    },
    Inspect,
}

/// A checked request: the lock name and the operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Command {
    pub name: String,
    pub op: Op,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct AcquireBody {
    owner: String,
    ttl_ms: u64,
    wait_ms: u64,
    /// `"exclusive"` (default) or `"shared"`; read as any JSON value so
    /// that a wrong one gets its own message.
    #[serde(default)]
    mode: Option<Value>,
    /// A semaphore's limit (a permit), 1..=MAX_LIMIT.
    #[serde(default)]
    limit: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HeldBody {
    owner: String,
    token: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ExtendBody {
    owner: String,
    token: String,
    ttl_ms: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct InspectBody {}

/// The operation named by `path` (`/v1/<op>`), or 404.
pub fn op_of_path(path: &str) -> Result<&'static str, Refusal> {
    path.strip_prefix("/v1/")
        .and_then(|op| OPS.iter().copied().find(|o| *o == op))
        .ok_or_else(|| {
            Refusal::new(
                404,
                "no such path: POST /v1/acquire|release|extend|resume|inspect?name=<name>",
            )
        })
}

/// The checks that need no body: the path (404), the method (405) and the
/// name in the query (400). The front makes these before forwarding.
pub fn check_head(
    method: &str,
    path: &str,
    query: &str,
) -> Result<(&'static str, String), Refusal> {
    let op = op_of_path(path)?;
    if method != "POST" {
        return Err(Refusal::new(
            405,
            "method not allowed: every operation is POST",
        ));
    }
    Ok((op, name_of_query(query)?))
}

/// Checks a whole request.
pub fn parse(method: &str, path: &str, query: &str, body: &[u8]) -> Result<Command, Refusal> {
    let (op, name) = check_head(method, path, query)?;
    if body.len() > MAX_BODY_BYTES {
        return Err(Refusal::new(
            413,
            format!("the body is over {MAX_BODY_BYTES} bytes"),
        ));
    }
    let op = match op {
        "acquire" => {
            let b: AcquireBody = body_of(body, "owner, ttlMs, waitMs (mode, limit optional)")?;
            Op::Acquire {
                owner: owner(b.owner)?,
                kind: kind(b.mode.as_ref(), b.limit.as_ref())?,
                ttl_ms: ttl(b.ttl_ms)?,
                wait_ms: wait(b.wait_ms)?,
            }
        }
        "release" | "resume" => {
            let b: HeldBody = body_of(body, "owner, token")?;
            let (owner, token) = (owner(b.owner)?, token(&b.token)?);
            if op == "release" {
                Op::Release { owner, token }
            } else {
                Op::Resume { owner, token }
            }
        }
        "extend" => {
            let b: ExtendBody = body_of(body, "owner, token, ttlMs")?;
            Op::Extend {
                owner: owner(b.owner)?,
                token: token(&b.token)?,
                ttl_ms: ttl(b.ttl_ms)?,
            }
        }
        _ => {
            let _: InspectBody = body_of(body, "no fields: {}")?;
            Op::Inspect
        }
    };
    Ok(Command { name, op })
}

fn body_of<T: serde::de::DeserializeOwned>(body: &[u8], fields: &str) -> Result<T, Refusal> {
    // An object first: serde would also take a struct from a JSON array.
    serde_json::from_slice::<serde_json::Map<String, Value>>(body)
        .and_then(|map| serde_json::from_value(Value::Object(map)))
        .map_err(|_| {
        Refusal::bad(format!(
            "the body must be a JSON object with exactly these fields: {fields} (owner 16..=64 lowercase hex, token a decimal string, ttlMs 1..={MAX_TTL_MS}, waitMs 0..={MAX_WAIT_MS})"
        ))
    })
}

fn owner(o: String) -> Result<String, Refusal> {
    if OWNER_HEX.contains(&o.len()) && o.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        Ok(o)
    } else {
        Err(Refusal::bad(
            "owner must be 16..=64 lowercase hex characters",
        ))
    }
}

fn token(t: &str) -> Result<u64, Refusal> {
    let canonical =
        !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) && (t == "0" || !t.starts_with('0'));
    canonical
        .then(|| t.parse::<u64>().ok())
        .flatten()
        .ok_or_else(|| Refusal::bad("token must be a fencing token: a decimal string (u64)"))
}

/// The kind an `acquire` asks for: `mode` ("exclusive", the default, or
/// "shared") or `limit` (a permit of a semaphore, 1..=MAX_LIMIT), not both.
fn kind(mode: Option<&Value>, limit: Option<&Value>) -> Result<Kind, Refusal> {
    let mode = match mode {
        None => None,
        Some(Value::String(m)) if m == "exclusive" => Some(Kind::Exclusive),
        Some(Value::String(m)) if m == "shared" => Some(Kind::Shared),
        Some(_) => {
            return Err(Refusal::bad(
                "mode must be \"exclusive\" or \"shared\" (a permit is asked with limit)",
            ))
        }
    };
    let limit = match limit {
        None => None,
        Some(v) => Some(
            v.as_u64()
                .filter(|l| (1..=MAX_LIMIT as u64).contains(l))
                .ok_or_else(|| {
                    Refusal::bad(format!(
                        "limit must be a whole number in 1..={MAX_LIMIT} (a semaphore's permits)"
                    ))
                })? as u32,
        ),
    };
    match (mode, limit) {
        (Some(_), Some(_)) => Err(Refusal::bad(
            "mode and limit exclude each other: limit asks for a semaphore's permit",
        )),
        (_, Some(limit)) => Ok(Kind::Permit { limit }),
        (mode, None) => Ok(mode.unwrap_or(Kind::Exclusive)),
    }
}

fn ttl(ms: u64) -> Result<u64, Refusal> {
    if (1..=MAX_TTL_MS).contains(&ms) {
        Ok(ms)
    } else {
        Err(Refusal::bad(format!("ttlMs must be 1..={MAX_TTL_MS}")))
    }
}

fn wait(ms: u64) -> Result<u64, Refusal> {
    if ms <= MAX_WAIT_MS {
        Ok(ms)
    } else {
        Err(Refusal::bad(format!("waitMs must be 0..={MAX_WAIT_MS}")))
    }
}

/// The lock name of a query string: exactly one parameter, `name`,
/// percent-encoded (a raw `+` is refused: it would mean a space to some
/// encoders and a plus to others), valid by `core::names::validate_name`
/// and without control characters.
pub fn name_of_query(query: &str) -> Result<String, Refusal> {
    let missing = || Refusal::bad("the query must be exactly ?name=<percent-encoded lock name>");
    let mut params = query.split('&').filter(|p| !p.is_empty());
    let raw = params
        .next()
        .and_then(|p| p.strip_prefix("name="))
        .ok_or_else(missing)?;
    if params.next().is_some() {
        return Err(missing());
    }
    if raw.contains('+') {
        return Err(Refusal::bad(
            "the name must be percent-encoded: '+' is ambiguous, send %2B or %20",
        ));
    }
    let name = percent_decode(raw)
        .ok_or_else(|| Refusal::bad("the name is not valid percent-encoded UTF-8"))?;
    validate_name(&name).map_err(|e| Refusal::bad(e.to_string()))?;
    if name.chars().any(char::is_control) {
        return Err(Refusal::bad(
            "the lock name must not contain control characters",
        ));
    }
    Ok(name)
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                return None;
            }
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The answers (status 200), as the contract spells them: tokens are
/// decimal strings.
pub mod answer {
    use serde_json::{json, Value};

    use super::super::machine::{Busy, Hold, Mode, Status};

    fn mode(m: Mode) -> &'static str {
        match m {
            Mode::Exclusive => "exclusive",
            Mode::Shared => "shared",
            Mode::Permit => "permit",
        }
    }

    /// `slot`: a permit's (only then in the answer).
    pub fn granted(token: u64, ttl_ms: u64, waiters: usize, slot: Option<u32>) -> Value {
        let mut v = json!({ "acquired": true, "token": token.to_string(), "ttlMs": ttl_ms, "waiters": waiters });
        if let Some(s) = slot {
            v["slot"] = json!(s);
        }
        v
    }

    /// A permit of another limit than the held (or queued) permits': 409.
    pub fn other_limit(limit: u32) -> Value {
        json!({ "error": { "code": "INVALID_ARGUMENT", "message": format!("this semaphore's permits are held with limit {limit}: every holder must use the same limit (nothing taken)"), "limit": limit } })
    }

    pub fn busy(b: &Busy) -> Value {
        json!({ "acquired": false, "token": b.token.to_string(), "pttlMs": b.pttl_ms, "waiters": b.waiters })
    }

    pub fn released(ok: bool) -> Value {
        json!({ "released": ok })
    }

    pub fn extended(ttl_ms: Option<u64>) -> Value {
        match ttl_ms {
            Some(t) => json!({ "extended": true, "ttlMs": t }),
            None => json!({ "extended": false }),
        }
    }

    /// `mode` always; `limit` and `slot` for a permit.
    pub fn resumed(hold: Option<&Hold>) -> Value {
        match hold {
            Some(h) => {
                let mut v = json!({ "held": true, "pttlMs": h.pttl_ms, "mode": mode(h.mode) });
                if let (Some(l), Some(s)) = (h.limit, h.slot) {
                    v["limit"] = json!(l);
                    v["slot"] = json!(s);
                }
                v
            }
            None => json!({ "held": false }),
        }
    }

    pub fn status(s: &Status) -> Value {
        let holders: Vec<Value> = s
            .holders
            .iter()
            .map(|h| {
                let mut v = json!({ "mode": mode(h.mode), "token": h.token.to_string(), "pttlMs": h.pttl_ms });
                if let Some(slot) = h.slot {
                    v["slot"] = json!(slot);
                }
                v
            })
            .collect();
        json!({
            "held": s.token.is_some(),
            "token": s.token.map(|t| t.to_string()),
            "pttlMs": s.pttl_ms,
            "waiters": s.waiters,
            "limit": s.limit,
            "holders": holders,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OWNER: &str = "0123456789abcdef0123456789abcdef";

    fn post(path: &str, query: &str, body: &str) -> Result<Command, Refusal> {
        parse("POST", path, query, body.as_bytes())
    }

    #[test]
    fn well_formed_requests_parse() {
        let c = post(
            "/v1/acquire",
            "name=jobs%2Fnightly%20report",
            &format!(r#"{{"owner":"{OWNER}","ttlMs":30000,"waitMs":0}}"#),
        )
        .unwrap();
        assert_eq!(c.name, "jobs/nightly report");
        assert_eq!(
            c.op,
            Op::Acquire {
                owner: OWNER.into(),
                kind: Kind::Exclusive,
                ttl_ms: 30000,
                wait_ms: 0
            }
        );
        let c = post(
            "/v1/extend",
            "name=x",
            &format!(r#"{{"owner":"{OWNER}","token":"18446744073709551615","ttlMs":1}}"#),
        )
        .unwrap();
        assert!(matches!(
            c.op,
            Op::Extend {
                token: u64::MAX,
                ttl_ms: 1,
                ..
            }
        ));
        for op in ["release", "resume"] {
            let c = post(
                &format!("/v1/{op}"),
                "name=x",
                &format!(r#"{{"owner":"{OWNER}","token":"7"}}"#),
            )
            .unwrap();
            assert!(matches!(
                c.op,
                Op::Release { token: 7, .. } | Op::Resume { token: 7, .. }
            ));
        }
        assert_eq!(
            post("/v1/inspect", "name=x", " { } ").unwrap().op,
            Op::Inspect
        );
    }

    #[test]
    fn refusals_have_the_documented_status_and_never_echo_the_owner() {
        let secretish = "fedcba9876543210fedcba9876543210";
        let cases: Vec<(&str, &str, &str, String, u16)> = vec![
            ("POST", "/v1/nope", "name=x", "{}".into(), 404),
            ("POST", "/v2/acquire", "name=x", "{}".into(), 404),
            ("GET", "/v1/inspect", "name=x", "{}".into(), 405),
            ("POST", "/v1/inspect", "", "{}".into(), 400),
            ("POST", "/v1/inspect", "name=", "{}".into(), 400),
            ("POST", "/v1/inspect", "name=x&name=y", "{}".into(), 400),
            ("POST", "/v1/inspect", "name=x&other=1", "{}".into(), 400),
            ("POST", "/v1/inspect", "name=a+b", "{}".into(), 400),
            ("POST", "/v1/inspect", "name=%zz", "{}".into(), 400),
            ("POST", "/v1/inspect", "name=%ff", "{}".into(), 400),
            ("POST", "/v1/inspect", "name=a%00b", "{}".into(), 400),
            ("POST", "/v1/inspect", "name=a%0Ab", "{}".into(), 400),
            ("POST", "/v1/inspect", "name=x", "".into(), 400),
            ("POST", "/v1/inspect", "name=x", "[]".into(), 400),
            (
                "POST",
                "/v1/release",
                "name=x",
                format!(r#"["{secretish}","1"]"#),
                400,
            ),
            ("POST", "/v1/inspect", "name=x", r#"{"a":1}"#.into(), 400),
            (
                "POST",
                "/v1/inspect",
                "name=x",
                format!("{{}}{}", " ".repeat(5000)),
                413,
            ),
            ("POST", "/v1/acquire", "name=x", "{".into(), 400),
            (
                "POST",
                "/v1/acquire",
                "name=x",
                format!(
                    r#"{{"owner":"{}","ttlMs":1,"waitMs":0}}"#,
                    secretish.to_uppercase()
                ),
                400,
            ),
            (
                "POST",
                "/v1/acquire",
                "name=x",
                format!(r#"{{"owner":"{secretish}g","ttlMs":1,"waitMs":0}}"#),
                400,
            ),
            (
                "POST",
                "/v1/acquire",
                "name=x",
                r#"{"owner":"abc","ttlMs":1,"waitMs":0}"#.into(),
                400,
            ),
            (
                "POST",
                "/v1/acquire",
                "name=x",
                format!(r#"{{"owner":"{secretish}","ttlMs":0,"waitMs":0}}"#),
                400,
            ),
            (
                "POST",
                "/v1/acquire",
                "name=x",
                format!(r#"{{"owner":"{secretish}","ttlMs":86400001,"waitMs":0}}"#),
                400,
            ),
            (
                "POST",
                "/v1/acquire",
                "name=x",
                format!(r#"{{"owner":"{secretish}","ttlMs":1,"waitMs":60001}}"#),
                400,
            ),
            (
                "POST",
                "/v1/acquire",
                "name=x",
                format!(r#"{{"owner":"{secretish}","ttlMs":1.5,"waitMs":0}}"#),
                400,
            ),
            (
                "POST",
                "/v1/acquire",
                "name=x",
                format!(r#"{{"owner":"{secretish}","ttlMs":-1,"waitMs":0}}"#),
                400,
            ),
            (
                "POST",
                "/v1/acquire",
                "name=x",
                format!(r#"{{"owner":"{secretish}","ttlMs":1}}"#),
                400,
            ),
            (
                "POST",
                "/v1/acquire",
                "name=x",
                format!(r#"{{"owner":"{secretish}","ttlMs":1,"waitMs":0,"x":1}}"#),
                400,
            ),
            (
                "POST",
                "/v1/release",
                "name=x",
                format!(r#"{{"owner":"{secretish}","token":7}}"#),
                400,
            ),
            (
                "POST",
                "/v1/release",
                "name=x",
                format!(r#"{{"owner":"{secretish}","token":"07"}}"#),
                400,
            ),
            (
                "POST",
                "/v1/release",
                "name=x",
                format!(r#"{{"owner":"{secretish}","token":"-1"}}"#),
                400,
            ),
            (
                "POST",
                "/v1/release",
                "name=x",
                format!(r#"{{"owner":"{secretish}","token":"18446744073709551616"}}"#),
                400,
            ),
            (
                "POST",
                "/v1/extend",
                "name=x",
                format!(r#"{{"owner":"{secretish}","token":"1"}}"#),
                400,
            ),
        ];
        for (method, path, query, body, status) in cases {
            let r = parse(method, path, query, body.as_bytes()).unwrap_err();
            assert_eq!(
                r.status, status,
                "{method} {path}?{query} {body}: {}",
                r.message
            );
            let text = r.body().to_string();
            assert!(!text.to_lowercase().contains(secretish), "{text}");
            assert_eq!(r.body()["error"]["code"], "INVALID_ARGUMENT");
        }
        let long = format!("name={}", "a".repeat(513));
        assert_eq!(post("/v1/inspect", &long, "{}").unwrap_err().status, 400);
        let max = format!("name={}", "a".repeat(512));
        assert!(post("/v1/inspect", &max, "{}").is_ok());
    }
}
