//! Tests against tiny in-test HTTP servers on loopback.

use super::*;
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread;

/// A loopback server that runs `handler` on a thread for every accepted
/// connection and counts connections.
struct TestServer {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
}

impl TestServer {
    fn start(handler: impl Fn(usize, TcpStream) + Send + Sync + 'static) -> TestServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        let handler = Arc::new(handler);
        thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { return };
                let n = count.fetch_add(1, Ordering::SeqCst);
                let h = handler.clone();
                thread::spawn(move || h(n, conn));
            }
        });
        TestServer { addr, accepted }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    fn connections(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

/// Reads one request (head + Content-Length body); None at EOF.
pub(super) fn read_request(r: &mut impl BufRead) -> Option<(String, Vec<u8>)> {
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).ok()? == 0 {
            return None;
        }
        head.push_str(&line);
        if line == "\r\n" {
            break;
        }
    }
    let len = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .map(|v| v.trim().parse::<usize>().unwrap())
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).ok()?;
    Some((head, body))
}

fn get<'a>(url: &'a str, headers: &'a [(String, String)]) -> Request<'a> {
    Request {
        method: "GET",
        url,
        headers,
        body: b"",
        timeout: Some(Duration::from_secs(5)),
    }
}

#[test]
fn parses_urls() {
    assert_eq!(
        Url::parse("http://127.0.0.1:2379/v3/kv/txn").unwrap(),
        Url {
            tls: false,
            host: "127.0.0.1".into(),
            port: 2379,
            path: "/v3/kv/txn".into()
        }
    );
    assert_eq!(
        Url::parse("http://[::1]:8080/x").unwrap(),
        Url {
            tls: false,
            host: "::1".into(),
            port: 8080,
            path: "/x".into()
        }
    );
    assert_eq!(Url::parse("http://[::1]").unwrap().port, 80);
    assert_eq!(
        Url::parse("HTTP://example.com").unwrap(),
        Url {
            tls: false,
            host: "example.com".into(),
            port: 80,
            path: "/".into()
        }
    );
    assert_eq!(
        Url::parse("http://[::1]:8080/").unwrap().host_header(),
        "[::1]:8080"
    );
    assert_eq!(Url::parse("http://h/").unwrap().host_header(), "h");
    for bad in [
        "ftp://x",
        "http://",
        "http://h:0/",
        "http://h:99999",
        "http://[::1",
        "http://[::1]x",
        "http://u@h/",
        "http://h /",
        "",
        "h",
        "abcde€",
        "http€://x",
    ] {
        assert!(Url::parse(bad).is_err(), "{bad}");
    }
    let https = Url::parse("HTTPS://x.example/p").unwrap();
    assert_eq!(
        (https.tls, https.port, https.host_header()),
        (true, 443, "x.example".to_string())
    );
    assert_eq!(
        Url::parse("https://x.example:8443").unwrap().host_header(),
        "x.example:8443"
    );
    assert_eq!(
        Url::parse("https://x.example:80").unwrap().host_header(),
        "x.example:80"
    );
    assert!(!Url::parse("http://x.example").unwrap().tls);
}

#[test]
fn content_length_and_keep_alive_reuse() {
    let server = TestServer::start(|_, conn| {
        let mut r = BufReader::new(conn.try_clone().unwrap());
        let mut w = conn;
        while let Some((head, body)) = read_request(&mut r) {
            assert!(head.starts_with("POST /echo HTTP/1.1\r\n"), "{head}");
            assert!(head.contains("\r\nHost: 127.0.0.1:"), "{head}");
            assert!(head.contains("\r\nX-Test: yes\r\n"), "{head}");
            let reply = format!(
                "HTTP/1.1 201 Created\r\nContent-Length: {}\r\n\r\n",
                body.len()
            );
            w.write_all(reply.as_bytes()).unwrap();
            w.write_all(&body).unwrap();
        }
    });
    let client = HttpClient::new();
    let url = server.url("/echo");
    let headers = vec![("X-Test".to_string(), "yes".to_string())];
    for i in 0..3 {
        let body = format!("payload {i}");
        let req = Request {
            method: "POST",
            url: &url,
            headers: &headers,
            body: body.as_bytes(),
            timeout: None,
        };
        let resp = client.send(&req, &CancelHandle::new()).unwrap();
        assert_eq!(
            resp,
            Response {
                status: 201,
                body: body.into_bytes()
            }
        );
    }
    assert_eq!(
        server.connections(),
        1,
        "keep-alive connection must be reused"
    );
    assert_eq!(client.idle_count(), 1);
}

