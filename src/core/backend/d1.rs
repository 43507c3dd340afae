//! A lease row in a Cloudflare D1 table (`src/core/d1`), reached by binding.

use serde::Serialize;
use serde_json::Value;

use super::worker_vars::{Vars, WorkerCommon, D1_BINDING};
use super::{set, to_json, Backend, BackendConfig, BackendSpec, Binding, BindingKind};
use crate::core::d1::{D1Config, D1Machine};
use crate::core::json_fields::Fields;
use crate::core::{BackendKind, Entropy, LockError, LockMachine};

/// The d1 line of [`BACKENDS`](super::BACKENDS).
pub(super) struct D1;

impl Backend for D1 {
    fn kind(&self) -> BackendKind {
        BackendKind::D1
    }

    fn options_label(&self) -> &'static str {
        "d1 options"
    }

    fn read_options(&self, options: &Value) -> Result<BackendSpec, String> {
        Ok(BackendSpec::D1(D1Options::read(options)?))
    }

    /// The D1 database behind [`D1_BINDING`]: TTL and timeout only.
    fn read_worker_vars(&self, _var: Vars, c: WorkerCommon) -> Result<BackendSpec, LockError> {
        let mut cfg = D1Config::new(D1_BINDING);
        set(&mut cfg.ttl_ms, c.ttl);
        set(&mut cfg.request_timeout_ms, c.timeout);
        Ok(BackendSpec::D1(cfg))
    }
}

impl BackendConfig for D1Config {
    fn kind(&self) -> BackendKind {
        BackendKind::D1
    }

    fn options_json(&self) -> String {
        to_json(&D1Options::from_config(self))
    }

    fn build(
        &self,
        entropy: Box<dyn Entropy + Send>,
    ) -> Result<Box<dyn LockMachine + Send>, LockError> {
        Ok(Box::new(D1Machine::new(self.clone(), entropy)?))
    }

    /// Requests go through the database binding, not to a URL.
    fn urls(&self) -> Vec<&str> {
        Vec::new()
    }

    fn binding(&self) -> Option<Binding<'_>> {
        Some(Binding {
            name: &self.binding,
            kind: BindingKind::D1Database,
        })
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
