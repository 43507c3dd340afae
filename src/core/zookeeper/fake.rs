//! A small in-memory ZooKeeper that speaks the bytes (tests only): a data
//! tree with ephemeral, sequential and container nodes, sessions that
//! outlive streams, one-shot data watches, and the faults the machine must
//! survive (a create performed but its reply lost, a paused server).

use std::collections::{BTreeMap, HashMap};

use super::jute::{encode_frame, Reader, Writer};
use super::records::{
    create_mode, err, event, op, ConnectRequest, ConnectResponse, Create2Response, CreateRequest,
    DeleteRequest, GetChildren2Response, GetDataResponse, PathWatchRequest, Record, ReplyHeader,
    RequestHeader, SetDataRequest, Stat, StatResponse, WatcherEvent,
};
use crate::core::RequestId;

#[derive(Clone, Debug)]
pub(crate) struct Node {
    pub(crate) data: Vec<u8>,
    pub(crate) stat: Stat,
}

/// One client stream: which machine, which session once connected.
#[derive(Debug)]
struct Conn {
    session: Option<i64>,
    buf: Vec<u8>,
}

/// The server.
#[derive(Debug, Default)]
pub(crate) struct FakeZk {
    pub(crate) nodes: BTreeMap<String, Node>,
    zxid: i64,
    next_session: i64,
    /// Negotiated timeout for every session.
    pub(crate) timeout_ms: i32,
    sessions: HashMap<i64, Option<(usize, RequestId)>>,
    conns: HashMap<(usize, RequestId), Conn>,
    /// (path, session) data watches (getData, exists).
    watches: Vec<(String, i64)>,
    /// (path, session) child watches (getChildren).
    child_watches: Vec<(String, i64)>,
    /// Ops whose replies are dropped (performed, then the stream closes).
    pub(crate) lose_reply_of: Option<i32>,
    /// How many replies of `lose_reply_of`'s op go through before one is lost.
    pub(crate) lose_after: usize,
    /// Streams the server closed: (machine, stream).
    pub(crate) closed: Vec<(usize, RequestId)>,
    /// Ops received, in order, per machine.
    pub(crate) log: Vec<(usize, i32)>,
}

/// Bytes to deliver: (machine, stream, data).
pub(crate) type Delivery = (usize, RequestId, Vec<u8>);

impl FakeZk {
    pub(crate) fn new() -> Self {
        FakeZk {
            timeout_ms: 3_000,
            next_session: 0x100,
            ..FakeZk::default()
        }
    }

    pub(crate) fn open(&mut self, m: usize, stream: RequestId) {
        self.conns.insert(
            (m, stream),
            Conn {
                session: None,
                buf: Vec::new(),
            },
        );
    }

    pub(crate) fn drop_stream(&mut self, m: usize, stream: RequestId) {
        self.conns.remove(&(m, stream));
    }

    /// The client wrote `bytes`: what the server sends back.
    pub(crate) fn write(&mut self, m: usize, stream: RequestId, bytes: &[u8]) -> Vec<Delivery> {
        let Some(conn) = self.conns.get_mut(&(m, stream)) else {
            return Vec::new();
        };
        conn.buf.extend_from_slice(bytes);
        let mut frames = Vec::new();
        while conn.buf.len() >= 4 {
            let len = i32::from_be_bytes(conn.buf[..4].try_into().unwrap()) as usize;
            if conn.buf.len() < 4 + len {
                break;
            }
            frames.push(conn.buf[4..4 + len].to_vec());
            conn.buf.drain(..4 + len);
        }
        let mut out = Vec::new();
        for f in frames {
            out.extend(self.frame(m, stream, &f));
        }
        out
    }

    fn frame(&mut self, m: usize, stream: RequestId, f: &[u8]) -> Vec<Delivery> {
        let session = self.conns.get(&(m, stream)).and_then(|c| c.session);
        match session {
            None => self.connect(m, stream, f),
            Some(s) => self.request(m, stream, s, f),
        }
    }

    fn connect(&mut self, m: usize, stream: RequestId, f: &[u8]) -> Vec<Delivery> {
        let req = ConnectRequest::decode(&mut Reader::new(f)).unwrap();
        let known = req.session_id != 0 && self.sessions.contains_key(&req.session_id);
        let (id, t) = if req.session_id == 0 {
            self.next_session += 1;
            (self.next_session, self.timeout_ms)
        } else if known {
            (req.session_id, self.timeout_ms)
        } else {
            (0, 0)
        };
        let resp = ConnectResponse {
            protocol_version: 0,
            time_out: t,
            session_id: id,
            passwd: vec![if t > 0 { 7 } else { 0 }; 16],
            read_only: Some(false),
        };
        let mut w = Writer::new();
        resp.encode(&mut w);
        if t > 0 {
            self.sessions.insert(id, Some((m, stream)));
            if let Some(c) = self.conns.get_mut(&(m, stream)) {
                c.session = Some(id);
            }
        }
        vec![(m, stream, encode_frame(&w.finish().unwrap()))]
    }

