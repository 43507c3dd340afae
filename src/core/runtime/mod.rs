//! The runtime every machine shares, so that a machine keeps only its
//! recipe: ids and output queues ([`Outbox`]), requests in flight with
//! their owners and deadlines ([`Requests`], streams included), one timer
//! table ([`Timers`]) and close/drain ([`Closing`]).
//!
//! A machine's `handle_timeout` is then: [`Runtime::expire`] the requests
//! past their deadline and treat each as a timed-out answer, then
//! [`Timers::take_due`] and act on each key; its `poll_timeout` is
//! [`Runtime::poll_timeout`].

mod closing;
mod requests;
pub(crate) mod small_sort;
mod timers;
mod vec_map;

pub(crate) use closing::Closing;
pub(crate) use requests::Requests;
pub(crate) use timers::Timers;
pub(crate) use vec_map::VecMap;

use super::outbox::Outbox;
use super::{Event, HttpRequest, Millis, RequestId, Transmit};

/// Outbox, requests in flight owned by `O`, timers keyed by `K`, close state.
pub(crate) struct Runtime<O, K: Ord + Copy> {
    pub(crate) out: Outbox,
    pub(crate) requests: Requests<O>,
    pub(crate) timers: Timers<K>,
    pub(crate) closing: Closing,
}

impl<O, K: Ord + Copy> Default for Runtime<O, K> {
    fn default() -> Self {
        Runtime {
            out: Outbox::default(),
            requests: Requests::default(),
            timers: Timers::default(),
            closing: Closing::default(),
        }
    }
}

impl<O, K: Ord + Copy> Runtime<O, K> {
    /// Sends a request built by `build` on behalf of `owner` (see [`Requests::send`]).
    pub(crate) fn send<E>(
        &mut self,
        now: Millis,
        owner: O,
        build: impl FnOnce(RequestId) -> Result<HttpRequest, E>,
    ) -> Result<RequestId, E> {
        self.requests.send(&mut self.out, now, owner, build)
    }

    /// Abandons request `id`; its owner, if it was still in flight.
    pub(crate) fn cancel(&mut self, id: RequestId) -> Option<O> {
        self.requests.cancel(&mut self.out, id)
    }

    /// Abandons every request whose owner matches.
    pub(crate) fn cancel_where(&mut self, matches: impl FnMut(&O) -> bool) -> Vec<(RequestId, O)> {
        self.requests.cancel_where(&mut self.out, matches)
    }

    /// Takes out the requests past their deadline (see [`Requests::expire`]).
    pub(crate) fn expire(&mut self, now: Millis) -> Vec<(RequestId, O)> {
        self.requests.expire(&mut self.out, now)
    }

    /// The next wake-up: a request deadline or a timer.
    pub(crate) fn poll_timeout(&self) -> Option<Millis> {
        super::outbox::earliest([self.requests.next_deadline(), self.timers.next()])
    }

    /// The next request or cancel for the driver.
    pub(crate) fn poll_transmit(&mut self) -> Option<Transmit> {
        self.out.poll_transmit()
    }

    /// The next event for the driver.
    pub(crate) fn poll_event(&mut self) -> Option<Event> {
        self.out.poll_event()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::{Method, Target};

    fn request(id: RequestId, timeout_ms: Option<u64>) -> Result<HttpRequest, ()> {
        Ok(HttpRequest {
            id,
            method: Method::Post,
            target: Target::Url("http://127.0.0.1:1/x".into()),
            headers: Vec::new(),
            body: Vec::new(),
            timeout_ms,
            stream: timeout_ms.is_none(),
        })
    }

    #[test]
    fn requests_route_expire_and_cancel() {
        let mut rt: Runtime<&str, u8> = Runtime::default();
        let a = rt.send(100, "a", |id| request(id, Some(50))).unwrap();
        let b = rt.send(100, "b", |id| request(id, Some(10))).unwrap();
        let s = rt.send(100, "stream", |id| request(id, Some(10))).unwrap();
        assert!(rt
            .send(100, "never", |_| Err::<HttpRequest, ()>(()))
            .is_err());
        assert!(matches!(rt.poll_transmit(), Some(Transmit::Send(r)) if r.id == a));
        rt.timers.set(7, 105);
        assert_eq!(rt.poll_timeout(), Some(105));
        rt.requests.keep_open(s);
        // Only `b` is past its deadline at 110; the established stream never is.
        assert_eq!(rt.expire(110), vec![(b, "b")]);
        assert_eq!(
            rt.requests.finish(b),
            None,
            "an expired request's late answer goes nowhere"
        );
        assert_eq!(rt.requests.finish(a), Some("a"));
        assert_eq!(rt.cancel_where(|o| *o == "stream"), vec![(s, "stream")]);
        assert_eq!(rt.requests.next_deadline(), None);
        let cancels: Vec<RequestId> = std::iter::from_fn(|| rt.poll_transmit())
            .filter_map(|t| match t {
                t @ (Transmit::Open(_) | Transmit::Write { .. }) => {
                    panic!("an HTTP machine opened a byte stream: {t:?}")
                }
                Transmit::Cancel(id) => Some(id),
                Transmit::Send(_) => None,
            })
            .collect();
        assert_eq!(cancels, vec![b, s]);
    }

    #[test]
    fn close_answers_every_caller_once_drained() {
        let mut rt: Runtime<(), u8> = Runtime::default();
        let (one, two) = (rt.out.op_id(), rt.out.op_id());
        assert!(rt.closing.begin(one));
        assert!(!rt.closing.begin(two));
        assert!(rt
            .closing
            .check_open(crate::core::BackendKind::Redis)
            .is_err());
        rt.closing.finish_if(false, &mut rt.out);
        assert!(rt.poll_event().is_none());
        rt.closing.finish_if(true, &mut rt.out);
        let done: Vec<_> = std::iter::from_fn(|| rt.poll_event()).collect();
        assert_eq!(done.len(), 2);
        assert!(rt.closing.drained());
    }
}
