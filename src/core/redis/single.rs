//! The single-node Redis lock.
//!
//! - acquire: one `EVAL` of [`scripts::ACQUIRE`](super::scripts::ACQUIRE):
//!   `SET key token NX PX ttl` and, on a grant, `INCR` of the fencing
//!   counter (tokens count holders). A waiter that found the key held
//!   subscribes to the lock's wake-up channel and attempts again through
//!   [`scripts::ACQUIRE_QUEUED`](super::scripts::ACQUIRE_QUEUED), which puts
//!   it in the waiters' queue: a release names the queue's live head, and
//!   only that waiter attempts at once (see the README for the
//!   measurements); the others sleep until `min(holder's PTTL, 2 s)`, or
//!   `retry_delay_ms` while no subscription is confirmed, plus
//!   `0..=retry_jitter_ms` of jitter. With `fair`, only the head may take it.
//! - the owner token is 20 random bytes (40 hex characters) from the
//!   injected [`Entropy`], fresh for every attempt;
//! - release and extend are owner-checked Lua scripts; a watchdog renews at
//!   TTL/3 (`auto_extend`), `Event::Lost` when the key is found gone or
//!   foreign, or when the validity (`ttl − elapsed − (ttl × 0.01 + 2 ms)`
//!   from the start of the establishing request) runs out first;
//! - an error reaching the node fails the operation (after an owner-checked
//!   delete if the acquire's outcome is unknown); it is not retried.
//!
//! Fencing tokens strictly increase for as long as the node keeps its data;
//! a Redis without persistence that restarts starts counting again (use
//! AOF/RDB persistence, or Redlock with `RedlockFencing::Strict`, if tokens
//! must survive restarts).

use super::config::{
    validate_common, RedisNode, RedisProtocol, DEFAULT_DRIFT_FACTOR, DEFAULT_MAX_SUBSCRIPTIONS,
};
use super::context::Settings;
use super::engine::{delegate_lock_machine, Engine};
use super::link::NodeLink;
use crate::core::{BackendKind, Entropy, LockError};

/// Configuration of a single-node Redis client; [`RedisConfig::new`] gives the
/// defaults.
#[derive(Clone, Debug)]
pub struct RedisConfig {
    /// The Redis node.
    pub node: RedisNode,
    /// Keys are `{<prefix>:<name>}` and `{<prefix>:<name>}:fence`.
    pub prefix: String,
    /// Default lock TTL (per-acquire `AcquireOptions::ttl_ms` overrides it).
    pub ttl_ms: u64,
    /// Per-request timeout.
    pub request_timeout_ms: u64,
    /// Renew held locks at TTL/3 until released.
    pub auto_extend: bool,
    /// Longest pause between two attempts of a waiter.
    pub retry_delay_ms: u64,
    /// Random extra pause, `0..=retry_jitter_ms`.
    pub retry_jitter_ms: u64,
    /// Wake-up subscriptions (one streaming request per waiting acquire)
    /// open at once; 0 makes waiters poll. See `subscription`.
    pub max_subscriptions: usize,
    /// Fair lock (like Redisson's `getFairLock`): every attempt goes through
    /// the waiters' queue and only its head may take the lock (without it,
    /// waiters queue too, so that a release wakes only the head, but anyone
    /// may take a free lock). Off by default (see the README for why).
    pub fair: bool,
    /// The host runs one script over keys of different Redis Cluster hash
    /// slots (a standalone `redis-server`; not a Redis Cluster, whose
    /// `CROSSSLOT` refuses it). Each name's keys carry the name's own hash
    /// tag, so an `acquireAll` of several names is then one script taking
    /// them all or none (`Capabilities::atomic_sets`); without it, the names
    /// are taken one by one, one script each (see `core::multi`).
    ///
    /// Default: on for Webdis (it fronts a standalone `redis-server`); off
    /// for the Upstash REST protocol, whose documentation does not say
    /// whether it accepts a script over several slots (see the README).
    pub cross_slot_scripts: bool,
}

impl RedisConfig {
    /// A configuration for `node`: prefix `edgelock`, 10 s TTL, 5 s request timeout,
    /// auto-extend, retries after at most 200 ms plus up to 100 ms of jitter.
    pub fn new(node: RedisNode) -> Self {
        RedisConfig {
            prefix: "edgelock".into(),
            ttl_ms: 10_000,
            request_timeout_ms: 5_000,
            auto_extend: true,
            retry_delay_ms: 200,
            retry_jitter_ms: 100,
            max_subscriptions: DEFAULT_MAX_SUBSCRIPTIONS,
            fair: false,
            cross_slot_scripts: node.protocol == RedisProtocol::Webdis,
            node,
        }
    }
}

/// The single-node Redis lock (see the module docs) as a sans-IO
/// [`LockMachine`](crate::core::LockMachine).
pub struct RedisMachine {
    pub(super) engine: Engine,
}

impl RedisMachine {
    /// Validates `cfg` and builds the machine. Nothing is sent before the first
    /// operation.
    pub fn new(cfg: RedisConfig, entropy: Box<dyn Entropy + Send>) -> Result<Self, LockError> {
        validate_common(
            &cfg.prefix,
            cfg.ttl_ms,
            cfg.request_timeout_ms,
            DEFAULT_DRIFT_FACTOR,
            cfg.retry_delay_ms,
            cfg.retry_jitter_ms,
        )?;
        let node = NodeLink::new(&cfg.node, cfg.request_timeout_ms)?;
        let settings = Settings {
            backend: BackendKind::Redis,
            prefix: cfg.prefix,
            ttl_ms: cfg.ttl_ms,
            request_timeout_ms: cfg.request_timeout_ms,
            auto_extend: cfg.auto_extend,
            drift_factor: DEFAULT_DRIFT_FACTOR,
            retry_count: 0,
            retry_delay_ms: cfg.retry_delay_ms,
            retry_jitter_ms: cfg.retry_jitter_ms,
            strict_fencing: false,
            max_subscriptions: cfg.max_subscriptions,
            fair: cfg.fair,
            cross_slot_scripts: cfg.cross_slot_scripts,
        };
        Ok(RedisMachine {
            engine: Engine::new(settings, vec![node], entropy),
        })
    }
}

delegate_lock_machine!(RedisMachine, [Exclusive, Shared, Permits, Leader]);
