//! The deterministic simulation harness shared by the `sim_*` integration tests:
//! `net` is the simulated world (network, clocks, pauses, scripted users),
//! the `*_model` modules are in-memory servers speaking each backend's HTTP API.

pub mod etcd_model;
pub mod net;
