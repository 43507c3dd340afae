//! The checked options -> a connected [`Client`] of the backend they name.
//! Credentials not given as flags come from the environment here.

use edgelock::core::durable::{DurableConfig, DurableEndpoint};
use edgelock::core::redis::{RedisConfig, RedisNode, RedlockConfig};
use edgelock::core::BackendSpec;
use edgelock::native::{Client, ClientOptions, EtcdAuth, EtcdConfig};

use crate::args::{Backend, Options};
use crate::Exit;

pub(crate) fn connect(o: &Options) -> Result<Client, Exit> {
    let spec = match &o.backend {
        Backend::Etcd(endpoints) => etcd_spec(o, endpoints)?,
        Backend::Redis(urls) => redis_spec(o, urls)?,
        Backend::DurableObject(url) => durable_spec(o, url),
    };
    Client::connect_with(spec, &ClientOptions::new().with_tls(o.tls.clone()))
        .map_err(|e| Exit::lock(&e))
}

/// A request slower than `1/share` of the lease's life is useless for
/// keeping it alive (and a lease must outlive one request).
fn request_timeout(default_ms: u64, ttl_ms: u64, share: u64) -> u64 {
    default_ms.min(ttl_ms / share).max(1)
}

fn etcd_spec(o: &Options, endpoints: &[String]) -> Result<BackendSpec, Exit> {
    let mut cfg = EtcdConfig::new(endpoints.to_vec());
    if let Some(p) = &o.prefix {
        cfg.prefix = p.clone();
    }
    if let Some(t) = o.ttl_ms {
        cfg.session_ttl_ms = t;
        cfg.request_timeout_ms = request_timeout(cfg.request_timeout_ms, t, 2);
    }
    cfg.headers = o.headers.clone();
    if let Some(user) = &o.etcd_user {
        let password = std::env::var("EDGELOCK_ETCD_PASSWORD").map_err(|_| {
            Exit::usage("--etcd-user needs the password in $EDGELOCK_ETCD_PASSWORD")
        })?;
        cfg.auth = Some(EtcdAuth {
            username: user.clone(),
            password,
        });
    }
    Ok(BackendSpec::Etcd(cfg))
}

/// One node: the single-node lock; several: Redlock over them.
fn redis_spec(o: &Options, urls: &[String]) -> Result<BackendSpec, Exit> {
    let token = o
        .token
        .clone()
        .or_else(|| std::env::var("EDGELOCK_REDIS_TOKEN").ok())
        .or_else(|| std::env::var("UPSTASH_REDIS_REST_TOKEN").ok());
    let nodes = urls
        .iter()
        .map(|u| redis_node(u, token.as_deref()))
        .collect::<Result<Vec<_>, _>>()?;
    if let [node] = nodes.as_slice() {
        let mut cfg = RedisConfig::new(node.clone());
        cfg.fair = o.fair;
        if let Some(p) = &o.prefix {
            cfg.prefix = p.clone();
        }
        if let Some(t) = o.ttl_ms {
            cfg.ttl_ms = t;
            cfg.request_timeout_ms = request_timeout(cfg.request_timeout_ms, t, 2);
        }
        return Ok(BackendSpec::Redis(cfg));
    }
    let mut cfg = RedlockConfig::new(nodes);
    if let Some(p) = &o.prefix {
        cfg.prefix = p.clone();
    }
    if let Some(t) = o.ttl_ms {
        cfg.ttl_ms = t;
        cfg.request_timeout_ms = request_timeout(cfg.request_timeout_ms, t, 4);
    }
    Ok(BackendSpec::Redlock(cfg))
}

/// `webdis+http(s)://…`, `upstash+http(s)://…` or a bare Upstash URL → a node (parsed by the core).
fn redis_node(url: &str, token: Option<&str>) -> Result<RedisNode, Exit> {
    RedisNode::from_spec(url, token).map_err(|e| Exit::lock(&e))
}

fn durable_spec(o: &Options, url: &str) -> BackendSpec {
    let mut cfg = DurableConfig::new(DurableEndpoint::Url(url.to_string()));
    cfg.token = o
        .token
        .clone()
        .or_else(|| std::env::var("EDGELOCK_API_TOKEN").ok());
    if let Some(t) = o.ttl_ms {
        cfg.ttl_ms = t;
        cfg.request_timeout_ms = request_timeout(cfg.request_timeout_ms, t, 2);
    }
    BackendSpec::DurableObject(cfg)
}
