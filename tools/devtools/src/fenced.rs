//! A tiny fenced "resource": the thing a lock protects, checking fencing
//! tokens the way Kleppmann describes. Jobs append `{token, started,
//! finished}` records; the resource rejects any token lower than the highest
//! it has accepted for that resource name, and records every attempt,
//! accepted or not, so that tests can check what really happened.
//!
//! HTTP API (JSON, CORS open, loopback only):
//!
//! - `POST /append` — body `{"resource"?: "name" (default "default"),
//!   "token": 12 | "12", "started"?: ms, "finished"?: ms, ...}`. Answers 200
//!   `{"accepted": true, "highest": N}` or 409 `{"accepted": false,
//!   "highest": N, "error": "stale fencing token"}`; 400 for a body that is
//!   not such an object. The whole body is kept in the log as `record`.
//! - `GET /log[?resource=name]` — `{"entries": [{"seq", "resource", "token",
//!   "accepted", "received_ms", "record"}...], "highest": {"name": N}}` in
//!   arrival order.
//! - `POST /reset` — forgets everything.
//!
//! Tokens are compared as unsigned 64-bit integers (decimal strings accepted,
//! as edgelock hands them out as strings to JavaScript).

use std::collections::{BTreeMap, HashMap};
use std::io::{self, BufReader, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use crate::http1::{self, read_body, read_head, request_body_kind};

/// Largest append body accepted.
const MAX_BODY: usize = 64 * 1024;
/// Appends kept before the oldest are dropped (bounded memory under load tests).
const MAX_ENTRIES: usize = 100_000;

#[derive(Debug, Default)]
struct Log {
    entries: Vec<Value>,
    highest: BTreeMap<String, u64>,
    next_seq: u64,
}

struct Shared {
    log: Mutex<Log>,
    stop: AtomicBool,
    conns: Mutex<HashMap<u64, TcpStream>>,
}

/// A running fenced resource (in-process, one thread per connection).
/// Stopped on drop.
pub struct FencedResource {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for FencedResource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FencedResource")
            .field("addr", &self.addr)
            .finish()
    }
}

impl FencedResource {
    /// Listens on a free loopback port.
    pub fn start() -> io::Result<FencedResource> {
        FencedResource::start_on("127.0.0.1:0")
    }

    pub fn start_on(listen: &str) -> io::Result<FencedResource> {
        let listener = TcpListener::bind(listen)?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            log: Mutex::new(Log::default()),
            stop: AtomicBool::new(false),
            conns: Mutex::new(HashMap::new()),
        });
        let s = Arc::clone(&shared);
        let accept = thread::Builder::new()
            .name("fenced-accept".into())
            .spawn(move || accept_loop(listener, s))?;
        Ok(FencedResource {
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

    /// The log as `GET /log` returns it.
    pub fn log(&self, resource: Option<&str>) -> Value {
        log_json(&lock(&self.shared.log), resource)
    }

    pub fn stop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(500));
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
        let conns = std::mem::take(&mut *lock(&self.shared.conns));
        for (_, c) in conns {
            let _ = c.shutdown(Shutdown::Both);
        }
    }

    /// Blocks until stopped from another thread (for the binary).
    pub fn join(mut self) {
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
    }
}

