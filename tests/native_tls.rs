//! The native driver over TLS against real servers: etcd serving https itself
//! (Go's crypto/tls; with and without `--client-cert-auth`), the Upstash
//! gateway behind stunnel (OpenSSL), and the CLI. Certificates come from
//! `TestPki` (the `openssl` tool) in a temp dir; every server runs on free
//! loopback ports and is stopped on drop.
#![cfg(feature = "native")]

use std::process::Command;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use edgelock::core::etcd::EtcdConfig;
use edgelock::core::redis::{RedisConfig, RedisMachine, RedisNode};
use edgelock::core::*;
use edgelock::internals::redis::keys::lock_key;
use edgelock::internals::redis::subscription::wake_channel;
use edgelock::native::{AsyncClient, CancelToken, Client, ClientOptions, OsEntropy, TlsConfig};
use edgelock_devtools::{
    EtcdOptions, EtcdServer, EtcdTls, RedisServer, TestPki, TlsFront, UpstashGateway, Webdis,
};

mod common;

const BIN: &str = env!("CARGO_BIN_EXE_edgelock");
const TOKEN: &str = "tls-test-token-0123456789";

/// etcd serving its client port (and JSON gateway) over https with the PKI's
/// server certificate; `mtls`: clients must present a certificate the PKI's
/// CA signed.
fn etcd_tls(pki: &TestPki, mtls: bool) -> EtcdServer {
    let tls = EtcdTls {
        cert_file: pki.server_cert(),
        key_file: pki.server_key(),
        client_ca_file: mtls.then(|| pki.ca_cert()),
    };
    let etcd = EtcdServer::start_with(EtcdOptions {
        tls: Some(tls),
        ..EtcdOptions::default()
    })
    .expect("start etcd with TLS");
    assert!(
        etcd.url().starts_with("https://127.0.0.1:"),
        "{}",
        etcd.url()
    );
    etcd
}

fn etcd_client(etcd: &EtcdServer, tls: TlsConfig) -> Result<Client, LockError> {
    let mut cfg = EtcdConfig::new(vec![etcd.url()]);
    cfg.session_ttl_ms = 5_000;
    Client::connect_with(BackendSpec::Etcd(cfg), &ClientOptions::new().with_tls(tls))
}

/// The transport error an acquire fails with (the wait is short: a TLS
/// failure is not worth waiting for).
fn transport_error(c: &Client) -> String {
    match c.acquire("tls/refused", Some(Duration::from_secs(3))) {
        Err(e @ LockError::Transport { .. }) => e.to_string(),
        other => panic!("expected a TRANSPORT error, got {other:?}"),
    }
}

/// Waits until `cond` holds (at most 10 s).
fn eventually(what: &str, cond: impl Fn() -> bool) {
    let end = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < end, "timed out waiting for: {what}");
        thread::sleep(Duration::from_millis(10));
    }
}

/// A holder and a waiter: the waiter watches the holder's key (a streaming
/// request over TLS) and gets the lock, with the next fencing token, once the
/// holder releases. Then a waiter is aborted mid-watch (its stream cancelled).
fn handoff_over_watch(a: &Client, b: &Client, name: &'static str) {
    let lock = a
        .acquire(name, Some(Duration::from_secs(5)))
        .expect("holder acquires over https");
    let token = lock.fencing_token();
    assert!(
        b.try_acquire(name).expect("try over https").is_none(),
        "the lock is held"
    );
    let waiter = {
        let b = b.clone();
        thread::spawn(move || b.acquire(name, Some(Duration::from_secs(20))))
    };
    eventually("the waiter is queued", || {
        a.inspect(name).is_ok_and(|s| s.waiters.len() == 1)
    });
    let released_at = Instant::now();
    assert!(lock.release().expect("release over https"));
    let next = waiter
        .join()
        .expect("waiter thread")
        .expect("the waiter gets the lock");
    // The watch delivered the DELETE: no 20 s wait-out, no poll.
    assert!(
        released_at.elapsed() < Duration::from_secs(5),
        "{:?}",
        released_at.elapsed()
    );
    assert!(
        next.fencing_token() > token,
        "{} > {token}",
        next.fencing_token()
    );

    // A waiter cancelled while its watch stream is open ends promptly.
    let cancel = CancelToken::new();
    let aborted = {
        let (a, cancel) = (a.clone(), cancel.clone());
        thread::spawn(move || {
            a.acquire_with(
                name,
                AcquireOptions {
                    wait: Wait::For(20_000),
                    ttl_ms: None,
                },
                Some(&cancel),
            )
        })
    };
    eventually("the second waiter is queued", || {
        b.inspect(name).is_ok_and(|s| s.waiters.len() == 1)
    });
    let t = Instant::now();
    cancel.cancel();
    assert!(matches!(
        aborted.join().unwrap(),
        Err(LockError::Aborted { .. })
    ));
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    eventually("the aborted waiter's key is gone", || {
        b.inspect(name).is_ok_and(|s| s.waiters.is_empty())
    });
    assert!(next.release().unwrap());
}

