//! The blocking Rust API: [`Client`], [`Lock`], [`CancelToken`].

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::driver::{self, Call, Clock, Completion, LockShared, Msg, ReplyTo};
use super::http::HttpClient;
use super::tls::TlsConfig;
use crate::core::etcd::EtcdConfig;
use crate::core::BackendSpec;
use crate::core::{
    AcquireOptions, LockError, LockHandle, LockInfo, LockKind, LockMachine, LockStatus, LostReason,
    Operation, Wait,
};

/// Options of the native driver: I/O settings the core never sees. Build with
/// `ClientOptions::new().with_tls(…)` (fields may be added later).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientOptions {
    /// TLS for `https://` endpoints (default: platform roots, no client certificate).
    pub tls: TlsConfig,
}

impl ClientOptions {
    /// The defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the TLS settings.
    pub fn with_tls(mut self, tls: TlsConfig) -> Self {
        self.tls = tls;
        self
    }
}

/// A handle to one lock client (one backend session) running on its own driver
/// thread. Cheap to clone; all clones share the session. When the last clone
/// and the last [`Lock`] are dropped, the session is closed in the background
/// (held locks are released, best effort); call [`Client::close`] to wait for it.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    tx: Sender<Msg>,
    clock: Clock,
    backend: &'static str,
    next_ticket: AtomicU64,
}

impl Drop for Inner {
    fn drop(&mut self) {
        let _ = self.tx.send(Msg::Shutdown);
    }
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("backend", &self.inner.backend)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A client for an etcd cluster through its JSON gateway (`http://` or
    /// `https://` endpoints; for a private CA or a client certificate use
    /// [`Client::connect_with`]). One session lease is shared by every lock of
    /// this client.
    pub fn etcd(cfg: EtcdConfig) -> Result<Client, LockError> {
        Client::connect(BackendSpec::Etcd(cfg))
    }

    /// A client for any backend of the registry (etcd, one Redis node,
    /// Redlock), built by [`BackendSpec::build`] with the OS's entropy.
    /// `https://` URLs trust the platform's root certificates; see
    /// [`Client::connect_with`] for other TLS settings.
    pub fn connect(spec: BackendSpec) -> Result<Client, LockError> {
        Client::connect_with(spec, &ClientOptions::default())
    }

    /// Like [`Client::connect`], with driver options (TLS). TLS files are read
    /// and checked here: a missing or invalid one, like a platform without root
    /// certificates for an `https://` URL, is `LockError::InvalidArgument`
    /// before any request.
    ///
    /// ```no_run
    /// use edgelock::core::BackendSpec;
    /// use edgelock::native::{Client, ClientOptions, EtcdConfig, TlsConfig};
    ///
    /// let tls = TlsConfig::new()
    ///     .with_ca_file("/etc/etcd/pki/ca.pem")
    ///     .with_client_cert("/etc/etcd/pki/client.pem", "/etc/etcd/pki/client-key.pem");
    /// let spec = BackendSpec::Etcd(EtcdConfig::new(vec!["https://etcd-1:2379".into()]));
    /// let client = Client::connect_with(spec, &ClientOptions::new().with_tls(tls))?;
    /// # Ok::<(), edgelock::LockError>(())
    /// ```
    pub fn connect_with(spec: BackendSpec, options: &ClientOptions) -> Result<Client, LockError> {
        let https = spec.urls().iter().any(|u| {
            u.get(..8)
                .is_some_and(|s| s.eq_ignore_ascii_case("https://"))
        });
        let machine = spec.build(Box::new(super::OsEntropy))?;
        if https && options.tls.is_default() {
            super::tls::default_connector()?; // fail now, not at the first request
        }
        Client::start(machine, HttpClient::with_tls(&options.tls)?)
    }

    /// Runs any lock machine (Redis, Redlock, …) on a new driver thread.
    ///
    /// # Panics
    /// If the OS refuses to start a thread; see [`Client::try_from_machine`].
    pub fn from_machine(m: Box<dyn LockMachine + Send>) -> Client {
        match Client::try_from_machine(m) {
            Ok(c) => c,
            Err(e) => panic!("{e}"),
        }
    }

    /// Like [`Client::from_machine`], but reports a failure to start the driver thread.
    pub fn try_from_machine(m: Box<dyn LockMachine + Send>) -> Result<Client, LockError> {
        Client::start(m, HttpClient::new())
    }

    /// Runs any lock machine with driver options (TLS); an invalid TLS file is
    /// `LockError::InvalidArgument`.
    pub fn try_from_machine_with(
        m: Box<dyn LockMachine + Send>,
        options: &ClientOptions,
    ) -> Result<Client, LockError> {
        Client::start(m, HttpClient::with_tls(&options.tls)?)
    }

    fn start(m: Box<dyn LockMachine + Send>, http: HttpClient) -> Result<Client, LockError> {
        let backend = m.backend().as_str();
        let clock = Clock::new();
        let (tx, backend) = driver::spawn(m, clock, http).map_err(|e| LockError::Transport {
            backend,
            name: String::new(),
            message: format!("cannot start the driver thread: {e}"),
        })?;
        Ok(Client {
            inner: Arc::new(Inner {
                tx,
                clock,
                backend,
                next_ticket: AtomicU64::new(1),
            }),
        })
    }

    /// The backend's name (`etcd`, `redis`, `redlock`).
    pub fn backend(&self) -> &'static str {
        self.inner.backend
    }

