// Helpers for the Worker tests: real backends from the devtools `testenv`
// (etcd, redis-server behind webdis and the local Upstash gateway, the fenced
// resource), and the built Worker (build/, scripts/build-worker.sh) run in
// workerd through Miniflare's API, with nothing fetched from the network
// (`cf: false`).

import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { Miniflare } from 'miniflare';
import { findDevtoolsBin, repoRoot, spawnWithJsonLine, stopChild } from '../js/testenv.mjs';

export const buildDir = path.join(repoRoot, 'build');
export const CRON = '*/5 * * * *';
// workerd 1.20260426 accepts compatibility dates up to its own.
const COMPATIBILITY_DATE = '2026-04-20';

/** testenv with 1 etcd, 3 redis (webdis + gateway each) and a fenced resource. */
export async function startBackends() {
  const env = { ...process.env };
  delete env.EDGELOCK_TESTENV_TOKEN;
  const { child, info } = await spawnWithJsonLine(
    findDevtoolsBin('testenv'),
    ['--etcd', '1', '--redis', '3', '--webdis', '--gateway', '--fenced'],
    { env, timeoutMs: 120_000 },
  );
  child.unref();
  for (const s of [child.stdout, child.stderr, child.stdin]) s.unref?.();
  assert.ok(info.fenced_url, 'testenv started a fenced resource');
  return { ...info, stop: () => stopChild(child) };
}

/** Bindings of each backend, on the servers of `env`. */
export function backendBindings(env) {
  return {
    etcd: { EDGELOCK_BACKEND: 'etcd', EDGELOCK_ETCD_ENDPOINTS: env.etcd_urls[0] },
    'redis (webdis)': { EDGELOCK_BACKEND: 'redis', EDGELOCK_REDIS_URL: `webdis+${env.webdis_urls[0]}` },
    'redis (upstash)': {
      EDGELOCK_BACKEND: 'redis',
      EDGELOCK_REDIS_URL: `upstash+${env.gateway_urls[1]}`,
      EDGELOCK_REDIS_TOKEN: env.token,
    },
    redlock: {
      EDGELOCK_BACKEND: 'redlock',
      EDGELOCK_REDLOCK_NODES: [`webdis+${env.webdis_urls[0]}`, `upstash+${env.gateway_urls[1]}`, `webdis+${env.webdis_urls[2]}`].join(','),
      EDGELOCK_REDIS_TOKEN: env.token,
    },
  };
}

/**
 * The API token every test Worker is given (the secret `EDGELOCK_API_TOKEN`)
 * unless its bindings say otherwise, and that `call` sends by default.
 */
export const TEST_API_TOKEN = 'test-api-token-0123456789abcdef';

/**
 * One workerd running the Worker several times over, one named worker per
 * entry of `workers` ({ name: bindings }); the first is the entrypoint.
 * `lockObjects`: bind each worker's `LockObject` class (the lock service)
 * as EDGELOCK_LOCKS, SQLite-backed as wrangler.toml migrates it;
 * `persistDir`: keep Durable Object storage there;
 * `d1`: bind a D1 database (one for all workers) as EDGELOCK_D1, stored
 * under persistDir when given.
 */
export async function startWorkers(workers, { lockObjects = false, persistDir = undefined, d1 = false } = {}) {
  const script = path.join(buildDir, 'index.js');
  if (!existsSync(script)) throw new Error(`${script} is missing: run scripts/build-worker.sh first`);
  const mf = new Miniflare({
    cf: false,
    // The lock service's Durable Objects (src/worker/lock_object), stored
    // under persistDir when given (kept across Miniflare instances).
    ...(persistDir === undefined ? {} : { durableObjectsPersist: persistDir }),
    ...(d1 && persistDir !== undefined ? { d1Persist: persistDir } : {}),
    workers: Object.entries(workers).map(([name, bindings]) => ({
      name,
      modules: true,
      scriptPath: script,
      modulesRoot: buildDir,
      modulesRules: [{ type: 'CompiledWasm', include: ['**/*.wasm'] }],
      compatibilityDate: COMPATIBILITY_DATE,
      // A binding given as null is left unset (a Worker without that secret).
      bindings: Object.fromEntries(Object.entries({ EDGELOCK_API_TOKEN: TEST_API_TOKEN, ...bindings }).filter(([, v]) => v !== null)),
      ...(lockObjects ? { durableObjects: { EDGELOCK_LOCKS: { className: 'LockObject', useSQLite: true } } } : {}),
      ...(d1 ? { d1Databases: { EDGELOCK_D1: 'edgelock-test-d1' } } : {}),
    })),
  });
  await mf.ready;
  const fetchers = {};
  for (const name of Object.keys(workers)) fetchers[name] = await mf.getWorker(name);
  return {
    mf,
    /**
     * POST/GET to worker `name` (default: the entrypoint, through
     * dispatchFetch), with `Authorization: Bearer TEST_API_TOKEN` unless
     * `authorization` says otherwise (null: no header).
     */
    async call(name, method, urlPath, body, { authorization = `Bearer ${TEST_API_TOKEN}` } = {}) {
      const init = { method, headers: {} };
      if (authorization !== null) init.headers.authorization = authorization;
      if (body !== undefined) {
        init.body = typeof body === 'string' ? body : JSON.stringify(body);
        init.headers['content-type'] = 'application/json';
      }
      const url = `http://worker.test${urlPath}`;
      const res = name === null ? await mf.dispatchFetch(url, init) : await fetchers[name].fetch(url, init);
      const text = await res.text();
      let json;
      try {
        json = JSON.parse(text);
      } catch {
        throw new Error(`${method} ${urlPath}: HTTP ${res.status}, not JSON: ${text.slice(0, 300)}`);
      }
      return { status: res.status, body: json, text };
    },
    /** Fires the cron trigger of worker `name`; resolves with { outcome }. */
    scheduled(name) {
      return fetchers[name].scheduled({ cron: CRON, scheduledTime: new Date() });
    },
    dispose: () => mf.dispose(),
  };
}

/** The fenced resource's log for `resource`. */
export async function resourceLog(env, resource) {
  const res = await fetch(`${env.fenced_url}/log?resource=${encodeURIComponent(resource)}`);
  assert.equal(res.status, 200);
  return (await res.json()).entries;
}

/**
 * The resource's log shows `runs` runs of `resource`, every one accepted,
 * with strictly increasing tokens in arrival order and no two runs
 * overlapping in time (each starts after the previous one finished).
 */
export async function assertSerialRuns(env, resource, runs) {
  const entries = await resourceLog(env, resource);
  assert.equal(entries.length, runs, `${runs} runs of ${resource} reached the resource`);
  for (const e of entries) assert.equal(e.accepted, true, `token ${e.token} accepted`);
  const tokens = entries.map((e) => BigInt(e.token));
  for (let i = 1; i < tokens.length; i++) {
    assert.ok(tokens[i] > tokens[i - 1], `tokens strictly increase: ${tokens.join(', ')}`);
  }
  const byStart = entries.map((e) => e.record).sort((a, b) => a.started - b.started);
  for (let i = 1; i < byStart.length; i++) {
    const [prev, next] = [byStart[i - 1], byStart[i]];
    assert.ok(
      next.started >= prev.finished,
      `run with token ${next.token} started at ${next.started} before run ${prev.token} finished at ${prev.finished}`,
    );
  }
  return entries;
}

/** A port on which nothing listens (bound, then released). */
export async function deadUrl() {
  const net = await import('node:net');
  const server = net.createServer();
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address();
  await new Promise((resolve) => server.close(resolve));
  return `http://127.0.0.1:${port}`;
}
