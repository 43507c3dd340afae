//! The session around a real Redis machine with scripted node answers.

use super::*;
use crate::core::operation::LockKind;
use crate::core::redis::{RedisConfig, RedisMachine, RedisNode};
use crate::core::{AcquireOptions, SeededEntropy, Wait};

fn session() -> Session<u32> {
    let node = RedisNode::upstash("http://127.0.0.1:1", "token");
    Session::new(Box::new(
        RedisMachine::new(RedisConfig::new(node), Box::new(SeededEntropy::new(1))).unwrap(),
    ))
}

fn drain(s: &mut Session<u32>) -> (Vec<Output<u32>>, Option<Millis>) {
    let mut out = Vec::new();
    loop {
        match s.poll_output() {
            Output::Wait { wake_at } => return (out, wake_at),
            o => out.push(o),
        }
    }
}

fn sends(out: &[Output<u32>]) -> Vec<RequestId> {
    out.iter()
        .filter_map(|o| {
            if let Output::Send(r) = o {
                Some(r.id)
            } else {
                None
            }
        })
        .collect()
}

const GRANTED: &[u8] = br#"{"result":[1,7,10000]}"#;

#[test]
fn an_unsupported_kind_is_refused_before_anything_is_sent() {
    // Redlock grants exclusive locks and permits, not shared holds.
    let nodes = (1..=3)
        .map(|p| RedisNode::upstash(format!("http://127.0.0.1:{p}"), "token"))
        .collect();
    let m = crate::core::redis::RedlockMachine::new(
        crate::core::redis::RedlockConfig::new(nodes),
        Box::new(SeededEntropy::new(1)),
    )
    .unwrap();
    let mut s: Session<u32> = Session::new(Box::new(m));
    let op = Operation::Acquire {
        name: "a".into(),
        kind: LockKind::Shared,
        options: AcquireOptions::default(),
    };
    let e = s.start(0, op, Some(1)).unwrap_err();
    assert_eq!(e.code(), "INVALID_ARGUMENT");
    let (out, wake) = drain(&mut s);
    assert!(out.is_empty() && wake.is_none(), "{out:?}");
    assert_eq!(s.live_count(), 0);
}

#[test]
fn a_completion_goes_to_its_caller_and_late_answers_are_dropped() {
    let mut s = session();
    s.start(
        0,
        Operation::acquire(
            "a",
            AcquireOptions {
                wait: Wait::Try,
                ttl_ms: None,
            },
        ),
        Some(11),
    )
    .unwrap();
    let (out, _) = drain(&mut s);
    let ids = sends(&out);
    assert_eq!(ids.len(), 1);
    assert_eq!(s.inflight(), 1);
    assert!(s.handle_input(
        5,
        Input::Response {
            id: ids[0],
            status: 200,
            body: GRANTED.to_vec()
        }
    ));
    let (out, wake) = drain(&mut s);
    let Some(Output::Done {
        reply: Some(11),
        result: Ok(Outcome::Acquired(info)),
        ..
    }) = out.first()
    else {
        panic!("{out:?}")
    };
    assert_eq!(info.fencing_token, 7);
    assert!(wake.is_some(), "the watchdog's timer");
    // The same request answered twice: dropped, the machine never sees it.
    assert!(!s.handle_input(
        6,
        Input::Response {
            id: ids[0],
            status: 200,
            body: GRANTED.to_vec()
        }
    ));
    assert_eq!(s.inflight(), 0);
}

#[test]
fn close_answers_every_caller_once_and_reports_held_locks_lost() {
    let mut s = session();
    s.start(
        0,
        Operation::acquire(
            "a",
            AcquireOptions {
                wait: Wait::Try,
                ttl_ms: None,
            },
        ),
        Some(1),
    )
    .unwrap();
    let (out, _) = drain(&mut s);
    s.handle_input(
        1,
        Input::Response {
            id: sends(&out)[0],
            status: 200,
            body: GRANTED.to_vec(),
        },
    );
    drain(&mut s);
    s.close(2, Some(20));
    s.close(2, Some(21));
    let (out, _) = drain(&mut s);
    assert!(
        out.iter()
            .any(|o| matches!(o, Output::Lost { error, .. } if error.code() == "LOST")),
        "{out:?}"
    );
    let release = sends(&out);
    assert_eq!(release.len(), 1, "the background release");
    assert!(!s.is_closed());
    s.handle_input(
        3,
        Input::Response {
            id: release[0],
            status: 200,
            body: br#"{"result":1}"#.to_vec(),
        },
    );
    let (out, _) = drain(&mut s);
    let closed: Vec<u32> = out
        .iter()
        .filter_map(|o| match o {
            Output::Done {
                reply: Some(r),
                result: Ok(Outcome::Closed),
                ..
            } => Some(*r),
            _ => None,
        })
        .collect();
    assert_eq!(closed, [20, 21]);
    assert!(s.is_closed());
    s.close(4, Some(22));
    assert!(matches!(
        s.poll_output(),
        Output::Done {
            reply: Some(22),
            result: Ok(Outcome::Closed),
            ..
        }
    ));
}

#[test]
fn cancel_ends_a_waiting_acquire_with_aborted_and_nothing_left() {
    let mut s = session();
    let op = s
        .start(
            0,
            Operation::acquire(
                "a",
                AcquireOptions {
                    wait: Wait::For(50),
                    ttl_ms: None,
                },
            ),
            Some(1),
        )
        .unwrap();
    let (out, _) = drain(&mut s);
    let first = sends(&out)[0];
    // Held by someone else: the waiter sleeps, then cancel ends it.
    s.handle_input(
        1,
        Input::Response {
            id: first,
            status: 200,
            body: br#"{"result":[0,3,5000]}"#.to_vec(),
        },
    );
    drain(&mut s);
    s.cancel(2, op);
    // A refused writer that gives up drops its writer intent (one request).
    let (out, _) = drain(&mut s);
    let leave = sends(&out);
    assert_eq!(leave.len(), 1, "{out:?}");
    s.handle_input(
        3,
        Input::Response {
            id: leave[0],
            status: 200,
            body: br#"{"result":1}"#.to_vec(),
        },
    );
    let (out, _) = drain(&mut s);
    assert!(out.iter().any(|o| matches!(o, Output::Done { reply: Some(1), result: Err(e), .. } if e.code() == "ABORTED")), "{out:?}");
    assert_eq!(s.live_count(), 0);
}
