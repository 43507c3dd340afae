// Browser test of the www/ demo page (run by scripts/test-www.sh).
//
// Starts www/serve.mjs (which starts real etcd / redis-server / webdis through
// the devtools testenv), opens the page in Debian's Chromium through
// playwright-core, and for etcd and then Redlock: starts 6 workers, waits for
// ≥ 20 acquisitions, presses "Pause a holder", and checks from the page's own
// records (window.__edgelockDemo) that holds never overlap, fencing tokens
// strictly increase, the paused holder's loss is reported, the next token is
// higher and the paused holder's late write is rejected. On Redlock it also
// stops one Redis node and checks that acquisitions go on. A last, shorter run
// on one Redis node through the Upstash gateway checks holds and tokens only.
// On Redlock and on the gateway it also asks the Redis servers (PUBSUB
// NUMSUB) whether the page's waiters hold push wake-up subscriptions: some,
// never more than 4 per origin (the browser entry's cap: a browser opens
// about 6 connections per origin), and none once the run is stopped.
// Screenshots (1280×800 and a 390 px phone width) go to .test-output/www/.
//
// The Durable Object lock service by URL: the built Worker (build/,
// scripts/build-worker.sh) runs in workerd through Miniflare
// (tests/worker/support.mjs), with EDGELOCK_CORS_ORIGINS set to the page's
// origin, so every call of the page crosses origins (preflight + CORS). The
// page is given the service URL and the test token, runs 3 workers and is
// stopped; checked: holds never overlap and tokens strictly increase, the
// latest token shown is the last hold's, the service's `inspect` saw one of
// those tokens held during the run and the lock free after Stop, a second
// acquire (from here) gets a higher token, and the token is nowhere in the
// page (DOM, URL, storage, recorded data, console).

import { spawn } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { randomBytes } from 'node:crypto';
import { chromium } from 'playwright-core';
import { startWorkers, TEST_API_TOKEN } from '../worker/support.mjs';

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const outDir = path.join(repoRoot, '.test-output', 'www');
const CHROMIUM = process.env.CHROMIUM_BIN ?? '/usr/bin/chromium';
// A guard against a hang outside the steps' own bounds, not a speed test:
// above the sum of those bounds.
const TOTAL_BUDGET_MS = 600_000;
const WORKERS = 6;
const TTL_MS = 2000;
const HOLD_MS = 150;
const ACQUISITIONS = 20;

const log = (...a) => console.log('[www]', ...a);
class Failure extends Error {}
function check(cond, message) {
  if (!cond) throw new Failure(message);
}

/** Spawns the dev server and resolves with its first stdout line (JSON). */
function startServer() {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [path.join(repoRoot, 'www', 'serve.mjs'), '--exit-on-eof'], {
      cwd: repoRoot,
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`serve.mjs not ready after 90 s; stderr:\n${err}`));
    }, 90_000);
    child.stderr.on('data', (d) => { if (err.length < 64_000) err += d; });
    child.stdout.on('data', (d) => {
      out += d;
      const nl = out.indexOf('\n');
      if (nl < 0) return;
      clearTimeout(timer);
      try {
        resolve({ child, info: JSON.parse(out.slice(0, nl)) });
      } catch {
        child.kill('SIGKILL');
        reject(new Error(`serve.mjs printed ${out.slice(0, nl)}`));
      }
    });
    child.on('exit', (code, sig) => {
      clearTimeout(timer);
      reject(new Error(`serve.mjs exited (${code ?? sig}); stderr:\n${err}`));
    });
  });
}

function stopServer(child) {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve();
    const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
    child.once('exit', () => { clearTimeout(timer); resolve(); });
    child.stdin.end(); // --exit-on-eof: it stops testenv and its servers
  });
}

/** The current run's records, copied out of the page. */
function runData(page, runId) {
  return page.evaluate((id) => {
    const d = window.__edgelockDemo;
    const mine = (list) => list.filter((x) => x.run === id);
    return { holds: mine(d.holds), lost: mine(d.lost), staleWrites: mine(d.staleWrites), errors: mine(d.errors) };
  }, runId);
}

