//! TEST-ONLY: a fake lock machine speaking a toy HTTP protocol to a toy lock
//! server, used to test the DRIVER's mechanics (worker threads, streaming,
//! cancellation, timers, event routing). It implements no real backend; the
//! etcd machine is tested against real etcd elsewhere.
//!
//! Toy protocol: `POST /acquire/NAME` → 200 `TOKEN` or 409; `POST /watch/NAME`
//! (streamed) → one chunk `free\n` when NAME is free; `POST /renew/NAME/TOKEN`
//! and `POST /release/NAME/TOKEN` → 200 or 404; `GET /status/NAME` →
//! `held TOKEN` or `free`.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::Duration;

use crate::core::names::validate_name;
use crate::core::outbox::{earliest, Outbox};
use crate::core::*;

enum FakeOp {
    Acquire {
        name: String,
        wait: Wait,
        deadline: Option<Millis>,
        inflight: Option<RequestId>,
    },
    Release {
        lock: LockId,
    },
    Inspect {
        name: String,
    },
    Resume {
        handle: LockHandle,
    },
}

enum ReqKind {
    Acquire(OpId),
    Watch(OpId),
    Release(OpId),
    Inspect(OpId),
    Resume(OpId),
    Renew(LockId),
}

struct FakeLock {
    name: String,
    token: u64,
    renew_at: Option<Millis>,
}

pub(crate) struct FakeLockMachine {
    base: String,
    ttl_ms: u64,
    out: Outbox,
    ops: HashMap<OpId, FakeOp>,
    requests: HashMap<RequestId, ReqKind>,
    locks: HashMap<LockId, FakeLock>,
    closed: bool,
}

impl FakeLockMachine {
    pub(crate) fn new(base: String, ttl_ms: u64) -> Self {
        FakeLockMachine {
            base,
            ttl_ms,
            out: Outbox::default(),
            ops: HashMap::new(),
            requests: HashMap::new(),
            locks: HashMap::new(),
            closed: false,
        }
    }

    fn send(&mut self, kind: ReqKind, method: Method, path: String, stream: bool) -> RequestId {
        let id = self.out.request_id();
        self.requests.insert(id, kind);
        self.out.send(HttpRequest {
            id,
            method,
            target: Target::Url(format!("{}{path}", self.base)),
            headers: vec![],
            body: vec![],
            timeout_ms: Some(5_000),
            stream,
        });
        id
    }

    fn fail(&mut self, op: OpId, error: LockError) {
        self.ops.remove(&op);
        self.out.complete(op, Err(error));
    }

    fn transport(name: &str, e: &TransportError) -> LockError {
        LockError::Transport {
            backend: "etcd",
            name: name.to_string(),
            message: e.to_string(),
        }
    }

    fn start_acquire_request(&mut self, op: OpId) {
        let Some(FakeOp::Acquire { name, .. }) = self.ops.get(&op) else {
            return;
        };
        let path = format!("/acquire/{name}");
        let id = self.send(ReqKind::Acquire(op), Method::Post, path, false);
        if let Some(FakeOp::Acquire { inflight, .. }) = self.ops.get_mut(&op) {
            *inflight = Some(id);
        }
    }

    fn grant(&mut self, now: Millis, op: OpId, name: String, token: u64) {
        self.ops.remove(&op);
        let id = self.out.lock_id();
        self.locks.insert(
            id,
            FakeLock {
                name: name.clone(),
                token,
                renew_at: Some(now + self.ttl_ms / 3),
            },
        );
        let handle = LockHandle {
            v: 1,
            backend: BackendKind::Etcd,
            name: name.clone(),
            key: format!("fake/{name}"),
            owner: token.to_string(),
            fencing_token: token,
            revision: token,
            kind: crate::core::LockKind::Exclusive,
            slot: None,
        };
        let lock = LockInfo {
            id,
            name,
            fencing_token: token,
            expires_at: now + self.ttl_ms,
            handle,
        };
        self.out.complete(op, Ok(Outcome::Acquired(lock)));
    }

