//! Byte-level tests of the session: the test plays the server, feeding
//! `ConnectResponse` and reply frames as `Input::Chunk` and reading the
//! client's frames out of `Transmit::Write`.

use super::{SessionEvent, ZkError, ZkReply, ZkRequest, ZkSession};
use crate::core::outbox::Outbox;
use crate::core::zookeeper::address::ZkAddress;
use crate::core::zookeeper::config::ZkDigest;
use crate::core::zookeeper::jute::{encode_frame, Writer};
use crate::core::zookeeper::records::{
    err, op, ConnectResponse, GetDataResponse, Record, ReplyHeader, Stat, WatcherEvent,
};
use crate::core::{Input, Millis, RequestId, Transmit, TransportError};

pub(crate) const PASSWD: [u8; 16] = [0xab; 16];

/// A test server's view of one session.
pub(crate) struct Wire {
    pub(crate) out: Outbox,
    pub(crate) s: ZkSession,
}

impl Wire {
    pub(crate) fn new(connect: &str, digest: Option<ZkDigest>) -> Wire {
        let address = ZkAddress::parse(connect).unwrap();
        Wire {
            out: Outbox::default(),
            s: ZkSession::new(address, false, 30_000, digest),
        }
    }

    pub(crate) fn transmits(&mut self) -> Vec<Transmit> {
        std::iter::from_fn(|| self.out.poll_transmit()).collect()
    }

    /// The one `Open` transmitted: (stream, host, port).
    pub(crate) fn opened(&mut self) -> (RequestId, String, u16) {
        match self.transmits().as_slice() {
            [Transmit::Open(o)] => (o.id, o.host.clone(), o.port),
            other => panic!("expected one Open: {other:?}"),
        }
    }

    /// The frames of the writes transmitted (each without its length).
    pub(crate) fn written_frames(&mut self) -> Vec<Vec<u8>> {
        let mut frames = Vec::new();
        for t in self.transmits() {
            let Transmit::Write { data, .. } = t else {
                panic!("expected writes only: {t:?}");
            };
            frames.extend(split_frames(&data.0));
        }
        frames
    }

    pub(crate) fn submit(&mut self, now: Millis, req: ZkRequest) -> RequestId {
        let id = self.out.request_id();
        self.s.submit(&mut self.out, now, id, req).unwrap();
        id
    }

    pub(crate) fn feed(
        &mut self,
        now: Millis,
        stream: RequestId,
        data: Vec<u8>,
    ) -> Vec<super::Answer> {
        self.s
            .handle_input(&mut self.out, now, Input::Chunk { id: stream, data })
    }

    /// Opens the stream, checks the ConnectRequest went alone, answers it
    /// with session `id` and timeout `t`; the frames written after it.
    pub(crate) fn handshake(
        &mut self,
        now: Millis,
        stream: RequestId,
        id: i64,
        t: i32,
    ) -> Vec<Vec<u8>> {
        assert!(self
            .s
            .handle_input(&mut self.out, now, Input::Opened { id: stream })
            .is_empty());
        let frames = self.written_frames();
        assert_eq!(frames.len(), 1, "the ConnectRequest goes alone");
        assert_eq!(frames[0].len(), 45);
        let answers = self.feed(now, stream, connect_response(t, id));
        assert!(answers.is_empty());
        self.written_frames()
    }
}

pub(crate) fn split_frames(mut bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut frames = Vec::new();
    while bytes.len() >= 4 {
        let len = i32::from_be_bytes(bytes[..4].try_into().unwrap()) as usize;
        frames.push(bytes[4..4 + len].to_vec());
        bytes = &bytes[4 + len..];
    }
    assert!(bytes.is_empty(), "a partial frame was written");
    frames
}

/// (xid, op) of a client frame.
pub(crate) fn header(frame: &[u8]) -> (i32, i32) {
    let int = |i: usize| i32::from_be_bytes(frame[i..i + 4].try_into().unwrap());
    (int(0), int(4))
}

