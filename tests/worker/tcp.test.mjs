// The job coordinator Worker over redis:// in workerd (Miniflare): its
// client reaches the nodes with connect() of cloudflare:sockets
// (src/worker/sockets.rs). Real redis-servers (testenv, free loopback
// ports) and the fenced resource; nothing else. Needs build/
// (scripts/build-worker.sh) and the devtools binaries; scripts/test-worker.sh
// does both.
//
// - one node: a run acquires, a waiting invocation is handed the lock by
//   push (its subscriber connection), both release;
// - a refused configuration names the variable, never the value;
// - a Redlock of 5 redis:// nodes with 6 runs (waiters) inside one
//   invocation: never more than 6 connections open at once (the factory's
//   own counter, and CLIENT LIST on the servers), every run granted;
// - a Redlock mixing redis:// and webdis+http:// nodes serves runs.

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { after, before, describe, test } from 'node:test';
import { promisify } from 'node:util';
import { assertSerialRuns, startWorkers } from './support.mjs';
import { lockKey, wakeChannel } from '../js/support/redis.mjs';
import { findDevtoolsBin, spawnWithJsonLine, stopChild } from '../js/testenv.mjs';

const run = promisify(execFile);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const uniq = (s) => `${s}-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 6)}`;

let env;
let stopEnv;
before(async () => {
  const { child, info } = await spawnWithJsonLine(findDevtoolsBin('testenv'), ['--redis', '5', '--webdis', '--fenced'], {
    env: Object.fromEntries(Object.entries(process.env).filter(([k]) => k !== 'EDGELOCK_TESTENV_TOKEN')),
    timeoutMs: 120_000,
  });
  child.unref();
  for (const s of [child.stdout, child.stderr, child.stdin]) s.unref?.();
  env = info;
  stopEnv = () => stopChild(child);
});
after(async () => {
  await stopEnv?.();
});

const tcpUrl = (i) => `redis://127.0.0.1:${env.redis[i].port}`;

/** One command on node `i` through redis-cli; its raw output. */
async function redisCli(i, ...cmd) {
  const { stdout } = await run('redis-cli', ['-h', '127.0.0.1', '-p', String(env.redis[i].port), ...cmd]);
  return stdout;
}

/** Subscribers of `channel` on node `i`. */
async function numsub(i, channel) {
  const lines = (await redisCli(i, 'PUBSUB', 'NUMSUB', channel)).trim().split('\n');
  return Number(lines[1]);
}

/** Connections of clients other than redis-cli on nodes `indices`: all, and subscribers. */
async function clients(indices) {
  const lists = await Promise.all(indices.map((i) => redisCli(i, 'CLIENT', 'LIST')));
  const others = lists.flatMap((l) => l.trim().split('\n')).filter((line) => line && !/ cmd=client\|list /.test(line));
  return { all: others.length, subscribers: others.filter((line) => / p?sub=[1-9]/.test(line)).length };
}

/** Scripts (EVAL and EVALSHA: a lock attempt is one) node `i` has run so far. */
async function scriptCalls(i) {
  const stats = await redisCli(i, 'INFO', 'commandstats');
  return [...stats.matchAll(/^cmdstat_(?:eval|evalsha):calls=(\d+)/gm)].reduce((n, m) => n + Number(m[1]), 0);
}

/** Polls `check` until truthy; `ms` is a must-happen bound, not a timing assumption. */
async function until(check, ms, what) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await check();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(25);
  }
}

