//! Deterministic simulation of the Redis machines (single node and Redlock)
//! against in-memory Redis nodes (tests/sim/redis_model.rs) in the seeded
//! world of tests/sim/net.rs.
//!
//! Properties, over thousands of seeds:
//! - mutual exclusion: never two clients believing they hold a name (the
//!   world checks it after every step) while every clock's rate error stays
//!   inside the drift budget (client and node clocks within ±4000 ppm, so
//!   any two differ by less than the 1 % drift factor; node clocks may also
//!   jump *backwards*, which only lengthens keys);
//! - fencing tokens of successive grants strictly increase (the world checks
//!   it): single node without restarts; Redlock `Strict` under loss, long
//!   delays, partitions, pauses and — in `restarts` — node restarts without
//!   persistence (delayed restarts), where a failure must also violate the
//!   documented precondition to be accepted; Redlock `Folded` (opt-in; `Strict` is the default)
//!   on networks where every attempt reaches every node, with client pauses
//!   (the case fencing exists for);
//! - validity is never reported above what a quorum holds: whenever a client
//!   reports a lock valid until E (Acquired, Renewed, Extended), at least a
//!   quorum of nodes hold its key with its token and will keep it past E
//!   (by their own clocks);
//! - no ghost renewals: a client never renews a key of a name it no longer
//!   wants, beyond the network's delay;
//! - calm runs: every operation completes as the world expects, nothing is
//!   lost, no lock key remains after every client closed;
//! - push wake-up (on in every run, `max_subscriptions` sometimes 1 or 2):
//!   the nodes speak pub/sub on both protocols (tests/sim/redis_model.rs)
//!   and the world carries the subscription streams with the network's
//!   faults (delays, loss as broken streams, partitions, node restarts end
//!   them), cut at random bytes, several events per chunk, and hostile
//!   chunks spliced in; a client keeps a subscription open only while one of
//!   its acquires waits, never more than `max_subscriptions`, and none is
//!   left open anywhere at the end; on calm networks the same seeds run with
//!   and without push, and push must save attempts per grant.
//!
//! - semaphores (`semaphores`): the same faults with every acquire asking
//!   for a permit of a limit-L semaphore (L below the client count; in some
//!   runs some acquires ask for L + 1): never more than L clients believe
//!   they hold a permit of a name, all of one limit, never two the same
//!   slot, per-slot tokens strictly increase (the world checks them), and on
//!   one node every grant of a name gets a higher token than the last; the
//!   validity check holds for each permit's slot key; some seeds must see
//!   permits held concurrently, and limits refused and changed; with node
//!   clocks jumping beyond the bound, the checker must catch a slot held
//!   twice; `semaphore_restarts` adds node restarts on Redlock Strict.
//!
//! - over TCP (`tcp_*`): the same scenarios with the nodes speaking Redis'
//!   own protocol on the world's byte streams (tests/sim/stream.rs,
//!   tests/sim/redis_resp.rs): every node (`Transport::Tcp`), or TCP and
//!   HTTP nodes in one Redlock (`Transport::Mixed`); nodes with and without
//!   a password (in the URL, with the ACL user `default`, or apart);
//!   replies cut at random bytes and several in one read, connections cut
//!   mid-reply (`Failed` or `StreamEnd`), black-holed (only the core's
//!   deadlines notice), refused, broken by partitions, loss and restarts;
//!   a client's subscriber connections (one per node, at most
//!   `max_subscriptions` of them) open only while one of its acquires
//!   waits, and no connection left open after its close; push saves
//!   attempts over TCP as over HTTP, and 0 turns it off.
//!
//! `SIM_SEEDS=N` sets the seed count; `SIM_SEED=N` replays one seed (with
//! `SIM_TRACE=1`, printing its step log); `SIM_MAX_SUBSCRIPTIONS=n` overrides
//! every machine's `max_subscriptions` (0: replay a seed without push);
//! `SIM_KEEP_GOING=1` runs every seed and lists every failure.

mod sim {
    pub mod net;
    pub mod redis_model;
}

use std::collections::{HashMap, HashSet};

use edgelock::core::redis::{
    RedisCommand, RedisConfig, RedisMachine, RedisNode, RedisValue, RedlockConfig, RedlockFencing,
    RedlockMachine,
};
use edgelock::core::{HttpRequest, LockKind, LockMachine, Method, Millis, RequestId, Target};
use edgelock::internals::redis::keys::{lock_key, readers_key};
use edgelock::internals::redis::quorum::quorum;
use edgelock::internals::redis::{upstash, webdis};
use sim::net::{
    Clock, ElectionSim, ElectionStats, NetConfig, Outage, Partition, Pause, Reply, SimRng,
    SimServer, StreamStats, WorkloadConfig, World,
};
use sim::redis_model::{NodeClock, Proto, Rec, RedisModel};

const PREFIX: &str = "edgelock";
const TOKEN: &str = "sim-token";
/// Adversarial for webdis (`.`, `..`, `?`, `#`, `%`, `/`, `+`, CR/LF) and for
/// hash tags (`}`, `{`).
const NAMES: [&str; 5] = ["job", "a/../b.json", "x?y#z%2F+ \r\n", "}{t}", "ü"];
const FAULT_WINDOW_MS: Millis = 20_000;
const STOP_AT_MS: Millis = 200_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Random N ∈ {1, 3, 5}, either fencing mode, every fault but restarts.
    Main,
    /// Like `Main` but always calm (no fault at all), with push wake-up on
    /// (`max_subscriptions` at its default) or off (0): the same seed gives
    /// the same setup either way, for comparing attempts per grant.
    Calm { push: bool },
    /// Redlock Strict with node restarts (delayed restarts) and other faults.
    Restarts,
    /// Node clocks jumping forward by more than the drift budget: the
    /// checker must notice that exclusion then breaks (validity check off,
    /// so that the exclusion check is what notices).
    BeyondBound,
    /// The same, with the validity check on: it must notice first.
    BeyondBoundValidity,
    /// Like `Main`, every acquire asking for a semaphore's permit.
    Permits,
    /// `BeyondBound` with permits (validity check off).
    PermitsBeyondBound,
    /// `Restarts` with permits.
    PermitsRestarts,
    /// Like `Main` on one node, every acquire drawn as a reader
    /// (`LockKind::Shared`) or a writer (`Exclusive`) of a read-write lock.
    ReadWrite,
    /// `ReadWrite` with the node's clock jumping forward beyond the drift
    /// budget (validity check off): the exclusion check must notice.
    ReadWriteBeyondBound,
    /// Like `Main`, every acquire a campaign (elections), leaders sometimes
    /// proclaiming, observer clients watching.
    Election,
    /// `Restarts` with elections.
    ElectionRestarts,
    /// Like `Main` on one node, holders often re-entering their lock
    /// through its handle and giving the inner hold back while the outer
    /// one holds: the count never lets a second owner in.
    Reentrant,
    /// `Reentrant` on Redlock (3 or 5 nodes, either fencing): every node
    /// counts the holds it saw, a quorum decides (see
    /// `src/core/redis/tasks/reenter.rs`).
    ReentrantRedlock,
}

impl Mode {
    fn restarts(self) -> bool {
        matches!(
            self,
            Mode::Restarts | Mode::PermitsRestarts | Mode::ElectionRestarts
        )
    }

    fn reentrant(self) -> bool {
        matches!(self, Mode::Reentrant | Mode::ReentrantRedlock)
    }

    fn election(self) -> bool {
        matches!(self, Mode::Election | Mode::ElectionRestarts)
    }

    fn permits(self) -> bool {
        matches!(
            self,
            Mode::Permits | Mode::PermitsBeyondBound | Mode::PermitsRestarts
        )
    }

    fn read_write(self) -> bool {
        matches!(self, Mode::ReadWrite | Mode::ReadWriteBeyondBound)
    }

    fn beyond_bound(self) -> bool {
        matches!(
            self,
            Mode::BeyondBound
                | Mode::BeyondBoundValidity
                | Mode::PermitsBeyondBound
                | Mode::ReadWriteBeyondBound
        )
    }

    /// The validity check is off: the exclusion check must notice.
    fn no_validity_check(self) -> bool {
        matches!(
            self,
            Mode::BeyondBound | Mode::PermitsBeyondBound | Mode::ReadWriteBeyondBound
        )
    }
}

/// How the clients reach the nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Transport {
    /// Upstash REST or Webdis, drawn per node.
    Http,
    /// Redis' own protocol on byte streams (tests/sim/stream.rs), every node.
    Tcp,
    /// Both: the even nodes over TCP, the others over HTTP as drawn (one
    /// node: TCP).
    Mixed,
}

#[derive(Clone, Debug)]
#[allow(dead_code)] // read through Debug
struct Setup {
    mode: Mode,
    transport: Transport,
    /// TCP nodes requiring a password (`requirepass`).
    passwords: Vec<bool>,
    /// TCP nodes reached with TLS (`rediss://`).
    tls: Vec<bool>,
    nodes: usize,
    protos: Vec<Proto>,
    fencing: Option<RedlockFencing>,
    /// The machines' `max_subscriptions` (0: waiters poll).
    max_subscriptions: usize,
    /// No faults at all: liveness checks apply.
    calm: bool,
    /// Only client pauses (and clock drift): every attempt reaches every node.
    pauses_only: bool,
    ttl_ms: u64,
    request_timeout_ms: u64,
    clients: usize,
    names: Vec<String>,
    node_clocks: Vec<NodeClock>,
    ghost_grace: Millis,
    /// The semaphore's limit (permit modes).
    limit: Option<u32>,
    /// Some acquires ask for `limit + 1` instead.
    mixed_limits: bool,
}

#[derive(Default, Debug, Clone, Copy)]
struct Stats {
    seeds: u64,
    calm: u64,
    grants: u64,
    losts: u64,
    ops: u64,
    requests: u64,
    restarts: u64,
    validity_reports: u64,
    /// Restart runs whose token inversion was outside the stated precondition.
    outside_guarantee: u64,
    sim_ms: u64,
    /// Subscription streams the nodes opened.
    subscriptions: u64,
    /// Messages the nodes queued on subscription streams.
    push_messages: u64,
    /// Acquire attempts (acquire-script runs on the nodes / N).
    attempts: u64,
    /// Hostile chunks the network spliced into streams.
    hostile_chunks: u64,
    /// Stream chunks the network delivered.
    stream_chunks: u64,
    /// Messages published by attempts' cleanups (`released:0`).
    cleanup_messages: u64,
    /// (attempts, grants) of the runs with 1, 3 and 5 nodes.
    by_nodes: [(u64, u64); 3],
    /// Runs in which two or more clients held permits of one name at once.
    concurrent: u64,
    /// Acquires refused for asking another limit than the holders'.
    limits_refused: u64,
    /// Runs in which the other limit was granted too (the limit changed).
    limits_changed: u64,
    /// Runs in which two readers of one name held at once.
    shared_concurrent: u64,
    /// Writers granted right after a reader of their name (read-write runs).
    writers_after_readers: u64,
    /// Elections: states observers were told, of which naming a leader, of
    /// which checked against their token's grant; proclaims that succeeded.
    observed: u64,
    observed_leaders: u64,
    paired: u64,
    proclaims: u64,
    /// Re-entries granted (reentrant runs).
    reentries: u64,
    /// What the byte-stream transport did (TCP runs).
    tcp: StreamStats,
}

