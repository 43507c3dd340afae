//! One Redis node reached over its own protocol: a single TCP (or TLS)
//! stream carrying pipelined commands, replies matched in order.
//!
//! The engine hands a command with the request id it tracks (owner and
//! deadline live in the runtime's request table, exactly as for HTTP); this
//! connection writes it, and turns the replies read back into answers for
//! those ids. The stream is opened on the first command; `AUTH`, `SELECT`
//! and `CLIENT SETNAME` go first, and commands follow once they are
//! answered (a refused `SELECT` must not let a lock command run on database
//! 0), pipelined from then on.
//!
//! Failures keep the HTTP semantics the recipes rely on:
//! - a set-up the server refused (a wrong password, a database it does not
//!   have): nothing ran (`Refused`, reported like an HTTP 401: `BACKEND`);
//! - a stream that never opened: its commands were not sent (`NotSent`,
//!   safe to retry); the next command opens a new one, as an HTTP request
//!   would connect anew (the tasks' retry delays pace the attempts, and the
//!   engine backs off a subscriber's reopening);
//! - a stream that breaks with commands in flight: their outcome is unknown
//!   (`Transport`: the recipes clean up owner-checked, as for a lost answer);
//! - a command past its deadline: the stream may be half-open, so it is
//!   closed and the other commands in flight fail as unknown too. A half-open
//!   connection is therefore noticed within one request timeout.
//! - a reply the decoder cannot read: the stream is closed likewise.
//!
//! A connection in [`Mode::Subscriber`] carries the client's wake-up
//! subscriptions on that node instead: one stream for every channel its
//! waiters listen on (`SUBSCRIBE` / `UNSUBSCRIBE` as they come and go), what
//! arrives reported as [`SubNews`].

use std::collections::{BTreeMap, VecDeque};

use super::address::RespAddress;
use super::resp::{encode_command, Frame, RespDecoder};
use super::round::NodeError;
use super::value::{RedisCommand, RedisValue};
use crate::core::outbox::Outbox;
use crate::core::{Redacted, RequestId, StreamOpen};

/// The name the connection gives itself (`CLIENT SETNAME`), so that an
/// operator sees edgelock's connections in `CLIENT LIST`.
const CLIENT_NAME: &str = "edgelock";

/// An answer for a command the engine tracks.
pub(crate) type Answer = (RequestId, Result<RedisValue, NodeError>);

/// What a connection carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// The engine's commands, answered in order.
    Commands,
    /// Wake-up subscriptions (Redis' subscribed state: only `SUBSCRIBE`
    /// and `UNSUBSCRIBE` are sent once set up).
    Subscriber,
}

/// What happened on a subscriber connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum SubNews {
    /// The server confirmed `channel`: no later publish on it is missed.
    Confirmed(String),
    /// A message on `channel`.
    Message(String, Vec<u8>),
    /// The stream is gone: every subscription with it.
    Down,
}

/// What a reply read from the stream answers, oldest first.
#[derive(Debug)]
enum Awaiting {
    /// A set-up command (`AUTH`, `SELECT`): an error reply fails the stream.
    Setup(&'static str),
    /// `CLIENT SETNAME`: some hosted Redis refuse it; that is no failure.
    Name,
    /// A command of the engine.
    Command(RequestId),
}

#[derive(Debug)]
enum State {
    /// No stream; the next command opens one.
    Closed,
    /// `Transmit::Open` is out: once it opens, `setup` is written; the
    /// engine's commands (`queued`) wait for the set-up's answers.
    Opening {
        stream: RequestId,
        setup: Vec<u8>,
        queued: Vec<u8>,
    },
    /// Connected, the set-up's answers still awaited.
    Handshake { stream: RequestId, queued: Vec<u8> },
    /// Ready: commands are written at once.
    Open { stream: RequestId },
}

/// One node's connection. `Debug` shows no password (the address redacts it).
#[derive(Debug)]
pub(crate) struct Connection {
    address: RespAddress,
    connect_timeout_ms: u64,
    state: State,
    awaiting: VecDeque<Awaiting>,
    decoder: RespDecoder,
    mode: Mode,
    /// Subscriber: the channels subscribed (or asked for), confirmed or not.
    channels: BTreeMap<String, bool>,
    news: Vec<SubNews>,
}

impl Connection {
    /// A connection to `address`, not opened yet. `connect_timeout_ms` bounds
    /// the driver's connect (the commands' own deadlines bound it too).
    pub(crate) fn new(address: RespAddress, connect_timeout_ms: u64, mode: Mode) -> Self {
        Connection {
            address,
            connect_timeout_ms,
            state: State::Closed,
            awaiting: VecDeque::new(),
            decoder: RespDecoder::new(),
            mode,
            channels: BTreeMap::new(),
            news: Vec::new(),
        }
    }