/** A raw command through an Upstash gateway of the dev server's testenv. */
async function redisCommand(url, token, ...cmd) {
  const r = await fetch(url, {
    method: 'POST', headers: { authorization: `Bearer ${token}` }, body: JSON.stringify(cmd), signal: AbortSignal.timeout(3000),
  });
  const body = await r.json();
  if (!r.ok || body.error) throw new Error(`${cmd[0]}: ${JSON.stringify(body)}`);
  return body.result;
}

/** Wake-up subscribers on each Redis node (all `edgelock:wake:*` channels). */
async function wakeSubscriptions(cfg) {
  return Promise.all(cfg.gateway.map(async (url) => {
    const channels = await redisCommand(url, cfg.token, 'PUBSUB', 'CHANNELS', 'edgelock:wake:*');
    if (channels.length === 0) return 0;
    const counts = await redisCommand(url, cfg.token, 'PUBSUB', 'NUMSUB', ...channels);
    return counts.filter((_, i) => i % 2 === 1).reduce((a, b) => a + Number(b), 0);
  }));
}

function checkHolds(label, holds) {
  check(holds.length >= ACQUISITIONS, `${label}: only ${holds.length} acquisitions`);
  const sorted = [...holds].sort((a, b) => a.acquiredAt - b.acquiredAt);
  let lastEnd = -Infinity;
  let lastToken = null;
  let lastHold = null;
  for (const h of sorted) {
    check(h.endAt !== null, `${label}: hold of token ${h.token} by W${h.worker + 1} never ended`);
    check(h.endAt >= h.acquiredAt, `${label}: hold of token ${h.token} ends before it starts`);
    check(h.acquiredAt >= lastEnd,
      `${label}: overlapping holds: W${h.worker + 1} got token ${h.token} at ${h.acquiredAt.toFixed(1)} ms ` +
      `while W${lastHold?.worker + 1} (token ${lastHold?.token}) held it until ${lastEnd.toFixed(1)} ms`);
    const token = BigInt(h.token);
    check(lastToken === null || token > lastToken,
      `${label}: token ${h.token} (W${h.worker + 1}) does not exceed the previous holder's ${lastToken}`);
    if (h.endAt > lastEnd) { lastEnd = h.endAt; lastHold = h; }
    lastToken = token;
  }
  log(`${label}: ${holds.length} holds, none overlapping, tokens strictly increasing (${sorted[0].token} → ${sorted.at(-1).token})`);
}

