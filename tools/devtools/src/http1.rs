//! Minimal HTTP/1.1 message parsing shared by the gateway server and the
//! test client: heads, Content-Length and chunked bodies.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// Largest request/response head accepted (start line + headers).
pub const MAX_HEAD_BYTES: usize = 64 * 1024;
const MAX_HEADERS: usize = 128;

/// Start line and headers of a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub start_line: String,
    pub headers: Vec<(String, String)>,
}

impl Head {
    /// First value of a header, case-insensitive name.
    pub fn header(&self, name: &str) -> Option<&str> {
        header(&self.headers, name)
    }
}

pub fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

fn bad(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

/// Reads one line (without CR LF), at most `budget` bytes, decrementing it.
fn read_line<R: BufRead>(r: &mut R, budget: &mut usize) -> io::Result<Option<Vec<u8>>> {
    let mut line = Vec::new();
    let n = r.take(*budget as u64 + 1).read_until(b'\n', &mut line)?;
    if n == 0 {
        return Ok(None);
    }
    if n > *budget {
        return Err(bad("HTTP head too large"));
    }
    *budget -= n;
    if line.last() != Some(&b'\n') {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed inside HTTP head",
        ));
    }
    line.pop();
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    Ok(Some(line))
}

/// Reads a message head. `Ok(None)` means the peer closed the connection
/// cleanly before sending anything (normal end of a keep-alive connection).
pub fn read_head<R: BufRead>(r: &mut R) -> io::Result<Option<Head>> {
    let mut budget = MAX_HEAD_BYTES;
    // Tolerate empty lines before a request (RFC 9112 §2.2).
    let start = loop {
        match read_line(r, &mut budget)? {
            None => return Ok(None),
            Some(l) if l.is_empty() => continue,
            Some(l) => break l,
        }
    };
    let start_line = String::from_utf8(start).map_err(|_| bad("start line is not UTF-8"))?;
    let mut headers = Vec::new();
    loop {
        let line = read_line(r, &mut budget)?.ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed inside HTTP head",
            )
        })?;
        if line.is_empty() {
            break;
        }
        if headers.len() >= MAX_HEADERS {
            return Err(bad("too many headers"));
        }
        let line = String::from_utf8_lossy(&line).into_owned();
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| bad("header line without colon"))?;
        if name.is_empty() || name.bytes().any(|b| b.is_ascii_whitespace()) {
            return Err(bad("malformed header name"));
        }
        headers.push((name.to_string(), value.trim().to_string()));
    }
    Ok(Some(Head {
        start_line,
        headers,
    }))
}

/// How a message body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    None,
    Length(u64),
    Chunked,
    /// Responses only: read until the peer closes.
    UntilEof,
}

/// Body framing of a request (no body unless Content-Length / chunked).
pub fn request_body_kind(head: &Head) -> io::Result<BodyKind> {
    if let Some(te) = head.header("transfer-encoding") {
        if te
            .rsplit(',')
            .next()
            .map(str::trim)
            .is_some_and(|t| t.eq_ignore_ascii_case("chunked"))
        {
            return Ok(BodyKind::Chunked);
        }
        return Err(bad("unsupported transfer-encoding"));
    }
    content_length(head).map(|l| l.map_or(BodyKind::None, BodyKind::Length))
}

fn content_length(head: &Head) -> io::Result<Option<u64>> {
    let mut found: Option<u64> = None;
    for (k, v) in &head.headers {
        if k.eq_ignore_ascii_case("content-length") {
            let n: u64 = v
                .trim()
                .parse()
                .map_err(|_| bad("invalid content-length"))?;
            if found.is_some_and(|f| f != n) {
                return Err(bad("conflicting content-length headers"));
            }
            found = Some(n);
        }
    }
    Ok(found)
}

const TOO_LARGE: &str = "body too large";

/// True for the error [`read_body`] returns when the body exceeds its limit.
pub fn is_too_large(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::InvalidData && e.to_string() == TOO_LARGE
}

/// Reads a body of the given kind, refusing more than `max` bytes.
pub fn read_body<R: BufRead>(r: &mut R, kind: BodyKind, max: usize) -> io::Result<Vec<u8>> {
    match kind {
        BodyKind::None => Ok(Vec::new()),
        BodyKind::Length(n) => {
            if n > max as u64 {
                return Err(bad(TOO_LARGE));
            }
            let mut body = vec![0; n as usize];
            r.read_exact(&mut body)?;
            Ok(body)
        }
        BodyKind::Chunked => read_chunked(r, max),
        BodyKind::UntilEof => {
            let mut body = Vec::new();
            r.take(max as u64 + 1).read_to_end(&mut body)?;
            if body.len() > max {
                return Err(bad(TOO_LARGE));
            }
            Ok(body)
        }
    }
}

fn read_chunked<R: BufRead>(r: &mut R, max: usize) -> io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let mut budget = 4096;
        let line = read_line(r, &mut budget)?.ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed inside chunked body",
            )
        })?;
        let line = String::from_utf8_lossy(&line);
        let size_hex = line.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_hex, 16).map_err(|_| bad("invalid chunk size"))?;
        if size == 0 {
            // Trailer section: skip header lines until the empty line.
            let mut budget = MAX_HEAD_BYTES;
            loop {
                match read_line(r, &mut budget)? {
                    Some(l) if l.is_empty() => return Ok(body),
                    Some(_) => continue,
                    None => {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "closed inside trailers",
                        ))
                    }
                }
            }
        }
        if body.len().saturating_add(size) > max {
            return Err(bad(TOO_LARGE));
        }
        let start = body.len();
        body.resize(start + size, 0);
        r.read_exact(&mut body[start..])?;
        let mut crlf = [0u8; 2];
        r.read_exact(&mut crlf)?;
        if &crlf != b"\r\n" {
            return Err(bad("chunk not followed by CRLF"));
        }
    }
}

