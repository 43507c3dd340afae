//! Id allocation and output queues shared by every machine.

use std::collections::VecDeque;

use super::operation::{Event, Outcome};
use super::types::{
    HttpRequest, LockId, LostReason, Millis, OpId, Redacted, RequestId, StreamOpen, Transmit,
};
use super::LockError;

/// Allocates request, operation and lock ids, and queues the transmits and
/// events a machine hands out through its `poll_transmit` / `poll_event`.
#[derive(Default, Debug)]
pub struct Outbox {
    next_request: u64,
    next_op: u64,
    next_lock: u64,
    transmits: VecDeque<Transmit>,
    events: VecDeque<Event>,
}

impl Outbox {
    /// A fresh request id (never reused by this outbox).
    pub fn request_id(&mut self) -> RequestId {
        self.next_request += 1;
        RequestId(self.next_request)
    }
    /// A fresh operation id (never reused by this outbox).
    pub fn op_id(&mut self) -> OpId {
        self.next_op += 1;
        OpId(self.next_op)
    }
    /// A fresh lock id (never reused by this outbox).
    pub fn lock_id(&mut self) -> LockId {
        self.next_lock += 1;
        LockId(self.next_lock)
    }
    /// Queues `req` for the driver to send.
    pub fn send(&mut self, req: HttpRequest) {
        self.transmits.push_back(Transmit::Send(req));
    }
    /// Queues the opening of a byte stream for the driver.
    pub fn open(&mut self, stream: StreamOpen) {
        self.transmits.push_back(Transmit::Open(stream));
    }
    /// Queues bytes to write on stream `id`.
    pub fn write(&mut self, id: RequestId, data: Redacted) {
        self.transmits.push_back(Transmit::Write { id, data });
    }
    /// Queues a cancel of request `id` (or the close of stream `id`) for the driver.
    pub fn cancel(&mut self, id: RequestId) {
        self.transmits.push_back(Transmit::Cancel(id));
    }
    /// Completes operation `op` with `result`.
    pub fn complete(&mut self, op: OpId, result: Result<Outcome, LockError>) {
        self.events.push_back(Event::Completed { op, result });
    }
    /// Completes `op` with an error.
    pub fn fail(&mut self, op: OpId, error: LockError) {
        self.complete(op, Err(error));
    }
    /// Reports a renewal of `lock`.
    pub fn renewed(&mut self, lock: LockId, expires_at: Millis) {
        self.events.push_back(Event::Renewed { lock, expires_at });
    }
    /// Reports the loss of `lock`.
    pub fn lost(&mut self, lock: LockId, name: String, reason: LostReason) {
        self.events.push_back(Event::Lost { lock, name, reason });
    }
    /// The next request or cancel for the driver, oldest first.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.transmits.pop_front()
    }
    /// The next event for the driver, oldest first.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }
}

/// Earliest of several optional deadlines.
pub fn earliest(deadlines: impl IntoIterator<Item = Option<Millis>>) -> Option<Millis> {
    deadlines.into_iter().flatten().min()
}
