//! The async Rust API (`AsyncClient`, `AsyncLock`) against real servers —
//! etcd, and Redis through the Upstash-compatible gateway and through webdis,
//! each started by the test on free loopback ports and stopped afterwards —
//! under two unrelated executors: tokio (current-thread runtime + `LocalSet`)
//! and smol (`LocalExecutor`). Every scenario is written once against the small
//! [`Exec`] trait and instantiated for both by `for_each_executor!`.
//!
//! The library depends on neither executor; they are dev-dependencies.
#![cfg(feature = "native")]

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Wake, Waker};
use std::time::{Duration, Instant};

use edgelock::core::etcd::EtcdConfig;
use edgelock::core::redis::{RedisConfig, RedisNode};
use edgelock::core::{BackendSpec, LockError, LostReason};
use edgelock::internals::redis::keys::lock_key;
use edgelock::native::{AsyncClient, AsyncLock};
use edgelock_devtools::{EtcdServer, RedisServer, UpstashGateway, Webdis};
use serde_json::json;

mod common;
use common::etcd_raw::{b64, keys_of, raw};

type LocalBoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + 'a>>;

/// What a scenario needs from an executor. Tasks are spawned on the one
/// thread that runs the scenario, so many waiting acquires share one thread.
trait Exec {
    /// Runs `f` (and every task it spawns) to completion on this thread.
    fn run(f: impl Future<Output = ()> + 'static);
    /// Spawns a task on the running executor; the future is its result.
    fn spawn<T: 'static>(f: impl Future<Output = T> + 'static) -> LocalBoxFuture<'static, T>;
    fn sleep(d: Duration) -> LocalBoxFuture<'static, ()>;
    /// `None` when `d` passes first, and then `f` is dropped (the usual way
    /// a user bounds or cancels a call).
    fn timeout<'a, T: 'a>(
        d: Duration,
        f: impl Future<Output = T> + 'a,
    ) -> LocalBoxFuture<'a, Option<T>>;
}

struct Tokio;

impl Exec for Tokio {
    fn run(f: impl Future<Output = ()> + 'static) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("tokio runtime");
        tokio::task::LocalSet::new().block_on(&rt, f);
    }
    fn spawn<T: 'static>(f: impl Future<Output = T> + 'static) -> LocalBoxFuture<'static, T> {
        let task = tokio::task::spawn_local(f);
        Box::pin(async move { task.await.expect("task panicked") })
    }
    fn sleep(d: Duration) -> LocalBoxFuture<'static, ()> {
        Box::pin(tokio::time::sleep(d))
    }
    fn timeout<'a, T: 'a>(
        d: Duration,
        f: impl Future<Output = T> + 'a,
    ) -> LocalBoxFuture<'a, Option<T>> {
        Box::pin(async move { tokio::time::timeout(d, f).await.ok() })
    }
}

struct Smol;

thread_local! {
    static SMOL: smol::LocalExecutor<'static> = const { smol::LocalExecutor::new() };
}

impl Exec for Smol {
    fn run(f: impl Future<Output = ()> + 'static) {
        SMOL.with(|ex| smol::block_on(ex.run(f)));
    }
    fn spawn<T: 'static>(f: impl Future<Output = T> + 'static) -> LocalBoxFuture<'static, T> {
        Box::pin(SMOL.with(|ex| ex.spawn(f)))
    }
    fn sleep(d: Duration) -> LocalBoxFuture<'static, ()> {
        Box::pin(async move {
            smol::Timer::after(d).await;
        })
    }
    fn timeout<'a, T: 'a>(
        d: Duration,
        f: impl Future<Output = T> + 'a,
    ) -> LocalBoxFuture<'a, Option<T>> {
        Box::pin(smol::future::or(async move { Some(f.await) }, async move {
            smol::Timer::after(d).await;
            None
        }))
    }
}

// ---- backends

const TOKEN: &str = "test-token-0123456789";

/// One backend, started for one test.
enum Servers {
    Etcd(Box<EtcdServer>),
    Redis(Box<RedisStack>),
}

/// A Redis reachable through webdis and through the Upstash-compatible gateway.
struct RedisStack {
    redis: RedisServer,
    webdis: Webdis,
    gateway: UpstashGateway,
}

impl Servers {
    fn etcd() -> Servers {
        Servers::Etcd(Box::new(EtcdServer::start().expect("start etcd")))
    }

