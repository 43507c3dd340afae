//! Runs one [`LockMachine`] on a dedicated thread inside a core
//! [`Session`](crate::core::session::Session), which owns the driver loop's
//! bookkeeping: this file only performs its [`Output`]s (requests on worker
//! threads, replies on channels) and sleeps until the next input or timer.
//!
//! User calls and HTTP results arrive on one channel. Each `Transmit::Send` runs
//! on its own worker thread (requests must run concurrently: Redlock asks N
//! nodes at once, watches stay open for long); `Transmit::Cancel` shuts the
//! request's socket down.

use std::collections::{HashMap, VecDeque};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Waker};
use std::thread;
use std::time::{Duration, Instant};

use super::http::{CancelHandle, HttpClient, Request, StreamOutcome};
use super::oneshot;
use super::stream::{Deliver, Streams};
use crate::core::session::{Output, Session};
use crate::core::{
    HttpRequest, Input, LockError, LockId, LockMachine, LostReason, Millis, OpId, Operation,
    Outcome, RequestId, StreamOpen,
};

/// How long a background shutdown (every handle dropped) may take to release
/// what the machine still holds before the thread gives up and exits.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
const WORKER_STACK: usize = 256 * 1024;

/// The driver's monotonic clock: milliseconds since the driver started.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Clock {
    start: Instant,
}

impl Clock {
    pub(crate) fn new() -> Self {
        Clock {
            start: Instant::now(),
        }
    }
    pub(crate) fn now(&self) -> Millis {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}

/// A user operation, sent to the driver thread.
#[derive(Debug)]
pub(crate) enum Call {
    Start(Operation),
    Close,
}

/// What the driver answers to a call: the typed outcome, plus the shared
/// state of a newly held lock for `Acquired` (`lock`), or of each lock of
/// an `AcquiredAll` (`all`, in the outcome's order).
pub(crate) struct Completion {
    pub outcome: Outcome,
    pub lock: Option<Arc<LockShared>>,
    pub all: Vec<Arc<LockShared>>,
}

pub(crate) type Reply = Result<Completion, LockError>;

/// Where an operation's [`Reply`] goes: a blocked caller's channel or an
/// async caller's future. Either way a failed send means the caller is gone.
#[derive(Clone)]
pub(crate) enum ReplyTo {
    Blocking(Sender<Reply>),
    Future(oneshot::Sender<Reply>),
}

impl ReplyTo {
    /// False when nobody receives the reply any more (it is dropped; the
    /// caller of `deliver` still knows what it granted and cleans up).
    fn deliver(self, reply: Reply) -> bool {
        match self {
            ReplyTo::Blocking(tx) => tx.send(reply).is_ok(),
            ReplyTo::Future(tx) => tx.send(reply).is_ok(),
        }
    }
}

pub(crate) enum Msg {
    /// `reply: None` for fire-and-forget calls (release on drop). `ticket`
    /// lets a [`CancelToken`](super::CancelToken) or a dropped async acquire
    /// find the operation later.
    Call {
        call: Call,
        reply: Option<ReplyTo>,
        ticket: Option<u64>,
    },
    CancelTicket(u64),
    /// Every handle is gone: close the machine in the background and exit.
    Shutdown,
    Net(Input),
}

/// State of one held lock, shared between the driver thread and the user's
/// `Lock`. Updated on `Renewed`/`Extended`; `Lost` marks it and wakes waiters
/// (threads on the condvar, async tasks through their registered wakers).
#[derive(Default)]
pub(crate) struct LockShared {
    state: Mutex<LockState>,
    changed: Condvar,
}

#[derive(Default)]
pub(crate) struct LockState {
    pub expires_at: Millis,
    pub lost: Option<LostReason>,
    /// No longer held for a reason other than loss (released, client closed).
    pub ended: bool,
    subscribers: Vec<Sender<LostReason>>,
    /// Async waiters for loss or end, by the id each `LostFuture` got from
    /// `next_waiter` (one entry per future, replaced on every poll).
    wakers: Vec<(u64, Waker)>,
    next_waiter: u64,
}

impl LockState {
    fn take_wakers(&mut self) -> Vec<Waker> {
        self.wakers.drain(..).map(|(_, w)| w).collect()
    }
}

impl LockShared {
    fn new(expires_at: Millis) -> Arc<Self> {
        Arc::new(LockShared {
            state: Mutex::new(LockState {
                expires_at,
                ..LockState::default()
            }),
            changed: Condvar::new(),
        })
    }

