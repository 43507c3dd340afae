//! Argument conversions from JavaScript values, and of lock kinds both ways:
//! the one place where `mode` / `limit` become a [`LockKind`] and back; and
//! whether this host may take `redis://` nodes ([`TcpSupport`]).

use std::cell::Cell;

use wasm_bindgen::JsValue;

use crate::core::redis::address::is_resp_url;
use crate::core::{BackendSpec, LockError, LockKind, MAX_PERMITS};

/// Whether this JavaScript host may reach a `redis://` node (the Redis
/// protocol over a TCP stream), as its entry file declares through
/// `RawLocks.declareTcp`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TcpSupport {
    /// Not declared (the default): a client with a `redis://` node needs a
    /// socket factory, its entry's (Node, Deno, workerd) or `openSocket`.
    Undeclared,
    /// Never: a browser page or web worker cannot open a TCP connection.
    Browser,
    /// The host's socket driver reaches `redis://` nodes.
    Available,
}

thread_local! {
    static TCP: Cell<TcpSupport> = const { Cell::new(TcpSupport::Undeclared) };
}

/// Declares this host's [`TcpSupport`] by name: `"undeclared"`,
/// `"browser"` or `"available"`.
pub(crate) fn declare_tcp(name: &str) -> Result<(), LockError> {
    let support = match name {
        "undeclared" => TcpSupport::Undeclared,
        "browser" => TcpSupport::Browser,
        "available" => TcpSupport::Available,
        _ => {
            return Err(LockError::invalid(
                "TCP support must be \"undeclared\", \"browser\" or \"available\"",
            ))
        }
    };
    TCP.with(|t| t.set(support));
    Ok(())
}

/// Refuses a client whose backend opens TCP streams (a `redis://` node, a
/// ZooKeeper ensemble) on a host that cannot reach one, before anything is
/// sent, saying why: a browser never can; elsewhere the client needs a
/// socket factory (`has_sockets`: the Node, Deno and workerd entries give
/// theirs, a user may pass `openSocket`).
pub(crate) fn check_tcp_nodes(spec: &BackendSpec, has_sockets: bool) -> Result<(), LockError> {
    if !spec.config().opens_tcp() {
        return Ok(());
    }
    let redis = spec.urls().iter().any(|u| is_resp_url(u));
    match (TCP.with(Cell::get), has_sockets, redis) {
        (TcpSupport::Browser, _, true) => Err(LockError::invalid(
            "browsers cannot open TCP connections: reach Redis through Upstash or Webdis (http(s) URL)",
        )),
        (TcpSupport::Browser, _, false) => Err(LockError::invalid(format!(
            "browsers cannot open TCP connections, and the {} backend is reached over TCP only",
            spec.kind().as_str()
        ))),
        (_, true, _) => Ok(()),
        (_, false, true) => Err(LockError::invalid(
            "redis:// nodes need TCP sockets, and this JavaScript host gave none: pass `openSocket`, or reach Redis through Upstash or Webdis",
        )),
        (_, false, false) => Err(LockError::invalid(format!(
            "the {} backend needs TCP sockets, and this JavaScript host gave none: pass `openSocket`",
            spec.kind().as_str()
        ))),
    }
}

/// A millisecond (or id) argument from JavaScript: a whole, non-negative,
/// exactly representable number.
pub(crate) fn whole_number(what: &str, value: f64) -> Result<u64, LockError> {
    const MAX_SAFE: f64 = 9_007_199_254_740_991.0;
    if !value.is_finite() || value < 0.0 || value.fract() != 0.0 || value > MAX_SAFE {
        // The value itself is not formatted: f64 Display costs ~12 KiB of wasm,
        // and the JS wrapper's own check already names it.
        return Err(LockError::invalid(format!(
            "{what} must be a whole number ≥ 0 (at most 2^53 - 1)"
        )));
    }
    Ok(value as u64)
}

/// The kind an acquire asks for, from its `mode` and `limit` options as
/// JavaScript passed them (`undefined` when absent):
///
/// - neither, or `mode: "exclusive"`: [`LockKind::Exclusive`];
/// - `mode: "shared"`: [`LockKind::Shared`] (the reader side of a read-write lock);
/// - `limit: n` (a whole number in `1..=MAX_PERMITS`): [`LockKind::Permits`].
///
/// Anything else is `INVALID_ARGUMENT`: a `limit` that is not a number
/// (`"3"` is refused, not coerced), not whole, out of range, or given
/// together with a `mode`; a `mode` that is not one of the two strings.
pub(crate) fn lock_kind(mode: &JsValue, limit: &JsValue) -> Result<LockKind, LockError> {
    let mode = if mode.is_undefined() {
        None
    } else {
        Some(
            mode.as_string()
                .ok_or_else(|| LockError::invalid("mode must be \"exclusive\" or \"shared\""))?,
        )
    };
    let limit = if limit.is_undefined() {
        None
    } else {
        Some(limit.as_f64().ok_or_else(invalid_limit)?)
    };
    kind_of(mode.as_deref(), limit)
}

/// [`lock_kind`] on plain values.
pub(crate) fn kind_of(mode: Option<&str>, limit: Option<f64>) -> Result<LockKind, LockError> {
    match (mode, limit) {
        (Some(_), Some(_)) => Err(LockError::invalid(
            "limit and mode exclude each other: a semaphore's permits are counted, not shared",
        )),
        (None, Some(n)) => {
            if !n.is_finite() || n.fract() != 0.0 || n < 1.0 || n > MAX_PERMITS as f64 {
                return Err(invalid_limit());
            }
            LockKind::permits(n as u64)
        }
        (None | Some("exclusive"), None) => Ok(LockKind::Exclusive),
        (Some("shared"), None) => Ok(LockKind::Shared),
        (Some("permit"), None) => Err(LockError::invalid(
            "a permit is asked for with { limit: n }, not with a mode",
        )),
        (Some(other), None) => Err(LockError::invalid(format!(
            "unknown mode {:?} (expected \"exclusive\" or \"shared\")",
            other.chars().take(20).collect::<String>()
        ))),
    }
}

fn invalid_limit() -> LockError {
    LockError::invalid(format!(
        "limit must be a whole number in 1..={MAX_PERMITS} (a semaphore's permits)"
    ))
}

/// A kind's `mode` as JavaScript sees it (the handle JSON's spelling).
pub(crate) fn mode_name(kind: LockKind) -> &'static str {
    match kind {
        LockKind::Exclusive => "exclusive",
        LockKind::Shared => "shared",
        LockKind::Permits { .. } => "permit",
        LockKind::Leader => "leader",
    }
}

/// A semaphore's limit, `None` for other kinds.
pub(crate) fn limit_of(kind: LockKind) -> Option<u32> {
    match kind {
        LockKind::Permits { limit } => Some(limit),
        _ => None,
    }
}
