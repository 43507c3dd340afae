//! The `durable-object` backend through the native client, against a small
//! in-process model of the lock service's HTTP API v1 (one lock per name,
//! requests held open while waiting, owner-checked release/extend/resume,
//! bearer token required). The real service is tested in the Worker suite.
#![cfg(feature = "native")]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use edgelock::core::durable::{DurableConfig, DurableEndpoint};
use edgelock::core::{BackendKind, BackendSpec};
use edgelock::native::Client;
use serde_json::{json, Value};

const TOKEN: &str = "svc-token-0123456789";

#[derive(Default)]
struct Lock {
    holder: Option<(String, u64, Instant)>,
    counter: u64,
}

#[derive(Default)]
struct Service {
    locks: Mutex<HashMap<String, Lock>>,
    changed: Condvar,
}

impl Service {
    fn handle(&self, op: &str, name: &str, body: &Value) -> Value {
        let owner = body["owner"].as_str().unwrap_or("").to_string();
        let token: u64 = body["token"]
            .as_str()
            .and_then(|t| t.parse().ok())
            .unwrap_or(0);
        let mut locks = self.locks.lock().unwrap();
        let now = Instant::now();
        let live = |l: &Lock| l.holder.as_ref().filter(|h| h.2 > now).cloned();
        match op {
            "acquire" => {
                let ttl = body["ttlMs"].as_u64().unwrap();
                let until = now + Duration::from_millis(body["waitMs"].as_u64().unwrap());
                loop {
                    let now = Instant::now();
                    let l = locks.entry(name.to_string()).or_default();
                    match l.holder.as_ref().filter(|h| h.2 > now) {
                        Some(h) if h.0 == owner => {
                            let left = h.2.saturating_duration_since(now).as_millis() as u64;
                            return json!({"acquired": true, "token": h.1.to_string(), "ttlMs": left, "waiters": 0});
                        }
                        Some(h) if now >= until => {
                            let left = h.2.saturating_duration_since(now).as_millis() as u64;
                            return json!({"acquired": false, "token": h.1.to_string(), "pttlMs": left, "waiters": 0});
                        }
                        Some(h) => {
                            let wake = until.min(h.2);
                            locks = self.changed.wait_timeout(locks, wake - now).unwrap().0;
                        }
                        None => {
                            l.counter += 1;
                            l.holder =
                                Some((owner.clone(), l.counter, now + Duration::from_millis(ttl)));
                            return json!({"acquired": true, "token": l.counter.to_string(), "ttlMs": ttl, "waiters": 0});
                        }
                    }
                }
            }
            "release" => {
                let l = locks.entry(name.to_string()).or_default();
                let mine = live(l).is_some_and(|h| h.0 == owner && h.1 == token);
                if mine {
                    l.holder = None;
                    self.changed.notify_all();
                }
                json!({"released": mine})
            }
            "extend" => {
                let l = locks.entry(name.to_string()).or_default();
                let ttl = body["ttlMs"].as_u64().unwrap();
                if live(l).is_some_and(|h| h.0 == owner && h.1 == token) {
                    l.holder = Some((owner, token, now + Duration::from_millis(ttl)));
                    json!({"extended": true, "ttlMs": ttl})
                } else {
                    json!({"extended": false})
                }
            }
            "resume" => {
                let l = locks.entry(name.to_string()).or_default();
                match live(l).filter(|h| h.0 == owner && h.1 == token) {
                    Some(h) => {
                        json!({"held": true, "pttlMs": h.2.saturating_duration_since(now).as_millis() as u64})
                    }
                    None => json!({"held": false}),
                }
            }
            _ => {
                let l = locks.entry(name.to_string()).or_default();
                let h = live(l);
                json!({
                    "held": h.is_some(),
                    "token": h.as_ref().map(|h| h.1.to_string()),
                    "pttlMs": h.as_ref().map(|h| h.2.saturating_duration_since(now).as_millis() as u64),
                    "waiters": 0
                })
            }
        }
    }

    /// Drops the holder of `name` as if its lease had ended on the service.
    fn forget(&self, name: &str) {
        self.locks.lock().unwrap().remove(name);
    }
}

fn start() -> (Arc<Service>, String) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/lock", listener.local_addr().unwrap());
    let svc = Arc::new(Service::default());
    let s = svc.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let s = s.clone();
            std::thread::spawn(move || serve(&s, conn));
        }
    });
    (svc, url)
}

fn serve(svc: &Service, conn: TcpStream) {
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut conn = conn;
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        let (mut len, mut auth) = (0usize, String::new());
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let lower = line.to_ascii_lowercase();
            if let Some(v) = lower.strip_prefix("content-length:") {
                len = v.trim().parse().unwrap_or(0);
            }
            if lower.starts_with("authorization:") {
                auth = line["authorization:".len()..].trim().to_string();
            }
            if line == "\r\n" {
                break;
            }
        }
        let mut body = vec![0; len];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let target = request_line.split(' ').nth(1).unwrap_or("").to_string();
        let (status, answer) = if auth != format!("Bearer {TOKEN}") {
            (
                401,
                json!({"error": {"code": "UNAUTHORIZED", "message": "bad token"}}),
            )
        } else {
            let (path, query) = target.split_once('?').unwrap_or((&target, ""));
            let op = path.strip_prefix("/lock/v1/").unwrap_or("");
            let name = query.strip_prefix("name=").unwrap_or("");
            let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            (200, svc.handle(op, name, &body))
        };
        let text = answer.to_string();
        let reply = format!(
            "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{text}",
            text.len()
        );
        if conn.write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}

