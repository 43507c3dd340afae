//! Where a Redis node that speaks its own protocol (RESP over TCP) is, as
//! redis-cli and ioredis read it: `redis://[user[:password]@]host[:port][/db]`
//! and `rediss://…` for TLS. A password in the URL is taken out of it at once
//! (into the node's `token`), so that the URL kept and printed never holds it.

use crate::core::LockError;

/// The port a `redis://` URL without one means.
pub const DEFAULT_PORT: u16 = 6379;

/// A parsed `redis://` / `rediss://` address. `Debug` redacts the password.
#[derive(Clone, PartialEq, Eq)]
pub struct RespAddress {
    /// Host name or IP address (an IPv6 literal without its brackets).
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// `rediss://`: TLS, the certificate checked against `host`.
    pub tls: bool,
    /// The ACL user to `AUTH` as (`None`: the default user).
    pub user: Option<String>,
    /// The password to `AUTH` with, if any.
    pub password: Option<String>,
    /// The database to `SELECT` (0 is Redis' default and is not selected).
    pub db: u32,
}

impl std::fmt::Debug for RespAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RespAddress")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("tls", &self.tls)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("db", &self.db)
            .finish()
    }
}

/// Whether `url` is a Redis-protocol URL (rather than an HTTP one).
pub fn is_resp_url(url: &str) -> bool {
    let lower = url.trim_start().get(..9).unwrap_or("").to_ascii_lowercase();
    lower.starts_with("redis://") || lower.starts_with("rediss://")
}

impl RespAddress {
    /// Parses `url`. `password` is the node's separate token: it may be
    /// given, or the URL's password, not both. Error messages never quote
    /// the password (they name the host at most).
    pub fn parse(url: &str, password: Option<&str>) -> Result<RespAddress, LockError> {
        let (tls, rest) = split_scheme(url.trim())?;
        if rest.contains(['?', '#']) || rest.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(LockError::invalid(
                "a redis:// URL must not contain whitespace, a query or a fragment",
            ));
        }
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let (userinfo, hostport) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let (user, url_password) = parse_userinfo(userinfo)?;
        let password =
            match (url_password, password.filter(|p| !p.is_empty())) {
                (Some(_), Some(_)) => return Err(LockError::invalid(
                    "give the Redis password once: in the redis:// URL or as the token, not both",
                )),
                (Some(p), None) => Some(p),
                (None, p) => p.map(str::to_string),
            };
        let (host, port) = parse_host_port(hostport)?;
        Ok(RespAddress {
            host,
            port,
            tls,
            user,
            password,
            db: parse_db(path)?,
        })
    }

    /// The URL without its password: what a node keeps and may print.
    pub fn public_url(&self) -> String {
        let scheme = if self.tls { "rediss" } else { "redis" };
        let user = self
            .user
            .as_deref()
            .map(|u| format!("{}@", percent_encode(u)))
            .unwrap_or_default();
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        let db = if self.db == 0 {
            String::new()
        } else {
            format!("/{}", self.db)
        };
        format!("{scheme}://{user}{host}:{}{db}", self.port)
    }
}

fn split_scheme(url: &str) -> Result<(bool, &str), LockError> {
    let lower = url.get(..9).unwrap_or(url).to_ascii_lowercase();
    if lower.starts_with("rediss://") {
        Ok((true, &url[9..]))
    } else if lower.starts_with("redis://") {
        Ok((false, &url[8..]))
    } else {
        Err(LockError::invalid(
            "a Redis-protocol URL must start with redis:// or rediss://",
        ))
    }
}

/// `user:password`, `:password`, `user` or nothing, percent-decoded.
fn parse_userinfo(userinfo: Option<&str>) -> Result<(Option<String>, Option<String>), LockError> {
    let Some(info) = userinfo else {
        return Ok((None, None));
    };
    let (user, password) = match info.split_once(':') {
        Some((u, p)) => (u, Some(p)),
        None => (info, None),
    };
    let decode = |s: &str, what: &str| {
        percent_decode(s).ok_or_else(|| {
            LockError::invalid(format!(
                "the {what} in the redis:// URL has an invalid %-escape"
            ))
        })
    };
    let user = Some(decode(user, "user name")?).filter(|u| !u.is_empty());
    let password = match password {
        Some(p) => Some(decode(p, "password")?).filter(|p| !p.is_empty()),
        None => None,
    };
    Ok((user, password))
}

