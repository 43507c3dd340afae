//! The push wake-up at the machine level, with scripted streams: when a
//! waiter subscribes, what each stream event makes it do, and that its
//! streams close with it.

use super::*;
use crate::core::redis::subscription::wake_channel;

fn single_push(f: impl FnOnce(&mut RedisConfig)) -> Harness<RedisMachine> {
    let mut cfg = RedisConfig::new(RedisNode::upstash("http://10.0.0.1:8080", "tok-secret"));
    cfg.retry_delay_ms = 200;
    cfg.retry_jitter_ms = 0;
    f(&mut cfg);
    Harness::new(RedisMachine::new(cfg, Box::new(SeededEntropy::new(7))).unwrap())
}

const HELD: &str = r#"{"result":[0,4,9000]}"#;
const GRANTED: &str = r#"{"result":[1,5,0]}"#;

impl<M: LockMachine> Harness<M> {
    pub(super) fn chunk(&mut self, stream: &HttpRequest, data: &str) {
        self.m.handle_input(
            self.now,
            Input::Chunk {
                id: stream.id,
                data: data.as_bytes().to_vec(),
            },
        );
        self.drain();
    }

    fn end(&mut self, stream: &HttpRequest) {
        self.m
            .handle_input(self.now, Input::StreamEnd { id: stream.id });
        self.drain();
    }

    /// Splits what was sent into (streams, scripts).
    pub(super) fn take_split(&mut self) -> (Vec<HttpRequest>, Vec<HttpRequest>) {
        self.take().into_iter().partition(|r| r.stream)
    }
}

/// Refused once, then: the subscription goes out; its confirmation triggers
/// an attempt; refused again, the waiter sleeps until min(PTTL, fallback)
/// and a message makes it attempt at once. Granted, the stream is closed.
#[test]
fn a_waiter_subscribes_after_a_refusal_and_attempts_on_confirmation_and_on_a_message() {
    let mut h = single_push(|_| {});
    h.m.acquire(h.now, "job", &opts(Wait::Forever)).unwrap();
    let (streams, r) = h.take_split();
    assert!(streams.is_empty(), "no subscription before contention");
    h.answer(&r[0], HELD);
    let (streams, scripts) = h.take_split();
    assert!(scripts.is_empty());
    let [s] = streams.as_slice() else {
        panic!("{streams:?}")
    };
    let channel = wake_channel("{edgelock:job}");
    assert_eq!(
        s.target.url(),
        Some(format!("http://10.0.0.1:8080/subscribe/{channel}").as_str())
    );
    assert_eq!(s.method, Method::Post);
    assert!(s
        .headers
        .contains(&("Accept".into(), "text/event-stream".into())));
    assert_eq!(
        h.next_timer() - h.now,
        200,
        "not confirmed yet: the short poll"
    );
    h.chunk(s, &format!("data: subscribe,{channel},1\n\n"));
    let r = h.take();
    assert_eq!(r.len(), 1, "the confirmation is followed by an attempt");
    h.answer(&r[0], HELD);
    assert_eq!(
        h.next_timer() - h.now,
        2_000,
        "confirmed: min(PTTL 9000, the 2 s fallback)"
    );
    h.now += 700;
    h.chunk(s, &format!("data: message,{channel},released:4\n\n"));
    let r = h.take();
    assert_eq!(r.len(), 1, "a message: one attempt at once");
    h.answer(&r[0], GRANTED);
    assert_eq!(acquired(&h.take_events()).fencing_token, 5);
    assert_eq!(
        h.cancelled,
        vec![s.id],
        "the stream is closed with the acquire"
    );
}

/// A message that arrives while an attempt is out: the refused attempt is
/// followed by another at once (it may have read the lock before the release).
#[test]
fn a_message_during_an_attempt_repeats_it_at_once() {
    let mut h = single_push(|_| {});
    h.m.acquire(h.now, "job", &opts(Wait::Forever)).unwrap();
    let r = h.take();
    h.answer(&r[0], HELD);
    let (s, _) = h.take_split();
    h.chunk(&s[0], "data: subscribe,c,1\n\n");
    let r = h.take();
    h.chunk(&s[0], "data: message,c,released:4\n\n");
    assert!(h.take().is_empty(), "the attempt in flight is not doubled");
    h.answer(&r[0], HELD);
    assert_eq!(h.take().len(), 1, "attempted again at once");
}

