//! `AcquireAll` as one txn on the scripted machine (requests out,
//! hand-written etcd replies in).
use super::ORPHAN_RETRY_MS;
use crate::core::{
    b64, AcquireOptions, Input, LockError, LockKind, LockMachine, OpId, Operation, Outcome,
    RequestId, Transmit, TransportError, Wait,
};

use crate::core::etcd::gateway as gw;

use super::scripted::{range, Script, LEASE};
use serde_json::{json, Value};

fn unb64(v: &Value) -> Vec<u8> {
    b64::decode(v.as_str().unwrap_or_default().as_bytes()).unwrap_or_default()
}

fn jkv(key: &[u8], rev: i64, value: &[u8]) -> Value {
    json!({ "key": b64::encode(key), "create_revision": rev.to_string(),
            "mod_revision": rev.to_string(), "value": b64::encode(value),
            "lease": LEASE.to_string() })
}

fn all(names: &[&str], wait: Wait) -> Operation {
    Operation::AcquireAll {
        names: names.iter().map(|n| n.to_string()).collect(),
        options: AcquireOptions { wait, ttl_ms: None },
    }
}

/// A fresh machine whose `AcquireAll` of `names` has sent its one txn on
/// session lease [`LEASE`]: the machine, the op, the txn's id and body.
fn acquiring_set(names: &[&str]) -> (Script, OpId, RequestId, Value) {
    let mut s = Script::fresh();
    let op = s.m.start(s.now, all(names, Wait::Forever)).unwrap();
    let grant = s.sent("/v3/lease/grant");
    s.reply(grant.0, json!({ "ID": LEASE.to_string(), "TTL": "10" }));
    let (id, txn) = s.sent("/v3/kv/txn");
    nothing_sent(&mut s);
    (s, op, id, txn)
}

/// The (key, value) each put of the txn's success branch stores.
fn puts(txn: &Value) -> Vec<(Vec<u8>, Vec<u8>)> {
    txn["success"]
        .as_array()
        .unwrap()
        .iter()
        .map(|op| {
            let put = &op["request_put"];
            assert_eq!(
                put["lease"],
                json!(LEASE.to_string()),
                "on the session lease"
            );
            (unb64(&put["key"]), unb64(&put["value"]))
        })
        .collect()
}

fn nothing_sent(s: &mut Script) {
    while let Some(t) = s.m.poll_transmit() {
        assert!(
            matches!(t, Transmit::Cancel(_)),
            "unexpected request: {t:?}"
        );
    }
}

/// Every request sent now: (path, body).
fn all_sent(s: &mut Script) -> Vec<(RequestId, String, Value)> {
    std::iter::from_fn(|| s.m.poll_transmit())
        .filter_map(|t| match t {
            Transmit::Send(r) => Some((
                r.id,
                r.target.to_string(),
                serde_json::from_slice(&r.body).unwrap(),
            )),
            t @ (Transmit::Open(_) | Transmit::Write { .. }) => {
                panic!("an HTTP machine opened a byte stream: {t:?}")
            }
            Transmit::Cancel(_) => None,
        })
        .collect()
}

/// Answers the set's txn: it did not apply, nothing of ours exists.
fn refuse(s: &mut Script, id: RequestId, n: usize) {
    s.txn_reply(id, 30, false, (0..n).map(|_| range(vec![])).collect());
}

