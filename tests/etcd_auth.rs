//! etcd authentication against a real etcd with auth enabled (started by
//! each test with `--auth-token simple --auth-token-ttl 1`, so that tokens
//! go stale within a test): a root user, a user whose role covers only the
//! lock prefix, a wrong password, a prefix outside the role, a held lock
//! that outlives several tokens, and no secret in any message.
#![cfg(feature = "native")]

use std::time::{Duration, Instant};

use base64::Engine;
use edgelock::core::etcd::{EtcdAuth, EtcdConfig};
use edgelock::native::Client;
use edgelock_devtools::{EtcdOptions, EtcdServer};
use serde_json::{json, Value};

mod common;

const ROOT_PW: &str = "root-pw-4f1c";
const LOCKER_PW: &str = "locker-pw-9a2e";

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s.as_bytes())
}

/// A raw gateway call (an operator's), with an optional token.
fn raw(etcd: &EtcdServer, path: &str, body: Value, token: Option<&str>) -> (u16, Value) {
    let http = edgelock::native::http::HttpClient::new();
    let url = format!("{}{}", etcd.url(), path);
    let body = serde_json::to_vec(&body).unwrap();
    let mut headers = vec![("content-type".to_string(), "application/json".to_string())];
    if let Some(t) = token {
        headers.push(("Authorization".to_string(), t.to_string()));
    }
    let req = edgelock::native::http::Request {
        method: "POST",
        url: &url,
        headers: &headers,
        body: &body,
        timeout: Some(Duration::from_secs(5)),
    };
    let resp = http
        .send(&req, &edgelock::native::http::CancelHandle::new())
        .expect("raw etcd call");
    (
        resp.status,
        serde_json::from_slice(&resp.body).unwrap_or(Value::Null),
    )
}

fn ok(etcd: &EtcdServer, path: &str, body: Value) {
    let (status, v) = raw(etcd, path, body.clone(), None);
    assert_eq!(status, 200, "{path} {body}: {v}");
}

/// etcd with auth on: `root`, and `locker` whose role may read and write
/// only keys under `edgelock/`.
fn etcd_with_auth() -> EtcdServer {
    let opts = EtcdOptions {
        extra_args: vec![
            "--auth-token".into(),
            "simple".into(),
            "--auth-token-ttl".into(),
            "1".into(),
        ],
        ..EtcdOptions::default()
    };
    let etcd = EtcdServer::start_with(opts).expect("start etcd");
    ok(
        &etcd,
        "/v3/auth/user/add",
        json!({"name": "root", "password": ROOT_PW}),
    );
    let _ = raw(&etcd, "/v3/auth/role/add", json!({"name": "root"}), None);
    ok(
        &etcd,
        "/v3/auth/user/grant",
        json!({"user": "root", "role": "root"}),
    );
    ok(&etcd, "/v3/auth/role/add", json!({"name": "locker"}));
    ok(
        &etcd,
        "/v3/auth/role/grant",
        json!({"name": "locker", "perm": {"permType": "READWRITE", "key": b64("edgelock/"), "range_end": b64("edgelock0")}}),
    );
    ok(
        &etcd,
        "/v3/auth/user/add",
        json!({"name": "locker", "password": LOCKER_PW}),
    );
    ok(
        &etcd,
        "/v3/auth/user/grant",
        json!({"user": "locker", "role": "locker"}),
    );
    ok(&etcd, "/v3/auth/enable", json!({}));
    // Auth is on: an anonymous read is refused.
    let (status, _) = raw(
        &etcd,
        "/v3/kv/range",
        json!({"key": b64("edgelock/x")}),
        None,
    );
    assert_ne!(status, 200, "auth must be enabled");
    etcd
}

fn config(etcd: &EtcdServer, user: &str, password: &str) -> EtcdConfig {
    let mut cfg = EtcdConfig::new(vec![etcd.url()]);
    cfg.auth = Some(EtcdAuth {
        username: user.into(),
        password: password.into(),
    });
    cfg
}

fn client(etcd: &EtcdServer, user: &str, password: &str) -> Client {
    Client::etcd(config(etcd, user, password)).expect("client")
}

