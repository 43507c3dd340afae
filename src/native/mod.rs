//! Blocking native driver (feature `native`): a small HTTP/1.1 client on
//! `std::net`, a driver thread that runs one [`LockMachine`](crate::core::LockMachine),
//! and the user-facing [`Client`] / [`Lock`] API.
//!
//! `https://` endpoints are served through rustls ([`tls`]): the platform's
//! root certificates by default, or a CA file, and a client certificate for
//! mutual TLS (etcd's `--client-cert-auth`), configured by [`TlsConfig`] in
//! [`ClientOptions`] for [`Client::connect_with`].

pub mod entropy;
pub mod http;
pub mod tls;

pub use entropy::OsEntropy;
mod client;
mod driver;
#[cfg(test)]
mod fake;

pub use crate::core::etcd::{EtcdAuth, EtcdConfig};
pub use client::{CancelToken, Client, ClientOptions, Lock};
pub use tls::TlsConfig;
