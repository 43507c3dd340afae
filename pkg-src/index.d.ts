// Public types of edgelock (hand-written; the wasm-bindgen declarations of the
// internal `RawLocks` class are not part of the public surface).

// `Symbol.asyncDispose` without requiring lib "esnext.disposable" (the same
// declaration as TypeScript's own lib and @types/node, so they merge).
declare global {
  interface SymbolConstructor {
    readonly asyncDispose: unique symbol;
  }
}

/** Stable error codes (the Rust core's `ERROR_CODES`; a test keeps this list equal to it). `CLOSED` (client closed), `BUDGET` (Workers subrequest budget) and `INTERNAL` (a bug in edgelock: please report it) extend the documented set. */
export type LockErrorCode =
  | "INTERNAL"
  | "TIMEOUT"
  | "ABORTED"
  | "NO_QUORUM"
  | "LOST"
  | "NOT_HELD"
  | "BACKEND"
  | "TRANSPORT"
  | "INVALID_ARGUMENT"
  | "CLOSED"
  | "BUDGET";

/** Every failure is a LockError. Messages name the lock and backend, never a secret. */
export declare class LockError extends Error {
  constructor(code: LockErrorCode, message: string, options?: { cause?: unknown });
  readonly name: "LockError";
  readonly code: LockErrorCode;
}

/** The largest semaphore `limit` (100); a larger one is `INVALID_ARGUMENT`. */
export declare const MAX_PERMITS: 100;

/** The largest campaign value in bytes of UTF-8 (4096); a larger one is `INVALID_ARGUMENT`. */
export declare const MAX_CAMPAIGN_VALUE: 4096;

/** The most names one `acquireAll` may take (16); more are `INVALID_ARGUMENT`. */
export declare const MAX_ACQUIRE_ALL: 16;

/** What kind of hold a lock is: `exclusive` (a mutex, the default), `shared` (a reader of a read-write lock), `permit` (one of a semaphore's `limit`). */
export type LockMode = "exclusive" | "shared" | "permit";

/**
 * The kind of hold an acquire asks for, as in the Web Locks API: nothing or
 * `mode: "exclusive"` for a mutex (the writer side of a read-write lock),
 * `mode: "shared"` for a reader (refused with `INVALID_ARGUMENT` by a
 * backend that does not offer read-write locks), or `limit` for a permit of
 * a semaphore of `limit` (a whole number in 1..=`MAX_PERMITS`; every holder
 * of a name must use the same limit). `mode` and `limit` exclude each other.
 */
export type KindOptions =
  | { mode?: "exclusive" | "shared"; limit?: undefined }
  | { limit: number; mode?: undefined };

/** Options that ask for a semaphore's permit. */
export interface PermitOptions {
  /** At most this many holders at once (1..=`MAX_PERMITS`). */
  limit: number;
  mode?: undefined;
}

export interface AcquireOptions {
  /** `exclusive` (default) or `shared` (a reader); excludes `limit`. */
  mode?: "exclusive" | "shared";
  /** A permit of a semaphore admitting this many holders at once; excludes `mode`. */
  limit?: number;
  /** Give up with `TIMEOUT` after this many ms (default: wait until granted or aborted). */
  waitMs?: number;
  /** Aborting cancels the acquire (`ABORTED`); any key it created is removed. */
  signal?: AbortSignal;
  /** Per-lock TTL (Redis backends; etcd locks live as long as the client's session lease). */
  ttlMs?: number;
}

export interface TryAcquireOptions {
  /** `exclusive` (default) or `shared` (a reader); excludes `limit`. */
  mode?: "exclusive" | "shared";
  /** A permit of a semaphore admitting this many holders at once; excludes `mode`. */
  limit?: number;
  signal?: AbortSignal;
  ttlMs?: number;
}

export interface RequestOptions extends AcquireOptions {
  /** Do not wait: call back with `null` if the lock is held by someone else. */
  ifAvailable?: boolean;
}

