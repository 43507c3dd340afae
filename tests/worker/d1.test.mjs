// The `d1` backend (src/core/d1) in workerd through Miniflare, with a D1
// database bound as EDGELOCK_D1 (persisted to a temporary directory):
//   - the job coordinator with EDGELOCK_BACKEND=d1: 20 concurrent job runs
//     are mutually excluded with strictly increasing tokens at the fenced
//     resource; a holder that stops renewing is taken over after its TTL; a
//     late release changes nothing for the next holder; tokens keep
//     increasing after a release (the row is kept); hostile input gets 4xx
//     and changes nothing;
//   - the npm package's workerd export in a Worker of its own, through
//     d1Binding(env.DB).
// Needs build/ (scripts/build-worker.sh), pkg/ for the last part and the
// devtools' testenv (for the fenced resource only).

import assert from 'node:assert/strict';
import { cpSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Miniflare } from 'miniflare';
import { after, before, describe, test } from 'node:test';
import { assertSerialRuns, startWorkers } from './support.mjs';
import { findDevtoolsBin, repoRoot, spawnWithJsonLine, stopChild } from '../js/testenv.mjs';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const uniq = (s) => `${s}-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 6)}`;

async function startFenced() {
  const env = { ...process.env };
  delete env.EDGELOCK_TESTENV_TOKEN;
  const { child, info } = await spawnWithJsonLine(findDevtoolsBin('testenv'), ['--fenced'], { env, timeoutMs: 120_000 });
  child.unref();
  for (const s of [child.stdout, child.stderr, child.stdin]) s.unref?.();
  assert.ok(info.fenced_url, 'testenv started a fenced resource');
  return { ...info, stop: () => stopChild(child) };
}

