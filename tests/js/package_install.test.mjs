// `npm pack` of pkg/ installed into a fresh directory, then imported the way
// users do: in Node (ESM and require) and in headless Chromium (through the
// package's "browser" export), each acquiring a real etcd lock. Also prints
// the Node and browser instantiate times. In Chromium, a Redis waiter is
// woken by push (its subscription stream, cross-origin, through Webdis and
// the Upstash gateway), and the browser entry's cap of 4 open streams per
// origin keeps a page's waiters from taking all of the browser's 6
// connections to that origin.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync, createReadStream, statSync } from "node:fs";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { extname, join, normalize, resolve } from "node:path";
import { startEtcd } from "./support/etcd.mjs";
import { lockKey, wakeChannel } from "./support/redis.mjs";
import { startTestenv } from "./testenv.mjs";

const pkgDir = resolve(import.meta.dirname ?? new URL(".", import.meta.url).pathname, "../../pkg");
let etcd;
let redis;
let app;

function npm(args, cwd) {
  return execFileSync("npm", [...args, "--no-audit", "--no-fund", "--loglevel=error"], { cwd, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
}

before(async () => {
  etcd = await startEtcd();
  redis = await startTestenv({ redis: 1, webdis: true, gateway: true });
  app = mkdtempSync(join(tmpdir(), "edgelock-consumer-"));
  const tarball = npm(["pack", pkgDir, "--pack-destination", app], app).trim().split("\n").pop();
  writeFileSync(join(app, "package.json"), JSON.stringify({ name: "consumer", private: true, type: "module" }));
  npm(["install", "--ignore-scripts", join(app, tarball)], app);
});
after(async () => {
  await etcd?.stop();
  await redis?.stop();
  if (app) rmSync(app, { recursive: true, force: true });
});

function node(args, cwd) {
  return execFileSync(process.execPath, args, { cwd, encoding: "utf8", env: { ...process.env, ETCD: etcd.url } }).trim();
}

test("the tarball holds exactly the package files", () => {
  const files = JSON.parse(npm(["pack", pkgDir, "--dry-run", "--json"], app))[0].files.map((f) => f.path).sort();
  assert.deepEqual(files, ["LICENSE", "README.md", "api.mjs", "edgelock_wasm.js", "edgelock_wasm_bg.wasm", "index.browser.mjs",
    "index.d.ts", "index.deno.mjs", "index.node.mjs", "index.workerd.mjs", "node_http.mjs", "package.json",
    "sockets/deno.mjs", "sockets/node.mjs", "sockets/workerd.mjs"]);
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
  const r = await inChromium(page);
  assert.equal(r.ok, true, r.error);
  assert.equal(r.other, null);
  assert.ok(BigInt(r.next) > BigInt(r.first));
  assert.equal(r.released, true);
  assert.equal(r.code, "INVALID_ARGUMENT");
  t.diagnostic(`chromium: import("edgelock") incl. wasm fetch+compile+instantiate: ${r.loaded.toFixed(1)} ms`);
});

/** Serves `page` at / (and the fresh install's files) to headless Chromium; resolves with what the page POSTs to /result. */
async function inChromium(page, timeoutMs = 60_000) {
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
    return await Promise.race([result, new Promise((_, rej) => {
      timer = setTimeout(() => rej(new Error(`no result from Chromium in ${timeoutMs / 1000} s`)), timeoutMs);
    })]).finally(() => clearTimeout(timer));
  } finally {
    try { process.kill(-chromium.pid, "SIGKILL"); } catch { /* already gone */ }
    server.closeAllConnections();
    server.close();
    rmSync(profile, { recursive: true, force: true });
  }
}

/** A page importing the package through its browser export and running `body` (which ends with `report(...)`). */
function browserPage(entry, body) {
  return `<!doctype html><script type="importmap">${JSON.stringify({ imports: { edgelock: `/node_modules/edgelock/${entry.replace(/^\.\//, "")}` } })}</script>
<script type="module">
  const report = (r) => fetch("/result", { method: "POST", body: JSON.stringify(r) });
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  try {
    ${body}
  } catch (e) { report({ ok: false, error: String(e && e.stack || e) }); }
</script>`;
}

test("headless Chromium: a Redis waiter is woken by push through Webdis and the Upstash gateway", async () => {
  const manifest = JSON.parse(readFileSync(join(app, "node_modules/edgelock/package.json"), "utf8"));
  const names = { webdis: `br-push-webdis-${process.pid}`, upstash: `br-push-upstash-${process.pid}` };
  const cfg = {
    gateway: redis.gateway_urls[0], token: redis.token,
    nodes: { webdis: { url: redis.webdis_urls[0], protocol: "webdis" }, upstash: { url: redis.gateway_urls[0], token: redis.token } },
    names, channels: { webdis: wakeChannel(lockKey(names.webdis)), upstash: wakeChannel(lockKey(names.upstash)) },
  };
  const r = await inChromium(browserPage(manifest.exports["."].browser, `
    const cfg = ${JSON.stringify(cfg)};
    const { RedisLocks } = await import("edgelock");
    // PUBSUB NUMSUB through the gateway (cross-origin, with a preflight for Authorization).
    const numsub = async (channel) => {
      const res = await fetch(cfg.gateway, { method: "POST", headers: { authorization: "Bearer " + cfg.token },
        body: JSON.stringify(["PUBSUB", "NUMSUB", channel]) });
      return Number((await res.json()).result[1]);
    };
    const until = async (channel, n) => {
      for (let i = 0; i < 200; i++) { if (await numsub(channel) === n) return true; await sleep(25); }
      return false;
    };
    const out = {};
    for (const proto of ["webdis", "upstash"]) {
      const a = new RedisLocks({ ...cfg.nodes[proto], ttlMs: 10000 });
      const b = new RedisLocks({ ...cfg.nodes[proto], ttlMs: 10000, retryDelayMs: 5000, retryJitterMs: 0 });
      const lock = await a.acquire(cfg.names[proto]);
      const waiting = b.acquire(cfg.names[proto], { waitMs: 20000 });
      const subscribed = await until(cfg.channels[proto], 1);
      await sleep(300);
      const t0 = performance.now();
      await lock.release();
      const next = await waiting;
      const handoff = performance.now() - t0;
      const closed = await until(cfg.channels[proto], 0);
      await next.release();
      await a.close(); await b.close();
      out[proto] = { subscribed, handoff, closed, first: String(lock.fencingToken), next: String(next.fencingToken) };
    }
    report({ ok: true, out });
  `));
  assert.equal(r.ok, true, r.error);
  for (const proto of ["webdis", "upstash"]) {
    const o = r.out[proto];
    assert.equal(o.subscribed, true, `${proto}: the server saw the page's subscription`);
    assert.ok(o.handoff < 1000, `${proto}: handoff took ${o.handoff} ms with a 5000 ms retry delay`);
    assert.equal(o.closed, true, `${proto}: the stream was closed after the acquire`);
    assert.ok(BigInt(o.next) > BigInt(o.first));
  }
});

test("headless Chromium: at most 4 streams per origin; waiters beyond them poll, and all get the lock", async () => {
  const manifest = JSON.parse(readFileSync(join(app, "node_modules/edgelock/package.json"), "utf8"));
  const name = `br-cap-${process.pid}`;
  const cfg = { gateway: redis.gateway_urls[0], token: redis.token, node: { url: redis.webdis_urls[0], protocol: "webdis" },
    name, channel: wakeChannel(lockKey(name)) };
  const r = await inChromium(browserPage(manifest.exports["."].browser, `
    const cfg = ${JSON.stringify(cfg)};
    const { RedisLocks } = await import("edgelock");
    const numsub = async () => {
      const res = await fetch(cfg.gateway, { method: "POST", headers: { authorization: "Bearer " + cfg.token },
        body: JSON.stringify(["PUBSUB", "NUMSUB", cfg.channel]) });
      return Number((await res.json()).result[1]);
    };
    const opts = { ...cfg.node, ttlMs: 10000, requestTimeoutMs: 2000, retryDelayMs: 300, retryJitterMs: 0 };
    const holderClient = new RedisLocks(opts);
    const holder = await holderClient.acquire(cfg.name);
    const clients = Array.from({ length: 6 }, () => new RedisLocks(opts));
    let inside = 0, overlap = false;
    const runs = clients.map(async (c) => {
      const lock = await c.acquire(cfg.name, { waitMs: 30000 });
      inside += 1; if (inside > 1) overlap = true;
      await sleep(20);
      inside -= 1;
      await lock.release();
      return String(lock.fencingToken);
    });
    // Until the cap is reached (however slowly the 6 waiters get going),
    // then 40 samples more in which a 5th stream would show.
    let maxSeen = 0;
    for (let i = 0; i < 1200 && maxSeen < 4; i++) { maxSeen = Math.max(maxSeen, await numsub()); await sleep(25); }
    for (let i = 0; i < 40; i++) { maxSeen = Math.max(maxSeen, await numsub()); await sleep(25); }
    const t0 = performance.now();
    await holder.release();
    const tokens = await Promise.all(runs);
    const elapsed = performance.now() - t0;
    await Promise.all([holderClient, ...clients].map((c) => c.close()));
    let after = await numsub();
    for (let i = 0; i < 100 && after > 0; i++) { await sleep(25); after = await numsub(); }
    report({ ok: true, maxSeen, tokens, overlap, elapsed, after });
  `));
  assert.equal(r.ok, true, r.error);
  assert.equal(r.maxSeen, 4, "4 of the 6 waiters subscribed, the page's cap per origin");
  assert.equal(r.tokens.length, 6);
  assert.equal(r.overlap, false);
  assert.equal(new Set(r.tokens).size, 6);
  assert.ok(r.elapsed < 30_000, `6 handoffs took ${r.elapsed} ms`);
  assert.equal(r.after, 0, "every stream closed");
});
