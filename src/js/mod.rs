//! The JavaScript side of edgelock (feature `js`, wasm32 only).
//!
//! - [`driver`]: runs any [`LockMachine`](crate::core::LockMachine) on the
//!   JavaScript event loop: `fetch` for requests, `setTimeout` for timers,
//!   `performance.now()` for time, `crypto.getRandomValues` for entropy;
//!   byte streams through the runtime's socket factory ([`sockets`]).
//! - [`bindings`]: the `RawLocks` class exported to JavaScript. The public
//!   TypeScript API (`EtcdLocks`, `RedisLocks`, `Redlock`, `Lock`, `LockError`)
//!   is a thin wrapper over it in `pkg-src/api.mjs`.
//!
//! Nothing here knows a protocol: every decision is the core's.

pub(crate) mod args;
pub mod bindings;
pub mod clock;
pub mod driver;
mod election;
pub mod entropy;
mod fetch;
mod sockets;
mod streams;
mod timer;

pub use driver::{Driver, LockNotice, OpFuture};
pub use entropy::JsEntropy;
