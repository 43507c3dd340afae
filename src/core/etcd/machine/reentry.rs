//! Reentrant holds of an exclusive lock ([`Operation::Reenter`]).
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

use super::*;

/// Most count txns one release or re-entry sends before giving up: each
/// retry means another holder changed the count in between.
const MAX_COUNT_TRIES: u32 = 16;

/// Where an exclusive lock's release is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum ReleaseStep {
    /// Not an exclusive lock (a permit, a shared hold, a leadership): the
    /// plain delete of its keys.
    Plain,
    /// Delete the lock key unless holds are counted on it.
    First { tries: u32 },
    /// Writing the count minus one (with `nonce`).
    Decrement { nonce: Vec<u8>, tries: u32 },
    /// The last hold: deleting the lock key and its count key.
    Last { tries: u32 },
}

/// A re-entry in progress.
pub(super) struct Reenter {
    pub(super) handle: LockHandle,
    /// The lock's lease (the handle's owner), renewed by this client while
    /// it holds the re-entered hold.
    pub(super) lease: i64,
    counting: bool,
    nonce: Vec<u8>,
    tries: u32,
}

/// A parsed count value.
struct Count {
    token: i64,
    holds: u32,
    nonce: Vec<u8>,
}

fn parse_count(v: &[u8]) -> Option<Count> {
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

fn count_value(token: i64, holds: u32, nonce: &[u8]) -> Vec<u8> {
    let mut v = format!("{token}:{holds}:").into_bytes();
    v.extend_from_slice(nonce);
    v
}

/// What a failed count compare read back: whether the lock key is still
/// that incarnation, and the count key (if any). `None`: the reply lacks
/// the reads (a hostile or broken backend).
fn read_back(
    t: &TxnResponse,
    key: &[u8],
    rev: i64,
    count_key: &[u8],
) -> Option<(bool, Option<KeyValueRef>)> {
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
        .map(|kv| KeyValueRef {
            mod_revision: kv.mod_revision,
            value: kv.value.clone(),
        });
    Some((held, count))
}

/// The parts of the count key a step needs.
struct KeyValueRef {
    mod_revision: i64,
    value: Vec<u8>,
}

impl EtcdMachine {
    /// The key counting the holds of `name`'s exclusive lock (see the module docs).
    pub(super) fn count_key(&self, name: &str) -> Vec<u8> {
        format!("{}/{}%holds", self.prefix, escape_name(name)).into_bytes()
    }

    pub(super) fn start_reenter(
        &mut self,
        now: Millis,
        handle: &LockHandle,
    ) -> Result<OpId, LockError> {
        self.check_open()?;
        validate_name(&handle.name)?;
        if handle.backend != BackendKind::Etcd {
            return Err(LockError::invalid(format!(
                "handle is for the {} backend, not etcd",
                handle.backend.as_str()
            )));
        }
        if handle.kind != LockKind::Exclusive || handle.slot.is_some() {
            return Err(LockError::invalid(format!(
                "only an exclusive lock can be re-entered, not a {} hold",
                handle.kind.describe()
            )));
        }
        let lease: i64 = handle
            .owner
            .parse()
            .map_err(|_| LockError::invalid("handle owner is not an etcd lease id"))?;
        let prefix = String::from_utf8_lossy(&self.lock_prefix(&handle.name)).into_owned();
        if handle.key.strip_prefix(&prefix) != Some(format!("{lease:x}").as_str()) {
            return Err(LockError::invalid(
                "handle key does not belong to this lock name and prefix",
            ));
        }
        if handle.revision == 0
            || handle.revision > i64::MAX as u64
            || handle.fencing_token != handle.revision
        {
            return Err(LockError::invalid(
                "handle revision/fencing token is not valid",
            ));
        }
        let nonce = random_hex(self.entropy.as_mut(), 8).into_bytes();
        let op = self.new_op(OpKind::Reenter(Reenter {
            handle: handle.clone(),
            lease,
            counting: false,
            nonce,
            tries: 0,
        }));
        // Another owner's lease (another client's session): never revoked
        // by our close (see `close`).
        if !self.leases.contains_key(&lease) && !self.borrowed.contains(&lease) {
            self.borrowed.push(lease);
        }
        // Like a resume: renew the lock's lease first (it must be alive),
        // which also tells how long the hold is valid.
        self.leases.get_or_insert_with(lease, || Lease {
            ttl_ms: self.session_ttl_ms,
            expires_at: 0,
            next_keepalive: now,
            keepalive: None,
            check: None,
            checked: Vec::new(),
            sweep: None,
        });
        let r = self.send_keepalive(now, lease, Purpose::Op(op));
        if let Some(o) = self.ops.get_mut(&op) {
            o.req = Some(r);
        }
        Ok(op)
    }

    fn reenter_mut(&mut self, op: OpId) -> Option<&mut Reenter> {
        match self.ops.get_mut(&op).map(|o| &mut o.kind) {
            Some(OpKind::Reenter(r)) => Some(r),
            _ => None,
        }
    }

    fn send_op_txn(&mut self, now: Millis, op: OpId, body: Value) {
        let r = self.send(now, Purpose::Op(op), "/v3/kv/txn", body, false);
        if let Some(o) = self.ops.get_mut(&op) {
            o.req = Some(r);
        }
    }

    fn fail_reenter(&mut self, op: OpId, lease: i64, error: LockError) {
        self.drop_lease_if_unused(lease, op);
        self.ops.remove(&op);
        self.rt.out.fail(op, error);
    }

    pub(super) fn on_reenter_reply(
        &mut self,
        now: Millis,
        op: OpId,
        sent_at: Millis,
        result: Result<(u16, Vec<u8>), Failure>,
    ) {
        let Some(r) = self.reenter_mut(op) else {
            return;
        };
        let (handle, lease, counting, nonce, tries) = (
            r.handle.clone(),
            r.lease,
            r.counting,
            r.nonce.clone(),
            r.tries,
        );
        let name = handle.name.clone();
        let lost = |reason: &str| LockError::Lost {
            backend: BACKEND,
            name: name.clone(),
            reason: reason.to_string(),
        };
        let key = handle.key.as_bytes().to_vec();
        let rev = handle.revision as i64;
        let count_key = self.count_key(&name);
        if !counting {
            return match self.apply_keepalive(lease, sent_at, result) {
                Ok(_) => {
                    if let Some(r) = self.reenter_mut(op) {
                        r.counting = true;
                        r.tries = 1;
                    }
                    let value = count_value(rev, 2, &nonce);
                    let body = gw::put_count_txn(&key, rev, &count_key, 0, lease, &value);
                    self.send_op_txn(now, op, body);
                }
                Err(Ok(reason)) => self.fail_reenter(op, lease, lost(&reason.to_string())),
                Err(Err(f)) => {
                    let e = self.backend_error(&name, f);
                    self.fail_reenter(op, lease, e)
                }
            };
        }
        let t = match result
            .and_then(|(s, b)| gw::parse::<TxnResponse>(s, &b).map_err(Failure::Gateway))
        {
            Ok(t) => t,
            Err(f) => {
                let e = self.backend_error(&name, f);
                return self.fail_reenter(op, lease, e);
            }
        };
        if !t.succeeded {
            let Some((held, count)) = read_back(&t, &key, rev, &count_key) else {
                return self.fail_reenter(op, lease, self.broken_reply(&name));
            };
            let applied = count
                .as_ref()
                .and_then(|c| parse_count(&c.value))
                .is_some_and(|c| c.token == rev && c.nonce == nonce);
            if !applied {
                if !held {
                    return self.fail_reenter(op, lease, lost("the key no longer exists"));
                }
                if tries >= MAX_COUNT_TRIES {
                    return self.fail_reenter(op, lease, self.count_contended(&name));
                }
                // Another holder changed the count: count again from what we read.
                let (holds, count_mod) = match &count {
                    Some(c) => match parse_count(&c.value) {
                        Some(p) if p.token == rev => (p.holds, c.mod_revision),
                        // A count of an earlier incarnation: one hold.
                        _ => (1, c.mod_revision),
                    },
                    None => (1, 0),
                };
                let Some(holds) = holds.checked_add(1) else {
                    return self.fail_reenter(
                        op,
                        lease,
                        LockError::invalid(format!("lock {name:?} has too many holds")),
                    );
                };
                if let Some(r) = self.reenter_mut(op) {
                    r.tries += 1;
                }
                let value = count_value(rev, holds, &nonce);
                let body = gw::put_count_txn(&key, rev, &count_key, count_mod, lease, &value);
                return self.send_op_txn(now, op, body);
            }
        }
        // Counted: the hold is ours.
        self.ops.remove(&op);
        let lock = self.rt.out.lock_id();
        self.locks.insert(
            lock,
            HeldLock {
                name: name.clone(),
                key,
                rev,
                lease,
                slot: None,
                shared: false,
                releasing: false,
                leader: false,
                reentered: true,
            },
        );
        let expires_at = self.leases.get(&lease).map(|l| l.expires_at).unwrap_or(now);
        self.rt.out.complete(
            op,
            Ok(Outcome::Acquired(LockInfo {
                id: lock,
                name,
                fencing_token: handle.fencing_token,
                expires_at,
                handle,
            })),
        );
    }

    /// A reply of an exclusive lock's release (see the module docs).
    pub(super) fn on_counted_release_reply(
        &mut self,
        now: Millis,
        op: OpId,
        lock: LockId,
        step: ReleaseStep,
        result: Result<(u16, Vec<u8>), Failure>,
    ) {
        let Some(held) = self.locks.get(&lock) else {
            // Lost meanwhile.
            return self.finish_release(now, op, lock, false);
        };
        let (name, key, rev, lease) = (held.name.clone(), held.key.clone(), held.rev, held.lease);
        let count_key = self.count_key(&name);
        let t = match result
            .and_then(|(s, b)| gw::parse::<TxnResponse>(s, &b).map_err(Failure::Gateway))
        {
            Ok(t) => t,
            Err(f) => {
                let e = self.backend_error(&name, f);
                return self.abandon_release(now, op, lock, e);
            }
        };
        if t.succeeded {
            if matches!(step, ReleaseStep::Decrement { .. }) {
                self.note_shared_lease(lease);
            }
            return self.finish_release(now, op, lock, true);
        }
        let Some((still_held, count)) = read_back(&t, &key, rev, &count_key) else {
            let e = self.broken_reply(&name);
            return self.abandon_release(now, op, lock, e);
        };
        let parsed = count.as_ref().and_then(|c| parse_count(&c.value));
        if let ReleaseStep::Decrement { nonce, .. } = &step {
            // A retried decrement whose first attempt applied.
            if parsed
                .as_ref()
                .is_some_and(|c| c.token == rev && c.nonce == *nonce)
            {
                self.note_shared_lease(lease);
                return self.finish_release(now, op, lock, true);
            }
        }
        if !still_held {
            return self.finish_release(now, op, lock, false);
        }
        let tries = match step {
            ReleaseStep::Plain => 0,
            ReleaseStep::First { tries }
            | ReleaseStep::Decrement { tries, .. }
            | ReleaseStep::Last { tries } => tries,
        } + 1;
        if tries > MAX_COUNT_TRIES {
            let e = self.count_contended(&name);
            return self.abandon_release(now, op, lock, e);
        }
        let (next, body) = match (count, parsed) {
            (Some(c), Some(p)) if p.token == rev && p.holds >= 2 => {
                let nonce = random_hex(self.entropy.as_mut(), 8).into_bytes();
                let value = count_value(rev, p.holds - 1, &nonce);
                (
                    ReleaseStep::Decrement { nonce, tries },
                    gw::put_count_txn(&key, rev, &count_key, c.mod_revision, lease, &value),
                )
            }
            // The last hold (or a count of an earlier incarnation: one hold).
            (Some(c), _) => (
                ReleaseStep::Last { tries },
                gw::delete_counted_txn(&key, rev, &count_key, c.mod_revision),
            ),
            // The count key vanished in between: the plain delete again.
            (None, _) => (
                ReleaseStep::First { tries },
                gw::release_uncounted_txn(&key, rev, &count_key),
            ),
        };
        if let Some(Op {
            kind: OpKind::Release { step, .. },
            ..
        }) = self.ops.get_mut(&op)
        {
            *step = next;
        }
        self.send_op_txn(now, op, body);
    }

    /// Holds (perhaps another process's) remain counted on a lock of
    /// `lease`: our close must not revoke it.
    fn note_shared_lease(&mut self, lease: i64) {
        if !self.shared_leases.contains(&lease) && !self.borrowed.contains(&lease) {
            self.shared_leases.push(lease);
        }
    }

    /// A release is over: the hold is gone locally.
    fn finish_release(&mut self, now: Millis, op: OpId, lock: LockId, held_until_release: bool) {
        self.ops.remove(&op);
        if let Some(h) = self.locks.remove(&lock) {
            if h.claims_name() {
                self.pass_on_name(now, &h);
            }
            if h.reentered {
                self.drop_lease_if_unused(h.lease, op);
            }
        }
        self.rt.out.complete(
            op,
            Ok(Outcome::Released {
                lock,
                held_until_release,
            }),
        );
    }

    /// A release without a known outcome: give the hold up locally. Its key
    /// is deleted in the background only when no other local hold shares
    /// it, and then only while no count exists (see `timers.rs`).
    fn abandon_release(&mut self, now: Millis, op: OpId, lock: LockId, error: LockError) {
        self.ops.remove(&op);
        if let Some(h) = self.locks.remove(&lock) {
            let shared_key = self.locks.values().any(|l| l.key == h.key);
            if shared_key {
                if h.claims_name() {
                    self.pass_on_name(now, &h);
                }
            } else if h.reentered {
                self.drop_lease_if_unused(h.lease, op);
            } else {
                self.orphan_keys_of(h, now + ORPHAN_RETRY_MS);
            }
        }
        self.rt.out.fail(op, error);
    }

    /// A hold that claimed its name locally is gone: another local hold of
    /// the same key (a re-entry) takes the claim over, else the name is free.
    pub(super) fn pass_on_name(&mut self, now: Millis, h: &HeldLock) {
        if let Some((_, other)) = self
            .locks
            .iter_mut()
            .find(|(_, l)| l.key == h.key && l.reentered)
        {
            other.reentered = false;
            return;
        }
        self.free_name(now, &h.name);
    }

    fn broken_reply(&self, name: &str) -> LockError {
        LockError::Backend {
            backend: BACKEND,
            name: name.to_string(),
            status: None,
            message: "a failed hold-count txn came back without its reads".into(),
        }
    }

    fn count_contended(&self, name: &str) -> LockError {
        LockError::Backend {
            backend: BACKEND,
            name: name.to_string(),
            status: None,
            message: format!(
                "the hold count changed under {MAX_COUNT_TRIES} attempts in a row; try again"
            ),
        }
    }
}