#[test]
fn chunked_body_with_extensions_and_trailers() {
    let server = TestServer::start(|_, conn| {
        let mut r = BufReader::new(conn.try_clone().unwrap());
        let mut w = conn;
        while read_request(&mut r).is_some() {
            w.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n1\r\n \r\nA\r\n0123456789\r\n0\r\nX-Trailer: t\r\n\r\n")
                .unwrap();
        }
    });
    let client = HttpClient::new();
    let url = server.url("/");
    for _ in 0..2 {
        let resp = client.send(&get(&url, &[]), &CancelHandle::new()).unwrap();
        assert_eq!(resp.status, 200);
        assert_eq!(resp.body, b"hello 0123456789");
    }
    assert_eq!(server.connections(), 1);
}

#[test]
fn close_delimited_body_is_read_to_eof_and_not_pooled() {
    let server = TestServer::start(|_, conn| {
        let mut r = BufReader::new(conn.try_clone().unwrap());
        let mut w = conn;
        read_request(&mut r);
        w.write_all(b"HTTP/1.0 200 OK\r\n\r\nall of it").unwrap();
    });
    let client = HttpClient::new();
    let resp = client
        .send(&get(&server.url("/"), &[]), &CancelHandle::new())
        .unwrap();
    assert_eq!(resp.body, b"all of it");
    assert_eq!(client.idle_count(), 0);
}

#[test]
fn stale_pooled_connection_is_retried_once_on_a_fresh_one() {
    // First connection: answers one request, then reads the next one and closes
    // without answering (an idle timeout racing our reuse). Later connections answer.
    let server = TestServer::start(|n, conn| {
        let mut r = BufReader::new(conn.try_clone().unwrap());
        let mut w = conn;
        while read_request(&mut r).is_some() {
            w.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                .unwrap();
            if n == 0 {
                read_request(&mut r);
                return; // drops the socket: EOF before any response byte
            }
        }
    });
    let client = HttpClient::new();
    let url = server.url("/");
    assert_eq!(
        client
            .send(&get(&url, &[]), &CancelHandle::new())
            .unwrap()
            .body,
        b"ok"
    );
    assert_eq!(
        client
            .send(&get(&url, &[]), &CancelHandle::new())
            .unwrap()
            .body,
        b"ok"
    );
    assert_eq!(server.connections(), 2);
}

#[test]
fn fresh_connection_closed_without_answer_is_an_error_not_a_retry() {
    let server = TestServer::start(|_, conn| {
        let mut r = BufReader::new(conn);
        read_request(&mut r);
    });
    let client = HttpClient::new();
    let err = client
        .send(&get(&server.url("/"), &[]), &CancelHandle::new())
        .unwrap_err();
    assert!(matches!(err, TransportError::Io(_)), "{err:?}");
    assert_eq!(server.connections(), 1);
}

#[test]
fn connection_refused_is_a_connect_error() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let url = format!("http://{addr}/");
    let err = HttpClient::new()
        .send(&get(&url, &[]), &CancelHandle::new())
        .unwrap_err();
    assert!(matches!(err, TransportError::Connect(_)), "{err:?}");
}

