// ZooKeeperLocks against a real ZooKeeper (Debian's 3.8, standalone, tickTime
// 200: sessions of 400 ms … 4 s) from the devtools `testenv`, reached through
// the runtime's socket factory (node:net under Node and Bun, Deno.connect
// under Deno); and the real Apache Curator 5.4 (the devtools' CuratorPeer
// JVM, started here from `testenv --curator`'s command) on the same paths.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { LockError, ZooKeeperLocks } from "edgelock";
import { startTestenv } from "./testenv.mjs";
import { freePort } from "./support/etcd.mjs";
import { startCurator } from "./support/zookeeper.mjs";

const PASSWORD = "zk-s3cret-digest";
const SESSION_MS = 4000;
let env;
const clients = [];
const peers = [];
let seq = 0;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const unique = (base) => `${base}-${process.pid}-${(seq += 1)}`;

before(async () => {
  env = await startTestenv({ zookeeper: true, curator: true });
});
after(async () => {
  await Promise.allSettled(clients.map((c) => c.close()));
  await Promise.allSettled(peers.map((p) => p.close()));
  await env?.stop();
});

const track = (c) => {
  clients.push(c);
  return c;
};
const client = (extra = {}) =>
  track(new ZooKeeperLocks({ connect: env.zookeeper_connect, sessionTimeoutMs: SESSION_MS, requestTimeoutMs: 2000, ...extra }));

async function rejectsWith(promise, code) {
  const err = await promise.then(() => null, (e) => e);
  assert.ok(err instanceof LockError, `expected LockError ${code}, got ${err}`);
  assert.equal(err.code, code, err.message);
  return err;
}

