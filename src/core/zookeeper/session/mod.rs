//! One ZooKeeper session over successive streams (design 4.2).
//!
//! A session outlives its streams: when one breaks, the next host is
//! dialled and the session resumed with its id and password. What the
//! session does, in the order of its life:
//! - **connect**: the `ConnectRequest` goes alone (an expired session gets
//!   its answer before the server closes); on the `ConnectResponse`
//!   (`timeOut <= 0`: the session expired) the auth packets and every
//!   queued request go in one write;
//! - **requests**: xids count from 1; replies come in order and are matched
//!   to the head of the pending queue; a reply out of order or a frame that
//!   cannot be read closes the stream; notifications (xid -1) become
//!   [`SessionEvent::Watch`];
//! - **liveness**: a ping a third of the negotiated timeout T after the last
//!   send; nothing received for 2T/3 closes the stream (and reconnects);
//! - **expiry**: the server cannot have expired the session before T after
//!   the *send* time of the last answered request; past that bound without
//!   an answer the session is [`SessionEvent::Expired`] locally, even while
//!   disconnected (every lock of it is lost);
//! - **close**: `closeSession`, so that the ephemeral nodes go at once.
//!
//! Failures keep the Redis connection's meaning: a request never written is
//! `NotSent` (safe to retry), one written on a stream that broke has an
//! unknown outcome (`Transport`).

pub(crate) mod wire;

#[cfg(test)]
mod tests;

use std::collections::VecDeque;

use super::address::ZkAddress;
use super::config::ZkDigest;
use super::jute::{encode_frame, FrameDecoder, Reader, Writer};
use super::records::{
    err, op, xid, AuthPacket, ConnectRequest, ConnectResponse, Record, ReplyHeader, RequestHeader,
    WatcherEvent,
};
use crate::core::outbox::{earliest, Outbox};
use crate::core::{Input, Millis, Redacted, RequestId, StreamOpen};
pub(crate) use wire::{ZkReply, ZkRequest};

/// Pings go at least this often (the Java client's `MAX_SEND_PING_INTERVAL`).
const MAX_PING_INTERVAL_MS: u64 = 10_000;

/// After every host failed in turn, the next attempt waits this long (the
/// Java client sleeps up to 1 s).
const RECONNECT_PAUSE_MS: u64 = 250;

/// How long a closing session waits for the answer to `closeSession`.
const CLOSE_BOUND_MS: u64 = 2_000;

/// Why a request got no reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ZkError {
    /// The server answered with this error code (`records::err`).
    Server(i32),
    /// The request was never written: nothing happened.
    NotSent(String),
    /// Written on a stream that broke: it may or may not have happened.
    Transport(String),
    /// The session expired (the server said so, or the local bound ran out):
    /// its ephemeral nodes are gone.
    Expired,
    /// The server refused the connection's authentication.
    Refused(String),
}

/// An answer for a request the caller tracks.
pub(crate) type Answer = (RequestId, Result<ZkReply, ZkError>);

/// What happened to the session, for the machine's recipes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum SessionEvent {
    /// Connected (again); `new_session`: a session other than the last one.
    Connected { new_session: bool },
    /// The stream broke: watches are gone, in-flight requests unknown.
    Disconnected,
    /// The session is gone, with every ephemeral node of it.
    Expired,
    /// A watch fired on `path` (chroot stripped).
    Watch { path: String, event_type: i32 },
}

/// The session's identity on the server. `Debug` hides the password.
#[derive(Clone, PartialEq, Eq)]
struct Creds {
    id: i64,
    passwd: Vec<u8>,
}

