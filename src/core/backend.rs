//! The backend registry: [`BackendSpec`] describes a backend as data, and
//! [`BackendSpec::build`] is the one constructor of lock machines, used by the
//! npm bindings, the Worker, the CLI and the reliability tool alike.
//!
//! The serialised form is one JSON spelling (camelCase, the npm package's
//! options), read by [`BackendSpec::from_json`]. Unknown fields are rejected
//! so that a misspelt option fails loudly instead of silently using a default.
//!
//! A new backend is one more [`BackendSpec`] variant, its options struct
//! here, and its machine.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::Deserialize;

use crate::core::etcd::{EtcdConfig, EtcdMachine};
use crate::core::redis::{RedisConfig, RedisMachine, RedisNode, RedisProtocol, RedlockConfig, RedlockFencing, RedlockMachine};
use crate::core::{BackendKind, Entropy, LockError, LockMachine};

/// A backend, as data: which protocol, where, and its options.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum BackendSpec {
    /// etcd v3 through its JSON gateway.
    Etcd(EtcdConfig),
    /// One Redis node (Upstash REST or Webdis).
    Redis(RedisConfig),
    /// Redlock over N independent Redis nodes.
    Redlock(RedlockConfig),
}

impl BackendSpec {
    /// Which backend this describes.
    pub fn kind(&self) -> BackendKind {
        match self {
            BackendSpec::Etcd(_) => BackendKind::Etcd,
            BackendSpec::Redis(_) => BackendKind::Redis,
            BackendSpec::Redlock(_) => BackendKind::Redlock,
        }
    }

    /// Reads the JSON options of backend `kind` (the npm package's spelling:
    /// `{ endpoints, … }`, `{ url, protocol, token, … }`, `{ nodes, … }`).
    /// Error messages never repeat a value (it could be a misplaced token).
    pub fn from_json(kind: BackendKind, json: &str) -> Result<BackendSpec, LockError> {
        Ok(match kind {
            BackendKind::Etcd => BackendSpec::Etcd(parse::<EtcdOptions>("etcd options", json)?.into_config()),
            BackendKind::Redis => BackendSpec::Redis(parse::<RedisOptions>("Redis options", json)?.into_config()),
            BackendKind::Redlock => BackendSpec::Redlock(parse::<RedlockOptions>("Redlock options", json)?.into_config()),
        })
    }

    /// Builds the lock machine, validating every option first.
    pub fn build(self, entropy: Box<dyn Entropy + Send>) -> Result<Box<dyn LockMachine + Send>, LockError> {
        Ok(match self {
            BackendSpec::Etcd(cfg) => Box::new(EtcdMachine::new(cfg, entropy)?),
            BackendSpec::Redis(cfg) => Box::new(RedisMachine::new(cfg, entropy)?),
            BackendSpec::Redlock(cfg) => Box::new(RedlockMachine::new(cfg, entropy)?),
        })
    }

