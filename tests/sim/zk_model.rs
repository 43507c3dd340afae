//! An in-memory ZooKeeper ensemble that speaks the client protocol's bytes
//! on the world's byte streams (tests/sim/stream.rs), for tests/sim_zk.rs.
//!
//! Written from the protocol (jute records of `zookeeper.jute`, 3.8), not
//! from the crate's own codec (`src/core/zookeeper/fake.rs` is private to
//! the crate): a frame is `[len: i32 BE][body]`; the first frame of a
//! connection is a `ConnectRequest`, later ones a `RequestHeader` and its
//! record; replies a `ReplyHeader` (xid, zxid, err) and, on success, the
//! response record; notifications carry xid −1.
//!
//! What it keeps: a data tree (persistent, ephemeral, sequential and
//! container nodes, `Stat` with czxid/mzxid/version/cversion/ephemeralOwner),
//! sessions that outlive connections (a reconnect with the session id and
//! password moves the session; an unknown or expired one is answered with a
//! timeout of 0), one-shot data and child watches, and the ContainerManager
//! (an empty container that once had children goes after
//! [`CONTAINER_CHECK_MS`]).
//!
//! Its clock is the world's. A session expires [`ZkModel::timeout_ms`]
//! after the last packet the server *received* on it: the earliest a real
//! server may (its ticks only ever make it later), so the model is the most
//! eager expirer a client must survive. A connection whose session expired
//! or moved on is dead: the server reads nothing more from it and writes
//! nothing to it (a real server closes it; the client's read deadline ends
//! it either way). Bytes that are no protocol are a contract violation,
//! recorded in [`ZkModel::violations`].

#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};

use edgelock::core::{HttpRequest, Millis, RequestId};

use super::net::{Reply, SimServer};

/// ContainerManager's check interval (the tests' real servers use 100 ms).
pub const CONTAINER_CHECK_MS: Millis = 100;

/// Op codes (`ZooDefs.OpCode`).
pub mod op {
    pub const CREATE: i32 = 1;
    pub const DELETE: i32 = 2;
    pub const EXISTS: i32 = 3;
    pub const GET_DATA: i32 = 4;
    pub const SET_DATA: i32 = 5;
    pub const GET_CHILDREN: i32 = 8;
    pub const SYNC: i32 = 9;
    pub const PING: i32 = 11;
    pub const GET_CHILDREN2: i32 = 12;
    pub const CHECK: i32 = 13;
    pub const MULTI: i32 = 14;
    pub const CREATE2: i32 = 15;
    pub const CREATE_CONTAINER: i32 = 19;
    pub const AUTH: i32 = 100;
    pub const CLOSE_SESSION: i32 = -11;
}

/// Error codes (`KeeperException.Code`).
pub mod err {
    pub const OK: i32 = 0;
    pub const MARSHALLING: i32 = -5;
    pub const UNIMPLEMENTED: i32 = -6;
    pub const NO_NODE: i32 = -101;
    pub const BAD_VERSION: i32 = -103;
    pub const NO_CHILDREN_FOR_EPHEMERALS: i32 = -108;
    pub const NODE_EXISTS: i32 = -110;
    pub const NOT_EMPTY: i32 = -111;
    pub const BAD_ARGUMENTS: i32 = -8;
}

/// Watch event types (`Watcher.Event.EventType`).
pub mod event {
    pub const NODE_CREATED: i32 = 1;
    pub const NODE_DELETED: i32 = 2;
    pub const NODE_DATA_CHANGED: i32 = 3;
    pub const NODE_CHILDREN_CHANGED: i32 = 4;
}

/// `SyncConnected` (`Watcher.Event.KeeperState`).
const SYNC_CONNECTED: i32 = 3;

/// `CreateMode` flags: bit 0 ephemeral, bit 1 sequential, 4 container.
const EPHEMERAL: i32 = 1;
const SEQUENTIAL: i32 = 2;
const CONTAINER: i32 = 4;

