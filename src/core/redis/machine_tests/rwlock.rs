//! Read-write locks at the machine level (one node), with scripted answers:
//! which script each step of a reader runs on which keys, what a reader's
//! handle holds, how a waiting reader and a waiting writer behave, and that
//! Redlock refuses readers everywhere.

use super::*;
use crate::core::redis::scripts::Script;

fn shared(wait: Wait) -> Operation {
    Operation::Acquire {
        name: "cfg".into(),
        kind: LockKind::Shared,
        options: opts(wait),
    }
}

fn single_push() -> Harness<RedisMachine> {
    let mut cfg = RedisConfig::new(RedisNode::upstash("http://10.0.0.1:8080", "tok-secret"));
    (cfg.retry_delay_ms, cfg.retry_jitter_ms) = (200, 0);
    Harness::new(RedisMachine::new(cfg, Box::new(SeededEntropy::new(7))).unwrap())
}

/// A reader's acquire, renewal, extend and release: one request each, on
/// the readers' set, the handle a shared one.
#[test]
fn a_reader_runs_the_shared_scripts_one_request_each() {
    let mut h = single(|_| {});
    h.m.start_operation(h.now, shared(Wait::Forever)).unwrap();
    let r = h.take();
    assert_eq!(r.len(), 1);
    assert_eq!(script_of(&r[0]), Script::AcquireShared);
    assert_eq!(
        args(&r[0])[2..6],
        [
            "4",
            "{edgelock:cfg}",
            "{edgelock:cfg}:fence",
            "{edgelock:cfg}:readers"
        ]
    );
    h.answer(&r[0], r#"{"result":[1,12,0]}"#);
    let lock = acquired(&h.take_events());
    assert_eq!(
        (lock.kind(), lock.fencing_token, lock.handle.key.as_str()),
        (LockKind::Shared, 12, "{edgelock:cfg}:readers")
    );
    assert!(
        !format!("{lock:?}").contains(&lock.handle.owner),
        "the token stays out of Debug"
    );
    // The watchdog renews the reader's lease.
    h.advance_to(h.next_timer());
    let r = h.take();
    assert_eq!(script_of(&r[0]), Script::ExtendShared);
    assert_eq!(
        args(&r[0])[3..5],
        ["{edgelock:cfg}:readers", "{edgelock:cfg}:fence"]
    );
    assert_eq!(args(&r[0])[5], lock.handle.owner);
    assert_eq!(args(&r[0])[7], "12", "the token is the fencing floor");
    h.answer(&r[0], r#"{"result":[1,12]}"#);
    assert!(matches!(
        h.take_events().as_slice(),
        [Event::Renewed { .. }]
    ));
    h.m.extend(h.now, lock.id, Some(20_000)).unwrap();
    let r = h.take();
    assert_eq!(
        (script_of(&r[0]), args(&r[0])[6].as_str()),
        (Script::ExtendShared, "20000")
    );
    h.answer(&r[0], r#"{"result":[1,12]}"#);
    h.take_events();
    h.m.release(h.now, lock.id).unwrap();
    let r = h.take();
    assert_eq!(script_of(&r[0]), Script::ReleaseShared);
    assert_eq!(
        args(&r[0])[3..8],
        [
            "{edgelock:cfg}",
            "{edgelock:cfg}:fence",
            "{edgelock:cfg}:queue",
            "{edgelock:cfg}:leases",
            "{edgelock:cfg}:readers"
        ]
    );
    h.answer(&r[0], r#"{"result":1}"#);
    assert!(matches!(
        h.take_events().as_slice(),
        [Event::Completed {
            result: Ok(Outcome::Released {
                held_until_release: true,
                ..
            }),
            ..
        }]
    ));
}

/// A renewal that finds the reader gone loses the hold (never re-creates it).
#[test]
fn a_reader_whose_member_is_gone_is_lost() {
    let mut h = single(|_| {});
    h.m.start_operation(h.now, shared(Wait::Forever)).unwrap();
    let r = h.take();
    h.answer(&r[0], r#"{"result":[1,3,0]}"#);
    let lock = acquired(&h.take_events());
    h.advance_to(h.next_timer());
    let r = h.take();
    h.answer(&r[0], r#"{"result":[0,3]}"#);
    assert!(matches!(
        h.take_events().as_slice(),
        [Event::Lost {
            reason: LostReason::KeyGone,
            ..
        }]
    ));
    // Its keys are cleaned up, owner-checked, by the reader's release.
    assert_eq!(script_of(&h.take()[0]), Script::ReleaseShared);
    assert!(h.m.extend(h.now, lock.id, None).is_ok());
    assert!(matches!(
        h.take_events().as_slice(),
        [Event::Completed {
            result: Err(LockError::NotHeld { .. }),
            ..
        }]
    ));
}

/// A try meets a writer (or its intent): not acquired, nothing left behind.
/// A waiting reader subscribes to the lock's channel but never joins the
/// queue; a release naming a queued writer does not wake it, one naming
/// nobody does.
#[test]
fn a_waiting_reader_listens_without_queueing() {
    let mut h = single_push();
    h.m.start_operation(h.now, shared(Wait::Try)).unwrap();
    let r = h.take();
    h.answer(&r[0], r#"{"result":[0,4,5000]}"#);
    assert!(matches!(
        h.take_events().as_slice(),
        [Event::Completed {
            result: Ok(Outcome::NotAcquired),
            ..
        }]
    ));
    assert!(h.take().is_empty(), "a refused try sends nothing more");
    h.m.start_operation(h.now, shared(Wait::Forever)).unwrap();
    let r = h.take();
    h.answer(&r[0], r#"{"result":[0,4,5000]}"#);
    let (streams, rounds) = h.take_split();
    assert!(rounds.is_empty());
    assert_eq!(streams.len(), 1);
    assert!(streams[0].target.to_string().ends_with(
        &crate::core::redis::subscription::wake_channel("{edgelock:cfg}")
    ));
    h.chunk(&streams[0], "data: subscribe,c,1\n\n");
    let r = h.take();
    assert_eq!(
        script_of(&r[0]),
        Script::AcquireShared,
        "a reader never runs the queued acquire"
    );
    h.answer(&r[0], r#"{"result":[0,4,5000]}"#);
    h.now += 10;
    h.chunk(&streams[0], "data: message,c,released:4:awriter\n\n");
    assert!(
        h.take().is_empty(),
        "a release handing over to a queued writer"
    );
    h.now += 10;
    h.chunk(&streams[0], "data: message,c,released:5\n\n");
    let r = h.take();
    assert_eq!(script_of(&r[0]), Script::AcquireShared, "woken at once");
    h.answer(&r[0], r#"{"result":[1,6,0]}"#);
    assert_eq!(acquired(&h.take_events()).fencing_token, 6);
}

/// A writer that will wait sets the writer intent with every attempt (the
/// queue lease's length); a try never does.
#[test]
fn a_waiting_writer_sets_the_intent_and_a_try_does_not() {
    let mut h = single_push();
    h.m.acquire(h.now, "cfg", &opts(Wait::Try)).unwrap();
    let r = h.take();
    assert_eq!(script_of(&r[0]), Script::Acquire);
    assert_eq!(
        args(&r[0])[3..10],
        [
            "{edgelock:cfg}",
            "{edgelock:cfg}:fence",
            "{edgelock:cfg}:readers",
            "{edgelock:cfg}:wintent",
            "{edgelock:cfg}:queue",
            "{edgelock:cfg}:leases",
            "{edgelock:cfg}:bypass"
        ]
    );
    // ARGV[4], the writer intent: not set by a try.
    assert_eq!(args(&r[0])[13], "0");
    h.answer(&r[0], r#"{"result":[0,4,700]}"#);
    h.take_events();
    let op = h.m.acquire(h.now, "cfg", &opts(Wait::Forever)).unwrap();
    let r = h.take();
    assert_eq!(args(&r[0])[13], "6000");
    // Readers hold (the wait is the last reader's lease end): it subscribes,
    // then queues, setting the intent again.
    h.answer(&r[0], r#"{"result":[0,4,700]}"#);
    let (streams, _) = h.take_split();
    h.chunk(&streams[0], "data: subscribe,c,1\n\n");
    let r = h.take();
    assert_eq!(script_of(&r[0]), Script::AcquireQueued);
    assert_eq!(
        args(&r[0])[7..9],
        ["{edgelock:cfg}:readers", "{edgelock:cfg}:wintent"]
    );
    assert_eq!(args(&r[0]).last().map(String::as_str), Some("6000"));
    h.answer(&r[0], r#"{"result":[0,4,700]}"#);
    assert_eq!(
        h.next_timer(),
        h.now + 700,
        "the readers' lease end is the writer's timer"
    );
    // Giving up, it leaves the queue and drops its intent.
    h.m.cancel(h.now, op);
    let r = h.take();
    let leave: Vec<&HttpRequest> = r.iter().filter(|q| !q.stream).collect();
    assert_eq!(leave.len(), 1);
    assert_eq!(script_of(leave[0]), Script::Leave);
    assert_eq!(
        args(leave[0])[2..9],
        [
            "6",
            "{edgelock:cfg}",
            "{edgelock:cfg}:fence",
            "{edgelock:cfg}:queue",
            "{edgelock:cfg}:leases",
            "{edgelock:cfg}:wintent",
            "{edgelock:cfg}:bypass"
        ]
    );
}

/// A writer refused once that gives up before it queued still drops its intent.
#[test]
fn a_writer_that_gives_up_after_one_attempt_drops_its_intent() {
    let mut h = single(|_| {});
    let op = h.m.acquire(h.now, "cfg", &opts(Wait::Forever)).unwrap();
    let r = h.take();
    assert_eq!(script_of(&r[0]), Script::Acquire);
    h.answer(&r[0], r#"{"result":[0,4,5000]}"#);
    assert!(h.take().is_empty(), "asleep (no subscription here)");
    h.m.cancel(h.now, op);
    let r = h.take();
    assert_eq!(script_of(&r[0]), Script::Leave);
    h.answer(&r[0], r#"{"result":1}"#);
    assert!(matches!(
        h.take_events().as_slice(),
        [Event::Completed {
            result: Err(LockError::Aborted { .. }),
            ..
        }]
    ));
    // A try never set one: nothing to drop.
    h.m.acquire(h.now, "cfg", &opts(Wait::Try)).unwrap();
    let r = h.take();
    h.answer(&r[0], r#"{"result":[0,4,5000]}"#);
    assert!(h.take().is_empty());
}

/// A reader's handle resumes as a reader (membership checked); Redlock
/// refuses readers before sending anything, and their handles too.
#[test]
fn a_reader_resumes_as_a_reader_and_redlock_refuses_readers() {
    let mut h = single(|_| {});
    h.m.start_operation(h.now, shared(Wait::Forever)).unwrap();
    let r = h.take();
    h.answer(&r[0], r#"{"result":[1,3,0]}"#);
    let lock = acquired(&h.take_events());
    let mut other = single(|_| {});
    other.m.resume(other.now, &lock.handle).unwrap();
    let r = other.take();
    assert_eq!(script_of(&r[0]), Script::StatusShared);
    assert_eq!(args(&r[0])[3], "{edgelock:cfg}:readers");
    other.answer(&r[0], r#"{"result":[1,1,9000,3]}"#);
    let resumed = acquired(&other.take_events());
    assert_eq!(
        (resumed.kind(), resumed.fencing_token),
        (LockKind::Shared, 3)
    );
    other.m.release(other.now, resumed.id).unwrap();
    assert_eq!(script_of(&other.take()[0]), Script::ReleaseShared);
    // Gone: lost. A reader's handle on the writer's key: refused.
    other.m.resume(other.now, &lock.handle).unwrap();
    let r = other.take();
    other.answer(&r[0], r#"{"result":[0,0,-2,3]}"#);
    assert!(matches!(
        other.take_events().as_slice(),
        [Event::Completed {
            result: Err(LockError::Lost { .. }),
            ..
        }]
    ));
    let bad = LockHandle {
        key: "{edgelock:cfg}".into(),
        ..lock.handle.clone()
    };
    assert_eq!(
        other.m.resume(other.now, &bad).unwrap_err().code(),
        "INVALID_ARGUMENT"
    );
    let mut r = redlock(3, |_| {});
    let h2 = LockHandle {
        backend: BackendKind::Redlock,
        ..lock.handle.clone()
    };
    assert_eq!(
        r.m.resume(r.now, &h2).unwrap_err().code(),
        "INVALID_ARGUMENT"
    );
    assert_eq!(
        r.m.start_operation(r.now, shared(Wait::Try))
            .unwrap_err()
            .code(),
        "INVALID_ARGUMENT"
    );
    assert!(r.take().is_empty());
}

/// Inspect lists the live readers as shared holders (no ids, no tokens),
/// and the time until the last one leaves.
#[test]
fn inspect_lists_readers_by_count() {
    let mut h = single(|_| {});
    h.m.inspect(h.now, "cfg").unwrap();
    let r = h.take();
    assert_eq!(
        args(&r[0])[2..7],
        [
            "4",
            "{edgelock:cfg}",
            "{edgelock:cfg}:fence",
            "{edgelock:cfg}:limit",
            "{edgelock:cfg}:readers"
        ]
    );
    h.answer(&r[0], r#"{"result":[0,-2,9,0,3,2500]}"#);
    match h.take_events().as_slice() {
        [Event::Completed {
            result: Ok(Outcome::Inspected(s)),
            ..
        }] => {
            assert!(s.held);
            assert_eq!(
                s.holders,
                vec![
                    Holder {
                        id: String::new(),
                        kind: LockKind::Shared,
                        slot: None,
                        fencing_token: None
                    };
                    3
                ]
            );
            assert_eq!((s.remaining_ms, s.fencing_token), (Some(2500), Some(9)));
        }
        other => panic!("{other:?}"),
    }
}

use proptest::strategy::Strategy;

proptest::proptest! {
    /// Hostile replies to the reader's and the writer's scripts (near the
    /// real shapes, or any integers) never panic the machine; whatever it
    /// grants is of the kind asked for, on that kind's key.
    #[test]
    fn hostile_replies_never_panic_nor_grant_the_wrong_kind(
        writer in proptest::bool::ANY,
        replies in proptest::collection::vec(
            proptest::prop_oneof![
                (-1i64..3, -1i64..10, -3i64..5000).prop_map(|(a, b, c)| vec![a, b, c]),
                (-1i64..3, -1i64..10, -3i64..5, -1i64..4, -1i64..4, -3i64..5000).prop_map(|(a, b, c, d, e, f)| vec![a, b, c, d, e, f]),
                proptest::collection::vec(-3i64..200, 0..8),
            ],
            1..40,
        ),
    ) {
        let mut cfg = RedisConfig::new(RedisNode::upstash("http://10.0.0.1:8080", "tok-secret"));
        cfg.max_subscriptions = 0;
        let mut h = Harness::new(RedisMachine::new(cfg, Box::new(SeededEntropy::new(5))).unwrap());
        let kind = if writer { LockKind::Exclusive } else { LockKind::Shared };
        let op = Operation::Acquire { name: "cfg".into(), kind, options: opts(Wait::For(2_000)) };
        h.m.start_operation(h.now, op).unwrap();
        h.m.inspect(h.now, "cfg").unwrap();
        let mut replies = replies.into_iter().cycle().take(200);
        for _ in 0..200 {
            let reqs = h.take();
            if reqs.is_empty() {
                match h.m.poll_timeout() {
                    Some(t) => h.advance_to(t.max(h.now)),
                    None => break,
                }
                continue;
            }
            for r in &reqs {
                let v = replies.next().unwrap_or_default();
                h.answer(r, &format!(r#"{{"result":{v:?}}}"#));
            }
        }
        for e in h.take_events() {
            if let Event::Completed { result: Ok(Outcome::Acquired(l)), .. } = e {
                proptest::prop_assert_eq!(l.kind(), kind);
                let key = if writer { "{edgelock:cfg}" } else { "{edgelock:cfg}:readers" };
                proptest::prop_assert_eq!(l.handle.key.as_str(), key);
            }
        }
    }
}
