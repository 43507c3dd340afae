//! A local Upstash-compatible REST gateway in front of a real `redis-server`.
//!
//! No such server exists on any registry, so edgelock's tests bring their
//! own. It speaks the subset of the Upstash REST API that edgelock and the
//! official `@upstash/redis` client use:
//!
//! - `POST /` with a JSON array body `["SET","k","v","NX","PX",1000]` →
//!   `{"result": ...}`; a Redis error → HTTP 400 `{"error":"ERR ..."}`.
//!   RESP integers → JSON numbers, strings → JSON strings, nil → `null`,
//!   arrays → arrays.
//! - `POST /pipeline` with `[[...],[...]]` → `[{"result":..},{"error":..}]`
//!   (HTTP 200 even when some commands fail; not atomic).
//! - `POST /multi-exec` → the same shape, run inside MULTI/EXEC; a command
//!   refused while queueing discards the transaction: HTTP 400
//!   `{"error": ...}`.
//! - Command in the path: `GET|POST /set/k/v` (segments percent-decoded to
//!   bytes); with POST/PUT a non-empty body is appended as the last argument,
//!   then query parameters other than `_token` (`?EX=100` → `EX 100`).
//! - `Upstash-Encoding: base64` → every string in the result is base64 of its
//!   bytes, except the status reply `OK` (what the official client sends by
//!   default and decodes). `Upstash-Response-Format: resp2` → raw RESP bytes.
//! - Pub/sub as server-sent events (see [`subscribe`]):
//!   `POST|GET /subscribe/<channel>[/<channel>...]` and
//!   `/psubscribe/<pattern>[/...]` (path segments percent-decoded, one Redis
//!   argument each; the request body, `[]` from the client, is ignored).
//!   Answer: `200`, `Content-Type: text/event-stream`, chunked (HTTP/1.0:
//!   until close), one chunk per event, each event `data: <fields>\n\n`
//!   with the fields of the Redis push message joined by `,`:
//!   `data: subscribe,ch,1`, `data: message,ch,<payload>`,
//!   `data: psubscribe,p*,1`, `data: pmessage,p*,ch,<payload>`. Payloads are
//!   the raw bytes (never base64, whatever `Upstash-Encoding` says); line
//!   breaks inside one become further `data: ` lines. Each subscription has
//!   its own Redis connection (never the command pool) and ends, releasing
//!   it, as soon as the client closes its socket (EOF, no keepalive bytes),
//!   when Redis closes (terminating chunk) or when the gateway stops. Errors
//!   before the stream starts are ordinary JSON replies (401, 400 without a
//!   channel, 503/504 when Redis is down/paused). A subscription counts as
//!   one request and one command.
//! - Auth: `Authorization: Bearer <token>` or `?_token=`; otherwise HTTP 401
//!   `{"error":"Unauthorized"}`. The token is never logged or echoed.
//! - CORS: `Access-Control-Allow-Origin: *` on every reply; `OPTIONS`
//!   preflights get 204 with the headers `@upstash/redis` sends.
//!
//! Binary safety: request arguments are binary-safe in path form
//! (percent-encoding) and as a raw POST body; JSON-array arguments are UTF-8
//! text. Replies are JSON strings, so without base64 encoding bytes that are
//! not UTF-8 come back as U+FFFD; with `Upstash-Encoding: base64` they are
//! exact. That is the protocol's limit, not the gateway's.
//!
//! Not supported: `/monitor` (event stream), read-your-writes sync tokens
//! (no replicas here), and commands that would change a pooled connection's
//! state (MULTI, WATCH, SELECT, SUBSCRIBE in a command body, CLIENT, blocking
//! pops, ...), which are refused with HTTP 400.

mod pool;
pub mod protocol;
pub mod subscribe;

use std::collections::HashMap;
use std::io::{self, BufReader, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::http1::{self, read_body, read_head, request_body_kind};
use crate::redis::RedisServer;
use pool::RedisPool;
use protocol::{Reply, Request};

/// Gateway settings.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    /// Redis address, `host:port`.
    pub redis_addr: String,
    /// Listen address; port 0 picks a free one.
    pub listen: String,
    /// Required bearer token; `None` accepts every request.
    pub token: Option<String>,
    /// Connect/read/write timeout towards Redis (a paused Redis yields 504).
    pub redis_timeout: Duration,
    /// Idle keep-alive connections are closed after this long.
    pub idle_timeout: Duration,
    /// Largest request body accepted (413 beyond).
    pub max_body: usize,
    /// Log one line per request to stderr (method, path without query, status).
    pub verbose: bool,
}

impl GatewayConfig {
    pub fn new(redis_addr: impl Into<String>) -> GatewayConfig {
        GatewayConfig {
            redis_addr: redis_addr.into(),
            listen: "127.0.0.1:0".into(),
            token: None,
            redis_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_body: 16 * 1024 * 1024,
            verbose: false,
        }
    }
}

