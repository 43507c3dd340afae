//! Which backend a client talks to, as data (so worker processes can be
//! told on their command line), and how to build its client.
//!
//! The variants are how scenarios write a backend down; nothing here
//! matches on them. Every variant serialises to one shape ([`Settings`]:
//! its `kind` is the name of its entry in the core's backend table), and the
//! client is built through that entry: its configuration from the URLs,
//! token and TTL ([`Backend::read_flags`], the command line's reading), then
//! the tool's settings written over the JSON options the backend has.

use edgelock::core::backend::{backend_named, Backend, Flags};
use edgelock::core::{BackendSpec as Registry, LockError};
use edgelock::native::Client;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "kind")]
pub enum BackendSpec {
    #[serde(rename = "etcd")]
    Etcd {
        endpoints: Vec<String>,
        ttl_ms: u64,
        request_timeout_ms: u64,
    },
    /// One Redis node: `webdis+http://…`, `upstash+http://…` (with `token`),
    /// or `redis://host:port` / `rediss://…` (the Redis protocol over a TCP
    /// stream, built by `RedisNode::resp`; `token` is then its password).
    /// [`BackendSpec::redis_tcp`] writes the last down.
    #[serde(rename = "redis")]
    Redis {
        node: String,
        token: Option<String>,
        ttl_ms: u64,
        request_timeout_ms: u64,
    },
    /// Redlock over these nodes, each written as [`BackendSpec::Redis`]'s
    /// `node` (HTTP and TCP nodes may be mixed; `token` is every node's).
    #[serde(rename = "redlock")]
    Redlock {
        nodes: Vec<String>,
        token: Option<String>,
        ttl_ms: u64,
        request_timeout_ms: u64,
        /// The opt-in `RedlockFencing::Folded` instead of the default `Strict`.
        #[serde(default)]
        folded: bool,
    },
    /// The lock service (Durable Objects) through the Worker's front
    /// `<url>` = `http://…/lock` (the client adds `/v1/<op>`), with its bearer token.
    #[serde(rename = "durable-object", alias = "durable")]
    Durable {
        url: String,
        token: String,
        ttl_ms: u64,
        request_timeout_ms: u64,
        /// Renew held locks at TTL/3 (false: a lease ends on its own).
        #[serde(default = "yes")]
        auto_extend: bool,
    },
    /// A ZooKeeper ensemble: `connect` is its connect string
    /// (`host:port[,host:port][/chroot]`); the lock's TTL is the requested
    /// session timeout (the server clamps it into `[2, 20] × tickTime`).
    #[serde(rename = "zookeeper")]
    ZooKeeper {
        connect: String,
        ttl_ms: u64,
        request_timeout_ms: u64,
    },
}

fn yes() -> bool {
    true
}

/// The one shape every [`BackendSpec`] variant serialises to: a variant's
/// URL field (`endpoints`, `node`, `nodes`, `url`) and token, its lock TTL
/// and request timeout, and the knobs some variants have.
#[derive(Deserialize)]
struct Settings {
    /// The backend's name in the core's table.
    kind: String,
    #[serde(default, alias = "endpoints", alias = "nodes")]
    urls: Vec<String>,
    #[serde(alias = "node", alias = "connect")]
    url: Option<String>,
    token: Option<String>,
    ttl_ms: u64,
    request_timeout_ms: u64,
    #[serde(default)]
    folded: bool,
    #[serde(default = "yes")]
    auto_extend: bool,
}

/// What the tool sets on every backend that has the option: retries come
/// quicker than the library's default, so that contention shows in a short run.
const RETRY_DELAY_MS: u64 = 50;
const RETRY_JITTER_MS: u64 = 50;

/// How a node's requests travel, as a label says it: `webdis`, `upstash`,
/// `tcp` (`redis://`, the Redis protocol) or `tls` (`rediss://`).
fn transport_of(url: &str) -> &'static str {
    let lower = url.to_ascii_lowercase();
    if lower.starts_with("webdis+") {
        "webdis"
    } else if lower.starts_with("redis://") {
        "tcp"
    } else if lower.starts_with("rediss://") {
        "tls"
    } else {
        "upstash"
    }
}

