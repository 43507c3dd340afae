//! The lock service's request checks and state machine
//! (src/worker/lock_object/{protocol,machine}.rs) on the host: the modules
//! are plain Rust, but the Worker compiles only for wasm32, so their unit
//! tests run here by including the files. The Durable Object itself is
//! tested in workerd by tests/worker/lock_object.test.mjs.

/// What `crate::core` names inside the included modules.
mod core {
    pub use edgelock::core::*;
}

#[path = "../src/worker/lock_object/machine.rs"]
#[allow(dead_code)]
mod machine;

#[path = "../src/worker/lock_object/protocol.rs"]
#[allow(dead_code)]
mod protocol;

mod left_owners {
    use super::machine::*;

    const A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
    const C: &str = "cccccccccccccccccccccccccccccccc";

    fn all(_: &str) -> bool {
        true
    }

    /// A client's poll that arrives after its own leave (sim_durable seed
    /// 10743 with 20000 seeds): the owner is neither queued again nor
    /// granted a lease nobody would use.
    #[test]
    fn a_poll_overtaken_by_its_leave_is_not_queued_again() {
        let mut s = LockState::default();
        let mut out = vec![];
        s.acquire(A, Kind::Exclusive, 1000, 0, 0, &all, &mut out);
        assert_eq!(
            s.acquire(B, Kind::Exclusive, 1000, 5000, 1, &all, &mut out),
            Acquire::Queued { waiters: 1 }
        );
        // B's client gave up: its leave takes it out of the queue.
        assert!(matches!(
            s.acquire(B, Kind::Exclusive, 1000, 0, 10, &all, &mut out),
            Acquire::Busy(_)
        ));
        assert!(s.queue.is_empty());
        out.clear();
        // B's next poll, sent before the leave, arrives after it.
        assert!(matches!(
            s.acquire(B, Kind::Exclusive, 1000, 5000, 20, &all, &mut out),
            Acquire::Busy(_)
        ));
        assert!(s.queue.is_empty(), "the abandoned owner was queued again");
        // A releases: nobody is granted.
        assert!(s.release(A, 1, 30, &all, &mut out));
        assert!(out.is_empty(), "{out:?}");
        assert!(s.holders.is_empty());
        assert_eq!(s.counter, 1);
    }

    #[test]
    fn a_late_poll_after_a_granted_leave_is_not_granted() {
        let mut s = LockState::default();
        let mut out = vec![];
        // The leave finds the lock free: granted, and released by the client.
        assert!(matches!(
            s.acquire(C, Kind::Exclusive, 2000, 0, 0, &all, &mut out),
            Acquire::Held { token: 1, .. }
        ));
        assert!(s.release(C, 1, 5, &all, &mut out));
        // The late poll.
        assert!(matches!(
            s.acquire(C, Kind::Exclusive, 1000, 5000, 10, &all, &mut out),
            Acquire::Busy(Busy { token: 1, .. })
        ));
        assert!(s.holders.is_empty() && s.queue.is_empty());
        // A queued owner's release also ends its acquire.
        s.acquire(A, Kind::Exclusive, 1000, 0, 20, &all, &mut out);
        s.acquire(B, Kind::Exclusive, 1000, 5000, 20, &all, &mut out);
        assert!(!s.release(B, 0, 25, &all, &mut out));
        assert!(matches!(
            s.acquire(B, Kind::Exclusive, 1000, 5000, 30, &all, &mut out),
            Acquire::Busy(_)
        ));
        assert!(s.queue.is_empty());
        // The holder itself still gets its grant back (idempotent).
        assert!(matches!(
            s.acquire(A, Kind::Exclusive, 1000, 0, 40, &all, &mut out),
            Acquire::Held { token: 2, .. }
        ));
    }

