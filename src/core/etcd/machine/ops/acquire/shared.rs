//! Read-write locks: the reader side (`LockKind::Shared`). The writer side
//! is the exclusive lock unchanged, whose predecessor may now be a reader
//! key (the recipe is in the `core::etcd` module docs).
//!
//! Key layout under a name's prefix `P = <prefix>/<escaped name>/`:
//!
//! - writer keys are the exclusive lock's `P<lease hex>`, in the writers'
//!   range `[P, P"g")` (the semaphore's queue range: lease-hex keys only);
//! - reader keys `P"r/"<lease hex>.<n>`, one per acquisition (`n` is the
//!   acquire's operation id, so one client can hold several shared holds
//!   of a name at once; readers never queue locally), in `[P"r/", P"r0")`:
//!   outside the writers' range, so that "the newest writer created before
//!   me" is one range read, however many readers there are.
//!
//! A reader key's value is `r:<random>`: it marks the key shared for
//! inspect and resume, and (not being a permit's `p<limit>:…`) makes an
//! exclusive acquire treat it as an ordinary predecessor.

use serde_json::Value;

use super::super::super::EtcdMachine;
use super::super::Next;
use super::{permits, AcqPhase, Acquire, Ending};
use crate::core::etcd::gateway::{self as gw, TxnResponse};
use crate::core::{Holder, LockError, LockKind, LockStatus, Millis, OpId, Wait};

/// The value of a reader key.
pub(in crate::core::etcd::machine) fn shared_value(random: &str) -> Vec<u8> {
    format!("r:{random}").into_bytes()
}

/// Whether a key's value is a reader's.
pub(in crate::core::etcd::machine) fn is_shared_value(value: &[u8]) -> bool {
    value.starts_with(b"r:")
}

/// The reader key of acquisition `op` on `lease`.
pub(in crate::core::etcd::machine) fn reader_key(
    lock_prefix: &[u8],
    lease: i64,
    op: OpId,
) -> Vec<u8> {
    [lock_prefix, format!("r/{lease:x}.{}", op.0).as_bytes()].concat()
}

/// The readers' range `[P"r/", P"r0")`.
pub(in crate::core::etcd::machine) fn readers_range(lock_prefix: &[u8]) -> (Vec<u8>, Vec<u8>) {
    ([lock_prefix, b"r/"].concat(), [lock_prefix, b"r0"].concat())
}

/// The writers' range `[P, P"g")`: exclusive lock keys (and a semaphore's
/// queue keys, which a reader refuses to wait for).
pub(in crate::core::etcd::machine) fn writers_range(lock_prefix: &[u8]) -> (Vec<u8>, Vec<u8>) {
    (lock_prefix.to_vec(), permits::queue_end(lock_prefix))
}

/// Whether `suffix` (after the name's prefix) is a reader key of `lease`.
pub(in crate::core::etcd::machine) fn is_reader_suffix_of(suffix: &str, lease: i64) -> bool {
    suffix
        .strip_prefix("r/")
        .is_some_and(|rest| permits::is_queue_suffix_of(rest, lease))
}

/// Whether `key` is in the readers' range of `lock_prefix`.
pub(in crate::core::etcd::machine) fn is_reader_key(lock_prefix: &[u8], key: &[u8]) -> bool {
    key.strip_prefix(lock_prefix)
        .is_some_and(|rest| rest.starts_with(b"r/"))
}

/// The acquire txn of a reader (its key set) on `lease`.
pub(in crate::core::etcd::machine) fn shared_acquire_body(a: &Acquire, lease: i64) -> Value {
    let (w0, w1) = writers_range(&a.lock_prefix);
    gw::shared_acquire_txn(&a.key, &a.lock_prefix, (&w0, &w1), lease, &a.nonce)
}

/// The re-check txn of a waiting reader.
pub(in crate::core::etcd::machine) fn shared_check_body(a: &Acquire) -> Value {
    let (w0, w1) = writers_range(&a.lock_prefix);
    gw::shared_check_txn(&a.key, (&w0, &w1), a.my_rev)
}

