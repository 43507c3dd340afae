//! Mutations of valid backend replies: bit flips, truncation, insertions of
//! huge numbers, deep nesting, wrong types, NUL and invalid UTF-8, duplicated
//! keys, echoed secrets, random statuses, and (in `deliver`) chunk splits,
//! transport failures and misrouted answers.

use edgelock::core::{HttpRequest, Input, RequestId, TransportError};
use serde_json::Value;

use super::models::Reply;
use super::rng::Rng;
use super::SENTINEL;

const HUGE: &[&str] = &[
    "99999999999999999999999999",
    "-9223372036854775809",
    "9223372036854775807",
    "-9223372036854775808",
    "18446744073709551615",
    "18446744073709551616",
    "1e400",
    "-1e400",
    "1.5",
    "-0",
    "0",
    "-1",
    "-2",
    "4294967296",
    "1E+2",
    "0x10",
    "\"9223372036854775808\"",
    "NaN",
    "Infinity",
];

const BAD_BYTES: &[&[u8]] = &[
    b"\0",
    b"\\u0000",
    b"\xff",
    b"\xc0\x80",
    b"\xed\xa0\x80",
    b"\\ud800",
    b"\\udfff\\ud800",
    b"\xf4\x90\x80\x80",
    b"\xe2\x82",
    b"\r\n",
    b"\\",
    b"\"",
];

const WEIRD: &[&str] = &[
    "\u{202e}gnp.exe",
    "🔒🔑",
    "e\u{301}\u{301}\u{301}",
    "\u{feff}",
    "==",
    "!!not base64!!",
    "",
    "OK",
    "null",
    "-",
];

pub const STATUSES: &[u16] = &[
    0, 1, 100, 101, 199, 200, 201, 204, 206, 299, 300, 301, 302, 304, 400, 401, 403, 404, 405, 408,
    409, 412, 413, 429, 500, 501, 502, 503, 504, 599, 600, 999, 65535,
];

fn count_nodes(v: &Value) -> usize {
    1 + match v {
        Value::Array(a) => a.iter().map(count_nodes).sum(),
        Value::Object(o) => o.values().map(count_nodes).sum(),
        _ => 0,
    }
}

/// Applies `f` to the `target`-th node in pre-order.
fn visit(v: &mut Value, target: &mut usize, f: &mut dyn FnMut(&mut Value)) -> bool {
    if *target == 0 {
        f(v);
        return true;
    }
    *target -= 1;
    match v {
        Value::Array(a) => a.iter_mut().any(|x| visit(x, target, f)),
        Value::Object(o) => o.values_mut().any(|x| visit(x, target, f)),
        _ => false,
    }
}

/// A structured mutation of one random node; `None` when the body is not JSON.
fn structured(
    rng: &mut Rng,
    body: &[u8],
    f: &mut dyn FnMut(&mut Rng, &mut Value),
) -> Option<Vec<u8>> {
    let mut v: Value = serde_json::from_slice(body).ok()?;
    let mut target = rng.below(count_nodes(&v));
    let mut r2 = Rng::new(rng.next_u64());
    visit(&mut v, &mut target, &mut |node| f(&mut r2, node));
    serde_json::to_vec(&v).ok()
}

fn random_value(rng: &mut Rng, echo: &str) -> Value {
    match rng.below(12) {
        0 => Value::Null,
        1 => Value::Bool(rng.chance(50)),
        2 => serde_json::json!(1.5),
        3 => serde_json::json!(-1),
        4 => serde_json::json!(i64::MIN),
        5 => serde_json::json!(u64::MAX),
        6 => Value::String(rng.pick(HUGE).to_string()),
        7 => serde_json::json!([]),
        8 => serde_json::json!({}),
        9 => Value::String(echo.to_string()),
        10 => Value::String("A".repeat(rng.below(5000))),
        _ => Value::String(rng.pick(WEIRD).to_string()),
    }
}

