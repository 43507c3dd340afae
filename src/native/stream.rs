//! Byte streams for the native driver: what the core's `Output::Open`,
//! `Output::Write` and `Output::Cancel` ask of a TCP (optionally TLS)
//! connection, and what happens on it fed back as `Input`s.
//!
//! One thread per stream connects, then reads; a second writes what the
//! driver hands it, so that neither a slow peer nor a blocking read holds up
//! the driver thread. A plain TCP stream whose writing thread is idle is
//! written by the driver thread itself, bounded by a 1 ms send timeout (a
//! full send buffer hands the rest to the writing thread): waking that
//! thread for each command cost a quarter of an uncontended acquire. TLS runs rustls by hand (`ClientConnection` behind a
//! mutex, records moved over the raw socket) so that the reading and the
//! writing thread share one session. The driver only moves bytes: framing,
//! pipelining and every deadline after the connect are the core's.

use std::collections::HashMap;
use std::io::{self, ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::Duration;

use super::http::tcp_connect;
use super::tls::{self, TlsConnector};
use crate::core::{Input, RequestId, StreamOpen, TransportError};

/// Where a stream's inputs go (the driver's channel, wrapped).
pub(crate) type Deliver = Arc<dyn Fn(Input) + Send + Sync>;

const STREAM_STACK: usize = 256 * 1024;
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const READ_BUFFER: usize = 16 * 1024;
/// How long the driver thread may block writing on a plain stream before it
/// hands the rest to the stream's writing thread.
const DIRECT_WRITE_TIMEOUT: Duration = Duration::from_millis(1);

/// The open streams of one driver, by id.
#[derive(Default)]
pub(crate) struct Streams {
    open: HashMap<RequestId, Handle>,
}

/// The driver's side of one stream: where its writes go and how to close it.
struct Handle {
    writes: Sender<Vec<u8>>,
    socket: Arc<Mutex<Option<TcpStream>>>,
    /// Buffers handed to the writing thread and not yet written: while any
    /// is, a new write queues behind them (order is the protocol's).
    queued: Arc<AtomicUsize>,
    /// Whether the driver thread may write the socket itself (plain TCP:
    /// a TLS session's records are the writing thread's).
    direct: bool,
}

impl Streams {
    /// Starts connecting `open`; what happens on it goes to `deliver`.
    /// `tls` is asked for only when the stream wants TLS.
    pub(crate) fn open(
        &mut self,
        open: StreamOpen,
        deliver: &Deliver,
        tls: impl FnOnce() -> Result<TlsConnector, TransportError>,
    ) -> Result<(), Input> {
        let id = open.id;
        let failed = |error| Input::Failed { id, error };
        let connector = match &open.tls {
            Some(_) => Some(tls().map_err(failed)?),
            None => None,
        };
        let direct = connector.is_none();
        let (writes, pending) = channel();
        let socket = Arc::new(Mutex::new(None));
        let queued = Arc::new(AtomicUsize::new(0));
        let conn = Connecting {
            open,
            connector,
            socket: socket.clone(),
            deliver: deliver.clone(),
            queued: queued.clone(),
        };
        thread::Builder::new()
            .name("edgelock-stream".into())
            .stack_size(STREAM_STACK)
            .spawn(move || conn.run(pending))
            .map_err(|e| {
                failed(TransportError::Io(format!(
                    "cannot start a stream thread: {e}"
                )))
            })?;
        let handle = Handle {
            writes,
            socket,
            queued,
            direct,
        };
        self.open.insert(id, handle);
        Ok(())
    }

    /// Writes `data` on the stream: at once from this thread when it is a
    /// connected plain stream with nothing queued, else (and whatever a full
    /// send buffer left) through the writing thread, in order.
    pub(crate) fn write(&mut self, id: RequestId, data: Vec<u8>) {
        let Some(h) = self.open.get(&id) else { return };
        let rest = match h.direct && h.queued.load(Ordering::Acquire) == 0 {
            true => match write_now(&h.socket, &data) {
                Some(0) => return,
                Some(left) => data[data.len() - left..].to_vec(),
                None => data,
            },
            false => data,
        };
        h.queued.fetch_add(1, Ordering::AcqRel);
        // A failed send: the stream's threads are gone and its end is
        // (or is being) reported.
        let _ = h.writes.send(rest);
    }

    /// Closes the stream: its socket is shut down (the threads then end)
    /// and nothing more is delivered for it.
    pub(crate) fn close(&mut self, id: RequestId) {
        if let Some(h) = self.open.remove(&id) {
            if let Some(s) = lock(&h.socket).take() {
                let _ = s.shutdown(Shutdown::Both);
            }
        }
    }

    /// Forgets a stream that reported its end.
    pub(crate) fn ended(&mut self, id: RequestId) {
        self.open.remove(&id);
    }
}

impl Drop for Streams {
    fn drop(&mut self) {
        let ids: Vec<RequestId> = self.open.keys().copied().collect();
        for id in ids {
            self.close(id);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Writes what the connected plain `socket` takes within its send timeout;
/// the bytes left (0: all written). `None`: not connected yet, so nothing
/// was written. A failed write leaves the rest to the writing thread, whose
/// own write then fails and ends the stream.
fn write_now(socket: &Mutex<Option<TcpStream>>, data: &[u8]) -> Option<usize> {
    let guard = lock(socket);
    let mut tcp = guard.as_ref()?;
    let mut rest = data;
    while !rest.is_empty() {
        match tcp.write(rest) {
            Ok(0) => break,
            Ok(n) => rest = &rest[n..],
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    Some(rest.len())
}

/// A stream's thread before it is connected.
struct Connecting {
    open: StreamOpen,
    connector: Option<TlsConnector>,
    /// Filled once connected, so that a close can shut the socket down
    /// (and the driver write a plain stream directly).
    socket: Arc<Mutex<Option<TcpStream>>>,
    deliver: Deliver,
    /// The handle's count of buffers the writing thread has yet to write.
    queued: Arc<AtomicUsize>,
}

impl Connecting {
    fn run(self, pending: Receiver<Vec<u8>>) {
        let id = self.open.id;
        let send = &*self.deliver;
        match self.connect() {
            Ok(wire) => {
                send(Input::Opened { id });
                wire.serve(id, pending, send);
            }
            Err(error) => send(Input::Failed { id, error }),
        }
    }

    /// TCP, then the TLS handshake when asked for, within the open's timeout.
    fn connect(&self) -> Result<Wire, TransportError> {
        let timeout = self
            .open
            .timeout_ms
            .map_or(DEFAULT_CONNECT_TIMEOUT, Duration::from_millis);
        let tcp = tcp_connect(&self.open.host, self.open.port, timeout)?;
        if self.connector.is_none() {
            // Bounds the driver thread's direct writes; the writing thread
            // retries on the timeout (see `write_fully`).
            tcp.set_write_timeout(Some(DIRECT_WRITE_TIMEOUT))
                .map_err(|e| io_failure(&e, None))?;
        }
        let registered = tcp.try_clone().map_err(|e| io_failure(&e, None))?;
        {
            let mut slot = lock(&self.socket);
            *slot = Some(registered);
        }
        let tls = match (&self.connector, &self.open.tls) {
            (Some(c), Some(name)) => Some(handshake(c, name, &tcp, timeout)?),
            _ => None,
        };
        Ok(Wire {
            tcp,
            tls: tls.map(|t| Arc::new(Mutex::new(t))),
            queued: self.queued.clone(),
        })
    }
}

/// The TLS session for `name`, its handshake completed over `tcp`.
fn handshake(
    connector: &TlsConnector,
    name: &str,
    tcp: &TcpStream,
    timeout: Duration,
) -> Result<rustls::ClientConnection, TransportError> {
    let mut conn = connector.session(name).map_err(TransportError::Connect)?;
    let io_err = |e: io::Error| {
        if e.kind() == ErrorKind::TimedOut || e.kind() == ErrorKind::WouldBlock {
            return TransportError::Timeout;
        }
        tls::io_error(&e, Some(name))
            .unwrap_or_else(|| TransportError::Connect(format!("TLS handshake: {e}")))
    };
    tcp.set_read_timeout(Some(timeout)).map_err(io_err)?;
    let mut sock = tcp;
    while conn.is_handshaking() {
        conn.complete_io(&mut sock).map_err(io_err)?;
    }
    tcp.set_read_timeout(None).map_err(io_err)?;
    Ok(conn)
}

/// A connected stream: the socket and, for TLS, the shared session.
struct Wire {
    tcp: TcpStream,
    tls: Option<Arc<Mutex<rustls::ClientConnection>>>,
    /// Buffers queued for the writing thread and not yet written.
    queued: Arc<AtomicUsize>,
}

impl Wire {
    /// Starts the writing thread, then reads until the end; reports the end.
    fn serve(self, id: RequestId, queued: Receiver<Vec<u8>>, send: &dyn Fn(Input)) {
        let writer = match self.tcp.try_clone() {
            Ok(tcp) => Wire {
                tcp,
                tls: self.tls.clone(),
                queued: self.queued.clone(),
            },
            Err(e) => {
                return send(Input::Failed {
                    id,
                    error: io_failure(&e, None),
                })
            }
        };
        let spawned = thread::Builder::new()
            .name("edgelock-stream-write".into())
            .stack_size(STREAM_STACK)
            .spawn(move || writer.write_all_queued(&queued));
        if let Err(e) = spawned {
            let error = TransportError::Io(format!("cannot start a stream thread: {e}"));
            return send(Input::Failed { id, error });
        }
        let end = self.read_until_end(&mut |data| send(Input::Chunk { id, data }));
        let _ = self.tcp.shutdown(Shutdown::Both); // ends the writing thread's next write
        send(match end {
            Ok(()) => Input::StreamEnd { id },
            Err(error) => Input::Failed { id, error },
        });
    }

    /// Hands every read to `deliver` until the peer closes (Ok) or the
    /// connection fails.
    fn read_until_end(&self, deliver: &mut dyn FnMut(Vec<u8>)) -> Result<(), TransportError> {
        let mut buf = vec![0u8; READ_BUFFER];
        let mut tcp = &self.tcp;
        loop {
            let n = match tcp.read(&mut buf) {
                Ok(0) => return Ok(()),
                Ok(n) => n,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(io_failure(&e, None)),
            };
            match &self.tls {
                None => deliver(buf[..n].to_vec()),
                Some(tls) => {
                    let (plain, closed) = self.decrypt(tls, &buf[..n])?;
                    if !plain.is_empty() {
                        deliver(plain);
                    }
                    if closed {
                        return Ok(());
                    }
                }
            }
        }
    }

    /// The plaintext in `records`, and whether the peer closed the session.
    fn decrypt(
        &self,
        tls: &Mutex<rustls::ClientConnection>,
        mut records: &[u8],
    ) -> Result<(Vec<u8>, bool), TransportError> {
        let mut conn = lock(tls);
        let mut plain = Vec::new();
        while !records.is_empty() {
            conn.read_tls(&mut records)
                .map_err(|e| io_failure(&e, None))?;
            let state = conn
                .process_new_packets()
                .map_err(|e| TransportError::Io(tls::describe(&e, None)))?;
            let mut closed = state.peer_has_closed();
            match conn.reader().read_to_end(&mut plain) {
                Ok(_) => closed = true,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => return Err(io_failure(&e, None)),
            }
            // Alerts and key updates the session owes the peer.
            self.flush_tls(&mut conn)?;
            if closed {
                return Ok((plain, true));
            }
        }
        Ok((plain, false))
    }

    /// Writes each queued buffer in order until the driver closes the
    /// stream (the channel disconnects) or a write fails (the reading side
    /// then reports the failure when the socket shuts down).
    fn write_all_queued(self, queued: &Receiver<Vec<u8>>) {
        while let Ok(data) = queued.recv() {
            let written = match &self.tls {
                None => self.write_fully(&data),
                Some(tls) => {
                    let mut conn = lock(tls);
                    match conn.writer().write_all(&data) {
                        Ok(()) => self.flush_tls(&mut conn),
                        Err(e) => Err(io_failure(&e, None)),
                    }
                }
            };
            if written.is_err() {
                let _ = self.tcp.shutdown(Shutdown::Both);
                return;
            }
            self.queued.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Writes all of `data` on the plain socket, waiting out its short send
    /// timeout (a peer slow to read) until the socket fails or is shut down.
    fn write_fully(&self, mut data: &[u8]) -> Result<(), TransportError> {
        let mut tcp = &self.tcp;
        while !data.is_empty() {
            match tcp.write(data) {
                Ok(0) => {
                    return Err(TransportError::Io(
                        "the connection took no more bytes".into(),
                    ))
                }
                Ok(n) => data = &data[n..],
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::Interrupted | ErrorKind::WouldBlock | ErrorKind::TimedOut
                    ) => {}
                Err(e) => return Err(io_failure(&e, None)),
            }
        }
        Ok(())
    }

    /// Moves the session's pending records onto the socket.
    fn flush_tls(&self, conn: &mut rustls::ClientConnection) -> Result<(), TransportError> {
        let mut tcp = &self.tcp;
        while conn.wants_write() {
            conn.write_tls(&mut tcp).map_err(|e| io_failure(&e, None))?;
        }
        Ok(())
    }
}

/// The transport error for a failed read or write.
fn io_failure(e: &io::Error, host: Option<&str>) -> TransportError {
    tls::io_error(e, host).unwrap_or_else(|| TransportError::Io(e.to_string()))
}

#[cfg(test)]
mod tests;
