// A real etcd for one test file (free loopback ports, temp data dir, CORS
// open; started and stopped by the devtools `testenv`), and direct access to
// etcd's JSON gateway so that tests can observe and damage the backend
// without going through edgelock.
import { createServer } from "node:net";
import { startTestenv } from "../testenv.mjs";

export async function freePort() {
  return await new Promise((resolve, reject) => {
    const s = createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

/** One etcd member (CORS open for browsers) from the devtools `testenv`. */
export async function startEtcd() {
  const env = await startTestenv({ etcd: 1 });
  const url = env.etcd_urls[0];
  return { url, stop: env.stop, gateway: gateway(url) };
}

export function b64(s) {
  return Buffer.from(s).toString("base64");
}

/** Exclusive end of the range of keys starting with `prefix`. */
function prefixEnd(prefix) {
  const b = Buffer.from(prefix);
  b[b.length - 1] += 1;
  return b.toString("base64");
}

export function gateway(url) {
  const post = async (path, body) => {
    const r = await fetch(`${url}${path}`, { method: "POST", body: JSON.stringify(body) });
    const json = await r.json();
    if (!r.ok) throw new Error(`${path}: HTTP ${r.status} ${JSON.stringify(json)}`);
    return json;
  };
  return {
    post,
    /** Keys (decoded) under `prefix`, oldest first. */
    async keys(prefix) {
      const r = await post("/v3/kv/range", { key: b64(prefix), range_end: prefixEnd(prefix), sort_target: "CREATE", sort_order: "ASCEND" });
      return (r.kvs ?? []).map((kv) => ({
        key: Buffer.from(kv.key, "base64").toString(),
        createRevision: BigInt(kv.create_revision),
        lease: kv.lease,
      }));
    },
    async deleteKey(key) {
      return await post("/v3/kv/deleterange", { key: b64(key) });
    },
    async revokeLease(id) {
      return await post("/v3/lease/revoke", { ID: id });
    },
    async put(key, value) {
      return await post("/v3/kv/put", { key: b64(key), value: b64(value) });
    },
  };
}

/** Polls `check` until it returns a truthy value or `ms` pass. */
export async function eventually(check, ms = 10_000, what = "condition") {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await check();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}
