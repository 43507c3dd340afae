//! The hold count of an exclusive lock's reentrant holds: its key, its value
//! and what a failed count compare reads back. Used by `reenter.rs` (one
//! more hold) and `release.rs` (one hold less).
//!
//! A holder re-enters by proof of ownership, the lock's handle, never by
//! "the current thread". The number of holds lives on etcd, in a count key
//! next to the lock's key:
//!
//! ```text
//! <prefix>/<escaped name>/<lease hex>   the lock key (create revision = token)
//! <prefix>/<escaped name>%holds         its hold count: "<token>:<holds>:<nonce>"
//! ```
//!
//! The count key is put on the SAME lease as the lock key, so it dies with
//! the lease like the lock. It lies OUTSIDE every name's range
//! `<prefix>/<escaped name>/` that the recipe scans for holders and
//! waiters: after `<prefix>/` it contains no `/` (`escape_name` turns every
//! `/` of a name into `%2F`), so no range `<prefix>/<x>/` can contain it;
//! and no two names share a count key (`%` of a name is escaped to `%25`,
//! so `%holds` never comes from a name: `escape_name` writes `%` only
//! before `25` or `2F`). The ghost sweep, which reads only keys of the form
//! `<prefix>/<x>/<tail>`, never mistakes it for a lost key of ours either.
//!
//! No count key means one hold. A re-entry writes `holds + 1` (2 for the
//! first) in one txn that compares the lock key's create revision with the
//! handle's token and the count key's mod revision with the one read (CAS;
//! a failed compare reads both keys back and tries again). Every exclusive
//! release starts with one txn, `delete the lock key if no count key
//! exists` (a plain lock's release is the single request it always was);
//! if a count exists, the reads of the failed compare tell whether to
//! write `holds - 1` (CAS, retried) or, for the last hold, delete the lock
//! key and the count key together. A decrement never deletes the count key
//! (it writes 1), so a decrement retried after an unknown outcome can never
//! turn into the last hold's delete: the nonce in the value tells that a
//! retried write already applied. A count whose token is not the lock
//! key's (left by an earlier incarnation of the same key) counts as one hold.
//!
//! Leases: a re-entering client renews the lock's lease (the owner's
//! session lease) while it holds, never sweeps it for ghosts and never
//! revokes it (`borrowed`). An owner whose release only took one hold away
//! no longer revokes that lease at close: it deletes its own keys there
//! (an exclusive lock's only while no holds are counted) and lets the lease
//! end when its last renewer stops (`shared_leases`). A hold closed without
//! its release (or whose release failed) stays counted until the lease
//! ends: the lock is then freed by the lease's expiry, not by a release.
//!
//! Requests per uncontended operation: a plain acquire + release stays 2
//! txns (plus the session lease's grant); a re-entry is a keepalive of the
//! handle's lease + 1 txn; the release of a re-entered hold is 2 txns
//! (the first reads the count back, the second decrements or deletes).

use super::super::{EtcdMachine, BACKEND};
use crate::core::etcd::escape_name;
use crate::core::etcd::gateway::TxnResponse;
use crate::core::LockError;

/// Most count txns one release or re-entry sends before giving up: each
/// retry means another holder changed the count in between.
pub(super) const MAX_COUNT_TRIES: u32 = 16;

/// A parsed count value.
pub(super) struct Count {
    pub(super) token: i64,
    pub(super) holds: u32,
    pub(super) nonce: Vec<u8>,
}

pub(super) fn parse_count(v: &[u8]) -> Option<Count> {
    let text = std::str::from_utf8(v).ok()?;
    let mut parts = text.splitn(3, ':');
    let token = parts.next()?.parse().ok()?;
    let holds = parts.next()?.parse().ok()?;
    let nonce = parts.next()?.as_bytes().to_vec();
    (holds >= 1).then_some(Count {
        token,
        holds,
        nonce,
    })
}

pub(super) fn count_value(token: i64, holds: u32, nonce: &[u8]) -> Vec<u8> {
    let mut v = format!("{token}:{holds}:").into_bytes();
    v.extend_from_slice(nonce);
    v
}

/// The parts of the count key a step needs.
pub(super) struct CountKey {
    pub(super) mod_revision: i64,
    pub(super) value: Vec<u8>,
}

/// What a failed count compare read back: whether the lock key is still
/// that incarnation, and the count key (if any). `None`: the reply lacks
/// the reads (a hostile or broken backend).
pub(super) fn read_back(
    t: &TxnResponse,
    key: &[u8],
    rev: i64,
    count_key: &[u8],
) -> Option<(bool, Option<CountKey>)> {
    let lock = t.range(0)?;
    let count = t.range(1)?;
    let held = lock
        .kvs
        .iter()
        .any(|kv| kv.key == key && kv.create_revision == rev);
    let count = count
        .kvs
        .iter()
        .find(|kv| kv.key == count_key)
        .map(|kv| CountKey {
            mod_revision: kv.mod_revision,
            value: kv.value.clone(),
        });
    Some((held, count))
}

pub(super) fn broken_reply(name: &str) -> LockError {
    LockError::Backend {
        backend: BACKEND,
        name: name.to_string(),
        status: None,
        message: "a failed hold-count txn came back without its reads".into(),
    }
}

pub(super) fn count_contended(name: &str) -> LockError {
    LockError::Backend {
        backend: BACKEND,
        name: name.to_string(),
        status: None,
        message: format!(
            "the hold count changed under {MAX_COUNT_TRIES} attempts in a row; try again"
        ),
    }
}

impl EtcdMachine {
    /// The key counting the holds of `name`'s exclusive lock (see the module docs).
    pub(in super::super) fn count_key(&self, name: &str) -> Vec<u8> {
        format!("{}/{}%holds", self.prefix, escape_name(name)).into_bytes()
    }

    /// Holds (perhaps another process's) remain counted on a lock of
    /// `lease`: our close must not revoke it.
    pub(super) fn note_shared_lease(&mut self, lease: i64) {
        if !self.shared_leases.contains(&lease) && !self.borrowed.contains(&lease) {
            self.shared_leases.push(lease);
        }
    }
}
