// Leader election: edgelock's campaign/observe next to etcd3's Election
// (campaign/observe; the etcd peer a Node user would otherwise pick), in the
// same run, on backends started here by the devtools `testenv`; edgelock on
// one Redis node and on Redlock as extra rows (no peer offers an election
// over Redis HTTP).
//
// Measured per library, ROUNDS times on a fresh election each:
// - failover: leader A leads, candidate B waits in its campaign, observer O
//   watches; A resigns at t0. "to next leader" is t0 → B's campaign
//   resolving; "to observer" is t0 → O reporting B. Both are pushed (etcd
//   watches; Redis wake-up channel), never polled, in both libraries.
// - requests per uncontended campaign + resign: etcd gRPC calls (the
//   server's grpc_server_started_total; the JSON gateway's calls are gRPC
//   calls too), or HTTP requests for the Redis rows.
//
// Run by `bash scripts/bench.sh`; writes bench/election-results.json and the
// "Leader election" section of BENCHMARKS.md. BENCH_QUICK=1 shortens it.

import { performance } from "node:perf_hooks";
import { writeFileSync } from "node:fs";
import path from "node:path";
import { startTestenv, repoRoot } from "../tests/js/testenv.mjs";
import { EtcdLocks, RedisLocks, Redlock as EdgeRedlock } from "../pkg/index.node.mjs";
import { Etcd3 } from "etcd3";
import { countingFetch } from "./reqlog.mjs";
import { quantile, writeSection } from "./section.mjs";

const QUICK = process.env.BENCH_QUICK === "1";
const ROUNDS = QUICK ? 3 : 30;
const CYCLES = QUICK ? 3 : 20;
const now = () => performance.now();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const log = (...a) => console.error("[bench:election]", ...a);

log("starting testenv (etcd 1, redis 3, Upstash gateway)");
const env = await startTestenv({ etcd: 1, redis: 3, gateway: true });
const gw = env.gateway_urls;
const token = env.token;

async function etcdCalls() {
  const text = await (await fetch(`${env.etcd_urls[0]}/metrics`)).text();
  let total = 0;
  for (const line of text.split("\n")) {
    if (line.startsWith("grpc_server_started_total{")) total += Number(line.slice(line.lastIndexOf(" ") + 1)) || 0;
  }
  return total;
}

/** An edgelock client as the bench drives it: campaign → { resign }, observe(name, onValue) → stop. */
function edgelock(build, counter) {
  return () => {
    const reqs = [];
    const client = build(countingFetch(reqs));
    return {
      reqs,
      async campaign(name, value) {
        const l = await client.campaign(name, value);
        return { resign: () => l.resign() };
      },
      async observe(name, onValue) {
        const ctl = new AbortController();
        let first;
        const ready = new Promise((r) => { first = r; });
        const done = (async () => {
          for await (const leader of client.observe(name, { signal: ctl.signal })) {
            first();
            onValue(leader?.value ?? null);
          }
        })();
        await ready;
        return async () => { ctl.abort(); await done; };
      },
      close: () => client.close(),
      counter,
    };
  };
}

const libs = {
  "edgelock-etcd": {
    label: "edgelock EtcdLocks", peer: "etcd3",
    make: edgelock((fetch) => new EtcdLocks({ endpoints: env.etcd_urls, fetch }), "etcd"),
  },
  etcd3: {
    label: "etcd3 Election",
    make: () => {
      const client = new Etcd3({ hosts: env.etcd_urls });
      return {
        async campaign(name, value) {
          const c = client.election(name, 10).campaign(value);
          await c.wait();
          return { resign: () => c.resign() };
        },
        async observe(name, onValue) {
          const obs = await client.election(name, 10).observe();
          onValue(obs.leader() ?? null);
          obs.on("change", (v) => onValue(v ?? null));
          return async () => obs.cancel();
        },
        close: async () => client.close(),
        counter: "etcd",
      };
    },
  },
  "edgelock-redis": {
    label: "edgelock RedisLocks (upstash)",
    make: edgelock((fetch) => new RedisLocks({ url: gw[0], protocol: "upstash", token, fetch }), "http"),
  },
  "edgelock-redlock": {
    label: "edgelock Redlock (3 upstash nodes)",
    make: edgelock((fetch) => new EdgeRedlock({ nodes: gw.map((url) => ({ url, protocol: "upstash", token })), fetch }), "http"),
  },
};

/** Resolves when `check()` holds (polled every ms; the events being timed set the flags). */
async function until(check, ms = 30_000) {
  const end = now() + ms;
  while (!check()) {
    if (now() > end) throw new Error("timed out");
    await sleep(1);
  }
}

