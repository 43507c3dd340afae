//! The Upstash REST protocol (how edge functions reach Redis over HTTP).
//!
//! - One command: `POST <base>` with a JSON array of strings as the body,
//!   `Authorization: Bearer <token>`; the answer is `{"result": …}` or
//!   `{"error": "ERR …"}` (HTTP 400 for a Redis error, 401 for a bad token).
//! - A pipeline: `POST <base>/pipeline` with `[[…],[…]]`; the answer is one
//!   `{"result"}`/`{"error"}` object per command, HTTP 200 even when some
//!   commands failed. Not atomic: edgelock's operations are single Lua
//!   scripts, so the machines never need more than one command per node and
//!   round; the pipeline codec is here for tools and future use.
//! - Like the official `@upstash/redis` client we send
//!   `Upstash-Encoding: base64`: every string in the result then arrives as
//!   base64 of its bytes, except the status reply `OK`. That makes replies
//!   binary-safe. Requests are JSON strings and therefore UTF-8 only: an
//!   argument that is not valid UTF-8 is refused before anything is sent.
//!   (Lock keys are built from a `&str` name and prefix, so they always are.)
//!
//! Keys never appear in the URL.

use serde_json::Value;

use super::value::{RedisCommand, RedisValue, ReplyError};
use crate::core::LockError;

/// The header asking for base64-encoded result strings.
pub const ENCODING_HEADER: (&str, &str) = ("Upstash-Encoding", "base64");

fn args_json(cmd: &RedisCommand) -> Result<Vec<Value>, LockError> {
    if cmd.args.is_empty() {
        return Err(LockError::invalid("an Upstash command needs a name"));
    }
    cmd.args
        .iter()
        .enumerate()
        .map(|(i, a)| {
            std::str::from_utf8(a).map(|s| Value::String(s.to_string())).map_err(|_| {
                LockError::invalid(format!(
                    "argument {i} of {} is not valid UTF-8; the Upstash REST protocol carries arguments as JSON strings",
                    String::from_utf8_lossy(cmd.name())
                ))
            })
        })
        .collect()
}

/// The JSON body of a single-command request (`POST <base>`).
pub fn encode_command(cmd: &RedisCommand) -> Result<Vec<u8>, LockError> {
    let args = args_json(cmd)?;
    serde_json::to_vec(&Value::Array(args))
        .map_err(|e| LockError::invalid(format!("cannot encode command: {e}")))
}

/// The JSON body of a pipeline request (`POST <base>/pipeline`).
pub fn encode_pipeline(cmds: &[RedisCommand]) -> Result<Vec<u8>, LockError> {
    if cmds.is_empty() {
        return Err(LockError::invalid("an empty pipeline"));
    }
    let all = cmds
        .iter()
        .map(|c| args_json(c).map(Value::Array))
        .collect::<Result<Vec<_>, _>>()?;
    serde_json::to_vec(&Value::Array(all))
        .map_err(|e| LockError::invalid(format!("cannot encode pipeline: {e}")))
}

fn bad(status: u16, what: impl Into<String>) -> ReplyError {
    ReplyError {
        status: if (200..300).contains(&status) {
            None
        } else {
            Some(status)
        },
        message: what.into(),
    }
}

/// Backend text, kept whole: the node codec redacts the credential and
/// then cuts (`NodeCodec::decode`).
fn text(s: &str) -> String {
    crate::core::error::clean_control(s)
}

/// A result string: base64 of the bytes (except the status `OK`) when
/// `base64` is on. Like the official client, a string that does not decode
/// is taken as it is (a server that ignores the header).
fn string_value(s: &str, base64: bool) -> RedisValue {
    if base64 && s != "OK" {
        if let Some(bytes) = crate::core::b64::decode(s.as_bytes()) {
            return RedisValue::Bulk(bytes);
        }
    }
    RedisValue::Bulk(s.as_bytes().to_vec())
}

/// Converts a JSON `result` to a value. Depth is bounded by serde_json's
/// own recursion limit.
pub fn value_from_json(v: &Value, base64: bool) -> Result<RedisValue, String> {
    match v {
        Value::Null => Ok(RedisValue::Nil),
        Value::Number(n) => n
            .as_i64()
            .map(RedisValue::Int)
            .ok_or_else(|| format!("number {n} is not a 64-bit integer")),
        Value::String(s) => Ok(string_value(s, base64)),
        Value::Array(items) => items
            .iter()
            .map(|i| value_from_json(i, base64))
            .collect::<Result<_, _>>()
            .map(RedisValue::Array),
        Value::Bool(_) => Err("unexpected boolean in result".into()),
        Value::Object(_) => Err("unexpected object in result".into()),
    }
}

