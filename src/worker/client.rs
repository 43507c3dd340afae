//! One lock client per Worker invocation.
//!
//! The transport is the JavaScript driver of the npm package
//! ([`crate::js::Driver`]): the runtime's `fetch` with an `AbortController`
//! per request (aborted on the session's `Output::Cancel`), `setTimeout` for
//! the core's timers and the runtime clock for `now`. In workerd that clock
//! stands still while code runs and moves on across I/O, so every `now` the
//! core sees is taken right after the I/O that preceded it: validity is
//! measured across the requests themselves, which is what the core's
//! "expires from when the establishing request was sent" arithmetic needs.
//!
//! The machine is wrapped in [`Budgeted`] so that the invocation never
//! exceeds its subrequest budget, and `fetch` itself is counted so that the
//! Worker can report how many subrequests the lock really made.

use std::cell::Cell;
use std::rc::Rc;

use js_sys::{Function, Reflect};
use wasm_bindgen::closure::Closure;
use wasm_bindgen::{JsCast, JsValue};

use super::config::{cleanup_requests, Config};
use crate::core::budget::Budgeted;
use crate::core::{
    AcquireOptions, Leadership, LockError, LockHandle, LockId, LockInfo, LockKind, LockStatus,
    Operation,
};
use crate::js::{Driver, JsEntropy};

/// How an acquire ended when it did not fail.
pub enum Acquired {
    Held(LockInfo),
    /// `ifAvailable` found it held by someone else (or every permit taken).
    Busy,
}

pub struct LockClient {
    driver: Driver,
    fetches: Rc<Cell<u32>>,
}

impl LockClient {
    /// `budget`: subrequests the lock may use in this invocation.
    pub fn new(config: &Config, budget: u32) -> Result<LockClient, LockError> {
        let reserve = cleanup_requests(&config.backend);
        let inner = config.backend.clone().build(Box::new(JsEntropy::new()?))?;
        let machine = Box::new(Budgeted::new(inner, budget, reserve));
        let fetches = Rc::new(Cell::new(0));
        let fetch = counting_fetch(fetches.clone())?;
        let driver = Driver::new(machine, Some(fetch), None)?;
        Ok(LockClient { driver, fetches })
    }

    /// Subrequests the lock has made so far.
    pub fn subrequests(&self) -> u32 {
        self.fetches.get()
    }

    /// Milliseconds since the Unix epoch for a time on the driver's clock.
    pub fn to_epoch_ms(&self, at: crate::core::Millis) -> f64 {
        self.driver.to_epoch_ms(at)
    }

    pub async fn acquire(
        &self,
        name: &str,
        kind: LockKind,
        opts: &AcquireOptions,
    ) -> Result<Acquired, LockError> {
        let op = Operation::Acquire {
            name: name.to_string(),
            kind,
            options: *opts,
        };
        let (_, done) = self.driver.start(op)?;
        Ok(match done.await?.into_acquired()? {
            Some(lock) => Acquired::Held(lock),
            None => Acquired::Busy,
        })
    }

    /// Campaigns once (`opts.wait`) in the election `name` announcing `value`.
    pub async fn campaign(
        &self,
        name: &str,
        value: &str,
        opts: &AcquireOptions,
    ) -> Result<Acquired, LockError> {
        let (_, done) = self.driver.start(Operation::Campaign {
            name: name.to_string(),
            value: value.to_string(),
            options: *opts,
        })?;
        Ok(match done.await?.into_acquired()? {
            Some(lock) => Acquired::Held(lock),
            None => Acquired::Busy,
        })
    }

    /// Who leads the election `name`.
    pub async fn leader(&self, name: &str) -> Result<Option<Leadership>, LockError> {
        let (_, done) = self.driver.start(Operation::Leader {
            name: name.to_string(),
        })?;
        done.await?.into_leader()
    }

    pub async fn resume(&self, handle: &LockHandle) -> Result<LockInfo, LockError> {
        let (_, done) = self.driver.start(Operation::Resume {
            handle: handle.clone(),
        })?;
        done.await?
            .into_acquired()?
            .ok_or_else(|| LockError::internal("a resume completed with NotAcquired"))
    }

    /// `Ok(false)` when the lock had already been lost.
    pub async fn release(&self, lock: LockId) -> Result<bool, LockError> {
        let (_, done) = self.driver.start(Operation::Release { lock })?;
        done.await?.into_released()
    }

    pub async fn inspect(&self, name: &str) -> Result<LockStatus, LockError> {
        let (_, done) = self.driver.start(Operation::Inspect {
            name: name.to_string(),
        })?;
        done.await?.into_inspected()
    }

    /// Ends the session (etcd revokes its lease). Errors are not interesting
    /// at this point: whatever is left expires with its lease or TTL.
    pub async fn close(&self) {
        if let Ok(done) = self.driver.close() {
            let _ = done.await;
        }
    }
}

/// `globalThis.fetch`, counted. Called by the driver with `this` = globalThis.
fn counting_fetch(count: Rc<Cell<u32>>) -> Result<Function, LockError> {
    let global = js_sys::global();
    let fetch = Reflect::get(&global, &JsValue::from_str("fetch")).unwrap_or(JsValue::UNDEFINED);
    let Some(fetch) = fetch.dyn_ref::<Function>().cloned() else {
        return Err(LockError::invalid("this runtime has no globalThis.fetch"));
    };
    let wrapper = Closure::<dyn FnMut(JsValue, JsValue) -> Result<JsValue, JsValue>>::new(
        move |url: JsValue, init: JsValue| {
            count.set(count.get().saturating_add(1));
            fetch.call2(&js_sys::global(), &url, &init)
        },
    );
    // Owned by the JS function from here on (freed with it).
    Ok(wrapper.into_js_value().unchecked_into())
}
