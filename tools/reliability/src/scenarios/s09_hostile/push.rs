//! Part 5: hostile push wake-up streams (Redis subscriptions).
//!
//! - The decoders directly: `SseSplitter` (Upstash's server-sent events)
//!   and `PushDecoder` on both protocols, fed streams made of valid frames,
//!   hostile frames (huge lines, invalid UTF-8, NUL bytes, missing fields,
//!   unbalanced or deeply nested JSON, the other protocol's framing, CR-only
//!   line ends) and mutations, cut at random bytes (down to single bytes):
//!   no panic, memory bounded (a line over `MAX_LINE_BYTES` is refused the
//!   moment it grows past it, and only then; a JSON object over
//!   `MAX_MESSAGE_BYTES` likewise), and valid streams decode to the same
//!   frames however they are cut.
//! - Waiting acquires against a lock held forever, every subscription
//!   answered by a hostile stream (trickled in over the wait, floods of
//!   messages and confirmations, garbage, streams that end, fail or stay
//!   silent): the acquire never gets the lock, never panics, and ends
//!   within its wait bound (`For(w)`: by `w` + two request timeouts, the
//!   round in flight at the deadline and its cleanup).
//! - `hostile_stream` is also what 9a's sessions answer a subscription
//!   with, sometimes, in their hostile share.
//!
//! A reported seed replays alone with `S09_PUSH_SEED=<hex>` (and
//! `S09_PUSH_TRACE=1` prints the waiting session step by step);
//! `S09_ONLY_PUSH=1` runs this part of scenario 9 alone.

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use edgelock::core::redis::{
    RedisConfig, RedisMachine, RedisNode, RedisProtocol, RedlockConfig, RedlockMachine,
};
use edgelock::core::{
    AcquireOptions, Event, Input, LockMachine, LockMachineExt, Millis, Outcome, RequestId,
    SeededEntropy, Transmit, TransportError, Wait,
};
use edgelock::internals::json_stream::{JsonObjectSplitter, MAX_MESSAGE_BYTES};
use edgelock::internals::redis::subscription::{PushDecoder, PushFrame};
use edgelock::internals::sse_stream::{SseError, SseSplitter, MAX_LINE_BYTES};
use serde_json::json;

use super::models::{push_event, subscription_channel, Proto, RedisModel, Reply};
use super::mutate::{mutate_body, split};
use super::panics::{in_case, take_last_panic};
use super::rng::{mix, Rng};
use super::{leak_count, SENTINEL};

#[derive(Clone, Debug, Default)]
pub struct Stats {
    /// Direct decoder cases (one stream through every decoder).
    pub decoder_cases: u64,
    /// Chunks fed to the decoders.
    pub decoder_chunks: u64,
    pub decoder_bytes: u64,
    /// Lines over `MAX_LINE_BYTES` refused / JSON objects over `MAX_MESSAGE_BYTES` refused.
    pub long_lines_refused: u64,
    pub huge_objects_refused: u64,
    /// Frames decoded from the hostile streams (forged ones included).
    pub frames: u64,
    /// Broken promises: a line or object past its bound accepted, a refusal
    /// below it, a value over the bound returned, a valid stream decoded
    /// differently when cut.
    pub violations: u64,
    pub samples: Vec<String>,
    /// Waiting acquires against hostile streams.
    pub wait_sessions: u64,
    pub streams_answered: u64,
    pub stream_inputs: u64,
    /// Waits that ended past their bound, or never.
    pub overruns: u64,
    /// Acquire attempts that started after their wait's deadline, and the
    /// sessions with one.
    pub late_attempts: u64,
    pub late_sessions: u64,
    /// Longest end past the wait in sessions without a late attempt.
    pub max_end_past_wait_in_time: u64,
    /// Waits that got the lock (held forever by another owner).
    pub wrongly_acquired: u64,
    /// Longest end past the wait (ms), over every session.
    pub max_end_past_wait: u64,
    /// Script requests the waiting machines sent.
    pub attempts: u64,
    pub error_texts: u64,
    pub sentinel_hits: u64,
    pub panics: u64,
    pub elapsed: Duration,
    /// Time spent in decoder cases / waiting sessions (all threads).
    pub decoder_time: Duration,
    pub wait_time: Duration,
}

