//! Client options as the JavaScript wrapper passes them (JSON, camelCase), and
//! their conversion into the core's configs. Unknown fields are rejected so
//! that a misspelt option fails loudly instead of silently using a default.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::Deserialize;

use crate::core::etcd::EtcdConfig;
use crate::core::redis::{RedisConfig, RedisNode, RedisProtocol, RedlockConfig, RedlockFencing};
use crate::core::LockError;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EtcdOptions {
    endpoints: Vec<String>,
    prefix: Option<String>,
    session_ttl_ms: Option<u64>,
    request_timeout_ms: Option<u64>,
    headers: Option<BTreeMap<String, String>>,
}

impl EtcdOptions {
    pub fn into_config(self) -> EtcdConfig {
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
pub struct NodeOptions {
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
pub struct RedisOptions {
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
    pub fn into_config(self) -> RedisConfig {
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
pub struct RedlockOptions {
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
    pub fn into_config(self) -> RedlockConfig {
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

/// A millisecond (or id) argument from JavaScript: a whole, non-negative,
/// exactly representable number.
pub fn whole_number(what: &str, value: f64) -> Result<u64, LockError> {
    const MAX_SAFE: f64 = 9_007_199_254_740_991.0;
    if !value.is_finite() || value < 0.0 || value.fract() != 0.0 || value > MAX_SAFE {
        // The value itself is not formatted: f64 Display costs ~12 KiB of wasm,
        // and the JS wrapper's own check already names it.
        return Err(LockError::invalid(format!(
            "{what} must be a whole number ≥ 0 (at most 2^53 - 1)"
        )));
    }
    Ok(value as u64)
}
