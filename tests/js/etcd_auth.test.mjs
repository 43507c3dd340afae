// EtcdLocks with etcd authentication (`auth: { username, password }`)
// against a real etcd whose auth this test enables (its own etcd: auth on
// would refuse the other test files' anonymous clients).
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { EtcdLocks, LockError } from "edgelock";
import { b64, startEtcd } from "./support/etcd.mjs";

let etcd;
const PASSWORD = "js-locker-pw-5521";

before(async () => {
  etcd = await startEtcd();
  const g = etcd.gateway;
  await g.post("/v3/auth/user/add", { name: "root", password: "js-root-pw" });
  await g.post("/v3/auth/role/add", { name: "root" }).catch(() => {});
  await g.post("/v3/auth/user/grant", { user: "root", role: "root" });
  await g.post("/v3/auth/role/add", { name: "locker" });
  await g.post("/v3/auth/role/grant", { name: "locker", perm: { permType: "READWRITE", key: b64("js/"), range_end: b64("js0") } });
  await g.post("/v3/auth/user/add", { name: "locker", password: PASSWORD });
  await g.post("/v3/auth/user/grant", { user: "locker", role: "locker" });
  await g.post("/v3/auth/enable", {});
});
after(async () => {
  await etcd?.stop();
});

const client = (password, prefix = "js") =>
  new EtcdLocks({ endpoints: [etcd.url], prefix, sessionTtlMs: 3000, requestTimeoutMs: 1000, auth: { username: "locker", password } });

test("an authenticated client locks with increasing tokens", async () => {
  const c = client(PASSWORD);
  try {
    const a = await c.acquire("job", { waitMs: 5000 });
    assert.equal(await c.tryAcquire("job"), null);
    await a.release();
    const b = await c.acquire("job", { waitMs: 5000 });
    assert.ok(b.fencingToken > a.fencingToken);
    await b.release();
  } finally {
    await c.close();
  }
});

test("a wrong password and a prefix outside the role are BACKEND errors without secrets", async () => {
  const wrong = client("wrong-pw-0042");
  const e1 = await wrong.acquire("job", { waitMs: 2000 }).then(() => null, (e) => e);
  await wrong.close().catch(() => {});
  assert.ok(e1 instanceof LockError, String(e1));
  assert.equal(e1.code, "BACKEND", e1.message);
  assert.match(e1.message, /authentication failed/);
  assert.doesNotMatch(e1.message, /wrong-pw-0042/);

  const outside = client(PASSWORD, "other");
  const e2 = await outside.acquire("job", { waitMs: 2000 }).then(() => null, (e) => e);
  await outside.close().catch(() => {});
  assert.equal(e2?.code, "BACKEND", String(e2));
  assert.match(e2.message, /permission denied.*other\//);
  assert.doesNotMatch(e2.message, new RegExp(PASSWORD));
});

test("auth options are checked before any request", async () => {
  let calls = 0;
  const fetch = () => { calls += 1; throw new Error("no request expected"); };
  for (const auth of [{ username: "u" }, { username: "", password: "p" }, { username: "u", password: "p", extra: 1 }, "u:p"]) {
    assert.throws(() => new EtcdLocks({ endpoints: [etcd.url], auth, fetch }), (e) => e instanceof LockError && e.code === "INVALID_ARGUMENT");
  }
  assert.throws(() => new EtcdLocks({ endpoints: [etcd.url], auth: { username: "u", password: "p" }, headers: { Authorization: "x" }, fetch }),
    (e) => e.code === "INVALID_ARGUMENT");
  assert.equal(calls, 0);
});
