//! `RawLocks`: the class exported to JavaScript. It converts arguments and
//! results and maps `LockError`s to `Error` objects with a `code`; the public
//! API (`EtcdLocks`, `Lock`, `LockError`, …) wraps it in `pkg-src/api.mjs`.
//! One class serves every backend: `connect` builds any machine through the
//! core's backend registry (`BackendSpec`).

use js_sys::{Array, Function, Object, Promise, Reflect};
use wasm_bindgen::closure::Closure;
use wasm_bindgen::prelude::wasm_bindgen;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::future_to_promise;
use web_sys::AbortSignal;

use super::args::{check_tcp_nodes, limit_of, lock_kind, mode_name, whole_number};
use super::clock::to_epoch_ms;
use super::driver::{Driver, LockNotice};
use super::entropy::JsEntropy;
use crate::core::backend::backend_named;
use crate::core::error::ERROR_CODES;
use crate::core::{
    AcquireOptions, BackendSpec, Holder, LockError, LockHandle, LockId, LockInfo, LockKind,
    LockStatus, OpId, Operation, Outcome, Wait,
};

/// One lock client (any backend) as JavaScript sees it.
#[wasm_bindgen]
pub struct RawLocks {
    driver: Driver,
}

#[wasm_bindgen]
impl RawLocks {
    /// A client for `backend` (a name of the core's backend table: "etcd",
    /// "redis", "redlock", "durable-object" or "d1") with its
    /// `options_json` (see `BackendSpec::from_json`); `fetch`: the injected
    /// fetch, if any; `bindings`: an object of bindings requests may target;
    /// `open_socket`: the runtime's socket factory (see `js/sockets.rs`),
    /// absent where there is no TCP.
    pub fn connect(
        backend: &str,
        options_json: &str,
        fetch: Option<Function>,
        bindings: Option<Object>,
        open_socket: Option<Function>,
    ) -> Result<RawLocks, JsValue> {
        let build = || -> Result<RawLocks, LockError> {
            let entry = backend_named(backend).ok_or_else(|| {
                LockError::invalid(format!(
                    "unknown backend {:?}",
                    backend.chars().take(20).collect::<String>()
                ))
            })?;
            let spec = BackendSpec::from_json(entry.kind(), options_json)?;
            check_tcp_nodes(&spec, open_socket.is_some())?;
            let machine = spec.build(Box::new(JsEntropy::new()?))?;
            Ok(RawLocks {
                driver: Driver::new(machine, fetch, bindings.map(JsValue::from), open_socket)?,
            })
        };
        build().map_err(|e| to_js_error(&e))
    }

    /// Caps the streaming requests (etcd watches, Redis wake-up
    /// subscriptions) this module keeps open to one origin, over all its
    /// clients; `undefined` lifts the cap. The browser entry sets it (a
    /// browser opens about 6 connections per origin); see `js/streams.rs`.
    #[wasm_bindgen(js_name = limitStreamsPerOrigin)]
    pub fn limit_streams_per_origin(limit: Option<f64>) -> Result<(), JsValue> {
        let limit = limit
            .map(|n| whole_number("stream limit", n))
            .transpose()
            .map_err(|e| to_js_error(&e))?;
        super::streams::set_limit(limit.map(|n| usize::try_from(n).unwrap_or(usize::MAX)));
        Ok(())
    }

    /// Declares whether this host reaches `redis://` nodes: `"browser"`
    /// (never: a client with one is refused, saying browsers open no TCP
    /// connections), `"undeclared"` (the default: a `redis://` node needs
    /// a socket factory) or `"available"`.
    /// The entry files declare it; see `js/args.rs`.
    #[wasm_bindgen(js_name = declareTcp)]
    pub fn declare_tcp(support: &str) -> Result<(), JsValue> {
        super::args::declare_tcp(support).map_err(|e| to_js_error(&e))
    }

    /// Every stable error code, from the one list in the Rust core.
    #[wasm_bindgen(js_name = errorCodes)]
    pub fn error_codes() -> Array {
        ERROR_CODES.iter().map(|c| JsValue::from_str(c)).collect()
    }

    /// "etcd", "redis", "redlock", "durable-object" or "d1".
    pub fn backend(&self) -> String {
        self.driver.backend().as_str().to_string()
    }

