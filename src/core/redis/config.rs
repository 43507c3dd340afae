//! What configures a Redis machine, shared by the single node and Redlock:
//! a node and how it is reached, the defaults, and the checks of the common
//! settings (a leaf: the machines, codecs and tasks use it, it uses none of
//! them).

use super::address::{is_resp_url, RespAddress};
use super::{keys, quorum};
use crate::core::LockError;

/// How a node is reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RedisProtocol {
    /// The Upstash REST protocol (`token` required: sent as a bearer token).
    Upstash,
    /// Webdis (`token`, if any, is `user:password` for its HTTP Basic ACL).
    Webdis,
    /// The Redis protocol itself over TCP or TLS: `url` is
    /// `redis://[user@]host[:port][/db]` or `rediss://…`, `token` the
    /// password to `AUTH` with, if any (see [`RespAddress`](super::address::RespAddress)).
    Resp,
}

/// One Redis node.
#[derive(Clone, PartialEq, Eq)]
pub struct RedisNode {
    /// `http(s)://host[:port][/base]`, without query or credentials; for
    /// [`RedisProtocol::Resp`] `redis://[user@]host[:port][/db]` or
    /// `rediss://…` (never with a password: that is the token).
    pub url: String,
    /// How the node is reached.
    pub protocol: RedisProtocol,
    /// Upstash: the REST token (required; sent as a bearer token). Webdis:
    /// `user:password` for its HTTP Basic ACL, if any. `Debug` redacts it.
    pub token: Option<String>,
}

impl RedisNode {
    /// An Upstash REST node with its token.
    pub fn upstash(url: impl Into<String>, token: impl Into<String>) -> Self {
        RedisNode {
            url: url.into(),
            protocol: RedisProtocol::Upstash,
            token: Some(token.into()),
        }
    }

    /// A Webdis node without credentials.
    pub fn webdis(url: impl Into<String>) -> Self {
        RedisNode {
            url: url.into(),
            protocol: RedisProtocol::Webdis,
            token: None,
        }
    }

    /// A node speaking the Redis protocol at `url` (`redis://…` or
    /// `rediss://…`, as redis-cli reads it). A password in the URL moves to
    /// the token; `password` may be given instead (not both).
    pub fn resp(url: &str, password: Option<&str>) -> Result<RedisNode, LockError> {
        let address = RespAddress::parse(url, password)?;
        Ok(RedisNode {
            url: address.public_url(),
            protocol: RedisProtocol::Resp,
            token: address.password,
        })
    }

    /// Parses the one spelling every binding accepts: `redis://…` or
    /// `rediss://…` (the Redis protocol over TCP, see [`RedisNode::resp`]),
    /// `webdis+http(s)://…`, `upstash+http(s)://…`, or a bare `http(s)://…`
    /// (Upstash, the usual edge case). `token` is the Upstash token or the
    /// Redis password; an Upstash node's missing token is reported when the
    /// machine is built. The URL itself is validated then too.
    pub fn from_spec(spec: &str, token: Option<&str>) -> Result<RedisNode, LockError> {
        let spec = spec.trim();
        if is_resp_url(spec) {
            return RedisNode::resp(spec, token);
        }
        let (protocol, url) = if let Some(u) = spec.strip_prefix("webdis+") {
            (RedisProtocol::Webdis, u)
        } else if let Some(u) = spec.strip_prefix("upstash+") {
            (RedisProtocol::Upstash, u)
        } else if spec.starts_with("http://") || spec.starts_with("https://") {
            (RedisProtocol::Upstash, spec)
        } else {
            return Err(LockError::invalid(format!(
                "Redis node URL {:?} must be redis://HOST:PORT, rediss://HOST:PORT, webdis+http://HOST:PORT, upstash+https://HOST or a bare https:// Upstash URL",
                spec.chars().take(80).collect::<String>()
            )));
        };
        let token = match protocol {
            RedisProtocol::Upstash => token.map(str::to_string),
            RedisProtocol::Webdis | RedisProtocol::Resp => None,
        };
        Ok(RedisNode {
            url: url.to_string(),
            protocol,
            token,
        })
    }
}

