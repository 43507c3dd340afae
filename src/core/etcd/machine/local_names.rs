//! Names this client is using: a second local acquire of a name queues behind the first.

use std::collections::VecDeque;

use super::{EtcdMachine, HeldLock};
use crate::core::{Millis, OpId};

impl EtcdMachine {
    // ---- names in use by this client ------------------------------------

    /// Claims `name` for `op`; false if another local operation uses it.
    pub(super) fn claim_name(&mut self, name: &str, op: OpId) -> bool {
        match self.busy_names.get_mut(name) {
            Some(queue) => {
                queue.push_back(op);
                false
            }
            None => {
                self.busy_names.insert(name.to_string(), VecDeque::new());
                true
            }
        }
    }

    /// The current user of `name` is done with it: start the next local waiter.
    pub(super) fn free_name(&mut self, now: Millis, name: &str) {
        let next = match self.busy_names.get_mut(name) {
            Some(queue) => queue.pop_front(),
            None => return,
        };
        match next {
            Some(op) => {
                self.unqueue_acquire(now, op);
            }
            None => {
                self.busy_names.remove(name);
            }
        }
    }

    pub(super) fn unqueue_local(&mut self, name: &str, op: OpId) {
        if let Some(q) = self.busy_names.get_mut(name) {
            q.retain(|o| *o != op);
        }
    }

    /// A hold that claimed its name locally is gone: another local hold of
    /// the same key (a re-entry) takes the claim over, else the name is free.
    pub(super) fn pass_on_name(&mut self, now: Millis, h: &HeldLock) {
        if let Some((_, other)) = self
            .locks
            .iter_mut()
            .find(|(_, l)| l.key == h.key && l.reentered)
        {
            other.reentered = false;
            return;
        }
        self.free_name(now, &h.name);
    }
}
