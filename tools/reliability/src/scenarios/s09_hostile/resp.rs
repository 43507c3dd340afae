//! Part 6: hostile RESP streams (Redis over TCP) through the core's
//! `RespDecoder`, the codec the byte-stream transport will use.
//!
//! Each case is one stream, cut at random bytes (down to single bytes) and
//! fed chunk by chunk, every frame drained after each chunk:
//! - valid streams (RESP2 and every RESP3 type, pushes, attributes, binary
//!   payloads) must decode to the frames they hold however they are cut;
//! - hostile streams (declared lengths up to 2^63, 512 MiB bulk headers
//!   with a few bytes behind them, aggregates of 2^31 elements, nesting
//!   from 64 to 100 000 deep, lines past 64 KiB, broken lengths and line
//!   ends, unknown and streamed types, other protocols, random bytes, the
//!   echoed sentinel, and mutations of all of these) must never panic, keep
//!   the decoder's memory bounded by what was fed (buffer at most twice the
//!   bytes fed: nothing reserved from a declared length), end in an error
//!   that is final and quotes nothing of the stream, or decode.
//!
//! A reported seed replays alone with `S09_RESP_SEED=<hex seed>`.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use edgelock::core::redis::RedisValue;
use edgelock::internals::redis::resp::{
    Frame, RespDecoder, RespError, MAX_BULK_BYTES, MAX_DEPTH, MAX_LINE_BYTES,
};

use super::mutate::{mutate_body, split};
use super::panics::{in_case, take_last_panic};
use super::rng::{mix, Rng};
use super::{leak_count, SENTINEL};

#[derive(Clone, Debug, Default)]
pub struct Stats {
    /// Streams fed (valid and hostile).
    pub cases: u64,
    pub valid_cases: u64,
    pub chunks: u64,
    pub bytes: u64,
    pub frames: u64,
    pub pushes: u64,
    /// Streams ended by each kind of decoder error.
    pub protocol_errors: u64,
    pub too_large: u64,
    pub too_deep: u64,
    /// Largest buffer held, and the bytes fed by then, over every case.
    pub max_capacity: usize,
    /// Broken promises: a panic aside, any of the checks in the module doc.
    pub violations: u64,
    pub error_texts: u64,
    pub sentinel_hits: u64,
    pub panics: u64,
    pub samples: Vec<String>,
    pub elapsed: Duration,
}

