//! `MultiLock` around a real core machine (one Redis node) with scripted
//! node answers.

use super::*;
use crate::core::redis::scripts::Script;
use crate::core::redis::{RedisConfig, RedisMachine, RedisNode};
use crate::core::types::{HttpRequest, RequestId};
use crate::core::{LockMachineExt, SeededEntropy};

struct Harness {
    m: MultiLock<RedisMachine>,
    now: Millis,
    sent: Vec<HttpRequest>,
    cancelled: Vec<RequestId>,
    events: Vec<Event>,
    /// Every (script, name) sent so far, in order.
    log: Vec<(Script, String)>,
}

fn harness(ttl_ms: u64) -> Harness {
    let mut cfg = RedisConfig::new(RedisNode::upstash("http://10.0.0.1:8080", "tok"));
    cfg.max_subscriptions = 0;
    cfg.retry_jitter_ms = 0;
    cfg.ttl_ms = ttl_ms;
    let inner = RedisMachine::new(cfg, Box::new(SeededEntropy::new(7))).unwrap();
    Harness {
        m: MultiLock::new(inner),
        now: 1_000,
        sent: Vec::new(),
        cancelled: Vec::new(),
        events: Vec::new(),
        log: Vec::new(),
    }
}

/// The script a request runs; a waiter's queued attempt counts as an acquire.
fn script_of(req: &HttpRequest) -> Script {
    let args: Vec<String> = serde_json::from_slice(&req.body).unwrap();
    let s = Script::from_text(args[1].as_bytes())
        .or_else(|| Script::from_sha1(args[1].as_bytes()))
        .unwrap();
    if s == Script::AcquireQueued {
        Script::Acquire
    } else {
        s
    }
}

/// The lock name a request is about: its lock key is `{<prefix>:<name>}`.
fn name_of(req: &HttpRequest) -> String {
    let args: Vec<String> = serde_json::from_slice(&req.body).unwrap();
    let key = args
        .iter()
        .skip(2)
        .find(|a| a.starts_with('{') && a.ends_with('}'))
        .unwrap_or_else(|| panic!("no lock key in {args:?}"));
    let inner = &key[1..key.len() - 1];
    inner.split_once(':').unwrap().1.to_string()
}

fn all(names: &[&str], wait: Wait) -> Operation {
    Operation::AcquireAll {
        names: names.iter().map(|n| n.to_string()).collect(),
        options: AcquireOptions { wait, ttl_ms: None },
    }
}

impl Harness {
    fn drain(&mut self) {
        loop {
            let mut any = false;
            while let Some(t) = self.m.poll_transmit() {
                any = true;
                match t {
                    Transmit::Send(r) => {
                        self.log.push((script_of(&r), name_of(&r)));
                        self.sent.push(r);
                    }
                    t @ (Transmit::Open(_) | Transmit::Write { .. }) => {
                        panic!("an HTTP machine opened a byte stream: {t:?}")
                    }
                    Transmit::Cancel(id) => self.cancelled.push(id),
                }
            }
            while let Some(e) = self.m.poll_event() {
                any = true;
                self.events.push(e);
            }
            if !any {
                break;
            }
        }
    }

    fn take(&mut self) -> Vec<HttpRequest> {
        self.drain();
        std::mem::take(&mut self.sent)
    }

    fn take_events(&mut self) -> Vec<Event> {
        self.drain();
        std::mem::take(&mut self.events)
    }

    fn answer(&mut self, req: &HttpRequest, body: &str) {
        self.m.handle_input(
            self.now,
            Input::Response {
                id: req.id,
                status: 200,
                body: body.as_bytes().to_vec(),
            },
        );
        self.drain();
    }

    /// Exactly one request in flight: takes it and checks what it is.
    fn expect(&mut self, script: Script, name: &str) -> HttpRequest {
        let mut r = self.take();
        assert_eq!(r.len(), 1, "{:?}", self.log);
        let r = r.remove(0);
        assert_eq!((script_of(&r), name_of(&r)), (script, name.to_string()));
        r
    }

    /// Answers every request (and every request those answers cause) with
    /// `reply`, until nothing is in flight.
    fn serve(&mut self, reply: &mut dyn FnMut(Script, &str) -> String) {
        loop {
            let reqs = self.take();
            if reqs.is_empty() {
                return;
            }
            for r in reqs {
                let body = reply(script_of(&r), &name_of(&r));
                self.answer(&r, &body);
            }
        }
    }