    fn request(&mut self, m: usize, stream: RequestId, session: i64, f: &[u8]) -> Vec<Delivery> {
        let mut r = Reader::new(f);
        let h = RequestHeader::decode(&mut r).unwrap();
        self.log.push((m, h.op));
        let mut notes = Vec::new();
        let (code, body) = self.perform(h.op, session, &mut r, &mut notes);
        if h.op == op::AUTH || h.op == op::PING {
            return vec![(m, stream, reply(h.xid, self.zxid, code, body))];
        }
        let mut out: Vec<Delivery> = notes;
        if self.lose_reply_of == Some(h.op) && self.lose_after > 0 {
            self.lose_after -= 1;
        } else if self.lose_reply_of == Some(h.op) {
            self.lose_reply_of = None;
            self.conns.remove(&(m, stream));
            self.closed.push((m, stream));
            return out;
        }
        if h.op == op::CLOSE_SESSION {
            self.expire(session, &mut out);
        }
        out.push((m, stream, reply(h.xid, self.zxid, code, body)));
        out
    }

    fn perform(
        &mut self,
        op_code: i32,
        session: i64,
        r: &mut Reader<'_>,
        notes: &mut Vec<Delivery>,
    ) -> (i32, Vec<u8>) {
        let mut w = Writer::new();
        let code = match op_code {
            op::CREATE2 | op::CREATE_CONTAINER => {
                self.create(CreateRequest::decode(r).unwrap(), session, &mut w, notes)
            }
            op::DELETE => self.delete(&DeleteRequest::decode(r).unwrap().path, notes),
            op::SET_DATA => self.set_data(SetDataRequest::decode(r).unwrap(), notes, &mut w),
            op::EXISTS | op::GET_DATA | op::GET_CHILDREN2 => self.read(
                op_code,
                PathWatchRequest::decode(r).unwrap(),
                session,
                &mut w,
            ),
            _ => err::OK,
        };
        (code, w.finish().unwrap())
    }

    fn set_data(&mut self, req: SetDataRequest, notes: &mut Vec<Delivery>, w: &mut Writer) -> i32 {
        self.zxid += 1;
        let zxid = self.zxid;
        let Some(node) = self.nodes.get_mut(&req.path) else {
            return err::NO_NODE;
        };
        node.data = req.data;
        node.stat.mzxid = zxid;
        node.stat.version += 1;
        StatResponse { stat: node.stat }.encode(w);
        self.fire(&req.path, event::NODE_DATA_CHANGED, notes);
        err::OK
    }

    fn create(
        &mut self,
        req: CreateRequest,
        session: i64,
        w: &mut Writer,
        notes: &mut Vec<Delivery>,
    ) -> i32 {
        let parent = req.path.rsplit_once('/').map(|(p, _)| p).unwrap_or("");
        let parent = if parent.is_empty() { "/" } else { parent };
        if parent != "/" && !self.nodes.contains_key(parent) {
            return err::NO_NODE;
        }
        let mut path = req.path.clone();
        if parent != "/" {
            let p = self.nodes.get_mut(parent).unwrap();
            if req.flags == create_mode::EPHEMERAL_SEQUENTIAL {
                path = format!("{path}{:010}", p.stat.cversion);
            }
            p.stat.cversion += 1;
        }
        if self.nodes.contains_key(&path) {
            return err::NODE_EXISTS;
        }
        self.zxid += 1;
        let ephemeral = req.flags == create_mode::EPHEMERAL_SEQUENTIAL;
        let stat = Stat {
            czxid: self.zxid,
            mzxid: self.zxid,
            ephemeral_owner: if ephemeral { session } else { 0 },
            ..Stat::default()
        };
        self.nodes.insert(
            path.clone(),
            Node {
                data: req.data,
                stat,
            },
        );
        self.fire(&path, event::NODE_CREATED, notes);
        self.fire_children(parent, notes);
        Create2Response { path, stat }.encode(w);
        err::OK
    }

    fn delete(&mut self, path: &str, notes: &mut Vec<Delivery>) -> i32 {
        if self.nodes.remove(path).is_none() {
            return err::NO_NODE;
        }
        self.zxid += 1;
        self.fire(path, event::NODE_DELETED, notes);
        let parent = path.rsplit_once('/').map(|(p, _)| p).unwrap_or("");
        self.fire_children(if parent.is_empty() { "/" } else { parent }, notes);
        self.fire_children(path, notes);
        err::OK
    }

