//! The Upstash gateway over raw HTTP, against a real redis-server.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use edgelock_devtools::http1::{read_head, read_response, Head};
use edgelock_devtools::{
    http_request, GatewayConfig, HttpResponse, RedisServer, RespValue, UpstashGateway,
};
use serde_json::{json, Value};

const TOKEN: &str = "test-token-5f1c";
const T: Duration = Duration::from_secs(10);

fn setup() -> (RedisServer, UpstashGateway) {
    let redis = RedisServer::start().unwrap();
    let gw = UpstashGateway::start(&redis, TOKEN).unwrap();
    (redis, gw)
}

fn auth() -> (&'static str, String) {
    ("Authorization", format!("Bearer {TOKEN}"))
}

fn post(gw: &UpstashGateway, path: &str, body: &Value, extra: &[(&str, &str)]) -> HttpResponse {
    let (k, v) = auth();
    let mut headers = vec![(k, v.as_str()), ("Content-Type", "application/json")];
    headers.extend_from_slice(extra);
    let r = http_request(
        "POST",
        &format!("{}{path}", gw.url()),
        &headers,
        body.to_string().as_bytes(),
        T,
    )
    .unwrap();
    assert!(!r.text().contains(TOKEN), "token leaked in reply");
    r
}

/// Writes raw bytes on one connection and reads `n` responses from it.
fn raw(gw: &UpstashGateway, bytes: &[u8], n: usize) -> Vec<HttpResponse> {
    let mut s = TcpStream::connect(gw.addr()).unwrap();
    s.set_read_timeout(Some(T)).unwrap();
    s.write_all(bytes).unwrap();
    let mut r = BufReader::new(s);
    (0..n)
        .map(|_| read_response(&mut r, false).unwrap())
        .collect()
}

#[test]
fn json_commands_results_and_errors() {
    let (redis, gw) = setup();
    let r = post(&gw, "/", &json!(["SET", "k", "v", "NX", "PX", 60000]), &[]);
    assert_eq!(
        (r.status, r.json().unwrap()),
        (200, json!({"result": "OK"}))
    );
    assert_eq!(r.header("access-control-allow-origin"), Some("*"));
    let r = post(&gw, "/", &json!(["SET", "k", "v2", "NX", "PX", 60000]), &[]);
    assert_eq!(
        r.json().unwrap(),
        json!({"result": null}),
        "NX on an existing key gives nil"
    );
    let r = post(&gw, "/", &json!(["GET", "k"]), &[]);
    assert_eq!(r.json().unwrap(), json!({"result": "v"}));
    let r = post(&gw, "/", &json!(["INCR", "n"]), &[]);
    assert_eq!(r.json().unwrap(), json!({"result": 1}));
    let r = post(
        &gw,
        "/",
        &json!(["EVAL", "return {KEYS[1], ARGV[1], 7, false}", 1, "a", "b"]),
        &[],
    );
    assert_eq!(r.json().unwrap(), json!({"result": ["a", "b", 7, null]}));
    let r = post(&gw, "/", &json!(["INCR", "k"]), &[]);
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json().unwrap(),
        json!({"error": "ERR value is not an integer or out of range"})
    );
    let r = post(&gw, "/", &json!(["NOSUCHCMD"]), &[]);
    assert_eq!(r.status, 400);
    assert!(r.json().unwrap()["error"]
        .as_str()
        .unwrap()
        .starts_with("ERR unknown command"));
    for bad in [
        json!([]),
        json!({"a": 1}),
        json!(["SET", null]),
        json!(["SET", ["x"]]),
    ] {
        let r = post(&gw, "/", &bad, &[]);
        assert_eq!(r.status, 400, "{bad}");
        assert!(r.json().unwrap()["error"].is_string());
    }
    let r = post(&gw, "/", &json!(["MULTI"]), &[]);
    assert_eq!(
        (r.status, r.json().unwrap()),
        (400, json!({"error": "ERR Command is not allowed: MULTI"}))
    );
    assert_eq!(
        redis.redis_command(&[b"GET", b"k"]).unwrap(),
        RespValue::Bulk(b"v".to_vec())
    );
}

