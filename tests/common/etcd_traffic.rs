//! Counting what an etcd client's machine sends and receives: re-check txns,
//! watches opened and watch messages with events (the semaphore and the
//! read-write lock tests measure wake-ups per handoff with it).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use edgelock::core::*;
use edgelock::native::Client;

use super::Observing;

/// What one client's machine did: re-check txns sent, watches opened (sent),
/// watches etcd confirmed (`created`: their connection is through), and
/// watch messages carrying events delivered to it.
#[derive(Default)]
pub struct Traffic {
    pub rechecks: AtomicUsize,
    pub watches: AtomicUsize,
    pub watches_created: AtomicUsize,
    pub watch_events: AtomicUsize,
    pub requests: AtomicUsize,
}

/// A client over `machine` whose [`Traffic`] is counted (an [`Observing`]
/// wrapper: nothing else changes).
pub fn counted_client<M: LockMachine + Send + 'static>(machine: M) -> (Client, Arc<Traffic>) {
    let traffic = Arc::new(Traffic::default());
    let watch_ids: Arc<Mutex<Vec<RequestId>>> = Arc::default();
    let (t, ids) = (traffic.clone(), watch_ids.clone());
    let on_send = Box::new(move |r: &HttpRequest| {
        t.requests.fetch_add(1, Ordering::SeqCst);
        let path = r.target.to_string();
        // A waiter's re-check is the only txn reading "up to our revision".
        if path.ends_with("/v3/kv/txn")
            && String::from_utf8_lossy(&r.body).contains("max_create_revision")
        {
            t.rechecks.fetch_add(1, Ordering::SeqCst);
        }
        if path.ends_with("/v3/watch") {
            t.watches.fetch_add(1, Ordering::SeqCst);
            ids.lock().unwrap().push(r.id);
        }
    });
    let t = traffic.clone();
    let on_input = Box::new(move |i: &Input| {
        // One message per chunk is how etcd's gateway sends them; count the
        // ones with events (not the `created` confirmation).
        if let Input::Chunk { id, data } = i {
            if watch_ids.lock().unwrap().contains(id) {
                let text = String::from_utf8_lossy(data);
                if text.contains("\"events\"") {
                    t.watch_events.fetch_add(1, Ordering::SeqCst);
                }
                if text.contains("\"created\":true") {
                    t.watches_created.fetch_add(1, Ordering::SeqCst);
                }
            }
        }
    });
    (
        Client::from_machine(Box::new(Observing {
            inner: machine,
            on_send,
            on_input: Some(on_input),
        })),
        traffic,
    )
}