    /// The address, to name the node in messages (without its password).
    pub(crate) fn address(&self) -> &RespAddress {
        &self.address
    }

    /// Whether `id` is this connection's stream.
    pub(crate) fn owns(&self, id: RequestId) -> bool {
        self.stream() == Some(id)
    }

    fn stream(&self) -> Option<RequestId> {
        match self.state {
            State::Opening { stream, .. }
            | State::Handshake { stream, .. }
            | State::Open { stream } => Some(stream),
            State::Closed => None,
        }
    }

    /// Sends `cmd` as request `id` (tracked by the caller), opening the
    /// stream first if there is none.
    pub(crate) fn send(&mut self, out: &mut Outbox, id: RequestId, cmd: &RedisCommand) {
        if matches!(self.state, State::Closed) {
            self.open(out);
        }
        let mut bytes = Vec::new();
        encode_command(cmd, &mut bytes);
        self.awaiting.push_back(Awaiting::Command(id));
        self.write(out, bytes);
    }

    /// Subscriber: listens on `channel` (opening the stream if there is
    /// none). `true` when it is confirmed already.
    pub(crate) fn subscribe(&mut self, out: &mut Outbox, channel: &str) -> bool {
        if let Some(confirmed) = self.channels.get(channel) {
            return *confirmed;
        }
        if matches!(self.state, State::Closed) {
            self.open(out);
        }
        self.channels.insert(channel.to_string(), false);
        let mut bytes = Vec::new();
        encode_command(&RedisCommand::new("SUBSCRIBE").arg(channel), &mut bytes);
        self.write(out, bytes);
        false
    }

    /// Subscriber: stops listening on `channel`.
    pub(crate) fn unsubscribe(&mut self, out: &mut Outbox, channel: &str) {
        if self.channels.remove(channel).is_none() {
            return;
        }
        if self.channels.is_empty() {
            // Nobody waits on this node any more: the stream goes.
            self.close(out);
            self.awaiting.clear();
            self.state = State::Closed;
            return;
        }
        let mut bytes = Vec::new();
        encode_command(&RedisCommand::new("UNSUBSCRIBE").arg(channel), &mut bytes);
        self.write(out, bytes);
    }

    /// Subscriber: whether any channel is subscribed (its stream is, or is
    /// being, open).
    pub(crate) fn in_use(&self) -> bool {
        !self.channels.is_empty()
    }

    /// What happened on a subscriber connection since the last call.
    pub(crate) fn take_news(&mut self) -> Vec<SubNews> {
        std::mem::take(&mut self.news)
    }

    /// Opens the stream and queues the set-up commands.
    fn open(&mut self, out: &mut Outbox) {
        let stream = out.request_id();
        out.open(StreamOpen {
            id: stream,
            host: self.address.host.clone(),
            port: self.address.port,
            tls: self.address.tls.then(|| self.address.host.clone()),
            timeout_ms: Some(self.connect_timeout_ms),
        });
        self.decoder = RespDecoder::new();
        let mut setup = Vec::new();
        for (cmd, awaiting) in self.setup_commands() {
            encode_command(&cmd, &mut setup);
            self.awaiting.push_back(awaiting);
        }
        self.state = State::Opening {
            stream,
            setup,
            queued: Vec::new(),
        };
    }