/// A stream that ends or sends garbage: the waiter attempts, falls back to
/// the short poll and subscribes again after the back-off.
#[test]
fn a_lost_or_hostile_stream_falls_back_to_the_timer_and_resubscribes() {
    for cut in ["end", "garbage", "refused"] {
        let mut h = single_push(|_| {});
        h.m.acquire(h.now, "job", &opts(Wait::Forever)).unwrap();
        let r = h.take();
        h.answer(&r[0], HELD);
        let (s, _) = h.take_split();
        h.chunk(&s[0], "data: subscribe,c,1\n\n");
        let r = h.take();
        h.answer(&r[0], HELD);
        match cut {
            "end" => h.end(&s[0]),
            "garbage" => {
                h.chunk(&s[0], "data: message\n");
                assert!(
                    h.cancelled.contains(&s[0].id),
                    "{cut}: an unreadable stream is closed"
                );
            }
            _ => h.answer(&s[0], "nope"),
        }
        let (streams, r) = h.take_split();
        assert!(streams.is_empty(), "{cut}: not at once");
        assert_eq!(r.len(), 1, "{cut}: a lost stream means an attempt");
        h.answer(&r[0], HELD);
        assert_eq!(h.next_timer() - h.now, 200, "{cut}: the short poll again");
        h.advance_to(h.now + 200);
        let (streams, r) = h.take_split();
        assert_eq!(
            (streams.len(), r.len()),
            (1, 1),
            "{cut}: subscribed again after the back-off"
        );
    }
}

/// A subscription never confirmed times out like any request.
#[test]
fn an_unconfirmed_subscription_times_out() {
    let mut h = single_push(|c| c.request_timeout_ms = 500);
    h.m.acquire(h.now, "job", &opts(Wait::Forever)).unwrap();
    let r = h.take();
    h.answer(&r[0], HELD);
    let (s, _) = h.take_split();
    for _ in 0..3 {
        let t = h.next_timer();
        h.advance_to(t);
        for r in h.take().into_iter().filter(|r| !r.stream) {
            h.answer(&r, HELD);
        }
    }
    assert!(h.cancelled.contains(&s[0].id), "timed out and cancelled");
}

