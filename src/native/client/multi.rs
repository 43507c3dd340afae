//! Multi-resource locks on the blocking client: [`Client::acquire_all`].

use super::{CancelToken, Client, Lock};
use crate::core::{AcquireOptions, LockError, Operation};
use crate::native::driver::Call;

impl Client {
    /// Holds every name in `names` or none: exclusive locks taken in a
    /// canonical order (so that clients asking for overlapping sets in any
    /// order cannot deadlock), each with its own fencing token; on any
    /// failure the names already taken are released before this returns.
    /// Returns the locks in the order of `names`; `Ok(None)` only for
    /// `Wait::Try` when one of them is held elsewhere. The wait bound covers
    /// the whole set. `INVALID_ARGUMENT` before any request for an empty
    /// list, a name given twice or more than
    /// [`MAX_ACQUIRE_ALL`](crate::core::MAX_ACQUIRE_ALL) names.
    pub fn acquire_all(
        &self,
        names: &[&str],
        opts: AcquireOptions,
        cancel: Option<&CancelToken>,
    ) -> Result<Option<Vec<Lock>>, LockError> {
        let (call, label) = acquire_all_call(names, opts)?;
        self.locks_of(self.call_cancellable(call, &label, cancel)?)
    }

    /// The locks of an acquireAll's completion, in its order.
    pub(crate) fn locks_of(
        &self,
        done: crate::native::driver::Completion,
    ) -> Result<Option<Vec<Lock>>, LockError> {
        let all = done.all;
        match done.outcome.into_acquired_all()? {
            None => Ok(None),
            Some(infos) if infos.len() == all.len() => infos
                .into_iter()
                .zip(all)
                .map(|(info, shared)| self.lock_from(info, Some(shared)))
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(_) => Err(LockError::internal(
                "the driver handed out a lock set without the state of each lock",
            )),
        }
    }
}

/// The acquireAll request (names checked first) and a label naming the set.
pub(crate) fn acquire_all_call(
    names: &[&str],
    options: AcquireOptions,
) -> Result<(Call, String), LockError> {
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    crate::core::check_acquire_all_names(&names)?;
    let label = names.join(", ");
    Ok((Call::Start(Operation::AcquireAll { names, options }), label))
}
