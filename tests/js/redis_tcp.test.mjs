// RedisLocks and Redlock over the Redis protocol itself: redis:// nodes
// reached through the runtime's socket factory (node:net under Node and
// Bun, Deno.connect under Deno), against real redis-servers from the
// devtools `testenv` (plain TCP ports, no HTTP front).
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { RedisLocks, Redlock, LockError } from "edgelock";
import { startTestenv } from "./testenv.mjs";
import { freePort } from "./support/etcd.mjs";
import { lockKey } from "./support/redis.mjs";

const PASSWORD = "tcp-s3cret";
let env;
const clients = [];
let seq = 0;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const unique = (base) => `${base}-${process.pid}-${(seq += 1)}`;

/** One command on a raw connection to `port` (not through edgelock); resolves with the reply's first line. */
function rawCommand(port, ...args) {
  return new Promise((resolve, reject) => {
    const c = net.connect({ host: "127.0.0.1", port });
    let reply = "";
    c.on("error", reject);
    c.on("data", (d) => {
      reply += d;
      const nl = reply.indexOf("\r\n");
      if (nl < 0) return;
      c.destroy();
      const line = reply.slice(0, nl);
      if (line.startsWith("-")) reject(new Error(line));
      else resolve(line);
    });
    c.write(`*${args.length}\r\n${args.map((a) => `$${Buffer.byteLength(String(a))}\r\n${a}\r\n`).join("")}`);
  });
}

/** Runs openssl in `dir`; throws with its stderr when it fails. */
function openssl(dir, ...args) {
  const r = spawnSync("openssl", args, { cwd: dir, encoding: "utf8" });
  if (r.status !== 0) throw new Error(`openssl ${args[0]}: ${r.stderr || r.error}`);
}

