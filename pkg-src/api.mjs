// The public JavaScript API of edgelock, over the wasm-bindgen class `RawLocks`
// (src/js/bindings.rs). This layer only checks argument types, turns results
// into `Lock` objects and errors into `LockError`s, and plumbs AbortSignals:
// every protocol decision is made by the Rust core.
//
// Each entry (index.<runtime>.mjs) instantiates the wasm, then re-exports this
// module (`export * from "./api.mjs"`) and adds only what differs on its
// runtime. Every named export here is the package's API; the entries' hook
// is the default export, which `export *` leaves out.

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

/** Client options to JSON for the Rust side; `fetch` and `openSocket` travel separately. */
function optionsJson(options, what) {
  if (options === null || typeof options !== "object") throw invalid(`${what} needs an options object`);
  const { fetch, bindings, openSocket, ...rest } = options;
  if (fetch !== undefined && typeof fetch !== "function") throw invalid(`${what}: fetch must be a function`);
  if (openSocket !== undefined && typeof openSocket !== "function") throw invalid(`${what}: openSocket must be a function`);
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
  return { json, fetch, bindings, openSocket };
}

/**
 * The largest `limit` a semaphore may have (the Rust core's `MAX_PERMITS`:
 * every backend keeps one slot record per permit, and etcd caps a
 * transaction at 128 operations). A larger `limit` is `INVALID_ARGUMENT`.
 */
export const MAX_PERMITS = 100;

/** The largest campaign value, in bytes of UTF-8 (the Rust core's `MAX_CAMPAIGN_VALUE`). */
export const MAX_CAMPAIGN_VALUE = 4096;

/** The most names one acquireAll() may take (the Rust core's `MAX_ACQUIRE_ALL`). */
export const MAX_ACQUIRE_ALL = 16;

const INTERNAL = Symbol("edgelock.internal");

// Re-entry within one async call chain: where the runtime has
// AsyncLocalStorage (Node, Deno, Bun; workerd with nodejs_compat), the entry
// hands the class over and `request()` remembers, for the callback's call
// chain, which exclusive locks it holds. A nested `request()` of such a name
// re-enters through the lock's handle (the backend counts one more hold)
// instead of waiting forever on itself. Never "the current thread".
let heldInChain = null;

