//! Reentrant holds on the scripted machine (requests out, hand-written etcd
//! replies in): the count key, the requests per operation, hostile replies.

use crate::core::{
    b64, AcquireOptions, BackendKind, Event, Input, LockHandle, LockInfo, LockKind, LockMachine,
    LockMachineExt, Operation, Outcome, RequestId, Transmit, Wait,
};

use super::scripted::{range, Script, LEASE};
use proptest::prelude::*;
use serde_json::{json, Value};

const KEY: &[u8] = b"edgelock/r/1f";
const COUNT: &[u8] = b"edgelock/r%holds";

fn jkv(key: &[u8], rev: i64, modr: i64, value: &[u8]) -> Value {
    json!({ "key": b64::encode(key), "create_revision": rev.to_string(),
            "mod_revision": modr.to_string(), "value": b64::encode(value), "lease": LEASE.to_string() })
}

fn unb64(v: &Value) -> Vec<u8> {
    b64::decode(v.as_str().unwrap_or_default().as_bytes()).unwrap_or_default()
}

/// A failed count compare's reads: the lock key (rev 7, if `held`) and the count.
fn reads(held: bool, count: Option<(&[u8], i64)>) -> Vec<Value> {
    vec![
        range(if held {
            vec![jkv(KEY, 7, 7, b"n")]
        } else {
            vec![]
        }),
        range(count.map_or(vec![], |(v, m)| vec![jkv(COUNT, m, m, v)])),
    ]
}

fn no_request(s: &mut Script) {
    while let Some(t) = s.m.poll_transmit() {
        assert!(
            matches!(t, Transmit::Cancel(_)),
            "unexpected request: {t:?}"
        );
    }
}

/// "r" held exclusively at revision 7 on [`LEASE`].
fn holding() -> (Script, LockInfo) {
    let (mut s, id, _txn) = Script::acquiring("r", LockKind::Exclusive, Wait::Forever);
    s.txn_reply(
        id,
        7,
        true,
        vec![
            json!({ "response_put": {} }),
            range(vec![jkv(KEY, 7, 7, b"n")]),
            range(vec![jkv(KEY, 7, 7, b"n")]),
        ],
    );
    let info = s.completed().unwrap().into_acquired().unwrap().unwrap();
    (s, info)
}

/// Starts a re-entry through `handle` and confirms its lease: the count txn's id and body.
fn reenter_sent(s: &mut Script, handle: &LockHandle) -> (RequestId, Value) {
    s.m.start(
        s.now,
        Operation::Reenter {
            handle: handle.clone(),
        },
    )
    .unwrap();
    let (ka, _) = s.sent("/v3/lease/keepalive");
    s.reply(
        ka,
        json!({ "result": { "ID": LEASE.to_string(), "TTL": "10" } }),
    );
    s.sent("/v3/kv/txn")
}

fn stored_count(txn: &Value) -> String {
    let put = &txn["success"][0]["request_put"];
    assert_eq!(unb64(&put["key"]), COUNT);
    assert_eq!(put["lease"], LEASE.to_string(), "on the lock's lease");
    String::from_utf8(unb64(&put["value"])).unwrap()
}

fn released(s: &mut Script) -> bool {
    s.completed().unwrap().into_released().unwrap()
}

#[test]
fn a_plain_release_is_still_one_request() {
    let (mut s, info) = holding();
    s.m.release(s.now, info.id).unwrap();
    let (id, txn) = s.sent("/v3/kv/txn");
    // Deleted at once unless a count exists: no extra request.
    assert_eq!(unb64(&txn["compare"][1]["key"]), COUNT);
    assert_eq!(txn["compare"][1]["create_revision"], "0");
    assert_eq!(
        unb64(&txn["success"][0]["request_delete_range"]["key"]),
        KEY
    );
    s.txn_reply(id, 8, true, vec![]);
    assert!(released(&mut s));
    no_request(&mut s);
    assert_eq!(s.m.live_count(), 0);
}

