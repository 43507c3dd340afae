//! The world's byte streams: a simulated TCP connection per
//! `Transmit::Open`, to a server that [`accepts_streams`]
//! (`SimServer::accepts_streams`; the Redis model with `Proto::Resp`).
//!
//! A stream is routed by `tcp://{host}:{port}`, or `tls://{host}:{port}`
//! when it asks for TLS with the host's own name (add the server with such
//! a base; TLS itself is not simulated). Opening it takes a seeded delay each way: `Opened` comes back, or
//! `Failed{Connect}` when the endpoint is down, the server takes no
//! streams, or (a fault) the connect is refused; a connect lost to a
//! partition or to request loss gets no answer at all (the core's connect
//! deadline, or the driver's safety net at `timeout_ms` + slack, ends it).
//!
//! Client → server: each write travels with a seeded delay, in order after
//! the connection's earlier writes; a server of its own framing
//! (`SimServer::reads_raw_streams`, the ZooKeeper model) reads them as they
//! come (`SimServer::stream_bytes`); otherwise the server reads the bytes as RESP
//! command arrays (`RespDecoder` reads a client's arrays of bulk strings;
//! a write that is not one is a contract violation), runs each through
//! `SimServer::stream_command` and sends the replies back.
//!
//! Server → client: replies and pushed messages (`drain_stream_chunks`,
//! keyed by the connection's wire id) go through the same path as HTTP
//! stream chunks: in order, held back and coalesced with the next bytes
//! (several replies in one read), cut at random bytes into pieces. No
//! hostile bytes are spliced in (TCP and TLS do not forge frames; a forged
//! reply would be a lie the core cannot tell from the truth).
//!
//! Faults (before `faults_until`): a partition breaks a connection that
//! carries anything in either direction (the client hears `Failed{Io}`
//! once the partition ends); a lost write breaks it likewise; a chunk may
//! be **cut** (`stream_cut`: part of its bytes arrive, then `Failed{Io}` or
//! `StreamEnd`); a connection may be **black-holed** (`stream_blackhole`:
//! from a write or a chunk on, nothing more gets through either way and
//! nothing tells the client: only its own deadline can); a connect may be
//! **refused** (`open_refused`). A node's outage resets its connections.
//!
//! Closing (`Transmit::Cancel`) reaches the server after the writes sent
//! before it (TCP's FIN follows the data): commands written just before a
//! close still run; their replies go nowhere.

use edgelock::core::redis::RedisValue;
use edgelock::core::{Input, Millis, RequestId, StreamOpen, TransportError};
use edgelock::internals::redis::resp::{Frame, RespDecoder};

use super::{Ev, Flight, OpenStream, SimServer, World};

/// One connection as the network and its server see it, from the connect
/// until the server's side is closed.
pub(super) struct TcpConn {
    pub(super) client: usize,
    pub(super) id: RequestId,
    pub(super) endpoint: usize,
    /// The server's read buffer: the client's bytes not yet framed.
    decoder: RespDecoder,
    /// Writes of one connection arrive in order.
    last_arrival: Millis,
    /// The server accepted it (else the connect is on its way).
    pub(super) accepted: bool,
    /// Half-open: nothing more gets through, and nobody is told.
    black_holed: bool,
}

/// What the byte-stream transport did over a run.
#[derive(Clone, Copy, Debug, Default)]
pub struct StreamStats {
    pub opens: u64,
    pub refused: u64,
    pub commands: u64,
    pub cuts: u64,
    pub black_holes: u64,
    pub breaks: u64,
}

