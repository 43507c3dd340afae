//! The `#[durable_object]` glue: loads and stores [`LockState`], runs one
//! transition of [`machine`](super::machine) per request or alarm, and
//! holds waiting `acquire` requests open on a oneshot channel until a
//! release or an expiry grants them (or their `waitMs` ends).
//!
//! Concurrency: the object is single-threaded; every transition runs
//! synchronously inside one `RefCell` borrow (state change, channel sends,
//! queue registration), then the new state is written. The write is issued
//! before any held-open request can answer, and the runtime's output gate
//! holds every answer until the write is durable: no grant is seen before
//! its fencing counter is stored.

use std::cell::RefCell;
use std::collections::HashMap;
use std::future::{poll_fn, Future};
use std::pin::{pin, Pin};
use std::task::Poll;
use std::time::Duration;

use futures_channel::oneshot;
use serde_json::Value;
use worker::{
    durable_object, Date, Delay, DurableObject, Env, Request, Response, ScheduledTime, State,
};

use super::machine::{Acquire, Kind, LockState, Notice};
use super::protocol::{self, answer, Op, Refusal};

/// The storage key of the state (one JSON string: u64s stay exact).
const KEY: &str = "lock";

/// The open `acquire` request of each queued owner.
type Open = HashMap<String, Waiting>;

struct Waiting {
    /// Which request of the owner (a re-sent acquire replaces the older).
    ticket: u64,
    /// Its answer goes through here (closed when its request future is
    /// dropped).
    tx: oneshot::Sender<Notice>,
}

#[durable_object(alarm)]
pub struct LockObject {
    state: State,
    inner: RefCell<Inner>,
}

#[derive(Default)]
struct Inner {
    /// `None` until loaded from storage.
    lock: Option<LockState>,
    open: Open,
    tickets: u64,
    /// The alarm time this instance last set: it is set again only when
    /// the lease end moves (or after the alarm fired, or a restart).
    armed: Option<u64>,
}

fn now_ms() -> u64 {
    Date::now().as_millis()
}

/// Whether `owner`'s queued request is still open in this instance.
fn live(open: &Open, owner: &str) -> bool {
    open.get(owner).is_some_and(|w| !w.tx.is_canceled())
}

/// Hands each notice to the request it is for.
fn deliver(open: &mut Open, out: Vec<Notice>) {
    for n in out {
        let owner = match &n {
            Notice::Granted { owner, .. } | Notice::Dropped { owner } => owner,
        };
        if let Some(w) = open.remove(owner) {
            let _ = w.tx.send(n);
        }
    }
}

fn respond(status: u16, body: &Value) -> worker::Result<Response> {
    Ok(Response::from_json(body)?.with_status(status))
}

fn refuse(r: &Refusal) -> worker::Result<Response> {
    respond(r.status, &r.body())
}

impl LockObject {
    async fn load(&self) -> worker::Result<()> {
        if self.inner.borrow().lock.is_some() {
            return Ok(());
        }
        let stored: Option<String> = self.state.storage().get(KEY).await?;
        let lock = match stored {
            Some(s) => serde_json::from_str(&s)
                .map_err(|_| worker::Error::RustError("the stored lock state is corrupt".into()))?,
            None => LockState::default(),
        };
        let mut inner = self.inner.borrow_mut();
        if inner.lock.is_none() {
            inner.lock = Some(lock);
        }
        Ok(())
    }

    /// One transition: `f` runs on the state at the current time; its
    /// notices are delivered, then `register` may queue a new open request;
    /// the state is stored if it changed and the alarm set to the lease end.
    async fn step<T>(
        &self,
        f: impl FnOnce(&mut LockState, &Open, u64, &mut Vec<Notice>) -> T,
        register: impl FnOnce(&T, &mut Open),
    ) -> worker::Result<T> {
        let (result, snapshot) = {
            let mut inner = self.inner.borrow_mut();
            let Inner { lock, open, .. } = &mut *inner;
            let lock = lock
                .as_mut()
                .ok_or_else(|| worker::Error::RustError("the lock state is not loaded".into()))?;
            let before = lock.clone();
            let mut out = Vec::new();
            let result = f(lock, open, now_ms(), &mut out);
            deliver(open, out);
            register(&result, open);
            let snapshot = (*lock != before).then(|| serde_json::to_string(lock));
            (result, snapshot)
        };
        let storage = self.state.storage();
        if let Some(snapshot) = snapshot {
            let snapshot = snapshot.map_err(|e| worker::Error::RustError(e.to_string()))?;
            storage.put(KEY, snapshot).await?;
        }
        let alarm = {
            let mut inner = self.inner.borrow_mut();
            let at = inner.lock.as_ref().and_then(LockState::alarm_at);
            let moved = at.is_some() && at != inner.armed;
            if moved {
                inner.armed = at;
            }
            at.filter(|_| moved)
        };
        if let Some(at) = alarm {
            let date = js_sys::Date::new(&wasm_bindgen::JsValue::from_f64(at as f64));
            storage.set_alarm(ScheduledTime::new(date)).await?;
        }
        Ok(result)
    }