#[test]
fn etcd_over_https_acquire_release_and_watch_handoff_with_a_ca_file() {
    let pki = TestPki::generate().expect("openssl PKI");
    let etcd = etcd_tls(&pki, false);
    let tls = TlsConfig::new().with_ca_file(pki.ca_cert());
    let (a, b) = (
        etcd_client(&etcd, tls.clone()).unwrap(),
        etcd_client(&etcd, tls).unwrap(),
    );
    handoff_over_watch(&a, &b, "tls/handoff");
    common::assert_mutual_exclusion(
        vec![a.clone(), b.clone()],
        "tls/mutex",
        10,
        Duration::from_secs(20),
    );
}

#[test]
fn etcd_with_client_cert_auth_needs_the_client_certificate() {
    let pki = TestPki::generate().expect("openssl PKI");
    let etcd = etcd_tls(&pki, true);
    let mtls = TlsConfig::new()
        .with_ca_file(pki.ca_cert())
        .with_client_cert(pki.client_cert(), pki.client_key());
    let (a, b) = (
        etcd_client(&etcd, mtls.clone()).unwrap(),
        etcd_client(&etcd, mtls).unwrap(),
    );
    handoff_over_watch(&a, &b, "mtls/handoff");
    a.close().unwrap();
    b.close().unwrap();

    // The same server without a client certificate: refused, and the error says why.
    let anonymous = etcd_client(&etcd, TlsConfig::new().with_ca_file(pki.ca_cert())).unwrap();
    let m = transport_error(&anonymous);
    assert!(m.contains("TLS") && m.contains("client certificate"), "{m}");
    // A certificate from a CA the server does not trust: refused as well.
    let other = TestPki::generate().expect("second PKI");
    let stranger = TlsConfig::new()
        .with_ca_file(pki.ca_cert())
        .with_client_cert(other.client_cert(), other.client_key());
    let m = transport_error(&etcd_client(&etcd, stranger).unwrap());
    assert!(
        m.contains("TLS") && m.contains("refused the connection"),
        "{m}"
    );
}

