//! Part 7: a hostile ZooKeeper server against `ZkMachine` (the session's
//! `FrameDecoder` and jute records, the mutex recipe), through the public
//! sans-IO machine API, each session under `catch_unwind`.
//!
//! The server is a small valid one (handshake, pings, auth, create2 of
//! sequential nodes, getChildren2, getData/exists, delete, createContainer,
//! closeSession) whose replies are, for a per-session share (5–100 %),
//! replaced by malformed ones: frame lengths wrong (negative, 0, past the
//! 1 MiB bound, a few bytes off), records truncated, garbage after a valid
//! record (the ConnectResponse too) or as extra frames, wrong xids
//! (another request's, a notification's, a ping's, random), inner lengths
//! and counts of 2^31, random bytes, replies twice; every reply is cut into
//! chunks down to single bytes, streams end or fail at random.
//!
//! In half the sessions a foreign client holds the lock (its node first in
//! line, never released): whatever the server sends, the machine must
//! never grant it there. Only *malformed* replies are sent, never a
//! well-formed lie (a forged children list would be a lie no client can
//! tell from the truth). Checks: 0 panics, 0 grants against the holder.
//!
//! A reported session replays alone with `S09_ZK_SEED=<hex seed>`.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use edgelock::core::zookeeper::{ZkConfig, ZkMachine};
use edgelock::core::{
    AcquireOptions, Event, Input, LockId, LockMachine, LockMachineExt, OpId, Outcome, RequestId,
    SeededEntropy, Transmit, TransportError, Wait,
};

use super::mutate::split;
use super::panics::{in_case, take_last_panic};
use super::rng::{mix, Rng};

/// Inputs per session, and the step at which the session is closed.
const MAX_STEPS: usize = 80;
const CLOSE_AT: usize = 60;
const NAMES: &[&str] = &["a", "jobs/nightly", "x%2Fy", "ü"];
/// The foreign holder's node (first in line: sequence 0).
const FOREIGN: &str = "_c_00000000-0000-4000-8000-000000000000-lock-0000000000";

#[derive(Clone, Debug, Default)]
pub struct Stats {
    pub sessions: u64,
    /// Sessions with a foreign holder, and grants the machine made in them.
    pub held_sessions: u64,
    pub false_grants: u64,
    pub replies: u64,
    pub hostile: u64,
    pub chunks: u64,
    pub acquired: u64,
    pub released: u64,
    pub failed: u64,
    pub lost: u64,
    pub closed: u64,
    pub panics: u64,
    pub samples: Vec<String>,
    pub elapsed: Duration,
}

impl Stats {
    pub fn merge(&mut self, o: &Stats) {
        self.sessions += o.sessions;
        self.held_sessions += o.held_sessions;
        self.false_grants += o.false_grants;
        self.replies += o.replies;
        self.hostile += o.hostile;
        self.chunks += o.chunks;
        self.acquired += o.acquired;
        self.released += o.released;
        self.failed += o.failed;
        self.lost += o.lost;
        self.closed += o.closed;
        self.panics += o.panics;
        for s in &o.samples {
            if self.samples.len() < 8 {
                self.samples.push(s.clone());
            }
        }
    }
}

/// A bounds-checked jute reader (a short read is `None`).
struct Jr<'a>(&'a [u8]);

impl Jr<'_> {
    fn int(&mut self) -> Option<i32> {
        let (h, t) = self.0.split_at_checked(4)?;
        self.0 = t;
        Some(i32::from_be_bytes(h.try_into().ok()?))
    }
    fn text(&mut self) -> Option<String> {
        let n = usize::try_from(self.int()?).ok()?;
        let (h, t) = self.0.split_at_checked(n)?;
        self.0 = t;
        Some(String::from_utf8_lossy(h).into_owned())
    }
}

#[derive(Default)]
struct Jw(Vec<u8>);

impl Jw {
    fn int(&mut self, v: i32) -> &mut Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn long(&mut self, v: i64) -> &mut Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.int(b.len() as i32);
        self.0.extend_from_slice(b);
        self
    }
    /// A `Stat` with this czxid (68 bytes).
    fn stat(&mut self, czxid: i64, owner: i64) -> &mut Self {
        self.long(czxid).long(czxid).long(0).long(0);
        self.int(0)
            .int(0)
            .int(0)
            .long(owner)
            .int(0)
            .int(0)
            .long(czxid)
    }
}

