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
//! cancel, timeout and close. Only the key's *value* differs:
//!
//! ```text
//! l:<random hex>:<campaign value>
//! ```
//!
//! - The `l:` tag marks the key a leadership. An exclusive lock's value is
//!   bare random hex (never an `l`), a reader's `r:<random>` (`shared.rs`), a
//!   permit's `p<limit>:<random>` (`permits.rs`): no value of one kind
//!   decodes as another (the proptest in `election_tests.rs` checks it both
//!   ways). A campaign is thereby an ordinary writer for the other kinds: a
//!   semaphore's name refuses it, a reader queues behind it, and a campaign
//!   on a name held as an exclusive lock queues behind that lock exactly as
//!   another exclusive acquire would (one queue per name, whatever the kinds).
//! - The random part is the acquire's nonce: a key found with another value
//!   is a leftover of an earlier incarnation and never adopted.
//! - The campaign value follows the second `:` verbatim (any UTF-8, at most
//!   `MAX_CAMPAIGN_VALUE` bytes, checked before the machine sees it).
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
//! oldest key leads. If it is a leadership key, `Some(Leadership { value,
//! fencing_token: create_revision })`. If nobody holds the name, *or the
//! holder is not a leadership* (a plain exclusive lock, a reader, a
//! semaphore's key), the answer is `None`: nobody leads the election even
//! though campaigns may be queued behind that lock; the first of them
//! becomes the leader (and `leader` says so) once the lock is released.
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

use super::{EtcdMachine, Failure, BACKEND};
use crate::core::etcd::gateway::{self as gw, RangeResponse};
use crate::core::{Leadership, LockError};

/// The tag that starts every leadership key's value.
const LEADER_TAG: &[u8] = b"l:";
/// The longest nonce a leadership value may carry (ours: 16 hex digits).
const MAX_NONCE_HEX: usize = 32;

/// The value of a leadership key: `l:<random>:<value>`.
pub(super) fn leader_value(random: &str, value: &str) -> Vec<u8> {
    let mut v = Vec::with_capacity(LEADER_TAG.len() + random.len() + 1 + value.len());
    v.extend_from_slice(LEADER_TAG);
    v.extend_from_slice(random.as_bytes());
    v.push(b':');
    v.extend_from_slice(value.as_bytes());
    v
}

/// The campaign value a key's value carries, if it is a leadership's.
pub(super) fn decode_leader_value(v: &[u8]) -> Option<&str> {
    let rest = v.strip_prefix(LEADER_TAG)?;
    let colon = rest.iter().position(|b| *b == b':')?;
    let (nonce, tail) = rest.split_at(colon);
    if nonce.is_empty()
        || nonce.len() > MAX_NONCE_HEX
        || !nonce
            .iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
    {
        return None;
    }
    let value = std::str::from_utf8(tail.get(1..)?).ok()?;
    (value.len() <= crate::core::operation::MAX_CAMPAIGN_VALUE).then_some(value)
}

/// Whether a key's value is a leadership's.
pub(super) fn is_leader_value(v: &[u8]) -> bool {
    decode_leader_value(v).is_some()
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
        value: value.to_string(),
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
