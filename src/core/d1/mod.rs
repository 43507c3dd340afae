//! A lease row in a Cloudflare D1 (SQLite) table as a lock: the SQL recipe
//! of the optimistic lock, since a request/response SQL API cannot hold a
//! row lock (`SELECT … FOR UPDATE`) beyond the request (README, "D1").
//!
//! - one row per lock name: `(name PRIMARY KEY, owner, expires_at,
//!   version)`; the times are the database's clock (ms since the epoch from
//!   `julianday('now')`), never the clients';
//! - acquire: one batch (one transaction) that creates the table if needed,
//!   upserts the row if it is free (no owner, or expired) with a random
//!   owner, a new expiry and `version + 1`, and reads the row back: the
//!   grant's fencing token is the version, bumped on every grant and never
//!   reset (release keeps the row, it clears the owner). A retry by the same
//!   owner changes nothing and reads its grant back;
//! - release / extend / resume: owner-, version- and expiry-checked (a late
//!   release of an expired holder changes nothing for the next one);
//! - waiting: polls, sleeping the holder's remaining lease (capped, plus
//!   jitter, within the wait), as the single-node Redis lock does; renewal
//!   at TTL/3, `Event::Lost` as the other machines.
//!
//! The transport is a binding only (`Target::Binding { name, path:
//! "/d1/batch" }` with `{"statements":[{"sql","params"}]}`, answered
//! `{"results":[{"rows","changes"}]}`): the npm package's `d1Binding(db)`
//! or the Worker's adapter over a D1 database binding. D1 is not reachable
//! from outside a Worker here.
//!
//! Layout: `sql` (the statements), `codec` (request bodies and strict
//! answer parsing), `machine` (d1's part of the shared lease machine,
//! `crate::core::lease`: its options and batches), `machine/acquire` (a
//! waiting acquire's steps: attempts, pauses, freeing the row),
//! `machine/answers` (the other answers).

pub(crate) mod codec;
mod machine;
pub(crate) mod sql;

pub(crate) use machine::D1Machine;

use crate::core::lease::{check_binding, check_lease_options};
use crate::core::LockError;

/// The path of every request to the binding.
pub const BATCH_PATH: &str = "/d1/batch";

/// The default table.
pub const DEFAULT_TABLE: &str = "edgelock_locks";

/// Configuration of a `d1` client; [`D1Config::new`] gives the defaults.
#[derive(Clone, Debug)]
pub struct D1Config {
    /// The name of the binding the driver was given (`d1Binding(db)`).
    pub binding: String,
    /// The lock table (an SQL identifier: letters, digits, `_`).
    pub table: String,
    /// Default lease (per-acquire `AcquireOptions::ttl_ms` overrides it).
    pub ttl_ms: u64,
    /// Per-request timeout.
    pub request_timeout_ms: u64,
    /// Renew held locks at TTL/3 until released.
    pub auto_extend: bool,
    /// Longest pause between a waiter's polls (the holder's remaining lease
    /// when shorter).
    pub retry_delay_ms: u64,
    /// Random extra pause, `0..=retry_jitter_ms`.
    pub retry_jitter_ms: u64,
}

impl D1Config {
    /// A configuration for `binding`: table `edgelock_locks`, 10 s lease,
    /// 5 s request timeout, auto-extend, polls every 250 ms at most plus up
    /// to 100 ms of jitter.
    pub fn new(binding: impl Into<String>) -> Self {
        D1Config {
            binding: binding.into(),
            table: DEFAULT_TABLE.into(),
            ttl_ms: 10_000,
            request_timeout_ms: 5_000,
            auto_extend: true,
            retry_delay_ms: 250,
            retry_jitter_ms: 100,
        }
    }

    /// Every option checked.
    pub(crate) fn validated(self) -> Result<D1Config, LockError> {
        check_binding("d1", &self.binding)?;
        if !sql::is_table_name(&self.table) {
            return Err(LockError::invalid(
                "a d1 table must be an SQL identifier of 1..=64 ASCII letters, digits or `_`, not starting with a digit, `sqlite_` or `_cf_`",
            ));
        }
        check_lease_options(self.ttl_ms, self.request_timeout_ms, codec::lease_validity)?;
        if self.retry_delay_ms == 0 || self.retry_delay_ms > 60_000 {
            return Err(LockError::invalid(
                "retry_delay_ms must be between 1 and 60000",
            ));
        }
        if self.retry_jitter_ms > 60_000 {
            return Err(LockError::invalid("retry_jitter_ms must be at most 60000"));
        }
        Ok(self)
    }
}

#[cfg(test)]
mod tests;
