//! The Worker's configuration, read from its environment (`[vars]` in
//! `wrangler.toml`, secrets set with `wrangler secret put`):
//!
//! | binding | meaning |
//! |---|---|
//! | `EDGELOCK_BACKEND` | `etcd`, `redis`, `redlock` or `durable-object` (the lock service of this Worker's Durable Object namespace `EDGELOCK_LOCKS`, reached through a router that picks the object by name, see [`super::client`]) or `d1` (a lease row in the table `edgelock_locks` of the D1 database bound as `EDGELOCK_D1`, see [`super::d1`]) or `zookeeper` (Curator's mutex recipe over one `connect()` connection per invocation's client: `POST /jobs/:name/run` and the cron job; `/start` + `/finish` is refused at `/finish`, a ZooKeeper lock being its session's node) |
//! | `EDGELOCK_ETCD_ENDPOINTS` | etcd gateway URLs, comma-separated |
//! | `EDGELOCK_ETCD_AUTHORIZATION` | secret: `Authorization` header for etcd (optional) |
//! | `EDGELOCK_ETCD_USER`, `EDGELOCK_ETCD_PASSWORD` | etcd authentication: user name, and the password as a secret (tokens are fetched and renewed by the client) |
//! | `EDGELOCK_REDIS_URL` | one node: `redis://…` / `rediss://…` (the Redis protocol, reached with `connect()` of `cloudflare:sockets`, TLS for `rediss://`; see [`super::sockets`]), `upstash+https://…` or `webdis+http://…` (a bare `http(s)://` URL is Upstash) |
//! | `EDGELOCK_REDLOCK_NODES` | Redlock nodes, comma-separated, in the same form (kinds may be mixed; at most 6 `redis://` nodes) |
//! | `EDGELOCK_REDIS_TOKEN` | secret: the Upstash REST token, or a `redis://` node's password (a password in the URL works too, not both; keep it a secret rather than in `[vars]`). Node `i` of Redlock: `EDGELOCK_REDIS_TOKEN_<i>` first; a `redis://` node whose URL holds its password ignores the shared one |
//! | `EDGELOCK_ZK_CONNECT` | the ZooKeeper ensemble, `host:port[,host:port...][/chroot]` |
//! | `EDGELOCK_ZK_ROOT` | the path the locks' nodes live under (default `/edgelock`: lock `name` is Curator's `/edgelock/name`) |
//! | `EDGELOCK_ZK_DIGEST_USER`, `EDGELOCK_ZK_DIGEST_PASSWORD` | ZooKeeper digest authentication: user, and the password as a secret |
//! | `EDGELOCK_ZK_TLS` | `true`: TLS to the ZooKeeper servers (`secureTransport: "on"`) |
//! | `EDGELOCK_PREFIX`, `EDGELOCK_TTL_MS`, `EDGELOCK_REQUEST_TIMEOUT_MS` | lock key prefix (not ZooKeeper's: `EDGELOCK_ZK_ROOT`), lock TTL (etcd: session lease TTL; ZooKeeper: the session timeout asked for), per-request timeout |
//! | `EDGELOCK_SUBREQUEST_BUDGET` | subrequests one invocation may make (default 50, the free plan's limit) |
//! | `EDGELOCK_MAX_SUBSCRIPTIONS` | Redis push wake-up streams a waiting invocation holds open (default 5 on one node, 0 on Redlock, see [`workers_max_subscriptions`]; on a Redlock of `redis://` nodes only, 6 − nodes, see [`fit_tcp_nodes`]; 0 polls) |
//! | `EDGELOCK_FENCED_URL` | the fenced resource the demo job writes to |
//! | `EDGELOCK_JOB_MS` | how long the demo job works (default 20 ms) |
//! | `EDGELOCK_DEFAULT_WAIT_MS` | wait of `POST /jobs/:name/run` without `waitMs`/`ifAvailable` (default 10000) |
//! | `EDGELOCK_CRON_JOB`, `EDGELOCK_CRON_WAIT_MS` | job the cron trigger runs (default `cron`) and how long it waits for the lock (default 0: skip when busy) |
//! | `EDGELOCK_CRON_ELECT` | `true`: the cron job runs only in the invocation elected leader of the election named after the job (campaign, run with the leadership's fencing token, resign); the others skip with `NOT_LEADER` (default `false`: the job's lock) |
//! | `EDGELOCK_JOB_LIMITS` | jobs that may run N at once, `name=N` comma-separated (e.g. `renders=3,thumbs=5`): each run takes one of N permits of a semaphore instead of the exclusive lock (the cron job too, if listed) |
//! | `EDGELOCK_API_TOKEN` | secret: the bearer token every route requires (all lock names); without it or the next, every route answers 403 (see [`super::auth`]) |
//! | `EDGELOCK_API_TOKENS` | secret: tokens scoped to lock-name prefixes, `PREFIX=TOKEN` per line or comma |
//! | `EDGELOCK_CORS_ORIGINS` | origins whose browser pages may call the lock service's front `/lock` (CORS), comma-separated `scheme://host[:port]`, or `*`; unset (the default): no CORS headers. Read by [`super::lock_object::front`]; the bearer token stays the access control |
//!
//! Values are strings; numbers may also be given as numbers. Nothing here
//! ever puts a value of a token binding into a message.

