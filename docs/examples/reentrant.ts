import { EtcdLocks } from "edgelock";

const locks = new EtcdLocks({ endpoints: ["http://127.0.0.1:2379"] });
const other = new EtcdLocks({ endpoints: ["http://127.0.0.1:2379"] });  // e.g. in another process
// [docs:reentrant]
const outer = await locks.acquire("jobs");
const inner = await other.reenter(outer.toJSON());   // proof of ownership, any process
inner.fencingToken === outer.fencingToken;            // true; freed after the last hold
await locks.request("jobs", async () => {
  await locks.request("jobs", async () => { /* re-entered, not deadlocked */ });
});
// [/docs:reentrant]
await inner.release();
await outer.release();
await Promise.all([locks.close(), other.close()]);