/// The async API over the same TLS path: `AsyncClient::connect_with` to an
/// etcd that requires client certificates; a second acquire waits on the
/// watch (over TLS) and completes once the first lock is released.
#[test]
fn the_async_api_over_mutual_tls() {
    let pki = TestPki::generate().expect("openssl PKI");
    let etcd = etcd_tls(&pki, true);
    let opts = ClientOptions::new().with_tls(
        TlsConfig::new()
            .with_ca_file(pki.ca_cert())
            .with_client_cert(pki.client_cert(), pki.client_key()),
    );
    let spec = || BackendSpec::Etcd(EtcdConfig::new(vec![etcd.url()]));
    let (a, b) = (
        AsyncClient::connect_with(spec(), &opts).unwrap(),
        AsyncClient::connect_with(spec(), &opts).unwrap(),
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
        let first = a
            .acquire("async/mtls", Some(Duration::from_secs(5)))
            .await
            .expect("acquire over mTLS");
        let token = first.fencing_token();
        let waiter =
            tokio::spawn(
                async move { b.acquire("async/mtls", Some(Duration::from_secs(20))).await },
            );
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            !waiter.is_finished(),
            "the second acquire waits while the lock is held"
        );
        assert!(first.release().await.expect("release over mTLS"));
        let second = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("woken by the watch")
            .unwrap()
            .expect("granted");
        assert!(second.fencing_token() > token);
        assert!(second.release().await.unwrap());
    });
    // Without the client certificate the async API reports the same TRANSPORT error.
    let anonymous = AsyncClient::connect_with(
        spec(),
        &ClientOptions::new().with_tls(TlsConfig::new().with_ca_file(pki.ca_cert())),
    )
    .unwrap();
    let e = rt
        .block_on(anonymous.acquire("async/mtls", Some(Duration::from_secs(3))))
        .map(|_| ())
        .expect_err("refused");
    assert!(
        matches!(e, LockError::Transport { .. }) && e.to_string().contains("client certificate"),
        "{e}"
    );
}

#[test]
fn a_server_certificate_from_an_untrusted_ca_is_a_transport_error_naming_verification() {
    let pki = TestPki::generate().expect("openssl PKI");
    let etcd = etcd_tls(&pki, false);
    // A CA file with the wrong CA.
    let wrong = etcd_client(&etcd, TlsConfig::new().with_ca_file(pki.other_ca_cert())).unwrap();
    let m = transport_error(&wrong);
    assert!(
        m.contains("certificate verification failed for host 127.0.0.1")
            && m.contains("unknown issuer"),
        "{m}"
    );
    // The default (platform roots) does not know the test CA either.
    let default = etcd_client(&etcd, TlsConfig::new()).unwrap();
    let m = transport_error(&default);
    assert!(m.contains("certificate verification failed"), "{m}");
    // Plain http to the https port is not a silent downgrade but an error.
    let plain = etcd.url().replacen("https://", "http://", 1);
    let c = Client::etcd(EtcdConfig::new(vec![plain])).unwrap();
    assert!(matches!(
        c.acquire("tls/plain", Some(Duration::from_secs(3))),
        Err(LockError::Transport { .. })
    ));
}

#[test]
fn unreadable_or_invalid_tls_files_are_invalid_arguments_before_any_request() {
    let pki = TestPki::generate().expect("openssl PKI");
    // No server at all: only the configuration is checked.
    let spec = || BackendSpec::Etcd(EtcdConfig::new(vec!["https://127.0.0.1:9".to_string()]));
    let missing = TlsConfig::new().with_ca_file(pki.dir().join("nope.pem"));
    let e = Client::connect_with(spec(), &ClientOptions::new().with_tls(missing)).unwrap_err();
    assert!(
        matches!(e, LockError::InvalidArgument { .. }) && e.to_string().contains("nope.pem"),
        "{e}"
    );
    // A key given as the CA file: no certificate in it.
    let key_as_ca = TlsConfig::new().with_ca_file(pki.client_key());
    let e = Client::connect_with(spec(), &ClientOptions::new().with_tls(key_as_ca)).unwrap_err();
    assert!(matches!(e, LockError::InvalidArgument { .. }), "{e}");
    // A certificate with another certificate's key.
    let mismatched = TlsConfig::new().with_client_cert(pki.client_cert(), pki.server_key());
    let e = Client::connect_with(spec(), &ClientOptions::new().with_tls(mismatched)).unwrap_err();
    assert!(matches!(e, LockError::InvalidArgument { .. }), "{e}");
    // Key material never shows up in messages or Debug output.
    let key = std::fs::read_to_string(pki.client_key()).unwrap();
    let body: String = key.lines().filter(|l| !l.starts_with("-----")).collect();
    let ok = ClientOptions::new()
        .with_tls(TlsConfig::new().with_client_cert(pki.client_cert(), pki.client_key()));
    let c = Client::connect_with(spec(), &ok).expect("valid files");
    for text in [e.to_string(), format!("{ok:?}"), format!("{c:?}")] {
        assert!(!text.contains(&body[..20]), "{text}");
    }
}

