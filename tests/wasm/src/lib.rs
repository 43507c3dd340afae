//! Empty: the tests live in `tests/`. See Cargo.toml.
