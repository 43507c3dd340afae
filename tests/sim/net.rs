//! A seeded, single-threaded, simulated-time world for lock machines
//! (in the spirit of madsim/turmoil and str0m's sans-IO network emulator).
//!
//! # How to use it with another backend (e.g. a Redis model)
//!
//! 1. Implement [`SimServer`] for your in-memory server model. It sees every
//!    request as an [`HttpRequest`] whose `id` is a *wire id* unique across all
//!    clients (the world renames the client's own ids, which collide between
//!    clients), and whose headers carry [`CLIENT_HEADER`] = the sending client's
//!    index (like a source address; a model may use it to attribute state to a
//!    client for checks). Answer with [`Reply::Full`], open a stream with
//!    [`Reply::Stream`] (its chunks come out of `drain_stream_chunks`, keyed by
//!    the wire id), [`Reply::NoReply`], or hold the request open with
//!    [`Reply::Held`] and answer it later through `drain_late_replies` (a
//!    response or a transport error, keyed by the wire id; the world drains
//!    them with the streams, after every request and every `advance`). The
//!    server's clock is the world's global clock: it is the reference every
//!    check uses.
//! 2. `let mut w = World::new(seed, NetConfig::calm());`
//!    `w.add_server(&["http://redis-0:7379"], model)` — several bases
//!    (*endpoints*, numbered globally in the order added; see
//!    [`World::endpoints`]) may map to one server (members of one cluster).
//!    Partitions and outages are per endpoint: a server whose endpoints are
//!    all down has crashed, and gets `crash_restart` when one comes back.
//!    `w.add_client(Box::new(machine), Clock { offset, ppm })` for each client.
//! 3. Optionally add faults: [`World::add_partition`], [`World::add_pause`],
//!    [`World::add_outage`], and set `NetConfig` loss/long-delay chances, which
//!    apply until `net.faults_until`.
//! 4. `w.start_workload(WorkloadConfig { .. })` and `w.run(until, &mut check)`,
//!    where `check(&world)` is called after every step (backend-specific
//!    invariants, e.g. "every believer's key is alive in the model"). The
//!    generic invariant (at most one believer per lock name) and the fencing
//!    order are checked by the world itself; `history`, `grants`, `losts` and
//!    `check_calm_run` serve the end-of-run properties. Scripted users loop
//!    acquire (Try / For / Forever, sometimes cancelled) → hold (sometimes
//!    extend) → release for `cycles` rounds, then every client is closed
//!    (also at `stop_at`, whatever it is doing). A run ends when nothing is
//!    left to do; `max_steps` bounds a client that floods the network.
//! 5. On failure print the seed and `SIM_SEED=<seed> cargo test --test …`;
//!    `enable_trace()` before `run` records a step log for the replay, and
//!    `describe_history` summarises a lock's history around the failure.
//!
//! Everything — delays, loss, which input a resumed client sees first, every
//! client's entropy — comes from one [`SimRng`] seeded by the seed, and the
//! event queue is ordered by (time, insertion sequence), so a seed replays
//! exactly. There are no threads and no real clocks in here.
//!
//! # What a client is
//!
//! A `Box<dyn LockMachine>` driven exactly by the driver loop documented in
//! `src/core/machine.rs`: one input (user call, HTTP result or timer), then
//! drain every transmit, then every event. Its clock is `offset + global` (plus
//! an optional skew in parts per million). A *paused* client (GC pause,
//! SIGSTOP) processes nothing — no inputs, no timers, no user calls — until the
//! pause ends; what arrived meanwhile queues and is then processed in arrival
//! order (the seed decides whether due timers run before or after it).
//!
//! # What the network does
//!
//! Every request, response and stream chunk gets a seeded delay; requests may
//! be lost (never reach the server); responses may be lost after the server
//! applied the request (the client then sees a reset or, more often, silence
//! until its own timeout); partitions cut a client from an endpoint for a
//! period (everything in either direction vanishes); outages take an endpoint
//! down (its streams break, connections are refused). Chunks of one stream are
//! delivered in order (one TCP connection), and a lost chunk breaks the
//! stream; a chunk may be cut into pieces at random bytes (`split_chunk`,
//! `split_pieces`), held back to travel with the next one (`stream_coalesce`),
//! and — a fault — have a [`hostile_chunk`] spliced in (`stream_garbage`).
//! Byte streams (`Transmit::Open`, `Write`) are simulated TCP connections
//! to servers that take them (tests/sim/stream.rs: RESP commands run by
//! the server, replies split and coalesced, connections cut mid-reply,
//! black-holed or refused).
//! Loss, long delays and hostile chunks stop at `faults_until`; schedule partitions,
//! pauses and outages before it too, so that the run ends on a calm network. The driver keeps the driver-loop rules: a cancelled request's
//! answer is dropped (except, rarely and on purpose, delivered late, which the
//! machine must ignore), and a request that gets no answer ends with
//! `Failed{Timeout}` shortly after its `timeout_ms` (a safety net: the core
//! normally times out first) or, without `timeout_ms`, with an I/O error after
//! `dead_connection_ms`. Streams without a timeout may stay silent forever.
//!
//! # Belief
//!
//! A client *believes* it holds a lock from the `Acquired` event until its user
//! calls `release`/`close`, the machine reports `Lost`/`Released`, or the
//! client's own clock passes the lock's `expires_at` (updated by `Renewed` and
//! `Extended`). At most one client may believe it holds a given name at any
//! instant; fencing tokens of successive grants of a name must strictly
//! increase. With a semaphore workload ([`World::set_acquire_kinds`] with
//! `LockKind::Permits`): at most `limit` clients believe they hold a permit
//! of a name at once, all of the same limit, never two the same slot (the
//! same key), and tokens strictly increase across successive grants of a
//! slot. With `LockKind::Shared` among the kinds (a read-write lock), shared
//! believers of a name may be many, never beside an exclusive one, and a
//! shared grant's token is compared with earlier exclusive grants only
//! (concurrent readers hear of their grants in any order).

#![allow(dead_code)]

use std::cmp::Ordering;
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet, VecDeque};

use edgelock::core::{
    AcquireOptions, Event, HttpRequest, Input, Leadership, LockError, LockId, LockInfo, LockKind,
    LockMachine, LockMachineExt, LostReason, Millis, OpId, Operation, RequestId, SeededEntropy,
    Target, Transmit, TransportError, Wait,
};

#[path = "stream.rs"]
mod stream;
pub use stream::StreamStats;
use stream::TcpConn;

/// Header the world adds to every request: the sending client's index.
pub const CLIENT_HEADER: &str = "x-sim-client";

/// A server's answer to one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    Full {
        status: u16,
        body: Vec<u8>,
    },
    /// A 2xx streaming response; its body comes from `drain_stream_chunks`.
    /// (A non-2xx status is delivered as an empty `Full` response.)
    Stream {
        status: u16,
    },
    /// The server swallowed the request (crashed mid-request): no answer.
    #[allow(clippy::enum_variant_names)] // the name the harness's users know
    NoReply,
    /// The server holds the request open and answers it later, through
    /// `drain_late_replies` (a Durable Object's held-open `acquire`).
    Held,
}

/// A held request's answer: a response, or its connection failing.
pub type LateReply = Result<(u16, Vec<u8>), TransportError>;

pub trait SimServer {
    /// A request arrives at `now`. Return the reply now, a stream registration, or nothing (crashed).
    fn handle(&mut self, now: Millis, req: &HttpRequest) -> Reply;
    /// Bytes for open streams produced since the last call (watch events), as (request id, chunk).
    fn drain_stream_chunks(&mut self, now: Millis) -> Vec<(RequestId, Vec<u8>)>;
    /// The client cancelled (or the connection broke).
    fn stream_closed(&mut self, id: RequestId);
    /// Expire leases/keys by the server's clock.
    fn advance(&mut self, now: Millis);
    fn next_deadline(&self) -> Option<Millis>;
    /// The server comes back at `now` after an outage that began with its
    /// crash (meanwhile it answered nothing, `advance` was not called and its
    /// streams were closed via `stream_closed`). Lose volatile state here
    /// (Redis without persistence).
    fn crash_restart(&mut self, _now: Millis) {}
    /// Answers to requests held open earlier ([`Reply::Held`]), by wire id.
    fn drain_late_replies(&mut self, _now: Millis) -> Vec<(RequestId, LateReply)> {
        Vec::new()
    }
    /// Whether it takes byte-stream connections (`Transmit::Open`, see
    /// tests/sim/stream.rs); a connect to a server that does not is refused.
    fn accepts_streams(&self) -> bool {
        false
    }
    /// One command read on byte-stream connection `conn` (its wire id) of
    /// `client`, as the arguments of its RESP array: the reply's bytes.
    /// Bytes the server pushes later (published messages) come out of
    /// `drain_stream_chunks` keyed by `conn`; `stream_closed(conn)` ends it.
    fn stream_command(
        &mut self,
        _now: Millis,
        _conn: RequestId,
        _client: usize,
        _args: &[Vec<u8>],
    ) -> Vec<u8> {
        Vec::new()
    }
    /// Whether its byte streams carry a protocol of its own framing (the
    /// ZooKeeper model): the bytes a write brings go to
    /// [`stream_bytes`](SimServer::stream_bytes) as they arrive, not
    /// through the RESP decoder.
    fn reads_raw_streams(&self) -> bool {
        false
    }
    /// The bytes of one write on byte-stream connection `conn` of `client`
    /// (any slice of the client's frames): the reply bytes.
    fn stream_bytes(
        &mut self,
        _now: Millis,
        _conn: RequestId,
        _client: usize,
        _data: &[u8],
    ) -> Vec<u8> {
        Vec::new()
    }
}

impl<S: SimServer + ?Sized> SimServer for Box<S> {
    fn handle(&mut self, now: Millis, req: &HttpRequest) -> Reply {
        (**self).handle(now, req)
    }
    fn drain_stream_chunks(&mut self, now: Millis) -> Vec<(RequestId, Vec<u8>)> {
        (**self).drain_stream_chunks(now)
    }
    fn stream_closed(&mut self, id: RequestId) {
        (**self).stream_closed(id)
    }
    fn advance(&mut self, now: Millis) {
        (**self).advance(now)
    }
    fn next_deadline(&self) -> Option<Millis> {
        (**self).next_deadline()
    }
    fn crash_restart(&mut self, now: Millis) {
        (**self).crash_restart(now)
    }
    fn drain_late_replies(&mut self, now: Millis) -> Vec<(RequestId, LateReply)> {
        (**self).drain_late_replies(now)
    }
    fn accepts_streams(&self) -> bool {
        (**self).accepts_streams()
    }
    fn stream_command(
        &mut self,
        now: Millis,
        conn: RequestId,
        client: usize,
        args: &[Vec<u8>],
    ) -> Vec<u8> {
        (**self).stream_command(now, conn, client, args)
    }
    fn reads_raw_streams(&self) -> bool {
        (**self).reads_raw_streams()
    }
    fn stream_bytes(
        &mut self,
        now: Millis,
        conn: RequestId,
        client: usize,
        data: &[u8],
    ) -> Vec<u8> {
        (**self).stream_bytes(now, conn, client, data)
    }
}

/// What a hostile middlebox or a broken server may splice into a stream:
/// foreign or forged frames of either push protocol (server-sent events,
/// concatenated JSON), frames with missing fields, unbalanced JSON, bare
/// line breaks, NUL bytes, invalid UTF-8, random bytes, and (rarely) a line
/// longer than any decoder accepts.
pub fn hostile_chunk(rng: &mut SimRng) -> Vec<u8> {
    const FIXED: &[&[u8]] = &[
        b"\n",
        b"\n\n",
        b"\r\n",
        b"data: message\n\n",
        b"data: subscribe\n\n",
        b"data: message,edgelock:wake:0,released:1\n\n",
        b"data: subscribe,edgelock:wake:0,1\n\n",
        b"data: unsubscribe,x,0\n\n",
        b": keep-alive\n\n",
        b"event: foo\nid: 7\nretry: 1\n\n",
        b"data:\n\n",
        b"data: \xff\xfe\xc0\x80\n\n",
        b"{\"SUBSCRIBE\":[\"message\"]}",
        b"{\"SUBSCRIBE\":[\"subscribe\",\"x\",1]}",
        b"{\"SUBSCRIBE\":[\"message\",\"x\",\"released:1\"]}",
        b"{\"SUBSCRIBE\":",
        b"{\"SUBSCRIBE\":[\"message\",\"x\",\"\xff\"]}",
        b"{\"GET\":\"x\"}",
        b"{\"SUBSCRIBE\":[[[[[[[[[[]]]]]]]]]]}",
        b"}",
        b"]]]",
        b"{{{{",
        b"\"",
        b"\0\0\0",
        b"\xff\xfe\xfd",
        b"\xc0\x80\xed\xa0\x80",
        b"null",
        b"HTTP/1.1 200 OK\r\n\r\n",
    ];
    match rng.below(10) {
        0..=6 => FIXED[rng.below(FIXED.len() as u64) as usize].to_vec(),
        7 | 8 => (0..rng.range(1, 64))
            .map(|_| rng.next_u64() as u8)
            .collect(),
        _ if rng.chance(0.2) => {
            // Longer than any line or message the decoders accept.
            let mut v = b"data: ".to_vec();
            v.resize(70_000, b'a');
            v
        }
        _ => {
            let mut v = b"{\"SUBSCRIBE\":[\"message\",\"x\",\"".to_vec();
            v.resize(rng.range(100, 5_000) as usize, b'z');
            v
        }
    }
}

/// The one random source of a world (SplitMix64 via `SeededEntropy`).
#[derive(Clone, Debug)]
pub struct SimRng(SeededEntropy);

impl SimRng {
    pub fn new(seed: u64) -> Self {
        SimRng(SeededEntropy::new(seed))
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }
    /// Uniform in `0..n` (0 when n == 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }
    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            lo
        } else {
            lo + self.below(hi - lo + 1)
        }
    }
    pub fn chance(&mut self, p: f64) -> bool {
        if p <= 0.0 {
            return false;
        }
        ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64) < p
    }
    /// An independent entropy source (for a machine).
    pub fn fork(&mut self) -> SeededEntropy {
        SeededEntropy::new(self.next_u64())
    }
}