    fn redis() -> Servers {
        let redis = RedisServer::start().expect("start redis-server");
        let webdis = Webdis::start(&redis).expect("start webdis");
        let gateway = UpstashGateway::start(&redis, TOKEN).expect("start the gateway");
        Servers::Redis(Box::new(RedisStack {
            redis,
            webdis,
            gateway,
        }))
    }

    /// A new client (a new session). Short TTLs (renewal every second) so that
    /// a key deleted behind the client's back is noticed within about a second.
    fn client(&self) -> AsyncClient {
        self.client_via(false)
    }

    /// For Redis, `webdis` picks webdis over the Upstash gateway.
    fn client_via(&self, webdis_node: bool) -> AsyncClient {
        let spec = match self {
            Servers::Etcd(etcd) => {
                let mut cfg = EtcdConfig::new(vec![etcd.url()]);
                cfg.session_ttl_ms = 3_000;
                BackendSpec::Etcd(cfg)
            }
            Servers::Redis(r) => {
                let node = if webdis_node {
                    RedisNode::webdis(r.webdis.url())
                } else {
                    RedisNode::upstash(r.gateway.url(), TOKEN)
                };
                let mut cfg = RedisConfig::new(node);
                cfg.ttl_ms = 3_000;
                cfg.retry_delay_ms = 50;
                cfg.retry_jitter_ms = 20;
                BackendSpec::Redis(cfg)
            }
        };
        AsyncClient::connect(spec).expect("client")
    }

    /// Nothing on the server holds `name` (etcd: not even a waiter's key).
    fn is_free(&self, name: &str) -> bool {
        match self {
            Servers::Etcd(etcd) => keys_of(etcd, name).is_empty(),
            Servers::Redis(r) => redis_holder(&r.redis, name).is_none(),
        }
    }

    /// Keys on the server for `name` (etcd: holder and waiters; Redis: the holder).
    fn key_count(&self, name: &str) -> usize {
        match self {
            Servers::Etcd(etcd) => keys_of(etcd, name).len(),
            Servers::Redis(r) => usize::from(redis_holder(&r.redis, name).is_some()),
        }
    }

    /// Deletes the lock's key the way an operator (or a bug elsewhere) would.
    fn delete_behind_the_clients_back(&self, lock: &AsyncLock) {
        match self {
            Servers::Etcd(etcd) => {
                raw(
                    etcd,
                    "/v3/kv/deleterange",
                    json!({"key": b64(lock.handle().key.as_bytes())}),
                );
            }
            Servers::Redis(r) => {
                r.redis
                    .redis_command(&[b"DEL", lock_key("edgelock", lock.name()).as_bytes()])
                    .expect("DEL");
            }
        }
    }
}

fn redis_holder(redis: &RedisServer, name: &str) -> Option<Vec<u8>> {
    redis
        .redis_command(&[b"GET", lock_key("edgelock", name).as_bytes()])
        .expect("GET")
        .as_bytes()
        .map(<[u8]>::to_vec)
}

// ---- scenarios (each runs under every executor, on the backends it names)

async fn acquire_and_release<E: Exec>(servers: &Servers, via_webdis: bool) {
    let c = servers.client_via(via_webdis);
    let lock = c
        .acquire("job", Some(Duration::from_secs(10)))
        .await
        .expect("acquire");
    assert_eq!(lock.name(), "job");
    assert!(lock.fencing_token() > 0);
    assert!(!lock.is_lost() && lock.expires_in() > Duration::ZERO);
    assert_eq!(servers.key_count("job"), 1, "one key on the server");
    let st = c.inspect("job").await.expect("inspect");
    assert_eq!(
        (st.held, st.fencing_token),
        (true, Some(lock.fencing_token()))
    );
    lock.extend(None).await.expect("extend");
    let other = servers.client();
    assert!(
        other.try_acquire("job").await.expect("try").is_none(),
        "held: a try elsewhere fails"
    );
    let token = lock.fencing_token();
    assert!(lock.release().await.expect("release"), "held until release");
    assert!(servers.is_free("job"));
    assert!(!c.inspect("job").await.unwrap().held);
    let again = other
        .try_acquire("job")
        .await
        .expect("try")
        .expect("free now");
    assert!(again.fencing_token() > token, "fencing tokens increase");
    assert!(again.release().await.unwrap());
    c.close().await.unwrap();
    other.close().await.unwrap();
    assert!(matches!(
        c.acquire("job", None).await,
        Err(LockError::Closed { .. })
    ));
}

