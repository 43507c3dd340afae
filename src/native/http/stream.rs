//! The byte stream under one HTTP connection: a plain TCP socket, or TLS over
//! one. Everything above (framing, pooling, streaming bodies) is the same for
//! both; only the TCP socket is reached directly, for timeouts, the idle check
//! and cancellation (shutting the socket down ends a blocked TLS read too).

use std::io::{self, ErrorKind, Read, Write};
use std::net::TcpStream;

use rustls::{ClientConnection, StreamOwned};

use crate::core::TransportError;
use crate::native::tls::{self, TlsConnector};

pub(super) enum Stream {
    Plain(TcpStream),
    /// Boxed: a rustls session is large, and pooled streams move around.
    Tls(Box<StreamOwned<ClientConnection, TcpStream>>),
}

impl Stream {
    /// Wraps a fresh TCP connection in a TLS session for `host` (the
    /// handshake happens in [`Stream::handshake`], once cancellation can reach
    /// the socket).
    pub(super) fn tls(
        connector: &TlsConnector,
        host: &str,
        tcp: TcpStream,
    ) -> Result<Stream, TransportError> {
        let session = connector.session(host).map_err(TransportError::Connect)?;
        Ok(Stream::Tls(Box::new(StreamOwned::new(session, tcp))))
    }

    /// The TCP socket underneath.
    pub(super) fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls(s) => &s.sock,
        }
    }

    /// Completes the TLS handshake (nothing for plain TCP), within the socket
    /// timeouts already set. Certificates are verified here: a failure is a
    /// connect error naming `host` and the cause.
    pub(super) fn handshake(&mut self, host: &str) -> Result<(), TransportError> {
        let Stream::Tls(s) = self else { return Ok(()) };
        while s.conn.is_handshaking() {
            if let Err(e) = s.conn.complete_io(&mut s.sock) {
                let message = match tls::io_error(&e, Some(host)) {
                    Some(TransportError::Connect(m) | TransportError::Io(m)) => m,
                    Some(TransportError::Timeout) => return Err(TransportError::Timeout),
                    None if matches!(e.kind(), ErrorKind::TimedOut | ErrorKind::WouldBlock) => {
                        return Err(TransportError::Timeout)
                    }
                    None if e.kind() == ErrorKind::UnexpectedEof => {
                        format!("TLS: {host} closed the connection during the handshake (is it an https endpoint?)")
                    }
                    None => format!("TLS handshake with {host}: {e}"),
                };
                return Err(TransportError::Connect(message));
            }
        }
        Ok(())
    }

    /// True when nothing is left over that a next request could mistake for
    /// its answer: no decrypted-but-unread bytes, no close_notify received.
    pub(super) fn is_clean(&mut self) -> bool {
        match self {
            Stream::Plain(_) => true,
            Stream::Tls(s) => s
                .conn
                .process_new_packets()
                .is_ok_and(|st| st.plaintext_bytes_to_read() == 0 && !st.peer_has_closed()),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(s) => match s.read(buf) {
                // A peer that closes without close_notify: the HTTP framing
                // (Content-Length, chunked) still detects a cut body, and a
                // close-delimited body ends here as it would over plain TCP.
                Err(e)
                    if e.kind() == ErrorKind::UnexpectedEof
                        && !matches!(e.get_ref(), Some(i) if i.is::<rustls::Error>()) =>
                {
                    Ok(0)
                }
                r => r,
            },
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
        }
    }
}