    async fn acquire(
        &self,
        owner: String,
        kind: Kind,
        ttl_ms: u64,
        wait_ms: u64,
    ) -> worker::Result<Response> {
        let (tx, rx) = oneshot::channel();
        let ticket = {
            let mut inner = self.inner.borrow_mut();
            inner.tickets += 1;
            inner.tickets
        };
        let now = self
            .step(
                |lock, open, now, out| {
                    lock.acquire(&owner, kind, ttl_ms, wait_ms, now, &|o| live(open, o), out)
                },
                |a, open| {
                    if matches!(a, Acquire::Queued { .. }) {
                        open.insert(owner.clone(), Waiting { ticket, tx });
                    }
                },
            )
            .await?;
        match now {
            Acquire::Held {
                token,
                ttl_ms,
                waiters,
                slot,
            } => respond(200, &answer::granted(token, ttl_ms, waiters, slot)),
            Acquire::Busy(b) => respond(200, &answer::busy(&b)),
            Acquire::OtherLimit { limit } => respond(409, &answer::other_limit(limit)),
            Acquire::Queued { .. } => self.wait(owner, ticket, rx, wait_ms).await,
        }
    }

    /// Holds a queued request open until its notice or the end of its wait.
    async fn wait(
        &self,
        owner: String,
        ticket: u64,
        mut rx: oneshot::Receiver<Notice>,
        wait_ms: u64,
    ) -> worker::Result<Response> {
        let mut delay = pin!(Delay::from(Duration::from_millis(wait_ms)));
        let notice = poll_fn(|cx| {
            if let Poll::Ready(r) = Pin::new(&mut rx).poll(cx) {
                return Poll::Ready(r.ok());
            }
            delay.as_mut().poll(cx).map(|()| None)
        })
        .await;
        let notice = match notice {
            Some(n) => Some(n),
            None => {
                // The wait ended: leave the queue if this request is still
                // the owner's queued one (a grant may have raced the timer).
                let busy = self
                    .step(
                        |lock, open, now, out| {
                            if open.get(&owner).is_some_and(|w| w.ticket == ticket) {
                                lock.give_up(&owner, now, &|o| o != owner && live(open, o), out)
                            } else {
                                lock.busy(now)
                            }
                        },
                        |_, open| {
                            if open.get(&owner).is_some_and(|w| w.ticket == ticket) {
                                open.remove(&owner);
                            }
                        },
                    )
                    .await?;
                match rx.try_recv() {
                    Ok(Some(n)) => Some(n),
                    _ => return respond(200, &answer::busy(&busy)),
                }
            }
        };
        match notice {
            Some(Notice::Granted {
                token,
                ttl_ms,
                waiters,
                slot,
                ..
            }) => respond(200, &answer::granted(token, ttl_ms, waiters, slot)),
            _ => {
                let busy = self
                    .step(|lock, _, now, _| lock.busy(now), |_, _| {})
                    .await?;
                respond(200, &answer::busy(&busy))
            }
        }
    }

    async fn run(&self, op: Op) -> worker::Result<Response> {
        let body = match op {
            Op::Acquire {
                owner,
                kind,
                ttl_ms,
                wait_ms,
            } => return self.acquire(owner, kind, ttl_ms, wait_ms).await,
            Op::Release { owner, token } => {
                let ok = self
                    .step(
                        |l, open, now, out| l.release(&owner, token, now, &|o| live(open, o), out),
                        |_, _| {},
                    )
                    .await?;
                answer::released(ok)
            }
            Op::Extend {
                owner,
                token,
                ttl_ms,
            } => {
                let ok = self
                    .step(
                        |l, open, now, out| {
                            l.extend(&owner, token, ttl_ms, now, &|o| live(open, o), out)
                        },
                        |_, _| {},
                    )
                    .await?;
                answer::extended(ok.then_some(ttl_ms))
            }
            Op::Resume { owner, token } => {
                let left = self
                    .step(
                        |l, open, now, out| l.resume(&owner, token, now, &|o| live(open, o), out),
                        |_, _| {},
                    )
                    .await?;
                answer::resumed(left.as_ref())
            }
            Op::Inspect => {
                let s = self
                    .step(
                        |l, open, now, out| l.inspect(now, &|o| live(open, o), out),
                        |_, _| {},
                    )
                    .await?;
                answer::status(&s)
            }
        };
        respond(200, &body)
    }
}

impl DurableObject for LockObject {
    fn new(state: State, _env: Env) -> Self {
        LockObject {
            state,
            inner: RefCell::new(Inner::default()),
        }
    }

    async fn fetch(&self, mut req: Request) -> worker::Result<Response> {
        let url = req.url()?;
        let method = req.method().to_string();
        let body = req.bytes().await.unwrap_or_default();
        let cmd = match protocol::parse(&method, url.path(), url.query().unwrap_or(""), &body) {
            Ok(c) => c,
            Err(r) => return refuse(&r),
        };
        self.load().await?;
        {
            let mut inner = self.inner.borrow_mut();
            if let Some(lock) = inner.lock.as_mut() {
                if lock.name.is_empty() {
                    lock.name = cmd.name.clone();
                } else if lock.name != cmd.name {
                    return refuse(&Refusal::new(400, "this object serves another lock name"));
                }
            }
        }
        self.run(cmd.op).await
    }

    /// The earliest lease end: drop the holders whose lease ended, grant
    /// the head waiters they admit.
    async fn alarm(&self) -> worker::Result<Response> {
        self.load().await?;
        // This alarm is spent: a holder still in place is armed again.
        self.inner.borrow_mut().armed = None;
        self.step(
            |l, open, now, out| l.settle(now, &|o| live(open, o), out),
            |_, _| {},
        )
        .await?;
        Response::ok("")
    }
}
