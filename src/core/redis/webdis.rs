//! Webdis (Debian's `webdis` 0.1.9): Redis commands over plain HTTP.
//!
//! # Request encoding
//!
//! Every command is `POST <base>/` with the body `NAME/arg1/arg2/…`, each
//! argument percent-encoded: every byte except ASCII letters, digits, `-`,
//! `_` and `~` becomes `%XX` (uppercase hex). Keys are therefore never part
//! of a URL, and webdis' special characters cannot act:
//!
//! - `/` separates arguments (webdis splits *before* decoding, so `%2F`
//!   stays inside one argument);
//! - `.` in the last segment selects an output format (`x.raw` would switch
//!   to RESP output): encoded as `%2E` it is never seen;
//! - `?` starts a query and `+` decodes to a space: both encoded;
//! - `%` itself, CR/LF, NUL and bytes ≥ 0x80 are encoded like the rest.
//!
//! Webdis decodes `%XX` per argument, byte for byte, and does not interpret
//! `.`/`..` segments (there is no path normalisation on a POST body), so
//! every byte string reaches Redis unchanged. The real-server test
//! `adversarial_keys_round_trip` in `tests/redis_real.rs` proves it for
//! keys containing all of these.
//!
//! Refused before sending (`InvalidArgument`): an empty argument (webdis
//! drops a trailing empty segment), and a command name that is not ASCII
//! letters (an all-digit first segment selects a database).
//!
//! # Replies (JSON, the default format)
//!
//! `{"<NAME as sent>": value}`: integers are numbers, bulk strings are
//! strings, nil is `null`, arrays are arrays, a status is `[true,"OK"]` and a
//! Redis error `[false,"ERR …"]`. HTTP 503 means webdis cannot reach Redis,
//! 403 that its ACL refused the command. Limits of webdis 0.1.9 that edgelock
//! avoids by only ever returning integers from its scripts: a bulk string
//! that is not UTF-8 makes the whole reply `{}` (and is silently *dropped*
//! from an array), a NUL truncates a string, and nested arrays come back as
//! `null`.

use serde_json::Value;

use super::value::{RedisCommand, RedisValue, ReplyError};
use crate::core::LockError;

fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'~')
}

/// Percent-encodes every byte that is not unreserved (and `.`).
pub fn encode_arg(arg: &[u8], out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in arg {
        if is_unreserved(b) {
            out.push(b);
        } else {
            out.extend_from_slice(&[b'%', HEX[(b >> 4) as usize], HEX[(b & 15) as usize]]);
        }
    }
}

/// The POST body for one command.
pub fn encode_command(cmd: &RedisCommand) -> Result<Vec<u8>, LockError> {
    let name = cmd.name();
    if name.is_empty() || !name.iter().all(u8::is_ascii_alphabetic) {
        return Err(LockError::invalid(format!(
            "webdis command name {:?} must be ASCII letters",
            String::from_utf8_lossy(name)
        )));
    }
    let mut body = name.to_vec();
    for (i, a) in cmd.args.iter().enumerate().skip(1) {
        if a.is_empty() {
            return Err(LockError::invalid(format!(
                "argument {i} of {} is empty; webdis cannot carry an empty argument",
                String::from_utf8_lossy(name)
            )));
        }
        body.push(b'/');
        encode_arg(a, &mut body);
    }
    Ok(body)
}

/// Inverse of [`encode_command`] as webdis performs it (split on `/`, then
/// decode `%XX` per segment; `+` is a space). For tests and the simulation's
/// webdis model.
pub fn decode_body(body: &[u8]) -> Vec<Vec<u8>> {
    body.split(|&b| b == b'/')
        .enumerate()
        .map(|(i, seg)| {
            if i == 0 {
                seg.to_vec()
            } else {
                percent_decode(seg)
            }
        })
        .collect()
}

