//! The backend registry: [`BackendSpec`] describes a backend as data, and
//! [`BackendSpec::build`] is the one constructor of lock machines, used by the
//! npm bindings, the Worker, the CLI and the reliability tool alike.
//!
//! The serialised form is one JSON spelling (camelCase, the npm package's
//! options), read by [`BackendSpec::from_json`] and written by
//! [`BackendSpec::to_json`]. Unknown fields are rejected so that a misspelt
//! option fails loudly instead of silently using a default.
//!
//! A new backend is one more [`BackendSpec`] variant, its options struct
//! here, and its machine.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use crate::core::json_fields::{parse, string_item, Fields};

use crate::core::d1::{D1Config, D1Machine};
use crate::core::durable::{DurableConfig, DurableEndpoint, DurableMachine};
use crate::core::etcd::{Authenticated, EtcdAuth, EtcdConfig, EtcdMachine};
use crate::core::redis::{
    RedisConfig, RedisMachine, RedisNode, RedisProtocol, RedlockConfig, RedlockFencing,
    RedlockMachine,
};
use crate::core::{BackendKind, Entropy, LockError, LockMachine, MultiLock};

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
    /// The Durable Object lock service (`docs/lock-service-api.md`).
    DurableObject(DurableConfig),
    /// A lease row in a Cloudflare D1 table (`src/core/d1`).
    D1(D1Config),
}

impl BackendSpec {
    /// Which backend this describes.
    pub fn kind(&self) -> BackendKind {
        match self {
            BackendSpec::Etcd(_) => BackendKind::Etcd,
            BackendSpec::Redis(_) => BackendKind::Redis,
            BackendSpec::Redlock(_) => BackendKind::Redlock,
            BackendSpec::DurableObject(_) => BackendKind::DurableObject,
            BackendSpec::D1(_) => BackendKind::D1,
        }
    }

    /// Reads the JSON options of backend `kind` (the npm package's spelling:
    /// `{ endpoints, … }`, `{ url, protocol, token, … }`, `{ nodes, … }`,
    /// `{ url | binding, token, … }`).
    /// Error messages never repeat a value (it could be a misplaced token).
    pub fn from_json(kind: BackendKind, json: &str) -> Result<BackendSpec, LockError> {
        Ok(match kind {
            BackendKind::Etcd => {
                BackendSpec::Etcd(parse("etcd options", json, EtcdOptions::read)?.into_config())
            }
            BackendKind::Redis => {
                BackendSpec::Redis(parse("Redis options", json, RedisOptions::read)?.into_config())
            }
            BackendKind::Redlock => BackendSpec::Redlock(
                parse("Redlock options", json, RedlockOptions::read)?.into_config(),
            ),
            BackendKind::DurableObject => BackendSpec::DurableObject(parse(
                "durable-object options",
                json,
                DurableOptions::read,
            )?),
            BackendKind::D1 => BackendSpec::D1(parse("d1 options", json, D1Options::read)?),
        })
    }

    /// The JSON [`from_json`](Self::from_json) reads back to this spec, with
    /// every option spelled out. It carries the credentials (tokens, header
    /// values) of the spec: treat it as a secret, like the spec itself.
    pub fn to_json(&self) -> String {
        let json = match self {
            BackendSpec::Etcd(c) => serde_json::to_string(&EtcdOptions::from_config(c)),
            BackendSpec::Redis(c) => serde_json::to_string(&RedisOptions::from_config(c)),
            BackendSpec::Redlock(c) => serde_json::to_string(&RedlockOptions::from_config(c)),
            BackendSpec::DurableObject(c) => serde_json::to_string(&DurableOptions::from_config(c)),
            BackendSpec::D1(c) => serde_json::to_string(&D1Options::from_config(c)),
        };
        // Plain strings, numbers and booleans: serialising cannot fail.
        json.unwrap_or_default()
    }

