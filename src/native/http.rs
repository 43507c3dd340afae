//! A minimal blocking HTTP/1.1 client on `std::net`: `http://` and `https://`
//! (TLS through rustls, see [`crate::native::tls`]), keep-alive pooling per
//! scheme:host:port, Content-Length / chunked / close-delimited bodies, a
//! streaming mode (etcd watches, Redis subscriptions) and cancellation from
//! another thread.
//!
//! Every limit is enforced while reading, so a hostile or broken server yields a
//! [`TransportError`], never a panic or unbounded memory.

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::core::{LockError, TransportError};
use crate::native::tls::{self, TlsConfig, TlsConnector};

mod stream;
use stream::Stream;

/// Largest whole (non-streamed) response body accepted.
pub const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;
/// Largest status line + header block accepted.
pub const MAX_HEADER_BYTES: usize = 64 * 1024;
/// Longest single line inside a chunked body (size line or trailer).
const MAX_CHUNK_LINE: usize = 4096;
/// Idle connections kept per host:port.
const MAX_IDLE_PER_HOST: usize = 8;
/// Informational (1xx) responses skipped before giving up.
const MAX_INTERIM_RESPONSES: usize = 8;
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Read timeout of a non-streaming request without its own timeout: generous,
/// since the core enforces its own deadlines and cancels.
const DEFAULT_READ_TIMEOUT: Duration = Duration::from_secs(60);
const READ_BUF: usize = 16 * 1024;

/// A parsed `http://` or `https://` URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Url {
    /// `https://`: the connection is TLS.
    pub tls: bool,
    /// Host without brackets (an IPv6 literal is bare here).
    pub host: String,
    /// Port; 80 (http) or 443 (https) when the URL names none.
    pub port: u16,
    /// Path (and anything after it), always starting with `/`.
    pub path: String,
}

impl Url {
    /// Parses an `http(s)://host[:port][/path]` URL; rejects credentials,
    /// whitespace and control characters.
    pub fn parse(url: &str) -> Result<Url, TransportError> {
        let (tls, rest) = match (url.get(..7), url.get(..8)) {
            (Some(p), _) if p.eq_ignore_ascii_case("http://") => (false, &url[7..]),
            (_, Some(p)) if p.eq_ignore_ascii_case("https://") => (true, &url[8..]),
            _ => {
                return Err(TransportError::Connect(format!(
                    "unsupported URL {:?}: expected http:// or https://",
                    short(url)
                )))
            }
        };
        let default_port = if tls { 443 } else { 80 };
        if url.bytes().any(|b| b <= b' ' || b == 0x7f) {
            return Err(TransportError::Connect(
                "URL contains whitespace or control characters".into(),
            ));
        }
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        if authority.contains('@') {
            return Err(TransportError::Connect(
                "URLs with credentials are not supported".into(),
            ));
        }
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let end = v6.find(']').ok_or_else(|| {
                TransportError::Connect("unterminated IPv6 literal in URL".into())
            })?;
            let host = &v6[..end];
            let after = &v6[end + 1..];
            let port = match after.strip_prefix(':') {
                Some(p) => parse_port(p)?,
                None if after.is_empty() => default_port,
                None => {
                    return Err(TransportError::Connect(
                        "garbage after IPv6 literal in URL".into(),
                    ))
                }
            };
            (host, port)
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h, parse_port(p)?),
                None => (authority, default_port),
            }
        };
        if host.is_empty() {
            return Err(TransportError::Connect("URL has no host".into()));
        }
        Ok(Url {
            tls,
            host: host.to_string(),
            port,
            path: path.to_string(),
        })
    }

    /// The value of the `Host` header.
    fn host_header(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        if self.port == if self.tls { 443 } else { 80 } {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }

    fn pool_key(&self) -> PoolKey {
        (self.tls, self.host.to_ascii_lowercase(), self.port)
    }
}

