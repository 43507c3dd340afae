//! Elections at the machine level, with scripted answers (see
//! [`election`](crate::core::redis::election)): the scripts' arguments and
//! the parsing of their replies, hostile replies becoming errors, a
//! campaign writing its leader record before it is granted, proclaim's
//! owner check, Redlock's quorum on one (token, value) pair, and observe's
//! read / wait / read cycle.

use super::*;
use crate::core::redis::election::{self, agreed, parse_leader, LeaderReply};
use crate::core::redis::scripts::Script;

/// Base64 (Upstash sends result strings so, see `upstash`).
fn b64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in bytes.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A `LEADER` reply as Upstash sends it.
fn leader_body(fence: u64, pttl: i64, value: &str) -> String {
    format!(
        r#"{{"result":[1,{fence},{pttl},"{}"]}}"#,
        b64(format!("={value}").as_bytes())
    )
}

const NOBODY: &str = r#"{"result":[0,0,-2]}"#;

fn campaign(name: &str, value: &str, wait: Wait) -> Operation {
    Operation::Campaign {
        name: name.into(),
        value: value.into(),
        options: opts(wait),
    }
}

fn lead(l: &str, fence: u64) -> Option<Leadership> {
    Some(Leadership {
        value: l.into(),
        fencing_token: fence,
    })
}

fn completed(events: &[Event]) -> Vec<Result<Outcome, LockError>> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Completed { result, .. } => Some(result.clone()),
            _ => None,
        })
        .collect()
}

fn bulk(s: &str) -> RedisValue {
    RedisValue::Bulk(s.as_bytes().to_vec())
}

#[test]
fn leader_replies_parse_and_hostile_ones_are_errors() {
    use RedisValue::{Array, Int};
    assert_eq!(
        parse_leader(&Array(vec![Int(1), Int(7), Int(900), bulk("=node-a")])),
        Ok(LeaderReply {
            leader: lead("node-a", 7),
            pttl: Some(900)
        })
    );
    // Integers as decimal strings (a gateway may send them so), the empty value.
    assert_eq!(
        parse_leader(&Array(vec![bulk("1"), bulk("7"), Int(-1), bulk("=")])),
        Ok(LeaderReply {
            leader: lead("", 7),
            pttl: None
        })
    );
    assert_eq!(
        parse_leader(&Array(vec![Int(0), Int(0), Int(-2)])),
        Ok(LeaderReply {
            leader: None,
            pttl: None
        })
    );
    assert_eq!(
        parse_leader(&Array(vec![Int(0), Int(0), Int(40)])),
        Ok(LeaderReply {
            leader: None,
            pttl: Some(40)
        })
    );
    let big = format!("={}", "x".repeat(MAX_CAMPAIGN_VALUE + 1));
    let hostile = [
        RedisValue::Nil,
        Int(1),
        bulk("=v"),
        RedisValue::Error("ERR boom".into()),
        Array(vec![]),
        Array(vec![Int(1), Int(7), Int(900)]),
        Array(vec![Int(0), Int(3), Int(-2)]),
        Array(vec![Int(2), Int(7), Int(900), bulk("=v")]),
        Array(vec![Int(1), Int(-7), Int(900), bulk("=v")]),
        Array(vec![Int(1), Int(0), Int(900), bulk("=v")]),
        Array(vec![Int(1), Int(7), Int(-9), bulk("=v")]),
        Array(vec![Int(1), Int(7), Int(900), bulk("v")]),
        Array(vec![Int(1), Int(7), Int(900), bulk(&big)]),
        Array(vec![
            Int(1),
            Int(7),
            Int(900),
            RedisValue::Bulk(vec![b'=', 0xff]),
        ]),
        Array(vec![Int(1), Int(7), Int(900), Int(5)]),
        Array(vec![Int(1), Int(7), Int(900), Array(vec![bulk("=v")])]),
        Array(vec![
            Int(1),
            bulk("99999999999999999999999"),
            Int(9),
            bulk("=v"),
        ]),
        Array(vec![Int(1), Int(7), Int(900), bulk("=v"), Int(0)]),
    ];
    for v in hostile {
        let e = parse_leader(&v).expect_err("hostile");
        assert!(!e.contains("=v") || e.len() < 200, "{e}");
    }
}

