// edgelock vs the peer lock libraries, side by side on backends started here
// by the devtools `testenv` (tests/js/testenv.mjs). Run via `bash scripts/bench.sh`.
// Writes bench/results.json, BENCHMARKS.md (repo root) and bench/handoff.svg.
//
// BENCH_QUICK=1 shortens every phase (for checking the harness, not for numbers).

// Count every fetch (@upstash/redis uses globalThis.fetch; edgelock's Node
// default transport is counted by its wrapper in bench/reqlog.mjs):
// installed before any client library is loaded. Calls made inside a
// `withLog` context (bench/reqlog.mjs) are also logged for that client.
import { requestContext, logFetch, countBetween, httpCount } from "./reqlog.mjs";

const realFetch = globalThis.fetch;
globalThis.fetch = (...args) => {
  httpCount.n += 1;
  const log = requestContext.getStore();
  if (log) logFetch(log, args[0]);
  return realFetch(...args);
};

const { performance } = await import("node:perf_hooks");
const { setMaxListeners } = await import("node:events");
const { writeFileSync } = await import("node:fs");
const path = await import("node:path");
const { startTestenv, repoRoot } = await import("../tests/js/testenv.mjs");
const { libraries } = await import("./libs.mjs");
const { RedisLocks } = await import("../pkg/index.node.mjs");
const IORedis = (await import("ioredis")).default;
const { footprint } = await import("./footprint.mjs");
const { writeReport, UNIT } = await import("./report.mjs");

const QUICK = process.env.BENCH_QUICK === "1";
const CFG = {
  uncontendedRounds: QUICK ? 2 : 6,
  uncontendedSliceMs: QUICK ? 150 : 400,
  handoffs: QUICK ? 3 : 32,
  contendedClients: 16,
  contendedMs: QUICK ? 1000 : 5000,
  instantiateRuns: QUICK ? 3 : 20,
};
const now = () => performance.now();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const log = (...a) => console.error("[bench]", ...a);
const quantile = (xs, q) => {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil(q * s.length) - 1))];
};
const t0All = now();

log("starting testenv (etcd 1, redis 3, webdis, Upstash gateway)");
const env = await startTestenv({ etcd: 1, redis: 3, webdis: true, gateway: true });
const libs = libraries(env);
log(`webdis ${env.webdis_urls.length}, gateways ${env.gateway_urls.length}`);

// --- is `fair: true` accepted by this build? --------------------------------------
// Constructing the client is enough: unknown options are refused synchronously
// with INVALID_ARGUMENT (the core's options parser denies unknown fields).
const fairProbe = { supported: false, note: "" };
try {
  const c = new RedisLocks({ url: env.gateway_urls[0], protocol: "upstash", token: env.token, fair: true });
  await c.close();
  fairProbe.supported = true;
} catch (e) {
  if (e?.code !== "INVALID_ARGUMENT") throw e;
  fairProbe.note = `the core refused \`fair: true\` (INVALID_ARGUMENT: ${e.message}); fair rows skipped`;
  delete libs["edgelock-redis-fair"];
}
log(fairProbe.supported ? "fair: true accepted" : fairProbe.note);
const admin = env.redis.map((r) => new IORedis({ host: "127.0.0.1", port: r.port }));

// --- request counters -------------------------------------------------------
async function redisCommands() {
  let total = 0;
  for (const c of admin) {
    const info = await c.info("stats");
    const m = /total_commands_processed:(\d+)/.exec(info);
    total += m ? Number(m[1]) : 0;
  }
  // Each INFO is counted by the next one.
  return total - admin.length;
}
async function etcdCalls() {
  const text = await (await realFetch(`${env.etcd_urls[0]}/metrics`)).text();
  let total = 0;
  for (const line of text.split("\n")) {
    if (line.startsWith("grpc_server_started_total{")) total += Number(line.slice(line.lastIndexOf(" ") + 1)) || 0;
  }
  return total;
}
async function readCounter(kind) {
  if (kind === "http") return httpCount.n;
  if (kind === "redis") return redisCommands();
  return etcdCalls();
}

const results = {
  started: new Date().toISOString(),
  config: CFG,
  libs: Object.fromEntries(Object.entries(libs).map(([id, l]) => [id, { label: l.label, group: l.group, note: l.note, counter: l.counter, edgelock: !!l.edgelock, tcp: !!l.tcp, fair: !!l.fair }])),
  uncontended: {},
  handoff: {},
  contended: {},
  fair: fairProbe,
  skipped: {},
  fairQueueMax: {},
};
if (!fairProbe.supported) results.skipped["edgelock-redis-fair"] = fairProbe.note;

