//! A tiny RESP2 client: enough to drive redis-server from tests and from
//! the gateway. Binary-safe in both directions.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

/// A RESP2 reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RespValue {
    /// `+OK`
    Simple(String),
    /// `-ERR ...`
    Error(String),
    /// `:42`
    Integer(i64),
    /// `$3\r\nabc`
    Bulk(Vec<u8>),
    /// `$-1` or `*-1`
    Nil,
    /// `*2 ...`
    Array(Vec<RespValue>),
}

impl RespValue {
    /// Bulk or simple string contents as bytes.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            RespValue::Bulk(b) => Some(b),
            RespValue::Simple(s) => Some(s.as_bytes()),
            _ => None,
        }
    }

    /// Bulk or simple string as (lossy) text.
    pub fn as_text(&self) -> Option<String> {
        self.as_bytes()
            .map(|b| String::from_utf8_lossy(b).into_owned())
    }

    pub fn as_int(&self) -> Option<i64> {
        match self {
            RespValue::Integer(i) => Some(*i),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[RespValue]> {
        match self {
            RespValue::Array(a) => Some(a),
            _ => None,
        }
    }

    pub fn is_error(&self) -> bool {
        matches!(self, RespValue::Error(_))
    }

    /// Wire encoding (RESP2). Simple strings and errors are written as given,
    /// with CR/LF replaced by spaces so the framing stays intact.
    pub fn encode(&self, out: &mut Vec<u8>) {
        fn line(s: &str) -> String {
            s.replace(['\r', '\n'], " ")
        }
        match self {
            RespValue::Simple(s) => out.extend_from_slice(format!("+{}\r\n", line(s)).as_bytes()),
            RespValue::Error(s) => out.extend_from_slice(format!("-{}\r\n", line(s)).as_bytes()),
            RespValue::Integer(i) => out.extend_from_slice(format!(":{i}\r\n").as_bytes()),
            RespValue::Bulk(b) => {
                out.extend_from_slice(format!("${}\r\n", b.len()).as_bytes());
                out.extend_from_slice(b);
                out.extend_from_slice(b"\r\n");
            }
            RespValue::Nil => out.extend_from_slice(b"$-1\r\n"),
            RespValue::Array(items) => {
                out.extend_from_slice(format!("*{}\r\n", items.len()).as_bytes());
                for it in items {
                    it.encode(out);
                }
            }
        }
    }
}

/// Encodes a command as a RESP array of bulk strings.
pub fn encode_command<A: AsRef<[u8]>>(args: &[A], out: &mut Vec<u8>) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        let a = a.as_ref();
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

const MAX_BULK: usize = 512 * 1024 * 1024;
const MAX_DEPTH: usize = 64;

fn bad(msg: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("RESP protocol error: {msg}"),
    )
}

fn read_resp_line<R: BufRead>(r: &mut R) -> io::Result<Vec<u8>> {
    let mut line = Vec::new();
    r.take(MAX_BULK as u64).read_until(b'\n', &mut line)?;
    if line.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "redis closed the connection",
        ));
    }
    if !line.ends_with(b"\r\n") {
        return Err(bad("line not terminated by CRLF"));
    }
    line.truncate(line.len() - 2);
    Ok(line)
}

fn parse_int(b: &[u8]) -> io::Result<i64> {
    std::str::from_utf8(b)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad("invalid integer"))
}

/// Reads one reply.
pub fn read_value<R: BufRead>(r: &mut R) -> io::Result<RespValue> {
    read_value_depth(r, 0)
}

