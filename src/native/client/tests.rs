//! Tests of the driver's mechanics through the public API, using the TEST-ONLY
//! fake machine and toy server of `native::fake` (not a real backend).

use super::*;
use crate::core::LostReason;
use crate::native::fake::{eventually, FakeLockMachine, Faulty, ToyServer};
use std::thread;
use std::time::Instant;

const TTL_MS: u64 = 30_000;

fn client(server: &ToyServer, ttl_ms: u64) -> Client {
    Client::from_machine(Box::new(FakeLockMachine::new(server.base(), ttl_ms)))
}

#[test]
fn acquire_and_release_round_trip_over_http() {
    let server = ToyServer::start();
    let c = client(&server, TTL_MS);
    let lock = c.acquire("a", None).unwrap();
    assert_eq!(lock.name(), "a");
    assert_eq!(lock.fencing_token(), 1);
    assert_eq!(lock.handle().fencing_token, 1);
    assert_eq!(server.holder("a"), Some(1));
    assert!(!lock.is_lost());
    assert!(lock.expires_in() > Duration::from_secs(20));
    assert!(lock.release().unwrap());
    assert_eq!(server.holder("a"), None);
    let again = c.acquire("a", Some(Duration::from_secs(1))).unwrap();
    assert_eq!(again.fencing_token(), 2);
    assert!(again.release().unwrap());
}

#[test]
fn keep_alive_connections_are_reused_across_operations() {
    let server = ToyServer::start();
    let c = client(&server, TTL_MS);
    for _ in 0..10 {
        c.acquire("k", None).unwrap().release().unwrap();
    }
    assert_eq!(server.requests(), 20);
    assert!(
        server.connections() <= 2,
        "{} connections for 20 sequential requests",
        server.connections()
    );
}

#[test]
fn try_acquire_on_a_held_lock_is_none() {
    let server = ToyServer::start();
    let (a, b) = (client(&server, TTL_MS), client(&server, TTL_MS));
    let held = a.acquire("t", None).unwrap();
    assert!(b.try_acquire("t").unwrap().is_none());
    assert_eq!(server.holder("t"), Some(held.fencing_token()));
    held.release().unwrap();
    assert!(b.try_acquire("t").unwrap().is_some());
}

#[test]
fn blocking_acquire_is_woken_by_the_streamed_watch() {
    let server = ToyServer::start();
    let (a, b) = (client(&server, TTL_MS), client(&server, TTL_MS));
    let held = a.acquire("w", None).unwrap();
    let waiter = thread::spawn(move || b.acquire("w", None).map(|l| l.fencing_token()));
    thread::sleep(Duration::from_millis(300));
    assert!(!waiter.is_finished(), "must wait while the lock is held");
    held.release().unwrap();
    assert_eq!(waiter.join().unwrap().unwrap(), 2);
}

#[test]
fn wait_timeout_fails_and_cancels_the_watch_socket() {
    let server = ToyServer::start();
    let (a, b) = (client(&server, TTL_MS), client(&server, TTL_MS));
    let _held = a.acquire("to", None).unwrap();
    let t = Instant::now();
    let err = b
        .acquire("to", Some(Duration::from_millis(300)))
        .unwrap_err();
    assert!(matches!(err, LockError::Timeout { .. }), "{err:?}");
    // The driver clock has whole-millisecond resolution: the deadline may fire up to 1 ms early.
    assert!(
        t.elapsed() >= Duration::from_millis(299) && t.elapsed() < Duration::from_secs(3),
        "{:?}",
        t.elapsed()
    );
    eventually("the server sees the watch connection shut down", || {
        server.watch_aborts() == 1
    });
}

#[test]
fn cancel_token_aborts_a_waiting_acquire() {
    let server = ToyServer::start();
    let (a, b) = (client(&server, TTL_MS), client(&server, TTL_MS));
    let _held = a.acquire("c", None).unwrap();
    let token = CancelToken::new();
    let tok = token.clone();
    let waiter = thread::spawn(move || {
        let opts = AcquireOptions {
            wait: Wait::Forever,
            ttl_ms: None,
        };
        b.acquire_with("c", opts, Some(&tok)).map(|l| l.is_some())
    });
    thread::sleep(Duration::from_millis(300));
    assert!(!waiter.is_finished());
    let t = Instant::now();
    token.cancel();
    let err = waiter.join().unwrap().unwrap_err();
    assert!(matches!(err, LockError::Aborted { .. }), "{err:?}");
    assert!(t.elapsed() < Duration::from_secs(2));
    eventually("the server sees the watch connection shut down", || {
        server.watch_aborts() == 1
    });
}

