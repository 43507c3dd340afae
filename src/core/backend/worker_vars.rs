//! How a Cloudflare Worker's variables (`EDGELOCK_*`, the table in
//! `src/worker/config.rs`) configure each backend, read through
//! [`Backend::read_worker_vars`](super::Backend::read_worker_vars). The core
//! reads no environment: the Worker hands in its variables as [`Vars`], and
//! the variables every backend reads alike as [`WorkerCommon`].

use crate::core::LockError;

/// How the Worker reads a variable: the binding's value as a string, if set.
pub type Vars<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The Durable Object namespace binding the `durable-object` backend uses
/// in the Worker (declared in `wrangler.toml`).
pub const LOCKS_BINDING: &str = "EDGELOCK_LOCKS";

/// The D1 database binding the `d1` backend uses in the Worker (declared in
/// `wrangler.toml`).
pub const D1_BINDING: &str = "EDGELOCK_D1";

/// Connections a Workers invocation may hold open at once; more wait until
/// one closes.
pub const OPEN_CONNECTIONS: usize = 6;

/// The default cap on a Redis client's wake-up subscriptions in a Worker.
/// A waiting acquire holds one streaming request open per subscribed node
/// and sends an attempt round to all `nodes` at once, so the two together
/// must stay within [`OPEN_CONNECTIONS`] (`EDGELOCK_MAX_SUBSCRIPTIONS` = 3
/// on three Redlock nodes, 1 on five). The default subscribes on one node
/// (5) and not on Redlock (0: the waiter polls): every release wakes every
/// Redlock waiter for a round on every node, and a burst of 20 concurrent
/// short jobs then spent more than the invocation's 50 subrequests
/// (measured by the Worker suite), where polling stays under 30. Each
/// subscription is a subrequest: the budget counts it.
pub fn workers_max_subscriptions(nodes: usize) -> usize {
    if nodes > 1 {
        return 0;
    }
    OPEN_CONNECTIONS.saturating_sub(nodes)
}

/// The variables several backends read alike (each applies those it has),
/// read and checked by the Worker before the backend is known.
#[derive(Clone, Debug, Default)]
pub struct WorkerCommon {
    /// `EDGELOCK_PREFIX`.
    pub prefix: Option<String>,
    /// `EDGELOCK_TTL_MS`.
    pub ttl: Option<u64>,
    /// `EDGELOCK_REQUEST_TIMEOUT_MS`.
    pub timeout: Option<u64>,
    /// `EDGELOCK_MAX_SUBSCRIPTIONS`.
    pub max_subscriptions: Option<usize>,
}

/// An invalid argument read from variable `name`, its message led by the
/// variable's name (never its value: it may hold a password).
pub(crate) fn in_var(name: &str) -> impl Fn(LockError) -> LockError + '_ {
    move |e| match e {
        LockError::InvalidArgument { message } => LockError::invalid(format!("{name}: {message}")),
        other => other,
    }
}