impl std::fmt::Debug for Creds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Creds {{ id: {:#x}, passwd: <redacted> }}", self.id)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Link {
    /// No stream.
    Closed,
    /// `Transmit::Open` is out.
    Opening { stream: RequestId, deadline: Millis },
    /// The `ConnectRequest` is written, its answer awaited.
    Handshake { stream: RequestId, deadline: Millis },
    /// Requests go out at once.
    Connected { stream: RequestId },
}

/// A request written and not answered yet.
#[derive(Debug)]
struct Pending {
    xid: i32,
    op: i32,
    /// `None`: the session's own (`closeSession`).
    id: Option<RequestId>,
    sent_at: Millis,
}

/// See the module documentation.
#[derive(Debug)]
pub(crate) struct ZkSession {
    address: ZkAddress,
    tls: bool,
    requested_ms: u32,
    digest: Option<ZkDigest>,
    next_host: usize,
    /// Connection attempts failed in a row (a full cycle pauses).
    failures: usize,
    creds: Option<Creds>,
    negotiated_ms: Option<u32>,
    last_zxid: i64,
    next_xid: i32,
    link: Link,
    pending: VecDeque<Pending>,
    queued: Vec<(RequestId, ZkRequest)>,
    /// Send times of the pings in flight (answered in order, xid -2).
    pings: VecDeque<Millis>,
    decoder: FrameDecoder,
    last_send: Millis,
    last_recv: Millis,
    connect_sent_at: Millis,
    /// The send time of the last request answered: the server heard from
    /// the session no earlier than that.
    last_answered_send: Millis,
    reconnect_at: Option<Millis>,
    close_by: Option<Millis>,
    closed: bool,
    events: Vec<SessionEvent>,
}

impl ZkSession {
    pub(crate) fn new(
        address: ZkAddress,
        tls: bool,
        requested_ms: u32,
        digest: Option<ZkDigest>,
    ) -> Self {
        ZkSession {
            address,
            tls,
            requested_ms,
            digest,
            next_host: 0,
            failures: 0,
            creds: None,
            negotiated_ms: None,
            last_zxid: 0,
            next_xid: 1,
            link: Link::Closed,
            pending: VecDeque::new(),
            queued: Vec::new(),
            pings: VecDeque::new(),
            decoder: FrameDecoder::new(),
            last_send: 0,
            last_recv: 0,
            connect_sent_at: 0,
            last_answered_send: 0,
            reconnect_at: None,
            close_by: None,
            closed: false,
            events: Vec::new(),
        }
    }

    // ------------------------------------------------------------ getters

    /// Whether `id` is this session's current stream.
    pub(crate) fn owns(&self, id: RequestId) -> bool {
        self.stream() == Some(id)
    }

    fn stream(&self) -> Option<RequestId> {
        match self.link {
            Link::Opening { stream, .. }
            | Link::Handshake { stream, .. }
            | Link::Connected { stream } => Some(stream),
            Link::Closed => None,
        }
    }

    /// The session id, once the server gave one (and until it expires).
    pub(crate) fn session_id(&self) -> Option<i64> {
        self.creds.as_ref().map(|c| c.id)
    }

    /// The timeout in force: the negotiated one, else the one asked for.
    pub(crate) fn timeout_ms(&self) -> u64 {
        u64::from(self.negotiated_ms.unwrap_or(self.requested_ms))
    }

    /// Until when the session certainly lives on the server (`None`: no
    /// session): T after the send time of the last answered request.
    pub(crate) fn alive_until(&self) -> Option<Millis> {
        self.creds
            .as_ref()
            .map(|_| self.last_answered_send.saturating_add(self.timeout_ms()))
    }

    /// Whether `close` finished (the session is gone).
    pub(crate) fn is_closed(&self) -> bool {
        self.closed
    }

    /// What happened since the last call, oldest first.
    pub(crate) fn take_events(&mut self) -> Vec<SessionEvent> {
        std::mem::take(&mut self.events)
    }

    // ------------------------------------------------------------ requests

    /// Sends `req` as request `id` (tracked by the caller): written now when
    /// connected, else queued (and a stream opened if there is none).
    /// Refused as never sent once the session is closing.
    pub(crate) fn submit(
        &mut self,
        out: &mut Outbox,
        now: Millis,
        id: RequestId,
        req: ZkRequest,
    ) -> Result<(), ZkError> {
        if self.closed || self.close_by.is_some() {
            return Err(ZkError::NotSent("the session is closed".into()));
        }
        match self.link {
            Link::Connected { stream } => {
                let frames = self.frame(now, Some(id), &req);
                self.write(out, now, stream, frames);
            }
            _ => {
                self.queued.push((id, req));
                self.ensure_open(out, now);
            }
        }
        Ok(())
    }