async function exercise(page, backend, { pause = true, stopNode = false, screenshot, redisConfig = null }) {
  const label = backend;
  await page.selectOption('#backend', backend);
  await page.fill('#workers', String(WORKERS));
  await page.fill('#ttl', String(TTL_MS));
  await page.fill('#hold', String(HOLD_MS));
  await page.click('#start');
  const runId = await page.evaluate(() => window.__edgelockDemo.run.id);
  const t = Date.now();
  await page.waitForFunction(([id, n]) => window.__edgelockDemo.holds.filter((h) => h.run === id).length >= n,
    [runId, ACQUISITIONS], { timeout: 90_000 });
  log(`${label}: ${ACQUISITIONS} acquisitions by ${WORKERS} workers in ${Date.now() - t} ms`);
  const lanesBusy = await page.evaluate((id) => new Set(window.__edgelockDemo.holds.filter((h) => h.run === id).map((h) => h.worker)).size, runId);
  check(lanesBusy >= 2, `${label}: only ${lanesBusy} worker(s) ever held the lock`);

  if (redisConfig) {
    // The waiters hold wake-up subscriptions, at most 4 per origin. 20
    // samples at least; where some are expected, sampled until one shows
    // (up to 15 s: a waiter subscribes on its own time), not for 1 s only.
    const max = redisConfig.gateway.map(() => 0);
    const someExpected = label !== 'redlock';
    for (let i = 0; i < 300 && (i < 20 || (someExpected && max.every((n) => n === 0))); i++) {
      (await wakeSubscriptions(redisConfig)).forEach((n, j) => { max[j] = Math.max(max[j], n); });
      await new Promise((r) => setTimeout(r, 50));
    }
    if (label === 'redlock') {
      check(max.every((n) => n === 0), `${label}: the demo's Redlock polls, yet subscriptions were seen: ${max.join(', ')}`);
    } else {
      check(max.some((n) => n > 0), `${label}: no wake-up subscription seen on the Redis nodes`);
    }
    check(max.every((n) => n <= 4), `${label}: more than 4 subscriptions per origin: ${max.join(', ')}`);
    log(`${label}: wake-up subscriptions per Redis node during the run, at most: ${max.join(', ')}`);
  }

  if (!pause) {
    await page.click('#start'); // Stop
    await page.waitForFunction((id) => window.__edgelockDemo.runs.find((r) => r.id === id)?.stoppedAt !== undefined,
      runId, { timeout: 20_000 });
    if (redisConfig) await checkStreamsClosed(label, redisConfig);
    const data = await runData(page, runId);
    checkHolds(label, data.holds);
    check(data.lost.length === 0, `${label}: unexpected lost-lock event: ${data.lost[0]?.message}`);
    return null;
  }

  await page.click('#pause');
  const tp = Date.now();
  await page.waitForFunction((id) => window.__edgelockDemo.lost.some((l) => l.run === id), runId, { timeout: 20_000 });
  log(`${label}: lost-lock event ${Date.now() - tp} ms after "Pause a holder"`);
  await page.waitForFunction((id) => {
    const d = window.__edgelockDemo;
    const lost = d.lost.find((l) => l.run === id);
    return d.holds.some((h) => h.run === id && h.acquiredAt > lost.at) && d.staleWrites.some((s) => s.run === id);
  }, runId, { timeout: 20_000 });

  if (stopNode) {
    // Redlock on 5 nodes: with one frozen, a majority still grants the lock.
    await page.click('#node-buttons button[data-node="0"]');
    await page.waitForSelector('#node-buttons button.stopped[data-node="0"]', { timeout: 20_000 });
    const before = await page.evaluate((id) => window.__edgelockDemo.holds.filter((h) => h.run === id).length, runId);
    const ts = Date.now();
    await page.waitForFunction(([id, n]) => window.__edgelockDemo.holds.filter((h) => h.run === id).length >= n,
      // A safety bound: about 2 s per handoff here (each worker's failed
      // attempt costs a grace of its 500 ms timeout, its cleanup of the frozen
      // node the whole timeout): 9.5 s for 5 at a load average of 13, 36 s in
      // a fresh-clone run of the test command beside two CPU hogs.
      [runId, before + 5], { timeout: 90_000 });
    log(`${label}: 5 more acquisitions with Redis node 1 stopped, in ${Date.now() - ts} ms`);
    // Issue 26: in the browser, a free lock is granted within 2 request
    // timeouts + a retry delay while a minority of the nodes is frozen (the
    // attempt settles on the live quorum after a tenth of the timeout; only
    // the raise round waits the whole timeout): about 1.1 s. Asserted as a
    // count, which a slow machine cannot break: the rounds sent to a live
    // node (node 2) before the grant. An attempt that is granted at once is
    // 2 (attempt, raise); that bound allowed one retry (a failed attempt and
    // its cleanup, 2 more): at most 4. A round stalled on the frozen node or
    // attempts that keep failing (the www stall, the livelock of issue 26)
    // make more. The times are logged (one loaded run took 2.06 s).
    const timing = { requestTimeoutMs: 1000, retryDelayMs: 1000, retryJitterMs: 100 };
    const { took, rounds } = await page.evaluate(async (timing) => {
      const { Redlock } = await import('/pkg/index.browser.mjs');
      const cfg = window.__edgelockDemo.config;
      const live = new URL(cfg.webdis[1]).origin;
      let sent = 0;
      const counting = (input, init) => {
        if (new URL(String(input)).origin === live) sent += 1;
        return globalThis.fetch(input, init);
      };
      const r = new Redlock({ nodes: cfg.webdis.map((url) => ({ url, protocol: 'webdis' })), ttlMs: 10_000, fetch: counting, ...timing });
      const out = { took: [], rounds: [] };
      try {
        for (let i = 0; i < 3; i++) {
          const [t, from] = [performance.now(), sent];
          const lock = await r.acquire(`frozen-free-${Date.now()}-${i}`, { waitMs: 30_000 });
          out.took.push(Math.round(performance.now() - t));
          out.rounds.push(sent - from);
          await lock.release();
        }
      } finally {
        await r.close();
      }
      return out;
    }, timing);
    check(rounds.every((n) => n >= 1 && n <= 4),
      `${label}: a free lock with node 1 frozen took ${rounds.join(', ')} rounds on node 2 (2 without a retry, at most 4), in ${took.join(', ')} ms`);
    log(`${label}: a free lock with Redis node 1 frozen granted after ${rounds.join(', ')} rounds on node 2 (bound 4), in ${took.join(', ')} ms`);
  }

  await page.waitForTimeout(600); // let the timeline show the handoffs that followed
  const shot = path.join(outDir, screenshot);
  await page.screenshot({ path: shot });
  if (stopNode) {
    await page.click('#node-buttons button[data-node="0"]');
    await page.waitForSelector('#node-buttons button:not(.stopped)[data-node="0"]', { timeout: 20_000 });
  }

  await page.click('#start'); // Stop
  await page.waitForFunction((id) => window.__edgelockDemo.runs.find((r) => r.id === id)?.stoppedAt !== undefined,
    runId, { timeout: 20_000 });

  if (redisConfig) await checkStreamsClosed(label, redisConfig);
  const data = await runData(page, runId);
  checkHolds(label, data.holds);
  check(data.lost.length === 1, `${label}: expected one lost-lock event, got ${data.lost.length}`);
  const lost = data.lost[0];
  check(lost.code === 'LOST', `${label}: lost event has code ${lost.code}`);
  const pausedHold = data.holds.find((h) => h.paused);
  check(pausedHold && pausedHold.token === lost.token && pausedHold.lostAt === lost.at,
    `${label}: the lost event is not the paused holder's`);
  const next = data.holds.filter((h) => h.acquiredAt > lost.at).sort((a, b) => a.acquiredAt - b.acquiredAt)[0];
  check(next && BigInt(next.token) > BigInt(lost.token), `${label}: the next token after the loss is not higher`);
  const stale = data.staleWrites[0];
  check(stale && !stale.accepted && BigInt(stale.resourceToken) > BigInt(stale.token),
    `${label}: the paused holder's late write was not rejected`);
  log(`${label}: W${lost.worker + 1} lost token ${lost.token} (${lost.message}); next holder W${next.worker + 1} got ${next.token}; ` +
    `its late write was rejected (resource at ${stale.resourceToken})`);
  if (data.errors.length) log(`${label}: ${data.errors.length} acquire error(s), e.g. ${data.errors[0].code}: ${data.errors[0].message}`);
  return shot;
}