    pub(crate) fn state(&self) -> std::sync::MutexGuard<'_, LockState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn set_expiry(&self, expires_at: Millis) {
        self.state().expires_at = expires_at;
    }

    fn mark_lost(&self, reason: LostReason) {
        let mut st = self.state();
        if st.lost.is_none() && !st.ended {
            for s in st.subscribers.drain(..) {
                let _ = s.send(reason.clone());
            }
            st.lost = Some(reason);
        }
        let wakers = st.take_wakers();
        drop(st);
        self.changed.notify_all();
        // Outside the lock: a woken task may poll (and lock) at once.
        wakers.into_iter().for_each(Waker::wake);
    }

    pub(crate) fn mark_ended(&self) {
        let mut st = self.state();
        st.ended = true;
        st.subscribers.clear(); // disconnects receivers: "ended without loss"
        let wakers = st.take_wakers();
        drop(st);
        self.changed.notify_all();
        wakers.into_iter().for_each(Waker::wake);
    }

    /// The async twin of [`wait_lost`](Self::wait_lost) without a timeout:
    /// `Ready(Some)` once lost, `Ready(None)` once ended otherwise, else the
    /// waker is kept under `*waiter` (assigned on the first pending poll).
    pub(crate) fn poll_lost(
        &self,
        waiter: &mut Option<u64>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<LostReason>> {
        let mut st = self.state();
        if st.lost.is_some() || st.ended {
            return Poll::Ready(st.lost.clone());
        }
        let id = match *waiter {
            Some(id) => id,
            None => {
                st.next_waiter += 1;
                *waiter = Some(st.next_waiter);
                st.next_waiter
            }
        };
        match st.wakers.iter_mut().find(|(i, _)| *i == id) {
            Some((_, w)) if w.will_wake(cx.waker()) => {}
            Some((_, w)) => *w = cx.waker().clone(),
            None => st.wakers.push((id, cx.waker().clone())),
        }
        Poll::Pending
    }

    /// Forgets a dropped `LostFuture`'s waker.
    pub(crate) fn forget_waiter(&self, id: u64) {
        self.state().wakers.retain(|(i, _)| *i != id);
    }

    /// A receiver that gets the loss reason once (immediately if already lost)
    /// and disconnects if the lock ends otherwise.
    pub(crate) fn subscribe(&self) -> Receiver<LostReason> {
        let (tx, rx) = channel();
        let mut st = self.state();
        match &st.lost {
            Some(r) => {
                let _ = tx.send(r.clone());
            }
            None if st.ended => {}
            None => st.subscribers.push(tx),
        }
        rx
    }

    /// Blocks until lost (Some), ended otherwise or timed out (None).
    pub(crate) fn wait_lost(&self, timeout: Option<Duration>) -> Option<LostReason> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut st = self.state();
        loop {
            if st.lost.is_some() || st.ended {
                return st.lost.clone();
            }
            st = match deadline {
                None => self.changed.wait(st).unwrap_or_else(|e| e.into_inner()),
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return None;
                    }
                    self.changed
                        .wait_timeout(st, left)
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
            };
        }
    }
}

/// Who waits for an operation: the caller's channel and its cancel ticket.
struct Caller {
    reply: ReplyTo,
    ticket: Option<u64>,
}

/// Starts the driver thread. The machine is moved onto it.
pub(crate) fn spawn(
    machine: Box<dyn LockMachine + Send>,
    clock: Clock,
    http: HttpClient,
) -> std::io::Result<(Sender<Msg>, &'static str)> {
    let backend = machine.backend().as_str();
    let session = Session::new(machine);
    let (tx, rx) = channel();
    let worker_tx = tx.clone();
    thread::Builder::new()
        .name("edgelock-driver".into())
        .spawn(move || {
            Driver {
                session,
                rx,
                tx: worker_tx,
                clock,
                http,
                inflight: HashMap::new(),
                streams: Streams::default(),
                local: VecDeque::new(),
                tickets: HashMap::new(),
                locks: HashMap::new(),
                shutdown_deadline: None,
            }
            .run()
        })?;
    Ok((tx, backend))
}

struct Driver {
    session: Session<Caller>,
    rx: Receiver<Msg>,
    /// Handed to workers; keeps `rx` connected for the driver's whole life.
    tx: Sender<Msg>,
    clock: Clock,
    http: HttpClient,
    /// In-flight requests: their cancel handle and whether they stream.
    inflight: HashMap<RequestId, (CancelHandle, bool)>,
    /// Open byte streams (`Output::Open`).
    streams: Streams,
    /// Inputs produced on this thread (a worker that could not be spawned).
    local: VecDeque<Input>,
    tickets: HashMap<u64, OpId>,
    locks: HashMap<LockId, Arc<LockShared>>,
    shutdown_deadline: Option<Instant>,
}

