// The Durable Object lock service (src/worker/lock_object) and the D1 lease
// table (src/core/d1) as backends of the npm package, measured INSIDE
// workerd next to each other and to the etcd and Redis backends reached
// from the same Worker (issue 17, item 6).
//
// One workerd through Miniflare (the version tests/worker pins) runs two
// Workers: `locks`, the built Worker (build/, scripts/build-worker.sh) whose
// LockObject class is the lock service, and `bench`, a small module written
// to a temp dir next to a copy of pkg/ (scripts/build-pkg.sh) that imports
// the package's workerd entry and has the LockObject namespace bound as
// LOCKS (reached through `lockServiceRouter(env.LOCKS)`: no front, no
// token). Every measured loop runs inside `bench`, per request from here:
//   - durable-object: DurableObjectLocks({ binding: "LOCKS", bindings });
//   - d1: D1Locks({ binding: "EDGELOCK_D1", bindings: { EDGELOCK_D1:
//     d1Binding(env.EDGELOCK_D1) } }), defaults (a waiter polls: the
//     holder's remaining lease, at most 250 ms + 0..100 ms jitter), on
//     Miniflare's local D1 (SQLite) bound as EDGELOCK_D1 as the Worker's
//     `d1` backend binds it (the same machine; src/worker/d1.rs is its
//     adapter there, d1Binding here);
//   - etcd: EtcdLocks to the local etcd JSON gateway;
//   - redis (upstash): RedisLocks to the local Upstash REST gateway;
//   - redis (webdis): RedisLocks to Webdis;
// the servers started here by the devtools `testenv` (loopback).
//
// Measured per backend, all in the same run, rounds interleaved:
//   - uncontended: sequential acquire + release on one client for
//     SLICE_MS per request, ROUNDS requests; ops/s and p50/p99;
//   - handoff: a holder (its own client) holds while a waiter (a second
//     client) is blocked in acquire for 50–150 ms, then releases; latency is
//     the release call → the waiter's acquire resolving, HANDOFFS samples;
//   - requests per acquire + release: every call of the client's transport
//     (the counted `fetch` option for etcd/Redis, the counted binding's fetch
//     for the Durable Object and D1 — one D1 batch, one transaction, per
//     call; D1's statements in those batches are counted too) over the
//     uncontended slices ÷ the operations;
//     the Worker's globalThis.fetch is wrapped too and must stay at 0 beyond
//     those (any other request would be counted there).
// Then the kinds part, for durable-object, etcd and redis (upstash) only (D1
// is exclusive-only; Webdis left out), with DO ÷ etcd and DO ÷ Redis ratios:
//   - semaphore of 3: uncontended permit acquire (limit 3) + release as
//     above; contended, 6 clients each looping acquire / hold ~5 ms /
//     release for a fixed slice: permits granted/s and the most holders
//     seen at once (the bench FAILS if above 3, or on a slot clash);
//   - read-write: uncontended shared acquire + release as above; a writer's
//     handoff after the last of 2 readers releases (the bench FAILS if the
//     writer is granted while a reader holds);
//   - requests per acquire + release (and per permit granted) as above.
// BENCH_SHARED=0/1 says in the report whether the machine was shared.
// Clocks are workerd's `performance.now()` in the bench Worker: it advances
// only across I/O (Spectre mitigation), which every measured interval ends on.
//
// Run by `bash scripts/bench.sh` (after the other benches); writes
// bench/durable-results.json and the "Durable Object lock service and D1
// (inside workerd)" section of BENCHMARKS.md. BENCH_QUICK=1 shortens it.
// Needs pkg/, build/ and tests/worker/node_modules (Miniflare), and the
// devtools' testenv (EDGELOCK_TESTENV_BIN, or target/debug/testenv).