#[test]
fn a_free_set_is_one_txn_comparing_every_names_range_and_each_lock_is_ordinary() {
    let (mut s, _op, id, txn) = acquiring_set(&["b", "a", "c"]);
    // One compare per name: its whole key range is empty.
    let compares = txn["compare"].as_array().unwrap();
    assert_eq!(compares.len(), 3);
    for (c, name) in compares.iter().zip(["b", "a", "c"]) {
        let prefix = format!("edgelock/{name}/").into_bytes();
        assert_eq!(unb64(&c["key"]), prefix);
        assert_eq!(unb64(&c["range_end"]), gw::prefix_end(&prefix));
        assert_eq!(
            (&c["target"], &c["result"], &c["create_revision"]),
            (&json!("CREATE"), &json!("EQUAL"), &json!("0"))
        );
    }
    // The `%holds` key (re-entry) lies outside every range.
    assert!(
        !(b"edgelock/a%holds".as_slice() >= b"edgelock/a/".as_slice()
            && b"edgelock/a%holds".as_slice() < gw::prefix_end(b"edgelock/a/").as_slice())
    );
    // Each name's key exactly as an ordinary acquire names it.
    let puts = puts(&txn);
    let keys: Vec<&[u8]> = puts.iter().map(|(k, _)| k.as_slice()).collect();
    assert_eq!(
        keys,
        [&b"edgelock/b/1f"[..], b"edgelock/a/1f", b"edgelock/c/1f"]
    );
    s.txn_reply(id, 42, true, vec![json!({ "response_put": {} }); 3]);
    let locks = s.completed().unwrap().into_acquired_all().unwrap().unwrap();
    let got: Vec<(&str, u64, &str)> = locks
        .iter()
        .map(|l| (l.name.as_str(), l.fencing_token, l.handle.key.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("b", 42, "edgelock/b/1f"),
            ("a", 42, "edgelock/a/1f"),
            ("c", 42, "edgelock/c/1f")
        ]
    );
    for l in &locks {
        assert_eq!(l.handle.kind, LockKind::Exclusive);
        assert_eq!((l.handle.revision, l.handle.owner.as_str()), (42, "31"));
    }
    nothing_sent(&mut s);
    // Each is an ordinary held lock: a local acquire of its name queues
    // (a try is refused at once), and its release deletes exactly its key.
    s.m.start(
        s.now,
        Operation::acquire(
            "a",
            AcquireOptions {
                wait: Wait::Try,
                ttl_ms: None,
            },
        ),
    )
    .unwrap();
    assert_eq!(s.completed(), Ok(Outcome::NotAcquired));
    nothing_sent(&mut s);
    s.m.start(s.now, Operation::Release { lock: locks[1].id })
        .unwrap();
    let (rid, body) = s.sent("/v3/kv/txn");
    assert!(serde_json::to_string(&body)
        .unwrap()
        .contains(&b64::encode(b"edgelock/a/1f")));
    s.txn_reply(rid, 43, true, vec![]);
    assert!(matches!(
        s.completed(),
        Ok(Outcome::Released {
            held_until_release: true,
            ..
        })
    ));
    assert_eq!(s.m.locks.len(), 2);
}

#[test]
fn a_set_with_a_held_name_is_not_acquired_and_leaves_its_names_free() {
    let (mut s, _op, id, _) = acquiring_set(&["a", "b"]);
    refuse(&mut s, id, 2);
    assert_eq!(s.completed(), Ok(Outcome::NotAcquired));
    assert!(s.m.busy_names.is_empty(), "no name stays claimed");
    assert_eq!(s.m.live_count(), 0);
    nothing_sent(&mut s);
    // An ordinary acquire of one of them goes out at once.
    s.m.start(
        s.now,
        Operation::acquire(
            "a",
            AcquireOptions {
                wait: Wait::Try,
                ttl_ms: None,
            },
        ),
    )
    .unwrap();
    let (_, txn) = s.sent("/v3/kv/txn");
    assert_eq!(
        unb64(&txn["success"][0]["request_put"]["key"]),
        b"edgelock/a/1f"
    );
}

#[test]
fn a_retried_txn_whose_first_attempt_applied_takes_its_own_keys() {
    let (mut s, _op, id, txn) = acquiring_set(&["a", "b"]);
    let puts = puts(&txn);
    // The answer of a second attempt: the first put our keys at 17.
    s.txn_reply(
        id,
        18,
        false,
        puts.iter()
            .map(|(k, v)| range(vec![jkv(k, 17, v)]))
            .collect(),
    );
    let locks = s.completed().unwrap().into_acquired_all().unwrap().unwrap();
    assert!(locks.iter().all(|l| l.fencing_token == 17));
    // Another value under our key (a leftover) is no success.
    let (mut s, _op, id, _) = acquiring_set(&["a", "b"]);
    s.txn_reply(
        id,
        18,
        false,
        vec![range(vec![jkv(b"edgelock/a/1f", 5, b"old")]), range(vec![])],
    );
    assert_eq!(s.completed(), Ok(Outcome::NotAcquired));
}

