// One adapter per client library, all with the same shape so that every
// scenario runs each of them the same way:
//   const c = make();                       // a fresh client (own session / connections)
//   const release = await c.acquire(name, { signal });   // waits until held
//   await release();
//   await c.close();
//   c.log                                   // this client's request log (bench/reqlog.mjs), if measurable
// `counter` says which request counter applies: "http" (fetch calls),
// "redis" (commands processed by the redis-servers) or "etcd" (gRPC calls
// started by etcd; etcd's JSON gateway turns each HTTP call into one).
import { EtcdLocks, RedisLocks, Redlock as EdgeRedlock } from "../pkg/index.node.mjs";
import { Etcd3, EtcdLockFailedError } from "etcd3";
import IORedis from "ioredis";
import NodeRedlock from "redlock";
import { Redlock as SesameRedlock } from "@sesamecare-oss/redlock";
import { Mutex, RedlockMutex } from "redis-semaphore";
import { Lock as UpstashLock } from "@upstash/lock";
import { Redis as UpstashRedis } from "@upstash/redis";
import { countingFetch, countingSockets, logIoredis, withLog } from "./reqlog.mjs";

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function abortError() {
  const e = new Error("aborted");
  e.name = "AbortError";
  return e;
}

/**
 * An edgelock client built by `build(fetch)` with a counting fetch; releases
 * are the Lock's own release().
 */
function edgelockClient(build, transport) {
  const log = [];
  const client = build(countingFetch(log, transport));
  return {
    log,
    unit: "HTTP req",
    async acquire(name, { signal } = {}) {
      const lock = await client.acquire(name, signal ? { signal } : {});
      return () => lock.release();
    },
    close: () => client.close(),
  };
}

/**
 * An edgelock client over redis:// (`build(openSocket)`): the package's Node
 * sockets, each write logged (a write carries one or more pipelined commands;
 * waiting clients also write SUBSCRIBE / UNSUBSCRIBE on their subscriber
 * connection, logged as streams).
 */
function edgelockTcpClient(build) {
  const log = [];
  const client = build(countingSockets(log));
  return {
    log,
    unit: "command write",
    async acquire(name, { signal } = {}) {
      const lock = await client.acquire(name, signal ? { signal } : {});
      return () => lock.release();
    },
    close: () => client.close(),
  };
}

function ioredisClients(env, n, log) {
  return env.redis.slice(0, n).map((r) => logIoredis(new IORedis({ host: "127.0.0.1", port: r.port, lazyConnect: false, maxRetriesPerRequest: 2 }), log));
}

/**
 * A redlock-style client (`redlock@5` or its fork `@sesamecare-oss/redlock`,
 * same API) over ioredis to the 3 redis-servers; lock TTL 10 s, unlimited
 * retries at the library's default delay.
 */
function redlockClient(Redlock, env) {
  const log = [];
  const clients = ioredisClients(env, 3, log);
  const redlock = new Redlock(clients, { retryCount: -1 });
  // A node voting against (the lock is held) is emitted as "error"; the retry loop handles it.
  redlock.on("error", () => {});
  return {
    log,
    unit: "Redis cmd",
    async acquire(name) {
      const lock = await redlock.acquire([name], 10_000);
      return () => lock.release();
    },
    close: async () => Promise.all(clients.map((c) => c.quit())),
  };
}

/**
 * Appended to the note of every row whose uncontended requests/op come from
 * the redis-servers' INFO counter.
 */
const LUA_NOTE = "; uncontended \"Redis cmd\" is the redis-servers' `total_commands_processed`, which also counts the commands a Lua script runs (each `redis.call` inside EVAL/EVALSHA), not only those the client sent";

/**
 * Libraries by id. `group` pairs edgelock with the peers on the same backend;
 * `note` documents every non-default setting.
 */
