//! RESP, the Redis serialization protocol, as bytes in and bytes out: the
//! codec of Redis over a byte stream (TCP, TLS), with no connection of its
//! own.
//!
//! - [`encode_command`] writes a [`RedisCommand`] as a RESP array of bulk
//!   strings (binary-safe: keys and tokens may hold `\r\n`), appending to a
//!   buffer so that pipelined commands share one write. Connection set-up
//!   (`HELLO 3`, `AUTH`, `SELECT`, `CLIENT SETNAME`) is ordinary commands.
//! - [`RespDecoder`] turns the bytes a connection receives, cut anywhere and
//!   coalesced in any way, into [`Frame`]s: replies in the order the
//!   commands were sent, and RESP3 push messages (`>`, what a subscribed
//!   connection receives) told apart from them.
//!
//! Replies map onto [`RedisValue`] as the HTTP codecs do:
//!
//! | RESP                                   | `RedisValue`                         |
//! |----------------------------------------|--------------------------------------|
//! | `+` simple string, `$` bulk string     | `Bulk`                               |
//! | `$-1`, `*-1`, `_` null                 | `Nil`                                |
//! | `:` integer; `#t` / `#f` boolean       | `Int` (booleans as 1 / 0)            |
//! | `,` double, `(` big number             | `Bulk` of their text                 |
//! | `=` verbatim string                    | `Bulk` without its `txt:` prefix     |
//! | `*` array, `~` set                     | `Array`                              |
//! | `%` map                                | flat `Array` of key, value, ...      |
//! | `-` error, `!` blob error              | `Error` (a reply, not a decoder error)|
//! | `\|` attribute                         | skipped: the value after it counts   |
//!
//! The decoder reads what a peer sends, so it assumes nothing of it: it
//! never panics, never reserves memory from a declared length (a
//! `$2147483647` header reserves nothing; a bulk string is buffered only as
//! its bytes arrive), and bounds nesting ([`MAX_DEPTH`]), bulk lengths
//! ([`MAX_BULK_BYTES`], Redis's own limit) and lines ([`MAX_LINE_BYTES`]).
//! Its errors say what was wrong, never the bytes (a reply may carry an
//! owner token). After an error it stays failed: the stream can no longer
//! be framed, and the connection is to be dropped.
//!
//! Cost: linear in the bytes fed however they are cut. Complete elements
//! of an aggregate are taken off the buffer as they arrive (the aggregates
//! being built are kept on a stack), a bulk string's header is read once,
//! the search for a line end resumes where it stopped, and consumed bytes
//! are dropped from the buffer's front once they are half of it.

use std::fmt;

use super::value::{RedisCommand, RedisValue};

/// Deepest nesting of aggregates (arrays, maps, sets, pushes, attributes)
/// accepted. Edgelock's replies nest two deep at most.
pub const MAX_DEPTH: usize = 64;

/// Longest bulk string accepted (Redis's own `proto-max-bulk-len`).
pub const MAX_BULK_BYTES: usize = 512 * 1024 * 1024;

/// Longest line (a simple string, an error, a number, a header) accepted,
/// its type byte included and its CRLF not. Larger values come as bulk strings.
pub const MAX_LINE_BYTES: usize = 64 * 1024;

/// Most elements an aggregate may declare (a map's pairs count twice). It
/// reserves nothing: elements are kept only as they arrive.
pub const MAX_AGGREGATE_LEN: usize = i32::MAX as usize;

/// Appends `cmd` to `out` as a RESP array of bulk strings.
pub fn encode_command(cmd: &RedisCommand, out: &mut Vec<u8>) {
    let payload: usize = cmd.args.iter().map(|a| a.len() + 16).sum();
    out.reserve(payload + 16);
    push_header(out, b'*', cmd.args.len());
    for arg in &cmd.args {
        push_header(out, b'$', arg.len());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
}

/// `<ty><n>\r\n`.
fn push_header(out: &mut Vec<u8>, ty: u8, n: usize) {
    out.push(ty);
    out.extend_from_slice(n.to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// One decoded frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    /// A reply, to the oldest command still unanswered.
    Reply(RedisValue),
    /// A RESP3 push (`>`): out-of-band data such as a published message
    /// (`["message", channel, payload]`), answering no command.
    Push(Vec<RedisValue>),
}

/// Why the stream cannot be decoded. The texts name what was wrong and never
/// quote the stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RespError {
    /// The bytes break the protocol (e.g. "an invalid bulk length").
    Protocol(&'static str),
    /// A declared or growing size past its bound (e.g. "a bulk string
    /// longer than 512 MiB").
    TooLarge(&'static str),
    /// Aggregates nested deeper than [`MAX_DEPTH`].
    TooDeep,
}

impl fmt::Display for RespError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RespError::Protocol(what) => write!(f, "RESP protocol error: {what}"),
            RespError::TooLarge(what) => write!(f, "RESP reply too large: {what}"),
            RespError::TooDeep => write!(
                f,
                "RESP reply too deep: aggregates nested more than {MAX_DEPTH} levels"
            ),
        }
    }
}

