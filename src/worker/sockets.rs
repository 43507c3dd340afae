//! The Worker's socket factory: `redis://` and `rediss://` nodes are reached
//! with `connect()` of `cloudflare:sockets`, TLS through its
//! `secureTransport: "on"`.
//!
//! The factory is the npm package's own (`pkg-src/sockets/workerd.mjs`,
//! imported as a wasm-bindgen module: one implementation of the socket
//! contract of `src/js/sockets.rs` for both), wrapped in a counter of the
//! connections it holds open. The counter is what the Worker reports (and
//! its tests check): an invocation may hold only
//! [`OPEN_CONNECTIONS`](super::config::OPEN_CONNECTIONS) open at once.
//!
//! Why a wasm-bindgen module import rather than workers-rs' `Socket`: the
//! driver already speaks the JavaScript factory contract (callbacks, bytes
//! as `Uint8Array`), so the same ~40 lines of JavaScript serve the npm
//! package and the Worker, and worker-build's esbuild keeps the
//! `cloudflare:sockets` import external as it does `cloudflare:workers`.

use js_sys::{Function, Reflect};
use wasm_bindgen::prelude::wasm_bindgen;
use wasm_bindgen::JsValue;

#[wasm_bindgen(module = "/pkg-src/sockets/workerd.mjs")]
extern "C" {
    /// `openSocket({ host, port, tls, serverName })` over `connect()`.
    #[wasm_bindgen(js_name = workerdSockets)]
    fn workerd_sockets() -> Function;
}

#[wasm_bindgen(inline_js = r#"
// Wraps a socket factory so that `factory.stats` counts its connections:
// `open` now, `peak` the most open at once, `opened` in all. A connection
// counts from the factory call until close(), onend or onerror, whichever
// comes first (workerd counts it until it is closed).
export function countedSockets(open) {
  const stats = { open: 0, peak: 0, opened: 0 };
  const factory = (options) => {
    const inner = open(options);
    let live = true;
    const done = () => {
      if (live) {
        live = false;
        stats.open -= 1;
      }
    };
    stats.open += 1;
    stats.opened += 1;
    stats.peak = Math.max(stats.peak, stats.open);
    const outer = {
      onopen() {},
      ondata() {},
      onend() {},
      onerror() {},
      write: (bytes) => inner.write(bytes),
      close() {
        done();
        inner.close();
      },
    };
    inner.onopen = () => outer.onopen();
    inner.ondata = (bytes) => outer.ondata(bytes);
    inner.onend = () => {
      done();
      outer.onend();
    };
    inner.onerror = (message) => {
      done();
      outer.onerror(message);
    };
    return outer;
  };
  factory.stats = stats;
  return factory;
}
"#)]
extern "C" {
    #[wasm_bindgen(js_name = countedSockets)]
    fn counted_sockets(open: Function) -> Function;
}

/// How many connections a factory has held open.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SocketStats {
    /// Open now.
    pub open: u32,
    /// The most open at once.
    pub peak: u32,
    /// Opened in all.
    pub opened: u32,
}

/// A socket factory over `connect()` for one invocation's client, counted.
pub fn counted_factory() -> Function {
    counted_sockets(workerd_sockets())
}

/// The counts of a factory [`counted_factory`] made.
pub fn stats(factory: &Function) -> SocketStats {
    let stats = Reflect::get(factory, &JsValue::from_str("stats")).unwrap_or(JsValue::UNDEFINED);
    let field = |name: &str| {
        Reflect::get(&stats, &JsValue::from_str(name))
            .ok()
            .and_then(|v| v.as_f64())
            .map_or(0, |n| n as u32)
    };
    SocketStats {
        open: field("open"),
        peak: field("peak"),
        opened: field("opened"),
    }
}