fn framed(body: &[u8]) -> Vec<u8> {
    let mut out = (body.len() as i32).to_be_bytes().to_vec();
    out.extend_from_slice(body);
    out
}

fn reply(xid: i32, code: i32, body: &[u8]) -> Vec<u8> {
    let mut w = Jw::default();
    w.int(xid).long(0x1_0000_0100).int(code);
    w.0.extend_from_slice(body);
    framed(&w.0)
}

/// The valid server of one session.
struct Server {
    /// A foreign holder is first in line (and never leaves).
    held: bool,
    session: i64,
    seq: i64,
    /// Our nodes (full paths) not deleted.
    ours: Vec<String>,
    /// The lock directory, once a create showed it.
    dir: Option<String>,
    /// The current connection's unread bytes, and whether it is past its handshake.
    buf: Vec<u8>,
    connected: bool,
}

impl Server {
    fn exists(&self, path: &str) -> Option<i64> {
        let foreign = self.dir.as_ref().map(|d| format!("{d}/{FOREIGN}"));
        if self.held && foreign.as_deref() == Some(path) {
            return Some(1);
        }
        self.ours
            .iter()
            .position(|p| p == path)
            .map(|i| 2 + i as i64)
    }

    /// The valid replies to the client's bytes (whole frames).
    fn read(&mut self, bytes: &[u8]) -> Vec<Vec<u8>> {
        self.buf.extend_from_slice(bytes);
        let mut out = Vec::new();
        loop {
            let mut r = Jr(&self.buf);
            let Some(len) = r.int().and_then(|l| usize::try_from(l).ok()) else {
                return out;
            };
            if self.buf.len() < 4 + len {
                return out;
            }
            let frame: Vec<u8> = self.buf[4..4 + len].to_vec();
            self.buf.drain(..4 + len);
            out.push(self.answer(&frame));
        }
    }

    fn answer(&mut self, frame: &[u8]) -> Vec<u8> {
        if !self.connected {
            self.connected = true;
            let mut w = Jw::default();
            w.int(0).int(4_000).long(self.session).bytes(&[7; 16]);
            w.0.push(0);
            return framed(&w.0);
        }
        let mut r = Jr(frame);
        let (Some(xid), Some(op)) = (r.int(), r.int()) else {
            return reply(0, -5, &[]);
        };
        let path = r.text().unwrap_or_default();
        let mut w = Jw::default();
        let code = match op {
            // create2: a sequential node, its Stat.
            15 => {
                self.seq += 1;
                let full = format!("{path}{:010}", self.seq);
                self.dir = full.rsplit_once('/').map(|(d, _)| d.to_string());
                self.ours.push(full.clone());
                w.bytes(full.as_bytes()).stat(100 + self.seq, self.session);
                0
            }
            19 => -110, // createContainer: NODEEXISTS
            12 => {
                let mut kids: Vec<String> = self
                    .ours
                    .iter()
                    .filter_map(|p| p.rsplit('/').next().map(str::to_string))
                    .collect();
                if self.held {
                    kids.insert(0, FOREIGN.to_string());
                }
                w.int(kids.len() as i32);
                for k in &kids {
                    w.bytes(k.as_bytes());
                }
                w.stat(1, 0);
                0
            }
            3 | 4 => match self.exists(&path) {
                Some(czxid) => {
                    if op == 4 {
                        w.bytes(b"edgelock");
                    }
                    w.stat(czxid, self.session);
                    0
                }
                None => -101,
            },
            2 => {
                let before = self.ours.len();
                self.ours.retain(|p| *p != path);
                if before == self.ours.len() {
                    -101
                } else {
                    0
                }
            }
            // ping, auth, closeSession, anything else: OK, no body.
            _ => 0,
        };
        reply(xid, code, &w.0)
    }
}

