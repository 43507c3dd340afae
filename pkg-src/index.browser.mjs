// Browser / Deno / default entry: the wasm is fetched from next to this file
// (bundlers understand `new URL(..., import.meta.url)`) and instantiated with
// top-level await before the API is usable.
import init, { RawLocks } from "./edgelock_wasm.js";

await init({ module_or_path: new URL("./edgelock_wasm_bg.wasm", import.meta.url) });

// A browser opens about 6 HTTP/1.1 connections per origin, and each open
// stream (an etcd watch, a Redis wake-up subscription) holds one. With at
// most 4 open per origin on this page, 2 stay free for attempts, releases and
// renewals; a waiter that gets no stream falls back to its retry timer.
// Pages and web workers only: Deno has no such limit.
// A page or web worker also has no TCP: a client with a redis:// node is
// refused, saying so, before anything is sent.
const inBrowser = typeof globalThis.document === "object" || typeof globalThis.importScripts === "function";
if (inBrowser) {
  RawLocks.limitStreamsPerOrigin(4);
  RawLocks.declareTcp("browser");
}

export * from "./api.mjs";
