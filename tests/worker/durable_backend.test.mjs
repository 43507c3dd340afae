// The `durable-object` backend (src/core/durable) against the lock service
// of this Worker (src/worker/lock_object) in workerd through Miniflare:
//   - the job coordinator with EDGELOCK_BACKEND=durable-object, reaching the
//     objects through its EDGELOCK_LOCKS binding: 20 concurrent job runs are
//     mutually excluded, with strictly increasing tokens at the fenced resource;
//   - the npm package (pkg/, scripts/build-pkg.sh) in Node, reaching the
//     service by URL through the Worker's front `/lock` with the test token.
// Needs build/ (scripts/build-worker.sh), pkg/ and the devtools' testenv
// (for the fenced resource only).

import assert from 'node:assert/strict';
import { cpSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { Miniflare } from 'miniflare';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { after, before, describe, test } from 'node:test';
import { assertSerialRuns, buildDir, startWorkers, TEST_API_TOKEN } from './support.mjs';
import { findDevtoolsBin, repoRoot, spawnWithJsonLine, stopChild } from '../js/testenv.mjs';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
/**
 * Polls `check` until it answers truthy; `ms` is a must-happen bound (what
 * is waited for follows by construction), not a timing assumption.
 */
async function until(check, ms, what) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await check();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await sleep(20);
  }
}
/** Resolves once `client`'s status of `name` lists `n` waiters (20 s must-happen bound). */
const queued = (client, name, n, what) => until(async () => (await client.status(name)).queued.length === n, 20_000, what);
const uniq = (s) => `${s}-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 6)}`;

/** testenv with only the fenced resource. */
async function startFenced() {
  const env = { ...process.env };
  delete env.EDGELOCK_TESTENV_TOKEN;
  const { child, info } = await spawnWithJsonLine(findDevtoolsBin('testenv'), ['--fenced'], { env, timeoutMs: 120_000 });
  child.unref();
  for (const s of [child.stdout, child.stderr, child.stdin]) s.unref?.();
  assert.ok(info.fenced_url, 'testenv started a fenced resource');
  return { ...info, stop: () => stopChild(child) };
}

