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

#[cfg(test)]
mod tests {
    use super::{encode_frame, FrameDecoder, JuteError, Reader, Writer, DEFAULT_MAX_FRAME_LEN};
    use proptest::prelude::*;

    #[test]
    fn writes_each_type_big_endian_with_length_prefixes() {
        let mut w = Writer::new();
        w.int(-2).long(0x0102_0304_0506_0708).bool(true).bool(false);
        w.buffer(Some(b"ab"))
            .buffer(None)
            .ustring(Some("é"))
            .ustring(None);
        w.vector(Some(&[7i32, 8]), |w, v| {
            w.int(*v);
        });
        w.vector::<i32>(None, |_, _| {});
        let bytes = w.finish().unwrap();
        let expected: Vec<u8> = [
            &[0xff, 0xff, 0xff, 0xfe][..],
            &[1, 2, 3, 4, 5, 6, 7, 8],
            &[1, 0],
            &[0, 0, 0, 2, b'a', b'b'],
            &[0xff; 4],
            &[0, 0, 0, 2, 0xc3, 0xa9],
            &[0xff; 4],
            &[0, 0, 0, 2, 0, 0, 0, 7, 0, 0, 0, 8],
            &[0xff; 4],
        ]
        .concat();
        assert_eq!(bytes, expected);
    }

    #[test]
    fn reads_back_what_was_written_nulls_included() {
        let mut w = Writer::new();
        w.int(i32::MIN)
            .long(i64::MAX)
            .bool(true)
            .buffer(Some(b""))
            .buffer(None);
        w.ustring(Some("/a/b")).ustring(None);
        w.vector(Some(&["x", "yz"]), |w, s| {
            w.ustring(Some(s));
        });
        let bytes = w.finish().unwrap();
        let mut r = Reader::new(&bytes);
        assert_eq!(r.int(), Ok(i32::MIN));
        assert_eq!(r.long(), Ok(i64::MAX));
        assert_eq!(r.bool(), Ok(true));
        assert_eq!(r.buffer(), Ok(Some(Vec::new())));
        assert_eq!(r.buffer(), Ok(None));
        assert_eq!(r.ustring(), Ok(Some("/a/b".to_owned())));
        assert_eq!(r.ustring(), Ok(None));
        let v = r.vector(4, |r| r.ustring().map(Option::unwrap_or_default));
        assert_eq!(v, Ok(Some(vec!["x".to_owned(), "yz".to_owned()])));
        assert_eq!(r.remaining(), 0);
        assert_eq!(
            r.int(),
            Err(JuteError::Truncated {
                needed: 4,
                available: 0
            })
        );
    }

    #[test]
    fn a_bool_is_any_non_zero_byte() {
        assert_eq!(Reader::new(&[2]).bool(), Ok(true));
        assert_eq!(Reader::new(&[0]).bool(), Ok(false));
    }

    #[test]
    fn refuses_bad_lengths_before_allocating() {
        let neg = (-2i32).to_be_bytes();
        assert_eq!(
            Reader::new(&neg).buffer(),
            Err(JuteError::NegativeLength(-2))
        );
        let huge = i32::MAX.to_be_bytes();
        assert_eq!(
            Reader::new(&huge).buffer(),
            Err(JuteError::LengthTooLarge {
                len: i32::MAX as usize,
                max: DEFAULT_MAX_FRAME_LEN
            })
        );
        let short = [0, 0, 0, 5, b'a', b'b'];
        assert_eq!(
            Reader::new(&short).buffer(),
            Err(JuteError::Truncated {
                needed: 5,
                available: 2
            })
        );
        // A count of 1000 elements of at least 4 bytes each, with 8 bytes left.
        let count = [&1000i32.to_be_bytes()[..], &[0; 8]].concat();
        let v = Reader::new(&count).vector(4, |r| r.int());
        assert_eq!(
            v,
            Err(JuteError::Truncated {
                needed: 4000,
                available: 8
            })
        );
        let bounded = [0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(
            Reader::with_max_len(&bounded, 8).buffer(),
            Err(JuteError::LengthTooLarge { len: 9, max: 8 })
        );
        let bad_utf8 = [0, 0, 0, 1, 0xff];
        assert_eq!(
            Reader::new(&bad_utf8).ustring(),
            Err(JuteError::InvalidUtf8)
        );
    }

    #[test]
    fn a_frame_is_its_body_behind_a_big_endian_length() {
        assert_eq!(encode_frame(b"abc"), vec![0, 0, 0, 3, b'a', b'b', b'c']);
        assert_eq!(encode_frame(b""), vec![0, 0, 0, 0]);
    }

    fn stream(bodies: &[&[u8]]) -> Vec<u8> {
        bodies.iter().flat_map(|b| encode_frame(b)).collect()
    }

    fn drain(d: &mut FrameDecoder) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        while let Some(frame) = d.next_frame().unwrap() {
            out.push(frame);
        }
        out
    }