impl Stats {
    pub fn merge(&mut self, o: &Stats) {
        self.cases += o.cases;
        self.valid_cases += o.valid_cases;
        self.chunks += o.chunks;
        self.bytes += o.bytes;
        self.frames += o.frames;
        self.pushes += o.pushes;
        self.protocol_errors += o.protocol_errors;
        self.too_large += o.too_large;
        self.too_deep += o.too_deep;
        self.max_capacity = self.max_capacity.max(o.max_capacity);
        self.violations += o.violations;
        self.error_texts += o.error_texts;
        self.sentinel_hits += o.sentinel_hits;
        self.panics += o.panics;
        self.elapsed = self.elapsed.max(o.elapsed);
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

// ---- valid streams ----------------------------------------------------------------

fn header(ty: u8, n: usize) -> Vec<u8> {
    let mut v = vec![ty];
    v.extend_from_slice(n.to_string().as_bytes());
    v.extend_from_slice(b"\r\n");
    v
}

/// Text without CR or LF (simple strings, errors, doubles).
fn line_text(rng: &mut Rng) -> Vec<u8> {
    let base = *rng.pick(&[
        b"OK".as_slice(),
        b"ERR unknown command",
        b"NOSCRIPT No matching script. Please use EVAL.",
        b"WRONGTYPE Operation against a key holding the wrong kind of value",
        b"released:42",
        SENTINEL.as_bytes(),
        b"",
        "\u{e9}t\u{e9}".as_bytes(),
    ]);
    base.to_vec()
}

/// Any bytes (bulk strings are binary-safe).
fn blob(rng: &mut Rng) -> Vec<u8> {
    match rng.below(4) {
        0 => {
            let n = rng.below(40);
            rng.bytes(n)
        }
        1 => format!("{SENTINEL}\r\n${}\r\n", rng.below(99)).into_bytes(),
        2 => b"*1\r\n:1\r\n".to_vec(),
        _ => line_text(rng),
    }
}

/// One valid value of any RESP type and what it decodes to.
fn valid_value(rng: &mut Rng, depth: usize) -> (Vec<u8>, RedisValue) {
    // Leaves only (0..=8) past depth 4.
    let pick = rng.below(if depth >= 4 { 9 } else { 13 });
    let text = |t: Vec<u8>| String::from_utf8_lossy(&t).into_owned();
    match pick {
        0 => {
            let t = line_text(rng);
            ([b"+", t.as_slice(), b"\r\n"].concat(), RedisValue::Bulk(t))
        }
        1 => {
            let b = blob(rng);
            (
                [header(b'$', b.len()), b.clone(), b"\r\n".to_vec()].concat(),
                RedisValue::Bulk(b),
            )
        }
        2 => {
            let i = *rng.pick(&[0i64, 1, -1, 42, i64::MAX, i64::MIN]);
            (format!(":{i}\r\n").into_bytes(), RedisValue::Int(i))
        }
        3 => {
            let t = line_text(rng);
            (
                [b"-", t.as_slice(), b"\r\n"].concat(),
                RedisValue::Error(text(t)),
            )
        }
        4 => (
            rng.pick(&[b"$-1\r\n".as_slice(), b"*-1\r\n", b"_\r\n"])
                .to_vec(),
            RedisValue::Nil,
        ),
        5 => {
            let t = rng.chance(50);
            let b = if t { b"#t\r\n" } else { b"#f\r\n" };
            (b.to_vec(), RedisValue::Int(i64::from(t)))
        }
        6 => {
            let t = *rng.pick(&[
                b",1.5".as_slice(),
                b",-inf",
                b",nan",
                b"(123456789012345678901234567890",
            ]);
            (
                [t, b"\r\n".as_slice()].concat(),
                RedisValue::Bulk(t[1..].to_vec()),
            )
        }
        7 => {
            let b = blob(rng);
            let body = [b"txt:".as_slice(), &b].concat();
            (
                [header(b'=', body.len()), body, b"\r\n".to_vec()].concat(),
                RedisValue::Bulk(b),
            )
        }
        8 => {
            let t = line_text(rng);
            let bytes = [header(b'!', t.len()), t.clone(), b"\r\n".to_vec()].concat();
            (bytes, RedisValue::Error(text(t)))
        }
        9 => aggregate(rng, depth, b'*'),
        10 => aggregate(rng, depth, b'~'),
        11 => aggregate(rng, depth, b'%'),
        // An attribute, then the value it annotates.
        _ => {
            let (attr, _) = aggregate(rng, depth, b'|');
            let (bytes, value) = valid_value(rng, depth + 1);
            ([attr, bytes].concat(), value)
        }
    }
}

/// An array (`*`, `~`), a map (`%`) or an attribute (`|`) of valid values.
fn aggregate(rng: &mut Rng, depth: usize, ty: u8) -> (Vec<u8>, RedisValue) {
    let n = rng.below(5);
    let per = if matches!(ty, b'%' | b'|') { 2 } else { 1 };
    let mut bytes = header(ty, n);
    let mut items = Vec::new();
    for _ in 0..n * per {
        let (b, v) = valid_value(rng, depth + 1);
        bytes.extend(b);
        items.push(v);
    }
    (bytes, RedisValue::Array(items))
}

/// A valid stream of 1–8 frames (replies and pushes) and the frames.
fn valid_stream(rng: &mut Rng) -> (Vec<u8>, Vec<Frame>) {
    let mut bytes = Vec::new();
    let mut frames = Vec::new();
    for _ in 0..1 + rng.below(8) {
        if rng.chance(20) {
            let (b, v) = aggregate(rng, 1, b'*');
            bytes.push(b'>');
            bytes.extend_from_slice(&b[1..]);
            let RedisValue::Array(items) = v else {
                unreachable!()
            };
            frames.push(Frame::Push(items));
        } else {
            let (b, v) = valid_value(rng, 0);
            bytes.extend(b);
            frames.push(Frame::Reply(v));
        }
    }
    (bytes, frames)
}

// ---- hostile streams --------------------------------------------------------------

/// One hostile frame (or fragment); the large ones (64 KiB and more) come
/// `large_pct` % as often as the others.
fn hostile_frame(rng: &mut Rng, large_pct: u64) -> Vec<u8> {
    let mut pick = rng.below(26);
    while matches!(pick, 0..=3) && !rng.chance(large_pct) {
        pick = rng.below(26);
    }
    match pick {
        0..=3 => large_frame(rng, pick),
        4..=11 => broken_frame(rng, pick),
        // The secret, echoed in errors and strings.
        12 => format!("-ERR wrong password {SENTINEL}\r\n").into_bytes(),
        13 => format!("${}\r\n{SENTINEL}\r\n", SENTINEL.len()).into_bytes(),
        14 => format!("${SENTINEL}\r\n").into_bytes(),
        15 => format!(":{SENTINEL}\r\n").into_bytes(),
        16 => format!("={}\r\n{SENTINEL}\r\n", SENTINEL.len()).into_bytes(),
        // An aggregate cut off, a header without its elements.
        17 => header(*rng.pick(b"*%~>|"), 1 + rng.below(100)),
        18 => {
            let (b, _) = valid_stream(rng);
            b[..rng.below(b.len())].to_vec()
        }
        _ => {
            let n = 1 + rng.below(64);
            rng.bytes(n)
        }
    }
}

/// Frames at and past the decoder's bounds (`pick` 0–3).
fn large_frame(rng: &mut Rng, pick: usize) -> Vec<u8> {
    match pick {
        // Nesting at, just past and far past the cap.
        0 => {
            let unit = *rng.pick(&[
                b"*1\r\n".as_slice(),
                b"%1\r\n+k\r\n",
                b"~1\r\n",
                b"|1\r\n+k\r\n+v\r\n",
            ]);
            let depth = *rng.pick(&[MAX_DEPTH, MAX_DEPTH + 1, 1_000, 100_000]);
            [unit.repeat(depth), b":1\r\n".to_vec()].concat()
        }
        // Lines at, just past and far past the cap, with or without an end.
        1 => {
            let n = *rng.pick(&[MAX_LINE_BYTES, MAX_LINE_BYTES + 1, 4 * MAX_LINE_BYTES]);
            let mut v = vec![*rng.pick(b"+-:,(")];
            v.resize(n, b'x');
            if rng.chance(50) {
                v.extend_from_slice(b"\r\n");
            }
            v
        }
        // A large bulk string, whole or cut short.
        2 => {
            let n = 70_000 + rng.below(200_000);
            let mut v = header(b'$', n);
            let have = if rng.chance(50) { n } else { rng.below(n) };
            v.resize(v.len() + have, b'b');
            v.extend_from_slice(b"\r\n");
            v
        }
        // Many small elements.
        _ => {
            let n = 1_000 + rng.below(20_000);
            [header(b'*', n), b"_\r\n".repeat(n)].concat()
        }
    }
}

/// Huge declared lengths and broken framing (`pick` 4–11).
fn broken_frame(rng: &mut Rng, pick: usize) -> Vec<u8> {
    match pick {
        // Huge declared lengths, with a few bytes behind them.
        4 => [format!("${MAX_BULK_BYTES}\r\n").as_bytes(), b"abc"].concat(),
        5 => format!("${}\r\nabc", MAX_BULK_BYTES + 1).into_bytes(),
        6 => rng
            .pick(&[
                b"$2147483647\r\n".as_slice(),
                b"$9223372036854775807\r\n",
                b"$18446744073709551616\r\n",
                b"=2147483647\r\n",
                b"!4294967296\r\n",
            ])
            .to_vec(),
        7 => rng
            .pick(&[
                b"*2147483647\r\n:1\r\n".as_slice(),
                b"*2147483648\r\n",
                b"%1073741823\r\n+k\r\n",
                b"%1073741824\r\n",
                b">9223372036854775807\r\n",
                b"|4611686018427387904\r\n",
            ])
            .to_vec(),
        // Broken lengths and line ends.
        8 => rng
            .pick(&[
                b"$-2\r\n".as_slice(),
                b"$abc\r\n",
                b"$+1\r\nx\r\n",
                b"$\r\n",
                b"*-5\r\n",
                b"%-1\r\n",
                b"$ 3\r\nabc\r\n",
                b"$3\r\nabcdef\r\n",
                b"$3\r\nab\r\n",
            ])
            .to_vec(),
        9 => rng
            .pick(&[
                b"+OK\n".as_slice(),
                b"+OK\r\r\n",
                b"\r\n",
                b"\n",
                b":1\n:2\n",
                b"+OK\r",
            ])
            .to_vec(),
        10 => rng
            .pick(&[
                b":12a\r\n".as_slice(),
                b":\r\n",
                b":99999999999999999999\r\n",
                b"#x\r\n",
                b"_1\r\n",
                b"=3\r\nabc\r\n",
                b"*1\r\n>1\r\n:1\r\n",
            ])
            .to_vec(),
        // Streamed types, unknown types, other protocols.
        _ => rng
            .pick(&[
                b"$?\r\n;4\r\nHell\r\n;0\r\n".as_slice(),
                b"*?\r\n:1\r\n.\r\n",
                b"\0\0\0\0",
                b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}",
                b"{\"result\":\"OK\"}",
                b"data: message,ch,released:1\n\n",
                b"\x16\x03\x01\x02\x00\x01",
            ])
            .to_vec(),
    }
}

// ---- the decoder ------------------------------------------------------------------

/// What feeding a stream gave: its frames, and the error that ended it.
struct Fed {
    frames: Vec<Frame>,
    error: Option<RespError>,
}

/// Checks an error: final, the buffer dropped, a short text without the
/// sentinel.
fn check_error(d: &mut RespDecoder, e: RespError, chunk: &[u8], st: &mut Stats) {
    match e {
        RespError::Protocol(_) => st.protocol_errors += 1,
        RespError::TooLarge(_) => st.too_large += 1,
        RespError::TooDeep => st.too_deep += 1,
    }
    let text = format!("{e} {e:?}");
    st.error_texts += 1;
    let (full, piece) = leak_count(&text);
    st.sentinel_hits += (full + piece) as u64;
    if text.len() > 200 || full + piece > 0 {
        st.violation(format!(
            "a decoder error text of {} bytes: {text}",
            text.len()
        ));
    }
    d.feed(chunk);
    if d.next_frame() != Err(e) || d.buffered() != 0 || d.buffer_capacity() != 0 {
        st.violation(format!("the decoder went on after {e:?}"));
    }
}

/// Feeds `chunks` to a fresh decoder, draining frames after each, checking
/// its memory bound after each.
fn feed(chunks: &[Vec<u8>], st: &mut Stats) -> Fed {
    let mut d = RespDecoder::new();
    let mut out = Fed {
        frames: Vec::new(),
        error: None,
    };
    let mut fed = 0usize;
    for c in chunks {
        st.chunks += 1;
        st.bytes += c.len() as u64;
        fed += c.len();
        d.feed(c);
        loop {
            match d.next_frame() {
                Ok(Some(f)) => {
                    st.frames += 1;
                    st.pushes += u64::from(matches!(f, Frame::Push(_)));
                    out.frames.push(f);
                }
                Ok(None) => break,
                Err(e) => {
                    check_error(&mut d, e, c, st);
                    out.error = Some(e);
                    return out;
                }
            }
        }
        st.max_capacity = st.max_capacity.max(d.buffer_capacity());
        if d.buffered() > fed || d.buffer_capacity() > 2 * fed + 64 {
            st.violation(format!(
                "the decoder holds {} bytes ({} buffered) after {fed} fed",
                d.buffer_capacity(),
                d.buffered()
            ));
        }
    }
    out
}

fn case(rng: &mut Rng, st: &mut Stats) {
    st.cases += 1;
    if rng.chance(30) {
        st.valid_cases += 1;
        let (bytes, want) = valid_stream(rng);
        let whole = feed(std::slice::from_ref(&bytes), st);
        let cut = feed(&split(rng, &bytes), st);
        if whole.error.is_some()
            || cut.error.is_some()
            || whole.frames != want
            || cut.frames != want
        {
            st.violation(format!(
                "a valid stream decoded to {} frames whole ({:?}), {} cut ({:?}); want {}",
                whole.frames.len(),
                whole.error,
                cut.frames.len(),
                cut.error,
                want.len()
            ));
        }
        return;
    }
    let mut body = Vec::new();
    for _ in 0..1 + rng.below(5) {
        let frame = match rng.below(4) {
            0 => valid_stream(rng).0,
            _ => hostile_frame(rng, 15),
        };
        let frame = if frame.len() < 4096 && rng.chance(30) {
            mutate_body(rng, &frame, SENTINEL)
        } else {
            frame
        };
        body.extend_from_slice(&frame);
    }
    feed(&split(rng, &body), st);
}

/// Runs `target` cases on `threads` threads, each under `catch_unwind`.
pub fn run(threads: usize, target: u64) -> Stats {
    let _capture = super::panics::PanicCapture::install();
    let replay = std::env::var("S09_RESP_SEED")
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
        return st; // a replay runs once
    }
    let share = target.div_ceil(threads as u64);
    let mut i: u64 = 0;
    while st.cases < share {
        let seed = replay.unwrap_or_else(|| mix(0x7e5b_0000 ^ ((t as u64) << 40) ^ i));
        i += 1;
        let mut one = Stats::default();
        in_case(true);
        let r = catch_unwind(AssertUnwindSafe(|| case(&mut Rng::new(seed), &mut one)));
        in_case(false);
        st.merge(&one);
        if r.is_err() {
            st.panics += 1;
            let why = take_last_panic().unwrap_or_default();
            if st.samples.len() < 8 {
                st.samples.push(format!(
                    "seed {seed:#x} (S09_RESP_SEED={seed:x}) panicked: {why}"
                ));
            }
        }
        if replay.is_some() {
            break;
        }
    }
    st
}