describe('job coordinator on the durable-object backend', { timeout: 180_000 }, () => {
  let env;
  let w;
  before(async () => {
    env = await startFenced();
    w = await startWorkers(
      {
        main: {
          EDGELOCK_BACKEND: 'durable-object',
          EDGELOCK_FENCED_URL: env.fenced_url,
          EDGELOCK_JOB_MS: '20',
        },
      },
      { lockObjects: true },
    );
  });
  after(async () => {
    await w?.dispose();
    await env?.stop();
  });

  test('GET / names the backend', async () => {
    const r = await w.call(null, 'GET', '/');
    assert.equal(r.status, 200, r.text);
    assert.equal(r.body.backend, 'durable-object');
  });

  test('an uncontended run holds the lock of the service, with its token', async () => {
    const job = uniq('solo');
    const r = await w.call(null, 'POST', `/jobs/${job}/run`);
    assert.equal(r.status, 200, r.text);
    assert.match(r.body.token, /^[1-9][0-9]*$/);
    assert.equal(r.body.accepted, true);
    assert.deepEqual(r.body.release, { released: true, heldUntilRelease: true });
    console.log(`# durable-object: one uncontended job run = ${r.body.subrequests.lock} lock + ${r.body.subrequests.job} job subrequests`);
    const s = await w.call(null, 'GET', `/locks/${job}`);
    assert.equal(s.status, 200, s.text);
    assert.equal(s.body.held, false);
  });

  test('busy: 409 with ifAvailable, 504 after waitMs; a handle taken in one invocation is finished by another', async () => {
    const job = uniq('handle');
    const held = await w.call(null, 'POST', `/jobs/${job}/start`);
    assert.equal(held.status, 200, held.text);
    assert.equal(held.body.handle.backend, 'durable-object');
    const busy = await w.call(null, 'POST', `/jobs/${job}/run?ifAvailable`);
    assert.equal(busy.status, 409, busy.text);
    const t0 = Date.now();
    const timeout = await w.call(null, 'POST', `/jobs/${job}/run`, { waitMs: 400 });
    assert.equal(timeout.status, 504, timeout.text);
    assert.equal(timeout.body.code, 'TIMEOUT');
    assert.ok(Date.now() - t0 >= 350, 'it waited');
    const status = await w.call(null, 'GET', `/locks/${job}`);
    assert.equal(status.body.held, true, status.text);
    assert.equal(status.body.token, held.body.token, status.text);
    const done = await w.call(null, 'POST', `/jobs/${job}/finish`, JSON.stringify({ handle: held.body.handle }));
    assert.equal(done.status, 200, done.text);
    assert.equal(done.body.token, held.body.token);
    assert.deepEqual(done.body.release, { released: true, heldUntilRelease: true });
    const again = await w.call(null, 'POST', `/jobs/${job}/finish`, { handle: held.body.handle });
    assert.equal(again.status, 409, again.text);
    assert.equal(again.body.code, 'LOST');
    const next = await w.call(null, 'POST', `/jobs/${job}/run?ifAvailable`);
    assert.equal(next.status, 200, next.text);
    assert.ok(BigInt(next.body.token) > BigInt(held.body.token));
  });

  test('20 concurrent POST /jobs/:name/run: one at a time, strictly increasing tokens', async () => {
    const job = uniq('burst');
    const replies = await Promise.all(
      Array.from({ length: 20 }, () => w.call(null, 'POST', `/jobs/${job}/run?waitMs=60000`)),
    );
    for (const r of replies) {
      assert.equal(r.status, 200, r.text);
      assert.ok(r.body.subrequests.total <= 50, `within the budget: ${JSON.stringify(r.body.subrequests)}`);
    }
    const entries = await assertSerialRuns(env, job, 20);
    assert.deepEqual(
      new Set(entries.map((e) => e.token)),
      new Set(replies.map((r) => r.body.token)),
      'each reply carries the token its run wrote with',
    );
  });
});

const pkgEntry = path.join(repoRoot, 'pkg', 'index.node.mjs');

