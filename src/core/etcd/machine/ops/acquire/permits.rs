//! Semaphore permits (`LockKind::Permits { limit }`): the queue, the slots,
//! and how a waiter becomes a holder (the recipe is in the `core::etcd`
//! module docs).
//!
//! Key layout under a name's prefix `P = <prefix>/<escaped name>/`:
//!
//! - queue keys `P<lease hex>.<n>`: one per acquisition (`n` is the acquire's
//!   operation id), so one client can hold several permits of one semaphore
//!   at once. The queue range is `[P, P"g")`: lease-hex keys only ('.' and
//!   the hex digits sort below 'g').
//! - slot keys `P"s/"<k>` for `k` in `0..limit` ('s' sorts after 'g': outside
//!   the queue range), bound to the holder's session lease like its queue key.
//!
//! Every key's value is `p<limit>:<random>`: the limit is stored with the
//! semaphore's keys, and no key outlives its holders.

use serde_json::Value;

use super::super::super::{EtcdMachine, MAX_RESTARTS, WATCH_RETRY_MS};
use super::super::Next;
use super::{AcqPhase, Acquire, Ending};
use crate::core::etcd::gateway::{self as gw, TxnResponse};
use crate::core::{Holder, LockError, LockKind, LockStatus, Millis, OpId, Wait};

/// A permit acquisition's own state (next to the common [`Acquire`] fields).
pub(in crate::core::etcd::machine) struct PermitAcquire {
    pub(in crate::core::etcd::machine) limit: u32,
    /// The slot of the claim in flight (or last sent).
    pub(in crate::core::etcd::machine) claiming: Option<u32>,
    /// Claims sent so far; bounded (each lost race means someone else took
    /// a slot: many in a row mean a misbehaving backend).
    pub(in crate::core::etcd::machine) claims: u32,
    /// The slot (and its key's create revision) a claim got while the
    /// acquire was already ending: its cleanup deletes it with the queue key.
    pub(in crate::core::etcd::machine) claimed: Option<(u32, i64)>,
}

impl PermitAcquire {
    pub(in crate::core::etcd::machine) fn new(limit: u32) -> PermitAcquire {
        PermitAcquire {
            limit,
            claiming: None,
            claims: 0,
            claimed: None,
        }
    }

    /// The acquire starts over on a new key: a slot claimed on the old
    /// key's lease went with it.
    pub(in crate::core::etcd::machine) fn forget_claims(&mut self) {
        (self.claiming, self.claims) = (None, 0);
    }
}

/// How long a holder that finds every slot taken waits before looking
/// again. Only a key left on a lease by a txn that applied after its
/// client gave up (swept, or gone with the lease) can cause it.
const NO_FREE_SLOT_RETRY_MS: u64 = 1_000;

/// What a key's value says about the name it belongs to.
#[derive(Debug, PartialEq, Eq)]
pub(in crate::core::etcd::machine) enum KeyKind {
    /// A permit of a semaphore of this limit.
    Permit(u32),
    /// Anything else: an exclusive lock's key (its value is a bare nonce).
    Plain,
}

/// The value of every key of one permit acquisition.
pub(in crate::core::etcd::machine) fn permit_value(limit: u32, random: &str) -> Vec<u8> {
    format!("p{limit}:{random}").into_bytes()
}

pub(in crate::core::etcd::machine) fn key_kind(value: &[u8]) -> KeyKind {
    let Some(rest) = value.strip_prefix(b"p") else {
        return KeyKind::Plain;
    };
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || digits > 3 || rest.get(digits) != Some(&b':') {
        return KeyKind::Plain;
    }
    match std::str::from_utf8(&rest[..digits])
        .ok()
        .and_then(|d| d.parse().ok())
    {
        Some(limit) => KeyKind::Permit(limit),
        None => KeyKind::Plain,
    }
}

/// End of the queue range of a name's prefix (`P"g"`).
pub(in crate::core::etcd::machine) fn queue_end(lock_prefix: &[u8]) -> Vec<u8> {
    [lock_prefix, b"g"].concat()
}