    fn on_final(
        &mut self,
        now: Millis,
        kind: ReqKind,
        result: Result<(u16, Vec<u8>), TransportError>,
    ) {
        match kind {
            ReqKind::Acquire(op) => {
                let Some(FakeOp::Acquire { name, wait, .. }) = self.ops.get(&op) else {
                    return;
                };
                let (name, wait) = (name.clone(), *wait);
                match result {
                    Ok((200, body)) => {
                        let token = String::from_utf8_lossy(&body).trim().parse().unwrap_or(0);
                        self.grant(now, op, name, token);
                    }
                    Ok((409, _)) if wait == Wait::Try => {
                        self.ops.remove(&op);
                        self.out.complete(op, Ok(Outcome::NotAcquired));
                    }
                    Ok((409, _)) => {
                        let id = self.send(
                            ReqKind::Watch(op),
                            Method::Post,
                            format!("/watch/{name}"),
                            true,
                        );
                        if let Some(FakeOp::Acquire { inflight, .. }) = self.ops.get_mut(&op) {
                            *inflight = Some(id);
                        }
                    }
                    Ok((status, _)) => self.fail(
                        op,
                        LockError::Backend {
                            backend: "etcd",
                            name,
                            status: Some(status),
                            message: "toy server error".into(),
                        },
                    ),
                    Err(e) => self.fail(op, Self::transport(&name, &e)),
                }
            }
            ReqKind::Watch(op) => {
                // The stream ended (after its `free` chunk, or early): check again.
                if matches!(self.ops.get(&op), Some(FakeOp::Acquire { .. })) {
                    self.start_acquire_request(op);
                }
            }
            ReqKind::Release(op) => {
                let Some(FakeOp::Release { lock }) = self.ops.remove(&op) else {
                    return;
                };
                let held = matches!(result, Ok((200, _)));
                self.out.complete(
                    op,
                    Ok(Outcome::Released {
                        lock,
                        held_until_release: held,
                    }),
                );
            }
            ReqKind::Inspect(op) => {
                let Some(FakeOp::Inspect { name }) = self.ops.remove(&op) else {
                    return;
                };
                match result {
                    Ok((200, body)) => {
                        let text = String::from_utf8_lossy(&body).to_string();
                        let token = text
                            .strip_prefix("held ")
                            .and_then(|t| t.trim().parse().ok());
                        let status = LockStatus {
                            name: name.clone(),
                            held: token.is_some(),
                            holder: token.map(|_| format!("fake/{name}")),
                            fencing_token: token,
                            remaining_ms: None,
                            waiters: vec![],
                            holders: token
                                .map(|t| crate::core::Holder {
                                    id: format!("fake/{name}"),
                                    fencing_token: Some(t),
                                    ..Default::default()
                                })
                                .into_iter()
                                .collect(),
                            ..Default::default()
                        };
                        self.out.complete(op, Ok(Outcome::Inspected(status)));
                    }
                    Ok((s, _)) => self.out.complete(
                        op,
                        Err(LockError::Backend {
                            backend: "etcd",
                            name,
                            status: Some(s),
                            message: "toy".into(),
                        }),
                    ),
                    Err(e) => self.out.complete(op, Err(Self::transport(&name, &e))),
                }
            }
            ReqKind::Resume(op) => {
                let Some(FakeOp::Resume { handle }) = self.ops.remove(&op) else {
                    return;
                };
                if matches!(result, Ok((200, _))) {
                    self.ops.insert(
                        op,
                        FakeOp::Resume {
                            handle: handle.clone(),
                        },
                    );
                    self.grant(now, op, handle.name, handle.fencing_token);
                } else {
                    let error = LockError::Lost {
                        backend: "etcd",
                        name: handle.name,
                        reason: "not held".into(),
                    };
                    self.out.complete(op, Err(error));
                }
            }
            ReqKind::Renew(id) => {
                let Some(lock) = self.locks.get_mut(&id) else {
                    return;
                };
                match result {
                    Ok((200, _)) => {
                        lock.renew_at = Some(now + self.ttl_ms / 3);
                        self.out.renewed(id, now + self.ttl_ms);
                    }
                    Ok(_) => {
                        let name = lock.name.clone();
                        self.locks.remove(&id);
                        self.out.lost(id, name, LostReason::KeyGone);
                    }
                    Err(e) => {
                        let name = lock.name.clone();
                        self.locks.remove(&id);
                        self.out
                            .lost(id, name, LostReason::RenewalFailed(e.to_string()));
                    }
                }
            }
        }
    }
}