describe('the npm package reaches the service by URL through the front', { timeout: 120_000 }, () => {
  let w;
  let base;
  let DurableObjectLocks;
  const clients = [];
  const connect = (options = {}) => {
    const c = new DurableObjectLocks({ url: base, token: TEST_API_TOKEN, ...options });
    clients.push(c);
    return c;
  };
  before(async () => {
    ({ DurableObjectLocks } = await import(pathToFileURL(pkgEntry).href));
    w = await startWorkers({ main: {} }, { lockObjects: true });
    base = new URL('/lock', await w.mf.ready).href;
  });
  after(async () => {
    for (const c of clients) await c.close().catch(() => {});
    await w?.dispose();
  });

  test('acquire, tryAcquire, extend, status and release', async () => {
    const [a, b] = [connect(), connect()];
    const name = uniq('npm/basic é');
    const lock = await a.acquire(name, { ttlMs: 5000 });
    assert.ok(BigInt(lock.fencingToken) > 0n);
    assert.equal(await b.tryAcquire(name), null);
    const s = await b.status(name);
    assert.equal(s.held, true);
    assert.equal(BigInt(s.fencingToken), BigInt(lock.fencingToken));
    const before = lock.expiresAt;
    await sleep(20);
    await lock.extend(20_000);
    assert.ok(lock.expiresAt > before + 10_000, `${lock.expiresAt} > ${before}`);
    const handle = lock.toJSON();
    assert.equal(handle.backend, 'durable-object');
    const resumed = await connect().resume(handle);
    assert.equal(BigInt(resumed.fencingToken), BigInt(lock.fencingToken));
    await lock.release();
    const next = await b.tryAcquire(name);
    assert.ok(BigInt(next.fencingToken) > BigInt(lock.fencingToken));
    await next.release();
    assert.equal((await a.status(name)).held, false);
  });

  test('a waiter is handed the lock at the release', async () => {
    const [a, b] = [connect(), connect()];
    const name = uniq('npm-handoff');
    const first = await a.acquire(name);
    const started = Date.now();
    const waiting = b.acquire(name, { waitMs: 20_000 });
    await sleep(300);
    // Queued before the release, however slow the machine: a handoff, not a free lock.
    await queued(a, name, 1, 'b queued');
    await first.release();
    const second = await waiting;
    assert.ok(Date.now() - started >= 250);
    assert.ok(BigInt(second.fencingToken) > BigInt(first.fencingToken));
    await second.release();
    // A wait that runs out is TIMEOUT.
    const third = await a.acquire(name);
    await assert.rejects(b.acquire(name, { waitMs: 300 }), (e) => e.code === 'TIMEOUT');
    await third.release();
  });

  test('an aborted waiter leaves the queue: the next one gets the lock', async () => {
    const [a, b, c] = [connect(), connect(), connect()];
    const name = uniq('npm-abort');
    const first = await a.acquire(name);
    const controller = new AbortController();
    const aborted = b.acquire(name, { waitMs: 20_000, signal: controller.signal });
    // Aborted while queued (not before it reached the queue).
    await queued(a, name, 1, 'b queued');
    controller.abort();
    await assert.rejects(aborted, (e) => e.code === 'ABORTED');
    await queued(a, name, 0, 'the aborted b to leave the queue');
    const third = c.acquire(name, { waitMs: 20_000 });
    await queued(a, name, 1, 'c queued');
    const released = Date.now();
    await first.release();
    const got = await third;
    // Handed straight to c: a stale waiter of b granted in between would
    // have taken the next token (and held it for its lease), so c's token
    // would be 2 past first's. A count, not a time bound.
    console.log(`# durable-object: an aborted waiter skipped, handed over in ${Date.now() - released} ms`);
    assert.equal(BigInt(got.fencingToken), BigInt(first.fencingToken) + 1n, 'no grant between first and c');
    await got.release();
  });

  test('a lock released by someone else is lost at its next renewal', async () => {
    const a = connect({ ttlMs: 900 });
    const name = uniq('npm-lost');
    const lock = await a.acquire(name);
    // Its owner, from its handle, releases it behind the client's back.
    const other = connect();
    const copy = await other.resume(lock.toJSON());
    await copy.release();
    await new Promise((resolve) => {
      if (lock.signal.aborted) resolve();
      lock.signal.addEventListener('abort', resolve, { once: true });
    });
    assert.equal(lock.signal.reason.code, 'LOST');
  });

  test('limit: 3 — 10 concurrent holders, never more than 3 at once, each in a slot of its own', async () => {
    const name = uniq('npm-sem');
    let inside = 0;
    let maxInside = 0;
    const slots = new Set();
    const tokens = [];
    // A barrier: the first holders stay inside until 3 are in at once (or a
    // 20 s must-happen bound ran out: then maxInside says how many were),
    // so that the limit is reached by construction, not by 60 ms holds
    // happening to overlap.
    let full;
    let bound;
    const barrier = new Promise((r) => {
      full = r;
      bound = setTimeout(r, 20_000);
    });
    await Promise.all(
      Array.from({ length: 10 }, () => connect()).map((c) =>
        c.request(name, { limit: 3, waitMs: 30_000 }, async (lock) => {
          assert.equal(lock.mode, 'permit');
          assert.equal(lock.limit, 3);
          assert.ok(lock.slot >= 0 && lock.slot < 3, `slot ${lock.slot}`);
          assert.ok(!slots.has(lock.slot), `slot ${lock.slot} is held twice`);
          slots.add(lock.slot);
          inside += 1;
          maxInside = Math.max(maxInside, inside);
          if (inside === 3) full();
          tokens.push(BigInt(lock.fencingToken));
          await barrier;
          await sleep(60);
          inside -= 1;
          slots.delete(lock.slot);
        }),
      ),
    ).finally(() => clearTimeout(bound));
    assert.equal(maxInside, 3, 'three permits were used at once, never more');
    assert.equal(new Set(tokens).size, 10, 'every permit has its own token');
    // Status lists the permits; another limit is refused while they are held.
    const [a, b] = [connect(), connect()];
    const p1 = await a.acquire(name, { limit: 3 });
    const p2 = await b.acquire(name, { limit: 3 });
    const s = await a.status(name);
    assert.equal(s.held, true);
    assert.equal(s.limit, 3);
    assert.deepEqual(s.holders.map((h) => [h.mode, h.slot]).sort(), [['permit', p1.slot], ['permit', p2.slot]].sort());
    await assert.rejects(connect().tryAcquire(name, { limit: 4 }), (e) => e.code === 'INVALID_ARGUMENT' && /limit 3/.test(e.message));
    // A permit's handle keeps its kind and slot through resume.
    const handle = JSON.parse(JSON.stringify(p2));
    assert.deepEqual([handle.mode, handle.limit, handle.slot], ['permit', 3, p2.slot]);
    const resumed = await connect().resume(handle);
    assert.deepEqual([resumed.mode, resumed.limit, resumed.slot], ['permit', 3, p2.slot]);
    const asExclusive = { ...handle };
    delete asExclusive.mode;
    delete asExclusive.limit;
    delete asExclusive.slot;
    await assert.rejects(connect().resume(asExclusive), (e) => e.code === 'INVALID_ARGUMENT' && /permit/.test(e.message));
    await resumed.release();
    await p1.release();
    // None held: the limit may change.
    const other = await a.tryAcquire(name, { limit: 4 });
    assert.ok(other !== null);
    await other.release();
  });

  test('mode: "shared": readers together, a writer alone, a queued writer not overtaken by later readers', async () => {
    const [r1c, r2c, wc, r3c] = [connect(), connect(), connect(), connect()];
    const name = uniq('npm-rw');
    const r1 = await r1c.acquire(name, { mode: 'shared' });
    const r2 = await r2c.tryAcquire(name, { mode: 'shared' });
    assert.ok(r2 !== null, 'readers share');
    assert.equal(r1.mode, 'shared');
    assert.equal(r1.toJSON().mode, 'shared');
    assert.ok(BigInt(r2.fencingToken) > BigInt(r1.fencingToken));
    assert.equal(await wc.tryAcquire(name), null, 'no writer beside readers');
    const s = await wc.status(name);
    assert.equal(s.holders.length, 2);
    assert.ok(s.holders.every((h) => h.mode === 'shared' && h.slot === null));
    let writerAt = 0;
    let readerAt = 0;
    const writer = wc.acquire(name, { waitMs: 20_000 }).then((l) => { writerAt = Date.now(); return l; });
    // The writer is queued before the later reader arrives, however slow the machine.
    await queued(wc, name, 1, 'the writer queued');
    // A reader arriving after the queued writer waits behind it.
    const reader = r3c.acquire(name, { mode: 'shared', waitMs: 20_000 }).then((l) => { readerAt = Date.now(); return l; });
    await queued(wc, name, 2, 'the later reader queued');
    await sleep(200);
    assert.equal(readerAt, 0, 'a later reader overtook the queued writer');
    await r1.release();
    await sleep(100);
    assert.equal(writerAt, 0, 'the writer was granted beside a reader');
    await r2.release();
    const w = await writer;
    assert.equal(w.mode, 'exclusive');
    assert.ok(BigInt(w.fencingToken) > BigInt(r2.fencingToken));
    await sleep(200);
    assert.equal(readerAt, 0, 'a reader was granted beside the writer');
    assert.equal(await r1c.tryAcquire(name, { mode: 'shared' }), null, 'no reader beside the writer');
    await w.release();
    const r3 = await reader;
    assert.ok(readerAt >= writerAt);
    assert.ok(BigInt(r3.fencingToken) > BigInt(w.fencingToken));
    await r3.release();
    assert.equal((await r1c.status(name)).held, false);
  });

  test('a wrong token is refused without being repeated', async () => {
    const c = connect({ token: 'wrong-token-0123456789' });
    await assert.rejects(c.acquire(uniq('npm-auth')), (e) => {
      assert.equal(e.code, 'BACKEND');
      assert.ok(!e.message.includes('wrong-token-0123456789'), e.message);
      return true;
    });
  });
});

