//! A one-value channel whose receiving end is a [`Future`], so that the driver
//! thread can complete an async call without any executor: it stores the
//! value and wakes whichever waker the executor last registered.
//!
//! Only what the async API needs: the sender is `Clone` (the driver keeps a
//! copy to answer a refused start, as it does with `mpsc::Sender`), the
//! receiver learns when every sender is gone without a value (the driver
//! ended: `Closed`), and a receiver that gives up can take back a value that
//! arrived meanwhile ([`Receiver::close`]) so that nothing it carries (a
//! granted lock) is silently dropped.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

struct State<T> {
    value: Option<T>,
    waker: Option<Waker>,
    senders: usize,
    receiver_gone: bool,
}

struct Shared<T> {
    state: Mutex<State<T>>,
}

impl<T> Shared<T> {
    fn state(&self) -> MutexGuard<'_, State<T>> {
        // A panic elsewhere while holding this lock leaves plain data behind; keep going.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The sending half; `send` consumes one copy.
pub(crate) struct Sender<T> {
    shared: Arc<Shared<T>>,
}

/// The receiving half: a future of `Ok(value)`, or `Err(Disconnected)` once
/// every sender is gone without sending.
pub(crate) struct Receiver<T> {
    shared: Arc<Shared<T>>,
}

/// Every sender was dropped without a value.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Disconnected;

pub(crate) fn channel<T>() -> (Sender<T>, Receiver<T>) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            value: None,
            waker: None,
            senders: 1,
            receiver_gone: false,
        }),
    });
    (
        Sender {
            shared: shared.clone(),
        },
        Receiver { shared },
    )
}

impl<T> Sender<T> {
    /// Delivers `value`, or hands it back when the receiver is gone (or a
    /// value was already delivered by another copy).
    pub(crate) fn send(self, value: T) -> Result<(), T> {
        let waker = {
            let mut st = self.shared.state();
            if st.receiver_gone || st.value.is_some() {
                return Err(value);
            }
            st.value = Some(value);
            st.waker.take()
        };
        // Woken outside the lock: a waker may poll the receiver at once.
        if let Some(w) = waker {
            w.wake();
        }
        Ok(())
    }
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        self.shared.state().senders += 1;
        Sender {
            shared: self.shared.clone(),
        }
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let waker = {
            let mut st = self.shared.state();
            st.senders = st.senders.saturating_sub(1);
            if st.senders == 0 {
                st.waker.take()
            } else {
                None
            }
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl<T> Receiver<T> {
    /// Stops receiving: later sends fail (handing the value back to the
    /// sender), and a value that already arrived is returned here.
    pub(crate) fn close(&mut self) -> Option<T> {
        let mut st = self.shared.state();
        st.receiver_gone = true;
        st.waker = None;
        st.value.take()
    }
}

impl<T> Future for Receiver<T> {
    type Output = Result<T, Disconnected>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut st = self.shared.state();
        if let Some(v) = st.value.take() {
            return Poll::Ready(Ok(v));
        }
        if st.senders == 0 || st.receiver_gone {
            return Poll::Ready(Err(Disconnected));
        }
        // Keep one waker: the most recent poll's (a task may move between threads).
        match &st.waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            _ => st.waker = Some(cx.waker().clone()),
        }
        Poll::Pending
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        // Later sends fail instead of parking a value nobody will read.
        let mut st = self.shared.state();
        st.receiver_gone = true;
        st.waker = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;

    struct CountingWaker(AtomicUsize);
    impl Wake for CountingWaker {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn poll<T>(rx: &mut Receiver<T>, w: &Arc<CountingWaker>) -> Poll<Result<T, Disconnected>> {
        let waker = Waker::from(w.clone());
        Pin::new(rx).poll(&mut Context::from_waker(&waker))
    }

    #[test]
    fn a_send_wakes_the_registered_waker_and_completes_the_future() {
        let (tx, mut rx) = channel();
        let w = Arc::new(CountingWaker(AtomicUsize::new(0)));
        assert!(poll(&mut rx, &w).is_pending());
        tx.send(7).unwrap();
        assert_eq!(w.0.load(Ordering::SeqCst), 1);
        assert_eq!(poll(&mut rx, &w), Poll::Ready(Ok(7)));
    }

    #[test]
    fn dropping_every_sender_disconnects_and_wakes() {
        let (tx, mut rx) = channel::<u8>();
        let copy = tx.clone();
        let w = Arc::new(CountingWaker(AtomicUsize::new(0)));
        assert!(poll(&mut rx, &w).is_pending());
        drop(tx);
        assert_eq!(w.0.load(Ordering::SeqCst), 0, "one copy is still alive");
        assert!(poll(&mut rx, &w).is_pending());
        drop(copy);
        assert_eq!(w.0.load(Ordering::SeqCst), 1);
        assert_eq!(poll(&mut rx, &w), Poll::Ready(Err(Disconnected)));
    }

    #[test]
    fn a_closed_receiver_refuses_sends_and_returns_a_value_that_raced_in() {
        let (tx, mut rx) = channel();
        tx.clone().send(1).unwrap();
        assert_eq!(
            rx.close(),
            Some(1),
            "the value that arrived before close is handed back"
        );
        assert_eq!(
            tx.send(2),
            Err(2),
            "a send after close returns the value to the sender"
        );
        let (tx, rx) = channel();
        drop(rx);
        assert_eq!(tx.send(3), Err(3));
    }

    #[test]
    fn only_the_first_of_several_copies_delivers() {
        let (tx, mut rx) = channel();
        let copy = tx.clone();
        tx.send(1).unwrap();
        assert_eq!(copy.send(2), Err(2));
        let w = Arc::new(CountingWaker(AtomicUsize::new(0)));
        assert_eq!(poll(&mut rx, &w), Poll::Ready(Ok(1)));
    }
}