fn parse_port(p: &str) -> Result<u16, TransportError> {
    match p.parse::<u16>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(TransportError::Connect(format!(
            "invalid port {:?} in URL",
            short(p)
        ))),
    }
}

fn short(s: &str) -> String {
    s.chars().take(80).collect()
}

/// One request to perform.
#[derive(Clone, Debug)]
pub struct Request<'a> {
    /// Request method (`GET`, `POST`).
    pub method: &'a str,
    /// Absolute `http://` or `https://` URL.
    pub url: &'a str,
    /// Header names and values.
    pub headers: &'a [(String, String)],
    /// Request body.
    pub body: &'a [u8],
    /// Connect timeout, and (non-streaming) the deadline for the whole response;
    /// (streaming) the deadline for the response head only.
    pub timeout: Option<Duration>,
}

/// A complete HTTP response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    /// HTTP status code.
    pub status: u16,
    /// The whole body, after transfer decoding.
    pub body: Vec<u8>,
}

/// How a streaming request ended (when it did not fail).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StreamOutcome {
    /// A 2xx answer whose body was delivered to the sink and has ended.
    Ended,
    /// A non-2xx answer, delivered whole (bounded like any non-streaming body).
    Whole(Response),
}

/// Cancels one in-flight request from any thread: the (TCP) socket is shut
/// down, so a blocked read or write returns at once, under TLS as well.
/// Cancelling before the connection exists makes the request fail as soon as
/// it gets one.
#[derive(Clone, Default, Debug)]
pub struct CancelHandle {
    inner: Arc<Mutex<CancelState>>,
}

#[derive(Default, Debug)]
struct CancelState {
    cancelled: bool,
    stream: Option<TcpStream>,
}

impl CancelHandle {
    /// A handle for a request not cancelled yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Cancels the request: shuts its socket down if it has one, otherwise makes it
    /// fail as soon as it connects.
    pub fn cancel(&self) {
        let mut st = lock(&self.inner);
        st.cancelled = true;
        if let Some(s) = st.stream.take() {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    /// Whether [`cancel`](Self::cancel) was called.
    pub fn is_cancelled(&self) -> bool {
        lock(&self.inner).cancelled
    }

    /// Registers the socket the request now uses; false if already cancelled.
    fn attach(&self, stream: &TcpStream) -> bool {
        let mut st = lock(&self.inner);
        if st.cancelled {
            return false;
        }
        st.stream = stream.try_clone().ok();
        true
    }

    fn detach(&self) {
        lock(&self.inner).stream = None;
    }
}

/// Locks a mutex, ignoring poisoning: every structure guarded here stays
/// consistent across a panic (plain values, no multi-step invariants).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// (https, lowercased host, port).
type PoolKey = (bool, String, u16);
/// Idle keep-alive connections by [`PoolKey`].
type Pool = HashMap<PoolKey, Vec<Stream>>;

/// A blocking HTTP/1.1 client with a keep-alive pool. Cheap to clone (shared
/// pool and TLS configuration).
#[derive(Clone, Default)]
pub struct HttpClient {
    idle: Arc<Mutex<Pool>>,
    /// `None`: https uses [`TlsConfig::default`] (platform roots), loaded on
    /// first use.
    tls: Option<TlsConnector>,
}

impl std::fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpClient").finish_non_exhaustive()
    }
}

/// Whether a failure happened before the server sent a single response byte on
/// a reused connection (then the request is retried once on a new connection).
enum Attempt<T> {
    Done(Result<T, TransportError>),
    StaleConnection(TransportError),
}

impl HttpClient {
    /// A client with an empty connection pool; https trusts the platform's roots.
    pub fn new() -> Self {
        Self::default()
    }

    /// A client whose https connections use `tls`. Reads and checks the files
    /// now: an unreadable or invalid one is `LockError::InvalidArgument`.
    pub fn with_tls(tls: &TlsConfig) -> Result<Self, LockError> {
        let tls = if tls.is_default() {
            None
        } else {
            Some(tls.load()?)
        };
        Ok(HttpClient {
            idle: Arc::default(),
            tls,
        })
    }

