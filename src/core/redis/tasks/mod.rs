//! The engine's tasks, one state machine per file: `acquire` (attempts,
//! cleanup, waiting), `acquire_set` (an `AcquireAll` in one script), `release` (also the background delete of a lost
//! lock's keys), `extend`, `renew` (the watchdog), `resume`, `reenter` (reentrant holds, one node or Redlock), `inspect`; `election` (proclaim, leader, observe);
//! `permit` is a semaphore permit's part of `acquire`, `tally` the reading
//! of an attempt's answers that both share.

pub(super) mod acquire;
pub(super) mod acquire_set;
pub(super) mod election;
pub(super) mod extend;
pub(super) mod inspect;
mod permit;
pub(super) mod reenter;
pub(super) mod release;
pub(super) mod renew;
pub(super) mod resume;
mod tally;
