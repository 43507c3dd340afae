// Read-write locks: edgelock's shared holds (`acquire(name, { mode: "shared" })`)
// on etcd and one Redis node, on backends started here by the devtools
// `testenv`. None of the peer libraries of the lock benchmark has a
// read-write lock over these backends (etcd3, redlock, redis-semaphore,
// @upstash/lock), so the baseline is the same backend's exclusive lock,
// measured in the same run.
//
// Measured per backend:
// - uncontended: one client, shared acquire + release in a loop next to
//   exclusive acquire + release (interleaved rounds): ops/s and requests;
// - mixed: 12 clients on one name, 9 readers and 3 writers, each holding
//   HOLD_MS: reads/s, writes/s, the most readers holding at once, writers'
//   acquire latency p50/p99, and a check from the clients' own grant/release
//   times that no writer ever held beside anyone (must be 0).
//
// Run by `bash scripts/bench.sh`; writes bench/rwlock-results.json and the
// "Read-write locks" section of BENCHMARKS.md.
// BENCH_QUICK=1 shortens every phase (for checking the harness, not for numbers).

import { performance } from "node:perf_hooks";
import { writeFileSync } from "node:fs";
import path from "node:path";
import { startTestenv, repoRoot } from "../tests/js/testenv.mjs";
import { EtcdLocks, RedisLocks } from "../pkg/index.node.mjs";
import { countingFetch } from "./reqlog.mjs";
import { quantile, writeSection } from "./section.mjs";

const QUICK = process.env.BENCH_QUICK === "1";
const READERS = 9;
const WRITERS = 3;
const HOLD_MS = 20;
const CFG = { readers: READERS, writers: WRITERS, holdMs: HOLD_MS, rounds: QUICK ? 2 : 5, sliceMs: QUICK ? 150 : 400, mixedMs: QUICK ? 1000 : 5000 };
const now = () => performance.now();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const log = (...a) => console.error("[bench:rwlock]", ...a);

log("starting testenv (etcd 1, redis 1, Upstash gateway)");
const env = await startTestenv({ etcd: 1, redis: 1, gateway: true });

const BACKENDS = {
  etcd: { label: "edgelock EtcdLocks", build: (fetch) => new EtcdLocks({ endpoints: env.etcd_urls, fetch }) },
  redis: { label: "edgelock RedisLocks (upstash)", build: (fetch) => new RedisLocks({ url: env.gateway_urls[0], protocol: "upstash", token: env.token, fetch }) },
};

function client(id) {
  const reqs = [];
  return { reqs, locks: BACKENDS[id].build(countingFetch(reqs)) };
}

async function uncontended(id) {
  const c = client(id);
  const tally = { shared: { ops: 0, ms: 0, reqs: 0 }, exclusive: { ops: 0, ms: 0, reqs: 0 } };
  const opts = { shared: { mode: "shared" }, exclusive: {} };
  for (const mode of Object.keys(opts)) await (await c.locks.acquire(`rw-u-${id}`, opts[mode])).release();
  for (let round = 0; round < CFG.rounds; round++) {
    for (const mode of Object.keys(opts)) {
      const reqs0 = c.reqs.length;
      const t0 = now();
      let ops = 0;
      while (now() - t0 < CFG.sliceMs) {
        await (await c.locks.acquire(`rw-u-${id}`, opts[mode])).release();
        ops += 1;
      }
      tally[mode].ms += now() - t0;
      tally[mode].ops += ops;
      tally[mode].reqs += c.reqs.length - reqs0;
    }
  }
  await c.locks.close();
  return Object.fromEntries(Object.entries(tally).map(([m, t]) => [m, { opsPerSec: (t.ops * 1000) / t.ms, requestsPerOp: t.reqs / t.ops }]));
}

