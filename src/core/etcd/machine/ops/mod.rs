//! The operation table: one state struct per operation, each in its own
//! file, taken by value at every step and handing back what it waits for
//! next (the shape of `redis/tasks/`, after rustls' `State::handle`).
//!
//! - `release.rs`: [`ReleaseOp`], the owner-checked delete of a hold's keys
//!   (an exclusive lock's through its hold count, see `hold_count.rs`).
//! - `extend.rs`: [`ExtendOp`], a keepalive of the hold's lease, then a read
//!   of its keys.
//! - `resume.rs`: [`ResumeOp`], adopting a hold from its handle: read the
//!   keys, then keep the handle's lease alive.
//! - `inspect.rs`: [`InspectOp`], one range of the name, then the holder's
//!   lease TTL.
//! - `proclaim.rs`: [`ProclaimOp`], a new campaign value on a leadership's
//!   key (one txn).
//! - `leader.rs`: [`LeaderOp`], who leads a name (one range read).
//! - `reenter.rs`: [`ReenterOp`], one more hold of an exclusive lock, counted
//!   on etcd (`hold_count.rs` has the count key's format and parsing).
//!
//! - `acquire/`: [`Acquire`], an acquire of any kind (the kinds' parts in
//!   `acquire/kind.rs`, `acquire/permits.rs`, `acquire/shared.rs`).
//! - `sets.rs`: [`AcquireSet`], `AcquireAll` of free names in one txn.
//! - `observe.rs`: [`Observe`], a read and watch of who leads a name.
//!
//! An acquire, an observe and a set are stepped by more than their
//! answers: a watch stream's messages, timers, a cancel and a lost lease
//! take them out of the table too (`acquire/entries.rs`,
//! `EtcdMachine::with_observe`, `EtcdMachine::with_set`), so their steps
//! may also keep them with a request still in flight, wait for the session
//! lease or report that it is lost ([`Next::Keep`], [`Next::AwaitLease`],
//! [`Next::LeaseLost`]).
//!
//! The machine (`operations.rs`) takes a state out of the table when its
//! request's answer arrives and calls its `step` with the answer; `step`
//! returns [`Next`]: a request to send and the state to keep until its
//! answer, or `Done` once the operation is answered. States never send
//! requests themselves (the machine sends what [`Next`] asks for); one
//! stepped while its request is still in flight (a cancel, a timer, a
//! watch message) cancels that request or keeps it ([`Next::Keep`]). They
//! act on the machine's locks, leases, timers and outbox directly.

pub(super) mod acquire;
mod extend;
mod hold_count;
mod inspect;
mod leader;
mod observe;
mod proclaim;
mod reenter;
mod release;
mod resume;
pub(super) mod sets;

pub(super) use extend::ExtendOp;
pub(super) use inspect::InspectOp;
pub(super) use leader::LeaderOp;
pub(super) use observe::Observe;
pub(super) use proclaim::ProclaimOp;
pub(super) use reenter::ReenterOp;
pub(super) use release::ReleaseOp;
pub(super) use resume::ResumeOp;

use serde_json::Value;

use self::acquire::Acquire;
use self::sets::AcquireSet;
use super::Failure;
use crate::core::etcd::gateway::{self as gw, TxnResponse};
use crate::core::{LostReason, Millis, RequestId};

/// An operation in flight: its state, and the request it waits for.
pub(super) struct Op {
    pub(super) req: Option<RequestId>,
    pub(super) kind: OpKind,
}

/// Every operation's state; a new operation adds a file here and a variant.
pub(super) enum OpKind {
    Acquire(Acquire),
    Release(ReleaseOp),
    Reenter(ReenterOp),
    Extend(ExtendOp),
    Resume(ResumeOp),
    Inspect(InspectOp),
    Proclaim(ProclaimOp),
    Leader(LeaderOp),
    /// An observe's read and watch (see `election.rs`).
    Observe(Box<Observe>),
    /// `AcquireAll` of free names in one txn (see `sets.rs`).
    AcquireSet(AcquireSet),
}

