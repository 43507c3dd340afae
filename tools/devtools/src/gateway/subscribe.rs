//! `/subscribe/<channel>[/<channel>...]` and `/psubscribe/<pattern>[/...]`:
//! Redis pub/sub as a server-sent-events stream, framed the way
//! `@upstash/redis` 1.39 reads it (`pkg/commands/subscribe.ts`,
//! `psubscribe.ts` and the stream loop in `pkg/http.ts`) and the Upstash
//! docs show it (`redis/features/restapi.mdx`, "Subscribe & Publish").
//!
//! The client opens one `POST {url}/subscribe/{channel}` per channel (the
//! channel is joined into the URL unencoded, so `fetch` percent-encodes
//! what it must), with `Accept: text/event-stream`, `Cache-Control:
//! no-cache`, `Connection: keep-alive`, its usual headers and the body `[]`.
//! It splits the response body on `\n`, keeps the lines starting with
//! `data: ` and splits the rest at its first commas:
//!
//! ```text
//! data: subscribe,<channel>,<count>
//! data: message,<channel>,<payload>
//! data: psubscribe,<pattern>,<count>
//! data: pmessage,<pattern>,<channel>,<payload>
//! ```
//!
//! Each event is followed by a blank line (plain SSE, so `EventSource`
//! works too; the client ignores it). Payloads are the raw published bytes,
//! never base64, whatever `Upstash-Encoding` says: the client does not
//! base64-decode them; it `JSON.parse`s `message` payloads when it can (else
//! keeps the string) and `pmessage` payloads always (a bare string becomes an
//! `error` event on its side). A payload containing line breaks is sent the
//! SSE way, one `data: ` line per line; an `EventSource` rejoins them with
//! `\n`, while `@upstash/redis` sees each line as a separate event (its
//! limit, as is a channel name containing a comma). Several channels in one
//! request are path segments, like every path-form argument.
//!
//! Every subscription owns a dedicated Redis connection (never from the
//! command pool) and two threads: the HTTP connection's thread forwards Redis
//! push messages, a scoped watcher blocks reading the client socket. A read
//! of 0 bytes (client gone) or an error shuts the Redis socket down, which
//! ends the forwarding loop at once, also when nothing is ever published; no
//! keepalive bytes are needed. Redis closing the connection ends the stream
//! with the terminating chunk. [`super::UpstashGateway::stop`] shuts both
//! sockets of every open subscription down and waits for them to finish.

use std::io::{self, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use super::protocol::{percent_decode, Reply};
use super::Shared;
use crate::resp::{encode_command, read_value, RespValue};

/// How often the watcher re-checks the stop flags while the client is idle
/// (client EOF and socket shutdowns wake it immediately; this is a fallback).
const WATCH_TICK: Duration = Duration::from_millis(250);

/// `SUBSCRIBE` or `PSUBSCRIBE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Channels,
    Patterns,
}

impl Kind {
    fn command(self) -> &'static [u8] {
        match self {
            Kind::Channels => b"SUBSCRIBE",
            Kind::Patterns => b"PSUBSCRIBE",
        }
    }

    fn confirmation(self) -> &'static [u8] {
        match self {
            Kind::Channels => b"subscribe",
            Kind::Patterns => b"psubscribe",
        }
    }
}

/// A subscription route: its kind and the percent-decoded channels or
/// patterns (path segments after the route, trailing slash ignored; empty
/// when none were given). `None` for every other path.
pub fn route(path: &str) -> Option<(Kind, Vec<Vec<u8>>)> {
    let (kind, rest) = if let Some(r) = path.strip_prefix("/subscribe") {
        (Kind::Channels, r)
    } else if let Some(r) = path.strip_prefix("/psubscribe") {
        (Kind::Patterns, r)
    } else {
        return None;
    };
    let rest = match rest {
        "" => "",
        r => r.strip_prefix('/')?,
    };
    let mut segments: Vec<&str> = rest.split('/').collect();
    if segments.last() == Some(&"") {
        segments.pop();
    }
    Some((kind, segments.iter().map(|s| percent_decode(s)).collect()))
}

