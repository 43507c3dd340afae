//! Request bodies for the binding and strict reading of its answers. Every
//! answer is checked field by field: a malformed, hostile or unexpected
//! answer is an error naming what was wrong, never a panic, and never a
//! value that could be a secret (owners are not repeated).

use serde_json::{json, Value};

use super::{sql, BATCH_PATH};
use crate::core::error::sanitize_detail;
use crate::core::names::MAX_TTL_MS;
use crate::core::redis::quorum::validity_ms;
use crate::core::{HttpRequest, Method, RequestId, Target};

/// The clock-drift factor applied to every lease (as the single-node Redis lock).
pub const DRIFT_FACTOR: f64 = 0.01;

/// Largest answer body read (the answers are a few hundred bytes).
pub const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// Largest version believed (JavaScript numbers are exact up to 2^53).
pub const MAX_VERSION: u64 = (1 << 53) - 1;

/// How long a lease of `ttl_ms` is trusted from the send time of the
/// request that established it: `ttl − (ttl × 1% + 2 ms)`, if positive.
pub fn lease_validity(ttl_ms: u64) -> Option<u64> {
    validity_ms(ttl_ms, 0, DRIFT_FACTOR)
}

/// A bound parameter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Param {
    /// TEXT.
    Text(String),
    /// INTEGER.
    Int(u64),
}

impl Param {
    fn to_json(&self) -> Value {
        match self {
            Param::Text(s) => Value::String(s.clone()),
            Param::Int(n) => Value::from(*n),
        }
    }
}

/// `{"statements":[{"sql","params"},…]}`, the table's `CREATE … IF NOT
/// EXISTS` first.
pub fn batch_body(table: &str, statements: &[(String, Vec<Param>)]) -> Vec<u8> {
    let mut list = vec![json!({"sql": sql::create(table), "params": []})];
    for (s, params) in statements {
        let params: Vec<Value> = params.iter().map(Param::to_json).collect();
        list.push(json!({"sql": s, "params": params}));
    }
    serde_json::to_vec(&json!({ "statements": list })).unwrap_or_default()
}

/// The request of a batch to binding `binding`.
pub fn request(id: RequestId, binding: &str, body: Vec<u8>, timeout_ms: u64) -> HttpRequest {
    HttpRequest {
        id,
        method: Method::Post,
        target: Target::Binding {
            name: binding.to_string(),
            path: BATCH_PATH.to_string(),
        },
        headers: vec![("content-type".to_string(), "application/json".to_string())],
        body,
        timeout_ms: Some(timeout_ms),
        stream: false,
    }
}

/// What was wrong with an answer (or the error it was).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnswerError {
    /// The HTTP status, for an answer that was not a 200.
    pub status: Option<u16>,
    /// Never a secret: values are not repeated, D1's message is sanitised.
    pub message: String,
}

impl AnswerError {
    fn malformed(what: &str) -> AnswerError {
        AnswerError {
            status: None,
            message: format!("malformed answer from the d1 binding: {what}"),
        }
    }
}

/// One statement's result.
#[derive(Clone, Debug, PartialEq)]
pub struct StatementResult {
    /// Its rows (objects).
    pub rows: Vec<serde_json::Map<String, Value>>,
    /// Rows it changed.
    pub changes: u64,
}