    fn advance_to(&mut self, t: Millis) {
        self.now = t;
        self.m.handle_timeout(t);
        self.drain();
    }

    fn released(&self) -> Vec<String> {
        self.log
            .iter()
            .filter(|(s, _)| *s == Script::Release)
            .map(|(_, n)| n.clone())
            .collect()
    }

    fn acquire_attempts(&self) -> Vec<String> {
        self.log
            .iter()
            .filter(|(s, _)| *s == Script::Acquire)
            .map(|(_, n)| n.clone())
            .collect()
    }
}

const GRANTED: &str = r#"{"result":[1,1,0]}"#;
const REFUSED: &str = r#"{"result":[0,9,5000]}"#;
const DELETED: &str = r#"{"result":1}"#;

fn granted(token: u64) -> String {
    format!(r#"{{"result":[1,{token},0]}}"#)
}

#[test]
fn names_are_taken_one_at_a_time_in_canonical_order_and_reported_in_the_callers_order() {
    let mut h = harness(30_000);
    let group = h.m.start(h.now, all(&["c", "a", "b"], Wait::Try)).unwrap();
    // One name at a time: the next is asked for only once the previous is held.
    let r = h.expect(Script::Acquire, "a");
    h.answer(&r, &granted(11));
    let r = h.expect(Script::Acquire, "b");
    // A plain acquire meanwhile passes through with its own, distinct id.
    let plain = h.m.acquire(h.now, "z", &AcquireOptions::default()).unwrap();
    assert_ne!(plain, group);
    let z = h.take();
    assert_eq!(z.len(), 1);
    h.answer(&z[0], &granted(99));
    h.answer(&r, &granted(12));
    let r = h.expect(Script::Acquire, "c");
    h.answer(&r, &granted(13));
    let events = h.take_events();
    assert_eq!(
        events.len(),
        2,
        "the sub-acquires' completions are swallowed: {events:?}"
    );
    let Event::Completed {
        op,
        result: Ok(Outcome::Acquired(z_lock)),
    } = &events[0]
    else {
        panic!("{events:?}")
    };
    assert_eq!((*op, z_lock.name.as_str()), (plain, "z"));
    let Event::Completed {
        op,
        result: Ok(Outcome::AcquiredAll(locks)),
    } = &events[1]
    else {
        panic!("{events:?}")
    };
    assert_eq!(*op, group);
    let got: Vec<(&str, u64)> = locks
        .iter()
        .map(|l| (l.name.as_str(), l.fencing_token))
        .collect();
    assert_eq!(got, [("c", 13), ("a", 11), ("b", 12)]);
    let mut ids: Vec<LockId> = locks.iter().map(|l| l.id).chain([z_lock.id]).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 4, "every lock has its own id");
    // Later operations never reuse the group's id.
    for l in locks {
        let op = h.m.release(h.now, l.id).unwrap();
        assert_ne!(op, group);
        assert_ne!(op, plain);
        h.serve(&mut |_, _| DELETED.into());
    }
    let released: Vec<OpId> = h
        .take_events()
        .into_iter()
        .map(|e| match e {
            Event::Completed {
                op,
                result: Ok(Outcome::Released { .. }),
            } => op,
            e => panic!("{e:?}"),
        })
        .collect();
    assert_eq!(released.len(), 3);
    assert_eq!(h.m.live_count(), 1, "only the plain lock is left");
}

#[test]
fn a_try_that_finds_the_second_name_held_releases_the_first_before_not_acquired() {
    let mut h = harness(30_000);
    let group = h.m.start(h.now, all(&["b", "a", "c"], Wait::Try)).unwrap();
    let r = h.expect(Script::Acquire, "a");
    h.answer(&r, GRANTED);
    let r = h.expect(Script::Acquire, "b");
    h.answer(&r, REFUSED);
    let del = h.expect(Script::Release, "a");
    assert!(
        h.take_events().is_empty(),
        "the group waits for the release before completing"
    );
    assert_eq!(h.m.live_count(), 2, "the group and the lock being released");
    h.answer(&del, DELETED);
    assert_eq!(
        h.take_events(),
        [Event::Completed {
            op: group,
            result: Ok(Outcome::NotAcquired)
        }]
    );
    assert_eq!(h.acquire_attempts(), ["a", "b"], "c is never asked for");
    assert_eq!(h.m.live_count(), 0);
    assert!(h.take().is_empty());
}