// A Worker of its own using the package's workerd export, with the
// LockObject namespace (of the built Worker) bound as LOCKS and reached
// through lockServiceRouter: no front, no token.
const APP = `
import { DurableObjectLocks, lockServiceRouter } from "./edgelock/index.workerd.mjs";

export default {
  async fetch(request, env) {
    const name = new URL(request.url).searchParams.get("name");
    const options = { binding: "LOCKS", bindings: { LOCKS: lockServiceRouter(env.LOCKS) } };
    const a = new DurableObjectLocks(options);
    const b = new DurableObjectLocks(options);
    try {
      const first = await a.acquire(name);
      const busy = await b.tryAcquire(name);
      const waiting = b.acquire(name, { waitMs: 10000 });
      // Released once b is queued (a handoff, however slow the machine; 20 s must-happen bound).
      for (let i = 0; (await a.status(name)).queued.length < 1; i++) {
        if (i === 1000) throw new Error("b was not queued within 20 s");
        await new Promise((r) => setTimeout(r, 20));
      }
      await first.release();
      const second = await waiting;
      const status = await a.status(name);
      await second.release();
      return Response.json({
        first: String(first.fencingToken),
        busy: busy === null,
        second: String(second.fencingToken),
        heldWhileSecond: status.held,
        backend: second.toJSON().backend,
      });
    } catch (e) {
      return Response.json({ error: String(e && e.message), code: e && e.code }, { status: 500 });
    } finally {
      await a.close();
      await b.close();
    }
  },
};
`;