fn positions(body: &[u8], pred: impl Fn(&[u8], usize) -> bool) -> Vec<usize> {
    (0..body.len()).filter(|&i| pred(body, i)).collect()
}

fn insert_at(mut body: Vec<u8>, at: usize, what: &[u8]) -> Vec<u8> {
    let at = at.min(body.len());
    body.splice(at..at, what.iter().copied());
    body
}

fn nested(rng: &mut Rng) -> Vec<u8> {
    let depth = *rng.pick(&[64usize, 127, 128, 129, 500, 5_000, 100_000]);
    let depth = if depth == 100_000 && !rng.chance(10) {
        1_000
    } else {
        depth
    };
    match rng.below(3) {
        0 => [b"[".repeat(depth), b"]".repeat(depth)].concat(),
        1 => [b"{\"a\":".repeat(depth), b"1".to_vec(), b"}".repeat(depth)].concat(),
        _ => b"[{".repeat(depth),
    }
}

/// One mutation of `body`.
fn once(rng: &mut Rng, body: Vec<u8>, echo: &str) -> Vec<u8> {
    let len = body.len();
    match rng.below(17) {
        0 => {
            let mut b = body;
            for _ in 0..1 + rng.below(8) {
                if !b.is_empty() {
                    let i = rng.below(b.len());
                    b[i] ^= 1 << rng.below(8);
                }
            }
            b
        }
        1 => body[..rng.below(len + 1)].to_vec(),
        2 => {
            let n = 1 + rng.below(16);
            let junk = rng.bytes(n);
            insert_at(body, rng.below(len + 1), &junk)
        }
        3 => {
            let starts = positions(&body, |b, i| {
                b[i].is_ascii_digit() && (i == 0 || !b[i - 1].is_ascii_digit())
            });
            if starts.is_empty() {
                return insert_at(body, rng.below(len + 1), rng.pick(HUGE).as_bytes());
            }
            let s = *rng.pick(&starts);
            let e = (s..len).find(|&i| !body[i].is_ascii_digit()).unwrap_or(len);
            let mut b = body;
            b.splice(s..e, rng.pick(HUGE).bytes());
            b
        }
        4 => {
            let n = nested(rng);
            let colons = positions(&body, |b, i| b[i] == b':');
            if colons.is_empty() || rng.chance(30) {
                n
            } else {
                let at = *rng.pick(&colons) + 1;
                insert_at(body, at, &n)
            }
        }
        5 => structured(rng, &body, &mut |r, node| *node = random_value(r, echo)).unwrap_or(body),
        6 => {
            let quotes = positions(&body, |b, i| b[i] == b'"');
            let at = if quotes.is_empty() || rng.chance(30) {
                rng.below(len + 1)
            } else {
                *rng.pick(&quotes) + 1
            };
            let bad: &[u8] = BAD_BYTES[rng.below(BAD_BYTES.len())];
            insert_at(body, at, bad)
        }
        7 => {
            let opens = positions(&body, |b, i| b[i] == b'{' && b.get(i + 1) == Some(&b'"'));
            if opens.is_empty() {
                return body;
            }
            let o = *rng.pick(&opens);
            let name_end = body[o + 2..]
                .iter()
                .position(|&c| c == b'"')
                .map_or(len, |p| o + 2 + p);
            let name = body[o + 2..name_end].to_vec();
            let value = serde_json::to_vec(&random_value(rng, echo)).unwrap_or_default();
            let dup = [b"\"".to_vec(), name, b"\":".to_vec(), value, b",".to_vec()].concat();
            insert_at(body, o + 1, &dup)
        }
        8 => structured(rng, &body, &mut |r, node| {
            if let Value::Object(o) = node {
                if !o.is_empty() {
                    let k = o.keys().nth(r.below(o.len())).cloned().unwrap_or_default();
                    o.remove(&k);
                }
            }
        })
        .unwrap_or(body),
        9 => rng
            .pick(&[
                &b""[..],
                b" ",
                b"null",
                b"[]",
                b"{}",
                b"\"OK\"",
                b"0",
                b"{\"result\":null}",
                b"{\"error\":null}",
                b"\n\n",
                b"}{",
            ])
            .to_vec(),
        10 => {
            if rng.chance(5) {
                let mut b = body;
                b.resize(b.len() + 256 * 1024, b'a');
                b
            } else {
                [body.clone(), body].concat()
            }
        }
        11 => [body.clone(), b"\n".to_vec(), body].concat(),
        12 => structured(rng, &body, &mut |r, node| {
            if node.is_string() || r.chance(30) {
                *node = Value::String(r.pick(WEIRD).to_string());
            }
        })
        .unwrap_or(body),
        13 => structured(rng, &body, &mut |r, node| match node {
            Value::String(s) => {
                if let Ok(i) = s.parse::<i64>() {
                    *node = serde_json::json!(i);
                } else {
                    *node = serde_json::json!(-(r.below(1000) as i64));
                }
            }
            Value::Number(n) => *node = Value::String(n.to_string()),
            _ => {}
        })
        .unwrap_or(body),
        14 => structured(rng, &body, &mut |r, node| {
            if let (Value::Object(o), true) = (&mut *node, r.chance(50)) {
                o.insert("error".into(), Value::String(echo.to_string()));
                o.insert("message".into(), Value::String(format!("boom: {echo}")));
                o.insert(
                    "code".into(),
                    serde_json::json!(*r.pick(&[2i64, 3, 5, 7, 13, 14, 16])),
                );
            } else {
                *node = Value::String(format!("ERR {echo}"));
            }
        })
        .unwrap_or_else(|| [body, echo.as_bytes().to_vec()].concat()),
        15 => match rng.below(3) {
            0 => echo.as_bytes().to_vec(),
            1 => serde_json::json!({ "error": echo })
                .to_string()
                .into_bytes(),
            _ => format!("{{\"result\":\"{echo}").into_bytes(),
        },
        _ => {
            if len == 0 {
                return body;
            }
            let s = rng.below(len);
            let e = (s + 1 + rng.below(32)).min(len);
            let mut b = body;
            b.drain(s..e);
            b
        }
    }
}

