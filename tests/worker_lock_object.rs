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
        s.acquire(A, 1000, 0, 0, &all, &mut out);
        assert_eq!(
            s.acquire(B, 1000, 5000, 1, &all, &mut out),
            Acquire::Queued { waiters: 1 }
        );
        // B's client gave up: its leave takes it out of the queue.
        assert!(matches!(
            s.acquire(B, 1000, 0, 10, &all, &mut out),
            Acquire::Busy(_)
        ));
        assert!(s.queue.is_empty());
        out.clear();
        // B's next poll, sent before the leave, arrives after it.
        assert!(matches!(
            s.acquire(B, 1000, 5000, 20, &all, &mut out),
            Acquire::Busy(_)
        ));
        assert!(s.queue.is_empty(), "the abandoned owner was queued again");
        // A releases: nobody is granted.
        assert!(s.release(A, 1, 30, &all, &mut out));
        assert!(out.is_empty(), "{out:?}");
        assert!(s.holder.is_none());
        assert_eq!(s.counter, 1);
    }

    #[test]
    fn a_late_poll_after_a_granted_leave_is_not_granted() {
        let mut s = LockState::default();
        let mut out = vec![];
        // The leave finds the lock free: granted, and released by the client.
        assert!(matches!(
            s.acquire(C, 2000, 0, 0, &all, &mut out),
            Acquire::Held { token: 1, .. }
        ));
        assert!(s.release(C, 1, 5, &all, &mut out));
        // The late poll.
        assert!(matches!(
            s.acquire(C, 1000, 5000, 10, &all, &mut out),
            Acquire::Busy(Busy { token: 1, .. })
        ));
        assert!(s.holder.is_none() && s.queue.is_empty());
        // A queued owner's release also ends its acquire.
        s.acquire(A, 1000, 0, 20, &all, &mut out);
        s.acquire(B, 1000, 5000, 20, &all, &mut out);
        assert!(!s.release(B, 0, 25, &all, &mut out));
        assert!(matches!(
            s.acquire(B, 1000, 5000, 30, &all, &mut out),
            Acquire::Busy(_)
        ));
        assert!(s.queue.is_empty());
        // The holder itself still gets its grant back (idempotent).
        assert!(matches!(
            s.acquire(A, 1000, 0, 40, &all, &mut out),
            Acquire::Held { token: 2, .. }
        ));
    }

    #[test]
    fn left_owners_are_forgotten_after_a_while_and_bounded() {
        let mut s = LockState::default();
        let mut out = vec![];
        s.acquire(A, 1000, 0, 0, &all, &mut out);
        s.release(A, 1, 1, &all, &mut out);
        assert_eq!(s.left.len(), 1);
        s.inspect(LEFT_KEEP_MS, &all, &mut out);
        assert!(s.left.is_empty());
        for i in 0..MAX_LEFT + 10 {
            let o = format!("{i:032x}");
            s.acquire(&o, 1000, 0, 10, &all, &mut out);
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
