//! Requests in flight, each with its owner and its deadline.

use crate::core::runtime::VecMap;

use crate::core::outbox::Outbox;
use crate::core::{HttpRequest, Millis, RequestId};

struct InFlight<O> {
    owner: O,
    /// `None` for a stream that is established: it may stay open as long as
    /// its owner wants (an etcd watch, a Redis subscription).
    deadline: Option<Millis>,
}

/// The requests a machine has handed to its driver and not yet heard back
/// from. Whoever sent a request is its owner `O` (a task, a lease, a
/// purpose): an answer is routed to it, and to nobody once it was
/// cancelled. Every request has a deadline (its `timeout_ms`); past it the
/// machine's `handle_timeout` takes it out with [`Requests::expire`].
pub(crate) struct Requests<O> {
    map: VecMap<RequestId, InFlight<O>>,
}

impl<O> Default for Requests<O> {
    fn default() -> Self {
        Requests { map: VecMap::new() }
    }
}

impl<O> Requests<O> {
    /// Builds a request with a fresh id, queues it for the driver and
    /// remembers `owner`. The deadline is `now + timeout_ms` (none without a
    /// timeout). A request that cannot be built is neither sent nor kept.
    pub(crate) fn send<E>(
        &mut self,
        out: &mut Outbox,
        now: Millis,
        owner: O,
        build: impl FnOnce(RequestId) -> Result<HttpRequest, E>,
    ) -> Result<RequestId, E> {
        let id = out.request_id();
        let req = build(id)?;
        let deadline = req.timeout_ms.map(|t| now.saturating_add(t));
        out.send(req);
        self.map.insert(id, InFlight { owner, deadline });
        Ok(id)
    }

    /// Remembers `owner` and a deadline `timeout_ms` from `now` for a fresh
    /// id, without sending anything: for a command that travels on a
    /// byte stream, whose answer is matched to the id by its connection.
    pub(crate) fn track(
        &mut self,
        out: &mut Outbox,
        now: Millis,
        owner: O,
        timeout_ms: u64,
    ) -> RequestId {
        let id = out.request_id();
        let deadline = Some(now.saturating_add(timeout_ms));
        self.map.insert(id, InFlight { owner, deadline });
        id
    }

    /// The owner of request `id`, if it is still in flight.
    pub(crate) fn owner(&self, id: RequestId) -> Option<&O> {
        self.map.get(&id).map(|r| &r.owner)
    }

    /// Mutable access to the owner's data of request `id` (a stream's decoder).
    pub(crate) fn owner_mut(&mut self, id: RequestId) -> Option<&mut O> {
        self.map.get_mut(&id).map(|r| &mut r.owner)
    }

    /// Takes request `id` out because its answer arrived: the owner it
    /// belongs to, or `None` when it is no longer wanted.
    pub(crate) fn finish(&mut self, id: RequestId) -> Option<O> {
        self.map.remove(&id).map(|r| r.owner)
    }

    /// Takes request `id` out and tells the driver to abandon it.
    pub(crate) fn cancel(&mut self, out: &mut Outbox, id: RequestId) -> Option<O> {
        let r = self.map.remove(&id)?;
        out.cancel(id);
        Some(r.owner)
    }

    /// Cancels every request whose owner matches.
    pub(crate) fn cancel_where(
        &mut self,
        out: &mut Outbox,
        mut matches: impl FnMut(&O) -> bool,
    ) -> Vec<(RequestId, O)> {
        let ids: Vec<RequestId> = self
            .map
            .iter()
            .filter(|(_, r)| matches(&r.owner))
            .map(|(id, _)| *id)
            .collect();
        ids.into_iter()
            .filter_map(|id| self.cancel(out, id).map(|o| (id, o)))
            .collect()
    }

    /// A stream is established: it no longer times out.
    pub(crate) fn keep_open(&mut self, id: RequestId) {
        if let Some(r) = self.map.get_mut(&id) {
            r.deadline = None;
        }
    }

    /// Takes out (and cancels at the driver) every request past its deadline,
    /// oldest id first.
    pub(crate) fn expire(&mut self, out: &mut Outbox, now: Millis) -> Vec<(RequestId, O)> {
        let ids: Vec<RequestId> = self
            .map
            .iter()
            .filter(|(_, r)| r.deadline.is_some_and(|d| d <= now))
            .map(|(id, _)| *id)
            .collect();
        ids.into_iter()
            .filter_map(|id| self.cancel(out, id).map(|o| (id, o)))
            .collect()
    }

    /// The earliest deadline in flight.
    pub(crate) fn next_deadline(&self) -> Option<Millis> {
        self.map.values().filter_map(|r| r.deadline).min()
    }

    /// Every request in flight with its owner.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (RequestId, &O)> {
        self.map.iter().map(|(id, r)| (*id, &r.owner))
    }

    /// Whether a request whose owner matches is in flight.
    pub(crate) fn any(&self, mut matches: impl FnMut(&O) -> bool) -> bool {
        self.map.values().any(|r| matches(&r.owner))
    }
}
