//! ZooKeeper over its own protocol (TCP, or TLS): `{ connect, root,
//! sessionTimeoutMs, requestTimeoutMs, digest: { user, password }, tls,
//! readWriteNames }` (`readWriteNames`: the names whose exclusive acquires
//! are Curator read-write lock writers, see `ZkConfig::read_write_names`).
//! Reached by the native client, by JavaScript hosts with sockets and by
//! the command line (`--zookeeper CONNECT`) and the Worker
//! (`EDGELOCK_ZK_CONNECT`: one `connect()` connection per invocation's client).

use serde::Serialize;
use serde_json::Value;

use super::worker_vars::{in_var, Vars, WorkerCommon};
use super::{
    set, to_json, Backend, BackendConfig, BackendSpec, CommandLine, Flags, UrlList, UserFlag,
};
use crate::core::json_fields::Fields;
use crate::core::zookeeper::{ZkAddress, ZkConfig, ZkDigest, ZkMachine};
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

    /// `EDGELOCK_ZK_CONNECT` (the connection string), `EDGELOCK_ZK_ROOT`,
    /// `EDGELOCK_ZK_DIGEST_USER` with the secret
    /// `EDGELOCK_ZK_DIGEST_PASSWORD`, `EDGELOCK_ZK_TLS`; `EDGELOCK_TTL_MS`
    /// is the session timeout asked for, `EDGELOCK_REQUEST_TIMEOUT_MS` the
    /// request timeout (`EDGELOCK_PREFIX` does not apply: the root is a
    /// path). The session lives as long as the invocation's client: a run
    /// acquires, works and releases in one invocation, over one `connect()`
    /// connection.
    fn read_worker_vars(&self, var: Vars, c: WorkerCommon) -> Result<BackendSpec, LockError> {
        let connect = var("EDGELOCK_ZK_CONNECT").ok_or_else(|| {
            LockError::invalid("EDGELOCK_ZK_CONNECT is required for the zookeeper backend")
        })?;
        let mut cfg = ZkConfig::new(connect.trim());
        set(&mut cfg.root, var("EDGELOCK_ZK_ROOT"));
        if let Some(user) = var("EDGELOCK_ZK_DIGEST_USER") {
            let password = var("EDGELOCK_ZK_DIGEST_PASSWORD").ok_or_else(|| {
                LockError::invalid(
                    "EDGELOCK_ZK_DIGEST_USER needs the secret EDGELOCK_ZK_DIGEST_PASSWORD",
                )
            })?;
            cfg.digest = Some(ZkDigest { user, password });
        }
        cfg.tls = match var("EDGELOCK_ZK_TLS").as_deref().map(str::trim) {
            None | Some("" | "0" | "false") => false,
            Some("1" | "true") => true,
            Some(_) => {
                return Err(LockError::invalid(
                    "EDGELOCK_ZK_TLS must be \"true\" or \"false\"",
                ))
            }
        };
        if let Some(t) = c.ttl {
            cfg.session_timeout_ms = u32::try_from(t).map_err(|_| {
                LockError::invalid("EDGELOCK_TTL_MS (the ZooKeeper session timeout) is too large")
            })?;
        }
        set(&mut cfg.request_timeout_ms, c.timeout);
        // Checked here, so that a bad value is refused naming its variable.
        ZkAddress::parse(&cfg.connect).map_err(in_var("EDGELOCK_ZK_CONNECT"))?;
        cfg.validate().map_err(in_var(
            "EDGELOCK_ZK_ROOT, EDGELOCK_ZK_DIGEST_USER / _PASSWORD, EDGELOCK_TTL_MS or EDGELOCK_REQUEST_TIMEOUT_MS",
        ))?;
        Ok(BackendSpec::ZooKeeper(cfg))
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
        set(&mut cfg.root, self.root);
        set(&mut cfg.session_timeout_ms, self.session_timeout_ms);
        set(&mut cfg.request_timeout_ms, self.request_timeout_ms);
        set(&mut cfg.tls, self.tls);
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
    use crate::core::backend::worker_vars::WorkerCommon;
    use crate::core::backend::{backend_named, BackendSpec, Flags};
    use crate::core::{BackendKind, SeededEntropy};

    #[test]
    fn worker_vars_give_the_connect_string_root_digest_tls_and_timeouts() {
        let zk = backend_named("zookeeper").unwrap();
        let read = |vars: &[(&str, &str)], common: WorkerCommon| {
            let var = |name: &str| {
                vars.iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            };
            zk.read_worker_vars(&var, common)
        };
        let common = WorkerCommon {
            ttl: Some(5_000),
            timeout: Some(1_500),
            ..WorkerCommon::default()
        };
        let vars = [
            ("EDGELOCK_ZK_CONNECT", " a:1,b:2/app "),
            ("EDGELOCK_ZK_ROOT", "/jobs"),
            ("EDGELOCK_ZK_DIGEST_USER", "u"),
            ("EDGELOCK_ZK_DIGEST_PASSWORD", "pw-s3cret"),
            ("EDGELOCK_ZK_TLS", "true"),
        ];
        let Ok(BackendSpec::ZooKeeper(c)) = read(&vars, common.clone()) else {
            panic!("zookeeper")
        };
        assert_eq!(
            (c.connect.as_str(), c.root.as_str(), c.tls),
            ("a:1,b:2/app", "/jobs", true)
        );
        assert_eq!((c.session_timeout_ms, c.request_timeout_ms), (5_000, 1_500));
        assert_eq!(c.digest.map(|d| d.password), Some("pw-s3cret".to_string()));
        for (bad, says) in [
            (&[][..], "EDGELOCK_ZK_CONNECT is required"),
            (
                &[("EDGELOCK_ZK_CONNECT", "a:1/bad/")][..],
                "EDGELOCK_ZK_CONNECT: ",
            ),
            (
                &[("EDGELOCK_ZK_CONNECT", "a:1"), ("EDGELOCK_ZK_ROOT", "/")][..],
                "EDGELOCK_ZK_ROOT",
            ),
            (
                &[
                    ("EDGELOCK_ZK_CONNECT", "a:1"),
                    ("EDGELOCK_ZK_TLS", "pw-s3cret"),
                ][..],
                "EDGELOCK_ZK_TLS must be",
            ),
            (
                &[
                    ("EDGELOCK_ZK_CONNECT", "a:1"),
                    ("EDGELOCK_ZK_DIGEST_USER", "u"),
                ][..],
                "needs the secret EDGELOCK_ZK_DIGEST_PASSWORD",
            ),
        ] {
            let e = read(bad, WorkerCommon::default()).unwrap_err();
            assert_eq!(e.code(), "INVALID_ARGUMENT");
            assert!(e.to_string().contains(says), "{e}");
            assert!(!e.to_string().contains("pw-s3cret"), "{e}");
        }
    }

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