    /// Acquires `name`, waiting at most `wait` (`None`: until granted).
    /// A wait that runs out is `LockError::Timeout`.
    pub fn acquire(&self, name: &str, wait: Option<Duration>) -> Result<Lock, LockError> {
        let granted = self.acquire_with(
            name,
            AcquireOptions {
                wait: wait_of(wait),
                ttl_ms: None,
            },
            None,
        )?;
        self.must_hold(name, granted)
    }

    /// Acquires with full options. `Ok(None)`: `Wait::Try` found the lock held.
    /// `cancel` aborts a waiting acquire from another thread (`LockError::Aborted`).
    pub fn acquire_with(
        &self,
        name: &str,
        opts: AcquireOptions,
        cancel: Option<&CancelToken>,
    ) -> Result<Option<Lock>, LockError> {
        self.acquire_kind(name, LockKind::Exclusive, opts, cancel)
    }

    /// Acquires a hold of `kind` on `name`: a shared hold of a read-write lock
    /// ([`LockKind::Shared`]; the writer side is [`LockKind::Exclusive`]) or a
    /// permit of a semaphore ([`LockKind::permits`]). Otherwise as
    /// [`Client::acquire_with`]. A kind the backend does not offer is
    /// `INVALID_ARGUMENT` before any request.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use edgelock::core::{AcquireOptions, LockKind, Wait};
    /// use edgelock::native::{Client, EtcdConfig};
    ///
    /// let client = Client::etcd(EtcdConfig::new(vec!["http://127.0.0.1:2379".into()]))?;
    /// // At most 3 holders of "renders" at once; each permit has its own slot.
    /// let kind = LockKind::permits(3)?;
    /// let opts = AcquireOptions { wait: Wait::For(30_000), ttl_ms: None };
    /// if let Some(permit) = client.acquire_kind("renders", kind, opts, None)? {
    ///     let slot = permit.slot().expect("a permit has a slot"); // in 0..3
    ///     println!("slot {slot}, token {}", permit.fencing_token());
    ///     permit.release()?;
    /// }
    /// # Ok::<(), edgelock::LockError>(())
    /// ```
    pub fn acquire_kind(
        &self,
        name: &str,
        kind: LockKind,
        opts: AcquireOptions,
        cancel: Option<&CancelToken>,
    ) -> Result<Option<Lock>, LockError> {
        let call = Call::Start(Operation::Acquire {
            name: name.to_string(),
            kind,
            options: opts,
        });
        self.acquired(self.call_cancellable(call, name, cancel)?)
    }

    /// Tries once: `Ok(None)` if someone else holds the lock.
    pub fn try_acquire(&self, name: &str) -> Result<Option<Lock>, LockError> {
        self.acquire_with(
            name,
            AcquireOptions {
                wait: Wait::Try,
                ttl_ms: None,
            },
            None,
        )
    }

