// The package's "workerd" export running in workerd itself (the runtime of
// Cloudflare Workers, from the `workerd` npm package): the .wasm is imported
// as a module, and fetch, setTimeout, performance.now and
// crypto.getRandomValues are workerd's. A Worker acquires a real etcd lock.
// The modules are laid out the way wrangler bundles them: the entry resolved
// through the package's export map, the .wasm as a separate Wasm module.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { copyFileSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { basename, dirname, join } from "node:path";
import { eventually, freePort, startEtcd } from "./support/etcd.mjs";

const require = createRequire(import.meta.url);
let etcd;
let dir;
let workerd;

/** The native binary (the package's `bin/workerd` is a Node wrapper that would outlive a SIGTERM'd parent). */
function workerdBin() {
  try {
    const bin = require("workerd").default;
    return typeof bin === "string" && existsSync(bin) ? bin : null;
  } catch {
    return null;
  }
}

const WORKER = `
import { EtcdLocks, LockError } from "edgelock";
export default {
  async fetch(req) {
    const etcd = new URL(req.url).searchParams.get("etcd");
    const opts = { endpoints: [etcd], prefix: "workerd", requestTimeoutMs: 1000 };
    const a = new EtcdLocks(opts);
    const b = new EtcdLocks(opts);
    try {
      const lock = await a.acquire("w", { waitMs: 5000 });
      const none = await b.tryAcquire("w");
      const waiting = b.acquire("w", { waitMs: 5000 });
      await lock.release();
      const next = await waiting;
      await next.release();
      let code = null;
      try { await a.acquire(""); } catch (e) { code = e instanceof LockError ? e.code : String(e); }
      return Response.json({ first: String(lock.fencingToken), next: String(next.fencingToken), none, released: lock.signal.aborted, code });
    } catch (e) {
      return Response.json({ error: String((e && e.stack) || e) }, { status: 500 });
    } finally {
      await a.close();
      await b.close();
    }
  },
};
`;

before(async () => {
  if (!workerdBin()) return;
  etcd = await startEtcd();
  dir = mkdtempSync(join(tmpdir(), "edgelock-workerd-"));
  const pkg = dirname(require.resolve("edgelock/package.json"));
  const manifest = JSON.parse(readFileSync(join(pkg, "package.json"), "utf8"));
  const entry = manifest.exports["."].workerd;
  assert.equal(typeof entry, "string", "no workerd export");
  const modules = [`(name = "worker.mjs", esModule = embed "worker.mjs")`, `(name = "edgelock", esModule = embed "entry.mjs")`];
  copyFileSync(join(pkg, entry), join(dir, "entry.mjs"));
  for (const f of manifest.files.filter((f) => /\.(m?js|wasm)$/.test(f) && !f.startsWith("index."))) {
    copyFileSync(join(pkg, f), join(dir, basename(f)));
    modules.push(f.endsWith(".wasm") ? `(name = "${f}", wasm = embed "${f}")` : `(name = "${f}", esModule = embed "${f}")`);
  }
  writeFileSync(join(dir, "worker.mjs"), WORKER);
  const port = await freePort();
  writeFileSync(join(dir, "config.capnp"), `using Workerd = import "/workerd/workerd.capnp";
const config :Workerd.Config = (
  services = [
    (name = "main", worker = .mainWorker),
    (name = "internet", network = (allow = ["public", "private", "local"])),
  ],
  sockets = [ (name = "http", address = "127.0.0.1:${port}", http = (), service = "main") ],
);
const mainWorker :Workerd.Worker = (
  modules = [ ${modules.join(",\n    ")} ],
  compatibilityDate = "2025-01-01",
  globalOutbound = "internet",
);
`);
  workerd = { port, proc: spawn(workerdBin(), ["serve", join(dir, "config.capnp")], { stdio: ["ignore", "ignore", "pipe"] }), stderr: "" };
  workerd.proc.stderr.on("data", (d) => { workerd.stderr += d; });
});

after(async () => {
  if (workerd && workerd.proc.exitCode === null) {
    const exited = new Promise((r) => workerd.proc.once("exit", r));
    workerd.proc.kill("SIGTERM");
    await exited;
  }
  await etcd?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

test("a Worker using the workerd export acquires, waits for and releases etcd locks", async (t) => {
  if (!workerdBin()) {
    // scripts/test-js.sh installs workerd and sets this, so there it cannot be skipped.
    assert.ok(!process.env.EDGELOCK_REQUIRE_WORKERD, "EDGELOCK_REQUIRE_WORKERD is set but workerd is not installed");
    return t.skip("the workerd npm package is not installed (scripts/test-js.sh installs it)");
  }
  const url = `http://127.0.0.1:${workerd.port}/?etcd=${encodeURIComponent(etcd.url)}`;
  const res = await eventually(async () => {
    if (workerd.proc.exitCode !== null) throw new Error(`workerd exited: ${workerd.stderr}`);
    return await fetch(url).catch(() => null);
  }, 20_000, "workerd to listen");
  const body = await res.json();
  assert.equal(res.status, 200, body.error ?? workerd.stderr);
  assert.equal(body.none, null);
  assert.ok(BigInt(body.next) > BigInt(body.first));
  assert.equal(body.released, true);
  assert.equal(body.code, "INVALID_ARGUMENT");
});
