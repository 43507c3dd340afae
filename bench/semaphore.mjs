// Semaphores: edgelock's permits (`acquire(name, { limit })`) next to
// redis-semaphore's Semaphore and RedlockSemaphore, in the same run, on
// backends started here by the devtools `testenv`; edgelock RedisLocks both
// over the Upstash REST gateway and over redis:// TCP (the Node entry's
// sockets), next to redis-semaphore's Semaphore on the same redis-server.
// etcd3 (the etcd peer of the lock benchmark) has no semaphore, so edgelock
// on etcd has no peer row.
//
// Measured per library:
// - uncontended: one client, acquire + release of a semaphore of 3 in a loop
//   (interleaved rounds, as bench/run.mjs does for locks): ops/s and requests
//   per acquire + release, from each client's own log (HTTP requests; over
//   redis:// TCP, edgelock's command writes, each of one or more pipelined
//   commands; the ioredis peers' commands as sent by the client);
// - contended: 12 clients on one semaphore of 3, each holding HOLD_MS per
//   permit: acquisitions/s, and the handoff latency: each release is matched
//   with the first later grant to a client that was already waiting when
//   the release began (that waiter could use the freed permit), and the gap
//   between the release call and that grant is one handoff. Also the most
//   permits seen held at once (from the grant/release times; ≤ 3).
//
// Run by `bash scripts/bench.sh` after bench/run.mjs; writes
// bench/semaphore-results.json and the "Semaphores" section of BENCHMARKS.md.
// BENCH_QUICK=1 shortens every phase (for checking the harness, not for numbers).

import { performance } from "node:perf_hooks";
import { writeFileSync } from "node:fs";
import path from "node:path";
import { startTestenv, repoRoot } from "../tests/js/testenv.mjs";
import { EtcdLocks, RedisLocks, Redlock as EdgeRedlock } from "../pkg/index.node.mjs";
import IORedis from "ioredis";
import { Semaphore, RedlockSemaphore } from "redis-semaphore";
import { countingFetch, countingSockets, logIoredis } from "./reqlog.mjs";
import { quantile, writeSection } from "./section.mjs";

const QUICK = process.env.BENCH_QUICK === "1";
const LIMIT = 3;
const CLIENTS = 12;
const HOLD_MS = 20;
const CFG = { limit: LIMIT, clients: CLIENTS, holdMs: HOLD_MS, rounds: QUICK ? 2 : 5, sliceMs: QUICK ? 150 : 400, contendedMs: QUICK ? 1000 : 5000 };
// Issue 28's target for the semaphore over redis:// TCP: at least redis-semaphore's uncontended rate.
const TCP_TARGET = { id: "edgelock-redis-tcp", uncontendedOps: 1.0 };
const now = () => performance.now();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const log = (...a) => console.error("[bench:semaphore]", ...a);

log("starting testenv (etcd 1, redis 3, Upstash gateway)");
const env = await startTestenv({ etcd: 1, redis: 3, gateway: true });
const gw = env.gateway_urls;
const token = env.token;

/** An edgelock client factory: `build(transport)` gets a logging transport made by `counting(reqs)`. */
function edgelock(build, counting = countingFetch) {
  return () => {
    const reqs = [];
    const client = build(counting(reqs));
    return {
      reqs,
      async acquire(name) {
        const lock = await client.acquire(name, { limit: LIMIT });
        return { slot: lock.slot, release: () => lock.release() };
      },
      close: () => client.close(),
    };
  };
}

function ioredis(n, reqs) {
  return env.redis.slice(0, n).map((r) => logIoredis(new IORedis({ host: "127.0.0.1", port: r.port, maxRetriesPerRequest: 2 }), reqs));
}