/// One Redis push message as SSE bytes: its elements joined with `,`
/// (integers in decimal), one `data: ` line per line of that, then a blank
/// line.
pub fn sse_event(items: &[RespValue]) -> Vec<u8> {
    let mut data = Vec::new();
    for (i, it) in items.iter().enumerate() {
        if i > 0 {
            data.push(b',');
        }
        match it {
            RespValue::Bulk(b) => data.extend_from_slice(b),
            RespValue::Simple(s) | RespValue::Error(s) => data.extend_from_slice(s.as_bytes()),
            RespValue::Integer(n) => data.extend_from_slice(n.to_string().as_bytes()),
            RespValue::Nil | RespValue::Array(_) => {}
        }
    }
    let mut out = Vec::with_capacity(data.len() + 16);
    // Line breaks as SSE knows them: CRLF, LF or CR.
    let mut rest = &data[..];
    loop {
        out.extend_from_slice(b"data: ");
        match rest.iter().position(|&b| b == b'\n' || b == b'\r') {
            Some(i) => {
                out.extend_from_slice(&rest[..i]);
                out.push(b'\n');
                let skip = if rest[i] == b'\r' && rest.get(i + 1) == Some(&b'\n') {
                    2
                } else {
                    1
                };
                rest = &rest[i + skip..];
            }
            None => {
                out.extend_from_slice(rest);
                out.extend_from_slice(b"\n\n");
                return out;
            }
        }
    }
}

/// How the stream body is delimited on the wire.
#[derive(Clone, Copy)]
enum Framing {
    /// HTTP/1.1: one chunk per event, `0\r\n\r\n` when Redis ends it.
    Chunked,
    /// HTTP/1.0: raw bytes, the end is the connection closing.
    UntilClose,
}

fn frame(f: Framing, event: &[u8], out: &mut Vec<u8>) {
    match f {
        Framing::Chunked => {
            out.extend_from_slice(format!("{:x}\r\n", event.len()).as_bytes());
            out.extend_from_slice(event);
            out.extend_from_slice(b"\r\n");
        }
        Framing::UntilClose => out.extend_from_slice(event),
    }
}

fn connect(addr: &str, timeout: Duration) -> io::Result<TcpStream> {
    let addrs: Vec<SocketAddr> = addr.to_socket_addrs()?.collect();
    let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
    for a in addrs {
        match TcpStream::connect_timeout(&a, timeout) {
            Ok(s) => return Ok(s),
            Err(e) => last = e,
        }
    }
    Err(last)
}

fn io_reply(e: &io::Error) -> Reply {
    if matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    ) {
        Reply::error(504, "ERR redis did not answer in time")
    } else {
        Reply::error(503, &format!("ERR redis unavailable: {e}"))
    }
}