    /// Builds the lock machine, validating every option first. The machine
    /// is wrapped in a [`MultiLock`], which serves
    /// [`Operation::AcquireAll`](super::Operation::AcquireAll) for every backend.
    pub fn build(
        self,
        entropy: Box<dyn Entropy + Send>,
    ) -> Result<Box<dyn LockMachine + Send>, LockError> {
        let machine: Box<dyn LockMachine + Send> = match self {
            BackendSpec::Etcd(mut cfg) => match cfg.auth.take() {
                Some(auth) => {
                    let (prefix, timeout) = (cfg.prefix.clone(), cfg.request_timeout_ms);
                    cfg.auth = Some(auth.clone());
                    Box::new(Authenticated::new(
                        EtcdMachine::new(cfg, entropy)?,
                        auth,
                        &prefix,
                        timeout,
                    ))
                }
                None => Box::new(EtcdMachine::new(cfg, entropy)?),
            },
            BackendSpec::Redis(cfg) => Box::new(RedisMachine::new(cfg, entropy)?),
            BackendSpec::Redlock(cfg) => Box::new(RedlockMachine::new(cfg, entropy)?),
            BackendSpec::DurableObject(cfg) => Box::new(DurableMachine::new(cfg, entropy)?),
            BackendSpec::D1(cfg) => Box::new(D1Machine::new(cfg, entropy)?),
        };
        Ok(Box::new(MultiLock::new(machine)))
    }

    /// Every URL the backend's requests go to (drivers check their schemes).
    pub fn urls(&self) -> Vec<&str> {
        match self {
            BackendSpec::Etcd(c) => c.endpoints.iter().map(String::as_str).collect(),
            BackendSpec::Redis(c) => vec![c.node.url.as_str()],
            BackendSpec::Redlock(c) => c.nodes.iter().map(|n| n.url.as_str()).collect(),
            BackendSpec::DurableObject(c) => c.url().into_iter().collect(),
            BackendSpec::D1(_) => Vec::new(),
        }
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct EtcdOptions {
    endpoints: Vec<String>,
    prefix: Option<String>,
    session_ttl_ms: Option<u64>,
    request_timeout_ms: Option<u64>,
    headers: Option<BTreeMap<String, String>>,
    auth: Option<AuthOptions>,
}

/// `auth: { username, password }` (the spelling of the etcd3 npm client).
#[derive(Serialize)]
struct AuthOptions {
    username: String,
    password: String,
}

impl AuthOptions {
    fn read(v: &Value) -> Result<Self, String> {
        let f = Fields::new(v)?;
        let out = AuthOptions {
            username: f.str("username")?,
            password: f.str("password")?,
        };
        f.finish()?;
        Ok(out)
    }
}

impl EtcdOptions {
    fn read(v: &Value) -> Result<Self, String> {
        let f = Fields::new(v)?;
        let out = EtcdOptions {
            endpoints: f.list("endpoints", string_item)?,
            prefix: f.opt_str("prefix")?,
            session_ttl_ms: f.opt_u64("sessionTtlMs")?,
            request_timeout_ms: f.opt_u64("requestTimeoutMs")?,
            headers: f
                .opt_string_map("headers")?
                .map(|h| h.into_iter().collect()),
            auth: f
                .opt_object("auth")?
                .map(|a| AuthOptions::read(a).map_err(|e| format!("`auth`: {e}")))
                .transpose()?,
        };
        f.finish()?;
        Ok(out)
    }

    fn from_config(c: &EtcdConfig) -> Self {
        EtcdOptions {
            endpoints: c.endpoints.clone(),
            prefix: Some(c.prefix.clone()),
            session_ttl_ms: Some(c.session_ttl_ms),
            request_timeout_ms: Some(c.request_timeout_ms),
            headers: Some(c.headers.iter().cloned().collect()),
            auth: c.auth.as_ref().map(|a| AuthOptions {
                username: a.username.clone(),
                password: a.password.clone(),
            }),
        }
    }

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
        cfg.auth = self.auth.map(|a| EtcdAuth {
            username: a.username,
            password: a.password,
        });
        cfg
    }
}

#[derive(Serialize, Clone, Copy, Default)]
#[serde(rename_all = "lowercase")]
enum ProtocolName {
    #[default]
    Upstash,
    Webdis,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct NodeOptions {
    url: String,
    protocol: ProtocolName,
    token: Option<String>,
}

/// `protocol`, read by index into [`PROTOCOLS`].
const PROTOCOLS: [(&str, ProtocolName); 2] = [
    ("upstash", ProtocolName::Upstash),
    ("webdis", ProtocolName::Webdis),
];

fn read_protocol(f: &Fields<'_>) -> Result<ProtocolName, String> {
    Ok(f.opt_choice("protocol", &PROTOCOLS.map(|p| p.0))?
        .map_or(ProtocolName::default(), |i| PROTOCOLS[i].1))
}

impl NodeOptions {
    fn read(v: &Value) -> Result<Self, String> {
        let f = Fields::new(v)?;
        let out = NodeOptions {
            url: f.str("url")?,
            protocol: read_protocol(&f)?,
            token: f.opt_str("token")?,
        };
        f.finish()?;
        Ok(out)
    }

