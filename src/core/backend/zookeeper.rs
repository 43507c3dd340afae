//! ZooKeeper over its own protocol (TCP, or TLS): `{ connect, root,
//! sessionTimeoutMs, requestTimeoutMs, digest: { user, password }, tls,
//! readWriteNames }` (`readWriteNames`: the names whose exclusive acquires
//! are Curator read-write lock writers, see `ZkConfig::read_write_names`).
//! Reached by the native client and by JavaScript hosts with sockets; the
//! Worker and the command line do not serve it yet.

use serde::Serialize;
use serde_json::Value;

use super::worker_vars::{Vars, WorkerCommon};
use super::{to_json, Backend, BackendConfig, BackendSpec};
use crate::core::json_fields::Fields;
use crate::core::zookeeper::{ZkConfig, ZkDigest, ZkMachine};
use crate::core::{BackendKind, Entropy, LockError, LockMachine};

/// The zookeeper line of [`BACKENDS`](super::BACKENDS).
pub(super) struct ZooKeeper;

impl Backend for ZooKeeper {
    fn kind(&self) -> BackendKind {
        BackendKind::ZooKeeper
    }

    fn options_label(&self) -> &'static str {
        "ZooKeeper options"
    }

    fn read_options(&self, options: &Value) -> Result<BackendSpec, String> {
        Ok(BackendSpec::ZooKeeper(
            ZkOptions::read(options)?.into_config(),
        ))
    }

    /// Refused: a Worker invocation cannot keep a ZooKeeper session alive
    /// between requests yet (design 4.5).
    fn read_worker_vars(&self, _var: Vars, _c: WorkerCommon) -> Result<BackendSpec, LockError> {
        Err(LockError::invalid(
            "the Worker does not serve the zookeeper backend yet (a ZooKeeper session must outlive the invocation); use etcd, redis, redlock, durable-object or d1",
        ))
    }
}

impl BackendConfig for ZkConfig {
    fn kind(&self) -> BackendKind {
        BackendKind::ZooKeeper
    }

    fn options_json(&self) -> String {
        to_json(&ZkOptions::from_config(self))
    }

    fn build(
        &self,
        entropy: Box<dyn Entropy + Send>,
    ) -> Result<Box<dyn LockMachine + Send>, LockError> {
        Ok(Box::new(ZkMachine::new(self.clone(), entropy)?))
    }

    /// None: ZooKeeper is reached over TCP streams, not URLs (see
    /// [`opens_tcp`](BackendConfig::opens_tcp)).
    fn urls(&self) -> Vec<&str> {
        Vec::new()
    }

    fn opens_tcp(&self) -> bool {
        true
    }

    /// ZooKeeper queues contenders in sequence order (Curator's mutex).
    fn queues_waiters_in_order(&self) -> bool {
        true
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ZkOptions {
    connect: String,
    root: Option<String>,
    session_timeout_ms: Option<u32>,
    request_timeout_ms: Option<u64>,
    digest: Option<DigestOptions>,
    tls: Option<bool>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    read_write_names: Vec<String>,
}

/// `digest: { user, password }`.
#[derive(Serialize)]
struct DigestOptions {
    user: String,
    password: String,
}

impl DigestOptions {
    fn read(v: &Value) -> Result<Self, String> {
        let f = Fields::new(v)?;
        let out = DigestOptions {
            user: f.str("user")?,
            password: f.str("password")?,
        };
        f.finish()?;
        Ok(out)
    }
}

impl ZkOptions {
    fn read(v: &Value) -> Result<Self, String> {
        let f = Fields::new(v)?;
        let out = ZkOptions {
            connect: f.str("connect")?,
            root: f.opt_str("root")?,
            session_timeout_ms: f.opt_u32("sessionTimeoutMs")?,
            request_timeout_ms: f.opt_u64("requestTimeoutMs")?,
            digest: f
                .opt_object("digest")?
                .map(|d| DigestOptions::read(d).map_err(|e| format!("`digest`: {e}")))
                .transpose()?,
            tls: f.opt_bool("tls")?,
            read_write_names: f
                .opt_list("readWriteNames", |v| {
                    v.as_str()
                        .map(str::to_string)
                        .ok_or_else(|| "expected an array of names (strings)".to_string())
                })?
                .unwrap_or_default(),
        };
        f.finish()?;
        Ok(out)
    }

    fn from_config(c: &ZkConfig) -> Self {
        ZkOptions {
            connect: c.connect.clone(),
            root: Some(c.root.clone()),
            session_timeout_ms: Some(c.session_timeout_ms),
            request_timeout_ms: Some(c.request_timeout_ms),
            digest: c.digest.as_ref().map(|d| DigestOptions {
                user: d.user.clone(),
                password: d.password.clone(),
            }),
            tls: Some(c.tls),
            read_write_names: c.read_write_names.clone(),
        }
    }

    fn into_config(self) -> ZkConfig {
        let mut cfg = ZkConfig::new(self.connect);
        super::set(&mut cfg.root, self.root);
        super::set(&mut cfg.session_timeout_ms, self.session_timeout_ms);
        super::set(&mut cfg.request_timeout_ms, self.request_timeout_ms);
        super::set(&mut cfg.tls, self.tls);
        cfg.read_write_names = self.read_write_names;
        cfg.digest = self.digest.map(|d| ZkDigest {
            user: d.user,
            password: d.password,
        });
        cfg
    }
}

#[cfg(test)]
mod tests {
    use crate::core::backend::BackendSpec;
    use crate::core::{BackendKind, SeededEntropy};

    #[test]
    fn json_options_read_back_and_build_a_zookeeper_machine() {
        let json = r#"{"connect":"127.0.0.1:2181/chroot","root":"/locks","sessionTimeoutMs":4000,"requestTimeoutMs":2000,"digest":{"user":"u","password":"pw-s3cret"},"readWriteNames":["rw"]}"#;
        let spec = BackendSpec::from_json(BackendKind::ZooKeeper, json).unwrap();
        assert_eq!(spec.kind(), BackendKind::ZooKeeper);
        assert!(!format!("{spec:?}").contains("pw-s3cret"), "{spec:?}");
        assert!(spec.config().opens_tcp());
        let back = BackendSpec::from_json(BackendKind::ZooKeeper, &spec.to_json()).unwrap();
        assert_eq!(back.to_json(), spec.to_json());
        assert!(
            spec.to_json().contains(r#""readWriteNames":["rw"]"#),
            "{}",
            spec.to_json()
        );
        let m = spec.build(Box::new(SeededEntropy::new(1))).unwrap();
        assert_eq!(m.backend(), BackendKind::ZooKeeper);
        for bad in [
            r#"{"connect":"h","sessionTimeoutMs":"x"}"#,
            r#"{"connect":"h","digest":{"user":"u"}}"#,
            r#"{"connect":"h","tokne":"pw-s3cret"}"#,
            r#"{"connect":"h","readWriteNames":[1]}"#,
            r#"{}"#,
        ] {
            let e = BackendSpec::from_json(BackendKind::ZooKeeper, bad).unwrap_err();
            assert_eq!(e.code(), "INVALID_ARGUMENT", "{bad}");
            assert!(!e.to_string().contains("pw-s3cret"), "{e}");
        }
        let e = BackendSpec::from_json(BackendKind::ZooKeeper, r#"{"connect":"h/bad/"}"#)
            .unwrap()
            .build(Box::new(SeededEntropy::new(1)))
            .err()
            .unwrap();
        assert!(e.to_string().contains("chroot"), "{e}");
    }
}
