//! One Redis node (Upstash REST, Webdis, or the Redis protocol itself at a
//! `redis://` / `rediss://` URL): `{ url, protocol, token, prefix, ttlMs, … }`.
//! Its node options are Redlock's too.

use serde::Serialize;
use serde_json::Value;

use super::worker_vars::{in_var, workers_max_subscriptions, Vars, WorkerCommon};
use super::{set, to_json, Backend, BackendConfig, BackendSpec, CommandLine, Flags, UrlList};
use crate::core::json_fields::Fields;
use crate::core::redis::address::is_resp_url;
use crate::core::redis::{RedisConfig, RedisMachine, RedisNode, RedisProtocol};
use crate::core::{BackendKind, Entropy, LockError, LockMachine};

/// The redis line of [`BACKENDS`](super::BACKENDS).
pub(super) struct Redis;

impl Backend for Redis {
    fn kind(&self) -> BackendKind {
        BackendKind::Redis
    }

    fn options_label(&self) -> &'static str {
        "Redis options"
    }

    fn read_options(&self, options: &Value) -> Result<BackendSpec, String> {
        Ok(BackendSpec::Redis(
            RedisOptions::read(options)?.into_config()?,
        ))
    }

    /// `EDGELOCK_REDIS_URL` and `EDGELOCK_REDIS_TOKEN` (the Upstash token,
    /// or a `redis://` node's password unless its URL holds one: not both),
    /// and the common ones.
    fn read_worker_vars(&self, var: Vars, c: WorkerCommon) -> Result<BackendSpec, LockError> {
        let url = var("EDGELOCK_REDIS_URL").ok_or_else(|| {
            LockError::invalid("EDGELOCK_REDIS_URL is required for the redis backend")
        })?;
        let node = RedisNode::from_spec(&url, var("EDGELOCK_REDIS_TOKEN").as_deref())
            .map_err(in_var("EDGELOCK_REDIS_URL"))?;
        let mut cfg = RedisConfig::new(node);
        set(&mut cfg.prefix, c.prefix);
        set(&mut cfg.ttl_ms, c.ttl);
        set(&mut cfg.request_timeout_ms, c.timeout);
        cfg.max_subscriptions = c.max_subscriptions.unwrap_or(workers_max_subscriptions(1));
        Ok(BackendSpec::Redis(cfg))
    }

    /// `--redis URL` (one node; several are Redlock's), its token from
    /// `--token` or the environment (a `redis://` node's password from its
    /// URL, `--token` or its own variables); the one backend with `--fair`.
    fn command_line(&self) -> Option<CommandLine> {
        Some(CommandLine {
            flag: "--redis",
            urls: UrlList::Commas { min: 1, max: 1 },
            token_vars: REDIS_TOKEN_VARS,
            user: None,
            redis_password_vars: REDIS_PASSWORD_VARS,
            fair: true,
        })
    }

    /// The node (its URL names its protocol), prefix, lock TTL (requests
    /// bounded by half of it) and fair queue.
    fn read_flags(&self, f: Flags) -> Result<BackendSpec, LockError> {
        let nodes = nodes_from_flags(&f)?;
        let [node] = <[RedisNode; 1]>::try_from(nodes)
            .map_err(|_| LockError::invalid("--redis: one node for the single-node lock"))?;
        let mut cfg = RedisConfig::new(node);
        cfg.fair = f.fair;
        set(&mut cfg.prefix, f.prefix);
        if let Some(t) = f.ttl_ms {
            cfg.ttl_ms = t;
            cfg.request_timeout_ms = Flags::request_timeout(t, cfg.request_timeout_ms, 2);
        }
        Ok(BackendSpec::Redis(cfg))
    }
}

/// Where the command line's Redis token comes from when `--token` is not
/// given (the single node and Redlock alike; HTTP nodes).
pub(super) const REDIS_TOKEN_VARS: &[&str] = &["EDGELOCK_REDIS_TOKEN", "UPSTASH_REDIS_REST_TOKEN"];

/// Where a `redis://` node's password comes from when neither its URL nor
/// `--token` gives one: edgelock's variable, then redis-cli's own.
pub(super) const REDIS_PASSWORD_VARS: &[&str] = &["EDGELOCK_REDIS_PASSWORD", "REDISCLI_AUTH"];

/// The command line's Redis nodes: `redis://…` / `rediss://…`,
/// `webdis+http(s)://…`, `upstash+http(s)://…` or a bare Upstash URL each.
pub(super) fn nodes_from_flags(f: &Flags) -> Result<Vec<RedisNode>, LockError> {
    f.urls.iter().map(|u| node_from_flags(u, f)).collect()
}

