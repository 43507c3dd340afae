//! `RawLocks`' election and multi-lock methods (campaign, proclaim, leader,
//! observeChange, acquireAll): argument conversion only, as in
//! [`bindings`](super::bindings); `pkg-src/api.mjs` builds `Leadership`,
//! `observe()` and the lock set on top.

use js_sys::{Array, Object, Promise};
use wasm_bindgen::prelude::wasm_bindgen;
use wasm_bindgen::JsValue;
use wasm_bindgen_futures::future_to_promise;
use web_sys::AbortSignal;

use super::args::whole_number;
use super::bindings::{lock_to_js, set, to_js_error, AbortHook, RawLocks};
use crate::core::{AcquireOptions, Leadership, LockError, LockId, Operation, Outcome, Wait};

#[wasm_bindgen]
impl RawLocks {
    /// Resolves to a lock object of mode "leader" once this client leads
    /// `name` announcing `value`, or `null` for a `tryOnly` campaign that
    /// found another leader. `value` must be a string.
    pub fn campaign(
        &self,
        name: String,
        value: JsValue,
        try_only: bool,
        wait_ms: Option<f64>,
        ttl_ms: Option<f64>,
        signal: Option<AbortSignal>,
    ) -> Result<Promise, JsValue> {
        let op = (|| -> Result<Operation, LockError> {
            Ok(Operation::Campaign {
                name: name.clone(),
                value: campaign_value(&value)?,
                options: acquire_options(try_only, wait_ms, ttl_ms)?,
            })
        })()
        .map_err(|e| to_js_error(&e))?;
        self.start_cancellable(op, &name, signal, |outcome| {
            Ok(match outcome.into_acquired()? {
                Some(lock) => lock_to_js(&lock),
                None => JsValue::NULL,
            })
        })
    }

    /// Resolves once the leadership `lockId` announces `value` (checked on
    /// the backend: rejects with `NOT_HELD`/`LOST` when it no longer leads).
    pub fn proclaim(&self, lock_id: f64, value: JsValue) -> Result<Promise, JsValue> {
        let op = (|| -> Result<Operation, LockError> {
            Ok(Operation::Proclaim {
                lock: LockId(whole_number("lock id", lock_id)?),
                value: campaign_value(&value)?,
            })
        })()
        .map_err(|e| to_js_error(&e))?;
        self.start_cancellable(op, "", None, |outcome| {
            outcome.into_proclaimed().map(|()| JsValue::UNDEFINED)
        })
    }

    /// Resolves to `{ value, fencingToken }` (token as a decimal string) of
    /// the leader of `name`, or `null` when nobody leads.
    pub fn leader(&self, name: String) -> Result<Promise, JsValue> {
        let op = Operation::Leader { name: name.clone() };
        self.start_cancellable(op, &name, None, |outcome| {
            Ok(leadership_to_js(outcome.into_leader()?.as_ref()))
        })
    }

    /// Resolves once the leadership of `name` differs from the one known
    /// (`knownToken` a decimal string with `knownValue`, or both undefined
    /// for "nobody leads"), or when `waitMs` runs out (undefined: no bound),
    /// to the state then (as `leader`).
    #[wasm_bindgen(js_name = observeChange)]
    pub fn observe_change(
        &self,
        name: String,
        known_value: Option<String>,
        known_token: Option<String>,
        wait_ms: Option<f64>,
        signal: Option<AbortSignal>,
    ) -> Result<Promise, JsValue> {
        let op = (|| -> Result<Operation, LockError> {
            let known = match (known_value, known_token) {
                (Some(value), Some(token)) => Some(Leadership {
                    value,
                    fencing_token: token.parse().map_err(|_| {
                        LockError::invalid(
                            "a known leader's fencingToken must be a decimal integer",
                        )
                    })?,
                }),
                (None, None) => None,
                _ => {
                    return Err(LockError::invalid(
                        "a known leader needs both value and fencingToken",
                    ))
                }
            };
            let wait = match wait_ms {
                Some(ms) => Wait::For(whole_number("waitMs", ms)?),
                None => Wait::Forever,
            };
            Ok(Operation::Observe {
                name: name.clone(),
                known,
                wait,
            })
        })()
        .map_err(|e| to_js_error(&e))?;
        self.start_cancellable(op, &name, signal, |outcome| {
            Ok(leadership_to_js(outcome.into_leader()?.as_ref()))
        })
    }