impl Driver {
    fn run(mut self) {
        loop {
            if let Some(input) = self.local.pop_front() {
                self.net(input);
                continue;
            }
            // Drained before the closed check: a close's final requests
            // (background releases) must still be performed.
            let wake_at = self.drain();
            let now = self.clock.now();
            if self.session.is_closed()
                || self.shutdown_deadline.is_some_and(|d| Instant::now() >= d)
            {
                break;
            }
            if wake_at.is_some_and(|t| t <= now) {
                self.session.handle_timeout(now);
                continue;
            }
            let timer_wait = wake_at.map(|t| Duration::from_millis(t - now));
            let shutdown_wait = self
                .shutdown_deadline
                .map(|d| d.saturating_duration_since(Instant::now()));
            let wait = match (timer_wait, shutdown_wait) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let msg = match wait {
                Some(w) => match self.rx.recv_timeout(w) {
                    Ok(m) => m,
                    Err(RecvTimeoutError::Timeout) => continue, // the loop's top fires the timer
                    Err(RecvTimeoutError::Disconnected) => break,
                },
                None => match self.rx.recv() {
                    Ok(m) => m,
                    Err(_) => break,
                },
            };
            self.handle(msg);
        }
        // `Drop` finishes (also when a machine bug panics this thread, so
        // that no caller or `wait_lost` blocks forever).
    }

    fn handle(&mut self, msg: Msg) {
        let now = self.clock.now();
        match msg {
            Msg::Net(input) => self.net(input),
            Msg::CancelTicket(t) => {
                if let Some(op) = self.tickets.get(&t) {
                    self.session.cancel(now, *op);
                }
            }
            Msg::Shutdown => {
                self.session.close(now, None);
                self.shutdown_deadline
                    .get_or_insert(Instant::now() + SHUTDOWN_GRACE);
            }
            Msg::Call {
                call: Call::Close,
                reply,
                ..
            } => {
                self.session.close(
                    now,
                    reply.map(|reply| Caller {
                        reply,
                        ticket: None,
                    }),
                );
            }
            Msg::Call {
                call: Call::Start(op),
                reply,
                ticket,
            } => {
                let caller = reply.clone().map(|reply| Caller { reply, ticket });
                match self.session.start(now, op, caller) {
                    Ok(op) => {
                        if let Some(t) = ticket {
                            self.tickets.insert(t, op);
                        }
                    }
                    Err(e) => {
                        if let Some(r) = reply {
                            r.deliver(Err(e));
                        }
                    }
                }
            }
        }
    }

    fn net(&mut self, input: Input) {
        if input.is_final() {
            self.inflight.remove(&input.id());
            self.streams.ended(input.id());
        }
        let now = self.clock.now();
        self.session.handle_input(now, input);
    }

    /// Performs every output; returns when the session next wants a timeout.
    fn drain(&mut self) -> Option<Millis> {
        loop {
            match self.session.poll_output() {
                Output::Send(req) => self.perform(req),
                Output::Cancel(id) => {
                    if let Some((c, _)) = self.inflight.remove(&id) {
                        c.cancel();
                    }
                    self.streams.close(id);
                }
                Output::Open(open) => self.open_stream(open),
                Output::Write { id, data } => self.streams.write(id, data.0),
                Output::Done { reply, result, .. } => self.complete(reply, result),
                Output::Renewed { lock, expires_at } => {
                    if let Some(s) = self.locks.get(&lock) {
                        s.set_expiry(expires_at);
                    }
                }
                Output::Lost { lock, reason, .. } => {
                    if let Some(s) = self.locks.remove(&lock) {
                        s.mark_lost(reason);
                    }
                }
                Output::Wait { wake_at } => return wake_at,
            }
        }
    }

    fn open_stream(&mut self, open: StreamOpen) {
        let tx = self.tx.clone();
        let deliver: Deliver = Arc::new(move |input| {
            // A failed send: the driver is gone, and the stream with it.
            let _ = tx.send(Msg::Net(input));
        });
        let http = &self.http;
        if let Err(failed) = self.streams.open(open, &deliver, || http.tls_connector()) {
            self.local.push_back(failed);
        }
    }