/** What `lock.toJSON()` returns: enough for another process to resume the lock. Contains the owner credential. */
export interface LockHandleJSON {
  v: number;
  backend: "etcd" | "redis" | "redlock" | "durable-object" | "d1";
  name: string;
  key: string;
  owner: string;
  /** Decimal string (a JSON number could lose precision). */
  fencingToken: string;
  revision: string;
  /** Absent for an exclusive hold. */
  mode?: "shared" | "permit" | "leader";
  /** A permit's semaphore limit. */
  limit?: number;
  /** A permit's slot. */
  slot?: number;
}

export interface Lock {
  readonly name: string;
  /** The kind of hold. */
  readonly mode: LockMode;
  /** A permit's semaphore limit; `null` for other modes. */
  readonly limit: number | null;
  /** A permit's slot in `0..limit`, distinct among the current holders; `null` for other modes. */
  readonly slot: number | null;
  /** Strictly increases across successive holders of `name`. */
  readonly fencingToken: bigint;
  /** Aborted when the lock is lost (reason: LockError `LOST`) or released (reason: LockError `NOT_HELD`). */
  readonly signal: AbortSignal;
  /** Milliseconds since the epoch: the client's conservative estimate of the end of validity. */
  readonly expiresAt: number;
  extend(ttlMs?: number): Promise<void>;
  /** Idempotent. */
  release(): Promise<void>;
  toJSON(): LockHandleJSON;
  [Symbol.asyncDispose](): Promise<void>;
}

/** A permit of a semaphore: what an acquire with `limit` returns. */
export interface PermitLock extends Lock {
  readonly mode: "permit";
  readonly limit: number;
  readonly slot: number;
}

/** A holder or waiter of a name, as `status()` lists them. */
export interface LockHolder {
  /** Backend-specific identity (etcd: its key; Redis: a short non-secret id, or empty). */
  id: string;
  mode: LockMode;
  /** A permit's semaphore limit; `null` for other modes. */
  limit: number | null;
  /** A permit holder's slot; `null` for waiters and other modes. */
  slot: number | null;
  /** Its fencing token where the backend knows it (holders). */
  fencingToken: bigint | null;
}

/** What `status(name)` tells about a name. */
export interface LockStatus {
  name: string;
  /** Whether anyone holds it. */
  held: boolean;
  /** Backend-specific identity of the (oldest) holder (etcd: its key; Redis: `null`). */
  holder: string | null;
  /** etcd: the holder's token; Redis/Redlock: the highest fencing counter the nodes report. */
  fencingToken: bigint | null;
  /** Remaining lifetime of the holder as the backend reports it. */
  remainingMs: number | null;
  /** Waiters' ids in grant order, where the backend can tell (etcd). */
  waiters: string[];
  /** A semaphore's limit as stored with its permits (`null`: not a semaphore, or nothing held or queued). */
  limit: number | null;
  /** Every holder: the exclusive holder, the shared holders, or the permits with their slots. */
  holders: LockHolder[];
  /** Waiters with what they wait for, in grant order where the backend can tell. */
  queued: LockHolder[];
}

export interface CampaignOptions {
  /** Give up with `TIMEOUT` after this many ms (default: wait until leader or aborted). */
  waitMs?: number;
  /** Aborting cancels the campaign (`ABORTED`); its key leaves the line. */
  signal?: AbortSignal;
  /** Per-lock TTL (Redis backends; etcd leaderships live as long as the client's session lease). */
  ttlMs?: number;
}

/** Who leads an election, as `leader()` and `observe()` report it. */
export interface Leader {
  /** What the leader announces (its campaign's value or its last proclaim's). */
  value: string;
  /** The leadership's fencing token: strictly increases across leaders. */
  fencingToken: bigint;
}

/** What `leadership.toJSON()` returns: a lock handle of mode `leader`, with the value. */
export interface LeadershipHandleJSON extends LockHandleJSON {
  mode: "leader";
  value: string;
}

/** This client's leadership of an election, from `campaign()` or `resume()`. */
export interface Leadership {
  readonly name: string;
  readonly mode: "leader";
  /** What this leader announces. */
  readonly value: string;
  /** Strictly increases across leaders of `name`. */
  readonly fencingToken: bigint;
  /** Aborted when the leadership is lost (`LOST`) or resigned (`NOT_HELD`). */
  readonly signal: AbortSignal;
  readonly expiresAt: number;
  /** Announces `value` instead, checked on the backend (`NOT_HELD`/`LOST` once no longer leader; `INVALID_ARGUMENT` after `resign()`). */
  proclaim(value: string): Promise<void>;
  /** Gives the leadership up; idempotent. */
  resign(): Promise<void>;
  extend(ttlMs?: number): Promise<void>;
  toJSON(): LeadershipHandleJSON;
  [Symbol.asyncDispose](): Promise<void>;
}