    /// Tries once for a hold of `kind` (see [`Client::acquire_kind`]):
    /// `Ok(None)` if it cannot be granted now (every permit of a semaphore is
    /// taken, or an exclusive holder is in the way).
    ///
    /// ```no_run
    /// use edgelock::core::LockKind;
    /// use edgelock::native::{Client, EtcdConfig};
    ///
    /// let client = Client::etcd(EtcdConfig::new(vec!["http://127.0.0.1:2379".into()]))?;
    /// match client.try_acquire_kind("renders", LockKind::permits(3)?)? {
    ///     Some(permit) => { /* one of 3 slots: permit.slot() */ permit.release()?; }
    ///     None => println!("all 3 permits are taken"),
    /// }
    /// # Ok::<(), edgelock::LockError>(())
    /// ```
    pub fn try_acquire_kind(&self, name: &str, kind: LockKind) -> Result<Option<Lock>, LockError> {
        self.acquire_kind(
            name,
            kind,
            AcquireOptions {
                wait: Wait::Try,
                ttl_ms: None,
            },
            None,
        )
    }

    /// Adopts a lock described by a handle (from [`Lock::handle`], possibly of
    /// another process), after the backend confirms it is still held.
    pub fn resume(&self, handle: &LockHandle) -> Result<Lock, LockError> {
        self.resumed(self.call(resume_call(handle))?)
    }

    /// Who holds `name`, and who waits for it.
    pub fn inspect(&self, name: &str) -> Result<LockStatus, LockError> {
        self.call(inspect_call(name))?.outcome.into_inspected()
    }

    /// Releases every lock (their `Lock`s report [`LostReason::ClientClosed`]),
    /// ends the session and stops the driver thread. Idempotent; later calls on
    /// this client fail with `LockError::Closed`.
    pub fn close(&self) -> Result<(), LockError> {
        closed_result(self.call(Call::Close))
    }

    pub(super) fn send(&self, msg: Msg) -> Result<(), LockError> {
        self.inner.tx.send(msg).map_err(|_| self.closed())
    }

    /// A fresh ticket by which `Msg::CancelTicket` can find an operation.
    pub(super) fn next_ticket(&self) -> u64 {
        self.inner.next_ticket.fetch_add(1, Ordering::Relaxed)
    }

    /// Sends `call` and waits for its completion; a `cancel` token, if any,
    /// can abort it while it waits (`Aborted` naming `name`).
    pub(super) fn call_cancellable(
        &self,
        call: Call,
        name: &str,
        cancel: Option<&CancelToken>,
    ) -> Result<Completion, LockError> {
        if cancel.is_some_and(CancelToken::is_cancelled) {
            return Err(LockError::Aborted {
                backend: self.backend(),
                name: name.to_string(),
            });
        }
        let ticket = cancel.map(|_| self.inner.next_ticket.fetch_add(1, Ordering::Relaxed));
        let (reply_tx, reply_rx) = channel();
        self.send(Msg::Call {
            call,
            reply: Some(ReplyTo::Blocking(reply_tx)),
            ticket,
        })?;
        // Registered after the call was sent, so a cancel always reaches the
        // driver after the operation it targets.
        if let (Some(tok), Some(t)) = (cancel, ticket) {
            tok.register(t, self.inner.tx.clone());
        }
        let reply = reply_rx.recv();
        if let (Some(tok), Some(t)) = (cancel, ticket) {
            tok.unregister(t);
        }
        reply.map_err(|_| self.closed())?
    }

    pub(super) fn call(&self, call: Call) -> Result<Completion, LockError> {
        let (reply_tx, reply_rx) = channel();
        self.send(Msg::Call {
            call,
            reply: Some(ReplyTo::Blocking(reply_tx)),
            ticket: None,
        })?;
        reply_rx.recv().map_err(|_| self.closed())?
    }

    pub(super) fn closed(&self) -> LockError {
        LockError::Closed {
            backend: self.backend(),
        }
    }

    pub(super) fn lock_from(
        &self,
        info: LockInfo,
        shared: Option<Arc<LockShared>>,
    ) -> Result<Lock, LockError> {
        let shared = shared
            .ok_or_else(|| LockError::internal("the driver handed out a lock without its state"))?;
        Ok(Lock {
            client: self.clone(),
            info,
            shared,
            finished: false,
        })
    }

    // The readings of a completion below are shared with the async API, so
    // that both report the same outcomes and errors.

    /// An acquire's completion: `Some(lock)`, or `None` when a try found it held.
    pub(super) fn acquired(&self, done: Completion) -> Result<Option<Lock>, LockError> {
        match done.outcome.into_acquired()? {
            Some(info) => Ok(Some(self.lock_from(info, done.lock)?)),
            None => Ok(None),
        }
    }

