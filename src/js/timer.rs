//! `setTimeout` / `clearTimeout` looked up on `globalThis`: the same in Node,
//! browsers, workers and workerd (Node returns an object handle, browsers a
//! number; both are passed back to `clearTimeout` as they are).

use js_sys::{Function, Reflect};
use wasm_bindgen::{JsCast, JsValue};

/// Longest delay `setTimeout` accepts; larger values fire immediately in most runtimes.
const MAX_DELAY_MS: u64 = 0x7fff_ffff;

fn global_fn(name: &str) -> Option<Function> {
    let f = Reflect::get(&js_sys::global(), &JsValue::from_str(name)).ok()?;
    if f.is_function() {
        Some(f.unchecked_into())
    } else {
        None
    }
}

/// Schedules `callback` after `delay_ms`; returns the runtime's handle.
pub(crate) fn set_timeout(callback: &Function, delay_ms: u64) -> Option<JsValue> {
    let set = global_fn("setTimeout")?;
    let delay = JsValue::from_f64(delay_ms.min(MAX_DELAY_MS) as f64);
    set.call2(&js_sys::global(), callback, &delay).ok()
}

pub(crate) fn clear_timeout(handle: &JsValue) {
    if let Some(clear) = global_fn("clearTimeout") {
        let _ = clear.call1(&js_sys::global(), handle);
    }
}