async function failover(lib) {
  const [a, b, o] = [lib.make(), lib.make(), lib.make()];
  const toLeader = [];
  const toObserver = [];
  try {
    for (let round = 0; round < ROUNDS; round++) {
      const name = `bench-elect-${process.pid}-${round}-${Date.now().toString(36)}`;
      const la = await a.campaign(name, "A");
      let seenB = null;
      const stop = await o.observe(name, (v) => { if (v === "B" && seenB === null) seenB = now(); });
      let electedB = null;
      const lbP = b.campaign(name, "B").then((l) => { electedB = now(); return l; });
      await sleep(150); // B is in line and O is watching
      const t0 = now();
      await la.resign();
      const lb = await lbP;
      await until(() => seenB !== null);
      toLeader.push(electedB - t0);
      toObserver.push(seenB - t0);
      await stop();
      await lb.resign();
    }
  } finally {
    await Promise.allSettled([a.close(), b.close(), o.close()]);
  }
  return { toLeader, toObserver };
}

async function requestsPerCycle(lib) {
  const c = lib.make();
  try {
    const name = `bench-elect-solo-${process.pid}-${Date.now().toString(36)}`;
    await (await c.campaign(name, "warm-up")).resign(); // the session (lease) is set up once per client
    const before = c.counter === "etcd" ? await etcdCalls() : c.reqs.length;
    for (let i = 0; i < CYCLES; i++) await (await c.campaign(name, `v${i}`)).resign();
    const after = c.counter === "etcd" ? await etcdCalls() : c.reqs.length;
    // The metrics fetch itself is not a gRPC call; nothing else runs meanwhile.
    return (after - before) / CYCLES;
  } finally {
    await c.close();
  }
}

const results = { started: new Date().toISOString(), config: { rounds: ROUNDS, cycles: CYCLES }, libs: {} };
try {
  for (const [id, lib] of Object.entries(libs)) {
    log(`${lib.label}: failover x${ROUNDS}`);
    const f = await failover(lib);
    log(`${lib.label}: requests per campaign + resign`);
    const perCycle = await requestsPerCycle(lib);
    results.libs[id] = {
      label: lib.label,
      counter: lib.make().counter,
      toLeader: { p50: quantile(f.toLeader, 0.5), p90: quantile(f.toLeader, 0.9), max: Math.max(...f.toLeader) },
      toObserver: { p50: quantile(f.toObserver, 0.5), p90: quantile(f.toObserver, 0.9), max: Math.max(...f.toObserver) },
      requestsPerCycle: perCycle,
    };
    log(JSON.stringify(results.libs[id]));
  }
} finally {
  await env.stop();
}

const r = results.libs;
const ms = (x) => (Number.isFinite(x) ? x.toFixed(1) : "–");
const ratio = (peer, ours) => (Number.isFinite(peer / ours) ? `${(peer / ours).toFixed(1)}×` : "–");
const rows = Object.entries(r).map(([id, x]) =>
  `| ${x.label} | ${ms(x.toLeader.p50)} | ${ms(x.toLeader.p90)} | ${ms(x.toObserver.p50)} | ${ms(x.toObserver.p90)} | ${x.requestsPerCycle.toFixed(1)} ${x.counter === "etcd" ? "gRPC calls" : "HTTP requests"} |`);
const e = r["edgelock-etcd"];
const p = r.etcd3;
const section = `## Leader election

\`bench/election.mjs\`, ${results.started}: ${ROUNDS} failovers per library, each on a
fresh election. Leader A resigns while candidate B waits in its campaign and an
observer watches; "to next leader" is A's resign call → B's campaign resolving,
"to observer" is the same start → the observer reporting B. Requests: one
uncontended campaign + resign, averaged over ${CYCLES} (etcd: gRPC calls the
server started, the JSON gateway's included; Redis: HTTP requests).

| library | to next leader p50 ms | p90 | to observer p50 ms | p90 | requests per campaign + resign |
|---|---|---|---|---|---|
${rows.join("\n")}

etcd3's Election over edgelock's on the same etcd (higher = edgelock faster):
to next leader p50 ${ratio(p.toLeader.p50, e.toLeader.p50)}, to observer p50 ${ratio(p.toObserver.p50, e.toObserver.p50)}.
`;
writeFileSync(path.join(repoRoot, "bench/election-results.json"), JSON.stringify(results, null, 2) + "\n");
writeSection("Leader election", section);
console.log(section);
