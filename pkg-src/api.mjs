// The public JavaScript API of edgelock, over the wasm-bindgen class `RawLocks`
// (src/js/bindings.rs). This layer only checks argument types, turns results
// into `Lock` objects and errors into `LockError`s, and plumbs AbortSignals:
// every protocol decision is made by the Rust core.

import { RawLocks } from "./edgelock_wasm.js";

// The one list of codes lives in the Rust core (error::ERROR_CODES). Read on
// first use: in browsers and workerd the wasm is instantiated after this
// module is evaluated.
let CODES = null;
function isCode(code) {
  try {
    CODES ??= new Set(RawLocks.errorCodes());
  } catch {
    return false; // the wasm is not instantiated: nothing it threw can carry a code
  }
  return CODES.has(code);
}

/** Every failure of this package is a LockError with a stable `code`. */
export class LockError extends Error {
  constructor(code, message, options) {
    super(message, options);
    this.name = "LockError";
    this.code = code;
  }
}

function invalid(message) {
  return new LockError("INVALID_ARGUMENT", message);
}

function toLockError(e, cause) {
  if (e instanceof LockError) return e;
  if (e !== null && typeof e === "object" && isCode(e.code)) {
    return new LockError(e.code, String(e.message), cause === undefined ? undefined : { cause });
  }
  // A trap or a bug, never a backend reply: keep the original as the cause.
  const text = e instanceof Error ? e.message : String(e);
  return new LockError("INTERNAL", `edgelock internal error: ${text}`, { cause: e });
}

function describe(v) {
  return typeof v === "string" ? JSON.stringify(v.slice(0, 40)) : typeof v === "number" ? String(v) : typeof v;
}

function checkName(name) {
  if (typeof name !== "string") throw invalid(`lock name must be a string, got ${describe(name)}`);
  return name;
}

function checkMs(value, what, min) {
  if (value === undefined) return undefined;
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < min) {
    throw invalid(`${what} must be a whole number of milliseconds ≥ ${min}, got ${describe(value)}`);
  }
  return value;
}

function checkSignal(signal) {
  if (signal === undefined) return undefined;
  if (signal === null || typeof signal !== "object" || typeof signal.aborted !== "boolean"
      || typeof signal.addEventListener !== "function") {
    throw invalid("signal must be an AbortSignal");
  }
  return signal;
}

function checkOptions(opts, allowed, what) {
  if (opts === undefined || opts === null) return {};
  if (typeof opts !== "object") throw invalid(`${what} options must be an object, got ${describe(opts)}`);
  for (const key of Object.keys(opts)) {
    if (!allowed.includes(key)) throw invalid(`${what}: unknown option ${JSON.stringify(key)} (known: ${allowed.join(", ")})`);
  }
  return opts;
}

/** Client options to JSON for the Rust side; `fetch` travels separately. */
function optionsJson(options, what) {
  if (options === null || typeof options !== "object") throw invalid(`${what} needs an options object`);
  const { fetch, bindings, ...rest } = options;
  if (fetch !== undefined && typeof fetch !== "function") throw invalid(`${what}: fetch must be a function`);
  if (bindings !== undefined && (bindings === null || typeof bindings !== "object")) {
    throw invalid(`${what}: bindings must be an object of named bindings`);
  }
  let json;
  try {
    json = JSON.stringify(rest, (key, v) => {
      if (typeof v === "number" && !Number.isFinite(v)) throw invalid(`${what}: ${key} must be a finite number`);
      if (typeof v === "function") throw invalid(`${what}: ${key} must not be a function`);
      return v;
    });
  } catch (e) {
    throw e instanceof LockError ? e : invalid(`${what}: options are not serialisable (${e.message})`);
  }
  return { json, fetch, bindings };
}

/**
 * The largest `limit` a semaphore may have (the Rust core's `MAX_PERMITS`:
 * every backend keeps one slot record per permit, and etcd caps a
 * transaction at 128 operations). A larger `limit` is `INVALID_ARGUMENT`.
 */
export const MAX_PERMITS = 100;

const INTERNAL = Symbol("edgelock.internal");
const hasAsyncDispose = typeof Symbol.asyncDispose === "symbol";

/** A held lock. Created only by acquire(), tryAcquire(), request() and resume(). */
class Lock {
  #client;
  #id;
  #name;
  #token;
  #expiresAt;
  #handle;
  #mode;
  #limit;
  #slot;
  #controller = new AbortController();
  #state = "held"; // "held" | "released" | "lost"
  #lostError = null;
  #releasing = null;

  constructor(key, client, info) {
    if (key !== INTERNAL) throw new TypeError("Lock objects are created by acquire(), tryAcquire(), request() or resume()");
    this.#client = client;
    this.#id = info.lockId;
    this.#name = info.name;
    this.#token = BigInt(info.fencingToken);
    this.#expiresAt = info.expiresAt;
    this.#handle = info.handle;
    this.#mode = info.mode;
    this.#limit = info.limit;
    this.#slot = info.slot;
  }