    /// `AUTH` (with the ACL user if any), `SELECT` when not database 0,
    /// `CLIENT SETNAME`.
    fn setup_commands(&self) -> Vec<(RedisCommand, Awaiting)> {
        let mut cmds = Vec::new();
        if let Some(password) = &self.address.password {
            let mut auth = RedisCommand::new("AUTH");
            if let Some(user) = &self.address.user {
                auth = auth.arg(user);
            }
            cmds.push((auth.arg(password), Awaiting::Setup("AUTH")));
        }
        if self.address.db != 0 {
            let select = RedisCommand::new("SELECT").arg(self.address.db.to_string());
            cmds.push((select, Awaiting::Setup("SELECT")));
        }
        let name = RedisCommand::new("CLIENT").arg("SETNAME").arg(CLIENT_NAME);
        cmds.push((name, Awaiting::Name));
        cmds
    }

    fn write(&mut self, out: &mut Outbox, bytes: Vec<u8>) {
        match &mut self.state {
            State::Opening { queued, .. } | State::Handshake { queued, .. } => {
                queued.extend_from_slice(&bytes)
            }
            State::Open { stream } => out.write(*stream, Redacted(bytes)),
            State::Closed => {}
        }
    }

    /// Input on this connection's stream; the answers it completes.
    pub(crate) fn on_input(&mut self, out: &mut Outbox, input: crate::core::Input) -> Vec<Answer> {
        use crate::core::Input;
        match input {
            Input::Opened { .. } => {
                if let State::Opening {
                    stream,
                    setup,
                    queued,
                } = &mut self.state
                {
                    let (stream, setup, queued) =
                        (*stream, std::mem::take(setup), std::mem::take(queued));
                    self.state = State::Handshake { stream, queued };
                    out.write(stream, Redacted(setup));
                }
                Vec::new()
            }
            Input::Chunk { data, .. } => self.on_bytes(out, &data),
            Input::StreamEnd { .. } => self.fail_all("the server closed the connection"),
            Input::Failed { error, .. } => self.fail_all(&error.to_string()),
            Input::Response { .. } => self.fail_all("an HTTP answer on a Redis connection"),
        }
    }

    fn on_bytes(&mut self, out: &mut Outbox, data: &[u8]) -> Vec<Answer> {
        self.decoder.feed(data);
        let mut answers = Vec::new();
        loop {
            let frame = match self.decoder.next_frame() {
                Ok(Some(frame)) => frame,
                Ok(None) => return answers,
                Err(e) => {
                    self.close(out);
                    answers.extend(self.fail_all(&format!("an unreadable reply ({e})")));
                    return answers;
                }
            };
            let value = match frame {
                Frame::Push(items) => {
                    self.on_subscriber_frame(items);
                    continue;
                }
                Frame::Reply(value) => value,
            };
            if self.mode == Mode::Subscriber && self.awaiting.is_empty() {
                if let RedisValue::Array(items) = value {
                    self.on_subscriber_frame(items);
                }
                continue;
            }
            match self.awaiting.pop_front() {
                Some(Awaiting::Command(id)) => answers.push((id, Ok(value))),
                Some(Awaiting::Name) => self.ready_if_set_up(out),
                Some(Awaiting::Setup(what)) => {
                    if let RedisValue::Error(e) = value {
                        self.close(out);
                        answers.extend(self.refuse_all(what, &e));
                        return answers;
                    }
                    self.ready_if_set_up(out);
                }
                None => {
                    self.close(out);
                    answers.extend(self.fail_all("a reply to no command"));
                    return answers;
                }
            }
        }
    }

    /// `subscribe` / `message` on a subscriber connection (RESP2 arrays or
    /// RESP3 pushes); anything else (`unsubscribe`) says nothing new.
    fn on_subscriber_frame(&mut self, items: Vec<RedisValue>) {
        let text = |v: Option<&RedisValue>| match v {
            Some(RedisValue::Bulk(b)) => Some(String::from_utf8_lossy(b).into_owned()),
            _ => None,
        };
        let (kind, channel) = (text(items.first()), text(items.get(1)));
        match (kind.as_deref(), channel, items.into_iter().nth(2)) {
            (Some("subscribe"), Some(ch), _) => {
                if let Some(confirmed) = self.channels.get_mut(&ch) {
                    *confirmed = true;
                    self.news.push(SubNews::Confirmed(ch));
                }
            }
            (Some("message"), Some(ch), Some(RedisValue::Bulk(payload)))
                if self.channels.contains_key(&ch) =>
            {
                self.news.push(SubNews::Message(ch, payload));
            }
            _ => {}
        }
    }

