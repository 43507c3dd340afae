// `npm pack` of pkg/ installed into a fresh directory, then imported the way
// users do: in Node (ESM and require) and in headless Chromium (through the
// package's "browser" export), each acquiring a real etcd lock. Also prints
// the Node and browser instantiate times.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync, createReadStream, statSync } from "node:fs";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { extname, join, normalize, resolve } from "node:path";
import { startEtcd } from "./support/etcd.mjs";

const pkgDir = resolve(import.meta.dirname ?? new URL(".", import.meta.url).pathname, "../../pkg");
let etcd;
let app;

function npm(args, cwd) {
  return execFileSync("npm", [...args, "--no-audit", "--no-fund", "--loglevel=error"], { cwd, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
}

before(async () => {
  etcd = await startEtcd();
  app = mkdtempSync(join(tmpdir(), "edgelock-consumer-"));
  const tarball = npm(["pack", pkgDir, "--pack-destination", app], app).trim().split("\n").pop();
  writeFileSync(join(app, "package.json"), JSON.stringify({ name: "consumer", private: true, type: "module" }));
  npm(["install", "--ignore-scripts", join(app, tarball)], app);
});
after(async () => {
  await etcd?.stop();
  if (app) rmSync(app, { recursive: true, force: true });
});

function node(args, cwd) {
  return execFileSync(process.execPath, args, { cwd, encoding: "utf8", env: { ...process.env, ETCD: etcd.url } }).trim();
}

test("the tarball holds exactly the package files", () => {
  const files = JSON.parse(npm(["pack", pkgDir, "--dry-run", "--json"], app))[0].files.map((f) => f.path).sort();
  assert.deepEqual(files, ["LICENSE", "README.md", "api.mjs", "edgelock_wasm.js", "edgelock_wasm_bg.wasm", "index.browser.mjs",
    "index.d.ts", "index.node.mjs", "index.workerd.mjs", "package.json"]);
  const types = readFileSync(join(app, "node_modules/edgelock/index.d.ts"), "utf8").replace(/\/\/.*$|\/\*[\s\S]*?\*\//gm, "");
  assert.doesNotMatch(types, /\bany\b/, "`any` in the public types");
});

test("Node ESM import in a fresh directory, with instantiate time", (t) => {
  const out = node(["--input-type=module", "-e", `
    const t0 = performance.now();
    const { EtcdLocks } = await import("edgelock");
    const loaded = performance.now() - t0;
    const c = new EtcdLocks({ endpoints: [process.env.ETCD], prefix: "pkg", requestTimeoutMs: 1000 });
    const lock = await c.acquire("fresh-node");
    await lock.release();
    await c.close();
    console.log(JSON.stringify({ loaded, token: String(lock.fencingToken) }));
  `], app);
  const { loaded, token } = JSON.parse(out);
  assert.ok(BigInt(token) > 0n);
  t.diagnostic(`node: import("edgelock") incl. wasm compile+instantiate: ${loaded.toFixed(1)} ms`);
  const wasm = readFileSync(join(app, "node_modules/edgelock/edgelock_wasm_bg.wasm"));
  const t0 = performance.now();
  const mod = new WebAssembly.Module(wasm);
  const compiled = performance.now() - t0;
  t.diagnostic(`node: WebAssembly.Module compile alone: ${compiled.toFixed(1)} ms (${wasm.length} bytes); imports ${WebAssembly.Module.imports(mod).length}`);
});

test("Node require() from CommonJS code in a fresh directory", (t) => {
  const [major, minor] = process.versions.node.split(".").map(Number);
  if (major === 20 && minor < 19) return t.skip("require(esm) needs Node >= 20.19");
  const out = node(["--no-warnings", "-e", `
    const { EtcdLocks, LockError } = require("edgelock");
    try { new EtcdLocks({ endpoints: [] }); } catch (e) { console.log(e instanceof LockError, e.code); }
  `], app);
  assert.equal(out, "true INVALID_ARGUMENT");
});

const MIME = { ".html": "text/html", ".mjs": "text/javascript", ".js": "text/javascript", ".wasm": "application/wasm", ".json": "application/json" };

test("headless Chromium imports the package through its browser export", async (t) => {
  const manifest = JSON.parse(readFileSync(join(app, "node_modules/edgelock/package.json"), "utf8"));
  const entry = manifest.exports["."].browser;
  assert.equal(typeof entry, "string");
  const page = `<!doctype html><script type="importmap">${JSON.stringify({ imports: { edgelock: `/node_modules/edgelock/${entry.replace(/^\.\//, "")}` } })}</script>
<script type="module">
  const report = (r) => fetch("/result", { method: "POST", body: JSON.stringify(r) });
  try {
    const t0 = performance.now();
    const { EtcdLocks, LockError } = await import("edgelock");
    const loaded = performance.now() - t0;
    const a = new EtcdLocks({ endpoints: [${JSON.stringify(etcd.url)}], prefix: "pkg", requestTimeoutMs: 1000 });
    const b = new EtcdLocks({ endpoints: [${JSON.stringify(etcd.url)}], prefix: "pkg", requestTimeoutMs: 1000 });
    const lock = await a.acquire("fresh-browser");
    const other = await b.tryAcquire("fresh-browser");
    const waiting = b.acquire("fresh-browser", { waitMs: 5000 });
    await lock.release();
    const next = await waiting;
    let code = null;
    try { await b.acquire("", {}); } catch (e) { code = e instanceof LockError ? e.code : String(e); }
    await next.release();
    await a.close(); await b.close();
    report({ ok: true, loaded, other, first: String(lock.fencingToken), next: String(next.fencingToken), released: lock.signal.aborted, code });
  } catch (e) { report({ ok: false, error: String(e && e.stack || e) }); }
</script>`;
  let resolveResult;
  const result = new Promise((r) => { resolveResult = r; });
  const server = createServer((req, res) => {
    if (req.method === "POST" && req.url === "/result") {
      let body = "";
      req.on("data", (d) => { body += d; });
      req.on("end", () => { res.end("ok"); resolveResult(JSON.parse(body)); });
      return;
    }
    if (req.url === "/") {
      res.writeHead(200, { "content-type": "text/html" });
      return res.end(page);
    }
    const file = normalize(join(app, decodeURIComponent(req.url.split("?")[0])));
    if (!file.startsWith(app) || !statSync(file, { throwIfNoEntry: false })?.isFile()) {
      res.writeHead(404);
      return res.end();
    }
    res.writeHead(200, { "content-type": MIME[extname(file)] ?? "application/octet-stream" });
    createReadStream(file).pipe(res);
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  const profile = mkdtempSync(join(tmpdir(), "edgelock-chromium-"));
  const chromium = spawn(process.env.CHROMIUM_BIN ?? "chromium", ["--headless=new", "--no-sandbox", "--disable-gpu",
    "--disable-dev-shm-usage", "--no-first-run", `--user-data-dir=${profile}`, `http://127.0.0.1:${server.address().port}/`],
  { stdio: "ignore", detached: true });
  try {
    let timer;
    const r = await Promise.race([result, new Promise((_, rej) => {
      timer = setTimeout(() => rej(new Error("no result from Chromium in 60 s")), 60_000);
    })]).finally(() => clearTimeout(timer));
    assert.equal(r.ok, true, r.error);
    assert.equal(r.other, null);
    assert.ok(BigInt(r.next) > BigInt(r.first));
    assert.equal(r.released, true);
    assert.equal(r.code, "INVALID_ARGUMENT");
    t.diagnostic(`chromium: import("edgelock") incl. wasm fetch+compile+instantiate: ${r.loaded.toFixed(1)} ms`);
  } finally {
    try { process.kill(-chromium.pid, "SIGKILL"); } catch { /* already gone */ }
    server.closeAllConnections();
    server.close();
    rmSync(profile, { recursive: true, force: true });
  }
});
