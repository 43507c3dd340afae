// Which JavaScript runtime runs the tests (scripts/test-js.sh runs the
// package's behavioural tests under Node, Deno and Bun), and what differs
// between them for the tests themselves.
import { spawn } from "node:child_process";
import { rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

export const runtime = typeof globalThis.Deno === "object" ? "deno" : typeof globalThis.Bun === "object" ? "bun" : "node";

const testsDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
let seq = 0;

/**
 * Runs `code` (an ES module that imports "edgelock") in a new process of the
 * same runtime, from a file in tests/js so that "edgelock" resolves to the
 * installed package. Resolves with its trimmed stdout; rejects if it fails.
 * Deno runs it with network and environment permissions only: loading the
 * package must not need --allow-read.
 */
export function runModule(code, env = {}) {
  seq += 1;
  const file = path.join(testsDir, `.child-${process.pid}-${seq}.mjs`);
  writeFileSync(file, code);
  const args = runtime === "deno" ? ["run", "--no-prompt", "--allow-net", "--allow-env", file] : [file];
  return new Promise((resolve, reject) => {
    const p = spawn(process.execPath, args, {
      cwd: testsDir,
      env: { ...process.env, ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    let err = "";
    p.stdout.on("data", (d) => { out += d; });
    p.stderr.on("data", (d) => { err += d; });
    p.on("error", (e) => { rmSync(file, { force: true }); reject(e); });
    p.on("exit", (code) => {
      rmSync(file, { force: true });
      if (code === 0) resolve(out.trim());
      else reject(new Error(`child ${runtime} failed (${code}): ${err}`));
    });
  });
}

/**
 * `t.skip(why)` unless EDGELOCK_JS_NO_SKIP is set (scripts/test-js.sh sets it
 * for Deno and Bun, which must run everything): then the test fails instead.
 * Deno's node:test also reports a `t.skip()` as a pass, so there a skip would
 * otherwise go unnoticed.
 */
export function skipUnlessRequired(t, why) {
  if (process.env.EDGELOCK_JS_NO_SKIP) throw new Error(`would skip under EDGELOCK_JS_NO_SKIP: ${why}`);
  return t.skip(why);
}