/// 1–3 stacked mutations.
pub fn mutate_body(rng: &mut Rng, body: &[u8], echo: &str) -> Vec<u8> {
    let mut b = body.to_vec();
    for _ in 0..1 + rng.below(3) {
        b = once(rng, b, echo);
        // An echoed secret stays intact: a later flip or cut would turn it
        // into a string the client never had, not a leak of its secret.
        if !rng.chance(40) || b.windows(SENTINEL.len()).any(|w| w == SENTINEL.as_bytes()) {
            break;
        }
    }
    b
}

pub fn random_status(rng: &mut Rng) -> u16 {
    if rng.chance(90) {
        *rng.pick(STATUSES)
    } else {
        rng.next_u64() as u16
    }
}

/// Splits `data` at random points (sometimes into single bytes).
pub fn split(rng: &mut Rng, data: &[u8]) -> Vec<Vec<u8>> {
    if data.is_empty() {
        return vec![Vec::new()];
    }
    if rng.chance(10) && data.len() < 4096 {
        return data.iter().map(|b| vec![*b]).collect();
    }
    let mut out = Vec::new();
    let mut i = 0;
    while i < data.len() {
        let max = if rng.chance(50) { 8 } else { 4096 };
        let n = 1 + rng.below((data.len() - i).min(max));
        out.push(data[i..i + n].to_vec());
        i += n;
    }
    out
}

fn whole(reply: &Reply) -> (u16, Vec<u8>) {
    match reply {
        Reply::Whole { status, body } => (*status, body.clone()),
        Reply::Stream { messages } => (200, messages.concat()),
    }
}