/// A node's `Stat` (the fields the recipes and the checks read).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stat {
    pub czxid: i64,
    pub mzxid: i64,
    pub version: i32,
    pub cversion: i32,
    pub ephemeral_owner: i64,
    pub data_length: i32,
    pub num_children: i32,
    pub pzxid: i64,
}

#[derive(Clone, Debug)]
pub struct Node {
    pub data: Vec<u8>,
    pub stat: Stat,
    pub container: bool,
}

#[derive(Clone, Debug)]
pub struct Session {
    pub id: i64,
    pub passwd: Vec<u8>,
    pub timeout_ms: Millis,
    /// Global time of the last packet received on it.
    pub last_heard: Millis,
    /// The connection it is bound to now (a wire id).
    pub conn: Option<u64>,
}

/// One connection as the server sees it.
#[derive(Debug, Default)]
struct Conn {
    client: usize,
    buf: Vec<u8>,
    session: Option<i64>,
    /// Expired, moved or broken by bad bytes: nothing more is read.
    dead: bool,
}

/// Who watches what (one-shot).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum WatchKind {
    Data,
    Child,
}

/// A parsed request: the path-and-watch reads share one shape.
struct Request {
    xid: i32,
    op: i32,
}

pub struct ZkModel {
    pub nodes: BTreeMap<String, Node>,
    pub zxid: i64,
    pub sessions: HashMap<i64, Session>,
    conns: HashMap<u64, Conn>,
    watches: Vec<(String, WatchKind, i64)>,
    /// Empty containers to look at again: (when, path).
    container_checks: Vec<(Millis, String)>,
    /// Bytes for connections (notifications), drained by the world.
    out: Vec<(RequestId, Vec<u8>)>,
    next_session: i64,
    /// The server's bounds on a session timeout: [2, 20] × tickTime.
    pub tick_ms: Millis,
    pub violations: Vec<String>,
    /// Sessions that expired (id, at), and requests served.
    pub expired: Vec<(i64, Millis)>,
    pub requests: u64,
    pub containers_removed: u64,
    /// The czxid of every ephemeral lock node ever created, by parent.
    pub created: Vec<(String, i64)>,
}

impl ZkModel {
    pub fn new(tick_ms: Millis, first_session: i64) -> Self {
        let mut nodes = BTreeMap::new();
        nodes.insert(
            "/".to_string(),
            Node {
                data: Vec::new(),
                stat: Stat::default(),
                container: false,
            },
        );
        ZkModel {
            nodes,
            zxid: 0x1_0000_0000,
            sessions: HashMap::new(),
            conns: HashMap::new(),
            watches: Vec::new(),
            container_checks: Vec::new(),
            out: Vec::new(),
            next_session: first_session,
            tick_ms,
            violations: Vec::new(),
            expired: Vec::new(),
            requests: 0,
            containers_removed: 0,
            created: Vec::new(),
        }
    }

    /// The children of `dir` (names), sorted.
    pub fn children(&self, dir: &str) -> Vec<String> {
        let prefix = if dir == "/" {
            "/".to_string()
        } else {
            format!("{dir}/")
        };
        self.nodes
            .range(prefix.clone()..)
            .take_while(|(k, _)| k.starts_with(&prefix))
            .filter_map(|(k, _)| k.strip_prefix(&prefix))
            .filter(|rest| !rest.is_empty() && !rest.contains('/'))
            .map(str::to_string)
            .collect()
    }

    /// Ephemeral nodes, as (path, stat).
    pub fn ephemerals(&self) -> Vec<(String, Stat)> {
        self.nodes
            .iter()
            .filter(|(_, n)| n.stat.ephemeral_owner != 0)
            .map(|(p, n)| (p.clone(), n.stat))
            .collect()
    }

    pub fn watch_count(&self) -> usize {
        self.watches.len()
    }

