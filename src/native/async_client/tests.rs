//! The async API's mechanics against the TEST-ONLY fake machine and toy server
//! of `native::fake`, driven by a minimal std-only executor (below) to show
//! that nothing here needs a runtime. Real backends and real executors
//! (tokio, smol) are exercised in `tests/native_async.rs`.

use super::*;
use crate::native::fake::{eventually, Faulty};
use crate::native::fake::{FakeLockMachine, ToyServer};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Wake, Waker};
use std::thread::{self, Thread};
use std::time::Instant;

const TTL_MS: u64 = 30_000;

fn client(server: &ToyServer, ttl_ms: u64) -> AsyncClient {
    AsyncClient::try_from_machine(Box::new(FakeLockMachine::new(server.base(), ttl_ms))).unwrap()
}

/// Unparks the blocked thread; counts wake-ups.
struct ParkWaker {
    thread: Thread,
    wakes: AtomicUsize,
}

impl Wake for ParkWaker {
    fn wake(self: Arc<Self>) {
        self.wakes.fetch_add(1, Ordering::SeqCst);
        self.thread.unpark();
    }
}

fn park_waker() -> (Arc<ParkWaker>, Waker) {
    let w = Arc::new(ParkWaker {
        thread: thread::current(),
        wakes: AtomicUsize::new(0),
    });
    (w.clone(), Waker::from(w))
}

/// The smallest executor: poll, park until woken, repeat (5 s at most).
fn block_on<F: Future>(fut: F) -> F::Output {
    let mut fut = std::pin::pin!(fut);
    let (_, waker) = park_waker();
    let mut cx = Context::from_waker(&waker);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
        assert!(Instant::now() < deadline, "future not completed within 5 s");
        thread::park_timeout(Duration::from_millis(100));
    }
}

/// Polls once with a waker that counts its wake-ups.
fn poll_once<F: Future + Unpin>(fut: &mut F, waker: &Waker) -> Poll<F::Output> {
    Pin::new(fut).poll(&mut Context::from_waker(waker))
}

#[test]
fn the_futures_are_send_and_the_handles_are_send_and_sync() {
    fn send<T: Send>(_: &T) {}
    fn send_sync<T: Send + Sync>() {}
    send_sync::<AsyncClient>();
    send_sync::<AsyncLock>();
    send_sync::<LostFuture>();
    let server = ToyServer::start();
    let c = client(&server, TTL_MS);
    send(&c.acquire("s", None));
    send(&c.try_acquire("s"));
    send(&c.inspect("s"));
    send(&c.close());
}

#[test]
fn acquire_release_inspect_resume_round_trip() {
    let server = ToyServer::start();
    let (a, b) = (client(&server, TTL_MS), client(&server, TTL_MS));
    let lock = block_on(a.acquire("a", None)).unwrap();
    assert_eq!((lock.name(), lock.fencing_token()), ("a", 1));
    assert_eq!(server.holder("a"), Some(1));
    assert!(lock.expires_in() > Duration::from_secs(20));
    block_on(lock.extend(Some(Duration::from_secs(120)))).unwrap();
    assert!(lock.expires_in() > Duration::from_secs(100));
    let st = block_on(b.inspect("a")).unwrap();
    assert_eq!((st.held, st.fencing_token), (true, Some(1)));
    assert!(block_on(b.try_acquire("a")).unwrap().is_none());
    let resumed = block_on(b.resume(lock.handle())).unwrap();
    assert_eq!(resumed.fencing_token(), 1);
    assert!(block_on(resumed.release()).unwrap());
    assert_eq!(server.holder("a"), None);
    // The original handle's hold ended through the resumed one.
    assert!(!block_on(lock.into_blocking().into_async().release()).unwrap());
}

#[test]
fn futures_are_lazy_until_polled() {
    let server = ToyServer::start();
    let c = client(&server, TTL_MS);
    let fut = c.acquire("lazy", None);
    thread::sleep(Duration::from_millis(100));
    assert_eq!(
        server.requests(),
        0,
        "nothing is sent before the first poll"
    );
    drop(fut);
    thread::sleep(Duration::from_millis(100));
    assert_eq!(server.requests(), 0);
}

#[test]
fn the_driver_wakes_the_task_instead_of_being_polled() {
    let server = ToyServer::start();
    server.set_acquire_delay(Duration::from_millis(200));
    let c = client(&server, TTL_MS);
    let (counter, waker) = park_waker();
    let mut fut = Box::pin(c.acquire("w", None));
    assert!(poll_once(&mut fut, &waker).is_pending());
    eventually("the driver wakes the task", || {
        counter.wakes.load(Ordering::SeqCst) == 1
    });
    let Poll::Ready(lock) = poll_once(&mut fut, &waker) else {
        panic!("woken but not ready")
    };
    assert!(block_on(lock.unwrap().release()).unwrap());
}

