//! What the request/response lease-lock machines (`durable`, `d1`) share:
//! the table of acquires and held locks, expiry and automatic renewal,
//! losing a lock, `close`, reading final answers, and the renewal answers.
//!
//! Why the split is here: both backends keep a lock as "an owner string and
//! a fencing token, valid for a lease measured from the send time of the
//! request that granted or extended it", and everything that follows from
//! that alone (timers, loss reasons, renewal retries, the close drain) is
//! protocol-independent, so it lives once: in [`LeaseCore`](table::LeaseCore) (the state and
//! its steps) and [`LeaseMachine`] (the one `LockMachine` of both, generic
//! over the backend's [`LeaseProtocol`]). What stays in each backend is what truly
//! differs: its codec (how requests are encoded and answers parsed), how a
//! waiting acquire proceeds (`durable`: the service holds the request open,
//! a late grant is confirmed with an extend, a leaving acquire re-asks with
//! `waitMs` 0; `d1`: polling after the holder's PTTL with jitter, and an
//! acquire given up mid-attempt frees the row only after its answer), and
//! its options. The request-owner enums stay per backend (their variants
//! differ); they expose what the shared code needs through [`LeaseReq`],
//! and travel as [`Req::Own`] beside the shared [`Req::Extend`].
//!
//! Layout: `checks` (names, TTLs, options, handles), `table` (the state
//! and the steps on it), `machine` (the `LockMachine` and the protocol).

mod checks;
mod machine;
mod table;

pub(crate) use checks::{check_binding, check_handle, check_lease_options};
pub(crate) use machine::{Core, Extend, LeaseMachine, LeaseProtocol, Req};
pub(crate) use table::{Acquiring, Answer, Held, LeaseReq, Timer};
