//! Elections on the scripted machine (requests out, hand-written etcd
//! replies in), and the value encoding's separation from the other kinds.

use super::{permits, shared, WATCH_RETRY_MS};
use crate::core::{
    b64, BackendKind, Event, Input, Leadership, LockError, LockHandle, LockInfo, LockKind,
    LockMachine, OpId, Operation, Outcome, RequestId, Transmit, Wait,
};

use super::election::*;
use super::scripted::{range, Script, LEASE};
use proptest::prelude::*;
use serde_json::{json, Value};

const KEY: &[u8] = b"edgelock/e/1f";

fn jkv(key: &[u8], rev: i64, value: &[u8]) -> Value {
    json!({ "key": b64::encode(key), "create_revision": rev.to_string(),
            "mod_revision": rev.to_string(), "value": b64::encode(value), "lease": "42" })
}

fn unb64(v: &Value) -> Vec<u8> {
    b64::decode(v.as_str().unwrap_or_default().as_bytes()).unwrap_or_default()
}

fn chunk(s: &mut Script, id: RequestId, msg: Value) {
    s.now += 5;
    let data = serde_json::to_vec(&json!({ "result": msg })).unwrap();
    s.m.handle_input(s.now, Input::Chunk { id, data });
}

/// Nothing at all is sent now.
fn nothing_sent(s: &mut Script) {
    while let Some(t) = s.m.poll_transmit() {
        assert!(
            matches!(t, Transmit::Cancel(_)),
            "unexpected request: {t:?}"
        );
    }
}

/// A campaign of "e" granted at revision 7 (nobody ahead): its lock info.
fn leading(value: &str) -> (Script, LockInfo) {
    let (mut s, id, txn) = Script::campaigning("e", value, Wait::Forever);
    let put = &txn["success"][0]["request_put"];
    assert_eq!(unb64(&put["key"]), KEY, "the exclusive lock's key layout");
    let stored = unb64(&put["value"]);
    assert_eq!(stored, value.as_bytes(), "the raw value, as Go stores it");
    assert_eq!(decode_leader_value(&stored).as_deref(), Some(value));
    s.txn_reply(
        id,
        7,
        true,
        vec![
            json!({ "response_put": {} }),
            range(vec![jkv(KEY, 7, b"")]),
            range(vec![jkv(KEY, 7, &stored)]),
        ],
    );
    let info = s.completed().unwrap().into_acquired().unwrap().unwrap();
    (s, info)
}

// ---- the value encoding ----------------------------------------------------

proptest! {
    /// A leadership's value is the campaign value itself; every value that
    /// is not refused reads back as a leadership (never a reader's or a
    /// permit's, which would make the other kinds refuse or misjudge the
    /// name), and no reader's, permit's or exclusive lock's value of ours is
    /// a leadership's.
    #[test]
    fn leader_values_never_collide_with_other_kinds(
        random in "[0-9a-f]{16}",
        value in any::<String>().prop_filter("at most the limit", |v| v.len() <= crate::core::operation::MAX_CAMPAIGN_VALUE),
        limit in 1u32..=999,
    ) {
        let v = leader_value(&value);
        prop_assert_eq!(&v, value.as_bytes());
        if check_campaign_value(&value).is_ok() {
            prop_assert_eq!(decode_leader_value(&v), Some(value.clone()));
            prop_assert!(!shared::is_shared_value(&v));
            prop_assert_eq!(permits::key_kind(&v), permits::KeyKind::Plain);
        } else {
            prop_assert!(!is_leader_value(&v));
        }
        prop_assert!(!is_leader_value(&shared::shared_value(&random)));
        prop_assert!(!is_leader_value(&permits::permit_value(limit, &random)));
        prop_assert!(!is_leader_value(random.as_bytes()));
    }

    /// Arbitrary bytes never panic the decoder.
    #[test]
    fn any_value_decodes_without_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        let _ = decode_leader_value(&bytes);
    }
}