describe('Worker over redis:// (connect())', () => {
  let w;
  before(async () => {
    const common = { EDGELOCK_FENCED_URL: env.fenced_url, EDGELOCK_JOB_MS: '20' };
    const five = [0, 1, 2, 3, 4].map(tcpUrl).join(',');
    w = await startWorkers({
      one: { ...common, EDGELOCK_BACKEND: 'redis', EDGELOCK_REDIS_URL: tcpUrl(0), EDGELOCK_PREFIX: 'wt-tcp1' },
      redlock5: { ...common, EDGELOCK_BACKEND: 'redlock', EDGELOCK_REDLOCK_NODES: five, EDGELOCK_PREFIX: 'wt-tcp5' },
      mixed: {
        ...common,
        EDGELOCK_BACKEND: 'redlock',
        EDGELOCK_REDLOCK_NODES: [tcpUrl(0), tcpUrl(1), `webdis+${env.webdis_urls[2]}`].join(','),
        EDGELOCK_PREFIX: 'wt-mixed',
      },
      badUrl: { EDGELOCK_BACKEND: 'redis', EDGELOCK_REDIS_URL: 'redis://:s3cret-pw@127.0.0.1:notaport' },
      badNode: { EDGELOCK_BACKEND: 'redlock', EDGELOCK_REDLOCK_NODES: `${tcpUrl(0)},redis://:s3cret-pw@127.0.0.1:99999,${tcpUrl(2)}` },
      // Read only (GET / opens no connection): a rediss:// node is accepted.
      tls: { EDGELOCK_BACKEND: 'redlock', EDGELOCK_REDLOCK_NODES: `rediss://cache.example:6380,${tcpUrl(1)},webdis+${env.webdis_urls[2]}` },
      sevenNodes: {
        EDGELOCK_BACKEND: 'redlock',
        EDGELOCK_REDLOCK_NODES: [0, 1, 2, 3, 4].map(tcpUrl).concat(['redis://127.0.0.1:1', 'redis://127.0.0.1:2']).join(','),
      },
    });
  });
  after(async () => {
    await w?.dispose();
  });

  test('one node: acquire, a waiting invocation handed the lock by push, release', async () => {
    const job = uniq('tcp-push');
    const channel = wakeChannel(lockKey(job, 'wt-tcp1'));
    const held = await w.call('one', 'POST', `/jobs/${job}/start`);
    assert.equal(held.status, 200, held.text);
    const waiting = w.call('one', 'POST', `/jobs/${job}/run?waitMs=30000`);
    await until(async () => (await numsub(0, channel)) === 1, 20_000, 'the waiter to subscribe');
    // Held 1.5 s: the waiter stays subscribed and is woken by the release.
    // Only the waiter runs scripts on node 0 meanwhile (the holder's
    // invocation has ended): they are its attempts.
    const [callsFrom, heldFrom] = [await scriptCalls(0), Date.now()];
    await sleep(1500);
    assert.equal(await numsub(0, channel), 1, 'still subscribed');
    const [attempts, heldMs] = [(await scriptCalls(0)) - callsFrom, Date.now() - heldFrom];
    // Subscribed, it attempts once on its subscription's confirmation and
    // on its fallback timer, never sooner than 2 s apart: a count bound by
    // the hold as measured, however slow the machine. Polling every
    // 200–300 ms would make 5+ in 1.5 s.
    const attemptBound = 2 + Math.floor(heldMs / 2000);
    assert.ok(attempts <= attemptBound, `${attempts} attempts while held ${heldMs} ms (bound ${attemptBound}): it polled`);
    const done = await w.call('one', 'POST', `/jobs/${job}/finish`, held.body);
    assert.equal(done.status, 200, done.text);
    assert.equal(done.body.release.released, true, done.text);
    const r = await waiting;
    assert.equal(r.status, 200, r.text);
    assert.equal(r.body.release.released, true, r.text);
    assert.ok(BigInt(r.body.token) > BigInt(held.body.token), 'the fencing token grew');
    const woken = r.body.started - done.body.finished;
    // A time bound kept: 8–10 ms calm, 13 ms beside two CPU hogs (75x).
    assert.ok(woken < 1000, `woken ${woken} ms after the release`);
    // The waiter's connections: commands and subscriber, both closed after.
    assert.deepEqual({ peak: r.body.connections.peak, open: r.body.connections.open }, { peak: 2, open: 0 }, r.text);
    assert.ok(r.body.subrequests.total <= r.body.subrequests.budget, r.text);
    await until(async () => (await numsub(0, channel)) === 0, 20_000, 'the subscriber connection to close');
    await assertSerialRuns(env, job, 2);
    console.log(`# redis:// one node: ${attempts} attempts while held ${heldMs} ms (node 0 had run ${callsFrom} scripts before), woken ${woken} ms after the release`);
  });

  test('a refused configuration names the variable, never its value; rediss:// is accepted', async () => {
    const bad = await w.call('badUrl', 'POST', '/jobs/x/run');
    assert.equal(bad.status, 400, bad.text);
    assert.equal(bad.body.code, 'INVALID_ARGUMENT');
    assert.match(bad.body.error, /EDGELOCK_REDIS_URL/);
    assert.doesNotMatch(bad.text, /s3cret-pw/);
    const node = await w.call('badNode', 'POST', '/jobs/x/run');
    assert.equal(node.status, 400, node.text);
    assert.match(node.body.error, /EDGELOCK_REDLOCK_NODES\[1\]/);
    assert.doesNotMatch(node.text, /s3cret-pw/);
    const tls = await w.call('tls', 'GET', '/');
    assert.equal(tls.status, 200, tls.text);
    assert.equal(tls.body.backend, 'redlock');
    const seven = await w.call('sevenNodes', 'POST', '/jobs/x/run');
    assert.equal(seven.status, 400, seven.text);
    assert.match(seven.body.error, /EDGELOCK_REDLOCK_NODES: at most 6 redis:\/\//);
  });

  test('5-node redis:// Redlock, 6 waiters in one invocation: at most 6 connections open, every run granted', async () => {
    const info = await w.call('redlock5', 'GET', '/');
    assert.equal(info.status, 200, info.text);
    assert.equal(info.body.maxSubscriptions, 1, 'one subscriber connection: 6 − 5 nodes');
    const job = uniq('tcp-six');
    const nodes = [0, 1, 2, 3, 4];
    // Webdis keeps its own connections to the nodes: counted before, left out.
    const base = await clients(nodes);
    let sampling = true;
    const seen = { all: 0, subscribers: 0 };
    const sampler = (async () => {
      while (sampling) {
        const c = await clients(nodes);
        seen.all = Math.max(seen.all, c.all - base.all);
        seen.subscribers = Math.max(seen.subscribers, c.subscribers - base.subscribers);
        await sleep(5);
      }
    })();
    const r = await w.call('redlock5', 'POST', `/jobs/${job}/run?runs=6&waitMs=30000&jobMs=150`);
    sampling = false;
    await sampler;
    assert.equal(r.status, 200, r.text);
    assert.equal(r.body.runs.length, 6);
    for (const one of r.body.runs) {
      assert.equal(one.status, 200, JSON.stringify(one));
      assert.equal(one.release.released, true, JSON.stringify(one));
    }
    const { peak, opened, open } = r.body.connections;
    assert.ok(peak <= 6, `at most 6 connections at once (the factory's count): ${peak}`);
    assert.ok(peak >= 5, `one command connection per node: ${peak}`);
    assert.equal(open, 0, 'every connection closed at the end');
    assert.ok(seen.all <= 6, `at most 6 connections on the servers (CLIENT LIST): ${seen.all}`);
    assert.ok(seen.subscribers <= 1, `at most 1 subscriber connection: ${seen.subscribers}`);
    assert.ok(r.body.subrequests.total <= r.body.subrequests.budget, r.text);
    await assertSerialRuns(env, job, 6);
    console.log(`# redis:// Redlock x5, 6 runs in one invocation: peak ${peak} connections (${opened} opened), servers saw ${seen.all} (${seen.subscribers} subscriber)`);
  });

  test('runs: 1..=20 on /run only, else 400 before any connection', async () => {
    for (const q of ['runs=0', 'runs=21', 'runs=two']) {
      const r = await w.call('one', 'POST', `/jobs/x/run?${q}`);
      assert.equal(r.status, 400, `${q}: ${r.text}`);
      assert.match(r.body.error, /runs must be a whole number from 1 to 20/);
    }
    const start = await w.call('one', 'POST', '/jobs/x/start?runs=2');
    assert.equal(start.status, 400, start.text);
    assert.match(start.body.error, /runs is for POST \/jobs\/:name\/run only/);
  });

  test('a Redlock mixing redis:// and webdis+http:// nodes serves runs (waiters poll by default)', async () => {
    const info = await w.call('mixed', 'GET', '/');
    assert.equal(info.body.maxSubscriptions, 0);
    const job = uniq('tcp-mixed');
    const r = await w.call('mixed', 'POST', `/jobs/${job}/run?runs=3&waitMs=30000`);
    assert.equal(r.status, 200, r.text);
    for (const one of r.body.runs) assert.equal(one.status, 200, JSON.stringify(one));
    assert.ok(r.body.connections.peak <= 2, r.text);
    await assertSerialRuns(env, job, 3);
  });
});
