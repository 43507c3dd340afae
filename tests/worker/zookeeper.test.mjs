// The job coordinator Worker over ZooKeeper in workerd (Miniflare): its
// client reaches the ensemble with connect() of cloudflare:sockets
// (src/worker/sockets.rs), one connection (the client's session) per
// invocation. A real ZooKeeper, the real Curator (CuratorPeer) and the
// fenced resource from testenv (free loopback ports). Needs build/
// (scripts/build-worker.sh) and the devtools binaries; scripts/test-worker.sh
// does both.
//
// - runs in several invocations at once never overlap (the fenced resource's
//   log), tokens rise, each invocation holds one connection and closes it;
// - 6 runs in one invocation share its one connection;
// - a Curator holder of /edgelock/<job> makes a run BUSY until it releases;
// - digest authentication; a refused configuration names the variable,
//   never the password;
// - /start holds the lock until the invocation's session expires; /finish
//   is refused (a ZooKeeper lock is its session's node: no resume).

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { assertSerialRuns, startWorkers } from './support.mjs';
import { findDevtoolsBin, spawnWithJsonLine, stopChild } from '../js/testenv.mjs';
import { startCurator } from '../js/support/zookeeper.mjs';

const SESSION_MS = 4000;
const PASSWORD = 'zk-w0rker-s3cret';
const uniq = (s) => `${s}-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 6)}`;

let env;
let stopEnv;
const peers = [];
before(async () => {
  const { child, info } = await spawnWithJsonLine(findDevtoolsBin('testenv'), ['--zookeeper', '--curator', '--fenced'], {
    env: Object.fromEntries(Object.entries(process.env).filter(([k]) => k !== 'EDGELOCK_TESTENV_TOKEN')),
    timeoutMs: 120_000,
  });
  child.unref();
  for (const s of [child.stdout, child.stderr, child.stdin]) s.unref?.();
  env = info;
  stopEnv = () => stopChild(child);
});
after(async () => {
  await Promise.allSettled(peers.map((p) => p.close()));
  await stopEnv?.();
});

