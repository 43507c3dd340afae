//! ZooKeeper over a byte stream (issue 29), lowest layer first.
//!
//! Here so far: the wire format of ZooKeeper 3.8's client protocol as
//! `/work/briefs/zk-design.md` section 1 describes it, with no state of its
//! own:
//! - [`jute`]: the jute binary encoding ([`jute::Writer`], and
//!   [`jute::Reader`], which never panics on what a server sends) and the
//!   i32-length framing ([`jute::encode_frame`], [`jute::FrameDecoder`],
//!   bounded by `jute.maxbuffer`'s default 0xfffff);
//! - [`records`]: the records the lock recipes exchange (connect pair,
//!   request/reply headers, `Stat`, create2, delete, exists, getData,
//!   getChildren2, setData, watch events, auth) and the op-code, xid,
//!   error-code, create-mode and permission constants.
//!
//! Next (not here yet): the session machine over the core's byte-stream
//! transport (connect handshake, negotiated timeout, pings at a third of it,
//! xid bookkeeping and in-order reply matching, reconnect with session id
//! and password, expiry, digest auth, watch fan-out, chroot), then `multi`,
//! then Curator's recipes (InterProcessMutex first) on top of it.

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