    fn from_node(n: &RedisNode) -> Self {
        let protocol = match n.protocol {
            RedisProtocol::Upstash => ProtocolName::Upstash,
            RedisProtocol::Webdis => ProtocolName::Webdis,
        };
        NodeOptions {
            url: n.url.clone(),
            protocol,
            token: n.token.clone(),
        }
    }

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

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct RedisOptions {
    // The node's fields inline (serde's `flatten` does not combine with
    // `deny_unknown_fields`).
    url: String,
    protocol: ProtocolName,
    token: Option<String>,
    prefix: Option<String>,
    ttl_ms: Option<u64>,
    request_timeout_ms: Option<u64>,
    auto_extend: Option<bool>,
    retry_delay_ms: Option<u64>,
    retry_jitter_ms: Option<u64>,
    max_subscriptions: Option<usize>,
    fair: Option<bool>,
    cross_slot_scripts: Option<bool>,
}

impl RedisOptions {
    fn read(v: &Value) -> Result<Self, String> {
        let f = Fields::new(v)?;
        let out = RedisOptions {
            url: f.str("url")?,
            protocol: read_protocol(&f)?,
            token: f.opt_str("token")?,
            prefix: f.opt_str("prefix")?,
            ttl_ms: f.opt_u64("ttlMs")?,
            request_timeout_ms: f.opt_u64("requestTimeoutMs")?,
            auto_extend: f.opt_bool("autoExtend")?,
            retry_delay_ms: f.opt_u64("retryDelayMs")?,
            retry_jitter_ms: f.opt_u64("retryJitterMs")?,
            max_subscriptions: f.opt_usize("maxSubscriptions")?,
            fair: f.opt_bool("fair")?,
            cross_slot_scripts: f.opt_bool("crossSlotScripts")?,
        };
        f.finish()?;
        Ok(out)
    }

    fn from_config(c: &RedisConfig) -> Self {
        let node = NodeOptions::from_node(&c.node);
        RedisOptions {
            url: node.url,
            protocol: node.protocol,
            token: node.token,
            prefix: Some(c.prefix.clone()),
            ttl_ms: Some(c.ttl_ms),
            request_timeout_ms: Some(c.request_timeout_ms),
            auto_extend: Some(c.auto_extend),
            retry_delay_ms: Some(c.retry_delay_ms),
            retry_jitter_ms: Some(c.retry_jitter_ms),
            max_subscriptions: Some(c.max_subscriptions),
            fair: Some(c.fair),
            cross_slot_scripts: Some(c.cross_slot_scripts),
        }
    }

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
        set(&mut cfg.max_subscriptions, self.max_subscriptions);
        set(&mut cfg.fair, self.fair);
        set(&mut cfg.cross_slot_scripts, self.cross_slot_scripts);
        cfg
    }
}

#[derive(Serialize, Clone, Copy)]
#[serde(rename_all = "lowercase")]
enum FencingName {
    Folded,
    Strict,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
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
    max_subscriptions: Option<usize>,
}

impl RedlockOptions {
    fn read(v: &Value) -> Result<Self, String> {
        let f = Fields::new(v)?;
        const FENCING: [(&str, FencingName); 2] = [
            ("folded", FencingName::Folded),
            ("strict", FencingName::Strict),
        ];
        let out = RedlockOptions {
            nodes: f.list("nodes", NodeOptions::read)?,
            prefix: f.opt_str("prefix")?,
            ttl_ms: f.opt_u64("ttlMs")?,
            drift_factor: f.opt_f64("driftFactor")?,
            retry_count: f.opt_u32("retryCount")?,
            retry_delay_ms: f.opt_u64("retryDelayMs")?,
            retry_jitter_ms: f.opt_u64("retryJitterMs")?,
            auto_extend: f.opt_bool("autoExtend")?,
            request_timeout_ms: f.opt_u64("requestTimeoutMs")?,
            fencing: f
                .opt_choice("fencing", &FENCING.map(|p| p.0))?
                .map(|i| FENCING[i].1),
            max_subscriptions: f.opt_usize("maxSubscriptions")?,
        };
        f.finish()?;
        Ok(out)
    }

