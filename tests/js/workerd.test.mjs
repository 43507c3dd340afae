// The package's "workerd" export running in workerd itself (the runtime of
// Cloudflare Workers, from the `workerd` npm package): the .wasm is imported
// as a module, and fetch, setTimeout, performance.now and
// crypto.getRandomValues are workerd's. A Worker acquires a real etcd lock,
// and a Redis waiter in a Worker is woken by push (its subscription stream
// through workerd's fetch), with the workerd export's default cap on
// subscriptions: max(0, 6 − nodes), since an invocation may hold only 6
// connections open. Clients on redis:// nodes reach them through workerd's
// connect() (cloudflare:sockets), the loopback redis-servers included, and
// so do ZooKeeperLocks clients (one connection each: its session).
// The modules are laid out the way wrangler bundles them: the entry resolved
// through the package's export map, the .wasm as a separate Wasm module.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { eventually, freePort, startEtcd } from "./support/etcd.mjs";
import { lockKey, wakeChannel } from "./support/redis.mjs";
import { startTestenv } from "./testenv.mjs";

const require = createRequire(import.meta.url);
let etcd;
let redis;
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
import { EtcdLocks, RedisLocks, Redlock, ZooKeeperLocks, LockError } from "edgelock";

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Subscribers of \`channel\` on each node, asked through its Upstash gateway. */
async function numsub(gateways, token, channel) {
  return Promise.all(gateways.map(async (url) => {
    const r = await fetch(url, { method: "POST", headers: { authorization: "Bearer " + token }, body: JSON.stringify(["PUBSUB", "NUMSUB", channel]) });
    return Number((await r.json()).result[1]);
  }));
}

/**
 * A holder and a waiter (retry delay 5 s: only a push wakes it sooner) on
 * one lock; the subscriptions the servers saw during the wait, how long the
 * handoff took after the release, and whether the streams closed after it.
 */
async function push(cfg) {
  const Client = cfg.backend === "redlock" ? Redlock : RedisLocks;
  const a = new Client(cfg.options);
  const b = new Client({ ...cfg.options, ...cfg.waiter, retryDelayMs: 5000, retryJitterMs: 0 });
  try {
    const lock = await a.acquire(cfg.name);
    const waiting = b.acquire(cfg.name, { waitMs: 20000 });
    // Until the servers see the subscriptions the caller expects (all of
    // them, not just the first), however slowly they come; then 300 ms for
    // the attempt that follows them (and for any stream too many to show).
    const expected = JSON.stringify(cfg.subscriptions);
    const until = Date.now() + 15000;
    let seen = await numsub(cfg.gateways, cfg.token, cfg.channel);
    while (JSON.stringify(seen) !== expected && Date.now() < until) {
      await sleep(25);
      seen = await numsub(cfg.gateways, cfg.token, cfg.channel);
    }
    await sleep(300);
    const during = await numsub(cfg.gateways, cfg.token, cfg.channel);
    const t0 = Date.now();
    await lock.release();
    const next = await waiting;
    const handoff = Date.now() - t0;
    let after = await numsub(cfg.gateways, cfg.token, cfg.channel);
    for (let i = 0; i < 100 && after.some((n) => n > 0); i++) {
      await sleep(25);
      after = await numsub(cfg.gateways, cfg.token, cfg.channel);
    }
    await next.release();
    return { during, after, handoff, first: String(lock.fencingToken), next: String(next.fencingToken) };
  } finally {
    await a.close();
    await b.close();
  }
}

/**
 * Two clients on redis:// nodes, reached with connect() of cloudflare:sockets:
 * the first holds, the second is refused, then waits and is handed the lock.
 */
async function tcp(cfg) {
  const Client = { redlock: Redlock, zookeeper: ZooKeeperLocks }[cfg.backend] ?? RedisLocks;
  const a = new Client(cfg.options);
  // A ZooKeeper waiter is woken by a watch: it has no retry timer to set.
  const b = new Client(cfg.backend === "zookeeper" ? cfg.options : { ...cfg.options, retryDelayMs: 20, retryJitterMs: 5 });
  try {
    const lock = await a.acquire(cfg.name, { waitMs: 5000 });
    const none = await b.tryAcquire(cfg.name);
    const waiting = b.acquire(cfg.name, { waitMs: 5000 });
    await lock.release();
    const next = await waiting;
    await next.release();
    return { first: String(lock.fencingToken), next: String(next.fencingToken), none };
  } finally {
    await a.close();
    await b.close();
  }
}

export default {
  async fetch(req) {
    if (new URL(req.url).pathname === "/tcp") {
      try {
        return Response.json(await tcp(await req.json()));
      } catch (e) {
        return Response.json({ error: String((e && e.stack) || e), code: e && e.code }, { status: 500 });
      }
    }
    if (new URL(req.url).pathname === "/push") {
      try {
        return Response.json(await push(await req.json()));
      } catch (e) {
        return Response.json({ error: String((e && e.stack) || e) }, { status: 500 });
      }
    }
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
  redis = await startTestenv({ redis: 5, webdis: true, gateway: true, zookeeper: true });
  dir = mkdtempSync(join(tmpdir(), "edgelock-workerd-"));
  const pkg = dirname(require.resolve("edgelock/package.json"));
  const manifest = JSON.parse(readFileSync(join(pkg, "package.json"), "utf8"));
  const entry = manifest.exports["."].workerd;
  assert.equal(typeof entry, "string", "no workerd export");
  const modules = [`(name = "worker.mjs", esModule = embed "worker.mjs")`, `(name = "edgelock", esModule = embed "entry.mjs")`];
  copyFileSync(join(pkg, entry), join(dir, "entry.mjs"));
  for (const f of manifest.files.filter((f) => /\.(m?js|wasm)$/.test(f) && !f.startsWith("index."))) {
    mkdirSync(dirname(join(dir, f)), { recursive: true });
    copyFileSync(join(pkg, f), join(dir, f));
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
  await redis?.stop();
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

/** Runs the Worker's push scenario (see WORKER) on `backend` with `options`. */
async function pushInWorker(backend, options, subscriptions, waiter = {}) {
  const name = `push-${backend}-${Math.random().toString(36).slice(2, 8)}`;
  const nodes = backend === "redlock" ? options.nodes.length : 1;
  const cfg = {
    backend, options, waiter, name, subscriptions,
    channel: wakeChannel(lockKey(name)),
    // Node i's gateway and webdis front the same redis-server.
    gateways: redis.gateway_urls.slice(0, nodes), token: redis.token,
  };
  const url = `http://127.0.0.1:${workerd.port}/push`;
  const res = await eventually(async () => {
    if (workerd.proc.exitCode !== null) throw new Error(`workerd exited: ${workerd.stderr}`);
    return await fetch(url, { method: "POST", body: JSON.stringify(cfg) }).catch(() => null);
  }, 20_000, "workerd to listen");
  const body = await res.json();
  assert.equal(res.status, 200, body.error ?? workerd.stderr);
  assert.ok(BigInt(body.next) > BigInt(body.first));
  assert.ok(body.after.every((n) => n === 0), `the streams closed after the acquire: ${body.after}`);
  return body;
}