/// A client's clock: `offset + global`, skewed by `ppm` parts per million.
#[derive(Clone, Copy, Debug, Default)]
pub struct Clock {
    pub offset: Millis,
    /// Rate error; must be > -100_000 so the clock keeps moving forward.
    pub ppm: i64,
}

impl Clock {
    pub fn local(self, global: Millis) -> Millis {
        let skew = (global as i128 * self.ppm as i128) / 1_000_000;
        (self.offset as i128 + global as i128 + skew).max(0) as Millis
    }
    /// The first global instant at which the local clock reads at least `local`.
    pub fn to_global(self, local: Millis) -> Millis {
        let base = local.saturating_sub(self.offset) as i128;
        let mut g = ((base * 1_000_000) / (1_000_000 + self.ppm as i128)).max(0) as Millis;
        while g > 0 && self.local(g - 1) >= local {
            g -= 1;
        }
        while self.local(g) < local {
            g += 1;
        }
        g
    }
}

#[derive(Clone, Debug)]
pub struct NetConfig {
    /// Normal one-way delay range (ms), inclusive.
    pub delay: (Millis, Millis),
    /// Chance that a message takes up to `long_delay_max` instead.
    pub long_delay_chance: f64,
    pub long_delay_max: Millis,
    /// Chance a request never reaches its server.
    pub request_loss: f64,
    /// Chance a response is lost after the server applied the request.
    pub response_loss: f64,
    /// A lost response shows up as a connection reset with this chance, else as silence.
    pub reset_chance: f64,
    /// Chance a stream chunk breaks its connection (the chunk and the stream are lost).
    pub stream_break: f64,
    /// Chance a chunk is delivered in several pieces (exercises reassembly).
    pub split_chunk: f64,
    /// Most pieces a split chunk is cut into, at random byte boundaries (2:
    /// one cut).
    pub split_pieces: usize,
    /// Chance a stream chunk is held back and goes out together with the
    /// stream's next chunk (several events in one read, like a TCP segment
    /// carrying several writes), at the latest `coalesce_hold_ms` later.
    pub stream_coalesce: f64,
    pub coalesce_hold_ms: Millis,
    /// Chance (before `faults_until`) that a hostile chunk (see
    /// [`hostile_chunk`]) is spliced into a stream chunk at a random byte.
    pub stream_garbage: f64,
    /// Byte streams (tests/sim/stream.rs), before `faults_until`: chance a
    /// chunk is cut (part of it arrives, then the connection ends).
    pub stream_cut: f64,
    /// Chance a write or a chunk black-holes its connection (nothing more
    /// gets through, nobody is told).
    pub stream_blackhole: f64,
    /// Chance a connect is refused.
    pub open_refused: f64,
    /// Chance the answer to a cancelled request is delivered anyway.
    pub late_after_cancel: f64,
    /// The driver's safety-net timeout fires this long after `timeout_ms`.
    pub driver_timeout_slack: Millis,
    /// A request without `timeout_ms` that gets no answer fails after this long.
    pub dead_connection_ms: Millis,
    /// Loss and long delays apply only before this global time.
    pub faults_until: Millis,
}

