//! Redlock across N independent Redis nodes, each reached over Upstash REST
//! or Webdis, with fencing tokens.
//!
//! # The algorithm
//!
//! An attempt sends the acquire script to all N nodes at once, each request
//! with its own timeout (`request_timeout_ms`), and waits until every node
//! has answered or timed out — or, once its outcome is decided without the
//! nodes still silent (a quorum granted, or none can form any more), for a
//! grace of a tenth of the timeout, after which the silent nodes count as
//! timed out (`Task::settled`). Without that, a frozen minority held every
//! attempt for the whole timeout, and a failed attempt's keys stayed on the
//! live nodes that long, so contending waiters kept failing one another (a
//! livelock; issue 26). It succeeds only if ⌊N/2⌋+1 nodes granted and
//! `validity = ttl − elapsed − (ttl × drift_factor + 2 ms) > 0`, with
//! `elapsed` measured from the start of *this* attempt (node-redlock measured
//! it from the first attempt, its issues #169/#296). On failure it deletes its
//! key (owner-checked) on every node that granted or did not answer — a node
//! that seemed to fail may still have applied the SET — and retries after
//! `retry_delay_ms ± retry_jitter_ms`, at most `retry_count` times when nodes
//! are unreachable (then `NoQuorum`); while others hold the lock, `Wait`
//! decides (see `acquire.rs`). Renewal (TTL/3) and extend succeed on a
//! quorum; the lock is lost when more than N − quorum nodes report the key
//! gone or foreign, or when the validity runs out before a renewal
//! succeeds. Uncontended, an acquire is one parallel round in the steady
//! state (two with Strict fencing when the nodes' counters disagree, see
//! below) and a release is one.
//!
//! # Fencing tokens across independent counters
//!
//! Each node keeps its own counter per lock name (`{prefix:name}:fence`).
//! The acquire script increments it on *every* attempt (granted or not) and
//! returns it; the attempt's token is the maximum over all answering nodes.
//! Every later script of the holder — the raise round below, renewals,
//! extends, release — carries the token and raises each node's counter to at
//! least it (raising is unconditional: it can only help).
//!
//! **Why it works.** Let H1 then H2 be successive holders (H2 granted after
//! H1), tokens T1 and T2. Suppose a quorum R1 of nodes had their counter
//! raised to ≥ T1 by a script of H1 that also found H1's key still in place.
//! H2's granting quorum Q2 intersects R1 (two majorities); take n in both.
//! On n, H1's key existed without interruption from H1's SET to that
//! script, so H2's SET on n came either before H1's SET — impossible: H2's
//! key would have vanished before H1 was granted, so H2's validity (which
//! ends before its keys expire, while clocks drift less than the drift
//! factor) would have ended before H1's began — or after the raise. Then
//! H2's INCR on n returned more than T1, and T2 > T1.
//!
//! **[`RedlockFencing::Strict`]** (the default) makes R1 exist before the lock is handed
//! out: after the quorum grant, a second parallel round runs the extend
//! script (raise to T, re-arm the TTL) on all N nodes, and the lock is
//! granted only if a quorum confirms it still holds the key and validity
//! (still measured from the attempt's start) remains. Guarantee: **T2 > T1
//! for successive holders, provided clock drift stays under the drift
//! factor and at least one node of H2's granting quorum that confirmed H1's
//! raise (or a later renewal or release of H1) has not restarted in
//! between** — always true without restarts; with restarts, true as long as
//! fewer nodes restart than the overlap of those two sets (with every node
//! reachable and no contention, both are all N nodes: up to N − 1 restarts
//! are tolerated). A restarted node (no persistence) comes back with a zero
//! counter and is raised again by the next raise, renewal or release that
//! reaches it. Cost: a second round, so an uncontended acquire takes two, and
//! since the raise round (like the attempt round) waits for every node, slow
//! nodes count twice against the validity (reliability scenario 7a). Handing
//! the lock out after a quorum of raise confirmations is NOT safe: the
//! attempt round may have lost the answer of the one node whose counter was
//! above T (the restart simulation found it).
//!
//! The raise round is skipped exactly when it would change no counter: when
//! **every** node answered the attempt and each reported its counter at T.
//! Then the granting quorum's own acquire scripts already left "counter ≥ T
//! and H's key in place" on a quorum, atomically — R1 exists at the grant
//! without a second round — and no node can hold a counter above T that
//! the attempt did not see. That is the steady state (every attempt moves
//! every node's counter together), so an uncontended acquire is one round;
//! a restarted, lagging or silent node brings the round back until the
//! counters agree again. A quorum at T is not enough (the silent node may
//! be the one above T: the case above).
//!
//! **[`RedlockFencing::Folded`]** (opt-in) hands the lock out after one
//! round and folds the raise into the holder's first renewal (at TTL/3) or
//! its release. Guarantee: T2 > T1 when H1 renewed or released on a quorum
//! before H2's attempt (the argument above), *or* when the node that
//! produced T1 (its counter reached T1 in H1's attempt) answers H2's
//! attempt without having restarted — always the case while every attempt
//! reaches every node. What it does not guarantee: if the node that produced
//! T1 is unreachable to H2 or restarted before H1's first renewal, T2 may be
//! ≤ T1 — and that needs no stall of H1: a restart right after the grant is
//! enough (the reliability suite's scenario 5a reproduces it in about half
//! of its trials: T1 = 10, T2 = 2, and the resource then accepts H1's late
//! write). That is why Strict is the default. Without the raise
//! folded in, tokens would still be unique per node but could go backwards
//! whenever counters diverge (failed attempts, unreachable nodes, restarts).
//!
//! Restarts and mutual exclusion: like every Redlock, a node that restarts
//! without persistence must stay unavailable for at least the longest TTL
//! ("delayed restart"), or a quorum may be formed twice.