describe('Worker over ZooKeeper (connect())', () => {
  let w;
  before(async () => {
    const common = {
      EDGELOCK_BACKEND: 'zookeeper',
      EDGELOCK_ZK_CONNECT: env.zookeeper_connect,
      EDGELOCK_TTL_MS: String(SESSION_MS),
      EDGELOCK_FENCED_URL: env.fenced_url,
      EDGELOCK_JOB_MS: '20',
    };
    w = await startWorkers({
      zk: common,
      digest: { ...common, EDGELOCK_ZK_DIGEST_USER: 'locker', EDGELOCK_ZK_DIGEST_PASSWORD: PASSWORD },
      noPassword: { ...common, EDGELOCK_ZK_DIGEST_USER: 'locker' },
      badConnect: { ...common, EDGELOCK_ZK_CONNECT: '127.0.0.1:2181/bad/', EDGELOCK_ZK_DIGEST_USER: 'locker', EDGELOCK_ZK_DIGEST_PASSWORD: PASSWORD },
    });
  });
  after(async () => {
    await w?.dispose();
  });

  test('runs in 4 invocations at once never overlap; one connection each, closed after', async () => {
    const job = uniq('zk-runs');
    const replies = await Promise.all([0, 1, 2, 3].map(() => w.call('zk', 'POST', `/jobs/${job}/run?waitMs=30000&jobMs=50`)));
    for (const r of replies) {
      assert.equal(r.status, 200, r.text);
      assert.equal(r.body.release.released, true, r.text);
      assert.deepEqual({ peak: r.body.connections.peak, open: r.body.connections.open }, { peak: 1, open: 0 }, r.text);
      assert.ok(r.body.subrequests.total <= r.body.subrequests.budget, r.text);
    }
    await assertSerialRuns(env, job, 4);
  });

  test('6 runs in one invocation share its one connection', async () => {
    const job = uniq('zk-six');
    const r = await w.call('zk', 'POST', `/jobs/${job}/run?runs=6&waitMs=30000&jobMs=30`);
    assert.equal(r.status, 200, r.text);
    assert.equal(r.body.runs.length, 6);
    for (const one of r.body.runs) assert.equal(one.release.released, true, JSON.stringify(one));
    assert.deepEqual({ peak: r.body.connections.peak, opened: r.body.connections.opened, open: r.body.connections.open }, { peak: 1, opened: 1, open: 0 }, r.text);
    await assertSerialRuns(env, job, 6);
  });

  test("Curator's InterProcessMutex on /edgelock/<job> makes a run BUSY until it releases", async () => {
    const job = uniq('zk-curator');
    const curator = await startCurator(env, SESSION_MS, peers);
    const held = await curator.send(`mutex-acquire /edgelock/${job} 5000`);
    assert.match(held, /^OK /);
    const busy = await w.call('zk', 'POST', `/jobs/${job}/run?ifAvailable=true`);
    assert.equal(busy.status, 409, busy.text);
    assert.equal(busy.body.code, 'BUSY', busy.text);
    const waiting = w.call('zk', 'POST', `/jobs/${job}/run?waitMs=20000`);
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(await curator.send(`mutex-release /edgelock/${job}`), 'OK');
    const r = await waiting;
    assert.equal(r.status, 200, r.text);
    assert.ok(BigInt(r.body.token) > BigInt(held.split(' ')[2]), `${r.body.token} after Curator's ${held}`);
    assert.equal(await curator.send('close'), 'OK');
  });

  test('digest authentication; refused configurations name the variable, never the password', async () => {
    const ok = await w.call('digest', 'POST', `/jobs/${uniq('zk-digest')}/run`);
    assert.equal(ok.status, 200, ok.text);
    const missing = await w.call('noPassword', 'POST', '/jobs/x/run');
    assert.equal(missing.status, 400, missing.text);
    assert.match(missing.body.error, /EDGELOCK_ZK_DIGEST_USER needs the secret EDGELOCK_ZK_DIGEST_PASSWORD/);
    const bad = await w.call('badConnect', 'POST', '/jobs/x/run');
    assert.equal(bad.status, 400, bad.text);
    assert.equal(bad.body.code, 'INVALID_ARGUMENT');
    assert.match(bad.body.error, /EDGELOCK_ZK_CONNECT/);
    for (const r of [ok, missing, bad]) assert.doesNotMatch(r.text, new RegExp(PASSWORD));
    const info = await w.call('digest', 'GET', '/');
    assert.equal(info.status, 200, info.text);
    assert.equal(info.body.backend, 'zookeeper');
    assert.doesNotMatch(info.text, new RegExp(PASSWORD));
  });

  test('/start holds until its session expires; /finish is refused (no resume)', async () => {
    const job = uniq('zk-start');
    const started = await w.call('zk', 'POST', `/jobs/${job}/start`);
    assert.equal(started.status, 200, started.text);
    const busy = await w.call('zk', 'POST', `/jobs/${job}/run?ifAvailable=true`);
    assert.equal(busy.status, 409, busy.text);
    const finish = await w.call('zk', 'POST', `/jobs/${job}/finish`, started.body);
    assert.equal(finish.status, 400, finish.text);
    assert.match(finish.body.error, /cannot resume/);
    // The session of /start's invocation ends with it (its connection
    // closed): the server expires it within the negotiated timeout.
    const t0 = Date.now();
    const next = await w.call('zk', 'POST', `/jobs/${job}/run?waitMs=20000`);
    assert.equal(next.status, 200, next.text);
    assert.ok(BigInt(next.body.token) > BigInt(started.body.token));
    console.log(`# zookeeper /start: freed ${Date.now() - t0} ms after the refused /finish (session ${SESSION_MS} ms asked)`);
  });
});
