//! Reentrant holds on one Redis node (scripted answers): the REENTER
//! script, a release's decrement reply, hostile replies, Redlock's refusal.

use super::*;
use scripts::Script;

fn args_of(req: &HttpRequest) -> Vec<String> {
    serde_json::from_slice(&req.body).unwrap()
}

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
    let a = args_of(&r[0]);
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
    assert_eq!(args_of(&r[0])[7], "{edgelock:job}:holds");
    assert_eq!(args_of(&r[0])[11], "+", "the outer hold's member");
    h.answer(&r[0], r#"{"result":2}"#);
    assert!(released(&h.take_events()));
    h.m.release(h.now, inner.id).unwrap();
    let r = h.take();
    assert_eq!(args_of(&r[0])[11], member, "the inner hold's own member");
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
fn redlock_and_other_kinds_refuse_reentry_before_sending() {
    let mut h = redlock(3, |_| {});
    let handle = LockHandle {
        v: 1,
        backend: BackendKind::Redlock,
        name: "job".into(),
        key: "{edgelock:job}".into(),
        owner: "a".repeat(40),
        fencing_token: 3,
        revision: 3,
        kind: LockKind::Exclusive,
        slot: None,
    };
    let e = h.m.start(h.now, Operation::Reenter { handle }).unwrap_err();
    assert_eq!(e.code(), "INVALID_ARGUMENT");
    assert!(
        e.to_string()
            .contains("redlock backend does not offer reentrant locks"),
        "{e}"
    );
    assert!(h.take().is_empty());

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
