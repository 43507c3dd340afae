//! Part 3 against real sockets: hostile backends (a tiny HTTP server here)
//! that echo the request — headers included, so the sentinel token — back in
//! 401/500 bodies, in malformed 200s, in Redis error replies, in JSON values
//! and even in broken status and header lines. The native client talks to
//! them with the sentinel as its Upstash bearer token or etcd Authorization
//! header; every LockError and LostReason it produces is collected (Display
//! and Debug) and searched for the sentinel.

use std::io::{self, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use edgelock::core::etcd::EtcdConfig;
use edgelock::core::redis::{RedisConfig, RedisMachine, RedisNode, RedlockConfig, RedlockMachine};
use edgelock::core::{AcquireOptions, HttpRequest, LockError, Method, RequestId, Target, Wait};
use edgelock::native::{Client, OsEntropy};
use edgelock_devtools::http1::{read_body, read_head, request_body_kind};
use serde_json::json;

use super::models::{EtcdModel, Proto, RedisModel, Reply};
use super::SENTINEL;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// 401, the raw request as text.
    Echo401,
    /// 500, `{"error": echo, "message": echo, "code": 13}`.
    Echo500Json,
    /// 200, a JSON document cut off inside a string that holds the echo.
    Malformed200,
    /// 200, a well-formed error object (Upstash `{"error":"ERR …"}`, etcd gateway error).
    ErrorField200,
    /// 400, the same (Upstash's status for a Redis error).
    Error400,
    /// 200, the reply's shape with the echo in its values.
    TokenInValues,
    /// A header line without a colon that carries the Authorization header.
    BadHeaderLine,
    /// A status line made of the Authorization header.
    BadStatusLine,
    /// Not HTTP at all: the echo first.
    NotHttp,
    /// 500 whose error message puts the secret across character 200, where
    /// messages are cut: redacting after cutting would leave a piece of it.
    Straddle500,
}

pub const MODES: [Mode; 10] = [
    Mode::Echo401,
    Mode::Echo500Json,
    Mode::Malformed200,
    Mode::ErrorField200,
    Mode::Error400,
    Mode::TokenInValues,
    Mode::BadHeaderLine,
    Mode::BadStatusLine,
    Mode::NotHttp,
    Mode::Straddle500,
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Etcd,
    Upstash,
    Redlock,
}

struct State {
    etcd: EtcdModel,
    redis: RedisModel,
}

/// What every connection of one server shares.
struct Ctx {
    addr: SocketAddr,
    etcd: bool,
    mode: Mode,
    hostile_after: usize,
    served: AtomicUsize,
    state: Mutex<State>,
    start: Instant,
}

/// One hostile backend on a loopback port; stopped on drop.
struct Server {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
}

fn http(status: u16, body: &[u8]) -> Vec<u8> {
    let mut out = format!("HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len()).into_bytes();
    out.extend_from_slice(body);
    out
}

fn hostile(mode: Mode, etcd: bool, echo: &str, auth: &str) -> Vec<u8> {
    let err = if etcd {
        json!({"error": echo, "message": echo, "code": 2})
    } else {
        json!({ "error": format!("ERR {echo}") })
    };
    match mode {
        Mode::Echo401 => http(401, echo.as_bytes()),
        Mode::Echo500Json => http(500, json!({"error": echo, "message": echo, "code": 13}).to_string().as_bytes()),
        Mode::Malformed200 => http(200, format!("{{\"result\":\"{echo}").as_bytes()),
        Mode::ErrorField200 => http(200, err.to_string().as_bytes()),
        Mode::Error400 => http(400, err.to_string().as_bytes()),
        Mode::TokenInValues if etcd => http(
            200,
            json!({"header": {"revision": echo}, "ID": echo, "TTL": echo, "succeeded": echo, "result": {"ID": echo, "TTL": echo}}).to_string().as_bytes(),
        ),
        Mode::TokenInValues => http(200, json!({ "result": echo }).to_string().as_bytes()),
        Mode::BadHeaderLine => format!("HTTP/1.1 200 OK\r\nX-Echo {auth}\r\nContent-Length: 2\r\n\r\n{{}}").into_bytes(),
        Mode::BadStatusLine => format!("HTTP/1.1 {auth}\r\nContent-Length: 2\r\n\r\n{{}}").into_bytes(),
        Mode::NotHttp => format!("{auth} {echo}\r\n\r\n").into_bytes(),
        Mode::Straddle500 => {
            // The sentinel starts 22 characters into "Authorization: Bearer …";
            // the cut falls 5 characters before its end.
            let msg = format!("{}{auth}", "E".repeat(200 - 22 - (SENTINEL.len() - 5)));
            http(500, json!({"error": msg, "message": msg, "code": 13}).to_string().as_bytes())
        }
    }
}

fn now_ms(start: Instant) -> u64 {
    u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX)
}

