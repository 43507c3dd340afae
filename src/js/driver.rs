//! Runs a [`LockMachine`] on the JavaScript event loop inside a core
//! [`Session`], which keeps the loop's bookkeeping: this file performs its
//! [`Output`]s and re-arms one `setTimeout` for the time `Output::Wait` names.
//!
//! - `Output::Send` starts a task that calls the `fetch` function (or a
//!   binding's `fetch`) with an `AbortController`; `Output::Cancel` aborts it.
//!   A streaming request first takes a slot of its origin (see [`streams`]):
//!   where the runtime caps open streams per origin, one beyond the cap fails
//!   at once.
//! - `Output::Open` calls the socket factory the entry gave (see
//!   [`sockets`]); `Output::Write` writes on the socket, `Output::Cancel`
//!   closes it. Without a factory (browsers: no TCP) an open fails at once
//!   as a connect failure.
//! - User operations return an [`OpFuture`] completed by their
//!   `Output::Done`; `Lost`/`Renewed` go to the lock listener.
//! - The machine is never borrowed while JavaScript code of the user runs:
//!   outputs are collected first and acted on after the borrow ends.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::{Rc, Weak};
use std::task::{Context, Poll, Waker};

use js_sys::{Function, Promise, Reflect};
use wasm_bindgen::closure::Closure;
use wasm_bindgen::{JsCast, JsValue};
use web_sys::AbortController;

use super::clock::Clock;
use super::sockets::{self, Sockets};
use super::{fetch, streams, timer};
use crate::core::runtime::VecMap;
use crate::core::session::{Output, Session};
use crate::core::{
    BackendKind, HttpRequest, Input, LockError, LockId, LockMachine, Millis, OpId, Operation,
    Outcome, RequestId, StreamOpen, TransportError,
};

/// Something that happened to a held lock outside any operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LockNotice {
    /// Automatic renewal moved the lock's validity forward.
    Renewed {
        /// The renewed lock.
        lock: LockId,
        /// Its new conservative end of validity.
        expires_at: Millis,
    },
    /// The lock was lost.
    Lost {
        /// The lost lock.
        lock: LockId,
        /// Always a `LockError::Lost`.
        error: LockError,
    },
}

type OpResult = Result<Outcome, LockError>;

/// What settles an operation's promise (see [`OpFuture::into_promise`]).
type Settle = Box<dyn FnOnce(OpResult)>;

#[derive(Default)]
struct OpSlot {
    result: RefCell<Option<OpResult>>,
    waker: RefCell<Option<Waker>>,
    settle: RefCell<Option<Settle>>,
}

impl OpSlot {
    fn complete(&self, result: OpResult) {
        let settle = self.settle.borrow_mut().take();
        if let Some(settle) = settle {
            return settle(result);
        }
        *self.result.borrow_mut() = Some(result);
        if let Some(w) = self.waker.borrow_mut().take() {
            w.wake();
        }
    }
}

/// Completes when the machine reports the operation's outcome.
pub struct OpFuture {
    slot: Rc<OpSlot>,
}

impl OpFuture {
    /// A promise settled with `to_js(outcome)` when the machine reports the
    /// outcome, from the driver's step itself: no task, waker or extra
    /// microtask in between (as `future_to_promise` has), which is most of
    /// an uncontended operation's cost outside the core.
    pub fn into_promise(
        self,
        to_js: impl FnOnce(OpResult) -> Result<JsValue, JsValue> + 'static,
    ) -> Promise {
        let mut to_js = Some(to_js);
        let slot = self.slot;
        Promise::new(&mut |resolve, reject| {
            let Some(to_js) = to_js.take() else { return };
            let settle = move |result: OpResult| {
                let _ = match to_js(result) {
                    Ok(v) => resolve.call1(&JsValue::UNDEFINED, &v),
                    Err(e) => reject.call1(&JsValue::UNDEFINED, &e),
                };
            };
            let ready = slot.result.borrow_mut().take();
            match ready {
                Some(result) => settle(result),
                None => *slot.settle.borrow_mut() = Some(Box::new(settle)),
            }
        })
    }
}

impl Future for OpFuture {
    type Output = OpResult;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<OpResult> {
        if let Some(r) = self.slot.result.borrow_mut().take() {
            return Poll::Ready(r);
        }
        *self.slot.waker.borrow_mut() = Some(cx.waker().clone());
        Poll::Pending
    }
}

struct ArmedTimer {
    deadline: Millis,
    handle: JsValue,
}

struct State {
    session: Session<Rc<OpSlot>>,
    /// The I/O side of requests in flight (the session keeps the logical side).
    inflight: VecMap<RequestId, AbortController>,
    timer: Option<ArmedTimer>,
}

