//! Time for the driver: a monotonic millisecond clock and its mapping to the
//! wall clock (for `Lock.expiresAt`).

use std::cell::Cell;

use js_sys::{Function, Reflect};
use wasm_bindgen::{JsCast, JsValue};

use crate::core::Millis;

/// `performance.now()` where the runtime has it (browsers, Node, workerd), else
/// `Date.now()`: both exist without any Node-only module.
fn raw_now() -> f64 {
    thread_local! {
        static PERF_NOW: Option<(JsValue, Function)> = find_performance_now();
    }
    PERF_NOW.with(|p| match p {
        Some((perf, now)) => now
            .call0(perf)
            .ok()
            .and_then(|v| v.as_f64())
            .filter(|v| v.is_finite())
            .unwrap_or_else(js_sys::Date::now),
        None => js_sys::Date::now(),
    })
}

fn find_performance_now() -> Option<(JsValue, Function)> {
    let perf = Reflect::get(&js_sys::global(), &JsValue::from_str("performance")).ok()?;
    if !perf.is_object() {
        return None;
    }
    let now = Reflect::get(&perf, &JsValue::from_str("now")).ok()?;
    if !now.is_function() {
        return None;
    }
    Some((perf, now.unchecked_into()))
}

/// Wall-clock milliseconds at `raw_now() == 0`, taken once per instance so that
/// every `expiresAt` of the process uses the same mapping (a later wall-clock
/// step does not move locks' expiry estimates).
fn epoch_offset() -> f64 {
    thread_local! {
        static OFFSET: f64 = js_sys::Date::now() - raw_now();
    }
    OFFSET.with(|o| *o)
}

/// The machine's clock: whole milliseconds that never go backwards.
#[derive(Debug, Default)]
pub struct Clock {
    last: Cell<Millis>,
}

impl Clock {
    /// A clock starting now.
    pub fn new() -> Self {
        // Touch the offset now so that it is taken before the first lock exists.
        let _ = epoch_offset();
        Clock { last: Cell::new(0) }
    }

    /// Milliseconds since the clock started (never backwards).
    pub fn now(&self) -> Millis {
        let raw = raw_now();
        let ms = if raw.is_finite() && raw > 0.0 {
            raw.floor() as Millis
        } else {
            0
        };
        let now = ms.max(self.last.get());
        self.last.set(now);
        now
    }
}

/// Milliseconds since the Unix epoch for a time on the driver clock.
pub fn to_epoch_ms(at: Millis) -> f64 {
    epoch_offset() + at as f64
}
