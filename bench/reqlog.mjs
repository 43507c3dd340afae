// Per-client request logs: when each request a client sent left it, so that
// a scenario can count the requests one client (say, a waiter) sent inside a
// time window (say, from the holder's release call to the waiter's grant).
//
// - edgelock: the client's `fetch` option (its only transport) is a counting
//   wrapper around the package's Node default transport (node:http with
//   keep-alive, pkg/node_http.mjs), or around globalThis.fetch for the row
//   that measures edgelock with Node's fetch;
// - @upstash/redis (under @upstash/lock) calls the global fetch: run.mjs's
//   global wrapper logs into the log of the AsyncLocalStorage context the
//   adapter runs the library's acquire/release in (its retry loop is an
//   async function with setTimeout, which keeps the context);
// - edgelock over redis:// TCP: the client's `openSocket` option wraps the
//   Node entry's sockets and logs each write (one or more pipelined commands);
// - ioredis (redis-semaphore, redlock@5, @sesamecare-oss/redlock): each
//   connection's `sendCommand` is wrapped, so TCP peers' entries are Redis
//   commands (those the client sent), not HTTP requests.
// Entries are { t: performance.now() at the call, stream: subscription/watch stream }.
import { AsyncLocalStorage } from "node:async_hooks";
import { performance } from "node:perf_hooks";
import { nodeHttpFetch } from "../pkg/node_http.mjs";
import { nodeSockets } from "../pkg/sockets/node.mjs";

export const requestContext = new AsyncLocalStorage();
/** HTTP requests sent by every client: the global fetch wrapper (run.mjs) and `countingFetch` add to it. */
export const httpCount = { n: 0 };

const STREAM_URL = /\/subscribe\/|\/v3\/watch/i;
function urlOf(input) {
  if (typeof input === "string") return input;
  if (input instanceof URL) return input.href;
  return input?.url ?? "";
}

/** Appends one entry for a fetch call to `log`. */
export function logFetch(log, input) {
  log.push({ t: performance.now(), stream: STREAM_URL.test(urlOf(input)) });
}

/**
 * A fetch that logs every call into `log`, then sends it with the package's
 * Node default transport (counted in `httpCount`), or with the global fetch
 * when `transport` is "fetch" (counted by run.mjs's global wrapper).
 */
export function countingFetch(log, transport = "node-http") {
  if (transport === "fetch") {
    return (input, init) => {
      logFetch(log, input);
      return globalThis.fetch(input, init);
    };
  }
  return (input, init) => {
    logFetch(log, input);
    httpCount.n += 1;
    return nodeHttpFetch(input, init);
  };
}

/**
 * An `openSocket` for edgelock over redis:// (the Node entry's node:net
 * sockets) that logs every write into `log`: one entry per write, which
 * carries one or more pipelined commands; writes of SUBSCRIBE / UNSUBSCRIBE
 * (a waiter's subscriber connection) are logged as streams.
 */
export function countingSockets(log) {
  const open = nodeSockets();
  return (options) => {
    const socket = open(options);
    const write = socket.write.bind(socket);
    socket.write = (bytes) => {
      const text = new TextDecoder().decode(bytes.subarray(0, 32)).toUpperCase();
      log.push({ t: performance.now(), stream: text.includes("SUBSCRIBE") });
      return write(bytes);
    };
    return socket;
  };
}

/** Logs every command an ioredis connection sends into `log`. */
export function logIoredis(redis, log) {
  const send = redis.sendCommand;
  redis.sendCommand = function (command, stream) {
    log.push({ t: performance.now(), stream: false });
    return send.call(this, command, stream);
  };
  return redis;
}

/** Runs `fn` with fetch calls of the global fetch logged into `log`. */
export function withLog(log, fn) {
  return requestContext.run(log, fn);
}

/** [all, streams] entries of `log` with from <= t <= to. */
export function countBetween(log, from, to) {
  let all = 0;
  let streams = 0;
  for (const e of log) {
    if (e.t >= from && e.t <= to) {
      all += 1;
      if (e.stream) streams += 1;
    }
  }
  return [all, streams];
}