fn serve(stream: TcpStream, c: &Ctx) -> io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let Some(head) = read_head(&mut reader)? else {
        return Ok(());
    };
    let body = read_body(&mut reader, request_body_kind(&head)?, 1 << 20)?;
    let mut echo = format!("{}\r\n", head.start_line);
    for (k, v) in &head.headers {
        echo.push_str(&format!("{k}: {v}\r\n"));
    }
    echo.push_str("\r\n");
    echo.push_str(&String::from_utf8_lossy(&body));
    let auth = head
        .headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("authorization"))
        .map(|(k, v)| format!("{k}: {v}"))
        .unwrap_or_default();
    let n = c.served.fetch_add(1, Ordering::SeqCst) + 1;
    let out = if n <= c.hostile_after {
        let path = head.start_line.split(' ').nth(1).unwrap_or("/");
        let req = HttpRequest {
            id: RequestId(n as u64),
            method: Method::Post,
            target: Target::Url(format!("http://{}{path}", c.addr)),
            headers: Vec::new(),
            body,
            timeout_ms: None,
            stream: false,
        };
        let mut st = c.state.lock().unwrap_or_else(|p| p.into_inner());
        let reply = if c.etcd {
            st.etcd.reply(&req)
        } else {
            st.redis.reply(&req, Proto::Upstash, now_ms(c.start))
        };
        match reply {
            Reply::Whole { status, body } => http(status, &body),
            Reply::Stream { messages } => http(200, &messages.concat()),
        }
    } else {
        hostile(c.mode, c.etcd, &echo, &auth)
    };
    let mut w = stream;
    w.write_all(&out)?;
    w.flush()
}

impl Server {
    fn start(etcd: bool, mode: Mode, hostile_after: usize) -> io::Result<Server> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = Arc::clone(&stop);
        let accept = std::thread::Builder::new()
            .name("hostile-backend".into())
            .spawn(move || {
                let ctx = Arc::new(Ctx {
                    addr,
                    etcd,
                    mode,
                    hostile_after,
                    served: AtomicUsize::new(0),
                    state: Mutex::new(State {
                        etcd: EtcdModel::new(0x6000_0000),
                        redis: RedisModel::default(),
                    }),
                    start: Instant::now(),
                });
                while !stop2.load(Ordering::SeqCst) {
                    match listener.accept() {
                        Ok((s, _)) => {
                            let ctx = Arc::clone(&ctx);
                            let _ = s.set_nonblocking(false);
                            let _ = std::thread::Builder::new()
                                .name("hostile-conn".into())
                                .spawn(move || {
                                    let _ = serve(s, &ctx);
                                });
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                            std::thread::sleep(Duration::from_millis(5))
                        }
                        Err(_) => break,
                    }
                }
            })?;
        Ok(Server {
            addr,
            stop,
            accept: Some(accept),
        })
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
    }
}

fn texts_of_error(e: &LockError, out: &mut Vec<String>) {
    out.push(e.to_string());
    out.push(format!("{e:?}"));
}