fn hex_val(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

fn percent_decode(seg: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(seg.len());
    let mut i = 0;
    while i < seg.len() {
        let b = seg[i];
        let hi = seg.get(i + 1).copied().and_then(hex_val);
        let lo = seg.get(i + 2).copied().and_then(hex_val);
        match (b, hi, lo) {
            (b'%', Some(h), Some(l)) => {
                out.push(h << 4 | l);
                i += 3;
            }
            (b'+', _, _) => {
                out.push(b' ');
                i += 1;
            }
            _ => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}

/// Backend text, kept whole: the node codec redacts the credential and
/// then cuts (`NodeCodec::decode`).
fn text(s: &str) -> String {
    crate::core::error::clean_control(s)
}

fn element(v: &Value) -> Result<RedisValue, String> {
    match v {
        Value::Null => Ok(RedisValue::Nil),
        Value::Number(n) => n
            .as_i64()
            .map(RedisValue::Int)
            .ok_or_else(|| format!("number {n} is not a 64-bit integer")),
        Value::String(s) => Ok(RedisValue::Bulk(s.as_bytes().to_vec())),
        Value::Array(items) => items
            .iter()
            .map(element)
            .collect::<Result<_, _>>()
            .map(RedisValue::Array),
        Value::Bool(_) | Value::Object(_) => Err("unexpected JSON type in reply".into()),
    }
}

fn top_level(v: &Value) -> Result<RedisValue, String> {
    if let Value::Array(items) = v {
        if let [Value::Bool(ok), Value::String(msg)] = items.as_slice() {
            return Ok(if *ok {
                RedisValue::Bulk(msg.as_bytes().to_vec())
            } else {
                RedisValue::Error(text(msg))
            });
        }
    }
    element(v)
}

/// Decodes webdis' answer to `command_name` (the name exactly as sent).
pub fn decode_reply(
    status: u16,
    body: &[u8],
    command_name: &[u8],
) -> Result<RedisValue, ReplyError> {
    let fail = |status: Option<u16>, message: String| Err(ReplyError { status, message });
    match status {
        200..=299 => {}
        503 => return fail(Some(503), "webdis cannot reach Redis".into()),
        403 => return fail(Some(403), "webdis refused the command (ACL)".into()),
        401 => return fail(Some(401), "webdis requires authentication".into()),
        s => return fail(Some(s), text(&String::from_utf8_lossy(body))),
    }
    let Ok(Value::Object(map)) = serde_json::from_slice::<Value>(body) else {
        return fail(None, "webdis reply is not a JSON object".into());
    };
    let name = String::from_utf8_lossy(command_name);
    match map.get(name.as_ref()) {
        Some(v) if map.len() == 1 => top_level(v).map_err(|m| ReplyError {
            status: None,
            message: m,
        }),
        Some(_) => fail(None, "webdis reply has unexpected extra fields".into()),
        None if map.is_empty() => fail(
            None,
            "webdis could not express the reply as JSON (not UTF-8)".into(),
        ),
        None => fail(None, format!("webdis reply is not keyed by {name:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn encodes_every_special_byte() {
        let cmd = RedisCommand::new("SET")
            .arg("a/b.c..%?#+ \r\n\0é~_-Z9")
            .arg("v");
        let body = encode_command(&cmd).unwrap();
        assert_eq!(
            String::from_utf8(body.clone()).unwrap(),
            "SET/a%2Fb%2Ec%2E%2E%25%3F%23%2B%20%0D%0A%00%C3%A9~_-Z9/v"
        );
        assert_eq!(decode_body(&body), cmd.args);
    }

    #[test]
    fn refuses_what_webdis_cannot_carry() {
        assert_eq!(
            encode_command(&RedisCommand::new("SET").arg("").arg("v"))
                .unwrap_err()
                .code(),
            "INVALID_ARGUMENT"
        );
        assert!(encode_command(&RedisCommand::new("0")).is_err());
        assert!(encode_command(&RedisCommand::new("GET/x")).is_err());
        assert!(encode_command(&RedisCommand { args: vec![] }).is_err());
    }

    #[test]
    fn decodes_replies_as_webdis_0_1_9_sends_them() {
        // Captured from Debian's webdis 0.1.9 in front of redis-server 7.0.
        assert_eq!(
            decode_reply(200, br#"{"EVAL":1}"#, b"EVAL"),
            Ok(RedisValue::Int(1))
        );
        assert_eq!(
            decode_reply(200, br#"{"EVAL":null}"#, b"EVAL"),
            Ok(RedisValue::Nil)
        );
        assert_eq!(
            decode_reply(200, br#"{"GET":"v"}"#, b"GET"),
            Ok(RedisValue::Bulk(b"v".to_vec()))
        );
        assert_eq!(
            decode_reply(200, br#"{"SET":[true,"OK"]}"#, b"SET"),
            Ok(RedisValue::Bulk(b"OK".to_vec()))
        );
        assert_eq!(
            decode_reply(200, br#"{"EVAL":[false,"ERR boom"]}"#, b"EVAL"),
            Ok(RedisValue::Error("ERR boom".into()))
        );
        assert_eq!(
            decode_reply(200, br#"{"EVAL":[1,null,"a",null]}"#, b"EVAL"),
            Ok(RedisValue::Array(vec![
                RedisValue::Int(1),
                RedisValue::Nil,
                RedisValue::Bulk(b"a".to_vec()),
                RedisValue::Nil
            ]))
        );
        assert_eq!(
            decode_reply(200, br#"{"eval":2}"#, b"eval"),
            Ok(RedisValue::Int(2))
        );
        assert!(decode_reply(200, br#"{}"#, b"EVAL")
            .unwrap_err()
            .message
            .contains("UTF-8"));
        assert!(decode_reply(200, br#"{"GET":1}"#, b"EVAL").is_err());
        assert_eq!(
            decode_reply(503, b"", b"EVAL").unwrap_err().status,
            Some(503)
        );
        assert_eq!(
            decode_reply(403, b"", b"EVAL").unwrap_err().status,
            Some(403)
        );
        assert!(decode_reply(200, br#"{"EVAL":1.5}"#, b"EVAL").is_err());
        assert!(decode_reply(200, br#"{"EVAL":true}"#, b"EVAL").is_err());
    }

    fn json_for(v: &RedisValue) -> Value {
        match v {
            RedisValue::Nil => Value::Null,
            RedisValue::Int(i) => Value::from(*i),
            RedisValue::Bulk(b) => Value::String(String::from_utf8(b.clone()).unwrap()),
            RedisValue::Array(items) => Value::Array(items.iter().map(json_for).collect()),
            RedisValue::Error(e) => serde_json::json!([false, e]),
        }
    }

    fn arb_value() -> impl Strategy<Value = RedisValue> {
        let leaf = prop_oneof![
            Just(RedisValue::Nil),
            any::<i64>().prop_map(RedisValue::Int),
            "[a-z0-9 é]{0,8}".prop_map(|s| RedisValue::Bulk(s.into_bytes())),
        ];
        let nested = leaf.prop_recursive(2, 12, 4, |inner| {
            proptest::collection::vec(inner, 0..4).prop_map(RedisValue::Array)
        });
        prop_oneof![nested, "ERR [a-z ]{0,10}".prop_map(RedisValue::Error)]
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(status in 100u16..600, body in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode_reply(status, &body, b"EVAL");
            let _ = decode_body(&body);
        }

        #[test]
        fn arbitrary_json_never_panics(s in "[\\[\\]{}\",:0-9a-zEVAL\\- ]{0,60}") {
            let _ = decode_reply(200, s.as_bytes(), b"EVAL");
        }

        #[test]
        fn every_byte_string_round_trips(args in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 1..24), 0..6)) {
            let mut cmd = RedisCommand::new("EVAL");
            for a in &args { cmd = cmd.arg(a); }
            let body = encode_command(&cmd).unwrap();
            // Nothing webdis treats specially survives encoding.
            prop_assert!(body[4..].iter().all(|b| b.is_ascii_alphanumeric() || b"-_~%/".contains(b)));
            prop_assert!(!body.contains(&b'.'));
            prop_assert_eq!(decode_body(&body), cmd.args);
        }

        #[test]
        fn replies_round_trip(v in arb_value()) {
            let body = serde_json::to_vec(&serde_json::json!({ "EVAL": json_for(&v) })).unwrap();
            prop_assert_eq!(decode_reply(200, &body, b"EVAL"), Ok(v));
        }
    }
}
