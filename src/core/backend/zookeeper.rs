//! ZooKeeper over its own protocol (TCP, or TLS): `{ connect, root,
//! sessionTimeoutMs, requestTimeoutMs, digest: { user, password }, tls }`.
//! Reached by the native client, by JavaScript hosts with sockets and by
//! the command line (`--zookeeper CONNECT`); the Worker does not serve it yet.

use serde::Serialize;
use serde_json::Value;

use super::worker_vars::{Vars, WorkerCommon};
use super::{
    set, to_json, Backend, BackendConfig, BackendSpec, CommandLine, Flags, UrlList, UserFlag,
};
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

    /// `--zookeeper CONNECT` (one connection string, `h:p[,h:p][/chroot]`,
    /// commas and all), `--zk-root`, `--zk-digest USER` with the password
    /// from `$EDGELOCK_ZK_PASSWORD`; no token, no `--fair` (the recipe's
    /// queue is already in creation order).
    fn command_line(&self) -> Option<CommandLine> {
        Some(CommandLine {
            flag: "--zookeeper",
            urls: UrlList::Whole,
            token_vars: &[],
            user: Some(UserFlag {
                flag: "--zk-digest",
                password_var: "EDGELOCK_ZK_PASSWORD",
            }),
            redis_password_vars: &[],
            fair: false,
        })
    }

    /// The connection string, root, digest user and, from `--ttl`, the
    /// session timeout asked for (requests bounded by half of it). A
    /// `--prefix` is refused: ZooKeeper names a path, `--zk-root`.
    fn read_flags(&self, f: Flags) -> Result<BackendSpec, LockError> {
        if f.prefix.is_some() {
            return Err(LockError::invalid(
                "--prefix does not apply to --zookeeper: give the parent path as --zk-root",
            ));
        }
        let connect = f.urls.into_iter().next().unwrap_or_default();
        let mut cfg = ZkConfig::new(connect);
        set(&mut cfg.root, f.root);
        if let Some(t) = f.ttl_ms {
            cfg.session_timeout_ms = u32::try_from(t).map_err(|_| {
                LockError::invalid("--ttl (the ZooKeeper session timeout) is too large")
            })?;
            cfg.request_timeout_ms = Flags::request_timeout(t, cfg.request_timeout_ms, 2);
        }
        cfg.digest = f.user.map(|(user, password)| ZkDigest { user, password });
        Ok(BackendSpec::ZooKeeper(cfg))
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
        }
    }

    fn into_config(self) -> ZkConfig {
        let mut cfg = ZkConfig::new(self.connect);
        set(&mut cfg.root, self.root);
        set(&mut cfg.session_timeout_ms, self.session_timeout_ms);
        set(&mut cfg.request_timeout_ms, self.request_timeout_ms);
        set(&mut cfg.tls, self.tls);
        cfg.digest = self.digest.map(|d| ZkDigest {
            user: d.user,
            password: d.password,
        });
        cfg
    }
}

#[cfg(test)]
mod tests {
    use crate::core::backend::{backend_named, BackendSpec, Flags};
    use crate::core::{BackendKind, SeededEntropy};

    #[test]
    fn flags_give_the_connect_string_root_digest_and_session_timeout() {
        let zk = backend_named("zookeeper").unwrap();
        let line = zk.command_line().unwrap();
        assert_eq!(line.flag, "--zookeeper");
        assert_eq!(line.urls.read(" a:1,b:2/app "), ["a:1,b:2/app"]);
        let flags = Flags {
            urls: vec!["a:1,b:2/app".into()],
            root: Some("/jobs".into()),
            ttl_ms: Some(4_000),
            user: Some(("u".into(), "pw-s3cret".into())),
            ..Flags::default()
        };
        let BackendSpec::ZooKeeper(c) = zk.read_flags(flags).unwrap() else {
            panic!("zookeeper")
        };
        assert_eq!(
            (c.connect.as_str(), c.root.as_str()),
            ("a:1,b:2/app", "/jobs")
        );
        assert_eq!((c.session_timeout_ms, c.request_timeout_ms), (4_000, 2_000));
        let d = c.digest.unwrap();
        assert_eq!((d.user.as_str(), d.password.as_str()), ("u", "pw-s3cret"));
        let e = zk
            .read_flags(Flags {
                urls: vec!["a:1".into()],
                prefix: Some("p".into()),
                ..Flags::default()
            })
            .unwrap_err();
        assert!(e.to_string().contains("--zk-root"), "{e}");
    }

    #[test]
    fn json_options_read_back_and_build_a_zookeeper_machine() {
        let json = r#"{"connect":"127.0.0.1:2181/chroot","root":"/locks","sessionTimeoutMs":4000,"requestTimeoutMs":2000,"digest":{"user":"u","password":"pw-s3cret"}}"#;
        let spec = BackendSpec::from_json(BackendKind::ZooKeeper, json).unwrap();
        assert_eq!(spec.kind(), BackendKind::ZooKeeper);
        assert!(!format!("{spec:?}").contains("pw-s3cret"), "{spec:?}");
        assert!(spec.config().opens_tcp());
        let back = BackendSpec::from_json(BackendKind::ZooKeeper, &spec.to_json()).unwrap();
        assert_eq!(back.to_json(), spec.to_json());
        let m = spec.build(Box::new(SeededEntropy::new(1))).unwrap();
        assert_eq!(m.backend(), BackendKind::ZooKeeper);
        for bad in [
            r#"{"connect":"h","sessionTimeoutMs":"x"}"#,
            r#"{"connect":"h","digest":{"user":"u"}}"#,
            r#"{"connect":"h","tokne":"pw-s3cret"}"#,
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
