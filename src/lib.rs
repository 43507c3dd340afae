#![warn(missing_docs, unreachable_pub)]
//! edgelock: distributed locks over HTTP, from one sans-IO core.
//!
//! - [`core`]: the protocol machines (etcd lease/revision recipe, Redis single
//!   node, Redlock) — pure state machines, usable from any runtime.
//! - [`native`] (feature `native`): a blocking driver and Rust client API.
//! - `js` (feature `js`): the wasm-bindgen bindings behind the npm package.
//! - `worker` (feature `worker`): the Cloudflare Worker job coordinator.

pub mod core;

#[cfg(feature = "native")]
pub mod native;

#[cfg(all(feature = "js", target_arch = "wasm32"))]
pub mod js;

#[cfg(all(feature = "worker", target_arch = "wasm32"))]
pub mod worker;

pub use crate::core::{
    AcquireOptions, BackendKind, Event, LockError, LockHandle, LockInfo, LockMachine, LockStatus,
    Wait,
};