type LockListener = Rc<dyn Fn(LockNotice)>;

struct Inner {
    state: RefCell<State>,
    fetch: Function,
    /// Objects with a `fetch(url, init)` method that `Target::Binding`s name.
    bindings: Option<JsValue>,
    /// The runtime's socket factory (`None`: this runtime opens no TCP).
    open_socket: Option<Function>,
    /// The I/O side of open streams (the session keeps the logical side).
    sockets: RefCell<Sockets>,
    clock: Clock,
    backend: BackendKind,
    lock_listener: RefCell<Option<LockListener>>,
    /// One callback for every `setTimeout`, holding only a weak reference so
    /// that a dropped driver is not kept alive by its timer.
    on_timer: Closure<dyn FnMut()>,
    /// One callback for every socket event, `(stream id, event, payload)`:
    /// each socket's `onopen`/`ondata`/`onend`/`onerror` is it, bound to the
    /// id and event (see `sockets::Sockets::connect`); weak like `on_timer`.
    on_socket: Closure<dyn FnMut(f64, u32, JsValue)>,
}

/// A cheaply clonable handle to one machine and its I/O.
#[derive(Clone)]
pub struct Driver {
    inner: Rc<Inner>,
}

impl Driver {
    /// `fetch`: the injected function, else `globalThis.fetch`; `bindings`:
    /// an object whose properties are the bindings requests may target;
    /// `open_socket`: the runtime's socket factory, if it has TCP.
    pub fn new(
        machine: Box<dyn LockMachine + Send>,
        fetch: Option<Function>,
        bindings: Option<JsValue>,
        open_socket: Option<Function>,
    ) -> Result<Driver, LockError> {
        let fetch = match fetch {
            Some(f) => f,
            None => {
                let f = Reflect::get(&js_sys::global(), &JsValue::from_str("fetch"))
                    .unwrap_or(JsValue::UNDEFINED);
                if !f.is_function() {
                    return Err(LockError::invalid(
                        "this runtime has no globalThis.fetch; pass `fetch` in the options",
                    ));
                }
                f.unchecked_into()
            }
        };
        let backend = machine.backend();
        let inner = Rc::new_cyclic(|weak: &Weak<Inner>| {
            let timer_weak = weak.clone();
            let on_timer = Closure::<dyn FnMut()>::new(move || {
                if let Some(inner) = timer_weak.upgrade() {
                    let driver = Driver { inner };
                    driver.timer_fired();
                }
            });
            let socket_weak = weak.clone();
            let on_socket = Closure::<dyn FnMut(f64, u32, JsValue)>::new(
                move |id: f64, event: u32, payload: JsValue| {
                    if let Some(inner) = socket_weak.upgrade() {
                        Driver { inner }.socket_event(RequestId(id as u64), event, &payload);
                    }
                },
            );
            Inner {
                state: RefCell::new(State {
                    session: Session::new(machine),
                    inflight: VecMap::new(),
                    timer: None,
                }),
                fetch,
                bindings,
                open_socket,
                sockets: RefCell::new(Sockets::default()),
                clock: Clock::new(),
                backend,
                lock_listener: RefCell::new(None),
                on_timer,
                on_socket,
            }
        });
        Ok(Driver { inner })
    }

    /// The machine's backend.
    pub fn backend(&self) -> BackendKind {
        self.inner.backend
    }

    /// Receives `Lost` and `Renewed` notices for held locks.
    pub fn set_lock_listener(&self, listener: impl Fn(LockNotice) + 'static) {
        *self.inner.lock_listener.borrow_mut() = Some(Rc::new(listener));
    }

    /// Milliseconds since the Unix epoch for a time on the machine's clock.
    pub fn to_epoch_ms(&self, at: Millis) -> f64 {
        super::clock::to_epoch_ms(at)
    }

    /// The driver's clock.
    pub fn now(&self) -> Millis {
        self.inner.clock.now()
    }

    /// Operations and locks the machine still tracks (0 while borrowed).
    pub fn live_count(&self) -> usize {
        self.inner
            .state
            .try_borrow()
            .map(|s| s.session.live_count())
            .unwrap_or(0)
    }

    /// Starts `op`; the future completes with its outcome.
    pub fn start(&self, op: Operation) -> Result<(OpId, OpFuture), LockError> {
        let slot = Rc::new(OpSlot::default());
        let registered = slot.clone();
        match self.step(move |st, now| st.session.start(now, op, Some(registered))) {
            Some(Ok(op)) => Ok((op, OpFuture { slot })),
            Some(Err(e)) => Err(e),
            None => Err(reentrant()),
        }
    }

