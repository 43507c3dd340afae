import { EtcdLocks } from "edgelock";

const locks = new EtcdLocks({ endpoints: ["http://127.0.0.1:2379"] });
const signal = AbortSignal.timeout(60_000);

export async function short(): Promise<void> {
  // [docs:election]
  const me = await locks.campaign("scheduler", "node-a:8080", { signal });  // waits until leader
  await me.proclaim("node-a:9090");
  for await (const leader of locks.observe("scheduler", { signal })) console.log(leader?.value ?? "nobody leads");
  await me.resign();
  // [/docs:election]
}

// [docs:package]
// Leader election: campaign waits until this client leads "scheduler".
const me = await locks.campaign("scheduler", "node-a:8080", { signal });
me.fencingToken;                 // strictly increases across leaders
await me.proclaim("node-a:9090"); // only while still leader (checked on the backend)
await locks.leader("scheduler");  // { value: "node-a:9090", fencingToken } or null
for await (const leader of locks.observe("scheduler", { signal })) {
  console.log(leader?.value ?? "nobody leads");   // the current leader first, then every change
}
await me.resign();               // the next candidate in line takes over

// All or none: every name of the set, or nothing held.
const set = await locks.acquireAll(["account:1", "account:2"], { waitMs: 5_000 });
set.locks[0].fencingToken;       // each lock has its own token
await set.release();
// [/docs:package]
await locks.close();