fn transport_error(rng: &mut Rng, echo: &str) -> TransportError {
    let msg = match rng.below(4) {
        0 => echo.to_string(),
        1 => format!("malformed header line {echo:?}"),
        2 => {
            let n = rng.below(300);
            String::from_utf8_lossy(&rng.bytes(n)).into_owned()
        }
        _ => String::new(),
    };
    match rng.below(3) {
        0 => TransportError::Timeout,
        1 => TransportError::Connect(msg),
        _ => TransportError::Io(msg),
    }
}

/// The inputs that answer `req`: the valid reply as a driver would deliver
/// it, or (when `hostile`) a mutated, misdelivered or failed one. Returns the
/// inputs and how many of them are hostile.
pub fn deliver(
    rng: &mut Rng,
    req: &HttpRequest,
    reply: &Reply,
    hostile: bool,
    echo: &str,
) -> (Vec<Input>, u64) {
    let id = req.id;
    let valid = |rng: &mut Rng, reply: &Reply| -> Vec<Input> {
        match reply {
            Reply::Whole { status, body } if req.stream && (200..300).contains(status) => {
                let mut v: Vec<Input> = split(rng, body)
                    .into_iter()
                    .map(|data| Input::Chunk { id, data })
                    .collect();
                v.push(Input::StreamEnd { id });
                v
            }
            Reply::Whole { status, body } => vec![Input::Response {
                id,
                status: *status,
                body: body.clone(),
            }],
            Reply::Stream { messages } => {
                let mut v: Vec<Input> = split(rng, &messages.concat())
                    .into_iter()
                    .map(|data| Input::Chunk { id, data })
                    .collect();
                if rng.chance(30) {
                    v.push(Input::StreamEnd { id });
                }
                v
            }
        }
    };
    if !hostile {
        return (valid(rng, reply), 0);
    }
    let (status, body) = whole(reply);
    let roll = rng.below(100);
    let inputs = match roll {
        0..=59 => {
            let body = mutate_body(rng, &body, echo);
            let status = if rng.chance(25) {
                random_status(rng)
            } else {
                status
            };
            if req.stream && (200..300).contains(&status) {
                let mut v: Vec<Input> = split(rng, &body)
                    .into_iter()
                    .map(|data| Input::Chunk { id, data })
                    .collect();
                if rng.chance(50) {
                    v.push(Input::StreamEnd { id });
                }
                v
            } else {
                vec![Input::Response { id, status, body }]
            }
        }
        60..=69 => vec![Input::Response {
            id,
            status: random_status(rng),
            body,
        }],
        70..=74 => vec![Input::Failed {
            id,
            error: transport_error(rng, echo),
        }],
        75..=79 => {
            if req.stream {
                vec![Input::Response { id, status, body }]
            } else {
                vec![Input::Chunk { id, data: body }, Input::StreamEnd { id }]
            }
        }
        80..=84 => {
            let mut v = valid(rng, reply);
            v.extend(valid(rng, reply));
            v
        }
        85..=89 => {
            let wrong = RequestId(id.0.wrapping_add(1 + rng.below(3) as u64));
            let mut v = vec![Input::Response {
                id: wrong,
                status,
                body: mutate_body(rng, &body, echo),
            }];
            v.extend(valid(rng, reply));
            v
        }
        90..=94 => {
            let status = *rng.pick(&[401u16, 403, 500, 502, 200, 400]);
            let body = format!(
                "POST / HTTP/1.1\r\n{echo}\r\n\r\n{}",
                String::from_utf8_lossy(&req.body)
            )
            .into_bytes();
            vec![Input::Response { id, status, body }]
        }
        _ => match rng.below(3) {
            0 => vec![Input::StreamEnd { id }],
            1 => {
                let mut v: Vec<Input> = body
                    .iter()
                    .map(|b| Input::Chunk { id, data: vec![*b] })
                    .collect();
                v.push(Input::Failed {
                    id,
                    error: TransportError::Io("reset".into()),
                });
                v
            }
            _ => vec![Input::StreamEnd { id }, Input::Chunk { id, data: body }],
        },
    };
    (inputs, 1)
}
