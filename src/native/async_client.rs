//! The async Rust API: [`AsyncClient`], [`AsyncLock`], [`LostFuture`].
//!
//! The same driver thread as the blocking API runs the session; an async call
//! sends it the operation with a [`oneshot`](super::oneshot) sender instead of
//! a blocking channel, and the driver completes the future by storing the
//! reply and waking the task. No executor is needed or assumed (tokio,
//! async-std, smol, `futures::executor` all work), and no thread is started
//! per call.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use super::client::{self, Client, Lock};
use super::driver::{Call, LockShared, Msg, Reply, ReplyTo};
use super::oneshot;
use crate::core::etcd::EtcdConfig;
use crate::core::{
    AcquireOptions, BackendSpec, LockError, LockHandle, LockInfo, LockKind, LockMachine,
    LockStatus, LostReason, Operation, Outcome, Wait,
};

/// An async handle to one lock client (one backend session on its own driver
/// thread). Same operations, outcomes and errors as the blocking
/// [`Client`]; each method returns a future the driver thread completes, so
/// it runs under any executor. Cheap to clone; [`Client::to_async`] and
/// [`AsyncClient::to_blocking`] convert between the two without a new session.
///
/// Cancellation is by dropping: an acquire future dropped before it completes
/// aborts the acquire on the driver (its key or queue entry is removed, as with
/// [`CancelToken`](super::CancelToken)), and a lock the backend granted while
/// the drop raced is released, never left held. So a timeout from your
/// executor (`tokio::time::timeout`, `select!`) is the way to bound a wait
/// besides the `wait` argument.
///
/// ```no_run
/// use std::time::Duration;
/// use edgelock::core::BackendSpec;
/// use edgelock::native::{AsyncClient, EtcdConfig};
///
/// # async fn job() -> Result<(), edgelock::core::LockError> {
/// let client = AsyncClient::connect(BackendSpec::Etcd(EtcdConfig::new(vec!["http://127.0.0.1:2379".into()])))?;
/// let lock = client.acquire("nightly-report", Some(Duration::from_secs(10))).await?;
/// let lost = lock.lost(); // resolves if the lock is lost while we work
/// // ... pass lock.fencing_token() to the protected resource, do the work,
/// // racing it against `lost` if it must stop on a loss ...
/// # drop(lost);
/// lock.release().await?;
/// client.close().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct AsyncClient {
    client: Client,
}

impl fmt::Debug for AsyncClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncClient")
            .field("backend", &self.client.backend())
            .finish_non_exhaustive()
    }
}

impl From<Client> for AsyncClient {
    fn from(client: Client) -> Self {
        AsyncClient { client }
    }
}

impl AsyncClient {
    /// A client for any backend of the registry, as [`Client::connect`]
    /// (starting the driver thread does not touch the network, so this is not async).
    pub fn connect(spec: BackendSpec) -> Result<AsyncClient, LockError> {
        Client::connect(spec).map(AsyncClient::from)
    }

    /// With options (TLS: a CA file, a client certificate), as [`Client::connect_with`].
    pub fn connect_with(
        spec: BackendSpec,
        options: &super::ClientOptions,
    ) -> Result<AsyncClient, LockError> {
        Client::connect_with(spec, options).map(AsyncClient::from)
    }

    /// A client for an etcd cluster through its JSON gateway, as [`Client::etcd`].
    pub fn etcd(cfg: EtcdConfig) -> Result<AsyncClient, LockError> {
        Client::etcd(cfg).map(AsyncClient::from)
    }

    /// Runs any lock machine on a new driver thread, as [`Client::try_from_machine`].
    pub fn try_from_machine(m: Box<dyn LockMachine + Send>) -> Result<AsyncClient, LockError> {
        Client::try_from_machine(m).map(AsyncClient::from)
    }

    /// A blocking handle on the same session.
    pub fn to_blocking(&self) -> Client {
        self.client.clone()
    }