    /// Request `id` is past its deadline. Still queued: it is dropped
    /// (`false`: never sent). Written: the stream may be half-open, so it is
    /// closed and the other requests in flight are answered as unknown
    /// (`true`, with those answers). `id` itself is the caller's to answer.
    pub(crate) fn timed_out(
        &mut self,
        out: &mut Outbox,
        now: Millis,
        id: RequestId,
    ) -> (bool, Vec<Answer>) {
        if let Some(i) = self.queued.iter().position(|(q, _)| *q == id) {
            self.queued.remove(i);
            return (false, Vec::new());
        }
        if !self.pending.iter().any(|p| p.id == Some(id)) {
            return (false, Vec::new());
        }
        self.cancel_stream(out);
        let answers = self.lost_stream(out, now, "a request timed out; the connection was reset");
        (
            true,
            answers.into_iter().filter(|(a, _)| *a != id).collect(),
        )
    }

    /// The frame of `req` with a fresh xid, remembered as pending.
    fn frame(&mut self, now: Millis, id: Option<RequestId>, req: &ZkRequest) -> Vec<u8> {
        let xid = self.take_xid();
        self.pending.push_back(Pending {
            xid,
            op: req.op(),
            id,
            sent_at: now,
        });
        // Paths were validated by the machine; a frame too long for jute
        // goes as an empty write, its reply then fails the stream.
        req.frame(xid, self.address.chroot.as_deref())
            .unwrap_or_default()
    }

    fn take_xid(&mut self) -> i32 {
        let xid = self.next_xid;
        self.next_xid = if xid == i32::MAX { 1 } else { xid + 1 };
        xid
    }

    fn write(&mut self, out: &mut Outbox, now: Millis, stream: RequestId, bytes: Vec<u8>) {
        if bytes.is_empty() {
            return;
        }
        self.last_send = now;
        out.write(stream, Redacted(bytes));
    }

    // ------------------------------------------------------------ streams

    fn ensure_open(&mut self, out: &mut Outbox, now: Millis) {
        if self.link == Link::Closed && self.reconnect_at.is_none() {
            self.open_next(out, now);
        }
    }

    /// Dials the next host, bounded by T / hosts (`ClientCnxn`'s connect
    /// timeout).
    fn open_next(&mut self, out: &mut Outbox, now: Millis) {
        let hosts = &self.address.hosts;
        let host = hosts[self.next_host % hosts.len()].clone();
        self.next_host = (self.next_host + 1) % hosts.len();
        let timeout = (self.timeout_ms() / hosts.len() as u64).max(1);
        let stream = out.request_id();
        out.open(StreamOpen {
            id: stream,
            host: host.host.clone(),
            port: host.port,
            tls: self.tls.then(|| host.host.clone()),
            timeout_ms: Some(timeout),
        });
        self.reconnect_at = None;
        self.decoder = FrameDecoder::new();
        self.link = Link::Opening {
            stream,
            deadline: now.saturating_add(timeout),
        };
    }

    /// The `ConnectRequest`, alone: resuming the session if there is one.
    fn write_connect(
        &mut self,
        out: &mut Outbox,
        now: Millis,
        stream: RequestId,
        deadline: Millis,
    ) {
        let (session_id, passwd) = match &self.creds {
            Some(c) => (c.id, c.passwd.clone()),
            None => (0, vec![0; 16]),
        };
        let request = ConnectRequest {
            protocol_version: 0,
            last_zxid_seen: self.last_zxid,
            time_out: i32::try_from(self.requested_ms).unwrap_or(i32::MAX),
            session_id,
            passwd,
            read_only: false,
        };
        let mut w = Writer::new();
        request.encode(&mut w);
        let body = w.finish().unwrap_or_default();
        self.connect_sent_at = now;
        self.last_recv = now;
        self.link = Link::Handshake { stream, deadline };
        self.write(out, now, stream, encode_frame(&body));
    }

    /// Input on this session's stream; the answers it completes.
    pub(crate) fn handle_input(
        &mut self,
        out: &mut Outbox,
        now: Millis,
        input: Input,
    ) -> Vec<Answer> {
        // Past the session bound the session is over, whatever arrives: a
        // reply read now (say, queued while the process was paused) must not
        // grant a lock the server may already have handed to another. The
        // driver may run the due timer after this input, not before it.
        if self.alive_until().is_some_and(|at| at <= now) {
            self.cancel_stream(out);
            return self.expire(out);
        }
        match input {
            Input::Opened { id } => {
                if let Link::Opening { stream, deadline } = self.link {
                    if stream == id {
                        self.write_connect(out, now, stream, deadline);
                    }
                }
                Vec::new()
            }
            Input::Chunk { data, .. } => {
                self.last_recv = now;
                self.decoder.push(&data);
                self.read_frames(out, now)
            }
            Input::StreamEnd { .. } => {
                self.lost_stream(out, now, "the server closed the connection")
            }
            Input::Failed { error, .. } => self.lost_stream(out, now, &error.to_string()),
            Input::Response { .. } => {
                self.cancel_stream(out);
                self.lost_stream(out, now, "an HTTP answer on a ZooKeeper stream")
            }
        }
    }

