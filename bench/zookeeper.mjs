// ZooKeeper: edgelock's native client (Curator's mutex recipe, node for
// node) next to Curator 5.4's own InterProcessMutex, uncontended
// acquire + release on one local ZooKeeper 3.8 (Debian's, tickTime 200),
// in the same run. The native driver (`bench_native zookeeper`, from
// examples/bench_native.rs) starts the server and the Curator JVM (the
// devtools' `CuratorPeer`, its loop timed inside the JVM after a warm-up)
// and interleaves them: per round, the native client for `sliceMs`, then
// Curator for as many cycles. The ratio is printed, never asserted (a
// figure of this machine and this run). The npm client has no ZooKeeper
// class yet: no Node row.
//
// Run by `bash scripts/bench.sh` (BENCH_NATIVE_BIN set); writes
// bench/zookeeper-results.json and the "ZooKeeper" section of BENCHMARKS.md.
// BENCH_QUICK=1 shortens it (for checking the harness, not for numbers).

import { execFileSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import path from "node:path";
import { repoRoot } from "../tests/js/testenv.mjs";
import { writeSection } from "./section.mjs";

const QUICK = process.env.BENCH_QUICK === "1";
const CFG = { sliceMs: QUICK ? 150 : 400, rounds: QUICK ? 2 : 8 };
const log = (...a) => console.error("[bench:zookeeper]", ...a);

const bin = process.env.BENCH_NATIVE_BIN;
if (!bin) {
  log("BENCH_NATIVE_BIN not set: skipped");
  process.exit(0);
}
log(`native client vs Curator InterProcessMutex (${CFG.rounds} rounds of ${CFG.sliceMs} ms)`);
const out = execFileSync(bin, ["zookeeper", JSON.stringify(CFG)], { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"], timeout: 600_000 });
const result = { started: new Date().toISOString(), config: CFG, ...JSON.parse(out.trim().split("\n").pop()) };
writeFileSync(path.join(repoRoot, "bench", "zookeeper-results.json"), JSON.stringify(result, null, 2) + "\n");

const r0 = (x) => (Number.isFinite(x) ? x.toFixed(0) : "-");
const r1 = (x) => (Number.isFinite(x) ? x.toFixed(1) : "-");
const r2 = (x) => (Number.isFinite(x) ? x.toFixed(2) : "-");
const n = result.native;
const c = result.curator;
const rows = [
  `| edgelock native client (Curator's mutex recipe, node for node) | ${r0(n.opsPerSec)} | ${r2(n.p50)} / ${r2(n.p99)} | ${r1(n.writesPerOp)} | ${r2(result.ratio)}× |`,
  `| Curator 5.4 InterProcessMutex (JVM, timed inside) | ${r0(c.opsPerSec)} | mean ${r2(c.meanMs)} | - | 1× |`,
];
const section = [
  "## ZooKeeper",
  "",
  `From \`bench/zookeeper.mjs\` (run by \`scripts/bench.sh\`), ${result.started}: uncontended acquire + release on one local ZooKeeper 3.8 (Debian's, tickTime 200), ${CFG.rounds} interleaved rounds (the native client for ${CFG.sliceMs} ms, then Curator for as many cycles, ${c.ops} in all, after a 500-cycle JIT warm-up). Writes per op count the native client's stream writes (create2 and getChildren are pipelined as two writes, one round trip; release is one delete; a ping now and then). The ratio is native ops/s ÷ Curator ops/s in this run, printed and never asserted. No Node row: the npm package has no ZooKeeper class yet.`,
  "",
  "| client | acquire+release ops/s | latency p50 / p99 (ms) | writes per op | vs Curator |",
  "|---|---|---|---|---|",
  ...rows,
  "",
].join("\n");
writeSection("ZooKeeper", section);
log("wrote bench/zookeeper-results.json and the ZooKeeper section of BENCHMARKS.md");
for (const r of rows) log(r);
log(`ratio native / Curator: ${r2(result.ratio)} (not asserted)`);
