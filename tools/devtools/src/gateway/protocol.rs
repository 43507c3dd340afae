//! The Upstash REST protocol subset: request routing, JSON <-> RESP.

use serde_json::{json, Value};

use super::pool::{PoolError, RedisPool};
use crate::base64;
use crate::http1::header;
use crate::resp::RespValue;

/// A parsed HTTP request as the protocol layer sees it.
pub struct Request<'a> {
    pub method: &'a str,
    /// Raw (still percent-encoded) path, without the query.
    pub path: &'a str,
    pub query: Option<&'a str>,
    pub headers: &'a [(String, String)],
    pub body: &'a [u8],
}

/// What to send back.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Vec<u8>,
    pub extra_headers: Vec<(&'static str, String)>,
    /// Number of Redis commands this request ran (for request-counting tests).
    pub commands: u64,
}

impl Reply {
    pub fn json(status: u16, v: &Value) -> Reply {
        Reply {
            status,
            content_type: "application/json",
            body: serde_json::to_vec(v).unwrap_or_else(|_| b"{}".to_vec()),
            extra_headers: Vec::new(),
            commands: 0,
        }
    }

    pub fn error(status: u16, msg: &str) -> Reply {
        Reply::json(status, &json!({ "error": msg }))
    }

    fn with_commands(mut self, n: u64) -> Reply {
        self.commands = n;
        self
    }
}

/// Request headers a browser may send; answered in every preflight.
/// `@upstash/redis` 1.39 sends Authorization, Content-Type, Upstash-Encoding,
/// upstash-sync-token and the Upstash-Telemetry-* headers.
pub const ALLOWED_HEADERS: &str = "Authorization, Content-Type, Upstash-Encoding, Upstash-Response-Format, \
     Upstash-Sync-Token, Upstash-Telemetry-Runtime, Upstash-Telemetry-Platform, Upstash-Telemetry-Sdk, \
     Upstash-Telemetry-Retry";

/// CORS preflight answer. Headers the browser asks for are echoed as well
/// (when they look like header names) so future client headers keep working.
pub fn preflight(headers: &[(String, String)]) -> Reply {
    let mut allow = ALLOWED_HEADERS.to_string();
    if let Some(req) = header(headers, "access-control-request-headers") {
        let ok = req.len() <= 2048
            && req
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b',' | b' '));
        if ok && !req.trim().is_empty() {
            allow = format!("{allow}, {req}");
        }
    }
    Reply {
        status: 204,
        content_type: "text/plain",
        body: Vec::new(),
        extra_headers: vec![
            (
                "Access-Control-Allow-Methods",
                "GET, HEAD, POST, PUT, OPTIONS".to_string(),
            ),
            ("Access-Control-Allow-Headers", allow),
            ("Access-Control-Max-Age", "86400".to_string()),
        ],
        commands: 0,
    }
}

/// Commands that would change the state of a pooled connection (or block
/// it); Upstash's REST API does not offer them either.
const FORBIDDEN: &[&str] = &[
    "MULTI",
    "EXEC",
    "DISCARD",
    "WATCH",
    "UNWATCH",
    "SELECT",
    "SUBSCRIBE",
    "PSUBSCRIBE",
    "SSUBSCRIBE",
    "UNSUBSCRIBE",
    "PUNSUBSCRIBE",
    "SUNSUBSCRIBE",
    "MONITOR",
    "QUIT",
    "RESET",
    "HELLO",
    "AUTH",
    "CLIENT",
    "SYNC",
    "PSYNC",
    "REPLCONF",
    "READONLY",
    "READWRITE",
    "BLPOP",
    "BRPOP",
    "BRPOPLPUSH",
    "BLMOVE",
    "BLMPOP",
    "BZPOPMIN",
    "BZPOPMAX",
    "BZMPOP",
];

fn forbidden(cmd: &[Vec<u8>]) -> Option<String> {
    let name = String::from_utf8_lossy(cmd.first()?).to_ascii_uppercase();
    FORBIDDEN
        .contains(&name.as_str())
        .then(|| format!("ERR Command is not allowed: {name}"))
}

/// Percent-decodes to bytes; malformed escapes are kept literally.
pub fn percent_decode(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = |c: u8| (c as char).to_digit(16);
            if let (Some(h), Some(l)) = (
                b.get(i + 1).and_then(|c| hex(*c)),
                b.get(i + 2).and_then(|c| hex(*c)),
            ) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

/// `a=1&b&c=` → [(a,1),(b,""),(c,"")], percent-decoded.
pub fn parse_query(q: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (percent_decode(k), percent_decode(v)),
            None => (percent_decode(p), Vec::new()),
        })
        .collect()
}