#[test]
fn holds_are_counted_and_only_the_last_release_deletes() {
    let (mut s, outer) = holding();
    // Re-enter: a keepalive of the lock's lease, then one txn putting 2.
    let (id, txn) = reenter_sent(&mut s, &outer.handle);
    assert_eq!(unb64(&txn["compare"][0]["key"]), KEY);
    assert_eq!(txn["compare"][0]["create_revision"], "7");
    assert_eq!(txn["compare"][1]["create_revision"], "0");
    let two = stored_count(&txn);
    assert!(two.starts_with("7:2:"), "{two}");
    s.txn_reply(id, 9, true, vec![json!({ "response_put": {} })]);
    let inner = s.completed().unwrap().into_acquired().unwrap().unwrap();
    assert_ne!(inner.id, outer.id);
    assert_eq!(inner.fencing_token, 7);
    assert_eq!(inner.handle, outer.handle);

    // A third hold, from the count read back (another holder raced us).
    let (id, _) = reenter_sent(&mut s, &outer.handle);
    s.txn_reply(id, 10, false, reads(true, Some((two.as_bytes(), 9))));
    let (id, txn) = s.sent("/v3/kv/txn");
    assert_eq!(txn["compare"][1]["target"], "MOD");
    assert_eq!(txn["compare"][1]["mod_revision"], "9");
    let three = stored_count(&txn);
    assert!(three.starts_with("7:3:"), "{three}");
    s.txn_reply(id, 11, true, vec![json!({ "response_put": {} })]);
    let third = s.completed().unwrap().into_acquired().unwrap().unwrap();

    // Outer first: a decrement, the lock key stays.
    s.m.release(s.now, outer.id).unwrap();
    let (id, _) = s.sent("/v3/kv/txn");
    s.txn_reply(id, 12, false, reads(true, Some((three.as_bytes(), 11))));
    let (id, txn) = s.sent("/v3/kv/txn");
    assert!(stored_count(&txn).starts_with("7:2:"));
    s.txn_reply(id, 13, true, vec![json!({ "response_put": {} })]);
    assert!(released(&mut s));
    // The name stays claimed locally: a local try-acquire is refused.
    s.m.start(
        s.now,
        Operation::Acquire {
            name: "r".into(),
            kind: LockKind::Exclusive,
            options: AcquireOptions {
                wait: Wait::Try,
                ttl_ms: None,
            },
        },
    )
    .unwrap();
    assert_eq!(s.completed().unwrap(), Outcome::NotAcquired);

    s.m.release(s.now, third.id).unwrap();
    let (id, _) = s.sent("/v3/kv/txn");
    s.txn_reply(id, 14, false, reads(true, Some((b"7:2:aa", 13))));
    let (id, txn) = s.sent("/v3/kv/txn");
    let one = stored_count(&txn);
    assert!(
        one.starts_with("7:1:"),
        "a decrement never deletes the count: {one}"
    );
    s.txn_reply(id, 15, true, vec![json!({ "response_put": {} })]);
    assert!(released(&mut s));

    // The last hold deletes the lock key and the count key together.
    s.m.release(s.now, inner.id).unwrap();
    let (id, _) = s.sent("/v3/kv/txn");
    s.txn_reply(id, 16, false, reads(true, Some((one.as_bytes(), 15))));
    let (id, txn) = s.sent("/v3/kv/txn");
    assert_eq!(txn["compare"][1]["mod_revision"], "15");
    let deleted: Vec<Vec<u8>> = txn["success"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| unb64(&o["request_delete_range"]["key"]))
        .collect();
    assert_eq!(deleted, vec![KEY.to_vec(), COUNT.to_vec()]);
    s.txn_reply(id, 17, true, vec![]);
    assert!(released(&mut s));
    assert_eq!(s.m.live_count(), 0);
    // The name is free locally again.
    s.m.start(
        s.now,
        Operation::Acquire {
            name: "r".into(),
            kind: LockKind::Exclusive,
            options: AcquireOptions::default(),
        },
    )
    .unwrap();
    s.sent("/v3/kv/txn");
}

