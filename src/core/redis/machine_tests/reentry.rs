//! Reentrant holds (scripted answers): the REENTER script, a release's
//! decrement reply, hostile replies, and Redlock's quorum of counted holds.

use super::*;
use scripts::Script;

fn holding(h: &mut Harness<RedisMachine>) -> LockInfo {
    h.m.acquire(h.now, "job", &opts(Wait::Forever)).unwrap();
    let r = h.take();
    h.answer(&r[0], r#"{"result":[1,7,0]}"#);
    acquired(&h.take_events())
}

fn released(events: &[Event]) -> bool {
    match events {
        [Event::Completed {
            result: Ok(Outcome::Released {
                held_until_release, ..
            }),
            ..
        }] => *held_until_release,
        other => panic!("not one release: {other:?}"),
    }
}

#[test]
fn a_reentry_is_one_owner_checked_script_and_a_decrement_keeps_the_key() {
    let mut h = single(|_| {});
    let outer = holding(&mut h);
    h.m.start(
        h.now,
        Operation::Reenter {
            handle: outer.handle.clone(),
        },
    )
    .unwrap();
    let r = h.take();
    assert_eq!(r.len(), 1, "one request");
    assert_eq!(script_of(&r[0]), Script::Reenter);
    let a = args(&r[0]);
    assert_eq!(a[2..5], ["2", "{edgelock:job}", "{edgelock:job}:holds"]);
    assert_eq!(a[5], outer.handle.owner, "owner-checked by the token");
    let member = a[6].clone();
    assert!(
        member.len() == 16 && member != "+",
        "a member of its own: {member}"
    );
    h.answer(&r[0], r#"{"result":[1,2,9000]}"#);
    let inner = acquired(&h.take_events());
    assert_ne!(inner.id, outer.id);
    assert_eq!(inner.fencing_token, 7, "the outer hold's token");
    assert_eq!(inner.handle, outer.handle);
    assert!(inner.expires_at > h.now && inner.expires_at <= h.now + 9000);

    // Outer first: the node answers 2 (one hold taken away).
    h.m.release(h.now, outer.id).unwrap();
    let r = h.take();
    assert_eq!(script_of(&r[0]), Script::Release);
    assert_eq!(args(&r[0])[7], "{edgelock:job}:holds");
    assert_eq!(args(&r[0])[11], "+", "the outer hold's member");
    h.answer(&r[0], r#"{"result":2}"#);
    assert!(released(&h.take_events()));
    h.m.release(h.now, inner.id).unwrap();
    let r = h.take();
    assert_eq!(args(&r[0])[11], member, "the inner hold's own member");
    h.answer(&r[0], r#"{"result":1}"#);
    assert!(released(&h.take_events()));
    assert_eq!(h.m.live_count(), 0);
}

#[test]
fn a_handle_no_longer_held_is_lost() {
    let mut h = single(|_| {});
    let outer = holding(&mut h);
    h.m.start(
        h.now,
        Operation::Reenter {
            handle: outer.handle.clone(),
        },
    )
    .unwrap();
    let r = h.take();
    h.answer(&r[0], r#"{"result":[0,0,0]}"#);
    let ev = h.take_events();
    assert!(
        matches!(
            &ev[..],
            [Event::Completed {
                result: Err(LockError::Lost { .. }),
                ..
            }]
        ),
        "{ev:?}"
    );
}

#[test]
fn hostile_reenter_replies_are_errors_without_the_owner() {
    for body in [
        r#"{"result":[1,1,9000]}"#,
        r#"{"result":[1,2,-1]}"#,
        r#"{"result":[1,2]}"#,
        r#"{"result":"OK"}"#,
        r#"{"result":[2,2,9000]}"#,
        r#"{"error":"ERR boom"}"#,
        r#"{not json"#,
    ] {
        let mut h = single(|_| {});
        let outer = holding(&mut h);
        h.m.start(
            h.now,
            Operation::Reenter {
                handle: outer.handle.clone(),
            },
        )
        .unwrap();
        let r = h.take();
        h.answer(&r[0], body);
        // The hold may have been counted: it is released again first.
        for r in h.take() {
            assert_eq!(script_of(&r), Script::Release, "{body}");
            h.answer(&r, r#"{"result":0}"#);
        }
        let ev = h.take_events();
        let [Event::Completed { result: Err(e), .. }] = &ev[..] else {
            panic!("{body}: {ev:?}");
        };
        assert!(!e.to_string().contains(&outer.handle.owner), "{e}");
        assert!(!format!("{e:?}").contains(&outer.handle.owner), "{e:?}");
    }
    // A release answered with a count the script never returns.
    let mut h = single(|_| {});
    let outer = holding(&mut h);
    h.m.release(h.now, outer.id).unwrap();
    let r = h.take();
    h.answer(&r[0], r#"{"result":3}"#);
    let ev = h.take_events();
    assert!(
        matches!(&ev[..], [Event::Completed { result: Err(_), .. }]),
        "{ev:?}"
    );
}

#[test]
fn other_kinds_refuse_reentry_before_sending() {
    let mut h = single(|_| {});
    let outer = holding(&mut h);
    for kind in [
        LockKind::Shared,
        LockKind::Permits { limit: 2 },
        LockKind::Leader,
    ] {
        let mut handle = outer.handle.clone();
        handle.kind = kind;
        let e = h.m.start(h.now, Operation::Reenter { handle }).unwrap_err();
        assert_eq!(e.code(), "INVALID_ARGUMENT", "{kind:?}");
    }
    let mut other = outer.handle.clone();
    other.key = "{edgelock:other}".into();
    assert_eq!(
        h.m.start(h.now, Operation::Reenter { handle: other })
            .unwrap_err()
            .code(),
        "INVALID_ARGUMENT"
    );
    assert!(h.take().is_empty());
}

fn redlock_holding(h: &mut Harness<RedlockMachine>) -> LockInfo {
    h.m.acquire(h.now, "job", &opts(Wait::Forever)).unwrap();
    for r in h.take() {
        h.answer(&r, r#"{"result":[1,7,0]}"#);
    }
    acquired(&h.take_events())
}

fn reenter(h: &mut Harness<RedlockMachine>, handle: &LockHandle) -> Vec<HttpRequest> {
    h.m.start(
        h.now,
        Operation::Reenter {
            handle: handle.clone(),
        },
    )
    .unwrap();
    h.take()
}

fn failed(events: &[Event]) -> &LockError {
    match events {
        [Event::Completed { result: Err(e), .. }] => e,
        other => panic!("not one failure: {other:?}"),
    }
}

#[test]
fn redlock_reentry_is_one_round_granted_on_a_quorum_and_released_everywhere() {
    let mut h = redlock(3, |_| {});
    let outer = redlock_holding(&mut h);
    let r = reenter(&mut h, &outer.handle);
    assert_eq!(r.len(), 3, "one request per node");
    assert!(r.iter().all(|r| script_of(r) == Script::Reenter));
    let member = args(&r[0])[6].clone();
    assert!(r.iter().all(|r| args(r)[6] == member), "one hold id");
    // Two nodes count it (quorum), the third is unreachable.
    h.answer(&r[0], r#"{"result":[1,2,9000]}"#);
    h.answer(&r[1], r#"{"result":[1,2,8000]}"#);
    h.fail(&r[2]);
    let inner = acquired(&h.take_events());
    assert_eq!(inner.fencing_token, outer.fencing_token, "the outer token");
    assert_eq!(inner.handle, outer.handle);
    // The quorum's lifetime (the 2nd largest PTTL) less the drift.
    assert_eq!(inner.expires_at, h.now + 8000 - 82);
    assert!(h.take().is_empty(), "nothing to undo");

    // Its extend names it: only nodes that know the hold vouch for it.
    h.m.extend(h.now, inner.id, None).unwrap();
    let r = h.take();
    assert_eq!(r.len(), 3);
    for req in &r {
        assert_eq!(script_of(req), Script::Extend);
        assert_eq!(args(req).last().unwrap(), &member);
    }
    h.answer(&r[0], r#"{"result":[1,7]}"#);
    h.answer(&r[1], r#"{"result":[1,7]}"#);
    h.answer(&r[2], r#"{"result":[0,7]}"#);
    let ev = h.take_events();
    assert!(
        matches!(
            &ev[..],
            [Event::Completed {
                result: Ok(Outcome::Extended { .. }),
                ..
            }]
        ),
        "{ev:?}"
    );

    // Its release: the release script with its own hold id on every node.
    h.m.release(h.now, inner.id).unwrap();
    let r = h.take();
    assert_eq!(r.len(), 3);
    for req in &r {
        assert_eq!(script_of(req), Script::Release);
        assert_eq!(args(req)[11], member);
    }
    h.answer(&r[0], r#"{"result":2}"#);
    h.answer(&r[1], r#"{"result":2}"#);
    // The node that missed the re-entry does not know the hold: nothing.
    h.answer(&r[2], r#"{"result":0}"#);
    assert!(released(&h.take_events()));
    h.m.release(h.now, outer.id).unwrap();
    let r = h.take();
    assert!(r.iter().all(|req| args(req)[11] == "+"));
    h.answer(&r[0], r#"{"result":1}"#);
    h.answer(&r[1], r#"{"result":1}"#);
    h.answer(&r[2], r#"{"result":0}"#);
    assert!(released(&h.take_events()));
    assert_eq!(h.m.live_count(), 0);
}

#[test]
fn redlock_reentry_without_a_quorum_releases_the_hold_where_it_may_be_counted() {
    let mut h = redlock(3, |_| {});
    let outer = redlock_holding(&mut h);
    let r = reenter(&mut h, &outer.handle);
    let member = args(&r[0])[6].clone();
    // One node counted it, two say the owner's key is gone.
    h.answer(&r[0], r#"{"result":[1,2,9000]}"#);
    h.answer(&r[1], r#"{"result":[0,0,0]}"#);
    h.answer(&r[2], r#"{"result":[0,0,0]}"#);
    assert!(h.take_events().is_empty(), "not before the cleanup");
    let c = h.take();
    assert_eq!(c.len(), 1, "only where it was counted");
    assert_eq!(c[0].target, r[0].target);
    assert_eq!(script_of(&c[0]), Script::Release);
    assert_eq!(args(&c[0])[11], member, "the re-entry's own hold id");
    h.answer(&c[0], r#"{"result":1}"#);
    assert_eq!(failed(&h.take_events()).code(), "LOST");

    // Too few answers to tell: the round's error; a timed-out node may have
    // counted it, a refused connection did not.
    let r = reenter(&mut h, &outer.handle);
    h.answer(&r[0], r#"{"result":[1,2,9000]}"#);
    h.answer(&r[1], r#"{"error":"ERR boom"}"#);
    h.fail(&r[2]);
    let c = h.take();
    assert_eq!(c.len(), 2);
    assert!(c.iter().all(|c| script_of(c) == Script::Release));
    assert!(c.iter().all(|c| c.target != r[2].target));
    for c in &c {
        h.answer(c, r#"{"result":0}"#);
    }
    let e = failed(&h.take_events()).clone();
    assert_ne!(e.code(), "LOST", "{e}");
    assert!(!e.to_string().contains(&outer.handle.owner), "{e}");

    // A quorum counted it but the lock's validity is over: forgotten too.
    let r = reenter(&mut h, &outer.handle);
    for req in &r {
        h.answer(req, r#"{"result":[1,2,2]}"#);
    }
    let c = h.take();
    assert_eq!(c.len(), 3);
    for c in &c {
        h.answer(c, r#"{"result":1}"#);
    }
    assert_eq!(failed(&h.take_events()).code(), "LOST");
    // The outer hold is untouched.
    assert_eq!(h.m.live_count(), 1);
}