    fn read_frames(&mut self, out: &mut Outbox, now: Millis) -> Vec<Answer> {
        let mut answers = Vec::new();
        loop {
            let frame = match self.decoder.next_frame() {
                Ok(Some(frame)) => frame,
                Ok(None) => return answers,
                Err(e) => {
                    self.cancel_stream(out);
                    answers.extend(self.lost_stream(
                        out,
                        now,
                        &format!("an unreadable frame ({e})"),
                    ));
                    return answers;
                }
            };
            let step = match self.link {
                Link::Handshake { .. } => self.on_connect_response(out, now, &frame),
                Link::Connected { .. } => self.on_reply(out, &frame),
                Link::Opening { .. } | Link::Closed => return answers,
            };
            match step {
                Ok(mut more) => answers.append(&mut more),
                Err(why) => {
                    self.cancel_stream(out);
                    answers.extend(self.lost_stream(out, now, &why));
                    return answers;
                }
            }
        }
    }

    /// The first frame: the session lives on (or starts), or it expired.
    fn on_connect_response(
        &mut self,
        out: &mut Outbox,
        now: Millis,
        frame: &[u8],
    ) -> Result<Vec<Answer>, String> {
        let Link::Handshake { stream, .. } = self.link else {
            return Ok(Vec::new());
        };
        let resp = ConnectResponse::decode(&mut Reader::new(frame))
            .map_err(|e| format!("an unreadable ConnectResponse ({e})"))?;
        if resp.time_out <= 0 {
            self.cancel_stream(out);
            return Ok(self.expire(out));
        }
        let new_session = self.session_id() != Some(resp.session_id);
        self.creds = Some(Creds {
            id: resp.session_id,
            passwd: resp.passwd,
        });
        self.negotiated_ms = u32::try_from(resp.time_out).ok();
        self.last_answered_send = self.connect_sent_at;
        self.failures = 0;
        self.link = Link::Connected { stream };
        let mut bytes = self.auth_frames();
        for (id, req) in std::mem::take(&mut self.queued) {
            bytes.extend(self.frame(now, Some(id), &req));
        }
        self.write(out, now, stream, bytes);
        self.events.push(SessionEvent::Connected { new_session });
        Ok(Vec::new())
    }

    /// `AuthPacket{0, "digest", "user:password"}` (xid -4), per connection.
    fn auth_frames(&self) -> Vec<u8> {
        let Some(d) = &self.digest else {
            return Vec::new();
        };
        let mut w = Writer::new();
        RequestHeader {
            xid: xid::AUTH_PACKET,
            op: op::AUTH,
        }
        .encode(&mut w);
        AuthPacket {
            auth_type: 0,
            scheme: "digest".into(),
            auth: format!("{}:{}", d.user, d.password).into_bytes(),
        }
        .encode(&mut w);
        encode_frame(&w.finish().unwrap_or_default())
    }

    /// A frame after the handshake: a notification, a ping's or auth's
    /// answer, or the reply to the oldest pending request.
    fn on_reply(&mut self, out: &mut Outbox, frame: &[u8]) -> Result<Vec<Answer>, String> {
        let mut r = Reader::new(frame);
        let header =
            ReplyHeader::decode(&mut r).map_err(|e| format!("an unreadable reply ({e})"))?;
        if header.zxid > 0 {
            self.last_zxid = self.last_zxid.max(header.zxid);
        }
        match header.xid {
            xid::NOTIFICATION => {
                let event = WatcherEvent::decode(&mut r)
                    .map_err(|e| format!("an unreadable notification ({e})"))?;
                self.on_notification(event);
                Ok(Vec::new())
            }
            xid::PING => {
                if let Some(sent) = self.pings.pop_front() {
                    self.last_answered_send = self.last_answered_send.max(sent);
                }
                Ok(Vec::new())
            }
            xid::AUTH_PACKET if header.err != err::OK => {
                self.cancel_stream(out);
                Ok(self.refuse_all(header.err))
            }
            xid::AUTH_PACKET => Ok(Vec::new()),
            _ => self.on_request_reply(out, header, &mut r),
        }
    }

