// Type-checked (tsc --noEmit, strict, skipLibCheck off) against the installed
// package's declarations; never run. Lines marked @ts-expect-error must fail
// to type-check, so the declarations are known to reject misuse.
import { EtcdLocks, RedisLocks, Redlock, DurableObjectLocks, lockServiceRouter, D1Locks, d1Binding, ZooKeeperLocks, LockError, MAX_PERMITS, MAX_CAMPAIGN_VALUE, MAX_ACQUIRE_ALL } from "edgelock";
import type { Leader, Leadership, LeadershipHandleJSON, Lock, LockClient, LockErrorCode, LockHandleJSON, LockHolder, LockMode, LockSet, LockStatus, PermitLock } from "edgelock";

async function etcdExample(): Promise<bigint> {
  const locks = new EtcdLocks({
    endpoints: ["http://127.0.0.1:2379"],
    prefix: "jobs",
    sessionTtlMs: 10_000,
    requestTimeoutMs: 2_000,
    headers: { Authorization: "Bearer token" },
    fetch: (input, init) => fetch(input, init),
  });
  const ctl = new AbortController();
  const lock: Lock = await locks.acquire("nightly-report", { waitMs: 5_000, signal: ctl.signal });
  const token: bigint = lock.fencingToken;
  const until: number = lock.expiresAt;
  const name: string = lock.name;
  lock.signal.addEventListener("abort", () => console.log(`${name} lost or released at ${until}`));
  await lock.extend();
  const handle: LockHandleJSON = lock.toJSON();
  const again: Lock = await locks.resume(handle);
  await again.release();
  await lock[Symbol.asyncDispose]();
  const maybe: Lock | null = await locks.tryAcquire("nightly-report");
  await maybe?.release();
  await locks.close();
  return token;
}

async function requestExample(client: LockClient): Promise<number> {
  const n: number = await client.request("counter", async (lock) => Number(lock.fencingToken));
  const m: string = await client.request("counter", { ifAvailable: true }, async (lock) => (lock === null ? "busy" : lock.name));
  const k: number = await client.request("counter", { waitMs: 100, ttlMs: 5_000 }, (lock) => (lock ? 1 : 0));
  // Only `ifAvailable: true` (or a flag known at run time) can call back with null.
  const token: bigint = await client.request("counter", { waitMs: 100 }, (lock) => lock.fencingToken);
  const slot: number = await client.request("renders", { limit: 3, ifAvailable: false }, (p) => p.slot);
  // @ts-expect-error ifAvailable: true may call back with null
  await client.request("counter", { ifAvailable: true }, (lock) => lock.fencingToken);
  // @ts-expect-error a run-time ifAvailable may call back with null
  await client.request("renders", { limit: 3, ifAvailable: m.length > 0 }, (p) => p.slot);
  return n + m.length + k + Number(token) + slot;
}

async function kindsExample(client: LockClient): Promise<number> {
  // A semaphore: at most 3 holders, each with its own slot.
  const permit: PermitLock = await client.acquire("renders", { limit: 3, waitMs: 10_000 });
  const slot: number = permit.slot;
  const limit: number = permit.limit;
  const mode: "permit" = permit.mode;
  const handle: LockHandleJSON = permit.toJSON();
  const handleSlot: number | undefined = handle.slot;
  const resumed: Lock = await client.resume(handle);
  const maybe: PermitLock | null = await client.tryAcquire("renders", { limit: MAX_PERMITS });
  const viaRequest: number = await client.request("renders", { limit: 3 }, (p) => (p === null ? -1 : p.slot));
  // Read-write: readers share, a writer (the default mode) excludes them.
  const reader: Lock = await client.acquire("config", { mode: "shared" });
  const writer: Lock = await client.acquire("config", { mode: "exclusive", ttlMs: 5_000 });
  const m: LockMode = reader.mode;
  const s: number | null = writer.slot;
  const l: number | null = writer.limit;
  const status: LockStatus = await client.status("renders");
  const holders: LockHolder[] = status.holders;
  const first = holders[0];
  const firstSlot: number | null = first === undefined ? null : first.slot;
  const token: bigint | null = status.fencingToken;
  const queued: LockMode[] = status.queued.map((q) => q.mode);
  const statusLimit: number | null = status.limit;
  void mode; void handleSlot; void maybe; void m; void s; void l; void firstSlot; void token; void queued; void statusLimit;
  await resumed.release();
  return slot + limit + viaRequest;
}

