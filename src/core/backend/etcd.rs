//! etcd v3 through its JSON gateway: `{ endpoints, prefix, sessionTtlMs,
//! requestTimeoutMs, headers, auth }`.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use super::worker_vars::{list, Vars, WorkerCommon};
use super::{
    set, to_json, Backend, BackendConfig, BackendSpec, CommandLine, Flags, UrlList, UserFlag,
};
use crate::core::etcd::{Authenticated, EtcdAuth, EtcdConfig, EtcdMachine};
use crate::core::json_fields::{string_item, Fields};
use crate::core::{BackendKind, Entropy, LockError, LockMachine};

/// The etcd line of [`BACKENDS`](super::BACKENDS).
pub(super) struct Etcd;

impl Backend for Etcd {
    fn kind(&self) -> BackendKind {
        BackendKind::Etcd
    }

    fn options_label(&self) -> &'static str {
        "etcd options"
    }

    fn read_options(&self, options: &Value) -> Result<BackendSpec, String> {
        Ok(BackendSpec::Etcd(EtcdOptions::read(options)?.into_config()))
    }

    /// `EDGELOCK_ETCD_*`, and the prefix, TTL (the session lease's) and timeout.
    fn read_worker_vars(&self, var: Vars, c: WorkerCommon) -> Result<BackendSpec, LockError> {
        let endpoints = list(&var("EDGELOCK_ETCD_ENDPOINTS").unwrap_or_default());
        if endpoints.is_empty() {
            return Err(LockError::invalid(
                "EDGELOCK_ETCD_ENDPOINTS is required for the etcd backend",
            ));
        }
        let mut cfg = EtcdConfig::new(endpoints);
        if let Some(auth) = var("EDGELOCK_ETCD_AUTHORIZATION") {
            cfg.headers.push(("Authorization".into(), auth));
        }
        if let Some(username) = var("EDGELOCK_ETCD_USER") {
            let password = var("EDGELOCK_ETCD_PASSWORD").ok_or_else(|| {
                LockError::invalid("EDGELOCK_ETCD_USER needs the secret EDGELOCK_ETCD_PASSWORD")
            })?;
            cfg.auth = Some(EtcdAuth { username, password });
        }
        set(&mut cfg.prefix, c.prefix);
        set(&mut cfg.session_ttl_ms, c.ttl);
        set(&mut cfg.request_timeout_ms, c.timeout);
        Ok(BackendSpec::Etcd(cfg))
    }

    /// `--etcd URLS` (comma-separated), `--etcd-user` with its password
    /// from `$EDGELOCK_ETCD_PASSWORD`; no token.
    fn command_line(&self) -> Option<CommandLine> {
        Some(CommandLine {
            flag: "--etcd",
            urls: UrlList::Commas {
                min: 1,
                max: usize::MAX,
            },
            token_vars: &[],
            user: Some(UserFlag {
                flag: "--etcd-user",
                password_var: "EDGELOCK_ETCD_PASSWORD",
            }),
            redis_password_vars: &[],
            fair: false,
        })
    }

    /// The endpoints, prefix, session lease TTL (requests bounded by half
    /// of it), headers and user.
    fn read_flags(&self, f: Flags) -> Result<BackendSpec, LockError> {
        let mut cfg = EtcdConfig::new(f.urls);
        set(&mut cfg.prefix, f.prefix);
        if let Some(t) = f.ttl_ms {
            cfg.session_ttl_ms = t;
            cfg.request_timeout_ms = Flags::request_timeout(t, cfg.request_timeout_ms, 2);
        }
        cfg.headers = f.headers;
        cfg.auth = f
            .user
            .map(|(username, password)| EtcdAuth { username, password });
        Ok(BackendSpec::Etcd(cfg))
    }
}

impl BackendConfig for EtcdConfig {
    fn kind(&self) -> BackendKind {
        BackendKind::Etcd
    }

    fn options_json(&self) -> String {
        to_json(&EtcdOptions::from_config(self))
    }

    fn build(
        &self,
        entropy: Box<dyn Entropy + Send>,
    ) -> Result<Box<dyn LockMachine + Send>, LockError> {
        let Some(auth) = self.auth.clone() else {
            return Ok(Box::new(EtcdMachine::new(self.clone(), entropy)?));
        };
        let machine = EtcdMachine::new(self.clone(), entropy)?;
        Ok(Box::new(Authenticated::new(
            machine,
            auth,
            &self.prefix,
            self.request_timeout_ms,
        )))
    }

    fn urls(&self) -> Vec<&str> {
        self.endpoints.iter().map(String::as_str).collect()
    }

    /// Deleting the key, and revoking the invocation's session lease.
    fn cleanup_requests(&self) -> u32 {
        2
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