async function mixed(id) {
  const name = `rw-m-${id}`;
  const roles = [...Array(READERS).fill("shared"), ...Array(WRITERS).fill("exclusive")];
  const clients = roles.map(() => client(id));
  const holds = []; // { mode, from, to }
  const writerWaits = [];
  const stopAt = now() + CFG.mixedMs;
  await Promise.all(
    clients.map(async (c, i) => {
      const mode = roles[i];
      while (now() < stopAt) {
        const t0 = now();
        const lock = await c.locks.acquire(name, mode === "shared" ? { mode, waitMs: 60_000 } : { waitMs: 60_000 });
        const from = now();
        if (mode === "exclusive") writerWaits.push(from - t0);
        await sleep(HOLD_MS);
        const to = now();
        await lock.release();
        holds.push({ mode, from, to });
      }
    }),
  );
  for (const c of clients) await c.locks.close();
  // From the clients' own times (grant returned .. release called): a
  // writer's hold must not intersect any other hold.
  let writerOverlaps = 0;
  for (const w of holds.filter((h) => h.mode === "exclusive")) {
    writerOverlaps += holds.filter((h) => h !== w && h.from < w.to && w.from < h.to).length;
  }
  const edges = holds.filter((h) => h.mode === "shared").flatMap((h) => [[h.from, 1], [h.to, -1]]).sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  let cur = 0;
  let mostReaders = 0;
  for (const [, d] of edges) {
    cur += d;
    mostReaders = Math.max(mostReaders, cur);
  }
  const count = (m) => holds.filter((h) => h.mode === m).length;
  return {
    readsPerSec: (count("shared") * 1000) / CFG.mixedMs,
    writesPerSec: (count("exclusive") * 1000) / CFG.mixedMs,
    mostReaders,
    writerWaitP50: quantile(writerWaits, 0.5),
    writerWaitP99: quantile(writerWaits, 0.99),
    writerOverlaps,
  };
}

const results = { started: new Date().toISOString(), config: CFG, uncontended: {}, mixed: {} };
try {
  for (const id of Object.keys(BACKENDS)) {
    log(`uncontended: ${id}`);
    results.uncontended[id] = await uncontended(id);
    log(`mixed: ${id}`);
    results.mixed[id] = await mixed(id);
  }
} finally {
  await env.stop();
}
writeFileSync(path.join(repoRoot, "bench", "rwlock-results.json"), JSON.stringify(results, null, 2) + "\n");

const r0 = (x) => (Number.isFinite(x) ? x.toFixed(0) : "-");
const r1 = (x) => (Number.isFinite(x) ? x.toFixed(1) : "-");
const r2 = (x) => (Number.isFinite(x) ? x.toFixed(2) : "-");
const rows = Object.entries(BACKENDS).map(([id, b]) => {
  const u = results.uncontended[id];
  const m = results.mixed[id];
  return `| ${b.label} | ${r0(u.shared.opsPerSec)} (${r2(u.shared.opsPerSec / u.exclusive.opsPerSec)}× its exclusive lock's ${r0(u.exclusive.opsPerSec)}) | ${r1(u.shared.requestsPerOp)} / ${r1(u.exclusive.requestsPerOp)} | ${r0(m.readsPerSec)} / ${r0(m.writesPerSec)} | ${m.mostReaders} | ${r1(m.writerWaitP50)} / ${r1(m.writerWaitP99)} | ${m.writerOverlaps} |`;
});
const section = [
  "## Read-write locks",
  "",
  `From \`bench/rwlock.mjs\` (run by \`scripts/bench.sh\`), ${results.started}. No peer library of this benchmark has a read-write lock over etcd or Redis, so the baseline is the same backend's exclusive lock in the same run. Uncontended: one client, ${CFG.rounds} interleaved rounds of ${CFG.sliceMs} ms per mode. Mixed: ${READERS} readers and ${WRITERS} writers on one name, each holding ${HOLD_MS} ms, for ${CFG.mixedMs / 1000} s; the last column counts holds that intersected a writer's, from the clients' own grant and release times (must be 0).`,
  "",
  "| backend | uncontended shared acquire+release ops/s | HTTP requests per shared / exclusive acquire+release | mixed: reads/s / writes/s | most readers at once | writer acquire p50 / p99 (ms) | holds beside a writer |",
  "|---|---|---|---|---|---|---|",
  ...rows,
  "",
].join("\n");
writeSection("Read-write locks", section);
log("wrote bench/rwlock-results.json and the Read-write locks section of BENCHMARKS.md");
for (const r of rows) log(r);