use super::auth::AccessPolicy;
use crate::core::backend::worker_vars::list;
// Each backend reads its own variables in its module of the core's backend
// table (`Backend::read_worker_vars`); what they share lives there too.
pub use crate::core::backend::worker_vars::{
    workers_max_subscriptions, Vars, WorkerCommon, D1_BINDING, LOCKS_BINDING, OPEN_CONNECTIONS,
};
use crate::core::backend::{backend_named, BACKENDS};
use crate::core::redis::address::is_resp_url;
use crate::core::{BackendSpec, LockError, LockKind, MAX_PERMITS};

#[derive(Clone, Debug)]
pub struct Config {
    pub backend: BackendSpec,
    pub subrequest_budget: u32,
    pub fenced_url: Option<String>,
    pub job_ms: u64,
    pub default_wait_ms: u64,
    pub cron_job: String,
    pub cron_wait_ms: u64,
    /// `EDGELOCK_CRON_ELECT`: the cron job runs only in the invocation that
    /// wins the election named after the job (instead of under its lock).
    pub cron_elect: bool,
    /// `EDGELOCK_JOB_LIMITS`: jobs that run at most N at once, by name.
    pub job_limits: Vec<(String, LockKind)>,
    /// Who may call the routes (`EDGELOCK_API_TOKEN` / `EDGELOCK_API_TOKENS`).
    pub access: AccessPolicy,
}

impl Config {
    /// The configured kind of job `name`: a semaphore's permit if
    /// `EDGELOCK_JOB_LIMITS` names it, else `None`.
    pub fn job_kind(&self, name: &str) -> Option<LockKind> {
        self.job_limits
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, k)| *k)
    }
}

/// `name=N,name=N` → the jobs' semaphores (N in 1..=MAX_PERMITS).
fn job_limits(v: &str) -> Result<Vec<(String, LockKind)>, LockError> {
    list(v)
        .into_iter()
        .map(|entry| {
            let parsed = entry.rsplit_once('=').and_then(|(name, n)| {
                let kind = LockKind::permits(n.trim().parse::<u64>().ok()?).ok()?;
                Some((name.trim().to_string(), kind)).filter(|(name, _)| !name.is_empty())
            });
            parsed.ok_or_else(|| {
                LockError::invalid(format!(
                    "EDGELOCK_JOB_LIMITS must list name=N entries with N in 1..={MAX_PERMITS}, comma-separated"
                ))
            })
        })
        .collect()
}

pub const DEFAULT_SUBREQUEST_BUDGET: u32 = 50;

/// Longest a request may ask to wait or work: a Worker invocation is not a daemon.
pub const MAX_WAIT_MS: u64 = 15 * 60 * 1000;

/// `name` as a whole number in `0..=max` (`default` when unset).
fn num(var: Vars, name: &str, default: u64, max: u64) -> Result<u64, LockError> {
    match var(name) {
        None => Ok(default),
        Some(v) => match v.trim().parse::<u64>() {
            Ok(n) if n <= max => Ok(n),
            _ => Err(LockError::invalid(format!(
                "{name} must be a whole number between 0 and {max}"
            ))),
        },
    }
}

/// `name` as a whole number in `0..=max`, if set.
fn optional_num(var: Vars, name: &str, max: u64) -> Result<Option<u64>, LockError> {
    var(name).map(|_| num(var, name, 0, max)).transpose()
}

/// The variables several backends read alike (each applies those it has),
/// read and checked before the backend is known, as they always were.
fn common_vars(var: Vars) -> Result<WorkerCommon, LockError> {
    Ok(WorkerCommon {
        ttl: optional_num(var, "EDGELOCK_TTL_MS", MAX_WAIT_MS)?,
        timeout: optional_num(var, "EDGELOCK_REQUEST_TIMEOUT_MS", 600_000)?,
        prefix: var("EDGELOCK_PREFIX"),
        max_subscriptions: optional_num(var, "EDGELOCK_MAX_SUBSCRIPTIONS", 1_000)?
            .map(|n| n as usize),
    })
}

