// Lock kinds through the npm API (`mode`, `limit`), the same tests for every
// backend family: etcd_locks.test.mjs and redis_locks.test.mjs call
// `lockKindCases` with a factory of clients of theirs (registering each case in their own file). Runtime-neutral
// (node:test and node:assert work under Node, Deno and Bun).
//
// What a backend does not grant yet is refused with INVALID_ARGUMENT before
// any request; semaphores (`limit`) are granted by the etcd and Redis
// recipes, read-write locks (`mode: "shared"`) by etcd and one Redis node
// (`sharedGranted`).
import assert from "node:assert/strict";
import { LockError, MAX_PERMITS } from "edgelock";

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
let seq = 0;
const unique = (base) => `${base}-${Date.now().toString(36)}-${(seq += 1)}`;

async function rejectsWith(promise, code) {
  const err = await promise.then(() => null, (e) => e);
  assert.ok(err instanceof LockError, `expected a LockError ${code}, got ${err}`);
  assert.equal(err.code, code, err.message);
  return err;
}

/** A fetch that counts the requests it is asked to make, then makes them. */
export function countingFetch() {
  const counter = { n: 0 };
  counter.fetch = (input, init) => {
    counter.n += 1;
    return fetch(input, init);
  };
  return counter;
}

/** Every bad `mode` / `limit` combination, with what the message must name. */
export const BAD_KINDS = [
  [{ limit: 0 }, "limit"],
  [{ limit: -1 }, "limit"],
  [{ limit: 1.5 }, "limit"],
  [{ limit: "3" }, "limit"],
  [{ limit: NaN }, "limit"],
  [{ limit: Infinity }, "limit"],
  [{ limit: null }, "limit"],
  [{ limit: MAX_PERMITS + 1 }, "limit"],
  [{ limit: 3, mode: "shared" }, "exclude"],
  [{ limit: 3, mode: "exclusive" }, "exclude"],
  [{ mode: "writer" }, "mode"],
  [{ mode: "permit" }, "limit"],
  [{ mode: 1 }, "mode"],
  [{ mode: null }, "mode"],
];

/**
 * `make(extra)` returns a new client of the family (tracked and closed by
 * the caller's file), `extra` merged into its options (e.g. `{ fetch }`).
 * Returns `[title, fn]` pairs. `queuedVisible`: the backend
 * lists waiters in `status().queued` (etcd). `sharedGranted`: the backend
 * grants read-write locks (etcd, one Redis node).
 */
