//! Byte streams for the JavaScript driver: the core's `Output::Open`,
//! `Output::Write` and `Output::Cancel` performed through a socket factory
//! the runtime's entry gives the client (`pkg-src/sockets/*.mjs`), and what
//! happens on a socket fed back as `Input`s.
//!
//! The factory's contract (the same for every runtime; documented for users
//! as `SocketFactory` in `pkg-src/index.d.ts`):
//!
//! ```text
//! openSocket({ host, port, tls, serverName }) -> socket
//!   host: string, port: number, tls: boolean, serverName: string | undefined
//!   socket.write(bytes: Uint8Array)   // called only after onopen
//!   socket.close()                    // no callback is called after it
//!   socket.onopen()                   // connected (TLS: handshake done)
//!   socket.ondata(bytes: Uint8Array)  // every read, in order (copied at once)
//!   socket.onend()                    // the peer closed
//!   socket.onerror(message: string)   // failed: before onopen a connect
//!                                     // failure, after it an I/O failure
//! ```
//!
//! The client assigns the four callbacks right after `openSocket` returns,
//! so a factory calls them only from later events, never from inside
//! `openSocket`; after `onend` or `onerror` it calls none. The driver only
//! moves bytes: framing, deadlines and reconnecting are the core's.

use js_sys::{Function, Object, Reflect, Uint8Array};
use wasm_bindgen::{JsCast, JsValue};

use super::fetch::error_text;
use crate::core::runtime::VecMap;
use crate::core::{Input, RequestId, StreamOpen, TransportError};

/// What a socket's callback reports; the number is the first argument the
/// driver's one socket callback is bound to (see [`Sockets::open`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SocketEvent {
    Open = 0,
    Data = 1,
    End = 2,
    Error = 3,
}

impl SocketEvent {
    fn from_code(code: u32) -> Option<SocketEvent> {
        [Self::Open, Self::Data, Self::End, Self::Error]
            .into_iter()
            .find(|e| *e as u32 == code)
    }
}

/// One socket the factory returned, and the bytes written before it opened.
struct Socket {
    handle: JsValue,
    /// `Some` until `onopen`: writes wait here, in order.
    pending: Option<Vec<Vec<u8>>>,
}

/// The open sockets of one driver, by stream id. No JavaScript is called
/// while this table is borrowed (a callback may re-enter it).
#[derive(Default)]
pub(crate) struct Sockets {
    open: VecMap<RequestId, Socket>,
}

impl Sockets {
    /// Calls `factory` for `open` and wires the socket's callbacks to
    /// `callback(id, event, payload)`. The socket goes into the table with
    /// [`Sockets::insert`]; an `Err` is the connect failure to report.
    pub(crate) fn connect(
        factory: &Function,
        callback: &Function,
        open: &StreamOpen,
    ) -> Result<JsValue, TransportError> {
        let options = Object::new();
        let set = |k: &str, v: &JsValue| Reflect::set(&options, &JsValue::from_str(k), v);
        set("host", &JsValue::from_str(&open.host))
            .and_then(|_| set("port", &JsValue::from_f64(f64::from(open.port))))
            .and_then(|_| set("tls", &JsValue::from_bool(open.tls.is_some())))
            .and_then(|_| match &open.tls {
                Some(name) => set("serverName", &JsValue::from_str(name)),
                None => Ok(true),
            })
            .map_err(|e| TransportError::Connect(error_text(&e)))?;
        let handle = factory
            .call1(&JsValue::UNDEFINED, &options)
            .map_err(|e| TransportError::Connect(error_text(&e)))?;
        if !handle.is_object() {
            return Err(TransportError::Connect(
                "the socket factory returned no socket object".into(),
            ));
        }
        let id = JsValue::from_f64(open.id.0 as f64);
        for (name, event) in [
            ("onopen", SocketEvent::Open),
            ("ondata", SocketEvent::Data),
            ("onend", SocketEvent::End),
            ("onerror", SocketEvent::Error),
        ] {
            let bound = callback.bind2(&JsValue::NULL, &id, &JsValue::from(event as u32));
            Reflect::set(&handle, &JsValue::from_str(name), &bound)
                .map_err(|e| TransportError::Connect(error_text(&e)))?;
        }
        Ok(handle)
    }