    fn violation(&mut self, conn: u64, why: String) {
        self.violations.push(format!("connection {conn}: {why}"));
        if let Some(c) = self.conns.get_mut(&conn) {
            c.dead = true;
        }
    }

    /// Frames out of a connection's buffer (complete ones only).
    fn frames(&mut self, conn: u64) -> Result<Vec<Vec<u8>>, String> {
        let Some(c) = self.conns.get_mut(&conn) else {
            return Ok(Vec::new());
        };
        let mut frames = Vec::new();
        while c.buf.len() >= 4 {
            let len = i32::from_be_bytes(c.buf[..4].try_into().unwrap());
            if !(0..=0xfffff).contains(&len) {
                return Err(format!("frame length {len}"));
            }
            let len = len as usize;
            if c.buf.len() < 4 + len {
                break;
            }
            frames.push(c.buf[4..4 + len].to_vec());
            c.buf.drain(..4 + len);
        }
        Ok(frames)
    }

    fn on_frame(&mut self, now: Millis, conn: u64, frame: &[u8]) -> Result<Vec<u8>, String> {
        let Some(c) = self.conns.get(&conn) else {
            return Ok(Vec::new());
        };
        match c.session {
            None => self.on_connect(now, conn, frame),
            Some(s) => {
                if let Some(sess) = self.sessions.get_mut(&s) {
                    sess.last_heard = now;
                }
                self.on_request(now, conn, s, frame)
            }
        }
    }

    /// `ConnectRequest`: a new session, or the old one moved here, or
    /// (unknown, expired, wrong password) a timeout of 0.
    fn on_connect(&mut self, now: Millis, conn: u64, frame: &[u8]) -> Result<Vec<u8>, String> {
        let mut r = Jr::new(frame);
        let _protocol = r.int()?;
        let _last_zxid = r.long()?;
        let requested = r.int()?;
        let session_id = r.long()?;
        let passwd = r.buffer()?.unwrap_or_default();
        if r.left() > 1 {
            return Err(format!("{} bytes after the ConnectRequest", r.left()));
        }
        let timeout = (requested.max(0) as Millis).clamp(2 * self.tick_ms, 20 * self.tick_ms);
        let (id, timeout, pw) = if session_id == 0 {
            self.next_session += 1;
            let id = self.next_session;
            let pw: Vec<u8> = (0..16)
                .map(|i| (id as u8).wrapping_mul(31).wrapping_add(i))
                .collect();
            self.sessions.insert(
                id,
                Session {
                    id,
                    passwd: pw.clone(),
                    timeout_ms: timeout,
                    last_heard: now,
                    conn: None,
                },
            );
            (id, timeout, pw)
        } else {
            match self.sessions.get(&session_id) {
                Some(s) if s.passwd == passwd => (session_id, s.timeout_ms, s.passwd.clone()),
                _ => (0, 0, vec![0; 16]),
            }
        };
        let mut w = Jw::default();
        w.int(0);
        w.int(timeout as i32);
        w.long(id);
        w.buffer(Some(&pw));
        w.boolean(false);
        if timeout > 0 {
            let old = self.sessions.get(&id).and_then(|s| s.conn);
            if let Some(old) = old.filter(|o| *o != conn) {
                // The session moved: the old connection is done.
                if let Some(c) = self.conns.get_mut(&old) {
                    c.dead = true;
                }
            }
            let s = self.sessions.get_mut(&id).expect("just found or made");
            s.conn = Some(conn);
            s.last_heard = now;
            if let Some(c) = self.conns.get_mut(&conn) {
                c.session = Some(id);
            }
        } else if let Some(c) = self.conns.get_mut(&conn) {
            // A real server closes it after the answer.
            c.dead = true;
        }
        Ok(frame_of(&w.0))
    }

