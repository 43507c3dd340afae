//! Redis key names.
//!
//! - lock key: `{<prefix>:<name>}`
//! - fencing counter: `{<prefix>:<name>}:fence`
//! - waiters' queue (one node: the waiters of any lock, see
//!   `scripts::ACQUIRE_QUEUED`): `{<prefix>:<name>}:queue` (waiter ids in
//!   arrival order) and `{<prefix>:<name>}:leases` (each waiter's lease);
//!   both expire when no waiter has renewed its lease for a lease period
//! - semaphore (see [`super::semaphore`]): permit slots
//!   `{<prefix>:<name>}:permit:<k>` for `k` in `0..limit` (each the owner
//!   token of one permit, with the permit's TTL), the limit record
//!   `{<prefix>:<name>}:limit` (no expiry), and the base
//!   `{<prefix>:<name>}:permit` whose queue, leases and wake-up channel the
//!   semaphore's waiters share (the base key itself is never written); the
//!   fencing counter is the name's, shared with the exclusive lock
//! - read-write lock (see [`super::rwlock`]): the readers
//!   `{<prefix>:<name>}:readers` (a sorted set: owner token → lease end in
//!   the server's `TIME` ms, expiring with its last reader) and the writer
//!   intent `{<prefix>:<name>}:wintent` (set with a short `PX` by a waiting
//!   writer so that new readers queue behind it); the writer is the lock
//!   key itself and the counter is the name's
//! - election (see [`super::election`]): the leader record
//!   `{<prefix>:<name>}:leader` (a hash: the holder's owner token, fencing
//!   token and value; no expiry, reported only while its owner holds the
//!   lock key); the leader's lock is the lock key itself
//!
//! - reentrant holds (see `scripts::REENTER`): the set of holds
//!   `<lock key>:holds` (members: the marker `=<owner token>`, `+` for the
//!   outer hold, one random member per re-entered hold; expiring with the
//!   lock: every extend renews both; a set without the holder's marker is
//!   stale and ignored, and releases delete it). It extends the lock key,
//!   so it shares its hash tag. On Redlock every node keeps its own set
//!   (see `tasks/reenter.rs` for why sets of ids, unlike a number, need no
//!   agreement between nodes)
//!
//! The braces make the pair one Redis Cluster hash slot, so that a script
//! may touch both (Upstash and any cluster require it). Redis hashes the
//! text between the first `{` and the first `}` after it; the fencing key
//! extends the lock key, so both always get the same hash tag, and since the
//! prefix contains no braces the tag starts with `<prefix>:` and is never
//! empty (an empty tag would hash the whole key). A name containing `}`
//! shortens the tag to the part before it: still the same for both keys.
//!
//! The counter has no expiry: it must outlive every holder so that tokens
//! keep increasing. It costs one small key per lock name ever used.

use crate::core::LockError;

/// Longest key prefix accepted, in bytes.
pub const MAX_PREFIX_BYTES: usize = 128;

/// Checks a key prefix: at most [`MAX_PREFIX_BYTES`] bytes, no braces (they would
/// change the hash tag) and no control characters.
pub fn validate_prefix(prefix: &str) -> Result<(), LockError> {
    if prefix.len() > MAX_PREFIX_BYTES {
        return Err(LockError::invalid(format!(
            "key prefix is longer than {MAX_PREFIX_BYTES} bytes"
        )));
    }
    if prefix.contains(['{', '}']) || prefix.chars().any(char::is_control) {
        return Err(LockError::invalid(
            "key prefix must not contain braces or control characters",
        ));
    }
    Ok(())
}

/// The lock key of `name`: `{<prefix>:<name>}`.
pub fn lock_key(prefix: &str, name: &str) -> String {
    format!("{{{prefix}:{name}}}")
}

/// The fencing counter's key for a lock key: `<lock_key>:fence`.
pub fn fence_key(lock_key: &str) -> String {
    format!("{lock_key}:fence")
}

/// A fair lock's queue of waiter ids (a list): `<lock_key>:queue`.
pub fn queue_key(lock_key: &str) -> String {
    format!("{lock_key}:queue")
}

/// A fair lock's waiter leases (a sorted set): `<lock_key>:leases`.
pub fn leases_key(lock_key: &str) -> String {
    format!("{lock_key}:leases")
}

