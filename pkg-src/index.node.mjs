// Node entry: the wasm is read from disk next to this file and instantiated
// synchronously, so the module has no top-level await and `require("edgelock")`
// works too (Node >= 20.19 / 22.12 load ES modules from require()).
import { readFileSync } from "node:fs";
import { initSync } from "./edgelock_wasm.js";
import { AsyncLocalStorage } from "node:async_hooks";
import useAsyncLocalStorage, { EtcdLocks as AnyEtcdLocks, RedisLocks as AnyRedisLocks, Redlock as AnyRedlock, DurableObjectLocks as AnyDurableObjectLocks, ZooKeeperLocks as AnyZooKeeperLocks } from "./api.mjs";
import { nodeHttpFetch } from "./node_http.mjs";
import { nodeSockets } from "./sockets/node.mjs";

initSync({ module: readFileSync(new URL("./edgelock_wasm_bg.wasm", import.meta.url)) });
// A nested request() of a held name re-enters (see api.mjs).
useAsyncLocalStorage(AsyncLocalStorage);

// Requests go over node:http(s) with keep-alive unless the options name a
// `fetch` (see node_http.mjs for why). Anything that is not an options object
// goes through unchanged, to be refused by the shared argument checks.
function nodeDefaults(options) {
  if (options === null || typeof options !== "object" || options.fetch !== undefined) return options;
  return { ...options, fetch: nodeHttpFetch };
}

// Redis nodes at redis:// and rediss:// URLs are reached over node:net /
// node:tls (sockets/node.mjs) unless the options name an `openSocket`;
// `tls: { ca }` adds certificates to Node's trust store for them.
function socketDefaults(options) {
  options = nodeDefaults(options);
  if (options === null || typeof options !== "object" || options.openSocket !== undefined) return options;
  const { tls, ...rest } = options;
  if (tls !== undefined && (tls === null || typeof tls !== "object")) return options; // refused by the shared checks
  return { ...rest, openSocket: nodeSockets(tls) };
}

// A ZooKeeper ensemble is reached over node:net / node:tls unless the
// options name an `openSocket`; `tls: true` or `tls: { ca }` (TLS, with
// certificates added to Node's trust store) stays in the options.
function zkSocketDefaults(options) {
  if (options === null || typeof options !== "object" || options.openSocket !== undefined) return options;
  const { tls } = options;
  const extra = tls !== null && typeof tls === "object" ? tls : undefined;
  return { ...options, openSocket: nodeSockets(extra) };
}

/** Locks on etcd v3 through its JSON gateway; requests over node:http unless `fetch` is given. */
export class EtcdLocks extends AnyEtcdLocks {
  constructor(options) {
    super(nodeDefaults(options));
  }
}

/** Locks on one Redis node; requests over node:http(s) unless `fetch` is given, redis:// over node:net / node:tls. */
export class RedisLocks extends AnyRedisLocks {
  constructor(options) {
    super(socketDefaults(options));
  }
}

/** Redlock over N Redis nodes; requests over node:http(s) unless `fetch` is given, redis:// over node:net / node:tls. */
export class Redlock extends AnyRedlock {
  constructor(options) {
    super(socketDefaults(options));
  }
}

/** Locks on the Durable Object lock service; requests over node:http(s) unless `fetch` is given. */
export class DurableObjectLocks extends AnyDurableObjectLocks {
  constructor(options) {
    super(nodeDefaults(options));
  }
}

/** Locks on a ZooKeeper ensemble, over node:net / node:tls unless `openSocket` is given. */
export class ZooKeeperLocks extends AnyZooKeeperLocks {
  constructor(options) {
    super(zkSocketDefaults(options));
  }
}

// The rest as api.mjs has it (the classes above shadow its five).
export * from "./api.mjs";
