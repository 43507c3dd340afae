//! The checks both lease backends make before sending anything: lock
//! names, owners, TTLs, bindings, options and handles.

use crate::core::names::{validate_name, validate_ttl};
use crate::core::{BackendKind, Capabilities, KindFamily, LockError, LockHandle, LockKind};

/// A lock name the backend accepts: the core's rule, and no control
/// characters (refused before any request).
pub(crate) fn check_name(backend: &str, name: &str) -> Result<(), LockError> {
    validate_name(name)?;
    if name.chars().any(char::is_control) {
        return Err(LockError::invalid(format!(
            "a {backend} lock name must not contain control characters"
        )));
    }
    Ok(())
}

/// Whether `s` can be an owner: 16..=64 lowercase hex characters.
pub(crate) fn is_owner(s: &str) -> bool {
    (16..=64).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// A lease the backend can keep: the core's TTL rule, and some validity
/// left after the clock-drift allowance (`validity`: the codec's).
pub(crate) fn check_ttl(ttl: u64, validity: fn(u64) -> Option<u64>) -> Result<(), LockError> {
    validate_ttl("ttl_ms", ttl)?;
    if validity(ttl).is_none() {
        return Err(LockError::invalid(format!(
            "ttl_ms of {ttl} ms leaves no validity after the clock-drift allowance"
        )));
    }
    Ok(())
}

/// A binding name of the options: 1..=256 letters, digits, `_` or `-`.
pub(crate) fn check_binding(backend: &str, b: &str) -> Result<(), LockError> {
    if b.is_empty()
        || b.len() > 256
        || !b
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-')
    {
        return Err(LockError::invalid(format!(
            "a {backend} binding must be a name of 1..=256 letters, digits, `_` or `-`"
        )));
    }
    Ok(())
}

/// The options' lease and request timeout.
pub(crate) fn check_lease_options(
    ttl_ms: u64,
    request_timeout_ms: u64,
    validity: fn(u64) -> Option<u64>,
) -> Result<(), LockError> {
    check_ttl(ttl_ms, validity)?;
    if request_timeout_ms == 0 || request_timeout_ms > 600_000 {
        return Err(LockError::invalid(
            "request_timeout_ms must be between 1 and 600000",
        ));
    }
    Ok(())
}

/// A handle this backend (`kind`, named `backend`) can resume: version 1,
/// a hold of one of `kinds`, key equal to its name, a well-formed owner.
pub(crate) fn check_handle(
    backend: &str,
    kind: BackendKind,
    kinds: &'static [KindFamily],
    handle: &LockHandle,
) -> Result<(), LockError> {
    if handle.v != 1 {
        return Err(LockError::invalid(format!(
            "unsupported lock handle version {}",
            handle.v
        )));
    }
    if handle.backend != kind {
        return Err(LockError::invalid(format!(
            "the handle is for the {} backend, this client is {backend}",
            handle.backend.as_str()
        )));
    }
    check_name(backend, &handle.name)?;
    let offered = Capabilities {
        kinds,
        atomic_sets: false,
    };
    // No lease backend grants leaderships (a campaign is refused).
    if handle.kind == LockKind::Leader || !offered.supports(handle.kind) {
        return Err(LockError::invalid(format!(
            "the handle is of a {} hold, which the {backend} backend does not grant",
            handle.kind.describe()
        )));
    }
    if handle.key != handle.name {
        return Err(LockError::invalid(
            "the handle's key does not match its name",
        ));
    }
    if !is_owner(&handle.owner) {
        return Err(LockError::invalid("the handle's owner is malformed"));
    }
    Ok(())
}
