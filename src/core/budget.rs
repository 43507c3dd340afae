//! A subrequest budget around any [`LockMachine`].
//!
//! A Cloudflare Worker invocation may make a limited number of subrequests
//! (50 on the free plan); one more and the runtime throws. [`Budgeted`] makes
//! sure the wrapped machine never sends more than `budget` requests, and that
//! an operation that would need more ends with [`LockError::BudgetExhausted`]
//! instead, while there is still room to clean up.
//!
//! It knows no protocol. It counts [`Transmit::Send`]s and splits the budget:
//!
//! - `budget - reserve` requests for everything, then
//! - the last `reserve` requests only while a `release` or `close` is pending,
//!   or while operations cancelled for lack of budget clean up after
//!   themselves (a waiter deleting its key).
//!
//! When the machine asks for a request beyond its share, the request is
//! withheld (never reaches the driver), every pending acquire / resume /
//! inspect / extend is cancelled through [`LockMachine::cancel`], and the
//! withheld request is answered with a transport failure on the next
//! `handle_timeout` (never from inside a poll, so the machine is not
//! re-entered). Operations pending at that moment that then fail with
//! `Aborted`, `Transport`, `Timeout` or `NoQuorum` report
//! `BudgetExhausted` instead: that is why they failed.

use std::collections::VecDeque;

use crate::core::runtime::VecMap;

use super::operation::{Capabilities, Event, Operation};
use super::types::{BackendKind, Input, Millis, OpId, RequestId, Transmit, TransportError};
use super::{LockError, LockMachine};

/// What the wrapper needs to know about an operation it started.
#[derive(Clone, Debug, PartialEq, Eq)]
struct OpInfo {
    /// Lock name for error messages ("" when unknown, e.g. extend/release by id).
    name: String,
    /// Release and close may use the reserve; everything else may not.
    cleanup: bool,
}

/// A [`LockMachine`] that never sends more than `budget` requests.
pub struct Budgeted<M> {
    inner: M,
    budget: u32,
    reserve: u32,
    sent: u32,
    ops: VecMap<OpId, OpInfo>,
    /// Pending when the budget ran out: their failures become `BudgetExhausted`.
    affected: VecMap<OpId, ()>,
    /// Sends not performed; answered with a failure on the next timeout.
    withheld: Vec<RequestId>,
    /// Set once the budget ran out; cancelled ops may then use the reserve.
    exhausted: bool,
    /// Cancels and stream writes taken from the machine while withholding,
    /// still to be passed on.
    queued: VecDeque<Transmit>,
    /// The time of the latest input (for cancels issued from a poll).
    now: Millis,
}

impl<M: LockMachine> Budgeted<M> {
    /// `budget`: requests this machine may send in its life; `reserve`: how
    /// many of them only cleanup may use (clamped to `budget`).
    pub fn new(inner: M, budget: u32, reserve: u32) -> Self {
        Budgeted {
            inner,
            budget,
            reserve: reserve.min(budget),
            sent: 0,
            ops: VecMap::new(),
            affected: VecMap::new(),
            withheld: Vec::new(),
            exhausted: false,
            queued: VecDeque::new(),
            now: 0,
        }
    }

    /// Requests sent so far (every one reached the driver).
    pub fn sent(&self) -> u32 {
        self.sent
    }

    /// Requests this machine may send in its life (the `budget` given to [`Budgeted::new`]).
    pub fn budget(&self) -> u32 {
        self.budget
    }

    /// True once a request had to be withheld.
    pub fn is_exhausted(&self) -> bool {
        self.exhausted
    }

    /// The wrapped machine.
    pub fn inner(&self) -> &M {
        &self.inner
    }

    fn exhausted_error(&self, name: &str) -> LockError {
        LockError::BudgetExhausted {
            backend: self.inner.backend().as_str(),
            name: name.to_string(),
            budget: self.budget,
        }
    }

    fn cleanup_pending(&self) -> bool {
        self.exhausted || self.ops.values().any(|o| o.cleanup)
    }

    /// Refuses a new non-cleanup operation when no request is left for it.
    fn check_room(&self, name: &str) -> Result<(), LockError> {
        if self.exhausted || self.sent >= self.budget - self.reserve {
            return Err(self.exhausted_error(name));
        }
        Ok(())
    }

    fn started(
        &mut self,
        r: Result<OpId, LockError>,
        name: &str,
        cleanup: bool,
    ) -> Result<OpId, LockError> {
        if let Ok(op) = r {
            self.ops.insert(
                op,
                OpInfo {
                    name: name.to_string(),
                    cleanup,
                },
            );
        }
        r
    }

    /// The budget ran out: withhold `id` and cancel everything that spends.
    fn exhaust(&mut self, id: RequestId) {
        self.withheld.push(id);
        // Requests the machine asked for in the same step continue the same
        // work (the other nodes of a round): withhold them too, so that the
        // reserve is left to what the cancels below start (cleanup).
        while let Some(t) = self.inner.poll_transmit() {
            match t {
                Transmit::Send(r) => self.withheld.push(r.id),
                Transmit::Open(o) => self.withheld.push(o.id),
                Transmit::Cancel(c) => self.forward_cancel(c),
                Transmit::Write { .. } => self.forward_write(t),
            }
        }
        self.exhausted = true;
        let pending: Vec<(OpId, bool)> = self.ops.iter().map(|(op, o)| (*op, o.cleanup)).collect();
        for (op, cleanup) in pending {
            if self.affected.insert(op, ()).is_none() && !cleanup {
                self.inner.cancel(self.now, op);
            }
        }
    }

