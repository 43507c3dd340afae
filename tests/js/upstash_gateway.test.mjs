// The local Upstash gateway (edgelock-devtools' `upstash-gateway` binary)
// driven by the official @upstash/redis client against a real redis-server.
//
// Run: cd tests/js && npm ci && node --test upstash_gateway.test.mjs
// The gateway binary is found as described in testenv.mjs (UPSTASH_GATEWAY_BIN,
// else target/{debug,release}/upstash-gateway, else `cargo build` once).

import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { Redis } from '@upstash/redis';
import { findDevtoolsBin, spawnWithJsonLine, startTestenv, stopChild } from './testenv.mjs';

const TOKEN = 'gw-test-token-7d1e';

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

async function waitFor(fn, timeoutMs = 10_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      return await fn();
    } catch (e) {
      if (Date.now() > deadline) throw e;
      await new Promise((r) => setTimeout(r, 50));
    }
  }
}

let redisProc;
let redisDir;
let gateway;
let url;
// Default client: auto-pipelining (single commands go to /pipeline), base64
// responses, telemetry and sync-token headers — exactly what apps send.
let redis;
// Plain client: one POST / per command, JSON strings without base64.
let plain;

before(async () => {
  const gatewayBin = findDevtoolsBin('upstash-gateway');
  const port = await freePort();
  redisDir = mkdtempSync(path.join(os.tmpdir(), 'edgelock-js-redis-'));
  redisProc = spawn(
    'redis-server',
    ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', redisDir],
    { stdio: 'ignore' },
  );
  const started = await spawnWithJsonLine(gatewayBin, ['--redis', `127.0.0.1:${port}`, '--exit-on-eof'], {
    env: { ...process.env, UPSTASH_GATEWAY_TOKEN: TOKEN },
    timeoutMs: 10_000,
  });
  gateway = started.child;
  url = started.info.url;
  redis = new Redis({ url, token: TOKEN, retry: false });
  plain = new Redis({ url, token: TOKEN, retry: false, enableAutoPipelining: false, responseEncoding: false });
  await waitFor(() => plain.ping());
});

after(async () => {
  if (gateway) await stopChild(gateway);
  if (redisProc && redisProc.exitCode === null) {
    const exited = new Promise((r) => redisProc.once('exit', r));
    redisProc.kill('SIGKILL');
    await exited;
  }
  if (redisDir) rmSync(redisDir, { recursive: true, force: true });
});

