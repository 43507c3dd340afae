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
import useAsyncLocalStorage, { RedisLocks as AnyRedisLocks, Redlock as AnyRedlock, ZooKeeperLocks as AnyZooKeeperLocks } from "./api.mjs";
import { denoSockets } from "./sockets/deno.mjs";

initSync({ module: wasmModule });
// A nested request() of a held name re-enters (see api.mjs).
useAsyncLocalStorage(AsyncLocalStorage);

// Redis nodes at redis:// and rediss:// URLs are reached with Deno.connect /
// Deno.startTls (sockets/deno.mjs) unless the options name an `openSocket`;
// `tls: { ca }` adds certificates to Deno's trust store for them.
function socketDefaults(options) {
  if (options === null || typeof options !== "object" || options.openSocket !== undefined) return options;
  const { tls, ...rest } = options;
  if (tls !== undefined && (tls === null || typeof tls !== "object")) return options; // refused by the shared checks
  return { ...rest, openSocket: denoSockets(tls) };
}

/** Locks on one Redis node; redis:// over Deno.connect / Deno.startTls. */
export class RedisLocks extends AnyRedisLocks {
  constructor(options) {
    super(socketDefaults(options));
  }
}

/** Redlock over N Redis nodes; redis:// nodes over Deno.connect / Deno.startTls. */
export class Redlock extends AnyRedlock {
  constructor(options) {
    super(socketDefaults(options));
  }
}

// A ZooKeeper ensemble is reached with Deno.connect / Deno.startTls unless
// the options name an `openSocket`; `tls: true` or `tls: { ca }` stays in
// the options.
function zkSocketDefaults(options) {
  if (options === null || typeof options !== "object" || options.openSocket !== undefined) return options;
  const { tls } = options;
  const extra = tls !== null && typeof tls === "object" ? tls : undefined;
  return { ...options, openSocket: denoSockets(extra) };
}

/** Locks on a ZooKeeper ensemble, over Deno.connect / Deno.startTls. */
export class ZooKeeperLocks extends AnyZooKeeperLocks {
  constructor(options) {
    super(zkSocketDefaults(options));
  }
}

// The rest as api.mjs has it (the classes above shadow its three).
export * from "./api.mjs";
