// BENCHMARKS.md and bench/handoff.svg from the results of bench/run.mjs.
import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { reading } from "./reading.mjs";
import { targetsSection, TARGET_HANDOFF_MS } from "./targets.mjs";

const f1 = (x) => (Number.isFinite(x) ? x.toFixed(1) : "–");
const f2 = (x) => (Number.isFinite(x) ? x.toFixed(2) : "–");
const f0 = (x) => (Number.isFinite(x) ? Math.round(x).toLocaleString("en-US") : "–");
const pct = (x) => (Number.isFinite(x) ? `${(x * 100).toFixed(1)} %` : "–");
const kb = (b) => (Number.isFinite(b) ? `${(b / 1024).toFixed(0)} KiB` : "–");
const ratio = (a, b) => (Number.isFinite(a) && Number.isFinite(b) && b !== 0 ? `${(a / b).toFixed(2)}×` : "–");

function sh(cmd, args) {
  try {
    return execFileSync(cmd, args, { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }).trim();
  } catch {
    return "?";
  }
}

function versions(root) {
  const bench = JSON.parse(readFileSync(path.join(root, "bench", "package-lock.json"), "utf8"));
  const v = (name) => bench.packages?.[`node_modules/${name}`]?.version ?? "?";
  const edgelock = JSON.parse(readFileSync(path.join(root, "pkg", "package.json"), "utf8")).version;
  return [
    ["edgelock", `${edgelock} (pkg/, commit ${sh("git", ["-C", root, "rev-parse", "--short", "HEAD"])}${sh("git", ["-C", root, "status", "--porcelain"]) ? ", uncommitted changes in the tree" : ""})`],
    ["Node", process.version],
    ["etcd", sh("etcd", ["--version"]).split("\n")[0].replace("etcd Version: ", "")],
    ["redis-server", (/v=(\S+)/.exec(sh("redis-server", ["--version"])) ?? [])[1] ?? "?"],
    ["webdis", sh("dpkg-query", ["-W", "-f=${Version}", "webdis"])],
    ["etcd3", v("etcd3")], ["redlock", v("redlock")], ["@sesamecare-oss/redlock", v("@sesamecare-oss/redlock")], ["ioredis", v("ioredis")],
    ["redis-semaphore", v("redis-semaphore")], ["@upstash/lock", v("@upstash/lock")], ["@upstash/redis", v("@upstash/redis")],
  ];
}

const PEER_OF = { "edgelock-etcd": "etcd3", "edgelock-redis": "upstash-lock", "edgelock-redis-webdis": "upstash-lock", "edgelock-redlock": "node-redlock", "edgelock-redlock-webdis": "node-redlock" };
/** The edgelock row a peer row is compared with. */
const EDGE_FOR = { etcd3: "edgelock-etcd", "upstash-lock": "edgelock-redis", "redis-semaphore": "edgelock-redis", "node-redlock": "edgelock-redlock", "sesame-redlock": "edgelock-redlock", "redis-semaphore-redlock": "edgelock-redlock" };
const reqs = (x, unit, max) => (Number.isFinite(x) ? `${x.toFixed(2)}${Number.isFinite(max) ? ` (max ${max})` : ""} ${unit ?? ""}`.trim() : "–");

function table(head, rows) {
  return [`| ${head.join(" | ")} |`, `| ${head.map(() => "---").join(" | ")} |`, ...rows.map((r) => `| ${r.join(" | ")} |`)].join("\n");
}

const GROUP_TITLE = { etcd: "etcd (one member)", "redis-http": "single Redis node", redlock: "Redlock, 3 Redis nodes" };
/** The unit of requests/op by the row's counter ("write": a native TCP row's command writes, each of one or more pipelined commands). */
export const UNIT = { http: "HTTP req", redis: "Redis cmd", etcd: "etcd gRPC", write: "command write" };

