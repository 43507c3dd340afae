//! The RESP codec (`core::redis::resp`) against a real `redis-server`
//! (started by each test through `edgelock-devtools`, stopped when it
//! ends): commands encoded by `encode_command` and pipelined on a plain
//! `std::net::TcpStream`, replies read in small pieces into `RespDecoder`.
//! RESP2 and RESP3 (`HELLO 3`), pub/sub in both (RESP3 push frames), and
//! `AUTH` with the default user's password and with an ACL user.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use edgelock::core::redis::{RedisCommand, RedisValue};
use edgelock::internals::redis::resp::{encode_command, Frame, RespDecoder};
use edgelock_devtools::redis::{RedisOptions, RedisServer};

const TIMEOUT: Duration = Duration::from_secs(5);

/// One connection: a socket, the decoder of what it receives, and how many
/// bytes each read asks for (small, so that frames arrive cut).
struct Conn {
    stream: TcpStream,
    decoder: RespDecoder,
    read_size: usize,
}

impl Conn {
    fn open(server: &RedisServer, read_size: usize) -> Conn {
        let stream = TcpStream::connect(server.addr()).expect("connect to redis-server");
        stream.set_read_timeout(Some(TIMEOUT)).unwrap();
        stream.set_nodelay(true).unwrap();
        Conn {
            stream,
            decoder: RespDecoder::new(),
            read_size,
        }
    }

    /// Writes `cmds` in one buffer (a pipeline).
    fn send(&mut self, cmds: &[RedisCommand]) {
        let mut out = Vec::new();
        for c in cmds {
            encode_command(c, &mut out);
        }
        self.stream.write_all(&out).unwrap();
    }

    /// The next frame, reading `read_size` bytes at a time until it is whole.
    fn frame(&mut self) -> Frame {
        let mut buf = vec![0u8; self.read_size];
        loop {
            if let Some(f) = self.decoder.next_frame().expect("a valid RESP stream") {
                return f;
            }
            let n = self.stream.read(&mut buf).expect("a reply within 5 s");
            assert!(n > 0, "redis-server closed the connection");
            self.decoder.feed(&buf[..n]);
        }
    }

    /// The next frame, which must be a reply.
    fn reply(&mut self) -> RedisValue {
        match self.frame() {
            Frame::Reply(v) => v,
            Frame::Push(items) => panic!("a push where a reply was expected: {items:?}"),
        }
    }

    /// Sends `cmds` and reads one reply each.
    fn call(&mut self, cmds: &[RedisCommand]) -> Vec<RedisValue> {
        self.send(cmds);
        cmds.iter().map(|_| self.reply()).collect()
    }
}

fn cmd(args: &[&[u8]]) -> RedisCommand {
    RedisCommand {
        args: args.iter().map(|a| a.to_vec()).collect(),
    }
}

fn bulk(b: &[u8]) -> RedisValue {
    RedisValue::Bulk(b.to_vec())
}

fn error_text(v: &RedisValue) -> &str {
    match v {
        RedisValue::Error(e) => e,
        other => panic!("an error reply expected, got {other:?}"),
    }
}

/// The value after `key` in a flattened map reply.
fn map_get<'a>(map: &'a RedisValue, key: &[u8]) -> Option<&'a RedisValue> {
    let RedisValue::Array(items) = map else {
        panic!("a map expected, got {map:?}");
    };
    items
        .chunks(2)
        .find(|kv| kv[0] == bulk(key))
        .and_then(|kv| kv.get(1))
}

const BINARY_KEY: &[u8] = b"bin\r\n$3\r\nkey\0\xff";

