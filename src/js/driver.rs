//! Runs a [`LockMachine`] on the JavaScript event loop, exactly per the driver
//! loop documented in `core::machine`: feed one input with the current time,
//! drain every transmit and event, (re)arm one `setTimeout` for
//! `poll_timeout()`.
//!
//! - `Transmit::Send` starts a task that calls the `fetch` function with an
//!   `AbortController`; `Transmit::Cancel` aborts it and nothing more is
//!   delivered for that id.
//! - User operations return an [`OpFuture`] completed by the machine's event
//!   for that op; `Lost`/`Renewed` go to the lock listener.
//! - The machine is never borrowed while JavaScript code of the user runs:
//!   outputs are collected first and acted on after the borrow ends.

use std::cell::RefCell;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::rc::{Rc, Weak};
use std::task::{Context, Poll, Waker};

use js_sys::{Function, Reflect};
use wasm_bindgen::closure::Closure;
use wasm_bindgen::{JsCast, JsValue};
use web_sys::AbortController;

use super::clock::Clock;
use super::{fetch, timer};
use crate::core::{
    AcquireOptions, BackendKind, Event, HttpRequest, Input, LockError, LockHandle, LockId,
    LockInfo, LockMachine, LockStatus, Millis, OpId, RequestId, Transmit,
};

/// What a finished user operation produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OpOutput {
    Acquired(LockInfo),
    NotAcquired,
    Released { held_until_release: bool },
    Extended { expires_at: Millis },
    Inspected(LockStatus),
    Closed,
}

/// Something that happened to a held lock outside any operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LockNotice {
    Renewed {
        lock: LockId,
        expires_at: Millis,
    },
    /// Always a `LockError::Lost`.
    Lost {
        lock: LockId,
        error: LockError,
    },
}

type OpResult = Result<OpOutput, LockError>;

#[derive(Default)]
struct OpSlot {
    result: RefCell<Option<OpResult>>,
    waker: RefCell<Option<Waker>>,
}

impl OpSlot {
    fn complete(&self, result: OpResult) {
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
    machine: Box<dyn LockMachine>,
    inflight: HashMap<RequestId, AbortController>,
    ops: HashMap<OpId, Rc<OpSlot>>,
    timer: Option<ArmedTimer>,
}

type LockListener = Rc<dyn Fn(LockNotice)>;

struct Inner {
    state: RefCell<State>,
    fetch: Function,
    clock: Clock,
    backend: BackendKind,
    lock_listener: RefCell<Option<LockListener>>,
    /// One callback for every `setTimeout`, holding only a weak reference so
    /// that a dropped driver is not kept alive by its timer.
    on_timer: Closure<dyn FnMut()>,
}

/// A cheaply clonable handle to one machine and its I/O.
#[derive(Clone)]
pub struct Driver {
    inner: Rc<Inner>,
}

impl Driver {
    /// `fetch`: the injected function, else `globalThis.fetch`.
    pub fn new(
        machine: Box<dyn LockMachine>,
        fetch: Option<Function>,
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
            let weak = weak.clone();
            let on_timer = Closure::<dyn FnMut()>::new(move || {
                if let Some(inner) = weak.upgrade() {
                    let driver = Driver { inner };
                    driver.timer_fired();
                }
            });
            Inner {
                state: RefCell::new(State {
                    machine,
                    inflight: HashMap::new(),
                    ops: HashMap::new(),
                    timer: None,
                }),
                fetch,
                clock: Clock::new(),
                backend,
                lock_listener: RefCell::new(None),
                on_timer,
            }
        });
        Ok(Driver { inner })
    }

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

    pub fn now(&self) -> Millis {
        self.inner.clock.now()
    }

    pub fn live_count(&self) -> usize {
        self.inner
            .state
            .try_borrow()
            .map(|s| s.machine.live_count())
            .unwrap_or(0)
    }

    pub fn acquire(
        &self,
        name: &str,
        opts: &AcquireOptions,
    ) -> Result<(OpId, OpFuture), LockError> {
        self.start(|m, now| m.acquire(now, name, opts))
    }

    pub fn release(&self, lock: LockId) -> Result<OpFuture, LockError> {
        self.start(|m, now| m.release(now, lock)).map(|(_, f)| f)
    }

    pub fn extend(&self, lock: LockId, ttl_ms: Option<u64>) -> Result<OpFuture, LockError> {
        self.start(|m, now| m.extend(now, lock, ttl_ms))
            .map(|(_, f)| f)
    }

    pub fn resume(&self, handle: &LockHandle) -> Result<(OpId, OpFuture), LockError> {
        self.start(|m, now| m.resume(now, handle))
    }

    pub fn inspect(&self, name: &str) -> Result<OpFuture, LockError> {
        self.start(|m, now| m.inspect(now, name)).map(|(_, f)| f)
    }

    pub fn close(&self) -> Result<OpFuture, LockError> {
        self.start(|m, now| Ok(m.close(now))).map(|(_, f)| f)
    }

    /// Cancel a pending operation; it completes with `Aborted` once cleaned up.
    pub fn cancel(&self, op: OpId) {
        self.step(|st, now| st.machine.cancel(now, op));
    }

    /// Starts a user operation; its completion slot is registered under the
    /// same borrow, before any of its events can be drained.
    fn start(
        &self,
        begin: impl FnOnce(&mut dyn LockMachine, Millis) -> Result<OpId, LockError>,
    ) -> Result<(OpId, OpFuture), LockError> {
        let slot = Rc::new(OpSlot::default());
        let registered = slot.clone();
        let started = self.step(move |st, now| {
            let op = begin(st.machine.as_mut(), now)?;
            st.ops.insert(op, registered);
            Ok(op)
        });
        match started {
            Some(Ok(op)) => Ok((op, OpFuture { slot })),
            Some(Err(e)) => Err(e),
            None => Err(reentrant(self.inner.backend)),
        }
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
            (result, drain(&mut st, self.inner.backend))
        };
        for t in outputs.transmits {
            match t {
                Transmit::Send(req) => self.send(req),
                Transmit::Cancel(id) => self.abort_request(id),
            }
        }
        for (slot, result) in outputs.completions {
            slot.complete(result);
        }
        if !outputs.notices.is_empty() {
            let listener = self.inner.lock_listener.borrow().clone();
            if let Some(listener) = listener {
                for n in outputs.notices {
                    listener(n);
                }
            }
        }
        self.rearm_timer();
        Some(result)
    }

    fn send(&self, req: HttpRequest) {
        let id = req.id;
        let controller = match AbortController::new() {
            Ok(c) => c,
            Err(e) => {
                let weak = Rc::downgrade(&self.inner);
                let error = crate::core::TransportError::Connect(fetch::error_text(&e));
                // Delivered from a fresh task: never feed the machine from inside a step.
                wasm_bindgen_futures::spawn_local(async move {
                    if let Some(inner) = weak.upgrade() {
                        Driver { inner }.deliver_input(Input::Failed { id, error }, false);
                    }
                });
                return;
            }
        };
        let signal = controller.signal();
        if let Ok(mut st) = self.inner.state.try_borrow_mut() {
            st.inflight.insert(id, controller);
        }
        // The task holds the driver weakly: a dropped client aborts its requests
        // (see `Drop for Inner`) instead of being kept alive by them.
        let weak = Rc::downgrade(&self.inner);
        let fetch_fn = self.inner.fetch.clone();
        wasm_bindgen_futures::spawn_local(async move {
            fetch::perform(&fetch_fn, &req, &signal, |input| match weak.upgrade() {
                Some(inner) => Driver { inner }.deliver_input(input, true),
                None => false,
            })
            .await;
        });
    }

    /// Feeds one request result; false when the request was cancelled (the
    /// machine must hear nothing more about it).
    fn deliver_input(&self, input: Input, must_be_inflight: bool) -> bool {
        let id = input.id();
        let is_final = !matches!(input, Input::Chunk { .. });
        self.step(|st, now| {
            let known = st.inflight.contains_key(&id);
            if must_be_inflight && !known {
                return false;
            }
            if is_final {
                st.inflight.remove(&id);
            }
            st.machine.handle_input(now, input);
            true
        })
        .unwrap_or(false)
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
            let wanted = st.machine.poll_timeout();
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
            st.machine.handle_timeout(now);
        });
    }
}

