//! The RESP codec: every frame type, every cut of a pipeline, hostile
//! streams, and a property test (arbitrary replies encoded by a test-only
//! RESP2 encoder, decoded in arbitrary chunkings).

use proptest::prelude::*;

use super::{
    encode_command, Frame, RespDecoder, RespError, MAX_BULK_BYTES, MAX_DEPTH, MAX_LINE_BYTES,
};
use crate::core::redis::value::{RedisCommand, RedisValue};

fn bulk(b: &[u8]) -> RedisValue {
    RedisValue::Bulk(b.to_vec())
}

fn reply(v: RedisValue) -> Frame {
    Frame::Reply(v)
}

/// Every frame `chunks` decode to, fed one chunk at a time, and the error
/// that ended the stream, if any.
fn decode_chunks<'a>(
    chunks: impl IntoIterator<Item = &'a [u8]>,
) -> (Vec<Frame>, Option<RespError>) {
    let mut d = RespDecoder::new();
    let mut frames = Vec::new();
    for c in chunks {
        d.feed(c);
        loop {
            match d.next_frame() {
                Ok(Some(f)) => frames.push(f),
                Ok(None) => break,
                Err(e) => return (frames, Some(e)),
            }
        }
    }
    (frames, None)
}

/// The frames of a whole stream, which must decode without error.
fn decode_all(bytes: &[u8]) -> Vec<Frame> {
    let (frames, err) = decode_chunks([bytes]);
    assert_eq!(err, None);
    frames
}

/// The one frame `bytes` hold.
fn one(bytes: &[u8]) -> Frame {
    let frames = decode_all(bytes);
    assert_eq!(frames.len(), 1, "{frames:?}");
    frames.into_iter().next().unwrap()
}

/// The error a stream ends with.
fn error_of(bytes: &[u8]) -> RespError {
    decode_chunks([bytes]).1.expect("an error")
}

// ---- encoding ------------------------------------------------------------------