#[test]
fn a_locally_busy_name_is_not_acquired_without_a_request() {
    let mut s = Script::fresh();
    s.m.start(s.now, Operation::acquire("b", AcquireOptions::default()))
        .unwrap();
    let grant = s.sent("/v3/lease/grant");
    s.reply(grant.0, json!({ "ID": LEASE.to_string(), "TTL": "10" }));
    let _ = s.sent("/v3/kv/txn");
    s.m.start(s.now, all(&["a", "b"], Wait::Forever)).unwrap();
    assert_eq!(s.completed(), Ok(Outcome::NotAcquired));
    nothing_sent(&mut s);
    assert!(!s.m.busy_names.contains_key("a"));
}

#[test]
fn invalid_sets_are_refused_before_any_request() {
    let mut s = Script::fresh();
    for bad in [&["a", ""][..], &["a", "a"], &[]] {
        assert!(s.m.start(s.now, all(bad, Wait::Try)).is_err(), "{bad:?}");
    }
    let many: Vec<String> = (0..17).map(|i| format!("n{i}")).collect();
    let many: Vec<&str> = many.iter().map(|n| n.as_str()).collect();
    assert!(s.m.start(s.now, all(&many, Wait::Try)).is_err());
    nothing_sent(&mut s);
}

#[test]
fn a_transport_error_completes_with_it_and_deletes_whatever_the_txn_may_have_put() {
    let (mut s, _op, id, txn) = acquiring_set(&["a", "b"]);
    let puts = puts(&txn);
    s.now += 5;
    s.m.handle_input(
        s.now,
        Input::Failed {
            id,
            error: TransportError::Timeout,
        },
    );
    // One endpoint: the txn is tried once more, then given up.
    let (id, again) = s.sent("/v3/kv/txn");
    assert_eq!(again, txn, "the very same txn");
    s.m.handle_input(
        s.now,
        Input::Failed {
            id,
            error: TransportError::Timeout,
        },
    );
    assert!(s.m.ghost_risk, "an abandoned txn is a ghost risk");
    // Whatever it may have put is deleted, all or none, before the set
    // completes: exactly our values, never someone else's key.
    s.nothing_completed();
    let (rid, body) = s.sent("/v3/kv/txn");
    nothing_sent(&mut s);
    let compares = body["compare"].as_array().unwrap();
    assert_eq!(compares.len(), 2);
    for (c, (key, value)) in compares.iter().zip(&puts) {
        assert_eq!(unb64(&c["key"]), *key);
        assert_eq!(
            (&c["target"], unb64(&c["value"])),
            (&json!("VALUE"), value.clone())
        );
    }
    assert_eq!(body["success"].as_array().unwrap().len(), 2);
    // The names stay busy meanwhile.
    let try_a = Operation::acquire(
        "a",
        AcquireOptions {
            wait: Wait::Try,
            ttl_ms: None,
        },
    );
    s.m.start(s.now, try_a).unwrap();
    assert_eq!(s.completed(), Ok(Outcome::NotAcquired));
    s.txn_reply(rid, 20, true, vec![]);
    let e = s.completed().unwrap_err();
    assert!(matches!(e, LockError::Transport { .. }), "{e}");
    assert!(s.m.busy_names.is_empty());
    assert_eq!(s.m.live_count(), 0);
}

