//! Redlock over N independent Redis nodes: `{ nodes, prefix, ttlMs,
//! fencing, … }`, each node as the redis backend spells one (HTTP and
//! `redis://` nodes may be mixed).

use serde::Serialize;
use serde_json::Value;

use super::redis::{nodes_from_flags, NodeOptions, REDIS_PASSWORD_VARS, REDIS_TOKEN_VARS};
use super::worker_vars::{in_var, list, workers_max_subscriptions, Vars, WorkerCommon};
use super::{set, to_json, Backend, BackendConfig, BackendSpec, CommandLine, Flags, UrlList};
use crate::core::json_fields::Fields;
use crate::core::redis::address::is_resp_url;
use crate::core::redis::{RedisNode, RedlockConfig, RedlockFencing, RedlockMachine};
use crate::core::{BackendKind, Entropy, LockError, LockMachine};

/// The redlock line of [`BACKENDS`](super::BACKENDS).
pub(super) struct Redlock;

impl Backend for Redlock {
    fn kind(&self) -> BackendKind {
        BackendKind::Redlock
    }

    fn options_label(&self) -> &'static str {
        "Redlock options"
    }

    fn read_options(&self, options: &Value) -> Result<BackendSpec, String> {
        Ok(BackendSpec::Redlock(
            RedlockOptions::read(options)?.into_config()?,
        ))
    }

    /// `EDGELOCK_REDLOCK_NODES` with a token per node (`EDGELOCK_REDIS_TOKEN_<i>`,
    /// else `EDGELOCK_REDIS_TOKEN`; a `redis://` node's password), and the
    /// common ones.
    fn read_worker_vars(&self, var: Vars, c: WorkerCommon) -> Result<BackendSpec, LockError> {
        let urls = list(&var("EDGELOCK_REDLOCK_NODES").unwrap_or_default());
        if urls.is_empty() {
            return Err(LockError::invalid(
                "EDGELOCK_REDLOCK_NODES is required for the redlock backend",
            ));
        }
        let shared = var("EDGELOCK_REDIS_TOKEN");
        let nodes = urls
            .iter()
            .enumerate()
            .map(|(i, u)| {
                let own = var(&format!("EDGELOCK_REDIS_TOKEN_{i}"));
                worker_node(u, own, shared.as_deref())
                    .map_err(in_var(&format!("EDGELOCK_REDLOCK_NODES[{i}]")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut cfg = RedlockConfig::new(nodes);
        set(&mut cfg.prefix, c.prefix);
        set(&mut cfg.ttl_ms, c.ttl);
        set(&mut cfg.request_timeout_ms, c.timeout);
        cfg.max_subscriptions = c
            .max_subscriptions
            .unwrap_or(workers_max_subscriptions(cfg.nodes.len()));
        Ok(BackendSpec::Redlock(cfg))
    }

    /// `--redis URL,URL,…`: two or more nodes make Redlock.
    fn command_line(&self) -> Option<CommandLine> {
        Some(CommandLine {
            flag: "--redis",
            urls: UrlList::Commas {
                min: 2,
                max: usize::MAX,
            },
            token_vars: REDIS_TOKEN_VARS,
            user: None,
            redis_password_vars: REDIS_PASSWORD_VARS,
            fair: false,
        })
    }

    /// The nodes, prefix and lock TTL; a request may take a quarter of it
    /// (a Redlock round must leave most of the TTL as validity).
    fn read_flags(&self, f: Flags) -> Result<BackendSpec, LockError> {
        let mut cfg = RedlockConfig::new(nodes_from_flags(&f)?);
        set(&mut cfg.prefix, f.prefix);
        if let Some(t) = f.ttl_ms {
            cfg.ttl_ms = t;
            cfg.request_timeout_ms = Flags::request_timeout(t, cfg.request_timeout_ms, 4);
        }
        Ok(BackendSpec::Redlock(cfg))
    }
}

/// A node of `EDGELOCK_REDLOCK_NODES` with its own token variable, else
/// the shared one. A `redis://` URL holding its password ignores the shared
/// token (meant for the HTTP nodes of a mixed Redlock) and refuses its own
/// beside it.
fn worker_node(
    url: &str,
    own: Option<String>,
    shared: Option<&str>,
) -> Result<RedisNode, LockError> {
    if own.is_some() || !is_resp_url(url) {
        return RedisNode::from_spec(url, own.as_deref().or(shared));
    }
    let node = RedisNode::resp(url, None)?;
    match (&node.token, shared) {
        (None, Some(token)) => RedisNode::resp(url, Some(token)),
        _ => Ok(node),
    }
}

impl BackendConfig for RedlockConfig {
    fn kind(&self) -> BackendKind {
        BackendKind::Redlock
    }

    fn options_json(&self) -> String {
        to_json(&RedlockOptions::from_config(self))
    }

    fn build(
        &self,
        entropy: Box<dyn Entropy + Send>,
    ) -> Result<Box<dyn LockMachine + Send>, LockError> {
        Ok(Box::new(RedlockMachine::new(self.clone(), entropy)?))
    }

    fn urls(&self) -> Vec<&str> {
        self.nodes.iter().map(|n| n.url.as_str()).collect()
    }

    /// One owner-checked delete per node.
    fn cleanup_requests(&self) -> u32 {
        self.nodes.len() as u32
    }

    fn max_subscriptions(&self) -> Option<usize> {
        Some(self.max_subscriptions)
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

    fn into_config(self) -> Result<RedlockConfig, String> {
        let nodes = self
            .nodes
            .into_iter()
            .enumerate()
            .map(|(i, n)| n.into_node().map_err(|e| format!("`nodes[{i}]`: {e}")))
            .collect::<Result<Vec<_>, _>>()?;
        let mut cfg = RedlockConfig::new(nodes);
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
        Ok(cfg)
    }
}
