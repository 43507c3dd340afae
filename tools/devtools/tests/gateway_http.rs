//! The Upstash gateway over raw HTTP, against a real redis-server.

use std::io::{BufReader, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use edgelock_devtools::http1::read_response;
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
    let r = http_request("POST", &format!("{}/subscribe/chan", gw.url()), &h, b"", T).unwrap();
    assert_eq!(r.status, 400);
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
    use std::io::Read;
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
