import { EtcdLocks, RedisLocks } from "edgelock";
const locks = new EtcdLocks({ endpoints: ["http://127.0.0.1:2379"] });      // fetch is injectable: { fetch }
await locks.request("nightly", { waitMs: 10_000 }, async (lock) => {
  await work(lock.fencingToken, lock.signal);   // signal aborts if the lock is lost
});
const redis = new RedisLocks({ url: "https://eu1-x.upstash.io", token: env.UPSTASH_TOKEN });
const lock = await redis.tryAcquire("job");       // null when busy
const permit = await redis.acquire("renders", { limit: 3 });   // a semaphore's permit: permit.slot in 0..3
const who = await redis.status("renders");        // { held, limit, holders: [{ mode, slot, … }], queued, … }