#[test]
fn an_already_cancelled_token_sends_nothing() {
    let server = ToyServer::start();
    let c = client(&server, TTL_MS);
    let token = CancelToken::new();
    token.cancel();
    let err = c
        .acquire_with("x", AcquireOptions::default(), Some(&token))
        .unwrap_err();
    assert!(matches!(err, LockError::Aborted { .. }));
    assert_eq!(server.requests(), 0);
}

#[test]
fn lost_lock_wakes_waiters_and_receivers() {
    let server = ToyServer::start();
    // Renewal every 100 ms (ttl/3) exercises the driver's timer path.
    let c = client(&server, 300);
    let lock = c.acquire("l", None).unwrap();
    let rx = lock.lost();
    let released = c.acquire("l2", None).unwrap();
    let released_rx = released.lost();
    assert!(released.release().unwrap());
    assert_eq!(
        released_rx.recv_timeout(Duration::from_secs(1)),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected),
        "a released lock's receiver disconnects"
    );
    assert_eq!(
        lock.wait_lost(Some(Duration::from_millis(400))),
        None,
        "renewals keep it held"
    );
    assert!(
        lock.expires_in() > Duration::ZERO,
        "renewals move the expiry forward"
    );
    server.revoke("l");
    let t = Instant::now();
    assert_eq!(
        lock.wait_lost(Some(Duration::from_secs(5))),
        Some(LostReason::KeyGone)
    );
    assert!(t.elapsed() < Duration::from_secs(1));
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(1)).unwrap(),
        LostReason::KeyGone
    );
    assert_eq!(
        lock.lost().recv_timeout(Duration::from_millis(10)).unwrap(),
        LostReason::KeyGone
    );
    assert!(lock.is_lost());
    assert_eq!(lock.expires_in(), Duration::ZERO);
    assert!(matches!(lock.extend(None), Err(LockError::Lost { .. })));
    assert!(
        !lock.release().unwrap(),
        "a lost lock reports held_until_release = false"
    );
}

#[test]
fn extend_moves_expiry() {
    let server = ToyServer::start();
    let c = client(&server, TTL_MS);
    let lock = c.acquire("e", None).unwrap();
    lock.extend(Some(Duration::from_secs(120))).unwrap();
    assert!(lock.expires_in() > Duration::from_secs(100));
}

#[test]
fn requests_run_concurrently() {
    let server = ToyServer::start();
    server.set_acquire_delay(Duration::from_millis(300));
    let c = client(&server, TTL_MS);
    let threads: Vec<_> = (0..4)
        .map(|i| {
            let c = c.clone();
            thread::spawn(move || c.acquire(&format!("p{i}"), None).map(|l| l.release()))
        })
        .collect();
    for t in threads {
        t.join().unwrap().unwrap().unwrap();
    }
    assert!(
        server.max_in_flight() >= 2,
        "requests were serialised: max in flight {}",
        server.max_in_flight()
    );
}

#[test]
fn dropping_a_lock_releases_it_in_the_background() {
    let server = ToyServer::start();
    let c = client(&server, TTL_MS);
    drop(c.acquire("d", None).unwrap());
    eventually("release after drop", || server.holder("d").is_none());
}

#[test]
fn dropping_every_handle_closes_the_session() {
    let server = ToyServer::start();
    let c = client(&server, TTL_MS);
    let mut lock = c.acquire("gone", None).unwrap();
    drop(c);
    thread::sleep(Duration::from_millis(200));
    assert!(
        server.holder("gone").is_some(),
        "a live Lock keeps its session"
    );
    // Skip the lock's own release-on-drop so that only the session shutdown
    // (last handle gone -> machine.close) can free it.
    lock.finished = true;
    drop(lock);
    eventually("shutdown releases what the session held", || {
        server.holder("gone").is_none()
    });
}