/// Who bypassed the queue's head (`<waiter id>:<count>`): the free lock
/// taken by others while that waiter headed the queue (see
/// [`ACQUIRE`](super::scripts::ACQUIRE)): `<lock_key>:bypass`.
pub fn bypass_key(lock_key: &str) -> String {
    format!("{lock_key}:bypass")
}

/// The base of a semaphore's waiters (queue, leases, wake-up channel):
/// `<lock_key>:permit`. No value is ever stored under it.
pub fn permit_base(lock_key: &str) -> String {
    format!("{lock_key}:permit")
}

/// Permit slot `slot` of a semaphore: `<lock_key>:permit:<slot>`.
pub fn permit_key(lock_key: &str, slot: u32) -> String {
    format!("{lock_key}:permit:{slot}")
}

/// Slots `0..count` of a semaphore, in order.
pub fn permit_keys(lock_key: &str, count: u32) -> Vec<String> {
    (0..count).map(|k| permit_key(lock_key, k)).collect()
}

/// A semaphore's limit record: `<lock_key>:limit`.
pub fn limit_key(lock_key: &str) -> String {
    format!("{lock_key}:limit")
}

/// A read-write lock's readers (a sorted set): `<lock_key>:readers`.
pub fn readers_key(lock_key: &str) -> String {
    format!("{lock_key}:readers")
}

/// A read-write lock's writer intent: `<lock_key>:wintent`.
pub fn intent_key(lock_key: &str) -> String {
    format!("{lock_key}:wintent")
}

/// The text Redis Cluster hashes for `key`.
pub fn hash_tag(key: &str) -> &str {
    if let Some(open) = key.find('{') {
        if let Some(len) = key[open + 1..].find('}') {
            if len > 0 {
                return &key[open + 1..open + 1 + len];
            }
        }
    }
    key
}

/// The hold count of the exclusive lock at `key` (see `scripts::REENTER`).
pub fn holds_key(key: &str) -> String {
    format!("{key}:holds")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn examples() {
        assert_eq!(
            lock_key("edgelock", "jobs/nightly"),
            "{edgelock:jobs/nightly}"
        );
        assert_eq!(fence_key("{edgelock:a}"), "{edgelock:a}:fence");
        assert_eq!(permit_key("{edgelock:a}", 2), "{edgelock:a}:permit:2");
        assert_eq!(
            permit_keys("{edgelock:a}", 2),
            ["{edgelock:a}:permit:0", "{edgelock:a}:permit:1"]
        );
        assert_eq!(limit_key("{edgelock:a}"), "{edgelock:a}:limit");
        assert_eq!(readers_key("{edgelock:a}"), "{edgelock:a}:readers");
        assert_eq!(intent_key("{edgelock:a}"), "{edgelock:a}:wintent");
        assert_eq!(
            queue_key(&permit_base("{edgelock:a}")),
            "{edgelock:a}:permit:queue"
        );
        assert_eq!(hash_tag("{edgelock:a}b}"), "edgelock:a");
        assert!(validate_prefix("edgelock").is_ok());
        assert!(validate_prefix("").is_ok());
        assert!(validate_prefix("a{b").is_err());
        assert!(validate_prefix("a\nb").is_err());
    }

    proptest! {
        #[test]
        fn lock_and_fence_keys_share_a_non_empty_hash_tag(prefix in "[^{}\\p{Cc}]{0,10}", name in ".{1,20}") {
            let k = lock_key(&prefix, &name);
            let f = fence_key(&k);
            prop_assert_eq!(hash_tag(&k), hash_tag(&f));
            // Every key a semaphore script declares shares the tag too.
            let base = permit_base(&k);
            // And every key of the read-write lock's scripts.
            for other in [queue_key(&base), leases_key(&base), limit_key(&k), permit_key(&k, 0), permit_key(&k, 99), base.clone(),
                          readers_key(&k), intent_key(&k), queue_key(&k), leases_key(&k), intent_key(&base)] {
                prop_assert_eq!(hash_tag(&k), hash_tag(&other));
            }
            let expected = format!("{}:", prefix);
            prop_assert!(hash_tag(&k).starts_with(&expected));
        }
    }
}