impl Stats {
    fn add(&mut self, o: &Stats) {
        self.seeds += o.seeds;
        self.calm += o.calm;
        self.grants += o.grants;
        self.reentries += o.reentries;
        self.losts += o.losts;
        self.ops += o.ops;
        self.requests += o.requests;
        self.restarts += o.restarts;
        self.validity_reports += o.validity_reports;
        self.outside_guarantee += o.outside_guarantee;
        self.sim_ms += o.sim_ms;
        self.subscriptions += o.subscriptions;
        self.push_messages += o.push_messages;
        self.attempts += o.attempts;
        self.hostile_chunks += o.hostile_chunks;
        self.stream_chunks += o.stream_chunks;
        self.cleanup_messages += o.cleanup_messages;
        self.concurrent += o.concurrent;
        self.limits_refused += o.limits_refused;
        self.limits_changed += o.limits_changed;
        self.shared_concurrent += o.shared_concurrent;
        self.writers_after_readers += o.writers_after_readers;
        self.observed += o.observed;
        self.observed_leaders += o.observed_leaders;
        self.paired += o.paired;
        self.proclaims += o.proclaims;
        self.tcp.opens += o.tcp.opens;
        self.tcp.refused += o.tcp.refused;
        self.tcp.commands += o.tcp.commands;
        self.tcp.cuts += o.tcp.cuts;
        self.tcp.black_holes += o.tcp.black_holes;
        self.tcp.breaks += o.tcp.breaks;
        for (a, b) in self.by_nodes.iter_mut().zip(o.by_nodes) {
            a.0 += b.0;
            a.1 += b.1;
        }
    }

    fn attempts_per_grant(&self) -> f64 {
        self.attempts as f64 / self.grants.max(1) as f64
    }
}

fn base(i: usize) -> String {
    format!("http://redis-{i}:7379")
}

/// Where the world routes node `i`: its HTTP base, or for the byte
/// streams of a `Proto::Resp` node `tcp://host:port` (`tls://` for
/// `rediss://`: a stream opened without TLS, or with another server name,
/// reaches no server).
fn server_base(proto: Proto, tls: bool, i: usize) -> String {
    match proto {
        Proto::Resp if tls => format!("tls://redis-{i}:6379"),
        Proto::Resp => format!("tcp://redis-{i}:6379"),
        Proto::Upstash | Proto::Webdis => base(i),
    }
}

/// Node `i` over TCP as users write it (`redis://`, or `rediss://` with
/// `tls`): the password in the URL (alone, or with the ACL user
/// `default`) or apart, or none.
fn resp_node(i: usize, password: bool, tls: bool, rng: &mut SimRng) -> RedisNode {
    let host = format!("redis-{i}:6379");
    let scheme = if tls { "rediss" } else { "redis" };
    let node = match (password, rng.below(3)) {
        (false, _) => RedisNode::resp(&format!("{scheme}://{host}"), None),
        (true, 0) => RedisNode::resp(&format!("{scheme}://{host}"), Some(TOKEN)),
        (true, 1) => RedisNode::resp(&format!("{scheme}://:{TOKEN}@{host}"), None),
        (true, _) => RedisNode::resp(&format!("{scheme}://default:{TOKEN}@{host}/0"), None),
    };
    node.expect("a valid redis:// node")
}

fn pick<T: Copy>(rng: &mut SimRng, xs: &[T]) -> T {
    xs[rng.below(xs.len() as u64) as usize]
}

fn build(seed: u64, mode: Mode, transport: Transport) -> (World<RedisModel>, Setup) {
    let mut rng = SimRng::new(seed ^ 0x5EED_F4ED_1500_0000_u64);
    let nodes = match mode {
        Mode::Main | Mode::Calm { .. } | Mode::Permits | Mode::Election => {
            pick(&mut rng, &[1, 3, 5])
        }
        Mode::ReentrantRedlock => pick(&mut rng, &[3, 5]),
        Mode::Restarts | Mode::PermitsRestarts | Mode::ElectionRestarts => pick(&mut rng, &[3, 5]),
        Mode::BeyondBound | Mode::BeyondBoundValidity | Mode::PermitsBeyondBound => 3,
        // Redlock refuses shared holds (re-entry on Redlock: its own mode).
        Mode::ReadWrite | Mode::ReadWriteBeyondBound | Mode::Reentrant => 1,
    };
    let fencing = match mode {
        _ if nodes == 1 => None,
        Mode::Main
        | Mode::Calm { .. }
        | Mode::Permits
        | Mode::Election
        | Mode::ReentrantRedlock => Some(pick(
            &mut rng,
            &[RedlockFencing::Folded, RedlockFencing::Strict],
        )),
        Mode::Restarts
        | Mode::PermitsRestarts
        | Mode::ElectionRestarts
        | Mode::BeyondBound
        | Mode::BeyondBoundValidity
        | Mode::PermitsBeyondBound
        | Mode::ReadWrite
        | Mode::ReadWriteBeyondBound
        | Mode::Reentrant => Some(RedlockFencing::Strict),
    };
    // Folded fencing is only promised while every attempt reaches every node.
    let folded = fencing == Some(RedlockFencing::Folded);
    let calm = match mode {
        Mode::Main
        | Mode::Permits
        | Mode::ReadWrite
        | Mode::Election
        | Mode::Reentrant
        | Mode::ReentrantRedlock => rng.chance(0.3),
        Mode::Calm { .. } => {
            rng.chance(0.3); // the same draws as `Main`
            true
        }
        _ => false,
    };
    let pauses_only = !calm && (folded || mode.beyond_bound());
    let ttl_ms = pick(&mut rng, &[1_000, 2_000, 3_000, 5_000]);
    let timeouts: Vec<u64> = [150, 300, 600, 1_000]
        .into_iter()
        .filter(|t| *t <= ttl_ms / 3)
        .collect();
    let request_timeout_ms = pick(&mut rng, &timeouts);
    let clients = rng.range(2, 5) as usize;
    let names: Vec<String> = {
        let k = rng.range(1, 3) as usize;
        let first = rng.below(NAMES.len() as u64) as usize;
        (0..k)
            .map(|i| NAMES[(first + i) % NAMES.len()].to_string())
            .collect()
    };
    let mut net = NetConfig::calm();
    net.delay = (1, rng.range(3, 30));
    if calm && transport != Transport::Http {
        // A fresh connection's first command takes three round trips (the
        // connect, the set-up, the command), all within its own deadline,
        // plus a coalescing hold: on a calm network they must fit, or the
        // first command of a 150 ms timeout times out (seeds 325 and 397 of
        // SIM_SEEDS=12000). Clamped after the draw: the seed's other draws
        // stay the same.
        let fits = (request_timeout_ms.saturating_sub(30) / 6).max(3);
        net.delay.1 = net.delay.1.min(fits);
    }
    // Not faults: stream chunks cut at random bytes into up to 6 pieces, and
    // sometimes several server writes in one chunk.
    net.split_chunk = 0.3;
    net.split_pieces = 6;
    net.stream_coalesce = 0.25;
    net.coalesce_hold_ms = 30;
    if !calm && !pauses_only {
        net.faults_until = FAULT_WINDOW_MS;
        net.long_delay_chance = pick(&mut rng, &[0.0, 0.01, 0.03]);
        net.long_delay_max = rng.range(100, 2 * request_timeout_ms);
        net.request_loss = pick(&mut rng, &[0.0, 0.01, 0.05]);
        net.response_loss = pick(&mut rng, &[0.0, 0.01, 0.05]);
        net.reset_chance = 0.3;
        net.late_after_cancel = 0.2;
        net.stream_break = pick(&mut rng, &[0.0, 0.02, 0.1]);
        net.stream_garbage = pick(&mut rng, &[0.0, 0.05, 0.2]);
    }
    let protos: Vec<Proto> = (0..nodes)
        .map(|_| {
            if rng.chance(0.5) {
                Proto::Upstash
            } else {
                Proto::Webdis
            }
        })
        .collect();
    // The transport's own draws come from their own generator: the rest of
    // the setup stays the seed's whatever the transport.
    let mut tcp_rng = SimRng::new(seed ^ 0x7C95_EED0_0000_0000_u64);
    let protos: Vec<Proto> = protos
        .into_iter()
        .enumerate()
        .map(|(i, p)| match transport {
            Transport::Tcp => Proto::Resp,
            Transport::Mixed if i % 2 == 0 => Proto::Resp,
            Transport::Http | Transport::Mixed => p,
        })
        .collect();
    let passwords: Vec<bool> = protos
        .iter()
        .map(|p| *p == Proto::Resp && tcp_rng.chance(0.5))
        .collect();
    let tls: Vec<bool> = protos
        .iter()
        .map(|p| *p == Proto::Resp && tcp_rng.chance(0.3))
        .collect();
    if !calm && !pauses_only && transport != Transport::Http {
        net.stream_cut = pick(&mut tcp_rng, &[0.0, 0.01, 0.05]);
        net.stream_blackhole = pick(&mut tcp_rng, &[0.0, 0.003, 0.01]);
        net.open_refused = pick(&mut tcp_rng, &[0.0, 0.05, 0.2]);
    }
    let mut node_clocks = Vec::new();
    for _ in 0..nodes {
        let mut c = NodeClock {
            offset: rng.below(1 << 40),
            ppm: rng.range(0, 8_000) as i64 - 4_000,
            jumps: Vec::new(),
        };
        if !calm {
            for _ in 0..rng.below(3) {
                let at = rng.below(FAULT_WINDOW_MS);
                let delta = if mode.beyond_bound() {
                    rng.range(ttl_ms / 2, ttl_ms) as i64
                } else {
                    -(rng.range(1, 2_000) as i64)
                };
                c.jumps.push((at, delta));
            }
        }
        node_clocks.push(c);
    }
    let ghost_grace = request_timeout_ms + net.long_delay_max.max(net.delay.1) * 2 + 100;
    // Mostly the default; sometimes so few that some waiters (or nodes) are
    // left to their timers.
    let max_subscriptions = match mode {
        Mode::Calm { push: false } => 0,
        Mode::Calm { push: true } => edgelock::core::redis::DEFAULT_MAX_SUBSCRIPTIONS,
        _ => {
            let d = edgelock::core::redis::DEFAULT_MAX_SUBSCRIPTIONS;
            pick(&mut rng, &[d, d, d, 1, 2])
        }
    };
    // SIM_MAX_SUBSCRIPTIONS=n overrides it (after the same draws: the rest of
    // the setup stays the seed's), e.g. 0 to replay a seed without push.
    let max_subscriptions = std::env::var("SIM_MAX_SUBSCRIPTIONS")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(max_subscriptions);
    let setup = Setup {
        mode,
        transport,
        passwords: passwords.clone(),
        tls: tls.clone(),
        nodes,
        protos: protos.clone(),
        fencing,
        max_subscriptions,
        calm,
        pauses_only,
        ttl_ms,
        request_timeout_ms,
        clients,
        names: names.clone(),
        node_clocks: node_clocks.clone(),
        ghost_grace,
        limit: None,
        mixed_limits: false,
    };

    let mut w: World<RedisModel> = World::new(seed, net);
    w.max_steps = 2_000_000;
    for i in 0..nodes {
        let token = (protos[i] == Proto::Upstash || passwords[i]).then(|| TOKEN.to_string());
        w.add_server(
            &[&server_base(protos[i], tls[i], i)],
            RedisModel::new(protos[i], token, node_clocks[i].clone()),
        );
    }
    let node_cfgs: Vec<RedisNode> = (0..nodes)
        .map(|i| match protos[i] {
            Proto::Upstash => RedisNode::upstash(base(i), TOKEN),
            Proto::Webdis => RedisNode::webdis(base(i)),
            Proto::Resp => resp_node(i, passwords[i], tls[i], &mut tcp_rng),
        })
        .collect();
    let retry_delay_ms = rng.range(50, 200);
    let retry_jitter_ms = rng.range(0, 100);
    for _ in 0..clients {
        let machine: Box<dyn LockMachine> = match fencing {
            None => {
                let mut cfg = RedisConfig::new(node_cfgs[0].clone());
                cfg.ttl_ms = ttl_ms;
                cfg.request_timeout_ms = request_timeout_ms;
                cfg.retry_delay_ms = retry_delay_ms;
                cfg.retry_jitter_ms = retry_jitter_ms;
                cfg.max_subscriptions = max_subscriptions;
                Box::new(RedisMachine::new(cfg, Box::new(rng.fork())).expect("valid config"))
            }
            Some(f) => {
                let mut cfg = RedlockConfig::new(node_cfgs.clone());
                cfg.ttl_ms = ttl_ms;
                cfg.request_timeout_ms = request_timeout_ms;
                cfg.retry_delay_ms = retry_delay_ms;
                cfg.retry_jitter_ms = retry_jitter_ms;
                cfg.retry_count = rng.range(2, 10) as u32;
                cfg.fencing = f;
                cfg.max_subscriptions = max_subscriptions;
                Box::new(RedlockMachine::new(cfg, Box::new(rng.fork())).expect("valid config"))
            }
        };
        let clock = Clock {
            offset: rng.below(1 << 40),
            ppm: rng.range(0, 8_000) as i64 - 4_000,
        };
        w.add_client(machine, clock);
    }
    if !calm {
        for c in 0..clients {
            if !pauses_only {
                for _ in 0..rng.below(3) {
                    let from = rng.below(FAULT_WINDOW_MS);
                    let until = (from + rng.range(100, 3 * ttl_ms)).min(FAULT_WINDOW_MS);
                    if rng.chance(0.5) {
                        for e in 0..nodes {
                            w.add_partition(Partition {
                                client: c,
                                endpoint: e,
                                from,
                                until,
                            });
                        }
                    } else {
                        w.add_partition(Partition {
                            client: c,
                            endpoint: rng.below(nodes as u64) as usize,
                            from,
                            until,
                        });
                    }
                }
            }
            for _ in 0..rng.below(3) {
                let from = rng.below(FAULT_WINDOW_MS);
                let until = (from + rng.range(50, 2 * ttl_ms)).min(FAULT_WINDOW_MS);
                w.add_pause(Pause {
                    client: c,
                    from,
                    until,
                });
            }
        }
    }
    if mode.restarts() {
        // One node down at a time, each for longer than any key can live
        // (Redlock's delayed restart), then back without its data.
        let mut t = rng.range(0, 3_000);
        while t < FAULT_WINDOW_MS {
            let e = rng.below(nodes as u64) as usize;
            let down = ttl_ms + ttl_ms / 20 + 100 + rng.below(ttl_ms);
            w.add_outage(Outage {
                endpoint: e,
                from: t,
                until: t + down,
            });
            t += down + rng.range(0, 2 * ttl_ms);
        }
    }
    w.start_workload(WorkloadConfig {
        names,
        cycles: rng.range(3, 6) as u32,
        weights: (2, 3, 3),
        wait_for: (50, 2 * ttl_ms),
        cancel_chance: 0.15,
        cancel_after: (5, 1_000),
        hold: (0, 300),
        long_hold_chance: 0.15,
        extend_chance: 0.2,
        reenter_chance: if mode.reentrant() { 0.6 } else { 0.0 },
        long_hold: (ttl_ms, 3 * ttl_ms),
        think: (0, 200),
        ttl_ms: if rng.chance(0.5) { Some(ttl_ms) } else { None },
        release_retries: 3,
        stop_at: STOP_AT_MS,
    });
    let mut setup = setup;
    if mode.permits() {
        // Drawn last: the other modes' seeds keep their setups. Below the
        // client count, so that permits run out.
        let limit = rng.range(1, clients as u64 - 1) as u32;
        let mut kinds = vec![LockKind::Permits { limit }];
        // Sometimes a client asks for another limit: refused while permits
        // of the stored one are held, the limit changing once none is.
        if rng.chance(0.3) {
            kinds.push(LockKind::Permits { limit: limit + 1 });
        }
        setup.mixed_limits = kinds.len() > 1;
        w.set_acquire_kinds(kinds);
        setup.limit = Some(limit);
    }
    if mode.read_write() {
        w.set_acquire_kinds(vec![
            LockKind::Exclusive,
            LockKind::Shared,
            LockKind::Shared,
        ]);
    }
    if mode.election() {
        // Drawn last: the other modes' seeds keep their setups. One or two
        // observers, each of one name, closed well after every key of the
        // campaigners is gone (released, or expired at its TTL).
        w.set_redis_election(ElectionSim {
            proclaim_chance: 0.5,
            observe_wait: (100, 3 * ttl_ms),
            observer_grace: 4 * ttl_ms + 2 * 2_000 + 5_000,
            observer_close_not_before: FAULT_WINDOW_MS,
            ..ElectionSim::default()
        });
        for k in 0..rng.range(1, 3) as usize {
            let machine: Box<dyn LockMachine> = match fencing {
                None => {
                    let mut cfg = RedisConfig::new(node_cfgs[0].clone());
                    cfg.ttl_ms = ttl_ms;
                    cfg.request_timeout_ms = request_timeout_ms;
                    cfg.retry_delay_ms = retry_delay_ms;
                    cfg.retry_jitter_ms = retry_jitter_ms;
                    cfg.max_subscriptions = setup.max_subscriptions;
                    Box::new(RedisMachine::new(cfg, Box::new(rng.fork())).expect("valid config"))
                }
                Some(f) => {
                    let mut cfg = RedlockConfig::new(node_cfgs.clone());
                    cfg.ttl_ms = ttl_ms;
                    cfg.request_timeout_ms = request_timeout_ms;
                    cfg.retry_delay_ms = retry_delay_ms;
                    cfg.retry_jitter_ms = retry_jitter_ms;
                    cfg.retry_count = rng.range(2, 10) as u32;
                    cfg.fencing = f;
                    cfg.max_subscriptions = setup.max_subscriptions;
                    Box::new(RedlockMachine::new(cfg, Box::new(rng.fork())).expect("valid config"))
                }
            };
            let clock = Clock {
                offset: rng.below(1 << 40),
                ppm: rng.range(0, 8_000) as i64 - 4_000,
            };
            let name = setup.names[k % setup.names.len()].clone();
            w.add_observer(machine, clock, &name);
        }
    }
    (w, setup)
}