/// Requests a client sent: (streaming?, URL).
type Log = Arc<Mutex<Vec<(bool, String)>>>;

fn recorded_redis_client(node: RedisNode, tls: &TlsConfig) -> (Client, Log) {
    let mut cfg = RedisConfig::new(node);
    cfg.ttl_ms = 30_000;
    // The poll is far away: only a push over the TLS stream wakes the waiter in time.
    cfg.retry_delay_ms = 20_000;
    cfg.retry_jitter_ms = 0;
    let machine = RedisMachine::new(cfg, Box::new(OsEntropy)).expect("config");
    let log = Log::default();
    let sink = log.clone();
    let on_send = Box::new(move |r: &HttpRequest| {
        sink.lock()
            .unwrap()
            .push((r.stream, r.target.url().unwrap_or("").to_string()))
    });
    let observed = common::Observing {
        inner: machine,
        on_send,
        on_input: None,
    };
    let client = Client::try_from_machine_with(
        Box::new(observed),
        &ClientOptions::new().with_tls(tls.clone()),
    )
    .expect("client");
    (client, log)
}

/// Subscribers of `channel` on the Redis server itself.
fn subscribers(redis: &RedisServer, channel: &str) -> i64 {
    let v = redis
        .redis_command(&[b"PUBSUB", b"NUMSUB", channel.as_bytes()])
        .expect("PUBSUB NUMSUB");
    format!("{v:?}")
        .rsplit(|c: char| !c.is_ascii_digit())
        .find(|s| !s.is_empty())
        .and_then(|s| s.parse().ok())
        .unwrap_or(-1)
}

/// A holder and a waiter on one Redis node reached through `front` (TLS): the
/// waiter's subscription streams over TLS and the holder's release wakes it
/// long before its 20 s poll.
fn waiter_wakes_by_push_over_tls(
    redis: &RedisServer,
    front: &TlsFront,
    node: RedisNode,
    pki: &TestPki,
    label: &str,
) {
    let tls = TlsConfig::new().with_ca_file(pki.ca_cert());
    let (holder, _) = recorded_redis_client(node.clone(), &tls);
    let (waiter, log) = recorded_redis_client(node, &tls);
    let name = format!("tls/push/{label}");
    let channel = wake_channel(&lock_key("edgelock", &name));

    let lock = holder
        .acquire(&name, None)
        .expect("holder acquires over https");
    let t = {
        let name = name.clone();
        thread::spawn(move || {
            let l = waiter
                .acquire(&name, Some(Duration::from_secs(60)))
                .expect("waiter acquires");
            (waiter, l)
        })
    };
    eventually("the waiter's subscription is live through TLS", || {
        subscribers(redis, &channel) == 1
    });
    let released_at = Instant::now();
    let token = lock.fencing_token();
    assert!(lock.release().expect("release over https"));
    let (waiter, l) = t.join().expect("waiter thread");
    assert!(
        released_at.elapsed() < Duration::from_secs(10),
        "{label}: woken by push, not the 20 s poll: {:?}",
        released_at.elapsed()
    );
    assert_eq!(l.fencing_token(), token + 1);
    let sent = log.lock().unwrap().clone();
    let streams: Vec<_> = sent.iter().filter(|(stream, _)| *stream).collect();
    assert_eq!(streams.len(), 1, "{label}: one subscription: {sent:?}");
    assert!(
        streams[0].1.starts_with(&front.url()) && streams[0].1.ends_with(&channel),
        "{:?}",
        streams[0]
    );
    assert!(
        sent.iter().all(|(_, url)| url.starts_with("https://")),
        "{sent:?}"
    );
    eventually("the subscription is closed", || {
        subscribers(redis, &channel) == 0
    });
    assert!(l.release().unwrap());
    waiter.close().unwrap();
    holder.close().unwrap();
}