    #[test]
    fn frames_fed_byte_by_byte_come_out_whole() {
        let bodies: [&[u8]; 3] = [b"first", b"", b"third frame"];
        let mut d = FrameDecoder::new();
        let mut got = Vec::new();
        for byte in stream(&bodies) {
            d.push(&[byte]);
            got.extend(drain(&mut d));
        }
        assert_eq!(got, bodies.iter().map(|b| b.to_vec()).collect::<Vec<_>>());
        assert_eq!(d.buffered(), 0);
    }

    #[test]
    fn coalesced_frames_come_out_one_by_one() {
        let bodies: [&[u8]; 3] = [b"a", b"bb", b"ccc"];
        let mut bytes = stream(&bodies);
        bytes.extend_from_slice(&[0, 0, 0, 4, b'd']); // the start of a fourth
        let mut d = FrameDecoder::new();
        d.push(&bytes);
        assert_eq!(
            drain(&mut d),
            vec![b"a".to_vec(), b"bb".to_vec(), b"ccc".to_vec()]
        );
        assert_eq!(d.buffered(), 5);
        d.push(b"ddd");
        assert_eq!(drain(&mut d), vec![b"dddd".to_vec()]);
    }

    #[test]
    fn refuses_negative_and_oversized_lengths_and_stays_failed() {
        let mut d = FrameDecoder::new();
        d.push(&(-1i32).to_be_bytes());
        assert_eq!(d.next_frame(), Err(JuteError::NegativeFrameLength(-1)));
        d.push(&encode_frame(b"ok"));
        assert_eq!(d.next_frame(), Err(JuteError::NegativeFrameLength(-1)));

        let max = DEFAULT_MAX_FRAME_LEN;
        let mut d = FrameDecoder::new();
        d.push(&((max + 1) as i32).to_be_bytes());
        assert_eq!(
            d.next_frame(),
            Err(JuteError::FrameTooLarge { len: max + 1, max })
        );
        let mut d = FrameDecoder::new();
        d.push(&(max as i32).to_be_bytes());
        assert_eq!(d.next_frame(), Ok(None), "the maximum itself is accepted");

        let mut d = FrameDecoder::with_max_len(3);
        d.push(&encode_frame(b"abc"));
        d.push(&encode_frame(b"abcd"));
        assert_eq!(d.next_frame(), Ok(Some(b"abc".to_vec())));
        assert_eq!(
            d.next_frame(),
            Err(JuteError::FrameTooLarge { len: 4, max: 3 })
        );
    }

    /// Reads `bytes` with a sequence of reads chosen by `ops` until one fails.
    fn read_arbitrarily(bytes: &[u8], ops: &[u8]) {
        let mut r = Reader::new(bytes);
        for op in ops {
            let ok = match op % 6 {
                0 => r.int().is_ok(),
                1 => r.long().is_ok(),
                2 => r.bool().is_ok(),
                3 => r.buffer().is_ok(),
                4 => r.ustring().is_ok(),
                _ => r.vector(4, |r| r.ustring()).is_ok(),
            };
            if !ok {
                break;
            }
        }
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic_the_reader(
            bytes in proptest::collection::vec(any::<u8>(), 0..256),
            ops in proptest::collection::vec(any::<u8>(), 0..32),
        ) {
            read_arbitrarily(&bytes, &ops);
        }

        #[test]
        fn arbitrary_chunks_never_panic_the_frame_decoder(
            chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 0..16),
            max in 0usize..64,
        ) {
            let mut d = FrameDecoder::with_max_len(max);
            for chunk in &chunks {
                d.push(chunk);
                while let Ok(Some(frame)) = d.next_frame() {
                    prop_assert!(frame.len() <= max);
                }
            }
        }

        #[test]
        fn any_cut_of_a_stream_yields_the_same_frames(
            bodies in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 0..8),
            cuts in proptest::collection::vec(1usize..20, 1..50),
        ) {
            let bytes: Vec<u8> = bodies.iter().flat_map(|b| encode_frame(b)).collect();
            let mut d = FrameDecoder::new();
            let mut got = Vec::new();
            let (mut at, mut cut) = (0, cuts.iter().cycle());
            while at < bytes.len() {
                let end = (at + cut.next().copied().unwrap_or(1)).min(bytes.len());
                d.push(&bytes[at..end]);
                got.extend(drain(&mut d));
                at = end;
            }
            prop_assert_eq!(got, bodies);
        }
    }
}