    /// The backend's name (`etcd`, `redis`, `redlock`).
    pub fn backend(&self) -> &'static str {
        self.client.backend()
    }

    /// Acquires `name`, waiting at most `wait` (`None`: until granted).
    /// A wait that runs out is `LockError::Timeout`.
    pub async fn acquire(
        &self,
        name: &str,
        wait: Option<Duration>,
    ) -> Result<AsyncLock, LockError> {
        let granted = self
            .acquire_with(
                name,
                AcquireOptions {
                    wait: client::wait_of(wait),
                    ttl_ms: None,
                },
            )
            .await?;
        self.client
            .must_hold(name, granted.map(|l| l.lock))
            .map(AsyncLock::from)
    }

    /// Acquires with full options. `Ok(None)`: `Wait::Try` found the lock held.
    /// Drop the future to abort a waiting acquire (there is no `CancelToken`
    /// argument: dropping is the async cancellation).
    pub async fn acquire_with(
        &self,
        name: &str,
        opts: AcquireOptions,
    ) -> Result<Option<AsyncLock>, LockError> {
        self.acquire_kind(name, LockKind::Exclusive, opts).await
    }

    /// Acquires a hold of `kind` on `name` (see [`Client::acquire_kind`]).
    pub async fn acquire_kind(
        &self,
        name: &str,
        kind: LockKind,
        opts: AcquireOptions,
    ) -> Result<Option<AsyncLock>, LockError> {
        let op = Operation::Acquire {
            name: name.to_string(),
            kind,
            options: opts,
        };
        let done = Pending::start(&self.client, Call::Start(op), true)?.await?;
        Ok(self.client.acquired(done)?.map(AsyncLock::from))
    }

    /// Tries once: `Ok(None)` if someone else holds the lock.
    pub async fn try_acquire(&self, name: &str) -> Result<Option<AsyncLock>, LockError> {
        self.acquire_with(
            name,
            AcquireOptions {
                wait: Wait::Try,
                ttl_ms: None,
            },
        )
        .await
    }

    /// Tries once for a hold of `kind` (see [`Client::try_acquire_kind`]).
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), edgelock::LockError> {
    /// use edgelock::core::LockKind;
    /// use edgelock::native::{AsyncClient, EtcdConfig};
    ///
    /// let client = AsyncClient::etcd(EtcdConfig::new(vec!["http://127.0.0.1:2379".into()]))?;
    /// if let Some(permit) = client.try_acquire_kind("renders", LockKind::permits(3)?).await? {
    ///     println!("slot {:?}", permit.slot());
    ///     permit.release().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire_kind(
        &self,
        name: &str,
        kind: LockKind,
    ) -> Result<Option<AsyncLock>, LockError> {
        self.acquire_kind(
            name,
            kind,
            AcquireOptions {
                wait: Wait::Try,
                ttl_ms: None,
            },
        )
        .await
    }

    /// Re-enters an exclusive lock by its handle: one more hold counted on
    /// the backend, with the outer hold's fencing token (see
    /// [`Client::reenter`]).
    pub async fn reenter(&self, handle: &LockHandle) -> Result<AsyncLock, LockError> {
        let done =
            Pending::start(&self.client, client::reentry::reenter_call(handle), false)?.await?;
        self.client.resumed(done).map(AsyncLock::from)
    }

    /// Adopts a lock described by a handle, after the backend confirms it is
    /// still held (see [`Client::resume`]).
    pub async fn resume(&self, handle: &LockHandle) -> Result<AsyncLock, LockError> {
        let done = Pending::start(&self.client, client::resume_call(handle), false)?.await?;
        self.client.resumed(done).map(AsyncLock::from)
    }

    /// Who holds `name`, and who waits for it.
    pub async fn inspect(&self, name: &str) -> Result<LockStatus, LockError> {
        Pending::start(&self.client, client::inspect_call(name), false)?
            .await?
            .outcome
            .into_inspected()
    }

    /// Releases every lock, ends the session and stops the driver thread, as
    /// [`Client::close`]. Dropping the future does not stop the close.
    pub async fn close(&self) -> Result<(), LockError> {
        match Pending::start(&self.client, Call::Close, false) {
            Ok(p) => client::closed_result(p.await),
            Err(e) => client::closed_result(Err(e)),
        }
    }
}

/// A held lock, the async twin of [`Lock`] (which it wraps). Keeps its
/// client's session alive. Dropping it without [`AsyncLock::release`]
/// releases it in the background (best effort), as dropping a `Lock` does.
pub struct AsyncLock {
    lock: Lock,
}

impl fmt::Debug for AsyncLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("AsyncLock").field(&self.lock).finish()
    }
}

impl From<Lock> for AsyncLock {
    fn from(lock: Lock) -> Self {
        AsyncLock { lock }
    }
}

impl AsyncLock {
    /// The lock's name.
    pub fn name(&self) -> &str {
        self.lock.name()
    }

    /// Strictly increases across successive holders of this name: pass it to
    /// the protected resource and have it reject lower tokens.
    pub fn fencing_token(&self) -> u64 {
        self.lock.fencing_token()
    }

    /// The kind of hold (exclusive, shared, or a semaphore's permit).
    pub fn kind(&self) -> LockKind {
        self.lock.kind()
    }

    /// A permit's slot in `0..limit`; `None` for other kinds.
    pub fn slot(&self) -> Option<u32> {
        self.lock.slot()
    }

    /// A serialisable handle for [`AsyncClient::resume`]. Contains the owner
    /// credential: treat it like a secret.
    pub fn handle(&self) -> &LockHandle {
        self.lock.handle()
    }

    /// The lock as it was granted (id, name, fencing token, handle).
    pub fn info(&self) -> &LockInfo {
        self.lock.info()
    }

    /// Conservative remaining validity (zero once lost or ended).
    pub fn expires_in(&self) -> Duration {
        self.lock.expires_in()
    }

    /// True once the lock was lost.
    pub fn is_lost(&self) -> bool {
        self.lock.is_lost()
    }