    fn from_config(c: &RedlockConfig) -> Self {
        RedlockOptions {
            nodes: c.nodes.iter().map(NodeOptions::from_node).collect(),
            prefix: Some(c.prefix.clone()),
            ttl_ms: Some(c.ttl_ms),
            drift_factor: Some(c.drift_factor),
            retry_count: Some(c.retry_count),
            retry_delay_ms: Some(c.retry_delay_ms),
            retry_jitter_ms: Some(c.retry_jitter_ms),
            auto_extend: Some(c.auto_extend),
            request_timeout_ms: Some(c.request_timeout_ms),
            fencing: Some(match c.fencing {
                RedlockFencing::Folded => FencingName::Folded,
                RedlockFencing::Strict => FencingName::Strict,
            }),
            max_subscriptions: Some(c.max_subscriptions),
        }
    }

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
        set(&mut cfg.max_subscriptions, self.max_subscriptions);
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

/// `{ url | binding, token, ttlMs, requestTimeoutMs, autoExtend }`: exactly
/// one of `url` and `binding`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct DurableOptions {
    #[serde(skip_serializing_if = "Option::is_none")]
    url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    binding: Option<String>,
    token: Option<String>,
    ttl_ms: u64,
    request_timeout_ms: u64,
    auto_extend: bool,
}

impl DurableOptions {
    fn read(v: &Value) -> Result<DurableConfig, String> {
        let f = Fields::new(v)?;
        let endpoint = match (f.opt_str("url")?, f.opt_str("binding")?) {
            (Some(url), None) => DurableEndpoint::Url(url),
            (None, Some(binding)) => DurableEndpoint::Binding(binding),
            _ => return Err("exactly one of `url` and `binding` is required".into()),
        };
        let mut cfg = DurableConfig::new(endpoint);
        cfg.token = f.opt_str("token")?;
        set(&mut cfg.ttl_ms, f.opt_u64("ttlMs")?);
        set(&mut cfg.request_timeout_ms, f.opt_u64("requestTimeoutMs")?);
        set(&mut cfg.auto_extend, f.opt_bool("autoExtend")?);
        f.finish()?;
        Ok(cfg)
    }

    fn from_config(c: &DurableConfig) -> Self {
        let (url, binding) = match &c.endpoint {
            DurableEndpoint::Url(u) => (Some(u.clone()), None),
            DurableEndpoint::Binding(b) => (None, Some(b.clone())),
        };
        DurableOptions {
            url,
            binding,
            token: c.token.clone(),
            ttl_ms: c.ttl_ms,
            request_timeout_ms: c.request_timeout_ms,
            auto_extend: c.auto_extend,
        }
    }
}

/// `{ binding, table, ttlMs, requestTimeoutMs, autoExtend, retryDelayMs,
/// retryJitterMs }` (`binding` required).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct D1Options {
    binding: String,
    table: String,
    ttl_ms: u64,
    request_timeout_ms: u64,
    auto_extend: bool,
    retry_delay_ms: u64,
    retry_jitter_ms: u64,
}

impl D1Options {
    fn read(v: &Value) -> Result<D1Config, String> {
        let f = Fields::new(v)?;
        let binding = f
            .opt_str("binding")?
            .ok_or_else(|| "`binding` is required".to_string())?;
        let mut cfg = D1Config::new(binding);
        set(&mut cfg.table, f.opt_str("table")?);
        set(&mut cfg.ttl_ms, f.opt_u64("ttlMs")?);
        set(&mut cfg.request_timeout_ms, f.opt_u64("requestTimeoutMs")?);
        set(&mut cfg.auto_extend, f.opt_bool("autoExtend")?);
        set(&mut cfg.retry_delay_ms, f.opt_u64("retryDelayMs")?);
        set(&mut cfg.retry_jitter_ms, f.opt_u64("retryJitterMs")?);
        f.finish()?;
        Ok(cfg)
    }