#[test]
fn read_timeout_fires() {
    let server = TestServer::start(|_, conn| {
        let mut r = BufReader::new(conn);
        read_request(&mut r);
        thread::sleep(Duration::from_secs(3));
    });
    let url = server.url("/");
    let req = Request {
        timeout: Some(Duration::from_millis(200)),
        ..get(&url, &[])
    };
    let t = Instant::now();
    let err = HttpClient::new()
        .send(&req, &CancelHandle::new())
        .unwrap_err();
    assert_eq!(err, TransportError::Timeout);
    assert!(t.elapsed() < Duration::from_secs(2));
}

#[test]
fn streaming_delivers_chunks_as_they_arrive_and_cancel_stops_it() {
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let release_rx = Arc::new(Mutex::new(release_rx));
    let server = TestServer::start(move |_, conn| {
        let mut r = BufReader::new(conn.try_clone().unwrap());
        let mut w = conn;
        read_request(&mut r);
        w.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nfirst\n\r\n")
            .unwrap();
        // Hold the stream open (like an idle watch) until the test ends.
        let _ = lock(&release_rx).recv();
    });
    let result =
        silent_stream_stays_open_until_cancelled(HttpClient::new(), server.url("/v3/watch"));
    assert!(result.is_err(), "{result:?}");
    drop(release_tx);
}

/// Streams from `url` (a server that sends one chunk, then stays silent):
/// the first chunk arrives, the stream stays open past the head deadline
/// (500 ms), and a cancel ends it within 2 s. Returns what the request
/// returned. Shared by the plain and the TLS stream tests.
pub(super) fn silent_stream_stays_open_until_cancelled(
    client: HttpClient,
    url: String,
) -> Result<StreamOutcome, TransportError> {
    let cancel = CancelHandle::new();
    let (chunk_tx, chunk_rx) = mpsc::channel::<Vec<u8>>();
    let c2 = cancel.clone();
    let worker = thread::spawn(move || {
        let req = Request {
            method: "POST",
            url: &url,
            headers: &[],
            body: b"{}",
            timeout: Some(Duration::from_millis(500)),
        };
        let mut sink = |piece: &[u8]| chunk_tx.send(piece.to_vec()).unwrap();
        client.send_streaming(&req, &c2, &mut sink)
    });
    // The first chunk arrives while the response is still open, after the head
    // deadline (500 ms) would have passed if it applied to the body.
    assert_eq!(
        chunk_rx.recv_timeout(Duration::from_secs(5)).unwrap(),
        b"first\n"
    );
    thread::sleep(Duration::from_millis(700));
    assert!(
        !worker.is_finished(),
        "a silent stream must stay open past the head deadline"
    );
    let t = Instant::now();
    cancel.cancel();
    let result = worker.join().unwrap();
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    result
}

#[test]
fn streaming_non_2xx_is_returned_whole_and_2xx_end_is_reported() {
    let server = TestServer::start(|n, conn| {
        let mut r = BufReader::new(conn.try_clone().unwrap());
        let mut w = conn;
        read_request(&mut r);
        if n == 0 {
            w.write_all(b"HTTP/1.1 503 Unavailable\r\nContent-Length: 4\r\n\r\nbusy")
                .unwrap();
        } else {
            w.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n").unwrap();
        }
    });
    let client = HttpClient::new();
    let url = server.url("/");
    let mut got = Vec::new();
    let out = client
        .send_streaming(&get(&url, &[]), &CancelHandle::new(), &mut |p| {
            got.extend_from_slice(p)
        })
        .unwrap();
    assert_eq!(
        out,
        StreamOutcome::Whole(Response {
            status: 503,
            body: b"busy".to_vec()
        })
    );
    assert!(got.is_empty());
    let out = client
        .send_streaming(&get(&url, &[]), &CancelHandle::new(), &mut |p| {
            got.extend_from_slice(p)
        })
        .unwrap();
    assert_eq!(out, StreamOutcome::Ended);
    assert_eq!(got, b"abcde");
}