function needsWorkerd(t) {
  if (workerdBin()) return false;
  assert.ok(!process.env.EDGELOCK_REQUIRE_WORKERD, "EDGELOCK_REQUIRE_WORKERD is set but workerd is not installed");
  t.skip("the workerd npm package is not installed (scripts/test-js.sh installs it)");
  return true;
}

for (const protocol of ["webdis", "upstash"]) {
  test(`a RedisLocks waiter in workerd is woken by push over ${protocol}`, async (t) => {
    if (needsWorkerd(t)) return;
    const node = protocol === "webdis" ? { url: redis.webdis_urls[0], protocol } : { url: redis.gateway_urls[0], token: redis.token };
    const r = await pushInWorker("redis", { ...node, ttlMs: 10000, requestTimeoutMs: 1000 }, [1]);
    assert.deepEqual(r.during, [1], "the server saw the waiter's subscription");
    assert.ok(r.handoff < 1000, `handoff took ${r.handoff} ms with a 5000 ms retry delay`);
  });
}

test("a Redlock waiter on 3 nodes in workerd subscribes on all 3 (default cap 6 − 3) and is woken by push", async (t) => {
  if (needsWorkerd(t)) return;
  const nodes = [{ url: redis.webdis_urls[0], protocol: "webdis" }, { url: redis.gateway_urls[1], token: redis.token },
    { url: redis.webdis_urls[2], protocol: "webdis" }];
  const r = await pushInWorker("redlock", { nodes, ttlMs: 10000, requestTimeoutMs: 1000 }, [1, 1, 1]);
  assert.deepEqual(r.during, [1, 1, 1]);
  assert.ok(r.handoff < 1000, `handoff took ${r.handoff} ms with a 5000 ms retry delay`);
});