#[test]
fn a_timed_out_wait_is_timeout() {
    let server = ToyServer::start();
    let (a, b) = (client(&server, TTL_MS), client(&server, TTL_MS));
    let _held = block_on(a.acquire("to", None)).unwrap();
    let err = block_on(b.acquire("to", Some(Duration::from_millis(200)))).unwrap_err();
    assert!(matches!(err, LockError::Timeout { .. }), "{err:?}");
}

#[test]
fn dropping_a_waiting_acquire_aborts_it_on_the_driver() {
    let server = ToyServer::start();
    let (a, b) = (client(&server, TTL_MS), client(&server, TTL_MS));
    let held = block_on(a.acquire("c", None)).unwrap();
    let (_, waker) = park_waker();
    let mut waiting = Box::pin(b.acquire("c", None));
    assert!(poll_once(&mut waiting, &waker).is_pending());
    thread::sleep(Duration::from_millis(200)); // let it reach the watch
    drop(waiting);
    eventually("the watch connection is shut down", || {
        server.watch_aborts() == 1
    });
    assert!(block_on(held.release()).unwrap());
    thread::sleep(Duration::from_millis(200));
    assert_eq!(
        server.holder("c"),
        None,
        "the dropped waiter never takes the lock"
    );
}

#[test]
fn a_grant_that_arrived_before_the_drop_is_released() {
    let server = ToyServer::start();
    let c = client(&server, TTL_MS);
    let (counter, waker) = park_waker();
    let mut fut = Box::pin(c.acquire("raced", None));
    assert!(poll_once(&mut fut, &waker).is_pending());
    // The driver delivers the grant (and wakes us), but the task never polls again.
    eventually("the grant is delivered", || {
        counter.wakes.load(Ordering::SeqCst) == 1
    });
    assert!(server.holder("raced").is_some());
    drop(fut);
    eventually("the undelivered lock is released", || {
        server.holder("raced").is_none()
    });
}

#[test]
fn a_drop_while_the_acquire_is_in_flight_leaves_nothing_held() {
    let server = ToyServer::start();
    // The server holds the acquire back: the grant lands after the drop.
    server.set_acquire_delay(Duration::from_millis(300));
    let c = client(&server, TTL_MS);
    let (_, waker) = park_waker();
    let mut fut = Box::pin(c.acquire("late", None));
    assert!(poll_once(&mut fut, &waker).is_pending());
    thread::sleep(Duration::from_millis(50));
    drop(fut);
    // Whatever the server applied is given back; a fresh client can take it at once.
    server.set_acquire_delay(Duration::ZERO);
    eventually("nothing is left held", || server.holder("late").is_none());
    let other = client(&server, TTL_MS);
    let lock = block_on(other.acquire("late", Some(Duration::from_secs(2)))).unwrap();
    thread::sleep(Duration::from_millis(400));
    assert_eq!(
        server.holder("late"),
        Some(lock.fencing_token()),
        "the next holder keeps it"
    );
}

#[test]
fn lost_future_resolves_on_loss_and_on_release() {
    let server = ToyServer::start();
    let c = client(&server, 300); // renewals every 100 ms
    let lock = block_on(c.acquire("l", None)).unwrap();
    let released = block_on(c.acquire("l2", None)).unwrap();
    let released_lost = released.lost();
    assert!(block_on(released.release()).unwrap());
    assert_eq!(
        block_on(released_lost),
        None,
        "a released lock's future resolves to None"
    );

    let (counter, waker) = park_waker();
    let mut lost = lock.lost();
    assert!(poll_once(&mut lost, &waker).is_pending());
    assert!(
        poll_once(&mut lost, &waker).is_pending(),
        "a second poll keeps one waker entry"
    );
    let other = lock.lost(); // dropped unpolled: no waker entry to forget
    drop(other);
    thread::sleep(Duration::from_millis(400));
    assert_eq!(
        counter.wakes.load(Ordering::SeqCst),
        0,
        "renewals keep it held"
    );
    server.revoke("l");
    eventually("the loss wakes the task", || {
        counter.wakes.load(Ordering::SeqCst) == 1
    });
    assert_eq!(
        poll_once(&mut lost, &waker),
        Poll::Ready(Some(LostReason::KeyGone))
    );
    assert_eq!(
        block_on(lock.lost()),
        Some(LostReason::KeyGone),
        "resolves at once once lost"
    );
    assert!(matches!(
        block_on(lock.extend(None)),
        Err(LockError::Lost { .. })
    ));
    assert!(!block_on(lock.release()).unwrap());
}