    fn on_request(
        &mut self,
        now: Millis,
        conn: u64,
        session: i64,
        frame: &[u8],
    ) -> Result<Vec<u8>, String> {
        let mut r = Jr::new(frame);
        let req = Request {
            xid: r.int()?,
            op: r.int()?,
        };
        self.requests += 1;
        let mut body = Jw::default();
        let code = match req.op {
            op::PING => return Ok(reply(req.xid, self.zxid, err::OK, &[])),
            op::AUTH => {
                let _type = r.int()?;
                let _scheme = r.ustring()?;
                let _auth = r.buffer()?;
                return Ok(reply(req.xid, self.zxid, err::OK, &[]));
            }
            op::CLOSE_SESSION => {
                let out = reply(req.xid, self.zxid + 1, err::OK, &[]);
                self.end_session(now, session);
                return Ok(out);
            }
            op::CREATE | op::CREATE2 | op::CREATE_CONTAINER => {
                self.create(now, req.op, session, &mut r, &mut body)?
            }
            op::DELETE => {
                let path = r.path()?;
                let version = r.int()?;
                self.delete(now, &path, version)
            }
            op::EXISTS | op::GET_DATA | op::GET_CHILDREN | op::GET_CHILDREN2 => {
                let path = r.path()?;
                let watch = r.boolean()?;
                self.read(req.op, &path, watch, session, &mut body)
            }
            op::SET_DATA => {
                let path = r.path()?;
                let data = r.buffer()?.unwrap_or_default();
                let version = r.int()?;
                self.set_data(&path, data, version, &mut body)
            }
            op::SYNC => {
                let path = r.path()?;
                body.ustring(&path);
                err::OK
            }
            other => return Err(format!("op {other} the model does not serve")),
        };
        if r.left() != 0 {
            return Err(format!("{} bytes after op {}'s record", r.left(), req.op));
        }
        let body = if code == err::OK { body.0 } else { Vec::new() };
        let _ = conn;
        Ok(reply(req.xid, self.zxid, code, &body))
    }

    fn create(
        &mut self,
        now: Millis,
        op_code: i32,
        session: i64,
        r: &mut Jr<'_>,
        body: &mut Jw,
    ) -> Result<i32, String> {
        let path = r.path()?;
        let data = r.buffer()?.unwrap_or_default();
        let acls = r.int()?;
        if !(0..=16).contains(&acls) {
            return Err(format!("{acls} ACLs"));
        }
        for _ in 0..acls {
            let _perms = r.int()?;
            let _scheme = r.ustring()?;
            let _id = r.ustring()?;
        }
        let flags = r.int()?;
        if op_code == op::CREATE_CONTAINER && flags != CONTAINER {
            return Err(format!("createContainer with flags {flags}"));
        }
        if path == "/" {
            return Ok(err::NODE_EXISTS);
        }
        let parent = parent_of(&path).to_string();
        let Some(p) = self.nodes.get(&parent) else {
            return Ok(err::NO_NODE);
        };
        if p.stat.ephemeral_owner != 0 {
            return Ok(err::NO_CHILDREN_FOR_EPHEMERALS);
        }
        let full = if flags & SEQUENTIAL != 0 {
            format!("{path}{:010}", p.stat.cversion)
        } else {
            path
        };
        if self.nodes.contains_key(&full) {
            return Ok(err::NODE_EXISTS);
        }
        self.zxid += 1;
        let zxid = self.zxid;
        let p = self.nodes.get_mut(&parent).expect("checked above");
        p.stat.cversion += 1;
        p.stat.num_children += 1;
        p.stat.pzxid = zxid;
        let ephemeral = flags & EPHEMERAL != 0;
        let stat = Stat {
            czxid: zxid,
            mzxid: zxid,
            ephemeral_owner: if ephemeral { session } else { 0 },
            data_length: data.len() as i32,
            pzxid: zxid,
            ..Stat::default()
        };
        if ephemeral {
            self.created.push((parent.clone(), zxid));
        }
        self.nodes.insert(
            full.clone(),
            Node {
                data,
                stat,
                container: flags & CONTAINER != 0,
            },
        );
        self.fire(&full, WatchKind::Data, event::NODE_CREATED);
        self.fire(&parent, WatchKind::Child, event::NODE_CHILDREN_CHANGED);
        body.ustring(&full);
        if op_code != op::CREATE {
            write_stat(body, &stat);
        }
        let _ = now;
        Ok(err::OK)
    }