#[test]
fn pipelined_commands_get_their_replies_in_order_however_the_reads_cut_them() {
    let server = RedisServer::start().expect("redis-server");
    for (i, read_size) in [1usize, 2, 3, 7, 64, 16 * 1024].into_iter().enumerate() {
        let mut c = Conn::open(&server, read_size);
        let counter = format!("counter{i}");
        let replies = c.call(&[
            cmd(&[b"SELECT", b"1"]),
            cmd(&[b"CLIENT", b"SETNAME", b"edgelock-resp-test"]),
            cmd(&[b"CLIENT", b"GETNAME"]),
            cmd(&[b"SET", b"k", b"v\r\nw"]),
            cmd(&[b"GET", b"k"]),
            cmd(&[b"GET", b"missing"]),
            cmd(&[b"INCR", counter.as_bytes()]),
            cmd(&[b"INCR", counter.as_bytes()]),
            cmd(&[
                b"EVAL",
                b"return {1, 'two', {3, ARGV[1]}, false}",
                b"0",
                b"x\r\ny",
            ]),
            cmd(&[b"EVAL", b"return redis.error_reply('ERR boom')", b"0"]),
            cmd(&[b"EVALSHA", &[b'0'; 40], b"0"]),
            cmd(&[b"SET", BINARY_KEY, BINARY_KEY]),
            cmd(&[b"GET", BINARY_KEY]),
            cmd(&[b"STRLEN", BINARY_KEY]),
        ]);
        let ok = bulk(b"OK");
        assert_eq!(replies[0], ok);
        assert_eq!(replies[1], ok);
        assert_eq!(replies[2], bulk(b"edgelock-resp-test"));
        assert_eq!(replies[3], ok);
        assert_eq!(replies[4], bulk(b"v\r\nw"));
        assert_eq!(replies[5], RedisValue::Nil);
        assert_eq!(replies[6], RedisValue::Int(1));
        assert_eq!(replies[7], RedisValue::Int(2));
        // Lua's false is a RESP2 null; the array is cut at nothing else.
        assert_eq!(
            replies[8],
            RedisValue::Array(vec![
                RedisValue::Int(1),
                bulk(b"two"),
                RedisValue::Array(vec![RedisValue::Int(3), bulk(b"x\r\ny")]),
                RedisValue::Nil,
            ])
        );
        assert_eq!(error_text(&replies[9]), "ERR boom");
        assert!(
            error_text(&replies[10]).starts_with("NOSCRIPT"),
            "{:?}",
            replies[10]
        );
        assert_eq!(replies[11], ok);
        assert_eq!(replies[12], bulk(BINARY_KEY));
        assert_eq!(replies[13], RedisValue::Int(BINARY_KEY.len() as i64));
        assert!(!c.decoder.in_frame());
    }
}

#[test]
fn resp3_replies_map_onto_redis_values() {
    let server = RedisServer::start().expect("redis-server");
    let mut c = Conn::open(&server, 5);
    let hello = c.call(&[cmd(&[b"HELLO", b"3"])]).remove(0);
    assert_eq!(map_get(&hello, b"server"), Some(&bulk(b"redis")));
    assert_eq!(map_get(&hello, b"proto"), Some(&RedisValue::Int(3)));
    let replies = c.call(&[
        cmd(&[b"HSET", b"h", b"f", b"v"]),
        cmd(&[b"HGETALL", b"h"]),
        cmd(&[b"ZADD", b"z", b"1.5", b"m"]),
        cmd(&[b"ZSCORE", b"z", b"m"]),
        cmd(&[b"SMEMBERS", b"none"]),
        cmd(&[b"GET", b"none"]),
        cmd(&[b"EVAL", b"return redis.setresp(3) or true", b"0"]),
        cmd(&[b"EVALSHA", &[b'f'; 40], b"0"]),
    ]);
    assert_eq!(replies[0], RedisValue::Int(1));
    // A map, flattened.
    assert_eq!(replies[1], RedisValue::Array(vec![bulk(b"f"), bulk(b"v")]));
    assert_eq!(replies[2], RedisValue::Int(1));
    // A double, as its text.
    assert_eq!(replies[3], bulk(b"1.5"));
    // An empty set.
    assert_eq!(replies[4], RedisValue::Array(vec![]));
    // The RESP3 null.
    assert_eq!(replies[5], RedisValue::Nil);
    // A boolean.
    assert_eq!(replies[6], RedisValue::Int(1));
    assert!(error_text(&replies[7]).starts_with("NOSCRIPT"));
}

/// Subscribes `sub` to `channel`, publishes `payload` from `publisher`, and
/// returns the two frames `sub` receives: the confirmation and the message.
fn subscribe_and_publish(
    sub: &mut Conn,
    publisher: &mut Conn,
    channel: &[u8],
    payload: &[u8],
) -> (Frame, Frame) {
    sub.send(&[cmd(&[b"SUBSCRIBE", channel])]);
    let confirmation = sub.frame();
    let published = publisher.call(&[cmd(&[b"PUBLISH", channel, payload])]);
    assert_eq!(published, vec![RedisValue::Int(1)]);
    (confirmation, sub.frame())
}

const CHANNEL: &[u8] = b"edgelock:wake:0123456789abcdef0123456789abcdef";
const PAYLOAD: &[u8] = b"released:42\r\n*1\r\n";