#[test]
fn a_wait_that_runs_out_midway_releases_what_it_took() {
    let mut h = harness(30_000);
    let start = h.now;
    let group =
        h.m.start(h.now, all(&["a", "b"], Wait::For(1_000)))
            .unwrap();
    let r = h.expect(Script::Acquire, "a");
    h.now += 400; // the first name took 400 ms of the bound
    h.answer(&r, GRANTED);
    // The second step waits what is left of the bound: it times out at
    // start + 1000, not 400 + 1000.
    loop {
        h.serve(&mut |script, name| match (script, name) {
            (Script::Acquire, "b") => REFUSED.into(),
            _ => DELETED.into(),
        });
        if !h.events.is_empty() {
            break;
        }
        let t = h.m.poll_timeout().expect("a timer");
        assert!(t <= start + 1_000, "{t}");
        h.advance_to(t);
    }
    assert_eq!(h.now, start + 1_000);
    let ev = h.take_events();
    assert!(
        matches!(
            ev.as_slice(),
            [Event::Completed { op, result: Err(LockError::Timeout { name, .. }) }]
                if *op == group && name == "b"
        ),
        "{ev:?}"
    );
    assert_eq!(h.released(), ["a"]);
    assert_eq!(h.m.live_count(), 0);
}

#[test]
fn a_bound_used_up_by_the_first_names_still_tries_the_rest_once() {
    // Free names are taken whatever is left of the bound.
    let mut h = harness(30_000);
    let group = h.m.start(h.now, all(&["a", "b"], Wait::For(300))).unwrap();
    let r = h.expect(Script::Acquire, "a");
    h.now += 300;
    h.answer(&r, GRANTED);
    let r = h.expect(Script::Acquire, "b");
    h.answer(&r, GRANTED);
    let ev = h.take_events();
    assert!(
        matches!(ev.as_slice(), [Event::Completed { op, result: Ok(Outcome::AcquiredAll(l)) }] if *op == group && l.len() == 2),
        "{ev:?}"
    );

    // A held one times out at once, and the first is released.
    let mut h = harness(30_000);
    let group = h.m.start(h.now, all(&["a", "b"], Wait::For(300))).unwrap();
    let r = h.expect(Script::Acquire, "a");
    h.now += 300;
    let done_by = h.now;
    h.answer(&r, GRANTED);
    let r = h.expect(Script::Acquire, "b");
    h.answer(&r, REFUSED);
    while h.events.is_empty() {
        h.serve(&mut |_, _| DELETED.into());
        if !h.events.is_empty() {
            break;
        }
        let t = h.m.poll_timeout().expect("a timer");
        assert!(t <= done_by, "no waiting past the bound: {t}");
        h.advance_to(t);
    }
    let ev = h.take_events();
    assert!(
        matches!(
            ev.as_slice(),
            [Event::Completed { op, result: Err(LockError::Timeout { name, .. }) }]
                if *op == group && name == "b"
        ),
        "{ev:?}"
    );
    assert_eq!(h.acquire_attempts(), ["a", "b"]);
    assert_eq!(h.released(), ["a"]);
    assert_eq!(h.m.live_count(), 0);
}

#[test]
fn a_cancel_midway_aborts_the_step_and_releases_what_was_taken() {
    let mut h = harness(30_000);
    let group =
        h.m.start(h.now, all(&["x", "y", "z"], Wait::Forever))
            .unwrap();
    let r = h.expect(Script::Acquire, "x");
    h.answer(&r, GRANTED);
    let r = h.expect(Script::Acquire, "y");
    h.m.cancel(h.now, group);
    assert!(
        h.take_events().is_empty(),
        "the attempt in flight is awaited"
    );
    h.answer(&r, REFUSED);
    h.serve(&mut |_, _| DELETED.into());
    let ev = h.take_events();
    assert!(
        matches!(
            ev.as_slice(),
            [Event::Completed { op, result: Err(LockError::Aborted { name, .. }) }]
                if *op == group && name == "y"
        ),
        "{ev:?}"
    );
    assert_eq!(h.released(), ["x"]);
    assert_eq!(h.acquire_attempts(), ["x", "y"]);
    assert_eq!(h.m.live_count(), 0);
    // A second cancel of the finished group is ignored.
    h.m.cancel(h.now, group);
    assert!(h.take().is_empty() && h.take_events().is_empty());
}