impl std::error::Error for RespError {}

/// What an aggregate being built becomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Aggregate {
    /// `*` array, `%` map (flattened), `~` set.
    Array,
    /// `>` push (top level only).
    Push,
    /// `|` attribute: read, then dropped.
    Attribute,
}

/// A string whose header was read and whose bytes are awaited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Blob {
    /// `$` bulk string.
    Bulk,
    /// `=` verbatim string (`txt:` or `mkd:` before its text).
    Verbatim,
    /// `!` blob error.
    Error,
}

/// What one line (or one blob) of the stream is.
#[derive(Debug)]
enum Item {
    /// A whole value.
    Value(RedisValue),
    /// The header of an aggregate of this many elements.
    Open(Aggregate, usize),
    /// The header of a string of this many bytes.
    Blob(Blob, usize),
}

/// An aggregate whose elements are still arriving.
#[derive(Debug)]
struct Partial {
    kind: Aggregate,
    remaining: usize,
    items: Vec<RedisValue>,
}

/// A value completed at some level of nesting.
enum Done {
    Value(RedisValue),
    Push(Vec<RedisValue>),
    /// An attribute: nothing to hand on.
    Skipped,
}

/// Incremental RESP2/RESP3 decoder: [`feed`](Self::feed) it the bytes a
/// connection receives, then call [`next_frame`](Self::next_frame) until it
/// returns `Ok(None)` (more bytes needed).
#[derive(Debug, Default)]
pub struct RespDecoder {
    /// Received bytes; those before `pos` are consumed.
    buf: Vec<u8>,
    pos: usize,
    /// Where the search for the current line's end resumes (no `\n` in
    /// `pos..scanned`).
    scanned: usize,
    /// The string whose header was consumed and whose bytes start at `pos`.
    blob: Option<(Blob, usize)>,
    /// Aggregates being built, outermost first.
    stack: Vec<Partial>,
    /// Set by the first error, and returned from then on.
    failed: Option<RespError>,
}

impl RespDecoder {
    /// A decoder at the start of a stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends received bytes (ignored once the decoder failed).
    pub fn feed(&mut self, data: &[u8]) {
        if self.failed.is_some() {
            return;
        }
        self.compact();
        self.buf.extend_from_slice(data);
    }