for (const [name, client] of [
  ['default client (auto-pipeline, base64)', () => redis],
  ['plain client (POST /, no base64)', () => plain],
]) {
  describe(name, () => {
    const p = name.startsWith('default') ? 'd' : 'p';

    test('set with NX/PX, get, incr', async () => {
      const c = client();
      assert.equal(await c.set(`${p}:k`, 'v', { nx: true, px: 60_000 }), 'OK');
      assert.equal(await c.set(`${p}:k`, 'other', { nx: true, px: 60_000 }), null);
      assert.equal(await c.get(`${p}:k`), 'v');
      const pttl = await c.pttl(`${p}:k`);
      assert.ok(pttl > 50_000 && pttl <= 60_000, `pttl ${pttl}`);
      assert.equal(await c.incr(`${p}:n`), 1);
      assert.equal(await c.incrby(`${p}:n`, 41), 42);
      assert.equal(await c.get(`${p}:missing`), null);
    });

    test('unicode and JSON values round-trip', async () => {
      const c = client();
      const s = 'héllo ✓ 😀 / ? # %';
      await c.set(`${p}:u`, s);
      assert.equal(await c.get(`${p}:u`), s);
      await c.set(`${p}:obj`, { a: 1, b: ['x'] });
      assert.deepEqual(await c.get(`${p}:obj`), { a: 1, b: ['x'] });
    });

    test('eval of a Lua script, and a Script falling back from EVALSHA', async () => {
      const c = client();
      const r = await c.eval('return {KEYS[1], ARGV[1], tonumber(ARGV[2]) + 1}', [`${p}:key1`], ['arg1', 41]);
      assert.deepEqual(r, [`${p}:key1`, 'arg1', 42]);
      // A new script: EVALSHA answers NOSCRIPT, the client retries with EVAL.
      const script = c.createScript(`return redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) and '${p}-set'`);
      assert.equal(await script.exec([`${p}:lock`], ['tok', 5000]), `${p}-set`);
      assert.equal(await c.get(`${p}:lock`), 'tok');
      assert.equal(await script.exec([`${p}:lock`], ['tok2', 5000]), `${p}-set`, 'EVALSHA hit');
    });

    test('pipeline', async () => {
      const c = client();
      const pl = c.pipeline();
      pl.set(`${p}:p1`, 'a');
      pl.incr(`${p}:pc`);
      pl.get(`${p}:p1`);
      pl.del(`${p}:p1`);
      assert.deepEqual(await pl.exec(), ['OK', 1, 'a', 1]);
      const bad = c.pipeline();
      bad.set(`${p}:p2`, 'x');
      bad.incr(`${p}:p2`);
      bad.get(`${p}:p2`);
      const res = await bad.exec({ keepErrors: true });
      assert.deepEqual(res[0], { error: undefined, result: 'OK' });
      assert.match(res[1].error, /ERR value is not an integer/);
      assert.deepEqual(res[2], { error: undefined, result: 'x' });
    });

    test('multi/exec transaction', async () => {
      const c = client();
      const tx = c.multi();
      tx.set(`${p}:t`, 1);
      tx.incr(`${p}:t`);
      tx.incrby(`${p}:t`, 10);
      tx.get(`${p}:t`);
      assert.deepEqual(await tx.exec(), ['OK', 2, 12, 12]);
    });

    test('error reply surfaces as UpstashError', async () => {
      const c = client();
      await c.set(`${p}:s`, 'text');
      await assert.rejects(c.incr(`${p}:s`), (e) => {
        assert.equal(e.name, 'UpstashError');
        assert.match(e.message, /ERR value is not an integer or out of range/);
        return true;
      });
    });
  });
}

test('wrong or missing token: 401 Unauthorized, token never echoed', async () => {
  for (const opts of [{}, { enableAutoPipelining: false }]) {
    const bad = new Redis({ url, token: 'wrong-token', retry: false, ...opts });
    await assert.rejects(bad.get('k'), (e) => {
      assert.equal(e.name, 'UpstashError');
      assert.match(e.message, /Unauthorized/);
      return true;
    });
  }
  const r = await fetch(`${url}/get/k`, { headers: { Authorization: 'Bearer nope' } });
  assert.equal(r.status, 401);
  const body = await r.text();
  assert.deepEqual(JSON.parse(body), { error: 'Unauthorized' });
  assert.ok(!body.includes(TOKEN));
});

test('path form, _token query and byte-exact keys via raw fetch', async () => {
  let r = await fetch(`${url}/set/a%2Fb%3F/v%20w?_token=${TOKEN}`);
  assert.deepEqual(await r.json(), { result: 'OK' });
  assert.equal(await plain.get('a/b?'), 'v w');
  r = await fetch(`${url}/get/a%2Fb%3F`, { headers: { Authorization: `Bearer ${TOKEN}`, 'Upstash-Encoding': 'base64' } });
  assert.deepEqual(await r.json(), { result: Buffer.from('v w').toString('base64') });
});

test('CORS: preflight answers the headers @upstash/redis sends', async () => {
  const r = await fetch(`${url}/pipeline`, {
    method: 'OPTIONS',
    headers: {
      Origin: 'http://localhost:5173',
      'Access-Control-Request-Method': 'POST',
      'Access-Control-Request-Headers':
        'authorization,content-type,upstash-encoding,upstash-sync-token,upstash-telemetry-platform,upstash-telemetry-runtime,upstash-telemetry-sdk',
    },
  });
  assert.equal(r.status, 204);
  assert.equal(r.headers.get('access-control-allow-origin'), '*');
  const allowed = r.headers.get('access-control-allow-headers').toLowerCase();
  for (const h of ['authorization', 'content-type', 'upstash-encoding', 'upstash-sync-token', 'upstash-telemetry-sdk']) {
    assert.ok(allowed.includes(h), `${h} not in ${allowed}`);
  }
  const get = await fetch(`${url}/ping`, { headers: { Authorization: `Bearer ${TOKEN}`, Origin: 'http://x' } });
  assert.equal(get.headers.get('access-control-allow-origin'), '*');
});

