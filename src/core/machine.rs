//! The interface every lock protocol machine implements.
//!
//! Drivers do not call a machine directly: they run it inside a
//! [`Session`](super::session::Session), whose documentation teaches the one
//! driver loop with a compiled example. Tests and simulations may drive a
//! machine by hand with the same loop.

use super::operation::{Capabilities, Event, Operation};
use super::types::{
    AcquireOptions, BackendKind, Input, LockHandle, LockId, Millis, OpId, Transmit,
};
use super::LockError;

/// A lock protocol as a sans-IO state machine.
///
/// Its methods fall into four groups (the shape of quinn-proto's `Connection`):
///
/// - **getters**: [`backend`](Self::backend), [`capabilities`](Self::capabilities),
///   [`live_count`](Self::live_count);
/// - **user calls**: [`start`](Self::start) (an [`Operation`] as data),
///   [`cancel`](Self::cancel), [`close`](Self::close);
/// - **`handle_*`**, the outside world: [`handle_input`](Self::handle_input)
///   (an HTTP answer for a request the machine asked for) and
///   [`handle_timeout`](Self::handle_timeout);
/// - **`poll_*`**, what the machine wants: [`poll_transmit`](Self::poll_transmit)
///   (requests to send or cancel), [`poll_event`](Self::poll_event)
///   (completions, renewals, losses) and [`poll_timeout`](Self::poll_timeout)
///   (when to call `handle_timeout`).
///
/// After every user call or `handle_*`, drain `poll_transmit` and `poll_event`
/// until both are empty, then sleep until the next input or `poll_timeout`.
/// Every call takes `now`, which never goes backwards; the machine reads no
/// clock, RNG or socket of its own. Every `Send` is eventually answered by a
/// final input (`Response`, `StreamEnd` or `Failed`) unless the machine
/// cancelled it; inputs for cancelled or unknown ids are ignored.
pub trait LockMachine {
    /// Which backend this machine speaks to (for messages and handles).
    fn backend(&self) -> BackendKind;

    /// The lock kinds and options this machine serves. [`start`](Self::start)
    /// refuses anything else with `INVALID_ARGUMENT` before a request is sent.
    fn capabilities(&self) -> Capabilities;

    /// Number of operations and held locks still alive (drivers use it to
    /// know when a close has drained, tests to check nothing leaks).
    fn live_count(&self) -> usize;

    /// Starts `op`. Checks the capabilities, then hands it to
    /// [`start_operation`](Self::start_operation). Invalid input returns
    /// `Err` and leaves the machine untouched; otherwise the operation
    /// completes later with exactly one [`Event::Completed`] for the
    /// returned id (possibly already queued when this returns).
    fn start(&mut self, now: Millis, op: Operation) -> Result<OpId, LockError> {
        self.capabilities().check(self.backend(), &op)?;
        self.start_operation(now, op)
    }

    /// The machine's own part of [`start`](Self::start), called only with
    /// operations its capabilities admit. Validates names, TTLs and handles.
    fn start_operation(&mut self, now: Millis, op: Operation) -> Result<OpId, LockError>;

    /// Cancels a pending operation (typically a waiting acquire). It
    /// completes with `Aborted` once it has cleaned up after itself (removed
    /// its waiting key). Unknown or finished ops are ignored.
    fn cancel(&mut self, now: Millis, op: OpId);

    /// Releases everything and ends the machine; the returned operation
    /// completes with [`Outcome::Closed`](super::Outcome::Closed) once nothing
    /// is left. Pending operations fail with `Closed`, held locks are
    /// reported `Lost` (`ClientClosed`).
    fn close(&mut self, now: Millis) -> OpId;

    /// An answer (whole, a chunk of a stream, its end, or a transport
    /// failure) to a request this machine sent.
    fn handle_input(&mut self, now: Millis, input: Input);

    /// Called when [`poll_timeout`](Self::poll_timeout) has been reached
    /// (calling it early is harmless).
    fn handle_timeout(&mut self, now: Millis);

    /// The next request to send or cancel.
    fn poll_transmit(&mut self) -> Option<Transmit>;

    /// The next completion, renewal or loss.
    fn poll_event(&mut self) -> Option<Event>;

    /// The earliest time at which `handle_timeout` must be called, if any.
    fn poll_timeout(&self) -> Option<Millis>;
}

impl<M: LockMachine + ?Sized> LockMachine for Box<M> {
    fn backend(&self) -> BackendKind {
        (**self).backend()
    }
    fn capabilities(&self) -> Capabilities {
        (**self).capabilities()
    }
    fn live_count(&self) -> usize {
        (**self).live_count()
    }
    fn start_operation(&mut self, now: Millis, op: Operation) -> Result<OpId, LockError> {
        (**self).start_operation(now, op)
    }
    fn cancel(&mut self, now: Millis, op: OpId) {
        (**self).cancel(now, op)
    }
    fn close(&mut self, now: Millis) -> OpId {
        (**self).close(now)
    }
    fn handle_input(&mut self, now: Millis, input: Input) {
        (**self).handle_input(now, input)
    }
    fn handle_timeout(&mut self, now: Millis) {
        (**self).handle_timeout(now)
    }
    fn poll_transmit(&mut self) -> Option<Transmit> {
        (**self).poll_transmit()
    }
    fn poll_event(&mut self) -> Option<Event> {
        (**self).poll_event()
    }
    fn poll_timeout(&self) -> Option<Millis> {
        (**self).poll_timeout()
    }
}

/// Shorthands that build an [`Operation`] and [`start`](LockMachine::start)
/// it, for simulations and tests that drive a machine by hand. Drivers use a
/// [`Session`](super::session::Session) instead.
pub trait LockMachineExt: LockMachine {
    /// Starts an exclusive acquire of `name`.
    fn acquire(
        &mut self,
        now: Millis,
        name: &str,
        options: &AcquireOptions,
    ) -> Result<OpId, LockError> {
        self.start(now, Operation::acquire(name, *options))
    }
    /// Starts a release of `lock`.
    fn release(&mut self, now: Millis, lock: LockId) -> Result<OpId, LockError> {
        self.start(now, Operation::Release { lock })
    }
    /// Starts an extend of `lock`.
    fn extend(
        &mut self,
        now: Millis,
        lock: LockId,
        ttl_ms: Option<u64>,
    ) -> Result<OpId, LockError> {
        self.start(now, Operation::Extend { lock, ttl_ms })
    }
    /// Starts a resume from `handle`.
    fn resume(&mut self, now: Millis, handle: &LockHandle) -> Result<OpId, LockError> {
        self.start(
            now,
            Operation::Resume {
                handle: handle.clone(),
            },
        )
    }
    /// Starts an inspect of `name`.
    fn inspect(&mut self, now: Millis, name: &str) -> Result<OpId, LockError> {
        self.start(
            now,
            Operation::Inspect {
                name: name.to_string(),
            },
        )
    }
}

impl<M: LockMachine + ?Sized> LockMachineExt for M {}