#[test]
fn cancel_before_connect_fails_the_request() {
    let server = TestServer::start(|_, _| {});
    let cancel = CancelHandle::new();
    cancel.cancel();
    assert!(HttpClient::new()
        .send(&get(&server.url("/"), &[]), &cancel)
        .is_err());
}

/// Serves one fixed raw reply to every request.
fn raw_server(reply: &'static [u8]) -> TestServer {
    TestServer::start(move |_, conn| {
        let mut r = BufReader::new(conn.try_clone().unwrap());
        let mut w = conn;
        read_request(&mut r);
        let _ = w.write_all(reply);
    })
}

#[test]
fn hostile_responses_are_errors() {
    let cases: &[&'static [u8]] = &[
        b"garbage\r\n\r\n",
        b"HTTP/1.1 999 Nope\r\n\r\n",
        b"HTTP/1.1 20 OK\r\n\r\n",
        b"HTTP/2 200 OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
        b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1099511627776\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcXY0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",
        b"HTTP/1.1 101 Switching\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nX: \xff\xfe\r\n\r\n",
        b"HTTP/1.1 200",
        b"",
    ];
    let client = HttpClient::new();
    for reply in cases {
        let server = raw_server(reply);
        let res = client.send(&get(&server.url("/"), &[]), &CancelHandle::new());
        assert!(
            res.is_err(),
            "{:?} gave {res:?}",
            String::from_utf8_lossy(reply)
        );
    }
}

#[test]
fn oversized_headers_and_bodies_are_errors() {
    let server = TestServer::start(|n, conn| {
        let mut r = BufReader::new(conn.try_clone().unwrap());
        let mut w = conn;
        read_request(&mut r);
        let _ = if n == 0 {
            w.write_all(b"HTTP/1.1 200 OK\r\n").and_then(|_| {
                let line = format!("X-Big: {}\r\n", "a".repeat(1000));
                (0..100).try_for_each(|_| w.write_all(line.as_bytes()))
            })
        } else {
            let len = MAX_BODY_BYTES + 1;
            w.write_all(format!("HTTP/1.1 200 OK\r\nContent-Length: {len}\r\n\r\n").as_bytes())
                .and_then(|_| w.write_all(&vec![b'x'; len]))
        };
    });
    let client = HttpClient::new();
    let url = server.url("/");
    let e = client
        .send(&get(&url, &[]), &CancelHandle::new())
        .unwrap_err();
    assert!(
        matches!(&e, TransportError::Io(m) if m.contains("exceeds")),
        "{e:?}"
    );
    let e = client
        .send(&get(&url, &[]), &CancelHandle::new())
        .unwrap_err();
    assert!(
        matches!(&e, TransportError::Io(m) if m.contains("exceeds")),
        "{e:?}"
    );
}

#[test]
fn interim_responses_and_no_body_statuses() {
    let server = raw_server(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n");
    let resp = HttpClient::new()
        .send(&get(&server.url("/"), &[]), &CancelHandle::new())
        .unwrap();
    assert_eq!(
        resp,
        Response {
            status: 204,
            body: vec![]
        }
    );
}

#[test]
fn header_injection_is_refused_before_sending() {
    let server = TestServer::start(|_, _| {});
    let headers = vec![("X-A".to_string(), "v\r\nX-Evil: 1".to_string())];
    let url = server.url("/");
    assert!(HttpClient::new()
        .send(&get(&url, &headers), &CancelHandle::new())
        .is_err());
}

#[test]
fn hostnames_resolve() {
    let server = TestServer::start(|_, conn| {
        let mut r = BufReader::new(conn.try_clone().unwrap());
        let mut w = conn;
        read_request(&mut r);
        w.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nk")
            .unwrap();
    });
    let url = format!("http://localhost:{}/", server.addr.port());
    // localhost may resolve to ::1 first; the client tries every address.
    let resp = HttpClient::new()
        .send(&get(&url, &[]), &CancelHandle::new())
        .unwrap();
    assert_eq!(resp.body, b"k");
}