#[test]
fn a_cancel_that_races_a_grant_releases_the_granted_name_too() {
    let mut h = harness(30_000);
    let group =
        h.m.start(h.now, all(&["x", "y", "z"], Wait::Forever))
            .unwrap();
    let r = h.expect(Script::Acquire, "x");
    h.answer(&r, GRANTED);
    let r = h.expect(Script::Acquire, "y");
    h.m.cancel(h.now, group);
    h.answer(&r, GRANTED); // granted anyway: the machine deletes it or we release it
    h.serve(&mut |_, _| DELETED.into());
    let ev = h.take_events();
    assert!(
        matches!(
            ev.as_slice(),
            [Event::Completed { op, result: Err(LockError::Aborted { .. }) }] if *op == group
        ),
        "{ev:?}"
    );
    let mut released = h.released();
    released.sort();
    assert_eq!(released, ["x", "y"]);
    assert!(!h.acquire_attempts().contains(&"z".to_string()));
    assert_eq!(h.m.live_count(), 0);
}

#[test]
fn losing_a_name_taken_earlier_fails_the_group_after_releasing_the_rest() {
    let mut h = harness(3_000);
    let group =
        h.m.start(h.now, all(&["b", "a", "c"], Wait::Forever))
            .unwrap();
    let start = h.now;
    let r = h.expect(Script::Acquire, "a");
    h.answer(&r, GRANTED);
    let r = h.expect(Script::Acquire, "b");
    h.answer(&r, GRANTED);
    let r = h.expect(Script::Acquire, "c");
    h.answer(&r, REFUSED); // c is held elsewhere: the group waits
                           // a's key vanishes: its renewal (at a third of the TTL) finds it gone.
    let mut lost_a = false;
    while h.events.is_empty() {
        let t = h.m.poll_timeout().expect("a timer");
        assert!(t < start + 3_000, "{t}");
        h.advance_to(t);
        h.serve(&mut |script, name| match (script, name) {
            (Script::Extend, "a") => {
                lost_a = true;
                r#"{"result":0}"#.into()
            }
            (Script::Extend, _) => DELETED.into(),
            (Script::Acquire, _) => REFUSED.into(),
            _ => DELETED.into(),
        });
    }
    assert!(lost_a);
    let ev = h.take_events();
    assert!(
        matches!(
            ev.as_slice(),
            [Event::Completed { op, result: Err(LockError::Lost { name, .. }) }]
                if *op == group && name == "a"
        ),
        "the loss fails the group and is not reported on its own: {ev:?}"
    );
    assert!(h.released().contains(&"b".to_string()), "{:?}", h.log);
    assert_eq!(h.m.live_count(), 0);
    assert!(h.take().is_empty());
}

#[test]
fn a_renewal_during_the_group_moves_the_reported_expiry() {
    let mut h = harness(3_000);
    let group = h.m.start(h.now, all(&["a", "b"], Wait::Forever)).unwrap();
    let r = h.expect(Script::Acquire, "a");
    h.answer(&r, GRANTED);
    let r = h.expect(Script::Acquire, "b");
    h.answer(&r, REFUSED);
    let first_expiry = h.m.groups[0].acquired[0].1.expires_at;
    let mut renewed = false;
    while h.events.is_empty() {
        let t = h.m.poll_timeout().expect("a timer");
        h.advance_to(t);
        h.serve(&mut |script, _| match script {
            Script::Extend => {
                renewed = true;
                DELETED.into()
            }
            Script::Acquire if renewed => GRANTED.into(),
            Script::Acquire => REFUSED.into(),
            _ => DELETED.into(),
        });
    }
    let ev = h.take_events();
    let [Event::Completed {
        op,
        result: Ok(Outcome::AcquiredAll(locks)),
    }] = ev.as_slice()
    else {
        panic!("no Renewed of a lock the user does not know yet: {ev:?}")
    };
    assert_eq!(*op, group);
    assert!(locks[0].expires_at > first_expiry, "{locks:?}");
}