import { performance } from "node:perf_hooks";
import { cpSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import os, { tmpdir } from "node:os";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { startTestenv, repoRoot } from "../tests/js/testenv.mjs";
import { quantile, writeSection } from "./section.mjs";

const QUICK = process.env.BENCH_QUICK === "1";
const CFG = {
  rounds: QUICK ? 2 : 6,
  sliceMs: QUICK ? 150 : 400,
  handoffs: QUICK ? 4 : 30,
  handoffBatch: QUICK ? 2 : 10,
  warmup: 5,
  rawInspects: QUICK ? 20 : 200,
  // The kinds part (semaphores, read-write locks; D1 and Webdis not in it).
  kinds: {
    limit: 3,
    holders: 6,
    holdMs: 5,
    contendedRounds: QUICK ? 1 : 2,
    contendedMs: QUICK ? 400 : 2500,
    rwHandoffs: QUICK ? 4 : 30,
    rwHandoffBatch: QUICK ? 2 : 10,
  },
};
const now = () => performance.now();
const log = (...a) => console.error("[bench:durable]", ...a);
const t0All = now();

const buildDir = path.join(repoRoot, "build");
const pkgDir = path.join(repoRoot, "pkg");
for (const [p, how] of [[path.join(buildDir, "index.js"), "bash scripts/build-worker.sh"], [path.join(pkgDir, "index.workerd.mjs"), "bash scripts/build-pkg.sh"]]) {
  if (!existsSync(p)) throw new Error(`${p} is missing: run ${how} first`);
}
const requireFromWorkerTests = createRequire(path.join(repoRoot, "tests", "worker", "package.json"));
let miniflarePath;
try {
  miniflarePath = requireFromWorkerTests.resolve("miniflare");
} catch {
  throw new Error("miniflare is missing: run `npm ci` in tests/worker (scripts/build-worker.sh does)");
}
const { Miniflare } = await import(pathToFileURL(miniflarePath).href);
const miniflareVersion = requireFromWorkerTests("miniflare/package.json").version;

// The bench Worker. Each request builds its clients, runs one measured loop
// and closes them (workerd ties I/O objects to the request that made them).
const APP = `
import { D1Locks, DurableObjectLocks, EtcdLocks, RedisLocks, d1Binding, lockServiceRouter } from "./edgelock/index.workerd.mjs";

const realFetch = globalThis.fetch.bind(globalThis);
const stray = { n: 0 };
globalThis.fetch = (...args) => { stray.n += 1; return realFetch(...args); };
const now = () => performance.now();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/**
 * A client of \`backend\` whose every transport call is counted in
 * \`counter.n\` (D1: batches; their statements in \`counter.statements\`).
 */
function make(backend, env, counter) {
  const counted = (f) => (...args) => { counter.n += 1; return f(...args); };
  switch (backend) {
    case "durable-object": {
      const router = lockServiceRouter(env.LOCKS);
      return new DurableObjectLocks({ binding: "LOCKS", bindings: { LOCKS: { fetch: counted((i, init) => router.fetch(i, init)) } } });
    }
    case "d1": {
      const db = d1Binding(env.EDGELOCK_D1);
      const fetch = (input, init) => {
        counter.n += 1;
        const body = typeof init?.body === "string" ? init.body : new TextDecoder().decode(init?.body);
        counter.statements = (counter.statements ?? 0) + JSON.parse(body).statements.length;
        return db.fetch(input, init);
      };
      return new D1Locks({ binding: "EDGELOCK_D1", bindings: { EDGELOCK_D1: { fetch } } });
    }
    case "etcd":
      return new EtcdLocks({ endpoints: [env.ETCD_URL], fetch: counted(realFetch) });
    case "redis-upstash":
      return new RedisLocks({ url: env.GATEWAY_URL, protocol: "upstash", token: env.TOKEN, fetch: counted(realFetch) });
    case "redis-webdis":
      return new RedisLocks({ url: env.WEBDIS_URL, protocol: "webdis", fetch: counted(realFetch) });
  }
  throw new Error("unknown backend " + backend);
}

/** The acquire options of a kind: exclusive (none), a permit of a semaphore of 3, a shared hold. */
function kindOpts(kind) {
  if (!kind || kind === "exclusive") return undefined;
  if (kind === "permit") return { limit: 3 };
  if (kind === "shared") return { mode: "shared" };
  throw new Error("unknown kind " + kind);
}

function checkKind(lock, opts) {
  if (opts?.limit !== undefined && (lock.mode !== "permit" || lock.limit !== opts.limit || !(lock.slot >= 0 && lock.slot < opts.limit))) {
    throw new Error("not a permit of " + opts.limit + ": " + JSON.stringify({ mode: lock.mode, limit: lock.limit, slot: lock.slot }));
  }
  if (opts?.mode === "shared" && lock.mode !== "shared") throw new Error("not a shared hold: mode " + lock.mode);
}

async function uncontended(backend, env, q) {
  const ms = Number(q.get("ms"));
  const warm = Number(q.get("warm"));
  const name = q.get("name");
  const opts = kindOpts(q.get("kind"));
  const counter = { n: 0 };
  const c = make(backend, env, counter);
  try {
    for (let i = 0; i < warm; i += 1) await (await c.acquire(name, opts)).release();
    const lat = [];
    const strayBefore = stray.n;
    const before = counter.n;
    const statementsBefore = counter.statements ?? 0;
    const start = now();
    while (now() - start < ms) {
      const t = now();
      const lock = await c.acquire(name, opts);
      checkKind(lock, opts);
      await lock.release();
      lat.push(now() - t);
    }
    const elapsed = now() - start;
    return { ops: lat.length, ms: elapsed, requests: counter.n - before, statements: (counter.statements ?? 0) - statementsBefore, stray: stray.n - strayBefore, lat };
  } finally {
    await c.close();
  }
}

async function handoff(backend, env, q) {
  const n = Number(q.get("n"));
  const name = q.get("name");
  const hc = { n: 0 };
  const wc = { n: 0 };
  const holder = make(backend, env, hc);
  const waiter = make(backend, env, wc);
  const lat = [];
  const afterRelease = [];
  const wholeWait = [];
  let early = 0;
  const strayBefore = stray.n;
  try {
    // Warm-up: sessions (etcd lease), connections.
    await (await holder.acquire(name)).release();
    await (await waiter.acquire(name)).release();
    for (let i = 0; i < n; i += 1) {
      const first = await holder.acquire(name);
      let heldAt = NaN;
      let atGrant = NaN;
      const w0 = wc.n;
      const waiting = waiter.acquire(name, { waitMs: 30000 }).then((lock) => { heldAt = now(); atGrant = wc.n; return lock; });
      await sleep(50 + Math.random() * 100);
      if (!Number.isNaN(heldAt)) early += 1;
      const w1 = wc.n;
      const releasedAt = now();
      await first.release();
      const second = await waiting;
      lat.push(heldAt - releasedAt);
      afterRelease.push(atGrant - w1);
      wholeWait.push(atGrant - w0);
      await second.release();
    }
  } finally {
    await Promise.allSettled([holder.close(), waiter.close()]);
  }
  return { lat, afterRelease, wholeWait, early, stray: stray.n - strayBefore };
}

/**
 * A semaphore under contention: \`holders\` clients (each its own) loop
 * acquire (limit \`limit\`) / hold \`holdMs\` / release for \`ms\`. Counts the
 * permits granted, the most holders seen at once (a holder counts from its
 * acquire resolving to just before its release call), and slot clashes (a
 * permit granted a slot another current holder has, or one outside 0..limit).
 */
async function semContended(backend, env, q) {
  const ms = Number(q.get("ms"));
  const holders = Number(q.get("holders"));
  const limit = Number(q.get("limit"));
  const holdMs = Number(q.get("holdMs"));
  const name = q.get("name");
  const counters = Array.from({ length: holders }, () => ({ n: 0 }));
  const clients = counters.map((c) => make(backend, env, c));
  const strayBefore = stray.n;
  try {
    // Warm-up: sessions (etcd lease), connections.
    for (const c of clients) await (await c.acquire(name, { limit })).release();
    const before = counters.reduce((a, c) => a + c.n, 0);
    let cur = 0;
    let max = 0;
    let grants = 0;
    let slotClashes = 0;
    const held = new Set();
    const start = now();
    await Promise.all(clients.map(async (c) => {
      while (now() - start < ms) {
        const p = await c.acquire(name, { limit, waitMs: 30000 });
        cur += 1;
        grants += 1;
        if (cur > max) max = cur;
        if (held.has(p.slot) || !(p.slot >= 0 && p.slot < limit)) slotClashes += 1;
        held.add(p.slot);
        await sleep(holdMs);
        held.delete(p.slot);
        cur -= 1;
        await p.release();
      }
    }));
    const elapsed = now() - start;
    const requests = counters.reduce((a, c) => a + c.n, 0) - before;
    return { grants, ms: elapsed, max, slotClashes, requests, stray: stray.n - strayBefore };
  } finally {
    await Promise.allSettled(clients.map((c) => c.close()));
  }
}

/**
 * A read-write lock's writer handoff: two readers (each its own client) hold
 * shared; a writer (a third client) is blocked in acquire for 50–150 ms; the
 * first reader releases, 10 ms later the second; latency is the last
 * reader's release call → the writer's acquire resolving. \`early\` counts a
 * writer granted while a reader still held.
 */
async function rwHandoff(backend, env, q) {
  const n = Number(q.get("n"));
  const name = q.get("name");
  const rc = { n: 0 };
  const wc = { n: 0 };
  const r1 = make(backend, env, rc);
  const r2 = make(backend, env, rc);
  const writer = make(backend, env, wc);
  const shared = { mode: "shared" };
  const lat = [];
  const afterRelease = [];
  let early = 0;
  const strayBefore = stray.n;
  try {
    await (await r1.acquire(name, shared)).release();
    await (await r2.acquire(name, shared)).release();
    await (await writer.acquire(name)).release();
    for (let i = 0; i < n; i += 1) {
      const a = await r1.acquire(name, { ...shared, waitMs: 10000 });
      const b = await r2.acquire(name, { ...shared, waitMs: 10000 });
      let heldAt = NaN;
      let atGrant = NaN;
      const waiting = writer.acquire(name, { waitMs: 30000 }).then((lock) => { heldAt = now(); atGrant = wc.n; return lock; });
      await sleep(50 + Math.random() * 100);
      await a.release();
      await sleep(10);
      if (!Number.isNaN(heldAt)) early += 1;
      const w1 = wc.n;
      const releasedAt = now();
      await b.release();
      const w = await waiting;
      lat.push(heldAt - releasedAt);
      afterRelease.push(atGrant - w1);
      await w.release();
    }
  } finally {
    await Promise.allSettled([r1.close(), r2.close(), writer.close()]);
  }
  return { lat, afterRelease, early, stray: stray.n - strayBefore };
}

/**
 * The baseline of the Durable Object row: \`n\` bare \`inspect\` requests (no
 * storage write) to one object through the router, timed one by one; and
 * whether workerd's clock showed anything finer than whole milliseconds.
 */
async function raw(env, q) {
  const n = Number(q.get("n"));
  const router = lockServiceRouter(env.LOCKS);
  const url = "https://lock-service/v1/inspect?name=" + encodeURIComponent(q.get("name"));
  const lat = [];
  for (let i = 0; i < n + 5; i += 1) {
    const t = now();
    const res = await router.fetch(url, { method: "POST", body: "{}", headers: { "content-type": "application/json" } });
    const body = await res.json();
    if (res.status !== 200 || typeof body.held !== "boolean") throw new Error("inspect: HTTP " + res.status + " " + JSON.stringify(body));
    if (i >= 5) lat.push(now() - t);
  }
  // The same for D1: a batch of one \`SELECT 1\` through d1Binding.
  const db = d1Binding(env.EDGELOCK_D1);
  const d1 = [];
  for (let i = 0; i < n + 5; i += 1) {
    const t = now();
    const res = await db.fetch("https://d1/d1/batch", { method: "POST", body: JSON.stringify({ statements: [{ sql: "SELECT 1 AS one", params: [] }] }) });
    const body = await res.json();
    if (res.status !== 200 || body.results?.[0]?.rows?.[0]?.one !== 1) throw new Error("SELECT 1: HTTP " + res.status + " " + JSON.stringify(body));
    if (i >= 5) d1.push(now() - t);
  }
  return { lat, d1, integerMs: lat.every(Number.isInteger) && d1.every(Number.isInteger) };
}

export default {
  async fetch(request, env) {
    const url = new URL(request.url);
    const q = url.searchParams;
    try {
      let out;
      if (url.pathname === "/uncontended") out = await uncontended(q.get("backend"), env, q);
      else if (url.pathname === "/handoff") out = await handoff(q.get("backend"), env, q);
      else if (url.pathname === "/raw") out = await raw(env, q);
      else if (url.pathname === "/sem-contended") out = await semContended(q.get("backend"), env, q);
      else if (url.pathname === "/rw-handoff") out = await rwHandoff(q.get("backend"), env, q);
      else return new Response("not found", { status: 404 });
      return Response.json(out);
    } catch (e) {
      return Response.json({ error: String(e && e.message), code: e && e.code }, { status: 500 });
    }
  },
};
`;

const BACKENDS = {
  "durable-object": { label: "edgelock DurableObjectLocks (binding, lockServiceRouter)", unit: "binding calls" },
  d1: { label: "edgelock D1Locks (d1Binding, local D1)", unit: "D1 batches" },
  etcd: { label: "edgelock EtcdLocks (etcd JSON gateway)", unit: "HTTP requests" },
  "redis-upstash": { label: "edgelock RedisLocks (Upstash REST, local gateway)", unit: "HTTP requests" },
  "redis-webdis": { label: "edgelock RedisLocks (Webdis)", unit: "HTTP requests" },
};
const ids = Object.keys(BACKENDS);
// The kinds part: the Durable Object and the peers that grant both kinds from a Worker (D1 is exclusive-only).
const KIND_IDS = ["durable-object", "etcd", "redis-upstash"];

log("starting testenv (etcd 1, redis 1, webdis, Upstash gateway)");
const env = await startTestenv({ etcd: 1, redis: 1, webdis: true, gateway: true });
const dir = mkdtempSync(path.join(tmpdir(), "edgelock-bench-do-"));
cpSync(pkgDir, path.join(dir, "edgelock"), { recursive: true });
writeFileSync(path.join(dir, "bench.mjs"), APP);
const wasm = [{ type: "CompiledWasm", include: ["**/*.wasm"] }];
const COMPATIBILITY_DATE = "2026-04-20"; // workerd 1.20260426 accepts dates up to its own
let mf;
const results = {
  started: new Date().toISOString(),
  config: CFG,
  loadAvg: { start: os.loadavg().map((x) => x.toFixed(2)).join(" / ") },
  miniflare: miniflareVersion,
  libs: Object.fromEntries(ids.map((id) => [id, { label: BACKENDS[id].label, unit: BACKENDS[id].unit }])),
  uncontended: {},
  handoff: {},
};
try {
  log(`starting workerd (Miniflare ${miniflareVersion}): bench Worker + the built Worker's LockObject`);
  mf = new Miniflare({
    cf: false,
    workers: [
      {
        name: "bench",
        modules: true,
        scriptPath: path.join(dir, "bench.mjs"),
        modulesRoot: dir,
        // The package's glue (edgelock_wasm.js) is an ES module too.
        modulesRules: [...wasm, { type: "ESModule", include: ["**/*.js", "**/*.mjs"] }],
        compatibilityDate: COMPATIBILITY_DATE,
        bindings: {
          ETCD_URL: env.etcd_urls[0],
          GATEWAY_URL: env.gateway_urls[0],
          WEBDIS_URL: env.webdis_urls[0],
          TOKEN: env.token,
        },
        durableObjects: { LOCKS: { className: "LockObject", scriptName: "locks" } },
        // In memory, as the Durable Objects' storage here (no persist option).
        d1Databases: { EDGELOCK_D1: "edgelock-bench-d1" },
      },
      {
        name: "locks",
        modules: true,
        scriptPath: path.join(buildDir, "index.js"),
        modulesRoot: buildDir,
        modulesRules: wasm,
        compatibilityDate: COMPATIBILITY_DATE,
        // The front is not used here (the bench reaches the objects through the binding).
        bindings: { EDGELOCK_API_TOKEN: "bench-unused-token-0123456789abcdef" },
        durableObjects: { EDGELOCK_LOCKS: { className: "LockObject", useSQLite: true } },
      },
    ],
  });
  await mf.ready;
  const call = async (p, params) => {
    const res = await mf.dispatchFetch(`http://bench.test${p}?${new URLSearchParams(params)}`);
    const text = await res.text();
    let body;
    try {
      body = JSON.parse(text);
    } catch {
      throw new Error(`${p} ${JSON.stringify(params)}: HTTP ${res.status}: ${text.slice(0, 300)}`);
    }
    if (res.status !== 200) throw new Error(`${p} ${JSON.stringify(params)}: HTTP ${res.status}: ${text.slice(0, 300)}`);
    return body;
  };
  const run = Date.now().toString(36);
  {
    const r = await call("/raw", { n: CFG.rawInspects, name: `bench-do-raw-${run}` });
    results.rawInspect = { n: r.lat.length, p50: quantile(r.lat, 0.5), p99: quantile(r.lat, 0.99), mean: r.lat.reduce((a, b) => a + b, 0) / r.lat.length };
    results.rawD1Batch = { n: r.d1.length, p50: quantile(r.d1, 0.5), p99: quantile(r.d1, 0.99), mean: r.d1.reduce((a, b) => a + b, 0) / r.d1.length };
    results.clockIntegerMs = r.integerMs;
    log(`bare inspect through the binding: ${JSON.stringify(results.rawInspect)}; bare D1 batch: ${JSON.stringify(results.rawD1Batch)}; whole-ms clock: ${r.integerMs}`);
  }

  log("1/3 uncontended");
  const unc = Object.fromEntries(ids.map((id) => [id, { ops: 0, ms: 0, requests: 0, statements: 0, stray: 0, lat: [] }]));
  for (let round = 0; round < CFG.rounds; round += 1) {
    for (const id of ids) {
      const r = await call("/uncontended", { backend: id, ms: CFG.sliceMs, warm: CFG.warmup, name: `bench-do-unc-${id}-${run}` });
      const s = unc[id];
      s.ops += r.ops; s.ms += r.ms; s.requests += r.requests; s.statements += r.statements; s.stray += r.stray; s.lat.push(...r.lat);
    }
    log(`uncontended round ${round + 1}/${CFG.rounds}`);
  }
  for (const id of ids) {
    const s = unc[id];
    results.uncontended[id] = {
      ops: s.ops, opsPerSec: (s.ops / s.ms) * 1000, p50: quantile(s.lat, 0.5), p99: quantile(s.lat, 0.99),
      requestsPerOp: s.ops ? s.requests / s.ops : NaN, strayFetches: s.stray,
      ...(id === "d1" ? { statementsPerOp: s.ops ? s.statements / s.ops : NaN } : {}),
    };
    log(`${id}: ${JSON.stringify(results.uncontended[id])}`);
  }

  log("2/3 handoff");
  const hand = Object.fromEntries(ids.map((id) => [id, { lat: [], afterRelease: [], wholeWait: [], early: 0, stray: 0 }]));
  for (let done = 0; done < CFG.handoffs; done += CFG.handoffBatch) {
    const n = Math.min(CFG.handoffBatch, CFG.handoffs - done);
    for (const id of ids) {
      const r = await call("/handoff", { backend: id, n, name: `bench-do-handoff-${id}-${run}-${done}` });
      const s = hand[id];
      s.lat.push(...r.lat); s.afterRelease.push(...r.afterRelease); s.wholeWait.push(...r.wholeWait);
      s.early += r.early; s.stray += r.stray;
    }
    log(`handoff ${done + n}/${CFG.handoffs}`);
  }
  const mean = (xs) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : NaN);
  for (const id of ids) {
    const s = hand[id];
    results.handoff[id] = {
      n: s.lat.length, p50: quantile(s.lat, 0.5), p99: quantile(s.lat, 0.99), max: Math.max(...s.lat),
      samples: s.lat.map((x) => Math.round(x * 10) / 10),
      waiterRequestsAfterRelease: mean(s.afterRelease), waiterRequestsWholeWait: mean(s.wholeWait),
      exclusionViolations: s.early, strayFetches: s.stray,
    };
    const { samples, ...brief } = results.handoff[id];
    log(`${id}: ${JSON.stringify(brief)}`);
  }

  // --- kinds: semaphores of 3 and read-write locks ---------------------------
  log("3/3 kinds: semaphore of 3, read-write lock (durable-object, etcd, redis-upstash)");
  const K = CFG.kinds;
  const tKinds = now();
  const kinds = (results.kinds = { backends: KIND_IDS, limit: K.limit, permit: {}, contended: {}, shared: {}, rwHandoff: {} });
  const kunc = Object.fromEntries(["permit", "shared"].map((kind) => [kind, Object.fromEntries(KIND_IDS.map((id) => [id, { ops: 0, ms: 0, requests: 0, stray: 0, lat: [] }]))]));
  for (let round = 0; round < CFG.rounds; round += 1) {
    for (const kind of ["permit", "shared"]) {
      for (const id of KIND_IDS) {
        const r = await call("/uncontended", { backend: id, kind, ms: CFG.sliceMs, warm: CFG.warmup, name: `bench-do-${kind}-${id}-${run}` });
        const s = kunc[kind][id];
        s.ops += r.ops; s.ms += r.ms; s.requests += r.requests; s.stray += r.stray; s.lat.push(...r.lat);
      }
    }
    log(`kinds uncontended round ${round + 1}/${CFG.rounds}`);
  }
  for (const kind of ["permit", "shared"]) {
    for (const id of KIND_IDS) {
      const s = kunc[kind][id];
      kinds[kind][id] = { ops: s.ops, opsPerSec: (s.ops / s.ms) * 1000, p50: quantile(s.lat, 0.5), p99: quantile(s.lat, 0.99), requestsPerOp: s.ops ? s.requests / s.ops : NaN, strayFetches: s.stray };
      log(`${kind} ${id}: ${JSON.stringify(kinds[kind][id])}`);
    }
  }
  const cont = Object.fromEntries(KIND_IDS.map((id) => [id, { grants: 0, ms: 0, max: 0, slotClashes: 0, requests: 0, stray: 0 }]));
  for (let round = 0; round < K.contendedRounds; round += 1) {
    for (const id of KIND_IDS) {
      const r = await call("/sem-contended", { backend: id, ms: K.contendedMs, holders: K.holders, limit: K.limit, holdMs: K.holdMs, name: `bench-do-semc-${id}-${run}-${round}` });
      const s = cont[id];
      s.grants += r.grants; s.ms += r.ms; s.max = Math.max(s.max, r.max); s.slotClashes += r.slotClashes; s.requests += r.requests; s.stray += r.stray;
      if (r.max > K.limit || r.slotClashes > 0) {
        throw new Error(`semaphore of ${K.limit} on ${id}: ${r.max} holders seen at once, ${r.slotClashes} slot clashes (must be ≤ ${K.limit} and 0)`);
      }
    }
    log(`semaphore contended round ${round + 1}/${K.contendedRounds}`);
  }
  for (const id of KIND_IDS) {
    const s = cont[id];
    kinds.contended[id] = { holders: K.holders, holdMs: K.holdMs, grants: s.grants, ms: s.ms, grantsPerSec: (s.grants / s.ms) * 1000, maxHolders: s.max, slotClashes: s.slotClashes, requestsPerGrant: s.grants ? s.requests / s.grants : NaN, strayFetches: s.stray };
    log(`contended ${id}: ${JSON.stringify(kinds.contended[id])}`);
  }
  const rwh = Object.fromEntries(KIND_IDS.map((id) => [id, { lat: [], afterRelease: [], early: 0, stray: 0 }]));
  for (let done = 0; done < K.rwHandoffs; done += K.rwHandoffBatch) {
    const n = Math.min(K.rwHandoffBatch, K.rwHandoffs - done);
    for (const id of KIND_IDS) {
      const r = await call("/rw-handoff", { backend: id, n, name: `bench-do-rw-${id}-${run}-${done}` });
      const s = rwh[id];
      s.lat.push(...r.lat); s.afterRelease.push(...r.afterRelease); s.early += r.early; s.stray += r.stray;
      if (r.early > 0) throw new Error(`read-write lock on ${id}: the writer was granted while a reader held (${r.early} times)`);
    }
    log(`rw handoff ${done + n}/${K.rwHandoffs}`);
  }
  for (const id of KIND_IDS) {
    const s = rwh[id];
    kinds.rwHandoff[id] = {
      n: s.lat.length, p50: quantile(s.lat, 0.5), p99: quantile(s.lat, 0.99), max: Math.max(...s.lat),
      samples: s.lat.map((x) => Math.round(x * 10) / 10),
      writerRequestsAfterRelease: s.afterRelease.reduce((a, b) => a + b, 0) / s.afterRelease.length,
      exclusionViolations: s.early, strayFetches: s.stray,
    };
    const { samples, ...brief } = kinds.rwHandoff[id];
    log(`rw handoff ${id}: ${JSON.stringify(brief)}`);
  }
  kinds.elapsedSec = (now() - tKinds) / 1000;
} finally {
  await mf?.dispose().catch(() => {});
  await env.stop();
  rmSync(dir, { recursive: true, force: true });
}
results.elapsedSec = (now() - t0All) / 1000;
results.loadAvg.end = os.loadavg().map((x) => x.toFixed(2)).join(" / ");