test("a Redlock waiter on 5 nodes in workerd subscribes on the first only (default cap 6 − 5), within 6 open connections", async (t) => {
  if (needsWorkerd(t)) return;
  const nodes = redis.webdis_urls.slice(0, 5).map((url) => ({ url, protocol: "webdis" }));
  assert.equal(nodes.length, 5);
  const r = await pushInWorker("redlock", { nodes, ttlMs: 10000, requestTimeoutMs: 1000 }, [1, 0, 0, 0, 0]);
  assert.deepEqual(r.during, [1, 0, 0, 0, 0], "1 stream + a round of 5 attempts = 6 connections");
  // The holder held node 0 as well: its release reached the one subscription.
  assert.ok(r.handoff < 1000, `handoff took ${r.handoff} ms with a 5000 ms retry delay`);
});

test("an explicit maxSubscriptions in workerd is kept (0: the waiter polls)", async (t) => {
  if (needsWorkerd(t)) return;
  const r = await pushInWorker("redis", { url: redis.webdis_urls[0], protocol: "webdis", ttlMs: 10000 }, [0], { maxSubscriptions: 0 });
  assert.deepEqual(r.during, [0]);
});

/** Runs the Worker's TCP scenario (see WORKER) on `backend` with `options`. */
async function tcpInWorker(backend, options) {
  const name = `tcp-${backend}-${Math.random().toString(36).slice(2, 8)}`;
  const url = `http://127.0.0.1:${workerd.port}/tcp`;
  const res = await eventually(async () => {
    if (workerd.proc.exitCode !== null) throw new Error(`workerd exited: ${workerd.stderr}`);
    return await fetch(url, { method: "POST", body: JSON.stringify({ backend, options, name }) }).catch(() => null);
  }, 20_000, "workerd to listen");
  const body = await res.json();
  assert.equal(res.status, 200, `${body.code}: ${body.error ?? ""} ${workerd.stderr}`);
  assert.equal(body.none, null, "the second client was refused while the first held the lock");
  assert.ok(BigInt(body.next) > BigInt(body.first), `${body.next} after ${body.first}`);
}

const tcpNode = (i) => ({ url: `redis://127.0.0.1:${redis.redis[i].port}`, protocol: "resp" });

test("RedisLocks in workerd acquires, hands off and releases over redis:// through connect()", async (t) => {
  if (needsWorkerd(t)) return;
  await tcpInWorker("redis", { ...tcpNode(0), ttlMs: 10000, requestTimeoutMs: 1000 });
});

test("Redlock over 3 redis:// nodes in workerd through connect()", async (t) => {
  if (needsWorkerd(t)) return;
  await tcpInWorker("redlock", { nodes: [0, 1, 2].map(tcpNode), ttlMs: 10000, requestTimeoutMs: 1000 });
});

test("ZooKeeperLocks in workerd acquires, hands off and releases through connect()", async (t) => {
  if (needsWorkerd(t)) return;
  await tcpInWorker("zookeeper", { connect: redis.zookeeper_connect, sessionTimeoutMs: 4000, requestTimeoutMs: 2000 });
});