    pub(crate) fn tls_connector(&self) -> Result<TlsConnector, TransportError> {
        match &self.tls {
            Some(c) => Ok(c.clone()),
            None => tls::default_connector().map_err(|e| TransportError::Connect(e.to_string())),
        }
    }

    /// Number of idle pooled connections (tests).
    pub fn idle_count(&self) -> usize {
        lock(&self.idle).values().map(Vec::len).sum()
    }

    /// Performs a request and returns the whole response.
    pub fn send(
        &self,
        req: &Request<'_>,
        cancel: &CancelHandle,
    ) -> Result<Response, TransportError> {
        match self.perform(req, cancel, &mut |_| {}, false)? {
            StreamOutcome::Whole(r) => Ok(r),
            StreamOutcome::Ended => Err(TransportError::Io(
                "internal: streaming outcome for a whole request".into(),
            )),
        }
    }

    /// Performs a request whose 2xx body is handed to `sink` piece by piece as
    /// it arrives; a non-2xx answer is returned whole.
    pub fn send_streaming(
        &self,
        req: &Request<'_>,
        cancel: &CancelHandle,
        sink: &mut dyn FnMut(&[u8]),
    ) -> Result<StreamOutcome, TransportError> {
        self.perform(req, cancel, sink, true)
    }

    fn perform(
        &self,
        req: &Request<'_>,
        cancel: &CancelHandle,
        sink: &mut dyn FnMut(&[u8]),
        streaming: bool,
    ) -> Result<StreamOutcome, TransportError> {
        let url = Url::parse(req.url)?;
        let head = encode_head(req, &url)?;
        let started = Instant::now();
        if let Some(conn) = self.take_idle(&url) {
            match self.attempt(
                conn, true, &url, &head, req, cancel, started, &mut *sink, streaming,
            ) {
                Attempt::Done(r) => return r,
                Attempt::StaleConnection(_) if !cancel.is_cancelled() => {} // retry once on a fresh connection
                Attempt::StaleConnection(e) => return Err(e),
            }
        }
        let tcp = connect(&url, req.timeout.unwrap_or(DEFAULT_CONNECT_TIMEOUT))?;
        let conn = if url.tls {
            Stream::tls(&self.tls_connector()?, &url.host, tcp)?
        } else {
            Stream::Plain(tcp)
        };
        match self.attempt(
            conn, false, &url, &head, req, cancel, started, sink, streaming,
        ) {
            Attempt::Done(r) => r,
            Attempt::StaleConnection(e) => Err(e),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn attempt(
        &self,
        stream: Stream,
        reused: bool,
        url: &Url,
        head: &[u8],
        req: &Request<'_>,
        cancel: &CancelHandle,
        started: Instant,
        sink: &mut dyn FnMut(&[u8]),
        streaming: bool,
    ) -> Attempt<StreamOutcome> {
        if !cancel.attach(stream.tcp()) {
            return Attempt::Done(Err(TransportError::Io("request cancelled".into())));
        }
        let deadline = started + req.timeout.unwrap_or(DEFAULT_READ_TIMEOUT);
        let mut conn = Conn::new(stream, Some(deadline));
        // A fresh connection's TLS handshake runs with the cancel handle
        // attached and within the request's deadline.
        let result = match conn.handshake(&url.host) {
            Ok(()) => exchange(&mut conn, head, req.body, sink, streaming, reused),
            Err(e) => Err(ExchangeError::Other(e)),
        };
        cancel.detach();
        match result {
            Ok((outcome, reusable)) => {
                if reusable && !cancel.is_cancelled() {
                    self.put_idle(url, conn.stream);
                }
                Attempt::Done(Ok(outcome))
            }
            // A timeout means a slow server, not a stale connection: no retry.
            Err(ExchangeError::BeforeResponse(e)) if reused && e != TransportError::Timeout => {
                Attempt::StaleConnection(e)
            }
            Err(ExchangeError::BeforeResponse(e)) | Err(ExchangeError::Other(e)) => {
                if cancel.is_cancelled() {
                    Attempt::Done(Err(TransportError::Io("request cancelled".into())))
                } else {
                    Attempt::Done(Err(e))
                }
            }
        }
    }

    fn take_idle(&self, url: &Url) -> Option<Stream> {
        let mut idle = lock(&self.idle);
        let list = idle.get_mut(&url.pool_key())?;
        while let Some(s) = list.pop() {
            if still_open(&s) {
                return Some(s);
            }
        }
        None
    }

    fn put_idle(&self, url: &Url, stream: Stream) {
        let mut idle = lock(&self.idle);
        let list = idle.entry(url.pool_key()).or_default();
        if list.len() < MAX_IDLE_PER_HOST {
            list.push(stream);
        }
    }
}

/// A cheap check that an idle connection was not closed by the server (EOF or
/// unexpected data waiting, such as a TLS close_notify): peek at the TCP
/// socket without blocking.
fn still_open(s: &Stream) -> bool {
    let s = s.tcp();
    if s.set_nonblocking(true).is_err() {
        return false;
    }
    let mut b = [0u8; 1];
    let open = matches!(s.peek(&mut b), Err(ref e) if e.kind() == ErrorKind::WouldBlock);
    s.set_nonblocking(false).is_ok() && open
}

fn connect(url: &Url, timeout: Duration) -> Result<TcpStream, TransportError> {
    tcp_connect(&url.host, url.port, timeout)
}

/// A TCP connection to the first address of `host` that answers within
/// `timeout` (Nagle off: requests and commands are small and wait for answers).
pub(crate) fn tcp_connect(
    host: &str,
    port: u16,
    timeout: Duration,
) -> Result<TcpStream, TransportError> {
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| TransportError::Connect(format!("cannot resolve {}: {e}", short(host))))?
        .collect();
    let mut last = TransportError::Connect(format!("no address for {}", short(host)));
    for addr in addrs {
        match TcpStream::connect_timeout(&addr, timeout) {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            Err(e) if e.kind() == ErrorKind::TimedOut || e.kind() == ErrorKind::WouldBlock => {
                last = TransportError::Timeout
            }
            Err(e) => last = TransportError::Connect(format!("{addr}: {e}")),
        }
    }
    Err(last)
}

fn encode_head(req: &Request<'_>, url: &Url) -> Result<Vec<u8>, TransportError> {
    let bad = |s: &str| s.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0);
    if !req.method.bytes().all(|b| b.is_ascii_uppercase()) || req.method.is_empty() {
        return Err(TransportError::Connect("invalid HTTP method".into()));
    }
    let mut h = format!(
        "{} {} HTTP/1.1\r\nHost: {}\r\n",
        req.method,
        url.path,
        url.host_header()
    );
    let mut has_ua = false;
    for (k, v) in req.headers {
        if k.is_empty() || bad(k) || bad(v) || k.contains(':') {
            return Err(TransportError::Connect(format!(
                "invalid header name or value for {:?}",
                short(k)
            )));
        }
        let lk = k.to_ascii_lowercase();
        if lk == "host" || lk == "content-length" || lk == "transfer-encoding" || lk == "connection"
        {
            continue; // framing headers are ours
        }
        has_ua |= lk == "user-agent";
        h.push_str(k);
        h.push_str(": ");
        h.push_str(v);
        h.push_str("\r\n");
    }
    if !has_ua {
        h.push_str(concat!(
            "User-Agent: edgelock/",
            env!("CARGO_PKG_VERSION"),
            "\r\n"
        ));
    }
    if !req.body.is_empty() || req.method != "GET" {
        h.push_str(&format!("Content-Length: {}\r\n", req.body.len()));
    }
    h.push_str("\r\n");
    Ok(h.into_bytes())
}