    fn fire(&mut self, path: &str, event_type: i32, notes: &mut Vec<Delivery>) {
        let (fired, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.watches)
            .into_iter()
            .partition(|(p, _)| p == path);
        self.watches = kept;
        self.notify(fired, path, event_type, notes);
    }

    /// A child of `dir` came or went (or `dir` itself went).
    fn fire_children(&mut self, dir: &str, notes: &mut Vec<Delivery>) {
        let (fired, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.child_watches)
            .into_iter()
            .partition(|(p, _)| p == dir);
        self.child_watches = kept;
        self.notify(fired, dir, event::NODE_CHILDREN_CHANGED, notes);
    }

    fn notify(
        &mut self,
        fired: Vec<(String, i64)>,
        path: &str,
        event_type: i32,
        notes: &mut Vec<Delivery>,
    ) {
        let mut seen = Vec::new();
        for (_, s) in fired {
            // One event per session and path, as the server's watch table.
            if seen.contains(&s) {
                continue;
            }
            seen.push(s);
            if let Some(Some((m, stream))) = self.sessions.get(&s) {
                if self.conns.contains_key(&(*m, *stream)) {
                    let e = WatcherEvent {
                        event_type,
                        state: 3,
                        path: path.into(),
                    };
                    notes.push((
                        *m,
                        *stream,
                        reply(-1, -1, 0, {
                            let mut w = Writer::new();
                            e.encode(&mut w);
                            w.finish().unwrap()
                        }),
                    ));
                }
            }
        }
    }

    fn read(&mut self, op_code: i32, req: PathWatchRequest, session: i64, w: &mut Writer) -> i32 {
        let Some(node) = self.nodes.get(&req.path) else {
            // Only exists leaves a watch on a missing node.
            if req.watch && op_code == op::EXISTS {
                self.watches.push((req.path.clone(), session));
            }
            return err::NO_NODE;
        };
        if req.watch && op_code == op::GET_CHILDREN2 {
            self.child_watches.push((req.path.clone(), session));
        } else if req.watch {
            self.watches.push((req.path.clone(), session));
        }
        match op_code {
            op::EXISTS => StatResponse { stat: node.stat }.encode(w),
            op::GET_DATA => GetDataResponse {
                data: node.data.clone(),
                stat: node.stat,
            }
            .encode(w),
            _ => {
                let prefix = format!("{}/", req.path);
                let children = self
                    .nodes
                    .keys()
                    .filter_map(|k| k.strip_prefix(&prefix))
                    .filter(|rest| !rest.contains('/'))
                    .map(str::to_string)
                    .rev() // unordered on a real server: never rely on it
                    .collect();
                GetChildren2Response {
                    children,
                    stat: node.stat,
                }
                .encode(w)
            }
        }
        err::OK
    }

    /// Ends session `s`: its ephemeral nodes go (firing watches).
    pub(crate) fn expire(&mut self, s: i64, notes: &mut Vec<Delivery>) {
        self.sessions.remove(&s);
        let gone: Vec<String> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.stat.ephemeral_owner == s)
            .map(|(p, _)| p.clone())
            .collect();
        for p in gone {
            self.delete(&p, notes);
        }
    }

    /// Deletes `path` as another client would: the watch notifications.
    pub(crate) fn remove(&mut self, path: &str) -> Vec<Delivery> {
        let mut notes = Vec::new();
        self.delete(path, &mut notes);
        notes
    }

    /// A machine's current stream.
    pub(crate) fn stream_of(&self, m: usize) -> Option<RequestId> {
        self.conns.keys().find(|(mm, _)| *mm == m).map(|(_, s)| *s)
    }

    /// The session a machine's current stream is bound to.
    pub(crate) fn session_of(&self, m: usize) -> Option<i64> {
        self.conns
            .iter()
            .find(|((mm, _), _)| *mm == m)
            .and_then(|(_, c)| c.session)
    }

    /// The children of `dir` (names), sorted by name.
    pub(crate) fn children(&self, dir: &str) -> Vec<String> {
        let prefix = format!("{dir}/");
        self.nodes
            .keys()
            .filter_map(|k| k.strip_prefix(&prefix))
            .filter(|rest| !rest.contains('/'))
            .map(str::to_string)
            .collect()
    }
}

fn reply(xid: i32, zxid: i64, code: i32, body: Vec<u8>) -> Vec<u8> {
    let mut w = Writer::new();
    ReplyHeader {
        xid,
        zxid,
        err: code,
    }
    .encode(&mut w);
    let mut bytes = w.finish().unwrap();
    if code == err::OK {
        bytes.extend(body);
    }
    encode_frame(&bytes)
}