/// `{"result": v}` or `{"error": "…"}` → value (an `error` becomes `RedisValue::Error`).
fn reply_object(v: &Value, status: u16, base64: bool) -> Result<RedisValue, ReplyError> {
    let Value::Object(map) = v else {
        return Err(bad(status, "reply is not a JSON object"));
    };
    match (map.get("result"), map.get("error")) {
        (_, Some(Value::String(e))) => Ok(RedisValue::Error(text(e))),
        (Some(r), None) => value_from_json(r, base64).map_err(|m| bad(status, m)),
        _ => Err(bad(status, "reply has neither \"result\" nor \"error\"")),
    }
}

/// Whether an HTTP status with an `{"error"}` body is a Redis-level error
/// (the command ran and Redis refused it) rather than an HTTP-level refusal.
fn is_command_status(status: u16) -> bool {
    (200..300).contains(&status) || status == 400
}

/// Decodes the answer to [`encode_command`].
pub fn decode_reply(status: u16, body: &[u8], base64: bool) -> Result<RedisValue, ReplyError> {
    let parsed: Result<Value, _> = serde_json::from_slice(body);
    match parsed {
        Ok(v) if is_command_status(status) => reply_object(&v, status, base64),
        Ok(Value::Object(map)) => {
            let msg = map
                .get("error")
                .and_then(Value::as_str)
                .map(text)
                .unwrap_or_else(|| "unexpected reply".into());
            Err(ReplyError {
                status: Some(status),
                message: msg,
            })
        }
        _ if !is_command_status(status) => Err(ReplyError {
            status: Some(status),
            message: text(&String::from_utf8_lossy(body)),
        }),
        _ => Err(bad(status, "reply is not JSON")),
    }
}