impl Stats {
    pub fn merge(&mut self, o: &Stats) {
        self.decoder_cases += o.decoder_cases;
        self.decoder_chunks += o.decoder_chunks;
        self.decoder_bytes += o.decoder_bytes;
        self.long_lines_refused += o.long_lines_refused;
        self.huge_objects_refused += o.huge_objects_refused;
        self.frames += o.frames;
        self.violations += o.violations;
        self.wait_sessions += o.wait_sessions;
        self.streams_answered += o.streams_answered;
        self.stream_inputs += o.stream_inputs;
        self.overruns += o.overruns;
        self.late_attempts += o.late_attempts;
        self.late_sessions += o.late_sessions;
        self.max_end_past_wait_in_time = self
            .max_end_past_wait_in_time
            .max(o.max_end_past_wait_in_time);
        self.wrongly_acquired += o.wrongly_acquired;
        self.max_end_past_wait = self.max_end_past_wait.max(o.max_end_past_wait);
        self.attempts += o.attempts;
        self.error_texts += o.error_texts;
        self.sentinel_hits += o.sentinel_hits;
        self.panics += o.panics;
        self.elapsed = self.elapsed.max(o.elapsed);
        self.decoder_time += o.decoder_time;
        self.wait_time += o.wait_time;
        for s in &o.samples {
            if self.samples.len() < 8 {
                self.samples.push(s.clone());
            }
        }
    }

    fn violation(&mut self, what: String) {
        self.violations += 1;
        if self.samples.len() < 8 {
            self.samples.push(what);
        }
    }
}

const CHANNEL: &str = "edgelock:wake:0123456789abcdef0123456789abcdef";

