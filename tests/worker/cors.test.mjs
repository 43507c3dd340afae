// CORS on the lock service's front (src/worker/lock_object/front.rs): the
// built Worker in workerd through Miniflare, called over real HTTP on its
// loopback port as a browser would (Miniflare's own fetch helpers refuse an
// Origin header on their internal routes), four times over —
//   - `cors`: EDGELOCK_CORS_ORIGINS lists two origins;
//   - `plain`: the var unset (the default: no CORS header at all);
//   - `any`: the var is `*`;
//   - `bad`: the var holds an entry that is not an origin.
// Checked: a preflight needs no token and answers the same 204 whatever the
// path, name or token, with the grant (origin, POST, authorization and
// content-type, max age) only for a listed origin; every answer to a listed
// origin — 200, 400, 401, 403, 404 — carries Access-Control-Allow-Origin,
// to any other origin none; a malformed var is a 500 that names the var but
// not the entry. The browser side is tests/www/www.test.mjs.
// Needs build/ (scripts/build-worker.sh).

import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { startWorkers, TEST_API_TOKEN } from './support.mjs';

const uniq = (s) => `${s}-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 6)}`;
const APP = 'https://app.example.com';
const DEV = 'http://localhost:8080';
const OTHER = 'https://evil.example.net';
const SCOPED_TOKEN = 'scoped-cors-token-0123456789abcdef';
const BAD_ENTRY = 'ftp//not-an-origin-zz_entry_zz';
const CORS_HEADERS = [
  'access-control-allow-origin',
  'access-control-allow-methods',
  'access-control-allow-headers',
  'access-control-max-age',
  'access-control-allow-credentials',
];

