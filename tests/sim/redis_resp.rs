//! The model's own protocol: what a Redis node answers on a byte-stream
//! connection (RESP2, as redis-server 7 does for a client that sent no
//! `HELLO 3`). The world frames the client's bytes into commands (arrays
//! of bulk strings) and hands them here one by one, with the connection's
//! wire id; the reply's bytes go back on that connection, in order.
//!
//! - `requirepass`: with a password (the model's `token`), every command
//!   but `AUTH` is refused with `-NOAUTH` until an `AUTH <password>` (or
//!   `AUTH default <password>`) succeeded; a wrong one is `-WRONGPASS`.
//!   Without one, `AUTH` is an error, as Redis answers it.
//! - `SELECT 0` only (the model has one keyspace), `CLIENT SETNAME`,
//!   `PING`.
//! - Every other command runs through the same execution path as the HTTP
//!   protocols' (`RedisModel::run`: the scripts, `EVALSHA` and its
//!   `NOSCRIPT`, the fencing log).
//! - Pub/sub: `SUBSCRIBE` / `UNSUBSCRIBE` put the connection in (and out
//!   of) Redis' subscribed state, where only those and `PING` are allowed;
//!   each channel is confirmed by a `subscribe` array with the
//!   connection's count; a `PUBLISH` (the release script's too) queues a
//!   `message` array on every connection subscribed to the channel, through
//!   the same stream queue as the HTTP subscriptions.

use edgelock::core::{Millis, RequestId};

use super::{MValue, RedisModel};

/// One client connection's state on the node.
#[derive(Clone, Debug, Default)]
pub(super) struct RespConn {
    /// `AUTH` succeeded (or no password is required).
    authed: bool,
    /// Channels subscribed, in the order asked for (subscribed state when
    /// not empty).
    pub(super) channels: Vec<Vec<u8>>,
}

impl RedisModel {
    /// Runs one command of connection `conn` (its wire id) from `client`;
    /// the reply, RESP-encoded.
    pub(super) fn resp_command(
        &mut self,
        now: Millis,
        conn: RequestId,
        client: usize,
        args: &[Vec<u8>],
    ) -> Vec<u8> {
        self.requests += 1;
        self.last_seen = self.last_seen.max(now);
        let authed = self.token.is_none();
        let state = self.resp_conns.entry(conn.0).or_insert_with(|| RespConn {
            authed,
            channels: Vec::new(),
        });
        let name = args
            .first()
            .map(|n| String::from_utf8_lossy(n).to_ascii_uppercase())
            .unwrap_or_default();
        if name == "AUTH" {
            return self.auth(conn, &args[1..]);
        }
        if !state.authed {
            return encode(&MValue::Err("NOAUTH Authentication required.".into()));
        }
        let subscribed = !state.channels.is_empty();
        match name.as_str() {
            "SUBSCRIBE" if args.len() > 1 => self.subscribe(conn, &args[1..]),
            "UNSUBSCRIBE" => self.unsubscribe(conn, &args[1..]),
            "PING" if subscribed => encode(&MValue::Arr(vec![
                MValue::Bulk(b"pong".to_vec()),
                MValue::Bulk(Vec::new()),
            ])),
            _ if subscribed => encode(&MValue::Err(format!(
                "ERR Can't execute '{}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context",
                name.to_ascii_lowercase()
            ))),
            "PING" => encode(&MValue::Status("PONG".into())),
            "SELECT" => match args.get(1).map(Vec::as_slice) {
                Some(b"0") if args.len() == 2 => encode(&MValue::Status("OK".into())),
                _ => encode(&MValue::Err(
                    "ERR DB index is out of range (the model has database 0 only)".into(),
                )),
            },
            "CLIENT" if args.len() == 3 && args[1].eq_ignore_ascii_case(b"SETNAME") => {
                encode(&MValue::Status("OK".into()))
            }
            _ => encode(&self.run(args, Some(client), now)),
        }
    }