impl<S: SimServer> World<S> {
    /// `Transmit::Open`: the connect leaves now.
    pub(super) fn tcp_open(&mut self, c: usize, open: StreamOpen) {
        let id = open.id;
        // TLS: to the server's `tls://` base, and only for its own name.
        let target = match &open.tls {
            None => format!("tcp://{}:{}/", open.host, open.port),
            Some(name) if *name == open.host => format!("tls://{}:{}/", open.host, open.port),
            Some(name) => format!("tls://{name}@{}:{}/", open.host, open.port),
        };
        let Some(endpoint) = self.route(&target) else {
            self.violations
                .push(format!("client {c} opened a stream to an unknown {target}"));
            return;
        };
        if self.clients[c].inflight.contains_key(&id) {
            self.violations
                .push(format!("client {c} reused request id {id:?} for a stream"));
        }
        self.next_wire += 1;
        let wire = self.next_wire;
        self.wires.insert(wire, (c, id));
        self.clients[c].inflight.insert(
            id,
            Flight {
                wire,
                endpoint,
                stream: true,
                has_timeout: false,
                tcp: true,
                opened: false,
                subscriber: false,
            },
        );
        self.stream_stats.opens += 1;
        self.log(|| format!("c{c} -> #{} open {target}", id.0));
        // The driver's safety net for the connect (not once it is open).
        if let Some(to) = open.timeout_ms {
            let local = self.local_now(c) + to + self.net.driver_timeout_slack;
            let at = self.clients[c].clock.to_global(local);
            self.push(at, Ev::DriverTimeout { client: c, id });
        }
        let lost = self.partitioned(c, endpoint, self.now).is_some()
            || (self.faulty() && self.rng.chance(self.net.request_loss));
        if lost {
            self.log(|| format!("   connect c{c}#{} lost", id.0));
            self.silence(c, id, open.timeout_ms.is_some());
            return;
        }
        let at = self.now + self.delay();
        self.tcp.insert(
            wire,
            TcpConn {
                client: c,
                id,
                endpoint,
                decoder: RespDecoder::new(),
                last_arrival: at,
                accepted: false,
                black_holed: false,
            },
        );
        self.push(at, Ev::TcpAccept { wire });
    }

    /// The connect reaches its endpoint.
    pub(super) fn tcp_accept(&mut self, wire: u64) {
        let Some(conn) = self.tcp.get(&wire) else {
            return;
        };
        let (c, id, endpoint) = (conn.client, conn.id, conn.endpoint);
        let wanted = self.clients[c]
            .inflight
            .get(&id)
            .is_some_and(|f| f.wire == wire);
        if !wanted {
            self.tcp.remove(&wire); // the client gave up: closed at once
            return;
        }
        let server = self.routes[endpoint].1;
        let refused = self.ep_down[endpoint]
            || !self.servers[server].accepts_streams()
            || (self.faulty() && self.rng.chance(self.net.open_refused));
        if refused || self.partitioned(c, endpoint, self.now).is_some() {
            self.tcp.remove(&wire);
            if !refused {
                return; // the answer is lost: only a deadline ends the connect
            }
            self.stream_stats.refused += 1;
            self.log(|| format!("   connect c{c}#{} refused", id.0));
            let at = self.now + self.delay();
            let error = TransportError::Connect("connection refused".into());
            self.push(
                at,
                Ev::Deliver {
                    client: c,
                    input: Input::Failed { id, error },
                },
            );
            return;
        }
        let at = self.now + self.delay();
        if let Some(conn) = self.tcp.get_mut(&wire) {
            conn.accepted = true;
        }
        let stream = OpenStream {
            client: c,
            id,
            endpoint,
            last_delivery: at,
            held: Vec::new(),
            flush_queued: false,
            tcp: true,
        };
        self.streams.insert(wire, stream);
        self.push(
            at,
            Ev::Deliver {
                client: c,
                input: Input::Opened { id },
            },
        );
    }