export function libraries(env) {
  const gw = env.gateway_urls;
  const webdis = env.webdis_urls;
  const token = env.token;
  const libs = {
    "edgelock-etcd": {
      label: "edgelock EtcdLocks", group: "etcd", counter: "etcd", edgelock: true,
      note: "npm package in Node, defaults (the Node entry sends over node:http with keep-alive; session lease 10 s, waits on a watch)",
      make: () => edgelockClient((fetch) => new EtcdLocks({ endpoints: env.etcd_urls, fetch })),
    },
    etcd3: {
      label: "etcd3 Lock", group: "etcd", counter: "etcd",
      note: "Lock has no waiting acquire: the bench retries on EtcdLockFailedError every 50 ms; ttl 10 s",
      make: () => {
        const client = new Etcd3({ hosts: env.etcd_urls });
        return {
          async acquire(name, { signal } = {}) {
            for (;;) {
              const lock = client.lock(name).ttl(10);
              try {
                await lock.acquire();
                return () => lock.release();
              } catch (e) {
                if (!(e instanceof EtcdLockFailedError)) throw e;
              }
              if (signal?.aborted) throw abortError();
              await sleep(50);
            }
          },
          close: async () => client.close(),
        };
      },
    },
    "edgelock-redis": {
      label: "edgelock RedisLocks (upstash)", group: "redis-http", counter: "http", edgelock: true,
      note: "Upstash REST via the local gateway; defaults (node:http keep-alive transport, the Node entry's default; ttl 10 s; push wake-up: a waiter subscribes to the lock's release channel, `POST /subscribe/…` as server-sent events, and attempts on each message; while subscribed it also attempts every min(holder's PTTL, 2 s), otherwise every 200 ms + 0..100 ms jitter)",
      make: () => edgelockClient((fetch) => new RedisLocks({ url: gw[0], protocol: "upstash", token, fetch })),
    },
    "edgelock-redis-fetch": {
      label: "edgelock RedisLocks (upstash, Node fetch)", group: "redis-http", counter: "http", edgelock: true, extra: true,
      note: "as edgelock RedisLocks (upstash), with `fetch: globalThis.fetch` instead of the Node entry's default node:http transport (what every other runtime uses); uncontended only",
      make: () => edgelockClient((fetch) => new RedisLocks({ url: gw[0], protocol: "upstash", token, fetch }), "fetch"),
    },
    "edgelock-redis-webdis": {
      label: "edgelock RedisLocks (webdis)", group: "redis-http", counter: "http", edgelock: true, extra: true,
      note: "Webdis HTTP; defaults (push wake-up over `GET /SUBSCRIBE/…`, a chunked JSON stream)",
      make: () => edgelockClient((fetch) => new RedisLocks({ url: webdis[0], protocol: "webdis", fetch })),
    },
    "edgelock-redis-fair": {
      label: "edgelock RedisLocks fair (upstash)", group: "redis-http", counter: "http", edgelock: true, extra: true, fair: true,
      note: "as edgelock RedisLocks (upstash) with `fair: true`: a FIFO queue of waiters, a release wakes only the queue head",
      make: () => edgelockClient((fetch) => new RedisLocks({ url: gw[0], protocol: "upstash", token, fair: true, fetch })),
    },
    "edgelock-redis-tcp": {
      label: "edgelock RedisLocks (redis:// TCP)", group: "redis-http", counter: "redis", edgelock: true, tcp: true,
      note: "the Redis protocol over TCP (node:net sockets of the Node entry) to the same redis-server as the TCP peers; defaults (commands pipelined on one connection per node; push wake-up: the waiters of a client share one subscriber connection per node); the waiter's handoff requests are its command writes (one write may carry pipelined commands)",
      make: () => edgelockTcpClient((openSocket) => new RedisLocks({ url: env.redis[0].url, openSocket })),
    },
    "upstash-lock": {
      label: "@upstash/lock", group: "redis-http", counter: "http",
      note: "@upstash/redis via the same gateway; lease 10 s, retry every 100 ms (its default delay) without an attempt limit",
      make: () => {
        const redis = new UpstashRedis({ url: gw[0], token });
        const log = [];
        return {
          log,
          unit: "HTTP req",
          async acquire(name) {
            const lock = new UpstashLock({ id: name, redis, lease: 10_000, retry: { attempts: Infinity, delay: 100 } });
            if (!(await withLog(log, () => lock.acquire()))) throw new Error("@upstash/lock: not acquired");
            return async () => {
              if (!(await withLog(log, () => lock.release()))) throw new Error("@upstash/lock: release found another owner");
            };
          },
          close: async () => {},
        };
      },
    },
    "redis-semaphore": {
      label: "redis-semaphore Mutex", group: "redis-http", counter: "redis", tcp: true,
      note: "ioredis TCP to the same redis-server; defaults (lockTimeout 10 s, retryInterval 10 ms) except acquireTimeout 60 s",
      make: () => {
        const log = [];
        const [redis] = ioredisClients(env, 1, log);
        return {
          log,
          unit: "Redis cmd",
          async acquire(name) {
            const m = new Mutex(redis, name, { acquireTimeout: 60_000 });
            await m.acquire();
            return () => m.release();
          },
          close: async () => redis.quit(),
        };
      },
    },
    "edgelock-redlock": {
      label: "edgelock Redlock (3× upstash)", group: "redlock", counter: "http", edgelock: true,
      note: "3 nodes, each its own gateway; defaults (strict fencing, whose raise round is skipped when every node answered at the token; push wake-up on every node; retry 200 ± 100 ms) except retryCount 1000",
      make: () => edgelockClient((fetch) => new EdgeRedlock({ nodes: gw.map((url) => ({ url, protocol: "upstash", token })), retryCount: 1000, fetch })),
    },
    "edgelock-redlock-webdis": {
      label: "edgelock Redlock (3× webdis)", group: "redlock", counter: "http", edgelock: true, extra: true,
      note: "3 webdis nodes; defaults except retryCount 1000",
      make: () => edgelockClient((fetch) => new EdgeRedlock({ nodes: webdis.map((url) => ({ url, protocol: "webdis" })), retryCount: 1000, fetch })),
    },
    "edgelock-redlock-tcp": {
      label: "edgelock Redlock (3× redis:// TCP)", group: "redlock", counter: "redis", edgelock: true, tcp: true,
      note: "the same 3 redis-servers as the TCP peers over the Redis protocol; defaults (strict fencing; push wake-up) except retryCount 1000; the waiter's handoff requests are its command writes (one write may carry pipelined commands)",
      make: () => edgelockTcpClient((openSocket) => new EdgeRedlock({ nodes: env.redis.map((r) => ({ url: r.url })), retryCount: 1000, openSocket })),
    },
    "node-redlock": {
      label: "redlock@5 (3× ioredis)", group: "redlock", counter: "redis", tcp: true,
      note: "ioredis TCP to the same 3 redis-servers; defaults (retry 200 ± 100 ms) except retryCount -1 (unlimited)",
      make: () => redlockClient(NodeRedlock, env),
    },
    "sesame-redlock": {
      label: "@sesamecare-oss/redlock (3× ioredis)", group: "redlock", counter: "redis", tcp: true,
      note: "the maintained fork of redlock (TypeScript, ioredis 5); ioredis TCP to the same 3 redis-servers; defaults (retry 200 ± 100 ms) except retryCount -1 (unlimited)",
      make: () => redlockClient(SesameRedlock, env),
    },
    "redis-semaphore-redlock": {
      label: "redis-semaphore RedlockMutex (3×)", group: "redlock", counter: "redis", tcp: true,
      note: "ioredis TCP to the same 3 redis-servers; defaults except acquireTimeout 60 s",
      make: () => {
        const log = [];
        const clients = ioredisClients(env, 3, log);
        return {
          log,
          unit: "Redis cmd",
          async acquire(name) {
            const m = new RedlockMutex(clients, name, { acquireTimeout: 60_000 });
            await m.acquire();
            return () => m.release();
          },
          close: async () => Promise.all(clients.map((c) => c.quit())),
        };
      },
    },
  };
  for (const lib of Object.values(libs)) if (lib.counter === "redis") lib.note += LUA_NOTE;
  return libs;
}
