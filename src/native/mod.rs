//! Native driver (feature `native`): a small blocking HTTP/1.1 client on
//! `std::net`, a driver thread that runs one [`LockMachine`](crate::core::LockMachine),
//! and two user-facing APIs over it:
//!
//! - blocking: [`Client`] / [`Lock`] (cancel a wait with [`CancelToken`]);
//! - async: [`AsyncClient`] / [`AsyncLock`] / [`LostFuture`], futures completed
//!   by the driver thread, so they run under any executor (tokio, async-std,
//!   smol, …) while the crate depends on none; cancel by dropping the future.
//!
//! Both share one session when converted ([`Client::to_async`],
//! [`AsyncClient::to_blocking`]).
//!
//! `https://` endpoints are served through rustls ([`tls`]): the platform's
//! root certificates by default, or a CA file, and a client certificate for
//! mutual TLS (etcd's `--client-cert-auth`), configured by [`TlsConfig`] in
//! [`ClientOptions`] for [`Client::connect_with`].

pub mod entropy;
pub mod http;
pub mod tls;

pub use entropy::OsEntropy;
mod async_client;
mod client;
mod driver;
#[cfg(test)]
mod fake;
mod oneshot;
mod stream;

pub use crate::core::etcd::{EtcdAuth, EtcdConfig};
pub use crate::core::{Leadership, LockKind, MAX_ACQUIRE_ALL, MAX_CAMPAIGN_VALUE, MAX_PERMITS};
pub use async_client::{AsyncClient, AsyncLock, LostFuture};
pub use client::{CancelToken, Client, ClientOptions, Lock, Observer};
pub use tls::TlsConfig;