/// Cancel, a wait bound and close all end the acquire and close its stream;
/// a live stream never keeps it waiting past its bound.
#[test]
fn the_stream_ends_with_the_acquire() {
    for how in ["cancel", "deadline", "close"] {
        let mut h = single_push(|_| {});
        let op = h.m.acquire(h.now, "job", &opts(Wait::For(3_000))).unwrap();
        let r = h.take();
        h.answer(&r[0], HELD);
        let (s, _) = h.take_split();
        h.chunk(&s[0], "data: subscribe,c,1\n\n");
        let r = h.take();
        h.answer(&r[0], HELD);
        match how {
            "cancel" => h.m.cancel(h.now, op),
            "close" => {
                h.m.close(h.now);
            }
            _ => {
                while h.take_events().is_empty() {
                    let t = h.next_timer();
                    assert!(t <= 1_000 + 3_000, "{how}: no timer past the bound");
                    h.advance_to(t);
                    // Answered until nothing is left out: the last refusal is followed by the leave.
                    loop {
                        let sent: Vec<_> = h.take().into_iter().filter(|r| !r.stream).collect();
                        if sent.is_empty() {
                            break;
                        }
                        for r in sent {
                            h.answer(
                                &r,
                                if script_of(&r) == scripts::Script::Leave {
                                    r#"{"result":1}"#
                                } else {
                                    HELD
                                },
                            );
                        }
                    }
                }
            }
        }
        h.drain();
        // A waiter that gives up leaves the waiters' queue first (the
        // timed-out one has already been answered in the loop above).
        let leave: Vec<_> = h.take().into_iter().filter(|r| !r.stream).collect();
        if how != "deadline" {
            assert_eq!(
                leave.iter().map(script_of).collect::<Vec<_>>(),
                vec![scripts::Script::Leave],
                "{how}"
            );
            h.answer(&leave[0], r#"{"result":1}"#);
        }
        assert!(h.cancelled.contains(&s[0].id), "{how}: stream closed");
        assert_eq!(h.m.live_count(), 0, "{how}");
    }
}

/// Redlock: one subscription per node, within `max_subscriptions`; the long
/// fallback applies once enough are live to meet any holder's quorum.
#[test]
fn redlock_subscribes_per_node_within_the_limit() {
    let mut h = redlock(3, |c| {
        c.max_subscriptions = 2;
        c.retry_delay_ms = 200;
        c.retry_jitter_ms = 0;
    });
    h.m.acquire(h.now, "job", &opts(Wait::Forever)).unwrap();
    for r in h.take() {
        h.answer(&r, HELD);
    }
    let (streams, _) = h.take_split();
    assert_eq!(streams.len(), 2, "two of three nodes: the limit");
    h.chunk(&streams[0], "data: subscribe,c,1\n\n");
    for r in h.take().into_iter().filter(|r| !r.stream) {
        h.answer(&r, HELD);
    }
    assert_eq!(
        h.next_timer() - h.now,
        200,
        "one live node cannot meet every quorum of 2 out of 3"
    );
    h.chunk(&streams[1], "data: subscribe,c,1\n\n");
    for r in h.take().into_iter().filter(|r| !r.stream) {
        h.answer(&r, HELD);
    }
    assert_eq!(
        h.next_timer() - h.now,
        2_000,
        "two live nodes meet every quorum"
    );
}

/// Webdis subscriptions: `GET /SUBSCRIBE/<channel>` and JSON objects.
#[test]
fn webdis_subscriptions_are_gets_read_as_json_objects() {
    let mut h = Harness::new(
        RedisMachine::new(
            {
                let mut c = RedisConfig::new(RedisNode::webdis("http://10.0.0.2:7379"));
                c.retry_jitter_ms = 0;
                c
            },
            Box::new(SeededEntropy::new(7)),
        )
        .unwrap(),
    );
    h.m.acquire(h.now, "a/b c", &opts(Wait::Forever)).unwrap();
    let r = h.take();
    h.answer(&r[0], r#"{"EVAL":[0,4,9000]}"#);
    let (s, _) = h.take_split();
    let channel = wake_channel("{edgelock:a/b c}");
    assert_eq!(s[0].method, Method::Get);
    assert_eq!(
        s[0].target.url(),
        Some(format!("http://10.0.0.2:7379/SUBSCRIBE/{channel}").as_str())
    );
    h.chunk(
        &s[0],
        &format!(r#"{{"SUBSCRIBE":["subscribe","{channel}",1]}}{{"SUBSCRIBE":["mess"#),
    );
    let r = h.take();
    assert_eq!(r.len(), 1);
    h.answer(&r[0], r#"{"EVAL":[0,4,9000]}"#);
    h.chunk(&s[0], &format!(r#"age","{channel}","released:4"]}}"#));
    assert_eq!(h.take().len(), 1, "woken by the split message");
}

/// The default lock's waiters join the waiters' queue once they wait (the
/// first attempt is a plain `SET NX`), without the fair flag; a release
/// that names another waiter as the queue's head wakes only that one.
#[test]
fn a_waiter_of_the_default_lock_queues_and_wakes_only_when_named() {
    let mut h = single_push(|_| {});
    h.m.acquire(h.now, "job", &opts(Wait::Forever)).unwrap();
    let r = h.take();
    assert_eq!(
        script_of(&r[0]),
        scripts::Script::Acquire,
        "the first attempt does not queue"
    );
    h.answer(&r[0], HELD);
    let (s, _) = h.take_split();
    h.chunk(&s[0], "data: subscribe,c,1\n\n");
    let r = h.take();
    assert_eq!(
        script_of(&r[0]),
        scripts::Script::AcquireQueued,
        "a waiter queues"
    );
    let argv = &r[0].body;
    let text = String::from_utf8_lossy(argv);
    assert!(
        text.ends_with(r#""6000","2","6000"]"#),
        "a 6 s lease, the default bypass bound (2), the writer intent as long: {text}"
    );
    h.answer(&r[0], HELD);
    h.now += 10;
    h.chunk(&s[0], "data: message,c,released:4:someoneelse\n\n");
    assert!(
        h.take().is_empty(),
        "a release that wakes another queued waiter"
    );
    h.now += 10;
    h.chunk(&s[0], "data: message,c,released:5\n\n");
    let r = h.take();
    assert_eq!(r.len(), 1, "a release naming no head wakes every waiter");
    h.answer(&r[0], GRANTED);
    assert_eq!(acquired(&h.take_events()).fencing_token, 5);
}

/// A release naming this waiter as the queue's head is acted on at once,
/// every time (the bounded bypass keeps the free lock for the head), while
/// unnamed messages after the first stay limited to one attempt per retry
/// delay.
#[test]
fn every_release_naming_the_head_is_acted_on_at_once() {
    let mut h = single_push(|_| {});
    h.m.acquire(h.now, "job", &opts(Wait::Forever)).unwrap();
    let r = h.take();
    h.answer(&r[0], HELD);
    let (s, _) = h.take_split();
    h.chunk(&s[0], "data: subscribe,c,1\n\n");
    let r = h.take();
    assert_eq!(script_of(&r[0]), scripts::Script::AcquireQueued);
    // ARGV[3] of the queued acquire: this waiter's id.
    let me = args(&r[0])[12].clone();
    h.answer(&r[0], HELD);
    for fence in 4..7 {
        h.now += 10;
        h.chunk(&s[0], &format!("data: message,c,released:{fence}:{me}\n\n"));
        let r = h.take();
        assert_eq!(r.len(), 1, "named by release {fence}: an attempt at once");
        // Someone bypassed it again: held.
        h.answer(&r[0], HELD);
    }
    h.now += 10;
    h.chunk(&s[0], "data: message,c,released:7\n\n");
    assert!(
        h.take().is_empty(),
        "an unnamed message within the retry delay waits for it"
    );
    h.now += 200;
    h.m.handle_timeout(h.now);
    h.drain();
    let r = h.take();
    assert_eq!(r.len(), 1, "then attempts");
    h.answer(&r[0], GRANTED);
    assert_eq!(acquired(&h.take_events()).fencing_token, 5);
}