#[test]
fn a_gone_hold_is_lost_and_nothing_is_counted() {
    let (mut s, outer) = holding();
    let (id, _) = reenter_sent(&mut s, &outer.handle);
    s.txn_reply(id, 9, false, reads(false, None));
    let e = s.completed().unwrap_err();
    assert_eq!(e.code(), "LOST");
    no_request(&mut s);
    // A lease that is gone: LOST before any txn.
    s.m.start(
        s.now,
        Operation::Reenter {
            handle: outer.handle.clone(),
        },
    )
    .unwrap();
    let (ka, _) = s.sent("/v3/lease/keepalive");
    s.reply(
        ka,
        json!({ "result": { "ID": LEASE.to_string(), "TTL": "0" } }),
    );
    assert_eq!(s.completed().unwrap_err().code(), "LOST");
    no_request(&mut s);
}

#[test]
fn only_exclusive_handles_reenter_and_nothing_is_sent_otherwise() {
    let (mut s, outer) = holding();
    for kind in [
        LockKind::Shared,
        LockKind::Permits { limit: 3 },
        LockKind::Leader,
    ] {
        let mut handle = outer.handle.clone();
        handle.kind = kind;
        let e = s.m.start(s.now, Operation::Reenter { handle }).unwrap_err();
        assert_eq!(e.code(), "INVALID_ARGUMENT", "{kind:?}");
        assert!(e.to_string().contains("only an exclusive lock"), "{e}");
    }
    let mut other = outer.handle.clone();
    other.key = "edgelock/other/1f".into();
    assert_eq!(
        s.m.start(s.now, Operation::Reenter { handle: other })
            .unwrap_err()
            .code(),
        "INVALID_ARGUMENT"
    );
    no_request(&mut s);
}

#[test]
fn a_retried_decrement_that_applied_is_not_applied_twice() {
    let (mut s, outer) = holding();
    let (id, _) = reenter_sent(&mut s, &outer.handle);
    s.txn_reply(id, 9, true, vec![]);
    let _inner = s.completed().unwrap().into_acquired().unwrap().unwrap();
    s.m.release(s.now, outer.id).unwrap();
    let (id, _) = s.sent("/v3/kv/txn");
    s.txn_reply(id, 10, false, reads(true, Some((b"7:2:zz", 9))));
    let (id, txn) = s.sent("/v3/kv/txn");
    let mine = stored_count(&txn);
    // Our write applied, but its answer said the compare failed (a retry
    // on another endpoint): the count carries our nonce, so we are done.
    s.txn_reply(id, 11, false, reads(true, Some((mine.as_bytes(), 10))));
    assert!(released(&mut s));
    no_request(&mut s);
}

#[test]
fn a_count_of_another_incarnation_counts_as_one_hold() {
    let (mut s, outer) = holding();
    s.m.release(s.now, outer.id).unwrap();
    let (id, _) = s.sent("/v3/kv/txn");
    s.txn_reply(id, 9, false, reads(true, Some((b"3:5:old", 4))));
    let (id, txn) = s.sent("/v3/kv/txn");
    assert!(txn["success"][1]["request_delete_range"].is_object());
    s.txn_reply(id, 10, true, vec![]);
    assert!(released(&mut s));
}