/// The answer to a state's request.
pub(super) struct Reply {
    /// When the request was sent (a keepalive's TTL counts from then).
    pub(super) sent_at: Millis,
    pub(super) result: Result<(u16, Vec<u8>), Failure>,
}

impl Reply {
    /// The answer as a txn response.
    pub(super) fn txn(self) -> Result<TxnResponse, Failure> {
        self.result
            .and_then(|(s, b)| gw::parse::<TxnResponse>(s, &b).map_err(Failure::Gateway))
    }
}

/// What a state waits for after a step.
pub(super) enum Next {
    /// Send `body` to `path` (on the current endpoint, retried on the next
    /// one), keep `state`, and step it with the answer.
    Send {
        state: Box<OpKind>,
        path: &'static str,
        body: Value,
    },
    /// Open the watch stream `body`, keep `state`; its messages and its end
    /// reach the state through the machine (see `acquire/entries.rs`).
    Watch { state: Box<OpKind>, body: Value },
    /// Keep `state` with `req` (a request still in flight, or none while a
    /// timer or the local queue is what it waits for).
    Keep {
        state: Box<OpKind>,
        req: Option<RequestId>,
    },
    /// Keep `state` (an acquire or a set without a key) and send its txn as
    /// soon as the session lease can carry a key: now, if it can.
    AwaitLease(Box<OpKind>),
    /// Keep `state`, then handle the loss of `lease`, which reaches the
    /// state too (it restarts or ends every acquire and set on the lease).
    LeaseLost {
        state: Box<OpKind>,
        lease: i64,
        reason: LostReason,
    },
    /// The operation is answered (or ended without an answer).
    Done,
}

impl Next {
    pub(super) fn send(state: impl Into<OpKind>, path: &'static str, body: Value) -> Next {
        Next::Send {
            state: Box::new(state.into()),
            path,
            body,
        }
    }

    /// A `/v3/kv/txn` request.
    pub(super) fn txn(state: impl Into<OpKind>, body: Value) -> Next {
        Next::send(state, "/v3/kv/txn", body)
    }

    /// A keepalive of `lease`.
    pub(super) fn keepalive(state: impl Into<OpKind>, lease: i64) -> Next {
        Next::send(state, "/v3/lease/keepalive", gw::lease_id(lease))
    }

    /// A `/v3/watch` stream.
    pub(super) fn watch(state: impl Into<OpKind>, body: Value) -> Next {
        Next::Watch {
            state: Box::new(state.into()),
            body,
        }
    }

    /// Keep `state` with `req`.
    pub(super) fn keep(state: impl Into<OpKind>, req: Option<RequestId>) -> Next {
        Next::Keep {
            state: Box::new(state.into()),
            req,
        }
    }
}

impl From<AcquireSet> for OpKind {
    fn from(s: AcquireSet) -> OpKind {
        OpKind::AcquireSet(s)
    }
}

impl From<Acquire> for OpKind {
    fn from(s: Acquire) -> OpKind {
        OpKind::Acquire(s)
    }
}

impl From<ReleaseOp> for OpKind {
    fn from(s: ReleaseOp) -> OpKind {
        OpKind::Release(s)
    }
}

impl From<ReenterOp> for OpKind {
    fn from(s: ReenterOp) -> OpKind {
        OpKind::Reenter(s)
    }
}

impl From<ExtendOp> for OpKind {
    fn from(s: ExtendOp) -> OpKind {
        OpKind::Extend(s)
    }
}

impl From<ResumeOp> for OpKind {
    fn from(s: ResumeOp) -> OpKind {
        OpKind::Resume(s)
    }
}

impl From<InspectOp> for OpKind {
    fn from(s: InspectOp) -> OpKind {
        OpKind::Inspect(s)
    }
}

impl From<ProclaimOp> for OpKind {
    fn from(s: ProclaimOp) -> OpKind {
        OpKind::Proclaim(s)
    }
}

impl From<LeaderOp> for OpKind {
    fn from(s: LeaderOp) -> OpKind {
        OpKind::Leader(s)
    }
}