fn parse_host_port(hostport: &str) -> Result<(String, u16), LockError> {
    let (host, port) = if let Some(rest) = hostport.strip_prefix('[') {
        let (h, after) = rest
            .split_once(']')
            .ok_or_else(|| LockError::invalid("an IPv6 host in a redis:// URL lacks its ']'"))?;
        (h, after.strip_prefix(':'))
    } else {
        match hostport.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (hostport, None),
        }
    };
    if host.is_empty() {
        return Err(LockError::invalid("a redis:// URL needs a host"));
    }
    let port =
        match port {
            None => DEFAULT_PORT,
            Some(p) => p.parse::<u16>().ok().filter(|p| *p > 0).ok_or_else(|| {
                LockError::invalid("the port of a redis:// URL must be 1 to 65535")
            })?,
        };
    Ok((host.to_string(), port))
}

fn parse_db(path: &str) -> Result<u32, LockError> {
    if path.is_empty() {
        return Ok(0);
    }
    path.parse::<u32>()
        .ok()
        .filter(|db| *db <= i32::MAX as u32)
        .ok_or_else(|| {
            LockError::invalid("the path of a redis:// URL is the database number (/0, /1, …)")
        })
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(url: &str) -> RespAddress {
        RespAddress::parse(url, None).unwrap()
    }

    #[test]
    fn reads_what_redis_cli_and_ioredis_read() {
        let a = parse("redis://127.0.0.1");
        assert_eq!(
            (a.host.as_str(), a.port, a.tls, a.db),
            ("127.0.0.1", 6379, false, 0)
        );
        let a = parse("rediss://alice:s%40cret@cache.example:6380/3");
        assert_eq!(a.host, "cache.example");
        assert_eq!((a.port, a.tls, a.db), (6380, true, 3));
        assert_eq!(a.user.as_deref(), Some("alice"));
        assert_eq!(a.password.as_deref(), Some("s@cret"));
        let a = parse("redis://:pw@[::1]:7000");
        assert_eq!((a.host.as_str(), a.port), ("::1", 7000));
        assert_eq!((a.user, a.password.as_deref()), (None, Some("pw")));
        let a = RespAddress::parse("REDIS://h:1/", Some("tok")).unwrap();
        assert_eq!((a.port, a.db, a.password.as_deref()), (1, 0, Some("tok")));
    }

    #[test]
    fn the_public_url_and_debug_never_hold_the_password() {
        let a = parse("rediss://bob:hunter2@h:6380/2");
        assert_eq!(a.public_url(), "rediss://bob@h:6380/2");
        assert!(!format!("{a:?}").contains("hunter2"));
        assert_eq!(parse("redis://:x@[::1]").public_url(), "redis://[::1]:6379");
    }

    #[test]
    fn bad_urls_are_invalid_arguments_without_the_password() {
        for url in [
            "http://h:6379",
            "redis://",
            "redis://:secretpw@:6379",
            "redis://h:0",
            "redis://h:99999",
            "redis://h/x",
            "redis://h?db=1",
            "redis://:secret%zzpw@h",
            "redis://[::1:6379",
            "redis://h h",
        ] {
            let e = RespAddress::parse(url, None).unwrap_err();
            assert_eq!(e.code(), "INVALID_ARGUMENT", "{url}");
            assert!(!e.to_string().contains("secret"), "{url}: {e}");
        }
        let twice = RespAddress::parse("redis://:a@h", Some("b")).unwrap_err();
        assert!(twice.to_string().contains("once"), "{twice}");
        assert!(
            is_resp_url("rediss://h") && is_resp_url(" Redis://h") && !is_resp_url("https://h")
        );
    }
}