    /// `listener(kind, lockId, expiresAt, error)`: kind "renewed" (expiresAt
    /// moved) or "lost" (error is the `LOST` error).
    #[wasm_bindgen(js_name = onLockEvent)]
    pub fn on_lock_event(&self, listener: Function) {
        self.driver.set_lock_listener(move |notice| {
            let (kind, lock, expires_at, error) = match notice {
                LockNotice::Renewed { lock, expires_at } => {
                    ("renewed", lock, to_epoch_ms(expires_at), JsValue::UNDEFINED)
                }
                LockNotice::Lost { lock, error } => ("lost", lock, f64::NAN, to_js_error(&error)),
            };
            let args = Array::of4(
                &kind.into(),
                &(lock.0 as f64).into(),
                &expires_at.into(),
                &error,
            );
            // A throwing listener must not break the driver loop.
            let _ = listener.apply(&JsValue::UNDEFINED, &args);
        });
    }

    /// Resolves to a lock object, or `null` for a `tryOnly` acquire that found
    /// the lock held. `waitMs` undefined waits until granted or aborted.
    /// An exclusive hold (see [`RawLocks::acquire_kind`] for the others).
    pub fn acquire(
        &self,
        name: String,
        try_only: bool,
        wait_ms: Option<f64>,
        ttl_ms: Option<f64>,
        signal: Option<AbortSignal>,
    ) -> Result<Promise, JsValue> {
        self.start_acquire(
            name,
            Ok(LockKind::Exclusive),
            try_only,
            wait_ms,
            ttl_ms,
            signal,
        )
    }

    /// Like `acquire`, for the kind that `mode` and `limit` (the options as
    /// JavaScript gave them, `undefined` when absent) ask for: exclusive by
    /// default, `mode: "shared"`, or `limit: n` for a permit of a semaphore
    /// of `n`. Bad values are `INVALID_ARGUMENT` before any request.
    #[wasm_bindgen(js_name = acquireKind)]
    #[allow(clippy::too_many_arguments)]
    pub fn acquire_kind(
        &self,
        name: String,
        mode: JsValue,
        limit: JsValue,
        try_only: bool,
        wait_ms: Option<f64>,
        ttl_ms: Option<f64>,
        signal: Option<AbortSignal>,
    ) -> Result<Promise, JsValue> {
        self.start_acquire(
            name,
            lock_kind(&mode, &limit),
            try_only,
            wait_ms,
            ttl_ms,
            signal,
        )
    }

    /// Resolves to `true` if the lock was still held until this release.
    pub fn release(&self, lock_id: f64) -> Result<Promise, JsValue> {
        let lock = LockId(whole_number("lock id", lock_id).map_err(|e| to_js_error(&e))?);
        let (_, done) = self
            .driver
            .start(Operation::Release { lock })
            .map_err(|e| to_js_error(&e))?;
        Ok(
            done.into_promise(|result| match result.and_then(Outcome::into_released) {
                Ok(held_until_release) => Ok(held_until_release.into()),
                Err(e) => Err(to_js_error(&e)),
            }),
        )
    }

    /// Resolves to the new `expiresAt` (ms since the epoch).
    pub fn extend(&self, lock_id: f64, ttl_ms: Option<f64>) -> Result<Promise, JsValue> {
        let args = (|| -> Result<(LockId, Option<u64>), LockError> {
            let lock = LockId(whole_number("lock id", lock_id)?);
            Ok((lock, ttl_ms.map(|t| whole_number("ttlMs", t)).transpose()?))
        })()
        .map_err(|e| to_js_error(&e))?;
        let (_, done) = self
            .driver
            .start(Operation::Extend {
                lock: args.0,
                ttl_ms: args.1,
            })
            .map_err(|e| to_js_error(&e))?;
        Ok(future_to_promise(async move {
            match done.await.and_then(Outcome::into_extended) {
                Ok(expires_at) => Ok(to_epoch_ms(expires_at).into()),
                Err(e) => Err(to_js_error(&e)),
            }
        }))
    }

    /// Adopts a lock from the JSON of a handle made by `toJSON()`.
    pub fn resume(&self, handle_json: &str) -> Result<Promise, JsValue> {
        let handle = LockHandle::from_json(handle_json).map_err(|e| to_js_error(&e))?;
        let (_, done) = self
            .driver
            .start(Operation::Resume { handle })
            .map_err(|e| to_js_error(&e))?;
        Ok(future_to_promise(async move {
            match done.await.and_then(Outcome::into_acquired) {
                Ok(Some(lock)) => Ok(lock_to_js(&lock)),
                Ok(None) => Err(to_js_error(&LockError::internal(
                    "a resume completed with NotAcquired",
                ))),
                Err(e) => Err(to_js_error(&e)),
            }
        }))
    }