    /// `acquire` (not `acquire_with`) promises a lock or an error.
    pub(super) fn must_hold(&self, name: &str, granted: Option<Lock>) -> Result<Lock, LockError> {
        // Only `Wait::Try` reports "not acquired"; treat a stray one as a timeout.
        granted.ok_or_else(|| LockError::Timeout {
            backend: self.backend(),
            name: name.to_string(),
        })
    }

    pub(super) fn resumed(&self, done: Completion) -> Result<Lock, LockError> {
        match done.outcome.into_acquired()? {
            Some(info) => self.lock_from(info, done.lock),
            None => Err(LockError::internal("a resume completed with NotAcquired")),
        }
    }
}

/// `None` waits until granted; a wait too long for `u64` milliseconds is forever in practice.
pub(super) fn wait_of(wait: Option<Duration>) -> Wait {
    match wait {
        None => Wait::Forever,
        Some(d) => Wait::For(u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
    }
}

pub(super) fn resume_call(handle: &LockHandle) -> Call {
    Call::Start(Operation::Resume {
        handle: handle.clone(),
    })
}

pub(super) fn inspect_call(name: &str) -> Call {
    Call::Start(Operation::Inspect {
        name: name.to_string(),
    })
}

/// Closing is idempotent: a client already closed is not an error.
pub(super) fn closed_result(r: Result<Completion, LockError>) -> Result<(), LockError> {
    match r {
        Ok(_) | Err(LockError::Closed { .. }) => Ok(()),
        Err(e) => Err(e),
    }
}

/// A release's completion: whether the lock was held until this release.
pub(super) fn release_result(r: Result<Completion, LockError>) -> Result<bool, LockError> {
    match r.and_then(|c| c.outcome.into_released()) {
        Ok(held_until_release) => Ok(held_until_release),
        // Lost meanwhile: nothing of someone else's was touched.
        Err(LockError::NotHeld { .. }) | Err(LockError::Lost { .. }) => Ok(false),
        Err(e) => Err(e),
    }
}

/// A held lock. Keeps its client's session alive. Dropping it without
/// [`Lock::release`] releases it in the background (best effort).
pub struct Lock {
    client: Client,
    info: LockInfo,
    shared: Arc<LockShared>,
    /// Released (or handed back) explicitly: nothing to do on drop.
    finished: bool,
}

impl fmt::Debug for Lock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lock")
            .field("name", &self.info.name)
            .field("fencing_token", &self.info.fencing_token)
            .field("kind", &self.info.kind())
            .field("slot", &self.info.slot())
            .field("lost", &self.is_lost())
            .finish_non_exhaustive()
    }
}