impl FakeLockMachine {
    fn acquire(
        &mut self,
        now: Millis,
        name: &str,
        opts: &AcquireOptions,
    ) -> Result<OpId, LockError> {
        validate_name(name)?;
        if self.closed {
            return Err(LockError::Closed { backend: "etcd" });
        }
        let op = self.out.op_id();
        let deadline = opts.wait.deadline(now);
        self.ops.insert(
            op,
            FakeOp::Acquire {
                name: name.to_string(),
                wait: opts.wait,
                deadline,
                inflight: None,
            },
        );
        self.start_acquire_request(op);
        Ok(op)
    }

    fn release(&mut self, _now: Millis, lock: LockId) -> Result<OpId, LockError> {
        let l = self.locks.remove(&lock).ok_or(LockError::NotHeld {
            backend: "etcd",
            name: String::new(),
        })?;
        let op = self.out.op_id();
        self.ops.insert(op, FakeOp::Release { lock });
        self.send(
            ReqKind::Release(op),
            Method::Post,
            format!("/release/{}/{}", l.name, l.token),
            false,
        );
        Ok(op)
    }

    fn extend(
        &mut self,
        now: Millis,
        lock: LockId,
        ttl_ms: Option<u64>,
    ) -> Result<OpId, LockError> {
        if !self.locks.contains_key(&lock) {
            return Err(LockError::NotHeld {
                backend: "etcd",
                name: String::new(),
            });
        }
        let op = self.out.op_id();
        self.out.complete(
            op,
            Ok(Outcome::Extended {
                lock,
                expires_at: now + ttl_ms.unwrap_or(self.ttl_ms),
            }),
        );
        Ok(op)
    }

    fn resume(&mut self, _now: Millis, handle: &LockHandle) -> Result<OpId, LockError> {
        let op = self.out.op_id();
        self.ops.insert(
            op,
            FakeOp::Resume {
                handle: handle.clone(),
            },
        );
        let path = format!("/renew/{}/{}", handle.name, handle.fencing_token);
        self.send(ReqKind::Resume(op), Method::Post, path, false);
        Ok(op)
    }

    fn inspect(&mut self, _now: Millis, name: &str) -> Result<OpId, LockError> {
        validate_name(name)?;
        let op = self.out.op_id();
        self.ops.insert(
            op,
            FakeOp::Inspect {
                name: name.to_string(),
            },
        );
        self.send(
            ReqKind::Inspect(op),
            Method::Get,
            format!("/status/{name}"),
            false,
        );
        Ok(op)
    }
}