    /// Re-enters the exclusive lock of a handle made by `toJSON()` (this
    /// client's or another process's): the backend counts one more hold,
    /// and resolves to a lock object with the same fencing token; the lock
    /// is freed only when every hold is released.
    pub fn reenter(&self, handle_json: &str) -> Result<Promise, JsValue> {
        let handle = LockHandle::from_json(handle_json).map_err(|e| to_js_error(&e))?;
        let (_, done) = self
            .driver
            .start(Operation::Reenter { handle })
            .map_err(|e| to_js_error(&e))?;
        Ok(future_to_promise(async move {
            match done.await.and_then(Outcome::into_acquired) {
                Ok(Some(lock)) => Ok(lock_to_js(&lock)),
                Ok(None) => Err(to_js_error(&LockError::internal(
                    "a re-entry completed with NotAcquired",
                ))),
                Err(e) => Err(to_js_error(&e)),
            }
        }))
    }

    /// Resolves to `{ name, held, holder, fencingToken, remainingMs, waiters,
    /// limit, holders, queued }` (`holders` / `queued`: `{ id, mode, limit,
    /// slot, fencingToken }` each).
    pub fn inspect(&self, name: String) -> Result<Promise, JsValue> {
        let (_, done) = self
            .driver
            .start(Operation::Inspect { name })
            .map_err(|e| to_js_error(&e))?;
        Ok(future_to_promise(async move {
            match done.await.and_then(Outcome::into_inspected) {
                Ok(status) => Ok(status_to_js(&status)),
                Err(e) => Err(to_js_error(&e)),
            }
        }))
    }

    /// Releases every lock and ends the session.
    pub fn close(&self) -> Result<Promise, JsValue> {
        let done = self.driver.close().map_err(|e| to_js_error(&e))?;
        Ok(future_to_promise(async move {
            match done.await {
                Ok(Outcome::Closed) => Ok(JsValue::UNDEFINED),
                Ok(other) => Err(to_js_error(&LockError::internal(format!(
                    "a close completed with {}",
                    other.as_str()
                )))),
                Err(e) => Err(to_js_error(&e)),
            }
        }))
    }

    /// Operations and held locks still alive in the machine (tests use it to
    /// check that nothing leaks).
    #[wasm_bindgen(js_name = liveCount)]
    pub fn live_count(&self) -> u32 {
        u32::try_from(self.driver.live_count()).unwrap_or(u32::MAX)
    }
}

impl RawLocks {
    /// The driver behind this object (for Rust callers, e.g. wasm tests).
    pub fn driver(&self) -> &Driver {
        &self.driver
    }

    fn start_acquire(
        &self,
        name: String,
        kind: Result<LockKind, LockError>,
        try_only: bool,
        wait_ms: Option<f64>,
        ttl_ms: Option<f64>,
        signal: Option<AbortSignal>,
    ) -> Result<Promise, JsValue> {
        let backend = self.driver.backend().as_str();
        let (kind, opts) = (|| -> Result<(LockKind, AcquireOptions), LockError> {
            let kind = kind?;
            let wait = match (try_only, wait_ms) {
                (true, _) => Wait::Try,
                (false, Some(ms)) => Wait::For(whole_number("waitMs", ms)?),
                (false, None) => Wait::Forever,
            };
            let ttl_ms = ttl_ms.map(|t| whole_number("ttlMs", t)).transpose()?;
            Ok((kind, AcquireOptions { wait, ttl_ms }))
        })()
        .map_err(|e| to_js_error(&e))?;
        if signal.as_ref().is_some_and(|s| s.aborted()) {
            return Err(to_js_error(&LockError::Aborted { backend, name }));
        }
        let (op, done) = self
            .driver
            .start(Operation::Acquire {
                name,
                kind,
                options: opts,
            })
            .map_err(|e| to_js_error(&e))?;
        let hook = signal.and_then(|s| AbortHook::attach(s, self.driver.clone(), op));
        Ok(done.into_promise(move |result| {
            drop(hook);
            match result.and_then(Outcome::into_acquired) {
                Ok(Some(lock)) => Ok(lock_to_js(&lock)),
                Ok(None) => Ok(JsValue::NULL),
                Err(e) => Err(to_js_error(&e)),
            }
        }))
    }
}