    fn delete(&mut self, now: Millis, path: &str, version: i32) -> i32 {
        let Some(n) = self.nodes.get(path) else {
            return err::NO_NODE;
        };
        if path == "/" {
            return err::BAD_ARGUMENTS;
        }
        if version != -1 && version != n.stat.version {
            return err::BAD_VERSION;
        }
        if n.stat.num_children > 0 {
            return err::NOT_EMPTY;
        }
        self.remove(now, path);
        err::OK
    }

    /// Removes a childless node, firing its watches and its parent's.
    fn remove(&mut self, now: Millis, path: &str) {
        self.nodes.remove(path);
        self.zxid += 1;
        let parent = parent_of(path).to_string();
        if let Some(p) = self.nodes.get_mut(&parent) {
            p.stat.num_children -= 1;
            p.stat.pzxid = self.zxid;
            if p.container && p.stat.num_children == 0 {
                self.container_checks
                    .push((now + CONTAINER_CHECK_MS, parent.clone()));
            }
        }
        self.fire(path, WatchKind::Data, event::NODE_DELETED);
        self.fire(path, WatchKind::Child, event::NODE_DELETED);
        self.fire(&parent, WatchKind::Child, event::NODE_CHILDREN_CHANGED);
    }

    fn read(&mut self, op_code: i32, path: &str, watch: bool, session: i64, body: &mut Jw) -> i32 {
        let kind = match op_code {
            op::GET_CHILDREN | op::GET_CHILDREN2 => WatchKind::Child,
            _ => WatchKind::Data,
        };
        let Some(node) = self.nodes.get(path).cloned() else {
            // exists sets a watch on a missing node (for its creation).
            if watch && op_code == op::EXISTS {
                self.add_watch(path, kind, session);
            }
            return err::NO_NODE;
        };
        if watch {
            self.add_watch(path, kind, session);
        }
        match op_code {
            op::EXISTS => write_stat(body, &node.stat),
            op::GET_DATA => {
                body.buffer(Some(&node.data));
                write_stat(body, &node.stat);
            }
            _ => {
                // Unordered on a real server: hand them out reversed.
                let mut kids = self.children(path);
                kids.reverse();
                body.int(kids.len() as i32);
                for k in &kids {
                    body.ustring(k);
                }
                if op_code == op::GET_CHILDREN2 {
                    write_stat(body, &node.stat);
                }
            }
        }
        err::OK
    }

    fn set_data(&mut self, path: &str, data: Vec<u8>, version: i32, body: &mut Jw) -> i32 {
        let Some(n) = self.nodes.get_mut(path) else {
            return err::NO_NODE;
        };
        if version != -1 && version != n.stat.version {
            return err::BAD_VERSION;
        }
        self.zxid += 1;
        n.stat.version += 1;
        n.stat.mzxid = self.zxid;
        n.stat.data_length = data.len() as i32;
        n.data = data;
        let stat = n.stat;
        write_stat(body, &stat);
        self.fire(path, WatchKind::Data, event::NODE_DATA_CHANGED);
        err::OK
    }

    fn add_watch(&mut self, path: &str, kind: WatchKind, session: i64) {
        let w = (path.to_string(), kind, session);
        if !self.watches.contains(&w) {
            self.watches.push(w);
        }
    }

