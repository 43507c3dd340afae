// The npm package against a real etcd, imported exactly as a user imports it
// (`edgelock` is installed into node_modules from the `npm pack` tarball by
// scripts/test-js.sh).
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import { createServer } from "node:http";
import { EtcdLocks, LockError } from "edgelock";
import { eventually, freePort, startEtcd } from "./support/etcd.mjs";
import { runModule, skipUnlessRequired } from "./support/runtime.mjs";
import { lockKindCases } from "./support/kinds.mjs";
import { electionCases, multiLockCases, reentryCases } from "./support/elections.mjs";

let etcd;
const clients = [];
let seq = 0;

/** A client whose prefix is unique to the test, so that tests never see each other's keys. */
function client(extra = {}) {
  const c = new EtcdLocks({ endpoints: [etcd.url], prefix: extra.prefix ?? "js", sessionTtlMs: 3000, requestTimeoutMs: 1000, ...extra });
  clients.push(c);
  return c;
}
function uniqueName(base) {
  seq += 1;
  return `${base}-${seq}`;
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function keysOf(name, prefix = "js") {
  return await etcd.gateway.keys(`${prefix}/${name}/`);
}
async function rejectsWith(promise, code) {
  const err = await promise.then(() => null, (e) => e);
  assert.ok(err instanceof LockError, `expected a LockError ${code}, got ${err}`);
  assert.ok(err instanceof Error);
  assert.equal(err.code, code, err.message);
  assert.equal(err.name, "LockError");
  return err;
}

before(async () => {
  etcd = await startEtcd();
});
after(async () => {
  await Promise.allSettled(clients.map((c) => c.close()));
  await etcd?.stop();
});

describe("exclusion and fencing", () => {
  test("8 concurrent clients: never two holders, tokens strictly increase", async () => {
    const name = uniqueName("mutex");
    const workers = Array.from({ length: 8 }, () => client());
    let inside = 0;
    let maxInside = 0;
    const tokens = [];
    await Promise.all(workers.map(async (c) => {
      for (let i = 0; i < 4; i += 1) {
        const lock = await c.acquire(name, { waitMs: 30_000 });
        inside += 1;
        maxInside = Math.max(maxInside, inside);
        tokens.push(lock.fencingToken);
        assert.equal(typeof lock.fencingToken, "bigint");
        assert.equal(lock.signal.aborted, false);
        await sleep(Math.random() * 5);
        inside -= 1;
        await lock.release();
        assert.equal(lock.signal.aborted, true);
      }
    }));
    assert.equal(maxInside, 1, "two clients held the lock at once");
    assert.equal(tokens.length, 32);
    for (let i = 1; i < tokens.length; i += 1) {
      assert.ok(tokens[i] > tokens[i - 1], `token ${tokens[i]} after ${tokens[i - 1]}`);
    }
    assert.deepEqual(await keysOf(name), []);
  });

  test("fencing token is the holder key's create revision", async () => {
    const name = uniqueName("rev");
    const lock = await client().acquire(name);
    const [k] = await keysOf(name);
    assert.equal(k.createRevision, lock.fencingToken);
    assert.ok(lock.expiresAt > Date.now() && lock.expiresAt <= Date.now() + 3000, `expiresAt ${lock.expiresAt}`);
    const before = lock.expiresAt;
    await sleep(20);
    await lock.extend();
    assert.ok(lock.expiresAt >= before, "extend moved expiresAt back");
    await lock.release();
    await lock.release(); // idempotent
  });
});

describe("request()", () => {
  test("releases when the callback throws, and rethrows the callback's error", async () => {
    const name = uniqueName("req");
    const a = client();
    let seen;
    await assert.rejects(a.request(name, {}, async (lock) => {
      seen = lock;
      assert.equal((await keysOf(name)).length, 1);
      throw new Error("boom");
    }), /boom/);
    assert.equal(seen.signal.aborted, true);
    assert.deepEqual(await keysOf(name), []);
    const b = await client().tryAcquire(name);
    assert.ok(b !== null);
    await b.release();
  });

  test("returns the callback's value and releases; two-argument form", async () => {
    const name = uniqueName("req2");
    const v = await client().request(name, async (lock) => lock.name.toUpperCase());
    assert.equal(v, name.toUpperCase());
    assert.deepEqual(await keysOf(name), []);
  });

  test("ifAvailable: null while someone else holds it, the lock once free", async () => {
    const name = uniqueName("avail");
    const holder = await client().acquire(name);
    const other = client();
    const r1 = await other.request(name, { ifAvailable: true }, async (lock) => lock);
    assert.equal(r1, null);
    assert.equal((await keysOf(name)).length, 1, "ifAvailable left a key behind");
    await holder.release();
    const token = await other.request(name, { ifAvailable: true }, async (lock) => lock.fencingToken);
    assert.ok(token > holder.fencingToken);
    assert.deepEqual(await keysOf(name), []);
  });
});

describe("waiting, cancellation and timeouts leave no key behind", () => {
  test("AbortSignal cancels a waiting acquire", async () => {
    const name = uniqueName("abort");
    const holder = await client().acquire(name);
    const waiter = client();
    const ctl = new AbortController();
    const pending = waiter.acquire(name, { signal: ctl.signal });
    await eventually(async () => (await keysOf(name)).length === 2, 5000, "the waiter's key");
    ctl.abort(new Error("user gave up"));
    const err = await rejectsWith(pending, "ABORTED");
    assert.match(err.message, new RegExp(name));
    assert.match(err.message, /etcd/);
    await eventually(async () => (await keysOf(name)).length === 1, 5000, "the waiter's key to go");
    assert.equal((await keysOf(name))[0].createRevision, holder.fencingToken);
    await holder.release();
  });

  test("an already aborted signal rejects before any request", async () => {
    let calls = 0;
    const c = client({ fetch: (...a) => { calls += 1; return fetch(...a); } });
    await rejectsWith(c.acquire(uniqueName("pre"), { signal: AbortSignal.abort() }), "ABORTED");
    assert.equal(calls, 0);
  });

  test("waitMs runs out with TIMEOUT", async () => {
    const name = uniqueName("timeout");
    const holder = await client().acquire(name);
    const t0 = Date.now();
    await rejectsWith(client().acquire(name, { waitMs: 400 }), "TIMEOUT");
    assert.ok(Date.now() - t0 >= 390, `gave up after ${Date.now() - t0} ms`);
    await eventually(async () => (await keysOf(name)).length === 1, 5000, "the waiter's key to go");
    await holder.release();
    assert.deepEqual(await keysOf(name), []);
  });

  test("tryAcquire returns null while held and leaves no key", async () => {
    const name = uniqueName("try");
    const holder = await client().acquire(name);
    assert.equal(await client().tryAcquire(name), null);
    assert.equal((await keysOf(name)).length, 1);
    await holder.release();
  });
});

describe("lost locks", () => {
  test("signal fires with LOST when the backend deletes the key", async () => {
    const name = uniqueName("del");
    const lock = await client().acquire(name);
    const lost = new Promise((resolve) => lock.signal.addEventListener("abort", () => resolve(lock.signal.reason)));
    const [k] = await keysOf(name);
    await etcd.gateway.deleteKey(k.key);
    const reason = await Promise.race([lost, sleep(8000).then(() => "not lost")]);
    assert.ok(reason instanceof LockError, String(reason));
    assert.equal(reason.code, "LOST");
    assert.match(reason.message, new RegExp(name));
    await rejectsWith(lock.extend(), "LOST");
    await lock.release(); // idempotent after loss
  });

  test("signal fires with LOST when the lease is revoked", async () => {
    const name = uniqueName("revoke");
    const lock = await client().acquire(name);
    const lost = new Promise((resolve) => lock.signal.addEventListener("abort", () => resolve(lock.signal.reason)));
    await etcd.gateway.revokeLease(lock.toJSON().owner);
    const reason = await Promise.race([lost, sleep(8000).then(() => "not lost")]);
    assert.equal(reason?.code, "LOST", String(reason));
    assert.deepEqual(await keysOf(name), []);
  });
});

describe("toJSON() / resume()", () => {
  test("a handle from one process is resumed and released by another", async () => {
    const name = uniqueName("handoff");
    // Process 1 acquires and exits without releasing (its lease outlives it).
    const handleJson = await runModule(`
      import { EtcdLocks } from "edgelock";
      const c = new EtcdLocks({ endpoints: [process.env.ETCD], prefix: "js", sessionTtlMs: 5000, requestTimeoutMs: 1000 });
      const lock = await c.acquire(process.env.NAME);
      console.log(JSON.stringify(lock));
      process.exit(0);
    `, { ETCD: etcd.url, NAME: name });
    const handle = JSON.parse(handleJson);
    assert.equal(handle.name, name);
    assert.equal(handle.backend, "etcd");
    assert.equal((await keysOf(name)).length, 1);
    // Process 2 resumes it, keeps it alive past the original lease TTL, releases it.
    const out = await runModule(`
      import { EtcdLocks } from "edgelock";
      const c = new EtcdLocks({ endpoints: [process.env.ETCD], prefix: "js", sessionTtlMs: 5000, requestTimeoutMs: 1000 });
      const lock = await c.resume(JSON.parse(process.env.HANDLE));
      await new Promise((r) => setTimeout(r, 6000));
      if (lock.signal.aborted) throw new Error("resumed lock was lost");
      console.log(lock.fencingToken.toString());
      await lock.release();
      await c.close();
    `, { ETCD: etcd.url, HANDLE: handleJson });
    assert.equal(out, handle.fencingToken);
    assert.deepEqual(await keysOf(name), []);
    // The handle no longer names a held lock.
    await rejectsWith(client().resume(handle), "LOST");
  });

  test("resume() of garbage is INVALID_ARGUMENT", async () => {
    const c = client();
    await rejectsWith(c.resume({ v: 1, backend: "etcd" }), "INVALID_ARGUMENT");
    await rejectsWith(c.resume(42), "INVALID_ARGUMENT");
  });
});

describe("LockError codes", () => {
  test("INVALID_ARGUMENT: thrown synchronously by constructors, rejected before any request", async () => {
    for (const opts of [undefined, {}, { endpoints: [] }, { endpoints: ["ftp://x"] }, { endpoints: [etcd.url], sessionTtlMs: -1 },
      { endpoints: [etcd.url], sessionTtlMs: Number.NaN }, { endpoints: [etcd.url], ttl: 5 }, { endpoints: [etcd.url], fetch: 5 }]) {
      assert.throws(() => new EtcdLocks(opts), (e) => e instanceof LockError && e.code === "INVALID_ARGUMENT", JSON.stringify(opts));
    }
    let calls = 0;
    const c = client({ fetch: (...a) => { calls += 1; return fetch(...a); } });
    await rejectsWith(c.acquire(""), "INVALID_ARGUMENT");
    await rejectsWith(c.acquire(5), "INVALID_ARGUMENT");
    await rejectsWith(c.acquire("x", { waitMs: -1 }), "INVALID_ARGUMENT");
    await rejectsWith(c.acquire("x", { waitMs: 1.5 }), "INVALID_ARGUMENT");
    await rejectsWith(c.acquire("x", { timeout: 5 }), "INVALID_ARGUMENT");
    await rejectsWith(c.acquire("x".repeat(600)), "INVALID_ARGUMENT");
    await rejectsWith(c.request("x", { ifAvailable: true, waitMs: 5 }, async () => 1), "INVALID_ARGUMENT");
    assert.equal(calls, 0, "a request was sent for invalid arguments");
  });

  test("TRANSPORT when nothing listens, BACKEND for a non-etcd reply; no secret in messages", async () => {
    const secret = "s3cr3t-token-value";
    const dead = `http://127.0.0.1:${await freePort()}`;
    const c1 = client({ endpoints: [dead], headers: { Authorization: `Bearer ${secret}` }, requestTimeoutMs: 1000 });
    const e1 = await rejectsWith(c1.acquire("t1"), "TRANSPORT");
    assert.match(e1.message, /t1/);
    assert.ok(!e1.message.includes(secret));

    const server = createServer((req, res) => {
      res.writeHead(500, { "content-type": "application/json" });
      res.end(JSON.stringify({ error: `oops ${req.headers.authorization}`, code: 13 }));
    });
    await new Promise((r) => server.listen(0, "127.0.0.1", r));
    try {
      const c2 = client({ endpoints: [`http://127.0.0.1:${server.address().port}`], headers: { Authorization: `Bearer ${secret}` }, requestTimeoutMs: 1000 });
      const e2 = await rejectsWith(c2.acquire("t2"), "BACKEND");
      assert.match(e2.message, /t2/);
      assert.ok(!e2.message.includes(secret), e2.message);
    } finally {
      server.closeAllConnections();
      server.close();
    }
  });

  test("NOT_HELD after release, CLOSED after close", async () => {
    const c = client();
    const lock = await c.acquire(uniqueName("nh"));
    await lock.release();
    await rejectsWith(lock.extend(), "NOT_HELD");
    assert.equal(lock.signal.reason.code, "NOT_HELD");
    const held = await c.acquire(uniqueName("cl"));
    await c.close();
    assert.equal(held.signal.aborted, true, "close() did not end the held lock");
    await c.close(); // idempotent
    await rejectsWith(c.acquire("after"), "CLOSED");
    await held.release(); // idempotent after close
  });
});

describe("transport", () => {
  test("an injected fetch is the only transport used", async (t) => {
    const original = globalThis.fetch;
    let injected = 0;
    let global = 0;
    const counting = (...args) => { injected += 1; return original(...args); };
    globalThis.fetch = () => { global += 1; throw new Error("globalThis.fetch must not be used"); };
    t.after(() => { globalThis.fetch = original; });
    const c = new EtcdLocks({ endpoints: [etcd.url], prefix: "js", sessionTtlMs: 3000, requestTimeoutMs: 1000, fetch: counting });
    const name = uniqueName("inj");
    const lock = await c.acquire(name);
    await lock.extend();
    await lock.release();
    assert.equal(await c.tryAcquire(name).then((l) => l?.release() ?? "none"), undefined);
    await c.close();
    globalThis.fetch = original;
    assert.ok(injected >= 4, `injected fetch used ${injected} times`);
    assert.equal(global, 0);
  });
});

describe("module formats", () => {
  test("require() loads the same API (Node >= 20.19)", (t) => {
    const [major, minor] = process.versions.node.split(".").map(Number);
    if (major === 20 && minor < 19) return skipUnlessRequired(t, "require(esm) needs Node >= 20.19");
    const require = createRequire(import.meta.url);
    const cjs = require("edgelock");
    assert.equal(typeof cjs.EtcdLocks, "function");
    assert.equal(cjs.LockError, LockError);
  });

  test("Symbol.asyncDispose releases a lock and closes a client", async (t) => {
    if (typeof Symbol.asyncDispose !== "symbol") return skipUnlessRequired(t, "no Symbol.asyncDispose in this runtime");
    const c = new EtcdLocks({ endpoints: [etcd.url], prefix: "js", sessionTtlMs: 3000, requestTimeoutMs: 1000 });
    const name = uniqueName("dispose");
    const lock = await c.acquire(name);
    await lock[Symbol.asyncDispose]();
    assert.equal(lock.signal.aborted, true);
    assert.deepEqual(await keysOf(name), []);
    await c[Symbol.asyncDispose]();
    await rejectsWith(c.acquire(name), "CLOSED");
  });
});

// Semaphores (`limit`), read-write locks (`mode`) and status() with holders.
describe("lock kinds (EtcdLocks)", () => {
  for (const [title, fn] of lockKindCases((extra = {}) => client({ prefix: "kinds", ...extra }), { queuedVisible: true, sharedGranted: true })) test(title, fn);
});

// Leader election and multi-resource locks.
describe("elections and multi-locks (EtcdLocks)", () => {
  const make = (extra = {}) => client({ prefix: "elect", ...extra });
  for (const [title, fn] of electionCases(make)) test(title, fn);
  for (const [title, fn] of multiLockCases(make)) test(title, fn);
  for (const [title, fn] of reentryCases(make)) test(title, fn);
});