#[test]
fn leader_value_edge_cases() {
    // Go's values read as they are: etcdctl elect's, a Go Mutex's empty one.
    assert_eq!(decode_leader_value(b"goval").as_deref(), Some("goval"));
    assert_eq!(decode_leader_value(b"").as_deref(), Some(""));
    assert_eq!(decode_leader_value(b"l:ab:x").as_deref(), Some("l:ab:x"));
    assert_eq!(
        decode_leader_value(b"a\xffb").as_deref(),
        Some("a\u{fffd}b")
    );
    // 17 or 15 hex digits, or upper case, are no nonce of ours.
    assert!(is_leader_value(b"0123456789abcdef0"));
    assert!(is_leader_value(b"0123456789ABCDEF"));
    for ours in [
        &b"0123456789abcdef"[..],
        b"r:ab",
        b"r:",
        b"p3:ab",
        b"p100:x",
    ] {
        assert!(
            !is_leader_value(ours),
            "{:?}",
            String::from_utf8_lossy(ours)
        );
        let text = std::str::from_utf8(ours).unwrap();
        let e = check_campaign_value(text).unwrap_err();
        assert_eq!(e.code(), "INVALID_ARGUMENT");
        assert!(e.to_string().contains("reserved on etcd"), "{e}");
    }
    for free in ["", "A", "p:x", "p1000:x", "r", "node-1 http://10.0.0.1"] {
        assert!(check_campaign_value(free).is_ok(), "{free}");
    }
}

/// A reserved campaign or proclaim value is refused before any request.
#[test]
fn a_reserved_campaign_value_is_refused_before_anything_is_sent() {
    let mut s = Script::fresh();
    let e =
        s.m.start(
            s.now,
            Operation::Campaign {
                name: "e".into(),
                value: "r:1".into(),
                options: crate::core::AcquireOptions {
                    wait: Wait::Try,
                    ttl_ms: None,
                },
            },
        )
        .unwrap_err();
    assert_eq!(e.code(), "INVALID_ARGUMENT");
    nothing_sent(&mut s);
    let (mut s, info) = leading("A");
    let e =
        s.m.start(
            s.now,
            Operation::Proclaim {
                lock: info.id,
                value: "0123456789abcdef".into(),
            },
        )
        .unwrap_err();
    assert_eq!(e.code(), "INVALID_ARGUMENT");
    nothing_sent(&mut s);
}

// ---- campaign, proclaim ----------------------------------------------------

#[test]
fn a_campaign_is_a_leader_kind_lock_with_its_key_revision_as_token() {
    let (_, info) = leading("A");
    assert_eq!(info.handle.kind, LockKind::Leader);
    assert_eq!(info.fencing_token, 7);
    assert_eq!(info.handle.revision, 7);
    assert_eq!(info.handle.key, "edgelock/e/1f");
}

#[test]
fn proclaim_compares_the_create_revision_and_puts_on_the_lease() {
    let (mut s, info) = leading("A");
    s.m.start(
        s.now,
        Operation::Proclaim {
            lock: info.id,
            value: "B".into(),
        },
    )
    .unwrap();
    let (id, txn) = s.sent("/v3/kv/txn");
    let cmp = &txn["compare"][0];
    assert_eq!(unb64(&cmp["key"]), KEY);
    assert_eq!(cmp["target"], "CREATE");
    assert_eq!(cmp["result"], "EQUAL");
    assert_eq!(cmp["create_revision"], "7");
    let put = &txn["success"][0]["request_put"];
    assert_eq!(unb64(&put["key"]), KEY);
    assert_eq!(put["lease"], LEASE.to_string());
    assert_eq!(unb64(&put["value"]), b"B");
    s.txn_reply(id, 9, true, vec![json!({ "response_put": {} })]);
    assert!(matches!(
        s.completed(),
        Ok(Outcome::Proclaimed { lock }) if lock == info.id
    ));
}

#[test]
fn a_failed_proclaim_compare_is_a_lost_leadership() {
    let (mut s, info) = leading("A");
    s.m.start(
        s.now,
        Operation::Proclaim {
            lock: info.id,
            value: "B".into(),
        },
    )
    .unwrap();
    let (id, _) = s.sent("/v3/kv/txn");
    s.txn_reply(id, 9, false, vec![]);
    let mut events = Vec::new();
    while let Some(e) = s.m.poll_event() {
        events.push(e);
    }
    assert!(events.iter().any(|e| matches!(e,
        Event::Completed { result: Err(e), .. } if e.code() == "LOST")));
    assert!(events
        .iter()
        .any(|e| matches!(e, Event::Lost { lock, .. } if *lock == info.id)));
    // Gone for good: the next proclaim is NotHeld without a request.
    s.m.start(
        s.now,
        Operation::Proclaim {
            lock: info.id,
            value: "C".into(),
        },
    )
    .unwrap();
    assert_eq!(s.completed().unwrap_err().code(), "NOT_HELD");
    nothing_sent(&mut s);
}

