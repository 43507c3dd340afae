//! One Redis node as the machines see it: a base URL, a protocol and
//! credentials, turning commands into [`HttpRequest`]s and answers back into
//! [`RedisValue`]s.

use super::config::{RedisNode, RedisProtocol};
use super::value::{RedisCommand, RedisValue, ReplyError};
use super::{upstash, webdis};
use crate::core::names::validate_base_url;
use crate::core::{HttpRequest, LockError, Method, RequestId, Target};

/// The two HTTP fronts a [`NodeCodec`] speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum HttpProtocol {
    Upstash,
    Webdis,
}

/// One node's protocol, base URL and credentials: turns commands into
/// [`HttpRequest`]s and answers into [`RedisValue`]s. `Debug` omits the credentials.
#[derive(Clone)]
pub struct NodeCodec {
    protocol: HttpProtocol,
    /// Validated, without a trailing slash.
    base: String,
    headers: Vec<(String, String)>,
    /// Never printed; removed from backend messages.
    secret: Option<String>,
}

impl std::fmt::Debug for NodeCodec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeCodec")
            .field("protocol", &self.protocol)
            .field("base", &self.base)
            .finish()
    }
}

impl NodeCodec {
    /// Validates the node's URL and token and prepares its headers (authorization
    /// and content type).
    pub fn new(node: &RedisNode) -> Result<Self, LockError> {
        let base = validate_base_url(&node.url)?;
        let mut headers = Vec::new();
        let token = node.token.as_deref().filter(|t| !t.is_empty());
        if let Some(t) = token {
            if t.chars().any(|c| c.is_control() || c == '\u{7f}') || !t.is_ascii() {
                return Err(LockError::invalid(
                    "the node's token must be printable ASCII",
                ));
            }
        }
        let protocol = match node.protocol {
            RedisProtocol::Upstash => HttpProtocol::Upstash,
            RedisProtocol::Webdis => HttpProtocol::Webdis,
            RedisProtocol::Resp => {
                return Err(LockError::internal(
                    "a Redis-protocol node has no HTTP codec (it is reached over a stream)",
                ))
            }
        };
        match protocol {
            HttpProtocol::Upstash => {
                let t = token.ok_or_else(|| LockError::invalid("an Upstash node needs a token"))?;
                headers.push(("Authorization".to_string(), format!("Bearer {t}")));
                headers.push((
                    upstash::ENCODING_HEADER.0.to_string(),
                    upstash::ENCODING_HEADER.1.to_string(),
                ));
                headers.push(("Content-Type".to_string(), "application/json".to_string()));
            }
            HttpProtocol::Webdis => {
                // Webdis ACLs authenticate with HTTP Basic "user:password".
                if let Some(t) = token {
                    let b = crate::core::b64::encode(t.as_bytes());
                    headers.push(("Authorization".to_string(), format!("Basic {b}")));
                }
                headers.push(("Content-Type".to_string(), "text/plain".to_string()));
            }
        }
        Ok(NodeCodec {
            protocol,
            base,
            headers,
            secret: token.map(str::to_string),
        })
    }

    /// The protocol this node speaks.
    pub fn protocol(&self) -> RedisProtocol {
        match self.protocol {
            HttpProtocol::Upstash => RedisProtocol::Upstash,
            HttpProtocol::Webdis => RedisProtocol::Webdis,
        }
    }

    /// The validated base URL, without a trailing slash.
    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// The request that runs `cmd` on this node.
    pub fn encode(
        &self,
        id: RequestId,
        cmd: &RedisCommand,
        timeout_ms: u64,
    ) -> Result<HttpRequest, LockError> {
        let body = match self.protocol {
            HttpProtocol::Upstash => upstash::encode_command(cmd)?,
            HttpProtocol::Webdis => webdis::encode_command(cmd)?,
        };
        let url = match self.protocol {
            // Exactly the base, like the official client; a bare origin gets
            // its "/" (the same request on the wire).
            HttpProtocol::Upstash if has_path(&self.base) => self.base.clone(),
            HttpProtocol::Upstash | HttpProtocol::Webdis => format!("{}/", self.base),
        };
        Ok(HttpRequest {
            id,
            method: Method::Post,
            target: Target::Url(url),
            headers: self.headers.clone(),
            body,
            timeout_ms: Some(timeout_ms),
            stream: false,
        })
    }