/// Per-step checks specific to Redis.
struct RedisChecks {
    setup: Setup,
    /// (client, lock, expires_at) already checked.
    reported: HashSet<(usize, u64, Millis)>,
    validity_reports: u64,
    /// (client, lock) → owner token, for the fencing analysis.
    owners: HashMap<(usize, u64), String>,
    /// (client, name) → when it stopped wanting the name (None: wants it).
    uninterested_since: HashMap<(usize, String), Option<Millis>>,
    log_seen: Vec<usize>,
    keys: Vec<(String, Vec<u8>)>,
    /// Two or more clients held permits of one name at once.
    concurrent: bool,
    /// Limits held at some point (several: the limit changed).
    limits_held: Vec<LockKind>,
    /// Two or more readers of one name held at once.
    shared_concurrent: bool,
}

impl RedisChecks {
    fn new(setup: &Setup) -> Self {
        let keys = setup
            .names
            .iter()
            .map(|n| (n.clone(), lock_key(PREFIX, n).into_bytes()))
            .collect();
        RedisChecks {
            setup: setup.clone(),
            reported: HashSet::new(),
            validity_reports: 0,
            owners: HashMap::new(),
            uninterested_since: HashMap::new(),
            log_seen: vec![0; setup.nodes],
            keys,
            concurrent: false,
            limits_held: Vec::new(),
            shared_concurrent: false,
        }
    }

    /// The name whose lock key, readers' set, or one of whose permit slot keys, `key` is.
    fn name_of(&self, key: &[u8]) -> Option<&str> {
        let slot_of = |k: &[u8]| {
            key.strip_prefix(k)
                .and_then(|rest| rest.strip_prefix(b":permit:"))
                .is_some_and(|d| !d.is_empty() && d.iter().all(u8::is_ascii_digit))
        };
        let readers_of = |k: &[u8]| key.strip_prefix(k) == Some(b":readers".as_slice());
        self.keys
            .iter()
            .find(|(_, k)| k == key || slot_of(k) || readers_of(k))
            .map(|(n, _)| n.as_str())
    }