    /// Tracks a socket [`Sockets::connect`] returned.
    pub(crate) fn insert(&mut self, id: RequestId, handle: JsValue) {
        let pending = Some(Vec::new());
        self.open.insert(id, Socket { handle, pending });
    }

    /// `Some(opened)` for a tracked socket: whether `onopen` came.
    pub(crate) fn is_open(&self, id: RequestId) -> Option<bool> {
        self.open.get(&id).map(|s| s.pending.is_none())
    }

    /// The socket to write `data` to now, or `None` when it was queued
    /// (not open yet) or the socket is gone.
    pub(crate) fn writable(&mut self, id: RequestId, data: Vec<u8>) -> Option<(JsValue, Vec<u8>)> {
        let socket = self.open.get_mut(&id)?;
        match &mut socket.pending {
            Some(queued) => {
                queued.push(data);
                None
            }
            None => Some((socket.handle.clone(), data)),
        }
    }

    /// Marks `id` open; the socket and the writes queued before it opened.
    pub(crate) fn opened(&mut self, id: RequestId) -> Option<(JsValue, Vec<Vec<u8>>)> {
        let socket = self.open.get_mut(&id)?;
        let queued = socket.pending.take().unwrap_or_default();
        Some((socket.handle.clone(), queued))
    }

    /// Forgets `id`; its handle, to close it unless it ended by itself.
    pub(crate) fn remove(&mut self, id: RequestId) -> Option<JsValue> {
        self.open.remove(&id).map(|s| s.handle)
    }

    /// Forgets every socket; their handles, to close them.
    pub(crate) fn drain(&mut self) -> Vec<JsValue> {
        self.open.drain().map(|(_, s)| s.handle).collect()
    }
}

/// Writes `data` on `handle`; the failure to report if `write` threw.
pub(crate) fn write(handle: &JsValue, data: &[u8]) -> Result<(), TransportError> {
    call(handle, "write", &Uint8Array::from(data).into()).map_err(TransportError::Io)
}

/// Closes `handle`, ignoring whatever it throws (it is gone either way).
pub(crate) fn close(handle: &JsValue) {
    let _ = call(handle, "close", &JsValue::UNDEFINED);
}

fn call(handle: &JsValue, method: &str, arg: &JsValue) -> Result<(), String> {
    let f = Reflect::get(handle, &JsValue::from_str(method))
        .ok()
        .and_then(|f| f.dyn_into::<Function>().ok())
        .ok_or_else(|| format!("the socket has no {method}()"))?;
    f.call1(handle, arg).map(|_| ()).map_err(|e| error_text(&e))
}

/// The input a socket callback reports: `event` the bound code, `payload`
/// the bytes (`ondata`) or the message (`onerror`); `opened` whether the
/// socket had opened (a failure before is a connect failure). `None` for a
/// call that is not one of the four callbacks.
pub(crate) fn input_of(
    id: RequestId,
    event: u32,
    payload: &JsValue,
    opened: bool,
) -> Option<Input> {
    Some(match SocketEvent::from_code(event)? {
        SocketEvent::Open => Input::Opened { id },
        SocketEvent::End => Input::StreamEnd { id },
        SocketEvent::Data => match payload.dyn_ref::<Uint8Array>() {
            Some(bytes) => Input::Chunk {
                id,
                data: bytes.to_vec(),
            },
            None => Input::Failed {
                id,
                error: TransportError::Io("socket data is not a Uint8Array".into()),
            },
        },
        SocketEvent::Error => {
            let message = error_text(payload);
            let error = if opened {
                TransportError::Io(message)
            } else {
                TransportError::Connect(message)
            };
            Input::Failed { id, error }
        }
    })
}
