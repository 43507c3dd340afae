//! The budget wrapper around the real Redis and Redlock machines, with
//! scripted node answers: it must never let a request past the budget, and
//! every operation it stops must end with `BudgetExhausted`.

use super::*;
use crate::core::redis::scripts::Script;
use crate::core::redis::{RedisConfig, RedisMachine, RedisNode, RedlockConfig, RedlockMachine};
use crate::core::types::{AcquireOptions, HttpRequest, LockId, Wait};
use crate::core::SeededEntropy;
use crate::core::{LockMachineExt, Outcome};

struct Harness<M: LockMachine> {
    m: Budgeted<M>,
    now: Millis,
    /// Sent and not yet answered.
    inflight: Vec<HttpRequest>,
    sent_total: u32,
    events: Vec<Event>,
}

impl<M: LockMachine> Harness<M> {
    fn new(m: Budgeted<M>) -> Self {
        Harness {
            m,
            now: 1_000,
            inflight: Vec::new(),
            sent_total: 0,
            events: Vec::new(),
        }
    }

    fn drain(&mut self) {
        while let Some(t) = self.m.poll_transmit() {
            match t {
                Transmit::Send(r) => {
                    self.sent_total += 1;
                    self.inflight.push(r);
                }
                t @ (Transmit::Open(_) | Transmit::Write { .. }) => {
                    panic!("an HTTP machine opened a byte stream: {t:?}")
                }
                Transmit::Cancel(id) => self.inflight.retain(|r| r.id != id),
            }
        }
        while let Some(e) = self.m.poll_event() {
            self.events.push(e);
        }
        assert!(
            self.sent_total <= self.m.budget(),
            "{} requests sent with a budget of {}",
            self.sent_total,
            self.m.budget()
        );
        assert_eq!(self.sent_total, self.m.sent());
    }

    /// Answers every request in flight with `reply(script)`, then runs timers,
    /// until nothing is in flight and no timer is due within `horizon` ms.
    fn run(&mut self, horizon: Millis, reply: impl Fn(Script) -> &'static str) {
        self.drain();
        for _ in 0..10_000 {
            if let Some(r) = self.inflight.first().cloned() {
                self.inflight.remove(0);
                let args: Vec<String> = serde_json::from_slice(&r.body).unwrap();
                let script = Script::from_text(args[1].as_bytes())
                    .or_else(|| Script::from_sha1(args[1].as_bytes()))
                    .unwrap();
                let body = reply(script).as_bytes().to_vec();
                self.m.handle_input(
                    self.now,
                    Input::Response {
                        id: r.id,
                        status: 200,
                        body,
                    },
                );
                self.drain();
                continue;
            }
            match self.m.poll_timeout() {
                Some(t) if t <= self.now + horizon => {
                    self.now = self.now.max(t);
                    self.m.handle_timeout(self.now);
                    self.drain();
                }
                _ => return,
            }
        }
        panic!("the machine never settled");
    }

    fn failure_of(&self, op: OpId) -> Option<&LockError> {
        self.events.iter().find_map(|e| match e {
            Event::Completed {
                op: o,
                result: Err(error),
            } if *o == op => Some(error),
            _ => None,
        })
    }

    fn acquired(&self, op: OpId) -> Option<LockId> {
        self.events.iter().find_map(|e| match e {
            Event::Completed {
                op: o,
                result: Ok(Outcome::Acquired(lock)),
            } if *o == op => Some(lock.id),
            _ => None,
        })
    }
}

/// These tests script command rounds; waiters poll (no subscription
/// streams), except in the test about streams.
fn redis(budget: u32, reserve: u32) -> Harness<RedisMachine> {
    let mut cfg = RedisConfig::new(RedisNode::upstash("http://10.0.0.1:8080", "tok-secret"));
    cfg.max_subscriptions = 0;
    let m = RedisMachine::new(cfg, Box::new(SeededEntropy::new(1))).unwrap();
    Harness::new(Budgeted::new(m, budget, reserve))
}

fn redlock(nodes: usize, budget: u32, reserve: u32) -> Harness<RedlockMachine> {
    let urls = (0..nodes)
        .map(|i| RedisNode::upstash(format!("http://10.0.0.{i}:8080"), "tok-secret"))
        .collect();
    let mut cfg = RedlockConfig::new(urls);
    cfg.max_subscriptions = 0;
    let m = RedlockMachine::new(cfg, Box::new(SeededEntropy::new(2))).unwrap();
    Harness::new(Budgeted::new(m, budget, reserve))
}

fn wait_for(ms: u64) -> AcquireOptions {
    AcquireOptions {
        wait: Wait::For(ms),
        ttl_ms: None,
    }
}

fn held(s: Script) -> &'static str {
    match s {
        Script::Acquire | Script::AcquireQueued => r#"{"result":[0,4,5000]}"#,
        _ => r#"{"result":0}"#,
    }
}

fn free(s: Script) -> &'static str {
    match s {
        Script::Acquire | Script::AcquireQueued => r#"{"result":[1,9,0]}"#,
        _ => r#"{"result":1}"#,
    }
}

