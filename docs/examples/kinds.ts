// [docs:package]
import { EtcdLocks, MAX_PERMITS } from "edgelock";
const locks = new EtcdLocks({ endpoints: ["http://127.0.0.1:2379"] });

// A semaphore: at most 3 holders of "renders" at once. Each permit has a
// slot in 0..limit, distinct among the current holders (pick a GPU, a
// connection, a shard with it), and its own fencing token.
await locks.request("renders", { limit: 3, waitMs: 30_000 }, async (permit) => {
  await render(permit.slot, permit.fencingToken);
});
const permit = await locks.tryAcquire("renders", { limit: 3 });   // null when all 3 are taken

// A read-write lock: readers share, a writer excludes everyone.
const reader = await locks.acquire("config", { mode: "shared" });
const writer = await locks.acquire("config", { mode: "exclusive" }); // the default mode
// [/docs:package]

export async function tour(): Promise<number> {
  // [docs:tour]
  await locks.request("renders", { limit: 3 }, async (permit) => render(permit.slot, permit.fencingToken));
  const permit = await locks.tryAcquire("renders", { limit: 3 });   // null when all 3 are taken
  const reader = await locks.acquire("config", { mode: "shared" });  // etcd, one Redis node, Durable Object
  const status = await locks.status("renders");  // { limit, holders: [{ id, mode, slot, fencingToken }], queued, … }
  // [/docs:tour]
  await Promise.all([permit?.release(), reader.release()]);
  return status.holders.length + MAX_PERMITS;
}
