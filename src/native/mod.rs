//! Blocking native driver (feature `native`): a small HTTP/1.1 client on
//! `std::net`, a driver thread that runs one [`LockMachine`](crate::core::LockMachine),
//! and the user-facing [`Client`] / [`Lock`] API.
//!
//! Only `http://` endpoints are supported here (no TLS dependency); use the JS
//! package or a local TLS-terminating proxy for `https://`.

pub mod entropy;
pub mod http;

pub use entropy::OsEntropy;
mod async_client;
mod client;
mod driver;
mod oneshot;
#[cfg(test)]
mod fake;

pub use crate::core::etcd::{EtcdAuth, EtcdConfig};
pub use async_client::{AsyncClient, AsyncLock, LostFuture};
pub use client::{CancelToken, Client, Lock};
