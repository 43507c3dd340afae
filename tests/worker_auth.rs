//! The Worker's access policy (src/worker/auth.rs) on the host: the module
//! is plain Rust, but the Worker compiles only for wasm32, so its unit tests
//! run here by including the file. The routes' refusals in workerd are
//! tested in tests/worker/worker.test.mjs.

/// What `crate::core` names inside the included module.
mod core {
    pub use edgelock::core::*;
}

#[path = "../src/worker/auth.rs"]
#[allow(dead_code)]
mod auth;