describe("ZooKeeperLocks (TCP)", () => {
  test("exclusion, try, a waiter woken by the release, rising tokens", async () => {
    const name = unique("mx");
    const a = client();
    const b = client();
    const lock = await a.acquire(name, { waitMs: 10_000 });
    assert.equal(typeof lock.fencingToken, "bigint");
    assert.ok(lock.fencingToken > 0n);
    assert.equal(await b.tryAcquire(name), null);
    let woken = false;
    const waiting = b.acquire(name, { waitMs: 10_000 }).then((l) => {
      woken = true;
      return l;
    });
    await sleep(300);
    assert.equal(woken, false, "the waiter must wait for the release");
    const released = Date.now();
    await lock.release();
    const next = await waiting;
    // Woken by the watch on its predecessor (a ZooKeeper waiter has no
    // timer), within its 10 s wait; the bound leaves a slow machine room.
    assert.ok(Date.now() - released < 8000, `handoff took ${Date.now() - released} ms`);
    assert.ok(next.fencingToken > lock.fencingToken, `${next.fencingToken} after ${lock.fencingToken}`);
    await next.release();
    const again = await a.tryAcquire(name);
    assert.ok(again !== null && again.fencingToken > next.fencingToken);
    await again.release();
  });

  test("3 contending clients never overlap and see increasing tokens", async () => {
    const name = unique("three");
    let inside = 0;
    let maxInside = 0;
    const tokens = [];
    await Promise.all([client(), client(), client()].map(async (c) => {
      for (let i = 0; i < 4; i += 1) {
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
    assert.equal(tokens.length, 12);
    for (let i = 1; i < tokens.length; i += 1) assert.ok(tokens[i] > tokens[i - 1], `${tokens[i]} after ${tokens[i - 1]}`);
  });

  test("close() ends the session: its lock is free at once", async () => {
    const name = unique("close");
    const a = client();
    await a.acquire(name, { waitMs: 10_000 });
    await a.close();
    const b = client();
    const lock = await b.tryAcquire(name);
    assert.ok(lock !== null, "closeSession removed the ephemeral node");
    await lock.release();
  });

  test("digest authentication; the password is in no error", async () => {
    const name = unique("digest");
    const digest = { user: "locker", password: PASSWORD };
    const authed = client({ digest });
    const lock = await authed.acquire(name, { waitMs: 10_000 });
    await lock.release();
    const dead = await freePort();
    const unreachable = track(new ZooKeeperLocks({ connect: `127.0.0.1:${dead}`, digest, requestTimeoutMs: 500, sessionTimeoutMs: 2000 }));
    const errors = [await rejectsWith(unreachable.tryAcquire(name), "TRANSPORT")];
    for (const bad of [
      { connect: `127.0.0.1:${dead}/bad/`, digest },
      { connect: `127.0.0.1:${dead}`, digest: { user: "locker", password: PASSWORD, extra: PASSWORD } },
      { connect: `127.0.0.1:${dead}`, digest, passwrod: PASSWORD },
      { connect: `127.0.0.1:${dead}`, digest, sessionTimeoutMs: PASSWORD },
    ]) {
      const e = (() => {
        try {
          track(new ZooKeeperLocks(bad)).tryAcquire(name);
          return null;
        } catch (e) {
          return e;
        }
      })();
      assert.ok(e instanceof LockError && e.code === "INVALID_ARGUMENT", `${JSON.stringify(Object.keys(bad))}: ${e}`);
      errors.push(e);
    }
    for (const e of errors) {
      assert.ok(!e.message.includes(PASSWORD), e.message);
      assert.ok(!String(e.stack).includes(PASSWORD), e.stack);
    }
  });

  test("a given openSocket opens the connection; its failure is TRANSPORT", async () => {
    const asked = [];
    const c = client({
      openSocket(options) {
        asked.push(options);
        throw new Error("no sockets today");
      },
    });
    // The session tries the next host until the request times out; the
    // error says ZooKeeper was out of reach (not the socket's last words).
    const err = await rejectsWith(c.tryAcquire(unique("custom")), "TRANSPORT");
    assert.match(err.message, /could not reach ZooKeeper/);
    const [host, port] = env.zookeeper_connect.split(":");
    assert.equal(asked[0].host, host);
    assert.equal(asked[0].port, Number(port));
    assert.equal(asked[0].tls, false);
  });

  test("the browser entry refuses it before anything is sent (no TCP in a page)", async () => {
    // A child process (the browser entry's wasm state is its own) that
    // looks like a page to the entry (`document`) and serves the wasm file
    // to its fetch.
    const entry = new URL("./node_modules/edgelock/index.browser.mjs", import.meta.url).href;
    const dir = mkdtempSync(join(tmpdir(), "edgelock-zk-browser-"));
    const script = join(dir, "page.mjs");
    writeFileSync(script, `
      import { readFileSync } from "node:fs";
      import { fileURLToPath } from "node:url";
      globalThis.document = {};
      globalThis.fetch = async (url) => new Response(readFileSync(fileURLToPath(String(url))), { headers: { "content-type": "application/wasm" } });
      const { ZooKeeperLocks } = await import(${JSON.stringify(entry)});
      let opened = 0;
      try {
        new ZooKeeperLocks({ connect: "127.0.0.1:2181", digest: { user: "u", password: ${JSON.stringify(PASSWORD)} }, openSocket: () => { opened += 1; } });
        console.log(JSON.stringify({ constructed: true }));
      } catch (e) {
        console.log(JSON.stringify({ code: e.code, message: e.message, opened }));
      }
    `);
    const argv = globalThis.Deno ? ["run", "-A", "--no-lock", script] : [script];
    const out = await new Promise((resolve, reject) => {
      const p = spawn(process.execPath, argv, { stdio: ["ignore", "pipe", "inherit"] });
      let text = "";
      p.stdout.on("data", (d) => (text += d));
      p.on("error", reject);
      p.on("exit", () => resolve(text));
    });
    rmSync(dir, { recursive: true, force: true });
    const r = JSON.parse(out.trim().split("\n").pop());
    assert.equal(r.code, "INVALID_ARGUMENT", out);
    assert.match(r.message, /browsers cannot open TCP connections, and the zookeeper backend is reached over TCP only/);
    assert.equal(r.opened, 0);
    assert.ok(!r.message.includes(PASSWORD));
  });
});

describe("ZooKeeperLocks and Curator's InterProcessMutex", () => {
  test("Curator holds: edgelock cannot; edgelock waits for Curator's release; and the reverse", async () => {
    const name = unique("curator");
    const path = `/edgelock/${name}`;
    const curator = await startCurator(env, SESSION_MS, peers);
    const held = await curator.send(`mutex-acquire ${path} 5000`);
    const [, curatorNode, curatorZxid] = held.split(" ");
    assert.match(held, /^OK /);
    const c = client();
    assert.equal(await c.tryAcquire(name), null);
    const waiting = c.acquire(name, { waitMs: 15_000 });
    await sleep(300);
    assert.equal(await curator.send(`mutex-release ${path}`), "OK");
    const lock = await waiting;
    assert.ok(lock.fencingToken > BigInt(curatorZxid), `${lock.fencingToken} after Curator's ${curatorZxid}`);
    assert.ok(curatorNode.startsWith(`${path}/_c_`), curatorNode);
    // edgelock's node is a Curator lock node (protected name, `lock-` and a sequence).
    const children = await curator.send(`children ${path}`);
    assert.match(children, /^OK _c_[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}-lock-\d{10}$/);
    assert.equal(await curator.send(`mutex-acquire ${path} 0`), "NO");
    // Curator waits (its command blocks) until edgelock releases.
    const curatorWaits = curator.send(`mutex-acquire ${path} 15000`);
    await sleep(300);
    await lock.release();
    const got = await curatorWaits;
    assert.match(got, /^OK /);
    assert.ok(BigInt(got.split(" ")[2]) > lock.fencingToken);
    assert.equal(await curator.send(`mutex-release ${path}`), "OK");
    assert.equal(await curator.send("close"), "OK");
  });

  test("root: Curator's <root>/<name> is edgelock's name under that root", async () => {
    const name = unique("rooted");
    const curator = await startCurator(env, SESSION_MS, peers);
    assert.match(await curator.send(`mutex-acquire /jobs/${name} 5000`), /^OK /);
    const rooted = client({ root: "/jobs" });
    assert.equal(await rooted.tryAcquire(name), null);
    const plain = await client().tryAcquire(name);
    assert.ok(plain !== null, "the default root /edgelock is another path");
    await plain.release();
    assert.equal(await curator.send(`mutex-release /jobs/${name}`), "OK");
    const lock = await rooted.tryAcquire(name);
    assert.ok(lock !== null);
    await lock.release();
    assert.equal(await curator.send("close"), "OK");
  });
});
