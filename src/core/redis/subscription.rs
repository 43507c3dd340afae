//! Push wake-up: the channel a lock's release publishes on, and the
//! decoding of a subscription's stream on either protocol.
//!
//! - Channel: `edgelock:wake:<32 hex digits>`, a 128-bit FNV-1a digest of
//!   the lock key. Never the name itself: a lock name may hold `/`, `,`,
//!   `%`, newlines or anything else, and the channel travels in a URL path
//!   and in Upstash's comma-separated SSE lines. Two keys sharing a digest
//!   only cost a spurious wake-up (one extra attempt), never safety.
//! - Payload: `released:<fencing token>` (never the owner token).
//! - Upstash REST: `POST <base>/subscribe/<channel>`, answered with a
//!   server-sent-events stream of `data: subscribe,<channel>,<count>` and
//!   `data: message,<channel>,<payload>` lines.
//! - Webdis: `GET <base>/SUBSCRIBE/<channel>`, a chunked stream of JSON
//!   objects `{"SUBSCRIBE":["subscribe","<channel>",1]}` and
//!   `{"SUBSCRIBE":["message","<channel>","<payload>"]}`, not separated.

use serde_json::Value;

use super::config::RedisProtocol;
use super::resp::{Frame, RespDecoder};
use super::value::RedisValue;
use crate::core::json_stream::JsonObjectSplitter;
use crate::core::sse_stream::SseSplitter;

/// The wake-up channel of the lock stored under `key`.
pub fn wake_channel(key: &str) -> String {
    format!("edgelock:wake:{:032x}", fnv1a_128(key.as_bytes()))
}

fn fnv1a_128(data: &[u8]) -> u128 {
    const OFFSET: u128 = 0x6c62272e07bb014262b821756295c58d;
    const PRIME: u128 = 0x0000000001000000000000000000013B;
    data.iter()
        .fold(OFFSET, |h, b| (h ^ u128::from(*b)).wrapping_mul(PRIME))
}

/// One event of a subscription stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PushFrame {
    /// The server confirmed the subscription: from now on no publish is missed.
    Subscribed,
    /// A message was published on the channel.
    Message(Vec<u8>),
}

/// Turns a subscription's byte stream into [`PushFrame`]s, whatever the
/// chunk boundaries; anything it cannot read ends the stream (the waiter
/// falls back to its timer and subscribes again).
#[derive(Debug)]
pub enum PushDecoder {
    /// Upstash REST: server-sent events.
    Sse(SseSplitter),
    /// Webdis: concatenated JSON objects.
    Json(JsonObjectSplitter),
    /// The Redis protocol: a subscribed connection's replies and pushes.
    Resp(Box<RespDecoder>),
}

impl PushDecoder {
    /// A decoder for a stream of `protocol`.
    pub fn new(protocol: RedisProtocol) -> Self {
        match protocol {
            RedisProtocol::Upstash => PushDecoder::Sse(SseSplitter::new()),
            RedisProtocol::Webdis => PushDecoder::Json(JsonObjectSplitter::new()),
            RedisProtocol::Resp => PushDecoder::Resp(Box::default()),
        }
    }

    /// Feeds the next bytes; the frames they complete, or why the stream
    /// cannot be read (no content of it: it may quote anything).
    pub fn push(&mut self, data: &[u8]) -> Result<Vec<PushFrame>, String> {
        let (texts, webdis) = match self {
            PushDecoder::Resp(d) => return resp_frames(d, data),
            PushDecoder::Sse(s) => (
                s.push(data)
                    .map_err(|e| format!("unreadable event stream: {e:?}"))?,
                false,
            ),
            PushDecoder::Json(s) => (
                s.push(data)
                    .map_err(|e| format!("unreadable subscription stream: {e:?}"))?,
                true,
            ),
        };
        let mut frames = Vec::new();
        for t in texts {
            let frame = if webdis {
                webdis_frame(&t)
            } else {
                sse_frame(&t)
            };
            if let Some(f) = frame? {
                frames.push(f);
            }
        }
        Ok(frames)
    }
}

/// `subscribe,<channel>,<n>` / `message,<channel>,<payload>`; other kinds
/// (`unsubscribe`, a future one) are skipped.
fn sse_frame(data: &[u8]) -> Result<Option<PushFrame>, String> {
    let mut parts = data.splitn(3, |b| *b == b',');
    let kind = parts.next().unwrap_or_default();
    let (channel, rest) = (parts.next(), parts.next());
    match (kind, channel, rest) {
        (b"subscribe", Some(_), Some(_)) => Ok(Some(PushFrame::Subscribed)),
        (b"message", Some(_), Some(payload)) => Ok(Some(PushFrame::Message(payload.to_vec()))),
        (b"subscribe" | b"message", _, _) => Err("a subscription event without its fields".into()),
        _ => Ok(None),
    }
}

