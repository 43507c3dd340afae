// The repository's Worker (build/, src/worker) inside workerd: the handoff
// latency of a Redis lock over redis:// (connect() of cloudflare:sockets,
// src/worker/sockets.rs) next to the same redis-server behind the local
// Upstash REST gateway, from the same Worker (issue 28, item 6).
//
// One workerd through Miniflare (the version tests/worker pins) runs the
// built Worker twice: `tcp` (EDGELOCK_REDIS_URL = redis://…) and `upstash`
// (upstash+http://… to the gateway in front of that same server), default
// settings (push wake-up: one subscriber connection / subscription stream),
// no fenced resource and a job of 0 ms, so that only the lock is measured.
// A sample, rounds interleaved between the two:
//   POST /jobs/J/start (the holder's invocation), then POST /jobs/J/run
//   (the waiter's invocation, blocked in acquire) for 100–200 ms, then
//   POST /jobs/J/finish (resume, the 0 ms job, release);
// the handoff is the waiter's job start − the holder's job end, both read
// from workerd's clock (it advances across I/O, and both stamps are taken
// right after one): the release, the wake-up and the waiter's attempt.
// Prints p50 / p90 of each and the ratio tcp ÷ upstash (target: tcp p50
// ≤ 5 ms); writes bench/workerd-tcp-results.json and, unless BENCH_NO_MD=1,
// the "Worker over redis:// (inside workerd)" section of BENCHMARKS.md.
// BENCH_QUICK=1 shortens it. Needs build/ (scripts/build-worker.sh),
// tests/worker/node_modules (Miniflare) and the devtools' testenv
// (EDGELOCK_TESTENV_BIN, or the built one).

import { existsSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import os from "node:os";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { repoRoot, startTestenv } from "../tests/js/testenv.mjs";
import { quantile, writeSection } from "./section.mjs";

const QUICK = process.env.BENCH_QUICK === "1";
const SAMPLES = QUICK ? 6 : 40;
const WARMUP = 2;
const TARGET_P50_MS = 5;
const TOKEN = "bench-api-token-0123456789abcdef";
const log = (...a) => console.error("[bench:workerd-tcp]", ...a);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const buildDir = path.join(repoRoot, "build");
if (!existsSync(path.join(buildDir, "index.js"))) throw new Error("build/index.js is missing: run bash scripts/build-worker.sh first");
const requireFromWorkerTests = createRequire(path.join(repoRoot, "tests", "worker", "package.json"));
const { Miniflare } = await import(pathToFileURL(requireFromWorkerTests.resolve("miniflare")).href);
const miniflareVersion = requireFromWorkerTests("miniflare/package.json").version;

/** The built Worker once per entry of `workers` ({ name: bindings }). */
async function startWorkers(workers) {
  const mf = new Miniflare({
    cf: false,
    workers: Object.entries(workers).map(([name, bindings]) => ({
      name,
      modules: true,
      scriptPath: path.join(buildDir, "index.js"),
      modulesRoot: buildDir,
      modulesRules: [{ type: "CompiledWasm", include: ["**/*.wasm"] }],
      compatibilityDate: "2026-04-20",
      bindings: { EDGELOCK_API_TOKEN: TOKEN, EDGELOCK_JOB_MS: "0", ...bindings },
    })),
  });
  await mf.ready;
  const fetchers = {};
  for (const name of Object.keys(workers)) fetchers[name] = await mf.getWorker(name);
  const call = async (name, method, urlPath, body) => {
    const init = { method, headers: { authorization: `Bearer ${TOKEN}` } };
    if (body !== undefined) init.body = JSON.stringify(body);
    const res = await fetchers[name].fetch(`http://worker.test${urlPath}`, init);
    const json = await res.json();
    if (res.status !== 200) throw new Error(`${name} ${method} ${urlPath}: ${res.status} ${JSON.stringify(json)}`);
    return json;
  };
  return { call, dispose: () => mf.dispose() };
}

/** One handoff on worker `name`: the waiter's start − the holder's end, in ms. */
async function handoff(w, name, i) {
  const job = `bench-${name}-${i}-${Math.random().toString(36).slice(2, 8)}`;
  const held = await w.call(name, "POST", `/jobs/${job}/start`);
  const waiting = w.call(name, "POST", `/jobs/${job}/run?waitMs=30000`);
  await sleep(100 + Math.random() * 100);
  const done = await w.call(name, "POST", `/jobs/${job}/finish`, held);
  const r = await waiting;
  if (BigInt(r.token) <= BigInt(held.token)) throw new Error(`${name}: the waiter's token did not grow`);
  return r.started - done.finished;
}

const env = await startTestenv({ redis: 1, gateway: true });
const w = await startWorkers({
  tcp: { EDGELOCK_BACKEND: "redis", EDGELOCK_REDIS_URL: `redis://127.0.0.1:${env.redis[0].port}`, EDGELOCK_PREFIX: "bench-tcp" },
  upstash: { EDGELOCK_BACKEND: "redis", EDGELOCK_REDIS_URL: `upstash+${env.gateway_urls[0]}`, EDGELOCK_REDIS_TOKEN: env.token, EDGELOCK_PREFIX: "bench-upstash" },
});
const samples = { tcp: [], upstash: [] };
try {
  for (let i = 0; i < WARMUP + SAMPLES; i++) {
    for (const name of i % 2 ? ["upstash", "tcp"] : ["tcp", "upstash"]) {
      const ms = await handoff(w, name, i);
      if (i >= WARMUP) samples[name].push(ms);
    }
  }
} finally {
  await w.dispose();
  await env.stop();
}

const stats = (xs) => ({ n: xs.length, p50: quantile(xs, 0.5), p90: quantile(xs, 0.9), max: Math.max(...xs) });
const tcp = stats(samples.tcp);
const upstash = stats(samples.upstash);
const ratio = tcp.p50 / upstash.p50;
const results = {
  date: new Date().toISOString(),
  quick: QUICK,
  machine: { cpus: os.cpus().length, shared: process.env.BENCH_SHARED ?? null },
  miniflare: miniflareVersion,
  targetP50Ms: TARGET_P50_MS,
  tcp,
  upstash,
  ratio,
  samples,
};
writeFileSync(path.join(repoRoot, "bench", "workerd-tcp-results.json"), JSON.stringify(results, null, 2) + "\n");
const row = (label, s) => `| ${label} | ${s.p50.toFixed(0)} ms | ${s.p90.toFixed(0)} ms | ${s.max.toFixed(0)} ms | ${s.n} |`;
const verdict = tcp.p50 <= TARGET_P50_MS ? "within" : "ABOVE";
const section = `## Worker over redis:// (inside workerd)

The repository's Worker (\`src/worker\`) in workerd (Miniflare ${miniflareVersion}),
one Redis node reached two ways from the same Worker: \`redis://\` through
\`connect()\` and the local Upstash REST gateway in front of the same server.
Handoff: a waiting invocation's job start − the holder's job end (0 ms jobs,
push wake-up, default settings; workerd's clock, whole ms), \`bench/workerd_tcp.mjs\`.

| Redis reached by | handoff p50 | p90 | max | samples |
|---|---|---|---|---|
${row("redis:// (connect())", tcp)}
${row("Upstash REST gateway", upstash)}

redis:// ÷ Upstash gateway, p50: **${ratio.toFixed(2)}x**; p50 ${tcp.p50.toFixed(0)} ms is ${verdict} the ${TARGET_P50_MS} ms target.
`;
if (process.env.BENCH_NO_MD !== "1") writeSection("Worker over redis:// (inside workerd)", section);
console.log(section);
