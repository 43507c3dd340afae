//! Validation of user input that must happen before any request is sent.

use super::LockError;

/// Longest lock name accepted, in bytes. Keys are `prefix/name/suffix`; etcd's
/// default request limit is 1.5 MiB and Redis keys may be 512 MiB, but a name
/// this long is always a mistake, and bounded names bound every request we build.
pub const MAX_NAME_BYTES: usize = 512;

/// Longest TTL accepted (one day): beyond that a lock is a configuration error.
pub const MAX_TTL_MS: u64 = 24 * 60 * 60 * 1000;

/// Checks a lock name: not empty, at most [`MAX_NAME_BYTES`] bytes, no NUL.
pub fn validate_name(name: &str) -> Result<(), LockError> {
    if name.is_empty() {
        return Err(LockError::invalid("lock name must not be empty"));
    }
    if name.len() > MAX_NAME_BYTES {
        return Err(LockError::invalid(format!(
            "lock name is {} bytes long; the limit is {MAX_NAME_BYTES}",
            name.len()
        )));
    }
    if name.contains('\0') {
        return Err(LockError::invalid("lock name must not contain NUL"));
    }
    Ok(())
}

/// Checks a TTL-like setting called `what` (named in the error): above 0 and at
/// most [`MAX_TTL_MS`].
pub fn validate_ttl(what: &str, ttl_ms: u64) -> Result<(), LockError> {
    if ttl_ms == 0 {
        return Err(LockError::invalid(format!(
            "{what} must be greater than 0 ms"
        )));
    }
    if ttl_ms > MAX_TTL_MS {
        return Err(LockError::invalid(format!(
            "{what} of {ttl_ms} ms exceeds the limit of {MAX_TTL_MS} ms"
        )));
    }
    Ok(())
}

/// Accepts `http://host[:port][/base]` or `https://…`; returns it without a
/// trailing slash. Rejects anything else (no query, fragment, credentials or
/// whitespace), so that request URLs are always `base + fixed path`.
pub fn validate_base_url(url: &str) -> Result<String, LockError> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or_else(|| {
            LockError::invalid(format!(
                "URL {:?} must start with http:// or https://",
                redact_url(url)
            ))
        })?;
    let host_end = rest.find('/').unwrap_or(rest.len());
    let authority = &rest[..host_end];
    if authority.is_empty() {
        return Err(LockError::invalid(format!(
            "URL {:?} has no host",
            redact_url(url)
        )));
    }
    if authority.contains('@') {
        return Err(LockError::invalid(
            "URLs must not embed credentials; pass a token or headers instead",
        ));
    }
    if url
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || c == '?' || c == '#')
    {
        return Err(LockError::invalid(format!(
            "URL {:?} must not contain whitespace, a query or a fragment",
            redact_url(url)
        )));
    }
    if let Some((_, port)) = authority.rsplit_once(':') {
        if !authority.ends_with(']') && (port.is_empty() || port.parse::<u16>().is_err()) {
            return Err(LockError::invalid(format!(
                "URL {:?} has an invalid port",
                redact_url(url)
            )));
        }
    }
    Ok(url.trim_end_matches('/').to_string())
}

/// A URL fit for an error message: anything that could be a credential removed.
fn redact_url(url: &str) -> String {
    let cut: String = url.chars().take(100).collect();
    match cut.find('@') {
        Some(at) => format!("<redacted>{}", &cut[at..]),
        None => cut,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(validate_name("a").is_ok());
        assert!(validate_name("").is_err());
        assert!(validate_name("a\0b").is_err());
        assert!(validate_name(&"x".repeat(MAX_NAME_BYTES)).is_ok());
        assert!(validate_name(&"x".repeat(MAX_NAME_BYTES + 1)).is_err());
        assert!(validate_name("a/b/../c?#%\r\né").is_ok());
    }

    #[test]
    fn ttls() {
        assert!(validate_ttl("ttl", 0).is_err());
        assert!(validate_ttl("ttl", 1).is_ok());
        assert!(validate_ttl("ttl", MAX_TTL_MS + 1).is_err());
    }

    #[test]
    fn urls() {
        assert_eq!(
            validate_base_url("http://127.0.0.1:2379/").unwrap(),
            "http://127.0.0.1:2379"
        );
        assert_eq!(
            validate_base_url("https://x.upstash.io").unwrap(),
            "https://x.upstash.io"
        );
        assert!(validate_base_url("ftp://x").is_err());
        assert!(validate_base_url("http://").is_err());
        assert!(validate_base_url("http://u:secretpw@host")
            .unwrap_err()
            .to_string()
            .find("secretpw")
            .is_none());
        assert!(validate_base_url("http://h:notaport").is_err());
        assert!(validate_base_url("http://h/x?y").is_err());
        assert!(validate_base_url("http://h /x").is_err());
        assert!(validate_base_url("http://[::1]:2379").is_ok());
    }
}