describe('CORS on the lock service front', { timeout: 120_000 }, () => {
  const running = [];
  const bases = {};
  before(async () => {
    const configs = {
      cors: {
        // Spaces, a trailing slash, capitals and empty entries are tolerated in the list.
        EDGELOCK_CORS_ORIGINS: ` ${APP}/ , HTTP://LOCALHOST:8080,`,
        EDGELOCK_API_TOKENS: `scoped/=${SCOPED_TOKEN}`,
        // For `GET /` (the job routes): a backend needing no server.
        EDGELOCK_BACKEND: 'durable-object',
      },
      plain: {},
      any: { EDGELOCK_CORS_ORIGINS: '*' },
      bad: { EDGELOCK_CORS_ORIGINS: `${APP},${BAD_ENTRY}` },
    };
    // One workerd each: its HTTP port reaches its first (here: only) Worker.
    await Promise.all(Object.entries(configs).map(async ([name, bindings]) => {
      const w = await startWorkers({ [name]: bindings }, { lockObjects: true });
      running.push(w);
      bases[name] = await w.mf.ready;
    }));
  });
  after(async () => {
    await Promise.allSettled(running.map((w) => w.dispose()));
  });

  /** A raw request to worker `name`: status, headers (lowercased) and body text. */
  async function send(name, method, urlPath, { origin, authorization, body, preflight = false } = {}) {
    const headers = {};
    if (origin !== undefined) headers.origin = origin;
    if (authorization !== undefined) headers.authorization = authorization;
    if (preflight) {
      headers['access-control-request-method'] = 'POST';
      headers['access-control-request-headers'] = 'authorization,content-type';
    }
    const init = { method, headers };
    if (body !== undefined) {
      init.body = typeof body === 'string' ? body : JSON.stringify(body);
      headers['content-type'] = 'application/json';
    }
    const res = await fetch(new URL(urlPath, bases[name]), { ...init, signal: AbortSignal.timeout(10_000) });
    const text = await res.text();
    return { status: res.status, headers: Object.fromEntries([...res.headers].map(([k, v]) => [k.toLowerCase(), v])), text };
  }
  const lockPath = (op, name) => `/lock/v1/${op}?name=${encodeURIComponent(name)}`;
  const bearer = `Bearer ${TEST_API_TOKEN}`;
  const noCors = (r, what) => {
    for (const h of CORS_HEADERS) assert.equal(r.headers[h], undefined, `${what}: unexpected ${h}: ${r.headers[h]}`);
  };

  test('a preflight from a listed origin: 204, no token needed, the grant', async () => {
    for (const origin of [APP, DEV]) {
      const r = await send('cors', 'OPTIONS', lockPath('acquire', uniq('pre')), { origin, preflight: true });
      assert.equal(r.status, 204, r.text);
      assert.equal(r.text, '');
      assert.equal(r.headers['access-control-allow-origin'], origin);
      assert.equal(r.headers['access-control-allow-methods'], 'POST');
      assert.deepEqual(r.headers['access-control-allow-headers'].split(/,\s*/).sort(), ['authorization', 'content-type']);
      assert.equal(r.headers['access-control-max-age'], '600');
      assert.match(r.headers.vary ?? '', /origin/i);
      assert.equal(r.headers['access-control-allow-credentials'], undefined, 'no credentials (no cookies involved)');
    }
  });

  test('a preflight reveals nothing: the same answer for any path, name and token', async () => {
    const answers = [];
    for (const [p, authorization] of [
      [lockPath('acquire', uniq('x')), undefined],
      [lockPath('steal', uniq('x')), undefined],
      ['/lock/v2/release', undefined],
      ['/lock/v1/inspect?name=', undefined],
      [lockPath('release', 'scoped/x'), `Bearer ${SCOPED_TOKEN}`],
      [lockPath('release', 'x'), 'Bearer wrong-token-0123456789abcdef'],
    ]) {
      const r = await send('cors', 'OPTIONS', p, { origin: APP, authorization, preflight: true });
      answers.push(JSON.stringify([r.status, r.text, r.headers['access-control-allow-origin'], r.headers['access-control-allow-methods'], r.headers['access-control-allow-headers'], r.headers['access-control-max-age']]));
    }
    assert.equal(new Set(answers).size, 1, answers.join('\n'));
  });

  test('a preflight from another origin, or to a Worker without the var: 204 without the grant', async () => {
    for (const [name, origin] of [['cors', OTHER], ['cors', `${APP}.evil.example`], ['cors', 'null'], ['plain', APP], ['plain', OTHER], ['any', 'null']]) {
      const r = await send(name, 'OPTIONS', lockPath('acquire', uniq('pre')), { origin, preflight: true });
      assert.equal(r.status, 204, `${name} ${origin}: ${r.text}`);
      assert.equal(r.text, '');
      noCors(r, `${name} ${origin}`);
    }
    const plain = await send('plain', 'OPTIONS', lockPath('acquire', uniq('pre')), { origin: APP, preflight: true });
    assert.equal(plain.headers.vary, undefined, 'no CORS at all: no Vary either');
  });

  test('`*`: any origin is granted (named back), the token still decides', async () => {
    const r = await send('any', 'OPTIONS', lockPath('acquire', uniq('any')), { origin: OTHER, preflight: true });
    assert.equal(r.status, 204);
    assert.equal(r.headers['access-control-allow-origin'], OTHER);
    const refused = await send('any', 'POST', lockPath('inspect', uniq('any')), { origin: OTHER, body: {} });
    assert.equal(refused.status, 401, refused.text);
    assert.equal(refused.headers['access-control-allow-origin'], OTHER);
  });

  test('answers to a listed origin carry the origin: 200, 400, 401, 403, 404, 405', async () => {
    const name = uniq('answers');
    const owner = randomBytes(16).toString('hex');
    const cases = [
      ['no token', 'POST', lockPath('inspect', name), undefined, {}, 401],
      ['wrong token', 'POST', lockPath('inspect', name), 'Bearer wrong-token-0123456789abcdef', {}, 401],
      ['a token for other names', 'POST', lockPath('inspect', name), `Bearer ${SCOPED_TOKEN}`, {}, 403],
      ['bad body', 'POST', lockPath('acquire', name), bearer, { owner }, 400],
      ['unknown op', 'POST', lockPath('steal', name), bearer, {}, 404],
      ['GET', 'GET', lockPath('inspect', name), bearer, undefined, 405],
      ['OPTIONS without Access-Control-Request-Method is no preflight', 'OPTIONS', lockPath('inspect', name), undefined, undefined, 401],
    ];
    for (const [what, method, p, authorization, body, status] of cases) {
      const r = await send('cors', method, p, { origin: APP, authorization, body });
      assert.equal(r.status, status, `${what}: ${r.text}`);
      assert.equal(r.headers['access-control-allow-origin'], APP, `${what}: ACAO`);
      assert.match(r.headers.vary ?? '', /origin/i, `${what}: Vary`);
      assert.ok(!r.text.includes(TEST_API_TOKEN) && !r.text.includes(SCOPED_TOKEN), `${what}: echoes a token`);
    }
    const g = await send('cors', 'POST', lockPath('acquire', name), { origin: DEV, authorization: bearer, body: { owner, ttlMs: 10_000, waitMs: 0 } });
    assert.equal(g.status, 200, g.text);
    assert.equal(g.headers['access-control-allow-origin'], DEV);
    assert.equal(g.headers['content-type'], 'application/json', 'the object\'s own headers are kept');
    const grant = JSON.parse(g.text);
    assert.equal(grant.acquired, true, g.text);
    const rel = await send('cors', 'POST', lockPath('release', name), { origin: APP, authorization: bearer, body: { owner, token: grant.token } });
    assert.equal(rel.status, 200, rel.text);
    assert.deepEqual(JSON.parse(rel.text), { released: true });
    assert.equal(rel.headers['access-control-allow-origin'], APP);
  });

  test('another origin, or no var: the service answers as always, without the origin', async () => {
    const name = uniq('other');
    for (const [worker, origin] of [['cors', OTHER], ['cors', undefined], ['plain', APP]]) {
      const r = await send(worker, 'POST', lockPath('inspect', name), { origin, authorization: bearer, body: {} });
      assert.equal(r.status, 200, `${worker} ${origin}: ${r.text}`);
      assert.equal(JSON.parse(r.text).held, false);
      noCors(r, `${worker} ${origin}`);
      const refused = await send(worker, 'POST', lockPath('inspect', name), { origin, body: {} });
      assert.equal(refused.status, 401, refused.text);
      noCors(refused, `${worker} ${origin} 401`);
    }
    const plain = await send('plain', 'POST', lockPath('inspect', name), { origin: APP, authorization: bearer, body: {} });
    assert.equal(plain.headers.vary, undefined);
  });

  test('a malformed EDGELOCK_CORS_ORIGINS: 500 naming the var and the entry\'s position, never its text', async () => {
    for (const [method, preflight] of [['POST', false], ['OPTIONS', true]]) {
      const r = await send('bad', method, lockPath('inspect', uniq('bad')), { origin: APP, authorization: bearer, body: preflight ? undefined : {}, preflight });
      assert.equal(r.status, 500, r.text);
      const body = JSON.parse(r.text);
      assert.equal(body.code, 'INVALID_ARGUMENT', r.text);
      assert.match(body.error, /EDGELOCK_CORS_ORIGINS: entry 2 /);
      assert.ok(!r.text.includes('zz_entry_zz'), r.text);
      noCors(r, 'bad');
    }
  });

  test('the other routes are not affected', async () => {
    const r = await send('cors', 'GET', '/', { origin: APP, authorization: bearer });
    assert.equal(r.status, 200, r.text);
    noCors(r, 'GET /');
  });
});