    /// Closes the session; the future completes once everything is released.
    pub fn close(&self) -> Result<OpFuture, LockError> {
        let slot = Rc::new(OpSlot::default());
        let registered = slot.clone();
        match self.step(move |st, now| st.session.close(now, Some(registered))) {
            Some(()) => Ok(OpFuture { slot }),
            None => Err(reentrant()),
        }
    }

    /// Cancel a pending operation; it completes with `Aborted` once cleaned up.
    pub fn cancel(&self, op: OpId) {
        self.step(|st, now| st.session.cancel(now, op));
    }

    /// One turn of the driver loop: `feed` gives the machine one input with the
    /// current time; every output is then drained and acted on, and the timer
    /// re-armed. `None` only for a re-entrant call (ruled out by construction:
    /// no user code runs while the machine is borrowed).
    fn step<R>(&self, feed: impl FnOnce(&mut State, Millis) -> R) -> Option<R> {
        let (result, outputs) = {
            let mut st = self.inner.state.try_borrow_mut().ok()?;
            let now = self.inner.clock.now();
            let result = feed(&mut st, now);
            let mut outputs = Vec::new();
            loop {
                match st.session.poll_output() {
                    Output::Wait { .. } => break,
                    o => outputs.push(o),
                }
            }
            (result, outputs)
        };
        let mut notices = Vec::new();
        for o in outputs {
            match o {
                Output::Send(req) => self.send(req),
                Output::Cancel(id) => self.cancel_io(id),
                Output::Open(open) => self.open_stream(open),
                Output::Write { id, data } => self.write_stream(id, data.0),
                Output::Done { reply, result, .. } => {
                    if let Some(slot) = reply {
                        slot.complete(result);
                    }
                }
                Output::Renewed { lock, expires_at } => {
                    notices.push(LockNotice::Renewed { lock, expires_at })
                }
                Output::Lost { lock, error, .. } => notices.push(LockNotice::Lost { lock, error }),
                Output::Wait { .. } => {}
            }
        }
        if !notices.is_empty() {
            let listener = self.inner.lock_listener.borrow().clone();
            if let Some(listener) = listener {
                for n in notices {
                    listener(n);
                }
            }
        }
        self.rearm_timer();
        Some(result)
    }

    fn send(&self, req: HttpRequest) {
        let id = req.id;
        let slot = if req.stream {
            match streams::open(&req.target) {
                Ok(slot) => Some(slot),
                Err(limit) => {
                    let error = TransportError::Connect(format!(
                        "not opened: {limit} streams to this origin are already open in this page"
                    ));
                    return self.fail_later(id, error);
                }
            }
        } else {
            None
        };
        let controller = match AbortController::new() {
            Ok(c) => c,
            Err(e) => return self.fail_later(id, TransportError::Connect(fetch::error_text(&e))),
        };
        let signal = controller.signal();
        if let Ok(mut st) = self.inner.state.try_borrow_mut() {
            st.inflight.insert(id, controller);
        }
        // The task holds the driver weakly: a dropped client aborts its requests
        // (see `Drop for Inner`) instead of being kept alive by them.
        let weak = Rc::downgrade(&self.inner);
        let fetch_fn = self.inner.fetch.clone();
        let bindings = self.inner.bindings.clone();
        wasm_bindgen_futures::spawn_local(async move {
            fetch::perform(
                &fetch_fn,
                bindings.as_ref(),
                &req,
                &signal,
                |input| match weak.upgrade() {
                    Some(inner) => Driver { inner }.deliver_input(input),
                    None => false,
                },
            )
            .await;
            // The stream ended, failed or was aborted: its connection is free.
            drop(slot);
        });
    }

    /// Answers request `id` with a failure without sending it, from a fresh
    /// task: never feed the machine from inside a step.
    fn fail_later(&self, id: RequestId, error: crate::core::TransportError) {
        let weak = Rc::downgrade(&self.inner);
        wasm_bindgen_futures::spawn_local(async move {
            if let Some(inner) = weak.upgrade() {
                Driver { inner }.deliver_input(Input::Failed { id, error });
            }
        });
    }

    /// Feeds one request result; false when the request is no longer in
    /// flight (cancelled): the machine hears nothing more about it.
    fn deliver_input(&self, input: Input) -> bool {
        if input.is_final() {
            if let Ok(mut st) = self.inner.state.try_borrow_mut() {
                st.inflight.remove(&input.id());
            }
        }
        self.step(|st, now| st.session.handle_input(now, input))
            .unwrap_or(false)
    }