impl Drop for FencedResource {
    fn drop(&mut self) {
        self.stop();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    let mut next_id = 0u64;
    for stream in listener.incoming() {
        if shared.stop.load(Ordering::SeqCst) {
            break;
        }
        let Ok(stream) = stream else {
            thread::sleep(Duration::from_millis(10));
            continue;
        };
        next_id += 1;
        let id = next_id;
        if let Ok(clone) = stream.try_clone() {
            lock(&shared.conns).insert(id, clone);
        }
        let s = Arc::clone(&shared);
        let spawned = thread::Builder::new()
            .name(format!("fenced-conn-{id}"))
            .spawn(move || {
                let _ = serve_connection(stream, &s);
                lock(&s.conns).remove(&id);
            });
        if spawned.is_err() {
            lock(&shared.conns).remove(&id);
        }
    }
}

fn serve_connection(stream: TcpStream, shared: &Shared) -> io::Result<()> {
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(Duration::from_secs(60)))?;
    let mut writer = stream.try_clone()?;
    let mut reader = BufReader::new(stream);
    loop {
        if shared.stop.load(Ordering::SeqCst) {
            return Ok(());
        }
        let head = match read_head(&mut reader) {
            Ok(Some(h)) => h,
            Ok(None) => return Ok(()),
            Err(_) => {
                let _ = write_reply(
                    &mut writer,
                    400,
                    &json!({"error": "malformed request"}),
                    false,
                );
                return Ok(());
            }
        };
        let mut parts = head.start_line.split(' ');
        let (Some(method), Some(target), Some(version)) =
            (parts.next(), parts.next(), parts.next())
        else {
            let _ = write_reply(
                &mut writer,
                400,
                &json!({"error": "malformed request line"}),
                false,
            );
            return Ok(());
        };
        let connection = head.header("connection").unwrap_or("").to_ascii_lowercase();
        let keep_alive = version == "HTTP/1.1" && !connection.contains("close");
        let body = match request_body_kind(&head).and_then(|k| read_body(&mut reader, k, MAX_BODY))
        {
            Ok(b) => b,
            Err(e) => {
                let status = if http1::is_too_large(&e) { 413 } else { 400 };
                let _ = write_reply(
                    &mut writer,
                    status,
                    &json!({"error": "bad request body"}),
                    false,
                );
                return Ok(());
            }
        };
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        let (status, reply) = respond(shared, method, path, query, &body);
        write_reply(&mut writer, status, &reply, keep_alive)?;
        if !keep_alive {
            return Ok(());
        }
    }
}

fn write_reply(w: &mut impl Write, status: u16, body: &Value, keep_alive: bool) -> io::Result<()> {
    let body = body.to_string();
    let reason = match status {
        200 => "OK",
        204 => "No Content",
        400 => "Bad Request",
        404 => "Not Found",
        409 => "Conflict",
        413 => "Payload Too Large",
        _ => "Unknown",
    };
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Access-Control-Allow-Origin: *\r\nAccess-Control-Allow-Headers: content-type\r\n\
         Access-Control-Allow-Methods: GET, POST, OPTIONS\r\nConnection: {}\r\n\r\n",
        body.len(),
        if keep_alive { "keep-alive" } else { "close" }
    );
    w.write_all(head.as_bytes())?;
    w.write_all(body.as_bytes())?;
    w.flush()
}

fn query_param<'a>(query: &'a str, name: &str) -> Option<&'a str> {
    query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

fn respond(shared: &Shared, method: &str, path: &str, query: &str, body: &[u8]) -> (u16, Value) {
    match (method, path) {
        ("OPTIONS", _) => (204, Value::Null),
        ("POST", "/append") => append(&mut lock(&shared.log), body),
        ("GET", "/log") => (
            200,
            log_json(&lock(&shared.log), query_param(query, "resource")),
        ),
        ("POST", "/reset") => {
            *lock(&shared.log) = Log::default();
            (200, json!({"reset": true}))
        }
        _ => (
            404,
            json!({"error": "not found: POST /append, GET /log, POST /reset"}),
        ),
    }
}