#[test]
fn encodes_a_command_as_an_array_of_bulk_strings() {
    let mut out = Vec::new();
    encode_command(&RedisCommand::new("SET").arg("k").arg("v1"), &mut out);
    assert_eq!(out, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2\r\nv1\r\n");
}

#[test]
fn encoding_is_binary_safe_and_appends_for_pipelining() {
    let mut out = b"prefix".to_vec();
    encode_command(&RedisCommand::new("GET").arg(b"a\r\nb\0"), &mut out);
    encode_command(&RedisCommand::new("PING").arg(""), &mut out);
    assert_eq!(
        out,
        b"prefix*2\r\n$3\r\nGET\r\n$5\r\na\r\nb\0\r\n*2\r\n$4\r\nPING\r\n$0\r\n\r\n"
    );
}

// ---- every frame type ------------------------------------------------------------

#[test]
fn decodes_resp2_types() {
    assert_eq!(one(b"+OK\r\n"), reply(bulk(b"OK")));
    assert_eq!(one(b"+\r\n"), reply(bulk(b"")));
    assert_eq!(
        one(b"-ERR unknown command\r\n"),
        reply(RedisValue::Error("ERR unknown command".into()))
    );
    assert_eq!(one(b":-42\r\n"), reply(RedisValue::Int(-42)));
    assert_eq!(
        one(b":9223372036854775807\r\n"),
        reply(RedisValue::Int(i64::MAX))
    );
    assert_eq!(one(b"$5\r\nhe\r\no\r\n"), reply(bulk(b"he\r\no")));
    assert_eq!(one(b"$0\r\n\r\n"), reply(bulk(b"")));
    assert_eq!(one(b"$-1\r\n"), reply(RedisValue::Nil));
    assert_eq!(one(b"*-1\r\n"), reply(RedisValue::Nil));
    assert_eq!(one(b"*0\r\n"), reply(RedisValue::Array(vec![])));
    assert_eq!(
        one(b"*3\r\n:1\r\n*2\r\n$1\r\na\r\n$-1\r\n*0\r\n"),
        reply(RedisValue::Array(vec![
            RedisValue::Int(1),
            RedisValue::Array(vec![bulk(b"a"), RedisValue::Nil]),
            RedisValue::Array(vec![]),
        ]))
    );
}

#[test]
fn decodes_resp3_types() {
    assert_eq!(one(b"_\r\n"), reply(RedisValue::Nil));
    assert_eq!(one(b"#t\r\n"), reply(RedisValue::Int(1)));
    assert_eq!(one(b"#f\r\n"), reply(RedisValue::Int(0)));
    assert_eq!(one(b",3.14\r\n"), reply(bulk(b"3.14")));
    assert_eq!(one(b",-inf\r\n"), reply(bulk(b"-inf")));
    assert_eq!(
        one(b"(3492890328409238509324850943850943825024385\r\n"),
        reply(bulk(b"3492890328409238509324850943850943825024385"))
    );
    assert_eq!(
        one(b"=15\r\ntxt:Some string\r\n"),
        reply(bulk(b"Some string"))
    );
    assert_eq!(one(b"=4\r\nmkd:\r\n"), reply(bulk(b"")));
    assert_eq!(
        one(b"!21\r\nSYNTAX invalid syntax\r\n"),
        reply(RedisValue::Error("SYNTAX invalid syntax".into()))
    );
    assert_eq!(
        one(b"%2\r\n+first\r\n:1\r\n$6\r\nsecond\r\n:2\r\n"),
        reply(RedisValue::Array(vec![
            bulk(b"first"),
            RedisValue::Int(1),
            bulk(b"second"),
            RedisValue::Int(2)
        ]))
    );
    assert_eq!(one(b"%0\r\n"), reply(RedisValue::Array(vec![])));
    assert_eq!(
        one(b"~2\r\n+a\r\n#t\r\n"),
        reply(RedisValue::Array(vec![bulk(b"a"), RedisValue::Int(1)]))
    );
    assert_eq!(
        one(b">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$3\r\npay\r\n"),
        Frame::Push(vec![bulk(b"message"), bulk(b"ch"), bulk(b"pay")])
    );
    assert_eq!(one(b">0\r\n"), Frame::Push(vec![]));
}

#[test]
fn attributes_are_skipped() {
    // The example of the RESP3 specification.
    let top = b"|1\r\n+key-popularity\r\n%2\r\n$1\r\na\r\n,0.1923\r\n$1\r\nb\r\n,0.0012\r\n\
                *2\r\n:2039123\r\n:9543892\r\n";
    assert_eq!(
        one(top),
        reply(RedisValue::Array(vec![
            RedisValue::Int(2039123),
            RedisValue::Int(9543892)
        ]))
    );
    // Inside an aggregate, before one of its elements (nested, and empty).
    let inner = b"*2\r\n|1\r\n+k\r\n*1\r\n|0\r\n+v\r\n:1\r\n|0\r\n:2\r\n";
    assert_eq!(
        one(inner),
        reply(RedisValue::Array(vec![
            RedisValue::Int(1),
            RedisValue::Int(2)
        ]))
    );
    // Before a push.
    assert_eq!(
        one(b"|1\r\n+a\r\n+b\r\n>1\r\n+x\r\n"),
        Frame::Push(vec![bulk(b"x")])
    );
}

// ---- cuts and coalescing ------------------------------------------------------------

/// A pipeline of mixed replies and the frames it holds.
fn pipeline() -> (Vec<u8>, Vec<Frame>) {
    let bytes = b"+OK\r\n$3\r\nv\r\n\r\n:7\r\n-NOSCRIPT No matching script\r\n$-1\r\n\
                  *2\r\n*1\r\n:1\r\n$0\r\n\r\n>3\r\n+message\r\n+ch\r\n$2\r\np1\r\n\
                  %1\r\n+k\r\n_\r\n|1\r\n+a\r\n+b\r\n#f\r\n=7\r\ntxt:abc\r\n\
                  !3\r\nERR\r\n,1.5\r\n(12\r\n~1\r\n*-1\r\n"
        .to_vec();
    let frames = vec![
        reply(bulk(b"OK")),
        reply(bulk(b"v\r\n")),
        reply(RedisValue::Int(7)),
        reply(RedisValue::Error("NOSCRIPT No matching script".into())),
        reply(RedisValue::Nil),
        reply(RedisValue::Array(vec![
            RedisValue::Array(vec![RedisValue::Int(1)]),
            bulk(b""),
        ])),
        Frame::Push(vec![bulk(b"message"), bulk(b"ch"), bulk(b"p1")]),
        reply(RedisValue::Array(vec![bulk(b"k"), RedisValue::Nil])),
        reply(RedisValue::Int(0)),
        reply(bulk(b"abc")),
        reply(RedisValue::Error("ERR".into())),
        reply(bulk(b"1.5")),
        reply(bulk(b"12")),
        reply(RedisValue::Array(vec![RedisValue::Nil])),
    ];
    (bytes, frames)
}

#[test]
fn coalesced_frames_all_decode_from_one_read() {
    let (bytes, frames) = pipeline();
    assert_eq!(decode_all(&bytes), frames);
    // The same replies twice in one read, then nothing left over.
    let twice = [bytes.clone(), bytes].concat();
    let mut d = RespDecoder::new();
    d.feed(&twice);
    let mut n = 0;
    while let Some(f) = d.next_frame().unwrap() {
        assert_eq!(f, frames[n % frames.len()]);
        n += 1;
    }
    assert_eq!(n, 2 * frames.len());
    assert_eq!(d.buffered(), 0);
    assert!(!d.in_frame());
}

#[test]
fn a_pipeline_fed_byte_by_byte_decodes_the_same() {
    let (bytes, frames) = pipeline();
    let (got, err) = decode_chunks(bytes.chunks(1));
    assert_eq!(err, None);
    assert_eq!(got, frames);
}

#[test]
fn a_pipeline_cut_anywhere_in_two_decodes_the_same() {
    let (bytes, frames) = pipeline();
    for cut in 0..=bytes.len() {
        let (a, b) = bytes.split_at(cut);
        let (got, err) = decode_chunks([a, b]);
        assert_eq!(err, None, "cut at {cut}");
        assert_eq!(got, frames, "cut at {cut}");
    }
}

#[test]
fn a_partial_frame_is_reported_and_its_elements_leave_the_buffer() {
    let mut d = RespDecoder::new();
    d.feed(b"*3\r\n$5\r\nhello\r\n:1\r\n$4\r\nwo");
    assert_eq!(d.next_frame(), Ok(None));
    // The whole elements were taken: only the unfinished string is held.
    assert_eq!(d.buffered(), 2);
    assert!(d.in_frame());
    d.feed(b"rd\r\n");
    assert_eq!(
        d.next_frame(),
        Ok(Some(reply(RedisValue::Array(vec![
            bulk(b"hello"),
            RedisValue::Int(1),
            bulk(b"word")
        ]))))
    );
    assert!(!d.in_frame());
}

/// Large replies arriving in small pieces: linear time (a rescan from the
/// frame's start on each piece would take minutes here).
#[test]
fn large_replies_in_small_pieces_decode_in_linear_time() {
    let n = 1 << 20;
    let mut big = format!("${n}\r\n").into_bytes();
    big.extend(std::iter::repeat(b'x').take(n));
    big.extend_from_slice(b"\r\n");
    // A long simple string too (a line whose end is searched for).
    big.extend_from_slice(b"+");
    big.extend(std::iter::repeat(b'y').take(MAX_LINE_BYTES - 1));
    big.extend_from_slice(b"\r\n");
    let (frames, err) = decode_chunks(big.chunks(3));
    assert_eq!(err, None);
    assert_eq!(frames.len(), 2);
    assert_eq!(frames[0], reply(RedisValue::Bulk(vec![b'x'; n])));
    // An array of 200 000 elements, two bytes at a time.
    let count = 200_000;
    let mut arr = format!("*{count}\r\n").into_bytes();
    for _ in 0..count {
        arr.extend_from_slice(b":1\r\n");
    }
    let (frames, err) = decode_chunks(arr.chunks(2));
    assert_eq!(err, None);
    assert_eq!(
        frames,
        vec![reply(RedisValue::Array(vec![RedisValue::Int(1); count]))]
    );
}

// ---- hostile input ---------------------------------------------------------------

#[test]
fn a_huge_declared_length_reserves_nothing() {
    // Over the bound: refused from the header alone.
    assert_eq!(
        error_of(b"$2147483647\r\n"),
        RespError::TooLarge("a bulk string longer than 512 MiB")
    );
    assert!(matches!(
        error_of(b"$99999999999999999999999\r\n"),
        RespError::TooLarge(_) | RespError::Protocol(_)
    ));
    // At the bound: accepted, and nothing is held but what arrived.
    let mut d = RespDecoder::new();
    d.feed(format!("${MAX_BULK_BYTES}\r\nabc").as_bytes());
    assert_eq!(d.next_frame(), Ok(None));
    assert_eq!(d.buffered(), 3);
    assert!(d.buffer_capacity() < 1 << 16, "{}", d.buffer_capacity());
    // Aggregates: a huge count reserves nothing either.
    let mut d = RespDecoder::new();
    d.feed(b"*2147483647\r\n%1073741823\r\n:1\r\n");
    assert_eq!(d.next_frame(), Ok(None));
    assert!(d.stack.iter().all(|p| p.items.capacity() < 16));
    assert!(matches!(
        error_of(b"*2147483648\r\n"),
        RespError::TooLarge(_)
    ));
    assert!(matches!(
        error_of(b"%1073741824\r\n"),
        RespError::TooLarge(_)
    ));
}

#[test]
fn nesting_is_capped() {
    let nested = |depth: usize| {
        let mut v = b"*1\r\n".repeat(depth);
        v.extend_from_slice(b":1\r\n");
        v
    };
    let mut want = RedisValue::Int(1);
    for _ in 0..MAX_DEPTH {
        want = RedisValue::Array(vec![want]);
    }
    assert_eq!(one(&nested(MAX_DEPTH)), reply(want));
    assert_eq!(error_of(&nested(MAX_DEPTH + 1)), RespError::TooDeep);
    // Attributes count too, and so does a flood of them.
    assert_eq!(error_of(&b"|1\r\n".repeat(100_000)), RespError::TooDeep);
    assert_eq!(error_of(&b"*1\r\n".repeat(100_000)), RespError::TooDeep);
}

#[test]
fn lines_are_capped() {
    // A line of MAX_LINE_BYTES (type byte included) is accepted, its CR
    // arriving apart.
    let mut line = b"+".to_vec();
    line.resize(MAX_LINE_BYTES, b'a');
    let mut d = RespDecoder::new();
    d.feed(&line);
    assert_eq!(d.next_frame(), Ok(None));
    d.feed(b"\r");
    assert_eq!(d.next_frame(), Ok(None));
    d.feed(b"\n");
    assert!(matches!(d.next_frame(), Ok(Some(_))));
    // One byte more is refused as it arrives, and as a whole line.
    let mut d = RespDecoder::new();
    d.feed(&line);
    assert_eq!(d.next_frame(), Ok(None));
    d.feed(b"a");
    assert!(matches!(d.next_frame(), Err(RespError::TooLarge(_))));
    line.extend_from_slice(b"a\r\n");
    assert!(matches!(error_of(&line), RespError::TooLarge(_)));
}

#[test]
fn malformed_streams_are_refused() {
    let cases: &[&[u8]] = &[
        b"$-2\r\n",
        b"$abc\r\n",
        b"$+1\r\nx\r\n",
        b"$\r\n",
        b"$ 1\r\nx\r\n",
        b"*-5\r\n",
        b"%-1\r\n",
        b">-1\r\n",
        b"=-1\r\n",
        b"$3\r\nabcXY",
        b"$3\r\nabc\nX",
        b"=3\r\nabc\r\n",
        b"=4\r\ntxtx\r\n",
        b":12a\r\n",
        b":\r\n",
        b":+1\r\n",
        b":9223372036854775808\r\n",
        b"#x\r\n",
        b"#\r\n",
        b"_x\r\n",
        b"\r\n",
        b"+OK\n",
        b"\n",
        b"?3\r\n",
        b"$?\r\n",
        b";4\r\n",
        b".\r\n",
        b"x\r\n",
        b"\0",
        b"*1\r\n>1\r\n:1\r\n",
        b"HTTP/1.1 200 OK\r\n",
    ];
    for case in cases {
        let (_, err) = decode_chunks([*case]);
        assert!(
            matches!(err, Some(RespError::Protocol(_))),
            "{:?}: {err:?}",
            String::from_utf8_lossy(case)
        );
    }
}

#[test]
fn an_error_is_final_and_drops_the_buffer() {
    let mut d = RespDecoder::new();
    d.feed(b":1\r\n$x\r\n+OK\r\n");
    assert_eq!(d.next_frame(), Ok(Some(reply(RedisValue::Int(1)))));
    let e = d.next_frame().unwrap_err();
    assert_eq!(e, RespError::Protocol("an invalid length"));
    assert_eq!(d.buffered(), 0);
    d.feed(b"+OK\r\n");
    assert_eq!(d.buffered(), 0);
    assert_eq!(d.next_frame(), Err(e));
    assert_eq!(d.error(), Some(e));
}

#[test]
fn error_texts_never_quote_the_stream() {
    const SECRET: &str = "s3cr3t-owner-token";
    let cases: Vec<Vec<u8>> = vec![
        format!("${SECRET}\r\n").into_bytes(),
        format!(":{SECRET}\r\n").into_bytes(),
        format!("#{SECRET}\r\n").into_bytes(),
        format!("{SECRET}\r\n").into_bytes(),
        format!("=3\r\n{SECRET}\r\n").into_bytes(),
        format!("$3\r\n{SECRET}\r\n").into_bytes(),
        format!("+{SECRET}{}", "x".repeat(MAX_LINE_BYTES + 2)).into_bytes(),
        format!("*1\r\n{SECRET}\r\n").into_bytes(),
    ];
    for case in cases {
        let err = error_of(&case);
        let text = format!("{err} {err:?}");
        assert!(!text.contains(SECRET), "{text}");
        assert!(text.len() < 120, "{text}");
        assert!(text.starts_with("RESP "), "{text}");
    }
}

// ---- property: RESP2 round trip ------------------------------------------------------

/// Test-only RESP2 encoder: `simple` writes strings without CR / LF as
/// simple strings, and nulls as null arrays, to cover both spellings.
fn encode_resp2(v: &RedisValue, simple: bool, out: &mut Vec<u8>) {
    match v {
        RedisValue::Nil if simple => out.extend_from_slice(b"*-1\r\n"),
        RedisValue::Nil => out.extend_from_slice(b"$-1\r\n"),
        RedisValue::Int(i) => out.extend_from_slice(format!(":{i}\r\n").as_bytes()),
        RedisValue::Bulk(b) if simple && !b.iter().any(|c| matches!(c, b'\r' | b'\n')) => {
            out.push(b'+');
            out.extend_from_slice(b);
            out.extend_from_slice(b"\r\n");
        }
        RedisValue::Bulk(b) => {
            out.extend_from_slice(format!("${}\r\n", b.len()).as_bytes());
            out.extend_from_slice(b);
            out.extend_from_slice(b"\r\n");
        }
        RedisValue::Error(e) => out.extend_from_slice(format!("-{e}\r\n").as_bytes()),
        RedisValue::Array(items) => {
            out.extend_from_slice(format!("*{}\r\n", items.len()).as_bytes());
            for item in items {
                encode_resp2(item, simple, out);
            }
        }
    }
}

fn value_strategy() -> impl Strategy<Value = RedisValue> {
    let leaf = prop_oneof![
        Just(RedisValue::Nil),
        any::<i64>().prop_map(RedisValue::Int),
        proptest::collection::vec(any::<u8>(), 0..40).prop_map(RedisValue::Bulk),
        prop_oneof![
            Just(b"\r\n".to_vec()),
            Just(b"\r".to_vec()),
            Just(b"*1\r\n".to_vec())
        ]
        .prop_map(RedisValue::Bulk),
        "[^\r\n]{0,30}".prop_map(RedisValue::Error),
    ];
    leaf.prop_recursive(5, 64, 8, |inner| {
        proptest::collection::vec(inner, 0..8).prop_map(RedisValue::Array)
    })
}

/// `bytes` cut at the given points (taken modulo its length).
fn cut_at(bytes: &[u8], mut cuts: Vec<usize>) -> Vec<&[u8]> {
    for c in cuts.iter_mut() {
        *c %= bytes.len() + 1;
    }
    cuts.sort_unstable();
    let mut out = Vec::new();
    let mut start = 0;
    for c in cuts.into_iter().chain([bytes.len()]) {
        out.push(&bytes[start..c]);
        start = c;
    }
    out
}

proptest! {
    #[test]
    fn resp2_round_trips_in_any_chunking(
        values in proptest::collection::vec(value_strategy(), 1..6),
        simple in any::<bool>(),
        cuts in proptest::collection::vec(any::<usize>(), 0..24),
    ) {
        let mut bytes = Vec::new();
        for v in &values {
            encode_resp2(v, simple, &mut bytes);
        }
        let (frames, err) = decode_chunks(cut_at(&bytes, cuts));
        prop_assert_eq!(err, None);
        let want: Vec<Frame> = values.into_iter().map(Frame::Reply).collect();
        prop_assert_eq!(frames, want);
    }

    #[test]
    fn arbitrary_bytes_never_panic_and_stay_bounded(
        bytes in proptest::collection::vec(any::<u8>(), 0..300),
        cuts in proptest::collection::vec(any::<usize>(), 0..16),
    ) {
        let mut d = RespDecoder::new();
        for c in cut_at(&bytes, cuts) {
            d.feed(c);
            while let Ok(Some(_)) = d.next_frame() {}
            prop_assert!(d.buffered() <= bytes.len());
            prop_assert!(d.stack.len() <= MAX_DEPTH);
        }
    }
}