/** POST to the lock service's front `base` (…/lock) with the test token. */
async function service(base, op, name, body) {
  const r = await fetch(`${base}/v1/${op}?name=${encodeURIComponent(name)}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${TEST_API_TOKEN}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(5000),
  });
  const text = await r.text();
  check(r.status === 200, `${op}: HTTP ${r.status} ${text}`);
  return JSON.parse(text);
}

/** The durable-object backend: the page takes and releases locks on the service by URL. */
async function exerciseDurable(page, base, consoleLines) {
  const label = 'durable-object';
  await page.selectOption('#backend', label);
  check(await page.isVisible('#do-url') && await page.isVisible('#do-token'), `${label}: URL and token fields not shown`);
  check(await page.getAttribute('#do-token', 'type') === 'password', `${label}: the token field is not a password field`);
  // Without a URL and a token the run does not start.
  const runsBefore = await page.evaluate(() => window.__edgelockDemo.runs.length);
  await page.fill('#do-url', '');
  await page.fill('#do-token', '');
  await page.click('#start');
  check(await page.evaluate(() => window.__edgelockDemo.runs.length) === runsBefore, `${label}: a run started without URL and token`);

  await page.fill('#do-url', base);
  await page.fill('#do-token', TEST_API_TOKEN);
  await page.fill('#workers', '3');
  await page.fill('#ttl', String(TTL_MS));
  await page.fill('#hold', String(HOLD_MS));
  await page.click('#start');
  const { id: runId, lockName } = await page.evaluate(() => window.__edgelockDemo.run);
  const t = Date.now();
  // The service, asked from here while the page runs: held by one of the page's holds.
  let seenHeld = null;
  const watch = (async () => {
    while (seenHeld === null && Date.now() - t < 30_000) {
      const s = await service(base, 'inspect', lockName, {});
      if (s.held) seenHeld = s;
      else await new Promise((r) => setTimeout(r, 30));
    }
  })();
  await page.waitForFunction(([id, n]) => window.__edgelockDemo.holds.filter((h) => h.run === id).length >= n,
    [runId, ACQUISITIONS], { timeout: 30_000 });
  await watch;
  log(`${label}: ${ACQUISITIONS} acquisitions by 3 workers in ${Date.now() - t} ms`);
  await page.click('#start'); // Stop
  await page.waitForFunction((id) => window.__edgelockDemo.runs.find((r) => r.id === id)?.stoppedAt !== undefined,
    runId, { timeout: 20_000 });
  const data = await runData(page, runId);
  checkHolds(label, data.holds);
  check(data.lost.length === 0, `${label}: unexpected lost-lock event: ${data.lost[0]?.message}`);
  check(data.errors.length === 0, `${label}: acquire errors: ${data.errors.map((e) => `${e.code}: ${e.message}`).join(' | ')}`);
  check(new Set(data.holds.map((h) => h.worker)).size >= 2, `${label}: only one worker ever held the lock`);
  const last = [...data.holds].sort((a, b) => a.acquiredAt - b.acquiredAt).at(-1);
  const shown = (await page.textContent('#c-token')).trim();
  check(shown === last.token, `${label}: the page shows token ${shown}, the last hold had ${last.token}`);
  check(seenHeld !== null, `${label}: inspect never saw the lock held during the run`);
  check(data.holds.some((h) => h.token === seenHeld.token), `${label}: inspect saw token ${seenHeld.token}, not one of the page's holds`);
  // Every hold was released: the lock is free, and the next grant's token is higher.
  const after = await service(base, 'inspect', lockName, {});
  check(after.held === false, `${label}: after Stop the service says ${JSON.stringify(after)}`);
  const owner = randomBytes(16).toString('hex');
  // waitMs: a waiter the page left behind at Stop would be dropped when it reaches the head.
  const next = await service(base, 'acquire', lockName, { owner, ttlMs: 5000, waitMs: 3000 });
  check(next.acquired === true && BigInt(next.token) > BigInt(last.token),
    `${label}: a second acquire after the page's got ${JSON.stringify(next)} (page's last token ${last.token})`);
  check((await service(base, 'release', lockName, { owner, token: next.token })).released === true, `${label}: release`);
  log(`${label}: inspect saw token ${seenHeld.token} held during the run; after Stop the lock was free and the next acquire got ${next.token} > ${last.token}`);

  // The token is kept in memory only.
  const leaks = await page.evaluate((secret) => {
    const where = [];
    if (document.documentElement.outerHTML.includes(secret)) where.push('DOM');
    if (location.href.includes(secret)) where.push('URL');
    for (const [n, s] of [['localStorage', localStorage], ['sessionStorage', sessionStorage]]) {
      for (let i = 0; i < s.length; i++) if (s.getItem(s.key(i)).includes(secret) || s.key(i).includes(secret)) where.push(n);
    }
    if (JSON.stringify(window.__edgelockDemo).includes(secret)) where.push('__edgelockDemo');
    if (document.cookie.includes(secret)) where.push('cookie');
    return where;
  }, TEST_API_TOKEN);
  if (consoleLines.some((l) => l.includes(TEST_API_TOKEN))) leaks.push('console');
  check(leaks.length === 0, `${label}: the token shows up in: ${leaks.join(', ')}`);
  log(`${label}: the token is nowhere in the DOM, URL, storage, recorded data or console`);
  const shot = path.join(outDir, 'www-durable-object-1280x800.png');
  await page.screenshot({ path: shot });
  return shot;
}

/** After Stop: every wake-up subscription of the page is gone from the servers. */
async function checkStreamsClosed(label, redisConfig) {
  const deadline = Date.now() + 20_000;
  let counts;
  while ((counts = await wakeSubscriptions(redisConfig)).some((n) => n > 0)) {
    check(Date.now() < deadline, `${label}: subscriptions still open after Stop: ${counts.join(', ')}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  log(`${label}: every wake-up subscription closed after Stop`);
}

async function main() {
  mkdirSync(outDir, { recursive: true });
  const { child, info } = await startServer();
  log(`page at ${info.url}`);
  let browser;
  let worker;
  const pageErrors = [];
  const consoleLines = [];
  try {
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      headless: true,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
        '--disable-component-update', '--no-first-run'],
    });
    const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
    page.on('pageerror', (e) => pageErrors.push(e.message));
    page.on('console', (m) => consoleLines.push(m.text()));
    await page.goto(info.url);
    await page.waitForFunction(() => window.__edgelockDemo?.ready || window.__edgelockDemo?.bootError, null, { timeout: 20_000 });
    const bootError = await page.evaluate(() => window.__edgelockDemo.bootError);
    check(!bootError, `page failed to start: ${bootError}`);

    const redisConfig = await (await fetch(new URL('config.json', info.url))).json();
    const shots = [];
    shots.push(await exercise(page, 'etcd', { screenshot: 'www-etcd-1280x800.png' }));
    shots.push(await exercise(page, 'redlock', { stopNode: true, screenshot: 'www-redlock-1280x800.png', redisConfig }));
    // One Redis node through the Upstash-compatible gateway (bearer token): a shorter check.
    await exercise(page, 'redis-upstash', { pause: false, redisConfig });

    // The Durable Object lock service, on another origin that lists the page's.
    const origin = new URL(info.url).origin;
    const ts = Date.now();
    worker = await startWorkers({ main: { EDGELOCK_CORS_ORIGINS: origin } }, { lockObjects: true });
    const base = new URL('/lock', await worker.mf.ready).href;
    check(new URL(base).origin !== origin, 'the lock service is on the page\'s own origin');
    log(`durable-object: the Worker in workerd at ${base} (CORS for ${origin}), started in ${Date.now() - ts} ms`);
    shots.push(await exerciseDurable(page, base, consoleLines));

    // The same page at phone width (the stopped run's timeline stays on screen).
    await page.setViewportSize({ width: 390, height: 844 });
    await page.waitForTimeout(300);
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    check(overflow <= 0, `page is ${overflow}px wider than a 390px screen`);
    const phone = path.join(outDir, 'www-phone-390.png');
    await page.screenshot({ path: phone, fullPage: true });
    shots.push(phone);

    check(pageErrors.length === 0, `errors in the page: ${pageErrors.join(' | ')}`);
    for (const s of shots) log(`screenshot: ${s}`);
    log('PASS');
  } finally {
    await browser?.close().catch(() => {});
    await worker?.dispose().catch(() => {});
    await stopServer(child);
  }
}

const budget = setTimeout(() => {
  console.error(`[www] FAIL: over the ${TOTAL_BUDGET_MS / 1000} s budget`);
  process.exit(1);
}, TOTAL_BUDGET_MS);
budget.unref();

main().then(
  () => process.exit(0),
  (e) => {
    console.error(`[www] FAIL: ${e instanceof Failure ? e.message : e?.stack ?? e}`);
    process.exit(1);
  },
);