/// One hostile frame (or fragment) for a stream of `proto`.
/// `huge`: sometimes a JSON object past `MAX_MESSAGE_BYTES` (4 MiB); the
/// large frames (64 KiB and more) come `large_pct` % as often as the others.
fn hostile_frame(
    rng: &mut Rng,
    proto: Proto,
    channel: &str,
    huge: bool,
    large_pct: u64,
) -> Vec<u8> {
    let other = if proto == Proto::Upstash {
        Proto::Webdis
    } else {
        Proto::Upstash
    };
    let mut pick = rng.below(24);
    while matches!(pick, 0 | 1 | 2 | 16) && !rng.chance(large_pct) {
        pick = rng.below(24);
    }
    match pick {
        // Huge lines: just over the SSE bound, or far over it, without a newline.
        0 => {
            let n = MAX_LINE_BYTES + 1 + rng.below(3) * rng.below(MAX_LINE_BYTES);
            let mut v = b"data: message,".to_vec();
            v.resize(n, b'x');
            v
        }
        // A long line that still fits (then a newline).
        1 => {
            let mut v = format!("data: message,{channel},").into_bytes();
            v.resize(MAX_LINE_BYTES - 1, b'y');
            v.extend_from_slice(b"\n\n");
            v
        }
        // A JSON string that never closes (rarely past the 4 MiB bound).
        2 => {
            let n = if huge && rng.chance(3) {
                MAX_MESSAGE_BYTES + 16
            } else {
                10_000 + rng.below(200_000)
            };
            let mut v = br#"{"SUBSCRIBE":["message","ch",""#.to_vec();
            v.resize(n, b'z');
            v
        }
        3 => b"\xff\xfe\xfd\xc0\x80\xed\xa0\x80".to_vec(),
        4 => format!("data: message,{channel},\u{0}\u{0}released:\u{0}1\n\n").into_bytes(),
        5 => [
            b"data: message,".as_slice(),
            channel.as_bytes(),
            b",\xff\xfe\n\n",
        ]
        .concat(),
        6 => [
            br#"{"SUBSCRIBE":["message",""#.as_slice(),
            channel.as_bytes(),
            b"\",\"\xff\xc3\x28\"]}",
        ]
        .concat(),
        7 => b"\0\0\0\0".to_vec(),
        // Missing fields.
        8 => b"data: message\n\n".to_vec(),
        9 => format!("data: subscribe,{channel}\n\n").into_bytes(),
        10 => br#"{"SUBSCRIBE":["message"]}"#.to_vec(),
        11 => format!(r#"{{"SUBSCRIBE":["subscribe","{channel}"]}}"#).into_bytes(),
        12 => br#"{"SUBSCRIBE":{}}"#.to_vec(),
        13 => br#"{"GET":"x"}"#.to_vec(),
        // Unbalanced / deep JSON.
        14 => br#"{"SUBSCRIBE":["message","#.to_vec(),
        15 => b"]}]}".to_vec(),
        16 => {
            let d = *rng.pick(&[64usize, 129, 1_000, 100_000]);
            [
                br#"{"SUBSCRIBE":"#.to_vec(),
                b"[".repeat(d),
                b"]".repeat(d),
                b"}".to_vec(),
            ]
            .concat()
        }
        // The other protocol's framing; CR-only line ends.
        17 => push_event(other, "message", channel, &json!("released:1")),
        18 => format!("data: message,{channel},released:1\r")
            .repeat(1 + rng.below(50))
            .into_bytes(),
        // Floods of forged confirmations and messages (each wakes the waiter).
        19 => (0..1 + rng.below(500))
            .flat_map(|i| push_event(proto, "message", channel, &json!(format!("released:{i}"))))
            .collect(),
        20 => (0..1 + rng.below(200))
            .flat_map(|i| push_event(proto, "subscribe", channel, &json!(i)))
            .collect(),
        // Other kinds, comments, fields: skipped by the SSE decoder.
        21 => b": ping\n\nevent: x\nid: 9\nretry: 0\n\ndata: unsubscribe,x,0\n\n".to_vec(),
        // The secret, echoed.
        22 => push_event(proto, "message", channel, &json!(format!("ERR {SENTINEL}"))),
        _ => {
            let n = 1 + rng.below(64);
            rng.bytes(n)
        }
    }
}

/// A hostile answer to a subscription request `id`: confirmations, messages
/// and hostile frames in some order, sometimes mutated, cut at random
/// bytes; then an end, a failure, or nothing (the stream stays open).
pub fn hostile_stream(rng: &mut Rng, proto: Proto, id: RequestId, channel: &str) -> Vec<Input> {
    let mut body = Vec::new();
    for _ in 0..1 + rng.below(6) {
        let frame = match rng.below(5) {
            0 => push_event(proto, "subscribe", channel, &json!(1)),
            1 => push_event(
                proto,
                "message",
                channel,
                &json!(format!("released:{}", rng.next_u64() >> 1)),
            ),
            _ => hostile_frame(rng, proto, channel, false, 10),
        };
        let frame = if frame.len() < 4096 && rng.chance(20) {
            mutate_body(rng, &frame, SENTINEL)
        } else {
            frame
        };
        body.extend_from_slice(&frame);
    }
    let mut inputs: Vec<Input> = cut(rng, &body)
        .into_iter()
        .map(|data| Input::Chunk { id, data })
        .collect();
    match rng.below(4) {
        0 => inputs.push(Input::StreamEnd { id }),
        1 => inputs.push(Input::Failed {
            id,
            error: TransportError::Io("stream reset".into()),
        }),
        2 if rng.chance(20) => inputs.push(Input::Response {
            id,
            status: *rng.pick(&[200u16, 400, 401, 500, 503]),
            body: body.clone(),
        }),
        _ => {}
    }
    inputs
}

/// `data` cut at 0–7 random bytes (a short one sometimes into single
/// bytes): frames split anywhere, at a bounded number of inputs.
fn cut(rng: &mut Rng, data: &[u8]) -> Vec<Vec<u8>> {
    if data.len() < 256 && rng.chance(20) {
        return data.iter().map(|b| vec![*b]).collect();
    }
    let mut cuts: Vec<usize> = (0..rng.below(8))
        .map(|_| rng.below(data.len() + 1))
        .collect();
    cuts.sort_unstable();
    cuts.dedup();
    let mut out = Vec::new();
    let mut start = 0;
    for c in cuts.into_iter().chain(std::iter::once(data.len())) {
        if c > start {
            out.push(data[start..c].to_vec());
            start = c;
        }
    }
    if out.is_empty() {
        out.push(Vec::new());
    }
    out
}

// ---- the decoders directly ---------------------------------------------------

/// A valid stream of `proto` and the frames it must decode to.
fn valid_stream(rng: &mut Rng, proto: Proto) -> (Vec<u8>, Vec<PushFrame>) {
    let mut bytes = Vec::new();
    let mut frames = Vec::new();
    for i in 0..1 + rng.below(8) {
        if i == 0 || rng.chance(20) {
            bytes.extend(push_event(proto, "subscribe", CHANNEL, &json!(1)));
            frames.push(PushFrame::Subscribed);
        } else {
            // Payloads with commas, spaces, quotes and escapes (never a line break).
            let payload = format!(
                "released:{}{}",
                rng.below(1_000_000),
                rng.pick(&["", ",x", " a b", "\"q\"", "\\\\", "é"])
            );
            bytes.extend(push_event(proto, "message", CHANNEL, &json!(payload)));
            frames.push(PushFrame::Message(payload.into_bytes()));
        }
        if proto == Proto::Upstash && rng.chance(10) {
            bytes.extend_from_slice(b": keep-alive\n\n");
        }
    }
    (bytes, frames)
}

fn protocol(p: Proto) -> RedisProtocol {
    match p {
        Proto::Upstash => RedisProtocol::Upstash,
        Proto::Webdis => RedisProtocol::Webdis,
    }
}

/// Feeds `chunks` to a fresh SSE splitter, checking its bound.
fn check_sse(chunks: &[Vec<u8>], st: &mut Stats) {
    let mut s = SseSplitter::new();
    // Bytes of the line in progress, as the splitter must count them.
    let mut line = 0usize;
    for c in chunks {
        st.decoder_chunks += 1;
        st.decoder_bytes += c.len() as u64;
        // The first byte (if any) that takes a line past the bound.
        let mut over = false;
        let mut l = line;
        for &b in c {
            if b == b'\n' {
                l = 0;
            } else {
                if l >= MAX_LINE_BYTES {
                    over = true;
                    break;
                }
                l += 1;
            }
        }
        match s.push(c) {
            Ok(values) if over => {
                st.violation(format!(
                    "SseSplitter accepted a line longer than {MAX_LINE_BYTES} bytes ({} values)",
                    values.len()
                ));
                return;
            }
            Ok(values) => {
                line = l;
                if let Some(v) = values.iter().find(|v| v.len() > MAX_LINE_BYTES) {
                    st.violation(format!("SseSplitter returned a {}-byte value", v.len()));
                }
            }
            Err(SseError::TooLarge) if over => {
                st.long_lines_refused += 1;
                return;
            }
            Err(e) => {
                st.violation(format!(
                    "SseSplitter refused a stream within its bound: {e:?}"
                ));
                return;
            }
        }
    }
}

/// Feeds `chunks` to a fresh JSON splitter (webdis framing), checking its bound.
fn check_json(chunks: &[Vec<u8>], st: &mut Stats) {
    let mut s = JsonObjectSplitter::new();
    for c in chunks {
        match s.push(c) {
            Ok(objs) => {
                if let Some(o) = objs.iter().find(|o| o.len() > MAX_MESSAGE_BYTES + 1) {
                    st.violation(format!(
                        "JsonObjectSplitter returned a {}-byte object",
                        o.len()
                    ));
                }
            }
            Err(edgelock::internals::json_stream::SplitError::TooLarge) => {
                st.huge_objects_refused += 1;
                return;
            }
            Err(_) => return,
        }
    }
}

/// Feeds `chunks` to a fresh push decoder; the frames up to its first error.
fn decode(proto: Proto, chunks: &[Vec<u8>], st: &mut Stats) -> Result<Vec<PushFrame>, String> {
    let mut d = PushDecoder::new(protocol(proto));
    let mut frames = Vec::new();
    for c in chunks {
        match d.push(c) {
            Ok(f) => frames.extend(f),
            Err(e) => {
                // The reason never quotes the stream (it may hold anything).
                let (hits, _) = leak_count(&e);
                st.error_texts += 1;
                st.sentinel_hits += hits as u64;
                if e.len() > 200 {
                    st.violation(format!("a push decoder error of {} bytes", e.len()));
                }
                // After an error the engine closes the stream; feeding on must not panic either.
                let _ = d.push(c);
                st.frames += frames.len() as u64;
                return Err(e);
            }
        }
    }
    st.frames += frames.len() as u64;
    Ok(frames)
}

fn decoder_case(rng: &mut Rng, st: &mut Stats) {
    st.decoder_cases += 1;
    let proto = if rng.chance(50) {
        Proto::Upstash
    } else {
        Proto::Webdis
    };
    if rng.chance(30) {
        // Valid: any cut gives the expected frames.
        let (bytes, want) = valid_stream(rng, proto);
        let whole = decode(proto, std::slice::from_ref(&bytes), st);
        let cut = decode(proto, &split(rng, &bytes), st);
        if whole.as_ref() != Ok(&want) || cut.as_ref() != Ok(&want) {
            st.violation(format!(
                "{proto:?}: a valid stream decoded to {whole:?} whole, {cut:?} cut; want {want:?}"
            ));
        }
        return;
    }
    let mut body = Vec::new();
    for _ in 0..1 + rng.below(5) {
        let frame = match rng.below(4) {
            0 => valid_stream(rng, proto).0,
            _ => hostile_frame(rng, proto, CHANNEL, true, 40),
        };
        let frame = if frame.len() < 4096 && rng.chance(30) {
            mutate_body(rng, &frame, SENTINEL)
        } else {
            frame
        };
        body.extend_from_slice(&frame);
    }
    let chunks = split(rng, &body);
    check_sse(&chunks, st);
    check_json(&chunks, st);
    let _ = decode(Proto::Upstash, &chunks, st);
    let _ = decode(Proto::Webdis, &chunks, st);
}

// ---- waiting acquires against hostile streams --------------------------------

/// One waiting acquire (the lock held forever by another owner); every
/// subscription gets a hostile stream, part of it at once and the rest
/// trickled over the wait.
fn wait_session(seed: u64, st: &mut Stats) {
    let mut rng = Rng::new(seed);
    let mut now: Millis = 5_000_000;
    let ttl = *rng.pick(&[1_000u64, 3_000, 10_000]);
    let timeout = *rng.pick(&[50u64, 200, 500]).min(&(ttl / 3));
    let wait_ms = 50 + rng.below(4_000) as u64;
    if std::env::var("S09_PUSH_TRACE").is_ok() {
        eprintln!("ttl {ttl} timeout {timeout} wait {wait_ms}");
    }
    let n = *rng.pick(&[1usize, 1, 3, 5]);
    let mut nodes = Vec::new();
    let mut models = Vec::new();
    for i in 0..n {
        let proto = if rng.chance(50) {
            Proto::Upstash
        } else {
            Proto::Webdis
        };
        let url = format!("http://10.7.0.{}:{}", i + 1, 7000 + i);
        let node = match proto {
            Proto::Upstash => RedisNode::upstash(url.clone(), SENTINEL),
            Proto::Webdis => RedisNode::webdis(url.clone()),
        };
        let mut model = RedisModel::default();
        model.seed_foreign("{edgelock:w}", u64::MAX / 2);
        nodes.push(node);
        models.push((url, proto, model));
    }
    let entropy = Box::new(SeededEntropy::new(seed));
    let mut m: Box<dyn LockMachine> = if n == 1 {
        let mut cfg = RedisConfig::new(nodes.remove(0));
        cfg.ttl_ms = ttl;
        cfg.request_timeout_ms = timeout;
        cfg.retry_delay_ms = *rng.pick(&[0u64, 20, 100]);
        cfg.retry_jitter_ms = *rng.pick(&[0u64, 30]);
        cfg.max_subscriptions = *rng.pick(&[1usize, 64]);
        match RedisMachine::new(cfg, entropy) {
            Ok(m) => Box::new(m),
            Err(e) => return st.violation(format!("harness: {e}")),
        }
    } else {
        let mut cfg = RedlockConfig::new(nodes);
        cfg.ttl_ms = ttl;
        cfg.request_timeout_ms = timeout;
        cfg.retry_delay_ms = *rng.pick(&[0u64, 20, 100]);
        cfg.retry_jitter_ms = *rng.pick(&[0u64, 30]);
        cfg.max_subscriptions = *rng.pick(&[1usize, 2, 64]);
        match RedlockMachine::new(cfg, entropy) {
            Ok(m) => Box::new(m),
            Err(e) => return st.violation(format!("harness: {e}")),
        }
    };
    st.wait_sessions += 1;
    let start = now;
    // The round in flight at the deadline and its cleanup; and, since the
    // core starts one more attempt when a cleanup ran past the deadline,
    // that attempt and its cleanup.
    let bound = start + wait_ms + 4 * timeout + 2;
    let acquire_sha = edgelock::internals::redis::scripts::Script::Acquire.sha1();
    let is_acquire = |body: &[u8]| {
        let text = String::from_utf8_lossy(body);
        text.contains(&acquire_sha)
            || text.contains("edgelock acquire v")
            || text.contains("edgelock%20acquire%20v")
    };
    let mut late = 0u64;
    let op = match m.acquire(
        now,
        "w",
        &AcquireOptions {
            wait: Wait::For(wait_ms),
            ttl_ms: None,
        },
    ) {
        Ok(op) => op,
        Err(e) => return st.violation(format!("acquire refused: {e}")),
    };
    // Inputs by (due time, arrival order).
    let mut queue: BTreeMap<(Millis, u64), Input> = BTreeMap::new();
    let mut seq = 0u64;
    let trace = std::env::var("S09_PUSH_TRACE").is_ok();
    let mut ended: Option<(Millis, Result<Outcome, String>)> = None;
    for _ in 0..200_000 {
        while let Some(t) = m.poll_transmit() {
            match t {
                Transmit::Send(req) => {
                    if trace {
                        eprintln!(
                            "{:>6} -> #{} {} stream={} {}",
                            now - start,
                            req.id.0,
                            req.target,
                            req.stream,
                            String::from_utf8_lossy(&req.body[..req.body.len().min(60)])
                        );
                    }
                    let Some((_, proto, model)) = models.iter_mut().find(|(u, _, _)| {
                        req.target.url().is_some_and(|x| x.starts_with(u.as_str()))
                    }) else {
                        st.violation("a request to an unknown node".into());
                        continue;
                    };
                    let proto = *proto;
                    if let Some(channel) = req
                        .stream
                        .then(|| subscription_channel(&req, proto))
                        .flatten()
                    {
                        st.streams_answered += 1;
                        if rng.chance(10) {
                            continue; // never answered: the confirmation times out
                        }
                        for input in hostile_stream(&mut rng, proto, req.id, &channel) {
                            st.stream_inputs += 1;
                            // Part at once, the rest trickled over the wait (in order).
                            let at = if rng.chance(40) {
                                now
                            } else {
                                now + rng.below(wait_ms as usize + 500) as u64
                            };
                            seq += 1;
                            queue.insert((at, seq), input);
                        }
                    } else {
                        st.attempts += 1;
                        if now > start + wait_ms && is_acquire(&req.body) {
                            late += 1;
                        }
                        let reply = model.reply(&req, proto, now);
                        let input = match reply {
                            Reply::Whole { status, body } => Input::Response {
                                id: req.id,
                                status,
                                body,
                            },
                            Reply::Stream { .. } => Input::Failed {
                                id: req.id,
                                error: TransportError::Io("unexpected".into()),
                            },
                        };
                        let at = now + rng.below(timeout as usize / 2 + 1) as u64;
                        if !rng.chance(3) {
                            seq += 1;
                            queue.insert((at, seq), input);
                        }
                    }
                }
                t @ (Transmit::Open(_) | Transmit::Write { .. }) => {
                    panic!("an HTTP machine opened a byte stream: {t:?}")
                }
                Transmit::Cancel(id) => {
                    if trace {
                        eprintln!("{:>6} cancel #{}", now - start, id.0);
                    }
                    if !rng.chance(10) {
                        queue.retain(|_, i| i.id() != id);
                    }
                }
            }
        }
        while let Some(e) = m.poll_event() {
            if let Event::Completed { op: o, result } = e {
                if o == op {
                    let r = result.map_err(|e| {
                        let text = format!("{e} {e:?}");
                        st.error_texts += 1;
                        st.sentinel_hits += leak_count(&text).0 as u64;
                        e.code().to_string()
                    });
                    if trace {
                        eprintln!("{:>6} completed {r:?}", now - start);
                    }
                    ended = Some((now, r));
                }
            }
        }
        if ended.is_some() {
            break;
        }
        let next_input = queue.keys().next().map(|(t, _)| *t);
        let next = [next_input, m.poll_timeout()].into_iter().flatten().min();
        let Some(next) = next else { break };
        now = now.max(next);
        if now > bound + 60_000 {
            break;
        }
        if next_input.is_some_and(|t| t <= now) {
            if let Some((_, input)) = queue.pop_first() {
                if trace {
                    let d = match &input {
                        Input::Chunk { data, .. } => format!(
                            "chunk {:?}",
                            String::from_utf8_lossy(&data[..data.len().min(80)])
                        ),
                        Input::Response { status, body, .. } => format!(
                            "{status} {}",
                            String::from_utf8_lossy(&body[..body.len().min(80)])
                        ),
                        other => format!("{other:?}"),
                    };
                    eprintln!("{:>6} <- #{} {d}", now - start, input.id().0);
                }
                m.handle_input(now, input);
            }
        } else {
            if trace {
                eprintln!("{:>6} timer", now - start);
            }
            m.handle_timeout(now);
        }
    }
    match ended {
        Some((_, Ok(Outcome::Acquired(_)))) => {
            st.wrongly_acquired += 1;
            st.violation(format!(
                "session {seed:#x}: acquired a lock held forever by another owner"
            ));
        }
        Some((t, _)) if t > bound => {
            st.overruns += 1;
            st.violation(format!(
                "session {seed:#x}: For({wait_ms}) ended {} ms after it began (bound {})",
                t - start,
                bound - start
            ));
        }
        Some((t, _)) => {
            let past = (t - start).saturating_sub(wait_ms);
            st.max_end_past_wait = st.max_end_past_wait.max(past);
            if late == 0 {
                st.max_end_past_wait_in_time = st.max_end_past_wait_in_time.max(past);
            }
        }
        None => {
            st.overruns += 1;
            st.violation(format!(
                "session {seed:#x}: For({wait_ms}) never ended (stopped at +{} ms)",
                now - start
            ));
        }
    }
    if late > 0 {
        st.late_attempts += late / n as u64;
        st.late_sessions += 1;
        if st.samples.len() < 8 && st.late_sessions == 1 {
            st.samples.push(format!(
                "session {seed:#x}: an acquire attempt started after the For({wait_ms}) deadline"
            ));
        }
    }
    let _ = m.close(now);
}

/// `decoder_target` decoder cases and `wait_target` waiting sessions, on
/// `threads` threads: counts, with no time cap (a slow machine takes longer
/// and reaches the same counts).
pub fn run(threads: usize, decoder_target: u64, wait_target: u64) -> Stats {
    let _capture = super::panics::PanicCapture::install();
    let replay = std::env::var("S09_PUSH_SEED")
        .ok()
        .and_then(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok());
    let started = Instant::now();
    let results: Vec<Stats> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads.max(1))
            .map(|t| {
                scope.spawn(move || {
                    let mut st = Stats::default();
                    if replay.is_some() && t > 0 {
                        return st; // a replay runs once
                    }
                    let share = |n: u64| n.div_ceil(threads.max(1) as u64);
                    let mut i: u64 = 0;
                    while st.decoder_cases < share(decoder_target)
                        || st.wait_sessions < share(wait_target)
                    {
                        let seed =
                            replay.unwrap_or_else(|| mix(0x9055_0000 ^ ((t as u64) << 40) ^ i));
                        i += 1;
                        let mut case = Stats::default();
                        in_case(true);
                        let r = catch_unwind(AssertUnwindSafe(|| {
                            let mut rng = Rng::new(seed);
                            if st.decoder_cases < share(decoder_target) {
                                let t = Instant::now();
                                decoder_case(&mut rng, &mut case);
                                case.decoder_time += t.elapsed();
                            }
                            if st.wait_sessions < share(wait_target) {
                                let t = Instant::now();
                                wait_session(seed, &mut case);
                                case.wait_time += t.elapsed();
                            }
                        }));
                        in_case(false);
                        st.merge(&case);
                        if r.is_err() {
                            st.panics += 1;
                            let why = take_last_panic().unwrap_or_default();
                            if st.samples.len() < 8 {
                                st.samples.push(format!(
                                    "seed {seed:#x} (S09_PUSH_SEED={seed:x}) panicked: {why}"
                                ));
                            }
                        }
                        if replay.is_some() {
                            break;
                        }
                    }
                    st
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    let mut total = Stats::default();
    for r in &results {
        total.merge(r);
    }
    total.elapsed = started.elapsed();
    total
}