enum ExchangeError {
    /// Nothing of a response was received (the request may not have been sent).
    BeforeResponse(TransportError),
    Other(TransportError),
}

fn io_err(e: std::io::Error) -> TransportError {
    // A TLS alert or protocol error from rustls, e.g. a server that rejects a
    // missing client certificate only after the handshake (TLS 1.3).
    if let Some(t) = tls::io_error(&e, None) {
        return t;
    }
    match e.kind() {
        ErrorKind::TimedOut | ErrorKind::WouldBlock => TransportError::Timeout,
        _ => TransportError::Io(e.to_string()),
    }
}

/// Writes the request and reads the answer; returns the outcome and whether the
/// connection can be reused.
fn exchange(
    conn: &mut Conn,
    head: &[u8],
    body: &[u8],
    sink: &mut dyn FnMut(&[u8]),
    streaming: bool,
    reused: bool,
) -> Result<(StreamOutcome, bool), ExchangeError> {
    let mut out = Vec::with_capacity(head.len() + body.len());
    out.extend_from_slice(head);
    out.extend_from_slice(body);
    if let Err(e) = conn.write_all(&out) {
        return Err(ExchangeError::BeforeResponse(io_err(e)));
    }
    let mut interim = 0;
    let head = loop {
        let head = read_head(conn, reused)?;
        if (100..200).contains(&head.status) && head.status != 101 {
            interim += 1;
            if interim > MAX_INTERIM_RESPONSES {
                return Err(ExchangeError::Other(TransportError::Io(
                    "too many informational responses".into(),
                )));
            }
            continue;
        }
        break head;
    };
    if head.status == 101 {
        return Err(ExchangeError::Other(TransportError::Io(
            "unexpected protocol switch (HTTP 101)".into(),
        )));
    }
    let framing = head.framing().map_err(ExchangeError::Other)?;
    let success = (200..300).contains(&head.status);
    let stream_it = streaming && success;
    if stream_it {
        // A watch may stay silent for a long time: only cancellation ends it.
        conn.deadline = None;
        if conn.stream.tcp().set_read_timeout(None).is_err() {
            return Err(ExchangeError::Other(TransportError::Io(
                "cannot configure socket".into(),
            )));
        }
    }
    let mut body = Vec::new();
    let mut collect = |piece: &[u8]| -> Result<(), TransportError> {
        if body.len() + piece.len() > MAX_BODY_BYTES {
            return Err(TransportError::Io(format!(
                "response body exceeds {MAX_BODY_BYTES} bytes"
            )));
        }
        body.extend_from_slice(piece);
        Ok(())
    };
    let mut deliver = |piece: &[u8]| -> Result<(), TransportError> {
        if stream_it {
            sink(piece);
            Ok(())
        } else {
            collect(piece)
        }
    };
    let reusable = read_body(conn, &framing, &mut deliver).map_err(ExchangeError::Other)?;
    let reusable = reusable && head.keep_alive && conn.buffered() == 0 && conn.stream.is_clean();
    let outcome = if stream_it {
        StreamOutcome::Ended
    } else {
        StreamOutcome::Whole(Response {
            status: head.status,
            body,
        })
    };
    Ok((outcome, reusable))
}