    fn check(&mut self, w: &World<RedisModel>) -> Result<(), String> {
        let q = quorum(self.setup.nodes);
        let believers = w.believers();
        for (i, a) in believers.iter().enumerate() {
            self.concurrent |= believers[i + 1..]
                .iter()
                .any(|b| b.name == a.name && b.client != a.client);
            self.shared_concurrent |= a.kind == LockKind::Shared
                && believers[i + 1..].iter().any(|b| {
                    b.name == a.name && b.client != a.client && b.kind == LockKind::Shared
                });
            if !self.limits_held.contains(&a.kind) {
                self.limits_held.push(a.kind);
            }
        }
        // Validity at every report: a quorum holds the key past E.
        for b in believers {
            self.owners.insert((b.client, b.lock.0), b.owner.clone());
            if self.setup.mode.no_validity_check()
                || !self.reported.insert((b.client, b.lock.0, b.expires_at))
            {
                continue;
            }
            self.validity_reports += 1;
            let e_global = w.client_clock(b.client).to_global(b.expires_at);
            let holding = (0..self.setup.nodes)
                .filter(|&i| {
                    let m = w.server(i);
                    if b.kind == LockKind::Shared {
                        // A reader: its token's lease in the readers' set.
                        return m
                            .reader_expires_global(b.key.as_bytes(), b.owner.as_bytes(), w.now)
                            .is_some_and(|x| x >= e_global);
                    }
                    m.get(b.key.as_bytes(), w.now).as_deref() == Some(b.owner.as_bytes())
                        && m.expires_global(b.key.as_bytes(), w.now)
                            .is_some_and(|x| x >= e_global)
                })
                .count();
            if holding < q {
                return Err(format!(
                    "client {} reports {:?} (token {}) valid until {} local = {} global, but only {} of {} nodes hold its key that long",
                    b.client, b.name, b.token, b.expires_at, e_global, holding, self.setup.nodes
                ));
            }
        }
        // Interest transitions.
        for c in 0..w.client_count() {
            for n in &self.setup.names {
                let wants = w.interested(c, n);
                let e = self
                    .uninterested_since
                    .entry((c, n.clone()))
                    .or_insert(None);
                match (wants, *e) {
                    (true, _) => *e = None,
                    (false, None) => *e = Some(w.now),
                    _ => {}
                }
            }
        }
        // Ghost renewals: successful extends by a client that gave the name up.
        for i in 0..self.setup.nodes {
            let log = &w.server(i).log;
            for r in &log[self.log_seen[i]..] {
                if let Rec::Raised {
                    key,
                    client: Some(c),
                    t,
                    ours: true,
                    renew: true,
                    ..
                } = r
                {
                    let Some(name) = self.name_of(key) else {
                        continue;
                    };
                    if let Some(Some(since)) = self.uninterested_since.get(&(*c, name.to_string()))
                    {
                        if *t > since + self.setup.ghost_grace {
                            return Err(format!(
                                "client {c} renewed its key of {name:?} on node {i} at t={t}, having given the name up at t={since}"
                            ));
                        }
                    }
                }
            }
            self.log_seen[i] = log.len();
        }
        // Subscriptions live exactly as long as a waiting acquire: the task
        // that owns them closes them when it stops listening (granted,
        // refused, timed out, cancelled, the machine closed).
        // Over TCP: one subscriber connection per node, shared by every
        // waiter of the client, closed when none is left, on at most
        // `max_subscriptions` nodes.
        let tcp_nodes = self
            .setup
            .protos
            .iter()
            .filter(|p| **p == Proto::Resp)
            .count();
        for c in 0..w.client_count() {
            let (flights, subscribers) = (w.stream_flights(c), w.subscriber_flights(c));
            if flights + subscribers > 0 && !w.waiting_acquire(c) {
                return Err(format!("client {c} keeps {flights} subscription stream(s) and {subscribers} subscriber connection(s) open with no acquire waiting (t={})", w.now));
            }
            if flights > self.setup.max_subscriptions {
                return Err(format!(
                    "client {c} has {flights} subscription streams open, over max_subscriptions = {}",
                    self.setup.max_subscriptions
                ));
            }
            if subscribers > tcp_nodes.min(self.setup.max_subscriptions) {
                return Err(format!(
                    "client {c} has {subscribers} subscriber connections open to {tcp_nodes} TCP node(s), max_subscriptions = {}",
                    self.setup.max_subscriptions
                ));
            }
        }
        if self.setup.calm && w.all_closed_at == Some(w.now) {
            for i in 0..self.setup.nodes {
                for (k, _) in w.server(i).keys(w.now) {
                    if self.name_of(&k).is_some() {
                        return Err(format!(
                            "calm run: lock key {:?} remains on node {i} after every client closed",
                            String::from_utf8_lossy(&k)
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

/// For a fencing inversion in a restart run: was the documented
/// precondition met? (Some node of H2's granting quorum confirmed a raise of
/// H1 — key still H1's — and did not restart between that and H2's grant.)
/// H2's granting quorum is the grants H2 counted, as in the proof in
/// `src/core/redis/redlock.rs` (T2 is the maximum over the answers H2
/// got): a node that ran H2's attempt but whose answer was lost is not in it.
fn strict_precondition_held(
    w: &World<RedisModel>,
    checks: &RedisChecks,
) -> Result<(bool, String), String> {
    let last = w.grants.last().ok_or("no grants")?;
    // Successive holders of one key: a lock's, or a permit's slot.
    let prev = w
        .grants
        .iter()
        .rev()
        .skip(1)
        .find(|g| g.key == last.key)
        .ok_or("no previous grant")?;
    let owner1 = checks
        .owners
        .get(&(prev.client, prev.lock.0))
        .ok_or("owner of the first holder unknown")?
        .clone();
    let key = last.key.clone().into_bytes();
    // H2's owner: its raise round carried its token as the floor.
    let mut owner2 = None;
    for i in 0..w.endpoint_count() {
        for r in &w.server(i).log {
            if let Rec::Raised {
                key: k,
                owner,
                client: Some(c),
                floor,
                ours: true,
                ..
            } = r
            {
                if *k == key && *c == last.client && *floor == last.token {
                    owner2 = Some(owner.clone());
                }
            }
        }
    }
    // Without a raise round (skipped: every counter was at the token) the
    // owner is known from the grant itself.
    let owner2 = owner2
        .or_else(|| {
            (0..w.endpoint_count()).find_map(|i| {
                w.server(i).log.iter().rev().find_map(|r| match r {
                    Rec::Granted {
                        key: k,
                        owner,
                        client: Some(c),
                        fence,
                        ..
                    } if *k == key && *c == last.client && *fence == last.token => {
                        Some(owner.clone())
                    }
                    _ => None,
                })
            })
        })
        .ok_or("owner of the second holder unknown")?;
    let mut why = String::new();
    for i in 0..w.endpoint_count() {
        let m = w.server(i);
        // Only a grant whose answer H2 counted is in its granting quorum.
        // H2's token is the largest counter any node answered it with, so a
        // grant made with a larger counter is one whose answer never reached
        // H2 (the stream broke after the node ran the script): that node
        // applied H2's attempt but H2 did not count it (seed 1803 of
        // tcp_restarts: the one node above H1's token granted at 3, its
        // answer lost, and H2 took the lock from two restarted nodes at 1).
        let granted_at = m.log.iter().find_map(|r| match r {
            Rec::Granted {
                key: k,
                owner,
                t,
                fence,
                ..
            } if *k == key && *owner == owner2 && *fence <= last.token => Some(*t),
            _ => None,
        });
        let uncounted = m.log.iter().find_map(|r| match r {
            Rec::Granted {
                key: k,
                owner,
                t,
                fence,
                ..
            } if *k == key && *owner == owner2 && *fence > last.token => Some((*t, *fence)),
            _ => None,
        });
        // H1's key in place with the node's counter at ≥ its token: a raise
        // it confirmed, or (raise skipped) its own grant there.
        let raised_at = m.log.iter().find_map(|r| match r {
            Rec::Raised {
                key: k,
                owner,
                t,
                ours: true,
                floor,
                ..
            } if *k == key
                && owner.as_slice() == owner1.as_bytes()
                && *floor >= prev.token
                && granted_at.is_some_and(|tg| *t <= tg) =>
            {
                Some(*t)
            }
            Rec::Granted {
                key: k,
                owner,
                t,
                fence,
                ..
            } if *k == key
                && owner.as_slice() == owner1.as_bytes()
                && *fence >= prev.token
                && granted_at.is_some_and(|tg| *t <= tg) =>
            {
                Some(*t)
            }
            _ => None,
        });
        why.push_str(&format!(
            " node {i}: H2 granted {granted_at:?}, H1 raise confirmed {raised_at:?}, restarts {:?}",
            m.restarts
        ));
        if let Some((t, fence)) = uncounted {
            why.push_str(&format!(
                " (granted H2 at {t} with counter {fence} > its token: answer lost, not counted)"
            ));
        }
        why.push(';');
        let (Some(tg), Some(tr)) = (granted_at, raised_at) else {
            continue;
        };
        if !m.restarts.iter().any(|&x| tr < x && x <= tg) {
            return Ok((true, why));
        }
    }
    Ok((false, why))
}

type Failure = (String, Box<World<RedisModel>>, Setup);

#[allow(clippy::result_large_err)] // the failure carries the world for the report
fn run_seed(seed: u64, mode: Mode, transport: Transport, trace: bool) -> Result<Stats, Failure> {
    let (mut w, setup) = build(seed, mode, transport);
    if trace {
        w.enable_trace();
    }
    let mut checks = RedisChecks::new(&setup);
    let until = STOP_AT_MS + 30 * setup.ttl_ms + 120_000;
    let mut result = w.run(until, &mut |w| checks.check(w));
    let mut outside = 0;
    if let Err(msg) = &result {
        if mode.restarts() && msg.contains("fencing token") {
            match strict_precondition_held(&w, &checks) {
                Ok((false, why)) => {
                    eprintln!("seed {seed}: token inversion outside the stated precondition (accepted): {msg};{why}");
                    outside = 1;
                    result = Ok(());
                }
                Ok((true, why)) => result = Err(format!("{msg} (the precondition held:{why})")),
                Err(e) => result = Err(format!("{msg} (and the fencing analysis failed: {e})")),
            }
        }
    }
    if result.is_ok() && outside == 0 {
        result = final_checks(&w, &setup);
    }
    // Elections: every observed state pairs a token with its own
    // leadership's value, one node's observers never go back, and every
    // observer ends with the final state (nobody: every campaigner closed).
    let mut election = ElectionStats::default();
    if result.is_ok() && mode.election() {
        match w.election_checks(setup.nodes == 1, None) {
            Ok(s) => election = s,
            // A Redlock token inversion outside the precondition (accepted
            // above) may pair an observed token with another grant.
            Err(e) if outside > 0 => eprintln!("seed {seed}: {e} (after an accepted inversion)"),
            Err(e) => result = Err(e),
        }
    }
    match result {
        Err(e) => Err((e, Box::new(w), setup)),
        Ok(()) => Ok(Stats {
            seeds: 1,
            calm: setup.calm as u64,
            grants: w.grants.len() as u64,
            reentries: w
                .history
                .iter()
                .filter(|r| {
                    matches!(r.what, sim::net::What::Reenter { .. })
                        && matches!(r.outcome, sim::net::Outcome::Acquired { .. })
                })
                .count() as u64,
            losts: w.losts.len() as u64,
            ops: w.history.len() as u64,
            requests: (0..setup.nodes).map(|i| w.server(i).requests).sum(),
            restarts: (0..setup.nodes)
                .map(|i| w.server(i).restarts.len() as u64)
                .sum(),
            validity_reports: checks.validity_reports,
            outside_guarantee: outside,
            sim_ms: w.now,
            subscriptions: (0..setup.nodes).map(|i| w.server(i).subscriptions).sum(),
            push_messages: (0..setup.nodes).map(|i| w.server(i).deliveries).sum(),
            attempts: (0..setup.nodes)
                .map(|i| w.server(i).acquire_evals)
                .sum::<u64>()
                / setup.nodes as u64,
            hostile_chunks: w.hostile_chunks,
            stream_chunks: w.stream_chunks,
            cleanup_messages: (0..setup.nodes)
                .map(|i| w.server(i).cleanup_deliveries)
                .sum(),
            concurrent: checks.concurrent as u64,
            shared_concurrent: checks.shared_concurrent as u64,
            writers_after_readers: writers_after_readers(&w, &setup),
            observed: election.observed,
            observed_leaders: election.observed_leaders,
            paired: election.paired,
            proclaims: election.proclaims,
            limits_refused: w
                .history
                .iter()
                .filter(|r| {
                    matches!(
                        r.outcome,
                        sim::net::Outcome::Failed {
                            code: "INVALID_ARGUMENT",
                            ..
                        }
                    )
                })
                .count() as u64,
            limits_changed: (checks.limits_held.len() > 1) as u64,
            tcp: w.stream_stats,
            by_nodes: {
                let attempts = (0..setup.nodes)
                    .map(|i| w.server(i).acquire_evals)
                    .sum::<u64>()
                    / setup.nodes as u64;
                let mut b = [(0, 0); 3];
                b[setup.nodes / 2] = (attempts, w.grants.len() as u64);
                b
            },
        }),
    }
}

fn final_checks(w: &World<RedisModel>, setup: &Setup) -> Result<(), String> {
    if !w.all_done() {
        return Err("not every client finished its close".into());
    }
    // One node counts every grant of a name, whatever its slot: in the
    // node's order (clients may hear of their grants in another), and no
    // two permits handed out share a token.
    if let (Some(_), 1) = (setup.limit, setup.nodes) {
        for name in &setup.names {
            let mut tokens: Vec<u64> = w
                .grants
                .iter()
                .filter(|g| g.name == *name)
                .map(|g| g.token)
                .collect();
            let slot_prefix = format!("{}:permit:", lock_key(PREFIX, name)).into_bytes();
            let on_node: Vec<u64> = w
                .server(0)
                .log
                .iter()
                .filter_map(|r| match r {
                    Rec::Granted { key, fence, .. } if key.starts_with(&slot_prefix) => {
                        Some(*fence)
                    }
                    _ => None,
                })
                .collect();
            if let Some(p) = on_node.windows(2).position(|t| t[1] <= t[0]) {
                return Err(format!(
                    "one node: {name:?}'s permits were granted token {} after {}",
                    on_node[p + 1],
                    on_node[p]
                ));
            }
            let n = tokens.len();
            tokens.sort_unstable();
            tokens.dedup();
            if tokens.len() != n {
                return Err(format!(
                    "one node: two permits of {name:?} were handed out with the same token"
                ));
            }
        }
    }
    if setup.mode.read_write() {
        read_write_checks(w, setup)?;
    }
    for c in 0..w.client_count() {
        if w.machine(c).live_count() != 0 {
            return Err(format!(
                "client {c} reports {} live operations/locks after close",
                w.machine(c).live_count()
            ));
        }
    }
    for i in 0..setup.nodes {
        let m = w.server(i);
        for (k, _) in m.keys(w.now) {
            // The counters and semaphores' limit records never expire.
            if !k.ends_with(b":fence") && !k.ends_with(b":limit") {
                return Err(format!(
                    "node {i} still has key {:?} after the world went quiet",
                    String::from_utf8_lossy(&k)
                ));
            }
        }
    }
    // No subscription outlives the run: every stream a client opened was
    // closed by it (or ended by the network), on both sides of the wire.
    for c in 0..w.client_count() {
        if w.stream_flights(c) != 0 {
            return Err(format!(
                "client {c} still has {} subscription stream(s) in flight at the end",
                w.stream_flights(c)
            ));
        }
        // Closed clients leave no connection open.
        if w.tcp_flights(c) != 0 {
            return Err(format!(
                "client {c} still has {} byte stream(s) open after its close",
                w.tcp_flights(c)
            ));
        }
    }
    if w.open_stream_count() != 0 {
        return Err(format!(
            "the network still carries {} stream(s) at the end",
            w.open_stream_count()
        ));
    }
    for i in 0..setup.nodes {
        let open = w.server(i).open_subscriptions();
        if open != 0 {
            return Err(format!(
                "node {i} still has {open} subscription(s) open at the end"
            ));
        }
    }
    if setup.max_subscriptions == 0 && (0..setup.nodes).any(|i| w.server(i).subscriptions > 0) {
        return Err("a subscription was opened with max_subscriptions = 0".into());
    }
    if setup.calm {
        w.check_calm_run()?;
    }
    Ok(())
}

/// A read-write lock on one node: in the node's order, every writer's grant
/// has a token above every earlier grant of its name (reader or writer);
/// as the clients heard them, every writer's token is above every grant
/// heard before it; no acquire was refused (both kinds are granted).
fn read_write_checks(w: &World<RedisModel>, setup: &Setup) -> Result<(), String> {
    for name in &setup.names {
        let key = lock_key(PREFIX, name).into_bytes();
        let readers = readers_key(&lock_key(PREFIX, name)).into_bytes();
        let mut highest = 0;
        for r in &w.server(0).log {
            let Rec::Granted { key: k, fence, .. } = r else {
                continue;
            };
            if *k == key && *fence <= highest {
                return Err(format!("one node: a writer of {name:?} was granted token {fence} after a grant of {highest}"));
            }
            if *k == key || *k == readers {
                highest = highest.max(*fence);
            }
        }
        let mut heard = 0;
        for g in w.grants.iter().filter(|g| g.name == *name) {
            if g.kind != LockKind::Shared && g.token <= heard {
                return Err(format!("a writer of {name:?} got token {} at t={} after a grant of {heard} was handed out", g.token, g.at));
            }
            heard = heard.max(g.token);
        }
    }
    if let Some(r) = w.history.iter().find(|r| {
        matches!(
            r.outcome,
            sim::net::Outcome::Failed {
                code: "INVALID_ARGUMENT",
                ..
            }
        )
    }) {
        return Err(format!(
            "client {}: an acquire was refused with INVALID_ARGUMENT on one node",
            r.client
        ));
    }
    Ok(())
}

/// Writers granted right after a reader of their name (the writer waited
/// for readers, or came after them).
fn writers_after_readers(w: &World<RedisModel>, setup: &Setup) -> u64 {
    setup
        .names
        .iter()
        .map(|n| {
            w.grants
                .iter()
                .filter(|g| g.name == *n)
                .collect::<Vec<_>>()
                .windows(2)
                .filter(|p| p[0].kind == LockKind::Shared && p[1].kind != LockKind::Shared)
                .count() as u64
        })
        .sum()
}

fn report_failure(
    seed: u64,
    (mode, transport): (Mode, Transport),
    test: &str,
    first_message: &str,
) -> String {
    let mut out = format!("\nseed {seed} failed: {first_message}\nreplay: SIM_SEED={seed} cargo test --test sim_redis {test}\n");
    match run_seed(seed, mode, transport, true) {
        Ok(_) => out.push_str("(the replay did NOT fail: the simulation is not deterministic!)\n"),
        Err((msg, w, setup)) => {
            if msg != first_message {
                out.push_str(&format!("(replay failed differently: {msg})\n"));
            }
            out.push_str(&format!("setup: {setup:?}\n"));
            out.push_str(&w.failure_report(&setup.names, setup.ttl_ms, &msg));
        }
    }
    out
}

/// Runs seeds `0..n` (or `SIM_SEED`) on up to 4 threads; panics with the
/// lowest failing seed, its replay command and its history. `SIM_SEEDS`
/// sets `n` (divided by `divisor`).
fn sweep(test: &str, default_seeds: u64, divisor: u64, mode: Mode) -> Stats {
    sweep_over(test, default_seeds, divisor, mode, Transport::Http)
}

/// [`sweep`] with the clients reaching the nodes over `transport`.
fn sweep_over(
    test: &str,
    default_seeds: u64,
    divisor: u64,
    mode: Mode,
    transport: Transport,
) -> Stats {
    if let Ok(one) = std::env::var("SIM_SEED") {
        let seed: u64 = one.trim().parse().expect("SIM_SEED must be a number");
        match run_seed(seed, mode, transport, true) {
            Ok(stats) => {
                eprintln!("seed {seed} passed: {stats:?}");
                if std::env::var("SIM_TRACE").is_ok() {
                    let (mut w, setup) = build(seed, mode, transport);
                    w.enable_trace();
                    let mut checks = RedisChecks::new(&setup);
                    let _ = w.run(STOP_AT_MS + 30 * setup.ttl_ms + 120_000, &mut |w| {
                        checks.check(w)
                    });
                    eprintln!("setup: {setup:?}");
                    for line in w.trace.iter().flatten() {
                        eprintln!("{line}");
                    }
                }
                return stats;
            }
            Err((msg, _, _)) => panic!("{}", report_failure(seed, (mode, transport), test, &msg)),
        }
    }
    let seeds: u64 = std::env::var("SIM_SEEDS")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .map_or(default_seeds, |n| (n / divisor.max(1)).max(1));
    let started = std::time::Instant::now();
    let workers = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .clamp(1, 4) as u64;
    // SIM_KEEP_GOING=1: run every seed and list every failure (triage).
    let keep_going = std::env::var("SIM_KEEP_GOING").is_ok();
    let results: Vec<(Stats, Vec<(u64, String)>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|k| {
                scope.spawn(move || {
                    let mut stats = Stats::default();
                    let mut failures = Vec::new();
                    let mut seed = k;
                    while seed < seeds {
                        match run_seed(seed, mode, transport, false) {
                            Ok(s) => stats.add(&s),
                            Err((msg, _, _)) => {
                                failures.push((seed, msg));
                                if !keep_going {
                                    break;
                                }
                            }
                        }
                        seed += workers;
                    }
                    (stats, failures)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("simulation worker panicked"))
            .collect()
    });
    let mut total = Stats::default();
    for (s, _) in &results {
        total.add(s);
    }
    if keep_going {
        let mut all: Vec<&(u64, String)> = results.iter().flat_map(|(_, f)| f).collect();
        all.sort_by_key(|(s, _)| *s);
        eprintln!("{test}: {} failing seeds", all.len());
        for (seed, msg) in all {
            eprintln!("  seed {seed}: {msg}");
        }
    }
    eprintln!(
        "{test}: {} seeds ({} calm) in {:.1} s: {} ops, {} grants, {} lost, {} HTTP requests, {} node restarts, {} validity reports checked, {} inversions outside the stated precondition, {} simulated minutes; push: {} subscriptions, {} messages, {} stream chunks ({} hostile), {:.2} attempts per grant",
        total.seeds,
        total.calm,
        started.elapsed().as_secs_f64(),
        total.ops,
        total.grants,
        total.losts,
        total.requests,
        total.restarts,
        total.validity_reports,
        total.outside_guarantee,
        total.sim_ms / 60_000,
        total.subscriptions,
        total.push_messages,
        total.stream_chunks,
        total.hostile_chunks,
        total.attempts_per_grant()
    );
    if total.tcp.opens > 0 {
        let t = total.tcp;
        eprintln!(
            "{test}: byte streams: {} opened ({} refused), {} commands, {} cut mid-reply, {} black-holed, {} broken",
            t.opens, t.refused, t.commands, t.cuts, t.black_holes, t.breaks
        );
    }
    if let Some((seed, msg)) = results
        .iter()
        .flat_map(|(_, f)| f.iter().cloned())
        .min_by_key(|(s, _)| *s)
    {
        panic!("{}", report_failure(seed, (mode, transport), test, &msg));
    }
    total
}

#[test]
fn simulation() {
    let s = sweep("simulation", 2000, 1, Mode::Main);
    assert!(
        s.grants > s.seeds,
        "the workload should acquire locks: {s:?}"
    );
    // Enough seeds for every kind of run (a handful may have no waiter).
    if s.seeds >= 200 {
        assert!(
            s.subscriptions > 0 && s.push_messages > 0,
            "waiters should subscribe and hear releases: {s:?}"
        );
        assert!(
            s.hostile_chunks > 0,
            "the network should splice hostile chunks into streams: {s:?}"
        );
    }
}

/// The main simulation with every node reached over TCP (Redis' own
/// protocol on the world's byte streams, tests/sim/stream.rs): replies
/// split and coalesced, connections cut mid-reply, black-holed, refused,
/// broken by partitions and loss; nodes with and without a password. The
/// same checks as `simulation`.
#[test]
fn tcp_simulation() {
    let s = sweep_over("tcp_simulation", 500, 4, Mode::Main, Transport::Tcp);
    assert!(s.grants > s.seeds, "{s:?}");
    assert!(s.tcp.opens > 0 && s.tcp.commands > s.seeds, "{s:?}");
    if s.seeds >= 200 {
        assert!(
            s.subscriptions > 0 && s.push_messages > 0,
            "waiters should subscribe and hear releases over TCP: {s:?}"
        );
        assert!(
            s.tcp.cuts > 0 && s.tcp.black_holes > 0 && s.tcp.refused > 0,
            "the network should cut, black-hole and refuse connections: {s:?}"
        );
    }
}

/// Redlock over TCP and HTTP nodes at once (`Transport::Mixed`: the even
/// nodes over TCP, the others Upstash or Webdis; a one-node run is TCP):
/// the main scenario's faults on both transports, the same checks.
#[test]
fn tcp_mixed_simulation() {
    let s = sweep_over("tcp_mixed_simulation", 300, 6, Mode::Main, Transport::Mixed);
    assert!(s.grants > s.seeds, "{s:?}");
    assert!(s.tcp.opens > 0 && s.tcp.commands > s.seeds, "{s:?}");
}

/// `restarts` over TCP: Redlock Strict with node restarts (connections
/// reset, refused while down, subscriptions gone), token inversions
/// accepted only outside the stated precondition (see
/// `tcp_restarts_seed_1803_counts_only_the_answers_h2_got`).
#[test]
fn tcp_restarts() {
    let s = sweep_over("tcp_restarts", 250, 4, Mode::Restarts, Transport::Tcp);
    assert!(s.restarts > 0 && s.tcp.refused > 0, "{s:?}");
    assert!(s.outside_guarantee * 20 <= s.seeds.max(20), "{s:?}");
}

/// Seed 1803 of `tcp_restarts` (found at `SIM_SEEDS=12000`) hands out a
/// lower token, outside the documented precondition: H1 (token 2) had its
/// raise confirmed by nodes 0 and 2; node 0 then restarted, node 1 had been
/// down during H1. H2's attempt ran on all three, but node 2's stream broke
/// right after it granted at counter 3, so H2 counted nodes 0 and 1 (both
/// at 1) and its raise round's reconnect to node 2 was refused: a quorum
/// confirmed, token 1. The checker used to count every node that *logged*
/// H2's grant (node 2 among them) and called it a violation; the proof
/// (src/core/redis/redlock.rs) needs a node whose answer H2 counted. The
/// command was not one the engine had given up on: it was written 52 ms
/// into its 300 ms timeout, once node 2's handshake was answered.
/// Since split attempts settle a grace after a quorum of answers (aa71897)
/// the seed's run goes another way and hands out no lower token; it stays
/// here as a seed that must pass, with at most that one accepted inversion.
#[test]
fn tcp_restarts_seed_1803_counts_only_the_answers_h2_got() {
    if std::env::var("SIM_SEED").is_ok() {
        return;
    }
    match run_seed(1803, Mode::Restarts, Transport::Tcp, false) {
        Ok(stats) => assert!(stats.outside_guarantee <= 1, "{stats:?}"),
        Err((msg, _, _)) => panic!("seed 1803: {msg}"),
    }
}

/// The other recipes over TCP under every fault but restarts, with their
/// own checks: semaphores, read-write locks, re-entry (one node and
/// Redlock), elections.
#[test]
fn tcp_recipes() {
    let permits = sweep_over("tcp_semaphores", 100, 12, Mode::Permits, Transport::Tcp);
    assert!(permits.grants > permits.seeds, "{permits:?}");
    let rw = sweep_over(
        "tcp_read_write_locks",
        100,
        12,
        Mode::ReadWrite,
        Transport::Tcp,
    );
    assert!(rw.grants > rw.seeds, "{rw:?}");
    for mode in [Mode::Reentrant, Mode::ReentrantRedlock] {
        let s = sweep_over("tcp_reentrant_holds", 60, 20, mode, Transport::Tcp);
        assert!(s.grants > s.seeds, "{mode:?}: {s:?}");
        if s.seeds >= 20 {
            assert!(
                s.reentries > s.seeds / 2,
                "{mode:?}: holders should re-enter: {s:?}"
            );
        }
    }
    let e = sweep_over("tcp_elections", 12, 20, Mode::Election, Transport::Tcp);
    assert!(e.grants > e.seeds, "{e:?}");
}

/// `max_subscriptions = 0` "makes waiters poll" over TCP too: on calm
/// networks, with push off, no node may see a `SUBSCRIBE` (`final_checks`),
/// and with push on, waiters must subscribe, hear releases and need fewer
/// attempts per grant (the same seeds either way).
#[test]
fn tcp_push_saves_attempts_on_calm_networks() {
    let with = sweep_over(
        "tcp_push_on_calm",
        100,
        24,
        Mode::Calm { push: true },
        Transport::Tcp,
    );
    let without = sweep_over(
        "tcp_push_off_calm",
        100,
        24,
        Mode::Calm { push: false },
        Transport::Tcp,
    );
    assert!(with.subscriptions > 0 && with.push_messages > 0, "{with:?}");
    assert_eq!(without.subscriptions, 0, "{without:?}");
    assert!(
        with.attempts_per_grant() < without.attempts_per_grant(),
        "push should save attempts over TCP: {with:?} / {without:?}"
    );
}

/// Reentrant holds (one node, every fault but restarts; see
/// `Mode::Reentrant`): holders re-enter through their own handle and give
/// the inner hold back while the outer one holds. The world's checks
/// (one believer per name across clients, the validity of every report,
/// rising tokens) must hold: a hold count never lets a second owner in,
/// and a decrement never frees the lock.
#[test]
fn reentrant_holds() {
    let s = sweep("reentrant_holds", 300, 4, Mode::Reentrant);
    eprintln!(
        "reentrant_holds: {} re-entries granted over {} seeds",
        s.reentries, s.seeds
    );
    assert!(s.grants > s.seeds, "{s:?}");
    if s.seeds >= 20 {
        assert!(s.reentries > s.seeds / 2, "holders should re-enter: {s:?}");
    }
}

/// Reentrant holds on Redlock (3 or 5 nodes, every fault but restarts; see
/// `Mode::ReentrantRedlock`): a re-entry is counted on every node that saw
/// it and granted on a quorum, a release of any hold runs everywhere, and
/// nodes that missed a re-entry free their key early. The world's checks
/// (never a second owner of a name, valid reports, rising tokens) must hold.
#[test]
fn redlock_reentrant_holds() {
    let s = sweep("redlock_reentrant_holds", 300, 4, Mode::ReentrantRedlock);
    eprintln!(
        "redlock_reentrant_holds: {} re-entries granted over {} seeds",
        s.reentries, s.seeds
    );
    assert!(s.grants > s.seeds, "{s:?}");
    if s.seeds >= 20 {
        assert!(s.reentries > s.seeds / 2, "holders should re-enter: {s:?}");
    }
}

/// Elections (one node and Redlock, every fault but restarts; see
/// `Mode::Election`): at most one believing leader per name and tokens
/// rising (the world checks both), observed states pairing each token with
/// its own leadership's value, observers on one node never going back, and
/// every observer ending with the final state.
#[test]
fn elections() {
    let s = sweep("elections", 24, 10, Mode::Election);
    eprintln!(
        "elections: {} observed states ({} with a leader, {} paired with their grant), {} proclaims",
        s.observed, s.observed_leaders, s.paired, s.proclaims
    );
    assert!(s.grants > s.seeds, "{s:?}");
    if s.seeds >= 20 {
        assert!(
            s.observed_leaders > 0 && s.paired > 0 && s.proclaims > 0,
            "{s:?}"
        );
    }
}

/// Elections on Redlock Strict with node restarts (delayed restarts): token
/// inversions are accepted only outside the documented precondition, as for
/// locks (Redlock's known limits; the fencing token is the safety net).
#[test]
fn election_restarts() {
    let s = sweep("election_restarts", 12, 20, Mode::ElectionRestarts);
    assert!(s.restarts > 0 && s.grants > s.seeds, "{s:?}");
    assert!(s.outside_guarantee * 20 <= s.seeds.max(20), "{s:?}");
}

#[test]
fn restarts() {
    let s = sweep("restarts", 1000, 1, Mode::Restarts);
    assert!(s.restarts > 0, "{s:?}");
    // The precondition is about rare combinations; it must not be the norm.
    assert!(s.outside_guarantee * 20 <= s.seeds.max(20), "{s:?}");
}

/// Semaphores on Redlock Strict with node restarts (delayed restarts) and
/// other faults: per-slot token inversions are accepted only outside the
/// documented precondition, as for the lock.
#[test]
fn semaphore_restarts() {
    let s = sweep("semaphore_restarts", 150, 8, Mode::PermitsRestarts);
    assert!(s.restarts > 0 && s.grants > s.seeds, "{s:?}");
    assert!(s.outside_guarantee * 20 <= s.seeds.max(20), "{s:?}");
}

/// Read-write locks on one node under every fault but restarts: never a
/// writer beside another holder of its name, readers side by side, and a
/// writer's token above every earlier grant (see `read_write_checks`).
#[test]
fn read_write_locks() {
    let s = sweep("read_write_locks", 300, 4, Mode::ReadWrite);
    eprintln!(
        "read_write_locks: {} runs with readers side by side, {} writers granted right after a reader",
        s.shared_concurrent, s.writers_after_readers
    );
    assert!(
        s.grants > s.seeds,
        "the workload should acquire locks: {s:?}"
    );
    if s.seeds >= 50 {
        assert!(
            s.shared_concurrent * 4 >= s.seeds,
            "readers should often hold side by side: {s:?}"
        );
        assert!(
            s.writers_after_readers > s.seeds,
            "writers should follow readers: {s:?}"
        );
    }
}

/// The read-write checks are not blind: the node's clock jumping forward
/// beyond the drift budget ends leases early, and some seed must show a
/// writer believed beside another holder of its name.
#[test]
fn read_write_checkers_catch_clock_jumps_beyond_the_bound() {
    if std::env::var("SIM_SEED").is_ok() {
        return;
    }
    let mut other = Vec::new();
    let caught = (0..300).find(|&seed| {
        match run_seed(seed, Mode::ReadWriteBeyondBound, Transport::Http, false) {
            Err((msg, _, _)) if msg.contains("believe they hold") => true,
            Err((msg, _, _)) => {
                other.push(format!("seed {seed}: {msg}"));
                false
            }
            Ok(_) => false,
        }
    });
    eprintln!("ReadWriteBeyondBound: caught by seed {caught:?}");
    assert!(
        caught.is_some(),
        "no seed in 0..300 showed a writer beside another holder; other failures: {other:#?}"
    );
}

/// Semaphores under every fault but restarts (see the module docs).
#[test]
fn semaphores() {
    let s = sweep("semaphores", 300, 4, Mode::Permits);
    eprintln!(
        "semaphores: {} runs with permits held concurrently, {} acquires refused for another limit, {} runs where the limit changed",
        s.concurrent, s.limits_refused, s.limits_changed
    );
    assert!(
        s.grants > s.seeds,
        "the workload should acquire permits: {s:?}"
    );
    if s.seeds >= 50 {
        assert!(
            s.concurrent * 4 >= s.seeds,
            "permits should often be held concurrently: {s:?}"
        );
        assert!(
            s.limits_refused > 0 && s.limits_changed > 0,
            "another limit should be refused, and granted once free: {s:?}"
        );
    }
}

/// The semaphore's checks are not blind: node clocks jumping forward by
/// more than the drift budget make a slot's key vanish early, and some seed
/// must show two clients believing they hold the same slot (or more than
/// the limit holding permits).
#[test]
fn semaphore_checkers_catch_clock_jumps_beyond_the_bound() {
    if std::env::var("SIM_SEED").is_ok() {
        return;
    }
    let mut other = Vec::new();
    let caught = (0..300).find(|&seed| {
        match run_seed(seed, Mode::PermitsBeyondBound, Transport::Http, false) {
            Err((msg, _, _)) if msg.contains("believe they hold") => true,
            Err((msg, _, _)) => {
                other.push(format!("seed {seed}: {msg}"));
                false
            }
            Ok(_) => false,
        }
    });
    eprintln!("PermitsBeyondBound: caught by seed {caught:?}");
    assert!(
        caught.is_some(),
        "no seed in 0..300 showed a slot held twice; other failures: {other:#?}"
    );
}

/// Push is really used: on calm networks, the same seeds run with push
/// wake-up (default `max_subscriptions`) and without (0, waiters poll).
/// With push, waiters subscribe, hear releases, and need fewer acquire
/// attempts per grant; without it, nothing subscribes. Every safety check
/// and the calm-run checks apply to both.
#[test]
fn push_saves_attempts_on_calm_networks() {
    let with = sweep("push_on_calm", 300, 8, Mode::Calm { push: true });
    let without = sweep("push_off_calm", 300, 8, Mode::Calm { push: false });
    let per_grant = |(a, g): (u64, u64)| a as f64 / g.max(1) as f64;
    let mut lines = vec![format!(
        "calm networks, same seeds: {:.3} attempts per grant with push ({} attempts, {} grants, {} subscriptions, {} messages of which {} from attempts' cleanups), {:.3} without ({} attempts, {} grants)",
        with.attempts_per_grant(),
        with.attempts,
        with.grants,
        with.subscriptions,
        with.push_messages,
        with.cleanup_messages,
        without.attempts_per_grant(),
        without.attempts,
        without.grants
    )];
    for (i, n) in [1, 3, 5].into_iter().enumerate() {
        lines.push(format!(
            "  N = {n}: {:.3} attempts per grant with push ({} / {}), {:.3} without ({} / {})",
            per_grant(with.by_nodes[i]),
            with.by_nodes[i].0,
            with.by_nodes[i].1,
            per_grant(without.by_nodes[i]),
            without.by_nodes[i].0,
            without.by_nodes[i].1
        ));
    }
    let summary = lines.join("\n");
    eprintln!("{summary}");
    if std::env::var("SIM_SEED").is_ok() {
        return;
    }
    assert!(with.subscriptions > 0 && with.push_messages > 0, "{with:?}");
    assert_eq!(without.subscriptions, 0, "{without:?}");
    // Per node count, so that a failure says where push costs attempts.
    for (i, n) in [1, 3, 5].into_iter().enumerate() {
        assert!(
            per_grant(with.by_nodes[i]) < per_grant(without.by_nodes[i]),
            "N = {n}: push should save attempts:\n{summary}"
        );
    }
}

/// The checkers are not blind: when node clocks jump forward by more than
/// the drift budget (half a TTL or more), keys vanish early; some seed must
/// show two clients believing they hold the same name, and with the
/// validity check on, that check must fire.
#[test]
fn checkers_catch_clock_jumps_beyond_the_bound() {
    if std::env::var("SIM_SEED").is_ok() {
        return;
    }
    for (mode, expected) in [
        (Mode::BeyondBound, "two clients believe"),
        (Mode::BeyondBoundValidity, "nodes hold its key that long"),
    ] {
        let mut other = Vec::new();
        let caught = (0..300).find(|&seed| match run_seed(seed, mode, Transport::Http, false) {
            Err((msg, _, _)) if msg.contains(expected) => true,
            Err((msg, _, _)) => {
                other.push(format!("seed {seed}: {msg}"));
                false
            }
            Ok(_) => false,
        });
        eprintln!("{mode:?}: caught by seed {caught:?}");
        assert!(
            caught.is_some(),
            "{mode:?}: no seed in 0..300 showed {expected:?}; other failures: {other:#?}"
        );
    }
}

// ---------------------------------------------------------------------------
// The model against the codecs and against what real servers answer

fn request(url: &str, headers: Vec<(String, String)>, body: Vec<u8>) -> HttpRequest {
    HttpRequest {
        id: RequestId(1),
        method: Method::Post,
        target: Target::Url(url.into()),
        headers,
        body,
        timeout_ms: None,
        stream: false,
    }
}

fn full(r: Reply) -> (u16, Vec<u8>) {
    match r {
        Reply::Full { status, body } => (status, body),
        other => panic!("{other:?}"),
    }
}

/// Captured from Debian's webdis 0.1.9 + redis-server 7.0 (curl, POST body).
#[test]
fn webdis_model_answers_like_webdis_0_1_9() {
    let mut m = RedisModel::new(Proto::Webdis, None, NodeClock::default());
    let mut post = |body: &str| {
        let (s, b) = full(m.handle(
            10,
            &request("http://r:7379/", vec![], body.as_bytes().to_vec()),
        ));
        (s, String::from_utf8(b).unwrap())
    };
    assert_eq!(post("SET/a%2Fb/x"), (200, r#"{"SET":[true,"OK"]}"#.into()));
    assert_eq!(post("GET/a%2Fb"), (200, r#"{"GET":"x"}"#.into()));
    assert_eq!(post("GET/nope"), (200, r#"{"GET":null}"#.into()));
    assert_eq!(post("SET/%2E%2E/v"), (200, r#"{"SET":[true,"OK"]}"#.into()));
    assert_eq!(post("GET/%2E%2E"), (200, r#"{"GET":"v"}"#.into()));
    assert_eq!(post("SET/x.json/v"), (200, r#"{"SET":[true,"OK"]}"#.into()));
    assert_eq!(
        post("GET/x.json"),
        (200, r#"{"GET":null}"#.into()),
        "a .json suffix is the output format"
    );
    assert_eq!(post("GET/x%2Ejson"), (200, r#"{"GET":"v"}"#.into()));
    assert_eq!(post("SET/x/w"), (200, r#"{"SET":[true,"OK"]}"#.into()));
    assert_eq!(post("GET/x.json"), (200, r#"{"GET":"w"}"#.into()));
    assert_eq!(post("SET/k/%FF%FE"), (200, r#"{"SET":[true,"OK"]}"#.into()));
    assert_eq!(
        post("GET/k"),
        (200, "{}".into()),
        "non-UTF-8 cannot be JSON"
    );
    assert_eq!(
        post("SET/e2//"),
        (200, r#"{"SET":[false,"ERR syntax error"]}"#.into())
    );
    assert_eq!(
        post("eval/x/0").1,
        r#"{"eval":[false,"ERR the model knows only edgelock's scripts (unknown script text)"]}"#
    );
    assert_eq!(
        post("GET/y.raw").0,
        500,
        "the model refuses formats edgelock must never select"
    );
}

#[test]
fn codecs_carry_adversarial_keys_through_both_protocols() {
    let keys: Vec<Vec<u8>> = vec![
        b"a/b".to_vec(),
        b"..".to_vec(),
        b".".to_vec(),
        b"x.raw".to_vec(),
        b"%zz%".to_vec(),
        b"q?x#y+z".to_vec(),
        b"\r\n\0".to_vec(),
        "é}{".as_bytes().to_vec(),
        (1u8..=255).collect(),
    ];
    for k in &keys {
        // Webdis: any bytes.
        let mut m = RedisModel::new(Proto::Webdis, None, NodeClock::default());
        let cmd = RedisCommand::new("SET").arg(k).arg("v");
        let body = webdis::encode_command(&cmd).unwrap();
        let (s, b) = full(m.handle(1, &request("http://r:7379/", vec![], body)));
        assert_eq!(
            webdis::decode_reply(s, &b, b"SET"),
            Ok(RedisValue::Bulk(b"OK".to_vec()))
        );
        assert_eq!(
            m.keys(1).into_iter().map(|(k, _)| k).collect::<Vec<_>>(),
            vec![k.clone()],
            "exactly this key"
        );
        // Upstash: UTF-8 keys only; others are refused before sending.
        let mut m = RedisModel::new(Proto::Upstash, Some(TOKEN.into()), NodeClock::default());
        match upstash::encode_command(&cmd) {
            Ok(body) => {
                let headers = vec![
                    ("Authorization".into(), format!("Bearer {TOKEN}")),
                    ("Upstash-Encoding".into(), "base64".into()),
                ];
                let (s, b) = full(m.handle(1, &request("http://r:8080", headers.clone(), body)));
                assert_eq!(
                    upstash::decode_reply(s, &b, true),
                    Ok(RedisValue::Bulk(b"OK".to_vec()))
                );
                let get = upstash::encode_command(&RedisCommand::new("GET").arg(k)).unwrap();
                let (s, b) = full(m.handle(2, &request("http://r:8080", headers, get)));
                assert_eq!(
                    upstash::decode_reply(s, &b, true),
                    Ok(RedisValue::Bulk(b"v".to_vec()))
                );
                assert_eq!(
                    m.keys(2).into_iter().map(|(k, _)| k).collect::<Vec<_>>(),
                    vec![k.clone()]
                );
            }
            Err(e) => assert!(std::str::from_utf8(k).is_err(), "refused a UTF-8 key: {e}"),
        }
    }
    // A wrong token is refused.
    let mut m = RedisModel::new(Proto::Upstash, Some(TOKEN.into()), NodeClock::default());
    let (s, b) = full(m.handle(
        1,
        &request("http://r:8080", vec![], br#"["GET","k"]"#.to_vec()),
    ));
    assert_eq!(
        upstash::decode_reply(s, &b, true).unwrap_err().status,
        Some(401)
    );
}

#[test]
fn node_clocks_drive_expiry() {
    // A node whose clock runs 10% fast and jumps back 500 ms at t=1000.
    let clock = NodeClock {
        offset: 5_000,
        ppm: 100_000,
        jumps: vec![(1_000, -500)],
    };
    let mut m = RedisModel::new(Proto::Webdis, None, clock);
    let (s, _) = full(m.handle(
        0,
        &request("http://r:7379/", vec![], b"SET/k/v/PX/2200".to_vec()),
    ));
    assert_eq!(s, 200);
    // Local 5000 + 2200 = 7200: reached at global 2000 without the jump, ~2455 with it.
    assert_eq!(m.expires_global(b"k", 0), Some(2_455));
    assert!(m.get(b"k", 2_454).is_some());
    m.advance(2_455);
    assert!(m.get(b"k", 2_455).is_none());
}

/// Pub/sub on both protocols, from the client's own requests
/// (`NodeCodec::subscribe`, the release script) to the bytes on the stream
/// and back through the client's decoder: the confirmation, one message per
/// release that deleted the key, nothing for one that did not, nothing after
/// the stream closed.
#[test]
fn the_model_streams_subscriptions_like_the_real_servers() {
    use edgelock::core::redis::RedisProtocol;
    use edgelock::internals::redis::codec::NodeCodec;
    use edgelock::internals::redis::scripts;
    use edgelock::internals::redis::subscription::{wake_channel, PushDecoder, PushFrame};

    for proto in [Proto::Upstash, Proto::Webdis] {
        let (node, protocol) = match proto {
            Proto::Upstash => (
                RedisNode::upstash("http://r:7379", TOKEN),
                RedisProtocol::Upstash,
            ),
            Proto::Webdis => (RedisNode::webdis("http://r:7379"), RedisProtocol::Webdis),
            Proto::Resp => unreachable!("HTTP protocols only"),
        };
        let codec = NodeCodec::new(&node).unwrap();
        let mut m = RedisModel::new(
            proto,
            (proto == Proto::Upstash).then(|| TOKEN.to_string()),
            NodeClock::default(),
        );
        let key = lock_key(PREFIX, "a/b c");
        let fence = format!("{key}:fence");
        let channel = wake_channel(&key);
        let sub = codec.subscribe(RequestId(5), &channel, 1_000).unwrap();
        assert_eq!(
            m.handle(1, &sub),
            Reply::Stream { status: 200 },
            "{proto:?}"
        );
        let confirm = match proto {
            Proto::Upstash => format!("data: subscribe,{channel},1\n\n"),
            Proto::Webdis => format!(r#"{{"SUBSCRIBE":["subscribe","{channel}",1]}}"#),
            Proto::Resp => unreachable!("HTTP protocols only"),
        };
        assert_eq!(
            m.drain_stream_chunks(1),
            vec![(RequestId(5), confirm.into_bytes())],
            "{proto:?}"
        );
        let run = |m: &mut RedisModel, id: u64, cmd: &RedisCommand, t: Millis| {
            let (status, body) =
                full(m.handle(t, &codec.encode(RequestId(id), cmd, 1_000).unwrap()));
            codec.decode(cmd, status, &body).unwrap()
        };
        run(
            &mut m,
            6,
            &scripts::acquire(&key, &fence, "aa", 1_000, false, 0, 2),
            2,
        );
        // Not the owner: nothing deleted, nothing published.
        assert_eq!(
            run(&mut m, 7, &scripts::release(&key, &fence, "bb", 1), 3),
            RedisValue::Int(0)
        );
        assert!(m.drain_stream_chunks(3).is_empty(), "{proto:?}");
        assert_eq!(
            run(&mut m, 8, &scripts::release(&key, &fence, "aa", 1), 4),
            RedisValue::Int(1)
        );
        let chunks = m.drain_stream_chunks(4);
        let message = match proto {
            Proto::Upstash => format!("data: message,{channel},released:1\n\n"),
            Proto::Webdis => format!(r#"{{"SUBSCRIBE":["message","{channel}","released:1"]}}"#),
            Proto::Resp => unreachable!("HTTP protocols only"),
        };
        assert_eq!(
            chunks,
            vec![(RequestId(5), message.clone().into_bytes())],
            "{proto:?}"
        );
        let mut d = PushDecoder::new(protocol);
        let mut frames = Vec::new();
        // Byte by byte: the client reassembles.
        let mut all = match proto {
            Proto::Upstash => format!("data: subscribe,{channel},1\n\n").into_bytes(),
            Proto::Webdis => format!(r#"{{"SUBSCRIBE":["subscribe","{channel}",1]}}"#).into_bytes(),
            Proto::Resp => unreachable!("HTTP protocols only"),
        };
        all.extend_from_slice(message.as_bytes());
        for b in all {
            frames.extend(d.push(&[b]).unwrap());
        }
        assert_eq!(
            frames,
            vec![
                PushFrame::Subscribed,
                PushFrame::Message(b"released:1".to_vec())
            ],
            "{proto:?}"
        );
        assert_eq!(m.subscriptions, 1);
        assert_eq!((m.publishes, m.deliveries), (1, 1), "{proto:?}");
        // Closed: the subscription is gone, a later release reaches nobody.
        m.stream_closed(RequestId(5));
        assert_eq!(m.open_subscriptions(), 0);
        run(
            &mut m,
            9,
            &scripts::acquire(&key, &fence, "cc", 1_000, false, 0, 2),
            5,
        );
        assert_eq!(
            run(&mut m, 10, &scripts::release(&key, &fence, "cc", 2), 6),
            RedisValue::Int(1)
        );
        assert!(m.drain_stream_chunks(6).is_empty(), "{proto:?}");
        // A restart ends every subscription.
        assert_eq!(
            m.handle(7, &codec.subscribe(RequestId(11), &channel, 1_000).unwrap()),
            Reply::Stream { status: 200 }
        );
        m.crash_restart(8);
        assert_eq!(m.open_subscriptions(), 0);
        assert!(m.drain_stream_chunks(8).is_empty());
    }
    // Upstash: authorization first, then at least one channel.
    let mut m = RedisModel::new(Proto::Upstash, Some(TOKEN.into()), NodeClock::default());
    let sub = |url: &str, headers: Vec<(String, String)>| HttpRequest {
        id: RequestId(1),
        method: Method::Post,
        target: Target::Url(url.into()),
        headers,
        body: Vec::new(),
        timeout_ms: None,
        stream: true,
    };
    assert_eq!(
        full(m.handle(1, &sub("http://r:7379/subscribe/ch", vec![]))).0,
        401
    );
    let auth = vec![("Authorization".to_string(), format!("Bearer {TOKEN}"))];
    assert_eq!(
        full(m.handle(1, &sub("http://r:7379/subscribe/", auth.clone()))).0,
        400
    );
    assert_eq!(
        m.handle(1, &sub("http://r:7379/subscribe/a%3Ab/c/", auth)),
        Reply::Stream { status: 200 }
    );
    assert_eq!(
        m.drain_stream_chunks(1)
            .into_iter()
            .map(|(_, c)| String::from_utf8(c).unwrap())
            .collect::<Vec<_>>(),
        vec!["data: subscribe,a:b,1\n\n", "data: subscribe,c,2\n\n"]
    );
    // Webdis: the name as sent is the key; a GET of any command works, and
    // SUBSCRIBE without a channel is an ordinary (failing) command.
    let mut m = RedisModel::new(Proto::Webdis, None, NodeClock::default());
    let mut get = |path: &str| {
        let mut r = request(&format!("http://r:7379/{path}"), vec![], Vec::new());
        r.method = Method::Get;
        m.handle(1, &r)
    };
    assert_eq!(get("subscribe/x"), Reply::Stream { status: 200 });
    assert_eq!(
        full(get("SET/k/v")),
        (200, br#"{"SET":[true,"OK"]}"#.to_vec())
    );
    assert_eq!(
        full(get("PUBLISH/x/hi")),
        (200, br#"{"PUBLISH":1}"#.to_vec())
    );
    assert_eq!(full(get("SUBSCRIBE")).0, 200);
    assert_eq!(
        m.drain_stream_chunks(1)
            .into_iter()
            .map(|(_, c)| String::from_utf8(c).unwrap())
            .collect::<Vec<_>>(),
        vec![
            r#"{"subscribe":["subscribe","x",1]}"#,
            r#"{"subscribe":["message","x","hi"]}"#
        ]
    );
}

/// The model's own protocol (tests/sim/redis_resp.rs), driven through the
/// core's RESP codec as the byte-stream transport drives it: `requirepass`
/// and `AUTH`, the scripts through the shared execution path, the
/// subscribed state, and a release's `PUBLISH` reaching a subscriber
/// connection as a `message` array.
#[test]
fn the_model_speaks_resp_like_redis() {
    use edgelock::internals::redis::resp::{encode_command, Frame, RespDecoder};
    use edgelock::internals::redis::scripts;
    use edgelock::internals::redis::subscription::wake_channel;

    let call = |m: &mut RedisModel, conn: u64, cmd: RedisCommand| -> Vec<RedisValue> {
        let mut bytes = Vec::new();
        encode_command(&cmd, &mut bytes);
        // The world's server side reads the command as a client's array.
        let mut d = RespDecoder::new();
        d.feed(&bytes);
        let Some(Frame::Reply(RedisValue::Array(items))) = d.next_frame().unwrap() else {
            panic!("not a command array");
        };
        let args: Vec<Vec<u8>> = items
            .into_iter()
            .map(|v| match v {
                RedisValue::Bulk(b) => b,
                other => panic!("{other:?}"),
            })
            .collect();
        let reply = m.stream_command(1, RequestId(conn), 0, &args);
        let mut d = RespDecoder::new();
        d.feed(&reply);
        let mut out = Vec::new();
        while let Some(Frame::Reply(v)) = d.next_frame().unwrap() {
            out.push(v);
        }
        assert!(!d.in_frame(), "a whole reply");
        out
    };
    let err = |v: &[RedisValue]| match v {
        [RedisValue::Error(e)] => e.clone(),
        other => panic!("{other:?}"),
    };
    let ok = vec![RedisValue::Bulk(b"OK".to_vec())];

    // requirepass: nothing but AUTH before it; a wrong password refused.
    let mut m = RedisModel::new(Proto::Resp, Some(TOKEN.into()), NodeClock::default());
    assert!(m.accepts_streams());
    let name = || RedisCommand::new("CLIENT").arg("SETNAME").arg("edgelock");
    assert!(err(&call(&mut m, 1, name())).starts_with("NOAUTH"));
    assert!(err(&call(&mut m, 1, RedisCommand::new("AUTH").arg("nope"))).starts_with("WRONGPASS"));
    assert_eq!(call(&mut m, 1, RedisCommand::new("AUTH").arg(TOKEN)), ok);
    assert_eq!(call(&mut m, 1, name()), ok);
    // Per connection: another one starts unauthenticated.
    let get = RedisCommand::new("GET").arg("k");
    assert!(err(&call(&mut m, 2, get.clone())).starts_with("NOAUTH"));
    assert_eq!(
        call(
            &mut m,
            2,
            RedisCommand::new("AUTH").arg("default").arg(TOKEN)
        ),
        ok
    );
    assert_eq!(call(&mut m, 2, get.clone()), vec![RedisValue::Nil]);
    assert!(err(&call(&mut m, 2, RedisCommand::new("SELECT").arg("3"))).starts_with("ERR"));

    // No password: AUTH is an error, commands run at once.
    let mut m = RedisModel::new(Proto::Resp, None, NodeClock::default());
    assert!(
        err(&call(&mut m, 1, RedisCommand::new("AUTH").arg("x"))).contains("without any password")
    );
    assert_eq!(call(&mut m, 1, get.clone()), vec![RedisValue::Nil]);

    // Pub/sub: a subscriber connection hears a release on its channel.
    let key = lock_key(PREFIX, "a/b c");
    let fence = format!("{key}:fence");
    let channel = wake_channel(&key);
    let confirm = |kind: &str, n: i64| {
        vec![RedisValue::Array(vec![
            RedisValue::Bulk(kind.as_bytes().to_vec()),
            RedisValue::Bulk(channel.as_bytes().to_vec()),
            RedisValue::Int(n),
        ])]
    };
    let sub = RedisCommand::new("SUBSCRIBE").arg(&channel);
    assert_eq!(call(&mut m, 7, sub), confirm("subscribe", 1));
    assert_eq!(m.open_subscriptions(), 1);
    assert!(err(&call(&mut m, 7, get.clone())).contains("only (P|S)SUBSCRIBE"));
    let acquire = scripts::acquire(&key, &fence, "aa", 1_000, false, 0, 2);
    let granted = call(&mut m, 1, acquire);
    assert!(
        matches!(granted.as_slice(), [v] if !matches!(v, RedisValue::Error(_))),
        "{granted:?}"
    );
    assert_eq!(m.get(key.as_bytes(), 1), Some(b"aa".to_vec()));
    assert!(m.drain_stream_chunks(1).is_empty());
    let release = scripts::release(&key, &fence, "aa", 1);
    assert_eq!(call(&mut m, 1, release), vec![RedisValue::Int(1)]);
    let chunks = m.drain_stream_chunks(1);
    let message = format!(
        "*3\r\n$7\r\nmessage\r\n${}\r\n{channel}\r\n$10\r\nreleased:1\r\n",
        channel.len()
    );
    assert_eq!(chunks, vec![(RequestId(7), message.into_bytes())]);
    let unsub = RedisCommand::new("UNSUBSCRIBE").arg(&channel);
    assert_eq!(call(&mut m, 7, unsub), confirm("unsubscribe", 0));
    assert_eq!(m.open_subscriptions(), 0);
    // A closed connection hears nothing more.
    call(&mut m, 8, RedisCommand::new("SUBSCRIBE").arg(&channel));
    m.stream_closed(RequestId(8));
    assert_eq!(m.open_subscriptions(), 0);
    call(
        &mut m,
        1,
        RedisCommand::new("PUBLISH").arg(&channel).arg("x"),
    );
    assert!(m.drain_stream_chunks(2).is_empty());
}

/// A TCP node whose password the clients get wrong: every acquire fails
/// (the refused `AUTH` fails the commands queued behind it as refused:
/// nothing ran, reported as `BACKEND`),
/// none hangs, nothing is granted or written, every client closes, and no
/// error quotes the password.
#[test]
fn tcp_wrong_password_fails_acquires_without_hanging() {
    const WRONG: &str = "not-the-sim-token";
    let mut w: World<RedisModel> = World::new(7, NetConfig::calm());
    w.add_server(
        &[&server_base(Proto::Resp, false, 0)],
        RedisModel::new(Proto::Resp, Some(TOKEN.into()), NodeClock::default()),
    );
    let node = RedisNode::resp("redis://redis-0:6379", Some(WRONG)).unwrap();
    let mut rng = SimRng::new(7);
    for _ in 0..2 {
        let mut cfg = RedisConfig::new(node.clone());
        cfg.ttl_ms = 2_000;
        cfg.request_timeout_ms = 300;
        let machine = RedisMachine::new(cfg, Box::new(rng.fork())).expect("valid config");
        w.add_client(Box::new(machine), Clock::default());
    }
    w.start_workload(WorkloadConfig {
        names: vec!["job".into()],
        cycles: 3,
        weights: (1, 1, 0),
        wait_for: (100, 500),
        cancel_chance: 0.0,
        cancel_after: (5, 10),
        hold: (0, 10),
        long_hold_chance: 0.0,
        extend_chance: 0.0,
        reenter_chance: 0.0,
        long_hold: (0, 10),
        think: (0, 50),
        ttl_ms: None,
        release_retries: 0,
        stop_at: 60_000,
    });
    w.run(200_000, &mut |_| Ok(()))
        .expect("no hang, no violation");
    assert!(w.all_done(), "every client closed");
    assert!(w.grants.is_empty(), "{:?}", w.grants);
    let acquires: Vec<_> = w
        .history
        .iter()
        .filter(|r| matches!(r.what, sim::net::What::Acquire { .. }))
        .collect();
    assert!(!acquires.is_empty());
    for r in &acquires {
        match &r.outcome {
            sim::net::Outcome::Failed { code, message } => {
                // The server answered and refused us: BACKEND, as an
                // Upstash node's 401, and at the first attempt (one node
                // does not retry an unavailable attempt; neither case is
                // retried until the wait runs out).
                assert_eq!(*code, "BACKEND", "{message}");
                assert!(message.contains("refused authentication"), "{message}");
                assert!(!message.contains(WRONG), "{message}");
                assert!(!message.contains(TOKEN), "{message}");
            }
            other => panic!("an acquire with a wrong password ended {other:?}"),
        }
        // One round trip of a calm network, well within the wait (100 ms
        // or more) and the request timeout: no retry.
        let took = r.end.expect("ended") - r.begin;
        assert!(
            took < 100,
            "an acquire with a wrong password took {took} ms"
        );
    }
    eprintln!("wrong password: {:?}", acquires[0].outcome);
    assert!(w.server(0).keys(w.now).is_empty());
    assert!((0..2).all(|c| w.tcp_flights(c) == 0) && w.open_stream_count() == 0);
}
