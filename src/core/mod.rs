//! The sans-IO core: protocol state machines that take time as an argument,
//! emit HTTP requests as data and consume responses. No clock reads, no RNG
//! reads, no sockets, no async runtime, no wasm-bindgen (see `machine` for the
//! driver loop).

pub(crate) mod b64;
pub mod backend;
pub mod budget;
pub mod d1;
pub mod durable;
pub mod error;
pub mod etcd;
pub(crate) mod json_fields;
pub(crate) mod json_stream;
mod kind;
pub(crate) mod lease;
pub mod machine;
pub mod multi;
pub mod names;
pub mod operation;
pub mod outbox;
pub mod redis;
pub(crate) mod runtime;
pub mod session;
pub(crate) mod sse_stream;
pub mod types;
// ZooKeeper (issue 29): parts of the wire layer are there for the recipes
// still to come (rwlock, semaphore, latch).
#[allow(dead_code)]
pub mod zookeeper;

pub use backend::BackendSpec;
pub use error::LockError;
pub use machine::{LockMachine, LockMachineExt};
pub use multi::MultiLock;
pub use operation::{
    check_acquire_all_names, check_campaign_value, Capabilities, Event, KindFamily, LockKind,
    Operation, Outcome, MAX_ACQUIRE_ALL, MAX_CAMPAIGN_VALUE, MAX_PERMITS,
};
pub use types::*;
