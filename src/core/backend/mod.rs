//! The backend table: every backend is one module here implementing
//! [`Backend`] (its name and its JSON options) and [`BackendConfig`] (on its
//! configuration: its machine, its URLs and bindings, what a Worker budgets
//! for it), plus one line of [`BACKENDS`] and one [`BackendSpec`] variant.
//! The npm bindings, the Worker, the CLI and the reliability tool reach a
//! backend through these, never by matching on its kind: the npm package and
//! the tool by its JSON options, the Worker by its variables
//! ([`Backend::read_worker_vars`]), the CLI by its flags
//! ([`Backend::command_line`], [`Backend::read_flags`]).
//!
//! [`BackendSpec`] describes a backend as data, and [`BackendSpec::build`] is
//! the one constructor of lock machines. The serialised form is one JSON
//! spelling (camelCase, the npm package's options), read by
//! [`BackendSpec::from_json`] and written by [`BackendSpec::to_json`].
//! Unknown fields are rejected so that a misspelt option fails loudly instead
//! of silently using a default.
//!
//! A new backend: its module here (options, Worker variables, command-line
//! flags if any, [`Backend`], [`BackendConfig`]), its line in [`BACKENDS`],
//! its [`BackendSpec`] variant and [`BackendKind`] name, and its machine.

mod command_line;
mod d1;
mod durable;
mod etcd;
mod redis;
mod redlock;
pub mod worker_vars;
mod zookeeper;

use serde_json::Value;

use crate::core::d1::D1Config;
use crate::core::durable::DurableConfig;
use crate::core::etcd::EtcdConfig;
use crate::core::json_fields::parse;
use crate::core::redis::address::is_resp_url;
use crate::core::redis::{RedisConfig, RedlockConfig};
use crate::core::zookeeper::ZkConfig;
use crate::core::{BackendKind, Entropy, LockError, LockMachine, MultiLock};

pub use command_line::{CommandLine, Flags, UrlList, UserFlag};
use worker_vars::{Vars, WorkerCommon};

/// Every backend, in the order of [`BackendKind::ALL`]: the one list the
/// bindings, the Worker, the CLI and the tools read.
pub const BACKENDS: &[&dyn Backend] = &[
    &etcd::Etcd,
    &redis::Redis,
    &redlock::Redlock,
    &durable::DurableObject,
    &d1::D1,
    &zookeeper::ZooKeeper,
];

/// One backend, as an entry of [`BACKENDS`]: its name and how its JSON
/// options read into a [`BackendSpec`].
pub trait Backend: Sync {
    /// Which backend this is.
    fn kind(&self) -> BackendKind;

    /// Its name (`etcd`, `redis`, `redlock`, `durable-object`, `d1`,
    /// `zookeeper`), as the
    /// npm package, the Worker's `EDGELOCK_BACKEND` and handles spell it.
    fn name(&self) -> &'static str {
        self.kind().as_str()
    }

    /// What its options are called in error messages (`Redis options`).
    fn options_label(&self) -> &'static str;

    /// Reads its JSON options (the npm package's spelling). Error messages
    /// never repeat a value (it could be a misplaced token).
    fn read_options(&self, options: &Value) -> Result<BackendSpec, String>;

    /// Reads its configuration from a Worker's variables (`var`), the
    /// variables every backend reads alike already read into `common`.
    /// Error messages name variables, never their values.
    fn read_worker_vars(&self, var: Vars, common: WorkerCommon) -> Result<BackendSpec, LockError>;

    /// How the command line names it; `None` (the default): the command
    /// line does not reach it.
    fn command_line(&self) -> Option<CommandLine> {
        None
    }

    /// Its configuration from the command line's flags (for a backend with
    /// a [`command_line`](Self::command_line)).
    fn read_flags(&self, flags: Flags) -> Result<BackendSpec, LockError> {
        let _ = flags;
        Err(LockError::invalid(format!(
            "the command line does not reach the {} backend",
            self.name()
        )))
    }
}

/// The backend of `kind` in [`BACKENDS`].
pub fn backend(kind: BackendKind) -> &'static dyn Backend {
    let found = BACKENDS.iter().find(|b| b.kind() == kind);
    // Every kind has its line (a test checks BACKENDS against BackendKind::ALL).
    *found.unwrap_or(&BACKENDS[0])
}

/// The backend named `name` (as [`Backend::name`] spells it).
pub fn backend_named(name: &str) -> Option<&'static dyn Backend> {
    BACKENDS.iter().copied().find(|b| b.name() == name)
}

/// A Cloudflare binding a backend's requests go through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Binding<'a> {
    /// The binding's name in the Worker's environment.
    pub name: &'a str,
    /// What the binding is.
    pub kind: BindingKind,
}

/// The kinds of [`Binding`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BindingKind {
    /// A Durable Object namespace serving the lock service.
    DurableObjectNamespace,
    /// A D1 database.
    D1Database,
}