// --- report -------------------------------------------------------------------
const u = results.uncontended;
const h = results.handoff;
const f0 = (x) => (Number.isFinite(x) ? Math.round(x).toLocaleString("en-US") : "–");
const f1 = (x) => (Number.isFinite(x) ? x.toFixed(1) : "–");
const f2 = (x) => (Number.isFinite(x) ? x.toFixed(2) : "–");
// Whole-ms clock: latencies printed as whole ms, not with invented decimals.
const fms = (x) => (results.clockIntegerMs ? f0(x) : f1(x));
const ratio = (a, b) => (Number.isFinite(a) && Number.isFinite(b) && b !== 0 ? `${(a / b).toFixed(2)}×` : "–");
const rows = ids.map((id) => {
  const label = id === "durable-object" || id === "d1" ? `**${BACKENDS[id].label}**` : BACKENDS[id].label;
  const statements = id === "d1" ? ` (${f2(u[id].statementsPerOp)} statements)` : "";
  return `| ${label} | ${f0(u[id].opsPerSec)} | ${fms(u[id].p50)} | ${fms(u[id].p99)} | ${fms(h[id].p50)} | ${fms(h[id].p99)} | ${f2(u[id].requestsPerOp)} ${BACKENDS[id].unit}${statements} | ${f2(h[id].waiterRequestsAfterRelease)} / ${f2(h[id].waiterRequestsWholeWait)} |`;
});
const d = "durable-object";
const peers = ["etcd", "redis-upstash", "redis-webdis"];
// ops/s and requests: subject ÷ peer; handoff: peer ÷ subject (higher = the subject faster).
const ratioRow = (subject, p) =>
  `| ${BACKENDS[p].label} | ${ratio(u[subject].opsPerSec, u[p].opsPerSec)} | ${ratio(h[p].p50, h[subject].p50)} | ${ratio(h[p].p99, h[subject].p99)} | ${ratio(u[subject].requestsPerOp, u[p].requestsPerOp)} |`;