impl Acquire {
    /// A shared acquire's txn (that put our key) or re-check answered
    /// (parsed, with a positive revision). A `Txn` whose compare failed is
    /// handled with the lock's: it learns our key's revision and re-checks.
    pub(in crate::core::etcd::machine) fn on_shared_txn(
        mut self,
        m: &mut EtcdMachine,
        now: Millis,
        op: OpId,
        phase: AcqPhase,
        txn: TxnResponse,
    ) -> Next {
        let revision = txn.header.revision;
        let (writer, oldest) = match phase {
            AcqPhase::Txn => {
                let (Some(w), Some(o)) = (txn.range(0), txn.range(1)) else {
                    return self.malformed(m, now, op, "shared acquire reply without its ranges");
                };
                self.my_rev = revision;
                (w.kvs.first().cloned(), o.kvs.first().cloned())
            }
            AcqPhase::Predecessor => {
                let (Some(own), Some(w)) = (txn.range(0), txn.range(1)) else {
                    return self.malformed(m, now, op, "shared re-check reply without its ranges");
                };
                if !own
                    .kvs
                    .iter()
                    .any(|kv| kv.key == self.key && kv.create_revision == self.my_rev)
                {
                    return self.restart(m, now, op);
                }
                (w.kvs.first().cloned(), None)
            }
            _ => return Next::keep(self, None),
        };
        // A semaphore's keys (oldest of the name, or in the writers' range)
        // carry its limit: its name is no read-write lock.
        let semaphore = [&writer, &oldest].into_iter().flatten().find_map(|kv| {
            match permits::key_kind(&kv.value) {
                permits::KeyKind::Permit(limit) => Some(limit),
                permits::KeyKind::Plain => None,
            }
        });
        if let Some(limit) = semaphore {
            let message = format!(
                "{:?} is a semaphore of {limit}, not a read-write lock",
                self.name
            );
            let ending = Ending::Error(LockError::invalid(message));
            return self.cleanup(m, now, op, None, ending);
        }
        // Only a writer created before us matters: readers ahead share.
        match writer.filter(|kv| kv.create_revision < self.my_rev) {
            None => self.grant(m, now, op, None),
            Some(_) if self.wait == Wait::Try => {
                self.cleanup(m, now, op, None, Ending::NotAcquired)
            }
            Some(w) => {
                // The newest writer before us: when it goes, every older
                // writer is gone too, or it is re-checked into the next one.
                self.phase = AcqPhase::Watch;
                Next::watch(self, gw::watch_delete(&w.key, revision.saturating_add(1)))
            }
        }
    }
}

/// What an inspect reports about a name that is no semaphore, from every key
/// of its name (oldest first): an exclusive holder, or the readers that
/// precede the oldest writer key; everyone else is queued, with kinds
/// (`is_leader` tells a leadership's value, see `election.rs`, whose value
/// forms build on this file's).
pub(in crate::core::etcd::machine) fn rw_status(
    name: &str,
    lock_prefix: &[u8],
    kvs: &[gw::KeyValue],
    is_leader: fn(&[u8]) -> bool,
) -> LockStatus {
    let text = |kv: &gw::KeyValue| String::from_utf8_lossy(&kv.key).into_owned();
    let kind = |kv: &gw::KeyValue| {
        if is_reader_key(lock_prefix, &kv.key) {
            LockKind::Shared
        } else if is_leader(&kv.value) {
            LockKind::Leader
        } else {
            LockKind::Exclusive
        }
    };
    let held = match kvs.first().map(kind) {
        Some(LockKind::Shared) => kvs
            .iter()
            .take_while(|kv| kind(kv) == LockKind::Shared)
            .count(),
        Some(_) => 1,
        None => 0,
    };
    let holders: Vec<Holder> = kvs[..held]
        .iter()
        .map(|kv| Holder {
            id: text(kv),
            kind: kind(kv),
            slot: None,
            fencing_token: Some(kv.create_revision.max(0) as u64),
        })
        .collect();
    let queued: Vec<Holder> = kvs[held..]
        .iter()
        .map(|kv| Holder {
            id: text(kv),
            kind: kind(kv),
            slot: None,
            fencing_token: None,
        })
        .collect();
    LockStatus {
        name: name.to_string(),
        held: !holders.is_empty(),
        holder: holders.first().map(|h| h.id.clone()),
        fencing_token: holders.first().and_then(|h| h.fencing_token),
        remaining_ms: None,
        waiters: queued.iter().map(|h| h.id.clone()).collect(),
        limit: None,
        holders,
        queued,
    }
}

#[cfg(test)]
mod tests {
    use super::super::permits;
    use super::{
        is_reader_key, is_reader_suffix_of, is_shared_value, reader_key, readers_range, rw_status,
        shared_value, writers_range,
    };
    use crate::core::b64;
    use crate::core::etcd::gateway as gw;
    use crate::core::etcd::EtcdConfig;
    use crate::core::etcd::EtcdMachine;
    use crate::core::{
        AcquireOptions, BackendKind, Event, Input, LockHandle, LockMachine, Operation, Outcome,
        RequestId, SeededEntropy, Transmit,
    };
    use crate::core::{Holder, LockKind, OpId, Wait};
    use serde_json::json;