/// The second acquire waits (without blocking the executor's only thread)
/// and completes once the first holder releases.
async fn contention<E: Exec>(servers: &Servers) {
    let (a, b) = (servers.client(), servers.client());
    let first = a.acquire("shared", None).await.unwrap();
    let granted = Rc::new(Cell::new(false));
    let waiter = E::spawn({
        let granted = granted.clone();
        async move {
            let lock = b.acquire("shared", Some(Duration::from_secs(20))).await;
            granted.set(true);
            (lock, b)
        }
    });
    // The executor keeps running other work meanwhile: this sleep proceeds.
    E::sleep(Duration::from_millis(500)).await;
    assert!(
        !granted.get(),
        "the second acquire must wait while the lock is held"
    );
    let first_token = first.fencing_token();
    let released_at = Instant::now();
    assert!(first.release().await.unwrap());
    let (second, b) = waiter.await;
    let second = second.expect("granted after the release");
    assert!(
        released_at.elapsed() < Duration::from_secs(5),
        "woken promptly: {:?}",
        released_at.elapsed()
    );
    assert!(second.fencing_token() > first_token);
    assert!(second.release().await.unwrap());
    a.close().await.unwrap();
    b.close().await.unwrap();
}

/// 50 tasks on one executor thread contend for one name through 5 clients:
/// mutual exclusion holds across await points, every task gets its turn,
/// tokens increase in grant order, and all of it ran on a single thread.
async fn fifty_tasks_on_one_thread<E: Exec>(servers: &Servers) {
    let clients: Vec<AsyncClient> = (0..5).map(|_| servers.client()).collect();
    let inside = Rc::new(Cell::new(false));
    let tokens = Rc::new(RefCell::new(Vec::new()));
    let threads = Rc::new(RefCell::new(std::collections::HashSet::new()));
    let tasks: Vec<_> = (0..50)
        .map(|i| {
            let c = clients[i % clients.len()].clone();
            let (inside, tokens, threads) = (inside.clone(), tokens.clone(), threads.clone());
            E::spawn(async move {
                let lock = c
                    .acquire("fifty", Some(Duration::from_secs(120)))
                    .await
                    .expect("acquire");
                assert!(!inside.replace(true), "two holders at once");
                tokens.borrow_mut().push(lock.fencing_token());
                threads.borrow_mut().insert(std::thread::current().id());
                // An await point inside the critical section: others run meanwhile.
                E::sleep(Duration::from_millis(2)).await;
                inside.set(false);
                assert!(lock.release().await.expect("release"), "held until release");
            })
        })
        .collect();
    for t in tasks {
        t.await;
    }
    let tokens = tokens.borrow().clone();
    assert_eq!(tokens.len(), 50);
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens must increase in grant order: {tokens:?}"
    );
    assert_eq!(threads.borrow().len(), 1, "all 50 tasks ran on one thread");
    assert!(servers.is_free("fifty"));
    for c in clients {
        c.close().await.unwrap();
    }
}

async fn wait_runs_out_with_timeout<E: Exec>(servers: &Servers) {
    let (a, b) = (servers.client(), servers.client());
    let held = a.acquire("slow", None).await.unwrap();
    let t = Instant::now();
    let err = b
        .acquire("slow", Some(Duration::from_millis(400)))
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::Timeout { .. }), "{err:?}");
    assert!(
        t.elapsed() >= Duration::from_millis(399) && t.elapsed() < Duration::from_secs(5),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(
        servers.key_count("slow"),
        1,
        "the timed-out waiter left nothing behind"
    );
    assert!(held.release().await.unwrap());
    assert!(servers.is_free("slow"));
}

/// After a waiter was dropped: the name is free once its holder releases, the
/// dropped waiter never takes it, and another client gets it promptly.
async fn assert_the_dropped_waiter_is_gone<E: Exec>(
    servers: &Servers,
    holder: AsyncLock,
    name: &str,
) {
    // The drop's cleanup reaches the server on the driver's time: polled.
    let t = Instant::now();
    while servers.key_count(name) != 1 && t.elapsed() < Duration::from_secs(10) {
        E::sleep(Duration::from_millis(20)).await;
    }
    let with_holder = servers.key_count(name);
    assert_eq!(
        with_holder, 1,
        "only the holder's key remains after the drop"
    );
    assert!(holder.release().await.unwrap());
    // Long enough for a leaked waiter to have been granted and to show up.
    E::sleep(Duration::from_millis(700)).await;
    assert!(
        servers.is_free(name),
        "the dropped waiter must not take the lock"
    );
    let c = servers.client();
    let t = Instant::now();
    let lock = c
        .acquire(name, Some(Duration::from_secs(2)))
        .await
        .expect("free for others");
    assert!(
        t.elapsed() < Duration::from_secs(1),
        "granted promptly: {:?}",
        t.elapsed()
    );
    assert!(lock.release().await.unwrap());
    c.close().await.unwrap();
}