pub(crate) fn connect_response(t: i32, id: i64) -> Vec<u8> {
    let mut w = Writer::new();
    ConnectResponse {
        protocol_version: 0,
        time_out: t,
        session_id: id,
        passwd: if t > 0 { PASSWD.to_vec() } else { vec![0; 16] },
        read_only: Some(false),
    }
    .encode(&mut w);
    encode_frame(&w.finish().unwrap())
}

pub(crate) fn reply(xid: i32, zxid: i64, code: i32, body: impl FnOnce(&mut Writer)) -> Vec<u8> {
    let mut w = Writer::new();
    ReplyHeader {
        xid,
        zxid,
        err: code,
    }
    .encode(&mut w);
    body(&mut w);
    encode_frame(&w.finish().unwrap())
}

fn data_reply(xid: i32) -> Vec<u8> {
    reply(xid, 9, err::OK, |w| {
        GetDataResponse {
            data: b"v".to_vec(),
            stat: Stat::default(),
        }
        .encode(w)
    })
}

fn get(path: &str) -> ZkRequest {
    ZkRequest::GetData {
        path: path.into(),
        watch: true,
    }
}

/// The ConnectRequest alone, then auth and the queued request in one
/// write, the request's path under the chroot; its reply answers it.
#[test]
fn connects_then_writes_auth_and_queued_requests_in_order() {
    let digest = ZkDigest {
        user: "u".into(),
        password: "s3cret".into(),
    };
    let mut w = Wire::new("10.0.0.1:2182,10.0.0.2/ch", Some(digest));
    let id = w.submit(0, get("/a"));
    let (stream, host, port) = w.opened();
    assert_eq!((host.as_str(), port), ("10.0.0.1", 2182));
    w.s.handle_input(&mut w.out, 5, Input::Opened { id: stream });
    let connect = w.written_frames();
    let mut want = vec![0u8; 4 + 8];
    want.extend_from_slice(&30_000i32.to_be_bytes());
    want.extend_from_slice(&[0; 8]);
    want.extend_from_slice(&16i32.to_be_bytes());
    want.extend_from_slice(&[0; 17]);
    assert_eq!(
        connect,
        vec![want],
        "design 1.4's new-session ConnectRequest"
    );
    assert!(w.feed(6, stream, connect_response(6_000, 0x77)).is_empty());
    assert_eq!(
        w.s.take_events(),
        vec![SessionEvent::Connected { new_session: true }]
    );
    let frames = w.written_frames();
    assert_eq!(frames.len(), 2);
    assert_eq!(header(&frames[0]), (-4, op::AUTH));
    assert!(frames[0].ends_with(b"digest\x00\x00\x00\x08u:s3cret"));
    assert_eq!(header(&frames[1]), (1, op::GET_DATA));
    assert!(frames[1].ends_with(b"\x00\x00\x00\x05/ch/a\x01"));
    assert!(!format!("{:?}", w.s).contains("s3cret"));
    let answers = w.feed(7, stream, reply(-4, 0, 0, |_| {}));
    assert!(answers.is_empty());
    let answers = w.feed(8, stream, data_reply(1));
    assert!(
        matches!(&answers[..], [(a, Ok(ZkReply::Data { data, .. }))] if *a == id && data == b"v")
    );
    assert_eq!(w.s.session_id(), Some(0x77));
    // Bounded from the send time of the last answered request (at 6).
    assert_eq!(w.s.alive_until(), Some(6 + 6_000));
}

