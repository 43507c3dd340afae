//! Panics inside fuzz sessions are caught (`catch_unwind`) and recorded with
//! their message and location instead of being printed.

use std::cell::{Cell, RefCell};

thread_local! {
    static IN_CASE: Cell<bool> = const { Cell::new(false) };
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// While alive, panics inside fuzz sessions are recorded (message and
/// location) instead of printed; other panics go to the previous hook.
pub struct PanicCapture;

impl PanicCapture {
    pub fn install() -> PanicCapture {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if IN_CASE.with(Cell::get) {
                let msg = info
                    .payload()
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| info.payload().downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                let at = info
                    .location()
                    .map(|l| format!("{}:{}", l.file(), l.line()))
                    .unwrap_or_default();
                LAST_PANIC.with(|p| *p.borrow_mut() = Some(format!("{msg} at {at}")));
            } else {
                prev(info);
            }
        }));
        PanicCapture
    }
}

impl Drop for PanicCapture {
    fn drop(&mut self) {
        // Back to the default hook (nothing else in this binary sets one);
        // the hook cannot be changed while unwinding.
        if !std::thread::panicking() {
            let _ = std::panic::take_hook();
        }
    }
}

/// Marks the current thread as running a fuzz session (or not).
pub fn in_case(on: bool) {
    IN_CASE.with(|c| c.set(on));
}

/// The message and location of the last panic caught on this thread.
pub fn take_last_panic() -> Option<String> {
    LAST_PANIC.with(|p| p.borrow_mut().take())
}