    /// A cancel of a withheld request is absorbed (it was never sent and must
    /// not be answered); any other is passed on.
    fn forward_cancel(&mut self, id: RequestId) {
        if let Some(i) = self.withheld.iter().position(|w| *w == id) {
            self.withheld.remove(i);
        } else {
            self.queued.push_back(Transmit::Cancel(id));
        }
    }

    /// A write on a withheld stream is dropped (the stream was never
    /// opened); any other is passed on.
    fn forward_write(&mut self, t: Transmit) {
        match &t {
            Transmit::Write { id, .. } if self.withheld.contains(id) => {}
            _ => self.queued.push_back(t),
        }
    }

    /// Spends one of the budget on a request or a stream opening (in a
    /// Worker both count as a subrequest), or withholds it once the budget
    /// is spent.
    fn spend(&mut self, id: RequestId, t: Transmit) -> Option<Transmit> {
        let limit = if self.cleanup_pending() {
            self.budget
        } else {
            self.budget - self.reserve
        };
        if self.sent < limit {
            self.sent += 1;
            return Some(t);
        }
        self.exhaust(id);
        None
    }

    fn translate(&mut self, e: Event) -> Event {
        let Event::Completed { op, result } = e else {
            return e;
        };
        let info = self.ops.remove(&op);
        let affected = self.affected.remove(&op).is_some();
        match result {
            Err(error) if affected && budget_caused(&error) => {
                let name = error_name(&error)
                    .or(info.map(|i| i.name))
                    .unwrap_or_default();
                Event::Completed {
                    op,
                    result: Err(self.exhausted_error(&name)),
                }
            }
            result => Event::Completed { op, result },
        }
    }
}

/// Failures that a withheld request or a budget cancel produces.
fn budget_caused(e: &LockError) -> bool {
    matches!(
        e,
        LockError::Aborted { .. }
            | LockError::Transport { .. }
            | LockError::Timeout { .. }
            | LockError::NoQuorum { .. }
    )
}

fn error_name(e: &LockError) -> Option<String> {
    match e {
        LockError::Aborted { name, .. }
        | LockError::Transport { name, .. }
        | LockError::Timeout { name, .. }
        | LockError::NoQuorum { name, .. }
            if !name.is_empty() =>
        {
            Some(name.clone())
        }
        _ => None,
    }
}

impl<M: LockMachine> LockMachine for Budgeted<M> {
    fn backend(&self) -> BackendKind {
        self.inner.backend()
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn start_operation(&mut self, now: Millis, op: Operation) -> Result<OpId, LockError> {
        self.now = now;
        let name = op.name().unwrap_or_default().to_string();
        let cleanup = op.is_cleanup();
        if cleanup {
            if self.sent >= self.budget {
                // Locks are not tracked here (that is protocol state): no name.
                return Err(self.exhausted_error(""));
            }
        } else {
            self.check_room(&name)?;
        }
        let r = self.inner.start_operation(now, op);
        self.started(r, &name, cleanup)
    }

    fn cancel(&mut self, now: Millis, op: OpId) {
        self.now = now;
        self.inner.cancel(now, op);
    }

    fn close(&mut self, now: Millis) -> OpId {
        self.now = now;
        let op = self.inner.close(now);
        self.ops.insert(
            op,
            OpInfo {
                name: String::new(),
                cleanup: true,
            },
        );
        op
    }

    fn handle_input(&mut self, now: Millis, input: Input) {
        self.now = now;
        self.inner.handle_input(now, input);
    }

    fn handle_timeout(&mut self, now: Millis) {
        self.now = now;
        // `Connect`: the request provably never left, so no key can exist because of it.
        let error = TransportError::Connect(format!(
            "not sent: the subrequest budget of {} is used up",
            self.budget
        ));
        for id in std::mem::take(&mut self.withheld) {
            self.inner.handle_input(
                now,
                Input::Failed {
                    id,
                    error: error.clone(),
                },
            );
        }
        if self.inner.poll_timeout().is_some_and(|t| t <= now) {
            self.inner.handle_timeout(now);
        }
    }

    fn poll_transmit(&mut self) -> Option<Transmit> {
        loop {
            if let Some(t) = self.queued.pop_front() {
                return Some(t);
            }
            let admitted = match self.inner.poll_transmit()? {
                Transmit::Cancel(id) => {
                    self.forward_cancel(id);
                    None
                }
                t @ Transmit::Write { .. } => {
                    self.forward_write(t);
                    None
                }
                Transmit::Send(req) => self.spend(req.id, Transmit::Send(req)),
                Transmit::Open(o) => self.spend(o.id, Transmit::Open(o)),
            };
            if admitted.is_some() {
                return admitted;
            }
        }
    }

    fn poll_event(&mut self) -> Option<Event> {
        let e = self.inner.poll_event()?;
        Some(self.translate(e))
    }

    fn poll_timeout(&self) -> Option<Millis> {
        let inner = self.inner.poll_timeout();
        if self.withheld.is_empty() {
            inner
        } else {
            Some(inner.map_or(self.now, |t| t.min(self.now)))
        }
    }

    fn live_count(&self) -> usize {
        self.inner.live_count()
    }
}

#[cfg(test)]
mod tests;