    #[test]
    fn left_owners_are_forgotten_after_a_while_and_bounded() {
        let mut s = LockState::default();
        let mut out = vec![];
        s.acquire(A, Kind::Exclusive, 1000, 0, 0, &all, &mut out);
        s.release(A, 1, 1, &all, &mut out);
        assert_eq!(s.left.len(), 1);
        s.inspect(LEFT_KEEP_MS, &all, &mut out);
        assert!(s.left.is_empty());
        for i in 0..MAX_LEFT + 10 {
            let o = format!("{i:032x}");
            s.acquire(&o, Kind::Exclusive, 1000, 0, 10, &all, &mut out);
        }
        assert_eq!(s.left.len(), MAX_LEFT);
        assert!(serde_json::to_vec(&s).unwrap().len() < 32 * 1024);
    }

    #[test]
    fn a_state_stored_without_left_owners_loads() {
        let old = r#"{"name":"x","counter":7,"holder":{"owner":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","token":7,"deadline_ms":100},"queue":[]}"#;
        let s: LockState = serde_json::from_str(old).unwrap();
        assert_eq!(s.counter, 7);
        assert!(s.left.is_empty());
        // And an empty set is not stored (the old shape again).
        assert!(!serde_json::to_string(&s).unwrap().contains("left"));
    }
}

mod kinds {
    use super::machine::*;
    use super::protocol::{parse, Op};

    fn owner(i: u32) -> String {
        format!("{i:032x}")
    }

    fn all(_: &str) -> bool {
        true
    }

    fn held(a: &Acquire) -> Option<(u64, Option<u32>)> {
        match a {
            Acquire::Held { token, slot, .. } => Some((*token, *slot)),
            _ => None,
        }
    }

    #[test]
    fn a_semaphore_grants_limit_permits_in_distinct_slots_with_their_own_tokens() {
        let mut s = LockState::default();
        let mut out = vec![];
        let p3 = Kind::Permit { limit: 3 };
        let got: Vec<_> = (0..3)
            .map(|i| held(&s.acquire(&owner(i), p3, 1000, 0, 10, &all, &mut out)).unwrap())
            .collect();
        assert_eq!(got, vec![(1, Some(0)), (2, Some(1)), (3, Some(2))]);
        assert_eq!(s.limit, Some(3));
        // The fourth waits; another limit is refused and changes nothing.
        assert_eq!(
            s.acquire(&owner(3), p3, 1000, 5000, 10, &all, &mut out),
            Acquire::Queued { waiters: 1 }
        );
        let before = s.clone();
        assert_eq!(
            s.acquire(
                &owner(4),
                Kind::Permit { limit: 5 },
                1000,
                5000,
                10,
                &all,
                &mut out
            ),
            Acquire::OtherLimit { limit: 3 }
        );
        assert_eq!(s, before);
        // Exclusive and shared wait behind permits.
        assert_eq!(
            s.acquire(&owner(5), Kind::Exclusive, 1000, 0, 10, &all, &mut out),
            Acquire::Busy(Busy {
                token: 3,
                pttl_ms: 1000,
                waiters: 1
            })
        );
        // Slot 1 is released: the waiter gets it, with a new token.
        assert!(s.release(&owner(1), 2, 20, &all, &mut out));
        assert_eq!(
            out,
            vec![Notice::Granted {
                owner: owner(3),
                token: 4,
                ttl_ms: 1000,
                waiters: 0,
                slot: Some(1)
            }]
        );
        out.clear();
        // Owner- and token-checked per holder.
        assert!(!s.release(&owner(0), 2, 21, &all, &mut out));
        assert!(!s.extend(&owner(2), 1, 5000, 21, &all, &mut out));
        assert!(s.extend(&owner(2), 3, 5000, 21, &all, &mut out));
        let h = s.resume(&owner(3), 4, 22, &all, &mut out).unwrap();
        assert_eq!((h.mode, h.limit, h.slot), (Mode::Permit, Some(3), Some(1)));
        // Expiry per holder: the alarm is the earliest lease end.
        assert_eq!(s.alarm_at(), Some(1010));
        let st = s.inspect(1010, &all, &mut out);
        assert_eq!(st.limit, Some(3));
        let slots: Vec<_> = st.holders.iter().map(|h| (h.token, h.slot)).collect();
        assert_eq!(slots, vec![(3, Some(2)), (4, Some(1))]);
        // Once none is held the limit may change.
        s.inspect(10_000, &all, &mut out);
        assert_eq!(s.limit, None);
        assert_eq!(
            held(&s.acquire(
                &owner(6),
                Kind::Permit { limit: 5 },
                1000,
                0,
                10_000,
                &all,
                &mut out
            )),
            Some((5, Some(0)))
        );
    }