/// A configured backend: what the drivers ask of it. Implemented by each
/// backend's configuration; reached through [`BackendSpec::config`].
pub trait BackendConfig {
    /// Which backend this configures.
    fn kind(&self) -> BackendKind;

    /// Its JSON options, every option spelled out (credentials included).
    fn options_json(&self) -> String;

    /// Its lock machine, every option validated first.
    fn build(
        &self,
        entropy: Box<dyn Entropy + Send>,
    ) -> Result<Box<dyn LockMachine + Send>, LockError>;

    /// Every URL its requests go to (drivers check their schemes).
    fn urls(&self) -> Vec<&str>;

    /// Whether its machine opens TCP (or TLS) byte streams: a `redis://`
    /// node, a ZooKeeper ensemble. A host without sockets (a browser)
    /// refuses such a backend before anything is sent.
    fn opens_tcp(&self) -> bool {
        self.urls().iter().any(|u| is_resp_url(u))
    }

    /// The binding its requests go through, if any (a Worker's environment).
    fn binding(&self) -> Option<Binding<'_>> {
        None
    }

    /// Requests a release and its cleanup take (a Worker keeps them back
    /// when its subrequest budget runs low).
    fn cleanup_requests(&self) -> u32 {
        1
    }

    /// The cap on Redis wake-up subscriptions, for backends that subscribe.
    fn max_subscriptions(&self) -> Option<usize> {
        None
    }

    /// Whether waiters get the lock in the order they asked (a FIFO queue
    /// on the backend), so that no contender starves.
    fn queues_waiters_in_order(&self) -> bool {
        false
    }
}

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
    /// A ZooKeeper ensemble over its own protocol (`src/core/zookeeper`).
    ZooKeeper(ZkConfig),
}

impl BackendSpec {
    /// The configuration inside, as its backend's [`BackendConfig`]: the
    /// one place that looks at the variant.
    pub fn config(&self) -> &dyn BackendConfig {
        match self {
            BackendSpec::Etcd(c) => c,
            BackendSpec::Redis(c) => c,
            BackendSpec::Redlock(c) => c,
            BackendSpec::DurableObject(c) => c,
            BackendSpec::D1(c) => c,
            BackendSpec::ZooKeeper(c) => c,
        }
    }

    /// Which backend this describes.
    pub fn kind(&self) -> BackendKind {
        self.config().kind()
    }

    /// Reads the JSON options of backend `kind` (the npm package's spelling:
    /// `{ endpoints, … }`, `{ url, protocol, token, … }`, `{ nodes, … }`,
    /// `{ url | binding, token, … }`, `{ binding, table, … }`).
    /// Error messages never repeat a value (it could be a misplaced token).
    pub fn from_json(kind: BackendKind, json: &str) -> Result<BackendSpec, LockError> {
        let b = backend(kind);
        parse(b.options_label(), json, |v| b.read_options(v))
    }

    /// The JSON [`from_json`](Self::from_json) reads back to this spec, with
    /// every option spelled out. It carries the credentials (tokens, header
    /// values) of the spec: treat it as a secret, like the spec itself.
    pub fn to_json(&self) -> String {
        self.config().options_json()
    }

    /// Builds the lock machine, validating every option first. The machine
    /// is wrapped in a [`MultiLock`], which serves
    /// [`Operation::AcquireAll`](super::Operation::AcquireAll) for every backend.
    pub fn build(
        self,
        entropy: Box<dyn Entropy + Send>,
    ) -> Result<Box<dyn LockMachine + Send>, LockError> {
        Ok(Box::new(MultiLock::new(self.config().build(entropy)?)))
    }

    /// Every URL the backend's requests go to (drivers check their schemes).
    pub fn urls(&self) -> Vec<&str> {
        self.config().urls()
    }
}

/// Serialises options; plain strings, numbers and booleans cannot fail.
fn to_json<T: serde::Serialize>(options: &T) -> String {
    serde_json::to_string(options).unwrap_or_default()
}

pub(crate) fn set<T>(field: &mut T, value: Option<T>) {
    if let Some(v) = value {
        *field = v;
    }
}

#[cfg(test)]
mod tests {
    use super::{BackendKind, BackendSpec, BACKENDS};
    use crate::core::etcd::{EtcdAuth, EtcdConfig};
    use crate::core::redis::{
        RedisConfig, RedisNode, RedisProtocol, RedlockConfig, RedlockFencing,
    };
    use crate::core::SeededEntropy;

    #[test]
    fn the_table_lists_every_kind_once_in_order() {
        let kinds: Vec<BackendKind> = BACKENDS.iter().map(|b| b.kind()).collect();
        assert_eq!(kinds, BackendKind::ALL);
        for b in BACKENDS {
            assert_eq!(
                super::backend_named(b.name()).map(|f| f.kind()),
                Some(b.kind())
            );
        }
    }

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
