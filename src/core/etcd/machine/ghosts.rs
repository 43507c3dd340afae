//! Ghost keys: keys on our session lease that no operation of ours uses.
//!
//! An acquire txn that timed out (or was abandoned) may still reach etcd
//! later — queued behind a paused leader, delayed on the network — and create
//! our key after we gave up, even after we re-acquired and released the name.
//! Such a key holds the lock for as long as our session lives, and a client
//! that keeps its session for other locks would block that name forever.
//! Once any txn outcome was unknown, every renewal round also reads the keys
//! attached to the lease (`timetolive` with `keys`) and deletes each one no
//! lock, acquire or cleanup of ours accounts for. The name stays busy
//! locally until the delete is confirmed (like any orphan), so a new acquire
//! of it cannot race the deletion.

use std::collections::VecDeque;

use super::{permits, sets, shared, Acquire, EtcdMachine, Failure, OpKind, Orphan};
use crate::core::etcd::gateway::{self as gw, LeaseKeys};
use crate::core::{Millis, RequestId};

impl EtcdMachine {
    pub(super) fn on_sweep(
        &mut self,
        now: Millis,
        id: RequestId,
        lease: i64,
        result: Result<(u16, Vec<u8>), Failure>,
    ) {
        match self.leases.get_mut(&lease) {
            Some(l) if l.sweep == Some(id) => l.sweep = None,
            _ => return,
        }
        // Any failure: the next round sweeps again.
        let Ok(found) =
            result.and_then(|(s, b)| gw::parse::<LeaseKeys>(s, &b).map_err(Failure::Gateway))
        else {
            return;
        };
        for key in found.keys {
            if self.key_in_use(&key) {
                continue;
            }
            let Some((name, permit)) = self.name_of_key(&key, lease) else {
                continue;
            };
            if permit {
                // A permit's queue key is never reused (its suffix is the
                // acquire's id), and no claim picks a slot whose deletion
                // is pending (`permit_claim`): the name stays free.
            } else if self.busy_names.contains_key(&name) {
                // An operation of ours is on this name: its key, not a ghost.
                continue;
            } else {
                self.busy_names.insert(name.clone(), VecDeque::new());
            }
            self.orphans.push(Orphan {
                name,
                key,
                rev: None,
                value: None,
                holds_name: !permit,
                lease,
                retry_at: now,
                req: None,
            });
            self.arm_orphans();
        }
    }

    fn key_in_use(&self, key: &[u8]) -> bool {
        let claimed = |a: &Acquire| {
            a.kind.permit().is_some_and(|p| {
                p.claiming
                    .is_some_and(|s| permits::slot_key(&a.lock_prefix, s) == key)
            })
        };
        let in_set = |s: &sets::AcquireSet| s.members.iter().any(|m| m.key == key);
        self.locks
            .values()
            .any(|l| l.keys().iter().any(|(k, _)| k == key))
            || self
                .ops
                .values()
                .any(|o| matches!(&o.kind, OpKind::AcquireSet(s) if in_set(s)))
            || self.orphans.iter().any(|o| o.key == key)
            || self
                .ops
                .values()
                .any(|o| matches!(&o.kind, OpKind::Acquire(a) if a.key == key || claimed(a)))
    }

    /// The lock name of one of our keys on `lease`, and whether it is a
    /// semaphore's: `<prefix>/<escaped name>/<lease hex>` (a lock),
    /// `…/<lease hex>.<n>` (a permit's queue key) or `…/s/<k>` (a slot).
    fn name_of_key(&self, key: &[u8], lease: i64) -> Option<(String, bool)> {
        let text = std::str::from_utf8(key).ok()?;
        let rest = text.strip_prefix(self.prefix.as_str())?.strip_prefix('/')?;
        // Escaped names contain no '/'.
        let (escaped, tail) = rest.split_once('/')?;
        let name = unescape_name(escaped)?;
        // Keys are named after the lease exactly as `acquire_step` does.
        if tail == format!("{lease:x}") {
            return Some((name, false));
        }
        let lock_prefix = self.lock_prefix(&name);
        // A permit's and a reader's keys are per acquisition: neither claims the name.
        let permit = permits::is_queue_suffix_of(tail, lease)
            || permits::slot_of(&lock_prefix, key).is_some()
            || shared::is_reader_suffix_of(tail, lease);
        permit.then_some((name, true))
    }
}

/// The inverse of `escape_name` (`%25` → `%`, `%2F` → `/`); None for any
/// other escape, which `escape_name` never produces.
fn unescape_name(s: &str) -> Option<String> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('%') {
        out.push_str(&rest[..i]);
        let esc = rest.get(i..i + 3)?;
        out.push(match esc {
            "%25" => '%',
            "%2F" => '/',
            _ => return None,
        });
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::super::super::escape_name;
    use super::unescape_name;

    #[test]
    fn unescape_inverts_escape() {
        for name in ["a", "a/b", "%2F", "%", "100%/x%25y", "é/ü", ""] {
            assert_eq!(unescape_name(&escape_name(name)).as_deref(), Some(name));
        }
        assert_eq!(unescape_name("%zz"), None);
        assert_eq!(unescape_name("abc%2"), None);
    }
}