/// The results of a batch of `expected` statements (the `CREATE` included),
/// or the error the answer is.
pub fn results(
    status: u16,
    body: &[u8],
    expected: usize,
    secrets: &[&str],
) -> Result<Vec<StatementResult>, AnswerError> {
    if body.len() > MAX_ANSWER_BYTES {
        return Err(AnswerError {
            status: Some(status),
            message: format!(
                "the d1 binding's answer is {} bytes, more than the {MAX_ANSWER_BYTES} accepted",
                body.len()
            ),
        });
    }
    if status != 200 {
        let detail = serde_json::from_slice::<Value>(body).ok().and_then(|v| {
            v.get("error")
                .and_then(Value::as_str)
                .map(|m| sanitize_detail(m, secrets))
        });
        let message = match detail {
            Some(d) => format!("the d1 batch failed ({d})"),
            None => "the d1 batch failed".to_string(),
        };
        return Err(AnswerError {
            status: Some(status),
            message,
        });
    }
    let v: Value = serde_json::from_slice(body).map_err(|_| AnswerError::malformed("not JSON"))?;
    let list = v
        .get("results")
        .and_then(Value::as_array)
        .ok_or_else(|| AnswerError::malformed("`results` is missing or not an array"))?;
    if list.len() != expected {
        return Err(AnswerError::malformed(&format!(
            "{} results for a batch of {expected} statements",
            list.len()
        )));
    }
    let mut out = Vec::with_capacity(expected);
    for r in list {
        let rows = r.get("rows").and_then(Value::as_array).ok_or_else(|| {
            AnswerError::malformed("a result's `rows` is missing or not an array")
        })?;
        let rows = rows
            .iter()
            .map(|row| {
                row.as_object()
                    .cloned()
                    .ok_or_else(|| AnswerError::malformed("a row is not an object"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let changes = r
            .get("changes")
            .and_then(Value::as_u64)
            .filter(|n| *n <= MAX_VERSION)
            .ok_or_else(|| {
                AnswerError::malformed("a result's `changes` is missing or not a whole number")
            })?;
        out.push(StatementResult { rows, changes });
    }
    Ok(out)
}

type Row = serde_json::Map<String, Value>;

/// At most one row (the statements select by primary key).
fn single(r: &StatementResult) -> Result<Option<&Row>, AnswerError> {
    match r.rows.as_slice() {
        [] => Ok(None),
        [row] => Ok(Some(row)),
        _ => Err(AnswerError::malformed(
            "more than one row for one lock name",
        )),
    }
}

/// 0 or 1 changes (one row at most).
fn changed(r: &StatementResult) -> Result<bool, AnswerError> {
    match r.changes {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(AnswerError::malformed(
            "more than one row changed for one lock name",
        )),
    }
}

fn version(row: &Row) -> Result<u64, AnswerError> {
    row.get("version")
        .and_then(Value::as_u64)
        .filter(|n| (1..=MAX_VERSION).contains(n))
        .ok_or_else(|| {
            AnswerError::malformed("`version` is missing or not a positive whole number")
        })
}

/// A remaining lease: null, or a whole number of ms (a negative one is 0).
fn pttl(row: &Row) -> Result<Option<u64>, AnswerError> {
    match row.get("pttl") {
        None | Some(Value::Null) => Ok(None),
        Some(v) => {
            if let Some(n) = v.as_u64().filter(|n| *n <= MAX_TTL_MS) {
                Ok(Some(n))
            } else if v.as_i64().is_some_and(|n| n <= 0) {
                Ok(Some(0))
            } else {
                Err(AnswerError::malformed(&format!(
                    "`pttl` is not a whole number of ms in 0..={MAX_TTL_MS}"
                )))
            }
        }
    }
}

/// The acquire batch's verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AcquireAnswer {
    /// Ours: the version (the fencing token) and the remaining lease.
    Granted {
        /// The row's version.
        token: u64,
        /// The remaining lease in ms.
        pttl_ms: u64,
    },
    /// Someone else's: their remaining lease, if the row says.
    Busy {
        /// The holder's remaining ms.
        pttl_ms: Option<u64>,
    },
}

/// Reads the acquire batch (create, take, probe).
pub fn parse_acquire(
    status: u16,
    body: &[u8],
    secrets: &[&str],
) -> Result<AcquireAnswer, AnswerError> {
    let r = results(status, body, 3, secrets)?;
    changed(&r[1])?;
    let row = single(&r[2])?.ok_or_else(|| AnswerError::malformed("the lock's row is missing"))?;
    let token = version(row)?;
    let pttl_ms = pttl(row)?;
    let mine = match row.get("mine").and_then(Value::as_u64) {
        Some(0) => false,
        Some(1) => true,
        _ => return Err(AnswerError::malformed("`mine` is missing or not 0 or 1")),
    };
    match (mine, pttl_ms) {
        (true, Some(p)) if p > 0 => Ok(AcquireAnswer::Granted { token, pttl_ms: p }),
        (true, _) => Err(AnswerError::malformed("a grant without a remaining lease")),
        (false, p) => Ok(AcquireAnswer::Busy { pttl_ms: p }),
    }
}

/// Reads a release (or leave) batch: whether the row was ours until then.
pub fn parse_release(status: u16, body: &[u8], secrets: &[&str]) -> Result<bool, AnswerError> {
    changed(&results(status, body, 2, secrets)?[1])
}

/// Reads an extend batch: whether the lease was extended.
pub fn parse_extend(status: u16, body: &[u8], secrets: &[&str]) -> Result<bool, AnswerError> {
    changed(&results(status, body, 2, secrets)?[1])
}

/// Reads a resume batch: the remaining lease, or `None` (not held).
pub fn parse_resume(
    status: u16,
    body: &[u8],
    secrets: &[&str],
) -> Result<Option<u64>, AnswerError> {
    let r = results(status, body, 2, secrets)?;
    match single(&r[1])? {
        None => Ok(None),
        Some(row) => match pttl(row)? {
            Some(p) if p > 0 => Ok(Some(p)),
            _ => Ok(None),
        },
    }
}

/// The inspect batch's view: the row's version (if any) and the holder's
/// remaining ms (if held).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InspectAnswer {
    /// The last grant's version.
    pub version: Option<u64>,
    /// The holder's remaining lease, if held.
    pub pttl_ms: Option<u64>,
}

/// Reads an inspect batch.
pub fn parse_inspect(
    status: u16,
    body: &[u8],
    secrets: &[&str],
) -> Result<InspectAnswer, AnswerError> {
    let r = results(status, body, 2, secrets)?;
    match single(&r[1])? {
        None => Ok(InspectAnswer {
            version: None,
            pttl_ms: None,
        }),
        Some(row) => Ok(InspectAnswer {
            version: Some(version(row)?),
            pttl_ms: pttl(row)?.filter(|p| *p > 0),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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
        fn arbitrary_json_never_panics(s in "[\\[\\]{}\",:0-9a-z\\-. ]{0,120}") {
            for status in [200u16, 500] {
                let _ = parse_acquire(status, s.as_bytes(), &[]);
                let _ = parse_inspect(status, s.as_bytes(), &[]);
                let _ = parse_resume(status, s.as_bytes(), &[]);
            }
        }
    }

    #[test]
    fn errors_never_repeat_the_owner() {
        let e = parse_release(
            500,
            br#"{"error":"D1_ERROR: owner abcdef0123456789 bad"}"#,
            &["abcdef0123456789"],
        )
        .unwrap_err();
        assert!(!e.message.contains("abcdef0123456789"), "{}", e.message);
        assert_eq!(e.status, Some(500));
    }
}