impl LockMachine for FakeLockMachine {
    fn backend(&self) -> BackendKind {
        BackendKind::Etcd
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            kinds: Capabilities::EXCLUSIVE_ONLY,
            atomic_sets: false,
        }
    }

    fn live_count(&self) -> usize {
        self.ops.len() + self.locks.len()
    }

    fn start_operation(&mut self, now: Millis, op: Operation) -> Result<OpId, LockError> {
        match op {
            Operation::Acquire { name, options, .. } => self.acquire(now, &name, &options),
            Operation::Release { lock } => self.release(now, lock),
            Operation::Extend { lock, ttl_ms } => self.extend(now, lock, ttl_ms),
            Operation::Resume { handle } => self.resume(now, &handle),
            Operation::Inspect { name } => self.inspect(now, &name),
            op => Err(crate::core::operation::unserved(BackendKind::Etcd, &op)),
        }
    }

    fn cancel(&mut self, _now: Millis, op: OpId) {
        if let Some(FakeOp::Acquire { name, inflight, .. }) = self.ops.get(&op) {
            let (name, inflight) = (name.clone(), *inflight);
            if let Some(id) = inflight {
                self.requests.remove(&id);
                self.out.cancel(id);
            }
            self.fail(
                op,
                LockError::Aborted {
                    backend: "etcd",
                    name,
                },
            );
        }
    }

    fn close(&mut self, _now: Millis) -> OpId {
        self.closed = true;
        for id in self.requests.keys().copied().collect::<Vec<_>>() {
            self.out.cancel(id);
        }
        self.requests.clear();
        for (op, _) in self.ops.drain() {
            self.out
                .complete(op, Err(LockError::Closed { backend: "etcd" }));
        }
        for (_, l) in self.locks.drain() {
            // Fire-and-forget release; the answer arrives for an unknown id.
            let id = self.out.request_id();
            self.out.send(HttpRequest {
                id,
                method: Method::Post,
                target: Target::Url(format!("{}/release/{}/{}", self.base, l.name, l.token)),
                headers: vec![],
                body: vec![],
                timeout_ms: Some(5_000),
                stream: false,
            });
        }
        let op = self.out.op_id();
        self.out.complete(op, Ok(Outcome::Closed));
        op
    }

    fn handle_input(&mut self, now: Millis, input: Input) {
        let id = input.id();
        match input {
            // The watch's `free` chunk: act on StreamEnd. etcd opens no stream.
            Input::Opened { .. } | Input::Chunk { .. } => {}
            Input::Response { status, body, .. } => {
                if let Some(kind) = self.requests.remove(&id) {
                    self.on_final(now, kind, Ok((status, body)));
                }
            }
            Input::StreamEnd { .. } => {
                if let Some(kind) = self.requests.remove(&id) {
                    self.on_final(now, kind, Ok((200, vec![])));
                }
            }
            Input::Failed { error, .. } => {
                if let Some(kind) = self.requests.remove(&id) {
                    self.on_final(now, kind, Err(error));
                }
            }
        }
    }

    fn handle_timeout(&mut self, now: Millis) {
        let expired: Vec<OpId> = self
            .ops
            .iter()
            .filter_map(|(op, o)| match o {
                FakeOp::Acquire {
                    deadline: Some(d), ..
                } if *d <= now => Some(*op),
                _ => None,
            })
            .collect();
        for op in expired {
            if let Some(FakeOp::Acquire { name, inflight, .. }) = self.ops.remove(&op) {
                if let Some(id) = inflight {
                    self.requests.remove(&id);
                    self.out.cancel(id);
                }
                self.out.complete(
                    op,
                    Err(LockError::Timeout {
                        backend: "etcd",
                        name,
                    }),
                );
            }
        }
        let due: Vec<LockId> = self
            .locks
            .iter()
            .filter(|(_, l)| l.renew_at.is_some_and(|t| t <= now))
            .map(|(id, _)| *id)
            .collect();
        for id in due {
            if let Some(l) = self.locks.get_mut(&id) {
                l.renew_at = None; // until the renewal answers
                let path = format!("/renew/{}/{}", l.name, l.token);
                self.send(ReqKind::Renew(id), Method::Post, path, false);
            }
        }
    }

    fn poll_transmit(&mut self) -> Option<Transmit> {
        self.out.poll_transmit()
    }

    fn poll_event(&mut self) -> Option<Event> {
        self.out.poll_event()
    }

    fn poll_timeout(&self) -> Option<Millis> {
        let deadlines = self.ops.values().map(|o| match o {
            FakeOp::Acquire { deadline, .. } => *deadline,
            _ => None,
        });
        earliest(deadlines.chain(self.locks.values().map(|l| l.renew_at)))
    }
}

/// TEST-ONLY toy lock server on loopback (see the module doc).
pub(crate) struct ToyServer {
    pub addr: SocketAddr,
    shared: Arc<ToyShared>,
}