    /// `Transmit::Write`: the bytes leave now, after the stream's earlier ones.
    pub(super) fn tcp_write(&mut self, c: usize, id: RequestId, data: Vec<u8>) {
        let Some(f) = self.clients[c].inflight.get_mut(&id) else {
            return; // closed, or its failure is on its way
        };
        // (No key or channel of the simulation holds this.)
        f.subscriber |= data.windows(15).any(|w| w == b"$9\r\nSUBSCRIBE\r\n");
        let wire = f.wire;
        if !f.tcp || !f.opened {
            self.violations.push(format!(
                "client {c} wrote on #{} before it was opened (or on a request)",
                id.0
            ));
            return;
        }
        self.log(|| format!("c{c} -> #{} write {}", id.0, data.escape_ascii()));
        let Some(conn) = self.tcp.get(&wire) else {
            return; // broken: the client hears of it
        };
        if conn.black_holed {
            return;
        }
        let endpoint = conn.endpoint;
        if let Some(until) = self.partitioned(c, endpoint, self.now) {
            return self.tcp_break(wire, until, "connection timed out (partition)");
        }
        if self.tcp_fault_black_hole(wire) {
            return;
        }
        if self.faulty() && self.rng.chance(self.net.request_loss) {
            return self.tcp_break(wire, self.now, "connection reset");
        }
        let at = self.now + self.delay();
        let Some(conn) = self.tcp.get_mut(&wire) else {
            return;
        };
        let at = at.max(conn.last_arrival);
        conn.last_arrival = at;
        self.push(at, Ev::TcpData { wire, data });
    }

    /// A seeded black hole swallows the connection from now on: true if so.
    pub(super) fn tcp_fault_black_hole(&mut self, wire: u64) -> bool {
        let Some(conn) = self.tcp.get(&wire) else {
            return false;
        };
        if conn.black_holed {
            return true;
        }
        if !(self.faulty() && self.rng.chance(self.net.stream_blackhole)) {
            return false;
        }
        let (c, id) = (conn.client, conn.id);
        self.log(|| format!("   stream c{c}#{} black-holed", id.0));
        self.stream_stats.black_holes += 1;
        if let Some(conn) = self.tcp.get_mut(&wire) {
            conn.black_holed = true;
        }
        true
    }

    /// Whether stream `wire` is a black-holed connection (nothing arrives).
    pub(super) fn tcp_black_holed(&self, wire: u64) -> bool {
        self.tcp.get(&wire).is_some_and(|c| c.black_holed)
    }

    /// A write reaches the server: every complete command in it runs, the
    /// replies go back.
    pub(super) fn tcp_data(&mut self, wire: u64, data: Vec<u8>) {
        let Some(conn) = self.tcp.get_mut(&wire) else {
            return; // the server closed it (outage, break)
        };
        if conn.black_holed {
            return;
        }
        let (c, endpoint) = (conn.client, conn.endpoint);
        let server = self.routes[endpoint].1;
        if self.servers[server].reads_raw_streams() {
            return self.tcp_raw_data(wire, server, c, &data);
        }
        let Some(conn) = self.tcp.get_mut(&wire) else {
            return;
        };
        conn.decoder.feed(&data);
        let mut commands = Vec::new();
        let mut bad = None;
        loop {
            match conn.decoder.next_frame() {
                Ok(None) => break,
                Ok(Some(Frame::Reply(RedisValue::Array(items)))) => {
                    let args: Option<Vec<Vec<u8>>> = items
                        .into_iter()
                        .map(|v| match v {
                            RedisValue::Bulk(b) => Some(b),
                            _ => None,
                        })
                        .collect();
                    match args {
                        Some(a) if !a.is_empty() => commands.push(a),
                        _ => {
                            bad = Some("an array of other than bulk strings".to_string());
                            break;
                        }
                    }
                }
                Ok(Some(other)) => {
                    bad = Some(format!("a frame that is no command: {other:?}"));
                    break;
                }
                Err(e) => {
                    bad = Some(format!("bytes that are no RESP ({e})"));
                    break;
                }
            }
        }
        if let Some(why) = bad {
            self.violations
                .push(format!("client {c} wrote {why} on a Redis connection"));
            return;
        }
        let server = self.routes[endpoint].1;
        self.servers[server].advance(self.now);
        let mut replies = Vec::new();
        for args in &commands {
            self.stream_stats.commands += 1;
            let now = self.now;
            replies.extend(self.servers[server].stream_command(now, RequestId(wire), c, args));
        }
        if !replies.is_empty() {
            self.stream_chunk(wire, replies);
        }
        self.pump_streams(server);
    }

