//! The Durable Object lock service (`docs/lock-service-api.md`) as a
//! backend: one object per lock name does every check (owner, lease,
//! fencing counter), so the client is a thin sans-IO machine.
//!
//! - acquire: `POST <base>/v1/acquire?name=…` with a random owner (32 hex
//!   from the injected [`Entropy`](crate::core::Entropy)) and `waitMs`; the
//!   service holds a waiting request open until it grants or `waitMs`
//!   passes, so a longer wait re-sends `acquire` with the same owner
//!   (keeping its FIFO place) every [`MAX_POLL_WAIT_MS`] at most;
//! - release / extend / resume are owner-checked by the service; a held
//!   lock is renewed at TTL/3 (`autoExtend`), `Event::Lost` when an extend
//!   answers `extended:false` or the lease runs out before a renewal
//!   succeeded (measured on the client's clock from the request's send time,
//!   minus a drift allowance, as the single-node Redis lock does); a grant
//!   that a held-open poll received after its first renewal was due is
//!   confirmed by an `extend` first, whose send time anchors the lease;
//! - an acquire that ends without a grant it knows of (cancelled, closed,
//!   failed) leaves: `acquire` with its owner and `waitMs` 0 takes it out of
//!   the queue (the service keeps a waiter whose caller went away) or
//!   answers the token of a grant it missed, which is then released; a wait
//!   that ran out needs nothing (the service dropped it);
//! - the fencing token is the service's counter (a decimal string).
//!
//! The service is reached by URL (the job coordinator's `/lock` front, with
//! a bearer token) or, inside a Worker, through a binding that routes by
//! the `name` query parameter ([`DurableEndpoint`]).
//!
//! Layout: `codec` (request bodies and strict answer parsing), `machine`
//! (the service's part of the shared lease machine, `crate::core::lease`:
//! its options and requests), `machine/acquire` (a waiting acquire's steps:
//! polls, confirmations, leaving), `machine/answers` (the other answers).

pub(crate) mod codec;
mod machine;

pub(crate) use machine::DurableMachine;

use crate::core::lease::{check_binding, check_lease_options};
use crate::core::names::validate_base_url;
use crate::core::LockError;

/// How long one waiting `acquire` request asks the service to hold it open.
pub const MAX_POLL_WAIT_MS: u64 = 25_000;

/// Where the service is.
#[derive(Clone, PartialEq, Eq)]
pub enum DurableEndpoint {
    /// `http(s)://host[:port][/base]`: requests go to `<url>/v1/<op>?name=…`.
    Url(String),
    /// The name of a binding the driver was given (a router over a Durable
    /// Object namespace): requests target it with path `/v1/<op>?name=…`.
    Binding(String),
}

impl std::fmt::Debug for DurableEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DurableEndpoint::Url(u) => f.debug_tuple("Url").field(u).finish(),
            DurableEndpoint::Binding(b) => f.debug_tuple("Binding").field(b).finish(),
        }
    }
}

/// Configuration of a `durable-object` client; [`DurableConfig::new`] gives
/// the defaults.
#[derive(Clone)]
pub struct DurableConfig {
    /// The service's base URL or binding.
    pub endpoint: DurableEndpoint,
    /// Sent as `Authorization: Bearer <token>` (the front requires it;
    /// a binding usually needs none). `Debug` redacts it.
    pub token: Option<String>,
    /// Default lease (per-acquire `AcquireOptions::ttl_ms` overrides it).
    pub ttl_ms: u64,
    /// Per-request timeout; a waiting acquire's request gets its `waitMs` on top.
    pub request_timeout_ms: u64,
    /// Renew held locks at TTL/3 until released.
    pub auto_extend: bool,
}

impl DurableConfig {
    /// A configuration for `endpoint`: no token, 10 s lease, 5 s request
    /// timeout, auto-extend.
    pub fn new(endpoint: DurableEndpoint) -> Self {
        DurableConfig {
            endpoint,
            token: None,
            ttl_ms: 10_000,
            request_timeout_ms: 5_000,
            auto_extend: true,
        }
    }

    /// The URL requests go to, for a URL endpoint (drivers check its scheme).
    pub fn url(&self) -> Option<&str> {
        match &self.endpoint {
            DurableEndpoint::Url(u) => Some(u),
            DurableEndpoint::Binding(_) => None,
        }
    }

    /// Every option checked; the endpoint's URL normalised (no trailing `/`).
    pub(crate) fn validated(mut self) -> Result<DurableConfig, LockError> {
        self.endpoint = match self.endpoint {
            DurableEndpoint::Url(u) => DurableEndpoint::Url(validate_base_url(&u)?),
            DurableEndpoint::Binding(b) => {
                check_binding("durable-object", &b)?;
                DurableEndpoint::Binding(b)
            }
        };
        if let Some(t) = &self.token {
            if t.is_empty() || t.chars().any(|c| c.is_control() || c == ' ') {
                return Err(LockError::invalid(
                    "a durable-object token must be non-empty, without spaces or control characters",
                ));
            }
        }
        check_lease_options(self.ttl_ms, self.request_timeout_ms, codec::lease_validity)?;
        Ok(self)
    }
}

impl std::fmt::Debug for DurableConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DurableConfig")
            .field("endpoint", &self.endpoint)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("ttl_ms", &self.ttl_ms)
            .field("request_timeout_ms", &self.request_timeout_ms)
            .field("auto_extend", &self.auto_extend)
            .finish()
    }
}

#[cfg(test)]
mod tests;