#[test]
fn close_fails_later_calls_and_counts_as_loss() {
    let server = ToyServer::start();
    let c = client(&server, TTL_MS);
    let lock = block_on(c.acquire("z", None)).unwrap();
    let lost = lock.lost();
    block_on(c.close()).unwrap();
    block_on(c.close()).unwrap();
    assert!(matches!(
        block_on(c.acquire("z", None)),
        Err(LockError::Closed { .. })
    ));
    assert!(matches!(
        block_on(c.inspect("z")),
        Err(LockError::Closed { .. })
    ));
    assert_eq!(block_on(lost), Some(LostReason::ClientClosed));
    eventually("close releases held locks", || server.holder("z").is_none());
}

#[test]
fn dropping_an_async_lock_releases_it() {
    let server = ToyServer::start();
    let c = client(&server, TTL_MS);
    drop(block_on(c.acquire("d", None)).unwrap());
    eventually("release after drop", || server.holder("d").is_none());
    // A release future dropped before its first poll releases too (it owns the lock).
    drop(block_on(c.acquire("d", None)).unwrap().release());
    eventually("release after an unpolled release is dropped", || {
        server.holder("d").is_none()
    });
}

#[test]
fn a_driver_that_dies_fails_pending_futures_with_closed() {
    let server = ToyServer::start();
    let c = AsyncClient::try_from_machine(Box::new(Faulty::panics_on_inspect(
        FakeLockMachine::new(server.base(), TTL_MS),
    )))
    .unwrap();
    let lock = block_on(c.acquire("p", None)).unwrap();
    let lost = lock.lost();
    assert!(matches!(
        block_on(c.inspect("p")),
        Err(LockError::Closed { .. })
    ));
    assert_eq!(block_on(lost), Some(LostReason::ClientClosed));
    assert!(matches!(
        block_on(c.acquire("q", None)),
        Err(LockError::Closed { .. })
    ));
}

#[test]
fn invalid_arguments_are_refused_like_the_blocking_api() {
    let server = ToyServer::start();
    let c = client(&server, TTL_MS);
    assert!(matches!(
        block_on(c.acquire("", None)),
        Err(LockError::InvalidArgument { .. })
    ));
    assert_eq!(server.requests(), 0);
    // A TLS option naming a file that does not exist: refused at construction.
    let opts = crate::native::ClientOptions::new()
        .with_tls(crate::native::TlsConfig::new().with_ca_file("/nonexistent/edgelock-ca.pem"));
    let err = AsyncClient::connect_with(
        crate::core::BackendSpec::Etcd(EtcdConfig::new(vec!["https://example.invalid".into()])),
        &opts,
    )
    .unwrap_err();
    assert!(matches!(err, LockError::InvalidArgument { .. }), "{err}");
}

#[test]
fn blocking_and_async_handles_share_one_session() {
    let server = ToyServer::start();
    let blocking = Client::from_machine(Box::new(FakeLockMachine::new(server.base(), TTL_MS)));
    let asynchronous = blocking.to_async();
    let lock = block_on(asynchronous.acquire("shared", None)).unwrap();
    assert!(asynchronous.to_blocking().inspect("shared").unwrap().held);
    drop(blocking);
    drop(asynchronous);
    // The lock keeps the session alive; its blocking twin releases it.
    assert!(lock.into_blocking().release().unwrap());
    assert_eq!(server.holder("shared"), None);
}

#[test]
fn a_grant_completed_after_the_drop_is_released_by_the_driver() {
    let server = ToyServer::start();
    server.set_acquire_delay(Duration::from_millis(300));
    let c = AsyncClient::try_from_machine(Box::new(Faulty::ignores_cancel(FakeLockMachine::new(
        server.base(),
        TTL_MS,
    ))))
    .unwrap();
    let (counter, waker) = park_waker();
    let mut fut = Box::pin(c.acquire("after", None));
    assert!(poll_once(&mut fut, &waker).is_pending());
    thread::sleep(Duration::from_millis(50));
    drop(fut); // the acquire request is still on its way
    eventually(
        "the grant is given back: acquire + release requests",
        || server.requests() == 2,
    );
    eventually("nothing is left held", || server.holder("after").is_none());
    assert_eq!(
        counter.wakes.load(Ordering::SeqCst),
        0,
        "a dropped future is never woken"
    );
}