// Longest fair queue seen on the first redis-server while `fn` runs (polled
// every 100 ms): shows whether `fair: true` actually engaged a queue.
async function watchQueue(name, fn) {
  const key = `{edgelock:${name}}:queue`;
  let max = 0;
  let running = true;
  const poller = (async () => {
    while (running) {
      try {
        max = Math.max(max, await admin[0].llen(key));
      } catch { /* not a list (yet) */ }
      await sleep(100);
    }
  })();
  try {
    return await fn();
  } finally {
    running = false;
    await poller;
    if (results.fairQueueMax) results.fairQueueMax[name] = max;
  }
}

// --- 1. uncontended ---------------------------------------------------------
async function uncontended() {
  const ids = Object.keys(libs);
  const state = Object.fromEntries(ids.map((id) => [id, { client: libs[id].make(), lat: [], ms: 0, ops: 0, requests: 0, errors: 0 }]));
  // Warm-up: connections, sessions, JIT.
  for (const id of ids) {
    const s = state[id];
    for (let i = 0; i < 5; i += 1) {
      const release = await s.client.acquire(`unc-${id}`);
      await release();
    }
  }
  for (let round = 0; round < CFG.uncontendedRounds; round += 1) {
    for (const id of ids) {
      const s = state[id];
      const before = await readCounter(libs[id].counter);
      const start = now();
      let ops = 0;
      while (now() - start < CFG.uncontendedSliceMs) {
        const t = now();
        try {
          const release = await s.client.acquire(`unc-${id}`);
          await release();
          s.lat.push(now() - t);
          ops += 1;
        } catch (e) {
          s.errors += 1;
          if (s.errors === 1) log(`${id} uncontended error: ${e?.message ?? e}`);
        }
      }
      s.ms += now() - start;
      s.ops += ops;
      s.requests += (await readCounter(libs[id].counter)) - before;
    }
    log(`uncontended round ${round + 1}/${CFG.uncontendedRounds}`);
  }
  for (const id of ids) {
    const s = state[id];
    await s.client.close().catch(() => {});
    results.uncontended[id] = {
      ops: s.ops, opsPerSec: (s.ops / s.ms) * 1000,
      p50: quantile(s.lat, 0.5), p99: quantile(s.lat, 0.99),
      requestsPerOp: s.ops ? s.requests / s.ops : NaN, errors: s.errors,
    };
  }
}

// --- 2. handoff ---------------------------------------------------------------
// Latency from the holder's release call to the waiter's acquire resolving,
// and the requests the waiter sent (its own log) between the two and over
// its whole wait (subscription streams counted apart).
const HANDOFF_IDS = ["edgelock-etcd", "etcd3", "edgelock-redis", "edgelock-redis-webdis", "edgelock-redis-fair", "edgelock-redis-tcp", "upstash-lock", "redis-semaphore",
  "edgelock-redlock", "edgelock-redlock-webdis", "edgelock-redlock-tcp", "node-redlock", "sesame-redlock"].filter((id) => libs[id]);
const mean = (xs) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : NaN);
async function handoff() {
  const state = Object.fromEntries(HANDOFF_IDS.map((id) => [id, { holder: libs[id].make(), waiter: libs[id].make(), lat: [], after: [], whole: [], streams: [], wake: [], early: 0, errors: 0 }]));
  for (let round = 0; round < CFG.handoffs; round += 1) {
    for (const id of HANDOFF_IDS) {
      const s = state[id];
      const name = `handoff-${id}`;
      const once = async () => {
        const releaseHolder = await s.holder.acquire(name);
        let heldAt = NaN;
        const waitStart = now();
        const waiting = s.waiter.acquire(name).then((release) => {
          heldAt = now();
          return release;
        });
        // The waiter is blocked (polling, watching or subscribed) for a random while before the release.
        await sleep(50 + Math.random() * 100);
        const releasedAt = now();
        if (!Number.isNaN(heldAt)) s.early += 1; // the waiter got in while the holder held: exclusion lost
        await releaseHolder();
        const releaseWaiter = await waiting;
        s.lat.push(heldAt - releasedAt);
        if (s.waiter.log) {
          s.after.push(countBetween(s.waiter.log, releasedAt, heldAt)[0]);
          const first = s.waiter.log.find((e) => e.t >= releasedAt && e.t <= heldAt);
          if (first) s.wake.push(first.t - releasedAt);
          const [all, streams] = countBetween(s.waiter.log, waitStart, heldAt);
          s.whole.push(all);
          s.streams.push(streams);
        }
        await releaseWaiter();
      };
      try {
        await once();
      } catch (e) {
        s.errors += 1;
        if (s.errors === 1) log(`${id} handoff error: ${e?.message ?? e}`);
      }
    }
    if ((round + 1) % 8 === 0) log(`handoff round ${round + 1}/${CFG.handoffs}`);
  }
  for (const id of HANDOFF_IDS) {
    const s = state[id];
    await Promise.allSettled([s.holder.close(), s.waiter.close()]);
    results.handoff[id] = {
      n: s.lat.length, p50: quantile(s.lat, 0.5), p99: quantile(s.lat, 0.99),
      max: Math.max(...s.lat), samples: s.lat.map((x) => Math.round(x * 10) / 10),
      wakeP50: quantile(s.wake, 0.5),
      waiterRequestsAfterRelease: mean(s.after), waiterRequestsAfterReleaseMax: s.after.length ? Math.max(...s.after) : NaN,
      waiterRequestsWholeWait: mean(s.whole), waiterStreamsWholeWait: mean(s.streams), requestUnit: s.waiter.unit,
      exclusionViolations: s.early, errors: s.errors,
    };
  }
}