describe('the npm package inside a Worker, through lockServiceRouter', { timeout: 120_000 }, () => {
  let mf;
  let dir;
  before(async () => {
    dir = mkdtempSync(path.join(tmpdir(), 'edgelock-do-app-'));
    cpSync(path.dirname(pkgEntry), path.join(dir, 'edgelock'), { recursive: true });
    writeFileSync(path.join(dir, 'app.mjs'), APP);
    const wasm = [{ type: 'CompiledWasm', include: ['**/*.wasm'] }];
    mf = new Miniflare({
      cf: false,
      workers: [
        {
          name: 'app',
          modules: true,
          scriptPath: path.join(dir, 'app.mjs'),
          modulesRoot: dir,
          // The package's glue (edgelock_wasm.js) is an ES module too.
          modulesRules: [...wasm, { type: 'ESModule', include: ['**/*.js', '**/*.mjs'] }],
          compatibilityDate: '2026-04-20',
          durableObjects: { LOCKS: { className: 'LockObject', scriptName: 'locks' } },
        },
        {
          name: 'locks',
          modules: true,
          scriptPath: path.join(buildDir, 'index.js'),
          modulesRoot: buildDir,
          modulesRules: wasm,
          compatibilityDate: '2026-04-20',
          bindings: { EDGELOCK_API_TOKEN: TEST_API_TOKEN },
          durableObjects: { EDGELOCK_LOCKS: 'LockObject' },
        },
      ],
    });
    await mf.ready;
  });
  after(async () => {
    await mf?.dispose();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  test('acquire, tryAcquire, a waiting handoff and status', async () => {
    const res = await mf.dispatchFetch(`http://app.test/?name=${encodeURIComponent(uniq('router é/+'))}`);
    const text = await res.text();
    assert.equal(res.status, 200, text);
    const r = JSON.parse(text);
    assert.equal(r.busy, true);
    assert.ok(BigInt(r.second) > BigInt(r.first), text);
    assert.equal(r.heldWhileSecond, true);
    assert.equal(r.backend, 'durable-object');
  });
});