export function handoffSvg(results) {
  const ids = Object.keys(results.handoff);
  const W = 820, rowH = 30, left = 290, right = 30, top = 46;
  const H = top + ids.length * rowH + 44;
  const all = ids.flatMap((id) => results.handoff[id].samples.filter(Number.isFinite));
  const maxV = Math.max(...all, 10);
  const minV = 0.5;
  // Log scale: the push wake-up handoffs (a few ms) and the pollers (tens to hundreds of ms) on one axis.
  const x = (v) => left + (Math.log(Math.max(minV, v) / minV) / Math.log(maxV / minV)) * (W - left - right);
  const esc = (s) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;");
  const sem = results.handoff["redis-semaphore"]?.p50;
  const parts = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" font-family="sans-serif" font-size="12">`,
    `<rect width="${W}" height="${H}" fill="white"/>`,
    `<text x="${W / 2}" y="18" text-anchor="middle" font-size="14">Handoff latency, ms (release call → waiter holds; log scale): dots = samples, bar = p50, tick = p99</text>`,
    `<text x="${W / 2}" y="34" text-anchor="middle" fill="#555">blue: edgelock from Node · green: edgelock native Rust · orange: peers · red line: ${TARGET_HANDOFF_MS} ms target · grey dashed: redis-semaphore p50</text>`,
  ];
  for (const t of [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000].filter((t) => t <= maxV)) {
    parts.push(`<line x1="${x(t)}" y1="${top - 6}" x2="${x(t)}" y2="${H - 30}" stroke="#ddd"/>`,
      `<text x="${x(t)}" y="${H - 14}" text-anchor="middle" fill="#555">${t}</text>`);
  }
  parts.push(`<line x1="${x(TARGET_HANDOFF_MS)}" y1="${top - 6}" x2="${x(TARGET_HANDOFF_MS)}" y2="${H - 30}" stroke="#d62728" stroke-width="1.5"/>`);
  if (Number.isFinite(sem)) parts.push(`<line x1="${x(sem)}" y1="${top - 6}" x2="${x(sem)}" y2="${H - 30}" stroke="#777" stroke-dasharray="4 3"/>`);
  ids.forEach((id, i) => {
    const h = results.handoff[id];
    const y = top + i * rowH;
    const lib = results.libs[id];
    const colour = lib.native ? "#2ca02c" : lib.edgelock ? "#1f77b4" : "#ff7f0e";
    parts.push(`<text x="${left - 8}" y="${y + rowH / 2 + 4}" text-anchor="end">${esc(lib.label)}</text>`,
      `<rect x="${left}" y="${y + 7}" width="${Math.max(1, x(h.p50) - left)}" height="${rowH - 14}" fill="${colour}" opacity="0.35"/>`,
      `<line x1="${x(h.p99)}" y1="${y + 4}" x2="${x(h.p99)}" y2="${y + rowH - 4}" stroke="${colour}" stroke-width="2"/>`);
    for (const s of h.samples) if (Number.isFinite(s)) parts.push(`<circle cx="${x(s).toFixed(1)}" cy="${y + rowH / 2}" r="2.2" fill="${colour}"/>`);
  });
  parts.push("</svg>");
  return parts.join("\n");
}