/// The bearer token of a request (header first, then `?_token=`).
pub fn request_token(
    headers: &[(String, String)],
    query: &[(Vec<u8>, Vec<u8>)],
) -> Option<Vec<u8>> {
    if let Some(auth) = header(headers, "authorization") {
        let mut parts = auth.splitn(2, ' ');
        if let (Some(scheme), Some(tok)) = (parts.next(), parts.next()) {
            if scheme.eq_ignore_ascii_case("bearer") {
                return Some(tok.trim().as_bytes().to_vec());
            }
        }
    }
    query
        .iter()
        .find(|(k, _)| k == b"_token")
        .map(|(_, v)| v.clone())
}

/// Comparison whose time does not depend on where the inputs differ.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// One JSON command array → argument bytes. Strings are sent as their UTF-8
/// bytes, numbers and booleans in their JSON text form.
pub fn json_command(v: &Value) -> Result<Vec<Vec<u8>>, String> {
    let arr = v.as_array().ok_or("ERR command must be a JSON array")?;
    if arr.is_empty() {
        return Err("ERR empty command".into());
    }
    arr.iter()
        .enumerate()
        .map(|(i, a)| match a {
            Value::String(s) => Ok(s.as_bytes().to_vec()),
            Value::Number(n) => Ok(n.to_string().into_bytes()),
            Value::Bool(b) => Ok(b.to_string().into_bytes()),
            _ => Err(format!(
                "ERR invalid argument at index {i}: must be a string, number or boolean"
            )),
        })
        .collect()
}

/// A body holding a JSON array of command arrays.
pub fn json_commands(body: &[u8]) -> Result<Vec<Vec<Vec<u8>>>, String> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| format!("ERR failed to parse request body: {e}"))?;
    let arr = v
        .as_array()
        .ok_or("ERR request body must be a JSON array of commands")?;
    if arr.is_empty() {
        return Err("ERR no commands given".into());
    }
    arr.iter().map(json_command).collect()
}

/// RESP → JSON as Upstash renders it. With `base64`, every string except a
/// status `OK` is base64 of its bytes; without, bytes that are not UTF-8
/// become U+FFFD (JSON strings cannot carry arbitrary bytes).
pub fn to_json(v: &RespValue, base64: bool) -> Value {
    match v {
        RespValue::Simple(s) if base64 && s != "OK" => Value::String(base64::encode(s.as_bytes())),
        RespValue::Simple(s) => Value::String(s.clone()),
        RespValue::Error(e) => Value::String(e.clone()),
        RespValue::Integer(i) => json!(i),
        RespValue::Bulk(b) if base64 => Value::String(base64::encode(b)),
        RespValue::Bulk(b) => Value::String(String::from_utf8_lossy(b).into_owned()),
        RespValue::Nil => Value::Null,
        RespValue::Array(items) => Value::Array(items.iter().map(|i| to_json(i, base64)).collect()),
    }
}

fn entry(v: &RespValue, base64: bool) -> Value {
    match v {
        RespValue::Error(e) => json!({ "error": e }),
        other => json!({ "result": to_json(other, base64) }),
    }
}

