// Leader election (campaign / leader / observe / proclaim / resign) and
// multi-resource locks (acquireAll) through the npm API, the same tests for
// every backend family: etcd_locks.test.mjs and redis_locks.test.mjs
// register the cases in their own files (node:test attributes a test to the
// file that calls `test()`; the Deno/Bun phases compare per-file counts).
// Runtime-neutral (node:test and node:assert work under Node, Deno and Bun).
import assert from "node:assert/strict";
import { LockError, MAX_ACQUIRE_ALL, MAX_CAMPAIGN_VALUE } from "edgelock";
import { countingFetch } from "./kinds.mjs";

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
let seq = 0;
const unique = (base) => `${base}-${Date.now().toString(36)}-${(seq += 1)}`;

async function rejectsWith(promise, code) {
  const err = await promise.then(() => null, (e) => e);
  assert.ok(err instanceof LockError, `expected a LockError ${code}, got ${err}`);
  assert.equal(err.code, code, err.message);
  return err;
}

function throwsWith(fn, code) {
  try {
    fn();
  } catch (e) {
    assert.ok(e instanceof LockError, `expected a LockError ${code}, got ${e}`);
    assert.equal(e.code, code, e.message);
    return e;
  }
  assert.fail(`expected a LockError ${code}`);
}

async function until(check, ms = 10_000, what = "condition") {
  const end = Date.now() + ms;
  for (;;) {
    const v = await check();
    if (v) return v;
    if (Date.now() > end) assert.fail(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

/** Collects what `observe(name)` yields, until the returned `stop()`. */
function observeInto(client, name) {
  const seen = [];
  const ctl = new AbortController();
  const done = (async () => {
    for await (const leader of client.observe(name, { signal: ctl.signal })) seen.push(leader);
  })();
  return { seen, latest: () => seen.at(-1), stop: async () => { ctl.abort(); await done; } };
}

const same = (l, value, token) => l !== null && l !== undefined && l.value === value && (token === undefined || l.fencingToken === token);

/** `make(extra)` returns a new client of the family, `extra` merged into its options. Returns `[title, fn]` pairs. */
export function electionCases(make) {
  const cases = [];
  const test = (title, fn) => cases.push([title, fn]);

  test("election: bad input is INVALID_ARGUMENT before any request (value type and size, options, proclaim after resign)", async () => {
    assert.equal(MAX_CAMPAIGN_VALUE, 4096);
    const counter = countingFetch();
    const c = make({ fetch: counter.fetch });
    const name = unique("bad-elect");
    for (const value of [undefined, null, 42, {}, ["v"]]) {
      await rejectsWith(c.campaign(name, value), "INVALID_ARGUMENT");
    }
    const e = await rejectsWith(c.campaign(name, "v".repeat(MAX_CAMPAIGN_VALUE + 1)), "INVALID_ARGUMENT");
    assert.match(e.message, /at most 4096 bytes/);
    // Multi-byte characters count in bytes: 2049 "é" are 4098 bytes.
    await rejectsWith(c.campaign(name, "é".repeat(2049)), "INVALID_ARGUMENT");
    await rejectsWith(c.campaign(name, "v", { waitMs: -1 }), "INVALID_ARGUMENT");
    await rejectsWith(c.campaign(name, "v", { limit: 3 }), "INVALID_ARGUMENT");
    await rejectsWith(c.campaign("", "v"), "INVALID_ARGUMENT");
    await rejectsWith(c.leader(42), "INVALID_ARGUMENT");
    await rejectsWith(c.leader(""), "INVALID_ARGUMENT");
    throwsWith(() => c.observe(name, { waitMs: 5 }), "INVALID_ARGUMENT");
    throwsWith(() => c.observe(7), "INVALID_ARGUMENT");
    assert.equal(counter.n, 0, "no request was sent for bad input");
    const me = await c.campaign(name, "v", { waitMs: 5000 });
    await rejectsWith(me.proclaim(7), "INVALID_ARGUMENT");
    await rejectsWith(me.proclaim("v".repeat(MAX_CAMPAIGN_VALUE + 1)), "INVALID_ARGUMENT");
    await me.resign();
    const sent = counter.n;
    const after = await rejectsWith(me.proclaim("later"), "INVALID_ARGUMENT");
    assert.match(after.message, /proclaim after resign/);
    assert.equal(counter.n, sent, "proclaim after resign sent nothing");
    assert.equal(await c.leader(name), null, "the resigned leader left no record");
  });

  test("election: campaign, leader, proclaim, resign; the next candidate leads with a higher token", async () => {
    const [a, b, watcher] = [make(), make(), make()];
    const name = unique("elect");
    assert.equal(await watcher.leader(name), null);
    const la = await a.campaign(name, "node-a", { waitMs: 5000 });
    assert.equal(la.mode, "leader");
    assert.equal(la.value, "node-a");
    assert.equal(typeof la.fencingToken, "bigint");
    const now = await watcher.leader(name);
    assert.deepEqual(now, { value: "node-a", fencingToken: la.fencingToken });
    // b waits in line while a leads.
    let bLeads = false;
    const lb = b.campaign(name, "node-b", { waitMs: 10_000 }).then((l) => { bLeads = true; return l; });
    await sleep(300);
    assert.equal(bLeads, false, "a second leader while the first leads");
    await la.proclaim("node-a:9090");
    assert.equal(la.value, "node-a:9090");
    assert.deepEqual(await watcher.leader(name), { value: "node-a:9090", fencingToken: la.fencingToken });
    await la.resign();
    assert.equal(la.signal.aborted, true);
    assert.equal(la.signal.reason.code, "NOT_HELD");
    const leaderB = await lb;
    assert.ok(leaderB.fencingToken > la.fencingToken, "tokens increase across leaders");
    assert.deepEqual(await watcher.leader(name), { value: "node-b", fencingToken: leaderB.fencingToken });
    await leaderB.resign();
    assert.equal(await watcher.leader(name), null);
  });

  test("election: observe yields the current leader, then every change, and ends on abort", async () => {
    const [a, b, watcher] = [make(), make(), make()];
    const name = unique("observe");
    const la = await a.campaign(name, "a1", { waitMs: 5000 });
    const obs = observeInto(watcher, name);
    await until(() => same(obs.latest(), "a1", la.fencingToken), 10_000, "the current leader first");
    assert.equal(obs.seen.length, 1);
    await la.proclaim("a2");
    await until(() => same(obs.latest(), "a2", la.fencingToken), 10_000, "the proclaimed value");
    const lb = b.campaign(name, "b1", { waitMs: 10_000 });
    await sleep(100);
    await la.resign();
    const leaderB = await lb;
    await until(() => same(obs.latest(), "b1", leaderB.fencingToken), 10_000, "the next leader");
    await leaderB.resign();
    await until(() => obs.latest() === null, 10_000, "nobody leads");
    await obs.stop();
    const tokens = obs.seen.filter((l) => l !== null).map((l) => l.fencingToken);
    assert.deepEqual(tokens, [...tokens].sort((x, y) => (x < y ? -1 : x > y ? 1 : 0)), "tokens never go back");
    for (let i = 1; i < obs.seen.length; i++) {
      const [p, q] = [obs.seen[i - 1], obs.seen[i]];
      assert.ok(!(p === null && q === null) && !(p && q && p.value === q.value && p.fencingToken === q.fencingToken), "each item is a change");
    }
    // Leaving a for-await loop ends the observation too.
    for await (const l of watcher.observe(name)) {
      assert.equal(l, null);
      break;
    }
  });

  test("election: observe retries failed requests with backoff, then reports a backend that stays unreachable", async () => {
    // `failNext` requests fail as a dropped connection would; `failAll` every one.
    const flaky = { failNext: 0, failAll: false, failed: 0 };
    const flakyFetch = (input, init) => {
      if (flaky.failAll || flaky.failNext > 0) {
        flaky.failNext = Math.max(0, flaky.failNext - 1);
        flaky.failed += 1;
        return Promise.reject(new TypeError("fetch failed (injected)"));
      }
      return fetch(input, init);
    };
    const [a, watcher] = [make(), make({ fetch: flakyFetch })];
    const name = unique("observe-flaky");
    const la = await a.campaign(name, "a1", { waitMs: 5000 });
    flaky.failNext = 2;
    const obs = observeInto(watcher, name);
    await until(() => same(obs.latest(), "a1", la.fencingToken), 10_000, "the current leader, after two failures");
    assert.equal(flaky.failed, 2, "the first reads failed and were retried");
    flaky.failNext = 2;
    await la.proclaim("a2");
    await until(() => same(obs.latest(), "a2", la.fencingToken), 10_000, "the proclaimed value, after two more failures");
    await la.resign();
    await until(() => obs.latest() === null, 10_000, "nobody leads");
    assert.equal(flaky.failed, 4, "every injected failure was met and ridden out");
    await obs.stop();
    // Unreachable for good: the observer gives up after five retries (50 … 800 ms).
    flaky.failAll = true;
    const t0 = Date.now();
    const err = await (async () => {
      for await (const _ of watcher.observe(name)) assert.fail("nothing is yielded while unreachable");
    })().then(() => null, (e) => e);
    assert.ok(err instanceof LockError, `a LockError, got ${err}`);
    assert.ok(["TRANSPORT", "NO_QUORUM"].includes(err.code), err.message);
    assert.ok(Date.now() - t0 >= 1400, `reported after ${Date.now() - t0} ms: before the retries ran`);
  });

  test("election: a leadership's handle resumes in another client, which can proclaim; resume keeps the value", async () => {
    const [a, b, watcher] = [make(), make(), make()];
    const name = unique("resume-lead");
    const la = await a.campaign(name, "first", { waitMs: 5000 });
    const handle = la.toJSON();
    assert.equal(handle.mode, "leader");
    assert.equal(handle.value, "first");
    const again = await b.resume(JSON.parse(JSON.stringify(handle)));
    assert.equal(again.mode, "leader");
    assert.equal(again.value, "first");
    assert.equal(again.fencingToken, la.fencingToken);
    await again.proclaim("second");
    assert.deepEqual(await watcher.leader(name), { value: "second", fencingToken: la.fencingToken });
    await again.resign();
    assert.equal(await watcher.leader(name), null);
  });

  return cases;
}

/**
 * `make(extra)` returns a new client of the family. Returns `[title, fn]`
 * pairs. `churn`: options for the clients of the churning test (webdis
 * 0.1.9 writes pub/sub chunks of closed subscribers into reused keep-alive
 * sockets — README, reliability 10b — so its family polls there).
 */
export function multiLockCases(make, { churn = {} } = {}) {
  const cases = [];
  const test = (title, fn) => cases.push([title, fn]);

  test("acquireAll: bad input is INVALID_ARGUMENT before any request", async () => {
    assert.equal(MAX_ACQUIRE_ALL, 16);
    const counter = countingFetch();
    const c = make({ fetch: counter.fetch });
    const many = Array.from({ length: MAX_ACQUIRE_ALL + 1 }, (_, i) => `n${i}`);
    for (const [names, word] of [[[], "at least one"], [["a", "b", "a"], "twice"], [many, "at most 16"], [["a", ""], "name"]]) {
      const e = await rejectsWith(c.acquireAll(names), "INVALID_ARGUMENT");
      assert.ok(e.message.includes(word), `${JSON.stringify(names).slice(0, 40)}: ${e.message}`);
    }
    for (const names of ["a", null, undefined, [1], ["a", {}]]) await rejectsWith(c.acquireAll(names), "INVALID_ARGUMENT");
    await rejectsWith(c.acquireAll(["a"], { mode: "shared" }), "INVALID_ARGUMENT");
    await rejectsWith(c.acquireAll(["a"], { ifAvailable: true, waitMs: 5 }), "INVALID_ARGUMENT");
    assert.equal(counter.n, 0, "no request was sent for bad input");
  });

  test("acquireAll: holds every name, each with its own token, in the order given; release frees all", async () => {
    const [c, other] = [make(), make()];
    const [x, y, z] = [unique("mx"), unique("my"), unique("mz")];
    const set = await c.acquireAll([z, x, y], { waitMs: 5000 });
    assert.deepEqual(set.locks.map((l) => l.name), [z, x, y], "locks in the caller's order");
    for (const l of set.locks) {
      assert.equal(l.mode, "exclusive");
      assert.equal(typeof l.fencingToken, "bigint");
      assert.equal(await other.tryAcquire(l.name), null, `${l.name} is held`);
    }
    assert.equal(set.signal.aborted, false);
    await set.release();
    assert.equal(set.signal.aborted, true);
    for (const n of [x, y, z]) {
      const l = await other.tryAcquire(n);
      assert.ok(l !== null, `${n} was released`);
      await l.release();
    }
  });

  test("acquireAll: a conflict leaves nothing held (ifAvailable → null, waitMs → TIMEOUT)", async () => {
    const [c, other] = [make(), make()];
    const [a, b, d] = [unique("ca"), unique("cb"), unique("cd")];
    const blocker = await other.acquire(b);
    assert.equal(await c.acquireAll([a, b, d], { ifAvailable: true }), null);
    await rejectsWith(c.acquireAll([d, b, a], { waitMs: 300 }), "TIMEOUT");
    for (const n of [a, d]) {
      const l = await other.tryAcquire(n);
      assert.ok(l !== null, `${n} was left held by a failed acquireAll`);
      await l.release();
    }
    await blocker.release();
  });

  test("acquireAll: clients asking for overlapping sets in opposite orders never deadlock, and exclude each other", async () => {
    const names = [unique("da"), unique("db"), unique("dc")];
    const orders = [names, [...names].reverse(), [names[1], names[2], names[0]]];
    const holders = new Map();
    let rounds = 0;
    await Promise.all(orders.map(async (order, i) => {
      const c = make(churn);
      for (let r = 0; r < 6; r++) {
        const set = await c.acquireAll(order, { waitMs: 20_000 });
        for (const n of order) {
          assert.equal(holders.get(n), undefined, `${n} held by client ${holders.get(n)} and ${i}`);
          holders.set(n, i);
        }
        await sleep(5);
        for (const n of order) holders.delete(n);
        await set.release();
        rounds += 1;
      }
    }));
    assert.equal(rounds, 18);
  });

  return cases;
}

/**
 * Re-entry by proof of ownership (`reenter(lock or handle)`) and, where the
 * runtime has AsyncLocalStorage (Node, Deno, Bun), a nested `request()` of
 * a held name. Every backend counts holds: etcd, one Redis node and
 * Redlock (each node counts the holds it saw, a quorum decides).
 */
export function reentryCases(make) {
  const cases = [];
  const test = (title, fn) => cases.push([title, fn]);

  test("reenter: another client re-enters with the handle; same token; freed only after the last hold, in either order", async () => {
    const [a, b, other] = [make(), make(), make()];
    for (const outerFirst of [true, false]) {
      const name = unique("reenter");
      const outer = await a.acquire(name);
      const inner = await b.reenter(JSON.parse(JSON.stringify(outer.toJSON())));
      assert.equal(inner.fencingToken, outer.fencingToken, "the outer hold's token");
      assert.equal(inner.name, name);
      const [first, second] = outerFirst ? [outer, inner] : [inner, outer];
      await first.release();
      assert.equal(await other.tryAcquire(name), null, "one hold remains: still held");
      await second.release();
      const next = await other.tryAcquire(name);
      assert.ok(next !== null, "free after the last hold");
      assert.ok(next.fencingToken > outer.fencingToken);
      await next.release();
    }
    // Bad input: no request, INVALID_ARGUMENT.
    for (const bad of [null, 42, undefined]) await rejectsWith(a.reenter(bad), "INVALID_ARGUMENT");
    const permit = await a.acquire(unique("reenter-permit"), { limit: 2 });
    await rejectsWith(a.reenter(permit), "INVALID_ARGUMENT");
    await permit.release();
  });

  test("reenter: a handle whose lock is gone is LOST and frees nothing", async () => {
    const [a, other] = [make(), make()];
    const name = unique("reenter-gone");
    const outer = await a.acquire(name);
    const handle = outer.toJSON();
    await outer.release();
    const next = await other.acquire(name);
    await rejectsWith(a.reenter(handle), "LOST");
    assert.equal(await a.tryAcquire(name), null, "the next holder still holds");
    await next.release();
  });

  test("request() nested in request() of the same name re-enters in the same async call chain (no self-deadlock)", async () => {
    const [c, other] = [make(), make()];
    const name = unique("nested");
    const tokens = await c.request(name, { waitMs: 5000 }, async (outer) => {
      const innerToken = await c.request(name, { waitMs: 2000 }, async (inner) => {
        await new Promise((r) => setTimeout(r, 10)); // still the same call chain after a timer
        return inner.fencingToken;
      });
      assert.equal(await other.tryAcquire(name), null, "the outer hold remains after the inner one ended");
      return [outer.fencingToken, innerToken];
    });
    assert.equal(tokens[0], tokens[1], "the inner hold has the outer's token");
    const after = await other.tryAcquire(name);
    assert.ok(after !== null, "free after the outer request");
    await after.release();
    // Another call chain does not re-enter: it waits like anyone else.
    const held = await c.acquire(name);
    await rejectsWith(c.request(name, { waitMs: 200 }, () => assert.fail("ran")), "TIMEOUT");
    await held.release();
  });

  return cases;
}
