//! ZooKeeper over a byte stream (issue 29), lowest layer first.
//!
//! At the bottom, the wire format of ZooKeeper 3.8's client protocol
//! (`zookeeper.jute` and `ClientCnxn` of Apache ZooKeeper), with no state
//! of its own:
//! - `jute`: the jute binary encoding (`jute::Writer`, and
//!   `jute::Reader`, which never panics on what a server sends) and the
//!   i32-length framing (`jute::encode_frame`, `jute::FrameDecoder`,
//!   bounded by `jute.maxbuffer`'s default 0xfffff);
//! - `records`: the records the lock recipes exchange (connect pair,
//!   request/reply headers, `Stat`, create2, delete, exists, getData,
//!   getChildren2, setData, watch events, auth) and the op-code, xid,
//!   error-code, create-mode and permission constants.
//!
//! Above it:
//! - [`address`] and [`config`]: the connection string
//!   (`host:port[,host:port…][/chroot]`) and [`ZkConfig`];
//! - `session`: one ZooKeeper session over successive streams (connect
//!   handshake, negotiated timeout, pings at a third of it, in-order reply
//!   matching, reconnect with session id and password, local expiry bound,
//!   digest auth, watch events, chroot, closeSession);
//! - `paths` and `recipes`: lock names as paths and Curator's recipes,
//!   node for node under `<root>/<escaped name>` (`InterProcessMutex`,
//!   `InterProcessReadWriteLock`, `InterProcessSemaphoreV2`, `LeaderLatch`;
//!   the token is the node's czxid; see `recipes` for the kinds and for how
//!   a plain exclusive lock and the read-write lock share a name);
//! - [`ZkMachine`]: the [`LockMachine`](crate::core::LockMachine) over them
//!   (every kind, elections; the session is the lease). `AcquireAll` is the
//!   generic `MultiLock`'s (one mutex per name, as `InterProcessMultiLock`).
//!
//! Next (not here yet): `multi` on the wire, resuming a session from a
//! handle.

pub mod address;
pub mod config;
mod engine;
#[cfg(test)]
mod fake;
pub(crate) mod jute;
#[cfg(test)]
mod machine_tests;
pub(crate) mod paths;
pub(crate) mod recipes;
pub(crate) mod records;
pub(crate) mod session;

pub use address::{ZkAddress, ZkHost};
pub use config::{ZkConfig, ZkDigest};
pub use engine::ZkMachine;
