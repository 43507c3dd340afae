//! Which backend a client talks to, as data (so worker processes can be
//! told on their command line), and how to build its client.

use edgelock::core::durable::{DurableConfig, DurableEndpoint};
use edgelock::core::etcd::EtcdConfig;
use edgelock::core::redis::{RedisConfig, RedisNode, RedlockConfig, RedlockFencing};
use edgelock::core::{BackendSpec as Registry, LockError};
use edgelock::native::Client;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum BackendSpec {
    Etcd {
        endpoints: Vec<String>,
        ttl_ms: u64,
        request_timeout_ms: u64,
    },
    /// One Redis node: `webdis+http://…` or `upstash+http://…` (with `token`).
    Redis {
        node: String,
        token: Option<String>,
        ttl_ms: u64,
        request_timeout_ms: u64,
    },
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
    Durable {
        url: String,
        token: String,
        ttl_ms: u64,
        request_timeout_ms: u64,
        /// Renew held locks at TTL/3 (false: a lease ends on its own).
        #[serde(default = "yes")]
        auto_extend: bool,
    },
}

fn yes() -> bool {
    true
}

impl BackendSpec {
    pub fn kind(&self) -> &'static str {
        match self {
            BackendSpec::Etcd { .. } => "etcd",
            BackendSpec::Redis { .. } => "redis",
            BackendSpec::Redlock { .. } => "redlock",
            BackendSpec::Durable { .. } => "durable-object",
        }
    }

    pub fn ttl_ms(&self) -> u64 {
        match self {
            BackendSpec::Etcd { ttl_ms, .. }
            | BackendSpec::Redis { ttl_ms, .. }
            | BackendSpec::Redlock { ttl_ms, .. }
            | BackendSpec::Durable { ttl_ms, .. } => *ttl_ms,
        }
    }

    /// A new client (its own session and driver thread).
    pub fn client(&self) -> Result<Client, LockError> {
        match self {
            BackendSpec::Etcd {
                endpoints,
                ttl_ms,
                request_timeout_ms,
            } => {
                let mut cfg = EtcdConfig::new(endpoints.clone());
                cfg.session_ttl_ms = *ttl_ms;
                cfg.request_timeout_ms = *request_timeout_ms;
                Client::connect(Registry::Etcd(cfg))
            }
            BackendSpec::Redis {
                node,
                token,
                ttl_ms,
                request_timeout_ms,
            } => {
                let mut cfg = RedisConfig::new(RedisNode::from_spec(node, token.as_deref())?);
                cfg.ttl_ms = *ttl_ms;
                cfg.request_timeout_ms = *request_timeout_ms;
                cfg.retry_delay_ms = 50;
                cfg.retry_jitter_ms = 50;
                if let Some(n) = std::env::var("RELIABILITY_REDIS_MAX_SUBSCRIPTIONS")
                    .ok()
                    .and_then(|v| v.parse().ok())
                {
                    cfg.max_subscriptions = n;
                }
                Client::connect(Registry::Redis(cfg))
            }
            BackendSpec::Redlock {
                nodes,
                token,
                ttl_ms,
                request_timeout_ms,
                folded,
            } => {
                let nodes = nodes
                    .iter()
                    .map(|n| RedisNode::from_spec(n, token.as_deref()))
                    .collect::<Result<Vec<_>, _>>()?;
                let mut cfg = RedlockConfig::new(nodes);
                cfg.ttl_ms = *ttl_ms;
                cfg.request_timeout_ms = *request_timeout_ms;
                cfg.retry_delay_ms = 50;
                cfg.retry_jitter_ms = 50;
                cfg.fencing = if *folded {
                    RedlockFencing::Folded
                } else {
                    RedlockFencing::Strict
                };
                Client::connect(Registry::Redlock(cfg))
            }
            BackendSpec::Durable {
                url,
                token,
                ttl_ms,
                request_timeout_ms,
                auto_extend,
            } => {
                let mut cfg = DurableConfig::new(DurableEndpoint::Url(url.clone()));
                cfg.token = Some(token.clone());
                cfg.ttl_ms = *ttl_ms;
                cfg.request_timeout_ms = *request_timeout_ms;
                cfg.auto_extend = *auto_extend;
                Client::connect(Registry::DurableObject(cfg))
            }
        }
    }
}