export function lockKindCases(make, { queuedVisible = false, sharedGranted = false } = {}) {
  // The caller registers each case with node:test's `test` in its own file:
  // a test's file is where `test()` is called, and the runtimes' per-file
  // counts (support/count-reporter.mjs, run-runtime.mjs) compare by file.
  const cases = [];
  const test = (title, fn) => cases.push([title, fn]);
  {
    test("bad mode / limit is INVALID_ARGUMENT before any request, on acquire, tryAcquire and request", async () => {
      assert.equal(MAX_PERMITS, 100);
      const counter = countingFetch();
      const c = make({ fetch: counter.fetch });
      const name = unique("bad-kind");
      for (const [opts, word] of BAD_KINDS) {
        const what = JSON.stringify(opts, (k, v) => (typeof v === "number" && !Number.isFinite(v) ? String(v) : v));
        let e = await rejectsWith(c.acquire(name, { ...opts, waitMs: 100 }), "INVALID_ARGUMENT");
        assert.ok(e.message.includes(word), `${what}: ${e.message}`);
        await rejectsWith(c.tryAcquire(name, opts), "INVALID_ARGUMENT");
        let called = false;
        e = await rejectsWith(c.request(name, opts, () => { called = true; }), "INVALID_ARGUMENT");
        await rejectsWith(c.request(name, { ...opts, ifAvailable: true }, () => { called = true; }), "INVALID_ARGUMENT");
        assert.equal(called, false, `${what}: the callback ran`);
      }
      assert.equal(counter.n, 0, "no request was sent for bad input");
      // The counter does count: a valid acquire goes out through it.
      const lock = await c.tryAcquire(name);
      assert.ok(lock !== null);
      assert.ok(counter.n > 0, "the injected fetch carried the valid acquire");
      await lock.release();
    });

    if (sharedGranted) {
      test(`mode: "shared": readers side by side, no writer beside them; a writer's token is above every reader's`, async () => {
        const [a, b, w] = [make(), make(), make()];
        const name = unique("rw");
        const r1 = await a.tryAcquire(name, { mode: "shared" });
        const r2 = await b.acquire(name, { mode: "shared", waitMs: 1000 });
        assert.ok(r1 !== null && r2 !== null, "readers share");
        assert.equal(r1.mode, "shared");
        assert.equal(r1.toJSON().mode, "shared");
        assert.ok(r2.fencingToken > r1.fencingToken);
        assert.equal(await w.tryAcquire(name), null, "no writer beside readers");
        const s = await w.status(name);
        assert.equal(s.holders.length, 2);
        assert.ok(s.holders.every((h) => h.mode === "shared" && h.slot === null));
        const shown = JSON.stringify(s, (k, v) => (typeof v === "bigint" ? String(v) : v));
        assert.ok(!shown.includes(r1.toJSON().owner), "a reader's token leaked into the status");
        const writer = w.acquire(name, { waitMs: 5000 });
        await sleep(200);
        await r1.release();
        await r2.release();
        const lock = await writer;
        assert.equal(lock.mode, "exclusive");
        assert.ok(lock.fencingToken > r2.fencingToken);
        assert.equal(await a.tryAcquire(name, { mode: "shared" }), null, "no reader beside the writer");
        await lock.release();
      });
    } else {
      test('mode: "shared" is refused cleanly today (INVALID_ARGUMENT, nothing sent)', async () => {
        const counter = countingFetch();
        const c = make({ fetch: counter.fetch });
        const name = unique("shared");
        const e = await rejectsWith(c.acquire(name, { mode: "shared", waitMs: 100 }), "INVALID_ARGUMENT");
        assert.match(e.message, /does not offer shared locks/);
        await rejectsWith(c.tryAcquire(name, { mode: "shared" }), "INVALID_ARGUMENT");
        await rejectsWith(c.request(name, { mode: "shared" }, () => assert.fail("called")), "INVALID_ARGUMENT");
        assert.equal(counter.n, 0);
      });
    }

    test('an exclusive lock (default or mode: "exclusive") has mode "exclusive", no slot, and status lists it', async () => {
      const c = make();
      const name = unique("excl");
      const lock = await c.acquire(name, { mode: "exclusive" });
      assert.equal(lock.mode, "exclusive");
      assert.equal(lock.slot, null);
      assert.equal(lock.limit, null);
      assert.equal(lock.toJSON().mode, undefined, "an exclusive handle has no mode (old handles stay valid)");
      assert.equal(await c.tryAcquire(name), null);
      const s = await c.status(name);
      assert.equal(s.name, name);
      assert.equal(s.held, true);
      assert.equal(s.limit, null);
      assert.equal(s.holders.length, 1, JSON.stringify(s, (k, v) => (typeof v === "bigint" ? String(v) : v)));
      assert.equal(s.holders[0].mode, "exclusive");
      assert.equal(s.holders[0].slot, null);
      assert.equal(typeof s.fencingToken, "bigint");
      assert.ok(s.fencingToken >= lock.fencingToken);
      await lock.release();
      const free = await c.status(name);
      assert.equal(free.held, false);
      assert.deepEqual(free.holders, []);
      await rejectsWith(c.status(7), "INVALID_ARGUMENT");
    });

    test("limit: 3 gives three holders distinct slots; a 4th tryAcquire is refused; status lists the permits", async () => {
      const name = unique("sem");
      const holders = [make(), make(), make()];
      const permits = [];
      for (const c of holders) permits.push(await c.acquire(name, { limit: 3, waitMs: 5000 }));
      for (const p of permits) {
        assert.equal(p.mode, "permit");
        assert.equal(p.limit, 3);
        assert.equal(typeof p.slot, "number");
        assert.ok(p.slot >= 0 && p.slot < 3, `slot ${p.slot}`);
        assert.equal(typeof p.fencingToken, "bigint");
      }
      assert.deepEqual(permits.map((p) => p.slot).sort(), [0, 1, 2], "distinct slots");
      assert.equal(new Set(permits.map((p) => p.fencingToken)).size, 3, "distinct fencing tokens");
      const fourth = make();
      assert.equal(await fourth.tryAcquire(name, { limit: 3 }), null, "a 4th permit while 3 are held");
      assert.equal(await fourth.request(name, { limit: 3, ifAvailable: true }, (l) => l), null);

      const s = await fourth.status(name);
      assert.equal(s.held, true);
      assert.equal(s.limit, 3);
      assert.equal(s.holders.length, 3);
      assert.deepEqual(s.holders.map((h) => h.slot).sort(), [0, 1, 2]);
      for (const h of s.holders) {
        assert.equal(h.mode, "permit");
        assert.equal(h.limit, 3);
      }

      // A freed slot is taken again by the next holder.
      const freed = permits[1].slot;
      await permits[1].release();
      const next = await fourth.tryAcquire(name, { limit: 3 });
      assert.ok(next !== null, "a permit is free again");
      assert.equal(next.slot, freed);
      for (const p of [permits[0], permits[2], next]) await p.release();
      assert.equal((await fourth.status(name)).held, false);
    });

    test("at most `limit` holders at once under contention (request with limit: 2)", async () => {
      const name = unique("sem-load");
      let inside = 0;
      let maxInside = 0;
      // The first holders stay until a second one is inside beside them, so
      // the two permits are used at once by construction, not by how fast
      // this machine hands them out (a semaphore of 1 would leave them
      // waiting out the 10 s cap, and maxInside would say 1).
      let paired;
      const bothInside = new Promise((resolve) => { paired = resolve; });
      const atMost = (promise, ms) => {
        let timer;
        return Promise.race([promise, new Promise((resolve) => { timer = setTimeout(resolve, ms); })])
          .finally(() => clearTimeout(timer));
      };
      await Promise.all(Array.from({ length: 5 }, () => make()).map(async (c) => {
        for (let i = 0; i < 2; i += 1) {
          await c.request(name, { limit: 2, waitMs: 30_000 }, async (lock) => {
            assert.equal(lock.mode, "permit");
            inside += 1;
            maxInside = Math.max(maxInside, inside);
            if (inside >= 2) paired();
            await atMost(bothInside, 10_000);
            await sleep(30);
            inside -= 1;
          });
        }
      }));
      assert.equal(maxInside, 2, "two permits were used at once, never more");
    });

    test("toJSON() / resume() round trip of a permit keeps its kind and slot", async () => {
      const name = unique("sem-resume");
      const a = make();
      const first = await a.acquire(name, { limit: 2 });
      const permit = await a.acquire(name, { limit: 2 });
      const handle = JSON.parse(JSON.stringify(permit));
      assert.equal(handle.mode, "permit");
      assert.equal(handle.limit, 2);
      assert.equal(handle.slot, permit.slot);
      const resumed = await make().resume(handle);
      assert.equal(resumed.mode, "permit");
      assert.equal(resumed.limit, 2);
      assert.equal(resumed.slot, permit.slot);
      assert.equal(resumed.fencingToken, permit.fencingToken);
      await resumed.release();
      // The permit was given back: one slot is free again.
      const again = await make().tryAcquire(name, { limit: 2 });
      assert.ok(again !== null);
      assert.equal(again.slot, permit.slot);
      await rejectsWith(make().resume(handle), "LOST");
      await again.release();
      await first.release();
    });

    if (queuedVisible) {
      test("status lists a permit's waiter in queued", async () => {
        const name = unique("sem-queue");
        const held = await make().acquire(name, { limit: 1 });
        const waiting = make().acquire(name, { limit: 1, waitMs: 20_000 });
        const c = make();
        let s;
        for (let i = 0; i < 100; i += 1) {
          s = await c.status(name);
          if (s.queued.length === 1) break;
          await sleep(50);
        }
        assert.equal(s.queued.length, 1);
        assert.equal(s.queued[0].mode, "permit");
        assert.equal(s.queued[0].limit, 1);
        assert.equal(s.limit, 1);
        await held.release();
        const next = await waiting;
        assert.equal(next.slot, 0);
        await next.release();
      });
    }
  }
  return cases;
}