struct Shared {
    cfg: GatewayConfig,
    pool: RedisPool,
    stop: AtomicBool,
    conns: Mutex<HashMap<u64, TcpStream>>,
    /// The dedicated Redis connection of every open subscription.
    subs: Mutex<HashMap<u64, TcpStream>>,
    next_sub: AtomicU64,
    requests: AtomicU64,
    commands: AtomicU64,
}

/// A running gateway (in-process, one thread per HTTP connection).
/// Stopped on drop.
pub struct UpstashGateway {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for UpstashGateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The token is deliberately absent.
        f.debug_struct("UpstashGateway")
            .field("addr", &self.addr)
            .field("redis", &self.shared.cfg.redis_addr)
            .finish()
    }
}

impl UpstashGateway {
    /// A gateway for `redis` requiring `token` (an empty token disables auth).
    pub fn start(redis: &RedisServer, token: &str) -> io::Result<UpstashGateway> {
        let mut cfg = GatewayConfig::new(redis.addr());
        cfg.token = (!token.is_empty()).then(|| token.to_string());
        UpstashGateway::start_with(cfg)
    }

    pub fn start_with(cfg: GatewayConfig) -> io::Result<UpstashGateway> {
        let listener = TcpListener::bind(cfg.listen.as_str())?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            pool: RedisPool::new(cfg.redis_addr.clone(), cfg.redis_timeout),
            cfg,
            stop: AtomicBool::new(false),
            conns: Mutex::new(HashMap::new()),
            subs: Mutex::new(HashMap::new()),
            next_sub: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            commands: AtomicU64::new(0),
        });
        let s = Arc::clone(&shared);
        let accept = thread::Builder::new()
            .name("upstash-gateway-accept".into())
            .spawn(move || accept_loop(listener, s))?;
        Ok(UpstashGateway {
            addr,
            shared,
            accept: Some(accept),
        })
    }

    /// `http://127.0.0.1:<port>`
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// HTTP requests answered so far (preflights and subscriptions included).
    pub fn request_count(&self) -> u64 {
        self.shared.requests.load(Ordering::SeqCst)
    }

    /// Redis commands sent so far (a pipeline of 3 counts 3, a subscription 1).
    pub fn command_count(&self) -> u64 {
        self.shared.commands.load(Ordering::SeqCst)
    }

    /// Subscriptions (`/subscribe`, `/psubscribe` streams) open right now,
    /// each holding its own Redis connection.
    pub fn subscription_count(&self) -> usize {
        self.shared
            .subs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .len()
    }

    /// Stops accepting, closes every open connection, ends every open
    /// subscription (waiting up to 2 s for their threads to release their
    /// Redis connections) and joins the accept thread.
    pub fn stop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the blocking accept().
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(500));
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
        let conns =
            std::mem::take(&mut *self.shared.conns.lock().unwrap_or_else(|p| p.into_inner()));
        for (_, c) in conns {
            let _ = c.shutdown(Shutdown::Both);
        }
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            {
                let subs = self.shared.subs.lock().unwrap_or_else(|p| p.into_inner());
                if subs.is_empty() || Instant::now() >= deadline {
                    break;
                }
                for s in subs.values() {
                    let _ = s.shutdown(Shutdown::Both);
                }
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// Blocks until the gateway is stopped from another thread (for the binary).
    pub fn join(mut self) {
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
    }
}

impl Drop for UpstashGateway {
    fn drop(&mut self) {
        self.stop();
    }
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    let mut next_id = 0u64;
    for stream in listener.incoming() {
        if shared.stop.load(Ordering::SeqCst) {
            break;
        }
        let Ok(stream) = stream else {
            // EMFILE and friends: back off instead of spinning.
            thread::sleep(Duration::from_millis(10));
            continue;
        };
        next_id += 1;
        let id = next_id;
        if let Ok(clone) = stream.try_clone() {
            shared
                .conns
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(id, clone);
        }
        let s = Arc::clone(&shared);
        let spawned = thread::Builder::new()
            .name(format!("upstash-gateway-conn-{id}"))
            .spawn(move || {
                let _ = serve_connection(stream, &s);
                s.conns
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&id);
            });
        if spawned.is_err() {
            shared
                .conns
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&id);
        }
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        204 => "No Content",
        400 => "Bad Request",
        401 => "Unauthorized",
        405 => "Method Not Allowed",
        413 => "Payload Too Large",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Unknown",
    }
}

fn write_reply(
    w: &mut impl Write,
    reply: &Reply,
    keep_alive: bool,
    head_only: bool,
) -> io::Result<()> {
    let mut out = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nAccess-Control-Allow-Origin: *\r\n",
        reply.status,
        reason(reply.status),
        reply.content_type,
        reply.body.len()
    );
    for (k, v) in &reply.extra_headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str(if keep_alive {
        "Connection: keep-alive\r\n\r\n"
    } else {
        "Connection: close\r\n\r\n"
    });
    let mut bytes = out.into_bytes();
    if !head_only {
        bytes.extend_from_slice(&reply.body);
    }
    w.write_all(&bytes)?;
    w.flush()
}

