//! [`Session`]: the one driver loop, written once.
//!
//! Every driver — the native thread, the JavaScript `fetch`/`setTimeout`
//! driver (also inside a Cloudflare Worker, where the machine is wrapped in a
//! [`Budgeted`](super::budget::Budgeted)) — runs its machine inside a
//! `Session`. The session keeps what every driver needs and no driver should
//! write again: which requests are in flight (so a late answer to a cancelled
//! request is dropped), which operation belongs to which waiting caller, one
//! close shared by every caller of `close`, and the routing of the machine's
//! events into [`Output`]s. Drivers keep only their I/O: performing requests,
//! arming one timer, and handing results to their callers.
//!
//! # The loop
//!
//! Do one thing — start an operation, feed an HTTP answer, or report that
//! the timer fired — then drain [`poll_output`](Session::poll_output) until it
//! returns [`Output::Wait`], and sleep until the next input or that time:
//!
//! ```
//! use edgelock::core::redis::{RedisConfig, RedisMachine, RedisNode};
//! use edgelock::core::session::{Output, Session};
//! use edgelock::core::{AcquireOptions, Input, Operation, Outcome, SeededEntropy, Wait};
//!
//! let node = RedisNode::upstash("http://127.0.0.1:8079", "token");
//! let machine = RedisMachine::new(RedisConfig::new(node), Box::new(SeededEntropy::new(7))).unwrap();
//! // The reply token (here a &str) is whatever the driver needs to answer its caller.
//! let mut session: Session<&str> = Session::new(Box::new(machine));
//!
//! let mut now = 0; // the driver's monotonic clock, in ms
//! let try_once = AcquireOptions { wait: Wait::Try, ttl_ms: None };
//! session.start(now, Operation::acquire("nightly", try_once), Some("caller 1")).unwrap();
//! let mut granted = None;
//! loop {
//!     match session.poll_output() {
//!         // A real driver performs the request; here the node answers at once:
//!         // the acquire script's reply [granted, fencing counter, pttl].
//!         Output::Send(req) => {
//!             now += 3;
//!             let body = br#"{"result":[1,42,10000]}"#.to_vec();
//!             session.handle_input(now, Input::Response { id: req.id, status: 200, body });
//!         }
//!         Output::Cancel(_) => {}
//!         // Byte streams: what a Redis-protocol (`redis://`) node opens;
//!         // this node speaks HTTP (see `native/stream.rs` for a driver's side).
//!         Output::Open(_) | Output::Write { .. } => {}
//!         Output::Done { reply, result, .. } => {
//!             assert_eq!(reply, Some("caller 1"));
//!             granted = result.unwrap().into_acquired().unwrap();
//!         }
//!         Output::Renewed { .. } | Output::Lost { .. } => {}
//!         // Nothing more to do now: sleep until `wake_at` (the watchdog) or the next input.
//!         Output::Wait { wake_at } => {
//!             assert!(wake_at.is_some());
//!             break;
//!         }
//!     }
//! }
//! assert_eq!(granted.unwrap().fencing_token, 42);
//! ```
//!
//! Rules the session keeps for its driver: inputs for requests that are not
//! in flight (cancelled, or answered already) are dropped and reported by
//! `handle_input` returning false; `now` must not go backwards.

use std::collections::VecDeque;

use crate::core::runtime::VecMap;

use super::operation::{Event, Operation, Outcome};
use super::types::{
    BackendKind, HttpRequest, Input, LockId, LostReason, Millis, OpId, Redacted, RequestId,
    StreamOpen, Transmit,
};
use super::{LockError, LockMachine};

/// What a session asks of its driver, in order.
#[derive(Debug)]
pub enum Output<T> {
    /// Perform this request and feed every answer back with
    /// [`Session::handle_input`].
    Send(HttpRequest),
    /// Abort this request or close this stream; anything it still delivers
    /// is dropped anyway.
    Cancel(RequestId),
    /// Open this byte stream and feed what happens on it back with
    /// [`Session::handle_input`] (`Opened`, `Chunk`s, `StreamEnd` or `Failed`).
    Open(StreamOpen),
    /// Write these bytes on an open stream, after the earlier writes.
    Write {
        /// The stream.
        id: RequestId,
        /// The bytes (`Debug` shows only their length).
        data: Redacted,
    },
    /// An operation finished. `reply` is the token given when it was started
    /// (`None` for operations started without one).
    Done {
        /// The finished operation.
        op: OpId,
        /// The caller's token.
        reply: Option<T>,
        /// Its outcome.
        result: Result<Outcome, LockError>,
    },
    /// Automatic renewal moved a held lock's validity forward.
    Renewed {
        /// The renewed lock.
        lock: LockId,
        /// The new conservative end of validity.
        expires_at: Millis,
    },
    /// A held lock was lost.
    Lost {
        /// The lost lock.
        lock: LockId,
        /// Why.
        reason: LostReason,
        /// The same, as the `LOST` error to show its holder.
        error: LockError,
    },
    /// Nothing more to do now. Call [`Session::handle_timeout`] at `wake_at`
    /// (if any) unless an input comes first.
    Wait {
        /// When the machine's next timer is due.
        wake_at: Option<Millis>,
    },
}

/// A machine plus the bookkeeping every driver needs (see the module docs).
pub struct Session<T> {
    machine: Box<dyn LockMachine + Send>,
    /// Requests sent and not yet finally answered or cancelled.
    inflight: VecMap<RequestId, ()>,
    /// Callers waiting for their operation.
    waiting: VecMap<OpId, T>,
    /// The machine's close operation, once asked for, and every caller of close.
    close_op: Option<OpId>,
    close_replies: Vec<T>,
    closed: bool,
    queue: VecDeque<Output<T>>,
}