/// A comma-separated variable's items (blank ones dropped).
pub fn list(v: &str) -> Vec<String> {
    v.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::{workers_max_subscriptions, WorkerCommon, D1_BINDING, LOCKS_BINDING};
    use crate::core::backend::{backend_named, Binding, BindingKind};
    use crate::core::durable::DurableEndpoint;
    use crate::core::redis::RedisProtocol;
    use crate::core::{BackendSpec, LockError};

    fn read(
        backend: &str,
        vars: &[(&str, &str)],
        common: WorkerCommon,
    ) -> Result<BackendSpec, LockError> {
        let vars: BTreeMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let var = |name: &str| vars.get(name).cloned();
        backend_named(backend)
            .unwrap()
            .read_worker_vars(&var, common)
    }

    fn message(r: Result<BackendSpec, LockError>) -> String {
        match r {
            Err(LockError::InvalidArgument { message }) => message,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn each_backend_names_its_missing_variable() {
        let none = WorkerCommon::default;
        for (backend, says) in [
            (
                "etcd",
                "EDGELOCK_ETCD_ENDPOINTS is required for the etcd backend",
            ),
            (
                "redis",
                "EDGELOCK_REDIS_URL is required for the redis backend",
            ),
            (
                "redlock",
                "EDGELOCK_REDLOCK_NODES is required for the redlock backend",
            ),
        ] {
            assert_eq!(message(read(backend, &[], none())), says);
        }
        let secret = [
            ("EDGELOCK_ETCD_ENDPOINTS", "http://a"),
            ("EDGELOCK_ETCD_USER", "u"),
        ];
        assert_eq!(
            message(read("etcd", &secret, none())),
            "EDGELOCK_ETCD_USER needs the secret EDGELOCK_ETCD_PASSWORD"
        );
    }

    #[test]
    fn etcd_reads_its_variables_and_the_common_ones() {
        let common = WorkerCommon {
            prefix: Some("p".into()),
            ttl: Some(7_000),
            timeout: Some(900),
            max_subscriptions: Some(2),
        };
        let vars = [
            ("EDGELOCK_ETCD_ENDPOINTS", " http://a , ,http://b"),
            ("EDGELOCK_ETCD_AUTHORIZATION", "Bearer x"),
            ("EDGELOCK_ETCD_USER", "u"),
            ("EDGELOCK_ETCD_PASSWORD", "pw"),
        ];
        let Ok(BackendSpec::Etcd(c)) = read("etcd", &vars, common) else {
            panic!("etcd")
        };
        assert_eq!(c.endpoints, ["http://a", "http://b"]);
        assert_eq!(c.headers, [("Authorization".into(), "Bearer x".into())]);
        let auth = c.auth.unwrap();
        assert_eq!(
            (auth.username.as_str(), auth.password.as_str()),
            ("u", "pw")
        );
        assert_eq!(
            (c.prefix.as_str(), c.session_ttl_ms, c.request_timeout_ms),
            ("p", 7_000, 900)
        );
    }

    #[test]
    fn redis_nodes_take_their_tokens_and_a_subscription_cap() {
        let vars = [
            ("EDGELOCK_REDIS_URL", "upstash+https://a"),
            ("EDGELOCK_REDIS_TOKEN", "t"),
        ];
        let Ok(BackendSpec::Redis(c)) = read("redis", &vars, WorkerCommon::default()) else {
            panic!("redis")
        };
        assert_eq!(c.node.token.as_deref(), Some("t"));
        assert_eq!(c.max_subscriptions, workers_max_subscriptions(1));
        assert_eq!(c.max_subscriptions, 5);
        let vars = [
            (
                "EDGELOCK_REDLOCK_NODES",
                "http://a,webdis+http://b,http://c",
            ),
            ("EDGELOCK_REDIS_TOKEN", "t"),
            ("EDGELOCK_REDIS_TOKEN_2", "t2"),
        ];
        let common = WorkerCommon {
            ttl: Some(4_000),
            ..WorkerCommon::default()
        };
        let Ok(BackendSpec::Redlock(c)) = read("redlock", &vars, common) else {
            panic!("redlock")
        };
        let tokens: Vec<Option<&str>> = c.nodes.iter().map(|n| n.token.as_deref()).collect();
        assert_eq!(tokens, [Some("t"), None, Some("t2")]);
        assert_eq!(c.nodes[1].protocol, RedisProtocol::Webdis);
        assert_eq!((c.max_subscriptions, c.ttl_ms), (0, 4_000));
        let common = WorkerCommon {
            max_subscriptions: Some(3),
            ..WorkerCommon::default()
        };
        let Ok(BackendSpec::Redlock(c)) = read("redlock", &vars, common) else {
            panic!("redlock")
        };
        assert_eq!(c.max_subscriptions, 3);
    }

    #[test]
    fn redis_urls_take_their_password_from_the_url_or_the_token_variable() {
        let none = WorkerCommon::default;
        let vars = [("EDGELOCK_REDIS_URL", "rediss://alice:hunter2@cache:6380/1")];
        let Ok(BackendSpec::Redis(c)) = read("redis", &vars, none()) else {
            panic!("redis")
        };
        assert_eq!(c.node.protocol, RedisProtocol::Resp);
        assert_eq!(
            (c.node.url.as_str(), c.node.token.as_deref()),
            ("rediss://alice@cache:6380/1", Some("hunter2"))
        );
        let vars = [
            ("EDGELOCK_REDIS_URL", "redis://cache"),
            ("EDGELOCK_REDIS_TOKEN", "pw"),
        ];
        let Ok(BackendSpec::Redis(c)) = read("redis", &vars, none()) else {
            panic!("redis")
        };
        assert_eq!(c.node.token.as_deref(), Some("pw"));
        let twice = [
            ("EDGELOCK_REDIS_URL", "redis://:hunter2@cache"),
            ("EDGELOCK_REDIS_TOKEN", "pw"),
        ];
        let bad = [("EDGELOCK_REDIS_URL", "redis://:hunter2@cache:0")];
        for (vars, says) in [(&twice[..], "once"), (&bad[..], "port")] {
            let m = message(read("redis", vars, none()));
            assert!(
                m.starts_with("EDGELOCK_REDIS_URL: ") && m.contains(says),
                "{m}"
            );
            assert!(!m.contains("hunter2"), "{m}");
        }
        // Redlock: the shared token goes to the HTTP nodes and to a redis://
        // node without a password of its own; a node's own token variable
        // beside its URL's password is refused.
        let vars = [
            (
                "EDGELOCK_REDLOCK_NODES",
                "https://a,redis://:own@b,redis://c,rediss://d",
            ),
            ("EDGELOCK_REDIS_TOKEN", "shared"),
            ("EDGELOCK_REDIS_TOKEN_3", "pw3"),
        ];
        let Ok(BackendSpec::Redlock(c)) = read("redlock", &vars, none()) else {
            panic!("redlock")
        };
        let tokens: Vec<Option<&str>> = c.nodes.iter().map(|n| n.token.as_deref()).collect();
        assert_eq!(
            tokens,
            [Some("shared"), Some("own"), Some("shared"), Some("pw3")]
        );
        let protocols: Vec<RedisProtocol> = c.nodes.iter().map(|n| n.protocol).collect();
        assert_eq!(protocols[1..], [RedisProtocol::Resp; 3]);
        let vars = [
            ("EDGELOCK_REDLOCK_NODES", "https://a,redis://:hunter2@b"),
            ("EDGELOCK_REDIS_TOKEN_1", "pw1"),
        ];
        let m = message(read("redlock", &vars, none()));
        assert!(
            m.starts_with("EDGELOCK_REDLOCK_NODES[1]: ") && m.contains("once"),
            "{m}"
        );
        assert!(!m.contains("hunter2"), "{m}");
    }

    #[test]
    fn the_lease_backends_go_through_the_workers_bindings() {
        let common = || WorkerCommon {
            ttl: Some(3_000),
            timeout: Some(700),
            ..WorkerCommon::default()
        };
        let durable = read("durable-object", &[], common()).unwrap();
        let BackendSpec::DurableObject(c) = &durable else {
            panic!("durable-object")
        };
        assert!(c.endpoint == DurableEndpoint::Binding(LOCKS_BINDING.into()));
        assert_eq!((c.ttl_ms, c.request_timeout_ms), (3_000, 700));
        let d1 = read("d1", &[], common()).unwrap();
        assert_eq!(
            d1.config().binding(),
            Some(Binding {
                name: D1_BINDING,
                kind: BindingKind::D1Database
            })
        );
    }
}