/// A broken stream: the request in flight is unknown, a request queued
/// meanwhile is not lost; the next host gets the same session id and
/// password; the server confirms the session.
#[test]
fn reconnects_to_the_next_host_with_the_same_session() {
    let mut w = Wire::new("a:1,b:2", None);
    let first = w.submit(0, get("/x"));
    let (stream, _, _) = w.opened();
    let frames = w.handshake(0, stream, 0x55, 3_000);
    assert_eq!(header(&frames[0]), (1, op::GET_DATA));
    let answers =
        w.s.handle_input(&mut w.out, 10, Input::StreamEnd { id: stream });
    assert!(matches!(&answers[..], [(a, Err(ZkError::Transport(_)))] if *a == first));
    let (next, host, _) = w.opened();
    assert_eq!(host, "b");
    let queued = w.submit(11, get("/y"));
    w.s.handle_input(&mut w.out, 12, Input::Opened { id: next });
    let connect = w.written_frames().remove(0);
    assert_eq!(&connect[16..24], &0x55i64.to_be_bytes(), "the session id");
    assert_eq!(
        &connect[28..44],
        &super::tests::PASSWD,
        "the session password"
    );
    w.feed(13, next, connect_response(3_000, 0x55));
    assert_eq!(
        w.s.take_events(),
        vec![
            SessionEvent::Connected { new_session: true },
            SessionEvent::Disconnected,
            SessionEvent::Connected { new_session: false }
        ]
    );
    let frames = w.written_frames();
    assert_eq!(header(&frames[0]), (2, op::GET_DATA), "xids go on from 2");
    let answers = w.feed(14, next, data_reply(2));
    assert!(matches!(&answers[..], [(a, Ok(_))] if *a == queued));
}

/// `timeOut 0` in the ConnectResponse: the session expired; what was
/// queued fails as expired, and the next request starts a new session.
#[test]
fn an_expired_session_is_reported_and_a_new_one_started_later() {
    let mut w = Wire::new("a:1", None);
    w.submit(0, get("/x"));
    let (stream, _, _) = w.opened();
    w.handshake(0, stream, 0x55, 3_000);
    w.s.handle_input(&mut w.out, 1, Input::StreamEnd { id: stream });
    let (next, _, _) = w.opened();
    let queued = w.submit(2, get("/y"));
    w.s.handle_input(&mut w.out, 3, Input::Opened { id: next });
    w.written_frames();
    let answers = w.feed(4, next, connect_response(0, 0));
    assert!(matches!(&answers[..], [(a, Err(ZkError::Expired))] if *a == queued));
    assert_eq!(w.s.take_events().last(), Some(&SessionEvent::Expired));
    assert_eq!(w.transmits(), vec![Transmit::Cancel(next)]);
    assert_eq!((w.s.session_id(), w.s.poll_timeout()), (None, None));
    w.submit(5, get("/z"));
    let (third, _, _) = w.opened();
    w.s.handle_input(&mut w.out, 6, Input::Opened { id: third });
    let connect = w.written_frames().remove(0);
    assert_eq!(&connect[16..24], &[0; 8], "a new session");
}

/// A reply whose xid is not the oldest pending one closes the stream and
/// fails every request in flight as unknown.
#[test]
fn a_reply_out_of_order_closes_the_stream() {
    let mut w = Wire::new("a:1", None);
    let one = w.submit(0, get("/1"));
    let two = w.submit(0, get("/2"));
    let (stream, _, _) = w.opened();
    w.handshake(0, stream, 1, 3_000);
    let answers = w.feed(1, stream, data_reply(2));
    let ids: Vec<RequestId> = answers.iter().map(|(id, _)| *id).collect();
    assert_eq!(ids, vec![one, two]);
    assert!(answers
        .iter()
        .all(|(_, r)| matches!(r, Err(ZkError::Transport(m)) if m.contains("out of order"))));
    assert_eq!(w.transmits()[0], Transmit::Cancel(stream));
}

/// A frame length beyond the maximum (or negative) is refused before any
/// allocation: the stream is closed.
#[test]
fn a_hostile_frame_length_closes_the_stream() {
    for len in [i32::MAX, -2] {
        let mut w = Wire::new("a:1", None);
        let id = w.submit(0, get("/1"));
        let (stream, _, _) = w.opened();
        w.handshake(0, stream, 1, 3_000);
        let answers = w.feed(1, stream, len.to_be_bytes().to_vec());
        assert!(
            matches!(&answers[..], [(a, Err(ZkError::Transport(m)))] if *a == id && m.contains("unreadable frame"))
        );
        assert_eq!(w.transmits()[0], Transmit::Cancel(stream));
    }
}

