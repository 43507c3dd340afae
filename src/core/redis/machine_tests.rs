//! Machine-level tests with scripted node answers (the protocol logic, not a
//! server: real servers are in `tests/redis_real.rs`, the in-memory model in
//! the simulation).

use super::*;
use crate::core::*;

const TOKEN_RE_LEN: usize = 40;

struct Harness<M: LockMachine> {
    m: M,
    now: Millis,
    sent: Vec<HttpRequest>,
    cancelled: Vec<RequestId>,
    events: Vec<Event>,
}

impl<M: LockMachine> Harness<M> {
    fn new(m: M) -> Self {
        Harness {
            m,
            now: 1_000,
            sent: Vec::new(),
            cancelled: Vec::new(),
            events: Vec::new(),
        }
    }

    fn drain(&mut self) {
        while let Some(t) = self.m.poll_transmit() {
            match t {
                Transmit::Send(r) => self.sent.push(r),
                t @ (Transmit::Open(_) | Transmit::Write { .. }) => {
                    panic!("an HTTP machine opened a byte stream: {t:?}")
                }
                Transmit::Cancel(id) => self.cancelled.push(id),
            }
        }
        while let Some(e) = self.m.poll_event() {
            self.events.push(e);
        }
    }

    /// Takes every request sent so far.
    fn take(&mut self) -> Vec<HttpRequest> {
        self.drain();
        std::mem::take(&mut self.sent)
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

    fn fail(&mut self, req: &HttpRequest) {
        let error = TransportError::Connect("connection refused".into());
        self.m
            .handle_input(self.now, Input::Failed { id: req.id, error });
        self.drain();
    }

    fn advance_to(&mut self, t: Millis) {
        self.now = t;
        self.m.handle_timeout(t);
        self.drain();
    }

    fn next_timer(&self) -> Millis {
        self.m.poll_timeout().expect("a timer")
    }

    fn take_events(&mut self) -> Vec<Event> {
        self.drain();
        std::mem::take(&mut self.events)
    }
}

fn upstash_nodes(n: usize) -> Vec<RedisNode> {
    (0..n)
        .map(|i| RedisNode::upstash(format!("http://10.0.0.{i}:8080"), "tok-secret"))
        .collect()
}

/// A Redlock harness. These tests script one-round exchanges, so they start
/// from Folded fencing; Strict (the default) has its own tests below. Their
/// waiters poll; the push wake-up has its own tests (`push_tests`).
fn redlock(n: usize, f: impl FnOnce(&mut RedlockConfig)) -> Harness<RedlockMachine> {
    let mut cfg = RedlockConfig::new(upstash_nodes(n));
    cfg.fencing = RedlockFencing::Folded;
    cfg.max_subscriptions = 0;
    f(&mut cfg);
    Harness::new(RedlockMachine::new(cfg, Box::new(SeededEntropy::new(7))).unwrap())
}

fn single(f: impl FnOnce(&mut RedisConfig)) -> Harness<RedisMachine> {
    let mut cfg = RedisConfig::new(RedisNode::upstash("http://10.0.0.1:8080", "tok-secret"));
    cfg.max_subscriptions = 0;
    f(&mut cfg);
    Harness::new(RedisMachine::new(cfg, Box::new(SeededEntropy::new(7))).unwrap())
}

fn script_of(req: &HttpRequest) -> scripts::Script {
    let args: Vec<String> = serde_json::from_slice(&req.body).unwrap();
    scripts::Script::from_text(args[1].as_bytes())
        .or_else(|| scripts::Script::from_sha1(args[1].as_bytes()))
        .unwrap()
}

/// A scripted request's command as its JSON array of strings (the Upstash
/// body): name, script or SHA, key count, keys, arguments.
fn args(req: &HttpRequest) -> Vec<String> {
    serde_json::from_slice(&req.body).unwrap()
}

fn acquired(events: &[Event]) -> LockInfo {
    events
        .iter()
        .find_map(|e| match e {
            Event::Completed {
                result: Ok(Outcome::Acquired(lock)),
                ..
            } => Some(lock.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no Acquired in {events:?}"))
}

fn opts(wait: Wait) -> AcquireOptions {
    AcquireOptions { wait, ttl_ms: None }
}

#[test]
fn uncontended_redlock_is_one_parallel_round_each_way() {
    let mut h = redlock(5, |_| {});
    h.m.acquire(h.now, "job", &opts(Wait::Forever)).unwrap();
    let reqs = h.take();
    assert_eq!(reqs.len(), 5);
    let urls: std::collections::BTreeSet<_> = reqs.iter().map(|r| r.target.clone()).collect();
    assert_eq!(urls.len(), 5, "one request per node");
    assert!(reqs
        .iter()
        .all(|r| script_of(r) == scripts::Script::Acquire && r.timeout_ms == Some(1_000)));
    for (i, r) in reqs.iter().enumerate() {
        h.answer(r, &format!(r#"{{"result":[1,{},0]}}"#, 10 + i));
    }
    let lock = acquired(&h.take_events());
    assert_eq!(lock.fencing_token, 14, "the maximum counter");
    assert_eq!(lock.handle.owner.len(), TOKEN_RE_LEN);
    assert!(lock.handle.owner.bytes().all(|b| b.is_ascii_hexdigit()));
    assert_eq!(lock.handle.key, "{edgelock:job}");
    assert_eq!(lock.expires_at, h.now + 10_000 - 102);
    h.m.release(h.now, lock.id).unwrap();
    let reqs = h.take();
    assert_eq!(reqs.len(), 5);
    assert!(reqs
        .iter()
        .all(|r| script_of(r) == scripts::Script::Release));
    for r in &reqs {
        h.answer(r, r#"{"result":1}"#);
    }
    let ev = h.take_events();
    assert!(
        matches!(
            ev.as_slice(),
            [Event::Completed {
                result: Ok(Outcome::Released {
                    held_until_release: true,
                    ..
                }),
                ..
            }]
        ),
        "{ev:?}"
    );
    assert!(h.take().is_empty());
    assert_eq!(h.m.live_count(), 0);
}

#[test]
fn strict_fencing_is_the_default() {
    assert_eq!(
        RedlockConfig::new(upstash_nodes(3)).fencing,
        RedlockFencing::Strict
    );
}

/// Steady state: every node answered with its counter at the token, so the
/// raise would change nothing anywhere: it is skipped (2 rounds per
/// acquire+release, like Folded). One silent or lagging node brings it back.
#[test]
fn strict_fencing_skips_the_raise_exactly_when_it_is_a_no_op_everywhere() {
    for (case, counters, silent) in [
        ("all at 9", [9, 9, 9, 9, 9], None),
        ("one lags", [9, 9, 9, 9, 8], None),
        ("one silent", [9, 9, 9, 9, 9], Some(4)),
    ] {
        let mut h = redlock(5, |c| c.fencing = RedlockFencing::Strict);
        h.m.acquire(h.now, "job", &opts(Wait::Forever)).unwrap();
        for (i, r) in h.take().iter().enumerate() {
            if silent == Some(i) {
                h.fail(r);
            } else if i == 4 {
                // The fifth node is held by someone else (still answers its counter).
                h.answer(r, &format!(r#"{{"result":[0,{},500]}}"#, counters[i]));
            } else {
                h.answer(r, &format!(r#"{{"result":[1,{},0]}}"#, counters[i]));
            }
        }
        let events = h.take_events();
        let sent = h.take();
        if case == "all at 9" {
            assert_eq!(acquired(&events).fencing_token, 9, "{case}");
            assert!(sent.is_empty(), "{case}: no raise round");
        } else {
            assert!(events.is_empty(), "{case}: not handed out before the raise");
            assert_eq!(
                sent.iter()
                    .filter(|r| script_of(r) == scripts::Script::Extend)
                    .count(),
                5,
                "{case}"
            );
        }
    }
}

#[test]
fn strict_fencing_raises_a_quorum_before_handing_out() {
    let mut h = redlock(5, |c| c.fencing = RedlockFencing::Strict);
    h.m.acquire(h.now, "job", &opts(Wait::Forever)).unwrap();
    for (i, r) in h.take().iter().enumerate() {
        h.answer(r, &format!(r#"{{"result":[1,{},0]}}"#, [3, 9, 4, 1, 2][i]));
    }
    assert!(
        h.take_events().is_empty(),
        "not handed out before the raise"
    );
    let raise = h.take();
    assert_eq!(raise.len(), 5);
    for r in &raise {
        assert_eq!(script_of(r), scripts::Script::Extend);
        let args: Vec<String> = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(args[args.len() - 2], "9", "raise to the maximum");
        assert_eq!(args.last().unwrap(), "+", "the outer hold renews");
    }
    for r in &raise[..2] {
        h.answer(r, r#"{"result":1}"#);
    }
    assert!(
        h.take_events().is_empty(),
        "two confirmations are not a quorum"
    );
    h.answer(&raise[2], r#"{"result":1}"#);
    h.fail(&raise[3]);
    h.answer(&raise[4], r#"{"result":0}"#);
    assert_eq!(acquired(&h.take_events()).fencing_token, 9);
}

#[test]
fn validity_counts_from_the_start_of_this_attempt() {
    let mut h = redlock(5, |c| {
        c.retry_delay_ms = 100;
        c.retry_jitter_ms = 0;
    });
    h.m.acquire(h.now, "job", &opts(Wait::Forever)).unwrap();
    let first = h.take();
    h.now += 400;
    for r in &first {
        h.fail(r);
    }
    // Nothing to clean up (every connection was refused: nothing ran).
    assert!(h.take().is_empty());
    let retry_at = h.next_timer();
    assert_eq!(retry_at, h.now + 100);
    h.advance_to(retry_at);
    let second = h.take();
    assert_eq!(second.len(), 5);
    h.now += 30;
    for r in &second {
        h.answer(r, r#"{"result":[1,1,0]}"#);
    }
    let lock = acquired(&h.take_events());
    // ttl − elapsed(30 ms of this attempt) − drift, from now.
    assert_eq!(lock.expires_at, h.now + 10_000 - 30 - 102);
}

#[test]
fn failed_attempt_deletes_where_the_key_may_be_and_retries_then_no_quorum() {
    let mut h = redlock(5, |c| {
        c.retry_count = 1;
        c.retry_jitter_ms = 0;
    });
    let op = h.m.acquire(h.now, "job", &opts(Wait::Forever)).unwrap();
    let reqs = h.take();
    h.answer(&reqs[0], r#"{"result":[1,1,0]}"#);
    h.answer(&reqs[1], r#"{"result":[0,1,500]}"#);
    let io = |id| Input::Failed {
        id,
        error: TransportError::Io("reset".into()),
    };
    h.m.handle_input(h.now, io(reqs[2].id));
    h.m.handle_input(h.now, io(reqs[3].id));
    h.advance_to(h.now + 1_000);
    assert_eq!(h.cancelled, [reqs[4].id], "timed out");
    let cleanup = h.take();
    let urls: Vec<&Target> = cleanup.iter().map(|r| &r.target).collect();
    assert_eq!(
        urls,
        [
            &reqs[0].target,
            &reqs[2].target,
            &reqs[3].target,
            &reqs[4].target
        ],
        "granted and unknown nodes, not the holder's"
    );
    assert!(cleanup
        .iter()
        .all(|r| script_of(r) == scripts::Script::Release));
    for r in &cleanup {
        h.answer(r, r#"{"result":1}"#);
    }
    let t = h.next_timer();
    h.advance_to(t);
    for r in &h.take() {
        h.fail(r);
    }
    let ev = h.take_events();
    match ev.as_slice() {
        [Event::Completed {
            op: o,
            result:
                Err(LockError::NoQuorum {
                    granted: 0,
                    needed: 3,
                    ..
                }),
        }] => assert_eq!(*o, op),
        other => panic!("{other:?}"),
    }
    assert_eq!(h.m.live_count(), 0);
}

#[test]
fn waiter_retries_from_the_holders_pttl_capped_by_the_retry_delay() {
    let mut h = single(|c| {
        c.retry_delay_ms = 200;
        c.retry_jitter_ms = 10;
    });
    h.m.acquire(h.now, "job", &opts(Wait::Forever)).unwrap();
    let r = h.take();
    h.answer(&r[0], r#"{"result":[0,4,50]}"#);
    assert!(h.take().is_empty(), "nothing to clean up after a refusal");
    let t = h.next_timer() - h.now;
    assert!((50..=60).contains(&t), "{t}");
    h.advance_to(h.now + t);
    let r = h.take();
    h.answer(&r[0], r#"{"result":[0,5,9000]}"#);
    let t = h.next_timer() - h.now;
    assert!((200..=210).contains(&t), "{t}");
    h.advance_to(h.now + t);
    let r = h.take();
    h.answer(&r[0], r#"{"result":[1,6,0]}"#);
    assert_eq!(acquired(&h.take_events()).fencing_token, 6);
}

#[test]
fn try_on_a_held_lock_is_not_acquired_and_sends_nothing_more() {
    let mut h = single(|_| {});
    let op = h.m.acquire(h.now, "job", &opts(Wait::Try)).unwrap();
    let r = h.take();
    h.answer(&r[0], r#"{"result":[0,4,500]}"#);
    assert_eq!(
        h.take_events(),
        [Event::Completed {
            op,
            result: Ok(Outcome::NotAcquired)
        }]
    );
    assert!(h.take().is_empty());
    assert_eq!(h.m.live_count(), 0);
}

#[test]
fn wait_for_times_out_at_its_deadline() {
    let mut h = single(|c| c.retry_jitter_ms = 0);
    let op = h.m.acquire(h.now, "job", &opts(Wait::For(300))).unwrap();
    let start = h.now;
    loop {
        let sent = h.take();
        for r in &sent {
            // Attempts are refused; the waiter's leaving the queue at the end is acknowledged.
            let reply = if script_of(r) == scripts::Script::Leave {
                r#"{"result":1}"#
            } else {
                r#"{"result":[0,4,5000]}"#
            };
            h.answer(r, reply);
        }
        if !sent.is_empty() {
            continue;
        }
        let ev = h.take_events();
        if !ev.is_empty() {
            assert!(
                matches!(ev.as_slice(), [Event::Completed { op: o, result: Err(LockError::Timeout { .. }) }] if *o == op),
                "{ev:?}"
            );
            break;
        }
        let t = h.next_timer();
        assert!(t <= start + 300);
        h.advance_to(t);
    }
    assert_eq!(h.now, start + 300);
}

#[test]
fn cancel_waits_for_the_attempt_in_flight_and_deletes_its_key() {
    let mut h = single(|_| {});
    let op = h.m.acquire(h.now, "job", &opts(Wait::Forever)).unwrap();
    let r = h.take();
    h.m.cancel(h.now, op);
    assert!(
        h.take_events().is_empty(),
        "the outcome in flight is awaited"
    );
    h.answer(&r[0], r#"{"result":[1,1,0]}"#);
    assert!(h.take_events().is_empty(), "no Acquired for a cancelled op");
    let del = h.take();
    assert_eq!(del.len(), 1);
    assert_eq!(script_of(&del[0]), scripts::Script::Release);
    h.answer(&del[0], r#"{"result":1}"#);
    let ev = h.take_events();
    assert!(
        matches!(
            ev.as_slice(),
            [Event::Completed {
                result: Err(LockError::Aborted { .. }),
                ..
            }]
        ),
        "{ev:?}"
    );
    assert_eq!(h.m.live_count(), 0);
}

#[test]
fn a_timed_out_acquire_deletes_its_possible_key_before_failing() {
    let mut h = single(|c| c.request_timeout_ms = 500);
    h.m.acquire(h.now, "job", &opts(Wait::Try)).unwrap();
    let r = h.take();
    assert_eq!(h.next_timer(), h.now + 500);
    h.advance_to(h.now + 500);
    assert_eq!(h.cancelled, [r[0].id]);
    let del = h.take();
    assert_eq!(script_of(&del[0]), scripts::Script::Release);
    assert!(h.take_events().is_empty());
    h.answer(&del[0], r#"{"result":0}"#);
    let ev = h.take_events();
    assert!(
        matches!(
            ev.as_slice(),
            [Event::Completed {
                result: Err(LockError::Transport { .. }),
                ..
            }]
        ),
        "{ev:?}"
    );
}

#[test]
fn watchdog_renews_at_a_third_and_reports_a_lost_key() {
    let mut h = single(|c| c.ttl_ms = 3_000);
    h.m.acquire(h.now, "job", &opts(Wait::Forever)).unwrap();
    let start = h.now;
    let r = h.take();
    h.answer(&r[0], r#"{"result":[1,1,0]}"#);
    let lock = acquired(&h.take_events());
    assert_eq!(h.next_timer(), start + 1_000);
    h.advance_to(start + 1_000);
    let r = h.take();
    assert_eq!(script_of(&r[0]), scripts::Script::Extend);
    h.now += 10;
    h.answer(&r[0], r#"{"result":1}"#);
    let ev = h.take_events();
    assert_eq!(
        ev,
        [Event::Renewed {
            lock: lock.id,
            expires_at: start + 1_010 + 3_000 - 10 - 32
        }]
    );
    assert_eq!(h.next_timer(), start + 2_000);
    h.advance_to(start + 2_000);
    let r = h.take();
    h.answer(&r[0], r#"{"result":0}"#);
    let ev = h.take_events();
    assert!(
        matches!(
            ev.as_slice(),
            [Event::Lost {
                reason: LostReason::KeyGone,
                ..
            }]
        ),
        "{ev:?}"
    );
    // The lost lock's keys are deleted (owner-checked) in the background.
    let r = h.take();
    assert_eq!(script_of(&r[0]), scripts::Script::Release);
    h.answer(&r[0], r#"{"result":0}"#);
    assert_eq!(h.m.live_count(), 0);
    let op = h.m.release(h.now, lock.id).unwrap();
    assert_eq!(
        h.take_events(),
        [Event::Completed {
            op,
            result: Ok(Outcome::Released {
                lock: lock.id,
                held_until_release: false
            })
        }]
    );
}

#[test]
fn failing_renewals_end_in_lost_when_validity_runs_out() {
    let mut h = single(|c| {
        c.ttl_ms = 3_000;
        c.request_timeout_ms = 400;
    });
    h.m.acquire(h.now, "job", &opts(Wait::Forever)).unwrap();
    let r = h.take();
    h.answer(&r[0], r#"{"result":[1,1,0]}"#);
    let lock = acquired(&h.take_events());
    let mut renewals = 0;
    loop {
        for r in h.take() {
            if script_of(&r) == scripts::Script::Extend {
                renewals += 1;
            }
            h.fail(&r);
        }
        if let Some(Event::Lost { reason, .. }) = h
            .take_events()
            .into_iter()
            .find(|e| matches!(e, Event::Lost { .. }))
        {
            assert!(matches!(reason, LostReason::RenewalFailed(_)), "{reason:?}");
            break;
        }
        let t = h.next_timer();
        assert!(t <= lock.expires_at);
        h.advance_to(t);
    }
    assert_eq!(h.now, lock.expires_at);
    assert!(renewals > 3, "retried while validity remained: {renewals}");
}

#[test]
fn webdis_nodes_speak_percent_encoded_bodies() {
    let cfg = RedisConfig::new(RedisNode::webdis("http://127.0.0.1:7379"));
    let mut h = Harness::new(RedisMachine::new(cfg, Box::new(SeededEntropy::new(1))).unwrap());
    h.m.acquire(h.now, "a/../b?.json", &opts(Wait::Try))
        .unwrap();
    let r = h.take();
    assert_eq!(r[0].target.url(), Some("http://127.0.0.1:7379/"));
    let args = webdis::decode_body(&r[0].body);
    assert_eq!(args[0], b"EVAL");
    assert_eq!(args[3], b"{edgelock:a/../b?.json}");
    assert!(!r[0].body.windows(2).any(|w| w == b".."));
    h.answer(&r[0], r#"{"EVAL":[1,12,0]}"#);
    assert_eq!(acquired(&h.take_events()).fencing_token, 12);
}

#[test]
fn backend_errors_fail_the_single_node_with_the_nodes_error() {
    let mut h = single(|_| {});
    h.m.acquire(h.now, "job", &opts(Wait::Forever)).unwrap();
    let r = h.take();
    h.m.handle_input(
        h.now,
        Input::Response {
            id: r[0].id,
            status: 401,
            body: br#"{"error":"Unauthorized"}"#.to_vec(),
        },
    );
    // A refused credential means nothing ran: nothing to clean up.
    assert!(h.take().is_empty());
    let ev = h.take_events();
    match ev.as_slice() {
        [Event::Completed {
            result:
                Err(LockError::Backend {
                    status: Some(401),
                    message,
                    ..
                }),
            ..
        }] => {
            assert!(!message.contains("tok-secret"))
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn close_releases_held_locks_then_reports_closed() {
    let mut h = redlock(3, |_| {});
    h.m.acquire(h.now, "a", &opts(Wait::Forever)).unwrap();
    for r in h.take() {
        h.answer(&r, r#"{"result":[1,1,0]}"#);
    }
    acquired(&h.take_events());
    let waiting = h.m.acquire(h.now, "b", &opts(Wait::Forever)).unwrap();
    let pending = h.take();
    let close = h.m.close(h.now);
    let releases = h.take();
    assert_eq!(releases.len(), 3);
    let ev = h.take_events();
    assert_eq!(
        ev[0],
        Event::Completed {
            op: waiting,
            result: Err(LockError::Closed { backend: "redlock" })
        }
    );
    assert!(
        matches!(
            &ev[1],
            Event::Lost {
                reason: LostReason::ClientClosed,
                ..
            }
        ),
        "{ev:?}"
    );
    for r in &releases {
        h.answer(r, r#"{"result":1}"#);
    }
    assert!(
        h.take_events().is_empty(),
        "the acquire in flight is still being cleaned up"
    );
    for r in &pending {
        h.answer(r, r#"{"result":[1,1,0]}"#);
    }
    let cleanup = h.take();
    assert_eq!(cleanup.len(), 3, "its keys are deleted");
    for r in &cleanup {
        h.answer(r, r#"{"result":1}"#);
    }
    assert_eq!(
        h.take_events(),
        [Event::Completed {
            op: close,
            result: Ok(Outcome::Closed)
        }]
    );
    assert_eq!(h.m.live_count(), 0);
    assert!(h.m.acquire(h.now, "c", &opts(Wait::Try)).is_err());
}

#[test]
fn resume_and_inspect() {
    let mut h = redlock(3, |_| {});
    h.m.acquire(h.now, "a", &opts(Wait::Forever)).unwrap();
    for r in h.take() {
        h.answer(&r, r#"{"result":[1,4,0]}"#);
    }
    let lock = acquired(&h.take_events());
    let mut other = redlock(3, |_| {});
    other.m.resume(other.now, &lock.handle).unwrap();
    let r = other.take();
    other.answer(&r[0], r#"{"result":[1,1,9000,4]}"#);
    other.answer(&r[1], r#"{"result":[1,1,8000,4]}"#);
    other.answer(&r[2], r#"{"result":[1,0,7000,4]}"#);
    let resumed = acquired(&other.take_events());
    assert_eq!(resumed.fencing_token, 4);
    assert_eq!(resumed.expires_at, other.now + 8_000 - 82);
    let mut bad = lock.handle.clone();
    bad.key = "{other:a}".into();
    assert!(other.m.resume(other.now, &bad).is_err());
    other.m.inspect(other.now, "a").unwrap();
    let r = other.take();
    other.answer(&r[0], r#"{"result":[1,9000,4,0,0,-2]}"#);
    other.answer(&r[1], r#"{"result":[0,-2,5,0,0,-2]}"#);
    other.fail(&r[2]);
    let ev = other.take_events();
    match ev.as_slice() {
        [Event::Completed {
            result: Ok(Outcome::Inspected(status)),
            ..
        }] => {
            assert!(
                !status.held,
                "one of the two answering nodes has it: {status:?}"
            );
            assert_eq!(status.fencing_token, Some(5));
        }
        other => panic!("{other:?}"),
    }
    other.m.inspect(other.now, "a").unwrap();
    let r = other.take();
    other.answer(&r[0], r#"{"result":[1,9000,4,0,0,-2]}"#);
    other.answer(&r[1], r#"{"result":[1,8000,4,0,0,-2]}"#);
    other.fail(&r[2]);
    match other.take_events().as_slice() {
        [Event::Completed {
            result: Ok(Outcome::Inspected(status)),
            ..
        }] => {
            assert!(status.held);
            assert_eq!(status.remaining_ms, Some(8_000));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn invalid_input_is_refused_before_sending() {
    let mut h = single(|_| {});
    assert!(h.m.acquire(h.now, "", &opts(Wait::Try)).is_err());
    assert!(h
        .m
        .acquire(
            h.now,
            "a",
            &AcquireOptions {
                wait: Wait::Try,
                ttl_ms: Some(0)
            }
        )
        .is_err());
    assert!(h
        .m
        .acquire(
            h.now,
            "a",
            &AcquireOptions {
                wait: Wait::Try,
                ttl_ms: Some(2)
            }
        )
        .is_err());
    assert!(h.take().is_empty());
    let mut cfg = RedisConfig::new(RedisNode::webdis("http://x"));
    cfg.prefix = "a{".into();
    assert!(RedisMachine::new(cfg, Box::new(SeededEntropy::new(1))).is_err());
    let mut cfg = RedlockConfig::new(vec![]);
    assert!(RedlockMachine::new(cfg.clone(), Box::new(SeededEntropy::new(1))).is_err());
    cfg.nodes = vec![
        RedisNode::webdis("http://x"),
        RedisNode::webdis("http://x/"),
    ];
    assert!(RedlockMachine::new(cfg, Box::new(SeededEntropy::new(1))).is_err());
    let dbg = format!("{:?}", RedisNode::upstash("http://x", "tok-secret"));
    assert!(!dbg.contains("tok-secret"));
}

#[test]
fn a_manual_extend_during_a_renewal_does_not_make_the_timer_spin() {
    let mut h = single(|c| c.ttl_ms = 3_000);
    h.m.acquire(h.now, "job", &opts(Wait::Forever)).unwrap();
    let r = h.take();
    h.answer(&r[0], r#"{"result":[1,1,0]}"#);
    let lock = acquired(&h.take_events());
    h.advance_to(h.now + 1_000);
    let renewal = h.take();
    assert_eq!(renewal.len(), 1);
    h.m.extend(h.now, lock.id, None).unwrap();
    let ext = h.take();
    h.now += 5;
    h.answer(&ext[0], r#"{"result":1}"#);
    assert!(matches!(
        h.take_events().as_slice(),
        [Event::Completed {
            result: Ok(Outcome::Extended { .. }),
            ..
        }]
    ));
    // The renewal is still in flight: the next timer is its timeout, not a
    // renewal that is already due.
    assert!(h.next_timer() > h.now, "{} <= {}", h.next_timer(), h.now);
    h.answer(&renewal[0], r#"{"result":1}"#);
    assert!(matches!(
        h.take_events().as_slice(),
        [Event::Renewed { .. }]
    ));
    assert!(h.next_timer() > h.now);
}

mod election;
mod push;
mod reentry;
mod rwlock;
mod sets;

/// A script goes as `EVAL` until the node has run it, then as `EVALSHA`;
/// `NOSCRIPT` (a restart emptied the cache) sends the `EVAL` again within
/// the same round.
#[test]
fn scripts_go_by_sha_once_cached_and_fall_back_on_noscript() {
    let mut h = single(|_| {});
    let name_of =
        |r: &HttpRequest| serde_json::from_slice::<Vec<String>>(&r.body).unwrap()[0].clone();
    h.m.acquire(h.now, "job", &opts(Wait::Forever)).unwrap();
    let r = h.take();
    assert_eq!(name_of(&r[0]), "EVAL");
    h.answer(&r[0], r#"{"result":[1,1,0]}"#);
    let lock = acquired(&h.take_events()).id;
    h.m.release(h.now, lock).unwrap();
    let r = h.take();
    assert_eq!(
        name_of(&r[0]),
        "EVAL",
        "the release script was never run on this node"
    );
    h.answer(&r[0], r#"{"result":1}"#);
    h.take_events();
    h.m.acquire(h.now, "job", &opts(Wait::Forever)).unwrap();
    let r = h.take();
    assert_eq!(name_of(&r[0]), "EVALSHA");
    let args: Vec<String> = serde_json::from_slice(&r[0].body).unwrap();
    assert_eq!(args[1], scripts::Script::Acquire.sha1());
    // Keys, token and arguments only: the script (~1,300 bytes) stays behind.
    assert!(r[0].body.len() < 320, "{} bytes", r[0].body.len());
    h.answer(
        &r[0],
        r#"{"error":"NOSCRIPT No matching script. Please use EVAL."}"#,
    );
    assert!(h.take_events().is_empty(), "NOSCRIPT is not an answer");
    let r = h.take();
    assert_eq!(name_of(&r[0]), "EVAL", "sent again whole");
    h.answer(&r[0], r#"{"result":[1,2,0]}"#);
    assert_eq!(acquired(&h.take_events()).fencing_token, 2);
}

mod permits {
    use super::*;
    use scripts::Script;

    fn acquire_permits<M: LockMachine>(h: &mut Harness<M>, limit: u32, wait: Wait) {
        let op = Operation::Acquire {
            name: "s".into(),
            kind: LockKind::Permits { limit },
            options: opts(wait),
        };
        h.m.start_operation(h.now, op).unwrap();
    }

    fn failed(events: &[Event]) -> LockError {
        events
            .iter()
            .find_map(|e| match e {
                Event::Completed { result: Err(e), .. } => Some(e.clone()),
                _ => None,
            })
            .unwrap_or_else(|| panic!("no error in {events:?}"))
    }

    #[test]
    fn one_node_takes_the_slot_the_script_picked_and_its_release_wakes_the_semaphore() {
        let mut h = single(|_| {});
        acquire_permits(&mut h, 3, Wait::Forever);
        let r = h.take();
        assert_eq!(r.len(), 1);
        assert_eq!(script_of(&r[0]), Script::AcquirePermit);
        let a = args(&r[0]);
        // 4 + 3 keys, every slot declared; no preferred slot, no queue yet.
        assert_eq!(
            a[2..10],
            [
                "7",
                "{edgelock:s}:fence",
                "{edgelock:s}:limit",
                "{edgelock:s}:permit:queue",
                "{edgelock:s}:permit:leases",
                "{edgelock:s}:permit:0",
                "{edgelock:s}:permit:1",
                "{edgelock:s}:permit:2"
            ]
        );
        assert_eq!(a[11..], ["10000", "3", "-1", "0", "-", "0"]);
        h.answer(&r[0], r#"{"result":[1,5,0,1,1,0]}"#);
        let lock = acquired(&h.take_events());
        assert_eq!(
            (lock.kind(), lock.slot(), lock.fencing_token),
            (LockKind::Permits { limit: 3 }, Some(1), 5)
        );
        assert_eq!(lock.handle.key, "{edgelock:s}:permit:1");
        h.m.release(h.now, lock.id).unwrap();
        let r = h.take();
        assert_eq!(script_of(&r[0]), Script::Release);
        let a = args(&r[0]);
        assert_eq!(
            a[3..8],
            [
                "{edgelock:s}:permit:1",
                "{edgelock:s}:fence",
                "{edgelock:s}:permit:queue",
                "{edgelock:s}:permit:leases",
                "{edgelock:s}:permit:1:holds"
            ]
        );
        assert_eq!(
            a[9..],
            [
                "5".to_string(),
                subscription::wake_channel("{edgelock:s}:permit"),
                "+".to_string()
            ]
        );
    }

    #[test]
    fn a_waiter_queues_on_the_semaphore_and_a_try_does_not() {
        let mut h = single(|_| {});
        acquire_permits(&mut h, 2, Wait::Try);
        let r = h.take();
        h.answer(&r[0], r#"{"result":[0,5,700,-1,0,0]}"#);
        assert!(matches!(
            h.take_events().as_slice(),
            [Event::Completed {
                result: Ok(Outcome::NotAcquired),
                ..
            }]
        ));
        assert!(h.take().is_empty(), "a try leaves nothing to clean up");
        acquire_permits(&mut h, 2, Wait::Forever);
        let r = h.take();
        h.answer(&r[0], r#"{"result":[0,5,700,-1,0,0]}"#);
        // Sleeps until the earliest slot frees itself (capped), then queues.
        let at = h.next_timer();
        assert!(at > h.now && at <= h.now + 700 + 100, "{at}");
        h.advance_to(at);
        let r = h.take();
        let a = args(&r[0]);
        assert_eq!(a[a.len() - 2..][1], "6000", "queued with a lease: {a:?}");
        assert_ne!(a[a.len() - 2], "-");
    }

    #[test]
    fn another_limit_while_held_is_invalid_argument_and_takes_nothing() {
        let mut h = single(|_| {});
        acquire_permits(&mut h, 5, Wait::Forever);
        let r = h.take();
        h.answer(&r[0], r#"{"result":[2,0,0,-1,3,0]}"#);
        let e = failed(&h.take_events());
        assert_eq!(e.code(), "INVALID_ARGUMENT");
        assert!(e.to_string().contains("has limit 3, not 5"), "{e}");
        assert!(
            h.take().is_empty(),
            "nothing to clean up: nothing was taken"
        );
    }

    #[test]
    fn a_larger_stored_limit_repeats_the_attempt_with_its_slots() {
        let mut h = single(|_| {});
        acquire_permits(&mut h, 2, Wait::Forever);
        let r = h.take();
        assert_eq!(args(&r[0])[2], "6");
        h.answer(&r[0], r#"{"result":[3,0,0,-1,5,0]}"#);
        let r = h.take();
        assert_eq!(r.len(), 1);
        let a = args(&r[0]);
        assert_eq!(a[2], "9", "4 + 5 slots declared");
        assert_eq!(a[a.len() - 5], "2", "still asking for 2");
        h.answer(&r[0], r#"{"result":[2,0,0,-1,5,0]}"#);
        assert_eq!(failed(&h.take_events()).code(), "INVALID_ARGUMENT");
    }

    #[test]
    fn redlock_needs_a_quorum_on_one_slot_and_retries_on_the_slot_free_on_most() {
        let mut h = redlock(3, |c| c.retry_jitter_ms = 0);
        acquire_permits(&mut h, 3, Wait::Forever);
        let r = h.take();
        assert_eq!(r.len(), 3);
        let pref: Vec<String> = r.iter().map(|q| args(q)[13].clone()).collect();
        assert!(
            pref.iter().all(|p| *p == pref[0] && p != "-1"),
            "one named slot on every node: {pref:?}"
        );
        let k: u32 = pref[0].parse().unwrap();
        let other = (k + 1) % 3;
        // Node 0 grants k; nodes 1 and 2 hold k but have `other` free.
        h.answer(&r[0], &format!(r#"{{"result":[1,4,0,{k},0,0]}}"#));
        for q in &r[1..] {
            h.answer(q, &format!(r#"{{"result":[0,4,0,-1,{},0]}}"#, 1 << other));
        }
        let c = h.take();
        assert_eq!(c.len(), 1, "the partial grant is cleaned up");
        assert_eq!(script_of(&c[0]), Script::PermitCleanup);
        assert_eq!(c[0].target, r[0].target);
        h.answer(&c[0], r#"{"result":1}"#);
        // A slot is free on a quorum: the retry goes at once (no timer).
        let r = h.take();
        assert_eq!(r.len(), 3);
        assert!(
            r.iter().all(|q| args(q)[13] == other.to_string()),
            "the retry names the slot free on all three"
        );
        for q in &r {
            h.answer(q, &format!(r#"{{"result":[1,5,0,{other},0,0]}}"#));
        }
        let lock = acquired(&h.take_events());
        assert_eq!((lock.slot(), lock.fencing_token), (Some(other), 5));
        assert_eq!(lock.handle.key, format!("{{edgelock:s}}:permit:{other}"));
    }

    #[test]
    fn redlock_waits_when_no_slot_is_free_on_a_quorum() {
        let mut h = redlock(3, |c| c.retry_jitter_ms = 0);
        acquire_permits(&mut h, 2, Wait::Forever);
        let r = h.take();
        // Every slot held everywhere, the earliest frees in 300 ms.
        for q in &r {
            h.answer(q, r#"{"result":[0,4,300,-1,0,0]}"#);
        }
        assert!(h.take().is_empty(), "nothing to clean up, no retry at once");
        assert_eq!(h.next_timer(), h.now + 200, "the retry delay caps the wait");
    }

    #[test]
    fn redlock_repeats_at_most_three_attempts_at_once_when_slots_keep_moving() {
        let mut h = redlock(3, |c| c.retry_jitter_ms = 0);
        acquire_permits(&mut h, 2, Wait::Forever);
        for attempt in 0..4 {
            let r = h.take();
            assert_eq!(r.len(), 3, "attempt {attempt} goes at once");
            let a = args(&r[0]);
            let k: u32 = a[a.len() - 4].parse().unwrap();
            // Someone else keeps taking the named slot; the other is free.
            for q in &r {
                h.answer(q, &format!(r#"{{"result":[0,4,0,-1,{},0]}}"#, 1 << (1 - k)));
            }
        }
        assert!(h.take().is_empty(), "the fourth contended attempt waits");
        assert_eq!(
            h.next_timer(),
            h.now + 200,
            "a split vote waits the retry delay, not 0 ms"
        );
    }

    #[test]
    fn shared_holds_on_redlock_and_bad_limits_are_refused_before_sending() {
        let mut r = redlock(3, |_| {});
        let op = Operation::Acquire {
            name: "s".into(),
            kind: LockKind::Shared,
            options: opts(Wait::Try),
        };
        assert_eq!(
            r.m.start_operation(r.now, op).unwrap_err().code(),
            "INVALID_ARGUMENT"
        );
        assert!(r.take().is_empty());
        assert!(!r.m.capabilities().supports(LockKind::Shared));
        let mut h = single(|_| {});
        for kind in [
            LockKind::Permits { limit: 0 },
            LockKind::Permits { limit: 101 },
        ] {
            let op = Operation::Acquire {
                name: "s".into(),
                kind,
                options: opts(Wait::Try),
            };
            assert_eq!(
                h.m.start_operation(h.now, op).unwrap_err().code(),
                "INVALID_ARGUMENT",
                "{kind:?}"
            );
        }
        let op = Operation::Acquire {
            name: "s".into(),
            kind: LockKind::Permits { limit: 3 },
            options: AcquireOptions {
                wait: Wait::Try,
                ttl_ms: Some(2),
            },
        };
        assert_eq!(
            h.m.start_operation(h.now, op).unwrap_err().code(),
            "INVALID_ARGUMENT",
            "a ttl is checked as for a lock"
        );
        assert!(h.take().is_empty());
        assert!(h.m.capabilities().supports(LockKind::Permits { limit: 3 }));
        assert!(h.m.capabilities().supports(LockKind::Shared));
    }

    #[test]
    fn a_permit_resumes_as_that_permit() {
        let mut h = single(|_| {});
        acquire_permits(&mut h, 3, Wait::Forever);
        let r = h.take();
        h.answer(&r[0], r#"{"result":[1,5,0,2,3,0]}"#);
        let lock = acquired(&h.take_events());
        let mut other = single(|_| {});
        other.m.resume(other.now, &lock.handle).unwrap();
        let r = other.take();
        assert_eq!(script_of(&r[0]), Script::Status);
        assert_eq!(args(&r[0])[3], "{edgelock:s}:permit:2");
        other.answer(&r[0], r#"{"result":[1,1,9000,5]}"#);
        let resumed = acquired(&other.take_events());
        assert_eq!(
            (resumed.kind(), resumed.slot()),
            (LockKind::Permits { limit: 3 }, Some(2))
        );
        // Its release wakes the semaphore's waiters.
        other.m.release(other.now, resumed.id).unwrap();
        let a = args(&other.take()[0]);
        assert_eq!(a[5], "{edgelock:s}:permit:queue");
        for bad in [
            LockHandle {
                slot: Some(1),
                ..lock.handle.clone()
            },
            LockHandle {
                slot: Some(3),
                key: "{edgelock:s}:permit:3".into(),
                ..lock.handle.clone()
            },
            LockHandle {
                kind: LockKind::Exclusive,
                slot: None,
                ..lock.handle.clone()
            },
            LockHandle {
                kind: LockKind::Shared,
                slot: None,
                key: "{edgelock:s}".into(),
                ..lock.handle.clone()
            },
        ] {
            assert_eq!(
                other.m.resume(other.now, &bad).unwrap_err().code(),
                "INVALID_ARGUMENT",
                "{bad:?}"
            );
        }
    }

    #[test]
    fn inspect_reads_the_slots_of_a_semaphore_in_a_second_round() {
        let mut h = redlock(3, |_| {});
        h.m.inspect(h.now, "s").unwrap();
        let r = h.take();
        assert!(r
            .iter()
            .all(|q| script_of(q) == Script::Inspect && args(q)[2] == "4"));
        for q in &r {
            h.answer(q, r#"{"result":[0,-2,9,3,0,-2]}"#);
        }
        let r = h.take();
        assert!(r.iter().all(|q| args(q)[2] == "7"), "the 3 slots declared");
        // Slot 0 held on all, slot 2 on one node only (no quorum).
        h.answer(&r[0], r#"{"result":[0,-2,9,3,0,-2,900,-2,500]}"#);
        h.answer(&r[1], r#"{"result":[0,-2,9,3,0,-2,800,-2,-2]}"#);
        h.answer(&r[2], r#"{"result":[0,-2,10,3,0,-2,700,-2,-2]}"#);
        match h.take_events().as_slice() {
            [Event::Completed {
                result: Ok(Outcome::Inspected(s)),
                ..
            }] => {
                assert!(s.held);
                assert_eq!(s.limit, Some(3));
                assert_eq!(
                    s.holders,
                    [Holder {
                        id: String::new(),
                        kind: LockKind::Permits { limit: 3 },
                        slot: Some(0),
                        fencing_token: None
                    }]
                );
                assert_eq!((s.remaining_ms, s.fencing_token), (Some(800), Some(10)));
            }
            other => panic!("{other:?}"),
        }
    }

    use proptest::strategy::Strategy;

    proptest::proptest! {
        /// Hostile replies to permit scripts (any integers, any length) never
        /// panic the machine, and never hand out a slot outside the limit.
        #[test]
        fn hostile_permit_replies_never_panic_nor_grant_a_bad_slot(
            nodes in proptest::sample::select(vec![1usize, 3]),
            replies in proptest::collection::vec(
                proptest::prop_oneof![
                    // Near the real shape: codes, counters, waits, slots (some out of range), masks.
                    (-1i64..4, -1i64..10, -2i64..5, -1i64..5, -1i64..16, -1i64..2).prop_map(|(a, b, c, d, e, f)| vec![a, b, c, d, e, f]),
                    proptest::collection::vec(-3i64..200, 0..8),
                ],
                1..40,
            ),
        ) {
            let mut cfg = RedlockConfig::new(upstash_nodes(nodes));
            (cfg.fencing, cfg.max_subscriptions, cfg.retry_count) = (RedlockFencing::Strict, 0, 2);
            let mut h = Harness::new(RedlockMachine::new(cfg, Box::new(SeededEntropy::new(3))).unwrap());
            acquire_permits(&mut h, 3, Wait::For(2_000));
            h.m.inspect(h.now, "s").unwrap();
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
                    proptest::prop_assert!(l.slot().is_some_and(|k| k < 3), "{l:?}");
                    let slot = l.slot().unwrap_or(0);
                    proptest::prop_assert_eq!(l.handle.key, format!("{{edgelock:s}}:permit:{slot}"));
                }
            }
        }
    }
}

/// Issue 26: with a frozen minority, an attempt whose quorum granted stops
/// waiting for the silent nodes a grace (a tenth of the request timeout)
/// later: they count as timed out (cancelled, and cleaned up like any node
/// that may have applied), and the raise round goes out then, not at the
/// timeout. A contended attempt that can no longer reach a quorum does the
/// same. Rounds whose nodes all answer at once are unchanged (above).
#[test]
fn a_decided_round_stops_waiting_for_frozen_nodes_after_a_grace() {
    let mut h = redlock(5, |c| c.fencing = RedlockFencing::Strict);
    h.m.acquire(h.now, "job", &opts(Wait::Forever)).unwrap();
    let reqs = h.take();
    let t0 = h.now;
    for r in &reqs[..3] {
        h.answer(r, r#"{"result":[1,7,0]}"#);
    }
    assert!(
        h.take().is_empty(),
        "the grace: silent nodes may still answer"
    );
    assert_eq!(
        h.next_timer(),
        t0 + 100,
        "a tenth of the 1 s request timeout"
    );
    h.advance_to(t0 + 100);
    let mut cancelled = h.cancelled.clone();
    cancelled.sort();
    assert_eq!(
        cancelled,
        [reqs[3].id, reqs[4].id],
        "the frozen nodes' requests"
    );
    let raise = h.take();
    assert_eq!(raise.len(), 5, "the raise round, on every node");
    assert!(raise
        .iter()
        .all(|r| script_of(r) == scripts::Script::Extend));
    for r in &raise[..3] {
        h.answer(r, r#"{"result":[1,7]}"#);
    }
    assert!(h.take_events().is_empty(), "a raise waits for every node");
    h.advance_to(t0 + 100 + 1_000);
    let lock = acquired(&h.take_events());
    assert_eq!(lock.fencing_token, 7);

    // Contended: three nodes held by another owner, two frozen.
    h.m.acquire(h.now, "other", &opts(Wait::For(60_000)))
        .unwrap();
    let reqs = h.take();
    let t1 = h.now;
    for r in &reqs[..3] {
        h.answer(r, r#"{"result":[0,9,5000]}"#);
    }
    h.advance_to(t1 + 100);
    let cleanup = h.take();
    let targets: Vec<&Target> = cleanup.iter().map(|r| &r.target).collect();
    assert_eq!(
        targets,
        [&reqs[3].target, &reqs[4].target],
        "the silent nodes may hold the key"
    );
}

/// Issue 26 again (reliability 11b under load): an attempt split between
/// contenders (one grant, two nodes held by another owner) with two nodes
/// frozen could succeed only if both frozen nodes granted. It is given up
/// a grace after the quorum of answers came in, not at the request timeout:
/// its key is deleted from the node that granted it (and from the silent
/// ones) at once, so that it does not keep the other contenders out for a
/// whole timeout.
#[test]
fn a_split_attempt_with_a_frozen_minority_is_given_up_after_a_grace() {
    let mut h = redlock(5, |c| c.fencing = RedlockFencing::Strict);
    h.m.acquire(h.now, "job", &opts(Wait::For(60_000))).unwrap();
    let reqs = h.take();
    let t0 = h.now;
    h.answer(&reqs[0], r#"{"result":[1,7,0]}"#);
    assert!(
        h.take().is_empty(),
        "two answers are not a quorum of answers"
    );
    for r in &reqs[1..3] {
        h.answer(r, r#"{"result":[0,9,5000]}"#);
    }
    assert!(
        h.take().is_empty(),
        "the grace: silent nodes may still answer"
    );
    assert_eq!(
        h.next_timer(),
        t0 + 100,
        "a tenth of the 1 s request timeout"
    );
    h.advance_to(t0 + 100);
    let cleanup = h.take();
    let targets: Vec<&Target> = cleanup.iter().map(|r| &r.target).collect();
    assert_eq!(
        targets,
        [&reqs[0].target, &reqs[3].target, &reqs[4].target],
        "the granting node and the silent ones may hold the key"
    );
    assert!(
        cleanup
            .iter()
            .all(|r| script_of(r) == scripts::Script::Release),
        "an owner-checked delete"
    );
}

/// A waiting acquire cancelled while its first attempt is out, the lock
/// held: that attempt set the writer intent, so the acquire leaves (drops
/// the intent) before it reports `Aborted`; before, the intent stayed for
/// a queue lease and kept readers and atomic sets out (multi_lock's
/// cancelled group, in the loaded CI rehearsal).
#[test]
fn a_cancel_during_a_refused_first_attempt_drops_the_writer_intent() {
    let mut h = single(|_| {});
    let op = h.m.acquire(h.now, "job", &opts(Wait::Forever)).unwrap();
    let r = h.take();
    h.m.cancel(h.now, op);
    h.answer(&r[0], r#"{"result":[0,1,5000]}"#);
    let leave = h.take();
    assert_eq!(leave.len(), 1, "{leave:?}");
    assert_eq!(script_of(&leave[0]), scripts::Script::Leave);
    assert!(h.take_events().is_empty(), "Aborted once it left");
    h.answer(&leave[0], r#"{"result":1}"#);
    let ev = h.take_events();
    assert!(
        matches!(
            ev.as_slice(),
            [Event::Completed {
                result: Err(LockError::Aborted { .. }),
                ..
            }]
        ),
        "{ev:?}"
    );
}