// Each class has every LockClient method (declared once, merged into the class).
function clientClasses(): LockClient[] {
  const etcd: EtcdLocks = new EtcdLocks({ endpoints: ["http://127.0.0.1:2379"] });
  const acquire: (name: string) => Promise<Lock> = (name) => etcd.acquire(name);
  void acquire;
  return [etcd, new DurableObjectLocks({ url: "https://x/lock" }), new D1Locks({ binding: "DB", bindings: {} })];
}

function redisExamples(): LockClient[] {
  const upstash = new RedisLocks({ url: "https://example.upstash.io", token: "t", ttlMs: 30_000 });
  const webdis = new RedisLocks({ url: "http://127.0.0.1:7379", protocol: "webdis", maxSubscriptions: 0 });
  const redlock = new Redlock({
    nodes: [{ url: "http://a:7379", protocol: "webdis" }, { url: "https://b.upstash.io", token: "t" }],
    ttlMs: 10_000, driftFactor: 0.01, retryCount: 3, retryDelayMs: 200, retryJitterMs: 100, autoExtend: true,
    maxSubscriptions: 4,
  });
  return [upstash, webdis, redlock];
}

function errorExample(e: unknown): LockErrorCode | undefined {
  if (e instanceof LockError) {
    const code: LockErrorCode = e.code;
    const msg: string = e.message;
    void msg;
    switch (code) {
      case "TIMEOUT": case "ABORTED": case "NO_QUORUM": case "LOST": case "NOT_HELD":
      case "BACKEND": case "TRANSPORT": case "INVALID_ARGUMENT": case "CLOSED": case "BUDGET":
        return code;
    }
  }
  return undefined;
}

async function misuse(locks: EtcdLocks, lock: Lock): Promise<void> {
  // @ts-expect-error endpoints is required
  new EtcdLocks({});
  // @ts-expect-error waitMs is a number
  await locks.acquire("x", { waitMs: "5" });
  // @ts-expect-error tryAcquire has no waitMs
  await locks.tryAcquire("x", { waitMs: 5 });
  // @ts-expect-error fencingToken is a bigint, not a number
  const t: number = lock.fencingToken;
  // @ts-expect-error name is read-only
  lock.name = "y";
  // @ts-expect-error protocol is "upstash" | "webdis"
  new RedisLocks({ url: "http://x", protocol: "resp" });
  // @ts-expect-error not a known error code
  const c: LockErrorCode = "OOPS";
  // @ts-expect-error limit and mode exclude each other
  await locks.acquire("x", { limit: 3, mode: "shared" });
  // @ts-expect-error limit is a number
  await locks.tryAcquire("x", { limit: "3" });
  // @ts-expect-error not a mode an acquire can ask for
  await locks.acquire("x", { mode: "permit" });
  // @ts-expect-error an exclusive lock is not a PermitLock
  const p: PermitLock = await locks.acquire("x");
  // @ts-expect-error slot is read-only
  lock.slot = 1;
  void p;
  void t; void c;
}