use super::config::{validate_common, RedisNode, DEFAULT_MAX_SUBSCRIPTIONS};
use super::context::Settings;
use super::engine::{delegate_lock_machine, Engine};
use super::link::NodeLink;
use crate::core::{BackendKind, Entropy, LockError};

/// Most nodes a Redlock client accepts (every attempt talks to all of them).
pub const MAX_NODES: usize = 64;

/// How fencing tokens are made safe across independent counters (see the
/// module documentation for what each mode guarantees).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum RedlockFencing {
    /// One round per acquire; the counters are raised with the first
    /// renewal or the release. Faster, but a node restart before the
    /// holder's first renewal can hand the next holder a *lower* token
    /// (measured by the reliability suite, scenario 5a).
    Folded,
    /// The default. A second round raises a quorum's counters before the
    /// lock is handed out: tokens strictly increase even across node
    /// restarts (within the stated bound).
    #[default]
    Strict,
}

/// Configuration of a Redlock client; [`RedlockConfig::new`] gives the defaults.
#[derive(Clone, Debug)]
pub struct RedlockConfig {
    /// The independent Redis nodes (1 to [`MAX_NODES`], none listed twice); a
    /// quorum is a majority of them.
    pub nodes: Vec<RedisNode>,
    /// Keys are `{<prefix>:<name>}` and `{<prefix>:<name>}:fence` on every node.
    pub prefix: String,
    /// Default lock TTL (per-acquire `AcquireOptions::ttl_ms` overrides it).
    pub ttl_ms: u64,
    /// Clock-drift allowance per ms of TTL (0.01 = 1 %), plus 2 ms.
    pub drift_factor: f64,
    /// Retries when too few nodes are reachable, before `NoQuorum`.
    pub retry_count: u32,
    /// Pause between two attempts of an acquire (see `retry_jitter_ms`).
    pub retry_delay_ms: u64,
    /// Retry delays are `retry_delay_ms ± retry_jitter_ms`.
    pub retry_jitter_ms: u64,
    /// Renew held locks at TTL/3 until released.
    pub auto_extend: bool,
    /// Per node and request.
    pub request_timeout_ms: u64,
    /// How fencing tokens are kept increasing across nodes (default
    /// [`RedlockFencing::Strict`]).
    pub fencing: RedlockFencing,
    /// Wake-up subscriptions open at once (a waiter opens one per node); 0
    /// makes waiters poll. See `subscription`.
    pub max_subscriptions: usize,
}

impl RedlockConfig {
    /// A configuration for `nodes`: prefix `edgelock`, 10 s TTL, drift factor 0.01,
    /// 10 retries 200 ± 100 ms apart, auto-extend, 1 s request timeout, strict fencing.
    pub fn new(nodes: Vec<RedisNode>) -> Self {
        RedlockConfig {
            nodes,
            prefix: "edgelock".into(),
            ttl_ms: 10_000,
            drift_factor: 0.01,
            retry_count: 10,
            retry_delay_ms: 200,
            retry_jitter_ms: 100,
            auto_extend: true,
            request_timeout_ms: 1_000,
            fencing: RedlockFencing::default(),
            max_subscriptions: DEFAULT_MAX_SUBSCRIPTIONS,
        }
    }
}

/// Redlock over several independent Redis nodes (see the module docs) as a
/// sans-IO [`LockMachine`](crate::core::LockMachine).
pub struct RedlockMachine {
    pub(super) engine: Engine,
}

impl RedlockMachine {
    /// Validates `cfg` (1 to [`MAX_NODES`] distinct nodes, prefix, TTL, drift,
    /// retries) and builds the machine. Nothing is sent before the first operation.
    pub fn new(cfg: RedlockConfig, entropy: Box<dyn Entropy + Send>) -> Result<Self, LockError> {
        if cfg.nodes.is_empty() || cfg.nodes.len() > MAX_NODES {
            return Err(LockError::invalid(format!(
                "Redlock needs between 1 and {MAX_NODES} nodes"
            )));
        }
        validate_common(
            &cfg.prefix,
            cfg.ttl_ms,
            cfg.request_timeout_ms,
            cfg.drift_factor,
            cfg.retry_delay_ms,
            cfg.retry_jitter_ms,
        )?;
        if cfg.retry_count > 10_000 {
            return Err(LockError::invalid("retry_count must be at most 10000"));
        }
        let nodes = cfg
            .nodes
            .iter()
            .map(|n| NodeLink::new(n, cfg.request_timeout_ms))
            .collect::<Result<Vec<_>, _>>()?;
        for (i, a) in nodes.iter().enumerate() {
            if nodes[..i].iter().any(|b| b.name() == a.name()) {
                return Err(LockError::invalid(format!(
                    "node {} is listed twice",
                    a.name()
                )));
            }
        }
        let settings = Settings {
            backend: BackendKind::Redlock,
            prefix: cfg.prefix,
            ttl_ms: cfg.ttl_ms,
            request_timeout_ms: cfg.request_timeout_ms,
            auto_extend: cfg.auto_extend,
            drift_factor: cfg.drift_factor,
            retry_count: cfg.retry_count,
            retry_delay_ms: cfg.retry_delay_ms,
            retry_jitter_ms: cfg.retry_jitter_ms,
            strict_fencing: cfg.fencing == RedlockFencing::Strict,
            max_subscriptions: cfg.max_subscriptions,
            fair: false,
            cross_slot_scripts: false,
        };
        Ok(RedlockMachine {
            engine: Engine::new(settings, nodes, entropy),
        })
    }
}

// Not `Shared`: see `rwlock.rs` for why Redlock refuses read-write locks.
delegate_lock_machine!(RedlockMachine, [Exclusive, Permits, Leader]);