/// One client against hostile servers: acquire, then (if granted) wait for
/// the loss, extend, release; inspect and close. Returns every error text.
fn subcase(backend: Backend, mode: Mode, after_acquire: bool) -> Result<Vec<String>, String> {
    let hostile_after = match (backend, after_acquire) {
        (_, false) => 0,
        (Backend::Etcd, true) => 2, // lease grant + acquire txn
        (_, true) => 1,             // the acquire script
    };
    let n = if backend == Backend::Redlock { 3 } else { 1 };
    let servers = (0..n)
        .map(|_| Server::start(backend == Backend::Etcd, mode, hostile_after))
        .collect::<io::Result<Vec<_>>>()
        .map_err(|e| e.to_string())?;
    let client = match backend {
        Backend::Etcd => {
            let mut cfg = EtcdConfig::new(vec![servers[0].url()]);
            cfg.session_ttl_ms = 1_000;
            cfg.request_timeout_ms = 1_000;
            cfg.headers = vec![("Authorization".into(), format!("Bearer {SENTINEL}"))];
            Client::etcd(cfg)
        }
        Backend::Upstash => {
            let mut cfg = RedisConfig::new(RedisNode::upstash(servers[0].url(), SENTINEL));
            cfg.ttl_ms = 1_500;
            cfg.request_timeout_ms = 1_000;
            RedisMachine::new(cfg, Box::new(OsEntropy))
                .and_then(|m| Client::try_from_machine(Box::new(m)))
        }
        Backend::Redlock => {
            let mut cfg = RedlockConfig::new(
                servers
                    .iter()
                    .map(|s| RedisNode::upstash(s.url(), SENTINEL))
                    .collect(),
            );
            cfg.ttl_ms = 1_500;
            cfg.request_timeout_ms = 1_000;
            cfg.retry_count = 1;
            cfg.retry_delay_ms = 50;
            RedlockMachine::new(cfg, Box::new(OsEntropy))
                .and_then(|m| Client::try_from_machine(Box::new(m)))
        }
    }
    .map_err(|e| format!("client: {e}"))?;
    let mut texts = Vec::new();
    let name = "sentinel-check";
    match client.acquire_with(
        name,
        AcquireOptions {
            wait: Wait::For(1_500),
            ttl_ms: None,
        },
        None,
    ) {
        Ok(Some(lock)) => {
            if let Some(reason) = lock.wait_lost(Some(Duration::from_secs(5))) {
                texts.push(reason.to_string());
                texts.push(format!("{reason:?}"));
            }
            if let Some(reason) = lock.lost_reason() {
                texts.push(format!("{reason} {reason:?}"));
            }
            if let Err(e) = lock.extend(None) {
                texts_of_error(&e, &mut texts);
            }
            if let Err(e) = lock.release() {
                texts_of_error(&e, &mut texts);
            }
        }
        Ok(None) => {}
        Err(e) => texts_of_error(&e, &mut texts),
    }
    if let Err(e) = client.inspect(name) {
        texts_of_error(&e, &mut texts);
    }
    if let Err(e) = client.close() {
        texts_of_error(&e, &mut texts);
    }
    drop(servers);
    Ok(texts)
}

#[derive(Debug, Default)]
pub struct SecretResults {
    pub subcases: usize,
    pub texts: usize,
    pub hits: usize,
    pub fragments: usize,
    pub samples: Vec<String>,
    /// Distinct backend/mode/phase cases whose texts held (a piece of) the sentinel.
    pub leaking: Vec<String>,
    pub harness: Vec<String>,
}

/// Every (backend, mode, phase) at once, each on its own thread.
pub fn run() -> SecretResults {
    let mut r = SecretResults::default();
    let (tx, rx) = mpsc::channel();
    let mut expected = 0;
    for backend in [Backend::Etcd, Backend::Upstash, Backend::Redlock] {
        for mode in MODES {
            for after in [false, true] {
                expected += 1;
                let tx = tx.clone();
                let spawned = std::thread::Builder::new()
                    .name("sentinel-case".into())
                    .spawn(move || {
                        let _ = tx.send((backend, mode, after, subcase(backend, mode, after)));
                    });
                if let Err(e) = spawned {
                    r.harness.push(format!("cannot start a thread: {e}"));
                    expected -= 1;
                }
            }
        }
    }
    drop(tx);
    let deadline = Instant::now() + Duration::from_secs(40);
    while r.subcases < expected {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok((backend, mode, after, result)) => {
                r.subcases += 1;
                match result {
                    Ok(texts) => {
                        for t in texts {
                            r.texts += 1;
                            let (full, fragments) = super::leak_count(&t);
                            r.hits += full;
                            r.fragments += fragments;
                            let case = format!(
                                "{backend:?}/{mode:?}/{}",
                                if after {
                                    "after acquire"
                                } else {
                                    "from the start"
                                }
                            );
                            if full + fragments > 0 && !r.leaking.contains(&case) {
                                if r.samples.len() < 6 {
                                    r.samples.push(format!(
                                        "{case}: {}",
                                        t.chars()
                                            .take(300)
                                            .map(|c| if c.is_control() { ' ' } else { c })
                                            .collect::<String>()
                                    ));
                                }
                                r.leaking.push(case);
                            }
                        }
                    }
                    Err(e) => r.harness.push(format!("{backend:?}/{mode:?}: {e}")),
                }
            }
            Err(_) => {
                r.harness.push(format!(
                    "{} of {expected} hostile-backend cases did not finish within 40 s",
                    expected - r.subcases
                ));
                break;
            }
        }
    }
    r
}