/// Opens the dedicated Redis connection and subscribes. On success returns
/// the connection and the confirmation events (one per channel); otherwise
/// the error reply to send instead of a stream.
fn open(
    shared: &Shared,
    kind: Kind,
    channels: &[Vec<u8>],
) -> Result<(TcpStream, BufReader<TcpStream>, Vec<u8>), Reply> {
    let timeout = shared.cfg.redis_timeout;
    let setup = || -> io::Result<(TcpStream, BufReader<TcpStream>)> {
        let s = connect(&shared.cfg.redis_addr, timeout)?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(timeout))?;
        s.set_write_timeout(Some(timeout))?;
        let reader = BufReader::new(s.try_clone()?);
        Ok((s, reader))
    };
    let (mut redis, mut reader) = setup().map_err(|e| io_reply(&e))?;
    let mut cmd: Vec<&[u8]> = vec![kind.command()];
    cmd.extend(channels.iter().map(Vec::as_slice));
    let mut out = Vec::new();
    encode_command(&cmd, &mut out);
    redis.write_all(&out).map_err(|e| io_reply(&e))?;
    let mut events = Vec::new();
    // Redis confirms each argument separately (duplicates included).
    for _ in channels {
        match read_value(&mut reader).map_err(|e| io_reply(&e))? {
            RespValue::Array(items)
                if items.first().and_then(RespValue::as_bytes) == Some(kind.confirmation()) =>
            {
                events.extend_from_slice(&sse_event(&items));
            }
            RespValue::Error(e) => return Err(Reply::error(400, &e)),
            other => {
                return Err(Reply::error(
                    502,
                    &format!("ERR unexpected reply to subscription: {other:?}"),
                ))
            }
        }
    }
    // From here on Redis speaks only when something is published.
    redis.set_read_timeout(None).map_err(|e| io_reply(&e))?;
    Ok((redis, reader, events))
}

/// Serves one authenticated subscription request on `client` until the
/// client disconnects, Redis closes the connection or the gateway stops.
/// An error before the stream starts (no channel, Redis unreachable, error
/// reply) is returned as a normal reply for the caller to send.
pub(super) fn serve(
    shared: &Shared,
    client: &TcpStream,
    method: &str,
    path: &str,
    kind: Kind,
    channels: Vec<Vec<u8>>,
    http10: bool,
) -> Result<(), Reply> {
    if !matches!(method, "GET" | "POST" | "PUT") {
        return Err(Reply::error(405, "ERR method not allowed"));
    }
    if channels.is_empty() {
        let name = String::from_utf8_lossy(kind.command()).to_ascii_lowercase();
        return Err(Reply::error(
            400,
            &format!("ERR wrong number of arguments for '{name}' command"),
        ));
    }
    let (redis, mut redis_reader, first) = open(shared, kind, &channels)?;
    let id = shared.next_sub.fetch_add(1, Ordering::SeqCst);
    if let Ok(clone) = redis.try_clone() {
        shared
            .subs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, clone);
    }
    shared.requests.fetch_add(1, Ordering::SeqCst);
    shared.commands.fetch_add(1, Ordering::SeqCst);
    if shared.cfg.verbose {
        // Path only: the query may carry `_token`.
        eprintln!("upstash-gateway: {method} {path} -> 200 (event stream)");
    }
    // stop() only reaches subscriptions registered before it ran.
    if !shared.stop.load(Ordering::SeqCst) {
        let framing = if http10 {
            Framing::UntilClose
        } else {
            Framing::Chunked
        };
        let _ = stream(shared, client, &redis, &mut redis_reader, &first, framing);
    }
    let _ = client.shutdown(Shutdown::Both);
    let _ = redis.shutdown(Shutdown::Both);
    shared
        .subs
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&id);
    if shared.cfg.verbose {
        eprintln!("upstash-gateway: {path} event stream closed");
    }
    Ok(())
}