const ratioRows = peers.map((p) => ratioRow(d, p));
// D1's handoff is a poll's share, tens of times a push handoff: d1 ÷ peer reads better there.
const d1RatioRows = [d, ...peers].map((p) =>
  `| ${BACKENDS[p].label} | ${ratio(u.d1.opsPerSec, u[p].opsPerSec)} | ${ratio(h.d1.p50, h[p].p50)} | ${ratio(h.d1.p99, h[p].p99)} | ${ratio(u.d1.requestsPerOp, u[p].requestsPerOp)} |`);
// The kinds part: one row per figure, the three backends' values and DO's ratio to each peer
// (ops/s, permits/s, requests: durable-object ÷ peer; latencies: peer ÷ durable-object).
const k = results.kinds;
const KP = ["etcd", "redis-upstash"];
const kindFigures = [
  ["permitOpsPerSec", "semaphore of 3, uncontended permit acquire+release ops/s", (id) => k.permit[id].opsPerSec, f0, "do/peer"],
  ["permitP50", "… p50 ms", (id) => k.permit[id].p50, fms, "peer/do"],
  ["permitP99", "… p99 ms", (id) => k.permit[id].p99, fms, "peer/do"],
  ["permitRequestsPerOp", "… requests per permit acquire+release", (id) => k.permit[id].requestsPerOp, f2, "do/peer"],
  ["contendedGrantsPerSec", `semaphore of 3, contended (${CFG.kinds.holders} holders, ~${CFG.kinds.holdMs} ms hold): permits granted/s`, (id) => k.contended[id].grantsPerSec, f0, "do/peer"],
  ["contendedMaxHolders", "… most holders seen at once (asserted ≤ 3)", (id) => k.contended[id].maxHolders, f0, null],
  ["contendedRequestsPerGrant", "… requests per permit granted", (id) => k.contended[id].requestsPerGrant, f2, "do/peer"],
  ["sharedOpsPerSec", "read-write, uncontended shared acquire+release ops/s", (id) => k.shared[id].opsPerSec, f0, "do/peer"],
  ["sharedP50", "… p50 ms", (id) => k.shared[id].p50, fms, "peer/do"],
  ["sharedP99", "… p99 ms", (id) => k.shared[id].p99, fms, "peer/do"],
  ["sharedRequestsPerOp", "… requests per shared acquire+release", (id) => k.shared[id].requestsPerOp, f2, "do/peer"],
  ["writerHandoffP50", "read-write, writer handoff after the last of 2 readers releases: p50 ms", (id) => k.rwHandoff[id].p50, fms, "peer/do"],
  ["writerHandoffP99", "… p99 ms", (id) => k.rwHandoff[id].p99, fms, "peer/do"],
  ["writerRequestsAfterRelease", "… writer's requests, last release → grant", (id) => k.rwHandoff[id].writerRequestsAfterRelease, f2, null],
];
k.ratios = {};
const kindRows = kindFigures.map(([key, label, get, fmt, dir]) => {
  const cells = KIND_IDS.map((id) => fmt(get(id)));
  const rs = KP.map((p) => (dir === "do/peer" ? ratio(get(d), get(p)) : dir === "peer/do" ? ratio(get(p), get(d)) : "–"));
  const num = (a, b) => (Number.isFinite(a) && Number.isFinite(b) && b !== 0 ? Math.round((a / b) * 1000) / 1000 : null);
  if (dir) {
    k.ratios[key] = {
      direction: dir === "do/peer" ? "durable-object ÷ peer" : "peer ÷ durable-object",
      ...Object.fromEntries(KP.map((p) => [p, dir === "do/peer" ? num(get(d), get(p)) : num(get(p), get(d))])),
    };
  }
  return `| ${label} | ${cells.join(" | ")} | ${rs.join(" | ")} |`;
});
for (const p of KP) {
  log(`kinds, durable-object vs ${p}: ` + kindFigures.filter((f) => f[4]).map(([key]) => `${key} ${k.ratios[key][p]}×`).join("; "));
}
const kindStray = KIND_IDS.filter((id) => ["permit", "shared", "contended", "rwHandoff"].some((x) => k[x][id].strayFetches > 0));
const violations = ids.filter((id) => h[id].exclusionViolations > 0);
const stray = ids.filter((id) => u[id].strayFetches > 0 || h[id].strayFetches > 0);
// BENCH_SHARED=0: nothing else ran on the machine during the run; 1: other work did; unset: unknown.
const machineNote = process.env.BENCH_SHARED === "0"
  ? "not shared with other jobs during the run"
  : process.env.BENCH_SHARED === "1" ? "shared with other work during the run" : "possibly shared with other work";