/// One reply made malformed (never a well-formed lie).
fn hostile(rng: &mut Rng, frame: &[u8]) -> Vec<u8> {
    let body = &frame[4..];
    match rng.below(9) {
        0 => {
            let len = body.len() as i32;
            let wrong = *rng.pick(&[-1, -2, 0, i32::MAX, 0x10_0000, i32::MIN]);
            let wrong = if rng.chance(50) {
                wrong
            } else {
                len + 1 + rng.below(50) as i32
            };
            [wrong.to_be_bytes().to_vec(), body.to_vec()].concat()
        }
        1 if body.len() > 1 => framed(&body[..rng.below(body.len())]),
        2 => {
            let n = 1 + rng.below(40);
            framed(&[body, &rng.bytes(n)].concat())
        }
        3 => {
            let n = rng.below(64);
            [frame.to_vec(), framed(&rng.bytes(n))].concat()
        }
        4 if body.len() >= 4 => {
            let xid = i32::from_be_bytes(body[..4].try_into().unwrap_or([0; 4]));
            let wrong = *rng.pick(&[
                xid.wrapping_add(1),
                xid.wrapping_add(1000),
                -1,
                -2,
                -3,
                -4,
                i32::MIN,
            ]);
            let mut b = body.to_vec();
            b[..4].copy_from_slice(&wrong.to_be_bytes());
            framed(&b)
        }
        5 if body.len() >= 20 => {
            // An inner length or count (or whatever sits there) of 2^31 - 1.
            let at = 16 + rng.below(body.len() - 19);
            let mut b = body.to_vec();
            b[at..at + 4].copy_from_slice(&rng.pick(&[i32::MAX, i32::MIN]).to_be_bytes());
            framed(&b)
        }
        6 => {
            let n = 1 + rng.below(100);
            rng.bytes(n)
        }
        7 => [frame, frame].concat(),
        _ => frame[..rng.below(frame.len())].to_vec(),
    }
}

struct Session {
    rng: Rng,
    server: Server,
    stream: Option<RequestId>,
    inbox: VecDeque<Input>,
    held: Vec<LockId>,
    ops: Vec<OpId>,
    hostile_pct: u64,
    closed: bool,
}

impl Session {
    fn pump(&mut self, m: &mut dyn LockMachine, st: &mut Stats) {
        while let Some(t) = m.poll_transmit() {
            match t {
                Transmit::Open(o) => {
                    self.stream = Some(o.id);
                    self.server.buf.clear();
                    self.server.connected = false;
                    self.inbox.push_back(if self.rng.chance(10) {
                        Input::Failed {
                            id: o.id,
                            error: TransportError::Connect("refused".into()),
                        }
                    } else {
                        Input::Opened { id: o.id }
                    });
                }
                Transmit::Write { id, data } if Some(id) == self.stream => {
                    for frame in self.server.read(&data.0) {
                        st.replies += 1;
                        let bytes = if self.rng.chance(self.hostile_pct) {
                            st.hostile += 1;
                            hostile(&mut self.rng, &frame)
                        } else {
                            frame
                        };
                        for piece in split(&mut self.rng, &bytes) {
                            st.chunks += 1;
                            self.inbox.push_back(Input::Chunk { id, data: piece });
                        }
                    }
                }
                Transmit::Write { .. } | Transmit::Send(_) => {}
                Transmit::Cancel(id) => {
                    if Some(id) == self.stream {
                        self.stream = None;
                    }
                    self.inbox.retain(|i| input_id(i) != Some(id));
                }
            }
        }
        while let Some(e) = m.poll_event() {
            self.event(e, st);
        }
    }

    fn event(&mut self, e: Event, st: &mut Stats) {
        match e {
            Event::Completed {
                result: Ok(Outcome::Acquired(lock)),
                ..
            } => {
                st.acquired += 1;
                if self.server.held {
                    st.false_grants += 1;
                }
                self.held.push(lock.id);
            }
            Event::Completed {
                result: Ok(Outcome::Released { lock, .. }),
                ..
            } => {
                st.released += 1;
                self.held.retain(|l| *l != lock);
            }
            Event::Completed {
                result: Ok(Outcome::Closed),
                ..
            } => {
                st.closed += 1;
                self.closed = true;
            }
            Event::Completed { result: Err(_), .. } => st.failed += 1,
            Event::Lost { lock, .. } => {
                st.lost += 1;
                self.held.retain(|l| *l != lock);
            }
            _ => {}
        }
    }

    fn user(&mut self, m: &mut dyn LockMachine, now: u64, name: &str) {
        match (self.rng.below(6), self.held.first().copied()) {
            (0, Some(id)) => {
                let _ = m.release(now, id);
            }
            (1, _) if !self.ops.is_empty() => {
                let op = self.ops[self.rng.below(self.ops.len())];
                m.cancel(now, op);
            }
            _ => {
                let wait = *self.rng.pick(&[Wait::Try, Wait::For(500), Wait::Forever]);
                if let Ok(op) = m.acquire(now, name, &AcquireOptions { wait, ttl_ms: None }) {
                    self.ops.push(op);
                }
            }
        }
    }
}