fn client(url: &str, token: &str, ttl_ms: u64) -> Client {
    let mut cfg = DurableConfig::new(DurableEndpoint::Url(url.into()));
    cfg.token = Some(token.into());
    cfg.ttl_ms = ttl_ms;
    Client::connect(BackendSpec::DurableObject(cfg)).unwrap()
}

#[test]
fn acquire_wait_handoff_extend_release_and_resume() {
    let (_svc, url) = start();
    let a = client(&url, TOKEN, 10_000);
    let b = client(&url, TOKEN, 10_000);
    assert_eq!(a.backend(), BackendKind::DurableObject.as_str());
    let first = a.try_acquire("jobs/one").unwrap().expect("free");
    assert_eq!(first.fencing_token(), 1);
    assert!(b.try_acquire("jobs/one").unwrap().is_none());
    let status = b.inspect("jobs/one").unwrap();
    assert!(status.held);
    assert_eq!(status.fencing_token, Some(1));
    // A waiter is handed the lock when the holder releases.
    let waiter = std::thread::spawn(move || {
        let started = Instant::now();
        let lock = b.acquire("jobs/one", Some(Duration::from_secs(5))).unwrap();
        (
            lock.fencing_token(),
            started.elapsed(),
            lock.release().unwrap(),
        )
    });
    std::thread::sleep(Duration::from_millis(200));
    first.extend(Some(Duration::from_secs(20))).unwrap();
    let handle = first.handle().clone();
    // Another process resumes the lock from its handle.
    let c = client(&url, TOKEN, 10_000);
    let resumed = c.resume(&handle).unwrap();
    assert_eq!(resumed.fencing_token(), 1);
    assert!(first.release().unwrap());
    let (token, waited, released) = waiter.join().unwrap();
    assert_eq!(token, 2);
    assert!(waited >= Duration::from_millis(150), "{waited:?}");
    assert!(released);
    // The resumed lock is gone with the release: extending it says so.
    let e = resumed.extend(None).unwrap_err();
    assert_eq!(e.code(), "LOST", "{e}");
    assert_eq!(c.resume(&handle).unwrap_err().code(), "LOST");
}

#[test]
fn a_wait_runs_out_with_timeout() {
    let (_svc, url) = start();
    let a = client(&url, TOKEN, 10_000);
    let b = client(&url, TOKEN, 10_000);
    let _held = a.try_acquire("busy").unwrap().unwrap();
    let started = Instant::now();
    let e = b
        .acquire("busy", Some(Duration::from_millis(300)))
        .unwrap_err();
    assert_eq!(e.code(), "TIMEOUT", "{e}");
    assert!(started.elapsed() >= Duration::from_millis(300));
}

#[test]
fn a_lock_the_service_forgot_is_lost_at_its_next_renewal() {
    let (svc, url) = start();
    let a = client(&url, TOKEN, 600);
    let lock = a.try_acquire("short").unwrap().unwrap();
    svc.forget("short");
    let reason = lock.wait_lost(Some(Duration::from_secs(3))).expect("lost");
    assert_eq!(reason, edgelock::core::LostReason::KeyGone);
}

#[test]
fn a_wrong_token_is_a_backend_error_that_does_not_repeat_it() {
    let (_svc, url) = start();
    let a = client(&url, "wrong-token-value-42", 10_000);
    let e = a.try_acquire("x").unwrap_err();
    assert_eq!(e.code(), "BACKEND");
    let text = e.to_string();
    assert!(
        text.contains("HTTP 401") && text.contains("refused the credentials"),
        "{text}"
    );
    assert!(!text.contains("wrong-token-value-42"), "{text}");
}

#[test]
fn a_binding_cannot_be_reached_natively() {
    let spec = BackendSpec::from_json(
        BackendKind::DurableObject,
        r#"{"binding":"EDGELOCK_LOCKS"}"#,
    )
    .unwrap();
    let c = Client::connect(spec).unwrap();
    assert_eq!(c.try_acquire("x").unwrap_err().code(), "TRANSPORT");
}

#[test]
fn the_cli_runs_a_command_under_a_lock_of_the_service() {
    let (_svc, url) = start();
    let bin = env!("CARGO_BIN_EXE_edgelock");
    let out = std::process::Command::new(bin)
        .args([
            "run",
            "--durable-object",
            &url,
            "--try",
            "cli-job",
            "--",
            "sh",
            "-c",
        ])
        .arg("echo token=$EDGELOCK_FENCING_TOKEN")
        .env("EDGELOCK_API_TOKEN", TOKEN)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert_eq!(stdout.trim(), "token=1", "{stderr}");
    assert!(!stderr.contains(TOKEN), "{stderr}");
    // Held by someone else: --try exits 73; a shared hold (offered since
    // the service holds read-write locks) runs; a bad limit: 64.
    let holder = client(&url, TOKEN, 10_000);
    let _held = holder.try_acquire("cli-job").unwrap().unwrap();
    let busy = std::process::Command::new(bin)
        .args([
            "run",
            "--durable-object",
            &url,
            "--try",
            "cli-job",
            "--",
            "true",
        ])
        .env("EDGELOCK_API_TOKEN", TOKEN)
        .output()
        .unwrap();
    assert_eq!(
        busy.status.code(),
        Some(73),
        "{}",
        String::from_utf8_lossy(&busy.stderr)
    );
    let run = |kind: &[&str]| {
        std::process::Command::new(bin)
            .args(["run", "--durable-object", &url])
            .args(kind)
            .args(["other", "--", "true"])
            .env("EDGELOCK_API_TOKEN", TOKEN)
            .output()
            .unwrap()
    };
    let shared = run(&["--shared"]);
    assert_eq!(
        shared.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&shared.stderr)
    );
    let bad = run(&["--limit", "0"]);
    assert_eq!(
        bad.status.code(),
        Some(64),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
}
