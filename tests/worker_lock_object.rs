//! The lock service's request checks and state machine
//! (src/worker/lock_object/{protocol,machine}.rs) on the host: the modules
//! are plain Rust, but the Worker compiles only for wasm32, so their unit
//! tests run here by including the files. The Durable Object itself is
//! tested in workerd by tests/worker/lock_object.test.mjs.

/// What `crate::core` names inside the included modules.
mod core {
    pub use edgelock::core::*;
}

#[path = "../src/worker/lock_object/machine.rs"]
#[allow(dead_code)]
mod machine;

#[path = "../src/worker/lock_object/protocol.rs"]
#[allow(dead_code)]
mod protocol;
