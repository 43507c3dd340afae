//! Development and test tooling for edgelock.
//!
//! Starts real backends on free loopback ports, each in its own temp dir,
//! and stops them on drop (even when a test panics; and, through a small
//! watchdog process, even when the test process is killed):
//!
//! - [`EtcdServer`] / [`EtcdCluster`]: Debian's `/usr/bin/etcd` (3.4), or
//!   `$EDGELOCK_ETCD_BIN` (etcd 3.5 in the test suite).
//! - [`RedisServer`]: `/usr/bin/redis-server` without persistence, optionally
//!   under libfaketime for clock-skew tests; [`RespConn`] talks to it.
//! - [`Webdis`]: `/usr/bin/webdis` in front of a Redis.
//! - [`ZooKeeperServer`] / [`ZooKeeperEnsemble`]: Debian's ZooKeeper 3.8
//!   (a JVM), standalone or a quorum, tickTime 200 ms.
//! - [`CuratorPeer`]: Debian's Apache Curator 5.4 in a JVM, driven line by
//!   line (mutex, semaphore, read-write lock, leader latch, multi-lock).
//! - [`UpstashGateway`]: a local Upstash-REST-compatible gateway (see
//!   [`gateway`]); also the `upstash-gateway` binary.
//! - [`FencedResource`]: a tiny HTTP resource that rejects stale fencing
//!   tokens and logs every attempt; also the `fenced-resource` binary.
//! - [`TestPki`]: a CA, server and client certificates made with `openssl`;
//!   [`EtcdTls`] serves etcd over https with them, [`TlsFront`] (`stunnel4`)
//!   puts TLS in front of a plain-HTTP server (the gateway, webdis).
//! - [`Env`]: all of the above at once; also the `testenv` binary, which
//!   prints the URLs as one JSON line for Node tests and benchmarks.
//!
//! This crate must not depend on `edgelock` (edgelock dev-depends on it).

pub mod base64;
pub mod curator;
pub mod env;
pub mod etcd;
pub mod fault_proxy;
pub mod fenced;
pub mod gateway;
pub mod http1;
pub mod port;
pub mod process;
pub mod redis;
pub mod resp;
pub mod serve_cli;
pub mod tempdir;
pub mod tls;
pub mod webdis;
pub mod workerd;
pub mod zookeeper;

pub use curator::{CuratorPeer, HeldNode};
pub use env::{Env, EnvBuilder};
pub use etcd::{etcd_bin, EtcdCluster, EtcdOptions, EtcdServer, EtcdStatus, EtcdTls};
pub use fault_proxy::{Fault, FaultProxy};
pub use fenced::FencedResource;
pub use gateway::{GatewayConfig, UpstashGateway};
pub use http1::{http_request, HttpResponse};
pub use port::{free_port, free_ports};
pub use process::{ProcessGuard, ProcessSpec};
pub use redis::{RedisOptions, RedisServer};
pub use resp::{RespConn, RespValue};
pub use tempdir::TempDir;
pub use tls::{TestPki, TlsFront};
pub use webdis::Webdis;
pub use zookeeper::{
    zk_four_letter_word, zk_handshake, zk_mode, ZkHandshake, ZooKeeperEnsemble, ZooKeeperOptions,
    ZooKeeperServer,
};