    /// The next complete frame; `Ok(None)` when more bytes are needed. An
    /// error is final: every later call returns it again.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, RespError> {
        if let Some(e) = self.failed {
            return Err(e);
        }
        let result = self.decode();
        if let Err(e) = result {
            self.failed = Some(e);
            self.buf = Vec::new();
            self.pos = 0;
            self.scanned = 0;
            self.blob = None;
            self.stack = Vec::new();
        }
        result
    }

    /// Bytes received and not yet consumed.
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Bytes of memory the receive buffer holds: at most about twice the
    /// bytes fed, whatever lengths the stream declares (for bounds checks).
    pub fn buffer_capacity(&self) -> usize {
        self.buf.capacity()
    }

    /// Whether part of a frame was received: a stream closing now cut a
    /// reply short.
    pub fn in_frame(&self) -> bool {
        self.buffered() > 0 || self.blob.is_some() || !self.stack.is_empty()
    }

    /// The error the decoder failed with, if it did.
    pub fn error(&self) -> Option<RespError> {
        self.failed
    }

    /// Drops consumed bytes once they are half the buffer (each byte moves
    /// at most once per doubling: linear overall), and the memory of a large
    /// reply once it is consumed.
    fn compact(&mut self) {
        if self.pos == 0 || self.pos * 2 < self.buf.len() {
            return;
        }
        self.buf.drain(..self.pos);
        self.scanned = self.scanned.saturating_sub(self.pos);
        self.pos = 0;
        if self.buf.is_empty() && self.buf.capacity() > MAX_LINE_BYTES {
            self.buf = Vec::new();
        }
    }

    fn decode(&mut self) -> Result<Option<Frame>, RespError> {
        while let Some(item) = self.next_item()? {
            let done = match item {
                Item::Value(v) => Done::Value(v),
                Item::Blob(kind, len) => {
                    self.blob = Some((kind, len));
                    continue;
                }
                Item::Open(kind, len) => match self.open(kind, len)? {
                    Some(done) => done,
                    None => continue,
                },
            };
            if let Some(frame) = self.complete(done) {
                return Ok(Some(frame));
            }
        }
        Ok(None)
    }

    /// The next line or blob at `pos`, consumed; `None` until it is whole.
    fn next_item(&mut self) -> Result<Option<Item>, RespError> {
        if let Some((kind, len)) = self.blob {
            return self.take_blob(kind, len);
        }
        // A stream that is not RESP is refused at its first byte, not after
        // a line of it.
        if let Some(&ty) = self.buf.get(self.pos) {
            if !TYPE_BYTES.contains(&ty) {
                return Err(RespError::Protocol("an unknown type byte"));
            }
        }
        let Some((start, end)) = self.take_line()? else {
            return Ok(None);
        };
        parse_line(&self.buf[start..end]).map(Some)
    }

    /// The next line's bounds (without CRLF), consumed; `None` until its
    /// `\n` arrived.
    fn take_line(&mut self) -> Result<Option<(usize, usize)>, RespError> {
        let from = self.scanned.max(self.pos);
        let Some(i) = self.buf[from..].iter().position(|&b| b == b'\n') else {
            self.scanned = self.buf.len();
            // A last byte `\r` may be the line's end, not part of it.
            let pending = self.buffered() - usize::from(self.buf.last() == Some(&b'\r'));
            if pending > MAX_LINE_BYTES {
                return Err(RespError::TooLarge("a line longer than 64 KiB"));
            }
            return Ok(None);
        };
        let newline = from + i;
        if newline == self.pos || self.buf[newline - 1] != b'\r' {
            return Err(RespError::Protocol("a line not ended by CRLF"));
        }
        let line = (self.pos, newline - 1);
        if line.1 - line.0 > MAX_LINE_BYTES {
            return Err(RespError::TooLarge("a line longer than 64 KiB"));
        }
        self.pos = newline + 1;
        self.scanned = self.pos;
        Ok(Some(line))
    }

    /// The awaited string, consumed with its CRLF; `None` until it is whole.
    fn take_blob(&mut self, kind: Blob, len: usize) -> Result<Option<Item>, RespError> {
        // `len` is at most MAX_BULK_BYTES: no overflow.
        if self.buffered() < len + 2 {
            return Ok(None);
        }
        let end = self.pos + len;
        if &self.buf[end..end + 2] != b"\r\n" {
            return Err(RespError::Protocol("a string not followed by CRLF"));
        }
        let bytes = &self.buf[self.pos..end];
        let value = match kind {
            Blob::Bulk => RedisValue::Bulk(bytes.to_vec()),
            Blob::Error => RedisValue::Error(String::from_utf8_lossy(bytes).into_owned()),
            Blob::Verbatim => match bytes.get(3) {
                Some(b':') => RedisValue::Bulk(bytes[4..].to_vec()),
                _ => {
                    return Err(RespError::Protocol(
                        "a verbatim string without its format prefix",
                    ))
                }
            },
        };
        self.pos = end + 2;
        self.scanned = self.pos;
        self.blob = None;
        Ok(Some(Item::Value(value)))
    }

    /// Starts an aggregate of `len` elements; an empty one is done at once.
    fn open(&mut self, kind: Aggregate, len: usize) -> Result<Option<Done>, RespError> {
        if self.stack.len() >= MAX_DEPTH {
            return Err(RespError::TooDeep);
        }
        if kind == Aggregate::Push && !self.stack.is_empty() {
            return Err(RespError::Protocol("a push frame inside another value"));
        }
        let partial = Partial {
            kind,
            remaining: len,
            items: Vec::new(),
        };
        if len == 0 {
            return Ok(Some(partial.finish()));
        }
        self.stack.push(partial);
        Ok(None)
    }

    /// Hands a completed value to the aggregate around it, closing every
    /// aggregate it completes; the frame when the outermost one closes.
    fn complete(&mut self, mut done: Done) -> Option<Frame> {
        loop {
            let Some(top) = self.stack.last_mut() else {
                return match done {
                    Done::Value(v) => Some(Frame::Reply(v)),
                    Done::Push(items) => Some(Frame::Push(items)),
                    Done::Skipped => None,
                };
            };
            match done {
                // An attribute annotates the element after it: not one itself.
                Done::Skipped => return None,
                Done::Value(v) => {
                    if top.kind != Aggregate::Attribute {
                        top.items.push(v);
                    }
                }
                // Unreachable (`open` refuses a nested push); kept total.
                Done::Push(items) => top.items.push(RedisValue::Array(items)),
            }
            top.remaining -= 1;
            if top.remaining > 0 {
                return None;
            }
            let closed = self.stack.pop()?;
            done = closed.finish();
        }
    }
}