/// A response received by [`http_request`].
#[derive(Debug, Clone)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        header(&self.headers, name)
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> serde_json::Result<serde_json::Value> {
        serde_json::from_slice(&self.body)
    }
}

/// Splits `http://host:port/path?query` into (`host:port`, `/path?query`).
pub fn split_http_url(url: &str) -> io::Result<(String, String)> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| bad(format!("not an http:// URL: {url}")))?;
    let (authority, path) = match rest.find(['/', '?']) {
        Some(i) if rest.as_bytes()[i] == b'/' => (&rest[..i], rest[i..].to_string()),
        Some(i) => (&rest[..i], format!("/{}", &rest[i..])),
        None => (rest, "/".to_string()),
    };
    if authority.is_empty() {
        return Err(bad(format!("URL without host: {url}")));
    }
    let authority = if authority.contains(':') {
        authority.to_string()
    } else {
        format!("{authority}:80")
    };
    Ok((authority, path))
}

/// One blocking HTTP/1.1 request on a fresh connection (`Connection: close`).
/// Test and readiness helper; not a general-purpose client.
pub fn http_request(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    timeout: Duration,
) -> io::Result<HttpResponse> {
    let (authority, path) = split_http_url(url)?;
    let addr = authority.to_socket_addrs()?.next().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("cannot resolve {authority}"),
        )
    })?;
    let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if !body.is_empty() || matches!(method, "POST" | "PUT") {
        req.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    req.push_str("\r\n");
    let mut out = req.into_bytes();
    out.extend_from_slice(body);
    stream.write_all(&out)?;
    let mut reader = BufReader::new(stream);
    read_response(&mut reader, method == "HEAD")
}

/// Reads one response (skipping `100 Continue` interim responses).
pub fn read_response<R: BufRead>(r: &mut R, head_request: bool) -> io::Result<HttpResponse> {
    loop {
        let head = read_head(r)?.ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed before response",
            )
        })?;
        let mut parts = head.start_line.splitn(3, ' ');
        let _version = parts.next();
        let status: u16 = parts
            .next()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| bad("bad status line"))?;
        if (100..200).contains(&status) {
            continue;
        }
        let kind = if head_request || status == 204 || status == 304 {
            BodyKind::None
        } else if head.header("transfer-encoding").is_some() {
            BodyKind::Chunked
        } else {
            content_length(&head)?.map_or(BodyKind::UntilEof, BodyKind::Length)
        };
        let body = read_body(r, kind, 256 * 1024 * 1024)?;
        return Ok(HttpResponse {
            status,
            headers: head.headers,
            body,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_head_and_chunked_body_with_trailers() {
        let raw = b"\r\nPOST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nX-T: 1\r\n\r\nNEXT";
        let mut r = io::Cursor::new(&raw[..]);
        let head = read_head(&mut r).unwrap().unwrap();
        assert_eq!(head.start_line, "POST /x HTTP/1.1");
        assert_eq!(head.header("HOST"), Some("a"));
        let kind = request_body_kind(&head).unwrap();
        assert_eq!(kind, BodyKind::Chunked);
        assert_eq!(read_body(&mut r, kind, 100).unwrap(), b"abcde");
        let mut rest = String::new();
        r.read_to_string(&mut rest).unwrap();
        assert_eq!(rest, "NEXT");
    }

    #[test]
    fn refuses_oversized_and_malformed_input() {
        let mut r = io::Cursor::new(&b"5\r\nabcdef\r\n0\r\n\r\n"[..]);
        assert!(
            read_body(&mut r, BodyKind::Chunked, 100).is_err(),
            "chunk without CRLF"
        );
        let mut r = io::Cursor::new(&b"zz\r\n"[..]);
        assert!(read_body(&mut r, BodyKind::Chunked, 100).is_err());
        let mut r = io::Cursor::new(&b"ffffffff\r\n"[..]);
        assert!(read_body(&mut r, BodyKind::Chunked, 100).is_err());
        assert!(read_body(&mut io::Cursor::new(&b"x"[..]), BodyKind::Length(10), 5).is_err());
        let long = format!(
            "GET / HTTP/1.1\r\nX: {}\r\n\r\n",
            "a".repeat(MAX_HEAD_BYTES)
        );
        assert!(read_head(&mut io::Cursor::new(long.as_bytes())).is_err());
        let two_lengths = b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n";
        let head = read_head(&mut io::Cursor::new(&two_lengths[..]))
            .unwrap()
            .unwrap();
        assert!(request_body_kind(&head).is_err());
        assert!(read_head(&mut io::Cursor::new(&b""[..])).unwrap().is_none());
        assert!(read_head(&mut io::Cursor::new(&b"GET / HTTP/1.1\r\nHost"[..])).is_err());
    }

    #[test]
    fn splits_urls() {
        assert_eq!(
            split_http_url("http://127.0.0.1:80").unwrap(),
            ("127.0.0.1:80".into(), "/".into())
        );
        assert_eq!(
            split_http_url("http://h:1/a/b?c=d").unwrap(),
            ("h:1".into(), "/a/b?c=d".into())
        );
        assert_eq!(
            split_http_url("http://h:1?c").unwrap(),
            ("h:1".into(), "/?c".into())
        );
        assert_eq!(
            split_http_url("http://h/x").unwrap(),
            ("h:80".into(), "/x".into())
        );
        assert!(split_http_url("https://h/").is_err());
    }
}
