//! What configures a ZooKeeper machine: where the ensemble is, under which
//! path the locks live, the session timeout asked for, and the digest
//! credentials (a leaf: the session and the machine use it).

use super::address::{validate_path, ZkAddress};
use crate::core::LockError;

/// The default parent of every lock's node directory.
pub const DEFAULT_ROOT: &str = "/edgelock";

/// The session timeout asked for by default (the server clamps it into
/// `[2, 20] × tickTime`).
pub const DEFAULT_SESSION_TIMEOUT_MS: u32 = 30_000;

/// The default bound on one request's answer.
pub const DEFAULT_REQUEST_TIMEOUT_MS: u64 = 10_000;

/// `digest` credentials, sent as `AuthPacket{0, "digest", "user:password"}`
/// on every connection. `Debug` never shows the password.
#[derive(Clone, PartialEq, Eq)]
pub struct ZkDigest {
    /// The user (the part before `:`).
    pub user: String,
    /// The password (a secret).
    pub password: String,
}

impl std::fmt::Debug for ZkDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZkDigest")
            .field("user", &self.user)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// A ZooKeeper backend's configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZkConfig {
    /// `host:port[,host:port…][/chroot]` (see [`ZkAddress`]).
    pub connect: String,
    /// The path under which lock `N` is the directory `<root>/<escaped N>`
    /// (inside the chroot). Default [`DEFAULT_ROOT`].
    pub root: String,
    /// The session timeout asked for, in ms; the server's answer (clamped
    /// to its bounds) is the one used. Default 30000.
    pub session_timeout_ms: u32,
    /// How long one request may wait for its answer. Default 10000.
    pub request_timeout_ms: u64,
    /// `digest` credentials, if any.
    pub digest: Option<ZkDigest>,
    /// Connect with TLS (to the servers' `secureClientPort`).
    pub tls: bool,
    /// Names whose `Exclusive` acquires are Curator
    /// `InterProcessReadWriteLock` writers (`__WRIT__` nodes) rather than
    /// `InterProcessMutex` holders (`lock-`): list the names Curator peers
    /// use as read-write locks (see `recipes`' module documentation).
    pub read_write_names: Vec<String>,
}

impl ZkConfig {
    /// The defaults for ensemble `connect`.
    pub fn new(connect: impl Into<String>) -> Self {
        ZkConfig {
            connect: connect.into(),
            root: DEFAULT_ROOT.into(),
            session_timeout_ms: DEFAULT_SESSION_TIMEOUT_MS,
            request_timeout_ms: DEFAULT_REQUEST_TIMEOUT_MS,
            digest: None,
            tls: false,
            read_write_names: Vec::new(),
        }
    }

    /// Checks every option; the parsed connection string. Messages never
    /// quote the password.
    pub fn validate(&self) -> Result<ZkAddress, LockError> {
        let address = ZkAddress::parse(&self.connect)?;
        if self.root == "/" {
            return Err(LockError::invalid(
                "root must not be / (the locks need a directory of their own)",
            ));
        }
        validate_path(&self.root)
            .map_err(|why| LockError::invalid(format!("root {:?} {why}", self.root)))?;
        if self.root == "/zookeeper" || self.root.starts_with("/zookeeper/") {
            return Err(LockError::invalid(
                "root must not be under /zookeeper (the server's own subtree)",
            ));
        }
        if !(100..=3_600_000).contains(&self.session_timeout_ms) {
            return Err(LockError::invalid(
                "session_timeout_ms must be between 100 and 3600000",
            ));
        }
        if self.request_timeout_ms == 0 || self.request_timeout_ms > 600_000 {
            return Err(LockError::invalid(
                "request_timeout_ms must be between 1 and 600000",
            ));
        }
        if let Some(d) = &self.digest {
            if d.user.is_empty() || d.user.contains(':') {
                return Err(LockError::invalid(
                    "the digest user must be non-empty and must not contain ':'",
                ));
            }
            if d.password.is_empty() {
                return Err(LockError::invalid("the digest password must not be empty"));
            }
        }
        Ok(address)
    }
}

#[cfg(test)]
mod tests {
    use super::{ZkConfig, ZkDigest};

    #[test]
    fn defaults_validate_and_bad_options_say_which() {
        let c = ZkConfig::new("127.0.0.1:2181/chroot");
        let a = c.validate().unwrap();
        assert_eq!(a.chroot.as_deref(), Some("/chroot"));
        assert_eq!(
            (c.root.as_str(), c.session_timeout_ms),
            ("/edgelock", 30_000)
        );
        let bad = |edit: &dyn Fn(&mut ZkConfig), what: &str| {
            let mut c = ZkConfig::new("h");
            edit(&mut c);
            let e = c.validate().unwrap_err();
            assert_eq!(e.code(), "INVALID_ARGUMENT");
            assert!(e.to_string().contains(what), "{e}");
        };
        bad(&|c| c.root = "/".into(), "root");
        bad(&|c| c.root = "edgelock".into(), "root");
        bad(&|c| c.root = "/a/".into(), "root");
        bad(&|c| c.root = "/zookeeper/x".into(), "/zookeeper");
        bad(&|c| c.session_timeout_ms = 0, "session_timeout_ms");
        bad(&|c| c.request_timeout_ms = 0, "request_timeout_ms");
        bad(&|c| c.connect = "".into(), "at least one host");
        bad(
            &|c| {
                c.digest = Some(ZkDigest {
                    user: "a:b".into(),
                    password: "pw".into(),
                })
            },
            "digest user",
        );
    }

    #[test]
    fn debug_hides_the_password() {
        let mut c = ZkConfig::new("h");
        c.digest = Some(ZkDigest {
            user: "locker".into(),
            password: "s3cret-pw".into(),
        });
        assert!(c.validate().is_ok());
        let shown = format!("{c:?}");
        assert!(
            shown.contains("locker") && !shown.contains("s3cret-pw"),
            "{shown}"
        );
    }
}
