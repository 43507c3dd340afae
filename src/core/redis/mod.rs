//! Redis over HTTP (Upstash REST, Webdis): single-node lock and Redlock.
//!
//! - [`RedisMachine`]: one Redis node, the classic recipe — `SET key token NX
//!   PX ttl` plus a fencing counter in one Lua script, owner-checked release
//!   and extend, a watchdog renewing at TTL/3.
//! - [`RedlockMachine`]: N independent nodes, each reached by either
//!   protocol; quorum, validity with drift, retries with jitter, and fencing
//!   tokens across nodes (see [`redlock`] for the scheme and its guarantee).
//!
//! Both grant exclusive locks and semaphore permits ([`semaphore`]); one
//! node also grants shared holds of a read-write lock ([`rwlock`]), which
//! Redlock refuses with `INVALID_ARGUMENT`. Both hold elections
//! ([`election`]: campaign, proclaim, leader, observe).
//!
//! Layout: `value` (commands and replies), `upstash` / `webdis` (the two
//! HTTP codecs), `codec` (one node), `scripts` (the Lua scripts, one file
//! per kind with their commands and reply parsers), `election` (the
//! election recipe and what a quorum of leader records agrees on), `keys`,
//! `quorum` (pure arithmetic), `round` (one command's answers from a set of
//! nodes); the shared machine: `engine` (the scheduler) runs the tasks of
//! `tasks/` (one state machine per file) through the one interface in
//! `task`, each step given the `context` (settings, nodes, runtime, held
//! locks); `single` and `redlock` are the public faces.

pub mod codec;
mod context;
pub mod election;
mod engine;
pub mod keys;
pub mod quorum;
pub mod redlock;
pub mod round;
pub mod rwlock;
pub mod scripts;
pub mod semaphore;
pub mod single;
pub mod subscription;
mod task;
mod tasks;
pub mod upstash;
pub mod value;
pub mod webdis;

pub use redlock::{RedlockConfig, RedlockFencing, RedlockMachine};
pub use single::{RedisConfig, RedisMachine};
pub use value::{RedisCommand, RedisValue, ReplyError};

use super::LockError;

/// How a node is reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RedisProtocol {
    /// The Upstash REST protocol (`token` required: sent as a bearer token).
    Upstash,
    /// Webdis (`token`, if any, is `user:password` for its HTTP Basic ACL).
    Webdis,
}

/// One Redis node.
#[derive(Clone, PartialEq, Eq)]
pub struct RedisNode {
    /// `http(s)://host[:port][/base]`, without query or credentials.
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

    /// Parses the one spelling every binding accepts: `webdis+http(s)://…`,
    /// `upstash+http(s)://…`, or a bare `http(s)://…` (Upstash, the usual edge
    /// case). `token` is used by Upstash nodes only; its absence there is
    /// reported when the machine is built. The URL itself is validated then too.
    pub fn from_spec(spec: &str, token: Option<&str>) -> Result<RedisNode, LockError> {
        let spec = spec.trim();
        let (protocol, url) = if let Some(u) = spec.strip_prefix("webdis+") {
            (RedisProtocol::Webdis, u)
        } else if let Some(u) = spec.strip_prefix("upstash+") {
            (RedisProtocol::Upstash, u)
        } else if spec.starts_with("http://") || spec.starts_with("https://") {
            (RedisProtocol::Upstash, spec)
        } else {
            return Err(LockError::invalid(format!(
                "Redis node URL {:?} must be webdis+http://HOST:PORT, upstash+https://HOST or a bare https:// Upstash URL",
                spec.chars().take(80).collect::<String>()
            )));
        };
        let token = match protocol {
            RedisProtocol::Upstash => token.map(str::to_string),
            RedisProtocol::Webdis => None,
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

/// Implements [`LockMachine`](crate::core::LockMachine) by delegating to the engine.
macro_rules! delegate_lock_machine {
    ($t:ty, [$($kind:ident),*]) => {
        impl $crate::core::LockMachine for $t {
            fn backend(&self) -> $crate::core::BackendKind {
                self.engine.backend()
            }
            fn capabilities(&self) -> $crate::core::Capabilities {
                $crate::core::Capabilities {
                    kinds: &[$($crate::core::KindFamily::$kind),*],
                    // A name's keys carry its own hash tag: one script
                    // over several names only where the host allows it
                    // (one node, see `core::multi`).
                    atomic_sets: self.engine.atomic_sets(),
                }
            }
            fn live_count(&self) -> usize {
                self.engine.live_count()
            }
            fn start_operation(
                &mut self,
                now: $crate::core::Millis,
                op: $crate::core::Operation,
            ) -> Result<$crate::core::OpId, $crate::core::LockError> {
                self.engine.start_operation(now, op)
            }
            fn cancel(&mut self, now: $crate::core::Millis, op: $crate::core::OpId) {
                self.engine.cancel(now, op)
            }
            fn close(&mut self, now: $crate::core::Millis) -> $crate::core::OpId {
                self.engine.close(now)
            }
            fn handle_input(&mut self, now: $crate::core::Millis, input: $crate::core::Input) {
                self.engine.handle_input(now, input)
            }
            fn handle_timeout(&mut self, now: $crate::core::Millis) {
                self.engine.handle_timeout(now)
            }
            fn poll_transmit(&mut self) -> Option<$crate::core::Transmit> {
                self.engine.poll_transmit()
            }
            fn poll_event(&mut self) -> Option<$crate::core::Event> {
                self.engine.poll_event()
            }
            fn poll_timeout(&self) -> Option<$crate::core::Millis> {
                self.engine.poll_timeout()
            }
        }
    };
}
pub(crate) use delegate_lock_machine;

#[cfg(test)]
mod machine_tests;

#[cfg(test)]
mod spec_tests {
    use super::*;

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
        let err = RedisNode::from_spec("redis://127.0.0.1:6379", Some("t0k3n")).unwrap_err();
        assert_eq!(err.code(), "INVALID_ARGUMENT");
        assert!(!err.to_string().contains("t0k3n"));
    }
}