    /// Calls the socket factory for `open`; a missing factory or one that
    /// throws is a connect failure, reported from a fresh task.
    fn open_stream(&self, open: StreamOpen) {
        let Some(factory) = &self.inner.open_socket else {
            let error = TransportError::Connect(
                "this runtime cannot open TCP connections (no socket factory)".into(),
            );
            return self.fail_later(open.id, error);
        };
        let callback: &Function = self.inner.on_socket.as_ref().unchecked_ref();
        match Sockets::connect(factory, callback, &open) {
            Ok(handle) => self.inner.sockets.borrow_mut().insert(open.id, handle),
            Err(error) => self.fail_later(open.id, error),
        }
    }

    /// Writes on stream `id` (queued until it opens); a throwing `write`
    /// closes the socket and fails the stream.
    fn write_stream(&self, id: RequestId, data: Vec<u8>) {
        let writable = self.inner.sockets.borrow_mut().writable(id, data);
        if let Some((handle, data)) = writable {
            if let Err(error) = sockets::write(&handle, &data) {
                self.fail_socket(id, error);
            }
        }
    }

    /// Closes stream `id` and reports `error` for it (from a fresh task).
    fn fail_socket(&self, id: RequestId, error: TransportError) {
        let handle = self.inner.sockets.borrow_mut().remove(id);
        if let Some(handle) = handle {
            sockets::close(&handle);
            self.fail_later(id, error);
        }
    }

    /// `Output::Cancel`: closes the stream, or aborts the request, `id` names.
    fn cancel_io(&self, id: RequestId) {
        let handle = self.inner.sockets.borrow_mut().remove(id);
        match handle {
            Some(handle) => sockets::close(&handle),
            None => self.abort_request(id),
        }
    }

    /// A socket callback: the writes queued before `onopen` go out first;
    /// a final event forgets the socket; a stream the machine no longer
    /// wants is closed.
    fn socket_event(&self, id: RequestId, event: u32, payload: &JsValue) {
        let Some(opened) = self.inner.sockets.borrow().is_open(id) else {
            return; // closed by the driver: nothing more about it
        };
        let Some(input) = sockets::input_of(id, event, payload, opened) else {
            return;
        };
        if matches!(input, Input::Opened { .. }) {
            let opened = self.inner.sockets.borrow_mut().opened(id);
            if let Some((handle, queued)) = opened {
                for data in queued {
                    if let Err(error) = sockets::write(&handle, &data) {
                        return self.fail_socket(id, error);
                    }
                }
            }
        }
        if input.is_final() {
            self.inner.sockets.borrow_mut().remove(id);
        }
        if !self.deliver_input(input) {
            self.cancel_io(id);
        }
    }

    fn abort_request(&self, id: RequestId) {
        let controller = self
            .inner
            .state
            .try_borrow_mut()
            .ok()
            .and_then(|mut st| st.inflight.remove(&id));
        if let Some(c) = controller {
            c.abort();
        }
    }

    fn rearm_timer(&self) {
        let (stale, wanted) = {
            let Ok(mut st) = self.inner.state.try_borrow_mut() else {
                return;
            };
            let wanted = st.session.poll_timeout();
            if matches!((&st.timer, wanted), (Some(t), Some(w)) if t.deadline == w) {
                return;
            }
            (st.timer.take(), wanted)
        };
        if let Some(t) = stale {
            timer::clear_timeout(&t.handle);
        }
        let Some(deadline) = wanted else { return };
        let delay = deadline.saturating_sub(self.inner.clock.now());
        let callback: &Function = self.inner.on_timer.as_ref().unchecked_ref();
        if let Some(handle) = timer::set_timeout(callback, delay) {
            if let Ok(mut st) = self.inner.state.try_borrow_mut() {
                st.timer = Some(ArmedTimer { deadline, handle });
            }
        }
    }

    fn timer_fired(&self) {
        self.step(|st, now| {
            st.timer = None;
            st.session.handle_timeout(now);
        });
    }
}

fn reentrant() -> LockError {
    LockError::internal("re-entrant call into the lock client")
}

impl Drop for Inner {
    /// A client dropped without `close()`: stop its timer, abort its
    /// requests and close its sockets (held locks then expire with their
    /// lease/TTL on the backend).
    fn drop(&mut self) {
        if let Ok(mut st) = self.state.try_borrow_mut() {
            if let Some(t) = st.timer.take() {
                timer::clear_timeout(&t.handle);
            }
            for (_, c) in st.inflight.drain() {
                c.abort();
            }
        }
        let open = self.sockets.try_borrow_mut().map(|mut s| s.drain());
        for handle in open.into_iter().flatten() {
            sockets::close(&handle);
        }
    }
}
