// The Durable Object lock service (src/worker/lock_object, HTTP API v1 in
// docs/lock-service-api.md) in workerd through Miniflare, reached through
// the Worker's front `POST /lock/v1/<op>?name=<name>` with the test token.
// Needs build/ (scripts/build-worker.sh); no backend servers.

import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { startWorkers, TEST_API_TOKEN } from './support.mjs';

const SCOPED_TOKEN = 'scoped-token-0123456789abcdef';
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const uniq = (s) => `${s}-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 6)}`;
const newOwner = () => randomBytes(16).toString('hex');
const lockPath = (op, name) => `/lock/v1/${op}?name=${encodeURIComponent(name)}`;

/** POST /lock/v1/<op> through the front; asserts a JSON answer. */
function op(w, name, which, body, opts) {
  return w.call(null, 'POST', lockPath(which, name), body, opts);
}
const acquire = (w, name, owner, ttlMs, waitMs) => op(w, name, 'acquire', { owner, ttlMs, waitMs });
const release = (w, name, owner, token) => op(w, name, 'release', { owner, token });
async function inspect(w, name) {
  const r = await op(w, name, 'inspect', {});
  assert.equal(r.status, 200, r.text);
  return r.body;
}
/** Polls `check` until truthy; `ms` is a must-happen bound, not a timing assumption. */
async function until(check, ms, what) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await check();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}
/** inspect's answer of a free lock. */
const FREE = { held: false, token: null, pttlMs: null, waiters: 0, limit: null, holders: [] };
/** An inspect answer without its (time-dependent) leases. */
const timeless = (i) => ({ ...i, pttlMs: 0, holders: i.holders.map((h) => ({ ...h, pttlMs: 0 })) });
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