/// The slot keys' range `[P"s/", P"s0")`.
pub(in crate::core::etcd::machine) fn slots_range(lock_prefix: &[u8]) -> (Vec<u8>, Vec<u8>) {
    ([lock_prefix, b"s/"].concat(), [lock_prefix, b"s0"].concat())
}

pub(in crate::core::etcd::machine) fn slot_key(lock_prefix: &[u8], slot: u32) -> Vec<u8> {
    [lock_prefix, format!("s/{slot}").as_bytes()].concat()
}

/// The slot number of a slot key (`None` for anything else in the range).
pub(in crate::core::etcd::machine) fn slot_of(lock_prefix: &[u8], key: &[u8]) -> Option<u32> {
    let rest = key.strip_prefix(lock_prefix)?.strip_prefix(b"s/")?;
    let text = std::str::from_utf8(rest).ok()?;
    // Canonical decimal only: "01" is not slot 1.
    let n: u32 = text.parse().ok()?;
    (n.to_string() == text).then_some(n)
}

/// The queue key of permit acquisition `op` on `lease`.
pub(in crate::core::etcd::machine) fn queue_key(
    lock_prefix: &[u8],
    lease: i64,
    op: OpId,
) -> Vec<u8> {
    [lock_prefix, format!("{lease:x}.{}", op.0).as_bytes()].concat()
}