#[test]
fn a_redis_lock_through_the_upstash_gateway_behind_tls_wakes_its_waiter_by_push() {
    let pki = TestPki::generate().expect("openssl PKI");
    let redis = RedisServer::start().expect("redis");
    let gateway = UpstashGateway::start(&redis, TOKEN).expect("gateway");
    let front = TlsFront::start(gateway.port(), &pki).expect("stunnel in front of the gateway");
    waiter_wakes_by_push_over_tls(
        &redis,
        &front,
        RedisNode::upstash(front.url(), TOKEN),
        &pki,
        "upstash",
    );
    assert!(gateway.request_count() >= 5, "{}", gateway.request_count());
}

#[test]
fn a_redis_lock_through_webdis_behind_tls_wakes_its_waiter_by_push() {
    let pki = TestPki::generate().expect("openssl PKI");
    let redis = RedisServer::start().expect("redis");
    let webdis = Webdis::start(&redis).expect("webdis");
    let front = TlsFront::start(webdis.port(), &pki).expect("stunnel in front of webdis");
    waiter_wakes_by_push_over_tls(
        &redis,
        &front,
        RedisNode::webdis(front.url()),
        &pki,
        "webdis",
    );
}

fn cli(args: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .args(args)
        .env_remove("EDGELOCK_CA_FILE")
        .env_remove("EDGELOCK_CERT")
        .env_remove("EDGELOCK_KEY")
        .output()
        .expect("run edgelock")
}

#[test]
fn the_cli_over_https_with_a_ca_file_and_a_client_certificate() {
    let pki = TestPki::generate().expect("openssl PKI");
    let etcd = etcd_tls(&pki, true);
    let url = etcd.url();
    let (ca, cert, key) = (pki.ca_cert(), pki.client_cert(), pki.client_key());
    let (ca, cert, key) = (
        ca.to_str().unwrap(),
        cert.to_str().unwrap(),
        key.to_str().unwrap(),
    );

    let out = cli(&[
        "run",
        "--etcd",
        &url,
        "--ca-file",
        ca,
        "--cert",
        cert,
        "--key",
        key,
        "cli/tls",
        "--",
        "sh",
        "-c",
        "echo token=$EDGELOCK_FENCING_TOKEN",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("token="),
        "{out:?}"
    );

    let out = cli(&[
        "status",
        "--etcd",
        &url,
        "--ca-file",
        ca,
        "--cert",
        cert,
        "--key",
        key,
        "--json",
        "cli/tls",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("status JSON");
    assert_eq!(v["held"], false);

    // The CA file from the environment.
    let out = Command::new(BIN)
        .args([
            "status", "--etcd", &url, "--cert", cert, "--key", key, "cli/tls",
        ])
        .env("EDGELOCK_CA_FILE", ca)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Without the CA file: the server's certificate does not verify (exit 69, TRANSPORT).
    let out = cli(&[
        "run", "--etcd", &url, "--wait", "3000", "cli/tls", "--", "true",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(69), "{err}");
    assert!(err.contains("certificate verification failed"), "{err}");
    // Without the client certificate: refused by the server (exit 69).
    let out = cli(&[
        "run",
        "--etcd",
        &url,
        "--ca-file",
        ca,
        "--wait",
        "3000",
        "cli/tls",
        "--",
        "true",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(69), "{err}");
    assert!(err.contains("client certificate"), "{err}");
    // Usage errors: --cert without --key, a missing CA file (exit 64, before any request).
    let out = cli(&[
        "run",
        "--etcd",
        &url,
        "--ca-file",
        ca,
        "--cert",
        cert,
        "cli/tls",
        "--",
        "true",
    ]);
    assert_eq!(
        out.status.code(),
        Some(64),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = cli(&[
        "run",
        "--etcd",
        &url,
        "--ca-file",
        "/nonexistent/ca.pem",
        "cli/tls",
        "--",
        "true",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{err}");
    assert!(err.contains("/nonexistent/ca.pem"), "{err}");
}