    #[test]
    fn reader_keys_are_outside_the_writers_range() {
        let p = b"el/rw/";
        let r = reader_key(p, i64::MAX, OpId(u64::MAX));
        let (w0, w1) = writers_range(p);
        let (r0, r1) = readers_range(p);
        assert!(r >= r0 && r < r1, "{}", String::from_utf8_lossy(&r));
        assert!(
            !(r >= w0 && r < w1),
            "a reader key must not look like a writer's"
        );
        // A writer key (lease hex) and a permit's slot key are not readers'.
        assert!(
            is_reader_key(p, &r)
                && !is_reader_key(p, b"el/rw/7fffffffffffffff")
                && !is_reader_key(p, b"el/rw/s/0")
        );
        assert!(is_reader_suffix_of("r/1f.3", 0x1f));
        assert!(
            !is_reader_suffix_of("1f.3", 0x1f)
                && !is_reader_suffix_of("r/2f.3", 0x1f)
                && !is_reader_suffix_of("r/1f", 0x1f)
        );
        // A reader's value is neither a permit's (an exclusive acquire would
        // refuse the name) nor taken for one.
        assert_eq!(
            permits::key_kind(&shared_value("ab")),
            permits::KeyKind::Plain
        );
        assert!(
            is_shared_value(&shared_value("ab"))
                && !is_shared_value(b"0123abcd")
                && !is_shared_value(b"p3:x")
        );
    }

    /// No value is a leadership's here (elections are `election_tests.rs`'s).
    const NO_LEADER: fn(&[u8]) -> bool = |_| false;

    fn kv(key: &[u8], rev: i64, value: &[u8]) -> gw::KeyValue {
        gw::KeyValue {
            key: key.to_vec(),
            create_revision: rev,
            mod_revision: rev,
            lease: 0x2a,
            value: value.to_vec(),
        }
    }

    #[test]
    fn inspect_lists_the_readers_ahead_of_the_oldest_writer_as_holders() {
        let p = b"el/rw/";
        let (r1, r2, w, r3) = (
            kv(b"el/rw/r/2a.1", 5, b"r:x"),
            kv(b"el/rw/r/2b.4", 6, b"r:y"),
            kv(b"el/rw/3c", 7, b"0123456789abcdef"),
            kv(b"el/rw/r/2a.9", 8, b"r:z"),
        );
        let st = rw_status("rw", p, &[r1.clone(), r2, w.clone(), r3], NO_LEADER);
        let kinds = |hs: &[Holder]| {
            hs.iter()
                .map(|h| (h.id.clone(), h.kind, h.fencing_token))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            kinds(&st.holders),
            vec![
                ("el/rw/r/2a.1".into(), LockKind::Shared, Some(5)),
                ("el/rw/r/2b.4".into(), LockKind::Shared, Some(6))
            ]
        );
        assert_eq!(
            kinds(&st.queued),
            vec![
                ("el/rw/3c".into(), LockKind::Exclusive, None),
                ("el/rw/r/2a.9".into(), LockKind::Shared, None)
            ]
        );
        assert!(st.held && st.fencing_token == Some(5) && st.waiters.len() == 2);
        // A writer first holds alone; the reader behind it waits.
        let st = rw_status("rw", p, &[w, r1], NO_LEADER);
        assert_eq!(
            kinds(&st.holders),
            vec![("el/rw/3c".into(), LockKind::Exclusive, Some(7))]
        );
        assert_eq!(
            kinds(&st.queued),
            vec![("el/rw/r/2a.1".into(), LockKind::Shared, None)]
        );
        assert!(!rw_status("rw", p, &[], NO_LEADER).held);
    }

    // ---- the machine, scripted: requests out, hand-written etcd replies in ----

    use crate::core::etcd::machine::scripted::{range, Script};
    use serde_json::Value;

    fn jkv(key: &[u8], rev: i64, value: &str) -> Value {
        json!({ "key": b64::encode(key), "create_revision": rev.to_string(), "mod_revision": rev.to_string(), "value": b64::encode(value.as_bytes()), "lease": "42" })
    }

    fn unb64(v: &Value) -> Vec<u8> {
        b64::decode(v.as_str().unwrap_or_default().as_bytes()).unwrap_or_default()
    }