struct Head {
    status: u16,
    keep_alive: bool,
    content_length: Option<u64>,
    chunked: bool,
    no_body: bool,
}

enum Framing {
    Empty,
    Length(u64),
    Chunked,
    UntilClose,
}

impl Head {
    fn framing(&self) -> Result<Framing, TransportError> {
        if self.no_body {
            return Ok(Framing::Empty);
        }
        if self.chunked {
            return Ok(Framing::Chunked);
        }
        Ok(match self.content_length {
            Some(0) => Framing::Empty,
            Some(n) => Framing::Length(n),
            None => Framing::UntilClose,
        })
    }
}

fn read_head(conn: &mut Conn, reused: bool) -> Result<Head, ExchangeError> {
    let mut raw = Vec::new();
    let mut blank_lines = 0;
    loop {
        match conn.read_line_into(&mut raw, MAX_HEADER_BYTES) {
            Ok(true) => {}
            Ok(false) if raw.is_empty() => {
                let e = TransportError::Io("connection closed before any response".into());
                return Err(ExchangeError::BeforeResponse(e));
            }
            Ok(false) => {
                return Err(ExchangeError::Other(TransportError::Io(
                    "connection closed inside response headers".into(),
                )))
            }
            Err(e) if raw.is_empty() && reused => return Err(ExchangeError::BeforeResponse(e)),
            Err(e) => return Err(ExchangeError::Other(e)),
        }
        if raw.ends_with(b"\r\n\r\n") || raw.ends_with(b"\n\n") || raw == b"\r\n" || raw == b"\n" {
            if raw.len() <= 2 {
                // Tolerate a few stray empty lines before the status line.
                blank_lines += 1;
                if blank_lines > 4 {
                    return Err(ExchangeError::Other(TransportError::Io(
                        "garbage before the status line".into(),
                    )));
                }
                raw.clear();
                continue;
            }
            break;
        }
    }
    parse_head(&raw).map_err(ExchangeError::Other)
}