results.machine = { cpus: os.cpus().length, shared: process.env.BENCH_SHARED === "0" ? false : process.env.BENCH_SHARED === "1" ? true : null };
const SECTION_TITLE = "Durable Object lock service and D1 (inside workerd)";
const section = `## ${SECTION_TITLE}

\`bench/durable.mjs\`, ${results.started}: every loop runs **inside one workerd**
(Miniflare ${miniflareVersion}, local, no network) in a bench Worker that imports
the npm package's workerd entry, on a ${os.cpus().length}-core machine ${machineNote} (load average
${results.loadAvg.start} at the start, ${results.loadAvg.end} at the end; absolute figures are noisy; the ratios within the run are the point). The \`durable-object\` row reaches the lock
service (the built Worker's \`LockObject\`, SQLite-backed, in the same workerd)
through \`lockServiceRouter(env.LOCKS)\`; the \`d1\` row is \`D1Locks\` with
its defaults on Miniflare's local D1 (SQLite in memory, as the Durable
Objects' storage here), bound as \`EDGELOCK_D1\` and reached through
\`d1Binding\` (each call one \`db.batch\`, one transaction); the other rows reach local etcd,
the Upstash REST gateway and Webdis (devtools \`testenv\`, loopback) with
workerd's \`fetch\`, from the same Worker. Uncontended: sequential acquire +
release on one client, ${CFG.rounds} × ${CFG.sliceMs} ms per backend, rounds
interleaved. Handoff: a holder releases while a waiter (a second client) has
been blocked in \`acquire\` for 50–150 ms; latency is the release call → the
waiter's \`acquire\` resolving, ${CFG.handoffs} samples per backend. Requests:
every call of the client's transport (the counted \`fetch\` option, or the
counted binding's \`fetch\` for the Durable Object and D1) over the uncontended
slices ÷ operations (for D1 also the SQL statements in those batches); the waiter's calls between the release call and its grant
/ over its whole wait. Times are workerd's \`performance.now()\`, which only
advances across I/O${results.clockIntegerMs ? " and reads whole milliseconds here (so p50/p99 below are quantised to 1 ms; ops/s are over whole slices)" : ""}.

| backend (inside workerd) | acquire+release ops/s | p50 ms | p99 ms | handoff p50 ms | handoff p99 ms | requests per acquire+release | waiter requests: release → grant / whole wait |
|---|---|---|---|---|---|---|---|
${rows.join("\n")}

Baseline of the Durable Object row: a bare \`inspect\` request (no storage
write) to one object through the same router, ${results.rawInspect?.n ?? "–"} in a row: p50
${fms(results.rawInspect?.p50)} ms, mean ${f2(results.rawInspect?.mean)} ms, p99 ${fms(results.rawInspect?.p99)} ms, against a mean of
${f2(1000 / u[d].opsPerSec)} ms per uncontended acquire + release (two requests): so reaching the object
accounts for little of it; the rest is the acquire and release transitions
(each stores the state; acquire also sets the lease alarm) and the client. This is a local workerd:
on Cloudflare a Durable Object also sits a network hop away from the Worker
calling it (in its own location), which none of these figures include.

The Durable Object backend against each peer in the same run (ops/s and
requests: durable-object ÷ peer; handoff: peer ÷ durable-object, so higher =
the Durable Object faster):

| peer | ops/s ratio | handoff p50 ratio | handoff p99 ratio | requests per acquire+release ratio |
|---|---|---|---|---|
${ratioRows.join("\n")}

**D1.** An uncontended acquire + release is ${f2(u.d1.requestsPerOp)} D1 batches
carrying ${f2(u.d1.statementsPerOp)} statements: the acquire's \`INSERT … ON CONFLICT DO UPDATE\`
and \`SELECT\` in one batch, the release's \`UPDATE\` in another, and each batch
opening with the \`CREATE TABLE IF NOT EXISTS\` that creates the table on first
use (\`src/core/d1/codec.rs\` sends it with every batch). Baseline: a bare
batch of one \`SELECT 1\` through the same \`d1Binding\`, ${results.rawD1Batch?.n ?? "–"} in a row: p50
${fms(results.rawD1Batch?.p50)} ms, mean ${f2(results.rawD1Batch?.mean)} ms, p99 ${fms(results.rawD1Batch?.p99)} ms, against a mean of
${f2(1000 / u.d1.opsPerSec)} ms per acquire + release. A D1 waiter is not woken: it polls,
sleeping the holder's remaining lease but at most \`retryDelayMs\` (250 ms) plus
0–\`retryJitterMs\` (100 ms), so its handoff is a poll interval's share, not a
round trip (handoff p50 ${fms(h.d1.p50)} ms, p99 ${fms(h.d1.p99)} ms, against ${fms(h[d].p50)} / ${fms(h[d].p99)} ms
for the Durable Object's held-open waiter); a smaller \`retryDelayMs\` trades it
for more batches while waiting. Local D1 is SQLite next to the Worker; on
Cloudflare each batch goes to the database's primary, a network hop or more
away, which none of these figures include. D1 against each peer in the same
run (every column d1 ÷ peer: ops/s higher = D1 faster, handoff higher = D1
slower):

| peer | ops/s ratio | handoff p50, d1 ÷ peer | handoff p99, d1 ÷ peer | requests per acquire+release ratio |
|---|---|---|---|---|
${d1RatioRows.join("\n")}

### Semaphores and read-write locks

The same run, for the lock kinds the Durable Object lock service grants
besides exclusive locks, next to the peers a Workers user would otherwise
pick for them: the same npm API on etcd (\`EtcdLocks\`) and on Redis through
the Upstash REST gateway (\`RedisLocks\`), from the same bench Worker (D1 is
exclusive-only, and Webdis is left out here). Semaphore of ${CFG.kinds.limit}:
uncontended, sequential \`acquire(name, { limit: ${CFG.kinds.limit} })\` + release on one client,
${CFG.rounds} × ${CFG.sliceMs} ms per backend (interleaved with the shared rounds); contended,
${CFG.kinds.holders} clients in the bench Worker each looping acquire (limit ${CFG.kinds.limit}) / hold ~${CFG.kinds.holdMs} ms /
release for ${CFG.kinds.contendedRounds} × ${CFG.kinds.contendedMs} ms, counting the permits granted and the
most holders seen at once (the bench fails if it exceeds ${CFG.kinds.limit}, or if a permit's
slot is one another current holder has). Read-write: uncontended
\`acquire(name, { mode: "shared" })\` + release, as for permits; writer
handoff: two readers (each its own client) hold, a writer (a third client)
has been blocked in \`acquire\` for 50–150 ms, the first reader releases and
10 ms later the second; latency is the last reader's release call → the
writer's \`acquire\` resolving, ${CFG.kinds.rwHandoffs} samples per backend (the bench fails if the
writer is granted while a reader holds). Requests are counted as above.
Ratios: ops/s, permits/s and requests durable-object ÷ peer; latencies
peer ÷ durable-object (so higher = the Durable Object faster, fewer requests
= a ratio below 1); with workerd's whole-millisecond clock the latency
ratios of figures of a few ms are coarse (a 1 ms step is a factor of 2 at
2 ms). The Durable Object writer's requests after the last release are 0:
its one acquire request, sent before the readers released, is held open by
the object and answered with the grant. The kinds part took ${f0(k.elapsedSec)} s of the run.

| figure (inside workerd) | durable-object | etcd | redis (upstash) | DO vs etcd | DO vs Redis (Upstash) |
|---|---|---|---|---|---|
${kindRows.join("\n")}

Most holders seen at once: ${KIND_IDS.map((id) => `${id} ${k.contended[id].maxHolders}`).join(", ")} (limit ${CFG.kinds.limit}); slot clashes: ${KIND_IDS.map((id) => k.contended[id].slotClashes).reduce((a, b) => a + b, 0)}; writers granted while a reader held: ${KIND_IDS.map((id) => k.rwHandoff[id].exclusionViolations).reduce((a, b) => a + b, 0)}.
${kindStray.length ? `Fetches outside the clients' transports in the kinds part: ${kindStray.join(", ")}.` : "No fetch outside the clients' counted transports in the kinds part either."}