    impl Script {
        /// A machine whose acquire of "rw" (`kind`, `wait`) has sent its txn
        /// on session lease `LEASE`; returns it, the txn's id and body.
        fn rw(kind: LockKind, wait: Wait) -> (Script, RequestId, Value) {
            Script::acquiring("rw", kind, wait)
        }
    }

    fn put_of(txn: &Value) -> (Vec<u8>, String) {
        let put = &txn["success"][0]["request_put"];
        (
            unb64(&put["key"]),
            String::from_utf8(unb64(&put["value"])).unwrap(),
        )
    }

    const PUT: fn() -> Value = || json!({ "response_put": {} });

    #[test]
    fn a_reader_behind_a_writer_watches_that_writer_then_holds() {
        let (mut s, id, txn) = Script::rw(LockKind::Shared, Wait::Forever);
        let (key, value) = put_of(&txn);
        assert!(
            key.starts_with(b"edgelock/rw/r/1f."),
            "{}",
            String::from_utf8_lossy(&key)
        );
        assert!(value.starts_with("r:"), "{value}");
        // An older reader holds; a writer waits behind it; we come last.
        let (reader, writer) = (
            jkv(b"edgelock/rw/r/2a.1", 5, "r:x"),
            jkv(b"edgelock/rw/3c", 7, "nonce"),
        );
        s.txn_reply(
            id,
            10,
            true,
            vec![PUT(), range(vec![writer]), range(vec![reader])],
        );
        let (watch_id, watch) = s.sent("/v3/watch");
        assert_eq!(
            watch["create_request"],
            json!({ "key": b64::encode(b"edgelock/rw/3c"), "start_revision": "11", "filters": ["NOPUT"] })
        );
        s.nothing_completed();
        // The writer's DELETE wakes us: a re-check of writers created before us.
        let del = br#"{"result":{"header":{"revision":"12"},"events":[{"type":"DELETE","kv":{"key":"ZWRnZWxvY2svcncvM2M=","mod_revision":"12"}}]}}"#;
        s.m.handle_input(
            s.now,
            Input::Chunk {
                id: watch_id,
                data: del.to_vec(),
            },
        );
        let (check, body) = s.sent("/v3/kv/txn");
        assert_eq!(unb64(&body["success"][0]["request_range"]["key"]), key);
        assert_eq!(
            body["success"][1]["request_range"]["max_create_revision"],
            "9"
        );
        // The older reader still holds: it does not matter to us.
        s.txn_reply(
            check,
            12,
            true,
            vec![range(vec![jkv(&key, 10, &value)]), range(vec![])],
        );
        let Ok(Outcome::Acquired(info)) = s.completed() else {
            panic!("not acquired")
        };
        assert_eq!(
            (
                info.kind(),
                info.fencing_token,
                info.handle.revision,
                info.slot()
            ),
            (LockKind::Shared, 10, 10, None)
        );
        assert_eq!(info.handle.key, String::from_utf8_lossy(&key));
    }

    #[test]
    fn a_reader_behind_readers_holds_at_once() {
        let (mut s, id, txn) = Script::rw(LockKind::Shared, Wait::Try);
        let (key, _) = put_of(&txn);
        s.txn_reply(
            id,
            10,
            true,
            vec![
                PUT(),
                range(vec![]),
                range(vec![jkv(b"edgelock/rw/r/2a.1", 5, "r:x")]),
            ],
        );
        let Ok(Outcome::Acquired(info)) = s.completed() else {
            panic!("not acquired")
        };
        assert_eq!((info.kind(), info.fencing_token), (LockKind::Shared, 10));
        // A second shared hold of the same client does not queue locally.
        s.m.start(
            s.now,
            Operation::Acquire {
                name: "rw".into(),
                kind: LockKind::Shared,
                options: AcquireOptions {
                    wait: Wait::Try,
                    ttl_ms: None,
                },
            },
        )
        .unwrap();
        let (_, txn2) = s.sent("/v3/kv/txn");
        assert_ne!(put_of(&txn2).0, key, "a key of its own");
    }