/// One node of `--redis`. An HTTP node takes the token. A `redis://` node's
/// password is its URL's, else `--token` (giving both is refused), else the
/// environment's password variable: a variable set for every shell gives
/// way to a URL that says otherwise, as redis-cli lets `-u` override
/// `REDISCLI_AUTH`.
fn node_from_flags(url: &str, f: &Flags) -> Result<RedisNode, LockError> {
    if !is_resp_url(url) {
        return RedisNode::from_spec(url, f.token.as_deref());
    }
    if !f.token_from_env && f.token.is_some() {
        return RedisNode::resp(url, f.token.as_deref());
    }
    let node = RedisNode::resp(url, None)?;
    match (&node.token, &f.redis_password) {
        (None, Some(password)) => RedisNode::resp(url, Some(password)),
        _ => Ok(node),
    }
}

impl BackendConfig for RedisConfig {
    fn kind(&self) -> BackendKind {
        BackendKind::Redis
    }

    fn options_json(&self) -> String {
        to_json(&RedisOptions::from_config(self))
    }

    fn build(
        &self,
        entropy: Box<dyn Entropy + Send>,
    ) -> Result<Box<dyn LockMachine + Send>, LockError> {
        Ok(Box::new(RedisMachine::new(self.clone(), entropy)?))
    }

    fn urls(&self) -> Vec<&str> {
        vec![self.node.url.as_str()]
    }

    fn max_subscriptions(&self) -> Option<usize> {
        Some(self.max_subscriptions)
    }

    /// The fair lock's FIFO queue kept in Redis.
    fn queues_waiters_in_order(&self) -> bool {
        self.fair
    }
}

#[derive(Serialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum ProtocolName {
    Upstash,
    Webdis,
    Resp,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct NodeOptions {
    url: String,
    /// `None` (absent): the URL decides, `resp` for `redis://` / `rediss://`
    /// and `upstash` for http(s). Written out always.
    protocol: Option<ProtocolName>,
    token: Option<String>,
}

/// `protocol`, read by index into [`PROTOCOLS`].
const PROTOCOLS: [(&str, ProtocolName); 3] = [
    ("upstash", ProtocolName::Upstash),
    ("webdis", ProtocolName::Webdis),
    ("resp", ProtocolName::Resp),
];

fn read_protocol(f: &Fields<'_>) -> Result<Option<ProtocolName>, String> {
    Ok(f.opt_choice("protocol", &PROTOCOLS.map(|p| p.0))?
        .map(|i| PROTOCOLS[i].1))
}

impl ProtocolName {
    fn as_str(self) -> &'static str {
        PROTOCOLS.iter().find(|p| p.1 == self).map_or("", |p| p.0)
    }
}

impl NodeOptions {
    pub(super) fn read(v: &Value) -> Result<Self, String> {
        let f = Fields::new(v)?;
        let out = NodeOptions {
            url: f.str("url")?,
            protocol: read_protocol(&f)?,
            token: f.opt_str("token")?,
        };
        f.finish()?;
        Ok(out)
    }

    pub(super) fn from_node(n: &RedisNode) -> Self {
        let protocol = match n.protocol {
            RedisProtocol::Upstash => ProtocolName::Upstash,
            RedisProtocol::Webdis => ProtocolName::Webdis,
            RedisProtocol::Resp => ProtocolName::Resp,
        };
        NodeOptions {
            url: n.url.clone(),
            protocol: Some(protocol),
            token: n.token.clone(),
        }
    }

    /// The node. A `redis://` URL is the Redis protocol (a password in it
    /// moves to the token; `token` is the password otherwise, not both); an
    /// http(s) URL is Upstash unless `protocol` says Webdis. A `protocol`
    /// that contradicts the URL is refused, naming both.
    pub(super) fn into_node(self) -> Result<RedisNode, String> {
        let http = match (self.protocol, is_resp_url(&self.url)) {
            (None | Some(ProtocolName::Resp), true) => {
                return RedisNode::resp(&self.url, self.token.as_deref()).map_err(message_of)
            }
            (Some(ProtocolName::Resp), false) => {
                return Err(
                    "`protocol`: `resp` needs a redis:// or rediss:// `url`, not an http(s) one"
                        .into(),
                )
            }
            (Some(p), true) => {
                return Err(format!(
                    "`protocol`: `{}` is reached over http(s), but `url` is a redis:// URL (leave `protocol` out, or give `resp`)",
                    p.as_str()
                ))
            }
            (p, false) => p.unwrap_or(ProtocolName::Upstash),
        };
        Ok(RedisNode {
            url: self.url,
            protocol: match http {
                ProtocolName::Webdis => RedisProtocol::Webdis,
                _ => RedisProtocol::Upstash,
            },
            token: self.token,
        })
    }
}