/** Called by the entries that have AsyncLocalStorage; the first call wins. Not re-exported (the default export). */
export default function useAsyncLocalStorage(AsyncLocalStorage) {
  if (heldInChain === null && typeof AsyncLocalStorage === "function") heldInChain = new AsyncLocalStorage();
}
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
  // Made on first use of `signal`: most locks are never asked for it, and an
  // AbortController, its abort event and the reason's LockError (a stack
  // trace) cost a tenth of an uncontended acquire+release.
  #controller = null;
  #endReason = null; // once ended: () => the signal's abort reason
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
  get signal() {
    if (this.#controller === null) {
      this.#controller = new AbortController();
      if (this.#endReason !== null) this.#controller.abort(this.#endReason());
    }
    return this.#controller.signal;
  }
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
        () => this.#end("released", () => this.#notHeld("was released")),
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
    if (event === "id") return this.#id;
    if (this.#state !== "held") return;
    if (event === "renewed") this.#expiresAt = value;
    else if (event === "lost") {
      this.#lostError = value;
      this.#end("lost", () => value);
    } else if (event === "closed") this.#end("released", () => this.#notHeld("was released by close()"));
  }

  /** Ends the hold; `reason()` makes the signal's abort reason (now if someone has the signal). */
  #end(state, reason) {
    if (this.#state !== "held") return;
    this.#state = state;
    this.#client[INTERNAL].forget(this.#id);
    let made = null;
    this.#endReason = () => (made ??= reason());
    this.#controller?.abort(this.#endReason());
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

/**
 * The leadership of an election, from campaign() (or resume() of its handle):
 * a lock of mode "leader" whose hold carries a value. It renews, is lost and
 * resumes like a lock; resign() gives it up.
 */
class Leadership {
  #lock;
  #value;
  #client;

  constructor(key, client, lock, value) {
    if (key !== INTERNAL) throw new TypeError("Leadership objects are created by campaign() or resume()");
    this.#client = client;
    this.#lock = lock;
    this.#value = value;
  }

  get name() { return this.#lock.name; }
  /** What this leader announces (the campaign's value, or the last proclaim's). */
  get value() { return this.#value; }
  /** The leadership's fencing token (a bigint): strictly increases across leaders. */
  get fencingToken() { return this.#lock.fencingToken; }
  /** Aborted when the leadership is lost (LockError "LOST") or resigned (LockError "NOT_HELD"). */
  get signal() { return this.#lock.signal; }
  /** Conservative end of validity, in ms since the epoch. */
  get expiresAt() { return this.#lock.expiresAt; }
  get mode() { return "leader"; }

  /** Announces `value` instead, checked on the backend: rejects with NOT_HELD/LOST once no longer leader. */
  async proclaim(value) {
    if (typeof value !== "string") throw invalid(`a campaign value must be a string, got ${describe(value)}`);
    if (this.#lock.signal.aborted) {
      const reason = this.#lock.signal.reason;
      if (reason instanceof LockError && reason.code === "LOST") throw reason;
      throw invalid(`proclaim after resign: the leadership of ${JSON.stringify(this.name)} was given up`);
    }
    await this.#client[INTERNAL].call((raw) => raw.proclaim(this.#lock[INTERNAL]("id"), value));
    this.#value = value;
  }

  /** Gives the leadership up (idempotent); the next candidate in line takes over. */
  resign() {
    return this.#lock.release();
  }

  async extend(ttlMs) {
    return this.#lock.extend(ttlMs);
  }

  /** The serialisable handle for resume(), with the value; it contains the owner credential: treat it as a secret. */
  toJSON() {
    return { ...this.#lock.toJSON(), value: this.#value };
  }
}
if (hasAsyncDispose) {
  Object.defineProperty(Leadership.prototype, Symbol.asyncDispose, {
    value() { return this.resign(); }, writable: true, configurable: true,
  });
}

/** A leader as leader() and observe() report it: `{ value, fencingToken }` (bigint), or null. */
function leaderFromRaw(l) {
  return l === null ? null : { value: l.value, fencingToken: BigInt(l.fencingToken) };
}

function sameLeader(a, b) {
  return a === b || (a !== null && b !== null && a.value === b.value && a.fencingToken === b.fencingToken);
}

// observe(): which errors are retried, how often in a row, and the first
// backoff (doubled per failure: 50, 100, 200, 400, 800 ms, about 1.5 s in all).
const OBSERVE_TRANSIENT = new Set(["TRANSPORT", "BACKEND", "NO_QUORUM"]);
const OBSERVE_RETRIES = 5;
const OBSERVE_BACKOFF_MS = 50;

/** Resolves after `ms`, or at once when `signal` aborts. */
function abortableSleep(ms, signal) {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener("abort", done);
  });
}

// `mode` and `limit` (the lock kind) go to the Rust side as given: it checks
// and converts them (src/js/args.rs), before any request.
const ACQUIRE_OPTIONS = ["mode", "limit", "waitMs", "signal", "ttlMs"];
const TRY_OPTIONS = ["mode", "limit", "signal", "ttlMs"];
const REQUEST_OPTIONS = ["mode", "limit", "ifAvailable", "waitMs", "signal", "ttlMs"];
const CAMPAIGN_OPTIONS = ["waitMs", "signal", "ttlMs"];
const OBSERVE_OPTIONS = ["signal"];
const ACQUIRE_ALL_OPTIONS = ["waitMs", "signal", "ttlMs", "ifAvailable"];

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
    if (key !== INTERNAL) throw new TypeError("use EtcdLocks, RedisLocks, Redlock, DurableObjectLocks, D1Locks or ZooKeeperLocks");
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
    const exclusive = (rest.mode === undefined || rest.mode === "exclusive") && rest.limit === undefined;
    const outer = exclusive ? heldInChain?.getStore()?.get(this)?.get(name) : undefined;
    const lock = outer !== undefined && !outer.signal.aborted
      ? await this.reenter(outer)
      : ifAvailable ? await this.tryAcquire(name, rest) : await this.acquire(name, rest);
    if (lock === null) return await callback(null);
    let result;
    try {
      result = await this.#inChain(exclusive ? lock : null, () => callback(lock));
    } catch (callbackError) {
      // The callback's error wins; a failed release then only delays expiry.
      await lock.release().catch(() => {});
      throw callbackError;
    }
    await lock.release();
    return result;
  }

  /**
   * Re-enters an exclusive lock by proof of ownership: `held` is a Lock or
   * the handle its `toJSON()` returned (of this client or of another
   * process). The backend counts one more hold; the new Lock has the same
   * fencing token, and the lock is freed only when every hold is released.
   * Rejects with "LOST" if the lock is no longer held. On Redlock every
   * node counts the holds it saw and a quorum decides.
   */
  async reenter(held) {
    let json;
    if (typeof held === "string") json = held;
    else if (held !== null && typeof held === "object") json = JSON.stringify(typeof held.toJSON === "function" ? held.toJSON() : held);
    else throw invalid("reenter() needs a held Lock or the object returned by lock.toJSON()");
    const info = await this.#call((raw) => raw.reenter(json));
    return this.#adopt(info);
  }

  /** Runs `fn` with `lock` (if any) remembered as held by this client in the calling chain. */
  #inChain(lock, fn) {
    if (heldInChain === null || lock === null) return fn();
    const outer = heldInChain.getStore();
    const store = new Map(outer);
    store.set(this, new Map(outer?.get(this)).set(lock.name, lock));
    return heldInChain.run(store, fn);
  }

  /** Adopts a lock serialised by `lock.toJSON()`; rejects with "LOST" if it is no longer held. */
  async resume(handle) {
    let json;
    if (typeof handle === "string") json = handle;
    else if (handle !== null && typeof handle === "object") json = JSON.stringify(handle);
    else throw invalid("resume() needs the object returned by lock.toJSON()");
    const info = await this.#call((raw) => raw.resume(json));
    const lock = this.#adopt(info);
    if (info.mode !== "leader") return lock;
    // A leadership's handle carries its value (toJSON()); ask the backend if it does not.
    let value = typeof handle === "object" ? handle.value : JSON.parse(json).value;
    if (typeof value !== "string") value = (await this.leader(lock.name))?.value ?? "";
    return new Leadership(INTERNAL, this, lock, value);
  }

  /**
   * Waits until this client leads the election `name`, announcing `value`
   * (a string of at most MAX_CAMPAIGN_VALUE bytes). Resolves to a
   * Leadership; `waitMs` bounds the wait (TIMEOUT), `signal` aborts it.
   */
  async campaign(name, value, opts) {
    const o = checkOptions(opts, CAMPAIGN_OPTIONS, "campaign");
    checkName(name);
    if (typeof value !== "string") throw invalid(`a campaign value must be a string, got ${describe(value)}`);
    const waitMs = checkMs(o.waitMs, "waitMs", 0);
    const ttlMs = checkMs(o.ttlMs, "ttlMs", 1);
    const signal = checkSignal(o.signal);
    const info = await this.#call((raw) => raw.campaign(name, value, false, waitMs, ttlMs, signal), signal);
    return new Leadership(INTERNAL, this, this.#adopt(info), value);
  }

  /** The current leader of `name`: `{ value, fencingToken }` (bigint), or null when nobody leads. */
  async leader(name) {
    checkName(name);
    return leaderFromRaw(await this.#call((raw) => raw.leader(name)));
  }

  /**
   * The leadership of `name` as it changes: an async iterable yielding the
   * current leader (`{ value, fencingToken }` or null) first, then every
   * change, pushed by the backend (etcd's watch, Redis's wake-up channel).
   * It ends when `signal` aborts or the loop is left.
   */
  observe(name, opts) {
    const o = checkOptions(opts, OBSERVE_OPTIONS, "observe");
    checkName(name);
    const signal = checkSignal(o.signal);
    const client = this;
    return {
      async *[Symbol.asyncIterator]() {
        // Our own controller, so that leaving the loop cancels a pending wait.
        const stop = new AbortController();
        const onAbort = () => stop.abort(signal.reason);
        signal?.addEventListener("abort", onAbort);
        // A transient failure (no answer, a 5xx, no quorum) is retried with
        // backoff, OBSERVE_RETRIES times in a row at most, so that one dropped
        // connection does not end a long-lived observer; the error is thrown
        // once the backend stays unreachable.
        let failures = 0;
        const attempt = async (read) => {
          for (;;) {
            try {
              const v = await read();
              failures = 0;
              return { v };
            } catch (e) {
              if (stop.signal.aborted) return null;
              if (!OBSERVE_TRANSIENT.has(e?.code) || failures >= OBSERVE_RETRIES) throw e;
              await abortableSleep(OBSERVE_BACKOFF_MS * 2 ** failures, stop.signal);
              failures += 1;
              if (stop.signal.aborted) return null;
            }
          }
        };
        try {
          if (stop.signal.aborted || signal?.aborted) return;
          const first = await attempt(() => client.leader(name));
          if (first === null) return;
          let known = first.v;
          yield known;
          for (;;) {
            const got = await attempt(async () => leaderFromRaw(await client.#call((raw) => raw.observeChange(
              name, known?.value, known?.fencingToken.toString(), undefined, stop.signal))));
            if (got === null) return;
            const next = got.v;
            if (sameLeader(next, known)) continue;
            known = next;
            yield known;
          }
        } finally {
          signal?.removeEventListener("abort", onAbort);
          stop.abort();
        }
      },
    };
  }

  /**
   * Holds every name in `names` or none: `{ locks, signal, release() }`,
   * `locks` one Lock per name in the order given, each with its own fencing
   * token. Names are taken in a canonical order, so clients asking for
   * overlapping sets in any order cannot deadlock; on any failure the names
   * already taken are released before this rejects. `ifAvailable: true`
   * resolves to null instead of waiting when one is held.
   */
  async acquireAll(names, opts) {
    const o = checkOptions(opts, ACQUIRE_ALL_OPTIONS, "acquireAll");
    if (!Array.isArray(names)) throw invalid(`acquireAll needs an array of lock names, got ${describe(names)}`);
    names.forEach(checkName);
    if (o.ifAvailable !== undefined && typeof o.ifAvailable !== "boolean") throw invalid("ifAvailable must be a boolean");
    if (o.ifAvailable && o.waitMs !== undefined) throw invalid("ifAvailable and waitMs exclude each other");
    const waitMs = checkMs(o.waitMs, "waitMs", 0);
    const ttlMs = checkMs(o.ttlMs, "ttlMs", 1);
    const signal = checkSignal(o.signal);
    const infos = await this.#call((raw) => raw.acquireAll(names, o.ifAvailable === true, waitMs, ttlMs, signal), signal);
    if (infos === null) return null;
    return lockSet(infos.map((info) => this.#adopt(info)));
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

/** The result of acquireAll(): the locks, one signal for the set, and one release. */
function lockSet(locks) {
  const controller = new AbortController();
  for (const lock of locks) {
    if (lock.signal.aborted) controller.abort(lock.signal.reason);
    else lock.signal.addEventListener("abort", () => controller.abort(lock.signal.reason), { once: true });
  }
  const set = {
    locks,
    /** Aborted as soon as any lock of the set is lost or released. */
    signal: controller.signal,
    /** Releases every lock of the set (idempotent). */
    async release() {
      const results = await Promise.allSettled(locks.map((l) => l.release()));
      const failed = results.find((r) => r.status === "rejected");
      if (failed !== undefined) throw failed.reason;
    },
  };
  if (hasAsyncDispose) set[Symbol.asyncDispose] = set.release;
  return set;
}

function construct(backend, options, what) {
  const { json, fetch, bindings, openSocket } = optionsJson(options, what);
  try {
    return RawLocks.connect(backend, json, fetch, bindings, openSocket);
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

/**
 * Locks on one Redis node through the Upstash REST protocol or Webdis. A
 * `redis://` URL is read by the core like the rest, then refused with
 * INVALID_ARGUMENT until this host's socket driver declares TCP support
 * (`RawLocks.declareTcp`; a browser never can).
 */
export class RedisLocks extends LockClient {
  constructor(options) {
    super(INTERNAL, construct("redis", options, "RedisLocks"));
  }
}

/** Redlock over N independent Redis nodes (Upstash REST or Webdis each; `redis://` as for RedisLocks). */
export class Redlock extends LockClient {
  constructor(options) {
    super(INTERNAL, construct("redlock", options, "Redlock"));
  }
}

/**
 * Locks on the edgelock Durable Object lock service (one object per lock
 * name, docs/lock-service-api.md): `{ url, token }` reaches it through the
 * job coordinator's front (`https://<worker>/lock`), `{ binding }` inside a
 * Worker through `bindings: { [binding]: lockServiceRouter(env.NAMESPACE) }`.
 * Exclusive locks only.
 */
export class DurableObjectLocks extends LockClient {
  constructor(options) {
    super(INTERNAL, construct("durable-object", options, "DurableObjectLocks"));
  }
}

/**
 * Locks as lease rows in a Cloudflare D1 table (`edgelock_locks`, created
 * on first use): `{ binding, bindings: { [binding]: d1Binding(env.DB) } }`
 * inside a Worker (D1 is reachable from a Worker only). The fencing token
 * is the row's version. Exclusive locks only.
 */
export class D1Locks extends LockClient {
  constructor(options) {
    super(INTERNAL, construct("d1", options, "D1Locks"));
  }
}

/**
 * ZooKeeper's `tls` as the core takes it, a boolean: `{ ca }` means TLS too
 * (its certificates are for the entries' socket factories, which read them
 * before this).
 */
function zkOptions(options) {
  if (options === null || typeof options !== "object") return options;
  const { tls } = options;
  if (tls === null || typeof tls !== "object" || Array.isArray(tls)) return options;
  return { ...options, tls: true };
}

/**
 * Locks on a ZooKeeper ensemble over its own protocol (TCP, or TLS):
 * Curator's InterProcessMutex node for node, so a Curator client of
 * `<root>/<name>` and this client exclude each other; the fencing token is
 * the lock node's creation zxid. `{ connect: "h:p[,h:p][/chroot]", root,
 * sessionTimeoutMs, requestTimeoutMs, digest: { user, password }, tls }`.
 * One session (one connection) per client. A host without TCP (a browser)
 * refuses it with INVALID_ARGUMENT before anything is sent. Exclusive
 * locks only.
 */
export class ZooKeeperLocks extends LockClient {
  constructor(options) {
    super(INTERNAL, construct("zookeeper", zkOptions(options), "ZooKeeperLocks"));
  }
}

/**
 * A binding over a D1 database for `D1Locks`: each request's
 * `{"statements":[{"sql","params"}]}` runs as one `db.batch(…)` (one
 * transaction), answered `{"results":[{"rows","changes"}]}`, or 500 with
 * D1's message (bound values cut out of it).
 */
export function d1Binding(db) {
  if (db === null || typeof db !== "object" || typeof db.prepare !== "function" || typeof db.batch !== "function") {
    throw invalid("d1Binding needs a D1 database (an object with prepare() and batch())");
  }
  const answer = (status, value) =>
    new Response(JSON.stringify(value), { status, headers: { "content-type": "application/json" } });
  return {
    async fetch(_input, init) {
      const secrets = [];
      let statements;
      try {
        let body = init?.body;
        if (typeof body !== "string") body = new TextDecoder().decode(body);
        ({ statements } = JSON.parse(body));
      } catch {
        return answer(400, { error: "the request body is not a JSON batch" });
      }
      try {
        if (!Array.isArray(statements) || statements.length === 0 || statements.length > 16) {
          return answer(400, { error: "`statements` must be an array of 1..=16 statements" });
        }
        const prepared = statements.map((s) => {
          const params = Array.isArray(s?.params) ? s.params : [];
          for (const p of params) if (typeof p === "string") secrets.push(p);
          return db.prepare(String(s?.sql)).bind(...params);
        });
        const results = await db.batch(prepared);
        return answer(200, {
          results: results.map((r) => ({
            rows: Array.isArray(r?.results) ? r.results : [],
            changes: r?.meta?.changes ?? 0,
          })),
        });
      } catch (e) {
        let message = String(e?.message ?? e ?? "D1 failed");
        for (const s of secrets) if (s) message = message.split(s).join("…");
        return answer(500, { error: message.slice(0, 500) });
      }
    },
  };
}

/**
 * A binding over a Durable Object namespace of the lock service, for use
 * inside a Worker: each request goes to `namespace.get(namespace.idFromName(name))`
 * of its `name` query parameter.
 */
export function lockServiceRouter(namespace) {
  if (namespace === null || typeof namespace !== "object"
      || typeof namespace.idFromName !== "function" || typeof namespace.get !== "function") {
    throw invalid("lockServiceRouter needs a Durable Object namespace (an object with idFromName() and get())");
  }
  return {
    fetch(input, init) {
      const url = typeof input === "string" ? input : input.url;
      const name = new URL(url).searchParams.get("name");
      if (name === null || name === "") {
        return Promise.reject(invalid("lockServiceRouter: the request names no lock"));
      }
      return namespace.get(namespace.idFromName(name)).fetch(input, init);
    },
  };
}