#[test]
fn base64_encoding_and_binary_values() {
    let (redis, gw) = setup();
    redis
        .redis_command(&[b"SET", b"bin", b"\xff\x00ok"])
        .unwrap();
    let b64 = [("Upstash-Encoding", "base64")];
    let r = post(&gw, "/", &json!(["SET", "k", "bar"]), &b64);
    assert_eq!(
        r.json().unwrap(),
        json!({"result": "OK"}),
        "status OK is not encoded"
    );
    let r = post(&gw, "/", &json!(["GET", "k"]), &b64);
    assert_eq!(r.json().unwrap(), json!({"result": "YmFy"}));
    let r = post(&gw, "/", &json!(["PING"]), &b64);
    assert_eq!(r.json().unwrap(), json!({"result": "UE9ORw=="}));
    let r = post(&gw, "/", &json!(["GET", "bin"]), &b64);
    assert_eq!(
        r.json().unwrap(),
        json!({"result": "/wBvaw=="}),
        "exact bytes with base64"
    );
    let r = post(&gw, "/", &json!(["GET", "bin"]), &[]);
    assert_eq!(
        r.json().unwrap(),
        json!({"result": "\u{fffd}\u{0}ok"}),
        "lossy UTF-8 without"
    );
    let r = post(&gw, "/", &json!(["INCR", "k"]), &b64);
    assert_eq!(
        r.json().unwrap(),
        json!({"error": "ERR value is not an integer or out of range"}),
        "errors stay plain"
    );
    let r = post(&gw, "/", &json!(["MGET", "k", "missing"]), &b64);
    assert_eq!(r.json().unwrap(), json!({"result": ["YmFy", null]}));
    let r = post(
        &gw,
        "/",
        &json!(["GET", "k"]),
        &[("Upstash-Response-Format", "resp2")],
    );
    assert_eq!((r.status, r.body.as_slice()), (200, &b"$3\r\nbar\r\n"[..]));
    assert_eq!(r.header("content-type"), Some("application/octet-stream"));
    let r = post(
        &gw,
        "/",
        &json!(["GET", "k"]),
        &[
            ("Upstash-Response-Format", "resp2"),
            ("Upstash-Encoding", "base64"),
        ],
    );
    assert_eq!(r.status, 400);
}