/// An invalid argument's message alone (the options' reader adds what
/// they are); the core's address errors never quote a password.
fn message_of(e: LockError) -> String {
    match e {
        LockError::InvalidArgument { message } => message,
        other => other.to_string(),
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct RedisOptions {
    // The node's fields inline (serde's `flatten` does not combine with
    // `deny_unknown_fields`).
    url: String,
    protocol: Option<ProtocolName>,
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

    fn into_config(self) -> Result<RedisConfig, String> {
        let node = NodeOptions {
            url: self.url,
            protocol: self.protocol,
            token: self.token,
        }
        .into_node()?;
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
        Ok(cfg)
    }
}

#[cfg(test)]
mod tests {
    use crate::core::redis::{RedisConfig, RedisProtocol, RedlockConfig};
    use crate::core::{BackendKind, BackendSpec, LockError};

    fn redis(json: &str) -> Result<RedisConfig, LockError> {
        match BackendSpec::from_json(BackendKind::Redis, json)? {
            BackendSpec::Redis(c) => Ok(c),
            other => panic!("{other:?}"),
        }
    }

    fn refused(kind: BackendKind, json: &str) -> String {
        let e = BackendSpec::from_json(kind, json).unwrap_err();
        assert_eq!(e.code(), "INVALID_ARGUMENT", "{e}");
        e.to_string()
    }

    #[test]
    fn a_redis_url_is_the_redis_protocol_and_its_password_the_token() {
        let c = redis(r#"{"url":"redis://:hunter2@cache:6380/2"}"#).unwrap();
        assert_eq!(c.node.protocol, RedisProtocol::Resp);
        assert_eq!(
            (c.node.url.as_str(), c.node.token.as_deref()),
            ("redis://cache:6380/2", Some("hunter2"))
        );
        let c = redis(r#"{"url":"rediss://alice@cache","protocol":"resp","token":"pw"}"#).unwrap();
        assert_eq!(
            (c.node.url.as_str(), c.node.token.as_deref()),
            ("rediss://alice@cache:6379", Some("pw"))
        );
        // http URLs keep their default protocol, Upstash.
        let c = redis(r#"{"url":"https://x","token":"t"}"#).unwrap();
        assert_eq!(c.node.protocol, RedisProtocol::Upstash);
    }

    #[test]
    fn to_json_writes_the_url_without_its_password_and_reads_back() {
        let spec = BackendSpec::from_json(
            BackendKind::Redis,
            r#"{"url":"rediss://bob:hunter2@h:6380/3","ttlMs":4000}"#,
        )
        .unwrap();
        let json = spec.to_json();
        assert!(
            json.contains(r#""url":"rediss://bob@h:6380/3""#)
                && json.contains(r#""protocol":"resp""#)
                && json.contains(r#""token":"hunter2""#),
            "{json}"
        );
        assert!(!format!("{spec:?}").contains("hunter2"));
        let back = BackendSpec::from_json(BackendKind::Redis, &json).unwrap();
        assert_eq!(back.to_json(), json);
        assert_eq!(back.urls(), ["rediss://bob@h:6380/3"]);
    }

    #[test]
    fn a_protocol_that_contradicts_the_url_and_a_password_given_twice_are_refused() {
        let e = refused(
            BackendKind::Redis,
            r#"{"url":"https://x","protocol":"resp"}"#,
        );
        assert!(e.contains("`resp` needs a redis://"), "{e}");
        for p in ["upstash", "webdis"] {
            let json = format!(r#"{{"url":"redis://:hunter2@h","protocol":"{p}"}}"#);
            let e = refused(BackendKind::Redis, &json);
            assert!(
                e.contains(&format!("`{p}`")) && e.contains("redis://"),
                "{e}"
            );
            assert!(!e.contains("hunter2"), "{e}");
        }
        let e = refused(
            BackendKind::Redis,
            r#"{"url":"redis://:hunter2@h","token":"other"}"#,
        );
        assert!(e.contains("once") && !e.contains("hunter2"), "{e}");
        let e = refused(BackendKind::Redis, r#"{"url":"redis://:hunter2@h:99999"}"#);
        assert!(e.contains("port") && !e.contains("hunter2"), "{e}");
    }

    #[test]
    fn redlock_nodes_may_mix_http_and_redis_urls() {
        let json = r#"{"nodes":[{"url":"https://u","token":"t"},{"url":"redis://:hunter2@h"},{"url":"http://w","protocol":"webdis"}]}"#;
        let BackendSpec::Redlock(c) = BackendSpec::from_json(BackendKind::Redlock, json).unwrap()
        else {
            panic!("redlock")
        };
        let protocols: Vec<RedisProtocol> = c.nodes.iter().map(|n| n.protocol).collect();
        assert_eq!(
            protocols,
            [
                RedisProtocol::Upstash,
                RedisProtocol::Resp,
                RedisProtocol::Webdis
            ]
        );
        assert_eq!(c.nodes[1].url, "redis://h:6379");
        assert!(!format!("{c:?}").contains("hunter2"));
        let spec = BackendSpec::Redlock(RedlockConfig::clone(&c));
        let back = BackendSpec::from_json(BackendKind::Redlock, &spec.to_json()).unwrap();
        assert_eq!(back.to_json(), spec.to_json());
        let e = refused(
            BackendKind::Redlock,
            r#"{"nodes":[{"url":"https://u","token":"t"},{"url":"redis://:hunter2@h/x"}]}"#,
        );
        assert!(e.contains("`nodes[1]`") && !e.contains("hunter2"), "{e}");
    }
}
