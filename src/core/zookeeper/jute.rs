//! Jute, ZooKeeper's binary record encoding, and the length-prefixed framing
//! both directions of a client connection use (design 1.1, 1.2; sources
//! `zookeeper-jute/.../BinaryOutputArchive.java`, `BinaryInputArchive.java`,
//! `ClientCnxnSocket.java`).
//!
//! | jute type  | bytes                                              |
//! |------------|----------------------------------------------------|
//! | `int`      | i32 big-endian                                     |
//! | `long`     | i64 big-endian                                     |
//! | `boolean`  | one byte: written 0 / 1, read non-zero = true      |
//! | `buffer`   | i32 length then the bytes; null = length -1        |
//! | `ustring`  | i32 byte length then UTF-8; null = length -1       |
//! | `vector`   | i32 count then the elements; null = count -1       |
//!
//! [`Reader`] reads what a server sent, so it trusts nothing: a length is
//! checked against a bound and against the bytes left before anything is
//! allocated, a short read is [`JuteError::Truncated`], and no input makes it
//! panic. [`FrameDecoder`] cuts a received byte stream (split and coalesced
//! in any way) into frame bodies and refuses a length below 0 or above its
//! maximum, as the Java client does; after an error it stays failed, since
//! the stream can no longer be framed.

use std::fmt;

/// The largest frame body a client accepts unless configured otherwise:
/// `ZKClientConfig.CLIENT_MAX_PACKET_LENGTH_DEFAULT` (0xfffff, 1 MiB - 1),
/// which `jute.maxbuffer` overrides in the Java client.
pub(crate) const DEFAULT_MAX_FRAME_LEN: usize = 0xfffff;

/// Why bytes could not be read as jute (or framed). Messages name what was
/// wrong, never the bytes (a node's data may be a secret).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum JuteError {
    /// The record needs more bytes than the frame holds.
    Truncated { needed: usize, available: usize },
    /// A length or count below -1 (-1 alone means null).
    NegativeLength(i32),
    /// A length or count above the reader's bound.
    LengthTooLarge { len: usize, max: usize },
    /// A `ustring` that is not UTF-8.
    InvalidUtf8,
    /// A frame's length prefix is negative.
    NegativeFrameLength(i32),
    /// A frame's length prefix is above the decoder's maximum.
    FrameTooLarge { len: usize, max: usize },
    /// Something to encode is longer than an i32 length can say.
    EncodeTooLarge(usize),
}

impl fmt::Display for JuteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated { needed, available } => {
                write!(
                    f,
                    "jute record truncated: needs {needed} more bytes, {available} left"
                )
            }
            Self::NegativeLength(n) => write!(f, "jute length {n} is negative"),
            Self::LengthTooLarge { len, max } => {
                write!(f, "jute length {len} is above the bound {max}")
            }
            Self::InvalidUtf8 => f.write_str("jute ustring is not UTF-8"),
            Self::NegativeFrameLength(n) => write!(f, "ZooKeeper frame length {n} is negative"),
            Self::FrameTooLarge { len, max } => {
                write!(f, "ZooKeeper frame length {len} is above the maximum {max}")
            }
            Self::EncodeTooLarge(n) => write!(f, "{n} bytes do not fit a jute length"),
        }
    }
}

/// Appends jute values to a buffer. Lengths that do not fit an i32 are
/// remembered and reported by [`Writer::finish`] instead of being truncated.
#[derive(Debug, Default)]
pub(crate) struct Writer {
    buf: Vec<u8>,
    too_large: Option<usize>,
}

impl Writer {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    pub(crate) fn int(&mut self, v: i32) -> &mut Self {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }

    pub(crate) fn long(&mut self, v: i64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }

    pub(crate) fn bool(&mut self, v: bool) -> &mut Self {
        self.buf.push(u8::from(v));
        self
    }

