//! Leader election on the blocking client: [`Client::campaign`],
//! [`Lock::proclaim`], [`Client::leader`] and [`Client::observe`].
//!
//! A leadership is a [`Lock`] of kind [`LockKind::Leader`]: it renews, is
//! lost, resigns ([`Lock::release`]) and resumes like any lock; its fencing
//! token is the leader's lock token.

use super::{CancelToken, Client, Lock};
use crate::core::{AcquireOptions, Leadership, LockError, LockKind, Operation, Wait};
use crate::native::driver::Call;
use std::time::{Duration, Instant};

impl Client {
    /// Waits (as `opts.wait` says) until this client leads the election
    /// `name`, announcing `value`; `Ok(None)` only for `Wait::Try` when
    /// someone else leads. The leadership is a [`Lock`] of kind
    /// [`LockKind::Leader`]: resign with [`Lock::release`].
    ///
    /// ```no_run
    /// use edgelock::core::{AcquireOptions, Wait};
    /// use edgelock::native::{Client, EtcdConfig};
    ///
    /// let client = Client::etcd(EtcdConfig::new(vec!["http://127.0.0.1:2379".into()]))?;
    /// let opts = AcquireOptions { wait: Wait::Forever, ttl_ms: None };
    /// let leadership = client.campaign("scheduler", "node-a:8080", opts, None)?.expect("waited");
    /// // Only the leader may change what it announces.
    /// leadership.proclaim("node-a:9090")?;
    /// assert_eq!(client.leader("scheduler")?.unwrap().value, "node-a:9090");
    /// leadership.release()?; // resign
    /// # Ok::<(), edgelock::LockError>(())
    /// ```
    pub fn campaign(
        &self,
        name: &str,
        value: &str,
        opts: AcquireOptions,
        cancel: Option<&CancelToken>,
    ) -> Result<Option<Lock>, LockError> {
        self.acquired(self.call_cancellable(campaign_call(name, value, opts), name, cancel)?)
    }

    /// Who leads the election `name` now (`None`: nobody).
    pub fn leader(&self, name: &str) -> Result<Option<Leadership>, LockError> {
        self.call(leader_call(name))?.outcome.into_leader()
    }

    /// The leadership of `name` as it changes: first the current state, then
    /// every change (another leader, a new value, or nobody), pushed by the
    /// backend where it can. The iterator ends after `cancel` is cancelled
    /// (or after yielding an error).
    pub fn observe(&self, name: &str, cancel: CancelToken) -> Observer {
        Observer {
            client: self.clone(),
            name: name.to_string(),
            cancel,
            known: None,
            done: false,
        }
    }

    /// Waits until the leadership of `name` differs from `known`, or until
    /// `wait` runs out (then the current, unchanged state).
    pub fn observe_change(
        &self,
        name: &str,
        known: Option<&Leadership>,
        wait: Wait,
        cancel: Option<&CancelToken>,
    ) -> Result<Option<Leadership>, LockError> {
        self.call_cancellable(observe_call(name, known, wait), name, cancel)?
            .outcome
            .into_leader()
    }
}

impl Lock {
    /// Replaces the value this leadership announces, checked on the backend:
    /// `NotHeld`/`Lost` once it no longer leads. `INVALID_ARGUMENT` for a
    /// lock that is not a leadership, before any request.
    pub fn proclaim(&self, value: &str) -> Result<(), LockError> {
        let call = self.proclaim_call(value)?;
        self.client().call(call)?.outcome.into_proclaimed()
    }

    /// The proclaim request, or the error a proclaim gets before any request.
    pub(crate) fn proclaim_call(&self, value: &str) -> Result<Call, LockError> {
        if self.kind() != LockKind::Leader {
            return Err(LockError::invalid(format!(
                "proclaim needs a leadership (from campaign), not a {} lock",
                self.kind().as_str()
            )));
        }
        if let Some(reason) = self.lost_reason() {
            return Err(self.lost_error(&reason));
        }
        crate::core::check_campaign_value(value)?;
        Ok(Call::Start(Operation::Proclaim {
            lock: self.info().id,
            value: value.to_string(),
        }))
    }
}

/// How often in a row [`Observer`] retries a retryable error
/// ([`LockError::is_retryable`]: no answer, a backend error, no quorum)
/// before it yields the error, so that one dropped connection does not end
/// a long-lived observer. The npm package's `observe` does the same.
const OBSERVE_RETRIES: u32 = 5;
/// The first retry's backoff, doubled per failure (50 ms … 800 ms).
const OBSERVE_BACKOFF: Duration = Duration::from_millis(50);

fn sleep_unless_cancelled(total: Duration, cancel: &CancelToken) {
    let end = Instant::now() + total;
    while !cancel.is_cancelled() {
        let now = Instant::now();
        if now >= end {
            return;
        }
        std::thread::sleep((end - now).min(Duration::from_millis(10)));
    }
}

/// The leadership changes of one election, from [`Client::observe`]: the
/// current state, then every change. A retryable error is retried with
/// backoff up to five times in a row before it is yielded (and ends the
/// iterator).
pub struct Observer {
    client: Client,
    name: String,
    cancel: CancelToken,
    /// What was last yielded (`None` before the first item).
    known: Option<Option<Leadership>>,
    done: bool,
}

impl Iterator for Observer {
    type Item = Result<Option<Leadership>, LockError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done || self.cancel.is_cancelled() {
            return None;
        }
        let mut failures = 0;
        let result = loop {
            let seen = match &self.known {
                None => self.client.leader(&self.name),
                Some(known) => self.client.observe_change(
                    &self.name,
                    known.as_ref(),
                    Wait::Forever,
                    Some(&self.cancel),
                ),
            };
            match seen {
                Ok(now) if self.known.as_ref() == Some(&now) => failures = 0,
                Err(e)
                    if e.is_retryable()
                        && failures < OBSERVE_RETRIES
                        && !self.cancel.is_cancelled() =>
                {
                    sleep_unless_cancelled(OBSERVE_BACKOFF * 2u32.pow(failures), &self.cancel);
                    if self.cancel.is_cancelled() {
                        break Err(e);
                    }
                    failures += 1;
                }
                other => break other,
            }
        };
        match result {
            Ok(state) => {
                self.known = Some(state.clone());
                Some(Ok(state))
            }
            // Cancelled: the iterator ends, whatever the interrupted call said.
            Err(_) if self.cancel.is_cancelled() => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

pub(crate) fn campaign_call(name: &str, value: &str, options: AcquireOptions) -> Call {
    Call::Start(Operation::Campaign {
        name: name.to_string(),
        value: value.to_string(),
        options,
    })
}

pub(crate) fn leader_call(name: &str) -> Call {
    Call::Start(Operation::Leader {
        name: name.to_string(),
    })
}

pub(crate) fn observe_call(name: &str, known: Option<&Leadership>, wait: Wait) -> Call {
    Call::Start(Operation::Observe {
        name: name.to_string(),
        known: known.cloned(),
        wait,
    })
}
