//! The interface every lock protocol machine implements, and the one driver loop.
//!
//! # The driver loop
//!
//! A driver owns one machine and performs its I/O. It never interprets a
//! protocol: it only moves bytes and time.
//!
//! ```text
//! loop {
//!     // 1. feed exactly one input (a user call, an HTTP result, or a timer),
//!     //    always with the current time:
//!     //      machine.acquire(now, ..) / release / extend / resume / inspect / cancel / close
//!     //      machine.handle_input(now, Input::Response | Chunk | StreamEnd | Failed)
//!     //      machine.handle_timeout(now)          // when poll_timeout() has passed
//!     // 2. drain every output:
//!     while let Some(t) = machine.poll_transmit() { perform(t) }   // Send / Cancel
//!     while let Some(e) = machine.poll_event() { deliver(e) }       // results, Lost
//!     // 3. sleep until the next input or machine.poll_timeout(), whichever is first
//! }
//! ```
//!
//! Rules a driver keeps: `now` never goes backwards; every `Send` is eventually
//! answered by a final input (`Response`, `StreamEnd` or `Failed`) unless the
//! machine cancelled it; inputs for cancelled or unknown ids are harmless (the
//! machine ignores them), so races between a late answer and a cancel need no
//! care in the driver.

use super::types::*;
use super::LockError;

pub trait LockMachine {
    /// Which backend this machine speaks to (for messages and handles).
    fn backend(&self) -> BackendKind;

    /// Start acquiring `name`. Validates everything before any request is sent;
    /// invalid input returns `Err` and leaves the machine untouched.
    /// Completes with `Event::Acquired`, `Event::NotAcquired` (for `Wait::Try`) or
    /// `Event::Failed`.
    fn acquire(&mut self, now: Millis, name: &str, opts: &AcquireOptions) -> Result<OpId, LockError>;

    /// Release a held lock; completes with `Event::Released` (idempotent: a lock
    /// already lost or released reports `held_until_release: false`).
    fn release(&mut self, now: Millis, lock: LockId) -> Result<OpId, LockError>;

    /// Extend a held lock's validity (`ttl_ms` where the backend supports per-lock
    /// TTLs); completes with `Event::Extended` or `Event::Failed` (`NotHeld`/`Lost`).
    fn extend(&mut self, now: Millis, lock: LockId, ttl_ms: Option<u64>) -> Result<OpId, LockError>;

    /// Adopt a lock from a serialised handle (another process or invocation).
    /// Completes with `Event::Acquired` if the backend confirms the handle still
    /// holds the lock, else `Event::Failed` with `LockError::Lost`.
    fn resume(&mut self, now: Millis, handle: &LockHandle) -> Result<OpId, LockError>;

    /// Ask the backend who holds `name`; completes with `Event::Inspected`.
    fn inspect(&mut self, now: Millis, name: &str) -> Result<OpId, LockError>;

    /// Cancel a pending operation (typically a waiting acquire). The operation
    /// completes with `Event::Failed(Aborted)` after it has cleaned up after
    /// itself (e.g. removed its waiting key). Unknown or finished ops are ignored.
    fn cancel(&mut self, now: Millis, op: OpId);

    /// Release everything and end the session; completes with `Event::Closed`.
    /// Pending operations fail with `Closed`.
    fn close(&mut self, now: Millis) -> OpId;

    fn handle_input(&mut self, now: Millis, input: Input);

    /// Called when `poll_timeout()` has been reached (calling it early is harmless).
    fn handle_timeout(&mut self, now: Millis);

    fn poll_transmit(&mut self) -> Option<Transmit>;
    fn poll_event(&mut self) -> Option<Event>;

    /// The earliest time at which `handle_timeout` must be called, if any.
    fn poll_timeout(&self) -> Option<Millis>;

    /// Number of operations and held locks still alive (drivers use it to know
    /// when a close has drained, tests to check nothing leaks).
    fn live_count(&self) -> usize;
}