impl NetConfig {
    /// No loss, short delays: the liveness baseline.
    pub fn calm() -> Self {
        NetConfig {
            delay: (1, 20),
            long_delay_chance: 0.0,
            long_delay_max: 0,
            request_loss: 0.0,
            response_loss: 0.0,
            reset_chance: 0.0,
            stream_break: 0.0,
            split_chunk: 0.2,
            split_pieces: 2,
            stream_coalesce: 0.0,
            coalesce_hold_ms: 0,
            stream_garbage: 0.0,
            stream_cut: 0.0,
            stream_blackhole: 0.0,
            open_refused: 0.0,
            late_after_cancel: 0.0,
            driver_timeout_slack: 100,
            dead_connection_ms: 30_000,
            faults_until: 0,
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub struct Partition {
    pub client: usize,
    pub endpoint: usize,
    pub from: Millis,
    pub until: Millis,
}

#[derive(Clone, Copy, Debug)]
pub struct Pause {
    pub client: usize,
    pub from: Millis,
    pub until: Millis,
}

#[derive(Clone, Copy, Debug)]
pub struct Outage {
    pub endpoint: usize,
    pub from: Millis,
    pub until: Millis,
}

/// What the scripted users of every client do.
#[derive(Clone, Debug)]
pub struct WorkloadConfig {
    pub names: Vec<String>,
    /// acquire→hold→release cycles per client.
    pub cycles: u32,
    /// Relative weights of Wait::Try, Wait::For(..), Wait::Forever.
    pub weights: (u32, u32, u32),
    pub wait_for: (Millis, Millis),
    /// Chance a waiting acquire gets cancelled after `cancel_after` ms.
    pub cancel_chance: f64,
    pub cancel_after: (Millis, Millis),
    pub hold: (Millis, Millis),
    /// Chance a hold lasts `long_hold` instead (exercises renewal).
    pub long_hold_chance: f64,
    /// Chance the user extends a lock once, halfway through holding it.
    pub extend_chance: f64,
    /// Chance the user re-enters an exclusive lock once through its own
    /// handle (`Operation::Reenter`) a third of the way through holding it,
    /// and gives that inner hold back at once; 0 draws nothing.
    pub reenter_chance: f64,
    pub long_hold: (Millis, Millis),
    pub think: (Millis, Millis),
    /// Passed as `AcquireOptions::ttl_ms` (Redis backends).
    pub ttl_ms: Option<u64>,
    /// A failed release is retried this many times.
    pub release_retries: u32,
    /// Every client is closed at this global time if its script has not ended.
    pub stop_at: Millis,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum What {
    Acquire {
        name: String,
        wait: Wait,
    },
    Release {
        name: String,
        lock: LockId,
    },
    Extend {
        name: String,
        lock: LockId,
    },
    /// A re-entry of the held `lock` through its handle.
    Reenter {
        name: String,
        lock: LockId,
    },
    Close,
    // ---- elections (campaigns are recorded as `Acquire`) ----
    Proclaim {
        name: String,
        lock: LockId,
    },
    Observe {
        name: String,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Pending,
    Acquired {
        lock: LockId,
        token: u64,
    },
    NotAcquired,
    Released {
        held_until_release: bool,
    },
    /// New `expires_at` on the client's clock.
    Extended {
        expires_at: Millis,
    },
    /// The error's `code()` and message.
    Failed {
        code: &'static str,
        message: String,
    },
    Closed,
    // ---- elections ----
    Proclaimed,
    Leader(Option<Leadership>),
}

#[derive(Clone, Debug)]
pub struct OpRecord {
    pub client: usize,
    pub op: OpId,
    pub what: What,
    pub begin: Millis,
    pub end: Option<Millis>,
    pub outcome: Outcome,
    /// Global time the user asked to cancel it, if it did.
    pub cancelled_at: Option<Millis>,
}

#[derive(Clone, Debug)]
pub struct LostRecord {
    pub client: usize,
    pub lock: LockId,
    pub name: String,
    pub at: Millis,
    pub reason: String,
}

#[derive(Clone, Debug)]
pub struct Grant {
    pub client: usize,
    pub lock: LockId,
    pub name: String,
    /// The granted key (a permit's: its slot's).
    pub key: String,
    pub token: u64,
    /// A permit's slot (`None` for a lock).
    pub slot: Option<u32>,
    /// The handle's revision (etcd: the create revision of the queue key).
    pub revision: u64,
    pub at: Millis,
    /// What was granted (a read-write lock's shared or exclusive hold, a permit).
    pub kind: LockKind,
}

/// A lock some client currently holds, as the world sees it (for backend checks).
#[derive(Clone, Debug)]
pub struct Believer {
    pub client: usize,
    pub lock: LockId,
    pub name: String,
    /// What it holds (from its handle).
    pub kind: LockKind,
    pub token: u64,
    /// A permit's slot (`None` for a lock).
    pub slot: Option<u32>,
    pub key: String,
    pub owner: String,
    pub revision: u64,
    /// `expires_at` on the client's clock.
    pub expires_at: Millis,
    pub since: Millis,
}

#[derive(Clone, Debug)]
struct Holding {
    name: String,
    kind: LockKind,
    token: u64,
    slot: Option<u32>,
    key: String,
    owner: String,
    revision: u64,
    expires_at: Millis,
    since: Millis,
    /// The user called release/close: it no longer uses the lock.
    user_done: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Script {
    Idle,
    Acquiring {
        op: OpId,
    },
    Holding {
        lock: LockId,
    },
    Releasing {
        op: OpId,
        lock: LockId,
        attempts: u32,
    },
    /// Cycles done; waiting for the world's close.
    Finished,
    Closing {
        op: OpId,
    },
    Done,
}

#[derive(Clone, Debug)]
enum Action {
    StartCycle,
    Cancel(OpId),
    Extend(LockId),
    Reenter(LockId),
    /// Give a re-entered hold back (again, after a failed release).
    ReleaseInner(LockId),
    Release(LockId),
    Close,
    // ---- elections ----
    Proclaim(LockId),
    Observe(String),
    CloseObservers,
    RedisProclaim(LockId),
    RedisObserve,
}

#[derive(Debug)]
struct Flight {
    wire: u64,
    endpoint: usize,
    stream: bool,
    /// The driver's safety-net timeout covers it (it had `timeout_ms`).
    has_timeout: bool,
    /// A byte stream (`Transmit::Open`), and whether `Opened` reached the client.
    tcp: bool,
    opened: bool,
    /// A byte stream that carried a `SUBSCRIBE` (a subscriber connection).
    subscriber: bool,
}

#[derive(Debug)]
enum Deferred {
    Input(Input),
    DriverTimeout(RequestId),
    User(Action),
}

struct Client {
    machine: Box<dyn LockMachine>,
    clock: Clock,
    paused: bool,
    deferred: VecDeque<Deferred>,
    inflight: HashMap<RequestId, Flight>,
    cancelled: HashSet<RequestId>,
    script: Script,
    cycles_done: u32,
    holdings: BTreeMap<LockId, Holding>,
    /// Op → index in `history`.
    ops: HashMap<OpId, usize>,
}

struct OpenStream {
    client: usize,
    id: RequestId,
    endpoint: usize,
    /// Chunks of one connection arrive in order.
    last_delivery: Millis,
    /// Bytes held back to go out with the next chunk (`stream_coalesce`).
    held: Vec<u8>,
    /// A `StreamFlush` for `held` is queued.
    flush_queued: bool,
    /// A byte stream's server-to-client direction (no hostile chunks; cuts).
    tcp: bool,
}

#[derive(Debug)]
enum Ev {
    Arrive {
        wire: u64,
        endpoint: usize,
        req: HttpRequest,
    },
    Deliver {
        client: usize,
        input: Input,
    },
    DriverTimeout {
        client: usize,
        id: RequestId,
    },
    ServerStreamClosed {
        server: usize,
        wire: u64,
    },
    /// Bytes held back on stream `wire` go out now.
    StreamFlush {
        wire: u64,
    },
    /// A byte stream's connect reaches its endpoint.
    TcpAccept {
        wire: u64,
    },
    /// A write on a byte stream reaches its server.
    TcpData {
        wire: u64,
        data: Vec<u8>,
    },
    User {
        client: usize,
        action: Action,
    },
    PauseStart {
        client: usize,
    },
    PauseEnd {
        client: usize,
    },
    OutageStart {
        endpoint: usize,
    },
    OutageEnd {
        endpoint: usize,
    },
}

struct Queued {
    at: Millis,
    seq: u64,
    ev: Ev,
}

impl PartialEq for Queued {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Queued {}
impl PartialOrd for Queued {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Queued {
    // BinaryHeap is a max-heap: reverse so the earliest (time, seq) pops first.
    fn cmp(&self, o: &Self) -> Ordering {
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}

pub type Check<'a, S> = dyn FnMut(&World<S>) -> Result<(), String> + 'a;

pub struct World<S: SimServer> {
    /// What the workload's acquires ask for, one drawn per acquire
    /// (exclusive unless set).
    acquire_kinds: Vec<LockKind>,
    /// Re-entered (inner) holds: (client, lock). Their releases are
    /// retried until they end, and a client closes only once they have.
    inner_holds: HashSet<(usize, LockId)>,
    pub seed: u64,
    pub now: Millis,
    pub rng: SimRng,
    pub net: NetConfig,
    queue: BinaryHeap<Queued>,
    seq: u64,
    servers: Vec<S>,
    /// Every server's clock stands still while it is crashed.
    crashed: Vec<bool>,
    /// Endpoint (index) → base URL and server.
    routes: Vec<(String, usize)>,
    ep_down: Vec<bool>,
    clients: Vec<Client>,
    next_wire: u64,
    wires: HashMap<u64, (usize, RequestId)>,
    streams: HashMap<u64, OpenStream>,
    /// Byte-stream connections by wire id (tests/sim/stream.rs).
    tcp: HashMap<u64, TcpConn>,
    /// What the byte-stream transport did.
    pub stream_stats: StreamStats,
    /// Requests a server holds open ([`Reply::Held`]): wire → endpoint.
    held: HashMap<u64, usize>,
    partitions: Vec<Partition>,
    pauses: Vec<Pause>,
    outages: Vec<Outage>,
    workload: Option<WorkloadConfig>,
    closing: bool,
    /// Failed release attempts of the lock a client is currently releasing.
    release_attempts: HashMap<usize, u32>,
    /// Every client is closed then, whatever its script is doing.
    stop_at: Option<Millis>,
    /// A run taking more steps than this fails (a client flooding the network).
    pub max_steps: u64,
    pub history: Vec<OpRecord>,
    pub grants: Vec<Grant>,
    pub losts: Vec<LostRecord>,
    /// Contract or safety violations seen so far (the run stops at the first).
    pub violations: Vec<String>,
    /// Human-readable step log, when enabled (replays).
    pub trace: Option<Vec<String>>,
    /// When every client's close completed.
    pub all_closed_at: Option<Millis>,
    /// `history` indices of the ops completed in the current step (for checks).
    pub completed_this_step: Vec<usize>,
    pub steps: u64,
    /// Hostile chunks spliced into streams (`stream_garbage`).
    pub hostile_chunks: u64,
    /// Stream chunks delivered to clients (pieces counted once per chunk).
    pub stream_chunks: u64,
    /// Answers lost after their server handled the request (faults and
    /// partitions).
    pub responses_lost: u64,
    /// An election workload (see `set_election`).
    election: Option<ElectionConfig>,
    pub election_state: ElectionState,
    /// The Redis/Redlock election workload (see `set_redis_election`).
    pub redis_election: Option<ElectionSim>,
}

impl<S: SimServer> World<S> {
    pub fn new(seed: u64, net: NetConfig) -> Self {
        World {
            acquire_kinds: vec![LockKind::Exclusive],
            seed,
            now: 0,
            rng: SimRng::new(seed),
            net,
            queue: BinaryHeap::new(),
            seq: 0,
            servers: Vec::new(),
            crashed: Vec::new(),
            routes: Vec::new(),
            ep_down: Vec::new(),
            clients: Vec::new(),
            next_wire: 0,
            wires: HashMap::new(),
            streams: HashMap::new(),
            tcp: HashMap::new(),
            stream_stats: StreamStats::default(),
            held: HashMap::new(),
            partitions: Vec::new(),
            pauses: Vec::new(),
            outages: Vec::new(),
            workload: None,
            closing: false,
            release_attempts: HashMap::new(),
            stop_at: None,
            max_steps: 100_000,
            history: Vec::new(),
            inner_holds: HashSet::new(),
            grants: Vec::new(),
            losts: Vec::new(),
            violations: Vec::new(),
            trace: None,
            all_closed_at: None,
            completed_this_step: Vec::new(),
            steps: 0,
            hostile_chunks: 0,
            stream_chunks: 0,
            responses_lost: 0,
            election: None,
            election_state: ElectionState::default(),
            redis_election: None,
        }
    }

    pub fn enable_trace(&mut self) {
        self.trace = Some(Vec::new());
    }

    fn log(&mut self, f: impl FnOnce() -> String) {
        if let Some(t) = self.trace.as_mut() {
            let line = f();
            t.push(format!("{:>8} {line}", self.now));
        }
    }

    pub fn add_server(&mut self, bases: &[&str], server: S) -> usize {
        let idx = self.servers.len();
        self.servers.push(server);
        self.crashed.push(false);
        for b in bases {
            self.routes.push((b.trim_end_matches('/').to_string(), idx));
            self.ep_down.push(false);
        }
        idx
    }

    /// The endpoint indices of a server (for partitions and outages).
    pub fn endpoints(&self, server: usize) -> Vec<usize> {
        (0..self.routes.len())
            .filter(|&e| self.routes[e].1 == server)
            .collect()
    }

    pub fn endpoint_count(&self) -> usize {
        self.routes.len()
    }

    pub fn server(&self, idx: usize) -> &S {
        &self.servers[idx]
    }

    pub fn server_mut(&mut self, idx: usize) -> &mut S {
        &mut self.servers[idx]
    }

    pub fn add_client(&mut self, machine: Box<dyn LockMachine>, clock: Clock) -> usize {
        self.clients.push(Client {
            machine,
            clock,
            paused: false,
            deferred: VecDeque::new(),
            inflight: HashMap::new(),
            cancelled: HashSet::new(),
            script: Script::Idle,
            cycles_done: 0,
            holdings: BTreeMap::new(),
            ops: HashMap::new(),
        });
        self.clients.len() - 1
    }

    pub fn client_count(&self) -> usize {
        self.clients.len()
    }

    pub fn client_clock(&self, c: usize) -> Clock {
        self.clients[c].clock
    }

    pub fn machine(&self, c: usize) -> &dyn LockMachine {
        self.clients[c].machine.as_ref()
    }

    pub fn add_partition(&mut self, p: Partition) {
        self.partitions.push(p);
    }

    pub fn add_pause(&mut self, p: Pause) {
        self.push(p.from, Ev::PauseStart { client: p.client });
        self.push(p.until, Ev::PauseEnd { client: p.client });
        self.pauses.push(p);
    }

    pub fn add_outage(&mut self, o: Outage) {
        self.push(
            o.from,
            Ev::OutageStart {
                endpoint: o.endpoint,
            },
        );
        self.push(
            o.until,
            Ev::OutageEnd {
                endpoint: o.endpoint,
            },
        );
        self.outages.push(o);
    }

    /// Streams the network carries right now (answered by a server, not yet
    /// ended, broken or cancelled).
    pub fn open_stream_count(&self) -> usize {
        self.streams.len()
    }

    /// Streaming requests client `c` sent and has neither seen end nor cancelled.
    pub fn stream_flights(&self, c: usize) -> usize {
        self.clients[c]
            .inflight
            .values()
            .filter(|f| f.stream && !f.tcp)
            .count()
    }

    /// Byte streams client `c` opened and has neither seen end nor closed.
    pub fn tcp_flights(&self, c: usize) -> usize {
        self.clients[c].inflight.values().filter(|f| f.tcp).count()
    }

    /// Of those, the ones that carried a `SUBSCRIBE` (subscriber connections).
    pub fn subscriber_flights(&self, c: usize) -> usize {
        self.clients[c]
            .inflight
            .values()
            .filter(|f| f.tcp && f.subscriber)
            .count()
    }

    /// Whether client `c` has an acquire that waits (not `Try`) and has not
    /// completed (or, in the election workload, an observe: it listens too).
    pub fn waiting_acquire(&self, c: usize) -> bool {
        self.clients[c].ops.values().any(|&i| {
            let r = &self.history[i];
            r.outcome == Outcome::Pending
                && (matches!(r.what, What::Acquire { wait, .. } if wait != Wait::Try)
                    || matches!(r.what, What::Observe { .. }))
        })
    }

    pub fn partitions(&self) -> &[Partition] {
        &self.partitions
    }
    pub fn pauses(&self) -> &[Pause] {
        &self.pauses
    }
    pub fn outages(&self) -> &[Outage] {
        &self.outages
    }

    /// Start every client's script at a small random offset.
    /// Makes the workload's acquires ask for one of `kinds`, drawn per
    /// acquire (a semaphore's permits: the checks then admit up to `limit`
    /// holders of a name, all of one limit, one per slot; with several
    /// kinds, an acquire refused with `INVALID_ARGUMENT` is expected).
    pub fn set_acquire_kinds(&mut self, kinds: Vec<LockKind>) {
        if !kinds.is_empty() {
            self.acquire_kinds = kinds;
        }
    }

    pub fn start_workload(&mut self, cfg: WorkloadConfig) {
        let stop_at = cfg.stop_at;
        self.workload = Some(cfg);
        self.closing = false;
        for c in 0..self.clients.len() {
            if self.is_observer(c) {
                self.start_observer(c);
                continue;
            }
            let at = self.now + self.rng.range(0, 50);
            self.push(
                at,
                Ev::User {
                    client: c,
                    action: Action::StartCycle,
                },
            );
        }
        self.stop_at = Some(stop_at);
    }

    /// True once every client's close has completed.
    pub fn all_done(&self) -> bool {
        self.clients.iter().all(|c| c.script == Script::Done)
    }

    fn push(&mut self, at: Millis, ev: Ev) {
        self.seq += 1;
        self.queue.push(Queued {
            at,
            seq: self.seq,
            ev,
        });
    }

    fn faulty(&self) -> bool {
        self.now < self.net.faults_until
    }

    fn delay(&mut self) -> Millis {
        let (lo, hi) = self.net.delay;
        if self.faulty() && self.rng.chance(self.net.long_delay_chance) {
            self.rng.range(hi, self.net.long_delay_max.max(hi))
        } else {
            self.rng.range(lo, hi)
        }
    }

    fn partitioned(&self, client: usize, endpoint: usize, at: Millis) -> Option<Millis> {
        self.partitions
            .iter()
            .filter(|p| {
                p.client == client && p.endpoint == endpoint && p.from <= at && at < p.until
            })
            .map(|p| p.until)
            .max()
    }

    fn route(&self, url: &str) -> Option<usize> {
        (0..self.routes.len())
            .filter(|&e| {
                let base = self.routes[e].0.as_str();
                url.starts_with(base) && url[base.len()..].starts_with('/')
            })
            .max_by_key(|&e| self.routes[e].0.len())
    }

    // ---------------------------------------------------------------- beliefs

    /// Every lock some client believes it holds at global time `now`.
    pub fn believers(&self) -> Vec<Believer> {
        let mut out = Vec::new();
        for (ci, c) in self.clients.iter().enumerate() {
            let local = c.clock.local(self.now);
            for (lock, h) in &c.holdings {
                if !h.user_done && local <= h.expires_at {
                    out.push(Believer {
                        client: ci,
                        lock: *lock,
                        name: h.name.clone(),
                        kind: h.kind,
                        token: h.token,
                        slot: h.slot,
                        key: h.key.clone(),
                        owner: h.owner.clone(),
                        revision: h.revision,
                        expires_at: h.expires_at,
                        since: h.since,
                    });
                }
            }
        }
        out
    }

    /// Every lock client `c` holds as the world sees it (granted, neither
    /// released nor lost yet): (lock, name, token, `expires_at` on its
    /// clock, whether its user already gave it up).
    pub fn held_locks(&self, c: usize) -> Vec<(LockId, String, u64, Millis, bool)> {
        self.clients[c]
            .holdings
            .iter()
            .map(|(l, h)| (*l, h.name.clone(), h.token, h.expires_at, h.user_done))
            .collect()
    }

    /// Whether client `c` is paused now (it processes nothing).
    pub fn is_paused(&self, c: usize) -> bool {
        self.clients[c].paused
    }

    /// Whether client `c` has an interest in `name`: a pending acquire of it, a
    /// lock on it the machine has not yet reported released or lost, or a
    /// pending close (which cleans up everything).
    pub fn interested(&self, c: usize, name: &str) -> bool {
        let cl = &self.clients[c];
        if cl.holdings.values().any(|h| h.name == name)
            || matches!(cl.script, Script::Closing { .. })
        {
            return true;
        }
        cl.ops.values().any(|&i| {
            let r = &self.history[i];
            r.outcome == Outcome::Pending
                && matches!(&r.what, What::Acquire { name: n, .. } if n == name)
        })
    }

    fn check_generic(&mut self) {
        let believers = self.believers();
        // One semaphore limit for every acquire: per name at most `limit`
        // believers (also several on one client), never two on one slot.
        if let [LockKind::Permits { limit }] = self.acquire_kinds.as_slice() {
            let limit = *limit;
            return self.check_permits(&believers, limit);
        }
        for (i, a) in believers.iter().enumerate() {
            let limit = match a.kind {
                LockKind::Permits { limit } => limit as usize,
                // Readers share with readers; a writer (limit 1) with nobody.
                LockKind::Shared => usize::MAX,
                _ => 1,
            };
            // A reader and a writer clash even on one client (its writer
            // queues behind its own reader, and the other way round).
            let rw = a.kind == LockKind::Shared
                || believers
                    .iter()
                    .any(|b| b.name == a.name && b.kind == LockKind::Shared);
            // Readers share a name (and, on Redis, their readers' set key).
            let both_shared =
                |b: &Believer| a.kind == LockKind::Shared && b.kind == LockKind::Shared;
            let mut others = HashSet::new();
            for b in &believers {
                if a.name == b.name && a.client != b.client {
                    others.insert(b.client);
                }
            }
            let clash = believers[i + 1..].iter().find(|b| {
                b.name == a.name
                    && (b.client != a.client || rw)
                    && !both_shared(b)
                    // One slot: one key (etcd, Redis), or one name and
                    // slot (the Durable Object, whose keys are the name).
                    && (limit == 1 || (b.key == a.key && b.slot == a.slot) || b.kind != a.kind)
            });
            if let Some(b) = clash {
                let v = format!(
                    "two clients believe they hold {:?} (key {:?}, {:?} and {:?}) at t={}: client {} (token {}, since {}, expires_at {} local) and client {} (token {}, since {}, expires_at {} local)",
                    a.name, a.key, a.kind, b.kind, self.now, a.client, a.token, a.since, a.expires_at, b.client, b.token, b.since, b.expires_at
                );
                self.violations.push(v);
            } else if others.len() + 1 > limit {
                self.violations.push(format!(
                    "{} clients believe they hold a permit of {:?} (limit {limit}) at t={}: {:?}",
                    others.len() + 1,
                    a.name,
                    self.now,
                    believers
                        .iter()
                        .filter(|b| b.name == a.name)
                        .map(|b| (b.client, b.key.clone(), b.token))
                        .collect::<Vec<_>>()
                ));
            }
        }
    }

    /// A semaphore: at most `limit` believers per name, and never two
    /// believers of one slot (whichever clients they are).
    fn check_permits(&mut self, believers: &[Believer], limit: u32) {
        for (i, a) in believers.iter().enumerate() {
            let count = believers.iter().filter(|b| b.name == a.name).count();
            if count > limit as usize {
                let who: Vec<String> = believers
                    .iter()
                    .filter(|b| b.name == a.name)
                    .map(|b| format!("client {} slot {:?} token {}", b.client, b.slot, b.token))
                    .collect();
                self.violations.push(format!(
                    "{count} believe they hold a permit of {:?} (limit {limit}) at t={}: {}",
                    a.name,
                    self.now,
                    who.join(", ")
                ));
                return;
            }
            for b in &believers[i + 1..] {
                if a.name == b.name && a.slot == b.slot {
                    self.violations.push(format!(
                        "two holders believe they hold slot {:?} of {:?} at t={}: client {} (token {}, since {}) and client {} (token {}, since {})",
                        a.slot, a.name, self.now, a.client, a.token, a.since, b.client, b.token, b.since
                    ));
                }
            }
        }
    }

    // ---------------------------------------------------------------- driver

    fn drain(&mut self, c: usize) {
        loop {
            let t = self.clients[c].machine.poll_transmit();
            match t {
                Some(Transmit::Send(req)) => self.send(c, req),
                Some(Transmit::Open(open)) => self.tcp_open(c, open),
                Some(Transmit::Write { id, data }) => self.tcp_write(c, id, data.0),
                Some(Transmit::Cancel(id)) => self.cancel(c, id),
                None => break,
            }
        }
        loop {
            let e = self.clients[c].machine.poll_event();
            match e {
                Some(e) => self.on_event(c, e),
                None => break,
            }
        }
    }

    fn local_now(&self, c: usize) -> Millis {
        self.clients[c].clock.local(self.now)
    }

    fn send(&mut self, c: usize, mut req: HttpRequest) {
        let id = req.id;
        // A binding target routes as `binding:{name}{path}` (its `Display`):
        // add a server with base `binding:{name}` to answer it.
        let target = match &req.target {
            Target::Url(u) => u.clone(),
            t => t.to_string(),
        };
        let Some(endpoint) = self.route(&target) else {
            self.violations.push(format!(
                "client {c} sent to an unknown target {:?}",
                req.target
            ));
            return;
        };
        if self.clients[c].inflight.contains_key(&id) {
            self.violations
                .push(format!("client {c} reused request id {id:?}"));
        }
        self.next_wire += 1;
        let wire = self.next_wire;
        self.wires.insert(wire, (c, id));
        let has_timeout = req.timeout_ms.is_some() && !req.stream;
        self.clients[c].inflight.insert(
            id,
            Flight {
                wire,
                endpoint,
                stream: req.stream,
                has_timeout,
                tcp: false,
                opened: false,
                subscriber: false,
            },
        );
        let now = self.now;
        self.log(|| {
            let body = String::from_utf8_lossy(&req.body);
            format!("c{c} -> #{} {} {}", id.0, req.target, body)
        });
        // The driver's safety net, measured on the client's clock.
        if let Some(to) = req.timeout_ms {
            if !req.stream {
                let local = self.local_now(c) + to + self.net.driver_timeout_slack;
                let at = self.clients[c].clock.to_global(local);
                self.push(at, Ev::DriverTimeout { client: c, id });
            }
        }
        let lost = self.partitioned(c, endpoint, now).is_some()
            || (self.faulty() && self.rng.chance(self.net.request_loss));
        if lost {
            self.log(|| format!("   request c{c}#{} lost", id.0));
            self.silence(c, id, req.timeout_ms.is_some() || req.stream);
            return;
        }
        req.headers.push((CLIENT_HEADER.to_string(), c.to_string()));
        req.id = RequestId(wire);
        let d = self.delay();
        self.push(
            now + d,
            Ev::Arrive {
                wire,
                endpoint,
                req,
            },
        );
    }

    /// No answer will come: without a driver timeout the dead connection
    /// eventually errors out.
    fn silence(&mut self, c: usize, id: RequestId, covered: bool) {
        if !covered {
            let at = self.now + self.net.dead_connection_ms;
            self.push(
                at,
                Ev::Deliver {
                    client: c,
                    input: Input::Failed {
                        id,
                        error: TransportError::Io("connection timed out".into()),
                    },
                },
            );
        }
    }

    fn cancel(&mut self, c: usize, id: RequestId) {
        self.log(|| format!("c{c} cancels #{}", id.0));
        if let Some(f) = self.clients[c].inflight.remove(&id) {
            self.clients[c].cancelled.insert(id);
            if f.tcp {
                self.streams.remove(&f.wire);
                self.tcp_close(f.wire);
            } else if f.stream {
                if let Some(s) = self.streams.remove(&f.wire) {
                    let d = self.delay();
                    let server = self.routes[s.endpoint].1;
                    self.push(
                        self.now + d,
                        Ev::ServerStreamClosed {
                            server,
                            wire: f.wire,
                        },
                    );
                }
            }
        }
    }

    fn deliver(&mut self, c: usize, input: Input) {
        let id = input.id();
        let final_input = input.is_final();
        let cl = &mut self.clients[c];
        if cl.inflight.contains_key(&id) {
            if let (Input::Opened { .. }, Some(f)) = (&input, cl.inflight.get_mut(&id)) {
                f.opened = true;
            }
            if final_input {
                if let Some(f) = cl.inflight.remove(&id) {
                    self.wires.remove(&f.wire);
                    if f.tcp {
                        // The driver gave the stream up (its connect
                        // timeout): the network drops it too.
                        self.streams.remove(&f.wire);
                        self.tcp_close(f.wire);
                    }
                }
            }
        } else if cl.cancelled.contains(&id) {
            if final_input {
                cl.cancelled.remove(&id);
            }
            if !(self.faulty() && self.rng.chance(self.net.late_after_cancel)) {
                return;
            }
            self.log(|| format!("   late delivery to cancelled c{c}#{}", id.0));
        } else {
            return; // already answered (e.g. by the driver's timeout)
        }
        self.log(|| match &input {
            Input::Response { status, body, .. } => {
                format!(
                    "c{c} <- #{} {status} {}",
                    id.0,
                    String::from_utf8_lossy(body)
                )
            }
            // RESP (byte streams) has line breaks in every frame.
            Input::Chunk { data, .. } if data.contains(&b'\r') => {
                format!("c{c} <- #{} chunk {}", id.0, data.escape_ascii())
            }
            Input::Chunk { data, .. } => {
                format!("c{c} <- #{} chunk {}", id.0, String::from_utf8_lossy(data))
            }
            Input::Opened { .. } => format!("c{c} <- #{} opened", id.0),
            Input::StreamEnd { .. } => format!("c{c} <- #{} end", id.0),
            Input::Failed { error, .. } => format!("c{c} <- #{} failed: {error}", id.0),
        });
        let local = self.local_now(c);
        self.clients[c].machine.handle_input(local, input);
        self.drain(c);
    }

    fn driver_timeout(&mut self, c: usize, id: RequestId) {
        // A byte stream's covers its connect only.
        let open = |f: &Flight| !f.tcp || !f.opened;
        if self.clients[c].inflight.get(&id).is_some_and(open) {
            self.deliver(
                c,
                Input::Failed {
                    id,
                    error: TransportError::Timeout,
                },
            );
        }
    }

    fn arrive(&mut self, wire: u64, endpoint: usize, req: HttpRequest) {
        let server = self.routes[endpoint].1;
        let Some(&(c, id)) = self.wires.get(&wire) else {
            // Answered already (driver timeout) and forgotten; the request still
            // reaches the server and is applied.
            return self.arrive_orphan(endpoint, req);
        };
        if self.ep_down[endpoint] {
            if self.partitioned(c, endpoint, self.now).is_none() {
                let d = self.delay();
                let error = TransportError::Connect("connection refused".into());
                self.push(
                    self.now + d,
                    Ev::Deliver {
                        client: c,
                        input: Input::Failed { id, error },
                    },
                );
            }
            return;
        }
        self.servers[server].advance(self.now);
        let reply = self.servers[server].handle(self.now, &req);
        let stream_cancelled = !self.clients[c].inflight.contains_key(&id);
        match reply {
            Reply::Full { status, body } => {
                self.respond(c, endpoint, id, Input::Response { id, status, body })
            }
            Reply::Stream { status } if (200..300).contains(&status) => {
                if stream_cancelled {
                    self.servers[server].stream_closed(RequestId(wire));
                } else {
                    let s = OpenStream {
                        client: c,
                        id,
                        endpoint,
                        last_delivery: self.now,
                        held: Vec::new(),
                        flush_queued: false,
                        tcp: false,
                    };
                    self.streams.insert(wire, s);
                }
            }
            Reply::Stream { status } => self.respond(
                c,
                endpoint,
                id,
                Input::Response {
                    id,
                    status,
                    body: Vec::new(),
                },
            ),
            Reply::NoReply => {
                let covered = req.timeout_ms.is_some() || req.stream;
                if !stream_cancelled {
                    self.silence(c, id, covered);
                }
            }
            Reply::Held => {
                self.held.insert(wire, endpoint);
            }
        }
        self.pump_streams(server);
    }

    /// A held request's answer leaves its server now (dropped if the
    /// client's driver already ended the request).
    fn late_reply(&mut self, wire: u64, reply: LateReply) {
        let Some(endpoint) = self.held.remove(&wire) else {
            return;
        };
        let Some(&(c, id)) = self.wires.get(&wire) else {
            return;
        };
        match reply {
            Ok((status, body)) => {
                self.respond(c, endpoint, id, Input::Response { id, status, body })
            }
            Err(error) => {
                if self.partitioned(c, endpoint, self.now).is_none() {
                    let d = self.delay();
                    self.push(
                        self.now + d,
                        Ev::Deliver {
                            client: c,
                            input: Input::Failed { id, error },
                        },
                    );
                }
            }
        }
    }

    fn arrive_orphan(&mut self, endpoint: usize, req: HttpRequest) {
        let server = self.routes[endpoint].1;
        if self.ep_down[endpoint] {
            return;
        }
        self.servers[server].advance(self.now);
        if let Reply::Stream { .. } = self.servers[server].handle(self.now, &req) {
            self.servers[server].stream_closed(req.id);
        }
        self.pump_streams(server);
    }

    fn respond(&mut self, c: usize, endpoint: usize, id: RequestId, input: Input) {
        let lost = self.partitioned(c, endpoint, self.now).is_some()
            || (self.faulty() && self.rng.chance(self.net.response_loss));
        if lost {
            self.responses_lost += 1;
            self.log(|| format!("   response to c{c}#{} lost", id.0));
            if self.faulty() && self.rng.chance(self.net.reset_chance) {
                let d = self.delay();
                let error = TransportError::Io("connection reset".into());
                self.push(
                    self.now + d,
                    Ev::Deliver {
                        client: c,
                        input: Input::Failed { id, error },
                    },
                );
            } else if let Some(f) = self.clients[c].inflight.get(&id) {
                // Silence: the driver timeout (scheduled at send) covers requests
                // with a timeout; others die with the connection.
                let covered = f.has_timeout;
                self.silence(c, id, covered);
            }
            return;
        }
        let d = self.delay();
        self.push(self.now + d, Ev::Deliver { client: c, input });
    }

    fn pump_streams(&mut self, server: usize) {
        for (wire, reply) in self.servers[server].drain_late_replies(self.now) {
            self.late_reply(wire.0, reply);
        }
        let chunks = self.servers[server].drain_stream_chunks(self.now);
        for (wire_id, data) in chunks {
            self.stream_chunk(wire_id.0, data);
        }
    }

    fn stream_chunk(&mut self, wire: u64, data: Vec<u8>) {
        if !self.streams.contains_key(&wire)
            || self.tcp_fault_black_hole(wire)
            || self.stream_breaks(wire)
        {
            return;
        }
        if self.rng.chance(self.net.stream_coalesce) {
            let hold = self.rng.range(1, self.net.coalesce_hold_ms.max(1));
            let now = self.now;
            let Some(s) = self.streams.get_mut(&wire) else {
                return;
            };
            s.held.extend_from_slice(&data);
            if !s.flush_queued {
                s.flush_queued = true;
                self.push(now + hold, Ev::StreamFlush { wire });
            }
            return;
        }
        let held = self
            .streams
            .get_mut(&wire)
            .map(|s| std::mem::take(&mut s.held))
            .unwrap_or_default();
        let data = if held.is_empty() {
            data
        } else {
            [held, data].concat()
        };
        self.stream_send(wire, data);
    }

    /// The bytes held back on stream `wire` go out (if it still exists).
    fn stream_flush(&mut self, wire: u64) {
        let Some(s) = self.streams.get_mut(&wire) else {
            return;
        };
        s.flush_queued = false;
        if s.held.is_empty() || self.stream_breaks(wire) {
            return;
        }
        let held = self
            .streams
            .get_mut(&wire)
            .map(|s| std::mem::take(&mut s.held))
            .unwrap_or_default();
        self.stream_send(wire, held);
    }

    /// A partition or a seeded break ends stream `wire` now (the server is
    /// told at once, the client once packets flow again): true if it broke.
    fn stream_breaks(&mut self, wire: u64) -> bool {
        let Some(s) = self.streams.get(&wire) else {
            return true;
        };
        let (c, id, endpoint) = (s.client, s.id, s.endpoint);
        let partition_end = self.partitioned(c, endpoint, self.now);
        if partition_end.is_none() && !(self.faulty() && self.rng.chance(self.net.stream_break)) {
            return false;
        }
        let server = self.routes[endpoint].1;
        self.log(|| format!("   stream c{c}#{} breaks", id.0));
        self.streams.remove(&wire);
        if self.tcp.remove(&wire).is_some() {
            self.stream_stats.breaks += 1;
        }
        self.servers[server].stream_closed(RequestId(wire));
        let d = self.delay();
        let at = partition_end.unwrap_or(self.now) + d;
        let error = TransportError::Io("stream connection broken".into());
        self.push(
            at,
            Ev::Deliver {
                client: c,
                input: Input::Failed { id, error },
            },
        );
        true
    }

    /// Delivers `data` on stream `wire`: after the stream's earlier chunks,
    /// sometimes with a hostile chunk spliced in, sometimes in pieces.
    fn stream_send(&mut self, wire: u64, mut data: Vec<u8>) {
        let Some(s) = self.streams.get(&wire) else {
            return;
        };
        let (c, id, last_delivery, tcp) = (s.client, s.id, s.last_delivery, s.tcp);
        let cut = self.tcp_cut_at(wire, data.len());
        if let Some(n) = cut {
            data.truncate(n);
        }
        if !tcp && self.faulty() && self.rng.chance(self.net.stream_garbage) {
            let junk = hostile_chunk(&mut self.rng);
            self.hostile_chunks += 1;
            let at = self.rng.below(data.len() as u64 + 1) as usize;
            self.log(|| {
                format!(
                    "   hostile chunk of {} bytes into c{c}#{} at byte {at}",
                    junk.len(),
                    id.0
                )
            });
            data.splice(at..at, junk);
        }
        let d = self.delay();
        let at = (self.now + d).max(last_delivery);
        if let Some(s) = self.streams.get_mut(&wire) {
            s.last_delivery = at;
        }
        self.stream_chunks += 1;
        let mut pieces = Vec::new();
        if data.len() > 1 && self.rng.chance(self.net.split_chunk) {
            if self.net.split_pieces <= 2 {
                let cut = 1 + self.rng.below(data.len() as u64 - 1) as usize;
                let (a, b) = data.split_at(cut);
                pieces.push(a.to_vec());
                pieces.push(b.to_vec());
            } else {
                let n = self
                    .rng
                    .range(2, (self.net.split_pieces as u64).min(data.len() as u64))
                    as usize;
                let mut cuts: Vec<usize> = (1..n)
                    .map(|_| 1 + self.rng.below(data.len() as u64 - 1) as usize)
                    .collect();
                cuts.sort_unstable();
                cuts.dedup();
                let mut start = 0;
                for cut in cuts.into_iter().chain(std::iter::once(data.len())) {
                    pieces.push(data[start..cut].to_vec());
                    start = cut;
                }
            }
        } else {
            pieces.push(data);
        }
        for data in pieces {
            self.push(
                at,
                Ev::Deliver {
                    client: c,
                    input: Input::Chunk { id, data },
                },
            );
        }
        if cut.is_some() {
            self.tcp_end_cut(wire, at);
        }
    }

    fn outage_start(&mut self, endpoint: usize) {
        let server = self.routes[endpoint].1;
        self.log(|| format!("endpoint {endpoint} goes down"));
        self.ep_down[endpoint] = true;
        if self.endpoints(server).iter().all(|&e| self.ep_down[e]) {
            self.crashed[server] = true;
        }
        let mut wires: Vec<u64> = self
            .streams
            .iter()
            .filter(|(_, s)| s.endpoint == endpoint)
            .map(|(w, _)| *w)
            .collect();
        // In a seeded order: each reset draws its delay (a map's order
        // changes from one process to the next, and with it the replay).
        wires.sort_unstable();
        for wire in wires {
            if let Some(s) = self.streams.remove(&wire) {
                self.servers[server].stream_closed(RequestId(wire));
                let d = self.delay();
                let error = TransportError::Io("connection reset by crashing server".into());
                self.push(
                    self.now + d,
                    Ev::Deliver {
                        client: s.client,
                        input: Input::Failed { id: s.id, error },
                    },
                );
            }
        }
        self.tcp_outage(endpoint);
    }

    fn outage_end(&mut self, endpoint: usize) {
        if self
            .outages
            .iter()
            .any(|o| o.endpoint == endpoint && o.from < self.now && self.now < o.until)
        {
            return; // overlapping outages: the longest wins
        }
        let server = self.routes[endpoint].1;
        self.log(|| format!("endpoint {endpoint} is back"));
        self.ep_down[endpoint] = false;
        if self.crashed[server] {
            self.crashed[server] = false;
            self.servers[server].crash_restart(self.now);
            self.pump_streams(server);
        }
    }

    // ---------------------------------------------------------------- events

    fn complete(&mut self, c: usize, op: OpId, outcome: Outcome) -> Option<usize> {
        let Some(&idx) = self.clients[c].ops.get(&op) else {
            self.violations.push(format!(
                "client {c}: completion {outcome:?} for unknown op {op:?}"
            ));
            return None;
        };
        if self.history[idx].outcome != Outcome::Pending {
            self.violations.push(format!(
                "client {c}: op {op:?} completed twice ({:?}, then {outcome:?})",
                self.history[idx].outcome
            ));
            return None;
        }
        self.history[idx].outcome = outcome;
        self.history[idx].end = Some(self.now);
        self.completed_this_step.push(idx);
        Some(idx)
    }

    fn on_event(&mut self, c: usize, e: Event) {
        self.log(|| format!("c{c} event {e:?}"));
        let e = Seen::from(e);
        match e {
            Seen::Acquired { op, lock } => {
                let token = lock.fencing_token;
                let reentered =
                    self.clients[c]
                        .ops
                        .get(&op)
                        .and_then(|&i| match &self.history[i].what {
                            What::Reenter { lock, .. } => Some(*lock),
                            _ => None,
                        });
                if let Some(outer) = reentered {
                    return self.on_reentered(c, op, outer, lock);
                }
                if self
                    .complete(
                        c,
                        op,
                        Outcome::Acquired {
                            lock: lock.id,
                            token,
                        },
                    )
                    .is_none()
                {
                    return;
                }
                // A semaphore's tokens increase per slot: concurrent holders'
                // grants reach their clients in any order (so do readers').
                let slot = lock.slot();
                // A read-write lock's readers share, so their grants reach
                // their clients in any order: a writer's token is above every
                // earlier grant's, a reader's above every earlier writer's.
                let kind = lock.handle.kind;
                let last = match kind {
                    LockKind::Exclusive | LockKind::Shared | LockKind::Leader => self
                        .grants
                        .iter()
                        .filter(|g| {
                            g.name == lock.name
                                && g.slot == slot
                                && (kind == LockKind::Exclusive || g.kind != LockKind::Shared)
                        })
                        .max_by_key(|g| g.token),
                    _ => self
                        .grants
                        .iter()
                        .rev()
                        .find(|g| g.name == lock.name && g.slot == slot),
                };
                if let Some(last) = last {
                    if token <= last.token {
                        self.violations.push(format!(
                            "fencing token of {:?} (key {:?}) did not increase: client {c} got {token} at t={} after client {} got {} at t={}",
                            lock.name, lock.handle.key, self.now, last.client, last.token, last.at
                        ));
                    }
                }
                let key = lock.handle.key.clone();
                self.grants.push(Grant {
                    client: c,
                    lock: lock.id,
                    name: lock.name.clone(),
                    key,
                    token,
                    slot,
                    revision: lock.handle.revision,
                    at: self.now,
                    kind,
                });
                self.clients[c].holdings.insert(
                    lock.id,
                    Holding {
                        name: lock.name.clone(),
                        kind: lock.handle.kind,
                        token,
                        slot,
                        key: lock.handle.key.clone(),
                        owner: lock.handle.owner.clone(),
                        revision: lock.handle.revision,
                        expires_at: lock.expires_at,
                        since: self.now,
                        user_done: false,
                    },
                );
                if self.clients[c].script == (Script::Acquiring { op }) {
                    self.clients[c].script = Script::Holding { lock: lock.id };
                    let hold = self.hold_time();
                    self.push(
                        self.now + hold,
                        Ev::User {
                            client: c,
                            action: Action::Release(lock.id),
                        },
                    );
                    self.maybe_proclaim(c, lock.id, hold);
                    self.election_on_grant(c, lock.id, hold);
                    let reenter_chance = self.workload.as_ref().map_or(0.0, |w| w.reenter_chance);
                    if reenter_chance > 0.0 && self.rng.chance(reenter_chance) {
                        self.push(
                            self.now + hold / 3,
                            Ev::User {
                                client: c,
                                action: Action::Reenter(lock.id),
                            },
                        );
                    }
                    let extend_chance = self.workload.as_ref().map_or(0.0, |w| w.extend_chance);
                    if self.rng.chance(extend_chance) {
                        self.push(
                            self.now + hold / 2,
                            Ev::User {
                                client: c,
                                action: Action::Extend(lock.id),
                            },
                        );
                    }
                } else {
                    // Acquired after the user gave up on it (e.g. closing): let go.
                    self.user_release(c, lock.id);
                }
            }
            Seen::NotAcquired { op } => {
                self.complete(c, op, Outcome::NotAcquired);
                self.op_finished(c, op);
            }
            Seen::Released {
                op,
                lock,
                held_until_release,
            } => {
                self.complete(c, op, Outcome::Released { held_until_release });
                self.clients[c].holdings.remove(&lock);
                self.op_finished(c, op);
            }
            Seen::Extended {
                lock, expires_at, ..
            }
            | Seen::Renewed { lock, expires_at } => {
                match self.clients[c].holdings.get_mut(&lock) {
                    Some(h) => h.expires_at = expires_at,
                    None => self.violations.push(format!(
                        "client {c}: renewal of lock {lock:?} it does not hold"
                    )),
                }
                if let Seen::Extended { op, .. } = e {
                    self.complete(c, op, Outcome::Extended { expires_at });
                }
            }
            Seen::Inspected { .. } => {}
            other @ (Seen::Proclaimed { .. } | Seen::Leader { .. })
                if self.redis_election.is_some() =>
            {
                self.election_event(c, other)
            }
            Seen::Proclaimed { op } => {
                self.complete(c, op, Outcome::Proclaimed);
            }
            Seen::Leader { op, leader } => self.on_leader_report(c, op, leader),
            other @ Seen::AcquiredAll { .. } => {
                self.violations.push(format!(
                    "client {c}: an outcome this world does not drive: {other:?}"
                ));
            }
            Seen::Closed { op } => {
                self.complete(c, op, Outcome::Closed);
                if !self.clients[c].holdings.is_empty() {
                    self.violations.push(format!(
                        "client {c}: Closed while locks are neither released nor lost"
                    ));
                }
                self.clients[c].holdings.clear();
                self.clients[c].script = Script::Done;
                self.maybe_close_observers();
                if self.all_done() && self.all_closed_at.is_none() {
                    self.all_closed_at = Some(self.now);
                }
            }
            Seen::Failed { op, error } => {
                let outcome = Outcome::Failed {
                    code: error.code(),
                    message: error.to_string(),
                };
                let retryable = error.is_retryable();
                self.complete(c, op, outcome);
                if self.observe_failed(c, op) {
                    return;
                }
                self.op_failed(c, op, retryable);
                self.election_op_failed(c, op);
            }
            Seen::Lost { lock, name, reason } => {
                if self.clients[c].holdings.remove(&lock).is_none() {
                    self.violations.push(format!(
                        "client {c}: Lost for lock {lock:?} ({name}) it does not hold"
                    ));
                }
                self.losts.push(LostRecord {
                    client: c,
                    lock,
                    name,
                    at: self.now,
                    reason: reason.to_string(),
                });
                if self.clients[c].script == (Script::Holding { lock }) {
                    self.clients[c].script = Script::Idle;
                    self.next_cycle(c);
                }
            }
        }
    }

    fn hold_time(&mut self) -> Millis {
        let Some(w) = self.workload.as_ref() else {
            return 0;
        };
        let (hold, long, p) = (w.hold, w.long_hold, w.long_hold_chance);
        if self.rng.chance(p) {
            self.rng.range(long.0, long.1)
        } else {
            self.rng.range(hold.0, hold.1)
        }
    }

    fn op_finished(&mut self, c: usize, op: OpId) {
        match self.clients[c].script {
            Script::Acquiring { op: o } | Script::Releasing { op: o, .. } if o == op => {
                self.clients[c].script = Script::Idle;
                self.next_cycle(c);
            }
            _ => {}
        }
    }

    fn op_failed(&mut self, c: usize, op: OpId, retryable: bool) {
        // A re-entered hold's failed release: try again while it is held.
        let inner = self.clients[c]
            .ops
            .get(&op)
            .and_then(|&i| match self.history[i].what {
                What::Release { lock, .. } if self.inner_holds.contains(&(c, lock)) => Some(lock),
                _ => None,
            });
        if let Some(lock) = inner {
            if self.clients[c].holdings.contains_key(&lock) {
                let d = self.rng.range(50, 500);
                self.push(
                    self.now + d,
                    Ev::User {
                        client: c,
                        action: Action::ReleaseInner(lock),
                    },
                );
            }
            return self.op_finished(c, op);
        }
        let retries = self.workload.as_ref().map_or(0, |w| w.release_retries);
        match self.clients[c].script {
            Script::Releasing {
                op: o,
                lock,
                attempts,
            } if o == op => {
                let still_held = self.clients[c].holdings.contains_key(&lock);
                if retryable && still_held && attempts < retries {
                    let d = self.rng.range(50, 500);
                    self.clients[c].script = Script::Holding { lock };
                    self.push(
                        self.now + d,
                        Ev::User {
                            client: c,
                            action: Action::Release(lock),
                        },
                    );
                    self.release_attempts.insert(c, attempts + 1);
                } else {
                    self.clients[c].script = Script::Idle;
                    self.next_cycle(c);
                }
            }
            Script::Closing { op: o } if o == op => {
                self.violations.push(format!("client {c}: close failed"));
                self.clients[c].script = Script::Done;
            }
            _ => self.op_finished(c, op),
        }
    }

    fn next_cycle(&mut self, c: usize) {
        let Some(w) = self.workload.as_ref() else {
            return;
        };
        if self.closing {
            return;
        }
        let (cycles, think) = (w.cycles, w.think);
        self.clients[c].cycles_done += 1;
        if self.clients[c].cycles_done >= cycles {
            self.clients[c].script = Script::Finished;
            if self
                .clients
                .iter()
                .all(|cl| cl.script == Script::Finished || cl.script == Script::Done)
            {
                self.begin_close();
            }
            return;
        }
        let d = self.rng.range(think.0, think.1);
        self.push(
            self.now + d,
            Ev::User {
                client: c,
                action: Action::StartCycle,
            },
        );
    }

    fn begin_close(&mut self) {
        if self.closing {
            return;
        }
        self.closing = true;
        for c in 0..self.clients.len() {
            if self.is_observer(c) {
                continue; // closed after the campaigners (`maybe_close_observers`)
            }
            let d = self.rng.range(0, 20) + self.observer_close_delay(c);
            self.push(
                self.now + d,
                Ev::User {
                    client: c,
                    action: Action::Close,
                },
            );
        }
    }

    /// A re-entry of `outer` was granted: the same token as the outer hold,
    /// not a new grant (tokens do not move); the inner hold is believed like
    /// any hold and given back at once (a decrement while the outer holds).
    fn on_reentered(&mut self, c: usize, op: OpId, outer: LockId, lock: LockInfo) {
        let token = lock.fencing_token;
        if self
            .complete(
                c,
                op,
                Outcome::Acquired {
                    lock: lock.id,
                    token,
                },
            )
            .is_none()
        {
            return;
        }
        if let Some(h) = self.clients[c].holdings.get(&outer) {
            if h.token != token || h.key != lock.handle.key {
                self.violations.push(format!(
                    "client {c}: re-entry of {:?} got token {token}, its outer hold has {}",
                    lock.name, h.token
                ));
            }
        }
        self.clients[c].holdings.insert(
            lock.id,
            Holding {
                name: lock.name.clone(),
                kind: lock.handle.kind,
                token,
                slot: lock.slot(),
                key: lock.handle.key.clone(),
                owner: lock.handle.owner.clone(),
                revision: lock.handle.revision,
                expires_at: lock.expires_at,
                since: self.now,
                user_done: false,
            },
        );
        self.inner_holds.insert((c, lock.id));
        self.user_release(c, lock.id);
    }

    fn user_release(&mut self, c: usize, lock: LockId) {
        let local = self.local_now(c);
        let name = match self.clients[c].holdings.get_mut(&lock) {
            Some(h) => {
                h.user_done = true;
                h.name.clone()
            }
            None => return, // lost meanwhile
        };
        let res = self.clients[c].machine.release(local, lock);
        match res {
            Ok(op) => {
                self.record(c, op, What::Release { name, lock });
                if matches!(self.clients[c].script, Script::Holding { lock: l } if l == lock) {
                    let attempts = self.release_attempts.remove(&c).unwrap_or(0);
                    self.clients[c].script = Script::Releasing { op, lock, attempts };
                }
            }
            Err(e) => self
                .violations
                .push(format!("client {c}: release of a held lock refused: {e}")),
        }
        self.drain(c);
    }

    fn record(&mut self, c: usize, op: OpId, what: What) {
        if self.clients[c].ops.contains_key(&op) {
            self.violations
                .push(format!("client {c}: op id {op:?} reused"));
        }
        self.history.push(OpRecord {
            client: c,
            op,
            what,
            begin: self.now,
            end: None,
            outcome: Outcome::Pending,
            cancelled_at: None,
        });
        let idx = self.history.len() - 1;
        self.clients[c].ops.insert(op, idx);
    }

    fn user(&mut self, c: usize, action: Action) {
        let local = self.local_now(c);
        match action {
            Action::StartCycle => {
                if self.clients[c].script != Script::Idle || self.closing {
                    return;
                }
                let Some(w) = self.workload.clone() else {
                    return;
                };
                let name = w.names[self.rng.below(w.names.len() as u64) as usize].clone();
                let (a, b, cw) = w.weights;
                let pick = self.rng.below((a + b + cw).max(1) as u64) as u32;
                let wait = if pick < a {
                    Wait::Try
                } else if pick < a + b {
                    Wait::For(self.rng.range(w.wait_for.0, w.wait_for.1))
                } else {
                    Wait::Forever
                };
                let opts = AcquireOptions {
                    wait,
                    ttl_ms: w.ttl_ms,
                };
                self.log(|| format!("c{c} user acquire {name:?} {wait:?}"));
                // One draw only when there is a choice: other runs keep their sequences.
                let kinds = &self.acquire_kinds;
                let kind = if kinds.len() > 1 {
                    kinds[self.rng.below(kinds.len() as u64) as usize]
                } else {
                    kinds[0]
                };
                let campaign_value = match self.redis_election.is_some() {
                    true => Some(self.election_value(c, None)),
                    false => None,
                };
                let op = match &campaign_value {
                    Some(value) => Operation::Campaign {
                        name: name.clone(),
                        value: value.clone(),
                        options: opts,
                    },
                    None => Operation::Acquire {
                        name: name.clone(),
                        kind,
                        options: opts,
                    },
                };
                let op = self.as_campaign(c, op);
                match self.clients[c].machine.start(local, op) {
                    Ok(op) => {
                        self.record(c, op, What::Acquire { name, wait });
                        if let Some(v) = &campaign_value {
                            self.election_note_campaign(c, op, v);
                        }
                        self.clients[c].script = Script::Acquiring { op };
                        if wait != Wait::Try && self.rng.chance(w.cancel_chance) {
                            let d = self.rng.range(w.cancel_after.0, w.cancel_after.1);
                            self.push(
                                self.now + d,
                                Ev::User {
                                    client: c,
                                    action: Action::Cancel(op),
                                },
                            );
                        }
                    }
                    Err(e) => self
                        .violations
                        .push(format!("client {c}: acquire of {name:?} refused: {e}")),
                }
                self.drain(c);
            }
            Action::Cancel(op) => {
                if self.clients[c].script != (Script::Acquiring { op }) {
                    return;
                }
                self.log(|| format!("c{c} user cancels op {}", op.0));
                if let Some(&i) = self.clients[c].ops.get(&op) {
                    self.history[i].cancelled_at = Some(self.now);
                }
                self.clients[c].machine.cancel(local, op);
                self.drain(c);
            }
            Action::Extend(lock) => {
                if self.clients[c].script != (Script::Holding { lock }) {
                    return;
                }
                let Some(name) = self.clients[c].holdings.get(&lock).map(|h| h.name.clone()) else {
                    return;
                };
                self.log(|| format!("c{c} user extends lock {}", lock.0));
                let ttl = self.workload.as_ref().and_then(|w| w.ttl_ms);
                match self.clients[c].machine.extend(local, lock, ttl) {
                    Ok(op) => self.record(c, op, What::Extend { name, lock }),
                    Err(e) => self
                        .violations
                        .push(format!("client {c}: extend of a held lock refused: {e}")),
                }
                self.drain(c);
            }
            Action::Reenter(lock) => {
                if self.clients[c].script != (Script::Holding { lock }) {
                    return;
                }
                let Some(h) = self.clients[c].holdings.get(&lock) else {
                    return;
                };
                let handle = edgelock::core::LockHandle {
                    v: 1,
                    backend: self.clients[c].machine.backend(),
                    name: h.name.clone(),
                    key: h.key.clone(),
                    owner: h.owner.clone(),
                    fencing_token: h.token,
                    revision: h.revision,
                    kind: h.kind,
                    slot: h.slot,
                };
                let name = h.name.clone();
                self.log(|| format!("c{c} user re-enters lock {}", lock.0));
                match self.clients[c]
                    .machine
                    .start(local, edgelock::core::Operation::Reenter { handle })
                {
                    Ok(op) => self.record(c, op, What::Reenter { name, lock }),
                    Err(e) => self
                        .violations
                        .push(format!("client {c}: re-entry of a held lock refused: {e}")),
                }
                self.drain(c);
            }
            Action::ReleaseInner(lock) => {
                if self.clients[c].holdings.contains_key(&lock) {
                    self.user_release(c, lock);
                }
            }
            Action::Release(lock) => {
                if self.clients[c].script != (Script::Holding { lock }) {
                    return;
                }
                // A user waits for its own re-entry through this lock before
                // giving the lock back (released first, the re-entry is
                // rightly LOST).
                let reentering = self.clients[c].ops.values().any(|&i| {
                    self.history[i].outcome == Outcome::Pending
                        && matches!(self.history[i].what, What::Reenter { lock: l, .. } if l == lock)
                });
                if reentering {
                    self.push(
                        self.now + 20,
                        Ev::User {
                            client: c,
                            action: Action::Release(lock),
                        },
                    );
                    return;
                }
                self.log(|| format!("c{c} user releases lock {}", lock.0));
                self.user_release(c, lock);
            }
            a @ (Action::Proclaim(_) | Action::Observe(_) | Action::CloseObservers) => {
                self.election_user(c, a)
            }
            Action::Close => {
                if matches!(
                    self.clients[c].script,
                    Script::Closing { .. } | Script::Done
                ) {
                    return;
                }
                // Every re-entered hold is given back first (its release
                // may be retrying).
                let stop_at = self.workload.as_ref().map_or(0, |w| w.stop_at);
                let inner_held = self.clients[c]
                    .holdings
                    .keys()
                    .any(|l| self.inner_holds.contains(&(c, *l)));
                if inner_held && self.now < stop_at {
                    self.push(
                        self.now + 100,
                        Ev::User {
                            client: c,
                            action: Action::Close,
                        },
                    );
                    return;
                }
                self.log(|| format!("c{c} user closes"));
                for h in self.clients[c].holdings.values_mut() {
                    h.user_done = true;
                }
                let op = self.clients[c].machine.close(local);
                self.record(c, op, What::Close);
                self.clients[c].script = Script::Closing { op };
                self.drain(c);
            }
            Action::RedisProclaim(lock) => self.user_proclaim(c, lock),
            Action::RedisObserve => self.user_observe(c),
        }
    }

    // ---------------------------------------------------------------- loop

    fn client_deadline(&self, c: usize) -> Option<Millis> {
        let cl = &self.clients[c];
        if cl.paused {
            return None;
        }
        cl.machine
            .poll_timeout()
            .map(|t| cl.clock.to_global(t).max(self.now))
    }

    fn timer(&mut self, c: usize) {
        let local = self.local_now(c);
        self.log(|| format!("c{c} timer (local {local})"));
        self.clients[c].machine.handle_timeout(local);
        self.drain(c);
    }

    fn dispatch(&mut self, ev: Ev) {
        match ev {
            Ev::Arrive {
                wire,
                endpoint,
                req,
            } => self.arrive(wire, endpoint, req),
            Ev::ServerStreamClosed { server, wire } => {
                self.tcp.remove(&wire);
                self.servers[server].stream_closed(RequestId(wire))
            }
            Ev::StreamFlush { wire } => self.stream_flush(wire),
            Ev::TcpAccept { wire } => self.tcp_accept(wire),
            Ev::TcpData { wire, data } => self.tcp_data(wire, data),
            Ev::OutageStart { endpoint } => self.outage_start(endpoint),
            Ev::OutageEnd { endpoint } => self.outage_end(endpoint),
            Ev::PauseStart { client } => {
                self.log(|| format!("c{client} paused"));
                self.clients[client].paused = true;
            }
            Ev::PauseEnd { client } => self.resume(client),
            Ev::Deliver { client, input } => self.for_client(client, Deferred::Input(input)),
            Ev::DriverTimeout { client, id } => {
                self.for_client(client, Deferred::DriverTimeout(id))
            }
            Ev::User { client, action } => self.for_client(client, Deferred::User(action)),
        }
    }

    fn for_client(&mut self, c: usize, d: Deferred) {
        if self.clients[c].paused {
            self.clients[c].deferred.push_back(d);
            return;
        }
        match d {
            Deferred::Input(input) => self.deliver(c, input),
            Deferred::DriverTimeout(id) => self.driver_timeout(c, id),
            Deferred::User(action) => self.user(c, action),
        }
    }

    fn resume(&mut self, c: usize) {
        if !self.clients[c].paused
            || self
                .pauses
                .iter()
                .any(|p| p.client == c && p.from < self.now && self.now < p.until)
        {
            return; // overlapping pauses: the longest wins
        }
        let queued = self.clients[c].deferred.len();
        self.log(|| format!("c{c} resumes with {queued} queued"));
        self.clients[c].paused = false;
        let timers_first = self.rng.chance(0.5);
        if timers_first {
            self.fire_due_timer(c);
        }
        while let Some(d) = self.clients[c].deferred.pop_front() {
            self.for_client(c, d);
            self.check_generic();
        }
        self.fire_due_timer(c);
    }

    fn fire_due_timer(&mut self, c: usize) {
        if let Some(t) = self.clients[c].machine.poll_timeout() {
            if t <= self.local_now(c) {
                self.timer(c);
            }
        }
    }

    /// Run until nothing is left to do or `until` passes. `check` runs after
    /// every step; the run stops at the first violation.
    pub fn run(&mut self, until: Millis, check: &mut Check<'_, S>) -> Result<(), String> {
        let mut same_instant = 0u64;
        loop {
            let t_queue = self.queue.peek().map(|q| q.at);
            // A crashed server's clock stands still until it restarts.
            let t_server = (0..self.servers.len())
                .filter(|&s| !self.crashed[s])
                .filter_map(|s| self.servers[s].next_deadline())
                .min();
            let t_client = (0..self.clients.len())
                .filter_map(|c| self.client_deadline(c))
                .min();
            let t_stop = self.stop_at.filter(|_| !self.closing);
            let Some(t) = [t_queue, t_server, t_client, t_stop]
                .into_iter()
                .flatten()
                .min()
            else {
                return Ok(());
            };
            if t > until {
                return Err(format!("still busy at t={until} (next step at {t})"));
            }
            let t = t.max(self.now);
            if t == self.now {
                same_instant += 1;
                if same_instant > 200_000 {
                    return Err(format!("no progress at t={t}: a timer or message loop"));
                }
            } else {
                same_instant = 0;
            }
            self.now = t;
            self.steps += 1;
            if self.steps > self.max_steps {
                return Err(format!(
                    "runaway: more than {} steps by t={t} (a client keeps sending)",
                    self.max_steps
                ));
            }
            self.completed_this_step.clear();
            for s in 0..self.servers.len() {
                if !self.crashed[s] && self.servers[s].next_deadline().is_some_and(|d| d <= t) {
                    self.servers[s].advance(t);
                    self.pump_streams(s);
                }
            }
            if t_stop.is_some_and(|s| s <= t) {
                self.log(|| "stop time: closing every client".to_string());
                self.begin_close();
            } else if t_queue.is_some_and(|q| q <= t) {
                if let Some(q) = self.queue.pop() {
                    self.dispatch(q.ev);
                }
            } else if t_client.is_some_and(|d| d <= t) {
                for c in 0..self.clients.len() {
                    if self.client_deadline(c).is_some_and(|d| d <= t) {
                        self.timer(c);
                    }
                }
            }
            self.check_generic();
            if self.violations.is_empty() {
                if let Err(v) = check(self) {
                    self.violations.push(v);
                }
            }
            if let Some(v) = self.violations.first() {
                return Err(v.clone());
            }
        }
    }

    // ---------------------------------------------------------------- reports

    /// Checks that hold when the network was calm (no loss, partition, pause
    /// or outage): every op completed; nothing failed except wait timeouts,
    /// user cancels, and extends racing their lock's release or the close;
    /// every Forever acquire that was not cancelled acquired; no lock was lost.
    pub fn check_calm_run(&self) -> Result<(), String> {
        for r in &self.history {
            let ok = match (&r.what, &r.outcome) {
                (_, Outcome::Pending) => false,
                // Another limit than the holders': refused, whatever the wait.
                (
                    What::Acquire { .. },
                    Outcome::Failed {
                        code: "INVALID_ARGUMENT",
                        ..
                    },
                ) => self.acquire_kinds.len() > 1,
                (
                    What::Acquire {
                        wait: Wait::Forever,
                        ..
                    },
                    Outcome::Failed { code, .. },
                ) => *code == "ABORTED" && r.cancelled_at.is_some(),
                (
                    What::Acquire {
                        wait: Wait::For(_), ..
                    },
                    Outcome::Failed { code, .. },
                ) => *code == "TIMEOUT" || (*code == "ABORTED" && r.cancelled_at.is_some()),
                (
                    What::Acquire {
                        wait: Wait::Try, ..
                    },
                    Outcome::Failed { .. },
                ) => false,
                // An extend racing the same lock's release or the close may find it gone.
                (What::Extend { lock, .. }, Outcome::Failed { code, .. }) => {
                    let end = r.end.unwrap_or(Millis::MAX);
                    let raced = self.history.iter().any(|o| {
                        o.client == r.client
                            && o.begin <= end
                            && match &o.what {
                                What::Release { lock: l, .. } => l == lock,
                                What::Close => true,
                                _ => false,
                            }
                    });
                    raced && matches!(*code, "NOT_HELD" | "LOST" | "CLOSED")
                }
                // Elections: a proclaim racing its leadership's resign or
                // the close; an observe still waiting when its client closed.
                (What::Proclaim { lock, .. }, Outcome::Failed { code, .. }) => {
                    let end = r.end.unwrap_or(Millis::MAX);
                    let raced = self.history.iter().any(|o| {
                        o.client == r.client
                            && o.begin <= end
                            && match &o.what {
                                What::Release { lock: l, .. } => l == lock,
                                What::Close => true,
                                _ => false,
                            }
                    });
                    raced && matches!(*code, "NOT_HELD" | "LOST" | "CLOSED")
                }
                (What::Observe { .. }, Outcome::Failed { code, .. }) => *code == "CLOSED",
                (_, Outcome::Failed { .. }) => false,
                _ => true,
            };
            if !ok {
                return Err(format!(
                    "calm run: client {} op {:?} {:?} ended {:?}",
                    r.client, r.op, r.what, r.outcome
                ));
            }
        }
        if let Some(l) = self.losts.first() {
            return Err(format!(
                "calm run: client {} lost {:?} at t={}: {}",
                l.client, l.name, l.at, l.reason
            ));
        }
        if !self.all_done() {
            return Err("calm run: not every client closed".into());
        }
        for (i, c) in self.clients.iter().enumerate() {
            if c.machine.live_count() != 0 {
                return Err(format!(
                    "calm run: client {i} still has {} live operations/locks after close",
                    c.machine.live_count()
                ));
            }
        }
        Ok(())
    }

    /// The history of one lock name around a time window, one line per record.
    /// What a failing seed prints after its replay: the history of the lock the
    /// message names (the last six TTLs) and the tail of the step trace
    /// (all of it with SIM_TRACE set).
    pub fn failure_report(&self, names: &[String], ttl_ms: u64, msg: &str) -> String {
        let mut out = String::new();
        let name = names
            .iter()
            .find(|n| msg.contains(&format!("{n:?}")))
            .map(|s| s.as_str());
        let from = self.now.saturating_sub(6 * ttl_ms);
        out.push_str(&format!(
            "history of {name:?} from t={from} to the failure at t={}:\n",
            self.now
        ));
        out.push_str(&self.describe_history(name, from, self.now));
        if let Some(t) = &self.trace {
            let tail = if std::env::var("SIM_TRACE").is_ok() {
                t.len()
            } else {
                150.min(t.len())
            };
            out.push_str(&format!("last {tail} of {} trace lines:\n", t.len()));
            for line in &t[t.len() - tail..] {
                out.push_str(line);
                out.push('\n');
            }
        }
        out
    }

    pub fn describe_history(&self, name: Option<&str>, from: Millis, to: Millis) -> String {
        let mut s = String::new();
        for r in &self.history {
            let n = match &r.what {
                What::Acquire { name, .. }
                | What::Release { name, .. }
                | What::Extend { name, .. }
                | What::Reenter { name, .. }
                | What::Proclaim { name, .. }
                | What::Observe { name } => Some(name.as_str()),
                What::Close => None,
            };
            if name.is_some() && n.is_some() && n != name {
                continue;
            }
            let end = r.end.unwrap_or(Millis::MAX);
            if end < from || r.begin > to {
                continue;
            }
            s.push_str(&format!(
                "  client {} op {:>3} [{:>7} .. {:>7}] {:?} -> {:?}{}\n",
                r.client,
                r.op.0,
                r.begin,
                r.end.map_or("pending".to_string(), |e| e.to_string()),
                r.what,
                r.outcome,
                r.cancelled_at
                    .map_or(String::new(), |t| format!(" (cancelled at {t})"))
            ));
        }
        for l in &self.losts {
            if (name.is_none() || name == Some(l.name.as_str())) && l.at >= from && l.at <= to {
                s.push_str(&format!(
                    "  client {} LOST {:?} lock {} at {}: {}\n",
                    l.client, l.name, l.lock.0, l.at, l.reason
                ));
            }
        }
        for p in &self.partitions {
            if p.until >= from && p.from <= to {
                s.push_str(&format!(
                    "  partition client {} / endpoint {} [{} .. {}]\n",
                    p.client, p.endpoint, p.from, p.until
                ));
            }
        }
        for p in &self.pauses {
            if p.until >= from && p.from <= to {
                s.push_str(&format!(
                    "  pause client {} [{} .. {}]\n",
                    p.client, p.from, p.until
                ));
            }
        }
        for o in &self.outages {
            if o.until >= from && o.from <= to {
                s.push_str(&format!(
                    "  outage endpoint {} [{} .. {}]\n",
                    o.endpoint, o.from, o.until
                ));
            }
        }
        s
    }
}

// ---------------------------------------------------------------- elections
//
// An election workload (`set_election`): the campaigners' cycles campaign
// instead of acquiring (a leadership is an exclusive grant: the same
// believers' checks apply), proclaim while leading, and resign (release);
// observer clients only observe every name in a loop (`Operation::Observe`
// with the state they last saw), and are closed once every campaigner
// closed and the faults ended, their last reports kept for the checks.

/// What an election workload does beyond the lock cycles.
#[derive(Clone, Debug)]
pub struct ElectionConfig {
    /// The last `observers` clients only observe (every name).
    pub observers: usize,
    /// Chance a leader proclaims (once, midway through its hold).
    pub proclaim_chance: f64,
    /// Wait bounds of the observers' observes (a few wait forever).
    pub observe_wait: (Millis, Millis),
    /// The observers are closed this long after the last campaigner closed
    /// (and not before the faults ended plus this).
    pub quiesce_ms: Millis,
}

/// An observer, a name, and the state it last reported for it (`None`:
/// never reported).
pub type FinalReport = (usize, String, Option<Option<Leadership>>);

/// What the election workload saw.
#[derive(Clone, Debug, Default)]
pub struct ElectionState {
    /// (observer, name) → the state it last reported.
    pub last_seen: BTreeMap<(usize, String), Option<Leadership>>,
    /// Observe completions (changes and bounds).
    pub reports: u64,
    /// Of which reported a leader.
    pub leader_reports: u64,
    pub proclaims: u64,
    /// When the observers were closed, with their last reports then
    /// (`None` for a name never reported).
    pub final_reports: Option<(Millis, Vec<FinalReport>)>,
    campaigns: u64,
    observers_closing: bool,
}

impl<S: SimServer> World<S> {
    /// Makes the workload an election: see [`ElectionConfig`].
    pub fn set_election(&mut self, cfg: ElectionConfig) {
        self.election = Some(cfg);
    }

    fn is_observer(&self, c: usize) -> bool {
        self.election
            .as_ref()
            .is_some_and(|e| c + e.observers >= self.clients.len())
    }

    fn start_observer(&mut self, c: usize) {
        // Observers have no cycles: finished from the start for `begin_close`.
        self.clients[c].script = Script::Finished;
        let names = self
            .workload
            .as_ref()
            .map(|w| w.names.clone())
            .unwrap_or_default();
        for name in names {
            let at = self.now + self.rng.range(0, 50);
            self.push(
                at,
                Ev::User {
                    client: c,
                    action: Action::Observe(name),
                },
            );
        }
    }

    /// In an election workload, an acquire of the cycle is a campaign.
    fn as_campaign(&mut self, c: usize, op: Operation) -> Operation {
        match (&self.election, op) {
            (Some(_), Operation::Acquire { name, options, .. }) => {
                self.election_state.campaigns += 1;
                Operation::Campaign {
                    name,
                    value: format!("c{c}#{}", self.election_state.campaigns),
                    options,
                }
            }
            (_, op) => op,
        }
    }

    fn maybe_proclaim(&mut self, c: usize, lock: LockId, hold: Millis) {
        let Some(p) = self.election.as_ref().map(|e| e.proclaim_chance) else {
            return;
        };
        if self.rng.chance(p) {
            let at = self.now + self.rng.range(0, hold.max(1));
            self.push(
                at,
                Ev::User {
                    client: c,
                    action: Action::Proclaim(lock),
                },
            );
        }
    }

    fn election_user(&mut self, c: usize, action: Action) {
        let local = self.local_now(c);
        match action {
            Action::Proclaim(lock) => {
                if self.clients[c].script != (Script::Holding { lock }) {
                    return;
                }
                let Some(name) = self.clients[c].holdings.get(&lock).map(|h| h.name.clone()) else {
                    return;
                };
                self.election_state.proclaims += 1;
                let value = format!("c{c}#p{}", self.election_state.proclaims);
                self.log(|| format!("c{c} user proclaims {value:?} on lock {}", lock.0));
                match self.clients[c]
                    .machine
                    .start(local, Operation::Proclaim { lock, value })
                {
                    Ok(op) => self.record(c, op, What::Proclaim { name, lock }),
                    Err(e) => self.violations.push(format!(
                        "client {c}: proclaim of a held leadership refused: {e}"
                    )),
                }
                self.drain(c);
            }
            Action::Observe(name) => {
                if self.election_state.final_reports.is_some()
                    || matches!(
                        self.clients[c].script,
                        Script::Closing { .. } | Script::Done
                    )
                {
                    return;
                }
                let Some((lo, hi)) = self.election.as_ref().map(|e| e.observe_wait) else {
                    return;
                };
                let wait = if self.rng.chance(0.2) {
                    Wait::Forever
                } else {
                    Wait::For(self.rng.range(lo, hi))
                };
                let known = self
                    .election_state
                    .last_seen
                    .get(&(c, name.clone()))
                    .cloned()
                    .flatten();
                self.log(|| format!("c{c} user observes {name:?} knowing {known:?} {wait:?}"));
                let op = Operation::Observe {
                    name: name.clone(),
                    known,
                    wait,
                };
                match self.clients[c].machine.start(local, op) {
                    Ok(op) => self.record(c, op, What::Observe { name }),
                    Err(e) => self
                        .violations
                        .push(format!("client {c}: observe of {name:?} refused: {e}")),
                }
                self.drain(c);
            }
            Action::CloseObservers => {
                let reports: Vec<(usize, String, Option<Option<Leadership>>)> =
                    (0..self.clients.len())
                        .filter(|&o| self.is_observer(o))
                        .flat_map(|o| {
                            let names = self
                                .workload
                                .as_ref()
                                .map(|w| w.names.clone())
                                .unwrap_or_default();
                            names.into_iter().map(move |n| (o, n))
                        })
                        .map(|(o, n)| {
                            let seen = self.election_state.last_seen.get(&(o, n.clone())).cloned();
                            (o, n, seen)
                        })
                        .collect();
                self.election_state.final_reports = Some((self.now, reports));
                for o in 0..self.clients.len() {
                    if self.is_observer(o) {
                        self.user(o, Action::Close);
                    }
                }
            }
            _ => {}
        }
    }

    fn observed_name(&self, c: usize, op: OpId) -> Option<String> {
        let i = *self.clients[c].ops.get(&op)?;
        match &self.history[i].what {
            What::Observe { name } => Some(name.clone()),
            _ => None,
        }
    }

    fn on_leader_report(&mut self, c: usize, op: OpId, leader: Option<Leadership>) {
        let Some(name) = self.observed_name(c, op) else {
            self.violations.push(format!(
                "client {c}: a leader report for op {op:?}, no observe"
            ));
            return;
        };
        if self
            .complete(c, op, Outcome::Leader(leader.clone()))
            .is_none()
        {
            return;
        }
        self.election_state.reports += 1;
        self.election_state.leader_reports += leader.is_some() as u64;
        // A leader's token never goes backwards for one observer.
        let before = self
            .election_state
            .last_seen
            .get(&(c, name.clone()))
            .cloned()
            .flatten();
        if let (Some(b), Some(l)) = (&before, &leader) {
            if l.fencing_token < b.fencing_token {
                self.violations.push(format!(
                    "observer {c}: the leader of {name:?} went back from token {} to {} at t={}",
                    b.fencing_token, l.fencing_token, self.now
                ));
            }
        }
        self.election_state
            .last_seen
            .insert((c, name.clone()), leader);
        let d = self.rng.range(0, 30);
        self.push(
            self.now + d,
            Ev::User {
                client: c,
                action: Action::Observe(name),
            },
        );
    }

    /// An observe failed: the observer tries again a little later. Whether
    /// `op` was an observe.
    fn observe_failed(&mut self, c: usize, op: OpId) -> bool {
        // The Redis workload's observers recover on their own (`election_op_failed`).
        if self.election.is_none() {
            return false;
        }
        let Some(name) = self.observed_name(c, op) else {
            return false;
        };
        let d = self.rng.range(50, 300);
        self.push(
            self.now + d,
            Ev::User {
                client: c,
                action: Action::Observe(name),
            },
        );
        true
    }

    /// Once every campaigner closed: the observers are closed after the
    /// quiescence period (and not before the faults ended plus that).
    fn maybe_close_observers(&mut self) {
        let Some(quiesce) = self.election.as_ref().map(|e| e.quiesce_ms) else {
            return;
        };
        if self.election_state.observers_closing {
            return;
        }
        let campaigners_done = (0..self.clients.len())
            .filter(|&c| !self.is_observer(c))
            .all(|c| self.clients[c].script == Script::Done);
        if !campaigners_done {
            return;
        }
        self.election_state.observers_closing = true;
        let at = (self.now + quiesce).max(self.net.faults_until + quiesce);
        let first = (0..self.clients.len()).find(|&c| self.is_observer(c));
        if let Some(o) = first {
            self.push(
                at,
                Ev::User {
                    client: o,
                    action: Action::CloseObservers,
                },
            );
        }
    }
}

/// The machine's events as the simulation records them: one variant per
/// outcome, flattened from `Event::Completed`.
#[derive(Debug)]
enum Seen {
    Acquired {
        op: OpId,
        lock: LockInfo,
    },
    NotAcquired {
        op: OpId,
    },
    Released {
        op: OpId,
        lock: LockId,
        held_until_release: bool,
    },
    Extended {
        op: OpId,
        lock: LockId,
        expires_at: Millis,
    },
    Renewed {
        lock: LockId,
        expires_at: Millis,
    },
    Inspected {
        op: OpId,
    },
    Proclaimed {
        op: OpId,
    },
    Leader {
        op: OpId,
        leader: Option<edgelock::core::Leadership>,
    },
    AcquiredAll {
        op: OpId,
        locks: Vec<LockInfo>,
    },
    Closed {
        op: OpId,
    },
    Failed {
        op: OpId,
        error: LockError,
    },
    Lost {
        lock: LockId,
        name: String,
        reason: LostReason,
    },
}

impl From<Event> for Seen {
    fn from(e: Event) -> Self {
        use edgelock::core::Outcome as Done;
        match e {
            Event::Completed {
                op,
                result: Ok(Done::Acquired(lock)),
            } => Seen::Acquired { op, lock },
            Event::Completed {
                op,
                result: Ok(Done::NotAcquired),
            } => Seen::NotAcquired { op },
            Event::Completed {
                op,
                result:
                    Ok(Done::Released {
                        lock,
                        held_until_release,
                    }),
            } => Seen::Released {
                op,
                lock,
                held_until_release,
            },
            Event::Completed {
                op,
                result: Ok(Done::Extended { lock, expires_at }),
            } => Seen::Extended {
                op,
                lock,
                expires_at,
            },
            Event::Completed {
                op,
                result: Ok(Done::Inspected(_)),
            } => Seen::Inspected { op },
            Event::Completed {
                op,
                result: Ok(Done::Proclaimed { .. }),
            } => Seen::Proclaimed { op },
            Event::Completed {
                op,
                result: Ok(Done::Leader(leader)),
            } => Seen::Leader { op, leader },
            Event::Completed {
                op,
                result: Ok(Done::AcquiredAll(locks)),
            } => Seen::AcquiredAll { op, locks },
            Event::Completed {
                op,
                result: Ok(Done::Closed),
            } => Seen::Closed { op },
            Event::Completed {
                op,
                result: Err(error),
            } => Seen::Failed { op, error },
            Event::Renewed { lock, expires_at } => Seen::Renewed { lock, expires_at },
            Event::Lost { lock, name, reason } => Seen::Lost { lock, name, reason },
        }
    }
}

// ---------------------------------------------------------------- elections
// The Redis/Redlock election workload (additive: `World::set_redis_election`,
// `World::add_observer`, the `Action::Proclaim`/`Action::RedisObserve` users and
// the checks in `World::election_checks`).

/// Who produced a campaign or proclaimed value.
#[derive(Clone, Debug)]
pub enum ValueSource {
    /// Client `client`'s campaign `op`.
    Campaign { client: usize, op: OpId },
    /// Client `client`'s proclaim for its leadership `lock`.
    Proclaim { client: usize, lock: LockId },
}

/// One observer client: the election it watches and every state it was told.
#[derive(Clone, Debug, Default)]
pub struct ObserverLog {
    pub name: String,
    /// (global times the observe began and completed, state), in order.
    pub seen: Vec<(Millis, Millis, Option<edgelock::core::Leadership>)>,
}

/// The election workload: every acquire is a campaign with a unique value,
/// leaders sometimes proclaim, observer clients watch one name each.
#[derive(Clone, Debug, Default)]
pub struct ElectionSim {
    /// Chance a leader proclaims a new value halfway through its hold.
    pub proclaim_chance: f64,
    /// An observe's wait bound, drawn per observe (ms).
    pub observe_wait: (Millis, Millis),
    /// Observers are closed this long after the campaigners' close begins,
    /// and not before `observer_close_not_before` + this.
    pub observer_grace: Millis,
    pub observer_close_not_before: Millis,
    pub observers: BTreeMap<usize, ObserverLog>,
    /// Every value handed to a campaign or proclaim (each is unique).
    pub values: HashMap<String, ValueSource>,
    pub made: u64,
}

impl<S: SimServer> World<S> {
    /// Turns the workload's acquires into campaigns (see [`ElectionSim`]).
    pub fn set_redis_election(&mut self, e: ElectionSim) {
        self.redis_election = Some(e);
    }

    /// Adds an observer client of `name` (call after `set_election`): it
    /// runs no cycles; it reads the leader, then observes changes until the
    /// world closes it (`observer_grace` after the others).
    pub fn add_observer(
        &mut self,
        machine: Box<dyn LockMachine>,
        clock: Clock,
        name: &str,
    ) -> usize {
        let c = self.add_client(machine, clock);
        self.clients[c].script = Script::Finished;
        if let Some(e) = self.redis_election.as_mut() {
            e.observers.insert(
                c,
                ObserverLog {
                    name: name.to_string(),
                    seen: Vec::new(),
                },
            );
        }
        let at = self.now + 1;
        self.push(
            at,
            Ev::User {
                client: c,
                action: Action::RedisObserve,
            },
        );
        c
    }

    fn is_redis_observer(&self, c: usize) -> bool {
        self.redis_election
            .as_ref()
            .is_some_and(|e| e.observers.contains_key(&c))
    }

    fn observer_close_delay(&self, c: usize) -> Millis {
        match self.redis_election.as_ref() {
            Some(e) if e.observers.contains_key(&c) => {
                e.observer_close_not_before.saturating_sub(self.now) + e.observer_grace
            }
            _ => 0,
        }
    }

    /// A fresh value for client `c` (recorded once its op exists).
    fn election_value(&mut self, c: usize, _lock: Option<LockId>) -> String {
        let Some(e) = self.redis_election.as_mut() else {
            return String::new();
        };
        e.made += 1;
        format!("c{c}/{}", e.made)
    }

    fn election_on_grant(&mut self, c: usize, lock: LockId, hold: Millis) {
        let Some(p) = self.redis_election.as_ref().map(|e| e.proclaim_chance) else {
            return;
        };
        if self.rng.chance(p) {
            self.push(
                self.now + hold / 2,
                Ev::User {
                    client: c,
                    action: Action::RedisProclaim(lock),
                },
            );
        }
    }

    fn user_proclaim(&mut self, c: usize, lock: LockId) {
        if self.clients[c].script != (Script::Holding { lock }) {
            return;
        }
        let Some(name) = self.clients[c].holdings.get(&lock).map(|h| h.name.clone()) else {
            return;
        };
        let value = self.election_value(c, Some(lock));
        let local = self.local_now(c);
        self.log(|| format!("c{c} user proclaims {value:?} on lock {}", lock.0));
        let op = Operation::Proclaim {
            lock,
            value: value.clone(),
        };
        match self.clients[c].machine.start(local, op) {
            Ok(op) => {
                self.record(c, op, What::Proclaim { name, lock });
                if let Some(e) = self.redis_election.as_mut() {
                    e.values
                        .insert(value, ValueSource::Proclaim { client: c, lock });
                }
            }
            Err(e) => self.violations.push(format!(
                "client {c}: proclaim of a held leadership refused: {e}"
            )),
        }
        self.drain(c);
    }

    fn user_observe(&mut self, c: usize) {
        if matches!(
            self.clients[c].script,
            Script::Closing { .. } | Script::Done
        ) {
            return;
        }
        let Some(e) = self.redis_election.as_ref() else {
            return;
        };
        let Some(log) = e.observers.get(&c) else {
            return;
        };
        let name = log.name.clone();
        // First the current state; then changes from the last one seen.
        let (known, wait) = match log.seen.last() {
            None => (None, Wait::Try),
            Some((_, _, l)) => {
                let (lo, hi) = e.observe_wait;
                (l.clone(), Wait::For(self.rng.range(lo, hi)))
            }
        };
        let local = self.local_now(c);
        let op = Operation::Observe {
            name: name.clone(),
            known,
            wait,
        };
        match self.clients[c].machine.start(local, op) {
            Ok(op) => self.record(c, op, What::Observe { name }),
            Err(e) => self
                .violations
                .push(format!("client {c}: observe refused: {e}")),
        }
        self.drain(c);
    }

    /// A campaign's op id is known only once started: remember its value.
    fn election_note_campaign(&mut self, c: usize, op: OpId, value: &str) {
        if let Some(e) = self.redis_election.as_mut() {
            e.values
                .insert(value.to_string(), ValueSource::Campaign { client: c, op });
        }
    }

    fn election_event(&mut self, c: usize, e: Seen) {
        match e {
            Seen::Proclaimed { op } => {
                self.complete(c, op, Outcome::Proclaimed);
            }
            Seen::Leader { op, leader } => {
                let Some(idx) = self.complete(c, op, Outcome::Leader(leader.clone())) else {
                    return;
                };
                let (now, begin) = (self.now, self.history[idx].begin);
                if let Some(log) = self
                    .redis_election
                    .as_mut()
                    .and_then(|e| e.observers.get_mut(&c))
                {
                    log.seen.push((begin, now, leader));
                }
                self.push(
                    now,
                    Ev::User {
                        client: c,
                        action: Action::RedisObserve,
                    },
                );
            }
            other => self.violations.push(format!(
                "client {c}: an outcome the election workload does not drive: {other:?}"
            )),
        }
    }

    /// An observer's failed observe: observe again a little later.
    fn election_op_failed(&mut self, c: usize, _op: OpId) {
        if self.is_redis_observer(c)
            && !matches!(
                self.clients[c].script,
                Script::Closing { .. } | Script::Done
            )
        {
            let d = self.rng.range(10, 200);
            self.push(
                self.now + d,
                Ev::User {
                    client: c,
                    action: Action::RedisObserve,
                },
            );
        }
    }

    /// After the run: every state an observer was told pairs a token with a
    /// value of the same leadership (the value's campaign or a proclaim of
    /// the lock granted with that token, by that client); on one node
    /// (`monotonic`) an observer never goes back to an older token; and
    /// every observer's last state is the final one (`final_state`).
    pub fn election_checks(
        &self,
        monotonic: bool,
        final_state: Option<edgelock::core::Leadership>,
    ) -> Result<ElectionStats, String> {
        let Some(e) = self.redis_election.as_ref() else {
            return Ok(ElectionStats::default());
        };
        let mut stats = ElectionStats::default();
        for (c, log) in &e.observers {
            let mut highest = 0;
            for (begun, at, state) in &log.seen {
                stats.observed += 1;
                let Some(l) = state else {
                    continue;
                };
                stats.observed_leaders += 1;
                if monotonic && l.fencing_token < highest {
                    return Err(format!(
                        "observer {c} of {:?} saw token {} at t={at} after {highest}",
                        log.name, l.fencing_token
                    ));
                }
                highest = highest.max(l.fencing_token);
                let Some(source) = e.values.get(&l.value) else {
                    return Err(format!(
                        "observer {c} of {:?} saw value {:?} nobody campaigned or proclaimed",
                        log.name, l.value
                    ));
                };
                // The grant of that token (a campaign abandoned between its
                // record and its answer has none: nothing to pair).
                let Some(g) = self
                    .grants
                    .iter()
                    .find(|g| g.name == log.name && g.token == l.fencing_token)
                else {
                    continue;
                };
                stats.paired += 1;
                // Never a leader that had resigned before the read began.
                let resigned = self.history.iter().find(|r| {
                    r.client == g.client
                        && matches!(r.what, What::Release { lock, .. } if lock == g.lock)
                        && r.outcome
                            == Outcome::Released {
                                held_until_release: true,
                            }
                        && r.end.is_some_and(|e| e < *begun)
                });
                if let Some(r) = resigned {
                    return Err(format!(
                        "observer {c} of {:?} saw token {} in a read begun at t={begun}, but that leadership resigned at t={:?}",
                        log.name, l.fencing_token, r.end
                    ));
                }
                let ok = match source {
                    ValueSource::Campaign { client, op } => {
                        *client == g.client
                            && self.clients[*client].ops.get(op).is_some_and(|&i| {
                                matches!(self.history[i].outcome, Outcome::Acquired { lock, .. } if lock == g.lock)
                            })
                    }
                    ValueSource::Proclaim { client, lock } => *client == g.client && *lock == g.lock,
                };
                if !ok {
                    return Err(format!(
                        "observer {c} of {:?} saw token {} (client {}'s lock {:?}) paired with value {:?} of {source:?}",
                        log.name, l.fencing_token, g.client, g.lock, l.value
                    ));
                }
            }
            let last = log.seen.last().map(|(_, _, s)| s.clone());
            if last != Some(final_state.clone()) {
                return Err(format!(
                    "observer {c} of {:?} ended with {last:?}, the final state is {final_state:?}",
                    log.name
                ));
            }
        }
        stats.proclaims = self
            .history
            .iter()
            .filter(|r| matches!(r.what, What::Proclaim { .. }) && r.outcome == Outcome::Proclaimed)
            .count() as u64;
        Ok(stats)
    }
}

/// What an election run saw.
#[derive(Clone, Copy, Debug, Default)]
pub struct ElectionStats {
    pub observed: u64,
    pub observed_leaders: u64,
    /// Observed states whose token's grant was checked against the value.
    pub paired: u64,
    pub proclaims: u64,
}