#[test]
fn root_and_a_prefix_limited_user_lock_with_increasing_tokens() {
    let etcd = etcd_with_auth();
    for (user, pw) in [("root", ROOT_PW), ("locker", LOCKER_PW)] {
        let c = client(&etcd, user, pw);
        let a = c
            .acquire("report", Some(Duration::from_secs(5)))
            .expect("acquire");
        let t1 = a.fencing_token();
        assert!(
            c.try_acquire("report").expect("try").is_none(),
            "{user}: held by the same client"
        );
        a.release().expect("release");
        let b = c
            .acquire("report", Some(Duration::from_secs(5)))
            .expect("acquire again");
        assert!(b.fencing_token() > t1, "{user}");
        b.release().expect("release");
        c.close().expect("close");
    }
    // Two authenticated clients exclude each other.
    let clients = (0..3).map(|_| client(&etcd, "locker", LOCKER_PW)).collect();
    common::assert_mutual_exclusion(clients, "shared", 10, Duration::from_secs(60));
}

#[test]
fn a_wrong_password_is_a_backend_error_that_never_shows_it() {
    let etcd = etcd_with_auth();
    let c = client(&etcd, "locker", "not-the-password-77");
    let e = c
        .acquire("report", Some(Duration::from_secs(5)))
        .expect_err("refused");
    assert_eq!(e.code(), "BACKEND", "{e}");
    let text = e.to_string();
    assert!(text.contains("authentication failed"), "{text}");
    assert!(!text.contains("not-the-password-77"), "{text}");
    assert!(
        !format!("{:?}", config(&etcd, "locker", "not-the-password-77"))
            .contains("not-the-password-77")
    );
}

#[test]
fn a_prefix_outside_the_role_is_a_permission_error_naming_the_prefix() {
    let etcd = etcd_with_auth();
    let mut cfg = config(&etcd, "locker", LOCKER_PW);
    cfg.prefix = "elsewhere".into();
    let c = Client::etcd(cfg).expect("client");
    let e = c
        .acquire("report", Some(Duration::from_secs(5)))
        .expect_err("refused");
    assert_eq!(e.code(), "BACKEND", "{e}");
    let text = e.to_string();
    assert!(
        text.contains("permission denied")
            && text.contains("elsewhere/")
            && text.contains("locker"),
        "{text}"
    );
    assert!(!text.contains(LOCKER_PW), "{text}");
    // Nothing was written under the forbidden prefix.
    let root = raw(
        &etcd,
        "/v3/auth/authenticate",
        json!({"name": "root", "password": ROOT_PW}),
        None,
    )
    .1;
    let token = root["token"].as_str().expect("root token").to_string();
    let (_, v) = raw(
        &etcd,
        "/v3/kv/range",
        json!({"key": b64("elsewhere/"), "range_end": b64("elsewhere0")}),
        Some(&token),
    );
    assert!(v.get("kvs").is_none(), "{v}");
}

/// Tokens live 1 s after their last use; renewals come every 2 s, so every
/// renewal meets an expired token: each must authenticate again and renew,
/// or the session lease (6 s) would run out and the lock be reported lost.
#[test]
fn a_held_lock_outlives_expired_tokens_and_an_idle_client_authenticates_again() {
    let etcd = etcd_with_auth();
    let mut cfg = config(&etcd, "locker", LOCKER_PW);
    cfg.session_ttl_ms = 6_000;
    let c = Client::etcd(cfg).expect("client");
    let lock = c
        .acquire("long", Some(Duration::from_secs(5)))
        .expect("acquire");
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(13_000) {
        std::thread::sleep(Duration::from_millis(500));
        assert!(!lock.is_lost(), "lost after {:?}", started.elapsed());
    }
    let token = lock.fencing_token();
    lock.release()
        .expect("release after 13 s, more than two session TTLs of expired tokens");
    // Idle longer than a token lives, then lock again.
    std::thread::sleep(Duration::from_millis(2_500));
    let again = c
        .acquire("long", Some(Duration::from_secs(5)))
        .expect("acquire after idling");
    assert!(again.fencing_token() > token);
    again.release().expect("release");
    c.close().expect("close");
}