async function electionExample(client: LockClient): Promise<string> {
  // Leader election: campaign waits until this client leads.
  const ctl = new AbortController();
  const me: Leadership = await client.campaign("scheduler", "node-a:8080", { waitMs: 30_000, signal: ctl.signal });
  const token: bigint = me.fencingToken;
  await me.proclaim("node-a:9090");
  const now: Leader | null = await client.leader("scheduler");
  const handle: LeadershipHandleJSON = me.toJSON();
  const again: Leadership = await client.resume(handle);
  for await (const leader of client.observe("scheduler", { signal: ctl.signal })) {
    if (leader === null) break;
    const v: string = leader.value;
    const t: bigint = leader.fencingToken;
    void v; void t;
  }
  await me.resign();
  // Multi-resource locks: all or none.
  const set: LockSet = await client.acquireAll(["a", "b"], { waitMs: 5_000 });
  const first: Lock | undefined = set.locks[0];
  await set.release();
  const maybe: LockSet | null = await client.acquireAll(["a", "b"], { ifAvailable: true });
  const limits: number = MAX_CAMPAIGN_VALUE + MAX_ACQUIRE_ALL;
  // @ts-expect-error a campaign value is a string
  await client.campaign("scheduler", 42);
  // @ts-expect-error acquireAll takes an array of names
  await client.acquireAll("a");
  // @ts-expect-error a leadership's value is read-only (proclaim changes it)
  me.value = "x";
  // Re-entry by proof of ownership: the same token, freed after the last hold.
  const outer: Lock = await client.acquire("jobs");
  const inner: Lock = await client.reenter(outer.toJSON());
  const sameToken: boolean = inner.fencingToken === outer.fencingToken;
  // @ts-expect-error reenter needs a lock or its handle
  await client.reenter(42);
  void token; void now; void again; void first; void maybe; void limits; void sameToken;
  return me.value;
}

async function durableObjectExample(namespace: { idFromName(name: string): { toString(): string }; get(id: { toString(): string }): { fetch(input: string, init?: unknown): Promise<unknown> } }): Promise<bigint> {
  const byUrl = new DurableObjectLocks({ url: "https://jobs.example.workers.dev/lock", token: "t", ttlMs: 5_000, requestTimeoutMs: 2_000, autoExtend: true });
  const lock: Lock = await byUrl.acquire("reports", { waitMs: 30_000 });
  const handle: LockHandleJSON = lock.toJSON();
  const backend: "etcd" | "redis" | "redlock" | "durable-object" | "d1" = handle.backend;
  await lock.release();
  const inWorker = new DurableObjectLocks({ binding: "LOCKS", bindings: { LOCKS: lockServiceRouter(namespace) } });
  const maybe: Lock | null = await inWorker.tryAcquire("reports");
  // @ts-expect-error url and binding exclude each other
  new DurableObjectLocks({ url: "https://x/lock", binding: "LOCKS" });
  // @ts-expect-error one of url and binding is required
  new DurableObjectLocks({ token: "t" });
  await byUrl.close();
  void backend; void maybe;
  return lock.fencingToken;
}

async function d1Example(db: { prepare(sql: string): { bind(...values: unknown[]): unknown }; batch(statements: unknown[]): Promise<Array<{ results?: unknown[]; meta?: { changes?: number } }>> }): Promise<bigint> {
  const locks = new D1Locks({ binding: "DB", bindings: { DB: d1Binding(db) }, table: "job_locks", ttlMs: 5_000, retryDelayMs: 100 });
  const lock: Lock = await locks.acquire("nightly", { waitMs: 10_000 });
  const maybe: Lock | null = await locks.tryAcquire("nightly");
  await lock.release();
  // @ts-expect-error a binding is required
  new D1Locks({ bindings: {} });
  await locks.close();
  void maybe;
  return lock.fencingToken;
}

async function zookeeperExample(): Promise<bigint> {
  const locks: LockClient = new ZooKeeperLocks({ connect: "zk1:2181,zk2:2181/app", root: "/jobs", sessionTimeoutMs: 10_000, requestTimeoutMs: 2_000, digest: { user: "u", password: "p" } });
  new ZooKeeperLocks({ connect: "zk:2281", tls: { ca: "PEM" } });
  new ZooKeeperLocks({ connect: "zk:2281", tls: true });
  // @ts-expect-error connect is required
  new ZooKeeperLocks({ root: "/jobs" });
  // @ts-expect-error digest needs a password
  new ZooKeeperLocks({ connect: "zk:2181", digest: { user: "u" } });
  const lock: Lock = await locks.acquire("nightly", { waitMs: 10_000 });
  await lock.release();
  await locks.close();
  return lock.fencingToken;
}

export { electionExample, etcdExample, requestExample, clientClasses, kindsExample, redisExamples, errorExample, misuse, durableObjectExample, d1Example, zookeeperExample };