fn parse_head(raw: &[u8]) -> Result<Head, TransportError> {
    let text = std::str::from_utf8(raw)
        .map_err(|_| TransportError::Io("response headers are not valid UTF-8".into()))?;
    let mut lines = text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l));
    let (minor, status) = parse_status_line(lines.next().unwrap_or(""))?;
    let mut head = Head {
        status,
        keep_alive: minor == 1,
        content_length: None,
        chunked: false,
        no_body: status == 204 || status == 304 || (100..200).contains(&status),
    };
    for line in lines.filter(|l| !l.is_empty()) {
        let (name, value) = line.split_once(':').ok_or_else(|| {
            TransportError::Io(format!("malformed header line ({} bytes)", line.len()))
        })?;
        apply_header(&mut head, minor, name, value.trim())?;
    }
    if head.chunked {
        // RFC 9112 §6.3: chunked wins over Content-Length; such a message must not be reused.
        if head.content_length.is_some() {
            head.keep_alive = false;
        }
    } else if head.content_length.is_none() && !head.no_body {
        head.keep_alive = false; // body ends at close
    }
    Ok(head)
}

/// `HTTP/1.x NNN reason` -> (x, NNN).
fn parse_status_line(status_line: &str) -> Result<(u8, u16), TransportError> {
    let mut parts = status_line.splitn(3, ' ');
    let minor = match parts.next().unwrap_or("") {
        "HTTP/1.1" => 1,
        "HTTP/1.0" => 0,
        // The server's bytes are not quoted: a hostile or confused server may
        // echo our headers, and any excerpt could cut a secret in half.
        _ => {
            return Err(TransportError::Io(format!(
                "not an HTTP/1.x response (status line of {} bytes)",
                status_line.len()
            )))
        }
    };
    let status = parts
        .next()
        .filter(|s| s.len() == 3)
        .and_then(|s| s.parse::<u16>().ok())
        .filter(|s| (100..600).contains(s))
        .ok_or_else(|| {
            TransportError::Io(format!(
                "invalid HTTP status line ({} bytes)",
                status_line.len()
            ))
        })?;
    Ok((minor, status))
}

