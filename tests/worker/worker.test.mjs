// The job coordinator Worker in workerd (Miniflare), against real etcd, real
// Redis through webdis and through the Upstash gateway, and Redlock over
// three nodes. Needs build/ (scripts/build-worker.sh) and the devtools
// binaries; scripts/test-worker.sh does both.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import {
  assertSerialRuns,
  backendBindings,
  deadUrl,
  resourceLog,
  startBackends,
  startWorkers,
  TEST_API_TOKEN,
} from './support.mjs';
import { gatewayCommand, lockKey, wakeChannel } from '../js/support/redis.mjs';
import { spawnWithJsonLine, findDevtoolsBin, stopChild } from '../js/testenv.mjs';

let env;
before(async () => {
  env = await startBackends();
});
after(async () => {
  await env?.stop();
});

// Subrequests one invocation may make in the budget tests: enough to start
// waiting, too few to wait long (etcd: lease + txn, then the watch is refused;
// Redis: a few polls; Redlock: two rounds of three).
const SMALL_BUDGET = { etcd: 5, 'redis (webdis)': 6, 'redis (upstash)': 6, redlock: 10 };

// The Redis nodes (testenv indices) each backend's bindings use: node i's
// webdis and gateway front the same redis-server.
const REDIS_NODES = { 'redis (webdis)': [0], 'redis (upstash)': [1], redlock: [0, 1, 2] };
// The default cap on wake-up subscriptions: max(0, 6 − nodes) on one node,
// 0 on Redlock (a burst of waiters would spend the budget on wake-ups).
const DEFAULT_MAX_SUBSCRIPTIONS = { etcd: null, 'redis (webdis)': 5, 'redis (upstash)': 5, redlock: 0 };

/** Subscribers of `channel` on each of the testenv Redis nodes `indices`. */
async function numsub(e, indices, channel) {
  return Promise.all(indices.map(async (i) => Number((await gatewayCommand(e.gateway_urls[i], e.token, 'PUBSUB', 'NUMSUB', channel))[1])));
}
/** Polls `check` until truthy; `ms` is a must-happen bound, not a timing assumption. */
async function until(check, ms, what) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await check();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const slug = (s) => s.replace(/[^a-z]+/g, '-').replace(/-$/, '');
const uniq = (s) => `${s}-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 6)}`;

// A backend whose servers do not answer (or refuse the credentials).
async function downBindings(backend) {
  const dead = await deadUrl();
  switch (backend) {
    case 'etcd':
      return { EDGELOCK_BACKEND: 'etcd', EDGELOCK_ETCD_ENDPOINTS: dead };
    case 'redis (webdis)':
      return { EDGELOCK_BACKEND: 'redis', EDGELOCK_REDIS_URL: `webdis+${dead}` };
    case 'redis (upstash)':
      // A live gateway, a wrong token: the backend refuses (HTTP 401).
      return { EDGELOCK_BACKEND: 'redis', EDGELOCK_REDIS_URL: `upstash+${env.gateway_urls[1]}`, EDGELOCK_REDIS_TOKEN: 'wrong-token-0123456789' };
    default:
      return { EDGELOCK_BACKEND: 'redlock', EDGELOCK_REDLOCK_NODES: [dead, await deadUrl(), await deadUrl()].map((u) => `webdis+${u}`).join(',') };
  }
}

const EXPECTED_DOWN = {
  etcd: [502, 'TRANSPORT'],
  'redis (webdis)': [502, 'TRANSPORT'],
  'redis (upstash)': [502, 'BACKEND'],
  redlock: [502, 'NO_QUORUM'],
};