#[test]
fn resp3_subscriptions_arrive_as_push_frames() {
    let server = RedisServer::start().expect("redis-server");
    let mut sub = Conn::open(&server, 3);
    let mut publisher = Conn::open(&server, 4096);
    assert!(matches!(
        sub.call(&[cmd(&[b"HELLO", b"3"])])[0],
        RedisValue::Array(_)
    ));
    let (confirmation, message) = subscribe_and_publish(&mut sub, &mut publisher, CHANNEL, PAYLOAD);
    assert_eq!(
        confirmation,
        Frame::Push(vec![bulk(b"subscribe"), bulk(CHANNEL), RedisValue::Int(1)])
    );
    assert_eq!(
        message,
        Frame::Push(vec![bulk(b"message"), bulk(CHANNEL), bulk(PAYLOAD)])
    );
    // In RESP3 a subscribed connection still answers commands: replies and
    // pushes are told apart on the one stream.
    publisher.call(&[cmd(&[b"PUBLISH", CHANNEL, b"second"])]);
    sub.send(&[cmd(&[b"PING"])]);
    let frames = [sub.frame(), sub.frame()];
    assert!(frames.contains(&Frame::Reply(bulk(b"PONG"))), "{frames:?}");
    assert!(
        frames.contains(&Frame::Push(vec![
            bulk(b"message"),
            bulk(CHANNEL),
            bulk(b"second")
        ])),
        "{frames:?}"
    );
}

#[test]
fn resp2_subscriptions_arrive_as_arrays() {
    let server = RedisServer::start().expect("redis-server");
    let mut sub = Conn::open(&server, 2);
    let mut publisher = Conn::open(&server, 4096);
    let (confirmation, message) = subscribe_and_publish(&mut sub, &mut publisher, CHANNEL, PAYLOAD);
    assert_eq!(
        confirmation,
        Frame::Reply(RedisValue::Array(vec![
            bulk(b"subscribe"),
            bulk(CHANNEL),
            RedisValue::Int(1)
        ]))
    );
    assert_eq!(
        message,
        Frame::Reply(RedisValue::Array(vec![
            bulk(b"message"),
            bulk(CHANNEL),
            bulk(PAYLOAD)
        ]))
    );
}

const PASSWORD: &str = "pw-7f3a9c21e4b8d605-secret";
const WRONG: &str = "wrong-0c1d2e3f4a5b-secret";

/// A wrong password is an error reply that does not hold it; the right one
/// opens the connection.
fn check_auth(c: &mut Conn, user: Option<&[u8]>) {
    let auth = |password: &str| {
        let mut args: Vec<&[u8]> = vec![b"AUTH"];
        args.extend(user);
        args.push(password.as_bytes());
        cmd(&args)
    };
    let refused = c.call(&[cmd(&[b"SET", b"k", b"v"]), auth(WRONG)]);
    for r in &refused {
        let text = error_text(r);
        assert!(!text.contains(WRONG) && !text.contains(PASSWORD), "{text}");
    }
    assert!(
        error_text(&refused[1]).starts_with("WRONGPASS"),
        "{refused:?}"
    );
    let accepted = c.call(&[auth(PASSWORD), cmd(&[b"SET", b"k", b"v"])]);
    assert_eq!(accepted, vec![bulk(b"OK"), bulk(b"OK")]);
}

#[test]
fn auth_with_the_default_users_password() {
    // `requirepass` set once the server is up: edgelock-devtools waits for
    // an unauthenticated PING to answer PONG, which `--requirepass` at
    // start would refuse (NOAUTH). Both set the default user's password.
    let server = RedisServer::start().expect("redis-server");
    let mut admin = Conn::open(&server, 4096);
    let set = admin.call(&[cmd(&[
        b"CONFIG",
        b"SET",
        b"requirepass",
        PASSWORD.as_bytes(),
    ])]);
    assert_eq!(set, vec![bulk(b"OK")]);
    let mut c = Conn::open(&server, 3);
    check_auth(&mut c, None);
    // HELLO 3 with AUTH and SETNAME: a connection's set-up in one round trip.
    let mut c = Conn::open(&server, 3);
    let hello = c.call(&[cmd(&[
        b"HELLO",
        b"3",
        b"AUTH",
        b"default",
        PASSWORD.as_bytes(),
        b"SETNAME",
        b"edgelock",
    ])]);
    assert_eq!(map_get(&hello[0], b"proto"), Some(&RedisValue::Int(3)));
}

#[test]
fn auth_as_an_acl_user() {
    // The default user may only PING (what edgelock-devtools needs to see
    // the server up); `edgelock` has a password and every right.
    let mut extra_args = Vec::new();
    for rules in [
        "default on nopass -@all +ping".to_string(),
        format!("edgelock on >{PASSWORD} ~* &* +@all"),
    ] {
        extra_args.push("--user".to_string());
        extra_args.extend(rules.split(' ').map(String::from));
    }
    let server = RedisServer::start_with(RedisOptions {
        extra_args,
        ..RedisOptions::default()
    })
    .expect("redis-server");
    let mut c = Conn::open(&server, 3);
    check_auth(&mut c, Some(b"edgelock"));
}
