//! `AcquireAll` in one script (one node, `cross_slot_scripts`): the
//! capability and its defaults, the one request of a free set, a set not
//! free, the owner-checked cleanup after an unknown outcome or a cancel,
//! and `MultiLock`'s fallback around it.

use super::*;
use crate::core::MultiLock;
use scripts::Script;

fn atomic() -> Harness<RedisMachine> {
    single(|c| c.cross_slot_scripts = true)
}

fn all(names: &[&str], wait: Wait) -> Operation {
    Operation::AcquireAll {
        names: names.iter().map(|n| n.to_string()).collect(),
        options: AcquireOptions { wait, ttl_ms: None },
    }
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

/// The set script's keys and tokens, per name: (lock key, token).
fn set_members(req: &HttpRequest) -> Vec<(String, String)> {
    let a = args(req);
    assert_eq!(script_of(req), Script::AcquireSet);
    let nk: usize = a[2].parse().unwrap();
    assert_eq!(nk % scripts::SET_KEYS_PER_NAME, 0);
    let n = nk / scripts::SET_KEYS_PER_NAME;
    let keys = &a[3..3 + nk];
    let argv = &a[3 + nk..];
    assert_eq!(argv.len(), n + 1, "the TTL and one token per name");
    (0..n)
        .map(|i| {
            (
                keys[i * scripts::SET_KEYS_PER_NAME].clone(),
                argv[1 + i].clone(),
            )
        })
        .collect()
}

#[test]
fn the_option_and_its_defaults() {
    let w = RedisConfig::new(RedisNode::webdis("http://127.0.0.1:7379"));
    assert!(
        w.cross_slot_scripts,
        "webdis fronts a standalone redis-server"
    );
    let u = RedisConfig::new(RedisNode::upstash("https://x.upstash.io", "t"));
    assert!(!u.cross_slot_scripts, "upstash: not documented, so off");
    assert!(atomic().m.capabilities().atomic_sets);
    let mut plain = single(|_| {});
    assert!(!plain.m.capabilities().atomic_sets);
    let err = plain
        .m
        .start_operation(plain.now, all(&["a", "b"], Wait::Try))
        .unwrap_err();
    assert_eq!(err.code(), "INVALID_ARGUMENT");
    // Redlock never: its nodes vote name by name.
    assert!(!redlock(3, |_| {}).m.capabilities().atomic_sets);
}

#[test]
fn a_free_set_is_one_script_and_each_lock_an_ordinary_lock() {
    let mut h = atomic();
    let op =
        h.m.start_operation(h.now, all(&["b", "a", "c"], Wait::Forever))
            .unwrap();
    let r = h.take();
    assert_eq!(r.len(), 1, "one request for the whole set");
    let members = set_members(&r[0]);
    assert_eq!(
        members.iter().map(|m| m.0.as_str()).collect::<Vec<_>>(),
        ["{edgelock:b}", "{edgelock:a}", "{edgelock:c}"]
    );
    let tokens: std::collections::BTreeSet<_> = members.iter().map(|m| &m.1).collect();
    assert_eq!(tokens.len(), 3, "a fresh token per name");
    assert!(members.iter().all(|m| m.1.len() == TOKEN_RE_LEN));
    assert_eq!(args(&r[0])[3 + 30], "10000", "the TTL");
    h.now += 5;
    h.answer(&r[0], r#"{"result":[1,4,9,1]}"#);
    let done = completed(&h.take_events());
    let [Ok(Outcome::AcquiredAll(locks))] = &done[..] else {
        panic!("{done:?}")
    };
    let _ = op;
    assert_eq!(
        locks
            .iter()
            .map(|l| (l.name.as_str(), l.fencing_token))
            .collect::<Vec<_>>(),
        [("b", 4), ("a", 9), ("c", 1)]
    );
    for (l, m) in locks.iter().zip(&members) {
        assert_eq!(l.handle.owner, m.1);
        assert_eq!(l.handle.key, m.0);
        assert_eq!(l.handle.kind, LockKind::Exclusive);
        // Validity from the request's start, as for one name.
        assert_eq!(l.expires_at, 1_000 + 10_000 - (100 + 2));
    }
    // Each is an ordinary lock: its release is the ordinary release.
    h.m.release(h.now, locks[1].id).unwrap();
    let r = h.take();
    assert_eq!(r.len(), 1);
    assert_eq!(script_of(&r[0]), Script::Release);
    let a = args(&r[0]);
    assert_eq!(a[3], "{edgelock:a}");
    assert!(a.contains(&members[1].1));
    // And the watchdog renews each at TTL/3.
    assert_eq!(h.next_timer(), 1_000 + 10_000 / 3);
}

#[test]
fn a_set_not_free_takes_nothing_and_a_held_name_sends_nothing() {
    let mut h = atomic();
    h.m.start_operation(h.now, all(&["a", "b"], Wait::Try))
        .unwrap();
    let r = h.take();
    h.answer(&r[0], r#"{"result":[0]}"#);
    assert!(matches!(
        &completed(&h.take_events())[..],
        [Ok(Outcome::NotAcquired)]
    ));
    assert!(h.take().is_empty(), "nothing to clean up");
    // A name this client holds: NotAcquired without a request.
    h.m.acquire(h.now, "b", &opts(Wait::Try)).unwrap();
    let r = h.take();
    h.answer(&r[0], r#"{"result":[1,3,0]}"#);
    h.take_events();
    h.m.start_operation(h.now, all(&["a", "b"], Wait::Try))
        .unwrap();
    assert!(h.take().is_empty());
    assert!(matches!(
        &completed(&h.take_events())[..],
        [Ok(Outcome::NotAcquired)]
    ));
}

#[test]
fn a_malformed_or_partial_reply_is_an_error() {
    let mut h = atomic();
    h.m.start_operation(h.now, all(&["a", "b"], Wait::Try))
        .unwrap();
    let r = h.take();
    let members = set_members(&r[0]);
    // Two names, one counter: not a reply of this script.
    h.answer(&r[0], r#"{"result":[1,4]}"#);
    let cleanup = h.take();
    assert_eq!(cleanup.len(), 1, "one owner-checked delete at a time");
    assert_eq!(script_of(&cleanup[0]), Script::Release);
    h.answer(&cleanup[0], r#"{"result":0}"#);
    let next = h.take();
    assert_eq!(script_of(&next[0]), Script::Release);
    assert!(args(&next[0]).contains(&members[1].1));
    h.answer(&next[0], r#"{"result":0}"#);
    let done = completed(&h.take_events());
    assert!(
        matches!(&done[..], [Err(e)] if e.code() == "BACKEND"),
        "{done:?}"
    );
}

#[test]
fn an_unknown_outcome_deletes_every_key_by_its_owner_before_the_error() {
    let mut h = atomic();
    h.m.start_operation(h.now, all(&["a", "b", "c"], Wait::Try))
        .unwrap();
    let r = h.take();
    let members = set_members(&r[0]);
    // The request times out: the script may have run.
    h.advance_to(h.now + 5_000);
    for m in &members {
        let c = h.take();
        assert_eq!(c.len(), 1);
        assert_eq!(script_of(&c[0]), Script::Release);
        let a = args(&c[0]);
        assert_eq!(a[3], m.0, "the name's own key");
        assert!(a.contains(&m.1), "owner-checked by the name's token");
        assert!(
            completed(&h.take_events()).is_empty(),
            "not before the cleanup"
        );
        h.answer(&c[0], r#"{"result":1}"#);
    }
    let done = completed(&h.take_events());
    assert!(
        matches!(&done[..], [Err(e)] if e.code() == "TRANSPORT"),
        "{done:?}"
    );
    // A refused connection ran nothing: the error at once.
    h.m.start_operation(h.now, all(&["a", "b"], Wait::Try))
        .unwrap();
    let r = h.take();
    h.fail(&r[0]);
    assert!(h.take().is_empty());
    assert!(matches!(&completed(&h.take_events())[..], [Err(_)]));
}

#[test]
fn a_cancel_in_flight_releases_a_set_the_answer_brings() {
    let mut h = atomic();
    let op =
        h.m.start_operation(h.now, all(&["a", "b"], Wait::Forever))
            .unwrap();
    let r = h.take();
    h.m.cancel(h.now, op);
    assert!(completed(&h.take_events()).is_empty());
    h.answer(&r[0], r#"{"result":[1,2,2]}"#);
    for _ in 0..2 {
        let c = h.take();
        assert_eq!(script_of(&c[0]), Script::Release);
        h.answer(&c[0], r#"{"result":1}"#);
    }
    let done = completed(&h.take_events());
    assert!(
        matches!(&done[..], [Err(e)] if e.code() == "ABORTED"),
        "{done:?}"
    );
}

#[test]
fn multilock_tries_the_script_then_falls_back_name_by_name() {
    let inner = RedisMachine::new(
        {
            let mut c = RedisConfig::new(RedisNode::webdis("http://127.0.0.1:7379"));
            c.max_subscriptions = 0;
            c
        },
        Box::new(SeededEntropy::new(9)),
    )
    .unwrap();
    let mut m = MultiLock::new(inner);
    let now = 1_000;
    let sent = |m: &mut MultiLock<RedisMachine>| {
        let mut out = Vec::new();
        while let Some(t) = m.poll_transmit() {
            if let Transmit::Send(r) = t {
                out.push(r);
            }
        }
        out
    };
    // Webdis names its reply after the command (`EVALSHA` once cached).
    let answer = |m: &mut MultiLock<RedisMachine>, r: &HttpRequest, body: &str| {
        let cmd = String::from_utf8_lossy(&r.body)
            .split('/')
            .next()
            .unwrap()
            .to_string();
        let body = format!(r#"{{"{cmd}":{body}}}"#);
        m.handle_input(
            now,
            Input::Response {
                id: r.id,
                status: 200,
                body: body.into_bytes(),
            },
        );
    };
    let events = |m: &mut MultiLock<RedisMachine>| {
        let mut out = Vec::new();
        while let Some(e) = m.poll_event() {
            out.push(e);
        }
        out
    };
    // A Try that finds the set not free: NotAcquired, nothing else sent.
    m.start(now, all(&["x", "y"], Wait::Try)).unwrap();
    let r = sent(&mut m);
    assert_eq!(r.len(), 1);
    answer(&mut m, &r[0], "[0]");
    assert!(sent(&mut m).is_empty());
    assert!(matches!(
        &completed(&events(&mut m))[..],
        [Ok(Outcome::NotAcquired)]
    ));
    // A waiting set falls back to the recipe: the first name's acquire.
    m.start(now, all(&["y", "x"], Wait::Forever)).unwrap();
    let r = sent(&mut m);
    answer(&mut m, &r[0], "[0]");
    let r = sent(&mut m);
    assert_eq!(r.len(), 1);
    // Webdis: the command in the body, `/`-separated and escaped.
    let first = String::from_utf8_lossy(&r[0].body).to_string();
    assert!(first.starts_with("EVAL"), "{first}");
    assert!(
        first.contains("%7Bedgelock%3Ax%7D") || first.contains("{edgelock:x}"),
        "{first}"
    );
    assert!(!first.contains("acquire set"), "the ordinary acquire");
}