impl std::fmt::Debug for RedisNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisNode")
            .field("url", &self.url)
            .field("protocol", &self.protocol)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// The clock-drift factor of the single-node lock (Redlock's is configurable).
pub const DEFAULT_DRIFT_FACTOR: f64 = 0.01;

/// Wake-up subscriptions a machine holds open at once by default: enough
/// for 16 waiters on 4 nodes; a Workers invocation needs far fewer (it may
/// hold 6 connections open) and its binding sets its own.
pub const DEFAULT_MAX_SUBSCRIPTIONS: usize = 64;

/// A lock TTL must be valid and leave room for the drift allowance.
pub(crate) fn validate_lock_ttl(
    ttl_ms: u64,
    _request_timeout_ms: u64,
    drift_factor: f64,
) -> Result<(), LockError> {
    crate::core::names::validate_ttl("ttl_ms", ttl_ms)?;
    if quorum::validity_ms(ttl_ms, 0, drift_factor).is_none() {
        return Err(LockError::invalid(format!(
            "ttl_ms of {ttl_ms} ms leaves no validity after the clock-drift allowance of {} ms",
            quorum::drift_ms(ttl_ms, drift_factor)
        )));
    }
    Ok(())
}

pub(crate) fn validate_common(
    prefix: &str,
    ttl_ms: u64,
    request_timeout_ms: u64,
    drift_factor: f64,
    retry_delay_ms: u64,
    retry_jitter_ms: u64,
) -> Result<(), LockError> {
    keys::validate_prefix(prefix)?;
    if !(0.0..0.5).contains(&drift_factor) || !drift_factor.is_finite() {
        return Err(LockError::invalid(
            "drift_factor must be at least 0 and below 0.5",
        ));
    }
    validate_lock_ttl(ttl_ms, request_timeout_ms, drift_factor)?;
    if request_timeout_ms == 0 || request_timeout_ms > 600_000 {
        return Err(LockError::invalid(
            "request_timeout_ms must be between 1 and 600000",
        ));
    }
    if retry_delay_ms > 600_000 || retry_jitter_ms > 600_000 {
        return Err(LockError::invalid(
            "retry_delay_ms and retry_jitter_ms must be at most 600000",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod spec_tests {
    use super::{RedisNode, RedisProtocol};

    #[test]
    fn node_specs() {
        let w = RedisNode::from_spec("webdis+http://127.0.0.1:7379", Some("ignored")).unwrap();
        assert_eq!(
            (w.protocol, w.url.as_str(), w.token),
            (RedisProtocol::Webdis, "http://127.0.0.1:7379", None)
        );
        let u = RedisNode::from_spec(" upstash+https://x.upstash.io ", Some("t0k3n")).unwrap();
        assert_eq!(
            (u.protocol, u.url.as_str(), u.token.as_deref()),
            (
                RedisProtocol::Upstash,
                "https://x.upstash.io",
                Some("t0k3n")
            )
        );
        let bare = RedisNode::from_spec("https://x.upstash.io", None).unwrap();
        assert_eq!(bare.protocol, RedisProtocol::Upstash);
        let tcp = RedisNode::from_spec("redis://127.0.0.1:6379", Some("t0k3n")).unwrap();
        assert_eq!(
            (tcp.protocol, tcp.url.as_str(), tcp.token.as_deref()),
            (RedisProtocol::Resp, "redis://127.0.0.1:6379", Some("t0k3n"))
        );
        let moved = RedisNode::from_spec("rediss://u:pw@h/2", None).unwrap();
        assert_eq!(
            (moved.url.as_str(), moved.token.as_deref()),
            ("rediss://u@h:6379/2", Some("pw"))
        );
        let err = RedisNode::from_spec("tcp://127.0.0.1:6379", Some("t0k3n")).unwrap_err();
        assert_eq!(err.code(), "INVALID_ARGUMENT");
        assert!(!err.to_string().contains("t0k3n"));
    }
}
