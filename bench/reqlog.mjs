// Per-client request logs: when each request a client sent left it, so that
// a scenario can count the requests one client (say, a waiter) sent inside a
// time window (say, from the holder's release call to the waiter's grant).
//
// - edgelock: the client's `fetch` option (its only transport) is a counting
//   wrapper around globalThis.fetch;
// - @upstash/redis (under @upstash/lock) calls the global fetch: run.mjs's
//   global wrapper logs into the log of the AsyncLocalStorage context the
//   adapter runs the library's acquire/release in (its retry loop is an
//   async function with setTimeout, which keeps the context);
// - ioredis (redis-semaphore, redlock@5): each connection's `sendCommand` is
//   wrapped, so TCP peers' entries are Redis commands, not HTTP requests.
// Entries are { t: performance.now() at the call, stream: subscription/watch stream }.
import { AsyncLocalStorage } from "node:async_hooks";
import { performance } from "node:perf_hooks";

export const requestContext = new AsyncLocalStorage();

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

/** A fetch that logs every call into `log`, then calls the global fetch (still counted globally). */
export function countingFetch(log) {
  return (input, init) => {
    logFetch(log, input);
    return globalThis.fetch(input, init);
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
