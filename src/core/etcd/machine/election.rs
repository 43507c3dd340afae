//! Leader election: campaign, proclaim, leader and observe. This file has
//! the recipe, a leadership key's value and the read of who leads; the
//! states are elsewhere: a campaign is an acquire (`ops/acquire/`),
//! proclaim, leader and observe are `ops/proclaim.rs`, `ops/leader.rs` and
//! `ops/observe.rs`.
//!
//! # Recipe
//!
//! A **campaign** is the exclusive lock's recipe unchanged (`acquire.rs`):
//! the key `P<lease hex>` under the name's prefix `P = <prefix>/<escaped
//! name>/`, on the client's session lease (renewed, checked and lost like
//! any lock's), created only if absent, queued FIFO by create revision,
//! each waiter watching the key directly ahead of it, cleaned up on
//! cancel, timeout and close. The key's value is the campaign value
//! itself, exactly as Go's `concurrency.Election` (and so `etcdctl elect`)
//! stores it: the key `P<lease hex>` and the raw value are Go's, so an
//! edgelock campaign and a Go one on `<prefix>/<escaped name>` queue in one
//! line, and each side's `leader`/`observe` reports the other's value.
//!
//! - What tells a leadership from edgelock's other holds is the value's
//!   form: an exclusive lock's value is a bare 16-hex-digit nonce, a
//!   reader's starts `r:` (`shared.rs`), a permit's `p<limit>:` with 1 to 3
//!   digits (`permits.rs`); every other value is a leadership, whoever wrote
//!   it (a Go `Mutex` holder's empty value included, as Go's
//!   `Election.Leader` reads it too). A campaign or proclaim value of one
//!   of those forms is refused (`INVALID_ARGUMENT`) before anything is
//!   sent, and a Go leader whose value has one is not reported by edgelock;
//!   the proptest in `election_tests.rs` checks both sides. A
//!   campaign is thereby an ordinary writer for the other kinds: a
//!   semaphore's name refuses it, a reader queues behind it, and a campaign
//!   on a name held as an exclusive lock queues behind that lock exactly as
//!   another exclusive acquire would (one queue per name, whatever the kinds).
//! - After a lost reply, a key of our lease with our value is ours (adopted,
//!   as Go adopts its lease's key); the local queue keeps a second campaign
//!   of this client on the name from starting while an earlier key of it
//!   is still being deleted, so no leftover of ours is mistaken for it.
//! - The campaign value is any UTF-8 (at most `MAX_CAMPAIGN_VALUE` bytes,
//!   checked before the machine sees it); a value another client wrote that
//!   is not UTF-8 is reported with replacement characters.
//!
//! FIFO (rather than "whoever writes first after the leader leaves") is what
//! the lock already guarantees: no thundering herd on a handoff (one watcher
//! per key), no starvation, and the leader is simply the oldest key.
//!
//! The leadership's **fencing token** is its key's create revision, as in
//! etcd's own `concurrency.Election`: strictly increasing across successive
//! leaders of a name (a later key has a later revision), unchanged by a
//! proclaim (a put keeps the create revision).
//!
//! **Proclaim** is one txn: `create_revision(key) == token` then put the new
//! value on the same lease. A failed compare means the leadership is gone
//! (its key deleted, or recreated by a later campaign of the same lease,
//! which has another revision): `Lost` (or `NotHeld` while our own release
//! is in flight), and the value of whoever leads now is never touched.
//!
//! **Leader** is one range of the name's prefix, oldest first, limit 1: the
//! oldest key leads (Go's `WithFirstCreate`). If it is a leadership key,
//! `Some(Leadership { value, fencing_token: create_revision })`. If nobody
//! holds the name, *or the holder is one of edgelock's lock holds* (an
//! exclusive lock, a reader, a semaphore's key), the answer is `None`:
//! nobody leads the election even though campaigns may be queued behind
//! that lock; the first of them becomes the leader (and `leader` says so)
//! once the lock is released.
//!
//! **Observe** reads like `leader`; if the state differs from the caller's
//! `known`, it completes at once. Otherwise it watches the whole prefix from
//! the read's revision + 1 and derives the state from the pushed events: a
//! PUT on the oldest key (a proclaim) carries the new value; a PUT when the
//! name had no key makes that key the oldest; a DELETE of the oldest key
//! (resign, loss) is followed by one new read (the next in line is not in
//! the event). Other keys' events (waiters joining and leaving) change
//! nothing and cost no request. It completes as soon as the state differs
//! from `known`, or with the current state when the wait bound passes. A
//! broken, cancelled or compacted watch reads again and watches anew after
//! the usual short jittered pause (like a waiting acquire), and a watch is
//! renewed the same way after `WATCH_REFRESH_MS` (a silently dead stream
//! would otherwise never report anything); a failing read ends the observe
//! with the backend's error. Cancel ends it `Aborted`, close `Closed`.