#[test]
fn hostile_count_replies_never_panic() {
    let hostile: Vec<Vec<Value>> = vec![
        vec![],
        vec![range(vec![])],
        vec![json!({ "response_put": {} }), json!(null)],
        reads(true, Some((b"", 3))),
        reads(true, Some((b"7", 3))),
        reads(true, Some((b"7:0:x", 3))),
        reads(true, Some((b"7:-1:x", 3))),
        reads(true, Some((b"7:4294967295:x", 3))),
        reads(true, Some((b"99999999999999999999:2:x", 3))),
        reads(true, Some((&[0xff, 0xfe, b':'], 3))),
    ];
    for body in hostile {
        // A re-entry.
        let (mut s, outer) = holding();
        let (id, _) = reenter_sent(&mut s, &outer.handle);
        for _ in 0..20 {
            s.txn_reply(id, 9, false, body.clone());
            if let Some(Event::Completed { result, .. }) = s.m.poll_event() {
                if let Err(e) = result {
                    assert!(!e.to_string().contains(&LEASE.to_string()), "{e}");
                }
                break;
            }
            let Some(Transmit::Send(r)) = s.m.poll_transmit() else {
                break;
            };
            s.txn_reply(r.id, 9, false, body.clone());
        }
        // A release.
        let (mut s, outer) = holding();
        s.m.release(s.now, outer.id).unwrap();
        let (mut id, _) = s.sent("/v3/kv/txn");
        for _ in 0..20 {
            s.txn_reply(id, 9, false, body.clone());
            if let Some(Event::Completed { .. }) = s.m.poll_event() {
                break;
            }
            match s.m.poll_transmit() {
                Some(Transmit::Send(r)) => id = r.id,
                _ => break,
            }
        }
        // A status the gateway refuses.
        let (mut s, outer) = holding();
        s.m.release(s.now, outer.id).unwrap();
        let (id, _) = s.sent("/v3/kv/txn");
        s.now += 5;
        s.m.handle_input(
            s.now,
            Input::Response {
                id,
                status: 200,
                body: b"{not json".to_vec(),
            },
        );
    }
}

#[test]
fn a_count_that_keeps_changing_gives_up() {
    let (mut s, outer) = holding();
    s.m.release(s.now, outer.id).unwrap();
    let (mut id, _) = s.sent("/v3/kv/txn");
    for m in 0..40 {
        s.txn_reply(id, 9, false, reads(true, Some((b"7:3:other", 100 + m))));
        if let Some(Event::Completed { result, .. }) = s.m.poll_event() {
            let e = result.unwrap_err();
            assert_eq!(e.code(), "BACKEND", "{e}");
            assert!(e.to_string().contains("hold count changed"), "{e}");
            return;
        }
        id = s.sent("/v3/kv/txn").0;
    }
    panic!("never gave up");
}

proptest! {
    /// The count key lies in no name's range and is no other name's.
    #[test]
    fn count_keys_never_fall_in_a_names_range(a in "[a-c/%2F5]{0,6}", b in "[a-c/%2F5]{0,6}") {
        let s = Script::fresh();
        let (ca, cb) = (s.m.count_key(&a), s.m.count_key(&b));
        prop_assert!(!ca.starts_with(&s.m.lock_prefix(&b)));
        prop_assert_eq!(ca == cb, a == b);
    }
}

/// A client that re-entered another owner's lock renews that owner's lease
/// but never revokes it: closing (or releasing) ends only its own holds.
#[test]
fn closing_never_revokes_a_borrowed_lease() {
    let handle = LockHandle {
        v: 1,
        backend: BackendKind::Etcd,
        name: "r".into(),
        key: "edgelock/r/2a".into(),
        owner: "42".into(),
        fencing_token: 7,
        revision: 7,
        kind: LockKind::Exclusive,
        slot: None,
    };
    for pending in [false, true] {
        let mut s = Script::fresh();
        s.m.start(
            s.now,
            Operation::Reenter {
                handle: handle.clone(),
            },
        )
        .unwrap();
        let (ka, body) = s.sent("/v3/lease/keepalive");
        assert_eq!(body["ID"], "42");
        if !pending {
            s.reply(ka, json!({ "result": { "ID": "42", "TTL": "10" } }));
            let (id, _) = s.sent("/v3/kv/txn");
            s.txn_reply(id, 9, true, vec![]);
            let inner = s.completed().unwrap().into_acquired().unwrap().unwrap();
            assert_eq!(inner.handle.owner, "42");
        }
        s.m.close(s.now);
        while let Some(t) = s.m.poll_transmit() {
            if let Transmit::Send(r) = t {
                assert!(
                    !r.target.to_string().ends_with("/v3/lease/revoke"),
                    "revoked the owner's lease (pending: {pending})"
                );
            }
        }
    }
}