describe('lock service (Durable Object) through the front', { timeout: 120_000 }, () => {
  let w;
  before(async () => {
    w = await startWorkers({ main: { EDGELOCK_API_TOKENS: `scoped/=${SCOPED_TOKEN}` } }, { lockObjects: true });
  });
  after(async () => {
    await w?.dispose();
  });

  test('acquire, extend, resume, release and inspect answer as the contract says', async () => {
    const name = uniq('basic');
    const [a, b] = [newOwner(), newOwner()];
    assert.deepEqual(await inspect(w, name), FREE);
    const g = await acquire(w, name, a, 5000, 0);
    assert.equal(g.status, 200, g.text);
    assert.equal(g.body.acquired, true);
    assert.match(g.body.token, /^[1-9][0-9]*$/);
    assert.equal(g.body.ttlMs, 5000);
    assert.equal(g.body.waiters, 0);
    assert.match(g.text, /^\{/);
    // Idempotent retry: same token, the lease left.
    const again = await acquire(w, name, a, 9000, 0);
    assert.equal(again.body.acquired, true);
    assert.equal(again.body.token, g.body.token);
    assert.ok(again.body.ttlMs <= 5000, `${again.body.ttlMs}`);
    // Another owner, try once.
    const busy = await acquire(w, name, b, 5000, 0);
    assert.deepEqual(Object.keys(busy.body).sort(), ['acquired', 'pttlMs', 'token', 'waiters']);
    assert.equal(busy.body.acquired, false);
    assert.equal(busy.body.token, g.body.token);
    assert.ok(busy.body.pttlMs > 0 && busy.body.pttlMs <= 5000);
    const ext = await op(w, name, 'extend', { owner: a, token: g.body.token, ttlMs: 20000 });
    assert.deepEqual(ext.body, { extended: true, ttlMs: 20000 });
    const res = await op(w, name, 'resume', { owner: a, token: g.body.token });
    assert.equal(res.body.held, true);
    assert.ok(res.body.pttlMs > 15000);
    assert.deepEqual((await op(w, name, 'resume', { owner: b, token: g.body.token })).body, { held: false });
    assert.deepEqual((await op(w, name, 'extend', { owner: b, token: g.body.token, ttlMs: 1 })).body, { extended: false });
    assert.deepEqual((await release(w, name, b, g.body.token)).body, { released: false });
    const i = await inspect(w, name);
    assert.equal(i.held, true);
    assert.equal(i.token, g.body.token);
    assert.ok(!JSON.stringify(i).includes(a), 'inspect never returns the owner');
    assert.deepEqual((await release(w, name, a, String(BigInt(g.body.token) + 1n))).body, { released: false });
    assert.deepEqual((await release(w, name, a, g.body.token)).body, { released: true });
    assert.deepEqual((await release(w, name, a, g.body.token)).body, { released: false });
    const next = await acquire(w, name, b, 1000, 0);
    assert.equal(next.body.acquired, true);
    assert.ok(BigInt(next.body.token) > BigInt(g.body.token));
  });

  test('mutual exclusion: 20 concurrent acquire/work/release cycles never overlap and tokens strictly increase', async () => {
    const name = uniq('mutex');
    let active = 0;
    let maxActive = 0;
    const grants = [];
    await Promise.all(
      Array.from({ length: 20 }, async (_, i) => {
        const owner = newOwner();
        const g = await acquire(w, name, owner, 10_000, 30_000);
        assert.equal(g.status, 200, g.text);
        assert.equal(g.body.acquired, true, `cycle ${i}: ${g.text}`);
        active += 1;
        maxActive = Math.max(maxActive, active);
        grants.push(BigInt(g.body.token));
        await sleep(5);
        active -= 1;
        const r = await release(w, name, owner, g.body.token);
        assert.deepEqual(r.body, { released: true });
      }),
    );
    assert.equal(maxActive, 1, 'never two holders at once');
    assert.equal(grants.length, 20);
    for (let i = 1; i < grants.length; i++) assert.ok(grants[i] > grants[i - 1], `tokens in grant order: ${grants.join(', ')}`);
    assert.deepEqual(await inspect(w, name), FREE);
  });

  test('waiters are held open and granted in FIFO order, each by the release before it', async () => {
    const name = uniq('fifo');
    const holder = newOwner();
    const first = await acquire(w, name, holder, 10_000, 0);
    assert.equal(first.body.acquired, true);
    const order = [];
    const waiters = [];
    for (let i = 0; i < 5; i++) {
      const owner = newOwner();
      const p = acquire(w, name, owner, 10_000, 30_000).then(async (g) => {
        assert.equal(g.body.acquired, true, g.text);
        order.push(i);
        return { owner, token: g.body.token };
      });
      waiters.push(p);
      // Queued (held open) before the next one starts.
      await until(async () => (await inspect(w, name)).waiters === i + 1, 20_000, `waiter ${i} queued`);
    }
    assert.equal(order.length, 0, 'nobody granted while held');
    let prev = { owner: holder, token: first.body.token };
    for (let i = 0; i < 5; i++) {
      assert.deepEqual((await release(w, name, prev.owner, prev.token)).body, { released: true });
      const g = await waiters[i];
      assert.deepEqual(order, Array.from({ length: i + 1 }, (_, k) => k), 'granted in queue order');
      assert.ok(BigInt(g.token) > BigInt(prev.token));
      assert.equal((await inspect(w, name)).waiters, 4 - i);
      prev = g;
    }
    assert.deepEqual((await release(w, name, prev.owner, prev.token)).body, { released: true });
  });

  test('a re-sent acquire of a queued owner keeps its place; a queued owner\'s release leaves the queue', async () => {
    const name = uniq('resend');
    const [h, b, c] = [newOwner(), newOwner(), newOwner()];
    const gh = await acquire(w, name, h, 10_000, 0);
    const oldB = acquire(w, name, b, 10_000, 20_000);
    await until(async () => (await inspect(w, name)).waiters === 1, 20_000, 'b queued');
    const pc = acquire(w, name, c, 10_000, 20_000);
    await until(async () => (await inspect(w, name)).waiters === 2, 20_000, 'c queued');
    // b polls again: its older request answers acquired:false, its place is kept.
    const newB = acquire(w, name, b, 10_000, 20_000);
    const old = await oldB;
    assert.equal(old.body.acquired, false, old.text);
    assert.equal(old.body.token, gh.body.token);
    assert.equal((await inspect(w, name)).waiters, 2);
    assert.deepEqual((await release(w, name, h, gh.body.token)).body, { released: true });
    const gb = await newB;
    assert.equal(gb.body.acquired, true, 'b, ahead of c, is granted');
    assert.equal(gb.body.waiters, 1);
    // c gives up by releasing while queued: released:false, its request answers acquired:false.
    assert.deepEqual((await release(w, name, c, '0')).body, { released: false });
    const rc = await pc;
    assert.equal(rc.body.acquired, false, rc.text);
    assert.equal(rc.body.token, gb.body.token);
    assert.equal((await inspect(w, name)).waiters, 0);
    assert.deepEqual((await release(w, name, b, gb.body.token)).body, { released: true });
  });

  test('a waiter whose caller went away: granted in its turn, recovered by a re-sent acquire, FIFO kept', async () => {
    // workerd does not tell the object that a waiting caller left (its
    // request.signal does not abort, even with enable_request_signal): the
    // waiter is granted in its turn. The client that re-sends acquire with
    // the same owner gets that grant back (same token); one that is gone
    // for good holds it until its lease ends, like a holder that crashed.
    const name = uniq('gone');
    const [h, x, y] = [newOwner(), newOwner(), newOwner()];
    const gh = await acquire(w, name, h, 10_000, 0);
    const ac = new AbortController();
    const px = w.mf
      .dispatchFetch(`http://worker.test${lockPath('acquire', name)}`, {
        method: 'POST',
        headers: { authorization: `Bearer ${TEST_API_TOKEN}` },
        body: JSON.stringify({ owner: x, ttlMs: 10_000, waitMs: 20_000 }),
        signal: ac.signal,
      })
      .then(
        () => 'answered',
        (e) => e.name,
      );
    await until(async () => (await inspect(w, name)).waiters === 1, 20_000, 'x queued');
    const py = acquire(w, name, y, 10_000, 20_000);
    await until(async () => (await inspect(w, name)).waiters === 2, 20_000, 'y queued');
    ac.abort();
    assert.equal(await px, 'AbortError');
    assert.deepEqual((await release(w, name, h, gh.body.token)).body, { released: true });
    const i = await inspect(w, name);
    assert.equal(i.token, String(BigInt(gh.body.token) + 1n), 'x, ahead of y, was granted');
    assert.equal(i.waiters, 1);
    const again = await acquire(w, name, x, 10_000, 0);
    assert.equal(again.body.acquired, true, again.text);
    assert.equal(again.body.token, i.token, 'the re-sent acquire gets the grant back');
    assert.deepEqual((await release(w, name, x, again.body.token)).body, { released: true });
    const gy = await py;
    assert.equal(gy.body.acquired, true, gy.text);
    assert.deepEqual((await release(w, name, y, gy.body.token)).body, { released: true });
  });

  test('a waiter whose waitMs ends answers acquired:false with the holder and leaves the queue', async () => {
    const name = uniq('timeout');
    const a = newOwner();
    const g = await acquire(w, name, a, 10_000, 0);
    const t0 = Date.now();
    const r = await acquire(w, name, newOwner(), 10_000, 300);
    const took = Date.now() - t0;
    assert.equal(r.body.acquired, false, r.text);
    assert.equal(r.body.token, g.body.token);
    assert.ok(r.body.pttlMs > 0);
    // Answered at its wait's end, not at the holder's lease end (10 s): the
    // upper bound leaves 5.7 s for a loaded machine (it was 2 s, under 10x
    // what a loaded run can take).
    assert.ok(took >= 280 && took < 6_000, `answered after ${took} ms`);
    assert.equal((await inspect(w, name)).waiters, 0);
  });

  test('a holder that stops extending is taken over at its lease end; its late calls answer false', async () => {
    const name = uniq('expiry');
    const [a, b] = [newOwner(), newOwner()];
    // Timed from before the holder's grant (not from its reply, which a
    // slow machine delays): its lease ends 600 ms after, at the earliest.
    const t0 = Date.now();
    const ga = await acquire(w, name, a, 600, 0);
    assert.equal(ga.body.acquired, true);
    const gb = await acquire(w, name, b, 10_000, 10_000);
    const took = Date.now() - t0;
    assert.equal(gb.body.acquired, true, gb.text);
    assert.ok(BigInt(gb.body.token) > BigInt(ga.body.token));
    console.log(`# lease of 600 ms: the waiter was granted ${took} ms after the holder's acquire was sent`);
    // Granted at the lease end, not at the wait's end (10 s, acquired:false)
    // nor by some later sweep: the upper bound leaves 5.4 s for a loaded
    // machine (it was 2.5 s, under 10x what a loaded run can take).
    assert.ok(took >= 550 && took < 6_000, `granted after ${took} ms`);
    // The expired holder's late calls touch nothing.
    assert.deepEqual((await release(w, name, a, ga.body.token)).body, { released: false });
    assert.deepEqual((await op(w, name, 'extend', { owner: a, token: ga.body.token, ttlMs: 60_000 })).body, { extended: false });
    assert.deepEqual((await op(w, name, 'resume', { owner: a, token: ga.body.token })).body, { held: false });
    assert.equal((await acquire(w, name, a, 1000, 0)).body.acquired, false);
    const res = await op(w, name, 'resume', { owner: b, token: gb.body.token });
    assert.equal(res.body.held, true);
    const i = await inspect(w, name);
    assert.equal(i.token, gb.body.token);
    assert.deepEqual((await release(w, name, b, gb.body.token)).body, { released: true });
  });

  test('handoff latency through the front: release to the held-open waiter\'s grant', async () => {
    const name = uniq('handoff');
    const samples = [];
    let holder = newOwner();
    let token = (await acquire(w, name, holder, 10_000, 0)).body.token;
    for (let i = 0; i < 15; i++) {
      const next = newOwner();
      let granted;
      const p = acquire(w, name, next, 10_000, 30_000).then((g) => {
        granted = Date.now();
        return g;
      });
      await until(async () => (await inspect(w, name)).waiters === 1, 20_000, 'waiter queued');
      const t0 = Date.now();
      const r = await release(w, name, holder, token);
      assert.deepEqual(r.body, { released: true });
      const g = await p;
      assert.equal(g.body.acquired, true);
      samples.push(granted - t0);
      [holder, token] = [next, g.body.token];
    }
    console.log(`# handoff through the front (release sent -> waiter's grant received): p50 ${median(samples)} ms, max ${Math.max(...samples)} ms`);
  });

  test('hostile or malformed requests get the documented 4xx and change nothing', async () => {
    const name = uniq('hostile');
    const a = newOwner();
    const g = await acquire(w, name, a, 60_000, 0);
    const before = await inspect(w, name);
    const other = newOwner();
    const long = 'x'.repeat(513);
    const cases = [
      ['POST', lockPath('acquire', name), '{"owner":', 400],
      ['POST', lockPath('acquire', name), 'not json', 400],
      ['POST', lockPath('acquire', name), { owner: other, ttlMs: 1000, waitMs: 0, extra: 1 }, 400],
      ['POST', lockPath('acquire', name), JSON.stringify({ owner: other, ttlMs: 1000, waitMs: 0, pad: 'p'.repeat(5000) }), 413],
      ['POST', lockPath('inspect', name), `{}${' '.repeat(5000)}`, 413],
      ['POST', lockPath('acquire', name), { owner: 'not-hex-owner-value', ttlMs: 1000, waitMs: 0 }, 400],
      ['POST', lockPath('acquire', name), { owner: other.toUpperCase(), ttlMs: 1000, waitMs: 0 }, 400],
      ['POST', lockPath('acquire', name), { owner: other, ttlMs: 0, waitMs: 0 }, 400],
      ['POST', lockPath('acquire', name), { owner: other, ttlMs: 86_400_001, waitMs: 0 }, 400],
      ['POST', lockPath('acquire', name), { owner: other, ttlMs: 1000, waitMs: 60_001 }, 400],
      ['POST', lockPath('acquire', name), { owner: other, ttlMs: 1000 }, 400],
      ['POST', lockPath('release', name), { owner: a, token: Number(g.body.token) }, 400],
      ['POST', lockPath('release', name), { owner: a, token: `0${g.body.token}` }, 400],
      ['POST', lockPath('extend', name), { owner: a, token: g.body.token, ttlMs: -5 }, 400],
      ['POST', lockPath('inspect', name), '', 400],
      ['POST', lockPath('release', name), JSON.stringify([a, g.body.token]), 400],
      ['POST', lockPath('inspect', name), '[]', 400],
      ['POST', '/lock/v1/acquire', { owner: other, ttlMs: 1000, waitMs: 0 }, 400],
      ['POST', '/lock/v1/acquire?name=', { owner: other, ttlMs: 1000, waitMs: 0 }, 400],
      ['POST', `/lock/v1/acquire?name=${long}`, { owner: other, ttlMs: 1000, waitMs: 0 }, 400],
      ['POST', `/lock/v1/acquire?name=a%00b`, { owner: other, ttlMs: 1000, waitMs: 0 }, 400],
      ['POST', `${lockPath('acquire', name)}&waitMs=1`, { owner: other, ttlMs: 1000, waitMs: 0 }, 400],
      ['GET', lockPath('inspect', name), undefined, 405],
      ['PUT', lockPath('release', name), { owner: a, token: g.body.token }, 405],
      ['POST', lockPath('steal', name), { owner: other }, 404],
      ['POST', `/lock/v2/release?name=${encodeURIComponent(name)}`, { owner: a, token: g.body.token }, 404],
      ['POST', '/lock', {}, 404],
    ];
    for (const [method, p, body, status] of cases) {
      const r = await w.call(null, method, p, body);
      assert.equal(r.status, status, `${method} ${p.slice(0, 80)}: ${r.text.slice(0, 200)}`);
      assert.equal(r.body.error?.code, 'INVALID_ARGUMENT', r.text);
      assert.equal(typeof r.body.error.message, 'string');
      for (const secret of [a, other, other.toUpperCase(), TEST_API_TOKEN]) assert.ok(!r.text.includes(secret), `${method} ${p}: echoes a secret: ${r.text}`);
    }
    const afterAll = await inspect(w, name);
    assert.deepEqual(timeless(afterAll), timeless(before));
    assert.deepEqual((await release(w, name, a, g.body.token)).body, { released: true });
  });

  test('semaphores and read-write locks on the raw API: slots, tokens, 409 for another limit, 400 for bad kinds', async () => {
    const name = uniq('kinds');
    const owners = Array.from({ length: 4 }, newOwner);
    const take = (owner, extra, waitMs = 0) => op(w, name, 'acquire', { owner, ttlMs: 10_000, waitMs, ...extra });
    const got = [];
    for (const o of owners.slice(0, 3)) {
      const r = await take(o, { limit: 3 });
      assert.equal(r.status, 200, r.text);
      assert.equal(r.body.acquired, true, r.text);
      got.push(r.body);
    }
    assert.deepEqual(got.map((g) => g.slot).sort(), [0, 1, 2]);
    assert.equal(new Set(got.map((g) => g.token)).size, 3);
    assert.equal((await take(owners[3], { limit: 3 })).body.acquired, false);
    const other = await take(owners[3], { limit: 2 });
    assert.equal(other.status, 409, other.text);
    assert.equal(other.body.error.code, 'INVALID_ARGUMENT');
    assert.equal(other.body.error.limit, 3);
    assert.equal((await take(owners[3], { mode: 'shared' })).body.acquired, false);
    const i = await inspect(w, name);
    assert.equal(i.limit, 3);
    assert.deepEqual(i.holders.map((h) => h.mode), ['permit', 'permit', 'permit']);
    assert.ok(!JSON.stringify(i).includes(owners[0]));
    const res = await op(w, name, 'resume', { owner: owners[1], token: got[1].token });
    assert.deepEqual({ ...res.body, pttlMs: 0 }, { held: true, pttlMs: 0, mode: 'permit', limit: 3, slot: got[1].slot });
    for (let k = 0; k < 3; k += 1) assert.deepEqual((await release(w, name, owners[k], got[k].token)).body, { released: true });
    // Read-write: readers together, then a writer alone.
    const rw = uniq('rw');
    const r1 = await op(w, rw, 'acquire', { owner: owners[0], ttlMs: 10_000, waitMs: 0, mode: 'shared' });
    const r2 = await op(w, rw, 'acquire', { owner: owners[1], ttlMs: 10_000, waitMs: 0, mode: 'shared' });
    assert.equal(r1.body.acquired && r2.body.acquired, true);
    assert.equal((await op(w, rw, 'acquire', { owner: owners[2], ttlMs: 10_000, waitMs: 0, mode: 'exclusive' })).body.acquired, false);
    for (const [extra, status] of [
      [{ limit: 0 }, 400], [{ limit: 101 }, 400], [{ limit: 1.5 }, 400], [{ limit: '3' }, 400],
      [{ mode: 'shared', limit: 3 }, 400], [{ mode: 'permit' }, 400], [{ mode: 'writer' }, 400],
    ]) {
      const r = await take(owners[3], extra);
      assert.equal(r.status, status, `${JSON.stringify(extra)}: ${r.text}`);
      assert.equal(r.body.error.code, 'INVALID_ARGUMENT');
    }
  });

  test('no token, a wrong token or a token for another prefix: 401/403 and nothing changes', async () => {
    const name = uniq('auth');
    const scopedName = uniq('scoped/auth');
    const a = newOwner();
    const body = { owner: a, ttlMs: 60_000, waitMs: 0 };
    const cases = [
      [name, null, 401, 'UNAUTHORIZED'],
      [name, 'Bearer wrong-token-0123456789abcdef', 401, 'UNAUTHORIZED'],
      [name, `Basic ${TEST_API_TOKEN}`, 401, 'UNAUTHORIZED'],
      [name, `Bearer ${SCOPED_TOKEN}`, 403, 'FORBIDDEN'],
    ];
    for (const [n, authorization, status, code] of cases) {
      for (const which of ['acquire', 'inspect', 'nope']) {
        const r = await w.call(null, 'POST', lockPath(which, n), which === 'inspect' ? {} : body, { authorization });
        assert.equal(r.status, status, r.text);
        assert.equal(r.body.code, code, r.text);
        for (const secret of [TEST_API_TOKEN, SCOPED_TOKEN, a]) assert.ok(!r.text.includes(secret), r.text);
      }
    }
    assert.deepEqual(await inspect(w, name), FREE);
    // The scoped token reaches names under its prefix.
    const g = await w.call(null, 'POST', lockPath('acquire', scopedName), body, { authorization: `Bearer ${SCOPED_TOKEN}` });
    assert.equal(g.body.acquired, true, g.text);
    assert.ok(!g.text.includes(SCOPED_TOKEN));
    const r = await w.call(null, 'POST', lockPath('release', scopedName), { owner: a, token: g.body.token }, { authorization: `Bearer ${SCOPED_TOKEN}` });
    assert.deepEqual(r.body, { released: true });
  });
});

describe('lock service state across restarts (persisted Durable Object storage)', { timeout: 120_000 }, () => {
  let dir;
  before(() => {
    dir = mkdtempSync(path.join(tmpdir(), 'edgelock-do-'));
  });
  after(() => {
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  test('fencing tokens keep increasing and the holder survives a restart of workerd', async () => {
    const name = uniq('restart');
    const a = newOwner();
    let w = await startWorkers({ main: {} }, { lockObjects: true, persistDir: dir });
    const tokens = [];
    try {
      for (let i = 0; i < 3; i++) {
        const owner = newOwner();
        const g = await acquire(w, name, owner, 10_000, 0);
        tokens.push(BigInt(g.body.token));
        assert.deepEqual((await release(w, name, owner, g.body.token)).body, { released: true });
      }
      const g = await acquire(w, name, a, 60_000, 0);
      tokens.push(BigInt(g.body.token));
    } finally {
      await w.dispose();
    }
    w = await startWorkers({ main: {} }, { lockObjects: true, persistDir: dir });
    try {
      const i = await inspect(w, name);
      assert.equal(i.held, true, 'the holder survived');
      assert.equal(BigInt(i.token), tokens.at(-1));
      const res = await op(w, name, 'resume', { owner: a, token: i.token });
      assert.equal(res.body.held, true);
      assert.equal((await acquire(w, name, newOwner(), 1000, 0)).body.acquired, false);
      assert.deepEqual((await release(w, name, a, i.token)).body, { released: true });
      const g = await acquire(w, name, newOwner(), 1000, 0);
      assert.equal(g.body.acquired, true);
      tokens.push(BigInt(g.body.token));
      for (let k = 1; k < tokens.length; k++) assert.ok(tokens[k] > tokens[k - 1], `tokens strictly increase: ${tokens.join(', ')}`);
    } finally {
      await w.dispose();
    }
  });
  test('the queue is stored: after a restart, re-sent acquires keep their FIFO places', async () => {
    const name = uniq('restart-queue');
    const [h, b, c] = [newOwner(), newOwner(), newOwner()];
    let w = await startWorkers({ main: {} }, { lockObjects: true, persistDir: dir });
    let gh;
    try {
      gh = await acquire(w, name, h, 60_000, 0);
      assert.equal(gh.body.acquired, true);
      for (const [i, o] of [b, c].entries()) {
        acquire(w, name, o, 10_000, 20_000).catch(() => {});
        await until(async () => (await inspect(w, name)).waiters === i + 1, 20_000, `waiter ${i} queued`);
      }
    } finally {
      await w.dispose();
    }
    w = await startWorkers({ main: {} }, { lockObjects: true, persistDir: dir });
    try {
      assert.deepEqual(timeless(await inspect(w, name)), {
        held: true,
        token: gh.body.token,
        pttlMs: 0,
        waiters: 2,
        limit: null,
        holders: [{ mode: 'exclusive', token: gh.body.token, pttlMs: 0 }],
      });
      // c polls first, then b: b keeps its place ahead of c. (The sleeps
      // only order the two polls; every assertion below holds whichever
      // arrives first, so a slow machine can make this miss a bug, never
      // fail it: the stored queue, not arrival, decides.)
      const pc = acquire(w, name, c, 10_000, 20_000);
      await sleep(100);
      const pb = acquire(w, name, b, 10_000, 20_000);
      await sleep(100);
      assert.equal((await inspect(w, name)).waiters, 2);
      assert.deepEqual((await release(w, name, h, gh.body.token)).body, { released: true });
      const gb = await pb;
      assert.equal(gb.body.acquired, true, gb.text);
      assert.equal(gb.body.token, String(BigInt(gh.body.token) + 1n));
      assert.deepEqual((await release(w, name, b, gb.body.token)).body, { released: true });
      const gc = await pc;
      assert.equal(gc.body.acquired, true, gc.text);
      assert.equal(gc.body.token, String(BigInt(gb.body.token) + 1n));
      assert.deepEqual((await release(w, name, c, gc.body.token)).body, { released: true });
    } finally {
      await w.dispose();
    }
  });
});