#[test]
fn a_proclaim_on_a_plain_lock_is_refused_without_a_request() {
    let (mut s, id, txn) = Script::acquiring("e", LockKind::Exclusive, Wait::Forever);
    let stored = unb64(&txn["success"][0]["request_put"]["value"]);
    assert!(!is_leader_value(&stored));
    s.txn_reply(
        id,
        7,
        true,
        vec![
            json!({ "response_put": {} }),
            range(vec![jkv(KEY, 7, b"")]),
            range(vec![jkv(KEY, 7, &stored)]),
        ],
    );
    let info = s.completed().unwrap().into_acquired().unwrap().unwrap();
    assert_eq!(info.handle.kind, LockKind::Exclusive);
    let e =
        s.m.start(
            s.now,
            Operation::Proclaim {
                lock: info.id,
                value: "B".into(),
            },
        )
        .unwrap_err();
    assert_eq!(e.code(), "INVALID_ARGUMENT");
    nothing_sent(&mut s);
}

#[test]
fn a_waiting_campaign_cancelled_deletes_its_key() {
    let (mut s, id, txn) = Script::campaigning("e", "A", Wait::Forever);
    let stored = unb64(&txn["success"][0]["request_put"]["value"]);
    // A plain lock (revision 5) is ahead: the campaign queues behind it.
    s.txn_reply(
        id,
        7,
        true,
        vec![
            json!({ "response_put": {} }),
            range(vec![jkv(KEY, 7, b""), jkv(b"edgelock/e/2a", 5, b"")]),
            range(vec![jkv(b"edgelock/e/2a", 5, b"0123abcd")]),
        ],
    );
    let (_, watch) = s.sent("/v3/watch");
    assert_eq!(
        unb64(&watch["create_request"]["key"]),
        b"edgelock/e/2a",
        "watches its predecessor"
    );
    s.nothing_completed();
    let op = OpId(1);
    s.m.cancel(s.now, op);
    let (del, body) = s.sent("/v3/kv/txn");
    assert_eq!(unb64(&body["compare"][0]["key"]), KEY);
    assert_eq!(body["compare"][0]["create_revision"], "7");
    assert!(body["success"][0]["request_delete_range"].is_object());
    s.txn_reply(del, 8, true, vec![]);
    assert_eq!(s.completed().unwrap_err().code(), "ABORTED");
    assert!(!stored.is_empty());
    assert_eq!(s.m.live_count(), 0);
}

// ---- leader ----------------------------------------------------------------

fn leader_query(oldest: Vec<Value>) -> Result<Option<Leadership>, LockError> {
    let mut s = Script::fresh();
    s.m.start(s.now, Operation::Leader { name: "e".into() })
        .unwrap();
    let (id, body) = s.sent("/v3/kv/range");
    assert_eq!(unb64(&body["key"]), b"edgelock/e/");
    assert_eq!(body["limit"], "1");
    assert_eq!(body["sort_target"], "CREATE");
    assert_eq!(body["sort_order"], "ASCEND");
    s.reply(id, json!({ "header": { "revision": "20" }, "kvs": oldest }));
    nothing_sent(&mut s);
    s.completed().and_then(Outcome::into_leader)
}

#[test]
fn leader_is_the_oldest_key_if_it_is_a_leadership() {
    assert_eq!(
        leader_query(vec![jkv(KEY, 7, &leader_value("A"))]).unwrap(),
        Some(Leadership {
            value: "A".into(),
            fencing_token: 7
        })
    );
    assert_eq!(leader_query(vec![]).unwrap(), None);
    // A plain lock holds the name: nobody leads the election.
    assert_eq!(
        leader_query(vec![jkv(KEY, 7, b"0123456789abcdef")]).unwrap(),
        None
    );
    assert_eq!(leader_query(vec![jkv(KEY, 7, b"r:ab")]).unwrap(), None);
    // Hostile: a leadership without a revision is an error, not a token 0.
    let e = leader_query(vec![jkv(KEY, 0, &leader_value("A"))]).unwrap_err();
    assert_eq!(e.code(), "BACKEND");
}

// ---- observe ---------------------------------------------------------------

fn a(value: &str, token: u64) -> Option<Leadership> {
    Some(Leadership {
        value: value.into(),
        fencing_token: token,
    })
}