    /// Every URL the backend's requests go to (drivers check their schemes).
    pub fn urls(&self) -> Vec<&str> {
        match self {
            BackendSpec::Etcd(c) => c.endpoints.iter().map(String::as_str).collect(),
            BackendSpec::Redis(c) => vec![c.node.url.as_str()],
            BackendSpec::Redlock(c) => c.nodes.iter().map(|n| n.url.as_str()).collect(),
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct EtcdOptions {
    endpoints: Vec<String>,
    prefix: Option<String>,
    session_ttl_ms: Option<u64>,
    request_timeout_ms: Option<u64>,
    headers: Option<BTreeMap<String, String>>,
}

impl EtcdOptions {
    fn into_config(self) -> EtcdConfig {
        let mut cfg = EtcdConfig::new(self.endpoints);
        if let Some(p) = self.prefix {
            cfg.prefix = p;
        }
        if let Some(t) = self.session_ttl_ms {
            cfg.session_ttl_ms = t;
        }
        if let Some(t) = self.request_timeout_ms {
            cfg.request_timeout_ms = t;
        }
        if let Some(h) = self.headers {
            cfg.headers = h.into_iter().collect();
        }
        cfg
    }
}

#[derive(Deserialize, Clone, Copy, Default)]
#[serde(rename_all = "lowercase")]
enum ProtocolName {
    #[default]
    Upstash,
    Webdis,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct NodeOptions {
    url: String,
    #[serde(default)]
    protocol: ProtocolName,
    token: Option<String>,
}

impl NodeOptions {
    fn into_node(self) -> RedisNode {
        let protocol = match self.protocol {
            ProtocolName::Upstash => RedisProtocol::Upstash,
            ProtocolName::Webdis => RedisProtocol::Webdis,
        };
        RedisNode {
            url: self.url,
            protocol,
            token: self.token,
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RedisOptions {
    // The node's fields inline (serde's `flatten` does not combine with
    // `deny_unknown_fields`).
    url: String,
    #[serde(default)]
    protocol: ProtocolName,
    token: Option<String>,
    prefix: Option<String>,
    ttl_ms: Option<u64>,
    request_timeout_ms: Option<u64>,
    auto_extend: Option<bool>,
    retry_delay_ms: Option<u64>,
    retry_jitter_ms: Option<u64>,
}

impl RedisOptions {
    fn into_config(self) -> RedisConfig {
        let node = NodeOptions {
            url: self.url,
            protocol: self.protocol,
            token: self.token,
        }
        .into_node();
        let mut cfg = RedisConfig::new(node);
        set(&mut cfg.prefix, self.prefix);
        set(&mut cfg.ttl_ms, self.ttl_ms);
        set(&mut cfg.request_timeout_ms, self.request_timeout_ms);
        set(&mut cfg.auto_extend, self.auto_extend);
        set(&mut cfg.retry_delay_ms, self.retry_delay_ms);
        set(&mut cfg.retry_jitter_ms, self.retry_jitter_ms);
        cfg
    }
}

#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "lowercase")]
enum FencingName {
    Folded,
    Strict,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RedlockOptions {
    nodes: Vec<NodeOptions>,
    prefix: Option<String>,
    ttl_ms: Option<u64>,
    drift_factor: Option<f64>,
    retry_count: Option<u32>,
    retry_delay_ms: Option<u64>,
    retry_jitter_ms: Option<u64>,
    auto_extend: Option<bool>,
    request_timeout_ms: Option<u64>,
    fencing: Option<FencingName>,
}

impl RedlockOptions {
    fn into_config(self) -> RedlockConfig {
        let mut cfg =
            RedlockConfig::new(self.nodes.into_iter().map(NodeOptions::into_node).collect());
        set(&mut cfg.prefix, self.prefix);
        set(&mut cfg.ttl_ms, self.ttl_ms);
        set(&mut cfg.drift_factor, self.drift_factor);
        set(&mut cfg.retry_count, self.retry_count);
        set(&mut cfg.retry_delay_ms, self.retry_delay_ms);
        set(&mut cfg.retry_jitter_ms, self.retry_jitter_ms);
        set(&mut cfg.auto_extend, self.auto_extend);
        set(&mut cfg.request_timeout_ms, self.request_timeout_ms);
        set(
            &mut cfg.fencing,
            self.fencing.map(|f| match f {
                FencingName::Folded => RedlockFencing::Folded,
                FencingName::Strict => RedlockFencing::Strict,
            }),
        );
        cfg
    }
}

fn set<T>(field: &mut T, value: Option<T>) {
    if let Some(v) = value {
        *field = v;
    }
}

/// Parses `json` as the options of `what`. Error messages keep serde's
/// description of the problem (field names, expected types) but drop every
/// quoted value, which could be a token put in the wrong field.
pub fn parse<T: DeserializeOwned>(what: &str, json: &str) -> Result<T, LockError> {
    serde_json::from_str(json)
        .map_err(|e| LockError::invalid(format!("{what}: {}", drop_quoted(&e.to_string()))))
}

fn drop_quoted(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut in_quotes = false;
    for c in message.chars() {
        if c == '"' {
            if !in_quotes {
                out.push_str("\"…\"");
            }
            in_quotes = !in_quotes;
        } else if !in_quotes {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::SeededEntropy;

    #[test]
    fn one_json_spelling_builds_every_backend() {
        let etcd = BackendSpec::from_json(BackendKind::Etcd, r#"{"endpoints":["http://127.0.0.1:2379"],"sessionTtlMs":3000}"#).unwrap();
        assert_eq!(etcd.kind(), BackendKind::Etcd);
        assert_eq!(etcd.urls(), ["http://127.0.0.1:2379"]);
        assert_eq!(etcd.build(Box::new(SeededEntropy::new(1))).unwrap().backend(), BackendKind::Etcd);
        let redis = BackendSpec::from_json(BackendKind::Redis, r#"{"url":"http://127.0.0.1:7379","protocol":"webdis","ttlMs":5000}"#).unwrap();
        assert!(matches!(&redis, BackendSpec::Redis(c) if c.ttl_ms == 5000 && c.node.protocol == RedisProtocol::Webdis));
        let json = r#"{"nodes":[{"url":"http://a:1","token":"t0k3n-secret"},{"url":"http://b:1","token":"t0k3n-secret"}],"fencing":"folded"}"#;
        let redlock = BackendSpec::from_json(BackendKind::Redlock, json).unwrap();
        assert!(!format!("{redlock:?}").contains("t0k3n-secret"), "{redlock:?}");
        assert_eq!(redlock.build(Box::new(SeededEntropy::new(1))).unwrap().backend(), BackendKind::Redlock);
    }

    #[test]
    fn bad_options_are_invalid_arguments_that_repeat_no_value() {
        let e = BackendSpec::from_json(BackendKind::Redis, r#"{"url":"http://x","tokne":"s3cr3t-value"}"#).unwrap_err();
        assert_eq!(e.code(), "INVALID_ARGUMENT");
        assert!(!e.to_string().contains("s3cr3t"), "{e}");
        let e = BackendSpec::from_json(BackendKind::Etcd, r#"{"endpoints":[]}"#).unwrap().build(Box::new(SeededEntropy::new(1)));
        assert_eq!(e.err().map(|e| e.code()), Some("INVALID_ARGUMENT"));
    }
}