fn read_value_depth<R: BufRead>(r: &mut R, depth: usize) -> io::Result<RespValue> {
    if depth > MAX_DEPTH {
        return Err(bad("nesting too deep"));
    }
    let line = read_resp_line(r)?;
    let (&tag, rest) = line.split_first().ok_or_else(|| bad("empty line"))?;
    match tag {
        b'+' => Ok(RespValue::Simple(
            String::from_utf8_lossy(rest).into_owned(),
        )),
        b'-' => Ok(RespValue::Error(String::from_utf8_lossy(rest).into_owned())),
        b':' => Ok(RespValue::Integer(parse_int(rest)?)),
        b'$' => {
            let n = parse_int(rest)?;
            if n < 0 {
                return Ok(RespValue::Nil);
            }
            let n = usize::try_from(n).map_err(|_| bad("bulk length"))?;
            if n > MAX_BULK {
                return Err(bad("bulk too large"));
            }
            let mut buf = vec![0; n + 2];
            r.read_exact(&mut buf)?;
            if !buf.ends_with(b"\r\n") {
                return Err(bad("bulk not terminated by CRLF"));
            }
            buf.truncate(n);
            Ok(RespValue::Bulk(buf))
        }
        b'*' => {
            let n = parse_int(rest)?;
            if n < 0 {
                return Ok(RespValue::Nil);
            }
            let n = usize::try_from(n).map_err(|_| bad("array length"))?;
            let mut items = Vec::with_capacity(n.min(1024));
            for _ in 0..n {
                items.push(read_value_depth(r, depth + 1)?);
            }
            Ok(RespValue::Array(items))
        }
        _ => Err(bad("unknown type byte")),
    }
}

/// One connection to redis-server.
#[derive(Debug)]
pub struct RespConn {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl RespConn {
    /// Connects with `timeout` for the connect and for every later read/write.
    pub fn connect(addr: impl ToSocketAddrs, timeout: Duration) -> io::Result<RespConn> {
        let addrs: Vec<SocketAddr> = addr.to_socket_addrs()?.collect();
        let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
        for a in addrs {
            match TcpStream::connect_timeout(&a, timeout) {
                Ok(s) => return RespConn::from_stream(s, timeout),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    fn from_stream(stream: TcpStream, timeout: Duration) -> io::Result<RespConn> {
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        Ok(RespConn {
            reader: BufReader::new(stream.try_clone()?),
            writer: stream,
        })
    }

    /// Sends one command and reads its reply. A Redis error reply is
    /// `Ok(RespValue::Error)`; `Err` means the connection is unusable.
    pub fn command<A: AsRef<[u8]>>(&mut self, args: &[A]) -> io::Result<RespValue> {
        let mut out = Vec::new();
        encode_command(args, &mut out);
        self.writer.write_all(&out)?;
        read_value(&mut self.reader)
    }

    /// Sends all commands in one write, then reads one reply per command.
    pub fn pipeline<A: AsRef<[u8]>>(&mut self, cmds: &[Vec<A>]) -> io::Result<Vec<RespValue>> {
        let mut out = Vec::new();
        for c in cmds {
            encode_command(c, &mut out);
        }
        self.writer.write_all(&out)?;
        cmds.iter().map(|_| read_value(&mut self.reader)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_reply_type_and_round_trips() {
        let raw = b"*6\r\n+OK\r\n-ERR bad\r\n:-7\r\n$5\r\na\r\n\x00b\r\n$-1\r\n*1\r\n*-1\r\n";
        let v = read_value(&mut io::Cursor::new(&raw[..])).unwrap();
        let expected = RespValue::Array(vec![
            RespValue::Simple("OK".into()),
            RespValue::Error("ERR bad".into()),
            RespValue::Integer(-7),
            RespValue::Bulk(b"a\r\n\x00b".to_vec()),
            RespValue::Nil,
            RespValue::Array(vec![RespValue::Nil]),
        ]);
        assert_eq!(v, expected);
        let mut enc = Vec::new();
        v.encode(&mut enc);
        assert_eq!(read_value(&mut io::Cursor::new(&enc)).unwrap(), expected);
    }

    #[test]
    fn rejects_malformed_replies() {
        for raw in [
            &b"?x\r\n"[..],
            b"$3\r\nabcd\r\n",
            b":12a\r\n",
            b"+OK\n",
            b"",
            b"*2\r\n:1\r\n",
        ] {
            assert!(read_value(&mut io::Cursor::new(raw)).is_err(), "{raw:?}");
        }
        let deep = "*1\r\n".repeat(100) + ":1\r\n";
        assert!(read_value(&mut io::Cursor::new(deep.as_bytes())).is_err());
    }

    #[test]
    fn encodes_commands_binary_safe() {
        let mut out = Vec::new();
        encode_command(&[&b"SET"[..], b"k\r\n", b""], &mut out);
        assert_eq!(out, b"*3\r\n$3\r\nSET\r\n$3\r\nk\r\n\r\n$0\r\n\r\n");
    }
}