    /// Once every set-up command is answered, the commands queued behind
    /// them go out.
    fn ready_if_set_up(&mut self, out: &mut Outbox) {
        let set_up = !self
            .awaiting
            .iter()
            .any(|a| matches!(a, Awaiting::Setup(_) | Awaiting::Name));
        if let (true, State::Handshake { stream, queued }) = (set_up, &mut self.state) {
            let (stream, queued) = (*stream, std::mem::take(queued));
            self.state = State::Open { stream };
            if !queued.is_empty() {
                out.write(stream, Redacted(queued));
            }
        }
    }

    /// Command `id` is past its deadline: the stream may be half-open, so
    /// it is closed; the other commands in flight are answered as failed
    /// (outcome unknown). `id` itself is the caller's to answer.
    pub(crate) fn timed_out(&mut self, out: &mut Outbox, id: RequestId) -> Vec<Answer> {
        if !self
            .awaiting
            .iter()
            .any(|a| matches!(a, Awaiting::Command(c) if *c == id))
        {
            return Vec::new();
        }
        self.close(out);
        self.fail_all("the connection was reset after a command timed out")
            .into_iter()
            .filter(|(other, _)| *other != id)
            .collect()
    }

    /// Closes the stream of an idle connection (a closing client).
    pub(crate) fn shut(&mut self, out: &mut Outbox) {
        if self
            .awaiting
            .iter()
            .any(|a| matches!(a, Awaiting::Command(_)))
        {
            return;
        }
        self.close(out);
        self.awaiting.clear();
        self.state = State::Closed;
    }

    /// Asks the driver to close the stream (nothing more arrives for it).
    fn close(&mut self, out: &mut Outbox) {
        if let Some(stream) = self.stream() {
            out.cancel(stream);
        }
    }

    /// The stream is gone: every command waiting fails. Commands of a
    /// stream that never opened were not sent; otherwise they may have run.
    fn fail_all(&mut self, why: &str) -> Vec<Answer> {
        // Before the set-up was answered, no command was written.
        let never_opened = !matches!(self.state, State::Open { .. });
        let node = self.address.public_url();
        let error = |why: &str| {
            if never_opened {
                NodeError::NotSent(format!("cannot connect to {node}: {why}"))
            } else {
                NodeError::Transport(format!("connection to {node} lost: {why}"))
            }
        };
        let answers = self.drain(|_| error(why));
        self.closed();
        self.subscriptions_down();
        answers
    }

    /// A subscriber's stream is gone: its channels are to be asked for again.
    fn subscriptions_down(&mut self) {
        if self.mode == Mode::Subscriber && !self.channels.is_empty() {
            self.channels.clear();
            self.news.push(SubNews::Down);
        }
    }

    /// A set-up command was refused (a wrong password, a database that does
    /// not exist): nothing after it ran. The server answered and refused
    /// us, as an HTTP node answers 401 to a wrong token: `Refused`, which
    /// the user sees as `BACKEND`, not as a transport failure.
    fn refuse_all(&mut self, what: &str, reply: &str) -> Vec<Answer> {
        let reply = self.scrub(reply);
        let node = self.address.public_url();
        let refused = match what {
            "AUTH" => "refused authentication (AUTH)".to_string(),
            other => format!("refused {other}"),
        };
        let answers = self.drain(|_| NodeError::Refused(format!("{node} {refused}: {reply}")));
        self.closed();
        self.subscriptions_down();
        answers
    }

    fn drain(&mut self, error: impl Fn(RequestId) -> NodeError) -> Vec<Answer> {
        std::mem::take(&mut self.awaiting)
            .into_iter()
            .filter_map(|a| match a {
                Awaiting::Command(id) => Some((id, Err(error(id)))),
                Awaiting::Setup(_) | Awaiting::Name => None,
            })
            .collect()
    }

    fn closed(&mut self) {
        self.state = State::Closed;
    }

