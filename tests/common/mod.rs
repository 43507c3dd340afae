//! Helpers shared by the real-server test files (`mod common;` in each).
#![allow(dead_code)]

pub mod etcd_raw;
pub mod etcd_traffic;
pub mod redis_node;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use edgelock::core::*;
use edgelock::native::Client;

/// A hook called with every input a machine is given.
pub type InputHook = Box<dyn FnMut(&Input) + Send>;

/// Calls `on_send` with every HTTP request a machine emits, and `on_input`
/// (if any) with every input it is given (wraps it; changes nothing else).
pub struct Observing<M> {
    pub inner: M,
    pub on_send: Box<dyn FnMut(&HttpRequest) + Send>,
    pub on_input: Option<InputHook>,
}

impl<M: LockMachine> LockMachine for Observing<M> {
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
        if let Some(f) = self.on_input.as_mut() {
            f(&i);
        }
        self.inner.handle_input(now, i)
    }
    fn handle_timeout(&mut self, now: Millis) {
        self.inner.handle_timeout(now)
    }
    fn poll_transmit(&mut self) -> Option<Transmit> {
        let t = self.inner.poll_transmit();
        if let Some(Transmit::Send(r)) = &t {
            (self.on_send)(r);
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

/// Counts the HTTP requests `machine` emits into `sent`.
pub fn counting<M: LockMachine>(machine: M, sent: Arc<AtomicUsize>) -> Observing<M> {
    Observing {
        inner: machine,
        on_send: Box::new(move |_| {
            sent.fetch_add(1, Ordering::SeqCst);
        }),
        on_input: None,
    }
}

/// Wraps a machine in a counting client; returns the client and its counter.
pub fn counting_client<M: LockMachine + Send + 'static>(machine: M) -> (Client, Arc<AtomicUsize>) {
    let sent = Arc::new(AtomicUsize::new(0));
    (
        Client::from_machine(Box::new(counting(machine, sent.clone()))),
        sent,
    )
}

/// Every client loops `rounds` times: acquire `name`, do a deliberately racy
/// read-modify-write of a shared counter, release. Asserts that no two
/// holders overlapped, the counter is exact and the fencing tokens, in grant
/// order, strictly increase. Closes the clients.
pub fn assert_mutual_exclusion(
    clients: Vec<Client>,
    name: &'static str,
    rounds: usize,
    wait: Duration,
) {
    let n = clients.len();
    let counter = Arc::new(Mutex::new(0usize));
    let inside = Arc::new(AtomicBool::new(false));
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let threads: Vec<_> = clients
        .into_iter()
        .map(|c| {
            let (counter, inside, tokens) = (counter.clone(), inside.clone(), tokens.clone());
            std::thread::spawn(move || {
                for _ in 0..rounds {
                    let lock = c.acquire(name, Some(wait)).expect("acquire");
                    assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                    tokens.lock().unwrap().push(lock.fencing_token());
                    let v = *counter.lock().unwrap();
                    std::thread::yield_now();
                    *counter.lock().unwrap() = v + 1;
                    inside.store(false, Ordering::SeqCst);
                    assert!(lock.release().expect("release"), "held until release");
                }
                c.close().unwrap();
            })
        })
        .collect();
    for t in threads {
        t.join().expect("client thread");
    }
    assert_eq!(*counter.lock().unwrap(), n * rounds);
    let tokens = tokens.lock().unwrap();
    assert_eq!(tokens.len(), n * rounds);
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "fencing tokens must strictly increase: {tokens:?}"
    );
}

/// For a waiter whose sends are logged as (when, is a subscription): waits
/// until its latest attempt (a script) was sent 150 ms to 500 ms ago, and
/// returns when. Quiet for 150 ms: that attempt was answered (refused) and
/// the waiter sleeps; at most 500 ms: its next poll is still far off, so
/// a release now must wake it by push to be this quick. If the test got
/// here late (a loaded machine), this waits for the waiter's next poll.
pub fn just_after_an_attempt(log: &Mutex<Vec<(Instant, bool)>>) -> Instant {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let last = log
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, stream)| !stream)
            .map(|(at, _)| *at)
            .max()
            .expect("the waiter attempted");
        let age = last.elapsed();
        if age >= Duration::from_millis(150) && age <= Duration::from_millis(500) {
            return last;
        }
        assert!(Instant::now() < deadline, "the waiter stopped attempting");
        std::thread::sleep(Duration::from_millis(10));
    }
}