for (const backend of ['etcd', 'redis (webdis)', 'redis (upstash)', 'redlock']) {
  describe(`Worker on ${backend}`, { timeout: 300_000 }, () => {
    let w;
    const cronJob = uniq(`cron-${slug(backend)}`);
    const electJob = uniq(`elect-${slug(backend)}`);
    before(async () => {
      const common = {
        ...backendBindings(env)[backend],
        EDGELOCK_PREFIX: `wt-${slug(backend)}`,
        EDGELOCK_FENCED_URL: env.fenced_url,
        EDGELOCK_JOB_MS: '20',
        EDGELOCK_CRON_JOB: cronJob,
        EDGELOCK_CRON_WAIT_MS: '60000',
      };
      w = await startWorkers({
        main: common,
        budget: { ...common, EDGELOCK_SUBREQUEST_BUDGET: String(SMALL_BUDGET[backend]) },
        // Push on Redlock is opt-in in a Worker: 3 nodes, 3 subscriptions.
        push: backend === 'redlock' ? { ...common, EDGELOCK_MAX_SUBSCRIPTIONS: '3' } : common,
        down: { ...common, ...(await downBindings(backend)) },
        // The cron job runs only on the elected leader; the others skip.
        elect: { ...common, EDGELOCK_CRON_JOB: electJob, EDGELOCK_CRON_ELECT: 'true', EDGELOCK_CRON_WAIT_MS: '0', EDGELOCK_JOB_MS: '400' },
      });
    });
    after(async () => {
      await w?.dispose();
    });

    test('an uncontended run answers 200 with its fencing token and stays within the budget', async () => {
      const job = uniq('solo');
      const r = await w.call(null, 'POST', `/jobs/${job}/run`);
      assert.equal(r.status, 200, r.text);
      assert.match(r.body.token, /^[0-9]+$/);
      assert.equal(r.body.accepted, true);
      assert.deepEqual(r.body.release, { released: true, heldUntilRelease: true });
      assert.ok(r.body.finished >= r.body.started + 20, `the job worked 20 ms (${r.body.started}..${r.body.finished})`);
      assert.ok(r.body.subrequests.total <= 50);
      assert.equal(r.body.subrequests.job, 1);
      console.log(`# ${backend}: one uncontended job run = ${r.body.subrequests.lock} lock + ${r.body.subrequests.job} job subrequests`);
      const log = await resourceLog(env, job);
      assert.deepEqual(log.map((e) => [e.token, e.accepted]), [[r.body.token, true]]);
      if (env.token) assert.ok(!r.text.includes(env.token), 'the Upstash token is never echoed');
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

    test('10 concurrent cron events: one at a time, strictly increasing tokens', async () => {
      const results = await Promise.all(Array.from({ length: 10 }, () => w.scheduled('main')));
      for (const r of results) assert.equal(r.outcome, 'ok', JSON.stringify(r));
      await assertSerialRuns(env, cronJob, 10);
    });

    test('EDGELOCK_CRON_ELECT: of 6 concurrent cron events only the elected leader runs the job; GET /leaders/:name shows it while it runs', async () => {
      assert.deepEqual((await w.call('elect', 'GET', `/leaders/${electJob}`)).body, { name: electJob, leader: null });
      const firing = Promise.all(Array.from({ length: 6 }, () => w.scheduled('elect')));
      const seen = await until(async () => (await w.call('elect', 'GET', `/leaders/${electJob}`)).body.leader, 10_000, 'a leader while the job runs');
      assert.match(seen.value, /^cron:[0-9a-f]+$/);
      assert.match(seen.fencingToken, /^[0-9]+$/);
      const results = await firing;
      for (const r of results) assert.equal(r.outcome, 'ok', JSON.stringify(r));
      const entries = await resourceLog(env, electJob);
      assert.equal(entries.length, 1, `one run, by the leader: ${JSON.stringify(entries)}`);
      assert.equal(entries[0].accepted, true);
      assert.equal(entries[0].token, seen.fencingToken, "the run wrote with the leadership's token");
      assert.deepEqual((await w.call('elect', 'GET', `/leaders/${electJob}`)).body.leader, null, 'the leader resigned after its run');
      // A later firing is elected again, with a higher token.
      assert.equal((await w.scheduled('elect')).outcome, 'ok');
      const after = await resourceLog(env, electJob);
      assert.equal(after.length, 2);
      assert.ok(BigInt(after[1].token) > BigInt(after[0].token));
    });

    test('GET / names the default cap on wake-up subscriptions: max(0, 6 − nodes)', async () => {
      const r = await w.call(null, 'GET', '/');
      assert.equal(r.status, 200, r.text);
      assert.equal(r.body.maxSubscriptions, DEFAULT_MAX_SUBSCRIPTIONS[backend]);
    });

    if (backend !== 'etcd') {
      test('a waiting run is woken by push: one subscription per node, within the subrequest budget, stream closed after', async () => {
        const job = uniq('push');
        const nodes = REDIS_NODES[backend];
        const channel = wakeChannel(lockKey(job, `wt-${slug(backend)}`));
        const held = await w.call('push', 'POST', `/jobs/${job}/start`);
        assert.equal(held.status, 200, held.text);
        const waitFrom = Date.now();
        const waiting = w.call('push', 'POST', `/jobs/${job}/run?waitMs=30000`);
        await until(async () => (await numsub(env, nodes, channel)).every((n) => n === 1), 20_000, 'a subscription on every node');
        // Held 3 s: a waiter polling every 200–300 ms would make 10+ attempts;
        // a subscribed one attempts on confirmation, once on its 2 s fallback
        // timer and on the release's message.
        await sleep(3000);
        assert.deepEqual(await numsub(env, nodes, channel), nodes.map(() => 1), 'still subscribed');
        const done = await w.call('push', 'POST', `/jobs/${job}/finish`, held.body);
        assert.equal(done.status, 200, done.text);
        const r = await waiting;
        const waitedMs = Date.now() - waitFrom;
        assert.equal(r.status, 200, r.text);
        assert.ok(BigInt(r.body.token) > BigInt(held.body.token));
        // A time bound kept: 3–7 ms calm, up to 54 ms beside two CPU hogs (18x).
        assert.ok(r.body.started - done.body.finished < 1000, `woken ${r.body.started - done.body.finished} ms after the release`);
        const { lock, total, budget } = r.body.subrequests;
        assert.ok(total <= budget, `within the budget: ${JSON.stringify(r.body.subrequests)}`);
        // Push: per node the subscription, the first attempt, one per
        // confirmation (up to one per node), one on the 2 s fallback timer,
        // one on the release's message, Redlock's fencing round and the
        // release — at most 8 on one node, 3 × 10 on three. Polling every
        // 200–300 ms for over 3 s: at least 11 on one node, 3 × 12 on three.
        // A loaded machine stretches the wait past 3 s: the fallback timer
        // (never sooner than 2 s apart) then adds a round per further 2 s,
        // counted from the wait as measured; polling would add 7+ per 2 s.
        assert.ok(lock >= 3 * nodes.length, `the subscriptions are counted: ${lock}`);
        const extraFallbacks = Math.max(0, Math.floor(waitedMs / 2000) - 1);
        const pushBound = (nodes.length === 1 ? 8 : 10 * nodes.length) + extraFallbacks * nodes.length;
        assert.ok(lock <= pushBound, `${lock} lock subrequests for ${nodes.length} node(s) in a ${waitedMs} ms wait: it did not poll`);
        console.log(`# ${backend}: a ${waitedMs} ms wait woken by push = ${lock} lock subrequests (bound ${pushBound}), woken ${r.body.started - done.body.finished} ms after the release`);
        await until(async () => (await numsub(env, nodes, channel)).every((n) => n === 0), 20_000, 'the streams to close');
      });
    }

    test('busy: 409 BUSY with ifAvailable, 504 TIMEOUT after waitMs; GET /locks shows the holder', async () => {
      const job = uniq('busy');
      const held = await w.call(null, 'POST', `/jobs/${job}/start`);
      assert.equal(held.status, 200, held.text);

      const busy = await w.call(null, 'POST', `/jobs/${job}/run?ifAvailable`);
      assert.equal(busy.status, 409, busy.text);
      assert.equal(busy.body.code, 'BUSY');

      const t0 = Date.now();
      const timeout = await w.call(null, 'POST', `/jobs/${job}/run`, { waitMs: 400 });
      assert.equal(timeout.status, 504, timeout.text);
      assert.equal(timeout.body.code, 'TIMEOUT');
      assert.ok(Date.now() - t0 >= 350, 'it waited');

      const status = await w.call(null, 'GET', `/locks/${job}`);
      assert.equal(status.status, 200, status.text);
      assert.equal(status.body.held, true);
      assert.equal(status.body.name, job);
      assert.ok(status.body.remainingMs > 0 && status.body.expiresAt > Date.now() - 1000, status.text);
      if (backend === 'etcd') {
        assert.equal(status.body.token, held.body.token, 'etcd tells the holder and its token');
        assert.ok(status.body.holder.includes(job), status.text);
        assert.deepEqual(status.body.waiters, [], 'the timed-out waiter left no key');
      }
      assert.equal((await resourceLog(env, job)).length, 0, 'no run happened while it was held');

      const done = await w.call(null, 'POST', `/jobs/${job}/finish`, held.body);
      assert.equal(done.status, 200, done.text);
      const free = await w.call(null, 'GET', `/locks/${job}`);
      assert.equal(free.body.held, false, free.text);
    });

    test('a handle taken in one invocation is resumed and released by another', async () => {
      const job = uniq('handle');
      const first = await w.call(null, 'POST', `/jobs/${job}/start`);
      assert.equal(first.status, 200, first.text);
      const handle = first.body.handle;
      assert.equal(handle.name, job);
      assert.equal(handle.fencingToken, first.body.token);

      // The second invocation gets only the JSON handle.
      const second = await w.call(null, 'POST', `/jobs/${job}/finish`, JSON.stringify({ handle }));
      assert.equal(second.status, 200, second.text);
      assert.equal(second.body.token, first.body.token, 'the job ran under the token of the first invocation');
      assert.deepEqual(second.body.release, { released: true, heldUntilRelease: true });

      // The lock is free again, and the handle is spent.
      const again = await w.call(null, 'POST', `/jobs/${job}/finish`, { handle });
      assert.equal(again.status, 409, again.text);
      assert.equal(again.body.code, 'LOST');
      const next = await w.call(null, 'POST', `/jobs/${job}/run?ifAvailable`);
      assert.equal(next.status, 200, next.text);
      assert.ok(BigInt(next.body.token) > BigInt(first.body.token));
      const log = await resourceLog(env, job);
      assert.deepEqual(log.map((e) => [e.token, e.accepted]), [[first.body.token, true], [next.body.token, true]]);
    });

    test('backend down: 502 with the LockError code, no secret in the answer', async () => {
      const [status, code] = EXPECTED_DOWN[backend];
      // Long enough for Redlock to end its retries (NO_QUORUM) before the wait does.
      const r = await w.call('down', 'POST', `/jobs/${uniq('down')}/run?waitMs=20000`);
      assert.equal(r.status, status, r.text);
      assert.equal(r.body.code, code, r.text);
      assert.ok(r.body.error.length > 0);
      assert.ok(!r.text.includes('wrong-token-0123456789'), 'the token is not echoed');
      const s = await w.call('down', 'GET', `/locks/${uniq('down')}`);
      assert.equal(s.status, status, s.text);
    });

    test('the subrequest budget ends a long wait with 503 BUDGET before it runs out', async () => {
      const budget = SMALL_BUDGET[backend];
      const job = uniq('budget');
      const held = await w.call(null, 'POST', `/jobs/${job}/start`);
      assert.equal(held.status, 200, held.text);

      const t0 = Date.now();
      const r = await w.call('budget', 'POST', `/jobs/${job}/run?waitMs=60000`);
      assert.equal(r.status, 503, r.text);
      assert.equal(r.body.code, 'BUDGET');
      assert.match(r.body.error, new RegExp(`budget of ${budget - 1}\\b`), 'the lock had the budget minus the job');
      assert.ok(r.body.subrequests.total <= budget, `made ${r.body.subrequests.total} of ${budget}`);
      assert.ok(Date.now() - t0 < 30_000, 'it stopped long before its wait was over');

      // The budget left room to clean up: the waiter left nothing behind.
      const status = await w.call(null, 'GET', `/locks/${job}`);
      assert.equal(status.body.held, true);
      if (backend === 'etcd') assert.deepEqual(status.body.waiters, [], status.text);
      // And the job can still run once the holder finishes.
      const done = await w.call(null, 'POST', `/jobs/${job}/finish`, held.body);
      assert.equal(done.status, 200, done.text);
    });
  });
}

// Redlock over 5 nodes: an invocation may hold only 6 connections open, so
// by default a waiter subscribes on the first node only (1 stream + a round
// of 5 attempts) and leaves the other four to its timer.
describe('Worker on Redlock over 5 nodes: the subscription cap', { timeout: 300_000 }, () => {
  let five;
  let w;
  before(async () => {
    const e = { ...process.env };
    delete e.EDGELOCK_TESTENV_TOKEN;
    const { child, info } = await spawnWithJsonLine(findDevtoolsBin('testenv'), ['--redis', '5', '--webdis', '--gateway'], { env: e, timeoutMs: 120_000 });
    child.unref();
    five = { ...info, stop: () => stopChild(child) };
    const common = {
      EDGELOCK_BACKEND: 'redlock',
      EDGELOCK_REDLOCK_NODES: five.webdis_urls.map((u) => `webdis+${u}`).join(','),
      EDGELOCK_PREFIX: 'wt5',
      EDGELOCK_JOB_MS: '20',
    };
    w = await startWorkers({ main: { ...common, EDGELOCK_MAX_SUBSCRIPTIONS: '1' }, polling: { ...common, EDGELOCK_MAX_SUBSCRIPTIONS: '0' } });
  });
  after(async () => {
    await w?.dispose();
    await five?.stop();
  });

  test('by default a waiter subscribes on node 0 only and is woken there by the release', async () => {
    assert.equal((await w.call('main', 'GET', '/')).body.maxSubscriptions, 1);
    const job = uniq('cap');
    const channel = wakeChannel(lockKey(job, 'wt5'));
    const held = await w.call('main', 'POST', `/jobs/${job}/start`);
    assert.equal(held.status, 200, held.text);
    const waiting = w.call('main', 'POST', `/jobs/${job}/run?waitMs=30000`);
    await until(async () => (await numsub(five, [0], channel))[0] === 1, 20_000, 'the subscription on node 0');
    // Then no subscription appears on the other nodes (a check that
    // something does not happen: the pause can only miss it, not fail).
    await sleep(500);
    assert.deepEqual(await numsub(five, [0, 1, 2, 3, 4], channel), [1, 0, 0, 0, 0]);
    const done = await w.call('main', 'POST', `/jobs/${job}/finish`, held.body);
    assert.equal(done.status, 200, done.text);
    const r = await waiting;
    assert.equal(r.status, 200, r.text);
    // A time bound kept: 8 ms calm, 25 ms beside two CPU hogs (40x).
    assert.ok(r.body.started - done.body.finished < 1000, `woken ${r.body.started - done.body.finished} ms after the release`);
    assert.ok(r.body.subrequests.total <= r.body.subrequests.budget, JSON.stringify(r.body.subrequests));
    console.log(`# redlock x5, subscribed on node 0: woken ${r.body.started - done.body.finished} ms after the release`);
    await until(async () => (await numsub(five, [0], channel))[0] === 0, 20_000, 'the stream to close');
  });

  test('EDGELOCK_MAX_SUBSCRIPTIONS=0: the waiter polls, no subscription', async () => {
    assert.equal((await w.call('polling', 'GET', '/')).body.maxSubscriptions, 0);
    const job = uniq('poll');
    const channel = wakeChannel(lockKey(job, 'wt5'));
    const held = await w.call('polling', 'POST', `/jobs/${job}/start`);
    assert.equal(held.status, 200, held.text);
    const waiting = w.call('polling', 'POST', `/jobs/${job}/run?waitMs=30000`);
    // No subscription appears (a check that something does not happen).
    await sleep(800);
    assert.deepEqual(await numsub(five, [0, 1, 2, 3, 4], channel), [0, 0, 0, 0, 0]);
    const done = await w.call('polling', 'POST', `/jobs/${job}/finish`, held.body);
    assert.equal(done.status, 200, done.text);
    const r = await waiting;
    assert.equal(r.status, 200, r.text);
  });
});

// "At most N at once": `limit` on the run/start routes, or the job's entry in
// EDGELOCK_JOB_LIMITS, takes one of N permits of a semaphore (the backends
// grant them; until then they refuse with INVALID_ARGUMENT before sending
// anything). A permit's run writes to the resource `name.slot`.
for (const backend of ['etcd', 'redis (upstash)', 'redlock']) {
  describe(`Worker on ${backend}: jobs that run at most N at once`, { timeout: 300_000 }, () => {
    let w;
    const capped = uniq(`capped-${slug(backend)}`);
    before(async () => {
      w = await startWorkers({
        main: {
          ...backendBindings(env)[backend],
          EDGELOCK_PREFIX: `wt-sem-${slug(backend)}`,
          EDGELOCK_FENCED_URL: env.fenced_url,
          EDGELOCK_JOB_MS: '20',
          // Per backend: the fenced resource (and its tokens) is shared by all.
          EDGELOCK_JOB_LIMITS: `${capped}=2, other=5`,
        },
      });
    });
    after(async () => {
      await w?.dispose();
    });

    test('bad limits are 400 INVALID_ARGUMENT before any subrequest', async () => {
      const job = uniq('bad-limit');
      // The last case: `capped` runs 2 at once (EDGELOCK_JOB_LIMITS), 3 contradicts it.
      for (const [target, query, body] of [[job, '?limit=0'], [job, '?limit=101'], [job, '?limit=x'], [job, '?limit=-1'],
        [job, '', { limit: 1.5 }], [job, '', { limit: '3' }], [job, '', { limit: 0 }], [capped, '?limit=3']]) {
        for (const route of ['run', 'start']) {
          const r = await w.call(null, 'POST', `/jobs/${target}/${route}${query}`, body);
          assert.equal(r.status, 400, `${route}${query} ${JSON.stringify(body)}: ${r.text}`);
          assert.equal(r.body.code, 'INVALID_ARGUMENT', r.text);
          assert.equal(r.body.subrequests?.lock ?? 0, 0, `nothing was sent: ${r.text}`);
        }
      }
      const r = await w.call(null, 'GET', '/');
      assert.deepEqual(r.body.jobLimits, { [capped]: 2, other: 5 });
    });

    test('limit=2: six concurrent runs, two at a time, each slot a serial fenced history', async () => {
      const job = uniq('sem');
      const replies = await Promise.all(
        Array.from({ length: 6 }, () => w.call(null, 'POST', `/jobs/${job}/run?limit=2&waitMs=60000&jobMs=300`)),
      );
      for (const r of replies) {
        assert.equal(r.status, 200, r.text);
        assert.equal(r.body.mode, 'permit');
        assert.equal(r.body.limit, 2);
        assert.ok(r.body.slot === 0 || r.body.slot === 1, r.text);
        assert.equal(r.body.accepted, true, r.text);
      }
      // Never more than two runs overlap in time, and two did.
      const edges = replies.flatMap((r) => [[r.body.started, 1], [r.body.finished, -1]]).sort((a, b) => a[0] - b[0] || a[1] - b[1]);
      let inside = 0;
      let most = 0;
      for (const [, d] of edges) most = Math.max(most, (inside += d));
      assert.equal(most, 2, `at most and at least 2 at once: ${JSON.stringify(replies.map((r) => [r.body.slot, r.body.started, r.body.finished]))}`);
      for (const slot of [0, 1]) {
        const runs = replies.filter((r) => r.body.slot === slot).length;
        await assertSerialRuns(env, `${job}.${slot}`, runs);
      }
    });

    test('a configured job (EDGELOCK_JOB_LIMITS capped=2): 409 BUSY when both permits are held; GET /locks lists them', async () => {
      const a = await w.call(null, 'POST', `/jobs/${capped}/start`);
      const b = await w.call(null, 'POST', `/jobs/${capped}/start?limit=2`);
      for (const r of [a, b]) {
        assert.equal(r.status, 200, r.text);
        assert.equal(r.body.mode, 'permit');
        assert.equal(r.body.handle.mode, 'permit');
        assert.equal(r.body.handle.limit, 2);
      }
      assert.deepEqual([a.body.slot, b.body.slot].sort(), [0, 1]);
      const busy = await w.call(null, 'POST', `/jobs/${capped}/run?ifAvailable`);
      assert.equal(busy.status, 409, busy.text);
      assert.equal(busy.body.code, 'BUSY');
      const status = await w.call(null, 'GET', `/locks/${capped}`);
      assert.equal(status.status, 200, status.text);
      assert.equal(status.body.limit, 2);
      assert.deepEqual(status.body.holders.map((h) => [h.mode, h.slot]).sort(), [['permit', 0], ['permit', 1]]);
      for (const r of [a, b]) {
        const done = await w.call(null, 'POST', `/jobs/${capped}/finish`, r.body);
        assert.equal(done.status, 200, done.text);
        assert.equal(done.body.slot, r.body.slot);
      }
      // An exclusive handle does not finish a job that runs 2 at once.
      const excl = await w.call(null, 'POST', `/jobs/${uniq('excl')}/start`);
      assert.equal(excl.status, 200, excl.text);
      const wrong = await w.call(null, 'POST', `/jobs/${capped}/finish`, { handle: { ...excl.body.handle, name: capped } });
      assert.equal(wrong.status, 400, wrong.text);
      assert.equal(wrong.body.code, 'INVALID_ARGUMENT');
    });
  });
}

describe('Worker access control: every route needs the deployment\'s bearer token', { timeout: 120_000 }, () => {
  let w;
  const REPORTS_TOKEN = 'reports-only-token-0123456789';
  before(async () => {
    const common = { ...backendBindings(env).etcd, EDGELOCK_PREFIX: 'wt-auth', EDGELOCK_FENCED_URL: env.fenced_url, EDGELOCK_JOB_MS: '20', EDGELOCK_CRON_WAIT_MS: '0' };
    w = await startWorkers({
      main: { ...common, EDGELOCK_API_TOKENS: `reports-=${REPORTS_TOKEN}` },
      // No token configured at all: fails closed.
      open: { ...common, EDGELOCK_API_TOKEN: null, EDGELOCK_CRON_JOB: uniq('auth-cron') },
    });
  });
  after(async () => {
    await w?.dispose();
  });

  const routes = (job) => [
    ['GET', '/'],
    ['POST', `/jobs/${job}/run`],
    ['POST', `/jobs/${job}/start`],
    ['POST', `/jobs/${job}/finish`],
    ['GET', `/locks/${job}`],
    ['GET', `/leaders/${job}`],
  ];

  /** `job` is free and nothing ran under it: the refused calls changed nothing. */
  async function unchanged(job) {
    const s = await w.call('main', 'GET', `/locks/${job}`);
    assert.equal(s.status, 200, s.text);
    assert.equal(s.body.held, false, `nobody holds ${job}: ${s.text}`);
    assert.deepEqual(await resourceLog(env, job), [], 'no job ran');
  }

  test('no token, a wrong token, another scheme: 401 UNAUTHORIZED on every route, nothing changes', async () => {
    const job = uniq('auth-none');
    for (const authorization of [null, 'Bearer wrong-token-0123456789abcdef', `Basic ${TEST_API_TOKEN}`, TEST_API_TOKEN, 'Bearer ']) {
      for (const [method, path] of routes(job)) {
        const r = await w.call('main', method, path, method === 'POST' ? {} : undefined, { authorization });
        assert.equal(r.status, 401, `${method} ${path} with ${authorization}: ${r.text}`);
        assert.equal(r.body.code, 'UNAUTHORIZED');
        assert.ok(!r.text.includes(TEST_API_TOKEN) && !r.text.includes(REPORTS_TOKEN), 'no token in the answer');
      }
    }
    await unchanged(job);
  });

  test('a token scoped to a prefix: 403 FORBIDDEN outside it, allowed inside it', async () => {
    const outside = uniq('auth-billing');
    for (const [method, path] of routes(outside).slice(1)) {
      const r = await w.call('main', method, path, method === 'POST' ? {} : undefined, { authorization: `Bearer ${REPORTS_TOKEN}` });
      assert.equal(r.status, 403, `${method} ${path}: ${r.text}`);
      assert.equal(r.body.code, 'FORBIDDEN');
      assert.ok(!r.text.includes(REPORTS_TOKEN));
    }
    await unchanged(outside);
    const inside = uniq('reports-nightly');
    const path = `/jobs/${inside}/run`;
    const r = await w.call('main', 'POST', path, undefined, { authorization: `Bearer ${REPORTS_TOKEN}` });
    assert.equal(r.status, 200, r.text);
    assert.equal((await resourceLog(env, inside)).length, 1, 'the job ran once');
    // The all-names token works everywhere.
    const all = await w.call('main', 'POST', `/jobs/${uniq('auth-all')}/run`);
    assert.equal(all.status, 200, all.text);
  });

  test('a deployment without a token refuses every route with 403 NOT_CONFIGURED naming the secret; its cron still runs', async () => {
    const job = uniq('auth-open');
    for (const authorization of [null, `Bearer ${TEST_API_TOKEN}`]) {
      for (const [method, path] of routes(job)) {
        const r = await w.call('open', method, path, method === 'POST' ? {} : undefined, { authorization });
        assert.equal(r.status, 403, `${method} ${path}: ${r.text}`);
        assert.equal(r.body.code, 'NOT_CONFIGURED');
        assert.match(r.body.error, /EDGELOCK_API_TOKEN/);
        assert.match(r.body.error, /wrangler secret put/);
      }
    }
    await unchanged(job);
    const cron = await w.scheduled('open');
    assert.equal(cron.outcome, 'ok', JSON.stringify(cron));
  });
});
