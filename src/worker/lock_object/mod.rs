//! The Durable Object lock service (HTTP API v1, docs/lock-service-api.md):
//! one object of class `LockObject` per lock name, bound as
//! `EDGELOCK_LOCKS` (wrangler.toml), reached through the Worker's front at
//! `POST /lock/v1/<op>?name=<name>` or through the binding.
//!
//! - [`protocol`]: request checks and answers, on plain data;
//! - [`machine`]: the lock's stored state and its transitions, on plain data;
//! - `object`: the `#[durable_object]` glue (storage, alarm, held-open waiters);
//! - [`front`]: the Worker route (bearer token, then forwarding).
//!
//! `protocol` and `machine` use no `worker` types; their unit tests run on
//! the host (tests/worker_lock_object.rs).
//!
//! What the service guarantees:
//! - **Mutual exclusion within a lease.** One exclusive holder, or shared
//!   holders only (a read-write lock), or at most `limit` permits in
//!   distinct slots (a semaphore); a holder is dropped only by its own
//!   release (owner and token checked)
//!   or at its lease end (the object's alarm, or any later request, sees
//!   it ended first). Every check happens in the object, which runs one
//!   transition at a time.
//! - **Fencing.** Each grant increments a stored counter before the answer
//!   leaves the object (the state write is issued first and the runtime's
//!   output gate holds the answer until it is durable); the token is the
//!   new value. Tokens are strictly increasing across releases, expiries,
//!   evictions and restarts.
//! - **FIFO.** Waiters are granted in the order they queued (as many heads
//!   as are compatible with the holders: a queued writer is not overtaken
//!   by later readers); a re-sent
//!   `acquire` of a queued owner keeps its place (the queue is stored).
//!   A waiter is answered in the same request that waited: by the release
//!   or expiry that frees the lock (no extra round trip), or with
//!   `acquired:false` when its `waitMs` ends.
//! - **Late calls are harmless.** A release, extend or resume by an owner
//!   whose lease ended answers `false` and never touches the next holder.
//!   A waiting poll of an owner that left (`acquire` with `waitMs` 0) is
//!   answered `acquired:false`, never queued nor granted (it was overtaken
//!   by its own leave).
//! - **Refusals change nothing.** Bad input is refused (400/404/405/413)
//!   before the state is read; messages never repeat an owner or token.
//!
//! Limits: at most [`machine::MAX_WAITERS`] queued waiters (beyond that an
//! `acquire` answers `acquired:false` at once). Queued entries left by a
//! restart are dropped when they reach the head. workerd does not tell the
//! object that a waiting caller disconnected, so such a waiter is granted
//! in its turn: its client gets the grant back by re-sending `acquire`
//! with the same owner; if it is gone for good, the lease it asked for
//! runs out (like a crashed holder's).

pub mod front;
pub mod machine;
mod object;
pub mod protocol;

pub use object::LockObject;