/// An observe of "e" knowing A (token 7, as the range says): its watch.
fn observing(wait: Wait) -> (Script, OpId, RequestId, Value) {
    let mut s = Script::fresh();
    let op =
        s.m.start(
            s.now,
            Operation::Observe {
                name: "e".into(),
                known: a("A", 7),
                wait,
            },
        )
        .unwrap();
    let (id, _) = s.sent("/v3/kv/range");
    s.reply(
        id,
        json!({ "header": { "revision": "20" }, "kvs": [jkv(KEY, 7, &leader_value("A"))] }),
    );
    s.nothing_completed();
    let (watch, body) = s.sent("/v3/watch");
    assert_eq!(unb64(&body["create_request"]["key"]), b"edgelock/e/");
    assert_eq!(unb64(&body["create_request"]["range_end"]), b"edgelock/e0");
    assert_eq!(body["create_request"]["start_revision"], "21");
    chunk(
        &mut s,
        watch,
        json!({ "header": { "revision": "20" }, "created": true }),
    );
    (s, op, watch, body)
}

#[test]
fn observe_completes_at_once_when_the_state_already_differs() {
    let mut s = Script::fresh();
    s.m.start(
        s.now,
        Operation::Observe {
            name: "e".into(),
            known: None,
            wait: Wait::Forever,
        },
    )
    .unwrap();
    let (id, _) = s.sent("/v3/kv/range");
    s.reply(
        id,
        json!({ "header": { "revision": "20" }, "kvs": [jkv(KEY, 7, &leader_value("A"))] }),
    );
    assert_eq!(s.completed().unwrap().into_leader().unwrap(), a("A", 7));
    nothing_sent(&mut s);
}

#[test]
fn observe_completes_on_a_pushed_proclaim_without_another_request() {
    let (mut s, _, watch, _) = observing(Wait::Forever);
    // A waiter joining changes nothing.
    chunk(
        &mut s,
        watch,
        json!({ "header": { "revision": "21" }, "events": [
            { "kv": jkv(b"edgelock/e/2a", 21, &leader_value("B")) } ] }),
    );
    s.nothing_completed();
    nothing_sent(&mut s);
    // The leader's proclaim: same key, same create revision, new value.
    let mut put = jkv(KEY, 7, &leader_value("A2"));
    put["mod_revision"] = json!("22");
    chunk(
        &mut s,
        watch,
        json!({ "header": { "revision": "22" }, "events": [ { "kv": put } ] }),
    );
    assert_eq!(s.completed().unwrap().into_leader().unwrap(), a("A2", 7));
    assert_eq!(s.m.live_count(), 0);
}

#[test]
fn observe_reads_again_when_the_leader_key_is_deleted() {
    let (mut s, _, watch, _) = observing(Wait::Forever);
    chunk(
        &mut s,
        watch,
        json!({ "header": { "revision": "23" }, "events": [
            { "type": "DELETE", "kv": { "key": b64::encode(KEY), "mod_revision": "23" } } ] }),
    );
    s.nothing_completed();
    let (id, _) = s.sent("/v3/kv/range");
    s.reply(
        id,
        json!({ "header": { "revision": "23" }, "kvs": [jkv(b"edgelock/e/2a", 21, &leader_value("B"))] }),
    );
    assert_eq!(s.completed().unwrap().into_leader().unwrap(), a("B", 21));
}

#[test]
fn observe_completes_with_the_current_state_at_its_deadline() {
    let (mut s, _, _, _) = observing(Wait::For(5_000));
    s.m.handle_timeout(s.now + 4_000);
    s.nothing_completed();
    let at = s.m.poll_timeout().unwrap();
    assert!(at <= 1_000 + 5_000);
    s.m.handle_timeout(at);
    assert_eq!(s.completed().unwrap().into_leader().unwrap(), a("A", 7));
    assert_eq!(s.m.live_count(), 0);
}