  get name() { return this.#name; }
  /** "exclusive" (the default), "shared" (a reader of a read-write lock) or "permit" (of a semaphore). */
  get mode() { return this.#mode; }
  /** A permit's semaphore limit; null for other modes. */
  get limit() { return this.#limit; }
  /** A permit's slot in 0..limit (distinct among the current holders); null for other modes. */
  get slot() { return this.#slot; }
  /** Strictly increases across successive holders of this name: pass it to the protected resource. */
  get fencingToken() { return this.#token; }
  /** Aborted when the lock is lost (reason: LockError "LOST") or released (reason: LockError "NOT_HELD"). */
  get signal() { return this.#controller.signal; }
  /** Conservative end of validity, in ms since the epoch. */
  get expiresAt() { return this.#expiresAt; }

  async extend(ttlMs) {
    checkMs(ttlMs, "ttlMs", 1);
    if (this.#state === "lost") throw this.#lostError;
    if (this.#state === "released") throw this.#notHeld("was already released");
    this.#expiresAt = await this.#client[INTERNAL].call((raw) => raw.extend(this.#id, ttlMs));
  }

  /** Idempotent: a lock already released or lost resolves at once. */
  release() {
    if (this.#state !== "held") return Promise.resolve();
    if (this.#releasing === null) {
      this.#releasing = this.#client[INTERNAL].call((raw) => raw.release(this.#id)).then(
        () => this.#end("released", this.#notHeld("was released")),
        (e) => {
          // A failed release leaves the lock ours (it expires with its lease/TTL); allow a retry.
          this.#releasing = null;
          throw e;
        },
      );
    }
    return this.#releasing;
  }

  /** The serialisable handle for resume(); it contains the owner credential: treat it as a secret. */
  toJSON() {
    return JSON.parse(this.#handle);
  }

  [INTERNAL](event, value) {
    if (this.#state !== "held") return;
    if (event === "renewed") this.#expiresAt = value;
    else if (event === "lost") {
      this.#lostError = value;
      this.#end("lost", value);
    } else if (event === "closed") this.#end("released", this.#notHeld("was released by close()"));
  }

  #end(state, reason) {
    if (this.#state !== "held") return;
    this.#state = state;
    this.#client[INTERNAL].forget(this.#id);
    this.#controller.abort(reason);
  }

  #notHeld(what) {
    return new LockError("NOT_HELD", `lock ${JSON.stringify(this.#name)} (${this.#client[INTERNAL].backend}) ${what}`);
  }
}
if (hasAsyncDispose) {
  Object.defineProperty(Lock.prototype, Symbol.asyncDispose, {
    value() { return this.release(); }, writable: true, configurable: true,
  });
}

// `mode` and `limit` (the lock kind) go to the Rust side as given: it checks
// and converts them (src/js/args.rs), before any request.
const ACQUIRE_OPTIONS = ["mode", "limit", "waitMs", "signal", "ttlMs"];
const TRY_OPTIONS = ["mode", "limit", "signal", "ttlMs"];
const REQUEST_OPTIONS = ["mode", "limit", "ifAvailable", "waitMs", "signal", "ttlMs"];

/** A status holder or waiter, with its fencing token as a bigint. */
function holderFromRaw(h) {
  return { id: h.id, mode: h.mode, limit: h.limit, slot: h.slot, fencingToken: h.fencingToken === null ? null : BigInt(h.fencingToken) };
}

/** What EtcdLocks, RedisLocks and Redlock share: everything but the constructor. */
class LockClient {
  #raw;
  #backend;
  #locks = new Map();
  #closing = null;

  constructor(key, raw) {
    if (key !== INTERNAL) throw new TypeError("use EtcdLocks, RedisLocks or Redlock");
    this.#raw = raw;
    this.#backend = raw.backend();
    raw.onLockEvent((kind, lockId, expiresAt, error) => {
      const lock = this.#locks.get(lockId);
      if (lock !== undefined) lock[INTERNAL](kind, kind === "lost" ? toLockError(error) : expiresAt);
    });
    // For Lock objects only; symbol-keyed and non-enumerable.
    Object.defineProperty(this, INTERNAL, {
      value: {
        backend: this.#backend,
        call: (start) => this.#call(start),
        forget: (lockId) => this.#locks.delete(lockId),
      },
    });
  }

  async acquire(name, opts) {
    const o = checkOptions(opts, ACQUIRE_OPTIONS, "acquire");
    checkName(name);
    const waitMs = checkMs(o.waitMs, "waitMs", 0);
    const ttlMs = checkMs(o.ttlMs, "ttlMs", 1);
    const signal = checkSignal(o.signal);
    const info = await this.#call((raw) => raw.acquireKind(name, o.mode, o.limit, false, waitMs, ttlMs, signal), signal);
    return this.#adopt(info);
  }

  async tryAcquire(name, opts) {
    const o = checkOptions(opts, TRY_OPTIONS, "tryAcquire");
    checkName(name);
    const ttlMs = checkMs(o.ttlMs, "ttlMs", 1);
    const signal = checkSignal(o.signal);
    const info = await this.#call((raw) => raw.acquireKind(name, o.mode, o.limit, true, undefined, ttlMs, signal), signal);
    return info === null ? null : this.#adopt(info);
  }

  /**
   * Web Locks style: runs `callback` with the lock (or with null when
   * `ifAvailable` found it held) and releases it when the callback settles.
   */
  async request(name, optsOrCallback, maybeCallback) {
    const [opts, callback] = typeof optsOrCallback === "function" ? [undefined, optsOrCallback] : [optsOrCallback, maybeCallback];
    if (typeof callback !== "function") throw invalid("request() needs a callback");
    const { ifAvailable, ...rest } = checkOptions(opts, REQUEST_OPTIONS, "request");
    if (ifAvailable !== undefined && typeof ifAvailable !== "boolean") throw invalid("ifAvailable must be a boolean");
    if (ifAvailable && rest.waitMs !== undefined) throw invalid("ifAvailable and waitMs exclude each other");
    const lock = ifAvailable ? await this.tryAcquire(name, rest) : await this.acquire(name, rest);
    if (lock === null) return await callback(null);
    let result;
    try {
      result = await callback(lock);
    } catch (callbackError) {
      // The callback's error wins; a failed release then only delays expiry.
      await lock.release().catch(() => {});
      throw callbackError;
    }
    await lock.release();
    return result;
  }

  /** Adopts a lock serialised by `lock.toJSON()`; rejects with "LOST" if it is no longer held. */
  async resume(handle) {
    let json;
    if (typeof handle === "string") json = handle;
    else if (handle !== null && typeof handle === "object") json = JSON.stringify(handle);
    else throw invalid("resume() needs the object returned by lock.toJSON()");
    const info = await this.#call((raw) => raw.resume(json));
    return this.#adopt(info);
  }

  /**
   * Who holds `name` and who waits for it, as the backend tells:
   * `{ name, held, holder, fencingToken, remainingMs, waiters, limit, holders, queued }`;
   * `holders` / `queued` list `{ id, mode, limit, slot, fencingToken }`.
   */
  async status(name) {
    checkName(name);
    const s = await this.#call((raw) => raw.inspect(name));
    return {
      name: s.name,
      held: s.held,
      holder: s.holder,
      fencingToken: s.fencingToken === null ? null : BigInt(s.fencingToken),
      remainingMs: s.remainingMs,
      waiters: s.waiters,
      limit: s.limit,
      holders: s.holders.map(holderFromRaw),
      queued: s.queued.map(holderFromRaw),
    };
  }

  /** Releases every held lock and ends the session. Idempotent. */
  close() {
    if (this.#closing === null) {
      this.#closing = this.#call((raw) => raw.close(), undefined, true).finally(() => {
        for (const lock of [...this.#locks.values()]) lock[INTERNAL]("closed");
        this.#locks.clear();
        this.#raw.free();
      });
    }
    return this.#closing;
  }

  async #call(start, signal, closing = false) {
    if (this.#closing !== null && !closing) {
      throw new LockError("CLOSED", `the ${this.#backend} client is closed`);
    }
    try {
      return await start(this.#raw);
    } catch (e) {
      throw toLockError(e, signal?.aborted ? signal.reason : undefined);
    }
  }

  #adopt(info) {
    const lock = new Lock(INTERNAL, this, info);
    this.#locks.set(info.lockId, lock);
    return lock;
  }
}
if (hasAsyncDispose) {
  Object.defineProperty(LockClient.prototype, Symbol.asyncDispose, {
    value() { return this.close(); }, writable: true, configurable: true,
  });
}

function construct(backend, options, what) {
  const { json, fetch, bindings } = optionsJson(options, what);
  try {
    return RawLocks.connect(backend, json, fetch, bindings);
  } catch (e) {
    throw toLockError(e);
  }
}

/** Locks on etcd v3 through its JSON gateway (lease + create-revision recipe). */
export class EtcdLocks extends LockClient {
  constructor(options) {
    super(INTERNAL, construct("etcd", options, "EtcdLocks"));
  }
}

/** Locks on one Redis node through the Upstash REST protocol or Webdis. */
export class RedisLocks extends LockClient {
  constructor(options) {
    super(INTERNAL, construct("redis", options, "RedisLocks"));
  }
}

/** Redlock over N independent Redis nodes (Upstash REST or Webdis each). */
export class Redlock extends LockClient {
  constructor(options) {
    super(INTERNAL, construct("redlock", options, "Redlock"));
  }
}