/// A token as JSON number or decimal string.
fn parse_token(v: Option<&Value>) -> Option<u64> {
    match v? {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn append(log: &mut Log, body: &[u8]) -> (u16, Value) {
    let Ok(record) = serde_json::from_slice::<Value>(body) else {
        return (400, json!({"error": "body is not JSON"}));
    };
    let Some(token) = parse_token(record.get("token")) else {
        return (
            400,
            json!({"error": "\"token\" must be an unsigned integer (number or decimal string)"}),
        );
    };
    let resource = match record.get("resource") {
        None => "default".to_string(),
        Some(Value::String(s)) if !s.is_empty() && s.len() <= 256 => s.clone(),
        Some(_) => {
            return (
                400,
                json!({"error": "\"resource\" must be a non-empty string"}),
            )
        }
    };
    let highest = log.highest.get(&resource).copied();
    // Equal is accepted: the same holder may write twice under one token.
    let accepted = highest.map_or(true, |h| token >= h);
    if accepted {
        log.highest.insert(resource.clone(), token);
    }
    log.next_seq += 1;
    if log.entries.len() >= MAX_ENTRIES {
        log.entries.remove(0);
    }
    log.entries.push(json!({
        "seq": log.next_seq,
        "resource": resource,
        "token": token.to_string(),
        "accepted": accepted,
        "received_ms": now_ms(),
        "record": record,
    }));
    let highest = log
        .highest
        .get(&resource)
        .copied()
        .unwrap_or(token)
        .to_string();
    if accepted {
        (200, json!({"accepted": true, "highest": highest}))
    } else {
        (
            409,
            json!({"accepted": false, "highest": highest, "error": "stale fencing token"}),
        )
    }
}

fn log_json(log: &Log, resource: Option<&str>) -> Value {
    let entries: Vec<&Value> = log
        .entries
        .iter()
        .filter(|e| resource.map_or(true, |r| e["resource"] == r))
        .collect();
    let highest: BTreeMap<&String, String> = log
        .highest
        .iter()
        .filter(|(k, _)| resource.map_or(true, |r| k.as_str() == r))
        .map(|(k, v)| (k, v.to_string()))
        .collect();
    json!({"entries": entries, "highest": highest})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http1::http_request;

    fn post(url: &str, body: &str) -> (u16, Value) {
        let r = http_request(
            "POST",
            &format!("{url}/append"),
            &[("Content-Type", "application/json")],
            body.as_bytes(),
            Duration::from_secs(5),
        )
        .unwrap();
        (r.status, r.json().unwrap())
    }

    #[test]
    fn rejects_lower_tokens_per_resource_and_logs_every_attempt() {
        let res = FencedResource::start().unwrap();
        let url = res.url();
        assert_eq!(
            post(
                &url,
                r#"{"resource":"a","token":5,"started":1,"finished":2}"#
            )
            .0,
            200
        );
        assert_eq!(
            post(&url, r#"{"resource":"a","token":"5"}"#).0,
            200,
            "equal token accepted"
        );
        let (status, body) = post(&url, r#"{"resource":"a","token":4}"#);
        assert_eq!(
            (status, body["accepted"].clone(), body["highest"].clone()),
            (409, json!(false), json!("5"))
        );
        assert_eq!(
            post(&url, r#"{"resource":"b","token":1}"#).0,
            200,
            "resources are independent"
        );
        assert_eq!(
            post(&url, r#"{"resource":"a","token":"18446744073709551615"}"#).0,
            200
        );
        assert_eq!(post(&url, r#"{"resource":"a","token":-1}"#).0, 400);
        assert_eq!(post(&url, "not json").0, 400);

        let r = http_request(
            "GET",
            &format!("{url}/log?resource=a"),
            &[],
            b"",
            Duration::from_secs(5),
        )
        .unwrap();
        let log = r.json().unwrap();
        let accepted: Vec<(String, bool)> = log["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["token"].as_str().unwrap().to_string(),
                    e["accepted"].as_bool().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            accepted,
            vec![
                ("5".into(), true),
                ("5".into(), true),
                ("4".into(), false),
                ("18446744073709551615".into(), true)
            ]
        );
        assert_eq!(log["entries"][0]["record"]["started"], json!(1));
        assert_eq!(res.log(None)["entries"].as_array().unwrap().len(), 5);

        let r = http_request(
            "POST",
            &format!("{url}/reset"),
            &[],
            b"",
            Duration::from_secs(5),
        )
        .unwrap();
        assert_eq!(r.status, 200);
        assert_eq!(
            post(&url, r#"{"resource":"a","token":1}"#).0,
            200,
            "reset forgets the highest token"
        );
    }
}