use serde_json::Value;

use super::ops::acquire::{permits, shared};
use super::{EtcdMachine, Failure, BACKEND};
use crate::core::etcd::gateway::{self as gw, RangeResponse};
use crate::core::{Leadership, LockError};

/// How many hex digits the random part of edgelock's own lock values has
/// (`random_hex(…, 8)`).
const LOCK_NONCE_HEX: usize = 16;

/// The value of a leadership key: the campaign value itself, as Go's
/// `concurrency.Election` stores it, so that `etcdctl elect` and Go
/// programs read and write the same leaderships as edgelock.
pub(super) fn leader_value(value: &str) -> Vec<u8> {
    value.as_bytes().to_vec()
}

/// Whether `v` is exactly edgelock's exclusive-lock nonce: 16 lowercase
/// hex digits.
fn is_nonce(v: &[u8]) -> bool {
    v.len() == LOCK_NONCE_HEX && v.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Whether a key's value is one of edgelock's own non-election holds, by
/// the forms the other kinds already read: an exclusive lock's bare nonce,
/// a reader's `r:…` (`shared.rs`), a permit's `p<limit>:…` (`permits.rs`).
/// Everything else under a name (any other campaign value, Go's own lock
/// and election values) is a leadership, as Go's `Election.Leader` reads
/// the oldest key whatever wrote it.
pub(super) fn is_lock_value(v: &[u8]) -> bool {
    is_nonce(v) || shared::is_shared_value(v) || permits::key_kind(v) != permits::KeyKind::Plain
}

/// The campaign value a key's value carries, if it is a leadership's (its
/// bytes as text; a value that is not UTF-8, written by another client, is
/// read with replacement characters).
pub(super) fn decode_leader_value(v: &[u8]) -> Option<String> {
    (!is_lock_value(v)).then(|| String::from_utf8_lossy(v).into_owned())
}

/// Whether a key's value is a leadership's.
pub(super) fn is_leader_value(v: &[u8]) -> bool {
    !is_lock_value(v)
}

/// Refuses a campaign value that reads as one of edgelock's own lock values
/// (the only values a leadership cannot take on etcd, see `is_lock_value`).
pub(super) fn check_campaign_value(value: &str) -> Result<(), LockError> {
    if is_lock_value(value.as_bytes()) {
        return Err(LockError::invalid(format!(
            "the campaign value {value:?} is reserved on etcd: it reads as one of edgelock's own \
             lock values (16 lowercase hex digits, or a value starting r: or p<1 to 3 digits>:)"
        )));
    }
    Ok(())
}

/// Who leads, from the oldest key of a name (with its value). A leadership
/// key without a positive create revision is a hostile reply.
pub(super) fn leadership_of(oldest: Option<&gw::KeyValue>) -> Result<Option<Leadership>, String> {
    let Some(kv) = oldest else { return Ok(None) };
    let Some(value) = decode_leader_value(&kv.value) else {
        return Ok(None);
    };
    if kv.create_revision <= 0 {
        return Err("a leadership key without a create revision".into());
    }
    Ok(Some(Leadership {
        value,
        fencing_token: kv.create_revision as u64,
    }))
}

/// The read of the oldest key of `name` (a leader query's, an observe's).
pub(super) fn leader_read_body(m: &EtcdMachine, name: &str) -> Value {
    gw::range_oldest(&m.lock_prefix(name))
}

/// A leader read's answer: the range, and who leads by it.
pub(super) fn read_leadership(
    m: &EtcdMachine,
    name: &str,
    result: Result<(u16, Vec<u8>), Failure>,
) -> Result<(RangeResponse, Option<Leadership>), LockError> {
    result
        .and_then(|(s, b)| gw::parse::<RangeResponse>(s, &b).map_err(Failure::Gateway))
        .map_err(|f| m.backend_error(name, f))
        .and_then(|r| {
            let state = leadership_of(r.kvs.first()).map_err(|m| malformed(name, &m))?;
            Ok((r, state))
        })
}

pub(super) fn malformed(name: &str, message: &str) -> LockError {
    LockError::Backend {
        backend: BACKEND,
        name: name.to_string(),
        status: None,
        message: format!("malformed reply: {message}"),
    }
}
