//! Reentrant locks on the blocking client: [`Client::reenter`].

use super::{Client, Lock};
use crate::core::{LockError, LockHandle, Operation};
use crate::native::driver::Call;

impl Client {
    /// Re-enters an exclusive lock by proof of ownership: its handle (from
    /// [`Lock::handle`], possibly of another process), never "the current
    /// thread". The backend, owner-checked, adds one hold to the handle's
    /// hold and counts it there, so the count survives this process; the
    /// returned [`Lock`] has the outer hold's fencing token and handle and
    /// is renewed like a resumed lock. Releasing any hold of that owner
    /// takes one hold away; only the release of the last hold frees the
    /// lock. `LOST` if the handle's hold is gone (nothing changes);
    /// `INVALID_ARGUMENT` before any request for a permit's, a shared
    /// hold's or a leadership's handle. On Redlock the hold is counted on
    /// every node in one round and granted on a quorum (see the README).
    pub fn reenter(&self, handle: &LockHandle) -> Result<Lock, LockError> {
        self.resumed(self.call(reenter_call(handle))?)
    }
}

pub(crate) fn reenter_call(handle: &LockHandle) -> Call {
    Call::Start(Operation::Reenter {
        handle: handle.clone(),
    })
}