// --- 3. contended -------------------------------------------------------------
const CONTENDED_IDS = ["edgelock-etcd", "etcd3", "edgelock-redis", "edgelock-redis-fair", "edgelock-redis-tcp", "upstash-lock", "redis-semaphore", "edgelock-redlock", "edgelock-redlock-tcp", "node-redlock", "sesame-redlock"].filter((id) => libs[id]);
async function contendedOne(id) {
  const lib = libs[id];
  const clients = Array.from({ length: CFG.contendedClients }, () => lib.make());
  const name = `contended-${id}`;
  // Warm every client up (sessions, connections) before the clock starts.
  for (const c of clients) {
    const release = await c.acquire(name);
    await release();
  }
  const counts = new Array(clients.length).fill(0);
  const waits = [];
  let inside = 0;
  let overlaps = 0;
  let counter = 0;
  let errors = 0;
  let firstError;
  const stop = new AbortController();
  setMaxListeners(100, stop.signal); // one listener per waiting client
  const start = now();
  const deadline = start + CFG.contendedMs;
  const timer = setTimeout(() => stop.abort(), CFG.contendedMs);
  await Promise.all(clients.map(async (c, i) => {
    while (now() < deadline) {
      const t = now();
      let release;
      try {
        release = await c.acquire(name, { signal: stop.signal });
      } catch (e) {
        if (stop.signal.aborted) break;
        errors += 1;
        firstError ??= e?.message ?? String(e);
        continue;
      }
      const got = now();
      if (got <= deadline) {
        // Critical section: overlap detection plus a read-modify-write across an await.
        inside += 1;
        if (inside > 1) overlaps += 1;
        const v = counter;
        await new Promise((r) => setImmediate(r));
        counter = v + 1;
        inside -= 1;
        counts[i] += 1;
        waits.push(got - t);
      }
      try {
        await release();
      } catch (e) {
        errors += 1;
        firstError ??= e?.message ?? String(e);
      }
    }
  }));
  clearTimeout(timer);
  const elapsed = Math.min(now(), deadline) - start;
  const windowEnd = Math.min(now(), deadline);
  const requests = clients[0].log ? clients.reduce((sum, c) => sum + countBetween(c.log, start, windowEnd)[0], 0) : NaN;
  await Promise.allSettled(clients.map((c) => c.close()));
  const total = counts.reduce((a, b) => a + b, 0);
  if (firstError) log(`${id} contended errors (${errors}): ${firstError}`);
  return {
    acquisitions: total, perSec: (total / elapsed) * 1000,
    slowestShare: total ? Math.min(...counts) / total : NaN,
    fairShare: 1 / clients.length,
    maxWait: waits.length ? Math.max(...waits) : NaN, p50Wait: quantile(waits, 0.5),
    overlaps, lostUpdates: total - counter, errors, firstError,
    requestsPerAcquisition: total ? requests / total : NaN, requestUnit: clients[0].unit,
  };
}

