import { EtcdLocks } from "edgelock";

const locks = new EtcdLocks({ endpoints: ["http://127.0.0.1:2379"] });

// Web Locks style: released when the callback settles (also when it throws).
await locks.request("nightly-report", { waitMs: 10_000 }, async (lock) => {
  await writeReport({ fencingToken: lock.fencingToken, signal: lock.signal });
});

// Or by hand.
const lock = await locks.acquire("nightly-report", { waitMs: 10_000 });
try {
  lock.signal.addEventListener("abort", () => console.warn("lost:", lock.signal.reason));
  await work(lock.fencingToken);
} finally {
  await lock.release();
}
await locks.close();