describe('pub/sub: @upstash/redis subscribe/psubscribe over the gateway event stream', () => {
  // Counted on the Redis side through the plain command route.
  const numsub = async (ch) => (await plain.exec(['PUBSUB', 'NUMSUB', ch]))[1];
  const numpat = () => plain.exec(['PUBSUB', 'NUMPAT']);
  const until = (what, cond, timeoutMs = 10_000) =>
    waitFor(async () => assert.ok(await cond(), what), timeoutMs);

  test('redis.subscribe receives what redis.publish sends, unsubscribe releases the Redis connection', async () => {
    // A space and non-ASCII: the client puts the channel in the URL path as
    // is, fetch percent-encodes it, the gateway decodes it.
    const ch = 'js:news é 1';
    const sub = redis.subscribe(ch);
    const counts = [];
    const messages = [];
    const perChannel = [];
    const errors = [];
    sub.on('subscribe', (n) => counts.push(n));
    sub.on('message', (m) => messages.push(m));
    sub.on(`message:${ch}`, (m) => perChannel.push(m));
    sub.on('error', (e) => errors.push(e));
    await until('subscribe event', () => counts.length === 1);
    assert.deepEqual(counts, [1]);
    assert.equal(await numsub(ch), 1);

    assert.equal(await redis.publish(ch, 'hello, world'), 1);
    assert.equal(await redis.publish(ch, { a: 1, b: 'x, y', u: 'ü ✓' }), 1);
    assert.equal(await plain.publish(ch, 'héllo, wörld ✓ 😀'), 1);
    assert.equal(await redis.publish(ch, 42), 1);
    await until('4 messages', () => messages.length === 4);
    assert.deepEqual(messages, [
      { channel: ch, message: 'hello, world' },
      { channel: ch, message: { a: 1, b: 'x, y', u: 'ü ✓' } },
      { channel: ch, message: 'héllo, wörld ✓ 😀' },
      { channel: ch, message: 42 },
    ]);
    assert.deepEqual(perChannel, messages);

    await sub.unsubscribe();
    assert.deepEqual(sub.getSubscribedChannels(), []);
    // The abort closes the HTTP connection; the gateway sees EOF and drops
    // its dedicated Redis connection although nothing more is published.
    await until('NUMSUB back to 0', async () => (await numsub(ch)) === 0);
    assert.equal(await redis.publish(ch, 'after'), 0);
    assert.deepEqual(errors, []);
  });

  test('redis.psubscribe gets pmessage with pattern, channel and message', async () => {
    const sub = redis.psubscribe('js:user:*');
    const counts = [];
    const got = [];
    const errors = [];
    sub.on('psubscribe', (n) => counts.push(n));
    sub.on('pmessage', (m) => got.push(m));
    sub.on('error', (e) => errors.push(e));
    await until('psubscribe event', () => counts.length === 1);
    assert.deepEqual(counts, [1]);
    assert.equal(await numpat(), 1);
    assert.equal(await redis.publish('js:user:42', { id: 42, s: 'a, b' }), 1);
    assert.equal(await redis.publish('js:other:1', 'not for us'), 0);
    assert.equal(await redis.publish('js:user:7', JSON.stringify('hi, there')), 1);
    await until('2 pmessages', () => got.length === 2);
    assert.deepEqual(got, [
      { pattern: 'js:user:*', channel: 'js:user:42', message: { id: 42, s: 'a, b' } },
      { pattern: 'js:user:*', channel: 'js:user:7', message: 'hi, there' },
    ]);
    assert.deepEqual(errors, []);
    // Unlike `message`, the client JSON.parses `pmessage` payloads without a
    // fallback: a bare string (sent raw, as the real gateway does) becomes an
    // error event on its side.
    assert.equal(await redis.publish('js:user:8', 'plain text'), 1);
    await until('parse error event', () => errors.length === 1);
    assert.match(errors[0].message, /Failed to parse message/);
    assert.equal(got.length, 2);
    await sub.unsubscribe();
    await until('NUMPAT back to 0', async () => (await numpat()) === 0);
  });

  test('several channels: one stream each, unsubscribing one keeps the other', async () => {
    const sub = redis.subscribe(['js:a', 'js:b']);
    const messages = [];
    sub.on('message', (m) => messages.push(m));
    await until('both subscribed', async () => (await numsub('js:a')) === 1 && (await numsub('js:b')) === 1);
    await redis.publish('js:a', 'to a');
    await redis.publish('js:b', 'to b');
    await until('2 messages', () => messages.length === 2);
    await sub.unsubscribe(['js:a']);
    assert.deepEqual(sub.getSubscribedChannels(), ['js:b']);
    await until('js:a released', async () => (await numsub('js:a')) === 0);
    assert.equal(await numsub('js:b'), 1);
    await redis.publish('js:b', 'still b');
    await until('3 messages', () => messages.length === 3);
    assert.deepEqual(messages, [
      { channel: 'js:a', message: 'to a' },
      { channel: 'js:b', message: 'to b' },
      { channel: 'js:b', message: 'still b' },
    ]);
    await sub.unsubscribe();
    await until('js:b released', async () => (await numsub('js:b')) === 0);
  });

  test('a wrong token surfaces as an error event (HTTP 401)', async () => {
    const bad = new Redis({ url, token: 'wrong-token', retry: false });
    const sub = bad.subscribe('js:secret');
    const errors = [];
    sub.on('error', (e) => errors.push(e));
    await until('error event', () => errors.length === 1);
    assert.equal(errors[0].name, 'UpstashError');
    assert.match(errors[0].message, /Unauthorized/);
    assert.equal(await numsub('js:secret'), 0);
    await sub.unsubscribe();
  });

  test('raw fetch: the exact SSE bytes', async () => {
    const ac = new AbortController();
    const res = await fetch(`${url}/subscribe/js:raw`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${TOKEN}`, Accept: 'text/event-stream' },
      signal: ac.signal,
    });
    assert.equal(res.status, 200);
    assert.equal(res.headers.get('content-type'), 'text/event-stream');
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let text = '';
    const readUntil = async (want) => {
      while (!text.includes(want)) {
        const { value, done } = await reader.read();
        assert.ok(!done, `stream ended before ${JSON.stringify(want)}`);
        text += decoder.decode(value, { stream: true });
      }
    };
    await readUntil('\n\n');
    assert.equal(text, 'data: subscribe,js:raw,1\n\n');
    await plain.publish('js:raw', 'a,b, c');
    await readUntil('a,b, c\n\n');
    assert.equal(text, 'data: subscribe,js:raw,1\n\ndata: message,js:raw,a,b, c\n\n');
    ac.abort();
    await until('released after abort', async () => (await numsub('js:raw')) === 0);
  });
});

describe('testenv.mjs helper', () => {
  test('starts redis + gateway + webdis, usable with @upstash/redis, stops cleanly', async () => {
    const env = await startTestenv({ redis: 2, gateway: true, webdis: true });
    try {
      assert.equal(env.gateway_urls.length, 2);
      assert.equal(env.webdis_urls.length, 2);
      assert.equal(typeof env.token, 'string');
      assert.ok(env.token.length >= 16);
      const c = new Redis({ url: env.gateway_urls[1], token: env.token, retry: false });
      assert.equal(await c.set('node1-key', 'hello'), 'OK');
      // webdis[1] fronts the same redis as gateway[1].
      const w = await fetch(`${env.webdis_urls[1]}/GET/node1-key`);
      assert.deepEqual(await w.json(), { GET: 'hello' });
      const other = await fetch(`${env.webdis_urls[0]}/GET/node1-key`);
      assert.deepEqual(await other.json(), { GET: null });
    } finally {
      assert.equal(await env.stop(), 0);
    }
    assert.notEqual(env.process.exitCode, null);
    await assert.rejects(fetch(`${env.gateway_urls[0]}/ping`));
  });
});
