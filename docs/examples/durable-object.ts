import { DurableObjectLocks } from "edgelock";

// From anywhere, through the Worker's front (its bearer token):
const locks = new DurableObjectLocks({ url: "https://jobs.example.workers.dev/lock", token: process.env.EDGELOCK_API_TOKEN });
await locks.request("reports:daily", async (lock) => { /* … lock.fencingToken … */ });
