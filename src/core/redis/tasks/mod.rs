//! The engine's tasks, one state machine per file: `acquire` (attempts,
//! cleanup, waiting), `acquire_set` (an `AcquireAll` in one script),
//! `release` (also the background delete of a lost lock's keys), `extend`,
//! `renew` (the watchdog), `resume`, `reenter` (reentrant holds, one node
//! or Redlock), `inspect`; `election` (proclaim, leader, observe).
//!
//! An acquire runs the same attempts for every kind; what differs is a
//! kind's [`part`](part::Part), one file each: `exclusive`, `campaign`,
//! `reader`, `permit`. `tally` is the reading of an attempt's answers that
//! they share.

pub(super) mod acquire;
pub(super) mod acquire_set;
mod campaign;
pub(super) mod election;
mod exclusive;
pub(super) mod extend;
pub(super) mod inspect;
mod part;
mod permit;
mod reader;
pub(super) mod reenter;
pub(super) mod release;
pub(super) mod renew;
pub(super) mod resume;
mod tally;
