// Runs test files under Deno or Bun (run with Node by scripts/test-js.sh):
//   node support/run-runtime.mjs deno|bun BINARY [--compare COUNTS.json] FILE...
// The files are the same node:test files `node --test` runs: Deno runs them
// with `deno test` (its node:test maps describe/test onto Deno.test steps),
// Bun with `bun test` (which runs node:test's describe/test itself). Each file
// runs in a process of its own, as under `node --test`. Each runner writes a
// JUnit report; a file passes when the runner exits 0 and its report lists
// at least one test, no failure and no skipped test. EDGELOCK_JS_NO_SKIP=1
// turns the tests' own conditional skips into failures (Deno's node:test
// reports `t.skip()` as a pass). --compare takes the tests per file that
// Node ran (support/count-reporter.mjs) and fails a file whose count differs.
import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";

const [kind, bin, ...rest] = process.argv.slice(2);
let compare = null;
const files = [];
for (let i = 0; i < rest.length; i += 1) {
  if (rest[i] === "--compare") compare = rest[(i += 1)];
  else files.push(rest[i]);
}
if (!["deno", "bun"].includes(kind) || !bin || files.length === 0) {
  console.error("usage: run-runtime.mjs deno|bun BINARY [--compare COUNTS.json] FILE...");
  process.exit(2);
}

const unescape = (s) => s.replace(/&lt;/g, "<").replace(/&gt;/g, ">").replace(/&quot;/g, '"').replace(/&apos;/g, "'").replace(/&#39;/g, "'").replace(/&amp;/g, "&");

/** Test cases of a JUnit report: { name, failed, skipped }. */
function testcases(xml) {
  const out = [];
  for (const m of xml.matchAll(/<testcase\b([^>]*?)(?:\/>|>([\s\S]*?)<\/testcase>)/g)) {
    const name = unescape(/\bname="([^"]*)"/.exec(m[1])?.[1] ?? "");
    const body = m[2] ?? "";
    out.push({ name, failed: /<(failure|error)\b/.test(body), skipped: /<skipped\b/.test(body) });
  }
  return out;
}

/** Deno lists a describe() block as a test case and its tests as "block > test" cases: keep the leaves. */
function leaves(cases) {
  return cases.filter((c) => !cases.some((o) => o !== c && o.name.startsWith(`${c.name} > `)));
}

function run(file, report) {
  const args = kind === "deno"
    ? ["test", "-A", "--no-check", "--no-lock", "--no-prompt", "--node-modules-dir=manual", `--junit-path=${report}`, file]
    : ["test", "--timeout", "300000", "--reporter=junit", `--reporter-outfile=${report}`, `./${file}`];
  return new Promise((resolve) => {
    const p = spawn(bin, args, {
      stdio: ["ignore", "inherit", "inherit"],
      env: { ...process.env, EDGELOCK_JS_NO_SKIP: "1", DENO_NO_UPDATE_CHECK: "1", NO_COLOR: "1" },
    });
    p.on("error", (e) => { console.error(`${kind}: ${e.message}`); resolve(-1); });
    p.on("exit", (code, signal) => resolve(code ?? signal));
  });
}

const version = spawnSync(bin, ["--version"], { encoding: "utf8" });
if (version.status !== 0) {
  console.log(`== ${kind}: FAILED ${bin} --version: ${version.error?.message ?? version.stderr}`);
  process.exit(1);
}
console.log(`== ${kind} ${version.stdout.split("\n")[0].replace(/^deno /, "").replace(/ \(.*/, "")} (${bin})`);

const dir = mkdtempSync(path.join(tmpdir(), `edgelock-${kind}-junit-`));
const counts = {};
const problems = [];
let passed = 0;
let failed = 0;
let skipped = 0;
try {
  for (const file of files) {
    const report = path.join(dir, `${path.basename(file)}.xml`);
    const t0 = Date.now();
    const status = await run(file, report);
    const secs = ((Date.now() - t0) / 1000).toFixed(1);
    if (!existsSync(report)) {
      problems.push(`${file}: no JUnit report (exit ${status})`);
      continue;
    }
    let cases = testcases(readFileSync(report, "utf8"));
    if (kind === "deno") cases = leaves(cases);
    const f = cases.filter((c) => c.failed).length;
    const s = cases.filter((c) => c.skipped && !c.failed).length;
    const p = cases.length - f - s;
    counts[file] = cases.length;
    passed += p;
    failed += f;
    skipped += s;
    console.log(`== ${kind} ${file}: ${p} passed, ${f} failed, ${s} skipped (${secs} s, exit ${status})`);
    if (status !== 0) problems.push(`${file}: ${kind} exited ${status}`);
    if (cases.length === 0) problems.push(`${file}: no test ran`);
    if (f > 0) problems.push(`${file}: ${f} failed: ${cases.filter((c) => c.failed).map((c) => c.name).join("; ")}`);
    if (s > 0) problems.push(`${file}: ${s} skipped: ${cases.filter((c) => c.skipped).map((c) => c.name).join("; ")}`);
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
if (compare) {
  if (!existsSync(compare)) {
    problems.push(`no test counts to compare with at ${compare}`);
  } else {
    const other = JSON.parse(readFileSync(compare, "utf8"));
    for (const file of files) {
      if (counts[file] !== undefined && other[file] !== counts[file]) {
        problems.push(`${file}: ${counts[file]} tests under ${kind}, ${other[file] ?? "none"} under Node`);
      }
    }
  }
}
console.log(`== ${kind}: ${passed} tests passed, ${failed} failed, ${skipped} skipped in ${files.length} files`);
for (const p of problems) console.log(`== ${kind}: FAILED ${p}`);
process.exit(problems.length > 0 ? 1 : 0);