export interface ObserveOptions {
  /** Aborting ends the iteration. */
  signal?: AbortSignal;
}

export interface AcquireAllOptions {
  /** Give up with `TIMEOUT` after this many ms for the whole set (nothing stays held). */
  waitMs?: number;
  signal?: AbortSignal;
  ttlMs?: number;
  /** Do not wait: resolve to `null` (holding nothing) if any name is held elsewhere. */
  ifAvailable?: boolean;
}

/** What `acquireAll` resolves to: every lock of the set, held together. */
export interface LockSet {
  /** One exclusive lock per name, in the order the names were given, each with its own fencing token. */
  readonly locks: Lock[];
  /** Aborted as soon as any lock of the set is lost or released. */
  readonly signal: AbortSignal;
  /** Releases every lock of the set; idempotent. */
  release(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

/**
 * What every client offers: `EtcdLocks`, `RedisLocks`, `Redlock`,
 * `DurableObjectLocks`, `D1Locks` and `ZooKeeperLocks` each merge this interface (a backend
 * that does not offer a kind or an operation rejects it with
 * `INVALID_ARGUMENT`).
 */
export interface LockClient {
  /** A permit of a semaphore of `opts.limit` (at most `limit` holders at once). */
  acquire(name: string, opts: AcquireOptions & PermitOptions): Promise<PermitLock>;
  acquire(name: string, opts?: AcquireOptions & KindOptions): Promise<Lock>;
  tryAcquire(name: string, opts: TryAcquireOptions & PermitOptions): Promise<PermitLock | null>;
  tryAcquire(name: string, opts?: TryAcquireOptions & KindOptions): Promise<Lock | null>;
  /**
   * Web Locks style: acquires `name`, calls `callback` with the lock and
   * releases it when the callback settles (also when it throws); resolves to
   * what the callback returned. The callback gets `null` (the lock is held
   * elsewhere) only with `ifAvailable: true`.
   */
  request<T>(name: string, callback: (lock: Lock) => Promise<T> | T): Promise<T>;
  request<T>(name: string, opts: RequestOptions & PermitOptions & { ifAvailable: true }, callback: (lock: PermitLock | null) => Promise<T> | T): Promise<T>;
  request<T>(name: string, opts: RequestOptions & PermitOptions & { ifAvailable?: false }, callback: (lock: PermitLock) => Promise<T> | T): Promise<T>;
  /** `ifAvailable` only known at run time: the callback may get `null`. */
  request<T>(name: string, opts: RequestOptions & PermitOptions, callback: (lock: PermitLock | null) => Promise<T> | T): Promise<T>;
  request<T>(name: string, opts: RequestOptions & KindOptions & { ifAvailable: true }, callback: (lock: Lock | null) => Promise<T> | T): Promise<T>;
  request<T>(name: string, opts: RequestOptions & KindOptions & { ifAvailable?: false }, callback: (lock: Lock) => Promise<T> | T): Promise<T>;
  /** `ifAvailable` only known at run time: the callback may get `null`. */
  request<T>(name: string, opts: RequestOptions & KindOptions, callback: (lock: Lock | null) => Promise<T> | T): Promise<T>;
  /** Who holds `name` (with modes and slots) and who waits for it. */
  status(name: string): Promise<LockStatus>;
  /** Waits until this client leads the election `name` (FIFO on etcd), announcing `value`. */
  campaign(name: string, value: string, opts?: CampaignOptions): Promise<Leadership>;
  /** The current leader of `name`, or `null` when nobody leads. */
  leader(name: string): Promise<Leader | null>;
  /** The current leader first, then every change (another leader, a new value, nobody), until `signal` aborts or the loop is left. A failed read is retried five times in a row (50 ms backoff, doubling) before the loop throws it. */
  observe(name: string, opts?: ObserveOptions): AsyncIterable<Leader | null>;
  /** Holds every name or none (taken in a canonical order: no deadlock between overlapping sets). */
  acquireAll(names: string[], opts: AcquireAllOptions & { ifAvailable: true }): Promise<LockSet | null>;
  acquireAll(names: string[], opts?: AcquireAllOptions): Promise<LockSet>;
  resume(handle: LeadershipHandleJSON): Promise<Leadership>;
  /** Re-enters an exclusive lock by proof of ownership (a held Lock or its `toJSON()` handle, of any process): the backend counts one more hold, same fencing token; freed when every hold is released (Redlock: counted on a quorum of nodes). */
  reenter(held: Lock | LockHandleJSON | string): Promise<Lock>;
  /** Adopts a lock serialised by `toJSON()`; rejects with `LOST` if it is no longer held. */
  resume(handle: LockHandleJSON | string): Promise<Lock>;
  /** Releases every lock and ends the session. Idempotent. */
  close(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

export interface EtcdLocksOptions {
  /** etcd JSON gateway base URLs, e.g. `http://127.0.0.1:2379`; tried in order. */
  endpoints: string[];
  /** Key prefix (default `edgelock`). */
  prefix?: string;
  /** Session lease TTL (default 10000, at least 1000). */
  sessionTtlMs?: number;
  /** Per-request timeout (default 5000). */
  requestTimeoutMs?: number;
  /** Extra headers on every request, e.g. `Authorization`. */
  headers?: Record<string, string>;
  /**
   * etcd authentication: the client turns these into a token
   * (`/v3/auth/authenticate`), sends it on every request and fetches a new
   * one when etcd says it expired. Never in a message. Excludes an
   * `Authorization` header.
   */
  auth?: { username: string; password: string };
  /** The only transport used (default: `globalThis.fetch`; in Node, node:http(s) with keep-alive connections). */
  fetch?: typeof fetch;
  /** Named bindings (objects with a `fetch(url, init)` method, such as a Durable Object stub) that a backend may target instead of a URL. */
  bindings?: Record<string, { fetch(input: string, init?: unknown): Promise<unknown> }>;
}

export type RedisProtocol = "upstash" | "webdis";

export interface RedisNode {
  /**
   * Base URL of the Upstash REST endpoint or of Webdis, or
   * `redis://[user[:password]@]host[:port][/db]` / `rediss://…` (TLS) for
   * the Redis protocol itself. A `redis://` node is not available from
   * JavaScript in this version (and never in a browser, which opens no TCP
   * connection): the constructor throws `INVALID_ARGUMENT` saying so.
   */
  url: string;
  /**
   * Of an http(s) URL; default `upstash`. Leave it out for a `redis://` URL
   * (the URL says it: giving `upstash` or `webdis` there is `INVALID_ARGUMENT`).
   */
  protocol?: RedisProtocol;
  /**
   * Upstash: the REST token (sent as a bearer token). Webdis: `user:password`
   * for its HTTP Basic ACL. `redis://`: the password, unless the URL holds
   * it (not both). Never in a message.
   */
  token?: string;
}

/**
 * What a socket factory returns: the client sets the four callbacks right
 * after `openSocket` returns, and the factory calls them only from later
 * events, none after `close()` or after the first `onend` / `onerror`.
 */
export interface SocketLike {
  /** Bytes to send, in order (called only after `onopen`). */
  write(bytes: Uint8Array): void;
  /** Closes the socket; no callback is called after it. */
  close(): void;
  /** Connected (for TLS: the handshake is done). */
  onopen: () => void;
  /** Bytes read, in order (copied before it returns: the buffer may be reused). */
  ondata: (bytes: Uint8Array) => void;
  /** The peer closed the connection. */
  onend: () => void;
  /** The socket failed: before `onopen` a connect failure, after it an I/O failure. */
  onerror: (message: string) => void;
}

/**
 * Opens a TCP connection (TLS when `tls`, checking the certificate for
 * `serverName`) to a Redis node at a `redis://` / `rediss://` URL. The Node,
 * Bun, Deno and workerd entries pass their own (node:net / node:tls,
 * Deno.connect / Deno.startTls, `connect()` of cloudflare:sockets); the
 * browser entry none (browsers have no TCP).
 */
export type SocketFactory = (options: { host: string; port: number; tls: boolean; serverName?: string }) => SocketLike;

/** Options of the TCP connections to `redis://` / `rediss://` nodes. */
export interface SocketOptions {
  /** Opens the connections (default: the runtime's, see `SocketFactory`). */
  openSocket?: SocketFactory;
  /**
   * Node, Bun and Deno entries: `ca`, certificates (PEM) that `rediss://`
   * connections trust beside the runtime's default trust store.
   */
  tls?: { ca?: string | string[] };
}

export interface RedisLocksOptions extends RedisNode, SocketOptions {
  /** Default lock TTL (default 10000); `ttlMs` on acquire overrides it. */
  ttlMs?: number;
  /** Per-request timeout (default 5000). */
  requestTimeoutMs?: number;
  /** Key prefix (default `edgelock`). */
  prefix?: string;
  /** Renew held locks at TTL/3 until released (default true). */
  autoExtend?: boolean;
  /** Longest pause between two attempts of a waiting acquire (default 200). */
  retryDelayMs?: number;
  /** Random extra pause per attempt (default 100). */
  retryJitterMs?: number;
  /**
   * Push wake-up: a waiting acquire subscribes to its lock's release channel
   * (one streaming request: Upstash `POST /subscribe/…` as server-sent events,
   * Webdis `GET /SUBSCRIBE/…`) and attempts again as soon as the holder
   * releases, instead of after `retryDelayMs`; while subscribed it still
   * attempts every min(holder's remaining TTL, 2 s). This caps the streams
   * this client holds open at once over all its waiters; waiters beyond it
   * poll, and 0 makes every waiter poll. Default 64; the `workerd` export
   * defaults to 5 (a Workers invocation may hold only 6 connections open).
   */
  maxSubscriptions?: number;
  /**
   * The host runs one Lua script over keys of different hash slots (a
   * standalone redis-server; a Redis Cluster answers `CROSSSLOT`). Then an
   * `acquireAll` of free names is one script taking all or none; without it
   * the names are taken one by one. Default true for `webdis`, false for
   * `upstash` (not documented there either way).
   */
  crossSlotScripts?: boolean;
  /** The only transport used (default: `globalThis.fetch`; in Node, node:http(s) with keep-alive connections). */
  fetch?: typeof fetch;
  /** Named bindings (objects with a `fetch(url, init)` method, such as a Durable Object stub) that a backend may target instead of a URL. */
  bindings?: Record<string, { fetch(input: string, init?: unknown): Promise<unknown> }>;
}

export interface RedlockOptions extends SocketOptions {
  /** Independent Redis nodes (a majority must agree). */
  nodes: RedisNode[];
  /** Default lock TTL (default 10000). */
  ttlMs?: number;
  /** Clock drift allowance as a fraction of the TTL (default 0.01; 2 ms are added). */
  driftFactor?: number;
  /** Retries without a quorum before `NO_QUORUM` (default 10). */
  retryCount?: number;
  /** Delay between retries (default 200). */
  retryDelayMs?: number;
  /** Random ± jitter on the retry delay (default 100). */
  retryJitterMs?: number;
  /**
   * Push wake-up: a waiting acquire subscribes to its lock's release channel
   * on each node (one streaming request per node, first node first) and
   * attempts again as soon as a holder releases, instead of after
   * `retryDelayMs`; while enough nodes are subscribed that any holder's
   * release reaches one of them it still attempts every min(remaining TTL,
   * 2 s), otherwise every `retryDelayMs`. This caps the streams this client
   * holds open at once over all its waiters and nodes; nodes beyond it are
   * left to the timer, and 0 makes every waiter poll. Default 64; the
   * `workerd` export defaults to max(0, 6 − nodes.length) (a Workers
   * invocation may hold only 6 connections open: the cap plus one attempt
   * round must fit), so a waiter on 5 nodes subscribes on the first only.
   */
  maxSubscriptions?: number;
  /** Per-node request timeout (default 1000). */
  requestTimeoutMs?: number;
  /** Key prefix (default `edgelock`). */
  prefix?: string;
  /** Renew held locks at TTL/3 until released (default true). */
  autoExtend?: boolean;
  /**
   * `strict` (default): a second round raises a quorum's fencing counters before
   * the lock is handed out, so tokens keep increasing across node restarts.
   * `folded`: one round per acquire; a node restart right after a grant can
   * hand the next holder a lower token.
   */
  fencing?: "folded" | "strict";
  /** The only transport used (default: `globalThis.fetch`; in Node, node:http(s) with keep-alive connections). */
  fetch?: typeof fetch;
  /** Named bindings (objects with a `fetch(url, init)` method, such as a Durable Object stub) that a backend may target instead of a URL. */
  bindings?: Record<string, { fetch(input: string, init?: unknown): Promise<unknown> }>;
}

/** Locks on etcd v3 through its JSON gateway (session lease, FIFO waiters). */
export declare class EtcdLocks {
  /** Throws LockError `INVALID_ARGUMENT` synchronously for invalid options. */
  constructor(options: EtcdLocksOptions);
}
/** The {@link LockClient} methods (this interface merges into the class). */
export interface EtcdLocks extends LockClient {}

/** Locks on one Redis node over Upstash REST or Webdis (`redis://` URLs: not from JavaScript yet). */
export declare class RedisLocks {
  constructor(options: RedisLocksOptions);
}
/** The {@link LockClient} methods (this interface merges into the class). */
export interface RedisLocks extends LockClient {}

/** Redlock: locks held on a majority of independent Redis nodes (each over Upstash REST or Webdis; `redis://` nodes: not from JavaScript yet). */
export declare class Redlock {
  constructor(options: RedlockOptions);
}
/** The {@link LockClient} methods (this interface merges into the class). */
export interface Redlock extends LockClient {}

/** Options of `DurableObjectLocks`: exactly one of `url` and `binding`. */
export type DurableObjectLocksOptions = DurableObjectCommonOptions & (
  | {
      /** The service's base URL, e.g. `https://jobs.example.workers.dev/lock` (requests go to `<url>/v1/<op>?name=…`). */
      url: string;
      binding?: never;
    }
  | {
      /** The name of a binding in `bindings` (inside a Worker: `lockServiceRouter(env.NAMESPACE)`). */
      binding: string;
      url?: never;
    }
);

export interface DurableObjectCommonOptions {
  /** Sent as `Authorization: Bearer <token>` (the job coordinator's front requires it). */
  token?: string;
  /** Default lease (default 10000). */
  ttlMs?: number;
  /** Per-request timeout (default 5000; a waiting acquire's poll gets its wait on top). */
  requestTimeoutMs?: number;
  /** Renew held locks at TTL/3 until released (default true). */
  autoExtend?: boolean;
  /** The only transport used for `url` (default: `globalThis.fetch`; in Node, node:http(s) with keep-alive connections). */
  fetch?: typeof fetch;
  /** Named bindings (objects with a `fetch(url, init)` method) that `binding` names. */
  bindings?: Record<string, { fetch(input: string, init?: unknown): Promise<unknown> }>;
}

/** A Durable Object namespace, as a Worker's `env` holds it (only what the router uses). */
export interface DurableObjectNamespaceLike {
  idFromName(name: string): unknown;
  get(id: unknown): { fetch(input: string, init?: unknown): Promise<unknown> };
}

/**
 * A binding over a Durable Object namespace of the lock service, for
 * `DurableObjectLocks({ binding, bindings: { [binding]: lockServiceRouter(ns) } })`:
 * each request goes to `ns.get(ns.idFromName(name))` of its `name` query parameter.
 */
export declare function lockServiceRouter(namespace: DurableObjectNamespaceLike): { fetch(input: string, init?: unknown): Promise<unknown> };

/**
 * Locks on the edgelock Durable Object lock service (one object per lock
 * name): exclusive locks, read-write locks (`mode: "shared"`) and
 * semaphores (`limit`, a slot and a fencing token per permit). Elections and
 * `reenter` reject with `INVALID_ARGUMENT` (the signatures are
 * `LockClient`'s); `acquireAll` takes the names one at a time.
 */
export declare class DurableObjectLocks {
  /** Throws LockError `INVALID_ARGUMENT` synchronously for invalid options (a bad URL, `url` and `binding` both or neither). */
  constructor(options: DurableObjectLocksOptions);
}
/** The {@link LockClient} methods (this interface merges into the class). */
export interface DurableObjectLocks extends LockClient {}

/** Options of `D1Locks`. */
export interface D1LocksOptions {
  /** The name of a binding in `bindings` (inside a Worker: `d1Binding(env.DB)`). */
  binding: string;
  /** Named bindings (objects with a `fetch(url, init)` method) that `binding` names. */
  bindings: Record<string, { fetch(input: string, init?: unknown): Promise<unknown> }>;
  /** The lock table, an SQL identifier (default `edgelock_locks`, created on first use). */
  table?: string;
  /** Default lease (default 10000). */
  ttlMs?: number;
  /** Per-request timeout (default 5000). */
  requestTimeoutMs?: number;
  /** Renew held locks at TTL/3 until released (default true). */
  autoExtend?: boolean;
  /** Longest pause between a waiter's attempts (default 250; the holder's remaining lease when shorter). */
  retryDelayMs?: number;
  /** Random extra pause between attempts, 0..=retryJitterMs (default 100). */
  retryJitterMs?: number;
}

/** A D1 database, as a Worker's `env` holds it (only what `d1Binding` uses). */
export interface D1DatabaseLike {
  prepare(sql: string): { bind(...values: unknown[]): unknown };
  batch(statements: unknown[]): Promise<Array<{ results?: unknown[]; meta?: { changes?: number } }>>;
}

/**
 * A binding over a D1 database for `D1Locks({ binding, bindings: { [binding]: d1Binding(env.DB) } })`:
 * each request runs as one `db.batch(…)` (one transaction).
 */
export declare function d1Binding(db: D1DatabaseLike): { fetch(input: string, init?: unknown): Promise<unknown> };

/**
 * Locks as lease rows in a D1 table (owner, expiry, version as fencing
 * token), inside a Worker. Exclusive locks only: `mode`/`limit`, elections
 * and `reenter` reject with `INVALID_ARGUMENT`; `acquireAll` takes the
 * names one at a time.
 */
export declare class D1Locks {
  /** Throws LockError `INVALID_ARGUMENT` synchronously for invalid options (no `binding`, a bad `table`, unknown fields). */
  constructor(options: D1LocksOptions);
}
/** The {@link LockClient} methods (this interface merges into the class). */
export interface D1Locks extends LockClient {}

export interface ZooKeeperLocksOptions {
  /** The ensemble: `host:port[,host:port...][/chroot]` (port default 2181; IPv6 as `[::1]:2181`). */
  connect: string;
  /** The path each lock's node directory lives under (default `/edgelock`): lock `name` is Curator's `<root>/<name>`. */
  root?: string;
  /** The session timeout asked for (default 30000; the server clamps it into its [2, 20] × tickTime). A crashed holder's lock frees up after it. */
  sessionTimeoutMs?: number;
  /** Per-request timeout (default 10000). */
  requestTimeoutMs?: number;
  /** Digest authentication (`addAuth("digest", "user:password")`); the password is never in a message. */
  digest?: { user: string; password: string };
  /**
   * TLS to every server: `true`, or `{ ca }` (Node, Bun and Deno entries:
   * certificates (PEM) trusted beside the runtime's default store).
   */
  tls?: boolean | { ca?: string | string[] };
  /** Opens the connections (default: the runtime's, see `SocketFactory`; a browser has none). */
  openSocket?: SocketFactory;
}

/**
 * Locks on a ZooKeeper ensemble over its own protocol: Curator's
 * InterProcessMutex node for node (a Curator client of `<root>/<name>`
 * excludes this one and the reverse); the fencing token is the lock node's
 * creation zxid. One session (one connection) per client. Exclusive locks
 * only. A browser refuses it (`INVALID_ARGUMENT`: no TCP).
 */
export declare class ZooKeeperLocks {
  /** Throws LockError `INVALID_ARGUMENT` synchronously for invalid options, or where the host has no TCP. */
  constructor(options: ZooKeeperLocksOptions);
}
/** The {@link LockClient} methods (this interface merges into the class). */
export interface ZooKeeperLocks extends LockClient {}