#[derive(Default)]
struct ToyShared {
    state: Mutex<ToyState>,
    changed: Condvar,
    connections: AtomicUsize,
    requests: AtomicUsize,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    /// Watches whose client went away before the lock became free.
    watch_aborts: AtomicUsize,
}

#[derive(Default)]
struct ToyState {
    holders: HashMap<String, u64>,
    next_token: u64,
    acquire_delay: Duration,
}

impl ToyServer {
    pub(crate) fn start() -> ToyServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let addr = listener.local_addr().expect("local addr");
        let shared = Arc::new(ToyShared::default());
        let s = shared.clone();
        thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { return };
                s.connections.fetch_add(1, Ordering::SeqCst);
                let s = s.clone();
                thread::spawn(move || serve(&s, conn));
            }
        });
        ToyServer { addr, shared }
    }

    pub(crate) fn base(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub(crate) fn holder(&self, name: &str) -> Option<u64> {
        self.shared.state.lock().unwrap().holders.get(name).copied()
    }

    /// Forgets a holder, as if its lease had expired.
    pub(crate) fn revoke(&self, name: &str) {
        self.shared.state.lock().unwrap().holders.remove(name);
        self.shared.changed.notify_all();
    }

    pub(crate) fn set_acquire_delay(&self, d: Duration) {
        self.shared.state.lock().unwrap().acquire_delay = d;
    }

    pub(crate) fn connections(&self) -> usize {
        self.shared.connections.load(Ordering::SeqCst)
    }
    pub(crate) fn requests(&self) -> usize {
        self.shared.requests.load(Ordering::SeqCst)
    }
    pub(crate) fn max_in_flight(&self) -> usize {
        self.shared.max_in_flight.load(Ordering::SeqCst)
    }
    pub(crate) fn watch_aborts(&self) -> usize {
        self.shared.watch_aborts.load(Ordering::SeqCst)
    }
}

fn serve(s: &ToyShared, conn: TcpStream) {
    let Ok(read_half) = conn.try_clone() else {
        return;
    };
    let mut r = BufReader::new(read_half);
    let mut w = conn;
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut parts = line.split_whitespace();
        let (method, path) = (
            parts.next().unwrap_or("").to_string(),
            parts.next().unwrap_or("").to_string(),
        );
        let mut len = 0usize;
        loop {
            let mut h = String::new();
            if r.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            if h == "\r\n" {
                break;
            }
            if let Some(v) = h.strip_prefix("Content-Length: ") {
                len = v.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0u8; len];
        if r.read_exact(&mut body).is_err() {
            return;
        }
        s.requests.fetch_add(1, Ordering::SeqCst);
        let now = s.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        s.max_in_flight.fetch_max(now, Ordering::SeqCst);
        let keep = route(s, &method, &path, &mut w);
        s.in_flight.fetch_sub(1, Ordering::SeqCst);
        if !keep {
            return;
        }
    }
}