    fn perform(&mut self, req: HttpRequest) {
        let cancel = CancelHandle::new();
        let id = req.id;
        self.inflight.insert(id, (cancel.clone(), req.stream));
        let tx = self.tx.clone();
        let http = self.http.clone();
        let spawned = thread::Builder::new()
            .name("edgelock-http".into())
            .stack_size(WORKER_STACK)
            .spawn(move || run_request(&http, req, &cancel, &tx));
        if let Err(e) = spawned {
            self.inflight.remove(&id);
            let error =
                crate::core::TransportError::Io(format!("cannot start a request thread: {e}"));
            self.local.push_back(Input::Failed { id, error });
        }
    }

    /// Answers an operation's caller and keeps the `Lock`s' shared state in
    /// step with the outcome.
    fn complete(&mut self, caller: Option<Caller>, result: Result<Outcome, LockError>) {
        if let Some(t) = caller.as_ref().and_then(|c| c.ticket) {
            self.tickets.remove(&t);
        }
        let mut held = |info: &crate::core::LockInfo| {
            let shared = LockShared::new(info.expires_at);
            self.locks.insert(info.id, shared.clone());
            (info.id, shared)
        };
        let all: Vec<_> = match &result {
            Ok(Outcome::AcquiredAll(infos)) => infos.iter().map(&mut held).collect(),
            _ => Vec::new(),
        };
        let lock = match &result {
            Ok(Outcome::Acquired(info)) => Some(held(info)),
            Ok(Outcome::Released { lock, .. }) => {
                if let Some(s) = self.locks.remove(lock) {
                    s.mark_ended();
                }
                None
            }
            Ok(Outcome::Extended { lock, expires_at }) => {
                if let Some(s) = self.locks.get(lock) {
                    s.set_expiry(*expires_at);
                }
                None
            }
            _ => None,
        };
        let reply = result.map(|outcome| Completion {
            outcome,
            lock: lock.as_ref().map(|(_, s)| s.clone()),
            all: all.iter().map(|(_, s)| s.clone()).collect(),
        });
        let delivered = caller.is_some_and(|c| c.reply.deliver(reply));
        if !delivered {
            // Nobody takes these locks (the caller is gone): give them back.
            let now = self.clock.now();
            for (id, _) in lock.into_iter().chain(all) {
                let _ = self
                    .session
                    .start(now, Operation::Release { lock: id }, None);
            }
        }
    }

    /// The machine is closed (or its shutdown ran out of time): stop streams,
    /// mark locks still known as lost, and fail whatever still waits.
    fn finish(&mut self) {
        let closed_cleanly = self.session.is_closed();
        for (_, (c, stream)) in self.inflight.drain() {
            // A closed machine may have left fire-and-forget requests (a final
            // release); those finish on their own, bounded by their timeouts.
            if stream || !closed_cleanly {
                c.cancel();
            }
        }
        for (_, s) in self.locks.drain() {
            s.mark_lost(LostReason::ClientClosed);
        }
        // Dropping the session drops the pending reply senders: waiting
        // callers see `Closed`.
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        self.finish();
    }
}

/// Runs one request on a worker thread and reports every input back.
fn run_request(http: &HttpClient, req: HttpRequest, cancel: &CancelHandle, tx: &Sender<Msg>) {
    let id = req.id;
    let Some(url) = req.target.url() else {
        // Bindings (Durable Objects, D1) exist only inside a Worker.
        let error = crate::core::TransportError::Connect(format!(
            "the native driver cannot reach {}: it has no bindings",
            req.target
        ));
        let _ = tx.send(Msg::Net(Input::Failed { id, error }));
        return;
    };
    let request = Request {
        method: req.method.as_str(),
        url,
        headers: &req.headers,
        body: &req.body,
        timeout: req.timeout_ms.map(Duration::from_millis),
    };
    let input = if req.stream {
        let mut sink = |piece: &[u8]| {
            let _ = tx.send(Msg::Net(Input::Chunk {
                id,
                data: piece.to_vec(),
            }));
        };
        match http.send_streaming(&request, cancel, &mut sink) {
            Ok(StreamOutcome::Ended) => Input::StreamEnd { id },
            Ok(StreamOutcome::Whole(r)) => Input::Response {
                id,
                status: r.status,
                body: r.body,
            },
            Err(error) => Input::Failed { id, error },
        }
    } else {
        match http.send(&request, cancel) {
            Ok(r) => Input::Response {
                id,
                status: r.status,
                body: r.body,
            },
            Err(error) => Input::Failed { id, error },
        }
    };
    // A cancelled request's late answer is harmless (the machine ignores it),
    // but skipping it saves the driver a wake-up.
    if !cancel.is_cancelled() {
        let _ = tx.send(Msg::Net(input));
    }
}
