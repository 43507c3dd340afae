// The Node entry's default transport: the subset of `fetch` that the wasm
// driver uses (src/js/fetch.rs: `status`, `arrayBuffer()`, `body.getReader()`
// with `read()` / `cancel()`, an AbortSignal), sent with Node's own
// `node:http` / `node:https` over keep-alive connections.
//
// Why not the global `fetch`: in Node 20 every `fetch` call builds WHATWG
// Request/Response/stream objects around undici, about 0.6–0.9 ms of CPU per
// request on the 2-core machines the benchmarks run on, against 0.2–0.35 ms
// for `http.request` with a keep-alive agent. A lock operation is one or two
// small requests, so the transport is most of its cost (BENCHMARKS.md has the
// figures with both transports). A `fetch` option passed by the user is
// always used as given.
import http from "node:http";
import https from "node:https";

// Keep-alive pools; Node unrefs idle pooled sockets, so they never keep a
// process alive, and it honours the server's `Keep-Alive: timeout=` hint.
const agents = {
  "http:": new http.Agent({ keepAlive: true }),
  "https:": new https.Agent({ keepAlive: true }),
};

// Errors that, on a reused keep-alive socket and before any response byte,
// mean the server had closed the idle connection: the request never reached
// it, so it is sent once more on a new connection (what Node's docs advise
// with `request.reusedSocket`; the native Rust driver does the same).
const STALE_SOCKET = new Set(["ECONNRESET", "EPIPE", "ECONNABORTED"]);

function abortError(signal) {
  const reason = signal?.reason;
  if (reason instanceof Error) return reason;
  const e = new Error("the request was aborted");
  e.name = "AbortError";
  return e;
}

function transportError(message, cause) {
  // Shaped like Node's fetch failures ("fetch failed" + `cause.code`), which
  // the wasm driver's error_text() reads.
  const e = new TypeError(message, { cause });
  return e;
}

/** A reader over a Node response stream, shaped like ReadableStreamDefaultReader. */
function streamReader(res) {
  const queue = [];
  let waiting = null;
  let ended = false;
  let failure = null;
  const settle = () => {
    if (waiting === null) return;
    const w = waiting;
    if (queue.length > 0) {
      waiting = null;
      w.resolve({ done: false, value: queue.shift() });
    } else if (failure !== null) {
      waiting = null;
      w.reject(failure);
    } else if (ended) {
      waiting = null;
      w.resolve({ done: true, value: undefined });
    }
  };
  res.on("data", (chunk) => {
    queue.push(new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.byteLength));
    // Back-pressure: stop reading from the socket until the queue is drained.
    res.pause();
    settle();
  });
  res.on("end", () => { ended = true; settle(); });
  res.on("error", (e) => { failure = e; settle(); });
  res.on("close", () => {
    if (!ended && failure === null) failure = transportError("the response stream was closed before its end");
    settle();
  });
  return {
    read() {
      if (waiting !== null) return Promise.reject(new TypeError("a read() is already pending"));
      return new Promise((resolve, reject) => {
        waiting = { resolve, reject };
        if (queue.length === 0) res.resume();
        settle();
      });
    },
    cancel() {
      ended = true;
      res.destroy();
      settle();
      return Promise.resolve();
    },
    releaseLock() {},
  };
}

/** A Response-like object over a Node IncomingMessage. */
function response(res) {
  let used = false;
  const take = () => {
    if (used) throw new TypeError("the response body was already used");
    used = true;
  };
  return {
    status: res.statusCode,
    ok: res.statusCode >= 200 && res.statusCode < 300,
    headers: res.headers,
    body: {
      getReader() {
        take();
        return streamReader(res);
      },
    },
    arrayBuffer() {
      take();
      return new Promise((resolve, reject) => {
        const chunks = [];
        let ended = false;
        res.on("data", (c) => chunks.push(c));
        res.on("end", () => {
          ended = true;
          const all = chunks.length === 1 ? chunks[0] : Buffer.concat(chunks);
          resolve(all.buffer.slice(all.byteOffset, all.byteOffset + all.byteLength));
        });
        res.on("error", (e) => reject(transportError("the response was cut before its end", e)));
        res.on("close", () => {
          if (!ended) reject(transportError("the response was cut before its end"));
        });
      });
    },
    async text() {
      return Buffer.from(await this.arrayBuffer()).toString("utf8");
    },
    async json() {
      return JSON.parse(await this.text());
    },
  };
}

function sendOnce(url, init, signal, agent) {
  return new Promise((resolve, reject) => {
    const headers = { ...(init.headers ?? {}) };
    const body = init.body === undefined || init.body === null ? null
      : typeof init.body === "string" ? Buffer.from(init.body) : init.body;
    if (body !== null) headers["content-length"] = String(body.byteLength);
    let settled = false;
    const req = (url.protocol === "https:" ? https : http).request(url, {
      method: init.method ?? "GET",
      headers,
      agent,
    });
    const onAbort = () => req.destroy(abortError(signal));
    signal?.addEventListener("abort", onAbort, { once: true });
    req.on("response", (res) => {
      settled = true;
      res.on("close", () => signal?.removeEventListener("abort", onAbort));
      resolve(response(res));
    });
    req.on("error", (e) => {
      signal?.removeEventListener("abort", onAbort);
      if (settled) return;
      settled = true;
      if (signal?.aborted) return reject(abortError(signal));
      if (req.reusedSocket && STALE_SOCKET.has(e.code)) return reject({ stale: true, error: e });
      reject(transportError("fetch failed", e));
    });
    req.end(body ?? undefined);
  });
}

/**
 * `fetch(url, init)` for the lock client, over node:http(s) with keep-alive.
 * Supports what the client sends: method, headers (a plain object), a
 * Uint8Array or string body, and `signal`.
 */
export async function nodeHttpFetch(input, init = {}) {
  const url = new URL(typeof input === "string" ? input : String(input?.url ?? input));
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    throw transportError(`unsupported URL scheme ${url.protocol}`);
  }
  const signal = init.signal ?? undefined;
  if (signal?.aborted) throw abortError(signal);
  try {
    return await sendOnce(url, init, signal, agents[url.protocol]);
  } catch (e) {
    if (e?.stale !== true) throw e;
    // A new connection of its own (`agent: false`): the pool may hold more stale ones.
    return await sendOnce(url, init, signal, false).catch((again) => {
      throw again?.stale === true ? transportError("fetch failed", again.error) : again;
    });
  }
}