    /// The streaming request that subscribes this node to `channel` (a
    /// [`wake_channel`](super::subscription::wake_channel): URL-safe by
    /// construction); its stream is read by a
    /// [`PushDecoder`](super::subscription::PushDecoder). `timeout_ms` bounds
    /// the wait for the server's confirmation; after it the stream stays open.
    pub fn subscribe(
        &self,
        id: RequestId,
        channel: &str,
        timeout_ms: u64,
    ) -> Result<HttpRequest, LockError> {
        if !channel
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b':')
        {
            return Err(LockError::internal(
                "a wake-up channel name that is not URL-safe",
            ));
        }
        let auth = self
            .headers
            .iter()
            .filter(|(k, _)| k == "Authorization")
            .cloned();
        let (method, url, headers) = match self.protocol {
            HttpProtocol::Upstash => {
                let accept = ("Accept".to_string(), "text/event-stream".to_string());
                (
                    Method::Post,
                    format!("{}/subscribe/{channel}", self.base),
                    auth.chain([accept]).collect(),
                )
            }
            HttpProtocol::Webdis => (
                Method::Get,
                format!("{}/SUBSCRIBE/{channel}", self.base),
                auth.collect(),
            ),
        };
        Ok(HttpRequest {
            id,
            method,
            target: Target::Url(url),
            headers,
            body: Vec::new(),
            timeout_ms: Some(timeout_ms),
            stream: true,
        })
    }

    /// The answer to a request made by [`encode`](Self::encode) for `cmd`.
    pub fn decode(
        &self,
        cmd: &RedisCommand,
        status: u16,
        body: &[u8],
    ) -> Result<RedisValue, ReplyError> {
        let r = match self.protocol {
            HttpProtocol::Upstash => upstash::decode_reply(status, body, true),
            HttpProtocol::Webdis => webdis::decode_reply(status, body, cmd.name()),
        };
        // Redis error replies are data too (`-ERR …` may quote anything the
        // backend saw, our token included): scrub them like failures.
        r.map(|v| self.scrub_value(v)).map_err(|e| ReplyError {
            status: e.status,
            message: self.scrub(&e.message),
        })
    }

    fn scrub_value(&self, v: RedisValue) -> RedisValue {
        match v {
            RedisValue::Error(e) => RedisValue::Error(self.scrub(&e)),
            RedisValue::Array(items) => {
                RedisValue::Array(items.into_iter().map(|i| self.scrub_value(i)).collect())
            }
            other => other,
        }
    }

    /// Removes this node's credential from a backend-provided text.
    pub fn scrub(&self, s: &str) -> String {
        match &self.secret {
            Some(t) => crate::core::error::sanitize_detail(s, &[t]),
            None => crate::core::error::sanitize_detail(s, &[]),
        }
    }
}

fn has_path(base: &str) -> bool {
    let rest = base.split_once("://").map_or(base, |(_, r)| r);
    rest.contains('/')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(protocol: RedisProtocol, token: Option<&str>) -> RedisNode {
        RedisNode {
            url: "http://127.0.0.1:7379/".into(),
            protocol,
            token: token.map(str::to_string),
        }
    }

    /// Found by the reliability suite (scenario 9c): a Redis error reply that
    /// quotes the token, and a long message cut before redaction.
    #[test]
    fn error_replies_quoting_the_token_are_scrubbed_whole() {
        let token = "SENTINEL-token-0123456789abcdef";
        let cmd = RedisCommand::new("EVAL").arg("x");
        let up = NodeCodec::new(&node(RedisProtocol::Upstash, Some(token))).unwrap();
        let pad = "x".repeat(190);
        for body in [
            format!(r#"{{"error":"ERR {token} bad"}}"#),
            format!(r#"{{"error":"ERR {pad} {token}"}}"#),
        ] {
            for status in [200, 400] {
                let text = match up.decode(&cmd, status, body.as_bytes()) {
                    Ok(RedisValue::Error(e)) => e,
                    Err(e) => e.message,
                    Ok(other) => panic!("{other:?}"),
                };
                assert!(!text.contains("SENTINEL"), "{status}: {text}");
            }
        }
        let wd = NodeCodec::new(&node(RedisProtocol::Webdis, None)).unwrap();
        let body = format!(r#"{{"EVAL":[false,"ERR {pad} Bearer {token}"]}}"#);
        match wd.decode(&cmd, 200, body.as_bytes()) {
            Ok(RedisValue::Error(e)) => assert!(!e.contains("SENTINEL"), "{e}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn builds_requests_without_keys_in_the_url() {
        let cmd = RedisCommand::new("GET").arg("a/../b?c#d");
        let u = NodeCodec::new(&node(RedisProtocol::Upstash, Some("sekrit-token"))).unwrap();
        let r = u.encode(RequestId(1), &cmd, 500).unwrap();
        assert_eq!(r.target.url(), Some("http://127.0.0.1:7379/"));
        assert_eq!(r.method, Method::Post);
        let mut n = node(RedisProtocol::Upstash, Some("t"));
        n.url = "https://gw.example/redis/".into();
        assert_eq!(
            NodeCodec::new(&n)
                .unwrap()
                .encode(RequestId(9), &cmd, 1)
                .unwrap()
                .target
                .url(),
            Some("https://gw.example/redis")
        );
        assert!(r
            .headers
            .contains(&("Authorization".into(), "Bearer sekrit-token".into())));
        assert!(!format!("{r:?}").contains("sekrit"));
        let w = NodeCodec::new(&node(RedisProtocol::Webdis, None)).unwrap();
        let r = w.encode(RequestId(2), &cmd, 500).unwrap();
        assert_eq!(r.target.url(), Some("http://127.0.0.1:7379/"));
        assert_eq!(r.body, b"GET/a%2F%2E%2E%2Fb%3Fc%23d".to_vec());
        let wa = NodeCodec::new(&node(RedisProtocol::Webdis, Some("user:pw"))).unwrap();
        let r = wa.encode(RequestId(3), &cmd, 500).unwrap();
        assert!(r
            .headers
            .contains(&("Authorization".into(), "Basic dXNlcjpwdw==".into())));
    }

    #[test]
    fn validates_nodes() {
        assert!(NodeCodec::new(&node(RedisProtocol::Upstash, None)).is_err());
        assert!(NodeCodec::new(&node(RedisProtocol::Upstash, Some("a\nb"))).is_err());
        let mut n = node(RedisProtocol::Webdis, None);
        n.url = "redis://x".into();
        assert!(NodeCodec::new(&n).is_err());
    }

    #[test]
    fn scrubs_the_token_from_messages() {
        let u = NodeCodec::new(&node(RedisProtocol::Upstash, Some("sekrit-token"))).unwrap();
        let e = u
            .decode(
                &RedisCommand::new("EVAL"),
                401,
                br#"{"error":"bad token sekrit-token"}"#,
            )
            .unwrap_err();
        assert!(!e.message.contains("sekrit"), "{}", e.message);
    }
}