impl Lock {
    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.info.name
    }

    /// Strictly increases across successive holders of this name: pass it to
    /// the protected resource and have it reject lower tokens.
    pub fn fencing_token(&self) -> u64 {
        self.info.fencing_token
    }

    /// The kind of hold (exclusive, shared, or a semaphore's permit).
    pub fn kind(&self) -> LockKind {
        self.info.kind()
    }

    /// A permit's slot in `0..limit`; `None` for other kinds.
    pub fn slot(&self) -> Option<u32> {
        self.info.slot()
    }

    /// A serialisable handle for [`Client::resume`]. Contains the owner
    /// credential: treat it like a secret.
    pub fn handle(&self) -> &LockHandle {
        &self.info.handle
    }

    /// The lock as it was granted (id, name, fencing token, handle).
    pub fn info(&self) -> &LockInfo {
        &self.info
    }

    /// Conservative remaining validity (zero once lost or ended). Automatic
    /// renewal and [`Lock::extend`] move it forward.
    pub fn expires_in(&self) -> Duration {
        let st = self.shared.state();
        if st.lost.is_some() || st.ended {
            return Duration::ZERO;
        }
        Duration::from_millis(st.expires_at.saturating_sub(self.client.inner.clock.now()))
    }

    /// True once the lock was lost (see [`Lock::lost_reason`]).
    pub fn is_lost(&self) -> bool {
        self.shared.state().lost.is_some()
    }

    /// Why the lock was lost, if it was.
    pub fn lost_reason(&self) -> Option<LostReason> {
        self.shared.state().lost.clone()
    }

    /// A receiver that yields the reason once the lock is lost (at once if it
    /// already is; closing the client counts as [`LostReason::ClientClosed`]).
    /// It disconnects without a value once the lock is released.
    pub fn lost(&self) -> Receiver<LostReason> {
        self.shared.subscribe()
    }

    /// Blocks until the lock is lost (`Some(reason)`; closing the client counts
    /// as [`LostReason::ClientClosed`]), or returns `None` when `timeout` passes
    /// first. A `None` timeout waits indefinitely.
    pub fn wait_lost(&self, timeout: Option<Duration>) -> Option<LostReason> {
        self.shared.wait_lost(timeout)
    }

    /// Extends the lock's validity (`ttl` where the backend supports per-lock
    /// TTLs; etcd renews its session lease instead).
    pub fn extend(&self, ttl: Option<Duration>) -> Result<(), LockError> {
        let call = self.extend_call(ttl)?;
        self.client.call(call)?.outcome.into_extended().map(|_| ())
    }

    /// Releases the lock. `Ok(true)`: it was held until this release;
    /// `Ok(false)`: it had already been lost (nothing of someone else's was touched).
    pub fn release(mut self) -> Result<bool, LockError> {
        match self.release_call() {
            Some(call) => release_result(self.client.call(call)),
            None => Ok(false),
        }
    }

    pub(super) fn client(&self) -> &Client {
        &self.client
    }

    pub(super) fn shared(&self) -> &Arc<LockShared> {
        &self.shared
    }

    /// The extend request, or `Lost` at once when the loss is already known.
    pub(super) fn extend_call(&self, ttl: Option<Duration>) -> Result<Call, LockError> {
        if let Some(reason) = self.lost_reason() {
            return Err(self.lost_error(&reason));
        }
        let ttl_ms = ttl.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        Ok(Call::Start(Operation::Extend {
            lock: self.info.id,
            ttl_ms,
        }))
    }

    /// Marks the lock as explicitly released (dropping it sends nothing more)
    /// and returns the release request, or `None` when it is already lost.
    pub(super) fn release_call(&mut self) -> Option<Call> {
        self.finished = true;
        if self.is_lost() {
            return None;
        }
        Some(Call::Start(Operation::Release { lock: self.info.id }))
    }

    fn lost_error(&self, reason: &LostReason) -> LockError {
        LockError::Lost {
            backend: self.client.backend(),
            name: self.info.name.clone(),
            reason: reason.to_string(),
        }
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        let st = self.shared.state();
        if st.lost.is_some() || st.ended {
            return;
        }
        drop(st);
        let call = Call::Start(Operation::Release { lock: self.info.id });
        let _ = self.client.send(Msg::Call {
            call,
            reply: None,
            ticket: None,
        });
    }
}

/// Aborts waiting acquires from any thread. One token may serve several
/// acquires; once cancelled it stays cancelled (later acquires fail at once).
#[derive(Clone, Default)]
pub struct CancelToken {
    inner: Arc<Mutex<TokenState>>,
}

#[derive(Default)]
struct TokenState {
    cancelled: bool,
    waiting: Vec<(u64, Sender<Msg>)>,
}

impl fmt::Debug for CancelToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CancelToken")
            .field("cancelled", &self.is_cancelled())
            .finish()
    }
}

impl CancelToken {
    /// A token that is not cancelled.
    pub fn new() -> Self {
        Self::default()
    }

    /// Cancels: every acquire waiting on this token, and every later one given it,
    /// fails with `LockError::Aborted`.
    pub fn cancel(&self) {
        let mut st = self.state();
        st.cancelled = true;
        for (ticket, tx) in st.waiting.drain(..) {
            let _ = tx.send(Msg::CancelTicket(ticket));
        }
    }

    /// Whether [`cancel`](Self::cancel) was called.
    pub fn is_cancelled(&self) -> bool {
        self.state().cancelled
    }

    fn state(&self) -> std::sync::MutexGuard<'_, TokenState> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn register(&self, ticket: u64, tx: Sender<Msg>) {
        let mut st = self.state();
        if st.cancelled {
            let _ = tx.send(Msg::CancelTicket(ticket));
        } else {
            st.waiting.push((ticket, tx));
        }
    }

    fn unregister(&self, ticket: u64) {
        self.state().waiting.retain(|(t, _)| *t != ticket);
    }
}

pub(super) mod election;
pub(super) mod multi;
pub(super) mod reentry;
pub use election::Observer;

#[cfg(test)]
pub(super) mod tests;