export function writeReport(results, root) {
  const u = results.uncontended, h = results.handoff, c = results.contended, fp = results.footprint;
  const L = results.libs;
  const out = [];
  out.push("# Benchmarks", "",
    "edgelock next to the libraries a user would pick instead, measured side by side in one run on local",
    "backends started by the devtools `testenv` (one etcd member, three redis-servers, Webdis and one",
    "Upstash-compatible REST gateway per redis-server, all on 127.0.0.1). Generated by `bench/run.mjs`; do not edit by hand.", "",
    "```", "bash scripts/bench.sh", "```", "",
    `Run ${results.started}, ${f0(results.elapsedSec)} s in total${results.phaseSec ? ` (${Object.entries(results.phaseSec).map(([k, v]) => `${k} ${f0(v)} s`).join(", ")}; builds before it not counted)` : ""}. Machine: ${os.cpus().length} CPUs (\`nproc\` ${sh("nproc", [])}), ${os.cpus()[0]?.model ?? "?"}, ${(os.totalmem() / 2 ** 30).toFixed(1)} GiB RAM, ${os.type()} ${os.release()};`,
    "the cores are shared with other jobs, so absolute figures are noisy — the interleaved ratios are the point.", "");
  out.push(table(["component", "version"], versions(root).map(([a, b]) => [a, b])), "");
  out.push("Every library runs in the same Node process, talks to the same servers, and is used with its",
    "defaults except where noted:", "");
  out.push(table(["library", "backend path", "settings"], Object.entries(L).map(([, l]) => [l.label, l.tcp ? (l.edgelock ? "TCP (edgelock's RESP connection)" : "TCP (ioredis)") : l.group === "etcd" ? (l.edgelock ? "HTTP (etcd JSON gateway)" : "gRPC (HTTP/2)") : "HTTP", l.note])), "");
  out.push(...targetsSection(results));

  // 1. uncontended
  out.push("## 1. Uncontended acquire + release", "",
    `One client, one lock, acquire then release in a loop; ${results.config.uncontendedRounds} interleaved rounds of ${results.config.uncontendedSliceMs} ms per library after 5 warm-up operations.`,
    "Requests per op: fetch calls (HTTP clients), commands processed by the redis-servers (TCP clients from Node; `total_commands_processed` summed over nodes, which also counts every command a Lua script runs, not only the commands the client sent), or gRPC calls started by etcd (`grpc_server_started_total`; etcd's JSON gateway turns every HTTP call into one); native Rust rows: the requests its lock machine handed to the driver (HTTP requests; over redis:// TCP, command writes, one write carrying one or more pipelined commands).", "");
  const uRows = [];
  const GROUPS = ["etcd", "redis-http", "redlock"];
  const byGroup = Object.entries(u).sort(([a], [b]) => GROUPS.indexOf(L[a].group) - GROUPS.indexOf(L[b].group));
  for (const [id, r] of byGroup) {
    const peerRef = EDGE_FOR[id];
    const ref = peerRef ? u[peerRef] : undefined;
    uRows.push([GROUP_TITLE[L[id].group], L[id].edgelock ? `**${L[id].label}**` : L[id].label, f0(r.opsPerSec), f2(r.p50), f2(r.p99),
      Number.isFinite(r.requestsPerOp) ? `${f2(r.requestsPerOp)} ${UNIT[L[id].counter]}` : "not counted", ref ? ratio(ref.opsPerSec, r.opsPerSec) : "", String(r.errors)]);
  }
  out.push(table(["backend", "library", "ops/s", "p50 ms", "p99 ms", "requests/op", "edgelock ops/s ÷ this", "errors"], uRows), "");

  // 2. handoff
  out.push("## 2. Handoff latency", "",
    `A holder releases while one waiter (a separate client) has been blocked for 50–150 ms; latency = from the release call to the waiter's acquire resolving. ${results.config.handoffs} handoffs per library, interleaved (the native Rust rows run after the Node rows). "early" counts waiters that got the lock before the release (exclusion lost). Waiter requests: the waiter's own requests between the release call and its grant (mean, max), and over its whole wait; etcd3 (gRPC) is not counted.`, "",
    "![handoff latency per library](bench/handoff.svg)", "");
  out.push(table(["library", "n", "p50 ms", "p99 ms", "max ms", "edgelock p50 ÷ this p50 (< 1: edgelock faster)", "waiter requests, release → grant", "waiter requests, whole wait", "early", "errors"],
    Object.entries(h).map(([id, r]) => [L[id].edgelock ? `**${L[id].label}**` : L[id].label, String(r.n), f1(r.p50), f1(r.p99), f1(r.max),
      EDGE_FOR[id] && h[EDGE_FOR[id]] ? ratio(h[EDGE_FOR[id]].p50, r.p50) : "", reqs(r.waiterRequestsAfterRelease, r.requestUnit, r.waiterRequestsAfterReleaseMax), reqs(r.waiterRequestsWholeWait, r.requestUnit),
      String(r.exclusionViolations), String(r.errors)])), "");

  // 3. contended
  out.push("## 3. Contended throughput, fairness and exclusion", "",
    `${results.config.contendedClients} clients (each its own session / connections) loop on one lock for ${results.config.contendedMs / 1000} s per library; the critical section is a read-modify-write of a shared counter across one \`setImmediate\`. Overlaps = a client entered while another was inside; lost updates = acquisitions − counter. Slowest share: the least-served client's share of all acquisitions (fair = ${pct(1 / results.config.contendedClients)}).`, "");
  out.push(table(["library", "acq/s", "edgelock ÷ this", "slowest client share", "p50 wait ms", "max wait ms", "requests per acquisition", "overlaps", "lost updates", "errors"],
    Object.entries(c).map(([id, r]) => [L[id].edgelock ? `**${L[id].label}**` : L[id].label, f1(r.perSec), EDGE_FOR[id] && c[EDGE_FOR[id]] ? ratio(c[EDGE_FOR[id]].perSec, r.perSec) : "",
      pct(r.slowestShare), f0(r.p50Wait), f0(r.maxWait), reqs(r.requestsPerAcquisition, r.requestUnit), r.overlaps ? `**${r.overlaps}**` : "0", r.lostUpdates ? `**${r.lostUpdates}**` : "0", String(r.errors)])), "");
  const broken = Object.entries(c).filter(([, r]) => r.overlaps || r.lostUpdates).map(([id]) => L[id].label)
    .concat(Object.entries(h).filter(([, r]) => r.exclusionViolations).map(([id]) => `${L[id].label} (handoff)`));
  out.push(broken.length ? `**Mutual exclusion was lost by: ${broken.join(", ")}.**` : "No library lost mutual exclusion in this run (no overlaps, no lost updates, no early handoffs).", "");

  // 4. footprint
  out.push("## 4. Footprint", "",
    table(["edgelock", "size"], [
      ["wasm raw", `${f0(fp.wasmRaw)} B (${kb(fp.wasmRaw)})`],
      ["wasm gzip -9", `${f0(fp.wasmGzip)} B (${kb(fp.wasmGzip)})`],
      ["npm tarball", `${f0(fp.packageTarball)} B (${kb(fp.packageTarball)})`],
      ["npm unpacked (no dependencies)", `${f0(fp.packageUnpacked)} B (${kb(fp.packageUnpacked)})`],
    ]), "",
    `Load time: median over ${fp.runs} fresh \`node\` processes, measured inside the process around the import (or around \`initSync\` alone).`, "",
    table(["module", "median ms"], Object.entries(fp.loadMsMedian).map(([k, v]) => [k, f1(v)])), "",
    "Peers' install size (runtime dependency closure in bench/node_modules):", "",
    table(["peer", "packages", "size on disk", "÷ edgelock unpacked"], Object.entries(fp.peerInstall).map(([k, v]) => [k, String(v.packages), kb(v.bytes), ratio(v.bytes, fp.packageUnpacked)])), "");

  out.push("## Reading", "", ...reading(results), "");
  writeFileSync(path.join(root, "BENCHMARKS.md"), out.join("\n"));
  writeFileSync(path.join(root, "bench", "handoff.svg"), handoffSvg(results));
}