#[test]
fn auth_is_required_and_never_echoed() {
    let (_redis, gw) = setup();
    let url = format!("{}/", gw.url());
    let body = br#"["SET","k","v"]"#;
    for headers in [
        vec![],
        vec![("Authorization", "Bearer wrong")],
        vec![("Authorization", "Basic dGVzdA==")],
    ] {
        let r = http_request("POST", &url, &headers, body, T).unwrap();
        assert_eq!(
            (r.status, r.json().unwrap()),
            (401, json!({"error": "Unauthorized"}))
        );
        assert_eq!(r.header("access-control-allow-origin"), Some("*"));
    }
    let r = http_request(
        "GET",
        &format!("{}/get/k?_token={TOKEN}", gw.url()),
        &[],
        b"",
        T,
    )
    .unwrap();
    assert_eq!(
        (r.status, r.json().unwrap()),
        (200, json!({"result": null}))
    );
    let r = http_request(
        "GET",
        &format!("{}/get/k?_token=nope", gw.url()),
        &[],
        b"",
        T,
    )
    .unwrap();
    assert_eq!(r.status, 401);
    // A gateway without a token accepts anything.
    let mut cfg = GatewayConfig::new(_redis.addr());
    cfg.token = None;
    let open = UpstashGateway::start_with(cfg).unwrap();
    let r = http_request("POST", &format!("{}/", open.url()), &[], br#"["PING"]"#, T).unwrap();
    assert_eq!(r.json().unwrap(), json!({"result": "PONG"}));
    assert!(!format!("{gw:?}").contains(TOKEN));
}

#[test]
fn path_form_is_byte_exact_and_appends_body_and_query() {
    let (redis, gw) = setup();
    let (k, v) = auth();
    let h = [(k, v.as_str())];
    let before = redis.all_keys().unwrap();
    let r = http_request(
        "GET",
        &format!("{}/set/a%2Fb%00%2E%2E%25%3F%23%0D%0A%C3%A9%FF/v", gw.url()),
        &h,
        b"",
        T,
    )
    .unwrap();
    assert_eq!(r.json().unwrap(), json!({"result": "OK"}));
    let mut after = redis.all_keys().unwrap();
    after.retain(|k| !before.contains(k));
    assert_eq!(after, vec![b"a/b\x00..%?#\r\n\xc3\xa9\xff".to_vec()]);
    let r = http_request(
        "POST",
        &format!("{}/set/raw?EX=100&NX", gw.url()),
        &h,
        b"\x00body/with?stuff",
        T,
    )
    .unwrap();
    assert_eq!(r.json().unwrap(), json!({"result": "OK"}));
    assert_eq!(
        redis.redis_command(&[b"GET", b"raw"]).unwrap(),
        RespValue::Bulk(b"\x00body/with?stuff".to_vec())
    );
    let ttl = redis
        .redis_command(&[b"TTL", b"raw"])
        .unwrap()
        .as_int()
        .unwrap();
    assert!((90..=100).contains(&ttl), "EX from the query string: {ttl}");
    let r = http_request("POST", &format!("{}/set/raw?NX", gw.url()), &h, b"again", T).unwrap();
    assert_eq!(
        r.json().unwrap(),
        json!({"result": null}),
        "NX from the query string"
    );
    let r = http_request("GET", &format!("{}/incrby/n/5", gw.url()), &h, b"", T).unwrap();
    assert_eq!(r.json().unwrap(), json!({"result": 5}));
    let r = http_request("PUT", &format!("{}/get/n/", gw.url()), &h, b"", T).unwrap();
    assert_eq!(
        r.json().unwrap(),
        json!({"result": "5"}),
        "trailing slash ignored"
    );
    let r = http_request("DELETE", &format!("{}/get/n", gw.url()), &h, b"", T).unwrap();
    assert_eq!(r.status, 405);
    let r = http_request("HEAD", &format!("{}/get/n", gw.url()), &h, b"", T).unwrap();
    assert_eq!((r.status, r.body.len()), (200, 0));
    let r = http_request("POST", &format!("{}/monitor", gw.url()), &h, b"", T).unwrap();
    assert_eq!(r.status, 400, "no /monitor stream");
}

#[test]
fn pipeline_and_multi_exec() {
    let (redis, gw) = setup();
    let r = post(
        &gw,
        "/pipeline",
        &json!([
            ["SET", "k1", "valuex"],
            ["SETEX", "k2", 13, "valuez"],
            ["INCR", "k1"],
            ["ZADD", "z", 11, "a", 22, "b"],
            ["WATCH", "k1"]
        ]),
        &[],
    );
    assert_eq!(r.status, 200);
    assert_eq!(
        r.json().unwrap(),
        json!([{"result": "OK"}, {"result": "OK"}, {"error": "ERR value is not an integer or out of range"}, {"result": 2}, {"error": "ERR Command is not allowed: WATCH"}])
    );
    let r = post(
        &gw,
        "/multi-exec",
        &json!([
            ["SET", "t", "1"],
            ["INCR", "k1"],
            ["INCR", "t"],
            ["GET", "t"]
        ]),
        &[("Upstash-Encoding", "base64")],
    );
    assert_eq!(r.status, 200);
    assert_eq!(
        r.json().unwrap(),
        json!([{"result": "OK"}, {"error": "ERR value is not an integer or out of range"}, {"result": 2}, {"result": "Mg=="}])
    );
    // A command refused while queueing discards the whole transaction.
    let r = post(
        &gw,
        "/multi-exec",
        &json!([["SET", "t", "99"], ["NOSUCHCMD"]]),
        &[],
    );
    assert_eq!(r.status, 400);
    assert!(
        r.json().unwrap()["error"]
            .as_str()
            .unwrap()
            .starts_with("ERR unknown command"),
        "{}",
        r.text()
    );
    assert_eq!(
        redis.redis_command(&[b"GET", b"t"]).unwrap(),
        RespValue::Bulk(b"2".to_vec())
    );
    let r = post(
        &gw,
        "/multi-exec",
        &json!([["SET", "t", "99"], ["MULTI"]]),
        &[],
    );
    assert_eq!(r.status, 400);
    assert_eq!(
        redis.redis_command(&[b"GET", b"t"]).unwrap(),
        RespValue::Bulk(b"2".to_vec())
    );
    for bad in [json!([]), json!(["GET", "k"]), json!([["GET", "k"], "x"])] {
        assert_eq!(post(&gw, "/pipeline", &bad, &[]).status, 400, "{bad}");
        assert_eq!(post(&gw, "/multi-exec", &bad, &[]).status, 400, "{bad}");
    }
    // The connection must still be usable after all that (no MULTI left open).
    for _ in 0..5 {
        let r = post(&gw, "/", &json!(["GET", "t"]), &[]);
        assert_eq!(r.json().unwrap(), json!({"result": "2"}));
    }
}

#[test]
fn http_keep_alive_pipelining_chunked_and_expect() {
    let (_redis, gw) = setup();
    let body1 = r#"["SET","ka","1"]"#;
    let req = format!(
        "POST / HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: {}\r\n\r\n{body1}\
         POST / HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nTransfer-Encoding: chunked\r\n\r\n\
         5\r\n[\"INC\r\n8;x=y\r\nR\",\"ka\"]\r\n0\r\n\r\n\
         POST /pipeline HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nExpect: 100-continue\r\nContent-Length: 14\r\n\r\n[[\"GET\",\"ka\"]]\
         GET /get/ka HTTP/1.0\r\nAuthorization: Bearer {TOKEN}\r\n\r\n",
        body1.len()
    );
    let rs = raw(&gw, req.as_bytes(), 4);
    assert_eq!(rs[0].json().unwrap(), json!({"result": "OK"}));
    assert_eq!(rs[1].json().unwrap(), json!({"result": 2}));
    assert_eq!(rs[2].json().unwrap(), json!([{"result": "2"}]));
    assert_eq!(rs[3].json().unwrap(), json!({"result": "2"}));
    assert_eq!(rs[0].header("connection"), Some("keep-alive"));
    assert_eq!(
        rs[3].header("connection"),
        Some("close"),
        "HTTP/1.0 without keep-alive closes"
    );
    // Malformed framing is refused.
    let rs = raw(
        &gw,
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        1,
    );
    assert_eq!(rs[0].status, 400);
    let rs = raw(
        &gw,
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcd\r\n",
        1,
    );
    assert_eq!(rs[0].status, 400);
    let rs = raw(&gw, b"POST / HTTP/1.1\r\nContent-Length: x\r\n\r\n", 1);
    assert_eq!(rs[0].status, 400);
    let rs = raw(&gw, b"GARBAGE\r\n\r\n", 1);
    assert_eq!(rs[0].status, 400);
}

#[test]
fn oversized_bodies_are_refused() {
    let redis = RedisServer::start().unwrap();
    let mut cfg = GatewayConfig::new(redis.addr());
    cfg.max_body = 100;
    let gw = UpstashGateway::start_with(cfg).unwrap();
    let big = json!(["SET", "k", "x".repeat(200)]).to_string();
    let r = http_request("POST", &format!("{}/", gw.url()), &[], big.as_bytes(), T).unwrap();
    assert_eq!(r.status, 413);
    assert_eq!(
        redis.redis_command(&[b"EXISTS", b"k"]).unwrap(),
        RespValue::Integer(0)
    );
}

#[test]
fn cors_preflight_without_credentials() {
    let (_redis, gw) = setup();
    let r = http_request(
        "OPTIONS",
        &format!("{}/pipeline", gw.url()),
        &[
            ("Origin", "http://localhost:8080"),
            ("Access-Control-Request-Method", "POST"),
            ("Access-Control-Request-Headers", "authorization,content-type,upstash-encoding,upstash-sync-token,upstash-telemetry-sdk"),
        ],
        b"",
        T,
    )
    .unwrap();
    assert_eq!(r.status, 204);
    assert_eq!(r.header("access-control-allow-origin"), Some("*"));
    assert!(r
        .header("access-control-allow-methods")
        .unwrap()
        .contains("POST"));
    let allow = r
        .header("access-control-allow-headers")
        .unwrap()
        .to_ascii_lowercase();
    for h in [
        "authorization",
        "content-type",
        "upstash-encoding",
        "upstash-sync-token",
        "upstash-telemetry-sdk",
    ] {
        assert!(allow.contains(h), "{h} missing from {allow}");
    }
}

#[test]
fn redis_paused_killed_and_restarted() {
    let mut redis = RedisServer::start().unwrap();
    let mut cfg = GatewayConfig::new(redis.addr());
    cfg.redis_timeout = Duration::from_millis(300);
    let gw = UpstashGateway::start_with(cfg).unwrap();
    let call = |cmd: Value| {
        http_request(
            "POST",
            &format!("{}/", gw.url()),
            &[],
            cmd.to_string().as_bytes(),
            T,
        )
        .unwrap()
    };
    assert_eq!(call(json!(["SET", "k", "v"])).status, 200);
    redis.pause().unwrap();
    let start = Instant::now();
    let r = call(json!(["GET", "k"]));
    assert_eq!(r.status, 504, "{}", r.text());
    assert!(start.elapsed() < Duration::from_secs(3));
    redis.resume().unwrap();
    assert_eq!(
        call(json!(["GET", "k"])).json().unwrap(),
        json!({"result": "v"})
    );
    redis.kill();
    let r = call(json!(["GET", "k"]));
    assert_eq!(r.status, 503, "{}", r.text());
    redis.restart().unwrap();
    // Pooled connections to the old process are stale; the gateway reconnects.
    assert_eq!(
        call(json!(["GET", "k"])).json().unwrap(),
        json!({"result": null}),
        "restart loses data"
    );
    assert_eq!(call(json!(["SET", "k", "w"])).status, 200);
    redis.restart().unwrap();
    assert_eq!(
        call(json!(["GET", "k"])).json().unwrap(),
        json!({"result": null})
    );
}

#[test]
fn counts_requests_and_commands() {
    let (_redis, gw) = setup();
    assert_eq!((gw.request_count(), gw.command_count()), (0, 0));
    post(&gw, "/", &json!(["PING"]), &[]);
    post(
        &gw,
        "/pipeline",
        &json!([["PING"], ["PING"], ["PING"]]),
        &[],
    );
    post(&gw, "/multi-exec", &json!([["PING"], ["PING"]]), &[]);
    assert_eq!((gw.request_count(), gw.command_count()), (3, 6));
}

#[test]
fn stop_closes_open_connections() {
    let (_redis, mut gw) = setup();
    let mut s = TcpStream::connect(gw.addr()).unwrap();
    s.set_read_timeout(Some(T)).unwrap();
    let req = format!(
        "POST / HTTP/1.1\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: 8\r\n\r\n[\"PING\"]"
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    assert_eq!(read_response(&mut r, false).unwrap().status, 200);
    let addr = gw.addr();
    gw.stop();
    let mut rest = Vec::new();
    assert_eq!(
        r.read_to_end(&mut rest).unwrap_or(0),
        0,
        "kept-alive connection closed"
    );
    assert!(
        TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_err(),
        "listener closed"
    );
}

// ---------------------------------------------------------------------------
// /subscribe and /psubscribe event streams
// ---------------------------------------------------------------------------

/// An open event stream read straight off the socket.
struct Sse {
    status: u16,
    head: Head,
    chunked: bool,
    r: BufReader<TcpStream>,
    /// Decoded body bytes not yet returned as events.
    buf: Vec<u8>,
}

/// Sends one raw request (`extra` header lines end in CRLF) and reads the
/// response head, leaving the body on the socket.
fn open_stream(gw: &UpstashGateway, request_line: &str, extra: &str, body: &str) -> Sse {
    let mut s = TcpStream::connect(gw.addr()).unwrap();
    s.set_read_timeout(Some(T)).unwrap();
    let req = format!(
        "{request_line}\r\nHost: 127.0.0.1\r\n{extra}Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut r = BufReader::new(s);
    let head = read_head(&mut r).unwrap().expect("a response");
    let status = head.start_line.split(' ').nth(1).unwrap().parse().unwrap();
    let chunked = head
        .header("transfer-encoding")
        .is_some_and(|t| t.eq_ignore_ascii_case("chunked"));
    Sse {
        status,
        head,
        chunked,
        r,
        buf: Vec::new(),
    }
}

/// What `@upstash/redis` 1.39 sends to open a subscription (see
/// `SubscribeCommand`): POST, JSON body `[]`, SSE headers, its usual ones.
fn client_headers() -> String {
    format!(
        "Authorization: Bearer {TOKEN}\r\nAccept: text/event-stream\r\nCache-Control: no-cache\r\n\
         Connection: keep-alive\r\nContent-Type: application/json\r\nUpstash-Encoding: base64\r\n\
         upstash-sync-token: \r\n"
    )
}

fn subscribe(gw: &UpstashGateway, path: &str) -> Sse {
    let s = open_stream(
        gw,
        &format!("POST {path} HTTP/1.1"),
        &client_headers(),
        "[]",
    );
    assert_eq!(s.status, 200, "{:?}", s.head);
    s
}

impl Sse {
    /// The next raw chunk of a chunked body (`None` at the last chunk).
    fn raw_chunk(&mut self) -> Option<Vec<u8>> {
        let mut line = String::new();
        self.r.read_line(&mut line).unwrap();
        let n = usize::from_str_radix(line.trim_end(), 16)
            .unwrap_or_else(|_| panic!("bad chunk size line {line:?}"));
        let mut data = vec![0; n + 2];
        self.r.read_exact(&mut data).unwrap();
        assert!(data.ends_with(b"\r\n"), "chunk not ended by CRLF");
        data.truncate(n);
        (n > 0).then_some(data)
    }

    /// The next event, without its terminating blank line; `None` at the
    /// end of the body.
    fn event(&mut self) -> Option<Vec<u8>> {
        loop {
            if let Some(i) = self.buf.windows(2).position(|w| w == b"\n\n") {
                let ev = self.buf[..i].to_vec();
                self.buf.drain(..i + 2);
                return Some(ev);
            }
            if self.chunked {
                let chunk = self.raw_chunk()?;
                self.buf.extend(chunk);
            } else {
                let mut b = [0u8; 4096];
                match self.r.read(&mut b).unwrap() {
                    0 => return None,
                    n => self.buf.extend_from_slice(&b[..n]),
                }
            }
        }
    }

    fn expect(&mut self, want: &str) {
        let got = self.event().expect("an event");
        assert_eq!(
            String::from_utf8_lossy(&got),
            want,
            "raw event bytes {got:?}"
        );
    }
}

fn publish(gw: &UpstashGateway, channel: &str, payload: &str) -> Value {
    post(gw, "/", &json!(["PUBLISH", channel, payload]), &[])
        .json()
        .unwrap()
}

fn numsub(redis: &RedisServer, channel: &[u8]) -> i64 {
    let v = redis
        .redis_command(&[b"PUBSUB", b"NUMSUB", channel])
        .unwrap();
    v.as_array().unwrap()[1].as_int().unwrap()
}

/// Redis clients in pub/sub mode, from `CLIENT LIST TYPE pubsub`.
fn pubsub_clients(redis: &RedisServer) -> usize {
    let v = redis
        .redis_command(&[b"CLIENT", b"LIST", b"TYPE", b"pubsub"])
        .unwrap();
    v.as_text()
        .unwrap()
        .lines()
        .filter(|l| !l.is_empty())
        .count()
}

fn wait_until(what: &str, within: Duration, mut ok: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !ok() {
        assert!(start.elapsed() < within, "{what}: not within {within:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    start.elapsed()
}

#[test]
fn subscribe_streams_messages_in_upstash_sse_framing() {
    let (redis, gw) = setup();
    let before = gw.request_count();
    let mut s = subscribe(&gw, "/subscribe/ch");
    assert_eq!(s.head.header("content-type"), Some("text/event-stream"));
    assert_eq!(s.head.header("cache-control"), Some("no-cache"));
    assert_eq!(s.head.header("access-control-allow-origin"), Some("*"));
    assert!(s.chunked, "{:?}", s.head);
    // The exact bytes: one chunk per event, LF line ends, a blank line after.
    assert_eq!(s.raw_chunk().unwrap(), b"data: subscribe,ch,1\n\n");
    assert_eq!(
        gw.request_count(),
        before + 1,
        "a subscription is a request"
    );
    assert_eq!(gw.subscription_count(), 1);
    assert_eq!(numsub(&redis, b"ch"), 1);

    // Published through the gateway's command route (the pool is untouched
    // by the subscription).
    assert_eq!(publish(&gw, "ch", "hello, world"), json!({"result": 1}));
    assert_eq!(s.raw_chunk().unwrap(), b"data: message,ch,hello, world\n\n");
    // Raw payloads, not base64, although the request said Upstash-Encoding: base64.
    let uni = "héllo, wörld ✓ 😀 ,a,,b, {\"x\":[1,2]}";
    assert_eq!(publish(&gw, "ch", uni), json!({"result": 1}));
    s.expect(&format!("data: message,ch,{uni}"));
    publish(&gw, "ch", "");
    s.expect("data: message,ch,");
    // Line breaks: one `data: ` line per line (SSE).
    publish(&gw, "ch", "line1\nline2\r\nline3");
    s.expect("data: message,ch,line1\ndata: line2\ndata: line3");
    // Bytes that are not UTF-8 pass through unchanged.
    redis
        .redis_command(&[b"PUBLISH", b"ch", b"\xff\x00z"])
        .unwrap();
    assert_eq!(s.event().unwrap(), b"data: message,ch,\xff\x00z");
    // Other channels are not delivered.
    publish(&gw, "other", "nope");
    publish(&gw, "ch", "last");
    s.expect("data: message,ch,last");
    assert_eq!(gw.subscription_count(), 1);
}

#[test]
fn several_channels_percent_decoding_psubscribe_and_query_token() {
    let (redis, gw) = setup();
    // Channels are path segments, percent-decoded like every path argument.
    let mut s = subscribe(&gw, "/subscribe/a/caf%C3%A9%2Fx%20y/");
    s.expect("data: subscribe,a,1");
    s.expect("data: subscribe,café/x y,2");
    assert_eq!(numsub(&redis, "café/x y".as_bytes()), 1);
    assert_eq!(publish(&gw, "café/x y", "1,2"), json!({"result": 1}));
    s.expect("data: message,café/x y,1,2");
    publish(&gw, "a", "to a");
    s.expect("data: message,a,to a");

    // Patterns, with GET and the token in the query (EventSource style).
    let mut p = open_stream(
        &gw,
        &format!("GET /psubscribe/user:*/chat:%3F?_token={TOKEN} HTTP/1.1"),
        "Accept: text/event-stream\r\n",
        "",
    );
    assert_eq!(p.status, 200);
    p.expect("data: psubscribe,user:*,1");
    p.expect("data: psubscribe,chat:?,2");
    assert_eq!(
        redis
            .redis_command(&[b"PUBSUB", b"NUMPAT"])
            .unwrap()
            .as_int(),
        Some(2)
    );
    assert_eq!(publish(&gw, "user:42", "p, 1"), json!({"result": 1}));
    p.expect("data: pmessage,user:*,user:42,p, 1");
    publish(&gw, "other:1", "nope");
    publish(&gw, "chat:x", "hi");
    p.expect("data: pmessage,chat:?,chat:x,hi");
    // One publish reaching both a channel and a pattern subscription.
    assert_eq!(publish(&gw, "a", "both"), json!({"result": 1}));
    s.expect("data: message,a,both");

    // HTTP/1.0 has no chunked encoding: the body ends when the connection does.
    let mut h = open_stream(
        &gw,
        "POST /subscribe/old HTTP/1.0",
        &format!("Authorization: Bearer {TOKEN}\r\n"),
        "",
    );
    assert_eq!(h.status, 200);
    assert!(!h.chunked && h.head.header("transfer-encoding").is_none());
    h.expect("data: subscribe,old,1");
    publish(&gw, "old", "still works");
    h.expect("data: message,old,still works");
    assert_eq!(gw.subscription_count(), 3);
}

#[test]
fn subscribe_needs_the_token_and_a_channel() {
    let (redis, gw) = setup();
    for (headers, query) in [
        (vec![], ""),
        (vec![("Authorization", "Bearer wrong")], ""),
        (vec![], "?_token=wrong"),
    ] {
        for path in ["/subscribe/ch", "/psubscribe/c*"] {
            let mut hs = headers.clone();
            hs.push(("Accept", "text/event-stream"));
            let r =
                http_request("POST", &format!("{}{path}{query}", gw.url()), &hs, b"[]", T).unwrap();
            assert_eq!(
                (r.status, r.json().unwrap()),
                (401, json!({"error": "Unauthorized"})),
                "{path}{query}"
            );
            assert_eq!(r.header("access-control-allow-origin"), Some("*"));
        }
    }
    let (k, v) = auth();
    let h = [(k, v.as_str())];
    for path in ["/subscribe", "/subscribe/", "/psubscribe"] {
        let r = http_request("POST", &format!("{}{path}", gw.url()), &h, b"", T).unwrap();
        assert_eq!(r.status, 400, "{path}");
        assert!(r.json().unwrap()["error"]
            .as_str()
            .unwrap()
            .starts_with("ERR wrong number of arguments"));
    }
    let r = http_request("DELETE", &format!("{}/subscribe/ch", gw.url()), &h, b"", T).unwrap();
    assert_eq!(r.status, 405);
    // A refused subscription keeps the connection usable (keep-alive).
    let rs = raw(
        &gw,
        format!(
            "POST /subscribe/ch HTTP/1.1\r\nContent-Length: 0\r\n\r\n\
             POST / HTTP/1.1\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: 8\r\n\r\n[\"PING\"]"
        )
        .as_bytes(),
        2,
    );
    assert_eq!((rs[0].status, rs[1].status), (401, 200));
    // The CORS preflight of a subscription needs no token.
    let r = http_request(
        "OPTIONS",
        &format!("{}/subscribe/ch", gw.url()),
        &[("Access-Control-Request-Method", "POST")],
        b"",
        T,
    )
    .unwrap();
    assert_eq!(r.status, 204);
    assert_eq!((numsub(&redis, b"ch"), gw.subscription_count()), (0, 0));
}

#[test]
fn client_disconnect_releases_the_redis_connection() {
    let (redis, gw) = setup();
    let base = pubsub_clients(&redis);
    for path in ["/subscribe/ch", "/psubscribe/ch*"] {
        let mut s = subscribe(&gw, path);
        s.event().unwrap();
        assert_eq!(pubsub_clients(&redis), base + 1, "own Redis connection");
        assert_eq!(gw.subscription_count(), 1);
        // Nothing is ever published: only the client's EOF ends it.
        drop(s);
        let took = wait_until("redis subscriber released", Duration::from_secs(3), || {
            numsub(&redis, b"ch") == 0
                && redis
                    .redis_command(&[b"PUBSUB", b"NUMPAT"])
                    .unwrap()
                    .as_int()
                    == Some(0)
                && pubsub_clients(&redis) == base
                && gw.subscription_count() == 0
        });
        eprintln!("{path}: released {took:?} after the client closed");
    }
    // A client that half-closes (shutdown write) is gone too.
    let s = subscribe(&gw, "/subscribe/ch");
    s.r.get_ref().shutdown(std::net::Shutdown::Write).unwrap();
    wait_until("released after half-close", Duration::from_secs(3), || {
        numsub(&redis, b"ch") == 0 && gw.subscription_count() == 0
    });
    // Many open-and-drop cycles leave nothing behind.
    for _ in 0..20 {
        let mut s = subscribe(&gw, "/subscribe/ch");
        s.event().unwrap();
    }
    wait_until("20 subscriptions released", Duration::from_secs(3), || {
        numsub(&redis, b"ch") == 0 && pubsub_clients(&redis) == base && gw.subscription_count() == 0
    });
    assert_eq!(post(&gw, "/", &json!(["PING"]), &[]).status, 200);
}

#[test]
fn stopping_the_gateway_ends_open_subscriptions() {
    let (redis, mut gw) = setup();
    let mut a = subscribe(&gw, "/subscribe/ch");
    let mut b = subscribe(&gw, "/psubscribe/p*");
    a.event().unwrap();
    b.event().unwrap();
    assert_eq!(gw.subscription_count(), 2);
    let start = Instant::now();
    gw.stop();
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(gw.subscription_count(), 0, "stop() waits for them");
    for s in [&mut a, &mut b] {
        let mut rest = Vec::new();
        let _ = s.r.read_to_end(&mut rest);
        assert!(!rest.windows(5).any(|w| w == b"data:"), "{rest:?}");
    }
    wait_until("redis subscribers gone", Duration::from_secs(3), || {
        numsub(&redis, b"ch") == 0
            && redis
                .redis_command(&[b"PUBSUB", b"NUMPAT"])
                .unwrap()
                .as_int()
                == Some(0)
    });
    drop(gw);
}

#[test]
fn redis_going_away_ends_the_stream_cleanly() {
    let mut redis = RedisServer::start().unwrap();
    let mut cfg = GatewayConfig::new(redis.addr());
    cfg.redis_timeout = Duration::from_millis(500);
    let gw = UpstashGateway::start_with(cfg).unwrap();
    let mut s = open_stream(&gw, "POST /subscribe/ch HTTP/1.1", "", "");
    assert_eq!(s.status, 200);
    s.expect("data: subscribe,ch,1");
    redis.kill();
    // The terminating chunk, then the connection closes.
    assert_eq!(s.event(), None);
    wait_until("subscription gone", Duration::from_secs(3), || {
        gw.subscription_count() == 0
    });
    // Redis down: a plain error reply instead of a stream.
    let r = http_request("POST", &format!("{}/subscribe/ch", gw.url()), &[], b"", T).unwrap();
    assert_eq!(r.status, 503, "{}", r.text());
    redis.restart().unwrap();
    let mut s = open_stream(&gw, "POST /subscribe/ch HTTP/1.1", "", "");
    s.expect("data: subscribe,ch,1");
    // Paused Redis: the subscribe confirmation times out → 504.
    redis.pause().unwrap();
    let r = http_request("POST", &format!("{}/subscribe/x", gw.url()), &[], b"", T).unwrap();
    assert_eq!(r.status, 504, "{}", r.text());
    // ...and the open stream still ends as soon as its client leaves.
    drop(s);
    wait_until(
        "released while redis is paused",
        Duration::from_secs(3),
        || gw.subscription_count() == 0,
    );
    redis.resume().unwrap();
}
