#![warn(missing_docs, unreachable_pub)]
//! edgelock: distributed locks with fencing tokens, from one sans-IO core.
//!
//! A lock is granted with a **fencing token** that strictly increases across
//! successive holders: pass it to the resource you protect and have it reject
//! lower tokens (the only real protection against a holder paused past its
//! lease). Backends, each spoken over plain HTTP:
//!
//! - **etcd** (v3 JSON gateway: lease + create-revision recipe; also
//!   semaphores, read/write locks and leader election);
//! - **Redis** on one node (Upstash REST protocol or Webdis) and **Redlock**
//!   over N independent Redis nodes;
//! - the **Durable Object lock service** (a Cloudflare Worker,
//!   `docs/lock-service-api.md`) and a lease row in a **Cloudflare D1** table.
//!
//! # Where to start
//!
//! - From Rust: [`native::Client`] (blocking) or [`native::AsyncClient`]
//!   (futures that run under any executor; the crate depends on no async
//!   runtime), both feature `native`. Connect with a
//!   [`core::BackendSpec`] (which backend, its URLs and options), then
//!   `acquire` a [`native::Lock`] / [`native::AsyncLock`].
//! - From JavaScript (Node, Deno, Bun, browsers, Cloudflare Workers): the npm
//!   package `edgelock` (`pkg-src/`), this crate compiled to wasm with feature
//!   `js`.
//! - To drive the protocol yourself (another runtime, a simulation): the
//!   [`core`] machines implement [`LockMachine`]: no clock, no I/O, no
//!   randomness of their own; time comes in with every input and HTTP requests
//!   go out as data. [`core::session::Session`] is the one driver loop every
//!   driver uses; its module doc shows the loop on a scripted Redis node.
//!
//! ```no_run
//! # #[cfg(feature = "native")]
//! # fn main() -> Result<(), edgelock::LockError> {
//! use std::time::Duration;
//! use edgelock::core::BackendSpec;
//! use edgelock::native::{Client, EtcdConfig};
//!
//! let spec = BackendSpec::Etcd(EtcdConfig::new(vec!["http://127.0.0.1:2379".into()]));
//! let client = Client::connect(spec)?;
//! // Wait up to 30 s for the lock.
//! let lock = client.acquire("nightly-report", Some(Duration::from_secs(30)))?;
//! let token: u64 = lock.fencing_token(); // the resource rejects lower tokens
//! # let _ = token;
//! if lock.is_lost() { /* stop: someone else may hold it now */ }
//! lock.release()?; // deletes exactly this holder's key
//! # Ok(())
//! # }
//! # #[cfg(not(feature = "native"))]
//! # fn main() {}
//! ```
//!
//! # Layers
//!
//! - [`core`]: the protocol state machines (sans-IO), the backend table
//!   ([`core::BackendSpec`]) and the driver loop ([`core::session`]).
//! - [`native`] (feature `native`): a blocking HTTP/1.1 client on `std::net`
//!   (rustls for `https://`), a driver thread, and the Rust client APIs.
//! - `js` (feature `js`, wasm32): the wasm-bindgen bindings behind the npm
//!   package.
//! - `worker` (feature `worker`, wasm32): the Cloudflare Worker (job
//!   coordinator and the Durable Object lock service).

pub mod core;

#[doc(hidden)]
pub mod internals;

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