    /// Why the lock was lost, if it was.
    pub fn lost_reason(&self) -> Option<LostReason> {
        self.lock.lost_reason()
    }

    /// A future that resolves once the lock is lost (`Some(reason)`, at once
    /// if it already is; closing the client counts as
    /// [`LostReason::ClientClosed`]) or to `None` once it is released. It does
    /// not borrow the lock, so it can be moved into another task or raced
    /// against the work the lock protects. For a bounded wait, wrap it in
    /// your executor's timeout.
    pub fn lost(&self) -> LostFuture {
        LostFuture {
            shared: self.lock.shared().clone(),
            waiter: None,
        }
    }

    /// Extends the lock's validity, as [`Lock::extend`].
    pub async fn extend(&self, ttl: Option<Duration>) -> Result<(), LockError> {
        let call = self.lock.extend_call(ttl)?;
        Pending::start(self.lock.client(), call, false)?
            .await?
            .outcome
            .into_extended()
            .map(|_| ())
    }

    /// Releases the lock. `Ok(true)`: it was held until this release;
    /// `Ok(false)`: it had already been lost. Dropping the future once polled
    /// does not stop the release; dropping it before releases in the background.
    pub async fn release(mut self) -> Result<bool, LockError> {
        let Some(call) = self.lock.release_call() else {
            return Ok(false);
        };
        let pending = Pending::start(self.lock.client(), call, false);
        match pending {
            Ok(p) => client::release_result(p.await),
            Err(e) => client::release_result(Err(e)),
        }
    }

    /// The blocking [`Lock`] for the same hold.
    pub fn into_blocking(self) -> Lock {
        self.lock
    }
}

/// Resolves when its lock is lost (`Some(reason)`) or released (`None`);
/// from [`AsyncLock::lost`]. Woken by the driver thread, like the other futures.
pub struct LostFuture {
    shared: Arc<LockShared>,
    /// This future's entry among the lock's wakers, once it has one.
    waiter: Option<u64>,
}

impl fmt::Debug for LostFuture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LostFuture").finish_non_exhaustive()
    }
}

impl Future for LostFuture {
    type Output = Option<LostReason>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        this.shared.poll_lost(&mut this.waiter, cx)
    }
}

impl Drop for LostFuture {
    fn drop(&mut self) {
        if let Some(id) = self.waiter {
            self.shared.forget_waiter(id);
        }
    }
}

/// One call in flight on the driver thread, as a future of its reply.
///
/// Dropped before the reply arrives, it cleans up like an aborted blocking
/// acquire: a cancellable call (an acquire) is cancelled on the driver, and a
/// granted lock that arrived anyway is released instead of stranded (the
/// driver itself releases one it could no longer deliver).
struct Pending {
    client: Client,
    rx: oneshot::Receiver<Reply>,
    ticket: Option<u64>,
    finished: bool,
}

impl Pending {
    /// Sends `call` to the driver now (an `async fn` calling this runs only
    /// once polled, so futures stay lazy).
    fn start(client: &Client, call: Call, cancellable: bool) -> Result<Pending, LockError> {
        let ticket = cancellable.then(|| client.next_ticket());
        let (tx, rx) = oneshot::channel();
        client.send(Msg::Call {
            call,
            reply: Some(ReplyTo::Future(tx)),
            ticket,
        })?;
        Ok(Pending {
            client: client.clone(),
            rx,
            ticket,
            finished: false,
        })
    }
}

impl Future for Pending {
    type Output = Reply;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Reply> {
        let this = self.get_mut();
        match Pin::new(&mut this.rx).poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(r) => {
                this.finished = true;
                // Every sender gone without a reply: the driver thread ended.
                Poll::Ready(r.unwrap_or_else(|_| Err(this.client.closed())))
            }
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        // Sent after the call itself, so the driver always knows the ticket by
        // then; a ticket whose operation already finished is ignored.
        if let Some(t) = self.ticket {
            let _ = self.client.send(Msg::CancelTicket(t));
        }
        // From here on the driver's reply fails to deliver and it releases any
        // lock it would have handed over; a reply that is already here is ours to clean up.
        if let Some(Ok(done)) = self.rx.close() {
            if let (Outcome::Acquired(info), Some(shared)) = (done.outcome, done.lock) {
                // Dropping the `Lock` sends the background release.
                drop(self.client.lock_from(info, Some(shared)));
            }
        }
    }
}

#[cfg(test)]
mod tests;

mod election;

// Here rather than in client.rs: the blocking client does not depend on the
// async one (modules import one way; scripts/check-module-cycles.py).
impl Client {
    /// An async handle on the same session (same driver thread, same locks).
    pub fn to_async(&self) -> AsyncClient {
        AsyncClient::from(self.clone())
    }
}

impl Lock {
    /// Wraps this lock for the async API (same lock, same session).
    pub fn into_async(self) -> AsyncLock {
        AsyncLock::from(self)
    }
}