describe('job coordinator on the d1 backend', { timeout: 240_000 }, () => {
  let env;
  let w;
  let dir;
  let db;
  const row = async (name) =>
    db.prepare('SELECT owner IS NOT NULL AS taken, version FROM edgelock_locks WHERE name = ?').bind(name).first();
  before(async () => {
    env = await startFenced();
    dir = mkdtempSync(path.join(tmpdir(), 'edgelock-d1-'));
    w = await startWorkers(
      { main: { EDGELOCK_BACKEND: 'd1', EDGELOCK_FENCED_URL: env.fenced_url, EDGELOCK_JOB_MS: '20' } },
      { d1: true, persistDir: dir },
    );
    db = await w.mf.getD1Database('EDGELOCK_D1');
  });
  after(async () => {
    await w?.dispose();
    await env?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  test('GET / names the backend; the database clock expression works in D1', async () => {
    const r = await w.call(null, 'GET', '/');
    assert.equal(r.status, 200, r.text);
    assert.equal(r.body.backend, 'd1');
    const now = await db.prepare("SELECT CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER) AS now").first();
    assert.ok(Math.abs(now.now - Date.now()) < 5_000, `D1's clock ${now.now} vs ${Date.now()}`);
  });

  test('an uncontended run: token 1, then 2 after the release (the row is kept, without owner)', async () => {
    const job = uniq('solo');
    const r = await w.call(null, 'POST', `/jobs/${job}/run`);
    assert.equal(r.status, 200, r.text);
    assert.equal(r.body.token, '1');
    assert.equal(r.body.accepted, true);
    assert.deepEqual(r.body.release, { released: true, heldUntilRelease: true });
    console.log(`# d1: one uncontended job run = ${r.body.subrequests.lock} lock + ${r.body.subrequests.job} job subrequests`);
    assert.deepEqual({ ...(await row(job)) }, { taken: 0, version: 1 });
    const s = await w.call(null, 'GET', `/locks/${job}`);
    assert.equal(s.status, 200, s.text);
    assert.equal(s.body.held, false);
    const again = await w.call(null, 'POST', `/jobs/${job}/run`);
    assert.equal(again.body.token, '2', again.text);
  });

  test('busy: 409 with ifAvailable, 504 after waitMs; a handle is finished by another invocation', async () => {
    const job = uniq('handle');
    const held = await w.call(null, 'POST', `/jobs/${job}/start`);
    assert.equal(held.status, 200, held.text);
    assert.equal(held.body.handle.backend, 'd1');
    const busy = await w.call(null, 'POST', `/jobs/${job}/run?ifAvailable`);
    assert.equal(busy.status, 409, busy.text);
    const t0 = Date.now();
    const timeout = await w.call(null, 'POST', `/jobs/${job}/run`, { waitMs: 400 });
    assert.equal(timeout.status, 504, timeout.text);
    assert.ok(Date.now() - t0 >= 350, 'it waited');
    const status = await w.call(null, 'GET', `/locks/${job}`);
    assert.equal(status.body.held, true, status.text);
    assert.equal(status.body.token, held.body.token, status.text);
    assert.ok(!status.text.includes(held.body.handle.owner), 'inspect never shows the owner');
    const done = await w.call(null, 'POST', `/jobs/${job}/finish`, { handle: held.body.handle });
    assert.equal(done.status, 200, done.text);
    assert.deepEqual(done.body.release, { released: true, heldUntilRelease: true });
    const again = await w.call(null, 'POST', `/jobs/${job}/finish`, { handle: held.body.handle });
    assert.equal(again.status, 409, again.text);
    assert.equal(again.body.code, 'LOST');
  });

  test('a holder that stops renewing is taken over after its TTL; its late release does not free the next holder', async () => {
    const job = uniq('takeover');
    // Timed from before the first grant (not from its reply, which a slow
    // machine delays): its lease ends 1000 ms after, at the earliest.
    const t0 = Date.now();
    const first = await w.call(null, 'POST', `/jobs/${job}/start`, { ttlMs: 1000 });
    assert.equal(first.status, 200, first.text);
    const second = await w.call(null, 'POST', `/jobs/${job}/start`, { waitMs: 10_000, ttlMs: 20_000 });
    assert.equal(second.status, 200, second.text);
    assert.ok(Date.now() - t0 >= 700, `taken over after the TTL (${Date.now() - t0} ms)`);
    assert.ok(BigInt(second.body.token) > BigInt(first.body.token));
    const late = await w.call(null, 'POST', `/jobs/${job}/finish`, { handle: first.body.handle });
    assert.equal(late.status, 409, late.text);
    const status = await w.call(null, 'GET', `/locks/${job}`);
    assert.equal(status.body.held, true, status.text);
    assert.equal(status.body.token, second.body.token);
    const done = await w.call(null, 'POST', `/jobs/${job}/finish`, { handle: second.body.handle });
    assert.equal(done.status, 200, done.text);
    const third = await w.call(null, 'POST', `/jobs/${job}/run?ifAvailable`);
    assert.equal(third.status, 200, third.text);
    assert.ok(BigInt(third.body.token) > BigInt(second.body.token));
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
    assert.equal((await row(job)).version, 20);
  });

  test('hostile input gets 4xx and changes nothing', async () => {
    const job = uniq('hostile');
    const held = await w.call(null, 'POST', `/jobs/${job}/start`);
    assert.equal(held.status, 200, held.text);
    const forged = [
      { ...held.body.handle, owner: "x' OR 1=1 --" },
      { ...held.body.handle, fencingToken: '0' },
      { ...held.body.handle, backend: 'durable-object' },
      { ...held.body.handle, name: `${job}'; DROP TABLE edgelock_locks; --`, key: `${job}'; DROP TABLE edgelock_locks; --` },
      { ...held.body.handle, owner: 'f'.repeat(32) },
    ];
    for (const handle of forged) {
      const r = await w.call(null, 'POST', `/jobs/${job}/finish`, { handle });
      assert.ok(r.status >= 400 && r.status < 500, `${r.status} ${r.text}`);
    }
    for (const body of ['{', '[]', JSON.stringify({ handle: 'x'.repeat(200_000) }), JSON.stringify({ waitMs: -1 })]) {
      const r = await w.call(null, 'POST', `/jobs/${job}/finish`, body);
      assert.ok(r.status >= 400 && r.status < 500, `${r.status} ${r.text.slice(0, 200)}`);
    }
    const long = await w.call(null, 'POST', `/jobs/${'n'.repeat(5000)}/run`);
    assert.ok(long.status >= 400 && long.status < 500, long.text.slice(0, 200));
    // A name with SQL in it is only a name (every value is bound).
    const sqlName = `${job}'; DROP TABLE edgelock_locks; --`;
    const r = await w.call(null, 'POST', `/jobs/${encodeURIComponent(sqlName)}/run`);
    assert.equal(r.status, 200, r.text);
    const status = await w.call(null, 'GET', `/locks/${job}`);
    assert.equal(status.body.held, true, status.text);
    assert.equal(status.body.token, held.body.token);
    assert.deepEqual({ ...(await row(job)) }, { taken: 1, version: 1 });
    const done = await w.call(null, 'POST', `/jobs/${job}/finish`, { handle: held.body.handle });
    assert.equal(done.status, 200, done.text);
  });

  test('the table is persisted: tokens keep increasing across a restart of workerd', async () => {
    const job = uniq('restart');
    const before = await w.call(null, 'POST', `/jobs/${job}/run`);
    assert.equal(before.status, 200, before.text);
    await w.dispose();
    w = await startWorkers(
      { main: { EDGELOCK_BACKEND: 'd1', EDGELOCK_FENCED_URL: env.fenced_url, EDGELOCK_JOB_MS: '20' } },
      { d1: true, persistDir: dir },
    );
    db = await w.mf.getD1Database('EDGELOCK_D1');
    assert.equal((await row(job)).version, Number(before.body.token));
    const after = await w.call(null, 'POST', `/jobs/${job}/run`);
    assert.equal(after.status, 200, after.text);
    assert.equal(BigInt(after.body.token), BigInt(before.body.token) + 1n);
  });
});

const pkgEntry = path.join(repoRoot, 'pkg', 'index.node.mjs');

// A Worker of its own using the package's workerd export with a D1
// database bound as DB, reached through d1Binding.
const APP = `
import { D1Locks, d1Binding } from "./edgelock/index.workerd.mjs";

export default {
  async fetch(request, env) {
    const name = new URL(request.url).searchParams.get("name");
    if (name === null) {
      // d1Binding's own answers: a D1 error without the bound values, and garbage refused.
      const binding = d1Binding(env.DB);
      const post = (body) => binding.fetch("https://DB.binding/d1/batch", { method: "POST", body });
      const failed = await post(JSON.stringify({ statements: [{ sql: "SELECT zz_secret_zz FROM sqlite_master WHERE name = ?1", params: ["zz_secret_zz"] }] }));
      const garbage = await post("{");
      const empty = await post(JSON.stringify({ statements: [] }));
      return Response.json({ failed: [failed.status, await failed.text()], garbage: garbage.status, empty: empty.status });
    }
    const options = { binding: "DB", bindings: { DB: d1Binding(env.DB) }, table: "app_locks" };
    const a = new D1Locks(options);
    const b = new D1Locks(options);
    try {
      const first = await a.acquire(name);
      const busy = await b.tryAcquire(name);
      const waiting = b.acquire(name, { waitMs: 10000 });
      await new Promise((r) => setTimeout(r, 100));
      await first.release();
      const second = await waiting;
      const status = await a.status(name);
      const resumed = await a.resume(second.toJSON());
      await second.release();
      let refused = null;
      try { await a.acquire(name, { mode: "shared" }); } catch (e) { refused = e.code; }

      // A retried acquire batch (sent twice, as a retry after a lost answer
      // would) grants once: the version is not bumped by the same owner.
      const inner = d1Binding(env.DB);
      const text = (init) => new TextDecoder().decode(init.body);
      const twice = { async fetch(url, init) {
        if (text(init).includes("INSERT INTO")) await (await inner.fetch(url, init)).text();
        return inner.fetch(url, init);
      } };
      const c = new D1Locks({ binding: "DB", bindings: { DB: twice }, table: "app_locks" });
      const retried = await c.acquire(name + "/retry");
      const retriedStatus = await a.status(name + "/retry");
      await retried.release();
      await c.close();

      // A late release: its batch reaches D1 only after the lease ran out
      // and the next holder took the lock (held back until then: by
      // construction, not by a 700 ms delay); it changes nothing for them.
      let nextTookIt;
      const nextHolds = new Promise((r) => { nextTookIt = r; });
      const slow = { async fetch(url, init) {
        if (text(init).includes("SET owner = NULL")) await nextHolds;
        return inner.fetch(url, init);
      } };
      const d = new D1Locks({ binding: "DB", bindings: { DB: slow }, table: "app_locks", ttlMs: 300, autoExtend: false });
      const lateName = name + "/late";
      const stale = await d.acquire(lateName);
      const releasing = stale.release().catch((e) => e.code);
      const next = await b.acquire(lateName, { waitMs: 5000 });
      nextTookIt();
      await releasing;
      const afterLate = await a.status(lateName);
      await next.release();
      await d.close();
      return Response.json({
        first: String(first.fencingToken),
        busy: busy === null,
        second: String(second.fencingToken),
        resumed: String(resumed.fencingToken),
        heldWhileSecond: status.held,
        backend: second.toJSON().backend,
        refused,
        retried: String(retried.fencingToken),
        retriedStatus: String(retriedStatus.fencingToken),
        stale: String(stale.fencingToken),
        next: String(next.fencingToken),
        lateHeld: afterLate.held,
        lateToken: String(afterLate.fencingToken),
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

describe('the npm package inside a Worker, through d1Binding', { timeout: 120_000 }, () => {
  let mf;
  let dir;
  before(async () => {
    dir = mkdtempSync(path.join(tmpdir(), 'edgelock-d1-app-'));
    cpSync(path.dirname(pkgEntry), path.join(dir, 'edgelock'), { recursive: true });
    writeFileSync(path.join(dir, 'app.mjs'), APP);
    mf = new Miniflare({
      cf: false,
      modules: true,
      scriptPath: path.join(dir, 'app.mjs'),
      modulesRoot: dir,
      modulesRules: [{ type: 'CompiledWasm', include: ['**/*.wasm'] }, { type: 'ESModule', include: ['**/*.js', '**/*.mjs'] }],
      compatibilityDate: '2026-04-20',
      d1Databases: { DB: 'edgelock-app-d1' },
    });
    await mf.ready;
  });
  after(async () => {
    await mf?.dispose();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  test('acquire, tryAcquire, a waiting handoff, status and resume', async () => {
    const res = await mf.dispatchFetch(`http://app.test/?name=${encodeURIComponent(uniq('app é/+'))}`);
    const text = await res.text();
    assert.equal(res.status, 200, text);
    const r = JSON.parse(text);
    assert.equal(r.busy, true, text);
    assert.equal(r.first, '1', text);
    assert.equal(r.second, '2', text);
    assert.equal(r.resumed, '2', text);
    assert.equal(r.heldWhileSecond, true);
    assert.equal(r.backend, 'd1');
    assert.equal(r.refused, 'INVALID_ARGUMENT');
    assert.equal(r.retried, '1', `a retried acquire batch grants version 1 once: ${text}`);
    assert.equal(r.retriedStatus, '1', text);
    assert.equal(r.stale, '1', text);
    assert.equal(r.next, '2', text);
    assert.equal(r.lateHeld, true, `the late release left the next holder alone: ${text}`);
    assert.equal(r.lateToken, '2', text);
  });

  test('d1Binding answers a D1 error without the bound values, and refuses garbage', async () => {
    const res = await mf.dispatchFetch('http://app.test/');
    const text = await res.text();
    assert.equal(res.status, 200, text);
    const r = JSON.parse(text);
    assert.equal(r.failed[0], 500, text);
    assert.ok(JSON.parse(r.failed[1]).error.length > 0, text);
    assert.ok(!r.failed[1].includes('zz_secret_zz'), text);
    assert.equal(r.garbage, 400, text);
    assert.equal(r.empty, 400, text);
  });
});