#[test]
fn close_ends_locks_and_later_calls_fail() {
    let server = ToyServer::start();
    let c = client(&server, TTL_MS);
    let lock = c.acquire("z", None).unwrap();
    let rx = lock.lost();
    c.close().unwrap();
    c.close().unwrap();
    assert!(matches!(
        c.acquire("z", None),
        Err(LockError::Closed { .. })
    ));
    assert!(matches!(c.inspect("z"), Err(LockError::Closed { .. })));
    assert_eq!(
        lock.wait_lost(Some(Duration::from_secs(1))),
        Some(LostReason::ClientClosed)
    );
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(1)).unwrap(),
        LostReason::ClientClosed
    );
    eventually("close releases held locks", || server.holder("z").is_none());
    assert!(matches!(lock.extend(None), Err(LockError::Lost { .. })));
    assert!(!lock.release().unwrap());
}

#[test]
fn inspect_and_resume() {
    let server = ToyServer::start();
    let (a, b) = (client(&server, TTL_MS), client(&server, TTL_MS));
    assert!(!a.inspect("r").unwrap().held);
    let lock = a.acquire("r", None).unwrap();
    let st = b.inspect("r").unwrap();
    assert!(st.held);
    assert_eq!(st.fencing_token, Some(lock.fencing_token()));
    let resumed = b.resume(lock.handle()).unwrap();
    assert_eq!(resumed.fencing_token(), lock.fencing_token());
    assert!(resumed.release().unwrap());
    let mut lock = lock;
    lock.finished = true; // already released through the resumed handle
    assert!(matches!(
        b.resume(lock.handle()),
        Err(LockError::Lost { .. })
    ));
}

#[test]
fn errors_come_back_as_lock_errors() {
    let server = ToyServer::start();
    let c = client(&server, TTL_MS);
    assert!(matches!(
        c.acquire("", None),
        Err(LockError::InvalidArgument { .. })
    ));
    assert!(matches!(
        c.acquire("bad\0name", None),
        Err(LockError::InvalidArgument { .. })
    ));
    assert_eq!(server.requests(), 0);

    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let c = Client::from_machine(Box::new(FakeLockMachine::new(dead, TTL_MS)));
    let err = c.acquire("x", None).unwrap_err();
    assert!(matches!(err, LockError::Transport { .. }), "{err:?}");
    // https to a plain-HTTP server: a TRANSPORT error saying so, never a silent downgrade.
    let c = Client::from_machine(Box::new(FakeLockMachine::new(
        server.base().replacen("http://", "https://", 1),
        TTL_MS,
    )));
    let err = c.acquire("x", None).unwrap_err();
    assert!(matches!(err, LockError::Transport { .. }), "{err:?}");
    assert!(err.to_string().contains("TLS"), "{err}");
}

#[test]
fn a_panicking_machine_fails_calls_instead_of_hanging_them() {
    let server = ToyServer::start();
    let c = Client::from_machine(Box::new(Faulty::panics_on_inspect(FakeLockMachine::new(
        server.base(),
        TTL_MS,
    ))));
    let lock = c.acquire("p", None).unwrap();
    assert!(matches!(c.inspect("p"), Err(LockError::Closed { .. })));
    assert_eq!(
        lock.wait_lost(Some(Duration::from_secs(5))),
        Some(LostReason::ClientClosed)
    );
    assert!(matches!(
        c.acquire("q", None),
        Err(LockError::Closed { .. })
    ));
}

#[test]
fn kinds_the_backend_does_not_offer_are_refused_before_any_request() {
    let server = ToyServer::start();
    let c = client(&server, TTL_MS);
    let before = server.requests();
    for kind in [LockKind::Shared, LockKind::Permits { limit: 3 }] {
        let e = c.try_acquire_kind("k", kind).unwrap_err();
        assert_eq!(e.code(), "INVALID_ARGUMENT", "{kind:?}: {e}");
        let e = c
            .acquire_kind("k", kind, AcquireOptions::default(), None)
            .unwrap_err();
        assert_eq!(e.code(), "INVALID_ARGUMENT", "{kind:?}: {e}");
    }
    let e = c
        .try_acquire_kind("k", LockKind::Permits { limit: 0 })
        .unwrap_err();
    assert!(e.to_string().contains("limit"), "{e}");
    assert_eq!(server.requests(), before, "nothing was sent");
    // Exclusive still works through the same entry point.
    let lock = c
        .try_acquire_kind("k", LockKind::Exclusive)
        .unwrap()
        .expect("free");
    assert_eq!((lock.kind(), lock.slot()), (LockKind::Exclusive, None));
    let debug = format!("{lock:?}");
    assert!(debug.contains("kind: Exclusive, slot: None"), "{debug}");
    assert!(lock.release().unwrap());
}