#[test]
fn a_cleanup_that_fails_too_leaves_the_keys_to_the_orphans() {
    let (mut s, _op, id, _) = acquiring_set(&["a", "b"]);
    s.reply(id, json!({ "header": {}, "succeeded": true })); // no revision: a broken reply
    let (rid, _) = s.sent("/v3/kv/txn");
    s.m.handle_input(
        s.now,
        Input::Failed {
            id: rid,
            error: TransportError::Timeout,
        },
    );
    let (rid, _) = s.sent("/v3/kv/txn"); // the retry
    s.m.handle_input(
        s.now,
        Input::Failed {
            id: rid,
            error: TransportError::Timeout,
        },
    );
    let e = s.completed().unwrap_err();
    assert!(matches!(e, LockError::Backend { .. }), "{e}");
    assert_eq!(s.m.orphans.len(), 2);
    assert_eq!(s.m.busy_names.len(), 2, "busy until the orphans are gone");
    s.m.handle_timeout(s.now + ORPHAN_RETRY_MS);
    s.now += ORPHAN_RETRY_MS;
    let deletes = all_sent(&mut s);
    assert_eq!(deletes.len(), 2, "{deletes:?}");
    for (rid, _, _) in deletes {
        s.txn_reply(rid, 30, true, vec![]);
    }
    assert!(s.m.busy_names.is_empty());
    assert_eq!(s.m.live_count(), 0);
}

#[test]
fn a_cancel_while_the_txn_is_in_flight_aborts_and_undoes_it_if_it_applied() {
    let (mut s, op, id, _) = acquiring_set(&["a", "b"]);
    s.m.cancel(s.now, op);
    s.nothing_completed();
    s.txn_reply(id, 42, true, vec![json!({ "response_put": {} }); 2]);
    // Its keys are deleted (exactly that incarnation: create revision 42,
    // all or none) before it completes.
    s.nothing_completed();
    assert!(s.m.locks.is_empty());
    let (rid, body) = s.sent("/v3/kv/txn");
    let compares = body["compare"].as_array().unwrap();
    assert_eq!(compares.len(), 2);
    assert!(
        compares.iter().all(|c| c["create_revision"] == json!("42")),
        "{body}"
    );
    s.txn_reply(rid, 43, true, vec![]);
    let e = s.completed().unwrap_err();
    assert!(matches!(e, LockError::Aborted { .. }), "{e}");
    assert!(s.m.busy_names.is_empty());
    assert_eq!(s.m.live_count(), 0);

    // A cancel whose txn did not apply: aborted, nothing to delete.
    let (mut s, op, id, _) = acquiring_set(&["a", "b"]);
    s.m.cancel(s.now, op);
    refuse(&mut s, id, 2);
    assert!(matches!(s.completed(), Err(LockError::Aborted { .. })));
    s.m.handle_timeout(s.now);
    nothing_sent(&mut s);
    assert_eq!(s.m.live_count(), 0);

    // A cancel before the lease is granted ends at once.
    let mut s = Script::fresh();
    let op = s.m.start(s.now, all(&["a"], Wait::Try)).unwrap();
    let _ = s.sent("/v3/lease/grant");
    s.m.cancel(s.now, op);
    assert!(matches!(s.completed(), Err(LockError::Aborted { .. })));
    assert!(s.m.busy_names.is_empty());
}

#[test]
fn a_lost_lease_in_flight_starts_the_set_over_on_a_new_lease() {
    let (mut s, _op, id, _) = acquiring_set(&["a", "b"]);
    s.now += 5;
    s.m.handle_input(
        s.now,
        Input::Response {
            id,
            status: 404,
            body: br#"{"error":"etcdserver: requested lease not found","code":5}"#.to_vec(),
        },
    );
    let sent = all_sent(&mut s);
    let grant = sent
        .iter()
        .find(|(_, p, _)| p.ends_with("/v3/lease/grant"))
        .unwrap_or_else(|| panic!("{sent:?}"));
    s.reply(grant.0, json!({ "ID": "64", "TTL": "10" }));
    let (id, txn) = s.sent("/v3/kv/txn");
    assert_eq!(
        unb64(&txn["success"][0]["request_put"]["key"]),
        b"edgelock/a/40"
    );
    s.txn_reply(id, 50, true, vec![json!({ "response_put": {} }); 2]);
    let locks = s.completed().unwrap().into_acquired_all().unwrap().unwrap();
    assert_eq!(locks[0].handle.owner, "64");
}