async fn dropping_a_waiting_acquire<E: Exec>(servers: &Servers) {
    let (a, b) = (servers.client(), servers.client());
    let held = a.acquire("drop", None).await.unwrap();
    let mut waiting = Box::pin(b.acquire("drop", None));
    // Poll it for a while (it starts waiting), without letting it finish.
    assert!(
        E::timeout(Duration::from_millis(500), &mut waiting)
            .await
            .is_none(),
        "must still be waiting"
    );
    drop(waiting);
    assert_the_dropped_waiter_is_gone::<E>(servers, held, "drop").await;
}

/// The user's cancellation path: the executor's timeout drops the future.
async fn executor_timeout_cancels<E: Exec>(servers: &Servers) {
    let (a, b) = (servers.client(), servers.client());
    let held = a.acquire("bounded", None).await.unwrap();
    assert!(
        E::timeout(Duration::from_millis(500), b.acquire("bounded", None))
            .await
            .is_none()
    );
    assert_the_dropped_waiter_is_gone::<E>(servers, held, "bounded").await;
    // And a timeout that does not run out returns the lock as usual.
    let lock = E::timeout(Duration::from_secs(5), b.acquire("bounded", None))
        .await
        .expect("in time")
        .unwrap();
    assert!(lock.release().await.unwrap());
}

/// Sets a flag when woken (to see the driver complete a future that nobody polls).
struct WakeFlag(AtomicBool);

impl Wake for WakeFlag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Drops around the grant: first deterministically after the grant was
/// delivered but before the task polled it again (the future must release it),
/// then at varying moments around the holder's release, so that some drops
/// race the grant. Whatever the race's outcome, nothing is leaked: a third
/// client always gets the lock promptly afterwards.
async fn drops_racing_the_grant<E: Exec>(servers: &Servers) {
    let (a, b, c) = (servers.client(), servers.client(), servers.client());

    let held = a.acquire("race", None).await.unwrap();
    let flag = Arc::new(WakeFlag(AtomicBool::new(false)));
    let waker = Waker::from(flag.clone());
    let mut waiting = Box::pin(b.acquire("race", None));
    assert!(waiting
        .as_mut()
        .poll(&mut Context::from_waker(&waker))
        .is_pending());
    E::sleep(Duration::from_millis(200)).await;
    assert!(!flag.0.load(Ordering::SeqCst), "still waiting while held");
    assert!(held.release().await.unwrap());
    let t = Instant::now();
    while !flag.0.load(Ordering::SeqCst) {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "the grant was never delivered"
        );
        E::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(servers.key_count("race"), 1, "granted to the waiter");
    drop(waiting); // granted and delivered, but never seen by the task
    let next = c
        .acquire("race", Some(Duration::from_secs(5)))
        .await
        .expect("the undelivered grant was released");
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "granted after {:?}",
        t.elapsed()
    );
    assert!(next.release().await.unwrap());

    for i in 0..8u64 {
        let held = a
            .acquire("race", Some(Duration::from_secs(10)))
            .await
            .unwrap();
        let mut waiting = Box::pin(b.acquire("race", None));
        assert!(E::timeout(Duration::from_millis(200), &mut waiting)
            .await
            .is_none());
        let release = E::spawn(held.release());
        // Drop anywhere from before the release lands to after the grant.
        let _ = E::timeout(Duration::from_millis(i * 3), &mut waiting).await;
        drop(waiting);
        assert!(release.await.unwrap());
        let t = Instant::now();
        let next = c
            .acquire("race", Some(Duration::from_secs(5)))
            .await
            .unwrap_or_else(|e| panic!("round {i}: lock leaked: {e}"));
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "round {i}: granted after {:?}",
            t.elapsed()
        );
        assert!(next.release().await.unwrap());
    }
    assert!(servers.is_free("race"));
}