impl<T> Session<T> {
    /// Runs `machine`.
    pub fn new(machine: Box<dyn LockMachine + Send>) -> Self {
        Session {
            machine,
            inflight: VecMap::new(),
            waiting: VecMap::new(),
            close_op: None,
            close_replies: Vec::new(),
            closed: false,
            queue: VecDeque::new(),
        }
    }

    // ---- getters

    /// The machine's backend.
    pub fn backend(&self) -> BackendKind {
        self.machine.backend()
    }

    /// Operations and locks the machine still tracks.
    pub fn live_count(&self) -> usize {
        self.machine.live_count()
    }

    /// True once a close has completed.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// Requests in flight (sent, not finally answered, not cancelled).
    pub fn inflight(&self) -> usize {
        self.inflight.len()
    }

    // ---- user calls

    /// Starts `op`; `reply` comes back in its [`Output::Done`]. An invalid
    /// operation (or one the machine's capabilities refuse) is `Err` and
    /// nothing is sent.
    pub fn start(
        &mut self,
        now: Millis,
        op: Operation,
        reply: Option<T>,
    ) -> Result<OpId, LockError> {
        let started = self.machine.start(now, op);
        if let (Ok(op), Some(reply)) = (&started, reply) {
            self.waiting.insert(*op, reply);
        }
        self.collect();
        started
    }

    /// Cancels a pending operation (it completes with `ABORTED` once clean).
    pub fn cancel(&mut self, now: Millis, op: OpId) {
        self.machine.cancel(now, op);
        self.collect();
    }

    /// Closes the machine once; every caller's `reply` is answered with
    /// `Outcome::Closed` when it has released everything.
    pub fn close(&mut self, now: Millis, reply: Option<T>) {
        match (self.close_op, self.closed) {
            // Already closed: answer at once, under the close's own id.
            (Some(op), true) => {
                if let Some(reply) = reply {
                    self.queue.push_back(Output::Done {
                        op,
                        reply: Some(reply),
                        result: Ok(Outcome::Closed),
                    });
                }
            }
            (Some(_), false) => self.close_replies.extend(reply),
            (None, _) => {
                self.close_replies.extend(reply);
                self.close_op = Some(self.machine.close(now));
                self.collect();
            }
        }
    }

    // ---- handle_*

    /// Feeds one answer. Returns false (and drops it) when its request is
    /// not in flight: cancelled by the machine, or already finally answered.
    pub fn handle_input(&mut self, now: Millis, input: Input) -> bool {
        let id = input.id();
        if !self.inflight.contains_key(&id) {
            return false;
        }
        if input.is_final() {
            self.inflight.remove(&id);
        }
        self.machine.handle_input(now, input);
        self.collect();
        true
    }

    /// The timer fired (early calls are harmless).
    pub fn handle_timeout(&mut self, now: Millis) {
        if self.machine.poll_timeout().is_some_and(|t| t <= now) {
            self.machine.handle_timeout(now);
            self.collect();
        }
    }

    // ---- poll_*

    /// The next thing to do; [`Output::Wait`] once there is nothing else.
    pub fn poll_output(&mut self) -> Output<T> {
        self.queue.pop_front().unwrap_or_else(|| Output::Wait {
            wake_at: self.machine.poll_timeout(),
        })
    }

    /// When the machine's next timer is due (the time `Output::Wait` carries).
    pub fn poll_timeout(&self) -> Option<Millis> {
        self.machine.poll_timeout()
    }

    /// Moves everything the machine produced into the output queue.
    fn collect(&mut self) {
        loop {
            let mut progressed = false;
            while let Some(t) = self.machine.poll_transmit() {
                progressed = true;
                match t {
                    Transmit::Send(req) => {
                        self.inflight.insert(req.id, ());
                        self.queue.push_back(Output::Send(req));
                    }
                    Transmit::Cancel(id) => {
                        if self.inflight.remove(&id).is_some() {
                            self.queue.push_back(Output::Cancel(id));
                        }
                    }
                    Transmit::Open(open) => {
                        self.inflight.insert(open.id, ());
                        self.queue.push_back(Output::Open(open));
                    }
                    Transmit::Write { id, data } => {
                        if self.inflight.contains_key(&id) {
                            self.queue.push_back(Output::Write { id, data });
                        }
                    }
                }
            }
            while let Some(e) = self.machine.poll_event() {
                progressed = true;
                self.route(e);
            }
            if !progressed {
                break;
            }
        }
    }

    fn route(&mut self, e: Event) {
        match e {
            Event::Completed { op, result } if Some(op) == self.close_op => {
                self.closed = true;
                for reply in std::mem::take(&mut self.close_replies) {
                    self.queue.push_back(Output::Done {
                        op,
                        reply: Some(reply),
                        result: result.clone(),
                    });
                }
            }
            Event::Completed { op, result } => {
                let reply = self.waiting.remove(&op);
                self.queue.push_back(Output::Done { op, reply, result });
            }
            Event::Renewed { lock, expires_at } => {
                self.queue.push_back(Output::Renewed { lock, expires_at })
            }
            Event::Lost { lock, name, reason } => {
                let error = LockError::Lost {
                    backend: self.machine.backend().as_str(),
                    name,
                    reason: reason.to_string(),
                };
                self.queue.push_back(Output::Lost {
                    lock,
                    reason,
                    error,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests;