/// The headers that decide framing and reuse; the others are ignored.
fn apply_header(head: &mut Head, minor: u8, name: &str, value: &str) -> Result<(), TransportError> {
    if name.eq_ignore_ascii_case("content-length") {
        let n = value
            .parse::<u64>()
            .map_err(|_| TransportError::Io("invalid Content-Length".into()))?;
        if head.content_length.is_some_and(|old| old != n) {
            return Err(TransportError::Io(
                "conflicting Content-Length headers".into(),
            ));
        }
        head.content_length = Some(n);
    } else if name.eq_ignore_ascii_case("transfer-encoding") {
        let last = value.rsplit(',').next().unwrap_or("").trim();
        if last.eq_ignore_ascii_case("chunked") {
            head.chunked = true;
        } else if !last.eq_ignore_ascii_case("identity") {
            return Err(TransportError::Io(format!(
                "unsupported Transfer-Encoding ({} bytes)",
                value.len()
            )));
        }
    } else if name.eq_ignore_ascii_case("connection") {
        for token in value.split(',') {
            let t = token.trim();
            if t.eq_ignore_ascii_case("close") {
                head.keep_alive = false;
            } else if t.eq_ignore_ascii_case("keep-alive") && minor == 0 {
                head.keep_alive = true;
            }
        }
    }
    Ok(())
}

/// Where a piece of the body goes.
type Deliver<'a> = dyn FnMut(&[u8]) -> Result<(), TransportError> + 'a;

/// Reads the body, handing pieces to `deliver`; returns whether the connection
/// is positioned at the end of the message (reusable).
fn read_body(
    conn: &mut Conn,
    framing: &Framing,
    deliver: &mut Deliver<'_>,
) -> Result<bool, TransportError> {
    match *framing {
        Framing::Empty => Ok(true),
        Framing::Length(n) => {
            if n > MAX_BODY_BYTES as u64 * 64 {
                return Err(TransportError::Io(format!(
                    "Content-Length {n} is too large"
                )));
            }
            read_exactly(conn, n, "connection closed inside response body", deliver)?;
            Ok(true)
        }
        Framing::UntilClose => loop {
            let piece = conn.read_some(READ_BUF)?;
            if piece.is_empty() {
                return Ok(false);
            }
            deliver(&piece)?;
        },
        Framing::Chunked => read_chunked(conn, deliver).map(|()| true),
    }
}

/// Hands the next `n` bytes to `deliver`; the connection closing first is
/// the error `closed`.
fn read_exactly(
    conn: &mut Conn,
    n: u64,
    closed: &str,
    deliver: &mut Deliver<'_>,
) -> Result<(), TransportError> {
    let mut left = n;
    while left > 0 {
        let piece = conn.read_some(left.min(READ_BUF as u64) as usize)?;
        if piece.is_empty() {
            return Err(TransportError::Io(closed.into()));
        }
        left -= piece.len() as u64;
        deliver(&piece)?;
    }
    Ok(())
}

/// A chunked body, through its last chunk and trailers.
fn read_chunked(conn: &mut Conn, deliver: &mut Deliver<'_>) -> Result<(), TransportError> {
    let mut line = Vec::new();
    loop {
        line.clear();
        if !conn.read_line_into(&mut line, MAX_CHUNK_LINE)? {
            return Err(TransportError::Io(
                "connection closed inside chunked body".into(),
            ));
        }
        let size = parse_chunk_size(&line)?;
        if size == 0 {
            return skip_trailers(conn);
        }
        read_exactly(conn, size, "connection closed inside a chunk", deliver)?;
        line.clear();
        if !conn.read_line_into(&mut line, 2)? || !(line == b"\r\n" || line == b"\n") {
            return Err(TransportError::Io("malformed chunk terminator".into()));
        }
    }
}

/// The trailers after the last chunk, up to the empty line (ignored).
fn skip_trailers(conn: &mut Conn) -> Result<(), TransportError> {
    let mut line = Vec::new();
    let mut trailer_bytes = 0usize;
    loop {
        line.clear();
        if !conn.read_line_into(&mut line, MAX_CHUNK_LINE)? {
            return Err(TransportError::Io(
                "connection closed inside chunked trailer".into(),
            ));
        }
        trailer_bytes += line.len();
        if trailer_bytes > MAX_HEADER_BYTES {
            return Err(TransportError::Io("chunked trailer too large".into()));
        }
        if line == b"\r\n" || line == b"\n" {
            return Ok(());
        }
    }
}