/// Decodes the answer to [`encode_pipeline`] with `expected` commands.
pub fn decode_pipeline(
    status: u16,
    body: &[u8],
    expected: usize,
    base64: bool,
) -> Result<Vec<RedisValue>, ReplyError> {
    if !(200..300).contains(&status) {
        // A refused pipeline (auth, malformed) has the single-command shape.
        return match decode_reply(status, body, base64) {
            Ok(RedisValue::Error(e)) => Err(ReplyError {
                status: Some(status),
                message: e,
            }),
            Ok(_) => Err(ReplyError {
                status: Some(status),
                message: "unexpected reply".into(),
            }),
            Err(e) => Err(e),
        };
    }
    let v: Value =
        serde_json::from_slice(body).map_err(|_| bad(status, "pipeline reply is not JSON"))?;
    let Value::Array(items) = v else {
        return Err(bad(status, "pipeline reply is not an array"));
    };
    if items.len() != expected {
        return Err(bad(
            status,
            format!(
                "pipeline reply has {} entries for {expected} commands",
                items.len()
            ),
        ));
    }
    items
        .iter()
        .map(|i| reply_object(i, status, base64))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn b64(b: &[u8]) -> String {
        crate::core::b64::encode(b)
    }

    #[test]
    fn encodes_a_json_array() {
        let cmd = RedisCommand::new("SET").arg("a\"b/é").arg("1");
        assert_eq!(
            encode_command(&cmd).unwrap(),
            r#"["SET","a\"b/é","1"]"#.as_bytes().to_vec()
        );
        let p = encode_pipeline(&[
            RedisCommand::new("GET").arg("k"),
            RedisCommand::new("PTTL").arg("k"),
        ])
        .unwrap();
        assert_eq!(p, br#"[["GET","k"],["PTTL","k"]]"#.to_vec());
    }

    #[test]
    fn refuses_non_utf8_arguments() {
        let err = encode_command(&RedisCommand::new("GET").arg([0xff, 0xfe])).unwrap_err();
        assert_eq!(err.code(), "INVALID_ARGUMENT");
        assert!(err.to_string().contains("UTF-8"), "{err}");
        assert!(encode_pipeline(&[]).is_err());
    }

    #[test]
    fn decodes_replies() {
        assert_eq!(
            decode_reply(200, br#"{"result":5}"#, true),
            Ok(RedisValue::Int(5))
        );
        assert_eq!(
            decode_reply(200, br#"{"result":null}"#, true),
            Ok(RedisValue::Nil)
        );
        assert_eq!(
            decode_reply(200, br#"{"result":"OK"}"#, true),
            Ok(RedisValue::Bulk(b"OK".to_vec()))
        );
        let s = format!(r#"{{"result":["{}",1,null]}}"#, b64(&[0, 255, b'x']));
        assert_eq!(
            decode_reply(200, s.as_bytes(), true),
            Ok(RedisValue::Array(vec![
                RedisValue::Bulk(vec![0, 255, b'x']),
                RedisValue::Int(1),
                RedisValue::Nil
            ]))
        );
        assert_eq!(
            decode_reply(200, br#"{"result":"abc"}"#, false),
            Ok(RedisValue::Bulk(b"abc".to_vec()))
        );
        assert_eq!(
            decode_reply(400, br#"{"error":"ERR boom"}"#, true),
            Ok(RedisValue::Error("ERR boom".into()))
        );
        let e = decode_reply(401, br#"{"error":"Unauthorized"}"#, true).unwrap_err();
        assert_eq!(e.status, Some(401));
        assert_eq!(e.message, "Unauthorized");
        assert_eq!(
            decode_reply(502, b"<html>bad gateway</html>", true)
                .unwrap_err()
                .status,
            Some(502)
        );
        assert!(decode_reply(200, b"not json", true).is_err());
        assert!(decode_reply(200, br#"{"result":1.5}"#, true).is_err());
        assert!(decode_reply(200, br#"{"result":true}"#, true).is_err());
        assert!(decode_reply(200, br#"[1]"#, true).is_err());
        assert!(decode_reply(200, br#"{}"#, true).is_err());
    }

    #[test]
    fn decodes_pipelines() {
        let body = format!(
            r#"[{{"result":"{}"}},{{"error":"ERR x"}},{{"result":7}}]"#,
            b64(b"v")
        );
        assert_eq!(
            decode_pipeline(200, body.as_bytes(), 3, true),
            Ok(vec![
                RedisValue::Bulk(b"v".to_vec()),
                RedisValue::Error("ERR x".into()),
                RedisValue::Int(7)
            ])
        );
        assert!(decode_pipeline(200, body.as_bytes(), 2, true).is_err());
        assert_eq!(
            decode_pipeline(401, br#"{"error":"Unauthorized"}"#, 1, true)
                .unwrap_err()
                .status,
            Some(401)
        );
    }

    fn json_for(v: &RedisValue) -> Value {
        match v {
            RedisValue::Nil => Value::Null,
            RedisValue::Int(i) => Value::from(*i),
            RedisValue::Bulk(b) => Value::String(b64(b)),
            RedisValue::Array(items) => Value::Array(items.iter().map(json_for).collect()),
            RedisValue::Error(e) => Value::String(e.clone()),
        }
    }

    fn arb_value() -> impl Strategy<Value = RedisValue> {
        let leaf = prop_oneof![
            Just(RedisValue::Nil),
            any::<i64>().prop_map(RedisValue::Int),
            proptest::collection::vec(any::<u8>(), 0..20).prop_map(RedisValue::Bulk),
        ];
        leaf.prop_recursive(3, 20, 5, |inner| {
            proptest::collection::vec(inner, 0..5).prop_map(RedisValue::Array)
        })
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(status in 100u16..600, body in proptest::collection::vec(any::<u8>(), 0..200), b in any::<bool>()) {
            let _ = decode_reply(status, &body, b);
            let _ = decode_pipeline(status, &body, 2, b);
        }

        #[test]
        fn arbitrary_json_never_panics(s in "[\\[\\]{}\",:0-9a-z\\- ]{0,60}") {
            let _ = decode_reply(200, s.as_bytes(), true);
            let _ = decode_pipeline(200, s.as_bytes(), 1, false);
        }

        #[test]
        fn results_round_trip(v in arb_value()) {
            // "OK" is the one string the protocol leaves unencoded; base64 of
            // anything is never "OK", so every value survives.
            let body = serde_json::to_vec(&serde_json::json!({ "result": json_for(&v) })).unwrap();
            prop_assert_eq!(decode_reply(200, &body, true), Ok(v));
        }

        #[test]
        fn utf8_commands_round_trip(args in proptest::collection::vec(".{0,12}", 1..6)) {
            let mut cmd = RedisCommand { args: args.iter().map(|a| a.as_bytes().to_vec()).collect() };
            cmd.args[0] = b"EVAL".to_vec();
            let body = encode_command(&cmd).unwrap();
            let back: Vec<String> = serde_json::from_slice(&body).unwrap();
            prop_assert_eq!(back.into_iter().map(String::into_bytes).collect::<Vec<_>>(), cmd.args);
        }
    }
}