    /// A length prefix; `None` writes -1 (null).
    fn length(&mut self, len: Option<usize>) {
        let Some(len) = len else {
            self.int(-1);
            return;
        };
        match i32::try_from(len) {
            Ok(n) => {
                self.int(n);
            }
            Err(_) => {
                self.too_large.get_or_insert(len);
                self.int(i32::MAX);
            }
        }
    }

    /// A `buffer`; `None` is null (length -1).
    pub(crate) fn buffer(&mut self, v: Option<&[u8]>) -> &mut Self {
        self.length(v.map(<[u8]>::len));
        self.buf.extend_from_slice(v.unwrap_or_default());
        self
    }

    /// A `ustring` (UTF-8 bytes; `None` is null). ZooKeeper's writer encodes
    /// per UTF-16 unit, which equals UTF-8 for every valid path (design 1.2).
    pub(crate) fn ustring(&mut self, v: Option<&str>) -> &mut Self {
        self.buffer(v.map(str::as_bytes))
    }

    /// A `vector<T>`: the count, then each element written by `each`.
    pub(crate) fn vector<T>(
        &mut self,
        v: Option<&[T]>,
        mut each: impl FnMut(&mut Self, &T),
    ) -> &mut Self {
        self.length(v.map(<[T]>::len));
        for item in v.unwrap_or_default() {
            each(self, item);
        }
        self
    }

    /// The bytes written, or the first length that did not fit.
    pub(crate) fn finish(self) -> Result<Vec<u8>, JuteError> {
        match self.too_large {
            Some(n) => Err(JuteError::EncodeTooLarge(n)),
            None => Ok(self.buf),
        }
    }
}

/// Reads jute values from one frame body.
#[derive(Debug, Clone)]
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    max_len: usize,
}

impl<'a> Reader<'a> {
    /// A reader whose lengths and counts are bounded by
    /// [`DEFAULT_MAX_FRAME_LEN`] (and always by the bytes left).
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Self::with_max_len(buf, DEFAULT_MAX_FRAME_LEN)
    }

    pub(crate) fn with_max_len(buf: &'a [u8], max_len: usize) -> Self {
        Self {
            buf,
            pos: 0,
            max_len,
        }
    }

    /// Bytes not read yet.
    pub(crate) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], JuteError> {
        let available = self.remaining();
        if n > available {
            return Err(JuteError::Truncated {
                needed: n,
                available,
            });
        }
        let out = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], JuteError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    pub(crate) fn int(&mut self) -> Result<i32, JuteError> {
        self.array().map(i32::from_be_bytes)
    }

    pub(crate) fn long(&mut self) -> Result<i64, JuteError> {
        self.array().map(i64::from_be_bytes)
    }

    pub(crate) fn bool(&mut self) -> Result<bool, JuteError> {
        self.array::<1>().map(|[b]| b != 0)
    }

    /// A length or count: `None` for -1 (null), an error below -1 or above
    /// the bound. `min_item` is the least bytes one item takes, so a count
    /// the remaining bytes cannot hold is refused before any allocation.
    fn length(&mut self, min_item: usize) -> Result<Option<usize>, JuteError> {
        let n = self.int()?;
        if n == -1 {
            return Ok(None);
        }
        let len = usize::try_from(n).map_err(|_| JuteError::NegativeLength(n))?;
        if len > self.max_len {
            return Err(JuteError::LengthTooLarge {
                len,
                max: self.max_len,
            });
        }
        let needed = len.saturating_mul(min_item);
        let available = self.remaining();
        if needed > available {
            return Err(JuteError::Truncated { needed, available });
        }
        Ok(Some(len))
    }

    /// A `buffer`; `None` for null.
    pub(crate) fn buffer(&mut self) -> Result<Option<Vec<u8>>, JuteError> {
        match self.length(1)? {
            None => Ok(None),
            Some(len) => Ok(Some(self.take(len)?.to_vec())),
        }
    }

    /// A `ustring`; `None` for null.
    pub(crate) fn ustring(&mut self) -> Result<Option<String>, JuteError> {
        match self.buffer()? {
            None => Ok(None),
            Some(bytes) => String::from_utf8(bytes)
                .map(Some)
                .map_err(|_| JuteError::InvalidUtf8),
        }
    }

    /// A `vector<T>` whose elements take at least `min_item` bytes each
    /// (4 for any element that starts with an int or a length); `None` for
    /// null.
    pub(crate) fn vector<T>(
        &mut self,
        min_item: usize,
        mut each: impl FnMut(&mut Self) -> Result<T, JuteError>,
    ) -> Result<Option<Vec<T>>, JuteError> {
        let Some(count) = self.length(min_item.max(1))? else {
            return Ok(None);
        };
        let mut out = Vec::with_capacity(count);
        for _ in 0..count {
            out.push(each(self)?);
        }
        Ok(Some(out))
    }
}

