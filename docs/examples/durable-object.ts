import { DurableObjectLocks, lockServiceRouter } from "edgelock";
import type { DurableObjectNamespaceLike } from "edgelock";

// [docs:url]
// From anywhere, through the Worker's front (its bearer token):
const locks = new DurableObjectLocks({ url: "https://jobs.example.workers.dev/lock", token: process.env.EDGELOCK_API_TOKEN });
await locks.request("reports:daily", async (lock) => { /* … lock.fencingToken … */ });
// [/docs:url]
await locks.close();

export function inWorker(env: { EDGELOCK_LOCKS: DurableObjectNamespaceLike }): DurableObjectLocks {
  // [docs:binding]
  const locks = new DurableObjectLocks({ binding: "LOCKS", bindings: { LOCKS: lockServiceRouter(env.EDGELOCK_LOCKS) } });
  // [/docs:binding]
  return locks;
}
