//! Close and drain: a machine stops taking operations at `close`, finishes
//! (or abandons) what is under way, and answers every close call once.

use crate::core::outbox::Outbox;
use crate::core::{BackendKind, LockError, OpId, Outcome};

/// Where a machine is in its life.
#[derive(Default)]
pub(crate) struct Closing {
    /// The close calls waiting for the drain to finish.
    waiting: Vec<OpId>,
    started: bool,
    drained: bool,
}

impl Closing {
    /// Records close call `op`; true for the first one (the machine must
    /// start its drain), false for a repeat (answered with the first).
    pub(crate) fn begin(&mut self, op: OpId) -> bool {
        self.waiting.push(op);
        !std::mem::replace(&mut self.started, true)
    }

    /// Whether close was called.
    pub(crate) fn started(&self) -> bool {
        self.started
    }

    /// The error for an operation started after close.
    pub(crate) fn check_open(&self, backend: BackendKind) -> Result<(), LockError> {
        if self.started {
            Err(LockError::Closed {
                backend: backend.as_str(),
            })
        } else {
            Ok(())
        }
    }

    /// Answers every close call once `drained` (nothing left under way).
    pub(crate) fn finish_if(&mut self, drained: bool, out: &mut Outbox) {
        if self.started && drained {
            self.drained = true;
            for op in self.waiting.drain(..) {
                out.complete(op, Ok(Outcome::Closed));
            }
        }
    }

    /// Whether the drain finished.
    pub(crate) fn drained(&self) -> bool {
        self.drained
    }
}