    /// Resolves to an array of lock objects, one per name in the order of
    /// `names` (strings), once all are held; `null` for a `tryOnly` call that
    /// found one held (then none is held).
    #[wasm_bindgen(js_name = acquireAll)]
    pub fn acquire_all(
        &self,
        names: Array,
        try_only: bool,
        wait_ms: Option<f64>,
        ttl_ms: Option<f64>,
        signal: Option<AbortSignal>,
    ) -> Result<Promise, JsValue> {
        let op = (|| -> Result<Operation, LockError> {
            let names = names
                .iter()
                .map(|n| {
                    n.as_string()
                        .ok_or_else(|| LockError::invalid("acquireAll's names must be strings"))
                })
                .collect::<Result<Vec<_>, _>>()?;
            crate::core::check_acquire_all_names(&names)?;
            Ok(Operation::AcquireAll {
                names,
                options: acquire_options(try_only, wait_ms, ttl_ms)?,
            })
        })()
        .map_err(|e| to_js_error(&e))?;
        let label = match &op {
            Operation::AcquireAll { names, .. } => names.join(", "),
            _ => String::new(),
        };
        self.start_cancellable(op, &label, signal, |outcome| {
            Ok(match outcome.into_acquired_all()? {
                Some(locks) => locks.iter().map(lock_to_js).collect::<Array>().into(),
                None => JsValue::NULL,
            })
        })
    }
}

impl RawLocks {
    /// Starts `op` (refused at once if `signal` already fired; cancelled when
    /// it fires later) and resolves to `convert` of its outcome.
    fn start_cancellable(
        &self,
        op: Operation,
        name: &str,
        signal: Option<AbortSignal>,
        convert: impl FnOnce(Outcome) -> Result<JsValue, LockError> + 'static,
    ) -> Result<Promise, JsValue> {
        let driver = self.driver();
        if signal.as_ref().is_some_and(|s| s.aborted()) {
            let backend = driver.backend().as_str();
            return Err(to_js_error(&LockError::Aborted {
                backend,
                name: name.to_string(),
            }));
        }
        let (op, done) = driver.start(op).map_err(|e| to_js_error(&e))?;
        let hook = signal.and_then(|s| AbortHook::attach(s, driver.clone(), op));
        Ok(future_to_promise(async move {
            let result = done.await;
            drop(hook);
            result.and_then(convert).map_err(|e| to_js_error(&e))
        }))
    }
}

/// A campaign value: a string (`INVALID_ARGUMENT` for anything else; its
/// size is checked by the core).
fn campaign_value(value: &JsValue) -> Result<String, LockError> {
    value
        .as_string()
        .ok_or_else(|| LockError::invalid("a campaign value must be a string"))
}

fn acquire_options(
    try_only: bool,
    wait_ms: Option<f64>,
    ttl_ms: Option<f64>,
) -> Result<AcquireOptions, LockError> {
    let wait = match (try_only, wait_ms) {
        (true, _) => Wait::Try,
        (false, Some(ms)) => Wait::For(whole_number("waitMs", ms)?),
        (false, None) => Wait::Forever,
    };
    let ttl_ms = ttl_ms.map(|t| whole_number("ttlMs", t)).transpose()?;
    Ok(AcquireOptions { wait, ttl_ms })
}

/// `{ value, fencingToken }` (decimal string), or `null`.
fn leadership_to_js(l: Option<&Leadership>) -> JsValue {
    let Some(l) = l else { return JsValue::NULL };
    let o = Object::new();
    set(&o, "value", &l.value.as_str().into());
    set(&o, "fencingToken", &l.fencing_token.to_string().into());
    o.into()
}
