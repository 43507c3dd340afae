//! How the command line (`src/bin/edgelock`) reaches a backend: the flag
//! that names it, the variables its credentials come from, and its
//! configuration built from the flags ([`Backend::read_flags`]). The core
//! reads no arguments and no environment: the CLI parses the one and reads
//! the variables named here, and hands the values in as [`Flags`].
//!
//! The flags become a configuration directly, not JSON options: `--header`
//! is a list (order and repeats kept), where the JSON `headers` is a map.
//!
//! [`Backend::read_flags`]: super::Backend::read_flags

/// A backend's line on the command line ([`Backend::command_line`](super::Backend::command_line)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommandLine {
    /// The flag whose value names it (`--etcd`). Backends sharing a flag
    /// (`--redis`: one node, or Redlock over several) are told apart by how
    /// many URLs its value lists.
    pub flag: &'static str,
    /// How the flag's value lists its URLs.
    pub urls: UrlList,
    /// Where a bearer token not given as `--token` comes from: the first of
    /// these variables that is set. Empty: it takes no token.
    pub token_vars: &'static [&'static str],
    /// The flag naming a user (`--etcd-user`, `--zk-digest`) and the
    /// variable holding that user's password; `None`: it takes no user.
    pub user: Option<UserFlag>,
    /// Where the password of a `redis://` node comes from when neither its
    /// URL nor `--token` gives one: the first of these variables that is
    /// set (a token variable is not read for it: an Upstash token is no
    /// Redis password). Empty: it takes no `redis://` node.
    pub redis_password_vars: &'static [&'static str],
    /// Whether `--fair` (a FIFO wait queue) applies to it.
    pub fair: bool,
}

/// A backend's user flag and where its password comes from (never an
/// argument: arguments are visible to other local users).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UserFlag {
    /// The flag whose value is the user name (`--etcd-user`).
    pub flag: &'static str,
    /// The variable holding the password (`EDGELOCK_ETCD_PASSWORD`).
    pub password_var: &'static str,
}

/// How a flag's value lists URLs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UrlList {
    /// The whole value, trimmed, is one URL (commas and all).
    Whole,
    /// Comma-separated URLs (blank items dropped), `min..=max` of them.
    Commas {
        /// The fewest URLs the backend takes.
        min: usize,
        /// The most.
        max: usize,
    },
}

impl UrlList {
    /// The URLs `value` lists.
    pub fn read(self, value: &str) -> Vec<String> {
        if self == UrlList::Whole {
            return vec![value.trim().to_string()];
        }
        value
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect()
    }

    /// Whether the backend takes `count` URLs.
    pub fn admits(self, count: usize) -> bool {
        match self {
            UrlList::Whole => count == 1,
            UrlList::Commas { min, max } => (min..=max).contains(&count),
        }
    }
}

/// The command line's settings for one backend, credentials read already.
/// Each backend takes those that apply to it; the CLI refuses `--fair`, a
/// user flag and `--zk-root` where [`CommandLine`] says they do not.
#[derive(Clone, Debug, Default)]
pub struct Flags {
    /// The URLs the backend's flag listed.
    pub urls: Vec<String>,
    /// `--token`, else the first set variable of [`CommandLine::token_vars`].
    pub token: Option<String>,
    /// Whether `token` was read from a variable of
    /// [`CommandLine::token_vars`] rather than given (`--token`): a
    /// `redis://` node takes a given token as its password (and refuses it
    /// beside a password in its URL), never a token variable's.
    pub token_from_env: bool,
    /// The first set variable of [`CommandLine::redis_password_vars`]: the
    /// password of a `redis://` node whose URL and `--token` give none.
    pub redis_password: Option<String>,
    /// `--prefix`.
    pub prefix: Option<String>,
    /// `--ttl`: the lock's TTL (etcd: the session lease's).
    pub ttl_ms: Option<u64>,
    /// `--header`, in order.
    pub headers: Vec<(String, String)>,
    /// The user of [`CommandLine::user`]'s flag and the password from its
    /// variable.
    pub user: Option<(String, String)>,
    /// `--zk-root`: the ZooKeeper path under which the locks' nodes live.
    pub root: Option<String>,
    /// `--fair`.
    pub fair: bool,
}

