// Deno entry: the wasm is imported as a module source (`import source`: Deno's
// module loader reads and compiles it into a WebAssembly.Module), so loading
// the package needs no --allow-read, only --allow-net for the backends, and
// it is instantiated synchronously (no top-level await, `require()` works).
// Requests go over Deno's own `fetch`: it costs less CPU per request than
// Deno's node:http compatibility layer and already sends a request once more
// when a pooled keep-alive connection turns out to be closed (the reason the
// Node entry has node_http.mjs).
import source wasmModule from "./edgelock_wasm_bg.wasm";
import { AsyncLocalStorage } from "node:async_hooks";
import { initSync } from "./edgelock_wasm.js";
import useAsyncLocalStorage from "./api.mjs";

initSync({ module: wasmModule });
// A nested request() of a held name re-enters (see api.mjs).
useAsyncLocalStorage(AsyncLocalStorage);

export * from "./api.mjs";