impl Partial {
    fn finish(self) -> Done {
        match self.kind {
            Aggregate::Array => Done::Value(RedisValue::Array(self.items)),
            Aggregate::Push => Done::Push(self.items),
            Aggregate::Attribute => Done::Skipped,
        }
    }
}

/// The first byte of every RESP2 and RESP3 value.
const TYPE_BYTES: &[u8] = b"+-:$*_#,(=!%~>|?;.";

/// One line (without CRLF): a simple value, or the header of a string or
/// an aggregate.
fn parse_line(line: &[u8]) -> Result<Item, RespError> {
    let Some((&ty, rest)) = line.split_first() else {
        return Err(RespError::Protocol(
            "an empty line where a value was expected",
        ));
    };
    let value = |v| Ok(Item::Value(v));
    match ty {
        b'+' | b',' | b'(' => value(RedisValue::Bulk(rest.to_vec())),
        b'-' => value(RedisValue::Error(
            String::from_utf8_lossy(rest).into_owned(),
        )),
        b':' => value(RedisValue::Int(parse_int(rest)?)),
        b'_' if rest.is_empty() => value(RedisValue::Nil),
        b'_' => Err(RespError::Protocol("a null with trailing bytes")),
        b'#' => match rest {
            b"t" => value(RedisValue::Int(1)),
            b"f" => value(RedisValue::Int(0)),
            _ => Err(RespError::Protocol("an invalid boolean")),
        },
        b'$' => match parse_len(rest, MAX_BULK_BYTES, "a bulk string longer than 512 MiB")? {
            None => value(RedisValue::Nil),
            Some(n) => Ok(Item::Blob(Blob::Bulk, n)),
        },
        b'=' | b'!' => {
            let blob = if ty == b'=' {
                Blob::Verbatim
            } else {
                Blob::Error
            };
            match parse_len(rest, MAX_BULK_BYTES, "a bulk string longer than 512 MiB")? {
                None => Err(RespError::Protocol("a null verbatim string or blob error")),
                Some(n) => Ok(Item::Blob(blob, n)),
            }
        }
        b'*' | b'~' | b'>' | b'%' | b'|' => parse_aggregate(ty, rest),
        b'?' | b';' | b'.' => Err(RespError::Protocol("a streamed string or aggregate")),
        _ => Err(RespError::Protocol("an unknown type byte")),
    }
}

/// The header of an aggregate of type `ty`.
fn parse_aggregate(ty: u8, rest: &[u8]) -> Result<Item, RespError> {
    const TOO_MANY: &str = "an aggregate of more than 2^31 elements";
    let len = parse_len(rest, MAX_AGGREGATE_LEN, TOO_MANY)?;
    let (kind, len) = match (ty, len) {
        (b'*', None) => return Ok(Item::Value(RedisValue::Nil)),
        (_, None) => return Err(RespError::Protocol("a null map, set or push")),
        (b'*' | b'~', Some(n)) => (Aggregate::Array, n),
        (b'>', Some(n)) => (Aggregate::Push, n),
        (b'%', Some(n)) => (Aggregate::Array, n),
        (_, Some(n)) => (Aggregate::Attribute, n),
    };
    // Maps and attributes hold a key and a value per entry.
    let len = if matches!(ty, b'%' | b'|') {
        len.checked_mul(2)
            .filter(|n| *n <= MAX_AGGREGATE_LEN)
            .ok_or(RespError::TooLarge(TOO_MANY))?
    } else {
        len
    };
    Ok(Item::Open(kind, len))
}

/// A length: `None` for `-1` (null), else at most `max`.
fn parse_len(text: &[u8], max: usize, too_large: &'static str) -> Result<Option<usize>, RespError> {
    if text == b"-1" {
        return Ok(None);
    }
    if text.is_empty() || text.len() > 20 || !text.iter().all(u8::is_ascii_digit) {
        return Err(RespError::Protocol("an invalid length"));
    }
    let mut n: u64 = 0;
    for &d in text {
        n = n
            .checked_mul(10)
            .and_then(|n| n.checked_add(u64::from(d - b'0')))
            .ok_or(RespError::TooLarge(too_large))?;
    }
    match usize::try_from(n) {
        Ok(n) if n <= max => Ok(Some(n)),
        _ => Err(RespError::TooLarge(too_large)),
    }
}

/// A signed 64-bit integer, as Redis writes it.
fn parse_int(text: &[u8]) -> Result<i64, RespError> {
    std::str::from_utf8(text)
        .ok()
        .filter(|t| !t.starts_with('+'))
        .and_then(|t| t.parse().ok())
        .ok_or(RespError::Protocol("an invalid integer"))
}

#[cfg(test)]
mod tests;