    #[test]
    fn readers_share_a_writer_excludes_and_a_queued_writer_is_not_starved() {
        let mut s = LockState::default();
        let mut out = vec![];
        let (r1, r2, w, r3, r4) = (owner(1), owner(2), owner(3), owner(4), owner(5));
        assert!(held(&s.acquire(&r1, Kind::Shared, 1000, 0, 0, &all, &mut out)).is_some());
        assert!(held(&s.acquire(&r2, Kind::Shared, 1000, 0, 0, &all, &mut out)).is_some());
        assert_eq!(
            s.acquire(&w, Kind::Exclusive, 1000, 5000, 0, &all, &mut out),
            Acquire::Queued { waiters: 1 }
        );
        // A later reader queues behind the writer (FIFO), another one too.
        assert_eq!(
            s.acquire(&r3, Kind::Shared, 1000, 5000, 0, &all, &mut out),
            Acquire::Queued { waiters: 2 }
        );
        assert_eq!(
            s.acquire(&r4, Kind::Shared, 1000, 5000, 0, &all, &mut out),
            Acquire::Queued { waiters: 3 }
        );
        assert!(s.release(&r1, 1, 10, &all, &mut out));
        assert!(out.is_empty());
        assert!(s.release(&r2, 2, 11, &all, &mut out));
        assert_eq!(out.len(), 1);
        assert!(matches!(&out[0], Notice::Granted { owner, token: 3, .. } if *owner == w));
        out.clear();
        // The writer releases: both readers are granted together.
        assert!(s.release(&w, 3, 20, &all, &mut out));
        let granted: Vec<u64> = out
            .iter()
            .filter_map(|n| match n {
                Notice::Granted { token, .. } => Some(*token),
                _ => None,
            })
            .collect();
        assert_eq!(granted, vec![4, 5]);
        assert_eq!(s.holders.len(), 2);
        assert!(s.holders.iter().all(|h| h.mode == Mode::Shared));
    }

    #[test]
    fn a_head_that_leaves_lets_the_compatible_ones_behind_it_in() {
        let mut s = LockState::default();
        let mut out = vec![];
        s.acquire(&owner(1), Kind::Shared, 1000, 0, 0, &all, &mut out);
        s.acquire(&owner(2), Kind::Exclusive, 1000, 5000, 0, &all, &mut out);
        s.acquire(&owner(3), Kind::Shared, 1000, 5000, 0, &all, &mut out);
        // The writer gives up: the reader behind it joins the holder.
        s.give_up(&owner(2), 100, &|o| o != owner(2), &mut out);
        assert!(matches!(&out[..], [Notice::Granted { token: 2, .. }]));
        assert!(s.queue.is_empty());
    }