    /// A write reaches a server of its own framing (the ZooKeeper model):
    /// it reads the bytes, its replies go back.
    fn tcp_raw_data(&mut self, wire: u64, server: usize, c: usize, data: &[u8]) {
        self.servers[server].advance(self.now);
        self.stream_stats.commands += 1;
        let now = self.now;
        let replies = self.servers[server].stream_bytes(now, RequestId(wire), c, data);
        if !replies.is_empty() {
            self.stream_chunk(wire, replies);
        }
        self.pump_streams(server);
    }

    /// Stream `wire` breaks now: the server's side closes at once, the
    /// client hears `Failed{Io}` once packets flow again (`from`).
    pub(super) fn tcp_break(&mut self, wire: u64, from: Millis, why: &str) {
        let Some(conn) = self.tcp.remove(&wire) else {
            return;
        };
        let (c, id, endpoint) = (conn.client, conn.id, conn.endpoint);
        self.log(|| format!("   stream c{c}#{} breaks: {why}", id.0));
        self.stream_stats.breaks += 1;
        self.streams.remove(&wire);
        let server = self.routes[endpoint].1;
        self.servers[server].stream_closed(RequestId(wire));
        let at = from.max(self.now) + self.delay();
        let error = TransportError::Io(why.to_string());
        self.push(
            at,
            Ev::Deliver {
                client: c,
                input: Input::Failed { id, error },
            },
        );
    }

    /// A seeded cut of a connection's bytes (`stream_cut`): how many of
    /// `len` bytes get through before the connection ends, if it is cut.
    pub(super) fn tcp_cut_at(&mut self, wire: u64, len: usize) -> Option<usize> {
        let tcp = self.streams.get(&wire).is_some_and(|s| s.tcp);
        if !tcp || len < 2 || !(self.faulty() && self.rng.chance(self.net.stream_cut)) {
            return None;
        }
        Some(1 + self.rng.below(len as u64 - 1) as usize)
    }

    /// Ends a cut connection at `at` (after its last bytes): the peer's
    /// close (`StreamEnd`) or a reset (`Failed{Io}`).
    pub(super) fn tcp_end_cut(&mut self, wire: u64, at: Millis) {
        let Some(s) = self.streams.remove(&wire) else {
            return;
        };
        let (c, id) = (s.client, s.id);
        self.tcp.remove(&wire);
        let server = self.routes[s.endpoint].1;
        self.servers[server].stream_closed(RequestId(wire));
        self.stream_stats.cuts += 1;
        let input = if self.rng.chance(0.5) {
            Input::StreamEnd { id }
        } else {
            let error = TransportError::Io("connection reset mid-reply".into());
            Input::Failed { id, error }
        };
        self.log(|| format!("   stream c{c}#{} cut mid-reply", id.0));
        self.push(at, Ev::Deliver { client: c, input });
    }

    /// The client closed stream `wire`: the server's side closes after the
    /// writes already on their way.
    pub(super) fn tcp_close(&mut self, wire: u64) {
        let Some(conn) = self.tcp.get(&wire) else {
            return;
        };
        if !conn.accepted {
            self.tcp.remove(&wire);
            return;
        }
        let (server, last_arrival) = (self.routes[conn.endpoint].1, conn.last_arrival);
        let at = (self.now + self.delay()).max(last_arrival);
        self.push(at, Ev::ServerStreamClosed { server, wire });
    }

    /// An endpoint went down: its connections are gone on the server's side
    /// (the client side is reset with the other streams).
    pub(super) fn tcp_outage(&mut self, endpoint: usize) {
        self.tcp
            .retain(|_, conn| conn.endpoint != endpoint || !conn.accepted);
    }
}