    /// One-shot: the watches of `kind` on `path` fire and are gone.
    fn fire(&mut self, path: &str, kind: WatchKind, event_type: i32) {
        let (fired, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.watches)
            .into_iter()
            .partition(|(p, k, _)| p == path && *k == kind);
        self.watches = kept;
        for (_, _, s) in fired {
            let Some(conn) = self.sessions.get(&s).and_then(|s| s.conn) else {
                continue;
            };
            if self.conns.get(&conn).map_or(true, |c| c.dead) {
                continue;
            }
            let mut w = Jw::default();
            w.int(event_type);
            w.int(SYNC_CONNECTED);
            w.ustring(path);
            self.out
                .push((RequestId(conn), reply(-1, -1, err::OK, &w.0)));
        }
    }

    /// closeSession or expiry: its ephemeral nodes go, its watches too.
    fn end_session(&mut self, now: Millis, session: i64) {
        if let Some(s) = self.sessions.remove(&session) {
            if let Some(c) = s.conn.and_then(|c| self.conns.get_mut(&c)) {
                c.dead = true;
            }
        }
        self.watches.retain(|(_, _, s)| *s != session);
        let gone: Vec<String> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.stat.ephemeral_owner == session)
            .map(|(p, _)| p.clone())
            .collect();
        for p in gone {
            self.remove(now, &p);
        }
    }
}

impl SimServer for ZkModel {
    fn handle(&mut self, _now: Millis, req: &HttpRequest) -> Reply {
        self.violations
            .push(format!("an HTTP request to ZooKeeper: {:?}", req.target));
        Reply::NoReply
    }

    fn drain_stream_chunks(&mut self, _now: Millis) -> Vec<(RequestId, Vec<u8>)> {
        std::mem::take(&mut self.out)
    }

    /// The connection is gone; its session lives on until it expires.
    fn stream_closed(&mut self, id: RequestId) {
        self.conns.remove(&id.0);
        self.out.retain(|(w, _)| *w != id);
        for s in self.sessions.values_mut() {
            if s.conn == Some(id.0) {
                s.conn = None;
            }
        }
    }

    fn advance(&mut self, now: Millis) {
        let due: Vec<i64> = self
            .sessions
            .values()
            .filter(|s| s.last_heard + s.timeout_ms <= now)
            .map(|s| s.id)
            .collect();
        for id in due {
            self.expired.push((id, now));
            self.end_session(now, id);
        }
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.container_checks)
            .into_iter()
            .partition(|(at, _)| *at <= now);
        self.container_checks = later;
        for (_, path) in due {
            let empty = self
                .nodes
                .get(&path)
                .is_some_and(|n| n.container && n.stat.num_children == 0);
            if empty {
                self.containers_removed += 1;
                self.remove(now, &path);
            }
        }
    }

    fn next_deadline(&self) -> Option<Millis> {
        let sessions = self.sessions.values().map(|s| s.last_heard + s.timeout_ms);
        let containers = self.container_checks.iter().map(|(at, _)| *at);
        sessions.chain(containers).min()
    }

    fn accepts_streams(&self) -> bool {
        true
    }

    fn reads_raw_streams(&self) -> bool {
        true
    }

    fn stream_bytes(
        &mut self,
        now: Millis,
        conn: RequestId,
        client: usize,
        data: &[u8],
    ) -> Vec<u8> {
        let c = self.conns.entry(conn.0).or_insert_with(|| Conn {
            client,
            ..Conn::default()
        });
        if c.dead {
            return Vec::new();
        }
        c.buf.extend_from_slice(data);
        let frames = match self.frames(conn.0) {
            Ok(f) => f,
            Err(e) => {
                self.violation(conn.0, e);
                return Vec::new();
            }
        };
        let mut out = Vec::new();
        for f in frames {
            if self.conns.get(&conn.0).map_or(true, |c| c.dead) {
                break;
            }
            match self.on_frame(now, conn.0, &f) {
                Ok(bytes) => out.extend(bytes),
                Err(e) => {
                    self.violation(conn.0, format!("client {client}: {e}"));
                    break;
                }
            }
        }
        // Notifications raised by this write go out after its replies
        // (the server writes them in order on each connection).
        let (mine, others): (Vec<_>, Vec<_>) = std::mem::take(&mut self.out)
            .into_iter()
            .partition(|(w, _)| *w == conn);
        self.out = others;
        for (_, n) in mine {
            out.extend(n);
        }
        out
    }
}

