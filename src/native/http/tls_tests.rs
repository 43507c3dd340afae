//! The HTTP client over TLS against an in-test rustls server on loopback
//! (certificates from `TestPki`, made by the `openssl` tool): keep-alive
//! reuse, a server's close_notify on an idle connection, streaming bodies and
//! cancellation of a blocked TLS read from another thread, verification
//! failures. Real etcd / stunnel runs are in tests/native_tls.rs.

use super::tests::read_request;
use super::*;
use edgelock_devtools::TestPki;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ServerConfig, ServerConnection, StreamOwned};
use std::io::BufReader;
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread;

type TlsServerStream = StreamOwned<ServerConnection, TcpStream>;

/// A loopback TLS server that runs `handler` on a thread for every accepted
/// connection (after the handshake) and counts connections.
struct TlsServer {
    port: u16,
    accepted: Arc<AtomicUsize>,
}

impl TlsServer {
    fn start(
        pki: &TestPki,
        handler: impl Fn(usize, BufReader<TlsServerStream>) + Send + Sync + 'static,
    ) -> TlsServer {
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(pki.server_cert())
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_file(pki.server_key()).unwrap();
        let config =
            ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_no_client_auth()
                .with_single_cert(certs, key)
                .unwrap();
        let config = Arc::new(config);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        let handler = Arc::new(handler);
        thread::spawn(move || {
            for tcp in listener.incoming() {
                let Ok(tcp) = tcp else { return };
                let n = count.fetch_add(1, Ordering::SeqCst);
                let (h, config) = (handler.clone(), config.clone());
                thread::spawn(move || {
                    let Ok(conn) = ServerConnection::new(config) else {
                        return;
                    };
                    h(n, BufReader::new(StreamOwned::new(conn, tcp)));
                });
            }
        });
        TlsServer { port, accepted }
    }

    fn url(&self, host: &str, path: &str) -> String {
        format!("https://{host}:{}{path}", self.port)
    }

    fn connections(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

fn trusting(pki: &TestPki) -> HttpClient {
    HttpClient::with_tls(&TlsConfig::new().with_ca_file(pki.ca_cert())).unwrap()
}

fn post<'a>(url: &'a str, body: &'a [u8]) -> Request<'a> {
    Request {
        method: "POST",
        url,
        headers: &[],
        body,
        timeout: Some(Duration::from_secs(5)),
    }
}

#[test]
fn keep_alive_connections_are_reused_over_tls() {
    let pki = TestPki::generate().unwrap();
    let server = TlsServer::start(&pki, |_, mut r| {
        while let Some((head, body)) = read_request(&mut r) {
            assert!(head.contains("\r\nHost: localhost:"), "{head}");
            let w = r.get_mut();
            w.write_all(
                format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len()).as_bytes(),
            )
            .unwrap();
            w.write_all(&body).unwrap();
            w.flush().unwrap();
        }
    });
    let client = trusting(&pki);
    // `localhost` is one of the certificate's names (127.0.0.1 is another).
    let url = server.url("localhost", "/echo");
    for i in 0..5 {
        let body = format!("payload {i}");
        let resp = client
            .send(&post(&url, body.as_bytes()), &CancelHandle::new())
            .unwrap();
        assert_eq!(
            resp,
            Response {
                status: 200,
                body: body.into_bytes()
            }
        );
    }
    assert_eq!(
        server.connections(),
        1,
        "one TLS connection for five requests"
    );
    assert_eq!(client.idle_count(), 1);
}

#[test]
fn an_idle_connection_the_server_closed_with_close_notify_is_not_reused() {
    let pki = TestPki::generate().unwrap();
    // One request per connection, then close_notify and close, as a server
    // whose keep-alive timer fired would.
    let server = TlsServer::start(&pki, |_, mut r| {
        if read_request(&mut r).is_some() {
            let w = r.get_mut();
            w.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                .unwrap();
            w.flush().unwrap();
            thread::sleep(Duration::from_millis(50));
            w.conn.send_close_notify();
            let _ = w.conn.complete_io(&mut w.sock);
        }
    });
    let client = trusting(&pki);
    let url = server.url("127.0.0.1", "/");
    for _ in 0..3 {
        let resp = client.send(&post(&url, b""), &CancelHandle::new()).unwrap();
        assert_eq!(resp.body, b"ok");
        thread::sleep(Duration::from_millis(150)); // the close_notify arrives
    }
    assert_eq!(server.connections(), 3);
}

#[test]
fn a_streaming_tls_response_is_delivered_piecewise_and_cancel_ends_a_blocked_read() {
    let pki = TestPki::generate().unwrap();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let release_rx = Arc::new(Mutex::new(release_rx));
    let server = TlsServer::start(&pki, move |_, mut r| {
        read_request(&mut r);
        let w = r.get_mut();
        w.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nfirst\n\r\n")
            .unwrap();
        w.flush().unwrap();
        // Hold the stream open (like an idle watch) until the test ends.
        let _ = lock(&release_rx).recv();
    });
    let result = super::tests::silent_stream_stays_open_until_cancelled(
        trusting(&pki),
        server.url("127.0.0.1", "/v3/watch"),
    );
    assert_eq!(result, Err(TransportError::Io("request cancelled".into())));
    drop(release_tx);
}

#[test]
fn verification_failures_are_connect_errors_naming_the_cause() {
    let pki = TestPki::generate().unwrap();
    let server = TlsServer::start(&pki, |_, mut r| {
        while read_request(&mut r).is_some() {
            let _ = r
                .get_mut()
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
        }
    });
    let url = server.url("127.0.0.1", "/");
    let wrong = HttpClient::with_tls(&TlsConfig::new().with_ca_file(pki.other_ca_cert())).unwrap();
    match wrong.send(&post(&url, b""), &CancelHandle::new()) {
        Err(TransportError::Connect(m)) => {
            assert!(
                m.contains("certificate verification failed for host 127.0.0.1")
                    && m.contains("unknown issuer"),
                "{m}"
            )
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(wrong.idle_count(), 0);
    // A plain-HTTP server behind an https URL: no downgrade, a TLS error.
    let plain = TcpListener::bind("127.0.0.1:0").unwrap();
    let plain_url = format!("https://{}/", plain.local_addr().unwrap());
    thread::spawn(move || {
        if let Ok((mut s, _)) = plain.accept() {
            let _ = s.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
            thread::sleep(Duration::from_millis(200));
        }
    });
    match trusting(&pki).send(&post(&plain_url, b""), &CancelHandle::new()) {
        Err(TransportError::Connect(m)) => assert!(m.contains("TLS"), "{m}"),
        other => panic!("{other:?}"),
    }
}
