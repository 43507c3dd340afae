//! The ZooKeeper connection string, as the Java client reads it
//! (`ConnectStringParser`, design 1.13): `host:port[,host:port…][/chroot]`.
//!
//! Everything from the first `/` is the chroot (a ZooKeeper path; `/` alone
//! means none); hosts are separated by `,`; an IPv6 literal is written in
//! brackets (`[::1]:2181`); a missing port is 2181.

use crate::core::LockError;

/// The port a host without one means (`ZooKeeper`'s `DEFAULT_PORT`).
pub const DEFAULT_PORT: u16 = 2181;

/// One server of the ensemble.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZkHost {
    /// Host name or IP address (an IPv6 literal without its brackets).
    pub host: String,
    /// TCP port.
    pub port: u16,
}

/// A parsed connection string.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZkAddress {
    /// The servers, in the order given (tried in turn).
    pub hosts: Vec<ZkHost>,
    /// The chroot every path is sent under (`None`: the server's root).
    pub chroot: Option<String>,
}

impl ZkAddress {
    /// Parses `connect`; errors are `INVALID_ARGUMENT` naming what is wrong.
    pub fn parse(connect: &str) -> Result<ZkAddress, LockError> {
        let connect = connect.trim();
        if connect.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(LockError::invalid(
                "a ZooKeeper connection string must not contain whitespace",
            ));
        }
        let (hosts, chroot) = match connect.find('/') {
            Some(i) => (&connect[..i], Some(&connect[i..])),
            None => (connect, None),
        };
        let chroot = match chroot {
            None | Some("/") => None,
            Some(path) => {
                validate_path(path).map_err(|why| {
                    LockError::invalid(format!("the ZooKeeper chroot {path:?} {why}"))
                })?;
                Some(path.to_string())
            }
        };
        let hosts = hosts
            .split(',')
            .filter(|h| !h.is_empty())
            .map(parse_host)
            .collect::<Result<Vec<_>, _>>()?;
        if hosts.is_empty() {
            return Err(LockError::invalid(
                "a ZooKeeper connection string needs at least one host (host:port[,host:port…][/chroot])",
            ));
        }
        Ok(ZkAddress { hosts, chroot })
    }
}

/// `host`, `host:port`, `host:` (port ignored, as Java does), `[v6]`,
/// `[v6]:port`.
fn parse_host(spec: &str) -> Result<ZkHost, LockError> {
    let bad = |why: &str| LockError::invalid(format!("ZooKeeper host {spec:?}: {why}"));
    let (host, port) = if let Some(rest) = spec.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or_else(|| bad("an IPv6 address needs its closing ]"))?;
        match after {
            "" | ":" => (host, None),
            p => match p.strip_prefix(':') {
                Some(p) => (host, Some(p)),
                None => return Err(bad("expected :port after the ]")),
            },
        }
    } else {
        match spec.split_once(':') {
            Some((_, p)) if p.contains(':') => {
                return Err(bad(
                    "an IPv6 address must be written in brackets: [addr]:port",
                ))
            }
            Some((h, "")) => (h, None),
            Some((h, p)) => (h, Some(p)),
            None => (spec, None),
        }
    };
    if host.is_empty() {
        return Err(bad("the host name is empty"));
    }
    let port = match port {
        None => DEFAULT_PORT,
        Some(p) => match p.parse::<u16>() {
            Ok(p) if p != 0 => p,
            _ => return Err(bad("the port must be a number from 1 to 65535")),
        },
    };
    Ok(ZkHost {
        host: host.to_string(),
        port,
    })
}

/// Whether ZooKeeper accepts `c` in a path (`PathUtils.validatePath`; a
/// Rust `char` is never a surrogate, and every char above U+FFFF would be
/// two of them in Java).
pub(crate) fn is_path_char(c: char) -> bool {
    !matches!(c,
        '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' | '\u{e000}'..='\u{f8ff}' | '\u{fff0}'..='\u{ffff}')
        && (c as u32) < 0x10000
}

/// Checks `path` as `PathUtils.validatePath` does (design 1.14): starts
/// with `/`, no trailing `/` (but the root), no empty, `.` or `..`
/// segment, no character ZooKeeper refuses. The error says why.
pub(crate) fn validate_path(path: &str) -> Result<(), String> {
    let Some(rest) = path.strip_prefix('/') else {
        return Err("must start with /".into());
    };
    if rest.is_empty() {
        return Ok(());
    }
    for segment in rest.split('/') {
        match segment {
            "" => return Err("must not have an empty segment or end with /".into()),
            "." | ".." => return Err("must not have a . or .. segment".into()),
            s if !s.chars().all(is_path_char) => {
                return Err("has a character ZooKeeper refuses in a path".into())
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{validate_path, ZkAddress, ZkHost, DEFAULT_PORT};

    fn host(h: &str, port: u16) -> ZkHost {
        ZkHost {
            host: h.into(),
            port,
        }
    }

    #[test]
    fn hosts_ports_and_chroot() {
        let a = ZkAddress::parse("10.0.0.1:2182,zk2,[::1]:3000,[fe80::1]/apps/x").unwrap();
        assert_eq!(
            a.hosts,
            vec![
                host("10.0.0.1", 2182),
                host("zk2", DEFAULT_PORT),
                host("::1", 3000),
                host("fe80::1", DEFAULT_PORT)
            ]
        );
        assert_eq!(a.chroot.as_deref(), Some("/apps/x"));
        let root = ZkAddress::parse("127.0.0.1:2181/").unwrap();
        assert_eq!(root.chroot, None);
        // A trailing ':' without a port is ignored, as the Java client does.
        assert_eq!(ZkAddress::parse("h:").unwrap().hosts, vec![host("h", 2181)]);
        assert_eq!(ZkAddress::parse("a,,b").unwrap().hosts.len(), 2);
    }

    #[test]
    fn bad_strings_are_invalid_arguments_that_say_why() {
        for (spec, why) in [
            ("", "at least one host"),
            ("/chroot", "at least one host"),
            ("h:0", "port must be"),
            ("h:99999", "port must be"),
            ("h:x", "port must be"),
            ("::1", "brackets"),
            ("[::1", "closing ]"),
            ("[::1]x", "expected :port"),
            ("h/a/", "empty segment"),
            ("h/a//b", "empty segment"),
            ("h/a/../b", ". or .."),
            ("h/a\u{1}b", "whitespace"),
            ("h/a\u{e000}", "refuses"),
            ("h a", "whitespace"),
        ] {
            let e = ZkAddress::parse(spec).unwrap_err();
            assert_eq!(e.code(), "INVALID_ARGUMENT", "{spec}");
            assert!(e.to_string().contains(why), "{spec}: {e}");
        }
    }

    #[test]
    fn paths_as_zookeeper_validates_them() {
        for ok in ["/", "/a", "/a/b", "/a.b/..c", "/é/日本"] {
            assert!(validate_path(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "a",
            "/a/",
            "//",
            "/./a",
            "/a/..",
            "/a\u{7f}",
            "/\u{fff5}",
            "/😀",
        ] {
            assert!(validate_path(bad).is_err(), "{bad:?}");
        }
    }
}