    /// `AUTH [user] password`, as Redis 6+ answers it.
    fn auth(&mut self, conn: RequestId, args: &[Vec<u8>]) -> Vec<u8> {
        let Some(password) = self.token.clone() else {
            return encode(&MValue::Err(
                "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?".into(),
            ));
        };
        let ok = match args {
            [p] => *p == password.as_bytes(),
            [user, p] => user.as_slice() == b"default" && *p == password.as_bytes(),
            _ => {
                return encode(&MValue::Err(
                    "ERR wrong number of arguments for 'auth' command".into(),
                ))
            }
        };
        let state = self.resp_conns.entry(conn.0).or_default();
        state.authed = ok;
        if ok {
            encode(&MValue::Status("OK".into()))
        } else {
            encode(&MValue::Err(
                "WRONGPASS invalid username-password pair or user is disabled.".into(),
            ))
        }
    }

    /// One `subscribe` confirmation per channel, counting the connection's
    /// distinct channels.
    fn subscribe(&mut self, conn: RequestId, channels: &[Vec<u8>]) -> Vec<u8> {
        let state = self.resp_conns.entry(conn.0).or_default();
        let mut out = Vec::new();
        for ch in channels {
            if !state.channels.contains(ch) {
                state.channels.push(ch.clone());
                self.subscriptions += 1;
            }
            out.extend(encode(&confirmation("subscribe", ch, state.channels.len())));
        }
        out
    }

    /// One `unsubscribe` confirmation per channel (every channel when none
    /// is named); at zero the connection leaves the subscribed state.
    fn unsubscribe(&mut self, conn: RequestId, channels: &[Vec<u8>]) -> Vec<u8> {
        let state = self.resp_conns.entry(conn.0).or_default();
        let channels = if channels.is_empty() {
            state.channels.clone()
        } else {
            channels.to_vec()
        };
        let mut out = Vec::new();
        for ch in &channels {
            state.channels.retain(|c| c != ch);
            out.extend(encode(&confirmation(
                "unsubscribe",
                ch,
                state.channels.len(),
            )));
        }
        out
    }

    /// Queues `message` arrays for the connections subscribed to `channel`;
    /// how many there were.
    pub(super) fn resp_publish(&mut self, channel: &[u8], payload: &[u8]) -> usize {
        let mut n = 0;
        for (wire, state) in &self.resp_conns {
            if state.channels.iter().any(|c| c == channel) {
                let message = MValue::Arr(vec![
                    MValue::Bulk(b"message".to_vec()),
                    MValue::Bulk(channel.to_vec()),
                    MValue::Bulk(payload.to_vec()),
                ]);
                self.out.push((RequestId(*wire), encode(&message)));
                n += 1;
            }
        }
        n
    }

    /// Connections in the subscribed state right now.
    pub(super) fn resp_subscribed(&self) -> usize {
        self.resp_conns
            .values()
            .filter(|c| !c.channels.is_empty())
            .count()
    }
}

/// `[kind, channel, count]`.
fn confirmation(kind: &str, channel: &[u8], count: usize) -> MValue {
    MValue::Arr(vec![
        MValue::Bulk(kind.as_bytes().to_vec()),
        MValue::Bulk(channel.to_vec()),
        MValue::Int(count as i64),
    ])
}

/// A reply in RESP2.
pub(super) fn encode(v: &MValue) -> Vec<u8> {
    let mut out = Vec::new();
    encode_into(v, &mut out);
    out
}

fn encode_into(v: &MValue, out: &mut Vec<u8>) {
    match v {
        MValue::Nil => out.extend_from_slice(b"$-1\r\n"),
        MValue::Int(i) => out.extend_from_slice(format!(":{i}\r\n").as_bytes()),
        MValue::Bulk(b) => {
            out.extend_from_slice(format!("${}\r\n", b.len()).as_bytes());
            out.extend_from_slice(b);
            out.extend_from_slice(b"\r\n");
        }
        // Status and error lines cannot hold a line break: Redis replaces them.
        MValue::Status(s) => out.extend_from_slice(format!("+{}\r\n", one_line(s)).as_bytes()),
        MValue::Err(e) => out.extend_from_slice(format!("-{}\r\n", one_line(e)).as_bytes()),
        MValue::Arr(items) => {
            out.extend_from_slice(format!("*{}\r\n", items.len()).as_bytes());
            for item in items {
                encode_into(item, out);
            }
        }
    }
}

fn one_line(s: &str) -> String {
    s.replace(['\r', '\n'], " ")
}
