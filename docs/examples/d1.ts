import { D1Locks, d1Binding } from "edgelock"; // the workerd export
const locks = new D1Locks({ binding: "DB", bindings: { DB: d1Binding(env.DB) } });
await locks.request("nightly", async (lock) => writeWith(lock.fencingToken));
