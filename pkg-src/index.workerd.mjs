// Cloudflare Workers / workerd entry: Workers cannot fetch or compile wasm
// from bytes at run time; the module is imported (wrangler bundles `.wasm`
// imports as compiled WebAssembly.Module objects) and instantiated synchronously.
import wasmModule from "./edgelock_wasm_bg.wasm";
import { initSync } from "./edgelock_wasm.js";
import useAsyncLocalStorage, { RedisLocks as AnyRedisLocks, Redlock as AnyRedlock, ZooKeeperLocks as AnyZooKeeperLocks } from "./api.mjs";
import { workerdSockets } from "./sockets/workerd.mjs";

initSync({ module: wasmModule });
// With the `nodejs_compat` flag a Worker has AsyncLocalStorage: a nested
// request() of a held name then re-enters (see api.mjs). Without it, nothing.
try {
  useAsyncLocalStorage(globalThis.process?.getBuiltinModule?.("node:async_hooks")?.AsyncLocalStorage);
} catch {
  // no node:async_hooks in this Worker
}

// A Workers invocation may hold only 6 connections open at once (more wait
// for one to close). A waiting acquire holds its push wake-up subscriptions
// open (one streaming request per subscribed node) and sends one attempt
// round to every node, so the default cap on subscriptions leaves room for
// that round: max(0, 6 − nodes). The nodes it does not cover are left to the
// retry timer. An explicit `maxSubscriptions` is kept as given.
const OPEN_CONNECTIONS = 6;

// Redis nodes at redis:// and rediss:// URLs are reached with `connect()`
// from cloudflare:sockets (sockets/workerd.mjs) unless the options name an
// `openSocket`: one connection per node per client, counted in the 6.
function workersDefaults(options, nodes) {
  if (options === null || typeof options !== "object") return options;
  const defaults = {};
  if (options.maxSubscriptions === undefined) defaults.maxSubscriptions = Math.max(0, OPEN_CONNECTIONS - nodes);
  if (options.openSocket === undefined) defaults.openSocket = workerdSockets();
  return { ...options, ...defaults };
}

/** Locks on one Redis node; waiters hold at most 5 wake-up subscriptions by default. */
export class RedisLocks extends AnyRedisLocks {
  constructor(options) {
    super(workersDefaults(options, 1));
  }
}

/** Redlock; waiters hold at most max(0, 6 − nodes) wake-up subscriptions by default. */
export class Redlock extends AnyRedlock {
  constructor(options) {
    super(workersDefaults(options, Array.isArray(options?.nodes) ? options.nodes.length : 0));
  }
}

/**
 * Locks on a ZooKeeper ensemble over `connect()`: one connection per client
 * (its session), counted in the invocation's 6. The session ends with the
 * client (close() it), so a lock does not outlive the invocation.
 */
export class ZooKeeperLocks extends AnyZooKeeperLocks {
  constructor(options) {
    const defaults = options !== null && typeof options === "object" && options.openSocket === undefined
      ? { ...options, openSocket: workerdSockets() }
      : options;
    super(defaults);
  }
}

// The rest as api.mjs has it (the classes above shadow its three).
export * from "./api.mjs";