/// A quorum must agree on one (token, value) pair: never a new token with
/// another node's older value.
#[test]
fn redlock_agreement_never_mixes_a_token_with_another_value() {
    let r = |l: Option<Leadership>| LeaderReply {
        leader: l,
        pttl: None,
    };
    let answers = [r(lead("a", 5)), r(lead("a", 5)), r(lead("b", 6))];
    assert_eq!(agreed(&answers, 2), lead("a", 5));
    let split = [r(lead("a", 5)), r(lead("b", 6)), r(lead("a", 6))];
    assert_eq!(agreed(&split, 2), None, "no pair has a quorum");
    let mid_proclaim = [r(lead("a", 5)), r(lead("a2", 5)), r(None)];
    assert_eq!(agreed(&mid_proclaim, 2), None);
    assert_eq!(agreed(&[r(lead("a", 5))], 1), lead("a", 5));
}

/// One node: a campaign is granted only once its record (token, fence and
/// value in one owner-checked write) is in; it is then a leadership.
#[test]
fn a_campaign_writes_its_record_before_it_is_granted() {
    let mut h = single(|_| {});
    let op =
        h.m.start_operation(h.now, campaign("sched", "node-a", Wait::Try))
            .unwrap();
    let r = h.take();
    // A campaign goes through the waiters' queue (fair: FIFO), even a try
    // (which does not join it: a lease of 0).
    assert_eq!(script_of(&r[0]), Script::AcquireQueued);
    assert_eq!(
        args(&r[0])[13..15],
        ["0", "0"],
        "no lease, fair (no bypass)"
    );
    let token = args(&r[0])[10].clone();
    h.answer(&r[0], r#"{"result":[1,12,0]}"#);
    assert!(
        completed(&h.take_events()).is_empty(),
        "not before the record"
    );
    let r = h.take();
    assert_eq!(r.len(), 1);
    assert_eq!(script_of(&r[0]), Script::LeaderRecord);
    let a = args(&r[0]);
    assert_eq!(
        a[2..8],
        [
            "2".to_string(),
            "{edgelock:sched}".into(),
            "{edgelock:sched}:leader".into(),
            token.clone(),
            "12".into(),
            "=node-a".into(),
        ]
    );
    assert_eq!(
        a[8],
        crate::core::redis::subscription::wake_channel("{edgelock:sched}")
    );
    h.answer(&r[0], r#"{"result":1}"#);
    let ev = h.take_events();
    let lock = acquired(&ev);
    assert!(ev
        .iter()
        .any(|e| matches!(e, Event::Completed { op: o, .. } if *o == op)));
    assert_eq!(
        (lock.kind(), lock.fencing_token, lock.handle.owner.as_str()),
        (LockKind::Leader, 12, token.as_str())
    );

    // The leader query reports the record.
    h.m.start_operation(
        h.now,
        Operation::Leader {
            name: "sched".into(),
        },
    )
    .unwrap();
    let r = h.take();
    assert_eq!(script_of(&r[0]), Script::Leader);
    assert_eq!(
        args(&r[0])[3..5],
        ["{edgelock:sched}", "{edgelock:sched}:leader"]
    );
    h.answer(&r[0], &leader_body(12, 29_000, "node-a"));
    assert_eq!(
        completed(&h.take_events()),
        [Ok(Outcome::Leader(lead("node-a", 12)))]
    );

    // Proclaim: the same owner-checked write, with the lock's token.
    h.m.start_operation(
        h.now,
        Operation::Proclaim {
            lock: lock.id,
            value: "node-a:2".into(),
        },
    )
    .unwrap();
    let r = h.take();
    assert_eq!(script_of(&r[0]), Script::LeaderRecord);
    assert_eq!(args(&r[0])[5..8], [token.as_str(), "12", "=node-a:2"]);
    h.answer(&r[0], r#"{"result":1}"#);
    assert_eq!(
        completed(&h.take_events()),
        [Ok(Outcome::Proclaimed { lock: lock.id })]
    );

    // Not ours any more on the server: Lost, and the lock is gone.
    h.m.start_operation(
        h.now,
        Operation::Proclaim {
            lock: lock.id,
            value: "x".into(),
        },
    )
    .unwrap();
    let r = h.take();
    h.answer(&r[0], r#"{"result":0}"#);
    let ev = h.take_events();
    assert!(matches!(
        completed(&ev).as_slice(),
        [Err(LockError::Lost { .. })]
    ));
    assert!(ev.iter().any(|e| matches!(e, Event::Lost { .. })));
    // Now it is not held: NotHeld, without a request.
    h.take();
    h.m.start_operation(
        h.now,
        Operation::Proclaim {
            lock: lock.id,
            value: "x".into(),
        },
    )
    .unwrap();
    assert!(h.take().is_empty());
    assert!(matches!(
        completed(&h.take_events()).as_slice(),
        [Err(LockError::NotHeld { .. })]
    ));
}

/// A record the server refuses (the lock vanished between the grant and the
/// record): the attempt is cleaned up and nothing is granted.
#[test]
fn a_refused_record_grants_nothing() {
    let mut h = single(|_| {});
    h.m.start_operation(h.now, campaign("sched", "v", Wait::Try))
        .unwrap();
    let r = h.take();
    h.answer(&r[0], r#"{"result":[1,3,0]}"#);
    let r = h.take();
    assert_eq!(script_of(&r[0]), Script::LeaderRecord);
    h.answer(&r[0], r#"{"result":0}"#);
    let r = h.take();
    assert_eq!(script_of(&r[0]), Script::Release, "the cleanup");
    h.answer(&r[0], r#"{"result":0}"#);
    let ev = h.take_events();
    assert!(matches!(completed(&ev).as_slice(), [Err(_)]), "{ev:?}");
    assert!(!ev.iter().any(|e| matches!(
        e,
        Event::Completed {
            result: Ok(Outcome::Acquired(_)),
            ..
        }
    )));
}

/// A hostile leader reply fails the query (no panic, nothing secret).
#[test]
fn a_hostile_leader_reply_is_an_error() {
    let mut h = single(|_| {});
    for body in [
        r#"{"result":[1,-4,9,"PXY="]}"#,
        r#"{"result":"nope"}"#,
        r#"{"result":[1,4,9]}"#,
        r#"{"error":"ERR tok-secret"}"#,
    ] {
        h.m.start_operation(h.now, Operation::Leader { name: "n".into() })
            .unwrap();
        let r = h.take();
        h.answer(&r[0], body);
        let results = completed(&h.take_events());
        let [Err(e)] = results.as_slice() else {
            panic!("{results:?}");
        };
        assert!(!format!("{e:?}").contains("tok-secret") || body.contains("ERR"));
    }
}

/// Redlock: campaign = the quorum acquire, then a quorum of record writes;
/// leader = the pair a quorum vouches for.
#[test]
fn redlock_campaign_needs_a_quorum_of_records() {
    let mut h = redlock(3, |_| {});
    h.m.start_operation(h.now, campaign("sched", "a", Wait::Try))
        .unwrap();
    let r = h.take();
    assert_eq!(r.len(), 3);
    for q in &r {
        h.answer(q, r#"{"result":[1,4,0]}"#);
    }
    let r = h.take();
    assert_eq!(r.len(), 3);
    assert!(r.iter().all(|q| script_of(q) == Script::LeaderRecord));
    h.answer(&r[0], r#"{"result":1}"#);
    h.fail(&r[1]);
    assert!(completed(&h.take_events()).is_empty());
    h.answer(&r[2], r#"{"result":1}"#);
    let lock = acquired(&h.take_events());
    assert_eq!((lock.kind(), lock.fencing_token), (LockKind::Leader, 4));

    h.m.start_operation(
        h.now,
        Operation::Leader {
            name: "sched".into(),
        },
    )
    .unwrap();
    let r = h.take();
    h.answer(&r[0], &leader_body(4, 9_000, "a"));
    h.answer(&r[1], NOBODY);
    h.answer(&r[2], &leader_body(4, 9_000, "a"));
    assert_eq!(
        completed(&h.take_events()),
        [Ok(Outcome::Leader(lead("a", 4)))]
    );

    // A minority of records is not a leader.
    h.m.start_operation(
        h.now,
        Operation::Leader {
            name: "sched".into(),
        },
    )
    .unwrap();
    let r = h.take();
    h.answer(&r[0], &leader_body(4, 9_000, "a"));
    h.answer(&r[1], NOBODY);
    h.answer(&r[2], &leader_body(5, 9_000, "a"));
    assert_eq!(completed(&h.take_events()), [Ok(Outcome::Leader(None))]);

    // Too few answers: no quorum, an error rather than a guess.
    h.m.start_operation(
        h.now,
        Operation::Leader {
            name: "sched".into(),
        },
    )
    .unwrap();
    let r = h.take();
    h.answer(&r[0], &leader_body(4, 9_000, "a"));
    h.fail(&r[1]);
    h.fail(&r[2]);
    assert!(matches!(
        completed(&h.take_events()).as_slice(),
        [Err(LockError::NoQuorum { .. })]
    ));
}

/// Redlock: a record written on a minority is not a grant.
#[test]
fn redlock_minority_of_records_is_not_a_grant() {
    let mut h = redlock(3, |_| {});
    h.m.start_operation(h.now, campaign("sched", "a", Wait::Try))
        .unwrap();
    for q in &h.take() {
        h.answer(q, r#"{"result":[1,4,0]}"#);
    }
    let r = h.take();
    h.answer(&r[0], r#"{"result":1}"#);
    h.answer(&r[1], r#"{"result":0}"#);
    h.answer(&r[2], r#"{"result":0}"#);
    let cleanup = h.take();
    assert_eq!(cleanup.len(), 3);
    assert!(cleanup.iter().all(|q| script_of(q) == Script::Release));
    for q in &cleanup {
        h.answer(q, r#"{"result":1}"#);
    }
    let ev = h.take_events();
    assert!(matches!(
        completed(&ev).as_slice(),
        [Err(LockError::NoQuorum { .. })]
    ));
}

/// Observe: an unchanged state waits (a timer at the holder's PTTL when it
/// is sooner than the poll), reads again, and completes on a change; a
/// cancel ends it with `Aborted`; its wait bound with the current state.
#[test]
fn observe_reads_waits_and_completes_on_a_change() {
    let mut h = single(|c| c.retry_delay_ms = 5_000);
    let known = lead("a", 3);
    let observe = |wait| Operation::Observe {
        name: "sched".into(),
        known: known.clone(),
        wait,
    };
    h.m.start_operation(h.now, observe(Wait::Forever)).unwrap();
    let r = h.take();
    assert_eq!(script_of(&r[0]), Script::Leader);
    h.answer(&r[0], &leader_body(3, 700, "a"));
    assert!(
        completed(&h.take_events()).is_empty(),
        "unchanged: it waits"
    );
    assert!(h.take().is_empty());
    // The holder's key expires in 700 ms: look again right after.
    assert_eq!(h.next_timer(), h.now + 701);
    h.advance_to(h.now + 701);
    let r = h.take();
    assert_eq!(script_of(&r[0]), Script::Leader);
    h.answer(&r[0], NOBODY);
    assert_eq!(completed(&h.take_events()), [Ok(Outcome::Leader(None))]);

    // A different state at the first read completes at once.
    h.m.start_operation(h.now, observe(Wait::Forever)).unwrap();
    let r = h.take();
    h.answer(&r[0], &leader_body(3, 9_000, "a2"));
    assert_eq!(
        completed(&h.take_events()),
        [Ok(Outcome::Leader(lead("a2", 3)))]
    );

    // Cancel while waiting.
    let op = h.m.start_operation(h.now, observe(Wait::Forever)).unwrap();
    let r = h.take();
    h.answer(&r[0], &leader_body(3, 9_000, "a"));
    assert_eq!(
        h.next_timer(),
        h.now + 5_000,
        "the poll, not the far expiry"
    );
    h.m.cancel(h.now, op);
    assert!(matches!(
        completed(&h.take_events()).as_slice(),
        [Err(LockError::Aborted { .. })]
    ));
    assert!(h.take().is_empty());

    // The wait bound: the unchanged state.
    h.m.start_operation(h.now, observe(Wait::For(1_000)))
        .unwrap();
    let r = h.take();
    h.answer(&r[0], &leader_body(3, 9_000, "a"));
    assert_eq!(h.next_timer(), h.now + 1_000);
    h.advance_to(h.now + 1_000);
    let r = h.take();
    h.answer(&r[0], &leader_body(3, 8_000, "a"));
    assert_eq!(
        completed(&h.take_events()),
        [Ok(Outcome::Leader(known.clone()))]
    );

    // Try: one read.
    h.m.start_operation(h.now, observe(Wait::Try)).unwrap();
    let r = h.take();
    h.answer(&r[0], &leader_body(3, 8_000, "a"));
    assert_eq!(completed(&h.take_events()), [Ok(Outcome::Leader(known))]);
}

/// Observe with push: it subscribes once the state is unchanged, and a
/// message makes it read at once.
#[test]
fn observe_is_woken_by_a_push() {
    let mut cfg = RedisConfig::new(RedisNode::upstash("http://10.0.0.1:8080", "tok-secret"));
    cfg.retry_delay_ms = 5_000;
    let mut h = Harness::new(RedisMachine::new(cfg, Box::new(SeededEntropy::new(7))).unwrap());
    h.m.start_operation(
        h.now,
        Operation::Observe {
            name: "sched".into(),
            known: None,
            wait: Wait::Forever,
        },
    )
    .unwrap();
    let r = h.take();
    h.answer(&r[0], NOBODY);
    let sub = h.take();
    assert_eq!(sub.len(), 1, "one subscription");
    assert!(sub[0].stream);
    let chunk = |h: &mut Harness<RedisMachine>, data: &str| {
        h.m.handle_input(
            h.now,
            Input::Chunk {
                id: sub[0].id,
                data: data.as_bytes().to_vec(),
            },
        );
        h.drain();
    };
    chunk(&mut h, "data: subscribe,edgelock:wake:x,1\n\n");
    // The confirmation covers a change published before it: read again.
    let r = h.take();
    assert_eq!(r.len(), 1);
    assert_eq!(script_of(&r[0]), Script::Leader);
    h.answer(&r[0], NOBODY);
    assert!(completed(&h.take_events()).is_empty());
    chunk(&mut h, "data: message,edgelock:wake:x,leader:9\n\n");
    let r = h.take();
    assert_eq!(script_of(&r[0]), Script::Leader);
    h.answer(&r[0], &leader_body(9, 30_000, "b"));
    assert_eq!(
        completed(&h.take_events()),
        [Ok(Outcome::Leader(lead("b", 9)))]
    );
    let _ = election::record_key("k");
}

/// Waiters of the lock ignore a record's message (it frees nothing).
#[test]
fn lock_waiters_ignore_record_messages() {
    assert!(b"leader:5".starts_with(election::LEADER_MESSAGE_PREFIX));
    assert!(!b"released:5".starts_with(election::LEADER_MESSAGE_PREFIX));
}

/// A plain acquire of a leadership is refused by the machine itself (not
/// only by the capabilities check), before any request.
#[test]
fn an_acquire_of_a_leadership_is_refused() {
    let mut h = single(|_| {});
    let e =
        h.m.start_operation(
            h.now,
            Operation::Acquire {
                name: "sched".into(),
                kind: LockKind::Leader,
                options: opts(Wait::Try),
            },
        )
        .unwrap_err();
    assert_eq!(e.code(), "INVALID_ARGUMENT");
    let e =
        h.m.start_operation(
            h.now,
            campaign("sched", &"x".repeat(MAX_CAMPAIGN_VALUE + 1), Wait::Try),
        )
        .unwrap_err();
    assert_eq!(e.code(), "INVALID_ARGUMENT");
    let e =
        h.m.start_operation(h.now, campaign("", "v", Wait::Try))
            .unwrap_err();
    assert_eq!(e.code(), "INVALID_ARGUMENT");
    assert!(h.take().is_empty());
}