async fn lost_future_fires<E: Exec>(servers: &Servers) {
    let c = servers.client();
    let lock = c.acquire("victim", None).await.unwrap();
    // Spawned: the lost future owns what it needs and runs as its own task.
    let watcher = E::spawn(lock.lost());
    E::sleep(Duration::from_millis(300)).await;
    assert!(!lock.is_lost());
    servers.delete_behind_the_clients_back(&lock);
    let reason = E::timeout(Duration::from_secs(5), watcher)
        .await
        .expect("loss signalled within a renewal round");
    assert_eq!(reason, Some(LostReason::KeyGone));
    assert!(lock.is_lost());
    assert_eq!(
        lock.lost().await,
        Some(LostReason::KeyGone),
        "resolves at once once lost"
    );
    assert!(matches!(
        lock.extend(None).await,
        Err(LockError::Lost { .. })
    ));
    assert!(!lock.release().await.unwrap(), "not held until release");
    // A released lock's future resolves to None.
    let lock = c
        .acquire("victim", Some(Duration::from_secs(5)))
        .await
        .unwrap();
    let lost = lock.lost();
    assert!(lock.release().await.unwrap());
    assert_eq!(lost.await, None);
    c.close().await.unwrap();
}

/// Instantiates `$scenario::<E>(&servers, $args)` as one #[test] per executor.
macro_rules! for_each_executor {
    ($($test:ident: $servers:expr => $scenario:ident($($arg:expr),*);)*) => {
        mod tokio_current_thread {
            use super::*;
            $(#[test]
            fn $test() {
                let servers = $servers;
                Tokio::run(async move { $scenario::<Tokio>(&servers, $($arg),*).await });
            })*
        }
        mod smol_local_executor {
            use super::*;
            $(#[test]
            fn $test() {
                let servers = $servers;
                Smol::run(async move { $scenario::<Smol>(&servers, $($arg),*).await });
            })*
        }
    };
}

for_each_executor! {
    etcd_acquire_and_release: Servers::etcd() => acquire_and_release(false);
    redis_upstash_acquire_and_release: Servers::redis() => acquire_and_release(false);
    redis_webdis_acquire_and_release: Servers::redis() => acquire_and_release(true);
    etcd_contention: Servers::etcd() => contention();
    redis_contention: Servers::redis() => contention();
    etcd_fifty_tasks_on_one_thread: Servers::etcd() => fifty_tasks_on_one_thread();
    redis_fifty_tasks_on_one_thread: Servers::redis() => fifty_tasks_on_one_thread();
    etcd_wait_runs_out_with_timeout: Servers::etcd() => wait_runs_out_with_timeout();
    redis_wait_runs_out_with_timeout: Servers::redis() => wait_runs_out_with_timeout();
    etcd_dropping_a_waiting_acquire: Servers::etcd() => dropping_a_waiting_acquire();
    redis_dropping_a_waiting_acquire: Servers::redis() => dropping_a_waiting_acquire();
    etcd_executor_timeout_cancels: Servers::etcd() => executor_timeout_cancels();
    redis_executor_timeout_cancels: Servers::redis() => executor_timeout_cancels();
    etcd_drops_racing_the_grant: Servers::etcd() => drops_racing_the_grant();
    redis_drops_racing_the_grant: Servers::redis() => drops_racing_the_grant();
    etcd_lost_future_fires: Servers::etcd() => lost_future_fires();
    redis_lost_future_fires: Servers::redis() => lost_future_fires();
}

/// `Send` futures on tokio's multi-thread runtime: tasks spawned with
/// `tokio::spawn` (which moves them between worker threads) share one client.
#[test]
fn tokio_multi_thread_spawned_tasks_share_one_client() {
    let servers = Servers::etcd();
    let c = servers.client();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    let tokens = rt.block_on(async {
        let tasks: Vec<_> = (0..10)
            .map(|_| {
                let c = c.clone();
                tokio::spawn(async move {
                    let lock = c
                        .acquire("mt", Some(Duration::from_secs(60)))
                        .await
                        .expect("acquire");
                    let token = lock.fencing_token();
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    assert!(lock.release().await.expect("release"));
                    token
                })
            })
            .collect();
        let mut tokens = Vec::new();
        for t in tasks {
            tokens.push(t.await.expect("task"));
        }
        tokens
    });
    let mut sorted = tokens.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), 10, "ten distinct grants: {tokens:?}");
    assert!(servers.is_free("mt"));
}