/// Cancels an operation when an `AbortSignal` fires; removes its listener when dropped.
pub(super) struct AbortHook {
    signal: AbortSignal,
    callback: Closure<dyn FnMut()>,
}

impl AbortHook {
    pub(super) fn attach(signal: AbortSignal, driver: Driver, op: OpId) -> Option<AbortHook> {
        let callback = Closure::<dyn FnMut()>::new(move || driver.cancel(op));
        signal
            .add_event_listener_with_callback("abort", callback.as_ref().unchecked_ref())
            .ok()?;
        Some(AbortHook { signal, callback })
    }
}

impl Drop for AbortHook {
    fn drop(&mut self) {
        let _ = self
            .signal
            .remove_event_listener_with_callback("abort", self.callback.as_ref().unchecked_ref());
    }
}

pub(super) fn set(target: &Object, key: &str, value: &JsValue) {
    let _ = Reflect::set(target, &JsValue::from_str(key), value);
}

/// A number, or `null` for `None`.
fn opt_u32(v: Option<u32>) -> JsValue {
    v.map(|n| JsValue::from_f64(n as f64))
        .unwrap_or(JsValue::NULL)
}

/// `mode` ("exclusive" | "shared" | "permit"), `limit` and `slot` (numbers
/// for a permit, `null` otherwise) of a hold.
fn set_kind(o: &Object, kind: LockKind, slot: Option<u32>) {
    set(o, "mode", &mode_name(kind).into());
    set(o, "limit", &opt_u32(limit_of(kind)));
    set(
        o,
        "slot",
        &opt_u32(if limit_of(kind).is_some() { slot } else { None }),
    );
}

/// `{ lockId, name, fencingToken (decimal string), expiresAt (ms since epoch),
/// handle (JSON), mode, limit, slot }`.
pub(super) fn lock_to_js(lock: &LockInfo) -> JsValue {
    let o = Object::new();
    set(&o, "lockId", &(lock.id.0 as f64).into());
    set(&o, "name", &lock.name.as_str().into());
    set(&o, "fencingToken", &lock.fencing_token.to_string().into());
    set_kind(&o, lock.kind(), lock.slot());
    set(&o, "expiresAt", &to_epoch_ms(lock.expires_at).into());
    let handle = serde_json::to_string(&lock.handle).unwrap_or_default();
    set(&o, "handle", &handle.into());
    o.into()
}

fn status_to_js(s: &LockStatus) -> JsValue {
    let o = Object::new();
    set(&o, "name", &s.name.as_str().into());
    set(&o, "held", &s.held.into());
    set(
        &o,
        "holder",
        &s.holder
            .as_deref()
            .map(JsValue::from_str)
            .unwrap_or(JsValue::NULL),
    );
    set(
        &o,
        "fencingToken",
        &s.fencing_token
            .map(|t| JsValue::from_str(&t.to_string()))
            .unwrap_or(JsValue::NULL),
    );
    set(
        &o,
        "remainingMs",
        &s.remaining_ms
            .map(|t| JsValue::from_f64(t as f64))
            .unwrap_or(JsValue::NULL),
    );
    let waiters: Array = s.waiters.iter().map(|w| JsValue::from_str(w)).collect();
    set(&o, "waiters", &waiters);
    set(&o, "limit", &opt_u32(s.limit));
    let holders: Array = s.holders.iter().map(holder_to_js).collect();
    set(&o, "holders", &holders);
    let queued: Array = s.queued.iter().map(holder_to_js).collect();
    set(&o, "queued", &queued);
    o.into()
}

/// `{ id, mode, limit, slot, fencingToken (decimal string or null) }`.
fn holder_to_js(h: &Holder) -> JsValue {
    let o = Object::new();
    set(&o, "id", &h.id.as_str().into());
    set_kind(&o, h.kind, h.slot);
    set(
        &o,
        "fencingToken",
        &h.fencing_token
            .map(|t| JsValue::from_str(&t.to_string()))
            .unwrap_or(JsValue::NULL),
    );
    o.into()
}

/// An `Error` with the stable `code`; the wrapper turns it into a `LockError`.
pub fn to_js_error(e: &LockError) -> JsValue {
    let err = js_sys::Error::new(&e.to_string());
    set(&err, "code", &e.code().into());
    err.into()
}