    #[test]
    fn a_writer_behind_readers_watches_its_predecessor() {
        let (mut s, id, txn) = Script::rw(LockKind::Exclusive, Wait::Forever);
        let (key, value) = put_of(&txn);
        assert_eq!(key, b"edgelock/rw/1f");
        let (r1, r2) = (
            jkv(b"edgelock/rw/r/2a.1", 5, "r:x"),
            jkv(b"edgelock/rw/r/2b.2", 7, "r:y"),
        );
        // Newest two (ours, the reader just before), and the oldest: a reader, no semaphore.
        s.txn_reply(
            id,
            10,
            true,
            vec![
                PUT(),
                range(vec![jkv(&key, 10, &value), r2]),
                range(vec![r1]),
            ],
        );
        let (_, watch) = s.sent("/v3/watch");
        assert_eq!(
            watch["create_request"]["key"],
            b64::encode(b"edgelock/rw/r/2b.2")
        );
        s.nothing_completed();
    }

    #[test]
    fn try_variants_behind_the_other_kind_are_not_acquired_and_leave_no_key() {
        // A shared try behind a writer.
        let (mut s, id, txn) = Script::rw(LockKind::Shared, Wait::Try);
        let (key, _) = put_of(&txn);
        let writer = jkv(b"edgelock/rw/3c", 7, "nonce");
        s.txn_reply(
            id,
            10,
            true,
            vec![PUT(), range(vec![writer.clone()]), range(vec![writer])],
        );
        let (del, body) = s.sent("/v3/kv/txn");
        assert_eq!(
            (
                unb64(&body["success"][0]["request_delete_range"]["key"]),
                &body["compare"][0]["create_revision"]
            ),
            (key, &json!("10"))
        );
        s.txn_reply(del, 11, true, vec![]);
        assert_eq!(s.completed().unwrap(), Outcome::NotAcquired);
        assert_eq!(s.m.live_count(), 0);

        // An exclusive try behind a reader.
        let (mut s, id, txn) = Script::rw(LockKind::Exclusive, Wait::Try);
        let (key, value) = put_of(&txn);
        let reader = jkv(b"edgelock/rw/r/2a.1", 5, "r:x");
        s.txn_reply(
            id,
            10,
            true,
            vec![
                PUT(),
                range(vec![jkv(&key, 10, &value), reader.clone()]),
                range(vec![reader]),
            ],
        );
        let (del, body) = s.sent("/v3/kv/txn");
        assert_eq!(
            unb64(&body["success"][0]["request_delete_range"]["key"]),
            key
        );
        s.txn_reply(del, 11, true, vec![]);
        assert_eq!(s.completed().unwrap(), Outcome::NotAcquired);
    }

    #[test]
    fn shared_and_permits_do_not_mix() {
        // A shared acquire of a semaphore's name.
        let (mut s, id, txn) = Script::rw(LockKind::Shared, Wait::Forever);
        let (key, _) = put_of(&txn);
        let permit = jkv(b"edgelock/rw/2a.1", 5, "p3:x");
        s.txn_reply(
            id,
            10,
            true,
            vec![PUT(), range(vec![permit.clone()]), range(vec![permit])],
        );
        let (del, body) = s.sent("/v3/kv/txn");
        assert_eq!(
            unb64(&body["success"][0]["request_delete_range"]["key"]),
            key
        );
        s.txn_reply(del, 11, true, vec![]);
        let e = s.completed().unwrap_err();
        assert_eq!(e.code(), "INVALID_ARGUMENT");
        assert!(
            e.to_string()
                .contains("\"rw\" is a semaphore of 3, not a read-write lock"),
            "{e}"
        );

        // A permit acquire of a name with a reader key.
        let (mut s, id, txn) = Script::rw(LockKind::Permits { limit: 3 }, Wait::Forever);
        let (key, value) = put_of(&txn);
        let ours = jkv(&key, 10, &value);
        s.txn_reply(
            id,
            10,
            true,
            vec![
                PUT(),
                range(vec![ours.clone()]),
                range(vec![ours]),
                range(vec![]),
                range(vec![jkv(b"edgelock/rw/r/2a.1", 5, "r:x")]),
            ],
        );
        let (del, body) = s.sent("/v3/kv/txn");
        assert_eq!(
            unb64(&body["success"][0]["request_delete_range"]["key"]),
            key
        );
        s.txn_reply(del, 11, true, vec![]);
        let e = s.completed().unwrap_err();
        assert_eq!(e.code(), "INVALID_ARGUMENT");
        assert!(
            e.to_string()
                .contains("\"rw\" is a read-write lock, not a semaphore of 3"),
            "{e}"
        );
    }

