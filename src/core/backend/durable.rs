//! The Durable Object lock service (`docs/lock-service-api.md`).

use serde::Serialize;
use serde_json::Value;

use super::worker_vars::{Vars, WorkerCommon, LOCKS_BINDING};
use super::{
    set, to_json, Backend, BackendConfig, BackendSpec, Binding, BindingKind, CommandLine, Flags,
    UrlList,
};
use crate::core::durable::{DurableConfig, DurableEndpoint, DurableMachine};
use crate::core::json_fields::Fields;
use crate::core::{BackendKind, Entropy, LockError, LockMachine};

/// The durable-object line of [`BACKENDS`](super::BACKENDS).
pub(super) struct DurableObject;

impl Backend for DurableObject {
    fn kind(&self) -> BackendKind {
        BackendKind::DurableObject
    }

    fn options_label(&self) -> &'static str {
        "durable-object options"
    }

    fn read_options(&self, options: &Value) -> Result<BackendSpec, String> {
        Ok(BackendSpec::DurableObject(DurableOptions::read(options)?))
    }

    /// The lock service behind [`LOCKS_BINDING`]: TTL and timeout only.
    fn read_worker_vars(&self, _var: Vars, c: WorkerCommon) -> Result<BackendSpec, LockError> {
        let mut cfg = DurableConfig::new(DurableEndpoint::Binding(LOCKS_BINDING.into()));
        set(&mut cfg.ttl_ms, c.ttl);
        set(&mut cfg.request_timeout_ms, c.timeout);
        Ok(BackendSpec::DurableObject(cfg))
    }

    /// `--durable-object URL` (the service's base URL, whole), its bearer
    /// token from `--token` or `$EDGELOCK_API_TOKEN`.
    fn command_line(&self) -> Option<CommandLine> {
        Some(CommandLine {
            flag: "--durable-object",
            urls: UrlList::Whole,
            token_vars: &["EDGELOCK_API_TOKEN"],
            user: None,
            redis_password_vars: &[],
            fair: false,
        })
    }

    /// The URL, token and lock TTL (requests bounded by half of it).
    fn read_flags(&self, f: Flags) -> Result<BackendSpec, LockError> {
        let url = f.urls.into_iter().next().unwrap_or_default();
        let mut cfg = DurableConfig::new(DurableEndpoint::Url(url));
        cfg.token = f.token;
        if let Some(t) = f.ttl_ms {
            cfg.ttl_ms = t;
            cfg.request_timeout_ms = Flags::request_timeout(t, cfg.request_timeout_ms, 2);
        }
        Ok(BackendSpec::DurableObject(cfg))
    }
}

impl BackendConfig for DurableConfig {
    fn kind(&self) -> BackendKind {
        BackendKind::DurableObject
    }

    fn options_json(&self) -> String {
        to_json(&DurableOptions::from_config(self))
    }

    fn build(
        &self,
        entropy: Box<dyn Entropy + Send>,
    ) -> Result<Box<dyn LockMachine + Send>, LockError> {
        Ok(Box::new(DurableMachine::new(self.clone(), entropy)?))
    }

    fn urls(&self) -> Vec<&str> {
        self.url().into_iter().collect()
    }

    /// The lock service queues each lock's waiters (`docs/lock-service-api.md`).
    fn queues_waiters_in_order(&self) -> bool {
        true
    }

    /// The lock service's namespace, when reached by binding.
    fn binding(&self) -> Option<Binding<'_>> {
        let DurableEndpoint::Binding(name) = &self.endpoint else {
            return None;
        };
        Some(Binding {
            name,
            kind: BindingKind::DurableObjectNamespace,
        })
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