const LIBS = {
  "edgelock-etcd": {
    label: "edgelock EtcdLocks, limit 3", peer: null, unit: "HTTP req",
    note: "npm package in Node, defaults (session lease 10 s; the first waiter watches the holders' deletes, every later one only its predecessor)",
    make: edgelock((fetch) => new EtcdLocks({ endpoints: env.etcd_urls, fetch })),
  },
  "edgelock-redis": {
    label: "edgelock RedisLocks (upstash), limit 3", peer: "redis-semaphore", unit: "HTTP req",
    note: "Upstash REST via the local gateway; defaults (ttl 10 s, push wake-up of the queue's head)",
    make: edgelock((fetch) => new RedisLocks({ url: gw[0], protocol: "upstash", token, fetch })),
  },
  "edgelock-redis-tcp": {
    label: "edgelock RedisLocks (redis:// TCP), limit 3", peer: "redis-semaphore", tcp: true, unit: "command write",
    note: "the Redis protocol over TCP (node:net sockets of the Node entry) to the same redis-server as redis-semaphore; defaults (ttl 10 s, commands pipelined on one connection, push wake-up of the queue's head over a subscriber connection); requests are the client's command writes (one write may carry pipelined commands)",
    make: edgelock((openSocket) => new RedisLocks({ url: env.redis[0].url, openSocket }), countingSockets),
  },
  "redis-semaphore": {
    label: "redis-semaphore Semaphore, limit 3", tcp: true, unit: "Redis cmd",
    note: "ioredis TCP to the same redis-server; defaults (lockTimeout 10 s, retryInterval 10 ms) except acquireTimeout 60 s",
    make: () => {
      const reqs = [];
      const [redis] = ioredis(1, reqs);
      return {
        reqs,
        async acquire(name) {
          const s = new Semaphore(redis, name, LIMIT, { acquireTimeout: 60_000 });
          await s.acquire();
          return { slot: null, release: () => s.release() };
        },
        close: async () => redis.quit(),
      };
    },
  },
  "edgelock-redlock": {
    label: "edgelock Redlock (3× upstash), limit 3", peer: "redis-semaphore-redlock", unit: "HTTP req",
    note: "3 nodes, each its own gateway; defaults except retryCount 1000",
    make: edgelock((fetch) => new EdgeRedlock({ nodes: gw.map((url) => ({ url, protocol: "upstash", token })), retryCount: 1000, fetch })),
  },
  "redis-semaphore-redlock": {
    label: "redis-semaphore RedlockSemaphore (3×), limit 3", tcp: true, unit: "Redis cmd",
    note: "ioredis TCP to the same 3 redis-servers; defaults except acquireTimeout 60 s",
    make: () => {
      const reqs = [];
      const clients = ioredis(3, reqs);
      return {
        reqs,
        async acquire(name) {
          const s = new RedlockSemaphore(clients, name, LIMIT, { acquireTimeout: 60_000 });
          await s.acquire();
          return { slot: null, release: () => s.release() };
        },
        close: async () => Promise.all(clients.map((c) => c.quit())),
      };
    },
  },
};

async function uncontended() {
  const clients = Object.fromEntries(Object.entries(LIBS).map(([id, l]) => [id, l.make()]));
  const tally = Object.fromEntries(Object.keys(LIBS).map((id) => [id, { ops: 0, ms: 0, reqs: 0 }]));
  // Warm up (connections, script caches, session leases).
  for (const [id, c] of Object.entries(clients)) {
    const h = await c.acquire(`sem-u-${id}`);
    await h.release();
  }
  for (let round = 0; round < CFG.rounds; round++) {
    for (const [id, c] of Object.entries(clients)) {
      const reqs0 = c.reqs.length;
      const t0 = now();
      let ops = 0;
      while (now() - t0 < CFG.sliceMs) {
        const h = await c.acquire(`sem-u-${id}`);
        await h.release();
        ops += 1;
      }
      tally[id].ms += now() - t0;
      tally[id].ops += ops;
      tally[id].reqs += c.reqs.length - reqs0;
    }
  }
  for (const c of Object.values(clients)) await c.close();
  return Object.fromEntries(Object.entries(tally).map(([id, t]) => [id, { opsPerSec: (t.ops * 1000) / t.ms, requestsPerOp: t.reqs / t.ops, ops: t.ops }]));
}

async function contended(id) {
  const lib = LIBS[id];
  const name = `sem-c-${id}`;
  const clients = Array.from({ length: CLIENTS }, () => lib.make());
  const grants = []; // { t, client, waitingSince }
  const releases = []; // { t, end, client }
  const slots = new Set();
  const stopAt = now() + CFG.contendedMs;
  await Promise.all(
    clients.map(async (c, i) => {
      while (now() < stopAt) {
        const t0 = now();
        const h = await c.acquire(name);
        grants.push({ t: now(), client: i, waitingSince: t0 });
        if (h.slot != null) slots.add(h.slot);
        await sleep(HOLD_MS);
        const r0 = now();
        await h.release();
        releases.push({ t: r0, end: now(), client: i });
      }
    }),
  );
  for (const c of clients) await c.close();
  // Handoffs: each release, in order, to the first later grant of a client
  // already waiting when the release began.
  const sortedGrants = [...grants].sort((a, b) => a.t - b.t);
  const used = new Set();
  const handoffs = [];
  for (const r of [...releases].sort((a, b) => a.t - b.t)) {
    const g = sortedGrants.findIndex((g, k) => !used.has(k) && g.t > r.t && g.waitingSince < r.t && g.client !== r.client);
    if (g >= 0) {
      used.add(g);
      handoffs.push(sortedGrants[g].t - r.t);
    }
  }
  // Most permits held at once, from the clients' own grant/release times.
  const edges = [...grants.map((g) => [g.t, 1]), ...releases.map((r) => [r.t, -1])].sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  let held = 0;
  let most = 0;
  for (const [, d] of edges) {
    held += d;
    most = Math.max(most, held);
  }
  return {
    perSec: (grants.length * 1000) / CFG.contendedMs,
    handoffs: handoffs.length,
    p50: quantile(handoffs, 0.5),
    p99: quantile(handoffs, 0.99),
    mostHeld: most,
    slotsSeen: [...slots].sort((a, b) => a - b),
  };
}