fn assert_budget_error(e: Option<&LockError>, name: &str, budget: u32) {
    match e {
        Some(LockError::BudgetExhausted {
            backend,
            name: n,
            budget: b,
        }) => {
            assert_eq!((n.as_str(), *b), (name, budget));
            assert!(!backend.is_empty());
            assert_eq!(e.map(LockError::code), Some("BUDGET"));
        }
        other => panic!("expected BudgetExhausted, got {other:?}"),
    }
}

#[test]
fn a_long_wait_ends_with_budget_exhausted_before_the_reserve_is_touched() {
    let mut h = redis(6, 1);
    let op = h.m.acquire(h.now, "job", &wait_for(600_000)).unwrap();
    h.run(60_000, held);
    assert_budget_error(h.failure_of(op), "job", 6);
    // Five polls, then the waiter leaves the waiters' queue (it joined it
    // when it first waited) from the reserve, as a cancelled attempt's
    // cleanup would; then nothing more.
    assert_eq!(h.m.sent(), 6);
    assert!(h.m.is_exhausted());
    assert!(h.m.poll_timeout().is_none(), "nothing keeps running");
    assert_eq!(h.m.live_count(), 0);
    // A new operation is refused up front instead of failing half-way.
    let again = h.m.acquire(h.now, "job", &wait_for(1_000));
    assert!(
        matches!(again, Err(LockError::BudgetExhausted { .. })),
        "{again:?}"
    );
}

#[test]
fn the_reserve_is_kept_for_the_release_of_a_held_lock() {
    let mut h = redis(2, 1);
    let op = h.m.acquire(h.now, "job", &wait_for(1_000)).unwrap();
    h.run(0, free);
    let lock = h.acquired(op).expect("acquired");
    // The one spendable request is used: no other acquire may start...
    let other = h.m.acquire(
        h.now,
        "other",
        &AcquireOptions {
            wait: Wait::Try,
            ttl_ms: None,
        },
    );
    assert!(
        matches!(other, Err(LockError::BudgetExhausted { ref name, .. }) if name == "other"),
        "{other:?}"
    );
    // ...but the release still goes out.
    let rel = h.m.release(h.now, lock).unwrap();
    h.run(0, free);
    assert!(
        h.events.iter().any(|e| matches!(e, Event::Completed { op, result: Ok(Outcome::Released { held_until_release: true, .. }) } if *op == rel)),
        "{:?}",
        h.events
    );
    assert_eq!(h.m.sent(), 2);
    assert!(!h.m.is_exhausted());
}

#[test]
fn redlock_rounds_stop_mid_round_and_clean_up_within_the_budget() {
    // 3 nodes: a round costs 3 requests. Budget 8, reserve 3: the first round
    // goes out whole, the second only in part (2 of 3) before the budget of 5
    // is spent; the cancelled attempt then deletes its keys from the reserve.
    let mut h = redlock(3, 8, 3);
    let op = h.m.acquire(h.now, "job", &wait_for(600_000)).unwrap();
    // Round one is refused everywhere (held), round two granted where sent.
    let mut round = 0;
    h.drain();
    while h.failure_of(op).is_none() && h.acquired(op).is_none() && round < 100 {
        round += 1;
        let reqs = std::mem::take(&mut h.inflight);
        for r in reqs {
            let args: Vec<String> = serde_json::from_slice(&r.body).unwrap();
            let script = Script::from_text(args[1].as_bytes())
                .or_else(|| Script::from_sha1(args[1].as_bytes()))
                .unwrap();
            let reply = if h.m.sent() <= 3 {
                held(script)
            } else {
                free(script)
            };
            h.m.handle_input(
                h.now,
                Input::Response {
                    id: r.id,
                    status: 200,
                    body: reply.as_bytes().to_vec(),
                },
            );
            h.drain();
        }
        if let Some(t) = h.m.poll_timeout() {
            h.now = h.now.max(t);
            h.m.handle_timeout(h.now);
            h.drain();
        }
    }
    assert_budget_error(h.failure_of(op), "job", 8);
    assert!(h.m.sent() <= 8);
    assert!(
        h.m.sent() > 5,
        "the granted keys were deleted from the reserve (sent {})",
        h.m.sent()
    );
    assert_eq!(h.m.live_count(), 0);
}

#[test]
fn a_budget_of_zero_refuses_everything_without_sending() {
    let mut h = redis(0, 1);
    let r = h.m.acquire(h.now, "job", &wait_for(1_000));
    assert!(
        matches!(r, Err(LockError::BudgetExhausted { budget: 0, .. })),
        "{r:?}"
    );
    let c = h.m.close(h.now);
    h.run(0, free);
    assert!(h
        .events
        .iter()
        .any(|e| matches!(e, Event::Completed { op, result: Ok(Outcome::Closed) } if *op == c)));
    assert_eq!(h.m.sent(), 0);
}

#[test]
fn an_inspect_that_cannot_be_cancelled_fails_with_budget_exhausted() {
    // Redlock inspects every node; with room for one request only, the other
    // two are withheld and answered with failures.
    let mut h = redlock(3, 2, 1);
    let op = h.m.inspect(h.now, "job").unwrap();
    h.run(10_000, |_| r#"{"result":[0,0,-2,4]}"#);
    assert_budget_error(h.failure_of(op), "job", 2);
    assert!(h.m.sent() <= 1, "the reserve is not for inspect");
}