    /// Removes the password from a server's text (an error reply may quote
    /// what it was sent).
    pub(crate) fn scrub(&self, s: &str) -> String {
        let secrets: Vec<&str> = self.address.password.iter().map(String::as_str).collect();
        crate::core::error::sanitize_detail(s, &secrets)
    }
}

#[cfg(test)]
mod tests {
    use super::{Connection, Mode};
    use crate::core::outbox::Outbox;
    use crate::core::redis::address::RespAddress;
    use crate::core::redis::round::NodeError;
    use crate::core::redis::value::RedisCommand;
    use crate::core::{Input, LockError, RequestId, Transmit};

    /// A connection with a password, its stream opened and the set-up
    /// written, command `id` queued behind it.
    fn connected_with_a_command_queued(out: &mut Outbox) -> (Connection, RequestId, RequestId) {
        let address = RespAddress::parse("redis://:s3cret-pw@10.0.0.9:6380", None).unwrap();
        let mut c = Connection::new(address, 1_000, Mode::Commands);
        let id = out.request_id();
        c.send(out, id, &RedisCommand::new("GET").arg("k"));
        let stream = match out.poll_transmit() {
            Some(Transmit::Open(open)) => open.id,
            other => panic!("{other:?}"),
        };
        assert!(c.on_input(out, Input::Opened { id: stream }).is_empty());
        match out.poll_transmit() {
            Some(Transmit::Write { data, .. }) => assert!(data.0.starts_with(b"*2\r\n$4\r\nAUTH")),
            other => panic!("{other:?}"),
        }
        (c, stream, id)
    }

    /// A refused AUTH fails the command queued behind it as refused (the
    /// server answered: BACKEND, like an HTTP 401), never as transport;
    /// nothing ran, and the message names the node, not the password.
    #[test]
    fn a_refused_auth_fails_the_queued_commands_as_refused() {
        let mut out = Outbox::default();
        let (mut c, stream, id) = connected_with_a_command_queued(&mut out);
        let reply = b"-WRONGPASS invalid username-password pair (s3cret-pw)\r\n+OK\r\n".to_vec();
        let answers = c.on_input(
            &mut out,
            Input::Chunk {
                id: stream,
                data: reply,
            },
        );
        let [(answered, Err(e))] = answers.as_slice() else {
            panic!("{answers:?}");
        };
        assert_eq!(*answered, id);
        assert!(matches!(e, NodeError::Refused(_)), "{e:?}");
        assert!(!e.maybe_applied());
        let NodeError::Refused(message) = e else {
            unreachable!()
        };
        assert!(message.contains("redis://10.0.0.9:6380"), "{message}");
        assert!(message.contains("refused authentication"), "{message}");
        assert!(!message.contains("s3cret-pw"), "{message}");
        match e.to_lock_error("redis", "job") {
            err @ LockError::Backend { .. } => assert_eq!(err.code(), "BACKEND"),
            other => panic!("{other:?}"),
        }
        // The queued command was never written; the stream is closed.
        assert_eq!(out.poll_transmit(), Some(Transmit::Cancel(stream)));
        assert_eq!(out.poll_transmit(), None);
    }

    /// An accepted set-up lets the queued command out, once.
    #[test]
    fn an_accepted_set_up_writes_the_queued_command() {
        let mut out = Outbox::default();
        let (mut c, stream, id) = connected_with_a_command_queued(&mut out);
        let ok = b"+OK\r\n+OK\r\n".to_vec();
        assert!(c
            .on_input(
                &mut out,
                Input::Chunk {
                    id: stream,
                    data: ok
                }
            )
            .is_empty());
        match out.poll_transmit() {
            Some(Transmit::Write { id: s, data }) => {
                assert_eq!(s, stream);
                assert!(data.0.starts_with(b"*2\r\n$3\r\nGET"));
            }
            other => panic!("{other:?}"),
        }
        let answers = c.on_input(
            &mut out,
            Input::Chunk {
                id: stream,
                data: b"$-1\r\n".to_vec(),
            },
        );
        assert!(
            matches!(answers.as_slice(), [(a, Ok(_))] if *a == id),
            "{answers:?}"
        );
    }
}