/** A redis-server with only a TLS port (clients need no certificate), its CA as PEM text. */
async function startTlsRedis() {
  const dir = mkdtempSync(join(tmpdir(), "edgelock-tls-redis-"));
  writeFileSync(join(dir, "san.ext"), "subjectAltName=IP:127.0.0.1,DNS:localhost\n");
  openssl(dir, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=edgelock test CA", "-keyout", "ca.key", "-out", "ca.pem");
  openssl(dir, "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost", "-keyout", "server.key", "-out", "server.csr");
  openssl(dir, "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-days", "2",
    "-extfile", "san.ext", "-out", "server.pem");
  const port = await freePort();
  const proc = spawn("redis-server", ["--port", "0", "--tls-port", String(port), "--tls-cert-file", join(dir, "server.pem"),
    "--tls-key-file", join(dir, "server.key"), "--tls-ca-cert-file", join(dir, "ca.pem"), "--tls-auth-clients", "no",
    "--save", "", "--appendonly", "no", "--dir", dir], { stdio: "ignore" });
  for (let i = 0; i < 200; i += 1) {
    const up = await new Promise((resolve) => {
      const c = net.connect({ host: "127.0.0.1", port }, () => { c.destroy(); resolve(true); });
      c.on("error", () => resolve(false));
    });
    if (up) break;
    await sleep(25);
  }
  return {
    port,
    ca: readFileSync(join(dir, "ca.pem"), "utf8"),
    stop: async () => {
      const exited = new Promise((r) => proc.once("exit", r));
      proc.kill("SIGKILL");
      await exited;
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

// Nodes 0-2: plain; node 3: requirepass (set after start, so testenv stays
// as it is); tlsRedis: a redis-server on a TLS port with a CA made here.
let tlsRedis;
before(async () => {
  env = await startTestenv({ redis: 4 });
  await rawCommand(env.redis[3].port, "CONFIG", "SET", "requirepass", PASSWORD);
  tlsRedis = await startTlsRedis();
});
after(async () => {
  await Promise.allSettled(clients.map((c) => c.close()));
  await env?.stop();
  await tlsRedis?.stop();
});

const track = (c) => {
  clients.push(c);
  return c;
};
const tcpNode = (i) => ({ url: `redis://127.0.0.1:${env.redis[i].port}`, protocol: "resp" });
const client = (extra = {}) => track(new RedisLocks({ ...tcpNode(0), ttlMs: 5000, requestTimeoutMs: 1000, ...extra }));

async function rejectsWith(promise, code) {
  const err = await promise.then(() => null, (e) => e);
  assert.ok(err instanceof LockError, `expected LockError ${code}, got ${err}`);
  assert.equal(err.code, code, err.message);
  return err;
}

describe("RedisLocks over redis:// (TCP)", () => {
  test("acquire, a second client refused, release, handoff with a higher token", async () => {
    const name = unique("tcp");
    const a = client();
    const b = client({ retryDelayMs: 20, retryJitterMs: 5 });
    const lock = await a.acquire(name, { waitMs: 5000 });
    assert.equal(await b.tryAcquire(name), null);
    assert.equal(await rawCommand(env.redis[0].port, "EXISTS", lockKey(name)), ":1");
    const waiting = b.acquire(name, { waitMs: 5000 });
    await sleep(50);
    await lock.release();
    const next = await waiting;
    assert.ok(next.fencingToken > lock.fencingToken, `${next.fencingToken} after ${lock.fencingToken}`);
    await next.release();
    assert.equal(await rawCommand(env.redis[0].port, "EXISTS", lockKey(name)), ":0");
  });

  test("3 contending clients never overlap and see increasing tokens", async () => {
    const name = unique("mx");
    let inside = 0;
    let maxInside = 0;
    const tokens = [];
    await Promise.all(Array.from({ length: 3 }, () => client({ retryDelayMs: 10, retryJitterMs: 5 })).map(async (c) => {
      for (let i = 0; i < 5; i += 1) {
        const lock = await c.acquire(name, { waitMs: 30_000 });
        inside += 1;
        maxInside = Math.max(maxInside, inside);
        tokens.push(lock.fencingToken);
        await sleep(Math.random() * 3);
        inside -= 1;
        await lock.release();
      }
    }));
    assert.equal(maxInside, 1);
    assert.equal(tokens.length, 15);
    for (let i = 1; i < tokens.length; i += 1) assert.ok(tokens[i] > tokens[i - 1], `${tokens[i]} after ${tokens[i - 1]}`);
  });

  test("AUTH with a password; a wrong one is refused without showing it", async () => {
    const port = env.redis[3].port;
    const name = unique("auth");
    const good = track(new RedisLocks({ url: `redis://:${PASSWORD}@127.0.0.1:${port}`, protocol: "resp", requestTimeoutMs: 1000 }));
    const lock = await good.acquire(name, { waitMs: 5000 });
    await lock.release();
    const wrong = track(new RedisLocks({ url: `redis://:not-${PASSWORD}x@127.0.0.1:${port}`, protocol: "resp", requestTimeoutMs: 500, retryDelayMs: 50 }));
    // The server answered and refused us: BACKEND (as an Upstash 401), not
    // retried until the wait runs out (that would be TIMEOUT).
    const err = await rejectsWith(wrong.acquire(name, { waitMs: 1500 }), "BACKEND");
    assert.match(err.message, /refused authentication \(AUTH\)/);
    assert.match(err.message, new RegExp(`127\\.0\\.0\\.1:${port}`));
    assert.ok(!err.message.includes(PASSWORD), err.message);
  });

  test("a refused connection is TRANSPORT", async () => {
    const dead = await freePort();
    const c = track(new RedisLocks({ url: `redis://127.0.0.1:${dead}`, protocol: "resp", requestTimeoutMs: 500 }));
    const err = await rejectsWith(c.tryAcquire(unique("dead")), "TRANSPORT");
    assert.ok(!/undefined|\[object/.test(err.message), err.message);
  });
});

describe("openSocket option", () => {
  test("a given factory opens the connections; one that throws is TRANSPORT; a non-function is INVALID_ARGUMENT", async () => {
    const asked = [];
    const failing = (options) => {
      asked.push(options);
      throw new Error("no sockets today");
    };
    const c = track(new RedisLocks({ ...tcpNode(0), requestTimeoutMs: 500, openSocket: failing }));
    const err = await rejectsWith(c.tryAcquire(unique("custom")), "TRANSPORT");
    assert.match(err.message, /no sockets today/);
    assert.deepEqual(asked[0], { host: "127.0.0.1", port: env.redis[0].port, tls: false });
    assert.throws(() => new RedisLocks({ ...tcpNode(0), openSocket: 42 }), (e) => e instanceof LockError && e.code === "INVALID_ARGUMENT");
  });
});

describe("RedisLocks over rediss:// (TLS)", () => {
  test("a CA given as tls: { ca } is trusted; without it the certificate is refused (TRANSPORT)", async () => {
    const name = unique("tls");
    const url = `rediss://127.0.0.1:${tlsRedis.port}`;
    const trusted = track(new RedisLocks({ url, protocol: "resp", requestTimeoutMs: 2000, tls: { ca: tlsRedis.ca } }));
    const lock = await trusted.acquire(name, { waitMs: 5000 });
    assert.equal(await trusted.tryAcquire(name), null);
    await lock.release();
    const untrusted = track(new RedisLocks({ url, protocol: "resp", requestTimeoutMs: 2000 }));
    await rejectsWith(untrusted.tryAcquire(name), "TRANSPORT");
  });
});

describe("Redlock over 3 redis:// (TCP) nodes", () => {
  const nodes = () => [0, 1, 2].map(tcpNode);

  test("acquire, a second client refused, handoff with a higher token, keys gone after release", async () => {
    const name = unique("rl");
    const a = track(new Redlock({ nodes: nodes(), ttlMs: 5000 }));
    const b = track(new Redlock({ nodes: nodes(), ttlMs: 5000, retryDelayMs: 20, retryJitterMs: 5 }));
    const lock = await a.acquire(name, { waitMs: 5000 });
    assert.equal(await b.tryAcquire(name), null);
    for (const i of [0, 1, 2]) assert.equal(await rawCommand(env.redis[i].port, "EXISTS", lockKey(name)), ":1", `node ${i}`);
    const waiting = b.acquire(name, { waitMs: 5000 });
    await sleep(50);
    await lock.release();
    const next = await waiting;
    assert.ok(next.fencingToken > lock.fencingToken, `${next.fencingToken} after ${lock.fencingToken}`);
    await next.release();
    for (const i of [0, 1, 2]) assert.equal(await rawCommand(env.redis[i].port, "EXISTS", lockKey(name)), ":0", `node ${i}`);
  });
});
