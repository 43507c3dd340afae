//! A backend that misbehaves: every failure must come back as a `LockError`
//! with the right code, promptly, and never as a panic or a hang. The "server"
//! here is deliberately not etcd: it is a hostile HTTP peer.
#![cfg(feature = "native")]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use edgelock::core::etcd::EtcdConfig;
use edgelock::native::Client;

/// Answers every request with `reply` (raw bytes after the headers are read),
/// or holds the connection open and silent when `reply` is None.
fn hostile_server(reply: Option<Vec<u8>>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let reply = reply.clone();
            std::thread::spawn(move || serve(conn, reply));
        }
    });
    url
}

fn serve(conn: TcpStream, reply: Option<Vec<u8>>) {
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut conn = conn;
    loop {
        let mut len = 0usize;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                len = v.trim().parse().unwrap_or(0);
            }
            if line == "\r\n" {
                break;
            }
        }
        let mut body = vec![0; len];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        match &reply {
            Some(r) => {
                if conn.write_all(r).is_err() {
                    return;
                }
            }
            None => std::thread::sleep(Duration::from_secs(30)),
        }
    }
}

fn response(status: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn try_against(url: String) -> (edgelock::LockError, Duration) {
    let mut cfg = EtcdConfig::new(vec![url]);
    cfg.request_timeout_ms = 400;
    cfg.headers = vec![("Authorization".into(), "Bearer SENTINEL-SECRET-1234".into())];
    let client = Client::etcd(cfg).unwrap();
    let started = Instant::now();
    let err = client
        .try_acquire("job")
        .expect_err("a hostile backend never grants a lock");
    let took = started.elapsed();
    assert!(
        !err.to_string().contains("SENTINEL-SECRET"),
        "secret leaked: {err}"
    );
    assert!(
        !format!("{err:?}").contains("SENTINEL-SECRET"),
        "secret leaked: {err:?}"
    );
    (err, took)
}

#[test]
fn http_errors_are_backend_errors() {
    for status in [
        "500 Internal Server Error",
        "503 Service Unavailable",
        "404 Not Found",
        "400 Bad Request",
        "401 Unauthorized",
    ] {
        let (err, _) = try_against(hostile_server(Some(response(
            status,
            r#"{"error":"nope","code":2}"#,
        ))));
        assert_eq!(err.code(), "BACKEND", "{status}: {err}");
    }
    // A backend that echoes our Authorization header back in its error.
    let echo = format!(
        r#"{{"error":"{} unauthorized: Bearer SENTINEL-SECRET-1234","code":16}}"#,
        "x".repeat(10)
    );
    let (err, _) = try_against(hostile_server(Some(response("401 Unauthorized", &echo))));
    assert_eq!(err.code(), "BACKEND", "{err}");
}

#[test]
fn malformed_and_hostile_json_are_backend_errors() {
    let bodies = [
        "not json",
        "[]",
        "{\"ID\":\"zz\",\"TTL\":\"10\"}",
        "{\"ID\":\"1\",\"TTL\":\"-5\"}",
        "{\"ID\":\"99999999999999999999999\",\"TTL\":\"1\"}",
        "{\"header\":{\"revision\":\"x\"}}",
        "{\"ID\":\"1\",\"TTL\":\"10\",\"nested\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}",
        "",
    ];
    for body in bodies {
        let (err, _) = try_against(hostile_server(Some(response("200 OK", body))));
        assert_eq!(err.code(), "BACKEND", "{body:?}: {err}");
    }
}

#[test]
fn a_lease_grant_followed_by_garbage_txn_replies_is_a_backend_error() {
    // Grant succeeds, then every reply is a well-formed grant again: the txn parser sees nonsense.
    let (err, _) = try_against(hostile_server(Some(response(
        "200 OK",
        r#"{"ID":"7","TTL":"10"}"#,
    ))));
    assert!(matches!(err.code(), "BACKEND"), "{err}");
}

#[test]
fn a_silent_server_times_out_as_a_transport_error() {
    let (err, took) = try_against(hostile_server(None));
    assert_eq!(err.code(), "TRANSPORT", "{err}");
    // Two attempts of 400 ms each, plus scheduling slack on a busy machine
    // (still well short of the 30 s the server stays silent).
    assert!(took < Duration::from_secs(20), "took {took:?}");
}

#[test]
fn a_connection_closed_mid_reply_is_a_transport_error() {
    let (err, _) = try_against(hostile_server(Some(
        b"HTTP/1.1 200 OK\r\ncontent-length: 500\r\n\r\n{\"ID\"".to_vec(),
    )));
    assert!(matches!(err.code(), "TRANSPORT" | "BACKEND"), "{err}");
}