    fn on_notification(&mut self, event: WatcherEvent) {
        if event.event_type == super::records::event::NONE {
            return;
        }
        let path = wire::strip_chroot(self.address.chroot.as_deref(), &event.path);
        self.events.push(SessionEvent::Watch {
            path,
            event_type: event.event_type,
        });
    }

    fn on_request_reply(
        &mut self,
        out: &mut Outbox,
        header: ReplyHeader,
        r: &mut Reader<'_>,
    ) -> Result<Vec<Answer>, String> {
        let Some(p) = self.pending.pop_front() else {
            return Err(format!("a reply (xid {}) to no request", header.xid));
        };
        if p.xid != header.xid {
            let why = format!(
                "a reply out of order (xid {}, {} expected)",
                header.xid, p.xid
            );
            self.pending.push_front(p);
            return Err(why);
        }
        if header.err == err::SESSION_EXPIRED {
            self.cancel_stream(out);
            let mut answers = self.expire(out);
            answers.extend(p.id.map(|id| (id, Err(ZkError::Expired))));
            return Ok(answers);
        }
        self.last_answered_send = self.last_answered_send.max(p.sent_at);
        if p.op == op::CLOSE_SESSION {
            self.cancel_stream(out);
            self.finish_close();
            return Ok(Vec::new());
        }
        let result = if header.err != err::OK {
            Err(ZkError::Server(header.err))
        } else {
            let reply = wire::decode_reply(p.op, r, self.address.chroot.as_deref());
            Ok(reply.map_err(|e| format!("an unreadable reply ({e})"))?)
        };
        Ok(p.id.map(|id| (id, result)).into_iter().collect())
    }

    /// Asks the driver to close the current stream.
    fn cancel_stream(&mut self, out: &mut Outbox) {
        if let Some(stream) = self.stream() {
            out.cancel(stream);
        }
    }

    /// The stream is gone (the caller cancelled it if it had to): requests
    /// in flight have an unknown outcome, queued ones wait for the next
    /// stream, which is dialled at once (another host) unless every host
    /// failed in a row.
    fn lost_stream(&mut self, out: &mut Outbox, now: Millis, why: &str) -> Vec<Answer> {
        let was = std::mem::replace(&mut self.link, Link::Closed);
        if was == Link::Closed {
            return Vec::new();
        }
        let answers: Vec<Answer> = std::mem::take(&mut self.pending)
            .into_iter()
            .filter_map(|p| p.id)
            .map(|id| {
                (
                    id,
                    Err(ZkError::Transport(format!("connection lost: {why}"))),
                )
            })
            .collect();
        self.pings.clear();
        if let Link::Connected { .. } = was {
            self.events.push(SessionEvent::Disconnected);
        } else {
            self.failures += 1;
        }
        if self.close_by.is_some() {
            self.finish_close();
        } else if self.creds.is_some() || !self.queued.is_empty() {
            if self.failures >= self.address.hosts.len() {
                self.failures = 0;
                self.reconnect_at = Some(now.saturating_add(RECONNECT_PAUSE_MS));
            } else {
                self.open_next(out, now);
            }
        }
        answers
    }

    /// The session is gone: everything waiting on it fails as expired; a
    /// later request starts a new session.
    fn expire(&mut self, out: &mut Outbox) -> Vec<Answer> {
        let _ = out;
        self.link = Link::Closed;
        self.creds = None;
        self.negotiated_ms = None;
        self.pings.clear();
        self.reconnect_at = None;
        let pending = std::mem::take(&mut self.pending)
            .into_iter()
            .filter_map(|p| p.id);
        let queued = std::mem::take(&mut self.queued)
            .into_iter()
            .map(|(id, _)| id);
        let answers = pending
            .chain(queued)
            .map(|id| (id, Err(ZkError::Expired)))
            .collect();
        self.events.push(SessionEvent::Expired);
        if self.close_by.is_some() {
            self.finish_close();
        }
        answers
    }