fn input_id(i: &Input) -> Option<RequestId> {
    match i {
        Input::Opened { id }
        | Input::Chunk { id, .. }
        | Input::StreamEnd { id }
        | Input::Failed { id, .. }
        | Input::Response { id, .. } => Some(*id),
    }
}

fn machine(rng: &mut Rng, seed: u64) -> ZkMachine {
    let mut cfg = ZkConfig::new(*rng.pick(&["zk-a:2181", "zk-a:2181,zk-b:2182/chroot"]));
    cfg.session_timeout_ms = *rng.pick(&[1_000, 4_000, 30_000]);
    cfg.request_timeout_ms = *rng.pick(&[200, 1_000, 5_000]);
    ZkMachine::new(cfg, Box::new(SeededEntropy::new(seed)))
        .expect("the fuzzer's configurations are valid")
}

fn session(seed: u64, st: &mut Stats) {
    let mut rng = Rng::new(seed);
    let name = *rng.pick(NAMES);
    let held = rng.chance(50);
    let mut m = machine(&mut rng, seed);
    let hostile_pct = *rng.pick(&[5u64, 20, 50, 100]);
    let mut s = Session {
        server: Server {
            held,
            session: 0x1000 + (seed & 0xffff) as i64,
            seq: 0,
            ours: Vec::new(),
            dir: None,
            buf: Vec::new(),
            connected: false,
        },
        rng,
        stream: None,
        inbox: VecDeque::new(),
        held: Vec::new(),
        ops: Vec::new(),
        hostile_pct,
        closed: false,
    };
    st.sessions += 1;
    st.held_sessions += u64::from(held);
    let mut now: u64 = 1_000_000;
    s.user(&mut m, now, name);
    for step in 0..MAX_STEPS {
        s.pump(&mut m, st);
        if step == CLOSE_AT {
            m.close(now);
        } else if step < CLOSE_AT && s.rng.chance(15) {
            s.user(&mut m, now, name);
        }
        now += s.rng.below(50) as u64;
        match s.inbox.pop_front() {
            Some(input) if !s.rng.chance(3) => m.handle_input(now, input),
            Some(input) => {
                // The stream ends or fails under the input.
                let id = input_id(&input).unwrap_or(RequestId(0));
                m.handle_input(now, Input::StreamEnd { id });
            }
            None => {
                if let Some(t) = m.poll_timeout() {
                    now = now.max(t);
                    m.handle_timeout(now);
                }
            }
        }
        if s.closed {
            break;
        }
    }
    s.pump(&mut m, st);
}

pub fn run(threads: usize, target: u64) -> Stats {
    let _capture = super::panics::PanicCapture::install();
    let replay = std::env::var("S09_ZK_SEED")
        .ok()
        .and_then(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok());
    let started = Instant::now();
    let threads = threads.max(1);
    let results: Vec<Stats> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| scope.spawn(move || run_thread(t, threads, target, replay)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    let mut total = Stats::default();
    for st in &results {
        total.merge(st);
    }
    total.elapsed = started.elapsed();
    total
}

fn run_thread(t: usize, threads: usize, target: u64, replay: Option<u64>) -> Stats {
    let mut st = Stats::default();
    if replay.is_some() && t > 0 {
        return st;
    }
    let share = target.div_ceil(threads as u64);
    let mut i: u64 = 0;
    while st.sessions < share {
        let seed = replay.unwrap_or_else(|| mix(0x2c00_0000 ^ ((t as u64) << 40) ^ i));
        i += 1;
        let mut one = Stats::default();
        in_case(true);
        let r = catch_unwind(AssertUnwindSafe(|| session(seed, &mut one)));
        in_case(false);
        let grants_before = st.false_grants;
        st.merge(&one);
        if r.is_err() {
            st.panics += 1;
            st.sessions += u64::from(one.sessions == 0);
            let why = take_last_panic().unwrap_or_default();
            if st.samples.len() < 8 {
                st.samples.push(format!(
                    "seed {seed:#x} (S09_ZK_SEED={seed:x}) panicked: {why}"
                ));
            }
        } else if st.false_grants > grants_before && st.samples.len() < 8 {
            st.samples.push(format!(
                "seed {seed:#x} (S09_ZK_SEED={seed:x}) granted against the foreign holder"
            ));
        }
        if replay.is_some() {
            break;
        }
    }
    st
}
