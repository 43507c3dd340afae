//! Counting what an etcd client's machine sends and receives: re-check txns,
//! watches opened and watch messages with events (the semaphore and the
//! read-write lock tests measure wake-ups per handoff with it).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use edgelock::core::*;
use edgelock::native::Client;

/// What one client's machine did: re-check txns sent, watches opened, and
/// watch messages carrying events delivered to it.
#[derive(Default)]
pub struct Traffic {
    pub rechecks: AtomicUsize,
    pub watches: AtomicUsize,
    pub watch_events: AtomicUsize,
    pub requests: AtomicUsize,
}

/// Wraps a machine to count its [`Traffic`] (changes nothing else).
pub struct Counted<M> {
    inner: M,
    traffic: Arc<Traffic>,
    watch_ids: Vec<RequestId>,
}

impl<M: LockMachine> LockMachine for Counted<M> {
    fn backend(&self) -> BackendKind {
        self.inner.backend()
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    fn start_operation(&mut self, now: Millis, op: Operation) -> Result<OpId, LockError> {
        self.inner.start_operation(now, op)
    }
    fn cancel(&mut self, now: Millis, op: OpId) {
        self.inner.cancel(now, op)
    }
    fn close(&mut self, now: Millis) -> OpId {
        self.inner.close(now)
    }
    fn handle_input(&mut self, now: Millis, i: Input) {
        if let Input::Chunk { id, data } = &i {
            // One message per chunk is how etcd's gateway sends them; count
            // the ones with events (not the `created` confirmation).
            if self.watch_ids.contains(id) && String::from_utf8_lossy(data).contains("\"events\"") {
                self.traffic.watch_events.fetch_add(1, Ordering::SeqCst);
            }
        }
        self.inner.handle_input(now, i)
    }
    fn handle_timeout(&mut self, now: Millis) {
        self.inner.handle_timeout(now)
    }
    fn poll_transmit(&mut self) -> Option<Transmit> {
        let t = self.inner.poll_transmit();
        if let Some(Transmit::Send(r)) = &t {
            self.traffic.requests.fetch_add(1, Ordering::SeqCst);
            let body = String::from_utf8_lossy(&r.body);
            let path = r.target.to_string();
            // A waiting permit's re-check is the only txn reading "up to our revision".
            if path.ends_with("/v3/kv/txn") && body.contains("max_create_revision") {
                self.traffic.rechecks.fetch_add(1, Ordering::SeqCst);
            }
            if path.ends_with("/v3/watch") {
                self.traffic.watches.fetch_add(1, Ordering::SeqCst);
                self.watch_ids.push(r.id);
            }
        }
        t
    }
    fn poll_event(&mut self) -> Option<Event> {
        self.inner.poll_event()
    }
    fn poll_timeout(&self) -> Option<Millis> {
        self.inner.poll_timeout()
    }
    fn live_count(&self) -> usize {
        self.inner.live_count()
    }
}

/// A client over `machine` whose traffic is counted.
pub fn counted_client<M: LockMachine + Send + 'static>(machine: M) -> (Client, Arc<Traffic>) {
    let traffic = Arc::new(Traffic::default());
    let machine = Counted { inner: machine, traffic: traffic.clone(), watch_ids: Vec::new() };
    (Client::from_machine(Box::new(machine)), traffic)
}
