//! Leader election and multi-resource locks on the async client, the twins
//! of the blocking client's (see [`Client::campaign`](super::Client::campaign)
//! and [`Client::acquire_all`](super::Client::acquire_all)). Dropping a
//! future aborts a waiting campaign, observe or acquireAll.

use super::{AsyncClient, AsyncLock, Pending};
use crate::core::{AcquireOptions, Leadership, LockError, Wait};
use crate::native::client::{election, multi};

impl AsyncClient {
    /// Waits to lead the election `name`, announcing `value` (see
    /// [`Client::campaign`](super::Client::campaign)).
    pub async fn campaign(
        &self,
        name: &str,
        value: &str,
        opts: AcquireOptions,
    ) -> Result<Option<AsyncLock>, LockError> {
        let call = election::campaign_call(name, value, opts);
        let done = Pending::start(&self.client, call, true)?.await?;
        Ok(self.client.acquired(done)?.map(AsyncLock::from))
    }

    /// Who leads the election `name` now (`None`: nobody).
    pub async fn leader(&self, name: &str) -> Result<Option<Leadership>, LockError> {
        Pending::start(&self.client, election::leader_call(name), false)?
            .await?
            .outcome
            .into_leader()
    }

    /// Waits until the leadership of `name` differs from `known`, or until
    /// `wait` runs out (then the current, unchanged state). Called in a loop
    /// with what it last returned, it yields every change.
    pub async fn observe_change(
        &self,
        name: &str,
        known: Option<&Leadership>,
        wait: Wait,
    ) -> Result<Option<Leadership>, LockError> {
        let call = election::observe_call(name, known, wait);
        Pending::start(&self.client, call, true)?
            .await?
            .outcome
            .into_leader()
    }

    /// Holds every name in `names` or none (see
    /// [`Client::acquire_all`](super::Client::acquire_all)).
    pub async fn acquire_all(
        &self,
        names: &[&str],
        opts: AcquireOptions,
    ) -> Result<Option<Vec<AsyncLock>>, LockError> {
        let (call, _) = multi::acquire_all_call(names, opts)?;
        let done = Pending::start(&self.client, call, true)?.await?;
        Ok(self
            .client
            .locks_of(done)?
            .map(|locks| locks.into_iter().map(AsyncLock::from).collect()))
    }
}

impl AsyncLock {
    /// Replaces the value this leadership announces (see
    /// [`Lock::proclaim`](super::Lock::proclaim)).
    pub async fn proclaim(&self, value: &str) -> Result<(), LockError> {
        let call = self.lock.proclaim_call(value)?;
        Pending::start(self.lock.client(), call, false)?
            .await?
            .outcome
            .into_proclaimed()
    }
}
