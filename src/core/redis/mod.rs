//! Redis over HTTP (Upstash REST, Webdis): single-node lock and Redlock.
//!
//! - [`RedisMachine`]: one Redis node, the classic recipe — `SET key token NX
//!   PX ttl` plus a fencing counter in one Lua script, owner-checked release
//!   and extend, a watchdog renewing at TTL/3.
//! - [`RedlockMachine`]: N independent nodes, each reached by either
//!   protocol; quorum, validity with drift, retries with jitter, and fencing
//!   tokens across nodes (see [`redlock`] for the scheme and its guarantee).
//!
//! Both grant exclusive locks and semaphore permits ([`semaphore`]); one
//! node also grants shared holds of a read-write lock ([`rwlock`]), which
//! Redlock refuses with `INVALID_ARGUMENT`. Both hold elections
//! ([`election`]: campaign, proclaim, leader, observe).
//!
//! Layout: `config` (nodes, defaults and the checks both machines share),
//! `value` (commands and replies), `upstash` / `webdis` (the two
//! HTTP codecs), `codec` (one node), `scripts` (the Lua scripts, one file
//! per kind with their commands and reply parsers), `election` (the
//! election recipe and what a quorum of leader records agrees on), `keys`,
//! `quorum` (pure arithmetic), `round` (one command's answers from a set of
//! nodes); the shared machine: `engine` (the scheduler) runs the tasks of
//! `tasks/` (one state machine per file) through the one interface in
//! `task`, each step given the `context` (settings, nodes, runtime, held
//! locks); `single` and `redlock` are the public faces.

pub mod address;
pub(crate) mod codec;
mod config;
mod connection;
mod context;
pub mod election;
mod engine;
pub(crate) mod keys;
mod link;
pub(crate) mod quorum;
pub mod redlock;
pub(crate) mod resp;
pub(crate) mod round;
pub mod rwlock;
pub(crate) mod scripts;
pub mod semaphore;
pub mod single;
pub(crate) mod subscription;
mod task;
mod tasks;
pub(crate) mod upstash;
pub mod value;
pub(crate) mod webdis;

pub use config::{RedisNode, RedisProtocol, DEFAULT_DRIFT_FACTOR, DEFAULT_MAX_SUBSCRIPTIONS};
pub use redlock::{RedlockConfig, RedlockFencing, RedlockMachine};
pub use single::{RedisConfig, RedisMachine};
pub use value::{RedisCommand, RedisValue, ReplyError};

#[cfg(test)]
mod machine_tests;