// --- native Rust driver (examples/bench_native.rs), same backends ----------------
const NATIVE_NOTE = "blocking Rust client (`edgelock::native::Client`, std::net HTTP/1.1 keep-alive), release build, defaults as the Node row of the same backend; run right after the Node rows, not interleaved";
// The native TCP rows count what their lock machine hands to the driver: one
// write of one or more pipelined Redis commands (counter "write"), not an HTTP
// request and not the redis-servers' command count.
const NATIVE_TCP_NOTE = "blocking Rust client (`edgelock::native::Client`) over redis:// (std::net TCP, RESP), release build, defaults as the Node row of the same backend; requests counted as command writes (one write may carry pipelined commands), not as the redis-servers' commands; run right after the Node rows, not interleaved";
const NATIVE_LIBS = {
  "native-etcd": { label: "edgelock native Rust (etcd)", group: "etcd", counter: "http", edgelock: true, native: true, node: "edgelock-etcd" },
  "native-redis": { label: "edgelock native Rust (upstash)", group: "redis-http", counter: "http", edgelock: true, native: true, node: "edgelock-redis" },
  "native-redis-webdis": { label: "edgelock native Rust (webdis)", group: "redis-http", counter: "http", edgelock: true, native: true, node: "edgelock-redis-webdis" },
  "native-redis-fair": { label: "edgelock native Rust fair (upstash)", group: "redis-http", counter: "http", edgelock: true, native: true, fair: true, node: "edgelock-redis-fair" },
  "native-redlock": { label: "edgelock native Rust (Redlock 3× upstash)", group: "redlock", counter: "http", edgelock: true, native: true, node: "edgelock-redlock" },
  "native-redlock-webdis": { label: "edgelock native Rust (Redlock 3× webdis)", group: "redlock", counter: "http", edgelock: true, native: true, node: "edgelock-redlock-webdis" },
  "native-redis-tcp": { label: "edgelock native Rust (redis:// TCP)", group: "redis-http", counter: "write", edgelock: true, native: true, tcp: true, node: "edgelock-redis-tcp" },
  "native-redlock-tcp": { label: "edgelock native Rust (Redlock 3× redis:// TCP)", group: "redlock", counter: "write", edgelock: true, native: true, tcp: true, node: "edgelock-redlock-tcp" },
};
async function native() {
  const bin = process.env.BENCH_NATIVE_BIN;
  if (!bin) {
    log("BENCH_NATIVE_BIN not set: no native rows");
    return;
  }
  const { execFile } = await import("node:child_process");
  const config = JSON.stringify({
    sliceMs: CFG.uncontendedSliceMs, rounds: CFG.uncontendedRounds, handoffs: CFG.handoffs,
    etcd: env.etcd_urls[0], gateways: env.gateway_urls, webdis: env.webdis_urls,
    redis: env.redis.map((r) => r.url),
  });
  const stdout = await new Promise((resolve, reject) =>
    execFile(bin, [config], { timeout: 180_000, env: { ...process.env, BENCH_TOKEN: env.token } },
      (err, out, errOut) => (err ? reject(new Error(`${err.message}\n${errOut}`)) : resolve(out))));
  const r = JSON.parse(stdout);
  for (const [id, l] of Object.entries(NATIVE_LIBS)) {
    if (r.skipped?.[id]) {
      results.skipped[id] = `the core refused the options (${r.skipped[id]}); row skipped`;
      continue;
    }
    results.libs[id] = { ...l, note: l.tcp ? NATIVE_TCP_NOTE : NATIVE_NOTE };
    if (r.uncontended[id]) results.uncontended[id] = r.uncontended[id];
    if (r.handoff[id]) results.handoff[id] = { ...r.handoff[id], requestUnit: UNIT[l.counter] };
  }
}

// --- run ----------------------------------------------------------------------
results.phaseSec = {};
const phase = async (name, fn) => {
  const t = now();
  try {
    return await fn();
  } finally {
    results.phaseSec[name] = Math.round((now() - t) / 100) / 10;
  }
};
results.phaseSec.setup = Math.round((now() - t0All) / 100) / 10;
try {
  log("1/4 uncontended");
  await phase("uncontended", uncontended);
  log("2/4 handoff");
  // The fair lock's queue is watched on the first redis-server for the whole phase.
  await phase("handoff", () => (libs["edgelock-redis-fair"] ? watchQueue("handoff-edgelock-redis-fair", handoff) : handoff()));
  log("native Rust driver (uncontended + handoff)");
  try {
    // The native fair lock's queue is watched on the first redis-server for the whole native run.
    await phase("native", () => watchQueue("handoff-native-redis-fair", () => native()));
  } catch (e) {
    log(`native rows failed: ${e.message}`);
    results.nativeError = e.message;
  }
  log("3/4 contended");
  await phase("contended", async () => {
    for (const id of CONTENDED_IDS) {
      results.contended[id] = libs[id].fair ? await watchQueue(`contended-${id}`, () => contendedOne(id)) : await contendedOne(id);
      log(`contended ${id}: ${results.contended[id].perSec.toFixed(1)}/s`);
    }
  });
} finally {
  await Promise.allSettled(admin.map((c) => c.quit()));
  await env.stop();
}
log("4/4 footprint");
results.footprint = await phase("footprint", () => footprint(CFG.instantiateRuns));
results.elapsedSec = (now() - t0All) / 1000;
const out = path.join(repoRoot, "bench", "results.json");
writeFileSync(out, JSON.stringify(results, null, 2));
writeReport(results, repoRoot);
log(`done in ${results.elapsedSec.toFixed(0)} s: BENCHMARKS.md, bench/handoff.svg, bench/results.json`);
process.exit(0);