fn reply(w: &mut TcpStream, status: u16, body: &str) -> bool {
    let head = format!(
        "HTTP/1.1 {status} X\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    w.write_all(head.as_bytes()).is_ok()
}

fn route(s: &ToyShared, method: &str, path: &str, w: &mut TcpStream) -> bool {
    let seg: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match (method, seg.as_slice()) {
        ("POST", ["acquire", name]) => {
            let delay = s.state.lock().unwrap().acquire_delay;
            thread::sleep(delay);
            let mut st = s.state.lock().unwrap();
            if st.holders.contains_key(*name) {
                return reply(w, 409, "busy");
            }
            st.next_token += 1;
            let t = st.next_token;
            st.holders.insert(name.to_string(), t);
            reply(w, 200, &t.to_string())
        }
        ("POST", [op @ ("renew" | "release"), name, token]) => {
            let mut st = s.state.lock().unwrap();
            let ours = st.holders.get(*name).map(|t| t.to_string()) == Some(token.to_string());
            if ours && *op == "release" {
                st.holders.remove(*name);
                s.changed.notify_all();
            }
            reply(w, if ours { 200 } else { 404 }, "")
        }
        ("GET", ["status", name]) => {
            let st = s.state.lock().unwrap();
            match st.holders.get(*name) {
                Some(t) => reply(w, 200, &format!("held {t}")),
                None => reply(w, 200, "free"),
            }
        }
        ("POST", ["watch", name]) => {
            if w.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                .is_err()
            {
                return false;
            }
            let mut st = s.state.lock().unwrap();
            while st.holders.contains_key(*name) {
                st = s
                    .changed
                    .wait_timeout(st, Duration::from_millis(20))
                    .unwrap()
                    .0;
                if client_gone(w) {
                    s.watch_aborts.fetch_add(1, Ordering::SeqCst);
                    return false;
                }
            }
            drop(st);
            w.write_all(b"5\r\nfree\n\r\n0\r\n\r\n").is_ok()
        }
        _ => reply(w, 400, "bad request"),
    }
}

/// True when the client closed (or shut down) its side of the connection.
fn client_gone(w: &TcpStream) -> bool {
    if w.set_nonblocking(true).is_err() {
        return true;
    }
    let mut b = [0u8; 1];
    let gone = match w.peek(&mut b) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() != ErrorKind::WouldBlock,
    };
    let _ = w.set_nonblocking(false);
    gone
}

/// TEST-ONLY: a [`FakeLockMachine`] with one deliberate fault, for the
/// drivers' failure paths: a bug (it panics on inspect) or a machine that
/// cannot abort an acquire (as when its request was already applied, so a
/// dropped acquire still completes with a grant).
pub(crate) struct Faulty {
    inner: FakeLockMachine,
    panic_on_inspect: bool,
    ignore_cancel: bool,
}

impl Faulty {
    pub(crate) fn panics_on_inspect(inner: FakeLockMachine) -> Self {
        Faulty {
            inner,
            panic_on_inspect: true,
            ignore_cancel: false,
        }
    }
    pub(crate) fn ignores_cancel(inner: FakeLockMachine) -> Self {
        Faulty {
            inner,
            panic_on_inspect: false,
            ignore_cancel: true,
        }
    }
}

impl LockMachine for Faulty {
    fn backend(&self) -> crate::core::BackendKind {
        self.inner.backend()
    }
    fn capabilities(&self) -> crate::core::Capabilities {
        self.inner.capabilities()
    }
    fn start_operation(&mut self, now: u64, op: Operation) -> Result<OpId, LockError> {
        if self.panic_on_inspect && matches!(op, Operation::Inspect { .. }) {
            panic!("deliberate machine bug (test)")
        }
        self.inner.start_operation(now, op)
    }
    fn cancel(&mut self, now: u64, op: OpId) {
        if !self.ignore_cancel {
            self.inner.cancel(now, op)
        }
    }
    fn close(&mut self, now: u64) -> OpId {
        self.inner.close(now)
    }
    fn handle_input(&mut self, now: u64, i: crate::core::Input) {
        self.inner.handle_input(now, i)
    }
    fn handle_timeout(&mut self, now: u64) {
        self.inner.handle_timeout(now)
    }
    fn poll_transmit(&mut self) -> Option<crate::core::Transmit> {
        self.inner.poll_transmit()
    }
    fn poll_event(&mut self) -> Option<crate::core::Event> {
        self.inner.poll_event()
    }
    fn poll_timeout(&self) -> Option<u64> {
        self.inner.poll_timeout()
    }
    fn live_count(&self) -> usize {
        self.inner.live_count()
    }
}

/// TEST-ONLY: polls `cond` for up to 5 s, then fails naming `what`.
pub(crate) fn eventually(what: &str, cond: impl Fn() -> bool) {
    let t = std::time::Instant::now();
    while t.elapsed() < Duration::from_secs(5) {
        if cond() {
            return;
        }
        thread::sleep(Duration::from_millis(10));
    }
    panic!("timed out waiting for: {what}");
}