    /// Authentication refused: nothing queued can run on this connection.
    fn refuse_all(&mut self, code: i32) -> Vec<Answer> {
        self.link = Link::Closed;
        self.pings.clear();
        let why = format!("the server refused the digest authentication (error {code})");
        let pending = std::mem::take(&mut self.pending)
            .into_iter()
            .filter_map(|p| p.id);
        let queued = std::mem::take(&mut self.queued)
            .into_iter()
            .map(|(id, _)| id);
        pending
            .chain(queued)
            .map(|id| (id, Err(ZkError::Refused(why.clone()))))
            .collect()
    }

    // ------------------------------------------------------------ timers

    /// The earliest time `handle_timeout` has work.
    pub(crate) fn poll_timeout(&self) -> Option<Millis> {
        let t = self.timeout_ms();
        let link = match self.link {
            Link::Opening { deadline, .. } | Link::Handshake { deadline, .. } => Some(deadline),
            Link::Connected { .. } => {
                Some((self.last_send + ping_interval(t)).min(self.last_recv + t * 2 / 3))
            }
            Link::Closed => None,
        };
        earliest([link, self.reconnect_at, self.close_by, self.alive_until()])
    }

    /// Runs the timers due at `now`: the session bound, the connect and read
    /// deadlines, the ping, a paused reconnect, the close bound.
    pub(crate) fn handle_timeout(&mut self, out: &mut Outbox, now: Millis) -> Vec<Answer> {
        if self.alive_until().is_some_and(|at| at <= now) {
            self.cancel_stream(out);
            return self.expire(out);
        }
        if self.close_by.is_some_and(|at| at <= now) {
            self.cancel_stream(out);
            self.finish_close();
            return Vec::new();
        }
        if self.reconnect_at.is_some_and(|at| at <= now) && self.link == Link::Closed {
            self.open_next(out, now);
        }
        let t = self.timeout_ms();
        match self.link {
            Link::Opening { deadline, .. } | Link::Handshake { deadline, .. }
                if deadline <= now =>
            {
                self.cancel_stream(out);
                self.lost_stream(out, now, "connect timed out")
            }
            Link::Connected { .. } if self.last_recv + t * 2 / 3 <= now => {
                self.cancel_stream(out);
                self.lost_stream(out, now, "nothing received for 2/3 of the session timeout")
            }
            Link::Connected { stream } if self.last_send + ping_interval(t) <= now => {
                self.pings.push_back(now);
                self.write(out, now, stream, ping_frame());
                Vec::new()
            }
            _ => Vec::new(),
        }
    }

    // ------------------------------------------------------------ close

    /// Ends the session: `closeSession` when connected (the server deletes
    /// its ephemeral nodes at once), bounded; queued requests are answered
    /// as never sent.
    pub(crate) fn close(&mut self, out: &mut Outbox, now: Millis) -> Vec<Answer> {
        if self.closed || self.close_by.is_some() {
            return Vec::new();
        }
        self.close_by = Some(now.saturating_add(CLOSE_BOUND_MS));
        let answers = std::mem::take(&mut self.queued)
            .into_iter()
            .map(|(id, _)| (id, Err(ZkError::NotSent("the client is closing".into()))))
            .collect();
        match self.link {
            Link::Connected { stream } if self.creds.is_some() => {
                let frame = self.frame(now, None, &ZkRequest::CloseSession);
                self.write(out, now, stream, frame);
            }
            _ => {
                self.cancel_stream(out);
                self.finish_close();
            }
        }
        answers
    }

    fn finish_close(&mut self) {
        self.link = Link::Closed;
        self.creds = None;
        self.closed = true;
        self.close_by = None;
        self.reconnect_at = None;
    }
}

/// T/3, at most [`MAX_PING_INTERVAL_MS`].
fn ping_interval(timeout_ms: u64) -> u64 {
    (timeout_ms / 3).clamp(1, MAX_PING_INTERVAL_MS)
}

/// `RequestHeader(-2, ping)`, no body: `00 00 00 08 ff ff ff fe 00 00 00 0b`.
fn ping_frame() -> Vec<u8> {
    let mut w = Writer::new();
    RequestHeader {
        xid: xid::PING,
        op: op::PING,
    }
    .encode(&mut w);
    encode_frame(&w.finish().unwrap_or_default())
}