fn pool_error(e: PoolError) -> Reply {
    match e {
        PoolError::Timeout => Reply::error(504, "ERR redis did not answer in time"),
        PoolError::Unavailable(e) => Reply::error(503, &format!("ERR redis unavailable: {e}")),
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Format {
    Json { base64: bool },
    Resp2,
}

fn response_format(headers: &[(String, String)]) -> Result<Format, Reply> {
    let base64 = header(headers, "upstash-encoding")
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("base64"));
    match header(headers, "upstash-response-format").map(str::trim) {
        None => Ok(Format::Json { base64 }),
        Some(f) if f.eq_ignore_ascii_case("json") => Ok(Format::Json { base64 }),
        Some(f) if f.eq_ignore_ascii_case("resp2") && !base64 => Ok(Format::Resp2),
        Some(f) if f.eq_ignore_ascii_case("resp2") => Err(Reply::error(
            400,
            "ERR Upstash-Encoding base64 cannot be combined with resp2",
        )),
        Some(_) => Err(Reply::error(400, "ERR unsupported Upstash-Response-Format")),
    }
}

fn resp2_reply(status: u16, values: &[RespValue]) -> Reply {
    let mut body = Vec::new();
    for v in values {
        v.encode(&mut body);
    }
    Reply {
        status,
        content_type: "application/octet-stream",
        body,
        extra_headers: Vec::new(),
        commands: 0,
    }
}

/// Handles one authenticated, non-OPTIONS request.
pub fn handle(pool: &RedisPool, req: &Request<'_>) -> Reply {
    if !matches!(req.method, "GET" | "HEAD" | "POST" | "PUT") {
        return Reply::error(405, "ERR method not allowed");
    }
    let format = match response_format(req.headers) {
        Ok(f) => f,
        Err(r) => return r,
    };
    match req.path {
        "/" | "" => {
            if req.body.is_empty() {
                return Reply::error(
                    400,
                    "ERR no command given: POST a JSON array or use /command/arg/...",
                );
            }
            let cmd = match serde_json::from_slice::<Value>(req.body)
                .map_err(|e| format!("ERR failed to parse request body: {e}"))
                .and_then(|v| json_command(&v))
            {
                Ok(c) => c,
                Err(e) => return Reply::error(400, &e),
            };
            single(pool, cmd, format)
        }
        "/pipeline" => match json_commands(req.body) {
            Ok(cmds) => pipeline(pool, cmds, format),
            Err(e) => Reply::error(400, &e),
        },
        "/multi-exec" => match (json_commands(req.body), format) {
            (_, Format::Resp2) => {
                Reply::error(400, "ERR resp2 format is not available for /multi-exec")
            }
            (Ok(cmds), Format::Json { base64 }) => multi_exec(pool, cmds, base64),
            (Err(e), _) => Reply::error(400, &e),
        },
        // `/subscribe` and `/psubscribe` never get here (see `super::subscribe`).
        p if p == "/monitor" || p.starts_with("/monitor/") => {
            Reply::error(400, "ERR /monitor is not supported by this gateway")
        }
        p => {
            let mut segments: Vec<&str> = p.trim_start_matches('/').split('/').collect();
            if segments.len() > 1 && segments.last() == Some(&"") {
                segments.pop();
            }
            let mut cmd: Vec<Vec<u8>> = segments.iter().map(|s| percent_decode(s)).collect();
            if matches!(req.method, "POST" | "PUT") && !req.body.is_empty() {
                cmd.push(req.body.to_vec());
            }
            for (k, v) in parse_query(req.query.unwrap_or("")) {
                if k != b"_token" {
                    cmd.push(k);
                    if !v.is_empty() {
                        cmd.push(v);
                    }
                }
            }
            single(pool, cmd, format)
        }
    }
}

fn single(pool: &RedisPool, cmd: Vec<Vec<u8>>, format: Format) -> Reply {
    if let Some(e) = forbidden(&cmd) {
        return Reply::error(400, &e);
    }
    let v = match pool.run(|c| c.command(&cmd)) {
        Ok(v) => v,
        Err(e) => return pool_error(e),
    };
    let status = if v.is_error() { 400 } else { 200 };
    match (format, &v) {
        (Format::Resp2, _) => resp2_reply(status, std::slice::from_ref(&v)),
        (Format::Json { .. }, RespValue::Error(e)) => Reply::error(400, e),
        (Format::Json { base64 }, _) => Reply::json(200, &json!({ "result": to_json(&v, base64) })),
    }
    .with_commands(1)
}

fn pipeline(pool: &RedisPool, cmds: Vec<Vec<Vec<u8>>>, format: Format) -> Reply {
    let refused: Vec<Option<String>> = cmds.iter().map(|c| forbidden(c)).collect();
    let to_send: Vec<Vec<Vec<u8>>> = cmds
        .iter()
        .zip(&refused)
        .filter(|(_, r)| r.is_none())
        .map(|(c, _)| c.clone())
        .collect();
    let sent = to_send.len() as u64;
    let replies = if to_send.is_empty() {
        Vec::new()
    } else {
        match pool.run(|c| c.pipeline(&to_send)) {
            Ok(r) => r,
            Err(e) => return pool_error(e),
        }
    };
    let mut replies = replies.into_iter();
    let all: Vec<RespValue> = refused
        .into_iter()
        .map(|r| match r {
            Some(e) => RespValue::Error(e),
            None => replies
                .next()
                .unwrap_or(RespValue::Error("ERR missing reply".into())),
        })
        .collect();
    match format {
        Format::Resp2 => resp2_reply(200, &all),
        Format::Json { base64 } => Reply::json(
            200,
            &Value::Array(all.iter().map(|v| entry(v, base64)).collect()),
        ),
    }
    .with_commands(sent)
}

fn multi_exec(pool: &RedisPool, cmds: Vec<Vec<Vec<u8>>>, base64: bool) -> Reply {
    if let Some(e) = cmds.iter().find_map(|c| forbidden(c)) {
        return Reply::error(400, &e);
    }
    let n = cmds.len();
    let mut wire: Vec<Vec<Vec<u8>>> = Vec::with_capacity(n + 2);
    wire.push(vec![b"MULTI".to_vec()]);
    wire.extend(cmds);
    wire.push(vec![b"EXEC".to_vec()]);
    let replies = match pool.run(|c| c.pipeline(&wire)) {
        Ok(r) => r,
        Err(e) => return pool_error(e),
    };
    // A command refused while queueing (syntax, unknown command) discards
    // the whole transaction: one error, like Upstash.
    if let Some(RespValue::Error(e)) = replies
        .get(1..=n)
        .and_then(|q| q.iter().find(|r| r.is_error()))
    {
        return Reply::error(400, e).with_commands(n as u64);
    }
    match replies.last() {
        Some(RespValue::Array(results)) => Reply::json(
            200,
            &Value::Array(results.iter().map(|v| entry(v, base64)).collect()),
        ),
        Some(RespValue::Error(e)) => Reply::error(400, e),
        _ => Reply::error(400, "ERR transaction aborted"),
    }
    .with_commands(n as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_decoding_is_byte_exact_and_lenient() {
        assert_eq!(percent_decode("a%2Fb%00%ff%C3%A9"), b"a/b\x00\xff\xc3\xa9");
        assert_eq!(percent_decode("%"), b"%");
        assert_eq!(percent_decode("%4"), b"%4");
        assert_eq!(percent_decode("%zz1"), b"%zz1");
        assert_eq!(percent_decode("a+b"), b"a+b");
        assert_eq!(
            parse_query("EX=100&NX&_token=t%2B&"),
            vec![
                (b"EX".to_vec(), b"100".to_vec()),
                (b"NX".to_vec(), vec![]),
                (b"_token".to_vec(), b"t+".to_vec()),
            ]
        );
    }

    #[test]
    fn json_commands_accept_strings_numbers_booleans_only() {
        let cmd = json_command(&json!(["SET", "k", 12, 1.5, true, "é"])).unwrap();
        assert_eq!(
            cmd,
            vec![
                b"SET".to_vec(),
                b"k".to_vec(),
                b"12".to_vec(),
                b"1.5".to_vec(),
                b"true".to_vec(),
                "é".as_bytes().to_vec()
            ]
        );
        assert!(json_command(&json!(["SET", null])).is_err());
        assert!(json_command(&json!(["SET", {"a": 1}])).is_err());
        assert!(json_command(&json!([])).is_err());
        assert!(json_command(&json!("SET")).is_err());
        assert!(json_commands(b"[]").is_err());
        assert!(json_commands(b"[[\"PING\"], 1]").is_err());
        assert!(json_commands(b"[[\"PING\"]").is_err());
        assert_eq!(
            json_commands(b"[[\"PING\"],[\"GET\",\"k\"]]")
                .unwrap()
                .len(),
            2
        );
    }

    #[test]
    fn resp_to_json_matches_upstash_encoding_rules() {
        let v = RespValue::Array(vec![
            RespValue::Simple("OK".into()),
            RespValue::Simple("PONG".into()),
            RespValue::Bulk(b"bar".to_vec()),
            RespValue::Bulk(vec![0xff, b'a']),
            RespValue::Integer(-3),
            RespValue::Nil,
        ]);
        assert_eq!(
            to_json(&v, true),
            json!(["OK", "UE9ORw==", "YmFy", "/2E=", -3, null])
        );
        assert_eq!(
            to_json(&v, false),
            json!(["OK", "PONG", "bar", "\u{fffd}a", -3, null])
        );
        assert_eq!(
            to_json(&RespValue::Bulk(b"OK".to_vec()), true),
            json!("T0s=")
        );
    }

    #[test]
    fn tokens_from_header_or_query_and_compared_exactly() {
        let h = vec![("authorization".to_string(), "Bearer s3cret".to_string())];
        assert_eq!(request_token(&h, &[]), Some(b"s3cret".to_vec()));
        let q = parse_query("_token=abc");
        assert_eq!(request_token(&[], &q), Some(b"abc".to_vec()));
        let basic = vec![("Authorization".to_string(), "Basic abc".to_string())];
        assert_eq!(request_token(&basic, &[]), None);
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
    }

    #[test]
    fn preflight_lists_client_headers_and_echoes_only_sane_requests() {
        let r = preflight(&[(
            "Access-Control-Request-Headers".into(),
            "x-custom, upstash-sync-token".into(),
        )]);
        let allow = &r
            .extra_headers
            .iter()
            .find(|(k, _)| *k == "Access-Control-Allow-Headers")
            .unwrap()
            .1;
        assert!(
            allow.contains("Authorization")
                && allow.contains("Upstash-Encoding")
                && allow.contains("x-custom")
        );
        let r = preflight(&[(
            "Access-Control-Request-Headers".into(),
            "x\r\nSet-Cookie: a".into(),
        )]);
        let allow = &r
            .extra_headers
            .iter()
            .find(|(k, _)| *k == "Access-Control-Allow-Headers")
            .unwrap()
            .1;
        assert!(!allow.contains("Set-Cookie"));
    }
}