/// One frame: the body with its i32 big-endian length in front. Bodies come
/// from [`Writer::finish`] and are bounded by the frame maximum long before
/// an i32 overflows; a longer one would get the prefix `i32::MAX` and be
/// refused by the server.
pub(crate) fn encode_frame(body: &[u8]) -> Vec<u8> {
    let len = i32::try_from(body.len()).unwrap_or(i32::MAX);
    let mut out = Vec::with_capacity(4 + body.len());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(body);
    out
}

/// Cuts received bytes into frame bodies. Feed with [`FrameDecoder::push`],
/// then call [`FrameDecoder::next_frame`] until it returns `Ok(None)`.
#[derive(Debug, Clone)]
pub(crate) struct FrameDecoder {
    buf: Vec<u8>,
    /// Where the unread bytes of `buf` begin (consumed bytes are dropped in
    /// bulk, so a burst of small frames costs linear time).
    start: usize,
    max_len: usize,
    failed: Option<JuteError>,
}

impl Default for FrameDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl FrameDecoder {
    /// A decoder refusing bodies above [`DEFAULT_MAX_FRAME_LEN`].
    pub(crate) fn new() -> Self {
        Self::with_max_len(DEFAULT_MAX_FRAME_LEN)
    }

    pub(crate) fn with_max_len(max_len: usize) -> Self {
        Self {
            buf: Vec::new(),
            start: 0,
            max_len,
            failed: None,
        }
    }

    /// Appends received bytes (any cut of the stream).
    pub(crate) fn push(&mut self, bytes: &[u8]) {
        if self.failed.is_none() {
            self.buf.extend_from_slice(bytes);
        }
    }

    /// Bytes received and not yet returned in a frame.
    pub(crate) fn buffered(&self) -> usize {
        self.buf.len() - self.start
    }

    /// The next complete frame body, `Ok(None)` when more bytes are needed,
    /// or the error that ended the stream (the same error on every later
    /// call).
    pub(crate) fn next_frame(&mut self) -> Result<Option<Vec<u8>>, JuteError> {
        if let Some(err) = &self.failed {
            return Err(err.clone());
        }
        let pending = &self.buf[self.start..];
        let Some(prefix) = pending.get(..4) else {
            return Ok(None);
        };
        let len = i32::from_be_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]);
        let len = match self.check_len(len) {
            Ok(len) => len,
            Err(err) => {
                self.fail(err.clone());
                return Err(err);
            }
        };
        let Some(body) = pending.get(4..4 + len) else {
            return Ok(None);
        };
        let body = body.to_vec();
        self.start += 4 + len;
        self.compact();
        Ok(Some(body))
    }

    fn check_len(&self, len: i32) -> Result<usize, JuteError> {
        let n = usize::try_from(len).map_err(|_| JuteError::NegativeFrameLength(len))?;
        if n > self.max_len {
            return Err(JuteError::FrameTooLarge {
                len: n,
                max: self.max_len,
            });
        }
        Ok(n)
    }

    fn fail(&mut self, err: JuteError) {
        self.failed = Some(err);
        self.buf = Vec::new();
        self.start = 0;
    }

    /// Drops consumed bytes once they are at least half the buffer.
    fn compact(&mut self) {
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        } else if self.start >= self.buf.len() / 2 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
    }
}