fn parent_of(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &path[..i],
    }
}

fn frame_of(body: &[u8]) -> Vec<u8> {
    let mut out = (body.len() as i32).to_be_bytes().to_vec();
    out.extend_from_slice(body);
    out
}

fn reply(xid: i32, zxid: i64, code: i32, body: &[u8]) -> Vec<u8> {
    let mut w = Jw::default();
    w.int(xid);
    w.long(zxid);
    w.int(code);
    w.0.extend_from_slice(body);
    frame_of(&w.0)
}

fn write_stat(w: &mut Jw, s: &Stat) {
    w.long(s.czxid);
    w.long(s.mzxid);
    w.long(0); // ctime
    w.long(0); // mtime
    w.int(s.version);
    w.int(s.cversion);
    w.int(0); // aversion
    w.long(s.ephemeral_owner);
    w.int(s.data_length);
    w.int(s.num_children);
    w.long(s.pzxid);
}

/// A jute writer (big-endian ints, length-prefixed buffers and strings).
#[derive(Default)]
pub struct Jw(pub Vec<u8>);

impl Jw {
    pub fn int(&mut self, v: i32) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    pub fn long(&mut self, v: i64) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    pub fn boolean(&mut self, v: bool) {
        self.0.push(v as u8);
    }
    pub fn buffer(&mut self, v: Option<&[u8]>) {
        match v {
            None => self.int(-1),
            Some(b) => {
                self.int(b.len() as i32);
                self.0.extend_from_slice(b);
            }
        }
    }
    pub fn ustring(&mut self, s: &str) {
        self.buffer(Some(s.as_bytes()));
    }
}

/// A bounds-checked jute reader: a short read is an error, never a panic.
pub struct Jr<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Jr<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Jr { bytes, at: 0 }
    }
    pub fn left(&self) -> usize {
        self.bytes.len() - self.at
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.left() < n {
            return Err(format!(
                "short read: {n} bytes wanted, {} left",
                self.left()
            ));
        }
        let out = &self.bytes[self.at..self.at + n];
        self.at += n;
        Ok(out)
    }
    pub fn int(&mut self) -> Result<i32, String> {
        Ok(i32::from_be_bytes(self.take(4)?.try_into().unwrap()))
    }
    pub fn long(&mut self) -> Result<i64, String> {
        Ok(i64::from_be_bytes(self.take(8)?.try_into().unwrap()))
    }
    pub fn boolean(&mut self) -> Result<bool, String> {
        Ok(self.take(1)?[0] != 0)
    }
    pub fn buffer(&mut self) -> Result<Option<Vec<u8>>, String> {
        let len = self.int()?;
        if len < 0 {
            return Ok(None);
        }
        Ok(Some(self.take(len as usize)?.to_vec()))
    }
    pub fn ustring(&mut self) -> Result<String, String> {
        let b = self.buffer()?.ok_or("a null string")?;
        String::from_utf8(b).map_err(|e| e.to_string())
    }
    /// A path as `PathUtils.validatePath` accepts it (the subset the
    /// recipes may send): absolute, no empty segment, no trailing `/`.
    pub fn path(&mut self) -> Result<String, String> {
        let p = self.ustring()?;
        let valid = p == "/"
            || (p.starts_with('/')
                && !p.ends_with('/')
                && !p.contains("//")
                && !p.split('/').any(|s| s == "." || s == "..")
                && !p.chars().any(|c| c == '\0'));
        if !valid {
            return Err(format!("invalid path {p:?}"));
        }
        Ok(p)
    }
}