/// Whether `suffix` (after the name's prefix) is a permit queue key of `lease`.
pub(in crate::core::etcd::machine) fn is_queue_suffix_of(suffix: &str, lease: i64) -> bool {
    suffix
        .strip_prefix(&format!("{lease:x}."))
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// Where a permit acquisition stands after a read of its semaphore.
enum Standing {
    /// Among the first `limit` queue keys, at this index.
    Holder(usize),
    /// Exactly `limit` keys before it: watches the range for deletes.
    FirstWaiter,
    /// Further back: watches its predecessor.
    Behind(Vec<u8>),
    /// Nothing to go by (no predecessor although not among the first
    /// `limit + 1`, a reply cut short): look again shortly.
    Unclear,
}

/// The re-check txn of a waiting permit (see `send_predecessor_check`).
pub(in crate::core::etcd::machine) fn permit_check_body(a: &Acquire, limit: u32) -> Value {
    let (s0, s1) = slots_range(&a.lock_prefix);
    gw::permit_check_txn(
        &a.key,
        a.my_rev,
        (&a.lock_prefix, &queue_end(&a.lock_prefix)),
        (&s0, &s1),
        limit,
    )
}

/// The acquire txn of a permit (its queue key set) on `lease`; `readers`
/// is the name's readers' range (`shared.rs`), which must be empty: a
/// semaphore's name is no read-write lock.
pub(in crate::core::etcd::machine) fn permit_acquire_body(
    a: &Acquire,
    lease: i64,
    limit: u32,
    readers: (Vec<u8>, Vec<u8>),
) -> Value {
    let (s0, s1) = slots_range(&a.lock_prefix);
    let (r0, r1) = readers;
    gw::permit_acquire_txn(
        &a.key,
        (&a.lock_prefix, &queue_end(&a.lock_prefix)),
        (&s0, &s1),
        (&r0, &r1),
        lease,
        &a.nonce,
        limit,
    )
}

impl Acquire {
    /// The semaphore's limit (0 for an acquire of another kind, which
    /// never reaches these steps).
    fn limit(&self) -> u32 {
        self.kind.permit().map_or(0, |p| p.limit)
    }

    /// A permit acquire's txn answered (parsed, with a positive revision).
    /// `Txn` (whose compare failed) is handled with the lock's: it learns
    /// our key's revision and re-checks.
    pub(in crate::core::etcd::machine) fn on_permit_txn(
        self,
        m: &mut EtcdMachine,
        now: Millis,
        op: OpId,
        phase: AcqPhase,
        txn: TxnResponse,
    ) -> Next {
        match phase {
            AcqPhase::Txn => self.on_permit_put(m, now, op, &txn),
            AcqPhase::Predecessor => self.on_permit_recheck(m, now, op, &txn),
            AcqPhase::Claim => self.on_permit_claim(m, now, op, &txn),
            _ => Next::keep(self, None),
        }
    }

    /// The acquire txn put our queue key: refuse a read-write lock's name,
    /// else decide from what it read.
    fn on_permit_put(
        mut self,
        m: &mut EtcdMachine,
        now: Millis,
        op: OpId,
        txn: &TxnResponse,
    ) -> Next {
        let revision = txn.header.revision;
        let Some(mut r) = ranges(txn, 4) else {
            return self.malformed(m, now, op, "permit txn reply without its ranges");
        };
        self.my_rev = revision;
        let (readers, slots, newest, oldest) = (
            r.pop().unwrap_or_default(),
            r.pop().unwrap_or_default(),
            r.pop().unwrap_or_default(),
            r.pop().unwrap_or_default(),
        );
        if !readers.is_empty() {
            // A read-write lock's reader: the name is no semaphore.
            let message = format!(
                "{:?} is a read-write lock, not a semaphore of {}",
                self.name,
                self.limit()
            );
            let ending = Ending::Error(LockError::invalid(message));
            return self.cleanup(m, now, op, None, ending);
        }
        let pred = newest
            .into_iter()
            .find(|kv| kv.key != self.key && kv.create_revision < self.my_rev);
        self.permit_evaluate(m, now, op, revision, (oldest, pred, slots))
    }

    /// A re-check answered: our queue key must still be there.
    fn on_permit_recheck(
        self,
        m: &mut EtcdMachine,
        now: Millis,
        op: OpId,
        txn: &TxnResponse,
    ) -> Next {
        let Some(mut r) = ranges(txn, 4) else {
            return self.malformed(m, now, op, "permit re-check reply without its ranges");
        };
        let (slots, pred, oldest, own) = (
            r.pop().unwrap_or_default(),
            r.pop().unwrap_or_default(),
            r.pop().unwrap_or_default(),
            r.pop().unwrap_or_default(),
        );
        if !own
            .iter()
            .any(|kv| kv.key == self.key && kv.create_revision == self.my_rev)
        {
            return self.restart(m, now, op);
        }
        let revision = txn.header.revision;
        let pred = pred.into_iter().next();
        self.permit_evaluate(m, now, op, revision, (oldest, pred, slots))
    }

    /// A claim answered: the slot is ours, or (lost race, or an earlier
    /// attempt of this claim applied) the slots are looked at again.
    fn on_permit_claim(
        self,
        m: &mut EtcdMachine,
        now: Millis,
        op: OpId,
        txn: &TxnResponse,
    ) -> Next {
        if txn.succeeded {
            let slot = self.kind.permit().and_then(|p| p.claiming);
            return match slot {
                Some(slot) => self.grant(m, now, op, Some((slot, txn.header.revision))),
                None => self.malformed(m, now, op, "a claim without a slot"),
            };
        }
        let Some(mut r) = ranges(txn, 2) else {
            return self.malformed(m, now, op, "claim reply without its ranges");
        };
        let (slots, own) = (r.pop().unwrap_or_default(), r.pop().unwrap_or_default());
        if !own
            .iter()
            .any(|kv| kv.key == self.key && kv.create_revision == self.my_rev)
        {
            return self.restart(m, now, op);
        }
        self.permit_claim(m, now, op, 0, slots)
    }

    /// Why the name is no semaphore of our limit, if it is not: the oldest
    /// key decides the limit (a newer key with another limit is a mistaken
    /// client about to remove its key, and must not make the right ones
    /// fail); an exclusive lock's key anywhere we look means the name is
    /// not a semaphore at all.
    fn limit_mismatch(
        &self,
        oldest: &[gw::KeyValue],
        pred: Option<&gw::KeyValue>,
    ) -> Option<String> {
        let limit = self.limit();
        match oldest.first().map(|kv| key_kind(&kv.value)) {
            Some(KeyKind::Permit(l)) if l != limit => Some(format!(
                "semaphore {:?} has limit {l}, not {limit}",
                self.name
            )),
            _ if oldest
                .iter()
                .chain(pred)
                .any(|kv| key_kind(&kv.value) == KeyKind::Plain) =>
            {
                Some(format!(
                    "{:?} is an exclusive lock, not a semaphore of {limit}",
                    self.name
                ))
            }
            _ => None,
        }
    }

    /// Decides from the oldest `limit + 1` queue keys (up to ours), our
    /// predecessor and the slot keys (`read`): refuse a mismatched limit,
    /// claim a slot, or wait.
    fn permit_evaluate(
        mut self,
        m: &mut EtcdMachine,
        now: Millis,
        op: OpId,
        revision: i64,
        read: (Vec<gw::KeyValue>, Option<gw::KeyValue>, Vec<gw::KeyValue>),
    ) -> Next {
        let (oldest, pred, slots) = read;
        let limit = self.limit();
        if let Some(message) = self.limit_mismatch(&oldest, pred.as_ref()) {
            let ending = Ending::Error(LockError::invalid(message));
            return self.cleanup(m, now, op, None, ending);
        }
        let standing = match oldest.iter().position(|kv| kv.key == self.key) {
            Some(i) if i < limit as usize => Standing::Holder(i),
            Some(_) => Standing::FirstWaiter,
            None => match pred {
                Some(p) if oldest.len() > limit as usize => Standing::Behind(p.key),
                _ => Standing::Unclear,
            },
        };
        let lock_prefix = self.lock_prefix.clone();
        match standing {
            Standing::Holder(i) => self.permit_claim(m, now, op, i, slots),
            _ if self.wait == Wait::Try => self.cleanup(m, now, op, None, Ending::NotAcquired),
            Standing::FirstWaiter => {
                let body = gw::watch_range_deletes(
                    &lock_prefix,
                    &queue_end(&lock_prefix),
                    revision.saturating_add(1),
                );
                self.phase = AcqPhase::Watch;
                Next::watch(self, body)
            }
            Standing::Behind(pred) => {
                self.phase = AcqPhase::Watch;
                Next::watch(self, gw::watch_key(&pred, revision.saturating_add(1)))
            }
            Standing::Unclear => {
                self.phase = AcqPhase::Watch;
                m.set_recheck(op, Some(now + WATCH_RETRY_MS));
                Next::keep(self, None)
            }
        }
    }

    /// We hold a permit: adopt a slot key that is already ours (an earlier
    /// claim of this acquisition applied), or claim a free one.
    fn permit_claim(
        mut self,
        m: &mut EtcdMachine,
        now: Millis,
        op: OpId,
        position: usize,
        slots: Vec<gw::KeyValue>,
    ) -> Next {
        let limit = self.limit();
        let (lease, lock_prefix, value) = (
            self.lease.unwrap_or(0),
            self.lock_prefix.clone(),
            self.nonce.clone(),
        );
        let mut taken = Vec::new();
        for kv in &slots {
            let Some(slot) = slot_of(&lock_prefix, &kv.key) else {
                continue;
            };
            if kv.value == value && kv.lease == lease && kv.create_revision > 0 {
                // Ours, read on our lease: the lease was alive at that revision.
                return self.grant(m, now, op, Some((slot, kv.create_revision)));
            }
            taken.push(slot);
        }
        // A slot whose deletion by us is pending (a ghost, or a key of a
        // lost permit) is not free yet: its blind delete may be retried.
        let pending = |s: u32| m.orphans.iter().any(|o| o.key == slot_key(&lock_prefix, s));
        let free: Vec<u32> = (0..limit)
            .filter(|s| !taken.contains(s) && !pending(*s))
            .collect();
        let Some(p) = self.kind.permit_mut() else {
            return Next::keep(self, None);
        };
        if free.is_empty() {
            // Every slot is taken, by keys we do not see as holders (a slot
            // key left behind by a txn that applied late): wait until it is
            // swept or gone with its lease, as long as the acquire may wait.
            self.phase = AcqPhase::Watch;
            m.set_recheck(op, Some(now + NO_FREE_SLOT_RETRY_MS));
            return Next::keep(self, None);
        }
        p.claims += 1;
        // Each lost race is another holder's success, so a working backend
        // never needs many; the bound only stops a misbehaving one.
        if p.claims > limit.saturating_mul(2).saturating_add(MAX_RESTARTS) {
            return self.malformed(m, now, op, "no slot could be claimed");
        }
        // Holders promoted at once start at different free slots.
        let slot = free[(position + p.claims as usize - 1) % free.len()];
        p.claiming = Some(slot);
        self.phase = AcqPhase::Claim;
        let (s0, s1) = slots_range(&lock_prefix);
        let body = gw::claim_slot_txn(
            &slot_key(&lock_prefix, slot),
            &self.key,
            self.my_rev,
            lease,
            &value,
            (&s0, &s1),
        );
        Next::txn(self, body)
    }
}

/// What an inspect reports about a semaphore, from every key of its name
/// (oldest first); `None` when the name is not a semaphore (its oldest queue
/// key is a lock's, or it has no keys).
pub(in crate::core::etcd::machine) fn semaphore_status(
    name: &str,
    lock_prefix: &[u8],
    kvs: &[gw::KeyValue],
) -> Option<LockStatus> {
    let end = queue_end(lock_prefix);
    let queue: Vec<&gw::KeyValue> = kvs
        .iter()
        .filter(|kv| kv.key.as_slice() < end.as_slice())
        .collect();
    let slots: Vec<(u32, &gw::KeyValue)> = kvs
        .iter()
        .filter_map(|kv| Some((slot_of(lock_prefix, &kv.key)?, kv)))
        .collect();
    let first = queue
        .first()
        .map(|kv| &kv.value)
        .or(slots.first().map(|(_, kv)| &kv.value))?;
    let KeyKind::Permit(limit) = key_kind(first) else {
        return None;
    };
    let kind = LockKind::Permits { limit };
    let text = |kv: &gw::KeyValue| String::from_utf8_lossy(&kv.key).into_owned();
    // Holders are the slot keys (oldest first: `kvs` is in create order);
    // the queue keys after the first `limit` wait.
    let holders: Vec<Holder> = slots
        .iter()
        .map(|(slot, kv)| Holder {
            id: text(kv),
            kind,
            slot: Some(*slot),
            fencing_token: Some(kv.create_revision.max(0) as u64),
        })
        .collect();
    let queued: Vec<Holder> = queue
        .iter()
        .skip(limit as usize)
        .map(|kv| Holder {
            id: text(kv),
            kind,
            slot: None,
            fencing_token: None,
        })
        .collect();
    Some(LockStatus {
        name: name.to_string(),
        held: !holders.is_empty(),
        holder: holders.first().map(|h| h.id.clone()),
        fencing_token: holders.first().and_then(|h| h.fencing_token),
        remaining_ms: None,
        waiters: queued.iter().map(|h| h.id.clone()).collect(),
        limit: Some(limit),
        holders,
        queued,
    })
}

/// The key lists of a txn's first `n` ranges; `None` if one is missing.
fn ranges(txn: &TxnResponse, n: usize) -> Option<Vec<Vec<gw::KeyValue>>> {
    (0..n)
        .map(|i| txn.range(i).map(|r| r.kvs.clone()))
        .collect::<Option<Vec<_>>>()
}

#[cfg(test)]
mod tests {
    use super::{
        is_queue_suffix_of, key_kind, permit_value, queue_end, queue_key, slot_key, slot_of,
        slots_range, KeyKind, NO_FREE_SLOT_RETRY_MS,
    };
    use crate::core::{Input, LockMachine, Outcome, RequestId};
    use crate::core::{LockKind, OpId, Wait};

    #[test]
    fn values_carry_the_limit() {
        assert_eq!(key_kind(&permit_value(3, "ab12")), KeyKind::Permit(3));
        assert_eq!(key_kind(&permit_value(100, "x")), KeyKind::Permit(100));
        for plain in [
            &b"0123abcd"[..],
            b"",
            b"p",
            b"p:1",
            b"px:1",
            b"p3",
            b"p1000:x",
            b"q3:x",
        ] {
            assert_eq!(
                key_kind(plain),
                KeyKind::Plain,
                "{:?}",
                String::from_utf8_lossy(plain)
            );
        }
    }

    #[test]
    fn key_layout_keeps_queue_and_slots_apart() {
        let p = b"el/sem/";
        let q = queue_key(p, 0x1f, OpId(7));
        assert_eq!(q, b"el/sem/1f.7");
        let end = queue_end(p);
        let (s0, s1) = slots_range(p);
        // Queue keys (lease hex, '.', digits) are inside [P, P"g"); slot keys outside.
        assert!(q.as_slice() >= &p[..] && q < end);
        let top = queue_key(p, i64::MAX, OpId(u64::MAX));
        assert!(top < end, "{}", String::from_utf8_lossy(&top));
        let slot = slot_key(p, 99);
        assert!(slot >= end && slot >= s0 && slot < s1);
        assert_eq!(slot_of(p, &slot), Some(99));
        assert_eq!(slot_of(p, b"el/sem/s/01"), None);
        assert_eq!(slot_of(p, b"el/sem/s/x"), None);
        assert_eq!(slot_of(p, &q), None);
        assert!(is_queue_suffix_of("1f.7", 0x1f));
        assert!(
            !is_queue_suffix_of("1f", 0x1f)
                && !is_queue_suffix_of("1f.", 0x1f)
                && !is_queue_suffix_of("2f.7", 0x1f)
        );
    }
    // ---- the machine, scripted: requests out, hand-written etcd replies in ----

    use crate::core::b64;
    use serde_json::{json, Value};

    use crate::core::etcd::machine::scripted::{range, Script, LEASE};

    fn kv(key: &[u8], rev: i64, value: &str, lease: i64) -> Value {
        json!({ "key": b64::encode(key), "create_revision": rev.to_string(), "mod_revision": rev.to_string(), "value": b64::encode(value.as_bytes()), "lease": lease.to_string() })
    }

    impl Script {
        /// A machine whose permit acquire (`limit`, `wait`) has sent its
        /// acquire txn on session lease `LEASE`; returns it and the txn's body.
        fn permit(limit: u32, wait: Wait) -> (Script, Value) {
            let (s, _, txn) = Script::acquiring("sem", LockKind::Permits { limit }, wait);
            (s, txn)
        }
    }

    fn our_key(txn: &Value) -> Vec<u8> {
        b64::decode(
            txn["success"][0]["request_put"]["key"]
                .as_str()
                .unwrap()
                .as_bytes(),
        )
        .unwrap()
    }

    fn our_value(txn: &Value) -> String {
        String::from_utf8(
            b64::decode(
                txn["success"][0]["request_put"]["value"]
                    .as_str()
                    .unwrap()
                    .as_bytes(),
            )
            .unwrap(),
        )
        .unwrap()
    }

    #[test]
    fn a_holder_claims_a_free_slot_and_its_token_is_the_slot_keys_revision() {
        let (mut s, txn) = Script::permit(3, Wait::Forever);
        let (key, value) = (our_key(&txn), our_value(&txn));
        assert!(
            key.starts_with(b"edgelock/sem/1f."),
            "{}",
            String::from_utf8_lossy(&key)
        );
        assert!(value.starts_with("p3:"), "{value}");
        let id = RequestId(2);
        // One other holder (slot 0) before us.
        let other = kv(b"edgelock/sem/2a.1", 5, "p3:x", 0x2a);
        let ours = kv(&key, 10, &value, LEASE);
        let slot0 = kv(b"edgelock/sem/s/0", 6, "p3:x", 0x2a);
        s.txn_reply(
            id,
            10,
            true,
            vec![
                json!({"response_put": {}}),
                range(vec![other.clone(), ours.clone()]),
                range(vec![ours, other]),
                range(vec![slot0]),
                range(vec![]),
            ],
        );
        let (claim, body) = s.sent("/v3/kv/txn");
        let slot_key = b64::decode(body["compare"][0]["key"].as_str().unwrap().as_bytes()).unwrap();
        // Free are 1 and 2; at position 1 we start at the second of them, so
        // that holders promoted at once (positions 0, 1, ...) do not collide.
        assert_eq!(slot_key, b"edgelock/sem/s/2");
        assert_eq!(
            body["compare"][1]["create_revision"], "10",
            "only while our key is that incarnation"
        );
        assert_eq!(
            body["success"][1]["request_put"]["key"],
            b64::encode(&key),
            "the claim puts our queue key again"
        );
        s.txn_reply(
            claim,
            11,
            true,
            vec![json!({"response_put": {}}), json!({"response_put": {}})],
        );
        let Ok(Outcome::Acquired(info)) = s.completed() else {
            panic!("not acquired")
        };
        assert_eq!(
            (info.fencing_token, info.slot(), info.handle.revision),
            (11, Some(2), 10)
        );
        assert_eq!(info.kind(), LockKind::Permits { limit: 3 });
    }

    #[test]
    fn a_lost_race_for_a_slot_tries_another_and_an_own_slot_is_adopted() {
        let (mut s, txn) = Script::permit(2, Wait::Forever);
        let (key, value) = (our_key(&txn), our_value(&txn));
        let ours = kv(&key, 10, &value, LEASE);
        s.txn_reply(
            RequestId(2),
            10,
            true,
            vec![
                json!({"response_put": {}}),
                range(vec![ours.clone()]),
                range(vec![ours.clone()]),
                range(vec![]),
                range(vec![]),
            ],
        );
        let (claim, body) = s.sent("/v3/kv/txn");
        assert_eq!(body["compare"][0]["key"], b64::encode(b"edgelock/sem/s/0"));
        // Someone took slot 0 first: the failure branch shows it.
        let taken = kv(b"edgelock/sem/s/0", 11, "p2:y", 0x2a);
        s.txn_reply(
            claim,
            11,
            false,
            vec![range(vec![ours.clone()]), range(vec![taken.clone()])],
        );
        let (claim, body) = s.sent("/v3/kv/txn");
        assert_eq!(
            body["compare"][0]["key"],
            b64::encode(b"edgelock/sem/s/1"),
            "another free slot"
        );
        // That claim's answer was lost, its retry's compare fails: slot 1 is ours.
        let mine = kv(b"edgelock/sem/s/1", 12, &value, LEASE);
        s.txn_reply(
            claim,
            13,
            false,
            vec![range(vec![ours]), range(vec![taken, mine])],
        );
        let Ok(Outcome::Acquired(info)) = s.completed() else {
            panic!("not acquired")
        };
        assert_eq!((info.fencing_token, info.slot()), (12, Some(1)));
    }

    #[test]
    fn a_different_limit_is_invalid_argument_and_our_key_is_deleted() {
        let (mut s, txn) = Script::permit(3, Wait::Forever);
        let (key, value) = (our_key(&txn), our_value(&txn));
        let older = kv(b"edgelock/sem/2a.1", 5, "p5:x", 0x2a);
        let ours = kv(&key, 10, &value, LEASE);
        s.txn_reply(
            RequestId(2),
            10,
            true,
            vec![
                json!({"response_put": {}}),
                range(vec![older.clone(), ours.clone()]),
                range(vec![ours, older]),
                range(vec![]),
                range(vec![]),
            ],
        );
        let (del, body) = s.sent("/v3/kv/txn");
        assert_eq!(body["compare"][0]["create_revision"], "10");
        assert_eq!(
            body["success"][0]["request_delete_range"]["key"],
            b64::encode(&key)
        );
        s.txn_reply(del, 11, true, vec![]);
        let e = s.completed().unwrap_err();
        assert_eq!(e.code(), "INVALID_ARGUMENT");
        assert!(
            e.to_string()
                .contains("semaphore \"sem\" has limit 5, not 3"),
            "{e}"
        );
        assert_eq!(s.m.live_count(), 0);
    }

    #[test]
    fn the_first_waiter_watches_the_queue_for_deletes_and_a_later_one_its_predecessor() {
        // Limit 1: one holder before us makes us the first waiter.
        let (mut s, txn) = Script::permit(1, Wait::Forever);
        let (key, value) = (our_key(&txn), our_value(&txn));
        let holder = kv(b"edgelock/sem/2a.1", 5, "p1:x", 0x2a);
        let ours = kv(&key, 10, &value, LEASE);
        s.txn_reply(
            RequestId(2),
            10,
            true,
            vec![
                json!({"response_put": {}}),
                range(vec![holder.clone(), ours.clone()]),
                range(vec![ours.clone(), holder.clone()]),
                range(vec![]),
                range(vec![]),
            ],
        );
        let (_, watch) = s.sent("/v3/watch");
        let w = &watch["create_request"];
        assert_eq!(
            (w["key"].as_str(), w["range_end"].as_str()),
            (
                Some(b64::encode(b"edgelock/sem/").as_str()),
                Some(b64::encode(b"edgelock/sem/g").as_str())
            )
        );
        assert_eq!(w["filters"], json!(["NOPUT"]));
        assert_eq!(w["start_revision"], "11");

        // Behind a first waiter: watch it alone, for any event.
        let (mut s, txn) = Script::permit(1, Wait::Forever);
        let (key, value) = (our_key(&txn), our_value(&txn));
        let first = kv(b"edgelock/sem/3b.1", 7, "p1:y", 0x3b);
        let ours = kv(&key, 10, &value, LEASE);
        s.txn_reply(
            RequestId(2),
            10,
            true,
            vec![
                json!({"response_put": {}}),
                range(vec![holder, first.clone()]),
                range(vec![ours, first]),
                range(vec![]),
                range(vec![]),
            ],
        );
        let (watch_id, watch) = s.sent("/v3/watch");
        assert_eq!(
            watch["create_request"],
            json!({ "key": b64::encode(b"edgelock/sem/3b.1"), "start_revision": "11" })
        );
        // Its PUT (a promotion) wakes us: a re-check reading up to our revision.
        s.m.handle_input(s.now, Input::Chunk { id: watch_id, data: br#"{"result":{"header":{"revision":"12"},"events":[{"kv":{"key":"ZWRnZWxvY2svc2VtLzNiLjE=","create_revision":"7","mod_revision":"12"}}]}}"#.to_vec() });
        let (_, check) = s.sent("/v3/kv/txn");
        assert_eq!(
            check["success"][1]["request_range"]["max_create_revision"],
            "10"
        );
        assert_eq!(
            check["success"][2]["request_range"]["max_create_revision"],
            "9"
        );
    }

    #[test]
    fn a_holder_finding_every_slot_taken_looks_again_later() {
        let (mut s, txn) = Script::permit(1, Wait::Forever);
        let (key, value) = (our_key(&txn), our_value(&txn));
        let ours = kv(&key, 10, &value, LEASE);
        // Slot 0 is held by a key no holder accounts for (a late claim's leftover).
        let stray = kv(b"edgelock/sem/s/0", 8, "p1:z", 0x2a);
        s.txn_reply(
            RequestId(2),
            10,
            true,
            vec![
                json!({"response_put": {}}),
                range(vec![ours.clone()]),
                range(vec![ours]),
                range(vec![stray]),
                range(vec![]),
            ],
        );
        assert!(s.m.poll_transmit().is_none(), "no claim of a taken slot");
        let at = s.m.poll_timeout().unwrap();
        assert!(
            at >= s.now + NO_FREE_SLOT_RETRY_MS - 5 && at <= s.now + NO_FREE_SLOT_RETRY_MS,
            "re-check in {} ms",
            at - s.now
        );
        s.now = at;
        s.m.handle_timeout(at);
        let (_, check) = s.sent("/v3/kv/txn");
        assert_eq!(
            check["success"][1]["request_range"]["max_create_revision"], "10",
            "a re-check"
        );
    }

    #[test]
    fn a_try_behind_the_holders_is_not_acquired_and_leaves_no_key() {
        let (mut s, txn) = Script::permit(1, Wait::Try);
        let (key, value) = (our_key(&txn), our_value(&txn));
        let holder = kv(b"edgelock/sem/2a.1", 5, "p1:x", 0x2a);
        let ours = kv(&key, 10, &value, LEASE);
        s.txn_reply(
            RequestId(2),
            10,
            true,
            vec![
                json!({"response_put": {}}),
                range(vec![holder.clone(), ours.clone()]),
                range(vec![ours, holder]),
                range(vec![]),
                range(vec![]),
            ],
        );
        let (del, body) = s.sent("/v3/kv/txn");
        assert_eq!(
            body["success"][0]["request_delete_range"]["key"],
            b64::encode(&key)
        );
        s.txn_reply(del, 11, true, vec![]);
        assert_eq!(s.completed().unwrap(), Outcome::NotAcquired);
    }
}