/// Outputs collected under the borrow, acted on after it.
struct Outputs {
    transmits: Vec<Transmit>,
    completions: Vec<(Rc<OpSlot>, OpResult)>,
    notices: Vec<LockNotice>,
}

fn drain(st: &mut State, backend: BackendKind) -> Outputs {
    let mut out = Outputs {
        transmits: Vec::new(),
        completions: Vec::new(),
        notices: Vec::new(),
    };
    while let Some(t) = st.machine.poll_transmit() {
        out.transmits.push(t);
    }
    while let Some(e) = st.machine.poll_event() {
        let (op, result) = match e {
            Event::Acquired { op, lock } => (op, Ok(OpOutput::Acquired(lock))),
            Event::NotAcquired { op } => (op, Ok(OpOutput::NotAcquired)),
            Event::Released {
                op,
                held_until_release,
                ..
            } => (op, Ok(OpOutput::Released { held_until_release })),
            Event::Extended { op, expires_at, .. } => (op, Ok(OpOutput::Extended { expires_at })),
            Event::Inspected { op, status } => (op, Ok(OpOutput::Inspected(status))),
            Event::Closed { op } => (op, Ok(OpOutput::Closed)),
            Event::Failed { op, error } => (op, Err(error)),
            Event::Renewed { lock, expires_at } => {
                out.notices.push(LockNotice::Renewed { lock, expires_at });
                continue;
            }
            Event::Lost { lock, name, reason } => {
                let error = LockError::Lost {
                    backend: backend.as_str(),
                    name,
                    reason: reason.to_string(),
                };
                out.notices.push(LockNotice::Lost { lock, error });
                continue;
            }
        };
        if let Some(slot) = st.ops.remove(&op) {
            out.completions.push((slot, result));
        }
    }
    out
}

fn reentrant(backend: BackendKind) -> LockError {
    LockError::Backend {
        backend: backend.as_str(),
        name: String::new(),
        status: None,
        message: "re-entrant call into the lock client".into(),
    }
}

impl Drop for Inner {
    /// A client dropped without `close()`: stop its timer and abort its
    /// requests (held locks then expire with their lease/TTL on the backend).
    fn drop(&mut self) {
        if let Ok(mut st) = self.state.try_borrow_mut() {
            if let Some(t) = st.timer.take() {
                timer::clear_timeout(&t.handle);
            }
            for (_, c) in st.inflight.drain() {
                c.abort();
            }
        }
    }
}
