//! One lock client per Worker invocation.
//!
//! The transport is the JavaScript driver of the npm package
//! ([`crate::js::Driver`]): the runtime's `fetch` with an `AbortController`
//! per request (aborted on the session's `Output::Cancel`), `connect()` for
//! `redis://` / `rediss://` nodes ([`super::sockets`]), `setTimeout` for
//! the core's timers and the runtime clock for `now`. In workerd that clock
//! stands still while code runs and moves on across I/O, so every `now` the
//! core sees is taken right after the I/O that preceded it: validity is
//! measured across the requests themselves, which is what the core's
//! "expires from when the establishing request was sent" arithmetic needs.
//!
//! The machine is wrapped in [`Budgeted`] so that the invocation never
//! exceeds its subrequest budget, and `fetch` itself is counted so that the
//! Worker can report how many subrequests the lock really made.
//!
//! The `durable-object` backend targets the binding `EDGELOCK_LOCKS`: a
//! router over the Durable Object namespace of that name in the Worker's
//! `env` ([`use_env`] must have been given it) that sends each request to
//! the object `idFromName(name)` of its `name` query parameter, counted like
//! `fetch` (a request to a Durable Object is a subrequest).

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use js_sys::{Function, Object, Reflect};
use wasm_bindgen::closure::Closure;
use wasm_bindgen::{JsCast, JsValue};

use super::config::Config;
use super::sockets::SocketStats;
use crate::core::backend::{Binding, BindingKind};
use crate::core::budget::Budgeted;
use crate::core::{
    AcquireOptions, BackendSpec, Leadership, LockError, LockHandle, LockId, LockInfo, LockKind,
    LockStatus, Operation,
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
    /// The counted `connect()` factory `redis://` nodes are reached through.
    sockets: Function,
}

thread_local! {
    /// The Worker's `env` as an entry point gave it ([`use_env`]).
    static ENV: RefCell<Option<JsValue>> = const { RefCell::new(None) };
}

#[wasm_bindgen::prelude::wasm_bindgen(module = "cloudflare:workers")]
extern "C" {
    /// The Worker's `env` (workerd's `import { env } from "cloudflare:workers"`).
    #[wasm_bindgen(thread_local_v2, js_name = env)]
    static WORKERS_ENV: JsValue;
}

/// Gives the clients made from now on the Worker's `env`, whose Durable
/// Object namespace `EDGELOCK_LOCKS` the `durable-object` backend uses.
/// Without it they read the runtime's own (`cloudflare:workers`' `env`).
pub fn use_env(env: &JsValue) {
    ENV.with(|e| *e.borrow_mut() = Some(env.clone()));
}

fn worker_env() -> Option<JsValue> {
    ENV.with(|e| e.borrow().clone())
        .or_else(|| Some(WORKERS_ENV.with(JsValue::clone)))
        .filter(|env| env.is_object())
}

/// The bindings object for `backend`'s binding (the lock service's
/// namespace, or a D1 database), if it has one.
fn bindings_for(
    backend: &BackendSpec,
    count: &Rc<Cell<u32>>,
) -> Result<Option<JsValue>, LockError> {
    let Some(Binding { name, kind }) = backend.config().binding() else {
        return Ok(None);
    };
    match kind {
        BindingKind::D1Database => super::d1::bindings(worker_env(), name, count).map(Some),
        BindingKind::DurableObjectNamespace => lock_service_bindings(name, count).map(Some),
    }
}

/// `{ <name>: router }` over the Durable Object namespace bound as `name`.
fn lock_service_bindings(name: &str, count: &Rc<Cell<u32>>) -> Result<JsValue, LockError> {
    let namespace = worker_env()
        .and_then(|env| Reflect::get(&env, &JsValue::from_str(name)).ok())
        .filter(|ns| ns.is_object());
    let Some(namespace) = namespace else {
        return Err(LockError::invalid(format!(
            "the durable-object backend needs the Durable Object namespace binding {name} (see wrangler.toml)"
        )));
    };
    let bindings = Object::new();
    Reflect::set(
        &bindings,
        &JsValue::from_str(name),
        &lock_router(namespace, count.clone()),
    )
    .map_err(|_| LockError::internal("could not build the bindings object"))?;
    Ok(bindings.into())
}

/// `{ fetch(url, init) }` sending each request to the object of `namespace`
/// named by the URL's `name` query parameter (the lock's name, as the core
/// encodes it), counted in `count`.
fn lock_router(namespace: JsValue, count: Rc<Cell<u32>>) -> JsValue {
    let fetch = Closure::<dyn FnMut(JsValue, JsValue) -> Result<JsValue, JsValue>>::new(
        move |url: JsValue, init: JsValue| {
            let url_text = url.as_string().unwrap_or_default();
            let query = url_text.split_once('?').map_or("", |(_, q)| q);
            let encoded = query
                .split('&')
                .find_map(|kv| kv.strip_prefix("name="))
                .ok_or_else(|| JsValue::from(js_sys::Error::new("no lock name in the request")))?;
            let name = js_sys::decode_uri_component(encoded)?;
            let call =
                |target: &JsValue, method: &str, arg: &JsValue| -> Result<JsValue, JsValue> {
                    let f: Function =
                        Reflect::get(target, &JsValue::from_str(method))?.dyn_into()?;
                    f.call1(target, arg)
                };
            let id = call(&namespace, "idFromName", &name.into())?;
            let stub = call(&namespace, "get", &id)?;
            let fetch: Function = Reflect::get(&stub, &JsValue::from_str("fetch"))?.dyn_into()?;
            count.set(count.get().saturating_add(1));
            fetch.call2(&stub, &url, &init)
        },
    );
    let router = Object::new();
    let _ = Reflect::set(&router, &JsValue::from_str("fetch"), &fetch.into_js_value());
    router.into()
}

impl LockClient {
    /// `budget`: subrequests the lock may use in this invocation.
    pub fn new(config: &Config, budget: u32) -> Result<LockClient, LockError> {
        // Requests kept back for releasing and cleaning up when the budget runs low.
        let reserve = config.backend.config().cleanup_requests();
        let inner = config.backend.clone().build(Box::new(JsEntropy::new()?))?;
        let machine = Box::new(Budgeted::new(inner, budget, reserve));
        let fetches = Rc::new(Cell::new(0));
        let fetch = counting_fetch(fetches.clone())?;
        let bindings = bindings_for(&config.backend, &fetches)?;
        let sockets = super::sockets::counted_factory();
        let driver = Driver::new(machine, Some(fetch), bindings, Some(sockets.clone()))?;
        Ok(LockClient {
            driver,
            fetches,
            sockets,
        })
    }

    /// The TCP connections (`redis://` nodes) the lock has held open.
    pub fn connections(&self) -> SocketStats {
        super::sockets::stats(&self.sockets)
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