const results = { started: new Date().toISOString(), config: CFG, libs: Object.fromEntries(Object.entries(LIBS).map(([id, l]) => [id, { label: l.label, note: l.note, peer: l.peer ?? null, tcp: !!l.tcp, unit: l.unit }])) };
try {
  log("uncontended");
  results.uncontended = await uncontended();
  results.contended = {};
  for (const id of Object.keys(LIBS)) {
    log(`contended: ${id}`);
    results.contended[id] = await contended(id);
  }
} finally {
  await env.stop();
}
results.ratios = {};
for (const [id, l] of Object.entries(LIBS)) {
  if (!l.peer) continue;
  const u = results.uncontended;
  const c = results.contended;
  results.ratios[id] = {
    peer: l.peer,
    uncontendedOps: u[id].opsPerSec / u[l.peer].opsPerSec,
    handoffP50: c[id].p50 / c[l.peer].p50,
    handoffP99: c[id].p99 / c[l.peer].p99,
    contendedRate: c[id].perSec / c[l.peer].perSec,
  };
}
writeFileSync(path.join(repoRoot, "bench", "semaphore-results.json"), JSON.stringify(results, null, 2) + "\n");

// --- the BENCHMARKS.md section ------------------------------------------------
const r0 = (x) => (Number.isFinite(x) ? x.toFixed(0) : "-");
const r1 = (x) => (Number.isFinite(x) ? x.toFixed(1) : "-");
const r2 = (x) => (Number.isFinite(x) ? x.toFixed(2) : "-");
const rows = Object.entries(LIBS).map(([id, l]) => {
  const u = results.uncontended[id];
  const c = results.contended[id];
  return `| ${l.label} | ${r0(u.opsPerSec)} | ${r1(u.requestsPerOp)} ${l.unit} | ${r0(c.perSec)} | ${r1(c.p50)} / ${r1(c.p99)} | ${c.mostHeld} |`;
});
const ratioLines = Object.entries(results.ratios).map(
  ([id, r]) => `- ${LIBS[id].label} vs ${LIBS[r.peer].label}: uncontended ops/s ${r2(r.uncontendedOps)}×${id === TCP_TARGET.id ? ` (target ≥ ${r1(TCP_TARGET.uncontendedOps)}×: ${r.uncontendedOps >= TCP_TARGET.uncontendedOps ? "met" : "not met"})` : ""}, contended acquisitions/s ${r2(r.contendedRate)}×, handoff p50 ${r2(r.handoffP50)}× and p99 ${r2(r.handoffP99)}× (lower is faster).`,
);
const section = [
  "## Semaphores",
  "",
  `From \`bench/semaphore.mjs\` (run by \`scripts/bench.sh\`), ${results.started}. A semaphore of ${LIMIT}; uncontended: one client, acquire + release in a loop (${CFG.rounds} interleaved rounds of ${CFG.sliceMs} ms); contended: ${CLIENTS} clients, each holding a permit ${HOLD_MS} ms, for ${CFG.contendedMs / 1000} s. Handoff: a release call to the first later grant to a client that was already waiting. Requests: from each client's own log: HTTP requests, edgelock's command writes over redis:// TCP (one write may carry pipelined commands), or the Redis commands ioredis sent (not the commands Lua scripts run inside the server). etcd3 has no semaphore: edgelock on etcd has no peer row.`,
  "",
  "| library | uncontended ops/s | requests per acquire+release | contended acquisitions/s | handoff p50 / p99 (ms) | most permits held at once |",
  "|---|---|---|---|---|---|",
  ...rows,
  "",
  ...ratioLines,
  "",
  ...Object.values(LIBS).map((l) => `- ${l.label}: ${l.note}.`),
  "",
].join("\n");
writeSection("Semaphores", section);
log("wrote bench/semaphore-results.json and the Semaphores section of BENCHMARKS.md");
for (const r of rows) log(r);
for (const l of ratioLines) log(l);