    fn from_config(c: &D1Config) -> Self {
        D1Options {
            binding: c.binding.clone(),
            table: c.table.clone(),
            ttl_ms: c.ttl_ms,
            request_timeout_ms: c.request_timeout_ms,
            auto_extend: c.auto_extend,
            retry_delay_ms: c.retry_delay_ms,
            retry_jitter_ms: c.retry_jitter_ms,
        }
    }
}

fn set<T>(field: &mut T, value: Option<T>) {
    if let Some(v) = value {
        *field = v;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::SeededEntropy;

    #[test]
    fn one_json_spelling_builds_every_backend() {
        let etcd = BackendSpec::from_json(
            BackendKind::Etcd,
            r#"{"endpoints":["http://127.0.0.1:2379"],"sessionTtlMs":3000}"#,
        )
        .unwrap();
        assert_eq!(etcd.kind(), BackendKind::Etcd);
        assert_eq!(etcd.urls(), ["http://127.0.0.1:2379"]);
        assert_eq!(
            etcd.build(Box::new(SeededEntropy::new(1)))
                .unwrap()
                .backend(),
            BackendKind::Etcd
        );
        let redis = BackendSpec::from_json(
            BackendKind::Redis,
            r#"{"url":"http://127.0.0.1:7379","protocol":"webdis","ttlMs":5000}"#,
        )
        .unwrap();
        assert!(
            matches!(&redis, BackendSpec::Redis(c) if c.ttl_ms == 5000 && c.node.protocol == RedisProtocol::Webdis)
        );
        let json = r#"{"nodes":[{"url":"http://a:1","token":"t0k3n-secret"},{"url":"http://b:1","token":"t0k3n-secret"}],"fencing":"folded"}"#;
        let redlock = BackendSpec::from_json(BackendKind::Redlock, json).unwrap();
        assert!(
            !format!("{redlock:?}").contains("t0k3n-secret"),
            "{redlock:?}"
        );
        assert_eq!(
            redlock
                .build(Box::new(SeededEntropy::new(1)))
                .unwrap()
                .backend(),
            BackendKind::Redlock
        );
    }

    #[test]
    fn to_json_reads_back_to_the_same_spec() {
        let mut etcd = EtcdConfig::new(vec![
            "http://127.0.0.1:2379".into(),
            "http://127.0.0.1:2380".into(),
        ]);
        etcd.prefix = "jobs".into();
        etcd.session_ttl_ms = 7_000;
        etcd.headers = vec![("x-tenant".into(), "t1".into())];
        etcd.auth = Some(EtcdAuth {
            username: "locker".into(),
            password: "pw-secret".into(),
        });
        let mut redis = RedisConfig::new(RedisNode::webdis("http://127.0.0.1:7379"));
        redis.ttl_ms = 4_321;
        redis.auto_extend = false;
        redis.cross_slot_scripts = false;
        let mut redlock = RedlockConfig::new(vec![
            RedisNode::upstash("http://a:1", "t1"),
            RedisNode::webdis("http://b:1"),
        ]);
        redlock.fencing = RedlockFencing::Strict;
        redlock.drift_factor = 0.02;
        redlock.retry_count = 3;
        for spec in [
            BackendSpec::Etcd(etcd),
            BackendSpec::Redis(redis),
            BackendSpec::Redlock(redlock),
        ] {
            let json = spec.to_json();
            let back = BackendSpec::from_json(spec.kind(), &json).unwrap();
            // Debug hides secrets, so compare the JSON of both and the one secret-free view.
            assert_eq!(back.to_json(), json);
            assert_eq!(format!("{back:?}"), format!("{spec:?}"));
        }
        let json =
            BackendSpec::Redis(RedisConfig::new(RedisNode::upstash("https://x", "tok"))).to_json();
        assert!(
            json.contains(r#""protocol":"upstash""#)
                && json.contains(r#""token":"tok""#)
                && json.contains(r#""ttlMs":10000"#)
                && json.contains(r#""crossSlotScripts":false"#),
            "{json}"
        );
        // The one-script set try: on by default for webdis, and as asked.
        let spec = |json: &str| match BackendSpec::from_json(BackendKind::Redis, json).unwrap() {
            BackendSpec::Redis(c) => c.cross_slot_scripts,
            _ => unreachable!(),
        };
        assert!(spec(r#"{"url":"http://x","protocol":"webdis"}"#));
        assert!(!spec(
            r#"{"url":"http://x","protocol":"webdis","crossSlotScripts":false}"#
        ));
        assert!(!spec(r#"{"url":"http://x","token":"t"}"#));
        assert!(spec(
            r#"{"url":"http://x","token":"t","crossSlotScripts":true}"#
        ));
    }

    #[test]
    fn bad_options_are_invalid_arguments_that_repeat_no_value() {
        let e = BackendSpec::from_json(
            BackendKind::Redis,
            r#"{"url":"http://x","tokne":"s3cr3t-value"}"#,
        )
        .unwrap_err();
        assert_eq!(e.code(), "INVALID_ARGUMENT");
        assert!(!e.to_string().contains("s3cr3t"), "{e}");
        let e = BackendSpec::from_json(BackendKind::Etcd, r#"{"endpoints":[]}"#)
            .unwrap()
            .build(Box::new(SeededEntropy::new(1)));
        assert_eq!(e.err().map(|e| e.code()), Some("INVALID_ARGUMENT"));
    }
}