    #[test]
    fn a_shared_handle_is_resumed_only_with_a_reader_key_and_value() {
        let mut m = EtcdMachine::new(
            EtcdConfig::new(vec!["http://127.0.0.1:2379".into()]),
            Box::new(SeededEntropy::new(3)),
        )
        .unwrap();
        let handle = |key: &str, kind| LockHandle {
            v: 1,
            backend: BackendKind::Etcd,
            name: "rw".into(),
            key: key.into(),
            owner: "31".into(),
            fencing_token: 10,
            revision: 10,
            kind,
            slot: None,
        };
        // A writer's key is no reader key (and the other way round).
        assert_eq!(
            m.start(
                0,
                Operation::Resume {
                    handle: handle("edgelock/rw/1f", LockKind::Shared)
                }
            )
            .unwrap_err()
            .code(),
            "INVALID_ARGUMENT"
        );
        assert_eq!(
            m.start(
                0,
                Operation::Resume {
                    handle: handle("edgelock/rw/r/1f.3", LockKind::Exclusive)
                }
            )
            .unwrap_err()
            .code(),
            "INVALID_ARGUMENT"
        );
        m.start(
            0,
            Operation::Resume {
                handle: handle("edgelock/rw/r/1f.3", LockKind::Shared),
            },
        )
        .unwrap();
        let mut s = Script { m, now: 0 };
        let (read, _) = s.sent("/v3/kv/txn");
        // The key exists on the lease, but its value is not a reader's.
        let found = json!({ "key": b64::encode(b"edgelock/rw/r/1f.3"), "create_revision": "10", "mod_revision": "10", "value": b64::encode(b"nonce"), "lease": "31" });
        s.txn_reply(read, 12, true, vec![range(vec![found])]);
        assert_eq!(s.completed().unwrap_err().code(), "LOST");
    }

    use proptest::prelude::*;

    fn arb_kv() -> impl Strategy<Value = Value> {
        let keys = prop_oneof![
            Just("edgelock/rw/1f"),
            Just("edgelock/rw/3c"),
            Just("edgelock/rw/r/1f.1"),
            Just("edgelock/rw/r/2a.1"),
            Just("edgelock/rw/s/0"),
            Just("x")
        ];
        let values = prop_oneof![
            Just("r:x"),
            Just("p3:x"),
            Just("nonce"),
            Just(""),
            Just("p0:"),
            Just("p999999:x")
        ];
        (
            keys,
            any::<i64>(),
            prop_oneof![Just(-1i64), Just(0), 1i64..40],
            values,
        )
            .prop_map(|(k, r1, r2, v)| {
                let rev = if r1 % 3 == 0 { r1 } else { r2 };
                jkv(k.as_bytes(), rev, v)
            })
    }

    fn arb_reply() -> impl Strategy<Value = Value> {
        let op = prop_oneof![
            3 => prop::collection::vec(arb_kv(), 0..3).prop_map(range),
            1 => Just(json!({ "response_put": {} })),
            1 => Just(json!({})),
            1 => Just(json!({ "response_range": null })),
        ];
        (prop_oneof![Just(-5i64), Just(0), 1i64..40, any::<i64>()], any::<bool>(), prop::collection::vec(op, 0..4))
            .prop_map(|(rev, ok, responses)| json!({ "header": { "revision": rev.to_string() }, "succeeded": ok, "responses": responses }))
    }

    proptest! {
        /// Hostile, near-shape replies to a shared acquire's txn and its
        /// re-checks: never a panic, and a grant only with a positive token
        /// equal to its key's revision.
        #[test]
        fn hostile_replies_to_a_shared_acquire_never_panic(replies in prop::collection::vec(arb_reply(), 1..5), wait in prop_oneof![Just(Wait::Try), Just(Wait::Forever)]) {
            let (mut s, mut id, _) = Script::rw(LockKind::Shared, wait);
            for reply in replies {
                s.reply(id, reply);
                let mut next = None;
                while let Some(t) = s.m.poll_transmit() {
                    if let Transmit::Send(r) = t {
                        if r.stream {
                            // Whatever it watches goes away: re-check.
                            s.m.handle_input(s.now, Input::Chunk { id: r.id, data: br#"{"result":{"header":{"revision":"41"},"events":[{"type":"DELETE","kv":{}}]}}"#.to_vec() });
                        } else {
                            next = Some(r.id);
                        }
                    }
                }
                while let Some(e) = s.m.poll_event() {
                    if let Event::Completed { result: Ok(Outcome::Acquired(info)), .. } = e {
                        prop_assert!(info.fencing_token > 0 && info.fencing_token == info.handle.revision);
                        prop_assert_eq!(info.kind(), LockKind::Shared);
                    }
                }
                match next {
                    Some(n) => id = n,
                    None => break,
                }
            }
        }
    }
}