fn parse_chunk_size(line: &[u8]) -> Result<u64, TransportError> {
    let text = std::str::from_utf8(line)
        .map_err(|_| TransportError::Io("invalid chunk size line".into()))?;
    let digits = text.split(';').next().unwrap_or("").trim();
    if digits.is_empty() || digits.len() > 15 {
        return Err(TransportError::Io(format!(
            "invalid chunk size ({} bytes)",
            digits.len()
        )));
    }
    u64::from_str_radix(digits, 16)
        .map_err(|_| TransportError::Io(format!("invalid chunk size ({} bytes)", digits.len())))
}

/// A socket (plain or TLS) with a small read buffer and an optional overall deadline.
struct Conn {
    stream: Stream,
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    deadline: Option<Instant>,
}

impl Conn {
    fn new(stream: Stream, deadline: Option<Instant>) -> Self {
        Conn {
            stream,
            buf: vec![0u8; READ_BUF].into_boxed_slice(),
            start: 0,
            end: 0,
            deadline,
        }
    }

    /// Completes a fresh TLS connection's handshake (no-op for plain TCP and
    /// for TLS connections that already carried a request).
    fn handshake(&mut self, host: &str) -> Result<(), TransportError> {
        self.arm_timeout()?;
        self.stream.handshake(host)
    }

    fn buffered(&self) -> usize {
        self.end - self.start
    }

    fn arm_timeout(&self) -> Result<(), TransportError> {
        if let Some(d) = self.deadline {
            let left = d.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(TransportError::Timeout);
            }
            self.stream
                .tcp()
                .set_read_timeout(Some(left))
                .map_err(io_err)?;
            self.stream
                .tcp()
                .set_write_timeout(Some(left))
                .map_err(io_err)?;
        }
        Ok(())
    }

    fn write_all(&mut self, data: &[u8]) -> std::io::Result<()> {
        self.arm_timeout()
            .map_err(|e| std::io::Error::new(ErrorKind::TimedOut, e.to_string()))?;
        self.stream.write_all(data)?;
        self.stream.flush()
    }

    /// Refills the buffer; returns false at EOF.
    fn fill(&mut self) -> Result<bool, TransportError> {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
        self.arm_timeout()?;
        loop {
            match self.stream.read(&mut self.buf[self.end..]) {
                Ok(0) => return Ok(false),
                Ok(n) => {
                    self.end += n;
                    return Ok(true);
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(io_err(e)),
            }
        }
    }

    /// Appends one line (including its `\n`) to `out`; false at EOF before a
    /// full line. Fails when `out` would exceed `limit` bytes.
    fn read_line_into(&mut self, out: &mut Vec<u8>, limit: usize) -> Result<bool, TransportError> {
        loop {
            let avail = &self.buf[self.start..self.end];
            if let Some(i) = avail.iter().position(|&b| b == b'\n') {
                if out.len() + i + 1 > limit {
                    return Err(TransportError::Io(format!(
                        "response line or header block exceeds {limit} bytes"
                    )));
                }
                out.extend_from_slice(&avail[..=i]);
                self.start += i + 1;
                return Ok(true);
            }
            if out.len() + avail.len() > limit {
                return Err(TransportError::Io(format!(
                    "response line or header block exceeds {limit} bytes"
                )));
            }
            out.extend_from_slice(avail);
            self.start = self.end;
            if !self.fill()? {
                return Ok(false);
            }
        }
    }

    /// Up to `max` bytes (at least one unless EOF, then empty).
    fn read_some(&mut self, max: usize) -> Result<Vec<u8>, TransportError> {
        if self.start == self.end && !self.fill()? {
            return Ok(Vec::new());
        }
        let n = max.min(self.end - self.start);
        let piece = self.buf[self.start..self.start + n].to_vec();
        self.start += n;
        Ok(piece)
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tls_tests;