/// Pings a third of T after the last send; a ping's answer moves the
/// session bound; nothing received for 2T/3 closes the stream.
#[test]
fn pings_by_the_timer_and_a_silent_server_is_left() {
    let mut w = Wire::new("a:1,b:1", None);
    w.submit(0, get("/1"));
    let (stream, _, _) = w.opened();
    w.handshake(0, stream, 1, 3_000);
    w.feed(100, stream, data_reply(1));
    assert_eq!(w.s.poll_timeout(), Some(1_000));
    assert!(w.s.handle_timeout(&mut w.out, 1_000).is_empty());
    let ping = match w.transmits().as_slice() {
        [Transmit::Write { data, .. }] => data.0.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(ping, [0, 0, 0, 8, 0xff, 0xff, 0xff, 0xfe, 0, 0, 0, 11]);
    w.feed(1_050, stream, reply(-2, 9, 0, |_| {}));
    assert_eq!(w.s.alive_until(), Some(1_000 + 3_000));
    // Silent from 1050: pings at 2000 and 3000, then the read deadline.
    for at in [2_000, 3_000] {
        assert_eq!(w.s.poll_timeout(), Some(at));
        w.s.handle_timeout(&mut w.out, at);
        assert_eq!(w.transmits().len(), 1);
    }
    assert_eq!(w.s.poll_timeout(), Some(1_050 + 2_000));
    w.s.handle_timeout(&mut w.out, 3_050);
    let t = w.transmits();
    assert_eq!(t[0], Transmit::Cancel(stream));
    assert!(matches!(&t[1], Transmit::Open(o) if o.host == "b"));
    assert_eq!(w.s.take_events().last(), Some(&SessionEvent::Disconnected));
}

/// No answer for T after the last answered send: the session is expired
/// locally, even while no server can be reached.
#[test]
fn a_session_unconfirmed_for_its_timeout_expires_locally() {
    let mut w = Wire::new("a:1", None);
    w.submit(0, get("/1"));
    let (stream, _, _) = w.opened();
    w.handshake(0, stream, 1, 3_000);
    w.feed(10, stream, data_reply(1));
    let failed = TransportError::Io("reset".into());
    w.s.handle_input(
        &mut w.out,
        20,
        Input::Failed {
            id: stream,
            error: failed.clone(),
        },
    );
    let mut now = 20;
    // Every reconnect fails; the session bound stays at 0 + 3000.
    while now < 3_000 {
        for t in w.transmits() {
            if let Transmit::Open(o) = t {
                w.s.handle_input(
                    &mut w.out,
                    now,
                    Input::Failed {
                        id: o.id,
                        error: failed.clone(),
                    },
                );
            }
        }
        now = w.s.poll_timeout().unwrap();
        w.s.handle_timeout(&mut w.out, now);
    }
    assert_eq!(now, 3_000);
    assert_eq!(w.s.take_events().last(), Some(&SessionEvent::Expired));
    assert_eq!(w.s.session_id(), None);
}

/// A reply read after the session bound (queued while the process was
/// paused, the bound's timer not run yet) is not delivered: the session
/// expires first, the request fails as expired.
#[test]
fn a_reply_read_past_the_session_bound_expires_the_session_first() {
    let mut w = Wire::new("a:1", None);
    w.submit(0, get("/1"));
    let (stream, _, _) = w.opened();
    w.handshake(0, stream, 1, 3_000);
    w.feed(10, stream, data_reply(1));
    let pending = w.submit(20, get("/2"));
    assert_eq!(w.s.alive_until(), Some(3_000));
    let answers = w.feed(5_000, stream, data_reply(2));
    assert_eq!(answers.len(), 1);
    assert_eq!(answers[0].0, pending);
    assert!(answers[0].1.is_err(), "{:?}", answers[0].1);
    assert_eq!(w.s.take_events().last(), Some(&SessionEvent::Expired));
    assert_eq!(w.s.session_id(), None);
}

/// A watch notification (xid -1) is an event with the chroot stripped.
#[test]
fn notifications_become_watch_events() {
    let mut w = Wire::new("a:1/ch", None);
    w.submit(0, get("/1"));
    let (stream, _, _) = w.opened();
    w.handshake(0, stream, 1, 3_000);
    w.s.take_events();
    let event = reply(-1, -1, 0, |w| {
        WatcherEvent {
            event_type: 2,
            state: 3,
            path: "/ch/l/n".into(),
        }
        .encode(w)
    });
    assert!(w.feed(1, stream, event).is_empty());
    assert_eq!(
        w.s.take_events(),
        vec![SessionEvent::Watch {
            path: "/l/n".into(),
            event_type: 2
        }]
    );
}

/// Close writes `closeSession`; its answer ends the session.
#[test]
fn close_sends_close_session() {
    let mut w = Wire::new("a:1", None);
    w.submit(0, get("/1"));
    let (stream, _, _) = w.opened();
    w.handshake(0, stream, 1, 3_000);
    w.feed(1, stream, data_reply(1));
    assert!(w.s.close(&mut w.out, 2).is_empty());
    let frames = w.written_frames();
    assert_eq!(frames, vec![vec![0, 0, 0, 2, 0xff, 0xff, 0xff, 0xf5]]);
    assert!(w.s.submit(&mut w.out, 3, RequestId(99), get("/2")).is_err());
    w.feed(4, stream, reply(2, 10, 0, |_| {}));
    assert!(w.s.is_closed());
    assert_eq!(w.transmits(), vec![Transmit::Cancel(stream)]);
    assert_eq!(w.s.poll_timeout(), None);
}

/// A server error is the request's answer; the stream stays.
#[test]
fn a_server_error_answers_its_request_only() {
    let mut w = Wire::new("a:1", None);
    let id = w.submit(0, get("/1"));
    let (stream, _, _) = w.opened();
    w.handshake(0, stream, 1, 3_000);
    let answers = w.feed(1, stream, reply(1, 0, err::NO_NODE, |_| {}));
    assert!(matches!(&answers[..], [(a, Err(ZkError::Server(-101)))] if *a == id));
    assert!(w.transmits().is_empty());
}

/// A refused authentication fails what was sent and queued as refused
/// (the server answered), never as a transport failure.
#[test]
fn a_refused_authentication_refuses_the_requests() {
    let digest = ZkDigest {
        user: "u".into(),
        password: "pw".into(),
    };
    let mut w = Wire::new("a:1", Some(digest));
    let id = w.submit(0, get("/1"));
    let (stream, _, _) = w.opened();
    w.handshake(0, stream, 1, 3_000);
    let answers = w.feed(1, stream, reply(-4, 0, err::AUTH_FAILED, |_| {}));
    assert!(
        matches!(&answers[..], [(a, Err(ZkError::Refused(m)))] if *a == id && m.contains("-115"))
    );
    assert_eq!(w.transmits(), vec![Transmit::Cancel(stream)]);
}

/// A host that does not answer the connect in T / hosts: the next one.
#[test]
fn a_connect_that_takes_too_long_moves_to_the_next_host() {
    let mut w = Wire::new("a:1,b:1", None);
    w.submit(0, get("/1"));
    let (stream, host, _) = w.opened();
    assert_eq!(host, "a");
    assert_eq!(
        w.s.poll_timeout(),
        Some(15_000),
        "30 s asked for, two hosts"
    );
    w.s.handle_timeout(&mut w.out, 15_000);
    let t = w.transmits();
    assert_eq!(t[0], Transmit::Cancel(stream));
    assert!(matches!(&t[1], Transmit::Open(o) if o.host == "b"));
}

/// A request past its deadline on a connected stream: the stream may be
/// half-open, so it is closed and the other request in flight is unknown;
/// a request still queued is just dropped (never sent).
#[test]
fn a_timed_out_request_resets_the_stream() {
    let mut w = Wire::new("a:1", None);
    let one = w.submit(0, get("/1"));
    let two = w.submit(0, get("/2"));
    let (stream, _, _) = w.opened();
    w.handshake(0, stream, 1, 3_000);
    let (sent, others) = w.s.timed_out(&mut w.out, 500, one);
    assert!(sent);
    assert!(matches!(&others[..], [(a, Err(ZkError::Transport(_)))] if *a == two));
    assert_eq!(w.transmits()[0], Transmit::Cancel(stream));
    let mut q = Wire::new("a:1", None);
    let queued = q.submit(0, get("/1"));
    assert_eq!(q.s.timed_out(&mut q.out, 500, queued), (false, Vec::new()));
}