fn stream(
    shared: &Shared,
    client: &TcpStream,
    redis: &TcpStream,
    redis_reader: &mut BufReader<TcpStream>,
    first: &[u8],
    framing: Framing,
) -> io::Result<()> {
    let mut w = client.try_clone()?;
    // A client that stops reading must not pin the thread forever.
    w.set_write_timeout(Some(shared.cfg.idle_timeout))?;
    let mut out = Vec::new();
    out.extend_from_slice(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n\
          Access-Control-Allow-Origin: *\r\nConnection: close\r\n",
    );
    if matches!(framing, Framing::Chunked) {
        out.extend_from_slice(b"Transfer-Encoding: chunked\r\n");
    }
    out.extend_from_slice(b"\r\n");
    frame(framing, first, &mut out);
    w.write_all(&out)?;

    let mut watch = client.try_clone()?;
    watch.set_read_timeout(Some(WATCH_TICK))?;
    let done = AtomicBool::new(false);
    thread::scope(|scope| -> io::Result<()> {
        // The watcher: client EOF (or a read error) shuts the Redis socket
        // down, which wakes the blocking read below at once. Bytes the
        // client sends meanwhile are discarded.
        let watcher = thread::Builder::new()
            .name("upstash-gateway-sub-watch".into())
            .spawn_scoped(scope, || {
                let mut buf = [0u8; 1024];
                while !done.load(Ordering::SeqCst) && !shared.stop.load(Ordering::SeqCst) {
                    match watch.read(&mut buf) {
                        Ok(0) => break,
                        Ok(_) => {}
                        Err(e)
                            if matches!(
                                e.kind(),
                                io::ErrorKind::WouldBlock
                                    | io::ErrorKind::TimedOut
                                    | io::ErrorKind::Interrupted
                            ) => {}
                        Err(_) => break,
                    }
                }
                let _ = redis.shutdown(Shutdown::Both);
            })?;
        let mut redis_ended = false;
        loop {
            let v = match read_value(redis_reader) {
                Ok(v) => v,
                Err(_) => {
                    // Redis closed the connection, or the watcher / stop()
                    // shut it down because the client is gone.
                    redis_ended = !watcher.is_finished() && !shared.stop.load(Ordering::SeqCst);
                    break;
                }
            };
            let RespValue::Array(items) = v else { continue };
            let mut out = Vec::new();
            frame(framing, &sse_event(&items), &mut out);
            if w.write_all(&out).is_err() {
                break;
            }
        }
        done.store(true, Ordering::SeqCst);
        if redis_ended && matches!(framing, Framing::Chunked) {
            // Redis went away: end the body cleanly.
            let _ = w.write_all(b"0\r\n\r\n");
        }
        // Wakes the watcher if it is still reading.
        let _ = client.shutdown(Shutdown::Both);
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_decode_channels_and_ignore_a_trailing_slash() {
        assert_eq!(
            route("/subscribe/ch"),
            Some((Kind::Channels, vec![b"ch".to_vec()]))
        );
        assert_eq!(
            route("/subscribe/a/caf%C3%A9%2Fx/"),
            Some((
                Kind::Channels,
                vec![b"a".to_vec(), "café/x".as_bytes().to_vec()]
            ))
        );
        assert_eq!(
            route("/psubscribe/user:*"),
            Some((Kind::Patterns, vec![b"user:*".to_vec()]))
        );
        assert_eq!(route("/subscribe"), Some((Kind::Channels, vec![])));
        assert_eq!(route("/subscribe/"), Some((Kind::Channels, vec![])));
        assert_eq!(route("/subscriber/x"), None);
        assert_eq!(route("/get/subscribe"), None);
        assert_eq!(route("/monitor"), None);
    }

    #[test]
    fn events_join_fields_with_commas_and_split_lines() {
        let b = |s: &str| RespValue::Bulk(s.as_bytes().to_vec());
        assert_eq!(
            sse_event(&[b("subscribe"), b("ch"), RespValue::Integer(1)]),
            b"data: subscribe,ch,1\n\n"
        );
        assert_eq!(
            sse_event(&[b("message"), b("ch"), b("hello, world")]),
            b"data: message,ch,hello, world\n\n"
        );
        assert_eq!(
            sse_event(&[b("pmessage"), b("u:*"), b("u:1"), b("{\"a\":1}")]),
            b"data: pmessage,u:*,u:1,{\"a\":1}\n\n"
        );
        assert_eq!(
            sse_event(&[b("message"), b("ch"), b("a\nb\r\nc\rd\n")]),
            b"data: message,ch,a\ndata: b\ndata: c\ndata: d\ndata: \n\n"
        );
        assert_eq!(
            sse_event(&[b("message"), b("ch"), b("")]),
            b"data: message,ch,\n\n"
        );
    }
}
