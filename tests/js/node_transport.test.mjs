// The Node entry's default transport (pkg/node_http.mjs, installed with the
// package): the Fetch subset the wasm driver reads, keep-alive reuse, a
// stale pooled socket sent again once, aborts mid-body and mid-stream, and
// that a client built without `fetch` uses it (not globalThis.fetch) in Node
// and Bun; Deno's entry uses Deno's fetch instead.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import net from "node:net";
import { createRequire } from "node:module";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { RedisLocks } from "edgelock";
import { runtime } from "./support/runtime.mjs";
import { startTestenv } from "./testenv.mjs";

// The package's exports map names only ".": load the file by its path.
const pkgDir = path.dirname(createRequire(import.meta.url).resolve("edgelock/package.json"));
const { nodeHttpFetch } = await import(pathToFileURL(path.join(pkgDir, "node_http.mjs")).href);

const text = async (r) => new TextDecoder().decode(await r.arrayBuffer());
const listen = (server) => new Promise((r) => server.listen(0, "127.0.0.1", () => r(`http://127.0.0.1:${server.address().port}`)));

/**
 * Answers the first request on each connection with keep-alive (and no
 * Keep-Alive timeout hint), then resets the connection on the next one: a
 * server that dropped an idle connection the client still pools. `fetchFn`
 * must send the second request again, once, on a new connection.
 */
async function replacesClosedPooledConnection(fetchFn) {
  let connections = 0;
  const flaky = net.createServer((sock) => {
    connections += 1;
    let served = false;
    sock.on("data", () => {
      if (served) { sock.resetAndDestroy(); return; }
      served = true;
      sock.write("HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: keep-alive\r\n\r\nok");
    });
    sock.on("error", () => {});
  });
  const url = await listen(flaky);
  try {
    assert.equal(await text(await fetchFn(url, { method: "POST", body: "1" })), "ok");
    assert.equal(await text(await fetchFn(url, { method: "POST", body: "2" })), "ok");
    assert.equal(connections, 2, "the second request went out again on a second connection");
  } finally {
    flaky.close();
  }
}

describe("node:http transport", () => {
  let server;
  let base;
  const sockets = new Set();
  before(async () => {
    server = http.createServer((req, res) => {
      if (req.url === "/stream") {
        res.writeHead(200, { "content-type": "text/event-stream" });
        let i = 0;
        const t = setInterval(() => {
          res.write(`data: ${i}\n\n`);
          i += 1;
          if (i === 3) { clearInterval(t); res.end(); }
        }, 10);
        return;
      }
      if (req.url === "/hang") { res.writeHead(200); res.write("x"); return; }
      const body = [];
      req.on("data", (c) => body.push(c));
      req.on("end", () => {
        res.writeHead(req.url === "/missing" ? 404 : 200, { "x-socket": String(req.socket.remotePort) });
        res.end(`${req.method} ${req.headers["x-test"] ?? ""} ${Buffer.concat(body)}`);
      });
    });
    server.on("connection", (s) => { sockets.add(s); s.on("close", () => sockets.delete(s)); });
    base = await listen(server);
  });
  after(() => { server.closeAllConnections(); server.close(); });

  test("method, headers, body and status; keep-alive reuses one connection", async () => {
    const a = await nodeHttpFetch(`${base}/x`, { method: "POST", headers: { "x-test": "h" }, body: new TextEncoder().encode("hi") });
    assert.equal(a.status, 200);
    const port = a.headers["x-socket"];
    assert.equal(await text(a), "POST h hi");
    const b = await nodeHttpFetch(`${base}/x`, { method: "POST", body: "again" });
    assert.equal(await text(b), "POST  again");
    assert.equal(b.headers["x-socket"], port, "the second request reused the pooled connection");
    const c = await nodeHttpFetch(`${base}/missing`, { method: "GET" });
    assert.equal(c.status, 404);
    await c.arrayBuffer();
  });

  test("a streamed body is read chunk by chunk to its end", async () => {
    const r = await nodeHttpFetch(`${base}/stream`, { method: "GET" });
    const reader = r.body.getReader();
    let all = "";
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      assert.ok(value instanceof Uint8Array);
      all += new TextDecoder().decode(value);
    }
    assert.equal(all, "data: 0\n\ndata: 1\n\ndata: 2\n\n");
  });

  test("an abort rejects a pending read and a request not yet answered", async () => {
    const ac = new AbortController();
    const r = await nodeHttpFetch(`${base}/hang`, { method: "GET", signal: ac.signal });
    const reader = r.body.getReader();
    assert.equal((await reader.read()).value.length, 1);
    setTimeout(() => ac.abort(), 20);
    await assert.rejects(reader.read());
    const pre = new AbortController();
    pre.abort();
    await assert.rejects(nodeHttpFetch(`${base}/x`, { method: "GET", signal: pre.signal }), (e) => e.name === "AbortError");
  });

  test("a connection refused is a TypeError whose cause carries the code", async () => {
    const closed = net.createServer();
    const url = await listen(closed);
    await new Promise((r) => closed.close(r));
    const err = await nodeHttpFetch(url, { method: "GET" }).then(() => null, (e) => e);
    assert.ok(err instanceof TypeError);
    assert.equal(err.cause?.code, "ECONNREFUSED");
  });

  test("a pooled connection the server closed silently is replaced, once, on a new connection", async () => {
    await replacesClosedPooledConnection(nodeHttpFetch);
  });
});

// Node and Bun resolve the package's `node` / `bun` condition (index.node.mjs,
// node:http); Deno its `deno` condition (index.deno.mjs, Deno's own fetch).
const expected = runtime === "deno"
  ? { entry: "index.deno.mjs", transport: "globalThis.fetch", fetch: globalThis.fetch }
  : { entry: "index.node.mjs", transport: "node:http", fetch: nodeHttpFetch };

describe(`the entry ${runtime} resolves and its default transport`, () => {
  let env;
  before(async () => { env = await startTestenv({ redis: 1, gateway: true }); });
  after(async () => { await env?.stop(); });

  test(`"edgelock" resolves to ${expected.entry}`, () => {
    assert.equal(path.basename(new URL(import.meta.resolve("edgelock")).pathname), expected.entry);
  });

  // Why Deno's entry may use Deno's fetch (and Bun's may not use Bun's, which
  // fails this with ECONNRESET): a lock request must survive a keep-alive
  // connection the server closed while it sat in the pool.
  test(`the default transport (${expected.transport}) sends again on a pooled connection the server had closed`, async () => {
    await replacesClosedPooledConnection(expected.fetch);
  });

  test(`a client built without fetch sends over ${expected.transport}`, async (t) => {
    const original = globalThis.fetch;
    let calls = 0;
    globalThis.fetch = (...a) => { calls += 1; return original(...a); };
    t.after(() => { globalThis.fetch = original; });
    const c = new RedisLocks({ url: env.gateway_urls[0], protocol: "upstash", token: env.token });
    try {
      const lock = await c.acquire(`transport-${process.pid}`);
      assert.ok(lock.fencingToken > 0n);
      await lock.release();
    } finally {
      await c.close();
    }
    if (expected.transport === "node:http") assert.equal(calls, 0);
    else assert.ok(calls >= 2, `globalThis.fetch called ${calls} times for an acquire and a release`);
  });
});