/// A subscribed connection's frames: `subscribe` and `message` arrays
/// (RESP2 replies or RESP3 pushes); others (`unsubscribe`, a PING's
/// answer) are skipped.
fn resp_frames(d: &mut RespDecoder, data: &[u8]) -> Result<Vec<PushFrame>, String> {
    d.feed(data);
    let mut frames = Vec::new();
    while let Some(frame) = d
        .next_frame()
        .map_err(|e| format!("unreadable subscription stream: {e}"))?
    {
        let items = match frame {
            Frame::Push(items) | Frame::Reply(RedisValue::Array(items)) => items,
            Frame::Reply(RedisValue::Error(_)) => return Err("the subscription was refused".into()),
            Frame::Reply(_) => continue,
        };
        let kind = match items.first() {
            Some(RedisValue::Bulk(k)) => k.as_slice(),
            _ => continue,
        };
        match (kind, items.get(2)) {
            (b"subscribe", Some(_)) => frames.push(PushFrame::Subscribed),
            (b"message", Some(RedisValue::Bulk(payload))) => {
                frames.push(PushFrame::Message(payload.clone()))
            }
            (b"subscribe" | b"message", _) => {
                return Err("a subscription event without its fields".into())
            }
            _ => {}
        }
    }
    Ok(frames)
}

/// `{"SUBSCRIBE":[kind, channel, count-or-payload]}`.
fn webdis_frame(object: &[u8]) -> Result<Option<PushFrame>, String> {
    let v: Value = serde_json::from_slice(object)
        .map_err(|_| "a subscription event that is not JSON".to_string())?;
    let Some(items) = v.get("SUBSCRIBE").and_then(Value::as_array) else {
        return Err("a subscription event without its SUBSCRIBE array".into());
    };
    match (items.first().and_then(Value::as_str), items.len()) {
        (Some("subscribe"), 3) => Ok(Some(PushFrame::Subscribed)),
        (Some("message"), 3) => {
            let payload = items[2].as_str().unwrap_or_default();
            Ok(Some(PushFrame::Message(payload.as_bytes().to_vec())))
        }
        (Some("subscribe" | "message"), _) => Err("a subscription event without its fields".into()),
        _ => Ok(None),
    }
}

/// The payload a release publishes for the holder of `fencing_token`.
pub fn released_payload(fencing_token: u64) -> String {
    format!("released:{fencing_token}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn channels_are_safe_and_stable() {
        let c = wake_channel("{edgelock:a/b,c\n%}");
        assert!(c.starts_with("edgelock:wake:") && c.len() == 14 + 32, "{c}");
        assert!(c.bytes().all(|b| b.is_ascii_alphanumeric() || b == b':'));
        assert_eq!(c, wake_channel("{edgelock:a/b,c\n%}"));
        assert_ne!(c, wake_channel("{edgelock:a/b,c\n%"));
    }

    #[test]
    fn decodes_upstash_events() {
        let mut d = PushDecoder::new(RedisProtocol::Upstash);
        let f = d.push(b"data: subscribe,edgelock:wake:ab,1\n\ndata: message,edgelock:wake:ab,released:7\n").unwrap();
        assert_eq!(
            f,
            vec![
                PushFrame::Subscribed,
                PushFrame::Message(b"released:7".to_vec())
            ]
        );
        assert_eq!(d.push(b"\ndata: message,x,rel").unwrap(), vec![]);
        assert_eq!(
            d.push(b"eased:9\n\n").unwrap(),
            vec![PushFrame::Message(b"released:9".to_vec())]
        );
        assert!(PushDecoder::new(RedisProtocol::Upstash)
            .push(b"data: message\n")
            .is_err());
        assert_eq!(
            PushDecoder::new(RedisProtocol::Upstash)
                .push(b"data: unsubscribe,x,0\n")
                .unwrap(),
            vec![]
        );
    }

    #[test]
    fn decodes_webdis_objects() {
        let mut d = PushDecoder::new(RedisProtocol::Webdis);
        let f = d
            .push(br#"{"SUBSCRIBE":["subscribe","c",1]}{"SUBSCRIBE":["message","c","rel"#)
            .unwrap();
        assert_eq!(f, vec![PushFrame::Subscribed]);
        assert_eq!(
            d.push(br#"eased:3"]}"#).unwrap(),
            vec![PushFrame::Message(b"released:3".to_vec())]
        );
        assert!(PushDecoder::new(RedisProtocol::Webdis)
            .push(br#"{"GET":"x"}"#)
            .is_err());
        assert!(PushDecoder::new(RedisProtocol::Webdis)
            .push(b"nope")
            .is_err());
        assert!(PushDecoder::new(RedisProtocol::Webdis)
            .push(br#"{"SUBSCRIBE":["message"]}"#)
            .is_err());
    }

    proptest! {
        #[test]
        fn hostile_streams_never_panic(data in prop::collection::vec(any::<u8>(), 0..300), webdis in any::<bool>()) {
            let p = if webdis { RedisProtocol::Webdis } else { RedisProtocol::Upstash };
            let _ = PushDecoder::new(p).push(&data);
        }
    }
}