impl BackendSpec {
    /// One Redis node over TCP: `url` is `redis://host:port` (or `rediss://`),
    /// `password` its AUTH password, if any.
    pub fn redis_tcp(
        url: &str,
        password: Option<&str>,
        ttl_ms: u64,
        request_timeout_ms: u64,
    ) -> Self {
        BackendSpec::Redis {
            node: url.to_string(),
            token: password.map(str::to_string),
            ttl_ms,
            request_timeout_ms,
        }
    }

    /// Redlock (strict fencing) over Redis nodes reached over TCP
    /// (`redis://host:port` each), no password.
    pub fn redlock_tcp(urls: Vec<String>, ttl_ms: u64, request_timeout_ms: u64) -> Self {
        BackendSpec::Redlock {
            nodes: urls,
            token: None,
            ttl_ms,
            request_timeout_ms,
            folded: false,
        }
    }

    fn settings(&self) -> Settings {
        let json = serde_json::to_value(self).expect("a BackendSpec serialises");
        serde_json::from_value(json).expect("every BackendSpec variant has the Settings shape")
    }

    /// Its entry in the core's backend table.
    pub fn backend(&self) -> &'static dyn Backend {
        let kind = self.settings().kind;
        // A test checks that every variant is named after an entry.
        backend_named(&kind).unwrap_or_else(|| panic!("no backend named {kind:?}"))
    }

    /// The backend's name (`etcd`, `redis`, `redlock`, `durable-object`, `zookeeper`).
    pub fn kind(&self) -> &'static str {
        self.backend().name()
    }

    pub fn ttl_ms(&self) -> u64 {
        self.settings().ttl_ms
    }

    /// Every URL its requests go to, as written (`webdis+http://…`).
    pub fn urls(&self) -> Vec<String> {
        let s = self.settings();
        s.url.into_iter().chain(s.urls).collect()
    }

    /// Whether it talks to webdis (whose pub/sub misroutes, see
    /// `scenarios::s01_paused_holder::WEBDIS_OBSERVE_ERRORS`).
    pub fn on_webdis(&self) -> bool {
        self.urls().iter().any(|u| u.starts_with("webdis+"))
    }

    /// Whether every node is reached over the Redis protocol on a TCP
    /// stream (`redis://`), not through an HTTP front.
    pub fn on_tcp(&self) -> bool {
        let urls = self.urls();
        !urls.is_empty() && urls.iter().all(|u| transport_of(u) == "tcp")
    }

    /// The backend's name and, on webdis or TCP, its nodes: `redlock (5 ×
    /// webdis)`, `redis (webdis)`, `redlock (3 × tcp)`, `redis (tcp)`, `etcd`.
    pub fn label(&self) -> String {
        let kind = self.kind();
        if kind != "redis" && kind != "redlock" {
            return kind.to_string();
        }
        let shown: Vec<&str> = self
            .urls()
            .iter()
            .map(|u| transport_of(u))
            .filter(|t| *t != "upstash")
            .collect();
        match shown.as_slice() {
            [] => kind.to_string(),
            [one] => format!("{kind} ({one})"),
            [first, rest @ ..] if rest.iter().all(|t| t == first) => {
                format!("{kind} ({} × {first})", shown.len())
            }
            _ => format!("{kind} ({} nodes, mixed)", shown.len()),
        }
    }

    /// Whether its waiters get the lock in arrival order (the lock service's
    /// queue, a fair Redis lock), so that no contender starves.
    pub fn queues_waiters_in_order(&self) -> bool {
        self.registry()
            .is_ok_and(|spec| spec.config().queues_waiters_in_order())
    }

    /// The core's spec: the backend's configuration from the URLs, token
    /// and TTL, with the tool's settings over the options the backend has.
    pub fn registry(&self) -> Result<Registry, LockError> {
        let s = self.settings();
        let backend = self.backend();
        if let BackendSpec::ZooKeeper { connect, .. } = self {
            return zookeeper_registry(connect, &s);
        }
        let flags = Flags {
            urls: s.url.clone().into_iter().chain(s.urls.clone()).collect(),
            token: s.token.clone(),
            ttl_ms: Some(s.ttl_ms),
            ..Flags::default()
        };
        let spec = backend.read_flags(flags)?;
        let mut options: Map<String, Value> =
            serde_json::from_str(&spec.to_json()).map_err(|e| LockError::invalid(e.to_string()))?;
        for (option, value) in tool_options(&s) {
            if let Some(v) = options.get_mut(option) {
                *v = value;
            }
        }
        Registry::from_json(backend.kind(), &Value::Object(options).to_string())
    }

    /// A new client (its own session and driver thread).
    pub fn client(&self) -> Result<Client, LockError> {
        Client::connect(self.registry()?)
    }
}

