//! The deterministic simulation harness shared by the `sim_*` integration tests:
//! `net` is the simulated world (network, clocks, pauses, scripted users),
//! the `*_model` modules are in-memory servers speaking each backend's HTTP API
//! (`durable_model`, the Durable Object lock service around its real state
//! machine, is declared by tests/sim_durable.rs, which provides the
//! `crate::core` its included files name).

pub mod etcd_model;
pub mod net;