/// `EDGELOCK_BACKEND` and that backend's variables, read by its entry of
/// the core's backend table; the connection budget of `redis://` nodes
/// applied ([`fit_tcp_nodes`]).
fn backend_from_vars(var: Vars) -> Result<BackendSpec, LockError> {
    let name = var("EDGELOCK_BACKEND").unwrap_or_default();
    let common = common_vars(var)?;
    let Some(backend) = backend_named(name.trim()) else {
        return Err(LockError::invalid(format!(
            "EDGELOCK_BACKEND must be {}",
            served_backends()
        )));
    };
    let explicit_subscriptions = common.max_subscriptions.is_some();
    let mut spec = backend.read_worker_vars(var, common)?;
    fit_tcp_nodes(&mut spec, explicit_subscriptions)?;
    Ok(spec)
}

/// The connections of `redis://` / `rediss://` nodes (reached with
/// `connect()`, see [`super::sockets`]) within the invocation's
/// [`OPEN_CONNECTIONS`]: the client holds one command connection per such
/// node while it lives, and one subscriber connection per node it
/// subscribes on (shared by all its waiters), at most `max_subscriptions`.
///
/// More such nodes than [`OPEN_CONNECTIONS`] are refused. A Redlock whose
/// nodes all speak the Redis protocol subscribes by default on
/// `OPEN_CONNECTIONS - nodes` of them (1 on five nodes; the other waiters'
/// nodes are left to their retry timer), as the npm package's workerd entry
/// does: over TCP the attempt round every release wakes costs no subrequest
/// (the commands go on the open connections), and those rounds' subrequests
/// are why the core's Worker default is 0 on a Redlock. A Redlock with HTTP
/// nodes keeps that default, and `EDGELOCK_MAX_SUBSCRIPTIONS` is kept as
/// given.
fn fit_tcp_nodes(spec: &mut BackendSpec, explicit_subscriptions: bool) -> Result<(), LockError> {
    let urls = spec.urls();
    let tcp = urls.iter().filter(|u| is_resp_url(u)).count();
    let all_tcp = tcp == urls.len();
    if tcp > OPEN_CONNECTIONS {
        return Err(LockError::invalid(format!(
            "EDGELOCK_REDLOCK_NODES: at most {OPEN_CONNECTIONS} redis:// or rediss:// nodes (an invocation holds one connection open per node, and at most {OPEN_CONNECTIONS} at once)"
        )));
    }
    if let BackendSpec::Redlock(cfg) = spec {
        if all_tcp && !explicit_subscriptions {
            cfg.max_subscriptions = OPEN_CONNECTIONS - tcp;
        }
    }
    Ok(())
}

/// The names of the backends this Worker serves: `etcd, redis or d1`.
fn served_backends() -> String {
    let names: Vec<&str> = BACKENDS.iter().map(|b| b.name()).collect();
    match names.split_last() {
        Some((last, [])) => last.to_string(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

impl Config {
    /// `var(name)` returns the binding's value as a string, if it is set.
    pub fn from_vars(var: Vars) -> Result<Config, LockError> {
        let backend = backend_from_vars(var)?;
        Ok(Config {
            backend,
            subrequest_budget: num(
                var,
                "EDGELOCK_SUBREQUEST_BUDGET",
                DEFAULT_SUBREQUEST_BUDGET as u64,
                100_000,
            )? as u32,
            fenced_url: var("EDGELOCK_FENCED_URL")
                .map(|u| u.trim().trim_end_matches('/').to_string())
                .filter(|u| !u.is_empty()),
            job_ms: num(var, "EDGELOCK_JOB_MS", 20, MAX_WAIT_MS)?,
            default_wait_ms: num(var, "EDGELOCK_DEFAULT_WAIT_MS", 10_000, MAX_WAIT_MS)?,
            cron_job: var("EDGELOCK_CRON_JOB")
                .filter(|j| !j.trim().is_empty())
                .unwrap_or_else(|| "cron".into()),
            cron_wait_ms: num(var, "EDGELOCK_CRON_WAIT_MS", 0, MAX_WAIT_MS)?,
            cron_elect: flag(var("EDGELOCK_CRON_ELECT").as_deref(), "EDGELOCK_CRON_ELECT")?,
            job_limits: job_limits(&var("EDGELOCK_JOB_LIMITS").unwrap_or_default())?,
            access: AccessPolicy::from_secrets(
                var("EDGELOCK_API_TOKEN").as_deref(),
                var("EDGELOCK_API_TOKENS").as_deref(),
            )?,
        })
    }
}

/// A boolean var: unset, "", "0" or "false" is off; "1" or "true" is on.
fn flag(v: Option<&str>, name: &str) -> Result<bool, LockError> {
    match v.map(str::trim) {
        None | Some("" | "0" | "false") => Ok(false),
        Some("1" | "true") => Ok(true),
        Some(_) => Err(LockError::invalid(format!(
            "{name} must be \"true\" or \"false\""
        ))),
    }
}
