//! The native driver's byte streams against a real redis-server, plain and
//! on its own TLS port, with the bytes of the Redis protocol written by hand
//! (the core's RESP codec is tested on its own).

use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

use edgelock_devtools::redis::{RedisOptions, RedisServer};
use edgelock_devtools::{free_port, TestPki};

use super::{Deliver, Streams};
use crate::core::{Input, RequestId, StreamOpen, TransportError};
use crate::native::tls::TlsConnector;
use crate::native::TlsConfig;
use std::sync::Arc;

const PING: &[u8] = b"*1\r\n$4\r\nPING\r\n";
const WAIT: Duration = Duration::from_secs(10);

fn open(id: u64, port: u16, tls: Option<&str>) -> StreamOpen {
    StreamOpen {
        id: RequestId(id),
        host: "127.0.0.1".into(),
        port,
        tls: tls.map(str::to_string),
        timeout_ms: Some(5_000),
    }
}

fn no_tls() -> Result<TlsConnector, TransportError> {
    panic!("a plain stream asked for TLS")
}

/// The next input delivered for the stream.
fn next(rx: &Receiver<Input>) -> Input {
    match rx.recv_timeout(WAIT) {
        Ok(input) => input,
        Err(e) => panic!("no input within {WAIT:?}: {e}"),
    }
}

/// A sink for the stream's inputs, and where they arrive.
fn sink() -> (Deliver, Receiver<Input>) {
    let (tx, rx) = channel();
    let tx = std::sync::Mutex::new(tx);
    let deliver: Deliver = Arc::new(move |input| {
        let _ = tx.lock().unwrap().send(input);
    });
    (deliver, rx)
}

/// Bytes read on the stream until `want` bytes arrived (any split).
fn read_exactly(rx: &Receiver<Input>, want: usize) -> Vec<u8> {
    let deadline = Instant::now() + WAIT;
    let mut got = Vec::new();
    while got.len() < want {
        assert!(Instant::now() < deadline, "read {got:?} only");
        match next(rx) {
            Input::Chunk { data, .. } => got.extend(data),
            other => panic!("expected bytes, got {other:?}"),
        }
    }
    got
}

#[test]
fn a_plain_stream_carries_pipelined_commands_and_reports_the_peer_closing() {
    let redis = RedisServer::start().unwrap();
    let (tx, rx) = sink();
    let mut streams = Streams::default();
    streams
        .open(open(1, redis.port(), None), &tx, no_tls)
        .unwrap();
    // Written before the connection is up: kept and sent in order.
    streams.write(RequestId(1), PING.to_vec());
    assert_eq!(next(&rx), Input::Opened { id: RequestId(1) });
    let mut pipelined = PING.to_vec();
    pipelined.extend_from_slice(b"*2\r\n$4\r\nECHO\r\n$4\r\na\r\nb\r\n");
    streams.write(RequestId(1), pipelined);
    assert_eq!(read_exactly(&rx, 24), b"+PONG\r\n+PONG\r\n$4\r\na\r\nb\r\n");
    streams.write(RequestId(1), b"*1\r\n$4\r\nQUIT\r\n".to_vec());
    assert_eq!(read_exactly(&rx, 5), b"+OK\r\n");
    assert_eq!(next(&rx), Input::StreamEnd { id: RequestId(1) });
}

#[test]
fn a_closed_stream_delivers_nothing_more() {
    let redis = RedisServer::start().unwrap();
    let (tx, rx) = sink();
    let mut streams = Streams::default();
    streams
        .open(open(7, redis.port(), None), &tx, no_tls)
        .unwrap();
    assert_eq!(next(&rx), Input::Opened { id: RequestId(7) });
    streams.close(RequestId(7));
    streams.write(RequestId(7), PING.to_vec());
    // The reading thread ends on the shutdown; whatever it reports for the
    // closed id, no reply to the write after the close can arrive.
    while let Ok(input) = rx.recv_timeout(Duration::from_millis(500)) {
        assert!(!matches!(input, Input::Chunk { .. }), "{input:?}");
    }
}

#[test]
fn a_refused_connection_is_a_connect_failure() {
    let port = free_port().unwrap();
    let (tx, rx) = sink();
    let mut streams = Streams::default();
    streams.open(open(3, port, None), &tx, no_tls).unwrap();
    match next(&rx) {
        Input::Failed {
            id,
            error: TransportError::Connect(_),
        } => assert_eq!(id, RequestId(3)),
        other => panic!("expected a connect failure, got {other:?}"),
    }
}

fn tls_redis(pki: &TestPki) -> (RedisServer, u16) {
    let tls_port = free_port().unwrap();
    let path = |p: std::path::PathBuf| p.to_string_lossy().into_owned();
    let extra_args = vec![
        "--tls-port".into(),
        tls_port.to_string(),
        "--tls-cert-file".into(),
        path(pki.server_cert()),
        "--tls-key-file".into(),
        path(pki.server_key()),
        "--tls-ca-cert-file".into(),
        path(pki.ca_cert()),
        "--tls-auth-clients".into(),
        "no".into(),
    ];
    let redis = RedisServer::start_with(RedisOptions {
        extra_args,
        ..RedisOptions::default()
    })
    .unwrap();
    (redis, tls_port)
}

#[test]
fn a_tls_stream_to_redis_own_tls_port_carries_commands() {
    let pki = TestPki::generate().unwrap();
    let (_redis, tls_port) = tls_redis(&pki);
    let connector = TlsConfig::new().with_ca_file(pki.ca_cert()).load().unwrap();
    let (tx, rx) = sink();
    let mut streams = Streams::default();
    let c = connector.clone();
    streams
        .open(open(5, tls_port, Some("127.0.0.1")), &tx, || Ok(c))
        .unwrap();
    assert_eq!(next(&rx), Input::Opened { id: RequestId(5) });
    // A reply larger than one TLS record and one read buffer.
    let big = "x".repeat(40_000);
    let mut cmds =
        format!("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n${}\r\n{big}\r\n", big.len()).into_bytes();
    cmds.extend_from_slice(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n");
    cmds.extend_from_slice(PING);
    streams.write(RequestId(5), cmds);
    let want = format!("+OK\r\n${}\r\n{big}\r\n+PONG\r\n", big.len());
    assert_eq!(
        String::from_utf8(read_exactly(&rx, want.len())).unwrap(),
        want
    );
    streams.close(RequestId(5));
}

#[test]
fn a_tls_stream_to_an_untrusted_server_fails_to_connect_naming_the_cause() {
    let pki = TestPki::generate().unwrap();
    let (_redis, tls_port) = tls_redis(&pki);
    // Trusting another CA only.
    let connector = TlsConfig::new()
        .with_ca_file(pki.other_ca_cert())
        .load()
        .unwrap();
    let (tx, rx) = sink();
    let mut streams = Streams::default();
    streams
        .open(open(6, tls_port, Some("127.0.0.1")), &tx, || Ok(connector))
        .unwrap();
    match next(&rx) {
        Input::Failed {
            error: TransportError::Connect(m),
            ..
        } => assert!(m.contains("certificate"), "{m}"),
        other => panic!("expected a TLS connect failure, got {other:?}"),
    }
}