#[test]
fn observe_cancelled_is_aborted_and_its_watch_closed() {
    let (mut s, op, watch, _) = observing(Wait::Forever);
    s.m.cancel(s.now, op);
    assert_eq!(s.completed().unwrap_err().code(), "ABORTED");
    let mut cancelled = false;
    while let Some(t) = s.m.poll_transmit() {
        match t {
            Transmit::Cancel(id) => cancelled |= id == watch,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(cancelled, "the watch is cancelled");
    assert_eq!(s.m.live_count(), 0);
    assert_eq!(s.m.poll_timeout(), None, "no timer left armed");
}

#[test]
fn a_broken_observe_watch_reads_again_and_watches_anew() {
    let (mut s, _, watch, _) = observing(Wait::Forever);
    s.m.handle_input(s.now, Input::StreamEnd { id: watch });
    s.nothing_completed();
    nothing_sent(&mut s);
    let at = s.m.poll_timeout().unwrap();
    assert!(at <= s.now + 2 * WATCH_RETRY_MS);
    s.now = at;
    s.m.handle_timeout(at);
    let (id, _) = s.sent("/v3/kv/range");
    s.reply(
        id,
        json!({ "header": { "revision": "30" }, "kvs": [jkv(KEY, 7, &leader_value("A"))] }),
    );
    let (_, body) = s.sent("/v3/watch");
    assert_eq!(body["create_request"]["start_revision"], "31");
    s.nothing_completed();
}

#[test]
fn hostile_watch_messages_are_errors_or_retries_not_panics() {
    // An unreadable message: the watch is broken, read again later.
    let (mut s, _, watch, _) = observing(Wait::Forever);
    chunk(&mut s, watch, json!({ "header": {}, "events": "nonsense" }));
    s.nothing_completed();
    let at = s.m.poll_timeout().unwrap();
    s.m.handle_timeout(at);
    s.sent("/v3/kv/range");

    // Nobody leads; a leadership key then appears without a valid revision.
    let mut s = Script::fresh();
    s.m.start(
        s.now,
        Operation::Observe {
            name: "e".into(),
            known: None,
            wait: Wait::Forever,
        },
    )
    .unwrap();
    let (id, _) = s.sent("/v3/kv/range");
    s.reply(id, json!({ "header": { "revision": "20" }, "kvs": [] }));
    let (watch, _) = s.sent("/v3/watch");
    let mut put = jkv(KEY, 7, &leader_value("A"));
    put["create_revision"] = json!("-3");
    chunk(
        &mut s,
        watch,
        json!({ "header": { "revision": "22" }, "events": [ { "kv": put } ] }),
    );
    assert_eq!(s.completed().unwrap_err().code(), "BACKEND");
    assert_eq!(s.m.live_count(), 0);
}

#[test]
fn a_proclaim_whose_lease_is_gone_loses_the_leadership() {
    let (mut s, info) = leading("A");
    s.m.start(
        s.now,
        Operation::Proclaim {
            lock: info.id,
            value: "B".into(),
        },
    )
    .unwrap();
    let (id, _) = s.sent("/v3/kv/txn");
    s.now += 5;
    s.m.handle_input(
        s.now,
        Input::Response {
            id,
            status: 404,
            body: br#"{"error":"etcdserver: requested lease not found","code":5,"message":"etcdserver: requested lease not found"}"#.to_vec(),
        },
    );
    let mut events = Vec::new();
    while let Some(e) = s.m.poll_event() {
        events.push(e);
    }
    assert!(events.iter().any(|e| matches!(e,
        Event::Completed { result: Err(e), .. } if e.code() == "LOST")));
    assert!(events
        .iter()
        .any(|e| matches!(e, Event::Lost { lock, .. } if *lock == info.id)));
    let shown = format!("{events:?}");
    assert!(
        !shown.contains(&LEASE.to_string()) && !shown.contains(&format!("{LEASE:x}\"")),
        "no owner credential in errors: {shown}"
    );
}

/// Resume checks the kind against the key's value: a leadership handle on
/// a plain lock's key (or the other way round) is not adopted.
#[test]
fn resume_checks_the_leadership_kind_against_the_value() {
    for (kind, value) in [
        (LockKind::Leader, b"0123456789abcdef".to_vec()),
        (LockKind::Exclusive, leader_value("A")),
        (LockKind::Leader, leader_value("A")),
    ] {
        let mut s = Script::fresh();
        let handle = LockHandle {
            v: 1,
            backend: BackendKind::Etcd,
            name: "e".into(),
            key: "edgelock/e/2a".into(),
            owner: "42".into(),
            fencing_token: 7,
            revision: 7,
            kind,
            slot: None,
        };
        s.m.start(s.now, Operation::Resume { handle }).unwrap();
        let (id, _) = s.sent("/v3/kv/txn");
        s.txn_reply(
            id,
            9,
            true,
            vec![range(vec![jkv(b"edgelock/e/2a", 7, &value)])],
        );
        if is_leader_value(&value) == (kind == LockKind::Leader) {
            // The kinds agree: the lease is confirmed next.
            s.sent("/v3/lease/keepalive");
            s.nothing_completed();
        } else {
            assert_eq!(s.completed().unwrap_err().code(), "LOST", "{kind:?}");
            assert_eq!(s.m.live_count(), 0);
        }
    }
}
