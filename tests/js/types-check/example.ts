// Type-checked (tsc --noEmit, strict, skipLibCheck off) against the installed
// package's declarations; never run. Lines marked @ts-expect-error must fail
// to type-check, so the declarations are known to reject misuse.
import { EtcdLocks, RedisLocks, Redlock, LockError } from "edgelock";
import type { Lock, LockClient, LockErrorCode, LockHandleJSON } from "edgelock";

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
  return n + m.length + k;
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
  void t; void c;
}

export { etcdExample, requestExample, redisExamples, errorExample, misuse };
