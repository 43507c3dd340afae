// Footprint: wasm size raw/gzip, npm package size, load time in fresh Node
// processes (median), and the peers' install sizes (their dependency closure
// in bench/node_modules).
import { execFileSync } from "node:child_process";
import { readFileSync, readdirSync, lstatSync, existsSync } from "node:fs";
import { gzipSync } from "node:zlib";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const benchDir = path.dirname(fileURLToPath(import.meta.url));
const repoRoot = path.resolve(benchDir, "..");
const pkgDir = path.join(repoRoot, "pkg");
const nm = path.join(benchDir, "node_modules");

function dirBytes(dir) {
  let total = 0;
  for (const ent of readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, ent.name);
    if (ent.isDirectory()) total += dirBytes(p);
    else if (ent.isFile()) total += lstatSync(p).size;
  }
  return total;
}

/** Runtime dependency closure of a package installed (flat) in bench/node_modules. */
function closure(name, seen = new Set()) {
  if (seen.has(name)) return seen;
  const dir = path.join(nm, name);
  if (!existsSync(dir)) return seen;
  seen.add(name);
  const pj = JSON.parse(readFileSync(path.join(dir, "package.json"), "utf8"));
  for (const dep of Object.keys({ ...pj.dependencies })) closure(dep, seen);
  return seen;
}

function installSize(names) {
  const all = new Set();
  for (const n of names) closure(n, all);
  let bytes = 0;
  for (const n of all) bytes += dirBytes(path.join(nm, n));
  return { packages: all.size, bytes };
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

/** Median over `runs` fresh `node` processes of the time a snippet takes (ms, measured inside). */
function timeInFreshNode(code, runs) {
  const times = [];
  for (let i = 0; i < runs; i += 1) {
    const out = execFileSync(process.execPath, ["--input-type=module", "-e", code], { cwd: benchDir, encoding: "utf8" });
    times.push(Number(out.trim()));
  }
  return median(times);
}

export async function footprint(runs) {
  const wasm = readFileSync(path.join(pkgDir, "edgelock_wasm_bg.wasm"));
  const packJson = JSON.parse(execFileSync("npm", ["pack", "--dry-run", "--json", "--loglevel=error"], { cwd: pkgDir, encoding: "utf8" }));
  const glue = pathToFileURL(path.join(pkgDir, "edgelock_wasm.js")).href;
  const wasmPath = path.join(pkgDir, "edgelock_wasm_bg.wasm");
  const entry = pathToFileURL(path.join(pkgDir, "index.node.mjs")).href;
  const timed = (body) => `const t = performance.now(); ${body}; console.log(performance.now() - t);`;
  const load = {
    "edgelock (wasm initSync only)": timeInFreshNode(
      `import { readFileSync } from "node:fs"; import { initSync } from ${JSON.stringify(glue)};
       const bytes = readFileSync(${JSON.stringify(wasmPath)}); ${timed("initSync({ module: bytes })")}`, runs),
    "edgelock (import package)": timeInFreshNode(timed(`await import(${JSON.stringify(entry)})`), runs),
    etcd3: timeInFreshNode(timed(`await import("etcd3")`), runs),
    "redlock@5 + ioredis": timeInFreshNode(timed(`await import("redlock"); await import("ioredis")`), runs),
    "@sesamecare-oss/redlock + ioredis": timeInFreshNode(timed(`await import("@sesamecare-oss/redlock"); await import("ioredis")`), runs),
    "redis-semaphore + ioredis": timeInFreshNode(timed(`await import("redis-semaphore"); await import("ioredis")`), runs),
    "@upstash/lock + @upstash/redis": timeInFreshNode(timed(`await import("@upstash/lock"); await import("@upstash/redis")`), runs),
  };
  return {
    wasmRaw: wasm.length,
    wasmGzip: gzipSync(wasm, { level: 9 }).length,
    packageTarball: packJson[0]?.size,
    packageUnpacked: packJson[0]?.unpackedSize,
    loadMsMedian: load,
    runs,
    peerInstall: {
      etcd3: installSize(["etcd3"]),
      "redlock@5 + ioredis": installSize(["redlock", "ioredis"]),
      "@sesamecare-oss/redlock + ioredis": installSize(["@sesamecare-oss/redlock", "ioredis"]),
      "redis-semaphore + ioredis": installSize(["redis-semaphore", "ioredis"]),
      "@upstash/lock + @upstash/redis": installSize(["@upstash/lock", "@upstash/redis"]),
    },
  };
}