#[test]
fn invalid_sets_are_refused_before_anything_is_sent() {
    let mut h = harness(30_000);
    let many: Vec<String> = (0..17).map(|i| format!("n{i}")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    for names in [
        vec![],
        vec!["a", "b", "a"],
        many,
        vec!["a", "", "b"],
        vec!["a", "b\0"],
    ] {
        let e = h.m.start(h.now, all(&names, Wait::Try)).unwrap_err();
        assert_eq!(e.code(), "INVALID_ARGUMENT", "{names:?}: {e}");
    }
    let e =
        h.m.start(
            h.now,
            Operation::AcquireAll {
                names: vec!["a".into()],
                options: AcquireOptions {
                    wait: Wait::Try,
                    ttl_ms: Some(0),
                },
            },
        )
        .unwrap_err();
    assert_eq!(e.code(), "INVALID_ARGUMENT");
    assert!(h.take().is_empty());
    assert!(h.take_events().is_empty());
    assert_eq!(h.m.live_count(), 0);
}

#[test]
fn close_fails_a_group_in_progress_before_the_close_completes() {
    let mut h = harness(30_000);
    let group = h.m.start(h.now, all(&["a", "b"], Wait::Forever)).unwrap();
    let r = h.expect(Script::Acquire, "a");
    h.answer(&r, GRANTED);
    let r = h.expect(Script::Acquire, "b");
    let close = h.m.close(h.now);
    h.answer(&r, REFUSED);
    h.serve(&mut |_, _| DELETED.into());
    let ev = h.take_events();
    let completions: Vec<(OpId, bool)> = ev
        .iter()
        .filter_map(|e| match e {
            Event::Completed { op, result } => Some((*op, result.is_ok())),
            _ => None,
        })
        .collect();
    assert_eq!(
        completions,
        [(group, false), (close, true)],
        "the group fails first, then the close completes: {ev:?}"
    );
    assert_eq!(h.m.live_count(), 0);
}

#[test]
fn a_single_name_set_is_one_acquire() {
    let mut h = harness(30_000);
    let group = h.m.start(h.now, all(&["only"], Wait::Try)).unwrap();
    let r = h.expect(Script::Acquire, "only");
    h.answer(&r, &granted(5));
    let ev = h.take_events();
    let [Event::Completed {
        op,
        result: Ok(Outcome::AcquiredAll(locks)),
    }] = ev.as_slice()
    else {
        panic!("{ev:?}")
    };
    assert_eq!(*op, group);
    assert_eq!(locks.len(), 1);
    assert_eq!(locks[0].fencing_token, 5);
    assert_eq!(h.m.live_count(), 1, "the lock is held, the group is done");
}

#[test]
fn two_groups_in_flight_at_once_complete_independently() {
    let mut h = harness(30_000);
    let ga = h.m.start(h.now, all(&["b", "a"], Wait::Try)).unwrap();
    let gb = h.m.start(h.now, all(&["d", "c"], Wait::Try)).unwrap();
    assert_ne!(ga, gb);
    let mut reqs = h.take();
    assert_eq!(reqs.len(), 2);
    reqs.sort_by_key(name_of);
    let (ra, rc) = (reqs.remove(0), reqs.remove(0));
    assert_eq!((name_of(&ra), name_of(&rc)), ("a".into(), "c".into()));
    h.answer(&rc, GRANTED);
    let rd = h.expect(Script::Acquire, "d");
    h.answer(&ra, GRANTED);
    let rb = h.expect(Script::Acquire, "b");
    h.answer(&rd, REFUSED);
    let del = h.expect(Script::Release, "c");
    h.answer(&rb, GRANTED);
    let ev = h.take_events();
    assert!(
        matches!(ev.as_slice(), [Event::Completed { op, result: Ok(Outcome::AcquiredAll(l)) }]
            if *op == ga && l.iter().map(|l| l.name.as_str()).collect::<Vec<_>>() == ["b", "a"]),
        "{ev:?}"
    );
    h.answer(&del, DELETED);
    assert_eq!(
        h.take_events(),
        [Event::Completed {
            op: gb,
            result: Ok(Outcome::NotAcquired)
        }]
    );
    assert_eq!(h.m.live_count(), 2, "a and b are held");
}

#[test]
fn start_operation_called_directly_checks_the_set_too() {
    let mut h = harness(30_000);
    for names in [vec![], vec!["a".to_string(), "a".to_string()]] {
        let e =
            h.m.start_operation(
                h.now,
                Operation::AcquireAll {
                    names,
                    options: AcquireOptions::default(),
                },
            )
            .unwrap_err();
        assert_eq!(e.code(), "INVALID_ARGUMENT");
    }
    assert!(h.take().is_empty());
    assert_eq!(h.m.live_count(), 0);
}