/// ZooKeeper has no command-line reading (its flags are not built yet):
/// its JSON options straight from the connect string, with the TTL as the
/// requested session timeout.
fn zookeeper_registry(connect: &str, s: &Settings) -> Result<Registry, LockError> {
    let session_timeout_ms =
        u32::try_from(s.ttl_ms).map_err(|e| LockError::invalid(e.to_string()))?;
    let options = serde_json::json!({
        "connect": connect,
        "sessionTimeoutMs": session_timeout_ms,
        "requestTimeoutMs": s.request_timeout_ms,
    });
    Registry::from_json(edgelock::core::BackendKind::ZooKeeper, &options.to_string())
}

/// The tool's settings as JSON options (the npm spelling), each applied to
/// the backends that have it.
fn tool_options(s: &Settings) -> Vec<(&'static str, Value)> {
    let mut options = vec![
        ("requestTimeoutMs", s.request_timeout_ms.into()),
        ("retryDelayMs", RETRY_DELAY_MS.into()),
        ("retryJitterMs", RETRY_JITTER_MS.into()),
        ("fencing", if s.folded { "folded" } else { "strict" }.into()),
        ("autoExtend", s.auto_extend.into()),
    ];
    let max_subscriptions = std::env::var("RELIABILITY_REDIS_MAX_SUBSCRIPTIONS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok());
    if let Some(n) = max_subscriptions {
        options.push(("maxSubscriptions", n.into()));
    }
    options
}

#[cfg(test)]
mod tests {
    use edgelock::core::redis::RedlockFencing;
    use edgelock::core::BackendSpec as Registry;

    use super::BackendSpec;

    fn every_variant() -> [BackendSpec; 5] {
        [
            BackendSpec::Etcd {
                endpoints: vec!["http://a:2379".into(), "http://b:2379".into()],
                ttl_ms: 3_000,
                request_timeout_ms: 700,
            },
            BackendSpec::Redis {
                node: "upstash+http://a:8080".into(),
                token: Some("tok".into()),
                ttl_ms: 4_000,
                request_timeout_ms: 800,
            },
            BackendSpec::Redlock {
                nodes: vec!["webdis+http://a:7379".into(), "webdis+http://b:7379".into()],
                token: None,
                ttl_ms: 5_000,
                request_timeout_ms: 900,
                folded: true,
            },
            BackendSpec::Durable {
                url: "http://w/lock".into(),
                token: "t".into(),
                ttl_ms: 6_000,
                request_timeout_ms: 1_000,
                auto_extend: false,
            },
            BackendSpec::ZooKeeper {
                connect: "127.0.0.1:2181,127.0.0.1:2182/chroot".into(),
                ttl_ms: 2_000,
                request_timeout_ms: 600,
            },
        ]
    }

    #[test]
    fn every_variant_names_a_backend_and_survives_the_command_line() {
        let names: Vec<&str> = every_variant().iter().map(|s| s.kind()).collect();
        assert_eq!(
            names,
            ["etcd", "redis", "redlock", "durable-object", "zookeeper"]
        );
        for spec in every_variant() {
            let json = serde_json::to_string(&spec).unwrap();
            let back: BackendSpec = serde_json::from_str(&json).unwrap();
            assert_eq!(serde_json::to_string(&back).unwrap(), json);
        }
        assert_eq!(every_variant()[2].label(), "redlock (2 × webdis)");
        assert_eq!(every_variant()[0].label(), "etcd");
        assert!(!every_variant()[1].on_webdis());
        let in_order: Vec<bool> = every_variant()
            .iter()
            .map(|s| s.queues_waiters_in_order())
            .collect();
        assert_eq!(in_order, [false, false, false, true, true]);
    }

    /// A `redis://` node is the Redis protocol over TCP, built as
    /// `RedisNode::resp` builds it (the password kept out of the URL), alone
    /// or as Redlock's nodes; it survives the worker's command line.
    #[test]
    fn tcp_nodes_are_resp_nodes() {
        use edgelock::core::redis::{RedisNode, RedisProtocol};
        let single = BackendSpec::redis_tcp("redis://127.0.0.1:6390", Some("pw"), 2_000, 500);
        let json = serde_json::to_string(&single).unwrap();
        let back: BackendSpec = serde_json::from_str(&json).unwrap();
        let Registry::Redis(c) = back.registry().unwrap() else {
            panic!()
        };
        let expected = RedisNode::resp("redis://127.0.0.1:6390", Some("pw")).unwrap();
        assert_eq!(c.node.protocol, RedisProtocol::Resp);
        assert_eq!(
            (c.node.url.as_str(), c.node.token.as_deref()),
            (expected.url.as_str(), Some("pw"))
        );
        assert_eq!((c.ttl_ms, c.request_timeout_ms), (2_000, 500));
        assert_eq!(single.label(), "redis (tcp)");
        assert!(single.on_tcp() && !single.on_webdis());
        let urls: Vec<String> = (0..3)
            .map(|i| format!("redis://127.0.0.1:{}", 6400 + i))
            .collect();
        let redlock = BackendSpec::redlock_tcp(urls, 3_000, 400);
        assert_eq!(redlock.label(), "redlock (3 × tcp)");
        let Registry::Redlock(c) = redlock.registry().unwrap() else {
            panic!()
        };
        assert!(c.nodes.iter().all(|n| n.protocol == RedisProtocol::Resp));
        assert_eq!(c.fencing, RedlockFencing::Strict);
        let mixed = BackendSpec::Redlock {
            nodes: vec![
                "redis://a:1".into(),
                "webdis+http://b:2".into(),
                "upstash+http://c:3".into(),
            ],
            token: None,
            ttl_ms: 3_000,
            request_timeout_ms: 400,
            folded: false,
        };
        assert_eq!(mixed.label(), "redlock (2 nodes, mixed)");
        assert!(!mixed.on_tcp());
    }

    /// The configurations the tool built by hand before it went through the table.
    #[test]
    fn each_variant_configures_its_backend_as_before() {
        let [etcd, redis, redlock, durable, _] = every_variant().map(|s| s.registry().unwrap());
        let Registry::Etcd(c) = etcd else { panic!() };
        assert_eq!(c.endpoints, ["http://a:2379", "http://b:2379"]);
        assert_eq!((c.session_ttl_ms, c.request_timeout_ms), (3_000, 700));
        let Registry::Redis(c) = redis else { panic!() };
        assert_eq!(
            (c.node.url.as_str(), c.node.token.as_deref()),
            ("http://a:8080", Some("tok"))
        );
        assert_eq!((c.ttl_ms, c.request_timeout_ms), (4_000, 800));
        assert_eq!(
            (c.retry_delay_ms, c.retry_jitter_ms, c.auto_extend),
            (50, 50, true)
        );
        let Registry::Redlock(c) = redlock else {
            panic!()
        };
        assert_eq!(
            (c.nodes.len(), c.ttl_ms, c.request_timeout_ms),
            (2, 5_000, 900)
        );
        assert_eq!((c.retry_delay_ms, c.retry_jitter_ms), (50, 50));
        assert_eq!(c.fencing, RedlockFencing::Folded);
        let Registry::DurableObject(c) = durable else {
            panic!()
        };
        assert_eq!(
            (c.url(), c.token.as_deref()),
            (Some("http://w/lock"), Some("t"))
        );
        assert_eq!(
            (c.ttl_ms, c.request_timeout_ms, c.auto_extend),
            (6_000, 1_000, false)
        );
    }

    /// The connect string, the TTL as the session timeout, the request timeout.
    #[test]
    fn zookeeper_maps_connect_and_session_timeout() {
        let zk = every_variant()[4].clone();
        assert_eq!(zk.label(), "zookeeper");
        let Registry::ZooKeeper(c) = zk.registry().unwrap() else {
            panic!()
        };
        assert_eq!(c.connect, "127.0.0.1:2181,127.0.0.1:2182/chroot");
        assert_eq!((c.session_timeout_ms, c.request_timeout_ms), (2_000, 600));
        assert_eq!(zk.ttl_ms(), 2_000);
    }
}