    #[test]
    fn an_old_single_holder_state_loads_as_one_exclusive_holder() {
        let old = r#"{"name":"x","counter":7,"holder":{"owner":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","token":7,"deadline_ms":100},"queue":[{"owner":"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb","ttl_ms":5,"deadline_ms":50}]}"#;
        let s: LockState = serde_json::from_str(old).unwrap();
        assert_eq!(s.holders.len(), 1);
        assert_eq!(s.holders[0].mode, Mode::Exclusive);
        assert_eq!(s.holders[0].token, 7);
        assert_eq!(s.queue[0].kind(), Kind::Exclusive);
        let back: LockState = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(back, s);
        let empty: LockState =
            serde_json::from_str(r#"{"name":"x","counter":0,"holder":null,"queue":[]}"#).unwrap();
        assert!(empty.holders.is_empty());
    }

    #[test]
    fn acquire_reads_mode_and_limit_and_refuses_bad_combinations() {
        const O: &str = "0123456789abcdef0123456789abcdef";
        let body = |extra: &str| format!(r#"{{"owner":"{O}","ttlMs":1000,"waitMs":0{extra}}}"#);
        let kind =
            |extra: &str| match parse("POST", "/v1/acquire", "name=x", body(extra).as_bytes()) {
                Ok(c) => match c.op {
                    Op::Acquire { kind, .. } => Ok(kind),
                    _ => unreachable!(),
                },
                Err(r) => Err((r.status, r.message)),
            };
        assert_eq!(kind(""), Ok(Kind::Exclusive));
        assert_eq!(kind(r#","mode":"exclusive""#), Ok(Kind::Exclusive));
        assert_eq!(kind(r#","mode":"shared""#), Ok(Kind::Shared));
        assert_eq!(kind(r#","limit":3"#), Ok(Kind::Permit { limit: 3 }));
        assert_eq!(kind(r#","limit":100"#), Ok(Kind::Permit { limit: 100 }));
        for (extra, word) in [
            (r#","limit":0"#, "limit"),
            (r#","limit":101"#, "limit"),
            (r#","limit":1.5"#, "limit"),
            (r#","limit":-1"#, "limit"),
            (r#","limit":"3""#, "limit"),
            (r#","mode":"shared","limit":3"#, "exclude"),
            (r#","mode":"exclusive","limit":3"#, "exclude"),
            (r#","mode":"permit""#, "mode"),
            (r#","mode":"writer""#, "mode"),
            (r#","mode":1"#, "mode"),
        ] {
            let (status, message) = kind(extra).unwrap_err();
            assert_eq!(status, 400, "{extra}");
            assert!(message.contains(word), "{extra}: {message}");
        }
    }
}

/// A dead waiter (its request gone, e.g. after a restart) keeps its place
/// while it is not its turn: a re-sent acquire of it takes the place up.
#[test]
fn a_dead_waiter_keeps_its_place_until_its_turn() {
    use machine::*;
    let (h, b, c) = (
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb",
        "cccccccccccccccccccccccccccccccc",
    );
    let mut s = LockState::default();
    let mut out = vec![];
    let all = |_: &str| true;
    s.acquire(h, Kind::Exclusive, 60_000, 0, 0, &all, &mut out);
    s.acquire(b, Kind::Exclusive, 1000, 5000, 0, &all, &mut out);
    s.acquire(c, Kind::Shared, 1000, 5000, 0, &all, &mut out);
    // A restart: nobody's request is open; c re-sends first.
    let none = |_: &str| false;
    assert_eq!(s.inspect(10, &none, &mut out).waiters, 2);
    let only_c = |o: &str| o == c;
    assert_eq!(
        s.acquire(c, Kind::Shared, 1000, 5000, 20, &only_c, &mut out),
        Acquire::Queued { waiters: 2 }
    );
    assert_eq!(s.queue[0].owner, b, "b kept its place");
    // b never re-sends: at the holder's release it is dropped, c granted.
    out.clear();
    assert!(s.release(h, 1, 30, &only_c, &mut out));
    assert!(matches!(&out[..], [Notice::Granted { owner, token: 2, .. }] if owner == c));
}

/// sim_durable semaphores seed 2487 (10000 seeds): a cancelled acquire of
/// another limit leaves (refused with 409 while permits of the held limit
/// are held), then its own poll arrives once no permit is held: it must not
/// be granted.
#[test]
fn a_leave_refused_for_its_limit_still_ends_the_owners_acquire() {
    use machine::*;
    let (a, x) = (
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        "cccccccccccccccccccccccccccccccc",
    );
    let mut s = LockState::default();
    let mut out = vec![];
    let all = |_: &str| true;
    s.acquire(a, Kind::Permit { limit: 3 }, 5000, 0, 0, &all, &mut out);
    assert_eq!(
        s.acquire(x, Kind::Permit { limit: 4 }, 2000, 0, 10, &all, &mut out),
        Acquire::OtherLimit { limit: 3 }
    );
    assert!(s.release(a, 1, 20, &all, &mut out));
    assert!(matches!(
        s.acquire(x, Kind::Permit { limit: 4 }, 5000, 5000, 30, &all, &mut out),
        Acquire::Busy(_)
    ));
    assert!(s.holders.is_empty() && s.queue.is_empty());
}