fn serve_connection(stream: TcpStream, shared: &Shared) -> io::Result<()> {
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(shared.cfg.idle_timeout))?;
    let mut writer = stream.try_clone()?;
    let mut reader = BufReader::new(stream);
    loop {
        if shared.stop.load(Ordering::SeqCst) {
            return Ok(());
        }
        let head = match read_head(&mut reader) {
            Ok(Some(h)) => h,
            Ok(None) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                let _ = write_reply(
                    &mut writer,
                    &Reply::error(400, "ERR malformed HTTP request"),
                    false,
                    false,
                );
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        let mut parts = head.start_line.split(' ');
        let (Some(method), Some(target), Some(version), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            let _ = write_reply(
                &mut writer,
                &Reply::error(400, "ERR malformed request line"),
                false,
                false,
            );
            return Ok(());
        };
        let connection = head.header("connection").unwrap_or("").to_ascii_lowercase();
        let keep_alive = match version {
            "HTTP/1.1" => !connection.split(',').any(|t| t.trim() == "close"),
            "HTTP/1.0" => connection.split(',').any(|t| t.trim() == "keep-alive"),
            _ => {
                let _ = write_reply(
                    &mut writer,
                    &Reply::error(400, "ERR unsupported HTTP version"),
                    false,
                    false,
                );
                return Ok(());
            }
        };
        let kind = match request_body_kind(&head) {
            Ok(k) => k,
            Err(_) => {
                let _ = write_reply(
                    &mut writer,
                    &Reply::error(400, "ERR invalid body framing"),
                    false,
                    false,
                );
                return Ok(());
            }
        };
        if head
            .header("expect")
            .is_some_and(|e| e.eq_ignore_ascii_case("100-continue"))
            && kind != http1::BodyKind::None
        {
            writer.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")?;
        }
        let body = match read_body(&mut reader, kind, shared.cfg.max_body) {
            Ok(b) => b,
            Err(e) if http1::is_too_large(&e) => {
                let _ = write_reply(
                    &mut writer,
                    &Reply::error(413, "ERR request body too large"),
                    false,
                    false,
                );
                return Ok(());
            }
            Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                let _ = write_reply(
                    &mut writer,
                    &Reply::error(400, "ERR malformed request body"),
                    false,
                    false,
                );
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        let (path, query) = match target.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (target, None),
        };
        if method != "OPTIONS" {
            if let Some((kind, channels)) = subscribe::route(path) {
                // An event stream: it owns the connection until it ends.
                let reply = if authorized(shared, query, &head.headers) {
                    match subscribe::serve(
                        shared,
                        reader.get_ref(),
                        method,
                        path,
                        kind,
                        channels,
                        version == "HTTP/1.0",
                    ) {
                        Ok(()) => return Ok(()),
                        Err(r) => r,
                    }
                } else {
                    Reply::error(401, "Unauthorized")
                };
                shared.requests.fetch_add(1, Ordering::SeqCst);
                if shared.cfg.verbose {
                    eprintln!("upstash-gateway: {method} {path} -> {}", reply.status);
                }
                write_reply(&mut writer, &reply, keep_alive, method == "HEAD")?;
                if !keep_alive {
                    return Ok(());
                }
                continue;
            }
        }
        let reply = respond(shared, method, path, query, &head.headers, &body);
        shared.requests.fetch_add(1, Ordering::SeqCst);
        shared.commands.fetch_add(reply.commands, Ordering::SeqCst);
        if shared.cfg.verbose {
            // Path only: the query may carry `_token`.
            eprintln!("upstash-gateway: {method} {path} -> {}", reply.status);
        }
        write_reply(&mut writer, &reply, keep_alive, method == "HEAD")?;
        if !keep_alive {
            return Ok(());
        }
    }
}

fn respond(
    shared: &Shared,
    method: &str,
    path: &str,
    query: Option<&str>,
    headers: &[(String, String)],
    body: &[u8],
) -> Reply {
    if method == "OPTIONS" {
        // Preflights carry no credentials; answer them before auth.
        return protocol::preflight(headers);
    }
    if !authorized(shared, query, headers) {
        return Reply::error(401, "Unauthorized");
    }
    protocol::handle(
        &shared.pool,
        &Request {
            method,
            path,
            query,
            headers,
            body,
        },
    )
}

/// The bearer token check shared by every route (always true without a token).
fn authorized(shared: &Shared, query: Option<&str>, headers: &[(String, String)]) -> bool {
    let Some(token) = &shared.cfg.token else {
        return true;
    };
    let q = protocol::parse_query(query.unwrap_or(""));
    protocol::request_token(headers, &q)
        .is_some_and(|t| protocol::constant_time_eq(&t, token.as_bytes()))
}