impl Flags {
    /// The request timeout under `--ttl`: a request slower than `1/share`
    /// of the lease's life is useless for keeping it alive (and a lease
    /// must outlive one request), so `min(default_ms, ttl/share)`, at least 1.
    pub fn request_timeout(ttl_ms: u64, default_ms: u64, share: u64) -> u64 {
        default_ms.min(ttl_ms / share).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::Flags;
    use crate::core::backend::backend_named;
    use crate::core::durable::DurableEndpoint;
    use crate::core::etcd::EtcdConfig;
    use crate::core::redis::{RedisConfig, RedisNode, RedisProtocol, RedlockConfig};
    use crate::core::BackendSpec;

    fn flags(urls: &[&str]) -> Flags {
        Flags {
            urls: urls.iter().map(|u| u.to_string()).collect(),
            ..Flags::default()
        }
    }

    fn spec(backend: &str, flags: Flags) -> BackendSpec {
        backend_named(backend).unwrap().read_flags(flags).unwrap()
    }

    #[test]
    fn a_ttl_bounds_the_request_timeout_by_each_backends_share() {
        let etcd_default = EtcdConfig::new(vec![]).request_timeout_ms;
        let redis_default = RedisConfig::new(RedisNode::webdis("http://a")).request_timeout_ms;
        let redlock_default = RedlockConfig::new(vec![]).request_timeout_ms;
        let with_ttl = |urls: &[&str], ttl_ms| Flags {
            ttl_ms: Some(ttl_ms),
            ..flags(urls)
        };
        let BackendSpec::Etcd(c) = spec("etcd", with_ttl(&["http://a"], 3_000)) else {
            panic!("etcd")
        };
        assert_eq!(c.session_ttl_ms, 3_000);
        assert_eq!(c.request_timeout_ms, etcd_default.min(1_500));
        let BackendSpec::Redis(c) = spec("redis", with_ttl(&["webdis+http://a"], 1)) else {
            panic!("redis")
        };
        assert_eq!((c.ttl_ms, c.request_timeout_ms), (1, 1));
        let BackendSpec::Redis(c) = spec("redis", with_ttl(&["webdis+http://a"], 60_000)) else {
            panic!("redis")
        };
        assert_eq!(c.request_timeout_ms, redis_default);
        let BackendSpec::Redlock(c) = spec("redlock", with_ttl(&["http://a", "http://b"], 8_000))
        else {
            panic!("redlock")
        };
        assert_eq!(c.request_timeout_ms, redlock_default.min(2_000));
        let BackendSpec::DurableObject(c) = spec("durable-object", with_ttl(&["http://a"], 3_000))
        else {
            panic!("durable-object")
        };
        assert_eq!(
            (c.ttl_ms, c.request_timeout_ms),
            (3_000, 1_500.min(c.request_timeout_ms))
        );
    }

    #[test]
    fn each_backend_takes_the_flags_that_apply_to_it() {
        let headers = vec![("X".to_string(), "1".to_string()), ("X".into(), "2".into())];
        let all = |urls: &[&str]| Flags {
            token: Some("tok".into()),
            prefix: Some("p".into()),
            headers: headers.clone(),
            user: Some(("u".into(), "pw".into())),
            fair: true,
            ..flags(urls)
        };
        let BackendSpec::Etcd(c) = spec("etcd", all(&["http://a", "http://b"])) else {
            panic!("etcd")
        };
        // Repeated headers stay, in order (the JSON `headers` is a map).
        assert_eq!((c.endpoints.len(), c.headers.clone()), (2, headers.clone()));
        assert_eq!(
            (c.prefix.as_str(), c.auth.unwrap().username.as_str()),
            ("p", "u")
        );
        let BackendSpec::Redis(c) = spec("redis", all(&["upstash+https://a"])) else {
            panic!("redis")
        };
        assert_eq!((c.node.token.as_deref(), c.fair), (Some("tok"), true));
        assert_eq!(c.prefix, "p");
        let BackendSpec::Redlock(c) = spec("redlock", all(&["https://a", "webdis+http://b"]))
        else {
            panic!("redlock")
        };
        let tokens: Vec<Option<&str>> = c.nodes.iter().map(|n| n.token.as_deref()).collect();
        assert_eq!(tokens, [Some("tok"), None]);
        let BackendSpec::DurableObject(c) = spec("durable-object", all(&["https://w/lock"])) else {
            panic!("durable-object")
        };
        assert!(c.endpoint == DurableEndpoint::Url("https://w/lock".into()));
        assert_eq!(c.token.as_deref(), Some("tok"));
    }

    #[test]
    fn a_redis_url_takes_its_password_from_the_url_the_token_or_the_environment() {
        let node = |url: &str, token: Option<&str>, from_env: bool, env: Option<&str>| {
            let f = Flags {
                token: token.map(String::from),
                token_from_env: from_env,
                redis_password: env.map(String::from),
                ..flags(&[url])
            };
            match backend_named("redis").unwrap().read_flags(f) {
                Ok(BackendSpec::Redis(c)) => Ok(c.node),
                Ok(other) => panic!("{other:?}"),
                Err(e) => Err(e),
            }
        };
        let n = node("redis://:url-pw@h:6380/2", None, false, Some("env-pw")).unwrap();
        assert_eq!(
            (n.protocol, n.url.as_str(), n.token.as_deref()),
            (RedisProtocol::Resp, "redis://h:6380/2", Some("url-pw"))
        );
        let n = node("rediss://u@h", Some("flag-pw"), false, Some("env-pw")).unwrap();
        assert_eq!(n.token.as_deref(), Some("flag-pw"));
        let n = node("redis://h", None, false, Some("env-pw")).unwrap();
        assert_eq!(n.token.as_deref(), Some("env-pw"));
        // An Upstash token from the environment is no Redis password.
        let n = node("redis://h", Some("upstash-token"), true, None).unwrap();
        assert_eq!(n.token, None);
        let e = node("redis://:url-pw@h", Some("flag-pw"), false, None).unwrap_err();
        assert_eq!(e.code(), "INVALID_ARGUMENT");
        assert!(e.to_string().contains("once"), "{e}");
        let e = node("redis://:url-pw@h:0", None, false, None).unwrap_err();
        assert!(!e.to_string().contains("url-pw"), "{e}");
        // Redlock: an HTTP node takes the token, a redis:// node its password.
        let f = Flags {
            token: Some("tok".into()),
            token_from_env: true,
            redis_password: Some("env-pw".into()),
            ..flags(&["https://a", "redis://b", "redis://:own@c"])
        };
        let BackendSpec::Redlock(c) = spec("redlock", f) else {
            panic!("redlock")
        };
        let tokens: Vec<Option<&str>> = c.nodes.iter().map(|n| n.token.as_deref()).collect();
        assert_eq!(tokens, [Some("tok"), Some("env-pw"), Some("own")]);
    }

    #[test]
    fn bad_urls_and_backends_without_a_command_line_are_refused() {
        let e = backend_named("redis")
            .unwrap()
            .read_flags(flags(&["ftp://a"]))
            .unwrap_err();
        assert!(
            e.to_string().contains("must be redis://HOST:PORT")
                && e.to_string().contains("webdis+http://HOST:PORT"),
            "{e}"
        );
        let d1 = backend_named("d1").unwrap();
        assert!(d1.command_line().is_none());
        assert_eq!(
            d1.read_flags(flags(&["x"])).unwrap_err().code(),
            "INVALID_ARGUMENT"
        );
    }
}