${violations.length ? `**Exclusion violations** (the waiter got in while the holder held): ${violations.map((id) => `${id} ${h[id].exclusionViolations}`).join(", ")}.` : "No waiter was granted while its holder held (0 exclusion violations in every row)."}
${stray.length ? `Fetches outside the clients' transports: ${stray.map((id) => `${id} ${u[id].strayFetches + h[id].strayFetches}`).join(", ")}.` : "No fetch outside the clients' counted transports (the Worker's wrapped \`globalThis.fetch\` saw none)."}
Whole script: ${results.elapsedSec.toFixed(0)} s.
`;
writeFileSync(path.join(repoRoot, "bench", "durable-results.json"), JSON.stringify(results, null, 2) + "\n");
// The section's earlier title (before the D1 row) is renamed in place.
{
  const md = path.join(repoRoot, "BENCHMARKS.md");
  const old = "## Durable Object lock service (inside workerd)\n";
  if (existsSync(md)) {
    const text = readFileSync(md, "utf8");
    if (text.includes(old)) writeFileSync(md, text.replace(old, `## ${SECTION_TITLE}\n`));
  }
}
writeSection(SECTION_TITLE, section);
console.log(section);
log(`done in ${results.elapsedSec.toFixed(0)} s: bench/durable-results.json, BENCHMARKS.md`);
process.exit(0);
